//! Artifacts: immutable snapshot copies of the files a CLI reported as
//! written during a completed turn.
//!
//! Only reported paths are copied (Codex `file_change` items, the write and
//! edit tools of the stream-json CLIs); the workspace is never scanned. A
//! reported path goes through the file API's path guard, confined to the
//! workspace with no symlink allowed ([`PathGuard::confined`]), and is
//! opened through its race-safe open (`fs::safe`: beneath the workspace,
//! no symlink followed, the descriptor read back); the copy must be a
//! regular file with a single link (a hard link could name a file
//! elsewhere), not under `.git`, and at most
//! `ABX_AGENTS_MAX_ARTIFACT_BYTES`; at most [`MAX_PER_TURN`] per turn. Copies are written beside the
//! session's journal (mode 0600), so they survive a restart with it.

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use nix::fcntl::OFlag;
use nix::sys::stat::Mode;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::parsed::ToolKind;
use crate::fs::safe;
use crate::policy::{Op, PathGuard};

/// Artifacts taken per turn at most.
pub const MAX_PER_TURN: usize = 100;

/// One snapshot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArtifactRecord {
    /// `artifact_<24 hex>`.
    pub id: String,
    /// The turn that wrote the file.
    pub turn_id: String,
    /// The file's path relative to the workspace (`/`-separated).
    pub rel: String,
    /// The workspace it was taken from.
    pub workspace: String,
    /// Its size.
    pub size_bytes: u64,
    /// When it was taken (whole seconds since the epoch).
    pub created_at: i64,
}

impl ArtifactRecord {
    /// The file's absolute path in the workspace.
    pub fn path(&self) -> String {
        format!("{}/{}", self.workspace.trim_end_matches('/'), self.rel)
    }

    /// Where the copy is kept under `dir`.
    pub fn stored(&self, dir: &Path) -> PathBuf {
        dir.join("artifacts").join(&self.id)
    }
}

/// A path a tool call reported, and what it did to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reported {
    /// As the CLI spelled it (absolute or workspace-relative).
    pub path: String,
    /// Whether the file was deleted.
    pub deleted: bool,
}

/// Tools whose `file_path`/`path` argument names a file they wrote.
const WRITE_TOOLS: [&str; 6] = ["write_file", "replace", "edit", "write", "multiedit", "edit_file"];

/// Paths a tool call reports as written.
pub fn reported_paths(kind: ToolKind, name: &str, arguments: &Value) -> Vec<Reported> {
    let mut out = Vec::new();
    match kind {
        ToolKind::FileChange => {
            for change in arguments.get("changes").and_then(Value::as_array).into_iter().flatten() {
                if let Some(path) = change.get("path").and_then(Value::as_str) {
                    let deleted = change.get("kind").and_then(Value::as_str) == Some("delete");
                    out.push(Reported { path: path.to_string(), deleted });
                }
            }
        }
        ToolKind::Other if WRITE_TOOLS.contains(&name.to_ascii_lowercase().as_str()) => {
            let path = ["file_path", "path", "absolute_path"]
                .iter()
                .find_map(|k| arguments.get(k).and_then(Value::as_str).filter(|p| !p.is_empty()));
            if let Some(path) = path {
                out.push(Reported { path: path.to_string(), deleted: false });
            }
        }
        _ => {}
    }
    out
}

/// Copies the latest state of each reported path of a completed turn into
/// `dir/artifacts`; returns the records of the copies taken.
pub fn snapshot(
    dir: &Path,
    workspace: &Path,
    turn_id: &str,
    reported: &[Reported],
    max_bytes: u64,
) -> io::Result<Vec<ArtifactRecord>> {
    let mut latest: Vec<&str> = Vec::new();
    for r in reported {
        latest.retain(|p| *p != r.path);
        if !r.deleted {
            latest.push(&r.path);
        }
    }
    if latest.is_empty() {
        return Ok(Vec::new());
    }
    let root = workspace.canonicalize()?;
    let guard = PathGuard::confined(workspace);
    super::journal::private_dir(&dir.join("artifacts"))?;
    let mut taken: Vec<ArtifactRecord> = Vec::new();
    for raw in latest {
        if taken.len() >= MAX_PER_TURN {
            break;
        }
        let Some((rel, data)) = read_reported(&guard, raw, max_bytes) else { continue };
        if taken.iter().any(|t| t.rel == rel) {
            continue;
        }
        let record = ArtifactRecord {
            id: format!("artifact_{}", crate::ids::random_hex(12)),
            turn_id: turn_id.to_string(),
            rel,
            workspace: root.display().to_string(),
            size_bytes: data.len() as u64,
            created_at: super::turn::now() as i64,
        };
        let mut file = OpenOptions::new().write(true).create_new(true).mode(0o600).open(record.stored(dir))?;
        file.write_all(&data)?;
        taken.push(record);
    }
    Ok(taken)
}

/// `(relative path, bytes)` of a reported path that `guard` (the
/// workspace's, see [`PathGuard::confined`]) resolves inside the workspace,
/// outside `.git`, and that opens beneath it with no symlink on the way as a
/// regular file with one link, of at most `max_bytes`.
fn read_reported(guard: &PathGuard, raw: &str, max_bytes: u64) -> Option<(String, Vec<u8>)> {
    let target = safe::resolve(guard, raw, Op::Read, "").ok()?;
    let rel = target.relative();
    if target.is_root() || rel.components().any(|c| c.as_os_str() == ".git") {
        return None;
    }
    let fd = safe::open(guard, &target, OFlag::O_RDONLY | OFlag::O_NONBLOCK, Mode::empty(), Op::Read).ok()?;
    let file = File::from(fd);
    let meta = file.metadata().ok()?;
    // A second link could name a file outside the workspace (or another owner's).
    if !meta.is_file() || meta.nlink() != 1 || meta.len() > max_bytes {
        return None;
    }
    let mut data = Vec::new();
    file.take(max_bytes + 1).read_to_end(&mut data).ok()?;
    if data.len() as u64 > max_bytes {
        return None;
    }
    Some((rel.to_str()?.to_string(), data))
}

/// Opens a kept copy for reading.
///
/// # Errors
/// It is gone.
pub fn open(dir: &Path, record: &ArtifactRecord) -> io::Result<File> {
    File::open(record.stored(dir))
}

/// Removes a kept copy (the file in the workspace is untouched).
pub fn remove(dir: &Path, record: &ArtifactRecord) {
    let _ = std::fs::remove_file(record.stored(dir));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reported(path: &str) -> Reported {
        Reported { path: path.into(), deleted: false }
    }

    #[test]
    fn reported_regular_files_inside_the_workspace_are_copied() {
        let ws = tempfile::tempdir().expect("ws");
        let state = tempfile::tempdir().expect("state");
        std::fs::create_dir(ws.path().join("src")).expect("dir");
        std::fs::write(ws.path().join("src/a.txt"), b"alpha").expect("write");
        std::fs::write(ws.path().join("big"), vec![0u8; 64]).expect("write");
        std::fs::create_dir(ws.path().join(".git")).expect("git");
        std::fs::write(ws.path().join(".git/config"), b"x").expect("write");
        std::os::unix::fs::symlink("/etc/passwd", ws.path().join("link")).expect("link");
        std::fs::create_dir(ws.path().join("real")).expect("dir");
        std::fs::write(ws.path().join("real/in.txt"), b"in").expect("write");
        std::os::unix::fs::symlink(ws.path().join("real"), ws.path().join("dirlink")).expect("link");
        std::fs::write(state.path().join("secret"), b"other").expect("write");
        std::fs::hard_link(state.path().join("secret"), ws.path().join("hard")).expect("hard link");
        let abs = ws.path().join("src/a.txt").display().to_string();
        let paths = [
            reported(&abs),
            reported("src/a.txt"),
            reported("big"),
            reported(".git/config"),
            reported("link"),
            reported("dirlink/in.txt"),
            reported("hard"),
            reported("sub/.git/config"),
            reported("../outside"),
            reported("missing"),
        ];
        let taken = snapshot(state.path(), ws.path(), "turn_1", &paths, 32).expect("snapshot");
        assert_eq!(taken.iter().map(|t| t.rel.as_str()).collect::<Vec<_>>(), ["src/a.txt"]);
        let mut copy = String::new();
        open(state.path(), &taken[0]).expect("open").read_to_string(&mut copy).expect("read");
        assert_eq!(copy, "alpha");
        assert!(taken[0].path().ends_with("/src/a.txt"));
    }

    #[test]
    fn a_deleted_path_is_not_copied() {
        let ws = tempfile::tempdir().expect("ws");
        let state = tempfile::tempdir().expect("state");
        std::fs::write(ws.path().join("gone"), b"x").expect("write");
        let paths = [reported("gone"), Reported { path: "gone".into(), deleted: true }];
        assert!(snapshot(state.path(), ws.path(), "t", &paths, 1024).expect("ok").is_empty());
    }
}
