//! Discovery: the `/capabilities` document and `/capabilities/check` decisions,
//! computed by the same rules that enforce.

use std::collections::BTreeMap;

use abx_wire::api::core::{GroupSummary, IdentityInfo, PathsInfo, PolicyInfo};
use abx_wire::api::{Capabilities, Decision, EndpointState};
use abx_wire::endpoints::{self, Endpoint, Group, ENDPOINTS};
use serde_json::{Map, Value};

use super::{Identity, Op, PolicyEngine};

/// Version of the discovery document.
pub const API_VERSION: u32 = 2;

impl PolicyEngine {
    /// The discovery document for `identity`. `served` tells which endpoints
    /// this build implements; the others are reported as `not_implemented`.
    pub fn describe(&self, identity: &Identity, served: &dyn Fn(&Endpoint) -> bool) -> Capabilities {
        let mut summary: BTreeMap<String, GroupSummary> =
            Group::ALL.iter().map(|g| (g.as_str().to_string(), GroupSummary { enabled: 0, total: 0 })).collect();
        for rule in self.rules() {
            if let Some(s) = summary.get_mut(rule.endpoint.group.as_str()) {
                s.total += 1;
                s.enabled += usize::from(rule.enabled);
            }
        }
        let groups = summary.iter().map(|(g, s)| (g.clone(), s.total == 0 || s.enabled > 0)).collect();
        let endpoints = ENDPOINTS.iter().map(|ep| (ep.id.to_string(), self.entry(ep, identity, served(ep)))).collect();
        let mut warnings = Vec::new();
        if identity.scopes.contains("*") && self.authenticator().has_tokens() {
            warnings.push("identity holds the wildcard scope '*'".to_string());
        }
        Capabilities {
            api_version: API_VERSION,
            server_version: crate::SERVER_VERSION.to_string(),
            groups,
            group_summary: summary,
            identity: IdentityInfo { id: identity.id.clone(), scopes: identity.scopes.iter().cloned().collect() },
            policy: PolicyInfo {
                preset: self.preset.clone(),
                revision: self.revision.clone(),
                configured: self.configured,
            },
            endpoints,
            warnings,
        }
    }

    fn refusal(&self, ep: &Endpoint, identity: &Identity, served: bool) -> Option<&'static str> {
        let rule = self.rule(ep);
        if !rule.enabled {
            Some("endpoint_disabled")
        } else if identity.missing(&rule.scopes).is_some() {
            Some("missing_scope")
        } else if !served {
            Some("not_implemented")
        } else {
            None
        }
    }

    fn entry(&self, ep: &Endpoint, identity: &Identity, served: bool) -> EndpointState {
        let rule = self.rule(ep);
        let reason = self.refusal(ep, identity, served);
        let allowed = reason.is_none();
        EndpointState {
            method: ep.method.as_str().to_string(),
            path: ep.path.to_string(),
            group: ep.group.as_str().to_string(),
            summary: ep.summary.to_string(),
            streaming: ep.streaming,
            powers: ep.powers().iter().map(|p| p.as_str().to_string()).collect(),
            enabled: rule.enabled,
            allowed,
            reason: reason.map(str::to_string),
            rule: (!rule.disabled_by.is_empty()).then(|| rule.disabled_by.clone()),
            scopes: rule.scopes.clone(),
            limits: allowed.then(|| json_map(&rule.limits)),
            params: allowed.then(|| json_map(&rule.params)),
            paths: (allowed && ep.paths).then(|| PathsInfo {
                allow: rule.allow.iter().map(|p| p.display().to_string()).collect(),
                read_only: rule.read_only,
                deny_count: rule.deny.len(),
                symlinks: serde_json::to_value(rule.symlinks)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_string))
                    .unwrap_or_default(),
            }),
        }
    }

    /// The decision for a hypothetical call; touches the file system only to resolve paths.
    pub fn check(
        &self,
        identity: &Identity,
        endpoint: &str,
        paths: &[String],
        op: Option<Op>,
        served: &dyn Fn(&Endpoint) -> bool,
    ) -> Decision {
        let refuse = |code: &str, reason: String, rule: Option<String>| Decision {
            endpoint: endpoint.to_string(),
            allowed: false,
            code: Some(code.to_string()),
            reason: Some(reason),
            rule,
        };
        let Some(ep) = endpoints::find(endpoint) else {
            return refuse("unknown_endpoint", "Unknown endpoint".into(), None);
        };
        let rule = self.rule(ep);
        match self.refusal(ep, identity, served(ep)) {
            Some("endpoint_disabled") => {
                return refuse("endpoint_disabled", rule.disabled_message(), Some(rule.disabled_by.clone()));
            }
            Some(code @ "missing_scope") => {
                let reason = format!("Identity '{}' lacks a scope required by endpoint '{endpoint}'", identity.id);
                return refuse(code, reason, None);
            }
            Some(code) => {
                return refuse(code, format!("Endpoint '{endpoint}' is not implemented by this server"), None);
            }
            None => {}
        }
        let guard = self.path_guard(ep);
        let op = op.unwrap_or_else(|| Op::default_for(ep.id));
        for raw in paths {
            if let Err(denial) = guard.resolve(raw, op, "") {
                return refuse(denial.code(), denial.to_string(), None);
            }
        }
        Decision { endpoint: endpoint.to_string(), allowed: true, code: None, reason: None, rule: None }
    }
}

/// A rule's `limits` or `params` as the JSON object the document shows.
fn json_map<K: std::fmt::Display, V: serde::Serialize>(pairs: &BTreeMap<K, V>) -> Map<String, Value> {
    pairs.iter().map(|(k, v)| (k.to_string(), serde_json::to_value(v).unwrap_or(Value::Null))).collect()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::policy::PolicyInputs;

    fn engine() -> (tempfile::TempDir, Arc<PolicyEngine>) {
        let dir = tempfile::tempdir().expect("tempdir");
        let inputs = PolicyInputs { base_dir: dir.path().to_path_buf(), ..PolicyInputs::default() };
        (dir, Arc::new(PolicyEngine::new(inputs).expect("valid")))
    }

    #[test]
    fn describe_counts_groups_and_marks_unserved_endpoints() {
        let (_dir, e) = engine();
        let all = Identity::new("anonymous", ["*"]);
        let doc = e.describe(&all, &|ep| ep.id != "shell");
        assert_eq!(doc.api_version, 2);
        assert_eq!(doc.group_summary["agents"], GroupSummary { enabled: 0, total: 70 });
        assert_eq!(doc.group_summary["file_ops"], GroupSummary { enabled: 14, total: 14 });
        assert!(doc.groups["process"] && !doc.groups["dev_tools"]);
        let shell = &doc.endpoints["shell"];
        assert_eq!((shell.enabled, shell.allowed, shell.reason.as_deref()), (true, false, Some("not_implemented")));
        let code = &doc.endpoints["code_run"];
        assert_eq!(code.rule.as_deref(), Some("default:opt-in:dev_tools"));
        assert!(code.limits.is_none());
        assert!(doc.endpoints["files_stat"].paths.is_some());
        assert!(doc.warnings.is_empty(), "no token: the wildcard warning is for token identities");
    }

    #[test]
    fn check_reports_path_refusals() {
        let (dir, e) = engine();
        let all = Identity::new("anonymous", ["*"]);
        let served = |_: &Endpoint| true;
        let ok = e.check(&all, "files_stat", &["notes.txt".into()], None, &served);
        assert!(ok.allowed, "{ok:?}");
        let out = e.check(&all, "files_stat", &["/etc/passwd".into()], None, &served);
        assert_eq!(out.code.as_deref(), Some("path_not_allowed"));
        let unknown = e.check(&all, "nope", &[], None, &served);
        assert_eq!(unknown.code.as_deref(), Some("unknown_endpoint"));
        let disabled = e.check(&all, "code_run", &[], None, &served);
        assert_eq!(disabled.rule.as_deref(), Some("default:opt-in:dev_tools"));
        drop(dir);
    }
}
