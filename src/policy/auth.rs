//! Authentication: presented credentials to an [`Identity`].
//!
//! Tokens are kept only as SHA-256 digests and compared in constant time.
//! Credentials arrive as `Authorization: Bearer <token>` or `X-Access-Token`.

use std::collections::BTreeSet;

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use super::{Denial, Identity};

/// A token identity: who a token is and what it may do.
#[derive(Clone)]
pub struct TokenIdentity {
    /// Identity id reported in discovery and audit lines.
    pub id: String,
    /// Scopes the identity holds.
    pub scopes: BTreeSet<String>,
    digest: [u8; 32],
}

impl TokenIdentity {
    /// An identity whose token is `token` (only its digest is kept).
    pub fn from_token(id: impl Into<String>, scopes: BTreeSet<String>, token: &str) -> Self {
        TokenIdentity { id: id.into(), scopes, digest: sha256(token.as_bytes()) }
    }

    /// An identity whose token has the given SHA-256 digest.
    pub fn from_digest(id: impl Into<String>, scopes: BTreeSet<String>, digest: [u8; 32]) -> Self {
        TokenIdentity { id: id.into(), scopes, digest }
    }
}

impl std::fmt::Debug for TokenIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenIdentity").field("id", &self.id).field("scopes", &self.scopes).finish_non_exhaustive()
    }
}

/// The credential headers of one request.
#[derive(Debug, Default)]
pub struct Credentials<'a> {
    /// Every `Authorization` header value.
    pub authorization: Vec<&'a str>,
    /// Every `X-Access-Token` header value.
    pub access_tokens: Vec<&'a str>,
}

/// Turns credentials into identities.
#[derive(Debug, Clone)]
pub struct Authenticator {
    tokens: Vec<TokenIdentity>,
    anonymous: Option<Identity>,
}

impl Authenticator {
    /// Builds an authenticator. Without tokens, every caller is anonymous;
    /// with tokens, anonymous callers are admitted only when `allow_anonymous`.
    pub fn new(tokens: Vec<TokenIdentity>, allow_anonymous: bool, anonymous_scopes: Option<BTreeSet<String>>) -> Self {
        let anonymous = (tokens.is_empty() || allow_anonymous).then(|| Identity {
            id: "anonymous".into(),
            scopes: anonymous_scopes.unwrap_or_else(|| BTreeSet::from(["*".to_string()])),
        });
        Authenticator { tokens, anonymous }
    }

    /// Whether any token identity is configured.
    pub fn has_tokens(&self) -> bool {
        !self.tokens.is_empty()
    }

    /// The token identities (for lint and discovery).
    pub fn tokens(&self) -> &[TokenIdentity] {
        &self.tokens
    }

    /// The anonymous identity, when anonymous callers are admitted.
    pub fn anonymous(&self) -> Option<&Identity> {
        self.anonymous.as_ref()
    }

    /// The caller's identity.
    ///
    /// # Errors
    /// [`Denial::AmbiguousCredentials`] for several distinct `X-Access-Token`
    /// values, [`Denial::Unauthorized`] when no credential matches and
    /// anonymous callers are not admitted.
    pub fn authenticate(&self, credentials: &Credentials<'_>) -> Result<Identity, Denial> {
        let access = &credentials.access_tokens;
        if access.iter().any(|v| *v != access[0]) {
            return Err(Denial::AmbiguousCredentials);
        }
        let bearers = credentials.authorization.iter().filter_map(|value| {
            let (scheme, rest) = value.split_once(' ')?;
            let token = rest.trim();
            (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
        });
        let mut presented = bearers.chain(access.iter().copied().filter(|v| !v.is_empty())).peekable();
        if presented.peek().is_none() {
            return self.anonymous.clone().ok_or(Denial::Unauthorized);
        }
        for candidate in presented {
            if let Some(identity) = self.match_token(candidate) {
                return Ok(identity);
            }
        }
        // Without server tokens a presented value is not a login attempt: gateways
        // forward their own `X-Access-Token`, which this process does not own.
        match (&self.anonymous, self.tokens.is_empty()) {
            (Some(anonymous), true) => Ok(anonymous.clone()),
            _ => Err(Denial::Unauthorized),
        }
    }

    fn match_token(&self, presented: &str) -> Option<Identity> {
        let digest = sha256(presented.as_bytes());
        let mut found = None;
        // Compare against every entry so timing does not reveal which one matched.
        for entry in &self.tokens {
            if bool::from(digest.ct_eq(&entry.digest)) && found.is_none() {
                found = Some(Identity { id: entry.id.clone(), scopes: entry.scopes.clone() });
            }
        }
        found
    }
}

/// SHA-256 of `bytes`.
pub fn sha256(bytes: &[u8]) -> [u8; 32] {
    Sha256::digest(bytes).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server(token: &str) -> Authenticator {
        let all = BTreeSet::from(["*".to_string()]);
        Authenticator::new(vec![TokenIdentity::from_token("server", all, token)], false, None)
    }

    fn creds<'a>(authorization: &[&'a str], access: &[&'a str]) -> Credentials<'a> {
        Credentials { authorization: authorization.to_vec(), access_tokens: access.to_vec() }
    }

    #[test]
    fn bearer_and_access_token_both_authenticate() {
        let auth = server("s3cret");
        assert_eq!(auth.authenticate(&creds(&["Bearer s3cret"], &[])).map(|i| i.id), Ok("server".into()));
        assert_eq!(auth.authenticate(&creds(&["bearer  s3cret "], &[])).map(|i| i.id), Ok("server".into()));
        assert_eq!(auth.authenticate(&creds(&[], &["s3cret"])).map(|i| i.id), Ok("server".into()));
    }

    #[test]
    fn wrong_or_missing_token_is_unauthorized() {
        let auth = server("s3cret");
        assert_eq!(auth.authenticate(&creds(&["Bearer nope"], &[])), Err(Denial::Unauthorized));
        assert_eq!(auth.authenticate(&creds(&["Basic s3cret"], &[])), Err(Denial::Unauthorized));
        assert_eq!(auth.authenticate(&creds(&[], &[])), Err(Denial::Unauthorized));
    }

    #[test]
    fn distinct_access_tokens_are_ambiguous() {
        let auth = server("s3cret");
        assert_eq!(auth.authenticate(&creds(&[], &["a", "b"])), Err(Denial::AmbiguousCredentials));
        assert!(auth.authenticate(&creds(&[], &["s3cret", "s3cret"])).is_ok());
    }

    #[test]
    fn no_tokens_means_anonymous_with_every_scope() {
        let auth = Authenticator::new(vec![], false, None);
        let id = auth.authenticate(&creds(&["Bearer whatever"], &[])).expect("anonymous");
        assert_eq!(id.id, "anonymous");
        assert!(id.can("process:run"));
    }

    #[test]
    fn anonymous_alongside_tokens_only_when_allowed() {
        let all = BTreeSet::from(["*".to_string()]);
        let read = BTreeSet::from(["files:read".to_string()]);
        let auth = Authenticator::new(vec![TokenIdentity::from_token("ci", all, "t")], true, Some(read));
        let id = auth.authenticate(&creds(&[], &[])).expect("anonymous");
        assert!(id.can("files:read") && !id.can("files:write"));
        assert_eq!(auth.authenticate(&creds(&["Bearer wrong"], &[])), Err(Denial::Unauthorized));
    }
}
