//! Fuzz targets: the daemon's parsers of hostile input, one function each.
//!
//! Each target takes arbitrary bytes, drives one parser the way the server
//! does, and checks what must hold whatever the input (a panic is a
//! finding). The same functions run under libFuzzer (`fuzz/`, `cargo fuzz`,
//! nightly; `scripts/fuzz`) and, on the stable toolchain, over the committed
//! corpora plus random mutations of them (`tests/fuzz.rs`, part of
//! `cargo test`). See `docs/RELIABILITY.md`.
//!
//! Not part of the daemon's API: public only so the fuzz crate can call it.

use std::os::fd::AsRawFd;
use std::os::unix::fs::{symlink, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use abx_domain::fs::safe;
use abx_domain::policy::{Op, PathGuard};
use bytes::Bytes;
use futures_util::StreamExt;

use crate::http::envd::connect;
use crate::http::files::json_upload::scan::{Event, Scanner};

/// A fuzz target: takes arbitrary bytes, panics on a finding.
pub type Target = fn(&[u8]);

/// Every target, by the name its corpus folder and libFuzzer binary carry.
pub const TARGETS: [(&str, Target); 7] = [
    ("path_confinement", path_confinement),
    ("upload_scanner", upload_scanner),
    ("connect_envelopes", connect_envelopes),
    ("policy_document", policy_document),
    ("pty_message", pty_message),
    ("multipart", multipart),
    ("range", range),
];

/// The first byte of `data` (0 when empty) and the rest.
fn split_first(data: &[u8]) -> (u8, &[u8]) {
    data.split_first().map_or((0, data), |(first, rest)| (*first, rest))
}

/// A directory tree with symlinks that lead out of its root, built once per process.
struct World {
    _dir: tempfile::TempDir,
    root: PathBuf,
    guard: PathGuard,
    /// (device, inode) of what lies outside the root.
    forbidden: Vec<(u64, u64)>,
}

fn world() -> &'static World {
    static WORLD: OnceLock<World> = OnceLock::new();
    WORLD.get_or_init(|| {
        let dir = tempfile::tempdir().expect("fuzz: tempdir");
        let top = dir.path().canonicalize().expect("fuzz: canonical");
        let (root, outside) = (top.join("root"), top.join("outside"));
        for d in [root.join("a/b"), outside.join("b")] {
            std::fs::create_dir_all(d).expect("fuzz: mkdir");
        }
        std::fs::write(root.join("a/f"), b"inside").expect("fuzz: write");
        std::fs::write(outside.join("secret"), b"secret").expect("fuzz: write");
        let links: [(&str, String); 8] = [
            ("up", "..".into()),
            ("out", outside.display().to_string()),
            ("rel", "../outside/secret".into()),
            ("a/deep", "../../outside".into()),
            ("a/b/self", "../b".into()),
            ("loop1", "loop2".into()),
            ("loop2", "loop1".into()),
            ("etc", "/etc".into()),
        ];
        for (name, target) in links {
            symlink(target, root.join(name)).expect("fuzz: symlink");
        }
        let id = |p: &Path| std::fs::metadata(p).map(|m| (m.dev(), m.ino())).expect("fuzz: stat");
        let forbidden = [outside.clone(), outside.join("secret"), outside.join("b"), top.clone(), PathBuf::from("/")]
            .iter()
            .map(|p| id(p))
            .collect();
        let rules = abx_domain::policy::rules::compile(&[], true).expect("fuzz: rules");
        let rule = rules.iter().find(|r| r.endpoint.id == "files_stat").expect("fuzz: files_stat");
        let guard = PathGuard::new(&root, rule);
        World { _dir: dir, root, guard, forbidden }
    })
}

/// Path resolution and confinement: whatever the path, what resolves lies
/// under the root, and what opens (the race-safe way) is inside it too.
pub fn path_confinement(data: &[u8]) {
    let world = world();
    let (selector, rest) = split_first(data);
    let raw = String::from_utf8_lossy(rest);
    let op = [Op::Read, Op::Write, Op::Delete, Op::Exec][usize::from(selector % 4)];
    let Ok(target) = safe::resolve(&world.guard, &raw, op, "") else { return };
    assert!(target.path.starts_with(&world.root), "{raw:?} resolved to {}", target.path.display());
    let flags = nix::fcntl::OFlag::O_PATH;
    let Ok(fd) = safe::open(&world.guard, &target, flags, nix::sys::stat::Mode::empty(), op) else { return };
    let real = std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd())).expect("fuzz: proc fd");
    assert!(real.starts_with(&world.root), "{raw:?} opened {}", real.display());
    let st = nix::sys::stat::fstat(&fd).expect("fuzz: fstat");
    assert!(!world.forbidden.contains(&(st.st_dev, st.st_ino)), "{raw:?} opened a forbidden inode");
}

/// What one scan of a body left: kept whole, the rest, the content taken, the path seen.
type Scanned = (bool, Vec<u8>, Vec<u8>, Option<Vec<u8>>);

fn scan(body: &[u8], frame: usize) -> Scanned {
    let mut scanner = Scanner::default();
    let (mut content, mut path) = (Vec::new(), None);
    for chunk in body.chunks(frame.max(1)) {
        let mut input = chunk;
        while let Some(event) = scanner.feed(&mut input) {
            match event {
                Event::ContentStart => path = scanner.path().map(<[u8]>::to_vec),
                Event::Piece => {
                    assert!(scanner.staged().len() <= abx_domain::fs::b64::PIECE, "a piece larger than PIECE");
                    content.extend_from_slice(scanner.staged());
                    scanner.written();
                }
            }
        }
    }
    scanner.end();
    assert_eq!(scanner.elided(), content.len(), "every piece taken is elided");
    let shadow = scanner.shadow();
    assert_eq!(shadow.len(), body.len(), "the shadow keeps the body's length");
    (scanner.whole(), scanner.rest().to_vec(), content, path)
}

/// The JSON upload scanner: whatever the body and its framing, the body is
/// exactly the kept rest with the taken content put back, and the result
/// does not depend on where frames were cut.
pub fn upload_scanner(data: &[u8]) {
    let (frame, body) = split_first(data);
    let whole = scan(body, body.len());
    let framed = scan(body, usize::from(frame % 64) + 1);
    assert_eq!(whole, framed, "the framing changed the scan");
    let (kept_whole, rest, content, _) = whole;
    if kept_whole || content.is_empty() {
        assert_eq!(rest.len() + content.len(), body.len());
        if kept_whole {
            assert_eq!(rest, body, "a body kept whole is kept as it came");
        }
        return;
    }
    // The content was taken from one place: the rest and the body agree up to it.
    let at = rest.iter().zip(body).take_while(|(a, b)| a == b).count();
    let mut rebuilt = rest[..at].to_vec();
    rebuilt.extend_from_slice(&content);
    rebuilt.extend_from_slice(&rest[at..]);
    assert_eq!(rebuilt, body, "rest + content is the body");
}

/// Connect envelope framing: the messages of a client stream do not depend
/// on how the body was cut, and each message re-encodes to its bytes.
pub fn connect_envelopes(data: &[u8]) {
    let (frame, body) = split_first(data);
    let mut whole = body.to_vec();
    let mut messages = Vec::new();
    let mut consumed = Vec::new();
    let outcome = loop {
        match connect::split_envelope(&mut whole) {
            Ok(Some((flags, payload))) => {
                consumed.extend_from_slice(&connect::envelope(flags, &payload));
                messages.push((flags, payload));
            }
            Ok(None) => break Ok(()),
            Err(e) => break Err(e.code),
        }
    };
    if outcome.is_ok() {
        assert_eq!([consumed.as_slice(), whole.as_slice()].concat(), body, "envelopes re-encode to the body");
    }
    // The same body through the streaming reader, in frames.
    let chunks: Vec<Result<Bytes, std::io::Error>> =
        body.chunks(usize::from(frame % 16) + 1).map(|c| Ok(Bytes::copy_from_slice(c))).collect();
    let stream = connect::stream_messages::<serde_json::Value>(axum::body::Body::from_stream(
        futures_util::stream::iter(chunks),
    ));
    let streamed: Vec<_> = block_on(stream.collect::<Vec<_>>());
    let expected = messages.iter().take_while(|(flags, _)| flags & 0x02 == 0).count();
    let decoded = streamed.iter().filter(|m| m.is_ok()).count();
    assert!(decoded <= expected, "more messages streamed than the body holds");
    assert!(streamed.iter().rev().skip(1).all(Result::is_ok), "nothing is read past an error");
}

/// Runs `future` on this thread's current-thread runtime.
fn block_on<F: std::future::Future>(future: F) -> F::Output {
    thread_local! {
        static RUNTIME: tokio::runtime::Runtime =
            tokio::runtime::Builder::new_current_thread().enable_all().build().expect("fuzz: runtime");
    }
    RUNTIME.with(|runtime| runtime.block_on(future))
}

/// The policy document parser: any JSON is accepted or refused with a
/// message, never a panic; an accepted one compiles into rules.
pub fn policy_document(data: &[u8]) {
    let Ok(value) = serde_json::from_slice::<serde_json::Value>(data) else { return };
    match abx_domain::policy::document::parse(&value) {
        Ok(document) => {
            if let Err(e) = abx_domain::policy::rules::compile(&document.layers, true) {
                assert!(!e.to_string().is_empty(), "a refusal says why");
            }
        }
        Err(e) => assert!(!e.to_string().is_empty(), "a refusal says why"),
    }
}

/// The PTY WebSocket message parser: every message is understood or
/// refused with a reason; sizes stay within bounds.
pub fn pty_message(data: &[u8]) {
    use abx_domain::pty::request::{parse_message, ClientMessage, MAX_SIDE};
    let text = String::from_utf8_lossy(data);
    match parse_message(&text, (80, 24)) {
        Ok(ClientMessage::Resize(cols, rows)) => {
            let max = u16::try_from(MAX_SIDE).unwrap_or(u16::MAX);
            assert!((1..=max).contains(&cols) && (1..=max).contains(&rows), "size {cols}x{rows}");
        }
        Ok(ClientMessage::Input(_) | ClientMessage::Signal(_)) => {}
        Err(reason) => assert!(!reason.is_empty(), "a refusal says why"),
    }
}

/// The multipart parser as envd's `/files` drives it: the first line is the
/// `Content-Type`, the rest the body; the fields read do not depend on the framing.
pub fn multipart(data: &[u8]) {
    let (frame, data) = split_first(data);
    let (head, body) = match memchr::memchr(b'\n', data) {
        Some(at) => (&data[..at], &data[at + 1..]),
        None => (data, &[][..]),
    };
    let Ok(boundary) = multer::parse_boundary(String::from_utf8_lossy(head)) else { return };
    let read = |size: usize| {
        let chunks: Vec<Result<Bytes, std::io::Error>> =
            body.chunks(size).map(|c| Ok(Bytes::copy_from_slice(c))).collect();
        let mut form = multer::Multipart::new(futures_util::stream::iter(chunks), boundary.clone());
        block_on(async move {
            let mut fields = Vec::new();
            loop {
                match form.next_field().await {
                    Ok(Some(field)) => {
                        let named = (field.name().map(str::to_string), field.file_name().map(str::to_string));
                        match field.bytes().await {
                            Ok(bytes) => fields.push(Ok((named, bytes))),
                            Err(_) => {
                                fields.push(Err(()));
                                break;
                            }
                        }
                    }
                    Ok(None) => break,
                    Err(_) => {
                        fields.push(Err(()));
                        break;
                    }
                }
            }
            fields
        })
    };
    let whole = read(body.len().max(1));
    let framed = read(usize::from(frame % 32) + 1);
    assert_eq!(whole, framed, "the framing changed the fields");
}

/// `Range` parsing: a range served lies inside the file; a refusal is only
/// ever "not satisfiable".
pub fn range(data: &[u8]) {
    let (size, header) = match data.split_at_checked(8) {
        Some((size, header)) => (u64::from_le_bytes(size.try_into().unwrap_or_default()), header),
        None => (u64::from(data.len() as u8), data),
    };
    // Small sizes are where the edge cases are.
    let size = if size & 1 == 0 { size >> 1 } else { size % 64 };
    let header = String::from_utf8_lossy(header);
    match abx_domain::fs::read::parse_range(Some(&header), size) {
        Ok(Some((first, last))) => assert!(first <= last && last < size, "{header:?} of {size}: {first}-{last}"),
        Ok(None) => {}
        Err(abx_domain::fs::FsError::RangeNotSatisfiable { size: said }) => assert_eq!(said, size),
        Err(other) => panic!("{header:?}: unexpected {other:?}"),
    }
}
