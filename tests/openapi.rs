//! Black-box tests of `GET /openapi.json`: served behind the pipeline, the
//! committed `docs/openapi.json` byte for byte, every operation of the
//! discovery document in it; and live answers of the cases contract fuzzing
//! found undocumented, checked against the document (docs/RELIABILITY.md).

// Tests are separate processes without the daemon's reaper: waiting on their own children is fine.
#![allow(clippy::disallowed_methods)]

mod common;

use serde_json::{json, Value};

const COMMITTED: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/openapi.json");

async fn document(server: &common::TestServer) -> Value {
    let response = server.http().get(server.at("/openapi.json")).bearer_auth(common::TOKEN).send().await.expect("get");
    assert_eq!(response.status(), 200);
    response.json().await.expect("JSON")
}

/// The statuses the document gives `method path`.
fn documented(doc: &Value, method: &str, path: &str) -> Vec<String> {
    let responses = doc["paths"][path][method]["responses"].as_object();
    responses.unwrap_or_else(|| panic!("{method} {path} is not in the document")).keys().cloned().collect()
}

#[tokio::test]
async fn the_document_is_served_behind_credentials_and_is_the_committed_one() {
    let server = common::start();
    let anonymous = server.http().get(server.at("/openapi.json")).send().await.expect("get");
    assert_eq!(anonymous.status(), 401);
    let body: Value = anonymous.json().await.expect("error body");
    assert_eq!(body, json!({"error": "unauthorized", "type": "AuthError", "code": "unauthorized"}));

    let response = server.http().get(server.at("/openapi.json")).bearer_auth(common::TOKEN).send().await.expect("get");
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "application/json");
    let bytes = response.bytes().await.expect("body");
    let committed = std::fs::read(COMMITTED).expect("docs/openapi.json");
    assert!(
        bytes == committed,
        "the served document is not docs/openapi.json (ABX_UPDATE_OPENAPI=1 cargo test --lib openapi::)"
    );

    let doc: Value = serde_json::from_slice(&bytes).expect("JSON");
    assert_eq!(doc["openapi"], "3.1.0");
    assert_eq!(doc["info"]["version"], env!("CARGO_PKG_VERSION"));
    let caps = server.client().capabilities().await.expect("capabilities");
    let api_port =
        caps.endpoints.iter().filter(|(_, e)| e.method != "WS" && e.group != "envd" && e.group != "code_interpreter");
    let mut count = 0;
    for (id, endpoint) in api_port {
        let op = &doc["paths"][&endpoint.path][endpoint.method.to_ascii_lowercase()];
        assert_eq!(op["operationId"], json!(id), "{} {}", endpoint.method, endpoint.path);
        count += 1;
    }
    let operations: usize =
        doc["paths"].as_object().expect("paths").values().map(|i| i.as_object().map_or(0, |o| o.len())).sum();
    // `/mcp`'s row also serves GET (a session's stream) and DELETE (ends it).
    assert_eq!(doc["paths"]["/mcp"]["get"]["operationId"], "mcp_stream");
    assert_eq!(doc["paths"]["/mcp"]["delete"]["operationId"], "mcp_end");
    assert_eq!(operations, count + 2, "the document has exactly the API port's operations");
    assert!(doc["components"]["securitySchemes"]["bearer"]["scheme"] == "bearer");
    assert_eq!(doc["components"]["securitySchemes"]["accessToken"]["name"], "X-Access-Token");
}

/// A client that accepts gzip gets the embedded compressed bytes; they inflate to the committed document.
#[tokio::test]
async fn a_client_that_accepts_gzip_gets_the_document_gzip_encoded() {
    use std::io::Read;
    let server = common::start();
    let get = |accept: &'static str| {
        server
            .http()
            .get(server.at("/openapi.json"))
            .bearer_auth(common::TOKEN)
            .header("Accept-Encoding", accept)
            .send()
    };
    let committed = std::fs::read(COMMITTED).expect("docs/openapi.json");

    let response = get("gzip, deflate").await.expect("get");
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "application/json");
    assert_eq!(response.headers()["content-encoding"], "gzip");
    assert_eq!(response.headers()["vary"], "Accept-Encoding");
    let compressed = response.bytes().await.expect("body");
    assert!(compressed.len() * 4 < committed.len(), "{} bytes compressed", compressed.len());
    let mut inflated = Vec::new();
    flate2::read::GzDecoder::new(&compressed[..]).read_to_end(&mut inflated).expect("gzip");
    assert!(inflated == committed, "the inflated document is not docs/openapi.json");

    for accept in ["identity", "gzip;q=0", "br"] {
        let response = get(accept).await.expect("get");
        assert_eq!(response.status(), 200, "{accept}");
        assert!(response.headers().get("content-encoding").is_none(), "{accept}");
        assert!(response.bytes().await.expect("body") == committed, "{accept}: not the committed document");
    }
}

#[tokio::test]
async fn the_access_token_header_works_and_capabilities_rules_govern_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let policy = dir.path().join("policy.json");
    std::fs::write(&policy, json!({"endpoints": {"capabilities": {"limits": {"rate_per_minute": 1}}}}).to_string())
        .expect("policy");
    let server = common::server().args(["--policy".to_string(), policy.display().to_string()]).start();
    let get = |path: &str| server.http().get(server.at(path)).header("X-Access-Token", common::TOKEN).send();
    assert_eq!(get("/openapi.json").await.expect("get").status(), 200);
    let limited = get("/capabilities").await.expect("get");
    assert_eq!(limited.status(), 429, "one bucket for the document and the discovery it extends");
    let body: Value = limited.json().await.expect("error body");
    assert_eq!((body["code"].as_str(), body["endpoint"].as_str()), (Some("rate_limited"), Some("capabilities")));
}

/// Findings of the contract run: answers the first documents left out.
#[tokio::test]
async fn answers_contract_fuzzing_found_undocumented_are_documented() {
    let server = common::start();
    let doc = document(&server).await;
    let http = server.http();
    let authed = |request: reqwest::RequestBuilder| request.bearer_auth(common::TOKEN).send();

    // `GET /process/{pid}` with pid `start` is the route `POST /process/start`: 405.
    let shadowed = authed(http.get(server.at("/process/start"))).await.expect("get");
    assert_eq!(shadowed.status(), 405);
    assert!(documented(&doc, "get", "/process/{pid}").contains(&"405".to_string()));

    // stdin of a process started without a stdin pipe, output of one without capture: 409.
    let started: Value = authed(http.post(server.at("/process/start")).json(&json!({"command": "sleep 5"})))
        .await
        .expect("start")
        .json()
        .await
        .expect("JSON");
    let pid = started["pid"].as_i64().expect("pid");
    let stdin = authed(http.post(server.at(&format!("/process/{pid}/stdin"))).json(&json!({"data": "x"})));
    assert_eq!(stdin.await.expect("stdin").status(), 409);
    assert!(documented(&doc, "post", "/process/{pid}/stdin").contains(&"409".to_string()));
    let output = authed(http.get(server.at(&format!("/process/{pid}/output")))).await.expect("output");
    assert_eq!(output.status(), 409);
    assert!(documented(&doc, "get", "/process/{pid}/output").contains(&"409".to_string()));
    authed(http.post(server.at(&format!("/process/{pid}/signal"))).json(&json!({"signal": 9}))).await.expect("kill");

    // `/metrics` is OpenMetrics text, and says so.
    let metrics = authed(http.get(server.at("/metrics"))).await.expect("metrics");
    let media =
        metrics.headers()["content-type"].to_str().expect("ascii").split(';').next().unwrap_or_default().to_string();
    let content = doc["paths"]["/metrics"]["get"]["responses"]["200"]["content"].as_object().expect("content");
    assert!(content.contains_key(&media), "{media} is not documented: {content:?}");

    // Server-sent events are described one event at a time: `event` and JSON `data`.
    let stream =
        authed(http.post(server.at("/shell/stream")).json(&json!({"command": "echo hi"}))).await.expect("stream");
    let text = stream.text().await.expect("events");
    let schema = &doc["paths"]["/shell/stream"]["post"]["responses"]["200"]["content"]["text/event-stream"]["schema"];
    let names = schema["properties"]["event"]["enum"].as_array().expect("event names");
    for line in text.lines().filter_map(|l| l.strip_prefix("event: ")) {
        assert!(names.contains(&json!(line)), "event {line} is not documented");
    }
    assert!(text.contains("event: exit"), "{text}");
}
