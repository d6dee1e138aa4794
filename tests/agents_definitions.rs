//! Agent definitions, environments, templates, their files and file blobs
//! against the real binary: a session and a response run what a definition
//! and an environment say (runtime, model, env, files), everything survives
//! a restart (MCP header values excepted, as documented), and bad input on
//! every endpoint gets the reference's status and error envelope.

mod common;

use base64::Engine;
use common::agents::{agents_server, call, script, wait_idle};
use common::TestServer;
use serde_json::{json, Value};

/// Prints the environment's variable and seed file as the agent's answer.
const ECHO_ENV: &str = r#"cat > /dev/null
printf '{"type":"message","item_id":"m","text":"%s|%s"}\n' "$GREETING" "$(cat seed.txt)""#;

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

fn assert_error(reply: &common::agents::Reply, status: u16, code: &str, param: Option<&str>) {
    assert_eq!(reply.status, status, "{}", reply.body);
    let error = &reply.body["error"];
    assert_eq!((error["code"].as_str(), error["param"].as_str()), (Some(code), param), "{}", reply.body);
    if status < 500 {
        assert_eq!(reply.header("x-should-retry"), Some("false"));
    }
    assert_eq!(reply.header("x-agent-sandbox-local"), Some("1"));
}

async fn post(server: &TestServer, path: &str, body: Value) -> common::agents::Reply {
    call(server, "POST", path, Some(body)).await
}

async fn multipart(server: &TestServer, name: &str, bytes: Vec<u8>) -> common::agents::Reply {
    let boundary = "abxboundary7e1";
    let mut body = format!(
        "--{boundary}\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\nuser_data\r\n--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"{name}\"\r\nContent-Type: application/octet-stream\r\n\r\n"
    )
    .into_bytes();
    body.extend_from_slice(&bytes);
    body.extend_from_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
    let response = reqwest::Client::new()
        .post(server.at("/v1/files"))
        .header("authorization", server.bearer())
        .header("content-type", format!("multipart/form-data; boundary={boundary}"))
        .body(body)
        .send()
        .await
        .expect("send");
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let body = response.json().await.expect("json");
    common::agents::Reply { status, headers, body }
}

#[tokio::test]
async fn a_definition_and_an_environment_shape_the_session_and_response_that_name_them() {
    let state = tempfile::tempdir().expect("state");
    let base = tempfile::tempdir().expect("base");
    let server = agents_server(state.path()).base_dir(base.path()).start();
    let agent = script(state.path(), "echo-env.sh", ECHO_ENV);

    let created = post(
        &server,
        "/v1/agents",
        json!({"runtime": "command", "command": [agent.to_str().expect("utf-8")], "model": "m-1", "name": "echo", "metadata": {"team": "a"}}),
    )
    .await;
    assert_eq!(created.status, 200, "{}", created.body);
    let def = created.body.clone();
    let id = def["id"].as_str().expect("id").to_string();
    assert!(id.starts_with("agent_") && id.len() == 30, "{id}");
    assert_eq!(
        (def["object"].as_str(), def["model"].as_str(), def["name"].as_str(), def["metadata"].clone()),
        (Some("agent"), Some("m-1"), Some("echo"), json!({"team": "a"}))
    );
    assert_eq!(
        def["x_agent_sandbox"],
        json!({"local": true, "compute": "local_state", "differences": ["update_in_place", "snapshot_at_session_start"], "runtime": "command"})
    );
    assert_eq!(call(&server, "GET", &format!("/v1/agents/{id}"), None).await.body, def);
    let updated = post(&server, &format!("/v1/agents/{id}"), json!({"instructions": "be brief"})).await;
    assert_eq!(
        (updated.body["instructions"].as_str(), updated.body["model"].as_str()),
        (Some("be brief"), Some("m-1"))
    );
    let listed = call(&server, "GET", "/v1/agents?order=asc", None).await;
    assert_eq!(
        (listed.body["data"][0]["id"].as_str(), listed.body["has_more"].as_bool()),
        (Some(id.as_str()), Some(false))
    );
    let model = call(&server, "GET", &format!("/v1/models/{id}"), None).await;
    assert_eq!(model.body["x_agent_sandbox"]["kind"], "agent_definition");

    let ws = base.path().join("ws");
    let env = post(
        &server,
        "/v1/agents/environments",
        json!({"environment": {"workspace_directory": ws.to_str(), "env": {"GREETING": "hello"},
               "files": [{"type": "inline", "path": "/workspace/seed.txt", "data": b64(b"seeded")}]}}),
    )
    .await;
    assert_eq!(env.status, 200, "{}", env.body);
    let env_id = env.body["id"].as_str().expect("id").to_string();
    assert_eq!(
        (env.body["object"].as_str(), env.body["status"].as_str(), env.body["files"][0]["path"].as_str()),
        (Some("agent.environment"), Some("ready"), Some("/workspace/seed.txt"))
    );
    assert!(env.body.to_string().find("hello").is_none(), "env values are never returned");
    assert_eq!(std::fs::read(ws.join("seed.txt")).expect("seed"), b"seeded");

    let session =
        post(&server, "/v1/agents/sessions", json!({"agent_id": id, "environment": {"id": env_id}, "input": "go"}))
            .await;
    assert_eq!(session.status, 200, "{}", session.body);
    let sid = session.body["id"].as_str().expect("sid").to_string();
    assert_eq!(
        (session.body["agent"]["id"].as_str(), session.body["environment"]["id"].as_str()),
        (Some(id.as_str()), Some(env_id.as_str()))
    );
    wait_idle(&server, &sid).await;
    let items = call(&server, "GET", &format!("/v1/agents/sessions/{sid}/items"), None).await;
    assert_eq!(items.body["data"][0]["content"][0]["text"], "hello|seeded", "{}", items.body);

    // A response whose model is the definition runs it too (in the responses workspace).
    let response = post(&server, "/v1/responses", json!({"model": id, "input": "x"})).await;
    assert_eq!(response.status, 200, "{}", response.body);
    assert_eq!((response.body["model"].as_str(), response.body["status"].as_str()), (Some("m-1"), Some("completed")));

    let deleted = call(&server, "DELETE", &format!("/v1/agents/{id}"), None).await;
    assert_eq!(
        (deleted.body["object"].as_str(), deleted.body["deleted"].as_bool()),
        (Some("agent.deleted"), Some(true))
    );
    assert_error(
        &call(&server, "GET", &format!("/v1/agents/{id}"), None).await,
        404,
        "resource_not_found",
        Some("agent_id"),
    );
    let kept = call(&server, "GET", &format!("/v1/agents/sessions/{sid}"), None).await;
    assert_eq!(kept.body["agent"]["id"], id.as_str(), "the session keeps its snapshot");
}

#[tokio::test]
async fn templates_files_and_blobs_install_once_and_survive_a_restart() {
    let state = tempfile::tempdir().expect("state");
    let base = tempfile::tempdir().expect("base");
    let server = agents_server(state.path()).base_dir(base.path()).start();

    let blob = multipart(&server, "notes.md", b"from a blob".to_vec()).await;
    assert_eq!(blob.status, 200, "{}", blob.body);
    let file_id = blob.body["id"].as_str().expect("id").to_string();
    assert_eq!(
        (blob.body["object"].as_str(), blob.body["bytes"].as_u64(), blob.body["filename"].as_str()),
        (Some("file"), Some(11), Some("notes.md"))
    );
    let json_blob = post(&server, "/v1/files", json!({"purpose": "user_data", "data": b64(b"x")})).await;
    assert_eq!((json_blob.body["filename"].as_str(), json_blob.body["bytes"].as_u64()), (Some("upload"), Some(1)));

    let template = post(
        &server,
        "/v1/agents/environments/templates",
        json!({"name": "t", "env": {"A": "1"}, "files": [{"type": "file_id", "file_id": file_id, "path": "/workspace/docs/notes.md"}]}),
    )
    .await;
    assert_eq!(template.status, 200, "{}", template.body);
    let tid = template.body["id"].as_str().expect("id").to_string();
    assert_eq!(
        template.body["files"],
        json!([{"type": "file_id", "file_id": file_id, "path": "/workspace/docs/notes.md"}])
    );
    let renamed = post(&server, &format!("/v1/agents/environments/templates/{tid}"), json!({"name": "t2"})).await;
    assert_eq!((renamed.body["name"].as_str(), renamed.body["files"].as_array().map(Vec::len)), (Some("t2"), Some(1)));

    let ws = base.path().join("from-template");
    let env = post(
        &server,
        "/v1/agents/environments",
        json!({"environment": {"workspace_directory": ws.to_str(), "environment_template_id": tid}}),
    )
    .await;
    assert_eq!(env.status, 200, "{}", env.body);
    let env_id = env.body["id"].as_str().expect("id").to_string();
    assert_eq!(std::fs::read(ws.join("docs/notes.md")).expect("installed"), b"from a blob");
    let files_at = format!("/v1/agents/environments/{env_id}/files");
    let added =
        post(&server, &files_at, json!({"type": "inline", "path": "/workspace/b.txt", "data": b64(b"bee")})).await;
    assert_eq!(
        added.body,
        json!({"object": "agent.environment.file", "environment_id": env_id, "path": "/workspace/b.txt", "size_bytes": 3,
               "x_agent_sandbox": {"local": true, "compute": "local_state", "differences": ["local_workspace", "no_overwrite"]}})
    );
    let kept = std::fs::read_dir(state.path().join("resources/content")).expect("content").count();
    assert_eq!(kept, 1, "only the template's file is kept; an environment's files are written once");
    let same =
        post(&server, &files_at, json!({"type": "inline", "path": "/workspace/b.txt", "data": b64(b"bee")})).await;
    assert_eq!(same.status, 200, "identical bytes are not an overwrite");
    let other =
        post(&server, &files_at, json!({"type": "inline", "path": "/workspace/b.txt", "data": b64(b"wasp")})).await;
    assert_error(&other, 400, "agents.file_exists", Some("path"));
    let page = call(&server, "GET", &format!("{files_at}?order=asc&limit=1"), None).await;
    assert_eq!(
        (page.body["data"][0]["path"].as_str(), page.body["has_more"].as_bool(), page.body["next"].as_str()),
        (Some("/workspace/b.txt"), Some(true), Some("o1"))
    );
    let next = call(&server, "GET", &format!("{files_at}?order=asc&limit=1&page=o1"), None).await;
    assert_eq!(next.body["data"][0]["path"], "/workspace/docs/notes.md");

    let header_tool = json!([{"type": "mcp", "server_label": "docs", "transport": {"type": "http", "server_url": "https://mcp.example/mcp", "headers": {"X-Key": "hdr-secret-1"}}}]);
    let def = post(
        &server,
        "/v1/agents",
        json!({"runtime": "command", "command": ["/bin/true"], "model": "m", "tools": header_tool}),
    )
    .await;
    assert_eq!(def.body["tools"][0]["transport"]["headers"]["X-Key"], "***");
    let def_id = def.body["id"].as_str().expect("id").to_string();
    let before: Vec<Value> = futures_util::future::join_all(
        [
            format!("/v1/agents/{def_id}"),
            format!("/v1/agents/environments/{env_id}"),
            format!("/v1/agents/environments/templates/{tid}"),
        ]
        .iter()
        .map(|p| call(&server, "GET", p, None)),
    )
    .await
    .into_iter()
    .map(|r| r.body)
    .collect();
    drop(server);

    let journal = std::fs::read_to_string(state.path().join("resources/definitions.jsonl")).expect("journal");
    assert!(!journal.contains("hdr-secret-1"), "header values are never written");
    let server = agents_server(state.path()).base_dir(base.path()).start();
    for (path, was) in [
        format!("/v1/agents/{def_id}"),
        format!("/v1/agents/environments/{env_id}"),
        format!("/v1/agents/environments/templates/{tid}"),
    ]
    .iter()
    .zip(before)
    {
        assert_eq!(call(&server, "GET", path, None).await.body, was, "{path} after a restart");
    }
    let reused =
        post(&server, &files_at, json!({"type": "file_id", "file_id": file_id, "path": "/workspace/again.md"})).await;
    assert_eq!(
        (reused.status, reused.body["size_bytes"].as_u64()),
        (200, Some(11)),
        "the blob survived: {}",
        reused.body
    );
    let lost = post(&server, "/v1/agents/sessions", json!({"agent_id": def_id})).await;
    assert_error(&lost, 400, "agents.credentials_lost", Some("agent_id"));
    let deleted = call(&server, "DELETE", &format!("/v1/agents/environments/templates/{tid}"), None).await;
    assert_eq!(deleted.body["object"], "agent.environment.template.deleted");
}

#[tokio::test]
async fn bad_input_on_every_endpoint_gets_the_reference_answer() {
    let state = tempfile::tempdir().expect("state");
    let base = tempfile::tempdir().expect("base");
    let server = agents_server(state.path()).base_dir(base.path()).env("ABX_AGENTS_MAX_FILE_BYTES", "16").start();

    for (method, path, param) in [
        ("GET", "/v1/agents/agent_nope", "agent_id"),
        ("POST", "/v1/agents/agent_nope", "agent_id"),
        ("DELETE", "/v1/agents/agent_nope", "agent_id"),
        ("GET", "/v1/agents/environments/env_nope", "environment_id"),
        ("GET", "/v1/agents/environments/env_nope/files", "environment_id"),
        ("POST", "/v1/agents/environments/env_nope/files", "environment_id"),
        ("GET", "/v1/agents/environments/templates/envtmpl_nope", "environment_template_id"),
        ("POST", "/v1/agents/environments/templates/envtmpl_nope", "environment_template_id"),
        ("DELETE", "/v1/agents/environments/templates/envtmpl_nope", "environment_template_id"),
    ] {
        let reply = call(&server, method, path, if method == "POST" { Some(json!({})) } else { None }).await;
        assert_error(&reply, 404, "resource_not_found", Some(param));
        assert_eq!(reply.body["error"]["type"], "not_found_error");
    }
    let unknown = call(&server, "GET", "/v1/agents/agent_nope", None).await;
    assert_eq!(unknown.body["error"]["message"], "agent 'agent_nope' not found");

    let cases = [
        ("/v1/agents", json!({}), "model"),
        ("/v1/agents", json!({"model": 3}), "model"),
        ("/v1/agents", json!({"model": "m", "tools": [{"type": "function"}]}), "tools[0].type"),
        ("/v1/agents", json!({"model": "m", "temperature": 1}), "temperature"),
        ("/v1/agents/environments", json!({"environment": "x"}), "environment"),
        ("/v1/agents/environments", json!({"environment": {"env": {"LD_PRELOAD": "x"}}}), "environment.env.LD_PRELOAD"),
        (
            "/v1/agents/environments",
            json!({"environment": {"workspace_directory": "relative"}}),
            "environment.workspace_directory",
        ),
        (
            "/v1/agents/environments",
            json!({"environment": {"workspace_directory": "/proc/x"}}),
            "environment.workspace_directory",
        ),
        ("/v1/agents/environments/templates", json!({"files": "x"}), "files"),
        ("/v1/agents/environments/templates", json!({"packages": {"npm": ["x"]}}), "packages"),
        ("/v1/files", json!({"purpose": "assistants", "data": "eA=="}), "purpose"),
        ("/v1/files", json!({"purpose": "user_data", "data": "not base64!"}), "data"),
    ];
    for (path, body, param) in cases {
        let reply = post(&server, path, body.clone()).await;
        assert_eq!(reply.status, 400, "{path} {body}: {}", reply.body);
        assert_eq!(reply.body["error"]["param"].as_str(), Some(param), "{path} {body}: {}", reply.body);
        assert_eq!(reply.body["error"]["type"], "invalid_request_error");
    }
    let missing =
        post(&server, "/v1/agents/environments", json!({"environment": {"environment_template_id": "envtmpl_x"}}))
            .await;
    assert_error(&missing, 404, "resource_not_found", Some("environment.environment_template_id"));
    let vault = post(&server, "/v1/agents/environments", json!({"environment": {}, "vault_ids": ["vlt_x"]})).await;
    assert_error(&vault, 404, "resource_not_found", Some("vault_ids[0]"));
    let unminted = post(
        &server,
        "/v1/agents/environments/templates",
        json!({"files": [{"type": "file_id", "file_id": "file-nope", "path": "/a"}]}),
    )
    .await;
    assert_error(&unminted, 400, "agents.file_not_found", Some("files[0].file_id"));

    // Sizes: the file limit (16 bytes here) for JSON, multipart and inline files; the body limit.
    let big = post(&server, "/v1/files", json!({"purpose": "user_data", "data": b64(&[7u8; 17])})).await;
    assert_error(&big, 400, "agents.file_too_large", Some("data"));
    let streamed = multipart(&server, "big.bin", vec![7u8; 64 * 1024]).await;
    assert_error(&streamed, 400, "agents.file_too_large", Some("file"));
    let leftovers = std::fs::read_dir(state.path().join("resources/files")).expect("files").count();
    assert_eq!(leftovers, 0, "a refused upload leaves nothing behind");
    let huge = "a".repeat(11 * 1024 * 1024);
    let over = post(&server, "/v1/agents", json!({"model": "m", "instructions": huge})).await;
    assert_eq!(over.status, 413, "{}", over.body);

    // The path policy: a workspace outside the base directory is refused as the reference refuses it.
    let outside = tempfile::tempdir().expect("outside");
    let denied = post(
        &server,
        "/v1/agents/environments",
        json!({"environment": {"workspace_directory": outside.path().join("ws").to_str(), "files": [{"type": "inline", "path": "/a.txt", "data": "eA=="}]}}),
    )
    .await;
    assert_eq!((denied.status, denied.body["code"].as_str()), (403, Some("path_not_allowed")), "{}", denied.body);
    assert_eq!(denied.body["endpoint"], "agents_environments_create");
    assert!(!outside.path().join("ws").exists(), "a refused directory is not created");
    let env = post(
        &server,
        "/v1/agents/environments",
        json!({"environment": {"workspace_directory": base.path().join("w").to_str()}}),
    )
    .await;
    let env_id = env.body["id"].as_str().expect("id");
    let files_at = format!("/v1/agents/environments/{env_id}/files");
    let refused =
        post(&server, &files_at, json!({"type": "inline", "path": "/workspace/.git/hooks/pre-commit", "data": "eA=="}))
            .await;
    assert_error(&refused, 400, "agents.path_refused", Some("file.path"));
    let escape = post(&server, &files_at, json!({"type": "inline", "path": "/workspace/../x", "data": "eA=="})).await;
    assert_error(&escape, 400, "invalid_request", Some("file.path"));
    for query in ["limit=0", "order=up", "page=x1"] {
        let reply = call(&server, "GET", &format!("{files_at}?{query}"), None).await;
        assert_eq!(reply.status, 400, "{query}: {}", reply.body);
    }
    let after = call(&server, "GET", "/v1/agents?after=agent_nope", None).await;
    assert_error(&after, 404, "agents.cursor_not_found", Some("after"));

    let caps = call(&server, "GET", "/capabilities", None).await;
    for id in [
        "agents_definitions_create",
        "agents_definitions_list",
        "agents_definitions_get",
        "agents_definitions_update",
        "agents_definitions_delete",
        "agents_environments_create",
        "agents_environments_list",
        "agents_environments_get",
        "agents_environment_files_create",
        "agents_environment_files_list",
        "agents_environment_templates_create",
        "agents_environment_templates_list",
        "agents_environment_templates_get",
        "agents_environment_templates_update",
        "agents_environment_templates_delete",
        "agents_files_create",
    ] {
        let state = &caps.body["endpoints"][id];
        assert_eq!((state["allowed"].as_bool(), &state["reason"]), (Some(true), &Value::Null), "{id}: {state}");
    }
}

/// One call as `token`.
async fn call_as(server: &TestServer, token: &str, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
    let method = reqwest::Method::from_bytes(method.as_bytes()).expect("method");
    let mut request = reqwest::Client::new().request(method, server.at(path)).bearer_auth(token);
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await.expect("send");
    (response.status().as_u16(), response.json().await.unwrap_or(Value::Null))
}

#[tokio::test]
async fn each_caller_sees_only_its_own_resources() {
    let state = tempfile::tempdir().expect("state");
    let base = tempfile::tempdir().expect("base");
    let policy = json!({"groups": ["agents"], "auth": {"tokens": [
        {"id": "alice", "scopes": ["*"], "token_env": "ABX_TEST_DEF_ALICE"},
        {"id": "bob", "scopes": ["*"], "token_env": "ABX_TEST_DEF_BOB"},
    ]}});
    let server = agents_server(state.path())
        .base_dir(base.path())
        .env("ABX_TEST_DEF_ALICE", "alice-tok-1")
        .env("ABX_TEST_DEF_BOB", "bob-tok-2")
        .env("ABX_SERVER_POLICY", &policy.to_string())
        .start();
    let (status, def) = call_as(&server, "alice-tok-1", "POST", "/v1/agents", Some(json!({"model": "m"}))).await;
    assert_eq!(status, 200, "{def}");
    let (_, blob) =
        call_as(&server, "alice-tok-1", "POST", "/v1/files", Some(json!({"purpose": "user_data", "data": "eA=="})))
            .await;
    let (_, template) =
        call_as(&server, "alice-tok-1", "POST", "/v1/agents/environments/templates", Some(json!({}))).await;
    let ids = [&def["id"], &blob["id"], &template["id"]].map(|v| v.as_str().expect("id").to_string());

    let (status, body) = call_as(&server, "bob-tok-2", "GET", &format!("/v1/agents/{}", ids[0]), None).await;
    assert_eq!(
        (status, body["error"]["message"].as_str()),
        (404, Some(format!("agent '{}' not found", ids[0]).as_str()))
    );
    let (_, listed) = call_as(&server, "bob-tok-2", "GET", "/v1/agents", None).await;
    assert_eq!(listed["data"], json!([]));
    let (status, _) =
        call_as(&server, "bob-tok-2", "GET", &format!("/v1/agents/environments/templates/{}", ids[2]), None).await;
    assert_eq!(status, 404);
    let foreign_blob = json!({"files": [{"type": "file_id", "file_id": ids[1], "path": "/x"}]});
    let (status, body) =
        call_as(&server, "bob-tok-2", "POST", "/v1/agents/environments/templates", Some(foreign_blob)).await;
    assert_eq!((status, body["error"]["code"].as_str()), (400, Some("agents.file_not_found")));
    let (_, models) = call_as(&server, "bob-tok-2", "GET", "/v1/models", None).await;
    assert!(models["data"].as_array().expect("models").iter().all(|m| m["id"] != ids[0].as_str()));
    let (status, _) = call_as(&server, "alice-tok-1", "GET", &format!("/v1/agents/{}", ids[0]), None).await;
    assert_eq!(status, 200);
}
