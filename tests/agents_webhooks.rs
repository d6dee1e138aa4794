//! Black-box tests of `/v1/webhook_endpoints` and `/v1/webhook_event_types`
//! against the real binary, with a receiver on loopback that the test
//! starts (so these servers allow private URLs and plain http explicitly,
//! except where the default refusal is the point): signatures verified with
//! an HMAC computed here, retries after `500`, the session lifecycle events,
//! a dead receiver that does not delay a turn, secret rotation, refusals in
//! the reference's envelope, and endpoints that survive a restart.

mod common;

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::http::{HeaderMap, StatusCode};
use base64::Engine as _;
use common::agents::{agents_server, assert_openai_error, call, command_session, create, script, wait_idle, Reply};
use hmac::{Hmac, Mac};
use serde_json::{json, Value};
use sha2::Sha256;
use tokio::sync::mpsc;

const IDLE: &str = "agent.session.idle";
const ALL: [&str; 4] =
    ["agent.session.created", "agent.session.in_progress", "agent.session.idle", "agent.session.failed"];

/// One request the receiver got.
struct Delivery {
    headers: HeaderMap,
    body: Vec<u8>,
    at: Instant,
}

impl Delivery {
    fn header(&self, name: &str) -> &str {
        self.headers.get(name).and_then(|v| v.to_str().ok()).unwrap_or_default()
    }

    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).expect("a JSON event")
    }

    /// Whether the signature verifies under `secret` (computed here, as the
    /// Standard Webhooks libraries do).
    fn signed_with(&self, secret: &str) -> bool {
        let key = base64::engine::general_purpose::STANDARD
            .decode(secret.strip_prefix("whsec_").expect("whsec_"))
            .expect("base64 secret");
        let mut mac = Hmac::<Sha256>::new_from_slice(&key).expect("key");
        mac.update(format!("{}.{}.", self.header("webhook-id"), self.header("webhook-timestamp")).as_bytes());
        mac.update(&self.body);
        let expected = format!("v1,{}", base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes()));
        self.header("webhook-signature").split(' ').any(|s| s == expected)
    }
}

/// A loopback HTTP receiver answering the scripted statuses (then 200).
struct Receiver {
    url: String,
    rx: mpsc::UnboundedReceiver<Delivery>,
}

impl Receiver {
    async fn start(statuses: &[u16]) -> Receiver {
        let script = Arc::new(Mutex::new(statuses.iter().copied().collect::<VecDeque<u16>>()));
        let (tx, rx) = mpsc::unbounded_channel();
        let handler = move |headers: HeaderMap, body: axum::body::Bytes| {
            let (script, tx) = (Arc::clone(&script), tx.clone());
            async move {
                let _ = tx.send(Delivery { headers, body: body.to_vec(), at: Instant::now() });
                let status = script.lock().expect("script").pop_front().unwrap_or(200);
                StatusCode::from_u16(status).expect("status")
            }
        };
        let app = axum::Router::new().fallback(handler);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let url = format!("http://{}/hook", listener.local_addr().expect("addr"));
        tokio::spawn(async move { axum::serve(listener, app).await });
        Receiver { url, rx }
    }

    async fn next(&mut self) -> Delivery {
        tokio::time::timeout(Duration::from_secs(20), self.rx.recv()).await.expect("a delivery came").expect("open")
    }
}

/// A server that may deliver to loopback over plain http.
fn open_server(state: &std::path::Path) -> common::ServerBuilder {
    agents_server(state).env("ABX_AGENTS_ALLOW_PRIVATE_URLS", "1").env("ABX_AGENTS_WEBHOOK_ALLOW_HTTP", "1")
}

async fn register(server: &common::TestServer, url: &str, types: &[&str]) -> Value {
    let reply = call(server, "POST", "/v1/webhook_endpoints", Some(json!({"url": url, "event_types": types}))).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    reply.body
}

fn assert_refused(reply: &Reply, status: u16, code: &str, param: Option<&str>, message: &str) {
    assert_openai_error(reply, status, code, param);
    assert_eq!(reply.body["error"]["message"], message);
}

#[tokio::test]
async fn endpoints_are_managed_and_bad_input_is_refused_in_the_reference_envelope() {
    let state = tempfile::tempdir().expect("state");
    let server = agents_server(state.path()).start();
    let types = call(&server, "GET", "/v1/webhook_event_types", None).await;
    assert_eq!(types.body["data"], json!(ALL));
    assert_eq!(types.body["object"], "list");

    let body = json!({"url": "https://hooks.example.com/in", "event_types": [IDLE, IDLE], "name": "ci"});
    let created = call(&server, "POST", "/v1/webhook_endpoints", Some(body)).await;
    assert_eq!(created.status, 200, "{}", created.body);
    let id = created.body["id"].as_str().expect("id").to_string();
    assert!(id.starts_with("we_") && id.len() == 27, "{id}");
    let secret = created.body["signing_secret"].as_str().expect("secret once").to_string();
    assert!(secret.starts_with("whsec_"));
    assert_eq!(created.body["event_types"], json!([IDLE]), "duplicates dropped");
    assert_eq!(
        (created.body["object"].as_str(), created.body["name"].as_str()),
        (Some("webhook_endpoint"), Some("ci"))
    );
    assert_eq!(created.body["signing_secret_hint"], Value::Null);
    let got = call(&server, "GET", &format!("/v1/webhook_endpoints/{id}"), None).await;
    assert_eq!(got.body.get("signing_secret"), None, "the secret is shown once");
    let mut without = created.body.clone();
    without.as_object_mut().expect("object").remove("signing_secret");
    assert_eq!(got.body, without);
    let updated = call(&server, "POST", &format!("/v1/webhook_endpoints/{id}"), Some(json!({"name": null}))).await;
    assert_eq!((updated.status, updated.body["name"].as_str()), (200, Some("")));
    let list = call(&server, "GET", "/v1/webhook_endpoints?limit=1", None).await;
    assert_eq!((list.body["first_id"].as_str(), list.body["has_more"].as_bool()), (Some(id.as_str()), Some(false)));

    // Unknown ids: 404 in the reference's shape on every endpoint that takes one.
    let unknown = "we_000000000000000000000000";
    for (method, suffix, body) in [
        ("GET", "", None),
        ("POST", "", Some(json!({"name": "x"}))),
        ("DELETE", "", None),
        ("POST", "/rotate_secret", Some(json!({}))),
        ("POST", "/test", Some(json!({"event_type": IDLE}))),
    ] {
        let reply = call(&server, method, &format!("/v1/webhook_endpoints/{unknown}{suffix}"), body).await;
        let message = format!("webhook endpoint '{unknown}' not found");
        assert_refused(&reply, 404, "resource_not_found", Some("webhook_endpoint_id"), &message);
    }

    // Bad values: 400 naming the field, as the reference words it.
    let create = |body: Value| call(&server, "POST", "/v1/webhook_endpoints", Some(body));
    for (body, param, message) in [
        (json!({"event_types": [IDLE]}), "url", "url: expected a URL string"),
        (json!({"url": 5, "event_types": [IDLE]}), "url", "url: expected a URL string"),
        (json!({"url": "http://hooks.example.com/", "event_types": [IDLE]}), "url", "url: must be an https URL"),
        (
            json!({"url": "https://127.0.0.1:9/", "event_types": [IDLE]}),
            "url",
            "url: private and loopback hosts are not allowed",
        ),
        (
            json!({"url": "https://a.example.com/?t=1", "event_types": [IDLE]}),
            "url",
            "url: must not contain a query string or fragment",
        ),
        (
            json!({"url": "https://u:p@a.example.com/", "event_types": [IDLE]}),
            "url",
            "url: must not contain credentials",
        ),
        (
            json!({"url": "https://a.example.com/", "event_types": "x"}),
            "event_types",
            "event_types: a non-empty list of strings",
        ),
        (
            json!({"url": "https://a.example.com/", "event_types": []}),
            "event_types",
            "event_types: a non-empty list of strings",
        ),
        (
            json!({"url": "https://a.example.com/", "event_types": ["agent.session.action_required"]}),
            "event_types",
            "event_types: this server does not send 'agent.session.action_required'; see /v1/webhook_event_types",
        ),
        (
            json!({"url": "https://a.example.com/", "event_types": [IDLE], "name": 3}),
            "name",
            "name: expected a string up to 256 characters",
        ),
        (
            json!({"url": "https://a.example.com/", "event_types": [IDLE], "secret": "s"}),
            "secret",
            "secret: unknown or unsupported parameter",
        ),
    ] {
        assert_refused(&create(body).await, 400, "invalid_request", Some(param), message);
    }
    let path = format!("/v1/webhook_endpoints/{id}");
    let reply = call(&server, "POST", &path, Some(json!({"event_types": [1]}))).await;
    assert_refused(&reply, 400, "invalid_request", Some("event_types"), "event_types: a non-empty list of strings");
    let rotate = format!("{path}/rotate_secret");
    let reply = call(&server, "POST", &rotate, Some(json!({"keep_old_secret_active_for_24_hours": true}))).await;
    let message = "keep_old_secret_active_for_24_hours: events are signed with one secret locally";
    assert_refused(&reply, 400, "invalid_request", Some("keep_old_secret_active_for_24_hours"), message);
    let reply = call(&server, "POST", &format!("{path}/test"), Some(json!({"event_type": "nope"}))).await;
    assert_refused(
        &reply,
        400,
        "invalid_request",
        Some("event_type"),
        "event_type: not an event type this server sends",
    );
    let reply = call(&server, "GET", "/v1/webhook_endpoints?limit=0", None).await;
    assert_eq!((reply.status, reply.body["error"]["param"].as_str()), (400, Some("limit")));
    let reply = call(&server, "GET", "/v1/webhook_endpoints?after=we_nope", None).await;
    assert_eq!((reply.status, reply.body["error"]["code"].as_str()), (404, Some("agents.cursor_not_found")));
    let reply = call(&server, "POST", "/v1/webhook_endpoints", Some(json!([1]))).await;
    assert_eq!(reply.status, 400, "a JSON array is not a body");
    let big = json!({"url": "https://a.example.com/", "event_types": [IDLE], "name": "x".repeat(11 * 1024 * 1024)});
    let reply = call(&server, "POST", "/v1/webhook_endpoints", Some(big)).await;
    assert_eq!((reply.status, reply.body["code"].as_str()), (413, Some("payload_too_large")));

    let rotated = call(&server, "POST", &rotate, Some(json!({"keep_old_secret_active_for_24_hours": false}))).await;
    assert_eq!(rotated.status, 200, "{}", rotated.body);
    assert_ne!(rotated.body["signing_secret"].as_str(), Some(secret.as_str()));
    let deleted = call(&server, "DELETE", &path, None).await;
    assert_eq!(deleted.body["object"], "webhook_endpoint.deleted");
    assert_eq!((deleted.body["id"].as_str(), deleted.body["deleted"].as_bool()), (Some(id.as_str()), Some(true)));
    assert_eq!(call(&server, "GET", &path, None).await.status, 404);
    assert_eq!(call(&server, "GET", "/v1/webhook_endpoints", None).await.body["data"], json!([]));
}

#[tokio::test]
async fn deliveries_are_signed_and_retried_after_the_receiver_fails_twice() {
    let state = tempfile::tempdir().expect("state");
    let server = open_server(state.path()).start();
    let mut receiver = Receiver::start(&[500, 500]).await;
    let endpoint = register(&server, &receiver.url, &["agent.session.created"]).await;
    let secret = endpoint["signing_secret"].as_str().expect("secret");
    let work = tempfile::tempdir().expect("work");
    let agent = script(state.path(), "agent.sh", "cat >/dev/null");
    let session = create(&server, command_session(&agent, work.path(), None)).await;
    let attempts = [receiver.next().await, receiver.next().await, receiver.next().await];
    let ids: Vec<&str> = attempts.iter().map(|d| d.header("webhook-id")).collect();
    assert!(ids.iter().all(|id| *id == ids[0] && id.starts_with("evt_")), "one message, three attempts: {ids:?}");
    for attempt in &attempts {
        assert!(attempt.signed_with(secret), "each attempt is signed afresh");
        let event = attempt.json();
        assert_eq!(
            (event["type"].as_str(), event["data"]["id"].as_str()),
            (Some("agent.session.created"), Some(session.as_str()))
        );
        assert_eq!(
            (event["object"].as_str(), event["data"]["environment_type"].as_str()),
            (Some("event"), Some("self_hosted"))
        );
        assert_eq!(attempt.header("content-type"), "application/json");
    }
    let gaps = [attempts[1].at - attempts[0].at, attempts[2].at - attempts[1].at];
    assert!(gaps[0] >= Duration::from_millis(400) && gaps[1] >= gaps[0], "backoff grows: {gaps:?}");
    // The metrics count the event once, delivered, after two retries (counted when the answer is read).
    let counted = [r#"outcome="delivered"} 1"#, r#"outcome="retried"} 2"#, r#"outcome="failed"} 0"#];
    let deadline = Instant::now() + Duration::from_secs(10);
    let metrics = loop {
        let text = call(&server, "GET", "/metrics", None).await.body.as_str().unwrap_or_default().to_string();
        if counted.iter().all(|c| text.contains(&format!("abx_webhook_deliveries_total{{{c}")))
            || Instant::now() > deadline
        {
            break text;
        }
        tokio::task::yield_now().await;
    };
    for c in counted {
        assert!(metrics.contains(&format!("abx_webhook_deliveries_total{{{c}")), "{c} in:\n{metrics}");
    }

    let test = call(
        &server,
        "POST",
        &format!("/v1/webhook_endpoints/{}/test", endpoint["id"].as_str().expect("id")),
        Some(json!({"event_type": "agent.session.failed"})),
    )
    .await;
    assert_eq!(test.status, 200, "{}", test.body);
    assert_eq!((test.body["status_code"].as_u64(), test.body["success"].as_bool()), (Some(200), Some(true)));
    assert_eq!(test.body["object"], "webhook_endpoint.test");
    let sent = receiver.next().await;
    assert!(sent.signed_with(secret));
    assert_eq!(sent.json()["data"]["id"], "agsess_test");
}

#[tokio::test]
async fn a_session_sends_its_lifecycle_events_and_a_failed_turn_is_reported() {
    let state = tempfile::tempdir().expect("state");
    let server = open_server(state.path()).start();
    let mut receiver = Receiver::start(&[]).await;
    let endpoint = register(&server, &receiver.url, &ALL).await;
    let secret = endpoint["signing_secret"].as_str().expect("secret");
    let work = tempfile::tempdir().expect("work");
    let agent = script(
        state.path(),
        "agent.sh",
        "read p\n[ \"$p\" = fail ] && exit 3\necho '{\"type\":\"result\",\"ok\":true}'",
    );
    let session = create(&server, command_session(&agent, work.path(), Some("hello"))).await;
    wait_idle(&server, &session).await;
    let mut seen = Vec::new();
    while seen.len() < 3 {
        let delivery = receiver.next().await;
        assert!(delivery.signed_with(secret));
        let event = delivery.json();
        assert_eq!(event["data"]["id"], session.as_str());
        seen.push(event["type"].as_str().expect("type").to_string());
    }
    seen.sort();
    assert_eq!(seen, ["agent.session.created", "agent.session.idle", "agent.session.in_progress"]);
    let sent =
        call(&server, "POST", &format!("/v1/agents/sessions/{session}/events"), Some(json!({"input": "fail"}))).await;
    assert_eq!(sent.status, 202, "{}", sent.body);
    // Deliveries run concurrently, so the two may arrive in either order.
    let mut ended = Vec::new();
    while ended.len() < 2 {
        let event = receiver.next().await.json();
        if event["type"] == "agent.session.failed" || event["type"] == IDLE {
            assert_eq!(event["data"]["id"], session.as_str());
            ended.push(event["type"].as_str().expect("type").to_string());
        }
    }
    ended.sort();
    assert_eq!(ended, ["agent.session.failed", IDLE]);
}

#[tokio::test]
async fn a_dead_receiver_does_not_delay_a_turn() {
    let state = tempfile::tempdir().expect("state");
    let server = open_server(state.path()).start();
    // Connections are accepted and never answered: every attempt waits for its timeout.
    let dead = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("http://{}/hook", dead.local_addr().expect("addr"));
    for _ in 0..3 {
        register(&server, &url, &ALL).await;
    }
    let work = tempfile::tempdir().expect("work");
    let agent = script(state.path(), "agent.sh", "cat >/dev/null\necho '{\"type\":\"result\",\"ok\":true}'");
    let started = Instant::now();
    let session = create(&server, command_session(&agent, work.path(), Some("go"))).await;
    let events = wait_idle(&server, &session).await;
    let took = started.elapsed();
    assert!(
        events.iter().any(|e| e.event == "agent.session.turn.completed"),
        "the turn ran: {:?}",
        common::agents::types(&events)
    );
    // One attempt alone waits 5 s for the dead receiver; the turn is done well before.
    assert!(took < Duration::from_millis(4500), "the turn did not wait for the receiver: {took:?}");
    let held = tokio::time::timeout(Duration::from_secs(10), dead.accept()).await.expect("a delivery is in flight");
    drop((held, dead));
}

#[tokio::test]
async fn a_rotated_secret_signs_from_then_on() {
    let state = tempfile::tempdir().expect("state");
    let server = open_server(state.path()).start();
    let mut receiver = Receiver::start(&[]).await;
    let endpoint = register(&server, &receiver.url, &[IDLE]).await;
    let id = endpoint["id"].as_str().expect("id");
    let old = endpoint["signing_secret"].as_str().expect("secret");
    let path = format!("/v1/webhook_endpoints/{id}/test");
    let test = || call(&server, "POST", &path, Some(json!({"event_type": IDLE})));
    assert_eq!(test().await.status, 200);
    assert!(receiver.next().await.signed_with(old));
    let rotated = call(&server, "POST", &format!("/v1/webhook_endpoints/{id}/rotate_secret"), None).await;
    let new = rotated.body["signing_secret"].as_str().expect("new secret");
    assert_ne!(new, old);
    assert!(rotated.body["updated_at"].as_i64() >= endpoint["updated_at"].as_i64());
    assert_eq!(test().await.status, 200);
    let after = receiver.next().await;
    assert!(after.signed_with(new) && !after.signed_with(old), "the old secret stopped signing");
}

#[tokio::test]
async fn endpoints_survive_a_restart_and_the_default_settings_refuse_private_destinations() {
    let state = tempfile::tempdir().expect("state");
    let mut server = open_server(state.path()).start();
    let mut receiver = Receiver::start(&[]).await;
    let endpoint = register(&server, &receiver.url, &ALL).await;
    let id = endpoint["id"].as_str().expect("id").to_string();
    let secret = endpoint["signing_secret"].as_str().expect("secret").to_string();
    let listed = call(&server, "GET", "/v1/webhook_endpoints", None).await.body;
    server.signal_and_wait(nix::sys::signal::Signal::SIGTERM, Duration::from_secs(20)).expect("stopped");
    drop(server);

    // Same state, the reference's defaults (plain http still allowed, so the
    // refusal below is the private address, not the scheme).
    let server = agents_server(state.path()).env("ABX_AGENTS_WEBHOOK_ALLOW_HTTP", "1").start();
    assert_eq!(call(&server, "GET", "/v1/webhook_endpoints", None).await.body, listed, "the registration came back");
    let test =
        call(&server, "POST", &format!("/v1/webhook_endpoints/{id}/test"), Some(json!({"event_type": IDLE}))).await;
    let message = "the webhook host resolves to a private address";
    assert_refused(&test, 400, "agents.webhook_delivery_failed", Some("url"), message);
    let work = tempfile::tempdir().expect("work");
    let agent = script(state.path(), "agent.sh", "cat >/dev/null");
    let session = create(&server, command_session(&agent, work.path(), Some("go"))).await;
    wait_idle(&server, &session).await;
    server.wait_for_log("webhook not delivered", Duration::from_secs(20));
    assert!(receiver.rx.try_recv().is_err(), "nothing reached the blocked address");
    drop(server);

    let server = open_server(state.path()).start();
    let test =
        call(&server, "POST", &format!("/v1/webhook_endpoints/{id}/test"), Some(json!({"event_type": IDLE}))).await;
    assert_eq!(test.body["status_code"], 200, "{}", test.body);
    assert!(receiver.next().await.signed_with(&secret), "the secret survived the restarts");
}
