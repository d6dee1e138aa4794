//! `check-config`: validate the configuration and policy, print the
//! effective endpoint table, or explain one decision.
//!
//! Exit codes: 0 valid, 1 invalid, 2 lint warnings with `--strict`,
//! 3 `--explain` denied.

use std::process::ExitCode;

use crate::config::{Config, ServeArgs};
use crate::policy::{Identity, Op};
use crate::server;

/// Options of `check-config`.
#[derive(Debug, Clone, clap::Args)]
pub struct CheckConfigArgs {
    /// The configuration to check (same flags as `serve`).
    #[command(flatten)]
    pub serve: ServeArgs,
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
        let scopes: Vec<String> = match &args.scopes {
            Some(s) => s.split(',').map(|x| x.trim().to_string()).filter(|x| !x.is_empty()).collect(),
            None => vec!["*".into()],
        };
        let identity = Identity::new("explain", scopes);
        let op = args.op.as_deref().and_then(Op::from_name);
        let paths: Vec<String> = args.path.iter().cloned().collect();
        let decision = engine.check(&identity, endpoint, &paths, op, &|_| true);
        println!("{}", serde_json::to_string_pretty(&decision).unwrap_or_default());
        return if decision.allowed { ExitCode::SUCCESS } else { ExitCode::from(3) };
    }
    let warnings: Vec<String> = Vec::new();
    if args.json {
        let rows: Vec<_> = engine
            .rules()
            .iter()
            .map(|r| {
                serde_json::json!({
                    "endpoint": r.endpoint.id,
                    "group": r.endpoint.group.as_str(),
                    "enabled": r.enabled,
                    "rule": (!r.disabled_by.is_empty()).then_some(&r.disabled_by),
                    "scopes": r.scopes,
                    "paths": {"allow": r.allow, "deny": r.deny, "read_only": r.read_only},
                })
            })
            .collect();
        let doc = serde_json::json!({"endpoints": rows, "warnings": warnings});
        println!("{}", serde_json::to_string_pretty(&doc).unwrap_or_default());
    } else {
        for r in engine.rules() {
            let flag = if r.enabled { "on " } else { "off" };
            let scopes = if r.scopes.is_empty() { "-".to_string() } else { r.scopes.join(",") };
            println!("  [{flag}] {:<36} scopes={scopes}", r.endpoint.id);
        }
        for w in &warnings {
            println!("warning: {w}");
        }
    }
    if args.strict && !warnings.is_empty() {
        ExitCode::from(2)
    } else {
        ExitCode::SUCCESS
    }
}
