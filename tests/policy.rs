//! Black-box tests of policies: files, presets and environment sources,
//! identities and scopes, denials and their bodies, rate and concurrency
//! limits under parallel load, audit lines, and `check-config`.

#![allow(clippy::disallowed_methods)] // tests drive the binary from outside; no reaper here

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

/// The token of the `admin` identity of [`main_policy`], read from `ADMIN_ENV`.
const ADMIN: &str = "admin-token-41c9";
const ADMIN_ENV: &str = "ABX_TEST_ADMIN_TOKEN";
/// The token whose SHA-256 the `reader` identity of [`main_policy`] holds.
const READER: &str = "reader-token";

/// Tokens from `auth.tokens`: an admin (token from the environment) and a
/// reader (token by digest); the terminal group off; file endpoints read-only
/// and denied `*.pem`.
fn main_policy() -> Value {
    json!({
        "description": "black-box test policy",
        "auth": {"tokens": [
            {"id": "admin", "scopes": ["*"], "token_env": ADMIN_ENV},
            {"id": "reader", "scopes": ["files:read", "system:read"],
             "token_sha256": "ba5005a40cf5212e4ac0190104cc127edab013294bb71279a975b27a80982d45"},
        ]},
        "groups": {"terminal": false},
        "endpoints": {"files_*": {"paths": {"deny": ["*.pem"], "read_only": true}}},
    })
}

/// Writes `policy` to a file in a fresh directory.
fn policy_file(policy: &Value) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("policy.json");
    std::fs::write(&path, policy.to_string()).expect("write policy");
    (dir, path)
}

/// A server with `policy` from a file and no server token.
fn with_policy(policy: &Value) -> (tempfile::TempDir, common::TestServer) {
    let (dir, path) = policy_file(policy);
    let server = common::server().token(None).env(ADMIN_ENV, ADMIN).args(["--policy".into(), path_arg(&path)]).start();
    (dir, server)
}

fn path_arg(path: &Path) -> String {
    path.display().to_string()
}

async fn call(
    server: &common::TestServer,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<Value>,
) -> (u16, Value) {
    let method = reqwest::Method::from_bytes(method.as_bytes()).expect("method");
    let mut request = server.http().request(method, server.at(path));
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await.expect("request");
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

async fn check(server: &common::TestServer, token: Option<&str>, body: Value) -> Value {
    let (status, decision) = call(server, "POST", "/capabilities/check", token, Some(body)).await;
    assert_eq!(status, 200, "{decision}");
    decision
}

#[tokio::test]
async fn policy_identities_scopes_and_discovery() {
    let (_dir, server) = with_policy(&main_policy());
    let (status, doc) = call(&server, "GET", "/capabilities", Some(READER), None).await;
    assert_eq!(status, 200);
    assert_eq!(doc["identity"], json!({"id": "reader", "scopes": ["files:read", "system:read"]}));
    // The reference computes the same revision for the same document.
    assert_eq!(doc["policy"], json!({"preset": "default", "revision": "36b33fc98d756166", "configured": true}));
    assert_eq!(doc["warnings"], json!([]));
    let stat = &doc["endpoints"]["files_stat"];
    if served(&server, "/files/stat?path=x").await {
        let paths = json!({"allow": [], "read_only": true, "deny_count": 1, "symlinks": "within"});
        assert_eq!((stat["allowed"].as_bool(), &stat["paths"]), (Some(true), &paths));
    } else {
        assert_eq!((stat["enabled"].as_bool(), stat["reason"].as_str()), (Some(true), Some("not_implemented")));
    }
    assert_eq!(
        (doc["endpoints"]["shell"]["allowed"].as_bool(), doc["endpoints"]["shell"]["reason"].as_str()),
        (Some(false), Some("missing_scope"))
    );
    let pty = &doc["endpoints"]["pty_create_session"];
    assert_eq!((pty["enabled"].as_bool(), pty["rule"].as_str()), (Some(false), Some("policy:groups.terminal")));

    let (status, doc) = call(&server, "GET", "/capabilities", Some(ADMIN), None).await;
    assert_eq!((status, &doc["identity"]["id"]), (200, &json!("admin")));
    assert_eq!(doc["warnings"], json!(["identity holds the wildcard scope '*'"]));

    let unauthorized = json!({"error": "unauthorized", "type": "AuthError", "code": "unauthorized"});
    assert_eq!(call(&server, "GET", "/capabilities", None, None).await, (401, unauthorized.clone()));
    assert_eq!(call(&server, "GET", "/capabilities", Some("reader-token-x"), None).await, (401, unauthorized));

    let (status, body) = call(&server, "POST", "/files/mkdir", Some(READER), Some(json!({"path": "d"}))).await;
    assert_eq!(status, 403);
    assert_eq!(
        body,
        json!({"error": "Identity 'reader' lacks scope 'files:write' required by endpoint 'files_mkdir'",
               "type": "PolicyDenied", "code": "missing_scope", "endpoint": "files_mkdir", "scope": "files:write", "identity": "reader"})
    );
    let (status, body) = call(&server, "GET", "/pty/sessions", Some(ADMIN), None).await;
    assert_eq!(status, 404);
    assert_eq!(
        (body["code"].as_str(), body["rule"].as_str()),
        (Some("endpoint_disabled"), Some("policy:groups.terminal"))
    );
    assert_eq!(body["error"], "Endpoint 'pty_list_sessions' is disabled by rule policy:groups.terminal");
}

#[tokio::test]
async fn policy_tokens_replace_the_server_token() {
    let (_dir, path) = policy_file(&main_policy());
    let server = common::server().env(ADMIN_ENV, ADMIN).args(["--policy".into(), path_arg(&path)]).start();
    assert_eq!(call(&server, "GET", "/capabilities", Some(common::TOKEN), None).await.0, 401);
    assert_eq!(call(&server, "GET", "/capabilities", Some(ADMIN), None).await.0, 200);
}

/// Whether this build serves the endpoint at `path` (not 501), so that
/// discovery and check report its path rules rather than `not_implemented`.
async fn served(server: &common::TestServer, path: &str) -> bool {
    let response = server.http().get(server.at(path)).bearer_auth(ADMIN).send().await.expect("request");
    response.status() != 501
}

/// The decision `check-config --explain` prints for `policy` and its exit code.
fn explain(policy: &Path, args: &[&str]) -> (Option<i32>, Value) {
    let (code, out, err) = check_config(&[&["--policy", &path_arg(policy), "--explain"], args].concat());
    (code, serde_json::from_str(&out).unwrap_or_else(|_| panic!("JSON decision: {out}{err}")))
}

#[test]
fn path_rules_are_decided_per_operation() {
    let (dir, path) = policy_file(&main_policy());
    let base = path_arg(dir.path());
    let decide = |endpoint: &str, raw: &str, op: Option<&str>| {
        let mut args = vec![endpoint, "--path", raw, "--base-dir", &base];
        if let Some(op) = op {
            args.extend(["--op", op]);
        }
        explain(&path, &args)
    };
    assert_eq!(decide("files_stat", "notes.txt", None).0, Some(0));
    for (endpoint, raw, op, code) in [
        ("files_stat", "keys/server.pem", None, "path_denied"),
        ("files_stat", "/etc/passwd", None, "path_not_allowed"),
        ("files_stat", "../outside", None, "path_not_allowed"),
        ("files_stat", "/proc/self/environ", None, "path_not_allowed"),
        ("files_mkdir", "new", None, "read_only"),
        ("files_delete", "old", None, "read_only"),
        ("files_stat", "f", Some("write"), "read_only"),
        ("files_stat", "f", Some("delete"), "read_only"),
    ] {
        let (exit, decision) = decide(endpoint, raw, op);
        assert_eq!((exit, decision["code"].as_str()), (Some(3), Some(code)), "{endpoint} {raw} {op:?}");
    }
    assert_eq!(decide("files_stat", "f", Some("exec")).0, Some(0), "read_only refuses writes and deletes only");
    assert_eq!(decide("files_stat", "f", Some("read")).0, Some(0));
    let (exit, decision) = explain(&path, &["files_mkdir", "--path", "x", "--scopes", "files:read"]);
    assert_eq!((exit, decision["code"].as_str()), (Some(3), Some("missing_scope")), "scopes are decided before paths");
}

#[tokio::test]
async fn check_answers_path_rules_once_the_endpoint_is_served() {
    let (_dir, server) = with_policy(&main_policy());
    let decision = check(&server, Some(ADMIN), json!({"endpoint": "files_stat", "path": "k.pem"})).await;
    if served(&server, "/files/stat?path=x").await {
        assert_eq!(decision["code"], "path_denied");
        let ok = check(&server, Some(ADMIN), json!({"endpoint": "files_stat", "path": "k.txt"})).await;
        assert_eq!(ok["allowed"], true);
    } else {
        assert_eq!(decision["code"], "not_implemented");
    }
    let denied = check(&server, Some(READER), json!({"endpoint": "files_mkdir", "path": "x"})).await;
    assert_eq!(denied["code"], "missing_scope", "scopes are decided before anything else");
}

#[tokio::test]
async fn presets_come_from_the_flag_and_the_environment_in_the_reference_order() {
    let preset_of = |server: common::TestServer| async move {
        let (_, doc) = call(&server, "GET", "/capabilities", server.token.as_deref(), None).await;
        doc["policy"]["preset"].as_str().map(str::to_string)
    };
    let locked = common::server().args(["--preset", "locked"]).start();
    let (status, body) = call(&locked, "GET", "/files/stat?path=x", locked.token.as_deref(), None).await;
    assert_eq!((status, body["rule"].as_str()), (404, Some("preset:locked:endpoints.*")));
    let (status, _) = call(&locked, "GET", "/commands", locked.token.as_deref(), None).await;
    assert!(status == 200 || status == 501, "list_commands stays on (501 until it is implemented): {status}");
    assert_eq!(preset_of(locked).await.as_deref(), Some("locked"));

    let (_a, transfer) = policy_file(&json!({"preset": "transfer-only"}));
    let inline = r#"{"preset": "read-only"}"#;
    let server =
        common::server().env("ABX_SERVER_POLICY", inline).env("ABX_SERVER_POLICY_FILE", &path_arg(&transfer)).start();
    let (status, body) =
        call(&server, "POST", "/shell", server.token.as_deref(), Some(json!({"command": "true"}))).await;
    assert_eq!((status, body["rule"].as_str()), (404, Some("preset:read-only:groups.process")));
    assert_eq!(preset_of(server).await.as_deref(), Some("read-only"), "ABX_SERVER_POLICY beats ABX_SERVER_POLICY_FILE");

    let server = common::server().env("ABX_SERVER_POLICY_FILE", &path_arg(&transfer)).start();
    assert_eq!(preset_of(server).await.as_deref(), Some("transfer-only"));
    let server =
        common::server().env("ABX_SERVER_POLICY_FILE", &path_arg(&transfer)).args(["--preset", "hardened"]).start();
    assert_eq!(preset_of(server).await.as_deref(), Some("hardened"), "--preset beats ABX_SERVER_POLICY_FILE");
    let (_b, file) = policy_file(&json!({"preset": "locked", "groups": ["dev_tools"]}));
    let server =
        common::server().args(["--policy".into(), path_arg(&file), "--preset".into(), "transfer-only".into()]).start();
    let (_, doc) = call(&server, "GET", "/capabilities", server.token.as_deref(), None).await;
    assert_eq!(doc["policy"]["preset"], "transfer-only", "--preset replaces the file's preset");
    assert_eq!(doc["endpoints"]["files_upload_stream"]["enabled"], true);
}

fn serve_output(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_agent-sandbox-server"));
    command.args(["serve", "--host", "127.0.0.1", "--port", "0", "--pty-port", "0"]).args(args);
    for var in ["ABX_SERVER_POLICY", "ABX_SERVER_POLICY_FILE", "ABX_SERVER_PRESET", "ABX_SERVER_TOKEN"] {
        command.env_remove(var);
    }
    command.envs(env.iter().copied()).output().expect("run server")
}

#[test]
fn a_mistake_in_the_policy_stops_the_server_with_its_path() {
    let (_dir, path) = policy_file(&json!({"endpoints": {"files_lst": {"enabled": true}}}));
    let out = serve_output(&["--policy", &path_arg(&path)], &[]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("policy error: policy.endpoints.files_lst: unknown endpoint (did you mean 'files_list'?)"),
        "{stderr}"
    );

    let out = serve_output(&["--preset", "harden"], &[]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown preset 'harden' (did you mean 'hardened'?)"));
    let out =
        serve_output(&[], &[("ABX_SERVER_POLICY", r#"{"endpoints": {"shell": {"limits": {"timeout_seconds": 0}}}}"#)]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr)
        .contains("policy.endpoints.shell.limits.timeout_seconds: expected a positive number, got 0"));
    let out = serve_output(
        &[],
        &[(
            "ABX_SERVER_POLICY",
            r#"{"auth": {"tokens": [{"id": "a", "scopes": ["*"], "token_env": "ABX_TEST_NOT_SET"}]}}"#,
        )],
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("environment variable 'ABX_TEST_NOT_SET' is not set"));
    let yaml = path.with_extension("yaml");
    std::fs::write(&yaml, "preset: locked\n").expect("write");
    let out = serve_output(&["--policy", &path_arg(&yaml)], &[]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("YAML policy files are not supported"));
}

#[tokio::test]
async fn the_rate_limit_holds_under_parallel_load() {
    let (_dir, server) = with_policy(&json!({"endpoints": {"capabilities_check": {"limits": {"rate_per_minute": 5}}}}));
    let request =
        || server.http().post(server.at("/capabilities/check")).json(&json!({"endpoint": "files_stat"})).send();
    let responses = futures_util::future::join_all((0..20).map(|_| request())).await;
    let mut admitted = 0;
    for response in responses {
        let response = response.expect("response");
        match response.status().as_u16() {
            200 => admitted += 1,
            429 => {
                let retry: u64 = response.headers()["retry-after"].to_str().expect("ascii").parse().expect("seconds");
                let body: Value = response.json().await.expect("JSON");
                assert_eq!((body["code"].as_str(), body["type"].as_str()), (Some("rate_limited"), Some("RateLimited")));
                assert_eq!(body["retry_after"], json!(retry));
                assert!((1..=12).contains(&retry), "one token every 12 s: {retry}");
            }
            other => panic!("unexpected status {other}"),
        }
    }
    assert_eq!(admitted, 5, "a full bucket admits exactly its burst");
    let other = call(&server, "GET", "/capabilities", None, None).await;
    assert_eq!(other.0, 200, "the limit is per endpoint");
}

/// Starts `POST /capabilities/check` with `Expect: 100-continue` and returns once
/// the server asked for the body: the request has been admitted and holds its slot.
async fn hold_slot(server: &common::TestServer) -> BufReader<TcpStream> {
    let addr = server.url.trim_start_matches("http://");
    let mut stream = BufReader::new(TcpStream::connect(addr).await.expect("connect"));
    let body = r#"{"endpoint": "files_stat"}"#;
    let head = format!(
        "POST /capabilities/check HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\n\
         content-length: {}\r\nexpect: 100-continue\r\n\r\n",
        body.len()
    );
    stream.get_mut().write_all(head.as_bytes()).await.expect("send head");
    let mut line = String::new();
    stream.read_line(&mut line).await.expect("read");
    assert!(line.starts_with("HTTP/1.1 100"), "{line}");
    line.clear();
    stream.read_line(&mut line).await.expect("blank line");
    stream
}

async fn finish(mut held: BufReader<TcpStream>) -> String {
    held.get_mut().write_all(br#"{"endpoint": "files_stat"}"#).await.expect("send body");
    let mut response = vec![0u8; 4096];
    let n =
        tokio::time::timeout(Duration::from_secs(10), held.read(&mut response)).await.expect("answer").expect("read");
    String::from_utf8_lossy(&response[..n]).into_owned()
}

#[tokio::test]
async fn the_concurrency_limit_holds_under_parallel_load() {
    let (_dir, server) = with_policy(&json!({"endpoints": {"capabilities_check": {"limits": {"max_concurrency": 3}}}}));
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(hold_slot(&server).await);
    }
    let request =
        || server.http().post(server.at("/capabilities/check")).json(&json!({"endpoint": "files_stat"})).send();
    let refused = futures_util::future::join_all((0..10).map(|_| request())).await;
    for response in refused {
        let response = response.expect("response");
        assert_eq!(response.status(), 429);
        assert_eq!(response.headers()["retry-after"], "1");
        let body: Value = response.json().await.expect("JSON");
        assert_eq!(body["code"], "concurrency_limited");
    }
    let first = finish(held.remove(0)).await;
    assert!(first.starts_with("HTTP/1.1 200"), "{first}");
    let again = request().await.expect("response");
    assert_eq!(again.status(), 200, "a finished request frees its slot");
    for slot in held {
        assert!(finish(slot).await.starts_with("HTTP/1.1 200"));
    }
}

#[tokio::test]
async fn a_body_over_the_policy_limit_is_413_with_the_limit() {
    let (_dir, server) =
        with_policy(&json!({"endpoints": {"capabilities_check": {"limits": {"max_request_bytes": "1KB"}}}}));
    let long = "a".repeat(2000);
    let (status, body) =
        call(&server, "POST", "/capabilities/check", None, Some(json!({"endpoint": "files_stat", "path": long}))).await;
    assert_eq!(status, 413);
    assert_eq!((body["code"].as_str(), body["limit"].as_u64()), (Some("payload_too_large"), Some(1000)));
    assert_eq!(body["endpoint"], "capabilities_check");
    let (status, _) = call(&server, "POST", "/capabilities/check", None, Some(json!({"endpoint": "files_stat"}))).await;
    assert_eq!(status, 200);
}

#[tokio::test]
async fn audit_lines_follow_the_rule_mode_and_never_carry_tokens() {
    let policy = json!({
        "auth": main_policy()["auth"].clone(),
        "defaults": {"audit": "deny"},
        "endpoints": {"capabilities_check": {"audit": "all"}, "system_info": {"audit": "off"}},
    });
    let (_dir, server) = with_policy(&policy);
    check(&server, Some(READER), json!({"endpoint": "files_stat", "path": "a.txt"})).await;
    // The audit line itself: it follows the access line, and the log is written in the background.
    let log = server.wait_for_log(
        "audit: port=\"api\" endpoint=\"capabilities_check\" identity=\"reader\"",
        Duration::from_secs(5),
    );
    let allowed = log.lines().find(|l| l.contains(" audit:") && l.contains("capabilities_check")).expect("audit line");
    assert!(allowed.contains("decision=\"allow\"") && allowed.contains("status=200"), "{allowed}");
    assert_eq!(call(&server, "POST", "/files/mkdir", Some(READER), Some(json!({"path": "d"}))).await.0, 403);
    let log = server.wait_for_log("scope=\"files:write\"", Duration::from_secs(5));
    let denied = log.lines().find(|l| l.contains(" audit:") && l.contains("files_mkdir")).expect("denial line");
    for field in ["identity=\"reader\"", "decision=\"deny\"", "status=403", "code=\"missing_scope\""] {
        assert!(denied.contains(field), "{field} in {denied}");
    }
    assert_eq!(call(&server, "GET", "/capabilities", Some("wrong-token"), None).await.0, 401);
    server.wait_for_log("code=\"unauthorized\"", Duration::from_secs(5));
    assert_eq!(call(&server, "GET", "/system/info", Some("wrong-token"), None).await.0, 401);
    assert_eq!(call(&server, "GET", "/capabilities", Some(ADMIN), None).await.0, 200);
    // A call audited after the admin's: once its line is in, an admin line would be too.
    check(&server, Some(READER), json!({"endpoint": "files_stat", "path": "a.txt"})).await;
    let checks = |log: &str| log.lines().filter(|l| l.contains(" audit:") && l.contains("capabilities_check")).count();
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    let log = loop {
        let log = server.log();
        if checks(&log) == 2 {
            break log;
        }
        assert!(std::time::Instant::now() < deadline, "the second check was never audited:\n{log}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    let audit: Vec<&str> = log.lines().filter(|l| l.contains(" audit:")).collect();
    assert!(!audit.iter().any(|l| l.contains("system_info")), "audit off: {audit:?}");
    assert!(!audit.iter().any(|l| l.contains("identity=\"admin\"")), "allowed calls are not audited in deny mode");
    for secret in [ADMIN, READER, "wrong-token"] {
        assert!(!log.contains(secret), "{secret} leaked into the log");
    }
}

#[tokio::test]
async fn the_reference_documentation_example_works_unchanged() {
    // The example of the reference's policy module documentation.
    let example = json!({
        "preset": "transfer-only",
        "endpoints": {"files_download_stream": {"paths": {"allow": ["/home/user/out"]}}},
    });
    let (_dir, server) = with_policy(&example);
    let (_, doc) = call(&server, "GET", "/capabilities", None, None).await;
    assert_eq!(doc["policy"], json!({"preset": "transfer-only", "revision": "178a48687a2ad762", "configured": true}));
    let enabled: Vec<&str> = doc["endpoints"]
        .as_object()
        .expect("endpoints")
        .iter()
        .filter(|(_, e)| e["enabled"] == true)
        .map(|(id, _)| id.as_str())
        .collect();
    // The streaming extensions, and envd's /files, follow the rules of the transfer endpoints they extend.
    assert_eq!(
        enabled,
        [
            "capabilities",
            "capabilities_check",
            "code_health",
            "envd_files_read",
            "envd_files_write",
            "envd_health",
            "files_content_read",
            "files_content_write",
            "files_download_stream",
            "files_upload_cancel",
            "files_upload_status",
            "files_upload_stream",
            "health",
            // Core, as /capabilities: each of its tools follows its own endpoint's rule.
            "mcp",
            // Core, governed by /capabilities: the document of what the server can do.
            "openapi"
        ]
    );
    if served(&server, "/files/content?path=x").await {
        assert_eq!(doc["endpoints"]["files_content_read"]["paths"]["allow"], json!(["/home/user/out"]));
    }
    if served(&server, "/files/download-stream?path=x").await {
        assert_eq!(doc["endpoints"]["files_download_stream"]["paths"]["allow"], json!(["/home/user/out"]));
    }
    assert_eq!(doc["endpoints"]["envd_files_read"]["paths"]["allow"], json!(["/home/user/out"]));
    let (_file_dir, file) = policy_file(&example);
    let (exit, _) = explain(&file, &["files_download_stream", "--path", "/home/user/out/report.txt"]);
    assert_eq!(exit, Some(0));
    let (exit, outside) = explain(&file, &["files_download_stream", "--path", "/home/user/.bashrc"]);
    assert_eq!((exit, outside["code"].as_str()), (Some(3), Some("path_not_allowed")));
    let (exit, disabled) = explain(&file, &["files_stat"]);
    assert_eq!((exit, disabled["rule"].as_str()), (Some(3), Some("preset:transfer-only:endpoints.*")));
    let (status, body) = call(&server, "POST", "/shell", None, Some(json!({"command": "ls"}))).await;
    assert_eq!((status, body["rule"].as_str()), (404, Some("preset:transfer-only:endpoints.*")));
}

fn check_config(args: &[&str]) -> (Option<i32>, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_agent-sandbox-server"))
        .arg("check-config")
        .args(args)
        .env(ADMIN_ENV, ADMIN)
        .env_remove("ABX_SERVER_POLICY")
        .env_remove("ABX_SERVER_POLICY_FILE")
        .env_remove("ABX_SERVER_TOKEN")
        .output()
        .expect("run check-config");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn check_config_prints_the_table_lints_and_explains() {
    let (dir, path) = policy_file(&main_policy());
    let policy = path_arg(&path);
    let (code, out, _) = check_config(&["--policy", &policy, "--base-dir", &path_arg(dir.path())]);
    assert_eq!(code, Some(0));
    assert!(out.starts_with("policy preset=default revision=36b33fc98d756166 source=file "), "{out}");
    assert!(out.contains("[off] pty_create_session"), "{out}");
    assert!(out.contains("warning: L5: policy file"), "the test's own file is writable: {out}");
    let (code, out, _) = check_config(&["--policy", &policy, "--json", "--strict"]);
    assert_eq!(code, Some(2), "lint warnings with --strict");
    let doc: Value = serde_json::from_str(&out).expect("JSON");
    let shell = doc["endpoints"].as_array().expect("rows").iter().find(|r| r["endpoint"] == "files_stat").cloned();
    let shell = shell.expect("files_stat row");
    assert_eq!(shell["paths"], json!({"allow": [], "deny": ["*.pem"], "read_only": true, "symlinks": "within"}));
    assert!(doc["warnings"]
        .as_array()
        .expect("warnings")
        .iter()
        .any(|w| w.as_str().is_some_and(|w| w.starts_with("L1: identity 'admin'"))));

    let (code, out, _) =
        check_config(&["--policy", &policy, "--explain", "files_stat", "--path", "k.pem", "--scopes", "files:read"]);
    assert_eq!(code, Some(3));
    assert_eq!(serde_json::from_str::<Value>(&out).expect("JSON")["code"], "path_denied");
    let (code, _, _) =
        check_config(&["--policy", &policy, "--explain", "files_stat", "--path", "k.txt", "--op", "read"]);
    assert_eq!(code, Some(0));
    let (code, out, _) = check_config(&["--policy", &policy, "--explain", "files_move", "--scopes", "files:read"]);
    assert_eq!(
        (code, serde_json::from_str::<Value>(&out).expect("JSON")["code"].clone()),
        (Some(3), json!("missing_scope"))
    );

    let (_bad_dir, bad) = policy_file(&json!({"groups": {"core": false}}));
    let (code, _, err) = check_config(&["--policy", &path_arg(&bad)]);
    assert_eq!(code, Some(1));
    assert_eq!(err.trim(), "policy error: policy.groups.core: the core group cannot be disabled");
    let (code, out, _) = check_config(&["--preset", "locked", "--json", "--strict"]);
    assert_eq!(code, Some(0), "{out}");
}
