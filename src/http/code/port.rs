//! The code-interpreter port: the protocol of `agent_sandbox.code_interpreter`
//! and the `e2b-code-interpreter` SDK, served on its own listener.
//!
//! `POST /execute` answers NDJSON lines as the execution produces them,
//! a `keepalive` line after each quiet interval and `end_of_execution`
//! last; dropping the connection interrupts the execution. This server's
//! extension: with `X-Abx-Detach: keep` the execution outlives its
//! connection, the answer names it (`X-Abx-Execution-Id` and a first
//! `execution` line) and `GET /executions/{id}` re-attaches after a cursor
//! (`Last-Event-ID` or `?after=`; [`abx_domain::code::executions`]). `/contexts`
//! creates, lists, restarts and deletes contexts (restart and delete answer
//! 200 `null`, as the code-interpreter server does). Errors are plain text
//! with the protocol's statuses (404 unknown context, 400 bad request),
//! except malformed bodies: 422 with a JSON `detail` ([`super::wire`]).
//!
//! Every route is a row of the endpoint table (`code_*`) behind the same
//! pipeline as every port: credentials are the API port's (bearer or
//! `X-Access-Token`, or envd's access token), and running code is process
//! execution, so `process_start`'s rule governs `execute` and contexts
//! (`read-only` turns them off; its scopes, limits and path rules for a
//! context's `cwd` apply). A refusal at the door is plain text too.

use abx_wire::api::Fault;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use abx_domain::code::executions::{Attached, Delivery, Executions};
use abx_domain::code::{CodeError, CodeInterpreter};
use abx_domain::policy::{owner, Grant, Viewer};
use abx_wire::api::code::{ContextInfo, CreateContextRequest, ExecuteRequest, OutputLine};
use abx_wire::endpoints::{Endpoint, Port, ENDPOINTS};
use axum::body::{Body, Bytes};
use axum::extract::{Path, RawQuery, State};
use axum::http::{header, HeaderMap, HeaderValue};
use axum::response::{IntoResponse, Response};
use axum::routing::{on, MethodRouter};
use axum::{Json, Router};
use tokio::sync::mpsc;

use super::wire::{commands_unrestricted, context_cwd, Payload};
use crate::http::pipeline::{guarded, KeepAliveLayer};
use crate::http::text_error::TextError;
use crate::http::AppState;

/// The request header that keeps an execution running without its connection.
pub const DETACH_HEADER: &str = "x-abx-detach";
/// The answer header naming a detached execution.
pub const EXECUTION_ID_HEADER: &str = "x-abx-execution-id";

/// State of the code port.
#[derive(Clone)]
pub struct CodeState {
    /// The daemon's shared state (the policy engine, for the pipeline).
    pub app: AppState,
    /// The contexts.
    pub code: Arc<CodeInterpreter>,
    /// Quiet time after which a keepalive line is sent.
    pub keepalive: Duration,
    /// The detached executions.
    pub executions: Arc<Executions>,
}

crate::http::extract::grant_extractor!(CodeState);

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
        .fallback(|| async { TextError::new(Fault::RouteNotFound, "Not found") })
        .method_not_allowed_fallback(|| async { TextError::new(Fault::MethodNotAllowed, "Method not allowed") })
        .layer(KeepAliveLayer)
        .layer(tower_http::catch_panic::CatchPanicLayer::custom(|_| {
            tracing::error!("a code-port handler panicked");
            TextError::new(Fault::Internal, "Internal server error").into_response()
        }))
        .with_state(state)
}

/// The handler of a code-port row, bound to its method.
pub fn handler(endpoint: &Endpoint) -> Option<MethodRouter<CodeState>> {
    let filter = crate::http::method_filter(endpoint.method);
    let route = match endpoint.id {
        "code_health" => on(filter, health),
        "code_execute" => on(filter, execute),
        "code_execution_attach" => on(filter, attach),
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
    headers: HeaderMap,
    Payload(request): Payload<ExecuteRequest>,
) -> Result<Response, TextError> {
    commands_unrestricted(&grant)?;
    let names = request.env_vars.iter().flat_map(|vars| vars.keys());
    let restricted = abx_domain::policy::guards::commands_restricted(grant.engine());
    abx_domain::policy::guards::check_not_dangerous(names, restricted).map_err(TextError::from)?;
    let detach = match headers.get(DETACH_HEADER).map(HeaderValue::as_bytes) {
        None => false,
        Some(b"keep") => true,
        Some(_) => return Err(CodeError::Invalid("X-Abx-Detach must be 'keep'".into()).into()),
    };
    if !detach {
        let lines = state.code.execute(request, grant.program_user()).await?;
        return Ok(ndjson_response(Body::from_stream(ndjson(lines, state.keepalive))));
    }
    let kept = state.executions.admit(&viewer(&grant))?;
    let lines = match state.code.execute(request, grant.program_user()).await {
        Ok(lines) => lines,
        Err(e) => {
            state.executions.forget(&kept);
            return Err(e.into());
        }
    };
    Ok(attached_response(state.executions.run(&kept, lines), state.keepalive))
}

/// `GET /executions/{id}`: re-attaches to a detached execution after the
/// cursor of `Last-Event-ID` or `?after=` (from its first line without one).
async fn attach(
    State(state): State<CodeState>,
    grant: Grant,
    Path(id): Path<String>,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
) -> Result<Response, TextError> {
    let from_header = headers.get("last-event-id").map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
    let cursor = from_header.or_else(|| query.as_deref().and_then(after_parameter));
    let attached = state.executions.attach(&id, cursor.as_deref(), &viewer(&grant))?;
    Ok(attached_response(attached, state.keepalive))
}

/// The value of the query's `after` parameter (`:` may come as `%3A`).
fn after_parameter(query: &str) -> Option<String> {
    let value = query.split('&').find_map(|pair| pair.strip_prefix("after="))?;
    Some(value.replace("%3A", ":").replace("%3a", ":"))
}

/// The caller as the owner checks of detached executions see it.
fn viewer(grant: &Grant) -> Viewer {
    Viewer::new(grant.identity(), owner::PROCESS_ADMIN)
}

fn ndjson_response(body: Body) -> Response {
    let mut response = Response::new(body);
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/x-ndjson"));
    response
}

/// A detached execution's answer: the `execution` line, the lines after the
/// connection's cursor (a `gap` for those no longer held), keepalives, and
/// `end_of_execution` once it ended and every line was sent.
fn attached_response(attached: Attached, keepalive: Duration) -> Response {
    let id = attached.execution_id().to_string();
    let first = OutputLine::Execution { execution_id: id.clone() };
    let head = futures_util::stream::once(async move { Ok::<_, Infallible>(line_bytes(&first)) });
    let rest = futures_util::stream::unfold(Some(attached), move |attached| async move {
        let mut attached = attached?;
        let bytes = match tokio::time::timeout(keepalive, attached.next()).await {
            Err(_) => line_bytes(&OutputLine::Keepalive),
            Ok(None) => return None,
            Ok(Some(Delivery::Line(bytes))) => bytes,
            Ok(Some(Delivery::Gap(lost))) => line_bytes(&OutputLine::Gap { lines: lost.events, bytes: lost.bytes }),
            Ok(Some(Delivery::End)) => line_bytes(&OutputLine::EndOfExecution),
        };
        Some((Ok(bytes), Some(attached)))
    });
    let mut response = ndjson_response(Body::from_stream(futures_util::StreamExt::chain(head, rest)));
    if let Ok(value) = HeaderValue::from_str(&id) {
        response.headers_mut().insert(EXECUTION_ID_HEADER, value);
    }
    response
}

fn line_bytes(line: &OutputLine) -> Bytes {
    let mut bytes = serde_json::to_vec(line).unwrap_or_else(|_| br#"{"type":"keepalive"}"#.to_vec());
    bytes.push(b'\n');
    Bytes::from(bytes)
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
        Some((Ok(line_bytes(&line)), next))
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
