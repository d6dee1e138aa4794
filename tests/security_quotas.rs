//! Regression tests of issue 31, item 4: global caps let one identity evict
//! or lock out another. At the daemon-wide cap of 200 agent sessions,
//! eviction removed other owners' idle sessions and their directories; one
//! `core:read` identity filled the global cap of 128 MCP sessions; webhook
//! endpoints, templates and definitions had no per-caller bound. Now each
//! identity has its own quota of each kind; at a quota only its own idle
//! sessions are let go, and otherwise the answer is 429 naming the quota.

#![allow(clippy::disallowed_methods)] // tests drive the binary from outside; no reaper here

mod common;

use base64::Engine as _;
use serde_json::{json, Value};

use common::agents::{command_session, script};

const ALICE: &str = "alice-token-51c7";
const BOB: &str = "bob-token-9e02";

/// A server with the agents group, identities alice and bob, and small quotas.
fn quota_server(state: &std::path::Path, policy_dir: &std::path::Path) -> common::TestServer {
    let scopes = ["agents:use", "core:read"];
    let policy = json!({"auth": {"tokens": [
        {"id": "alice", "scopes": scopes, "token_env": "ABX_TEST_ALICE"},
        {"id": "bob", "scopes": scopes, "token_env": "ABX_TEST_BOB"},
    ]}});
    let path = policy_dir.join("policy.json");
    std::fs::write(&path, policy.to_string()).expect("policy");
    common::agents::agents_server(state)
        .token(None)
        .env("ABX_TEST_ALICE", ALICE)
        .env("ABX_TEST_BOB", BOB)
        .env("ABX_AGENTS_MAX_SESSIONS", "3")
        .env("ABX_AGENTS_MAX_WEBHOOKS", "2")
        .env("ABX_AGENTS_MAX_DEFINITIONS", "1")
        .env("ABX_AGENTS_MAX_TEMPLATES", "2")
        .env("ABX_AGENTS_MAX_TEMPLATE_BYTES", "100")
        .env("ABX_AGENTS_ALLOW_PRIVATE_URLS", "1")
        .env("ABX_AGENTS_WEBHOOK_ALLOW_HTTP", "1")
        .env("ABX_MCP_MAX_SESSIONS", "2")
        .args(["--policy", &path.display().to_string()])
        .start()
}

async fn send(server: &common::TestServer, method: &str, path: &str, token: &str, body: Option<Value>) -> (u16, Value) {
    let method = reqwest::Method::from_bytes(method.as_bytes()).expect("method");
    let mut request = reqwest::Client::new().request(method, server.at(path)).bearer_auth(token);
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await.expect("send");
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

/// Asserts a 429 that names `quota` and its `limit`.
fn assert_quota(answer: &(u16, Value), quota: &str, limit: u64) {
    let (status, body) = answer;
    let error = &body["error"];
    assert_eq!((*status, error["code"].as_str()), (429, Some("agents.quota_exceeded")), "{body}");
    assert_eq!(
        (error["x_agent_sandbox"]["quota"].as_str(), error["x_agent_sandbox"]["limit"].as_u64()),
        (Some(quota), Some(limit))
    );
    assert!(error["message"].as_str().is_some_and(|m| m.contains(quota)), "{body}");
}

#[tokio::test]
async fn agent_sessions_are_evicted_only_within_their_owner_and_then_refused() {
    let (state, dir, work) =
        (tempfile::tempdir().expect("s"), tempfile::tempdir().expect("d"), tempfile::tempdir().expect("w"));
    let server = quota_server(state.path(), dir.path());
    let agent = script(dir.path(), "agent.sh", "cat >/dev/null; echo done");
    let create = |token: &'static str| {
        let server = &server;
        let body = command_session(&agent, work.path(), None);
        async move {
            let (status, body) = send(server, "POST", "/v1/agents/sessions", token, Some(body)).await;
            assert_eq!(status, 200, "{body}");
            body["id"].as_str().expect("id").to_string()
        }
    };
    let alices = create(ALICE).await;
    let alice_dir = state.path().join("sessions").join(&alices);
    assert!(alice_dir.is_dir(), "{}", alice_dir.display());
    let mut bobs = Vec::new();
    for _ in 0..5 {
        bobs.push(create(BOB).await);
    }
    // Bob is at his quota of 3: his two oldest went, alice's stayed with its files.
    for (i, id) in bobs.iter().enumerate() {
        let (status, _) = send(&server, "GET", &format!("/v1/agents/sessions/{id}"), BOB, None).await;
        assert_eq!(status, if i < 2 { 404 } else { 200 }, "bob's session {i}");
    }
    let (status, body) = send(&server, "GET", &format!("/v1/agents/sessions/{alices}"), ALICE, None).await;
    assert_eq!(status, 200, "alice's session is not bob's to evict: {body}");
    assert!(alice_dir.is_dir(), "and its directory is kept");

    // With every one of his sessions watched, none is his to let go: refused, naming the quota.
    let mut streams = Vec::new();
    for id in &bobs[2..] {
        let url = server.at(&format!("/v1/agents/sessions/{id}/events"));
        let stream = reqwest::Client::new().get(url).bearer_auth(BOB).send().await.expect("stream");
        assert_eq!(stream.status().as_u16(), 200);
        streams.push(stream);
    }
    let body = command_session(&agent, work.path(), None);
    let refused = send(&server, "POST", "/v1/agents/sessions", BOB, Some(body)).await;
    assert_quota(&refused, "agents_max_sessions", 3);
    for id in &bobs[2..] {
        let (status, _) = send(&server, "GET", &format!("/v1/agents/sessions/{id}"), BOB, None).await;
        assert_eq!(status, 200, "the refusal changed nothing");
    }
    create(ALICE).await;
}

#[tokio::test]
async fn webhooks_definitions_and_templates_have_per_caller_quotas() {
    let (state, dir) = (tempfile::tempdir().expect("s"), tempfile::tempdir().expect("d"));
    let server = quota_server(state.path(), dir.path());
    let hook = |n: u32| Some(json!({"url": format!("http://127.0.0.1:9/h{n}"), "event_types": ["agent.session.idle"]}));
    for n in 0..2 {
        assert_eq!(send(&server, "POST", "/v1/webhook_endpoints", BOB, hook(n)).await.0, 200);
    }
    assert_quota(&send(&server, "POST", "/v1/webhook_endpoints", BOB, hook(2)).await, "agents_max_webhooks", 2);
    let (_, listed) = send(&server, "GET", "/v1/webhook_endpoints", BOB, None).await;
    assert_eq!(listed["data"].as_array().map(Vec::len), Some(2), "the refused one was not kept: {listed}");
    assert_eq!(send(&server, "POST", "/v1/webhook_endpoints", ALICE, hook(3)).await.0, 200, "alice has her own");

    let definition = || Some(json!({"runtime": "command", "command": ["/bin/true"], "model": "m"}));
    assert_eq!(send(&server, "POST", "/v1/agents", BOB, definition()).await.0, 200);
    assert_quota(&send(&server, "POST", "/v1/agents", BOB, definition()).await, "agents_max_definitions", 1);
    assert_eq!(send(&server, "POST", "/v1/agents", ALICE, definition()).await.0, 200);

    let template = |size: usize, name: &str| {
        let data = base64::engine::general_purpose::STANDARD.encode(vec![b'x'; size]);
        Some(
            json!({"name": name, "files": [{"type": "inline", "path": format!("/workspace/{name}.txt"), "data": data}]}),
        )
    };
    let templates = "/v1/agents/environments/templates";
    assert_eq!(send(&server, "POST", templates, BOB, template(80, "a")).await.0, 200);
    assert_quota(&send(&server, "POST", templates, BOB, template(30, "b")).await, "agents_max_template_bytes", 100);
    assert_eq!(send(&server, "POST", templates, BOB, template(20, "c")).await.0, 200, "within the bytes left");
    assert_quota(&send(&server, "POST", templates, BOB, template(0, "d")).await, "agents_max_templates", 2);
    assert_eq!(send(&server, "POST", templates, ALICE, template(90, "e")).await.0, 200, "alice has her own bytes");
}

const INITIALIZE: &str = r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#;

async fn initialize(server: &common::TestServer, token: &str) -> (u16, Value) {
    let response = reqwest::Client::new()
        .post(server.at("/mcp"))
        .bearer_auth(token)
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
        .body(INITIALIZE)
        .send()
        .await
        .expect("initialize");
    let status = response.status().as_u16();
    let session = response.headers().get("mcp-session-id").is_some();
    let text = response.text().await.unwrap_or_default();
    (status, serde_json::from_str(&text).unwrap_or(json!({"session": session})))
}

#[tokio::test]
async fn mcp_sessions_are_a_share_per_identity() {
    let (state, dir) = (tempfile::tempdir().expect("s"), tempfile::tempdir().expect("d"));
    let server = quota_server(state.path(), dir.path());
    for _ in 0..2 {
        assert_eq!(initialize(&server, BOB).await, (200, json!({"session": true})));
    }
    let (status, body) = initialize(&server, BOB).await;
    assert_eq!(
        (status, body["code"].as_str(), body["limit"].as_u64()),
        (429, Some("session_limit"), Some(2)),
        "{body}"
    );
    assert!(body["error"].as_str().is_some_and(|e| e.contains("mcp_max_sessions")), "{body}");
    assert_eq!(
        initialize(&server, ALICE).await,
        (200, json!({"session": true})),
        "bob's sessions leave alice her share"
    );
}
