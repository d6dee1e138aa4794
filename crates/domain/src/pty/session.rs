//! One terminal session: the shell, the master side of its terminal, the
//! output history, and the connections attached to it.
//!
//! A pump task drains the terminal into a [`Scrollback`] ring whether or not
//! anyone is attached, so the shell never blocks on a missing reader and a
//! later attachment replays the history. Each attachment reads the ring from
//! its own offset. While a connection is attached and behind, the pump waits
//! for it (the shell feels backpressure, as in a real terminal) rather than
//! overwrite what it has not read; a connection that does not read for
//! [`STALL_LIMIT`] stops holding the shell back and is told how many bytes it
//! missed instead.

use std::collections::HashMap;
use std::io;
use std::os::fd::OwnedFd;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use abx_wire::api::PtySessionInfo;
use abx_wire::codec::utf8::Utf8Decoder;
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use tokio::io::unix::AsyncFd;
use tokio::sync::{watch, Notify};
use tokio_util::sync::CancellationToken;

use super::scrollback::Scrollback;
use super::spawn::{ExitFuture, SpawnedShell};
use super::TerminalError;
use crate::process::ExitStatus;
use crate::process::Job;

/// How long an attached connection may leave output unread before the shell stops waiting for it.
pub const STALL_LIMIT: Duration = Duration::from_secs(5);
/// How long the pump may go on draining after the shell exited (children may hold the terminal).
const DRAIN_GRACE: Duration = Duration::from_secs(1);
/// Largest read from the terminal, and largest output message.
const CHUNK: usize = 32 * 1024;

/// A running or exited terminal session.
pub struct Session {
    id: String,
    shell: String,
    pid: i32,
    job: Job,
    created_at: f64,
    master: AsyncFd<OwnedFd>,
    state: Mutex<State>,
    output: Mutex<Output>,
    data: watch::Sender<u64>,
    space: Notify,
    exit: watch::Sender<Option<ExitStatus>>,
    closed: CancellationToken,
}

struct State {
    cols: u16,
    rows: u16,
    last_activity: Instant,
    attached: usize,
}

struct Output {
    ring: Scrollback,
    cursors: HashMap<u64, Cursor>,
    next_cursor: u64,
}

struct Cursor {
    offset: u64,
    holds: bool,
}

impl Output {
    /// How many bytes may be read from the terminal without overwriting unread output.
    fn room(&self) -> usize {
        let end = self.ring.end();
        let oldest = self.cursors.values().filter(|c| c.holds).map(|c| c.offset).min().unwrap_or(end);
        self.ring.capacity().saturating_sub(usize::try_from(end - oldest).unwrap_or(usize::MAX))
    }
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session").field("id", &self.id).field("pid", &self.pid).finish_non_exhaustive()
    }
}

fn locked<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Session {
    /// Wraps a started shell and starts its pump; `scrollback` bytes of history are kept.
    ///
    /// # Errors
    /// The master side cannot be made non-blocking or registered with the runtime.
    pub fn start(
        id: String,
        shell: String,
        spawned: SpawnedShell,
        size: (u16, u16),
        scrollback: usize,
    ) -> io::Result<Arc<Session>> {
        let master = crate::syscalls::register_master(spawned.master)?;
        let now = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64());
        let session = Arc::new(Session {
            id,
            shell,
            pid: spawned.pid,
            job: spawned.job,
            created_at: now,
            master,
            state: Mutex::new(State { cols: size.0, rows: size.1, last_activity: Instant::now(), attached: 0 }),
            output: Mutex::new(Output { ring: Scrollback::new(scrollback), cursors: HashMap::new(), next_cursor: 0 }),
            data: watch::channel(0).0,
            space: Notify::new(),
            exit: watch::channel(None).0,
            closed: CancellationToken::new(),
        });
        let pump = tokio::spawn(Arc::clone(&session).pump());
        tokio::spawn(Arc::clone(&session).lifecycle(spawned.exit, pump));
        Ok(session)
    }

    /// The session id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The shell's pid (and process group).
    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// How the shell exited, once it has.
    pub fn exit_status(&self) -> Option<ExitStatus> {
        *self.exit.borrow()
    }

    /// The current size as (cols, rows).
    pub fn size(&self) -> (u16, u16) {
        let state = locked(&self.state);
        (state.cols, state.rows)
    }

    /// The wire description of the session.
    pub fn info(&self) -> PtySessionInfo {
        let state = locked(&self.state);
        let exit = self.exit_status();
        PtySessionInfo {
            id: self.id.clone(),
            pid: self.pid,
            created_at: self.created_at,
            cols: state.cols,
            rows: state.rows,
            alive: exit.is_none(),
            exit_code: exit.map(ExitStatus::code),
            shell: self.shell.clone(),
            attached: state.attached,
        }
    }

    /// Unix creation time, for ordering.
    pub fn created_at(&self) -> f64 {
        self.created_at
    }

    /// Whether nobody is attached and nothing happened for `idle`.
    pub fn idle_for(&self, idle: Duration, now: Instant) -> bool {
        let state = locked(&self.state);
        state.attached == 0 && now.saturating_duration_since(state.last_activity) >= idle
    }

    fn touch(&self) {
        locked(&self.state).last_activity = Instant::now();
    }

    /// Changes the terminal's size (the foreground program gets `SIGWINCH`).
    pub fn resize(&self, cols: u16, rows: u16) {
        let mut state = locked(&self.state);
        let size = rustix::termios::Winsize { ws_row: rows, ws_col: cols, ws_xpixel: 0, ws_ypixel: 0 };
        if let Err(e) = rustix::termios::tcsetwinsize(self.master.get_ref(), size) {
            tracing::debug!(session = %self.id, error = %e, "cannot resize terminal");
        }
        state.cols = cols;
        state.rows = rows;
        state.last_activity = Instant::now();
    }

    /// Sends `signal` to the terminal's foreground process group (the
    /// running command, or the shell at its prompt). Nothing once the shell exited.
    pub fn signal(&self, signal: Signal) {
        self.touch();
        if self.exit_status().is_some() {
            return;
        }
        let foreground = rustix::termios::tcgetpgrp(self.master.get_ref()).map(|p| p.as_raw_nonzero().get());
        self.signal_groups(&[foreground.unwrap_or(self.pid)], signal);
    }

    /// Writes some of `data` to the terminal; returns how much was taken.
    ///
    /// # Errors
    /// The terminal is gone.
    pub async fn write_input(&self, data: &[u8]) -> io::Result<usize> {
        self.touch();
        loop {
            let mut ready = self.master.writable().await?;
            match ready.try_io(|fd| rustix::io::write(fd.get_ref(), data).map_err(io::Error::from)) {
                Ok(result) => return result,
                Err(_would_block) => continue,
            }
        }
    }

    /// Attaches a reader that starts with the whole kept history.
    pub fn attach(self: &Arc<Self>) -> Attachment {
        self.attach_with(true, None)
    }

    /// Whether a reader may resume at `offset`: not past what the terminal
    /// wrote (an offset that passes stays valid: the output only grows).
    ///
    /// # Errors
    /// [`TerminalError::OffsetAhead`] for an offset past the output.
    pub fn check_offset(&self, offset: u64) -> Result<(), TerminalError> {
        let end = locked(&self.output).ring.end();
        if offset > end {
            return Err(TerminalError::OffsetAhead { offset, end });
        }
        Ok(())
    }

    /// Attaches a reader that resumes at `offset` (an [`Update::Output`]'s
    /// `end` a previous connection received, checked first by
    /// [`Session::check_offset`]): it gets every byte from there, or, when
    /// the scrollback moved past it, an exact `skipped` count first.
    pub fn attach_at(self: &Arc<Self>, offset: u64) -> Attachment {
        self.attach_with(true, Some(offset))
    }

    /// Attaches a reader that never holds the shell back: when it falls
    /// behind the scrollback it skips what was overwritten instead.
    pub fn attach_lossy(self: &Arc<Self>) -> Attachment {
        self.attach_with(false, None)
    }

    /// A reader from `from`, or from the oldest byte held.
    fn attach_with(self: &Arc<Self>, holds: bool, from: Option<u64>) -> Attachment {
        let mut output = locked(&self.output);
        let id = output.next_cursor;
        output.next_cursor += 1;
        let start = from.unwrap_or_else(|| output.ring.start());
        output.cursors.insert(id, Cursor { offset: start, holds });
        drop(output);
        {
            let mut state = locked(&self.state);
            state.attached += 1;
            state.last_activity = Instant::now();
        }
        let mut decoder = Utf8Decoder::new();
        if start > 0 && from.is_none() {
            decoder.resync();
        }
        Attachment {
            session: Arc::clone(self),
            id,
            decoder,
            data: self.data.subscribe(),
            exit: self.exit.subscribe(),
            done: false,
            holds,
            before: start,
        }
    }

    /// Ends the session: `SIGHUP` to the shell and its foreground group (as a
    /// terminal being closed does), `SIGKILL` to what is left after `grace`,
    /// then stops the pump so the terminal is released.
    pub async fn terminate(&self, grace: Duration) {
        if self.exit_status().is_none() {
            let foreground = rustix::termios::tcgetpgrp(self.master.get_ref()).map(|p| p.as_raw_nonzero().get());
            let groups: Vec<i32> =
                std::iter::once(self.pid).chain(foreground.ok().filter(|g| *g != self.pid)).collect();
            for signal in [Signal::SIGHUP, Signal::SIGCONT] {
                self.signal_groups(&groups, signal);
            }
            let mut exit = self.exit.subscribe();
            if tokio::time::timeout(grace, exit.wait_for(Option::is_some)).await.is_err() {
                self.signal_groups(&groups, Signal::SIGKILL);
                let _ = tokio::time::timeout(Duration::from_secs(5), exit.wait_for(Option::is_some)).await;
            }
        }
        self.closed.cancel();
    }

    /// Signals `groups`: the shell's own through the supervisor (never once
    /// its id may name someone else's group), a foreground job's directly.
    fn signal_groups(&self, groups: &[i32], signal: Signal) {
        for group in groups {
            if *group == self.pid {
                let _ = self.job.signal_group(signal);
            } else {
                let _ = killpg(Pid::from_raw(*group), signal);
            }
        }
    }

    /// Drains the terminal into the ring until the terminal closes or the session ends.
    async fn pump(self: Arc<Self>) {
        let mut buf = vec![0u8; CHUNK];
        loop {
            let room = tokio::select! {
                room = self.room() => room,
                () = self.closed.cancelled() => break,
            };
            let read = tokio::select! {
                read = self.read_some(&mut buf[..room.min(CHUNK)]) => read,
                () = self.closed.cancelled() => break,
            };
            match read {
                Ok(0) => break,
                Ok(n) => {
                    let end = {
                        let mut output = locked(&self.output);
                        output.ring.push(&buf[..n]);
                        output.ring.end()
                    };
                    self.data.send_replace(end);
                }
                // EIO: every process holding the slave side closed it.
                Err(e) => {
                    if e.raw_os_error() != Some(nix::libc::EIO) {
                        tracing::debug!(session = %self.id, error = %e, "terminal read failed");
                    }
                    break;
                }
            }
        }
    }

    /// Waits until the pump may read without overwriting what an attached connection has not read.
    async fn room(&self) -> usize {
        loop {
            let room = locked(&self.output).room();
            if room > 0 {
                return room;
            }
            if tokio::time::timeout(STALL_LIMIT, self.space.notified()).await.is_err() {
                let mut output = locked(&self.output);
                let oldest = output.cursors.values().filter(|c| c.holds).map(|c| c.offset).min();
                for cursor in output.cursors.values_mut().filter(|c| Some(c.offset) == oldest) {
                    cursor.holds = false;
                }
                tracing::debug!(session = %self.id, "a connection stopped reading; the shell no longer waits for it");
            }
        }
    }

    async fn read_some(&self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            let mut ready = self.master.readable().await?;
            match ready.try_io(|fd| rustix::io::read(fd.get_ref(), &mut *buf).map_err(io::Error::from)) {
                Ok(result) => return result,
                Err(_would_block) => continue,
            }
        }
    }

    /// Publishes the shell's exit once its last output was drained (or after a grace).
    async fn lifecycle(self: Arc<Self>, exit: ExitFuture, pump: tokio::task::JoinHandle<()>) {
        let status = exit.await;
        // Dropping the handle on timeout detaches the pump; it ends when the session closes.
        let _ = tokio::time::timeout(DRAIN_GRACE, pump).await;
        tracing::info!(session = %self.id, pid = self.pid, exit_code = status.code(), "terminal shell exited");
        self.touch();
        self.exit.send_replace(Some(status));
    }
}

/// What an attached connection receives next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Update {
    /// Terminal text; `skipped` bytes before it were lost to this connection.
    Output {
        /// The text (may be empty when only `skipped` is news).
        text: String,
        /// Bytes missed before it.
        skipped: u64,
        /// The offset after the last byte `text` holds: where a connection
        /// that received it resumes ([`Session::attach_at`]).
        end: u64,
    },
    /// The shell exited and everything it wrote was delivered.
    Exited(ExitStatus),
}

/// One connection's view of a session's output.
pub struct Attachment {
    session: Arc<Session>,
    id: u64,
    decoder: Utf8Decoder,
    data: watch::Receiver<u64>,
    exit: watch::Receiver<Option<ExitStatus>>,
    done: bool,
    holds: bool,
    /// Output that had left the scrollback when it attached, bytes.
    before: u64,
}

impl Attachment {
    /// Bytes of output that had already left the scrollback when this
    /// connection attached (it starts at the oldest byte still held).
    pub fn lost_before_attach(&self) -> u64 {
        self.before
    }

    /// The session attached to.
    pub fn session(&self) -> &Arc<Session> {
        &self.session
    }

    /// The next output, or the exit once all output was delivered. Cancel-safe.
    pub async fn next(&mut self) -> Update {
        loop {
            self.data.borrow_and_update();
            let exit = *self.exit.borrow_and_update();
            let chunk = {
                let mut output = locked(&self.session.output);
                let offset = output.cursors.get(&self.id).map_or(0, |c| c.offset);
                let chunk = output.ring.read(offset, CHUNK);
                if let Some(cursor) = output.cursors.get_mut(&self.id) {
                    cursor.offset = chunk.next;
                    cursor.holds = self.holds;
                }
                chunk
            };
            if !chunk.bytes.is_empty() || chunk.skipped > 0 {
                self.session.space.notify_one();
                if chunk.skipped > 0 {
                    self.decoder.resync();
                }
                let text = self.decoder.decode(&chunk.bytes);
                if !text.is_empty() || chunk.skipped > 0 {
                    // A partial character held back is not in `text`: it resumes there.
                    let end = chunk.next - self.decoder.pending().len() as u64;
                    return Update::Output { text, skipped: chunk.skipped, end };
                }
                continue;
            }
            if let Some(status) = exit {
                let rest = self.decoder.finish();
                if !rest.is_empty() {
                    let end = locked(&self.session.output).ring.end();
                    return Update::Output { text: rest, skipped: 0, end };
                }
                self.done = true;
                return Update::Exited(status);
            }
            tokio::select! {
                _ = self.data.changed() => {}
                _ = self.exit.changed() => {}
            }
        }
    }

    /// Whether the exit was delivered.
    pub fn is_done(&self) -> bool {
        self.done
    }
}

impl Drop for Attachment {
    fn drop(&mut self) {
        locked(&self.session.output).cursors.remove(&self.id);
        self.session.space.notify_one();
        let mut state = locked(&self.session.state);
        state.attached = state.attached.saturating_sub(1);
        state.last_activity = Instant::now();
    }
}
