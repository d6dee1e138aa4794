//! Processes: `POST /shell`, `POST /shell/stream`, `POST /process/start`,
//! `GET /process/list`, `GET /process/{pid}`, `POST /process/{pid}/signal`,
//! `POST /process/{pid}/stdin`, `GET /process/{pid}/output`.

use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

/// The body of `/shell`, `/shell/stream` and `/process/start`.
///
/// As the reference, `command` is split shell-style into argv and run
/// without a shell; `shell: true` (ours) runs it with `/bin/sh -c` instead.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(any(test, feature = "openapi"), derive(schemars::JsonSchema))]
pub struct ExecRequest {
    /// The command line (a missing or non-string value reads as empty).
    #[serde(default, deserialize_with = "lenient_string")]
    #[cfg_attr(any(test, feature = "openapi"), schemars(example = &"echo hello"))]
    pub command: String,
    /// Working directory (default: the base directory).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    /// Variables added to the child's environment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env: Option<BTreeMap<String, String>>,
    /// Wall-clock limit in seconds (a number or numeric string; anything else means the default).
    #[serde(default, deserialize_with = "lenient_seconds", skip_serializing_if = "Option::is_none")]
    pub timeout: Option<f64>,
    /// Run `command` with `/bin/sh -c` instead of splitting it (ours).
    #[serde(default, skip_serializing_if = "is_false")]
    pub shell: bool,
    /// Run as this user name or uid (ours; needs the daemon to run as root).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// `/process/start`: keep the output for `/process/{pid}/output`.
    #[serde(default, deserialize_with = "truthy", skip_serializing_if = "is_false")]
    pub capture_output: bool,
    /// `/process/start`: give the process a stdin pipe for `/process/{pid}/stdin`.
    #[serde(default, deserialize_with = "truthy", skip_serializing_if = "is_false")]
    pub stdin: bool,
}

impl ExecRequest {
    /// A request for `command` with every option at its default.
    pub fn new(command: impl Into<String>) -> Self {
        ExecRequest { command: command.into(), ..ExecRequest::default() }
    }
}

fn is_false(b: &bool) -> bool {
    !*b
}

fn lenient_string<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    Ok(match Value::deserialize(d)? {
        Value::String(s) => s,
        _ => String::new(),
    })
}

fn lenient_seconds<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    Ok(match Value::deserialize(d)? {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => s.trim().parse::<f64>().ok(),
        Value::Bool(b) => Some(if b { 1.0 } else { 0.0 }),
        _ => None,
    })
}

/// Python truthiness of a JSON value (the reference reads flags with `bool(...)`).
pub fn is_truthy(value: &Value) -> bool {
    match value {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64().is_some_and(|f| f != 0.0),
        Value::String(s) => !s.is_empty(),
        Value::Array(a) => !a.is_empty(),
        Value::Object(o) => !o.is_empty(),
    }
}

fn truthy<'de, D: Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    Ok(is_truthy(&Value::deserialize(d)?))
}

/// `POST /shell` answer.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(any(test, feature = "openapi"), derive(schemars::JsonSchema))]
pub struct ShellResult {
    /// Standard output (invalid UTF-8 replaced).
    pub stdout: String,
    /// Standard error (invalid UTF-8 replaced).
    pub stderr: String,
    /// Exit code; minus the signal number when a signal killed it.
    pub exit_code: i32,
    /// Present (true) when an output was cut at `max_output_bytes`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub truncated: Option<bool>,
}

/// One server-sent event of `POST /shell/stream`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(any(test, feature = "openapi"), derive(schemars::JsonSchema))]
#[serde(tag = "event", rename_all = "lowercase")]
pub enum ShellEvent {
    /// A line of standard output (without its newline).
    Stdout {
        /// The line.
        data: String,
    },
    /// A line of standard error (without its newline).
    Stderr {
        /// The line.
        data: String,
    },
    /// The process ended; always the last event unless the start failed.
    Exit {
        /// Exit code; minus the signal number when a signal killed it.
        exit_code: i32,
    },
    /// `timeout`, `output_limit`, or why the process could not start.
    Error {
        /// What went wrong.
        error: String,
    },
}

impl ShellEvent {
    /// The SSE event name.
    pub fn name(&self) -> &'static str {
        match self {
            ShellEvent::Stdout { .. } => "stdout",
            ShellEvent::Stderr { .. } => "stderr",
            ShellEvent::Exit { .. } => "exit",
            ShellEvent::Error { .. } => "error",
        }
    }

    /// The SSE `data` payload (the event's fields as JSON).
    pub fn data(&self) -> Value {
        match self {
            ShellEvent::Stdout { data } | ShellEvent::Stderr { data } => serde_json::json!({ "data": data }),
            ShellEvent::Exit { exit_code } => serde_json::json!({ "exit_code": exit_code }),
            ShellEvent::Error { error } => serde_json::json!({ "error": error }),
        }
    }

    /// Rebuilds an event from its SSE name and data; `None` for unknown names.
    pub fn from_sse(name: &str, data: &Value) -> Option<ShellEvent> {
        let text = |key: &str| data.get(key).and_then(Value::as_str).unwrap_or_default().to_string();
        Some(match name {
            "stdout" => ShellEvent::Stdout { data: text("data") },
            "stderr" => ShellEvent::Stderr { data: text("data") },
            "exit" => ShellEvent::Exit {
                exit_code: data
                    .get("exit_code")
                    .and_then(Value::as_i64)
                    .and_then(|c| i32::try_from(c).ok())
                    .unwrap_or(0),
            },
            "error" => ShellEvent::Error { error: text("error") },
            _ => return None,
        })
    }
}

/// `POST /process/start` answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(any(test, feature = "openapi"), derive(schemars::JsonSchema))]
pub struct Started {
    /// The process id.
    pub pid: i32,
    /// The command as given.
    pub command: String,
}

/// A process the server started (`GET /process/list`, `GET /process/{pid}`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(any(test, feature = "openapi"), derive(schemars::JsonSchema))]
pub struct ProcessInfo {
    /// The process id.
    pub pid: i32,
    /// The command as given.
    pub command: String,
    /// `running` or `exited`.
    pub state: String,
    /// Unix time it started, in seconds.
    pub started_at: f64,
    /// Exit code once exited (minus the signal number when killed by one).
    pub exit_code: Option<i32>,
}

/// `GET /process/list` answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(any(test, feature = "openapi"), derive(schemars::JsonSchema))]
pub struct ProcessList {
    /// Running processes, and exited ones for a while after they exit.
    pub processes: Vec<ProcessInfo>,
}

/// `POST /process/{pid}/signal` body.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(any(test, feature = "openapi"), derive(schemars::JsonSchema))]
pub struct SignalRequest {
    /// The signal number (an integer or numeric string).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(any(test, feature = "openapi"), schemars(example = 15))]
    pub signal: Option<Value>,
}

impl SignalRequest {
    /// A request for signal `signal`.
    pub fn new(signal: i32) -> Self {
        SignalRequest { signal: Some(Value::from(signal)) }
    }
}

/// `POST /process/{pid}/signal` answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(any(test, feature = "openapi"), derive(schemars::JsonSchema))]
pub struct SignalResult {
    /// The process id.
    pub pid: i32,
    /// The signal sent.
    pub signal: i32,
}

/// `POST /process/{pid}/stdin` body: `data` (text) or `data_base64` (bytes), and/or `eof`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(any(test, feature = "openapi"), derive(schemars::JsonSchema))]
pub struct StdinRequest {
    /// Text to write (UTF-8).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(any(test, feature = "openapi"), schemars(example = &"hello\n"))]
    pub data: Option<Value>,
    /// Bytes to write, base64-encoded; wins over `data`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_base64: Option<Value>,
    /// Close stdin after writing.
    #[serde(default, deserialize_with = "truthy", skip_serializing_if = "is_false")]
    pub eof: bool,
}

/// `POST /process/{pid}/stdin` answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(any(test, feature = "openapi"), derive(schemars::JsonSchema))]
pub struct StdinResult {
    /// The process id.
    pub pid: i32,
    /// Bytes written.
    pub written: usize,
    /// Whether stdin was closed.
    pub closed: bool,
}

/// `GET /process/{pid}/output` query.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(any(test, feature = "openapi"), derive(schemars::JsonSchema))]
pub struct OutputQuery {
    /// The cursor: the `next` of the previous answer (default 0, the oldest retained).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<String>,
    /// Seconds to wait for new output when there is none yet (long polling; default 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait: Option<String>,
}

/// One captured chunk of `GET /process/{pid}/output`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(any(test, feature = "openapi"), derive(schemars::JsonSchema))]
pub struct OutputEvent {
    /// Position across both streams; pass `next` as `since` to continue.
    pub seq: u64,
    /// `stdout` or `stderr`.
    pub stream: String,
    /// The chunk as text (invalid UTF-8 replaced; characters are never split across chunks).
    pub data: String,
    /// The exact bytes, base64-encoded, when they are not valid UTF-8 (ours).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_base64: Option<String>,
}

/// `GET /process/{pid}/output` answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(any(test, feature = "openapi"), derive(schemars::JsonSchema))]
pub struct ProcessOutput {
    /// The process id.
    pub pid: i32,
    /// Retained events from `since` on.
    pub events: Vec<OutputEvent>,
    /// The cursor for the next call.
    pub next: u64,
    /// `running` or `exited`.
    pub state: String,
    /// Exit code once exited.
    pub exit_code: Option<i32>,
    /// Whether the `max_output_bytes` budget ever dropped old output.
    pub dropped: bool,
    /// Whether output between `since` and the first event was dropped before it was read (ours).
    #[serde(default)]
    pub lagged: bool,
}
