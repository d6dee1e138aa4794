//! `/mcp` over HTTP, black-box: credentials, a tool the policy denies (not
//! listed, refused with its rule, nothing run), path escapes, an oversize
//! body, a cancelled `run` whose whole process group is killed, and a quick
//! tool answered on its own request while anything more takes the session.
//! (The official Python SDK drives the rest: tests/conformance/test_mcp.py.)

mod common;

use std::time::{Duration, Instant};

use common::mcp::{event_of, messages, request, until_answer, Events, Session, INITIALIZE};
use serde_json::{json, Value};

/// A tool error's JSON body.
fn error_body(answer: &Value) -> Value {
    assert_eq!(answer["result"]["isError"], true, "{answer}");
    serde_json::from_str(answer["result"]["content"][0]["text"].as_str().expect("text")).expect("json")
}

#[tokio::test]
async fn a_wrong_or_missing_token_is_refused_401() {
    let server = common::start();
    let http = reqwest::Client::new();
    let wrong = request(&server, &http, "wrong").body(INITIALIZE).send().await.expect("send");
    assert_eq!(wrong.status().as_u16(), 401);
    let body: Value = wrong.json().await.expect("json");
    assert_eq!(body["type"], "AuthError");
    let none = http.post(server.at("/mcp")).body(INITIALIZE).send().await.expect("send");
    assert_eq!(none.status().as_u16(), 401);
    // The event stream and the session's end are behind the same door.
    assert_eq!(http.get(server.at("/mcp")).send().await.expect("get").status().as_u16(), 401);
    assert_eq!(http.delete(server.at("/mcp")).send().await.expect("delete").status().as_u16(), 401);
}

#[tokio::test]
async fn a_denied_tool_is_not_listed_and_its_call_is_refused_with_the_rule() {
    let policy = json!({"endpoints": {"shell": {"enabled": false}}, "defaults": {"audit": "deny"}});
    let server = common::server().env("ABX_SERVER_POLICY", &policy.to_string()).start();
    let session = Session::open(&server).await;
    let listed = session.call(1, "tools/list", json!({})).await;
    let names: Vec<&str> =
        listed["result"]["tools"].as_array().expect("tools").iter().filter_map(|t| t["name"].as_str()).collect();
    assert!(!names.contains(&"run") && names.contains(&"start") && names.contains(&"read"), "{names:?}");
    let marker = server.base.join("ran");
    let refused = session.tool(2, "run", json!({"command": format!("touch {}", marker.display())})).await;
    let body = error_body(&refused);
    assert_eq!((body["code"].as_str(), body["endpoint"].as_str()), (Some("endpoint_disabled"), Some("shell")));
    assert_eq!(body["rule"], "policy:endpoints.shell");
    assert!(!marker.exists(), "a refused call ran");
    server.wait_for_log(
        r#"endpoint="shell" identity="server" method="MCP" tool="run" decision="deny" status=404"#,
        Duration::from_secs(5),
    );
}

#[tokio::test]
async fn tools_follow_the_callers_scopes_and_sessions_their_owner() {
    let policy = json!({"auth": {"tokens": [
        {"id": "admin", "scopes": ["*"], "token_env": "ABX_TEST_MCP_ADMIN"},
        {"id": "reader", "scopes": ["files:read", "core:read"], "token_env": "ABX_TEST_MCP_READER"},
    ]}});
    let server = common::server()
        .token(None)
        .env("ABX_TEST_MCP_ADMIN", "admin-tok")
        .env("ABX_TEST_MCP_READER", "reader-tok")
        .env("ABX_SERVER_POLICY", &policy.to_string())
        .start();
    let reader = Session::open_as(&server, "reader-tok").await;
    let listed = reader.call(1, "tools/list", json!({})).await;
    let names: Vec<&str> =
        listed["result"]["tools"].as_array().expect("tools").iter().filter_map(|t| t["name"].as_str()).collect();
    assert_eq!(names, ["read", "list", "stat", "find", "grep"]);
    let refused = error_body(&reader.tool(2, "run", json!({"command": "true"})).await);
    assert_eq!((refused["code"].as_str(), refused["scope"].as_str()), (Some("missing_scope"), Some("process:run")));
    // The admin's session id in the reader's hands is an unknown session.
    let admin = Session::open_as(&server, "admin-tok").await;
    let stolen = Session { server: &server, id: admin.id.clone(), http: reqwest::Client::new(), token: "reader-tok" };
    let message = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/list", "params": {}});
    assert_eq!(stolen.post(&message).send().await.expect("send").status().as_u16(), 404);
    assert_eq!(admin.call(4, "tools/list", json!({})).await["result"]["tools"].as_array().map(Vec::len), Some(22));
}

#[tokio::test]
async fn paths_outside_the_base_directory_are_refused() {
    let server = common::start();
    let session = Session::open(&server).await;
    let read = session.tool(1, "read", json!({"path": "../../../etc/passwd"})).await;
    assert_eq!(error_body(&read)["code"], "path_not_allowed");
    let outside = server.base.parent().expect("parent").join("escaped.txt");
    let write = session.tool(2, "write", json!({"path": outside.display().to_string(), "content": "x"})).await;
    assert_eq!(error_body(&write)["code"], "path_not_allowed");
    assert!(!outside.exists());
    std::os::unix::fs::symlink("/etc", server.base.join("etc")).expect("symlink");
    let through_link =
        session.tool(3, "edit", json!({"path": "etc/hostname", "old_string": "a", "new_string": "b"})).await;
    assert_eq!(error_body(&through_link)["code"], "path_not_allowed");
    let resource = session.call(4, "resources/read", json!({"uri": "file:///etc/passwd"})).await;
    assert_eq!(resource["error"]["data"]["code"], "path_not_allowed", "{resource}");
}

#[tokio::test]
async fn an_oversize_body_or_file_is_refused() {
    let policy = json!({"endpoints": {
        "capabilities": {"limits": {"max_request_bytes": "64KB"}},
        "files_download_stream": {"limits": {"max_bytes": "1KB"}}
    }});
    let server = common::server().env("ABX_SERVER_POLICY", &policy.to_string()).start();
    let session = Session::open(&server).await;
    let big = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "write", "arguments": {"path": "big", "content": "x".repeat(100_000)}}});
    let response = session.post(&big).send().await.expect("send");
    assert_eq!(response.status().as_u16(), 413);
    assert!(!server.base.join("big").exists());
    std::fs::write(server.base.join("large.txt"), "y".repeat(4096)).expect("write");
    let read = session.tool(2, "read", json!({"path": "large.txt"})).await;
    let refused = error_body(&read);
    assert_eq!(
        (refused["code"].as_str(), refused["limit"].as_u64()),
        (Some("payload_too_large"), Some(1000)),
        "{read}"
    );
}

fn alive(pid: i32) -> bool {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    stat.rsplit(')').next().and_then(|rest| rest.split_whitespace().next()).is_some_and(|state| state != "Z")
}

#[tokio::test]
async fn a_cancelled_run_has_its_process_group_killed() {
    let server = common::start();
    let session = Session::open(&server).await;
    let pids = server.base.join("pids");
    let command = format!("sleep 300 & echo $$ $! > {}; wait", pids.display());
    let call = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
        "params": {"name": "run", "arguments": {"command": command, "shell": true}}});
    let running = session.post(&call).send().await.expect("send");
    let deadline = Instant::now() + Duration::from_secs(10);
    let pids: Vec<i32> = loop {
        let text = std::fs::read_to_string(&pids).unwrap_or_default();
        let found: Vec<i32> = text.split_whitespace().filter_map(|p| p.parse().ok()).collect();
        if found.len() == 2 {
            break found;
        }
        assert!(Instant::now() < deadline, "the command never started");
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 7}});
    assert_eq!(session.post(&cancel).send().await.expect("cancel").status().as_u16(), 202);
    let deadline = Instant::now() + Duration::from_secs(10);
    while pids.iter().any(|p| alive(*p)) {
        assert!(Instant::now() < deadline, "{pids:?} outlived the cancelled call");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    drop(running);
}

#[tokio::test]
async fn a_quick_tool_is_answered_in_one_event_and_anything_more_by_the_session_stream() {
    let server = common::start();
    let session = Session::open(&server).await;
    std::fs::write(server.base.join("a.txt"), "one\ntwo\n").expect("write");
    let read = |id: u64, params: Value| {
        let message = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params});
        session.post(&message).send()
    };
    // A read is answered on its own request: one event, nothing before it.
    let answered = read(1, json!({"name": "read", "arguments": {"path": "a.txt"}})).await.expect("send");
    assert_eq!(answered.headers()["content-type"], "text/event-stream");
    let text = answered.text().await.expect("body");
    let events: Vec<&str> = text.split("\n\n").filter(|e| !e.is_empty()).collect();
    assert_eq!(events.len(), 1, "{text}");
    let answer = &messages(&text)[0];
    assert_eq!((answer["id"].as_u64(), answer["result"]["content"][0]["text"].as_str()), (Some(1), Some("one\ntwo\n")));
    // Asking for progress takes the session's stream: its priming event comes first.
    let meta = json!({"name": "read", "arguments": {"path": "a.txt"}, "_meta": {"progressToken": "p"}});
    let text = read(2, meta).await.expect("send").text().await.expect("body");
    assert!(text.starts_with("data: \nid: "), "{text}");
    let answer = messages(&text).into_iter().find(|m| m["id"] == 2).expect("answer");
    assert_eq!(answer["result"]["content"][0]["text"], "one\ntwo\n");
    // Bad arguments are the protocol's error on either path.
    let bad =
        read(3, json!({"name": "read", "arguments": {"path": 7}})).await.expect("send").text().await.expect("body");
    assert_eq!(messages(&bad)[0]["error"]["code"], -32602, "{bad}");
    // An ended session answers 404, quick tool or not.
    let ended = session.http.delete(server.at("/mcp")).header("authorization", format!("Bearer {}", session.token));
    assert!(ended.header("mcp-session-id", &session.id).send().await.expect("delete").status().is_success());
    let gone = read(4, json!({"name": "read", "arguments": {"path": "a.txt"}})).await.expect("send");
    assert_eq!(gone.status().as_u16(), 404);
}

/// A `run` with a progress token printing `lines` lines, then `last` once `go` exists.
fn waiting_run(id: u64, lines: usize, marker: &std::path::Path, go: &std::path::Path) -> Value {
    let command = format!(
        "for i in $(seq 1 {lines}); do echo line$i; done; touch {}; while [ ! -f {} ]; do sleep 0.02; done; echo last",
        marker.display(),
        go.display()
    );
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
        "name": "run", "arguments": {"command": command, "shell": true}, "_meta": {"progressToken": "p"}}})
}

fn progress_lines(seen: &[(String, Value)]) -> Vec<String> {
    seen.iter()
        .filter(|(_, m)| m["method"] == "notifications/progress")
        .filter_map(|(_, m)| m["params"]["message"].as_str().map(str::to_string))
        .collect()
}

/// Issue 32: a client whose stream drops in the middle of a call resumes
/// with `GET /mcp` and `Last-Event-ID` and gets every later event exactly
/// once, here 100 progress notifications made while it was away and then
/// the answer; the event it named is not sent again (the SDK replayed it).
#[tokio::test]
async fn a_stream_dropped_mid_call_resumes_with_every_event_made_meanwhile() {
    let server = common::start();
    let session = Session::open(&server).await;
    let (marker, go) = (server.base.join("marker"), server.base.join("go"));
    let call = waiting_run(7, 100, &marker, &go);
    let mut first = Events::of(session.post(&call).send().await.expect("send"));
    let (last, message) = first.next().await.expect("a first event");
    let mut seen = vec![(last.clone(), message)];
    drop(first);
    let deadline = Instant::now() + Duration::from_secs(20);
    while !marker.exists() {
        assert!(Instant::now() < deadline, "the command never printed its lines");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let resumed = session.resume(&last).await;
    assert_eq!(resumed.status().as_u16(), 200);
    let mut resumed = Events::of(resumed);
    std::fs::write(&go, b"").expect("go");
    let rest = until_answer(&mut resumed, 7).await;
    assert!(rest.iter().all(|(id, _)| *id != last), "the event named by Last-Event-ID came again");
    seen.extend(rest);
    let answer = &seen.last().expect("events").1;
    assert_eq!(answer["result"]["structuredContent"]["exit_code"], 0, "{answer}");
    let mut expected: Vec<String> = (1..=100).map(|i| format!("line{i}")).collect();
    expected.push("last".into());
    assert_eq!(progress_lines(&seen), expected, "every line exactly once, in order");
}

/// Issue 32: the answer of a call that ended while its client was away is
/// kept, and a resume gets it (the SDK forgot a call's stream when its
/// answer went out: the resume was an empty 200).
#[tokio::test]
async fn the_answer_of_a_call_that_ended_while_the_client_was_away_comes_on_the_resume() {
    let server = common::start();
    let session = Session::open(&server).await;
    let go = server.base.join("go");
    let command = format!("while [ ! -f {} ]; do sleep 0.02; done; echo done", go.display());
    let call = json!({"jsonrpc": "2.0", "id": 8, "method": "tools/call",
        "params": {"name": "run", "arguments": {"command": command, "shell": true}}});
    let response = session.post(&call).send().await.expect("send");
    // The stream's first event is its priming event (no message): its id is what the client has.
    let mut body = response.bytes_stream();
    let mut text = String::new();
    while !text.contains("\n\n") {
        use futures_util::StreamExt;
        let chunk = tokio::time::timeout(Duration::from_secs(20), body.next()).await.expect("in time");
        text.push_str(&String::from_utf8_lossy(&chunk.expect("a priming event").expect("chunk")));
    }
    drop(body);
    let primed = text.lines().find_map(|l| l.strip_prefix("id:")).map(str::trim).expect("an id").to_string();
    std::fs::write(&go, b"").expect("go");
    server.wait_for_log(r#"method="MCP" tool="run" status=200"#, Duration::from_secs(20));
    session.wait_sent(&event_of(&primed, 2)).await;
    let resumed = session.resume(&primed).await;
    assert_eq!(resumed.status().as_u16(), 200);
    let seen = until_answer(&mut Events::of(resumed), 8).await;
    assert_eq!(seen.len(), 1, "the answer alone: {:?}", seen.iter().map(|(id, _)| id).collect::<Vec<_>>());
    assert_eq!(seen[0].1["result"]["structuredContent"]["stdout"], "done\n", "{seen:?}");
}

/// Issue 32: a resume from further back than the stream's ring holds gets
/// the call's answer as an explicit JSON-RPC error counting the messages
/// lost (the SDK skipped them silently), then a resume from where the held
/// messages start gets exactly those; ids never sent are refused 400.
#[tokio::test]
async fn a_resume_from_further_back_than_held_is_answered_with_the_count_lost() {
    let server = common::start();
    let session = Session::open(&server).await;
    let (marker, go) = (server.base.join("marker"), server.base.join("go"));
    let call = waiting_run(9, 400, &marker, &go);
    let mut first = Events::of(session.post(&call).send().await.expect("send"));
    let (named, message) = first.next().await.expect("a first event");
    assert_eq!(message["params"]["message"], "line1");
    drop(first);
    // The priming event, then 400 lines: 401 events, the ring holds 256 of them.
    session.wait_sent(&event_of(&named, 401)).await;
    let lost_answer = until_answer(&mut Events::of(session.resume(&named).await), 9).await;
    let firsts: Vec<&String> = lost_answer.iter().map(|(id, _)| id).take(3).collect();
    assert_eq!(lost_answer.len(), 1, "the marker alone, not {} events from {firsts:?}", lost_answer.len());
    let error = &lost_answer[0].1["error"];
    assert_eq!((error["code"].as_i64(), error["data"]["code"].as_str()), (Some(-32030), Some("data_loss")), "{error}");
    assert_eq!((error["data"]["lost"].as_u64(), error["data"]["held"].as_u64()), (Some(143), Some(256)), "{error}");
    let resume_from = error["data"]["resume_from"].as_str().expect("resume_from").to_string();
    assert_eq!(
        (resume_from.as_str(), lost_answer[0].0.as_str()),
        (event_of(&named, 145).as_str(), resume_from.as_str())
    );
    for bad in [event_of(&named, 5000), "7:1:1".to_string(), "x".to_string(), "99999:1".to_string()] {
        assert_eq!(session.resume(&bad).await.status().as_u16(), 400, "{bad}");
    }
    let mut held = Events::of(session.resume(&resume_from).await);
    std::fs::write(&go, b"").expect("go");
    let seen = until_answer(&mut held, 9).await;
    let mut expected: Vec<String> = (145..=400).map(|i| format!("line{i}")).collect();
    expected.push("last".into());
    assert_eq!(progress_lines(&seen), expected, "exactly the held tail, then the rest");
    assert_eq!(seen.last().expect("answer").1["result"]["structuredContent"]["exit_code"], 0);
}
