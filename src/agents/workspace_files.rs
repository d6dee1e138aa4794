//! Files of an environment's workspace directory: admitting the directory,
//! reading a `/workspace/...` path relative to it, writing a new file
//! without following symlinks or overwriting different bytes, and listing
//! regular files. Locations that steer the next CLI turn (`.git/`,
//! `.codex/`, `AGENTS.md`, shell start-up files, ...) are never written and
//! never listed. Everything here blocks: callers run it off the runtime.

use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

use nix::fcntl::{openat, OFlag};
use nix::sys::stat::{mkdirat, Mode};

use super::error::AgentError;

/// Top-level directories whose contents steer the next CLI turn.
const REFUSED_TOP: [&str; 7] = [".git", ".codex", ".claude", ".cursor", ".qwen", ".qoder", ".ssh"];
/// File names (lower case) that steer the next CLI turn.
const REFUSED_NAMES: [&str; 14] = [
    ".mcp.json",
    "agents.md",
    "qwen.md",
    "claude.md",
    "gemini.md",
    ".bashrc",
    ".bash_profile",
    ".bash_login",
    ".bash_logout",
    ".profile",
    ".zshrc",
    ".zprofile",
    ".zshenv",
    ".envrc",
];
const SYSTEM_ROOTS: [&str; 12] =
    ["/proc", "/sys", "/dev", "/etc", "/boot", "/usr", "/bin", "/sbin", "/lib", "/lib64", "/run", "/var/lib"];
const MAX_PATH: usize = 1024;
const MAX_LIST: usize = 10_000;
const MAX_DEPTH: usize = 20;

fn refused(message: String, param: &str) -> AgentError {
    AgentError::invalid_code(message, Some(param), "agents.path_refused")
}

/// Admits a workspace directory (absolute, no `..`, not `/` nor a system
/// tree), creating it when missing; returns its real path.
///
/// # Errors
/// 400 naming `field`.
pub fn check_workspace_root(path: &str, field: &str) -> Result<PathBuf, AgentError> {
    check_workspace_spelling(path, field)?;
    std::fs::create_dir_all(path).map_err(|_| {
        AgentError::invalid_code(format!("{field}: cannot create the directory"), Some(field), "agents.workspace_error")
    })?;
    let real = std::fs::canonicalize(path).map_err(|_| {
        AgentError::invalid_code(format!("{field}: cannot create the directory"), Some(field), "agents.workspace_error")
    })?;
    if system_directory(real.to_string_lossy().trim_end_matches('/')) {
        return Err(refused(format!("{field}: system directories are not admitted"), field));
    }
    Ok(real)
}

/// The checks of [`check_workspace_root`] that need no file system:
/// absolute, no NUL, no `..`.
///
/// # Errors
/// 400 naming `field`.
pub fn check_workspace_spelling(path: &str, field: &str) -> Result<(), AgentError> {
    if !path.starts_with('/') || path.contains('\0') {
        return Err(AgentError::invalid(format!("{field}: must be an absolute path"), field));
    }
    if path.split('/').any(|p| p == "..") {
        return Err(AgentError::invalid(format!("{field}: must not contain '..'"), field));
    }
    if system_directory(path.trim_end_matches('/')) {
        return Err(refused(format!("{field}: system directories are not admitted"), field));
    }
    Ok(())
}

fn system_directory(path: &str) -> bool {
    path.is_empty() || SYSTEM_ROOTS.iter().any(|r| path == *r || path.starts_with(&format!("{r}/")))
}

/// A `/workspace/...` (or any absolute) path as a path relative to the
/// workspace directory (`""` names the directory itself).
///
/// # Errors
/// 400 for a relative path, `..`, or an over-long path or component.
pub fn normalize_relative(path: Option<&str>, field: &str) -> Result<String, AgentError> {
    let Some(path) = path.filter(|p| p.starts_with('/') && !p.contains('\0')) else {
        return Err(AgentError::invalid(format!("{field}: must be an absolute path"), field));
    };
    if path.len() > MAX_PATH {
        return Err(AgentError::invalid(format!("{field}: path is too long"), field));
    }
    if path.split('/').any(|p| p == "..") {
        return Err(AgentError::invalid(format!("{field}: must not contain '..'"), field));
    }
    let mut parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty() && *p != ".").collect();
    if parts.first() == Some(&"workspace") {
        parts.remove(0);
    }
    if parts.iter().any(|p| p.len() > 255) {
        return Err(AgentError::invalid(format!("{field}: a path component is too long"), field));
    }
    Ok(parts.join("/"))
}

/// Why `rel` may not be written, if it may not.
pub fn refused_location(rel: &str) -> Option<String> {
    let first = rel.split('/').next().unwrap_or_default();
    if REFUSED_TOP.contains(&first) {
        return Some(format!("writes under {first}/ are refused: they change what the agent runs"));
    }
    let last = rel.rsplit('/').next().unwrap_or_default();
    if REFUSED_NAMES.contains(&last.to_lowercase().as_str()) {
        return Some(format!("writing {last} is refused: it changes what the agent runs"));
    }
    None
}

fn dir_flags() -> OFlag {
    OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC
}

/// Where a new file's bytes come from.
pub enum Source<'a> {
    /// Bytes in hand.
    Bytes(&'a [u8]),
    /// A file on disk (a stored blob) of this size.
    File(&'a Path, u64),
}

impl Source<'_> {
    fn len(&self) -> u64 {
        match self {
            Source::Bytes(b) => b.len() as u64,
            Source::File(_, size) => *size,
        }
    }

    fn reader(&self) -> io::Result<Box<dyn Read + '_>> {
        Ok(match self {
            Source::Bytes(b) => Box::new(*b),
            Source::File(path, _) => Box::new(File::open(path)?),
        })
    }
}

/// Creates `root/rel` with `source`'s bytes: `true` when written, `false`
/// when an identical file is already there.
///
/// # Errors
/// `agents.file_exists` when a different file is there; `agents.path_refused`
/// for a symlink or non-directory component or a refused location.
pub fn write_new_file(root: &Path, rel: &str, source: &Source<'_>) -> Result<bool, AgentError> {
    if rel.is_empty() {
        return Err(AgentError::invalid("path: names the workspace directory itself", "path"));
    }
    if let Some(why) = refused_location(rel) {
        return Err(refused(format!("path: {why}"), "path"));
    }
    let parts: Vec<&str> = rel.split('/').collect();
    let (name, dirs) = parts.split_last().ok_or_else(|| AgentError::invalid("path: empty", "path"))?;
    let mut current: OwnedFd = nix::fcntl::open(root, dir_flags(), Mode::empty()).map_err(|_| {
        AgentError::invalid_code("workspace directory is not available", None, "agents.workspace_error")
    })?;
    for component in dirs {
        match mkdirat(current.as_fd(), *component, Mode::from_bits_truncate(0o755)) {
            Ok(()) | Err(nix::errno::Errno::EEXIST) => {}
            Err(_) => return Err(refused("path: cannot create the directory".into(), "path")),
        }
        current = openat(current.as_fd(), *component, dir_flags() | OFlag::O_NOFOLLOW, Mode::empty())
            .map_err(|_| refused("path: a component is a symlink or not a directory".into(), "path"))?;
    }
    let create = OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    let fd = match openat(current.as_fd(), *name, create, Mode::from_bits_truncate(0o644)) {
        Ok(fd) => fd,
        Err(nix::errno::Errno::EEXIST) => return same_bytes_or_refuse(&current, name, source),
        Err(_) => return Err(refused("path: cannot create the file".into(), "path")),
    };
    let mut file = File::from(fd);
    let written = source.reader().and_then(|mut r| io::copy(&mut r, &mut file)).and_then(|_| file.flush());
    if let Err(e) = written {
        drop(file);
        let _ = nix::unistd::unlinkat(current.as_fd(), *name, nix::unistd::UnlinkatFlags::NoRemoveDir);
        return Err(AgentError::internal("cannot write an environment file", e));
    }
    Ok(true)
}

fn same_bytes_or_refuse(dir: &OwnedFd, name: &str, source: &Source<'_>) -> Result<bool, AgentError> {
    let refuse = || {
        AgentError::invalid_code(
            "path: a different file already exists; files are never overwritten",
            Some("path"),
            "agents.file_exists",
        )
    };
    let flags = OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC;
    let fd = openat(dir.as_fd(), name, flags, Mode::empty()).map_err(|_| refuse())?;
    let file = File::from(fd);
    let meta = file.metadata().map_err(|_| refuse())?;
    use std::os::unix::fs::MetadataExt;
    if !meta.is_file() || meta.len() != source.len() || meta.nlink() > 1 {
        return Err(refuse());
    }
    let mut theirs = io::BufReader::new(file);
    let mut ours = io::BufReader::new(source.reader().map_err(|_| refuse())?);
    let (mut a, mut b) = ([0u8; 8192], [0u8; 8192]);
    loop {
        let n = ours.read(&mut a).map_err(|_| refuse())?;
        if n == 0 {
            return Ok(false);
        }
        theirs.read_exact(&mut b[..n]).map_err(|_| refuse())?;
        if a[..n] != b[..n] {
            return Err(refuse());
        }
    }
}

/// Regular files under `root/prefix` as `(relative path, size)`, sorted by
/// path components; symlinks and the refused top-level directories are skipped.
pub fn list_files(root: &Path, prefix: &str) -> Vec<(String, u64)> {
    let mut base = root.to_path_buf();
    for component in prefix.split('/').filter(|p| !p.is_empty()) {
        base.push(component);
        match std::fs::symlink_metadata(&base) {
            Ok(m) if m.is_dir() => {}
            _ => return Vec::new(),
        }
    }
    let mut out = Vec::new();
    let mut stack = vec![(base, prefix.trim_matches('/').to_string(), 0usize)];
    while let Some((dir, rel_dir, depth)) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let rel = if rel_dir.is_empty() { name } else { format!("{rel_dir}/{name}") };
            if REFUSED_TOP.contains(&rel.split('/').next().unwrap_or_default()) {
                continue;
            }
            let Ok(kind) = entry.file_type() else { continue };
            if kind.is_dir() && depth < MAX_DEPTH {
                stack.push((entry.path(), rel, depth + 1));
            } else if kind.is_file() {
                if let Ok(meta) = entry.metadata() {
                    out.push((rel, meta.len()));
                }
            }
            if out.len() >= MAX_LIST {
                break;
            }
        }
        if out.len() >= MAX_LIST {
            break;
        }
    }
    out.sort_by(|a, b| a.0.split('/').cmp(b.0.split('/')));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_read_relative_to_the_workspace() {
        assert_eq!(normalize_relative(Some("/workspace/a/./b.txt"), "p").expect("ok"), "a/b.txt");
        assert_eq!(normalize_relative(Some("/srv/x"), "p").expect("ok"), "srv/x");
        assert!(normalize_relative(Some("a/b"), "p").is_err());
        assert!(normalize_relative(Some("/workspace/../etc"), "p").is_err());
        assert!(refused_location(".git/config").is_some());
        assert!(refused_location("sub/AGENTS.md").is_some());
        assert!(refused_location("src/main.rs").is_none());
    }

    #[test]
    fn files_are_created_never_overwritten_and_listed() {
        let dir = tempfile::tempdir().expect("tmp");
        let root = dir.path();
        assert!(write_new_file(root, "a/b.txt", &Source::Bytes(b"hi")).expect("new"));
        assert!(!write_new_file(root, "a/b.txt", &Source::Bytes(b"hi")).expect("same bytes"));
        let err = write_new_file(root, "a/b.txt", &Source::Bytes(b"ho")).expect_err("different");
        assert!(matches!(err, AgentError::Invalid { code: "agents.file_exists", .. }));
        std::os::unix::fs::symlink("/tmp", root.join("link")).expect("symlink");
        let err = write_new_file(root, "link/x", &Source::Bytes(b"x")).expect_err("symlink");
        assert!(matches!(err, AgentError::Invalid { code: "agents.path_refused", .. }));
        std::fs::create_dir(root.join(".git")).expect("git");
        std::fs::write(root.join(".git/HEAD"), b"x").expect("head");
        std::fs::write(root.join("z.txt"), b"zzz").expect("z");
        assert_eq!(list_files(root, ""), [("a/b.txt".to_string(), 2), ("z.txt".to_string(), 3)]);
        assert_eq!(list_files(root, "a"), [("a/b.txt".to_string(), 2)]);
        assert!(list_files(root, "nope").is_empty());
    }
}
