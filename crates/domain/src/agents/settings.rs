//! The agents group's settings: the reference's `ABX_AGENTS_*` variables
//! (and a few of our own), declared once with every other option in
//! `config::Options` (flag > variable > TOML file > default) and read into
//! [`AgentsConfig`] by the configuration (`AgentsConfig::from_options`, beside
//! the options, so this group never reads an option), and the reference's
//! own JSON file (`ABX_AGENTS_CONFIG`), read here when the runtime first
//! starts, beneath those options.
//!
//! | option | default | meaning |
//! |---|---|---|
//! | `agents_state_dir` | `~/.agent-sandbox/agents` | sessions, turns, items, events and artifacts |
//! | `agents_persist` | `true` | `false` keeps everything in memory |
//! | `agents_default` | `codex` | runtime of a request that names none |
//! | `agents_config` | | JSON file: `default` (or `agents.default`); ours: `limits`, `command` |
//! | `agents_max_concurrent_turns` | `4` | CLIs running at once, daemon-wide |
//! | `agents_allow_command` | `true` | `false` refuses the `command` runtime |
//! | `agents_passthrough_env` | | more server variables handed to every CLI |
//! | `agents_max_artifact_bytes` | 10 MiB | largest file snapshotted as an artifact |
//! | `agents_traces` | `false` | `true` serves one trace per finished turn |
//! | `agents_turn_timeout_seconds` (ours) | 1800 | wall-clock limit of a turn |
//! | `agents_idle_timeout_seconds` (ours) | 300 | a turn silent this long is ended |
//! | `agents_max_output_bytes` (ours) | 8 MiB | standard output a turn may print |
//! | `agents_responses_workspace` | `/workspace` | working directory of `/v1/responses` turns |
//! | `agents_max_vaults` | `100` | vaults per caller |
//! | `agents_allow_private_urls` | `false` | private and loopback hosts in credential and webhook URLs, and webhook deliveries to them |
//! | `agents_webhook_allow_http` | `false` | webhook URLs may be `http`, not only `https` |
//! | `agents_max_file_bytes` | 10 MiB | largest file blob, template or environment file |
//! | `agents_max_sessions` (ours) | `100` | sessions per caller ([`Quotas`]) |
//! | `agents_max_definitions`, `agents_max_environments`, `agents_max_templates` (ours) | `100` each | per caller |
//! | `agents_max_template_bytes` (ours) | 64 MiB | a caller's template files together |
//! | `agents_max_webhooks` (ours) | `20` | webhook endpoints per caller |

use std::path::PathBuf;
use std::time::Duration;

use serde_json::Value;

use super::spec::{CommandSpec, Limits};

/// Settings of the agents runtime.
#[derive(Debug, Clone)]
pub struct AgentsConfig {
    /// Where state is kept; `None` keeps it in memory.
    pub state_dir: Option<PathBuf>,
    /// The runtime a request that names none uses (as configured, not yet resolved).
    pub default_runtime: Option<String>,
    /// CLIs running at once.
    pub max_concurrent_turns: usize,
    /// Per-caller quotas of what the group keeps.
    pub quotas: Quotas,
    /// Idle sessions older than this are forgotten.
    pub session_ttl: Duration,
    /// Whether traces are served.
    pub traces: bool,
    /// Whether the `command` runtime may run.
    pub allow_command: bool,
    /// More server variables handed to every CLI.
    pub passthrough_env: Vec<String>,
    /// Largest file snapshotted as an artifact.
    pub max_artifact_bytes: u64,
    /// Per-turn limits of every session.
    pub limits: Limits,
    /// The `command` runtime's program when a request names none.
    pub command: Option<CommandSpec>,
    /// Between SIGTERM and SIGKILL when a turn is ended.
    pub kill_grace: Duration,
    /// The reference's JSON file, read by [`AgentsConfig::load_file`] when the runtime starts.
    pub file: Option<PathBuf>,
    /// The limits the options set, which the JSON file does not override.
    pub set_limits: SetLimits,
    /// The working directory of `/v1/responses` turns.
    pub responses_workspace: String,
    /// Vaults per caller at most.
    pub max_vaults: usize,
    /// Credential and webhook URLs may name (and deliveries reach) private, loopback and link-local hosts.
    pub allow_private_urls: bool,
    /// Webhook URLs may be plain `http`.
    pub webhook_allow_http: bool,
    /// Largest file blob, template or environment file.
    pub max_file_bytes: u64,
    /// The user each identity's CLIs run as, by identity id (from the
    /// policy's `auth.tokens[].user`; identities not here run as the daemon).
    pub users: std::collections::BTreeMap<String, std::sync::Arc<crate::accounts::Account>>,
}

/// What one caller (policy identity) may keep at once. Each is counted
/// over the caller's own records only: a caller at its quota is refused
/// (429 `agents.quota_exceeded`, the quota named) or, for sessions, loses
/// its own least recently active idle one; never another caller's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quotas {
    /// Agent sessions (`agents_max_sessions`).
    pub sessions: usize,
    /// Agent definitions (`agents_max_definitions`).
    pub definitions: usize,
    /// Environments (`agents_max_environments`).
    pub environments: usize,
    /// Environment templates (`agents_max_templates`).
    pub templates: usize,
    /// Bytes of all the caller's template files together (`agents_max_template_bytes`).
    pub template_bytes: u64,
    /// Webhook endpoints (`agents_max_webhooks`).
    pub webhooks: usize,
}

impl Default for Quotas {
    fn default() -> Self {
        Quotas {
            sessions: 100,
            definitions: 100,
            environments: 100,
            templates: 100,
            template_bytes: 64 * 1024 * 1024,
            webhooks: 20,
        }
    }
}

/// Limits set by an option (flag, variable or TOML file), above the JSON file.
#[derive(Debug, Clone, Copy, Default)]
pub struct SetLimits {
    /// Whether the turn timeout was set.
    pub turn_timeout: bool,
    /// Whether the idle timeout was set.
    pub idle_timeout: bool,
    /// Whether the output limit was set.
    pub max_output_bytes: bool,
}

impl Default for AgentsConfig {
    fn default() -> Self {
        AgentsConfig {
            state_dir: None,
            default_runtime: None,
            max_concurrent_turns: 4,
            quotas: Quotas::default(),
            session_ttl: Duration::from_secs(24 * 3600),
            traces: false,
            allow_command: true,
            passthrough_env: Vec::new(),
            max_artifact_bytes: 10 * 1024 * 1024,
            limits: Limits::default(),
            command: None,
            kill_grace: Duration::from_secs(3),
            file: None,
            set_limits: SetLimits::default(),
            responses_workspace: "/workspace".into(),
            max_vaults: 100,
            allow_private_urls: false,
            webhook_allow_http: false,
            max_file_bytes: 10 * 1024 * 1024,
            users: std::collections::BTreeMap::new(),
        }
    }
}

impl AgentsConfig {
    /// These settings with the JSON file's beneath them, when one is named.
    pub fn load_file(mut self) -> Self {
        if let Some(path) = self.file.clone() {
            self.apply_file(&path.to_string_lossy());
        }
        self
    }

    /// Reads `default` (or `agents.default`), `limits` and `command` from a
    /// JSON file; a file that cannot be read or parsed is logged and ignored,
    /// as the reference ignores it.
    fn apply_file(&mut self, path: &str) {
        let parsed = std::fs::read(path)
            .map_err(|e| e.to_string())
            .and_then(|bytes| serde_json::from_slice::<Value>(&bytes).map_err(|e| e.to_string()));
        let data = match parsed {
            Ok(Value::Object(map)) => map,
            Ok(_) => return tracing::warn!(path, "ABX_AGENTS_CONFIG is not a JSON object; ignored"),
            Err(e) => return tracing::warn!(path, error = %e, "ABX_AGENTS_CONFIG cannot be read; ignored"),
        };
        let nested = data.get("agents").and_then(Value::as_object);
        let default = data.get("default").or_else(|| nested.and_then(|a| a.get("default")));
        let default = default.and_then(Value::as_str).map(str::trim).filter(|d| !d.is_empty());
        if let (None, Some(default)) = (&self.default_runtime, default) {
            self.default_runtime = Some(default.to_string());
        }
        if let Some(limits) = data.get("limits").and_then(Value::as_object) {
            let seconds = |key: &str| limits.get(key).and_then(Value::as_f64).filter(|v| v.is_finite() && *v > 0.0);
            let set = self.set_limits;
            if let Some(s) = seconds("turn_timeout_s").filter(|_| !set.turn_timeout) {
                self.limits.turn_timeout = Duration::from_secs_f64(s);
            }
            if let Some(s) = seconds("idle_timeout_s").filter(|_| !set.idle_timeout) {
                self.limits.idle_timeout = Duration::from_secs_f64(s);
            }
            if let Some(n) = seconds("max_output_bytes").filter(|_| !set.max_output_bytes) {
                self.limits.max_output_bytes = n as u64;
            }
            self.limits.max_turns = seconds("max_turns").map(|n| n as u32);
            self.limits.max_budget_usd = seconds("max_budget_usd");
        }
        if let Some(command) = data.get("command") {
            match serde_json::from_value::<CommandSpec>(command.clone()) {
                Ok(spec) if !spec.argv.is_empty() => self.command = Some(spec),
                _ => tracing::warn!(path, "ABX_AGENTS_CONFIG: command needs a non-empty argv; ignored"),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_json_file_sets_the_default_limits_and_command_beneath_the_options() {
        let dir = tempfile::tempdir().expect("tmp");
        let path = dir.path().join("agents.json");
        let body = r#"{"agents":{"default":"command"},"limits":{"idle_timeout_s":2,"turn_timeout_s":9},
                      "command":{"argv":["/bin/agent"]}}"#;
        std::fs::write(&path, body).expect("write");
        let config = AgentsConfig { file: Some(path.clone()), ..AgentsConfig::default() }.load_file();
        assert_eq!(config.default_runtime.as_deref(), Some("command"));
        assert_eq!(config.limits.idle_timeout, Duration::from_secs(2));
        assert_eq!(config.limits.turn_timeout, Duration::from_secs(9));
        assert_eq!(config.command.map(|c| c.argv), Some(vec!["/bin/agent".to_string()]));
        let set = AgentsConfig {
            file: Some(path),
            default_runtime: Some("codex".into()),
            set_limits: SetLimits { turn_timeout: true, ..SetLimits::default() },
            ..AgentsConfig::default()
        };
        let config = set.load_file();
        assert_eq!(config.default_runtime.as_deref(), Some("codex"), "a set default beats the file");
        assert_eq!(
            config.limits.turn_timeout,
            AgentsConfig::default().limits.turn_timeout,
            "a set limit beats the file"
        );
        assert_eq!(config.limits.idle_timeout, Duration::from_secs(2), "the file beats the default");
    }
}
