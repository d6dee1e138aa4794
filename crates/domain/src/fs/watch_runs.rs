//! Resumable `files_watch` streams.
//!
//! A watch's events go into a [`Ring`] of [`RING_EVENTS`] (the reference's
//! event data, each with a sequence number: `ready` is 0, the first change
//! 1). Every SSE event carries the id `<watch>:<seq>` ([`WatchCursor`]). A
//! client that lost its connection asks the same URL again with
//! `Last-Event-ID` and gets the events after it, each exactly once, then the
//! rest of the watch as it happens. The filesystem cannot be held back, so
//! the ring never waits for its client: when it is full the oldest event
//! goes, and a resume that asks for events the ring no longer holds first
//! receives a `gap` with their exact count.
//!
//! The watch keeps running while no client is attached, for
//! [`RESUME_GRACE`] (the same 5 s as `/shell/stream`'s resume grace,
//! `process::stream_runs::RESUME_GRACE`; files do not import processes);
//! then it stops and is forgotten. An ended watch stays resumable for that grace too.
//! A newer connection to a watch supersedes an older one still attached.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;

use super::watch::Output;
use crate::policy::Viewer;
use crate::resume::{parse_cursor, Owned, Presence, Registry, Ring, Slot};

/// Events a watch holds for a resume.
pub const RING_EVENTS: usize = 1024;
/// How long a watch without a client keeps running (and an ended one stays resumable).
pub const RESUME_GRACE: Duration = Duration::from_secs(5);

/// Why a `Last-Event-ID` cannot resume a watch.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WatchResumeError {
    /// Not an id this server gives.
    #[error("Invalid Last-Event-ID {0:?}: expected <watch>:<seq>")]
    Malformed(String),
    /// No such watch for this caller (ended or left more than the grace ago, or never).
    #[error("No watch {0} to resume: it ended or was left more than {secs} s ago, or is not yours", secs = RESUME_GRACE.as_secs())]
    Unknown(u64),
    /// The id is past what the watch produced.
    #[error("Last-Event-ID {id} is not an event of watch {watch} yet: its last event is {last}")]
    Future {
        /// The id.
        id: String,
        /// The watch.
        watch: u64,
        /// The newest sequence number it produced.
        last: u64,
    },
}

/// A position in a watch: the id of the last event a client received.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WatchCursor {
    /// The watch.
    pub watch: u64,
    /// The event's sequence number (`ready` is 0).
    pub seq: u64,
}

impl WatchCursor {
    /// Parses `<watch>:<seq>`.
    ///
    /// # Errors
    /// [`WatchResumeError::Malformed`].
    pub fn parse(text: &str) -> Result<WatchCursor, WatchResumeError> {
        let [watch, seq] = parse_cursor(text).map_err(|m| WatchResumeError::Malformed(m.0))?;
        Ok(WatchCursor { watch, seq })
    }
}

impl std::fmt::Display for WatchCursor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.watch, self.seq)
    }
}

/// What a client of a watch receives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Delivery {
    /// An event of the watch, with its id.
    Event(WatchCursor, Output),
    /// This many events between the resume position and the next event were no longer held.
    Gap(u64),
}

/// One watch kept for its client; see the module documentation.
#[derive(Debug)]
pub struct WatchRun {
    id: u64,
    owner: String,
    /// The watched directory, as `ready` reports it.
    path: String,
    /// Its events after `ready`, `end` the last.
    ring: Ring<Output>,
    attached: Presence,
}

impl Owned for WatchRun {
    fn owner(&self) -> &str {
        &self.owner
    }
}

impl WatchRun {
    /// The directory watched.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// Resolves once no connection has been attached for the grace.
    async fn abandoned(&self) {
        self.attached.abandoned(RESUME_GRACE).await;
    }

    /// Attaches a connection after `cursor` (after `ready` without one);
    /// an older connection still attached stops receiving.
    ///
    /// # Errors
    /// [`WatchResumeError::Future`] for a position the watch has not produced.
    pub fn attach(self: &Arc<Self>, cursor: Option<WatchCursor>) -> Result<Attached, WatchResumeError> {
        let after = cursor.map_or(0, |c| c.seq);
        let last = self.ring.next_seq().saturating_sub(1);
        if let Some(cursor) = cursor.filter(|c| c.seq > last) {
            return Err(WatchResumeError::Future { id: cursor.to_string(), watch: self.id, last });
        }
        Ok(self.join(after))
    }

    /// Attaches a connection after the event `after`.
    fn join(self: &Arc<Self>, after: u64) -> Attached {
        let generation = self.attached.join();
        Attached { run: Arc::clone(self), generation, next: after + 1, done: false }
    }
}

/// One connection's view of a watch; detaches when dropped.
#[derive(Debug)]
pub struct Attached {
    run: Arc<WatchRun>,
    generation: u64,
    /// Sequence number of the next event to send.
    next: u64,
    done: bool,
}

impl Attached {
    /// The id of the `ready` event.
    pub fn ready_id(&self) -> WatchCursor {
        WatchCursor { watch: self.run.id, seq: 0 }
    }

    /// The next thing to send; `None` after `end` (or once a newer connection took over).
    pub async fn next(&mut self) -> Option<Delivery> {
        let mut newest = self.run.attached.subscribe();
        loop {
            if self.done || newest.borrow_and_update().1 != self.generation {
                return None;
            }
            match self.run.ring.get(self.next) {
                Slot::Gap(lost) => {
                    self.next += lost;
                    return Some(Delivery::Gap(lost));
                }
                Slot::Item(output) => {
                    let id = WatchCursor { watch: self.run.id, seq: self.next };
                    self.next += 1;
                    self.done = matches!(output, Output::End(_));
                    return Some(Delivery::Event(id, output));
                }
                Slot::Ended => return None,
                Slot::Pending => {
                    tokio::select! {
                        () = self.run.ring.grown_past(self.next) => {}
                        _ = newest.changed() => {}
                    }
                }
            }
        }
    }
}

impl Drop for Attached {
    fn drop(&mut self) {
        self.run.attached.leave();
    }
}

/// The live and recently ended watches of the daemon.
#[derive(Debug, Default)]
pub struct WatchRuns {
    runs: Registry<WatchRun>,
}

impl WatchRuns {
    /// Keeps the watch whose events arrive on `events` (of `path`, owned by
    /// `owner`), holding `capacity` events, and attaches its first connection.
    pub fn keep(
        self: &Arc<Self>,
        owner: &Viewer,
        path: String,
        capacity: usize,
        mut events: mpsc::Receiver<Output>,
    ) -> Attached {
        let run = self.runs.insert(|id| WatchRun {
            id,
            owner: owner.id().to_string(),
            path,
            ring: Ring::new(capacity),
            attached: Presence::default(),
        });
        let first = run.join(0);
        let runs = Arc::clone(self);
        tokio::spawn(async move {
            {
                let pump = async {
                    while let Some(output) = events.recv().await {
                        let end = matches!(output, Output::End(_));
                        run.ring.push(output, end);
                    }
                };
                tokio::select! {
                    () = pump => {}
                    () = run.abandoned() => {}
                }
            }
            // Dropping the receiver stops the watch; an ended one waits out its grace.
            drop(events);
            run.abandoned().await;
            runs.runs.remove(run.id);
        });
        first
    }

    /// The watch `cursor` names, if `viewer` may see it.
    ///
    /// # Errors
    /// [`WatchResumeError::Unknown`].
    pub fn find(&self, cursor: WatchCursor, viewer: &Viewer) -> Result<Arc<WatchRun>, WatchResumeError> {
        self.runs.find(cursor.watch, viewer).ok_or(WatchResumeError::Unknown(cursor.watch))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use abx_wire::api::files::WatchEvent;

    fn change(i: usize) -> Output {
        Output::Change(WatchEvent { kind: "created".into(), path: format!("/f{i}"), is_dir: false, old_path: None })
    }

    #[test]
    fn cursors_parse_and_print_as_watch_colon_seq() {
        let cursor = WatchCursor::parse(" 12:3 ").expect("a cursor");
        assert_eq!((cursor, cursor.to_string()), (WatchCursor { watch: 12, seq: 3 }, "12:3".to_string()));
        for bad in ["", "12", "12:", ":3", "12:3:4", "a:1", "1:-1"] {
            assert!(matches!(WatchCursor::parse(bad), Err(WatchResumeError::Malformed(_))), "{bad}");
        }
    }

    #[tokio::test]
    async fn a_resume_gets_the_held_events_after_an_exact_gap_and_never_past_the_end() {
        let runs = Arc::new(WatchRuns::default());
        let (tx, rx) = mpsc::channel(16);
        let first = runs.keep(&Viewer::admin(), "/w".into(), 3, rx);
        let id = first.ready_id();
        for i in 1..=5 {
            tx.send(change(i)).await.expect("send");
        }
        tx.send(Output::End("timeout")).await.expect("send");
        let run = runs.find(id, &Viewer::admin()).expect("kept");
        // The pump runs on its own task: wait until the end is held.
        while run.ring.next_seq() < 7 {
            tokio::task::yield_now().await;
        }
        let future = WatchCursor { watch: id.watch, seq: 7 };
        assert!(matches!(run.attach(Some(future)), Err(WatchResumeError::Future { last: 6, .. })));
        let mut resumed = run.attach(Some(WatchCursor { watch: id.watch, seq: 1 })).expect("attach");
        assert_eq!(resumed.next().await, Some(Delivery::Gap(2)));
        for seq in 4..=5 {
            let cursor = WatchCursor { watch: id.watch, seq };
            assert_eq!(
                resumed.next().await,
                Some(Delivery::Event(cursor, change(usize::try_from(seq).expect("small"))))
            );
        }
        let end = WatchCursor { watch: id.watch, seq: 6 };
        assert_eq!(resumed.next().await, Some(Delivery::Event(end, Output::End("timeout"))));
        assert_eq!(resumed.next().await, None);
        let mut superseded = first;
        assert_eq!(superseded.next().await, None, "a newer connection took over");
        assert!(matches!(
            runs.find(WatchCursor { watch: id.watch + 1, seq: 0 }, &Viewer::admin()),
            Err(WatchResumeError::Unknown(_))
        ));
    }
}
