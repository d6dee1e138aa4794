//! The JSON error body every failing request answers with.

use serde::{Deserialize, Serialize};

/// `{"error", "type", "code"?, "endpoint"?, "rule"?, "scope"?, "limit"?, "retry_after"?}`:
/// the reference server's error shape, which its client turns into typed exceptions.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorBody {
    /// Human-readable message.
    pub error: String,
    /// Exception name (`ValueError`, `PolicyDenied`, `FileNotFoundError`, ...).
    #[serde(rename = "type")]
    pub error_type: String,
    /// Stable machine code (`endpoint_disabled`, `path_not_allowed`, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    /// Endpoint id the error concerns.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    /// Origin of the rule that decided a denial.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule: Option<String>,
    /// Scope the identity lacks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
    /// Identity that was refused a scope.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub identity: Option<String>,
    /// The limit that was exceeded (bytes for 413).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u64>,
    /// Seconds to wait before retrying (429).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after: Option<u64>,
}

impl ErrorBody {
    /// A body with just a message and an exception name.
    pub fn new(error: impl Into<String>, error_type: impl Into<String>) -> Self {
        ErrorBody {
            error: error.into(),
            error_type: error_type.into(),
            code: None,
            endpoint: None,
            rule: None,
            scope: None,
            identity: None,
            limit: None,
            retry_after: None,
        }
    }

    /// Sets the machine code.
    pub fn with_code(mut self, code: impl Into<String>) -> Self {
        self.code = Some(code.into());
        self
    }
}
