//! What every resumable stream shares: the registry of kept runs a client
//! can come back to by id, and the bookkeeping of the connections attached
//! to one run.
//!
//! `/shell/stream` runs (`process::stream_runs`), file watches
//! (`fs::watch_runs`) and detached code executions (`code::executions`)
//! each keep their own output and cursors; they all keep themselves in a
//! [`Registry`] (ids that never repeat those of an earlier daemon, found
//! only by their owner) and count their connections with a [`Presence`]
//! (how long no client has been attached, which connection is the newest).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::watch;

use crate::policy::Viewer;

/// Something kept for its owner.
pub trait Owned {
    /// The owner recorded when it was created ([`Viewer::id`]).
    fn owner(&self) -> &str;
}

/// The kept runs of one kind, by id.
#[derive(Debug)]
pub struct Registry<T> {
    items: Mutex<HashMap<u64, Arc<T>>>,
    next: AtomicU64,
}

impl<T> Default for Registry<T> {
    fn default() -> Self {
        // Ids of one daemon never repeat those of an earlier one, so an old id is unknown, not another run's.
        let seed = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(1, |d| d.as_micros());
        Registry { items: Mutex::new(HashMap::new()), next: AtomicU64::new(u64::try_from(seed).unwrap_or(1)) }
    }
}

impl<T: Owned> Registry<T> {
    /// Keeps what `make` builds with a fresh id.
    pub fn insert(&self, make: impl FnOnce(u64) -> T) -> Arc<T> {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let item = Arc::new(make(id));
        self.lock().insert(id, Arc::clone(&item));
        item
    }

    /// The run `id`, if `viewer` may see it (another owner's is not found).
    pub fn find(&self, id: u64, viewer: &Viewer) -> Option<Arc<T>> {
        self.lock().get(&id).filter(|item| viewer.sees(item.owner())).cloned()
    }

    /// Forgets the run `id`.
    pub fn remove(&self, id: u64) {
        self.lock().remove(&id);
    }

    /// The ids kept, oldest first.
    pub fn ids(&self) -> Vec<u64> {
        let mut ids: Vec<u64> = self.lock().keys().copied().collect();
        ids.sort_unstable();
        ids
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Arc<T>>> {
        self.items.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The connections attached to one run: how many, and the newest one's
/// generation (so a run that admits one reader can stop a superseded one).
#[derive(Debug)]
pub struct Presence {
    /// (connections attached, the newest connection's generation).
    attached: watch::Sender<(usize, u64)>,
}

impl Default for Presence {
    fn default() -> Self {
        Presence { attached: watch::channel((0, 0)).0 }
    }
}

impl Presence {
    /// Counts a new connection; returns its generation.
    pub fn join(&self) -> u64 {
        let mut generation = 0;
        self.attached.send_modify(|(count, newest)| {
            *count += 1;
            *newest += 1;
            generation = *newest;
        });
        generation
    }

    /// Uncounts a connection (when it is dropped).
    pub fn leave(&self) {
        self.attached.send_modify(|(count, _)| *count = count.saturating_sub(1));
    }

    /// Connections attached now.
    pub fn count(&self) -> usize {
        self.attached.borrow().0
    }

    /// A receiver of (count, newest generation), to notice a newer connection.
    pub fn subscribe(&self) -> watch::Receiver<(usize, u64)> {
        self.attached.subscribe()
    }

    /// Resolves once no connection has been attached for `grace`.
    pub async fn abandoned(&self, grace: Duration) {
        let mut attached = self.attached.subscribe();
        loop {
            let _ = attached.wait_for(|(count, _)| *count == 0).await;
            let back = attached.wait_for(|(count, _)| *count > 0);
            if tokio::time::timeout(grace, back).await.is_err() {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::Identity;

    struct Item(String);

    impl Owned for Item {
        fn owner(&self) -> &str {
            &self.0
        }
    }

    #[test]
    fn another_owner_does_not_find_a_run_and_ids_grow() {
        let registry = Registry::default();
        let a = registry.insert(|_| Item("alice".into()));
        let b = registry.insert(|_| Item("bob".into()));
        let ids = registry.ids();
        assert_eq!(ids.len(), 2);
        assert!(ids[0] < ids[1]);
        let alice = Viewer::new(&Identity::new("alice", ["process:run"]), "process:admin");
        assert!(registry.find(ids[0], &alice).is_some_and(|i| Arc::ptr_eq(&i, &a)));
        assert!(registry.find(ids[1], &alice).is_none());
        assert!(registry.find(ids[1], &Viewer::admin()).is_some_and(|i| Arc::ptr_eq(&i, &b)));
        registry.remove(ids[1]);
        assert!(registry.find(ids[1], &Viewer::admin()).is_none());
    }

    #[tokio::test]
    async fn abandoned_waits_for_a_grace_without_connections() {
        let presence = Arc::new(Presence::default());
        assert_eq!((presence.join(), presence.join()), (1, 2));
        let waiting = tokio::spawn({
            let presence = Arc::clone(&presence);
            async move { presence.abandoned(Duration::from_millis(50)).await }
        });
        presence.leave();
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(!waiting.is_finished(), "one connection is still attached");
        presence.leave();
        assert_eq!(presence.count(), 0);
        tokio::time::timeout(Duration::from_secs(5), waiting).await.expect("abandoned").expect("task");
    }
}
