//! Black-box tests of the system group against the real binary: info,
//! metrics, env, ports, packages, and the `abx` verbs over them.

// Tests are separate processes without the daemon's reaper: waiting on their own children is fine.
#![allow(clippy::disallowed_methods)]

mod common;

use std::process::Command;

use abx_wire::api::ErrorCode;
use serde_json::{json, Value};

async fn send(request: reqwest::RequestBuilder) -> (u16, Value) {
    let response = request.send().await.expect("request");
    let status = response.status().as_u16();
    (status, response.json::<Value>().await.expect("JSON body"))
}

#[tokio::test]
async fn info_describes_this_machine() {
    let server = common::start();
    let info = server.client().system_info().await.expect("info");
    assert_eq!(info.os, "Linux");
    assert_eq!(info.arch, std::env::consts::ARCH);
    let stat = std::fs::read_to_string("/proc/stat").expect("stat");
    let online = stat.lines().filter(|l| l.starts_with("cpu") && l.as_bytes().get(3).is_some_and(u8::is_ascii_digit));
    assert_eq!(info.cpu_count as usize, online.count());
    assert!(info.memory_total_mb > 0 && info.memory_available_mb <= info.memory_total_mb);
    assert!(info.disk_total_gb > 0.0 && info.disk_free_gb <= info.disk_total_gb);
    let hostname = std::fs::read_to_string("/proc/sys/kernel/hostname").expect("hostname");
    assert_eq!(info.hostname, hostname.trim());
    assert_eq!(info.server_version, agent_sandbox_server::SERVER_VERSION);
    assert!(!info.kernel.is_empty());
    if let Some(cgroup) = info.cgroup {
        assert!(matches!(cgroup.version, 1 | 2), "{cgroup:?}");
        assert!(cgroup.cpu_percent.is_none(), "only metrics measure CPU use over a window");
    }
}

#[tokio::test]
async fn metrics_are_sane_and_keep_the_reference_units() {
    let server = common::start();
    let (status, raw) =
        send(server.http().get(server.at("/system/metrics")).header("authorization", server.bearer())).await;
    assert_eq!(status, 200);
    for key in ["memory_used_mb", "memory_total_mb"] {
        assert!(raw[key].is_u64(), "{key} is a whole number of MiB: {raw}");
    }
    let metrics = server.client().system_metrics().await.expect("metrics");
    assert!(metrics.memory_total_mb > 0 && metrics.memory_used_mb <= metrics.memory_total_mb);
    assert!((0.0..=100.0).contains(&metrics.memory_percent));
    assert!(metrics.disk_total_gb > 0.0 && (0.0..=100.0).contains(&metrics.disk_percent));
    assert!(metrics.uptime_seconds >= 0.0 && metrics.uptime_seconds < metrics.system_uptime_seconds);
    assert!(metrics.cpu_percent.is_some_and(|p| (0.0..=100.0).contains(&p)));
    assert!(metrics.cpu_sample_seconds.is_some_and(|s| s >= 0.1));
    if let Some(cgroup) = metrics.cgroup {
        assert!(cgroup.cpu_percent.is_none_or(|p| (0.0..=100.0).contains(&p)), "{cgroup:?}");
        assert!(cgroup.memory_current_bytes.is_none_or(|b| b > 0));
    }
}

#[tokio::test]
async fn env_is_set_for_children_and_read_back() {
    let server = common::start();
    let client = server.client();
    assert_eq!(client.set_env([("SYS_B", "2"), ("SYS_A", "a b")]).await.expect("set"), ["SYS_A", "SYS_B"]);
    let read = client.env(&["SYS_A", "SYS_B", "SYS_NOT_SET"]).await.expect("env");
    assert_eq!(read.into_iter().collect::<Vec<_>>(), [("SYS_A".into(), "a b".into()), ("SYS_B".into(), "2".into())]);
    assert_eq!(client.env(&[]).await.expect("env").get("SYS_A").map(String::as_str), Some("a b"));
}

#[tokio::test]
async fn secrets_and_credential_names_are_never_shown() {
    let server = common::server().env("PLAIN_VAR", "p").env("MY_API_KEY", "k").env("ABX_SERVER_EXTRA", "x").start();
    let env = server.client().env(&[]).await.expect("env");
    assert_eq!(env.get("PLAIN_VAR").map(String::as_str), Some("p"));
    for hidden in ["ABX_SERVER_TOKEN", "ABX_SERVER_EXTRA", "MY_API_KEY"] {
        assert!(!env.contains_key(hidden), "{hidden} shown");
    }
    assert!(!env.values().any(|v| v == common::TOKEN), "the token's value is never shown");
}

#[tokio::test]
async fn refused_assignments_answer_as_the_reference() {
    let server = common::start();
    let post = |body: Value| server.http().post(server.at("/env")).header("authorization", server.bearer()).json(&body);
    let cases = [
        (
            json!({"vars": {"ABX_SERVER_TOKEN": "stolen"}}),
            403,
            json!({"error": "Environment variable 'ABX_SERVER_TOKEN' cannot be overwritten", "type": "PolicyDenied", "code": "env_var_denied", "endpoint": "env_set"}),
        ),
        (
            json!({"vars": {"1A": "x"}}),
            400,
            json!({"error": "Invalid environment assignment '1A'", "type": "ValueError", "code": "env_invalid", "endpoint": "env_set"}),
        ),
        (
            json!({"vars": {"A": 1}}),
            400,
            json!({"error": "Invalid environment assignment 'A'", "type": "ValueError", "code": "env_invalid", "endpoint": "env_set"}),
        ),
        (
            json!({"vars": {"SHELL": "x", "HOME": "y"}}),
            403,
            json!({"error": "Cannot overwrite protected variable(s): HOME, SHELL", "type": "PermissionError"}),
        ),
        (json!({"vars": [1]}), 400, json!({"error": "'vars' must be an object", "type": "ValueError"})),
        (json!({"vars": null}), 400, json!({"error": "'vars' must be an object", "type": "ValueError"})),
    ];
    for (body, status, answer) in cases {
        assert_eq!(send(post(body.clone())).await, (status, answer), "{body}");
    }
    assert_eq!(send(post(json!({}))).await, (200, json!({"updated": []})));
    let err = server.client().set_env([("OK_1", "1"), ("abx_x", "2")]).await.expect_err("refused");
    assert_eq!((err.status(), err.code()), (Some(403), Some(&ErrorCode::EnvVarDenied)));
    assert!(server.client().env(&["OK_1"]).await.expect("env").is_empty(), "nothing is set when one is refused");
}

#[tokio::test]
async fn a_port_the_test_opens_is_listed_with_its_pid() {
    let server = common::start();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let ports = server.client().ports().await.expect("ports");
    let mine: Vec<_> = ports.iter().filter(|p| p.port == port).collect();
    assert_eq!(mine.len(), 1, "{ports:?}");
    assert_eq!((mine[0].protocol.as_str(), mine[0].address.as_str()), ("tcp", "127.0.0.1"));
    assert_eq!(mine[0].pid, Some(std::process::id()));
    let api_port: u16 = server.url.rsplit(':').next().and_then(|p| p.parse().ok()).expect("port");
    assert!(ports.iter().any(|p| p.port == api_port && p.pid == Some(server.pid())), "the server's own port");
    assert!(ports.windows(2).all(|w| w[0].port <= w[1].port), "sorted by port");
}

#[tokio::test]
async fn packages_refuse_unknown_managers_and_list_dpkg() {
    let server = common::start();
    let (status, body) =
        send(server.http().get(server.at("/packages?manager=apt")).header("authorization", server.bearer())).await;
    assert_eq!(
        (status, body),
        (400, json!({"error": "Unsupported package manager: 'apt'; use 'pip', 'npm' or 'dpkg'", "type": "ValueError"}))
    );
    let has_dpkg = Command::new("dpkg-query").arg("--version").output().is_ok_and(|o| o.status.success());
    if has_dpkg {
        let list = server.client().packages("dpkg").await.expect("dpkg");
        assert_eq!(list.manager, "dpkg");
        assert!(list.packages.iter().any(|p| p.name == "dpkg" && !p.version.is_empty()));
    }
}

#[tokio::test]
async fn a_missing_manager_lists_nothing() {
    // No PATH: no manager can be found, as on a sandbox without pip or npm.
    let server = common::server().env("PATH", "/nonexistent").start();
    for manager in ["pip", "npm", "dpkg"] {
        let list = server.client().packages(manager).await.expect("listing");
        assert_eq!((list.manager.as_str(), list.packages.len()), (manager, 0));
    }
    assert_eq!(server.client().system_info().await.expect("info").python_version, "");
}

#[tokio::test]
async fn a_probes_exit_ends_it_and_kills_its_background_child() {
    use std::os::unix::fs::PermissionsExt;
    let bin = tempfile::tempdir().expect("tmp");
    let bg = bin.path().join("bg");
    let npm = bin.path().join("npm");
    let script = format!(
        "#!/bin/sh\nsleep 40 &\necho $! > {}\necho '{{\"dependencies\": {{\"left-pad\": {{\"version\": \"1.3.0\"}}}}}}'\n",
        bg.display()
    );
    std::fs::write(&npm, script).expect("npm");
    std::fs::set_permissions(&npm, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let server = common::server().env("PATH", &format!("{}:/usr/bin:/bin", bin.path().display())).start();
    let started = std::time::Instant::now();
    let list = server.client().packages("npm").await.expect("listing");
    assert_eq!(
        list.packages.iter().map(|p| (p.name.as_str(), p.version.as_str())).collect::<Vec<_>>(),
        [("left-pad", "1.3.0")]
    );
    assert!(started.elapsed() < std::time::Duration::from_secs(10), "answered at the exit: {:?}", started.elapsed());
    let pid = common::pid_in(&bg).await;
    assert!(common::pid_gone(pid, std::time::Duration::from_secs(5)).await, "the background sleep was killed");
}

#[test]
fn abx_verbs_drive_the_system_group() {
    let server = common::start();
    let abx = |args: &[&str]| {
        Command::new(common::abx())
            .args(args)
            .env("ABX_SERVER_URL", &server.url)
            .env("ABX_SERVER_TOKEN", common::TOKEN)
            .output()
            .expect("run abx")
    };
    let out = abx(&["setenv", "CLI_A=x=y", "CLI_B="]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "CLI_A\nCLI_B\n");
    let out = abx(&["env", "CLI_A", "CLI_B"]);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "CLI_A=x=y\nCLI_B=\n");
    let out = abx(&["setenv", "PATH=/tmp"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("protected variable"));
    let out = abx(&["ports"]);
    let api = server.url.trim_start_matches("http://");
    assert!(String::from_utf8_lossy(&out.stdout)
        .lines()
        .any(|l| l.starts_with(&format!("tcp\t{api}\t{}", server.pid()))));
    let out = abx(&["metrics"]);
    let metrics: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert!(metrics["memory_total_mb"].as_u64().is_some_and(|m| m > 0));
}
