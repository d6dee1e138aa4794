//! Regression tests of the red-team findings on secrets and environments
//! (issue 21), against the real binary:
//!
//! - Children read every token from `/proc/<daemon>/environ` (defect 2),
//!   and token files keep tokens out of the environment altogether.
//! - `allow_commands` stepped around with a per-call `LD_PRELOAD`, on every
//!   way a caller sets a child's environment (defect 4).

#![allow(clippy::disallowed_methods)] // tests drive the binary from outside; no reaper here

mod common;

use std::path::Path;

use serde_json::{json, Value};

use common::envd::{call, envd, Frames};

fn policy_file(dir: &Path, policy: &Value) -> String {
    let path = dir.join("policy.json");
    std::fs::write(&path, policy.to_string()).expect("policy");
    path.display().to_string()
}

async fn post(server: &common::TestServer, path: &str, token: &str, body: Value) -> (u16, Value) {
    let response =
        reqwest::Client::new().post(server.at(path)).bearer_auth(token).json(&body).send().await.expect("post");
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

/// Defect 2: a process started by an identity holding only `process:run`
/// read `ABX_SERVER_TOKEN` and every policy token (one of them with scope
/// `*`) from `/proc/<daemon>/environ`. Here the daemon and its children run
/// as `nobody`, so nothing but the daemon's own setting stands in the way.
#[tokio::test]
async fn children_cannot_read_the_daemon_s_environment() {
    let setpriv = Path::new("/usr/bin/setpriv");
    if !nix::unistd::Uid::effective().is_root() || !setpriv.exists() {
        eprintln!("skipped: needs root and setpriv to run the daemon as nobody");
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::set_permissions(dir.path(), std::os::unix::fs::PermissionsExt::from_mode(0o755)).expect("chmod");
    let base = dir.path().join("base");
    std::fs::create_dir(&base).expect("base");
    std::os::unix::fs::chown(&base, Some(65534), Some(65534)).expect("chown");
    let policy = json!({"auth": {"tokens": [
        {"id": "admin", "scopes": ["*"], "token_env": "ABX_TEST_ADMIN"},
        {"id": "runner", "scopes": ["process:run"], "token_env": "ABX_TEST_RUNNER"},
    ]}});
    let server = common::server()
        .token(Some("server-secret-77d0"))
        .launcher(["/usr/bin/setpriv", "--reuid", "nobody", "--regid", "nogroup", "--clear-groups"])
        .base_dir(&base)
        .env("ABX_TEST_ADMIN", "admin-secret-51b7")
        .env("ABX_TEST_RUNNER", "runner-secret-0c2e")
        .args(["--policy", &policy_file(dir.path(), &policy)])
        .start();
    let command = format!("cat /proc/{}/environ", server.pid());
    let (status, result) = post(&server, "/shell", "runner-secret-0c2e", json!({"command": command})).await;
    assert_eq!(status, 200, "{result}");
    let stdout = result["stdout"].as_str().unwrap_or_default();
    for secret in ["server-secret-77d0", "admin-secret-51b7", "runner-secret-0c2e"] {
        assert!(!stdout.contains(secret), "{secret} leaked to a child");
    }
    assert!(result["stderr"].as_str().is_some_and(|e| e.contains("Permission denied")), "{result}");
    // The daemon still reads its own /proc/self: descriptor checks of file operations work.
    let (status, made) = post(&server, "/files/mkdir", "admin-secret-51b7", json!({"path": "d/e"})).await;
    assert_eq!(status, 200, "{made}");
    let (status, moved) =
        post(&server, "/files/move", "admin-secret-51b7", json!({"source": "d", "destination": "f"})).await;
    assert_eq!(status, 200, "{moved}");
    assert!(base.join("f/e").is_dir());
}

/// Tokens can come from files, so they need not sit in any environment:
/// `ABX_SERVER_TOKEN_FILE`, and `<token_env>_FILE` for policy tokens.
#[tokio::test]
async fn tokens_can_come_from_files() {
    let dir = tempfile::tempdir().expect("tempdir");
    let token_file = dir.path().join("server-token");
    std::fs::write(&token_file, "from-a-file-93aa\n").expect("token file");
    let server = common::server().token(None).env("ABX_SERVER_TOKEN_FILE", &token_file.display().to_string()).start();
    let client = reqwest::Client::new();
    let health = |token: &str| client.get(server.at("/env")).bearer_auth(token.to_string()).send();
    assert_eq!(health("from-a-file-93aa").await.expect("get").status().as_u16(), 200);
    assert_eq!(health("wrong-token").await.expect("get").status().as_u16(), 401);
    let environ = std::fs::read(format!("/proc/{}/environ", server.pid())).unwrap_or_default();
    assert!(!String::from_utf8_lossy(&environ).contains("from-a-file-93aa"));
    let (status, env) = post(&server, "/shell", "from-a-file-93aa", json!({"command": "env"})).await;
    assert_eq!(status, 200);
    assert!(!env["stdout"].as_str().unwrap_or_default().contains("ABX_SERVER_TOKEN_FILE"), "not passed on");

    let policy_token = dir.path().join("runner-token");
    std::fs::write(&policy_token, "runner-from-file").expect("token file");
    let policy = json!({"auth": {"tokens": [{"id": "runner", "scopes": ["*"], "token_env": "ABX_TEST_RUNNER"}]}});
    let server = common::server()
        .token(None)
        .env("ABX_TEST_RUNNER_FILE", &policy_token.display().to_string())
        .args(["--policy", &policy_file(dir.path(), &policy)])
        .start();
    let (status, env) = post(&server, "/shell", "runner-from-file", json!({"command": "env"})).await;
    assert_eq!(status, 200, "{env}");
    assert!(!env["stdout"].as_str().unwrap_or_default().contains("ABX_TEST_RUNNER_FILE"));

    // Both forms at once are ambiguous: the server refuses to start.
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_agent-sandbox-server"))
        .args(["check-config"])
        .env("ABX_SERVER_TOKEN", "a")
        .env("ABX_SERVER_TOKEN_FILE", &token_file)
        .output()
        .expect("check-config");
    assert!(!output.status.success());
    let said = String::from_utf8_lossy(&output.stdout).to_string() + &String::from_utf8_lossy(&output.stderr);
    assert!(said.contains("both ABX_SERVER_TOKEN and ABX_SERVER_TOKEN_FILE are set"), "{said}");
}

/// A server whose exec endpoints allow only `ls` and `env`.
fn restricted() -> (tempfile::TempDir, common::TestServer) {
    let dir = tempfile::tempdir().expect("tempdir");
    let only = json!({"params": {"allow_commands": ["ls ...", "env"]}});
    let policy = json!({"endpoints": {"shell": only, "shell_stream": only, "process_start": only}});
    let server = common::server().args(["--policy", &policy_file(dir.path(), &policy)]).start();
    (dir, server)
}

const PRELOAD: &str = "/nonexistent/evil.so";

/// Defect 4: with `allow_commands`, a per-call `LD_PRELOAD` made the
/// dynamic loader load a library of the caller's before `ls` ran; the same
/// through `/shell/stream`, `/process/start`, `POST /env`, terminals, envd
/// `Start` and `/init`, and code executions.
#[tokio::test]
async fn dangerous_variables_are_refused_on_every_port_under_command_rules() {
    let (_dir, server) = restricted();
    let token = common::TOKEN;
    let preload = json!({"LD_PRELOAD": PRELOAD});
    let denied = |(status, body): (u16, Value), what: &str| {
        assert_eq!((status, body["code"].as_str()), (403, Some("env_var_denied")), "{what}: {body}");
    };
    denied(post(&server, "/shell", token, json!({"command": "ls", "env": preload})).await, "/shell");
    denied(post(&server, "/shell/stream", token, json!({"command": "ls", "env": preload})).await, "/shell/stream");
    denied(post(&server, "/process/start", token, json!({"command": "ls", "env": preload})).await, "/process/start");
    let path = json!({"PATH": server.base.display().to_string()});
    denied(post(&server, "/shell", token, json!({"command": "ls", "env": path})).await, "PATH lookup");
    denied(post(&server, "/env", token, json!({"vars": {"PYTHONPATH": "/tmp"}})).await, "POST /env");
    let terminal = json!({"shell": "/bin/sh", "env": {"BASH_ENV": "/tmp/x"}});
    denied(post(&server, "/pty/sessions", token, terminal).await, "terminals");

    let start = json!({"process": {"cmd": "ls", "envs": preload}});
    let (status, _, mut frames) =
        Frames::open(&server, "process.Process/Start", start, &[("x-access-token", token)]).await;
    let (flags, end) = frames.next().await.expect("an end frame");
    assert_eq!((status, flags, end["error"]["code"].as_str()), (200, 2, Some("permission_denied")), "{end}");
    let init = reqwest::Client::new()
        .post(format!("{}/init", envd(&server)))
        .header("x-access-token", token)
        .json(&json!({"envVars": {"NODE_OPTIONS": "--require /tmp/x.js"}}))
        .send()
        .await
        .expect("init");
    assert_eq!(init.status().as_u16(), 403);
    let code = server.listeners.iter().find(|(name, _)| name == "code").map(|(_, url)| url.clone()).expect("code");
    let execute = reqwest::Client::new()
        .post(format!("{code}/execute"))
        .bearer_auth(token)
        .json(&json!({"code": "1", "env_vars": preload}))
        .send()
        .await
        .expect("execute");
    assert_eq!(execute.status().as_u16(), 403);

    // Ordinary variables and allowed commands still work.
    let (status, result) = post(&server, "/shell", token, json!({"command": "env", "env": {"MINE": "1"}})).await;
    assert_eq!(status, 200, "{result}");
    assert!(result["stdout"].as_str().is_some_and(|out| out.contains("MINE=1")));
    let (status, _) = call(&server, "filesystem.Filesystem/Stat", json!({"path": "."}), Some(token)).await;
    assert_eq!(status, 200);
}

/// Without command rules nothing is stepped around, and the reference's
/// behaviour stays: the variable reaches the child.
#[tokio::test]
async fn without_command_rules_the_environment_is_the_caller_s() {
    let server = common::start();
    let (status, result) =
        post(&server, "/shell", common::TOKEN, json!({"command": "ls", "env": {"LD_PRELOAD": PRELOAD}})).await;
    assert_eq!(status, 200, "{result}");
    assert!(result["stderr"].as_str().is_some_and(|e| e.contains("LD_PRELOAD")), "the loader read it: {result}");
}

/// Issue 31, item 3: every child runs as the daemon's user, so one
/// identity's processes can read another's (an agent CLI's vault tokens
/// from `/proc/<pid>/environ`). `check-config` says so when two identities
/// may start programs, and stays quiet when only one may.
#[test]
fn check_config_warns_when_identities_share_the_children_s_user() {
    let dir = tempfile::tempdir().expect("tempdir");
    let warnings = |tokens: Value| {
        let policy = policy_file(dir.path(), &json!({"auth": {"tokens": tokens}}));
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_agent-sandbox-server"))
            .args(["check-config", "--json", "--enabled-groups", "agents", "--policy", &policy])
            .env("T_ALICE", "alice-secret-1")
            .env("T_BOB", "bob-secret-2")
            .env("T_READER", "reader-secret-3")
            .output()
            .expect("check-config");
        let doc: Value = serde_json::from_slice(&output.stdout).expect("json");
        let all: Vec<String> = doc["warnings"]
            .as_array()
            .expect("warnings")
            .iter()
            .filter_map(|w| w.as_str().map(str::to_string))
            .collect();
        all.into_iter().filter(|w| w.contains("may each start programs")).collect::<Vec<_>>()
    };
    let alice = json!({"id": "alice", "scopes": ["agents:use"], "token_env": "T_ALICE"});
    let bob = json!({"id": "bob", "scopes": ["process:run"], "token_env": "T_BOB"});
    let reader = json!({"id": "reader", "scopes": ["files:read"], "token_env": "T_READER"});
    let shared = warnings(json!([alice, bob, reader]));
    assert_eq!(shared.len(), 1, "{shared:?}");
    assert!(shared[0].starts_with("identities alice, bob may each start programs"), "{shared:?}");
    assert!(shared[0].contains("identities that share one sandbox"), "it points at the threat model");
    assert_eq!(warnings(json!([alice, reader])), Vec::<String>::new(), "one identity runs programs");
}
