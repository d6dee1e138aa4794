//! Rule layers and their merge into one [`EffectiveRule`] per endpoint.
//!
//! Every policy input (built-in defaults, preset, policy document,
//! `ABX_SERVER_ENABLED_GROUPS`) becomes a list of [`Layer`]s: a selector
//! (defaults, `group:x`, a glob or an exact id), a rank and a partial rule.
//! Layers are applied from least to most specific selector kind, then by
//! rank, then by glob prefix length, then in order. For `enabled`, the last
//! (kind, rank) bucket decides and any `false` in it wins, exactly as the
//! reference server does.

use std::collections::BTreeMap;
use std::path::PathBuf;

use abx_wire::endpoints::{Endpoint, Group, Limit, Param, ENDPOINTS};
use serde::Serialize;

use super::{Denial, PolicyConfigError};

/// Which endpoints a layer applies to.
#[derive(Debug, Clone, PartialEq)]
pub enum Selector {
    /// Every endpoint (a `defaults` block).
    Defaults,
    /// Every endpoint of a group.
    Group(Group),
    /// Endpoint ids matching a glob (`files_*`).
    Glob(String),
    /// One endpoint id.
    Exact(String),
}

impl Selector {
    /// Parses a selector key of a policy's `endpoints` map.
    pub fn parse(key: &str) -> Selector {
        if key.contains(['*', '?', '[']) {
            Selector::Glob(key.to_string())
        } else {
            Selector::Exact(key.to_string())
        }
    }

    /// How specific the selector is for `endpoint`, or `None` when it does not
    /// select it: defaults < group < glob < the endpoint's governing id < its own id.
    ///
    /// An extension endpoint (see [`Endpoint::governed_by`]) is selected by
    /// every selector that selects the reference endpoint governing it (its
    /// group, a glob matching its id, its id), so a policy written for the
    /// reference server governs the extension the same way, whatever port
    /// serves it; a rule naming the extension's own id is more specific still.
    fn specificity(&self, endpoint: &Endpoint) -> Option<u8> {
        let governing = endpoint.governed_by.and_then(abx_wire::endpoints::find);
        match self {
            Selector::Defaults => Some(0),
            Selector::Group(g) => (*g == endpoint.group || governing.is_some_and(|e| e.group == *g)).then_some(1),
            Selector::Glob(p) => {
                (glob_matches(p, endpoint.id) || governing.is_some_and(|e| glob_matches(p, e.id))).then_some(2)
            }
            Selector::Exact(id) if id == endpoint.id => Some(4),
            Selector::Exact(id) => (endpoint.governed_by == Some(id.as_str())).then_some(3),
        }
    }

    fn literal_prefix_len(&self) -> usize {
        match self {
            Selector::Glob(p) => p.split('*').next().map_or(0, str::len),
            Selector::Exact(p) => p.len(),
            _ => 0,
        }
    }

    /// Whether the selector applies to `endpoint`.
    pub fn matches(&self, endpoint: &Endpoint) -> bool {
        self.specificity(endpoint).is_some()
    }
}

/// `fnmatch`-style matching of `*`, `?` and `[...]` against a whole id.
fn glob_matches(pattern: &str, text: &str) -> bool {
    globset::Glob::new(pattern).map(|g| g.compile_matcher().is_match(text)).unwrap_or(false)
}

/// Where a layer comes from; a higher rank wins at the same selector kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Rank {
    /// Built-in defaults (opt-in groups start disabled).
    Default = 0,
    /// The preset named by the policy or `--preset`.
    Preset = 2,
    /// The policy document.
    Policy = 3,
    /// `ABX_SERVER_ENABLED_GROUPS`.
    Env = 4,
}

/// When to write an audit line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum AuditMode {
    /// Never.
    Off,
    /// For refused requests.
    #[default]
    Deny,
    /// For every request.
    All,
}

/// How symlinks inside paths are treated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SymlinkMode {
    /// Allowed when the target stays inside an allowed directory.
    #[default]
    Within,
    /// Refused.
    Never,
}

/// A limit's value: a count or byte size, or a number of seconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(untagged)]
pub enum LimitValue {
    /// Counts and byte sizes.
    Int(u64),
    /// Durations in seconds.
    Number(f64),
}

impl LimitValue {
    /// The value as a float.
    pub fn as_f64(self) -> f64 {
        match self {
            LimitValue::Int(v) => v as f64,
            LimitValue::Number(v) => v,
        }
    }

    /// The value as an integer (seconds are truncated, at least 1).
    pub fn as_u64(self) -> u64 {
        match self {
            LimitValue::Int(v) => v,
            LimitValue::Number(v) => (v as u64).max(1),
        }
    }
}

/// A parameter's value.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum ParamValue {
    /// A switch.
    Bool(bool),
    /// A list of names or patterns.
    Strings(Vec<String>),
    /// A list of numbers (signals).
    Ints(Vec<i64>),
}

/// The `paths` section of a rule.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PathsSpec {
    /// Allowed root directories (replace the base dir).
    pub allow: Option<Vec<String>>,
    /// Deny patterns (added to those of earlier layers).
    pub deny: Vec<String>,
    /// Refuse writes and deletes.
    pub read_only: Option<bool>,
    /// Symlink handling.
    pub symlinks: Option<SymlinkMode>,
}

/// A partial rule, as written in one layer.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RuleSpec {
    /// Switch the endpoint on or off.
    pub enabled: Option<bool>,
    /// Replace the required scopes.
    pub scopes: Option<Vec<String>>,
    /// Path rules.
    pub paths: Option<PathsSpec>,
    /// Limits to set.
    pub limits: BTreeMap<Limit, LimitValue>,
    /// Parameters to set.
    pub params: BTreeMap<Param, ParamValue>,
    /// Audit mode.
    pub audit: Option<AuditMode>,
}

impl RuleSpec {
    /// A rule that only switches endpoints on or off.
    pub fn enabled(on: bool) -> Self {
        RuleSpec { enabled: Some(on), ..RuleSpec::default() }
    }
}

/// One rule of the policy: `rule` applies to the endpoints `selector` selects.
#[derive(Debug, Clone)]
pub struct Layer {
    /// Which endpoints.
    pub selector: Selector,
    /// Precedence of the source.
    pub rank: Rank,
    /// What to apply.
    pub rule: RuleSpec,
    /// Where it came from (`policy:groups.process`), reported when it disables.
    pub origin: String,
}

/// The built-in layers: every opt-in group starts disabled.
pub fn baseline_layers() -> Vec<Layer> {
    Group::ALL
        .into_iter()
        .filter(|g| g.opt_in())
        .map(|g| Layer {
            selector: Selector::Group(g),
            rank: Rank::Default,
            rule: RuleSpec::enabled(false),
            origin: format!("default:opt-in:{g}"),
        })
        .collect()
}

/// Layers enabling `groups`, as `ABX_SERVER_ENABLED_GROUPS` does.
pub fn enabled_group_layers(groups: &[Group], rank: Rank, origin: &str) -> Vec<Layer> {
    groups
        .iter()
        .map(|g| Layer {
            selector: Selector::Group(*g),
            rank,
            rule: RuleSpec::enabled(true),
            origin: format!("{origin}:{g}"),
        })
        .collect()
}

/// The merged rule of one endpoint.
#[derive(Debug, Clone)]
pub struct EffectiveRule {
    /// The endpoint.
    pub endpoint: &'static Endpoint,
    /// Whether it answers at all.
    pub enabled: bool,
    /// Origin of the layer that disabled it; empty when enabled.
    pub disabled_by: String,
    /// Scopes a caller needs.
    pub scopes: Vec<String>,
    /// Allowed roots (empty: the base dir).
    pub allow: Vec<PathBuf>,
    /// Deny patterns.
    pub deny: Vec<String>,
    /// Whether writes and deletes are refused.
    pub read_only: bool,
    /// Symlink handling.
    pub symlinks: SymlinkMode,
    /// Limits set by the policy.
    pub limits: BTreeMap<Limit, LimitValue>,
    /// Parameters set by the policy.
    pub params: BTreeMap<Param, ParamValue>,
    /// Audit mode.
    pub audit: AuditMode,
}

impl EffectiveRule {
    /// Why the endpoint answers 404, naming the rule that decided.
    pub fn disabled_message(&self) -> String {
        let id = self.endpoint.id;
        match self.disabled_by.strip_prefix("default:opt-in:") {
            Some(group) => format!(
                "Endpoint '{id}' is disabled: group '{group}' is opt-in. Enable the group \
                 (ABX_SERVER_ENABLED_GROUPS={group}, policy groups: [{group}]) or this endpoint \
                 (policy endpoints.{id}.enabled: true)"
            ),
            None => {
                let origin = if self.disabled_by.is_empty() { "policy" } else { &self.disabled_by };
                format!("Endpoint '{id}' is disabled by rule {origin}")
            }
        }
    }

    /// The refusal of the switched-off endpoint: a power a preset closes
    /// (origin `preset:NAME:powers.POWER`) is a permission refusal, any other
    /// switch answers as the reference's does.
    pub fn disabled(&self) -> Denial {
        let power = self
            .disabled_by
            .strip_prefix("preset:")
            .and_then(|r| r.split_once(':'))
            .is_some_and(|(_, what)| what.starts_with("powers."));
        Denial::EndpointDisabled { message: self.disabled_message(), rule: self.disabled_by.clone(), power }
    }

    /// The limit `key`, if the policy sets it.
    pub fn limit(&self, key: Limit) -> Option<LimitValue> {
        self.limits.get(&key).copied()
    }

    /// The parameter `key`, if the policy sets it.
    pub fn param(&self, key: Param) -> Option<&ParamValue> {
        self.params.get(&key)
    }
}

/// Params whose lists accumulate across layers (deny semantics).
fn is_union_param(param: Param) -> bool {
    matches!(param, Param::DenyExtensions | Param::DenyCommands | Param::DenyVars | Param::EnvDeny | Param::UrlDeny)
}

/// Merges `layers` into one rule per endpoint of [`ENDPOINTS`], in table order.
///
/// # Errors
/// With `strict`, an exact selector naming an unknown endpoint, or setting
/// paths, limits or params the endpoint does not take, is refused.
pub fn compile(layers: &[Layer], strict: bool) -> Result<Vec<EffectiveRule>, PolicyConfigError> {
    if strict {
        validate(layers)?;
    }
    ENDPOINTS.iter().map(|ep| merge(ep, &ordered_for(layers, ep), strict)).collect()
}

/// The layers selecting `ep`, least specific first, each with its specificity:
/// by specificity, then rank, then glob prefix length, then declaration order.
fn ordered_for<'a>(layers: &'a [Layer], ep: &Endpoint) -> Vec<(u8, &'a Layer)> {
    let mut selected: Vec<(u8, usize, &Layer)> =
        layers.iter().enumerate().filter_map(|(i, l)| l.selector.specificity(ep).map(|k| (k, i, l))).collect();
    selected.sort_by_key(|&(k, i, l)| (k, l.rank, l.selector.literal_prefix_len(), i));
    selected.into_iter().map(|(k, _, l)| (k, l)).collect()
}

fn validate(layers: &[Layer]) -> Result<(), PolicyConfigError> {
    for layer in layers {
        if let Selector::Exact(id) = &layer.selector {
            if abx_wire::endpoints::find(id).is_none() {
                let ids = ENDPOINTS.iter().map(|e| e.id);
                return Err(PolicyConfigError::new(format!(
                    "policy.endpoints.{id}: unknown endpoint{}",
                    super::suggest(id, ids)
                )));
            }
        }
    }
    Ok(())
}

fn merge(ep: &'static Endpoint, ordered: &[(u8, &Layer)], strict: bool) -> Result<EffectiveRule, PolicyConfigError> {
    let mut rule = EffectiveRule {
        endpoint: ep,
        enabled: true,
        disabled_by: String::new(),
        scopes: ep.scopes.iter().map(|s| s.to_string()).collect(),
        allow: Vec::new(),
        deny: Vec::new(),
        read_only: false,
        symlinks: SymlinkMode::Within,
        limits: BTreeMap::new(),
        params: BTreeMap::new(),
        audit: AuditMode::Deny,
    };
    // The last (kind, rank) bucket with an opinion on `enabled` decides.
    let mut last_bucket: Option<((u8, Rank), bool, String)> = None;
    for &(specificity, layer) in ordered {
        let spec = &layer.rule;
        // Only a rule naming this very endpoint must fit it; one naming the
        // reference endpoint it extends applies where it fits.
        let exact = strict && matches!(&layer.selector, Selector::Exact(id) if id == ep.id);
        let not_applicable = |what: String| {
            PolicyConfigError::new(format!("policy.endpoints.{}.{what}: not applicable to endpoint '{}'", ep.id, ep.id))
        };
        if let Some(on) = spec.enabled {
            let key = (specificity, layer.rank);
            match &mut last_bucket {
                Some((k, enabled, origin)) if *k == key => {
                    if *enabled && !on {
                        *enabled = false;
                        *origin = layer.origin.clone();
                    }
                }
                _ => last_bucket = Some((key, on, if on { String::new() } else { layer.origin.clone() })),
            }
        }
        if let Some(scopes) = &spec.scopes {
            rule.scopes = scopes.clone();
        }
        if let Some(audit) = spec.audit {
            rule.audit = audit;
        }
        if let Some(paths) = &spec.paths {
            if exact && !ep.paths {
                return Err(not_applicable("paths".into()));
            }
            if ep.paths {
                if let Some(allow) = &paths.allow {
                    rule.allow = allow.iter().map(PathBuf::from).collect();
                }
                for d in &paths.deny {
                    if !rule.deny.contains(d) {
                        rule.deny.push(d.clone());
                    }
                }
                rule.read_only = paths.read_only.unwrap_or(rule.read_only);
                rule.symlinks = paths.symlinks.unwrap_or(rule.symlinks);
            }
        }
        for (key, value) in &spec.limits {
            if !ep.accepts_limit(*key) {
                if exact {
                    return Err(not_applicable(format!("limits.{key}")));
                }
                continue;
            }
            rule.limits.insert(*key, *value);
        }
        for (key, value) in &spec.params {
            if !ep.accepts_param(*key) {
                if exact {
                    return Err(not_applicable(format!("params.{key}")));
                }
                continue;
            }
            let merged = match (is_union_param(*key), rule.params.get(key), value) {
                (true, Some(ParamValue::Strings(old)), ParamValue::Strings(new)) => {
                    let mut all = old.clone();
                    all.extend(new.iter().filter(|v| !old.contains(v)).cloned());
                    ParamValue::Strings(all)
                }
                _ => value.clone(),
            };
            rule.params.insert(*key, merged);
        }
    }
    if let Some((_, enabled, origin)) = last_bucket {
        rule.enabled = enabled;
        rule.disabled_by = origin;
    }
    if ep.is_core() {
        rule.enabled = true;
        rule.disabled_by.clear();
    }
    Ok(rule)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule<'a>(rules: &'a [EffectiveRule], id: &str) -> &'a EffectiveRule {
        rules.iter().find(|r| r.endpoint.id == id).expect("known endpoint")
    }

    fn layer(selector: Selector, rank: Rank, rule: RuleSpec, origin: &str) -> Layer {
        Layer { selector, rank, rule, origin: origin.into() }
    }

    #[test]
    fn opt_in_groups_start_disabled_with_their_origin() {
        let rules = compile(&baseline_layers(), true).expect("compiles");
        let code = rule(&rules, "code_run");
        assert!(!code.enabled);
        assert_eq!(code.disabled_by, "default:opt-in:dev_tools");
        assert!(code.disabled_message().contains("ABX_SERVER_ENABLED_GROUPS=dev_tools"));
        assert!(rule(&rules, "shell").enabled);
        assert!(rule(&rules, "agents_models_list").disabled_message().contains("group 'agents'"));
    }

    #[test]
    fn env_groups_override_the_defaults() {
        let mut layers = baseline_layers();
        layers.extend(enabled_group_layers(&[Group::DevTools], Rank::Env, "env:ABX_SERVER_ENABLED_GROUPS"));
        let rules = compile(&layers, true).expect("compiles");
        assert!(rule(&rules, "code_run").enabled);
        assert!(!rule(&rules, "browser_pdf").enabled);
    }

    #[test]
    fn exact_beats_glob_beats_group_whatever_the_rank() {
        let layers = vec![
            layer(Selector::Exact("files_stat".into()), Rank::Preset, RuleSpec::enabled(true), "preset"),
            layer(Selector::Glob("files_*".into()), Rank::Policy, RuleSpec::enabled(false), "policy:glob"),
            layer(Selector::Group(Group::FileOps), Rank::Env, RuleSpec::enabled(true), "env"),
        ];
        let rules = compile(&layers, true).expect("compiles");
        assert!(rule(&rules, "files_stat").enabled);
        assert!(!rule(&rules, "files_list").enabled);
        assert_eq!(rule(&rules, "files_list").disabled_by, "policy:glob");
    }

    #[test]
    fn a_disable_in_the_deciding_bucket_wins() {
        let layers = vec![
            layer(Selector::Group(Group::Process), Rank::Policy, RuleSpec::enabled(false), "policy:groups.process"),
            layer(Selector::Group(Group::Process), Rank::Policy, RuleSpec::enabled(true), "policy:other"),
        ];
        let rules = compile(&layers, true).expect("compiles");
        assert_eq!(rule(&rules, "shell").disabled_by, "policy:groups.process");
    }

    #[test]
    fn core_endpoints_cannot_be_disabled() {
        let layers = vec![layer(Selector::Glob("*".into()), Rank::Policy, RuleSpec::enabled(false), "p")];
        let rules = compile(&layers, true).expect("compiles");
        assert!(rule(&rules, "health").enabled && rule(&rules, "capabilities").enabled);
        assert!(!rule(&rules, "shell").enabled);
    }

    #[test]
    fn unknown_exact_selectors_are_refused_with_a_suggestion() {
        let layers = vec![layer(Selector::Exact("files_lst".into()), Rank::Policy, RuleSpec::enabled(true), "p")];
        let err = compile(&layers, true).expect_err("unknown endpoint");
        assert!(err.to_string().contains("did you mean 'files_list'"), "{err}");
    }

    #[test]
    fn limits_apply_only_where_accepted() {
        let mut spec = RuleSpec::default();
        spec.limits.insert(Limit::MaxDepth, LimitValue::Int(3));
        let glob = vec![layer(Selector::Glob("files_*".into()), Rank::Policy, spec.clone(), "p")];
        let rules = compile(&glob, true).expect("globs skip endpoints without the limit");
        assert_eq!(rule(&rules, "files_list").limit(Limit::MaxDepth), Some(LimitValue::Int(3)));
        assert_eq!(rule(&rules, "files_stat").limit(Limit::MaxDepth), None);
        let exact = vec![layer(Selector::Exact("files_stat".into()), Rank::Policy, spec, "p")];
        assert!(compile(&exact, true).is_err());
    }

    #[test]
    fn extensions_follow_the_rules_of_the_reference_endpoint_they_extend() {
        let mut restricted = RuleSpec::enabled(true);
        restricted.paths = Some(PathsSpec { allow: Some(vec!["/srv/out".into()]), ..PathsSpec::default() });
        let layers = vec![
            layer(Selector::Glob("*".into()), Rank::Preset, RuleSpec::enabled(false), "preset"),
            layer(Selector::Exact("files_download_stream".into()), Rank::Preset, restricted, "preset:dl"),
            layer(Selector::Exact("files_upload_stream".into()), Rank::Policy, RuleSpec::enabled(false), "policy:up"),
        ];
        let rules = compile(&layers, true).expect("compiles");
        let read = rule(&rules, "files_content_read");
        assert!(read.enabled, "enabled with files_download_stream");
        assert_eq!(read.allow, [PathBuf::from("/srv/out")], "and confined like it");
        assert_eq!(rule(&rules, "files_content_write").disabled_by, "policy:up", "disabled with files_upload_stream");
        assert!(!rule(&rules, "files_upload_status").enabled);
        assert!(!rule(&rules, "files_stat").enabled, "other endpoints are untouched");
    }

    #[test]
    fn a_rule_naming_the_extension_itself_beats_its_reference_endpoint() {
        let layers = vec![
            layer(Selector::Exact("files_content_read".into()), Rank::Preset, RuleSpec::enabled(false), "own"),
            layer(Selector::Exact("files_download_stream".into()), Rank::Policy, RuleSpec::enabled(true), "reference"),
        ];
        let rules = compile(&layers, true).expect("compiles");
        assert_eq!(rule(&rules, "files_content_read").disabled_by, "own");
        assert!(rule(&rules, "files_download_stream").enabled);
    }

    #[test]
    fn deny_params_accumulate_across_layers() {
        let deny = |v: &str| {
            let mut spec = RuleSpec::default();
            spec.params.insert(Param::DenyCommands, ParamValue::Strings(vec![v.into()]));
            spec
        };
        let layers = vec![
            layer(Selector::Group(Group::Process), Rank::Preset, deny("rm"), "a"),
            layer(Selector::Exact("shell".into()), Rank::Policy, deny("curl"), "b"),
        ];
        let rules = compile(&layers, true).expect("compiles");
        assert_eq!(
            rule(&rules, "shell").param(Param::DenyCommands),
            Some(&ParamValue::Strings(vec!["rm".into(), "curl".into()]))
        );
    }
}
