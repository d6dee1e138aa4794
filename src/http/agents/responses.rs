//! `/v1/responses`: create (blocking, `background` or `stream`), get (or
//! replay its stream), delete, cancel, input items, compact and the
//! WebSocket `connect` (refused over plain HTTP, as the reference). Each
//! response is one turn of a response session (`agents::responses`);
//! `previous_response_id` queues the turn on that response's session.

use std::sync::Arc;
use std::time::Duration;

use abx_domain::agents::responses::{FoundResponse, ResponseRecord};
use abx_domain::agents::turn::{now, TurnStatus};
use abx_domain::agents::{AgentError, AgentSpec, Agents, NewSession, SessionKind, SessionMeta, TurnInput};
use abx_domain::policy::Grant;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Map, Value};

use super::environments::Refusal;
use super::exec::admit_cli;
use super::response_stream::sse;
use super::{owner, page, runtime, value_id, ListQuery, Result};
use crate::http::agents::wire::requests::explicit_runtime;
use crate::http::agents::wire::responses::{
    input_item, output_item, parse_create, response_object, tool_echo, usage_object, CreateRequest, IGNORED_HEADER,
};
use crate::http::agents::wire::{Label, Page};
use crate::http::extract::{JsonBody, Query};
use crate::http::AppState;

/// Added to a turn's own time limit while a blocking create waits for it.
const WAIT_SLACK: Duration = Duration::from_secs(30);
const EFFORTS: [&str; 6] = ["none", "minimal", "low", "medium", "high", "xhigh"];

fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok()).map(str::trim).filter(|v| !v.is_empty())
}

/// `POST /v1/responses`.
pub async fn responses_create(
    State(app): State<AppState>,
    grant: Grant,
    headers: HeaderMap,
    JsonBody(body): JsonBody<Map<String, Value>>,
) -> std::result::Result<Response, Refusal> {
    let mut request = parse_create(&body)?;
    let agents = runtime(&app).await;
    let owner = owner(&grant);
    let found = match request.previous_response_id.clone() {
        Some(previous) => continue_conversation(&grant, &agents, &previous, &request)?,
        None => {
            let (new, record) = plan(&agents, owner, header(&headers, "x-abx-adapter"), &body, &mut request)?;
            admit_cli(&grant, &agents, &new.spec)?;
            agents.start_response(new, record, turn_input(&request))?
        }
    };
    let mut response = if request.stream {
        sse(&agents, &found, None, app.shutdown.clone())?
    } else {
        let found = if request.background { found } else { wait(&agents, found).await };
        let mut object = response_object(&found.record, &found.turn);
        if matches!(found.turn.status, TurnStatus::Queued | TurnStatus::InProgress) {
            object["status"] = json!("in_progress");
        }
        Json(object).into_response()
    };
    if !request.ignored.is_empty() {
        if let Ok(value) = HeaderValue::from_str(&request.ignored.join(",")) {
            response.headers_mut().insert(IGNORED_HEADER, value);
        }
    }
    Ok(response)
}

fn turn_input(request: &CreateRequest) -> TurnInput {
    TurnInput {
        prompt: request.prompt.clone(),
        instructions: request.instructions.clone(),
        mcp_servers: request.tools.iter().map(|t| t.server()).collect(),
        input_items: request.input_items.clone(),
        ..TurnInput::default()
    }
}

fn new_record(request: &CreateRequest) -> ResponseRecord {
    ResponseRecord {
        id: format!("resp_{}", abx_domain::ids::random_hex(12)),
        created_at: now() as i64,
        adapter: String::new(),
        model: String::new(),
        model_resolved: false,
        instructions: request.instructions_sent.clone(),
        metadata: request.metadata.clone(),
        tools: request.tools.iter().map(tool_echo).collect(),
        background: request.background,
        store: request.store,
        previous_response_id: None,
        log_start: 0,
    }
}

/// A response on the session of `previous`, which must be its conversation's latest.
fn continue_conversation(
    grant: &Grant,
    agents: &Arc<Agents>,
    previous: &Value,
    request: &CreateRequest,
) -> std::result::Result<FoundResponse, Refusal> {
    let id = previous.as_str().map_or_else(|| abx_domain::pyrepr::str_of(previous), str::to_string);
    let previous = agents.response_at(owner(grant), &id, "previous_response_id")?;
    not_latest(
        &agents.latest_response(&previous.session),
        &id,
        "of a conversation can be continued; the CLI session is linear",
    )?;
    refuse_tools(&previous.record.adapter, request)?;
    let mut tools = previous.record.tools.clone();
    tools.extend(request.tools.iter().map(tool_echo));
    let record = ResponseRecord {
        adapter: previous.record.adapter.clone(),
        model: previous.record.model.clone(),
        model_resolved: previous.record.model_resolved,
        tools,
        previous_response_id: Some(id),
        ..new_record(request)
    };
    Ok(agents.continue_response(&previous.session, record, turn_input(request))?)
}

/// The session and record of a new conversation: its runtime (named, or
/// the default), the model handed to the CLI, the reasoning effort (Codex).
fn plan(
    agents: &Agents,
    owner: &str,
    adapter_header: Option<&str>,
    body: &Map<String, Value>,
    request: &mut CreateRequest,
) -> Result<(NewSession, ResponseRecord)> {
    let is_runtime = |m: &str| agents.adapters().resolve(m).is_some();
    if let Some(definition) =
        request.model.starts_with("agent_").then(|| agents.resources.definitions.get(owner, &request.model)).flatten()
    {
        refuse_tools(&definition.data.adapter, request)?;
        let workspace = agents.config().responses_workspace.clone();
        let (spec, meta) = super::definitions::session_of(agents, &definition, workspace, Default::default())?;
        let mut tools = meta.tools.clone();
        tools.extend(request.tools.iter().map(tool_echo));
        let record = ResponseRecord {
            adapter: spec.runtime.clone(),
            model: definition.data.model.clone(),
            model_resolved: spec.model.is_some(),
            tools,
            ..new_record(request)
        };
        let meta = SessionMeta { owner: owner.to_string(), kind: SessionKind::Response, ..meta };
        return Ok((NewSession { spec, meta, metadata: Map::new() }, record));
    }
    let runtime = agents.select_runtime(explicit_runtime(adapter_header, body, is_runtime).as_deref())?;
    refuse_tools(runtime, request)?;
    let mut effort = None;
    match request.reasoning.as_ref() {
        Some(Value::Object(reasoning)) if runtime == "codex" => {
            let raw = reasoning.get("effort").filter(|e| !e.is_null());
            if raw.is_some_and(|e| !e.as_str().is_some_and(|e| EFFORTS.contains(&e))) {
                return Err(AgentError::invalid("reasoning.effort: invalid value", "reasoning.effort").into());
            }
            effort = raw.and_then(Value::as_str).map(str::to_string);
        }
        Some(_) if !request.ignored.iter().any(|i| i == "reasoning") => request.ignored.push("reasoning".into()),
        _ => {}
    }
    let model = Some(request.model.clone()).filter(|m| !is_runtime(m));
    let config = agents.config();
    let spec = AgentSpec {
        runtime: runtime.to_string(),
        model: model.clone(),
        workspace: config.responses_workspace.clone(),
        reasoning_effort: effort,
        command: (runtime == "command").then(|| config.command.clone()).flatten(),
        limits: config.limits,
        ..AgentSpec::default()
    };
    let name = format!("resp-{}", &abx_domain::ids::random_hex(10));
    let display_model = model.clone().unwrap_or_else(|| runtime.to_string());
    let meta = SessionMeta {
        owner: owner.to_string(),
        kind: SessionKind::Response,
        display_id: name.clone(),
        display_name: Some(name),
        display_model: display_model.clone(),
        ..SessionMeta::default()
    };
    let record = ResponseRecord {
        adapter: runtime.to_string(),
        model: display_model,
        model_resolved: model.is_some(),
        ..new_record(request)
    };
    Ok((NewSession { spec, meta, metadata: Map::new() }, record))
}

/// The `command` runtime reaches no MCP server of its own.
fn refuse_tools(runtime: &str, request: &CreateRequest) -> Result<()> {
    if runtime == "command" && !request.tools.is_empty() {
        let message = "tools: mcp tools are not supported by the generic command runtime";
        return Err(AgentError::invalid(message, "tools").into());
    }
    Ok(())
}

/// Waits until the response's turn is over (at most its time limit and a
/// margin), then reads it again.
async fn wait(agents: &Agents, found: FoundResponse) -> FoundResponse {
    let limit = agents.config().limits.turn_timeout + WAIT_SLACK;
    let _ = tokio::time::timeout(limit, agents.wait_turn(&found.session, &found.turn.id)).await;
    let turn = found.session.turn(&found.turn.id).unwrap_or(found.turn);
    FoundResponse { turn, ..found }
}

/// The query of `GET /v1/responses/{id}`.
#[derive(Debug, Default, Deserialize)]
pub struct GetQuery {
    stream: Option<String>,
    starting_after: Option<String>,
}

/// `GET /v1/responses/{response_id}`; `stream=true` replays its events.
pub async fn responses_get(
    State(app): State<AppState>,
    grant: Grant,
    Path(id): Path<String>,
    Query(query): Query<GetQuery>,
) -> Result<Response> {
    let agents = runtime(&app).await;
    let found = agents.response(owner(&grant), &id)?;
    if query.stream.as_deref() != Some("true") {
        return Ok(Json(response_object(&found.record, &found.turn)).into_response());
    }
    let after = match query.starting_after.as_deref().filter(|s| !s.is_empty()) {
        None => None,
        Some(raw) if raw.bytes().all(|b| b.is_ascii_digit()) => raw.parse().ok(),
        Some(_) => {
            return Err(AgentError::invalid("starting_after: expected a sequence number", "starting_after").into())
        }
    };
    sse(&agents, &found, after, app.shutdown.clone())
}

/// `DELETE /v1/responses/{response_id}`: the response, and its session with its last response.
pub async fn responses_delete(
    State(app): State<AppState>,
    grant: Grant,
    Path(id): Path<String>,
) -> Result<Json<Value>> {
    let agents = runtime(&app).await;
    let found = agents.response(owner(&grant), &id)?;
    agents.delete_response(&found).await;
    let label = Label::state(&["response_is_cli_turn"]);
    Ok(Json(json!({"id": found.record.id, "object": "response", "deleted": true, "x_agent_sandbox": label})))
}

/// `POST /v1/responses/{response_id}/cancel`: only while its turn waits or runs.
pub async fn responses_cancel(
    State(app): State<AppState>,
    grant: Grant,
    Path(id): Path<String>,
) -> Result<Json<Value>> {
    let agents = runtime(&app).await;
    let found = agents.response(owner(&grant), &id)?;
    let status = found.turn.status;
    if !matches!(status, TurnStatus::Queued | TurnStatus::InProgress)
        || !agents.cancel_turn(&found.session, &found.turn.id)
    {
        let now = found.session.turn_status(&found.turn.id).unwrap_or(status).as_str();
        let message = format!("response is already {now}; only a running response can be cancelled");
        return Err(AgentError::invalid_code(message, Some("response_id"), "agents.not_cancellable").into());
    }
    let bound = agents.config().kill_grace + Duration::from_secs(5);
    let _ = tokio::time::timeout(bound, agents.wait_turn(&found.session, &found.turn.id)).await;
    let turn = found.session.turn(&found.turn.id).unwrap_or(found.turn);
    Ok(Json(response_object(&found.record, &turn)))
}

/// `GET /v1/responses/{response_id}/input_items`: the input as accepted at create.
pub async fn responses_input_items(
    State(app): State<AppState>,
    grant: Grant,
    Path(id): Path<String>,
    Query(query): Query<ListQuery>,
) -> Result<Json<Page<Value>>> {
    let found = runtime(&app).await.response(owner(&grant), &id)?;
    page(found.turn.input_items.iter().map(input_item).collect(), value_id, &query)
}

/// `POST /v1/responses/compact`: Qwen Code's `/compress` of the latest
/// response's conversation; the other CLIs have no compaction on request.
pub async fn responses_compact(
    State(app): State<AppState>,
    grant: Grant,
    JsonBody(body): JsonBody<Map<String, Value>>,
) -> std::result::Result<Json<Value>, Refusal> {
    if let Some(key) =
        body.keys().find(|k| !matches!(k.as_str(), "model" | "previous_response_id" | "adapter" | "runtime"))
    {
        return Err(
            AgentError::invalid(format!("{key}: compaction takes the stored conversation only"), key.clone()).into()
        );
    }
    let Some(id) = body.get("previous_response_id").and_then(Value::as_str).filter(|s| !s.is_empty()) else {
        let message = "previous_response_id: required; the summary is of that conversation";
        return Err(AgentError::invalid(message, "previous_response_id").into());
    };
    let agents = runtime(&app).await;
    let previous = agents.response_at(owner(&grant), id, "previous_response_id")?;
    let adapter = previous.record.adapter.as_str();
    if adapter != "qwen-code" {
        let why = if adapter == "codex" {
            "its exec mode emits no compaction item"
        } else {
            "its CLI has no compaction on request"
        };
        let message = format!("compaction is not supported for {adapter}: {why}");
        return Err(AgentError::invalid_code(message, Some("model"), "agents.compact_unsupported").into());
    }
    not_latest(&agents.latest_response(&previous.session), id, "can be compacted")?;
    admit_cli(&grant, &agents, &previous.session.spec())?;
    let turn = agents
        .submit(&previous.session, TurnInput { prompt: "/compress".into(), hidden: true, ..TurnInput::default() })?;
    let done = wait(&agents, FoundResponse { turn, ..previous }).await.turn;
    if done.status != TurnStatus::Completed {
        let message = "the CLI could not compress the conversation";
        return Err(AgentError::invalid_code(message, Some("previous_response_id"), "agents.compact_failed").into());
    }
    let output: Vec<Value> = done
        .items
        .iter()
        .filter(|i| matches!(i.body, abx_domain::agents::turn::ItemBody::Message { .. }))
        .map(output_item)
        .collect();
    let summary: Vec<&str> =
        output.iter().filter_map(|o| o["content"][0]["text"].as_str()).filter(|t| !t.is_empty()).collect();
    let mut label = Label::process(&["summary_not_encrypted_compaction", "response_is_cli_turn"]);
    if let Ok(Value::Object(counts)) = serde_json::from_str::<Value>(&summary.join(" ")) {
        for (key, out) in [("originalTokenCount", "original_token_count"), ("newTokenCount", "new_token_count")] {
            if let Some(n) = counts.get(key).and_then(Value::as_i64) {
                label = label.with(out, n);
            }
        }
    }
    Ok(Json(json!({
        "id": format!("resp_cmp_{}", abx_domain::ids::random_hex(10)),
        "object": "response.compaction",
        "created_at": done.created_at as i64,
        "output": output,
        "usage": done.usage.as_ref().map(usage_object),
        "x_agent_sandbox": label,
    })))
}

/// `GET /v1/responses`: `responses.connect` is a WebSocket; a plain GET is refused.
pub async fn responses_connect() -> Result<Json<Value>> {
    let message = "responses.connect needs a WebSocket upgrade, which this HTTP transport does not perform; use POST /v1/responses";
    Err(AgentError::invalid_code(message, None, "agents.websocket_upgrade_required").into())
}

/// Refuses a `previous_response_id` that is not the session's latest response.
fn not_latest(latest: &Option<String>, id: &str, only: &str) -> std::result::Result<(), AgentError> {
    if latest.as_deref() == Some(id) {
        return Ok(());
    }
    let message = format!("previous_response_id: only the latest response {only}");
    Err(AgentError::invalid_code(message, Some("previous_response_id"), "agents.previous_response_not_latest"))
}
