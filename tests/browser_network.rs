//! Black-box tests of the browser's network path: every connection Debian's
//! Chromium makes goes through the daemon's proxy, so requests that request
//! interception never sees (WebSockets, beacons, keepalive fetches,
//! prefetches, pings and preconnects from the first `about:blank` page) are
//! held to the URL policy too, and their refusals are audited.
//!
//! A "victim" listener on loopback stands for a service the policy denies
//! (`url_deny`); a "marker" listener, allowed, tells the test when the page's
//! requests have been sent: the page fires at the victim first, then at the
//! marker.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// A loopback listener that counts the connections it accepts and answers
/// each request head with an empty `200`.
struct Listener {
    port: u16,
    accepted: Arc<AtomicUsize>,
}

fn listener() -> Listener {
    let socket = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = socket.local_addr().expect("addr").port();
    let accepted = Arc::new(AtomicUsize::new(0));
    let count = Arc::clone(&accepted);
    std::thread::spawn(move || {
        for stream in socket.incoming().flatten() {
            count.fetch_add(1, Ordering::SeqCst);
            std::thread::spawn(move || {
                let mut reader = BufReader::new(stream.try_clone().expect("clone"));
                let mut line = String::new();
                while reader.read_line(&mut line).is_ok_and(|n| n > 2) {
                    line.clear();
                }
                let mut stream = stream;
                let _ = stream.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
            });
        }
    });
    Listener { port, accepted }
}

impl Listener {
    fn count(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }

    fn wait_for(&self, n: usize, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        while self.count() < n {
            assert!(Instant::now() < deadline, "the marker was never reached");
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

fn server_denying(victim: u16) -> common::TestServer {
    let policy = json!({
        "groups": {"browser": true},
        "endpoints": {"browser_navigate": {"params": {
            "block_private_networks": false,
            "url_deny": [format!("*127.0.0.1:{victim}*")],
        }}},
    });
    common::server().env("ABX_SERVER_POLICY", &policy.to_string()).start()
}

async fn evaluate(server: &common::TestServer, script: &str) -> (u16, Value) {
    let response = server
        .http()
        .post(server.at("/browser/evaluate"))
        .header("Authorization", server.bearer())
        .json(&json!({"script": script, "timeout": 20000}))
        .send()
        .await
        .expect("request");
    (response.status().as_u16(), response.json().await.expect("json"))
}

/// The denied requests reach nothing: after the marker (sent after them)
/// arrived, the victim is given a moment more, then must have seen nothing.
fn assert_untouched(victim: &Listener, marker: &Listener) {
    marker.wait_for(1, Duration::from_secs(20));
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(victim.count(), 0, "a denied port was reached");
}

#[tokio::test]
async fn requests_of_the_first_blank_page_reach_no_denied_port() {
    let (victim, marker) = (listener(), listener());
    let server = server_denying(victim.port);
    let to = format!("http://127.0.0.1:{}/x", victim.port);
    // The first call: the page is still the initial about:blank, where CDP
    // interception pauses none of these.
    let script = format!(
        r#"async () => {{
            navigator.sendBeacon("{to}", "secret");
            try {{ fetch("{to}", {{method: "POST", body: "secret", keepalive: true, mode: "no-cors"}}); }} catch (e) {{}}
            for (const rel of ["prefetch", "preconnect", "dns-prefetch"]) {{
                const link = document.createElement("link");
                link.rel = rel; link.href = "{to}";
                document.head.appendChild(link);
            }}
            const a = document.createElement("a");
            a.href = "http://127.0.0.1:{marker}/page"; a.ping = "{to}";
            document.body.appendChild(a);
            await new Promise(r => setTimeout(r, 300));
            await fetch("http://127.0.0.1:{marker}/marker", {{mode: "no-cors"}}).catch(() => null);
            return "sent";
        }}"#,
        marker = marker.port
    );
    let (status, answer) = evaluate(&server, &script).await;
    assert_eq!((status, answer), (200, json!({"result": "sent"})));
    assert_untouched(&victim, &marker);
    let log = server.wait_for_log(&format!("127.0.0.1:{}", victim.port), Duration::from_secs(5));
    let audit = log.lines().find(|l| l.contains(" audit:") && l.contains(&to)).expect("an audit line for the beacon");
    assert!(audit.contains("decision=\"deny\"") && audit.contains("endpoint=\"browser_navigate\""), "{audit}");
    assert!(audit.contains("rule=\"url_deny:*127.0.0.1:"), "{audit}");
}

#[tokio::test]
async fn a_websocket_to_a_denied_port_never_reaches_it() {
    let (victim, marker) = (listener(), listener());
    let server = server_denying(victim.port);
    let script = format!(
        r#"async () => {{
            const outcome = await new Promise(resolve => {{
                const ws = new WebSocket("ws://127.0.0.1:{victim}/chat");
                ws.onopen = () => resolve("open");
                ws.onerror = () => resolve("error");
            }});
            await fetch("http://127.0.0.1:{marker}/marker", {{mode: "no-cors"}}).catch(() => null);
            return outcome;
        }}"#,
        victim = victim.port,
        marker = marker.port
    );
    let (status, answer) = evaluate(&server, &script).await;
    assert_eq!((status, answer), (200, json!({"result": "error"})));
    assert_untouched(&victim, &marker);
    let url = format!("ws://127.0.0.1:{}/chat", victim.port);
    let log = server.wait_for_log(&url, Duration::from_secs(5));
    assert!(
        log.lines().any(|l| l.contains(" audit:") && l.contains(&url) && l.contains("method=\"CONNECT\"")),
        "{log}"
    );
}

#[tokio::test]
async fn allowed_loopback_pages_still_load_through_the_proxy() {
    let (victim, page) = (listener(), listener());
    let server = server_denying(victim.port);
    let script = format!(
        r#"async () => {{
            const r = await fetch("http://127.0.0.1:{page}/ok", {{mode: "no-cors"}});
            return r.type;
        }}"#,
        page = page.port
    );
    let (status, answer) = evaluate(&server, &script).await;
    assert_eq!((status, answer), (200, json!({"result": "opaque"})));
    page.wait_for(1, Duration::from_secs(5));
    assert_eq!(victim.count(), 0);
}
