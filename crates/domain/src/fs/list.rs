//! `files_list` and `files_stat`.

use std::os::fd::OwnedFd;

use abx_wire::api::files::{FileEntry, FileInfo};
use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::sys::stat::Mode;

use super::meta::{iso8601, Kind, Stat};
use super::safe::{self, dir_flags, Resolved};
use super::walk::{walk, Entry, Flow};
use super::{file_name, is_temp_name, FsError};
use crate::policy::{Op, PathGuard};

/// How far a listing goes.
#[derive(Debug, Clone, Copy)]
pub struct ListOptions {
    /// Enter subdirectories.
    pub recursive: bool,
    /// Deepest level listed (1: the directory's own entries).
    pub max_depth: usize,
    /// Most entries returned.
    pub max_entries: usize,
}

/// Whether a walked entry may be shown: inside the roots, not denied, not
/// one of our temp files; a symlink only when its target is allowed too.
pub fn visible(guard: &PathGuard, entry: &Entry<'_>) -> bool {
    if is_temp_name(entry.name) {
        return false;
    }
    if entry.stat.kind == Kind::Symlink {
        return entry.path.to_str().is_some_and(|p| guard.resolve(p, Op::Read, "").is_ok());
    }
    guard.check_resolved(&entry.path, Op::Read).is_ok()
}

/// Lists the directory `target` (`raw` is the caller's spelling, for messages).
///
/// # Errors
/// 404 when it is missing or not a directory.
pub fn list(guard: &PathGuard, target: &Resolved, raw: &str, options: ListOptions) -> Result<Vec<FileEntry>, FsError> {
    let not_found = || FsError::NotFound(format!("Directory not found: {raw}"));
    let dir = match safe::open(guard, target, dir_flags(), Mode::empty(), Op::Read) {
        Ok(dir) => dir,
        Err(FsError::NotFound(_) | FsError::NotADirectory(_)) => return Err(not_found()),
        Err(e) => return Err(e),
    };
    let mut entries = Vec::new();
    if options.max_entries == 0 {
        return Ok(entries);
    }
    walk(dir, &target.path, &mut |entry| {
        if !visible(guard, entry) {
            return Flow::Skip;
        }
        entries.push(FileEntry {
            name: entry.name.to_string_lossy().into_owned(),
            kind: entry.stat.kind.as_str().to_string(),
            size: entry.stat.size,
            modified: iso8601(entry.stat.modified),
            path: entry.path.to_string_lossy().into_owned(),
        });
        if entries.len() >= options.max_entries {
            Flow::Stop
        } else if options.recursive && entry.depth < options.max_depth {
            Flow::Descend
        } else {
            Flow::Skip
        }
    })
    .map_err(|e| FsError::errno(&target.path, e))?;
    Ok(entries)
}

/// Metadata of `target`; a missing path is `exists: false`, never an error.
///
/// # Errors
/// Path refusals and unexpected I/O errors.
pub fn stat(guard: &PathGuard, target: &Resolved) -> Result<FileInfo, FsError> {
    let fd = match open_path(guard, target) {
        Ok(fd) => fd,
        Err(Errno::ENOENT | Errno::ENOTDIR) => return Ok(FileInfo::missing(file_name(&target.path), &target.path)),
        Err(e) => return Err(FsError::errno(&target.path, e)),
    };
    safe::verify(guard, &fd, &target.path, Op::Read)?;
    info(target, fd)
}

/// `files_stat` of the caller's path `raw`: on the caller's thread when
/// [`safe::open_plain`] can take it (a local disk, no symlink, no mount on
/// the way: a few system calls that wait on nothing else), else resolved
/// and stat'ed on a blocking thread. Same answer and errors either way.
///
/// # Errors
/// The guard's refusals, and I/O errors other than a missing path.
pub async fn stat_path(guard: PathGuard, raw: String) -> Result<FileInfo, FsError> {
    if let Some((target, fd)) = safe::open_plain(&guard, &raw, Op::Read) {
        return info(&target, fd);
    }
    super::blocking(move || stat(&guard, &safe::resolve(&guard, &raw, Op::Read, "")?)).await
}

/// The answer for the object open at `fd`.
fn info(target: &Resolved, fd: OwnedFd) -> Result<FileInfo, FsError> {
    let meta = std::fs::File::from(fd).metadata().map_err(|e| FsError::io(&target.path, e))?;
    let st = Stat::from_metadata(&meta);
    Ok(FileInfo {
        name: file_name(&target.path),
        path: target.path.to_string_lossy().into_owned(),
        kind: st.kind.as_str().to_string(),
        size: st.size,
        permissions: st.permissions(),
        modified: iso8601(st.modified),
        accessed: iso8601(st.accessed),
        created: iso8601(st.created),
        exists: true,
    })
}

/// Stats `target` through an `O_PATH` descriptor (works on anything, reads nothing).
pub fn stat_of(guard: &PathGuard, target: &Resolved) -> Result<Option<Stat>, FsError> {
    match open_path(guard, target) {
        Ok(fd) => {
            safe::verify(guard, &fd, &target.path, Op::Read)?;
            let meta = std::fs::File::from(fd).metadata().map_err(|e| FsError::io(&target.path, e))?;
            Ok(Some(Stat::from_metadata(&meta)))
        }
        Err(Errno::ENOENT | Errno::ENOTDIR) => Ok(None),
        Err(e) => Err(FsError::errno(&target.path, e)),
    }
}

fn open_path(_guard: &PathGuard, target: &Resolved) -> nix::Result<OwnedFd> {
    safe::open_beneath(&target.root, target.relative(), OFlag::O_PATH, Mode::empty())
}
