//! The one place a terminal's shell is started: a fresh pseudo-terminal
//! pair, the shell on its slave side as a session leader with it as its
//! controlling terminal, and a future that resolves to the shell's exit.
//!
//! Both ends are opened close-on-exec, so no other child the daemon starts
//! meanwhile inherits them (a stray slave would keep the terminal open
//! after the shell exits). The shell is spawned, reaped and signalled
//! through the process supervisor like every other child.

use std::collections::BTreeMap;
use std::fs::OpenOptions;
use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::pin::Pin;
use std::process::{Command, Stdio};

use rustix::pty::OpenptFlags;

use crate::process::{supervisor, ExitStatus, Job, SpawnOptions};
use rustix::termios::Winsize;

/// Resolves when the shell has exited (and was reaped).
pub type ExitFuture = Pin<Box<dyn std::future::Future<Output = ExitStatus> + Send>>;

/// A started shell.
pub struct SpawnedShell {
    /// Its pid, also its process group and session id.
    pub pid: i32,
    /// The terminal's master side (close-on-exec, blocking).
    pub master: OwnedFd,
    /// Its exit.
    pub exit: ExitFuture,
    /// The supervisor's handle, to signal its group only while that is safe.
    pub job: Job,
}

/// What to start.
#[derive(Debug, Clone)]
pub struct ShellSpec<'a> {
    /// Absolute path of the shell.
    pub shell: &'a str,
    /// Its arguments.
    pub args: &'a [String],
    /// Its complete environment.
    pub env: &'a BTreeMap<String, String>,
    /// Its working directory, if any.
    pub cwd: Option<&'a Path>,
    /// Terminal width.
    pub cols: u16,
    /// Terminal height.
    pub rows: u16,
    /// Run as another user (the server must be root); `None`: the server's user.
    pub credentials: Option<crate::syscalls::RunAs>,
}

/// Opens a pseudo-terminal sized `cols` x `rows` and starts the shell on it.
///
/// # Errors
/// The terminal cannot be opened, or the shell cannot be started
/// ([`io::ErrorKind::NotFound`] when it is not installed).
pub fn spawn_shell(spec: &ShellSpec<'_>) -> io::Result<SpawnedShell> {
    let master = rustix::pty::openpt(OpenptFlags::RDWR | OpenptFlags::NOCTTY | OpenptFlags::CLOEXEC)?;
    rustix::pty::grantpt(&master)?;
    rustix::pty::unlockpt(&master)?;
    let name = rustix::pty::ptsname(&master, Vec::new())?;
    let path = std::ffi::OsStr::from_bytes(name.as_bytes());
    // std opens close-on-exec; NOCTTY keeps the daemon from acquiring it.
    let slave: OwnedFd = OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(rustix::fs::OFlags::NOCTTY.bits() as i32)
        .open(path)?
        .into();
    let size = Winsize { ws_row: spec.rows, ws_col: spec.cols, ws_xpixel: 0, ws_ypixel: 0 };
    rustix::termios::tcsetwinsize(&slave, size)?;

    let mut command = Command::new(spec.shell);
    command
        .args(spec.args)
        .env_clear()
        .envs(spec.env)
        .stdin(Stdio::from(slave.try_clone()?))
        .stdout(Stdio::from(slave.try_clone()?))
        .stderr(Stdio::from(slave));
    if let Some(cwd) = spec.cwd {
        command.current_dir(cwd);
    }
    let options = SpawnOptions {
        new_session: true,
        controlling_terminal: true,
        credentials: spec.credentials.clone(),
        ..SpawnOptions::default()
    };
    let spawned = supervisor().spawn(command, options)?;
    // The command (and its copies of the slave) is gone: only the shell holds the slave now.
    let pid = spawned.job.pid();
    let job = spawned.job;
    let waiter = job.clone();
    let exit = Box::pin(async move { waiter.exited().await });
    Ok(SpawnedShell { pid, master, exit, job })
}
