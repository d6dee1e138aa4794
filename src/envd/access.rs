//! Who may use the envd plane, and as which user.
//!
//! Two tokens can open it: the server's own (`ABX_SERVER_TOKEN`, or the
//! policy's token identities, checked by the policy engine as on every
//! port) and the envd access token that `POST /init` sets, as a platform's
//! orchestrator does for envd. Either one, sent as `X-Access-Token`, is
//! accepted; once either exists, a request without one is refused. With
//! neither, the plane is open, like the API port without a token.
//!
//! `/files` URLs may instead carry a signature: `v1_` and the unpadded
//! base64 SHA-256 of `path:operation:username:token[:expiration]`, the
//! scheme the SDKs' `download_url`/`upload_url` use. Either token signs.

use std::sync::{Arc, PoisonError, RwLock};

use base64::Engine;
use nix::unistd::{Uid, User};
use subtle::ConstantTimeEq;

use super::EnvdError;
use crate::policy::{sha256, Credentials, Denial, Identity, PolicyEngine};

/// The identity of a caller holding the `/init` access token.
pub const INIT_IDENTITY: &str = "envd";

struct Secret {
    plain: String,
    digest: [u8; 32],
}

impl Secret {
    fn new(plain: &str) -> Self {
        Secret { plain: plain.to_string(), digest: sha256(plain.as_bytes()) }
    }

    fn matches(&self, presented: &str) -> bool {
        bool::from(sha256(presented.as_bytes()).ct_eq(&self.digest))
    }
}

/// The tokens of the envd plane.
pub struct Tokens {
    init: RwLock<Option<Secret>>,
    server: Option<Secret>,
}

impl std::fmt::Debug for Tokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokens").field("server", &self.server.is_some()).finish_non_exhaustive()
    }
}

/// A read or a write of a signed `/files` URL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    /// `GET /files`.
    Read,
    /// `POST /files`.
    Write,
}

impl Operation {
    fn as_str(self) -> &'static str {
        match self {
            Operation::Read => "read",
            Operation::Write => "write",
        }
    }
}

/// The signature of a `/files` URL for `path`, `operation` and `username` with `token`.
pub fn signature(path: &str, operation: Operation, username: &str, token: &str, expiration: Option<i64>) -> String {
    let text = match expiration {
        Some(exp) => format!("{path}:{}:{username}:{token}:{exp}", operation.as_str()),
        None => format!("{path}:{}:{username}:{token}", operation.as_str()),
    };
    format!("v1_{}", base64::engine::general_purpose::STANDARD_NO_PAD.encode(sha256(text.as_bytes())))
}

impl Tokens {
    /// The tokens at start: `server` is `ABX_SERVER_TOKEN`, if set.
    pub fn new(server: Option<String>) -> Self {
        Tokens { init: RwLock::new(None), server: server.filter(|t| !t.is_empty()).map(|t| Secret::new(&t)) }
    }

    /// Whether a token protects the plane.
    pub fn required(&self, engine: &PolicyEngine) -> bool {
        self.init_set() || engine.authenticator().has_tokens()
    }

    fn init_set(&self) -> bool {
        self.init.read().unwrap_or_else(PoisonError::into_inner).is_some()
    }

    /// The caller's identity from its `X-Access-Token` (or bearer) headers.
    ///
    /// # Errors
    /// [`Denial::Unauthorized`] without a valid token once one is required;
    /// [`Denial::AmbiguousCredentials`] for several distinct tokens.
    pub fn authenticate(&self, engine: &PolicyEngine, credentials: &Credentials<'_>) -> Result<Arc<Identity>, Denial> {
        if let Some(init) = self.init.read().unwrap_or_else(PoisonError::into_inner).as_ref() {
            if credentials.access_tokens.iter().any(|t| init.matches(t)) {
                return Ok(Arc::new(Identity::new(INIT_IDENTITY, ["*"])));
            }
        }
        let identity = engine.authenticate(credentials)?;
        if identity.id == "anonymous" && self.init_set() {
            return Err(Denial::Unauthorized);
        }
        Ok(identity)
    }

    /// Whether `/init` may change the plane: nothing protects it yet (first
    /// setup), the caller authenticated with a token, or it presents the
    /// current `/init` token again.
    pub fn may_init(&self, engine: &PolicyEngine, credentials: &Credentials<'_>, body_token: Option<&str>) -> bool {
        if !self.required(engine) {
            return true;
        }
        if body_token.is_some_and(|t| {
            self.init.read().unwrap_or_else(PoisonError::into_inner).as_ref().is_some_and(|s| s.matches(t))
        }) {
            return true;
        }
        let presented = !credentials.access_tokens.is_empty() || !credentials.authorization.is_empty();
        presented && self.authenticate(engine, credentials).is_ok_and(|id| id.id != "anonymous")
    }

    /// Sets (or, with an empty token, clears) the `/init` access token.
    pub fn set_init(&self, token: &str) {
        *self.init.write().unwrap_or_else(PoisonError::into_inner) = (!token.is_empty()).then(|| Secret::new(token));
    }

    /// Whether `signature` signs `path`, `operation` and `username` with a
    /// token of the plane and has not expired at `now` (Unix seconds).
    pub fn verify(
        &self,
        path: &str,
        operation: Operation,
        username: &str,
        signature_given: &str,
        expiration: Option<i64>,
        now: i64,
    ) -> Result<(), EnvdError> {
        let init = self.init.read().unwrap_or_else(PoisonError::into_inner);
        let valid = init.iter().chain(self.server.iter()).any(|secret| {
            let expected = signature(path, operation, username, &secret.plain, expiration);
            bool::from(expected.as_bytes().ct_eq(signature_given.as_bytes()))
        });
        if !valid {
            return Err(EnvdError::Unauthenticated("invalid signature".into()));
        }
        if expiration.is_some_and(|exp| exp < now) {
            return Err(EnvdError::Unauthenticated("signature is already expired".into()));
        }
        Ok(())
    }
}

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
    use crate::policy::PolicyInputs;

    fn engine(token: Option<&str>) -> PolicyEngine {
        PolicyEngine::new(PolicyInputs { server_token: token.map(str::to_string), ..PolicyInputs::default() })
            .expect("engine")
    }

    fn creds<'a>(tokens: &[&'a str]) -> Credentials<'a> {
        Credentials { authorization: Vec::new(), access_tokens: tokens.to_vec() }
    }

    #[test]
    fn signatures_match_the_sdks() {
        // Python: "v1_" + base64(sha256("/f:read::tok")) without padding.
        let sig = signature("/f", Operation::Read, "", "tok", None);
        let expected = base64::engine::general_purpose::STANDARD_NO_PAD.encode(sha256(b"/f:read::tok"));
        assert_eq!(sig, format!("v1_{expected}"));
        let tokens = Tokens::new(Some("tok".into()));
        assert!(tokens.verify("/f", Operation::Read, "", &sig, None, 0).is_ok());
        assert!(tokens.verify("/f", Operation::Write, "", &sig, None, 0).is_err());
        let timed = signature("/f", Operation::Write, "user", "tok", Some(100));
        assert!(tokens.verify("/f", Operation::Write, "user", &timed, Some(100), 99).is_ok());
        let late = tokens.verify("/f", Operation::Write, "user", &timed, Some(100), 101);
        assert_eq!(late.map_err(|e| e.to_string()), Err("signature is already expired".into()));
    }

    #[test]
    fn an_init_token_closes_an_open_plane_and_either_token_opens_it() {
        let open = engine(None);
        let tokens = Tokens::new(None);
        assert_eq!(tokens.authenticate(&open, &creds(&[])).map(|i| i.id.clone()), Ok("anonymous".into()));
        assert!(tokens.may_init(&open, &creds(&[]), None));
        tokens.set_init("init-tok");
        assert_eq!(tokens.authenticate(&open, &creds(&[])).map(|i| i.id.clone()), Err(Denial::Unauthorized));
        assert_eq!(tokens.authenticate(&open, &creds(&["wrong"])).map(|i| i.id.clone()), Err(Denial::Unauthorized));
        assert_eq!(tokens.authenticate(&open, &creds(&["init-tok"])).map(|i| i.id.clone()), Ok(INIT_IDENTITY.into()));
        assert!(!tokens.may_init(&open, &creds(&[]), Some("other")));
        assert!(tokens.may_init(&open, &creds(&[]), Some("init-tok")));
        let guarded = engine(Some("server-tok"));
        let tokens = Tokens::new(Some("server-tok".into()));
        assert!(!tokens.may_init(&guarded, &creds(&[]), Some("x")));
        assert!(tokens.may_init(&guarded, &creds(&["server-tok"]), None));
        tokens.set_init("init-tok");
        assert_eq!(tokens.authenticate(&guarded, &creds(&["server-tok"])).map(|i| i.id.clone()), Ok("server".into()));
        assert_eq!(
            tokens.authenticate(&guarded, &creds(&["init-tok"])).map(|i| i.id.clone()),
            Ok(INIT_IDENTITY.into())
        );
    }

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
