//! The agents group's wire objects (the local, OpenAI-shaped Agents API)
//! and their mapping from and to the agents domain. They live at the edge:
//! they are built from the domain's types, and the companion client has no
//! agents calls.
//!
//! Every object carries an `x_agent_sandbox` label ([`Label`]) saying it was
//! computed locally and which documented differences from the hosted API
//! apply ([`DIFFERENCES`]); every response carries `X-Agent-Sandbox-Local: 1`.
//! Errors use the OpenAI envelope (`{"error": {message, type, param, code}}`).
//!
//! - [`objects`]: sessions, turns, items, usage, artifacts, runtimes.
//! - [`events`]: the server-sent events of a session's stream.
//! - [`traces`], [`subagents`]: traces and subagent detail.
//! - [`requests`], [`tools`]: request bodies read into domain values.
//! - [`definitions`], [`environments`]: agent definitions, environments,
//!   templates, their files and file blobs.
//! - [`responses`], [`response_events`]: the Responses API's request, object and stream events.
//! - [`vaults`]: vaults and credentials (metadata only), and their request bodies.
//! - [`webhooks`]: webhook endpoints, their requests, test results and event types.

pub mod definitions;
pub mod environments;
pub mod events;
pub mod objects;
pub mod requests;
pub mod response_events;
pub mod responses;
pub mod subagents;
pub mod tools;
pub mod traces;
pub mod vaults;
pub mod webhooks;

use serde::Serialize;
use serde_json::{Map, Value};

/// The response header that marks a local answer.
pub const LOCAL_HEADER: &str = "X-Agent-Sandbox-Local";

/// The stable difference codes carried in `x_agent_sandbox.differences`.
pub const DIFFERENCES: &[(&str, &str)] = &[
    ("queued_not_steered", "input sent during a turn queues a new turn; no mid-turn steering"),
    ("usage_adapter_best_effort", "usage is whatever the CLI reported; null when it reported none"),
    ("redaction_best_effort", "output redaction covers registered secrets and common token shapes"),
    ("update_in_place", "updates apply in place; running sessions keep their snapshot"),
    ("snapshot_at_session_start", "a session copies the definition when it is created"),
    ("hosted_request_converted", "an empty openai_hosted request was converted to self_hosted"),
    ("nothing_provisioned", "the environment is a directory binding; nothing is provisioned"),
    ("local_workspace", "paths are interpreted relative to the environment workspace directory"),
    ("no_overwrite", "an existing file with different bytes is refused"),
    ("local_blob", "file ids are blobs held in server memory, not an OpenAI Files API"),
    ("not_hosted_template", "a reduced local record, not a hosted environment template"),
    ("applies_env_and_files_only", "a template applies env and inline files only"),
    ("memory_only", "secrets live in server memory and are lost on restart"),
    ("secret_in_agent_env", "agent-executed code can read the secret from the CLI environment"),
    ("snapshot_copy", "an immutable copy taken when the turn completed"),
    ("reported_paths_only", "only paths the CLI reported as written; the workdir is never scanned"),
    ("delete_removes_snapshot_only", "deleting removes the snapshot, not the file on disk"),
    ("trace_from_journal_timing_only", "spans come from journal timestamps; no text or arguments"),
    ("ids_from_cli_only", "subagent ids are those the CLI itself emitted"),
    ("turns_grouped_from_parent_stream", "turns are groups of the tagged parent stream"),
    ("turns_from_rollout", "turns come from the child rollout the session names"),
    ("summary_not_encrypted_compaction", "a local summary, not an encrypted compaction item"),
    ("response_is_cli_turn", "the response is one turn of a local CLI process"),
    ("stream_replayed_after_turn", "the stream replays the stored turn after it finished"),
    ("model_passthrough", "the model string is handed to the CLI, not served by OpenAI"),
    ("local_signer", "this server signs and delivers the event"),
    ("queued_steer", "response.steer queues a successor turn; it does not steer a running one"),
    ("not_implemented_locally", "no local capability exists for this operation"),
];

/// The `x_agent_sandbox` object.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Label {
    /// Always true: computed by this server.
    pub local: bool,
    /// `local_process`, `local_state` or `none` (never `openai_hosted`).
    pub compute: &'static str,
    /// Codes of [`DIFFERENCES`].
    pub differences: Vec<&'static str>,
    /// Fields particular to one object.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl Label {
    /// A label with these differences (each must be a code of [`DIFFERENCES`]).
    pub fn new(compute: &'static str, differences: &[&'static str]) -> Self {
        debug_assert!(differences.iter().all(|d| DIFFERENCES.iter().any(|(c, _)| c == d)), "unknown difference code");
        Label { local: true, compute, differences: differences.to_vec(), extra: Map::new() }
    }

    /// Computed by a local process.
    pub fn process(differences: &[&'static str]) -> Self {
        Label::new("local_process", differences)
    }

    /// Computed from local state.
    pub fn state(differences: &[&'static str]) -> Self {
        Label::new("local_state", differences)
    }

    /// Adds a field.
    pub fn with(mut self, key: &str, value: impl Into<Value>) -> Self {
        self.extra.insert(key.to_string(), value.into());
        self
    }
}

/// The OpenAI list envelope.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Page<T> {
    /// `list`.
    pub object: &'static str,
    /// This page.
    pub data: Vec<T>,
    /// The first id of this page.
    pub first_id: Option<String>,
    /// The last id of this page.
    pub last_id: Option<String>,
    /// Whether more follow.
    pub has_more: bool,
}

impl<T> Page<T> {
    /// The same page with each object turned into another (a page of
    /// records chosen first, then written as wire objects).
    pub fn map<U>(self, f: impl FnMut(T) -> U) -> Page<U> {
        Page {
            object: self.object,
            data: self.data.into_iter().map(f).collect(),
            first_id: self.first_id,
            last_id: self.last_id,
            has_more: self.has_more,
        }
    }
}

/// The OpenAI error envelope.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ErrorEnvelope {
    /// The error.
    pub error: ErrorObject,
}

/// The error inside [`ErrorEnvelope`].
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ErrorObject {
    /// For a person.
    pub message: String,
    /// `invalid_request_error`, `not_found_error`, ...
    #[serde(rename = "type")]
    pub error_type: &'static str,
    /// The offending field.
    pub param: Option<String>,
    /// A machine code.
    pub code: String,
    /// Set on refusals of operations with no local capability.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub x_agent_sandbox: Option<Label>,
}

/// A deletion receipt (`agent.session.deleted`, `agent.session.artifact.deleted`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Deleted {
    /// The id.
    pub id: String,
    /// What was deleted.
    pub object: &'static str,
    /// Always true.
    pub deleted: bool,
    /// The label.
    pub x_agent_sandbox: Label,
}
