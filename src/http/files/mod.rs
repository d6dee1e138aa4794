//! The `file_ops` feature at the edge: each endpoint's handler, by file,
//! and what they share (reading a request's path fields, the policy's
//! limits, and the one mapping of [`FsError`] to the wire).
//!
//! | endpoint | handler | domain |
//! | --- | --- | --- |
//! | `GET /files/list`, `/files/stat`, `POST /files/mkdir`, `DELETE /files`, `POST /files/move`, `/files/search` | [`entries`] | `fs::list`, `fs::ops`, `fs::search` |
//! | `POST /files/upload-stream` (JSON, base64) | [`json_upload`] | `fs::b64::Base64Upload` |
//! | `GET /files/download-stream`, `POST /files/archive` (JSON, base64) | [`json_download`] | `fs::read::base64_document`, `fs::archive` |
//! | `GET`/`HEAD`/`PUT /files/content`, `GET`/`DELETE /files/uploads` | [`content`] | `fs::read`, `fs::upload::Files` |
//! | `GET /files/watch` | [`watch`] | `fs::watch`, `fs::watch_runs` |
//!
//! Every path goes through the policy's guard (`policy::paths`) and the
//! race-safe opens of `fs::safe`. The routes are bound in `http/routes.rs`;
//! the black-box tests are `tests/files.rs`, `tests/files_escape.rs`,
//! `tests/faults_files.rs`, `tests/security_files.rs` and
//! `tests/conformance/test_files.py`.
//!
//! Handler files use this module and the domain, never each other.

pub(crate) mod content;
pub(crate) mod entries;
pub(crate) mod json_download;
pub(crate) mod json_upload;
pub(crate) mod watch;

use abx_domain::fs::{self, read, safe, FsError};
use abx_domain::policy::{Grant, LimitValue, Op};
use abx_wire::endpoints::Limit;

use super::error::ApiError;

impl From<FsError> for ApiError {
    fn from(err: FsError) -> Self {
        match err {
            FsError::Denied(denial) => ApiError::from(denial),
            FsError::Internal { context, source } => {
                tracing::error!(error = %source, "{context}");
                ApiError::internal()
            }
            other => {
                let error = ApiError::of(other.fault(), other.to_string());
                match other.limit() {
                    Some(limit) => error.with_limit(limit),
                    None => error,
                }
            }
        }
    }
}

/// Resolves `raw` for a write as `grant`'s path rules decide, on a blocking thread.
pub async fn resolve_write(grant: &Grant, raw: String) -> Result<safe::Resolved, ApiError> {
    let guard = grant.guard();
    fs::blocking(move || safe::resolve(&guard, &raw, Op::Write, "")).await.map_err(at(grant))
}

/// Maps a domain error; policy denials name the endpoint, as the reference's do.
pub fn at(grant: &Grant) -> impl Fn(FsError) -> ApiError + '_ {
    move |err| match err {
        FsError::Denied(_) => ApiError::from(err).with_endpoint(grant.endpoint().id),
        other => ApiError::from(other),
    }
}

/// The required query parameter `path`.
pub fn query_path(path: Option<String>) -> Result<String, ApiError> {
    path.filter(|p| !p.is_empty()).ok_or_else(|| ApiError::bad_request("Missing 'path' query parameter"))
}

/// The required body field `name`.
pub fn body_field(value: Option<String>, name: &str) -> Result<String, ApiError> {
    value.filter(|v| !v.is_empty()).ok_or_else(|| ApiError::bad_request(format!("Missing or invalid '{name}'")))
}

/// `true`, `yes` or `1`, as the reference reads booleans from queries.
pub fn truthy(value: Option<&str>) -> bool {
    value.is_some_and(|v| matches!(v.to_ascii_lowercase().as_str(), "true" | "yes" | "1"))
}

/// The policy's limit `key`, or `default`.
pub fn limit_or(grant: &Grant, key: Limit, default: u64) -> u64 {
    grant.limit(key).map_or(default, LimitValue::as_u64)
}

/// Resolves `raw` for reading and opens it, within the policy's `max_bytes`, on a blocking thread.
pub async fn open_for_read(grant: &Grant, raw: String) -> Result<read::OpenFile, FsError> {
    let guard = grant.guard();
    let max_bytes = grant.limit(Limit::MaxBytes).map(LimitValue::as_u64);
    fs::blocking(move || {
        let target = safe::resolve(&guard, &raw, Op::Read, "")?;
        read::open(&guard, &target, &raw, max_bytes)
    })
    .await
}
