//! The one place a registered command's program is started and run to
//! its exit, with the daemon's one runner ([`crate::process::bounded`]): its
//! own process group, the child environment, optional JSON on stdin,
//! bounded standard output, the tail of standard error, a wall-clock limit.
//! The program's exit ends the run: whatever it left running in its group
//! (a background child holding its stdout) is killed then, and so is the
//! whole group on overrun or when the caller goes away.

use std::collections::BTreeMap;
use std::io;
use std::path::PathBuf;
use std::time::Duration;

pub use crate::process::bounded::RunError;
use crate::process::bounded::{self, Bounds, Keep};
use crate::process::ExitStatus;

/// Bytes of standard error kept (the end of it).
pub const STDERR_TAIL: usize = 8 * 1024;

/// What to run.
#[derive(Debug, Clone)]
pub struct Invocation {
    /// Program and arguments.
    pub argv: Vec<String>,
    /// The complete environment.
    pub env: BTreeMap<String, String>,
    /// Working directory.
    pub cwd: Option<PathBuf>,
    /// Written to standard input, then closed (`None`: `/dev/null`).
    pub stdin: Option<Vec<u8>>,
    /// Wall-clock limit.
    pub timeout: Duration,
    /// Largest standard output.
    pub max_output: usize,
    /// The user it runs as (the caller identity's), `None`: the daemon's.
    pub run_as: Option<crate::syscalls::RunAs>,
}

/// A program that ran to its end.
#[derive(Debug)]
pub struct Finished {
    /// How it ended.
    pub exit: ExitStatus,
    /// Its standard output.
    pub stdout: Vec<u8>,
    /// The end of its standard error.
    pub stderr_tail: Vec<u8>,
}

/// Runs `invocation` to its end.
///
/// # Errors
/// [`RunError::Spawn`], [`RunError::Timeout`] and [`RunError::TooMuchOutput`]
/// (after killing the process group), [`RunError::Io`].
pub async fn run(invocation: Invocation) -> Result<Finished, RunError> {
    let (program, args) = invocation.argv.split_first().ok_or_else(|| io::Error::other("empty argv"))?;
    let mut command = std::process::Command::new(program);
    command.args(args).env_clear().envs(&invocation.env);
    if let Some(cwd) = &invocation.cwd {
        command.current_dir(cwd);
    }
    let bounds = Bounds {
        stdin: invocation.stdin,
        stdout: Keep::Head(invocation.max_output),
        stderr: Keep::Tail(STDERR_TAIL),
        timeout: Some(invocation.timeout),
        spawn: crate::process::SpawnOptions { credentials: invocation.run_as, ..Default::default() },
        ..Bounds::new(0)
    };
    let ran = bounded::run(command, bounds).await?;
    Ok(Finished { exit: ran.status, stdout: ran.stdout, stderr_tail: ran.stderr })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn invocation(script: &str) -> Invocation {
        Invocation {
            argv: vec!["sh".into(), "-c".into(), script.into()],
            env: std::env::vars().filter(|(k, _)| k == "PATH").collect(),
            cwd: None,
            stdin: None,
            timeout: Duration::from_secs(10),
            max_output: 64,
            run_as: None,
        }
    }

    #[tokio::test]
    async fn output_error_tail_and_exit_come_back() {
        let ran = run(invocation("printf out; printf err >&2; exit 3")).await.expect("runs");
        assert_eq!(
            (ran.stdout.as_slice(), ran.stderr_tail.as_slice(), ran.exit),
            (&b"out"[..], &b"err"[..], ExitStatus::Exited(3))
        );
    }

    #[tokio::test]
    async fn stdin_is_fed_and_closed() {
        let mut inv = invocation("cat");
        inv.stdin = Some(b"{\"a\": 1}\n".to_vec());
        assert_eq!(run(inv).await.expect("runs").stdout, b"{\"a\": 1}\n");
    }

    #[tokio::test]
    async fn the_stderr_tail_is_bounded() {
        let mut inv = invocation("head -c 20000 /dev/zero | tr '\\0' a >&2; printf z >&2");
        inv.max_output = 10;
        let ran = run(inv).await.expect("runs");
        assert_eq!(ran.stderr_tail.len(), STDERR_TAIL);
        assert_eq!(ran.stderr_tail.last(), Some(&b'z'));
    }

    #[tokio::test]
    async fn the_exit_ends_the_run_even_with_a_background_child_on_stdout() {
        let started = std::time::Instant::now();
        let ran = run(invocation("sleep 40 & echo started")).await.expect("runs");
        assert_eq!((ran.stdout.as_slice(), ran.exit), (&b"started\n"[..], ExitStatus::Exited(0)));
        assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());
    }

    #[tokio::test]
    async fn overruns_missing_programs_and_floods_are_told_apart() {
        let mut slow = invocation("sleep 30");
        slow.timeout = Duration::from_millis(200);
        assert!(matches!(run(slow).await, Err(RunError::Timeout)));
        assert!(matches!(run(invocation("yes")).await, Err(RunError::TooMuchOutput(64))));
        let mut missing = invocation("");
        missing.argv = vec!["/nonexistent/program".into()];
        assert!(matches!(run(missing).await, Err(RunError::Spawn(_))));
    }
}
