//! Resumable `/shell/stream` runs.
//!
//! A run's line events go through a [`Capture`] of [`RESUME_BYTES`] and
//! one [`Subscription`], the client's position, which the run keeps across
//! connections: the writer never evicts a line the client was not sent (the
//! command waits instead, as it always did under a slow client), and lines
//! already sent stay held for a resume up to the budget. Each line event
//! carries an id, `<run>:<seq>:<offset>` ([`Cursor`]): a client that lost
//! its connection asks again with `Last-Event-ID` and gets the lines after
//! it, then the closing events; lines the budget no longer holds are
//! reported by a gap with their exact count.
//!
//! A run with no client for [`RESUME_GRACE`] is terminated as a
//! disconnected stream always was; an ended run stays resumable until no
//! connection was attached to it for [`RESUME_GRACE`], then it is forgotten.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use abx_wire::api::process::ShellEvent;
use bytes::Bytes;
use tokio::sync::watch;

use super::capture::{Bounds, Capture, Lost, SeekError, Subscription};
use super::output::Stream;
use crate::policy::Viewer;
use crate::resume::{Owned, Presence, Registry};

/// Line data (both streams) a run keeps for a resume, bytes.
pub const RESUME_BYTES: usize = 4 * 1024 * 1024;
/// How long a run waits for its client to come back, and stays resumable once ended.
pub const RESUME_GRACE: Duration = Duration::from_secs(5);
/// Lines read at once for the client.
const BATCH_BYTES: usize = 64 * 1024;
/// The one client of a run is never released from holding the command back.
const NEVER: Duration = Duration::from_secs(1 << 31);

/// Why a `Last-Event-ID` cannot resume a stream.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResumeError {
    /// Not an id this server gives.
    #[error("Invalid Last-Event-ID {0:?}: expected <stream>:<seq>:<offset>")]
    Malformed(String),
    /// No such stream for this caller (ended too long ago, or never).
    #[error("No stream {0} to resume: it ended more than {secs} s ago or is not yours", secs = RESUME_GRACE.as_secs())]
    Unknown(u64),
    /// The position is past what the stream produced, or not one of its events.
    #[error("Last-Event-ID {id} is not a position of stream {run}: {why}")]
    Position {
        /// The id.
        id: String,
        /// The stream.
        run: u64,
        /// Why.
        why: SeekError,
    },
}

/// A position in a run: the id of the last line event a client received.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cursor {
    /// The run.
    pub run: u64,
    /// The line's sequence number.
    pub seq: u64,
    /// Bytes of output (lines with their newlines) up to and including this line.
    pub offset: u64,
}

impl Cursor {
    /// Parses `<run>:<seq>:<offset>`.
    ///
    /// # Errors
    /// [`ResumeError::Malformed`].
    pub fn parse(text: &str) -> Result<Cursor, ResumeError> {
        let malformed = || ResumeError::Malformed(text.chars().take(64).collect());
        let mut parts = text.trim().split(':').map(|p| p.parse::<u64>().map_err(|_| malformed()));
        let cursor = Cursor {
            run: parts.next().ok_or_else(malformed)??,
            seq: parts.next().ok_or_else(malformed)??,
            offset: parts.next().ok_or_else(malformed)??,
        };
        if parts.next().is_some() {
            return Err(malformed());
        }
        Ok(cursor)
    }
}

impl std::fmt::Display for Cursor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}:{}", self.run, self.seq, self.offset)
    }
}

/// What a client of a run receives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Delivery {
    /// A line, with its id.
    Line {
        /// Which stream.
        stream: Stream,
        /// The line (without its newline).
        data: Bytes,
        /// Its id.
        id: Cursor,
    },
    /// Lines between the resume position and the next line were no longer held.
    Gap(Lost),
    /// A closing event (`error`, `exit`).
    Closing(ShellEvent),
}

/// One `/shell/stream` run; see the module documentation.
#[derive(Debug)]
pub struct StreamRun {
    id: u64,
    owner: String,
    grace: Duration,
    lines: Arc<Capture>,
    client: Subscription,
    closing: watch::Sender<Option<Vec<ShellEvent>>>,
    attached: Presence,
    /// Taken to move the client's cursor: a superseded connection never reads past a resume.
    reading: Mutex<()>,
}

impl StreamRun {
    /// A run with its own `grace` for an absent client, not in any registry
    /// (so never resumed by id: a client that leaves abandons it).
    pub fn unlisted(grace: Duration) -> Arc<StreamRun> {
        Arc::new(StreamRun::new(0, String::new(), grace))
    }

    fn new(id: u64, owner: String, grace: Duration) -> StreamRun {
        let never = Bounds { outpaced: NEVER, stalled: NEVER };
        let lines = Arc::new(Capture::with_bounds(RESUME_BYTES, 1, never));
        let client = lines.subscribe();
        StreamRun {
            id,
            owner,
            grace,
            lines,
            client,
            closing: watch::channel(None).0,
            attached: Presence::default(),
            reading: Mutex::new(()),
        }
    }

    /// Adds a line (held with its newline, so offsets count output bytes),
    /// waiting while the client has not been sent the oldest held one.
    pub async fn push_line(&self, stream: Stream, mut line: Vec<u8>) {
        line.push(b'\n');
        self.lines.push(stream, Bytes::from(line)).await;
    }

    /// Publishes the closing events; no line comes after them.
    pub fn finish(&self, closing: Vec<ShellEvent>) {
        self.lines.close_stream();
        self.closing.send_replace(Some(closing));
    }

    /// Resolves once no connection has been attached for its grace.
    pub async fn abandoned(&self) {
        self.attached.abandoned(self.grace).await;
    }

    /// Attaches a connection after `cursor` (from the start without one);
    /// an older connection still attached stops receiving.
    ///
    /// # Errors
    /// [`ResumeError::Position`] for a position this run never gave.
    pub fn attach(self: &Arc<Self>, cursor: Option<Cursor>) -> Result<Attached, ResumeError> {
        let (seq, offset) = cursor.map_or((0, 0), |c| (c.seq + 1, c.offset));
        let _reading = self.reading.lock().unwrap_or_else(PoisonError::into_inner);
        self.client.seek(seq, offset).map_err(|why| ResumeError::Position {
            id: cursor.map(|c| c.to_string()).unwrap_or_default(),
            run: self.id,
            why,
        })?;
        let generation = self.attached.join();
        Ok(Attached { run: Arc::clone(self), generation, queue: std::collections::VecDeque::new(), done: false })
    }
}

/// One connection's view of a run; detaches when dropped.
#[derive(Debug)]
pub struct Attached {
    run: Arc<StreamRun>,
    generation: u64,
    queue: std::collections::VecDeque<Delivery>,
    done: bool,
}

impl Attached {
    /// The next thing to send; `None` at the end (or once a newer connection took over).
    pub async fn next(&mut self) -> Option<Delivery> {
        let mut newest = self.run.attached.subscribe();
        let mut closing = self.run.closing.subscribe();
        loop {
            if let Some(item) = self.queue.pop_front() {
                return Some(item);
            }
            let ended = closing.borrow_and_update().clone();
            let batch = {
                let _reading = self.run.reading.lock().unwrap_or_else(PoisonError::into_inner);
                if self.done || newest.borrow_and_update().1 != self.generation {
                    return None;
                }
                self.run.client.read(BATCH_BYTES)
            };
            if !batch.lost.is_none() {
                self.queue.push_back(Delivery::Gap(batch.lost));
            }
            for event in batch.events {
                let offset = event.offset + event.bytes.len() as u64;
                let id = Cursor { run: self.run.id, seq: event.seq, offset };
                let data = event.bytes.slice(..event.bytes.len().saturating_sub(1));
                self.queue.push_back(Delivery::Line { stream: event.stream, data, id });
            }
            if !self.queue.is_empty() {
                continue;
            }
            if let Some(events) = ended {
                self.queue.extend(events.into_iter().map(Delivery::Closing));
                self.done = true;
                continue;
            }
            tokio::select! {
                () = self.run.client.wait() => {}
                _ = closing.changed() => {}
                _ = newest.changed() => {}
            }
        }
    }
}

impl Drop for Attached {
    fn drop(&mut self) {
        self.run.attached.leave();
    }
}

impl Owned for StreamRun {
    fn owner(&self) -> &str {
        &self.owner
    }
}

/// The live and recently ended runs of the daemon.
#[derive(Debug, Default)]
pub struct StreamRuns {
    runs: Registry<StreamRun>,
}

impl StreamRuns {
    /// A new run owned by `owner`.
    pub fn create(&self, owner: &Viewer) -> Arc<StreamRun> {
        self.runs.insert(|id| StreamRun::new(id, owner.id().to_string(), RESUME_GRACE))
    }

    /// Forgets `run` (once it ended) when no connection was attached to it for [`RESUME_GRACE`].
    pub fn retire(self: &Arc<Self>, run: Arc<StreamRun>) {
        let runs = Arc::clone(self);
        tokio::spawn(async move {
            run.abandoned().await;
            runs.runs.remove(run.id);
        });
    }

    /// The run `cursor` names, if `viewer` may see it.
    ///
    /// # Errors
    /// [`ResumeError::Unknown`].
    pub fn find(&self, cursor: Cursor, viewer: &Viewer) -> Result<Arc<StreamRun>, ResumeError> {
        self.runs.find(cursor.run, viewer).ok_or(ResumeError::Unknown(cursor.run))
    }
}
