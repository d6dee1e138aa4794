//! One inotify instance for the whole daemon, shared by every watch.
//!
//! An instance per watch (what the `notify` crate does, with a thread
//! each) let 127 streaming watches use up the user's 128 inotify instances:
//! later watches failed, and so did `inotify_init()` in the sandbox's own
//! programs. Here one instance, made on the first watch, serves all of
//! them, read by one thread that hands each event to the watches of its
//! directory. A directory watched by several watches costs one kernel watch.
//!
//! Bounds ([`Limits`]): at most `max_watches` watches at once and
//! `max_dirs` watched directories (by default half the kernel's per-user
//! `max_user_watches`, leaving the rest to the sandbox's programs); beyond
//! either, [`FsError::TooManyWatches`] (429, `resource_exhausted`).
//!
//! Directories are added through descriptors (`/proc/self/fd/<dir>` and a
//! name, the last component not followed), so a symlink swapped into the
//! path cannot point a watch outside the tree.

use std::collections::{HashMap, HashSet};
use std::ffi::OsStr;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};

use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify, WatchDescriptor};
use tokio::sync::mpsc;

use super::FsError;

/// Default bound on watches open at once.
pub const DEFAULT_MAX_WATCHES: usize = 128;
/// Ceiling of the directory budget, whatever the kernel allows.
const MAX_DIRS_CEILING: usize = 65_536;
/// Raw events queued per watch before it rescans instead.
const QUEUE: usize = 4096;

/// What one watch hears from the kernel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Raw {
    /// The path the event is about.
    pub path: PathBuf,
    /// A rename's half, with its cookie (the two halves share it).
    pub moved: Option<Moved>,
}

/// Which half of a rename an event is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Moved {
    /// The old name, with the rename's cookie.
    From(u32),
    /// The new name, with the rename's cookie.
    To(u32),
}

/// Bounds of the shared instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Watches open at once.
    pub max_watches: usize,
    /// Directories watched at once (kernel watches).
    pub max_dirs: usize,
}

impl Default for Limits {
    fn default() -> Self {
        let kernel = std::fs::read_to_string("/proc/sys/fs/inotify/max_user_watches")
            .ok()
            .and_then(|text| text.trim().parse::<usize>().ok())
            .unwrap_or(8192);
        Limits { max_watches: DEFAULT_MAX_WATCHES, max_dirs: (kernel / 2).clamp(1, MAX_DIRS_CEILING) }
    }
}

struct Subscriber {
    tx: mpsc::Sender<Raw>,
    overflow: Arc<AtomicBool>,
    dirs: HashSet<WatchDescriptor>,
}

struct Dir {
    path: PathBuf,
    subscribers: HashSet<u64>,
}

#[derive(Default)]
struct State {
    inotify: Option<Arc<Inotify>>,
    subscribers: HashMap<u64, Subscriber>,
    dirs: HashMap<WatchDescriptor, Dir>,
    next_id: u64,
}

/// The daemon's inotify instance and who listens to which directory.
pub struct Hub {
    limits: Limits,
    state: Mutex<State>,
}

static HUB: OnceLock<Hub> = OnceLock::new();

/// Sets the bounds of the shared instance; only before the first watch.
pub fn configure(limits: Limits) {
    let _ = HUB.set(Hub { limits, state: Mutex::default() });
}

/// The daemon's hub (default bounds unless [`configure`]d first).
pub fn hub() -> &'static Hub {
    HUB.get_or_init(|| Hub { limits: Limits::default(), state: Mutex::default() })
}

fn mask() -> AddWatchFlags {
    AddWatchFlags::IN_CREATE
        | AddWatchFlags::IN_DELETE
        | AddWatchFlags::IN_MODIFY
        | AddWatchFlags::IN_CLOSE_WRITE
        | AddWatchFlags::IN_ATTRIB
        | AddWatchFlags::IN_MOVED_FROM
        | AddWatchFlags::IN_MOVED_TO
        | AddWatchFlags::IN_DELETE_SELF
        | AddWatchFlags::IN_MOVE_SELF
        | AddWatchFlags::IN_ONLYDIR
}

/// Whether `/proc/self/fd` can name descriptors (without it, paths are used as given).
fn proc_fd_available() -> bool {
    static AVAILABLE: OnceLock<bool> = OnceLock::new();
    *AVAILABLE.get_or_init(|| Path::new("/proc/self/fd").is_dir())
}

fn exhausted(what: String) -> FsError {
    FsError::TooManyWatches(what)
}

impl Hub {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The bounds in force.
    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// Watches open now.
    pub fn watches(&self) -> usize {
        self.lock().subscribers.len()
    }

    /// Directories watched now.
    pub fn dirs(&self) -> usize {
        self.lock().dirs.len()
    }

    /// A new watch, with the channel its events arrive on and the flag set
    /// when some were lost (queue full, or the kernel's queue overflowed).
    ///
    /// # Errors
    /// [`FsError::TooManyWatches`] past `max_watches` or when no inotify
    /// instance can be made.
    pub fn subscribe(&'static self) -> Result<(Subscription, mpsc::Receiver<Raw>, Arc<AtomicBool>), FsError> {
        let mut state = self.lock();
        if state.subscribers.len() >= self.limits.max_watches {
            return Err(exhausted(format!("Too many watches (at most {})", self.limits.max_watches)));
        }
        if state.inotify.is_none() {
            let inotify = Inotify::init(InitFlags::IN_CLOEXEC | InitFlags::IN_NONBLOCK)
                .map_err(|e| exhausted(format!("Cannot start watching: no inotify instance ({e})")))?;
            let inotify = Arc::new(inotify);
            let reader = Arc::clone(&inotify);
            std::thread::Builder::new()
                .name("abx-inotify".into())
                .spawn(move || self.read_forever(&reader))
                .map_err(|e| FsError::internal("cannot start the inotify reader", e))?;
            state.inotify = Some(inotify);
        }
        let id = state.next_id;
        state.next_id += 1;
        let (tx, rx) = mpsc::channel(QUEUE);
        let overflow = Arc::new(AtomicBool::new(false));
        state.subscribers.insert(id, Subscriber { tx, overflow: Arc::clone(&overflow), dirs: HashSet::new() });
        Ok((Subscription { id, hub: self }, rx, overflow))
    }

    fn read_forever(&self, inotify: &Inotify) {
        use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
        loop {
            let mut ready = [PollFd::new(inotify.as_fd(), PollFlags::POLLIN)];
            match poll(&mut ready, PollTimeout::NONE) {
                Ok(_) | Err(nix::errno::Errno::EINTR) => {}
                Err(e) => {
                    tracing::error!(error = %e, "the inotify reader stopped; watches see no more changes");
                    return;
                }
            }
            if let Err(e) = Self::drain(&mut self.lock(), inotify) {
                tracing::error!(error = %e, "the inotify reader stopped; watches see no more changes");
                return;
            }
        }
    }

    /// Reads and dispatches what the kernel has queued, under the state lock
    /// (events are only ever read under it, so once this returns every event
    /// queued before the call is in its watches' channels).
    fn drain(state: &mut State, inotify: &Inotify) -> Result<(), nix::errno::Errno> {
        loop {
            match inotify.read_events() {
                Ok(events) => {
                    for event in events {
                        state.dispatch(event);
                    }
                }
                Err(nix::errno::Errno::EAGAIN | nix::errno::Errno::EINTR) => return Ok(()),
                Err(e) => return Err(e),
            }
        }
    }

    /// Hands every event the kernel has queued so far to its watches now:
    /// a change made before this call is in the channels when it returns
    /// (a polled watch calls it before it looks).
    pub fn flush(&self) {
        let mut state = self.lock();
        if let Some(inotify) = state.inotify.clone() {
            let _ = Self::drain(&mut state, &inotify);
        }
    }
}

impl State {
    fn dispatch(&mut self, event: nix::sys::inotify::InotifyEvent) {
        if event.mask.contains(AddWatchFlags::IN_Q_OVERFLOW) {
            for subscriber in self.subscribers.values() {
                subscriber.overflow.store(true, Ordering::Relaxed);
            }
            return;
        }
        if event.mask.contains(AddWatchFlags::IN_IGNORED) {
            if let Some(dir) = self.dirs.remove(&event.wd) {
                for id in dir.subscribers {
                    if let Some(subscriber) = self.subscribers.get_mut(&id) {
                        subscriber.dirs.remove(&event.wd);
                    }
                }
            }
            return;
        }
        let Some(dir) = self.dirs.get(&event.wd) else { return };
        let path = match &event.name {
            Some(name) => dir.path.join(name),
            None => dir.path.clone(),
        };
        let moved = if event.mask.contains(AddWatchFlags::IN_MOVED_FROM) {
            Some(Moved::From(event.cookie))
        } else if event.mask.contains(AddWatchFlags::IN_MOVED_TO) {
            Some(Moved::To(event.cookie))
        } else {
            None
        };
        for id in &dir.subscribers {
            if let Some(subscriber) = self.subscribers.get(id) {
                if subscriber.tx.try_send(Raw { path: path.clone(), moved }).is_err() {
                    subscriber.overflow.store(true, Ordering::Relaxed);
                }
            }
        }
    }
}

/// One watch's registration; dropping it removes the directories only it watched.
pub struct Subscription {
    id: u64,
    hub: &'static Hub,
}

impl std::fmt::Debug for Subscription {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Subscription").field("id", &self.id).finish()
    }
}

impl Subscription {
    /// Watches the directory open at `dir`, whose real path is `path`.
    ///
    /// # Errors
    /// [`FsError::TooManyWatches`] past the directory budget; the kernel's refusals.
    pub fn add_dir(&self, dir: BorrowedFd<'_>, path: &Path) -> Result<(), FsError> {
        if !proc_fd_available() {
            return self.add(path, AddWatchFlags::IN_DONT_FOLLOW, path);
        }
        self.add(format!("/proc/self/fd/{}", dir.as_raw_fd()).as_str(), AddWatchFlags::empty(), path)
    }

    /// Watches the directory `name` in the directory open at `parent` (a
    /// symlink there is not followed); its real path is `path`.
    ///
    /// # Errors
    /// As [`Subscription::add_dir`].
    pub fn add_at(&self, parent: BorrowedFd<'_>, name: &OsStr, path: &Path) -> Result<(), FsError> {
        if !proc_fd_available() {
            return self.add(path, AddWatchFlags::IN_DONT_FOLLOW, path);
        }
        let via = Path::new(&format!("/proc/self/fd/{}", parent.as_fd().as_raw_fd())).join(name);
        self.add(via.as_os_str(), AddWatchFlags::IN_DONT_FOLLOW, path)
    }

    fn add<P: nix::NixPath + ?Sized>(&self, via: &P, flags: AddWatchFlags, path: &Path) -> Result<(), FsError> {
        let mut state = self.hub.lock();
        if state.dirs.len() >= self.hub.limits.max_dirs {
            return Err(exhausted(format!("Too many watched directories (at most {})", self.hub.limits.max_dirs)));
        }
        let Some(inotify) = state.inotify.clone() else {
            return Err(exhausted("Cannot start watching: no inotify instance".into()));
        };
        let wd = match inotify.add_watch(via, mask() | flags) {
            Ok(wd) => wd,
            Err(nix::errno::Errno::ENOSPC) => {
                return Err(exhausted("The system's inotify watches are used up".into()));
            }
            Err(e) => return Err(FsError::errno(path, e)),
        };
        let dir = state.dirs.entry(wd).or_insert_with(|| Dir { path: path.to_path_buf(), subscribers: HashSet::new() });
        // The same directory reached under a new name (moved): events say where it is now.
        dir.path = path.to_path_buf();
        dir.subscribers.insert(self.id);
        if let Some(subscriber) = state.subscribers.get_mut(&self.id) {
            subscriber.dirs.insert(wd);
        }
        Ok(())
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        let mut state = self.hub.lock();
        let Some(subscriber) = state.subscribers.remove(&self.id) else { return };
        let inotify = state.inotify.clone();
        for wd in subscriber.dirs {
            let unused = state.dirs.get_mut(&wd).is_some_and(|dir| {
                dir.subscribers.remove(&self.id);
                dir.subscribers.is_empty()
            });
            if unused {
                state.dirs.remove(&wd);
                if let Some(inotify) = &inotify {
                    let _ = inotify.rm_watch(wd);
                }
            }
        }
    }
}
