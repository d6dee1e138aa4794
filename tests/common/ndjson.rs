//! A code-port client for tests: `POST /execute` (detached with
//! `X-Abx-Detach: keep` when asked) and `GET /executions/{id}` re-attaches,
//! read as NDJSON lines as they arrive, with the cursor bookkeeping a
//! re-attaching client does.

use std::time::Duration;

use futures_util::StreamExt;
use serde_json::{json, Value};

use super::TestServer;

/// The code port's base URL.
pub fn code_url(server: &TestServer) -> String {
    server.listeners.iter().find(|(name, _)| name == "code").map(|(_, url)| url.clone()).expect("code listener")
}

fn http() -> &'static reqwest::Client {
    static HTTP: std::sync::OnceLock<reqwest::Client> = std::sync::OnceLock::new();
    HTTP.get_or_init(reqwest::Client::new)
}

/// The lines of an answer, read as they arrive.
pub struct Lines {
    body: std::pin::Pin<Box<dyn futures_util::Stream<Item = reqwest::Result<bytes::Bytes>> + Send>>,
    buffer: Vec<u8>,
    at: usize,
}

impl Lines {
    /// The next line: its JSON and its exact text (with the newline); `None` at the end of the body.
    pub async fn next(&mut self) -> Option<(Value, Vec<u8>)> {
        loop {
            if let Some(end) = self.buffer[self.at..].iter().position(|b| *b == b'\n') {
                let raw = self.buffer[self.at..self.at + end + 1].to_vec();
                self.at += end + 1;
                let value = serde_json::from_slice(&raw).expect("a JSON line");
                return Some((value, raw));
            }
            let chunk = tokio::time::timeout(Duration::from_secs(30), self.body.next()).await.expect("in time")?;
            self.buffer.drain(..self.at);
            self.at = 0;
            self.buffer.extend_from_slice(&chunk.expect("chunk"));
        }
    }
}

/// An answer: status, the execution id header, the lines, the error body.
pub struct Answer {
    pub status: u16,
    pub execution_id: Option<String>,
    pub lines: Lines,
    pub error: String,
}

async fn answer(request: reqwest::RequestBuilder) -> Answer {
    let response = request.send().await.expect("send");
    let status = response.status().as_u16();
    let execution_id = response.headers().get("x-abx-execution-id").and_then(|v| v.to_str().ok()).map(str::to_string);
    if status != 200 {
        let error = response.text().await.unwrap_or_default();
        let lines = Lines { body: Box::pin(futures_util::stream::empty()), buffer: Vec::new(), at: 0 };
        return Answer { status, execution_id, lines, error };
    }
    let lines = Lines { body: Box::pin(response.bytes_stream()), buffer: Vec::new(), at: 0 };
    Answer { status, execution_id, lines, error: String::new() }
}

/// `POST /execute` of `code` (Python) with `token`, detached when `detach` is `Some("keep")`.
pub async fn execute(server: &TestServer, token: &str, code: &str, detach: Option<&str>) -> Answer {
    execute_body(server, token, json!({"code": code}), detach).await
}

/// `POST /execute` of this body.
pub async fn execute_body(server: &TestServer, token: &str, body: Value, detach: Option<&str>) -> Answer {
    let mut request = http().post(format!("{}/execute", code_url(server))).bearer_auth(token).json(&body);
    if let Some(detach) = detach {
        request = request.header("x-abx-detach", detach);
    }
    answer(request).await
}

/// `POST /contexts`: a new Python context's id.
pub async fn context(server: &TestServer, token: &str) -> String {
    let response = http()
        .post(format!("{}/contexts", code_url(server)))
        .bearer_auth(token)
        .json(&json!({"language": "python"}))
        .send()
        .await
        .expect("send");
    let body: Value = response.json().await.expect("a context");
    body["id"].as_str().expect("an id").to_string()
}

/// `GET /executions/{id}` with `token`, after `cursor` (as `Last-Event-ID`, or `?after=` when `in_query`).
pub async fn attach(server: &TestServer, token: &str, id: &str, cursor: Option<&str>, in_query: bool) -> Answer {
    let mut url = format!("{}/executions/{id}", code_url(server));
    if let (Some(cursor), true) = (cursor, in_query) {
        url.push_str(&format!("?after={cursor}"));
    }
    let mut request = http().get(url).bearer_auth(token);
    if let (Some(cursor), false) = (cursor, in_query) {
        request = request.header("last-event-id", cursor);
    }
    answer(request).await
}

/// What a re-attaching client keeps: every numbered line received, in order, and its cursor.
#[derive(Debug, Default, Clone)]
pub struct Received {
    pub execution: String,
    /// The numbered lines received (exact text).
    pub lines: Vec<Vec<u8>>,
    /// The gaps: (after how many numbered lines, lines lost, bytes lost).
    pub gaps: Vec<(u64, u64, u64)>,
    /// Numbered lines passed (received or lost).
    pub passed: u64,
    /// Their bytes.
    pub bytes: u64,
    pub ended: bool,
}

impl Received {
    /// The cursor to re-attach with.
    pub fn cursor(&self) -> String {
        format!("{}:{}:{}", self.execution, self.passed, self.bytes)
    }

    /// Takes one line of an answer; returns its type.
    pub fn take(&mut self, value: &Value, raw: &[u8]) -> String {
        let kind = value["type"].as_str().expect("a type").to_string();
        match kind.as_str() {
            "keepalive" => {}
            "execution" => {
                let id = value["execution_id"].as_str().expect("execution_id");
                assert!(self.execution.is_empty() || self.execution == id, "the same execution");
                self.execution = id.to_string();
            }
            "gap" => {
                let (lines, bytes) = (value["lines"].as_u64().expect("lines"), value["bytes"].as_u64().expect("bytes"));
                self.gaps.push((self.passed, lines, bytes));
                (self.passed, self.bytes) = (self.passed + lines, self.bytes + bytes);
            }
            "end_of_execution" => self.ended = true,
            _ => {
                assert!(!self.ended, "nothing after end_of_execution");
                self.lines.push(raw.to_vec());
                (self.passed, self.bytes) = (self.passed + 1, self.bytes + raw.len() as u64);
            }
        }
        kind
    }

    /// Forgets every line after the first `keep` (a client resuming from an older cursor).
    pub fn rewind(&mut self, keep: usize) {
        assert!(self.gaps.is_empty(), "rewinding is only checked without gaps");
        self.lines.truncate(keep);
        self.passed = keep as u64;
        self.bytes = self.lines.iter().map(|l| l.len() as u64).sum();
    }

    /// The stdout text of the lines received.
    pub fn stdout(&self) -> String {
        self.lines
            .iter()
            .map(|raw| serde_json::from_slice::<Value>(raw).expect("JSON"))
            .filter(|v| v["type"] == "stdout")
            .map(|v| v["text"].as_str().expect("text").to_string())
            .collect()
    }
}
