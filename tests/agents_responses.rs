//! Black-box tests of `/v1/responses` and `/v1/models` with the `command`
//! runtime: bad input (unknown ids, wrong types, oversize bodies) gets the
//! reference's OpenAI error envelope and status; the endpoints are in
//! `/capabilities`; a response survives a restart of the daemon.

mod common;

use std::time::Duration;

use common::agents::{agents_server, assert_openai_error, call, parse_sse, script};
use serde_json::json;

const AGENT: &str = r#"prompt=$(cat)
echo '{"type":"text_delta","item_id":"m1","text":"said "}'
printf '{"type":"message","item_id":"m1","text":"said %s"}\n' "$prompt"
echo '{"type":"result","ok":true}'"#;

/// A server whose `command` runtime runs [`AGENT`] in a workspace of its own.
fn server(state: &std::path::Path) -> common::ServerBuilder {
    let agent = script(state, "agent.sh", AGENT);
    let config = state.join("agents.json");
    std::fs::write(&config, json!({"command": {"argv": [agent]}}).to_string()).expect("config");
    let work = state.join("work");
    std::fs::create_dir_all(&work).expect("work");
    agents_server(state)
        .env("ABX_AGENTS_CONFIG", config.to_str().expect("utf-8"))
        .env("ABX_AGENTS_RESPONSES_WORKSPACE", work.to_str().expect("utf-8"))
}

#[tokio::test]
async fn unknown_ids_are_404_in_the_openai_envelope_on_every_response_endpoint() {
    let state = tempfile::tempdir().expect("state");
    let server = server(state.path()).start();
    let id = format!("resp_{}", "a".repeat(24));
    for (method, path) in [
        ("GET", format!("/v1/responses/{id}")),
        ("GET", format!("/v1/responses/{id}?stream=true")),
        ("DELETE", format!("/v1/responses/{id}")),
        ("POST", format!("/v1/responses/{id}/cancel")),
        ("GET", format!("/v1/responses/{id}/input_items")),
        ("GET", "/v1/responses/turn_x".to_string()),
    ] {
        let reply = call(&server, method, &path, None).await;
        assert_openai_error(&reply, 404, "resource_not_found", Some("response_id"));
    }
    let reply = call(&server, "GET", &format!("/v1/responses/{id}"), None).await;
    assert_eq!(reply.body["error"]["message"], format!("response '{id}' not found"));
    let chained = json!({"model": "command", "input": "x", "previous_response_id": id});
    let reply = call(&server, "POST", "/v1/responses", Some(chained)).await;
    assert_openai_error(&reply, 404, "resource_not_found", Some("previous_response_id"));
    let compact = json!({"previous_response_id": id});
    let reply = call(&server, "POST", "/v1/responses/compact", Some(compact)).await;
    assert_openai_error(&reply, 404, "resource_not_found", Some("previous_response_id"));
    let model = call(&server, "GET", "/v1/models/gpt-nope", None).await;
    assert_openai_error(&model, 404, "model_not_found", Some("model"));
    assert_eq!(model.body["error"]["message"], "the model 'gpt-nope' does not exist");
    for (method, path) in [
        ("POST", "/v1/responses/input_tokens"),
        ("DELETE", "/v1/models/command"),
        ("POST", "/v1/agents/environments/env_1/register"),
        ("GET", "/v1/agents/environments/env_1/connect"),
    ] {
        let reply = call(&server, method, path, Some(json!({}))).await;
        assert_openai_error(&reply, 404, "agents.not_implemented_locally", None);
        assert_eq!(reply.body["error"]["x_agent_sandbox"]["runtimes"], "/v1/agents/runtimes");
    }
}

#[tokio::test]
async fn wrong_types_malformed_and_oversize_bodies_are_refused_before_any_turn() {
    let state = tempfile::tempdir().expect("state");
    let server = server(state.path()).start();
    for (body, param) in [
        (json!({"model": 5, "input": "x"}), "model"),
        (json!({"model": "command", "input": {"text": "x"}}), "input"),
        (json!({"model": "command", "input": "x", "stream": "yes"}), "stream"),
        (json!({"model": "command", "input": "x", "store": 1}), "store"),
        (json!({"model": "command", "input": "x", "instructions": ["a"]}), "instructions"),
        (json!({"model": "command", "input": "x", "metadata": []}), "metadata"),
        (json!({"model": "command", "input": "x", "tools": {}}), "tools"),
        (json!({"model": "command", "input": "x", "nonsense": true}), "nonsense"),
        (
            json!({"model": "command", "input": [{"role": "user", "content": [{"type": "input_text", "text": 3}]}]}),
            "input[0].content[0].text",
        ),
        (
            json!({"model": "command", "input": "x", "tools": [{"type": "mcp", "server_label": "a", "server_url": "ftp://h"}]}),
            "tools[0].server_url",
        ),
    ] {
        let reply = call(&server, "POST", "/v1/responses", Some(body.clone())).await;
        assert_openai_error(&reply, 400, "invalid_request", Some(param));
    }
    let reply = call(&server, "POST", "/v1/responses", Some(json!(["model"]))).await;
    assert_eq!(reply.status, 400, "a JSON array is not a body: {}", reply.body);
    let raw = reqwest::Client::new()
        .post(server.at("/v1/responses"))
        .header("authorization", server.bearer())
        .header("content-type", "application/json")
        .body("{\"model\": ")
        .send()
        .await
        .expect("send");
    assert_eq!(raw.status(), 400);
    // Over the default request limit (10 MiB): refused by the pipeline, in the daemon's error body.
    let big = json!({"model": "command", "input": "x".repeat(11 * 1024 * 1024)});
    let reply = call(&server, "POST", "/v1/responses", Some(big)).await;
    assert_eq!((reply.status, reply.body["code"].as_str()), (413, Some("payload_too_large")));
    let bad_query = call(&server, "GET", "/v1/responses/resp_x?stream=true&starting_after=-1", None).await;
    assert_eq!(bad_query.status, 404, "the id is looked up first");
    let connect = call(&server, "GET", "/v1/responses", None).await;
    assert_openai_error(&connect, 400, "agents.websocket_upgrade_required", None);
    assert!(!state.path().join("work").read_dir().expect("work").any(|_| true), "no turn ran");
}

#[tokio::test]
async fn responses_are_in_capabilities_and_survive_a_restart_with_their_stream() {
    let state = tempfile::tempdir().expect("state");
    let mut server = server(state.path()).start();
    let caps = call(&server, "GET", "/capabilities", None).await;
    for id in [
        "agents_responses_create",
        "agents_responses_get",
        "agents_responses_delete",
        "agents_responses_cancel",
        "agents_responses_input_items",
        "agents_responses_compact",
        "agents_responses_connect",
        "agents_models_list",
        "agents_models_get",
        "agents_cannot_models_delete",
        "agents_cannot_responses_input_tokens",
    ] {
        let entry = &caps.body["endpoints"][id];
        assert_eq!(entry["allowed"], true, "{id}: {entry}");
    }
    let created = call(&server, "POST", "/v1/responses", Some(json!({"model": "command", "input": "kept"}))).await;
    assert_eq!((created.status, created.body["output"][0]["content"][0]["text"].as_str()), (200, Some("said kept")));
    let id = created.body["id"].as_str().expect("id").to_string();
    let stream = |server: &common::TestServer| {
        let url = server.at(&format!("/v1/responses/{id}?stream=true"));
        let bearer = server.bearer();
        async move {
            let text = reqwest::Client::new()
                .get(url)
                .header("authorization", bearer)
                .send()
                .await
                .expect("send")
                .text()
                .await
                .expect("text");
            sse_types(&text)
        }
    };
    let before = stream(&server).await;
    assert_eq!(before.first().map(String::as_str), Some("response.created"));
    assert_eq!(before.last().map(String::as_str), Some("response.completed"));
    server.signal_and_wait(nix::sys::signal::Signal::SIGTERM, Duration::from_secs(20)).expect("stopped");
    drop(server);

    let server = self::server(state.path()).start();
    let again = call(&server, "GET", &format!("/v1/responses/{id}"), None).await;
    assert_eq!(again.body, created.body, "the response came back from the journal");
    assert_eq!(stream(&server).await, before, "and its stream from the event log");
    let next = json!({"model": "command", "input": "more", "previous_response_id": id});
    let chained = call(&server, "POST", "/v1/responses", Some(next)).await;
    assert_eq!((chained.status, chained.body["status"].as_str()), (200, Some("completed")), "{}", chained.body);
}

/// The `event:` names of an SSE text (our helper wants `id:` lines; responses have none).
fn sse_types(text: &str) -> Vec<String> {
    let framed: String = text
        .split("\n\n")
        .filter(|f| !f.trim().is_empty())
        .enumerate()
        .map(|(n, f)| format!("id: {n}\n{f}\n\n"))
        .collect();
    parse_sse(&framed).into_iter().map(|e| e.event).collect::<Vec<_>>()
}
