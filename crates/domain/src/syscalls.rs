//! The only place with `unsafe`: what a child does between `fork` and
//! `exec`, and the pidfd that tells the daemon when a child exits.
//!
//! [`prepare_child`] installs one `pre_exec` hook that, in the forked child,
//! raises its `oom_score_adj` (so the kernel's OOM killer prefers the
//! workload to the daemon), restores the default action of any signal the
//! daemon itself inherited as ignored (see [`inherited_ignored`]),
//! optionally starts a new session (terminals), and
//! optionally drops to another user (supplementary groups, group, user, in
//! that order, after everything that needs root; then `no_new_privs` for a
//! policy identity's user). Everything the hook uses is
//! computed beforehand; the hook itself only makes system calls.
//! [`pidfd_open`] and [`readable_source`] let a task await a child's exit on
//! the runtime's epoll. [`tune_allocator`] bounds glibc's heap at start.
#![allow(unsafe_code)]

use std::io;
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::sync::OnceLock;

use nix::fcntl::{open, OFlag};
use nix::sys::signal::{sigaction, SaFlags, SigAction, SigHandler, SigSet, Signal};
use nix::sys::stat::Mode;
use nix::unistd::{setgid, setgroups, setsid, setuid, write, Gid, Uid};

/// The user a child runs as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunAs {
    /// User id.
    pub uid: Uid,
    /// Primary group id.
    pub gid: Gid,
    /// Supplementary groups.
    pub groups: Vec<Gid>,
    /// Also set `no_new_privs`, so no set-user-ID program or file capability
    /// can give the child back what dropping to this user took away (the
    /// user a policy identity runs as).
    pub no_new_privs: bool,
}

/// What a child sets up for itself before `exec`.
#[derive(Debug, Clone, Default)]
pub struct ChildSetup {
    /// Written to `/proc/self/oom_score_adj`; failures are ignored.
    pub oom_score_adj: Option<i32>,
    /// Become a session (and process group) leader, as a terminal's shell must.
    pub new_session: bool,
    /// After `setsid`, make standard input (a terminal's slave side) the
    /// controlling terminal, so job control and `^C` work as in a real terminal.
    pub controlling_terminal: bool,
    /// Drop to this user.
    pub credentials: Option<RunAs>,
    /// Be killed (SIGKILL) when the spawning thread's process dies, even by
    /// SIGKILL (the browser, which would otherwise outlive the daemon).
    pub die_with_parent: bool,
}

/// The signals whose action the daemon inherited as "ignored", which `exec`
/// would pass on to every child: a daemon started with `nohup` ignores
/// `SIGHUP`, and one started in the background by a script (`serve &`, as
/// start commands do) ignores `SIGINT` and `SIGQUIT`, so without a reset a
/// terminal's shell would not hang up on close and `SIGINT` sent to a process
/// would do nothing. Read once; the daemon's own handlers (`SIGTERM`,
/// `SIGINT`) are not "ignored" and are reset by `exec` anyway. `SIGPIPE` is
/// left out: Rust's runtime ignores it in every program, and std restores it
/// in each child itself (so a daemon started normally has nothing here and
/// keeps `posix_spawn`).
pub fn inherited_ignored() -> &'static [Signal] {
    static IGNORED: OnceLock<Vec<Signal>> = OnceLock::new();
    IGNORED.get_or_init(|| {
        Signal::iterator()
            .filter(|s| !matches!(s, Signal::SIGKILL | Signal::SIGSTOP | Signal::SIGPIPE))
            .filter(|s| {
                let mut old = std::mem::MaybeUninit::<nix::libc::sigaction>::zeroed();
                // SAFETY: a null new action only reads the current one into
                // `old`, which is valid, zeroed memory of the right type.
                let read = unsafe { nix::libc::sigaction(*s as i32, std::ptr::null(), old.as_mut_ptr()) };
                // SAFETY: sigaction filled `old` (it returned 0), and it was zeroed before.
                read == 0 && unsafe { old.assume_init() }.sa_sigaction == nix::libc::SIG_IGN
            })
            .collect()
    })
}

/// Installs `setup` as `command`'s pre-exec hook.
pub fn prepare_child(command: &mut Command, setup: ChildSetup) {
    let ignored = inherited_ignored();
    if setup.oom_score_adj.is_none()
        && !setup.new_session
        && setup.credentials.is_none()
        && !setup.die_with_parent
        && ignored.is_empty()
    {
        return;
    }
    let oom = setup.oom_score_adj.map(|value| {
        let text = value.to_string();
        let mut buf = [0u8; 16];
        let len = text.len().min(buf.len());
        buf[..len].copy_from_slice(&text.as_bytes()[..len]);
        (buf, len)
    });
    let new_session = setup.new_session;
    let controlling_terminal = setup.controlling_terminal;
    let credentials = setup.credentials;
    let die_with_parent = setup.die_with_parent;
    let hook = move || -> io::Result<()> {
        let default = SigAction::new(SigHandler::SigDfl, SaFlags::empty(), SigSet::empty());
        for signal in ignored {
            // SAFETY: the default action is no handler; sigaction is async-signal-safe.
            unsafe { sigaction(*signal, &default) }.map_err(io::Error::from)?;
        }
        if die_with_parent {
            nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL).map_err(io::Error::from)?;
        }
        if let Some((buf, len)) = &oom {
            // Best effort: without /proc or the privilege, the child keeps the daemon's value.
            if let Ok(fd) = open(c"/proc/self/oom_score_adj", OFlag::O_WRONLY | OFlag::O_CLOEXEC, Mode::empty()) {
                let _ = write(&fd, &buf[..*len]);
            }
        }
        if new_session {
            setsid().map_err(io::Error::from)?;
            if controlling_terminal {
                rustix::process::ioctl_tiocsctty(rustix::stdio::stdin())?;
            }
        }
        if let Some(c) = &credentials {
            setgroups(&c.groups).map_err(io::Error::from)?;
            setgid(c.gid).map_err(io::Error::from)?;
            setuid(c.uid).map_err(io::Error::from)?;
            if c.no_new_privs {
                nix::sys::prctl::set_no_new_privs().map_err(io::Error::from)?;
            }
        }
        Ok(())
    };
    // SAFETY: the hook runs in the forked child of a multi-threaded process,
    // where only async-signal-safe calls are allowed. It allocates nothing
    // (the value, path and credentials were prepared above) and only makes
    // the system calls sigaction, prctl(PR_SET_PDEATHSIG), open, write, close, setsid, the TIOCSCTTY ioctl on
    // fd 0 (which std has already pointed at the terminal), setgroups,
    // setgid, setuid and prctl(PR_SET_NO_NEW_PRIVS), all async-signal-safe. Errors are built from raw errno values,
    // which does not allocate.
    unsafe {
        command.pre_exec(hook);
    }
}

/// A pidfd for `pid` (Linux 5.3 and later): a descriptor that becomes
/// readable when the process exits, so its exit can be awaited with epoll on
/// the waiting thread. The caller must hold `pid` unreaped, so it names the
/// right process.
///
/// # Errors
/// The kernel's refusal (`ENOSYS` on old kernels, `ESRCH`).
pub fn pidfd_open(pid: i32) -> io::Result<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    // SAFETY: pidfd_open takes two integers (a pid and flags, none) and
    // returns a new descriptor or -1; no memory is shared with the kernel.
    let fd = unsafe { nix::libc::syscall(nix::libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    let fd = i32::try_from(fd).map_err(|_| io::Error::other("descriptor out of range"))?;
    // SAFETY: the kernel has just returned this descriptor; nothing else owns it.
    Ok(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) })
}

/// Registers an owned descriptor with the current tokio runtime for readability.
///
/// # Errors
/// No runtime on this thread, or epoll refuses the descriptor.
pub fn readable_source(fd: std::os::fd::OwnedFd) -> io::Result<tokio::io::unix::AsyncFd<std::os::fd::OwnedFd>> {
    tokio::runtime::Handle::try_current().map_err(io::Error::other)?;
    // SAFETY: the `AsyncFd` takes ownership of the `OwnedFd`, which keeps the
    // descriptor open, unchanged and returned by every `as_raw_fd` call until
    // the `AsyncFd` is dropped; a runtime is current (checked above).
    unsafe { tokio::io::unix::AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE) }
        .map_err(|e| e.into_parts().1)
}

/// Registers a terminal's master side with the runtime's reactor.
///
/// # Errors
/// The descriptor cannot be made non-blocking or registered.
pub fn register_master(master: std::os::fd::OwnedFd) -> io::Result<tokio::io::unix::AsyncFd<std::os::fd::OwnedFd>> {
    rustix::io::ioctl_fionbio(&master, true)?;
    // SAFETY: `AsyncFd::register` needs the descriptor to stay open and
    // unchanged while registered. The `OwnedFd` is moved into the `AsyncFd`,
    // which is its only owner: nothing else can close or replace it, and it
    // is closed only when the `AsyncFd` (deregistering it first) is dropped.
    Ok(unsafe { tokio::io::unix::AsyncFd::register(master) }?)
}

/// Bounds glibc's heap for a long-running daemon with many threads: at most
/// two malloc arenas (glibc otherwise adds one per contending thread, up to
/// eight per core, and each keeps what it ever held), and blocks of 128 KiB
/// or more mapped and unmapped on their own (glibc otherwise raises that
/// threshold each time such a block is freed, after which those blocks stay
/// in the arenas). A soak measured RSS going from 42 to 95 MiB after a load
/// spike and staying there, held by 13 arenas; see docs/RELIABILITY.md.
/// `MALLOC_ARENA_MAX` and `MALLOC_MMAP_THRESHOLD_` in the environment win.
/// Nothing to do elsewhere (the static musl build uses mimalloc).
pub fn tune_allocator() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        use nix::libc::{mallopt, M_ARENA_MAX, M_MMAP_THRESHOLD};
        if std::env::var_os("MALLOC_ARENA_MAX").is_none() {
            // SAFETY: mallopt only sets allocator parameters, and it is called
            // before the runtime starts its threads.
            unsafe { mallopt(M_ARENA_MAX, 2) };
        }
        if std::env::var_os("MALLOC_MMAP_THRESHOLD_").is_none() {
            // SAFETY: as above.
            unsafe { mallopt(M_MMAP_THRESHOLD, 128 * 1024) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The test harness, like the daemon, runs with Rust's ignored `SIGPIPE`
    /// and nothing else ignored: the list is empty, so spawning keeps `posix_spawn`.
    #[test]
    fn a_normally_started_process_has_no_inherited_ignores_to_reset() {
        assert!(!inherited_ignored().contains(&Signal::SIGPIPE));
    }
}
