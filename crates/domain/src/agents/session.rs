//! A session: one agent spec, its turns (queued, running, done), its event
//! log, subagents and artifacts, and the journal that keeps them.
//!
//! All mutable state sits behind one lock held only for short, non-blocking
//! updates; the event log has its own lock so readers never wait on turns.

use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, PoisonError};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::artifacts::ArtifactRecord;
use super::journal::Journal;
use super::log::{EventKind, EventLog};
use super::spec::AgentSpec;
use super::subagents::SubagentRecord;
use super::turn::{TurnRecord, TurnStatus, Usage};

/// Who a session serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SessionKind {
    /// Created by `POST /v1/agents/sessions` (listed there).
    #[default]
    Session,
    /// Backs a response (part 2; not listed with sessions).
    Response,
}

/// What the API knows about a session beyond its spec.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SessionMeta {
    /// The caller that owns it (a policy identity id).
    pub owner: String,
    /// Who it serves.
    pub kind: SessionKind,
    /// `agent.id` on the wire (a definition id or the agent's name).
    pub display_id: String,
    /// `agent.name` on the wire.
    pub display_name: Option<String>,
    /// `agent.model` on the wire.
    pub display_model: String,
    /// `agent.tools` on the wire (header values masked).
    #[serde(default)]
    pub tools: Vec<Value>,
    /// The definition it was created from.
    pub definition_id: Option<String>,
    /// The environment it is bound to.
    pub environment_id: Option<String>,
    /// The vaults whose credentials it uses.
    #[serde(default)]
    pub vault_ids: Vec<String>,
    /// Anything other layers keep with a session.
    #[serde(default)]
    pub extra: Map<String, Value>,
}

/// The first record of a session's journal.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SessionHeader {
    /// `agsess_<24 hex>`.
    pub id: String,
    /// When it was created.
    pub created_at: f64,
    /// What it runs.
    pub spec: AgentSpec,
    /// What the API knows about it.
    pub meta: SessionMeta,
    /// The caller's metadata.
    pub metadata: Map<String, Value>,
}

/// One line of a session's journal.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "record", rename_all = "snake_case")]
pub enum Record {
    /// The session as created.
    Session(Box<SessionHeader>),
    /// Its metadata changed.
    Metadata {
        /// The new metadata.
        metadata: Map<String, Value>,
    },
    /// The CLI named its own session id.
    Native {
        /// The id.
        id: String,
    },
    /// A turn as it now is (the last record of an id wins).
    Turn {
        /// The turn.
        turn: Box<TurnRecord>,
    },
    /// A subagent as it now is.
    Subagent {
        /// The subagent.
        subagent: SubagentRecord,
    },
    /// An artifact was taken.
    Artifact {
        /// The artifact.
        artifact: ArtifactRecord,
    },
    /// An artifact was deleted.
    ArtifactDeleted {
        /// Its id.
        id: String,
    },
}

/// The live controls of a queued or running turn.
#[derive(Debug)]
pub(crate) struct TurnControl {
    pub cancel: CancellationToken,
    pub done: watch::Sender<bool>,
    /// MCP servers of this turn only (secrets: memory only).
    pub mcp_servers: Vec<super::spec::McpServer>,
    /// Secret values masked in this turn's events besides the spec's.
    pub redact: Vec<String>,
}

/// A session's mutable state.
#[derive(Debug)]
pub(crate) struct State {
    pub spec: AgentSpec,
    pub meta: SessionMeta,
    pub metadata: Map<String, Value>,
    pub native_session_id: Option<String>,
    pub turns: Vec<TurnRecord>,
    pub queue: VecDeque<String>,
    pub active: Option<String>,
    pub controls: HashMap<String, TurnControl>,
    pub worker_running: bool,
    pub closed: bool,
    pub subscribers: usize,
    /// `(key, body digest)` of recent `Idempotency-Key`s, oldest first.
    pub idempotency: VecDeque<(String, String)>,
    pub subagents: Vec<SubagentRecord>,
    pub artifacts: Vec<ArtifactRecord>,
}

impl State {
    pub fn turn_mut(&mut self, id: &str) -> Option<&mut TurnRecord> {
        self.turns.iter_mut().find(|t| t.id == id)
    }

    /// The sum of its turns' usage, if any reported some.
    pub fn usage(&self) -> Option<Usage> {
        let mut usage: Option<Usage> = None;
        for turn in &self.turns {
            if let Some(u) = &turn.usage {
                usage.get_or_insert_with(Usage::default).add_usage(u);
            }
        }
        usage
    }

    /// `in_progress` while a turn runs or waits, else `idle`.
    pub fn status(&self) -> &'static str {
        if self.active.is_some() || !self.queue.is_empty() {
            "in_progress"
        } else {
            "idle"
        }
    }
}

/// A read-only copy of what the wire shows of a session.
#[derive(Debug, Clone)]
pub struct SessionView {
    /// Its id.
    pub id: String,
    /// When it was created.
    pub created_at: f64,
    /// When something last happened.
    pub last_active_at: f64,
    /// `in_progress` or `idle`.
    pub status: &'static str,
    /// What it runs.
    pub spec: AgentSpec,
    /// What the API knows about it.
    pub meta: SessionMeta,
    /// The caller's metadata.
    pub metadata: Map<String, Value>,
    /// The sum of its turns' usage, if any reported some.
    pub usage: Option<Usage>,
    /// The CLI's own session id.
    pub native_session_id: Option<String>,
}

/// One session; see the module documentation.
#[derive(Debug)]
pub struct Session {
    /// `agsess_<24 hex>`.
    pub id: String,
    /// When it was created.
    pub created_at: f64,
    pub(crate) state: Mutex<State>,
    /// Its event log.
    pub log: EventLog,
    journal: Mutex<Option<Journal>>,
    dir: PathBuf,
}

impl Session {
    pub(crate) fn new(header: &SessionHeader, log: EventLog, journal: Option<Journal>, dir: PathBuf) -> Self {
        let state = State {
            spec: header.spec.clone(),
            meta: header.meta.clone(),
            metadata: header.metadata.clone(),
            native_session_id: None,
            turns: Vec::new(),
            queue: VecDeque::new(),
            active: None,
            controls: HashMap::new(),
            worker_running: false,
            closed: false,
            subscribers: 0,
            idempotency: VecDeque::new(),
            subagents: Vec::new(),
            artifacts: Vec::new(),
        };
        Session {
            id: header.id.clone(),
            created_at: header.created_at,
            state: Mutex::new(state),
            log,
            journal: Mutex::new(journal),
            dir,
        }
    }

    /// A copy of the agent the session runs (what its next turn starts).
    pub fn spec(&self) -> super::spec::AgentSpec {
        self.lock().spec.clone()
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Appends a record to the journal (a failure is logged; memory stays authoritative).
    pub(crate) fn record(&self, record: &Record) {
        let mut journal = self.journal.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(journal) = journal.as_mut() {
            if let Err(e) = journal.append(record) {
                tracing::warn!(session = %self.id, path = %journal.path().display(), error = %e, "agents: cannot write the session journal");
            }
        }
    }

    /// Appends an event (callers may hold the state lock: the log's lock comes after it).
    pub(crate) fn emit(&self, turn_id: Option<&str>, kind: EventKind) -> u64 {
        self.log.append(turn_id, kind)
    }

    /// The session's directory: its journal and events (when persistent) and artifacts.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Journals from now on into `journal`.
    pub(crate) fn set_journal(&self, journal: Journal) {
        *self.journal.lock().unwrap_or_else(PoisonError::into_inner) = Some(journal);
    }

    /// Stops journaling (the session is being deleted).
    pub(crate) fn close_journal(&self) {
        *self.journal.lock().unwrap_or_else(PoisonError::into_inner) = None;
    }

    /// What the wire shows of it now.
    pub fn view(&self) -> SessionView {
        let state = self.lock();
        SessionView {
            id: self.id.clone(),
            created_at: self.created_at,
            last_active_at: self.last_active_at(),
            status: state.status(),
            spec: state.spec.clone(),
            meta: state.meta.clone(),
            metadata: state.metadata.clone(),
            usage: state.usage(),
            native_session_id: state.native_session_id.clone(),
        }
    }

    /// When something last happened (its newest event, or its creation).
    pub fn last_active_at(&self) -> f64 {
        self.log.last_ts().unwrap_or(self.created_at).max(self.created_at)
    }

    /// Who owns it and who it serves.
    pub fn meta(&self) -> SessionMeta {
        self.lock().meta.clone()
    }

    /// `in_progress` or `idle`.
    pub fn status(&self) -> &'static str {
        self.lock().status()
    }

    /// Its listed turns (with their items), oldest first.
    pub fn turns(&self) -> Vec<TurnRecord> {
        self.lock().turns.iter().filter(|t| t.keep).cloned().collect()
    }

    /// One turn, listed or not.
    pub fn turn(&self, id: &str) -> Option<TurnRecord> {
        self.lock().turns.iter().find(|t| t.id == id).cloned()
    }

    /// Its subagents, by opening time.
    pub fn subagents(&self) -> Vec<SubagentRecord> {
        self.lock().subagents.clone()
    }

    /// Its artifacts, oldest first.
    pub fn artifacts(&self) -> Vec<ArtifactRecord> {
        self.lock().artifacts.clone()
    }

    /// Whether nothing runs or waits and `seq` is the newest event: a
    /// stream that has sent `seq` has seen everything.
    pub fn caught_up(&self, seq: u64) -> bool {
        let idle = self.lock().status() == "idle";
        idle && self.log.last_seq() == seq
    }

    /// Replaces the caller's metadata.
    pub fn set_metadata(&self, metadata: Map<String, Value>) {
        self.lock().metadata = metadata.clone();
        self.record(&Record::Metadata { metadata });
    }

    /// Whether it was deleted.
    pub fn is_closed(&self) -> bool {
        self.lock().closed
    }

    /// The running or queued turn's status, for callers that wait on it.
    pub fn turn_status(&self, id: &str) -> Option<TurnStatus> {
        self.lock().turns.iter().find(|t| t.id == id).map(|t| t.status)
    }
}
