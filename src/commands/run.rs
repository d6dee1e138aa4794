//! The one place a registered command's program is started and run to
//! completion: its own process group, the child environment, optional JSON
//! on stdin, bounded standard output, the tail of standard error, a
//! wall-clock limit, and the whole group killed on overrun or when the
//! caller goes away.
//!
//! It uses `tokio::process` for now; when the process supervisor lands,
//! [`spawn`] is the only function to switch over (its exit watch replaces
//! the `wait` below).

use std::collections::{BTreeMap, VecDeque};
use std::io;
use std::path::PathBuf;
use std::pin::Pin;
use std::process::Stdio;
use std::time::Duration;

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};

/// Bytes of standard error kept (the end of it).
pub const STDERR_TAIL: usize = 8 * 1024;

/// How a program ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// It called `exit` with this code.
    Exited(i32),
    /// A signal killed it.
    Signaled(i32),
}

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

type ExitFuture = Pin<Box<dyn std::future::Future<Output = io::Result<Exit>> + Send>>;

/// A started program.
struct Spawned {
    pgid: Pid,
    stdin: Option<tokio::process::ChildStdin>,
    stdout: tokio::process::ChildStdout,
    stderr: tokio::process::ChildStderr,
    exit: ExitFuture,
}

/// Starts `invocation`'s program in its own process group with piped stdio.
fn spawn(invocation: &Invocation) -> io::Result<Spawned> {
    use std::os::unix::process::CommandExt;
    let (program, args) = invocation.argv.split_first().ok_or_else(|| io::Error::other("empty argv"))?;
    let mut command = std::process::Command::new(program);
    command
        .args(args)
        .env_clear()
        .envs(&invocation.env)
        .stdin(if invocation.stdin.is_some() { Stdio::piped() } else { Stdio::null() })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    if let Some(cwd) = &invocation.cwd {
        command.current_dir(cwd);
    }
    let mut child = tokio::process::Command::from(command).kill_on_drop(false).spawn()?;
    let pid = child.id().and_then(|id| i32::try_from(id).ok()).ok_or_else(|| io::Error::other("no pid"))?;
    let missing = || io::Error::other("a pipe is missing");
    let stdin = child.stdin.take();
    let stdout = child.stdout.take().ok_or_else(missing)?;
    let stderr = child.stderr.take().ok_or_else(missing)?;
    let exit = Box::pin(async move {
        use std::os::unix::process::ExitStatusExt;
        let status = child.wait().await?;
        Ok(match (status.code(), status.signal()) {
            (Some(code), _) => Exit::Exited(code),
            (None, Some(signal)) => Exit::Signaled(signal),
            (None, None) => Exit::Exited(-1),
        })
    });
    Ok(Spawned { pgid: Pid::from_raw(pid), stdin, stdout, stderr, exit })
}

/// Kills a process group when dropped, unless disarmed after a clean exit.
struct GroupGuard(Option<Pid>);

impl Drop for GroupGuard {
    fn drop(&mut self) {
        if let Some(group) = self.0.take() {
            let _ = killpg(group, Signal::SIGKILL);
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
    let mut guard = GroupGuard(Some(spawned.pgid));
    let Spawned { stdin, stdout, stderr, exit, .. } = spawned;
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
        let exit = exit.await?;
        Ok::<Finished, RunError>(Finished { exit, stdout, stderr_tail })
    };
    let finished = tokio::time::timeout(invocation.timeout, finish).await.map_err(|_| RunError::Timeout)??;
    // The leader is reaped; whatever it left behind in its group goes too.
    if let Some(group) = guard.0.take() {
        let _ = killpg(group, Signal::SIGKILL);
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
