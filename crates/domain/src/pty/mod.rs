//! Terminals: real pseudo-terminals with a shell, managed as sessions.
//!
//! [`Terminals`] owns every session: it enforces `max_sessions` (live
//! shells only), hands out ids, and reaps sessions nobody used for the idle
//! timeout. A session outlives its WebSocket connections: it keeps a bounded
//! scrollback that a later connection replays, and it remembers how its
//! shell exited. Nothing here knows about HTTP; `http::pty` maps requests and
//! the WebSocket onto this module.
//!
//! - [`request`]: the checks of create and resize bodies and WebSocket messages.
//! - [`session`]: one session, its output pump and attachments.
//! - [`scrollback`]: the output ring (decoded with `codec::utf8`).
//! - [`spawn`]: the one place a shell is started.

pub mod request;
pub mod scrollback;
pub mod session;
pub mod spawn;

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Once, PoisonError};
use std::time::{Duration, Instant};

use abx_wire::api::Fault;
use abx_wire::api::PtySessionInfo;
use tokio_util::sync::CancellationToken;

pub use self::request::{ClientMessage, CreatePolicy, CreateRequest};
pub use self::session::{Attachment, Session, Update};
use crate::policy::{Denial, Viewer};

/// Default idle time after which an unattached session is closed (the reference's 30 minutes).
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(1800);
/// Default scrollback kept per session.
pub const DEFAULT_SCROLLBACK_BYTES: usize = 64 * 1024;
/// Default `max_sessions` when the policy sets none (the reference's).
pub const DEFAULT_MAX_SESSIONS: usize = 10;
/// An exited, unattached session is forgotten after this long at most.
pub const EXITED_RETENTION: Duration = Duration::from_secs(600);
/// How long a closed session's shell gets after `SIGHUP` before `SIGKILL`.
pub const CLOSE_GRACE: Duration = Duration::from_secs(2);

/// Why a terminal request failed; each variant maps to the reference's answer.
#[derive(Debug, thiserror::Error)]
pub enum TerminalError {
    /// The shell is not one of the allowed shells (the value is its Python repr).
    #[error(
        "Shell {0} is not allowed; permitted: ['/bin/bash', '/bin/sh', '/bin/zsh', '/usr/bin/bash', '/usr/bin/zsh']"
    )]
    ShellNotAllowed(String),
    /// The policy's `shells` does not list it.
    #[error("Shell '{0}' is not permitted by policy")]
    ShellDenied(String),
    /// `cols`/`rows` of a create body are not integers.
    #[error("Invalid 'cols' or 'rows': must be integers")]
    InvalidSize,
    /// `cols`/`rows` of a resize body are missing or not integers.
    #[error("'cols' and 'rows' must be integers")]
    ResizeNotIntegers,
    /// A side is outside 1..=1000.
    #[error("'cols' and 'rows' must be between 1 and 1000")]
    SizeOutOfRange,
    /// `env` is not an object.
    #[error("Environment updates must be a mapping of KEY to VALUE")]
    EnvNotAMapping,
    /// An assignment the environment guard refuses.
    #[error("{0}")]
    Env(Denial),
    /// Variables `env_deny` or the server's secrets forbid (sorted).
    #[error("Environment variable(s) not allowed: [{}]", .0.iter().map(|n| crate::pyrepr::repr_str(n)).collect::<Vec<_>>().join(", "))]
    EnvNotAllowed(Vec<String>),
    /// `max_sessions` live sessions exist.
    #[error("Session limit reached ({0})")]
    SessionLimit(usize),
    /// No session has this id.
    #[error("Session not found: {0}")]
    NotFound(String),
    /// The shell is allowed but not installed here.
    #[error("Shell '{0}' is not installed")]
    ShellMissing(String),
    /// The terminal or the shell could not be started.
    #[error("cannot start the terminal: {0}")]
    Spawn(#[source] std::io::Error),
    /// A resume offset past what the terminal has written.
    #[error("offset {offset} is past the terminal's output ({end} bytes so far)")]
    OffsetAhead {
        /// The offset asked for.
        offset: u64,
        /// The bytes written so far.
        end: u64,
    },
}

impl TerminalError {
    /// The error's row of the error table.
    pub fn fault(&self) -> Fault {
        match self {
            TerminalError::ShellNotAllowed(_)
            | TerminalError::InvalidSize
            | TerminalError::ResizeNotIntegers
            | TerminalError::SizeOutOfRange
            | TerminalError::OffsetAhead { .. } => Fault::BadRequest,
            TerminalError::ShellMissing(_) => Fault::ShellNotFound,
            TerminalError::ShellDenied(_) => Fault::ShellNotAllowed,
            TerminalError::EnvNotAMapping => Fault::EnvInvalid,
            TerminalError::Env(denial) => denial.fault(),
            TerminalError::EnvNotAllowed(_) => Fault::EnvVarNotAllowed,
            TerminalError::SessionLimit(_) => Fault::SessionLimit,
            TerminalError::NotFound(_) => Fault::SessionNotFound,
            TerminalError::Spawn(_) => Fault::TerminalSpawn,
        }
    }
}

/// Settings of the terminal domain (config file and flags).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TerminalSettings {
    /// Close unattached sessions idle this long (`None`: never).
    pub idle_timeout: Option<Duration>,
    /// Output history kept per session, in bytes.
    pub scrollback_bytes: usize,
    /// `max_sessions` when the policy sets none.
    pub max_sessions: usize,
}

impl Default for TerminalSettings {
    fn default() -> Self {
        TerminalSettings {
            idle_timeout: Some(DEFAULT_IDLE_TIMEOUT),
            scrollback_bytes: DEFAULT_SCROLLBACK_BYTES,
            max_sessions: DEFAULT_MAX_SESSIONS,
        }
    }
}

/// Every terminal session of the server.
pub struct Terminals {
    settings: TerminalSettings,
    sessions: Mutex<Table>,
    ws_port: AtomicU16,
    reaper: Once,
    shutdown: CancellationToken,
}

#[derive(Default)]
struct Table {
    sessions: HashMap<String, Owned>,
    starting: usize,
    /// Terminals started elsewhere (envd's) that count under `max_sessions`.
    leased: usize,
}

impl Table {
    fn live(&self) -> usize {
        self.sessions.values().filter(|o| o.session.exit_status().is_none()).count() + self.starting + self.leased
    }
}

/// A place under `max_sessions` held by a terminal started elsewhere (an
/// envd terminal process); given back when dropped.
pub struct Lease(Arc<Terminals>);

impl std::fmt::Debug for Lease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Lease")
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        let mut table = self.0.table();
        table.leased = table.leased.saturating_sub(1);
    }
}

/// A session and the identity that opened it (see [`crate::policy::owner`]).
struct Owned {
    session: Arc<Session>,
    owner: String,
}

impl std::fmt::Debug for Terminals {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Terminals").field("settings", &self.settings).finish_non_exhaustive()
    }
}

impl Terminals {
    /// An empty set of sessions; `shutdown` stops the idle reaper.
    pub fn new(settings: TerminalSettings, shutdown: CancellationToken) -> Self {
        Terminals {
            settings,
            sessions: Mutex::new(Table::default()),
            ws_port: AtomicU16::new(abx_wire::endpoints::Port::Pty.default_number()),
            reaper: Once::new(),
            shutdown,
        }
    }

    fn table(&self) -> MutexGuard<'_, Table> {
        self.sessions.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The settings.
    pub fn settings(&self) -> TerminalSettings {
        self.settings
    }

    /// Records the port the WebSocket listener really bound (for `ws_url`).
    pub fn set_ws_port(&self, port: u16) {
        self.ws_port.store(port, Ordering::Relaxed);
    }

    /// The PTY WebSocket port.
    pub fn ws_port(&self) -> u16 {
        self.ws_port.load(Ordering::Relaxed)
    }

    /// Starts a shell for `request` with `env` in `cwd`, owned by `owner`,
    /// unless `max_sessions` live sessions exist (`max_sessions` from the
    /// policy, else the setting).
    ///
    /// # Errors
    /// [`TerminalError::SessionLimit`], [`TerminalError::ShellMissing`], [`TerminalError::Spawn`].
    pub async fn create(
        self: &Arc<Self>,
        owner: &Viewer,
        request: CreateRequest,
        env: BTreeMap<String, String>,
        cwd: Option<PathBuf>,
        max_sessions: Option<usize>,
    ) -> Result<Arc<Session>, TerminalError> {
        self.start_reaper();
        let limit = max_sessions.unwrap_or(self.settings.max_sessions);
        {
            let mut table = self.table();
            if table.live() >= limit {
                return Err(TerminalError::SessionLimit(limit));
            }
            table.starting += 1;
        }
        // Spawned on its own task: a caller that goes away cannot orphan a started shell.
        let terminals = Arc::clone(self);
        let owner = owner.id().to_string();
        let task = tokio::spawn(async move {
            let started = terminals.start_session(request, env, cwd).await;
            let mut table = terminals.table();
            table.starting -= 1;
            if let Ok(session) = &started {
                table.sessions.insert(session.id().to_string(), Owned { session: Arc::clone(session), owner });
            }
            started
        });
        task.await.map_err(|e| TerminalError::Spawn(std::io::Error::other(e.to_string())))?
    }

    /// Live terminals: running sessions, those starting, and envd's.
    pub fn live(&self) -> usize {
        self.table().live()
    }

    /// A place under `max_sessions` (the policy's, else the setting) for a
    /// terminal started elsewhere, so every port counts against one limit.
    ///
    /// # Errors
    /// [`TerminalError::SessionLimit`].
    pub fn lease(self: &Arc<Self>, max_sessions: Option<usize>) -> Result<Lease, TerminalError> {
        let limit = max_sessions.unwrap_or(self.settings.max_sessions);
        let mut table = self.table();
        if table.live() >= limit {
            return Err(TerminalError::SessionLimit(limit));
        }
        table.leased += 1;
        Ok(Lease(Arc::clone(self)))
    }

    async fn start_session(
        &self,
        request: CreateRequest,
        env: BTreeMap<String, String>,
        cwd: Option<PathBuf>,
    ) -> Result<Arc<Session>, TerminalError> {
        let shell = request.shell.clone();
        let (cols, rows) = (request.cols, request.rows);
        let spawned = tokio::task::spawn_blocking(move || {
            let spec = spawn::ShellSpec {
                shell: &request.shell,
                args: &[],
                env: &env,
                cwd: cwd.as_deref(),
                cols,
                rows,
                credentials: request.run_as.clone(),
            };
            spawn::spawn_shell(&spec)
        })
        .await
        .map_err(|e| TerminalError::Spawn(std::io::Error::other(e.to_string())))?
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => TerminalError::ShellMissing(shell.clone()),
            _ => TerminalError::Spawn(e),
        })?;
        let session = Session::start(new_id(), shell, spawned, (cols, rows), self.settings.scrollback_bytes)
            .map_err(TerminalError::Spawn)?;
        tracing::info!(session = session.id(), pid = session.pid(), "terminal session started");
        Ok(session)
    }

    /// Every session `viewer` may see, oldest first.
    pub fn list(&self, viewer: &Viewer) -> Vec<PtySessionInfo> {
        let table = self.table();
        let visible = table.sessions.values().filter(|o| viewer.sees(&o.owner));
        let mut sessions: Vec<Arc<Session>> = visible.map(|o| Arc::clone(&o.session)).collect();
        drop(table);
        sessions.sort_by(|a, b| a.created_at().total_cmp(&b.created_at()).then_with(|| a.id().cmp(b.id())));
        sessions.iter().map(|s| s.info()).collect()
    }

    /// The session `id`, if `viewer` may see it.
    ///
    /// # Errors
    /// [`TerminalError::NotFound`], for another identity's session too.
    pub fn get(&self, id: &str, viewer: &Viewer) -> Result<Arc<Session>, TerminalError> {
        let table = self.table();
        let found = table.sessions.get(id).filter(|o| viewer.sees(&o.owner)).map(|o| Arc::clone(&o.session));
        found.ok_or_else(|| TerminalError::NotFound(id.to_string()))
    }

    /// Removes the session `id` (if `viewer` may see it) and ends its shell in the background.
    ///
    /// # Errors
    /// [`TerminalError::NotFound`], for another identity's session too.
    pub fn close(&self, id: &str, viewer: &Viewer) -> Result<(), TerminalError> {
        let mut table = self.table();
        if !table.sessions.get(id).is_some_and(|o| viewer.sees(&o.owner)) {
            return Err(TerminalError::NotFound(id.to_string()));
        }
        let removed = table.sessions.remove(id).map(|o| o.session);
        drop(table);
        let session = removed.ok_or_else(|| TerminalError::NotFound(id.to_string()))?;
        tracing::info!(session = id, "terminal session closed");
        tokio::spawn(async move { session.terminate(CLOSE_GRACE).await });
        Ok(())
    }

    /// Ends every session (server shutdown): `SIGHUP`, then `SIGKILL` after `grace`.
    pub async fn close_all(&self, grace: Duration) {
        let sessions: Vec<Arc<Session>> = self.table().sessions.drain().map(|(_, o)| o.session).collect();
        futures_util::future::join_all(sessions.iter().map(|s| s.terminate(grace))).await;
    }

    /// Closes unattached sessions idle for the timeout, and exited ones after
    /// [`EXITED_RETENTION`] at most; returns the ids closed.
    pub fn reap(&self, now: Instant) -> Vec<String> {
        let idle = self.settings.idle_timeout;
        let exited_after = idle.map_or(EXITED_RETENTION, |t| t.min(EXITED_RETENTION));
        let mut table = self.table();
        let expired: Vec<String> = table
            .sessions
            .values()
            .map(|o| &o.session)
            .filter(|s| match s.exit_status() {
                Some(_) => s.idle_for(exited_after, now),
                None => idle.is_some_and(|t| s.idle_for(t, now)),
            })
            .map(|s| s.id().to_string())
            .collect();
        for id in &expired {
            if let Some(Owned { session, .. }) = table.sessions.remove(id) {
                tracing::info!(session = %id, "idle terminal session closed");
                tokio::spawn(async move { session.terminate(CLOSE_GRACE).await });
            }
        }
        expired
    }

    fn start_reaper(self: &Arc<Self>) {
        self.reaper.call_once(|| {
            let terminals = Arc::downgrade(self);
            let idle = self.settings.idle_timeout.unwrap_or(EXITED_RETENTION).min(EXITED_RETENTION);
            let tick = (idle / 4).clamp(Duration::from_millis(100), Duration::from_secs(30));
            let shutdown = self.shutdown.clone();
            tokio::spawn(async move {
                let mut interval = tokio::time::interval(tick);
                interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                loop {
                    tokio::select! {
                        _ = interval.tick() => {}
                        () = shutdown.cancelled() => break,
                    }
                    let Some(terminals) = terminals.upgrade() else { break };
                    terminals.reap(Instant::now());
                }
            });
        });
    }
}

/// A fresh 12-hex-digit session id.
fn new_id() -> String {
    crate::ids::random_hex(6)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(shell: &str) -> CreateRequest {
        CreateRequest { shell: shell.into(), cols: 80, rows: 24, env: Vec::new(), run_as: None }
    }

    fn env() -> BTreeMap<String, String> {
        std::env::vars().filter(|(k, _)| k == "PATH").collect()
    }

    #[test]
    fn ids_are_twelve_hex_digits_and_differ() {
        let (a, b) = (new_id(), new_id());
        assert_eq!(a.len(), 12);
        assert!(a.bytes().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, b);
    }

    #[tokio::test]
    async fn the_limit_counts_live_shells_and_a_missing_shell_is_named() {
        let settings = TerminalSettings { max_sessions: 1, ..TerminalSettings::default() };
        let terminals = Arc::new(Terminals::new(settings, CancellationToken::new()));
        let missing = terminals.create(&Viewer::admin(), request("/nonexistent/sh"), env(), None, None).await;
        assert!(matches!(missing, Err(TerminalError::ShellMissing(_))), "{missing:?}");
        let first = terminals.create(&Viewer::admin(), request("/bin/sh"), env(), None, None).await.expect("first");
        let refused = terminals.create(&Viewer::admin(), request("/bin/sh"), env(), None, None).await;
        assert_eq!(refused.map(|_| ()).map_err(|e| e.to_string()), Err("Session limit reached (1)".into()));
        first.signal(nix::sys::signal::Signal::SIGKILL);
        let mut attachment = first.attach();
        while !matches!(attachment.next().await, Update::Exited(_)) {}
        assert_eq!(first.exit_status(), Some(crate::process::ExitStatus::Signaled(9)));
        terminals
            .create(&Viewer::admin(), request("/bin/sh"), env(), None, None)
            .await
            .expect("an exited shell frees its slot");
        terminals.close_all(Duration::from_secs(1)).await;
        assert!(terminals.list(&Viewer::admin()).is_empty());
    }
}
