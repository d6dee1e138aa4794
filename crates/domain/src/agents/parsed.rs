//! The adapter-neutral vocabulary a CLI's output is parsed into.
//!
//! Every adapter turns its CLI's lines into [`Parsed`] events; the turn
//! builder (`build.rs`) turns those into items and session events. The
//! `command` runtime's programs print exactly these events as JSON lines,
//! tagged by `type` (see `docs/agents.md`):
//!
//! ```json
//! {"type":"tool_start","item_id":"c1","kind":"command","name":"command_execution","command":"ls"}
//! {"type":"tool_end","item_id":"c1","ok":true,"output":"a.txt\n","exit_code":0}
//! {"type":"message","item_id":"m1","text":"Done."}
//! ```

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// What kind of tool a tool call is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolKind {
    /// A shell command (a `command_execution` item).
    Command,
    /// A call to an MCP server's tool.
    Mcp,
    /// A patch or file write the CLI applied.
    FileChange,
    /// A web search.
    WebSearch,
    /// Any other native tool of the CLI.
    #[default]
    Other,
}

/// What happened to a subagent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SubagentOp {
    /// The id first appeared.
    Open,
    /// The CLI closed it.
    Close,
    /// One entry of its own stream (`entry`).
    Event,
}

/// Token usage the CLI reported (added up over a turn).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct UsageDelta {
    /// Prompt tokens.
    #[serde(default)]
    pub input_tokens: u64,
    /// Completion tokens.
    #[serde(default)]
    pub output_tokens: u64,
    /// Prompt tokens served from a cache.
    #[serde(default)]
    pub cached_tokens: u64,
    /// Completion tokens spent reasoning.
    #[serde(default)]
    pub reasoning_tokens: u64,
    /// What the CLI says it cost.
    #[serde(default)]
    pub cost_usd: Option<f64>,
}

/// One normalised event of a CLI's output.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Parsed {
    /// The CLI's own session or thread id (its resume handle).
    Session {
        /// The id.
        id: String,
    },
    /// Streamed assistant text of message `item_id`.
    TextDelta {
        /// The CLI's id of the message.
        item_id: String,
        /// The new text.
        text: String,
    },
    /// A complete assistant message (its authoritative text).
    Message {
        /// The CLI's id of the message.
        item_id: String,
        /// The whole text.
        text: String,
    },
    /// Streamed reasoning summary.
    ReasoningDelta {
        /// The CLI's id of the reasoning.
        item_id: String,
        /// The new text.
        text: String,
    },
    /// A complete reasoning summary.
    Reasoning {
        /// The CLI's id of the reasoning.
        item_id: String,
        /// The whole text.
        text: String,
    },
    /// A tool call began.
    ToolStart {
        /// The CLI's id of the call.
        item_id: String,
        /// What kind of tool.
        #[serde(default)]
        kind: ToolKind,
        /// The tool's name.
        #[serde(default)]
        name: String,
        /// Its arguments.
        #[serde(default)]
        arguments: Value,
        /// The command line, for a command.
        #[serde(default)]
        command: Option<String>,
        /// The MCP server, for an MCP call.
        #[serde(default)]
        server: Option<String>,
    },
    /// Streamed output of a running tool call.
    ToolOutput {
        /// The CLI's id of the call.
        item_id: String,
        /// The new output.
        text: String,
    },
    /// A tool call finished.
    ToolEnd {
        /// The CLI's id of the call.
        item_id: String,
        /// Whether it succeeded.
        #[serde(default = "yes")]
        ok: bool,
        /// Its whole output.
        #[serde(default)]
        output: Option<String>,
        /// A command's exit code.
        #[serde(default)]
        exit_code: Option<i64>,
        /// Why it failed.
        #[serde(default)]
        error: Option<String>,
    },
    /// Token usage.
    Usage(UsageDelta),
    /// An error the CLI reported; `fatal` fails the turn.
    Error {
        /// An Agents code (`internal_error` is refined from the text).
        #[serde(default = "internal_error")]
        code: String,
        /// What the CLI said.
        text: String,
        /// Whether the turn fails.
        #[serde(default)]
        fatal: bool,
    },
    /// The CLI's terminal result record.
    Result {
        /// Whether it succeeded.
        ok: bool,
        /// Its final text, if it gave one.
        #[serde(default)]
        text: Option<String>,
        /// Why it stopped.
        #[serde(default)]
        stop_reason: Option<String>,
    },
    /// A line that is not part of the protocol (kept as a log event).
    Log {
        /// The line.
        text: String,
    },
    /// A subagent id the CLI itself emitted.
    Subagent {
        /// What happened.
        op: SubagentOp,
        /// The subagent ids concerned.
        ids: Vec<String>,
        /// Its name, when the CLI gave one.
        #[serde(default)]
        name: Option<String>,
        /// Its instructions, when the CLI gave them.
        #[serde(default)]
        prompt: Option<String>,
        /// One entry of its stream (`op: event`).
        #[serde(default)]
        entry: Option<Value>,
    },
}

fn yes() -> bool {
    true
}

fn internal_error() -> String {
    "internal_error".into()
}

impl Parsed {
    /// A `text_delta`.
    pub fn text_delta(item_id: impl Into<String>, text: impl Into<String>) -> Self {
        Parsed::TextDelta { item_id: item_id.into(), text: text.into() }
    }

    /// A `message`.
    pub fn message(item_id: impl Into<String>, text: impl Into<String>) -> Self {
        Parsed::Message { item_id: item_id.into(), text: text.into() }
    }

    /// A `tool_start` of `kind`.
    pub fn tool_start(item_id: impl Into<String>, kind: ToolKind, name: impl Into<String>, arguments: Value) -> Self {
        Parsed::ToolStart { item_id: item_id.into(), kind, name: name.into(), arguments, command: None, server: None }
    }

    /// A `tool_end`.
    pub fn tool_end(item_id: impl Into<String>, ok: bool, output: Option<String>) -> Self {
        Parsed::ToolEnd { item_id: item_id.into(), ok, output, exit_code: None, error: None }
    }

    /// An `error`.
    pub fn error(code: &str, text: impl Into<String>, fatal: bool) -> Self {
        Parsed::Error { code: code.into(), text: text.into(), fatal }
    }

    /// A `result`.
    pub fn result(ok: bool, text: Option<String>, stop_reason: Option<String>) -> Self {
        Parsed::Result { ok, text, stop_reason }
    }

    /// A `log` line.
    pub fn log(text: impl Into<String>) -> Self {
        Parsed::Log { text: text.into() }
    }
}

/// A JSON line as an object, or `None` (blank, not JSON, not an object).
pub fn json_object(line: &str) -> Option<serde_json::Map<String, Value>> {
    match serde_json::from_str::<Value>(line.trim()) {
        Ok(Value::Object(map)) => Some(map),
        _ => None,
    }
}

/// `value` as text: strings as they are, anything else as compact JSON.
pub fn json_text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// The string at `key` of `map` (`""` when absent or not a string).
pub fn str_at<'a>(map: &'a serde_json::Map<String, Value>, key: &str) -> &'a str {
    map.get(key).and_then(Value::as_str).unwrap_or("")
}

/// A non-negative integer at `key` of `map` (0 otherwise).
pub fn u64_at(map: &serde_json::Map<String, Value>, key: &str) -> u64 {
    map.get(key).and_then(Value::as_u64).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_protocol_round_trips() {
        let lines = [
            r#"{"type":"session","id":"s1"}"#,
            r#"{"type":"tool_start","item_id":"c1","kind":"command","name":"command_execution","command":"ls"}"#,
            r#"{"type":"tool_end","item_id":"c1","output":"a\n","exit_code":0}"#,
            r#"{"type":"usage","input_tokens":3,"output_tokens":4}"#,
            r#"{"type":"message","item_id":"m1","text":"hi"}"#,
            r#"{"type":"result","ok":true}"#,
        ];
        let parsed: Vec<Parsed> = lines.iter().map(|l| serde_json::from_str(l).expect(l)).collect();
        assert_eq!(parsed[0], Parsed::Session { id: "s1".into() });
        assert!(matches!(&parsed[2], Parsed::ToolEnd { ok: true, exit_code: Some(0), .. }));
        assert!(matches!(&parsed[3], Parsed::Usage(UsageDelta { input_tokens: 3, output_tokens: 4, .. })));
        assert!(serde_json::from_str::<Parsed>(r#"{"type":"message","text":"no id"}"#).is_err());
        assert!(serde_json::from_str::<Parsed>(r#"{"type":"nope"}"#).is_err());
    }
}
