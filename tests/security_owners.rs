//! Regression test of the red-team finding on ownership (issue 21, defect
//! 8): any identity with `process:read` read another identity's process
//! output, and with the process scopes signalled it or wrote to its stdin;
//! any identity with `terminal:use` attached to, resized or deleted any
//! terminal. Now each identity sees and touches its own, and the admin
//! scopes (`process:admin`, `terminal:admin`) see everyone's. Issue 31
//! (item 6) reported the PTY port's WebSocket attach as open to another
//! identity; the attach is covered with a real upgrade here.

#![allow(clippy::disallowed_methods)] // tests drive the binary from outside; no reaper here

mod common;

use futures_util::{SinkExt, StreamExt};
use reqwest::Method;
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::Message;

use common::envd::{call, Frames};

const ALICE: &str = "alice-token-6b1f";
const BOB: &str = "bob-token-c09a";
const OPS: &str = "ops-token-e442";

fn owners_server() -> (tempfile::TempDir, common::TestServer) {
    let user = ["process:run", "process:read", "process:manage", "terminal:use", "files:read"];
    let policy = json!({"auth": {"tokens": [
        {"id": "alice", "scopes": user, "token_env": "ABX_TEST_ALICE"},
        {"id": "bob", "scopes": user, "token_env": "ABX_TEST_BOB"},
        {"id": "ops", "scopes": ["process:read", "process:admin", "terminal:use", "terminal:admin"],
         "token_env": "ABX_TEST_OPS"},
    ]}});
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("policy.json");
    std::fs::write(&path, policy.to_string()).expect("policy");
    let server = common::server()
        .token(None)
        .env("ABX_TEST_ALICE", ALICE)
        .env("ABX_TEST_BOB", BOB)
        .env("ABX_TEST_OPS", OPS)
        .args(["--policy", &path.display().to_string()])
        .start();
    (dir, server)
}

async fn send(
    server: &common::TestServer,
    method: Method,
    path: &str,
    token: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let mut request = reqwest::Client::new().request(method, server.at(path)).bearer_auth(token);
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await.expect("request");
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

fn pids(list: &Value, key: &str) -> Vec<u64> {
    list[key].as_array().map(|all| all.iter().filter_map(|p| p["pid"].as_u64()).collect()).unwrap_or_default()
}

#[tokio::test]
async fn processes_belong_to_the_identity_that_started_them() {
    let (_dir, server) = owners_server();
    let body = json!({"command": "cat", "stdin": true, "capture_output": true});
    let (status, started) = send(&server, Method::POST, "/process/start", ALICE, Some(body)).await;
    assert_eq!(status, 200, "{started}");
    let pid = started["pid"].as_u64().expect("pid");
    let at = |rest: &str| format!("/process/{pid}{rest}");

    let (_, list) = send(&server, Method::GET, "/process/list", BOB, None).await;
    assert!(!pids(&list, "processes").contains(&pid), "bob does not see it: {list}");
    for (method, path, body) in [
        (Method::GET, at(""), None),
        (Method::GET, at("/output"), None),
        (Method::POST, at("/stdin"), Some(json!({"data": "from bob\n"}))),
        (Method::POST, at("/signal"), Some(json!({"signal": 9}))),
    ] {
        let (status, answer) = send(&server, method.clone(), &path, BOB, body).await;
        assert_eq!(status, 404, "{method} {path}: {answer}");
        assert_eq!(answer["error"], format!("Process {pid} not found"), "indistinguishable from no process");
    }
    let (status, info) = send(&server, Method::GET, &at(""), ALICE, None).await;
    assert_eq!((status, info["state"].as_str()), (200, Some("running")), "bob's signal never arrived");

    let (_, list) = send(&server, Method::GET, "/process/list", OPS, None).await;
    assert!(pids(&list, "processes").contains(&pid), "the admin sees everyone's: {list}");
    let (status, _) = send(&server, Method::POST, &at("/stdin"), ALICE, Some(json!({"data": "hi\n"}))).await;
    assert_eq!(status, 200);
    let (status, output) = send(&server, Method::GET, &at("/output?wait=5"), OPS, None).await;
    assert_eq!(status, 200);
    let data: String = output["events"].as_array().expect("events").iter().filter_map(|e| e["data"].as_str()).collect();
    assert_eq!(data, "hi\n", "nothing of bob's reached it");
    let (status, _) = send(&server, Method::POST, &at("/signal"), ALICE, Some(json!({"signal": 15}))).await;
    assert_eq!(status, 200);
}

#[tokio::test]
async fn terminals_belong_to_the_identity_that_opened_them() {
    let (_dir, server) = owners_server();
    let (status, created) =
        send(&server, Method::POST, "/pty/sessions", ALICE, Some(json!({"shell": "/bin/sh"}))).await;
    assert_eq!(status, 200, "{created}");
    let id = created["session_id"].as_str().expect("id").to_string();
    let session = format!("/pty/sessions/{id}");
    let listed =
        |list: &Value| list["sessions"].as_array().is_some_and(|all| all.iter().any(|s| s["id"].as_str() == Some(&id)));

    let (_, list) = send(&server, Method::GET, "/pty/sessions", BOB, None).await;
    assert!(!listed(&list), "bob does not see it: {list}");
    for (method, path, body) in [
        (Method::GET, session.clone(), None),
        (Method::POST, format!("{session}/resize"), Some(json!({"cols": 10, "rows": 5}))),
        (Method::DELETE, session.clone(), None),
    ] {
        let (status, answer) = send(&server, method.clone(), &path, BOB, body).await;
        assert_eq!((status, answer["error"].as_str()), (404, Some(&*format!("Session not found: {id}"))), "{path}");
    }
    // Attaching: the handshake finds no session for bob; for alice it only lacks the upgrade.
    let attach = |token: &'static str| {
        let url = format!("{}/pty?session_id={id}", server.pty_base().replacen("ws://", "http://", 1));
        async move { reqwest::Client::new().get(url).bearer_auth(token).send().await.expect("get").status().as_u16() }
    };
    assert_eq!(attach(BOB).await, 404);
    assert_eq!(attach(ALICE).await, 426);

    let (_, list) = send(&server, Method::GET, "/pty/sessions", OPS, None).await;
    assert!(listed(&list), "the admin sees everyone's: {list}");
    let (status, info) = send(&server, Method::GET, &session, ALICE, None).await;
    assert_eq!((status, info["cols"].as_u64()), (200, Some(80)), "bob's resize never happened: {info}");
    let (status, _) = send(&server, Method::DELETE, &session, ALICE, None).await;
    assert_eq!(status, 200);
}

/// How a test attaches to a terminal over the WebSocket.
struct Attach<'a> {
    token: &'a str,
    /// The token as `?token=` rather than a header.
    in_query: bool,
    /// Types a command whose output is `typed-15`.
    types: bool,
    /// Stops reading once the text frames contain this.
    until: Option<&'a str>,
}

/// What an attach to `session` receives before the server closes it, the
/// text frames hold `until`, or 3 s pass: its text frames and the close
/// frame's code and reason.
async fn attach(server: &common::TestServer, session: &str, how: Attach<'_>) -> (String, Option<(u16, String)>) {
    let mut url = format!("{}/pty?session_id={session}", server.pty_base());
    if how.in_query {
        url.push_str(&format!("&token={}", how.token));
    }
    let mut request = url.into_client_request().expect("request");
    if !how.in_query {
        request.headers_mut().insert("authorization", format!("Bearer {}", how.token).parse().expect("header"));
    }
    let (mut socket, _) = tokio_tungstenite::connect_async(request).await.expect("the handshake is accepted");
    if how.types {
        let input = json!({"type": "input", "data": "echo typed-$((3*5))\n"}).to_string();
        let _ = socket.send(Message::Text(input.into())).await;
    }
    let mut text = String::new();
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(3);
    while let Ok(Some(frame)) = tokio::time::timeout_at(deadline, socket.next()).await {
        match frame {
            Ok(Message::Text(t)) => text.push_str(t.as_str()),
            Ok(Message::Close(close)) => return (text, close.map(|f| (u16::from(f.code), f.reason.to_string()))),
            Ok(_) => {}
            Err(_) => break,
        }
        if how.until.is_some_and(|needle| text.contains(needle)) {
            break;
        }
    }
    (text, None)
}

/// Issue 31, item 6: another identity's WebSocket attach on the PTY port,
/// with its token as a header or as `?token=`, gets exactly what an unknown
/// session gets (the handshake, then close 1008 "Unknown session"): no
/// output, no scrollback, and its input never reaches the shell. The owner
/// and the terminal admin attach.
#[tokio::test]
async fn a_terminal_is_attached_only_by_its_owner_over_the_websocket() {
    let (_dir, server) = owners_server();
    let (status, created) =
        send(&server, Method::POST, "/pty/sessions", ALICE, Some(json!({"shell": "/bin/sh"}))).await;
    assert_eq!(status, 200, "{created}");
    let id = created["session_id"].as_str().expect("id").to_string();
    let bob = |in_query| Attach { token: BOB, in_query, types: true, until: None };
    let (seen, close) = attach(&server, "no-such-session", bob(false)).await;
    let unknown = Some((1008, "Unknown session: no-such-session".to_string()));
    assert_eq!((seen.as_str(), close), ("", unknown), "an unknown session");
    for in_query in [false, true] {
        let (seen, close) = attach(&server, &id, bob(in_query)).await;
        assert_eq!(seen, "", "bob receives nothing of alice's terminal (token in query: {in_query})");
        assert_eq!(close, Some((1008, format!("Unknown session: {id}"))), "as an unknown session");
    }
    let alice = Attach { token: ALICE, in_query: false, types: true, until: Some("typed-15") };
    let (seen, close) = attach(&server, &id, alice).await;
    assert!(seen.contains("\"started\"") && seen.contains("typed-15"), "alice attaches: {seen} {close:?}");
    let ops = Attach { token: OPS, in_query: true, types: false, until: Some("typed-15") };
    let (seen, close) = attach(&server, &id, ops).await;
    assert_eq!(seen.matches("typed-15").count(), 1, "the admin sees alice's command, none of bob's: {seen} {close:?}");
    let (status, _) = send(&server, Method::DELETE, &format!("/pty/sessions/{id}"), ALICE, None).await;
    assert_eq!(status, 200);
}

#[tokio::test]
async fn envd_processes_belong_to_the_identity_that_started_them() {
    let (_dir, server) = owners_server();
    let start = json!({"process": {"cmd": "/bin/sleep", "args": ["30"]}, "tag": "job"});
    let (status, _, mut frames) =
        Frames::open(&server, "process.Process/Start", start, &[("x-access-token", ALICE)]).await;
    assert_eq!(status, 200);
    let (_, first) = frames.next().await.expect("start event");
    let pid = first["event"]["start"]["pid"].as_u64().expect("pid");

    let (status, list) = call(&server, "process.Process/List", json!({}), Some(BOB)).await;
    assert_eq!(status, 200, "{list}");
    assert!(!pids(&list, "processes").contains(&pid), "bob does not see it: {list}");
    for selector in [json!({"pid": pid}), json!({"tag": "job"})] {
        let connect = json!({"process": selector});
        let (status, _, mut events) =
            Frames::open(&server, "process.Process/Connect", connect, &[("x-access-token", BOB)]).await;
        let (flags, end) = events.next().await.expect("an end frame");
        assert_eq!((status, flags, end["error"]["code"].as_str()), (200, 2, Some("not_found")), "{end}");
        for (method, body) in [
            ("SendInput", json!({"process": selector, "input": {"stdin": "eA=="}})),
            ("SendSignal", json!({"process": selector, "signal": "SIGNAL_SIGKILL"})),
            ("CloseStdin", json!({"process": selector})),
        ] {
            let (status, answer) = call(&server, &format!("process.Process/{method}"), body, Some(BOB)).await;
            let code = if status == 200 { answer["error"]["code"].clone() } else { answer["code"].clone() };
            assert_eq!(code, "not_found", "{method} {selector}: {status} {answer}");
        }
    }
    let (_, list) = call(&server, "process.Process/List", json!({}), Some(OPS)).await;
    assert!(pids(&list, "processes").contains(&pid), "the admin sees everyone's: {list}");
    let kill = json!({"process": {"pid": pid}, "signal": "SIGNAL_SIGKILL"});
    let (status, answer) = call(&server, "process.Process/SendSignal", kill, Some(ALICE)).await;
    assert_eq!(status, 200, "{answer}");
}
