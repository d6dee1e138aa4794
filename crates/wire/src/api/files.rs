//! File operations: `/files/*` requests and answers.
//!
//! The reference's endpoints keep its field names and shapes. Request fields
//! are read leniently, as the reference does: a value of the wrong JSON type
//! counts as missing, so the handler answers the reference's "Missing or
//! invalid" message rather than a decoding error.

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

fn lenient_string<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    Ok(match Value::deserialize(d)? {
        Value::String(s) => Some(s),
        _ => None,
    })
}

/// A query with just a path (`files_stat`, `files_delete`, downloads).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[cfg_attr(any(test, feature = "openapi"), derive(schemars::JsonSchema))]
pub struct PathQuery {
    /// The path, absolute or relative to the base directory.
    #[serde(default)]
    #[cfg_attr(any(test, feature = "openapi"), schemars(example = &"hello.txt"))]
    pub path: Option<String>,
}

/// `GET /files/list` query. Numbers are parsed leniently (a bad one means the default).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[cfg_attr(any(test, feature = "openapi"), derive(schemars::JsonSchema))]
pub struct ListQuery {
    /// Directory to list.
    #[serde(default)]
    #[cfg_attr(any(test, feature = "openapi"), schemars(example = &"."))]
    pub path: Option<String>,
    /// `true`/`yes`/`1` to enter subdirectories.
    #[serde(default)]
    pub recursive: Option<String>,
    /// Most entries returned (the policy's `max_entries` caps it).
    #[serde(default)]
    pub max_entries: Option<String>,
    /// Deepest level when recursive (extension; the policy's `max_depth` caps it).
    #[serde(default)]
    pub max_depth: Option<String>,
}

/// `GET /files/list` answer.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(any(test, feature = "openapi"), derive(schemars::JsonSchema))]
pub struct ListResponse {
    /// Entries, each directory's in the order the file system yields them,
    /// a subdirectory's entries right after it.
    pub entries: Vec<FileEntry>,
}

/// One listed entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(any(test, feature = "openapi"), derive(schemars::JsonSchema))]
pub struct FileEntry {
    /// File name.
    pub name: String,
    /// `file`, `directory` or `symlink`.
    #[serde(rename = "type")]
    pub kind: String,
    /// Size in bytes (of the link itself for symlinks).
    pub size: u64,
    /// Last modification, ISO 8601 UTC.
    pub modified: String,
    /// Full path (extension: the reference gives names only).
    #[serde(default)]
    pub path: String,
}

/// `GET /files/stat` answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(any(test, feature = "openapi"), derive(schemars::JsonSchema))]
pub struct FileInfo {
    /// File name.
    pub name: String,
    /// Resolved path.
    pub path: String,
    /// `file`, `directory`, `symlink`, or `unknown` when missing.
    #[serde(rename = "type")]
    pub kind: String,
    /// Size in bytes.
    pub size: u64,
    /// Permission bits as three octal digits (`644`).
    pub permissions: String,
    /// Last modification, ISO 8601 UTC.
    pub modified: String,
    /// Last access, ISO 8601 UTC.
    pub accessed: String,
    /// Creation time where recorded, else last status change, ISO 8601 UTC.
    pub created: String,
    /// Whether the path exists.
    pub exists: bool,
}

impl FileInfo {
    /// The answer for a path that does not exist.
    pub fn missing(name: String, path: &std::path::Path) -> FileInfo {
        FileInfo {
            name,
            path: path.display().to_string(),
            kind: "unknown".into(),
            size: 0,
            permissions: String::new(),
            modified: String::new(),
            accessed: String::new(),
            created: String::new(),
            exists: false,
        }
    }
}

/// `POST /files/mkdir` body.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[cfg_attr(any(test, feature = "openapi"), derive(schemars::JsonSchema))]
pub struct MkdirRequest {
    /// Directory to make, with its parents.
    #[serde(default, deserialize_with = "lenient_string")]
    #[cfg_attr(any(test, feature = "openapi"), schemars(example = &"new/dir"))]
    pub path: Option<String>,
}

/// `POST /files/mkdir` answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(any(test, feature = "openapi"), derive(schemars::JsonSchema))]
pub struct MkdirResponse {
    /// Resolved path.
    pub path: String,
    /// Always `true` (also when it already existed), as the reference.
    pub created: bool,
}

/// `DELETE /files` answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(any(test, feature = "openapi"), derive(schemars::JsonSchema))]
pub struct DeleteResponse {
    /// Resolved path.
    pub path: String,
    /// Always `true`.
    pub deleted: bool,
}

/// `POST /files/move` body.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[cfg_attr(any(test, feature = "openapi"), derive(schemars::JsonSchema))]
pub struct MoveRequest {
    /// Path to move.
    #[serde(default, deserialize_with = "lenient_string")]
    #[cfg_attr(any(test, feature = "openapi"), schemars(example = &"hello.txt"))]
    pub source: Option<String>,
    /// New path; an existing directory receives the source inside it.
    #[serde(default, deserialize_with = "lenient_string")]
    #[cfg_attr(any(test, feature = "openapi"), schemars(example = &"moved.txt"))]
    pub destination: Option<String>,
}

/// `POST /files/move` answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(any(test, feature = "openapi"), derive(schemars::JsonSchema))]
pub struct MoveResponse {
    /// Resolved source.
    pub source: String,
    /// Resolved final destination.
    pub destination: String,
}

/// `POST /files/search` body.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[cfg_attr(any(test, feature = "openapi"), derive(schemars::JsonSchema))]
pub struct SearchRequest {
    /// Directory to search.
    #[serde(default, deserialize_with = "lenient_string")]
    #[cfg_attr(any(test, feature = "openapi"), schemars(example = &"."))]
    pub path: Option<String>,
    /// Shell-style glob on file names (`*.py`).
    #[serde(default, deserialize_with = "lenient_string")]
    #[cfg_attr(any(test, feature = "openapi"), schemars(example = &"*.txt"))]
    pub pattern: Option<String>,
    /// Deepest directory level searched (default 5).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_depth: Option<Value>,
    /// Most results (default 100).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_results: Option<Value>,
    /// Extension: a regular expression the file's content must match.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    /// Extension: seconds before the search stops with `timed_out` (the policy's `timeout_seconds` caps it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<f64>,
}

/// `POST /files/search` answer.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[cfg_attr(any(test, feature = "openapi"), derive(schemars::JsonSchema))]
pub struct SearchResponse {
    /// Matches, in walk order.
    pub results: Vec<SearchHit>,
    /// Whether the search stopped on its timeout.
    pub timed_out: bool,
}

/// One search match.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(any(test, feature = "openapi"), derive(schemars::JsonSchema))]
pub struct SearchHit {
    /// File name.
    pub name: String,
    /// Full path.
    pub path: String,
    /// Extension: the matching lines, for content searches.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub matches: Option<Vec<LineMatch>>,
}

/// A content match.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(any(test, feature = "openapi"), derive(schemars::JsonSchema))]
pub struct LineMatch {
    /// 1-based line number.
    pub line: u64,
    /// The line (lossily decoded, at most 512 bytes).
    pub text: String,
}

/// `POST /files/upload-stream` body.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(any(test, feature = "openapi"), derive(schemars::JsonSchema))]
pub struct UploadRequest {
    /// Destination path.
    #[cfg_attr(any(test, feature = "openapi"), schemars(example = &"upload.txt"))]
    pub path: String,
    /// The content, standard base64 with padding (empty for an empty file).
    #[cfg_attr(any(test, feature = "openapi"), schemars(example = &"aGVsbG8K"))]
    pub content_base64: String,
}

/// Answer of an upload.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(any(test, feature = "openapi"), derive(schemars::JsonSchema))]
pub struct TransferResponse {
    /// Resolved path written.
    pub path: String,
    /// Bytes written.
    pub bytes: u64,
    /// Extension (`PUT /files/content`): the new content's ETag.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub etag: Option<String>,
}

/// `GET /files/download-stream` answer.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(any(test, feature = "openapi"), derive(schemars::JsonSchema))]
pub struct DownloadResponse {
    /// Resolved path read.
    pub path: String,
    /// The content, standard base64.
    pub content_base64: String,
    /// Bytes read.
    pub bytes: u64,
}

/// `POST /files/archive` body.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[cfg_attr(any(test, feature = "openapi"), derive(schemars::JsonSchema))]
pub struct ArchiveRequest {
    /// Files and directories to pack.
    #[serde(default)]
    pub paths: Option<Value>,
    /// `tar.gz` (default) or `zip`.
    #[serde(default)]
    pub format: Option<Value>,
}

/// `POST /files/archive` answer.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(any(test, feature = "openapi"), derive(schemars::JsonSchema))]
pub struct ArchiveResponse {
    /// The archive, standard base64.
    pub content_base64: String,
    /// `tar.gz` or `zip`.
    pub format: String,
    /// Archive size in bytes.
    pub bytes: u64,
}

/// `GET /files/watch` query.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[cfg_attr(any(test, feature = "openapi"), derive(schemars::JsonSchema))]
pub struct WatchQuery {
    /// Directory to watch.
    #[serde(default)]
    #[cfg_attr(any(test, feature = "openapi"), schemars(example = &"."))]
    pub path: Option<String>,
    /// `true`/`yes`/`1` to watch subdirectories too.
    #[serde(default)]
    pub recursive: Option<String>,
    /// Seconds between two `modified` events of one path (0.1 to 5, default 0.5).
    #[serde(default)]
    pub interval: Option<String>,
    /// Seconds the watch lasts (the policy's `max_duration_seconds` caps it; default 300).
    #[serde(default)]
    pub timeout: Option<String>,
}

/// A `change` event of `GET /files/watch`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(any(test, feature = "openapi"), derive(schemars::JsonSchema))]
pub struct WatchEvent {
    /// `created`, `modified` or `deleted`.
    #[serde(rename = "type")]
    pub kind: String,
    /// The path that changed.
    pub path: String,
    /// Whether it is (or was) a directory.
    pub is_dir: bool,
    /// For a `created` event that is the arrival end of a rename within the watch: where it came from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub old_path: Option<String>,
}

/// `PUT /files/content` and `GET /files/uploads` query.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[cfg_attr(any(test, feature = "openapi"), derive(schemars::JsonSchema))]
pub struct ContentQuery {
    /// Destination path.
    #[serde(default)]
    #[cfg_attr(any(test, feature = "openapi"), schemars(example = &"upload.bin"))]
    pub path: Option<String>,
    /// Resumable upload: where this body starts (0 starts or restarts the upload).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offset: Option<u64>,
    /// Resumable upload: the file's total size.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
    /// `false` to refuse replacing an existing file (the policy may forbid it anyway).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overwrite: Option<bool>,
}

/// State of a resumable upload (`GET /files/uploads`, and `PUT` before the last byte).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(any(test, feature = "openapi"), derive(schemars::JsonSchema))]
pub struct UploadStatus {
    /// Resolved destination.
    pub path: String,
    /// Bytes received so far: the next `offset` to send.
    pub offset: u64,
    /// The declared total size.
    pub size: u64,
    /// Whether the file is complete and in place.
    pub complete: bool,
}

/// `DELETE /files/uploads` answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(any(test, feature = "openapi"), derive(schemars::JsonSchema))]
pub struct UploadCancelled {
    /// Resolved destination.
    pub path: String,
    /// Always `true`.
    pub cancelled: bool,
}
