//! A depth-first directory walk over descriptors.
//!
//! Each directory is opened with `openat(parent, name, O_NOFOLLOW |
//! O_DIRECTORY)`, so a directory swapped for a symlink mid-walk is not
//! entered, and entries are read as the directory yields them (memory does
//! not grow with the directory's size). The visitor decides, per entry,
//! whether to descend, skip, or stop the whole walk.

use std::ffi::OsStr;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};

use nix::dir::Dir;
use nix::fcntl::{openat, AtFlags, OFlag};
use nix::sys::stat::{fstatat, Mode};

use super::meta::Stat;
use super::safe::dir_flags;

/// Deepest nesting any walk enters, whatever the limits say.
pub const MAX_NESTING: usize = 64;

/// One entry met by the walk.
pub struct Entry<'a> {
    /// The directory holding the entry.
    pub dir: BorrowedFd<'a>,
    /// The entry's name.
    pub name: &'a OsStr,
    /// The entry's full path (its directory's real path joined with the name).
    pub path: PathBuf,
    /// 1 for the entries of the starting directory.
    pub depth: usize,
    /// Its metadata, symlinks not followed.
    pub stat: Stat,
}

/// What the walk does after visiting an entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    /// Go on; enter the entry if it is a directory.
    Descend,
    /// Go on without entering the entry.
    Skip,
    /// End the walk.
    Stop,
}

/// Walks the directory `dir` (whose real path is `path`), calling `visit`
/// for every entry. Unreadable subdirectories are skipped.
///
/// Returns `false` when the visitor stopped the walk.
///
/// # Errors
/// The starting directory cannot be read.
pub fn walk(dir: OwnedFd, path: &Path, visit: &mut dyn FnMut(&Entry<'_>) -> Flow) -> nix::Result<bool> {
    walk_level(dir, path, 1, visit)
}

fn walk_level(dir: OwnedFd, path: &Path, depth: usize, visit: &mut dyn FnMut(&Entry<'_>) -> Flow) -> nix::Result<bool> {
    let handle = dir.try_clone().map_err(|e| nix::errno::Errno::from_raw(e.raw_os_error().unwrap_or(0)))?;
    let mut stream = Dir::from_fd(dir)?;
    for item in stream.iter() {
        let Ok(item) = item else { continue };
        let bytes = item.file_name().to_bytes();
        if bytes == b"." || bytes == b".." {
            continue;
        }
        let name = <OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(bytes);
        let Ok(st) = fstatat(&handle, name, AtFlags::AT_SYMLINK_NOFOLLOW) else { continue };
        let entry = Entry { dir: handle.as_fd(), name, path: path.join(name), depth, stat: Stat::from_filestat(&st) };
        match visit(&entry) {
            Flow::Stop => return Ok(false),
            Flow::Skip => {}
            Flow::Descend if entry.stat.is_dir() && depth < MAX_NESTING => {
                if let Ok(sub) = openat(&handle, name, dir_flags() | OFlag::O_NOFOLLOW, Mode::empty()) {
                    if !walk_level(sub, &entry.path, depth + 1, visit)? {
                        return Ok(false);
                    }
                }
            }
            Flow::Descend => {}
        }
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn walks_depth_first_and_honours_the_visitor() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().canonicalize().expect("canonical");
        std::fs::create_dir_all(root.join("a/b/c")).expect("mkdir");
        std::fs::write(root.join("a/b/f"), b"1").expect("write");
        std::os::unix::fs::symlink("/", root.join("a/up")).expect("symlink");
        let fd = nix::fcntl::open(&root, dir_flags(), Mode::empty()).expect("open");
        let mut seen = Vec::new();
        walk(fd, &root, &mut |e| {
            seen.push((e.path.strip_prefix(&root).expect("inside").display().to_string(), e.depth));
            if e.name == "c" {
                Flow::Skip
            } else {
                Flow::Descend
            }
        })
        .expect("walk");
        seen.sort();
        let expected: Vec<(String, usize)> = [("a", 1), ("a/b", 2), ("a/b/c", 3), ("a/b/f", 3), ("a/up", 2)]
            .iter()
            .map(|(p, d)| (p.to_string(), *d))
            .collect();
        assert_eq!(seen, expected);
        let fd = nix::fcntl::open(&root, dir_flags(), Mode::empty()).expect("open");
        let mut count = 0;
        assert!(!walk(fd, &root, &mut |_| {
            count += 1;
            Flow::Stop
        })
        .expect("walk"));
        assert_eq!(count, 1);
    }
}
