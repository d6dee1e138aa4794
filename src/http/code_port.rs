//! The code-interpreter port: the protocol of `agent_sandbox.code_interpreter`
//! and the `e2b-code-interpreter` SDK, served on its own listener.
//!
//! `POST /execute` answers NDJSON lines as the execution produces them,
//! a `keepalive` line after each quiet interval and `end_of_execution`
//! last; dropping the connection interrupts the execution. `/contexts`
//! creates, lists, restarts and deletes contexts (restart and delete answer
//! 200 `null`, as the code-interpreter server does). Errors are plain text
//! with the protocol's statuses (404 unknown context, 400 bad request),
//! except malformed bodies: 422 with a JSON `detail` ([`super::code_wire`]).
//!
//! Every route is a row of the endpoint table (`code_*`) behind the same
//! pipeline as every port: credentials are the API port's (bearer or
//! `X-Access-Token`, or envd's access token), and running code is process
//! execution, so `process_start`'s rule governs `execute` and contexts
//! (`read-only` turns them off; its scopes, limits and path rules for a
//! context's `cwd` apply). A refusal at the door is a JSON body with `detail`.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Path, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{on, MethodRouter};
use axum::{Json, Router};
use tokio::sync::mpsc;

use super::code_wire::{commands_unrestricted, context_cwd, Payload, TextError};
use super::pipeline::{guarded, KeepAliveLayer};
use super::AppState;
use crate::api::code::{ContextInfo, CreateContextRequest, ExecuteRequest, OutputLine};
use crate::code::CodeInterpreter;
use crate::endpoints::{Endpoint, Port, ENDPOINTS};
use crate::policy::Grant;

/// State of the code port.
#[derive(Clone)]
pub struct CodeState {
    /// The daemon's shared state (the policy engine, for the pipeline).
    pub app: AppState,
    /// The contexts.
    pub code: Arc<CodeInterpreter>,
    /// Quiet time after which a keepalive line is sent.
    pub keepalive: Duration,
}

/// The router of the code port: one route per `code_*` row of the endpoint
/// table, each behind the pipeline.
pub fn router(state: CodeState) -> Router {
    let mut router = Router::new();
    for endpoint in ENDPOINTS.iter().filter(|e| e.port == Port::Code) {
        if let Some(route) = handler(endpoint) {
            router = router.route(endpoint.path, guarded(route, &state.app, endpoint));
        }
    }
    router
        .fallback(|| async { TextError::new(StatusCode::NOT_FOUND, "Not found") })
        .method_not_allowed_fallback(|| async { TextError::new(StatusCode::METHOD_NOT_ALLOWED, "Method not allowed") })
        .layer(KeepAliveLayer)
        .layer(tower_http::catch_panic::CatchPanicLayer::custom(|_| {
            tracing::error!("a code-port handler panicked");
            TextError::new(StatusCode::INTERNAL_SERVER_ERROR, "Internal server error").into_response()
        }))
        .with_state(state)
}

/// The handler of a code-port row, bound to its method.
pub fn handler(endpoint: &Endpoint) -> Option<MethodRouter<CodeState>> {
    let filter = crate::http::routes::method_filter(endpoint.method);
    let route = match endpoint.id {
        "code_health" => on(filter, health),
        "code_execute" => on(filter, execute),
        "code_contexts_create" => on(filter, create),
        "code_contexts_list" => on(filter, list),
        "code_contexts_restart" => on(filter, restart),
        "code_contexts_delete" => on(filter, remove),
        _ => return None,
    };
    Some(route)
}

async fn health() -> Json<&'static str> {
    Json("OK")
}

async fn execute(
    State(state): State<CodeState>,
    grant: Grant,
    Payload(request): Payload<ExecuteRequest>,
) -> Result<Response, TextError> {
    commands_unrestricted(&grant)?;
    let names = request.env_vars.iter().flat_map(|vars| vars.keys());
    let restricted = crate::policy::guards::commands_restricted(grant.engine());
    crate::policy::guards::check_not_dangerous(names, restricted).map_err(TextError::from)?;
    let lines = state.code.execute(request, grant.program_user()).await?;
    let body = Body::from_stream(ndjson(lines, state.keepalive));
    let mut response = Response::new(body);
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/x-ndjson"));
    Ok(response)
}

/// The answer's lines: each line the execution sends, a keepalive after
/// every quiet `keepalive`, and `end_of_execution` when the sender is done.
fn ndjson(
    lines: mpsc::Receiver<OutputLine>,
    keepalive: Duration,
) -> impl futures_util::Stream<Item = Result<Bytes, Infallible>> {
    futures_util::stream::unfold(Some(lines), move |lines| async move {
        let mut lines = lines?;
        let line = match tokio::time::timeout(keepalive, lines.recv()).await {
            Ok(Some(line)) => Some(line),
            Ok(None) => None,
            Err(_) => Some(OutputLine::Keepalive),
        };
        let (line, next) = match line {
            Some(line) => (line, Some(lines)),
            None => (OutputLine::EndOfExecution, None),
        };
        let mut bytes = serde_json::to_vec(&line).unwrap_or_else(|_| br#"{"type":"keepalive"}"#.to_vec());
        bytes.push(b'\n');
        Some((Ok(Bytes::from(bytes)), next))
    })
}

async fn create(
    State(state): State<CodeState>,
    grant: Grant,
    Payload(request): Payload<CreateContextRequest>,
) -> Result<Json<ContextInfo>, TextError> {
    commands_unrestricted(&grant)?;
    let cwd = context_cwd(&grant, request.cwd.as_deref())?;
    Ok(Json(state.code.create(request.language.as_deref(), cwd.as_deref(), grant.program_user()).await?))
}

async fn list(State(state): State<CodeState>, grant: Grant) -> Json<Vec<ContextInfo>> {
    Json(state.code.list(grant.program_user()))
}

async fn restart(State(state): State<CodeState>, grant: Grant, Path(id): Path<String>) -> Result<Json<()>, TextError> {
    commands_unrestricted(&grant)?;
    state.code.restart(&id, grant.program_user()).await?;
    Ok(Json(()))
}

async fn remove(State(state): State<CodeState>, grant: Grant, Path(id): Path<String>) -> Result<Json<()>, TextError> {
    state.code.delete(&id, grant.program_user()).await?;
    Ok(Json(()))
}
