//! A reader of one session's events from a sequence number on: the event
//! streams of the API, each one of the session's subscribers while it lives
//! (at most [`MAX_SUBSCRIBERS`]; a session with one is not evicted), and the
//! daemon's own readers (webhooks), which are not.

use std::sync::Arc;

use super::error::AgentError;
use super::log::{Event, Read};
use super::session::Session;

/// Event streams per session at most (the reference's limit).
pub const MAX_SUBSCRIBERS: usize = 32;

/// A reader of one session's events; see the module documentation.
#[derive(Debug)]
pub struct Subscription {
    session: Arc<Session>,
    cursor: u64,
    rx: tokio::sync::watch::Receiver<u64>,
    counted: bool,
}

impl Subscription {
    /// One of `session`'s subscribers, reading its events after `after`
    /// (`None`: from now on), counted while it lives.
    ///
    /// # Errors
    /// [`AgentError::TooManySubscribers`] beyond [`MAX_SUBSCRIBERS`].
    pub fn subscriber(session: &Arc<Session>, after: Option<u64>) -> Result<Self, AgentError> {
        let mut state = session.lock();
        if state.subscribers >= MAX_SUBSCRIBERS {
            return Err(AgentError::TooManySubscribers(MAX_SUBSCRIBERS));
        }
        state.subscribers += 1;
        drop(state);
        let cursor = after.unwrap_or_else(|| session.log.last_seq());
        Ok(Subscription { session: Arc::clone(session), cursor, rx: session.log.watch(), counted: true })
    }

    /// A reader of `session`'s events after `after` for the daemon itself
    /// (webhooks): not one of the session's subscribers, so it neither
    /// counts against [`MAX_SUBSCRIBERS`] nor keeps the session from eviction.
    pub fn observer(session: &Arc<Session>, after: u64) -> Self {
        Subscription { session: Arc::clone(session), cursor: after, rx: session.log.watch(), counted: false }
    }

    /// The next events (at most `max`), waiting for one; `None` once the
    /// session is deleted and everything was read.
    pub async fn next(&mut self, max: usize) -> Option<Vec<Arc<Event>>> {
        loop {
            self.rx.borrow_and_update();
            let events = match self.session.log.read(self.cursor, max) {
                Read::Events(events) | Read::Gap(events) => events,
                Read::OnDisk(read) => match tokio::task::spawn_blocking(move || read.run()).await {
                    Ok(Ok(events)) if events.is_empty() => {
                        // The file lacks them (it could not be written): skip to memory.
                        self.cursor = self.session.log.first_in_memory().saturating_sub(1).max(self.cursor);
                        continue;
                    }
                    Ok(Ok(events)) => events,
                    Ok(Err(e)) => {
                        tracing::warn!(session = %self.session.id, error = %e, "agents: cannot read the event log");
                        return None;
                    }
                    Err(_) => return None,
                },
                Read::Closed => return None,
            };
            if let Some(last) = events.last() {
                self.cursor = last.seq;
                return Some(events);
            }
            if self.rx.changed().await.is_err() {
                return None;
            }
        }
    }

    /// The sequence number of the last event returned.
    pub fn cursor(&self) -> u64 {
        self.cursor
    }

    /// The session it reads.
    pub fn session(&self) -> &Arc<Session> {
        &self.session
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        if !self.counted {
            return;
        }
        let mut state = self.session.lock();
        state.subscribers = state.subscribers.saturating_sub(1);
    }
}
