//! The one place the system domain starts programs (`python3 --version`,
//! package managers): bounded in time and output, in their own process
//! group, killed with that group when they exit, overrun, or the request
//! goes away.
//!
//! It runs them with the daemon's one runner ([`crate::process::bounded`]).

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use crate::process::bounded::{self, Bounds, Keep};
use crate::process::ExitStatus;

/// What a finished program left.
#[derive(Debug)]
pub struct Ran {
    /// How it exited.
    pub status: ExitStatus,
    /// Its standard output (standard error is discarded).
    pub stdout: Vec<u8>,
}

/// Why a program did not run to completion: the bounded runner's one error
/// ([`RunError::is_not_installed`] when there is no such program).
pub use crate::process::bounded::RunError;

/// Runs `program args` with exactly `env`, in `cwd`, stdin closed, through
/// the daemon's one runner: its exit ends the run and its process group;
/// returns its exit status and at most `max_output` bytes of standard output.
///
/// # Errors
/// [`RunError::Spawn`] when there is no such program, [`RunError::Timeout`]
/// and [`RunError::TooMuchOutput`] after terminating its process group.
pub async fn run(
    program: &str,
    args: &[&str],
    env: &BTreeMap<String, String>,
    cwd: &Path,
    timeout: Duration,
    max_output: usize,
) -> Result<Ran, RunError> {
    let mut command = std::process::Command::new(program);
    command.args(args).env_clear().envs(env).current_dir(cwd);
    let bounds =
        Bounds { stdout: Keep::Head(max_output), stderr: Keep::Nothing, timeout: Some(timeout), ..Bounds::new(0) };
    let ran = bounded::run(command, bounds).await?;
    Ok(Ran { status: ran.status, stdout: ran.stdout })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env() -> BTreeMap<String, String> {
        std::env::vars().filter(|(k, _)| k == "PATH").collect()
    }

    #[tokio::test]
    async fn output_and_status_come_back() {
        let ran = run("sh", &["-c", "printf hello; exit 3"], &env(), Path::new("/"), Duration::from_secs(10), 64)
            .await
            .expect("runs");
        assert_eq!((ran.stdout.as_slice(), ran.status.code()), (&b"hello"[..], 3));
    }

    #[tokio::test]
    async fn the_environment_is_exactly_the_one_given() {
        let mut vars = env();
        vars.insert("ONLY_THIS".into(), "1".into());
        let ran = run("sh", &["-c", "env | grep -c ."], &vars, Path::new("/"), Duration::from_secs(10), 64)
            .await
            .expect("runs");
        // PATH, ONLY_THIS, and the PWD the shell adds.
        assert!(String::from_utf8_lossy(&ran.stdout).trim().parse::<u32>().expect("count") <= 3);
    }

    #[tokio::test]
    async fn missing_programs_and_floods_are_told_apart() {
        let missing = run("no-such-program-4b1f", &[], &env(), Path::new("/"), Duration::from_secs(5), 64).await;
        assert!(missing.as_ref().is_err_and(RunError::is_not_installed), "{missing:?}");
        let flood = run("sh", &["-c", "yes"], &env(), Path::new("/"), Duration::from_secs(10), 4096).await;
        assert!(matches!(flood, Err(RunError::TooMuchOutput(4096))), "{flood:?}");
    }

    #[tokio::test]
    async fn an_overrun_kills_the_whole_process_group() {
        let dir = tempfile::tempdir().expect("tmp");
        // The grandchild `sleep` holds stdout open: only killing the group ends the read.
        let script = "sleep 30 & echo $! > grandchild; wait";
        let slow = run("sh", &["-c", script], &env(), dir.path(), Duration::from_millis(300), 64).await;
        assert!(matches!(slow, Err(RunError::Timeout)), "{slow:?}");
        let pid = std::fs::read_to_string(dir.path().join("grandchild")).expect("pid file");
        // Not our child: no exit to await, so watch its state (a zombie or gone means dead).
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        loop {
            let stat = std::fs::read_to_string(format!("/proc/{}/stat", pid.trim())).unwrap_or_default();
            let state = stat.rsplit(") ").next().and_then(|rest| rest.chars().next());
            if matches!(state, None | Some('Z') | Some('X')) {
                break;
            }
            assert!(std::time::Instant::now() < deadline, "grandchild still running: {stat}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}
