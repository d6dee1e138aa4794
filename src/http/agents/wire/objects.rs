//! The objects of the sessions API: `agent.session`, `agent.session.turn`,
//! items, token usage, `agent.session.artifact` and `agent.runtime`,
//! built from the runtime's domain values.

use abx_domain::agents::artifacts::ArtifactRecord;
use abx_domain::agents::error::wire_code;
use abx_domain::agents::runtimes::RuntimeInfo;
use abx_domain::agents::session::SessionView;
use abx_domain::agents::turn::{Item, ItemBody, ItemStatus, Phase, TurnSummary, Usage};
use serde::Serialize;
use serde_json::{json, Map, Value};

use super::Label;

/// The environment id of a session bound to no environment record.
pub const LOCAL_ENVIRONMENT_ID: &str = "env_agent_sandbox";

/// Whole seconds of a float time, as the reference's `int()`.
pub fn secs(t: f64) -> i64 {
    t as i64
}

/// Agents-API `TokenUsage`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct UsageObject {
    /// Prompt tokens.
    pub input_tokens: u64,
    /// `{cached_tokens}`.
    pub input_tokens_details: Value,
    /// Completion tokens.
    pub output_tokens: u64,
    /// `{reasoning_tokens}`.
    pub output_tokens_details: Value,
    /// Input plus output.
    pub total_tokens: u64,
}

impl From<&Usage> for UsageObject {
    fn from(u: &Usage) -> Self {
        UsageObject {
            input_tokens: u.input_tokens,
            input_tokens_details: json!({"cached_tokens": u.cached_tokens}),
            output_tokens: u.output_tokens,
            output_tokens_details: json!({"reasoning_tokens": u.reasoning_tokens}),
            total_tokens: u.total_tokens,
        }
    }
}

/// The `agent` block of a session.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AgentBlock {
    /// A definition id or the agent's name.
    pub id: String,
    /// Its name.
    pub name: Option<String>,
    /// Its model (the runtime's name when none was set).
    pub model: String,
    /// Its instructions.
    pub instructions: Option<String>,
    /// `{enabled: false}`.
    pub multi_agent: Value,
    /// `{effort, summary}`.
    pub reasoning: Value,
    /// `default`.
    pub service_tier: &'static str,
    /// `{format: {type: text}, verbosity: medium}`.
    pub text: Value,
    /// MCP tools (header values masked).
    pub tools: Vec<Value>,
}

/// `agent.session`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SessionObject {
    /// `agsess_...`.
    pub id: String,
    /// `agent.session`.
    pub object: &'static str,
    /// The agent it runs.
    pub agent: AgentBlock,
    /// When it was created.
    pub created_at: i64,
    /// Where it runs.
    pub environment: Value,
    /// Always null (a failed turn does not fail the session).
    pub error: Option<String>,
    /// When something last happened.
    pub last_active_at: i64,
    /// The caller's metadata.
    pub metadata: Map<String, Value>,
    /// Always empty (the CLIs run unattended).
    pub required_actions: Vec<Value>,
    /// `in_progress` or `idle`.
    pub status: &'static str,
    /// The sum of its turns' usage.
    pub usage: Option<UsageObject>,
    /// The vaults it uses.
    pub vault_ids: Vec<String>,
    /// The label.
    pub x_agent_sandbox: Label,
}

impl SessionObject {
    /// The object for `view`, as it is now.
    pub fn new(view: &SessionView) -> Self {
        let meta = &view.meta;
        let spec = &view.spec;
        SessionObject {
            id: view.id.clone(),
            object: "agent.session",
            agent: AgentBlock {
                id: meta.display_id.clone(),
                name: meta.display_name.clone(),
                model: meta.display_model.clone(),
                instructions: spec.instructions.clone(),
                multi_agent: json!({"enabled": false}),
                reasoning: json!({"effort": spec.reasoning_effort, "summary": null}),
                service_tier: "default",
                text: json!({"format": {"type": "text"}, "verbosity": "medium"}),
                tools: meta.tools.clone(),
            },
            created_at: secs(view.created_at),
            environment: json!({
                "type": "self_hosted",
                "id": meta.environment_id.as_deref().unwrap_or(LOCAL_ENVIRONMENT_ID),
                "capability_directories": [],
                "remote_url": "",
                "workspace_directory": spec.workspace,
            }),
            error: None,
            last_active_at: secs(view.last_active_at),
            metadata: view.metadata.clone(),
            required_actions: Vec::new(),
            status: view.status,
            usage: view.usage.as_ref().map(UsageObject::from),
            vault_ids: meta.vault_ids.clone(),
            x_agent_sandbox: Label::process(&["queued_not_steered", "usage_adapter_best_effort"]),
        }
    }

    /// The object a session event carries: the session now, with the status
    /// and usage it had when the event happened, so an event reads the same
    /// whenever a subscriber reads it (the reference renders usage as it is
    /// at reading time).
    pub fn then(view: &SessionView, status: &'static str, usage: &Option<Usage>) -> Self {
        SessionObject { status, usage: usage.as_ref().map(UsageObject::from), ..SessionObject::new(view) }
    }
}

/// `agent.session.turn`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TurnObject {
    /// `turn_...`.
    pub id: String,
    /// `agent.session.turn`.
    pub object: &'static str,
    /// The session's agent id.
    pub agent_id: String,
    /// The session.
    pub session_id: String,
    /// `queued`, `in_progress`, `completed`, `failed`, `cancelled`.
    pub status: &'static str,
    /// When it was queued.
    pub created_at: i64,
    /// When its CLI started.
    pub started_at: Option<i64>,
    /// When it ended.
    pub completed_at: Option<i64>,
    /// `{code, message}` of a failure (codes of the Agents set).
    pub error: Option<Value>,
    /// Always null for a session's own turns.
    pub subagent_id: Option<String>,
    /// What the CLI reported.
    pub usage: Option<UsageObject>,
    /// The label (absent inside events).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub x_agent_sandbox: Option<Label>,
}

impl TurnObject {
    /// The object for a turn of session `session_id` whose agent is `agent_id`.
    pub fn new(turn: &TurnSummary, session_id: &str, agent_id: &str, labelled: bool) -> Self {
        TurnObject {
            id: turn.id.clone(),
            object: "agent.session.turn",
            agent_id: agent_id.to_string(),
            session_id: session_id.to_string(),
            status: turn.status.as_str(),
            created_at: secs(turn.created_at),
            started_at: turn.started_at.map(secs),
            completed_at: turn.completed_at.map(secs),
            error: turn.error.as_ref().map(|e| json!({"code": wire_code(&e.code), "message": e.message})),
            subagent_id: None,
            usage: turn.usage.as_ref().map(UsageObject::from),
            x_agent_sandbox: labelled.then(|| Label::process(&["usage_adapter_best_effort"])),
        }
    }
}

fn text_status(status: ItemStatus) -> &'static str {
    match status {
        ItemStatus::InProgress | ItemStatus::Completed | ItemStatus::Incomplete => status.as_str(),
        ItemStatus::Failed => "completed",
    }
}

/// An item object (`message`, `reasoning`, `command_execution`, `mcp_call`);
/// `labelled` adds the `x_agent_sandbox` label (lists do, events do not).
pub fn item_object(item: &Item, labelled: bool) -> Value {
    let mut out = Map::new();
    out.insert("id".into(), json!(item.id));
    out.insert("turn_id".into(), json!(item.turn_id));
    match &item.body {
        ItemBody::Message { text, phase } => {
            out.insert("type".into(), json!("message"));
            out.insert("role".into(), json!("assistant"));
            out.insert("status".into(), json!(text_status(item.status)));
            out.insert("content".into(), json!([{"type": "output_text", "text": text}]));
            if let Some(phase) = phase {
                let phase = match phase {
                    Phase::Commentary => "commentary",
                    Phase::FinalAnswer => "final_answer",
                };
                out.insert("phase".into(), json!(phase));
            }
        }
        ItemBody::Reasoning { text } => {
            out.insert("type".into(), json!("reasoning"));
            out.insert("status".into(), json!(text_status(item.status)));
            let summary = if text.is_empty() { json!([]) } else { json!([{"type": "summary_text", "text": text}]) };
            out.insert("summary".into(), summary);
        }
        ItemBody::CommandExecution { command, cwd, output, exit_code, duration_ms, .. } => {
            out.insert("type".into(), json!("command_execution"));
            out.insert("status".into(), json!(item.status.as_str()));
            out.insert("command".into(), json!(command));
            out.insert("cwd".into(), json!(cwd));
            out.insert("output".into(), json!(output));
            out.insert("exit_code".into(), json!(exit_code));
            out.insert("duration_ms".into(), json!(duration_ms));
        }
        ItemBody::McpCall { server_label, name, arguments, output, error, .. } => {
            out.insert("type".into(), json!("mcp_call"));
            out.insert("status".into(), json!(item.status.as_str()));
            out.insert("server_label".into(), json!(if server_label.is_empty() { "agent" } else { server_label }));
            out.insert("name".into(), json!(if name.is_empty() { "tool" } else { name }));
            out.insert("arguments".into(), arguments.clone());
            out.insert("output".into(), json!(output));
            out.insert("error".into(), json!(error));
        }
    }
    if labelled {
        out.insert("x_agent_sandbox".into(), json!(Label::process(&["redaction_best_effort"])));
    }
    Value::Object(out)
}

/// `agent.session.artifact`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ArtifactObject {
    /// `artifact_...`.
    pub id: String,
    /// `agent.session.artifact`.
    pub object: &'static str,
    /// When it was taken.
    pub created_at: i64,
    /// The session's environment.
    pub environment_id: String,
    /// The file's path in the workspace.
    pub path: String,
    /// The session.
    pub session_id: String,
    /// Its size.
    pub size_bytes: u64,
    /// The turn that wrote it.
    pub turn_id: String,
    /// The label.
    pub x_agent_sandbox: Label,
}

impl ArtifactObject {
    /// The object for `record` of session `session_id` in `environment_id`.
    pub fn new(record: &ArtifactRecord, session_id: &str, environment_id: Option<&str>) -> Self {
        ArtifactObject {
            id: record.id.clone(),
            object: "agent.session.artifact",
            created_at: record.created_at,
            environment_id: environment_id.unwrap_or(LOCAL_ENVIRONMENT_ID).to_string(),
            path: record.path(),
            session_id: session_id.to_string(),
            size_bytes: record.size_bytes,
            turn_id: record.turn_id.clone(),
            x_agent_sandbox: Label::state(&["snapshot_copy", "reported_paths_only"]),
        }
    }
}

/// `agent.runtime`.
pub fn runtime_object(info: &RuntimeInfo) -> Value {
    let d = info.descriptor;
    json!({
        "name": d.name,
        "aliases": d.aliases,
        "binary": d.binary,
        "installed": info.installed,
        "path": info.path.as_ref().map(|p| p.display().to_string()),
        "version": info.version,
        "experimental": d.capabilities.experimental,
        "capabilities": info.capabilities(),
        "auth_env_present": info.auth_env_present,
        "install_steps": d.install_steps,
        "id": d.name,
        "object": "agent.runtime",
        "implemented": d.implemented,
        "default": info.default,
        "x_agent_sandbox": Label::new("none", &[]).with("installed", info.installed).with("implemented", d.implemented),
    })
}
