//! Server lifecycle: build the policy engine, bind the listeners, serve,
//! and shut down cleanly on SIGTERM or SIGINT.
//!
//! Each listener's bound address is printed to stdout as
//! `listening <name> http://<addr>` once it accepts connections, so a
//! supervisor or test started with port 0 learns the real port: `code` (the
//! code interpreter, unless off), `envd` (the envd data plane, unless off)
//! and `pty` (the terminal WebSocket) first, then `api`, which means the
//! server is ready.

use std::io::Write;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use abx_domain::code::{CodeConfig, CodeInterpreter};
use abx_domain::envd::Envd;
use abx_domain::policy::{self, PolicyConfigError, PolicyEngine, PolicyInputs};
use abx_domain::pty::Terminals;
use abx_wire::endpoints::Port;
use tokio::net::{TcpListener, TcpSocket};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::config::{BaseDirSource, Config};
use crate::http::code::port::{self as code_port, CodeState};
use crate::http::envd::EnvdState;
use crate::http::{self, AppState};

/// Pending connections the kernel queues per listener, sized for bursts.
pub const LISTEN_BACKLOG: u32 = 1024;

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The policy cannot be used.
    #[error("policy error: {0}")]
    Policy(#[from] PolicyConfigError),
    /// A listener could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: String,
        /// The I/O error.
        source: std::io::Error,
    },
}

/// A started server.
pub struct Running {
    /// Where the API listens.
    pub api_addr: SocketAddr,
    /// Where the PTY WebSocket listens.
    pub pty_addr: SocketAddr,
    /// Where the code interpreter listens, when it does.
    pub code_addr: Option<SocketAddr>,
    /// Where the envd data plane listens, when it does.
    pub envd_addr: Option<SocketAddr>,
    shutdown: CancellationToken,
    api: JoinHandle<std::io::Result<()>>,
    pty: JoinHandle<std::io::Result<()>>,
    code: Option<JoinHandle<std::io::Result<()>>>,
    envd: Option<JoinHandle<std::io::Result<()>>>,
    terminals: Arc<Terminals>,
    interpreter: Arc<CodeInterpreter>,
    browser: Arc<abx_domain::browser::Browser>,
}

/// How long terminal shells get after `SIGHUP` at shutdown before `SIGKILL`.
const TERMINAL_SHUTDOWN_GRACE: Duration = Duration::from_secs(1);

/// How long code contexts get to stop at shutdown.
const CODE_SHUTDOWN_GRACE: Duration = Duration::from_secs(2);

impl Running {
    /// Stops accepting, ends every terminal session and code context, lets
    /// in-flight requests finish within the grace, and waits.
    pub async fn shutdown(self) {
        self.shutdown.cancel();
        // Children are signalled while requests drain, so runs waiting on them end now.
        let children = abx_domain::process::supervisor().terminate_all(abx_domain::process::shell::KILL_GRACE);
        tokio::join!(
            self.terminals.close_all(TERMINAL_SHUTDOWN_GRACE),
            self.interpreter.shutdown(CODE_SHUTDOWN_GRACE),
            self.browser.shutdown(),
            children
        );
        let listeners = [("API", self.api), ("PTY", self.pty)]
            .into_iter()
            .chain(self.code.map(|code| ("code", code)))
            .chain(self.envd.map(|envd| ("envd", envd)));
        for (name, task) in listeners {
            match task.await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => tracing::error!(error = %e, "{name} listener failed"),
                Err(e) => tracing::error!(error = %e, "{name} task failed"),
            }
        }
    }

    /// Waits until the API listener stops by itself (it only does on error).
    pub async fn wait(&mut self) {
        let _ = (&mut self.api).await;
    }
}

/// The policy engine for `config`.
///
/// # Errors
/// A policy that cannot be used.
pub fn engine(config: &Config) -> Result<PolicyEngine, PolicyConfigError> {
    let sources = policy::PolicySources::from_env(config.policy.clone(), config.preset.clone());
    let document = policy::source::load(&sources)?;
    PolicyEngine::new(PolicyInputs {
        base_dir: config.base_dir.clone(),
        base_dir_explicit: config.base_dir_source == BaseDirSource::Configured,
        enabled_groups: config.enabled_groups.clone(),
        server_token: policy::secret::from_env(policy::TOKEN_ENV)?,
        document,
        daemon_paths: config.daemon_paths(),
    })
}

/// Makes the daemon's own process unreadable to its children: with
/// `PR_SET_DUMPABLE` off, `/proc/<daemon>/environ` and `/mem` (where the
/// tokens are) need `CAP_SYS_PTRACE`, which a sandbox's processes lack. The
/// daemon still reads its own `/proc/self`; every child gets the usual
/// setting back when it `exec`s.
fn forbid_inspection() {
    if let Err(e) = nix::sys::prctl::set_dumpable(false) {
        tracing::warn!(error = %e, "cannot make the daemon undumpable; children may read its environment");
    }
}

/// Builds the engine, binds the listeners and starts serving.
///
/// # Errors
/// A policy that cannot be used or an address that cannot be bound.
pub async fn start(config: &Config) -> Result<Running, StartError> {
    let engine = Arc::new(engine(config)?);
    if !engine.origin().is_empty() {
        tracing::info!(
            source = engine.origin(),
            preset = engine.preset(),
            revision = engine.revision(),
            "policy loaded"
        );
    }
    for warning in engine.lint() {
        tracing::warn!("policy lint: {warning}");
    }
    warn_about_exposure(config, &engine);
    match config.base_dir_source {
        BaseDirSource::FallbackToCurrentDir => tracing::info!(
            base_dir = %config.base_dir.display(),
            "{} does not exist; file paths are confined to the current directory instead",
            crate::config::DEFAULT_BASE_DIR
        ),
        _ if !config.base_dir.is_dir() => {
            tracing::warn!(base_dir = %config.base_dir.display(), "the base directory does not exist yet")
        }
        _ => {}
    }
    forbid_inspection();
    abx_domain::fs::inotify::configure(config.watches);
    // The reaper runs from the start: as PID 1 or a subreaper, orphans arrive at any time.
    abx_domain::process::supervisor();
    abx_domain::process::reaper::protect_daemon_from_oom();
    let shutdown = CancellationToken::new();
    let listener = bind(&config.host, config.port).await?;
    let api_addr = listener.local_addr().map_err(|source| StartError::Bind { addr: config.host.clone(), source })?;
    let pty_listener = bind(&config.host, config.pty_port).await?;
    let pty_addr =
        pty_listener.local_addr().map_err(|source| StartError::Bind { addr: config.host.clone(), source })?;
    let mut state = AppState::new(Arc::clone(&engine), shutdown.clone())
        .configured(config.terminals, config.commands.clone())
        .serving_pty(pty_addr.port())
        .with_browser(config.browser.clone())
        .with_agents(config.agents.clone());
    state.interpreters = Arc::new(config.code.interpreters.clone());
    state.metrics_anonymous = config.metrics_anonymous;
    state.mcp = Arc::new(crate::http::mcp::Mcp::new(config.mcp_max_sessions));
    state.files = Arc::new(abx_domain::fs::Files::new(config.sync_writes).inflating(config.inflate));
    let terminals = Arc::clone(&state.terminals);
    let browser = Arc::clone(&state.browser);
    if !state.commands.is_empty() {
        tracing::info!(commands = state.commands.len(), "registered commands loaded");
    }
    let interpreter = CodeInterpreter::new(
        CodeConfig {
            max_contexts: config.code.max_contexts,
            idle_timeout: config.code.idle_timeout,
            interpreters: config.code.interpreters.clone(),
            base_dir: engine.base_dir().to_path_buf(),
        },
        Arc::clone(&state.env),
        shutdown.clone(),
    );
    state.interpreter = Some(Arc::clone(&interpreter));
    let (code_addr, code) = match start_code(config, &state, &interpreter, &shutdown).await? {
        Some((addr, task)) => (Some(addr), Some(task)),
        None => (None, None),
    };
    let (envd_addr, envd) = match start_envd(config, &state, &shutdown).await? {
        Some((addr, task)) => (Some(addr), Some(task)),
        None => (None, None),
    };
    if code_addr.is_some() {
        state = state.serving(Port::Code);
    }
    if envd_addr.is_some() {
        state = state.serving(Port::Envd);
    }
    let pty_router = http::pty::router(state.clone());
    let grace = config.shutdown_grace;
    let pty =
        tokio::spawn(http::serve(pty_listener, pty_router, shutdown.clone(), grace, connections(config, &engine)));
    announce("pty", pty_addr);
    let router = http::router(state);
    let api = tokio::spawn(http::serve(listener, router, shutdown.clone(), grace, connections(config, &engine)));
    announce("api", api_addr);
    Ok(Running {
        api_addr,
        pty_addr,
        code_addr,
        envd_addr,
        shutdown,
        api,
        pty,
        code,
        envd,
        terminals,
        interpreter,
        browser,
    })
}

type Listener = (SocketAddr, JoinHandle<std::io::Result<()>>);

/// The connection bounds of a port whose callers authenticate with the policy's tokens.
fn connections(config: &Config, engine: &Arc<PolicyEngine>) -> http::listener::Connections {
    let priority = http::limits::priority(Arc::clone(engine));
    http::listener::Connections { limits: config.connections, priority }
}

/// Starts the code-interpreter listener, unless it is off. A default port
/// that is taken is logged and skipped (another code interpreter may own
/// it); a configured one must be bound.
async fn start_code(
    config: &Config,
    state: &AppState,
    interpreter: &Arc<CodeInterpreter>,
    shutdown: &CancellationToken,
) -> Result<Option<Listener>, StartError> {
    let Some(port) = config.code_port else { return Ok(None) };
    let Some(listener) = bind_optional(&config.host, port, config.code_port_configured, "code contexts").await? else {
        return Ok(None);
    };
    let addr = listener.local_addr().map_err(|source| StartError::Bind { addr: config.host.clone(), source })?;
    let connections = connections(config, &state.engine);
    let state = CodeState {
        app: state.clone(),
        code: Arc::clone(interpreter),
        keepalive: config.code.keepalive,
        executions: Arc::default(),
    };
    let router = code_port::router(state);
    let task = tokio::spawn(http::serve(listener, router, shutdown.clone(), config.shutdown_grace, connections));
    announce("code", addr);
    Ok(Some((addr, task)))
}

/// Starts the envd listener, unless it is off. A default port that is
/// taken is logged and skipped (a real envd may own it); a configured one
/// must be bound.
async fn start_envd(
    config: &Config,
    state: &AppState,
    shutdown: &CancellationToken,
) -> Result<Option<Listener>, StartError> {
    let Some(port) = config.envd_port else { return Ok(None) };
    let Some(listener) = bind_optional(&config.host, port, config.envd_port_configured, "the envd data plane").await?
    else {
        return Ok(None);
    };
    let addr = listener.local_addr().map_err(|source| StartError::Bind { addr: config.host.clone(), source })?;
    let scrollback = config.terminals.scrollback_bytes;
    let envd =
        Arc::new(Envd::new(Arc::clone(&state.env), shutdown.clone(), scrollback, state.processes.registry().clone()));
    let connections = connections(config, &state.engine);
    let router = http::envd::router(EnvdState { app: state.clone(), envd });
    let task = tokio::spawn(http::serve(listener, router, shutdown.clone(), config.shutdown_grace, connections));
    announce("envd", addr);
    Ok(Some((addr, task)))
}

/// Binds an extra listener on its default port: taken (by a real envd or
/// code interpreter, say), it is logged and skipped (`None`) unless the port
/// was `configured` explicitly, when failing to bind is fatal.
async fn bind_optional(
    host: &str,
    port: u16,
    configured: bool,
    serves: &str,
) -> Result<Option<TcpListener>, StartError> {
    match bind(host, port).await {
        Ok(listener) => Ok(Some(listener)),
        Err(StartError::Bind { addr, source }) if !configured && source.kind() == std::io::ErrorKind::AddrInUse => {
            tracing::warn!(%addr, "the port is taken; serving without {serves}");
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

/// Binds a TCP listener with a backlog sized for bursts.
///
/// # Errors
/// The address does not resolve or cannot be bound.
pub async fn bind(host: &str, port: u16) -> Result<TcpListener, StartError> {
    let display = format!("{host}:{port}");
    let err = |source| StartError::Bind { addr: display.clone(), source };
    let addr = tokio::net::lookup_host((host, port))
        .await
        .map_err(err)?
        .next()
        .ok_or_else(|| err(std::io::Error::new(std::io::ErrorKind::NotFound, "no address")))?;
    let socket = if addr.is_ipv4() { TcpSocket::new_v4() } else { TcpSocket::new_v6() }.map_err(err)?;
    socket.set_reuseaddr(true).map_err(err)?;
    socket.bind(addr).map_err(err)?;
    socket.listen(LISTEN_BACKLOG).map_err(err)
}

fn announce(name: &str, addr: SocketAddr) {
    tracing::info!(listener = name, %addr, "listening");
    let mut stdout = std::io::stdout().lock();
    let _ = writeln!(stdout, "listening {name} http://{addr}");
    let _ = stdout.flush();
}

fn warn_about_exposure(config: &Config, engine: &PolicyEngine) {
    let open = engine.authenticator().anonymous().is_some_and(|a| a.scopes.contains("*"));
    if open && !config.is_loopback() {
        tracing::warn!(
            host = %config.host,
            "NO TOKEN IS SET and the server listens beyond loopback: anyone who reaches this port can read and \
             write files and run commands. Set ABX_SERVER_TOKEN, or bind 127.0.0.1, unless a gateway authenticates \
             in front of this server."
        );
    }
}

/// Listens for SIGTERM and SIGINT from now on; the future resolves when one arrives.
///
/// # Errors
/// The signal handlers cannot be installed (no runtime).
pub fn shutdown_signal() -> std::io::Result<impl std::future::Future<Output = ()>> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    Ok(async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
    })
}
