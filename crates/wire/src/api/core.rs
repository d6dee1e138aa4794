//! Health and discovery: `GET /health`, `GET /capabilities`, `POST /capabilities/check`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// `GET /health`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(any(test, feature = "openapi"), derive(schemars::JsonSchema))]
pub struct Health {
    /// Always `ok`.
    pub status: String,
}

/// `GET /capabilities`: what the calling identity may do.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(any(test, feature = "openapi"), derive(schemars::JsonSchema))]
pub struct Capabilities {
    /// Discovery document version (2).
    pub api_version: u32,
    /// Version of the server that answers.
    pub server_version: String,
    /// Per group: whether any of its endpoints is enabled.
    pub groups: BTreeMap<String, bool>,
    /// Per group: enabled and total endpoint counts.
    pub group_summary: BTreeMap<String, GroupSummary>,
    /// The caller.
    pub identity: IdentityInfo,
    /// The policy in force.
    pub policy: PolicyInfo,
    /// Every endpoint by id.
    pub endpoints: BTreeMap<String, EndpointState>,
    /// Configuration warnings worth a caller's attention.
    pub warnings: Vec<String>,
}

/// Endpoint counts of one group.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(any(test, feature = "openapi"), derive(schemars::JsonSchema))]
pub struct GroupSummary {
    /// Enabled endpoints.
    pub enabled: usize,
    /// All endpoints.
    pub total: usize,
}

/// The caller as discovery reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(any(test, feature = "openapi"), derive(schemars::JsonSchema))]
pub struct IdentityInfo {
    /// Identity id.
    pub id: String,
    /// Scopes held, sorted.
    pub scopes: Vec<String>,
}

/// The policy as discovery reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(any(test, feature = "openapi"), derive(schemars::JsonSchema))]
pub struct PolicyInfo {
    /// Preset name (`default` when none).
    pub preset: String,
    /// Hash of the effective policy; changes when the configuration does.
    pub revision: String,
    /// Whether anything beyond the defaults is configured.
    pub configured: bool,
}

/// One endpoint's entry in the discovery document.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(any(test, feature = "openapi"), derive(schemars::JsonSchema))]
pub struct EndpointState {
    /// HTTP method (`WS` for the PTY WebSocket).
    pub method: String,
    /// Path pattern.
    pub path: String,
    /// Group name.
    pub group: String,
    /// One-line description.
    pub summary: String,
    /// Whether the response is a stream.
    pub streaming: bool,
    /// The powers the endpoint exercises (`runs_programs`, `writes_files`,
    /// ...), from which the presets decide; absent from older servers.
    #[serde(default)]
    pub powers: Vec<String>,
    /// Whether the endpoint answers at all.
    pub enabled: bool,
    /// Whether this identity may call it.
    pub allowed: bool,
    /// Why not (`endpoint_disabled`, `missing_scope`, `not_implemented`).
    pub reason: Option<String>,
    /// Origin of the rule that disabled it.
    pub rule: Option<String>,
    /// Scopes needed.
    pub scopes: Vec<String>,
    /// Limits in force (only when allowed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<Map<String, Value>>,
    /// Parameters in force (only when allowed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub params: Option<Map<String, Value>>,
    /// Path rules (only when allowed and the endpoint takes paths).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paths: Option<PathsInfo>,
}

/// The path rules of an endpoint as discovery discloses them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(any(test, feature = "openapi"), derive(schemars::JsonSchema))]
pub struct PathsInfo {
    /// Allowed roots (empty: the base dir).
    pub allow: Vec<String>,
    /// Whether writes and deletes are refused.
    pub read_only: bool,
    /// How many deny patterns apply (the patterns themselves stay private).
    pub deny_count: usize,
    /// `within` or `never`.
    pub symlinks: String,
}

/// `POST /capabilities/check` request.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(any(test, feature = "openapi"), derive(schemars::JsonSchema))]
pub struct CheckRequest {
    /// Endpoint id.
    #[serde(default)]
    #[cfg_attr(any(test, feature = "openapi"), schemars(example = &"files_stat"))]
    pub endpoint: String,
    /// One path to check.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// More paths to check.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paths: Option<Vec<String>>,
    /// Operation class: read, write, delete or exec.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub op: Option<String>,
}

/// `POST /capabilities/check` answer: the decision the server would make.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(any(test, feature = "openapi"), derive(schemars::JsonSchema))]
pub struct Decision {
    /// Endpoint id.
    pub endpoint: String,
    /// Whether the call would be admitted.
    pub allowed: bool,
    /// Refusal code.
    pub code: Option<String>,
    /// Refusal explanation.
    pub reason: Option<String>,
    /// Origin of the rule that disabled the endpoint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule: Option<String>,
}
