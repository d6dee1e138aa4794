//! The agents runtime's errors, and the turn failure codes of the Agents wire.
//!
//! [`AgentError`] is what a runtime call refuses with; the HTTP edge maps
//! each variant to the OpenAI-shaped error envelope (`http::agents::error`).
//! [`Failure`] is why a turn failed; its code is one of the Agents API's
//! fixed `SessionTurnError.code` values or one of the extension codes that
//! [`wire_code`] folds into them.

use crate::pyrepr::repr_str;

/// Why a runtime call was refused.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// No such object for this caller (a foreign id reads the same).
    #[error("{what} {} not found", repr_str(.id))]
    NotFound {
        /// `session`, `turn`, `artifact`, `subagent`, `agent`, ...
        what: &'static str,
        /// The id asked for.
        id: String,
        /// The request field that named it.
        param: &'static str,
    },
    /// The request cannot be honoured as sent.
    #[error("{message}")]
    Invalid {
        /// What is wrong, for a person.
        message: String,
        /// The offending field, if one.
        param: Option<String>,
        /// `invalid_request` or a more specific `agents.*` code.
        code: &'static str,
    },
    /// The runtime is declared but has no backend here, or is not declared.
    #[error("{message}")]
    NotImplementedLocally {
        /// Names the runtime and points at `GET /v1/agents/runtimes`.
        message: String,
    },
    /// An operation with no local capability (input token counts, model
    /// deletion, executor registration): refused as not found, never retried.
    #[error("{0}")]
    Unavailable(&'static str),
    /// No model of that id is listed.
    #[error("the model {} does not exist", repr_str(.0))]
    ModelNotFound(String),
    /// A list's `after` cursor names no object of the list.
    #[error("after cursor not found")]
    CursorNotFound,
    /// An `Idempotency-Key` came back with a different request body.
    #[error("Idempotency-Key was reused with a different request body")]
    IdempotencyMismatch,
    /// Too many concurrent event streams on one session.
    #[error("too many concurrent subscribers for this session (at most {0})")]
    TooManySubscribers(usize),
    /// The caller holds as many of a kind as its quota allows (429): only
    /// its own records count, and only its own idle ones are ever evicted.
    #[error("quota {quota} reached: at most {limit} {what} per caller")]
    QuotaExceeded {
        /// The option that sets the quota (`agents_max_sessions`, ...).
        quota: &'static str,
        /// Its value.
        limit: u64,
        /// What is counted (`sessions`, `bytes of template files`, ...).
        what: &'static str,
    },
    /// Something failed inside the server (the details are logged).
    #[error("internal error: {0}")]
    Internal(String),
}

impl AgentError {
    /// A 400 `invalid_request` about `param`.
    pub fn invalid(message: impl Into<String>, param: impl Into<String>) -> Self {
        AgentError::Invalid { message: message.into(), param: Some(param.into()), code: "invalid_request" }
    }

    /// A 400 with a specific code.
    pub fn invalid_code(message: impl Into<String>, param: Option<&str>, code: &'static str) -> Self {
        AgentError::Invalid { message: message.into(), param: param.map(str::to_string), code }
    }

    /// A 404 for `what` called `id`.
    pub fn not_found(what: &'static str, id: &str, param: &'static str) -> Self {
        AgentError::NotFound { what, id: id.to_string(), param }
    }

    /// An internal failure, logged where it happened.
    pub fn internal(context: &str, err: impl std::fmt::Display) -> Self {
        tracing::error!(error = %err, "agents: {context}");
        AgentError::Internal(context.to_string())
    }
}

/// Error codes of the Agents API's turn errors (`SessionTurnError.code`).
pub const WIRE_CODES: &[&str] = &[
    "context_length_exceeded",
    "session_budget_exceeded",
    "usage_limit_exceeded",
    "rate_limit_exceeded",
    "server_overloaded",
    "connection_failed",
    "server_error",
    "authentication_error",
    "invalid_request",
    "resource_not_found",
    "sandbox_error",
    "active_turn_not_steerable",
    "request_timeout",
    "internal_error",
];

/// The Agents wire code of a turn failure code: extension codes fold into
/// the fixed set (`runtime_not_installed` is a `sandbox_error`, ...).
pub fn wire_code(code: &str) -> &str {
    if WIRE_CODES.contains(&code) {
        return code;
    }
    match code {
        "runtime_not_installed" | "output_limit_exceeded" | "workspace_error" => "sandbox_error",
        _ => "internal_error",
    }
}

/// Why a turn failed: a stable code and a message (already redacted).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Failure {
    /// An Agents code or an extension code ([`wire_code`] maps it).
    pub code: String,
    /// For a person; never holds a secret.
    pub message: String,
}

impl Failure {
    /// A failure with this code and message.
    pub fn new(code: &str, message: impl Into<String>) -> Self {
        Failure { code: code.to_string(), message: message.into() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_quote_ids_as_python_does() {
        let err = AgentError::not_found("session", "agsess_x", "session_id");
        assert_eq!(err.to_string(), "session 'agsess_x' not found");
    }

    #[test]
    fn extension_codes_fold_into_the_wire_set() {
        assert_eq!(wire_code("rate_limit_exceeded"), "rate_limit_exceeded");
        assert_eq!(wire_code("runtime_not_installed"), "sandbox_error");
        assert_eq!(wire_code("output_limit_exceeded"), "sandbox_error");
        assert_eq!(wire_code("cancelled"), "internal_error");
    }
}
