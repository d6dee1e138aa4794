//! Issue 31, items 7 and 8: an agents environment creates no directory
//! outside the path rules, its files are refused on every component that
//! steers the next turn (`sub/.git/hooks/x`, `.npmrc`), and artifact
//! snapshots open reported files through descriptors beneath the workspace
//! and refuse multiply-linked files.

#![allow(clippy::disallowed_methods)] // tests drive the binary from outside; no reaper here

mod common;

use std::path::Path;

use base64::Engine;
use serde_json::{json, Value};

use common::agents::{call, command_session, create as create_session, script, wait_idle, Reply};

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// A server whose base dir is `base` (its own, not the temp dir), agents state in `state`.
fn start(base: &Path, state: &Path) -> common::TestServer {
    common::server()
        .base_dir(base)
        .env("ABX_SERVER_ENABLED_GROUPS", "agents")
        .env("ABX_AGENTS_STATE_DIR", state.to_str().expect("utf-8"))
        .start()
}

async fn create(server: &common::TestServer, environment: Value) -> Reply {
    call(server, "POST", "/v1/agents/environments", Some(json!({"environment": environment}))).await
}

/// The policy's refusal: its JSON error, 403, naming the endpoint.
fn assert_policy_refusal(reply: &Reply, code: &str) {
    assert_eq!(reply.status, 403, "{}", reply.body);
    let text = reply.body.to_string();
    assert!(text.contains(code), "{text}");
    assert!(text.contains("agents_environments_create"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_environment_creates_no_directory_outside_the_path_rules() {
    let base = tempfile::tempdir().expect("base");
    let outside = tempfile::tempdir().expect("outside");
    let state = base.path().join("state");
    let server = start(base.path(), &state);

    // Outside the roots, with or without files: refused, nothing created.
    let far = outside.path().join("deep/ws");
    let reply = create(&server, json!({"workspace_directory": far.to_str()})).await;
    assert_policy_refusal(&reply, "path_not_allowed");
    let reply = create(
        &server,
        json!({"workspace_directory": far.to_str(),
               "files": [{"type": "inline", "path": "/workspace/a.txt", "data": b64(b"a")}]}),
    )
    .await;
    assert_policy_refusal(&reply, "path_not_allowed");
    assert!(!outside.path().join("deep").exists(), "no directory was made outside the roots");

    // Inside the daemon's own state (inside the root here): refused by the built-in deny.
    let inside_state = state.join("sessions/mine");
    let reply = create(&server, json!({"workspace_directory": inside_state.to_str()})).await;
    assert_policy_refusal(&reply, "path_denied");
    assert!(!inside_state.exists());

    // Inside the roots: created.
    let ws = base.path().join("made/here");
    let reply = create(&server, json!({"workspace_directory": ws.to_str()})).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert!(ws.is_dir());
    let listed = call(&server, "GET", "/v1/agents/environments", None).await;
    assert_eq!(listed.body["data"].as_array().map(Vec::len), Some(1), "only the admitted one was stored");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn environment_files_are_refused_on_every_component() {
    let base = tempfile::tempdir().expect("base");
    let state = base.path().join("state");
    let server = start(base.path(), &state);
    let ws = base.path().join("ws");
    let reply = create(&server, json!({"workspace_directory": ws.to_str()})).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let env_id = reply.body["id"].as_str().expect("id").to_string();
    let files_at = format!("/v1/agents/environments/{env_id}/files");

    for path in [
        "/workspace/sub/.git/hooks/pre-commit",
        "/workspace/.npmrc",
        "/workspace/pkg/.npmrc",
        "/workspace/a/.Codex/config.toml",
    ] {
        let file = json!({"type": "inline", "path": path, "data": b64(b"#!/bin/sh\necho owned\n")});
        let reply = call(&server, "POST", &files_at, Some(file.clone())).await;
        assert_eq!(reply.status, 400, "{path}: {}", reply.body);
        assert_eq!(reply.body["error"]["code"], "agents.path_refused", "{path}: {}", reply.body);
        let at_create =
            create(&server, json!({"workspace_directory": base.path().join("ws2").to_str(), "files": [file]})).await;
        assert_eq!(at_create.status, 400, "{path}: {}", at_create.body);
        assert_eq!(at_create.body["error"]["code"], "agents.path_refused", "{path}: {}", at_create.body);
    }
    assert!(
        !ws.join("sub").exists() && !ws.join(".npmrc").exists() && !ws.join("pkg").exists() && !ws.join("a").exists()
    );
    assert!(!base.path().join("ws2").exists(), "a refused environment creates nothing");

    // A symlink inside the workspace does not lead a write elsewhere in the root.
    std::fs::create_dir(base.path().join("elsewhere")).expect("dir");
    std::os::unix::fs::symlink(base.path().join("elsewhere"), ws.join("link")).expect("symlink");
    let file = json!({"type": "inline", "path": "/workspace/link/x.txt", "data": b64(b"x")});
    let reply = call(&server, "POST", &files_at, Some(file)).await;
    assert_eq!(
        (reply.status, reply.body["error"]["code"].as_str()),
        (400, Some("agents.path_refused")),
        "{}",
        reply.body
    );
    assert!(!base.path().join("elsewhere/x.txt").exists());

    // Ordinary names, nested, are written.
    let file = json!({"type": "inline", "path": "/workspace/src/git/hooks.txt", "data": b64(b"fine")});
    let reply = call(&server, "POST", &files_at, Some(file)).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(std::fs::read(ws.join("src/git/hooks.txt")).expect("written"), b"fine");
}

/// Reports three written files: an ordinary one, a hard link to a file
/// outside the workspace, and one reached through a symlinked directory.
const REPORTER: &str = r#"cat > /dev/null
printf 'mine' > ok.txt
ln "$SECRET_FILE" hard.txt
ln -s "$OUTSIDE_DIR" out
for p in ok.txt hard.txt out/leak.txt; do
  echo "{\"type\":\"tool_start\",\"item_id\":\"$p\",\"kind\":\"file_change\",\"name\":\"file_change\",\"arguments\":{\"changes\":[{\"path\":\"$p\",\"kind\":\"add\"}]}}"
  echo "{\"type\":\"tool_end\",\"item_id\":\"$p\",\"ok\":true,\"output\":\"add\"}"
done
echo '{"type":"message","item_id":"m","text":"done"}'"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn artifacts_refuse_hard_links_and_symlinked_directories() {
    let state = tempfile::tempdir().expect("state");
    let scripts = tempfile::tempdir().expect("scripts");
    let work = tempfile::tempdir().expect("work");
    let outside = tempfile::tempdir().expect("outside");
    let secret = outside.path().join("secret.txt");
    std::fs::write(&secret, "another owner's secret").expect("secret");
    std::fs::write(outside.path().join("leak.txt"), "outside the workspace").expect("leak");
    let server = common::agents::agents_server(state.path())
        .env("SECRET_FILE", secret.to_str().expect("utf-8"))
        .env("OUTSIDE_DIR", outside.path().to_str().expect("utf-8"))
        .env("ABX_AGENTS_PASSTHROUGH_ENV", "SECRET_FILE,OUTSIDE_DIR")
        .start();
    let agent = script(scripts.path(), "reporter.sh", REPORTER);
    let sid = create_session(&server, command_session(&agent, work.path(), Some("write"))).await;
    wait_idle(&server, &sid).await;
    assert!(work.path().join("hard.txt").exists(), "the script ran");
    let listed = call(&server, "GET", &format!("/v1/agents/sessions/{sid}/artifacts"), None).await;
    let paths: Vec<String> = listed.body["data"]
        .as_array()
        .expect("data")
        .iter()
        .map(|a| a["path"].as_str().unwrap_or_default().rsplit('/').next().unwrap_or_default().to_string())
        .collect();
    assert_eq!(paths, ["ok.txt"], "{}", listed.body);
    for (path, text) in texts_under(state.path()) {
        assert!(!text.contains("another owner's secret") && !text.contains("outside the workspace"), "{path:?}");
    }
}

/// Every file under `dir`, with its text.
fn texts_under(dir: &Path) -> Vec<(std::path::PathBuf, String)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else {
                out.push((
                    path.clone(),
                    String::from_utf8_lossy(&std::fs::read(&path).unwrap_or_default()).into_owned(),
                ));
            }
        }
    }
    out
}

/// An environment file never lands outside the path rules through a symlink
/// planted in the workspace: a final component naming a file outside, a
/// dangling one naming a missing file outside, and a directory leading
/// outside are each refused by the path guard (the policy's 403), and
/// nothing outside is created or changed; the listing shows none of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn environment_files_do_not_escape_through_symlinks_in_the_workspace() {
    let base = tempfile::tempdir().expect("base");
    let outside = tempfile::tempdir().expect("outside");
    let state = base.path().join("state");
    let server = start(base.path(), &state);
    let ws = base.path().join("ws");
    let reply = create(&server, json!({"workspace_directory": ws.to_str()})).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let env_id = reply.body["id"].as_str().expect("id").to_string();
    let files_at = format!("/v1/agents/environments/{env_id}/files");

    let secret = outside.path().join("secret.txt");
    std::fs::write(&secret, b"untouched").expect("secret");
    std::os::unix::fs::symlink(&secret, ws.join("notes.txt")).expect("file symlink");
    std::os::unix::fs::symlink(outside.path().join("new.txt"), ws.join("dangling.txt")).expect("dangling symlink");
    std::os::unix::fs::symlink(outside.path(), ws.join("out")).expect("directory symlink");

    for path in ["/workspace/notes.txt", "/workspace/dangling.txt", "/workspace/out/x.txt", "/workspace/out/d/y.txt"] {
        let file = json!({"type": "inline", "path": path, "data": b64(b"owned")});
        let reply = call(&server, "POST", &files_at, Some(file)).await;
        assert_eq!(
            (reply.status, reply.body["code"].as_str()),
            (403, Some("path_not_allowed")),
            "{path}: {}",
            reply.body
        );
    }
    assert_eq!(std::fs::read(&secret).expect("secret"), b"untouched");
    let mut outside_now: Vec<String> = std::fs::read_dir(outside.path())
        .expect("outside")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    outside_now.sort();
    assert_eq!(outside_now, ["secret.txt"], "nothing was made outside the workspace");

    let listed = call(&server, "GET", &files_at, None).await;
    assert_eq!(listed.status, 200, "{}", listed.body);
    assert_eq!(listed.body["data"].as_array().map(Vec::len), Some(0), "{}", listed.body);
}
