//! The environment child processes start with: the server's own environment
//! minus its secrets, plus the variables set through `POST /env`.
//!
//! This is the store; the rules about names (which are secret, settable,
//! hidden, protected or dangerous) are all in [`crate::policy::guards::env`].
//!
//! The server never changes its own process environment (`setenv` is not
//! safe while other threads read it); variables set at run time live here
//! and every spawn (processes, terminals, code contexts, commands) asks this
//! store for the child's environment.

use std::collections::BTreeMap;
use std::sync::{PoisonError, RwLock};

use crate::policy::guards::env::SECRET_VARS;

/// The child environment: the server's own at start, minus secrets, plus overrides.
#[derive(Debug)]
pub struct ChildEnv {
    base: BTreeMap<String, String>,
    overrides: RwLock<BTreeMap<String, String>>,
    secrets: Vec<String>,
}

impl ChildEnv {
    /// Captures the server's environment now; `extra_secrets` (for example
    /// policy `token_env` names) are removed along with [`SECRET_VARS`] and
    /// every `ABX_SERVER_*` variable.
    pub fn capture(extra_secrets: &[String]) -> Self {
        Self::from_vars(std::env::vars(), extra_secrets)
    }

    /// A store over the given variables (for tests).
    pub fn from_vars(vars: impl IntoIterator<Item = (String, String)>, extra_secrets: &[String]) -> Self {
        let secrets: Vec<String> =
            SECRET_VARS.iter().map(|s| s.to_string()).chain(extra_secrets.iter().cloned()).collect();
        let mut env = ChildEnv { base: BTreeMap::new(), overrides: RwLock::new(BTreeMap::new()), secrets };
        env.base = vars.into_iter().filter(|(k, _)| !env.is_secret(k)).collect();
        env
    }

    /// Whether `name` must never be shown, set, or passed to a child.
    pub fn is_secret(&self, name: &str) -> bool {
        self.secrets.iter().any(|s| s == name) || name.to_ascii_uppercase().starts_with("ABX_SERVER_")
    }

    /// The environment a new child starts with.
    pub fn snapshot(&self) -> BTreeMap<String, String> {
        let mut env = self.base.clone();
        let overrides = self.overrides.read().unwrap_or_else(PoisonError::into_inner);
        env.extend(overrides.iter().map(|(k, v)| (k.clone(), v.clone())));
        env
    }

    /// One variable as a new child would see it.
    pub fn get(&self, name: &str) -> Option<String> {
        let overrides = self.overrides.read().unwrap_or_else(PoisonError::into_inner);
        overrides.get(name).or_else(|| self.base.get(name)).cloned()
    }

    /// Sets variables for children started from now on. Secrets are the
    /// caller's to refuse first; they are never stored here.
    pub fn set(&self, vars: impl IntoIterator<Item = (String, String)>) {
        let mut overrides = self.overrides.write().unwrap_or_else(PoisonError::into_inner);
        for (k, v) in vars {
            if !self.is_secret(&k) {
                overrides.insert(k, v);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn secrets_never_reach_children() {
        let env = ChildEnv::from_vars(
            vars(&[("HOME", "/home/user"), ("ABX_SERVER_TOKEN", "t"), ("ABX_SERVER_X", "y"), ("MY_TOKEN", "z")]),
            &["MY_TOKEN".into()],
        );
        let snapshot = env.snapshot();
        assert_eq!(snapshot.get("HOME").map(String::as_str), Some("/home/user"));
        assert!(!snapshot.contains_key("ABX_SERVER_TOKEN"));
        assert!(!snapshot.contains_key("ABX_SERVER_X"));
        assert!(!snapshot.contains_key("MY_TOKEN"));
    }

    #[test]
    fn overrides_apply_to_later_children_but_never_secrets() {
        let env = ChildEnv::from_vars(vars(&[("A", "1")]), &[]);
        env.set(vars(&[("A", "2"), ("B", "3"), ("ABX_SERVER_TOKEN", "stolen")]));
        assert_eq!(env.get("A").as_deref(), Some("2"));
        assert_eq!(env.snapshot().get("B").map(String::as_str), Some("3"));
        assert_eq!(env.get("ABX_SERVER_TOKEN"), None);
    }
}
