//! `GET /v1/agents/runtimes`: every declared runtime, whether it is
//! implemented here and whether its CLI is installed.

use axum::extract::State;
use axum::Json;
use serde_json::Value;

use super::{page, runtime, value_id, ListQuery, Result};
use crate::http::agents::wire::objects::runtime_object;
use crate::http::agents::wire::Page;
use crate::http::extract::Query;
use crate::http::AppState;

/// `GET /v1/agents/runtimes`.
pub async fn runtimes_list(State(app): State<AppState>, Query(query): Query<ListQuery>) -> Result<Json<Page<Value>>> {
    let infos = runtime(&app).await.runtimes().await;
    page(infos.iter().map(runtime_object).collect(), value_id, &query)
}
