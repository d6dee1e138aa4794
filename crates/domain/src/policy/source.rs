//! Where the policy comes from, in the reference's order:
//!
//! 1. `--policy FILE` (or the config file's `policy`), its `preset` replaced by `--preset` if given;
//! 2. `--preset NAME` (or `ABX_SERVER_PRESET`, or the config file's `preset`);
//! 3. `ABX_SERVER_POLICY`: the policy JSON inline;
//! 4. `ABX_SERVER_POLICY_FILE`: a policy file;
//! 5. `/etc/agent-sandbox/server-policy.json`, when it exists.
//!
//! The first that is set wins; none means the built-in defaults. A source
//! that is named but cannot be read or parsed is an error, never skipped.

use std::path::{Path, PathBuf};

use serde_json::Value;

use super::document::{self, PolicyDocument};
use super::PolicyConfigError;

/// Inline policy JSON.
pub const POLICY_ENV: &str = "ABX_SERVER_POLICY";
/// A policy file.
pub const POLICY_FILE_ENV: &str = "ABX_SERVER_POLICY_FILE";
/// The well-known policy file, read when nothing else names a policy.
pub const DEFAULT_POLICY_FILE: &str = "/etc/agent-sandbox/server-policy.json";

/// Every place a policy may be named.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PolicySources {
    /// `--policy FILE` (or the config file's `policy`).
    pub file: Option<PathBuf>,
    /// `--preset NAME` (or `ABX_SERVER_PRESET`, or the config file's `preset`).
    pub preset: Option<String>,
    /// `ABX_SERVER_POLICY`.
    pub inline: Option<String>,
    /// `ABX_SERVER_POLICY_FILE`.
    pub env_file: Option<PathBuf>,
    /// The well-known file, when it exists.
    pub well_known: Option<PathBuf>,
}

impl PolicySources {
    /// The sources named by `file` and `preset` and by the process environment.
    pub fn from_env(file: Option<PathBuf>, preset: Option<String>) -> Self {
        let var = |name| std::env::var(name).ok().filter(|v| !v.is_empty());
        PolicySources {
            file,
            preset,
            inline: var(POLICY_ENV),
            env_file: var(POLICY_FILE_ENV).map(PathBuf::from),
            well_known: Some(PathBuf::from(DEFAULT_POLICY_FILE)).filter(|p| p.is_file()),
        }
    }
}

/// Loads the policy the sources name, or `None` for the built-in defaults.
///
/// # Errors
/// A file that cannot be read, is YAML, or is not valid JSON; an unknown
/// preset; any mistake in the document.
pub fn load(sources: &PolicySources) -> Result<Option<PolicyDocument>, PolicyConfigError> {
    let doc = if let Some(path) = &sources.file {
        let mut raw = read_file(path)?;
        if let (Some(preset), Some(map)) = (&sources.preset, raw.as_object_mut()) {
            map.insert("preset".into(), Value::from(preset.clone()));
        }
        with_origin(document::parse(&raw)?, format!("file {}", path.display()), Some(path))
    } else if let Some(preset) = &sources.preset {
        document::preset_layers(preset)?;
        let raw = serde_json::json!({ "preset": preset });
        with_origin(document::parse(&raw)?, format!("preset {preset}"), None)
    } else if let Some(text) = &sources.inline {
        let raw = serde_json::from_str(text)
            .map_err(|e| PolicyConfigError::new(format!("{POLICY_ENV} is not valid JSON: {e}")))?;
        with_origin(document::parse(&raw)?, POLICY_ENV.to_string(), None)
    } else if let Some(path) = sources.env_file.as_ref().or(sources.well_known.as_ref()) {
        let raw = read_file(path)?;
        with_origin(document::parse(&raw)?, format!("file {}", path.display()), Some(path))
    } else {
        return Ok(None);
    };
    Ok(Some(doc))
}

fn with_origin(mut doc: PolicyDocument, origin: String, file: Option<&Path>) -> PolicyDocument {
    doc.origin = origin;
    doc.file = file.map(Path::to_path_buf);
    doc
}

/// Reads a JSON policy file.
fn read_file(path: &Path) -> Result<Value, PolicyConfigError> {
    let shown = path.display();
    if path.extension().is_some_and(|e| e == "yaml" || e == "yml") {
        return Err(PolicyConfigError::new(format!(
            "policy file {shown}: YAML policy files are not supported; convert it to JSON \
             (python3 -c 'import json,sys,yaml; json.dump(yaml.safe_load(sys.stdin), sys.stdout)' < in.yaml > out.json)"
        )));
    }
    let text = std::fs::read_to_string(path)
        .map_err(|e| PolicyConfigError::new(format!("cannot read policy file {shown}: {e}")))?;
    serde_json::from_str(&text)
        .map_err(|e| PolicyConfigError::new(format!("policy file {shown} is not valid JSON: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(dir: &Path, name: &str, text: &str) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, text).expect("write");
        path
    }

    fn preset_of(sources: &PolicySources) -> Option<String> {
        load(sources).expect("loads").map(|d| d.preset.unwrap_or_else(|| "default".into()))
    }

    #[test]
    fn sources_are_taken_in_the_reference_order() {
        let dir = tempfile::tempdir().expect("tempdir");
        let flag = file(dir.path(), "flag.json", r#"{"preset": "locked"}"#);
        let env = file(dir.path(), "env.json", r#"{"preset": "read-only"}"#);
        let well_known = file(dir.path(), "well-known.json", r#"{"preset": "hardened"}"#);
        let all = PolicySources {
            file: Some(flag.clone()),
            preset: None,
            inline: Some(r#"{"preset": "transfer-only"}"#.into()),
            env_file: Some(env.clone()),
            well_known: Some(well_known.clone()),
        };
        assert_eq!(preset_of(&all).as_deref(), Some("locked"));
        let overridden = PolicySources { preset: Some("hardened".into()), ..all.clone() };
        let doc = load(&overridden).expect("loads").expect("doc");
        assert_eq!(doc.preset.as_deref(), Some("hardened"), "--preset replaces the file's preset");
        assert_eq!(doc.file.as_deref(), Some(flag.as_path()));
        let preset = PolicySources { file: None, ..overridden };
        assert_eq!(load(&preset).expect("loads").map(|d| d.origin), Some("preset hardened".into()));
        let inline = PolicySources { preset: None, ..preset };
        assert_eq!(preset_of(&inline).as_deref(), Some("transfer-only"));
        let env_file = PolicySources { inline: None, ..inline };
        assert_eq!(preset_of(&env_file).as_deref(), Some("read-only"));
        let fallback = PolicySources { env_file: None, ..env_file };
        assert_eq!(preset_of(&fallback).as_deref(), Some("hardened"));
        assert!(load(&PolicySources::default()).expect("loads").is_none());
    }

    #[test]
    fn a_preset_alone_is_a_configured_document() {
        let doc = load(&PolicySources { preset: Some("default".into()), ..PolicySources::default() })
            .expect("loads")
            .expect("doc");
        assert!(doc.configured(), "as the reference: {{\"preset\": \"default\"}} is configuration");
        let err =
            load(&PolicySources { preset: Some("lockd".into()), ..PolicySources::default() }).expect_err("unknown");
        assert!(err.to_string().contains("unknown preset 'lockd' (did you mean 'locked'?)"), "{err}");
    }

    #[test]
    fn unreadable_yaml_and_malformed_sources_are_errors() {
        let dir = tempfile::tempdir().expect("tempdir");
        let missing = PolicySources { file: Some(dir.path().join("nope.json")), ..PolicySources::default() };
        assert!(load(&missing).expect_err("missing").to_string().starts_with("cannot read policy file"));
        let yaml = file(dir.path(), "p.yaml", "preset: locked\n");
        let err = load(&PolicySources { file: Some(yaml), ..PolicySources::default() }).expect_err("yaml");
        assert!(err.to_string().contains("YAML policy files are not supported"), "{err}");
        let bad = file(dir.path(), "bad.json", "{");
        let err = load(&PolicySources { env_file: Some(bad), ..PolicySources::default() }).expect_err("bad JSON");
        assert!(err.to_string().contains("is not valid JSON"), "{err}");
        let inline =
            PolicySources { inline: Some("{\"endpoints\": {\"shel\": {}}}".into()), ..PolicySources::default() };
        assert_eq!(
            load(&inline).map(|_| ()).expect_err("unknown").to_string(),
            "policy.endpoints.shel: unknown endpoint (did you mean 'shell'?)"
        );
    }
}
