//! Fault injection against the real binary: clients that go away in the
//! middle of a stream. A download cut after its first bytes (API port,
//! JSON download, envd port) gives its descriptors back and leaves the file
//! whole for the next reader; an envd `Start` stream cut in the middle of
//! the output loses nothing (the process runs on, and `Connect` replays all
//! of it, then the exit); an abandoned `/shell` request has its command's
//! process group terminated. `/shell/stream` and the code port's
//! `/execute` have theirs in tests/process.rs and tests/code.rs.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use base64::Engine;
use serde_json::{json, Value};

use common::envd::{envd, Frames};
use common::TestServer;

/// Open descriptors of `pid`.
fn fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map(Iterator::count).unwrap_or(0)
}

/// What each descriptor of `pid` is (`socket:[123]`, `pipe:[456]`, a path).
fn fd_targets(pid: u32) -> Vec<String> {
    let entries = std::fs::read_dir(format!("/proc/{pid}/fd")).into_iter().flatten().flatten();
    entries.filter_map(|e| std::fs::read_link(e.path()).ok()).map(|t| t.display().to_string()).collect()
}

/// Waits until `pid` holds at most `limit` descriptors; panics after 10 s,
/// naming what it still holds.
async fn fds_back_to(pid: u32, limit: usize, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while fds(pid) > limit {
        assert!(
            Instant::now() < deadline,
            "{what}: {} descriptors held, at most {limit} expected: {:?}",
            fds(pid),
            fd_targets(pid)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Sends `GET target` on a raw connection to `base` (`http://host:port`),
/// reads the first 64 KiB of the answer, then drops the connection.
fn cut_after_first_bytes(base: &str, target: &str, headers: &str) {
    let address = base.trim_start_matches("http://");
    let mut tcp = TcpStream::connect(address).expect("connect");
    tcp.set_read_timeout(Some(Duration::from_secs(10))).expect("timeout");
    write!(tcp, "GET {target} HTTP/1.1\r\nHost: test\r\n{headers}\r\n").expect("request");
    let mut first = vec![0u8; 64 * 1024];
    tcp.read_exact(&mut first).expect("the first 64 KiB");
    assert!(first.starts_with(b"HTTP/1.1 200"), "{}", String::from_utf8_lossy(&first[..200]));
}

/// A 16 MiB file of a repeating non-trivial pattern, written through the API.
async fn big_file(server: &TestServer, path: &str) -> Vec<u8> {
    let data: Vec<u8> = (0..16u32 << 20).map(|i| (i % 251) as u8).collect();
    server.client().upload(path, data.clone().into()).await.expect("upload");
    data
}

#[tokio::test]
async fn downloads_cut_mid_body_give_their_descriptors_back_and_leave_the_file_whole() {
    let server = common::start();
    let data = big_file(&server, "big.bin").await;
    let absolute = server.dir().join("base/big.bin");
    let absolute = absolute.canonicalize().unwrap_or(absolute);
    let before = fds(server.pid());
    let auth = format!("Authorization: {}\r\n", server.bearer());
    let envd_url = envd(&server);
    for round in 0..5 {
        cut_after_first_bytes(&server.at(""), "/files/content?path=big.bin", &auth);
        cut_after_first_bytes(&server.at(""), "/files/download-stream?path=big.bin", &auth);
        let envd_target = format!("/files?path={}", absolute.display());
        cut_after_first_bytes(&envd_url, &envd_target, &format!("X-Access-Token: {}\r\n", common::TOKEN));
        eprintln!("round {round}: {} descriptors", fds(server.pid()));
    }
    // Each cut connection and the file it was reading are closed once the server sees the cut.
    fds_back_to(server.pid(), before + 2, "after 15 cut downloads").await;
    let client = server.client();
    assert!(client.download("big.bin").await.expect("download") == data, "the file is whole");
    assert!(client.download_json("big.bin").await.expect("download") == data, "the file is whole");
    let health = reqwest::get(server.at("/health")).await.expect("health");
    assert_eq!(health.status(), 200);
}

/// Reads a process stream to its end: `(stdout, end)`.
async fn drain(frames: &mut Frames) -> (Vec<u8>, Value) {
    let (mut out, decode) = (Vec::new(), base64::engine::general_purpose::STANDARD);
    loop {
        let (flags, message) = frames.next().await.expect("a frame before the end");
        assert_eq!(flags, 0, "no error frame: {message}");
        let event = &message["event"];
        out.extend(decode.decode(event["data"]["stdout"].as_str().unwrap_or("")).expect("base64"));
        if let Some(end) = event.get("end") {
            return (out, end.clone());
        }
    }
}

#[tokio::test]
async fn an_envd_start_stream_cut_mid_output_loses_nothing_on_connect() {
    let server = common::server().token(None).start();
    let before = fds(server.pid());
    // About 1.3 MB of output, within the 4 MiB kept per process, paced so the cut lands in the middle.
    let script = "for i in $(seq 1 20); do seq $(( (i-1)*10000+1 )) $(( i*10000 )); sleep 0.05; done";
    let body = json!({"process": {"cmd": "/bin/bash", "args": ["-c", script]}, "tag": "cut"});
    let (status, _, mut started) = Frames::open(&server, "process.Process/Start", body, &[]).await;
    assert_eq!(status, 200);
    let mut seen = 0;
    while seen < 3 {
        let (_, message) = started.next().await.expect("a frame");
        seen += usize::from(message["event"].get("data").is_some());
    }
    drop(started);
    let (status, _, mut again) =
        Frames::open(&server, "process.Process/Connect", json!({"process": {"tag": "cut"}}), &[]).await;
    assert_eq!(status, 200);
    let (out, end) = drain(&mut again).await;
    let expected: String = (1..=200_000).map(|n| format!("{n}\n")).collect();
    assert_eq!(out.len(), expected.len(), "every byte replayed after the cut");
    assert!(out == expected.as_bytes(), "in order");
    assert_eq!((end["exited"].as_bool(), end["exitCode"].as_i64()), (Some(true), None), "exit 0: {end}");
    drop(again);
    fds_back_to(server.pid(), before + 2, "after the process and its streams ended").await;
}

#[tokio::test]
async fn an_abandoned_shell_request_has_its_group_terminated() {
    let server = common::start();
    let pidfile = server.dir().join("sleeper.pid");
    let command = format!("sh -c 'sleep 300 & echo $! > {}; wait'", pidfile.display());
    let request = server.http().post(server.at("/shell")).header("Authorization", server.bearer());
    let call = tokio::spawn(request.json(&json!({"command": command})).send());
    let deadline = Instant::now() + Duration::from_secs(10);
    let sleeper = loop {
        let written = std::fs::read_to_string(&pidfile).unwrap_or_default();
        if let Ok(pid) = written.trim().parse::<i32>() {
            break pid;
        }
        assert!(Instant::now() < deadline && !call.is_finished(), "the command never started: {:?}", call.await);
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    assert!(!call.is_finished(), "answered while the command runs");
    call.abort();
    let deadline = Instant::now() + Duration::from_secs(10);
    // SIGTERM at once, SIGKILL 2 s later; the daemon reaps it, so /proc/<pid> goes away.
    while std::path::Path::new(&format!("/proc/{sleeper}")).exists() {
        assert!(Instant::now() < deadline, "the background sleep {sleeper} outlived the abandoned request");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let answered = server.client().shell(&abx_wire::api::process::ExecRequest::new("echo ok")).await;
    assert_eq!(answered.expect("shell").stdout, "ok\n");
}
