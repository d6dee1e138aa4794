//! Every credential is a door too: envd's `/init` and its access token,
//! signed `/files` URLs, ambiguous credentials, guessing from one address,
//! and `GET /metrics`'s credentials.

mod common;

use abx_domain::policy::signed::signature;
use abx_wire::endpoints::SignedOp;
use common::envd::{call as envd_call, envd};
use common::TestServer;
use serde_json::{json, Value};

const ADMIN: &str = "admin-tok-3b1";
const READER: &str = "reader-tok-9c4";

/// A server whose policy has an admin (`*`) and a reader (`files:read`), both from the environment.
fn two_tokens() -> TestServer {
    let policy = json!({"auth": {"tokens": [
        {"id": "admin", "scopes": ["*"], "token_env": "ABX_TEST_CR_ADMIN"},
        {"id": "reader", "scopes": ["files:read"], "token_env": "ABX_TEST_CR_READER"},
    ]}});
    common::server()
        .env("ABX_TEST_CR_ADMIN", ADMIN)
        .env("ABX_TEST_CR_READER", READER)
        .env("ABX_SERVER_POLICY", &policy.to_string())
        .start()
}

async fn init(server: &TestServer, token: Option<&str>, body: Value) -> (u16, Value) {
    let mut request = reqwest::Client::new().post(format!("{}/init", envd(server))).json(&body);
    if let Some(token) = token {
        request = request.header("x-access-token", token);
    }
    let response = request.send().await.expect("init");
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

#[tokio::test]
async fn init_needs_an_orchestrator_and_its_token_is_no_stronger_than_its_setter() {
    let server = two_tokens();
    let (status, body) = init(&server, Some(READER), json!({"accessToken": "minted", "envVars": {"A": "1"}})).await;
    assert_eq!(status, 403, "a file reader cannot init: {body}");
    assert!(body["message"].as_str().is_some_and(|m| m.contains("envd:init")), "{body}");
    let (status, _) = init(&server, None, json!({"accessToken": "minted"})).await;
    assert_eq!(status, 401);
    for (vars, why) in [
        (json!({"PATH": "/evil"}), "PATH is protected"),
        (json!({"ABX_TEST_CR_ADMIN": "x"}), "a token's variable is a secret"),
        (json!({"1BAD": "x"}), "an invalid name"),
    ] {
        let (status, body) = init(&server, Some(ADMIN), json!({"envVars": vars})).await;
        assert!(matches!(status, 400 | 403), "{why}: {status} {body}");
    }
    let (status, _) = init(&server, Some(ADMIN), json!({"envVars": {"GREETING": "hi"}})).await;
    assert_eq!(status, 204);
    let envs = reqwest::Client::new().get(format!("{}/envs", envd(&server))).header("x-access-token", ADMIN);
    let envs: Value = envs.send().await.expect("envs").json().await.expect("JSON");
    assert_eq!(envs, json!({"GREETING": "hi"}));

    // A token set by a reader-scoped setter would be a reader; the admin's is an admin.
    let (status, _) = init(&server, Some(ADMIN), json!({"accessToken": "orchestrated"})).await;
    assert_eq!(status, 204);
    let (status, _) = envd_call(&server, "process.Process/List", json!({}), Some("orchestrated")).await;
    assert_eq!(status, 200);
    let (status, _) = init(&server, Some(READER), json!({"accessToken": ""})).await;
    assert_eq!(status, 403, "a reader cannot clear the orchestrator's token");
    let (status, _) = envd_call(&server, "process.Process/List", json!({}), Some("orchestrated")).await;
    assert_eq!(status, 200);
}

#[tokio::test]
async fn init_on_an_open_plane_closes_it_with_the_setters_scopes() {
    let server = common::server().token(None).start();
    let (status, _) = envd_call(&server, "filesystem.Filesystem/Stat", json!({"path": "."}), None).await;
    assert_eq!(status, 200);
    assert_eq!(init(&server, None, json!({"accessToken": "first"})).await.0, 204);
    let (status, _) = envd_call(&server, "filesystem.Filesystem/Stat", json!({"path": "."}), None).await;
    assert_eq!(status, 401, "the access token now protects the plane");
    let (status, _) = envd_call(&server, "filesystem.Filesystem/Stat", json!({"path": "."}), Some("first")).await;
    assert_eq!(status, 200);
}

async fn download(server: &TestServer, query: &str, headers: &[(&str, &str)]) -> u16 {
    let mut request = reqwest::Client::new().get(format!("{}/files?{query}", envd(server)));
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    request.send().await.expect("download").status().as_u16()
}

#[tokio::test]
async fn a_signed_url_acts_as_its_signer_for_the_path_operation_and_user_it_names() {
    let server = two_tokens();
    std::fs::write(server.base.join("a.txt"), "a").expect("seed");
    let read = |token: &str, user: &str| signature("a.txt", SignedOp::Read, user, token, None);
    assert_eq!(download(&server, &format!("path=a.txt&signature={}", read(READER, "")), &[]).await, 200);
    let by_server_token = read(common::TOKEN, "");
    let status = download(&server, &format!("path=a.txt&signature={by_server_token}"), &[]).await;
    assert_eq!(status, 401, "ABX_SERVER_TOKEN no longer signs once policy tokens replace it");
    let status = download(&server, &format!("path=b.txt&signature={}", read(READER, "")), &[]).await;
    assert_eq!(status, 401, "another path");
    let status = download(&server, &format!("path=a.txt&username=root&signature={}", read(READER, "")), &[]).await;
    assert_eq!(status, 401, "another user than the signed one");
    let expired = signature("a.txt", SignedOp::Read, "", READER, Some(1));
    let status = download(&server, &format!("path=a.txt&signature={expired}&signature_expiration=1"), &[]).await;
    assert_eq!(status, 401);

    let upload = |token: &'static str| {
        let write = signature("up.txt", SignedOp::Write, "", token, None);
        reqwest::Client::new()
            .post(format!("{}/files?path=up.txt&signature={write}", envd(&server)))
            .header("content-type", "application/octet-stream")
            .body("x")
            .send()
    };
    let status = upload(READER).await.expect("upload").status();
    assert_eq!(status, 403, "the reader's signature carries the reader's scopes");
    assert!(!server.base.join("up.txt").exists());
    assert_eq!(upload(ADMIN).await.expect("upload").status(), 200);
    assert_eq!(std::fs::read_to_string(server.base.join("up.txt")).expect("written"), "x");
}

#[tokio::test]
async fn several_bearer_tokens_are_ambiguous_and_guessing_is_slowed_down() {
    let server = common::start();
    let guesses = server
        .http()
        .get(server.at("/files/stat?path=."))
        .header("authorization", "Bearer a")
        .header("authorization", "Bearer b")
        .header("authorization", server.bearer())
        .send()
        .await
        .expect("send");
    assert_eq!(guesses.status(), 400);
    let body: Value = guesses.json().await.expect("JSON");
    assert_eq!(body["code"], "ambiguous_credentials");
    let mut statuses = Vec::new();
    let started = std::time::Instant::now();
    for _ in 0..40 {
        let wrong = server.http().get(server.at("/files/stat?path=.")).header("authorization", "Bearer wrong");
        statuses.push(wrong.send().await.expect("send").status().as_u16());
    }
    // A burst of 30 failures, then one more per second elapsed (a loaded
    // machine may take over a second for the 40).
    let refilled = usize::try_from(started.elapsed().as_secs()).expect("seconds");
    let failed = statuses.iter().filter(|s| **s == 401).count();
    assert!((30..=30 + refilled).contains(&failed), "{statuses:?} in {:?}", started.elapsed());
    assert_eq!(&statuses[..30], &[401; 30], "{statuses:?}");
    assert!(statuses.contains(&429), "{statuses:?}");
    let throttled = server.http().get(server.at("/files/stat?path=.")).header("authorization", server.bearer());
    let throttled = throttled.send().await.expect("send");
    assert_eq!(throttled.status(), 429, "held back: the credentials are not even checked");
    assert!(throttled.headers().contains_key("retry-after"));
    let body: Value = throttled.json().await.expect("JSON");
    assert_eq!(body["code"], "auth_throttled");
    let health = server.http().get(server.at("/health")).send().await.expect("health");
    assert_eq!(health.status(), 200, "probes are never held back");
}

#[tokio::test]
async fn metrics_count_every_port_and_need_credentials_unless_configured() {
    let server = common::start();
    let (status, _) = envd_call(&server, "filesystem.Filesystem/Stat", json!({"path": "."}), Some(common::TOKEN)).await;
    assert_eq!(status, 200);
    let anonymous = server.http().get(server.at("/metrics")).send().await.expect("metrics");
    assert_eq!(anonymous.status(), 401);
    let scrape = server.http().get(server.at("/metrics")).header("authorization", server.bearer());
    let scrape = scrape.send().await.expect("metrics");
    assert_eq!(scrape.status(), 200);
    assert!(scrape.headers()["content-type"].to_str().expect("type").starts_with("application/openmetrics-text"));
    let text = scrape.text().await.expect("text");
    assert!(text.contains(r#"abx_requests_total{port="envd",endpoint="envd_stat",status="200"} 1"#), "{text}");
    assert!(
        text.contains(r#"abx_request_duration_seconds_bucket{le="#)
            || text.contains("abx_request_duration_seconds_bucket{")
    );
    assert!(text.contains("abx_processes 0") && text.contains("abx_terminals 0"), "{text}");

    let open = common::server().env("ABX_SERVER_METRICS_ANONYMOUS", "true").start();
    let anonymous = open.http().get(open.at("/metrics")).send().await.expect("metrics");
    assert_eq!(anonymous.status(), 200);
}
