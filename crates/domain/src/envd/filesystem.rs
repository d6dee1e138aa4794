//! `filesystem.Filesystem`'s unary methods on [`crate::fs`]: blocking
//! functions (run them on the blocking pool) from a guard and the caller's
//! paths to envd's answers and errors.

use abx_wire::api::envd::filesystem::EntryInfo;

use super::entry::{self, resolve_link};
use super::EnvdError;
use crate::accounts::Account;
use crate::fs::meta::Kind;
use crate::fs::safe;
use crate::fs::write::Writes;
use crate::fs::{ops, FsError};
use crate::policy::{Op, PathGuard};

/// `Stat`: the entry itself (a symlink is not followed).
///
/// # Errors
/// [`EnvdError::NotFound`] when nothing is there; the guard's refusals.
pub fn stat(guard: &PathGuard, raw: &str) -> Result<EntryInfo, EnvdError> {
    entry::entry(guard, &resolve_link(guard, raw, Op::Read)?)
}

/// `ListDir`: the entries `depth` levels deep (0 means 1); a symlink to a directory is followed.
///
/// # Errors
/// [`EnvdError::NotFound`], [`EnvdError::Invalid`] for a file.
pub fn list_dir(guard: &PathGuard, raw: &str, depth: u32) -> Result<Vec<EntryInfo>, EnvdError> {
    let target = safe::resolve(guard, raw, Op::Read, "")?;
    entry::list(guard, &target, usize::try_from(depth).unwrap_or(usize::MAX).max(1))
}

/// `MakeDir`: the directory and its missing parents.
///
/// # Errors
/// [`EnvdError::AlreadyExists`] for an existing directory, [`EnvdError::Invalid`] for a file in the way.
pub fn make_dir(guard: &PathGuard, raw: &str, account: Option<&Account>) -> Result<EntryInfo, EnvdError> {
    let target = safe::resolve(guard, raw, Op::Write, "")?;
    match crate::fs::list::stat_of(guard, &target)? {
        Some(st) if st.kind == Kind::Directory => {
            return Err(EnvdError::AlreadyExists(format!("directory already exists: {}", target.path.display())))
        }
        Some(_) => {
            return Err(EnvdError::Invalid(format!(
                "path already exists but it is not a directory: {}",
                target.path.display()
            )))
        }
        None => {}
    }
    safe::create_dirs_for(guard, &target, Op::Write, owner_of(account)).map_err(not_a_directory)?;
    entry::entry(guard, &target)
}

/// `Move`: renames `source` (a symlink itself, not its target) to exactly
/// `destination`, making the destination's parents.
///
/// # Errors
/// [`EnvdError::NotFound`] for a missing source; [`EnvdError::AlreadyExists`]
/// when the destination is an existing directory.
pub fn move_entry(guard: &PathGuard, source: &str, destination: &str, writes: &Writes) -> Result<EntryInfo, EnvdError> {
    let from = resolve_link(guard, source, Op::Delete)?;
    let to = resolve_link(guard, destination, Op::Write)?;
    if from.path != to.path && crate::fs::list::stat_of(guard, &to)?.is_some_and(|st| st.is_dir()) {
        return Err(EnvdError::AlreadyExists(format!("destination is a directory: {}", to.path.display())));
    }
    let moved = ops::rename(guard, &from, &to, source, writes).map_err(|e| match e {
        FsError::NotFound(_) => EnvdError::NotFound(format!("source file not found: {}", from.path.display())),
        other => not_a_directory(other),
    })?;
    entry::entry(guard, &to.sibling(moved))
}

/// `Remove`: the file, the symlink or the whole tree; nothing there is not an error (as envd).
///
/// # Errors
/// The guard's refusals (the base directory itself cannot be removed).
pub fn remove(guard: &PathGuard, raw: &str) -> Result<(), EnvdError> {
    let target = resolve_link(guard, raw, Op::Delete)?;
    match ops::delete(guard, &target, raw) {
        Ok(()) | Err(FsError::NotFound(_)) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Who what a request creates belongs to: its account, when the server
/// (as root) acts as another user. Ownership is then given through the
/// descriptors of the new entries, never by path.
pub fn owner_of(account: Option<&Account>) -> Option<safe::Owner> {
    account.filter(|a| a.is_other()).map(|a| safe::Owner { uid: a.uid, gid: a.gid })
}

fn not_a_directory(e: FsError) -> EnvdError {
    match e {
        FsError::NotADirectory(path) => EnvdError::Invalid(format!("path is a file: {}", path.display())),
        FsError::IsADirectory(path) => EnvdError::Invalid(format!("path is a directory: {}", path.display())),
        other => other.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::paths::scratch;
    use abx_wire::api::envd::filesystem::FileType;

    #[test]
    fn make_dir_move_and_remove_follow_envd() {
        let (_d, guard, real) = scratch();
        let made = make_dir(&guard, "x/y", None).expect("mkdir -p");
        assert_eq!((made.kind, made.name.as_str()), (FileType::Directory, "y"));
        assert!(matches!(make_dir(&guard, "x/y", None), Err(EnvdError::AlreadyExists(_))));
        std::fs::write(real.join("f"), b"1").expect("write");
        assert!(matches!(make_dir(&guard, "f", None), Err(EnvdError::Invalid(_))));
        let moved = move_entry(&guard, "f", "deep/er/g", &Writes::default()).expect("move");
        assert_eq!(moved.path, real.join("deep/er/g").display().to_string());
        assert!(matches!(move_entry(&guard, "f", "h", &Writes::default()), Err(EnvdError::NotFound(_))));
        assert!(matches!(move_entry(&guard, "deep/er/g", "x", &Writes::default()), Err(EnvdError::AlreadyExists(_))));
        std::os::unix::fs::symlink("deep", real.join("link")).expect("symlink");
        remove(&guard, "link").expect("remove the link");
        assert!(real.join("deep/er/g").exists(), "the target survives");
        remove(&guard, "deep").expect("remove a tree");
        remove(&guard, "deep").expect("removing nothing is fine");
        assert!(!real.join("deep").exists());
        assert!(matches!(stat(&guard, "deep"), Err(EnvdError::NotFound(_))));
        assert!(remove(&guard, ".").is_err(), "the base directory stays");
    }
}
