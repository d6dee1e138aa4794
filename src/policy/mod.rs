//! The policy engine: one decision source for every request.
//!
//! [`PolicyEngine`] compiles every input (built-in defaults, preset, policy
//! document, `ABX_SERVER_ENABLED_GROUPS`, the server token) into one
//! [`EffectiveRule`] per endpoint at start, then answers three questions:
//! who is calling ([`PolicyEngine::authenticate`]), may they call this
//! endpoint ([`PolicyEngine::admit`]), and what would the answer be
//! ([`PolicyEngine::describe`], [`PolicyEngine::check`]). Discovery and
//! enforcement share the same code, so they cannot disagree.
//!
//! Nothing here knows about HTTP.

mod auth;
mod denial;
mod discovery;
pub mod document;
pub mod guards;
mod identity;
mod limiter;
pub mod paths;
pub mod rules;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use sha2::{Digest, Sha256};

pub use self::auth::{Authenticator, Credentials, TokenIdentity};
pub use self::denial::Denial;
pub use self::document::PolicyDocument;
pub use self::identity::Identity;
pub use self::limiter::Permit;
pub use self::paths::{Op, PathGuard};
pub use self::rules::{EffectiveRule, LimitValue, ParamValue};

use self::document::TokenSecret;
use self::limiter::Limiter;
use self::rules::{baseline_layers, enabled_group_layers, Rank};
use crate::endpoints::{self, Endpoint, Group, Limit, Param, ENDPOINTS};

/// The environment variable holding the server token.
pub const TOKEN_ENV: &str = "ABX_SERVER_TOKEN";

/// A policy that cannot be used; the server refuses to start with it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct PolicyConfigError(String);

impl PolicyConfigError {
    /// An error with this message (it names the JSON path of the mistake).
    pub fn new(message: impl Into<String>) -> Self {
        PolicyConfigError(message.into())
    }
}

/// `" (did you mean 'x'?)"` for the closest of `choices`, or nothing.
pub fn suggest<'a>(word: &str, choices: impl IntoIterator<Item = &'a str>) -> String {
    choices
        .into_iter()
        .map(|c| (strsim::normalized_levenshtein(word, c), c))
        .filter(|(score, _)| *score >= 0.6)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, c)| format!(" (did you mean '{c}'?)"))
        .unwrap_or_default()
}

/// Everything the engine is built from.
#[derive(Debug, Clone, Default)]
pub struct PolicyInputs {
    /// Boundary directory for paths when rules allow none.
    pub base_dir: PathBuf,
    /// Groups `ABX_SERVER_ENABLED_GROUPS` turns on.
    pub enabled_groups: Vec<Group>,
    /// The `ABX_SERVER_TOKEN` value, if any.
    pub server_token: Option<String>,
    /// The policy document, if any.
    pub document: Option<PolicyDocument>,
}

/// The compiled policy of a running server.
#[derive(Debug)]
pub struct PolicyEngine {
    rules: Vec<EffectiveRule>,
    authenticator: Authenticator,
    base_dir: PathBuf,
    preset: String,
    revision: String,
    configured: bool,
    limiter: Limiter,
    secret_env: BTreeSet<String>,
}

impl PolicyEngine {
    /// Compiles the inputs.
    ///
    /// # Errors
    /// A rule the endpoints cannot take, or a token whose environment variable is unset.
    pub fn new(inputs: PolicyInputs) -> Result<Self, PolicyConfigError> {
        let document = inputs.document.unwrap_or_default();
        let mut layers = baseline_layers();
        layers.extend(document.layers.iter().cloned());
        layers.extend(enabled_group_layers(&inputs.enabled_groups, Rank::Env, "env:ABX_SERVER_ENABLED_GROUPS"));
        let rules = rules::compile(&layers, true)?;

        let mut secret_env: BTreeSet<String> = crate::environment::SECRET_VARS.iter().map(|s| s.to_string()).collect();
        let mut tokens = Vec::new();
        for spec in &document.auth.tokens {
            let digest = match &spec.secret {
                TokenSecret::Sha256(digest) => *digest,
                TokenSecret::Env(name) => {
                    secret_env.insert(name.clone());
                    let value = std::env::var(name).unwrap_or_default();
                    if value.is_empty() {
                        return Err(PolicyConfigError::new(format!(
                            "policy.auth.tokens[{}]: environment variable '{name}' is not set",
                            spec.id
                        )));
                    }
                    auth::sha256(value.as_bytes())
                }
            };
            tokens.push(TokenIdentity::from_digest(spec.id.clone(), spec.scopes.clone(), digest));
        }
        let mut canonical = document.canonical.clone();
        let server_token = inputs.server_token.filter(|t| !t.is_empty());
        if let (Some(token), true) = (&server_token, tokens.is_empty()) {
            tokens.push(TokenIdentity::from_token("server", BTreeSet::from(["*".to_string()]), token));
            if !canonical.is_object() {
                canonical = serde_json::json!({"version": 1});
            }
            if let Some(doc) = canonical.as_object_mut() {
                doc.insert(
                    "auth".into(),
                    serde_json::json!({"tokens": [{"id": "server", "scopes": ["*"], "token_env": TOKEN_ENV}]}),
                );
            }
        }
        let configured = canonical.as_object().is_some_and(|o| o.keys().any(|k| k != "version"));
        let revision = {
            let text = serde_json::to_string(&canonical).unwrap_or_default();
            let digest = Sha256::digest(text.as_bytes());
            digest.iter().take(8).map(|b| format!("{b:02x}")).collect()
        };
        let authenticator =
            Authenticator::new(tokens, document.auth.allow_anonymous, document.auth.anonymous_scopes.clone());
        Ok(PolicyEngine {
            rules,
            authenticator,
            base_dir: document.base_dir.clone().unwrap_or(inputs.base_dir),
            preset: document.preset.clone().unwrap_or_else(|| "default".into()),
            revision,
            configured,
            limiter: Limiter::default(),
            secret_env,
        })
    }

    /// The caller's identity.
    ///
    /// # Errors
    /// 401 or 400 refusals, as [`Authenticator::authenticate`].
    pub fn authenticate(&self, credentials: &Credentials<'_>) -> Result<Identity, Denial> {
        self.authenticator.authenticate(credentials)
    }

    /// The authenticator (identities for lint and warnings).
    pub fn authenticator(&self) -> &Authenticator {
        &self.authenticator
    }

    /// The effective rule of `endpoint`.
    pub fn rule(&self, endpoint: &Endpoint) -> &EffectiveRule {
        let index = ENDPOINTS
            .iter()
            .position(|e| std::ptr::eq(e, endpoint))
            .or_else(|| ENDPOINTS.iter().position(|e| e.id == endpoint.id))
            .unwrap_or(0);
        &self.rules[index]
    }

    /// Every effective rule, in table order.
    pub fn rules(&self) -> &[EffectiveRule] {
        &self.rules
    }

    /// The rule gate: enabled, scopes, rate and concurrency.
    ///
    /// # Errors
    /// `endpoint_disabled` (404), `missing_scope` (403), `rate_limited` or
    /// `concurrency_limited` (429).
    pub fn admit(
        self: &Arc<Self>,
        endpoint: &'static Endpoint,
        identity: Identity,
    ) -> Result<(Grant, Option<Permit>), Denial> {
        let rule = self.rule(endpoint);
        if !rule.enabled {
            return Err(Denial::EndpointDisabled { message: rule.disabled_message(), rule: rule.disabled_by.clone() });
        }
        if let Some(scope) = identity.missing(&rule.scopes) {
            return Err(Denial::MissingScope {
                identity: identity.id.clone(),
                scope: scope.to_string(),
                endpoint: endpoint.id.to_string(),
            });
        }
        let permit = self.limiter.admit(
            &identity.id,
            endpoint.id,
            rule.limit(Limit::RatePerMinute).map(LimitValue::as_u64),
            rule.limit(Limit::MaxConcurrency).map(LimitValue::as_u64),
        )?;
        Ok((Grant { engine: Arc::clone(self), endpoint, identity }, permit))
    }

    /// The boundary directory for paths when rules allow none.
    pub fn base_dir(&self) -> &Path {
        &self.base_dir
    }

    /// Whether `name` must never be shown, set, or passed to a child.
    pub fn is_secret_env(&self, name: &str) -> bool {
        self.secret_env.contains(name) || name.to_ascii_uppercase().starts_with("ABX_SERVER_")
    }

    /// Environment variable names holding secrets (the server token, policy `token_env`s).
    pub fn secret_env_names(&self) -> impl Iterator<Item = &str> {
        self.secret_env.iter().map(String::as_str)
    }
}

/// An admitted request: the endpoint's rule and the caller.
///
/// Handlers receive it to resolve paths and read limits and parameters.
#[derive(Debug, Clone)]
pub struct Grant {
    engine: Arc<PolicyEngine>,
    endpoint: &'static Endpoint,
    identity: Identity,
}

impl Grant {
    /// The endpoint admitted.
    pub fn endpoint(&self) -> &'static Endpoint {
        self.endpoint
    }

    /// The caller.
    pub fn identity(&self) -> &Identity {
        &self.identity
    }

    /// The engine that admitted the request.
    pub fn engine(&self) -> &Arc<PolicyEngine> {
        &self.engine
    }

    /// The endpoint's effective rule.
    pub fn rule(&self) -> &EffectiveRule {
        self.engine.rule(self.endpoint)
    }

    /// The path guard of the endpoint's rule.
    pub fn guard(&self) -> PathGuard {
        PathGuard::new(&self.engine.base_dir, self.rule())
    }

    /// Resolves and authorises `raw` for the endpoint's default operation.
    ///
    /// # Errors
    /// The path refusals of [`PathGuard::resolve`].
    pub fn resolve_path(&self, raw: &str) -> Result<PathBuf, Denial> {
        self.guard().resolve(raw, Op::default_for(self.endpoint.id), "")
    }

    /// The limit `key`, if the policy sets it.
    pub fn limit(&self, key: Limit) -> Option<LimitValue> {
        self.rule().limit(key)
    }

    /// The parameter `key`, if the policy sets it.
    pub fn param(&self, key: Param) -> Option<&ParamValue> {
        self.rule().param(key)
    }
}

/// The endpoint with id `id`, for callers that only have a name.
pub fn endpoint(id: &str) -> Option<&'static Endpoint> {
    endpoints::find(id)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn engine(inputs: PolicyInputs) -> Arc<PolicyEngine> {
        Arc::new(PolicyEngine::new(inputs).expect("valid policy"))
    }

    fn ep(id: &str) -> &'static Endpoint {
        endpoints::find(id).expect("known endpoint")
    }

    #[test]
    fn a_server_token_makes_a_configured_server_identity() {
        let e = engine(PolicyInputs { server_token: Some("t".into()), ..PolicyInputs::default() });
        assert!(e.authenticator().has_tokens());
        assert!(e.configured);
        let anonymous = engine(PolicyInputs::default());
        assert!(!anonymous.configured);
        assert_ne!(e.revision, anonymous.revision);
    }

    #[test]
    fn admit_refuses_disabled_endpoints_and_missing_scopes() {
        let e = engine(PolicyInputs::default());
        let all = Identity::new("anonymous", ["*"]);
        assert_eq!(e.admit(ep("code_run"), all.clone()).map(|_| ()).map_err(|d| d.code()), Err("endpoint_disabled"));
        assert!(e.admit(ep("shell"), all).is_ok());
        let reader = Identity::new("r", ["files:read"]);
        let err = e.admit(ep("files_move"), reader.clone()).map(|_| ()).expect_err("needs files:write");
        assert_eq!(
            err,
            Denial::MissingScope { identity: "r".into(), scope: "files:write".into(), endpoint: "files_move".into() }
        );
        assert!(e.admit(ep("capabilities"), reader).is_ok(), "core:read is implicit");
    }

    #[test]
    fn enabled_groups_turn_opt_in_groups_on() {
        let e = engine(PolicyInputs { enabled_groups: vec![Group::DevTools], ..PolicyInputs::default() });
        assert!(e.rule(ep("git_diff")).enabled);
        assert!(!e.rule(ep("browser_click")).enabled);
    }

    #[test]
    fn secrets_are_recognised() {
        let e = engine(PolicyInputs::default());
        assert!(e.is_secret_env("ABX_SERVER_TOKEN"));
        assert!(e.is_secret_env("abx_server_anything"));
        assert!(!e.is_secret_env("HOME"));
    }

    #[test]
    fn suggestions_name_the_closest_choice() {
        assert_eq!(suggest("files_lst", ["files_list", "shell"]), " (did you mean 'files_list'?)");
        assert_eq!(suggest("zzz", ["files_list"]), "");
    }
}
