//! An agent turn starts a CLI: that is process execution, decided by
//! `process_start`'s rule before anything is created or spawned.
//!
//! [`admit_cli`] applies the guards `process_start` applies, the same
//! functions (no second copy): the rule must be enabled (a preset that
//! switches execution off switches agents off too), the workspace passes
//! the path rules for operation `exec` (unless it is one of the daemon's
//! defaults, `/workspace` or the configured `/v1/responses` directory), the program of the `command`
//! runtime, the CLI binary of the other runtimes and every local MCP
//! server's program pass the process guard and `allow_commands` /
//! `deny_commands`, and the environment the session sets passes the
//! environment guards. A refusal is the reference's JSON error naming the
//! endpoint, with the guard's code and status.

use abx_domain::agents::{AgentSpec, Agents};
use abx_domain::policy::guards::{
    check_env, check_not_dangerous, check_not_secret, check_process, command_guard, commands_restricted,
};
use abx_domain::policy::{Denial, Grant, Op};
use abx_wire::api::Fault;

use crate::http::agents::wire::requests::DEFAULT_WORKSPACE;
use crate::http::error::ApiError;

use super::environments::Refusal;

/// The argv whose program each turn of `spec` starts: the `command`
/// runtime's program, or the runtime's CLI binary.
fn programs(agents: &Agents, spec: &AgentSpec) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    match (&spec.command, agents.adapters().get(&spec.runtime).and_then(|a| a.descriptor().binary)) {
        (Some(command), _) if !command.argv.is_empty() => out.push(command.argv.clone()),
        (_, Some(binary)) => out.push(vec![binary.to_string()]),
        _ => {}
    }
    for server in &spec.mcp_servers {
        if let Some(program) = server.command.as_ref().filter(|c| !c.is_empty()) {
            out.push(std::iter::once(program.clone()).chain(server.args.iter().cloned()).collect());
        }
    }
    out
}

/// Admits the CLI every turn of `spec` would start, under `process_start`'s rule.
///
/// # Errors
/// The agents group's refusal of a malformed agent; then the denial of the
/// first guard that refuses, rendered for `grant`'s endpoint.
pub(super) fn admit_cli(grant: &Grant, agents: &Agents, spec: &AgentSpec) -> Result<(), Refusal> {
    // A malformed agent is the caller's mistake first, in the OpenAI envelope.
    agents.validate(spec)?;
    check(grant, agents, spec)
        .map_err(|d| Refusal::Policy(Box::new(ApiError::from(d).with_endpoint(grant.endpoint().id))))
}

fn check(grant: &Grant, agents: &Agents, spec: &AgentSpec) -> Result<(), Denial> {
    let exec = grant.process_execution()?;
    let guard = exec.guard();
    // The daemon's own defaults (`/workspace`, the operator's `/v1/responses`
    // directory) are not the caller's choice: any caller gets them by naming none.
    let operator_chosen = spec.workspace == DEFAULT_WORKSPACE || spec.workspace == agents.config().responses_workspace;
    let cwd = match spec.workspace.as_str() {
        "" => guard.primary_root().to_path_buf(),
        raw if operator_chosen => std::path::PathBuf::from(raw),
        raw => exec.resolve(raw, Op::Exec, "workspace_directory")?,
    };
    let child_env = agents.child_env();
    let path = spec.env.get("PATH").or_else(|| child_env.get("PATH")).map(String::as_str);
    check_env(&spec.env, &[])?;
    check_not_dangerous(spec.env.keys(), commands_restricted(exec.engine()))?;
    check_not_secret(spec.env.keys(), |name| exec.engine().is_secret_env(name))?;
    let commands = command_guard(&exec).map_err(|e| Denial::new(Fault::ProcessInvalid, e.to_string()))?;
    for argv in programs(agents, spec) {
        check_process(&argv, path, &cwd)?;
        commands.check(&argv, false)?;
    }
    Ok(())
}
