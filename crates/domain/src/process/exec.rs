//! From an exec request to a command ready to spawn, through the policy.
//!
//! [`prepare`] applies what the reference's `enforce_exec_policy` does, in
//! its order: split the command, the process guard, the env guard, the
//! command guard, the `cwd` path check (operation `exec`), the
//! `timeout_seconds` cap, secret names; then builds the child's environment
//! from the server's (secrets removed) plus the call's, and resolves `user`.
//! It touches the filesystem (path resolution, `PATH` lookup, user
//! database): call it from a blocking context.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use abx_wire::api::Fault;
use abx_wire::codec::shlex::split;
use abx_wire::endpoints::Limit;

use super::ProcessError;
use crate::accounts::LookupError;
use crate::environment::ChildEnv;
use crate::policy::guards::{
    check_env, check_not_dangerous, check_not_secret, check_process, command_guard, commands_restricted,
};
use crate::policy::{Denial, Grant, LimitValue, Op};
use crate::syscalls::RunAs;

/// Default wall-clock limit of `/shell` and `/shell/stream`, as the reference.
pub const DEFAULT_TIMEOUT_SECONDS: f64 = 300.0;

/// Which endpoint is preparing the command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExecKind {
    /// `POST /shell`.
    Shell,
    /// `POST /shell/stream`.
    Stream,
    /// `POST /process/start` (no timeout unless asked for).
    Start,
}

/// What to run, as the caller gave it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CommandLine {
    /// One line split into words shell-style, without a shell (the reference's `/shell`).
    Split(String),
    /// One line run by `/bin/sh -c`.
    Shell(String),
    /// Words already split (envd's `cmd` and `args`).
    Argv(Vec<String>),
}

/// A request to run a program, in domain terms (no wire type).
#[derive(Debug, Clone)]
pub struct ExecInput {
    /// The program and its arguments.
    pub command: CommandLine,
    /// Working directory, through the endpoint's path rules (`None` or empty: the base directory).
    pub cwd: Option<String>,
    /// Variables added to the child environment.
    pub env: Option<BTreeMap<String, String>>,
    /// Wall-clock limit in seconds (`None` or not positive: the endpoint's default).
    pub timeout: Option<f64>,
    /// Run as this user (a name or a uid).
    pub user: Option<String>,
}

impl ExecInput {
    /// `command`, split shell-style, with everything else at its default.
    pub fn new(command: CommandLine) -> Self {
        ExecInput { command, cwd: None, env: None, timeout: None, user: None }
    }
}

/// A command that passed the policy, ready to spawn.
#[derive(Debug, Clone)]
pub struct ExecSpec {
    /// The command line as given (reported back by the process endpoints;
    /// the words joined by spaces for an argv).
    pub command: String,
    /// What runs (`argv[0]` as given).
    pub argv: Vec<String>,
    /// The executable `argv[0]` resolves to on the child's `PATH`, when found.
    pub program: Option<PathBuf>,
    /// Working directory (`None`: the daemon's).
    pub cwd: Option<PathBuf>,
    /// The child's whole environment.
    pub env: BTreeMap<String, String>,
    /// Wall-clock limit, in seconds.
    pub timeout: Option<f64>,
    /// Run as another user.
    pub credentials: Option<RunAs>,
}

impl ExecSpec {
    /// The timeout as a duration.
    pub fn deadline(&self) -> Option<Duration> {
        self.timeout.and_then(|t| Duration::try_from_secs_f64(t).ok())
    }

    /// How the supervisor sets the child up (the user it runs as).
    pub fn spawn_options(&self) -> super::SpawnOptions {
        super::SpawnOptions { credentials: self.credentials.clone(), ..super::SpawnOptions::default() }
    }

    /// A std command for this spec with the given stdio (spawn it through the supervisor).
    pub fn command(&self, stdin: Stdio, stdout: Stdio, stderr: Stdio) -> Command {
        use std::os::unix::process::CommandExt;
        let mut command = match &self.program {
            // Resolved already: std can use posix_spawn instead of fork + execvp.
            Some(program) => {
                let mut command = Command::new(program);
                command.arg0(&self.argv[0]);
                command
            }
            None => Command::new(&self.argv[0]),
        };
        command.args(&self.argv[1..]).env_clear().envs(&self.env).stdin(stdin).stdout(stdout).stderr(stderr);
        if let Some(cwd) = &self.cwd {
            command.current_dir(cwd);
        }
        command
    }
}

fn missing_command() -> ProcessError {
    ProcessError::Invalid("Missing or invalid 'command'".into())
}

/// Checks `request` against the endpoint's policy and builds the command.
///
/// # Errors
/// 400s for malformed input, the guards' denials, and the path refusals of `cwd`.
pub fn prepare(
    grant: &Grant,
    child_env: &ChildEnv,
    request: &ExecInput,
    kind: ExecKind,
) -> Result<ExecSpec, ProcessError> {
    let (mut argv, shell, command) = match &request.command {
        CommandLine::Split(line) | CommandLine::Shell(line) if line.is_empty() => return Err(missing_command()),
        CommandLine::Split(line) => {
            let words = split(line).map_err(|e| ProcessError::Invalid(format!("Invalid command: {e}")))?;
            (words, false, line.clone())
        }
        CommandLine::Shell(line) => (vec!["/bin/sh".to_string(), "-c".to_string(), line.clone()], true, line.clone()),
        CommandLine::Argv(words) => (words.clone(), false, words.join(" ")),
    };
    if argv.is_empty() {
        return Err(missing_command());
    }
    let default_timeout = match kind {
        ExecKind::Shell | ExecKind::Stream => Some(DEFAULT_TIMEOUT_SECONDS),
        ExecKind::Start => None,
    };
    let mut timeout = match request.timeout {
        Some(t) if t > 0.0 && t.is_finite() => Some(t),
        _ => default_timeout,
    };
    let guard = grant.guard();
    let raw_cwd = request.cwd.as_deref().filter(|c| !c.is_empty());
    let cwd = match raw_cwd {
        Some(raw) => Some(guard.resolve(raw, Op::Exec, "cwd")?),
        None => Some(guard.primary_root().to_path_buf()).filter(|root| root.is_dir()),
    };
    let extra = request.env.clone().unwrap_or_default();
    let path_var = extra.get("PATH").cloned().or_else(|| child_env.get("PATH"));
    let looked_up = check_process(&argv, path_var.as_deref(), cwd.as_deref().unwrap_or(std::path::Path::new("/")))?;
    check_env(&extra, &[])?;
    check_not_dangerous(extra.keys(), commands_restricted(grant.engine()))?;
    let commands = command_guard(grant).map_err(|e| ProcessError::Invalid(e.to_string()))?;
    let admitted = commands.check(&argv, shell)?;
    // A `{path}` rule may rewrite argv[0]; then std looks the program up itself.
    let unchanged = admitted[0] == argv[0];
    argv = admitted;
    if let Some(cap) = grant.limit(Limit::TimeoutSeconds).map(LimitValue::as_f64) {
        timeout = Some(timeout.map_or(cap, |t| t.min(cap)));
    }
    check_not_secret(extra.keys(), |name| grant.engine().is_secret_env(name) || child_env.is_secret(name))?;
    if let (Some(raw), Some(dir)) = (raw_cwd, &cwd) {
        if !dir.is_dir() {
            return Err(ProcessError::Invalid(format!("'cwd' is not a directory: {raw}")));
        }
    }
    let mut env = child_env.snapshot();
    let asked = request.user.as_deref().filter(|u| !u.is_empty());
    let credentials = match (grant.identity().user.as_deref(), asked) {
        // An identity with a user of its own runs as that user only.
        (Some(own), Some(asked)) if !own.is(asked) => {
            return Err(Denial::new(
                Fault::UserNotAllowed,
                format!("Identity '{}' runs programs as '{}' only", grant.identity().id, own.name),
            )
            .into())
        }
        (Some(own), _) if own.is_other() => {
            own.login_env(&mut env);
            grant.run_as()
        }
        (_, Some(user)) => Some(run_as(user, &mut env)?),
        (_, None) => None,
    };
    env.extend(extra);
    // Found on `PATH`, it is an executable file already (`which` checked); given with a `/`, check it.
    let program = Some(looked_up).filter(|p| unchanged && p.is_absolute() && (!argv[0].contains('/') || p.is_file()));
    Ok(ExecSpec { command, argv, program, cwd, env, timeout, credentials })
}

/// Resolves `user` (a name or a uid) and points `HOME`, `USER` and `LOGNAME` at it.
fn run_as(user: &str, env: &mut BTreeMap<String, String>) -> Result<RunAs, ProcessError> {
    let account = crate::accounts::lookup(user).map_err(|e| match e {
        LookupError::Unknown(_) => Denial::new(Fault::UserUnknown, format!("Unknown user '{user}'")),
        LookupError::NotRoot { .. } => {
            Denial::new(Fault::UserNotAllowed, "Running as another user needs the server to run as root")
        }
    })?;
    account.login_env(env);
    Ok(RunAs { no_new_privs: false, ..account.run_as() })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::policy::rules::{Layer, Rank, RuleSpec, Selector};
    use crate::policy::{Identity, ParamValue, PolicyDocument, PolicyEngine, PolicyInputs};
    use abx_wire::endpoints::Param;

    /// A grant for `endpoint` under one policy rule, with `base` as the base directory.
    fn grant(endpoint: &str, base: &std::path::Path, rule: RuleSpec) -> Grant {
        let layer =
            Layer { selector: Selector::Exact(endpoint.into()), rank: Rank::Policy, rule, origin: "test".into() };
        let document = PolicyDocument { layers: vec![layer], ..PolicyDocument::default() };
        let inputs = PolicyInputs { base_dir: base.to_path_buf(), document: Some(document), ..PolicyInputs::default() };
        let engine = Arc::new(PolicyEngine::new(inputs).expect("valid policy"));
        let ep = abx_wire::endpoints::find(endpoint).expect("endpoint");
        engine.admit(ep, Arc::new(Identity::new("t", ["*"]))).expect("admitted").0
    }

    fn env() -> ChildEnv {
        ChildEnv::from_vars([("PATH".to_string(), "/usr/bin:/bin".to_string())], &["MY_SECRET".to_string()])
    }

    fn request(command: &str) -> ExecInput {
        ExecInput::new(CommandLine::Split(command.into()))
    }

    #[test]
    fn timeouts_default_per_endpoint_and_are_capped_by_the_policy() {
        let dir = tempfile::tempdir().expect("tmp");
        let free = grant("shell", dir.path(), RuleSpec::default());
        assert_eq!(prepare(&free, &env(), &request("true"), ExecKind::Shell).expect("ok").timeout, Some(300.0));
        let start = grant("process_start", dir.path(), RuleSpec::default());
        assert_eq!(prepare(&start, &env(), &request("true"), ExecKind::Start).expect("ok").timeout, None);
        let mut capped = RuleSpec::default();
        capped.limits.insert(Limit::TimeoutSeconds, LimitValue::Number(2.5));
        let capped = grant("shell", dir.path(), capped);
        let asked = ExecInput { timeout: Some(10.0), ..request("true") };
        assert_eq!(prepare(&capped, &env(), &asked, ExecKind::Shell).expect("ok").timeout, Some(2.5));
        let spec = prepare(&free, &env(), &request("true"), ExecKind::Shell).expect("ok");
        assert_eq!(spec.program.as_deref(), Some(std::path::Path::new("/usr/bin/true")));
        assert_eq!(spec.cwd, Some(dir.path().canonicalize().expect("real")));
    }

    #[test]
    fn command_rules_apply_and_forbid_a_shell() {
        let dir = tempfile::tempdir().expect("tmp");
        let mut rule = RuleSpec::default();
        rule.params.insert(Param::AllowCommands, ParamValue::Strings(vec!["echo ...".into()]));
        let g = grant("shell", dir.path(), rule);
        assert!(prepare(&g, &env(), &request("echo hi"), ExecKind::Shell).is_ok());
        let code = |r: Result<ExecSpec, ProcessError>| match r {
            Err(ProcessError::Denied(d)) => d.code(),
            other => panic!("expected a denial, got {other:?}"),
        };
        assert_eq!(code(prepare(&g, &env(), &request("rm -rf x"), ExecKind::Shell)), "command_not_allowed");
        let shell = ExecInput::new(CommandLine::Shell("echo hi".into()));
        assert_eq!(code(prepare(&g, &env(), &shell, ExecKind::Shell)), "shell_not_allowed");
        let preload = [("LD_PRELOAD".to_string(), "/tmp/x.so".to_string())].into();
        let with_preload = ExecInput { env: Some(preload), ..request("echo hi") };
        assert_eq!(code(prepare(&g, &env(), &with_preload, ExecKind::Shell)), "env_var_denied", "commands restricted");
        let free = grant("shell", dir.path(), RuleSpec::default());
        assert!(prepare(&free, &env(), &with_preload, ExecKind::Shell).is_ok(), "no command rules: as the reference");
    }

    #[test]
    fn env_and_cwd_are_checked() {
        let dir = tempfile::tempdir().expect("tmp");
        std::fs::write(dir.path().join("file"), b"").expect("file");
        let g = grant("shell", dir.path(), RuleSpec::default());
        let with_env = |k: &str| ExecInput { env: Some([(k.to_string(), "x".to_string())].into()), ..request("env") };
        let denial = |r: Result<ExecSpec, ProcessError>| match r {
            Err(ProcessError::Denied(d)) => d.code(),
            other => panic!("expected a denial, got {other:?}"),
        };
        assert_eq!(denial(prepare(&g, &env(), &with_env("MY_SECRET"), ExecKind::Shell)), "env_var_not_allowed");
        assert_eq!(denial(prepare(&g, &env(), &with_env("ABX_X"), ExecKind::Shell)), "env_var_denied");
        let spec = prepare(&g, &env(), &with_env("OK_VAR"), ExecKind::Shell).expect("ok");
        assert_eq!(spec.env.get("OK_VAR").map(String::as_str), Some("x"));
        let outside = ExecInput { cwd: Some("/etc".into()), ..request("ls") };
        assert_eq!(denial(prepare(&g, &env(), &outside, ExecKind::Shell)), "path_not_allowed");
        let file = ExecInput { cwd: Some("file".into()), ..request("ls") };
        assert!(
            matches!(prepare(&g, &env(), &file, ExecKind::Shell), Err(ProcessError::Invalid(m)) if m == "'cwd' is not a directory: file")
        );
        assert!(matches!(prepare(&g, &env(), &request("  "), ExecKind::Shell), Err(ProcessError::Invalid(_))));
    }

    #[tokio::test]
    async fn max_output_bytes_truncates_shell_output_at_a_character() {
        let dir = tempfile::tempdir().expect("tmp");
        let g = grant("shell", dir.path(), RuleSpec::default());
        let spec = prepare(&g, &env(), &request("printf 'abé0123456789'"), ExecKind::Shell).expect("ok");
        let result = super::super::shell::run(spec, Some(3)).await.expect("runs");
        assert_eq!((result.stdout.as_str(), result.truncated), ("ab", Some(true)), "the cut é is left out whole");
        let spec = prepare(&g, &env(), &request("printf abc"), ExecKind::Shell).expect("ok");
        assert_eq!(super::super::shell::run(spec, Some(3)).await.expect("runs").truncated, None);
    }
}
