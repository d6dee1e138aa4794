//! The agents group's settings from `serve`'s merged options: every
//! `agents_*` option read into [`AgentsConfig`], checked here, on the side
//! that owns [`Options`], so the agents group never reads an option itself
//! (the reference's JSON file is read beneath them when its runtime starts:
//! [`AgentsConfig::load_file`]).

use std::path::PathBuf;
use std::time::Duration;

use abx_domain::agents::settings::AgentsConfig;

use super::{Options, Seconds};

/// A positive duration from a seconds option, or why not.
fn positive_seconds(name: &str, value: Option<Seconds>) -> Result<Option<Duration>, String> {
    match value {
        Some(s) if s.0.is_zero() => Err(format!("{name} must be more than 0")),
        other => Ok(other.map(|s| s.0)),
    }
}

/// The agents' settings from `serve`'s merged options (`home` locates the default state directory).
///
/// # Errors
/// A timeout or output limit of 0.
pub fn agents_config(o: &Options, home: Option<&str>) -> Result<AgentsConfig, String> {
    let mut config = AgentsConfig::default();
    if o.agents_persist.unwrap_or(true) {
        config.state_dir = match o.agents_state_dir.as_ref().filter(|d| !d.as_os_str().is_empty()) {
            Some(dir) => Some(dir.clone()),
            None => home.map(|h| PathBuf::from(h).join(".agent-sandbox").join("agents")),
        };
    }
    config.file = o.agents_config.clone().filter(|p| !p.as_os_str().is_empty());
    config.default_runtime = o.agents_default.as_deref().map(str::trim).filter(|d| !d.is_empty()).map(str::to_string);
    if let Some(n) = o.agents_max_concurrent_turns {
        config.max_concurrent_turns = n.max(1);
    }
    config.traces = o.agents_traces.unwrap_or(false);
    config.allow_private_urls = o.agents_allow_private_urls.unwrap_or(false);
    config.webhook_allow_http = o.agents_webhook_allow_http.unwrap_or(false);
    config.allow_command = o.agents_allow_command.unwrap_or(true);
    config.passthrough_env = o
        .agents_passthrough_env
        .iter()
        .flatten()
        .map(|n| n.trim())
        .filter(|n| !n.is_empty())
        .map(str::to_string)
        .collect();
    if let Some(n) = o.agents_max_artifact_bytes.filter(|n| *n > 0) {
        config.max_artifact_bytes = n;
    }
    if let Some(d) = positive_seconds("agents_turn_timeout_seconds", o.agents_turn_timeout_seconds)? {
        (config.limits.turn_timeout, config.set_limits.turn_timeout) = (d, true);
    }
    if let Some(d) = positive_seconds("agents_idle_timeout_seconds", o.agents_idle_timeout_seconds)? {
        (config.limits.idle_timeout, config.set_limits.idle_timeout) = (d, true);
    }
    if let Some(dir) = o.agents_responses_workspace.as_deref().map(str::trim).filter(|d| !d.is_empty()) {
        config.responses_workspace = dir.to_string();
    }
    config.max_vaults = o.agents_max_vaults.unwrap_or(100).max(1);
    let quotas = &mut config.quotas;
    let count = |value: Option<usize>, default: usize| value.unwrap_or(default).max(1);
    quotas.sessions = count(o.agents_max_sessions, quotas.sessions);
    quotas.definitions = count(o.agents_max_definitions, quotas.definitions);
    quotas.environments = count(o.agents_max_environments, quotas.environments);
    quotas.templates = count(o.agents_max_templates, quotas.templates);
    quotas.webhooks = count(o.agents_max_webhooks, quotas.webhooks);
    quotas.template_bytes = o.agents_max_template_bytes.unwrap_or(quotas.template_bytes).max(1);
    if let Some(n) = o.agents_max_file_bytes.filter(|n| *n > 0) {
        config.max_file_bytes = n;
    }
    match o.agents_max_output_bytes {
        Some(0) => return Err("agents_max_output_bytes must be more than 0".into()),
        Some(n) => (config.limits.max_output_bytes, config.set_limits.max_output_bytes) = (n, true),
        None => {}
    }
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::parse_file;

    #[test]
    fn defaults_follow_the_reference() {
        let config = agents_config(&Options::default(), Some("/home/u")).expect("valid");
        assert_eq!(config.state_dir, Some(PathBuf::from("/home/u/.agent-sandbox/agents")));
        assert_eq!(config.max_concurrent_turns, 4);
        assert!(config.allow_command && !config.traces);
        assert_eq!(config.limits.idle_timeout, Duration::from_secs(300));
        assert_eq!((config.default_runtime, config.file), (None, None));
    }

    #[test]
    fn options_override_and_persistence_can_be_off() {
        let text = "agents_persist = false\nagents_default = \"qwen\"\nagents_idle_timeout_seconds = 1.5\n\
                    agents_max_concurrent_turns = 0\nagents_passthrough_env = [\"A\", \" B\", \"\"]\n";
        let config = agents_config(&parse_file(text).expect("parses"), Some("/home/u")).expect("valid");
        assert_eq!(config.state_dir, None);
        assert_eq!(config.default_runtime.as_deref(), Some("qwen"));
        assert_eq!(config.limits.idle_timeout, Duration::from_millis(1500));
        assert_eq!(config.max_concurrent_turns, 1);
        assert_eq!(config.passthrough_env, ["A", "B"]);
    }

    #[test]
    fn a_zero_timeout_or_output_limit_is_refused_by_name() {
        for text in
            ["agents_turn_timeout_seconds = 0", "agents_idle_timeout_seconds = 0", "agents_max_output_bytes = 0"]
        {
            let err = agents_config(&parse_file(text).expect("parses"), None).expect_err(text);
            assert!(text.starts_with(err.split(' ').next().unwrap_or_default()), "{err}");
        }
    }

    #[test]
    fn options_beat_the_json_file_and_the_file_beats_the_defaults() {
        let dir = tempfile::tempdir().expect("tmp");
        let path = dir.path().join("agents.json");
        let body = r#"{"agents":{"default":"command"},"limits":{"idle_timeout_s":2,"turn_timeout_s":9}}"#;
        std::fs::write(&path, body).expect("write");
        let o = Options {
            agents_config: Some(path),
            agents_default: Some("codex".into()),
            agents_turn_timeout_seconds: Some(Seconds(Duration::from_secs(5))),
            ..Options::default()
        };
        let config = agents_config(&o, None).expect("valid").load_file();
        assert_eq!(config.default_runtime.as_deref(), Some("codex"), "the option beats the file");
        assert_eq!(config.limits.turn_timeout, Duration::from_secs(5), "the option beats the file");
        assert_eq!(config.limits.idle_timeout, Duration::from_secs(2), "the file beats the default");
    }
}
