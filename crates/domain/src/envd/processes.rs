//! `process.Process`'s processes: started through the daemon's supervisor
//! ([`crate::process`]) or, with a terminal, as a terminal session
//! ([`crate::pty`]), and kept in the daemon's one process registry
//! ([`crate::process::registry`]) as this plane's view of it. Pids are OS
//! pids, as E2B's envd reports them (`kill -0 <pid>` in the sandbox names
//! the process), in the same pid space as the native `/process/*`.
//!
//! Output is read whether or not anyone listens, into a bounded replay
//! buffer ([`Capture`], [`REPLAY_BYTES`]; a terminal's scrollback for
//! terminals): every stream (`Start`, and each `Connect`) replays from the
//! first byte still held, then follows live output. A pipe stream is an
//! attached subscriber ([`crate::process::capture`]): the buffer does not
//! evict what it has not read, the process waits instead, until the
//! subscriber reads or is released (slower than another reader, or
//! stalled; see the bounds there). A stream that lost output (released, or
//! attached after the buffer moved on) ends with a loss marker that says
//! how many bytes and events, never with a clean `end`.
//!
//! Lifetime: a process runs until it exits or is signalled. A `lifetime`
//! (the `Connect-Timeout-Ms` of its `Start`, as envd does) kills its whole
//! process group with `SIGKILL` when it passes. After the exit and its
//! output (pipes closed, or [`DRAIN_GRACE`] after the exit when a
//! background child keeps them open), the end event is published; the
//! process leaves `List` but stays reachable by `Connect` for the
//! registry's retention ([`RETAIN_EXITED_FOR`], at most [`MAX_EXITED`]).

use std::sync::Arc;
use std::time::Duration;

use abx_wire::api::envd::process::{EndEvent, ProcessConfig, ProcessEvent, ProcessInfo, Selector, StartEvent};
use futures_util::Stream;
use nix::sys::signal::Signal;
use tokio::io::AsyncWriteExt;
use tokio::net::unix::pipe;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::events::{end_event, pipe_events, terminal_events, Delivery};
use super::EnvdError;
use crate::policy::Viewer;
use crate::process::capture::{Capture, Subscription};
use crate::process::output::Stream as Pipe;
use crate::process::registry::{Entry, Registry, Slot};
#[cfg(doc)]
use crate::process::registry::{MAX_EXITED, RETAIN_EXITED_FOR};
use crate::process::{ExecSpec, Job};
use crate::pty::{Lease, Session, Update};

pub use super::events::REPLAY_BYTES;
/// How long output may still arrive after the exit (a background child
/// holding the pipes), unless a subscriber is still reading queued output.
pub const DRAIN_GRACE: Duration = Duration::from_secs(1);
/// Longest a write to a stdin nobody reads may wait.
const STDIN_TIMEOUT: Duration = Duration::from_secs(30);

/// What a started process reads and writes through.
enum Io {
    /// Pipes: stdin (unless `/dev/null` or closed) and the output capture.
    Pipes {
        job: Job,
        stdin: tokio::sync::Mutex<Option<pipe::Sender>>,
        output: Arc<Capture>,
        /// The `Start`'s subscription, attached before the pipes were read.
        first: std::sync::Mutex<Option<Subscription>>,
    },
    /// A terminal session.
    Terminal { session: Arc<Session> },
}

/// This plane's detail of a registered process.
pub struct Detail {
    tag: Option<String>,
    config: ProcessConfig,
    io: Io,
    end: watch::Sender<Option<EndEvent>>,
}

/// One process of `process.Process`: a registry entry with this plane's detail.
pub type Process = Entry<Detail>;

impl Entry<Detail> {
    /// Its pid on the wire: the OS pid.
    pub fn os_pid(&self) -> u32 {
        self.pid().unsigned_abs()
    }

    /// Whether its end was not published yet.
    pub fn running(&self) -> bool {
        self.end.borrow().is_none()
    }

    /// Whether the process itself has not exited (its output may still be draining).
    pub fn alive(&self) -> bool {
        self.running()
            && match &self.io {
                Io::Pipes { job, .. } => job.status().is_none(),
                Io::Terminal { session } => session.exit_status().is_none(),
            }
    }

    /// Waits until the process has exited, at most `limit`.
    pub async fn exited(&self, limit: Duration) {
        let mut end = self.end.subscribe();
        let exited = async {
            match &self.io {
                Io::Pipes { job, .. } => {
                    job.exited().await;
                }
                Io::Terminal { .. } => {
                    let _ = end.wait_for(Option::is_some).await;
                }
            }
        };
        let _ = tokio::time::timeout(limit, exited).await;
    }

    /// Its `List` entry.
    pub fn info(&self) -> ProcessInfo {
        ProcessInfo { config: self.config.clone(), pid: self.os_pid(), tag: self.tag.clone() }
    }

    /// Writes `data` to its stdin pipe (`terminal: false`) or its terminal.
    ///
    /// # Errors
    /// [`EnvdError::FailedPrecondition`] for the wrong kind of input, a closed
    /// stdin, or one nobody reads for 30 s; [`EnvdError::NotFound`] once it ended.
    pub async fn write(&self, data: &[u8], terminal: bool) -> Result<(), EnvdError> {
        match (&self.io, terminal) {
            (Io::Pipes { stdin, .. }, false) => {
                let mut stdin = stdin.lock().await;
                let Some(pipe) = stdin.as_mut() else {
                    return Err(EnvdError::FailedPrecondition("stdin not enabled or closed".into()));
                };
                match tokio::time::timeout(STDIN_TIMEOUT, pipe.write_all(data)).await {
                    Ok(Ok(())) => Ok(()),
                    Ok(Err(e)) => Err(EnvdError::FailedPrecondition(format!("error writing to stdin: {e}"))),
                    Err(_) => Err(EnvdError::FailedPrecondition("stdin is full: the process does not read it".into())),
                }
            }
            (Io::Terminal { session }, true) => {
                let mut rest = data;
                while !rest.is_empty() {
                    let written = session
                        .write_input(rest)
                        .await
                        .map_err(|e| EnvdError::FailedPrecondition(format!("error writing to the terminal: {e}")))?;
                    rest = &rest[written.max(1).min(rest.len())..];
                }
                Ok(())
            }
            (Io::Pipes { .. }, true) => {
                Err(EnvdError::Invalid("no terminal is assigned to the process: write to its stdin instead".into()))
            }
            (Io::Terminal { .. }, false) => Err(EnvdError::Invalid(
                "a terminal is assigned to the process: write to the terminal, not stdin".into(),
            )),
        }
    }

    /// Closes its stdin pipe (end of input).
    ///
    /// # Errors
    /// [`EnvdError::Invalid`] for a terminal (send Ctrl+D instead).
    pub async fn close_stdin(&self) -> Result<(), EnvdError> {
        match &self.io {
            Io::Pipes { stdin, .. } => {
                stdin.lock().await.take();
                Ok(())
            }
            Io::Terminal { .. } => {
                Err(EnvdError::Invalid("cannot close stdin of a terminal process: send Ctrl+D (0x04) instead".into()))
            }
        }
    }

    /// Resizes its terminal.
    ///
    /// # Errors
    /// [`EnvdError::Invalid`] without a terminal or with a zero size.
    pub fn resize(&self, cols: u32, rows: u32) -> Result<(), EnvdError> {
        let Io::Terminal { session } = &self.io else {
            return Err(EnvdError::Invalid("no terminal is assigned to the process".into()));
        };
        let (Ok(cols @ 1..), Ok(rows @ 1..)) = (u16::try_from(cols), u16::try_from(rows)) else {
            return Err(EnvdError::Invalid(format!("invalid terminal size {cols}x{rows}")));
        };
        session.resize(cols, rows);
        Ok(())
    }

    /// Sends `signal` to its whole process group (the shell's session and its
    /// foreground job for a terminal).
    ///
    /// # Errors
    /// [`EnvdError::NotFound`] once it ended.
    pub fn signal(&self, signal: Signal) -> Result<(), EnvdError> {
        if !self.running() {
            return Err(EnvdError::NotFound(format!("process with pid {} not found", self.os_pid())));
        }
        match &self.io {
            Io::Pipes { job, .. } => {
                let _ = job.signal_group(signal);
            }
            Io::Terminal { session } => {
                session.signal(signal);
                if session.exit_status().is_none() {
                    let _ = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(session.pid()), signal);
                }
            }
        }
        Ok(())
    }

    /// Its events: `start`, the output still held, live output, and `end`
    /// (or the loss marker). The first call gets the subscription attached
    /// at the start, so a `Start` stream sees the output from its first byte.
    pub fn events(self: &Arc<Self>) -> impl Stream<Item = Delivery> + Send + 'static {
        let start = futures_util::stream::once({
            let pid = self.os_pid();
            async move { Delivery::Event(ProcessEvent::Start(StartEvent { pid })) }
        });
        let rest: std::pin::Pin<Box<dyn Stream<Item = Delivery> + Send>> = match &self.io {
            Io::Pipes { output, first, .. } => {
                let first = first.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take();
                let subscription = first.unwrap_or_else(|| output.subscribe());
                Box::pin(pipe_events(subscription, self.end.subscribe()))
            }
            Io::Terminal { session } => Box::pin(terminal_events(session.attach_lossy())),
        };
        futures_util::StreamExt::chain(start, rest)
    }
}

/// What a `Start` asks for beyond the prepared command.
#[derive(Debug, Clone)]
pub struct StartOptions {
    /// The request's config (reported by `List`).
    pub config: ProcessConfig,
    /// A tag to find it by.
    pub tag: Option<String>,
    /// A terminal of (cols, rows) instead of pipes.
    pub terminal: Option<(u16, u16)>,
    /// A stdin pipe (otherwise `/dev/null`).
    pub stdin: bool,
    /// Kill its group when this passes (the `Start`'s `Connect-Timeout-Ms`).
    pub lifetime: Option<Duration>,
}

/// The places a process holds under the daemon's limits until it has
/// exited: one under `max_processes` (shared with the API's background
/// processes) and, for a terminal, one under `max_sessions` (shared with
/// the API's terminals).
pub struct Held {
    /// The place under `max_processes`.
    pub slot: Slot,
    /// The place under `max_sessions`, for a terminal.
    pub session: Option<Lease>,
}

/// The processes `process.Process` started: this plane's view of the registry.
pub struct Processes {
    registry: Registry,
    shutdown: CancellationToken,
    scrollback: usize,
}

impl std::fmt::Debug for Processes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Processes").finish_non_exhaustive()
    }
}

impl Processes {
    /// A view of `registry`; terminals keep `scrollback` bytes; `shutdown` ends lifetimes.
    pub fn new(registry: Registry, scrollback: usize, shutdown: CancellationToken) -> Self {
        Processes { registry, shutdown, scrollback }
    }

    /// The daemon's registry this plane views.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// Starts `spec` (a command that passed the policy) as `options` say,
    /// owned by `owner`, holding `held` until it has exited.
    ///
    /// # Errors
    /// [`EnvdError::Invalid`] when it cannot start (as envd).
    pub async fn start(
        self: &Arc<Self>,
        owner: &Viewer,
        spec: ExecSpec,
        options: StartOptions,
        held: Held,
    ) -> Result<Arc<Process>, EnvdError> {
        let (pid, io) = match options.terminal {
            Some((cols, rows)) => {
                let session = self.start_terminal(&spec, cols, rows).await?;
                (session.pid(), Io::Terminal { session })
            }
            None => start_pipes(&spec, options.stdin)?,
        };
        let detail = Detail { tag: options.tag, config: options.config, io, end: watch::channel(None).0 };
        let process = self.registry.insert(pid, owner, detail);
        tokio::spawn(watch_exit(Arc::clone(&process), options.lifetime, self.shutdown.clone(), held));
        tracing::info!(pid, argv = ?spec.argv, "envd process started");
        Ok(process)
    }

    async fn start_terminal(&self, spec: &ExecSpec, cols: u16, rows: u16) -> Result<Arc<Session>, EnvdError> {
        let spec = spec.clone();
        let spawned = tokio::task::spawn_blocking(move || {
            let program = spec.program.as_ref().and_then(|p| p.to_str()).unwrap_or(&spec.argv[0]);
            let shell = crate::pty::spawn::ShellSpec {
                shell: program,
                args: &spec.argv[1..],
                env: &spec.env,
                cwd: spec.cwd.as_deref(),
                cols,
                rows,
                credentials: spec.credentials.clone(),
            };
            crate::pty::spawn::spawn_shell(&shell)
        })
        .await
        .map_err(|e| EnvdError::Internal(format!("the terminal task failed: {e}")))?
        .map_err(|e| EnvdError::Invalid(format!("error starting the process on a terminal: {e}")))?;
        let pid = spawned.pid;
        Session::start(format!("envd-{pid}"), String::new(), spawned, (cols, rows), self.scrollback)
            .map_err(|e| EnvdError::Internal(format!("cannot attach the terminal: {e}")))
    }

    /// The process `selector` names among those `viewer` may see: by pid,
    /// or the running one with the tag (else the latest that had it).
    ///
    /// # Errors
    /// [`EnvdError::NotFound`], for another identity's process too.
    pub fn find(&self, selector: &Selector, viewer: &Viewer) -> Result<Arc<Process>, EnvdError> {
        let found = match selector {
            Selector::Pid(pid) => self.registry.find::<Detail>(i64::from(*pid), viewer),
            Selector::Tag(tag) => {
                let tagged = self.registry.visible::<Detail>(viewer);
                let mut tagged: Vec<Arc<Process>> =
                    tagged.into_iter().filter(|p| p.tag.as_deref() == Some(tag.as_str())).collect();
                tagged.sort_by_key(|p| (p.running(), p.seq()));
                tagged.pop()
            }
        };
        found.ok_or_else(|| match selector {
            Selector::Pid(pid) => EnvdError::NotFound(format!("process with pid {pid} not found")),
            Selector::Tag(tag) => EnvdError::NotFound(format!("process with tag {tag} not found")),
        })
    }

    /// Processes that have not exited and that `viewer` may see, in the order they started.
    pub fn list(&self, viewer: &Viewer) -> Vec<ProcessInfo> {
        self.registry.visible::<Detail>(viewer).iter().filter(|p| p.alive()).map(|p| p.info()).collect()
    }
}

fn start_pipes(spec: &ExecSpec, stdin: bool) -> Result<(i32, Io), EnvdError> {
    use std::process::Stdio;
    let stdin_mode = if stdin { Stdio::piped() } else { Stdio::null() };
    let spawned = crate::process::spawn(spec, stdin_mode, Stdio::piped(), Stdio::piped())
        .map_err(|e| EnvdError::Invalid(format!("error starting process '{}': {e}", spec.argv.join(" "))))?;
    let stdin = match spawned.stdin {
        Some(fd) => Some(
            pipe::Sender::from_owned_fd(std::os::fd::OwnedFd::from(fd))
                .map_err(|e| EnvdError::Internal(format!("stdin pipe: {e}")))?,
        ),
        None => None,
    };
    let output = Arc::new(Capture::new(REPLAY_BYTES, 2));
    let first = std::sync::Mutex::new(Some(output.subscribe()));
    for (fd, stream) in [
        (spawned.stdout.map(std::os::fd::OwnedFd::from), Pipe::Stdout),
        (spawned.stderr.map(std::os::fd::OwnedFd::from), Pipe::Stderr),
    ] {
        crate::process::table::pump(fd, stream, Arc::clone(&output));
    }
    let stdin = tokio::sync::Mutex::new(stdin);
    Ok((spawned.job.pid(), Io::Pipes { job: spawned.job, stdin, output, first }))
}

/// Waits until the output is drained: both pipes closed, or a quiet
/// [`DRAIN_GRACE`] (a background child holding them) at whose end no
/// subscriber holds the writer back (output still queued is drained first).
async fn drain(output: &Capture) {
    loop {
        let closed = async {
            while output.position().1 {
                output.wait_beyond(u64::MAX).await;
            }
        };
        if tokio::time::timeout(DRAIN_GRACE, closed).await.is_ok() || !output.writer_waiting() {
            return;
        }
    }
}

/// Kills the process when its lifetime passes, waits for its exit and its
/// output, then publishes the end event.
async fn watch_exit(process: Arc<Process>, lifetime: Option<Duration>, shutdown: CancellationToken, held: Held) {
    let deadline = async {
        match lifetime {
            Some(limit) => tokio::time::sleep(limit).await,
            None => std::future::pending().await,
        }
    };
    let mut expired = false;
    let status = match &process.io {
        Io::Pipes { job, output, .. } => {
            let status = tokio::select! {
                status = job.exited() => status,
                () = deadline => {
                    tracing::info!(pid = process.pid(), "envd process lifetime passed; killing its group");
                    expired = true;
                    let _ = job.signal_group(Signal::SIGKILL);
                    job.exited().await
                }
                () = shutdown.cancelled() => job.terminate(Duration::from_secs(1)).await,
            };
            drain(output).await;
            status
        }
        Io::Terminal { session } => {
            let mut watcher = session.attach_lossy();
            let exited = async {
                loop {
                    if let Update::Exited(exit) = watcher.next().await {
                        return exit;
                    }
                }
            };
            tokio::pin!(exited);
            tokio::select! {
                status = &mut exited => status,
                () = deadline => {
                    tracing::info!(pid = process.pid(), "envd process lifetime passed; killing it");
                    expired = true;
                    let _ = process.signal(Signal::SIGKILL);
                    exited.await
                }
                () = shutdown.cancelled() => {
                    session.terminate(Duration::from_secs(1)).await;
                    exited.await
                }
            }
        }
    };
    process.mark_ended();
    drop(held);
    tracing::info!(pid = process.pid(), code = status.code(), "envd process ended");
    let mut end = end_event(status);
    if let (true, Some(limit)) = (expired, lifetime) {
        // Said plainly, so a later Connect learns why a background command stopped.
        end.error = Some(format!(
            "{}: its lifetime (the Connect-Timeout-Ms of its Start, {} ms) passed",
            end.status,
            limit.as_millis()
        ));
    }
    process.end.send_replace(Some(end));
}
