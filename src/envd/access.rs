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
}

impl Account {
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
    let account = Account { name: user.name, uid: user.uid.as_raw(), gid: user.gid.as_raw(), home: user.dir };
    if account.is_other() && !Uid::effective().is_root() {
        return Err(EnvdError::PermissionDenied(format!(
            "cannot act as user '{name}': the server does not run as root"
        )));
    }
    Ok(account)
}

/// The user name of an `Authorization: Basic` value (`user:` base64), if it is one.
pub fn basic_user(authorization: &str) -> Option<String> {
    let (scheme, rest) = authorization.trim().split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let decoded = crate::api::envd::decode_base64(rest.trim())?;
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
    }
}
