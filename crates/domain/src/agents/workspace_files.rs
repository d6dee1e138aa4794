//! Files of an environment's workspace directory: admitting the directory,
//! reading a `/workspace/...` path relative to it, writing a new file
//! without following symlinks or overwriting different bytes, and listing
//! regular files. Locations that steer the next CLI turn (`.git/`,
//! `.codex/`, `AGENTS.md`, shell start-up files, ...) are never written and
//! never listed, at any depth. Every directory created and every file
//! written, and every existing file compared, goes through the governing
//! endpoint's path guard and the file API's race-safe opens (`fs::safe`:
//! beneath the root, no symlink followed, the descriptor read back), the
//! one guard the `file_ops` endpoints use: nothing is made outside the
//! policy's roots nor through a symlink. Everything here blocks: callers run it off
//! the runtime.

use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};

use nix::fcntl::OFlag;
use nix::sys::stat::Mode;

use super::error::AgentError;
use crate::fs::safe::{self, Resolved};
use crate::fs::FsError;
use crate::policy::paths::below;
use crate::policy::{Op, PathGuard};

/// Directories (lower case) whose contents steer the next CLI turn, or the
/// tools it runs, wherever they appear in a path.
const REFUSED_DIRS: [&str; 9] =
    [".git", ".codex", ".claude", ".cursor", ".qwen", ".qoder", ".gemini", ".ssh", ".config"];
/// File names (lower case) that steer the next CLI turn or the tools it runs.
const REFUSED_NAMES: [&str; 21] = [
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
    ".npmrc",
    ".yarnrc",
    ".yarnrc.yml",
    ".gitconfig",
    ".gitmodules",
    ".netrc",
    ".pypirc",
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
/// tree); returns its real path. An existing directory is bound as it is; a
/// missing one is made through `guard` (the governing endpoint's path
/// rules, which the caller has admitted it under for writing), so no
/// directory is created outside the policy's roots nor through a symlink.
///
/// # Errors
/// 400 naming `field`.
pub fn check_workspace_root(guard: &PathGuard, path: &str, field: &str) -> Result<PathBuf, AgentError> {
    check_workspace_spelling(path, field)?;
    let cannot = || {
        AgentError::invalid_code(format!("{field}: cannot create the directory"), Some(field), "agents.workspace_error")
    };
    let real = match std::fs::canonicalize(path) {
        Ok(real) if real.is_dir() => real,
        Ok(_) => return Err(cannot()),
        Err(_) => {
            let target =
                safe::resolve(guard, path, Op::Write, field).map_err(|e| refused(format!("{field}: {e}"), field))?;
            safe::create_dirs(guard, &target, Op::Write).map_err(|_| cannot())?;
            target.path
        }
    };
    if system_directory(real.to_string_lossy().trim_end_matches('/')) {
        return Err(refused(format!("{field}: system directories are not admitted"), field));
    }
    Ok(real)
}

/// Whether admitting `path` as a workspace would create a directory (so its
/// path must pass the path rules for writing first).
pub fn workspace_missing(path: &str) -> bool {
    !Path::new(path.trim()).is_dir()
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

/// Why `rel` may not be written, if it may not: any component (not only the
/// first or the last) that is a refused directory or name.
pub fn refused_location(rel: &str) -> Option<String> {
    let parts: Vec<&str> = rel.split('/').filter(|p| !p.is_empty()).collect();
    for (i, part) in parts.iter().enumerate() {
        let lower = part.to_lowercase();
        if REFUSED_DIRS.contains(&lower.as_str()) && i + 1 < parts.len() {
            return Some(format!("writes under {part}/ are refused: they change what the agent runs"));
        }
        if REFUSED_DIRS.contains(&lower.as_str()) || REFUSED_NAMES.contains(&lower.as_str()) {
            return Some(format!("writing {part} is refused: it changes what the agent runs"));
        }
    }
    None
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

/// Creates `root/rel` (`root` a workspace's real path) with `source`'s
/// bytes: `true` when written, `false` when an identical file is already
/// there. The path is resolved and authorised by `guard` for writing; it must
/// stay beneath `root` once resolved, and no component of it, as written or
/// as resolved, may be a refused location. The missing directories and the
/// file are made through descriptors from the policy's root, with no symlink
/// followed.
///
/// # Errors
/// `agents.file_exists` when a different file is there; `agents.path_refused`
/// for a refused location, a path the guard refuses or that leads outside
/// the workspace, or a symlink or non-directory on the way.
pub fn write_new_file(guard: &PathGuard, root: &Path, rel: &str, source: &Source<'_>) -> Result<bool, AgentError> {
    if rel.is_empty() {
        return Err(AgentError::invalid("path: names the workspace directory itself", "path"));
    }
    if let Some(why) = refused_location(rel) {
        return Err(refused(format!("path: {why}"), "path"));
    }
    let raw = root.join(rel);
    let target = safe::resolve(guard, &raw.to_string_lossy(), Op::Write, "path")
        .map_err(|e| refused(format!("path: {e}"), "path"))?;
    let inside = below(&target.path, root).filter(|r| !r.as_os_str().is_empty());
    let Some(resolved_rel) = inside else {
        return Err(refused("path: leads outside the workspace directory".into(), "path"));
    };
    if let Some(why) = refused_location(&resolved_rel.to_string_lossy()) {
        return Err(refused(format!("path: {why}"), "path"));
    }
    let (Some(parent), Some(name)) = (target.path.parent(), target.path.file_name()) else {
        return Err(refused("path: cannot create the file".into(), "path"));
    };
    let current = safe::create_dirs(guard, &target.sibling(parent.to_path_buf()), Op::Write)
        .map_err(|_| refused("path: a component is a symlink or not a directory".into(), "path"))?;
    let create = OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL;
    let fd = match safe::open(guard, &target, create, Mode::from_bits_truncate(0o644), Op::Write) {
        Ok(fd) => fd,
        Err(FsError::Exists) => return same_bytes_or_refuse(guard, &target, source),
        Err(_) => return Err(refused("path: cannot create the file".into(), "path")),
    };
    let mut file = File::from(fd);
    let written = source.reader().and_then(|mut r| io::copy(&mut r, &mut file)).and_then(|_| file.flush());
    if let Err(e) = written {
        drop(file);
        let _ = nix::unistd::unlinkat(current.as_fd(), name, nix::unistd::UnlinkatFlags::NoRemoveDir);
        return Err(AgentError::internal("cannot write an environment file", e));
    }
    Ok(true)
}

fn same_bytes_or_refuse(guard: &PathGuard, target: &Resolved, source: &Source<'_>) -> Result<bool, AgentError> {
    let refuse = || {
        AgentError::invalid_code(
            "path: a different file already exists; files are never overwritten",
            Some("path"),
            "agents.file_exists",
        )
    };
    let fd = safe::open(guard, target, OFlag::O_RDONLY | OFlag::O_NONBLOCK, Mode::empty(), Op::Write)
        .map_err(|_| refuse())?;
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
/// path components; symlinks, refused locations at any depth and whatever
/// `guard` does not permit (its deny patterns, the daemon's own paths) are
/// skipped.
pub fn list_files(guard: &PathGuard, root: &Path, prefix: &str) -> Vec<(String, u64)> {
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
            let lower = entry.file_name().to_string_lossy().to_lowercase();
            if REFUSED_DIRS.contains(&lower.as_str()) || !guard.permits_resolved(&entry.path()) {
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
        for refused in [".git/config", "sub/AGENTS.md", "sub/.git/hooks/x", ".npmrc", "a/.NPMRC", "a/.Codex/b", ".git"]
        {
            assert!(refused_location(refused).is_some(), "{refused}");
        }
        for fine in ["src/main.rs", "git/x", "a.git/b", "docs/agents.md.txt"] {
            assert!(refused_location(fine).is_none(), "{fine}");
        }
    }

    #[test]
    fn files_are_created_never_overwritten_and_listed() {
        let (_dir, guard, real) = crate::policy::paths::scratch();
        let root = &real;
        assert!(write_new_file(&guard, root, "a/b.txt", &Source::Bytes(b"hi")).expect("new"));
        assert!(!write_new_file(&guard, root, "a/b.txt", &Source::Bytes(b"hi")).expect("same bytes"));
        let err = write_new_file(&guard, root, "a/b.txt", &Source::Bytes(b"ho")).expect_err("different");
        assert!(matches!(err, AgentError::Invalid { code: "agents.file_exists", .. }));
        std::os::unix::fs::symlink("/tmp", root.join("link")).expect("symlink");
        let err = write_new_file(&guard, root, "link/x", &Source::Bytes(b"x")).expect_err("symlink");
        assert!(matches!(err, AgentError::Invalid { code: "agents.path_refused", .. }));
        std::fs::create_dir(root.join(".git")).expect("git");
        std::fs::write(root.join(".git/HEAD"), b"x").expect("head");
        std::fs::write(root.join("z.txt"), b"zzz").expect("z");
        std::fs::create_dir_all(root.join("a/.git")).expect("nested git");
        std::fs::write(root.join("a/.git/config"), b"x").expect("config");
        assert_eq!(list_files(&guard, root, ""), [("a/b.txt".to_string(), 2), ("z.txt".to_string(), 3)]);
        assert_eq!(list_files(&guard, root, "a"), [("a/b.txt".to_string(), 2)]);
        assert!(list_files(&guard, root, "nope").is_empty());
    }
}
