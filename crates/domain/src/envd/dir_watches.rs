//! Resumable `WatchDir` streams (an extension of ours; the `e2b` SDK never
//! resumes and sees the same stream as before).
//!
//! A watch's events go into a [`Ring`] of [`RING_EVENTS`], numbered from 1
//! in the order they are sent (`start` and keepalives are not counted, and
//! the end is not a message). While a connection is attached the ring never
//! evicts an event it has not sent: the watch waits, its kernel events
//! queue, and past that queue the watch rescans (changes are then
//! reconciled, as on every watch). When the client left, the watch runs on
//! for [`RESUME_GRACE`] and the oldest events go once the ring is full; a
//! `WatchDir` with [`DirCursor`] `<watch>:<seq>` (the number of events the
//! client received) attaches to it again, gets the events after `seq` and
//! then the rest of the watch. What the ring no longer held is counted
//! exactly ([`Resumed::lost`]). A newer connection to a watch supersedes an
//! older one still attached; a watch nobody attached to for the grace stops
//! and is forgotten.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;

use super::watchers::{Item, WatchOptions};
use crate::policy::Viewer;
use crate::resume::{parse_cursor, Owned, Presence, Registry, Ring, Slot};

/// Events a watch holds for a resume.
pub const RING_EVENTS: usize = 1024;
/// How long a watch without a client keeps running (and an ended one stays resumable).
pub const RESUME_GRACE: Duration = Duration::from_secs(5);

/// Why a cursor cannot resume a watch.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DirResumeError {
    /// Not a cursor this server gives.
    #[error("invalid watch cursor {0:?}: expected <watch>:<events received>")]
    Malformed(String),
    /// No such watch for this caller (left or ended more than the grace ago, or never).
    #[error("no watch {0} to resume: it ended or was left more than {secs} s ago, or is not yours", secs = RESUME_GRACE.as_secs())]
    Unknown(u64),
    /// The cursor is past what the watch sent.
    #[error("watch {watch} has produced {last} events, not {asked}")]
    Future {
        /// The watch.
        watch: u64,
        /// The position asked for.
        asked: u64,
        /// The events it produced.
        last: u64,
    },
    /// The request names another directory or other options than the watch.
    #[error("watch {0} watches another directory or with other options")]
    Other(u64),
}

/// A position in a watch: its id and the number of its events a client received.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DirCursor {
    /// The watch.
    pub watch: u64,
    /// Events received.
    pub seq: u64,
}

impl DirCursor {
    /// Parses `<watch>:<seq>`.
    ///
    /// # Errors
    /// [`DirResumeError::Malformed`].
    pub fn parse(text: &str) -> Result<DirCursor, DirResumeError> {
        let [watch, seq] = parse_cursor(text).map_err(|m| DirResumeError::Malformed(m.0))?;
        Ok(DirCursor { watch, seq })
    }
}

/// What a watch was started for: a resume must ask for the same.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// The directory, resolved.
    pub path: String,
    /// Subdirectories too.
    pub recursive: bool,
    /// Entries attached to events.
    pub include_entry: bool,
}

impl Target {
    /// The target of a watch of `path` with `options`.
    pub fn new(path: String, options: WatchOptions) -> Self {
        Target { path, recursive: options.recursive, include_entry: options.include_entry }
    }
}

/// One watch kept for its client.
#[derive(Debug)]
pub struct DirWatch {
    id: u64,
    owner: String,
    target: Target,
    ring: Ring<Item>,
    presence: Presence,
}

impl Owned for DirWatch {
    fn owner(&self) -> &str {
        &self.owner
    }
}

impl DirWatch {
    fn join(self: &Arc<Self>, after: u64) -> Resumed {
        let generation = self.presence.join();
        self.ring.mark_read(after + 1);
        let lost = match self.ring.get(after + 1) {
            Slot::Gap(lost) => lost,
            _ => 0,
        };
        let attached = Attached { run: Arc::clone(self), generation, next: after + 1 };
        Resumed { watch: self.id, lost, attached }
    }

    /// Whether a connection is attached.
    fn attended(&self) -> bool {
        self.presence.count() > 0
    }

    /// Resolves once no connection is attached.
    async fn vacant(&self) {
        let _ = self.presence.subscribe().wait_for(|(count, _)| *count == 0).await;
    }
}

/// A connection attached to a watch, with what it needs to say first.
#[derive(Debug)]
pub struct Resumed {
    /// The watch's id.
    pub watch: u64,
    /// Events after the cursor the ring no longer held (0 on a new watch).
    pub lost: u64,
    /// The connection.
    pub attached: Attached,
}

/// One connection's view of a watch; detaches when dropped.
#[derive(Debug)]
pub struct Attached {
    run: Arc<DirWatch>,
    generation: u64,
    next: u64,
}

impl Attached {
    /// Resolves once a newer connection took over (at once if one has).
    async fn taken_over(&self) {
        let generation = self.generation;
        let _ = self.run.presence.subscribe().wait_for(|(_, newest)| *newest != generation).await;
    }

    /// The next item; `None` after the end (or once a newer connection took over).
    pub async fn next(&mut self) -> Option<Item> {
        loop {
            if self.run.presence.subscribe().borrow().1 != self.generation {
                return None;
            }
            match self.run.ring.get(self.next) {
                // Counted when the connection attached; nothing is evicted unread while it is.
                Slot::Gap(lost) => self.next += lost,
                Slot::Item(item) => {
                    self.next += 1;
                    self.run.ring.mark_read(self.next);
                    return Some(item);
                }
                Slot::Ended => return None,
                Slot::Pending => {
                    tokio::select! {
                        () = self.run.ring.grown_past(self.next) => {}
                        () = self.taken_over() => {}
                    }
                }
            }
        }
    }
}

impl Drop for Attached {
    fn drop(&mut self) {
        self.run.presence.leave();
    }
}

/// The live and recently left `WatchDir` watches of the daemon.
#[derive(Debug, Default)]
pub struct DirWatches {
    runs: Registry<DirWatch>,
}

impl DirWatches {
    /// Keeps the watch whose items arrive on `items` (of `target`, owned
    /// by `owner`), and attaches its first connection.
    pub fn keep(self: &Arc<Self>, owner: &Viewer, target: Target, mut items: mpsc::Receiver<Item>) -> Resumed {
        let run = self.runs.insert(|id| DirWatch {
            id,
            owner: owner.id().to_string(),
            target,
            ring: Ring::new(RING_EVENTS),
            presence: Presence::default(),
        });
        let first = run.join(0);
        let runs = Arc::clone(self);
        tokio::spawn(async move {
            let pump = async {
                while let Some(item) = items.recv().await {
                    // An attached client holds the watch back rather than miss an event.
                    if run.attended() {
                        tokio::select! {
                            () = run.ring.room() => {}
                            () = run.vacant() => {}
                        }
                    }
                    let end = matches!(item, Item::End(_));
                    run.ring.push(item, end);
                }
            };
            tokio::select! {
                () = pump => {}
                () = run.presence.abandoned(RESUME_GRACE) => {}
            }
            // Dropping the receiver stops the watch; an ended one waits out its grace.
            drop(items);
            run.presence.abandoned(RESUME_GRACE).await;
            runs.runs.remove(run.id);
        });
        first
    }

    /// Attaches a connection to the watch `cursor` names, after its `seq`th event.
    ///
    /// # Errors
    /// [`DirResumeError`]: unknown to `viewer`, another target, or a position not reached.
    pub fn resume(&self, cursor: DirCursor, target: &Target, viewer: &Viewer) -> Result<Resumed, DirResumeError> {
        let run = self.runs.find(cursor.watch, viewer).ok_or(DirResumeError::Unknown(cursor.watch))?;
        if run.target != *target {
            return Err(DirResumeError::Other(cursor.watch));
        }
        let last = run.ring.next_seq().saturating_sub(1);
        if cursor.seq > last {
            return Err(DirResumeError::Future { watch: cursor.watch, asked: cursor.seq, last });
        }
        Ok(run.join(cursor.seq))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use abx_wire::api::envd::filesystem::{EventType, FilesystemEvent};

    fn event(i: u64) -> Item {
        Item::Event(Box::new(FilesystemEvent { name: format!("f{i}"), kind: EventType::Create, entry: None }))
    }

    #[tokio::test]
    async fn an_attached_client_holds_the_watch_back_and_a_resume_counts_what_went() {
        let runs = Arc::new(DirWatches::default());
        let (tx, rx) = mpsc::channel(4);
        let target = Target { path: "/w".into(), recursive: false, include_entry: false };
        let first = runs.keep(&Viewer::admin(), target.clone(), rx);
        let (watch, mut attached) = (first.watch, first.attached);
        assert_eq!(first.lost, 0);
        let total = RING_EVENTS as u64 + 10;
        let producer = tokio::spawn(async move {
            for i in 1..=total {
                tx.send(event(i)).await.expect("send");
            }
            tx
        });
        // The producer cannot pass the unread ring while the client is attached.
        assert_eq!(attached.next().await, Some(event(1)));
        for i in 2..=total {
            assert_eq!(attached.next().await, Some(event(i)), "event {i}");
        }
        let tx = producer.await.expect("producer");
        drop(attached);
        for i in total + 1..=total + RING_EVENTS as u64 + 5 {
            tx.send(event(i)).await.expect("send");
        }
        tx.send(Item::End("deleted")).await.expect("send");
        let cursor = DirCursor { watch, seq: total };
        let run = runs.runs.find(watch, &Viewer::admin()).expect("kept");
        while run.ring.next_seq() < total + RING_EVENTS as u64 + 7 {
            tokio::task::yield_now().await;
        }
        let mut resumed = runs.resume(cursor, &target, &Viewer::admin()).expect("resume");
        assert_eq!(resumed.lost, 6);
        assert_eq!(resumed.attached.next().await, Some(event(total + 7)));
        let other = Target { path: "/v".into(), ..target.clone() };
        assert_eq!(runs.resume(cursor, &other, &Viewer::admin()).err(), Some(DirResumeError::Other(watch)));
        let future = DirCursor { watch, seq: total * 3 };
        assert!(matches!(runs.resume(future, &target, &Viewer::admin()), Err(DirResumeError::Future { .. })));
        assert!(matches!(DirCursor::parse("1:x"), Err(DirResumeError::Malformed(_))));
    }
}
