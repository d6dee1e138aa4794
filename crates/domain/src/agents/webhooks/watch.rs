//! A session's events into webhook events, as the reference sends them:
//! `session.in_progress` → `agent.session.in_progress`, a failed turn →
//! `agent.session.failed`, `session.idle` → `agent.session.idle`
//! (`agent.session.created` is sent by the sessions API when it creates one).
//!
//! A watcher starts when a turn is queued for an owner with endpoints, and
//! stops at the idle that leaves nothing to run. One watcher per session:
//! a turn queued while one follows the session is seen by it (the
//! reference starts one per turn, and a session busy with two turns sends
//! its final `idle` twice).

use std::sync::{Arc, PoisonError};

use super::Webhooks;
use crate::agents::log::EventKind;
use crate::agents::session::Session;
use crate::agents::subscription::Subscription;
use crate::agents::turn::TurnStatus;

/// Events read at once.
const BATCH: usize = 256;

impl Webhooks {
    /// Follows `session`'s events after `after` when its owner has
    /// endpoints and no watcher follows it yet.
    pub fn watch(self: &Arc<Self>, session: &Arc<Session>, after: u64) {
        let meta = session.meta();
        if !self.any(&meta.owner) {
            return;
        }
        if !self.watched.lock().unwrap_or_else(PoisonError::into_inner).insert(session.id.clone()) {
            return;
        }
        let subscription = Subscription::observer(session, after);
        let webhooks = Arc::clone(self);
        tokio::spawn(async move { webhooks.follow(subscription, meta.owner, meta.environment_id).await });
    }

    async fn follow(self: Arc<Self>, mut events: Subscription, owner: String, environment_id: Option<String>) {
        let session = Arc::clone(events.session());
        let env = environment_id.as_deref();
        while let Some(batch) = events.next(BATCH).await {
            for event in batch {
                match &event.kind {
                    EventKind::SessionInProgress { .. } => {
                        self.emit(&owner, "agent.session.in_progress", &session.id, env)
                    }
                    EventKind::TurnEnded { turn } if turn.status == TurnStatus::Failed => {
                        self.emit(&owner, "agent.session.failed", &session.id, env);
                    }
                    EventKind::SessionIdle { .. } => {
                        self.emit(&owner, "agent.session.idle", &session.id, env);
                        if self.done(&session, event.seq) {
                            return;
                        }
                    }
                    _ => {}
                }
            }
        }
        self.watched.lock().unwrap_or_else(PoisonError::into_inner).remove(&session.id);
    }

    /// Whether the idle at `seq` left nothing to run; if so the watcher is
    /// released (under the same lock a new turn's [`Webhooks::watch`] takes,
    /// so a turn queued after this idle gets a watcher of its own).
    fn done(&self, session: &Session, seq: u64) -> bool {
        let mut watched = self.watched.lock().unwrap_or_else(PoisonError::into_inner);
        let done = {
            let state = session.lock();
            state.active.is_none() && state.queue.is_empty() && session.log.last_seq() == seq
        };
        if done {
            watched.remove(&session.id);
        }
        done
    }
}
