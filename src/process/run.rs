//! Runs: `/shell` (to completion) and `/shell/stream` (line events).
//!
//! Both spawn into a fresh process group with stdin on `/dev/null`. The
//! timeout is a wall-clock deadline: SIGTERM to the whole group, SIGKILL
//! after [`KILL_GRACE`], so a chatty command and its descendants all end.
//! A run whose caller goes away (the request is dropped, the stream's client
//! disconnects) has its group terminated the same way.
//!
//! Both answer when the command exits: output its background descendants
//! still write to the inherited pipes is read until the pipes are quiet for
//! [`QUIET_AFTER_EXIT`] (at most [`DRAIN_AFTER_EXIT`]), then the pipes close
//! and the descendants run on (`sleep 60 & echo started` answers at once).
//!
//! `/shell` keeps at most `max_output_bytes` of each stream (default
//! [`DEFAULT_SHELL_OUTPUT_BYTES`]) and drains the rest, so the child never
//! blocks and memory stays flat. `/shell/stream` reads lines through bounded
//! channels: a slow client fills the pipe and pauses the child, nothing is
//! dropped, and memory stays flat.

use std::process::Stdio;
use std::time::Duration;

use tokio::io::AsyncReadExt;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::output::{LineSplitter, Stream, Utf8Chunker};
use super::{format_g, receiver, spawn, ExecSpec, ExitStatus, Job, ProcessError};
use crate::api::process::{ShellEvent, ShellResult};

/// How long a terminated group gets between SIGTERM and SIGKILL.
pub const KILL_GRACE: Duration = Duration::from_secs(2);
/// `/shell` output kept per stream when the policy sets no `max_output_bytes`.
pub const DEFAULT_SHELL_OUTPUT_BYTES: usize = 16 * 1024 * 1024;
/// Longest line `/shell/stream` sends as one event; longer lines are split.
pub const MAX_LINE_BYTES: usize = 64 * 1024;
const READ_CHUNK: usize = 16 * 1024;
/// Once the command exited, a pipe a descendant still holds is read until it is quiet this long...
pub const QUIET_AFTER_EXIT: Duration = Duration::from_millis(100);
/// ...or for this long at most.
pub const DRAIN_AFTER_EXIT: Duration = Duration::from_secs(1);

/// Reads `pipe` into `buffer` until the command has exited (`exited`) and the
/// pipe is then quiet, or to its end; `Ok(0)` for either.
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

/// Cancels `token` once `job` has exited, and returns its status.
async fn mark_exit(job: &Job, token: &CancellationToken) -> ExitStatus {
    let status = job.exited().await;
    token.cancel();
    status
}

/// Terminates a job's group when dropped while armed.
#[derive(Debug)]
pub struct KillOnDrop {
    job: Option<Job>,
}

impl KillOnDrop {
    /// Armed for `job`.
    pub fn new(job: Job) -> Self {
        KillOnDrop { job: Some(job) }
    }

    /// The run ended normally; nothing to kill.
    pub fn disarm(&mut self) {
        self.job = None;
    }
}

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let Some(job) = self.job.take() else { return };
        match tokio::runtime::Handle::try_current() {
            Ok(handle) => {
                handle.spawn(async move {
                    job.terminate(KILL_GRACE).await;
                });
            }
            Err(_) => {
                let _ = job.signal_group(nix::sys::signal::Signal::SIGKILL);
            }
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

/// Reads `pipe` to the end (or until quiet after the exit), keeping the first `cap` bytes.
async fn read_capped(
    pipe: Option<tokio::net::unix::pipe::Receiver>,
    cap: usize,
    exited: &CancellationToken,
) -> (Vec<u8>, bool) {
    let Some(mut pipe) = pipe else { return (Vec::new(), false) };
    let mut kept = Vec::new();
    let mut truncated = false;
    let mut chunk = vec![0u8; READ_CHUNK];
    let mut drained_by = None;
    loop {
        match read_until_quiet(&mut pipe, &mut chunk, exited, &mut drained_by).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                let room = cap.saturating_sub(kept.len());
                kept.extend_from_slice(&chunk[..n.min(room)]);
                truncated |= n > room;
            }
        }
    }
    if truncated {
        // Never end inside a character the cut split.
        let mut chunker = Utf8Chunker::default();
        kept = chunker.push(&kept);
    }
    (kept, truncated)
}

/// `POST /shell`: runs `spec` to completion.
///
/// # Errors
/// [`ProcessError::Spawn`] when it cannot start, [`ProcessError::Timeout`]
/// when the deadline ends it.
pub async fn run(spec: ExecSpec, max_output: Option<usize>) -> Result<ShellResult, ProcessError> {
    let spawned = spawn(&spec, Stdio::null(), Stdio::piped(), Stdio::piped())?;
    let job = spawned.job;
    let mut guard = KillOnDrop::new(job.clone());
    let pipe = |fd: Option<std::os::fd::OwnedFd>| fd.and_then(|fd| receiver(fd).ok());
    let stdout = pipe(spawned.stdout.map(Into::into));
    let stderr = pipe(spawned.stderr.map(Into::into));
    let cap = max_output.unwrap_or(DEFAULT_SHELL_OUTPUT_BYTES);
    let exited = CancellationToken::new();
    let finished = async {
        tokio::join!(read_capped(stdout, cap, &exited), read_capped(stderr, cap, &exited), mark_exit(&job, &exited))
    };
    let outcome = tokio::select! {
        done = finished => Some(done),
        () = sleep_until(deadline_of(&spec)) => None,
    };
    let Some(((out, out_cut), (err, err_cut), status)) = outcome else {
        job.terminate(KILL_GRACE).await;
        guard.disarm();
        return Err(ProcessError::Timeout(format_g(spec.timeout.unwrap_or_default())));
    };
    guard.disarm();
    Ok(ShellResult {
        stdout: String::from_utf8_lossy(&out).into_owned(),
        stderr: String::from_utf8_lossy(&err).into_owned(),
        exit_code: status.code(),
        truncated: (out_cut || err_cut).then_some(true),
    })
}

/// How a stream ended before the process finished on its own.
enum Cut {
    Timeout,
    OutputLimit,
    Disconnected,
    Shutdown,
}

/// `POST /shell/stream`: starts `spec` and returns its events; the last is
/// `exit` (or a lone `error` when it cannot start). Dropping the receiver
/// terminates the process group.
pub fn stream(
    spec: ExecSpec,
    max_output: Option<usize>,
    shutdown: CancellationToken,
    on_end: impl FnOnce() + Send + 'static,
) -> mpsc::Receiver<ShellEvent> {
    let (tx, rx) = mpsc::channel(32);
    tokio::spawn(async move {
        drive(spec, max_output, shutdown, tx).await;
        on_end();
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

async fn drive(spec: ExecSpec, max_output: Option<usize>, shutdown: CancellationToken, tx: mpsc::Sender<ShellEvent>) {
    let spawned = match spawn(&spec, Stdio::null(), Stdio::piped(), Stdio::piped()) {
        Ok(spawned) => spawned,
        Err(e) => {
            let _ = tx.send(ShellEvent::Error { error: e.to_string() }).await;
            return;
        }
    };
    let job = spawned.job;
    let mut guard = KillOnDrop::new(job.clone());
    let (line_tx, mut lines) = mpsc::channel(64);
    let exited = CancellationToken::new();
    let watcher = tokio::spawn({
        let (job, exited) = (job.clone(), exited.clone());
        async move { mark_exit(&job, &exited).await }
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
                () = tx.closed() => return Err(Cut::Disconnected),
                () = shutdown.cancelled() => return Err(Cut::Shutdown),
                () = &mut deadline => return Err(Cut::Timeout),
                next = lines.recv() => next,
            };
            let Some((stream, bytes)) = next else { break };
            let data = String::from_utf8_lossy(&bytes).into_owned();
            // Counted in characters plus the newline, as the reference.
            emitted += data.chars().count() + 1;
            if max_output.is_some_and(|limit| emitted > limit) {
                return Err(Cut::OutputLimit);
            }
            let event = match stream {
                Stream::Stdout => ShellEvent::Stdout { data },
                Stream::Stderr => ShellEvent::Stderr { data },
            };
            tokio::select! {
                biased;
                sent = tx.send(event) => sent.map_err(|_| Cut::Disconnected)?,
                () = shutdown.cancelled() => return Err(Cut::Shutdown),
                () = &mut deadline => return Err(Cut::Timeout),
            }
        }
        tokio::select! {
            biased;
            status = job.exited() => Ok(status),
            () = tx.closed() => Err(Cut::Disconnected),
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
    if let Some(error) = error.filter(|e| !e.is_empty()) {
        let _ = tx.send(ShellEvent::Error { error: error.to_string() }).await;
    }
    let _ = tx.send(ShellEvent::Exit { exit_code: status.code() }).await;
}
