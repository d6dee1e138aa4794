//! Responses: each response is one turn of a session of kind
//! [`SessionKind::Response`], as the reference maps `/v1/responses` onto its
//! runtime. A new response creates its own session; one that names a
//! `previous_response_id` queues its turn on that response's session, so the
//! CLI resumes its own conversation in the same workspace.
//!
//! The record of a response ([`ResponseRecord`]) travels with its turn (in
//! the turn's `extra`), so it is journaled, restored after a restart and
//! removed with its session, with no store of its own. A deleted response's
//! turn is hidden (`keep: false`); the session goes with its last response.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::error::AgentError;
use super::runtime::{Agents, NewSession};
use super::session::{Record, Session, SessionKind};
use super::turn::TurnRecord;
use super::worker::TurnInput;

/// The key of a response's record in its turn's `extra`.
const RECORD_KEY: &str = "response";

/// What a response remembers beyond its turn.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResponseRecord {
    /// `resp_<24 hex>`.
    pub id: String,
    /// When it was created (whole seconds).
    pub created_at: i64,
    /// The runtime that runs it.
    pub adapter: String,
    /// `model` on the wire (the model handed to the CLI, or the runtime's name).
    pub model: String,
    /// Whether the model string was handed to the CLI.
    pub model_resolved: bool,
    /// `instructions` as sent.
    pub instructions: Option<String>,
    /// The caller's metadata.
    pub metadata: Map<String, Value>,
    /// `tools` on the wire (no header values).
    pub tools: Vec<Value>,
    /// Created with `background: true`.
    pub background: bool,
    /// `store` as sent (`false`: removed once its turn is over).
    pub store: bool,
    /// The response it continues.
    pub previous_response_id: Option<String>,
    /// The session log's last sequence number before its turn was queued:
    /// its events (and so its stream) come after it.
    pub log_start: u64,
}

/// A response found: its session, its record and its turn as they are now.
#[derive(Debug, Clone)]
pub struct FoundResponse {
    /// The session that runs it.
    pub session: Arc<Session>,
    /// Its record.
    pub record: ResponseRecord,
    /// Its turn.
    pub turn: TurnRecord,
}

/// The record of a listed response turn.
fn record_of(turn: &TurnRecord) -> Option<ResponseRecord> {
    let raw = turn.extra.get(RECORD_KEY).filter(|_| turn.keep)?;
    serde_json::from_value(raw.clone()).ok()
}

impl Agents {
    /// Creates the session of a new conversation and runs its first response.
    ///
    /// # Errors
    /// An invalid spec, a session that cannot be written, a full queue.
    pub fn start_response(
        self: &Arc<Self>,
        new: NewSession,
        record: ResponseRecord,
        input: TurnInput,
    ) -> Result<FoundResponse, AgentError> {
        let session = self.create_session(NewSession {
            meta: super::session::SessionMeta { kind: SessionKind::Response, ..new.meta },
            ..new
        })?;
        match self.continue_response(&session, record, input) {
            Ok(found) => Ok(found),
            Err(e) => {
                self.forget(&session);
                Err(e)
            }
        }
    }

    /// Queues a response's turn on `session` (a new conversation's or the
    /// previous response's).
    ///
    /// # Errors
    /// 404 once the session is deleted; 400 when too many turns wait.
    pub fn continue_response(
        self: &Arc<Self>,
        session: &Arc<Session>,
        mut record: ResponseRecord,
        mut input: TurnInput,
    ) -> Result<FoundResponse, AgentError> {
        record.log_start = session.log.last_seq();
        let value = serde_json::to_value(&record).map_err(|e| AgentError::internal("cannot encode a response", e))?;
        input.extra.insert(RECORD_KEY.into(), value);
        let turn = self.submit(session, input)?;
        if !record.store {
            let agents = Arc::clone(self);
            let (session, id, owner, turn_id) =
                (Arc::clone(session), record.id.clone(), session.meta().owner, turn.id.clone());
            tokio::spawn(async move {
                agents.wait_turn(&session, &turn_id).await;
                if let Ok(found) = agents.response(&owner, &id) {
                    agents.delete_response(&found).await;
                }
            });
        }
        Ok(FoundResponse { session: Arc::clone(session), record, turn })
    }

    /// Response `id` of `owner`, with its turn as it is now.
    ///
    /// # Errors
    /// 404 for an unknown, deleted or foreign id.
    pub fn response(&self, owner: &str, id: &str) -> Result<FoundResponse, AgentError> {
        self.response_at(owner, id, "response_id")
    }

    /// [`Agents::response`] naming `param` in its refusal.
    ///
    /// # Errors
    /// 404 for an unknown, deleted or foreign id.
    pub fn response_at(&self, owner: &str, id: &str, param: &'static str) -> Result<FoundResponse, AgentError> {
        if id.starts_with("resp_") {
            for session in self.sessions(owner, SessionKind::Response) {
                let found = session
                    .lock()
                    .turns
                    .iter()
                    .find_map(|t| record_of(t).filter(|r| r.id == id).map(|record| (record, t.clone())));
                if let Some((record, turn)) = found {
                    return Ok(FoundResponse { session, record, turn });
                }
            }
        }
        Err(AgentError::not_found("response", id, param))
    }

    /// The newest response of `session` that was not deleted: the only one a
    /// new response can continue (a CLI's conversation is linear).
    pub fn latest_response(&self, session: &Session) -> Option<String> {
        session.lock().turns.iter().rev().find_map(record_of).map(|r| r.id)
    }

    /// Deletes a response: its turn is hidden; the session (and with it a
    /// running turn) goes with its last response.
    pub async fn delete_response(&self, found: &FoundResponse) {
        let others = {
            let mut state = found.session.lock();
            if let Some(turn) = state.turn_mut(&found.turn.id) {
                turn.keep = false;
                let turn = Box::new(turn.clone());
                found.session.record(&Record::Turn { turn });
            }
            state.turns.iter().filter_map(record_of).count()
        };
        if others == 0 {
            self.delete_session(&found.session).await;
        }
    }

    /// Drops a session that never ran anything.
    fn forget(self: &Arc<Self>, session: &Arc<Session>) {
        let agents = Arc::clone(self);
        let session = Arc::clone(session);
        tokio::spawn(async move { agents.delete_session(&session).await });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agents::session::SessionMeta;
    use crate::agents::spec::{AgentSpec, CommandSpec};
    use crate::agents::AgentsConfig;
    use crate::environment::ChildEnv;
    use tokio_util::sync::CancellationToken;

    fn record(id: &str, store: bool) -> ResponseRecord {
        ResponseRecord {
            id: id.into(),
            created_at: 0,
            adapter: "command".into(),
            model: "command".into(),
            model_resolved: false,
            instructions: None,
            metadata: Map::new(),
            tools: Vec::new(),
            background: false,
            store,
            previous_response_id: None,
            log_start: 0,
        }
    }

    #[tokio::test]
    async fn responses_chain_on_one_session_and_the_last_delete_removes_it() {
        let dir = tempfile::tempdir().expect("dir");
        let config = AgentsConfig { state_dir: Some(dir.path().to_path_buf()), ..AgentsConfig::default() };
        let agents = Agents::start(config, Arc::new(ChildEnv::from_vars([], &[])), CancellationToken::new()).await;
        let command = CommandSpec { argv: vec!["/bin/true".into()], ..CommandSpec::default() };
        let spec = AgentSpec {
            runtime: "command".into(),
            workspace: "/tmp".into(),
            command: Some(command),
            ..AgentSpec::default()
        };
        let new = NewSession {
            spec,
            meta: SessionMeta { owner: "a".into(), ..SessionMeta::default() },
            metadata: Map::new(),
        };
        let input = || TurnInput { prompt: "hi".into(), ..TurnInput::default() };
        let first = agents.start_response(new, record("resp_1", true), input()).expect("first");
        assert_eq!(first.session.meta().kind, SessionKind::Response, "not listed with sessions");
        let second = agents.continue_response(&first.session, record("resp_2", true), input()).expect("second");
        assert_eq!(agents.latest_response(&first.session).as_deref(), Some("resp_2"));
        assert!(agents.response("b", "resp_1").is_err(), "a foreign id reads as unknown");
        assert!(agents.response("a", "turn_1").is_err());
        agents.delete_response(&second).await;
        assert_eq!(agents.latest_response(&first.session).as_deref(), Some("resp_1"));
        assert!(agents.response("a", "resp_2").is_err());
        let found = agents.response("a", "resp_1").expect("still there");
        agents.delete_response(&found).await;
        assert!(agents.sessions("a", SessionKind::Response).is_empty(), "the session went with its last response");
    }
}
