//! A session's event log: append-only, numbered by one increasing sequence,
//! readable from any sequence number by any number of late subscribers.
//!
//! The newest events stay in a bounded ring in memory ([`RING_EVENTS`],
//! [`RING_BYTES`]); with a state directory every event is also appended to
//! the session's `events.jsonl`, so a subscriber that falls behind the ring,
//! or resumes after a restart, reads the older events from disk and misses
//! nothing. Memory stays flat whatever a turn prints. The writer never
//! waits for a reader: readers hold their own cursor and wake on a `watch`
//! of the newest sequence number.

use std::collections::VecDeque;
use std::fs::{File, OpenOptions};
use std::io::{self, BufRead, BufReader, BufWriter, Seek, SeekFrom, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use super::turn::{Item, TurnSummary, Usage};

/// Events kept in memory per session.
pub const RING_EVENTS: usize = 4096;
/// Approximate bytes kept in memory per session.
pub const RING_BYTES: usize = 4 * 1024 * 1024;
/// One index entry per this many events of the file.
const INDEX_EVERY: u64 = 256;

/// Which text an `item.delta` extends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeltaKind {
    /// A message's text.
    Text,
    /// A reasoning summary.
    Reasoning,
    /// A tool call's output.
    Output,
}

/// What happened.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type")]
pub enum EventKind {
    /// The session has work (a turn was queued while it was idle).
    #[serde(rename = "session.in_progress")]
    SessionInProgress {
        /// The session's usage then (absent in journals written before it was kept).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        usage: Option<Usage>,
    },
    /// The session has nothing left to run.
    #[serde(rename = "session.idle")]
    SessionIdle {
        /// The session's usage then (absent in journals written before it was kept).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        usage: Option<Usage>,
    },
    /// A turn was queued.
    #[serde(rename = "turn.queued")]
    TurnQueued {
        /// The turn then.
        turn: TurnSummary,
    },
    /// A turn's CLI started.
    #[serde(rename = "turn.started")]
    TurnStarted {
        /// The turn then.
        turn: TurnSummary,
    },
    /// A turn ended: completed, failed or cancelled.
    #[serde(rename = "turn.ended")]
    TurnEnded {
        /// The turn then.
        turn: TurnSummary,
    },
    /// An item began.
    #[serde(rename = "item.added")]
    ItemAdded {
        /// The item then.
        item: Item,
    },
    /// An item's text grew.
    #[serde(rename = "item.delta")]
    ItemDelta {
        /// The item.
        item_id: String,
        /// Which text.
        kind: DeltaKind,
        /// The new text (redacted).
        delta: String,
        /// The item's position.
        output_index: usize,
    },
    /// An item finished.
    #[serde(rename = "item.done")]
    ItemDone {
        /// The item then.
        item: Item,
    },
    /// A line of the CLI's output outside its protocol.
    #[serde(rename = "log")]
    Log {
        /// The line (redacted, capped).
        text: String,
    },
}

impl EventKind {
    /// A rough size in memory, for the ring's byte budget.
    fn weight(&self) -> usize {
        let item = |item: &Item| match &item.body {
            super::turn::ItemBody::Message { text, .. } | super::turn::ItemBody::Reasoning { text } => text.len(),
            super::turn::ItemBody::CommandExecution { command, output, .. } => command.len() + output.len(),
            super::turn::ItemBody::McpCall { output, arguments, .. } => {
                output.as_ref().map_or(0, String::len) + arguments.to_string().len()
            }
        };
        160 + match self {
            EventKind::ItemAdded { item: i } | EventKind::ItemDone { item: i } => item(i),
            EventKind::ItemDelta { delta, .. } => delta.len(),
            EventKind::Log { text } => text.len(),
            _ => 160,
        }
    }
}

/// One entry of the log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Event {
    /// Its sequence number (from 1).
    pub seq: u64,
    /// When it happened (seconds since the epoch).
    pub ts: f64,
    /// The turn it belongs to, if any.
    pub turn_id: Option<String>,
    /// What happened.
    #[serde(flatten)]
    pub kind: EventKind,
}

/// The on-disk copy of a log.
#[derive(Debug)]
struct EventFile {
    path: PathBuf,
    writer: BufWriter<File>,
    written: u64,
    flushed: u64,
    /// `(seq, offset)` of every [`INDEX_EVERY`]th event.
    index: Vec<(u64, u64)>,
}

impl EventFile {
    /// Opens `path`, dropping a torn last line; returns it, the next
    /// sequence number and the time of the last event.
    fn open(path: &Path) -> io::Result<(Self, u64, Option<f64>)> {
        let mut file = OpenOptions::new().create(true).truncate(false).read(true).write(true).mode(0o600).open(path)?;
        let mut index = Vec::new();
        let mut last_seq = 0;
        let mut last_offset = None;
        let mut good_end = 0u64;
        {
            let mut reader = BufReader::new(&mut file);
            let mut offset = 0u64;
            let mut line = Vec::new();
            loop {
                line.clear();
                let n = reader.read_until(b'\n', &mut line)? as u64;
                if n == 0 || line.last() != Some(&b'\n') {
                    break;
                }
                if let Some(seq) = seq_of(&line) {
                    if seq % INDEX_EVERY == 0 || index.is_empty() {
                        index.push((seq, offset));
                    }
                    last_seq = seq;
                    last_offset = Some(offset);
                }
                offset += n;
                good_end = offset;
            }
        }
        file.set_len(good_end)?;
        let last_ts = match last_offset {
            Some(offset) => read_file(path, offset, good_end, 0, 1)?.first().map(|e| e.ts),
            None => None,
        };
        file.seek(SeekFrom::Start(good_end))?;
        let file = EventFile {
            path: path.to_path_buf(),
            writer: BufWriter::new(file),
            written: good_end,
            flushed: good_end,
            index,
        };
        Ok((file, last_seq + 1, last_ts))
    }

    fn append(&mut self, event: &Event) -> io::Result<()> {
        let mut line = serde_json::to_vec(event).map_err(io::Error::other)?;
        line.push(b'\n');
        if event.seq % INDEX_EVERY == 0 || self.index.is_empty() {
            self.index.push((event.seq, self.written));
        }
        self.writer.write_all(&line)?;
        self.written += line.len() as u64;
        Ok(())
    }

    fn flush(&mut self) {
        if self.flushed == self.written {
            return;
        }
        match self.writer.flush() {
            Ok(()) => self.flushed = self.written,
            Err(e) => tracing::warn!(path = %self.path.display(), error = %e, "agents: cannot write the event log"),
        }
    }

    /// Where to start reading for events after `after`, and where the readable part ends.
    fn span_after(&self, after: u64) -> (u64, u64) {
        let start = self.index.iter().rev().find(|(seq, _)| *seq <= after + 1).map_or(0, |(_, offset)| *offset);
        (start, self.flushed)
    }
}

/// The `"seq"` of a line written by [`EventFile::append`], read without parsing the rest.
fn seq_of(line: &[u8]) -> Option<u64> {
    let rest = line.strip_prefix(b"{\"seq\":")?;
    let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
    std::str::from_utf8(&rest[..digits]).ok()?.parse().ok()
}

/// Events of `path` after `after` (at most `max`), reading `[start, end)`.
fn read_file(path: &Path, start: u64, end: u64, after: u64, max: usize) -> io::Result<Vec<Arc<Event>>> {
    let mut file = File::open(path)?;
    file.seek(SeekFrom::Start(start))?;
    let mut reader = BufReader::new(io::Read::take(file, end.saturating_sub(start)));
    let mut out = Vec::new();
    let mut line = Vec::new();
    while out.len() < max {
        line.clear();
        if reader.read_until(b'\n', &mut line)? == 0 {
            break;
        }
        if seq_of(&line).is_some_and(|seq| seq > after) {
            if let Ok(event) = serde_json::from_slice::<Event>(&line) {
                out.push(Arc::new(event));
            }
        }
    }
    Ok(out)
}

#[derive(Debug)]
struct State {
    ring: VecDeque<(Arc<Event>, usize)>,
    ring_bytes: usize,
    next_seq: u64,
    last_ts: Option<f64>,
    file: Option<EventFile>,
    closed: bool,
}

/// What a reader gets for a cursor.
#[derive(Debug)]
pub enum Read {
    /// Events after the cursor, in order (possibly none yet).
    Events(Vec<Arc<Event>>),
    /// Older than the ring: read these from the file (blocking I/O).
    OnDisk(DiskRead),
    /// Older than the ring and not kept on disk: the next available event follows.
    Gap(Vec<Arc<Event>>),
    /// The log is closed (its session was deleted) and everything was read.
    Closed,
}

/// A read of the event file, done outside the log's lock.
#[derive(Debug)]
pub struct DiskRead {
    path: PathBuf,
    start: u64,
    end: u64,
    after: u64,
    max: usize,
}

impl DiskRead {
    /// Reads the events (blocking).
    ///
    /// # Errors
    /// The file cannot be read.
    pub fn run(self) -> io::Result<Vec<Arc<Event>>> {
        read_file(&self.path, self.start, self.end, self.after, self.max)
    }
}

/// A session's event log; see the module documentation.
#[derive(Debug)]
pub struct EventLog {
    state: Mutex<State>,
    tail: watch::Sender<u64>,
}

impl EventLog {
    /// A log kept in memory only, numbering from 1.
    pub fn in_memory() -> Self {
        Self::with(None, 1, None)
    }

    /// A log backed by `path` (created or continued).
    ///
    /// # Errors
    /// The file cannot be opened.
    pub fn on_disk(path: &Path) -> io::Result<Self> {
        let (file, next_seq, last_ts) = EventFile::open(path)?;
        Ok(Self::with(Some(file), next_seq, last_ts))
    }

    fn with(file: Option<EventFile>, next_seq: u64, last_ts: Option<f64>) -> Self {
        let state = State { ring: VecDeque::new(), ring_bytes: 0, next_seq, last_ts, file, closed: false };
        EventLog { state: Mutex::new(state), tail: watch::channel(next_seq - 1).0 }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Appends an event and wakes the readers; returns its sequence number.
    pub fn append(&self, turn_id: Option<&str>, kind: EventKind) -> u64 {
        let weight = kind.weight();
        let mut state = self.lock();
        let seq = state.next_seq;
        state.next_seq += 1;
        let ts = super::turn::now();
        state.last_ts = Some(ts);
        let event = Arc::new(Event { seq, ts, turn_id: turn_id.map(str::to_string), kind });
        if let Some(file) = state.file.as_mut() {
            if let Err(e) = file.append(&event) {
                tracing::warn!(error = %e, "agents: cannot append to the event log");
            }
        }
        state.ring.push_back((event, weight));
        state.ring_bytes += weight;
        if state.ring.len() > RING_EVENTS || state.ring_bytes > RING_BYTES {
            // Evict a tenth at once, after making the evicted events readable on disk.
            if let Some(file) = state.file.as_mut() {
                file.flush();
            }
            let drop = (state.ring.len() / 10).max(1);
            for _ in 0..drop {
                if let Some((_, w)) = state.ring.pop_front() {
                    state.ring_bytes -= w;
                }
            }
        }
        drop(state);
        self.tail.send_replace(seq);
        seq
    }

    /// Keeps only the newest `keep` events in memory when the log is on disk
    /// (an idle session needs little memory; older events stay readable).
    pub fn shrink(&self, keep: usize) {
        let mut state = self.lock();
        let Some(file) = state.file.as_mut() else { return };
        file.flush();
        while state.ring.len() > keep {
            if let Some((_, w)) = state.ring.pop_front() {
                state.ring_bytes -= w;
            }
        }
        state.ring.shrink_to_fit();
    }

    /// Writes buffered events to disk (at the end of a burst).
    pub fn flush(&self) {
        if let Some(file) = self.lock().file.as_mut() {
            file.flush();
        }
    }

    /// The oldest sequence number still in memory (the next one when it is empty).
    pub fn first_in_memory(&self) -> u64 {
        let state = self.lock();
        state.ring.front().map_or(state.next_seq, |(e, _)| e.seq)
    }

    /// When the newest event happened, if there is one.
    pub fn last_ts(&self) -> Option<f64> {
        self.lock().last_ts
    }

    /// The newest sequence number (0 when empty).
    pub fn last_seq(&self) -> u64 {
        self.lock().next_seq - 1
    }

    /// A receiver that changes whenever an event is appended or the log closes.
    pub fn watch(&self) -> watch::Receiver<u64> {
        self.tail.subscribe()
    }

    /// Closes the log: readers end once they have read everything.
    pub fn close(&self) {
        let mut state = self.lock();
        state.closed = true;
        if let Some(file) = state.file.as_mut() {
            file.flush();
        }
        drop(state);
        self.tail.send_modify(|_| {});
    }

    /// What a reader at cursor `after` (the last sequence number it has) gets, at most `max` events.
    pub fn read(&self, after: u64, max: usize) -> Read {
        let mut state = self.lock();
        let first = state.ring.front().map_or(state.next_seq, |(e, _)| e.seq);
        if after + 1 >= first {
            let skip = usize::try_from(after + 1 - first).unwrap_or(usize::MAX);
            let events: Vec<_> = state.ring.iter().skip(skip).take(max).map(|(e, _)| Arc::clone(e)).collect();
            if events.is_empty() && state.closed {
                return Read::Closed;
            }
            return Read::Events(events);
        }
        match state.file.as_mut() {
            Some(file) => {
                file.flush();
                let (start, end) = file.span_after(after);
                Read::OnDisk(DiskRead { path: file.path.clone(), start, end, after, max })
            }
            None => Read::Gap(state.ring.iter().take(max).map(|(e, _)| Arc::clone(e)).collect()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn log_text(log: &EventLog, n: usize) {
        for i in 0..n {
            log.append(Some("turn_1"), EventKind::Log { text: format!("line {i}") });
        }
    }

    fn seqs(events: &[Arc<Event>]) -> Vec<u64> {
        events.iter().map(|e| e.seq).collect()
    }

    #[test]
    fn session_events_of_older_journals_still_read() {
        let old: EventKind = serde_json::from_str(r#"{"type":"session.idle"}"#).expect("old form");
        assert_eq!(old, EventKind::SessionIdle { usage: None });
        let usage = Usage { input_tokens: 3, output_tokens: 4, ..Usage::default() };
        let kept = EventKind::SessionInProgress { usage: Some(usage) };
        let text = serde_json::to_string(&kept).expect("serialise");
        assert_eq!(serde_json::from_str::<EventKind>(&text).expect("new form"), kept);
        let none = serde_json::to_string(&EventKind::SessionIdle { usage: None }).expect("serialise");
        assert_eq!(none, r#"{"type":"session.idle"}"#);
    }

    #[test]
    fn readers_resume_from_any_cursor_in_memory() {
        let log = EventLog::in_memory();
        log_text(&log, 5);
        assert_eq!(log.last_seq(), 5);
        let Read::Events(events) = log.read(2, 10) else { panic!("in memory") };
        assert_eq!(seqs(&events), [3, 4, 5]);
        let Read::Events(events) = log.read(5, 10) else { panic!("caught up") };
        assert!(events.is_empty());
        log.close();
        assert!(matches!(log.read(5, 10), Read::Closed));
    }

    #[test]
    fn a_reader_behind_the_ring_reads_the_file_and_misses_nothing() {
        let dir = tempfile::tempdir().expect("tmp");
        let path = dir.path().join("events.jsonl");
        let log = EventLog::on_disk(&path).expect("log");
        let total = RING_EVENTS * 3;
        log_text(&log, total);
        let mut cursor = 0u64;
        let mut seen = Vec::new();
        loop {
            let events = match log.read(cursor, 1000) {
                Read::Events(events) => events,
                Read::OnDisk(read) => read.run().expect("disk"),
                other => panic!("unexpected {other:?}"),
            };
            if events.is_empty() {
                break;
            }
            cursor = events.last().map_or(cursor, |e| e.seq);
            seen.extend(seqs(&events));
        }
        assert_eq!(seen, (1..=total as u64).collect::<Vec<_>>());
        drop(log);
        // After a restart the numbering continues and the old events are still there.
        let log = EventLog::on_disk(&path).expect("reopen");
        assert_eq!(log.last_seq(), total as u64);
        log.append(None, EventKind::SessionIdle { usage: None });
        let Read::OnDisk(read) = log.read(0, 2) else { panic!("old events are on disk") };
        assert_eq!(seqs(&read.run().expect("disk")), [1, 2]);
    }

    #[test]
    fn an_idle_log_on_disk_keeps_little_in_memory_and_loses_nothing() {
        let dir = tempfile::tempdir().expect("tmp");
        let log = EventLog::on_disk(&dir.path().join("events.jsonl")).expect("log");
        log_text(&log, 500);
        log.shrink(16);
        assert_eq!(log.first_in_memory(), 485);
        let Read::OnDisk(read) = log.read(0, 1000) else { panic!("older events are on disk") };
        assert_eq!(read.run().expect("disk").len(), 500, "every event, from disk");
        let memory = EventLog::in_memory();
        log_text(&memory, 50);
        memory.shrink(16);
        assert_eq!(memory.first_in_memory(), 1, "without a file nothing is dropped");
    }

    #[test]
    fn without_a_file_a_slow_reader_learns_of_the_gap() {
        let log = EventLog::in_memory();
        log_text(&log, RING_EVENTS + 10);
        match log.read(0, 5) {
            Read::Gap(events) => assert!(events[0].seq > 1),
            other => panic!("expected a gap, got {other:?}"),
        }
    }

    #[test]
    fn a_torn_last_line_is_dropped_on_reopen() {
        let dir = tempfile::tempdir().expect("tmp");
        let path = dir.path().join("events.jsonl");
        let log = EventLog::on_disk(&path).expect("log");
        log_text(&log, 3);
        log.flush();
        drop(log);
        std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .and_then(|mut f| f.write_all(b"{\"seq\":4,"))
            .expect("torn");
        let log = EventLog::on_disk(&path).expect("reopen");
        assert_eq!(log.last_seq(), 3);
    }
}
