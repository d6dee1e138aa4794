//! Issue 31, item 2: the daemon's own state is refused on every port by a
//! built-in deny, even where it lies inside a root.
//!
//! The shipped layout: the base directory is `HOME`, and the agents state
//! directory is `HOME/.agent-sandbox/agents`, inside the file API's root. A
//! `files:read` identity must not read another identity's webhook secret or
//! environment values there (content, download, listing, search, archive,
//! envd's `GET /files` and `Stat`), and a `files:write` identity must not
//! rewrite them; nor may anyone read a token file inside the root.
//! `check-config` names the overlap.

#![allow(clippy::disallowed_methods)] // tests drive the binary from outside; no reaper here

mod common;

use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use common::envd::{call, envd};

const READER: &str = "reader-token-71c2";
const WRITER: &str = "writer-token-93ad";
const WEBHOOK_SECRET: &str = "whsec_daemon_state_never_served";
const ENV_VALUE: &str = "env-value-never-returned-4411";
const FILE_TOKEN: &str = "file-token-5d0e";

/// A home laid out as a sandbox's after the agents group has run.
fn shipped_home() -> (tempfile::TempDir, PathBuf, PathBuf) {
    let dir = tempfile::tempdir().expect("tempdir");
    let home = dir.path().canonicalize().expect("canonical").join("home");
    let state = home.join(".agent-sandbox/agents");
    std::fs::create_dir_all(state.join("resources")).expect("state dir");
    let webhook = json!({"id": "wh_1", "owner": "alice", "secret": WEBHOOK_SECRET});
    std::fs::write(state.join("webhooks.jsonl"), format!("{webhook}\n")).expect("webhooks");
    let env = json!({"id": "env_1", "owner": "alice", "variables": {"API_KEY": ENV_VALUE}});
    std::fs::write(state.join("resources/environments.jsonl"), format!("{env}\n")).expect("environments");
    std::fs::write(home.join("notes.txt"), "an ordinary file").expect("notes");
    std::fs::create_dir(home.join("tokens")).expect("tokens dir");
    std::fs::write(home.join("tokens/from-file"), FILE_TOKEN).expect("token file");
    (dir, home, state)
}

fn policy(home: &Path) -> String {
    let path = home.parent().expect("the home's parent").join("policy.json");
    let doc = json!({"version": 1, "auth": {"tokens": [
        {"id": "reader", "scopes": ["files:read"], "token_env": "ABX_TEST_READER"},
        {"id": "writer", "scopes": ["files:read", "files:write"], "token_env": "ABX_TEST_WRITER"},
        {"id": "from-file", "scopes": ["files:read"], "token_env": "ABX_TEST_FROM_FILE"},
    ]}});
    std::fs::write(&path, doc.to_string()).expect("policy");
    path.display().to_string()
}

fn start(home: &Path, policy: &str) -> common::TestServer {
    common::server()
        .token(None)
        .base_dir(home)
        .env("HOME", &home.display().to_string())
        .env("ABX_TEST_READER", READER)
        .env("ABX_TEST_WRITER", WRITER)
        .env("ABX_TEST_FROM_FILE_FILE", &home.join("tokens/from-file").display().to_string())
        .args(["--policy", policy, "--enabled-groups", "agents"])
        .start()
}

async fn get(server: &common::TestServer, path: &str, token: &str) -> (u16, String) {
    let response = server.http().get(server.at(path)).bearer_auth(token).send().await.expect("send");
    (response.status().as_u16(), response.text().await.expect("body"))
}

fn error_code(body: &str) -> String {
    let value: Value = serde_json::from_str(body).unwrap_or(Value::Null);
    let code = value.pointer("/error/code").or_else(|| value.get("code")).or_else(|| value.get("error"));
    code.and_then(Value::as_str).unwrap_or_default().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agents_state_inside_the_root_is_refused_on_every_port() {
    let (_dir, home, state) = shipped_home();
    let policy = policy(&home);
    let server = start(&home, &policy);
    let secret_files = [".agent-sandbox/agents/webhooks.jsonl", ".agent-sandbox/agents/resources/environments.jsonl"];

    // The ordinary file beside the state is served: the deny is the state's own.
    let (status, body) = get(&server, "/files/content?path=notes.txt", READER).await;
    assert_eq!((status, body.contains("an ordinary file")), (200, true), "{body}");

    for rel in secret_files {
        for (route, absolute) in [("content", false), ("download-stream", false), ("content", true)] {
            let path = if absolute { home.join(rel).display().to_string() } else { rel.to_string() };
            let (status, body) = get(&server, &format!("/files/{route}?path={path}"), READER).await;
            assert_eq!(status, 403, "{route} {path}: {body}");
            assert_eq!(error_code(&body), "path_denied", "{route} {path}: {body}");
            assert!(!body.contains(WEBHOOK_SECRET) && !body.contains(ENV_VALUE), "{body}");
        }
        let (status, body) = get(&server, &format!("/files/stat?path={rel}"), READER).await;
        assert_eq!((status, error_code(&body).as_str()), (403, "path_denied"), "{body}");
    }
    // A token file inside the root is the daemon's too; its token still works.
    let (status, body) = get(&server, "/files/content?path=tokens/from-file", FILE_TOKEN).await;
    assert_eq!((status, error_code(&body).as_str()), (403, "path_denied"), "{body}");
    for dir in [".agent-sandbox/agents", ".agent-sandbox/agents/resources"] {
        let (status, body) = get(&server, &format!("/files/list?path={dir}"), READER).await;
        assert_eq!((status, error_code(&body).as_str()), (403, "path_denied"), "list {dir}: {body}");
    }
    // A recursive listing of the home does not show what lies inside the state.
    let (status, body) = get(&server, "/files/list?path=.&recursive=true&max_depth=5", READER).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("notes.txt"), "{body}");
    assert!(!body.contains("webhooks.jsonl") && !body.contains("environments.jsonl"), "{body}");

    // Search by name and by content finds nothing there.
    for request in [
        json!({"path": ".", "pattern": "*.jsonl", "max_depth": 6}),
        json!({"path": ".", "pattern": "*", "content": "whsec_|env-value", "max_depth": 6}),
    ] {
        let response = server
            .http()
            .post(server.at("/files/search"))
            .bearer_auth(READER)
            .json(&request)
            .send()
            .await
            .expect("send");
        let status = response.status().as_u16();
        let body = response.text().await.expect("body");
        assert_eq!(status, 200, "{request}: {body}");
        assert!(!body.contains("jsonl") && !body.contains(WEBHOOK_SECRET) && !body.contains(ENV_VALUE), "{body}");
    }
    let response = server
        .http()
        .post(server.at("/files/search"))
        .bearer_auth(READER)
        .json(&json!({"path": ".agent-sandbox/agents", "pattern": "*"}))
        .send()
        .await
        .expect("send");
    assert_eq!(response.status().as_u16(), 403);

    // envd: `GET /files` and `Stat` refuse with its own shapes.
    for rel in secret_files {
        let response = reqwest::Client::new()
            .get(format!("{}/files", envd(&server)))
            .query(&[("path", home.join(rel).display().to_string())])
            .header("x-access-token", READER)
            .send()
            .await
            .expect("send");
        let status = response.status().as_u16();
        let body = response.text().await.expect("body");
        assert_eq!(status, 403, "envd GET /files {rel}: {body}");
        assert!(!body.contains(WEBHOOK_SECRET) && !body.contains(ENV_VALUE), "{body}");
        let path = home.join(rel).display().to_string();
        let (status, body) = call(&server, "filesystem.Filesystem/Stat", json!({"path": path}), Some(READER)).await;
        assert_eq!((status, body["code"].as_str()), (403, Some("permission_denied")), "envd Stat {rel}: {body}");
    }

    // MCP's `read` tool and `resources/read` refuse them as well.
    for message in [
        json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
               "params": {"name": "read", "arguments": {"path": secret_files[0]}}}),
        json!({"jsonrpc": "2.0", "id": 1, "method": "resources/read",
               "params": {"uri": format!("file://{}", home.join(secret_files[1]).display())}}),
    ] {
        let answer = mcp(&server, READER, &message).await;
        let text = answer.to_string();
        assert!(text.contains("path_denied"), "{text}");
        assert!(!text.contains(WEBHOOK_SECRET) && !text.contains(ENV_VALUE), "{text}");
    }

    // `files:write` cannot rewrite them, nor add a file beside them.
    let before = std::fs::read(state.join("webhooks.jsonl")).expect("read");
    for rel in [secret_files[0], ".agent-sandbox/agents/new.jsonl"] {
        let response = server
            .http()
            .put(server.at(&format!("/files/content?path={rel}")))
            .bearer_auth(WRITER)
            .body("{\"id\":\"wh_evil\",\"owner\":\"alice\",\"secret\":\"mine\"}\n")
            .send()
            .await
            .expect("send");
        let status = response.status().as_u16();
        let body = response.text().await.expect("body");
        assert_eq!((status, error_code(&body).as_str()), (403, "path_denied"), "write {rel}: {body}");
        let response = reqwest::Client::new()
            .post(format!("{}/files", envd(&server)))
            .query(&[("path", home.join(rel).display().to_string())])
            .header("x-access-token", WRITER)
            .header("content-type", "application/octet-stream")
            .body("x")
            .send()
            .await
            .expect("send");
        assert_eq!(response.status().as_u16(), 403, "envd write {rel}");
    }
    assert_eq!(std::fs::read(state.join("webhooks.jsonl")).expect("read"), before, "the state is unchanged");
    assert!(!state.join("new.jsonl").exists());
    let (status, _) = call(
        &server,
        "filesystem.Filesystem/MakeDir",
        json!({"path": home.join(".agent-sandbox/agents/x").display().to_string()}),
        Some(WRITER),
    )
    .await;
    assert_eq!(status, 403);
    assert!(!state.join("x").exists());
}

/// One MCP request in a fresh session: the answer to it.
async fn mcp(server: &common::TestServer, token: &str, message: &Value) -> Value {
    let http = reqwest::Client::new();
    let post = |body: String, session: Option<&str>| {
        let mut request = http
            .post(server.at("/mcp"))
            .bearer_auth(token)
            .header("accept", "application/json, text/event-stream")
            .header("content-type", "application/json")
            .header("mcp-protocol-version", "2025-06-18")
            .body(body);
        if let Some(id) = session {
            request = request.header("mcp-session-id", id);
        }
        request
    };
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": "2025-06-18",
                      "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}});
    let opened = post(init.to_string(), None).send().await.expect("initialize");
    let id = opened.headers()["mcp-session-id"].to_str().expect("session id").to_string();
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    post(initialized.to_string(), Some(&id)).send().await.expect("initialized");
    let text = post(message.to_string(), Some(&id)).send().await.expect("send").text().await.expect("body");
    let parsed = serde_json::from_str::<Value>(&text).ok().into_iter();
    let events =
        text.lines().filter_map(|l| l.strip_prefix("data:")).filter_map(|d| serde_json::from_str(d.trim()).ok());
    parsed.chain(events).find(|m: &Value| m["id"] == message["id"]).unwrap_or_else(|| panic!("no answer in {text}"))
}

#[test]
fn check_config_warns_when_the_state_lies_under_a_root() {
    let (_dir, home, _state) = shipped_home();
    let run = |groups: &str| {
        std::process::Command::new(env!("CARGO_BIN_EXE_agent-sandbox-server"))
            .args(["check-config", "--strict", "--base-dir"])
            .arg(&home)
            .args(["--enabled-groups", groups])
            .env("HOME", &home)
            .env_remove("ABX_SERVER_TOKEN")
            .env_remove("ABX_SERVER_POLICY")
            .env_remove("ABX_SERVER_POLICY_FILE")
            .env_remove("ABX_SERVER_PRESET")
            .env_remove("ABX_SERVER_CONFIG")
            .env_remove("ABX_AGENTS_STATE_DIR")
            .output()
            .expect("check-config")
    };
    let out = run("agents");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let state = home.join(".agent-sandbox/agents");
    assert!(stdout.contains(&format!("L10: the agents state directory '{}'", state.display())), "{stdout}");
    assert_eq!(out.status.code(), Some(2), "{stdout}");
    let elsewhere = tempfile::tempdir().expect("tempdir");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_agent-sandbox-server"))
        .args(["check-config", "--base-dir"])
        .arg(&home)
        .args(["--enabled-groups", "agents", "--agents-state-dir"])
        .arg(elsewhere.path())
        .env("HOME", &home)
        .env_remove("ABX_SERVER_TOKEN")
        .env_remove("ABX_SERVER_POLICY")
        .env_remove("ABX_SERVER_POLICY_FILE")
        .env_remove("ABX_SERVER_PRESET")
        .output()
        .expect("check-config");
    assert!(!String::from_utf8_lossy(&out.stdout).contains("L10"), "a state directory outside every root is fine");
}
