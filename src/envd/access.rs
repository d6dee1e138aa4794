//! As which user an envd request acts: the account a name or uid stands
//! for, and the user an `Authorization: Basic` header names.
//!
//! Who may call at all (the server's tokens, the access token `POST /init`
//! sets, signed `/files` URLs) is the policy engine's business
//! ([`crate::policy::signed`]), decided by the pipeline like on every port.

use nix::unistd::{Uid, User};

use super::EnvdError;

/// A user account requests act as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Account {
    /// User name.
    pub name: String,
    /// User id.
    pub uid: u32,
    /// Primary group id.
    pub gid: u32,
    /// Home directory.
    pub home: std::path::PathBuf,
    /// Login shell.
    pub shell: std::path::PathBuf,
}

/// `PATH` of a started process whose environment has none (Debian's login default for root and users alike).
pub const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

impl Account {
    /// The account of the user a policy identity's programs run as.
    pub fn of_identity(user: &crate::policy::IdentityUser) -> Self {
        Account {
            name: user.name.clone(),
            uid: user.uid,
            gid: user.gid,
            home: user.home.clone(),
            shell: user.shell.clone(),
        }
    }

    /// Whether acting as this account means acting as another user than the server's.
    pub fn is_other(&self) -> bool {
        self.uid != Uid::effective().as_raw()
    }
}

/// Looks `name` up (a name or a uid). Blocking (the user database).
///
/// # Errors
/// [`EnvdError::Unauthenticated`] for an unknown user (as envd);
/// [`EnvdError::PermissionDenied`] for another user while the server is not root.
pub fn account(name: &str) -> Result<Account, EnvdError> {
    let found = match name.parse::<u32>() {
        Ok(uid) => User::from_uid(Uid::from_raw(uid)),
        Err(_) => User::from_name(name),
    };
    let user = found.ok().flatten().ok_or_else(|| EnvdError::Unauthenticated(format!("invalid username: '{name}'")))?;
    let account =
        Account { name: user.name, uid: user.uid.as_raw(), gid: user.gid.as_raw(), home: user.dir, shell: user.shell };
    if account.is_other() && !Uid::effective().is_root() {
        return Err(EnvdError::PermissionDenied(format!(
            "cannot act as user '{name}': the server does not run as root"
        )));
    }
    Ok(account)
}

/// The server's own account. Blocking (the user database).
///
/// # Errors
/// [`EnvdError::Unauthenticated`] when the server's uid has no account.
pub fn own() -> Result<Account, EnvdError> {
    account(&Uid::effective().as_raw().to_string())
}

impl Account {
    /// Sets `HOME`, `USER`, `LOGNAME` and `SHELL` in `env` to this account's, as
    /// a login would, and `PATH` when there is none; what `given` (the
    /// request's own variables) sets is kept.
    pub fn login_env(
        &self,
        env: &mut std::collections::BTreeMap<String, String>,
        given: &std::collections::BTreeMap<String, String>,
    ) {
        let shell = if self.shell.as_os_str().is_empty() { "/bin/sh".into() } else { self.shell.display().to_string() };
        for (name, value) in [
            ("HOME", self.home.display().to_string()),
            ("USER", self.name.clone()),
            ("LOGNAME", self.name.clone()),
            ("SHELL", shell),
        ] {
            if !given.contains_key(name) {
                env.insert(name.to_string(), value);
            }
        }
        env.entry("PATH".to_string()).or_insert_with(|| DEFAULT_PATH.to_string());
    }

    /// Whether this account may enter the directory `dir` (search permission
    /// on it and every directory above it, from the mode bits, as the kernel
    /// decides for a process of this user; root may enter everything).
    /// Blocking.
    pub fn may_enter(&self, dir: &std::path::Path) -> bool {
        use std::os::unix::fs::MetadataExt;
        if self.uid == 0 {
            return true;
        }
        let groups: Vec<u32> = std::ffi::CString::new(self.name.clone())
            .ok()
            .and_then(|name| nix::unistd::getgrouplist(&name, nix::unistd::Gid::from_raw(self.gid)).ok())
            .map_or_else(|| vec![self.gid], |g| g.into_iter().map(|g| g.as_raw()).collect());
        dir.ancestors().all(|step| {
            let Ok(meta) = std::fs::metadata(step) else { return false };
            let mode = meta.mode();
            let bit = if meta.uid() == self.uid {
                0o100
            } else if groups.contains(&meta.gid()) {
                0o010
            } else {
                0o001
            };
            mode & bit != 0
        })
    }
}

/// The user name of an `Authorization: Basic` value (`user:` base64), if it is one.
pub fn basic_user(authorization: &str) -> Option<String> {
    let (scheme, rest) = authorization.trim().split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let decoded = abx_wire::api::envd::decode_base64(rest.trim())?;
    let text = String::from_utf8(decoded).ok()?;
    let user = text.split_once(':').map_or(text.as_str(), |(user, _)| user);
    (!user.is_empty()).then(|| user.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn basic_authorization_names_a_user() {
        assert_eq!(basic_user("Basic dXNlcjo="), Some("user".into()));
        assert_eq!(basic_user("basic cm9vdDpwdw"), Some("root".into()));
        assert_eq!(basic_user("Bearer dXNlcjo="), None);
        assert_eq!(basic_user("Basic Og=="), None);
        assert!(matches!(account("no-such-user-xyz"), Err(EnvdError::Unauthenticated(_))));
        let me = User::from_uid(Uid::effective()).expect("lookup").expect("me");
        assert_eq!(account(&me.name).expect("me").uid, me.uid.as_raw());
        assert_eq!(own().expect("own").name, me.name);
    }

    #[test]
    fn a_login_environment_names_the_account_and_keeps_what_the_request_set() {
        let account =
            Account { name: "u".into(), uid: 4242, gid: 4242, home: "/home/u".into(), shell: "/bin/bash".into() };
        let mut env = std::collections::BTreeMap::from([("USER".to_string(), String::new())]);
        let given = std::collections::BTreeMap::from([("SHELL".to_string(), "/bin/zsh".to_string())]);
        env.insert("SHELL".into(), "/bin/zsh".into());
        account.login_env(&mut env, &given);
        assert_eq!(env["USER"], "u");
        assert_eq!(env["HOME"], "/home/u");
        assert_eq!(env["LOGNAME"], "u");
        assert_eq!(env["SHELL"], "/bin/zsh", "the request's own value stays");
        assert_eq!(env["PATH"], DEFAULT_PATH);
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
        let stranger = Account { uid: 4242, gid: 4242, name: "nobody-4242".into(), ..me.clone() };
        assert!(stranger.may_enter(dir.path()));
        assert!(!stranger.may_enter(&closed.join("inner")), "the closed parent stops it");
        assert!(me.uid != 0 || me.may_enter(&closed.join("inner")), "root enters everything");
        assert!(!stranger.may_enter(&dir.path().join("missing")));
    }
}
