//! The companion client's own behaviour against the real binary: one
//! connection pool, timeouts and deadlines, retries only where safe, typed
//! error codes, and the envd calls.

#![allow(clippy::disallowed_methods)] // tests drive the binary from outside; no reaper here

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use abx_client::{Client, ClientError, RetryPolicy};
use abx_wire::api::code::CodeRunRequest;
use abx_wire::api::envd::http::InitRequest;
use abx_wire::api::process::{ExecRequest, ShellEvent};
use abx_wire::api::ErrorCode;
use futures_util::StreamExt;
use tokio::net::{TcpListener, TcpStream};

/// A TCP relay to `target` on `listener` that counts the connections it accepts.
fn relay(listener: TcpListener, target: String) -> Arc<AtomicUsize> {
    let accepted = Arc::new(AtomicUsize::new(0));
    let count = accepted.clone();
    tokio::spawn(async move {
        while let Ok((mut inbound, _)) = listener.accept().await {
            count.fetch_add(1, Ordering::SeqCst);
            let target = target.clone();
            tokio::spawn(async move {
                if let Ok(mut outbound) = TcpStream::connect(target).await {
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                }
            });
        }
    });
    accepted
}

fn authority(url: &str) -> String {
    url.trim_start_matches("http://").to_string()
}

#[tokio::test]
async fn one_pool_serves_every_call_of_a_client_and_its_clones() {
    let server = common::start();
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    let accepted = relay(listener, authority(&server.url));
    let client = Client::builder(&url).token(server.token.clone()).build().expect("client");
    client.upload("pooled.txt", "pooled".into()).await.expect("upload");
    let quick = client.with_timeout(Duration::from_secs(5));
    for _ in 0..5 {
        assert!(client.health().await.expect("health"));
        assert!(quick.exists("pooled.txt").await.expect("stat"));
        assert_eq!(client.clone().read_text("pooled.txt").await.expect("read"), "pooled");
    }
    assert_eq!(accepted.load(Ordering::SeqCst), 1, "16 calls of a client and its clones use one connection");
}

#[tokio::test]
async fn a_call_over_its_timeout_fails_and_the_deadline_ends_streams() {
    let server = common::start();
    let client = server.client();
    let started = Instant::now();
    let err = client.with_timeout(Duration::from_millis(300)).shell(&ExecRequest::new("sleep 5")).await;
    let err = err.expect_err("over its timeout");
    assert!(matches!(err, ClientError::Timeout(t) if t == Duration::from_millis(300)), "{err:?}");
    assert!(err.is_timeout());
    assert!(started.elapsed() < Duration::from_secs(3), "{:?}", started.elapsed());

    let step = client.with_deadline(Instant::now() + Duration::from_millis(800));
    let mut events = step.shell_stream(&ExecRequest::new("sh -c 'echo first; sleep 5'")).await.expect("stream");
    assert_eq!(events.next().await.map(|e| e.ok()), Some(Some(ShellEvent::Stdout { data: "first".into() })));
    let ended = events.next().await.expect("an item").expect_err("the deadline");
    assert!(matches!(ended, ClientError::Timeout(_)), "{ended:?}");
    assert!(events.next().await.is_none(), "the stream ends at the deadline");
    let late = step.health().await.expect_err("after the deadline");
    assert!(matches!(late, ClientError::Timeout(_)), "every call of the handle is over: {late:?}");
    assert!(client.health().await.expect("health"), "the client itself has no deadline");
}

#[tokio::test]
async fn calls_shed_for_load_are_retried_after_the_servers_hint() {
    let policy = tempfile::tempdir().expect("tempdir");
    let path = policy.path().join("policy.json");
    std::fs::write(&path, r#"{"endpoints": {"shell_stream": {"limits": {"max_concurrency": 1}}}}"#).expect("policy");
    let server = common::server().args(["--policy".to_string(), path.display().to_string()]).start();
    let client = server.client();
    let mut holding = client.shell_stream(&ExecRequest::new("sh -c 'echo started; sleep 0.6'")).await.expect("held");
    assert_eq!(holding.next().await.map(|e| e.ok()), Some(Some(ShellEvent::Stdout { data: "started".into() })));

    let once = client.with_retry(RetryPolicy::NEVER);
    let shed = once.shell_stream(&ExecRequest::new("echo again")).await.err().expect("the slot is taken");
    assert_eq!((shed.status(), shed.code()), (Some(429), Some(&ErrorCode::ConcurrencyLimited)));
    assert_eq!(shed.retry_after(), Some(Duration::from_secs(1)));

    let started = Instant::now();
    let retried = client.shell_stream(&ExecRequest::new("echo again")).await.expect("retried after the hint");
    let events: Vec<_> = retried.collect().await;
    assert!(started.elapsed() >= Duration::from_secs(1), "waited for retry_after: {:?}", started.elapsed());
    assert_eq!(events.first().map(|e| e.as_ref().ok()), Some(Some(&ShellEvent::Stdout { data: "again".into() })));
    drop(holding);
}

#[tokio::test]
async fn a_refused_connection_is_retried_for_any_call() {
    let server = common::start();
    let port = std::net::TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port();
    let url = format!("http://127.0.0.1:{port}");
    // The server's port opens a moment after the first attempt, as when a sandbox is still booting.
    let target = authority(&server.url);
    let opened = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        relay(TcpListener::bind(("127.0.0.1", port)).await.expect("rebind"), target)
    });
    let patient = RetryPolicy::new(8, Duration::from_millis(200), Duration::from_millis(400));
    let client = Client::builder(&url).token(server.token.clone()).retry(patient).build().expect("client");
    let started = Instant::now();
    let run = client.shell(&ExecRequest::new("echo booted")).await.expect("retried until the port opened");
    assert_eq!(run.stdout, "booted\n");
    assert!(started.elapsed() >= Duration::from_millis(300));
    assert_eq!(opened.await.expect("relay").load(Ordering::SeqCst), 1, "ran once");

    let never = Client::builder("http://127.0.0.1:9").retry(RetryPolicy::NEVER).build().expect("client");
    let err = never.health().await.expect_err("nothing listens");
    assert!(matches!(&err, ClientError::Transport(e) if e.is_connect()), "{err:?}");
    assert!(err.is_retryable());
}

#[tokio::test]
async fn error_answers_are_typed_by_the_servers_codes() {
    let server = common::start();
    let client = server.client();
    let denied = client.stat("/etc/passwd").await.expect_err("outside the base dir");
    assert_eq!((denied.status(), denied.code()), (Some(403), Some(&ErrorCode::PathNotAllowed)));
    assert!(denied.code().is_some_and(ErrorCode::is_policy_denial));
    let missing = client.read_text("missing.txt").await.expect_err("missing");
    assert!(missing.is_not_found() && missing.code().is_none(), "{missing:?}");
    let snippet = CodeRunRequest { code: "1".into(), language: "python".into(), timeout: None };
    let disabled = client.run_once(&snippet).await.expect_err("dev_tools is opt-in");
    assert!(matches!(&disabled, ClientError::Api { status: 404, code: Some(ErrorCode::EndpointDisabled), body }
        if body.rule.is_some()));
    assert!(!disabled.is_not_found());
    let none = client.upload_status("nothing.bin").await.expect_err("no upload");
    assert_eq!(none.code(), Some(&ErrorCode::UploadNotFound));
    let stranger = Client::builder(&server.url).token(Some("wrong")).build().expect("client");
    assert_eq!(stranger.health().await.ok(), Some(true), "health is anonymous");
    let refused = stranger.processes().await.expect_err("wrong token");
    assert_eq!((refused.status(), refused.code()), (Some(401), Some(&ErrorCode::Unauthorized)));
}

#[tokio::test]
async fn envd_calls_set_up_a_sandbox() {
    let server = common::start();
    let envd = server.client().envd(&common::envd::envd(&server));
    assert!(envd.health().await.expect("health"));
    let init = InitRequest {
        env_vars: Some([("JOB_ID".to_string(), "42".to_string())].into()),
        access_token: Some("envd-token-3b1".into()),
        ..Default::default()
    };
    envd.init(&init).await.expect("init");
    let with_init_token = envd.with_access_token("envd-token-3b1").expect("token");
    assert_eq!(with_init_token.envs().await.expect("envs").get("JOB_ID").map(String::as_str), Some("42"));
    assert!(envd.metrics().await.expect("metrics").cpu_count >= 1, "the API token still works");
    let wrong = envd.with_access_token("wrong").expect("token");
    assert_eq!(wrong.envs().await.expect_err("wrong token").status(), Some(401));
}
