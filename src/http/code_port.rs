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
//! Credentials are the API port's (bearer or `X-Access-Token`), and the
//! identity needs the `devtools:run` scope; `GET /health` is anonymous.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::extract::{Path, Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::{from_fn_with_state, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use axum::{Json, Router};
use tokio::sync::mpsc;

use super::code_wire::Payload;
use crate::api::code::{ContextInfo, CreateContextRequest, ExecuteRequest, OutputLine};
use crate::code::{CodeError, CodeInterpreter};
use crate::policy::{Credentials, PolicyEngine};

/// The scope code execution needs.
pub const SCOPE: &str = "devtools:run";

/// State of the code port.
#[derive(Clone)]
pub struct CodeState {
    /// The policy engine (authentication).
    pub engine: Arc<PolicyEngine>,
    /// The contexts.
    pub code: Arc<CodeInterpreter>,
    /// Quiet time after which a keepalive line is sent.
    pub keepalive: Duration,
}

/// The router of the code port.
pub fn router(state: CodeState) -> Router {
    Router::new()
        .route("/execute", post(execute))
        .route("/contexts", post(create).get(list))
        .route("/contexts/{id}", delete(remove))
        .route("/contexts/{id}/restart", post(restart))
        .route_layer(from_fn_with_state(state.clone(), authenticate))
        .route("/health", get(health))
        .fallback(|| async { TextError(StatusCode::NOT_FOUND, "Not found".into()) })
        .method_not_allowed_fallback(|| async {
            TextError(StatusCode::METHOD_NOT_ALLOWED, "Method not allowed".into())
        })
        .layer(tower_http::catch_panic::CatchPanicLayer::custom(|_| {
            tracing::error!("a code-port handler panicked");
            TextError(StatusCode::INTERNAL_SERVER_ERROR, "Internal server error".into()).into_response()
        }))
        .with_state(state)
}

/// A plain-text error answer.
#[derive(Debug)]
pub struct TextError(StatusCode, String);

impl TextError {
    /// An answer with this status and text.
    pub fn new(status: StatusCode, text: impl Into<String>) -> Self {
        TextError(status, text.into())
    }
}

impl IntoResponse for TextError {
    fn into_response(self) -> Response {
        let mut response = (self.0, self.1).into_response();
        response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
        response
    }
}

impl From<CodeError> for TextError {
    fn from(e: CodeError) -> Self {
        let status = match &e {
            CodeError::ContextNotFound(_) | CodeError::ContextExpired { .. } => StatusCode::NOT_FOUND,
            CodeError::UnsupportedLanguage(_)
            | CodeError::ContextAndLanguage
            | CodeError::InvalidCwd { .. }
            | CodeError::Invalid(_) => StatusCode::BAD_REQUEST,
            CodeError::RuntimeMissing { .. } => StatusCode::NOT_IMPLEMENTED,
            CodeError::TooManyContexts(_) => StatusCode::TOO_MANY_REQUESTS,
            CodeError::StartFailed { .. } => StatusCode::INTERNAL_SERVER_ERROR,
            CodeError::ShuttingDown => StatusCode::SERVICE_UNAVAILABLE,
        };
        TextError(status, e.to_string())
    }
}

async fn authenticate(State(state): State<CodeState>, req: Request, next: Next) -> Response {
    let started = Instant::now();
    let (method, path) = (req.method().clone(), req.uri().path().to_string());
    let headers = req.headers();
    let values = |name| headers.get_all(name).iter().filter_map(|v| v.to_str().ok()).collect();
    let credentials =
        Credentials { authorization: values(header::AUTHORIZATION.as_str()), access_tokens: values("x-access-token") };
    let (identity, response) = match state.engine.authenticate(&credentials) {
        Err(denial) => {
            let status = StatusCode::from_u16(denial.status()).unwrap_or(StatusCode::UNAUTHORIZED);
            let message = format!("{denial}: send the server token as a bearer token or in X-Access-Token");
            (None, TextError(status, message).into_response())
        }
        Ok(identity) if !identity.can(SCOPE) => {
            let message = format!("Identity '{}' lacks scope '{SCOPE}' required by the code interpreter", identity.id);
            (Some(identity.id.clone()), TextError(StatusCode::FORBIDDEN, message).into_response())
        }
        Ok(identity) => (Some(identity.id.clone()), next.run(req).await),
    };
    tracing::info!(
        target: "access",
        listener = "code",
        identity = identity.as_deref().unwrap_or("-"),
        %method,
        path,
        status = response.status().as_u16(),
        elapsed_ms = started.elapsed().as_secs_f64() * 1000.0
    );
    response
}

async fn health() -> Json<&'static str> {
    Json("OK")
}

async fn execute(
    State(state): State<CodeState>,
    Payload(request): Payload<ExecuteRequest>,
) -> Result<Response, TextError> {
    let lines = state.code.execute(request).await?;
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
    Payload(request): Payload<CreateContextRequest>,
) -> Result<Json<ContextInfo>, TextError> {
    Ok(Json(state.code.create(request.language.as_deref(), request.cwd.as_deref()).await?))
}

async fn list(State(state): State<CodeState>) -> Json<Vec<ContextInfo>> {
    Json(state.code.list())
}

async fn restart(State(state): State<CodeState>, Path(id): Path<String>) -> Result<Json<()>, TextError> {
    state.code.restart(&id).await?;
    Ok(Json(()))
}

async fn remove(State(state): State<CodeState>, Path(id): Path<String>) -> Result<Json<()>, TextError> {
    state.code.delete(&id).await?;
    Ok(Json(()))
}
