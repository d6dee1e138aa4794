//! One front door: the same policy decides on every port. Per preset
//! (`default`, `read-only`, `locked`) and per port (API, envd, code), what a
//! caller may and may not do; a refusal runs nothing (no child process, no
//! file changed) and leaves an audit line naming the port and the endpoint.
//! Limits count every port together.

mod common;

use std::time::Duration;

use common::envd::{call as envd_call, envd, Frames};
use common::TestServer;
use serde_json::{json, Value};

/// A server with `policy` refining `preset` (if any), and the test token.
fn with_preset(preset: Option<&str>, mut policy: Value) -> TestServer {
    if let Some(preset) = preset {
        policy["preset"] = preset.into();
    }
    common::server().env("ABX_SERVER_POLICY", &policy.to_string()).start()
}

fn audit_all() -> Value {
    json!({"defaults": {"audit": "all"}})
}

fn listener(server: &TestServer, name: &str) -> String {
    server.listeners.iter().find(|(n, _)| n == name).map(|(_, url)| url.clone()).expect("listener")
}

/// A call to the code port: `(status, body)`.
async fn code(server: &TestServer, method: &str, path: &str, body: Value) -> (u16, Value) {
    let url = format!("{}{path}", listener(server, "code"));
    let request = reqwest::Client::new().request(method.parse().expect("method"), url);
    let response = request.header("x-access-token", common::TOKEN).body(body.to_string()).send().await.expect("send");
    let status = response.status().as_u16();
    let text = response.text().await.expect("body");
    (status, serde_json::from_str(&text).unwrap_or(Value::String(text)))
}

/// A call to the API port: `(status, body)`.
async fn api(server: &TestServer, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
    let mut request = server.http().request(method.parse().expect("method"), server.at(path));
    request = request.header("authorization", server.bearer());
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await.expect("send");
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

/// The audit lines naming `endpoint` once at least `count` of them were written.
fn audited(server: &TestServer, endpoint: &str, count: usize) -> Vec<String> {
    let needle = format!("endpoint=\"{endpoint}\"");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let lines: Vec<String> =
            server.log().lines().filter(|l| l.contains(" audit:") && l.contains(&needle)).map(str::to_string).collect();
        if lines.len() >= count {
            return lines;
        }
        assert!(std::time::Instant::now() < deadline, "{endpoint} was not audited:\n{}", server.log());
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[tokio::test]
async fn read_only_refuses_execution_and_writes_on_every_port_and_runs_nothing() {
    let server = with_preset(Some("read-only"), audit_all());
    std::fs::write(server.base.join("seen.txt"), "x").expect("seed");
    let marker = server.base.join("marker");
    let token = Some(common::TOKEN);

    let (status, body) = api(&server, "POST", "/shell", Some(json!({"command": "touch marker"}))).await;
    assert_eq!((status, body["code"].as_str()), (404, Some("endpoint_disabled")));

    // The code port: executing code and creating contexts are process execution.
    let code_text = format!("open({:?}, 'w').write('x')", marker.display().to_string());
    // Its refusals are plain text, as all its errors: the message names the endpoint and the rule.
    let (status, body) = code(&server, "POST", "/execute", json!({"code": code_text})).await;
    let text = body.as_str().unwrap_or_default();
    assert_eq!(status, 403, "{body}");
    assert!(text.starts_with("Endpoint 'code_execute' is disabled") && text.contains("preset:read-only"), "{text}");
    let (status, body) = code(&server, "POST", "/contexts", json!({"language": "python"})).await;
    assert_eq!(status, 403, "{body}");
    assert!(body.as_str().is_some_and(|t| t.contains("'code_contexts_create'")), "{body}");

    // envd: Start, input, signals and every write are refused; reads are not.
    let start = json!({"process": {"cmd": "/bin/sh", "args": ["-c", "touch marker"]}});
    let headers = [("x-access-token", common::TOKEN)];
    let (status, _, mut frames) = Frames::open(&server, "process.Process/Start", start, &headers).await;
    let (flags, end) = frames.next().await.expect("end");
    assert_eq!((status, flags, end["error"]["code"].as_str()), (200, 2, Some("permission_denied")));
    for (method, body) in [
        ("filesystem.Filesystem/MakeDir", json!({"path": "newdir"})),
        ("filesystem.Filesystem/Remove", json!({"path": "seen.txt"})),
        ("filesystem.Filesystem/Move", json!({"source": "seen.txt", "destination": "moved.txt"})),
        ("process.Process/SendInput", json!({"process": {"pid": 1}, "input": {"stdin": "eA=="}})),
        ("process.Process/SendSignal", json!({"process": {"pid": 1}, "signal": "SIGNAL_SIGKILL"})),
    ] {
        let (status, answer) = envd_call(&server, method, body, token).await;
        assert_eq!((status, answer["code"].as_str()), (403, Some("permission_denied")), "{method}: {answer}");
    }
    let upload = reqwest::Client::new()
        .post(format!("{}/files?path=up.txt", envd(&server)))
        .header("x-access-token", common::TOKEN)
        .header("content-type", "application/octet-stream")
        .body("data")
        .send()
        .await
        .expect("upload");
    assert_eq!(upload.status().as_u16(), 403);
    let (status, entry) = envd_call(&server, "filesystem.Filesystem/Stat", json!({"path": "seen.txt"}), token).await;
    assert_eq!((status, entry["entry"]["name"].as_str()), (200, Some("seen.txt")));

    assert!(!marker.exists() && !server.base.join("newdir").exists() && !server.base.join("up.txt").exists());
    assert!(server.base.join("seen.txt").exists() && !server.base.join("moved.txt").exists());
    assert_eq!(server.children(), Vec::<String>::new(), "a refusal starts no process");
    let line = &audited(&server, "code_execute", 1)[0];
    assert!(line.contains("port=\"code\"") && line.contains("decision=\"deny\""), "{line}");
    assert!(line.contains("rule=\"preset:read-only:groups.process\""), "{line}");
    let line = &audited(&server, "envd_process_start", 1)[0];
    assert!(line.contains("port=\"envd\"") && line.contains("decision=\"deny\""), "{line}");
    let line = &audited(&server, "envd_stat", 1)[0];
    assert!(line.contains("decision=\"allow\"") && line.contains("identity=\"server\""), "{line}");
}

#[tokio::test]
async fn locked_leaves_only_the_health_probes() {
    let server = with_preset(Some("locked"), json!({}));
    let token = Some(common::TOKEN);
    assert_eq!(server.http().get(server.at("/health")).send().await.expect("health").status(), 200);
    let envd_health = reqwest::get(format!("{}/health", envd(&server))).await.expect("envd health");
    assert_eq!(envd_health.status(), 204);
    let code_health = reqwest::get(format!("{}/health", listener(&server, "code"))).await.expect("code health");
    assert_eq!(code_health.status(), 200);
    let (status, _) = envd_call(&server, "filesystem.Filesystem/Stat", json!({"path": "."}), token).await;
    assert_eq!(status, 403);
    let (status, body) = code(&server, "POST", "/execute", json!({"code": "1"})).await;
    assert_eq!(status, 403, "{body}");
    assert!(body.as_str().is_some_and(|text| text.starts_with("Endpoint 'code_execute' is disabled")), "{body}");
    let (status, body) = api(&server, "GET", "/metrics", None).await;
    assert_eq!((status, body["code"].as_str()), (404, Some("endpoint_disabled")));
    let init = reqwest::Client::new()
        .post(format!("{}/init", envd(&server)))
        .header("x-access-token", common::TOKEN)
        .json(&json!({"envVars": {"LD_PRELOAD": "/tmp/x.so"}}))
        .send()
        .await
        .expect("init");
    assert_eq!(init.status(), 403, "no variable reaches a registered command under locked");
    assert_eq!(server.children(), Vec::<String>::new());
}

#[tokio::test]
async fn by_default_every_port_is_admitted_and_audited_alike() {
    let server = with_preset(None, audit_all());
    std::fs::create_dir(server.base.join("d")).expect("mkdir");
    let token = Some(common::TOKEN);
    let (status, entry) = envd_call(&server, "filesystem.Filesystem/Stat", json!({"path": "d"}), token).await;
    assert_eq!((status, entry["entry"]["type"].as_str()), (200, Some("FILE_TYPE_DIRECTORY")));
    let (status, _) = envd_call(&server, "filesystem.Filesystem/Stat", json!({"path": "d"}), Some("wrong")).await;
    assert_eq!(status, 401);
    let line = &audited(&server, "envd_stat", 2);
    let d = server.base.join("d").canonicalize().expect("canonical");
    // The paths the request's guard authorised, as a JSON list (envd's Stat
    // authorises the parent directory, then the entry in it).
    let listed = |path: &std::path::Path| format!("\\\"{}\\\"", path.display());
    let paths = listed(&d);
    assert!(line.iter().any(|l| l.contains("decision=\"allow\"") && l.contains(&paths)), "{paths} in {line:?}");
    assert!(line.iter().any(|l| l.contains("status=401") && l.contains("decision=\"deny\"")), "{line:?}");
    // The native API's files endpoints name the paths they touched too,
    // whichever way the path was resolved (the stat's fast path, a read's).
    let (status, body) = api(&server, "GET", "/files/stat?path=d", None).await;
    assert_eq!((status, body["exists"].as_bool()), (200, Some(true)), "{body}");
    assert!(audited(&server, "files_stat", 1)[0].contains(&format!("paths=\"[{paths}]\"")), "{paths}");
    std::fs::write(d.join("f.txt"), "x").expect("write");
    let (status, body) = api(&server, "GET", "/files/content?path=d/f.txt", None).await;
    assert_eq!(status, 200, "{body}");
    let f = format!("paths=\"[{}]\"", listed(&d.join("f.txt")));
    assert!(audited(&server, "files_content_read", 1)[0].contains(&f), "{f}");
    let (status, body) = code(&server, "GET", "/contexts", Value::Null).await;
    assert_eq!(status, 200, "{body}");
    let line = &audited(&server, "code_contexts_list", 1)[0];
    assert!(line.contains("port=\"code\"") && line.contains("identity=\"server\""), "{line}");
    for secret in [common::TOKEN, "wrong"] {
        assert!(!server.log().contains(&format!("{secret}\"")), "a token was logged");
    }
}

#[tokio::test]
async fn a_path_rule_and_a_missing_scope_reach_every_port() {
    let policy = json!({
        "auth": {"tokens": [
            {"id": "admin", "scopes": ["*"], "token_env": "ABX_TEST_FD_ADMIN"},
            {"id": "reader", "scopes": ["files:read"], "token_env": "ABX_TEST_FD_READER"},
        ]},
        "endpoints": {"files_*": {"paths": {"deny": ["**/secret*"]}}},
    });
    let server = common::server()
        .token(None)
        .env("ABX_TEST_FD_ADMIN", "admin-tok")
        .env("ABX_TEST_FD_READER", "reader-tok")
        .env("ABX_SERVER_POLICY", &policy.to_string())
        .start();
    std::fs::write(server.base.join("secret.txt"), "s").expect("seed");
    std::fs::write(server.base.join("open.txt"), "o").expect("seed");
    let stat = |path: &str| json!({"path": path});
    let (status, body) = envd_call(&server, "filesystem.Filesystem/Stat", stat("secret.txt"), Some("admin-tok")).await;
    assert_eq!((status, body["code"].as_str()), (403, Some("permission_denied")), "{body}");
    let download = reqwest::Client::new()
        .get(format!("{}/files?path=secret.txt", envd(&server)))
        .header("x-access-token", "admin-tok")
        .send()
        .await
        .expect("download");
    assert_eq!(download.status(), 403);
    let (status, _) = envd_call(&server, "filesystem.Filesystem/Stat", stat("open.txt"), Some("reader-tok")).await;
    assert_eq!(status, 200);
    let (status, body) = envd_call(&server, "filesystem.Filesystem/Remove", stat("open.txt"), Some("reader-tok")).await;
    assert_eq!((status, body["code"].as_str()), (403, Some("permission_denied")), "{body}");
    assert!(body["message"].as_str().is_some_and(|m| m.contains("lacks scope 'files:delete'")), "{body}");
    let response = reqwest::Client::new()
        .post(format!("{}/execute", listener(&server, "code")))
        .header("x-access-token", "reader-tok")
        .json(&json!({"code": "1"}))
        .send()
        .await
        .expect("execute");
    assert_eq!(response.status(), 403);
    let media = response.headers()["content-type"].to_str().unwrap_or_default().to_string();
    let text = response.text().await.expect("text");
    assert_eq!(media, "text/plain; charset=utf-8");
    assert!(text.contains("lacks scope 'process:run'"), "{text}");
    assert!(server.base.join("open.txt").exists());
}

#[tokio::test]
async fn limits_count_every_port_together() {
    let policy = json!({"endpoints": {
        "process_start": {"limits": {"max_processes": 2}},
        "pty_create_session": {"limits": {"max_sessions": 1}},
        "files_stat": {"limits": {"rate_per_minute": 3}},
    }});
    let server = with_preset(None, policy);
    let token = Some(common::TOKEN);
    let (status, _) = api(&server, "POST", "/process/start", Some(json!({"command": "sleep 30"}))).await;
    assert_eq!(status, 200);
    let headers = [("x-access-token", common::TOKEN)];
    let sleep = json!({"process": {"cmd": "sleep", "args": ["30"]}});
    let (_, _, mut first) = Frames::open(&server, "process.Process/Start", sleep.clone(), &headers).await;
    assert!(first.next().await.expect("start").1["event"]["start"].is_object());
    let (status, body) = api(&server, "POST", "/process/start", Some(json!({"command": "sleep 30"}))).await;
    assert_eq!((status, body["error"].as_str()), (429, Some("Process limit reached (2)")), "API + envd = 2");
    let (_, _, mut third) = Frames::open(&server, "process.Process/Start", sleep, &headers).await;
    let (flags, end) = third.next().await.expect("end");
    assert_eq!((flags, end["error"]["code"].as_str()), (2, Some("resource_exhausted")), "{end}");

    let (status, _) = api(&server, "POST", "/pty/sessions", Some(json!({"shell": "/bin/sh"}))).await;
    assert_eq!(status, 200);
    let terminal = json!({"process": {"cmd": "/bin/sh"}, "pty": {"size": {"cols": 80, "rows": 24}}});
    let (_, _, mut frames) = Frames::open(&server, "process.Process/Start", terminal, &headers).await;
    let (flags, end) = frames.next().await.expect("end");
    assert_eq!((flags, end["error"]["code"].as_str()), (2, Some("resource_exhausted")), "one terminal in all");

    let stat = json!({"path": "."});
    assert_eq!(api(&server, "GET", "/files/stat?path=.", None).await.0, 200);
    assert_eq!(envd_call(&server, "filesystem.Filesystem/Stat", stat.clone(), token).await.0, 200);
    assert_eq!(api(&server, "GET", "/files/stat?path=.", None).await.0, 200);
    let (status, body) = envd_call(&server, "filesystem.Filesystem/Stat", stat, token).await;
    assert_eq!((status, body["code"].as_str()), (429, Some("resource_exhausted")), "one bucket for both ports");
}

#[tokio::test]
async fn command_rules_reach_envd_and_the_code_port() {
    let policy = json!({"endpoints": {"process_start": {"params": {"allow_commands": ["ls ..."]}}}});
    let server = with_preset(None, policy);
    let (status, body) = code(&server, "POST", "/execute", json!({"code": "import os; os.system('id')"})).await;
    assert_eq!(status, 403, "an interpreter is a shell: {body}");
    assert!(body.to_string().contains("while the policy restricts commands"), "{body}");
    let headers = [("x-access-token", common::TOKEN)];
    let touch = json!({"process": {"cmd": "touch", "args": ["marker"]}});
    let (_, _, mut frames) = Frames::open(&server, "process.Process/Start", touch, &headers).await;
    let (flags, end) = frames.next().await.expect("end");
    assert_eq!((flags, end["error"]["code"].as_str()), (2, Some("permission_denied")), "{end}");
    let ls = json!({"process": {"cmd": "ls"}});
    let (_, _, mut frames) = Frames::open(&server, "process.Process/Start", ls, &headers).await;
    assert!(frames.next().await.expect("start").1["event"]["start"].is_object());
    assert!(!server.base.join("marker").exists());
}
