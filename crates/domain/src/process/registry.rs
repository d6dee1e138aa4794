//! The one registry of the daemon's supervised children that clients
//! address by pid, and the process limits of every exec endpoint.
//!
//! Both planes view it: the native `/process/*` endpoints
//! ([`super::table`]) and envd's `process.Process` (`crate::envd::processes`).
//! Each plane keeps its own detail in an [`Entry`] (its pipes, its capture,
//! its terminal) and sees only its own entries, so neither plane's wire
//! changes; what they share is here, once: the pid space (OS pids, as the
//! kernel, `kill -0 <pid>` and E2B's envd know them), ownership by identity,
//! retention of exited processes ([`RETAIN_EXITED_FOR`], at most
//! [`MAX_EXITED`]) and the slots under `max_processes`
//! ([`DEFAULT_MAX_PROCESSES`] for background processes).
//!
//! A registry belongs to one daemon (its `AppState`), so limits are per
//! daemon. An entry's pid is only a name: signals go through its
//! [`Job`](super::Job), which refuses once the child is reaped, so a
//! recycled pid never reaches another process. An exited entry whose pid
//! the kernel hands to a new child is replaced by the new one.

use std::any::Any;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

use super::ProcessError;
use crate::policy::Viewer;

/// How long an exited process stays queryable.
pub const RETAIN_EXITED_FOR: Duration = Duration::from_secs(600);
/// How many exited processes stay queryable.
pub const MAX_EXITED: usize = 64;
/// `max_processes` of background processes when the policy sets none, as the reference.
pub const DEFAULT_MAX_PROCESSES: u64 = 100;

/// Which kind of run a process slot is for; each has its own count.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SlotKind {
    /// `/process/start` and envd's `Start`.
    Background,
    /// `/shell`.
    Shell,
    /// `/shell/stream`.
    Stream,
}

/// A reserved place under `max_processes`; released when dropped.
pub struct Slot {
    inner: Arc<Inner>,
    kind: SlotKind,
}

impl std::fmt::Debug for Slot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Slot").field("kind", &self.kind).finish()
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut table = self.inner.lock();
        let count = table.live.entry(self.kind).or_default();
        *count = count.saturating_sub(1);
    }
}

/// One registered process: what both planes share, and the plane's `detail`.
pub struct Entry<T> {
    pid: i32,
    seq: u64,
    owner: String,
    ended: OnceLock<Instant>,
    detail: T,
}

impl<T> std::fmt::Debug for Entry<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Entry").field("pid", &self.pid).field("owner", &self.owner).finish_non_exhaustive()
    }
}

impl<T> Entry<T> {
    /// The process's OS pid.
    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// Registration order (a later start has a larger number).
    pub fn seq(&self) -> u64 {
        self.seq
    }

    /// The identity that started it (see [`crate::policy::owner`]).
    pub fn owner(&self) -> &str {
        &self.owner
    }

    /// Records that the process has ended (its retention starts now).
    pub fn mark_ended(&self) {
        let _ = self.ended.set(Instant::now());
    }

    /// Whether [`mark_ended`](Entry::mark_ended) was called.
    pub fn has_ended(&self) -> bool {
        self.ended.get().is_some()
    }
}

impl<T> std::ops::Deref for Entry<T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.detail
    }
}

/// What the registry needs of an entry whatever its plane.
trait Member: Send + Sync {
    fn ended_at(&self) -> Option<Instant>;
    fn owner(&self) -> &str;
    fn any(self: Arc<Self>) -> Arc<dyn Any + Send + Sync>;
}

impl<T: Send + Sync + 'static> Member for Entry<T> {
    fn ended_at(&self) -> Option<Instant> {
        self.ended.get().copied()
    }

    fn owner(&self) -> &str {
        &self.owner
    }

    fn any(self: Arc<Self>) -> Arc<dyn Any + Send + Sync> {
        self
    }
}

#[derive(Default)]
struct Table {
    entries: HashMap<i32, Arc<dyn Member>>,
    live: HashMap<SlotKind, u64>,
    next_seq: u64,
}

#[derive(Default)]
struct Inner {
    table: Mutex<Table>,
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The registry; clones share it.
#[derive(Clone, Default)]
pub struct Registry {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry").finish_non_exhaustive()
    }
}

impl Registry {
    /// An empty registry.
    pub fn new() -> Self {
        Registry::default()
    }

    /// Runs holding a slot now, of every kind and plane.
    pub fn live(&self) -> u64 {
        self.inner.lock().live.values().sum()
    }

    /// Reserves a slot of `kind` under `limit` (`None`: unlimited).
    ///
    /// # Errors
    /// [`ProcessError::ProcessLimit`] when `limit` runs of that kind are live.
    pub fn reserve(&self, kind: SlotKind, limit: Option<u64>) -> Result<Slot, ProcessError> {
        let mut table = self.inner.lock();
        let count = table.live.entry(kind).or_default();
        if let Some(limit) = limit {
            if *count >= limit {
                return Err(ProcessError::ProcessLimit(limit));
            }
        }
        *count += 1;
        Ok(Slot { inner: Arc::clone(&self.inner), kind })
    }

    /// Registers the process `pid`, started for `owner`, with its plane's `detail`.
    pub fn insert<T: Send + Sync + 'static>(&self, pid: i32, owner: &Viewer, detail: T) -> Arc<Entry<T>> {
        let mut table = self.inner.lock();
        prune(&mut table);
        let seq = table.next_seq;
        table.next_seq += 1;
        let entry = Arc::new(Entry { pid, seq, owner: owner.id().to_string(), ended: OnceLock::new(), detail });
        table.entries.insert(pid, Arc::clone(&entry) as Arc<dyn Member>);
        entry
    }

    /// The entry of plane `T` with this pid, if `viewer` may see it.
    pub fn find<T: Send + Sync + 'static>(&self, pid: i64, viewer: &Viewer) -> Option<Arc<Entry<T>>> {
        let mut table = self.inner.lock();
        prune(&mut table);
        let member = i32::try_from(pid).ok().and_then(|p| table.entries.get(&p).cloned())?;
        drop(table);
        if !viewer.sees(member.owner()) {
            return None;
        }
        member.any().downcast::<Entry<T>>().ok()
    }

    /// Every entry of plane `T` that `viewer` may see, oldest first.
    pub fn visible<T: Send + Sync + 'static>(&self, viewer: &Viewer) -> Vec<Arc<Entry<T>>> {
        let mut table = self.inner.lock();
        prune(&mut table);
        let members: Vec<Arc<dyn Member>> =
            table.entries.values().filter(|m| viewer.sees(m.owner())).cloned().collect();
        drop(table);
        let mut entries: Vec<Arc<Entry<T>>> =
            members.into_iter().filter_map(|m| m.any().downcast::<Entry<T>>().ok()).collect();
        entries.sort_by_key(|e| e.seq);
        entries
    }

    /// Every process the registry knows, running or not, of both planes.
    pub fn len(&self) -> usize {
        self.inner.lock().entries.len()
    }

    /// Whether the registry is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Forgets ended processes past the retention time or count.
fn prune(table: &mut Table) {
    let now = Instant::now();
    let mut ended: Vec<(Instant, i32)> =
        table.entries.iter().filter_map(|(pid, m)| m.ended_at().map(|at| (at, *pid))).collect();
    ended.sort_unstable();
    let excess = ended.len().saturating_sub(MAX_EXITED);
    for (i, (at, pid)) in ended.into_iter().enumerate() {
        if i < excess || now.duration_since(at) > RETAIN_EXITED_FOR {
            table.entries.remove(&pid);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::Identity;

    fn viewer(name: &str) -> Viewer {
        Viewer::new(&Identity::new(name, ["process:run"]), crate::policy::owner::PROCESS_ADMIN)
    }

    #[test]
    fn planes_see_their_own_entries_and_owners_their_own() {
        let registry = Registry::new();
        let (ada, bob) = (viewer("ada"), viewer("bob"));
        registry.insert(10, &ada, "native");
        registry.insert(11, &bob, 7u32);
        assert_eq!(registry.find::<&str>(10, &ada).map(|e| e.detail), Some("native"));
        assert!(registry.find::<u32>(10, &ada).is_none(), "another plane's entry");
        assert!(registry.find::<u32>(11, &ada).is_none(), "another identity's entry");
        assert_eq!(registry.visible::<u32>(&bob).len(), 1);
        let replaced = registry.insert(10, &ada, "recycled pid");
        assert_eq!(registry.find::<&str>(10, &ada).map(|e| e.seq()), Some(replaced.seq()));
        assert_eq!(registry.len(), 2);
    }

    #[test]
    fn ended_entries_are_kept_up_to_the_count() {
        let registry = Registry::new();
        let owner = viewer("ada");
        for pid in 0..(MAX_EXITED as i32 + 5) {
            registry.insert(pid, &owner, ()).mark_ended();
        }
        registry.insert(1000, &owner, ());
        assert_eq!(registry.len(), MAX_EXITED + 1, "the running one and the newest ended ones");
        assert!(registry.find::<()>(0, &owner).is_none(), "the oldest went first");
    }

    #[test]
    fn slots_count_per_kind_under_a_limit() {
        let registry = Registry::new();
        let held = registry.reserve(SlotKind::Background, Some(1)).expect("first");
        assert!(matches!(registry.reserve(SlotKind::Background, Some(1)), Err(ProcessError::ProcessLimit(1))));
        let shell = registry.reserve(SlotKind::Shell, Some(1)).expect("another kind");
        assert_eq!(registry.live(), 2);
        drop((held, shell));
        assert_eq!(registry.live(), 0);
    }
}
