//! The user a policy identity's programs run as (`auth.tokens[].user`).
//!
//! Identities that share one daemon would otherwise share its uid, and one
//! identity's program could read another's environment (`/proc/<pid>/environ`,
//! where an agent CLI holds its vault tokens), files and memory. An identity
//! that names a user gets every program it starts, on every port, run as that
//! user ([`Account::run_as`]): its supplementary groups, its group, its uid,
//! and `no_new_privs` (no capabilities, and no set-user-ID program gives
//! them back). The account is looked up once, when the policy is compiled;
//! an unknown user, or another user while the daemon is not root, is a
//! configuration error.

use super::PolicyConfigError;
use crate::accounts::{lookup, Account, LookupError};

/// Looks `user` (a name or a uid) up, for the identity at `at` (a JSON
/// path, for the error). Blocking (the user database).
///
/// # Errors
/// An unknown user, or another user than the daemon's own while the
/// daemon does not run as root.
pub fn resolve(user: &str, at: &str) -> Result<Account, PolicyConfigError> {
    lookup(user).map_err(|e| {
        PolicyConfigError::new(match e {
            LookupError::Unknown(_) => format!("{at}: unknown user '{user}'"),
            LookupError::NotRoot { server, .. } => {
                format!("{at}: running programs as '{user}' needs the server to run as root (it runs as uid {server})")
            }
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn users_are_found_by_name_or_uid_and_unknown_ones_refused() {
        let me = nix::unistd::User::from_uid(nix::unistd::Uid::effective()).expect("lookup").expect("me");
        let by_name = resolve(&me.name, "policy.auth.tokens[0].user").expect("me");
        let by_uid = resolve(&me.uid.to_string(), "x").expect("me");
        assert_eq!(by_name, by_uid);
        assert!(by_name.is(&me.name) && by_name.is(&me.uid.to_string()) && !by_name.is("someone-else"));
        assert!(!by_name.is_other());
        assert!(by_name.run_as().no_new_privs);
        assert_eq!(
            resolve("no-such-user-q7", "policy.auth.tokens[0].user").map(|_| ()),
            Err(PolicyConfigError::new("policy.auth.tokens[0].user: unknown user 'no-such-user-q7'"))
        );
    }
}
