//! The envd port: envd's Connect services and plain HTTP endpoints, served
//! on their own listener (49983 by default) for the `e2b` SDK and
//! `agent_sandbox._standard`.
//!
//! - [`connect`]: the Connect protocol (unary, server and client streams) with the JSON codec;
//!   `pace`: keepalives and deadlines of server streams.
//! - `filesystem`: `filesystem.Filesystem` on [`crate::envd`] and [`crate::fs`].
//! - `files`: `GET`/`POST /files`, streamed, with ranges, gzip and signed URLs.
//! - `plain`: `/health`, `/metrics`, `/envs`, `/init`.
//! - `process`: `process.Process` on [`crate::envd::processes`].
//!
//! Every request but `/health`, `/init` and `/files` (which check their own
//! credentials) passes `authenticate`: the `X-Access-Token` of the server
//! or of `/init` once either exists. Each method is then admitted by the
//! policy rule of its native counterpart (`Stat` by `files_stat`, `Start`
//! by `process_start`, ...), so one policy governs both planes: its path
//! roots, scopes, limits and switched-off endpoints apply here too.

pub mod connect;
mod files;
mod filesystem;
mod pace;
mod plain;
mod process;

use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

use axum::body::Body;
use axum::extract::{FromRequest, Request, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::middleware::{from_fn_with_state, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use futures_util::Stream;
use serde::de::DeserializeOwned;
use serde::Serialize;

use self::connect::{CallOptions, Code, ConnectError, Messages, StreamItem};
use super::pipeline::credentials;
use super::AppState;
use crate::api::envd::http::HttpError;
use crate::envd::{access, Envd, EnvdError};
use crate::fs::FsError;
use crate::policy::{Denial, Grant, Identity, Permit};

/// State of the envd port.
#[derive(Clone)]
pub struct EnvdState {
    /// The daemon's shared state (policy, files, environment, terminals, ...).
    pub app: AppState,
    /// The envd plane's own state.
    pub envd: Arc<Envd>,
}

/// Who is calling, set by `authenticate`.
#[derive(Debug, Clone)]
pub struct Caller {
    /// The identity its token proved (or anonymous on an open plane).
    pub identity: Arc<Identity>,
    /// The user named by `Authorization: Basic`, if any.
    pub user: Option<String>,
}

/// One call to a Connect method: the port's state, who calls (set by
/// `authenticate`), and the request [`connect`] serves. Each method's
/// handler states only what it does with them.
pub struct Call {
    state: EnvdState,
    caller: Caller,
    headers: HeaderMap,
    body: Body,
}

impl FromRequest<EnvdState> for Call {
    type Rejection = ConnectError;

    async fn from_request(request: Request, state: &EnvdState) -> Result<Self, ConnectError> {
        let (parts, body) = request.into_parts();
        let caller = parts.extensions.get::<Caller>().cloned();
        let caller = caller.ok_or_else(|| ConnectError::new(Code::Internal, "the call was not authenticated"))?;
        Ok(Call { state: state.clone(), caller, headers: parts.headers, body })
    }
}

impl Call {
    /// Serves a unary call: `handler` gets the state, the caller and the request message.
    pub async fn unary<Req, Res, F, Fut>(self, handler: F) -> Response
    where
        Req: DeserializeOwned,
        Res: Serialize,
        F: FnOnce(EnvdState, Caller, Req) -> Fut,
        Fut: Future<Output = Result<Res, ConnectError>>,
    {
        let Call { state, caller, headers, body } = self;
        connect::handle_unary(&headers, body, |request| handler(state, caller, request)).await
    }

    /// Serves a server-streaming call: `open` gets the state, the caller, the
    /// request message and the call's options, and returns the stream.
    pub async fn stream<Req, T, S, F, Fut>(self, open: F) -> Response
    where
        Req: DeserializeOwned,
        T: Serialize + Send + 'static,
        S: Stream<Item = StreamItem<T>> + Send + 'static,
        F: FnOnce(EnvdState, Caller, Req, CallOptions) -> Fut,
        Fut: Future<Output = Result<S, ConnectError>>,
    {
        let Call { state, caller, headers, body } = self;
        connect::handle_stream(&headers, body, |request, options| open(state, caller, request, options)).await
    }

    /// Serves a client-streaming call: `consume` gets the state, the caller
    /// and the request messages as they arrive, and returns the answer.
    pub async fn client_stream<Req, Res, F, Fut>(self, consume: F) -> Response
    where
        Req: DeserializeOwned + Send + 'static,
        Res: Serialize + Send + 'static,
        F: FnOnce(EnvdState, Caller, Messages<Req>) -> Fut,
        Fut: Future<Output = Result<Res, ConnectError>>,
    {
        let Call { state, caller, headers, body } = self;
        connect::handle_client_stream(&headers, body, |messages| consume(state, caller, messages)).await
    }
}

/// `stream`, holding the endpoint's concurrency `permit` until it ends or
/// the client leaves, as the native pipeline holds it until the body is sent.
pub fn holding<S: Stream>(stream: S, permit: Option<Permit>) -> impl Stream<Item = S::Item> {
    futures_util::StreamExt::map(stream, move |item| {
        let _held = &permit;
        item
    })
}

/// The router of the envd port.
pub fn router(state: EnvdState) -> Router {
    let fs = "/filesystem.Filesystem";
    let authenticated = Router::new()
        .route("/metrics", get(plain::metrics))
        .route("/envs", get(plain::envs))
        .route(&format!("{fs}/Stat"), post(filesystem::stat))
        .route(&format!("{fs}/ListDir"), post(filesystem::list_dir))
        .route(&format!("{fs}/MakeDir"), post(filesystem::make_dir))
        .route(&format!("{fs}/Move"), post(filesystem::move_entry))
        .route(&format!("{fs}/Remove"), post(filesystem::remove))
        .route(&format!("{fs}/WatchDir"), post(filesystem::watch_dir))
        .route(&format!("{fs}/CreateWatcher"), post(filesystem::create_watcher))
        .route(&format!("{fs}/GetWatcherEvents"), post(filesystem::watcher_events))
        .route(&format!("{fs}/RemoveWatcher"), post(filesystem::remove_watcher))
        .route("/process.Process/Start", post(process::start))
        .route("/process.Process/Connect", post(process::connect))
        .route("/process.Process/List", post(process::list))
        .route("/process.Process/SendInput", post(process::send_input))
        .route("/process.Process/StreamInput", post(process::stream_input))
        .route("/process.Process/CloseStdin", post(process::close_stdin))
        .route("/process.Process/SendSignal", post(process::send_signal))
        .route("/process.Process/Update", post(process::update))
        .route_layer(from_fn_with_state(state.clone(), authenticate));
    authenticated
        .route("/health", get(|| async { StatusCode::NO_CONTENT }))
        .route("/init", post(plain::init))
        .route("/files", get(files::download).post(files::upload))
        .fallback(not_found)
        .layer(from_fn_with_state(state.clone(), access_log))
        .layer(tower_http::catch_panic::CatchPanicLayer::custom(|_| {
            tracing::error!("an envd handler panicked");
            ConnectError::new(Code::Internal, "internal error").into_response()
        }))
        .with_state(state)
}

async fn not_found(request: Request) -> Response {
    let path = request.uri().path();
    if path.starts_with("/filesystem.") || path.starts_with("/process.") {
        ConnectError::new(Code::Unimplemented, format!("{path} is not a method this server serves")).into_response()
    } else {
        http_error(StatusCode::NOT_FOUND, format!("{path} not found"))
    }
}

/// A plain endpoint's error answer: the status and `{"code": status, "message"}`.
pub fn http_error(status: StatusCode, message: impl Into<String>) -> Response {
    (status, Json(HttpError { code: status.as_u16(), message: message.into() })).into_response()
}

/// The user named by `Authorization: Basic`.
pub fn basic_user(headers: &HeaderMap) -> Option<String> {
    headers.get_all(header::AUTHORIZATION).iter().filter_map(|v| v.to_str().ok()).find_map(access::basic_user)
}

async fn authenticate(State(state): State<EnvdState>, mut request: Request, next: Next) -> Response {
    let identity = state.envd.tokens.authenticate(&state.app.engine, &credentials(request.headers()));
    match identity {
        Ok(identity) => {
            let user = basic_user(request.headers());
            request.extensions_mut().insert(Caller { identity, user });
            next.run(request).await
        }
        Err(denial) => {
            let message = format!("{denial}: send a valid access token in X-Access-Token");
            let error = ConnectError::from(denial);
            if request.uri().path().starts_with("/filesystem.") || request.uri().path().starts_with("/process.") {
                ConnectError::new(error.code, message).into_response()
            } else {
                http_error(error.code.status(), message)
            }
        }
    }
}

async fn access_log(request: Request, next: Next) -> Response {
    let started = Instant::now();
    let (method, path) = (request.method().clone(), request.uri().path().to_string());
    let response = next.run(request).await;
    tracing::info!(
        target: "access",
        listener = "envd",
        %method,
        path,
        status = response.status().as_u16(),
        elapsed_ms = started.elapsed().as_secs_f64() * 1000.0
    );
    response
}

impl EnvdState {
    /// Admits `caller` to the native endpoint `id` whose rule governs this method.
    ///
    /// # Errors
    /// The policy's refusal (disabled, missing scope, rate or concurrency limit).
    pub fn admit(&self, caller: &Caller, id: &str) -> Result<(Grant, Option<Permit>), ConnectError> {
        let endpoint = crate::policy::endpoint(id)
            .ok_or_else(|| ConnectError::new(Code::Internal, format!("unknown endpoint {id}")))?;
        Ok(self.app.engine.admit(endpoint, caller.identity.clone())?)
    }

    /// Runs blocking `work` on the blocking pool with the account `user` acts as ([`EnvdState::account`]).
    ///
    /// # Errors
    /// The account's refusal, the work's own error, or `internal` when the task failed.
    pub async fn blocking_as<T, F>(&self, user: Option<String>, work: F) -> Result<T, EnvdError>
    where
        F: FnOnce(Option<access::Account>) -> Result<T, EnvdError> + Send + 'static,
        T: Send + 'static,
    {
        let state = self.clone();
        blocking(move || work(state.account(user)?)).await
    }

    /// The account `caller` acts as (its Basic user, else `/init`'s default), if any. Blocking.
    ///
    /// # Errors
    /// `unauthenticated` for an unknown user, `permission_denied` for another user while not root.
    pub fn account(&self, named: Option<String>) -> Result<Option<access::Account>, EnvdError> {
        self.envd.user_name(named).map(|name| access::account(&name)).transpose()
    }
}

impl From<Denial> for ConnectError {
    fn from(denial: Denial) -> Self {
        let code = match denial.status() {
            401 => Code::Unauthenticated,
            403 => Code::PermissionDenied,
            404 => Code::Unimplemented,
            429 => Code::ResourceExhausted,
            400 => Code::InvalidArgument,
            _ => Code::Internal,
        };
        ConnectError::new(code, denial.to_string())
    }
}

impl From<EnvdError> for ConnectError {
    fn from(error: EnvdError) -> Self {
        let code = match &error {
            EnvdError::NotFound(_) => Code::NotFound,
            EnvdError::AlreadyExists(_) => Code::AlreadyExists,
            EnvdError::Invalid(_) => Code::InvalidArgument,
            EnvdError::FailedPrecondition(_) => Code::FailedPrecondition,
            EnvdError::Unauthenticated(_) => Code::Unauthenticated,
            EnvdError::PermissionDenied(_) => Code::PermissionDenied,
            EnvdError::Exhausted(_) => Code::ResourceExhausted,
            EnvdError::Denied(denial) => return ConnectError::from(denial.clone()),
            EnvdError::Fs(fs) => fs_code(fs),
            EnvdError::Internal(_) => Code::Internal,
        };
        if code == Code::Internal {
            tracing::error!(error = %error, "envd request failed");
            return ConnectError::new(code, "internal error (see the server log)");
        }
        ConnectError::new(code, error.to_string())
    }
}

fn fs_code(error: &FsError) -> Code {
    match error {
        FsError::Denied(denial) => ConnectError::from(denial.clone()).code,
        FsError::NotFound(_) | FsError::UploadNotFound(_) => Code::NotFound,
        FsError::Exists => Code::AlreadyExists,
        FsError::IsADirectory(_) | FsError::NotADirectory(_) | FsError::Invalid(_) => Code::InvalidArgument,
        FsError::TooLarge { .. } | FsError::ArchiveTooLarge { .. } | FsError::NoSpace(_) => Code::ResourceExhausted,
        FsError::OffsetMismatch { .. } | FsError::UploadBusy => Code::FailedPrecondition,
        FsError::Interrupted => Code::Canceled,
        FsError::RangeNotSatisfiable { .. } => Code::InvalidArgument,
        FsError::Internal { .. } => Code::Internal,
    }
}

/// A plain endpoint's answer for `error`.
pub fn plain_error(error: EnvdError) -> Response {
    let status = match &error {
        EnvdError::Fs(FsError::NoSpace(_)) => StatusCode::INSUFFICIENT_STORAGE,
        EnvdError::Fs(FsError::TooLarge { .. }) => StatusCode::PAYLOAD_TOO_LARGE,
        EnvdError::Fs(FsError::IsADirectory(_) | FsError::NotADirectory(_)) => StatusCode::BAD_REQUEST,
        EnvdError::Denied(denial) | EnvdError::Fs(FsError::Denied(denial)) => {
            StatusCode::from_u16(denial.status()).unwrap_or(StatusCode::FORBIDDEN)
        }
        EnvdError::AlreadyExists(_) => StatusCode::CONFLICT,
        _ => {
            let connect = ConnectError::from(error);
            return http_error(connect.code.status(), connect.message);
        }
    };
    http_error(status, error.to_string())
}

/// Runs blocking envd work on the blocking pool.
///
/// # Errors
/// The work's own error, or `internal` when the task failed.
pub async fn blocking<T, F>(work: F) -> Result<T, EnvdError>
where
    F: FnOnce() -> Result<T, EnvdError> + Send + 'static,
    T: Send + 'static,
{
    tokio::task::spawn_blocking(work).await.map_err(|e| EnvdError::Internal(format!("a blocking task failed: {e}")))?
}
