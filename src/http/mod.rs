//! The HTTP edge: the router built from the endpoint table, the request
//! pipeline, extractors, the JSON error mapping, and the handlers.
//!
//! Handlers extract, call a domain module, and map the result; the domain
//! modules never see HTTP. Below the router, [`listener`] accepts each
//! port's connections (caps, reserve, descriptor exhaustion) and `conn`
//! serves each one (header-read and idle timeouts).

pub mod agents;
mod browser;
pub mod code;
mod commands;
mod conn;
mod core;
pub(crate) mod encoding;
pub mod envd;
pub mod error;
pub mod extract;
pub(crate) mod files;
pub mod limits;
pub mod listener;
pub mod mcp;
pub mod pipeline;
pub(crate) mod process;
pub mod pty;
pub mod routes;
pub(crate) mod system;
#[cfg(test)]
mod testing;
pub mod text_error;

/// Interval of the keep-alive comments of every SSE stream (`/shell/stream`,
/// file watches, the agents' event streams) while nothing else is sent.
pub const SSE_KEEP_ALIVE: std::time::Duration = std::time::Duration::from_secs(15);

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use abx_domain::commands::Registry;
use abx_domain::environment::ChildEnv;
use abx_domain::policy::PolicyEngine;
use abx_domain::pty::{TerminalSettings, Terminals};
use abx_domain::system::System;
use abx_wire::endpoints::{Endpoint, Port, ENDPOINTS};
use axum::http::{Method, Uri};
use axum::response::{IntoResponse, Response};
use axum::Router;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tower_http::catch_panic::CatchPanicLayer;

pub use self::error::ApiError;
pub use self::pipeline::{KeepAliveLayer, DEFAULT_MAX_REQUEST_BYTES};

/// State shared by every handler: one reference-counted [`Shared`], so
/// the clone each request's pipeline takes is one counter increment, not
/// one per field.
///
/// Fields read through `Deref`. Setting one (`state.files = ...`, only while
/// the server is being put together) goes through `DerefMut`, which copies
/// the fields first if another clone shares them: clones made before keep
/// what they had, as when every field was cloned on its own.
#[derive(Clone)]
pub struct AppState(Arc<Shared>);

/// What [`AppState`] shares.
#[derive(Clone)]
pub struct Shared {
    /// The policy engine.
    pub engine: Arc<PolicyEngine>,
    /// Cancelled when the server shuts down; long streams end on it.
    pub shutdown: CancellationToken,
    /// The environment children start with.
    pub env: Arc<ChildEnv>,
    /// Background processes and the process limits of the exec endpoints.
    pub processes: abx_domain::process::Processes,
    /// System information state (CPU sampler, cgroup location, caches).
    pub system: Arc<System>,
    /// Upload state: resumable sessions and swept directories.
    pub files: Arc<abx_domain::fs::Files>,
    /// Terminal sessions.
    pub terminals: Arc<Terminals>,
    /// Registered commands.
    pub commands: Arc<Registry>,
    /// Interpreter programs of `/code/run`.
    pub interpreters: Arc<abx_domain::code::Interpreters>,
    /// The agents runtime, started by the first call of an agents endpoint.
    pub agents: abx_domain::agents::LazyAgents,
    /// The headless browser (started by its first call).
    pub browser: Arc<abx_domain::browser::Browser>,
    /// Whether `GET /metrics` answers without credentials.
    pub metrics_anonymous: bool,
    /// The metrics every port's pipeline records.
    pub metrics: Arc<crate::metrics::Metrics>,
    /// The code port's contexts, when it runs (counted by the metrics).
    pub interpreter: Option<Arc<abx_domain::code::CodeInterpreter>>,
    /// The MCP endpoint (built by its first request).
    pub mcp: Arc<mcp::Mcp>,
    served: Arc<HashSet<&'static str>>,
}

impl std::ops::Deref for AppState {
    type Target = Shared;

    fn deref(&self) -> &Shared {
        &self.0
    }
}

impl std::ops::DerefMut for AppState {
    fn deref_mut(&mut self) -> &mut Shared {
        Arc::make_mut(&mut self.0)
    }
}

impl AppState {
    /// State for a server with this policy.
    pub fn new(engine: Arc<PolicyEngine>, shutdown: CancellationToken) -> Self {
        let served =
            ENDPOINTS.iter().filter(|e| e.port == Port::Api && routes::handler(e).is_some()).map(|e| e.id).collect();
        let secrets: Vec<String> = engine.secret_env_names().map(str::to_string).collect();
        let env = Arc::new(ChildEnv::capture(&secrets));
        let files = Arc::new(abx_domain::fs::Files::default());
        let terminals = Arc::new(Terminals::new(TerminalSettings::default(), shutdown.clone()));
        let interpreters = Arc::new(abx_domain::code::Interpreters::default());
        let agents_config = abx_domain::agents::AgentsConfig { users: engine.program_users(), ..Default::default() };
        let agents = abx_domain::agents::LazyAgents::new(agents_config, Arc::clone(&env), shutdown.clone());
        let browser = browser_for(&engine, &env, abx_domain::browser::BrowserSettings::default());
        AppState(Arc::new(Shared {
            engine,
            shutdown,
            env,
            processes: abx_domain::process::Processes::new(),
            system: Arc::new(System::new()),
            files,
            terminals,
            commands: Arc::new(Registry::default()),
            interpreters,
            agents,
            browser,
            metrics_anonymous: false,
            metrics: Arc::new(crate::metrics::Metrics::new()),
            interpreter: None,
            mcp: Arc::default(),
            served: Arc::new(served),
        }))
    }

    /// The same state with the agents runtime (not started yet) set as `config` says.
    pub fn with_agents(mut self, mut config: abx_domain::agents::AgentsConfig) -> Self {
        config.users = self.engine.program_users();
        self.agents = abx_domain::agents::LazyAgents::new(config, Arc::clone(&self.env), self.shutdown.clone());
        self
    }

    /// The same state with a browser run as `settings` say.
    pub fn with_browser(mut self, settings: abx_domain::browser::BrowserSettings) -> Self {
        self.browser = browser_for(&self.engine, &self.env, settings);
        self
    }

    /// The same state with these terminal settings and registered commands.
    pub fn configured(mut self, terminals: TerminalSettings, commands: Registry) -> Self {
        self.terminals = Arc::new(Terminals::new(terminals, self.shutdown.clone()));
        self.commands = Arc::new(commands);
        self
    }

    /// Marks the PTY WebSocket as served (its listener runs on `port`).
    pub fn serving_pty(self, port: u16) -> Self {
        self.terminals.set_ws_port(port);
        self.serving(Port::Pty)
    }

    /// Marks every endpoint of `port` as served (its listener runs).
    pub fn serving(mut self, port: Port) -> Self {
        let mut served = (*self.served).clone();
        served.extend(ENDPOINTS.iter().filter(|e| e.port == port).map(|e| e.id));
        self.served = Arc::new(served);
        self
    }

    /// Whether this build serves `endpoint` (the PTY WebSocket counts when its listener runs).
    pub fn served(&self, endpoint: &Endpoint) -> bool {
        self.served.contains(endpoint.id)
    }
}

/// A browser held to the URL policy of the `browser_navigate` rule.
fn browser_for(
    engine: &PolicyEngine,
    env: &Arc<ChildEnv>,
    settings: abx_domain::browser::BrowserSettings,
) -> Arc<abx_domain::browser::Browser> {
    let rule = abx_wire::endpoints::find("browser_navigate").map(|e| engine.rule(e));
    let policy = rule.map(abx_domain::policy::guards::UrlPolicy::from_rule).unwrap_or_default();
    abx_domain::browser::Browser::new(settings, Arc::clone(env), policy, Arc::new(browser::egress::ProxyEgress))
}

/// The router of the API port: one route per endpoint of the table.
pub fn router(state: AppState) -> Router {
    let mut router = Router::new();
    for endpoint in ENDPOINTS.iter().filter(|e| e.port == Port::Api) {
        let id = endpoint.id;
        let method_router = routes::handler(endpoint)
            .unwrap_or_else(|| routes::bind(endpoint, move || async move { ApiError::not_implemented(id) }));
        router = router.route(endpoint.path, pipeline::guarded(method_router, &state, endpoint));
    }
    router
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(KeepAliveLayer)
        .layer(CatchPanicLayer::custom(panic_response))
        .with_state(state)
}

async fn not_found(uri: Uri) -> ApiError {
    ApiError::route_not_found(trimmed(uri.path()))
}

async fn method_not_allowed(method: Method, uri: Uri) -> ApiError {
    ApiError::method_not_allowed(method.as_str(), trimmed(uri.path()))
}

fn trimmed(path: &str) -> &str {
    match path.trim_end_matches('/') {
        "" => "/",
        p => p,
    }
}

fn panic_response(panic: Box<dyn std::any::Any + Send + 'static>) -> Response {
    let detail = panic
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| panic.downcast_ref::<&str>().copied())
        .unwrap_or("unknown panic");
    tracing::error!(panic = detail, "a handler panicked");
    ApiError::internal().into_response()
}

/// Serves `router` on `listener` until `shutdown` is cancelled, then lets
/// in-flight requests finish for at most `grace`. Connections are bounded
/// and timed as `connections` says ([`listener`]).
///
/// The port's spare descriptor is taken now, not when the returned future
/// first runs: the daemon starts the API port last, so once `/health`
/// answers, every port holds its reserve and the daemon's descriptors are
/// all open.
///
/// # Errors
/// None so far: a failed `accept` is logged and the loop goes on.
pub fn serve(
    listener: TcpListener,
    router: Router,
    shutdown: CancellationToken,
    grace: Duration,
    connections: listener::Connections,
) -> impl std::future::Future<Output = std::io::Result<()>> + Send {
    let spare = listener::Spare::take();
    async move {
        // The peer's address reaches the pipeline as `ConnectInfo` (failed
        // authentications are counted per address): `conn` sets it on every request.
        let server = listener::accept_loop(listener, router, shutdown.clone(), connections, spare);
        let deadline = async {
            shutdown.cancelled().await;
            tokio::time::sleep(grace).await;
        };
        tokio::select! {
            () = server => Ok(()),
            () = deadline => {
                tracing::warn!(grace_seconds = grace.as_secs_f64(), "requests still running after the shutdown grace; closing them");
                Ok(())
            }
        }
    }
}

/// The axum method filter of a table method: every port's router binds
/// its rows with it.
pub fn method_filter(method: abx_wire::endpoints::Method) -> axum::routing::MethodFilter {
    use abx_wire::endpoints::Method as Table;
    use axum::routing::MethodFilter;
    match method {
        Table::Get | Table::Ws => MethodFilter::GET,
        Table::Post => MethodFilter::POST,
        Table::Put => MethodFilter::PUT,
        Table::Delete => MethodFilter::DELETE,
        Table::Head => MethodFilter::HEAD,
    }
}
