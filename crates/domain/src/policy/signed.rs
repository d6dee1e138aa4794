//! The credentials a running server gains or checks besides its configured
//! tokens: the envd access token that `POST /init` sets, and signed envd
//! `/files` URLs.
//!
//! - The access token authenticates as an identity named `envd` with the
//!   scopes of the identity that set it, never more: a caller cannot mint
//!   a token more powerful than itself.
//! - A signed URL is `v1_` and the unpadded base64 SHA-256 of
//!   `path:operation:username:token[:expiration]` (the scheme of the SDKs'
//!   `download_url`/`upload_url`). It acts as the identity whose token
//!   signed it, for that one operation, path and user. The keys are the
//!   tokens this server knows in plain: the configured ones read from the
//!   environment (`ABX_SERVER_TOKEN` while it is the server identity, a
//!   policy's `token_env` tokens) and the access token; a `token_sha256`
//!   identity cannot sign, and `ABX_SERVER_TOKEN` stops signing once policy
//!   tokens replace it.

use std::sync::{Arc, PoisonError};

use abx_wire::api::Fault;
use abx_wire::endpoints::SignedOp;
use base64::Engine;
use subtle::ConstantTimeEq;

use super::auth::{sha256, TokenIdentity};
use super::{Denial, Identity, PolicyEngine};

/// The identity id of a caller holding the access token `/init` set.
pub const ACCESS_TOKEN_IDENTITY: &str = "envd";

/// What a signed request names; the signature covers all of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignedRequest<'a> {
    /// The path of the file (as given in the URL).
    pub path: &'a str,
    /// Read or write.
    pub op: SignedOp,
    /// The user the request acts as (empty: the default user).
    pub username: &'a str,
    /// The `signature` parameter.
    pub signature: &'a str,
    /// The `signature_expiration` parameter, Unix seconds.
    pub expiration: Option<i64>,
}

/// The signature of a `/files` URL for `path`, `op` and `username` with `token`.
pub fn signature(path: &str, op: SignedOp, username: &str, token: &str, expiration: Option<i64>) -> String {
    let text = match expiration {
        Some(exp) => format!("{path}:{}:{username}:{token}:{exp}", op.as_str()),
        None => format!("{path}:{}:{username}:{token}", op.as_str()),
    };
    format!("v1_{}", base64::engine::general_purpose::STANDARD_NO_PAD.encode(sha256(text.as_bytes())))
}

impl PolicyEngine {
    /// Sets the access token (`POST /init`), acting as `setter`'s scopes; an
    /// empty token clears it.
    pub fn set_access_token(&self, token: &str, setter: &Identity) {
        let entry =
            (!token.is_empty()).then(|| TokenIdentity::from_token(ACCESS_TOKEN_IDENTITY, setter.scopes.clone(), token));
        *self.access_token.write().unwrap_or_else(PoisonError::into_inner) = entry;
    }

    /// Whether an access token is set (the envd plane then refuses anonymous callers).
    pub fn access_token_set(&self) -> bool {
        self.access_token.read().unwrap_or_else(PoisonError::into_inner).is_some()
    }

    /// The access token's identity, if `presented` is the access token.
    pub(super) fn match_access_token(&self, presented: super::Presented<'_>) -> Option<Arc<Identity>> {
        if presented.is_empty() {
            return None;
        }
        let token = self.access_token.read().unwrap_or_else(PoisonError::into_inner);
        let token = token.as_ref()?;
        presented.iter().any(|p| token.matches(p)).then(|| Arc::clone(token.shared()))
    }

    /// The identity whose token signed `request`, if the signature is valid and unexpired at `now`.
    ///
    /// # Errors
    /// [`Denial::Unauthorized`]; `invalid_signature` or `signature_expired` (401) with a reason.
    pub fn verify_signed(&self, request: &SignedRequest<'_>, now: i64) -> Result<Arc<Identity>, Denial> {
        let valid = |entry: &TokenIdentity| {
            entry.plain().is_some_and(|key| {
                let expected = signature(request.path, request.op, request.username, key, request.expiration);
                bool::from(expected.as_bytes().ct_eq(request.signature.as_bytes()))
            })
        };
        let signer = {
            let access = self.access_token.read().unwrap_or_else(PoisonError::into_inner);
            let mut signers = access.iter().chain(self.authenticator.tokens());
            signers.find(|entry| valid(entry)).map(|entry| Arc::clone(entry.shared()))
        };
        let Some(signer) = signer else {
            return Err(Denial::new(Fault::InvalidSignature, "invalid signature"));
        };
        if request.expiration.is_some_and(|exp| exp < now) {
            return Err(Denial::new(Fault::SignatureExpired, "signature is already expired"));
        }
        Ok(signer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{document, Credentials, PolicyInputs};

    fn engine(policy: Option<serde_json::Value>, server_token: Option<&str>) -> PolicyEngine {
        let document = policy.map(|p| document::parse(&p).expect("valid"));
        let inputs =
            PolicyInputs { document, server_token: server_token.map(str::to_string), ..PolicyInputs::default() };
        PolicyEngine::new(inputs).expect("engine")
    }

    fn signed<'a>(sig: &'a str, path: &'a str, username: &'a str, expiration: Option<i64>) -> SignedRequest<'a> {
        SignedRequest { path, op: SignedOp::Read, username, signature: sig, expiration }
    }

    #[test]
    fn signatures_match_the_sdks() {
        // Python: "v1_" + base64(sha256("/f:read::tok")) without padding.
        let sig = signature("/f", SignedOp::Read, "", "tok", None);
        let expected = base64::engine::general_purpose::STANDARD_NO_PAD.encode(sha256(b"/f:read::tok"));
        assert_eq!(sig, format!("v1_{expected}"));
    }

    #[test]
    fn a_signature_acts_as_its_signer_for_what_it_names_until_it_expires() {
        let e = engine(None, Some("tok"));
        let sig = signature("/f", SignedOp::Read, "", "tok", None);
        assert_eq!(e.verify_signed(&signed(&sig, "/f", "", None), 0).map(|i| i.id.clone()), Ok("server".into()));
        assert!(e.verify_signed(&signed(&sig, "/g", "", None), 0).is_err(), "another path");
        assert!(e.verify_signed(&signed(&sig, "/f", "root", None), 0).is_err(), "another user");
        let write = SignedRequest { op: SignedOp::Write, ..signed(&sig, "/f", "", None) };
        assert!(e.verify_signed(&write, 0).is_err(), "another operation");
        let timed = signature("/f", SignedOp::Read, "user", "tok", Some(100));
        assert!(e.verify_signed(&signed(&timed, "/f", "user", Some(100)), 99).is_ok());
        let late = e.verify_signed(&signed(&timed, "/f", "user", Some(100)), 101).map(|_| ());
        assert_eq!(late.map_err(|d| d.code()), Err("signature_expired"));
    }

    #[test]
    fn the_server_token_stops_signing_once_policy_tokens_replace_it() {
        let policy = serde_json::json!({"auth": {"tokens": [
            {"id": "reader", "scopes": ["files:read"], "token_env": "ABX_TEST_SIGNED_READER_TOKEN"},
            {"id": "hashed", "scopes": ["*"], "token_sha256": "a".repeat(64)},
        ]}});
        std::env::set_var("ABX_TEST_SIGNED_READER_TOKEN", "reader-tok");
        let e = engine(Some(policy), Some("server-tok"));
        let by_server = signature("/f", SignedOp::Read, "", "server-tok", None);
        assert!(e.verify_signed(&signed(&by_server, "/f", "", None), 0).is_err());
        let by_reader = signature("/f", SignedOp::Read, "", "reader-tok", None);
        let reader = e.verify_signed(&signed(&by_reader, "/f", "", None), 0).expect("reader signs");
        assert_eq!((reader.id.as_str(), reader.can("files:write")), ("reader", false));
    }

    #[test]
    fn the_access_token_carries_its_setters_scopes() {
        let e = engine(None, None);
        assert!(!e.access_token_set());
        e.set_access_token("init-tok", &Identity::new("ci", ["files:read"]));
        assert!(e.access_token_set());
        let creds = Credentials { authorization: vec![], access_tokens: vec!["init-tok"] };
        let identity = e.authenticate(&creds).expect("the access token");
        assert_eq!(
            (identity.id.as_str(), identity.can("files:read"), identity.can("process:run")),
            ("envd", true, false)
        );
        let sig = signature("/f", SignedOp::Read, "", "init-tok", None);
        assert_eq!(e.verify_signed(&signed(&sig, "/f", "", None), 0).map(|i| i.id.clone()), Ok("envd".into()));
        e.set_access_token("", &Identity::new("ci", ["*"]));
        assert!(!e.access_token_set());
    }
}
