//! `POST/GET /v1/agents/sessions`, `GET/POST/DELETE /v1/agents/sessions/{id}`
//! and `POST /v1/agents/sessions/{id}/events` (queue input, cancel).

use std::collections::BTreeMap;

use abx_domain::agents::vaults::{record_bindings, Binding, ToolTarget};
use abx_domain::agents::{AgentError, AgentSpec, Agents, NewSession, SessionKind, SessionMeta, TurnInput};
use abx_domain::policy::Grant;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::Json;
use serde_json::{Map, Value};

use super::environments::Refusal;
use super::exec::admit_cli;
use super::{owner, page, runtime, AgentsError, ListQuery, Result};
use crate::http::agents::wire::definitions::tools_of;
use crate::http::agents::wire::objects::SessionObject;
use crate::http::agents::wire::requests::{self, INLINE_AGENT_KEYS};
use crate::http::agents::wire::tools::McpTool;
use crate::http::agents::wire::{Deleted, Label};
use crate::http::extract::{JsonBody, Query};
use crate::http::AppState;

fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok()).map(str::trim).filter(|v| !v.is_empty())
}

/// `POST /v1/agents/sessions`: a session bound to a runtime, with its first input when given.
pub async fn sessions_create(
    State(app): State<AppState>,
    grant: Grant,
    headers: HeaderMap,
    JsonBody(body): JsonBody<Map<String, Value>>,
) -> std::result::Result<Json<SessionObject>, Refusal> {
    let agents = runtime(&app).await;
    let new = plan(&agents, owner(&grant), header(&headers, "x-abx-adapter"), &body)?;
    admit_cli(&grant, &agents, &new.spec)?;
    let metadata = requests::metadata_scalars(body.get("metadata"))?;
    let session = agents.create_session(NewSession { metadata, ..new })?;
    let prompt = requests::text_of(body.get("input").unwrap_or(&Value::Null));
    if !prompt.is_empty() {
        agents.submit(&session, TurnInput { prompt, ..TurnInput::default() })?;
    }
    Ok(Json(SessionObject::new(&session.view())))
}

/// Reads the agent, environment and vaults of a create request into a session plan.
fn plan(agents: &Agents, owner: &str, adapter_header: Option<&str>, body: &Map<String, Value>) -> Result<NewSession> {
    let is_runtime = |m: &str| agents.adapters().resolve(m).is_some();
    let explicit = requests::explicit_runtime(adapter_header, body, is_runtime);
    let agent_id = body.get("agent_id").filter(|v| !v.is_null());
    if agent_id.is_none() {
        agents.select_runtime(explicit.as_deref())?;
    }
    if agent_id.is_some() && body.get("agent").is_some_and(|a| !a.is_null()) {
        return Err(AgentError::invalid("agent_id: send either agent or agent_id, not both", "agent_id").into());
    }
    let environment = body.get("environment").and_then(Value::as_object);
    let bound = match environment.and_then(|e| e.get("id")).filter(|v| !v.is_null()) {
        None => None,
        Some(id) => {
            let id = id.as_str().map_or_else(|| id.to_string(), str::to_string);
            let found = agents.resources.environments.get(owner, &id);
            Some(found.ok_or_else(|| AgentError::not_found("environment", &id, "environment.id"))?)
        }
    };
    let mut workspace = requests::workspace_of(body)?;
    let mut vault_ids = crate::http::agents::wire::environments::vault_ids(body.get("vault_ids"), "vault_ids")?;
    let mut env = BTreeMap::new();
    if let Some(bound) = &bound {
        let given = environment.and_then(|e| e.get("workspace_directory")).and_then(Value::as_str);
        if given.is_some_and(|g| !g.is_empty() && g != bound.data.workspace_directory) {
            let message = "environment.workspace_directory differs from the environment's own directory";
            return Err(AgentError::invalid(message, "environment.workspace_directory").into());
        }
        workspace.clone_from(&bound.data.workspace_directory);
        env.clone_from(&bound.data.env);
        for id in &bound.data.vault_ids {
            if !vault_ids.contains(id) {
                vault_ids.push(id.clone());
            }
        }
    }
    let vault_ids = agents.vaults().resolve(owner, &vault_ids)?;
    let environment_id = bound.map(|b| b.id.clone());
    if let Some(id) = agent_id {
        let id = id.as_str().map_or_else(|| id.to_string(), str::to_string);
        let definition = agents.resources.definitions.get(owner, &id);
        let definition = definition.ok_or_else(|| AgentError::not_found("agent", &id, "agent_id"))?;
        let (spec, meta) = super::definitions::session_of(agents, &definition, workspace, env)?;
        let bindings = bind(agents, owner, &vault_ids, &tools_of(&definition.data))?;
        let mut meta =
            SessionMeta { owner: owner.to_string(), kind: SessionKind::Session, environment_id, vault_ids, ..meta };
        record_bindings(&mut meta, &bindings);
        return Ok(NewSession { spec, meta, metadata: Map::new() });
    }
    let runtime = agents.select_runtime(explicit.as_deref())?;
    let mut inline = requests::agent_block(body);
    inline.remove("adapter");
    inline.remove("runtime");
    let fields = requests::agent_fields(&inline, runtime, "agent.", INLINE_AGENT_KEYS, false)?;
    if body.get("tools").is_some_and(|t| !t.is_null()) {
        return Err(AgentError::invalid("tools: send tools inside agent", "tools").into());
    }
    let model = requests::model_field(body).filter(|m| agents.adapters().resolve(m).is_none());
    let command =
        fields.command.clone().or_else(|| (runtime == "command").then(|| agents.config().command.clone()).flatten());
    let spec = AgentSpec {
        runtime: runtime.to_string(),
        model: model.clone(),
        instructions: fields.instructions.clone(),
        workspace,
        mcp_servers: fields.tools.iter().map(|t| t.server()).collect(),
        reasoning_effort: fields.reasoning_effort.clone(),
        command,
        limits: agents.config().limits,
        env,
        ..AgentSpec::default()
    };
    let bindings = bind(agents, owner, &vault_ids, &fields.tools)?;
    let name = fields.name.clone().unwrap_or_else(|| runtime.to_string());
    let mut meta = SessionMeta {
        owner: owner.to_string(),
        kind: SessionKind::Session,
        display_id: name.clone(),
        display_name: Some(name),
        display_model: model.unwrap_or_else(|| runtime.to_string()),
        tools: fields.tools.iter().map(|t| t.wire()).collect(),
        environment_id,
        vault_ids,
        ..SessionMeta::default()
    };
    record_bindings(&mut meta, &bindings);
    Ok(NewSession { spec, meta, metadata: Map::new() })
}

/// Binds each MCP tool of a new session (inline or from its definition) to
/// the credential of `vault_ids` it names or whose server URL it has.
fn bind(agents: &Agents, owner: &str, vault_ids: &[String], tools: &[McpTool]) -> Result<Vec<Binding>> {
    let targets: Vec<ToolTarget<'_>> = tools
        .iter()
        .map(|t| ToolTarget { label: &t.label, url: &t.url, credential_id: t.credential_id.as_deref() })
        .collect();
    Ok(agents.vaults().bind(owner, vault_ids, &targets)?)
}

/// `GET /v1/agents/sessions`.
pub async fn sessions_list(
    State(app): State<AppState>,
    grant: Grant,
    Query(query): Query<ListQuery>,
) -> Result<Json<crate::http::agents::wire::Page<SessionObject>>> {
    let agents = runtime(&app).await;
    let mut objects: Vec<SessionObject> =
        agents.sessions(owner(&grant), SessionKind::Session).iter().map(|s| SessionObject::new(&s.view())).collect();
    if let Some(agent_id) = query.agent_id.as_deref().filter(|a| !a.is_empty()) {
        objects.retain(|o| o.agent.id == agent_id);
    }
    page(objects, |o| o.id.clone(), &query)
}

/// `GET /v1/agents/sessions/{id}`.
pub async fn sessions_get(
    State(app): State<AppState>,
    grant: Grant,
    Path(id): Path<String>,
) -> Result<Json<SessionObject>> {
    let session = runtime(&app).await.session(owner(&grant), &id)?;
    Ok(Json(SessionObject::new(&session.view())))
}

/// `POST /v1/agents/sessions/{id}`: only `metadata` can change.
pub async fn sessions_update(
    State(app): State<AppState>,
    grant: Grant,
    Path(id): Path<String>,
    JsonBody(body): JsonBody<Map<String, Value>>,
) -> Result<Json<SessionObject>> {
    let session = runtime(&app).await.session(owner(&grant), &id)?;
    for key in body.keys() {
        let message = match requests::update_refusal(key) {
            Some(why) => format!("{key}: {why}"),
            None if key != "metadata" => format!("{key}: only metadata can be updated"),
            None => continue,
        };
        return Err(AgentError::invalid(message, key.clone()).into());
    }
    if let Some(raw) = body.get("metadata") {
        session.set_metadata(requests::metadata_strict(raw, "metadata")?);
    }
    Ok(Json(SessionObject::new(&session.view())))
}

/// `DELETE /v1/agents/sessions/{id}`: ends its turns and removes it.
pub async fn sessions_delete(
    State(app): State<AppState>,
    grant: Grant,
    Path(id): Path<String>,
) -> Result<Json<Deleted>> {
    let agents = runtime(&app).await;
    let session = agents.session(owner(&grant), &id)?;
    agents.delete_session(&session).await;
    Ok(Json(Deleted {
        id,
        object: "agent.session.deleted",
        deleted: true,
        x_agent_sandbox: Label::process(&["queued_not_steered", "usage_adapter_best_effort"]),
    }))
}

/// `POST /v1/agents/sessions/{id}/events`: queues a turn and/or cancels the
/// running one; 202 with an empty body. An `Idempotency-Key` replayed with
/// the same body is acknowledged without a second turn.
pub async fn events_create(
    State(app): State<AppState>,
    grant: Grant,
    Path(id): Path<String>,
    headers: HeaderMap,
    JsonBody(body): JsonBody<Map<String, Value>>,
) -> std::result::Result<StatusCode, Refusal> {
    let agents = runtime(&app).await;
    let session = agents.session(owner(&grant), &id)?;
    let key = requests::idempotency_key(header(&headers, "idempotency-key"))?;
    let digest = requests::digest(&Value::Object(body.clone()));
    if let Some(key) = &key {
        if agents.idempotent(&session, key, &digest)? {
            return Ok(StatusCode::ACCEPTED);
        }
    }
    let (prompt, cancel) = requests::event_input(&body)?;
    if cancel {
        agents.cancel_active(&session);
    }
    if !prompt.is_empty() {
        admit_cli(&grant, &agents, &session.spec())?;
        agents.submit(&session, TurnInput { prompt, ..TurnInput::default() }).map_err(AgentsError)?;
    }
    if let Some(key) = &key {
        agents.remember_key(&session, key, &digest);
    }
    Ok(StatusCode::ACCEPTED)
}
