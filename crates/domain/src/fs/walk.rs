//! A depth-first directory walk over descriptors, without recursion.
//!
//! Each directory is opened with `openat(parent, name, O_NOFOLLOW |
//! O_DIRECTORY)`, so a directory swapped for a symlink mid-walk is not
//! entered, and entries are read as the directory yields them (memory does
//! not grow with the directory's size). The visitor decides, per entry,
//! whether to descend, skip, or stop the whole walk.
//!
//! The walk keeps an explicit stack (one open directory per level of the
//! current branch, a few KiB each), so depth costs neither the thread's
//! stack nor a nesting constant that silently ends it: [`walk`] (listings,
//! search, archives, watches) looks at most [`MAX_NESTING`] levels deep and
//! skips what it cannot read, while [`walk_whole`] (the checks that guard a
//! delete or a move) sees every level or fails.

use std::ffi::OsStr;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{openat, AtFlags, OFlag};
use nix::sys::stat::{fstatat, Mode};
use rustix::fs::Dir;

use super::meta::Stat;
use super::safe::dir_flags;

/// Deepest nesting a browsing walk ([`walk`]) enters, whatever the limits say.
pub const MAX_NESTING: usize = 64;

/// Deepest nesting [`walk_whole`] checks before it gives up (`ENAMETOOLONG`):
/// deeper, every path is longer than `PATH_MAX`, so no tool could name it.
pub const MAX_CHECK_DEPTH: usize = 2048;

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
/// for every entry, at most [`MAX_NESTING`] levels deep. Unreadable
/// subdirectories are skipped.
///
/// Returns `false` when the visitor stopped the walk.
///
/// # Errors
/// The starting directory cannot be read.
pub fn walk(dir: OwnedFd, path: &Path, visit: &mut dyn FnMut(&Entry<'_>) -> Flow) -> nix::Result<bool> {
    run(dir, path, false, visit)
}

/// Walks the whole tree below `dir`: every directory the visitor descends
/// into is entered, however deep, and one that cannot be read fails the walk,
/// so a check built on it either saw every entry or reports that it could not.
///
/// # Errors
/// Any directory that cannot be opened or read (`EMFILE` when descriptors run
/// out), and `ENAMETOOLONG` for a tree deeper than [`MAX_CHECK_DEPTH`].
pub fn walk_whole(dir: OwnedFd, path: &Path, visit: &mut dyn FnMut(&Entry<'_>) -> Flow) -> nix::Result<bool> {
    run(dir, path, true, visit)
}

/// One directory of the current branch: its stream and where it is.
struct Level {
    stream: Dir,
    path: PathBuf,
    depth: usize,
}

impl Level {
    fn open(fd: OwnedFd, path: PathBuf, depth: usize) -> nix::Result<Level> {
        let stream = Dir::new(fd).map_err(errno)?;
        Ok(Level { stream, path, depth })
    }
}

fn errno(e: rustix::io::Errno) -> Errno {
    Errno::from_raw(e.raw_os_error())
}

fn run(dir: OwnedFd, path: &Path, whole: bool, visit: &mut dyn FnMut(&Entry<'_>) -> Flow) -> nix::Result<bool> {
    let max_depth = if whole { MAX_CHECK_DEPTH } else { MAX_NESTING };
    let mut stack = vec![Level::open(dir, path.to_path_buf(), 1)?];
    while let Some(level) = stack.last_mut() {
        let Some(item) = level.stream.read() else {
            stack.pop();
            continue;
        };
        let item = match item {
            Ok(item) => item,
            Err(_) if !whole => {
                stack.pop();
                continue;
            }
            Err(e) => return Err(errno(e)),
        };
        let bytes = item.file_name().to_bytes();
        if bytes == b"." || bytes == b".." {
            continue;
        }
        let name = <OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(bytes);
        let handle = level.stream.fd().map_err(errno)?;
        let st = match fstatat(handle, name, AtFlags::AT_SYMLINK_NOFOLLOW) {
            Ok(st) => st,
            // Gone since it was listed: nothing left to check.
            Err(Errno::ENOENT) => continue,
            Err(_) if !whole => continue,
            Err(e) => return Err(e),
        };
        let depth = level.depth;
        let entry = Entry { dir: handle, name, path: level.path.join(name), depth, stat: Stat::from_filestat(&st) };
        let descend = match visit(&entry) {
            Flow::Stop => return Ok(false),
            Flow::Skip => false,
            Flow::Descend => entry.stat.is_dir(),
        };
        if !descend {
            continue;
        }
        if depth >= max_depth {
            if whole {
                return Err(Errno::ENAMETOOLONG);
            }
            continue;
        }
        let opened = openat(handle, name, dir_flags() | OFlag::O_NOFOLLOW, Mode::empty())
            .and_then(|sub| Level::open(sub, entry.path.clone(), depth + 1));
        match opened {
            Ok(next) => stack.push(next),
            Err(Errno::ENOENT) => {}
            Err(_) if !whole => {}
            Err(e) => return Err(e),
        }
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn open(path: &Path) -> OwnedFd {
        nix::fcntl::open(path, dir_flags(), Mode::empty()).expect("open")
    }

    #[test]
    fn walks_depth_first_and_honours_the_visitor() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().canonicalize().expect("canonical");
        std::fs::create_dir_all(root.join("a/b/c")).expect("mkdir");
        std::fs::write(root.join("a/b/f"), b"1").expect("write");
        std::os::unix::fs::symlink("/", root.join("a/up")).expect("symlink");
        let mut seen = Vec::new();
        walk(open(&root), &root, &mut |e| {
            seen.push((e.path.strip_prefix(&root).expect("inside").display().to_string(), e.depth));
            if e.name == "c" {
                Flow::Skip
            } else {
                Flow::Descend
            }
        })
        .expect("walk");
        let position = |p: &str| seen.iter().position(|(q, _)| q == p).expect("seen");
        assert!(position("a") < position("a/b") && position("a/b") < position("a/b/f"), "parents first: {seen:?}");
        seen.sort();
        let expected: Vec<(String, usize)> = [("a", 1), ("a/b", 2), ("a/b/c", 3), ("a/b/f", 3), ("a/up", 2)]
            .iter()
            .map(|(p, d)| (p.to_string(), *d))
            .collect();
        assert_eq!(seen, expected);
        let mut count = 0;
        assert!(!walk(open(&root), &root, &mut |_| {
            count += 1;
            Flow::Stop
        })
        .expect("walk"));
        assert_eq!(count, 1);
    }

    #[test]
    fn a_browsing_walk_stops_at_max_nesting_but_the_whole_walk_does_not() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().canonicalize().expect("canonical");
        let deep: PathBuf = (0..MAX_NESTING + 10).map(|_| "d").collect();
        std::fs::create_dir_all(root.join(&deep)).expect("mkdir");
        std::fs::write(root.join(&deep).join("key.pem"), b"k").expect("write");
        let deepest = |whole: bool| {
            let mut max = 0;
            let mut found = false;
            let visit = &mut |e: &Entry<'_>| {
                max = max.max(e.depth);
                found |= e.name == "key.pem";
                Flow::Descend
            };
            if whole { walk_whole(open(&root), &root, visit) } else { walk(open(&root), &root, visit) }.expect("walk");
            (max, found)
        };
        assert_eq!(deepest(false), (MAX_NESTING, false));
        assert_eq!(deepest(true), (MAX_NESTING + 11, true));
    }

    #[test]
    fn a_tree_deeper_than_any_path_fails_the_whole_walk() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().canonicalize().expect("canonical");
        // Made relative to descriptors: the whole path is longer than PATH_MAX.
        let mut fd = open(&root);
        for _ in 0..=MAX_CHECK_DEPTH {
            nix::sys::stat::mkdirat(&fd, "d", Mode::from_bits_truncate(0o755)).expect("mkdirat");
            fd = openat(&fd, "d", dir_flags(), Mode::empty()).expect("openat");
        }
        drop(fd);
        let whole = walk_whole(open(&root), &root, &mut |_| Flow::Descend);
        assert!(matches!(whole, Err(Errno::ENAMETOOLONG | Errno::EMFILE)), "{whole:?}");
        assert_eq!(walk(open(&root), &root, &mut |_| Flow::Descend), Ok(true), "a browsing walk just stops");
    }
}
