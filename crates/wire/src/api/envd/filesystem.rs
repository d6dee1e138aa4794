//! `filesystem.Filesystem` messages (envd's `filesystem.proto`, JSON codec).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize, Serializer};

use super::{de_u32, is_zero, ser_i64};

/// `StatRequest`, `MakeDirRequest`, `RemoveRequest`: one path.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct PathRequest {
    /// Absolute, or relative to the base directory; `~` is the base directory.
    pub path: String,
}

/// `ListDirRequest`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct ListDirRequest {
    /// The directory.
    pub path: String,
    /// Levels listed; 0 means 1.
    #[serde(deserialize_with = "de_u32")]
    pub depth: u32,
}

/// `MoveRequest`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct MoveRequest {
    /// What to move.
    pub source: String,
    /// Its new path (parents are created).
    pub destination: String,
}

/// `WatchDirRequest` and `CreateWatcherRequest`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct WatchRequest {
    /// The directory.
    pub path: String,
    /// Watch subdirectories too.
    pub recursive: bool,
    /// Attach the entry's info to create, write and chmod events.
    #[serde(alias = "include_entry")]
    pub include_entry: bool,
    /// Accepted and ignored: inotify sees what the kernel reports.
    #[serde(alias = "allow_network_mounts")]
    pub allow_network_mounts: bool,
}

/// `GetWatcherEventsRequest` and `RemoveWatcherRequest`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct WatcherRequest {
    /// The id `CreateWatcher` returned.
    #[serde(alias = "watcher_id")]
    pub watcher_id: String,
}

/// `FileType`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum FileType {
    /// Unknown.
    #[default]
    Unspecified,
    /// A regular file (or anything that is not a directory or symlink).
    File,
    /// A directory.
    Directory,
    /// A symbolic link.
    Symlink,
}

impl Serialize for FileType {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(match self {
            FileType::Unspecified => "FILE_TYPE_UNSPECIFIED",
            FileType::File => "FILE_TYPE_FILE",
            FileType::Directory => "FILE_TYPE_DIRECTORY",
            FileType::Symlink => "FILE_TYPE_SYMLINK",
        })
    }
}

/// `EntryInfo`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EntryInfo {
    /// Final path component.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// File, directory or symlink (a symlink is never followed).
    #[serde(rename = "type", skip_serializing_if = "is_zero")]
    pub kind: FileType,
    /// Absolute path, as the caller named it.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub path: String,
    /// Size in bytes.
    #[serde(serialize_with = "ser_i64", skip_serializing_if = "is_zero")]
    pub size: i64,
    /// Permission bits (`0o644` is 420).
    #[serde(skip_serializing_if = "is_zero")]
    pub mode: u32,
    /// `-rw-r--r--`, `drwxr-xr-x`, `Lrwxrwxrwx` (Go's notation, as envd).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub permissions: String,
    /// Owner's user name (or uid when it has none).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub owner: String,
    /// Group name (or gid).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub group: String,
    /// Last modification, RFC 3339.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub modified_time: Option<String>,
    /// A symlink's target, as stored in the link.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub symlink_target: Option<String>,
    /// User metadata: the file's `user.e2b.*` extended attributes, prefix stripped.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub metadata: BTreeMap<String, String>,
    /// Whether the entry is a symlink (newer SDKs read this).
    #[serde(skip_serializing_if = "is_zero")]
    pub is_symlink: bool,
}

/// `StatResponse`, `MakeDirResponse`, `MoveResponse`: one entry.
#[derive(Debug, Clone, Serialize)]
pub struct EntryResponse {
    /// The entry.
    pub entry: EntryInfo,
}

/// `ListDirResponse`.
#[derive(Debug, Clone, Serialize)]
pub struct ListDirResponse {
    /// The entries, a directory's entries after it.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub entries: Vec<EntryInfo>,
}

/// An empty message (`RemoveResponse`, `RemoveWatcherResponse`, ...).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Empty {}

/// `EventType`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    /// An entry appeared.
    Create,
    /// A file's content changed.
    Write,
    /// An entry disappeared.
    Remove,
    /// An entry was renamed away (the new name gets a `Create`).
    Rename,
    /// An entry's permissions changed.
    Chmod,
}

impl Serialize for EventType {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(match self {
            EventType::Create => "EVENT_TYPE_CREATE",
            EventType::Write => "EVENT_TYPE_WRITE",
            EventType::Remove => "EVENT_TYPE_REMOVE",
            EventType::Rename => "EVENT_TYPE_RENAME",
            EventType::Chmod => "EVENT_TYPE_CHMOD",
        })
    }
}

/// `FilesystemEvent`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FilesystemEvent {
    /// Path relative to the watched directory.
    pub name: String,
    /// What happened.
    #[serde(rename = "type")]
    pub kind: EventType,
    /// The entry, when asked for and it still exists.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub entry: Option<EntryInfo>,
}

/// `WatchDirResponse`: one of its events.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum WatchDirResponse {
    /// The watch is in place.
    Start(Empty),
    /// A change.
    Filesystem(Box<FilesystemEvent>),
    /// Nothing happened for a keepalive interval.
    Keepalive(Empty),
}

/// `CreateWatcherResponse`.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CreateWatcherResponse {
    /// The watcher's id.
    pub watcher_id: String,
}

/// `GetWatcherEventsResponse`.
#[derive(Debug, Clone, Serialize)]
pub struct WatcherEventsResponse {
    /// Events since the previous call, oldest first.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub events: Vec<FilesystemEvent>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_leave_zero_values_out_and_write_int64_as_strings() {
        let entry = EntryInfo {
            name: "a".into(),
            kind: FileType::File,
            path: "/b/a".into(),
            size: 5,
            mode: 0o644,
            modified_time: Some("1970-01-01T00:00:00Z".into()),
            ..EntryInfo::default()
        };
        let json = serde_json::to_value(&entry).expect("json");
        assert_eq!(
            json,
            serde_json::json!({"name": "a", "type": "FILE_TYPE_FILE", "path": "/b/a", "size": "5", "mode": 420,
                "modifiedTime": "1970-01-01T00:00:00Z"})
        );
        let event = WatchDirResponse::Filesystem(Box::new(FilesystemEvent {
            name: "x".into(),
            kind: EventType::Write,
            entry: None,
        }));
        assert_eq!(
            serde_json::to_value(&event).expect("json"),
            serde_json::json!({"filesystem": {"name": "x", "type": "EVENT_TYPE_WRITE"}})
        );
        assert_eq!(serde_json::to_string(&WatchDirResponse::Start(Empty {})).expect("json"), r#"{"start":{}}"#);
    }
}
