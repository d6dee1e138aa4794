//! The edge of every port: a declared body over the limit is answered 413
//! at once and the connection closes cleanly; an early refusal of a request
//! with a body never costs the client its keep-alive connection.

mod common;

use std::time::Duration;

use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// One HTTP/1.1 answer read off a raw connection: status, headers (lower case) and body.
struct Answer {
    status: u16,
    head: String,
    body: Vec<u8>,
}

async fn read_answer(stream: &mut TcpStream, pending: &mut Vec<u8>) -> std::io::Result<Answer> {
    let mut chunk = [0u8; 8192];
    let end = loop {
        if let Some(at) = pending.windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Err(std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "closed before an answer"));
        }
        pending.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&pending[..end]).to_ascii_lowercase();
    pending.drain(..end);
    let status = head.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    let length: usize =
        head.lines().find_map(|l| l.strip_prefix("content-length:")).and_then(|v| v.trim().parse().ok()).unwrap_or(0);
    while pending.len() < length {
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Err(std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "closed inside a body"));
        }
        pending.extend_from_slice(&chunk[..n]);
    }
    let body = pending.drain(..length).collect();
    Ok(Answer { status, head, body })
}

fn address(url: &str) -> String {
    url.trim_start_matches("http://").to_string()
}

#[tokio::test]
async fn a_declared_body_over_the_limit_is_refused_at_once_and_the_connection_closes_cleanly() {
    let server = common::start();
    let mut stream = TcpStream::connect(address(&server.url)).await.expect("connect");
    let size = 20 * 1024 * 1024;
    let head = format!(
        "POST /files/upload-stream HTTP/1.1\r\nHost: x\r\nAuthorization: {}\r\nContent-Type: application/json\r\nContent-Length: {size}\r\n\r\n",
        server.bearer()
    );
    stream.write_all(head.as_bytes()).await.expect("head");
    let mut pending = Vec::new();
    // Nothing of the body was sent: the answer cannot have waited for it.
    let answer = tokio::time::timeout(Duration::from_secs(5), read_answer(&mut stream, &mut pending))
        .await
        .expect("answered without the body")
        .expect("answer");
    assert_eq!(answer.status, 413);
    assert!(answer.head.contains("connection: close"), "{}", answer.head);
    let body: serde_json::Value = serde_json::from_slice(&answer.body).expect("JSON");
    assert_eq!((body["code"].as_str(), body["limit"].as_u64()), (Some("payload_too_large"), Some(10 * 1024 * 1024)));
    // The client sends its body anyway; the server reads it and closes: an end of stream, not a reset.
    stream.write_all(&vec![b' '; size]).await.expect("the body is read, not refused with a reset");
    let mut rest = Vec::new();
    let closed = tokio::time::timeout(Duration::from_secs(30), stream.read_to_end(&mut rest)).await.expect("closed");
    assert!(closed.is_ok(), "a clean close: {closed:?}");
    let health = server.http().get(server.at("/health")).send().await.expect("still healthy");
    assert_eq!(health.status(), 200);
}

/// A refused request with a body (head and body in separate writes, so the
/// body may arrive after the refusal was decided), then `/health`, again and
/// again on one connection: every answer arrives and the connection stays open.
async fn refusals_then_health(addr: String, refused: String, body: String, rounds: usize) -> usize {
    let mut stream = TcpStream::connect(&addr).await.expect("connect");
    let mut pending = Vec::new();
    let health = "GET /health HTTP/1.1\r\nHost: x\r\n\r\n";
    for round in 0..rounds {
        stream.write_all(refused.as_bytes()).await.expect("head");
        if round % 2 == 0 {
            tokio::task::yield_now().await;
        }
        stream.write_all(body.as_bytes()).await.expect("body");
        let answer = read_answer(&mut stream, &mut pending).await.expect("the refusal arrives");
        assert!((400..500).contains(&answer.status), "round {round}: {}", answer.head);
        assert!(!answer.head.contains("connection: close"), "round {round}: {}", answer.head);
        stream.write_all(health.as_bytes()).await.expect("health");
        let answer = read_answer(&mut stream, &mut pending).await.expect("no reset after an early refusal");
        assert!(answer.status < 300, "round {round}: {}", answer.head);
    }
    rounds
}

#[tokio::test]
async fn early_refusals_never_reset_a_keep_alive_connection() {
    let policy = json!({"endpoints": {"env_set": {"enabled": false}}});
    let server = common::server().env("ABX_SERVER_POLICY", &policy.to_string()).start();
    let body = json!({"command": "echo never", "vars": {"A": "1"}}).to_string();
    let post = |path: &str, auth: &str| {
        format!(
            "POST {path} HTTP/1.1\r\nHost: x\r\n{auth}Content-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            body.len()
        )
    };
    let api = address(&server.url);
    let envd = address(&common::envd::envd(&server));
    let code = address(&server.listeners.iter().find(|(n, _)| n == "code").expect("code").1);
    let bearer = format!("Authorization: {}\r\n", server.bearer());
    let cases = [
        (api.clone(), post("/shell", "Authorization: Bearer wrong-token\r\n")),
        (api, post("/env", &bearer)),
        (envd, post("/filesystem.Filesystem/Stat", "")),
        (code, post("/execute", "")),
    ];
    let tasks: Vec<_> = cases
        .into_iter()
        .flat_map(|(addr, request)| {
            let body = body.clone();
            (0..2).map(move |_| tokio::spawn(refusals_then_health(addr.clone(), request.clone(), body.clone(), 250)))
        })
        .collect();
    let mut total = 0;
    for task in tasks {
        total += task.await.expect("no failure");
    }
    assert_eq!(total, 2000);
}

/// A chunked body as the e2b SDK sends envd's `Start`: the head, the one
/// Connect envelope, and the closing chunk, each in its own write.
fn chunked_start() -> (String, Vec<Vec<u8>>) {
    let message = br#"{"process":{"cmd":"/bin/sh","args":["-c","pwd"]}}"#;
    let mut envelope = vec![0u8];
    envelope.extend_from_slice(&(message.len() as u32).to_be_bytes());
    envelope.extend_from_slice(message);
    let mut chunk = format!("{:x}\r\n", envelope.len()).into_bytes();
    chunk.extend_from_slice(&envelope);
    chunk.extend_from_slice(b"\r\n");
    let head = format!(
        "POST /process.Process/Start HTTP/1.1\r\nHost: x\r\nX-Access-Token: {}\r\n\
         Content-Type: application/connect+json\r\nConnect-Protocol-Version: 1\r\nTransfer-Encoding: chunked\r\n\r\n",
        common::TOKEN
    );
    (head, vec![chunk, b"0\r\n\r\n".to_vec()])
}

#[tokio::test]
async fn a_refused_chunked_body_keeps_the_connection_and_a_slow_one_closes_it_cleanly() {
    let server = common::server().args(["--preset", "read-only"]).start();
    let envd = address(&common::envd::envd(&server));
    let (head, parts) = chunked_start();
    let health = "GET /health HTTP/1.1\r\nHost: x\r\n\r\n";

    // The body ends just after the refusal was decided: it is read, and the connection stays open.
    let mut stream = TcpStream::connect(&envd).await.expect("connect");
    let mut pending = Vec::new();
    for round in 0..20 {
        stream.write_all(head.as_bytes()).await.expect("head");
        for part in &parts {
            tokio::task::yield_now().await;
            stream.write_all(part).await.expect("a part of the body");
        }
        let answer = read_answer(&mut stream, &mut pending).await.expect("the refusal arrives");
        let text = String::from_utf8_lossy(&answer.body);
        assert!(text.contains("permission_denied"), "round {round}: {text}");
        assert!(!answer.head.contains("connection: close"), "round {round}: {}", answer.head);
        stream.write_all(health.as_bytes()).await.expect("health");
        let answer = read_answer(&mut stream, &mut pending).await.expect("no reset after a refusal");
        assert_eq!(answer.status, 204, "round {round}: envd's health");
    }

    // The body's end is held back until the answer came: the answer says the
    // connection closes, the rest of the body is still read, then a clean end.
    let mut stream = TcpStream::connect(&envd).await.expect("connect");
    let mut pending = Vec::new();
    stream.write_all(head.as_bytes()).await.expect("head");
    stream.write_all(&parts[0]).await.expect("the envelope");
    let answer = read_answer(&mut stream, &mut pending).await.expect("the refusal arrives without the body's end");
    assert!(answer.head.contains("connection: close"), "{}", answer.head);
    stream.write_all(&parts[1]).await.expect("the body's end is read, not refused with a reset");
    let mut rest = Vec::new();
    let closed = tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut rest)).await.expect("closed");
    assert_eq!(closed.expect("a clean close, not a reset"), 0);
}
