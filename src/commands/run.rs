//! The one place a registered command's program is started and run to
//! completion: its own process group, the child environment, optional JSON
//! on stdin, bounded standard output, the tail of standard error, a
//! wall-clock limit, and the whole group killed on overrun or when the
//! caller goes away.
//!
//! The program is spawned and reaped through the process supervisor.

use std::collections::{BTreeMap, VecDeque};
use std::io;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use nix::sys::signal::Signal;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::unix::pipe;

use crate::process::{receiver, supervisor, Job, SpawnOptions};

/// Bytes of standard error kept (the end of it).
pub const STDERR_TAIL: usize = 8 * 1024;

/// How a program ended: the supervisor's exit status.
pub use crate::process::ExitStatus as Exit;

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
}

/// A program that ran to its end.
#[derive(Debug)]
pub struct Finished {
    /// How it ended.
    pub exit: Exit,
    /// Its standard output.
    pub stdout: Vec<u8>,
    /// The end of its standard error.
    pub stderr_tail: Vec<u8>,
}

/// Why a program did not run to its end.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The program (or the working directory) does not exist.
    #[error("{0}")]
    NotFound(#[source] io::Error),
    /// It ran longer than allowed and was killed.
    #[error("timed out")]
    Timeout,
    /// It wrote more than allowed and was killed.
    #[error("wrote more than {0} bytes")]
    TooMuchOutput(usize),
    /// It could not be started or read.
    #[error("{0}")]
    Io(#[from] io::Error),
}

/// A started program.
struct Spawned {
    job: Job,
    stdin: Option<pipe::Sender>,
    stdout: pipe::Receiver,
    stderr: pipe::Receiver,
}

/// Starts `invocation`'s program through the supervisor (its own process
/// group, reaped by the daemon's reaper) with piped stdio.
fn spawn(invocation: &Invocation) -> io::Result<Spawned> {
    let (program, args) = invocation.argv.split_first().ok_or_else(|| io::Error::other("empty argv"))?;
    let mut command = std::process::Command::new(program);
    command
        .args(args)
        .env_clear()
        .envs(&invocation.env)
        .stdin(if invocation.stdin.is_some() { Stdio::piped() } else { Stdio::null() })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(cwd) = &invocation.cwd {
        command.current_dir(cwd);
    }
    let spawned = supervisor().spawn(command, SpawnOptions::default())?;
    let missing = || io::Error::other("a pipe is missing");
    let stdin = spawned.stdin.map(|p| pipe::Sender::from_owned_fd(p.into())).transpose()?;
    let stdout = receiver(spawned.stdout.ok_or_else(missing)?)?;
    let stderr = receiver(spawned.stderr.ok_or_else(missing)?)?;
    Ok(Spawned { job: spawned.job, stdin, stdout, stderr })
}

/// Kills a process group when dropped, unless disarmed after a clean exit.
struct GroupGuard(Option<Job>);

impl Drop for GroupGuard {
    fn drop(&mut self) {
        if let Some(job) = self.0.take() {
            let _ = job.signal_group(Signal::SIGKILL);
        }
    }
}

/// Runs `invocation` to its end.
///
/// # Errors
/// [`RunError::NotFound`], [`RunError::Timeout`] and [`RunError::TooMuchOutput`]
/// (after killing the process group), [`RunError::Io`].
pub async fn run(invocation: Invocation) -> Result<Finished, RunError> {
    let spawned = spawn(&invocation).map_err(|e| match e.kind() {
        io::ErrorKind::NotFound => RunError::NotFound(e),
        _ => RunError::Io(e),
    })?;
    let mut guard = GroupGuard(Some(spawned.job.clone()));
    let Spawned { job, stdin, stdout, stderr } = spawned;
    let input = invocation.stdin.unwrap_or_default();
    let feed = async move {
        if let Some(mut pipe) = stdin {
            // A program that does not read its input is not an error.
            let _ = pipe.write_all(&input).await;
        }
        Ok::<(), RunError>(())
    };
    let max = invocation.max_output;
    let finish = async move {
        let (stdout, stderr_tail, ()) = tokio::try_join!(read_bounded(stdout, max), read_tail(stderr), feed)?;
        let exit = job.exited().await;
        Ok::<Finished, RunError>(Finished { exit, stdout, stderr_tail })
    };
    let finished = tokio::time::timeout(invocation.timeout, finish).await.map_err(|_| RunError::Timeout)??;
    // The leader is reaped; whatever it left behind in its group goes too.
    if let Some(job) = guard.0.take() {
        let _ = job.signal_group(Signal::SIGKILL);
    }
    Ok(finished)
}

async fn read_bounded(mut pipe: impl AsyncRead + Unpin, max: usize) -> Result<Vec<u8>, RunError> {
    let mut buffer = Vec::new();
    (&mut pipe).take(max as u64 + 1).read_to_end(&mut buffer).await?;
    if buffer.len() > max {
        return Err(RunError::TooMuchOutput(max));
    }
    Ok(buffer)
}

async fn read_tail(mut pipe: impl AsyncRead + Unpin) -> Result<Vec<u8>, RunError> {
    let mut tail = VecDeque::with_capacity(STDERR_TAIL);
    let mut chunk = [0u8; 4096];
    loop {
        let n = pipe.read(&mut chunk).await?;
        if n == 0 {
            return Ok(tail.into());
        }
        let overflow = (tail.len() + n).saturating_sub(STDERR_TAIL);
        tail.drain(..overflow.min(tail.len()));
        tail.extend(&chunk[n.saturating_sub(STDERR_TAIL)..n]);
    }
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
        }
    }

    #[tokio::test]
    async fn output_error_tail_and_exit_come_back() {
        let ran = run(invocation("printf out; printf err >&2; exit 3")).await.expect("runs");
        assert_eq!(
            (ran.stdout.as_slice(), ran.stderr_tail.as_slice(), ran.exit),
            (&b"out"[..], &b"err"[..], Exit::Exited(3))
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
    async fn overruns_missing_programs_and_floods_are_told_apart() {
        let mut slow = invocation("sleep 30");
        slow.timeout = Duration::from_millis(200);
        assert!(matches!(run(slow).await, Err(RunError::Timeout)));
        assert!(matches!(run(invocation("yes")).await, Err(RunError::TooMuchOutput(64))));
        let mut missing = invocation("");
        missing.argv = vec!["/nonexistent/program".into()];
        assert!(matches!(run(missing).await, Err(RunError::NotFound(_))));
    }
}
