//! A `/shell/stream` client for tests: opens a stream (resuming with
//! `Last-Event-ID` when asked) and reads its server-sent events as they arrive.

use std::time::Duration;

use futures_util::StreamExt;
use serde_json::{json, Value};

use super::TestServer;

/// One SSE event: `(event, id, data)`.
pub type Sse = (String, Option<String>, Value);

/// The events of a `/shell/stream` response, read as they arrive.
pub struct Events {
    body: std::pin::Pin<Box<dyn futures_util::Stream<Item = reqwest::Result<bytes::Bytes>> + Send>>,
    buffer: Vec<u8>,
    at: usize,
}

impl Events {
    pub async fn next(&mut self) -> Option<Sse> {
        loop {
            if let Some(end) = self.buffer[self.at..].windows(2).position(|w| w == b"\n\n") {
                let block = std::str::from_utf8(&self.buffer[self.at..self.at + end + 2]).expect("UTF-8").to_string();
                self.at += end + 2;
                let (mut name, mut id, mut data) = (String::from("message"), None, None);
                for line in block.lines() {
                    if let Some(v) = line.strip_prefix("event: ") {
                        name = v.to_string();
                    } else if let Some(v) = line.strip_prefix("id: ") {
                        id = Some(v.to_string());
                    } else if let Some(v) = line.strip_prefix("data: ") {
                        data = Some(serde_json::from_str(v).expect("JSON data"));
                    }
                }
                match data {
                    Some(data) => return Some((name, id, data)),
                    None => continue, // a keep-alive comment
                }
            }
            let chunk = tokio::time::timeout(Duration::from_secs(20), self.body.next()).await.expect("in time")?;
            self.buffer.drain(..self.at);
            self.at = 0;
            self.buffer.extend_from_slice(&chunk.expect("chunk"));
        }
    }
}

/// `POST /shell/stream` of `command`, resuming after `last` when given: `(status, events)`.
pub async fn stream(server: &TestServer, command: &str, last: Option<&str>) -> (u16, Events, String) {
    // One client for all: building one per request costs more than a resume may wait.
    static HTTP: std::sync::OnceLock<reqwest::Client> = std::sync::OnceLock::new();
    let request = HTTP
        .get_or_init(reqwest::Client::new)
        .post(server.at("/shell/stream"))
        .bearer_auth(super::TOKEN)
        .json(&json!({"command": command, "shell": true}));
    events_of(request, last).await
}

/// `GET /files/watch?{query}`, resuming after `last` when given: `(status, events, error body)`.
pub async fn watch(server: &TestServer, query: &str, last: Option<&str>) -> (u16, Events, String) {
    static HTTP: std::sync::OnceLock<reqwest::Client> = std::sync::OnceLock::new();
    let request = HTTP
        .get_or_init(reqwest::Client::new)
        .get(server.at(&format!("/files/watch?{query}")))
        .bearer_auth(super::TOKEN);
    events_of(request, last).await
}

/// Sends `request` (with `Last-Event-ID: last` when given): `(status, events, error body)`.
async fn events_of(mut request: reqwest::RequestBuilder, last: Option<&str>) -> (u16, Events, String) {
    if let Some(last) = last {
        request = request.header("last-event-id", last);
    }
    let response = request.send().await.expect("send");
    let status = response.status().as_u16();
    if status != 200 {
        let text = response.text().await.unwrap_or_default();
        let empty = Events { body: Box::pin(futures_util::stream::empty()), buffer: Vec::new(), at: 0 };
        return (status, empty, text);
    }
    (status, Events { body: Box::pin(response.bytes_stream()), buffer: Vec::new(), at: 0 }, String::new())
}
