//! `files_mkdir`, `files_delete` and `files_move`, each done on
//! descriptors of the parent directories (`mkdirat`, `unlinkat`, `renameat`).

use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};

use abx_wire::api::Fault;
use nix::errno::Errno;
use nix::fcntl::{openat, renameat, AtFlags, OFlag};
use nix::sys::stat::{fstatat, Mode};
use nix::unistd::{unlinkat, UnlinkatFlags};

use super::meta::{Kind, Stat};
use super::safe::{self, dir_flags, root_untouchable, Resolved};
use super::walk::{walk_whole, Flow};
use super::write::{AtomicFile, Writes};
use super::FsError;
use crate::policy::{Denial, Op, PathGuard};

/// Entries a tree check looks at before refusing to touch the tree.
const TREE_CHECK_LIMIT: usize = 100_000;

/// Makes `target` and its missing parents; an existing directory is fine.
///
/// # Errors
/// [`FsError::NotADirectory`] when a file is in the way.
pub fn mkdir(guard: &PathGuard, target: &Resolved) -> Result<(), FsError> {
    safe::create_dirs(guard, target, Op::Write).map(drop)
}

/// Removes the file or directory tree `target`; `raw` is the caller's spelling.
///
/// # Errors
/// 404 when missing; `path_denied` for a root or a tree holding denied entries.
pub fn delete(guard: &PathGuard, target: &Resolved, raw: &str) -> Result<(), FsError> {
    if target.is_root() || guard.is_root(&target.path) {
        return Err(root_untouchable());
    }
    let (dir, name) = safe::open_parent(guard, target, Op::Delete).map_err(|e| missing(e, "Path not found", raw))?;
    let stat = lstat(&dir, &name).ok_or_else(|| FsError::NotFound(format!("Path not found: {raw}")))?;
    if stat.is_dir() {
        protect_tree(guard, &dir, &name, &target.path)?;
        std::fs::remove_dir_all(via_descriptor(&dir, &name, &target.path)).map_err(|e| FsError::io(&target.path, e))
    } else {
        unlinkat(&dir, name.as_os_str(), UnlinkatFlags::NoRemoveDir).map_err(|e| FsError::errno(&target.path, e))
    }
}

/// Moves `source` to `destination` (into it, when it is an existing
/// directory), making the destination's parents; returns the final path.
///
/// # Errors
/// 404 when the source is missing; `path_denied` for a root or a tree
/// holding denied entries; [`FsError::Invalid`] for a directory moved into
/// itself or across file systems.
pub fn rename(
    guard: &PathGuard,
    source: &Resolved,
    destination: &Resolved,
    raw_source: &str,
    writes: &Writes,
) -> Result<PathBuf, FsError> {
    if source.is_root() || guard.is_root(&source.path) {
        return Err(root_untouchable());
    }
    let (src_dir, src_name) =
        safe::open_parent(guard, source, Op::Delete).map_err(|e| missing(e, "Source not found", raw_source))?;
    let stat =
        lstat(&src_dir, &src_name).ok_or_else(|| FsError::NotFound(format!("Source not found: {raw_source}")))?;
    if stat.is_dir() {
        protect_tree(guard, &src_dir, &src_name, &source.path)?;
    }
    let mut destination = destination.clone();
    if super::list::stat_of(guard, &destination)?.is_some_and(|s| s.is_dir()) {
        destination = destination.sibling(destination.path.join(&src_name));
        guard.check_resolved(&destination.path, Op::Write)?;
    }
    if destination.path == source.path {
        return Ok(destination.path);
    }
    let (Some(parent), Some(dst_name)) = (destination.path.parent(), destination.path.file_name()) else {
        return Err(root_untouchable());
    };
    let dst_dir = safe::create_dirs(guard, &destination.sibling(parent.to_path_buf()), Op::Write)?;
    match renameat(&src_dir, src_name.as_os_str(), &dst_dir, dst_name) {
        Ok(()) => Ok(destination.path),
        Err(Errno::EXDEV) if stat.kind == Kind::File => {
            copy_file(guard, &src_dir, &src_name, &destination, writes)?;
            unlinkat(&src_dir, src_name.as_os_str(), UnlinkatFlags::NoRemoveDir)
                .map_err(|e| FsError::errno(&source.path, e))?;
            Ok(destination.path)
        }
        Err(Errno::EXDEV) => Err(FsError::Invalid("Cannot move a directory to another file system".into())),
        Err(Errno::EINVAL) => Err(FsError::Invalid("Cannot move a directory into itself".into())),
        Err(Errno::EISDIR | Errno::ENOTEMPTY | Errno::EEXIST) => Err(FsError::IsADirectory(destination.path)),
        Err(e) => Err(FsError::errno(&destination.path, e)),
    }
}

/// Refuses to remove or move a tree that holds entries the guard denies.
/// Every level is checked, however deep; a tree the check cannot finish
/// (too many entries, nested deeper than any path can name, a directory
/// that cannot be read) is refused too, never passed unchecked.
///
/// # Errors
/// `path_denied`.
pub fn protect_tree(guard: &PathGuard, parent: &OwnedFd, name: &std::ffi::OsStr, path: &Path) -> Result<(), FsError> {
    let denied = |message| FsError::Denied(Denial::new(Fault::PathDenied, message));
    let dir =
        openat(parent, name, dir_flags() | OFlag::O_NOFOLLOW, Mode::empty()).map_err(|e| FsError::errno(path, e))?;
    let mut seen = 0usize;
    let mut refused = None;
    let walked = walk_whole(dir, path, &mut |entry| {
        seen += 1;
        if seen > TREE_CHECK_LIMIT {
            refused = Some("Directory is too large to check for entries denied by policy");
            return Flow::Stop;
        }
        if guard.check_resolved(&entry.path, Op::Delete).is_err() {
            refused = Some("Directory contains entries denied by policy");
            return Flow::Stop;
        }
        Flow::Descend
    });
    if let Err(e) = walked {
        tracing::warn!(path = %path.display(), error = %e, "cannot check a whole tree before touching it");
        return Err(denied("Directory cannot be checked whole for entries denied by policy"));
    }
    refused.map_or(Ok(()), |message| Err(denied(message)))
}

fn copy_file(
    guard: &PathGuard,
    src_dir: &OwnedFd,
    src_name: &std::ffi::OsStr,
    destination: &Resolved,
    writes: &Writes,
) -> Result<(), FsError> {
    let fd = openat(src_dir, src_name, OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC, Mode::empty())
        .map_err(|e| FsError::errno(&destination.path, e))?;
    let mut source = std::fs::File::from(fd);
    let mut file = AtomicFile::create(guard, destination, true, writes)?;
    let mut buffer = vec![0u8; 256 * 1024];
    loop {
        let n = std::io::Read::read(&mut source, &mut buffer).map_err(|e| FsError::io(&destination.path, e))?;
        if n == 0 {
            break;
        }
        file.write_all(&buffer[..n])?;
    }
    file.commit(true).map(drop)
}

fn lstat(dir: &OwnedFd, name: &std::ffi::OsStr) -> Option<Stat> {
    fstatat(dir, name, AtFlags::AT_SYMLINK_NOFOLLOW).ok().map(|st| Stat::from_filestat(&st))
}

/// The path of `name` in the directory `dir` through `/proc/self/fd`, so the
/// parent cannot be swapped out underneath; the plain path without `/proc`.
fn via_descriptor(dir: &OwnedFd, name: &std::ffi::OsStr, fallback: &Path) -> PathBuf {
    let base = PathBuf::from(format!("/proc/self/fd/{}", dir.as_raw_fd()));
    if base.exists() {
        base.join(name)
    } else {
        fallback.to_path_buf()
    }
}

fn missing(err: FsError, what: &str, raw: &str) -> FsError {
    match err {
        FsError::NotFound(_) | FsError::NotADirectory(_) => FsError::NotFound(format!("{what}: {raw}")),
        other => other,
    }
}
