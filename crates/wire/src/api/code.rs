//! Code execution: the dev_tools group of the API port (`POST /code/run`,
//! `GET /git/status`, `GET /git/diff`) and the code-interpreter protocol of
//! the code port (`POST /execute`, `/contexts`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// `POST /code/run` request, as the client sends it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(any(test, feature = "openapi"), derive(schemars::JsonSchema))]
pub struct CodeRunRequest {
    /// Source code.
    pub code: String,
    /// `python`, `node` or `bash`.
    pub language: String,
    /// Seconds before the run is killed (default 30, at most 300).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<f64>,
}

/// `POST /code/run` answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(any(test, feature = "openapi"), derive(schemars::JsonSchema))]
pub struct CodeRunResult {
    /// Captured standard output.
    pub stdout: String,
    /// Captured standard error.
    pub stderr: String,
    /// Exit status; minus the signal number when a signal ended it.
    pub exit_code: i32,
    /// The language that ran.
    pub language: String,
    /// Wall-clock duration in milliseconds.
    pub execution_time_ms: f64,
    /// Whether stdout or stderr was cut at the output limit.
    #[serde(default)]
    pub truncated: bool,
}

/// One changed file in `GET /git/status`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(any(test, feature = "openapi"), derive(schemars::JsonSchema))]
pub struct GitFileStatus {
    /// Path relative to the repository (`old -> new` for renames).
    pub path: String,
    /// `modified`, `added`, `deleted`, `renamed`, `untracked`, `copied`, `unmerged`, or git's letter.
    pub status: String,
}

/// `GET /git/status` answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(any(test, feature = "openapi"), derive(schemars::JsonSchema))]
pub struct GitStatus {
    /// Current branch.
    pub branch: String,
    /// Whether nothing changed.
    pub clean: bool,
    /// Changed files.
    pub files: Vec<GitFileStatus>,
}

/// Query of `GET /git/status` and `GET /git/diff`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(any(test, feature = "openapi"), derive(schemars::JsonSchema))]
pub struct GitQuery {
    /// The repository (default: the base directory).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// `git diff`: `true`/`yes`/`1` for the index's diff instead of the working tree's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub staged: Option<String>,
    /// `git diff`: only this file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
}

/// Summary counts of `GET /git/diff`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(any(test, feature = "openapi"), derive(schemars::JsonSchema))]
pub struct GitDiffStats {
    /// Files changed.
    pub files_changed: u64,
    /// Lines added.
    pub insertions: u64,
    /// Lines removed.
    pub deletions: u64,
}

/// `GET /git/diff` answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(any(test, feature = "openapi"), derive(schemars::JsonSchema))]
pub struct GitDiff {
    /// The unified diff (cut at 1 MiB).
    pub diff: String,
    /// Summary counts.
    pub stats: GitDiffStats,
}

/// `POST /execute` on the code port.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(any(test, feature = "openapi"), derive(schemars::JsonSchema))]
pub struct ExecuteRequest {
    /// Source code.
    pub code: String,
    /// Context to run in (exclusive with `language`).
    #[serde(default)]
    pub context_id: Option<String>,
    /// Run in this language's default context (exclusive with `context_id`).
    #[serde(default)]
    pub language: Option<String>,
    /// Environment variables for this execution only.
    #[serde(default)]
    pub env_vars: Option<BTreeMap<String, String>>,
    /// Seconds after which the execution is interrupted (this server's extension).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<f64>,
}

impl ExecuteRequest {
    /// `code` in the default context of the default language (Python).
    ///
    /// ```
    /// let request = abx_wire::api::code::ExecuteRequest::new("1 + 1");
    /// assert_eq!((request.code.as_str(), request.context_id), ("1 + 1", None));
    /// ```
    pub fn new(code: impl Into<String>) -> Self {
        ExecuteRequest { code: code.into(), ..ExecuteRequest::default() }
    }

    /// `code` in the context `context_id`.
    ///
    /// ```
    /// let request = abx_wire::api::code::ExecuteRequest::in_context("c1", "x");
    /// assert_eq!(request.context_id.as_deref(), Some("c1"));
    /// ```
    pub fn in_context(context_id: &str, code: impl Into<String>) -> Self {
        ExecuteRequest { code: code.into(), context_id: Some(context_id.to_string()), ..ExecuteRequest::default() }
    }
}

/// `POST /contexts` request.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(any(test, feature = "openapi"), derive(schemars::JsonSchema))]
pub struct CreateContextRequest {
    /// Working directory (default: the base directory).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    /// Language (default `python`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub language: Option<String>,
}

/// A code context.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(any(test, feature = "openapi"), derive(schemars::JsonSchema))]
pub struct ContextInfo {
    /// Context id.
    pub id: String,
    /// Its language.
    pub language: String,
    /// Its working directory.
    pub cwd: String,
}

/// A displayed value: the final expression's (`is_main_result`) or a display call's.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(any(test, feature = "openapi"), derive(schemars::JsonSchema))]
pub struct ExecutionResult {
    /// Plain text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// HTML.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub html: Option<String>,
    /// Markdown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub markdown: Option<String>,
    /// SVG document.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub svg: Option<String>,
    /// Base64 PNG.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub png: Option<String>,
    /// Base64 JPEG.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jpeg: Option<String>,
    /// Base64 PDF.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pdf: Option<String>,
    /// LaTeX.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latex: Option<String>,
    /// JSON value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub json: Option<Value>,
    /// JavaScript.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub javascript: Option<String>,
    /// Tabular data.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
    /// Chart description.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chart: Option<Value>,
    /// Other representations by MIME type.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extra: Option<Map<String, Value>>,
    /// Whether this is the value of the final expression.
    #[serde(default)]
    pub is_main_result: bool,
}

/// One NDJSON line of a `POST /execute` answer; `end_of_execution` is always last.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(any(test, feature = "openapi"), derive(schemars::JsonSchema))]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum OutputLine {
    /// Standard output text.
    Stdout {
        /// The text.
        text: String,
        /// When it was read (RFC 3339, UTC).
        timestamp: String,
    },
    /// Standard error text.
    Stderr {
        /// The text.
        text: String,
        /// When it was read (RFC 3339, UTC).
        timestamp: String,
    },
    /// A displayed value.
    Result(Box<ExecutionResult>),
    /// The execution failed.
    Error {
        /// Exception name.
        name: String,
        /// Exception message.
        value: String,
        /// Formatted traceback.
        traceback: String,
    },
    /// The context's execution counter for this execution.
    NumberOfExecutions {
        /// The counter.
        execution_count: u64,
    },
    /// Nothing happened for a while; the execution is still running.
    Keepalive,
    /// This server's extension, first line of a detached execution's
    /// answers (`X-Abx-Detach: keep`): the id to re-attach with.
    Execution {
        /// The execution id (`GET /executions/{id}`).
        execution_id: String,
    },
    /// This server's extension: lines a re-attach asked for that were no
    /// longer held; a cursor moves past them.
    Gap {
        /// Lines lost.
        lines: u64,
        /// Their bytes, each line with its newline.
        bytes: u64,
    },
    /// The execution is over.
    EndOfExecution,
    /// A line type this client does not know.
    #[serde(other)]
    Unknown,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_have_the_protocol_shape() {
        let line = OutputLine::NumberOfExecutions { execution_count: 2 };
        assert_eq!(
            serde_json::to_string(&line).expect("json"),
            r#"{"type":"number_of_executions","execution_count":2}"#
        );
        let result = OutputLine::Result(Box::new(ExecutionResult {
            text: Some("2".into()),
            is_main_result: true,
            ..ExecutionResult::default()
        }));
        assert_eq!(
            serde_json::to_string(&result).expect("json"),
            r#"{"type":"result","text":"2","is_main_result":true}"#
        );
        assert_eq!(serde_json::to_string(&OutputLine::EndOfExecution).expect("json"), r#"{"type":"end_of_execution"}"#);
        let unknown: OutputLine = serde_json::from_str(r#"{"type":"unexpected_end_of_execution"}"#).expect("parse");
        assert_eq!(unknown, OutputLine::Unknown);
    }
}
