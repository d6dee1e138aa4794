//! What a turn leaves behind: artifacts (snapshots of reported files),
//! subagents, redacted text, and the state that survives a restart of the
//! daemon (sessions, turns, items, artifacts, the event log), with turns
//! that were running when it stopped marked failed.

mod common;

use std::time::Duration;

use common::agents::{
    agents_server, alive, call, command_session, create, first_event, logged_pid, script, types, wait_idle,
};
use serde_json::{json, Value};

/// Writes a file and reports it, opens and closes a subagent, and leaks a key shape.
const WRITER: &str = r#"cat > /dev/null
printf 'hello artifact' > notes.txt
echo '{"type":"tool_start","item_id":"f1","kind":"file_change","name":"file_change","arguments":{"changes":[{"path":"notes.txt","kind":"add"}]}}'
echo '{"type":"tool_end","item_id":"f1","ok":true,"output":"add: notes.txt"}'
echo '{"type":"subagent","op":"open","ids":["sub-123456"],"name":"helper","prompt":"look around"}'
echo '{"type":"subagent","op":"event","ids":["sub-123456"],"entry":{"kind":"tool_call","call_id":"t1","name":"grep","arguments":{"q":"x"},"output":null,"ok":null}}'
echo '{"type":"subagent","op":"event","ids":["sub-123456"],"entry":{"kind":"tool_result","call_id":"t1","output":"3 hits","ok":true}}'
echo '{"type":"subagent","op":"event","ids":["sub-123456"],"entry":{"kind":"message","role":"assistant","text":"found it"}}'
echo '{"type":"subagent","op":"close","ids":["sub-123456"]}'
echo '{"type":"message","item_id":"m","text":"used key sk-abcdefghijklmnop1234 here"}'"#;

#[tokio::test]
async fn artifacts_subagents_and_redaction() {
    let state = tempfile::tempdir().expect("state");
    let work = tempfile::tempdir().expect("work");
    let server = agents_server(state.path()).start();
    let agent = script(state.path(), "writer.sh", WRITER);
    let sid = create(&server, command_session(&agent, work.path(), Some("write"))).await;
    let events = wait_idle(&server, &sid).await;
    let at = |p: &str| format!("/v1/agents/sessions/{sid}{p}");

    let listed = call(&server, "GET", &at("/artifacts"), None).await;
    let artifact = listed.body["data"][0].clone();
    let path = work.path().join("notes.txt").canonicalize().expect("real");
    assert_eq!(
        (artifact["object"].as_str(), artifact["path"].as_str()),
        (Some("agent.session.artifact"), path.to_str())
    );
    assert_eq!((artifact["size_bytes"].as_u64(), artifact["session_id"].as_str()), (Some(14), Some(sid.as_str())));
    assert_eq!(artifact["x_agent_sandbox"]["differences"], json!(["snapshot_copy", "reported_paths_only"]));
    let aid = artifact["id"].as_str().expect("id");
    assert_eq!(call(&server, "GET", &at(&format!("/artifacts/{aid}")), None).await.body, artifact);
    std::fs::write(&path, b"changed since").expect("rewrite");
    let content = reqwest::Client::new()
        .get(server.at(&at(&format!("/artifacts/{aid}/content"))))
        .header("authorization", server.bearer())
        .send()
        .await
        .expect("send");
    let headers = content.headers().clone();
    assert_eq!(headers["content-disposition"], "attachment; filename=\"notes.txt\"");
    assert_eq!(
        (headers["content-type"].to_str().ok(), headers["x-agent-sandbox-local"].to_str().ok()),
        (Some("application/octet-stream"), Some("1"))
    );
    assert_eq!(content.bytes().await.expect("bytes").as_ref(), b"hello artifact", "the snapshot, not today's file");
    let deleted = call(&server, "DELETE", &at(&format!("/artifacts/{aid}")), None).await;
    assert_eq!(
        (deleted.body["object"].as_str(), deleted.body["x_agent_sandbox"]["deleted_scope"].as_str()),
        (Some("agent.session.artifact.deleted"), Some("snapshot"))
    );
    assert_eq!(call(&server, "GET", &at(&format!("/artifacts/{aid}")), None).await.status, 404);
    assert!(path.exists(), "the workspace file stays");

    let subagents = call(&server, "GET", &at("/subagents"), None).await;
    let sub = subagents.body["data"][0].clone();
    assert_eq!(
        (sub["id"].as_str(), sub["name"].as_str(), sub["status"].as_str()),
        (Some("sub-123456"), Some("helper"), Some("closed"))
    );
    assert_eq!(
        (sub["parent_agent_id"].as_str(), sub["instructions"][0]["text"].as_str()),
        (Some("scripted"), Some("look around"))
    );
    let turns = call(&server, "GET", &at("/subagents/sub-123456/turns"), None).await;
    let turn = turns.body["data"][0].clone();
    assert_eq!((turn["id"].as_str(), turn["status"].as_str()), (Some("turn_1_sub-123456"), Some("completed")));
    let items = call(&server, "GET", &at("/subagents/sub-123456/items?order=asc"), None).await;
    let kinds: Vec<(&str, &str)> = items.body["data"]
        .as_array()
        .expect("items")
        .iter()
        .map(|i| (i["type"].as_str().unwrap_or(""), i["status"].as_str().unwrap_or("")))
        .collect();
    assert_eq!(kinds, [("tool_call", "completed"), ("message", "completed")]);
    assert_eq!(items.body["data"][0]["output"], "3 hits");
    let one = call(&server, "GET", &at("/subagents/sub-123456/turns/turn_1_sub-123456"), None).await;
    assert_eq!(one.body, turn);
    let turn_items = call(&server, "GET", &at("/subagents/sub-123456/turns/turn_1_sub-123456/items"), None).await;
    assert_eq!(turn_items.body["data"].as_array().map(Vec::len), Some(2));

    let text = "used key [REDACTED] here";
    let listed = call(&server, "GET", &at("/items"), None).await;
    assert_eq!(listed.body["data"][0]["content"][0]["text"], text);
    assert!(!serde_json::to_string(&events.iter().map(|e| &e.data).collect::<Vec<_>>())
        .expect("json")
        .contains("sk-abc"));
    let journal =
        std::fs::read_to_string(state.path().join("sessions").join(&sid).join("events.jsonl")).expect("events");
    assert!(!journal.contains("sk-abcdefghij"), "nothing stored holds the key");
}

#[tokio::test]
async fn sessions_items_artifacts_and_events_survive_a_restart() {
    let state = tempfile::tempdir().expect("state");
    let work = tempfile::tempdir().expect("work");
    let agent = script(state.path(), "writer.sh", WRITER);
    let mut server = agents_server(state.path()).start();
    let sid = create(&server, command_session(&agent, work.path(), Some("write"))).await;
    let before = wait_idle(&server, &sid).await;
    let at = |p: &str| format!("/v1/agents/sessions/{sid}{p}");
    let snapshot = |server: &common::TestServer| {
        let server = server.url.clone();
        let sid = sid.clone();
        async move {
            let mut out = Vec::new();
            for p in ["", "/turns", "/items", "/artifacts", "/subagents"] {
                let reply = reqwest::Client::new()
                    .get(format!("{server}/v1/agents/sessions/{sid}{p}"))
                    .header("authorization", format!("Bearer {}", common::TOKEN))
                    .send()
                    .await
                    .expect("send");
                out.push(reply.json::<Value>().await.expect("json"));
            }
            out
        }
    };
    let mut first = snapshot(&server).await;
    server.signal_and_wait(nix::sys::signal::Signal::SIGTERM, Duration::from_secs(20)).expect("stopped");
    drop(server);

    let server = agents_server(state.path()).start();
    let mut second = snapshot(&server).await;
    // The session object's last_active_at may move by the restart's own events; compare the rest.
    first[0]["last_active_at"] = Value::Null;
    second[0]["last_active_at"] = Value::Null;
    assert_eq!(first, second);
    let aid = second[3]["data"][0]["id"].as_str().expect("artifact").to_string();
    let bytes = reqwest::Client::new()
        .get(server.at(&at(&format!("/artifacts/{aid}/content"))))
        .header("authorization", server.bearer())
        .send()
        .await
        .expect("send")
        .bytes()
        .await
        .expect("bytes");
    assert_eq!(bytes.as_ref(), b"hello artifact");
    let replayed = wait_idle(&server, &sid).await;
    assert_eq!(types(&replayed), types(&before), "the event log came back from disk");
    assert_eq!(replayed.last().map(|e| e.id), before.last().map(|e| e.id));
    // A new turn continues the numbering.
    call(&server, "POST", &at("/events"), Some(json!({"input": "again"}))).await;
    let after = common::agents::events(
        &server,
        &sid,
        before.last().map(|e| e.id.to_string()).as_deref(),
        Duration::from_secs(60),
    )
    .await;
    assert_eq!(
        after.first().map(|e| (e.id, e.event.as_str())),
        Some((before.last().map_or(0, |e| e.id) + 1, "agent.session.in_progress"))
    );
}

#[tokio::test]
async fn a_turn_running_when_the_daemon_dies_is_failed_after_the_restart() {
    let state = tempfile::tempdir().expect("state");
    let agent = script(state.path(), "wait.sh", "echo \"pid=$$\"\nexec sleep 1000");
    let mut server = agents_server(state.path()).start();
    // The state directory is the daemon's own: no workspace may lie in it.
    let workspace = tempfile::tempdir().expect("workspace");
    let sid = create(&server, command_session(&agent, workspace.path(), Some("wait"))).await;
    let pid = logged_pid(&first_event(&server, &sid, |e| logged_pid(e).is_some(), Duration::from_secs(60)).await)
        .expect("pid");
    server.signal_and_wait(nix::sys::signal::Signal::SIGKILL, Duration::from_secs(20)).expect("killed");
    drop(server);
    if alive(pid) {
        // A killed daemon cannot end its children: this one is an orphan now.
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL);
    }
    let server = agents_server(state.path()).start();
    let events = wait_idle(&server, &sid).await;
    let tail: Vec<&str> = types(&events).into_iter().rev().take(2).collect();
    assert_eq!(tail, ["agent.session.idle", "agent.session.turn.failed"]);
    let turn = call(&server, "GET", &format!("/v1/agents/sessions/{sid}/turns"), None).await.body["data"][0].clone();
    assert_eq!(
        turn["error"],
        json!({"code": "internal_error", "message": "server restarted while the turn was running"})
    );
    let session = call(&server, "GET", &format!("/v1/agents/sessions/{sid}"), None).await;
    assert_eq!(session.body["status"], "idle");
}
