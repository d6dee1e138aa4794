//! Supervised processes: everything the daemon runs, and the process endpoints' domain.
//!
//! - [`reaper`]: the one owner of child exit statuses (`waitpid`), spawning
//!   into a fresh process group, group signals and termination. Every
//!   subsystem that starts a program (shells, terminals, kernels, registered
//!   commands) spawns through [`reaper::supervisor`].
//! - [`start`]: the use case "start a process for this grant and request"
//!   ([`start::start_process`]): limit, slot, command, spawn, once for every
//!   plane (`/shell`, `/shell/stream`, `/process/start`, MCP, envd's `Start`).
//! - [`exec`]: from a request to a command that passed the policy.
//! - [`bounded`]: the one bounded runner (output limits, time limit, the
//!   exit of the program ends the run) and the one kill guard; used by
//!   `/shell`, registered commands, `/code/run`, git and system probes.
//! - [`shell`]: `/shell` (run to completion) and `/shell/stream` (line events).
//! - [`stream_runs`]: `/shell/stream` runs a client can resume (`Last-Event-ID`).
//! - [`registry`]: the one registry of processes clients address by pid
//!   (OS pids), viewed by both planes; ownership, retention and limits.
//! - [`table`]: background processes (`/process/*`), the native plane's
//!   view of the registry: stdin, signals, and bounded, cursor-addressable output.
//! - [`output`]: UTF-8-safe chunking and line splitting.
//! - [`capture`]: the bounded output log, lossless under attached subscribers.
//! - Command lines are split shell-style by [`abx_wire::codec::shlex`], which
//!   the client shares.
//!
//! Nothing here knows about HTTP.

pub mod bounded;
pub mod capture;
pub mod exec;
pub mod output;
pub mod reaper;
pub mod registry;
pub mod shell;
pub mod start;
pub mod stream_runs;
pub mod table;

use std::io;
use std::process::Stdio;

use abx_wire::api::Fault;
use nix::errno::Errno;

pub use self::exec::{prepare, ExecKind, ExecSpec};
pub use self::reaper::{supervisor, ExitStatus, Job, SpawnOptions, Spawned};
pub use self::registry::Registry;
pub use self::table::Processes;
use crate::policy::Denial;

/// Why a process operation failed.
#[derive(Debug, thiserror::Error)]
pub enum ProcessError {
    /// The request is malformed (400 `ValueError`).
    #[error("{0}")]
    Invalid(String),
    /// The policy refused it.
    #[error(transparent)]
    Denied(#[from] Denial),
    /// The program could not be started (500, with the OS error's Python name).
    #[error("{message}")]
    Spawn {
        /// `[Errno 2] No such file or directory: 'prog'`.
        message: String,
        /// The error table's row for the OS error (`FileNotFoundError`,
        /// `PermissionError`, `OSError`, ...).
        fault: Fault,
    },
    /// The wall-clock limit ended the command (500 `TimeoutError`).
    #[error("Command timed out after {0}s")]
    Timeout(String),
    /// `max_processes` is reached (429 `ResourceError`).
    #[error("Process limit reached ({0})")]
    ProcessLimit(u64),
    /// No process with this pid was started here (404).
    #[error("Process {0} not found")]
    NotFound(i64),
    /// The process has exited (404).
    #[error("Process {0} has already exited")]
    Exited(i64),
    /// The process cannot do that in its state (409 `ConflictError`).
    #[error("{0}")]
    Conflict(String),
    /// Signalling this pid is refused (403 `PermissionError`).
    #[error("Refusing to signal pid {0}")]
    Refused(i64),
    /// Something failed inside the server (500; details logged).
    #[error("internal error: {0}")]
    Internal(String),
}

/// A blocking task of a process operation that panicked or was cancelled.
impl From<tokio::task::JoinError> for ProcessError {
    fn from(e: tokio::task::JoinError) -> Self {
        ProcessError::Internal(format!("a blocking task failed: {e}"))
    }
}

impl ProcessError {
    /// A spawn failure of `program`, worded as Python's `OSError`.
    pub fn spawn(error: &io::Error, program: &str) -> Self {
        let fault = match error.kind() {
            io::ErrorKind::NotFound => Fault::SpawnNotFound,
            io::ErrorKind::PermissionDenied => Fault::SpawnPermission,
            _ if error.raw_os_error() == Some(Errno::ENOTDIR as i32) => Fault::SpawnNotADirectory,
            _ => Fault::SpawnFailed,
        };
        ProcessError::Spawn { message: format!("{}: '{program}'", py_os_error(error)), fault }
    }

    /// The error's row of the error table.
    pub fn fault(&self) -> Fault {
        match self {
            ProcessError::Invalid(_) => Fault::BadRequest,
            ProcessError::Denied(denial) => denial.fault(),
            ProcessError::Spawn { fault, .. } => *fault,
            ProcessError::Timeout(_) => Fault::ProcessTimeout,
            ProcessError::ProcessLimit(_) => Fault::ProcessLimit,
            ProcessError::NotFound(_) | ProcessError::Exited(_) => Fault::NotFound,
            ProcessError::Conflict(_) => Fault::Conflict,
            ProcessError::Refused(_) => Fault::Refused,
            ProcessError::Internal(_) => Fault::Internal,
        }
    }
}

/// An OS error as Python prints it: `[Errno 32] Broken pipe`.
pub fn py_os_error(error: &io::Error) -> String {
    match error.raw_os_error() {
        Some(code) => format!("[Errno {code}] {}", Errno::from_raw(code).desc()),
        None => error.to_string(),
    }
}

/// `value` formatted as Python's `{value:g}` (six significant digits).
pub fn format_g(value: f64) -> String {
    if value == 0.0 || !value.is_finite() {
        return if value == 0.0 { "0".into() } else { value.to_string() };
    }
    let exponent = value.abs().log10().floor() as i32;
    let trim = |s: String| {
        if s.contains('.') {
            s.trim_end_matches('0').trim_end_matches('.').to_string()
        } else {
            s
        }
    };
    if !(-4..6).contains(&exponent) {
        let text = format!("{value:.5e}");
        let (mantissa, exp) = text.split_once('e').unwrap_or((&text, "0"));
        let exp: i32 = exp.parse().unwrap_or(0);
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{}e{sign}{:02}", trim(mantissa.to_string()), exp.abs())
    } else {
        let decimals = usize::try_from(5 - exponent).unwrap_or(0);
        trim(format!("{value:.decimals$}"))
    }
}

/// Spawns `spec` through the supervisor (on the calling thread, as
/// `tokio::process` does: a `posix_spawn` returns within a millisecond).
///
/// # Errors
/// [`ProcessError::Spawn`] when the program cannot be started.
pub fn spawn(spec: &ExecSpec, stdin: Stdio, stdout: Stdio, stderr: Stdio) -> Result<Spawned, ProcessError> {
    let command = spec.command(stdin, stdout, stderr);
    supervisor().spawn(command, spec.spawn_options()).map_err(|e| ProcessError::spawn(&e, &spec.argv[0]))
}

/// A child's stdout or stderr pipe (as `Stdio::piped` made it) as a
/// non-blocking tokio pipe. It is known to be a pipe's read end, so it is
/// only made non-blocking (one `ioctl`) and registered, without tokio's
/// checks (`fstat`, `fcntl`).
///
/// # Errors
/// The descriptor cannot be made non-blocking or registered with the runtime.
pub fn receiver(
    fd: impl Into<std::os::fd::OwnedFd> + std::os::fd::AsFd,
) -> io::Result<tokio::net::unix::pipe::Receiver> {
    rustix::io::ioctl_fionbio(&fd, true)?;
    tokio::net::unix::pipe::Receiver::from_owned_fd_unchecked(fd.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeouts_print_as_python_does() {
        for (value, text) in [
            (300.0, "300"),
            (0.5, "0.5"),
            (1.25, "1.25"),
            (2.0 / 3.0, "0.666667"),
            (1e-5, "1e-05"),
            (1234567.0, "1.23457e+06"),
        ] {
            assert_eq!(format_g(value), text, "{value}");
        }
    }

    #[test]
    fn spawn_errors_read_like_pythons() {
        let err = ProcessError::spawn(&io::Error::from_raw_os_error(2), "nope");
        assert_eq!(err.to_string(), "[Errno 2] No such file or directory: 'nope'");
        assert!(matches!(err, ProcessError::Spawn { fault: Fault::SpawnNotFound, .. }));
    }
}
