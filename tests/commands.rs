//! Black-box tests of registered commands against the real binary: commands
//! declared in a config file, listed and run with the reference's argument
//! coercion, errors and statuses, and the `abx commands`/`abx run` verbs.

#![allow(clippy::disallowed_methods)] // tests drive the binary from outside; no reaper here

mod common;

use std::process::Command;

use serde_json::{json, Value};

const CONFIG: &str = r#"
[[commands]]
name = "hello"
description = "Say hello"
argv = ["/bin/sh", "-c", 'printf "Hello, %s!" "$1"', "hello", "{name}"]

[[commands.args]]
name = "name"
description = "Who to greet"

[[commands]]
name = "echo-json"
description = "Print the arguments it received on stdin"
argv = ["cat"]
input = "json"
args = [
  { name = "name", type = "string" },
  { name = "times", type = "integer", default = 1 },
  { name = "loud", type = "boolean", default = false },
  { name = "ratio", type = "float", default = 0.5 },
  { name = "tags", type = "string_array", default = ["a"] },
  { name = "note", type = "string", required = false },
]

[[commands]]
name = "env-args"
argv = ["/bin/sh", "-c", 'printf "%s|%s|%s" "$ARG_NAME" "$ARG_TAGS" "$GREETING"']
input = "env"
env = { GREETING = "hi" }
args = [{ name = "name" }, { name = "tags", type = "string_array" }]

[[commands]]
name = "each"
argv = ["printf", "[%s]", "{tags}"]
args = [{ name = "tags", type = "string_array" }]

[[commands]]
name = "fail"
argv = ["/bin/sh", "-c", "echo working; echo 'disk full' >&2; exit 3"]

[[commands]]
name = "slow"
argv = ["/bin/sh", "-c", "sleep 30"]
timeout_seconds = 0.3

[[commands]]
name = "flood"
argv = ["yes"]
max_output_bytes = 1000

[[commands]]
name = "hidden"
argv = ["printf", "secret"]
hidden = true
"#;

fn server() -> common::TestServer {
    let dir = tempfile::tempdir().expect("tmp");
    let path = dir.path().join("server.toml");
    std::fs::write(&path, CONFIG).expect("config");
    let server = common::server().args(["--config".to_string(), path.display().to_string()]).start();
    drop(dir);
    server
}

async fn run(server: &common::TestServer, name: &str, args: Value) -> (u16, Value) {
    let response = server
        .http()
        .post(server.at(&format!("/commands/{name}")))
        .header("authorization", server.bearer())
        .json(&args)
        .send()
        .await
        .expect("request");
    (response.status().as_u16(), response.json().await.expect("json"))
}

#[tokio::test]
async fn commands_are_listed_with_their_args_as_the_reference() {
    let server = server();
    let response = server.http().get(server.at("/commands")).header("authorization", server.bearer()).send().await;
    let listed: Value = response.expect("request").json().await.expect("json");
    let names: Vec<&str> =
        listed["commands"].as_array().expect("list").iter().filter_map(|c| c["name"].as_str()).collect();
    assert_eq!(names, ["hello", "echo-json", "env-args", "each", "fail", "slow", "flood"], "hidden is not listed");
    assert_eq!(
        listed["commands"][0],
        json!({"name": "hello", "args": [{"name": "name", "type": "string", "required": true, "default": null,
               "description": "Who to greet"}], "description": "Say hello"})
    );
    let defaults: Vec<Value> =
        listed["commands"][1]["args"].as_array().expect("args").iter().map(|a| a["default"].clone()).collect();
    assert_eq!(defaults, [json!(null), json!("1"), json!("False"), json!("0.5"), json!("[\"a\"]"), json!(null)]);
    let client = server.client();
    assert_eq!(client.commands().await.expect("typed").len(), 7);
}

#[tokio::test]
async fn arguments_are_coerced_and_json_output_is_json() {
    let server = server();
    assert_eq!(run(&server, "hello", json!({"name": "Ada"})).await, (200, json!({"result": "Hello, Ada!"})));
    assert_eq!(
        run(&server, "echo-json", json!({"name": 5, "times": "7", "loud": "yes", "ratio": "2", "tags": ["b", "c"]}))
            .await,
        (200, json!({"result": {"name": "5", "times": 7, "loud": true, "ratio": 2.0, "tags": ["b", "c"]}}))
    );
    assert_eq!(
        run(&server, "echo-json", json!({"name": "x", "times": 3.9})).await,
        (200, json!({"result": {"name": "x", "times": 3, "loud": false, "ratio": 0.5, "tags": ["a"]}}))
    );
    assert_eq!(
        run(&server, "env-args", json!({"name": "n", "tags": ["a", "b c"]})).await,
        (200, json!({"result": "n|[\"a\",\"b c\"]|hi"}))
    );
    assert_eq!(run(&server, "each", json!({"tags": ["a", "b c"]})).await, (200, json!({"result": "[a][b c]"})));
    assert_eq!(run(&server, "hidden", json!({})).await, (200, json!({"result": "secret"})), "hidden still runs");
}

#[tokio::test]
async fn bad_arguments_are_refused_with_the_references_errors() {
    let server = server();
    let cases = [
        ("hello", json!({}), "Required argument 'name' missing", "ValueError"),
        ("hello", json!({"name": "x", "zz": 1, "extra": 2}), "Unexpected argument(s): ['extra', 'zz']; declared: ['name']", "ValueError"),
        (
            "echo-json",
            json!({"name": "x", "times": "abc"}),
            "Cannot convert argument 'times' to integer: invalid literal for int() with base 10: 'abc'",
            "TypeError",
        ),
        (
            "echo-json",
            json!({"name": "x", "times": true}),
            "Cannot convert argument 'times' to integer: JSON boolean is not an integer argument",
            "TypeError",
        ),
        (
            "echo-json",
            json!({"name": "x", "loud": "maybe"}),
            "Cannot convert argument 'loud' to boolean: Cannot parse 'maybe' as boolean; accepted values: true/false/yes/no/1/0",
            "TypeError",
        ),
        (
            "echo-json",
            json!({"name": "x", "tags": "a,b"}),
            "Cannot convert argument 'tags' to string_array: Expected a JSON array containing only strings",
            "TypeError",
        ),
    ];
    for (name, args, message, kind) in cases {
        assert_eq!(run(&server, name, args.clone()).await, (400, json!({"error": message, "type": kind})), "{args}");
    }
    let (status, body) = run(&server, "nope", json!({})).await;
    assert_eq!(
        (status, body),
        (
            404,
            json!({"error": "Unknown command 'nope'; available: each, echo-json, env-args, fail, flood, hello, slow",
                   "type": "ValueError", "code": "command_not_found"})
        )
    );
}

#[tokio::test]
async fn failures_timeouts_and_floods_are_500s_as_the_reference() {
    let server = server();
    assert_eq!(
        run(&server, "fail", json!({})).await,
        (
            500,
            json!({"error": "Command 'fail' exited with code 3: disk full", "type": "RuntimeError", "code": "command_failed"})
        )
    );
    assert_eq!(
        run(&server, "slow", json!({})).await,
        (500, json!({"error": "Command 'slow' timed out after 0.3s", "type": "TimeoutError", "code": "timeout"}))
    );
    let (status, body) = run(&server, "flood", json!({})).await;
    assert_eq!(
        (status, body["code"].as_str(), body["type"].as_str()),
        (500, Some("output_too_large"), Some("RuntimeError"))
    );
}

#[tokio::test]
async fn the_programs_exit_ends_a_command_and_its_background_child() {
    let dir = tempfile::tempdir().expect("tmp");
    let bg = dir.path().join("bg");
    let config = format!(
        "[[commands]]\nname = \"started\"\nargv = [\"/bin/sh\", \"-c\", 'sleep 40 & echo $! > {}; echo started']\ntimeout_seconds = 30\n",
        bg.display()
    );
    let path = dir.path().join("server.toml");
    std::fs::write(&path, config).expect("config");
    let server = common::server().args(["--config".to_string(), path.display().to_string()]).start();
    let started = std::time::Instant::now();
    assert_eq!(run(&server, "started", json!({})).await, (200, json!({"result": "started"})));
    assert!(started.elapsed() < std::time::Duration::from_secs(10), "answered at the exit: {:?}", started.elapsed());
    let pid = common::pid_in(&bg).await;
    assert!(common::pid_gone(pid, std::time::Duration::from_secs(5)).await, "the background sleep was killed");
}

#[tokio::test]
async fn an_invalid_commands_section_stops_the_server_with_a_clear_message() {
    let dir = tempfile::tempdir().expect("tmp");
    let path = dir.path().join("bad.toml");
    std::fs::write(&path, "[[commands]]\nname = \"x\"\nargv = [\"echo\", \"{nam}\"]\nargs = [{ name = \"name\" }]\n")
        .expect("config");
    let output = Command::new(env!("CARGO_BIN_EXE_agent-sandbox-server"))
        .args(["serve", "--host", "127.0.0.1", "--port", "0", "--pty-port", "0", "--config"])
        .arg(&path)
        .env_remove("ABX_SERVER_CONFIG")
        .output()
        .expect("run");
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("commands[0] ('x'): argv[1] uses {nam}, which is not a declared arg (did you mean 'name'?)"),
        "{stderr}"
    );
}

#[tokio::test]
async fn abx_lists_and_runs_commands() {
    let server = server();
    let abx = |args: &[&str]| {
        Command::new(common::abx())
            .args(["--url", &server.url, "--token", common::TOKEN])
            .args(args)
            .output()
            .expect("abx")
    };
    let listed = abx(&["commands"]);
    let text = String::from_utf8_lossy(&listed.stdout);
    assert!(text.lines().any(|l| l == "hello(name: string)\tSay hello"), "{text}");
    assert!(text.contains("times?: integer = 1"), "{text}");
    let ran = abx(&["run", "hello", "name=Ada"]);
    assert_eq!(String::from_utf8_lossy(&ran.stdout), "Hello, Ada!\n");
    let ran = abx(&["run", "echo-json", "name=x", "tags:=[\"p\"]"]);
    let value: Value = serde_json::from_slice(&ran.stdout).expect("json result");
    assert_eq!(value["tags"], json!(["p"]));
    let refused = abx(&["run", "hello"]);
    assert_eq!(refused.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("Required argument 'name' missing (HTTP 400)"));
}
