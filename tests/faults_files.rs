//! Fault injection against the real binary, the file side: the daemon
//! SIGKILLed in the middle of a move across file systems and of an archive,
//! then restarted; and a full disk (a small tmpfs the test mounts) on the
//! write paths not covered by tests/files.rs and tests/envd.rs (resumable
//! upload, envd multipart, archive, move across file systems). Each time: a
//! clear 507 JSON error or the old state, no temp file left, the daemon
//! healthy, the next call served. docs/RELIABILITY.md lists every fault test.

// Tests are separate processes without the daemon's reaper: waiting on their own children is fine.
#![allow(clippy::disallowed_methods)]

mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::{SmallDisk, TestServer};
use nix::sys::signal::Signal;
use serde_json::{json, Value};

/// `len` bytes no compressor shrinks: a 1 MiB xorshift block, repeated
/// (deflate's window is 32 KiB), cheap to make in a debug build.
fn noise(len: usize, seed: u64) -> Vec<u8> {
    let mut state = seed | 1;
    let block: Vec<u8> = (0..(1 << 20).min(len))
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 24) as u8
        })
        .collect();
    let mut bytes = Vec::with_capacity(len);
    while bytes.len() < len {
        bytes.extend_from_slice(&block[..block.len().min(len - bytes.len())]);
    }
    bytes
}

/// Names in `dir`, sorted.
fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .expect("read_dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into())
        .collect();
    names.sort();
    names
}

/// Waits until the server holds a descriptor of a file under `dir` (its
/// unnamed temp file there: the operation is under way), then SIGKILLs it.
fn kill_while_writing_under<T: std::fmt::Debug>(
    server: &mut TestServer,
    dir: &Path,
    call: &tokio::task::JoinHandle<T>,
) {
    let fds = format!("/proc/{}/fd", server.pid());
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let writing = std::fs::read_dir(&fds)
            .map(|entries| entries.flatten().any(|e| std::fs::read_link(e.path()).is_ok_and(|l| l.starts_with(dir))))
            .unwrap_or(false);
        if writing {
            break;
        }
        assert!(!call.is_finished(), "the call ended before the server wrote under {}", dir.display());
        assert!(Instant::now() < deadline, "the server never started writing under {}", dir.display());
    }
    assert!(server.signal_and_wait(Signal::SIGKILL, Duration::from_secs(10)).is_some(), "the server died");
}

async fn call(server: &TestServer, method: reqwest::Method, path: &str, body: Option<Value>) -> (u16, Value) {
    let mut request = server.http().request(method, server.at(path)).header("authorization", server.bearer());
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await.expect("send");
    (response.status().as_u16(), response.json().await.unwrap_or(Value::Null))
}

async fn assert_healthy(server: &TestServer) {
    assert!(server.client().health().await.expect("health"), "the daemon answers after the fault");
}

// The call runs on another worker while this one watches the server's descriptors.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_mid_move_across_file_systems_leaves_the_source_whole() {
    let top = tempfile::tempdir().expect("tempdir");
    let base = top.path().canonicalize().expect("canonical").join("base");
    let mnt = base.join("mnt");
    std::fs::create_dir_all(&mnt).expect("mkdir");
    let Some(_disk) = SmallDisk::mount_at(&mnt, "256m") else { return };
    let content = noise(96 << 20, 3);
    std::fs::write(base.join("big.bin"), &content).expect("write");
    let mut server = common::server().base_dir(&base).start();
    let (url, bearer) = (server.at("/files/move"), server.bearer());
    let moving = tokio::spawn(async move {
        let body = json!({"source": "big.bin", "destination": "mnt/big.bin"});
        reqwest::Client::new().post(url).header("authorization", bearer).json(&body).send().await
    });
    kill_while_writing_under(&mut server, &mnt, &moving);
    assert!(moving.await.expect("join").is_err(), "the move was cut, not answered");
    assert_eq!(names(&mnt), Vec::<String>::new(), "nothing half-copied is left on the other disk");
    assert!(std::fs::read(base.join("big.bin")).expect("source") == content, "the source is whole");
    let server = common::server().base_dir(&base).start();
    let (status, body) = call(
        &server,
        reqwest::Method::POST,
        "/files/move",
        Some(json!({"source": "big.bin", "destination": "mnt/big.bin"})),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert!(std::fs::read(mnt.join("big.bin")).expect("moved") == content);
    assert!(!base.join("big.bin").exists());
}

// The call runs on another worker while this one watches the server's descriptors.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_mid_archive_leaves_no_temp_file() {
    let top = tempfile::tempdir().expect("tempdir");
    let (base, tmp) = (top.path().join("base"), top.path().canonicalize().expect("canonical").join("tmp"));
    std::fs::create_dir_all(base.join("t")).expect("mkdir");
    std::fs::create_dir(&tmp).expect("mkdir");
    for i in 0..16 {
        std::fs::write(base.join(format!("t/f{i:02}.bin")), noise(2 << 20, i)).expect("write");
    }
    let start = |base: &Path, tmp: &Path| common::server().base_dir(base).env("TMPDIR", tmp.to_str().expect("utf-8"));
    let mut server = start(&base, &tmp).start();
    let client = server.client();
    let archiving = tokio::spawn(async move { client.archive(&["t".to_string()], "zip").await.map(|b| b.len()) });
    kill_while_writing_under(&mut server, &tmp, &archiving);
    assert!(archiving.await.expect("join").is_err(), "the archive was cut, not answered");
    assert_eq!(names(&tmp), Vec::<String>::new(), "no temp file is left");
    assert_eq!(names(&base.join("t")).len(), 16, "the archived files are untouched");
    let server = start(&base, &tmp).start();
    // (One file: a debug build archives a few MB a second.)
    let bytes = server.client().archive(&["t/f00.bin".to_string()], "zip").await.expect("archive after the restart");
    let mut zip = zip::ZipArchive::new(std::io::Cursor::new(bytes)).expect("zip");
    assert_eq!(zip.by_index(0).expect("member").size(), 2 << 20);
    assert_eq!(names(&tmp), Vec::<String>::new());
}

#[tokio::test]
async fn a_full_disk_on_every_other_write_path_is_507_and_leaves_nothing() {
    let Some(disk) = SmallDisk::mount() else { return };
    let full = disk.path.clone();
    std::fs::write(full.join("old.bin"), b"old").expect("write");
    let server = common::server().base_dir(&full).start();
    let big = noise(2 << 20, 9);
    let check = |what: &str, status: u16, body: &Value| {
        assert_eq!(status, 507, "{what}: {body}");
        assert_eq!(names(&full), ["old.bin"], "{what} left something");
        assert_eq!(std::fs::read(full.join("old.bin")).expect("read"), b"old", "{what}");
    };
    // A resumable upload, sent whole.
    let size = big.len();
    let response = server
        .http()
        .put(server.at(&format!("/files/content?path=old.bin&offset=0&size={size}")))
        .header("authorization", server.bearer())
        .body(big.clone())
        .send()
        .await
        .expect("put");
    let status = response.status().as_u16();
    let body: Value = response.json().await.expect("json");
    assert_eq!(body["code"], "insufficient_storage", "{body}");
    check("resumable upload", status, &body);
    assert_healthy(&server).await;
    // envd's multipart upload.
    let boundary = "fault-boundary";
    let mut form =
        format!("--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"new.bin\"\r\n\r\n")
            .into_bytes();
    form.extend_from_slice(&big);
    form.extend_from_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
    let response = reqwest::Client::new()
        .post(format!("{}/files?path=new.bin", common::envd::envd(&server)))
        .header("x-access-token", common::TOKEN)
        .header("content-type", format!("multipart/form-data; boundary={boundary}"))
        .body(form)
        .send()
        .await
        .expect("multipart");
    let status = response.status().as_u16();
    let body: Value = response.json().await.expect("json");
    check("envd multipart", status, &body);
    assert_healthy(&server).await;
}

#[tokio::test]
async fn a_full_disk_under_an_archive_or_a_move_is_507() {
    let Some(disk) = SmallDisk::mount() else { return };
    let top = tempfile::tempdir().expect("tempdir");
    let base: PathBuf = top.path().canonicalize().expect("canonical").join("base");
    std::fs::create_dir_all(base.join("t")).expect("mkdir");
    std::fs::write(base.join("t/big.bin"), noise(2 << 20, 4)).expect("write");
    let mnt = base.join("mnt");
    std::fs::create_dir(&mnt).expect("mkdir");
    let Some(_other) = SmallDisk::mount_at(&mnt, "1m") else { return };
    let server = common::server().base_dir(&base).env("TMPDIR", disk.path.to_str().expect("utf-8")).start();
    // The archive's temp file fills its disk.
    let (status, body) =
        call(&server, reqwest::Method::POST, "/files/archive", Some(json!({"paths": ["t"], "format": "zip"}))).await;
    assert_eq!((status, body["code"].as_str()), (507, Some("insufficient_storage")), "{body}");
    assert_eq!(names(&disk.path), Vec::<String>::new(), "no temp file is left");
    assert_healthy(&server).await;
    // A move to another, full file system copies: the source stays.
    let (status, body) = call(
        &server,
        reqwest::Method::POST,
        "/files/move",
        Some(json!({"source": "t/big.bin", "destination": "mnt/big.bin"})),
    )
    .await;
    assert_eq!((status, body["code"].as_str()), (507, Some("insufficient_storage")), "{body}");
    assert_eq!(names(&mnt), Vec::<String>::new(), "nothing half-copied is left");
    assert_eq!(std::fs::metadata(base.join("t/big.bin")).expect("source").len(), 2 << 20);
    assert_healthy(&server).await;
}
