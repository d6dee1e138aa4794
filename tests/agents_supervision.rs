//! The agents runtime supervises each turn's program like any other child:
//! idle and wall-clock timeouts, output floods, forks left behind, malformed
//! output, cancellation and deletion all end with nothing running, a
//! detached process cannot hold a turn open, and the event stream of a long
//! turn can be left and resumed without a gap.

mod common;

use std::time::Duration;

use common::agents::{
    agents_server, alive, call, command_session, create, events, first_event, logged_pid, script, types, wait_idle,
};
use serde_json::json;

const LONG: Duration = Duration::from_secs(60);

async fn last_turn(server: &common::TestServer, sid: &str) -> serde_json::Value {
    call(server, "GET", &format!("/v1/agents/sessions/{sid}/turns"), None).await.body["data"][0].clone()
}

#[tokio::test]
async fn a_silent_program_is_ended_by_the_idle_timeout() {
    let state = tempfile::tempdir().expect("state");
    let server = agents_server(state.path()).env("ABX_AGENTS_IDLE_TIMEOUT_SECONDS", "1").start();
    let agent = script(state.path(), "hang.sh", "echo \"pid=$$\"\nexec sleep 1000");
    // The state directory is the daemon's own: no workspace may lie in it.
    let workspace = tempfile::tempdir().expect("workspace");
    let sid = create(&server, command_session(&agent, workspace.path(), Some("hang"))).await;
    let log = first_event(&server, &sid, |e| logged_pid(e).is_some(), LONG).await;
    let pid = logged_pid(&log).expect("pid");
    let all = wait_idle(&server, &sid).await;
    assert_eq!(types(&all).iter().rev().nth(1), Some(&"agent.session.turn.failed"));
    let turn = last_turn(&server, &sid).await;
    assert_eq!(turn["error"], json!({"code": "request_timeout", "message": "no output for 1s"}));
    assert!(!alive(pid), "the program was killed");
}

#[tokio::test]
async fn a_chatty_program_is_ended_by_the_wall_clock() {
    let state = tempfile::tempdir().expect("state");
    let server = agents_server(state.path()).env("ABX_AGENTS_TURN_TIMEOUT_SECONDS", "1").start();
    let agent = script(state.path(), "chatty.sh", "echo \"pid=$$\"\nwhile :; do echo tick; sleep 0.1; done");
    // The state directory is the daemon's own: no workspace may lie in it.
    let workspace = tempfile::tempdir().expect("workspace");
    let sid = create(&server, command_session(&agent, workspace.path(), Some("talk"))).await;
    let pid = logged_pid(&first_event(&server, &sid, |e| logged_pid(e).is_some(), LONG).await).expect("pid");
    wait_idle(&server, &sid).await;
    assert_eq!(
        last_turn(&server, &sid).await["error"],
        json!({"code": "request_timeout", "message": "turn exceeded 1s"})
    );
    assert!(!alive(pid));
}

#[tokio::test]
async fn a_flood_past_the_output_limit_fails_the_turn_and_kills_the_group() {
    let state = tempfile::tempdir().expect("state");
    let server = agents_server(state.path()).env("ABX_AGENTS_MAX_OUTPUT_BYTES", "200000").start();
    let agent =
        script(state.path(), "flood.sh", "echo \"pid=$$\"\nexec yes 'flooding the pipe with a line that is not json'");
    // The state directory is the daemon's own: no workspace may lie in it.
    let workspace = tempfile::tempdir().expect("workspace");
    let sid = create(&server, command_session(&agent, workspace.path(), Some("flood"))).await;
    let all = wait_idle(&server, &sid).await;
    let pid = all.iter().find_map(logged_pid).expect("pid logged");
    let turn = last_turn(&server, &sid).await;
    assert_eq!(turn["status"], "failed");
    assert_eq!(turn["error"], json!({"code": "sandbox_error", "message": "agent output exceeded 200000 bytes"}));
    let logs = all.iter().filter(|e| e.event == "x_agent_sandbox.turn.log").count();
    assert_eq!(logs, 1000, "log lines are capped per turn");
    assert!(!alive(pid));
}

#[tokio::test]
async fn a_program_that_forks_and_exits_leaves_nothing_running() {
    let state = tempfile::tempdir().expect("state");
    let server = agents_server(state.path()).start();
    let body = "sleep 1000 &\necho \"pid=$!\"\necho '{\"type\":\"message\",\"item_id\":\"m\",\"text\":\"forked\"}'";
    let agent = script(state.path(), "fork.sh", body);
    // The state directory is the daemon's own: no workspace may lie in it.
    let workspace = tempfile::tempdir().expect("workspace");
    let sid = create(&server, command_session(&agent, workspace.path(), Some("fork"))).await;
    let all = wait_idle(&server, &sid).await;
    let child = all.iter().find_map(logged_pid).expect("child pid");
    assert_eq!(last_turn(&server, &sid).await["status"], "completed");
    assert!(!alive(child), "the forked sleep died with the turn's group");
}

#[tokio::test]
async fn a_detached_process_holding_the_output_does_not_hold_the_turn() {
    let state = tempfile::tempdir().expect("state");
    let server = agents_server(state.path()).env("ABX_AGENTS_IDLE_TIMEOUT_SECONDS", "20").start();
    // `setsid` leaves the turn's group; the sleep keeps both output pipes open after the script
    // exits. The script exits only once the detached shell has written its pid, after `setsid`.
    let body = r#"setsid sh -c 'echo $$ > detached.pid; exec sleep 60' &
while [ ! -s detached.pid ]; do sleep 0.01; done
echo "pid=$(cat detached.pid)"
echo '{"type":"message","item_id":"m","text":"detached"}'
printf 'no newline'"#;
    let agent = script(state.path(), "detach.sh", body);
    let started = std::time::Instant::now();
    // The state directory is the daemon's own: no workspace may lie in it.
    let workspace = tempfile::tempdir().expect("workspace");
    let sid = create(&server, command_session(&agent, workspace.path(), Some("detach"))).await;
    let all = wait_idle(&server, &sid).await;
    let elapsed = started.elapsed();
    let detached = all.iter().find_map(logged_pid).expect("detached pid");
    let still_running = alive(detached);
    let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(detached), nix::sys::signal::Signal::SIGKILL);
    let turn = last_turn(&server, &sid).await;
    assert_eq!(turn["status"], "completed", "{turn}");
    assert!(elapsed < Duration::from_secs(15), "the turn ended {elapsed:?} after it started, not at the idle timeout");
    assert!(still_running, "a process that left the group on purpose is not killed");
    let logs: Vec<&str> =
        all.iter().filter(|e| e.event == "x_agent_sandbox.turn.log").filter_map(|e| e.data["text"].as_str()).collect();
    assert_eq!(logs.last(), Some(&"no newline"), "the unfinished last line was read");
    let items = call(&server, "GET", &format!("/v1/agents/sessions/{sid}/items"), None).await;
    assert_eq!(items.body["data"][0]["content"][0]["text"], "detached");
}

#[tokio::test]
async fn malformed_lines_are_kept_as_log_events() {
    let state = tempfile::tempdir().expect("state");
    let server = agents_server(state.path()).start();
    let body = r#"echo '{not json'
echo 'plain text'
echo '{"type":"no_such_event"}'
echo '{"type":"message","text":"no item id"}'
printf '\377\376 bytes\n'
echo '{"type":"message","item_id":"m","text":"still fine"}'"#;
    let agent = script(state.path(), "messy.sh", body);
    // The state directory is the daemon's own: no workspace may lie in it.
    let workspace = tempfile::tempdir().expect("workspace");
    let sid = create(&server, command_session(&agent, workspace.path(), Some("mess"))).await;
    let all = wait_idle(&server, &sid).await;
    let logs: Vec<&str> =
        all.iter().filter(|e| e.event == "x_agent_sandbox.turn.log").filter_map(|e| e.data["text"].as_str()).collect();
    assert_eq!(
        logs,
        [
            "{not json",
            "plain text",
            r#"{"type":"no_such_event"}"#,
            r#"{"type":"message","text":"no item id"}"#,
            "\u{fffd}\u{fffd} bytes"
        ]
    );
    assert_eq!(last_turn(&server, &sid).await["status"], "completed");
    let items = call(&server, "GET", &format!("/v1/agents/sessions/{sid}/items"), None).await;
    assert_eq!(items.body["data"][0]["content"][0]["text"], "still fine");
}

#[tokio::test]
async fn long_lines_and_tool_output_are_cut_at_the_reference_limits() {
    let state = tempfile::tempdir().expect("state");
    let server = agents_server(state.path()).start();
    // A 5,000,000-byte line (over the 4 MiB line limit), then a tool whose output passes 256 KiB.
    let body = r#"head -c 5000000 /dev/zero | tr '\0' y; echo
echo '{"type":"tool_start","item_id":"c1","kind":"command","name":"command_execution","command":"big"}'
printf '{"type":"tool_end","item_id":"c1","ok":true,"output":"%s","exit_code":0}\n' "$(head -c 300000 /dev/zero | tr '\0' x)"
echo '{"type":"message","item_id":"m","text":"after"}'"#;
    let agent = script(state.path(), "long.sh", body);
    // The state directory is the daemon's own: no workspace may lie in it.
    let workspace = tempfile::tempdir().expect("workspace");
    let sid = create(&server, command_session(&agent, workspace.path(), Some("long"))).await;
    let all = wait_idle(&server, &sid).await;
    assert_eq!(last_turn(&server, &sid).await["status"], "completed");
    let logs: Vec<usize> = all
        .iter()
        .filter(|e| e.event == "x_agent_sandbox.turn.log")
        .filter_map(|e| e.data["text"].as_str().map(str::len))
        .collect();
    assert_eq!(logs, [4096, 4096], "the long line came as a 4 MiB piece and its rest, each logged in 4 KiB");
    let items = call(&server, "GET", &format!("/v1/agents/sessions/{sid}/items?order=asc"), None).await;
    let tool = &items.body["data"][0];
    assert_eq!(tool["command"], "big");
    let output = tool["output"].as_str().expect("output");
    assert_eq!((output.len(), output.bytes().all(|b| b == b'x')), (256 * 1024, true));
    assert_eq!(items.body["data"][1]["content"][0]["text"], "after");
}

#[tokio::test]
async fn cancel_and_delete_end_the_running_program() {
    let state = tempfile::tempdir().expect("state");
    let server = agents_server(state.path()).start();
    let agent = script(state.path(), "wait.sh", "echo \"pid=$$\"\nexec sleep 1000");
    // The state directory is the daemon's own: no workspace may lie in it.
    let workspace = tempfile::tempdir().expect("workspace");
    let sid = create(&server, command_session(&agent, workspace.path(), Some("wait"))).await;
    let pid = logged_pid(&first_event(&server, &sid, |e| logged_pid(e).is_some(), LONG).await).expect("pid");
    let sent = call(
        &server,
        "POST",
        &format!("/v1/agents/sessions/{sid}/events"),
        Some(json!({"events": [{"type": "agent.session.input.cancel"}]})),
    )
    .await;
    assert_eq!(sent.status, 202);
    let all = wait_idle(&server, &sid).await;
    assert_eq!(types(&all).iter().rev().nth(1), Some(&"agent.session.turn.cancelled"));
    assert_eq!(last_turn(&server, &sid).await["status"], "cancelled");
    assert!(!alive(pid));

    let sent =
        call(&server, "POST", &format!("/v1/agents/sessions/{sid}/events"), Some(json!({"input": "again"}))).await;
    assert_eq!(sent.status, 202);
    let log = first_event(&server, &sid, |e| logged_pid(e).is_some_and(|p| p != pid), LONG).await;
    let second = logged_pid(&log).expect("pid");
    let deleted = call(&server, "DELETE", &format!("/v1/agents/sessions/{sid}"), None).await;
    assert_eq!(deleted.status, 200);
    assert!(!alive(second), "deleting the session ended its turn");
    assert_eq!(call(&server, "GET", &format!("/v1/agents/sessions/{sid}"), None).await.status, 404);
}

#[tokio::test]
async fn a_subscriber_that_leaves_and_resumes_misses_nothing() {
    let state = tempfile::tempdir().expect("state");
    let server = agents_server(state.path()).start();
    let n = 12_000;
    let body = format!(
        "i=0\nwhile [ $i -lt {n} ]; do echo '{{\"type\":\"text_delta\",\"item_id\":\"m\",\"text\":\"x\"}}'; i=$((i+1)); done\necho '{{\"type\":\"result\",\"ok\":true}}'"
    );
    let agent = script(state.path(), "many.sh", &body);
    // The state directory is the daemon's own: no workspace may lie in it.
    let workspace = tempfile::tempdir().expect("workspace");
    let sid = create(&server, command_session(&agent, workspace.path(), Some("many"))).await;
    // Read part of the stream, leave, and come back from the last sequence number seen.
    let first =
        first_event(&server, &sid, |e| e.event == "agent.session.turn.output_text.delta" && e.id > 500, LONG).await;
    let rest = events(&server, &sid, Some(&first.id.to_string()), LONG).await;
    assert_eq!(rest.first().map(|e| e.id), Some(first.id + 1), "resumed right after the last event seen");
    let all = wait_idle(&server, &sid).await;
    let seqs: Vec<u64> = all.iter().map(|e| e.id).collect::<std::collections::BTreeSet<_>>().into_iter().collect();
    assert_eq!(seqs, (1..=seqs.len() as u64).collect::<Vec<_>>(), "every sequence number, once");
    let deltas = all.iter().filter(|e| e.event == "agent.session.turn.output_text.delta").count();
    assert_eq!(deltas, n, "older events came back from disk");
    assert_eq!(rest.last().map(|e| e.id), all.last().map(|e| e.id));
    let items = call(&server, "GET", &format!("/v1/agents/sessions/{sid}/items"), None).await;
    assert_eq!(items.body["data"][0]["content"][0]["text"].as_str().map(str::len), Some(n));
    // Last-Event-ID resumes too.
    let last = seqs.last().copied().unwrap_or_default();
    let resumed = reqwest::Client::new()
        .get(server.at(&format!("/v1/agents/sessions/{sid}/events")))
        .header("authorization", server.bearer())
        .header("last-event-id", (last - 2).to_string())
        .send()
        .await
        .expect("send")
        .text()
        .await
        .expect("text");
    let resumed = common::agents::parse_sse(&resumed);
    assert_eq!(resumed.first().map(|e| e.id), Some(last - 1));
}

#[tokio::test]
async fn subscribers_per_session_are_bounded() {
    let state = tempfile::tempdir().expect("state");
    let server = agents_server(state.path()).start();
    let agent = script(state.path(), "idle.sh", "cat > /dev/null");
    // The state directory is the daemon's own: no workspace may lie in it.
    let workspace = tempfile::tempdir().expect("workspace");
    let sid = create(&server, command_session(&agent, workspace.path(), None)).await;
    let client = reqwest::Client::new();
    let open = |c: reqwest::Client| {
        let url = server.at(&format!("/v1/agents/sessions/{sid}/events"));
        let auth = server.bearer();
        async move { c.get(url).header("authorization", auth).send().await.expect("send") }
    };
    let mut held = Vec::new();
    for _ in 0..32 {
        let response = open(client.clone()).await;
        assert_eq!(response.status(), 200);
        held.push(response);
    }
    let refused = open(client.clone()).await;
    assert_eq!(refused.status(), 429);
    let body: serde_json::Value = refused.json().await.expect("json");
    assert_eq!(body["error"]["code"], "agents.too_many_subscribers");
    // A turn ends with a caught-up idle, which ends every stream and frees its place.
    let sent = call(&server, "POST", &format!("/v1/agents/sessions/{sid}/events"), Some(json!({"input": "x"}))).await;
    assert_eq!(sent.status, 202);
    let ended = held.pop().expect("held").text().await.expect("stream");
    assert!(ended.contains("agent.session.idle"), "{ended}");
    assert_eq!(open(client.clone()).await.status(), 200);
}
