//! Regression tests of the red-team findings on resource bounds (issue 21),
//! against the real binary:
//!
//! - Watches were unbounded and each held an inotify instance and threads
//!   (defect 6).
//! - No header-read or idle timeout and no connection cap (defect 5).

#![allow(clippy::disallowed_methods)] // tests drive the binary from outside; no reaper here

mod common;

use serde_json::{json, Value};

use common::envd::Frames;

/// The daemon's thread count.
fn threads(pid: u32) -> usize {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    let line = status.lines().find(|l| l.starts_with("Threads:")).expect("Threads");
    line.split_whitespace().nth(1).and_then(|n| n.parse().ok()).expect("a number")
}

async fn watch(client: &reqwest::Client, server: &common::TestServer) -> reqwest::Response {
    client
        .get(server.at("/files/watch?path=w&recursive=true&timeout=120"))
        .bearer_auth(common::TOKEN)
        .send()
        .await
        .expect("watch")
}

/// Defect 6: 127 concurrent `/files/watch` used up the user's 128 inotify
/// instances (later watches answered 500, envd `WatchDir` `internal`, and
/// `inotify_init()` failed in the sandbox's programs), each watch costing
/// about two threads. Now they share one instance and one reader thread,
/// and past the bound a watch is refused with 429 / `resource_exhausted`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watches_share_one_inotify_instance_and_are_bounded() {
    let server = common::start();
    std::fs::create_dir_all(server.base.join("w/sub")).expect("mkdir");
    let client = reqwest::Client::new();
    let first = watch(&client, &server).await;
    assert_eq!(first.status().as_u16(), 200);
    let baseline = threads(server.pid());
    let mut open = vec![first];
    for _ in 1..127 {
        let response = watch(&client, &server).await;
        assert_eq!(response.status().as_u16(), 200);
        open.push(response);
    }
    let grown = threads(server.pid()) - baseline;
    assert!(grown <= 4, "127 watches cost {grown} more threads");
    if let Some(usage) = common::inotify_usage(server.pid()) {
        assert_eq!(usage, (1, 2), "one instance; w and w/sub watched once for every watch");
    }
    let own = nix::sys::inotify::Inotify::init(nix::sys::inotify::InitFlags::IN_CLOEXEC);
    assert!(own.is_ok(), "the sandbox's programs can still make an inotify instance: {own:?}");
    drop(own);

    open.push(watch(&client, &server).await);
    assert_eq!(open.last().map(|r| r.status().as_u16()), Some(200), "128 is the default bound");
    let refused = watch(&client, &server).await;
    let status = refused.status().as_u16();
    let body: Value = refused.json().await.expect("json");
    assert_eq!((status, body["code"].as_str()), (429, Some("watch_limit")), "{body}");
    assert_eq!(body["error"], "Too many watches (at most 128)");
    let token = [("x-access-token", common::TOKEN)];
    let (_, _, mut frames) =
        Frames::open(&server, "filesystem.Filesystem/WatchDir", json!({"path": "w"}), &token).await;
    let (flags, end) = frames.next().await.expect("an end frame");
    assert_eq!((flags, end["error"]["code"].as_str()), (2, Some("resource_exhausted")), "{end}");
}
