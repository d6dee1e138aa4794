//! The reaper: the one owner of child exit statuses in this daemon.
//!
//! A child's exit is reaped under the table lock with `waitpid(pid, WNOHANG)`
//! and its status handed to whoever registered the pid. Three rules make
//! this race-free:
//!
//! - [`Supervisor::spawn`] holds the table lock from before `fork` until the
//!   new pid is registered, so an exit can never be reaped before someone is
//!   listening for it (and std's own wait on a failed `exec` never loses its
//!   child to us).
//! - Reaping happens only under the table lock, and signals are sent only
//!   under it to pids still registered, so a signal can never reach a
//!   recycled pid: an unreaped pid (running or zombie) cannot be reused.
//! - Unregistered pids are reaped too: orphans reparented to the daemon (it
//!   is a child subreaper, or PID 1 in a container) never linger as zombies.
//!
//! Who waits: whoever awaits [`Job::exited`] learns of the exit on the
//! child's pidfd (opened lazily, under the lock, while the pid is unreaped)
//! through the runtime's own epoll, and reaps it then; a run that saw its
//! pipes close reaps it at once, without waiting at all. The reaper thread
//! is then only a sweeper: every [`IDLE_POLL`] it reaps whatever zombie is
//! left (a reparented orphan, a child nobody awaits), so no exit wakes it
//! and no spawn has to. On a kernel without pidfds (before 5.3, or a seccomp
//! filter refusing them) it falls back to blocking in `waitid(P_ALL,
//! WEXITED | WNOWAIT)` and reaping each exit as it happens, sleeping until a
//! spawn wakes it while there is no child.
//! Nothing else in the daemon may wait for a child (`.clippy.toml` forbids it).

use std::collections::HashMap;
use std::io;
use std::process::{ChildStderr, ChildStdin, ChildStdout, Command};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::Duration;

use nix::errno::Errno;
use nix::sys::signal::{kill, killpg, Signal};
use nix::sys::wait::{WaitPidFlag, WaitStatus};
use nix::unistd::Pid;
use std::os::fd::OwnedFd;

use tokio::io::unix::AsyncFd;
use tokio::sync::watch;

use crate::syscalls::{self, ChildSetup, RunAs};

/// How a child ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitStatus {
    /// It called `exit` with this code.
    Exited(i32),
    /// A signal killed it.
    Signaled(i32),
}

impl ExitStatus {
    /// The code the wire reports: the exit code, or minus the signal number
    /// for a signal-killed process (as the reference, after Python's `returncode`).
    pub fn code(self) -> i32 {
        match self {
            ExitStatus::Exited(code) => code,
            ExitStatus::Signaled(signal) => -signal,
        }
    }

    /// Whether it exited with code 0.
    pub fn success(self) -> bool {
        self == ExitStatus::Exited(0)
    }

    /// The signal that killed it, if one did.
    pub fn signal(self) -> Option<i32> {
        match self {
            ExitStatus::Exited(_) => None,
            ExitStatus::Signaled(signal) => Some(signal),
        }
    }
}

impl std::fmt::Display for ExitStatus {
    /// `exit status 3`, or `signal 9 (SIGKILL)`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            ExitStatus::Exited(code) => write!(f, "exit status {code}"),
            ExitStatus::Signaled(signal) => match Signal::try_from(signal) {
                Ok(named) => write!(f, "signal {signal} ({})", named.as_str()),
                Err(_) => write!(f, "signal {signal}"),
            },
        }
    }
}

/// How a child is set up besides its command.
#[derive(Debug, Clone, Default)]
pub struct SpawnOptions {
    /// Start a new session instead of only a new process group (terminals).
    pub new_session: bool,
    /// With `new_session`: make standard input, a terminal's slave side, the
    /// session's controlling terminal.
    pub controlling_terminal: bool,
    /// Run as this user (needs root).
    pub credentials: Option<RunAs>,
    /// The child's `oom_score_adj` (default: [`CHILD_OOM_SCORE_ADJ`]).
    pub oom_score_adj: Option<i32>,
    /// Kill the child when the daemon dies, even by SIGKILL (its spawning
    /// thread must live as long as the daemon: a runtime worker does).
    pub die_with_parent: bool,
}

/// How often the reaper sweeps for zombies nobody awaits (reparented
/// orphans); without pidfds, the longest it sleeps while there is no child.
pub const IDLE_POLL: Duration = Duration::from_secs(1);

/// `oom_score_adj` of children: the kernel kills the workload before the daemon.
pub const CHILD_OOM_SCORE_ADJ: i32 = 500;
/// `oom_score_adj` the daemon gives itself where it has the privilege.
pub const DAEMON_OOM_SCORE_ADJ: i32 = -900;

/// A started child: its ids, its pipes, and the [`Job`] that controls it.
#[derive(Debug)]
pub struct Spawned {
    /// The job (pid, group, exit).
    pub job: Job,
    /// Its stdin, when piped.
    pub stdin: Option<ChildStdin>,
    /// Its stdout, when piped.
    pub stdout: Option<ChildStdout>,
    /// Its stderr, when piped.
    pub stderr: Option<ChildStderr>,
}

struct Registered {
    pgid: i32,
    exit: watch::Sender<Option<ExitStatus>>,
}

#[derive(Default)]
struct Table {
    children: HashMap<i32, Registered>,
    /// Bumped on every spawn, so the idle reaper never misses one.
    generation: u64,
}

/// The process-wide child supervisor; see the module documentation.
pub struct Supervisor {
    table: Mutex<Table>,
    wake: Condvar,
    /// Whether the kernel hands out pidfds: exits are then awaited on them
    /// and the reaper thread only sweeps.
    pidfds: bool,
}

impl std::fmt::Debug for Supervisor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Supervisor").finish_non_exhaustive()
    }
}

static SUPERVISOR: OnceLock<Supervisor> = OnceLock::new();

/// The daemon's supervisor; the first call starts the reaper thread and,
/// unless the daemon is PID 1, makes it a child subreaper.
pub fn supervisor() -> &'static Supervisor {
    static THREAD: std::sync::Once = std::sync::Once::new();
    let supervisor = SUPERVISOR.get_or_init(|| {
        if std::process::id() != 1 {
            if let Err(e) = nix::sys::prctl::set_child_subreaper(true) {
                tracing::warn!(error = %e, "cannot become a child subreaper; orphans of children go to init");
            }
        }
        // One probe decides how exits are awaited for the daemon's lifetime.
        let pidfds = syscalls::pidfd_open(nix::unistd::getpid().as_raw()).is_ok();
        if !pidfds {
            tracing::info!("no pidfds; the reaper thread waits for every exit");
        }
        Supervisor { table: Mutex::new(Table::default()), wake: Condvar::new(), pidfds }
    });
    THREAD.call_once(|| {
        let spawned = std::thread::Builder::new().name("abx-reaper".into()).spawn(move || supervisor.reap_forever());
        if let Err(e) = spawned {
            tracing::error!(error = %e, "cannot start the reaper thread");
        }
    });
    supervisor
}

/// Sets the daemon's own `oom_score_adj`, where it has the privilege.
pub fn protect_daemon_from_oom() {
    match std::fs::write("/proc/self/oom_score_adj", DAEMON_OOM_SCORE_ADJ.to_string()) {
        Ok(()) => tracing::debug!(value = DAEMON_OOM_SCORE_ADJ, "daemon oom_score_adj set"),
        Err(e) => tracing::debug!(error = %e, "daemon oom_score_adj unchanged (no privilege)"),
    }
}

impl Supervisor {
    fn lock(&self) -> MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Spawns `command` in a new process group (or session) and registers it.
    ///
    /// Like `tokio::process`, this spawns on the calling thread and returns
    /// once the child has called `exec`. Without a new session, another
    /// user or a signal to reset there is no pre-exec hook, so std uses `posix_spawn` (a vfork:
    /// no page tables copied), which is why the program should be an absolute
    /// path (a `PATH` search in a custom environment makes std fork instead).
    /// The caller sets the program, arguments, environment, directory and
    /// stdio; nothing else may set the process group.
    ///
    /// # Errors
    /// The errors of [`Command::spawn`] (missing program, bad directory, ...).
    pub fn spawn(&'static self, mut command: Command, options: SpawnOptions) -> io::Result<Spawned> {
        use std::os::unix::process::CommandExt;
        if !options.new_session {
            command.process_group(0);
        }
        let oom_score_adj = options.oom_score_adj.unwrap_or(CHILD_OOM_SCORE_ADJ);
        // A daemon that inherited ignored signals resets them in the child (see
        // `syscalls::inherited_ignored`), which needs the hook too.
        let hook = options.new_session
            || options.credentials.is_some()
            || options.die_with_parent
            || !syscalls::inherited_ignored().is_empty();
        if hook {
            let setup = ChildSetup {
                oom_score_adj: Some(oom_score_adj),
                new_session: options.new_session,
                controlling_terminal: options.controlling_terminal,
                credentials: options.credentials,
                die_with_parent: options.die_with_parent,
            };
            syscalls::prepare_child(&mut command, setup);
        }
        let mut table = self.lock();
        let mut child = command.spawn()?;
        let pid = i32::try_from(child.id()).map_err(|_| io::Error::other("pid out of range"))?;
        if !hook {
            // Set from here, before the new program is past its dynamic loader
            // in practice, so its own children inherit the value too. The pid
            // cannot be reused meanwhile: it is unreaped, and reaping takes this lock.
            let _ = std::fs::write(format!("/proc/{pid}/oom_score_adj"), oom_score_adj.to_string());
        }
        let (tx, rx) = watch::channel(None);
        table.children.insert(pid, Registered { pgid: pid, exit: tx });
        table.generation += 1;
        drop(table);
        if !self.pidfds {
            // A reaper without children sleeps until told there is one to wait for.
            self.wake.notify_all();
        }
        // Dropping a std `Child` neither waits nor kills: the reaper owns it now.
        let stdio = (child.stdin.take(), child.stdout.take(), child.stderr.take());
        drop(child);
        Ok(Spawned {
            job: Job { pid, pgid: pid, exit: rx, supervisor: self, pidfd: Arc::default() },
            stdin: stdio.0,
            stdout: stdio.1,
            stderr: stdio.2,
        })
    }

    /// Reaps `pid` now if it has exited (the caller saw its pipes close, or
    /// its pidfd), without waiting for the reaper thread.
    #[allow(clippy::disallowed_methods)] // under the table lock, as the reaper does
    fn try_reap(&self, pid: i32) -> Option<ExitStatus> {
        let mut table = self.lock();
        if !table.children.contains_key(&pid) {
            return None;
        }
        let status = match nix::sys::wait::waitpid(Pid::from_raw(pid), Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::Exited(_, code)) => ExitStatus::Exited(code),
            Ok(WaitStatus::Signaled(_, signal, _)) => ExitStatus::Signaled(signal as i32),
            _ => return None,
        };
        if let Some(registered) = table.children.remove(&pid) {
            registered.exit.send_replace(Some(status));
        }
        Some(status)
    }

    /// Pids registered and not yet reaped.
    pub fn live(&self) -> Vec<i32> {
        self.lock().children.keys().copied().collect()
    }

    /// Signals every registered child's group with SIGTERM, then SIGKILL after
    /// `grace`, and waits (at most `grace` more) until they are reaped.
    pub async fn terminate_all(&'static self, grace: Duration) {
        let jobs: Vec<Job> = {
            let table = self.lock();
            table
                .children
                .iter()
                .map(|(pid, r)| Job {
                    pid: *pid,
                    pgid: r.pgid,
                    exit: r.exit.subscribe(),
                    supervisor: self,
                    pidfd: Arc::default(),
                })
                .collect()
        };
        if jobs.is_empty() {
            return;
        }
        tracing::info!(children = jobs.len(), "terminating child process groups");
        futures_util::future::join_all(jobs.iter().map(|job| job.terminate(grace))).await;
    }

    fn reap_forever(&self) {
        loop {
            if self.pidfds {
                self.sweep();
                let table = self.lock();
                let _ = self.wake.wait_timeout(table, IDLE_POLL);
            } else {
                self.wait_for_any();
            }
        }
    }

    /// Reaps every zombie child there is now, registered or not.
    #[allow(clippy::disallowed_methods)] // the reaper's own sweep
    fn sweep(&self) {
        use nix::sys::wait::{waitid, Id};
        loop {
            match waitid(Id::All, WaitPidFlag::WEXITED | WaitPidFlag::WNOHANG | WaitPidFlag::WNOWAIT) {
                Ok(peeked) => match peeked.pid() {
                    // A zombie that cannot be reaped (another waiter won) ends the sweep.
                    Some(pid) if self.reap(pid) => {}
                    _ => return,
                },
                Err(Errno::EINTR) => {}
                // ECHILD: no children at all.
                Err(_) => return,
            }
        }
    }

    /// Without pidfds: blocks until some child exits and reaps it, or sleeps
    /// (until a spawn, at most [`IDLE_POLL`]) while there is none.
    #[allow(clippy::disallowed_methods)] // the one place that blocks waiting
    fn wait_for_any(&self) {
        use nix::sys::wait::{waitid, Id};
        let generation = self.lock().generation;
        match waitid(Id::All, WaitPidFlag::WEXITED | WaitPidFlag::WNOWAIT) {
            Ok(peeked) => {
                if let Some(pid) = peeked.pid() {
                    self.reap(pid);
                }
            }
            Err(Errno::EINTR) => {}
            Err(Errno::ECHILD) => {
                let table = self.lock();
                if table.generation == generation {
                    let _ = self.wake.wait_timeout(table, IDLE_POLL);
                }
            }
            Err(e) => {
                tracing::error!(error = %e, "waitid failed");
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }

    /// Reaps `pid`, known to have exited, and delivers its status to whoever
    /// registered it. Returns whether it was reaped here.
    #[allow(clippy::disallowed_methods)] // under the table lock
    fn reap(&self, pid: Pid) -> bool {
        let mut table = self.lock();
        let status = match nix::sys::wait::waitpid(pid, Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::Exited(_, code)) => ExitStatus::Exited(code),
            Ok(WaitStatus::Signaled(_, signal, _)) => ExitStatus::Signaled(signal as i32),
            // Reaped by std after a failed exec, or not an exit after all.
            Ok(_) | Err(_) => return false,
        };
        match table.children.remove(&pid.as_raw()) {
            Some(registered) => {
                registered.exit.send_replace(Some(status));
            }
            None => tracing::debug!(pid = pid.as_raw(), ?status, "reaped an orphan"),
        }
        true
    }
}

/// Why a signal was not sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SignalError {
    /// The process has exited (and was reaped).
    #[error("the process has exited")]
    Exited,
    /// The kernel refused.
    #[error("cannot signal the process: {0}")]
    Os(Errno),
}

/// A child's pidfd as a runtime source, opened on first use: a run that
/// reaps its child as soon as the pipes close never needs one.
#[derive(Debug, Default)]
struct ExitFd {
    registered: OnceLock<Option<AsyncFd<OwnedFd>>>,
}

impl ExitFd {
    /// The pidfd of `job`'s child, registered with the runtime; `None` once
    /// it is reaped (its status is out), without pidfds, outside a runtime,
    /// or if epoll refuses it.
    fn source(&self, job: &Job) -> Option<&AsyncFd<OwnedFd>> {
        self.registered
            .get_or_init(|| {
                let table = job.supervisor.lock();
                if !job.supervisor.pidfds || !table.children.contains_key(&job.pid) {
                    return None;
                }
                // Opened under the lock while the pid is registered, hence
                // unreaped: it cannot name a recycled pid.
                let fd = syscalls::pidfd_open(job.pid).ok()?;
                drop(table);
                syscalls::readable_source(fd).ok()
            })
            .as_ref()
    }
}

/// Control of one spawned child and its process group.
#[derive(Debug, Clone)]
pub struct Job {
    pid: i32,
    pgid: i32,
    exit: watch::Receiver<Option<ExitStatus>>,
    supervisor: &'static Supervisor,
    /// Readable when the child exits: the waiting thread learns it from its
    /// own epoll instead of being woken by the reaper thread.
    pidfd: Arc<ExitFd>,
}

impl Job {
    /// The child's pid.
    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// Its process group (equal to its pid).
    pub fn pgid(&self) -> i32 {
        self.pgid
    }

    /// How it ended, if it has.
    pub fn status(&self) -> Option<ExitStatus> {
        *self.exit.borrow()
    }

    /// Waits until it has exited and been reaped.
    pub async fn exited(&self) -> ExitStatus {
        if let Some(status) = self.reaped_now() {
            return status;
        }
        if let Some(source) = self.pidfd.source(self) {
            // Readable once the child is a zombie; another clone may reap it first.
            if source.readable().await.is_ok() {
                if let Some(status) = self.reaped_now() {
                    return status;
                }
            }
        }
        self.reaped().await
    }

    /// Its status if it has been reaped, or reaps it now if it has exited.
    fn reaped_now(&self) -> Option<ExitStatus> {
        self.status().or_else(|| self.supervisor.try_reap(self.pid))
    }

    /// Waits for the status without a pidfd: delivered by the reaper thread
    /// (which waits for every exit when there are no pidfds), or found by
    /// polling with a growing pause (a pidfd that said "exited" while the
    /// child could not be reaped yet).
    async fn reaped(&self) -> ExitStatus {
        let mut rx = self.exit.clone();
        let mut pause = Duration::from_millis(1);
        loop {
            if let Some(status) = self.reaped_now() {
                return status;
            }
            tokio::select! {
                changed = rx.changed() => {
                    if changed.is_err() {
                        // The sender is only dropped after sending; be defensive anyway.
                        return rx.borrow().unwrap_or(ExitStatus::Signaled(Signal::SIGKILL as i32));
                    }
                }
                () = tokio::time::sleep(pause) => pause = (pause * 2).min(IDLE_POLL / 10),
            }
        }
    }

    /// Sends `signal` to the child alone.
    ///
    /// # Errors
    /// [`SignalError::Exited`] once it has been reaped; the kernel's refusal otherwise.
    pub fn signal(&self, signal: Signal) -> Result<(), SignalError> {
        let table = self.supervisor.lock();
        if !table.children.contains_key(&self.pid) {
            return Err(SignalError::Exited);
        }
        kill(Pid::from_raw(self.pid), signal).map_err(SignalError::Os)
    }

    /// Sends `signal` to the child's whole process group.
    ///
    /// While the leader is unreaped its pid, hence the group id, cannot be
    /// reused. After it is reaped the group may live on (descendants), and
    /// its id stays reserved while it does; the signal is then sent unless a
    /// child registered since holds that pid (the one way the id can come
    /// back as a group of ours).
    ///
    /// # Errors
    /// [`SignalError::Exited`] when the group is gone; the kernel's refusal otherwise.
    pub fn signal_group(&self, signal: Signal) -> Result<(), SignalError> {
        let table = self.supervisor.lock();
        let reused = self.status().is_some() && table.children.contains_key(&self.pgid);
        if reused {
            return Err(SignalError::Exited);
        }
        match killpg(Pid::from_raw(self.pgid), signal) {
            Ok(()) => Ok(()),
            Err(Errno::ESRCH) => Err(SignalError::Exited),
            Err(e) => Err(SignalError::Os(e)),
        }
    }

    /// Whether any process of the group is still alive (or an unreaped zombie).
    pub fn group_alive(&self) -> bool {
        let table = self.supervisor.lock();
        if self.status().is_some() && table.children.contains_key(&self.pgid) {
            return false;
        }
        killpg(Pid::from_raw(self.pgid), None).is_ok()
    }

    /// Ends the whole group: SIGTERM (and SIGCONT, so stopped members see
    /// it), then SIGKILL to whatever is left after `grace`. Returns the
    /// leader's exit status once it is reaped.
    pub async fn terminate(&self, grace: Duration) -> ExitStatus {
        let _ = self.signal_group(Signal::SIGTERM);
        let _ = self.signal_group(Signal::SIGCONT);
        let deadline = tokio::time::Instant::now() + grace;
        let leader = self.exited();
        tokio::pin!(leader);
        let mut status = None;
        loop {
            if status.is_some() && !self.group_alive() {
                break;
            }
            if tokio::time::Instant::now() >= deadline {
                let _ = self.signal_group(Signal::SIGKILL);
                break;
            }
            // Woken by the leader's exit; members of the group are polled.
            let tick = tokio::time::sleep(Duration::from_millis(10));
            tokio::select! {
                exited = &mut leader, if status.is_none() => status = Some(exited),
                () = tick => {}
            }
        }
        let status = match status {
            Some(status) => status,
            None => leader.await,
        };
        // SIGKILL is delivered asynchronously: wait (bounded) until the members are gone too.
        let settle = tokio::time::Instant::now() + Duration::from_secs(1);
        while self.group_alive() && tokio::time::Instant::now() < settle {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        status
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Stdio;

    fn command(script: &str) -> Command {
        let mut c = Command::new("/bin/sh");
        c.args(["-c", script]).stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null());
        c
    }

    async fn spawn(script: &str) -> Job {
        let c = command(script);
        tokio::task::spawn_blocking(move || supervisor().spawn(c, SpawnOptions::default()))
            .await
            .expect("join")
            .expect("spawn")
            .job
    }

    #[tokio::test]
    async fn exit_codes_and_signals_are_delivered() {
        assert_eq!(spawn("exit 3").await.exited().await, ExitStatus::Exited(3));
        assert_eq!(spawn("kill -9 $$").await.exited().await.code(), -9);
    }

    #[tokio::test]
    async fn an_immediate_exit_is_never_lost() {
        let jobs = futures_util::future::join_all((0..50).map(|i| spawn(if i % 2 == 0 { "true" } else { "exit 1" })));
        for (i, job) in jobs.await.into_iter().enumerate() {
            assert_eq!(job.exited().await.code(), i32::from(i % 2 == 1));
        }
    }

    #[tokio::test]
    async fn an_exit_nobody_awaits_is_reaped_by_the_sweep() {
        let job = spawn("exit 7").await;
        // Nobody awaits it: the reaper thread's next sweep reaps it and hands out the status.
        let deadline = std::time::Instant::now() + IDLE_POLL * 5;
        while job.status().is_none() {
            assert!(std::time::Instant::now() < deadline, "never reaped");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(job.status(), Some(ExitStatus::Exited(7)));
        assert!(!supervisor().live().contains(&job.pid()));
        assert_eq!(job.exited().await, ExitStatus::Exited(7), "and every waiter still learns it");
    }

    #[tokio::test]
    async fn each_child_leads_its_own_group_and_terminate_ends_it() {
        let job = spawn("sleep 30 & sleep 30; wait").await;
        assert_eq!(job.pgid(), job.pid());
        assert!(job.group_alive());
        let status = job.terminate(Duration::from_secs(2)).await;
        assert_eq!(status, ExitStatus::Signaled(15));
        assert!(!job.group_alive(), "the background sleep died with its group");
        assert_eq!(job.signal(Signal::SIGTERM), Err(SignalError::Exited));
    }

    #[tokio::test]
    async fn terminate_escalates_to_sigkill() {
        let mut c = command("trap '' TERM; echo ready; while :; do sleep 1; done");
        c.stdout(Stdio::piped());
        let spawned = tokio::task::spawn_blocking(move || supervisor().spawn(c, SpawnOptions::default()))
            .await
            .expect("join")
            .expect("spawn");
        let stdout = spawned.stdout.expect("stdout");
        // The trap is installed once the shell says so.
        let line = tokio::task::spawn_blocking(move || {
            use std::io::BufRead;
            let mut line = String::new();
            std::io::BufReader::new(stdout).read_line(&mut line).map(|_| line)
        });
        assert_eq!(line.await.expect("join").expect("read"), "ready\n");
        let status = spawned.job.terminate(Duration::from_millis(300)).await;
        assert_eq!(status, ExitStatus::Signaled(9));
    }

    #[tokio::test]
    async fn spawn_errors_are_reported_and_the_table_stays_clean() {
        let mut c = Command::new("/nonexistent/program");
        c.stdin(Stdio::null());
        let err = tokio::task::spawn_blocking(move || supervisor().spawn(c, SpawnOptions::default()))
            .await
            .expect("join")
            .expect_err("no such program");
        assert_eq!(err.kind(), io::ErrorKind::NotFound);
    }
}
