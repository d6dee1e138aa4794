//! Identities (who is calling) and scope matching.

use std::collections::BTreeSet;
use std::sync::Arc;

use crate::accounts::Account;

/// The implicit scope every identity holds: it may always discover.
pub const IMPLICIT_SCOPE: &str = "core:read";

/// An authenticated caller and the scopes it holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// Identity id (`server`, `anonymous`, or a policy token's id).
    pub id: String,
    /// Scopes held (`*`, `files:*`, `files:read`, ...).
    pub scopes: BTreeSet<String>,
    /// The user its programs run as (`auth.tokens[].user`); `None`: the daemon's.
    pub user: Option<Arc<Account>>,
}

impl Identity {
    /// Builds an identity from an id and its scopes.
    pub fn new<I, S>(id: impl Into<String>, scopes: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Identity { id: id.into(), scopes: scopes.into_iter().map(Into::into).collect(), user: None }
    }

    /// The caller of `/health`, which needs no credentials.
    pub fn unauthenticated() -> Self {
        Identity::new("anonymous", Vec::<String>::new())
    }

    /// Whether the identity holds `scope` (`core:read` is implicit).
    pub fn can(&self, scope: &str) -> bool {
        scope == IMPLICIT_SCOPE || scope_granted(&self.scopes, scope)
    }

    /// The first of `scopes` this identity lacks, if any.
    pub fn missing<'a>(&self, scopes: &'a [String]) -> Option<&'a str> {
        scopes.iter().find(|s| !self.can(s)).map(String::as_str)
    }
}

/// Whether `required` is covered by `granted`: exactly, by `*`, or by `namespace:*`.
pub fn scope_granted(granted: &BTreeSet<String>, required: &str) -> bool {
    if granted.contains("*") || granted.contains(required) {
        return true;
    }
    let namespace = required.split(':').next().unwrap_or(required);
    granted.iter().any(|g| g.strip_suffix(":*") == Some(namespace))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wildcards_and_namespaces() {
        let id = Identity::new("t", ["files:*", "process:run"]);
        assert!(id.can("files:read"));
        assert!(id.can("files:delete"));
        assert!(id.can("process:run"));
        assert!(!id.can("process:manage"));
        assert!(!id.can("system:read"));
        assert!(id.can("core:read"), "core:read is implicit");
        assert!(Identity::new("all", ["*"]).can("anything:at_all"));
    }

    #[test]
    fn a_namespace_wildcard_does_not_cover_a_prefix_namespace() {
        let id = Identity::new("t", ["file:*"]);
        assert!(!id.can("files:read"));
    }

    #[test]
    fn missing_names_the_first_absent_scope() {
        let id = Identity::new("t", ["files:write"]);
        let needed = vec!["files:write".to_string(), "files:delete".to_string()];
        assert_eq!(id.missing(&needed), Some("files:delete"));
    }
}
