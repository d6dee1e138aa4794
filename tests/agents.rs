//! Black-box tests of the agents group's session endpoints with the
//! `command` runtime: a session runs a real program per turn and its items,
//! turns, events and errors are what the reference's API gives.

mod common;

use std::time::Duration;

use common::agents::{agents_server, call, call_with, command_session, create, first_event, script, types, wait_idle};
use serde_json::{json, Value};

/// A `command` agent that runs `ls` as its tool call and answers with the prompt.
const LS_AGENT: &str = r#"prompt=$(cat)
echo '{"type":"session","id":"native-1"}'
echo '{"type":"tool_start","item_id":"c1","kind":"command","name":"command_execution","command":"ls"}'
out=$(ls)
printf '{"type":"tool_end","item_id":"c1","ok":true,"output":"%s","exit_code":0}\n' "$out"
printf '{"type":"message","item_id":"m1","text":"done: %s"}\n' "$prompt"
echo '{"type":"usage","input_tokens":7,"output_tokens":3}'
echo '{"type":"result","ok":true}'"#;

fn id_like(value: &Value, prefix: &str) -> bool {
    value
        .as_str()
        .and_then(|s| s.strip_prefix(prefix))
        .is_some_and(|hex| hex.len() == 24 && hex.bytes().all(|b| b.is_ascii_hexdigit()))
}

#[tokio::test]
async fn a_turn_runs_the_program_and_its_items_turns_and_events_show_it() {
    let state = tempfile::tempdir().expect("state");
    let server = agents_server(state.path()).start();
    let work = tempfile::tempdir().expect("work");
    std::fs::write(work.path().join("a.txt"), b"").expect("file");
    let agent = script(state.path(), "agent.sh", LS_AGENT);

    let created =
        call(&server, "POST", "/v1/agents/sessions", Some(command_session(&agent, work.path(), Some("go")))).await;
    assert_eq!((created.status, created.header("x-agent-sandbox-local")), (200, Some("1")), "{}", created.body);
    let s = &created.body;
    assert!(id_like(&s["id"], "agsess_"), "{s}");
    assert_eq!(s["object"], "agent.session");
    assert_eq!(
        (s["agent"]["id"].as_str(), s["agent"]["name"].as_str(), s["agent"]["model"].as_str()),
        (Some("scripted"), Some("scripted"), Some("command"))
    );
    assert_eq!(s["environment"]["workspace_directory"], work.path().to_str().expect("utf-8"));
    assert_eq!(s["environment"]["id"], "env_agent_sandbox");
    assert_eq!((s["status"].as_str(), s["metadata"].clone()), (Some("in_progress"), json!({"suite": "agents"})));
    assert_eq!(
        s["x_agent_sandbox"],
        json!({"local": true, "compute": "local_process", "differences": ["queued_not_steered", "usage_adapter_best_effort"]})
    );
    let sid = s["id"].as_str().expect("id").to_string();

    let events = wait_idle(&server, &sid).await;
    assert_eq!(
        types(&events),
        [
            "agent.session.in_progress",
            "agent.session.turn.created",
            "agent.session.turn.in_progress",
            "agent.session.turn.item.added",
            "agent.session.turn.item.done",
            "agent.session.turn.item.added",
            "agent.session.turn.content_part.added",
            "agent.session.turn.output_text.delta",
            "agent.session.turn.output_text.done",
            "agent.session.turn.content_part.done",
            "agent.session.turn.item.done",
            "agent.session.turn.completed",
            "agent.session.idle",
        ]
    );
    assert!(events.windows(2).all(|w| w[0].id <= w[1].id), "sequence numbers never go back");
    assert_eq!(events[0].data["event_id"], "evt_0000000001");
    let done = &events[4].data["item"];
    assert_eq!(
        (done["type"].as_str(), done["command"].as_str(), done["output"].as_str()),
        (Some("command_execution"), Some("ls"), Some("a.txt"))
    );
    assert_eq!(events[7].data["delta"], "done: go");
    assert_eq!(events[11].data["usage"]["total_tokens"], 10);

    let items = call(&server, "GET", &format!("/v1/agents/sessions/{sid}/items"), None).await;
    let data = items.body["data"].as_array().expect("items");
    assert_eq!(data.len(), 2, "{}", items.body);
    assert_eq!(
        (data[0]["type"].as_str(), data[0]["phase"].as_str()),
        (Some("message"), Some("final_answer")),
        "newest first"
    );
    assert_eq!(data[0]["content"], json!([{"type": "output_text", "text": "done: go"}]));
    assert_eq!((data[1]["exit_code"].as_i64(), data[1]["cwd"].as_str()), (Some(0), work.path().to_str()));
    assert!(id_like(&data[0]["id"], "item_"));
    assert_eq!(data[1]["x_agent_sandbox"]["differences"], json!(["redaction_best_effort"]));

    let turns = call(&server, "GET", &format!("/v1/agents/sessions/{sid}/turns"), None).await;
    let turn = &turns.body["data"][0];
    assert!(id_like(&turn["id"], "turn_"));
    assert_eq!(
        (turn["status"].as_str(), turn["agent_id"].as_str(), turn["error"].clone()),
        (Some("completed"), Some("scripted"), Value::Null)
    );
    assert_eq!(turn["usage"]["input_tokens_details"], json!({"cached_tokens": 0}));
    let tid = turn["id"].as_str().expect("turn id");
    let one = call(&server, "GET", &format!("/v1/agents/sessions/{sid}/turns/{tid}"), None).await;
    assert_eq!(&one.body, turn);
    let turn_items =
        call(&server, "GET", &format!("/v1/agents/sessions/{sid}/turns/{tid}/items?order=asc"), None).await;
    assert_eq!(turn_items.body["data"][0]["type"], "command_execution");

    let got = call(&server, "GET", &format!("/v1/agents/sessions/{sid}"), None).await;
    assert_eq!((got.body["status"].as_str(), got.body["usage"]["total_tokens"].as_u64()), (Some("idle"), Some(10)));

    // A second input is a second turn, resumed in order.
    let sent = call(&server, "POST", &format!("/v1/agents/sessions/{sid}/events"), Some(json!({"events": [{"type": "agent.session.input.message", "input": [{"type": "input_text", "text": "again"}]}]}))).await;
    assert_eq!((sent.status, sent.body.clone(), sent.header("x-agent-sandbox-local")), (202, Value::Null, Some("1")));
    let events = wait_idle(&server, &sid).await;
    assert_eq!(events.iter().filter(|e| e.event == "agent.session.turn.completed").count(), 2);
    let turns = call(&server, "GET", &format!("/v1/agents/sessions/{sid}/turns?order=asc"), None).await;
    assert_eq!(turns.body["data"].as_array().map(Vec::len), Some(2));
    let listed = call(&server, "GET", "/v1/agents/sessions?agent_id=scripted", None).await;
    assert_eq!(listed.body["data"][0]["id"], sid.as_str());
    let other = call(&server, "GET", "/v1/agents/sessions?agent_id=nobody", None).await;
    assert_eq!(other.body, json!({"object": "list", "data": [], "first_id": null, "last_id": null, "has_more": false}));
}

#[tokio::test]
async fn input_during_a_turn_queues_the_next_one() {
    let state = tempfile::tempdir().expect("state");
    let server = agents_server(state.path()).start();
    let work = tempfile::tempdir().expect("work");
    let mark = work.path().join("go-on");
    let body = format!(
        r#"prompt=$(cat)
echo "waiting $prompt"
while [ ! -e '{}' ]; do sleep 0.02; done
printf '{{"type":"message","item_id":"m","text":"%s"}}\n' "$prompt""#,
        mark.display()
    );
    let agent = script(state.path(), "slow.sh", &body);
    let sid = create(&server, command_session(&agent, work.path(), Some("one"))).await;
    first_event(&server, &sid, |e| e.event == "x_agent_sandbox.turn.log", Duration::from_secs(30)).await;
    let sent = call(&server, "POST", &format!("/v1/agents/sessions/{sid}/events"), Some(json!({"input": "two"}))).await;
    assert_eq!(sent.status, 202);
    let turns = call(&server, "GET", &format!("/v1/agents/sessions/{sid}/turns?order=asc"), None).await;
    let statuses: Vec<&str> =
        turns.body["data"].as_array().expect("turns").iter().filter_map(|t| t["status"].as_str()).collect();
    assert_eq!(statuses, ["in_progress", "queued"]);
    std::fs::write(&mark, b"").expect("mark");
    let events = wait_idle(&server, &sid).await;
    let order: Vec<(&str, &str)> = events
        .iter()
        .filter(|e| e.event.starts_with("agent.session.turn.") && e.data.get("turn").is_some())
        .map(|e| (e.event.as_str(), e.data["turn_id"].as_str().unwrap_or("")))
        .collect();
    let (first, second) = (order[0].1, order[2].1);
    assert_ne!(first, second);
    assert_eq!(
        order,
        [
            ("agent.session.turn.created", first),
            ("agent.session.turn.in_progress", first),
            ("agent.session.turn.created", second),
            ("agent.session.turn.completed", first),
            ("agent.session.turn.in_progress", second),
            ("agent.session.turn.completed", second),
        ]
    );
    assert_eq!(types(&events).iter().filter(|t| **t == "agent.session.idle").count(), 1, "idle once, at the end");
    let texts: Vec<String> = events
        .iter()
        .filter(|e| e.event == "agent.session.turn.output_text.done")
        .map(|e| e.data["text"].to_string())
        .collect();
    assert_eq!(texts, ["\"one\"", "\"two\""]);
}

async fn error(server: &common::TestServer, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
    let reply = call(server, method, path, body).await;
    if reply.status >= 400 && reply.status < 500 && reply.body.get("error").is_some_and(Value::is_object) {
        assert_eq!(reply.header("x-should-retry"), Some("false"), "{path}");
        assert_eq!(reply.header("x-agent-sandbox-local"), Some("1"), "{path}");
    }
    (reply.status, reply.body)
}

#[tokio::test]
async fn refusals_use_the_openai_envelope_with_the_reference_codes() {
    let state = tempfile::tempdir().expect("state");
    let server = agents_server(state.path()).start();
    let work = tempfile::tempdir().expect("work");
    let unknown = error(&server, "GET", "/v1/agents/sessions/agsess_nope", None).await;
    assert_eq!(
        unknown,
        (
            404,
            json!({"error": {"message": "session 'agsess_nope' not found", "type": "not_found_error", "param": "session_id", "code": "resource_not_found"}})
        )
    );
    let limit = error(&server, "GET", "/v1/agents/sessions?limit=0", None).await;
    assert_eq!(
        limit,
        (
            400,
            json!({"error": {"message": "limit must be an integer between 1 and 100", "type": "invalid_request_error", "param": "limit", "code": "invalid_request"}})
        )
    );
    assert_eq!(error(&server, "GET", "/v1/agents/sessions?order=up", None).await.1["error"]["param"], "order");
    let cursor = error(&server, "GET", "/v1/agents/sessions?after=zzz", None).await;
    assert_eq!((cursor.0, cursor.1["error"]["code"].as_str()), (404, Some("agents.cursor_not_found")));

    let cursor_agent = error(&server, "POST", "/v1/agents/sessions", Some(json!({"adapter": "cursor"}))).await;
    assert_eq!(cursor_agent.0, 404);
    assert_eq!(cursor_agent.1["error"]["code"], "agents.not_implemented_locally");
    assert_eq!(
        cursor_agent.1["error"]["message"],
        "adapter 'cursor' is declared but has no local backend; GET /v1/agents/runtimes reports which runtimes are implemented (claude-code, codex, command, qwen-code) and installed"
    );
    assert_eq!(
        cursor_agent.1["error"]["x_agent_sandbox"],
        json!({"local": true, "compute": "none", "differences": ["not_implemented_locally"], "runtimes": "/v1/agents/runtimes"})
    );
    let nope = error(&server, "POST", "/v1/agents/sessions", Some(json!({"adapter": "nope"}))).await;
    assert!(nope.1["error"]["message"]
        .as_str()
        .is_some_and(|m| m.starts_with("adapter 'nope' is not a declared runtime")));
    let agent = error(&server, "POST", "/v1/agents/sessions", Some(json!({"agent_id": "agent_x"}))).await;
    assert_eq!(
        (agent.0, agent.1["error"]["message"].as_str(), agent.1["error"]["param"].as_str()),
        (404, Some("agent 'agent_x' not found"), Some("agent_id"))
    );
    let both = error(&server, "POST", "/v1/agents/sessions", Some(json!({"agent_id": "a", "agent": {}}))).await;
    assert_eq!((both.0, both.1["error"]["param"].as_str()), (400, Some("agent_id")));
    let hosted =
        error(&server, "POST", "/v1/agents/sessions", Some(json!({"environment": {"type": "openai_hosted"}}))).await;
    assert_eq!(
        hosted.1["error"]["message"],
        "environment.type openai_hosted is not available; use self_hosted or none"
    );
    let no_program = error(&server, "POST", "/v1/agents/sessions", Some(json!({"adapter": "command"}))).await;
    assert_eq!(no_program.1["error"]["message"], "command: required for runtime 'command' (argv, parser, ...)");
    let tools =
        error(&server, "POST", "/v1/agents/sessions", Some(json!({"agent": {"tools": [{"type": "function"}]}}))).await;
    assert_eq!(tools.1["error"]["param"], "agent.tools[0].type");

    let bad_json =
        call_with(&server, "POST", "/v1/agents/sessions", None, &[("content-type", "application/json")]).await;
    assert_eq!(bad_json.status, 200, "an empty body is {{}}: a codex session");
    let raw = reqwest::Client::new()
        .post(server.at("/v1/agents/sessions"))
        .header("authorization", server.bearer())
        .body("{bad")
        .send()
        .await
        .expect("send");
    assert_eq!(raw.status(), 400);
    let body: Value = raw.json().await.expect("json");
    assert_eq!(body["type"], "ValueError", "malformed JSON gets the server's own error body: {body}");

    let agent = script(state.path(), "quiet.sh", "cat > /dev/null");
    let sid = create(&server, command_session(&agent, work.path(), None)).await;
    let at = |p: &str| format!("/v1/agents/sessions/{sid}{p}");
    assert_eq!(
        error(&server, "POST", &at("/events"), Some(json!({"events": []}))).await.1["error"]["message"],
        "events must be a non-empty list"
    );
    let tool =
        error(&server, "POST", &at("/events"), Some(json!({"events": [{"type": "agent.session.input.tool_result"}]})))
            .await;
    assert_eq!(tool.1["error"]["code"], "agents.tool_result_unsupported");
    assert_eq!(
        error(&server, "POST", &at("/events"), Some(json!({"events": [{"type": "x"}]}))).await.1["error"]["message"],
        "unsupported event type 'x'"
    );
    let stream = error(&server, "GET", &at("/events?after=abc"), None).await;
    assert_eq!(stream.1["error"]["message"], "after must be a sequence number or evt_<seq>");
    assert_eq!(
        error(&server, "GET", &at("/turns/turn_x"), None).await.1["error"]["message"],
        "turn 'turn_x' not found"
    );
    assert_eq!(
        error(&server, "GET", &at("/artifacts/artifact_x"), None).await.1["error"]["message"],
        "artifact 'artifact_x' not found"
    );
    assert_eq!(
        error(&server, "GET", &at("/subagents/sub_x"), None).await.1["error"]["message"],
        "subagent 'sub_x' not found"
    );

    let refused = error(&server, "POST", &at(""), Some(json!({"agent": {}}))).await;
    assert_eq!(refused.1["error"]["message"], "agent: agent cannot change after the session is created");
    assert_eq!(
        error(&server, "POST", &at(""), Some(json!({"foo": 1}))).await.1["error"]["message"],
        "foo: only metadata can be updated"
    );
    assert_eq!(
        error(&server, "POST", &at(""), Some(json!({"metadata": {"k": 1}}))).await.1["error"]["param"],
        "metadata.k"
    );
    let updated = call(&server, "POST", &at(""), Some(json!({"metadata": {"k": "v"}}))).await;
    assert_eq!((updated.status, updated.body["metadata"].clone()), (200, json!({"k": "v"})));

    let key = [("idempotency-key", "k-1")];
    let first = call_with(&server, "POST", &at("/events"), Some(json!({"input": "once"})), &key).await;
    let again = call_with(&server, "POST", &at("/events"), Some(json!({"input": "once"})), &key).await;
    assert_eq!((first.status, again.status), (202, 202));
    let other = call_with(&server, "POST", &at("/events"), Some(json!({"input": "twice"})), &key).await;
    assert_eq!((other.status, other.body["error"]["code"].as_str()), (409, Some("idempotency.mismatch")));
    wait_idle(&server, &sid).await;
    let turns = call(&server, "GET", &at("/turns"), None).await;
    assert_eq!(turns.body["data"].as_array().map(Vec::len), Some(1), "the replay queued no second turn");

    let deleted = call(&server, "DELETE", &at(""), None).await;
    assert_eq!(
        deleted.body,
        json!({"id": sid, "object": "agent.session.deleted", "deleted": true, "x_agent_sandbox": {"local": true, "compute": "local_process", "differences": ["queued_not_steered", "usage_adapter_best_effort"]}})
    );
    assert_eq!(error(&server, "GET", &at(""), None).await.0, 404);
    assert!(!state.path().join("sessions").join(&sid).exists(), "its state is gone from disk");
}

#[tokio::test]
async fn the_group_is_off_unless_enabled_and_the_pipeline_still_decides() {
    let server = common::start();
    let off = call(&server, "GET", "/v1/agents/sessions", None).await;
    assert_eq!((off.status, off.body["code"].as_str()), (404, Some("endpoint_disabled")));
    assert_eq!(off.header("x-agent-sandbox-local"), None, "the pipeline refused; no handler ran");
    let state = tempfile::tempdir().expect("state");
    let on = agents_server(state.path()).start();
    let anonymous = reqwest::Client::new().get(on.at("/v1/agents/sessions")).send().await.expect("send");
    assert_eq!(anonymous.status(), 401);
    let caps = call(&on, "GET", "/capabilities", None).await;
    let state_of = |id: &str| caps.body["endpoints"][id].clone();
    assert_eq!(state_of("agents_sessions_create")["allowed"], true, "{}", state_of("agents_sessions_create"));
    assert_eq!(state_of("agents_responses_create")["allowed"], true, "{}", state_of("agents_responses_create"));
    for id in ["agents_vaults_create", "agents_vault_credentials_update", "agents_webhooks_create"] {
        assert_eq!(state_of(id)["allowed"], true, "{}", state_of(id));
    }
    assert!(
        !state.path().join("sessions").exists()
            || std::fs::read_dir(state.path().join("sessions")).expect("dir").next().is_none()
    );
}

#[tokio::test]
async fn runtimes_report_what_is_implemented_and_installed() {
    let state = tempfile::tempdir().expect("state");
    let bin = tempfile::tempdir().expect("bin");
    script(bin.path(), "codex", "echo 'codex-cli 9.9.9-test'");
    let path = format!("{}:/usr/bin:/bin", bin.path().display());
    let server = agents_server(state.path()).env("PATH", &path).start();
    let reply = call(&server, "GET", "/v1/agents/runtimes", None).await;
    let data = reply.body["data"].as_array().expect("runtimes");
    let names: Vec<&str> = data.iter().filter_map(|r| r["id"].as_str()).collect();
    assert_eq!(names, ["cursor", "command", "claude-code", "qwen-code", "codex"]);
    let codex = &data[4];
    assert_eq!(
        (codex["implemented"].as_bool(), codex["installed"].as_bool(), codex["default"].as_bool()),
        (Some(true), Some(true), Some(true))
    );
    assert_eq!(codex["version"], "codex-cli 9.9.9-test");
    assert_eq!(codex["object"], "agent.runtime");
    assert_eq!(
        codex["x_agent_sandbox"],
        json!({"local": true, "compute": "none", "differences": [], "installed": true, "implemented": true})
    );
    assert_eq!((data[0]["implemented"].as_bool(), data[0]["installed"].as_bool()), (Some(false), Some(false)));
    assert_eq!(
        (data[1]["implemented"].as_bool(), data[1]["installed"].as_bool(), data[1]["binary"].clone()),
        (Some(true), Some(true), Value::Null)
    );
    assert_eq!(data[2]["aliases"], json!(["claude", "claude_code", "claudecode"]));
    assert_eq!(data[3]["installed"], false);
}

#[tokio::test]
async fn traces_are_one_per_finished_turn_and_only_when_enabled() {
    let state = tempfile::tempdir().expect("state");
    let agent = script(state.path(), "agent.sh", LS_AGENT);
    let off = agents_server(state.path()).start();
    // The state directory is the daemon's own: no workspace may lie in it.
    let workspace = tempfile::tempdir().expect("workspace");
    let sid = create(&off, command_session(&agent, workspace.path(), Some("go"))).await;
    wait_idle(&off, &sid).await;
    let none = call(&off, "GET", &format!("/v1/agents/sessions/{sid}/traces"), None).await;
    assert_eq!(none.body, json!({"object": "list", "data": [], "first_id": null, "last_id": null, "has_more": false}));
    drop(off);

    let state = tempfile::tempdir().expect("state");
    let agent = script(state.path(), "agent.sh", LS_AGENT);
    // The reference's variable and our flag are the same option.
    let on = agents_server(state.path()).env("ABX_AGENTS_TRACES", "0").args(["--agents-traces", "1"]).start();
    // The state directory is the daemon's own: no workspace may lie in it.
    let workspace = tempfile::tempdir().expect("workspace");
    let sid = create(&on, command_session(&agent, workspace.path(), Some("go"))).await;
    wait_idle(&on, &sid).await;
    let turn = call(&on, "GET", &format!("/v1/agents/sessions/{sid}/turns"), None).await.body["data"][0].clone();
    let traces = call(&on, "GET", &format!("/v1/agents/sessions/{sid}/traces"), None).await;
    assert_eq!((traces.status, traces.header("x-agent-sandbox-local")), (200, Some("1")));
    let data = traces.body["data"].as_array().expect("traces");
    assert_eq!(data.len(), 1, "{}", traces.body);
    let trace = &data[0];
    assert!(id_like(&trace["id"], "trace_"), "{trace}");
    assert_eq!(
        (trace["object"].as_str(), trace["session_id"].as_str()),
        (Some("agent.session.trace"), Some(sid.as_str()))
    );
    let span = &trace["otlp"]["resourceSpans"][0]["scopeSpans"][0]["spans"][0];
    assert_eq!((span["name"].as_str(), span["status"]["code"].as_i64()), (Some("agent.turn"), Some(1)));
    assert_eq!(
        span["attributes"],
        json!([
            {"key": "turn.status", "value": {"stringValue": "completed"}},
            {"key": "turn.items", "value": {"intValue": "2"}}
        ])
    );
    let start: i128 = span["startTimeUnixNano"].as_str().and_then(|s| s.parse().ok()).expect("start");
    let end: i128 = span["endTimeUnixNano"].as_str().and_then(|s| s.parse().ok()).expect("end");
    assert!(start <= end && turn["created_at"].as_i64().is_some_and(|c| start / 1_000_000_000 >= i128::from(c) - 1));
    let text = traces.body.to_string();
    assert!(!text.contains("agent.sh") && !text.contains("done: go"), "no command output or text in a trace: {text}");
    let unknown = call(&on, "GET", "/v1/agents/sessions/agsess_nope/traces", None).await;
    assert_eq!(unknown.status, 404);
}

#[tokio::test]
// A test process without the daemon's reaper: waiting on its own child is fine.
#[allow(clippy::disallowed_methods)]
async fn a_bad_agents_option_stops_the_server_naming_it() {
    let run = |env: (&str, &str)| {
        std::process::Command::new(env!("CARGO_BIN_EXE_agent-sandbox-server"))
            .args(["serve", "--host", "127.0.0.1", "--port", "0", "--pty-port", "0", "--code-port", "off"])
            .args(["--envd-port", "off"])
            .env(env.0, env.1)
            .output()
            .expect("run")
    };
    let zero = run(("ABX_AGENTS_IDLE_TIMEOUT_SECONDS", "0"));
    assert_eq!(zero.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&zero.stderr);
    assert!(stderr.contains("agents_idle_timeout_seconds must be more than 0"), "{stderr}");
    let word = run(("ABX_AGENTS_PERSIST", "maybe"));
    assert!(!word.status.success());
    let stderr = String::from_utf8_lossy(&word.stderr);
    assert!(stderr.contains("--agents-persist") && stderr.contains("maybe"), "{stderr}");
}
