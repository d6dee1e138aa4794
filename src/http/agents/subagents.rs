//! A session's subagents: `GET .../subagents`, one subagent, and its turns
//! and items (read from the CLI's own records: blocking file reads).

use std::sync::Arc;

use abx_domain::agents::subagents::{rollout_child_ids, turns_for, SubagentRecord, SubagentTurn, TurnSource};
use abx_domain::agents::{AgentError, Agents, Session};
use abx_domain::policy::Grant;
use axum::extract::{Path, State};
use axum::Json;
use serde_json::Value;

use super::{owner, page, runtime, value_id, ListQuery, Result};
use crate::http::agents::wire::subagents::{item_objects, subagent_object, turn_objects};
use crate::http::agents::wire::Page;
use crate::http::extract::Query;
use crate::http::AppState;

/// Every subagent of `session`: the ids its CLI streamed and, for Codex,
/// the child threads its rollout names.
async fn records(agents: &Agents, session: &Session) -> Vec<SubagentRecord> {
    let mut records = session.subagents();
    let view = session.view();
    if view.spec.runtime == "codex" {
        if let (Some(home), Some(native)) = (agents.codex_home(), view.native_session_id.clone()) {
            let children =
                tokio::task::spawn_blocking(move || rollout_child_ids(&home, &native)).await.unwrap_or_default();
            for id in children {
                if !records.iter().any(|r| r.id == id) {
                    records.push(SubagentRecord {
                        id,
                        name: None,
                        instructions: None,
                        opened_at: session.created_at,
                        closed_at: None,
                        source: "codex".into(),
                        entries: Vec::new(),
                    });
                }
            }
        }
    }
    records.sort_by(|a, b| a.opened_at.total_cmp(&b.opened_at).then_with(|| a.id.cmp(&b.id)));
    records
}

struct Found {
    session: Arc<Session>,
    record: SubagentRecord,
}

async fn find(app: &AppState, grant: &Grant, id: &str, subagent_id: &str) -> Result<(Arc<Agents>, Found)> {
    let agents = runtime(app).await;
    let session = agents.session(owner(grant), id)?;
    let record = records(&agents, &session).await.into_iter().find(|r| r.id == subagent_id);
    let record = record.ok_or_else(|| AgentError::not_found("subagent", subagent_id, "subagent_id"))?;
    Ok((agents, Found { session, record }))
}

async fn turns(agents: &Agents, record: &SubagentRecord) -> (Vec<SubagentTurn>, TurnSource) {
    let home = agents.codex_home();
    let record = record.clone();
    let read = tokio::task::spawn_blocking(move || turns_for(&record, home.as_deref())).await;
    read.unwrap_or((Vec::new(), TurnSource::ParentStream))
}

/// `GET /v1/agents/sessions/{id}/subagents`.
pub async fn subagents_list(
    State(app): State<AppState>,
    grant: Grant,
    Path(id): Path<String>,
    Query(query): Query<ListQuery>,
) -> Result<Json<Page<Value>>> {
    let agents = runtime(&app).await;
    let session = agents.session(owner(&grant), &id)?;
    let parent = session.meta().display_id;
    let objects = records(&agents, &session).await.iter().map(|r| subagent_object(r, &session.id, &parent)).collect();
    page(objects, value_id, &query)
}

/// `GET /v1/agents/sessions/{id}/subagents/{subagent_id}`.
pub async fn subagent_get(
    State(app): State<AppState>,
    grant: Grant,
    Path((id, subagent_id)): Path<(String, String)>,
) -> Result<Json<Value>> {
    let (_, found) = find(&app, &grant, &id, &subagent_id).await?;
    Ok(Json(subagent_object(&found.record, &found.session.id, &found.session.meta().display_id)))
}

/// `GET /v1/agents/sessions/{id}/subagents/{subagent_id}/items`.
pub async fn subagent_items(
    State(app): State<AppState>,
    grant: Grant,
    Path((id, subagent_id)): Path<(String, String)>,
    Query(query): Query<ListQuery>,
) -> Result<Json<Page<Value>>> {
    let (agents, found) = find(&app, &grant, &id, &subagent_id).await?;
    let (turns, source) = turns(&agents, &found.record).await;
    page(item_objects(&turns, source), value_id, &query)
}

/// `GET /v1/agents/sessions/{id}/subagents/{subagent_id}/turns`.
pub async fn subagent_turns(
    State(app): State<AppState>,
    grant: Grant,
    Path((id, subagent_id)): Path<(String, String)>,
    Query(query): Query<ListQuery>,
) -> Result<Json<Page<Value>>> {
    let (agents, found) = find(&app, &grant, &id, &subagent_id).await?;
    let (turns, source) = turns(&agents, &found.record).await;
    let running = found.session.status() == "in_progress";
    page(turn_objects(&found.record, &found.session.id, &turns, source, running), value_id, &query)
}

async fn one_turn(
    app: &AppState,
    grant: &Grant,
    id: &str,
    subagent_id: &str,
    turn_id: &str,
) -> Result<(Found, SubagentTurn, TurnSource)> {
    let (agents, found) = find(app, grant, id, subagent_id).await?;
    let (turns, source) = turns(&agents, &found.record).await;
    let turn =
        turns.into_iter().find(|t| t.id == turn_id).ok_or_else(|| AgentError::not_found("turn", turn_id, "turn_id"))?;
    Ok((found, turn, source))
}

/// `GET /v1/agents/sessions/{id}/subagents/{subagent_id}/turns/{turn_id}`.
pub async fn subagent_turn_get(
    State(app): State<AppState>,
    grant: Grant,
    Path((id, subagent_id, turn_id)): Path<(String, String, String)>,
) -> Result<Json<Value>> {
    let (found, turn, source) = one_turn(&app, &grant, &id, &subagent_id, &turn_id).await?;
    let running = found.session.status() == "in_progress";
    let objects = turn_objects(&found.record, &found.session.id, std::slice::from_ref(&turn), source, running);
    Ok(Json(objects.into_iter().next().unwrap_or(Value::Null)))
}

/// `GET /v1/agents/sessions/{id}/subagents/{subagent_id}/turns/{turn_id}/items`.
pub async fn subagent_turn_items(
    State(app): State<AppState>,
    grant: Grant,
    Path((id, subagent_id, turn_id)): Path<(String, String, String)>,
    Query(query): Query<ListQuery>,
) -> Result<Json<Page<Value>>> {
    let (_, turn, source) = one_turn(&app, &grant, &id, &subagent_id, &turn_id).await?;
    page(item_objects(std::slice::from_ref(&turn), source), value_id, &query)
}
