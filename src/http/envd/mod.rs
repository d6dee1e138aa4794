//! The envd port: envd's Connect services and plain HTTP endpoints, served
//! on their own listener (49983 by default) for the `e2b` SDK and
//! `agent_sandbox._standard`.
//!
//! - [`connect`]: the Connect protocol (unary, server and client streams) with the JSON codec;
//!   `pace`: keepalives and deadlines of server streams.
//! - `filesystem`: `filesystem.Filesystem` on [`abx_domain::envd`] and [`abx_domain::fs`].
//! - `files`: `GET`/`POST /files`, streamed, with ranges, gzip and signed URLs.
//! - `plain`: `/health`, `/metrics`, `/envs`, `/init`.
//! - `process`: `process.Process` on [`abx_domain::envd::processes`].
//!
//! Every route is a row of the endpoint table (`envd_*`), served behind the
//! same pipeline as every port ([`crate::http::pipeline`]): it
//! authenticates (a token, envd's access token, a signed `/files` URL),
//! admits by the rule of the native endpoint governing the row (`Stat` by
//! `files_stat`, `Start` by `process_start`, ...), audits, and renders a
//! refusal as a Connect error or envd's plain JSON error. Handlers receive
//! the [`Grant`]; they never decide again.

pub mod connect;
mod files;
mod filesystem;
mod pace;
mod plain;
mod process;

use std::future::Future;
use std::sync::Arc;

use abx_domain::envd::{Envd, EnvdError};
use abx_domain::policy::{Denial, Grant};
use abx_wire::api::Fault;
use abx_wire::endpoints::{Endpoint, Port, ENDPOINTS};
use axum::body::Body;
use axum::extract::{FromRequest, Request};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::MethodRouter;
use axum::Router;
use futures_util::Stream;
use serde::de::DeserializeOwned;
use serde::Serialize;

use self::connect::{CallOptions, Code, ConnectError, Messages, StreamItem};
pub use super::pipeline::http_error;
use super::pipeline::{guarded, KeepAliveLayer};
use super::AppState;

/// State of the envd port.
#[derive(Clone)]
pub struct EnvdState {
    /// The daemon's shared state (policy, files, environment, terminals, ...).
    pub app: AppState,
    /// The envd plane's own state.
    pub envd: Arc<Envd>,
}

crate::http::extract::grant_extractor!(EnvdState);

/// One call to a Connect method: the port's state, the grant the pipeline
/// gave, and the request [`connect`] serves. Each method's handler states
/// only what it does with them.
pub struct Call {
    state: EnvdState,
    grant: Grant,
    headers: HeaderMap,
    body: Body,
}

impl FromRequest<EnvdState> for Call {
    type Rejection = ConnectError;

    async fn from_request(request: Request, state: &EnvdState) -> Result<Self, ConnectError> {
        let (parts, body) = request.into_parts();
        let grant = parts.extensions.get::<Grant>().cloned();
        let grant = grant.ok_or_else(|| ConnectError::new(Code::Internal, "the call was not admitted"))?;
        Ok(Call { state: state.clone(), grant, headers: parts.headers, body })
    }
}

impl Call {
    /// Serves a unary call: `handler` gets the state, the grant and the request message.
    pub async fn unary<Req, Res, F, Fut>(self, handler: F) -> Response
    where
        Req: DeserializeOwned,
        Res: Serialize,
        F: FnOnce(EnvdState, Grant, Req) -> Fut,
        Fut: Future<Output = Result<Res, ConnectError>>,
    {
        let Call { state, grant, headers, body } = self;
        connect::handle_unary(&headers, body, |request| handler(state, grant, request)).await
    }

    /// Serves a server-streaming call: `open` gets the state, the grant, the
    /// request message and the call's options, and returns the stream.
    pub async fn stream<Req, T, S, F, Fut>(self, open: F) -> Response
    where
        Req: DeserializeOwned,
        T: Serialize + Send + 'static,
        S: Stream<Item = StreamItem<T>> + Send + 'static,
        F: FnOnce(EnvdState, Grant, Req, CallOptions) -> Fut,
        Fut: Future<Output = Result<S, ConnectError>>,
    {
        let Call { state, grant, headers, body } = self;
        connect::handle_stream(&headers, body, |request, options| open(state, grant, request, options)).await
    }

    /// Serves a client-streaming call: `consume` gets the state, the grant
    /// and the request messages as they arrive, and returns the answer.
    pub async fn client_stream<Req, Res, F, Fut>(self, consume: F) -> Response
    where
        Req: DeserializeOwned + Send + 'static,
        Res: Serialize + Send + 'static,
        F: FnOnce(EnvdState, Grant, Messages<Req>) -> Fut,
        Fut: Future<Output = Result<Res, ConnectError>>,
    {
        let Call { state, grant, headers, body } = self;
        connect::handle_client_stream(&headers, body, |messages| consume(state, grant, messages)).await
    }
}

/// The router of the envd port: one route per `envd_*` row of the endpoint
/// table, each behind the pipeline.
pub fn router(state: EnvdState) -> Router {
    let mut router = Router::new();
    for endpoint in ENDPOINTS.iter().filter(|e| e.port == Port::Envd) {
        if let Some(route) = handler(endpoint) {
            router = router.route(endpoint.path, guarded(route, &state.app, endpoint));
        }
    }
    router
        .fallback(not_found)
        .layer(KeepAliveLayer)
        .layer(tower_http::catch_panic::CatchPanicLayer::custom(|_| {
            tracing::error!("an envd handler panicked");
            ConnectError::new(Code::Internal, "internal error").into_response()
        }))
        .with_state(state)
}

/// The handler of an envd row, bound to its method.
pub fn handler(endpoint: &Endpoint) -> Option<MethodRouter<EnvdState>> {
    let route = match endpoint.id {
        "envd_health" => bind(endpoint, || async { StatusCode::NO_CONTENT }),
        "envd_metrics" => bind(endpoint, plain::metrics),
        "envd_envs" => bind(endpoint, plain::envs),
        "envd_init" => bind(endpoint, plain::init),
        "envd_files_read" => bind(endpoint, files::download),
        "envd_files_write" => bind(endpoint, files::upload),
        "envd_stat" => bind(endpoint, filesystem::stat),
        "envd_list_dir" => bind(endpoint, filesystem::list_dir),
        "envd_make_dir" => bind(endpoint, filesystem::make_dir),
        "envd_move" => bind(endpoint, filesystem::move_entry),
        "envd_remove" => bind(endpoint, filesystem::remove),
        "envd_watch_dir" => bind(endpoint, filesystem::watch_dir),
        "envd_create_watcher" => bind(endpoint, filesystem::create_watcher),
        "envd_get_watcher_events" => bind(endpoint, filesystem::watcher_events),
        "envd_remove_watcher" => bind(endpoint, filesystem::remove_watcher),
        "envd_process_start" => bind(endpoint, process::start),
        "envd_process_connect" => bind(endpoint, process::connect),
        "envd_process_list" => bind(endpoint, process::list),
        "envd_process_send_input" => bind(endpoint, process::send_input),
        "envd_process_stream_input" => bind(endpoint, process::stream_input),
        "envd_process_close_stdin" => bind(endpoint, process::close_stdin),
        "envd_process_send_signal" => bind(endpoint, process::send_signal),
        "envd_process_update" => bind(endpoint, process::update),
        _ => return None,
    };
    Some(route)
}

fn bind<H, T>(endpoint: &Endpoint, handler: H) -> MethodRouter<EnvdState>
where
    H: axum::handler::Handler<T, EnvdState>,
    T: 'static,
{
    axum::routing::on(crate::http::method_filter(endpoint.method), handler)
}

async fn not_found(request: Request) -> Response {
    let path = request.uri().path();
    if path.starts_with("/filesystem.") || path.starts_with("/process.") {
        ConnectError::new(Code::Unimplemented, format!("{path} is not a method this server serves")).into_response()
    } else {
        http_error(StatusCode::NOT_FOUND, format!("{path} not found"))
    }
}

impl EnvdState {
    /// Runs blocking `work` on the blocking pool with the account the grant's user acts as ([`EnvdState::account`]).
    ///
    /// # Errors
    /// The account's refusal, the work's own error, or `internal` when the task failed.
    pub async fn blocking_as<T, F>(&self, grant: &Grant, work: F) -> Result<T, EnvdError>
    where
        F: FnOnce(Option<abx_domain::accounts::Account>) -> Result<T, EnvdError> + Send + 'static,
        T: Send + 'static,
    {
        let (state, user, own) = (self.clone(), grant.user().map(str::to_string), grant.identity().user.clone());
        blocking(move || work(state.account(own.as_deref(), user)?)).await
    }

    /// The account a request acts as, if any ([`Envd::account`]). Blocking.
    ///
    /// # Errors
    /// As [`Envd::account`].
    pub fn account(
        &self,
        own: Option<&abx_domain::accounts::Account>,
        named: Option<String>,
    ) -> Result<Option<abx_domain::accounts::Account>, EnvdError> {
        self.envd.account(own, named)
    }
}

impl From<Denial> for ConnectError {
    fn from(denial: Denial) -> Self {
        crate::http::pipeline::connect_error(&denial)
    }
}

/// envd's Connect rendering of every handler error: its row's Connect code.
impl From<EnvdError> for ConnectError {
    fn from(error: EnvdError) -> Self {
        let code = match &error {
            EnvdError::Denied(denial) => return ConnectError::from(denial.clone()),
            other => other.fault().connect(),
        };
        if code == Code::Internal {
            tracing::error!(error = %error, "envd request failed");
            return ConnectError::new(code, "internal error (see the server log)");
        }
        ConnectError::new(code, error.to_string())
    }
}

/// A plain endpoint's answer for `error`: the status of its row's Connect
/// code, except for a body over its limit (413) and a full disk (507), which
/// envd's own server answers with those statuses.
pub fn plain_error(error: EnvdError) -> Response {
    let fault = error.fault();
    if matches!(fault, Fault::PayloadTooLarge | Fault::InsufficientStorage) {
        let status = StatusCode::from_u16(fault.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        return http_error(status, error.to_string());
    }
    let connect = ConnectError::from(error);
    http_error(connect::status(connect.code), connect.message)
}

/// Runs blocking envd work on the blocking pool: [`abx_domain::blocking::run`]
/// with the error type fixed, so a closure's `?` needs no annotation.
///
/// # Errors
/// The work's own error, or `internal` when the task failed.
pub async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, EnvdError> + Send + 'static,
) -> Result<T, EnvdError> {
    abx_domain::blocking::run(work).await
}
