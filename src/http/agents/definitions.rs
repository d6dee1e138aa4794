//! `/v1/agents` and `/v1/agents/{agent_id}`: agent definitions (create,
//! list, get, update in place, delete). A session or response copies a
//! definition when it is created (`sessions.rs`, `responses.rs`).

use std::collections::BTreeMap;

use abx_domain::agents::records::Stored;
use abx_domain::agents::resources::Definition;
use abx_domain::agents::{AgentError, AgentSpec, Agents, SessionMeta};
use abx_domain::policy::Grant;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::Json;
use serde_json::{Map, Value};

use super::{owner, page, runtime, ListQuery, Result};
use crate::http::agents::wire::definitions::{apply_update, definition_object, deleted_object, parse_create, tools_of};
use crate::http::agents::wire::requests::explicit_runtime;
use crate::http::agents::wire::tools::McpTool;
use crate::http::agents::wire::Page;
use crate::http::extract::{JsonBody, Query};
use crate::http::AppState;

fn not_found(id: &str) -> AgentError {
    AgentError::not_found("agent", id, "agent_id")
}

/// `POST /v1/agents`.
pub async fn definitions_create(
    State(app): State<AppState>,
    grant: Grant,
    headers: HeaderMap,
    JsonBody(body): JsonBody<Map<String, Value>>,
) -> Result<Json<Value>> {
    let agents = runtime(&app).await;
    let named = headers.get("x-abx-adapter").and_then(|v| v.to_str().ok());
    let explicit = explicit_runtime(named, &body, |m| agents.adapters().resolve(m).is_some());
    let runtime = agents.select_runtime(explicit.as_deref())?;
    let definition = parse_create(&body, runtime)?;
    let record = agents.resources.definitions.create(owner(&grant), definition)?;
    Ok(Json(definition_object(&record)))
}

/// `GET /v1/agents`.
pub async fn definitions_list(
    State(app): State<AppState>,
    grant: Grant,
    Query(query): Query<ListQuery>,
) -> Result<Json<Page<Value>>> {
    let agents = runtime(&app).await;
    let Json(listed) = page(agents.resources.definitions.list(owner(&grant)), |r| r.id.clone(), &query)?;
    Ok(Json(listed.map(|r| definition_object(&r))))
}

/// `GET /v1/agents/{agent_id}`.
pub async fn definitions_get(State(app): State<AppState>, grant: Grant, Path(id): Path<String>) -> Result<Json<Value>> {
    let record = runtime(&app).await.resources.definitions.get(owner(&grant), &id).ok_or_else(|| not_found(&id))?;
    Ok(Json(definition_object(&record)))
}

/// `POST /v1/agents/{agent_id}`: omitted fields stay; sessions keep their copy.
pub async fn definitions_update(
    State(app): State<AppState>,
    grant: Grant,
    Path(id): Path<String>,
    JsonBody(body): JsonBody<Map<String, Value>>,
) -> Result<Json<Value>> {
    let agents = runtime(&app).await;
    let updated = agents.resources.definitions.update(owner(&grant), &id, |d| apply_update(d, &body))?;
    Ok(Json(definition_object(&*updated.ok_or_else(|| not_found(&id))?)))
}

/// `DELETE /v1/agents/{agent_id}`.
pub async fn definitions_delete(
    State(app): State<AppState>,
    grant: Grant,
    Path(id): Path<String>,
) -> Result<Json<Value>> {
    let deleted = runtime(&app).await.resources.definitions.delete(owner(&grant), &id)?;
    Ok(Json(deleted_object(&*deleted.ok_or_else(|| not_found(&id))?)))
}

/// What a session or response created from `definition` runs (a copy taken
/// now: later updates do not reach it), in `workspace` with `env`.
///
/// # Errors
/// 400 `agents.credentials_lost` when its MCP header values did not survive a restart.
pub(super) fn session_of(
    agents: &Agents,
    definition: &Stored<Definition>,
    workspace: String,
    env: BTreeMap<String, String>,
) -> Result<(AgentSpec, SessionMeta)> {
    let d = &definition.data;
    if d.lost_secrets() {
        let message = format!(
            "agent {}: its MCP header values are kept in memory only and were lost when the server restarted; \
             send its tools again with POST /v1/agents/{}",
            abx_domain::pyrepr::repr_str(&definition.id),
            definition.id
        );
        return Err(AgentError::invalid_code(message, Some("agent_id"), "agents.credentials_lost").into());
    }
    let command =
        d.command.clone().or_else(|| (d.adapter == "command").then(|| agents.config().command.clone()).flatten());
    let spec = AgentSpec {
        runtime: d.adapter.clone(),
        model: Some(d.model.clone()).filter(|m| agents.adapters().resolve(m).is_none()),
        instructions: d.instructions.clone(),
        workspace,
        env,
        mcp_servers: d.tools.iter().map(|t| t.server.clone()).collect(),
        reasoning_effort: d.reasoning_effort.clone(),
        command,
        limits: agents.config().limits,
        ..AgentSpec::default()
    };
    let meta = SessionMeta {
        display_id: definition.id.clone(),
        display_name: d.name.clone(),
        display_model: d.model.clone(),
        tools: tools_of(d).iter().map(McpTool::wire).collect(),
        definition_id: Some(definition.id.clone()),
        ..SessionMeta::default()
    };
    Ok((spec, meta))
}
