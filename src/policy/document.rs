//! A policy document: the template author's rules, already validated.
//!
//! The JSON file format of the reference server (`version`, `preset`,
//! `base_dir`, `groups`, `defaults`, `auth`, `endpoints`) is parsed into a
//! [`PolicyDocument`]; the engine only sees its layers and auth section.

use std::collections::BTreeSet;
use std::path::PathBuf;

use super::rules::Layer;

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

/// A validated policy document.
#[derive(Debug, Clone, Default)]
pub struct PolicyDocument {
    /// Preset name (`default` when none).
    pub preset: Option<String>,
    /// Boundary directory for paths when rules allow none.
    pub base_dir: Option<PathBuf>,
    /// Rule layers of the preset and the document, lowest rank first.
    pub layers: Vec<Layer>,
    /// Authentication.
    pub auth: AuthSpec,
    /// Canonical JSON of the document, hashed into the revision.
    pub canonical: serde_json::Value,
}

impl PolicyDocument {
    /// Whether the document sets anything beyond the defaults.
    pub fn configured(&self) -> bool {
        self.canonical.as_object().is_some_and(|o| o.keys().any(|k| k != "version"))
    }
}

/// Loads the policy named by `--policy` / `--preset`.
///
/// # Errors
/// Policy files and presets are not understood by this build yet, so naming
/// one is refused rather than silently ignored.
pub fn load(
    policy: Option<&std::path::Path>,
    preset: Option<&str>,
) -> Result<Option<PolicyDocument>, super::PolicyConfigError> {
    match (policy, preset) {
        (None, None | Some("default")) => Ok(None),
        (Some(path), _) => Err(super::PolicyConfigError::new(format!(
            "cannot use policy file {}: policy files are not supported by this build yet",
            path.display()
        ))),
        (None, Some(name)) => {
            Err(super::PolicyConfigError::new(format!("preset '{name}' is not supported by this build yet")))
        }
    }
}
