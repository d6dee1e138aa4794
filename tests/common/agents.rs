//! Helpers for the agents group's black-box tests: a server with the group
//! enabled and a state directory, JSON calls, `command` agents written as
//! small shell scripts, and the session's event stream read to its end.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{json, Value};

use super::{server, ServerBuilder, TestServer};

/// A server builder with the agents group on and `state` as its state directory.
pub fn agents_server(state: &Path) -> ServerBuilder {
    // Workspaces are temporary directories: the base dir holds them, as process_start's path rules ask.
    server()
        .base_dir(&std::env::temp_dir())
        .env("ABX_SERVER_ENABLED_GROUPS", "agents")
        .env("ABX_AGENTS_STATE_DIR", state.to_str().expect("utf-8 path"))
}

/// A response: status, headers, JSON body (`Null` when empty, the text when not JSON).
pub struct Reply {
    pub status: u16,
    pub headers: reqwest::header::HeaderMap,
    pub body: Value,
}

impl Reply {
    /// A header's value.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

/// One HTTP call with the server's token.
pub async fn call(server: &TestServer, method: &str, path: &str, body: Option<Value>) -> Reply {
    call_with(server, method, path, body, &[]).await
}

/// One HTTP call with extra headers.
pub async fn call_with(
    server: &TestServer,
    method: &str,
    path: &str,
    body: Option<Value>,
    headers: &[(&str, &str)],
) -> Reply {
    let method = reqwest::Method::from_bytes(method.as_bytes()).expect("method");
    let mut request = reqwest::Client::new().request(method, server.at(path)).header("authorization", server.bearer());
    for (k, v) in headers {
        request = request.header(*k, *v);
    }
    if let Some(body) = body {
        request = request.header("content-type", "application/json").body(body.to_string());
    }
    let response = request.send().await.expect("send");
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let text = response.text().await.expect("body");
    let body = if text.is_empty() { Value::Null } else { serde_json::from_str(&text).unwrap_or(Value::String(text)) };
    Reply { status, headers, body }
}

/// Asserts the OpenAI error envelope of the agents group: status, code, param,
/// type, a message, `x-should-retry: false` and the local header.
pub fn assert_openai_error(reply: &Reply, status: u16, code: &str, param: Option<&str>) {
    assert_eq!(reply.status, status, "{}", reply.body);
    let error = &reply.body["error"];
    assert_eq!((error["code"].as_str(), error["param"].as_str()), (Some(code), param), "{}", reply.body);
    assert!(error["message"].as_str().is_some_and(|m| !m.is_empty()));
    let kind = if status == 404 { "not_found_error" } else { "invalid_request_error" };
    assert_eq!(error["type"], kind);
    assert_eq!((reply.header("x-should-retry"), reply.header("x-agent-sandbox-local")), (Some("false"), Some("1")));
}

/// Writes an executable shell script `name` holding `body` in `dir`.
pub fn script(dir: &Path, name: &str, body: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join(name);
    std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).expect("write script");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    path
}

/// The body of a create request for a `command` agent running `program` in `workspace`.
pub fn command_session(program: &Path, workspace: &Path, input: Option<&str>) -> Value {
    let mut body = json!({
        "agent": {"runtime": "command", "command": [program.to_str().expect("utf-8")], "name": "scripted"},
        "environment": {"type": "self_hosted", "workspace_directory": workspace.to_str().expect("utf-8")},
        "metadata": {"suite": "agents"},
    });
    if let Some(input) = input {
        body["input"] = json!(input);
    }
    body
}

/// Creates a session and returns its id.
pub async fn create(server: &TestServer, body: Value) -> String {
    let reply = call(server, "POST", "/v1/agents/sessions", Some(body)).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    reply.body["id"].as_str().expect("id").to_string()
}

/// One server-sent event: its `id`, `event` and parsed `data`.
#[derive(Debug, Clone)]
pub struct Sse {
    pub id: u64,
    pub event: String,
    pub data: Value,
}

/// Reads a session's event stream from `after` until the server ends it
/// (a caught-up `session.idle`), at most `limit` long.
pub async fn events(server: &TestServer, session: &str, after: Option<&str>, limit: Duration) -> Vec<Sse> {
    let mut request = reqwest::Client::new()
        .get(server.at(&format!("/v1/agents/sessions/{session}/events")))
        .header("authorization", server.bearer());
    if let Some(after) = after {
        request = request.query(&[("after", after)]);
    }
    let read = async {
        let mut response = request.send().await.expect("send");
        assert_eq!(response.status(), 200);
        let mut text = String::new();
        while let Some(chunk) = response.chunk().await.expect("chunk") {
            text.push_str(&String::from_utf8_lossy(&chunk));
        }
        text
    };
    let text = tokio::time::timeout(limit, read).await.expect("the stream ended");
    parse_sse(&text)
}

/// The events of an SSE text (comments skipped).
pub fn parse_sse(text: &str) -> Vec<Sse> {
    let mut out = Vec::new();
    for frame in text.split("\n\n") {
        let (mut id, mut event, mut data) = (None, None, None);
        for line in frame.lines() {
            if let Some(v) = line.strip_prefix("id: ") {
                id = v.parse().ok();
            } else if let Some(v) = line.strip_prefix("event: ") {
                event = Some(v.to_string());
            } else if let Some(v) = line.strip_prefix("data: ") {
                data = serde_json::from_str(v).ok();
            }
        }
        if let (Some(id), Some(event), Some(data)) = (id, event, data) {
            out.push(Sse { id, event, data });
        }
    }
    out
}

/// Waits (on the event stream, not a timer) until the session is idle with nothing queued.
pub async fn wait_idle(server: &TestServer, session: &str) -> Vec<Sse> {
    events(server, session, Some("0"), Duration::from_secs(60)).await
}

/// The event types of `events`, in order.
pub fn types(events: &[Sse]) -> Vec<&str> {
    events.iter().map(|e| e.event.as_str()).collect()
}

/// Whether process `pid` is still alive (a zombie counts as gone).
pub fn alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat.rsplit(')').next().is_some_and(|rest| rest.trim_start().starts_with('Z')),
        Err(_) => false,
    }
}

/// Reads a session's event stream from the start until an event matches
/// `pred`, and returns it (the connection is then dropped).
pub async fn first_event(server: &TestServer, session: &str, pred: impl Fn(&Sse) -> bool, limit: Duration) -> Sse {
    let request = reqwest::Client::new()
        .get(server.at(&format!("/v1/agents/sessions/{session}/events")))
        .query(&[("after", "0")])
        .header("authorization", server.bearer());
    let read = async {
        let mut response = request.send().await.expect("send");
        let mut text = String::new();
        let mut seen = 0usize;
        while let Some(chunk) = response.chunk().await.expect("chunk") {
            text.push_str(&String::from_utf8_lossy(&chunk));
            // Parse only the frames completed since the last chunk.
            let Some(end) = text.rfind("\n\n") else { continue };
            let fresh = parse_sse(&text[..end]);
            if let Some(found) = fresh.into_iter().find(|e| pred(e)) {
                return found;
            }
            seen += end;
            text.drain(..end + 2);
        }
        panic!("the stream ended without the event after {seen} bytes; the rest:\n{text}");
    };
    tokio::time::timeout(limit, read).await.expect("the event came")
}

/// The pid a script logged as `pid=<n>` (a line outside the protocol, kept as a log event).
pub fn logged_pid(event: &Sse) -> Option<i32> {
    event.data["text"].as_str()?.strip_prefix("pid=")?.trim().parse().ok()
}
