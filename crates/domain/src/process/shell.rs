//! Runs: `/shell` (to completion) and `/shell/stream` (line events).
//!
//! Both spawn into a fresh process group with stdin on `/dev/null`. The
//! timeout is a wall-clock deadline: SIGTERM to the whole group, SIGKILL
//! after [`KILL_GRACE`], so a chatty command and its descendants all end.
//! A run whose caller goes away (the request is dropped; the stream's client
//! disconnects and does not resume within [`RESUME_GRACE`]) has its group
//! terminated the same way.
//!
//! `/shell` keeps at most `max_output_bytes` of each stream (default
//! [`DEFAULT_SHELL_OUTPUT_BYTES`]) and drains the rest, so the child never
//! blocks and memory stays flat. `/shell/stream` reads lines into a
//! resumable run ([`super::stream_runs`]): a slow or absent client fills
//! the pipe and pauses the child, nothing is dropped, and memory stays
//! bounded.

use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::AsyncReadExt;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

pub use super::bounded::KILL_GRACE;
use super::bounded::{self, AfterExit, Bounds, KillOnDrop, RunError, DRAIN_AFTER_EXIT, QUIET_AFTER_EXIT};
use super::output::{LineSplitter, Stream};
#[cfg(doc)]
use super::stream_runs::RESUME_GRACE;
use super::stream_runs::{Delivery, StreamRun};
use super::{format_g, receiver, spawn, ExecSpec, ExitStatus, ProcessError};
use abx_wire::api::process::{ShellEvent, ShellResult};

/// `/shell` output kept per stream when the policy sets no `max_output_bytes`.
pub const DEFAULT_SHELL_OUTPUT_BYTES: usize = 16 * 1024 * 1024;
/// Longest line `/shell/stream` sends as one event; longer lines are split.
pub const MAX_LINE_BYTES: usize = 64 * 1024;
const READ_CHUNK: usize = 16 * 1024;

/// Reads `pipe` into `buffer` until the command has exited (`exited`) and the
/// pipe is then quiet, or to its end; `Ok(0)` for either (as [`bounded`] does
/// for `/shell`: a background descendant holding the pipe does not hold the stream).
async fn read_until_quiet(
    pipe: &mut tokio::net::unix::pipe::Receiver,
    buffer: &mut [u8],
    exited: &CancellationToken,
    drained_by: &mut Option<Instant>,
) -> std::io::Result<usize> {
    loop {
        if exited.is_cancelled() {
            let until = *drained_by.get_or_insert_with(|| Instant::now() + DRAIN_AFTER_EXIT);
            let quiet = (Instant::now() + QUIET_AFTER_EXIT).min(until);
            return tokio::time::timeout_at(quiet, pipe.read(buffer)).await.unwrap_or(Ok(0));
        }
        // Reading is cancel-safe: nothing is lost when the exit wins.
        tokio::select! {
            read = pipe.read(buffer) => return read,
            () = exited.cancelled() => {}
        }
    }
}

fn sleep_until(deadline: Option<Instant>) -> tokio::time::Sleep {
    // A far deadline stands in for "none" (about 30 years).
    tokio::time::sleep_until(deadline.unwrap_or_else(|| Instant::now() + Duration::from_secs(1 << 30)))
}

fn deadline_of(spec: &ExecSpec) -> Option<Instant> {
    spec.deadline().map(|d| Instant::now() + d)
}

/// `POST /shell`: runs `spec` to its exit (descendants it leaves in the
/// background run on; see [`bounded`]).
///
/// # Errors
/// [`ProcessError::Spawn`] when it cannot start, [`ProcessError::Timeout`]
/// when the deadline ends it.
pub async fn run(spec: ExecSpec, max_output: Option<usize>) -> Result<ShellResult, ProcessError> {
    let cap = max_output.unwrap_or(DEFAULT_SHELL_OUTPUT_BYTES);
    let bounds = Bounds {
        timeout: spec.deadline(),
        grace: KILL_GRACE,
        after_exit: AfterExit::LeaveGroup,
        spawn: spec.spawn_options(),
        ..Bounds::new(cap)
    };
    let command = spec.command(Stdio::null(), Stdio::null(), Stdio::null());
    match bounded::run(command, bounds).await {
        Ok(ran) => Ok(ShellResult {
            stdout: String::from_utf8_lossy(&ran.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&ran.stderr).into_owned(),
            exit_code: ran.status.code(),
            truncated: ran.truncated.then_some(true),
        }),
        Err(RunError::Spawn(e)) => Err(ProcessError::spawn(&e, &spec.argv[0])),
        Err(RunError::Timeout) => Err(ProcessError::Timeout(format_g(spec.timeout.unwrap_or_default()))),
        Err(e @ (RunError::TooMuchOutput(_) | RunError::Io(_))) => Err(ProcessError::Internal(e.to_string())),
    }
}

/// How a stream ended before the process finished on its own.
enum Cut {
    Timeout,
    OutputLimit,
    Disconnected,
    Shutdown,
}

/// `POST /shell/stream`: starts `spec`, its events going to `run`; the
/// last is `exit` (or a lone `error` when it cannot start). A run no
/// connection is attached to for its grace ([`RESUME_GRACE`] for a
/// resumable one) has its group terminated.
pub fn stream_into(
    run: Arc<StreamRun>,
    spec: ExecSpec,
    max_output: Option<usize>,
    shutdown: CancellationToken,
    on_end: impl FnOnce() + Send + 'static,
) {
    tokio::spawn(async move {
        drive(&run, spec, max_output, shutdown).await;
        on_end();
    });
}

/// Starts `spec` and returns its events, the last `exit` (or a lone
/// `error`); dropping the receiver terminates the process group at once.
pub fn stream(
    spec: ExecSpec,
    max_output: Option<usize>,
    shutdown: CancellationToken,
    on_end: impl FnOnce() + Send + 'static,
) -> mpsc::Receiver<ShellEvent> {
    let (tx, rx) = mpsc::channel(32);
    let run = StreamRun::unlisted(Duration::ZERO);
    let mut attached = run.attach(None).ok();
    stream_into(run, spec, max_output, shutdown, on_end);
    tokio::spawn(async move {
        let Some(attached) = attached.as_mut() else { return };
        loop {
            let next = tokio::select! {
                next = attached.next() => next,
                () = tx.closed() => return,
            };
            let event = match next {
                None => return,
                Some(Delivery::Line { stream, data, .. }) => {
                    let data = String::from_utf8_lossy(&data).into_owned();
                    match stream {
                        Stream::Stdout => ShellEvent::Stdout { data },
                        Stream::Stderr => ShellEvent::Stderr { data },
                    }
                }
                Some(Delivery::Closing(event)) => event,
                // Nothing is evicted under its one connection, which never seeks.
                Some(Delivery::Gap(_)) => continue,
            };
            if tx.send(event).await.is_err() {
                return;
            }
        }
    });
    rx
}

fn start_reader(
    pipe: Option<std::os::fd::OwnedFd>,
    stream: Stream,
    lines: mpsc::Sender<(Stream, Vec<u8>)>,
    exited: CancellationToken,
) -> Option<JoinHandle<()>> {
    let mut pipe = receiver(pipe?).ok()?;
    Some(tokio::spawn(async move {
        let mut splitter = LineSplitter::new(MAX_LINE_BYTES);
        let mut chunk = vec![0u8; READ_CHUNK];
        let mut pending = Vec::new();
        let mut drained_by = None;
        loop {
            let n = match read_until_quiet(&mut pipe, &mut chunk, &exited, &mut drained_by).await {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            splitter.push(&chunk[..n], |line| pending.push(line));
            for line in pending.drain(..) {
                if lines.send((stream, line)).await.is_err() {
                    return;
                }
            }
        }
        if let Some(last) = splitter.finish() {
            let _ = lines.send((stream, last)).await;
        }
    }))
}

async fn drive(run: &StreamRun, spec: ExecSpec, max_output: Option<usize>, shutdown: CancellationToken) {
    let spawned = match spawn(&spec, Stdio::null(), Stdio::piped(), Stdio::piped()) {
        Ok(spawned) => spawned,
        Err(e) => {
            run.finish(vec![ShellEvent::Error { error: e.to_string() }]);
            return;
        }
    };
    let abandoned = run.abandoned();
    tokio::pin!(abandoned);
    let job = spawned.job;
    let mut guard = KillOnDrop::new(job.clone(), KILL_GRACE);
    let (line_tx, mut lines) = mpsc::channel(64);
    let exited = CancellationToken::new();
    let watcher = tokio::spawn({
        let (job, exited) = (job.clone(), exited.clone());
        async move {
            job.exited().await;
            exited.cancel();
        }
    });
    let readers: Vec<JoinHandle<()>> = [
        start_reader(spawned.stdout.map(Into::into), Stream::Stdout, line_tx.clone(), exited.clone()),
        start_reader(spawned.stderr.map(Into::into), Stream::Stderr, line_tx, exited),
    ]
    .into_iter()
    .flatten()
    .collect();
    let deadline = sleep_until(deadline_of(&spec));
    tokio::pin!(deadline);
    let mut emitted = 0usize;
    let result: Result<ExitStatus, Cut> = async {
        loop {
            let next = tokio::select! {
                biased;
                () = &mut abandoned => return Err(Cut::Disconnected),
                () = shutdown.cancelled() => return Err(Cut::Shutdown),
                () = &mut deadline => return Err(Cut::Timeout),
                next = lines.recv() => next,
            };
            let Some((stream, bytes)) = next else { break };
            // Counted in characters plus the newline, as the reference.
            emitted += String::from_utf8_lossy(&bytes).chars().count() + 1;
            if max_output.is_some_and(|limit| emitted > limit) {
                return Err(Cut::OutputLimit);
            }
            tokio::select! {
                biased;
                () = run.push_line(stream, bytes) => {}
                () = &mut abandoned => return Err(Cut::Disconnected),
                () = shutdown.cancelled() => return Err(Cut::Shutdown),
                () = &mut deadline => return Err(Cut::Timeout),
            }
        }
        tokio::select! {
            biased;
            status = job.exited() => Ok(status),
            () = &mut abandoned => Err(Cut::Disconnected),
            () = shutdown.cancelled() => Err(Cut::Shutdown),
            () = &mut deadline => Err(Cut::Timeout),
        }
    }
    .await;
    let (error, status) = match result {
        Ok(status) => (None, status),
        Err(cut) => {
            let status = job.terminate(KILL_GRACE).await;
            let error = match cut {
                Cut::Timeout => "timeout",
                Cut::OutputLimit => "output_limit",
                Cut::Shutdown => "server shutting down",
                Cut::Disconnected => {
                    tracing::debug!(pid = job.pid(), "stream client went away; process group terminated");
                    ""
                }
            };
            (Some(error), status)
        }
    };
    guard.disarm();
    watcher.abort();
    for reader in readers {
        reader.abort();
    }
    let mut closing = Vec::new();
    if let Some(error) = error.filter(|e| !e.is_empty()) {
        closing.push(ShellEvent::Error { error: error.to_string() });
    }
    closing.push(ShellEvent::Exit { exit_code: status.code() });
    run.finish(closing);
}
