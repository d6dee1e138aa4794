//! The `abx` companion CLI, driven as a user would.

// Tests are separate processes without the daemon's reaper: waiting on their own children is fine.
#![allow(clippy::disallowed_methods)]

mod common;

use std::process::{Command, Output};

fn abx(server: &common::TestServer, args: &[&str]) -> Output {
    Command::new(common::abx())
        .args(args)
        .env("ABX_SERVER_URL", &server.url)
        .env("ABX_SERVER_TOKEN", server.token.as_deref().unwrap_or_default())
        .output()
        .expect("run abx")
}

#[test]
fn health_and_capabilities() {
    let server = common::start();
    let out = abx(&server, &["health"]);
    assert!(out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "ok");
    let out = abx(&server, &["capabilities"]);
    assert!(out.status.success());
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(doc["identity"]["id"], "server");
}

#[test]
fn check_exits_3_when_denied() {
    let server = common::start();
    let out = abx(&server, &["check", "code_run"]);
    assert_eq!(out.status.code(), Some(3));
    let decision: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(decision["code"], "endpoint_disabled");
}

#[test]
fn errors_print_one_line_and_fail() {
    let server = common::start();
    let out = Command::new(common::abx())
        .args(["capabilities", "--token", "wrong", "--url", &server.url])
        .env_remove("ABX_SERVER_TOKEN")
        .output()
        .expect("run abx");
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("unauthorized (HTTP 401, unauthorized)"), "{stderr}");
}

#[test]
fn an_unreachable_server_fails_health() {
    let out = Command::new(common::abx()).args(["health", "--url", "http://127.0.0.1:9"]).output().expect("run abx");
    assert_eq!(out.status.code(), Some(1));
}

#[test]
fn server_healthcheck_verb_reports_health_by_exit_code() {
    let server = common::start();
    let port = server.url.rsplit(':').next().expect("port").to_string();
    let check = |port: &str| {
        Command::new(env!("CARGO_BIN_EXE_agent-sandbox-server"))
            .args(["healthcheck", "--port", port, "--timeout", "2"])
            .status()
            .expect("run healthcheck")
            .code()
    };
    assert_eq!(check(&port), Some(0));
    assert_eq!(check("9"), Some(1));
}
