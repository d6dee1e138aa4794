//! Black-box tests of the envd port's `process.Process`: framing of
//! process streams, OS pids (as E2B's envd reports them), replay on `Connect` while a subscriber
//! stalls, lifetimes from `Connect-Timeout-Ms`, `SIGKILL` and `List`, and
//! `StreamInput`.

mod common;

use base64::Engine;
use serde_json::{json, Value};

use common::envd::{call, envd, envelope, Frames};
use common::TestServer;

/// Opens a `Start` stream for `bash -c script` on an open (token-less) server.
async fn start(server: &TestServer, script: &str, extra: Value, headers: &[(&str, &str)]) -> Frames {
    let mut body = json!({"process": {"cmd": "/bin/bash", "args": ["-c", script]}});
    if let (Some(body), Some(extra)) = (body.as_object_mut(), extra.as_object()) {
        body.extend(extra.clone());
    }
    let (status, _, frames) = Frames::open(server, "process.Process/Start", body, headers).await;
    assert_eq!(status, 200);
    frames
}

/// Reads a process stream to its end: `(pid, stdout, stderr, end, keepalives)`.
async fn drain(frames: &mut Frames) -> (u64, Vec<u8>, Vec<u8>, Value, usize) {
    let b64 = |v: &Value| base64::engine::general_purpose::STANDARD.decode(v.as_str().unwrap_or("")).expect("base64");
    let (mut pid, mut out, mut err, mut keepalives) = (0, Vec::new(), Vec::new(), 0);
    loop {
        let (flags, message) = frames.next().await.expect("a frame");
        if flags == 2 {
            return (pid, out, err, message, keepalives);
        }
        let event = &message["event"];
        if let Some(p) = event["start"]["pid"].as_u64() {
            pid = p;
        }
        out.extend(b64(&event["data"]["stdout"]));
        err.extend(b64(&event["data"]["stderr"]));
        keepalives += usize::from(event.get("keepalive").is_some());
        if let Some(end) = event.get("end") {
            let (flags, last) = frames.next().await.expect("the end frame");
            assert_eq!((flags, &last), (2, &json!({})));
            return (pid, out, err, end.clone(), keepalives);
        }
    }
}

#[tokio::test]
async fn start_streams_start_data_keepalives_and_end_with_os_pids() {
    let server = common::server().token(None).start();
    let mut first =
        start(&server, "echo $$; echo err >&2; sleep 1.5; exit 4", json!({}), &[("keepalive-ping-interval", "1")])
            .await;
    let (pid, out, err, end, keepalives) = drain(&mut first).await;
    assert_eq!((out, err.as_slice()), (format!("{pid}\n").into_bytes(), &b"err\n"[..]), "the pid is bash's own");
    assert_eq!(end, json!({"exitCode": 4, "exited": true, "status": "exit status 4", "error": "exit status 4"}));
    assert!(keepalives >= 1, "a keepalive in the quiet second");
    let mut second = start(&server, "kill -9 $$", json!({}), &[]).await;
    let (second_pid, _, _, end, _) = drain(&mut second).await;
    assert!(second_pid > 1 && second_pid != pid, "{second_pid} after {pid}");
    assert_eq!(end, json!({"exitCode": -1, "status": "signal: killed", "error": "signal: killed"}));
    let (status, body) =
        call(&server, "process.Process/SendInput", json!({"process": {"pid": 99}, "input": {"stdin": "eA=="}}), None)
            .await;
    assert_eq!((status, body["code"].as_str()), (404, Some("not_found")));
    let (status, body) = call(&server, "process.Process/Connect", json!({"process": {"tag": "nope"}}), None).await;
    assert_eq!(status, 415, "a stream method called as unary is refused: {body}");
}

#[tokio::test]
async fn a_subscriber_that_never_reads_stalls_nothing_and_connect_replays() {
    let server = common::server().token(None).start();
    let script = "read go; seq 1 300000; echo done >&2";
    let mut started = start(&server, script, json!({"tag": "flood"}), &[]).await;
    let (flags, message) = started.next().await.expect("start");
    let pid = message["event"]["start"]["pid"].as_u64().expect("a pid");
    assert_eq!(flags, 0);
    // A subscriber that connects and never reads a byte.
    let (_, _, stalled) = Frames::open(&server, "process.Process/Connect", json!({"process": {"pid": pid}}), &[]).await;
    let (status, _) = call(
        &server,
        "process.Process/SendInput",
        json!({"process": {"tag": "flood"}, "input": {"stdin": "Cg=="}}),
        None,
    )
    .await;
    assert_eq!(status, 200);
    let (_, out, err, end, _) = drain(&mut started).await;
    assert_eq!((end["exited"].as_bool(), err.as_slice()), (Some(true), &b"done\n"[..]));
    assert_eq!(out.len(), (1..=300000).map(|n: u32| n.to_string().len() + 1).sum::<usize>());
    drop(stalled);
    let (status, _, mut late) =
        Frames::open(&server, "process.Process/Connect", json!({"process": {"tag": "flood"}}), &[]).await;
    let (replayed_pid, replayed, _, end, _) = drain(&mut late).await;
    assert_eq!((status, replayed_pid, end["exited"].as_bool()), (200, pid, Some(true)));
    assert!(replayed.ends_with(b"299999\n300000\n"), "an ended process replays what is held");
    let (status, body) = call(&server, "process.Process/List", json!({}), None).await;
    assert_eq!((status, body), (200, json!({})));
}

#[tokio::test]
async fn connect_timeout_ms_bounds_the_lifetime_and_sigkill_empties_list() {
    let server = common::server().token(None).start();
    let marker = format!("lifetime-{}", std::process::id());
    let script = format!("sleep 30 # {marker}");
    let mut bounded = start(&server, &script, json!({}), &[("connect-timeout-ms", "400")]).await;
    let (pid, _, _, end, _) = drain(&mut bounded).await;
    assert_eq!(end["error"]["code"], "deadline_exceeded", "{end}");
    let (_, _, mut after) =
        Frames::open(&server, "process.Process/Connect", json!({"process": {"pid": pid}}), &[]).await;
    let (_, _, _, end, _) = drain(&mut after).await;
    assert_eq!(end["status"], "signal: killed", "the lifetime killed it: {end}");
    assert_eq!(end["error"], "signal: killed: its lifetime (the Connect-Timeout-Ms of its Start, 400 ms) passed");
    let mut running = start(
        &server,
        "sleep 30",
        json!({"process": {"cmd": "/bin/sleep", "args": ["30"], "envs": {"A": "1"}, "cwd": "."}}),
        &[],
    )
    .await;
    let (_, message) = running.next().await.expect("start");
    let pid = message["event"]["start"]["pid"].as_u64().expect("a pid");
    // An OS pid, as `kill -0` sees it: a child of the server.
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("a live pid");
    let ppid = status.lines().find_map(|l| l.strip_prefix("PPid:")).map(str::trim);
    assert_eq!(ppid, Some(server.pid().to_string().as_str()), "{status}");
    let (_, body) = call(&server, "process.Process/List", json!({}), None).await;
    assert_eq!(
        body,
        json!({"processes": [{"config": {"cmd": "/bin/sleep", "args": ["30"], "envs": {"A": "1"}, "cwd": "."}, "pid": pid}]})
    );
    let (status, _) =
        call(&server, "process.Process/SendSignal", json!({"process": {"pid": pid}, "signal": "SIGNAL_SIGKILL"}), None)
            .await;
    assert_eq!(status, 200);
    let (_, body) = call(&server, "process.Process/List", json!({}), None).await;
    assert_eq!(body, json!({}), "gone when SendSignal answers");
    let (_, _, _, end, _) = drain(&mut running).await;
    assert_eq!(end["status"], "signal: killed");
}

#[tokio::test]
async fn stream_input_feeds_stdin_in_order() {
    let server = common::server().token(None).start();
    let mut cat = start(&server, "cat; echo eof", json!({"stdin": true}), &[]).await;
    let (_, message) = cat.next().await.expect("start");
    let pid = message["event"]["start"]["pid"].as_u64().expect("a pid");
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    let mut body = envelope(0, &json!({"start": {"process": {"pid": pid}}}));
    for part in ["one ", "two ", "three\n"] {
        body.extend(envelope(0, &json!({"data": {"input": {"stdin": b64(part)}}})));
    }
    body.extend(envelope(0, &json!({"keepalive": {}})));
    let response = reqwest::Client::new()
        .post(format!("{}/process.Process/StreamInput", envd(&server)))
        .header("content-type", "application/connect+json")
        .body(body)
        .send()
        .await
        .expect("stream input");
    assert_eq!(response.status().as_u16(), 200);
    let bytes = response.bytes().await.expect("body");
    assert_eq!(&bytes[..], [&[0u8, 0, 0, 0, 2][..], b"{}", &[2, 0, 0, 0, 2], b"{}"].concat());
    let (status, _) = call(&server, "process.Process/CloseStdin", json!({"process": {"pid": pid}}), None).await;
    assert_eq!(status, 200);
    let (_, out, _, end, _) = drain(&mut cat).await;
    assert_eq!((out.as_slice(), end["exited"].as_bool()), (&b"one two three\neof\n"[..], Some(true)));
    let (status, body) = call(&server, "process.Process/CloseStdin", json!({"process": {"pid": pid}}), None).await;
    assert_eq!(status, 200, "closing twice is fine: {body}");
}

#[tokio::test]
async fn concurrent_starts_never_exceed_max_processes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let policy = dir.path().join("policy.json");
    let rules = json!({"endpoints": {"process_start": {"limits": {"max_processes": 2}}}});
    std::fs::write(&policy, rules.to_string()).expect("policy");
    let server = common::server().token(None).args(["--policy".into(), policy.display().to_string()]).start();
    let body = json!({"process": {"cmd": "/bin/sleep", "args": ["30"]}});
    let opened = futures_util::future::join_all(
        (0..8).map(|_| Frames::open(&server, "process.Process/Start", body.clone(), &[])),
    )
    .await;
    let mut started = Vec::new();
    let mut refused = 0;
    for (status, _, mut frames) in opened {
        assert_eq!(status, 200);
        let (flags, first) = frames.next().await.expect("a frame");
        if flags == 2 {
            assert_eq!(first["error"]["code"], "resource_exhausted", "{first}");
            refused += 1;
        } else {
            assert!(first["event"]["start"]["pid"].is_u64(), "{first}");
            started.push(frames);
        }
    }
    assert_eq!((started.len(), refused), (2, 6));
}
