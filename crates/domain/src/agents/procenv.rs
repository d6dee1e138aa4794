//! A turn's process environment and files: the variables a CLI inherits
//! (an allowlist of the daemon's, never its token), the workspace
//! directory, and the config files adapters ask for.

use std::collections::BTreeMap;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::adapters::{Adapter, InvocationFile};
use super::error::Failure;
use super::spec::AgentSpec;

/// Server variables every CLI inherits.
const ALLOWED: [&str; 30] = [
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "LANG",
    "LANGUAGE",
    "TERM",
    "TMPDIR",
    "TZ",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "REQUESTS_CA_BUNDLE",
    "CURL_CA_BUNDLE",
    "NODE_EXTRA_CA_CERTS",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "ALL_PROXY",
    "http_proxy",
    "https_proxy",
    "no_proxy",
    "all_proxy",
    "XDG_CONFIG_HOME",
    "XDG_DATA_HOME",
    "XDG_CACHE_HOME",
    "XDG_STATE_HOME",
    "CODEX_HOME",
    "CLAUDE_CONFIG_DIR",
    "QWEN_HOME",
];
/// Prefixes of server variables every CLI inherits.
const ALLOWED_PREFIXES: [&str; 3] = ["LC_", "NPM_CONFIG_", "npm_config_"];
const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// The allowlisted part of `source` (the children's environment), plus `extra` names.
pub fn base_env(source: &BTreeMap<String, String>, extra: &[String]) -> BTreeMap<String, String> {
    let mut env: BTreeMap<String, String> = source
        .iter()
        .filter(|(k, _)| {
            ALLOWED.contains(&k.as_str()) || extra.contains(k) || ALLOWED_PREFIXES.iter().any(|p| k.starts_with(p))
        })
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    env.entry("PATH".into()).or_insert_with(|| DEFAULT_PATH.into());
    if !env.contains_key("HOME") {
        if let Some(home) = std::env::var_os("HOME") {
            env.insert("HOME".into(), home.to_string_lossy().into_owned());
        }
    }
    env.entry("NO_COLOR".into()).or_insert_with(|| "1".into());
    env
}

/// The CLI's whole environment; later wins: allowlist < the runtime's own
/// server variables < the adapter's < the spec's `env` < `secrets` < MCP carriers.
pub fn child_env(
    source: &BTreeMap<String, String>,
    extra: &[String],
    adapter: &dyn Adapter,
    adapter_env: &BTreeMap<String, String>,
    spec: &AgentSpec,
) -> BTreeMap<String, String> {
    let mut env = base_env(source, extra);
    for name in adapter.descriptor().passthrough_env {
        if let Some(value) = source.get(*name) {
            env.insert((*name).to_string(), value.clone());
        }
    }
    env.extend(adapter_env.iter().map(|(k, v)| (k.clone(), v.clone())));
    env.extend(spec.env.iter().map(|(k, v)| (k.clone(), v.clone())));
    env.extend(spec.secrets.iter().map(|(k, v)| (k.clone(), v.clone())));
    env.extend(spec.mcp_env());
    env
}

/// The executable `program` names on `path` (`None` when absent).
pub fn which(program: &str, path: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let executable = |p: &Path| p.metadata().is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0);
    if program.contains('/') {
        let p = PathBuf::from(program);
        return executable(&p).then_some(p);
    }
    path.split(':').filter(|d| !d.is_empty()).map(|d| Path::new(d).join(program)).find(|p| executable(p))
}

/// Creates the workspace directory if needed, owned by `user` (the user the
/// session owner's CLIs run as) when it names one.
///
/// # Errors
/// A `workspace_error` failure when it cannot be created.
pub fn prepare_workspace(path: &str, user: Option<&crate::accounts::Account>) -> Result<PathBuf, Failure> {
    let dir = PathBuf::from(path);
    let created = !dir.exists();
    if let Err(e) = std::fs::create_dir_all(&dir) {
        return Err(Failure::new("workspace_error", format!("cannot create workspace {path}: {e}")));
    }
    if created {
        // Created for the owner's CLI: it runs as the owner identity's user, when it names one.
        if let Err(e) = crate::accounts::give(user, &dir) {
            return Err(Failure::new("workspace_error", format!("cannot give workspace {path} to its user: {e}")));
        }
    }
    Ok(dir)
}

/// Writes (or merges into) one file an adapter asked for, owned by `user`
/// (the user the CLI runs as) when it names one.
///
/// # Errors
/// It cannot be written.
pub fn write_file(file: &InvocationFile, user: Option<&crate::accounts::Account>) -> std::io::Result<()> {
    if let Some(parent) = file.path.parent() {
        let created = !parent.exists();
        super::journal::private_dir(parent)?;
        if created {
            crate::accounts::give(user, parent)?;
        }
    }
    let mut content = file.content.clone();
    if let Some(key) = file.merge_key {
        if let Some(merged) = merge_json(&file.path, &file.content, key) {
            content = merged;
        }
    }
    let mut out = std::fs::OpenOptions::new().create(true).write(true).truncate(true).mode(0o600).open(&file.path)?;
    out.write_all(&content)?;
    // The CLI that reads it runs as `user`, when the session owner names one.
    crate::accounts::give(user, &file.path)
}

/// The existing JSON file at `path` with `incoming[key]`'s entries merged into its `key`.
fn merge_json(path: &Path, incoming: &[u8], key: &str) -> Option<Vec<u8>> {
    let mut existing: Value = serde_json::from_slice(&std::fs::read(path).ok()?).ok()?;
    let incoming: Value = serde_json::from_slice(incoming).ok()?;
    let target = existing.as_object_mut()?;
    let mut merged = target.get(key).and_then(Value::as_object).cloned().unwrap_or_default();
    for (k, v) in incoming.get(key)?.as_object()? {
        merged.insert(k.clone(), v.clone());
    }
    target.insert(key.to_string(), Value::Object(merged));
    serde_json::to_vec_pretty(&existing).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agents::adapters::codex::Codex;

    #[test]
    fn only_allowlisted_and_runtime_variables_reach_the_cli() {
        let source: BTreeMap<String, String> = [
            ("PATH", "/bin"),
            ("ABX_SERVER_TOKEN", "t"),
            ("SECRET_THING", "s"),
            ("LC_ALL", "C"),
            ("OPENAI_API_KEY", "sk-x"),
            ("ANTHROPIC_API_KEY", "a"),
            ("MINE", "m"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let mut spec = AgentSpec::default();
        spec.env.insert("FROM_SPEC".into(), "1".into());
        let env = child_env(&source, &["MINE".into()], &Codex, &BTreeMap::new(), &spec);
        let names: Vec<&str> = env.keys().map(String::as_str).collect();
        assert_eq!(names, ["FROM_SPEC", "HOME", "LC_ALL", "MINE", "NO_COLOR", "OPENAI_API_KEY", "PATH"]);
    }

    #[test]
    fn json_settings_are_merged_not_replaced() {
        let dir = tempfile::tempdir().expect("tmp");
        let path = dir.path().join(".qwen/settings.json");
        std::fs::create_dir_all(path.parent().expect("parent")).expect("dir");
        std::fs::write(&path, br#"{"theme":"dark","mcpServers":{"old":{}}}"#).expect("write");
        let file = InvocationFile {
            path: path.clone(),
            content: br#"{"mcpServers":{"new":{}}}"#.to_vec(),
            merge_key: Some("mcpServers"),
        };
        write_file(&file, None).expect("write");
        let back: Value = serde_json::from_slice(&std::fs::read(&path).expect("read")).expect("json");
        assert_eq!(back["theme"], "dark");
        assert!(back["mcpServers"]["old"].is_object() && back["mcpServers"]["new"].is_object());
        assert_eq!(which("sh", "/nonexistent:/bin:/usr/bin").map(|p| p.is_absolute()), Some(true));
        assert_eq!(which("no-such-program-x", "/bin"), None);
    }
}
