//! The terminal domain's only `unsafe`: the hook a shell runs between
//! `fork` and `exec` to get its own session with the pseudo-terminal as its
//! controlling terminal (so job control, `^C` and a `signal` to the
//! foreground process group work as in a real terminal).
//!
//! It also registers a terminal's master side with tokio's reactor, which
//! tokio marks `unsafe` (the descriptor must outlive the registration).
//!
//! When the process supervisor lands, both belong in its one `sys` module
//! (the hook as a "controlling terminal" option run right after `setsid`).
#![allow(unsafe_code)]

use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::process::CommandExt;
use std::process::Command;

use tokio::io::unix::AsyncFd;

/// Makes `command`'s child a session leader whose controlling terminal is
/// its standard input (which must be the terminal's slave side).
pub fn own_session_with_controlling_terminal(command: &mut Command) {
    let hook = || -> io::Result<()> {
        rustix::process::setsid()?;
        rustix::process::ioctl_tiocsctty(rustix::stdio::stdin())?;
        Ok(())
    };
    // SAFETY: the hook runs in the forked child of a multi-threaded process,
    // where only async-signal-safe calls are allowed. It captures nothing,
    // allocates nothing, and makes two raw system calls (setsid and the
    // TIOCSCTTY ioctl on fd 0, which std has already pointed at the slave);
    // errors are plain errno values, which do not allocate.
    unsafe {
        command.pre_exec(hook);
    }
}

/// Registers a terminal's master side with the runtime's reactor.
///
/// # Errors
/// The descriptor cannot be made non-blocking or registered.
pub fn register_master(master: OwnedFd) -> io::Result<AsyncFd<OwnedFd>> {
    rustix::io::ioctl_fionbio(&master, true)?;
    // SAFETY: `AsyncFd::register` needs the descriptor to stay open and
    // unchanged while registered. The `OwnedFd` is moved into the `AsyncFd`,
    // which is its only owner: nothing else can close or replace it, and it
    // is closed only when the `AsyncFd` (deregistering it first) is dropped.
    Ok(unsafe { AsyncFd::register(master) }?)
}
