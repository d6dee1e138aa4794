//! `check-config`: validate the configuration and policy, print the
//! effective endpoint table, or explain one decision.
//!
//! The policy is found exactly as `serve` finds it (`--policy`, `--preset`,
//! `ABX_SERVER_POLICY`, `ABX_SERVER_POLICY_FILE`, the well-known file).
//! Exit codes: 0 valid, 1 invalid, 2 lint warnings with `--strict`,
//! 3 `--explain` denied.

use std::io::Write;
use std::process::ExitCode;

use abx_domain::policy::{file_permission_warnings, EffectiveRule, Identity, Op, PolicyEngine};
use abx_wire::endpoints::Power;
use serde_json::{json, Value};

use crate::config::{Config, Options};
use crate::server;

/// Options of `check-config`.
#[derive(Debug, Clone, clap::Args)]
pub struct CheckConfigArgs {
    /// The configuration to check (same flags as `serve`).
    #[command(flatten)]
    pub serve: Options,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
    /// Exit 2 when there are lint warnings.
    #[arg(long)]
    pub strict: bool,
    /// Explain the decision for this endpoint id.
    #[arg(long, value_name = "ENDPOINT")]
    pub explain: Option<String>,
    /// Path to check with --explain.
    #[arg(long)]
    pub path: Option<String>,
    /// Comma-separated scopes of the caller for --explain (default '*').
    #[arg(long)]
    pub scopes: Option<String>,
    /// Operation class for --explain.
    #[arg(long, value_parser = ["read", "write", "delete", "exec"])]
    pub op: Option<String>,
}

/// Runs `check-config`.
pub fn run(args: CheckConfigArgs) -> ExitCode {
    let engine = match Config::resolve(args.serve.clone())
        .map_err(|e| e.to_string())
        .and_then(|config| server::engine(&config).map_err(|e| format!("policy error: {e}")))
    {
        Ok(engine) => engine,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::FAILURE;
        }
    };
    if let Some(endpoint) = &args.explain {
        return explain(&engine, endpoint, &args);
    }
    let mut warnings = engine.lint();
    if let Some(file) = engine.policy_file() {
        warnings.extend(file_permission_warnings(file));
    }
    warnings.extend(shared_user_warning(&engine));
    // A closed pipe (`| head`) ends the output quietly rather than with a panic.
    let mut out = std::io::stdout().lock();
    let mut rules: Vec<_> = engine.rules().iter().collect();
    rules.sort_by_key(|r| r.endpoint.id);
    if args.json {
        let rows: Vec<Value> = rules.iter().map(|r| row(r)).collect();
        let doc = json!({
            "preset": engine.preset(),
            "revision": engine.revision(),
            "source": (!engine.origin().is_empty()).then(|| engine.origin()),
            "endpoints": rows,
            "warnings": warnings,
        });
        let _ = writeln!(out, "{}", serde_json::to_string_pretty(&doc).unwrap_or_default());
    } else {
        let source = if engine.origin().is_empty() { "built-in defaults" } else { engine.origin() };
        let _ = writeln!(out, "policy preset={} revision={} source={source}", engine.preset(), engine.revision());
        for r in rules {
            let flag = if r.enabled { "on " } else { "off" };
            let scopes = if r.scopes.is_empty() { "-".to_string() } else { r.scopes.join(",") };
            let rule = if r.disabled_by.is_empty() { String::new() } else { format!(" rule={}", r.disabled_by) };
            let _ = writeln!(out, "  [{flag}] {:<36} scopes={scopes}{rule}", r.endpoint.id);
        }
        for w in &warnings {
            let _ = writeln!(out, "warning: {w}");
        }
    }
    if args.strict && !warnings.is_empty() {
        ExitCode::from(2)
    } else {
        ExitCode::SUCCESS
    }
}

/// Children of identities without a user of their own run as the daemon's
/// user, so identities that may each start programs can read each other's
/// children (an agent CLI's vault tokens in `/proc/<pid>/environ`, the files
/// they write): said when two or more identities may reach an enabled
/// endpoint that starts programs, unless each of them names its own user
/// (`auth.tokens[].user`), distinct from the others' and from the daemon's.
fn shared_user_warning(engine: &PolicyEngine) -> Option<String> {
    let starts_programs: Vec<&EffectiveRule> = engine
        .rules()
        .iter()
        .filter(|r| r.enabled && (r.endpoint.runs_programs() || r.endpoint.has(Power::RunsRegistered)))
        .collect();
    let runners: Vec<&Identity> = engine
        .authenticator()
        .tokens()
        .iter()
        .map(|t| t.identity())
        .filter(|identity| starts_programs.iter().any(|r| identity.missing(&r.scopes).is_none()))
        .collect();
    if runners.len() < 2 {
        return None;
    }
    let own_uid = |identity: &Identity| identity.user.as_deref().filter(|u| u.is_other()).map(|u| u.uid);
    let shared: Vec<&str> = runners
        .iter()
        .filter(|identity| match own_uid(identity) {
            None => true,
            Some(uid) => runners.iter().filter(|other| own_uid(other) == Some(uid)).count() > 1,
        })
        .map(|identity| identity.id.as_str())
        .collect();
    (!shared.is_empty()).then(|| {
        format!(
            "identities {} may each start programs, and {} run as a user another of them shares \
             (the daemon's is uid {}): one identity's processes can read another's secrets (an agent \
             CLI's vault tokens in /proc/<pid>/environ) and files; give each identity its own user \
             (auth.tokens[].user) or its own sandbox (docs/security.md, identities that share one sandbox)",
            runners.iter().map(|i| i.id.as_str()).collect::<Vec<_>>().join(", "),
            shared.join(", "),
            nix::unistd::Uid::effective()
        )
    })
}

/// `--explain`: the decision for an identity holding `--scopes` (default `*`).
fn explain(engine: &PolicyEngine, endpoint: &str, args: &CheckConfigArgs) -> ExitCode {
    let scopes: Vec<String> = match &args.scopes {
        Some(s) => s.split(',').map(|x| x.trim().to_string()).filter(|x| !x.is_empty()).collect(),
        None => vec!["*".into()],
    };
    let identity = Identity::new("explain", scopes);
    let op = args.op.as_deref().and_then(Op::from_name);
    let paths: Vec<String> = args.path.iter().cloned().collect();
    let decision = engine.check(&identity, endpoint, &paths, op, &|_| true);
    let _ = writeln!(std::io::stdout().lock(), "{}", serde_json::to_string_pretty(&decision).unwrap_or_default());
    if decision.allowed {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(3)
    }
}

/// One endpoint of the effective table.
fn row(r: &EffectiveRule) -> Value {
    let to_map = |pairs: Vec<(String, Value)>| pairs.into_iter().collect::<serde_json::Map<_, _>>();
    json!({
        "endpoint": r.endpoint.id,
        "group": r.endpoint.group.as_str(),
        "enabled": r.enabled,
        "rule": (!r.disabled_by.is_empty()).then_some(&r.disabled_by),
        "scopes": r.scopes,
        "limits": to_map(r.limits.iter().map(|(k, v)| (k.to_string(), json!(v))).collect()),
        "params": to_map(r.params.iter().map(|(k, v)| (k.to_string(), json!(v))).collect()),
        "paths": {"allow": r.allow, "deny": r.deny, "read_only": r.read_only, "symlinks": r.symlinks},
        "audit": r.audit,
    })
}
