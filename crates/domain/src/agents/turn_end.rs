//! How turns end: a turn's final status, its `turn.*` event, its record and
//! its waiters; a turn that never ran; and every turn of a deleted session.
//!
//! Shared by the worker, which ends the turns it runs, and by the runtime,
//! which closes a session it deletes; it needs neither.

use tokio::sync::watch;

use super::error::Failure;
use super::log::EventKind;
use super::session::{Record, Session, State};
use super::turn::{now, TurnStatus};

/// Ends a turn: its final status, the `turn.*` event, its record, and its waiters.
pub(crate) fn finish(session: &Session, state: &mut State, turn_id: &str, status: TurnStatus, error: Option<Failure>) {
    let Some(turn) = state.turn_mut(turn_id) else { return };
    turn.status = status;
    turn.completed_at = Some(now());
    turn.error = error;
    let record = turn.clone();
    session.emit(Some(turn_id), EventKind::TurnEnded { turn: record.summary() });
    session.record(&Record::Turn { turn: Box::new(record) });
    if let Some(control) = state.controls.remove(turn_id) {
        control.done.send_replace(true);
    }
}

/// Ends a turn that never ran; the session is idle after it when nothing else waits.
pub(crate) fn finish_unrun(session: &Session, state: &mut State, turn_id: &str, status: TurnStatus) {
    finish(session, state, turn_id, status, None);
    if !state.worker_running && state.active.is_none() && state.queue.is_empty() && !state.closed {
        session.emit(None, EventKind::SessionIdle { usage: state.usage() });
    }
}

/// Marks a session deleted: queued turns are cancelled, the running one is
/// told to stop. Returns receivers that turn true when it has.
pub(crate) fn close(session: &Session) -> Vec<watch::Receiver<bool>> {
    let mut state = session.lock();
    state.closed = true;
    let queued: Vec<String> = state.queue.drain(..).collect();
    for id in queued {
        finish(session, &mut state, &id, TurnStatus::Cancelled, None);
    }
    state
        .controls
        .values()
        .map(|control| {
            control.cancel.cancel();
            control.done.subscribe()
        })
        .collect()
}
