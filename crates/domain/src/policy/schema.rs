//! Validation of one policy rule and of its values, as the reference checks them.
//!
//! Every check names the JSON path of the mistake (`policy.endpoints.shell.limits.timeout_seconds`)
//! and, for unknown keys, suggests the closest known one. Each parser returns
//! the typed value and its normalised JSON (sizes become byte counts), which
//! feeds the canonical text the revision is computed from.

use std::collections::BTreeMap;

use abx_wire::endpoints::{Limit, Param};
use serde_json::{Map, Value};

use super::rules::{AuditMode, LimitValue, ParamValue, PathsSpec, RuleSpec, SymlinkMode};
use super::{suggest, PolicyConfigError};
use crate::pyrepr::type_name;

/// Keys a rule may have.
pub const RULE_KEYS: [&str; 6] = ["enabled", "scopes", "paths", "limits", "params", "audit"];
/// Keys of a rule's `paths` section.
pub const PATH_KEYS: [&str; 4] = ["allow", "deny", "read_only", "symlinks"];

type Result<T> = std::result::Result<T, PolicyConfigError>;

fn err<T>(message: impl Into<String>) -> Result<T> {
    Err(PolicyConfigError::new(message))
}

/// How a limit's value is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LimitKind {
    /// Bytes: an integer or `10MB`, `1.5GiB`.
    Size,
    /// A positive integer.
    Int,
    /// A positive number (seconds).
    Number,
}

fn limit_kind(limit: Limit) -> LimitKind {
    match limit {
        Limit::MaxRequestBytes | Limit::MaxBytes | Limit::MaxOutputBytes => LimitKind::Size,
        Limit::TimeoutSeconds | Limit::MaxDurationSeconds => LimitKind::Number,
        _ => LimitKind::Int,
    }
}

/// How a parameter's value is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ParamKind {
    Bool,
    Strings,
    Ints,
}

fn param_kind(param: Param) -> ParamKind {
    match param {
        Param::Overwrite | Param::BlockPrivateNetworks => ParamKind::Bool,
        Param::AllowedSignals => ParamKind::Ints,
        _ => ParamKind::Strings,
    }
}

/// A JSON value as Python's `repr` shows it, for messages.
pub fn repr(value: &Value) -> String {
    match value {
        Value::Null => "None".into(),
        Value::Bool(true) => "True".into(),
        Value::Bool(false) => "False".into(),
        Value::String(s) => format!("'{}'", s.replace('\\', "\\\\").replace('\'', "\\'")),
        other => other.to_string(),
    }
}

/// `value` as an object whose keys are all in `allowed`.
///
/// # Errors
/// Not an object, or an unknown key (with a suggestion and the allowed keys).
pub fn check_keys<'a>(value: &'a Value, allowed: &[&str], at: &str) -> Result<&'a Map<String, Value>> {
    let Some(map) = value.as_object() else {
        return err(format!("{at}: expected an object, got {}", type_name(value)));
    };
    for key in map.keys() {
        if !allowed.contains(&key.as_str()) {
            let mut sorted = allowed.to_vec();
            sorted.sort_unstable();
            return err(format!(
                "{at}.{key}: unknown key{}; allowed: {}",
                suggest(key, allowed.iter().copied()),
                sorted.join(", ")
            ));
        }
    }
    Ok(map)
}

/// Whether `scope` is well formed: `*`, `ns:*`, `ns:name` or `name`
/// (lowercase ASCII, digits, `_`, and `.`, `-`, `:` after the first character).
pub fn valid_scope(scope: &str) -> bool {
    fn word(s: &str, extra: &[char]) -> bool {
        let mut chars = s.chars();
        chars.next().is_some_and(|c| c.is_ascii_lowercase())
            && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || extra.contains(&c))
    }
    if scope == "*" {
        return true;
    }
    match scope.split_once(':') {
        Some((namespace, rest)) => word(namespace, &[]) && (rest == "*" || word(rest, &[':', '.', '-'])),
        None => word(scope, &['.', '-']),
    }
}

/// A list of scopes.
///
/// # Errors
/// Not a list of strings, or a malformed scope.
pub fn scopes(value: &Value, at: &str) -> Result<Vec<String>> {
    let list =
        strings(value).ok_or_else(|| PolicyConfigError::new(format!("{at}: expected a list of scope strings")))?;
    if let Some(bad) = list.iter().find(|s| !valid_scope(s)) {
        return err(format!("{at}: invalid scope '{bad}'"));
    }
    Ok(list)
}

fn strings(value: &Value) -> Option<Vec<String>> {
    value.as_array()?.iter().map(|v| v.as_str().map(str::to_string)).collect()
}

fn boolean(value: &Value, at: &str) -> Result<bool> {
    value.as_bool().ok_or_else(|| PolicyConfigError::new(format!("{at}: expected true/false, got {}", repr(value))))
}

/// A byte size: a positive integer, or a number with a unit (`KB`, `MB`,
/// `GB` are powers of 1000; `KiB`, `MiB`, `GiB` of 1024; `B` or none is bytes).
///
/// # Errors
/// Anything else, or a size that is not positive.
pub fn parse_size(value: &Value) -> Result<u64> {
    let invalid =
        || PolicyConfigError::new(format!("invalid size {} (use an integer or e.g. '5MB', '1GiB')", repr(value)));
    match value {
        Value::Number(n) if !n.is_f64() => match n.as_u64() {
            Some(size) if size > 0 => Ok(size),
            _ => err(format!("size must be positive, got {n}")),
        },
        Value::String(text) => {
            let text = text.trim();
            let split = text.find(|c: char| c.is_ascii_alphabetic()).unwrap_or(text.len());
            let (number, unit) = (text[..split].trim_end(), &text[split..]);
            let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
            let well_formed = match number.split_once('.') {
                Some((whole, fraction)) => digits(whole) && digits(fraction),
                None => digits(number),
            };
            let multiplier: u64 = match unit.to_ascii_lowercase().as_str() {
                "" | "b" => 1,
                "kb" => 1000,
                "mb" => 1000 * 1000,
                "gb" => 1000 * 1000 * 1000,
                "kib" => 1024,
                "mib" => 1024 * 1024,
                "gib" => 1024 * 1024 * 1024,
                _ => return Err(invalid()),
            };
            if !well_formed || !unit.bytes().all(|b| b.is_ascii_alphabetic()) {
                return Err(invalid());
            }
            let bytes = number.parse::<f64>().map_err(|_| invalid())? * multiplier as f64;
            if bytes >= 1.0 && bytes < u64::MAX as f64 {
                Ok(bytes as u64)
            } else {
                Err(invalid())
            }
        }
        _ => Err(invalid()),
    }
}

fn limit_value(limit: Limit, value: &Value, at: &str) -> Result<(LimitValue, Value)> {
    let is_int = matches!(value, Value::Number(n) if !n.is_f64());
    match limit_kind(limit) {
        LimitKind::Size => {
            let size = parse_size(value)?;
            Ok((LimitValue::Int(size), Value::from(size)))
        }
        LimitKind::Int => match value.as_u64().filter(|n| is_int && *n > 0) {
            Some(n) => Ok((LimitValue::Int(n), value.clone())),
            None => err(format!("{at}: expected a positive integer, got {}", repr(value))),
        },
        LimitKind::Number => match value.as_f64().filter(|n| n.is_finite() && *n > 0.0) {
            Some(_) if is_int => Ok((LimitValue::Int(value.as_u64().unwrap_or(1)), value.clone())),
            Some(n) => Ok((LimitValue::Number(n), value.clone())),
            None => err(format!("{at}: expected a positive number, got {}", repr(value))),
        },
    }
}

fn param_value(param: Param, value: &Value, at: &str) -> Result<ParamValue> {
    match param_kind(param) {
        ParamKind::Bool => boolean(value, at).map(ParamValue::Bool),
        ParamKind::Strings => strings(value)
            .map(ParamValue::Strings)
            .ok_or_else(|| PolicyConfigError::new(format!("{at}: expected a list of strings"))),
        ParamKind::Ints => value
            .as_array()
            .and_then(|items| {
                items.iter().map(|v| if v.is_boolean() { None } else { v.as_i64() }).collect::<Option<Vec<_>>>()
            })
            .map(ParamValue::Ints)
            .ok_or_else(|| PolicyConfigError::new(format!("{at}: expected a list of integers"))),
    }
}

fn paths(value: &Value, at: &str) -> Result<(PathsSpec, Value)> {
    let map = check_keys(value, &PATH_KEYS, at)?;
    let mut spec = PathsSpec::default();
    let mut out = Map::new();
    for key in ["allow", "deny"] {
        let Some(raw) = map.get(key) else { continue };
        let at = format!("{at}.{key}");
        let list = strings(raw).ok_or_else(|| PolicyConfigError::new(format!("{at}: expected a list of strings")))?;
        if key == "allow" {
            if let Some(relative) = list.iter().find(|p| !p.starts_with('/')) {
                return err(format!("{at}: '{relative}' must be an absolute directory"));
            }
        }
        if list.iter().any(|p| p.contains('\0')) {
            return err(format!("{at}: NUL byte in pattern"));
        }
        out.insert(key.into(), Value::from(list.clone()));
        if key == "allow" {
            spec.allow = Some(list);
        } else {
            spec.deny = list;
        }
    }
    if let Some(raw) = map.get("read_only") {
        spec.read_only = Some(boolean(raw, &format!("{at}.read_only"))?);
        out.insert("read_only".into(), raw.clone());
    }
    if let Some(raw) = map.get("symlinks") {
        spec.symlinks = Some(match raw.as_str() {
            Some("within") => SymlinkMode::Within,
            Some("never") => SymlinkMode::Never,
            _ => return err(format!("{at}.symlinks: expected 'within' or 'never'")),
        });
        out.insert("symlinks".into(), raw.clone());
    }
    Ok((spec, Value::Object(out)))
}

/// One rule (`defaults` or an `endpoints` entry), validated.
///
/// # Errors
/// An unknown key or a malformed value, naming its JSON path.
pub fn rule(value: &Value, at: &str) -> Result<(RuleSpec, Value)> {
    let map = check_keys(value, &RULE_KEYS, at)?;
    let mut spec = RuleSpec::default();
    let mut out = Map::new();
    if let Some(raw) = map.get("enabled") {
        let on = raw.as_bool().ok_or_else(|| PolicyConfigError::new(format!("{at}.enabled: expected true/false")))?;
        spec.enabled = Some(on);
        out.insert("enabled".into(), raw.clone());
    }
    if let Some(raw) = map.get("scopes") {
        let list = scopes(raw, &format!("{at}.scopes"))?;
        out.insert("scopes".into(), Value::from(list.clone()));
        spec.scopes = Some(list);
    }
    if let Some(raw) = map.get("audit") {
        spec.audit = Some(match raw.as_str() {
            Some("off") => AuditMode::Off,
            Some("deny") => AuditMode::Deny,
            Some("all") => AuditMode::All,
            _ => return err(format!("{at}.audit: expected one of ['off', 'deny', 'all']")),
        });
        out.insert("audit".into(), raw.clone());
    }
    if let Some(raw) = map.get("paths") {
        let (p, normalised) = paths(raw, &format!("{at}.paths"))?;
        spec.paths = Some(p);
        out.insert("paths".into(), normalised);
    }
    if let Some(raw) = map.get("limits") {
        let names: Vec<&str> = Limit::ALL.iter().map(|l| l.as_str()).collect();
        let section = check_keys(raw, &names, &format!("{at}.limits"))?;
        let mut normalised = Map::new();
        let mut limits = BTreeMap::new();
        for (key, value) in section {
            let limit = Limit::from_name(key)
                .ok_or_else(|| PolicyConfigError::new(format!("{at}.limits.{key}: unknown key")))?;
            let (typed, json) = limit_value(limit, value, &format!("{at}.limits.{key}"))?;
            limits.insert(limit, typed);
            normalised.insert(key.clone(), json);
        }
        spec.limits = limits;
        out.insert("limits".into(), Value::Object(normalised));
    }
    if let Some(raw) = map.get("params") {
        let names: Vec<&str> = Param::ALL.iter().map(|p| p.as_str()).collect();
        let section = check_keys(raw, &names, &format!("{at}.params"))?;
        let mut params = BTreeMap::new();
        for (key, value) in section {
            let param = Param::from_name(key)
                .ok_or_else(|| PolicyConfigError::new(format!("{at}.params.{key}: unknown key")))?;
            params.insert(param, param_value(param, value, &format!("{at}.params.{key}"))?);
        }
        spec.params = params;
        out.insert("params".into(), raw.clone());
    }
    Ok((spec, Value::Object(out)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rule_err(value: Value) -> String {
        rule(&value, "policy.endpoints.x").map(|_| ()).expect_err("refused").to_string()
    }

    #[test]
    fn sizes_use_the_reference_notation() {
        assert_eq!(parse_size(&json!(512)), Ok(512));
        assert_eq!(parse_size(&json!("10MB")), Ok(10_000_000));
        assert_eq!(parse_size(&json!(" 10 mb ")), Ok(10_000_000));
        assert_eq!(parse_size(&json!("1.5KiB")), Ok(1536));
        assert_eq!(parse_size(&json!("1GiB")), Ok(1 << 30));
        assert_eq!(parse_size(&json!("7")), Ok(7));
        assert_eq!(parse_size(&json!("3b")), Ok(3));
        for bad in [
            json!(0),
            json!(-1),
            json!(1.5),
            json!("0.0001KB"),
            json!("10XB"),
            json!("MB"),
            json!("1.MB"),
            json!(true),
            json!(null),
        ] {
            assert!(parse_size(&bad).is_err(), "{bad}");
        }
        assert_eq!(
            parse_size(&json!("10XB")).map_err(|e| e.to_string()),
            Err("invalid size '10XB' (use an integer or e.g. '5MB', '1GiB')".into())
        );
    }

    #[test]
    fn scopes_follow_the_reference_syntax() {
        for ok in ["*", "files:*", "files:read", "a:b:c", "x", "a.b-c", "ns:x.y-z", "a1_b:c2"] {
            assert!(valid_scope(ok), "{ok}");
        }
        for bad in ["", "Process:run", "1a", "a:", ":a", "a:*x", "files read", "a:B", "-a", "*:x"] {
            assert!(!valid_scope(bad), "{bad}");
        }
    }

    #[test]
    fn limits_are_typed_and_positive() {
        let (spec, normalised) =
            rule(&json!({"limits": {"max_request_bytes": "1KB", "timeout_seconds": 1.5, "rate_per_minute": 5}}), "r")
                .expect("valid");
        assert_eq!(spec.limits[&Limit::MaxRequestBytes], LimitValue::Int(1000));
        assert_eq!(spec.limits[&Limit::TimeoutSeconds], LimitValue::Number(1.5));
        assert_eq!(
            normalised,
            json!({"limits": {"max_request_bytes": 1000, "timeout_seconds": 1.5, "rate_per_minute": 5}})
        );
        assert_eq!(
            rule_err(json!({"limits": {"max_depth": 0}})),
            "policy.endpoints.x.limits.max_depth: expected a positive integer, got 0"
        );
        assert_eq!(
            rule_err(json!({"limits": {"max_depth": true}})),
            "policy.endpoints.x.limits.max_depth: expected a positive integer, got True"
        );
        assert_eq!(
            rule_err(json!({"limits": {"max_depth": 2.0}})),
            "policy.endpoints.x.limits.max_depth: expected a positive integer, got 2.0"
        );
        assert_eq!(
            rule_err(json!({"limits": {"timeout_seconds": "1"}})),
            "policy.endpoints.x.limits.timeout_seconds: expected a positive number, got '1'"
        );
        assert!(rule_err(json!({"limits": {"max_dept": 3}})).starts_with(
            "policy.endpoints.x.limits.max_dept: unknown key (did you mean 'max_depth'?); allowed: max_bytes, max_concurrency"
        ));
    }

    #[test]
    fn params_are_typed() {
        let (spec, _) =
            rule(&json!({"params": {"allowed_signals": [2, 15], "overwrite": false, "deny_commands": ["rm"]}}), "r")
                .expect("valid");
        assert_eq!(spec.params[&Param::AllowedSignals], ParamValue::Ints(vec![2, 15]));
        assert_eq!(spec.params[&Param::Overwrite], ParamValue::Bool(false));
        assert_eq!(
            rule_err(json!({"params": {"allowed_signals": [2, true]}})),
            "policy.endpoints.x.params.allowed_signals: expected a list of integers"
        );
        assert_eq!(
            rule_err(json!({"params": {"shells": "bash"}})),
            "policy.endpoints.x.params.shells: expected a list of strings"
        );
        assert_eq!(
            rule_err(json!({"params": {"overwrite": "no"}})),
            "policy.endpoints.x.params.overwrite: expected true/false, got 'no'"
        );
    }

    #[test]
    fn paths_need_absolute_roots_and_known_modes() {
        let (spec, _) = rule(
            &json!({"paths": {"allow": ["/srv"], "deny": ["*.pem"], "read_only": true, "symlinks": "never"}}),
            "r",
        )
        .expect("valid");
        let paths = spec.paths.expect("paths");
        assert_eq!(paths.allow, Some(vec!["/srv".to_string()]));
        assert_eq!((paths.read_only, paths.symlinks), (Some(true), Some(SymlinkMode::Never)));
        assert_eq!(
            rule_err(json!({"paths": {"allow": ["tmp"]}})),
            "policy.endpoints.x.paths.allow: 'tmp' must be an absolute directory"
        );
        assert_eq!(
            rule_err(json!({"paths": {"symlinks": "always"}})),
            "policy.endpoints.x.paths.symlinks: expected 'within' or 'never'"
        );
        assert_eq!(
            rule_err(json!({"paths": {"deny": ["a\u{0}"]}})),
            "policy.endpoints.x.paths.deny: NUL byte in pattern"
        );
        assert!(rule_err(json!({"paths": {"alow": []}}))
            .starts_with("policy.endpoints.x.paths.alow: unknown key (did you mean 'allow'?)"));
    }

    #[test]
    fn rule_keys_and_values_are_checked() {
        assert_eq!(rule_err(json!([])), "policy.endpoints.x: expected an object, got list");
        assert_eq!(rule_err(json!({"enabled": 1})), "policy.endpoints.x.enabled: expected true/false");
        assert_eq!(
            rule_err(json!({"audit": "none"})),
            "policy.endpoints.x.audit: expected one of ['off', 'deny', 'all']"
        );
        assert_eq!(rule_err(json!({"scopes": "x"})), "policy.endpoints.x.scopes: expected a list of scope strings");
        assert_eq!(
            rule_err(json!({"scopes": ["Process:run"]})),
            "policy.endpoints.x.scopes: invalid scope 'Process:run'"
        );
        assert!(rule_err(json!({"enable": true}))
            .starts_with("policy.endpoints.x.enable: unknown key (did you mean 'enabled'?)"));
    }
}
