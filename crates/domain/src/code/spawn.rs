//! The one place code execution starts interpreters of code contexts
//! (one-shot `/code/run` programs and `git` go through the process runner).
//!
//! Every child starts in its own process group (so a timeout or a delete
//! reaches its grandchildren too), with `/dev/null` as stdin, its stdout and
//! stderr on pipes, the environment it is given (the server's child
//! environment, never the server's secrets) and, for interpreters, two more
//! pipes at descriptors 3 (commands in) and 4 (events out).
//!
//! Children are spawned, reaped and signalled through the process
//! supervisor; their exit is learnt from its report.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io;
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::process::Stdio;

use command_fds::{CommandFdExt, FdMapping};
use nix::fcntl::OFlag;
use nix::sys::signal::Signal;

use crate::process::bounded::KillOnDrop;
use crate::process::{supervisor, ExitStatus, Job, SpawnOptions};

use super::pipe::{PipeReader, PipeWriter};

/// Descriptor on which an interpreter reads commands.
pub const CONTROL_FD: i32 = 3;
/// Descriptor on which an interpreter writes events.
pub const EVENTS_FD: i32 = 4;

/// What to start.
#[derive(Debug, Clone)]
pub struct SpawnSpec {
    /// The program (an absolute path, or a name looked up on the server's PATH).
    pub program: PathBuf,
    /// Its arguments.
    pub args: Vec<OsString>,
    /// Working directory.
    pub cwd: PathBuf,
    /// The complete environment.
    pub env: BTreeMap<String, String>,
    /// Whether to open the command and event pipes at descriptors 3 and 4.
    pub channels: bool,
    /// The user it runs as, `None`: the daemon's.
    pub run_as: Option<crate::syscalls::RunAs>,
}

/// The command and event pipes of an interpreter.
#[derive(Debug)]
pub struct Channels {
    /// Commands to the child (its descriptor 3).
    pub control: PipeWriter,
    /// Events from the child (its descriptor 4).
    pub events: PipeReader,
}

/// A started child and its pipes.
#[derive(Debug)]
pub struct Spawned {
    /// The process.
    pub process: Process,
    /// Its stdout.
    pub stdout: PipeReader,
    /// Its stderr.
    pub stderr: PipeReader,
    /// Its command and event pipes, when asked for.
    pub channels: Option<Channels>,
}

/// A started child process; dropping it kills its process group.
#[derive(Debug)]
pub struct Process {
    job: Job,
    _guard: KillOnDrop,
}

impl Process {
    /// The child's pid, which is also its process group id.
    pub fn pid(&self) -> i32 {
        self.job.pid()
    }

    /// Sends `signal` to the child's whole process group, unless it has exited.
    pub fn signal_group(&self, signal: Signal) {
        if self.job.status().is_some() {
            return;
        }
        if let Err(crate::process::reaper::SignalError::Os(e)) = self.job.signal_group(signal) {
            tracing::warn!(pid = self.job.pid(), %signal, error = %e, "cannot signal a process group");
        }
    }

    /// A handle that resolves when the child exits (cloneable, cancel-safe).
    pub fn exit_watch(&self) -> ExitWatch {
        ExitWatch(self.job.clone())
    }
}

/// Resolves when a child exits.
#[derive(Debug, Clone)]
pub struct ExitWatch(Job);

impl ExitWatch {
    /// Waits for the exit; cancel-safe.
    pub async fn exited(&mut self) -> ExitStatus {
        self.0.exited().await
    }
}

fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    nix::unistd::pipe2(OFlag::O_CLOEXEC).map_err(io::Error::from)
}

/// Starts a child as `spec` says.
///
/// # Errors
/// The program cannot be started (`NotFound`, `PermissionDenied`, an
/// argument list too long, a missing working directory, ...).
pub fn spawn(spec: SpawnSpec) -> io::Result<Spawned> {
    let (out_r, out_w) = pipe()?;
    let (err_r, err_w) = pipe()?;
    let mut command = std::process::Command::new(&spec.program);
    command
        .args(&spec.args)
        .current_dir(&spec.cwd)
        .env_clear()
        .envs(&spec.env)
        .stdin(Stdio::null())
        .stdout(Stdio::from(out_w))
        .stderr(Stdio::from(err_w));
    let parent_ends = if spec.channels {
        let (control_r, control_w) = pipe()?;
        let (events_r, events_w) = pipe()?;
        command
            .fd_mappings(vec![
                FdMapping { parent_fd: control_r, child_fd: CONTROL_FD },
                FdMapping { parent_fd: events_w, child_fd: EVENTS_FD },
            ])
            .map_err(|_| io::Error::other("descriptor mapping collision"))?;
        Some((control_w, events_r))
    } else {
        None
    };
    // The supervisor consumes the command, closing the child's ends of every
    // pipe here, so the pipes report end of file when the child and its
    // descendants are gone.
    let job = supervisor().spawn(command, SpawnOptions { credentials: spec.run_as, ..SpawnOptions::default() })?.job;
    let channels = match parent_ends {
        Some((control, events)) => {
            Some(Channels { control: PipeWriter::new(control)?, events: PipeReader::new(events)? })
        }
        None => None,
    };
    Ok(Spawned {
        process: Process { _guard: KillOnDrop::new(job.clone(), std::time::Duration::ZERO), job },
        stdout: PipeReader::new(out_r)?,
        stderr: PipeReader::new(err_r)?,
        channels,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(program: &str, args: &[&str]) -> SpawnSpec {
        SpawnSpec {
            program: program.into(),
            args: args.iter().map(OsString::from).collect(),
            cwd: std::env::temp_dir(),
            env: std::env::vars().filter(|(k, _)| k == "PATH").collect(),
            channels: false,
            run_as: None,
        }
    }

    #[tokio::test]
    async fn output_exit_and_group_kill() {
        let mut child = spawn(spec("sh", &["-c", "echo out; echo err >&2; exit 3"])).expect("spawn");
        let mut buf = [0u8; 64];
        let n = child.stdout.read(&mut buf).await.expect("read");
        assert_eq!(&buf[..n], b"out\n");
        let n = child.stderr.read(&mut buf).await.expect("read");
        assert_eq!(&buf[..n], b"err\n");
        assert_eq!(child.process.exit_watch().exited().await, ExitStatus::Exited(3));

        let child = spawn(spec("sh", &["-c", "sleep 30 & sleep 30"])).expect("spawn");
        child.process.signal_group(Signal::SIGKILL);
        assert_eq!(child.process.exit_watch().exited().await, ExitStatus::Signaled(9));
        assert_eq!(ExitStatus::Signaled(9).code(), -9);
        assert_eq!(ExitStatus::Signaled(9).to_string(), "signal 9 (SIGKILL)");
    }

    #[tokio::test]
    async fn channels_reach_descriptors_3_and_4() {
        let mut s = spec("sh", &["-c", "read line <&3; echo \"got $line\" >&4"]);
        s.channels = true;
        let mut child = spawn(s).expect("spawn");
        let channels = child.channels.as_mut().expect("channels");
        channels.control.write_all(b"ping\n").await.expect("write");
        let mut buf = [0u8; 64];
        let n = channels.events.read(&mut buf).await.expect("read");
        assert_eq!(&buf[..n], b"got ping\n");
    }

    #[test]
    fn a_missing_program_is_not_found() {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("rt");
        let err = rt.block_on(async { spawn(spec("/nonexistent/python", &[])).map(|_| ()) }).expect_err("missing");
        assert_eq!(err.kind(), io::ErrorKind::NotFound);
    }
}
