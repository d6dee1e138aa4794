//! Regression tests of the red-team findings on files (issue 21): each
//! reproduces the attack against the real binary and checks it now fails.
//!
//! - Ownership given by path during a `RENAME_EXCHANGE` race (defect 1).
//! - A gzip bomb on envd `POST /files` (defect 3).
//! - A denied entry deeper than the tree check looked (defect 7).
//! - NUL bytes in envd paths (defect 10).

#![allow(clippy::disallowed_methods)] // tests drive the binary from outside; no reaper here

mod common;

use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use serde_json::{json, Value};

use common::envd::{call, envd};

const NOBODY: u32 = 65534;

fn policy_file(dir: &Path, policy: &Value) -> String {
    let path = dir.join("policy.json");
    std::fs::write(&path, policy.to_string()).expect("policy");
    path.display().to_string()
}

/// Swaps `a` and `b` (a directory and a symlink) with `RENAME_EXCHANGE` until told to stop.
fn keep_swapping(a: PathBuf, b: PathBuf, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<u64> {
    std::thread::spawn(move || {
        let mut swaps = 0;
        while !stop.load(Ordering::Relaxed) {
            let flags = nix::fcntl::RenameFlags::RENAME_EXCHANGE;
            if nix::fcntl::renameat2(nix::fcntl::AT_FDCWD, &a, nix::fcntl::AT_FDCWD, &b, flags).is_ok() {
                swaps += 1;
            }
        }
        swaps
    })
}

/// Entries of `dir` that belong to `uid`.
fn owned_by(dir: &Path, uid: u32) -> Vec<String> {
    let entries = std::fs::read_dir(dir).expect("read_dir").map(|e| e.expect("entry"));
    entries
        .filter(|e| e.metadata().is_ok_and(|m| m.uid() == uid))
        .map(|e| e.file_name().to_string_lossy().into())
        .collect()
}

/// Defect 1: uploads and `MakeDir` as `nobody` while a directory of the path
/// is swapped with a symlink to an outside directory. Ownership used to be
/// given by path after the write, so root-owned files and directories
/// outside the base directory ended up owned by `nobody`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ownership_is_given_through_descriptors_not_paths() {
    if !nix::unistd::Uid::effective().is_root() {
        eprintln!("skipped: acting as another user needs root");
        return;
    }
    let server = common::start();
    let outside = server.dir().join("outside");
    std::fs::create_dir(&outside).expect("outside");
    const ROUNDS: usize = 150;
    for i in 0..ROUNDS {
        std::fs::write(outside.join(format!("f{i}")), b"root's").expect("outside file");
        std::fs::create_dir(outside.join(format!("m{i}"))).expect("outside dir");
    }
    std::fs::create_dir(server.base.join("d")).expect("d");
    std::os::unix::fs::symlink(&outside, server.base.join("swap")).expect("symlink");
    let stop = Arc::new(AtomicBool::new(false));
    let swapper = keep_swapping(server.base.join("d"), server.base.join("swap"), Arc::clone(&stop));
    let client = reqwest::Client::new();
    let mut written = 0;
    for i in 0..ROUNDS {
        let response = client
            .post(format!("{}/files?path=d/f{i}&username=nobody", envd(&server)))
            .header("x-access-token", common::TOKEN)
            .header("content-type", "application/octet-stream")
            .body("mine")
            .send()
            .await
            .expect("upload");
        written += usize::from(response.status().is_success());
        let path = json!({"path": format!("d/m{i}"), "username": "nobody"});
        let _ = call(&server, "filesystem.Filesystem/MakeDir", path, Some(common::TOKEN)).await;
    }
    stop.store(true, Ordering::Relaxed);
    assert!(swapper.join().expect("swapper") > 0);
    assert!(written > 0, "some uploads landed inside");
    assert_eq!(owned_by(&outside, NOBODY), Vec::<String>::new(), "nothing outside changed hands");
    // The swaps may have left either name on the real directory: what landed there is nobody's.
    let real =
        ["d", "swap"].map(|n| server.base.join(n)).into_iter().find(|p| p.symlink_metadata().is_ok_and(|m| m.is_dir()));
    let landed = owned_by(&real.expect("the real directory"), NOBODY);
    assert!(!landed.is_empty(), "uploads and directories inside are given to nobody");
}

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    encoder.write_all(data).expect("compress");
    encoder.finish().expect("finish")
}

/// The peak resident memory of `pid`, in MiB.
fn peak_rss_mib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).expect("VmHWM");
    line.split_whitespace().nth(1).and_then(|kb| kb.parse::<u64>().ok()).expect("kB") / 1024
}

async fn upload_gzip(server: &common::TestServer, path: &str, body: Vec<u8>) -> (u16, String) {
    let response = reqwest::Client::new()
        .post(format!("{}/files?path={path}", envd(server)))
        .header("x-access-token", common::TOKEN)
        .header("content-type", "application/octet-stream")
        .header("content-encoding", "gzip")
        .body(body)
        .send()
        .await
        .expect("upload");
    (response.status().as_u16(), response.text().await.unwrap_or_default())
}

/// Defect 3: a small gzip of a large run of zeros, sent concurrently. It used
/// to be inflated whole in memory (about 400 MB per request) and written out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gzip_bomb_is_refused_in_bounded_memory() {
    let server = common::start();
    let bomb = gzip(&vec![0u8; 256 * 1024 * 1024]);
    assert!(bomb.len() < 2 * 1024 * 1024, "a bomb: {} bytes", bomb.len());
    let names: Vec<String> = (0..3).map(|i| format!("bomb{i}")).collect();
    let sends = names.iter().map(|name| upload_gzip(&server, name, bomb.clone()));
    for (status, body) in futures_util::future::join_all(sends).await {
        assert_eq!(status, 413, "{body}");
        assert!(body.contains("inflates to more than 100 times"), "{body}");
    }
    for i in 0..3 {
        assert!(!server.base.join(format!("bomb{i}")).exists(), "nothing written");
    }
    assert_eq!(std::fs::read_dir(&server.base).expect("read_dir").count(), 0, "no temp file left");
    let peak = peak_rss_mib(server.pid());
    assert!(peak < 120, "the daemon peaked at {peak} MiB");

    // The ratio is configurable (0: off); the size limits still apply to the inflated bytes.
    let dir = tempfile::tempdir().expect("tempdir");
    let policy = json!({"endpoints": {"files_upload_stream": {"limits": {"max_bytes": 4 * 1024 * 1024}}}});
    let limited =
        common::server().args(["--max-inflate-ratio", "0", "--policy", &policy_file(dir.path(), &policy)]).start();
    let (status, body) = upload_gzip(&limited, "big", gzip(&vec![7u8; 5 * 1024 * 1024])).await;
    assert_eq!(status, 413, "max_bytes applies to the inflated size: {body}");
    assert!(!limited.base.join("big").exists());
    let (status, body) = upload_gzip(&limited, "fits", gzip(&vec![7u8; 3 * 1024 * 1024])).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(std::fs::metadata(limited.base.join("fits")).expect("written").len(), 3 * 1024 * 1024);
    let (status, body) = upload_gzip(&limited, "bad", b"not gzip".to_vec()).await;
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("invalid gzip body"), "{body}");
}

/// A directory chain `depth` levels deep under `base/top`, with `key.pem` at the bottom.
fn deep_tree(base: &Path, depth: usize) -> PathBuf {
    let mut dir = base.join("top");
    for _ in 1..depth {
        dir.push("d");
    }
    std::fs::create_dir_all(&dir).expect("mkdir -p");
    std::fs::write(dir.join("key.pem"), b"secret").expect("key");
    dir.join("key.pem")
}

/// Defect 7: `key.pem` is denied, but 71 levels down the check that
/// protects it never looked (it stopped at 64), so its ancestor could be
/// deleted or moved away, on the API and on envd.
#[tokio::test]
async fn a_denied_entry_protects_its_ancestors_at_any_depth() {
    let dir = tempfile::tempdir().expect("tempdir");
    let policy = json!({"endpoints": {"files_*": {"paths": {"deny": ["*.pem"]}}}});
    let server = common::server().args(["--policy", &policy_file(dir.path(), &policy)]).start();
    let key = deep_tree(&server.base, 71);
    let client = reqwest::Client::new();
    let delete = client.delete(server.at("/files?path=top")).bearer_auth(common::TOKEN).send().await.expect("delete");
    let status = delete.status().as_u16();
    let body: Value = delete.json().await.expect("json");
    assert_eq!((status, body["code"].as_str()), (403, Some("path_denied")), "{body}");
    let moved = client
        .post(server.at("/files/move"))
        .bearer_auth(common::TOKEN)
        .json(&json!({"source": "top", "destination": "elsewhere"}))
        .send()
        .await
        .expect("move");
    assert_eq!(moved.status().as_u16(), 403);
    let token = Some(common::TOKEN);
    let (status, body) = call(&server, "filesystem.Filesystem/Remove", json!({"path": "top"}), token).await;
    assert_eq!((status, body["code"].as_str()), (403, Some("permission_denied")), "{body}");
    let (status, body) =
        call(&server, "filesystem.Filesystem/Move", json!({"source": "top", "destination": "gone"}), token).await;
    assert_eq!((status, body["code"].as_str()), (403, Some("permission_denied")), "{body}");
    assert_eq!(std::fs::read(&key).expect("still there"), b"secret");

    // Without a denied entry, a deep tree goes.
    let chain: PathBuf = std::iter::once("flat").chain(std::iter::repeat_n("d", 100)).collect();
    std::fs::create_dir_all(server.base.join(&chain)).expect("mkdir -p");
    let (status, body) = call(&server, "filesystem.Filesystem/Remove", json!({"path": "flat"}), token).await;
    assert_eq!(status, 200, "{body}");
    assert!(!server.base.join("flat").exists());
}

/// Defect 10: envd paths with a NUL byte answered 500 (`Stat`, `Move`'s
/// destination) or 200 as if something had been removed (`Remove`).
#[tokio::test]
async fn nul_bytes_in_envd_paths_are_invalid_arguments() {
    let server = common::start();
    std::fs::write(server.base.join("f"), b"1").expect("write");
    let token = Some(common::TOKEN);
    for (method, body) in [
        ("Stat", json!({"path": "f\u{0}x"})),
        ("Remove", json!({"path": "f\u{0}"})),
        ("Move", json!({"source": "f", "destination": "g\u{0}h"})),
        ("Move", json!({"source": "f\u{0}", "destination": "g"})),
        ("MakeDir", json!({"path": "n\u{0}d"})),
        ("ListDir", json!({"path": "\u{0}"})),
    ] {
        let (status, answer) = call(&server, &format!("filesystem.Filesystem/{method}"), body.clone(), token).await;
        assert_eq!((status, answer["code"].as_str()), (400, Some("invalid_argument")), "{method} {body}: {answer}");
        assert!(answer["message"].as_str().is_some_and(|m| m.contains("NUL")), "{answer}");
    }
    assert_eq!(std::fs::read(server.base.join("f")).expect("untouched"), b"1");
    assert!(!server.base.join("g").exists() && !server.base.join("n").exists());
    let upload = reqwest::Client::new()
        .post(format!("{}/files?path=a%00b", envd(&server)))
        .header("x-access-token", common::TOKEN)
        .header("content-type", "application/octet-stream")
        .body("x")
        .send()
        .await
        .expect("upload");
    assert_eq!(upload.status().as_u16(), 400);
}
