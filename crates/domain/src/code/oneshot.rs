//! `POST /code/run`: one snippet run to completion by `python3 -c`,
//! `node -e` or `bash -c`, with a timeout that kills its whole process
//! group and output kept up to a limit (the rest is read and dropped, so
//! memory stays flat and the program never blocks on a full pipe), run by
//! the daemon's one runner: the program's exit ends the run.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use abx_wire::api::Fault;
use tokio::time::Instant;

use super::language::{find_program, Interpreters};
use crate::process::bounded::{self, Bounds};
use crate::process::ExitStatus;

/// Languages of `/code/run`, with the reference's names.
pub const LANGUAGES: [&str; 3] = ["bash", "node", "python"];
/// Default timeout in seconds.
pub const DEFAULT_TIMEOUT_SECONDS: u64 = 30;
/// Longest timeout in seconds.
pub const MAX_TIMEOUT_SECONDS: u64 = 300;
/// Output kept per stream when no policy limit is set.
pub const DEFAULT_MAX_OUTPUT_BYTES: u64 = 16 * 1024 * 1024;

/// A run to perform.
#[derive(Debug, Clone)]
pub struct RunSpec {
    /// `python`, `node` or `bash`.
    pub language: String,
    /// Source code.
    pub code: String,
    /// Kill the run after this long.
    pub timeout: Duration,
    /// Bytes kept per stream.
    pub max_output_bytes: u64,
    /// Working directory.
    pub cwd: PathBuf,
    /// Environment.
    pub env: BTreeMap<String, String>,
    /// Interpreter programs.
    pub interpreters: Interpreters,
    /// The user it runs as (the caller identity's), `None`: the daemon's.
    pub run_as: Option<crate::syscalls::RunAs>,
}

/// What a finished run produced.
#[derive(Debug, Clone, PartialEq)]
pub struct RunOutcome {
    /// Standard output (up to the limit).
    pub stdout: String,
    /// Standard error (up to the limit).
    pub stderr: String,
    /// Exit status, or minus the signal.
    pub exit_code: i32,
    /// Wall-clock duration.
    pub elapsed: Duration,
    /// Whether output was cut.
    pub truncated: bool,
}

/// Why a one-shot `/code/run` has no outcome (what the bounded runner's
/// [`bounded::RunError`] means to a caller of an interpreter).
#[derive(Debug, thiserror::Error)]
pub enum CodeRunError {
    /// It ran past its timeout and was killed.
    #[error("Code execution timed out after {0}s")]
    TimedOut(u64),
    /// The interpreter is not installed.
    #[error("Runtime not found for language '{0}'")]
    RuntimeNotFound(String),
    /// The code does not fit on a command line.
    #[error("The code is too large for a one-shot run; use a code context for programs this large")]
    TooLarge,
    /// Another start failure.
    #[error("cannot start the {0} interpreter")]
    Spawn(String, #[source] std::io::Error),
}

impl CodeRunError {
    /// The error's row of the error table.
    pub fn fault(&self) -> Fault {
        match self {
            CodeRunError::TimedOut(_) => Fault::RunTimeout,
            CodeRunError::RuntimeNotFound(_) => Fault::RuntimeNotFound,
            CodeRunError::TooLarge => Fault::BadRequest,
            CodeRunError::Spawn(..) => Fault::Internal,
        }
    }
}

/// Runs `spec` to completion.
///
/// # Errors
/// [`CodeRunError`] when it cannot start or times out.
pub async fn run(spec: RunSpec) -> Result<RunOutcome, CodeRunError> {
    let (program, flag) = match spec.language.as_str() {
        "python" => (&spec.interpreters.python, "-c"),
        "node" => (&spec.interpreters.node, "-e"),
        _ => (&spec.interpreters.bash, "-c"),
    };
    let path = find_program(program, spec.env.get("PATH").map(String::as_str))
        .ok_or_else(|| CodeRunError::RuntimeNotFound(spec.language.clone()))?;
    let started = Instant::now();
    let args = [OsString::from(flag), OsString::from(&spec.code)];
    let limits = (spec.timeout, spec.max_output_bytes);
    let collected = collect(&path, &args, &spec.cwd, &spec.env, limits, spec.run_as.clone())
        .await
        .map_err(|e| match (e.kind(), e.raw_os_error()) {
            (std::io::ErrorKind::NotFound, _) => CodeRunError::RuntimeNotFound(spec.language.clone()),
            (_, Some(7)) => CodeRunError::TooLarge,
            _ => CodeRunError::Spawn(spec.language.clone(), e),
        })?
        .ok_or(CodeRunError::TimedOut(spec.timeout.as_secs()))?;
    Ok(RunOutcome {
        stdout: collected.stdout,
        stderr: collected.stderr,
        exit_code: collected.exit.code(),
        elapsed: started.elapsed(),
        truncated: collected.truncated,
    })
}

/// Output and exit of a program run to completion.
#[derive(Debug, Clone)]
pub struct Collected {
    /// Standard output, up to the limit.
    pub stdout: String,
    /// Standard error, up to the limit.
    pub stderr: String,
    /// How it ended.
    pub exit: ExitStatus,
    /// Whether either stream was cut.
    pub truncated: bool,
}

/// Runs `program args` in `cwd` with exactly `env`, through the daemon's one
/// runner, keeping `limit` bytes per stream; `None` when it ran past
/// `timeout` (its process group is then killed). The program runs as
/// `run_as` when given.
///
/// The child's exit ends the run: what is left in its pipes is read, and a
/// background process it started, even one still holding them, is killed.
///
/// # Errors
/// The program cannot be started.
pub async fn collect(
    program: &Path,
    args: &[OsString],
    cwd: &Path,
    env: &BTreeMap<String, String>,
    (timeout, limit): (Duration, u64),
    run_as: Option<crate::syscalls::RunAs>,
) -> std::io::Result<Option<Collected>> {
    let mut command = std::process::Command::new(program);
    command.args(args).current_dir(cwd).env_clear().envs(env);
    let bounds = Bounds {
        timeout: Some(timeout),
        spawn: crate::process::SpawnOptions { credentials: run_as, ..Default::default() },
        ..Bounds::new(usize::try_from(limit).unwrap_or(usize::MAX))
    };
    match bounded::run(command, bounds).await {
        Ok(ran) => Ok(Some(Collected {
            stdout: String::from_utf8_lossy(&ran.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&ran.stderr).into_owned(),
            exit: ran.status,
            truncated: ran.truncated,
        })),
        Err(bounded::RunError::Timeout) => Ok(None),
        Err(bounded::RunError::Spawn(e) | bounded::RunError::Io(e)) => Err(e),
        Err(e @ bounded::RunError::TooMuchOutput(_)) => Err(std::io::Error::other(e.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(language: &str, code: &str, timeout: Duration, max: u64) -> RunSpec {
        RunSpec {
            language: language.into(),
            code: code.into(),
            timeout,
            max_output_bytes: max,
            cwd: std::env::temp_dir(),
            env: std::env::vars().filter(|(k, _)| k == "PATH").collect(),
            interpreters: Interpreters::default(),
            run_as: None,
        }
    }

    #[tokio::test]
    async fn bash_output_and_exit_code() {
        let outcome = run(spec("bash", "echo hi; echo err >&2; exit 4", Duration::from_secs(10), 1024)).await;
        let outcome = outcome.expect("ran");
        assert_eq!((outcome.stdout.as_str(), outcome.stderr.as_str(), outcome.exit_code), ("hi\n", "err\n", 4));
        assert!(!outcome.truncated);
    }

    #[tokio::test]
    async fn output_is_cut_at_the_limit_on_a_character_boundary() {
        let outcome = run(spec("bash", "printf 'aé%.0s' {1..1000}", Duration::from_secs(10), 8)).await.expect("ran");
        assert_eq!(outcome.stdout, "aéaéa");
        assert!(outcome.truncated);
    }

    #[tokio::test]
    async fn a_background_child_holding_the_pipe_does_not_hold_the_run() {
        let started = Instant::now();
        let outcome = run(spec("bash", "sleep 30 & echo done", Duration::from_secs(20), 1024)).await.expect("ran");
        assert_eq!(outcome.stdout, "done\n");
        assert!(started.elapsed() < Duration::from_secs(10));
    }

    #[tokio::test]
    async fn timeouts_kill_the_group() {
        let err = run(spec("bash", "sleep 30", Duration::from_millis(200), 1024)).await.expect_err("timeout");
        assert_eq!(err.to_string(), "Code execution timed out after 0s");
    }

    #[tokio::test]
    async fn a_missing_runtime_is_named() {
        let mut s = spec("node", "1", Duration::from_secs(1), 10);
        s.interpreters.node = "/nonexistent/node".into();
        let err = run(s).await.expect_err("missing");
        assert_eq!(err.to_string(), "Runtime not found for language 'node'");
    }
}
