//! Black-box tests of terminals against the real binary: sessions over
//! HTTP, the WebSocket on the PTY port (output, input, resize, signals,
//! exit codes, re-attach with scrollback), limits, idle reaping, shutdown,
//! and `abx shell`.

#![allow(clippy::disallowed_methods)] // tests drive the binary from outside; no reaper here

mod common;

use std::collections::BTreeMap;
use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use abx_client::{Client, PtyConnection};
use abx_wire::api::{ErrorCode, PtyCreateRequest, PtyMessage};
use futures_util::StreamExt;
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::Message;

const WAIT: Duration = Duration::from_secs(20);

fn sh() -> PtyCreateRequest {
    PtyCreateRequest { shell: Some("/bin/sh".into()), ..PtyCreateRequest::default() }
}

/// Creates a session and attaches to it; returns the `started` event too.
async fn open(client: &Client, request: &PtyCreateRequest) -> (String, PtyConnection, PtyMessage) {
    let created = client.pty_create(request).await.expect("create");
    let mut connection = client.pty_connect(&created.ws_url).await.expect("connect");
    let started = connection.recv().await.expect("recv").expect("started event");
    assert!(started.is_event("started"), "{started:?}");
    (created.session_id, connection, started)
}

/// Reads until the `exited` event; returns it.
async fn exited(connection: &mut PtyConnection) -> PtyMessage {
    let wait = async {
        loop {
            match connection.recv().await.expect("recv") {
                Some(m) if m.is_event("exited") => return m,
                Some(_) => {}
                None => panic!("closed before the exited event"),
            }
        }
    };
    tokio::time::timeout(WAIT, wait).await.expect("exited in time")
}

#[tokio::test]
async fn a_terminal_runs_commands_resizes_and_closes() {
    let server = common::start();
    let client = server.client();
    let created = client.pty_create(&sh()).await.expect("create");
    let port = server.pty_base().rsplit(':').next().expect("port").to_string();
    assert_eq!(created.ws_url, format!("ws://127.0.0.1:{port}/pty?session_id={}", created.session_id));
    let mut term = client.pty_connect(&created.ws_url).await.expect("connect");
    let started = term.recv().await.expect("recv").expect("started");
    assert_eq!(
        (started.session_id.as_deref(), started.pid, started.cols, started.rows),
        (Some(created.session_id.as_str()), Some(created.pid), Some(80), Some(24))
    );

    term.send_input("echo marker-$((6*7))\n").await.expect("input");
    term.expect("marker-42", WAIT).await.expect("command output");

    term.resize(100, 40).await.expect("resize");
    term.send_input("stty size\n").await.expect("input");
    term.expect("40 100", WAIT).await.expect("the terminal has the new size");

    let info = client.pty_resize(&created.session_id, 120, 50).await.expect("REST resize");
    assert_eq!((info.cols, info.rows, info.alive), (120, 50, true));
    term.send_input("stty size\n").await.expect("input");
    term.expect("50 120", WAIT).await.expect("the REST resize reached the terminal");

    let listed = client.pty_list().await.expect("list");
    assert_eq!(listed.iter().map(|s| s.id.as_str()).collect::<Vec<_>>(), [created.session_id.as_str()]);
    assert_eq!((listed[0].pid, listed[0].shell.as_str(), listed[0].attached), (created.pid, "/bin/sh", 1));

    client.pty_close(&created.session_id).await.expect("delete");
    let end = exited(&mut term).await;
    assert_eq!((end.exit_code, end.signal), (Some(-1), Some(1)), "closing hangs the shell up: {end:?}");
    assert!(term.recv().await.expect("recv").is_none(), "the server closes the connection after the exit");
    let err = client.pty_get(&created.session_id).await.expect_err("gone");
    assert_eq!(err.status(), Some(404));
    assert!(!std::path::Path::new(&format!("/proc/{}", created.pid)).exists() || process_gone(created.pid));
}

/// Whether `pid` is gone or a zombie.
fn process_gone(pid: i32) -> bool {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    matches!(stat.rsplit(") ").next().and_then(|rest| rest.chars().next()), None | Some('Z') | Some('X'))
}

#[tokio::test]
async fn a_signal_reaches_the_foreground_command() {
    let server = common::start();
    let client = server.client();
    for shell in ["/bin/sh", "/bin/bash"] {
        let request = PtyCreateRequest { shell: Some(shell.into()), ..PtyCreateRequest::default() };
        let (_, mut term, _) = open(&client, &request).await;
        // The command announces itself once it is the terminal's foreground job.
        term.send_input("sh -c 'echo running-$((2*2)); exec sleep 30'\n").await.expect("input");
        term.expect("running-4", WAIT).await.expect("sleep started");
        term.signal("SIGINT").await.expect("signal");
        term.send_input("echo after-$?\n").await.expect("input");
        term.expect("after-130", WAIT).await.expect("sleep was interrupted by SIGINT");
    }
}

#[tokio::test]
async fn the_exit_code_is_reported_and_kept() {
    let server = common::start();
    let client = server.client();
    let (id, mut term, _) = open(&client, &sh()).await;
    term.send_input("exit 7\n").await.expect("input");
    let end = exited(&mut term).await;
    assert_eq!((end.session_id.as_deref(), end.exit_code, end.signal), (Some(id.as_str()), Some(7), None));
    assert!(term.recv().await.expect("recv").is_none());
    let info = client.pty_get(&id).await.expect("an exited session stays until closed");
    assert_eq!((info.alive, info.exit_code, info.attached), (false, Some(7), 0));

    // Attaching later replays the history and reports the exit again.
    let mut again = client.pty_connect(&server_url(&server, &id)).await.expect("re-attach");
    assert!(again.recv().await.expect("recv").expect("started").is_event("started"));
    again.expect("exit 7", WAIT).await.expect("history replayed");
    assert_eq!(exited(&mut again).await.exit_code, Some(7));
}

fn server_url(server: &common::TestServer, id: &str) -> String {
    abx_client::pty_url(&server.pty_base(), id)
}

#[tokio::test]
async fn a_session_outlives_a_dropped_connection_and_replays_its_scrollback() {
    let server = common::start();
    let client = server.client();
    let (id, mut term, _) = open(&client, &sh()).await;
    term.send_input("echo first-$((1+1))\n").await.expect("input");
    term.expect("first-2", WAIT).await.expect("output");
    // Output produced while nobody is attached is kept too: the shell writes
    // it once the test says go (after the connection is gone), then leaves a mark.
    let (go, mark) = (server.base.join("go"), server.base.join("written"));
    let command = format!(
        "while [ ! -e {} ]; do sleep 0.01; done; echo later-$((4*4)); touch {}\n",
        go.display(),
        mark.display()
    );
    term.send_input(&command).await.expect("input");
    term.expect("sleep 0.01", WAIT).await.expect("the command was read");
    drop(term);
    let deadline = std::time::Instant::now() + WAIT;
    while client.pty_get(&id).await.expect("info").attached > 0 {
        assert!(std::time::Instant::now() < deadline, "the dropped connection is still attached");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    std::fs::write(&go, b"").expect("go");
    while !mark.exists() {
        assert!(std::time::Instant::now() < deadline, "the shell never wrote its output");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    let mut back = client.pty_connect(&server_url(&server, &id)).await.expect("re-attach");
    let started = back.recv().await.expect("recv").expect("started");
    assert!(started.is_event("started"));
    let replay = back.expect("later-16", WAIT).await.expect("what happened meanwhile");
    assert!(replay.contains("first-2"), "the scrollback is replayed: {replay:?}");
    back.send_input("echo still-$((5*5))\n").await.expect("input");
    back.expect("still-25", WAIT).await.expect("the same shell goes on");
    assert!(client.pty_get(&id).await.expect("info").alive);
}

#[tokio::test]
async fn two_connections_see_the_same_output() {
    let server = common::start();
    let client = server.client();
    let (id, mut first, _) = open(&client, &sh()).await;
    let mut second = client.pty_connect(&server_url(&server, &id)).await.expect("second");
    assert!(second.recv().await.expect("recv").expect("started").is_event("started"));
    second.send_input("echo both-$((3*3))\n").await.expect("input");
    first.expect("both-9", WAIT).await.expect("first sees it");
    second.expect("both-9", WAIT).await.expect("second sees it");
    assert_eq!(client.pty_get(&id).await.expect("info").attached, 2);
}

#[tokio::test]
async fn multibyte_output_is_never_split() {
    let server = common::start();
    let client = server.client();
    let (_, mut term, _) = open(&client, &sh()).await;
    term.send_input("i=0; while [ $i -lt 3000 ]; do printf '€€€€€€€€€€'; i=$((i+1)); done; echo; echo done-$((7*7))\n")
        .await
        .expect("input");
    let text = term.expect("done-49", WAIT).await.expect("output");
    assert!(!text.contains('\u{FFFD}'), "a character was split");
    assert_eq!(text.matches('€').count(), 30_000 + 10, "every euro sign arrived (10 in the echoed command)");
}

#[tokio::test]
async fn create_checks_shell_env_and_size_as_the_reference() {
    let server = common::start();
    let http = server.http();
    let post =
        |body: Value| http.post(server.at("/pty/sessions")).header("authorization", server.bearer()).json(&body).send();
    let answer = |r: reqwest::Response| async move { (r.status().as_u16(), r.json::<Value>().await.expect("json")) };
    assert_eq!(
        answer(post(json!({"shell": "/bin/fish"})).await.expect("post")).await,
        (
            400,
            json!({"error": "Shell '/bin/fish' is not allowed; permitted: ['/bin/bash', '/bin/sh', '/bin/zsh', '/usr/bin/bash', '/usr/bin/zsh']", "type": "ValueError"})
        )
    );
    assert_eq!(
        answer(post(json!({"cols": "wide"})).await.expect("post")).await,
        (400, json!({"error": "Invalid 'cols' or 'rows': must be integers", "type": "ValueError"}))
    );
    assert_eq!(
        answer(post(json!({"env": {"ABX_X": "1"}})).await.expect("post")).await,
        (
            403,
            json!({"error": "Environment variable 'ABX_X' cannot be overwritten", "type": "PolicyDenied",
                   "code": "env_var_denied", "endpoint": "pty_create_session"})
        )
    );
    let (status, body) = answer(post(json!({"cols": 0})).await.expect("post")).await;
    assert_eq!((status, body["error"].as_str()), (400, Some("'cols' and 'rows' must be between 1 and 1000")));

    let client = server.client();
    let env = BTreeMap::from([("MY_VAR".to_string(), "mine".to_string()), ("LD_PRELOAD".into(), "/x.so".into())]);
    let (_, mut term, _) = open(&client, &PtyCreateRequest { env: Some(env), ..sh() }).await;
    term.send_input("echo \"v=$MY_VAR p=${LD_PRELOAD:-none} t=${ABX_SERVER_TOKEN:-none} term=$TERM\"\n")
        .await
        .expect("input");
    term.expect("v=mine p=none t=none term=xterm-256color", WAIT).await.expect("the shell's environment");
    term.send_input("pwd\n").await.expect("input");
    let base = server.base.canonicalize().expect("base");
    term.expect(&base.display().to_string(), WAIT).await.expect("the shell starts in the base directory");
}

#[tokio::test]
async fn max_sessions_counts_live_shells() {
    let server = common::server().args(["--pty-max-sessions", "1"]).start();
    let client = server.client();
    let (first, mut term, _) = open(&client, &sh()).await;
    let refused = server
        .http()
        .post(server.at("/pty/sessions"))
        .header("authorization", server.bearer())
        .json(&json!({"shell": "/bin/sh"}))
        .send()
        .await
        .expect("post");
    assert_eq!(refused.status().as_u16(), 429);
    assert_eq!(
        refused.json::<Value>().await.expect("json"),
        json!({"error": "Session limit reached (1)", "type": "RuntimeError", "code": "session_limit", "endpoint": "pty_create_session"})
    );
    term.send_input("exit 0\n").await.expect("input");
    exited(&mut term).await;
    let (second, _, _) = open(&client, &sh()).await;
    assert_ne!(first, second, "an exited shell frees its slot");
}

#[tokio::test]
async fn the_websocket_handshake_refuses_with_http_statuses() {
    let server = common::start();
    let client = server.client();
    let created = client.pty_create(&sh()).await.expect("create");
    let anonymous = Client::builder(&server.url).build().expect("client");
    let err = anonymous.pty_connect(&created.ws_url).await.expect_err("no token");
    assert_eq!((err.status(), err.code()), (Some(401), Some(&ErrorCode::Unauthorized)));
    let wrong = Client::builder(&server.url).token(Some("wrong")).build().expect("client");
    assert_eq!(wrong.pty_connect(&created.ws_url).await.expect_err("wrong token").status(), Some(401));
    // An unknown session: accepted, then closed with a reason, as the reference (its client reports it closed).
    let mut unknown = client.pty_connect(&server_url(&server, "nope")).await.expect("accepted");
    assert!(unknown.recv().await.expect("closed cleanly").is_none());
    let mut request = server_url(&server, "nope").into_client_request().expect("request");
    request.headers_mut().insert("authorization", server.bearer().parse().expect("header"));
    let (mut raw, _) = tokio_tungstenite::connect_async(request).await.expect("accepted");
    match raw.next().await {
        Some(Ok(Message::Close(Some(frame)))) => {
            assert_eq!((u16::from(frame.code), frame.reason.as_str()), (1008, "Unknown session: nope"));
        }
        other => panic!("expected a close frame, got {other:?}"),
    }

    let token_in_query = format!("{}&token={}", created.ws_url, common::TOKEN);
    let mut term = anonymous.pty_connect(&token_in_query).await.expect("?token= stands for the header");
    assert!(term.recv().await.expect("recv").expect("started").is_event("started"));

    let plain = server.http().get(format!("{}/pty", server.pty_base().replacen("ws://", "http://", 1)));
    let response = plain.header("authorization", server.bearer()).send().await.expect("get");
    assert_eq!(response.status().as_u16(), 400, "no session_id");
    let plain = server.http().get(created.ws_url.replacen("ws://", "http://", 1));
    let response = plain.header("authorization", server.bearer()).send().await.expect("get");
    assert_eq!(response.status().as_u16(), 426, "not a WebSocket upgrade");
    let doc = client.capabilities().await.expect("capabilities");
    assert!(doc.endpoints["pty_connect"].allowed, "the PTY WebSocket is served");
}

#[tokio::test]
async fn bad_messages_get_an_error_event_and_the_session_goes_on() {
    let server = common::start();
    let client = server.client();
    let (_, mut term, _) = open(&client, &sh()).await;
    term.signal("SIGUSR1").await.expect("send");
    let error = loop {
        let m = term.recv().await.expect("recv").expect("message");
        if m.is_event("error") {
            break m;
        }
    };
    assert!(error.message.as_deref().is_some_and(|m| m.contains("unknown signal 'SIGUSR1'")), "{error:?}");
    term.send_input("echo ok-$((1+2))\n").await.expect("input");
    term.expect("ok-3", WAIT).await.expect("still usable");
}

#[tokio::test]
async fn idle_sessions_are_reaped_but_attached_ones_are_not() {
    let server = common::server().args(["--pty-idle-timeout-seconds", "0.5"]).start();
    let client = server.client();
    let (attached, mut term, _) = open(&client, &sh()).await;
    let idle = client.pty_create(&sh()).await.expect("idle session").session_id;
    let deadline = Instant::now() + WAIT;
    while client.pty_list().await.expect("list").iter().any(|s| s.id == idle) {
        assert!(Instant::now() < deadline, "the idle session was never reaped");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The attached session is older than the reaped one, so it was idle longer: still there.
    assert!(client.pty_get(&attached).await.expect("attached session").alive);
    term.send_input("echo alive-$((8*8))\n").await.expect("input");
    term.expect("alive-64", WAIT).await.expect("still working");
}

#[tokio::test]
async fn shutdown_ends_every_terminal_shell() {
    let mut server = common::start();
    let client = server.client();
    let (_, _term, started) = open(&client, &sh()).await;
    let pid = started.pid.expect("pid");
    let status = server.signal_and_wait(nix::sys::signal::Signal::SIGTERM, Duration::from_secs(15));
    assert!(matches!(status, Some(nix::sys::wait::WaitStatus::Exited(_, 0))), "{status:?}");
    let deadline = Instant::now() + WAIT;
    while !process_gone(pid) {
        assert!(Instant::now() < deadline, "shell {pid} survived the server");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn abx_shell_forwards_input_and_propagates_the_exit_code() {
    let server = common::start();
    let mut child = Command::new(common::abx())
        .args(["--url", &server.url, "--token", common::TOKEN, "shell", "--shell", "/bin/sh"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("abx");
    child.stdin.take().expect("stdin").write_all(b"echo hi-$((2+3))\nexit 3\n").expect("write");
    let output = child.wait_with_output().expect("abx ran");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains("hi-5"), "{stdout}");
    assert_eq!(output.status.code(), Some(3), "stderr: {}", String::from_utf8_lossy(&output.stderr));
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let left = rt.block_on(server.client().pty_list()).expect("list");
    assert!(left.is_empty(), "abx closes the session it created: {left:?}");
}

/// Reads `output` until its text holds `marker`; the text and the last `offset` given.
async fn read_to(connection: &mut PtyConnection, marker: &str) -> (String, u64, Vec<PtyMessage>) {
    let wait = async {
        let (mut text, mut offset, mut events) = (String::new(), 0, Vec::new());
        while !text.contains(marker) {
            match connection.recv().await.expect("recv").expect("open") {
                m if m.kind == "output" => {
                    text.push_str(m.data.as_deref().unwrap_or_default());
                    offset = m.offset.expect("every output carries its offset");
                }
                m => events.push(m),
            }
        }
        (text, offset, events)
    };
    tokio::time::timeout(WAIT, wait).await.expect("the marker in time")
}

/// Waits until no connection is attached to `id`.
async fn detached(client: &Client, id: &str) {
    let deadline = Instant::now() + WAIT;
    while client.pty_get(id).await.expect("info").attached > 0 {
        assert!(Instant::now() < deadline, "the dropped connection is still attached");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn a_reconnect_resumes_at_its_offset_and_learns_exactly_what_the_scrollback_lost() {
    let server = common::start();
    let client = server.client();
    let (id, mut term, _) = open(&client, &sh()).await;
    term.send_input("echo one-$((1+1))\n").await.expect("input");
    let (first, offset, _) = read_to(&mut term, "one-2").await;
    // Written while nobody is attached, once the test says go.
    let (go, mark) = (server.base.join("go"), server.base.join("written"));
    let command =
        format!("while [ ! -e {} ]; do sleep 0.01; done; echo two-$((2*2)); touch {}\n", go.display(), mark.display());
    term.send_input(&command).await.expect("input");
    let (echoed, offset_after_echo, _) = read_to(&mut term, "sleep 0.01").await;
    drop(term);
    detached(&client, &id).await;
    std::fs::write(&go, b"").expect("go");
    let deadline = Instant::now() + WAIT;
    while !mark.exists() {
        assert!(Instant::now() < deadline, "the shell never wrote its output");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    // From the offset of "one-2": the echo of the command and what came meanwhile, nothing twice.
    let url = format!("{}&offset={offset}", server_url(&server, &id));
    let mut back = client.pty_connect(&url).await.expect("resume");
    assert!(back.recv().await.expect("recv").expect("started").is_event("started"));
    let (rest, _, events) = read_to(&mut back, "two-4").await;
    assert!(events.is_empty(), "nothing lost: {events:?}");
    assert!(!rest.contains("one-2"), "nothing before the offset again: {rest:?}");
    assert!(rest.starts_with(&echoed), "every byte after the offset, in order: {rest:?} vs {echoed:?}");
    assert!(offset_after_echo > offset);
    // The whole history, read from 0, is the two halves.
    let mut whole = client.pty_connect(&format!("{}&offset=0", server_url(&server, &id))).await.expect("from 0");
    assert!(whole.recv().await.expect("recv").expect("started").is_event("started"));
    let (all, _, _) = read_to(&mut whole, "two-4").await;
    // Up to the marker: what follows it (the prompt) may come in the same message or the next.
    let upto = |text: &str| text[..text.find("two-4").expect("marker") + "two-4".len()].to_string();
    assert_eq!(upto(&all), format!("{first}{}", upto(&rest)), "resumed exactly where the first connection stopped");
    drop((back, whole));
    detached(&client, &id).await;

    // 200 KB while away, more than the 64 KiB scrollback: a resume from the
    // old offset is told exactly how many bytes it lost, then gets the rest.
    let mut term = client.pty_connect(&server_url(&server, &id)).await.expect("attach");
    assert!(term.recv().await.expect("recv").expect("started").is_event("started"));
    let (go, mark) = (server.base.join("go2"), server.base.join("written2"));
    let command = format!(
        "while [ ! -e {} ]; do sleep 0.01; done; seq 100000 120000 >/dev/tty; echo three-$((3*3)); touch {}\n",
        go.display(),
        mark.display()
    );
    term.send_input(&command).await.expect("input");
    let (_, resume_at, _) = read_to(&mut term, "sleep 0.01").await;
    drop(term);
    detached(&client, &id).await;
    std::fs::write(&go, b"").expect("go");
    while !mark.exists() {
        assert!(Instant::now() < deadline + WAIT, "the shell never wrote its output");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let url = format!("{}&offset={resume_at}", server_url(&server, &id));
    let mut late = client.pty_connect(&url).await.expect("resume");
    assert!(late.recv().await.expect("recv").expect("started").is_event("started"));
    let (text, end, events) = read_to(&mut late, "three-9").await;
    let skipped: Vec<u64> = events.iter().filter(|m| m.is_event("skipped")).filter_map(|m| m.bytes).collect();
    assert_eq!(skipped.len(), 1, "one explicit gap: {events:?}");
    assert_eq!(resume_at + skipped[0] + text.len() as u64, end, "what it lost plus what it got is everything");
    assert!(!text.contains("100000\r\n"), "the head is gone, and said so");

    // An offset past the output is bad input, before the upgrade.
    let url = format!("{}&offset={}", server_url(&server, &id), end + 1_000_000);
    let err = client.pty_connect(&url).await.expect_err("from the future");
    assert_eq!(err.status(), Some(400), "{err}");
}
