//! A session's turns and items: `GET .../items`, `.../turns`,
//! `.../turns/{turn_id}` and `.../turns/{turn_id}/items`.

use abx_domain::agents::{AgentError, Session};
use abx_domain::policy::Grant;
use axum::extract::{Path, State};
use axum::Json;
use serde_json::Value;

use super::{owner, page, runtime, value_id, ListQuery, Result};
use crate::http::agents::wire::objects::{item_object, TurnObject};
use crate::http::agents::wire::Page;
use crate::http::extract::Query;
use crate::http::AppState;

async fn session(app: &AppState, grant: &Grant, id: &str) -> Result<std::sync::Arc<Session>> {
    Ok(runtime(app).await.session(owner(grant), id)?)
}

fn turn_object(session: &Session, turn: &abx_domain::agents::turn::TurnRecord) -> TurnObject {
    TurnObject::new(&turn.summary(), &session.id, &session.meta().display_id, true)
}

/// `GET /v1/agents/sessions/{id}/items`: the items of its listed turns.
pub async fn items_list(
    State(app): State<AppState>,
    grant: Grant,
    Path(id): Path<String>,
    Query(query): Query<ListQuery>,
) -> Result<Json<Page<Value>>> {
    let session = session(&app, &grant, &id).await?;
    let items: Vec<Value> = session.turns().iter().flat_map(|t| t.items.iter().map(|i| item_object(i, true))).collect();
    page(items, value_id, &query)
}

/// `GET /v1/agents/sessions/{id}/turns`.
pub async fn turns_list(
    State(app): State<AppState>,
    grant: Grant,
    Path(id): Path<String>,
    Query(query): Query<ListQuery>,
) -> Result<Json<Page<TurnObject>>> {
    let session = session(&app, &grant, &id).await?;
    let turns: Vec<TurnObject> = session.turns().iter().map(|t| turn_object(&session, t)).collect();
    page(turns, |t| t.id.clone(), &query)
}

/// `GET /v1/agents/sessions/{id}/turns/{turn_id}`.
pub async fn turn_get(
    State(app): State<AppState>,
    grant: Grant,
    Path((id, turn_id)): Path<(String, String)>,
) -> Result<Json<TurnObject>> {
    let session = session(&app, &grant, &id).await?;
    let turn =
        session.turn(&turn_id).filter(|t| t.keep).ok_or_else(|| AgentError::not_found("turn", &turn_id, "turn_id"))?;
    Ok(Json(turn_object(&session, &turn)))
}

/// `GET /v1/agents/sessions/{id}/turns/{turn_id}/items`.
pub async fn turn_items(
    State(app): State<AppState>,
    grant: Grant,
    Path((id, turn_id)): Path<(String, String)>,
    Query(query): Query<ListQuery>,
) -> Result<Json<Page<Value>>> {
    let session = session(&app, &grant, &id).await?;
    let turn =
        session.turn(&turn_id).filter(|t| t.keep).ok_or_else(|| AgentError::not_found("turn", &turn_id, "turn_id"))?;
    page(turn.items.iter().map(|i| item_object(i, true)).collect(), value_id, &query)
}
