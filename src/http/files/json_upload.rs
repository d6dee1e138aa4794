//! `POST /files/upload-stream`: the reference's JSON upload, decoded and
//! written while its body arrives.
//!
//! The body is `{"path": "...", "content_base64": "..."}`. [`Scanner`]
//! follows its structure as frames arrive and keeps all of it (`rest`)
//! except the characters of the `content_base64` string, which go in
//! pieces to a [`Base64Upload`] once `path` is known: the file is written
//! while the body is still arriving, and the body is never held whole.
//!
//! Answers stay those of parsing the whole body. A piece leaves `rest`
//! only once it decoded, so it held nothing but base64 characters: when
//! `rest` does not parse, the same document with those characters replaced
//! by as many `A`s (the *shadow*: same length, same structure) gets the
//! same error from the same parser, at the same line and column. Bodies the
//! fast path does not take (content before path, escapes or invalid
//! characters in the content, a refused path) are kept whole and go the
//! plain way: parse, resolve, decode.

use std::borrow::Cow;

use abx_domain::fs::b64::Base64Upload;
use abx_domain::fs::{safe, WritePolicy};
use abx_domain::policy::Grant;
use abx_wire::api::files::TransferResponse;
use axum::extract::{Request, State};
use axum::Json;
use bytes::Bytes;
use futures_util::{Stream, StreamExt};
use serde_json::Value;

use super::{at, body_field};
use crate::http::error::ApiError;
use crate::http::extract::{parse_object, BodyLimit};
use crate::http::AppState;

pub(crate) mod scan;

use self::scan::{Event, Scanner};

/// `max_bytes` of the JSON upload when no policy sets one, as the reference.
const DEFAULT_UPLOAD_MAX_BYTES: u64 = 100 * 1024 * 1024;

/// `POST /files/upload-stream`.
pub async fn upload_stream(
    State(app): State<AppState>,
    grant: Grant,
    req: Request,
) -> Result<Json<TransferResponse>, ApiError> {
    let limit = req.extensions().get::<BodyLimit>().map_or(u64::MAX, |l| l.0);
    receive(&app, &grant, limit, req.into_body().into_data_stream(), Scanner::default()).await
}

/// Reads the body (at most `limit` bytes) with `scanner` (which chooses the
/// piece size; one told to keep the body whole from the start takes the
/// plain way, which the fast path must match) and answers.
async fn receive<S, E>(
    app: &AppState,
    grant: &Grant,
    limit: u64,
    mut body: S,
    mut scanner: Scanner,
) -> Result<Json<TransferResponse>, ApiError>
where
    S: Stream<Item = Result<Bytes, E>> + Unpin,
{
    let policy = WritePolicy::for_grant(grant, Some(DEFAULT_UPLOAD_MAX_BYTES));
    let mut upload: Option<Streaming> = None;
    let mut total = 0u64;
    while let Some(frame) = body.next().await {
        let frame = frame.map_err(|_| ApiError::payload_too_large(None, limit))?;
        total += frame.len() as u64;
        if total > limit {
            return Err(ApiError::payload_too_large(None, limit));
        }
        let mut input = &frame[..];
        while let Some(event) = scanner.feed(&mut input) {
            match event {
                Event::ContentStart => match begin(app, grant, &policy, &scanner).await {
                    Some(streaming) => upload = Some(streaming),
                    None => scanner.keep_whole(),
                },
                Event::Piece => {
                    let decoded = match upload.as_mut() {
                        Some(streaming) => streaming.upload.piece(scanner.staged()).await,
                        None => false,
                    };
                    if decoded {
                        scanner.written();
                    } else {
                        scanner.keep_whole();
                    }
                }
            }
        }
    }
    scanner.end();
    finish(app, grant, &policy, scanner, upload).await
}

/// An upload begun at the start of the content: the path as the body spells it, and the file.
struct Streaming {
    raw: String,
    target: safe::Resolved,
    upload: Base64Upload,
}

/// Starts writing when `path` came before the content and is a path this caller may write.
async fn begin(app: &AppState, grant: &Grant, policy: &WritePolicy, scanner: &Scanner) -> Option<Streaming> {
    let raw: String = serde_json::from_slice(scanner.path()?).ok().filter(|p: &String| !p.is_empty())?;
    let (target, upload) = Base64Upload::begin(&app.files, &grant.guard(), &raw, policy).await.ok()?;
    Some(Streaming { raw, target, upload })
}

/// The answer once the body is over: the streamed upload when the body
/// parses and names the same path, else the plain way over the shadow.
async fn finish(
    app: &AppState,
    grant: &Grant,
    policy: &WritePolicy,
    scanner: Scanner,
    upload: Option<Streaming>,
) -> Result<Json<TransferResponse>, ApiError> {
    let parsed = if scanner.whole() { None } else { upload_fields(&Bytes::copy_from_slice(scanner.rest())).ok() };
    let (mut streaming, rest) = match (parsed, upload) {
        (Some((raw, _)), Some(streaming)) if raw == streaming.raw => (streaming, Bytes::new()),
        (_, upload) => {
            let (raw, text) = upload_fields(&scanner.shadow())?;
            let elided = scanner.elided();
            match upload {
                Some(streaming) if streaming.raw == raw && streaming.upload.valid() && text.len() >= elided => {
                    (streaming, text.slice(elided..))
                }
                // A piece did not decode: the plain way fails on it too (or on an earlier check).
                Some(streaming) if !streaming.upload.valid() => {
                    return plain(app, grant, policy, raw, text, scanner.piece()).await
                }
                _ if elided > 0 => {
                    // Content already written cannot be read again; never write the filler.
                    tracing::error!("a JSON upload streamed content it cannot finish");
                    return Err(ApiError::internal());
                }
                _ => return plain(app, grant, policy, raw, text, scanner.piece()).await,
            }
        }
    };
    for piece in rest.chunks(scanner.piece()) {
        if !streaming.upload.piece(piece).await {
            break;
        }
    }
    let committed = streaming.upload.finish().await.map_err(at(grant))?;
    let path = streaming.target.path.display().to_string();
    Ok(Json(TransferResponse { path, bytes: committed.stat.size, etag: None }))
}

/// Resolves `raw` and writes the base64 `text` there.
async fn plain(
    app: &AppState,
    grant: &Grant,
    policy: &WritePolicy,
    raw: String,
    text: Bytes,
    piece: usize,
) -> Result<Json<TransferResponse>, ApiError> {
    let (target, committed) =
        Base64Upload::write(&app.files, &grant.guard(), &raw, policy, text, piece).await.map_err(at(grant))?;
    Ok(Json(TransferResponse { path: target.path.display().to_string(), bytes: committed.stat.size, etag: None }))
}

/// `path` and the `content_base64` text (a slice of `body` when it has no escapes).
fn upload_fields(body: &Bytes) -> Result<(String, Bytes), ApiError> {
    #[derive(serde::Deserialize)]
    struct Fields<'a> {
        path: Option<Value>,
        #[serde(borrow)]
        content_base64: Option<Cow<'a, str>>,
    }
    let fields: Fields<'_> = match serde_json::from_slice(body) {
        Ok(fields) => fields,
        Err(_) => {
            // Not the expected shape: let the generic parser name the problem, or treat fields as missing.
            let value: Value = parse_object(body)?;
            Fields { path: value.get("path").cloned(), content_base64: None }
        }
    };
    let raw = body_field(fields.path.and_then(|p| p.as_str().map(str::to_string)), "path")?;
    let text = match fields.content_base64 {
        Some(Cow::Borrowed(text)) => body.slice_ref(text.as_bytes()),
        Some(Cow::Owned(text)) => Bytes::from(text),
        None => return Err(ApiError::bad_request("Missing or invalid 'content_base64'")),
    };
    Ok((raw, text))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::convert::Infallible;
    use std::path::{Path, PathBuf};
    use std::sync::Arc;

    use axum::response::IntoResponse;
    use proptest::prelude::*;
    use tokio_util::sync::CancellationToken;

    use super::*;
    use abx_domain::policy::rules::{Layer, LimitValue, Rank, RuleSpec, Selector};
    use abx_domain::policy::{Credentials, ParamValue, PolicyDocument, PolicyEngine, PolicyInputs};
    use abx_wire::endpoints::{Limit, Param, ENDPOINTS};

    /// Pieces small enough that the bodies below cross their boundaries.
    const TEST_PIECE: usize = 4096;

    struct Setup {
        _dir: tempfile::TempDir,
        base: PathBuf,
        app: AppState,
        grant: Grant,
    }

    /// A server state whose upload rule is the default one, or (`strict`) one with a
    /// 6000-byte `max_bytes`, `.txt` refused and overwriting off.
    fn setup(strict: bool) -> Setup {
        let dir = tempfile::tempdir().expect("tempdir");
        let base = dir.path().canonicalize().expect("canonical");
        let document = strict.then(|| {
            let rule = RuleSpec {
                limits: BTreeMap::from([(Limit::MaxBytes, LimitValue::Int(6000))]),
                params: BTreeMap::from([
                    (Param::DenyExtensions, ParamValue::Strings(vec![".txt".into()])),
                    (Param::Overwrite, ParamValue::Bool(false)),
                ]),
                ..RuleSpec::default()
            };
            let selector = Selector::Exact("files_upload_stream".into());
            PolicyDocument {
                layers: vec![Layer { selector, rank: Rank::Policy, rule, origin: "test".into() }],
                ..PolicyDocument::default()
            }
        });
        let inputs =
            PolicyInputs { base_dir: base.clone(), base_dir_explicit: true, document, ..PolicyInputs::default() };
        let engine = Arc::new(PolicyEngine::new(inputs).expect("policy"));
        let endpoint = ENDPOINTS.iter().find(|e| e.id == "files_upload_stream").expect("endpoint");
        let identity = engine.authenticate(&Credentials::default()).expect("anonymous");
        let (grant, _permit) = engine.admit(endpoint, identity).expect("admitted");
        Setup { app: AppState::new(engine, CancellationToken::new()), grant, base, _dir: dir }
    }

    /// Every file under `dir`, with its content, by path.
    fn files(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
        let mut found = BTreeMap::new();
        for entry in std::fs::read_dir(dir).expect("read_dir") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                found.extend(files(&path));
            } else {
                found.insert(path.clone(), std::fs::read(&path).expect("read"));
            }
        }
        found
    }

    /// The answer and the files after `body` arrives in frames cut at `cuts`, over a
    /// directory holding only `f.bin` ("old").
    async fn answer(
        setup: &Setup,
        body: &[u8],
        cuts: &[usize],
        whole: bool,
    ) -> (u16, Value, BTreeMap<PathBuf, Vec<u8>>) {
        for entry in std::fs::read_dir(&setup.base).expect("read_dir") {
            let path = entry.expect("entry").path();
            if path.is_dir() { std::fs::remove_dir_all(path) } else { std::fs::remove_file(path) }.expect("clean");
        }
        std::fs::write(setup.base.join("f.bin"), b"old").expect("old file");
        let mut cuts: Vec<usize> = cuts.iter().map(|c| c % (body.len() + 1)).collect();
        cuts.extend([0, body.len()]);
        cuts.sort_unstable();
        let frames: Vec<Result<Bytes, Infallible>> =
            cuts.windows(2).map(|w| Ok(Bytes::copy_from_slice(&body[w[0]..w[1]]))).collect();
        let mut scanner = Scanner::with_piece(TEST_PIECE);
        if whole {
            scanner.keep_whole();
        }
        let result = receive(&setup.app, &setup.grant, 1 << 20, futures_util::stream::iter(frames), scanner).await;
        let response = match result {
            Ok(json) => json.into_response(),
            Err(error) => error.into_response(),
        };
        let status = response.status().as_u16();
        let bytes = axum::body::to_bytes(response.into_body(), usize::MAX).await.expect("body");
        (status, serde_json::from_slice(&bytes).expect("JSON answer"), files(&setup.base))
    }

    /// A body of the reference client's shape (or a variant), then maybe one byte changed.
    fn body() -> impl Strategy<Value = Vec<u8>> {
        let size = prop_oneof![0..8usize, 3060..3080usize, 6140..6160usize, 0..12_000usize];
        let path = prop::sample::select(vec![
            "\"f.bin\"",
            "\"d/n.bin\"",
            "\"a.txt\"",
            "\"\"",
            "7",
            "\"/etc/x\"",
            "\"f.bin\" ",
        ]);
        let layout = 0..7u8;
        let edit = prop::option::weighted(0.6, (any::<prop::sample::Index>(), 0..4u8, any::<u8>()));
        (size, any::<u64>(), path, layout, edit).prop_map(|(size, seed, path, layout, edit)| {
            let mut state = seed | 1;
            let data: Vec<u8> = (0..size)
                .map(|_| {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    (state >> 24) as u8
                })
                .collect();
            let text = base64::Engine::encode(&base64::engine::general_purpose::STANDARD, &data);
            let mut body = match layout {
                0 => format!(r#"{{"path": {path}, "content_base64": "{text}"}}"#),
                1 => format!(r#"{{"content_base64": "{text}", "path": {path}}}"#),
                2 => format!("{{\n  \"x\": {{\"content_base64\": \"QQ==\"}},\n  \"path\":{path},\"content_base64\" :\"{text}\" , \"y\": [1, \"}}\"]\n}}\n"),
                3 => format!(r#"{{"path": {path}, "content_base64": "{}"}}"#, text.replace('/', "\\/")),
                4 => format!(r#"{{"path": {path}, "content_base64": "{text}", "content_base64": "QQ=="}}"#),
                5 => format!(r#"{{"path": {path}, "path": "g.bin", "content_base64": "{text}"}}"#),
                _ => format!(r#"{{"path": {path}, "content_base64": "{text}"}} x"#),
            }
            .into_bytes();
            if let Some((at, kind, byte)) = edit {
                let at = at.index(body.len());
                let byte = [b'"', b'\\', b'=', b'\n', 0x01, 0xc3, b'}', byte][usize::from(byte % 8)];
                match kind {
                    0 => body.insert(at, byte),
                    1 => drop(body.remove(at)),
                    2 => body.truncate(at),
                    _ => body[at] = byte,
                }
            }
            body
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

        /// Whatever the body and its framing, the streamed answer and the files it leaves are
        /// those of reading the body whole first.
        #[test]
        fn streaming_answers_as_the_whole_body_would(
            body in body(),
            cuts in prop::collection::vec(any::<usize>(), 0..6),
            strict in any::<bool>(),
        ) {
            let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
            let setup = setup(strict);
            let (whole, streamed) = runtime.block_on(async {
                (answer(&setup, &body, &cuts, true).await, answer(&setup, &body, &cuts, false).await)
            });
            prop_assert_eq!(&streamed, &whole, "body {}", String::from_utf8_lossy(&body));
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_streamed_upload_writes_the_decoded_bytes() {
        let setup = setup(false);
        let data: Vec<u8> = (0..TEST_PIECE * 3 + 5).map(|i| (i * 31 % 256) as u8).collect();
        let text = base64::Engine::encode(&base64::engine::general_purpose::STANDARD, &data);
        let body = format!(r#"{{"path": "d/n.bin", "content_base64": "{text}"}}"#);
        let (status, answer, files) = answer(&setup, body.as_bytes(), &[10, 40, 5000, 9000], false).await;
        assert_eq!((status, answer["bytes"].as_u64()), (200, Some(data.len() as u64)), "{answer}");
        assert_eq!(files.get(&setup.base.join("d/n.bin")), Some(&data));
        assert_eq!(files.len(), 2, "the target and f.bin, no temp files: {:?}", files.keys());
    }
}
