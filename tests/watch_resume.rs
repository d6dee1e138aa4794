//! Black-box tests of `/files/watch` resume: events carry ids, a client
//! that lost its connection resumes with `Last-Event-ID` and gets the
//! events made while it was away exactly once, in order; a resume past
//! what the watch still holds gets an explicit `gap` with the exact count;
//! bad cursors are 400.

mod common;

use serde_json::Value;

use common::sse::{watch, Events};

/// The next `change` event: `(id, data)`; any other event but `ready` fails the test.
async fn change(events: &mut Events) -> (String, Value) {
    loop {
        let (name, id, data) = events.next().await.expect("an event");
        match name.as_str() {
            "change" => return (id.expect("change events carry ids"), data),
            "ready" => continue,
            other => panic!("unexpected {other}: {data}"),
        }
    }
}

fn created(events: &(String, Value)) -> (&str, &str) {
    (events.1["type"].as_str().expect("type"), events.1["path"].as_str().expect("path"))
}

#[tokio::test]
async fn a_cut_watch_resumes_with_the_events_made_while_away_once_in_order() {
    let server = common::start();
    let dir = server.base.join("w");
    std::fs::create_dir(&dir).expect("mkdir");
    let (status, mut first, _) = watch(&server, "path=w&timeout=60", None).await;
    assert_eq!(status, 200);
    let (name, ready_id, _) = first.next().await.expect("ready");
    assert_eq!(name, "ready");
    let watch_id = ready_id.expect("ready carries an id").split(':').next().expect("watch").to_string();
    let path = |name: &str| dir.join(name).to_str().expect("utf-8").to_string();
    let mut last = String::new();
    for i in 0..5 {
        std::fs::write(dir.join(format!("a{i}")), b"x").expect("write");
        let event = change(&mut first).await;
        assert_eq!(created(&event), ("created", path(&format!("a{i}")).as_str()));
        assert_eq!(event.0, format!("{watch_id}:{}", i + 1), "ids count the events");
        last = event.0;
    }
    drop(first);
    for i in 0..5 {
        std::fs::write(dir.join(format!("b{i}")), b"x").expect("write");
    }
    let (status, mut again, _) = watch(&server, "ignored=on-resume", Some(&last)).await;
    assert_eq!(status, 200);
    let (name, id, data) = again.next().await.expect("ready");
    assert_eq!((name.as_str(), id, data["path"].as_str()), ("ready", None, dir.to_str()));
    for i in 0..5 {
        let event = change(&mut again).await;
        assert_eq!(created(&event), ("created", path(&format!("b{i}")).as_str()));
        assert_eq!(event.0, format!("{watch_id}:{}", i + 6));
    }
    // Nothing twice: the next event is a change made now.
    std::fs::write(dir.join("c"), b"x").expect("write");
    let event = change(&mut again).await;
    assert_eq!(
        (created(&event), event.0.as_str()),
        (("created", path("c").as_str()), format!("{watch_id}:11").as_str())
    );
}

#[tokio::test]
async fn a_resume_past_the_held_events_gets_an_exact_gap_first() {
    let server = common::start();
    let dir = server.base.join("w");
    std::fs::create_dir(&dir).expect("mkdir");
    let (_, mut first, _) = watch(&server, "path=w&timeout=60", None).await;
    let (_, ready_id, _) = first.next().await.expect("ready");
    let ready_id = ready_id.expect("an id");
    // 1,100 changes; the watch holds 1,024 events.
    let total = 1100;
    for i in 0..total {
        std::fs::write(dir.join(format!("f{i:04}")), b"").expect("write");
    }
    for _ in 0..total {
        change(&mut first).await;
    }
    drop(first);
    let (status, mut late, _) = watch(&server, "", Some(&ready_id)).await;
    assert_eq!(status, 200);
    assert_eq!(late.next().await.expect("ready").0, "ready");
    let (name, id, data) = late.next().await.expect("gap");
    assert_eq!((name.as_str(), id, data), ("gap", None, serde_json::json!({"events": total - 1024})));
    for i in total - 1024..total {
        let event = change(&mut late).await;
        assert_eq!(created(&event).1, dir.join(format!("f{i:04}")).to_str().expect("utf-8"));
    }
}

#[tokio::test]
async fn bad_cursors_are_400() {
    let server = common::start();
    std::fs::create_dir(server.base.join("w")).expect("mkdir");
    let (_, mut live, _) = watch(&server, "path=w&timeout=60", None).await;
    let (_, id, _) = live.next().await.expect("ready");
    let watch_id = id.expect("an id").split(':').next().expect("watch").to_string();
    for (cursor, message) in [
        ("nonsense", "Invalid Last-Event-ID"),
        ("1:2:3", "Invalid Last-Event-ID"),
        (&format!("{watch_id}:5") as &str, "is not an event of watch"),
        ("17:0", "No watch 17 to resume"),
    ] {
        let (status, _, body) = watch(&server, "path=w", Some(cursor)).await;
        assert_eq!(status, 400, "{cursor}: {body}");
        assert!(body.contains(message), "{cursor}: {body}");
    }
    // The watch itself is untouched by the refused resumes.
    std::fs::write(server.base.join("w/f"), b"x").expect("write");
    assert_eq!(change(&mut live).await.0, format!("{watch_id}:1"));
}
