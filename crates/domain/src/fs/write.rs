//! Atomic writes, and what the policy allows them ([`WritePolicy`]).
//!
//! New content goes to an unnamed temp file (`O_TMPFILE`) in the target's
//! directory, so an aborted write (client gone, server killed) leaves
//! nothing behind: the kernel frees the inode. When every byte is there the
//! file takes the old file's mode and is linked into place: with `linkat`
//! when overwriting is off (atomic no-clobber), else linked under a temp
//! name (`.abx-upload-*`) and renamed over the target. Readers see the old
//! content or the new, never a mix. With [`Writes::sync`] the data is
//! `fdatasync`ed before the link and the directory `fsync`ed after, so a
//! successful answer also means the bytes are on disk (durable across a
//! power loss); without it they are in the page cache, as any unsynced
//! write. Where `O_TMPFILE` is unsupported a named temp file is used
//! instead. Named temp files are `flock`ed while in use; a stale one (its
//! writer died) is removed by the next write into the same directory.

use std::collections::HashSet;
use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::hash::{BuildHasher, RandomState};
use std::io::Write;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use abx_wire::api::Fault;
use nix::errno::Errno;
use nix::fcntl::{openat, renameat, AtFlags, Flock, FlockArg, OFlag, AT_FDCWD};
use nix::sys::stat::{fchmod, fstat, fstatat, Mode, SFlag};
use nix::unistd::{fchown, linkat, unlinkat, Gid, Uid, UnlinkatFlags};

use super::meta::{Kind, Stat};
use super::safe::{self, Owner, Resolved};
use super::{is_temp_name, FsError, TEMP_PREFIX};
use abx_wire::endpoints::{Limit, Param};

use crate::policy::{Denial, Grant, LimitValue, Op, ParamValue, PathGuard};

/// Directories swept for stale temp files, remembered so each is swept once per process.
const SWEPT_MEMORY: usize = 4096;

/// What the policy allows an upload.
#[derive(Debug, Clone, Default)]
pub struct WritePolicy {
    /// Whether an existing file may be replaced.
    pub overwrite: bool,
    /// Extensions allowed (`.txt`), empty for any.
    pub allow_extensions: Vec<String>,
    /// Extensions refused.
    pub deny_extensions: Vec<String>,
    /// Largest file, if limited.
    pub max_bytes: Option<u64>,
    /// Who the new file and the directories made for it belong to, when the
    /// request acts as another user than the server's.
    pub owner: Option<Owner>,
    /// Extended attributes (`(name, value)`) the new file gets before it is
    /// put in place (envd's metadata); skipped where the file system has none.
    pub xattrs: Vec<(String, Vec<u8>)>,
}

impl WritePolicy {
    /// The upload rules of `grant`'s endpoint (`overwrite`,
    /// `allow_extensions`, `deny_extensions`, and its `max_bytes` limit, else
    /// `default_max_bytes`); no owner, no extended attributes.
    pub fn for_grant(grant: &Grant, default_max_bytes: Option<u64>) -> Self {
        let strings = |key| match grant.param(key) {
            Some(ParamValue::Strings(list)) => list.clone(),
            _ => Vec::new(),
        };
        WritePolicy {
            overwrite: !matches!(grant.param(Param::Overwrite), Some(ParamValue::Bool(false))),
            allow_extensions: strings(Param::AllowExtensions),
            deny_extensions: strings(Param::DenyExtensions),
            max_bytes: grant.limit(Limit::MaxBytes).map(LimitValue::as_u64).or(default_max_bytes),
            owner: None,
            xattrs: Vec::new(),
        }
    }

    /// Refuses a target whose extension the policy does not allow.
    ///
    /// # Errors
    /// `extension_not_allowed` (403).
    pub fn check_extension(&self, path: &Path) -> Result<(), FsError> {
        let ext = path.extension().map(|e| format!(".{}", e.to_string_lossy().to_lowercase())).unwrap_or_default();
        let listed = |list: &[String]| list.iter().any(|e| e.to_lowercase() == ext);
        if (!self.allow_extensions.is_empty() && !listed(&self.allow_extensions)) || listed(&self.deny_extensions) {
            let shown = if ext.is_empty() { "(none)".to_string() } else { ext };
            return Err(FsError::Denied(Denial::new(
                Fault::ExtensionNotAllowed,
                format!("Files with extension '{shown}' are not allowed"),
            )));
        }
        Ok(())
    }

    /// Refuses a size over `max_bytes`.
    ///
    /// # Errors
    /// [`FsError::TooLarge`].
    pub fn check_size(&self, size: u64) -> Result<(), FsError> {
        match self.max_bytes {
            Some(limit) if size > limit => Err(FsError::TooLarge { size: Some(size), limit }),
            _ => Ok(()),
        }
    }
}

/// An in-progress atomic write of one file.
pub struct AtomicFile {
    file: Flock<File>,
    dir: OwnedFd,
    name: OsString,
    temp_name: Option<OsString>,
    target: PathBuf,
    written: u64,
    sync: bool,
    owner: Option<Owner>,
}

/// The result of a committed write.
#[derive(Debug, Clone, Copy)]
pub struct Committed {
    /// Whether the target did not exist before.
    pub created: bool,
    /// The new file's metadata.
    pub stat: Stat,
}

impl AtomicFile {
    /// Prepares a write of `target`: makes missing parent directories,
    /// refuses a directory in the way (and an existing file unless
    /// `overwrite`), and opens the temp file.
    ///
    /// # Errors
    /// [`FsError::IsADirectory`], [`FsError::Exists`], path refusals and I/O errors.
    pub fn create(guard: &PathGuard, target: &Resolved, overwrite: bool, writes: &Writes) -> Result<Self, FsError> {
        Self::create_for(guard, target, overwrite, writes, None)
    }

    /// [`AtomicFile::create`] for a request acting as another user: the
    /// directories it makes and the file are given to `owner`, through their
    /// descriptors (the file before it is linked into place).
    ///
    /// # Errors
    /// As [`AtomicFile::create`].
    pub fn create_for(
        guard: &PathGuard,
        target: &Resolved,
        overwrite: bool,
        writes: &Writes,
        owner: Option<Owner>,
    ) -> Result<Self, FsError> {
        if target.is_root() {
            return Err(FsError::IsADirectory(target.path.clone()));
        }
        let (Some(parent), Some(name)) = (target.path.parent(), target.path.file_name()) else {
            return Err(FsError::IsADirectory(target.path.clone()));
        };
        if is_temp_name(name) {
            return Err(FsError::Denied(Denial::new(
                Fault::PathDenied,
                "Names starting with .abx-upload- are reserved",
            )));
        }
        let dir = safe::create_dirs_for(guard, &target.sibling(parent.to_path_buf()), Op::Write, owner)?;
        match existing(&dir, name) {
            Some(st) if st.is_dir() => return Err(FsError::IsADirectory(target.path.clone())),
            Some(_) if !overwrite => return Err(FsError::Exists),
            _ => {}
        }
        writes.swept.sweep_once(&dir, parent);
        let (file, temp_name) = open_temp(&dir).map_err(|e| FsError::errno(&target.path, e))?;
        let file =
            Flock::lock(file, FlockArg::LockExclusiveNonblock).map_err(|(_, e)| FsError::errno(&target.path, e))?;
        let name = name.to_os_string();
        let sync = writes.sync;
        Ok(AtomicFile { file, dir, name, temp_name, target: target.path.clone(), written: 0, sync, owner })
    }

    /// [`AtomicFile::create_for`] as `policy` says: its overwrite rule, its
    /// owner, and its extended attributes set on the new file (skipped, with
    /// a warning, where the file system keeps none).
    ///
    /// # Errors
    /// As [`AtomicFile::create`].
    pub fn create_with(
        guard: &PathGuard,
        target: &Resolved,
        policy: &WritePolicy,
        writes: &Writes,
    ) -> Result<Self, FsError> {
        let file = Self::create_for(guard, target, policy.overwrite, writes, policy.owner)?;
        if !file.set_xattrs(&policy.xattrs)? {
            tracing::warn!(path = %target.path.display(), "the file system keeps no extended attributes; metadata not kept");
        }
        Ok(file)
    }

    /// Appends `data`.
    ///
    /// # Errors
    /// [`FsError::NoSpace`] when the disk or quota is full, other I/O errors.
    pub fn write_all(&mut self, data: &[u8]) -> Result<(), FsError> {
        (*self.file).write_all(data).map_err(|e| FsError::io(&self.target, e))?;
        self.written += data.len() as u64;
        Ok(())
    }

    /// Bytes written so far.
    pub fn written(&self) -> u64 {
        self.written
    }

    /// Sets extended attributes (`(name, value)`) on the new file, before it
    /// is put in place. `false` when the file system keeps none (nothing set).
    ///
    /// # Errors
    /// [`FsError::NoSpace`] when they do not fit on the inode; I/O errors.
    pub fn set_xattrs(&self, attributes: &[(String, Vec<u8>)]) -> Result<bool, FsError> {
        for (name, value) in attributes {
            match rustix::fs::fsetxattr(self.file.as_fd(), name.as_str(), value, rustix::fs::XattrFlags::empty()) {
                Ok(()) => {}
                Err(rustix::io::Errno::NOTSUP) => return Ok(false),
                Err(rustix::io::Errno::NOSPC | rustix::io::Errno::TOOBIG | rustix::io::Errno::DQUOT) => {
                    return Err(FsError::NoSpace(self.target.clone()))
                }
                Err(e) => return Err(FsError::io(&self.target, e.into())),
            }
        }
        Ok(true)
    }

    /// Puts the content in place atomically (durably first when syncing).
    ///
    /// # Errors
    /// [`FsError::Exists`] when overwriting is off and the target appeared,
    /// [`FsError::NoSpace`], and I/O errors. The target is untouched on error.
    pub fn commit(mut self, overwrite: bool) -> Result<Committed, FsError> {
        let path = self.target.clone();
        if self.sync {
            self.file.sync_data().map_err(|e| FsError::io(&path, e))?;
        }
        let before = existing(&self.dir, &self.name);
        if let Some(old) = before.filter(|s| s.kind == Kind::File) {
            let _ = fchmod(self.file.as_fd(), Mode::from_bits_truncate(old.mode & 0o7777));
            let st = fstatat(&self.dir, self.name.as_os_str(), AtFlags::AT_SYMLINK_NOFOLLOW).ok();
            if let Some(st) = st {
                let _ = fchown(self.file.as_fd(), Some(Uid::from_raw(st.st_uid)), Some(Gid::from_raw(st.st_gid)));
            }
        }
        if let Some(owner) = self.owner {
            // Still unnamed (or under a temp name): nobody can swap anything in its way.
            if let Err(e) = owner.give(&self.file.as_fd()) {
                tracing::warn!(path = %path.display(), error = %e, "cannot give a file to the request's user");
            }
        }
        // The replaced file's blocks are freed when its last reference goes, which for
        // a large file takes long: hold one across the rename and let it go off this path.
        let replaced = before.filter(|s| overwrite && s.kind == Kind::File).and_then(|_| {
            let flags = OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
            openat(&self.dir, self.name.as_os_str(), flags, Mode::empty()).ok()
        });
        match (self.temp_name.take(), overwrite) {
            (None, false) => link_anonymous(&self.file, &self.dir, &self.name).map_err(|e| no_clobber(&path, e))?,
            (None, true) => {
                let temp = temp_name();
                link_anonymous(&self.file, &self.dir, &temp).map_err(|e| FsError::errno(&path, e))?;
                if let Err(e) = renameat(&self.dir, temp.as_os_str(), &self.dir, self.name.as_os_str()) {
                    let _ = unlinkat(&self.dir, temp.as_os_str(), UnlinkatFlags::NoRemoveDir);
                    return Err(FsError::errno(&path, e));
                }
            }
            (Some(temp), overwrite) => {
                let moved = if overwrite {
                    renameat(&self.dir, temp.as_os_str(), &self.dir, self.name.as_os_str())
                } else {
                    linkat(&self.dir, temp.as_os_str(), &self.dir, self.name.as_os_str(), AtFlags::empty())
                        .and_then(|()| unlinkat(&self.dir, temp.as_os_str(), UnlinkatFlags::NoRemoveDir))
                };
                if let Err(e) = moved {
                    let _ = unlinkat(&self.dir, temp.as_os_str(), UnlinkatFlags::NoRemoveDir);
                    return Err(no_clobber(&path, e));
                }
            }
        }
        if self.sync {
            let _ = nix::unistd::fsync(&self.dir);
        }
        if let Some(replaced) = replaced {
            release_later(replaced);
        }
        let stat = fstat(self.file.as_fd()).map(|st| Stat::from_filestat(&st)).map_err(|e| FsError::errno(&path, e))?;
        Ok(Committed { created: before.is_none(), stat })
    }
}

impl Drop for AtomicFile {
    fn drop(&mut self) {
        if let Some(temp) = self.temp_name.take() {
            let _ = unlinkat(&self.dir, temp.as_os_str(), UnlinkatFlags::NoRemoveDir);
        }
    }
}

/// Closes `fd` on the blocking pool when there is a runtime (closing the last
/// reference to a deleted file frees its blocks), else now.
fn release_later(fd: OwnedFd) {
    match tokio::runtime::Handle::try_current() {
        Ok(runtime) => drop(runtime.spawn_blocking(move || drop(fd))),
        Err(_) => drop(fd),
    }
}

fn no_clobber(path: &std::path::Path, err: Errno) -> FsError {
    if err == Errno::EEXIST {
        FsError::Exists
    } else {
        FsError::errno(path, err)
    }
}

/// The metadata of `name` in `dir`, if it exists (symlinks not followed).
fn existing(dir: &OwnedFd, name: &OsStr) -> Option<Stat> {
    fstatat(dir, name, AtFlags::AT_SYMLINK_NOFOLLOW).ok().map(|st| Stat::from_filestat(&st))
}

/// An unnamed temp file in `dir`, or a named one where `O_TMPFILE` is unsupported.
fn open_temp(dir: &OwnedFd) -> nix::Result<(File, Option<OsString>)> {
    let mode = Mode::from_bits_truncate(0o666);
    if proc_fd_available() {
        match openat(dir, ".", OFlag::O_TMPFILE | OFlag::O_RDWR | OFlag::O_CLOEXEC, mode) {
            Ok(fd) => return Ok((File::from(fd), None)),
            Err(Errno::EOPNOTSUPP | Errno::EISDIR | Errno::EINVAL) => {}
            Err(e) => return Err(e),
        }
    }
    let name = temp_name();
    let fd = openat(
        dir,
        name.as_os_str(),
        OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_RDWR | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        mode,
    )?;
    Ok((File::from(fd), Some(name)))
}

/// Gives an unnamed temp file the name `name` in `dir`.
fn link_anonymous(file: &File, dir: &OwnedFd, name: &OsStr) -> nix::Result<()> {
    let proc_path = format!("/proc/self/fd/{}", file.as_raw_fd());
    linkat(AT_FDCWD, proc_path.as_str(), dir, name, AtFlags::AT_SYMLINK_FOLLOW)
}

fn proc_fd_available() -> bool {
    static AVAILABLE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *AVAILABLE.get_or_init(|| std::path::Path::new("/proc/self/fd").is_dir())
}

/// A fresh `.abx-upload-<random>` name.
pub fn temp_name() -> OsString {
    static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let random = RandomState::new().hash_one(n);
    OsString::from(format!("{TEMP_PREFIX}{}-{random:016x}", std::process::id()))
}

/// What the atomic writes of one server share: the durability setting and
/// the directories already swept for stale temp files.
#[derive(Debug, Default)]
pub struct Writes {
    /// Whether a commit `fdatasync`s the file before putting it in place
    /// (and `fsync`s the directory after).
    pub sync: bool,
    swept: SweptDirs,
}

impl Writes {
    /// Writes that sync (`sync`) or leave flushing to the kernel.
    pub fn new(sync: bool) -> Self {
        Writes { sync, swept: SweptDirs::default() }
    }
}

/// The directories already swept for stale temp files by this process.
#[derive(Debug, Default)]
struct SweptDirs(Mutex<HashSet<PathBuf>>);

impl SweptDirs {
    /// Removes stale temp files from `dir` the first time a write goes there.
    fn sweep_once(&self, dir: &OwnedFd, path: &std::path::Path) {
        {
            let Ok(mut swept) = self.0.lock() else { return };
            if swept.contains(path) {
                return;
            }
            if swept.len() >= SWEPT_MEMORY {
                swept.clear();
            }
            swept.insert(path.to_path_buf());
        }
        let removed = sweep(dir);
        if removed > 0 {
            tracing::info!(dir = %path.display(), removed, "removed temp files left by an interrupted write");
        }
    }
}

/// Removes the temp files in `dir` that no live writer holds; returns how many.
pub fn sweep(dir: &OwnedFd) -> usize {
    let Ok(handle) = dir.try_clone() else { return 0 };
    let Ok(mut stream) = nix::dir::Dir::from_fd(handle) else { return 0 };
    let names: Vec<OsString> = stream
        .iter()
        .filter_map(Result::ok)
        .map(|e| <OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(e.file_name().to_bytes()).to_os_string())
        .filter(|n| is_temp_name(n))
        .take(10_000)
        .collect();
    names.iter().filter(|name| remove_if_stale(dir, name)).count()
}

fn remove_if_stale(dir: &OwnedFd, name: &OsStr) -> bool {
    let flags = OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC;
    let Ok(fd) = openat(dir, name, flags, Mode::empty()) else { return false };
    let file = File::from(fd);
    let Ok(st) = fstat(file.as_fd()) else { return false };
    if SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT != SFlag::S_IFREG {
        return false;
    }
    // A live writer holds the lock; a dead one released it with its process.
    let Ok(_locked) = Flock::lock(file, FlockArg::LockExclusiveNonblock) else { return false };
    let same = fstatat(dir, name, AtFlags::AT_SYMLINK_NOFOLLOW).is_ok_and(|now| now.st_ino == st.st_ino);
    same && unlinkat(dir, name, UnlinkatFlags::NoRemoveDir).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::rules::compile;

    fn setup() -> (tempfile::TempDir, PathGuard, PathBuf) {
        let dir = tempfile::tempdir().expect("tempdir");
        let real = dir.path().canonicalize().expect("canonical");
        let guard = PathGuard::new(&real, &compile(&[], true).expect("rules")[0]);
        (dir, guard, real)
    }

    fn no_temp_files(dir: &std::path::Path) -> bool {
        std::fs::read_dir(dir).expect("read_dir").all(|e| !is_temp_name(&e.expect("entry").file_name()))
    }

    #[test]
    fn a_write_appears_only_when_committed() {
        let (_d, guard, real) = setup();
        std::fs::write(real.join("f"), b"old").expect("write");
        let target = safe::resolve(&guard, "f", Op::Write, "").expect("resolve");
        let writes = Writes::new(true);
        let mut file = AtomicFile::create(&guard, &target, true, &writes).expect("create");
        file.write_all(b"new content").expect("write");
        assert_eq!(std::fs::read(real.join("f")).expect("read"), b"old");
        drop(file);
        assert_eq!(std::fs::read(real.join("f")).expect("read"), b"old");
        assert!(no_temp_files(&real));
        let mut file = AtomicFile::create(&guard, &target, true, &writes).expect("create");
        file.write_all(b"new").expect("write");
        let committed = file.commit(true).expect("commit");
        assert!(!committed.created);
        assert_eq!(std::fs::read(real.join("f")).expect("read"), b"new");
        assert!(no_temp_files(&real));
    }

    #[test]
    fn no_clobber_is_atomic_and_empty_files_work() {
        let (_d, guard, real) = setup();
        let target = safe::resolve(&guard, "sub/dir/e", Op::Write, "").expect("resolve");
        let writes = Writes::default();
        let file = AtomicFile::create(&guard, &target, false, &writes).expect("create");
        let racing = AtomicFile::create(&guard, &target, false, &writes).expect("create");
        assert!(file.commit(false).expect("commit").created);
        assert_eq!(std::fs::read(real.join("sub/dir/e")).expect("read"), b"");
        assert!(matches!(racing.commit(false), Err(FsError::Exists)));
        assert!(matches!(AtomicFile::create(&guard, &target, false, &writes), Err(FsError::Exists)));
    }

    #[test]
    fn stale_named_temp_files_are_swept_but_live_ones_are_not() {
        let (_d, _guard, real) = setup();
        std::fs::write(real.join(".abx-upload-dead"), b"x").expect("write");
        let live = File::create(real.join(".abx-upload-live")).expect("create");
        let _held = Flock::lock(live, FlockArg::LockExclusiveNonblock).expect("lock");
        let dir = nix::fcntl::open(&real, safe::dir_flags(), Mode::empty()).expect("open");
        assert_eq!(sweep(&dir), 1);
        assert!(!real.join(".abx-upload-dead").exists());
        assert!(real.join(".abx-upload-live").exists());
    }
}
