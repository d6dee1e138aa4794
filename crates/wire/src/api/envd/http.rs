//! JSON bodies of envd's plain HTTP endpoints (`/init`, `/files`, `/metrics`,
//! errors), as envd's `envd.yaml` describes them.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// `POST /init` body (fields this server does not use are ignored).
#[derive(Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct InitRequest {
    /// Variables every later process gets.
    #[serde(alias = "env_vars", skip_serializing_if = "Option::is_none")]
    pub env_vars: Option<BTreeMap<String, String>>,
    /// The envd access token from now on.
    #[serde(alias = "access_token", skip_serializing_if = "Option::is_none")]
    pub access_token: Option<String>,
    /// User processes and file operations run as when a request names none.
    #[serde(alias = "default_user", skip_serializing_if = "Option::is_none")]
    pub default_user: Option<String>,
    /// Working directory of processes (and the path of empty paths) when a request names none.
    #[serde(alias = "default_workdir", skip_serializing_if = "Option::is_none")]
    pub default_workdir: Option<String>,
}

impl std::fmt::Debug for InitRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InitRequest")
            .field("env_vars", &self.env_vars.as_ref().map(|v| v.keys().collect::<Vec<_>>()))
            .field("access_token", &self.access_token.as_ref().map(|_| "<redacted>"))
            .field("default_user", &self.default_user)
            .field("default_workdir", &self.default_workdir)
            .finish()
    }
}

/// `/files` query parameters.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct FilesQuery {
    /// The file (absolute, or relative to the base directory).
    pub path: Option<String>,
    /// User the request acts as (`Authorization: Basic` otherwise).
    pub username: Option<String>,
    /// A signed-URL signature (`v1_...`).
    pub signature: Option<String>,
    /// Unix time after which the signature is refused.
    pub signature_expiration: Option<String>,
}

/// One written file of a `POST /files` answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WrittenFile {
    /// Its absolute path.
    pub path: String,
    /// Its final component.
    pub name: String,
    /// Always `file`.
    #[serde(rename = "type")]
    pub kind: String,
    /// The metadata the file keeps (`X-Metadata-*` of the upload, read back), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<BTreeMap<String, String>>,
}

/// An error answer of the plain HTTP endpoints.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HttpError {
    /// The HTTP status, repeated.
    pub code: u16,
    /// What went wrong.
    pub message: String,
}

/// `GET /metrics`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Metrics {
    /// Unix time, seconds.
    pub ts: i64,
    /// CPUs available.
    pub cpu_count: u64,
    /// CPU use, percent.
    pub cpu_used_pct: f64,
    /// Memory, bytes.
    pub mem_total: u64,
    /// Memory in use, bytes.
    pub mem_used: u64,
    /// Page cache, bytes.
    pub mem_cache: u64,
    /// Memory, MiB.
    pub mem_total_mib: u64,
    /// Memory in use, MiB.
    pub mem_used_mib: u64,
    /// Disk in use under the base directory's file system, bytes.
    pub disk_used: u64,
    /// Size of that file system, bytes.
    pub disk_total: u64,
}
