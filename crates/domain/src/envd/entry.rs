//! envd's view of files: `EntryInfo` of one path, and listings to a depth.
//!
//! Paths are resolved by the policy's [`PathGuard`] as everywhere else, with
//! one difference envd needs: the final component is not followed
//! ([`resolve_link`]), so `Stat`, `Remove` and `Move` of a symlink act on the
//! link itself. Everything is opened beneath its root without following
//! symlinks ([`safe`]).

use std::collections::{BTreeMap, HashMap};
use std::os::fd::AsFd;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use abx_wire::api::envd::filesystem::{EntryInfo, FileType};
use abx_wire::api::envd::timestamp;
use nix::fcntl::OFlag;
use nix::sys::stat::Mode;
use nix::unistd::{Gid, Group, Uid, User};

use super::EnvdError;
use crate::fs::meta::{Kind, Stat};
use crate::fs::safe::{self, dir_flags, Resolved};
use crate::fs::walk::{walk, Flow};
use crate::fs::FsError;
use crate::policy::paths::normalize;
use crate::policy::{Op, PathGuard};

/// An entry's user metadata (see [`super::metadata`]).
type Metadata = BTreeMap<String, String>;

/// Most entries one `ListDir` returns.
pub const MAX_LIST_ENTRIES: usize = 100_000;

/// Resolves `raw` for `op` without following a symlink in its final component.
///
/// # Errors
/// The guard's refusals (of the parent, or of the entry itself).
pub fn resolve_link(guard: &PathGuard, raw: &str, op: Op) -> Result<Resolved, EnvdError> {
    let lexical = normalize(&guard.primary_root().join(raw));
    let (Some(parent), Some(name)) = (lexical.parent(), lexical.file_name()) else {
        return Ok(safe::resolve(guard, raw, op, "")?);
    };
    if raw.is_empty() || guard.is_root(&lexical) {
        return Ok(safe::resolve(guard, raw, op, "")?);
    }
    let parent = parent.to_str().ok_or_else(|| EnvdError::Invalid("the path is not valid UTF-8".into()))?;
    let parent = safe::resolve(guard, parent, op, "")?;
    let path = parent.path.join(name);
    guard.check_resolved(&path, op)?;
    Ok(parent.sibling(path))
}

/// Owner and group names by id, looked up once per listing.
#[derive(Default)]
pub struct Names {
    users: HashMap<u32, String>,
    groups: HashMap<u32, String>,
}

impl Names {
    fn user(&mut self, uid: u32) -> String {
        name_of(&mut self.users, uid, |id| User::from_uid(Uid::from_raw(id)).ok().flatten().map(|u| u.name))
    }

    fn group(&mut self, gid: u32) -> String {
        name_of(&mut self.groups, gid, |id| Group::from_gid(Gid::from_raw(id)).ok().flatten().map(|g| g.name))
    }
}

/// The name of `id` from `cache`, looked up on a miss; the number itself when it has none.
fn name_of(cache: &mut HashMap<u32, String>, id: u32, lookup: impl FnOnce(u32) -> Option<String>) -> String {
    cache.entry(id).or_insert_with(|| lookup(id).unwrap_or_else(|| id.to_string())).clone()
}

/// `-rw-r--r--`: a mode as Go's `FileMode.String()` writes it (what envd reports).
pub fn permissions(mode: u32) -> String {
    let format = mode & 0o170_000;
    let mut out = String::new();
    let flags = [
        (format == 0o040_000, 'd'),
        (format == 0o120_000, 'L'),
        (format == 0o060_000 || format == 0o020_000, 'D'),
        (format == 0o010_000, 'p'),
        (format == 0o140_000, 'S'),
        (mode & 0o4000 != 0, 'u'),
        (mode & 0o2000 != 0, 'g'),
        (format == 0o020_000, 'c'),
        (mode & 0o1000 != 0, 't'),
    ];
    out.extend(flags.iter().filter(|(set, _)| *set).map(|(_, c)| *c));
    if out.is_empty() {
        out.push('-');
    }
    for (i, c) in "rwxrwxrwx".chars().enumerate() {
        out.push(if mode & (1 << (8 - i)) != 0 { c } else { '-' });
    }
    out
}

/// The `EntryInfo` of `path` from its (not followed) metadata. A symlink is
/// reported as envd does: `type` and `mode` of its target (when the target
/// exists and the guard lets it be seen, else `SYMLINK`), with `isSymlink`
/// and `symlinkTarget` set, and its own size and permissions.
fn info(
    guard: &PathGuard,
    path: &Path,
    st: &Stat,
    owner: (u32, u32),
    metadata: Metadata,
    names: &mut Names,
) -> EntryInfo {
    let (uid, gid) = owner;
    let kind_of = |kind| match kind {
        Kind::File => FileType::File,
        Kind::Directory => FileType::Directory,
        Kind::Symlink => FileType::Symlink,
    };
    let mut kind = kind_of(st.kind);
    let mut mode = st.mode & 0o777;
    let symlink_target = (st.kind == Kind::Symlink).then(|| link_target(path));
    if st.kind == Kind::Symlink {
        if let Some(target) = followed(guard, path) {
            kind = kind_of(target.kind);
            mode = target.mode & 0o777;
        }
    }
    EntryInfo {
        name: crate::fs::file_name(path),
        kind,
        path: path.display().to_string(),
        size: i64::try_from(st.size).unwrap_or(i64::MAX),
        mode,
        permissions: permissions(st.mode),
        owner: names.user(uid),
        group: names.group(gid),
        modified_time: Some(timestamp(st.modified.secs, u32::try_from(st.modified.nanos).unwrap_or(0))),
        is_symlink: st.kind == Kind::Symlink,
        symlink_target,
        metadata,
    }
}

/// The metadata of what the symlink `path` leads to, if it exists and may be seen.
fn followed(guard: &PathGuard, path: &Path) -> Option<Stat> {
    let target = safe::resolve(guard, path.to_str()?, Op::Read, "").ok()?;
    let fd = safe::open_beneath(&target.root, target.relative(), OFlag::O_PATH, Mode::empty()).ok()?;
    let st = Stat::from_metadata(&std::fs::File::from(fd).metadata().ok()?);
    (st.kind != Kind::Symlink).then_some(st)
}

/// Where a symlink points, made absolute (against its directory) and normalised.
fn link_target(path: &Path) -> String {
    match std::fs::read_link(path) {
        Ok(target) => normalize(&path.parent().unwrap_or(Path::new("/")).join(target)).display().to_string(),
        Err(_) => String::new(),
    }
}

/// The entry at `target` (itself, not a symlink's target).
///
/// # Errors
/// [`EnvdError::NotFound`] when it does not exist; I/O errors.
pub fn entry(guard: &PathGuard, target: &Resolved) -> Result<EntryInfo, EnvdError> {
    use std::os::unix::fs::MetadataExt;
    let fd = match safe::open_beneath(&target.root, target.relative(), OFlag::O_PATH, Mode::empty()) {
        Ok(fd) => fd,
        Err(nix::errno::Errno::ENOENT | nix::errno::Errno::ENOTDIR) => {
            return Err(EnvdError::NotFound(format!("file not found: {}", target.path.display())))
        }
        Err(e) => return Err(FsError::errno(&target.path, e).into()),
    };
    let file = std::fs::File::from(fd);
    let meta = file.metadata().map_err(|e| FsError::io(&target.path, e))?;
    let st = Stat::from_metadata(&meta);
    if st.kind != Kind::Symlink {
        guard.check_resolved(&target.path, Op::Read)?;
    }
    let metadata = super::metadata::read(file.as_fd());
    Ok(info(guard, &target.path, &st, (meta.uid(), meta.gid()), metadata, &mut Names::default()))
}

/// The entries below the directory `target`, `depth` levels deep (at least 1),
/// in envd's order (a walk in name order: each directory's entries sorted by
/// name, right after it). Entries the guard would refuse are left out, as
/// are this server's temp files.
///
/// # Errors
/// [`EnvdError::NotFound`] when it does not exist; [`EnvdError::Invalid`]
/// when it is not a directory.
pub fn list(guard: &PathGuard, target: &Resolved, depth: usize) -> Result<Vec<EntryInfo>, EnvdError> {
    let dir = match safe::open(guard, target, dir_flags(), Mode::empty(), Op::Read) {
        Ok(dir) => dir,
        Err(FsError::NotFound(_)) => {
            return Err(EnvdError::NotFound(format!("directory not found: {}", target.path.display())))
        }
        Err(FsError::NotADirectory(_)) => {
            return Err(EnvdError::Invalid(format!("path is not a directory: {}", target.path.display())))
        }
        Err(e) => return Err(e.into()),
    };
    let mut names = Names::default();
    let mut entries = Vec::new();
    let depth = depth.max(1);
    walk(dir, &target.path, &mut |item| {
        if !crate::fs::list::visible(guard, item) {
            return Flow::Skip;
        }
        let owner = nix::sys::stat::fstatat(item.dir, item.name, nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW)
            .map_or((0, 0), |st| (st.st_uid, st.st_gid));
        let metadata = match item.stat.kind {
            Kind::Symlink => Metadata::new(),
            _ => super::metadata::read_at(item.dir, item.name),
        };
        entries.push(info(guard, &item.path, &item.stat, owner, metadata, &mut names));
        if entries.len() >= MAX_LIST_ENTRIES {
            Flow::Stop
        } else if item.depth < depth {
            Flow::Descend
        } else {
            Flow::Skip
        }
    })
    .map_err(|e| FsError::errno(&target.path, e))?;
    // Paths compare component by component: a directory's entries follow it, by name.
    entries.sort_by(|a, b| Path::new(&a.path).cmp(Path::new(&b.path)));
    Ok(entries)
}

/// The name of `path` relative to the watched directory `root`.
pub fn relative_name(root: &Path, path: &Path) -> String {
    let rel = path.strip_prefix(root).unwrap_or(path);
    String::from_utf8_lossy(rel.as_os_str().as_bytes()).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::paths::scratch;

    #[test]
    fn permissions_read_like_go() {
        assert_eq!(permissions(0o100_644), "-rw-r--r--");
        assert_eq!(permissions(0o040_755), "drwxr-xr-x");
        assert_eq!(permissions(0o120_777), "Lrwxrwxrwx");
        assert_eq!(permissions(0o104_755), "urwxr-xr-x");
        assert_eq!(permissions(0o041_777), "dtrwxrwxrwx");
    }

    #[test]
    fn symlinks_are_reported_as_links_and_listed_to_a_depth() {
        let (_d, guard, real) = scratch();
        std::fs::create_dir_all(real.join("a/b/c")).expect("mkdir");
        std::fs::write(real.join("a/f"), b"hello").expect("write");
        std::os::unix::fs::symlink("f", real.join("a/l")).expect("symlink");
        let link = resolve_link(&guard, "a/l", Op::Read).expect("resolve");
        let info = entry(&guard, &link).expect("entry");
        assert_eq!((info.kind, info.is_symlink, info.name.as_str()), (FileType::File, true, "l"));
        std::os::unix::fs::symlink("/etc/passwd", real.join("a/out")).expect("symlink");
        let out = entry(&guard, &resolve_link(&guard, "a/out", Op::Read).expect("resolve")).expect("entry");
        assert_eq!((out.kind, out.is_symlink), (FileType::Symlink, true), "a target outside stays unseen");
        assert_eq!(info.symlink_target.as_deref(), Some(real.join("a/f").to_str().expect("utf-8")));
        let file = entry(&guard, &resolve_link(&guard, "a/f", Op::Read).expect("resolve")).expect("entry");
        assert_eq!((file.kind, file.size, file.mode), (FileType::File, 5, file.mode & 0o777));
        let missing = entry(&guard, &resolve_link(&guard, "a/nope", Op::Read).expect("resolve"));
        assert!(matches!(missing, Err(EnvdError::NotFound(_))));
        let top = safe::resolve(&guard, "a", Op::Read, "").expect("resolve");
        let one: Vec<String> = list(&guard, &top, 1).expect("list").into_iter().map(|e| e.name).collect();
        assert_eq!(one, ["b", "f", "l"], "sorted by name");
        std::fs::write(real.join("a/b.txt"), b"").expect("write");
        let three: Vec<String> = list(&guard, &top, 3).expect("list").into_iter().map(|e| e.path).collect();
        let rel: Vec<&str> =
            three.iter().map(|p| p.strip_prefix(real.join("a/").to_str().expect("utf-8")).expect("below")).collect();
        assert_eq!(rel, ["b", "b/c", "b.txt", "f", "l"], "a directory's entries right after it");
        let not_dir = safe::resolve(&guard, "a/f", Op::Read, "").expect("resolve");
        assert!(matches!(list(&guard, &not_dir, 1), Err(EnvdError::Invalid(_))));
    }
}
