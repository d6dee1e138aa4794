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
pub mod canonical;
pub mod daemon;
mod denial;
mod deny;
mod discovery;
pub mod document;
mod grant;
pub mod guards;
mod identity;
mod lexical;
mod limiter;
mod lint;
pub mod owner;
pub mod paths;
pub mod powers_table;
pub mod presets;
pub mod rules;
mod schema;
pub mod secret;
pub mod signed;
pub mod source;
pub mod throttle;
pub mod user;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

pub use self::auth::{sha256, Authenticator, Credentials, Presented, TokenIdentity};
pub use self::denial::Denial;
pub use self::document::PolicyDocument;
pub use self::grant::Grant;
pub use self::identity::Identity;
pub use self::limiter::Permit;
pub use self::lint::file_permission_warnings;
pub use self::owner::Viewer;
pub use self::paths::{Op, PathGuard, PathRules};
pub use self::rules::{EffectiveRule, LimitValue, ParamValue};
pub use self::signed::SignedRequest;
pub use self::source::PolicySources;
use abx_wire::endpoints::{self, Endpoint, Group, Limit, ENDPOINTS};

use self::document::TokenSecret;
use self::limiter::Limiter;
use self::rules::{baseline_layers, enabled_group_layers, Layer, Rank};
use crate::accounts::Account;

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
    /// Whether `base_dir` was set explicitly (flag, environment or config
    /// file) and so beats the policy's `base_dir`.
    pub base_dir_explicit: bool,
    /// Groups `ABX_SERVER_ENABLED_GROUPS` turns on.
    pub enabled_groups: Vec<Group>,
    /// The `ABX_SERVER_TOKEN` value, if any.
    pub server_token: Option<String>,
    /// The policy document, if any.
    pub document: Option<PolicyDocument>,
    /// The daemon's own state and configuration paths, denied on every
    /// endpoint (the policy file and token files are added from the document).
    pub daemon_paths: Vec<daemon::DaemonPath>,
}

/// The compiled policy of a running server.
#[derive(Debug)]
pub struct PolicyEngine {
    rules: Vec<EffectiveRule>,
    path_rules: Vec<Arc<PathRules>>,
    layers: Vec<Layer>,
    authenticator: Authenticator,
    base_dir: PathBuf,
    preset: String,
    revision: String,
    configured: bool,
    limiter: Arc<Limiter>,
    secret_env: BTreeSet<String>,
    unauthenticated: Arc<Identity>,
    origin: String,
    policy_file: Option<PathBuf>,
    /// The daemon's own paths, which every path rule denies.
    daemon_paths: Vec<daemon::DaemonPath>,
    /// For each endpoint, the index of the endpoint governing it (its own when none):
    /// rate and concurrency limits count in the governing endpoint's buckets.
    governing: Vec<usize>,
    /// The envd access token `POST /init` set, if any.
    access_token: RwLock<Option<TokenIdentity>>,
    /// Failed authentications per peer address.
    pub throttle: throttle::Throttle,
}

/// The root of `rule`'s paths when it names none: the base directory, except
/// for the envd port's process starts, whose working directory is anywhere
/// the process's user may enter (as envd), unless a policy names roots.
fn default_root<'a>(base_dir: &'a Path, rule: &EffectiveRule) -> &'a Path {
    let envd_exec = rule.endpoint.port == abx_wire::endpoints::Port::Envd
        && rule.endpoint.governed_by.is_some_and(|g| Op::default_for(g) == Op::Exec);
    if envd_exec {
        Path::new("/")
    } else {
        base_dir
    }
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

        let mut secret_env: BTreeSet<String> = self::guards::env::SECRET_VARS.iter().map(|s| s.to_string()).collect();
        let mut tokens = Vec::new();
        for (index, spec) in document.auth.tokens.iter().enumerate() {
            let user = match &spec.user {
                Some(name) => Some(Arc::new(user::resolve(name, &format!("policy.auth.tokens[{index}].user"))?)),
                None => None,
            };
            let digest = match &spec.secret {
                TokenSecret::Sha256(digest) => *digest,
                TokenSecret::Env(name) => {
                    secret_env.insert(name.clone());
                    secret_env.insert(format!("{name}{}", secret::FILE_SUFFIX));
                    let Some(value) = secret::from_env(name)? else {
                        return Err(PolicyConfigError::new(format!(
                            "policy.auth.tokens[{}]: environment variable '{name}' is not set",
                            spec.id
                        )));
                    };
                    // Known in plain, the token can sign envd URLs.
                    tokens
                        .push(TokenIdentity::from_token(spec.id.clone(), spec.scopes.clone(), &value).with_user(user));
                    continue;
                }
            };
            tokens.push(TokenIdentity::from_digest(spec.id.clone(), spec.scopes.clone(), digest).with_user(user));
        }
        let mut canonical = document.canonical.clone();
        let server_token = inputs.server_token.filter(|t| !t.is_empty());
        if let (Some(token), true) = (&server_token, tokens.is_empty()) {
            // As the reference: the server token becomes the `server` identity with every scope,
            // and the document's other auth settings stay.
            tokens.push(TokenIdentity::from_token("server", BTreeSet::from(["*".to_string()]), token));
            if !canonical.is_object() {
                canonical = serde_json::json!({"version": 1});
            }
            if let Some(doc) = canonical.as_object_mut() {
                let auth = doc.entry("auth").or_insert_with(|| serde_json::json!({}));
                if let Some(auth) = auth.as_object_mut() {
                    auth.insert(
                        "tokens".into(),
                        serde_json::json!([{"id": "server", "scopes": ["*"], "token_env": TOKEN_ENV}]),
                    );
                }
            }
        }
        let configured = canonical.as_object().is_some_and(|o| o.keys().any(|k| k != "version"));
        let revision = canonical::revision(&canonical);
        let authenticator =
            Authenticator::new(tokens, document.auth.allow_anonymous, document.auth.anonymous_scopes.clone());
        let base_dir = match (&document.base_dir, inputs.base_dir_explicit) {
            (Some(dir), false) => dir.clone(),
            _ => inputs.base_dir,
        };
        let mut daemon_paths = inputs.daemon_paths;
        daemon_paths.extend(document.file.iter().map(|f| daemon::DaemonPath::new(f, "policy file")));
        daemon_paths.extend(daemon::secret_files(
            document
                .auth
                .tokens
                .iter()
                .filter_map(|t| match &t.secret {
                    TokenSecret::Env(name) => Some(name.as_str()),
                    TokenSecret::Sha256(_) => None,
                })
                .chain([TOKEN_ENV]),
        ));
        let denied = daemon::deny_prefixes(&daemon_paths);
        let path_rules =
            rules.iter().map(|r| Arc::new(PathRules::compile_with(default_root(&base_dir, r), r, &denied))).collect();
        Ok(PolicyEngine {
            limiter: Arc::new(Limiter::new(rules.len())),
            rules,
            path_rules,
            layers,
            authenticator,
            base_dir,
            preset: document.preset.clone().unwrap_or_else(|| "default".into()),
            revision,
            configured,
            secret_env,
            unauthenticated: Arc::new(Identity::unauthenticated()),
            origin: document.origin.clone(),
            policy_file: document.file.clone(),
            daemon_paths,
            governing: ENDPOINTS.iter().map(|e| index_of(e.governing())).collect(),
            access_token: RwLock::new(None),
            throttle: throttle::Throttle::default(),
        })
    }

    /// The caller's identity.
    ///
    /// # Errors
    /// 401 or 400 refusals, as [`Authenticator::authenticate`].
    pub fn authenticate(&self, credentials: &Credentials<'_>) -> Result<Arc<Identity>, Denial> {
        self.authenticate_presented(credentials.presented()?)
    }

    /// [`PolicyEngine::authenticate`] of tokens already read.
    ///
    /// # Errors
    /// As [`PolicyEngine::authenticate`].
    pub fn authenticate_presented(&self, presented: Presented<'_>) -> Result<Arc<Identity>, Denial> {
        if let Some(identity) = self.match_access_token(presented) {
            return Ok(identity);
        }
        self.authenticator.authenticate_presented(presented)
    }

    /// The identity of callers of endpoints that need no credentials (`/health`).
    pub fn unauthenticated(&self) -> Arc<Identity> {
        Arc::clone(&self.unauthenticated)
    }

    /// The authenticator (identities for lint and warnings).
    pub fn authenticator(&self) -> &Authenticator {
        &self.authenticator
    }

    /// The effective rule of `endpoint`.
    pub fn rule(&self, endpoint: &Endpoint) -> &EffectiveRule {
        &self.rules[index_of(endpoint)]
    }

    /// Every effective rule, in table order.
    pub fn rules(&self) -> &[EffectiveRule] {
        &self.rules
    }

    /// The daemon's own paths, which every path rule denies.
    pub fn daemon_paths(&self) -> &[daemon::DaemonPath] {
        &self.daemon_paths
    }

    /// The path guard of `endpoint`'s rule (its roots resolved now).
    pub fn path_guard(&self, endpoint: &Endpoint) -> PathGuard {
        PathGuard::from_rules(Arc::clone(&self.path_rules[index_of(endpoint)]))
    }

    /// The rule gate: enabled, scopes, rate and concurrency.
    ///
    /// # Errors
    /// `endpoint_disabled` (404), `missing_scope` (403), `rate_limited` or
    /// `concurrency_limited` (429).
    pub fn admit(
        self: &Arc<Self>,
        endpoint: &'static Endpoint,
        identity: Arc<Identity>,
    ) -> Result<(Grant, Option<Permit>), Denial> {
        self.admit_as(endpoint, identity, None)
    }

    /// [`PolicyEngine::admit`] for a caller that asks to act as `user` (envd).
    ///
    /// # Errors
    /// As [`PolicyEngine::admit`].
    pub fn admit_as(
        self: &Arc<Self>,
        endpoint: &'static Endpoint,
        identity: Arc<Identity>,
        user: Option<String>,
    ) -> Result<(Grant, Option<Permit>), Denial> {
        let index = index_of(endpoint);
        let rule = &self.rules[index];
        if !rule.enabled {
            return Err(rule.disabled());
        }
        if let Some(scope) = identity.missing(&rule.scopes) {
            return Err(Denial::MissingScope {
                identity: identity.id.clone(),
                scope: scope.to_string(),
                endpoint: endpoint.id.to_string(),
            });
        }
        let permit = self.limiter.admit(
            self.governing[index],
            &identity,
            rule.limit(Limit::RatePerMinute).map(LimitValue::as_u64),
            rule.limit(Limit::MaxConcurrency).map(LimitValue::as_u64),
        )?;
        Ok((Grant::new(Arc::clone(self), endpoint, identity, user), permit))
    }

    /// The boundary directory for paths when rules allow none.
    pub fn base_dir(&self) -> &Path {
        &self.base_dir
    }

    /// The preset in force (`default` when none).
    pub fn preset(&self) -> &str {
        &self.preset
    }

    /// The revision: a hash of the normalised policy, the same as the reference computes.
    pub fn revision(&self) -> &str {
        &self.revision
    }

    /// Where the policy came from (`file ...`, `preset ...`, `ABX_SERVER_POLICY`), empty for none.
    pub fn origin(&self) -> &str {
        &self.origin
    }

    /// The policy file, when the policy was read from one.
    pub fn policy_file(&self) -> Option<&Path> {
        self.policy_file.as_deref()
    }

    /// The users identities' programs run as, by identity id: those whose
    /// policy token names a user other than the daemon's.
    pub fn program_users(&self) -> std::collections::BTreeMap<String, Arc<Account>> {
        let tokens = self.authenticator.tokens().iter().map(TokenIdentity::identity);
        tokens.filter_map(|i| i.user.clone().filter(|u| u.is_other()).map(|u| (i.id.clone(), u))).collect()
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

/// The position of `endpoint` in [`ENDPOINTS`], without searching for the
/// table's own entries (the router hands those out).
pub fn index_of(endpoint: &Endpoint) -> usize {
    let size = std::mem::size_of::<Endpoint>();
    let offset = (endpoint as *const Endpoint as usize).wrapping_sub(ENDPOINTS.as_ptr() as usize);
    if size > 0 && offset % size == 0 && offset / size < ENDPOINTS.len() {
        return offset / size;
    }
    ENDPOINTS.iter().position(|e| e.id == endpoint.id).unwrap_or(0)
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
        let all = Arc::new(Identity::new("anonymous", ["*"]));
        assert_eq!(e.admit(ep("code_run"), all.clone()).map(|_| ()).map_err(|d| d.code()), Err("endpoint_disabled"));
        assert!(e.admit(ep("shell"), all).is_ok());
        let reader = Arc::new(Identity::new("r", ["files:read"]));
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

    fn with_policy(policy: serde_json::Value, inputs: PolicyInputs) -> Arc<PolicyEngine> {
        engine(PolicyInputs { document: Some(document::parse(&policy).expect("valid")), ..inputs })
    }

    #[test]
    fn the_server_token_keeps_the_documents_anonymous_settings() {
        let policy = serde_json::json!({"auth": {"allow_anonymous": true, "anonymous_scopes": ["files:read"]}});
        let e = with_policy(policy, PolicyInputs { server_token: Some("t".into()), ..PolicyInputs::default() });
        // The reference computes this revision for the same document and token.
        assert_eq!(e.revision(), "6b3dc75616d12829");
        let anonymous = e.authenticate(&Credentials::default()).expect("anonymous admitted");
        assert!(anonymous.can("files:read") && !anonymous.can("files:write"));
        let server = e.authenticate(&Credentials { authorization: vec!["Bearer t"], access_tokens: vec![] });
        assert_eq!(server.map(|i| i.id.clone()), Ok("server".into()));
    }

    #[test]
    fn policy_tokens_replace_the_server_token() {
        let digest = format!("{:x}", Sha256Hex(b"ci-token"));
        let policy =
            serde_json::json!({"auth": {"tokens": [{"id": "ci", "scopes": ["files:read"], "token_sha256": digest}]}});
        let e = with_policy(policy, PolicyInputs { server_token: Some("t".into()), ..PolicyInputs::default() });
        let creds = |token| Credentials { authorization: vec![token], access_tokens: vec![] };
        assert_eq!(e.authenticate(&creds("Bearer t")), Err(Denial::Unauthorized));
        let first = e.authenticate(&creds("Bearer ci-token")).expect("ci");
        let second = e.authenticate(&creds("Bearer ci-token")).expect("ci");
        assert!(Arc::ptr_eq(&first, &second), "identities are shared, not copied per request");
    }

    #[test]
    fn an_explicit_base_dir_beats_the_policys() {
        let policy = serde_json::json!({"base_dir": "/srv/work"});
        let inputs = |explicit| PolicyInputs {
            base_dir: "/flag".into(),
            base_dir_explicit: explicit,
            ..PolicyInputs::default()
        };
        assert_eq!(with_policy(policy.clone(), inputs(false)).base_dir(), Path::new("/srv/work"));
        assert_eq!(with_policy(policy, inputs(true)).base_dir(), Path::new("/flag"));
    }

    #[test]
    fn token_env_variables_must_be_set_and_become_secrets() {
        let policy = serde_json::json!({"auth": {"tokens": [{"id": "a", "scopes": ["*"], "token_env": "ABX_TEST_UNSET_TOKEN_7f3"}]}});
        let document = document::parse(&policy).expect("valid");
        let err =
            PolicyEngine::new(PolicyInputs { document: Some(document), ..PolicyInputs::default() }).expect_err("unset");
        assert_eq!(
            err.to_string(),
            "policy.auth.tokens[a]: environment variable 'ABX_TEST_UNSET_TOKEN_7f3' is not set"
        );
    }

    #[test]
    fn rules_an_exact_endpoint_cannot_take_are_refused() {
        let refused = |policy: serde_json::Value| {
            let document = document::parse(&policy).expect("valid syntax");
            PolicyEngine::new(PolicyInputs { document: Some(document), ..PolicyInputs::default() })
                .map(|_| ())
                .expect_err("not applicable")
                .to_string()
        };
        assert_eq!(
            refused(serde_json::json!({"endpoints": {"files_stat": {"limits": {"max_depth": 3}}}})),
            "policy.endpoints.files_stat.limits.max_depth: not applicable to endpoint 'files_stat'"
        );
        assert_eq!(
            refused(serde_json::json!({"endpoints": {"files_stat": {"params": {"overwrite": false}}}})),
            "policy.endpoints.files_stat.params.overwrite: not applicable to endpoint 'files_stat'"
        );
        assert_eq!(
            refused(serde_json::json!({"endpoints": {"system_info": {"paths": {"allow": ["/tmp"]}}}})),
            "policy.endpoints.system_info.paths: not applicable to endpoint 'system_info'"
        );
        let glob = document::parse(&serde_json::json!({"endpoints": {"files_*": {"limits": {"max_depth": 3}}}}));
        assert!(PolicyEngine::new(PolicyInputs { document: glob.ok(), ..PolicyInputs::default() }).is_ok());
    }

    #[test]
    fn rules_are_found_for_table_entries_and_copies() {
        let e = engine(PolicyInputs::default());
        for endpoint in ENDPOINTS {
            assert_eq!(e.rule(endpoint).endpoint.id, endpoint.id);
            let copy = *endpoint;
            assert_eq!(e.rule(&copy).endpoint.id, endpoint.id);
        }
    }

    /// Hex SHA-256 of a byte string.
    struct Sha256Hex(&'static [u8]);

    impl std::fmt::LowerHex for Sha256Hex {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            auth::sha256(self.0).iter().try_for_each(|b| write!(f, "{b:02x}"))
        }
    }

    #[test]
    fn suggestions_name_the_closest_choice() {
        assert_eq!(suggest("files_lst", ["files_list", "shell"]), " (did you mean 'files_list'?)");
        assert_eq!(suggest("zzz", ["files_list"]), "");
    }
}
