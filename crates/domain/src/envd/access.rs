//! As which user an envd request acts: the account a name or uid stands
//! for ([`crate::accounts`], refused in envd's terms), the login
//! environment envd gives it, and the user an `Authorization: Basic`
//! header names.
//!
//! Who may call at all (the server's tokens, the access token `POST /init`
//! sets, signed `/files` URLs) is the policy engine's business
//! ([`crate::policy::signed`]), decided by the pipeline like on every port.

use std::collections::BTreeMap;

use nix::unistd::Uid;

use super::EnvdError;
use crate::accounts::{self, Account, LookupError};

/// `PATH` of a started process whose environment has none (Debian's login default for root and users alike).
pub const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Looks `name` up (a name or a uid). Blocking (the user database).
///
/// # Errors
/// [`EnvdError::Unauthenticated`] for an unknown user (as envd);
/// [`EnvdError::PermissionDenied`] for another user while the server is not root.
pub fn account(name: &str) -> Result<Account, EnvdError> {
    accounts::lookup(name).map_err(|e| match e {
        LookupError::Unknown(_) => EnvdError::Unauthenticated(format!("invalid username: '{name}'")),
        LookupError::NotRoot { .. } => {
            EnvdError::PermissionDenied(format!("cannot act as user '{name}': the server does not run as root"))
        }
    })
}

/// The server's own account. Blocking (the user database).
///
/// # Errors
/// [`EnvdError::Unauthenticated`] when the server's uid has no account.
pub fn own() -> Result<Account, EnvdError> {
    account(&Uid::effective().as_raw().to_string())
}

/// Sets `HOME`, `USER`, `LOGNAME` ([`Account::login_env`]) and, as envd
/// does, `SHELL` in `env` to the account's, and `PATH` when there is none;
/// what `given` (the request's own variables) sets is kept.
pub fn login_env(account: &Account, env: &mut BTreeMap<String, String>, given: &BTreeMap<String, String>) {
    let mut login = BTreeMap::new();
    account.login_env(&mut login);
    let shell =
        if account.shell.as_os_str().is_empty() { "/bin/sh".into() } else { account.shell.display().to_string() };
    login.insert("SHELL".to_string(), shell);
    env.extend(login.into_iter().filter(|(name, _)| !given.contains_key(name)));
    env.entry("PATH".to_string()).or_insert_with(|| DEFAULT_PATH.to_string());
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
        let me = nix::unistd::User::from_uid(Uid::effective()).expect("lookup").expect("me");
        assert_eq!(account(&me.name).expect("me").uid, me.uid.as_raw());
        assert_eq!(own().expect("own").name, me.name);
    }

    #[test]
    fn a_login_environment_names_the_account_and_keeps_what_the_request_set() {
        let me = own().expect("own");
        let account = Account { name: "u".into(), home: "/home/u".into(), shell: "/bin/bash".into(), ..me };
        let mut env = BTreeMap::from([("USER".to_string(), String::new())]);
        let given = BTreeMap::from([("SHELL".to_string(), "/bin/zsh".to_string())]);
        env.insert("SHELL".into(), "/bin/zsh".into());
        login_env(&account, &mut env, &given);
        assert_eq!(env["USER"], "u");
        assert_eq!(env["HOME"], "/home/u");
        assert_eq!(env["LOGNAME"], "u");
        assert_eq!(env["SHELL"], "/bin/zsh", "the request's own value stays");
        assert_eq!(env["PATH"], DEFAULT_PATH);
    }
}
