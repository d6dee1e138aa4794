//! The one bounded runner: starts a program through the supervisor, feeds
//! its stdin, collects its output within limits, and ends when the
//! program does. Every run-to-completion of the daemon goes through
//! [`run`]: `/shell`, registered commands, `/code/run` and git, and the
//! system probes.
//!
//! - **Bounded.** Each stream keeps what its [`Keep`] says (its first bytes,
//!   failing or truncating past them, or its last bytes) and the rest is
//!   read and dropped, so the program never blocks on a full pipe and
//!   memory stays flat. A wall-clock limit ends the run.
//! - **The program, not its pipes.** A background descendant that inherits
//!   stdout (`sleep 40 & echo started`) keeps the pipes open after the
//!   program exits. The run ends at the program's exit: what is in the
//!   pipes then, and what arrives until they have been quiet for
//!   [`QUIET_AFTER_EXIT`] (at most [`DRAIN_AFTER_EXIT`]), is the output.
//!   Then the process group is killed ([`AfterExit::KillGroup`]) or left to
//!   run on (`/shell`, whose users start daemons with `cmd &`).
//! - **One kill guard.** [`KillOnDrop`] ends a group whose run is
//!   abandoned (the caller's future is dropped); a timeout or an output
//!   overrun terminates the group before the run returns.

use std::io;
use std::process::{Command, Stdio};
use std::time::Duration;

use abx_wire::codec::utf8::complete_len;
use nix::sys::signal::Signal;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::unix::pipe;
use tokio::time::Instant;

use super::reaper::{supervisor, ExitStatus, Job, SpawnOptions};
use super::receiver;

/// How long a terminated group gets between SIGTERM and SIGKILL.
pub const KILL_GRACE: Duration = Duration::from_secs(2);
/// Once the program exited, a pipe a descendant still holds is read until it is quiet this long...
pub const QUIET_AFTER_EXIT: Duration = Duration::from_millis(100);
/// ...or for this long at most.
pub const DRAIN_AFTER_EXIT: Duration = Duration::from_secs(1);
const READ_CHUNK: usize = 16 * 1024;

/// Ends a job's whole process group when dropped while armed: with
/// SIGKILL at once for a zero grace, else SIGTERM then SIGKILL after the
/// grace (in a task of the runtime; SIGKILL at once outside one).
#[derive(Debug)]
pub struct KillOnDrop {
    job: Option<Job>,
    grace: Duration,
}

impl KillOnDrop {
    /// Armed for `job`, ending it with `grace` between SIGTERM and SIGKILL.
    pub fn new(job: Job, grace: Duration) -> Self {
        KillOnDrop { job: Some(job), grace }
    }

    /// The job this guard ends, while armed.
    pub fn job(&self) -> Option<&Job> {
        self.job.as_ref()
    }

    /// Nothing to end any more.
    pub fn disarm(&mut self) {
        self.job = None;
    }
}

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let Some(job) = self.job.take() else { return };
        if !self.grace.is_zero() {
            if let Ok(handle) = tokio::runtime::Handle::try_current() {
                let grace = self.grace;
                handle.spawn(async move { job.terminate(grace).await });
                return;
            }
        }
        let _ = job.signal_group(Signal::SIGKILL);
    }
}

/// What a run keeps of one output stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Keep {
    /// Nothing: the stream is `/dev/null`.
    Nothing,
    /// The first bytes; past them the run fails with [`RunError::TooMuchOutput`].
    Head(usize),
    /// The first bytes, cut at a character boundary; the rest is dropped.
    Truncate(usize),
    /// The last bytes.
    Tail(usize),
}

/// What happens to the process group once the program has exited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AfterExit {
    /// Whatever the program left running in its group is killed.
    KillGroup,
    /// Descendants run on (`/shell`: `server &` starts a server).
    LeaveGroup,
}

/// How to run a program.
#[derive(Debug, Clone)]
pub struct Bounds {
    /// Written to stdin, then closed (`None`: stdin is `/dev/null`).
    pub stdin: Option<Vec<u8>>,
    /// What to keep of stdout.
    pub stdout: Keep,
    /// What to keep of stderr.
    pub stderr: Keep,
    /// Wall-clock limit.
    pub timeout: Option<Duration>,
    /// Between SIGTERM and SIGKILL when a timeout, an overrun or an abandoned run ends the group.
    pub grace: Duration,
    /// What happens to the group at the program's exit.
    pub after_exit: AfterExit,
    /// How the supervisor sets the child up.
    pub spawn: SpawnOptions,
}

impl Bounds {
    /// Stdin closed, both streams truncated at `max`, no time limit, the group killed after the exit.
    pub fn new(max: usize) -> Self {
        Bounds {
            stdin: None,
            stdout: Keep::Truncate(max),
            stderr: Keep::Truncate(max),
            timeout: None,
            grace: Duration::ZERO,
            after_exit: AfterExit::KillGroup,
            spawn: SpawnOptions::default(),
        }
    }
}

/// What a program that ran to its exit left.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ran {
    /// How it exited.
    pub status: ExitStatus,
    /// What was kept of stdout.
    pub stdout: Vec<u8>,
    /// What was kept of stderr.
    pub stderr: Vec<u8>,
    /// Whether a [`Keep::Truncate`] stream was cut.
    pub truncated: bool,
}

/// Why a run has no result.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The program could not be started.
    #[error("cannot run: {0}")]
    Spawn(#[source] io::Error),
    /// It ran past its time limit; its group was terminated.
    #[error("timed out")]
    Timeout,
    /// A [`Keep::Head`] stream wrote more than this; its group was terminated.
    #[error("wrote more than {0} bytes")]
    TooMuchOutput(usize),
    /// A pipe could not be set up or read.
    #[error("cannot run: {0}")]
    Io(#[from] io::Error),
}

impl RunError {
    /// Whether the program (or the working directory) does not exist.
    pub fn is_not_installed(&self) -> bool {
        matches!(self, RunError::Spawn(e) if e.kind() == io::ErrorKind::NotFound)
    }
}

/// One output stream being collected.
struct Sink {
    pipe: Option<pipe::Receiver>,
    keep: Keep,
    kept: Vec<u8>,
    cut: bool,
}

impl Sink {
    fn new(pipe: Option<pipe::Receiver>, keep: Keep) -> Self {
        Sink { pipe, keep, kept: Vec::new(), cut: false }
    }

    /// Keeps what `keep` says of `bytes`; `Err` with the limit a [`Keep::Head`] overran.
    fn push(&mut self, bytes: &[u8]) -> Result<(), usize> {
        match self.keep {
            Keep::Nothing => {}
            Keep::Head(max) | Keep::Truncate(max) => {
                let room = max.saturating_sub(self.kept.len());
                self.kept.extend_from_slice(&bytes[..bytes.len().min(room)]);
                if bytes.len() > room {
                    if matches!(self.keep, Keep::Head(_)) {
                        return Err(max);
                    }
                    self.cut = true;
                }
            }
            Keep::Tail(max) => {
                self.kept.extend_from_slice(&bytes[bytes.len().saturating_sub(max)..]);
                let excess = self.kept.len().saturating_sub(max);
                self.kept.drain(..excess);
            }
        }
        Ok(())
    }

    /// The kept bytes; a cut stream never ends inside a character.
    fn finish(mut self) -> (Vec<u8>, bool) {
        if self.cut {
            // The incomplete character the cut left at the end is dropped.
            let end = complete_len(&self.kept);
            self.kept.truncate(end);
        }
        (self.kept, self.cut)
    }
}

/// Reads what `sink`'s pipe has, waiting for it; `Ok(0)` at its end. Once
/// `exited_at` is set, a pipe that stays quiet counts as ended.
async fn read(sink: &mut Sink, buf: &mut [u8], exited_at: Option<Instant>) -> io::Result<usize> {
    let Some(pipe) = sink.pipe.as_mut() else { return std::future::pending().await };
    match exited_at {
        None => pipe.read(buf).await,
        Some(at) => {
            let quiet = (Instant::now() + QUIET_AFTER_EXIT).min(at + DRAIN_AFTER_EXIT);
            tokio::time::timeout_at(quiet, pipe.read(buf)).await.unwrap_or(Ok(0))
        }
    }
}

/// Runs `command` (program, arguments, environment and directory set; its
/// stdio is set here) as `bounds` say.
///
/// # Errors
/// [`RunError::Spawn`] when it cannot start; [`RunError::Timeout`] and
/// [`RunError::TooMuchOutput`] once its group is terminated.
pub async fn run(mut command: Command, bounds: Bounds) -> Result<Ran, RunError> {
    let piped = |keep: Keep| if keep == Keep::Nothing { Stdio::null() } else { Stdio::piped() };
    command
        .stdin(if bounds.stdin.is_some() { Stdio::piped() } else { Stdio::null() })
        .stdout(piped(bounds.stdout))
        .stderr(piped(bounds.stderr));
    let spawned = supervisor().spawn(command, bounds.spawn.clone()).map_err(RunError::Spawn)?;
    let job = spawned.job;
    let mut guard = KillOnDrop::new(job.clone(), bounds.grace);
    let stdin = spawned.stdin.map(|fd| pipe::Sender::from_owned_fd(fd.into())).transpose()?;
    let mut out = Sink::new(spawned.stdout.map(receiver).transpose()?, bounds.stdout);
    let mut err = Sink::new(spawned.stderr.map(receiver).transpose()?, bounds.stderr);
    let input = bounds.stdin.unwrap_or_default();
    let feed = async move {
        if let Some(mut pipe) = stdin {
            // A program that does not read its input is not an error.
            let _ = pipe.write_all(&input).await;
        }
    };
    tokio::pin!(feed);
    let mut fed = false;
    let deadline = bounds.timeout.map(|limit| Instant::now() + limit);
    let timer = tokio::time::sleep_until(deadline.unwrap_or_else(|| Instant::now() + Duration::from_secs(1 << 30)));
    tokio::pin!(timer);
    let (mut out_buf, mut err_buf) = (vec![0u8; READ_CHUNK], vec![0u8; READ_CHUNK]);
    let mut status = None;
    let mut exited_at = None;
    let overran = loop {
        if status.is_some() && out.pipe.is_none() && err.pipe.is_none() {
            break None;
        }
        let (which, read_n) = tokio::select! {
            n = read(&mut out, &mut out_buf, exited_at) => (0, n),
            n = read(&mut err, &mut err_buf, exited_at) => (1, n),
            exit = job.exited(), if status.is_none() => {
                status = Some(exit);
                exited_at = Some(Instant::now());
                continue;
            }
            () = &mut feed, if !fed => {
                fed = true;
                continue;
            }
            () = &mut timer, if status.is_none() => {
                job.terminate(bounds.grace).await;
                guard.disarm();
                return Err(RunError::Timeout);
            }
        };
        let (sink, buf) = if which == 0 { (&mut out, &out_buf) } else { (&mut err, &err_buf) };
        match read_n {
            Ok(n @ 1..) => {
                if let Err(limit) = sink.push(&buf[..n]) {
                    break Some(limit);
                }
            }
            Ok(_) | Err(_) => sink.pipe = None,
        }
    };
    if let Some(limit) = overran {
        job.terminate(bounds.grace).await;
        guard.disarm();
        return Err(RunError::TooMuchOutput(limit));
    }
    let status = status.unwrap_or(ExitStatus::Signaled(Signal::SIGKILL as i32));
    guard.disarm();
    if bounds.after_exit == AfterExit::KillGroup {
        // The leader is reaped; whatever it left behind in its group goes too.
        let _ = job.signal_group(Signal::SIGKILL);
    }
    let ((stdout, out_cut), (stderr, err_cut)) = (out.finish(), err.finish());
    Ok(Ran { status, stdout, stderr, truncated: out_cut || err_cut })
}

/// `command` run with a timeout and everything else at its default, for tests.
#[cfg(test)]
pub(crate) async fn run_sh(script: &str, bounds: Bounds) -> Result<Ran, RunError> {
    let mut command = Command::new("/bin/sh");
    command.args(["-c", script]).env_clear().env("PATH", "/usr/bin:/bin");
    run(command, bounds).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bounds(max: usize) -> Bounds {
        Bounds { timeout: Some(Duration::from_secs(20)), ..Bounds::new(max) }
    }

    #[tokio::test]
    async fn output_status_and_stdin() {
        let ran = run_sh("cat; printf err >&2; exit 3", Bounds { stdin: Some(b"in".to_vec()), ..bounds(64) })
            .await
            .expect("runs");
        assert_eq!(
            ran,
            Ran { status: ExitStatus::Exited(3), stdout: b"in".to_vec(), stderr: b"err".to_vec(), truncated: false }
        );
    }

    #[tokio::test]
    async fn each_stream_is_kept_as_asked() {
        let script = "printf 'abé0123'; printf 0123456789 >&2";
        let ran = run_sh(script, Bounds { stderr: Keep::Tail(4), ..bounds(3) }).await.expect("runs");
        assert_eq!((ran.stdout.as_slice(), ran.stderr.as_slice(), ran.truncated), (&b"ab"[..], &b"6789"[..], true));
        let flood = run_sh("yes", Bounds { stdout: Keep::Head(4096), ..bounds(0) }).await;
        assert!(matches!(flood, Err(RunError::TooMuchOutput(4096))), "{flood:?}");
        let quiet = run_sh("echo hidden", Bounds { stdout: Keep::Nothing, ..bounds(8) }).await.expect("runs");
        assert!(quiet.stdout.is_empty());
    }

    #[tokio::test]
    async fn the_exit_ends_the_run_and_its_group_is_killed() {
        let dir = tempfile::tempdir().expect("tmp");
        let started = Instant::now();
        let script = "sleep 40 & echo $! > bg; echo started";
        let mut command = Command::new("/bin/sh");
        command.args(["-c", script]).current_dir(dir.path());
        let ran = run(command, bounds(64)).await.expect("runs");
        assert_eq!((ran.stdout.as_slice(), ran.status), (&b"started\n"[..], ExitStatus::Exited(0)));
        assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());
        let pid: i32 = std::fs::read_to_string(dir.path().join("bg")).expect("pid").trim().parse().expect("pid");
        assert!(gone(pid).await, "the background sleep was killed with the group");
    }

    #[tokio::test]
    async fn a_group_left_to_run_on_survives_the_exit() {
        let dir = tempfile::tempdir().expect("tmp");
        let mut command = Command::new("/bin/sh");
        command.args(["-c", "sleep 40 & echo $! > bg; echo started"]).current_dir(dir.path());
        let ran = run(command, Bounds { after_exit: AfterExit::LeaveGroup, ..bounds(64) }).await.expect("runs");
        assert_eq!(ran.stdout, b"started\n");
        let pid = nix::unistd::Pid::from_raw(
            std::fs::read_to_string(dir.path().join("bg")).expect("pid").trim().parse().expect("pid"),
        );
        assert!(nix::sys::signal::kill(pid, None).is_ok(), "still running");
        let _ = nix::sys::signal::killpg(nix::unistd::getpgid(Some(pid)).expect("group"), Signal::SIGKILL);
    }

    #[tokio::test]
    async fn a_timeout_terminates_the_group() {
        let dir = tempfile::tempdir().expect("tmp");
        let mut command = Command::new("/bin/sh");
        command.args(["-c", "sleep 30 & echo $! > bg; wait"]).current_dir(dir.path());
        let slow = run(command, Bounds { timeout: Some(Duration::from_millis(300)), ..Bounds::new(64) }).await;
        assert!(matches!(slow, Err(RunError::Timeout)), "{slow:?}");
        let pid: i32 = std::fs::read_to_string(dir.path().join("bg")).expect("pid").trim().parse().expect("pid");
        assert!(gone(pid).await);
        let missing = run(Command::new("/nonexistent/program"), bounds(8)).await;
        assert!(matches!(missing, Err(RunError::Spawn(e)) if e.kind() == io::ErrorKind::NotFound));
    }

    /// Whether `pid` (not our child: no exit to await) is dead or a zombie within 5 s.
    async fn gone(pid: i32) -> bool {
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let state = stat.rsplit(") ").next().and_then(|rest| rest.chars().next());
            if matches!(state, None | Some('Z') | Some('X')) {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        false
    }
}
