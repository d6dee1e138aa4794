//! Child output: UTF-8-safe chunking, line splitting, and the bounded,
//! cursor-addressable capture of background processes.
//!
//! - Chunks are cut at character boundaries by the one incremental UTF-8
//!   decoder, [`crate::codec::utf8`] (process output, terminal scrollback and
//!   code pipes all use it), so a character is never split across events.
//! - [`LineSplitter`] cuts a byte stream into lines (without the `\n`),
//!   bounding a line's length so memory stays flat on output without newlines.
//! - [`Capture`] keeps the newest events of a process up to a byte budget,
//!   numbered by one sequence across stdout and stderr. Readers hold their
//!   own cursor: the writer never waits for a reader, a reader that falls
//!   behind the budget learns that it lagged.

use std::collections::VecDeque;
use std::sync::{Mutex, MutexGuard, PoisonError};

use bytes::Bytes;

use crate::codec::utf8::complete_len;
use tokio::sync::Notify;

/// Which output stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    /// Standard output.
    Stdout,
    /// Standard error.
    Stderr,
}

impl Stream {
    /// `stdout` or `stderr`.
    pub fn as_str(self) -> &'static str {
        match self {
            Stream::Stdout => "stdout",
            Stream::Stderr => "stderr",
        }
    }
}

/// Splits a byte stream into lines, none longer than `max` bytes.
#[derive(Debug)]
pub struct LineSplitter {
    partial: Vec<u8>,
    max: usize,
}

impl LineSplitter {
    /// A splitter that cuts lines longer than `max` bytes (at a character boundary).
    pub fn new(max: usize) -> Self {
        LineSplitter { partial: Vec::new(), max: max.max(4) }
    }

    /// Adds `bytes`; calls `emit` with every completed line (without its `\n`).
    pub fn push(&mut self, mut bytes: &[u8], mut emit: impl FnMut(Vec<u8>)) {
        while !bytes.is_empty() {
            let room = self.max - self.partial.len();
            match bytes.iter().take(room + 1).position(|b| *b == b'\n') {
                Some(i) => {
                    self.partial.extend_from_slice(&bytes[..i]);
                    emit(std::mem::take(&mut self.partial));
                    bytes = &bytes[i + 1..];
                }
                None => {
                    let take = room.min(bytes.len());
                    self.partial.extend_from_slice(&bytes[..take]);
                    bytes = &bytes[take..];
                    if self.partial.len() >= self.max {
                        let cut = complete_len(&self.partial).max(1);
                        let rest = self.partial.split_off(cut);
                        emit(std::mem::replace(&mut self.partial, rest));
                    }
                }
            }
        }
    }

    /// The last line, if the stream did not end with a newline.
    pub fn finish(&mut self) -> Option<Vec<u8>> {
        (!self.partial.is_empty()).then(|| std::mem::take(&mut self.partial))
    }
}

/// Bookkeeping cost charged per event on top of its bytes, so a flood of
/// tiny writes cannot grow memory past the budget.
const EVENT_OVERHEAD: usize = 64;

/// One captured chunk of output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CapturedEvent {
    /// Position in the process's output, across both streams.
    pub seq: u64,
    /// Which stream.
    pub stream: Stream,
    /// The bytes (never ending inside a UTF-8 character).
    pub bytes: Bytes,
}

/// What a reader gets for a cursor.
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

#[derive(Debug)]
struct Ring {
    events: VecDeque<CapturedEvent>,
    size: usize,
    max: usize,
    next_seq: u64,
    dropped: bool,
    open_streams: usize,
}

/// The bounded output log of one process; see the module documentation.
#[derive(Debug)]
pub struct Capture {
    ring: Mutex<Ring>,
    changed: Notify,
}

impl Capture {
    /// A log keeping about `max_bytes` of the newest output of `streams` streams.
    pub fn new(max_bytes: usize, streams: usize) -> Self {
        let ring = Ring {
            events: VecDeque::new(),
            size: 0,
            max: max_bytes,
            next_seq: 0,
            dropped: false,
            open_streams: streams,
        };
        Capture { ring: Mutex::new(ring), changed: Notify::new() }
    }

    fn lock(&self) -> MutexGuard<'_, Ring> {
        self.ring.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Appends a chunk; the oldest events go when over budget (the newest stays).
    pub fn push(&self, stream: Stream, bytes: Bytes) {
        if bytes.is_empty() {
            return;
        }
        {
            let mut ring = self.lock();
            let seq = ring.next_seq;
            ring.next_seq += 1;
            ring.size += bytes.len() + EVENT_OVERHEAD;
            ring.events.push_back(CapturedEvent { seq, stream, bytes });
            while ring.size > ring.max && ring.events.len() > 1 {
                if let Some(old) = ring.events.pop_front() {
                    ring.size -= old.bytes.len() + EVENT_OVERHEAD;
                    ring.dropped = true;
                }
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
        let first = ring.events.front().map_or(ring.next_seq, |e| e.seq);
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_split_on_newlines_and_length() {
        let mut lines = Vec::new();
        let mut splitter = LineSplitter::new(8);
        splitter.push(b"one\ntw", |l| lines.push(l));
        splitter.push(b"o\n\nabcdefghijkl", |l| lines.push(l));
        assert_eq!(splitter.finish(), Some(b"ijkl".to_vec()));
        assert_eq!(lines, [&b"one"[..], b"two", b"", b"abcdefgh"]);
        let mut lines = Vec::new();
        let mut splitter = LineSplitter::new(8);
        splitter.push("aaaaaaa€".as_bytes(), |l| lines.push(l));
        assert_eq!(lines, [b"aaaaaaa".to_vec()], "the euro sign stays whole");
        assert_eq!(splitter.finish(), Some("€".as_bytes().to_vec()));
        assert_eq!(splitter.finish(), None);
    }

    #[test]
    fn capture_is_bounded_ordered_and_reports_drops_and_lag() {
        let capture = Capture::new(3 * (EVENT_OVERHEAD + 4), 2);
        for i in 0..5u8 {
            let stream = if i % 2 == 0 { Stream::Stdout } else { Stream::Stderr };
            capture.push(stream, Bytes::from(vec![b'0' + i; 4]));
        }
        let all = capture.read(0);
        assert_eq!(all.events.iter().map(|e| e.seq).collect::<Vec<_>>(), [2, 3, 4]);
        assert!(all.dropped && all.lagged && all.open);
        assert_eq!(all.next, 5);
        let tail = capture.read(3);
        assert_eq!(tail.events.len(), 2);
        assert!(!tail.lagged);
        assert_eq!(tail.events[0].stream, Stream::Stderr);
        assert!(capture.read(5).events.is_empty());
    }

    #[test]
    fn one_event_larger_than_the_budget_is_kept() {
        let capture = Capture::new(10, 1);
        capture.push(Stream::Stdout, Bytes::from_static(b"0123456789abcdef"));
        assert_eq!(capture.read(0).events.len(), 1);
    }

    #[tokio::test]
    async fn waiting_readers_wake_on_output_and_on_close() {
        // The test runtime has one thread: yielding lets the waiter run until it waits.
        let capture = std::sync::Arc::new(Capture::new(1024, 1));
        let waiter = tokio::spawn({
            let capture = capture.clone();
            async move { capture.wait_beyond(0).await }
        });
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished(), "nothing to read yet");
        capture.push(Stream::Stdout, Bytes::from_static(b"x"));
        let woken = tokio::time::timeout(std::time::Duration::from_secs(5), waiter).await;
        woken.expect("woken by output").expect("waiter");
        let waiter = tokio::spawn({
            let capture = capture.clone();
            async move { capture.wait_beyond(1).await }
        });
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished(), "nothing beyond the cursor yet");
        capture.close_stream();
        let woken = tokio::time::timeout(std::time::Duration::from_secs(5), waiter).await;
        woken.expect("woken by close").expect("waiter");
    }
}
