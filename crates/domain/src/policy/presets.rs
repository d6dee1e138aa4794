//! The built-in presets, with the reference's names and meaning.
//!
//! A preset is a policy document of its own (`groups`, `endpoints`,
//! `defaults`) whose rules sit one rank below the policy's: a policy refines
//! the preset it names. `core` endpoints stay on whatever a preset says.
//!
//! Besides its document, a preset switches off powers ([`Power`]):
//! [`power_layers`] names, one by one, every endpoint that exercises a power
//! the preset does not leave open, whatever its group. A rule naming the
//! endpoint outranks a group or a glob, so a group switched on by the policy
//! or `ABX_SERVER_ENABLED_GROUPS` does not lift it: only a policy rule
//! naming the endpoint (or the endpoint governing it) does, and the lint
//! reports such a grant (L9).

use abx_wire::endpoints::{Endpoint, Group, Power, ENDPOINTS};
use serde_json::{json, Map, Value};

use super::rules::{Layer, Rank, RuleSpec, Selector};

/// The preset names, in the reference's order.
pub const NAMES: [&str; 5] = ["default", "transfer-only", "read-only", "hardened", "locked"];

/// Endpoints that move files in and out (what `transfer-only` keeps).
pub const TRANSFER_ENDPOINTS: [&str; 2] = ["files_upload_stream", "files_download_stream"];

/// Endpoints that change files (what `read-only` turns off, with `env_set`).
const WRITE_ENDPOINTS: [&str; 4] = ["files_mkdir", "files_delete", "files_move", "files_upload_stream"];

/// Paths `hardened` denies to every file endpoint.
pub const HARDENED_DENY: [&str; 9] =
    ["/proc", "/sys", "/dev", "**/.ssh", "**/.env", "**/.env.*", "**/*.pem", "**/id_rsa*", "**/id_ed25519*"];

/// Groups `read-only` and `hardened` switch off.
const RISKY_GROUPS: [&str; 4] = ["process", "terminal", "dev_tools", "browser"];

/// Everything off but `ids` (and the core endpoints, which cannot be switched off).
fn only(ids: &[&str]) -> Value {
    let mut endpoints = Map::new();
    endpoints.insert("*".into(), json!({"enabled": false}));
    for id in ids {
        endpoints.insert((*id).into(), json!({"enabled": true}));
    }
    json!({ "endpoints": endpoints })
}

fn groups_off() -> Value {
    Value::Object(RISKY_GROUPS.iter().map(|g| ((*g).to_string(), Value::Bool(false))).collect())
}

/// Whether preset `name` switches off `endpoint` for one of its powers;
/// returns that power.
///
/// - `read-only` and `locked`: running programs and writing files.
/// - `hardened`: running programs; writing files outside `file_ops`, whose
///   writes its path denies govern.
/// - `transfer-only`: running programs.
pub fn closes(name: &str, endpoint: &Endpoint) -> Option<Power> {
    let group = endpoint.governed_by.and_then(abx_wire::endpoints::find).map_or(endpoint.group, |g| g.group);
    let closed: &[Power] = match name {
        "read-only" | "locked" => &[Power::RunsPrograms, Power::WritesFiles],
        "hardened" if group != Group::FileOps => &[Power::RunsPrograms, Power::WritesFiles],
        "hardened" | "transfer-only" => &[Power::RunsPrograms],
        _ => &[],
    };
    closed.iter().copied().find(|p| endpoint.has(*p))
}

/// The layers switching off, by id, every endpoint whose powers preset
/// `name` closes ([`closes`]). Extensions follow the endpoint governing them.
/// `origin_of` gives the origin to report for an endpoint the preset's
/// document switches off already (`preset:read-only:groups.process`, as the
/// reference names it); the others report `preset:NAME:powers.POWER`.
pub fn power_layers(name: &str, origin_of: impl Fn(&Endpoint) -> Option<String>) -> Vec<Layer> {
    ENDPOINTS
        .iter()
        .filter(|e| !e.extension && !e.is_core())
        .filter_map(|e| {
            let power = closes(name, e)?;
            Some(Layer {
                selector: Selector::Exact(e.id.to_string()),
                rank: Rank::Preset,
                rule: RuleSpec::enabled(false),
                origin: origin_of(e).unwrap_or_else(|| format!("preset:{name}:powers.{power}")),
            })
        })
        .collect()
}

/// The document of preset `name`, or `None` for an unknown name.
///
/// - `default`: nothing beyond the built-in defaults.
/// - `transfer-only`: only uploads and downloads (and core).
/// - `read-only`: no processes, terminals, dev tools or browser; no file
///   writes, deletes or moves; no `env_set`.
/// - `hardened`: like `read-only` for groups, plus secret paths (`.ssh`,
///   `.env`, keys, `/proc`...) denied to every file endpoint and refusals audited.
/// - `locked`: only registered commands (and core).
pub fn document(name: &str) -> Option<Value> {
    let doc = match name {
        "default" => json!({}),
        "transfer-only" => only(&TRANSFER_ENDPOINTS),
        "read-only" => {
            let mut endpoints: Map<String, Value> =
                WRITE_ENDPOINTS.iter().map(|id| ((*id).to_string(), json!({"enabled": false}))).collect();
            endpoints.insert("env_set".into(), json!({"enabled": false}));
            json!({"groups": groups_off(), "endpoints": endpoints})
        }
        "hardened" => json!({
            "groups": groups_off(),
            "endpoints": {
                "env_set": {"enabled": false},
                "files_*": {"paths": {"deny": HARDENED_DENY, "symlinks": "within"}},
            },
            "defaults": {"audit": "deny"},
        }),
        "locked" => only(&["list_commands", "run_command"]),
        _ => return None,
    };
    Some(doc)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::document;
    use crate::policy::rules::{self, enabled_group_layers, AuditMode, EffectiveRule, Rank, SymlinkMode};
    use abx_wire::endpoints::{Group, Power, ENDPOINTS};

    /// The effective rules of a policy document plus `groups` from the environment.
    fn compiled(policy: Value, groups: &[Group]) -> Vec<EffectiveRule> {
        let mut layers = rules::baseline_layers();
        layers.extend(document::parse(&policy).expect("valid").layers);
        layers.extend(enabled_group_layers(groups, Rank::Env, "env:ABX_SERVER_ENABLED_GROUPS"));
        rules::compile(&layers, true).expect("compiles")
    }

    fn enabled(rules: &[EffectiveRule]) -> Vec<&'static str> {
        rules.iter().filter(|r| r.enabled).map(|r| r.endpoint.id).collect()
    }

    fn rule<'a>(rules: &'a [EffectiveRule], id: &str) -> &'a EffectiveRule {
        rules.iter().find(|r| r.endpoint.id == id).expect("endpoint")
    }

    const CORE: [&str; 4] = ["health", "capabilities", "capabilities_check", "openapi"];

    #[test]
    fn default_is_the_built_in_policy() {
        let preset = compiled(json!({"preset": "default"}), &[]);
        let none = compiled(json!({}), &[]);
        assert_eq!(enabled(&preset), enabled(&none));
        let on_api = enabled(&preset).into_iter().filter(|id| !id.starts_with("envd_") && !id.starts_with("code_"));
        assert_eq!(on_api.count(), 42, "every group but the opt-in ones, and /metrics");
        assert_eq!(enabled(&preset).len(), 42 + 23 + 7, "and every route of the envd and code ports");
    }

    #[test]
    fn transfer_only_keeps_transfers_and_core() {
        let rules = compiled(json!({"preset": "transfer-only"}), &[Group::DevTools]);
        let transfers = [
            "files_upload_stream",
            "files_download_stream",
            "files_content_read",
            "files_content_write",
            "files_upload_status",
            "files_upload_cancel",
        ];
        let other_ports = ["mcp", "envd_health", "envd_files_read", "envd_files_write", "code_health"];
        assert_eq!(
            enabled(&rules),
            [&CORE[..], &transfers[..], &other_ports[..]].concat(),
            "with the extensions they govern, on every port"
        );
        assert_eq!(rule(&rules, "shell").disabled_by, "preset:transfer-only:endpoints.*");
        assert_eq!(rule(&rules, "code_run").disabled_by, "preset:transfer-only:endpoints.*", "a glob beats a group");
    }

    #[test]
    fn read_only_turns_off_writes_and_execution() {
        let rules = compiled(json!({"preset": "read-only"}), &[]);
        for off in
            ["files_mkdir", "files_delete", "files_move", "files_upload_stream", "env_set", "shell", "pty_connect"]
        {
            assert!(!rule(&rules, off).enabled, "{off}");
        }
        for off in ["files_content_write", "files_upload_status", "files_upload_cancel"] {
            assert!(!rule(&rules, off).enabled, "{off} follows files_upload_stream");
        }
        for on in ["files_list", "files_stat", "files_download_stream", "env_get", "system_info", "run_command"] {
            assert!(rule(&rules, on).enabled, "{on}");
        }
        assert_eq!(rule(&rules, "shell").disabled_by, "preset:read-only:groups.process", "the reference's name");
        assert_eq!(rule(&rules, "process_list").disabled_by, "preset:read-only:groups.process");
        assert_eq!(rule(&rules, "files_move").disabled_by, "preset:read-only:endpoints.files_move");
        let with_env = compiled(json!({"preset": "read-only"}), &[Group::DevTools]);
        assert!(rule(&with_env, "git_status").enabled, "the environment outranks a preset's group switch");
        assert!(!rule(&with_env, "code_run").enabled, "but not the powers the preset closes");
    }

    /// Every endpoint that runs programs or writes files, in every group, the
    /// opt-in ones and those the environment switches on included.
    #[test]
    fn closing_presets_switch_off_every_row_that_runs_programs_or_writes_files() {
        let all = [Group::DevTools, Group::Browser, Group::Agents];
        for preset in ["read-only", "hardened", "locked"] {
            let rules = compiled(json!({ "preset": preset }), &all);
            for r in rules.iter().filter(|r| r.endpoint.runs_programs()) {
                assert!(!r.enabled, "{preset}: {} runs programs", r.endpoint.id);
            }
            let writes = |r: &&EffectiveRule| r.endpoint.has(Power::WritesFiles);
            for r in rules
                .iter()
                .filter(writes)
                .filter(|r| preset != "hardened" || r.endpoint.governing().group != Group::FileOps)
            {
                assert!(!r.enabled, "{preset}: {} writes files", r.endpoint.id);
            }
            for id in
                ["agents_sessions_create", "agents_responses_create", "browser_evaluate", "agents_environments_create"]
            {
                assert!(!rule(&rules, id).enabled, "{preset}: {id}");
            }
            assert!(rule(&rules, "agents_sessions_list").enabled || preset == "locked", "{preset}: reading stays");
        }
        let transfer = compiled(json!({"preset": "transfer-only"}), &all);
        assert!(transfer.iter().filter(|r| r.endpoint.runs_programs()).all(|r| !r.enabled));
    }

    #[test]
    fn only_a_rule_naming_the_endpoint_grants_a_closed_power() {
        let by_group = compiled(
            json!({"preset": "read-only", "groups": {"agents": true}, "endpoints": {"agents_*": {"enabled": true}}}),
            &[Group::Agents],
        );
        assert_eq!(rule(&by_group, "agents_sessions_create").disabled_by, "preset:read-only:powers.runs_programs");
        assert_eq!(rule(&by_group, "code_run").disabled_by, "preset:read-only:groups.dev_tools");
        let named = compiled(
            json!({"preset": "read-only", "endpoints": {"agents_sessions_create": {"enabled": true}}}),
            &[Group::Agents],
        );
        assert!(rule(&named, "agents_sessions_create").enabled);
        assert!(!rule(&named, "agents_responses_create").enabled, "the others stay off");
        let governing =
            compiled(json!({"preset": "locked", "endpoints": {"files_upload_stream": {"enabled": true}}}), &[]);
        assert!(rule(&governing, "envd_files_write").enabled, "an extension follows the endpoint governing it");
    }

    #[test]
    fn hardened_denies_secret_paths_to_file_endpoints() {
        let rules = compiled(json!({"preset": "hardened"}), &[]);
        for endpoint in ENDPOINTS.iter().filter(|e| e.id.starts_with("files_")) {
            let r = rule(&rules, endpoint.id);
            assert_eq!(r.deny, HARDENED_DENY, "{}", endpoint.id);
            assert_eq!((r.symlinks, r.audit), (SymlinkMode::Within, AuditMode::Deny));
        }
        assert!(rule(&rules, "git_status").deny.is_empty());
        assert!(
            !rule(&rules, "env_set").enabled
                && !rule(&rules, "shell").enabled
                && !rule(&rules, "pty_create_session").enabled
        );
        assert!(rule(&rules, "files_upload_stream").enabled, "hardened still allows writes");
    }

    #[test]
    fn locked_keeps_registered_commands_and_core() {
        let rules = compiled(json!({"preset": "locked"}), &[]);
        // `/mcp` is core too; each of its tools is decided by its own endpoint's (switched off) rule.
        let probes = ["mcp", "envd_health", "code_health"];
        assert_eq!(enabled(&rules), [&CORE[..], &["list_commands", "run_command"], &probes[..]].concat());
    }

    #[test]
    fn a_policy_refines_its_preset() {
        let rules = compiled(
            json!({
                "preset": "transfer-only",
                "groups": {"system": true},
                "endpoints": {
                    "files_stat": {"enabled": true},
                    "files_download_stream": {"paths": {"allow": ["/home/user/out"], "read_only": true}},
                    "files_*": {"paths": {"deny": ["*.key"]}},
                },
            }),
            &[],
        );
        assert!(rule(&rules, "files_stat").enabled, "an exact id beats the preset's glob");
        assert!(!rule(&rules, "system_info").enabled, "a group does not beat a glob, whatever its rank");
        let download = rule(&rules, "files_download_stream");
        assert_eq!(download.allow, [std::path::PathBuf::from("/home/user/out")]);
        assert!(download.read_only);
        assert_eq!(download.deny, ["*.key"], "deny patterns of every matching rule apply");
    }

    #[test]
    fn every_name_has_a_document_and_nothing_else_does() {
        for name in NAMES {
            assert!(document(name).is_some(), "{name}");
        }
        assert!(document("harden").is_none());
        assert_eq!(document("default"), Some(json!({})));
    }

    #[test]
    fn transfer_only_switches_everything_off_but_transfers() {
        let doc = document("transfer-only").expect("preset");
        assert_eq!(doc["endpoints"]["*"], json!({"enabled": false}));
        assert_eq!(doc["endpoints"]["files_download_stream"], json!({"enabled": true}));
    }
}
