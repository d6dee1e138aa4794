//! Black-box tests of the dev_tools group on the API port: `POST /code/run`,
//! `GET /git/status` and `GET /git/diff`.

#![allow(clippy::disallowed_methods)] // tests drive the binary from outside; no reaper here

mod common;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use abx_wire::api::code::CodeRunRequest;
use abx_wire::api::ErrorCode;
use common::TestServer;
use serde_json::{json, Value};

fn dev_tools() -> TestServer {
    common::server().env("ABX_SERVER_ENABLED_GROUPS", "dev_tools").start()
}

fn run(code: &str, language: &str) -> CodeRunRequest {
    CodeRunRequest { code: code.into(), language: language.into(), timeout: None }
}

async fn post(server: &TestServer, path: &str, body: Value) -> (u16, Value) {
    let response =
        server.http().post(server.at(path)).bearer_auth(common::TOKEN).json(&body).send().await.expect("request");
    (response.status().as_u16(), response.json().await.expect("JSON"))
}

fn git(dir: &Path, args: &[&str]) {
    let status = Command::new("git")
        .args(["-c", "user.name=t", "-c", "user.email=t@example.com", "-c", "init.defaultBranch=main"])
        .args(args)
        .current_dir(dir)
        .status()
        .expect("git");
    assert!(status.success(), "git {args:?}");
}

#[tokio::test]
async fn the_group_is_opt_in() {
    let server = common::start();
    let (status, body) = post(&server, "/code/run", json!({"code": "print(1)"})).await;
    assert_eq!((status, body["code"].as_str()), (404, Some("endpoint_disabled")));
}

#[tokio::test]
async fn code_runs_once_in_each_language() {
    let server = dev_tools();
    let client = server.client();
    let result =
        client.run_once(&run("import sys; print('out'); print('err', file=sys.stderr); sys.exit(3)", "python")).await;
    let result = result.expect("python");
    assert_eq!((result.stdout.as_str(), result.stderr.as_str(), result.exit_code), ("out\n", "err\n", 3));
    assert_eq!(result.language, "python");
    assert!(result.execution_time_ms > 0.0 && !result.truncated);
    let result = client.run_once(&run("echo $((6 * 7)) in $PWD", "BASH")).await.expect("bash");
    assert_eq!(result.stdout, format!("42 in {}\n", server.base.display()));
    assert_eq!(result.language, "bash");
    let result = client.run_once(&run("kill -9 $$", "bash")).await.expect("signal");
    assert_eq!(result.exit_code, -9, "a signal is reported as a negative code");
    if which("node") {
        let result = client.run_once(&run("console.log(1 + 1)", "node")).await.expect("node");
        assert_eq!(result.stdout, "2\n");
    }
}

#[tokio::test]
async fn a_runs_exit_ends_it_and_kills_its_background_child() {
    let server = dev_tools();
    let bg = server.base.join("bg");
    let started = Instant::now();
    let script = format!("sleep 40 & echo $! > {}; echo started", bg.display());
    let result = server.client().run_once(&run(&script, "bash")).await.expect("bash");
    assert_eq!((result.stdout.as_str(), result.exit_code), ("started\n", 0));
    assert!(started.elapsed() < Duration::from_secs(10), "answered at the exit: {:?}", started.elapsed());
    let pid = common::pid_in(&bg).await;
    assert!(common::pid_gone(pid, Duration::from_secs(5)).await, "the background sleep was killed");
}

#[tokio::test]
async fn code_run_refuses_bad_requests_as_the_reference() {
    let server = dev_tools();
    let (status, body) = post(&server, "/code/run", json!({"language": "python"})).await;
    assert_eq!((status, body["error"].as_str()), (400, Some("Missing or invalid 'code'")));
    let (status, body) = post(&server, "/code/run", json!({"code": "1", "language": "ruby"})).await;
    assert_eq!(status, 400);
    assert_eq!(body["error"], "Unsupported language 'ruby'; supported: bash, node, python");
    assert_eq!(body["type"], "ValueError");
}

#[tokio::test]
async fn a_timeout_kills_the_whole_process_group() {
    let server = dev_tools();
    let pid_file = server.base.join("grandchild.pid");
    let code = format!("sleep 60 & echo $! > {}; wait", pid_file.display());
    let started = Instant::now();
    let (status, body) = post(&server, "/code/run", json!({"code": code, "language": "bash", "timeout": 1})).await;
    assert!(started.elapsed() < Duration::from_secs(10));
    assert_eq!((status, body["type"].as_str()), (408, Some("TimeoutError")));
    assert_eq!(body["error"], "Code execution timed out after 1s");
    let pid: i32 = std::fs::read_to_string(&pid_file).expect("pid file").trim().parse().expect("pid");
    let deadline = Instant::now() + Duration::from_secs(5);
    while std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| !s.contains(") Z")) {
        assert!(Instant::now() < deadline, "the grandchild {pid} survived the timeout");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[tokio::test]
async fn git_status_and_diff_describe_the_repository() {
    let server = dev_tools();
    let repo = server.base.join("repo");
    std::fs::create_dir(&repo).expect("mkdir");
    git(&repo, &["init", "-q"]);
    std::fs::write(repo.join("a.txt"), "one\ntwo\n").expect("write");
    std::fs::write(repo.join("old name.txt"), "x\n").expect("write");
    git(&repo, &["add", "."]);
    git(&repo, &["commit", "-q", "-m", "init"]);
    std::fs::write(repo.join("a.txt"), "one\nthree\nfour\n").expect("write");
    git(&repo, &["mv", "old name.txt", "new name.txt"]);
    std::fs::write(repo.join("é.txt"), "new\n").expect("write");
    let client = server.client();
    let status = client.git_status("repo").await.expect("status");
    assert_eq!(status.branch, "main");
    assert!(!status.clean);
    let files: Vec<(&str, &str)> = status.files.iter().map(|f| (f.path.as_str(), f.status.as_str())).collect();
    assert!(files.contains(&("a.txt", "modified")), "{files:?}");
    assert!(files.contains(&("old name.txt -> new name.txt", "renamed")), "{files:?}");
    assert!(files.contains(&("é.txt", "untracked")), "{files:?}");
    let diff = client.git_diff("repo", false, None).await.expect("diff");
    assert!(diff.diff.contains("-two\n+three\n+four\n"), "{}", diff.diff);
    assert_eq!((diff.stats.files_changed, diff.stats.insertions, diff.stats.deletions), (1, 2, 1));
    let staged = client.git_diff("repo", true, None).await.expect("staged");
    assert!(staged.diff.contains("rename to new name.txt"), "{}", staged.diff);
    let one = client.git_diff("repo", false, Some("a.txt")).await.expect("one file");
    assert_eq!(one.stats.files_changed, 1);
    let err = client.git_diff("repo", false, Some("../repo/a.txt")).await.expect_err("dot-dot");
    assert_eq!(err.status(), Some(400));
    let err = client.git_status(".").await.expect_err("not a repository");
    assert_eq!(err.status(), Some(400));
    assert!(err.to_string().contains("not a git repository"), "{err}");
    let err = client.git_status("/").await.expect_err("outside the base");
    assert_eq!((err.status(), err.code()), (Some(403), Some(&ErrorCode::PathNotAllowed)));
}

fn which(program: &str) -> bool {
    std::env::var("PATH").unwrap_or_default().split(':').any(|d| Path::new(d).join(program).is_file())
}
