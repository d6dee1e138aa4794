//! The agents group's HTTP edge (sessions, events, turns, items,
//! artifacts, traces, subagents, runtimes; responses and models; vaults; webhooks;
//! definitions, environments, templates and file blobs). Handlers read the request into
//! domain values (`wire::requests`), call the runtime (`agents`) and
//! write wire objects (`wire`); this module holds what they share:
//! the one error mapping of the OpenAI envelope, list paging, the owner of
//! a request, and the `X-Agent-Sandbox-Local` layer.

mod artifacts;
mod definitions;
mod environments;
mod exec;
mod files;
mod models;
mod response_stream;
mod responses;
mod runtimes;
mod sessions;
mod stream;
mod subagents;
mod turns;
mod vaults;
mod webhooks;
pub mod wire;

pub use self::artifacts::{artifact_content, artifacts_delete, artifacts_get, artifacts_list, traces_list};
pub use self::definitions::{
    definitions_create, definitions_delete, definitions_get, definitions_list, definitions_update,
};
pub use self::environments::{
    environment_files_create, environment_files_list, environments_create, environments_get, environments_list,
    templates_create, templates_delete, templates_get, templates_list, templates_update,
};
pub use self::files::files_create;
pub use self::models::{
    cannot_executor_channel, cannot_executor_registration, cannot_input_tokens, cannot_model_delete, models_get,
    models_list,
};
pub use self::responses::{
    responses_cancel, responses_compact, responses_connect, responses_create, responses_delete, responses_get,
    responses_input_items,
};
pub use self::runtimes::runtimes_list;
pub use self::sessions::{
    events_create, sessions_create, sessions_delete, sessions_get, sessions_list, sessions_update,
};
pub use self::stream::events_stream;
pub use self::subagents::{
    subagent_get, subagent_items, subagent_turn_get, subagent_turn_items, subagent_turns, subagents_list,
};
pub use self::turns::{items_list, turn_get, turn_items, turns_list};
pub use self::vaults::{
    credentials_create, credentials_delete, credentials_get, credentials_list, credentials_update, vaults_create,
    vaults_delete, vaults_get, vaults_list, vaults_update,
};
pub use self::webhooks::{
    webhook_event_types, webhooks_create, webhooks_delete, webhooks_get, webhooks_list, webhooks_rotate_secret,
    webhooks_test, webhooks_update,
};

use std::sync::Arc;

use abx_domain::agents::{AgentError, Agents};
use abx_domain::policy::Grant;
use axum::http::{HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;

use super::error::ErrorCode;
use crate::http::agents::wire::{ErrorEnvelope, ErrorObject, Label, Page, LOCAL_HEADER};

/// An agents handler's failure, written as the OpenAI error envelope.
#[derive(Debug)]
pub struct AgentsError(pub AgentError);

impl From<AgentError> for AgentsError {
    fn from(err: AgentError) -> Self {
        AgentsError(err)
    }
}

impl IntoResponse for AgentsError {
    fn into_response(self) -> Response {
        let message = self.0.to_string();
        let (status, error_type, param, code, label) = match self.0 {
            AgentError::NotFound { param, .. } => {
                (StatusCode::NOT_FOUND, "not_found_error", Some(param.to_string()), "resource_not_found", None)
            }
            AgentError::Invalid { param, code, .. } => {
                (StatusCode::BAD_REQUEST, "invalid_request_error", param, code, None)
            }
            AgentError::NotImplementedLocally { .. } => {
                let label = Label::new("none", &["not_implemented_locally"])
                    .with("runtimes", abx_domain::agents::runtime::RUNTIMES_PATH);
                (
                    StatusCode::NOT_FOUND,
                    "not_found_error",
                    Some("adapter".into()),
                    "agents.not_implemented_locally",
                    Some(label),
                )
            }
            AgentError::Unavailable(_) => {
                let label = Label::new("none", &["not_implemented_locally"])
                    .with("runtimes", abx_domain::agents::runtime::RUNTIMES_PATH);
                (StatusCode::NOT_FOUND, "not_found_error", None, "agents.not_implemented_locally", Some(label))
            }
            AgentError::ModelNotFound(_) => {
                (StatusCode::NOT_FOUND, "not_found_error", Some("model".into()), "model_not_found", None)
            }
            AgentError::CursorNotFound => {
                (StatusCode::NOT_FOUND, "not_found_error", Some("after".into()), "agents.cursor_not_found", None)
            }
            AgentError::IdempotencyMismatch => (
                StatusCode::CONFLICT,
                "invalid_request_error",
                Some("Idempotency-Key".into()),
                "idempotency.mismatch",
                None,
            ),
            AgentError::TooManySubscribers(_) => {
                (StatusCode::TOO_MANY_REQUESTS, "rate_limit_error", None, "agents.too_many_subscribers", None)
            }
            AgentError::QuotaExceeded { quota, limit, .. } => {
                let label = Label::new("none", &[]).with("quota", quota).with("limit", limit);
                (StatusCode::TOO_MANY_REQUESTS, "rate_limit_error", None, "agents.quota_exceeded", Some(label))
            }
            AgentError::Internal(_) => {
                (StatusCode::INTERNAL_SERVER_ERROR, "server_error", None, "internal_error", None)
            }
        };
        let message = if status.is_server_error() { "internal server error".to_string() } else { message };
        let body = ErrorEnvelope {
            error: ErrorObject { message, error_type, param, code: code.to_string(), x_agent_sandbox: label },
        };
        let mut response = (status, Json(body)).into_response();
        if status.as_u16() < 500 {
            response.headers_mut().insert(HeaderName::from_static("x-should-retry"), HeaderValue::from_static("false"));
        }
        response.extensions_mut().insert(ErrorCode(code.to_string()));
        response
    }
}

/// What agents handlers return.
pub type Result<T> = std::result::Result<T, AgentsError>;

/// Stamps `X-Agent-Sandbox-Local: 1` on every answer of an agents handler (errors too).
pub async fn local_header(mut response: Response) -> Response {
    response.headers_mut().insert(HeaderName::from_static("x-agent-sandbox-local"), HeaderValue::from_static("1"));
    debug_assert!(LOCAL_HEADER.eq_ignore_ascii_case("x-agent-sandbox-local"));
    response
}

/// The caller's identity: the owner of what it creates.
pub fn owner(grant: &Grant) -> &str {
    &grant.identity().id
}

/// The runtime (started on first use).
pub async fn runtime(app: &super::AppState) -> Arc<Agents> {
    app.agents.get().await
}

/// `limit`, `order`, `after` of a list, and the filters some lists take.
#[derive(Debug, Default, Deserialize)]
pub struct ListQuery {
    limit: Option<String>,
    order: Option<String>,
    after: Option<String>,
    /// `agent_id` filter of the sessions list.
    pub agent_id: Option<String>,
    /// `environment_id` filter of the artifacts list.
    pub environment_id: Option<String>,
}

fn non_empty(value: &Option<String>) -> Option<&str> {
    value.as_deref().filter(|v| !v.is_empty())
}

/// The OpenAI list envelope of `objects` (oldest first) under `query`'s
/// `order` (default `desc`), `after` and `limit` (1-100, default 20).
///
/// # Errors
/// 400 for a bad `limit` or `order`, 404 for an unknown `after`.
pub fn page<T>(objects: Vec<T>, id: impl Fn(&T) -> String, query: &ListQuery) -> Result<Json<Page<T>>> {
    let limit = match non_empty(&query.limit) {
        None => 20,
        Some(raw) => match raw.parse::<usize>() {
            Ok(n) if raw.bytes().all(|b| b.is_ascii_digit()) && (1..=100).contains(&n) => n,
            _ => return Err(AgentError::invalid("limit must be an integer between 1 and 100", "limit").into()),
        },
    };
    let mut objects = objects;
    match non_empty(&query.order).unwrap_or("desc") {
        "asc" => {}
        "desc" => objects.reverse(),
        _ => return Err(AgentError::invalid("order must be 'asc' or 'desc'", "order").into()),
    }
    if let Some(after) = non_empty(&query.after) {
        let position = objects.iter().position(|o| id(o) == after).ok_or(AgentError::CursorNotFound)?;
        objects.drain(..=position);
    }
    let has_more = objects.len() > limit;
    objects.truncate(limit);
    Ok(Json(Page {
        object: "list",
        first_id: objects.first().map(&id),
        last_id: objects.last().map(&id),
        data: objects,
        has_more,
    }))
}

/// The `id` of a JSON object.
pub fn value_id(value: &serde_json::Value) -> String {
    value.get("id").and_then(serde_json::Value::as_str).unwrap_or_default().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn query(limit: Option<&str>, order: Option<&str>, after: Option<&str>) -> ListQuery {
        ListQuery {
            limit: limit.map(str::to_string),
            order: order.map(str::to_string),
            after: after.map(str::to_string),
            ..ListQuery::default()
        }
    }

    fn ids(q: &ListQuery) -> std::result::Result<(Vec<String>, bool), u16> {
        let objects: Vec<String> = (1..=5).map(|i| format!("o{i}")).collect();
        match page(objects, String::clone, q) {
            Ok(Json(p)) => Ok((p.data, p.has_more)),
            Err(e) => Err(e.into_response().status().as_u16()),
        }
    }

    #[test]
    fn lists_page_newest_first_by_default() {
        assert_eq!(
            ids(&query(None, None, None)),
            Ok((vec!["o5".into(), "o4".into(), "o3".into(), "o2".into(), "o1".into()], false))
        );
        assert_eq!(ids(&query(Some("2"), Some("asc"), Some("o1"))), Ok((vec!["o2".into(), "o3".into()], true)));
        assert_eq!(ids(&query(Some("0"), None, None)), Err(400));
        assert_eq!(ids(&query(Some("101"), None, None)), Err(400));
        assert_eq!(ids(&query(Some("+5"), None, None)), Err(400));
        assert_eq!(ids(&query(None, Some("up"), None)), Err(400));
        assert_eq!(ids(&query(None, None, Some("nope"))), Err(404));
    }

    #[test]
    fn errors_are_openai_envelopes_that_say_not_to_retry() {
        let response = AgentsError(AgentError::not_found("session", "agsess_x", "session_id")).into_response();
        assert_eq!(response.status(), StatusCode::NOT_FOUND);
        assert_eq!(response.headers()["x-should-retry"], "false");
        let response = AgentsError(AgentError::Internal("x".into())).into_response();
        assert!(response.headers().get("x-should-retry").is_none());
    }
}
