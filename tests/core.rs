//! Black-box tests of the core group, auth, errors and lifecycle, against the real binary.

// Tests are separate processes without the daemon's reaper: waiting on their own children is fine.
#![allow(clippy::disallowed_methods)]

mod common;

use std::time::Duration;

use abx_wire::api::CheckRequest;
use nix::sys::signal::Signal;
use nix::sys::wait::WaitStatus;
use serde_json::{json, Value};

async fn get_json(response: reqwest::Response) -> (u16, Value) {
    let status = response.status().as_u16();
    let body = response.json::<Value>().await.expect("JSON body");
    (status, body)
}

#[tokio::test]
async fn health_is_anonymous_and_ok() {
    let server = common::start();
    let response = server.http().get(server.at("/health")).send().await.expect("request");
    assert_eq!(response.version(), reqwest::Version::HTTP_11);
    assert_eq!(get_json(response).await, (200, json!({"status": "ok"})));
    assert!(server.client().health().await.expect("health"));
    let trailing = server.http().get(server.at("/health/")).send().await.expect("request");
    assert_eq!(trailing.status(), 200, "a trailing slash is ignored, as the reference does");
}

#[tokio::test]
async fn capabilities_describe_groups_identity_and_endpoints() {
    let server = common::start();
    let doc = server.client().capabilities().await.expect("capabilities");
    assert_eq!(doc.api_version, 2);
    assert_eq!(doc.identity.id, "server");
    assert_eq!(doc.identity.scopes, vec!["*".to_string()]);
    assert_eq!(doc.policy.preset, "default");
    assert!(doc.policy.configured, "a server token counts as configuration, as the reference");
    let expected_groups = [
        ("core", true),
        ("commands", true),
        ("file_ops", true),
        ("process", true),
        ("terminal", true),
        ("system", true),
        ("dev_tools", false),
        ("browser", false),
        ("agents", false),
        ("envd", true),
        ("code_interpreter", true),
    ];
    for (group, on) in expected_groups {
        assert_eq!(doc.groups[group], on, "{group}");
    }
    assert_eq!((doc.group_summary["agents"].enabled, doc.group_summary["agents"].total), (0, 70));
    assert_eq!(
        doc.endpoints.len(),
        153,
        "the reference's 116, 4 file extensions, /openapi.json, /metrics, /mcp, envd's 23, the code port's 7"
    );
    let stat = &doc.endpoints["envd_stat"];
    assert_eq!((stat.group.as_str(), stat.path.as_str(), stat.allowed), ("envd", "/filesystem.Filesystem/Stat", true));
    assert!(stat.paths.is_some(), "files_stat's path rules reach it");
    let health = &doc.endpoints["health"];
    assert!(health.enabled && health.allowed && health.scopes.is_empty());
    let code = &doc.endpoints["code_run"];
    assert_eq!((code.enabled, code.allowed), (false, false));
    assert_eq!(code.reason.as_deref(), Some("endpoint_disabled"));
    assert_eq!(code.rule.as_deref(), Some("default:opt-in:dev_tools"));
    assert!(code.limits.is_none(), "limits are disclosed only to callers who may call");
    assert_eq!(doc.endpoints["pty_connect"].method, "WS");
    assert_eq!(doc.warnings, vec!["identity holds the wildcard scope '*'".to_string()]);
}

#[tokio::test]
async fn enabled_groups_turn_opt_in_groups_on() {
    let server = common::server().env("ABX_SERVER_ENABLED_GROUPS", "dev_tools,browser").start();
    let doc = server.client().capabilities().await.expect("capabilities");
    assert!(doc.groups["dev_tools"] && doc.groups["browser"] && !doc.groups["agents"]);
    assert!(doc.endpoints["code_run"].enabled);
}

#[tokio::test]
async fn unknown_groups_stop_the_server_from_starting() {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_agent-sandbox-server"))
        .args(["serve", "--host", "127.0.0.1", "--port", "0", "--enabled-groups", "devtools"])
        .output()
        .expect("run");
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("unknown group 'devtools' (did you mean 'dev_tools'?)"), "{stderr}");
}

#[tokio::test]
async fn check_answers_from_the_same_rules() {
    let server = common::start();
    let client = server.client();
    let check = |endpoint: &str, path: Option<&str>| CheckRequest {
        endpoint: endpoint.into(),
        path: path.map(str::to_string),
        ..CheckRequest::default()
    };
    let disabled = client.check(&check("code_run", None)).await.expect("check");
    assert!(!disabled.allowed);
    assert_eq!(disabled.code.as_deref(), Some("endpoint_disabled"));
    assert_eq!(disabled.rule.as_deref(), Some("default:opt-in:dev_tools"));
    let unknown = client.check(&check("nope", None)).await.expect("check");
    assert_eq!(unknown.code.as_deref(), Some("unknown_endpoint"));
    let allowed = client.check(&check("capabilities", None)).await.expect("check");
    assert!(allowed.allowed && allowed.code.is_none());

    let raw = |body: &str| {
        server
            .http()
            .post(server.at("/capabilities/check"))
            .header("authorization", server.bearer())
            .body(body.to_string())
    };
    let (status, body) = get_json(raw("{}").send().await.expect("request")).await;
    assert_eq!((status, body), (400, json!({"error": "Missing or invalid 'endpoint'", "type": "ValueError"})));
    let (status, body) =
        get_json(raw(r#"{"endpoint": "files_stat", "op": "fly"}"#).send().await.expect("request")).await;
    assert_eq!((status, body["error"].as_str()), (400, Some("'op' must be read, write, delete or exec")));
}

#[tokio::test]
async fn auth_accepts_bearer_and_access_token_and_refuses_the_rest() {
    let server = common::start();
    let get = |headers: &[(&str, &str)]| {
        let mut request = server.http().get(server.at("/capabilities"));
        for (k, v) in headers {
            request = request.header(*k, *v);
        }
        request.send()
    };
    let bearer = server.bearer();
    assert_eq!(get(&[("authorization", &bearer)]).await.expect("request").status(), 200);
    assert_eq!(get(&[("x-access-token", common::TOKEN)]).await.expect("request").status(), 200);
    let unauthorized = json!({"error": "unauthorized", "type": "AuthError", "code": "unauthorized"});
    assert_eq!(get_json(get(&[]).await.expect("request")).await, (401, unauthorized.clone()));
    assert_eq!(
        get_json(get(&[("authorization", "Bearer wrong")]).await.expect("request")).await,
        (401, unauthorized.clone())
    );
    assert_eq!(
        get_json(get(&[("authorization", "Basic dGVzdA==")]).await.expect("request")).await,
        (401, unauthorized)
    );
    let request =
        server.http().get(server.at("/capabilities")).header("x-access-token", "a").header("x-access-token", "b");
    let (status, body) = get_json(request.send().await.expect("request")).await;
    assert_eq!(
        (status, body),
        (
            400,
            json!({"error": "Multiple distinct credential headers", "type": "ValueError", "code": "ambiguous_credentials"})
        )
    );
}

#[tokio::test]
async fn without_a_token_callers_are_anonymous_with_every_scope() {
    let server = common::server().token(None).start();
    let anonymous = server.http().get(server.at("/capabilities")).send().await.expect("request");
    let (status, body) = get_json(anonymous).await;
    assert_eq!(status, 200);
    assert_eq!(body["identity"], json!({"id": "anonymous", "scopes": ["*"]}));
    let gateway = server.http().get(server.at("/capabilities")).header("x-access-token", "gateway-token").send().await;
    assert_eq!(gateway.expect("request").status(), 200, "a gateway's token is not a failed login");
}

#[tokio::test]
async fn a_non_loopback_bind_without_a_token_warns_loudly() {
    // The warning is logged before the `listening` line, through the same ordered writer.
    let server = common::server().token(None).host("0.0.0.0").start();
    let log = server.wait_for_log("listening", Duration::from_secs(5));
    assert!(log.contains("NO TOKEN IS SET"), "{log}");
    let loopback = common::server().token(None).start();
    assert!(!loopback.wait_for_log("listening", Duration::from_secs(5)).contains("NO TOKEN IS SET"));
    let guarded = common::server().host("0.0.0.0").start();
    assert!(!guarded.wait_for_log("listening", Duration::from_secs(5)).contains("NO TOKEN IS SET"));
}

#[tokio::test]
async fn the_token_never_reaches_the_log() {
    let server = common::start();
    let client = server.client();
    client.capabilities().await.expect("capabilities");
    let refused =
        server.http().get(server.at("/capabilities")).header("authorization", "Bearer not-the-token").send().await;
    assert_eq!(refused.expect("request").status(), 401);
    // The refused request is the last one; once its access line is written, everything is.
    let log = server.wait_for_log("status=401", Duration::from_secs(5));
    assert!(log.contains("endpoint=\"capabilities\""), "{log}");
    assert!(!log.contains(common::TOKEN), "token leaked into the log");
    assert!(!log.contains("not-the-token"), "presented credentials leaked into the log");
}

#[tokio::test]
async fn error_statuses_have_the_reference_body() {
    let server = common::start();
    let http = server.http();
    let bearer = server.bearer();

    let (status, body) = get_json(http.get(server.at("/nope")).send().await.expect("request")).await;
    assert_eq!((status, body), (404, json!({"error": "Not found: /nope", "type": "ValueError"})));

    let (status, body) = get_json(http.put(server.at("/health")).send().await.expect("request")).await;
    assert_eq!(
        (status, body),
        (
            405,
            json!({"error": "Method PUT is not allowed on /health", "type": "ValueError", "code": "method_not_allowed"})
        )
    );

    let post =
        |body: &'static str| http.post(server.at("/capabilities/check")).header("authorization", &bearer).body(body);
    let (status, body) = get_json(post("{bad").send().await.expect("request")).await;
    assert_eq!(status, 400);
    assert_eq!(body["type"], "ValueError");
    assert!(body["error"].as_str().is_some_and(|e| e.starts_with("Invalid JSON: ")), "{body}");
    for not_an_object in ["[1]", "null", "\"text\"", "3"] {
        let (status, body) = get_json(post(not_an_object).send().await.expect("request")).await;
        assert_eq!(
            (status, body),
            (400, json!({"error": "Invalid JSON: the body must be a JSON object", "type": "ValueError"})),
            "{not_an_object}"
        );
    }

    let oversize = vec![b' '; 10 * 1024 * 1024 + 1];
    let response =
        http.post(server.at("/capabilities/check")).header("authorization", &bearer).body(oversize).send().await;
    let (status, body) = get_json(response.expect("the 413 reaches the client")).await;
    assert_eq!(
        (status, body),
        (
            413,
            json!({
                "error": "Request body too large (10485761 bytes); limit is 10485760",
                "type": "ValueError",
                "code": "payload_too_large",
                "endpoint": "capabilities_check",
                "limit": 10485760,
            })
        )
    );
    assert!(server.client().health().await.expect("still serving"));
}

#[tokio::test]
async fn disabled_endpoints_say_why_and_every_endpoint_is_served() {
    let server = common::server().env("ABX_SERVER_ENABLED_GROUPS", "agents").start();
    let http = server.http();
    let bearer = server.bearer();
    // Every row of the table has a handler in this build: with the opt-in
    // agents group on, no endpoint is reported (or answers) not implemented.
    let doc = server.client().capabilities().await.expect("capabilities");
    let unserved: Vec<&String> = doc
        .endpoints
        .iter()
        .filter(|(_, e)| e.reason.as_deref() == Some("not_implemented"))
        .map(|(id, _)| id)
        .collect();
    assert!(unserved.is_empty(), "not implemented: {unserved:?}");
    let agents = &doc.endpoints["agents_definitions_list"];
    assert_eq!((agents.enabled, agents.allowed), (true, true));

    let (status, body) = get_json(
        http.post(server.at("/code/run")).header("authorization", &bearer).body("{}").send().await.expect("request"),
    )
    .await;
    assert_eq!(status, 404);
    assert_eq!(body["code"], "endpoint_disabled");
    assert_eq!(body["endpoint"], "code_run");
    assert_eq!(body["rule"], "default:opt-in:dev_tools");
    assert_eq!(body["type"], "ValueError");
}

#[tokio::test]
async fn repeated_query_parameters_are_refused() {
    let server = common::start();
    let response =
        server.http().get(server.at("/capabilities?a=1&a=2")).header("authorization", server.bearer()).send().await;
    let (status, body) = get_json(response.expect("request")).await;
    assert_eq!(
        (status, body),
        (
            400,
            json!({"error": "Repeated query parameters are not allowed", "type": "ValueError", "code": "duplicate_parameter", "endpoint": "capabilities"})
        )
    );
}

#[tokio::test]
async fn sigterm_stops_the_server_with_exit_code_zero() {
    let mut server = common::start();
    assert!(server.client().health().await.expect("health"));
    let status = server.signal_and_wait(Signal::SIGTERM, Duration::from_secs(10));
    assert!(matches!(status, Some(WaitStatus::Exited(_, 0))), "{status:?}");
}

#[tokio::test]
async fn sigint_stops_the_server_with_exit_code_zero() {
    let mut server = common::start();
    let status = server.signal_and_wait(Signal::SIGINT, Duration::from_secs(10));
    assert!(matches!(status, Some(WaitStatus::Exited(_, 0))), "{status:?}");
}
