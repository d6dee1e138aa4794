//! Lint: configuration that is valid but probably not what its author meant.
//!
//! L1 to L5 are the reference's warnings; L6 to L8 are ours (rules that can
//! never match or never take effect); L9 reports a rule that grants a power
//! the preset closes (an agent session or a browser under `read-only`); L10
//! one of the daemon's own paths under a root. `serve` logs them at start;
//! `check-config --strict` exits 2 when there are any.

use std::path::Path;

use abx_wire::endpoints::{Endpoint, ENDPOINTS};

use super::rules::{Layer, Selector};
use super::{Identity, PolicyEngine};

impl PolicyEngine {
    /// Warnings about the compiled policy, sorted and without duplicates.
    pub fn lint(&self) -> Vec<String> {
        let mut warnings = Vec::new();
        self.lint_bypass(&mut warnings);
        self.lint_grants(&mut warnings);
        self.lint_daemon_paths(&mut warnings);
        for rule in &self.rules {
            let id = rule.endpoint.id;
            if rule.allow.iter().any(|a| super::paths::normalize(a) == Path::new("/")) {
                warnings.push(format!("L2: endpoint '{id}' allows the filesystem root '/'"));
            }
            if rule.param(abx_wire::endpoints::Param::Overwrite) == Some(&super::ParamValue::Bool(false))
                && rule.allow.is_empty()
            {
                warnings.push(format!("L4: endpoint '{id}' sets overwrite=false without paths.allow"));
            }
        }
        let tokens = self.authenticator.tokens();
        if tokens.len() > 1 && tokens.iter().any(|t| t.identity().scopes.contains("*")) {
            warnings.push("L3: a wildcard-scope token coexists with other tokens".into());
        }
        for layer in self.layers.iter().filter(|l| l.origin.starts_with("policy:") || l.origin.starts_with("env:")) {
            self.lint_layer(layer, &mut warnings);
        }
        warnings.sort();
        warnings.dedup();
        warnings
    }

    /// L10: one of the daemon's own paths lies under (or around) a root an
    /// enabled path-scoped endpoint serves; the built-in deny refuses it, but
    /// it belongs outside every root.
    fn lint_daemon_paths(&self, warnings: &mut Vec<String>) {
        let roots: Vec<(std::path::PathBuf, &str)> = self
            .rules
            .iter()
            .filter(|r| r.enabled && r.endpoint.paths)
            .flat_map(|r| {
                let guard = self.path_guard(r.endpoint);
                // `/` (envd's process starts, or L2's rule) lies around everything.
                let roots = guard.roots().filter(|root| *root != Path::new("/"));
                roots.map(|root| (root.to_path_buf(), r.endpoint.id)).collect::<Vec<_>>()
            })
            .collect();
        let agents_on = self.rules.iter().any(|r| r.enabled && r.endpoint.group == abx_wire::endpoints::Group::Agents);
        for daemon in self.daemon_paths.iter().filter(|d| agents_on || d.what != super::daemon::AGENTS_STATE) {
            let candidates = [daemon.path.clone(), super::paths::realpath(&daemon.path)];
            let hit = candidates.iter().find_map(|p| {
                let root = super::daemon::overlapping_root(p, roots.iter().map(|(r, _)| r.as_path()))?;
                roots.iter().find(|(r, _)| r == root)
            });
            if let Some((root, endpoint)) = hit {
                warnings.push(format!(
                    "L10: the {} '{}' lies under the root '{}' of endpoint '{endpoint}'; the built-in deny refuses it \
                     on every port, but move it outside every root",
                    daemon.what,
                    daemon.path.display(),
                    root.display()
                ));
            }
        }
    }

    /// L1: an identity that may both use path-scoped endpoints and run programs.
    fn lint_bypass(&self, warnings: &mut Vec<String>) {
        let mut identities: Vec<&Identity> = self.authenticator.tokens().iter().map(|t| t.identity()).collect();
        identities.extend(self.authenticator.anonymous());
        let scoped: Vec<_> = self
            .rules
            .iter()
            .filter(|r| {
                r.enabled
                    && r.endpoint.paths
                    && (!r.allow.is_empty()
                        || !r.deny.is_empty()
                        || r.read_only
                        || r.symlinks == super::rules::SymlinkMode::Never)
            })
            .collect();
        let execs: Vec<_> = self.rules.iter().filter(|r| r.enabled && r.endpoint.runs_programs()).collect();
        for identity in identities {
            let reach = |rules: &[&super::EffectiveRule]| {
                // The reference's endpoints first: they name the rule to change.
                let mut reached: Vec<(bool, &str)> = rules
                    .iter()
                    .filter(|r| identity.missing(&r.scopes).is_none())
                    .map(|r| {
                        (
                            r.endpoint.governed_by.is_some() && r.endpoint.port != abx_wire::endpoints::Port::Api,
                            r.endpoint.id,
                        )
                    })
                    .collect();
                reached.sort_unstable();
                reached.truncate(3);
                reached.into_iter().map(|(_, id)| id).collect::<Vec<_>>()
            };
            let (paths, execs) = (reach(&scoped), reach(&execs));
            if !paths.is_empty() && !execs.is_empty() {
                warnings.push(format!(
                    "L1: identity '{}' can use path-scoped endpoints ({}...) and also execute programs via {}; \
                     path rules can be bypassed",
                    identity.id,
                    paths.join(", "),
                    execs.join(", ")
                ));
            }
        }
    }

    /// L9: an endpoint the preset closes for one of its powers is on: a
    /// policy rule naming it (or the endpoint governing it) granted it.
    fn lint_grants(&self, warnings: &mut Vec<String>) {
        let preset = self.preset.as_str();
        for rule in self.rules.iter().filter(|r| r.enabled) {
            let endpoint = rule.endpoint;
            let Some(power) = super::presets::closes(preset, endpoint) else { continue };
            if endpoint.extension && self.rule(endpoint.governing()).enabled {
                continue; // reported with the endpoint governing it
            }
            let names = |l: &&Layer| match &l.selector {
                Selector::Exact(id) => id == endpoint.id || endpoint.governed_by == Some(id.as_str()),
                _ => false,
            };
            let grant = self.layers.iter().filter(|l| l.rule.enabled == Some(true)).rev().find(names);
            let by = grant.map_or_else(|| "a rule".to_string(), |l| format!("{}.enabled: true", json_path(&l.origin)));
            warnings.push(format!(
                "L9: {by} grants '{power}' to endpoint '{}' (group {}) under preset {preset}",
                endpoint.id, endpoint.group
            ));
        }
    }

    /// L6 to L8 for one layer of the policy document or the environment.
    fn lint_layer(&self, layer: &Layer, warnings: &mut Vec<String>) {
        let at = json_path(&layer.origin);
        let selected: Vec<&Endpoint> = ENDPOINTS.iter().filter(|e| layer.selector.matches(e)).collect();
        if selected.is_empty() {
            warnings.push(format!("L6: {at}: selects no endpoint"));
            return;
        }
        let rule = &layer.rule;
        if rule.paths.is_some() && !selected.iter().any(|e| e.paths) {
            warnings.push(format!("L7: {at}.paths: none of the endpoints it selects takes paths"));
        }
        for limit in rule.limits.keys().filter(|l| !selected.iter().any(|e| e.accepts_limit(**l))) {
            warnings.push(format!("L7: {at}.limits.{limit}: none of the endpoints it selects takes this limit"));
        }
        for param in rule.params.keys().filter(|p| !selected.iter().any(|e| e.accepts_param(**p))) {
            warnings.push(format!("L7: {at}.params.{param}: none of the endpoints it selects takes this parameter"));
        }
        let Some(on) = rule.enabled else { return };
        if selected.iter().any(|e| self.rule(e).enabled == on) {
            return;
        }
        let why = if !on && selected.iter().all(|e| e.is_core()) {
            "core endpoints cannot be disabled".to_string()
        } else if let Some(off) = selected.iter().map(|e| self.rule(e)).find(|r| !r.enabled) {
            format!("a more specific rule decides: endpoint '{}' is disabled by {}", off.endpoint.id, off.disabled_by)
        } else {
            "a more specific rule enables every endpoint it selects".to_string()
        };
        let what = if matches!(layer.selector, Selector::Group(_)) && !at.contains(".endpoints.") {
            format!("{at}: {on}")
        } else {
            format!("{at}.enabled: {on}")
        };
        warnings.push(format!("L8: {what} never takes effect ({why})"));
    }
}

/// `policy:endpoints.files_*` as the JSON path `policy.endpoints.files_*`.
fn json_path(origin: &str) -> String {
    match origin.strip_prefix("policy:") {
        Some(rest) => format!("policy.{rest}"),
        None => origin.to_string(),
    }
}

/// L5: the policy file, or its directory, is writable by the user running this
/// process, so whoever can run commands as that user can rewrite the policy.
pub fn file_permission_warnings(path: &Path) -> Vec<String> {
    use nix::unistd::{access, AccessFlags};
    let mut out = Vec::new();
    if access(path, AccessFlags::W_OK).is_ok() {
        out.push(format!("L5: policy file {} is writable by the current user", path.display()));
    }
    let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    if let Some(dir) = absolute.parent() {
        if access(dir, AccessFlags::W_OK).is_ok() {
            out.push(format!("L5: policy directory {} is writable by the current user", dir.display()));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::policy::{document, PolicyInputs};

    fn lint(policy: serde_json::Value) -> Vec<String> {
        lint_with(policy, PolicyInputs::default())
    }

    fn lint_with(policy: serde_json::Value, inputs: PolicyInputs) -> Vec<String> {
        let document = document::parse(&policy).expect("valid policy");
        PolicyEngine::new(PolicyInputs { document: Some(document), ..inputs }).expect("compiles").lint()
    }

    fn digest(n: u8) -> String {
        format!("{n:02x}").repeat(32)
    }

    #[test]
    fn the_default_policy_has_no_warnings() {
        assert!(lint(json!({})).is_empty());
        for preset in crate::policy::presets::NAMES {
            assert_eq!(lint(json!({ "preset": preset })), Vec::<String>::new(), "{preset}");
        }
    }

    #[test]
    fn path_rules_next_to_exec_endpoints_can_be_bypassed() {
        let warnings = lint(json!({"endpoints": {"files_*": {"paths": {"deny": ["*.pem"]}}}}));
        assert_eq!(
            warnings,
            ["L1: identity 'anonymous' can use path-scoped endpoints (files_archive, files_content_read, files_content_write...) \
              and also execute programs via process_start, pty_connect, pty_create_session; path rules can be bypassed"]
        );
        let scoped_reader = json!({
            "auth": {"tokens": [{"id": "reader", "scopes": ["files:read"], "token_sha256": digest(1)}]},
            "endpoints": {"files_*": {"paths": {"read_only": true}}},
        });
        assert!(lint(scoped_reader).is_empty(), "a reader cannot run programs");
    }

    #[test]
    fn reference_warnings_l2_l3_l4() {
        let warnings = lint(json!({
            "auth": {"tokens": [
                {"id": "admin", "scopes": ["*"], "token_sha256": digest(1)},
                {"id": "ci", "scopes": ["commands:run"], "token_sha256": digest(2)},
            ]},
            "groups": {"process": false, "dev_tools": false},
            "endpoints": {
                "files_stat": {"paths": {"allow": ["/"]}},
                "files_upload_stream": {"params": {"overwrite": false}},
            },
        }));
        assert!(
            warnings.contains(&"L2: endpoint 'files_stat' allows the filesystem root '/'".to_string()),
            "{warnings:?}"
        );
        assert!(warnings.contains(&"L3: a wildcard-scope token coexists with other tokens".to_string()));
        assert!(warnings
            .contains(&"L4: endpoint 'files_upload_stream' sets overwrite=false without paths.allow".to_string()));
    }

    #[test]
    fn rules_that_select_nothing_or_apply_to_nothing() {
        let warnings = lint(json!({
            "groups": {"process": false},
            "endpoints": {
                "zzz*": {"enabled": false},
                "group:system": {"paths": {"read_only": true}, "limits": {"max_depth": 2}, "params": {"shells": ["sh"]}},
            },
        }));
        assert_eq!(
            warnings,
            [
                "L6: policy.endpoints.zzz*: selects no endpoint",
                "L7: policy.endpoints.group:system.limits.max_depth: none of the endpoints it selects takes this limit",
                "L7: policy.endpoints.group:system.params.shells: none of the endpoints it selects takes this parameter",
                "L7: policy.endpoints.group:system.paths: none of the endpoints it selects takes paths",
            ]
        );
    }

    #[test]
    fn switches_that_never_take_effect() {
        let warnings = lint(
            json!({"preset": "transfer-only", "groups": ["process"], "endpoints": {"health": {"enabled": false}}}),
        );
        assert_eq!(
            warnings,
            [
                "L8: policy.endpoints.health.enabled: false never takes effect (core endpoints cannot be disabled)",
                "L8: policy.groups.process: true never takes effect (a more specific rule decides: endpoint 'shell' \
                 is disabled by preset:transfer-only:endpoints.*)",
            ]
        );
        let env = lint_with(
            json!({"preset": "locked"}),
            PolicyInputs { enabled_groups: vec![abx_wire::endpoints::Group::DevTools], ..PolicyInputs::default() },
        );
        assert_eq!(
            env,
            ["L8: env:ABX_SERVER_ENABLED_GROUPS:dev_tools: true never takes effect (a more specific rule decides: \
              endpoint 'code_run' is disabled by preset:locked:endpoints.*)"]
        );
    }

    #[test]
    fn a_grant_of_a_power_the_preset_closes_is_reported() {
        let env = PolicyInputs { enabled_groups: vec![abx_wire::endpoints::Group::Agents], ..PolicyInputs::default() };
        assert_eq!(lint_with(json!({"preset": "read-only"}), env.clone()), Vec::<String>::new(), "nothing granted");
        let granted = json!({"preset": "hardened", "endpoints": {"agents_sessions_create": {"enabled": true}}});
        let warnings = lint_with(granted, env);
        assert_eq!(
            warnings.last().map(String::as_str),
            Some(
                "L9: policy.endpoints.agents_sessions_create.enabled: true grants 'runs_programs' to endpoint \
                 'agents_sessions_create' (group agents) under preset hardened"
            )
        );
        assert!(warnings[0].contains("execute programs via agents_sessions_create"), "L1 knows agents: {warnings:?}");
        let browser =
            json!({"preset": "locked", "groups": ["browser"], "endpoints": {"browser_navigate": {"enabled": true}}});
        let warnings = lint(browser);
        assert!(
            warnings.iter().any(|w| w.starts_with("L9: policy.endpoints.browser_navigate.enabled: true")),
            "{warnings:?}"
        );
    }

    #[test]
    fn writable_policy_files_are_reported() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("policy.json");
        std::fs::write(&file, "{}").expect("write");
        let warnings = file_permission_warnings(&file);
        assert_eq!(warnings.len(), 2, "{warnings:?}");
        assert!(warnings[0].starts_with("L5: policy file "));
        assert!(warnings[1].starts_with("L5: policy directory "));
    }
}
