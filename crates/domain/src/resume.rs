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
//! Streams of events keep them in a [`Ring`] (bounded in count and bytes,
//! numbered, exact gaps): `/files/watch` (`fs::watch_runs`), envd's
//! `WatchDir` watches (`envd::dir_watches`) and the streams of an MCP
//! session (`http::mcp::streams`). Clients name a position with a cursor of numbers
//! joined by `:`, read by [`parse_cursor`].

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

/// A cursor that is not one this server gives.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed cursor {0:?}")]
pub struct MalformedCursor(
    /// The text given, cut to 64 characters (for the caller's own message).
    pub String,
);

/// Parses a cursor of `N` numbers joined by `:` (`<id>:<n>`, ...),
/// ignoring whitespace around it.
///
/// # Errors
/// [`MalformedCursor`] for anything else (another count, a part that is not a `u64`).
pub fn parse_cursor<const N: usize>(text: &str) -> Result<[u64; N], MalformedCursor> {
    let malformed = || MalformedCursor(text.chars().take(64).collect());
    let mut parts = text.trim().split(':');
    let mut numbers = [0; N];
    for number in &mut numbers {
        *number = parts.next().and_then(|p| p.parse().ok()).ok_or_else(malformed)?;
    }
    match parts.next() {
        Some(_) => Err(malformed()),
        None => Ok(numbers),
    }
}

/// What a reader at some position finds in a [`Ring`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Slot<T> {
    /// This many items from the position on are no longer held; read on from the oldest held one.
    Gap(u64),
    /// The item at the position.
    Item(T),
    /// Nothing at the position yet.
    Pending,
    /// The ring ended before the position.
    Ended,
}

#[derive(Debug)]
struct Held<T> {
    /// Sequence number of the oldest held item.
    first: u64,
    items: std::collections::VecDeque<T>,
    /// The size of each held item, as its producer counted it (0 when not counted).
    sizes: std::collections::VecDeque<usize>,
    /// The sum of `sizes`.
    bytes: usize,
    /// Whether the last item is in (nothing comes after it).
    ended: bool,
}

impl<T> Held<T> {
    fn next(&self) -> u64 {
        self.first + self.items.len() as u64
    }

    /// How many of the oldest items a push of an item of `size` bytes
    /// evicts: past `capacity` items or `max_bytes` bytes (the new item is
    /// always kept, even alone over the bytes).
    fn evicted_by(&self, size: usize, capacity: usize, max_bytes: usize) -> usize {
        let mut evicted = self.items.len().saturating_sub(capacity - 1);
        let mut bytes = self.bytes - self.sizes.iter().take(evicted).sum::<usize>();
        for held in self.sizes.iter().skip(evicted) {
            if bytes.saturating_add(size) <= max_bytes {
                break;
            }
            bytes -= held;
            evicted += 1;
        }
        evicted
    }
}

/// A bounded ring of items numbered from 1, for streams of events that a
/// client resumes by sequence number. It never waits: when full (in items,
/// or in bytes for items pushed with their size), the oldest items go, and
/// a reader that asks for an item no longer held is told exactly how many
/// it missed ([`Slot::Gap`]). A producer that may be held back waits for
/// [`Ring::room`] (or [`Ring::room_for`]) before pushing.
#[derive(Debug)]
pub struct Ring<T> {
    capacity: usize,
    max_bytes: usize,
    held: Mutex<Held<T>>,
    /// The next sequence number, sent on every push (`u64::MAX` once ended).
    pushed: watch::Sender<u64>,
    /// The position of the reader that holds the producer back ([`Ring::room`]).
    read: watch::Sender<u64>,
}

impl<T: Clone> Ring<T> {
    /// An empty ring holding at most `capacity` items (at least one).
    pub fn new(capacity: usize) -> Self {
        Ring::with_bytes(capacity, usize::MAX)
    }

    /// An empty ring holding at most `capacity` items and, of the items
    /// pushed with [`Ring::push_sized`], `max_bytes` bytes (its newest item
    /// is kept whatever its size).
    pub fn with_bytes(capacity: usize, max_bytes: usize) -> Self {
        let held = Held {
            first: 1,
            items: std::collections::VecDeque::new(),
            sizes: std::collections::VecDeque::new(),
            bytes: 0,
            ended: false,
        };
        Ring {
            capacity: capacity.max(1),
            max_bytes,
            held: Mutex::new(held),
            pushed: watch::channel(1).0,
            read: watch::channel(1).0,
        }
    }

    fn held(&self) -> std::sync::MutexGuard<'_, Held<T>> {
        self.held.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Adds an item (`last`: nothing comes after it), evicting the oldest
    /// when full. An item after the last one is ignored.
    pub fn push(&self, item: T, last: bool) {
        self.push_sized(item, 0, last);
    }

    /// Adds an item of `size` bytes (`last`: nothing comes after it),
    /// evicting the oldest items past the ring's count or bytes. An item
    /// after the last one is ignored.
    pub fn push_sized(&self, item: T, size: usize, last: bool) {
        let mut held = self.held();
        if held.ended {
            return;
        }
        held.ended = last;
        for _ in 0..held.evicted_by(size, self.capacity, self.max_bytes) {
            held.items.pop_front();
            held.bytes -= held.sizes.pop_front().unwrap_or_default();
            held.first += 1;
        }
        held.items.push_back(item);
        held.sizes.push_back(size);
        held.bytes += size;
        let next = if last { u64::MAX } else { held.next() };
        drop(held);
        self.pushed.send_replace(next);
    }

    /// Ends the ring without a last item: nothing more is pushed.
    pub fn end(&self) {
        self.held().ended = true;
        self.pushed.send_replace(u64::MAX);
    }

    /// The items and bytes held now.
    pub fn held_now(&self) -> (usize, usize) {
        let held = self.held();
        (held.items.len(), held.bytes)
    }

    /// The sequence number the next item gets.
    pub fn next_seq(&self) -> u64 {
        self.held().next()
    }

    /// What is at `seq`.
    pub fn get(&self, seq: u64) -> Slot<T> {
        let held = self.held();
        if seq < held.first {
            return Slot::Gap(held.first - seq);
        }
        let index = usize::try_from(seq - held.first).unwrap_or(usize::MAX);
        match held.items.get(index) {
            Some(item) => Slot::Item(item.clone()),
            None if held.ended => Slot::Ended,
            None => Slot::Pending,
        }
    }

    /// Resolves once an item at `seq` or later was pushed, or the ring ended.
    pub async fn grown_past(&self, seq: u64) {
        let _ = self.pushed.subscribe().wait_for(|next| *next > seq).await;
    }

    /// The position the reader holding the producer back reads next (1 before any).
    pub fn read_mark(&self) -> u64 {
        *self.read.borrow()
    }

    /// Records that the reader holding the producer back reads `seq` next.
    pub fn mark_read(&self, seq: u64) {
        self.read.send_if_modified(|read| {
            let moved = *read != seq;
            *read = seq;
            moved
        });
    }

    /// Resolves once a push would evict no item the holding reader has not
    /// read (the ring has room, or its oldest item was read).
    pub async fn room(&self) {
        self.room_for(0).await;
    }

    /// Resolves once a push of an item of `size` bytes would evict no item
    /// the holding reader has not read.
    pub async fn room_for(&self, size: usize) {
        let mut read = self.read.subscribe();
        loop {
            {
                let held = self.held();
                let evicted = held.evicted_by(size, self.capacity, self.max_bytes) as u64;
                if evicted == 0 || *read.borrow_and_update() >= held.first + evicted {
                    return;
                }
            }
            if read.changed().await.is_err() {
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

    #[test]
    fn cursors_are_exactly_n_numbers_joined_by_colons() {
        assert_eq!(parse_cursor::<2>(" 12:3 "), Ok([12, 3]));
        assert_eq!(parse_cursor::<3>("1:2:3"), Ok([1, 2, 3]));
        for bad in ["", "12", "12:", ":3", "12:3:4", "a:1", "1:-1", "1 :2"] {
            assert_eq!(parse_cursor::<2>(bad), Err(MalformedCursor(bad.to_string())), "{bad}");
        }
        assert_eq!(parse_cursor::<1>(&"9".repeat(100)).map_err(|m| m.0.len()), Err(64), "cut, and too big for a u64");
    }

    #[test]
    fn a_full_ring_evicts_the_oldest_and_counts_the_gap_exactly() {
        let ring = Ring::new(3);
        for i in 1..=5 {
            ring.push(i, i == 5);
        }
        ring.push(6, false);
        assert_eq!(ring.next_seq(), 6, "nothing after the last item");
        assert_eq!(ring.get(1), Slot::Gap(2));
        assert_eq!((ring.get(3), ring.get(5), ring.get(6)), (Slot::Item(3), Slot::Item(5), Slot::Ended));
        let open = Ring::new(2);
        open.push("a", false);
        assert_eq!(open.get(2), Slot::Pending);
    }

    #[tokio::test]
    async fn a_ring_bounded_in_bytes_evicts_until_the_new_item_fits_and_keeps_it_whatever_its_size() {
        let ring = Ring::with_bytes(10, 100);
        for i in 1..=4 {
            ring.push_sized(i, 30, false);
        }
        assert_eq!((ring.get(1), ring.get(2)), (Slot::Gap(1), Slot::Item(2)), "90 bytes after evicting one");
        assert_eq!(ring.held_now(), (3, 90));
        ring.push_sized(5, 500, false);
        assert_eq!((ring.get(4), ring.get(5), ring.held_now()), (Slot::Gap(1), Slot::Item(5), (1, 500)));
        // A reader that has not read item 5 holds back a push that would evict it.
        ring.mark_read(5);
        let waiting = tokio::time::timeout(Duration::from_millis(50), ring.room_for(1)).await;
        assert!(waiting.is_err(), "the unread item would be evicted");
        ring.mark_read(6);
        tokio::time::timeout(Duration::from_secs(5), ring.room_for(1)).await.expect("room once read");
        ring.end();
        assert_eq!(ring.get(6), Slot::Ended);
        tokio::time::timeout(Duration::from_secs(5), ring.grown_past(6))
            .await
            .expect("an ended ring wakes its readers");
    }

    #[tokio::test]
    async fn room_waits_until_the_holding_reader_read_the_oldest() {
        let ring = Arc::new(Ring::new(2));
        ring.push(1, false);
        ring.push(2, false);
        let waiting = tokio::spawn({
            let ring = Arc::clone(&ring);
            async move { ring.room().await }
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!waiting.is_finished(), "the oldest item is unread");
        ring.mark_read(2);
        tokio::time::timeout(Duration::from_secs(5), waiting).await.expect("room").expect("task");
    }
}
