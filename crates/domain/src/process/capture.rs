//! The bounded, cursor-addressable output log of a process, and the
//! subscriptions that make it lossless while someone listens.
//!
//! [`Capture`] keeps the newest events of a process up to a byte budget,
//! numbered by one sequence across stdout and stderr, each with its byte
//! offset in the whole output. Two kinds of reader:
//!
//! - A polling reader ([`Capture::read`]) holds its own cursor and holds
//!   nothing back: one that falls behind the budget learns that it lagged.
//! - A [`Subscription`] is an attached reader: while it has not read an
//!   event, the writer does not evict it, it waits ([`Capture::push`] is
//!   async, so the pipe fills and the process blocks on its writes). Output
//!   is never dropped silently under an attached reader.
//!
//! One slow subscriber must not freeze the process for everyone: a
//! subscriber is *released* (stops holding the writer back; it reads on,
//! and learns exactly what it lost) when
//! - it has been at the eviction edge for [`OUTPACED_AFTER`] while another
//!   subscriber keeps up (so a fast reader is never held back longer than
//!   that by a slower one), or
//! - it has read nothing for [`STALLED_AFTER`] while the writer waits on it
//!   (a client that stopped reading, alone or not).
//!
//! Losses are counted exactly, in events and bytes: a subscriber's
//! [`Batch::lost`] says what was evicted between its cursor and what it read next.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::Notify;
use tokio::time::Instant;

use super::output::Stream;

/// A subscriber at the eviction edge this long, while another keeps up, is released.
pub const OUTPACED_AFTER: Duration = Duration::from_secs(2);
/// A subscriber that read nothing this long while the writer waits on it is released.
pub const STALLED_AFTER: Duration = Duration::from_secs(30);

/// When a subscriber is released (see the module documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    /// At the eviction edge this long while another subscriber keeps up.
    pub outpaced: Duration,
    /// Nothing read this long while the writer waits on it.
    pub stalled: Duration,
}

impl Default for Bounds {
    fn default() -> Self {
        Bounds { outpaced: OUTPACED_AFTER, stalled: STALLED_AFTER }
    }
}

/// Bookkeeping cost charged per event on top of its bytes, so a flood of
/// tiny writes cannot grow memory past the budget.
pub(crate) const EVENT_OVERHEAD: usize = 64;

/// One captured chunk of output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CapturedEvent {
    /// Position in the process's output, across both streams.
    pub seq: u64,
    /// Which stream.
    pub stream: Stream,
    /// The bytes (never ending inside a UTF-8 character).
    pub bytes: Bytes,
    /// Bytes of output (both streams) before this event.
    pub offset: u64,
}

/// What a polling reader gets for a cursor.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CaptureRead {
    /// Retained events with `seq >= since`.
    pub events: Vec<CapturedEvent>,
    /// The cursor to pass next time.
    pub next: u64,
    /// Whether the budget ever dropped an event.
    pub dropped: bool,
    /// Whether events between `since` and the first returned were dropped.
    pub lagged: bool,
    /// Whether a stream may still produce output.
    pub open: bool,
}

/// Output a reader did not get: evicted before it read it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Lost {
    /// Events lost.
    pub events: u64,
    /// Bytes lost.
    pub bytes: u64,
}

impl Lost {
    /// Whether nothing was lost.
    pub fn is_none(self) -> bool {
        self.events == 0
    }

    fn add(&mut self, other: Lost) {
        self.events += other.events;
        self.bytes += other.bytes;
    }
}

/// Why a subscriber stopped holding the writer back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Release {
    /// Another subscriber kept up while this one sat at the eviction edge for [`OUTPACED_AFTER`].
    Outpaced,
    /// It read nothing for [`STALLED_AFTER`] while the writer waited on it.
    Stalled,
}

impl Release {
    /// Why, in words.
    pub fn describe(self) -> String {
        match self {
            Release::Outpaced => format!(
                "it read slower than another reader of the same process for over {} s",
                OUTPACED_AFTER.as_secs()
            ),
            Release::Stalled => format!("it read nothing for {} s while the buffer was full", STALLED_AFTER.as_secs()),
        }
    }
}

/// Why a subscription cannot move to a position.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SeekError {
    /// The position is past the output produced so far.
    #[error("the position is past the output produced so far")]
    Future,
    /// The position does not match this output.
    #[error("the position does not match this output")]
    Mismatch,
}

/// What a subscription reads at once.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Batch {
    /// Events in order, from the subscription's cursor.
    pub events: Vec<CapturedEvent>,
    /// Output evicted between the cursor and the first of `events`.
    pub lost: Lost,
    /// Whether a stream may still produce output.
    pub open: bool,
}

#[derive(Debug)]
struct Holder {
    cursor: u64,
    offset: u64,
    last_progress: Instant,
    /// Since when the writer has found it at the eviction edge (cleared once it is half a buffer behind or less).
    edge_since: Option<Instant>,
    released: Option<Release>,
    lost: Lost,
}

#[derive(Debug)]
struct Ring {
    events: VecDeque<CapturedEvent>,
    size: usize,
    max: usize,
    next_seq: u64,
    next_offset: u64,
    dropped: bool,
    open_streams: usize,
    holders: HashMap<u64, Holder>,
    next_holder: u64,
    writer_waiting: bool,
}

impl Ring {
    fn first_seq(&self) -> u64 {
        self.events.front().map_or(self.next_seq, |e| e.seq)
    }

    /// The byte offset of event `seq` (held, or the next one).
    fn offset_of(&self, seq: u64) -> u64 {
        let first = self.first_seq();
        usize::try_from(seq.saturating_sub(first))
            .ok()
            .and_then(|i| self.events.get(i))
            .map_or(self.next_offset, |e| e.offset)
    }

    fn evict_front(&mut self) {
        if let Some(old) = self.events.pop_front() {
            self.size -= old.bytes.len() + EVENT_OVERHEAD;
            self.dropped = true;
        }
    }

    /// Evicts until `need` more bytes fit, unless a holding subscriber has
    /// not read the oldest event: then the instant to look again (releasing
    /// whoever is past its bound on the way).
    fn make_room(&mut self, need: usize, now: Instant, bounds: Bounds) -> Option<Instant> {
        while self.size + need > self.max {
            let seq = self.events.front()?.seq;
            let keeping_up = |h: &Holder| h.released.is_none() && h.cursor > seq && h.edge_since.is_none();
            let someone_keeps_up = self.holders.values().any(keeping_up);
            let mut wake: Option<Instant> = None;
            for holder in self.holders.values_mut().filter(|h| h.released.is_none() && h.cursor <= seq) {
                let edge = *holder.edge_since.get_or_insert(now);
                let stalled_at = holder.last_progress + bounds.stalled;
                let outpaced_at = someone_keeps_up.then(|| edge + bounds.outpaced);
                if now >= stalled_at {
                    holder.released = Some(Release::Stalled);
                } else if outpaced_at.is_some_and(|at| now >= at) {
                    holder.released = Some(Release::Outpaced);
                } else {
                    let at = outpaced_at.map_or(stalled_at, |o| o.min(stalled_at));
                    wake = Some(wake.map_or(at, |w| w.min(at)));
                }
            }
            if wake.is_some() {
                return wake;
            }
            self.evict_front();
        }
        None
    }
}

/// The bounded output log of one process; see the module documentation.
#[derive(Debug)]
pub struct Capture {
    ring: Mutex<Ring>,
    bounds: Bounds,
    /// New output or a closed stream.
    changed: Notify,
    /// A subscriber read on, detached or was released.
    progressed: Notify,
}

impl Capture {
    /// A log keeping about `max_bytes` of the newest output of `streams` streams.
    pub fn new(max_bytes: usize, streams: usize) -> Self {
        let ring = Ring {
            events: VecDeque::new(),
            size: 0,
            max: max_bytes,
            next_seq: 0,
            next_offset: 0,
            dropped: false,
            open_streams: streams,
            holders: HashMap::new(),
            next_holder: 0,
            writer_waiting: false,
        };
        Capture { ring: Mutex::new(ring), bounds: Bounds::default(), changed: Notify::new(), progressed: Notify::new() }
    }

    /// The same, releasing subscribers after other bounds than the defaults.
    pub fn with_bounds(max_bytes: usize, streams: usize, bounds: Bounds) -> Self {
        Capture { bounds, ..Capture::new(max_bytes, streams) }
    }

    fn lock(&self) -> MutexGuard<'_, Ring> {
        self.ring.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Appends a chunk. Over budget, the oldest events go, unless a
    /// subscriber still holds one: then this waits until it is read, or
    /// until that subscriber is released (see the module documentation).
    pub async fn push(&self, stream: Stream, bytes: Bytes) {
        if bytes.is_empty() {
            return;
        }
        let need = bytes.len() + EVENT_OVERHEAD;
        loop {
            let progressed = self.progressed.notified();
            tokio::pin!(progressed);
            progressed.as_mut().enable();
            let wake = {
                let mut ring = self.lock();
                let wake = ring.make_room(need, Instant::now(), self.bounds);
                ring.writer_waiting = wake.is_some();
                if wake.is_none() {
                    let (seq, offset) = (ring.next_seq, ring.next_offset);
                    ring.next_seq += 1;
                    ring.next_offset += bytes.len() as u64;
                    ring.size += need;
                    ring.events.push_back(CapturedEvent { seq, stream, bytes: bytes.clone(), offset });
                }
                wake
            };
            let Some(at) = wake else { break };
            tokio::select! {
                () = &mut progressed => {}
                () = tokio::time::sleep_until(at) => {}
            }
        }
        self.changed.notify_waiters();
    }

    /// Marks one stream as ended.
    pub fn close_stream(&self) {
        {
            let mut ring = self.lock();
            ring.open_streams = ring.open_streams.saturating_sub(1);
        }
        self.changed.notify_waiters();
    }

    /// Retained events from cursor `since` on.
    pub fn read(&self, since: u64) -> CaptureRead {
        let ring = self.lock();
        let first = ring.first_seq();
        CaptureRead {
            events: ring.events.iter().filter(|e| e.seq >= since).cloned().collect(),
            next: ring.next_seq,
            dropped: ring.dropped,
            lagged: since < first,
            open: ring.open_streams > 0,
        }
    }

    /// The cursor after the newest event, and whether a stream is still open.
    pub fn position(&self) -> (u64, bool) {
        let ring = self.lock();
        (ring.next_seq, ring.open_streams > 0)
    }

    /// Whether the writer is waiting for a subscriber to read.
    pub fn writer_waiting(&self) -> bool {
        self.lock().writer_waiting
    }

    /// Bytes of output so far, both streams.
    pub fn total_bytes(&self) -> u64 {
        self.lock().next_offset
    }

    /// Waits until there is an event at or after `since`, or every stream has ended.
    pub async fn wait_beyond(&self, since: u64) {
        loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let (next, open) = self.position();
            if next > since || !open {
                return;
            }
            notified.await;
        }
    }

    /// Attaches a reader from the first event of the output: it holds the
    /// writer back until it has read each event (or is released).
    pub fn subscribe(self: &Arc<Self>) -> Subscription {
        let mut ring = self.lock();
        let id = ring.next_holder;
        ring.next_holder += 1;
        let holder = Holder {
            cursor: 0,
            offset: 0,
            last_progress: Instant::now(),
            edge_since: None,
            released: None,
            lost: Lost::default(),
        };
        ring.holders.insert(id, holder);
        Subscription { capture: Arc::clone(self), id }
    }
}

/// An attached reader of a [`Capture`]; detaches when dropped.
#[derive(Debug)]
pub struct Subscription {
    capture: Arc<Capture>,
    id: u64,
}

impl Subscription {
    /// The next events from its cursor, at least one when any is held and
    /// about `max_bytes` at most, with what was lost before them.
    pub fn read(&self, max_bytes: usize) -> Batch {
        let batch = {
            let mut ring = self.capture.lock();
            let (first, next_offset, max, open) = (ring.first_seq(), ring.next_offset, ring.max, ring.open_streams > 0);
            let first_offset = ring.offset_of(first);
            let Some(holder) = ring.holders.get(&self.id) else { return Batch::default() };
            let (mut cursor, mut offset) = (holder.cursor, holder.offset);
            let mut lost = Lost::default();
            if cursor < first {
                lost = Lost { events: first - cursor, bytes: first_offset.saturating_sub(offset) };
                (cursor, offset) = (first, first_offset);
            }
            let skip = usize::try_from(cursor - first).unwrap_or(usize::MAX);
            let mut events = Vec::new();
            let mut size = 0;
            for event in ring.events.iter().skip(skip) {
                if !events.is_empty() && size + event.bytes.len() > max_bytes {
                    break;
                }
                size += event.bytes.len();
                events.push(event.clone());
            }
            if let Some(last) = events.last() {
                cursor = last.seq + 1;
                offset = last.offset + last.bytes.len() as u64;
            }
            let Some(holder) = ring.holders.get_mut(&self.id) else { return Batch::default() };
            let moved = cursor != holder.cursor;
            holder.lost.add(lost);
            (holder.cursor, holder.offset) = (cursor, offset);
            if moved {
                holder.last_progress = Instant::now();
            }
            if next_offset - offset <= (max / 2) as u64 {
                holder.edge_since = None;
            }
            Batch { events, lost, open }
        };
        if !batch.events.is_empty() || !batch.lost.is_none() {
            self.capture.progressed.notify_waiters();
        }
        batch
    }

    /// Moves its cursor to event `cursor`, which starts at byte `offset` of
    /// the output (a resume: back to output still held, or to evicted
    /// output, which the next read reports lost).
    ///
    /// # Errors
    /// [`SeekError`] for a position past the output, or one that does not
    /// match the output still held.
    pub fn seek(&self, cursor: u64, offset: u64) -> Result<(), SeekError> {
        {
            let mut ring = self.capture.lock();
            let first = ring.first_seq();
            if cursor > ring.next_seq || offset > ring.next_offset {
                return Err(SeekError::Future);
            }
            let held_offset = ring.offset_of(cursor);
            if (cursor >= first && held_offset != offset) || (cursor < first && offset > ring.offset_of(first)) {
                return Err(SeekError::Mismatch);
            }
            let Some(holder) = ring.holders.get_mut(&self.id) else { return Ok(()) };
            (holder.cursor, holder.offset) = (cursor, offset);
            holder.last_progress = Instant::now();
        }
        self.capture.progressed.notify_waiters();
        Ok(())
    }

    /// Waits until there is something beyond its cursor, or every stream has ended.
    pub async fn wait(&self) {
        let cursor = self.capture.lock().holders.get(&self.id).map_or(u64::MAX, |h| h.cursor);
        self.capture.wait_beyond(cursor).await;
    }

    /// All it lost so far.
    pub fn lost(&self) -> Lost {
        self.capture.lock().holders.get(&self.id).map_or(Lost::default(), |h| h.lost)
    }

    /// Why it no longer holds the writer back, if it was released.
    pub fn released(&self) -> Option<Release> {
        self.capture.lock().holders.get(&self.id).and_then(|h| h.released)
    }

    /// The capture it reads.
    pub fn capture(&self) -> &Arc<Capture> {
        &self.capture
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        self.capture.lock().holders.remove(&self.id);
        self.capture.progressed.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk(byte: u8) -> Bytes {
        Bytes::from(vec![byte; 4])
    }

    #[tokio::test]
    async fn capture_is_bounded_ordered_and_reports_drops_and_lag() {
        let capture = Capture::new(3 * (EVENT_OVERHEAD + 4), 2);
        for i in 0..5u8 {
            let stream = if i % 2 == 0 { Stream::Stdout } else { Stream::Stderr };
            capture.push(stream, chunk(b'0' + i)).await;
        }
        let all = capture.read(0);
        assert_eq!(all.events.iter().map(|e| e.seq).collect::<Vec<_>>(), [2, 3, 4]);
        assert_eq!(all.events.iter().map(|e| e.offset).collect::<Vec<_>>(), [8, 12, 16]);
        assert!(all.dropped && all.lagged && all.open);
        assert_eq!(all.next, 5);
        let tail = capture.read(3);
        assert_eq!(tail.events.len(), 2);
        assert!(!tail.lagged);
        assert_eq!(tail.events[0].stream, Stream::Stderr);
        assert!(capture.read(5).events.is_empty());
    }

    #[tokio::test]
    async fn one_event_larger_than_the_budget_is_kept() {
        let capture = Capture::new(10, 1);
        capture.push(Stream::Stdout, Bytes::from_static(b"0123456789abcdef")).await;
        assert_eq!(capture.read(0).events.len(), 1);
    }

    #[tokio::test]
    async fn waiting_readers_wake_on_output_and_on_close() {
        // The test runtime has one thread: yielding lets the waiter run until it waits.
        let capture = Arc::new(Capture::new(1024, 1));
        let waiter = tokio::spawn({
            let capture = capture.clone();
            async move { capture.wait_beyond(0).await }
        });
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished(), "nothing to read yet");
        capture.push(Stream::Stdout, Bytes::from_static(b"x")).await;
        let woken = tokio::time::timeout(Duration::from_secs(5), waiter).await;
        woken.expect("woken by output").expect("waiter");
        let waiter = tokio::spawn({
            let capture = capture.clone();
            async move { capture.wait_beyond(1).await }
        });
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished(), "nothing beyond the cursor yet");
        capture.close_stream();
        let woken = tokio::time::timeout(Duration::from_secs(5), waiter).await;
        woken.expect("woken by close").expect("waiter");
    }

    const SHORT: Bounds = Bounds { outpaced: Duration::from_millis(200), stalled: Duration::from_millis(400) };

    /// Pushes `count` 4-byte events from a task; returns it.
    fn writer(capture: &Arc<Capture>, count: u8) -> tokio::task::JoinHandle<()> {
        let capture = Arc::clone(capture);
        tokio::spawn(async move {
            for i in 0..count {
                capture.push(Stream::Stdout, chunk(i)).await;
            }
            capture.close_stream();
        })
    }

    #[tokio::test]
    async fn a_subscriber_holds_the_writer_until_it_reads() {
        let capture = Arc::new(Capture::with_bounds(2 * (EVENT_OVERHEAD + 4), 1, SHORT));
        let reader = capture.subscribe();
        let writing = writer(&capture, 6);
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(capture.writer_waiting() && !writing.is_finished(), "the third event waits for the reader");
        assert_eq!(capture.position().0, 2);
        let mut seen = Vec::new();
        while seen.len() < 6 {
            let batch = reader.read(1 << 20);
            assert!(batch.lost.is_none());
            seen.extend(batch.events.iter().map(|e| e.bytes[0]));
            if batch.events.is_empty() {
                reader.wait().await;
            }
        }
        assert_eq!(seen, [0, 1, 2, 3, 4, 5], "every event, in order");
        writing.await.expect("writer");
        assert!(reader.read(1 << 20).events.is_empty() && reader.lost().is_none() && reader.released().is_none());
    }

    #[tokio::test]
    async fn a_stalled_subscriber_is_released_with_exact_losses() {
        let capture = Arc::new(Capture::with_bounds(2 * (EVENT_OVERHEAD + 4), 1, SHORT));
        let reader = capture.subscribe();
        let started = Instant::now();
        writer(&capture, 6).await.expect("writer");
        assert!(started.elapsed() >= SHORT.stalled, "held until the stall bound");
        assert_eq!(reader.released(), Some(Release::Stalled));
        let batch = reader.read(1 << 20);
        assert_eq!(batch.lost, Lost { events: 4, bytes: 16 }, "exactly the evicted events");
        assert_eq!(batch.events.iter().map(|e| e.seq).collect::<Vec<_>>(), [4, 5]);
        assert_eq!(reader.lost(), batch.lost);
    }

    #[tokio::test]
    async fn a_slow_subscriber_holds_a_fast_one_back_at_most_the_outpaced_bound() {
        let capture = Arc::new(Capture::with_bounds(4 * (EVENT_OVERHEAD + 4), 1, SHORT));
        let (slow, fast) = (capture.subscribe(), capture.subscribe());
        let writing = writer(&capture, 40);
        let started = Instant::now();
        let mut fast_seen = 0;
        loop {
            let batch = fast.read(1 << 20);
            assert!(batch.lost.is_none(), "the fast reader loses nothing");
            fast_seen += batch.events.len();
            if batch.events.is_empty() {
                if !batch.open {
                    break;
                }
                fast.wait().await;
            }
        }
        assert_eq!(fast_seen, 40);
        let held = started.elapsed();
        assert!(held >= SHORT.outpaced && held < SHORT.stalled, "held back by the outpaced bound only: {held:?}");
        writing.await.expect("writer");
        assert_eq!(slow.released(), Some(Release::Outpaced));
        let batch = slow.read(1 << 20);
        assert_eq!(batch.lost.events + batch.events.len() as u64, 40, "what it gets plus what it lost is everything");
        assert_eq!(batch.lost.bytes, batch.lost.events * 4);
        assert_eq!(batch.events.first().map(|e| e.seq), Some(batch.lost.events));
    }

    #[tokio::test]
    async fn a_subscription_seeks_back_to_held_output_or_reports_the_gap() {
        let capture = Arc::new(Capture::new(2 * (EVENT_OVERHEAD + 4), 1));
        for i in 0..4 {
            capture.push(Stream::Stdout, chunk(i)).await;
        }
        let reader = capture.subscribe();
        assert_eq!(reader.seek(5, 20), Err(SeekError::Future));
        assert_eq!(reader.seek(3, 13), Err(SeekError::Mismatch), "event 3 starts at byte 12");
        assert_eq!(reader.seek(1, 9), Err(SeekError::Mismatch), "before the held output, but past its start");
        reader.seek(3, 12).expect("held");
        let batch = reader.read(1 << 20);
        assert_eq!((batch.lost, batch.events.len()), (Lost::default(), 1));
        reader.seek(1, 4).expect("evicted");
        let batch = reader.read(1 << 20);
        assert_eq!(batch.lost, Lost { events: 1, bytes: 4 });
        assert_eq!(batch.events.iter().map(|e| e.seq).collect::<Vec<_>>(), [2, 3]);
        reader.seek(4, 16).expect("the end");
        assert!(reader.read(1 << 20).events.is_empty());
    }

    #[tokio::test]
    async fn a_dropped_subscriber_releases_the_writer_at_once() {
        let capture = Arc::new(Capture::new(EVENT_OVERHEAD + 4, 1));
        let reader = capture.subscribe();
        let writing = writer(&capture, 3);
        tokio::task::yield_now().await;
        assert!(capture.writer_waiting());
        drop(reader);
        tokio::time::timeout(Duration::from_millis(100), writing).await.expect("not held").expect("writer");
    }
}
