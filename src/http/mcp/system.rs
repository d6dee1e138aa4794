//! The system tools: `GET /system/info` and `GET /system/metrics`.

use axum::extract::State;
use rmcp::ErrorData;
use serde_json::{Map, Value};

use super::call::{arguments, Ctx, Outcome};
use super::call::{json_result, Empty};
use crate::http::system as handlers;

/// `system_info`: `GET /system/info`.
pub async fn info(ctx: &Ctx<'_>, args: Map<String, Value>) -> Result<Outcome, ErrorData> {
    let _: Empty = arguments(args)?;
    Ok(handlers::info(State(ctx.app.clone())).await.map(|j| json_result(&j.0)).into())
}

/// `system_metrics`: `GET /system/metrics`.
pub async fn metrics(ctx: &Ctx<'_>, args: Map<String, Value>) -> Result<Outcome, ErrorData> {
    let _: Empty = arguments(args)?;
    Ok(handlers::metrics(State(ctx.app.clone())).await.map(|j| json_result(&j.0)).into())
}
