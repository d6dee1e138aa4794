//! Agent sessions and responses are process execution: the presets that
//! switch execution off (`read-only`, `hardened`, `locked`) switch them off
//! too, even with the agents group on; `deny_commands` and `allow_commands`
//! of `process_start` decide their program. A refusal is the reference's
//! error body with the exact status, and nothing runs: no child, no file.
//! Only a policy rule naming the endpoints grants them.

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::agents::{agents_server, call, command_session, script, wait_idle};
use common::TestServer;
use serde_json::{json, Value};

/// A `command` agent that leaves a marker file in its workspace, then answers.
const MARKING_AGENT: &str = r#"cat >/dev/null
touch ran.marker
echo '{"type":"message","item_id":"m1","text":"done"}'
echo '{"type":"result","ok":true}'"#;

struct Setup {
    state: tempfile::TempDir,
    work: tempfile::TempDir,
    agent: PathBuf,
}

fn setup() -> Setup {
    let state = tempfile::tempdir().expect("state");
    let work = tempfile::tempdir().expect("work");
    let agent = script(state.path(), "marking-agent.sh", MARKING_AGENT);
    Setup { state, work, agent }
}

/// The server of `setup` under `policy`, with the agents group on by the
/// environment and `/v1/responses` running the same agent in the workspace.
fn start(setup: &Setup, policy: Value) -> TestServer {
    let config = setup.state.path().join("agents.json");
    std::fs::write(&config, json!({"command": {"argv": [&setup.agent]}}).to_string()).expect("config");
    agents_server(setup.state.path())
        .env("ABX_SERVER_POLICY", &policy.to_string())
        .env("ABX_AGENTS_CONFIG", config.to_str().expect("utf-8"))
        .env("ABX_AGENTS_RESPONSES_WORKSPACE", setup.work.path().to_str().expect("utf-8"))
        .start()
}

fn marker(work: &Path) -> PathBuf {
    work.join("ran.marker")
}

/// Asserts the reference's error body: status, code, endpoint and (when given) the deciding rule.
fn assert_refused(reply: &common::agents::Reply, status: u16, code: &str, endpoint: &str, rule: Option<&str>) {
    assert_eq!(reply.status, status, "{}", reply.body);
    assert_eq!(reply.body["code"], code, "{}", reply.body);
    assert_eq!(reply.body["endpoint"], endpoint, "{}", reply.body);
    if let Some(rule) = rule {
        assert_eq!(reply.body["rule"], rule, "{}", reply.body);
    }
}

/// Both doors that start a CLI are refused with `code`, and nothing ran.
async fn both_refused(setup: &Setup, server: &TestServer, status: u16, code: &str, rule: Option<&str>) {
    let body = command_session(&setup.agent, setup.work.path(), Some("go"));
    let reply = call(server, "POST", "/v1/agents/sessions", Some(body)).await;
    assert_refused(&reply, status, code, "agents_sessions_create", rule);
    let reply = call(server, "POST", "/v1/responses", Some(json!({"model": "command", "input": "go"}))).await;
    assert_refused(&reply, status, code, "agents_responses_create", rule);
    let sessions = call(server, "GET", "/v1/agents/sessions", None).await;
    if sessions.status == 200 {
        assert_eq!(sessions.body["data"], json!([]), "no session was created");
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!marker(setup.work.path()).exists(), "the agent ran");
    assert_eq!(server.children(), Vec::<String>::new(), "a child was spawned");
}

#[tokio::test]
async fn closing_presets_refuse_agent_sessions_and_responses_with_the_group_on() {
    for preset in ["read-only", "hardened", "locked"] {
        let setup = setup();
        let server = start(&setup, json!({ "preset": preset }));
        // `locked` switches everything off by its own glob already, and names it as the reference does
        // (404); the other presets close the power, a permission refusal (403).
        let (status, rule) = if preset == "locked" {
            (404, "preset:locked:endpoints.*".to_string())
        } else {
            (403, format!("preset:{preset}:powers.runs_programs"))
        };
        both_refused(&setup, &server, status, "endpoint_disabled", Some(&rule)).await;
        let caps = call(&server, "GET", "/capabilities", None).await;
        let entry = &caps.body["endpoints"]["agents_sessions_create"];
        assert_eq!(
            (entry["enabled"].clone(), entry["powers"].clone()),
            (json!(false), json!(["runs_programs", "writes_files"])),
            "{preset}: {entry}"
        );
    }
}

#[tokio::test]
async fn process_starts_command_rules_decide_the_agent_program() {
    let setup = setup();
    let deny = json!({"endpoints": {"process_start": {"params": {"deny_commands": ["marking-agent.sh"]}}}});
    let server = start(&setup, deny);
    both_refused(&setup, &server, 403, "command_not_allowed", None).await;
    drop(server);
    let allow = json!({"endpoints": {"process_start": {"params": {"allow_commands": ["ls"]}}}});
    let server = start(&setup, allow);
    both_refused(&setup, &server, 403, "command_not_allowed", None).await;
    drop(server);
    let off = json!({"groups": {"process": false}});
    let server = start(&setup, off);
    both_refused(&setup, &server, 404, "endpoint_disabled", Some("policy:groups.process")).await;
}

#[tokio::test]
async fn the_workspace_is_held_to_process_starts_path_rules() {
    let setup = setup();
    let confined = json!({"endpoints": {"process_start": {"paths": {"allow": ["/nonexistent-root"]}}}});
    let server = start(&setup, confined);
    // Not the operator's `/v1/responses` directory: one the caller chooses.
    let chosen = tempfile::tempdir().expect("workspace");
    let body = command_session(&setup.agent, chosen.path(), Some("go"));
    let reply = call(&server, "POST", "/v1/agents/sessions", Some(body)).await;
    assert_refused(&reply, 403, "path_not_allowed", "agents_sessions_create", None);
    assert!(!marker(chosen.path()).exists());
}

#[tokio::test]
async fn a_rule_naming_the_endpoints_grants_them_under_a_closing_preset() {
    let setup = setup();
    let grant = json!({
        "preset": "read-only",
        "endpoints": {"agents_sessions_create": {"enabled": true}, "process_start": {"enabled": true}},
    });
    let server = start(&setup, grant);
    let body = command_session(&setup.agent, setup.work.path(), Some("go"));
    let reply = call(&server, "POST", "/v1/agents/sessions", Some(body)).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let id = reply.body["id"].as_str().expect("id").to_string();
    wait_idle(&server, &id).await;
    assert!(marker(setup.work.path()).exists(), "the granted session ran its agent");
    let reply = call(&server, "POST", "/v1/responses", Some(json!({"model": "command", "input": "go"}))).await;
    assert_refused(&reply, 403, "endpoint_disabled", "agents_responses_create", None);
}
