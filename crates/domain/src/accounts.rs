//! User accounts that programs act as: an entry of the user database, looked
//! up by name or uid, with everything a child needs to drop to it.
//!
//! Three callers act as another user, each with its own refusals at its own
//! edge, all from one [`LookupError`]: a policy identity whose programs run
//! as its own user (`policy::user`, checked once when the policy is
//! compiled), envd requests acting as a user (`envd::access`), and a
//! `/process` request naming one (`process::exec`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use nix::unistd::{Gid, Uid, User};

use crate::syscalls::RunAs;

/// A user account programs act as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Account {
    /// User name.
    pub name: String,
    /// User id.
    pub uid: u32,
    /// Primary group id.
    pub gid: u32,
    /// Supplementary groups (the primary one included).
    pub groups: Vec<u32>,
    /// Home directory.
    pub home: PathBuf,
    /// Login shell.
    pub shell: PathBuf,
}

/// Why a user cannot be acted as.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LookupError {
    /// No such user in the user database.
    #[error("unknown user '{0}'")]
    Unknown(String),
    /// Another user than the server's own while the server is not root.
    #[error("acting as '{user}' needs the server to run as root (it runs as uid {server})")]
    NotRoot {
        /// The user asked for.
        user: String,
        /// The server's uid.
        server: u32,
    },
}

/// Looks `user` (a name or a uid) up. Blocking (the user database).
///
/// # Errors
/// [`LookupError::Unknown`]; [`LookupError::NotRoot`] for another user than
/// the server's own while the server does not run as root.
pub fn lookup(user: &str) -> Result<Account, LookupError> {
    let found = match user.parse::<u32>() {
        Ok(uid) => User::from_uid(Uid::from_raw(uid)),
        Err(_) => User::from_name(user),
    };
    let entry = found.ok().flatten().ok_or_else(|| LookupError::Unknown(user.to_string()))?;
    let me = Uid::effective();
    if entry.uid != me && !me.is_root() {
        return Err(LookupError::NotRoot { user: user.to_string(), server: me.as_raw() });
    }
    let groups = std::ffi::CString::new(entry.name.clone())
        .ok()
        .and_then(|name| nix::unistd::getgrouplist(&name, entry.gid).ok())
        .unwrap_or_else(|| vec![entry.gid]);
    Ok(Account {
        name: entry.name,
        uid: entry.uid.as_raw(),
        gid: entry.gid.as_raw(),
        groups: groups.into_iter().map(Gid::as_raw).collect(),
        home: entry.dir,
        shell: entry.shell,
    })
}

/// The server's own account. Blocking (the user database).
///
/// # Errors
/// [`LookupError::Unknown`] when the server's uid has no account.
pub fn own() -> Result<Account, LookupError> {
    lookup(&Uid::effective().as_raw().to_string())
}

impl Account {
    /// Whether acting as this account means acting as another user than the server's.
    pub fn is_other(&self) -> bool {
        self.uid != Uid::effective().as_raw()
    }

    /// Whether `asked` (a name or a uid, as a request names a user) is this account.
    pub fn is(&self, asked: &str) -> bool {
        asked == self.name || asked.parse::<u32>().is_ok_and(|uid| uid == self.uid)
    }

    /// How a child drops to this account, with `no_new_privs` (see
    /// [`RunAs::no_new_privs`]; a caller that does not want it clears it).
    pub fn run_as(&self) -> RunAs {
        RunAs {
            uid: Uid::from_raw(self.uid),
            gid: Gid::from_raw(self.gid),
            groups: self.groups.iter().copied().map(Gid::from_raw).collect(),
            no_new_privs: true,
        }
    }

    /// Points `HOME`, `USER` and `LOGNAME` of a child's environment at this account.
    pub fn login_env(&self, env: &mut BTreeMap<String, String>) {
        env.insert("HOME".into(), self.home.display().to_string());
        env.insert("USER".into(), self.name.clone());
        env.insert("LOGNAME".into(), self.name.clone());
    }

    /// Gives `path` (a directory the daemon just created for this account's
    /// programs) to this account, so they can work in it. Blocking.
    ///
    /// # Errors
    /// The kernel's refusal.
    pub fn take(&self, path: &Path) -> std::io::Result<()> {
        std::os::unix::fs::chown(path, Some(self.uid), Some(self.gid))
    }

    /// Whether this account may enter the directory `dir` (search permission
    /// on it and every directory above it, from the mode bits, as the kernel
    /// decides for a process of this account; root may enter everything).
    /// Blocking.
    pub fn may_enter(&self, dir: &Path) -> bool {
        use std::os::unix::fs::MetadataExt;
        if self.uid == 0 {
            return true;
        }
        dir.ancestors().all(|step| {
            let Ok(meta) = std::fs::metadata(step) else { return false };
            let bit = if meta.uid() == self.uid {
                0o100
            } else if self.groups.contains(&meta.gid()) {
                0o010
            } else {
                0o001
            };
            meta.mode() & bit != 0
        })
    }
}

/// [`Account::take`] of `path` when `account` is set; nothing otherwise.
///
/// # Errors
/// The kernel's refusal.
pub fn give(account: Option<&Account>, path: &Path) -> std::io::Result<()> {
    account.map_or(Ok(()), |a| a.take(path))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accounts_are_found_by_name_or_uid_and_unknown_ones_refused() {
        let me = User::from_uid(Uid::effective()).expect("lookup").expect("me");
        let by_name = lookup(&me.name).expect("me");
        assert_eq!(by_name, lookup(&me.uid.to_string()).expect("me"));
        assert_eq!(own().expect("own"), by_name);
        assert!(by_name.is(&me.name) && by_name.is(&me.uid.to_string()) && !by_name.is("someone-else"));
        assert!(!by_name.is_other());
        assert!(by_name.groups.contains(&by_name.gid), "the primary group is one of its groups");
        assert!(by_name.run_as().no_new_privs);
        assert_eq!(lookup("no-such-user-q7"), Err(LookupError::Unknown("no-such-user-q7".into())));
    }

    #[test]
    fn a_login_environment_names_the_account() {
        let account = Account {
            name: "u".into(),
            uid: 4242,
            gid: 4242,
            groups: vec![4242],
            home: "/home/u".into(),
            shell: "/bin/bash".into(),
        };
        let mut env = BTreeMap::from([("USER".to_string(), "root".to_string())]);
        account.login_env(&mut env);
        let expected = [("HOME", "/home/u"), ("LOGNAME", "u"), ("USER", "u")];
        assert_eq!(env, expected.map(|(k, v)| (k.to_string(), v.to_string())).into());
    }

    #[test]
    fn entering_a_directory_needs_search_permission_all_the_way() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().expect("tempdir");
        let closed = dir.path().join("closed");
        std::fs::create_dir_all(closed.join("inner")).expect("mkdir");
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
        std::fs::set_permissions(&closed, std::fs::Permissions::from_mode(0o700)).expect("chmod");
        let me = own().expect("own");
        let stranger = Account { uid: 4242, gid: 4242, groups: vec![4242], name: "nobody-4242".into(), ..me.clone() };
        assert!(stranger.may_enter(dir.path()));
        assert!(!stranger.may_enter(&closed.join("inner")), "the closed parent stops it");
        assert!(me.uid != 0 || me.may_enter(&closed.join("inner")), "root enters everything");
        assert!(!stranger.may_enter(&dir.path().join("missing")));
    }
}
