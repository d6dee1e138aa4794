//! `files_watch`: change events from the daemon's one inotify instance
//! ([`super::inotify`]).
//!
//! inotify says *that* something happened to a path; to report it in the
//! reference's vocabulary (`created`, `modified`, `deleted`, each with
//! `is_dir`) the watch keeps what it knows of each path (kind, size,
//! modification time; bounded) and compares on every event. So a rename
//! reads as `deleted` + `created` (the `created` event carries `old_path`),
//! a file replaced by an atomic write as `modified`, and this server's own
//! temp files never show. Events are gathered for [`BATCH`] and repeated
//! `modified` events of one path are spaced by the caller's interval (the
//! last change is always reported). An inotify queue overflow triggers a
//! full rescan, so nothing is silently lost. The watch ends at its deadline,
//! on server shutdown, or when the caller stops listening. A recursive watch
//! adds each directory it finds (at start, and as they appear) to the shared
//! instance through its descriptor; beyond the instance's bounds the watch is
//! refused with [`FsError::TooManyWatches`].

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use std::os::fd::AsFd;

use abx_wire::api::files::WatchEvent;
use nix::fcntl::OFlag;
use nix::sys::stat::Mode;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::inotify::{Moved, Raw, Subscription};
use super::meta::{Kind, Stat};
use super::safe::{self, dir_flags, Resolved};
use super::walk::{walk, Flow, MAX_NESTING};
use super::{is_temp_name, FsError};
use crate::policy::{Op, PathGuard};

/// How long events are gathered before they are compared and reported.
pub const BATCH: Duration = Duration::from_millis(10);
/// Paths a watch remembers.
pub const MAX_KNOWN: usize = 50_000;

/// What a watch sends its caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Output {
    /// A change.
    Change(WatchEvent),
    /// The end, with its reason (`timeout`, `shutdown`, `deleted`).
    End(&'static str),
}

/// How a watch runs.
#[derive(Debug, Clone, Copy)]
pub struct Options {
    /// Include subdirectories.
    pub recursive: bool,
    /// Least time between two `modified` events of one path.
    pub interval: Duration,
    /// How long the watch lasts.
    pub duration: Duration,
    /// How long events are gathered before they are compared ([`BATCH`] for `files_watch`).
    pub batch: Duration,
    /// Report a change of permission bits alone as `attributes` (envd's `CHMOD`).
    pub attributes: bool,
}

/// Kind, size, modification time and mode of each path a watch knows.
type Known = HashMap<PathBuf, (Kind, u64, super::meta::Time, u32)>;

/// Watches running now (for the metrics).
static LIVE: AtomicUsize = AtomicUsize::new(0);

/// How many watches run now.
pub fn live() -> usize {
    LIVE.load(Ordering::Relaxed)
}

/// Counts a watch while it runs.
struct Counted;

impl Counted {
    fn new() -> Self {
        LIVE.fetch_add(1, Ordering::Relaxed);
        Counted
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        LIVE.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Starts watching the directory `target` (`raw`: the caller's spelling);
/// events arrive on the returned channel. Blocking: call it off the runtime.
///
/// # Errors
/// 404 when the directory is missing; [`FsError::TooManyWatches`] past the
/// shared instance's bounds.
pub fn start(
    guard: PathGuard,
    target: Resolved,
    raw: &str,
    options: Options,
    shutdown: CancellationToken,
    runtime: tokio::runtime::Handle,
) -> Result<mpsc::Receiver<Output>, FsError> {
    let (state, raw_rx, overflow) = State::open(guard, target, raw, options)?;
    let (tx, rx) = mpsc::channel(256);
    runtime.spawn(run(state, raw_rx, overflow, tx, shutdown));
    Ok(rx)
}

/// A watch its caller polls: the changes since the last poll are worked out
/// during the poll, right after the shared instance has handed over every
/// event the kernel queued, so a change made before a poll is in its answer.
pub struct Polled {
    state: State,
    raw: mpsc::Receiver<Raw>,
    overflow: Arc<AtomicBool>,
    _counted: Counted,
}

impl std::fmt::Debug for Polled {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Polled").field("target", &self.state.target.path).finish_non_exhaustive()
    }
}

impl Polled {
    /// Starts watching the directory `target` (`raw`: the caller's spelling).
    /// Blocking: call it off the runtime. `options.duration` and `interval` are not used.
    ///
    /// # Errors
    /// As [`start`].
    pub fn start(guard: PathGuard, target: Resolved, raw: &str, options: Options) -> Result<Self, FsError> {
        let (state, raw, overflow) = State::open(guard, target, raw, options)?;
        Ok(Polled { state, raw, overflow, _counted: Counted::new() })
    }

    /// The changes since the last poll, oldest first (`End("deleted")` when
    /// the directory went away). Blocking.
    pub fn poll(&mut self) -> Vec<Output> {
        super::inotify::hub().flush();
        let mut batch = Vec::new();
        while let Ok(event) = self.raw.try_recv() {
            batch.push(event);
        }
        let rescan = self.overflow.swap(false, Ordering::Relaxed);
        let mut out = Vec::new();
        if !batch.is_empty() || rescan {
            self.state.process(&batch, &[], rescan, &mut out, &mut Vec::new());
        }
        out
    }
}

struct State {
    guard: PathGuard,
    target: Resolved,
    options: Options,
    known: Known,
    last_modified: HashMap<PathBuf, Instant>,
    /// The directories watched; dropping it (when the watch ends) unwatches them.
    subscription: Subscription,
}

async fn run(
    mut state: State,
    mut raw: mpsc::Receiver<Raw>,
    overflow: Arc<AtomicBool>,
    tx: mpsc::Sender<Output>,
    shutdown: CancellationToken,
) {
    let _counted = Counted::new();
    let deadline = Instant::now() + state.options.duration;
    let mut pending: HashSet<PathBuf> = HashSet::new();
    let reason = loop {
        let next_due =
            pending.iter().filter_map(|p| state.last_modified.get(p)).min().map(|t| *t + state.options.interval);
        let wake = next_due.unwrap_or(deadline).min(deadline);
        let batch = tokio::select! {
            () = shutdown.cancelled() => break "shutdown",
            () = tx.closed() => return,
            () = tokio::time::sleep_until(wake) => {
                if Instant::now() >= deadline { break "timeout"; }
                Vec::new()
            }
            event = raw.recv() => match event {
                None => break "shutdown",
                Some(first) => {
                    if !state.options.batch.is_zero() {
                        tokio::time::sleep(state.options.batch).await;
                    }
                    let mut batch = vec![first];
                    while let Ok(more) = raw.try_recv() { batch.push(more); }
                    batch
                }
            },
        };
        let rescan = overflow.swap(false, Ordering::Relaxed);
        let due: Vec<PathBuf> = pending.iter().filter(|p| state.due(p)).cloned().collect();
        for path in &due {
            pending.remove(path);
        }
        let work = tokio::task::spawn_blocking(move || {
            let mut out = Vec::new();
            let mut throttled = Vec::new();
            state.process(&batch, &due, rescan, &mut out, &mut throttled);
            (state, out, throttled)
        });
        let Ok((next, out, throttled)) = work.await else { return };
        state = next;
        pending.extend(throttled);
        for event in out {
            let end = matches!(event, Output::End(_));
            if tx.send(event).await.is_err() || end {
                return;
            }
        }
    };
    drop(state);
    let _ = tx.send(Output::End(reason)).await;
}

impl State {
    /// Subscribes to the directory `target` and learns what is below it.
    fn open(
        guard: PathGuard,
        target: Resolved,
        raw: &str,
        options: Options,
    ) -> Result<(State, mpsc::Receiver<Raw>, Arc<AtomicBool>), FsError> {
        let dir = match safe::open(&guard, &target, dir_flags(), Mode::empty(), Op::Read) {
            Ok(dir) => dir,
            Err(FsError::NotFound(_) | FsError::NotADirectory(_)) => {
                return Err(FsError::NotFound(format!("Directory not found: {raw}")))
            }
            Err(e) => return Err(e),
        };
        let (subscription, raw_rx, overflow) = super::inotify::hub().subscribe()?;
        subscription.add_dir(dir.as_fd(), &target.path)?;
        let mut state =
            State { guard, target, options, known: Known::new(), last_modified: HashMap::new(), subscription };
        state.known = state.scan_from(dir, &state.target.path.clone(), 1).map_err(|(_, e)| e)?;
        Ok((state, raw_rx, overflow))
    }

    fn due(&self, path: &Path) -> bool {
        self.last_modified.get(path).is_none_or(|t| t.elapsed() >= self.options.interval)
    }

    /// Compares what the events touched with what is known and reports the differences.
    fn process(
        &mut self,
        batch: &[Raw],
        due: &[PathBuf],
        rescan: bool,
        out: &mut Vec<Output>,
        throttled: &mut Vec<PathBuf>,
    ) {
        let mut renamed_from: HashMap<PathBuf, PathBuf> = HashMap::new();
        let mut moved_from: HashMap<u32, &Path> = HashMap::new();
        let mut paths: Vec<PathBuf> = Vec::new();
        for event in batch {
            match event.moved {
                Some(Moved::From(cookie)) => {
                    moved_from.insert(cookie, &event.path);
                }
                Some(Moved::To(cookie)) => {
                    if let Some(from) = moved_from.get(&cookie) {
                        renamed_from.insert(event.path.clone(), from.to_path_buf());
                    }
                }
                None => {}
            }
            paths.push(event.path.clone());
        }
        paths.extend(due.iter().cloned());
        if rescan {
            let mut all: Vec<PathBuf> = self.known.keys().cloned().collect();
            all.extend(self.rescan().into_keys());
            paths = all;
        }
        let mut seen = HashSet::new();
        for path in paths {
            if seen.insert(path.clone()) {
                let old_path = renamed_from.get(&path).filter(|p| p.file_name().is_some_and(|n| !is_temp_name(n)));
                self.reconcile(&path, old_path, out, throttled);
            }
        }
        if !self.exists(&self.target.path.clone()) {
            out.push(Output::End("deleted"));
        }
    }

    fn reconcile(
        &mut self,
        path: &Path,
        old_path: Option<&PathBuf>,
        out: &mut Vec<Output>,
        throttled: &mut Vec<PathBuf>,
    ) {
        if path == self.target.path || !self.in_scope(path) || path.file_name().is_some_and(is_temp_name) {
            return;
        }
        let now = self.look(path);
        let before = self.known.get(path).copied();
        let change = |kind: &str, is_dir: bool, old: Option<&PathBuf>| {
            Output::Change(WatchEvent {
                kind: kind.into(),
                path: path.display().to_string(),
                is_dir,
                old_path: old.map(|p| p.display().to_string()),
            })
        };
        match (before, now) {
            (None, Some(st)) => {
                out.push(change("created", st.is_dir(), old_path));
                self.remember(path, &st);
                if st.is_dir() && self.options.recursive {
                    self.created_below(path, out);
                }
            }
            (Some(old), None) => {
                self.forget_below(path, out);
                out.push(change("deleted", old.0 == Kind::Directory, None));
                self.known.remove(path);
            }
            (Some(old), Some(st)) if old.0 != st.kind => {
                self.forget_below(path, out);
                out.push(change("deleted", old.0 == Kind::Directory, None));
                out.push(change("created", st.is_dir(), old_path));
                self.remember(path, &st);
            }
            (Some(old), Some(st))
                if self.options.attributes && old.3 != st.mode && (old.1, old.2) == (st.size, st.modified) =>
            {
                out.push(change("attributes", st.is_dir(), None));
                self.remember(path, &st);
            }
            (Some(old), Some(st)) if (old.1, old.2) != (st.size, st.modified) => {
                if !self.due(path) {
                    throttled.push(path.to_path_buf());
                    return;
                }
                out.push(change("modified", st.is_dir(), None));
                self.last_modified.insert(path.to_path_buf(), Instant::now());
                self.remember(path, &st);
            }
            _ => {}
        }
    }

    fn in_scope(&self, path: &Path) -> bool {
        match path.strip_prefix(&self.target.path) {
            Ok(rel) => self.options.recursive || rel.components().count() == 1,
            Err(_) => false,
        }
    }

    /// The current state of `path`, when it exists and the guard lets it be seen.
    fn look(&self, path: &Path) -> Option<Stat> {
        let rel = path.strip_prefix(&self.target.root).ok()?;
        let fd = safe::open_beneath(&self.target.root, rel, OFlag::O_PATH, Mode::empty()).ok()?;
        let st = Stat::from_metadata(&std::fs::File::from(fd).metadata().ok()?);
        let allowed = if st.kind == Kind::Symlink {
            path.to_str().is_some_and(|p| self.guard.resolve(p, Op::Read, "").is_ok())
        } else {
            self.guard.check_resolved(path, Op::Read).is_ok()
        };
        allowed.then_some(st)
    }

    fn exists(&self, path: &Path) -> bool {
        safe::open_beneath(
            &self.target.root,
            path.strip_prefix(&self.target.root).unwrap_or(path),
            OFlag::O_PATH,
            Mode::empty(),
        )
        .is_ok()
    }

    fn remember(&mut self, path: &Path, st: &Stat) {
        if self.known.len() < MAX_KNOWN || self.known.contains_key(path) {
            self.known.insert(path.to_path_buf(), (st.kind, st.size, st.modified, st.mode));
        }
    }

    fn created_below(&mut self, dir: &Path, out: &mut Vec<Output>) {
        let Ok(rel) = dir.strip_prefix(&self.target.root) else { return };
        let Ok(fd) = safe::open_beneath(&self.target.root, rel, dir_flags(), Mode::empty()) else { return };
        // Watched first, then listed: what appears in between is in the listing.
        if let Err(e) = self.subscription.add_dir(fd.as_fd(), dir) {
            tracing::warn!(dir = %dir.display(), error = %e, "a new directory is not watched");
        }
        let depth = dir.strip_prefix(&self.target.path).map_or(1, |r| r.components().count() + 1);
        let found = self.scan_from(fd, dir, depth).unwrap_or_else(|(known, e)| {
            tracing::warn!(dir = %dir.display(), error = %e, "part of a new directory is not watched");
            known
        });
        for (path, st) in found {
            if self.known.contains_key(&path) {
                continue;
            }
            out.push(Output::Change(WatchEvent {
                kind: "created".into(),
                path: path.display().to_string(),
                is_dir: st.0 == Kind::Directory,
                old_path: None,
            }));
            if self.known.len() < MAX_KNOWN {
                self.known.insert(path, st);
            }
        }
    }

    fn forget_below(&mut self, dir: &Path, out: &mut Vec<Output>) {
        let mut gone: Vec<(PathBuf, bool)> = self
            .known
            .iter()
            .filter(|(p, _)| p.starts_with(dir) && p.as_path() != dir)
            .map(|(p, st)| (p.clone(), st.0 == Kind::Directory))
            .collect();
        gone.sort();
        for (path, is_dir) in gone.into_iter().rev() {
            self.known.remove(&path);
            out.push(Output::Change(WatchEvent {
                kind: "deleted".into(),
                path: path.display().to_string(),
                is_dir,
                old_path: None,
            }));
        }
    }

    fn rescan(&self) -> Known {
        let rel = self.target.relative().to_path_buf();
        match safe::open_beneath(&self.target.root, &rel, dir_flags(), Mode::empty()) {
            Ok(fd) => self.scan_from(fd, &self.target.path.clone(), 1).unwrap_or_else(|(known, _)| known),
            Err(_) => Known::new(),
        }
    }

    /// What is below the directory `fd` (at `path`, whose entries are at
    /// `depth`), bounded; a recursive watch watches each directory it enters.
    /// When the watch bounds are reached, what was found so far and why.
    fn scan_from(&self, fd: std::os::fd::OwnedFd, path: &Path, depth: usize) -> Result<Known, (Known, FsError)> {
        let mut known = Known::new();
        let mut failed = None;
        let nesting = if self.options.recursive { MAX_NESTING } else { 1 };
        let _ = walk(fd, path, &mut |entry| {
            if known.len() >= MAX_KNOWN {
                return Flow::Stop;
            }
            if !super::list::visible(&self.guard, entry) {
                return Flow::Skip;
            }
            known.insert(entry.path.clone(), (entry.stat.kind, entry.stat.size, entry.stat.modified, entry.stat.mode));
            if entry.depth + depth > nesting {
                return Flow::Skip;
            }
            if entry.stat.is_dir() {
                if let Err(e) = self.subscription.add_at(entry.dir, entry.name, &entry.path) {
                    failed = Some(e);
                    return Flow::Stop;
                }
            }
            Flow::Descend
        });
        match failed {
            None => Ok(known),
            Some(e) => Err((known, e)),
        }
    }
}
