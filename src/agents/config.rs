//! The agents group's settings: the reference's `ABX_AGENTS_*` variables
//! (and a few of our own, marked), read once when the group is first used.
//!
//! | variable | default | meaning |
//! |---|---|---|
//! | `ABX_AGENTS_STATE_DIR` | `~/.agent-sandbox/agents` | sessions, turns, items, events and artifacts |
//! | `ABX_AGENTS_PERSIST` | `1` | `0` keeps everything in memory |
//! | `ABX_AGENTS_DEFAULT` | `codex` | runtime of a request that names none |
//! | `ABX_AGENTS_CONFIG` | | JSON file: `default` (or `agents.default`); ours: `limits`, `command` |
//! | `ABX_AGENTS_MAX_CONCURRENT_TURNS` | `4` | CLIs running at once, daemon-wide |
//! | `ABX_AGENTS_ALLOW_COMMAND` | `1` | `0` refuses the `command` runtime |
//! | `ABX_AGENTS_PASSTHROUGH_ENV` | | more server variables handed to every CLI |
//! | `ABX_AGENTS_MAX_ARTIFACT_BYTES` | 10 MiB | largest file snapshotted as an artifact |
//! | `ABX_AGENTS_TRACES` | `0` | `1` serves one trace per finished turn |
//! | `ABX_AGENTS_TURN_TIMEOUT_SECONDS` (ours) | 1800 | wall-clock limit of a turn |
//! | `ABX_AGENTS_IDLE_TIMEOUT_SECONDS` (ours) | 300 | a turn silent this long is ended |
//! | `ABX_AGENTS_MAX_OUTPUT_BYTES` (ours) | 8 MiB | standard output a turn may print |

use std::collections::BTreeMap;
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
    /// Sessions kept; the least recently active idle ones go first.
    pub max_sessions: usize,
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
}

impl Default for AgentsConfig {
    fn default() -> Self {
        AgentsConfig {
            state_dir: None,
            default_runtime: None,
            max_concurrent_turns: 4,
            max_sessions: 200,
            session_ttl: Duration::from_secs(24 * 3600),
            traces: false,
            allow_command: true,
            passthrough_env: Vec::new(),
            max_artifact_bytes: 10 * 1024 * 1024,
            limits: Limits::default(),
            command: None,
            kill_grace: Duration::from_secs(3),
        }
    }
}

/// `0`, `false`, `no`, `off` are false; anything else set is true.
fn truthy(value: Option<&str>, default: bool) -> bool {
    match value.map(str::trim).filter(|v| !v.is_empty()) {
        None => default,
        Some(v) => !matches!(v.to_ascii_lowercase().as_str(), "0" | "false" | "no" | "off"),
    }
}

fn positive(value: Option<&str>) -> Option<f64> {
    value.and_then(|v| v.trim().parse::<f64>().ok()).filter(|v| v.is_finite() && *v > 0.0)
}

impl AgentsConfig {
    /// The settings from the process environment.
    pub fn from_env() -> Self {
        let vars: BTreeMap<String, String> = std::env::vars().filter(|(k, _)| k.starts_with("ABX_AGENTS_")).collect();
        let home = std::env::var("HOME").ok();
        Self::from_vars(&vars, home.as_deref())
    }

    /// The settings from these variables (`home` locates the default state directory).
    pub fn from_vars(vars: &BTreeMap<String, String>, home: Option<&str>) -> Self {
        let get = |name: &str| vars.get(name).map(String::as_str);
        let mut config = AgentsConfig::default();
        if truthy(get("ABX_AGENTS_PERSIST"), true) {
            config.state_dir = match get("ABX_AGENTS_STATE_DIR").map(str::trim).filter(|v| !v.is_empty()) {
                Some(dir) => Some(PathBuf::from(dir)),
                None => home.map(|h| PathBuf::from(h).join(".agent-sandbox").join("agents")),
            };
        }
        if let Some(path) = get("ABX_AGENTS_CONFIG").map(str::trim).filter(|v| !v.is_empty()) {
            config.apply_file(path);
        }
        if let Some(default) = get("ABX_AGENTS_DEFAULT").map(str::trim).filter(|v| !v.is_empty()) {
            config.default_runtime = Some(default.to_string());
        }
        if let Some(n) = get("ABX_AGENTS_MAX_CONCURRENT_TURNS").and_then(|v| v.trim().parse::<usize>().ok()) {
            config.max_concurrent_turns = n.max(1);
        }
        config.traces = get("ABX_AGENTS_TRACES") == Some("1");
        config.allow_command = truthy(get("ABX_AGENTS_ALLOW_COMMAND"), true);
        config.passthrough_env = get("ABX_AGENTS_PASSTHROUGH_ENV")
            .map(|v| v.split(',').map(str::trim).filter(|n| !n.is_empty()).map(str::to_string).collect())
            .unwrap_or_default();
        if let Some(n) = get("ABX_AGENTS_MAX_ARTIFACT_BYTES").and_then(|v| v.trim().parse::<u64>().ok()) {
            if n > 0 {
                config.max_artifact_bytes = n;
            }
        }
        if let Some(s) = positive(get("ABX_AGENTS_TURN_TIMEOUT_SECONDS")) {
            config.limits.turn_timeout = Duration::from_secs_f64(s);
        }
        if let Some(s) = positive(get("ABX_AGENTS_IDLE_TIMEOUT_SECONDS")) {
            config.limits.idle_timeout = Duration::from_secs_f64(s);
        }
        if let Some(n) = positive(get("ABX_AGENTS_MAX_OUTPUT_BYTES")) {
            config.limits.max_output_bytes = n as u64;
        }
        config
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
        if let Some(default) = default.and_then(Value::as_str).map(str::trim).filter(|d| !d.is_empty()) {
            self.default_runtime = Some(default.to_string());
        }
        if let Some(limits) = data.get("limits").and_then(Value::as_object) {
            let seconds = |key: &str| limits.get(key).and_then(Value::as_f64).filter(|v| v.is_finite() && *v > 0.0);
            if let Some(s) = seconds("turn_timeout_s") {
                self.limits.turn_timeout = Duration::from_secs_f64(s);
            }
            if let Some(s) = seconds("idle_timeout_s") {
                self.limits.idle_timeout = Duration::from_secs_f64(s);
            }
            if let Some(n) = seconds("max_output_bytes") {
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

    fn vars(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn defaults_follow_the_reference() {
        let config = AgentsConfig::from_vars(&vars(&[]), Some("/home/u"));
        assert_eq!(config.state_dir, Some(PathBuf::from("/home/u/.agent-sandbox/agents")));
        assert_eq!(config.max_concurrent_turns, 4);
        assert!(config.allow_command && !config.traces);
        assert_eq!(config.limits.idle_timeout, Duration::from_secs(300));
    }

    #[test]
    fn variables_override_and_persistence_can_be_off() {
        let config = AgentsConfig::from_vars(
            &vars(&[
                ("ABX_AGENTS_PERSIST", "0"),
                ("ABX_AGENTS_DEFAULT", "qwen"),
                ("ABX_AGENTS_IDLE_TIMEOUT_SECONDS", "1.5"),
                ("ABX_AGENTS_MAX_CONCURRENT_TURNS", "0"),
                ("ABX_AGENTS_PASSTHROUGH_ENV", "A, B,,"),
            ]),
            Some("/home/u"),
        );
        assert_eq!(config.state_dir, None);
        assert_eq!(config.default_runtime.as_deref(), Some("qwen"));
        assert_eq!(config.limits.idle_timeout, Duration::from_millis(1500));
        assert_eq!(config.max_concurrent_turns, 1);
        assert_eq!(config.passthrough_env, ["A", "B"]);
    }

    #[test]
    fn the_config_file_sets_the_default_limits_and_command() {
        let dir = tempfile::tempdir().expect("tmp");
        let path = dir.path().join("agents.json");
        let body =
            r#"{"agents":{"default":"command"},"limits":{"idle_timeout_s":2},"command":{"argv":["/bin/agent"]}}"#;
        std::fs::write(&path, body).expect("write");
        let config = AgentsConfig::from_vars(&vars(&[("ABX_AGENTS_CONFIG", path.to_str().expect("utf8"))]), None);
        assert_eq!(config.default_runtime.as_deref(), Some("command"));
        assert_eq!(config.limits.idle_timeout, Duration::from_secs(2));
        assert_eq!(config.command.map(|c| c.argv), Some(vec!["/bin/agent".to_string()]));
    }
}
