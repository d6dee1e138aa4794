//! Background processes (`/process/*`): the native plane's view of the
//! daemon's one [`Registry`].
//!
//! A started process keeps its command, start time, [`Job`], an optional
//! stdin pipe and an optional [`Capture`] of its output. Output is read as
//! it comes, whether or not anyone is reading it, into the bounded capture;
//! readers hold cursors and never slow the process. Retention of exited
//! processes, ownership and limits are the registry's.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use abx_wire::api::process::{OutputEvent, ProcessInfo, ProcessOutput, Started, StdinRequest, StdinResult};
use abx_wire::codec::utf8::Utf8Decoder;
use base64::Engine;
use bytes::Bytes;
use nix::sys::signal::Signal;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::unix::pipe;

use super::bounded::KILL_GRACE;
use super::output::{Capture, Stream};
use super::reaper::SignalError;
use super::registry::{Entry, Registry, Slot};
use super::stream_runs::StreamRuns;
use super::{py_os_error, receiver, spawn, ExecSpec, Job, ProcessError};
use crate::policy::Viewer;

/// Capture budget when the policy sets no `max_output_bytes`, as the reference.
pub const DEFAULT_CAPTURE_BYTES: usize = 1024 * 1024;
/// Longest `wait` of `/process/{pid}/output`, as the reference.
pub const MAX_OUTPUT_WAIT: f64 = 30.0;
const STDIN_WRITE_TIMEOUT: Duration = Duration::from_secs(30);
const READ_CHUNK: usize = 16 * 1024;

/// The native plane's detail of a registered process.
struct Background {
    command: String,
    started_at: f64,
    job: Job,
    capture: Option<Arc<Capture>>,
    stdin: tokio::sync::Mutex<Option<pipe::Sender>>,
}

type Record = Entry<Background>;

fn info(record: &Record) -> ProcessInfo {
    let status = record.job.status();
    ProcessInfo {
        pid: record.pid(),
        command: record.command.clone(),
        state: if status.is_some() { "exited" } else { "running" }.into(),
        started_at: record.started_at,
        exit_code: status.map(|s| s.code()),
    }
}

/// The process service behind the `/process/*` endpoints.
#[derive(Clone, Debug, Default)]
pub struct Processes {
    registry: Registry,
    streams: Arc<StreamRuns>,
}

fn unix_now() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64())
}

impl Processes {
    /// A view of a new, empty registry.
    pub fn new() -> Self {
        Processes::default()
    }

    /// The daemon's registry this plane views (envd's plane views it too).
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// The `/shell/stream` runs a client may resume.
    pub fn streams(&self) -> &Arc<StreamRuns> {
        &self.streams
    }

    /// `POST /process/start`: starts `spec` in the background for `owner`
    /// (see [`crate::policy::owner`]); the slot is held until the process exits.
    ///
    /// # Errors
    /// [`ProcessError::Spawn`] when it cannot start.
    pub async fn start(
        &self,
        owner: &Viewer,
        spec: ExecSpec,
        capture_output: bool,
        with_stdin: bool,
        max_output: Option<usize>,
        slot: Slot,
    ) -> Result<Started, ProcessError> {
        use std::process::Stdio;
        let pipe_or_null = |on: bool| if on { Stdio::piped() } else { Stdio::null() };
        let spawned =
            spawn(&spec, pipe_or_null(with_stdin), pipe_or_null(capture_output), pipe_or_null(capture_output))?;
        let job = spawned.job;
        let stdin = match spawned.stdin {
            Some(fd) => Some(
                pipe::Sender::from_owned_fd(fd.into())
                    .map_err(|e| ProcessError::Internal(format!("stdin pipe: {e}")))?,
            ),
            None => None,
        };
        let capture = capture_output.then(|| Arc::new(Capture::new(max_output.unwrap_or(DEFAULT_CAPTURE_BYTES), 2)));
        if let Some(capture) = &capture {
            for (fd, stream) in
                [(spawned.stdout.map(Into::into), Stream::Stdout), (spawned.stderr.map(Into::into), Stream::Stderr)]
            {
                pump(fd, stream, Arc::clone(capture));
            }
        }
        let detail = Background {
            command: spec.command.clone(),
            started_at: unix_now(),
            job: job.clone(),
            capture,
            stdin: tokio::sync::Mutex::new(stdin),
        };
        let record = self.registry.insert(job.pid(), owner, detail);
        let deadline = spec.deadline();
        tokio::spawn(async move {
            let _slot = slot;
            match deadline {
                Some(limit) => {
                    if tokio::time::timeout(limit, record.job.exited()).await.is_err() {
                        record.job.terminate(KILL_GRACE).await;
                    }
                }
                None => {
                    record.job.exited().await;
                }
            }
            record.mark_ended();
        });
        Ok(Started { pid: job.pid(), command: spec.command })
    }

    /// The process `pid`, if `viewer` may see it (else it is not found).
    fn find(&self, pid: i64, viewer: &Viewer) -> Result<Arc<Record>, ProcessError> {
        self.registry.find(pid, viewer).ok_or(ProcessError::NotFound(pid))
    }

    /// `GET /process/list`: every known process `viewer` may see, oldest first.
    pub fn list(&self, viewer: &Viewer) -> Vec<ProcessInfo> {
        self.registry.visible::<Background>(viewer).iter().map(|r| info(r)).collect()
    }

    /// `GET /process/{pid}`.
    ///
    /// # Errors
    /// [`ProcessError::NotFound`].
    pub fn get(&self, pid: i64, viewer: &Viewer) -> Result<ProcessInfo, ProcessError> {
        Ok(info(&*self.find(pid, viewer)?))
    }

    /// `POST /process/{pid}/signal`: sends `signal` to the process's group
    /// (as a terminal's job control does), also once the process itself has
    /// exited while members of its group live on (a fork bomb whose first
    /// shell returned can still be stopped). Admission checks are the caller's.
    ///
    /// # Errors
    /// [`ProcessError::NotFound`], [`ProcessError::Exited`] when the whole
    /// group is gone, or the kernel's refusal.
    pub fn signal(&self, pid: i64, signal: Signal, viewer: &Viewer) -> Result<(), ProcessError> {
        let record = self.find(pid, viewer)?;
        if record.job.status().is_some() && !(record.job.group_alive() && group_runs(record.job.pgid())) {
            return Err(ProcessError::Exited(pid));
        }
        match record.job.signal_group(signal) {
            Ok(()) => Ok(()),
            Err(SignalError::Exited) => Err(ProcessError::Exited(pid)),
            Err(SignalError::Os(nix::errno::Errno::EPERM)) => Err(ProcessError::Refused(pid)),
            Err(SignalError::Os(errno)) => Err(ProcessError::Internal(format!("kill({pid}): {errno}"))),
        }
    }

    /// `POST /process/{pid}/stdin`.
    ///
    /// # Errors
    /// 404 for an unknown pid, 409 without a stdin pipe or when it is closed
    /// or not read, 400 for malformed data.
    pub async fn write_stdin(
        &self,
        pid: i64,
        request: StdinRequest,
        viewer: &Viewer,
    ) -> Result<StdinResult, ProcessError> {
        let record = self.find(pid, viewer)?;
        let mut stdin = record.stdin.lock().await;
        let Some(sender) = stdin.as_mut() else {
            return Err(ProcessError::Conflict(format!("Process {pid} was not started with stdin enabled")));
        };
        let data = stdin_bytes(&request)?;
        if data.is_empty() && !request.eof {
            return Err(ProcessError::Invalid("Provide 'data', 'data_base64' or 'eof'".into()));
        }
        if !data.is_empty() {
            match tokio::time::timeout(STDIN_WRITE_TIMEOUT, sender.write_all(&data)).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => return Err(ProcessError::Conflict(format!("stdin closed: {}", py_os_error(&e)))),
                Err(_) => return Err(ProcessError::Conflict(format!("stdin full: process {pid} is not reading it"))),
            }
        }
        if request.eof {
            *stdin = None;
        }
        Ok(StdinResult { pid: record.job.pid(), written: data.len(), closed: request.eof })
    }

    /// `GET /process/{pid}/output`: captured events from `since`, waiting up
    /// to `wait` seconds for one while the process may still produce output.
    ///
    /// # Errors
    /// 404 for an unknown pid, 409 when it was started without `capture_output`.
    pub async fn output(
        &self,
        pid: i64,
        since: u64,
        wait: f64,
        viewer: &Viewer,
    ) -> Result<ProcessOutput, ProcessError> {
        let record = self.find(pid, viewer)?;
        let Some(capture) = record.capture.clone() else {
            return Err(ProcessError::Conflict(format!("Process {pid} was started without capture_output")));
        };
        let wait = Duration::try_from_secs_f64(wait.clamp(0.0, MAX_OUTPUT_WAIT)).unwrap_or_default();
        let deadline = tokio::time::sleep(wait);
        tokio::pin!(deadline);
        loop {
            let (next, open) = capture.position();
            let running = record.job.status().is_none();
            if next > since || !(running || open) {
                break;
            }
            let woken = async {
                match (running, open) {
                    (true, true) => {
                        tokio::select! {
                            () = capture.wait_beyond(since) => {}
                            _ = record.job.exited() => {}
                        }
                    }
                    (true, false) => {
                        record.job.exited().await;
                    }
                    _ => capture.wait_beyond(since).await,
                }
            };
            tokio::select! {
                () = woken => {}
                () = &mut deadline => break,
            }
        }
        let read = capture.read(since);
        let info = info(&record);
        Ok(ProcessOutput {
            pid: info.pid,
            events: read.events.into_iter().map(output_event).collect(),
            next: read.next,
            state: info.state,
            exit_code: info.exit_code,
            dropped: read.dropped,
            lagged: read.lagged,
        })
    }
}

fn output_event(event: super::output::CapturedEvent) -> OutputEvent {
    let data = String::from_utf8_lossy(&event.bytes).into_owned();
    let exact = std::str::from_utf8(&event.bytes).is_ok();
    OutputEvent {
        seq: event.seq,
        stream: event.stream.as_str().into(),
        data,
        data_base64: (!exact).then(|| base64::engine::general_purpose::STANDARD.encode(&event.bytes)),
    }
}

fn stdin_bytes(request: &StdinRequest) -> Result<Vec<u8>, ProcessError> {
    use serde_json::Value;
    if let Some(encoded) = &request.data_base64 {
        let text = match encoded {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        return base64::engine::general_purpose::STANDARD
            .decode(text.as_bytes())
            .map_err(|e| ProcessError::Invalid(format!("Invalid base64: {e}")));
    }
    match &request.data {
        None => Ok(Vec::new()),
        Some(Value::String(s)) => Ok(s.as_bytes().to_vec()),
        Some(_) => Err(ProcessError::Invalid("'data' must be a string".into())),
    }
}

/// Copies a child's pipe into its capture until EOF, whether or not anyone
/// reads; while a subscriber holds the capture back, it stops reading, so
/// the pipe fills and the child blocks on its writes.
pub fn pump(fd: Option<std::os::fd::OwnedFd>, stream: Stream, capture: Arc<Capture>) {
    let Some(mut pipe) = fd.and_then(|fd| receiver(fd).ok()) else {
        capture.close_stream();
        return;
    };
    tokio::spawn(async move {
        let mut chunker = Utf8Decoder::new();
        let mut chunk = vec![0u8; READ_CHUNK];
        loop {
            match pipe.read(&mut chunk).await {
                Ok(0) | Err(_) => break,
                Ok(n) => capture.push(stream, Bytes::from(chunker.push(&chunk[..n]))).await,
            }
        }
        capture.push(stream, Bytes::from(chunker.finish_bytes())).await;
        capture.close_stream();
    });
}

/// Whether a process of group `pgid` is still running (not a zombie waiting to be reaped).
fn group_runs(pgid: i32) -> bool {
    let Ok(entries) = std::fs::read_dir("/proc") else { return true };
    entries.flatten().filter(|e| e.file_name().to_str().is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit()))).any(
        |entry| {
            let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
            // After the command's closing parenthesis: state, ppid, pgrp.
            let mut fields = stat.rsplit_once(')').map_or("", |(_, rest)| rest).split_whitespace();
            let state = fields.next();
            let pgrp = fields.nth(1).and_then(|g| g.parse::<i32>().ok());
            pgrp == Some(pgid) && !matches!(state, Some("Z" | "X"))
        },
    )
}
