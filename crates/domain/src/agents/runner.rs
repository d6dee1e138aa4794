//! Runs one turn's CLI under the process supervisor and feeds its output
//! to the parser and the turn builder.
//!
//! The CLI runs in its own process group with the allowlisted environment;
//! its prompt goes to standard input (then closed) or argv. Standard output
//! is read here, in this task, split into lines of at most [`MAX_LINE`]
//! bytes and parsed as it comes: there is no buffer between the pipe and
//! the parser, so a slow parse pauses the CLI and memory stays flat.
//! Standard error goes to a small capture (its tail explains a failure).
//!
//! A turn ends when the CLI exits (the rest of its group is then killed:
//! nothing it forked outlives it), or is ended with SIGTERM, then SIGKILL
//! after the grace, to the whole group: on cancel, on the wall-clock or
//! idle timeout (no output on either stream), when its output exceeds the
//! limit, and when the daemon shuts down. Once the CLI has exited, its
//! output is read as the process runner reads a program's
//! ([`QUIET_AFTER_EXIT`], at most [`DRAIN_AFTER_EXIT`]): a process that left
//! the group with `setsid` (deliberately detached, so not killed) may hold
//! the pipe open, and the turn completes without waiting for it.

use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use nix::sys::signal::Signal;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::adapters::{Adapter, Parser};
use super::build::TurnBuilder;
use super::error::Failure;
use super::parsed::Parsed;
use super::spec::Limits;
use crate::process::bounded::{KillOnDrop, DRAIN_AFTER_EXIT, QUIET_AFTER_EXIT};
use crate::process::output::{Capture, LineSplitter, Stream};
use crate::process::{format_g, receiver, ExecSpec};

/// Longest line parsed as one (the reference's limit); longer ones are cut.
pub const MAX_LINE: usize = 4 * 1024 * 1024;
/// Standard error kept to explain a failure.
const STDERR_KEEP: usize = 16 * 1024;
const READ_CHUNK: usize = 64 * 1024;

/// How a run ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// The CLI finished and said it succeeded.
    Completed,
    /// The turn was cancelled.
    Cancelled,
    /// The turn failed.
    Failed(Failure),
}

/// What to run.
#[derive(Debug)]
pub struct Run {
    /// The command, ready to spawn (program resolved, environment whole).
    pub exec: ExecSpec,
    /// Bytes for standard input, or `None` for `/dev/null`.
    pub stdin: Option<Vec<u8>>,
    /// Timeouts and the output limit.
    pub limits: Limits,
    /// Ends the run as cancelled.
    pub cancel: CancellationToken,
    /// Ends the run as failed (the daemon is stopping).
    pub shutdown: CancellationToken,
    /// Between SIGTERM and SIGKILL.
    pub kill_grace: Duration,
}

enum Cut {
    Cancelled,
    Failed(Failure),
}

/// Runs `run`, feeding `parser` and `builder`; returns how it ended.
pub async fn run(run: Run, adapter: &dyn Adapter, parser: &mut dyn Parser, builder: &mut TurnBuilder<'_>) -> Outcome {
    let stdin = if run.stdin.is_some() { Stdio::piped() } else { Stdio::null() };
    let spawned = match crate::process::spawn(&run.exec, stdin, Stdio::piped(), Stdio::piped()) {
        Ok(spawned) => spawned,
        Err(e) => {
            return Outcome::Failed(Failure::new("sandbox_error", format!("cannot start {}: {e}", run.exec.argv[0])))
        }
    };
    let job = spawned.job;
    let mut guard = KillOnDrop::new(job.clone(), run.kill_grace);
    if let (Some(fd), Some(bytes)) = (spawned.stdin, run.stdin) {
        if let Ok(mut pipe) = tokio::net::unix::pipe::Sender::from_owned_fd(fd.into()) {
            tokio::spawn(async move {
                // A CLI that exits without reading its input closes the pipe: that is fine.
                let _ = pipe.write_all(&bytes).await;
            });
        }
    }
    let stderr = Arc::new(Capture::new(STDERR_KEEP, 1));
    crate::process::table::pump(spawned.stderr.map(Into::into), Stream::Stderr, Arc::clone(&stderr));
    let stdout = spawned.stdout.and_then(|fd| receiver(std::os::fd::OwnedFd::from(fd)).ok());
    let limits = run.limits;
    let wall = tokio::time::sleep(limits.turn_timeout);
    tokio::pin!(wall);
    let idle = tokio::time::sleep(limits.idle_timeout);
    tokio::pin!(idle);
    let mut splitter = LineSplitter::new(MAX_LINE);
    let mut chunk = vec![0u8; READ_CHUNK];
    let mut lines: Vec<Vec<u8>> = Vec::new();
    let mut parsed: Vec<Parsed> = Vec::new();
    let mut total: u64 = 0;
    let mut stdout = stdout;
    let mut exited = false;
    let mut stderr_seen = 0u64;
    let mut cut: Option<Cut> = None;
    // Armed when the CLI exits; until then the guard below keeps it out of the select.
    let drain = tokio::time::sleep(limits.turn_timeout);
    tokio::pin!(drain);
    let mut drain_end = Instant::now();
    let leader = job.clone();
    let leader_exit = leader.exited();
    tokio::pin!(leader_exit);
    while stdout.is_some() || !exited {
        let (stderr_next, stderr_open) = stderr.position();
        tokio::select! {
            biased;
            () = run.cancel.cancelled() => { cut = Some(Cut::Cancelled); break; }
            () = run.shutdown.cancelled() => {
                cut = Some(Cut::Failed(Failure::new("internal_error", "the server is shutting down")));
                break;
            }
            () = &mut wall, if !exited => {
                let message = format!("turn exceeded {}s", format_g(limits.turn_timeout.as_secs_f64()));
                cut = Some(Cut::Failed(Failure::new("request_timeout", message)));
                break;
            }
            () = &mut idle, if !exited => {
                let message = format!("no output for {}s", format_g(limits.idle_timeout.as_secs_f64()));
                cut = Some(Cut::Failed(Failure::new("request_timeout", message)));
                break;
            }
            _ = &mut leader_exit, if !exited => {
                exited = true;
                // Whatever it forked dies with it; their ends of the pipes close.
                if job.group_alive() {
                    let _ = job.signal_group(Signal::SIGKILL);
                }
                drain_end = Instant::now() + DRAIN_AFTER_EXIT;
                drain.as_mut().reset(Instant::now() + QUIET_AFTER_EXIT);
            }
            () = &mut drain, if exited => {
                // A process that left the group still holds the pipe: what was written is read.
                tracing::debug!(pid = job.pid(), "agents: standard output still open after the CLI exited");
                stdout = None;
                if let Some(last) = splitter.finish() {
                    feed(&last, parser, builder, &mut parsed);
                }
            }
            () = stderr.wait_beyond(stderr_seen), if stderr_open && stderr_next <= stderr_seen => {
                stderr_seen = stderr.position().0;
                idle.as_mut().reset(Instant::now() + limits.idle_timeout);
            }
            read = read_some(stdout.as_mut(), &mut chunk) => {
                let n = match read {
                    Ok(0) | Err(_) => {
                        stdout = None;
                        if let Some(last) = splitter.finish() {
                            feed(&last, parser, builder, &mut parsed);
                        }
                        continue;
                    }
                    Ok(n) => n,
                };
                if stderr_next > stderr_seen {
                    stderr_seen = stderr_next;
                }
                idle.as_mut().reset(Instant::now() + limits.idle_timeout);
                if exited {
                    drain.as_mut().reset((Instant::now() + QUIET_AFTER_EXIT).min(drain_end));
                }
                total += n as u64;
                if total > limits.max_output_bytes {
                    let message = format!("agent output exceeded {} bytes", limits.max_output_bytes);
                    cut = Some(Cut::Failed(Failure::new("output_limit_exceeded", message)));
                    break;
                }
                splitter.push(&chunk[..n], |line| lines.push(line));
                for line in lines.drain(..) {
                    feed(&line, parser, builder, &mut parsed);
                }
            }
        }
    }
    let status = match cut {
        Some(_) => job.terminate(run.kill_grace).await,
        None => job.exited().await,
    };
    guard.disarm();
    if cut.is_none() {
        let mut tail = Vec::new();
        parser.finish(Some(status.code()), &mut tail);
        for event in tail {
            builder.handle(event);
        }
    }
    match cut {
        Some(Cut::Cancelled) => return Outcome::Cancelled,
        Some(Cut::Failed(failure)) => return Outcome::Failed(failure),
        None => {}
    }
    if let Some(fatal) = builder.fatal.clone() {
        return Outcome::Failed(fatal);
    }
    if status.code() != 0 {
        let tail = stderr_tail(&stderr);
        let failure = adapter.classify_failure(Some(status.code()), &builder.redactor().redact(&tail));
        return Outcome::Failed(failure);
    }
    builder.result_failure().map_or(Outcome::Completed, Outcome::Failed)
}

/// Reads from the pipe, or never returns once it is closed.
async fn read_some(pipe: Option<&mut tokio::net::unix::pipe::Receiver>, buf: &mut [u8]) -> std::io::Result<usize> {
    match pipe {
        Some(pipe) => pipe.read(buf).await,
        None => std::future::pending().await,
    }
}

fn feed(line: &[u8], parser: &mut dyn Parser, builder: &mut TurnBuilder<'_>, parsed: &mut Vec<Parsed>) {
    let text = String::from_utf8_lossy(line);
    parser.feed(text.trim_end_matches('\r'), parsed);
    for event in parsed.drain(..) {
        builder.handle(event);
    }
}

fn stderr_tail(capture: &Capture) -> String {
    let read = capture.read(0);
    let bytes: Vec<u8> = read.events.iter().flat_map(|e| Bytes::clone(&e.bytes)).collect();
    String::from_utf8_lossy(&bytes).into_owned()
}
