//! envd watchers never lose events silently (issue 32): a `WatchDir` stream
//! resumes with `abx-watch-resume` and gets the events in between, or the
//! exact count the watch no longer held (`abx-watch-lost`); a polled watcher
//! whose poll overflowed answers `data_loss` with the count, then the rest.

mod common;

use std::collections::HashSet;
use std::time::Duration;

use common::envd::{call, Frames};
use serde_json::{json, Value};

const WATCH: &str = "filesystem.Filesystem/WatchDir";

fn header(frames: &Frames, name: &str) -> Option<String> {
    frames.headers.get(name).and_then(|v| v.to_str().ok()).map(str::to_string)
}

/// The next `filesystem` event as `(name, type)`, skipping keepalives.
async fn next_event(frames: &mut Frames) -> (String, String) {
    loop {
        let (flags, message) = frames.next().await.expect("a frame");
        assert_eq!(flags, 0, "the stream ended: {message}");
        if let Some(event) = message.get("filesystem") {
            let text = |k: &str| event[k].as_str().unwrap_or_default().to_string();
            return (text("name"), text("type"));
        }
        assert_eq!(message, json!({"keepalive": {}}));
    }
}

async fn open(server: &common::TestServer, resume: Option<&str>) -> Frames {
    let mut headers = vec![("x-access-token", common::TOKEN), ("keepalive-ping-interval", "1")];
    if let Some(cursor) = resume {
        headers.push(("abx-watch-resume", cursor));
    }
    let (status, _, mut frames) = Frames::open(server, WATCH, json!({"path": "w"}), &headers).await;
    assert_eq!(status, 200);
    assert_eq!(frames.next().await, Some((0, json!({"start": {}}))), "every stream starts with start");
    frames
}

fn touch(server: &common::TestServer, names: impl IntoIterator<Item = String>) {
    for name in names {
        std::fs::write(server.base.join("w").join(name), b"").expect("write");
    }
}

#[tokio::test]
async fn a_dropped_watch_dir_resumes_with_the_events_in_between() {
    let server = common::start();
    std::fs::create_dir(server.base.join("w")).expect("mkdir");
    let mut first = open(&server, None).await;
    let watch = header(&first, "abx-watch-id").expect("the stream names its watch");
    assert_eq!(header(&first, "abx-watch-lost"), None, "a new watch lost nothing");
    touch(&server, ["a".to_string()]);
    assert_eq!(next_event(&mut first).await, ("a".into(), "EVENT_TYPE_CREATE".into()));
    drop(first);
    touch(&server, ["b".to_string(), "c".to_string()]);
    let mut resumed = open(&server, Some(&format!("{watch}:1"))).await;
    assert_eq!(header(&resumed, "abx-watch-id"), Some(watch.clone()));
    assert_eq!(header(&resumed, "abx-watch-lost").as_deref(), Some("0"));
    let mut seen = Vec::new();
    for _ in 0..5 {
        seen.push(next_event(&mut resumed).await);
    }
    let expected: Vec<(String, String)> =
        [("a", "CHMOD"), ("b", "CREATE"), ("b", "CHMOD"), ("c", "CREATE"), ("c", "CHMOD")]
            .iter()
            .map(|(n, t)| (n.to_string(), format!("EVENT_TYPE_{t}")))
            .collect();
    assert_eq!(seen, expected, "each event after the cursor, once, in order");

    // Cursors that name no position of this watch are the protocol's invalid-argument.
    std::fs::create_dir(server.base.join("v")).expect("mkdir");
    let (future, ours) = (format!("{watch}:999"), format!("{watch}:1"));
    for (path, cursor) in [("w", "nonsense"), ("w", future.as_str()), ("w", "1:0"), ("v", ours.as_str())] {
        let headers = [("x-access-token", common::TOKEN), ("abx-watch-resume", cursor)];
        let (_, _, mut frames) = Frames::open(&server, WATCH, json!({ "path": path }), &headers).await;
        let (flags, end) = frames.next().await.expect("end");
        assert_eq!((flags, end["error"]["code"].as_str()), (2, Some("invalid_argument")), "{path} {cursor}: {end}");
    }
}

#[tokio::test]
async fn a_resume_after_the_ring_moved_on_counts_the_lost_events_exactly() {
    let server = common::start();
    std::fs::create_dir(server.base.join("w")).expect("mkdir");
    let first = open(&server, None).await;
    let watch = header(&first, "abx-watch-id").expect("watch id");
    drop(first);
    // 600 new empty files are 1,200 events (CREATE, CHMOD); the ring holds 1,024.
    let files = 600;
    touch(&server, (0..files).map(|i| format!("f{i:04}")));
    let produced = 2 * files;
    let cursor = format!("{watch}:0");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    // The watch runs on once the server noticed the client left; each probe that finds it still
    // catching up leaves again.
    let (mut resumed, lost) = loop {
        let resumed = open(&server, Some(&cursor)).await;
        let lost: usize = header(&resumed, "abx-watch-lost").expect("lost header").parse().expect("a count");
        if lost == produced - 1024 || tokio::time::Instant::now() > deadline {
            break (resumed, lost);
        }
        drop(resumed);
        tokio::time::sleep(Duration::from_millis(300)).await;
    };
    assert_eq!(lost, produced - 1024, "exactly what the ring no longer held");
    let mut received = HashSet::new();
    for _ in 0..1024 {
        let event = next_event(&mut resumed).await;
        assert!(received.insert(event.clone()), "{event:?} twice");
    }
    assert_eq!(received.len() + lost, produced, "lost and received add up to every event");
    // Nothing else comes: the next frame is a keepalive.
    assert_eq!(resumed.next().await, Some((0, json!({"keepalive": {}}))));
}

#[tokio::test]
async fn a_polled_watcher_that_overflowed_answers_data_loss_with_the_count_then_the_rest() {
    let server = common::start();
    let token = Some(common::TOKEN);
    std::fs::create_dir(server.base.join("w")).expect("mkdir");
    let (status, body) = call(&server, "filesystem.Filesystem/CreateWatcher", json!({"path": "w"}), token).await;
    assert_eq!(status, 200, "{body}");
    let id = body["watcherId"].as_str().expect("id").to_string();
    // 5,300 new empty files are 10,600 events between two polls; a watcher holds 10,000.
    let files = 5300;
    touch(&server, (0..files).map(|i| format!("f{i:05}")));
    let poll = json!({"watcherId": id});
    let (status, body) = call(&server, "filesystem.Filesystem/GetWatcherEvents", poll.clone(), token).await;
    assert_eq!((status, body["code"].as_str()), (500, Some("data_loss")), "{body}");
    let message = body["message"].as_str().expect("message");
    let lost: usize = message.split(' ').next().and_then(|n| n.parse().ok()).expect("the count first");
    assert_eq!(lost, 2 * files - 10_000, "{message}");
    let (status, body) = call(&server, "filesystem.Filesystem/GetWatcherEvents", poll.clone(), token).await;
    assert_eq!(status, 200, "{body}");
    let events: &Vec<Value> = body["events"].as_array().expect("events");
    assert_eq!(events.len() + lost, 2 * files, "the held events follow, none twice");
    let (status, body) = call(&server, "filesystem.Filesystem/GetWatcherEvents", poll, token).await;
    assert_eq!((status, body["events"].as_array().map(Vec::len).unwrap_or(0)), (200, 0), "{body}");
}
