//! Black-box tests of the code-interpreter port: contexts, streaming,
//! interrupts, crashes, limits and auth, against the real binary.

#![allow(clippy::disallowed_methods)] // tests drive the binary from outside; no reaper here

mod common;

use std::time::{Duration, Instant};

use abx_client::{ClientError, CodeClient};
use abx_wire::api::code::{CreateContextRequest, ExecuteRequest, ExecutionResult, OutputLine};
use common::TestServer;

fn code_url(server: &TestServer) -> String {
    server.listeners.iter().find(|(name, _)| name == "code").map(|(_, url)| url.clone()).expect("code listener")
}

fn code(server: &TestServer) -> CodeClient {
    server.client().code_interpreter(&code_url(server))
}

fn request(code: &str) -> ExecuteRequest {
    ExecuteRequest { code: code.into(), ..ExecuteRequest::default() }
}

fn in_context(id: &str, code: &str) -> ExecuteRequest {
    ExecuteRequest { code: code.into(), context_id: Some(id.into()), ..ExecuteRequest::default() }
}

async fn create(code: &CodeClient, language: &str) -> String {
    let request = CreateContextRequest { language: Some(language.into()), cwd: None };
    code.create_context(&request).await.expect("create context").id
}

fn stdout(lines: &[OutputLine]) -> String {
    lines
        .iter()
        .filter_map(|l| if let OutputLine::Stdout { text, .. } = l { Some(text.as_str()) } else { None })
        .collect()
}

fn main_text(lines: &[OutputLine]) -> Option<String> {
    lines.iter().find_map(|l| match l {
        OutputLine::Result(r) if r.is_main_result => r.text.clone(),
        _ => None,
    })
}

fn error(lines: &[OutputLine]) -> Option<(String, String, String)> {
    lines.iter().find_map(|l| match l {
        OutputLine::Error { name, value, traceback } => Some((name.clone(), value.clone(), traceback.clone())),
        _ => None,
    })
}

fn results(lines: &[OutputLine]) -> Vec<&ExecutionResult> {
    lines.iter().filter_map(|l| if let OutputLine::Result(r) = l { Some(r.as_ref()) } else { None }).collect()
}

fn has(program: &str) -> bool {
    std::env::var("PATH").unwrap_or_default().split(':').any(|d| std::path::Path::new(d).join(program).is_file())
}

#[tokio::test]
async fn python_keeps_state_and_streams_in_order() {
    let server = common::start();
    let code = code(&server);
    let id = create(&code, "python").await;
    let first =
        code.run(&in_context(&id, "import math\nx = 1\ndef f(v):\n    return v * 10")).await.expect("run").lines;
    assert_eq!(first, [OutputLine::NumberOfExecutions { execution_count: 1 }]);
    let lines = code.run(&in_context(&id, "x = x + 1; f(x) + math.floor(0.5)")).await.expect("run").lines;
    assert_eq!(lines[0], OutputLine::NumberOfExecutions { execution_count: 2 });
    assert_eq!(main_text(&lines).as_deref(), Some("20"));
    let lines = code
        .run(&in_context(&id, "import sys\nprint('a')\nprint('b', file=sys.stderr)\nprint('c')"))
        .await
        .expect("run")
        .lines;
    let streams: Vec<(&str, &str)> = lines
        .iter()
        .filter_map(|l| match l {
            OutputLine::Stdout { text, timestamp } => {
                Some(("stdout", text.as_str())).filter(|_| timestamp.ends_with("+00:00"))
            }
            OutputLine::Stderr { text, .. } => Some(("stderr", text.as_str())),
            _ => None,
        })
        .collect();
    assert_eq!(streams, [("stdout", "a\n"), ("stderr", "b\n"), ("stdout", "c\n")]);
    let lines = code.run(&in_context(&id, "y = 1\nraise ValueError('bad value')")).await.expect("run").lines;
    let (name, value, traceback) = error(&lines).expect("error");
    assert_eq!((name.as_str(), value.as_str()), ("ValueError", "bad value"));
    assert!(traceback.contains("File \"<cell 4>\", line 2, in <module>"), "{traceback}");
    assert!(traceback.ends_with("ValueError: bad value\n"), "{traceback}");
    let lines = code.run(&in_context(&id, "'text'")).await.expect("run").lines;
    assert_eq!(main_text(&lines).as_deref(), Some("text"), "quotes are unwrapped as the protocol does");
    let lines = code.run(&in_context(&id, "x;")).await.expect("run").lines;
    assert!(results(&lines).is_empty(), "a trailing semicolon silences the value");
    let lines = code
        .run(&in_context(&id, "import subprocess\nsubprocess.run(['echo', 'from a child'])\nprint('after')"))
        .await
        .expect("run")
        .lines;
    assert_eq!(stdout(&lines), "from a child\nafter\n", "subprocess output comes before later prints");
}

#[tokio::test]
async fn rich_representations_become_formats() {
    let server = common::start();
    let code = code(&server);
    let source = r#"
class Rich:
    def _repr_html_(self): return "<b>hi</b>"
    def _repr_markdown_(self): return "**hi**"
    def _repr_svg_(self): return "<svg></svg>"
    def _repr_png_(self): return b"\x89PNG\r\n"
    def _repr_json_(self): return {"a": [1, 2]}
    def __repr__(self): return "Rich()"
display(Rich())
Rich()
"#;
    let lines = code.run(&request(source)).await.expect("run").lines;
    let found = results(&lines);
    assert_eq!(found.len(), 2);
    assert!(!found[0].is_main_result && found[1].is_main_result);
    let main = found[1];
    assert_eq!(main.text.as_deref(), Some("Rich()"));
    assert_eq!(main.html.as_deref(), Some("<b>hi</b>"));
    assert_eq!(main.markdown.as_deref(), Some("**hi**"));
    assert_eq!(main.svg.as_deref(), Some("<svg></svg>"));
    assert_eq!(main.png.as_deref(), Some("iVBORw0K"));
    assert_eq!(main.json, Some(serde_json::json!({"a": [1, 2]})));
}

#[tokio::test]
async fn env_vars_are_data_scoped_to_one_execution() {
    let server = common::start();
    let code = code(&server);
    let tricky = "it's \"quoted\"\nand $(not run)";
    let mut with_env = request("import os\nprint(os.environ['TRICKY'])");
    with_env.env_vars = Some([("TRICKY".to_string(), tricky.to_string())].into());
    assert_eq!(stdout(&code.run(&with_env).await.expect("run").lines), format!("{tricky}\n"));
    let lines = code.run(&request("import os\nos.environ.get('TRICKY', 'unset')")).await.expect("run").lines;
    assert_eq!(main_text(&lines).as_deref(), Some("unset"));
    let mut failing = request("1/0");
    failing.env_vars = Some([("A".to_string(), "1".to_string())].into());
    let (_, _, traceback) = error(&code.run(&failing).await.expect("run").lines).expect("error");
    assert!(traceback.contains("line 1,"), "variables do not shift line numbers: {traceback}");
    let mut bad = request("1");
    bad.env_vars = Some([("NOT-VALID".to_string(), "x".to_string())].into());
    let err = code.run(&bad).await.expect_err("refused");
    assert_eq!(err.status(), Some(400));
}

#[tokio::test]
async fn a_timeout_interrupts_and_keeps_state() {
    let server = common::start();
    let code = code(&server);
    code.run(&request("kept = 41")).await.expect("run");
    let started = Instant::now();
    let mut slow = request("import time\nwhile True:\n    time.sleep(0.05)");
    slow.timeout = Some(0.5);
    let lines = code.run(&slow).await.expect("run").lines;
    assert!(started.elapsed() < Duration::from_secs(5));
    let (name, _, traceback) = error(&lines).expect("error");
    assert_eq!(name, "TimeoutError");
    assert!(traceback.contains("KeyboardInterrupt"), "{traceback}");
    assert_eq!(main_text(&code.run(&request("kept + 1")).await.expect("run").lines).as_deref(), Some("42"));
}

#[tokio::test]
async fn a_client_that_goes_away_never_blocks_the_context() {
    let server = common::start();
    let code = code(&server);
    code.run(&request("kept = 7")).await.expect("run");
    let mut stream = code.execute(&request("while True:\n    pass")).await.expect("execute");
    assert_eq!(stream.next().await.expect("line"), Some(OutputLine::NumberOfExecutions { execution_count: 2 }));
    drop(stream);
    let started = Instant::now();
    let lines = tokio::time::timeout(Duration::from_secs(10), code.run(&request("kept"))).await.expect("not blocked");
    assert_eq!(main_text(&lines.expect("run").lines).as_deref(), Some("7"), "the state survived the interrupt");
    assert!(started.elapsed() < Duration::from_secs(3), "{:?}", started.elapsed());
}

#[tokio::test]
async fn long_executions_send_keepalives() {
    let server = common::server().args(["--code-keepalive-seconds", "0.2"]).start();
    let mut stream = code(&server).execute(&request("import time\ntime.sleep(1.2)\n'done'")).await.expect("execute");
    let mut keepalives = 0;
    let mut last = None;
    while let Some(line) = stream.next().await.expect("line") {
        if line == OutputLine::Keepalive {
            keepalives += 1;
        }
        last = Some(line);
    }
    assert!(keepalives >= 2, "{keepalives} keepalives");
    assert_eq!(last, Some(OutputLine::EndOfExecution));
}

#[tokio::test]
async fn a_crashed_interpreter_is_reported_and_replaced() {
    let server = common::start();
    let code = code(&server);
    let id = create(&code, "python").await;
    code.run(&in_context(&id, "x = 1")).await.expect("run");
    let lines = code.run(&in_context(&id, "print('bye')\nimport os\nos._exit(3)")).await.expect("run").lines;
    assert_eq!(stdout(&lines), "bye\n");
    let (name, value, _) = error(&lines).expect("error");
    assert_eq!(name, "ContextDied");
    assert!(value.contains("exit status 3"), "{value}");
    let lines = code.run(&in_context(&id, "x")).await.expect("run").lines;
    assert_eq!(lines[0], OutputLine::NumberOfExecutions { execution_count: 1 }, "a fresh interpreter");
    assert_eq!(error(&lines).map(|e| e.0).as_deref(), Some("NameError"));
}

#[tokio::test]
async fn restart_clears_state_and_keeps_the_working_directory() {
    let server = common::start();
    std::fs::create_dir(server.base.join("work")).expect("mkdir");
    let code = code(&server);
    let context =
        code.create_context(&CreateContextRequest { cwd: Some("work".into()), language: None }).await.expect("create");
    let work = server.base.join("work");
    assert_eq!(std::path::Path::new(&context.cwd), work);
    code.run(&in_context(&context.id, "x = 1\nimport os\nos.chdir('/')")).await.expect("run");
    code.restart_context(&context.id).await.expect("restart");
    let lines = code.run(&in_context(&context.id, "import os\nprint(os.getcwd())\nx")).await.expect("run").lines;
    assert_eq!(stdout(&lines).trim(), work.to_str().expect("utf-8"));
    assert_eq!(error(&lines).map(|e| e.0).as_deref(), Some("NameError"));
}

#[tokio::test]
async fn contexts_are_listed_deleted_and_refused_clearly() {
    let server = common::server().args(["--code-node", "/nonexistent/node"]).start();
    let code = code(&server);
    let id = create(&code, "python").await;
    assert!(code.list_contexts().await.expect("list").iter().any(|c| c.id == id && c.language == "python"));
    code.delete_context(&id).await.expect("delete");
    let left: Vec<String> = code.list_contexts().await.expect("list").into_iter().map(|c| c.language).collect();
    assert_eq!(left, ["python"], "the built-in default stays; JavaScript is not listed without node");
    let status = |e: ClientError| (e.status(), e.to_string());
    let (s, message) = status(code.run(&in_context(&id, "1")).await.expect_err("gone"));
    assert_eq!(s, Some(404));
    assert!(message.contains(&format!("Context {id} not found")), "{message}");
    assert_eq!(code.delete_context(&id).await.expect_err("gone").status(), Some(404));
    assert_eq!(code.restart_context("nope").await.expect_err("unknown").status(), Some(404));
    let mut both = in_context(&id, "1");
    both.language = Some("python".into());
    assert_eq!(code.run(&both).await.expect_err("both").status(), Some(400));
    let mut cobol = request("1");
    cobol.language = Some("cobol".into());
    let (s, message) = status(code.run(&cobol).await.expect_err("unknown language"));
    assert_eq!(s, Some(400));
    assert!(
        message.contains("Unsupported language 'cobol'; supported: python, javascript, typescript, bash, r"),
        "{message}"
    );
    let js = CreateContextRequest { language: Some("javascript".into()), cwd: None };
    let (s, message) = status(code.create_context(&js).await.expect_err("no node"));
    assert_eq!(s, Some(501));
    assert!(message.contains("'/nonexistent/node' was not found"), "{message}");
    let missing = CreateContextRequest { language: None, cwd: Some("no/such/dir".into()) };
    assert_eq!(code.create_context(&missing).await.expect_err("cwd").status(), Some(400));
}

#[tokio::test]
async fn contexts_are_bounded_and_expire_when_idle() {
    let server = common::server().args(["--code-max-contexts", "1", "--code-idle-timeout-seconds", "0.5"]).start();
    let code = code(&server);
    let id = create(&code, "python").await;
    let err = code.create_context(&CreateContextRequest::default()).await.expect_err("limit");
    assert_eq!(err.status(), Some(429));
    let deadline = Instant::now() + Duration::from_secs(10);
    while code.list_contexts().await.expect("list").iter().any(|c| c.id == id) {
        assert!(Instant::now() < deadline, "the idle context was never removed");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let err = code.run(&in_context(&id, "1")).await.expect_err("expired");
    assert_eq!(err.status(), Some(404));
    assert!(err.to_string().contains("expired"), "{err}");
    create(&code, "python").await;
}

#[tokio::test]
async fn the_code_port_takes_the_server_token() {
    let server = common::start();
    let url = code_url(&server);
    let http = reqwest::Client::new();
    let health = http.get(format!("{url}/health")).send().await.expect("health");
    assert_eq!((health.status().as_u16(), health.text().await.expect("body")), (200, "\"OK\"".to_string()));
    let anonymous = http.get(format!("{url}/contexts")).send().await.expect("request");
    assert_eq!(anonymous.status(), 401);
    let wrong = http.get(format!("{url}/contexts")).bearer_auth("wrong").send().await.expect("request");
    assert_eq!(wrong.status(), 401);
    let bearer = http.get(format!("{url}/contexts")).bearer_auth(common::TOKEN).send().await.expect("request");
    assert_eq!(bearer.status(), 200);
    let header = http.get(format!("{url}/contexts")).header("X-Access-Token", common::TOKEN).send().await;
    assert_eq!(header.expect("request").status(), 200);
    let off = common::server().args(["--code-port", "off"]).start();
    assert!(off.listeners.iter().all(|(name, _)| name != "code"));
}

#[tokio::test]
async fn javascript_and_bash_contexts_keep_state() {
    let server = common::start();
    let code = code(&server);
    if has("node") {
        let id = create(&code, "javascript").await;
        code.run(&in_context(&id, "let n = 40; function add(a) { return n + a }")).await.expect("run");
        let lines = code.run(&in_context(&id, "console.log('hi'); add(2)")).await.expect("run").lines;
        assert_eq!((stdout(&lines).as_str(), main_text(&lines).as_deref()), ("hi\n", Some("42")));
        let (name, value, _) = error(&code.run(&in_context(&id, "null.x")).await.expect("run").lines).expect("error");
        assert_eq!(name, "TypeError");
        assert!(value.contains("null"), "{value}");
        let mut spin = in_context(&id, "while (true) {}");
        spin.timeout = Some(0.3);
        assert_eq!(error(&code.run(&spin).await.expect("run").lines).map(|e| e.0).as_deref(), Some("TimeoutError"));
        assert_eq!(main_text(&code.run(&in_context(&id, "n")).await.expect("run").lines).as_deref(), Some("40"));
    } else {
        eprintln!("node is not installed: JavaScript contexts not tested");
    }
    let id = create(&code, "bash").await;
    code.run(&in_context(&id, "declare -A seen=([a]=1)\ncd /tmp\ncount=41")).await.expect("run");
    let lines = code.run(&in_context(&id, "echo $((count + 1)) ${seen[a]} $PWD")).await.expect("run").lines;
    assert_eq!(stdout(&lines), "42 1 /tmp\n");
    let (name, value, _) = error(&code.run(&in_context(&id, "false")).await.expect("run").lines).expect("error");
    assert_eq!((name.as_str(), value.as_str()), ("ExitCode", "1"));
    let mut slow = in_context(&id, "f() { while :; do sleep 0.05; done; }\nf\necho not reached");
    slow.timeout = Some(0.3);
    let lines = code.run(&slow).await.expect("run").lines;
    assert_eq!(error(&lines).map(|e| e.0).as_deref(), Some("TimeoutError"));
    assert_eq!(stdout(&lines), "");
    assert_eq!(stdout(&code.run(&in_context(&id, "echo $count")).await.expect("run").lines), "41\n");
}

#[tokio::test]
async fn default_contexts_are_shared_per_language() {
    let server = common::start();
    let code = code(&server);
    code.run(&request("shared = 'yes'")).await.expect("run");
    let mut python = request("shared");
    python.language = Some("Python".into());
    assert_eq!(main_text(&code.run(&python).await.expect("run").lines).as_deref(), Some("yes"));
    let mut bash = request("echo ${shared:-none}");
    bash.language = Some("bash".into());
    assert_eq!(stdout(&code.run(&bash).await.expect("run").lines), "none\n");
    let languages: Vec<String> = code.list_contexts().await.expect("list").into_iter().map(|c| c.language).collect();
    let mut expected = vec!["python", "bash"];
    if has("node") {
        expected.insert(1, "javascript");
    }
    assert_eq!(languages, expected, "the built-in defaults first, then in creation order");
}

#[tokio::test]
async fn shutdown_stops_every_interpreter() {
    let mut server = common::start();
    let code = code(&server);
    let lines = code
        .run(&request("import os, subprocess\nchild = subprocess.Popen(['sleep', '60'])\nos.getpid(), child.pid"))
        .await;
    let text = main_text(&lines.expect("run").lines).expect("pids");
    let pids: Vec<i32> = text.trim_matches(['(', ')']).split(", ").map(|p| p.parse().expect("pid")).collect();
    assert!(pids.iter().all(|&pid| alive(pid)), "{pids:?}");
    let status = server.signal_and_wait(nix::sys::signal::Signal::SIGTERM, Duration::from_secs(10));
    assert!(matches!(status, Some(nix::sys::wait::WaitStatus::Exited(_, 0))), "{status:?}");
    let deadline = Instant::now() + Duration::from_secs(5);
    while pids.iter().any(|&pid| alive(pid)) {
        assert!(Instant::now() < deadline, "{pids:?} outlived the server");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Whether `pid` runs (a zombie waiting for its reaper does not).
fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|stat| stat.rsplit_once(") ").is_some_and(|(_, rest)| !rest.starts_with('Z')))
}

#[test]
fn abx_streams_code_and_manages_contexts() {
    let server = common::start();
    let abx = |args: &[&str], stdin: &str| {
        let mut child = std::process::Command::new(common::abx())
            .args(args)
            .env("ABX_SERVER_URL", &server.url)
            .env("ABX_CODE_URL", code_url(&server))
            .env("ABX_SERVER_TOKEN", common::TOKEN)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("abx");
        use std::io::Write;
        child.stdin.take().expect("stdin").write_all(stdin.as_bytes()).expect("write");
        let out = child.wait_with_output().expect("abx output");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (status, out, _) = abx(&["run-code", "--env", "WHO=abx", "import os\nprint(os.environ['WHO'])\n6 * 7"], "");
    assert_eq!((status, out.as_str()), (Some(0), "abx\n42\n"));
    let (status, _, err) = abx(&["run-code", "-"], "raise RuntimeError('from stdin')");
    assert_eq!(status, Some(1));
    assert!(err.contains("RuntimeError: from stdin"), "{err}");
    let (status, out, _) = abx(&["contexts", "create", "--language", "bash"], "");
    assert_eq!(status, Some(0));
    let id = serde_json::from_str::<serde_json::Value>(&out).expect("JSON")["id"].as_str().expect("id").to_string();
    let (status, out, _) = abx(&["run-code", "--context", &id, "echo from bash"], "");
    assert_eq!((status, out.as_str()), (Some(0), "from bash\n"));
    assert_eq!(abx(&["contexts", "delete", &id], "").0, Some(0));
    let (status, _, err) = abx(&["contexts", "restart", &id], "");
    assert_eq!(status, Some(1));
    assert!(err.contains("not found"), "{err}");
}

#[tokio::test]
async fn too_large_results_fail_the_cell_clearly() {
    let server = common::start();
    let code = code(&server);
    let lines = code.run(&request("display('x' * (40 << 20))\nprint('not reached')")).await.expect("run").lines;
    let (name, value, traceback) = error(&lines).expect("an error");
    assert_eq!(name, "ResultTooLarge");
    assert!(value.contains("over the 32.0 MiB result limit"), "{value}");
    assert!(traceback.contains("line 1, in <module>"), "{traceback}");
    assert_eq!(stdout(&lines), "");
    let lines = code.run(&request("{'fine': [1, float('nan')]}")).await.expect("run").lines;
    assert_eq!(results(&lines)[0].json, Some(serde_json::json!({"fine": [1, null]})));
}

#[tokio::test]
async fn malformed_bodies_get_validation_details_and_restart_answers_200() {
    let server = common::start();
    let url = code_url(&server);
    let http = reqwest::Client::new();
    let post =
        |path: &str, body: &'static str| http.post(format!("{url}{path}")).bearer_auth(common::TOKEN).body(body).send();
    let missing = post("/execute", r#"{"language":"python"}"#).await.expect("request");
    assert_eq!(missing.status(), 422);
    let body: serde_json::Value = missing.json().await.expect("json");
    assert_eq!(body["detail"][0]["loc"], serde_json::json!(["body", "code"]));
    assert_eq!(body["detail"][0]["type"], "missing");
    let wrong = post("/contexts", r#"{"cwd": 3}"#).await.expect("request");
    assert_eq!(wrong.status(), 422);
    let created: serde_json::Value = post("/contexts", "{}").await.expect("request").json().await.expect("json");
    let id = created["id"].as_str().expect("id");
    let restarted = post(&format!("/contexts/{id}/restart"), "").await.expect("request");
    assert_eq!(restarted.status(), 200);
    assert_eq!(restarted.text().await.expect("body"), "null");
}

#[tokio::test]
async fn other_languages_run_when_installed_and_are_named_when_not() {
    let server = common::server().args(["--code-java", "/nonexistent/java"]).start();
    let code = code(&server);
    let java = CreateContextRequest { language: Some("java".into()), cwd: None };
    let err = code.create_context(&java).await.expect_err("no java");
    assert_eq!(err.status(), Some(501));
    assert!(err.to_string().contains("java is not available here: its interpreter '/nonexistent/java'"), "{err}");
    for (language, program, setup, check, expected) in [
        ("r", "Rscript", "v <- c(2, 3)", "sum(v) * 7", "[1] 35"),
        ("typescript", "node", "const n: number = 34", "n + 1 as number", "35"),
    ] {
        if !has(program) {
            continue;
        }
        let id = create(&code, language).await;
        assert_eq!(error(&code.run(&in_context(&id, setup)).await.expect("run").lines), None, "{language}");
        let lines = code.run(&in_context(&id, check)).await.expect("run").lines;
        assert_eq!(main_text(&lines).as_deref(), Some(expected), "{language}: {lines:?}");
    }
}
