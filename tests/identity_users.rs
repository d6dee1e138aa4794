//! Issue 31, item 3: each policy identity's programs run as the user it
//! names (`auth.tokens[].user`), on every port, so one identity cannot read
//! another's secrets from `/proc/<pid>/environ`. Two identities here run as
//! the accounts `nobody` (65534) and `daemon` (1), which every Debian-like
//! system has; the tests need root to drop to them and say so when skipped.

#![allow(clippy::disallowed_methods)] // tests drive the binary from outside; no reaper here

mod common;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{json, Value};

use common::envd::Frames;
use common::TestServer;

const ALICE: &str = "alice-token-5b1e";
const BOB: &str = "bob-token-9c07";
const ALICE_UID: u32 = 65534;
const BOB_UID: u32 = 1;

/// Whether the tests can run: root, and both accounts exist.
fn runnable() -> bool {
    let present = |name| nix::unistd::User::from_name(name).ok().flatten().is_some();
    if !nix::unistd::Uid::effective().is_root() || !present("nobody") || !present("daemon") {
        eprintln!("skipped: needs root and the accounts 'nobody' and 'daemon'");
        return false;
    }
    true
}

/// A directory every user may enter (tempdirs are private to root).
fn open_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    dir
}

/// The policy of two identities, each with every scope and its own user.
fn policy(dir: &Path) -> String {
    let policy = json!({"auth": {"tokens": [
        {"id": "alice", "scopes": ["*"], "token_env": "ABX_TEST_ALICE", "user": "nobody"},
        {"id": "bob", "scopes": ["*"], "token_env": "ABX_TEST_BOB", "user": BOB_UID},
    ]}});
    let path = dir.join("policy.json");
    std::fs::write(&path, policy.to_string()).expect("policy");
    path.display().to_string()
}

/// A server under [`policy`], its base directory open to every user.
fn start(dir: &Path, extra: &[(&str, &str)]) -> TestServer {
    let base = dir.join("base");
    std::fs::create_dir_all(&base).expect("base");
    std::fs::set_permissions(&base, std::fs::Permissions::from_mode(0o777)).expect("chmod");
    let mut builder = common::server()
        .token(None)
        .base_dir(&base)
        // Programs under /root (pyenv's shims) are not the other users' to run.
        .env("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
        .env("ABX_TEST_ALICE", ALICE)
        .env("ABX_TEST_BOB", BOB)
        .args(["--policy", &policy(dir)]);
    for (k, v) in extra {
        builder = builder.env(k, v);
    }
    builder.start()
}

async fn post(server: &TestServer, url: &str, token: &str, body: Value) -> (u16, Value) {
    let response = reqwest::Client::new().post(url).bearer_auth(token).json(&body).send().await.expect("post");
    let status = response.status().as_u16();
    let text = response.text().await.expect("body");
    let _ = server;
    (status, serde_json::from_str(&text).unwrap_or(Value::String(text)))
}

async fn shell(server: &TestServer, token: &str, command: &str) -> Value {
    let body = json!({"command": command, "shell": true});
    let (status, result) = post(server, &server.at("/shell"), token, body).await;
    assert_eq!(status, 200, "{result}");
    result
}

/// The real uid of process `pid`, from `/proc` (the test runs as root).
fn uid_of(pid: u64) -> u32 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    let line = status.lines().find(|l| l.starts_with("Uid:")).expect("Uid line");
    line.split_whitespace().nth(1).expect("real uid").parse().expect("number")
}

/// Alice's long-running child holds a secret in its environment; Bob's
/// program cannot read it, Alice's can, and each identity's `id -u` is its
/// own user's. A request naming another user is refused.
#[tokio::test]
async fn one_identity_cannot_read_another_s_child_environment() {
    if !runnable() {
        return;
    }
    let dir = open_dir();
    let server = start(dir.path(), &[]);
    let body = json!({"command": "sleep 60", "env": {"ALICE_SECRET": "vault-token-4e2a"}});
    let (status, started) = post(&server, &server.at("/process/start"), ALICE, body).await;
    assert_eq!(status, 200, "{started}");
    let pid = started["pid"].as_u64().expect("pid");
    assert_eq!(uid_of(pid), ALICE_UID);

    let read = format!("cat /proc/{pid}/environ");
    let stolen = shell(&server, BOB, &read).await;
    assert_ne!(stolen["exit_code"], 0, "{stolen}");
    assert!(!stolen["stdout"].as_str().unwrap_or_default().contains("vault-token-4e2a"), "{stolen}");
    assert!(stolen["stderr"].as_str().is_some_and(|e| e.contains("Permission denied")), "{stolen}");
    let own = shell(&server, ALICE, &read).await;
    assert!(own["stdout"].as_str().is_some_and(|o| o.contains("ALICE_SECRET=vault-token-4e2a")), "{own}");

    for (token, uid) in [(ALICE, ALICE_UID), (BOB, BOB_UID)] {
        let id = shell(&server, token, "id -u; id -G; echo $HOME").await;
        let out = id["stdout"].as_str().unwrap_or_default().to_string();
        let mut lines = out.lines();
        assert_eq!(lines.next(), Some(uid.to_string().as_str()), "{id}");
        assert!(!lines.next().unwrap_or_default().split(' ').any(|g| g == "0"), "no root group: {id}");
        assert_ne!(lines.next(), Some("/root"), "HOME is the user's: {id}");
        let caps = shell(&server, token, "grep -E '^Cap(Eff|Prm)|^NoNewPrivs' /proc/self/status").await;
        let caps = caps["stdout"].as_str().unwrap_or_default().to_string();
        assert!(caps.contains("CapEff:\t0000000000000000") && caps.contains("NoNewPrivs:\t1"), "{caps}");
    }
    let (status, refused) = post(&server, &server.at("/shell"), BOB, json!({"command": "id -u", "user": "root"})).await;
    assert_eq!((status, refused["code"].as_str()), (403, Some("user_not_allowed")), "{refused}");
    let (status, streamed) = post(&server, &server.at("/shell/stream"), BOB, json!({"command": "id -u"})).await;
    assert_eq!(status, 200);
    let streamed = streamed.as_str().unwrap_or_default().replace(' ', "");
    assert!(streamed.contains(&format!("\"data\":\"{BOB_UID}\"")), "{streamed}");
}

/// Terminals, the code port (and its contexts, which another identity does
/// not see) and envd's `Start` run as the caller's user too; envd refuses
/// to act as another user.
#[tokio::test]
async fn terminals_code_contexts_and_envd_run_as_the_identity_s_user() {
    if !runnable() {
        return;
    }
    let dir = open_dir();
    let server = start(dir.path(), &[]);

    let (status, terminal) = post(&server, &server.at("/pty/sessions"), ALICE, json!({"shell": "/bin/sh"})).await;
    assert_eq!(status, 200, "{terminal}");
    assert_eq!(uid_of(terminal["pid"].as_u64().expect("pid")), ALICE_UID);

    let code = server.listeners.iter().find(|(n, _)| n == "code").map(|(_, u)| u.clone()).expect("code port");
    let execute = |token: &'static str, body: Value| {
        let url = format!("{code}/execute");
        async move {
            let response = reqwest::Client::new().post(url).bearer_auth(token).json(&body).send().await.expect("post");
            (response.status().as_u16(), response.text().await.expect("body"))
        }
    };
    let (status, lines) = execute(BOB, json!({"code": "import os; print(os.getuid())"})).await;
    assert_eq!(status, 200, "{lines}");
    assert!(lines.contains(&format!("\"text\":\"{BOB_UID}\\n\"")), "{lines}");
    let (status, context) = post(&server, &format!("{code}/contexts"), ALICE, json!({"language": "python"})).await;
    assert_eq!(status, 200, "{context}");
    let id = context["id"].as_str().expect("id").to_string();
    let (status, lines) = execute(ALICE, json!({"code": "import os; print(os.getuid())", "context_id": id})).await;
    assert!(status == 200 && lines.contains(&format!("\"text\":\"{ALICE_UID}\\n\"")), "{lines}");
    let (status, lines) = execute(BOB, json!({"code": "print(1)", "context_id": id})).await;
    assert_eq!(status, 404, "Bob does not reach Alice's interpreter: {lines}");

    let start = |token: &'static str, user: Option<&'static str>| {
        let body = json!({"process": {"cmd": "/bin/sh", "args": ["-c", "id -u"]}});
        let basic = user.map(|u| format!("Basic {}", base64_of(&format!("{u}:"))));
        let server = &server;
        async move {
            let mut headers = vec![("x-access-token", token)];
            if let Some(basic) = &basic {
                headers.push(("authorization", basic.as_str()));
            }
            let (status, _, mut frames) = Frames::open(server, "process.Process/Start", body, &headers).await;
            assert_eq!(status, 200);
            let mut out = String::new();
            while let Some((flags, message)) = frames.next().await {
                if flags == 2 {
                    return (out, message);
                }
                if let Some(data) = message["event"]["data"]["stdout"].as_str() {
                    out.push_str(&String::from_utf8_lossy(&base64_decode(data)));
                }
            }
            (out, Value::Null)
        }
    };
    assert_eq!(start(ALICE, None).await.0, format!("{ALICE_UID}\n"));
    assert_eq!(start(BOB, Some("daemon")).await.0, format!("{BOB_UID}\n"), "naming its own user is fine");
    let (out, end) = start(BOB, Some("root")).await;
    assert_eq!((out.as_str(), end["error"]["code"].as_str()), ("", Some("permission_denied")), "{end}");
}

/// An agent session's CLI (the `command` runtime) runs as its owner's user,
/// in a workspace the daemon created for it and gave to that user.
#[tokio::test]
async fn an_agent_session_runs_as_its_owner_s_user() {
    if !runnable() {
        return;
    }
    let dir = open_dir();
    let state = dir.path().join("state");
    let agent = common::agents::script(
        dir.path(),
        "agent.sh",
        r#"cat >/dev/null
id -u > uid.txt
echo '{"type":"message","item_id":"m1","text":"done"}'
echo '{"type":"result","ok":true}'"#,
    );
    let workspace: PathBuf = dir.path().join("base/ws");
    let server = start(
        dir.path(),
        &[("ABX_SERVER_ENABLED_GROUPS", "agents"), ("ABX_AGENTS_STATE_DIR", state.to_str().expect("utf-8"))],
    );
    let body = common::agents::command_session(&agent, &workspace, Some("go"));
    let (status, created) = post(&server, &server.at("/v1/agents/sessions"), ALICE, body).await;
    assert_eq!(status, 200, "{created}");
    let id = created["id"].as_str().expect("id");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let response = reqwest::Client::new()
            .get(server.at(&format!("/v1/agents/sessions/{id}")))
            .bearer_auth(ALICE)
            .send()
            .await
            .expect("get");
        let session: Value = response.json().await.expect("json");
        if session["status"] == "idle" && workspace.join("uid.txt").exists() {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "the turn did not end: {session}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(std::fs::read_to_string(workspace.join("uid.txt")).expect("uid"), format!("{ALICE_UID}\n"));
    assert_eq!(std::fs::metadata(&workspace).expect("workspace").uid(), ALICE_UID, "the workspace is the user's");
}

/// An unknown user, or another user while the daemon is not root, is a
/// configuration error: `serve` refuses to start and `check-config` fails,
/// naming the token; a policy whose runners each have their own user gets
/// no shared-user warning.
#[test]
fn a_bad_user_is_refused_at_start_and_by_check_config() {
    let dir = open_dir();
    let write = |user: Value| {
        let policy = json!({"auth": {"tokens": [
            {"id": "alice", "scopes": ["*"], "token_env": "ABX_TEST_ALICE", "user": user},
            {"id": "bob", "scopes": ["*"], "token_env": "ABX_TEST_BOB", "user": BOB_UID},
        ]}});
        let path = dir.path().join("policy.json");
        std::fs::write(&path, policy.to_string()).expect("policy");
        path.display().to_string()
    };
    let run = |args: &[&str], launcher: &[&str]| {
        let binary = env!("CARGO_BIN_EXE_agent-sandbox-server");
        let mut command = match launcher.split_first() {
            Some((program, rest)) => {
                let mut c = std::process::Command::new(program);
                c.args(rest).arg(binary);
                c
            }
            None => std::process::Command::new(binary),
        };
        let output = command
            .args(args)
            .env("ABX_TEST_ALICE", ALICE)
            .env("ABX_TEST_BOB", BOB)
            .env_remove("ABX_SERVER_TOKEN")
            .current_dir(dir.path())
            .output()
            .expect("run");
        let said = String::from_utf8_lossy(&output.stdout).to_string() + &String::from_utf8_lossy(&output.stderr);
        (output.status.code(), said)
    };
    let unknown = write(json!("no-such-user-7d1"));
    let serve = ["serve", "--port", "0", "--pty-port", "0", "--code-port", "0", "--envd-port", "0", "--policy"];
    let (code, said) = run(&[&serve[..], &[unknown.as_str()]].concat(), &[]);
    assert_ne!(code, Some(0), "{said}");
    assert!(said.contains("policy.auth.tokens[0].user: unknown user 'no-such-user-7d1'"), "{said}");
    let (code, said) = run(&["check-config", "--policy", &unknown], &[]);
    assert_eq!(code, Some(1), "{said}");
    assert!(said.contains("policy.auth.tokens[0].user: unknown user 'no-such-user-7d1'"), "{said}");
    let (_, said) = run(&["check-config", "--policy", &write(json!("not a name"))], &[]);
    assert!(said.contains("unknown user 'not a name'"), "{said}");
    let (code, said) = run(&["check-config", "--policy", &write(json!(-3))], &[]);
    assert!(code == Some(1) && said.contains("policy.auth.tokens[0].user: expected a user name or a uid"), "{said}");

    if !runnable() {
        return;
    }
    let good = write(json!("nobody"));
    let (code, said) = run(&["check-config", "--json", "--policy", &good], &[]);
    assert_eq!(code, Some(0), "{said}");
    assert!(!said.contains("may each start programs"), "each runner has its own user: {said}");
    let shared = write(json!(BOB_UID));
    let (_, said) = run(&["check-config", "--policy", &shared], &[]);
    assert!(said.contains("identities alice, bob may each start programs"), "one user for two: {said}");
    let setpriv = ["/usr/bin/setpriv", "--reuid", "nobody", "--regid", "nogroup", "--clear-groups"];
    if Path::new(setpriv[0]).exists() {
        std::fs::set_permissions(&good, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        let (code, said) = run(&["check-config", "--policy", &good], &setpriv);
        assert_eq!(code, Some(1), "{said}");
        assert!(said.contains("running programs as '1' needs the server to run as root"), "{said}");
    }
}

fn base64_of(text: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(text)
}

fn base64_decode(text: &str) -> Vec<u8> {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.decode(text).unwrap_or_default()
}
