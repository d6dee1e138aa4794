//! A policy document: the template author's rules, validated.
//!
//! The reference's JSON format (`version`, `preset`, `base_dir`, `groups`,
//! `defaults`, `auth`, `endpoints`, `description`) is parsed by [`parse`]
//! into a [`PolicyDocument`]: the rule layers of its preset and of its own
//! sections (with the reference's ranks and origins), its auth section, and
//! its normalised JSON, whose canonical text gives the revision. Every
//! mistake is refused with the JSON path where it is and, for a misspelt
//! name, the closest known one.

use std::path::PathBuf;

use abx_wire::endpoints::{self, Group, ENDPOINTS};
use serde_json::{Map, Value};

use super::auth::parse_auth;
pub use super::auth::{AuthSpec, TokenSecret, TokenSpec};
use super::rules::{Layer, Rank, RuleSpec, Selector};
use super::schema::{self, check_keys, repr};
use super::{presets, suggest, PolicyConfigError};

/// The only policy format version.
pub const POLICY_VERSION: u64 = 1;

/// Top-level keys of a policy document.
pub const TOP_KEYS: [&str; 8] =
    ["version", "preset", "base_dir", "groups", "defaults", "auth", "endpoints", "description"];

type Result<T> = std::result::Result<T, PolicyConfigError>;

/// The rules of an `endpoints` section: key as written, its selector, its rule.
type EndpointRules = Vec<(String, Selector, RuleSpec)>;

fn err<T>(message: impl Into<String>) -> Result<T> {
    Err(PolicyConfigError::new(message))
}

/// A validated policy document.
#[derive(Debug, Clone, Default)]
pub struct PolicyDocument {
    /// Preset name (`default` when none).
    pub preset: Option<String>,
    /// Boundary directory for paths when rules allow none.
    pub base_dir: Option<PathBuf>,
    /// Free text describing the policy.
    pub description: Option<String>,
    /// Rule layers of the preset and the document, lowest rank first.
    pub layers: Vec<Layer>,
    /// Authentication.
    pub auth: AuthSpec,
    /// The normalised document, hashed into the revision.
    pub canonical: Value,
    /// The file the document was read from, if any.
    pub file: Option<PathBuf>,
    /// Where the document came from (`file /etc/...`, `preset hardened`, `ABX_SERVER_POLICY`).
    pub origin: String,
}

impl PolicyDocument {
    /// Whether the document sets anything beyond the defaults.
    pub fn configured(&self) -> bool {
        self.canonical.as_object().is_some_and(|o| o.keys().any(|k| k != "version"))
    }
}

/// Validates a policy document.
///
/// # Errors
/// The first mistake, with its JSON path (`policy.endpoints.files_lst:
/// unknown endpoint (did you mean 'files_list'?)`).
pub fn parse(raw: &Value) -> Result<PolicyDocument> {
    let top = check_keys(raw, &TOP_KEYS, "policy")?;
    let mut canonical = Map::new();
    match top.get("version") {
        None => {}
        Some(v) if v.as_u64() == Some(POLICY_VERSION) && !v.is_f64() => {}
        Some(v) => {
            return err(format!("policy.version: unsupported {}; this server understands {POLICY_VERSION}", repr(v)))
        }
    }
    canonical.insert("version".into(), Value::from(POLICY_VERSION));
    let description = top.get("description").map(|d| match d {
        Value::String(s) => s.clone(),
        other => repr(other),
    });
    if let Some(d) = &description {
        canonical.insert("description".into(), Value::from(d.clone()));
    }
    let preset = match top.get("preset") {
        None => None,
        Some(Value::String(name)) if presets::document(name).is_some() => Some(name.clone()),
        Some(other) => {
            let name = other.as_str().map_or_else(|| repr(other), str::to_string);
            return err(format!(
                "policy.preset: unknown {}{}; allowed: {}",
                repr(other),
                suggest(&name, presets::NAMES),
                presets::NAMES.join(", ")
            ));
        }
    };
    if let Some(name) = &preset {
        canonical.insert("preset".into(), Value::from(name.clone()));
    }
    let base_dir = match top.get("base_dir") {
        None => None,
        Some(Value::String(dir)) if dir.starts_with('/') && !dir.contains('\0') => Some(PathBuf::from(dir)),
        Some(_) => return err("policy.base_dir: expected an absolute path"),
    };
    if let Some(dir) = top.get("base_dir") {
        canonical.insert("base_dir".into(), dir.clone());
    }
    let groups = match top.get("groups") {
        Some(raw) => {
            let (groups, normalised) = parse_groups(raw, "policy.groups")?;
            canonical.insert("groups".into(), normalised);
            groups
        }
        None => Vec::new(),
    };
    let defaults = match top.get("defaults") {
        Some(raw) => {
            let (spec, normalised) = schema::rule(raw, "policy.defaults")?;
            let empty = normalised.as_object().is_some_and(Map::is_empty);
            canonical.insert("defaults".into(), normalised);
            (!empty).then_some(spec)
        }
        None => None,
    };
    let auth = match top.get("auth") {
        Some(raw) => {
            let (auth, normalised) = parse_auth(raw)?;
            canonical.insert("auth".into(), normalised);
            auth
        }
        None => AuthSpec::default(),
    };
    let endpoints = match top.get("endpoints") {
        Some(raw) => {
            let (rules, normalised) = parse_endpoints(raw, "policy.endpoints")?;
            canonical.insert("endpoints".into(), normalised);
            rules
        }
        None => Vec::new(),
    };
    let preset_name = preset.as_deref().unwrap_or("default");
    let mut layers = preset_layers(preset_name)?;
    layers.extend(section_layers(defaults, &groups, endpoints, Rank::Policy, "policy:"));
    Ok(PolicyDocument {
        preset,
        base_dir,
        description,
        layers,
        auth,
        canonical: Value::Object(canonical),
        file: None,
        origin: String::new(),
    })
}

/// The layers of preset `name`, one rank below the policy's.
///
/// # Errors
/// An unknown preset name, with a suggestion.
pub fn preset_layers(name: &str) -> Result<Vec<Layer>> {
    let Some(doc) = presets::document(name) else {
        return err(format!(
            "unknown preset '{name}'{}; allowed: {}",
            suggest(name, presets::NAMES),
            presets::NAMES.join(", ")
        ));
    };
    let defaults = match doc.get("defaults") {
        Some(raw) => Some(schema::rule(raw, "preset.defaults")?.0),
        None => None,
    };
    let groups = match doc.get("groups") {
        Some(raw) => parse_groups(raw, "preset.groups")?.0,
        None => Vec::new(),
    };
    let endpoints = match doc.get("endpoints") {
        Some(raw) => parse_endpoints(raw, "preset.endpoints")?.0,
        None => Vec::new(),
    };
    let mut layers = section_layers(defaults, &groups, endpoints, Rank::Preset, &format!("preset:{name}:"));
    // Where the preset's own document switches an endpoint off already, its
    // power layer reports that rule, as the reference names it.
    let own = super::rules::compile(&layers, false)?;
    layers.extend(presets::power_layers(name, |e| {
        own.iter().find(|r| std::ptr::eq(r.endpoint, e)).filter(|r| !r.enabled).map(|r| r.disabled_by.clone())
    }));
    Ok(layers)
}

/// Layers for one document's sections: defaults, then groups, then endpoints, in written order.
fn section_layers(
    defaults: Option<RuleSpec>,
    groups: &[(Group, bool)],
    endpoints: EndpointRules,
    rank: Rank,
    origin: &str,
) -> Vec<Layer> {
    let mut layers = Vec::new();
    if let Some(rule) = defaults {
        layers.push(Layer { selector: Selector::Defaults, rank, rule, origin: format!("{origin}defaults") });
    }
    for (group, on) in groups {
        layers.push(Layer {
            selector: Selector::Group(*group),
            rank,
            rule: RuleSpec::enabled(*on),
            origin: format!("{origin}groups.{group}"),
        });
    }
    for (key, selector, rule) in endpoints {
        layers.push(Layer { selector, rank, rule, origin: format!("{origin}endpoints.{key}") });
    }
    layers
}

/// `groups`: a list of names to enable, or a map of names to switches.
fn parse_groups(raw: &Value, at: &str) -> Result<(Vec<(Group, bool)>, Value)> {
    let map: Map<String, Value> = match raw {
        Value::Array(items) => items
            .iter()
            .map(|v| v.as_str().map(|name| (name.to_string(), Value::Bool(true))))
            .collect::<Option<_>>()
            .ok_or_else(|| PolicyConfigError::new(format!("{at}: expected a list of group names")))?,
        other => other.as_object().cloned().unwrap_or_default(),
    };
    let names: Vec<&str> = Group::ALL.iter().map(|g| g.as_str()).collect();
    let checked = if raw.is_array() { &Value::Object(map.clone()) } else { raw };
    check_keys(checked, &names, at)?;
    let mut groups = Vec::new();
    for (name, on) in &map {
        let on = on.as_bool().ok_or_else(|| PolicyConfigError::new(format!("{at}.{name}: expected true/false")))?;
        if name == "core" && !on {
            return err(format!("{at}.core: the core group cannot be disabled"));
        }
        if let Some(group) = Group::from_name(name) {
            groups.push((group, on));
        }
    }
    Ok((groups, Value::Object(map)))
}

/// `endpoints`: selector (`files_list`, `files_*`, `group:process`) to rule.
fn parse_endpoints(raw: &Value, at: &str) -> Result<(EndpointRules, Value)> {
    let Some(map) = raw.as_object() else {
        return err(format!("{at}: expected an object"));
    };
    let mut rules = Vec::new();
    let mut normalised = Map::new();
    for (key, value) in map {
        let (spec, json) = schema::rule(value, &format!("{at}.{key}"))?;
        rules.push((key.clone(), selector(key, at)?, spec));
        normalised.insert(key.clone(), json);
    }
    Ok((rules, Value::Object(normalised)))
}

/// An `endpoints` key as a selector; exact ids and group names must exist.
fn selector(key: &str, at: &str) -> Result<Selector> {
    if let Some(name) = key.strip_prefix("group:") {
        return Group::from_name(name).map(Selector::Group).ok_or_else(|| {
            let choices: Vec<String> = Group::ALL.iter().map(|g| format!("group:{g}")).collect();
            PolicyConfigError::new(format!(
                "{at}.{key}: unknown group{}",
                suggest(key, choices.iter().map(String::as_str))
            ))
        });
    }
    let selector = Selector::parse(key);
    if matches!(selector, Selector::Exact(_)) && endpoints::find(key).is_none() {
        return err(format!("{at}.{key}: unknown endpoint{}", suggest(key, ENDPOINTS.iter().map(|e| e.id))));
    }
    Ok(selector)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn refused(doc: Value) -> String {
        parse(&doc).map(|_| ()).expect_err("refused").to_string()
    }

    fn origins(doc: &PolicyDocument) -> Vec<&str> {
        doc.layers.iter().map(|l| l.origin.as_str()).collect()
    }

    #[test]
    fn unknown_names_are_refused_with_their_path_and_a_suggestion() {
        assert_eq!(
            refused(json!({"endpoints": {"files_lst": {"enabled": true}}})),
            "policy.endpoints.files_lst: unknown endpoint (did you mean 'files_list'?)"
        );
        assert!(refused(json!({"endpoint": {}}))
            .starts_with("policy.endpoint: unknown key (did you mean 'endpoints'?); allowed: auth, base_dir"));
        assert_eq!(
            refused(json!({"preset": "harden"})),
            "policy.preset: unknown 'harden' (did you mean 'hardened'?); allowed: default, transfer-only, read-only, hardened, locked"
        );
        assert!(refused(json!({"groups": ["file_op"]}))
            .starts_with("policy.groups.file_op: unknown key (did you mean 'file_ops'?)"));
        assert_eq!(
            refused(json!({"endpoints": {"group:proces": {}}})),
            "policy.endpoints.group:proces: unknown group (did you mean 'group:process'?)"
        );
    }

    #[test]
    fn top_level_values_are_checked() {
        assert_eq!(refused(json!([])), "policy: expected an object, got list");
        assert_eq!(refused(json!({"version": 2})), "policy.version: unsupported 2; this server understands 1");
        assert_eq!(refused(json!({"version": true})), "policy.version: unsupported True; this server understands 1");
        assert_eq!(refused(json!({"base_dir": "rel"})), "policy.base_dir: expected an absolute path");
        assert_eq!(
            refused(json!({"groups": {"core": false}})),
            "policy.groups.core: the core group cannot be disabled"
        );
        assert_eq!(refused(json!({"groups": {"process": "no"}})), "policy.groups.process: expected true/false");
        assert_eq!(refused(json!({"groups": "x"})), "policy.groups: expected an object, got str");
        assert_eq!(refused(json!({"groups": [1]})), "policy.groups: expected a list of group names");
        assert_eq!(refused(json!({"endpoints": []})), "policy.endpoints: expected an object");
    }

    #[test]
    fn auth_tokens_need_an_id_scopes_and_exactly_one_secret() {
        let digest = "A".repeat(64);
        let ok = parse(&json!({"auth": {"tokens": [{"id": "ci", "scopes": ["files:*"], "token_sha256": digest}], "allow_anonymous": true, "anonymous_scopes": ["files:read"]}}))
            .expect("valid");
        assert_eq!(ok.auth.tokens[0].secret, TokenSecret::Sha256([0xaa; 32]));
        assert!(ok.auth.allow_anonymous);
        assert_eq!(ok.canonical["auth"]["tokens"][0]["token_sha256"], json!("a".repeat(64)), "digests are lowercased");
        let token = |t: Value| refused(json!({"auth": {"tokens": [t]}}));
        assert_eq!(
            token(json!({"id": "a", "scopes": ["*"]})),
            "policy.auth.tokens[0]: exactly one of 'token_env' or 'token_sha256' is required (plain tokens are never accepted inline)"
        );
        assert_eq!(
            token(json!({"id": "a", "scopes": ["*"], "token_sha256": "ab"})),
            "policy.auth.tokens[0].token_sha256: expected 64 hex characters"
        );
        assert_eq!(
            token(json!({"id": "a", "scopes": ["*"], "token_sha256": format!("+f{}", "0".repeat(62))})),
            "policy.auth.tokens[0].token_sha256: expected 64 hex characters"
        );
        assert_eq!(
            token(json!({"id": "", "scopes": ["*"], "token_env": "X"})),
            "policy.auth.tokens[0].id: expected a non-empty string"
        );
        assert_eq!(token(json!({"id": "a", "token_env": "X"})), "policy.auth.tokens[0].scopes: required");
        assert_eq!(
            token(json!({"id": "a", "scopes": ["*"], "token_env": ""})),
            "policy.auth.tokens[0].token_env: expected an env var name"
        );
        assert!(token(json!({"id": "a", "scopes": ["*"], "token_env": "X", "secret": 1}))
            .starts_with("policy.auth.tokens[0].secret: unknown key"));
        let twice = json!({"auth": {"tokens": [{"id": "a", "scopes": ["*"], "token_env": "X"}, {"id": "a", "scopes": ["*"], "token_env": "Y"}]}});
        assert_eq!(refused(twice), "policy.auth.tokens[1].id: duplicate identity 'a'");
        assert_eq!(refused(json!({"auth": {"tokens": {}}})), "policy.auth.tokens: expected a list");
        assert_eq!(
            refused(json!({"auth": {"allow_anonymous": "yes"}})),
            "policy.auth.allow_anonymous: expected true/false, got 'yes'"
        );
        assert!(refused(json!({"auth": {"token": []}}))
            .starts_with("policy.auth.token: unknown key (did you mean 'tokens'?)"));
    }

    #[test]
    fn layers_carry_the_reference_ranks_and_origins() {
        let doc = parse(&json!({
            "preset": "hardened",
            "defaults": {"audit": "all"},
            "groups": {"dev_tools": true},
            "endpoints": {"files_*": {"paths": {"read_only": true}}, "group:system": {"enabled": false}, "shell": {"enabled": true}},
        }))
        .expect("valid");
        let powers = doc.layers.iter().filter(|l| l.rank == Rank::Preset).count() - 7;
        assert_eq!(powers, super::presets::power_layers("hardened", |_| None).len(), "one layer per closed endpoint");
        assert_eq!(
            origins(&doc).into_iter().take(7).chain(origins(&doc).into_iter().skip(7 + powers)).collect::<Vec<_>>(),
            [
                "preset:hardened:defaults",
                "preset:hardened:groups.process",
                "preset:hardened:groups.terminal",
                "preset:hardened:groups.dev_tools",
                "preset:hardened:groups.browser",
                "preset:hardened:endpoints.env_set",
                "preset:hardened:endpoints.files_*",
                "policy:defaults",
                "policy:groups.dev_tools",
                "policy:endpoints.files_*",
                "policy:endpoints.group:system",
                "policy:endpoints.shell",
            ]
        );
        let preset = 7 + powers;
        assert!(doc.layers[..preset].iter().all(|l| l.rank == Rank::Preset));
        assert!(doc.layers[preset..].iter().all(|l| l.rank == Rank::Policy));
        assert_eq!(doc.layers[preset + 3].selector, Selector::Group(Group::System));
        assert_eq!(doc.preset.as_deref(), Some("hardened"));
    }

    #[test]
    fn the_canonical_form_is_the_reference_normalisation() {
        let doc = parse(&json!({"groups": ["dev_tools"], "defaults": {}, "description": 5,
            "endpoints": {"files_list": {"limits": {"max_request_bytes": "10 mb"}}}}))
        .expect("valid");
        assert_eq!(
            doc.canonical,
            json!({"version": 1, "description": "5", "groups": {"dev_tools": true}, "defaults": {},
                "endpoints": {"files_list": {"limits": {"max_request_bytes": 10_000_000}}}})
        );
        assert!(origins(&doc).iter().all(|o| *o != "policy:defaults"), "an empty defaults block adds no layer");
        assert!(doc.configured());
        assert!(!parse(&json!({"version": 1})).expect("valid").configured());
    }
}
