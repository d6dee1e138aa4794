//! Race-safe access to resolved paths.
//!
//! The guard resolves a caller's path to a real path inside an allowed root
//! and checks it. Between that check and the use, another process could
//! swap a directory for a symlink pointing elsewhere. So nothing here opens
//! a path by name from `/`: every open starts from a descriptor of the root
//! and walks the relative remainder with no symlink allowed
//! (`openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)`,
//! or, where the kernel or a seccomp filter lacks `openat2`, one
//! `openat(O_NOFOLLOW)` per component). Because the resolved path has no
//! symlink in it, finding one means the tree changed under us: the open
//! fails with `symlink_denied`. The opened descriptor is then re-checked
//! through `/proc/self/fd` against the guard, which also catches a directory
//! renamed out of the root mid-walk (the walk through `openat2` has the
//! kernel's own check of that, so its fast path re-checks only where a deny
//! pattern could refuse what a rename brought under the root).

use std::ffi::{OsStr, OsString};
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{OnceLock, PoisonError, RwLock};

use abx_wire::api::Fault;
use nix::errno::Errno;
use nix::fcntl::{openat, openat2, OFlag, OpenHow, ResolveFlag};
use nix::sys::stat::{fstatat, mkdirat, Mode, SFlag};
use nix::unistd::{Gid, Uid};

use super::FsError;
use crate::policy::{Denial, Op, PathGuard};

static OPENAT2_MISSING: AtomicBool = AtomicBool::new(false);

/// Roots seen on a local disk file system, where a metadata lookup does not
/// wait on a network or a FUSE daemon (see [`open_plain`]); the most recent
/// [`MAX_LOCAL_ROOTS`].
static LOCAL_ROOTS: RwLock<Vec<LocalRoot>> = RwLock::new(Vec::new());
const MAX_LOCAL_ROOTS: usize = 64;

/// A root on a local disk, with a descriptor of it kept open for
/// [`open_plain`]: opening the root by name was the dearest system call of a
/// `stat` (a walk from `/`, a file allocated, `close`). The descriptor is
/// used only while the root's path still names the same directory (same
/// device and inode, which the open descriptor keeps from being reused), so
/// a root renamed away, replaced or mounted over is opened afresh.
struct LocalRoot {
    path: PathBuf,
    fd: OwnedFd,
    dev: u64,
    ino: u64,
}

/// A path the guard resolved and authorised, with the root it lies under.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    /// The resolved absolute path.
    pub path: PathBuf,
    /// The resolved root containing it.
    pub root: PathBuf,
}

impl Resolved {
    /// The path relative to its root (empty for the root itself).
    pub fn relative(&self) -> &Path {
        crate::policy::paths::below(&self.path, &self.root).unwrap_or(Path::new(""))
    }

    /// Whether this is the root itself.
    pub fn is_root(&self) -> bool {
        // Both normalised: equal bytes are equal paths (`==` compares components).
        self.path.as_os_str() == self.root.as_os_str()
    }

    /// The same root, another path below it (already known to be inside).
    pub fn sibling(&self, path: PathBuf) -> Resolved {
        Resolved { path, root: self.root.clone() }
    }
}

/// Resolves and authorises `raw` for `op`; `field` labels error messages.
///
/// # Errors
/// The guard's refusals.
pub fn resolve(guard: &PathGuard, raw: &str, op: Op, field: &str) -> Result<Resolved, FsError> {
    let path = guard.resolve(raw, op, field)?;
    let root = guard.root_of(&path).ok_or(Denial::PathNotAllowed { field: String::new() })?.to_path_buf();
    Ok(Resolved { path, root })
}

/// Opens `target` with `flags` (plus `O_NOFOLLOW | O_CLOEXEC`) beneath its
/// root, then checks the opened object against `guard` for `op`.
///
/// # Errors
/// `symlink_denied` when a symlink appeared on the way, the guard's refusals
/// when the descriptor resolves elsewhere, and the I/O errors of the open.
pub fn open(guard: &PathGuard, target: &Resolved, flags: OFlag, mode: Mode, op: Op) -> Result<OwnedFd, FsError> {
    let fd = open_beneath(&target.root, target.relative(), flags, mode).map_err(|e| FsError::errno(&target.path, e))?;
    if !flags.contains(OFlag::O_TMPFILE) {
        verify(guard, &fd, &target.path, op)?;
    }
    Ok(fd)
}

/// The fast path of a metadata read: opens `raw` with `O_PATH` on the
/// caller's thread, when that cannot wait on anything but a local disk.
///
/// It applies only when [`PathGuard::plain`] authorises the lexical path,
/// the root is on a local file system (learnt by an earlier [`open_beneath`]
/// of it), and `openat2` reaches the object from the root without a symlink
/// or a mount point on the way (`RESOLVE_NO_SYMLINKS | RESOLVE_NO_XDEV`).
/// A path without symlinks is its own resolution, so the guard's decision is
/// the one [`resolve`] would make; the descriptor is then verified exactly
/// as [`open`] verifies it. `None` on any doubt (a symlink, a mount, a
/// missing path, a denial, no `openat2`): the caller takes the ordinary path
/// on a blocking thread, which gives the answer and the error.
pub fn open_plain(guard: &PathGuard, raw: &str, op: Op) -> Option<(Resolved, OwnedFd)> {
    if OPENAT2_MISSING.load(Ordering::Relaxed) {
        return None;
    }
    let (path, root) = guard.plain(raw, op)?;
    let roots = LOCAL_ROOTS.read().unwrap_or_else(PoisonError::into_inner);
    let local = roots.iter().find(|r| r.path.as_os_str() == root.as_os_str())?;
    // One lookup of the root by name, cheaper than an open: does it still name the directory kept?
    let now = nix::sys::stat::lstat(root).ok()?;
    if (now.st_dev, now.st_ino) != (local.dev, local.ino) {
        drop(roots);
        forget_root(root);
        return None;
    }
    let target = Resolved { path, root: root.to_path_buf() };
    let relative = if target.is_root() { Path::new(".") } else { target.relative() };
    // No O_NOFOLLOW: with O_PATH it would open a trailing symlink itself;
    // without it, RESOLVE_NO_SYMLINKS refuses a symlink there too (ELOOP).
    let how = OpenHow::new().flags(OFlag::O_PATH | OFlag::O_CLOEXEC).resolve(
        ResolveFlag::RESOLVE_BENEATH
            | ResolveFlag::RESOLVE_NO_SYMLINKS
            | ResolveFlag::RESOLVE_NO_MAGICLINKS
            | ResolveFlag::RESOLVE_NO_XDEV,
    );
    let fd = openat2(&local.fd, relative, how).ok()?;
    drop(roots);
    // The kernel ends a RESOLVE_BENEATH walk by checking that the object is
    // still under the root (EXDEV if a rename carried it out mid-walk), so
    // the descriptor needs reading back only where a deny pattern could
    // refuse where it landed under the root.
    if !guard.uniform_beneath(root) {
        verify(guard, &fd, &target.path, op).ok()?;
    }
    guard.record(&target.path);
    Some((target, fd))
}

/// Notes whether the root open at `root_fd` is on a local disk file system,
/// and keeps a descriptor of it if so.
fn learn_root(root: &Path, root_fd: &OwnedFd) {
    use nix::sys::statfs::{fstatfs, BTRFS_SUPER_MAGIC, EXT4_SUPER_MAGIC, OVERLAYFS_SUPER_MAGIC, TMPFS_MAGIC};
    /// XFS and ZFS, which nix does not name.
    const OTHER_LOCAL: [u64; 2] = [0x5846_5342, 0x2fc1_2fc1];
    let known = |roots: &[LocalRoot]| roots.iter().any(|r| r.path.as_os_str() == root.as_os_str());
    if known(&LOCAL_ROOTS.read().unwrap_or_else(PoisonError::into_inner)) {
        return;
    }
    let Ok(fs) = fstatfs(root_fd) else { return };
    let kind = fs.filesystem_type();
    // ext2 and ext3 share ext4's magic number.
    let local = [EXT4_SUPER_MAGIC, BTRFS_SUPER_MAGIC, TMPFS_MAGIC, OVERLAYFS_SUPER_MAGIC].contains(&kind)
        || u64::try_from(kind.0).is_ok_and(|magic| OTHER_LOCAL.contains(&magic));
    if !local {
        return;
    }
    let flags = OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC;
    let Ok(fd) = openat(root_fd, ".", flags, Mode::empty()) else { return };
    let Ok(st) = nix::sys::stat::fstat(&fd) else { return };
    let mut roots = LOCAL_ROOTS.write().unwrap_or_else(PoisonError::into_inner);
    if !known(&roots) {
        // The oldest is forgotten first (a policy has a few roots; reloads may bring others).
        if roots.len() >= MAX_LOCAL_ROOTS {
            roots.remove(0);
        }
        roots.push(LocalRoot { path: root.to_path_buf(), fd, dev: st.st_dev, ino: st.st_ino });
    }
}

/// Drops the descriptor kept of `root` (its path names another directory
/// now); the next [`open_beneath`] of it learns it afresh.
fn forget_root(root: &Path) {
    LOCAL_ROOTS.write().unwrap_or_else(PoisonError::into_inner).retain(|r| r.path.as_os_str() != root.as_os_str());
}

/// Opens the directory holding `target` and returns it with the final name.
///
/// # Errors
/// A root has no parent it may touch (`path_denied`); otherwise as [`open`].
pub fn open_parent(guard: &PathGuard, target: &Resolved, op: Op) -> Result<(OwnedFd, OsString), FsError> {
    let (Some(parent), Some(name)) = (target.path.parent(), target.path.file_name()) else {
        return Err(root_untouchable());
    };
    if target.is_root() {
        return Err(root_untouchable());
    }
    let dir = open(guard, &target.sibling(parent.to_path_buf()), dir_flags(), Mode::empty(), op)?;
    Ok((dir, name.to_os_string()))
}

/// The user and group a request acts as, when it is not the server's own:
/// what it creates is given to them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Owner {
    /// User id.
    pub uid: u32,
    /// Group id.
    pub gid: u32,
}

impl Owner {
    /// Gives the object open at `fd` to this owner. Through the descriptor,
    /// never by path: a path could be redirected by a symlink swapped into
    /// one of its directories between the write and this call.
    ///
    /// # Errors
    /// The kernel's refusal (the server is not root, say).
    pub fn give(self, fd: &impl AsFd) -> nix::Result<()> {
        nix::unistd::fchown(fd.as_fd(), Some(Uid::from_raw(self.uid)), Some(Gid::from_raw(self.gid)))
    }
}

/// Creates every missing directory from the root down to `target` (like
/// `mkdir -p`) and returns a descriptor of `target`.
///
/// # Errors
/// [`FsError::NotADirectory`] when a file is in the way, `symlink_denied`
/// when a symlink is, and I/O errors.
pub fn create_dirs(guard: &PathGuard, target: &Resolved, op: Op) -> Result<OwnedFd, FsError> {
    create_dirs_for(guard, target, op, None)
}

/// [`create_dirs`], giving each directory it creates to `owner`, through
/// the descriptor it opened (never by path).
///
/// # Errors
/// As [`create_dirs`].
pub fn create_dirs_for(guard: &PathGuard, target: &Resolved, op: Op, owner: Option<Owner>) -> Result<OwnedFd, FsError> {
    let mut dir = open_beneath(&target.root, Path::new(""), dir_flags(), Mode::empty())
        .map_err(|e| FsError::errno(&target.root, e))?;
    let mut so_far = target.root.clone();
    for part in normal_parts(target.relative()).map_err(|e| FsError::errno(&target.path, e))? {
        so_far.push(part);
        let mut made = false;
        let next = match openat(&dir, part, dir_flags() | OFlag::O_NOFOLLOW, Mode::empty()) {
            Err(Errno::ENOENT) => {
                let created = mkdirat(&dir, part, Mode::from_bits_truncate(0o777));
                // Ours to give away only if this call made it (not a racing request).
                made = created.is_ok();
                match created {
                    Ok(()) | Err(Errno::EEXIST) => openat(&dir, part, dir_flags() | OFlag::O_NOFOLLOW, Mode::empty()),
                    Err(e) => Err(e),
                }
            }
            other => other,
        };
        dir = next.map_err(|e| classify_not_dir(&dir, part, e)).map_err(|e| FsError::errno(&so_far, e))?;
        if let (true, Some(owner)) = (made, owner) {
            owner.give(&dir).map_err(|e| FsError::errno(&so_far, e))?;
        }
    }
    verify(guard, &dir, &target.path, op)?;
    Ok(dir)
}

/// Flags of a directory descriptor that can be listed and used with `*at` calls.
pub fn dir_flags() -> OFlag {
    OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC
}

/// The refusal for operations on an allowed root itself.
pub fn root_untouchable() -> FsError {
    FsError::Denied(Denial::new(Fault::PathDenied, "The allowed root directory itself cannot be modified"))
}

/// Checks that `fd` still names an authorised object: the path the kernel
/// reports for it must be `expected`, or else pass the guard for `op`.
///
/// # Errors
/// The guard's refusals for a descriptor that ended up elsewhere.
pub fn verify(guard: &PathGuard, fd: &impl AsFd, expected: &Path, op: Op) -> Result<(), FsError> {
    let Some(actual) = path_of(fd) else {
        // No /proc: the no-symlink walk from the root descriptor is the guarantee.
        return Ok(());
    };
    if actual == expected {
        return Ok(());
    }
    guard.check_resolved(&actual, op)?;
    Ok(())
}

/// `/proc/self/fd`, opened once (`None` without `/proc`): reading a
/// descriptor's path back through it looks up one name, not four.
static PROC_SELF_FD: OnceLock<Option<OwnedFd>> = OnceLock::new();

/// The path the kernel reports for `fd`, if `/proc` is there to ask.
fn path_of(fd: &impl AsFd) -> Option<PathBuf> {
    use std::os::fd::AsRawFd;
    let dir = PROC_SELF_FD
        .get_or_init(|| {
            nix::fcntl::open("/proc/self/fd", OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC, Mode::empty()).ok()
        })
        .as_ref()?;
    let name = fd.as_fd().as_raw_fd().to_string();
    nix::fcntl::readlinkat(dir, name.as_str()).ok().map(PathBuf::from)
}

/// Opens `relative` beneath the directory `root` without following any symlink.
///
/// # Errors
/// `ELOOP` when a symlink is on the way, `EXDEV` when the path would leave
/// `root`, and the errors of `open(2)`.
pub fn open_beneath(root: &Path, relative: &Path, flags: OFlag, mode: Mode) -> nix::Result<OwnedFd> {
    let root_fd = nix::fcntl::open(root, dir_flags() | OFlag::O_NOFOLLOW, Mode::empty())?;
    learn_root(root, &root_fd);
    open_beneath_fd(root_fd, relative, flags, mode)
}

/// [`open_beneath`] from a descriptor of the directory already open (one
/// that is no policy root: nothing is learnt about it).
///
/// # Errors
/// As [`open_beneath`].
pub fn open_beneath_fd(root_fd: OwnedFd, relative: &Path, flags: OFlag, mode: Mode) -> nix::Result<OwnedFd> {
    let flags = flags | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    let relative = if relative.as_os_str().is_empty() { Path::new(".") } else { relative };
    if !OPENAT2_MISSING.load(Ordering::Relaxed) {
        let how = OpenHow::new().flags(flags).mode(mode).resolve(
            ResolveFlag::RESOLVE_BENEATH | ResolveFlag::RESOLVE_NO_SYMLINKS | ResolveFlag::RESOLVE_NO_MAGICLINKS,
        );
        match openat2(&root_fd, relative, how) {
            Err(Errno::ENOSYS | Errno::E2BIG) => OPENAT2_MISSING.store(true, Ordering::Relaxed),
            // A seccomp filter may answer EPERM for the whole syscall: let the walk decide.
            Err(Errno::EPERM) => {}
            other => return other,
        }
    }
    walk_open(root_fd, relative, flags, mode)
}

/// The portable equivalent of `openat2(RESOLVE_NO_SYMLINKS)`: one `O_NOFOLLOW` open per component.
pub fn walk_open(root_fd: OwnedFd, relative: &Path, flags: OFlag, mode: Mode) -> nix::Result<OwnedFd> {
    let parts = normal_parts(relative)?;
    let Some((last, intermediate)) = parts.split_last() else {
        return openat(&root_fd, ".", flags, mode);
    };
    let mut dir = root_fd;
    for part in intermediate {
        let next = openat(
            &dir,
            *part,
            OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::empty(),
        );
        dir = next.map_err(|e| classify_not_dir(&dir, part, e))?;
    }
    openat(&dir, *last, flags | OFlag::O_NOFOLLOW, mode)
}

/// The normal components of a relative path; `..`, `.` or a root are refused (`EXDEV`).
fn normal_parts(relative: &Path) -> nix::Result<Vec<&OsStr>> {
    relative
        .components()
        .filter(|c| !matches!(c, Component::CurDir))
        .map(|c| match c {
            Component::Normal(part) => Ok(part),
            _ => Err(Errno::EXDEV),
        })
        .collect()
}

/// `ENOTDIR` from an `O_DIRECTORY | O_NOFOLLOW` open is `ELOOP` when the entry is a symlink.
fn classify_not_dir(dir: &impl AsFd, name: &OsStr, err: Errno) -> Errno {
    if err != Errno::ENOTDIR {
        return err;
    }
    match fstatat(dir, name, nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW) {
        Ok(st) if SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT == SFlag::S_IFLNK => Errno::ELOOP,
        _ => err,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn root() -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().expect("tempdir");
        let real = dir.path().canonicalize().expect("canonical");
        std::fs::create_dir_all(real.join("a/b")).expect("mkdir");
        std::fs::write(real.join("a/b/f"), b"x").expect("write");
        (dir, real)
    }

    #[test]
    fn opens_plain_paths_both_ways() {
        let (_dir, real) = root();
        assert!(open_beneath(&real, Path::new("a/b/f"), OFlag::O_RDONLY, Mode::empty()).is_ok());
        let root_fd = nix::fcntl::open(&real, dir_flags(), Mode::empty()).expect("root");
        assert!(walk_open(root_fd, Path::new("a/b/f"), OFlag::O_RDONLY, Mode::empty()).is_ok());
    }

    #[test]
    fn symlinks_anywhere_on_the_way_are_refused_both_ways() {
        let (_dir, real) = root();
        symlink(real.join("a"), real.join("inner")).expect("symlink");
        symlink("/etc", real.join("outer")).expect("symlink");
        symlink("b/f", real.join("a/lf")).expect("symlink");
        for rel in ["inner/b/f", "outer/passwd", "a/lf"] {
            let err = open_beneath(&real, Path::new(rel), OFlag::O_RDONLY, Mode::empty()).expect_err(rel);
            assert_eq!(err, Errno::ELOOP, "{rel}");
            let root_fd = nix::fcntl::open(&real, dir_flags(), Mode::empty()).expect("root");
            let err = walk_open(root_fd, Path::new(rel), OFlag::O_RDONLY, Mode::empty()).expect_err(rel);
            assert_eq!(err, Errno::ELOOP, "walk {rel}");
        }
        assert_eq!(
            open_beneath(&real, Path::new("../x"), OFlag::O_RDONLY, Mode::empty()).map(|_| ()),
            Err(Errno::EXDEV)
        );
    }

    #[test]
    fn create_dirs_makes_parents_and_refuses_files_in_the_way() {
        let (_dir, real) = root();
        let guard = PathGuard::new(&real, &crate::policy::rules::compile(&[], true).expect("rules")[0]);
        let target = resolve(&guard, "x/y/z", Op::Write, "").expect("resolve");
        create_dirs(&guard, &target, Op::Write).expect("mkdir -p");
        assert!(real.join("x/y/z").is_dir());
        let blocked = resolve(&guard, "a/b/f/sub", Op::Write, "").expect("resolve");
        assert!(matches!(create_dirs(&guard, &blocked, Op::Write), Err(FsError::NotADirectory(_))));
    }
}
