//! Helpers to speak envd's Connect protocol to a test server: unary calls,
//! envelopes, and the frames of a server stream read as they arrive.

use std::time::Duration;

use futures_util::StreamExt;
use serde_json::Value;

use super::TestServer;

pub fn envd(server: &TestServer) -> String {
    server.listeners.iter().find(|(name, _)| name == "envd").map(|(_, url)| url.clone()).expect("envd listener")
}

/// A unary Connect call: `(status, body)`.
pub async fn call(server: &TestServer, method: &str, body: Value, token: Option<&str>) -> (u16, Value) {
    let mut request = reqwest::Client::new()
        .post(format!("{}/{method}", envd(server)))
        .header("content-type", "application/json")
        .header("connect-protocol-version", "1")
        .body(body.to_string());
    if let Some(token) = token {
        request = request.header("x-access-token", token);
    }
    let response = request.send().await.expect("send");
    let status = response.status().as_u16();
    let text = response.text().await.expect("body");
    (status, serde_json::from_str(&text).unwrap_or(Value::String(text)))
}

pub fn envelope(flags: u8, body: &Value) -> Vec<u8> {
    let payload = body.to_string().into_bytes();
    let mut frame = vec![flags];
    frame.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    frame.extend_from_slice(&payload);
    frame
}

/// The frames of a server stream, as `(flags, message)`, read as they arrive.
pub struct Frames {
    /// The response's headers.
    pub headers: reqwest::header::HeaderMap,
    body: std::pin::Pin<Box<dyn futures_util::Stream<Item = reqwest::Result<bytes::Bytes>> + Send>>,
    buffer: Vec<u8>,
}

impl Frames {
    pub async fn open(
        server: &TestServer,
        method: &str,
        body: Value,
        headers: &[(&str, &str)],
    ) -> (u16, String, Frames) {
        let mut request = reqwest::Client::new()
            .post(format!("{}/{method}", envd(server)))
            .header("content-type", "application/connect+json")
            .header("connect-protocol-version", "1")
            .body(envelope(0, &body));
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let response = request.send().await.expect("send");
        let status = response.status().as_u16();
        let kind = response.headers().get("content-type").and_then(|v| v.to_str().ok()).unwrap_or("").to_string();
        let headers = response.headers().clone();
        (status, kind, Frames { headers, body: Box::pin(response.bytes_stream()), buffer: Vec::new() })
    }

    pub async fn next(&mut self) -> Option<(u8, Value)> {
        loop {
            if self.buffer.len() >= 5 {
                let len = u32::from_be_bytes([self.buffer[1], self.buffer[2], self.buffer[3], self.buffer[4]]) as usize;
                if self.buffer.len() >= 5 + len {
                    let flags = self.buffer[0];
                    let message = serde_json::from_slice(&self.buffer[5..5 + len]).expect("a JSON message");
                    self.buffer.drain(..5 + len);
                    return Some((flags, message));
                }
            }
            match tokio::time::timeout(Duration::from_secs(20), self.body.next()).await.expect("a frame in time") {
                Some(chunk) => self.buffer.extend_from_slice(&chunk.expect("chunk")),
                None => return None,
            }
        }
    }
}
