//! Black-box tests of the process group against the real binary: `/shell`,
//! `/shell/stream`, `/process/*`, supervision (groups, timeouts, reaping,
//! shutdown) and the companion client.

// Tests are separate processes without the daemon's reaper: waiting on their own children is fine.
#![allow(clippy::disallowed_methods)]

mod common;

use std::time::{Duration, Instant};

use abx_wire::api::process::{ExecRequest, ShellEvent};
use futures_util::StreamExt;
use nix::sys::signal::Signal;
use serde_json::{json, Value};

/// A marker unique to this test, to find its processes with `pgrep -f`. It is
/// a number of seconds (about 1000), so it also serves as `sleep`'s argument
/// and puts the marker in the command line of every process of a test.
fn marker() -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let unique = NEXT.fetch_add(1, Ordering::Relaxed);
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
    format!("1000.{:07}{unique:03}{nanos:09}", std::process::id() % 10_000_000)
}

/// A background request bounded in time, so nothing outlives a failed test
/// (the harness SIGKILLs the server, which then cannot stop its children).
fn bounded(command: String) -> ExecRequest {
    ExecRequest { timeout: Some(60.0), ..ExecRequest::new(command) }
}

/// Pids whose command line contains `pattern`.
fn pgrep(pattern: &str) -> Vec<u32> {
    let out = std::process::Command::new("pgrep").args(["-f", pattern]).output().expect("pgrep");
    String::from_utf8_lossy(&out.stdout).lines().filter_map(|l| l.trim().parse().ok()).collect()
}

/// Waits until no process matches `pattern`; panics after `timeout`. (The
/// runtime keeps running meanwhile, so client connections can close.)
async fn assert_gone(pattern: &str, timeout: Duration) {
    let deadline = Instant::now() + timeout;
    loop {
        let left = pgrep(pattern);
        if left.is_empty() {
            return;
        }
        assert!(Instant::now() < deadline, "still running: {left:?} ({pattern})");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn post(server: &common::TestServer, path: &str, body: Value) -> (u16, Value) {
    let response = server
        .http()
        .post(server.at(path))
        .header("authorization", server.bearer())
        .json(&body)
        .send()
        .await
        .expect("request");
    let status = response.status().as_u16();
    (status, response.json().await.expect("JSON body"))
}

async fn get(server: &common::TestServer, path: &str) -> (u16, Value) {
    let response =
        server.http().get(server.at(path)).header("authorization", server.bearer()).send().await.expect("request");
    let status = response.status().as_u16();
    (status, response.json().await.expect("JSON body"))
}

#[tokio::test]
async fn shell_separates_streams_and_reports_exit_codes() {
    let server = common::start();
    let client = server.client();
    let result = client.shell(&ExecRequest::new("sh -c 'echo out; echo err >&2; exit 3'")).await.expect("shell");
    assert_eq!((result.stdout.as_str(), result.stderr.as_str(), result.exit_code), ("out\n", "err\n", 3));
    assert_eq!(result.truncated, None);
    let killed = client.shell(&ExecRequest::new("sh -c 'kill -9 $$'")).await.expect("shell");
    assert_eq!(killed.exit_code, -9, "signal-killed processes report minus the signal, as the reference");
    let cwd = client.shell(&ExecRequest::new("pwd")).await.expect("shell");
    assert_eq!(cwd.stdout.trim_end(), server.base.canonicalize().expect("base").display().to_string());
    let shell = ExecRequest { shell: true, ..ExecRequest::new("echo $((6 * 7)) | tr 4 X") };
    assert_eq!(client.shell(&shell).await.expect("sh -c").stdout, "X2\n");
    let split = client.shell(&ExecRequest::new("printf '%s|' 'a b' c\\ d '#'")).await.expect("shell");
    assert_eq!(split.stdout, "a b|c d|#|", "argv is split like Python's shlex, no shell involved");
}

#[tokio::test]
async fn shell_survives_non_utf8_output() {
    let server = common::start();
    let result = server.client().shell(&ExecRequest::new(r"printf 'ok\377\376'")).await.expect("shell");
    assert_eq!(result.stdout, "ok\u{fffd}\u{fffd}");
}

#[tokio::test]
async fn shell_errors_have_the_reference_shape() {
    let server = common::start();
    let (status, body) = post(&server, "/shell", json!({"command": "sleep 5", "timeout": 0.3})).await;
    assert_eq!(
        (status, &body["type"], &body["error"]),
        (500, &json!("TimeoutError"), &json!("Command timed out after 0.3s"))
    );
    let (status, body) = post(&server, "/shell", json!({"command": "no-such-program-x"})).await;
    assert_eq!(status, 500);
    assert_eq!(body["type"], "FileNotFoundError");
    assert_eq!(body["error"], "[Errno 2] No such file or directory: 'no-such-program-x'");
    let (status, body) = post(&server, "/shell", json!({"command": 5})).await;
    assert_eq!((status, body), (400, json!({"error": "Missing or invalid 'command'", "type": "ValueError"})));
    let (status, body) = post(&server, "/shell", json!({"command": "echo 'x"})).await;
    assert_eq!((status, &body["error"]), (400, &json!("Invalid command: No closing quotation")));
    let (status, body) = post(&server, "/shell", json!({"command": "ls", "cwd": "/etc"})).await;
    assert_eq!((status, &body["code"], &body["endpoint"]), (403, &json!("path_not_allowed"), &json!("shell")));
    let (status, body) = post(&server, "/shell", json!({"command": "ls", "cwd": "missing"})).await;
    assert_eq!(status, 400);
    assert!(body["error"].as_str().unwrap_or_default().starts_with("'cwd' is not a directory"), "{body}");
    let (status, body) = post(&server, "/shell", json!({"command": "/proc/self/exe"})).await;
    assert_eq!((status, &body["code"]), (403, &json!("process_denied")));
    let (status, body) = post(&server, "/shell", json!({"command": "env", "env": {"1A": "x"}})).await;
    assert_eq!((status, &body["code"]), (400, &json!("env_invalid")));
}

#[tokio::test]
async fn children_never_see_the_servers_secrets() {
    let server = common::server().env("ABX_SERVER_EXTRA", "hidden-extra-5e1").env("VISIBLE_VAR", "seen").start();
    let client = server.client();
    let env = client.shell(&ExecRequest::new("env")).await.expect("env").stdout;
    assert!(!env.contains(common::TOKEN), "the token leaked into a child");
    assert!(!env.contains("ABX_SERVER_"), "server variables leaked: {env}");
    assert!(env.contains("VISIBLE_VAR=seen"));
    let mut request = ExecRequest::new("env");
    request.env = Some([("PER_CALL".to_string(), "1".to_string())].into());
    assert!(client.shell(&request).await.expect("env").stdout.contains("PER_CALL=1"));
    let (status, body) = post(&server, "/shell", json!({"command": "env", "env": {"ABX_SERVER_TOKEN": "x"}})).await;
    assert_eq!((status, &body["code"]), (403, &json!("env_var_denied")));
}

#[tokio::test]
async fn a_timeout_kills_a_chatty_command_and_its_grandchildren() {
    let server = common::start();
    let tag = marker();
    let script = |tag: &str| format!("sh -c 'sleep {tag} & sleep {tag} & while :; do echo chatty chatty; done' {tag}");
    let (status, body) = post(&server, "/shell", json!({"command": script(&tag), "timeout": 0.5})).await;
    assert_eq!((status, &body["type"]), (500, &json!("TimeoutError")));
    assert!(pgrep(&tag).is_empty(), "the timeout answered before the group was gone");
    // The stream endpoint has the same deadline, and says so before its exit event.
    let tag = marker();
    let request = ExecRequest { timeout: Some(0.5), ..ExecRequest::new(script(&tag)) };
    let events: Vec<ShellEvent> =
        server.client().shell_stream(&request).await.expect("stream").map(|e| e.expect("event")).collect().await;
    let tail = &events[events.len() - 2..];
    assert_eq!(tail[0], ShellEvent::Error { error: "timeout".into() });
    assert!(matches!(tail[1], ShellEvent::Exit { exit_code } if exit_code < 0), "{:?}", tail[1]);
    assert!(pgrep(&tag).is_empty());
}

#[tokio::test]
async fn shell_answers_at_the_commands_exit_and_leaves_its_background_child_running() {
    let server = common::start();
    let tag = marker();
    let started = Instant::now();
    let command = format!("sleep {tag} & echo started");
    let (status, body) = post(&server, "/shell", json!({"command": command, "shell": true, "timeout": 30})).await;
    assert_eq!((status, &body), (200, &json!({"stdout": "started\n", "stderr": "", "exit_code": 0})));
    assert!(started.elapsed() < Duration::from_secs(10), "answered at the exit: {:?}", started.elapsed());
    let left = pgrep(&format!("sleep {tag}"));
    assert_eq!(left.len(), 1, "`cmd &` starts a daemon that outlives /shell");
    let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(left[0] as i32), nix::sys::signal::Signal::SIGKILL);
    assert_gone(&tag, Duration::from_secs(5)).await;
}

#[tokio::test]
async fn shell_stream_orders_lines_and_delivers_the_last_line() {
    let server = common::start();
    let request = ExecRequest::new("sh -c 'echo one; echo two >&2; sleep 0.1; echo three; printf tail; exit 4'");
    let events: Vec<ShellEvent> =
        server.client().shell_stream(&request).await.expect("stream").map(|e| e.expect("event")).collect().await;
    let stdout: Vec<&str> = events
        .iter()
        .filter_map(|e| match e {
            ShellEvent::Stdout { data } => Some(data.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(stdout, ["one", "three", "tail"]);
    assert!(events.contains(&ShellEvent::Stderr { data: "two".into() }));
    assert_eq!(events.last(), Some(&ShellEvent::Exit { exit_code: 4 }));
    let position = |wanted: &ShellEvent| events.iter().position(|e| e == wanted).expect("present");
    assert!(
        position(&ShellEvent::Stderr { data: "two".into() }) < position(&ShellEvent::Stdout { data: "three".into() })
    );
}

#[tokio::test]
async fn a_client_leaving_the_stream_kills_the_process_group() {
    let server = common::start();
    let tag = marker();
    let request = ExecRequest::new(format!("sh -c 'sleep {tag} & echo started; wait' {tag}"));
    let mut events = Box::pin(server.client().shell_stream(&request).await.expect("stream"));
    assert_eq!(events.next().await.expect("event").expect("ok"), ShellEvent::Stdout { data: "started".into() });
    assert_eq!(pgrep(&tag).len(), 2, "the shell and its background sleep run");
    drop(events);
    assert_gone(&tag, Duration::from_secs(10)).await;
}

#[tokio::test]
async fn background_processes_take_stdin_and_keep_their_output() {
    let server = common::start();
    let client = server.client();
    let request =
        ExecRequest { capture_output: true, stdin: true, ..ExecRequest::new("sh -c 'echo ready; cat; echo done >&2'") };
    let pid = client.start(&request).await.expect("start").pid;
    let first = client.output(pid, 0, Duration::from_secs(10)).await.expect("output");
    assert_eq!(first.events[0].data, "ready\n");
    assert_eq!((first.state.as_str(), first.dropped), ("running", false));
    // A long poll from the cursor wakes when the input comes back out.
    let poll = tokio::spawn({
        let client = client.clone();
        let next = first.next;
        async move { client.output(pid, next, Duration::from_secs(20)).await }
    });
    let written = client.write_stdin(pid, "héllo\n".as_bytes(), false).await.expect("stdin");
    assert_eq!((written.written, written.closed), (7, false));
    let echoed = poll.await.expect("join").expect("output");
    assert_eq!(echoed.events.iter().map(|e| e.data.as_str()).collect::<String>(), "héllo\n");
    let (status, body) = post(&server, &format!("/process/{pid}/stdin"), json!({"data": "bye\n", "eof": true})).await;
    assert_eq!((status, body), (200, json!({"pid": pid, "written": 4, "closed": true})));
    let events: Vec<_> = client.follow(pid, 0, Duration::from_secs(5)).map(|e| e.expect("event")).collect().await;
    let text = |stream: &str| events.iter().filter(|e| e.stream == stream).map(|e| e.data.as_str()).collect::<String>();
    assert_eq!(text("stdout"), "ready\nhéllo\nbye\n");
    assert_eq!(text("stderr"), "done\n");
    assert!(events.windows(2).all(|w| w[0].seq < w[1].seq), "one sequence across both streams");
    let info = client.process(pid).await.expect("detail");
    assert_eq!((info.state.as_str(), info.exit_code), ("exited", Some(0)));
    let (status, body) = post(&server, &format!("/process/{pid}/stdin"), json!({"data": "late"})).await;
    assert_eq!((status, &body["type"]), (409, &json!("ConflictError")));
    assert!(client.processes().await.expect("list").iter().any(|p| p.pid == pid), "exited processes stay listed");
}

/// A daemon started in the background by a script (`serve &`: `SIGINT` and
/// `SIGQUIT` ignored) or under `nohup` (`SIGHUP` ignored) must not pass those
/// dispositions on: `SIGINT` sent to a process ends it, and closing a
/// terminal hangs its shell up.
#[tokio::test]
async fn signals_the_daemon_inherited_as_ignored_still_reach_its_children() {
    let server = common::server().launcher(["/bin/sh", "-c", "trap '' INT QUIT HUP; exec \"$0\" \"$@\""]).start();
    let client = server.client();
    let ignored = std::fs::read_to_string(format!("/proc/{}/status", server.pid())).expect("status");
    let sig_ign = ignored.lines().find_map(|l| l.strip_prefix("SigIgn:")).expect("SigIgn").trim().to_string();
    let mask = u64::from_str_radix(&sig_ign, 16).expect("hex");
    assert_eq!(
        mask & 0b101,
        0b101,
        "the daemon itself runs with SIGHUP and SIGQUIT ignored (SIGINT has its handler): {sig_ign}"
    );
    let tag = marker();
    let pid = client.start(&bounded(format!("sleep {tag}"))).await.expect("start").pid;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("child status");
    let child = status.lines().find_map(|l| l.strip_prefix("SigIgn:")).expect("SigIgn").trim();
    assert_eq!(u64::from_str_radix(child, 16).expect("hex") & 0b111, 0, "the child ignores none of them: {child}");
    assert_eq!(client.signal(pid, 2).await.expect("signal").signal, 2);
    assert_gone(&tag, Duration::from_secs(10)).await;
    let deadline = Instant::now() + Duration::from_secs(10);
    let info = loop {
        let info = client.process(pid).await.expect("detail");
        if info.state == "exited" || Instant::now() > deadline {
            break info;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!((info.state.as_str(), info.exit_code), ("exited", Some(-2)));
}

#[tokio::test]
async fn signals_end_processes_and_bad_requests_are_refused() {
    let server = common::start();
    let client = server.client();
    let tag = marker();
    let pid = client.start(&bounded(format!("sh -c 'sleep {tag} & wait' {tag}"))).await.expect("start").pid;
    let (status, body) = post(&server, &format!("/process/{pid}/signal"), json!({"signal": 1})).await;
    assert_eq!((status, &body["error"]), (400, &json!("Signal 1 not allowed; permitted: [2, 9, 15, 18, 20]")));
    let (status, _) = post(&server, &format!("/process/{pid}/signal"), json!({})).await;
    assert_eq!(status, 400);
    assert_eq!(client.signal(pid, 15).await.expect("signal").signal, 15);
    let (status, body) = get(&server, &format!("/process/{pid}/output?wait=0")).await;
    assert_eq!((status, &body["type"]), (409, &json!("ConflictError")), "no capture asked for");
    assert_gone(&tag, Duration::from_secs(10)).await;
    let info = client.process(pid).await.expect("detail");
    assert_eq!((info.state.as_str(), info.exit_code), ("exited", Some(-15)));
    let err = client.signal(pid, 9).await.expect_err("already exited");
    assert_eq!(err.status(), Some(404));
    let (status, body) = get(&server, "/process/999999999").await;
    assert_eq!((status, &body["type"]), (404, &json!("NotFoundError")));
    let (status, body) = get(&server, "/process/abc").await;
    assert_eq!((status, &body["error"]), (400, &json!("Invalid pid: 'abc'")));
    let (status, body) = post(&server, "/process/1/signal", json!({"signal": 9})).await;
    assert_eq!((status, &body["type"]), (403, &json!("PermissionError")));
}

#[tokio::test]
async fn orphaned_grandchildren_are_reaped() {
    let server = common::start();
    // The background sleep outlives its shell: it is reparented to the daemon (a subreaper).
    let result = server.client().shell(&ExecRequest::new("sh -c 'sleep 0.3 >/dev/null 2>&1 & echo $!'")).await;
    let orphan: u32 = result.expect("shell").stdout.trim().parse().expect("pid");
    let status = std::fs::read_to_string(format!("/proc/{orphan}/status")).unwrap_or_default();
    if !status.is_empty() {
        let ppid = status.lines().find_map(|l| l.strip_prefix("PPid:")).map(str::trim);
        assert_eq!(ppid, Some(server.pid().to_string().as_str()), "reparented to the daemon");
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::path::Path::new(&format!("/proc/{orphan}")).exists() {
        assert!(Instant::now() < deadline, "pid {orphan} stayed (a zombie)");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[tokio::test]
async fn max_processes_refuses_the_hundred_and_first() {
    let server = common::start();
    let client = server.client();
    let tag = marker();
    let request = bounded(format!("sleep {tag}"));
    let mut pids = Vec::new();
    for _ in 0..100 {
        pids.push(client.start(&request).await.expect("start").pid);
    }
    let (status, body) = post(&server, "/process/start", json!({"command": "true"})).await;
    assert_eq!(status, 429);
    assert_eq!(
        (&body["type"], &body["code"], &body["error"]),
        (&json!("ResourceError"), &json!("process_limit"), &json!("Process limit reached (100)"))
    );
    // Killing one frees its place once it has exited.
    client.signal(pids[0], 9).await.expect("kill");
    let deadline = Instant::now() + Duration::from_secs(10);
    let started = loop {
        match client.start(&ExecRequest::new("true")).await {
            Ok(started) => break started,
            Err(e) if e.status() == Some(429) && Instant::now() < deadline => tokio::task::yield_now().await,
            Err(e) => panic!("start after a kill: {e}"),
        }
    };
    assert!(started.pid > 0);
    assert_eq!(pgrep(&tag).len(), 99);
    // The harness SIGKILLs the server, which then cannot stop its children: stop them here.
    for pid in &pids[1..] {
        client.signal(*pid, 9).await.expect("kill");
    }
    assert_gone(&tag, Duration::from_secs(10)).await;
}

#[tokio::test]
async fn shutdown_terminates_every_child() {
    let mut server = common::start();
    let tag = marker();
    let client = server.client();
    client.start(&bounded(format!("sh -c 'trap \"\" TERM; sleep {tag} & wait' {tag}"))).await.expect("start");
    client.start(&bounded(format!("sleep {tag}"))).await.expect("start");
    assert_eq!(pgrep(&tag).len(), 3);
    let status = server.signal_and_wait(Signal::SIGTERM, Duration::from_secs(20));
    assert!(status.is_some(), "the server exited");
    assert_gone(&tag, Duration::from_secs(5)).await;
}

#[tokio::test]
async fn health_answers_while_a_child_floods_output() {
    let server = common::start();
    let client = server.client();
    let flood = ExecRequest { capture_output: true, ..bounded("yes flood-flood-flood-flood".into()) };
    let pid = client.start(&flood).await.expect("start").pid;
    let burn = client.start(&bounded("sh -c 'while :; do :; done'".into())).await.expect("start").pid;
    for _ in 0..5 {
        let asked = Instant::now();
        assert!(client.health().await.expect("health"));
        assert!(asked.elapsed() < Duration::from_secs(2), "health took {:?}", asked.elapsed());
    }
    // `yes` writes far more than the 1 MiB budget: old output is dropped, not kept.
    let mut since = 0;
    for _ in 0..10_000 {
        let output = client.output(pid, since, Duration::from_secs(5)).await.expect("output");
        if output.dropped {
            break;
        }
        since = output.next;
    }
    assert!(client.output(pid, since, Duration::ZERO).await.expect("output").dropped, "the capture stays bounded");
    client.signal(pid, 9).await.expect("kill");
    client.signal(burn, 9).await.expect("kill");
}
