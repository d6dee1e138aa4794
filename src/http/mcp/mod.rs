//! `/mcp`: the daemon's files, processes, terminals, code contexts and system
//! information as Model Context Protocol tools and `file://` resources, over
//! streamable HTTP on the API port.
//!
//! The transport is the official Rust SDK's (`rmcp`), mounted behind the same
//! pipeline as every route: the `mcp` row authenticates the caller (the API's
//! credentials) and bounds the body. Each tool is then decided again by the
//! rule of the endpoint of the same power ([`tools::TOOLS`]): a tool the
//! caller may not use is not listed, and calling it is refused by
//! [`admit_call`](super::pipeline::admit_call) with the rule named, audited like an HTTP call.
//!
//! Nothing here is built until the first `/mcp` request. The host check of
//! the SDK is off (a platform's proxy forwards under its own host name): the
//! credentials every call needs are the defence against DNS rebinding.
//! A legacy session belongs to the identity that opened it; another
//! identity presenting its id is answered as for an unknown session.
//!
//! Layout: [`server`] (the protocol handler: listing, dispatch, admission),
//! `call.rs` (what every tool body uses: context, arguments, results),
//! [`tools`] (each tool's description, schema and endpoint), `files.rs`,
//! `process.rs`, `code.rs`, `system.rs` (the tools' bodies: thin calls into the
//! handlers and domain modules of their endpoints), [`resources`], and
//! `direct.rs` (quick tool calls answered without the SDK's session task),
//! [`streams`] (the session manager keeping every stream for a resume) and
//! `kept.rs` (one kept stream: its ring, its producer, its connections).

mod call;
mod code;
mod direct;
mod files;
mod kept;
mod process;
pub mod resources;
pub mod server;
pub mod streams;
mod system;
pub mod tools;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use abx_domain::policy::Grant;
use abx_wire::api::Fault;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};

use super::error::ApiError;
use super::extract::{read_body, BodyLimit};
use super::AppState;
use streams::{ResumeError, Sessions};

/// The header naming the last event a resuming client has.
const LAST_EVENT_ID: &str = "last-event-id";

/// Legacy sessions one identity may hold open unless configured
/// (`mcp_max_sessions`); its `initialize` beyond them is refused (429).
pub const DEFAULT_MAX_SESSIONS: usize = 32;
/// A legacy session with no request for this long is closed.
const SESSION_IDLE: Duration = Duration::from_secs(600);
/// The header naming a legacy session.
const SESSION_HEADER: &str = "mcp-session-id";

type Service = StreamableHttpService<server::McpServer, Sessions>;

/// The MCP endpoint's state: built by its first request.
pub struct Mcp {
    service: OnceLock<(Service, Arc<Sessions>)>,
    /// Who opened each live legacy session.
    owners: Mutex<HashMap<String, Owner>>,
    /// Legacy sessions one identity may hold open.
    max_per_identity: usize,
}

impl Default for Mcp {
    fn default() -> Self {
        Mcp::new(DEFAULT_MAX_SESSIONS)
    }
}

/// Who opened a legacy session, and when its worker last heard of a direct call.
struct Owner {
    identity: String,
    touched: Instant,
}

impl Mcp {
    /// The endpoint's state, each identity holding at most `max_per_identity` sessions.
    pub fn new(max_per_identity: usize) -> Self {
        Mcp { service: OnceLock::new(), owners: Mutex::default(), max_per_identity }
    }

    fn service(&self, app: &AppState) -> &(Service, Arc<Sessions>) {
        self.service.get_or_init(|| {
            // The SDK's own cache per stream (its `channel_capacity`, default
            // 16) no longer serves resumes: `streams` keeps each stream.
            let mut local = LocalSessionManager::default();
            local.session_config.keep_alive = Some(SESSION_IDLE);
            let sessions = Arc::new(Sessions::new(local));
            let config = StreamableHttpServerConfig::default()
                .disable_allowed_hosts()
                .with_cancellation_token(app.shutdown.child_token())
                .with_max_request_body_bytes(usize::MAX);
            (StreamableHttpService::new(|| Ok(server::McpServer), Arc::clone(&sessions), config), sessions)
        })
    }

    fn owners(&self) -> std::sync::MutexGuard<'_, HashMap<String, Owner>> {
        self.owners.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// `POST`, `GET` and `DELETE /mcp`: the request, admitted by the pipeline,
/// handed to the SDK's streamable HTTP service.
pub async fn handle(State(app): State<AppState>, grant: Grant, request: Request) -> Response {
    match serve(app, grant, request).await {
        Ok(response) => response,
        Err(error) => error.into_response(),
    }
}

async fn serve(app: AppState, grant: Grant, request: Request) -> Result<Response, ApiError> {
    let (service, sessions) = app.mcp.service(&app);
    let identity = grant.identity().id.clone();
    let session = session_id(request.headers());
    if let Some(id) = &session {
        if app.mcp.owners().get(id).is_some_and(|owner| owner.identity != identity) {
            return Ok(unknown_session());
        }
    }
    let method = request.method().clone();
    if method == Method::POST && session.is_none() {
        // Each identity has its own share: one that opened its quota cannot lock out another.
        let held = {
            let live = sessions.local().sessions.read().await;
            let mut owners = app.mcp.owners();
            owners.retain(|known, _| live.keys().any(|s| s.as_ref() == known.as_str()));
            owners.values().filter(|owner| owner.identity == identity).count()
        };
        let max = app.mcp.max_per_identity;
        if held >= max {
            let message = format!(
                "quota mcp_max_sessions reached: at most {max} MCP sessions per identity; end one with DELETE /mcp"
            );
            return Err(ApiError::of(Fault::McpSessionLimit, message).with_limit(max as u64));
        }
    }
    let (mut parts, body) = request.into_parts();
    // The body is read here, within the endpoint's limit, as every JSON body is.
    let limit = parts.extensions.get::<BodyLimit>().map_or(super::DEFAULT_MAX_REQUEST_BYTES, |l| l.0);
    let bytes = read_body(body, limit).await?;
    if let (Some(id), Some(last)) = (&session, parts.headers.get(LAST_EVENT_ID)) {
        if method == Method::GET {
            let last = last.to_str().unwrap_or_default();
            sessions.check_resume(id, last).map_err(resume_refused)?;
        }
    }
    if let Some(answer) = direct::answer(&app, sessions.local(), grant.identity_arc(), &parts, &bytes).await {
        return Ok(answer);
    }
    parts.extensions.insert(app.clone());
    let response = service.handle(Request::from_parts(parts, http_body_util::Full::new(bytes))).await;
    let created = session_id(response.headers());
    if response.status().is_success() {
        match (&method, created, session) {
            (&Method::POST, Some(id), None) => remember(&app, sessions, id, identity).await,
            (&Method::DELETE, _, Some(id)) => {
                app.mcp.owners().remove(&id);
            }
            _ => {}
        }
    }
    // The SDK accepts an ended session with 202; clients expect 200 or 204.
    if method == Method::DELETE && response.status() == StatusCode::ACCEPTED {
        return Ok(StatusCode::NO_CONTENT.into_response());
    }
    if response.status().is_client_error() || response.status().is_server_error() {
        return Err(transport_error(response.map(Body::new)).await);
    }
    Ok(response.map(Body::new))
}

/// The SDK's refusal of a request (plain text: no `Accept` for both answer
/// types, a body that is not a JSON-RPC message, an unknown session) as the
/// port's JSON error body, so `/mcp` answers errors as every route of the
/// port does and as its OpenAPI document says. A body that is not a
/// JSON-RPC message is 400 (the SDK says 415, which is for a wrong
/// `Content-Type`, a case it also answers 415).
async fn transport_error(response: Response) -> ApiError {
    let status = response.status();
    // The SDK's refusals are one short line; a longer body is not kept.
    let text = match axum::body::to_bytes(response.into_body(), 4096).await {
        Ok(body) => String::from_utf8_lossy(&body).trim().to_string(),
        Err(_) => String::new(),
    };
    let status = if status == StatusCode::UNSUPPORTED_MEDIA_TYPE && text.contains("deserialize") {
        StatusCode::BAD_REQUEST
    } else {
        status
    };
    let message =
        if text.is_empty() { status.canonical_reason().unwrap_or("MCP transport error").to_string() } else { text };
    ApiError::of(Fault::BadRequest, message).with_status(status)
}

/// A `Last-Event-ID` the session never gave (400), or naming a stream
/// forgotten so long ago that not even its count is kept (410).
fn resume_refused(error: ResumeError) -> ApiError {
    match error {
        ResumeError::Forgotten(_) => ApiError::of(Fault::StreamForgotten, error.to_string()),
        ResumeError::Malformed(_) | ResumeError::Future(_) => ApiError::bad_request(error.to_string()),
    }
}

/// Records the owner of a new session, forgetting sessions that ended.
async fn remember(app: &AppState, sessions: &Sessions, id: String, identity: String) {
    let live = sessions.local().sessions.read().await;
    let mut owners = app.mcp.owners();
    owners.retain(|known, _| live.keys().any(|s| s.as_ref() == known.as_str()));
    owners.insert(id, Owner { identity, touched: Instant::now() });
}

fn session_id(headers: &HeaderMap) -> Option<String> {
    headers.get(SESSION_HEADER).and_then(|v| v.to_str().ok()).map(str::to_string)
}

/// What the SDK answers for a session it does not know, in the port's error body.
fn unknown_session() -> Response {
    ApiError::of(Fault::SessionNotFound, "Not Found: Session not found").into_response()
}
