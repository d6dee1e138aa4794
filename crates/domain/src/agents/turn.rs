//! Turns and items: the saved record of what a CLI did for one input.
//!
//! A [`TurnRecord`] is what is listed, persisted and snapshotted into
//! events; an [`Item`] is one unit of its work (a message, reasoning, a
//! command execution, a tool call).

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::error::Failure;
use super::parsed::{ToolKind, UsageDelta};

/// Where a turn is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TurnStatus {
    /// Waiting behind another turn or for a slot.
    Queued,
    /// Its CLI is running.
    InProgress,
    /// The CLI finished.
    Completed,
    /// The CLI failed, timed out or could not start.
    Failed,
    /// Cancelled before or while running.
    Cancelled,
}

impl TurnStatus {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            TurnStatus::Queued => "queued",
            TurnStatus::InProgress => "in_progress",
            TurnStatus::Completed => "completed",
            TurnStatus::Failed => "failed",
            TurnStatus::Cancelled => "cancelled",
        }
    }

    /// Whether the turn is over.
    pub fn is_terminal(self) -> bool {
        matches!(self, TurnStatus::Completed | TurnStatus::Failed | TurnStatus::Cancelled)
    }
}

/// Where an item is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ItemStatus {
    /// Still streaming.
    InProgress,
    /// Finished.
    Completed,
    /// Cut short (the turn ended first).
    Incomplete,
    /// The tool call failed.
    Failed,
}

impl ItemStatus {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            ItemStatus::InProgress => "in_progress",
            ItemStatus::Completed => "completed",
            ItemStatus::Incomplete => "incomplete",
            ItemStatus::Failed => "failed",
        }
    }
}

/// Whether a message was said along the way or is the turn's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Followed by more work in the same turn.
    Commentary,
    /// The last thing the agent said.
    FinalAnswer,
}

/// What an item holds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ItemBody {
    /// Assistant text.
    Message {
        /// The text so far (redacted).
        text: String,
        /// Set when the message is complete.
        phase: Option<Phase>,
    },
    /// A reasoning summary.
    Reasoning {
        /// The text so far (redacted).
        text: String,
    },
    /// A shell command the CLI ran.
    CommandExecution {
        /// The command line (redacted).
        command: String,
        /// Where it ran.
        cwd: Option<String>,
        /// Its output (redacted, capped).
        output: String,
        /// Its exit code, once known.
        exit_code: Option<i64>,
        /// How long it took.
        duration_ms: Option<u64>,
        /// The CLI's arguments of the call (redacted).
        arguments: Value,
    },
    /// Any other tool call (MCP, file change, web search, native tool).
    McpCall {
        /// What kind of tool.
        kind: ToolKind,
        /// The MCP server, or the runtime for native tools.
        server_label: String,
        /// The tool's name.
        name: String,
        /// Its arguments (redacted).
        arguments: Value,
        /// Its output (redacted, capped).
        output: Option<String>,
        /// Why it failed.
        error: Option<String>,
    },
}

/// One saved unit of a turn's work.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Item {
    /// `item_<24 hex>`.
    pub id: String,
    /// The turn it belongs to.
    pub turn_id: String,
    /// Its life stage.
    pub status: ItemStatus,
    /// Its position in the turn's output.
    pub output_index: usize,
    /// What it holds.
    #[serde(flatten)]
    pub body: ItemBody,
}

/// Token usage of a turn (or a session's total).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Usage {
    /// Prompt tokens.
    pub input_tokens: u64,
    /// Completion tokens.
    pub output_tokens: u64,
    /// Prompt tokens from a cache.
    pub cached_tokens: u64,
    /// Completion tokens spent reasoning.
    pub reasoning_tokens: u64,
    /// Input plus output.
    pub total_tokens: u64,
    /// What the CLI said it cost.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
}

impl Usage {
    /// Adds what the CLI reported.
    pub fn add(&mut self, delta: &UsageDelta) {
        self.input_tokens += delta.input_tokens;
        self.output_tokens += delta.output_tokens;
        self.cached_tokens += delta.cached_tokens;
        self.reasoning_tokens += delta.reasoning_tokens;
        self.total_tokens = self.input_tokens + self.output_tokens;
        if let Some(cost) = delta.cost_usd {
            self.cost_usd = Some(self.cost_usd.unwrap_or(0.0) + cost);
        }
    }

    /// Adds another total.
    pub fn add_usage(&mut self, other: &Usage) {
        self.input_tokens += other.input_tokens;
        self.output_tokens += other.output_tokens;
        self.cached_tokens += other.cached_tokens;
        self.reasoning_tokens += other.reasoning_tokens;
        self.total_tokens = self.input_tokens + self.output_tokens;
    }
}

/// A turn as it is listed, persisted and carried by events.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TurnRecord {
    /// `turn_<24 hex>`.
    pub id: String,
    /// The session it belongs to.
    pub session_id: String,
    /// The input text.
    pub prompt: String,
    /// Its life stage.
    pub status: TurnStatus,
    /// When it was queued (seconds since the epoch).
    pub created_at: f64,
    /// When its CLI started.
    pub started_at: Option<f64>,
    /// When it ended.
    pub completed_at: Option<f64>,
    /// Why it failed.
    pub error: Option<Failure>,
    /// What the CLI reported.
    pub usage: Option<Usage>,
    /// Its items, in output order.
    #[serde(default)]
    pub items: Vec<Item>,
    /// Listed with the session's turns and items (part 2 hides response turns).
    #[serde(default = "yes")]
    pub keep: bool,
    /// Instructions prepended to this turn's prompt.
    #[serde(default)]
    pub instructions: Option<String>,
    /// The input items as accepted (responses).
    #[serde(default)]
    pub input_items: Vec<Value>,
    /// Labels other layers attach (`response_id`, ...).
    #[serde(default)]
    pub extra: serde_json::Map<String, Value>,
}

fn yes() -> bool {
    true
}

/// A turn without its items and inputs: what turn events carry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TurnSummary {
    /// The turn's id.
    pub id: String,
    /// Its life stage.
    pub status: TurnStatus,
    /// When it was queued.
    pub created_at: f64,
    /// When its CLI started.
    pub started_at: Option<f64>,
    /// When it ended.
    pub completed_at: Option<f64>,
    /// Why it failed.
    pub error: Option<Failure>,
    /// What the CLI reported.
    pub usage: Option<Usage>,
}

impl TurnRecord {
    /// A turn queued now, with no items yet.
    pub fn queued(id: String, session_id: &str, prompt: String) -> Self {
        TurnRecord {
            id,
            session_id: session_id.to_string(),
            prompt,
            status: TurnStatus::Queued,
            created_at: now(),
            started_at: None,
            completed_at: None,
            error: None,
            usage: None,
            items: Vec::new(),
            keep: true,
            instructions: None,
            input_items: Vec::new(),
            extra: serde_json::Map::new(),
        }
    }

    /// The summary events carry.
    pub fn summary(&self) -> TurnSummary {
        TurnSummary {
            id: self.id.clone(),
            status: self.status,
            created_at: self.created_at,
            started_at: self.started_at,
            completed_at: self.completed_at,
            error: self.error.clone(),
            usage: self.usage.clone(),
        }
    }
}

/// Seconds since the epoch, as a float (the reference's `time.time()`).
pub fn now() -> f64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64())
}
