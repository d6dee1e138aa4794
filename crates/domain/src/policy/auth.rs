//! Authentication: presented credentials to an [`Identity`].
//!
//! Tokens are kept only as SHA-256 digests and compared in constant time.
//! Credentials arrive as `Authorization: Bearer <token>` or `X-Access-Token`.
//! The `auth` section of a policy (token identities, anonymous access) is
//! parsed here too.

use std::collections::BTreeSet;
use std::sync::Arc;

use serde_json::{Map, Value};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use super::schema::{self, check_keys, repr};
use super::{Denial, Identity, PolicyConfigError};

fn err<T>(message: impl Into<String>) -> Result<T, PolicyConfigError> {
    Err(PolicyConfigError::new(message))
}

/// A token identity: who a token is and what it may do.
///
/// The identity is shared: authenticating a request hands out a reference
/// to it rather than a copy of its scopes.
#[derive(Clone)]
pub struct TokenIdentity {
    identity: Arc<Identity>,
    digest: [u8; 32],
    /// The token itself, when it is known (read from the environment): it
    /// signs envd `/files` URLs. A policy's `token_sha256` identity has none.
    plain: Option<Arc<str>>,
}

impl TokenIdentity {
    /// An identity whose token is `token`; it can sign URLs.
    pub fn from_token(id: impl Into<String>, scopes: BTreeSet<String>, token: &str) -> Self {
        let mut entry = TokenIdentity::from_digest(id, scopes, sha256(token.as_bytes()));
        entry.plain = Some(Arc::from(token));
        entry
    }

    /// An identity whose token has the given SHA-256 digest (it cannot sign URLs).
    pub fn from_digest(id: impl Into<String>, scopes: BTreeSet<String>, digest: [u8; 32]) -> Self {
        TokenIdentity { identity: Arc::new(Identity { id: id.into(), scopes, user: None }), digest, plain: None }
    }

    /// The same identity, its programs running as `user`.
    pub fn with_user(mut self, user: Option<Arc<crate::accounts::Account>>) -> Self {
        let identity = Identity { user, ..Identity::clone(&self.identity) };
        self.identity = Arc::new(identity);
        self
    }

    /// Who the token is.
    pub fn identity(&self) -> &Identity {
        &self.identity
    }

    /// The shared identity.
    pub fn shared(&self) -> &Arc<Identity> {
        &self.identity
    }

    /// The token, when known (the key of the URLs it signs).
    pub fn plain(&self) -> Option<&str> {
        self.plain.as_deref()
    }

    /// Whether `presented` is this token (constant time).
    pub fn matches(&self, presented: &str) -> bool {
        bool::from(sha256(presented.as_bytes()).ct_eq(&self.digest))
    }
}

impl std::fmt::Debug for TokenIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenIdentity").field("identity", &self.identity).finish_non_exhaustive()
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

impl<'a> Credentials<'a> {
    /// The bearer tokens of the `Authorization` values.
    pub fn bearers(&self) -> impl Iterator<Item = &'a str> + '_ {
        self.authorization.iter().filter_map(|value| {
            let (scheme, rest) = value.split_once(' ')?;
            let token = rest.trim();
            (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
        })
    }

    /// The tokens presented, each at most once: the bearer token, then the access token.
    ///
    /// # Errors
    /// [`Denial::AmbiguousCredentials`] for several distinct bearer tokens or
    /// several distinct `X-Access-Token` values (one of each is fine: a
    /// gateway's `X-Access-Token` travels beside the caller's bearer token).
    pub fn presented(&self) -> Result<Presented<'a>, Denial> {
        let bearer = one(self.bearers())?;
        let access = one(self.access_tokens.iter().copied())?.filter(|a| Some(*a) != bearer);
        Ok(Presented([bearer, access]))
    }
}

/// The one value of `values`, if any; several distinct ones are ambiguous.
fn one<'a>(mut values: impl Iterator<Item = &'a str>) -> Result<Option<&'a str>, Denial> {
    let first = values.next();
    if values.any(|v| Some(v) != first) {
        return Err(Denial::AmbiguousCredentials);
    }
    Ok(first.filter(|v| !v.is_empty()))
}

/// At most two tokens a request presents (a bearer token, an access token), without allocating.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Presented<'a>([Option<&'a str>; 2]);

impl<'a> Presented<'a> {
    /// The tokens, in order.
    pub fn iter(&self) -> impl Iterator<Item = &'a str> + '_ {
        self.0.iter().flatten().copied()
    }

    /// Whether none was presented.
    pub fn is_empty(&self) -> bool {
        self.0.iter().all(Option::is_none)
    }
}

/// Turns credentials into identities.
#[derive(Debug, Clone)]
pub struct Authenticator {
    tokens: Vec<TokenIdentity>,
    anonymous: Option<Arc<Identity>>,
}

impl Authenticator {
    /// Builds an authenticator. Without tokens, every caller is anonymous;
    /// with tokens, anonymous callers are admitted only when `allow_anonymous`.
    pub fn new(tokens: Vec<TokenIdentity>, allow_anonymous: bool, anonymous_scopes: Option<BTreeSet<String>>) -> Self {
        let anonymous = (tokens.is_empty() || allow_anonymous).then(|| {
            Arc::new(Identity {
                user: None,
                id: "anonymous".into(),
                scopes: anonymous_scopes.unwrap_or_else(|| BTreeSet::from(["*".to_string()])),
            })
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
        self.anonymous.as_deref()
    }

    /// The caller's identity.
    ///
    /// # Errors
    /// [`Denial::AmbiguousCredentials`] for several distinct `X-Access-Token`
    /// values, [`Denial::Unauthorized`] when no credential matches and
    /// anonymous callers are not admitted.
    pub fn authenticate(&self, credentials: &Credentials<'_>) -> Result<Arc<Identity>, Denial> {
        self.authenticate_presented(credentials.presented()?)
    }

    /// [`Authenticator::authenticate`] of tokens already read.
    ///
    /// # Errors
    /// As [`Authenticator::authenticate`].
    pub fn authenticate_presented(&self, presented: Presented<'_>) -> Result<Arc<Identity>, Denial> {
        if presented.is_empty() {
            return self.anonymous.clone().ok_or(Denial::Unauthorized);
        }
        for candidate in presented.iter() {
            if let Some(identity) = self.match_token(candidate) {
                return Ok(identity);
            }
        }
        // Without server tokens a presented value is not a login attempt: gateways
        // forward their own `X-Access-Token`, which this process does not own.
        match (&self.anonymous, self.tokens.is_empty()) {
            (Some(anonymous), true) => Ok(Arc::clone(anonymous)),
            _ => Err(Denial::Unauthorized),
        }
    }

    fn match_token(&self, presented: &str) -> Option<Arc<Identity>> {
        let digest = sha256(presented.as_bytes());
        let mut found = None;
        // Compare against every entry so timing does not reveal which one matched.
        for entry in &self.tokens {
            if bool::from(digest.ct_eq(&entry.digest)) && found.is_none() {
                found = Some(Arc::clone(&entry.identity));
            }
        }
        found
    }
}

/// SHA-256 of `bytes`.
pub fn sha256(bytes: &[u8]) -> [u8; 32] {
    Sha256::digest(bytes).into()
}

const AUTH_KEYS: [&str; 3] = ["tokens", "allow_anonymous", "anonymous_scopes"];
const TOKEN_KEYS: [&str; 5] = ["id", "scopes", "token_env", "token_sha256", "user"];

/// How a policy token's secret is given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenSecret {
    /// Read from this environment variable at start.
    Env(String),
    /// The SHA-256 digest of the token.
    Sha256([u8; 32]),
}

/// One `auth.tokens` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenSpec {
    /// Identity id.
    pub id: String,
    /// Scopes granted.
    pub scopes: BTreeSet<String>,
    /// Where the token comes from.
    pub secret: TokenSecret,
    /// The user its programs run as (a name or a uid, as written); `None`: the daemon's.
    pub user: Option<String>,
}

/// The `auth` section.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AuthSpec {
    /// Token identities.
    pub tokens: Vec<TokenSpec>,
    /// Admit callers without a token alongside token identities.
    pub allow_anonymous: bool,
    /// Scopes of anonymous callers (default `*`).
    pub anonymous_scopes: Option<BTreeSet<String>>,
}

/// The `auth` section of a policy, validated, and its normalised JSON.
///
/// # Errors
/// The first mistake, with its JSON path.
pub(super) fn parse_auth(raw: &Value) -> Result<(AuthSpec, Value), PolicyConfigError> {
    let map = check_keys(raw, &AUTH_KEYS, "policy.auth")?;
    let mut auth = AuthSpec::default();
    let mut out = Map::new();
    if let Some(v) = map.get("allow_anonymous") {
        auth.allow_anonymous = v.as_bool().ok_or_else(|| {
            PolicyConfigError::new(format!("policy.auth.allow_anonymous: expected true/false, got {}", repr(v)))
        })?;
        out.insert("allow_anonymous".into(), v.clone());
    }
    if let Some(v) = map.get("anonymous_scopes") {
        let scopes = schema::scopes(v, "policy.auth.anonymous_scopes")?;
        out.insert("anonymous_scopes".into(), Value::from(scopes.clone()));
        auth.anonymous_scopes = Some(scopes.into_iter().collect());
    }
    if let Some(v) = map.get("tokens") {
        let Some(entries) = v.as_array() else {
            return err("policy.auth.tokens: expected a list");
        };
        let mut normalised = Vec::new();
        for (index, entry) in entries.iter().enumerate() {
            let (token, json) = parse_token(entry, &format!("policy.auth.tokens[{index}]"))?;
            if auth.tokens.iter().any(|t| t.id == token.id) {
                return err(format!("policy.auth.tokens[{index}].id: duplicate identity '{}'", token.id));
            }
            auth.tokens.push(token);
            normalised.push(json);
        }
        out.insert("tokens".into(), Value::Array(normalised));
    }
    Ok((auth, Value::Object(out)))
}

fn parse_token(raw: &Value, at: &str) -> Result<(TokenSpec, Value), PolicyConfigError> {
    let map = check_keys(raw, &TOKEN_KEYS, at)?;
    let id = match map.get("id").and_then(Value::as_str) {
        Some(id) if !id.is_empty() => id.to_string(),
        _ => return err(format!("{at}.id: expected a non-empty string")),
    };
    let (env, digest) = (map.get("token_env"), map.get("token_sha256"));
    if env.is_some() == digest.is_some() {
        return err(format!(
            "{at}: exactly one of 'token_env' or 'token_sha256' is required (plain tokens are never accepted inline)"
        ));
    }
    let scopes = schema::scopes(
        map.get("scopes").ok_or_else(|| PolicyConfigError::new(format!("{at}.scopes: required")))?,
        &format!("{at}.scopes"),
    )?;
    let mut out = Map::new();
    out.insert("id".into(), Value::from(id.clone()));
    out.insert("scopes".into(), Value::from(scopes.clone()));
    let secret = match (env, digest) {
        (Some(name), _) => match name.as_str() {
            Some(name) if !name.is_empty() => {
                out.insert("token_env".into(), Value::from(name));
                TokenSecret::Env(name.to_string())
            }
            _ => return err(format!("{at}.token_env: expected an env var name")),
        },
        (None, Some(hex)) => {
            let digest = hex
                .as_str()
                .and_then(parse_digest)
                .ok_or_else(|| PolicyConfigError::new(format!("{at}.token_sha256: expected 64 hex characters")))?;
            out.insert("token_sha256".into(), Value::from(hex.as_str().unwrap_or_default().to_ascii_lowercase()));
            TokenSecret::Sha256(digest)
        }
        (None, None) => return err(format!("{at}: exactly one of 'token_env' or 'token_sha256' is required")),
    };
    let user = match map.get("user") {
        None => None,
        Some(Value::String(name)) if !name.is_empty() && !name.contains(['\0', ':', '/']) => Some(name.clone()),
        Some(Value::Number(n)) if n.as_u64().is_some_and(|uid| u32::try_from(uid).is_ok()) => Some(n.to_string()),
        Some(_) => return err(format!("{at}.user: expected a user name or a uid")),
    };
    if let Some(raw) = map.get("user") {
        out.insert("user".into(), raw.clone());
    }
    Ok((TokenSpec { id, scopes: scopes.into_iter().collect(), secret, user }, Value::Object(out)))
}

/// 64 hex digits as 32 bytes.
fn parse_digest(hex: &str) -> Option<[u8; 32]> {
    if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let mut digest = [0u8; 32];
    for (i, byte) in digest.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(digest)
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
        let id = |c| auth.authenticate(&c).map(|i| i.id.clone());
        assert_eq!(id(creds(&["Bearer s3cret"], &[])), Ok("server".into()));
        assert_eq!(id(creds(&["bearer  s3cret "], &[])), Ok("server".into()));
        assert_eq!(id(creds(&[], &["s3cret"])), Ok("server".into()));
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
    fn distinct_bearer_tokens_are_ambiguous_but_one_beside_an_access_token_is_not() {
        let auth = server("s3cret");
        let guesses = creds(&["Bearer a", "Bearer b", "Bearer s3cret"], &[]);
        assert_eq!(auth.authenticate(&guesses), Err(Denial::AmbiguousCredentials));
        assert!(auth.authenticate(&creds(&["Bearer s3cret", "bearer s3cret"], &[])).is_ok());
        assert!(auth.authenticate(&creds(&["Bearer s3cret", "Basic dXNlcjo="], &[])).is_ok());
        assert!(auth.authenticate(&creds(&["Bearer s3cret"], &["gateway-token"])).is_ok());
        assert_eq!(creds(&["Bearer x"], &["x"]).presented().map(|p| p.iter().collect::<Vec<_>>()), Ok(vec!["x"]));
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
