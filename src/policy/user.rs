//! The user a policy identity's programs run as (`auth.tokens[].user`).
//!
//! Identities that share one daemon would otherwise share its uid, and one
//! identity's program could read another's environment (`/proc/<pid>/environ`,
//! where an agent CLI holds its vault tokens), files and memory. An identity
//! that names a user gets every program it starts, on every port, run as that
//! user: its supplementary groups, its group, its uid, and `no_new_privs`
//! (no capabilities, and no set-user-ID program gives them back). The
//! account is looked up once, when the policy is compiled; an unknown user,
//! or another user while the daemon is not root, is a configuration error.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use nix::unistd::{Gid, Uid, User};

use super::PolicyConfigError;
use crate::syscalls::RunAs;

/// The account an identity's programs run as, resolved at start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdentityUser {
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

impl IdentityUser {
    /// Looks `user` (a name or a uid) up, for the identity at `at` (a JSON
    /// path, for the error). Blocking (the user database).
    ///
    /// # Errors
    /// An unknown user, or another user than the daemon's own while the
    /// daemon does not run as root.
    pub fn resolve(user: &str, at: &str) -> Result<Self, PolicyConfigError> {
        let found = match user.parse::<u32>() {
            Ok(uid) => User::from_uid(Uid::from_raw(uid)),
            Err(_) => User::from_name(user),
        };
        let Some(account) = found.ok().flatten() else {
            return Err(PolicyConfigError::new(format!("{at}: unknown user '{user}'")));
        };
        let me = Uid::effective();
        if account.uid != me && !me.is_root() {
            return Err(PolicyConfigError::new(format!(
                "{at}: running programs as '{user}' needs the server to run as root (it runs as uid {me})"
            )));
        }
        let groups = std::ffi::CString::new(account.name.clone())
            .ok()
            .and_then(|name| nix::unistd::getgrouplist(&name, account.gid).ok())
            .unwrap_or_else(|| vec![account.gid]);
        Ok(IdentityUser {
            name: account.name,
            uid: account.uid.as_raw(),
            gid: account.gid.as_raw(),
            groups: groups.into_iter().map(Gid::as_raw).collect(),
            home: account.dir,
            shell: account.shell,
        })
    }

    /// How a child drops to this user (with `no_new_privs`).
    pub fn run_as(&self) -> RunAs {
        RunAs {
            uid: Uid::from_raw(self.uid),
            gid: Gid::from_raw(self.gid),
            groups: self.groups.iter().copied().map(Gid::from_raw).collect(),
            no_new_privs: true,
        }
    }

    /// Whether `asked` (a name or a uid, as a request names a user) is this user.
    pub fn is(&self, asked: &str) -> bool {
        asked == self.name || asked.parse::<u32>().is_ok_and(|uid| uid == self.uid)
    }

    /// Whether this is the daemon's own user (nothing to drop to).
    pub fn is_daemons(&self) -> bool {
        self.uid == Uid::effective().as_raw()
    }

    /// Points `HOME`, `USER` and `LOGNAME` of a child's environment at this user.
    pub fn login_env(&self, env: &mut BTreeMap<String, String>) {
        env.insert("HOME".into(), self.home.display().to_string());
        env.insert("USER".into(), self.name.clone());
        env.insert("LOGNAME".into(), self.name.clone());
    }

    /// Gives `path` (a directory the daemon just created for this user's
    /// programs) to this user, so they can work in it. Blocking.
    ///
    /// # Errors
    /// The kernel's refusal.
    pub fn take(&self, path: &Path) -> std::io::Result<()> {
        std::os::unix::fs::chown(path, Some(self.uid), Some(self.gid))
    }
}

/// [`IdentityUser::take`] of `path` when `user` is set; nothing otherwise.
///
/// # Errors
/// The kernel's refusal.
pub fn give(user: Option<&IdentityUser>, path: &Path) -> std::io::Result<()> {
    user.map_or(Ok(()), |u| u.take(path))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn users_are_found_by_name_or_uid_and_unknown_ones_refused() {
        let me = User::from_uid(Uid::effective()).expect("lookup").expect("me");
        let by_name = IdentityUser::resolve(&me.name, "policy.auth.tokens[0].user").expect("me");
        let by_uid = IdentityUser::resolve(&me.uid.to_string(), "x").expect("me");
        assert_eq!(by_name, by_uid);
        assert!(by_name.is(&me.name) && by_name.is(&me.uid.to_string()) && !by_name.is("someone-else"));
        assert!(by_name.is_daemons());
        assert!(by_name.run_as().no_new_privs);
        assert_eq!(
            IdentityUser::resolve("no-such-user-q7", "policy.auth.tokens[0].user").map(|_| ()),
            Err(PolicyConfigError::new("policy.auth.tokens[0].user: unknown user 'no-such-user-q7'"))
        );
    }
}
