//! An MCP client over plain HTTP for tests: a session (`initialize`, calls,
//! tools), the SSE events of an answer as they arrive, and resuming a
//! stream with `GET /mcp` and `Last-Event-ID`.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::TestServer;

/// An MCP session opened over plain HTTP.
pub struct Session<'a> {
    pub server: &'a TestServer,
    pub id: String,
    pub http: reqwest::Client,
    pub token: &'a str,
}

/// A `POST /mcp` with the token and the headers the transport needs.
pub fn request(server: &TestServer, http: &reqwest::Client, token: &str) -> reqwest::RequestBuilder {
    http.post(server.at("/mcp"))
        .header("authorization", format!("Bearer {token}"))
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
}

/// The `initialize` request opening a session.
pub const INITIALIZE: &str = r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#;

/// The JSON-RPC messages of an SSE (or JSON) answer.
pub fn messages(text: &str) -> Vec<Value> {
    if let Ok(value) = serde_json::from_str::<Value>(text) {
        return vec![value];
    }
    text.lines().filter_map(|l| l.strip_prefix("data:")).filter_map(|d| serde_json::from_str(d.trim()).ok()).collect()
}

impl<'a> Session<'a> {
    /// A session opened with the default token.
    pub async fn open(server: &'a TestServer) -> Session<'a> {
        Session::open_as(server, super::TOKEN).await
    }

    /// A session opened with `token`: `initialize`, then `notifications/initialized`.
    pub async fn open_as(server: &'a TestServer, token: &'a str) -> Session<'a> {
        let http = reqwest::Client::new();
        let opened = request(server, &http, token).body(INITIALIZE).send().await.expect("initialize");
        assert_eq!(opened.status().as_u16(), 200);
        let id = opened.headers()["mcp-session-id"].to_str().expect("id").to_string();
        let session = Session { server, id, http, token };
        let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        assert_eq!(session.post(&initialized).send().await.expect("initialized").status().as_u16(), 202);
        session
    }

    /// A `POST /mcp` of `message` in this session.
    pub fn post(&self, message: &Value) -> reqwest::RequestBuilder {
        request(self.server, &self.http, self.token)
            .header("mcp-session-id", &self.id)
            .header("mcp-protocol-version", "2025-06-18")
            .body(message.to_string())
    }

    /// The answer to request `id`.
    pub async fn call(&self, id: u64, method: &str, params: Value) -> Value {
        let message = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        let text = self.post(&message).send().await.expect("send").text().await.expect("body");
        messages(&text).into_iter().find(|m| m["id"] == id).unwrap_or_else(|| panic!("no answer in {text}"))
    }

    /// The answer to a `tools/call` of `name`.
    pub async fn tool(&self, id: u64, name: &str, arguments: Value) -> Value {
        self.call(id, "tools/call", json!({"name": name, "arguments": arguments})).await
    }
}

/// SSE events of a body as it arrives: `(id, JSON-RPC message)` for each event with data.
pub struct Events {
    body: std::pin::Pin<Box<dyn futures_util::Stream<Item = reqwest::Result<bytes::Bytes>> + Send>>,
    buffer: String,
}

impl Events {
    /// The events of `response`'s body.
    pub fn of(response: reqwest::Response) -> Events {
        Events { body: Box::pin(response.bytes_stream()), buffer: String::new() }
    }

    /// The next event with an id and a JSON-RPC message (waits at most 20 s); `None` at the end.
    pub async fn next(&mut self) -> Option<(String, Value)> {
        use futures_util::StreamExt;
        loop {
            while let Some(end) = self.buffer.find("\n\n") {
                let event: String = self.buffer.drain(..end + 2).collect();
                let field = |name: &str| event.lines().find_map(|l| l.strip_prefix(name)).map(str::trim);
                let message = field("data:").and_then(|d| serde_json::from_str::<Value>(d).ok());
                if let (Some(id), Some(message)) = (field("id:"), message) {
                    return Some((id.to_string(), message));
                }
            }
            let chunk =
                tokio::time::timeout(Duration::from_secs(20), self.body.next()).await.expect("an event in time");
            self.buffer.push_str(&String::from_utf8_lossy(&chunk?.expect("chunk")));
        }
    }
}

impl Session<'_> {
    /// `GET /mcp` with `Last-Event-ID: last`.
    pub async fn resume(&self, last: &str) -> reqwest::Response {
        self.http
            .get(self.server.at("/mcp"))
            .header("authorization", format!("Bearer {}", self.token))
            .header("accept", "text/event-stream")
            .header("mcp-session-id", &self.id)
            .header("mcp-protocol-version", "2025-06-18")
            .header("last-event-id", last)
            .send()
            .await
            .expect("resume")
    }

    /// Waits until the session has sent the event `id` (a resume after an
    /// event not yet sent is refused 400), so a test resumes only after
    /// what it needs was produced.
    pub async fn wait_sent(&self, id: &str) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while self.resume(id).await.status().as_u16() == 400 {
            assert!(Instant::now() < deadline, "the event {id} was never sent");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

/// Every JSON-RPC message of a stream until it ends (or `id`'s answer).
pub async fn until_answer(events: &mut Events, id: u64) -> Vec<(String, Value)> {
    let mut seen = Vec::new();
    while let Some((event, message)) = events.next().await {
        let done = message["id"] == id;
        seen.push((event, message));
        if done {
            break;
        }
    }
    seen
}

/// The `n`th event id of the call stream whose event id is `id` (`<stream>:<seq>`).
pub fn event_of(id: &str, seq: u64) -> String {
    let stream = id.split(':').next().unwrap_or_default();
    format!("{stream}:{seq}")
}
