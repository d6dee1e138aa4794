//! Vaults and vault credentials against the real binary: the objects and
//! their paging, bad input on every endpoint in the OpenAI envelope, a
//! secret that reaches the agent CLI's environment and is echoed nowhere
//! (answers, lists, events, state files, the server's log), and what a
//! restart keeps (vaults and credential metadata) and loses (secrets).

mod common;

use std::path::Path;

use common::agents::{agents_server, call, create, script, wait_idle, Reply};
use common::TestServer;
use serde_json::{json, Value};

/// The token every test stores; it must never be seen again.
const TOKEN: &str = "vault-secret-7f3a9c2e41d8";
const MCP_URL: &str = "https://mcp.example.com/mcp";

/// A `codex` that reads its prompt, records the header its MCP server would
/// get (in `seen` of its working directory), and prints it, alone and with
/// its scheme, in an assistant message.
const FAKE_CODEX: &str = r#"if [ "$1" = "--version" ]; then echo 'codex-cli 0.0.0-vaults'; exit 0; fi
cat > /dev/null
printf '%s' "$ABX_MCP_DOCS_AUTHORIZATION" > seen
tok="${ABX_MCP_DOCS_AUTHORIZATION#Bearer }"
echo '{"type":"thread.started","thread_id":"0199a213-81c0-7800-8aa1-bbab2a035a53"}'
echo '{"type":"turn.started"}'
b64=$(printf '%s' "$ABX_MCP_DOCS_AUTHORIZATION" | base64 -w0)
hex=$(printf '%s' "$tok" | od -An -tx1 | tr -d ' \n')
printf '{"type":"item.completed","item":{"id":"item_0","type":"agent_message","text":"header=%s token=%s b64=%s hex=%s"}}\n' "$ABX_MCP_DOCS_AUTHORIZATION" "$tok" "$b64" "$hex"
echo '{"type":"turn.completed","usage":{"input_tokens":1,"cached_input_tokens":0,"output_tokens":1}}'"#;

fn assert_openai_error(reply: &Reply, status: u16, code: &str, param: Option<&str>) {
    assert_eq!(reply.status, status, "{}", reply.body);
    let error = &reply.body["error"];
    assert_eq!((error["code"].as_str(), error["param"].as_str()), (Some(code), param), "{}", reply.body);
    let kind = if status == 404 { "not_found_error" } else { "invalid_request_error" };
    assert_eq!(error["type"], kind, "{}", reply.body);
    assert_eq!((reply.header("x-should-retry"), reply.header("x-agent-sandbox-local")), (Some("false"), Some("1")));
}

/// The base64 of `header` and the hex of `token`, as the fake CLI prints them.
fn encodings(header: &str, token: &str) -> (String, String) {
    use base64::Engine as _;
    let hex: String = token.bytes().map(|b| format!("{b:02x}")).collect();
    (base64::engine::general_purpose::STANDARD.encode(header), hex)
}

/// Every 16-character piece of `text` past its first 12 (which encode `Bearer`).
fn windows(text: &str) -> impl Iterator<Item = &str> {
    (12..text.len().saturating_sub(16)).map(move |i| &text[i..i + 16])
}

fn bearer(token: &str) -> Value {
    json!({"type": "static_bearer", "token": token, "mcp_server_url": MCP_URL})
}

/// A server whose agent CLIs find the fake `codex` first on their PATH, and
/// whose policy writes an audit line for every call.
fn server_with_codex(state: &Path, bin: &Path) -> TestServer {
    script(bin, "codex", FAKE_CODEX);
    let policy = bin.join("policy.json");
    std::fs::write(&policy, json!({"defaults": {"audit": "all"}}).to_string()).expect("policy");
    agents_server(state)
        .env("PATH", &format!("{}:/usr/bin:/bin", bin.display()))
        .args(["--policy".to_string(), policy.display().to_string()])
        .start()
}

/// A codex session with one MCP tool at [`MCP_URL`] using `vault`.
fn session_body(vault: &str, work: &Path, input: Option<&str>) -> Value {
    let mut body = json!({
        "agent": {"runtime": "codex", "tools": [{"type": "mcp", "server_label": "docs",
            "transport": {"type": "http", "server_url": MCP_URL}}]},
        "environment": {"type": "self_hosted", "workspace_directory": work.to_str().expect("utf-8")},
        "vault_ids": [vault],
    });
    if let Some(input) = input {
        body["input"] = json!(input);
    }
    body
}

/// A server with the fake `codex`, and a vault holding a bearer credential for [`MCP_URL`].
struct Setup {
    state: tempfile::TempDir,
    _bin: tempfile::TempDir,
    work: tempfile::TempDir,
    server: TestServer,
    vault: String,
    /// The vault's credentials path.
    creds: String,
    /// The credential's creation answer.
    cred: Reply,
}

async fn setup() -> Setup {
    let (state, bin) = (tempfile::tempdir().expect("state"), tempfile::tempdir().expect("bin"));
    let work = tempfile::tempdir().expect("work");
    let server = server_with_codex(state.path(), bin.path());
    let vault = new_vault(&server).await;
    let creds = format!("/v1/vaults/{vault}/credentials");
    let cred = call(&server, "POST", &creds, Some(json!({"name": "docs", "auth": bearer(TOKEN)}))).await;
    assert_eq!(cred.status, 200, "{}", cred.body);
    Setup { state, _bin: bin, work, server, vault, creds, cred }
}

/// A new vault's id.
async fn new_vault(server: &TestServer) -> String {
    let made = call(server, "POST", "/v1/vaults", Some(json!({"name": "v"}))).await;
    made.body["id"].as_str().expect("id").to_string()
}

/// Every file under `dir`, as text.
fn texts_under(dir: &Path) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(at) = stack.pop() {
        for entry in std::fs::read_dir(&at).expect("dir").flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else {
                let bytes = std::fs::read(&path).expect("read");
                out.push((path.display().to_string(), String::from_utf8_lossy(&bytes).into_owned()));
            }
        }
    }
    out
}

#[tokio::test]
async fn vaults_and_credentials_have_the_reference_shapes_and_page() {
    let state = tempfile::tempdir().expect("state");
    let server = agents_server(state.path()).start();
    let created =
        call(&server, "POST", "/v1/vaults", Some(json!({"name": "  team vault ", "metadata": {"team": "a"}}))).await;
    assert_eq!(created.status, 200, "{}", created.body);
    assert_eq!(created.header("x-agent-sandbox-local"), Some("1"));
    let vault = created.body["id"].as_str().expect("id").to_string();
    assert!(vault.len() == 28 && vault.starts_with("vlt_"), "{vault}");
    let label = json!({"local": true, "compute": "local_state", "differences": ["memory_only"]});
    assert_eq!(
        created.body,
        json!({"id": vault, "object": "vault", "created_at": created.body["created_at"], "metadata": {"team": "a"},
               "name": "team vault", "x_agent_sandbox": label})
    );
    assert!(created.body["created_at"].as_i64().is_some_and(|t| t > 1_700_000_000));
    let other = call(&server, "POST", "/v1/vaults", Some(json!({}))).await.body;
    assert_eq!((other["name"].clone(), other["metadata"].clone()), (Value::Null, json!({})));

    let listed = call(&server, "GET", "/v1/vaults", None).await.body;
    let ids: Vec<&str> = listed["data"].as_array().expect("data").iter().filter_map(|v| v["id"].as_str()).collect();
    assert_eq!(ids, [other["id"].as_str().expect("id"), vault.as_str()], "newest first");
    let filtered = call(&server, "GET", "/v1/vaults?metadata%5Bteam%5D=a&order=asc&limit=1", None).await.body;
    assert_eq!((filtered["first_id"].as_str(), filtered["has_more"].as_bool()), (Some(vault.as_str()), Some(false)));
    let archived = call(&server, "GET", "/v1/vaults?status=archived", None).await.body;
    assert_eq!(archived["data"], json!([]));
    let renamed = call(&server, "POST", &format!("/v1/vaults/{vault}"), Some(json!({"name": "renamed"}))).await;
    assert_eq!(
        (renamed.body["name"].as_str(), renamed.body["metadata"]["team"].as_str()),
        (Some("renamed"), Some("a"))
    );

    let at = |p: &str| format!("/v1/vaults/{vault}/credentials{p}");
    let body = json!({"name": "docs", "metadata": {"k": "v"}, "auth": bearer(TOKEN)});
    let cred = call(&server, "POST", &at(""), Some(body)).await;
    assert_eq!(cred.status, 200, "{}", cred.body);
    let cid = cred.body["id"].as_str().expect("id").to_string();
    assert!(cid.len() == 29 && cid.starts_with("cred_"), "{cid}");
    let cred_label =
        json!({"local": true, "compute": "local_state", "differences": ["memory_only", "secret_in_agent_env"]});
    assert_eq!(
        cred.body,
        json!({"id": cid, "object": "vault.credential", "vault_id": vault, "name": "docs", "metadata": {"k": "v"},
               "auth": {"type": "static_bearer", "mcp_server_url": MCP_URL}, "created_at": cred.body["created_at"],
               "updated_at": cred.body["updated_at"], "x_agent_sandbox": cred_label})
    );
    let oauth = json!({"name": "o", "auth": {"type": "mcp_oauth", "access_token": "oauth-secret-123456",
        "mcp_server_url": "https://other.example.com/mcp", "expires_at": "2030-01-01T00:00:00Z",
        "networking": {"type": "limited", "allowed_hosts": ["OTHER.example.com"]}}});
    let oauth = call(&server, "POST", &at(""), Some(oauth)).await.body;
    assert_eq!(
        oauth["auth"],
        json!({"type": "mcp_oauth", "mcp_server_url": "https://other.example.com/mcp",
               "networking": {"type": "limited", "allowed_hosts": ["other.example.com"]},
               "expires_at": "2030-01-01T00:00:00Z", "refresh": null})
    );
    let oid = oauth["id"].as_str().expect("id").to_string();
    let rotated = call(
        &server,
        "POST",
        &at(&format!("/{oid}")),
        Some(json!({"auth": {"type": "mcp_oauth", "access_token": "oauth-new-654321"}})),
    )
    .await;
    assert_eq!(rotated.body["auth"]["expires_at"], Value::Null, "a new token without expiry clears it");
    assert_eq!(call(&server, "GET", &at(&format!("/{cid}")), None).await.body, cred.body);
    let listed = call(&server, "GET", &at("?order=asc"), None).await.body;
    assert_eq!(listed["data"].as_array().map(Vec::len), Some(2));
    let only_k = call(&server, "GET", &at("?metadata%5Bk%5D=v"), None).await.body;
    assert_eq!(only_k["first_id"].as_str(), Some(cid.as_str()));

    let deleted = call(&server, "DELETE", &at(&format!("/{cid}")), None).await.body;
    assert_eq!(
        deleted,
        json!({"id": cid, "object": "vault.credential.deleted", "deleted": true, "x_agent_sandbox": {"local": true, "compute": "local_state", "differences": ["memory_only", "secret_in_agent_env"]}})
    );
    let gone = call(&server, "DELETE", &format!("/v1/vaults/{vault}"), None).await.body;
    assert_eq!(gone, json!({"id": vault, "object": "vault.deleted", "deleted": true, "x_agent_sandbox": label}));
    assert_openai_error(
        &call(&server, "GET", &at(&format!("/{oid}")), None).await,
        404,
        "resource_not_found",
        Some("vault_id"),
    );
}

#[tokio::test]
async fn bad_input_on_every_endpoint_is_refused_in_the_openai_envelope() {
    let state = tempfile::tempdir().expect("state");
    let server = agents_server(state.path()).env("ABX_AGENTS_MAX_VAULTS", "2").start();
    let vault = call(&server, "POST", "/v1/vaults", Some(json!({}))).await.body["id"].as_str().expect("id").to_string();
    let cred = call(
        &server,
        "POST",
        &format!("/v1/vaults/{vault}/credentials"),
        Some(json!({"name": "c", "auth": bearer(TOKEN)})),
    )
    .await;
    let cid = cred.body["id"].as_str().expect("id").to_string();

    // Unknown ids: the vault is looked up first, then the credential.
    let unknown_vault = "vlt_000000000000000000000000";
    for (method, path, body) in [
        ("GET", format!("/v1/vaults/{unknown_vault}"), None),
        ("POST", format!("/v1/vaults/{unknown_vault}"), Some(json!({"name": "x"}))),
        ("DELETE", format!("/v1/vaults/{unknown_vault}"), None),
        ("POST", format!("/v1/vaults/{unknown_vault}/credentials"), Some(json!({"name": "c", "auth": bearer(TOKEN)}))),
        ("GET", format!("/v1/vaults/{unknown_vault}/credentials"), None),
        ("GET", format!("/v1/vaults/{unknown_vault}/credentials/{cid}"), None),
        ("POST", format!("/v1/vaults/{unknown_vault}/credentials/{cid}"), Some(json!({}))),
        ("DELETE", format!("/v1/vaults/{unknown_vault}/credentials/{cid}"), None),
    ] {
        let reply = call(&server, method, &path, body).await;
        assert_openai_error(&reply, 404, "resource_not_found", Some("vault_id"));
        assert_eq!(reply.body["error"]["message"], format!("vault '{unknown_vault}' not found"), "{method} {path}");
    }
    for method in ["GET", "POST", "DELETE"] {
        let body = (method == "POST").then(|| json!({}));
        let reply = call(&server, method, &format!("/v1/vaults/{vault}/credentials/cred_nope"), body).await;
        assert_openai_error(&reply, 404, "resource_not_found", Some("credential_id"));
        assert_eq!(reply.body["error"]["message"], "credential 'cred_nope' not found");
    }

    // Wrong types and unknown fields.
    let creds = format!("/v1/vaults/{vault}/credentials");
    let one = format!("{creds}/{cid}");
    let cases: Vec<(&str, String, Value, &str)> = vec![
        ("POST", "/v1/vaults".into(), json!({"name": 5}), "name"),
        ("POST", "/v1/vaults".into(), json!({"name": "   "}), "name"),
        ("POST", "/v1/vaults".into(), json!({"name": "x".repeat(257)}), "name"),
        ("POST", "/v1/vaults".into(), json!({"metadata": "x"}), "metadata"),
        ("POST", "/v1/vaults".into(), json!({"metadata": {"k": 1}}), "metadata.k"),
        ("POST", "/v1/vaults".into(), json!({"bogus": 1}), "bogus"),
        ("POST", format!("/v1/vaults/{vault}"), json!({"metadata": [1]}), "metadata"),
        ("POST", format!("/v1/vaults/{vault}"), json!({"status": "archived"}), "status"),
        ("POST", creds.clone(), json!({"auth": bearer(TOKEN)}), "name"),
        ("POST", creds.clone(), json!({"name": "c"}), "auth"),
        ("POST", creds.clone(), json!({"name": "c", "auth": "x"}), "auth"),
        ("POST", creds.clone(), json!({"name": "c", "auth": {"type": "basic"}}), "auth.type"),
        (
            "POST",
            creds.clone(),
            json!({"name": "c", "auth": {"type": "environment_variable", "secret_name": "X"}}),
            "auth.type",
        ),
        (
            "POST",
            creds.clone(),
            json!({"name": "c", "auth": {"type": "static_bearer", "token": 7, "mcp_server_url": MCP_URL}}),
            "auth.token",
        ),
        (
            "POST",
            creds.clone(),
            json!({"name": "c", "auth": {"type": "static_bearer", "token": "", "mcp_server_url": MCP_URL}}),
            "auth.token",
        ),
        (
            "POST",
            creds.clone(),
            json!({"name": "c", "auth": {"type": "static_bearer", "token": "t", "mcp_server_url": "http://mcp.example.com/"}}),
            "auth.mcp_server_url",
        ),
        (
            "POST",
            creds.clone(),
            json!({"name": "c", "auth": {"type": "static_bearer", "token": "t", "mcp_server_url": "https://127.0.0.1/mcp"}}),
            "auth.mcp_server_url",
        ),
        (
            "POST",
            creds.clone(),
            json!({"name": "c", "auth": {"type": "static_bearer", "token": "t", "mcp_server_url": "https://u:p@mcp.example.com/"}}),
            "auth.mcp_server_url",
        ),
        (
            "POST",
            creds.clone(),
            json!({"name": "c", "auth": {"type": "static_bearer", "token": "t", "mcp_server_url": MCP_URL, "extra": 1}}),
            "auth.extra",
        ),
        (
            "POST",
            creds.clone(),
            json!({"name": "c", "auth": {"type": "mcp_oauth", "access_token": "t", "mcp_server_url": MCP_URL, "expires_at": "soon"}}),
            "auth.expires_at",
        ),
        (
            "POST",
            creds.clone(),
            json!({"name": "c", "auth": {"type": "mcp_oauth", "access_token": "t", "mcp_server_url": MCP_URL, "refresh": {"refresh_token": "r"}}}),
            "auth.refresh",
        ),
        (
            "POST",
            creds.clone(),
            json!({"name": "c", "auth": {"type": "static_bearer", "token": "t", "mcp_server_url": MCP_URL, "networking": {"type": "unrestricted"}}}),
            "auth.networking",
        ),
        (
            "POST",
            creds.clone(),
            json!({"name": "c", "auth": {"type": "static_bearer", "token": "t", "mcp_server_url": MCP_URL, "networking": {"type": "limited", "allowed_hosts": ["evil.example.com"]}}}),
            "auth.networking.allowed_hosts",
        ),
        ("POST", one.clone(), json!({"name": "x"}), "name"),
        ("POST", one.clone(), json!({"auth": {"type": "mcp_oauth", "access_token": "t"}}), "auth.type"),
        ("POST", one.clone(), json!({"auth": {"type": "static_bearer"}}), "auth.token"),
        ("POST", one.clone(), json!({"auth": {"type": "static_bearer", "token": "a\nb"}}), "auth.token"),
        ("POST", one.clone(), json!({"metadata": {"k": "v".repeat(513)}}), "metadata.k"),
    ];
    for (method, path, body, param) in cases {
        let reply = call(&server, method, &path, Some(body.clone())).await;
        assert_openai_error(&reply, 400, "invalid_request", Some(param));
        assert!(!reply.body.to_string().contains(TOKEN), "{body} echoed the secret");
    }
    // Lists: paging parameters.
    for (query, status, code, param) in [
        ("limit=0", 400, "invalid_request", "limit"),
        ("limit=abc", 400, "invalid_request", "limit"),
        ("order=up", 400, "invalid_request", "order"),
        ("after=vlt_nope", 404, "agents.cursor_not_found", "after"),
    ] {
        assert_openai_error(
            &call(&server, "GET", &format!("/v1/vaults?{query}"), None).await,
            status,
            code,
            Some(param),
        );
        assert_openai_error(&call(&server, "GET", &format!("{creds}?{query}"), None).await, status, code, Some(param));
    }
    // The per-caller limit (ABX_AGENTS_MAX_VAULTS=2).
    assert_eq!(call(&server, "POST", "/v1/vaults", Some(json!({}))).await.status, 200);
    assert_openai_error(
        &call(&server, "POST", "/v1/vaults", Some(json!({}))).await,
        400,
        "agents.limit_exceeded",
        Some("name"),
    );
    // Bodies that are not JSON objects, and bodies over the request limit.
    for path in ["/v1/vaults".to_string(), creds.clone(), one.clone()] {
        let reply = call(&server, "POST", &path, Some(json!([1]))).await;
        assert_eq!(reply.status, 400, "{path}: {}", reply.body);
        let big = json!({"name": "c", "auth": bearer(&"x".repeat(11 * 1024 * 1024))});
        let reply = call(&server, "POST", &path, Some(big)).await;
        assert_eq!((reply.status, reply.body["code"].as_str()), (413, Some("payload_too_large")), "{path}");
    }
    // Sessions: unknown vaults, and credentials that cannot be bound.
    let work = tempfile::tempdir().expect("work");
    let mut body = session_body("vlt_x", work.path(), None);
    body["vault_ids"] = json!([vault, "vlt_x"]);
    let reply = call(&server, "POST", "/v1/agents/sessions", Some(body)).await;
    assert_openai_error(&reply, 404, "resource_not_found", Some("vault_ids[1]"));
    let second = json!({"name": "same host", "auth": {"type": "static_bearer", "token": "t2-abcdef", "mcp_server_url": "https://mcp.example.com:443/other"}});
    assert_eq!(call(&server, "POST", &creds, Some(second)).await.status, 200);
    let reply = call(&server, "POST", "/v1/agents/sessions", Some(session_body(&vault, work.path(), None))).await;
    assert_openai_error(&reply, 400, "agents.credential_ambiguous", Some("tools[0].credential_id"));
    let mut named = session_body(&vault, work.path(), None);
    named["agent"]["tools"][0]["credential_id"] = json!("cred_nope");
    let reply = call(&server, "POST", "/v1/agents/sessions", Some(named)).await;
    assert_openai_error(&reply, 400, "agents.credential_not_found", Some("tools[0].credential_id"));
    assert!(!server.log().contains(TOKEN), "the server log holds the secret");
}

#[tokio::test]
async fn a_secret_reaches_the_cli_environment_and_is_echoed_nowhere() {
    let Setup { state, _bin, work, server, vault, creds, cred } = setup().await;
    let mut answers = Vec::new();
    answers.push(cred.body.clone());
    let sid = create(&server, session_body(&vault, work.path(), Some("use the docs"))).await;
    let events = wait_idle(&server, &sid).await;

    // The CLI got the token, as its MCP server's Authorization header, through its environment.
    let seen = std::fs::read_to_string(work.path().join("seen")).expect("the CLI ran");
    assert_eq!(seen, format!("Bearer {TOKEN}"));
    // What it printed is redacted, with and without the scheme.
    let session = call(&server, "GET", &format!("/v1/agents/sessions/{sid}"), None).await.body;
    assert_eq!(session["vault_ids"], json!([vault]));
    assert_eq!(session["status"], "idle", "{session}");
    let items = call(&server, "GET", &format!("/v1/agents/sessions/{sid}/items"), None).await.body;
    let message = items["data"].as_array().expect("items").iter().find(|i| i["type"] == "message").cloned();
    let text = message.as_ref().and_then(|m| m["content"][0]["text"].as_str()).unwrap_or_default().to_string();
    assert!(text.starts_with("header=[REDACTED] token=[REDACTED] b64="), "{items}");
    // Encoded copies are masked too (issue 31, item 3): base64 of the header, hex of the token.
    let (b64, hex) = encodings(&format!("Bearer {TOKEN}"), TOKEN);
    assert!(!windows(&b64).any(|w| text.contains(w)) && !windows(&hex).any(|w| text.contains(w)), "{text}");
    assert_eq!(text.matches("[REDACTED]").count(), 4, "{text}");

    // Echoed nowhere: answers of every endpoint, events, state files, the log.
    for path in [
        format!("/v1/vaults/{vault}"),
        "/v1/vaults".to_string(),
        creds.clone(),
        format!("{creds}/{}", cred.body["id"].as_str().expect("id")),
        format!("/v1/agents/sessions/{sid}"),
        format!("/v1/agents/sessions/{sid}/turns"),
        format!("/v1/agents/sessions/{sid}/items"),
    ] {
        answers.push(call(&server, "GET", &path, None).await.body);
    }
    let rotated = call(
        &server,
        "POST",
        &format!("{creds}/{}", cred.body["id"].as_str().expect("id")),
        Some(json!({"auth": {"type": "static_bearer", "token": TOKEN}})),
    )
    .await;
    assert_eq!(rotated.status, 200, "{}", rotated.body);
    answers.push(rotated.body);
    for answer in &answers {
        assert!(!answer.to_string().contains(TOKEN), "an answer holds the secret: {answer}");
    }
    for event in &events {
        let data = event.data.to_string();
        assert!(!data.contains(TOKEN), "an event holds the secret: {data}");
        assert!(!windows(&b64).any(|w| data.contains(w)), "an event holds the secret in base64: {data}");
    }
    for (path, text) in texts_under(state.path()) {
        assert!(!text.contains(TOKEN), "{path} holds the secret");
    }
    assert!(state.path().join("vaults.jsonl").exists(), "vaults are journaled");
    let log = server.wait_for_log(
        "audit: port=\"api\" endpoint=\"agents_vault_credentials_update\"",
        std::time::Duration::from_secs(5),
    );
    let audited = log.lines().filter(|l| l.contains(" audit:") && l.contains("agents_vault_credentials_")).count();
    assert!(audited >= 3, "every credential call has its audit line:\n{log}");
    assert!(!log.contains(TOKEN), "the server log holds the secret");
}

/// A session made from a stored definition binds the definition's MCP tools
/// to the session's vaults as an inline agent's tools are bound.
#[tokio::test]
async fn a_session_from_a_definition_gets_its_tools_credentials() {
    let Setup { state: _state, _bin, work, server, vault, creds, cred: _ } = setup().await;
    let tool = json!({"type": "mcp", "server_label": "docs", "transport": {"type": "http", "server_url": MCP_URL}});
    let definition =
        call(&server, "POST", "/v1/agents", Some(json!({"name": "a", "model": "codex", "tools": [tool]}))).await;
    assert_eq!(definition.status, 200, "{}", definition.body);
    let body = json!({
        "agent_id": definition.body["id"],
        "environment": {"type": "self_hosted", "workspace_directory": work.path().to_str().expect("utf-8")},
        "vault_ids": [vault],
        "input": "use the docs",
    });
    let sid = create(&server, body.clone()).await;
    wait_idle(&server, &sid).await;
    let seen = std::fs::read_to_string(work.path().join("seen")).expect("the CLI ran");
    assert_eq!(seen, format!("Bearer {TOKEN}"), "the definition's tool carries the credential");

    // Bound at creation, as inline tools are: a credential named for another server is refused there.
    let other = call(
        &server,
        "POST",
        &creds,
        Some(json!({"name": "other", "auth": {"type": "static_bearer", "token": "t2",
            "mcp_server_url": "https://other.example/mcp"}})),
    )
    .await;
    assert_eq!(other.status, 200, "{}", other.body);
    let named = json!({"type": "mcp", "server_label": "docs", "credential_id": other.body["id"],
        "transport": {"type": "http", "server_url": MCP_URL}});
    let mismatched =
        call(&server, "POST", "/v1/agents", Some(json!({"name": "b", "model": "codex", "tools": [named]}))).await;
    assert_eq!(mismatched.status, 200, "{}", mismatched.body);
    let refused = call(
        &server,
        "POST",
        "/v1/agents/sessions",
        Some(json!({"agent_id": mismatched.body["id"], "vault_ids": [vault],
            "environment": {"type": "self_hosted", "workspace_directory": work.path().to_str().expect("utf-8")}})),
    )
    .await;
    assert_openai_error(&refused, 400, "agents.credential_mismatch", Some("tools[0].credential_id"));
}

#[tokio::test]
async fn a_restart_keeps_vaults_and_credential_metadata_but_not_secrets() {
    let state = tempfile::tempdir().expect("state");
    let bin = tempfile::tempdir().expect("bin");
    let work = tempfile::tempdir().expect("work");
    let (vault, cred, sid, before) = {
        let server = server_with_codex(state.path(), bin.path());
        let vault =
            call(&server, "POST", "/v1/vaults", Some(json!({"name": "kept", "metadata": {"k": "v"}}))).await.body;
        let vid = vault["id"].as_str().expect("id").to_string();
        let cred = call(
            &server,
            "POST",
            &format!("/v1/vaults/{vid}/credentials"),
            Some(json!({"name": "docs", "auth": bearer(TOKEN)})),
        )
        .await
        .body;
        let sid = create(&server, session_body(&vid, work.path(), None)).await;
        let listed = call(&server, "GET", &format!("/v1/vaults/{vid}/credentials"), None).await.body;
        (vault, cred, sid, listed)
    };
    let server = server_with_codex(state.path(), bin.path());
    let vid = vault["id"].as_str().expect("id");
    let cid = cred["id"].as_str().expect("id");
    assert_eq!(call(&server, "GET", &format!("/v1/vaults/{vid}"), None).await.body, vault);
    assert_eq!(call(&server, "GET", &format!("/v1/vaults/{vid}/credentials"), None).await.body, before);

    // The session still names the vault, but the secret is gone: its next turn is refused.
    let events = format!("/v1/agents/sessions/{sid}/events");
    let refused = call(&server, "POST", &events, Some(json!({"input": "again"}))).await;
    assert_openai_error(&refused, 400, "agents.credential_unavailable", Some("vault_ids"));
    assert!(refused.body["error"]["message"].as_str().is_some_and(|m| m.contains("restarted")), "{}", refused.body);
    assert!(!work.path().join("seen").exists(), "no turn ran");

    // Rotating the credential sets the secret again.
    let fresh = "vault-secret-after-restart-9d2";
    let rotated = call(
        &server,
        "POST",
        &format!("/v1/vaults/{vid}/credentials/{cid}"),
        Some(json!({"auth": {"type": "static_bearer", "token": fresh}})),
    )
    .await;
    assert_eq!(rotated.status, 200, "{}", rotated.body);
    assert_eq!(call(&server, "POST", &events, Some(json!({"input": "again"}))).await.status, 202);
    wait_idle(&server, &sid).await;
    assert_eq!(std::fs::read_to_string(work.path().join("seen")).expect("ran"), format!("Bearer {fresh}"));

    // Deleting the vault takes its credentials; the session's next turn says so.
    assert_eq!(call(&server, "DELETE", &format!("/v1/vaults/{vid}"), None).await.status, 200);
    let refused = call(&server, "POST", &events, Some(json!({"input": "once more"}))).await;
    assert_openai_error(&refused, 400, "agents.credential_unavailable", Some("vault_ids"));
    for (path, text) in texts_under(state.path()) {
        assert!(!text.contains(TOKEN) && !text.contains(fresh), "{path} holds a secret");
    }
}

#[tokio::test]
async fn vaults_belong_to_their_caller_and_the_policy_decides_who_may_call() {
    let state = tempfile::tempdir().expect("state");
    let dir = tempfile::tempdir().expect("policy");
    let policy = dir.path().join("policy.json");
    let identity = |id: &str, scope: &str| json!({"id": id, "scopes": [scope], "token_env": format!("ABX_TEST_{}", id.to_uppercase())});
    let doc = json!({"auth": {"tokens": [identity("alice", "agents:use"), identity("bob", "agents:use"), identity("carol", "files:read")]}});
    std::fs::write(&policy, doc.to_string()).expect("write");
    let server = agents_server(state.path())
        .token(None)
        .env("ABX_TEST_ALICE", "alice-token")
        .env("ABX_TEST_BOB", "bob-token")
        .env("ABX_TEST_CAROL", "carol-token")
        .args(["--policy".to_string(), policy.display().to_string()])
        .start();
    let as_ = |token: &'static str, method: &'static str, path: String, body: Option<Value>| {
        let method = reqwest::Method::from_bytes(method.as_bytes()).expect("method");
        let mut request = reqwest::Client::new().request(method, server.at(&path)).bearer_auth(token);
        if let Some(body) = body {
            request = request.json(&body);
        }
        async move {
            let response = request.send().await.expect("send");
            (response.status().as_u16(), response.json::<Value>().await.unwrap_or(Value::Null))
        }
    };
    let (status, vault) = as_("alice-token", "POST", "/v1/vaults".into(), Some(json!({"name": "alice's"}))).await;
    assert_eq!(status, 200, "{vault}");
    let vid = vault["id"].as_str().expect("id").to_string();
    let creds = format!("/v1/vaults/{vid}/credentials");
    let (status, _) =
        as_("alice-token", "POST", creds.clone(), Some(json!({"name": "c", "auth": bearer(TOKEN)}))).await;
    assert_eq!(status, 200);

    // Another caller: the vault reads as unknown, and lists are its own.
    for (method, path, body) in [
        ("GET", format!("/v1/vaults/{vid}"), None),
        ("POST", format!("/v1/vaults/{vid}"), Some(json!({"name": "mine"}))),
        ("DELETE", format!("/v1/vaults/{vid}"), None),
        ("GET", creds.clone(), None),
        ("POST", creds.clone(), Some(json!({"name": "c", "auth": bearer(TOKEN)}))),
    ] {
        let (status, body) = as_("bob-token", method, path.clone(), body).await;
        assert_eq!((status, body["error"]["code"].as_str()), (404, Some("resource_not_found")), "{method} {path}");
    }
    assert_eq!(as_("bob-token", "GET", "/v1/vaults".into(), None).await.1["data"], json!([]));
    let work = tempfile::tempdir().expect("work");
    let (status, body) =
        as_("bob-token", "POST", "/v1/agents/sessions".into(), Some(session_body(&vid, work.path(), None))).await;
    assert_eq!((status, body["error"]["param"].as_str()), (404, Some("vault_ids[0]")), "{body}");

    // A caller without the agents scope is refused by the pipeline.
    let (status, body) = as_("carol-token", "GET", "/v1/vaults".into(), None).await;
    assert_eq!(
        (status, body["code"].as_str(), body["scope"].as_str()),
        (403, Some("missing_scope"), Some("agents:use"))
    );
    assert_eq!(as_("alice-token", "GET", "/v1/vaults".into(), None).await.1["data"][0]["id"], vid);
}

/// A host name that resolves, on this machine and without a network, only
/// to loopback or private addresses (from `/etc/hosts` or the machine's
/// own name), and is not written as one.
fn a_name_resolving_to_loopback() -> Option<String> {
    use std::net::ToSocketAddrs;
    let own = std::fs::read_to_string("/proc/sys/kernel/hostname").ok().map(|h| h.trim().to_string());
    let candidates = ["ip6-localhost", "ip6-loopback"].into_iter().map(str::to_string).chain(own);
    candidates.filter(|name| !name.is_empty() && name != "localhost").find(|name| {
        let addrs: Vec<_> = (name.as_str(), 443).to_socket_addrs().map(Iterator::collect).unwrap_or_default();
        !addrs.is_empty() && addrs.iter().all(|a| !abx_domain::policy::guards::urls::is_public(a.ip()))
    })
}

/// Issue 31, item 8: a credential's URL was checked only as written, so a
/// name that resolves to loopback (`ip6-localhost`, `*.nip.io`) and the 6to4
/// form of 127.0.0.1 (`[2002:7f00:1::]`) were accepted and the token handed
/// to the CLI for them. Now the tunnelled forms are refused when stored,
/// and a name is resolved and checked again when a turn is about to use
/// the token: the turn fails before the CLI starts.
#[tokio::test]
async fn a_credential_url_is_resolved_and_checked_again_when_used() {
    let Setup { _bin, work, server, vault, creds, .. } = setup().await;
    for url in ["https://[2002:7f00:1::]/mcp", "https://[::ffff:127.0.0.1]/mcp", "https://[64:ff9b::7f00:1]/mcp"] {
        let auth = json!({"type": "static_bearer", "token": TOKEN, "mcp_server_url": url});
        let reply = call(&server, "POST", &creds, Some(json!({"name": "t", "auth": auth}))).await;
        assert_openai_error(&reply, 400, "invalid_request", Some("auth.mcp_server_url"));
    }
    let Some(name) = a_name_resolving_to_loopback() else {
        eprintln!("skipped the resolution half: no name resolves to loopback here");
        return;
    };
    let url = format!("https://{name}/mcp");
    let other = new_vault(&server).await;
    let auth = json!({"type": "static_bearer", "token": TOKEN, "mcp_server_url": url});
    let stored =
        call(&server, "POST", &format!("/v1/vaults/{other}/credentials"), Some(json!({"name": "n", "auth": auth})))
            .await;
    assert_eq!(stored.status, 200, "as written, {name} is a name: {}", stored.body);
    let mut body = session_body(&other, work.path(), Some("use the docs"));
    body["agent"]["tools"][0]["transport"]["server_url"] = json!(url);
    let sid = create(&server, body).await;
    wait_idle(&server, &sid).await;
    let turn = call(&server, "GET", &format!("/v1/agents/sessions/{sid}/turns"), None).await.body["data"][0].clone();
    assert_eq!(turn["status"], "failed", "{turn}");
    let message = "the MCP server 'docs' resolves to a loopback, private or link-local address; \
                   its vault credential was not used";
    assert_eq!(turn["error"], json!({"code": "invalid_request", "message": message}));
    assert!(!work.path().join("seen").exists(), "the CLI never started, so it never had the token");
    // The same vault's credential for a public name is used as before.
    let sid = create(&server, session_body(&vault, work.path(), Some("use the docs"))).await;
    wait_idle(&server, &sid).await;
    let seen = std::fs::read_to_string(work.path().join("seen")).expect("the CLI ran");
    assert_eq!(seen, format!("Bearer {TOKEN}"));
}
