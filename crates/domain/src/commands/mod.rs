//! Registered commands: named programs a template declares in the config
//! file (`[[commands]]`), listed by `GET /commands` and run by `POST
//! /commands/{name}` with the reference's argument validation and coercion.
//!
//! - [`spec`]: the config entries and their validation at start.
//! - [`coerce`]: argument checks and conversions (the reference's `_coerce.py`).
//! - [`run`]: the one place a command's program is started.
//!
//! Nothing here knows about HTTP.

pub mod coerce;
pub mod run;
pub mod spec;

use crate::pyrepr;
use std::collections::BTreeMap;
use std::path::Path;

use abx_wire::api::Fault;
use abx_wire::api::{CommandArgInfo, CommandInfo};
use serde_json::{Map, Value};

pub use self::coerce::{ArgError, ArgType};
use self::run::{Invocation, RunError};
pub use self::spec::{Command, CommandSpec, InputMode, OutputMode, Piece};
use crate::policy::Identity;
use crate::process::ExitStatus;

/// Prefix of the variables that carry arguments with `input = "env"`.
pub const ENV_PREFIX: &str = "ARG_";

/// Why running a command failed; each variant maps to the reference's answer.
#[derive(Debug, thiserror::Error)]
pub enum CommandError {
    /// No such command (the caller may see `available`).
    #[error("Unknown command {}; available: {}", pyrepr::repr_str(.name), if .available.is_empty() { "(none)".to_string() } else { .available.join(", ") })]
    NotFound {
        /// The name asked for.
        name: String,
        /// Names the caller may run, sorted.
        available: Vec<String>,
    },
    /// The caller lacks a scope the command needs.
    #[error("Missing required scope {}", pyrepr::repr_str(.0))]
    MissingScope(String),
    /// The arguments were refused.
    #[error("{0}")]
    Arguments(#[from] ArgError),
    /// The program exited with a non-zero code; `error_type` and `message`
    /// come from a Python traceback's last line when there is one.
    #[error("{message}")]
    Failed {
        /// The exception name to report.
        error_type: String,
        /// The message.
        message: String,
    },
    /// The program ran past its timeout and was killed.
    #[error("Command {} timed out after {}s", pyrepr::repr_str(.name), pyrepr::float_repr(*.seconds).trim_end_matches(".0"))]
    Timeout {
        /// The command.
        name: String,
        /// Its timeout.
        seconds: f64,
    },
    /// The program wrote more than its output limit and was killed.
    #[error("Command {} wrote more than {limit} bytes of output", pyrepr::repr_str(.name))]
    TooMuchOutput {
        /// The command.
        name: String,
        /// The limit.
        limit: usize,
    },
    /// `output = "json"` and the program did not print JSON.
    #[error("Command {} did not print JSON: {reason}", pyrepr::repr_str(.name))]
    InvalidOutput {
        /// The command.
        name: String,
        /// The parser's complaint.
        reason: String,
    },
    /// The program could not be started.
    #[error("Cannot start command {}: {source}", pyrepr::repr_str(.name))]
    Start {
        /// The command.
        name: String,
        /// Why.
        source: std::io::Error,
    },
}

impl CommandError {
    /// The error's row of the error table.
    pub fn fault(&self) -> Fault {
        match self {
            CommandError::NotFound { .. } => Fault::CommandNotFound,
            CommandError::MissingScope(_) => Fault::MissingScope,
            CommandError::Arguments(e) => e.fault(),
            // The command's own exception type replaces the row's.
            CommandError::Failed { .. } => Fault::CommandFailed,
            CommandError::Timeout { .. } => Fault::CommandTimeout,
            CommandError::TooMuchOutput { .. } => Fault::OutputTooLarge,
            CommandError::InvalidOutput { .. } => Fault::InvalidOutput,
            CommandError::Start { .. } => Fault::CommandNotStarted,
        }
    }
}

/// Every command the config file declares, validated.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Registry {
    commands: Vec<Command>,
}

impl Registry {
    /// Validates the config file's entries.
    ///
    /// # Errors
    /// The first problem, naming the entry (`commands[1] ('deploy'): ...`).
    pub fn from_specs(specs: &[CommandSpec]) -> Result<Registry, String> {
        let mut commands: Vec<Command> = Vec::with_capacity(specs.len());
        for (i, spec) in specs.iter().enumerate() {
            let command =
                spec.validate().map_err(|e| format!("commands[{i}] ({}): {e}", pyrepr::repr_str(&spec.name)))?;
            if commands.iter().any(|c| c.name == command.name) {
                return Err(format!("commands[{i}]: the name {} is used twice", pyrepr::repr_str(&command.name)));
            }
            commands.push(command);
        }
        Ok(Registry { commands })
    }

    /// How many commands are declared.
    pub fn len(&self) -> usize {
        self.commands.len()
    }

    /// Whether none is declared.
    pub fn is_empty(&self) -> bool {
        self.commands.is_empty()
    }

    fn may_run(identity: &Identity, command: &Command) -> bool {
        command.scopes.iter().all(|s| identity.can(s))
    }

    /// The commands `identity` may see: not hidden, every scope held; in declaration order.
    pub fn list(&self, identity: &Identity) -> Vec<CommandInfo> {
        self.commands.iter().filter(|c| !c.hidden && Self::may_run(identity, c)).map(describe).collect()
    }

    /// Checks `raw` against command `name` and what `identity` holds.
    ///
    /// # Errors
    /// [`CommandError::NotFound`], [`CommandError::MissingScope`], [`CommandError::Arguments`].
    pub fn prepare<'a>(
        &'a self,
        name: &str,
        identity: &Identity,
        raw: &Map<String, Value>,
    ) -> Result<(&'a Command, Map<String, Value>), CommandError> {
        let Some(command) = self.commands.iter().find(|c| c.name == name) else {
            let mut available: Vec<String> = self.list(identity).into_iter().map(|c| c.name).collect();
            available.sort();
            return Err(CommandError::NotFound { name: name.to_string(), available });
        };
        if let Some(scope) = command.scopes.iter().find(|s| !identity.can(s)) {
            return Err(CommandError::MissingScope(scope.clone()));
        }
        let rules: Vec<_> = command.args.iter().map(|a| a.rule.clone()).collect();
        Ok((command, coerce::coerce(&rules, raw)?))
    }
}

/// The listing entry of a command.
fn describe(command: &Command) -> CommandInfo {
    CommandInfo {
        name: command.name.clone(),
        args: command
            .args
            .iter()
            .map(|a| CommandArgInfo {
                name: a.rule.name.clone(),
                kind: a.rule.kind.as_str().to_string(),
                required: a.rule.required,
                default: a.listed_default.clone(),
                description: a.description.clone(),
            })
            .collect(),
        description: command.description.clone(),
    }
}

/// Runs `command` with coerced `args`, the child environment `env`, in its
/// `cwd` or else `base_dir`, as the caller's `user` when its identity names
/// one; returns its result value.
///
/// # Errors
/// [`CommandError::Failed`], [`CommandError::Timeout`], [`CommandError::TooMuchOutput`],
/// [`CommandError::InvalidOutput`], [`CommandError::Start`].
pub async fn execute(
    command: &Command,
    args: &Map<String, Value>,
    mut env: BTreeMap<String, String>,
    base_dir: &Path,
    user: Option<&crate::accounts::Account>,
) -> Result<Value, CommandError> {
    if let Some(user) = user {
        user.login_env(&mut env);
    }
    env.extend(command.env.iter().map(|(k, v)| (k.clone(), v.clone())));
    if command.input == InputMode::Env {
        env.extend(args.iter().map(|(k, v)| (format!("{ENV_PREFIX}{}", k.to_ascii_uppercase()), text_of(v))));
    }
    let stdin = (command.input == InputMode::Json).then(|| {
        let mut text = serde_json::to_vec(args).unwrap_or_default();
        text.push(b'\n');
        text
    });
    let cwd = command.cwd.clone().or_else(|| base_dir.is_dir().then(|| base_dir.to_path_buf()));
    let invocation = Invocation {
        argv: expand(&command.argv, args),
        env,
        cwd,
        stdin,
        timeout: command.timeout,
        max_output: command.max_output,
        run_as: user.map(crate::accounts::Account::run_as),
    };
    let name = command.name.clone();
    let finished = run::run(invocation).await.map_err(|e| match e {
        RunError::Timeout => CommandError::Timeout { name: name.clone(), seconds: command.timeout.as_secs_f64() },
        RunError::TooMuchOutput(limit) => CommandError::TooMuchOutput { name: name.clone(), limit },
        RunError::Spawn(source) | RunError::Io(source) => CommandError::Start { name: name.clone(), source },
    })?;
    match finished.exit {
        ExitStatus::Exited(0) => result_of(command, &finished.stdout),
        exit => Err(failure(&name, exit, &finished.stderr_tail)),
    }
}

/// A command's output as its result value.
fn result_of(command: &Command, stdout: &[u8]) -> Result<Value, CommandError> {
    let text = String::from_utf8_lossy(stdout);
    let text = text.strip_suffix('\n').map(|t| t.strip_suffix('\r').unwrap_or(t)).unwrap_or(&text);
    match command.output {
        OutputMode::Text => Ok(Value::String(text.to_string())),
        OutputMode::Json | OutputMode::Auto if text.trim().is_empty() => Ok(Value::Null),
        OutputMode::Json => serde_json::from_str(text)
            .map_err(|e| CommandError::InvalidOutput { name: command.name.clone(), reason: e.to_string() }),
        OutputMode::Auto => Ok(serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.to_string()))),
    }
}

/// The error of a failed run: after a Python traceback, its last line
/// (`ValueError: bad input`) becomes the type and message, as the reference
/// reports an exception; otherwise the exit and the last line of stderr.
fn failure(name: &str, exit: ExitStatus, stderr: &[u8]) -> CommandError {
    let text = String::from_utf8_lossy(stderr);
    let last = text.lines().map(str::trim).rfind(|l| !l.is_empty()).unwrap_or_default();
    let traceback = text.lines().any(|l| l.starts_with("Traceback (most recent call last):"));
    if let Some((kind, message)) = exception_line(last).filter(|_| traceback) {
        return CommandError::Failed { error_type: kind.to_string(), message: message.to_string() };
    }
    let how = match exit {
        ExitStatus::Exited(code) => format!("exited with code {code}"),
        ExitStatus::Signaled(signal) => format!("was killed by signal {signal}"),
    };
    let detail: String = last.chars().take(500).collect();
    let message = if detail.is_empty() {
        format!("Command {} {how}", pyrepr::repr_str(name))
    } else {
        format!("Command {} {how}: {detail}", pyrepr::repr_str(name))
    };
    CommandError::Failed { error_type: Fault::CommandFailed.error_type().into(), message }
}

/// `("ValueError", "bad input")` from `ValueError: bad input` or `pkg.mod.MyError: x`.
fn exception_line(line: &str) -> Option<(&str, &str)> {
    let (qualified, message) = line.split_once(": ").map_or((line, ""), |(k, m)| (k, m));
    let kind = qualified.rsplit('.').next()?;
    qualified.split('.').all(crate::policy::guards::env::is_valid_name).then_some((kind, message))
}

/// An argument's text in `argv` and `ARG_*` variables.
fn text_of(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Number(n) if n.is_f64() => n.as_f64().map(pyrepr::float_repr).unwrap_or_else(|| n.to_string()),
        other => other.to_string(),
    }
}

/// Fills the `argv` template: a whole-element placeholder of a string array
/// becomes one element per item; an element naming an argument that was not
/// given (optional, no default) is left out.
fn expand(template: &[Vec<Piece>], args: &Map<String, Value>) -> Vec<String> {
    let mut argv = Vec::with_capacity(template.len());
    for element in template {
        if let [Piece::Arg(name)] = element.as_slice() {
            match args.get(name) {
                Some(Value::Array(items)) => argv.extend(items.iter().map(text_of)),
                Some(value) => argv.push(text_of(value)),
                None => {}
            }
            continue;
        }
        let mut text = String::new();
        let complete = element.iter().all(|piece| match piece {
            Piece::Text(t) => {
                text.push_str(t);
                true
            }
            Piece::Arg(name) => args.get(name).map(|v| text.push_str(&text_of(v))).is_some(),
        });
        if complete {
            argv.push(text);
        }
    }
    argv
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn registry(text: &str) -> Registry {
        #[derive(serde::Deserialize)]
        struct File {
            commands: Vec<CommandSpec>,
        }
        let file: File = toml::from_str(text).expect("toml");
        Registry::from_specs(&file.commands).expect("valid")
    }

    #[test]
    fn argv_templates_expand_arrays_and_drop_missing_elements() {
        let r = registry(
            r#"
            [[commands]]
            name = "t"
            argv = ["prog", "--n={n}", "{tags}", "{flag}", "x{{y}}", "{ratio}"]
            args = [
              { name = "n", required = false },
              { name = "tags", type = "string_array", default = [] },
              { name = "flag", type = "boolean", default = true },
              { name = "ratio", type = "float", default = 2 },
            ]
            "#,
        );
        let (command, args) = r.prepare("t", &Identity::new("a", ["*"]), &Map::new()).expect("ok");
        assert_eq!(expand(&command.argv, &args), ["prog", "true", "x{y}", "2.0"]);
        let raw = json!({"n": 3, "tags": ["a b", "c"]}).as_object().cloned().expect("object");
        let (command, args) = r.prepare("t", &Identity::new("a", ["*"]), &raw).expect("ok");
        assert_eq!(expand(&command.argv, &args), ["prog", "--n=3", "a b", "c", "true", "x{y}", "2.0"]);
    }

    #[test]
    fn hidden_and_scoped_commands_are_listed_only_to_who_may_run_them() {
        let r = registry(
            r#"
            [[commands]]
            name = "open"
            argv = ["true"]
            [[commands]]
            name = "secret"
            argv = ["true"]
            hidden = true
            [[commands]]
            name = "deploy"
            argv = ["true"]
            scopes = ["deploy:run"]
            "#,
        );
        let plain = Identity::new("p", ["commands:*"]);
        let names = |id: &Identity| r.list(id).into_iter().map(|c| c.name).collect::<Vec<_>>();
        assert_eq!(names(&plain), ["open"]);
        assert_eq!(names(&Identity::new("d", ["commands:*", "deploy:*"])), ["open", "deploy"]);
        let err = r.prepare("deploy", &plain, &Map::new()).expect_err("scope");
        assert_eq!(err.to_string(), "Missing required scope 'deploy:run'");
        assert!(r.prepare("secret", &plain, &Map::new()).is_ok(), "hidden commands still run");
        let err = r.prepare("nope", &plain, &Map::new()).expect_err("unknown");
        assert_eq!(err.to_string(), "Unknown command 'nope'; available: open");
    }

    #[test]
    fn failures_read_like_exceptions() {
        let traceback = b"Traceback (most recent call last):\n  File \"x.py\", line 1\nmymod.BadInput: no such user\n";
        let err = failure("x", ExitStatus::Exited(1), traceback);
        assert!(
            matches!(&err, CommandError::Failed { error_type, message } if error_type == "BadInput" && message == "no such user"),
            "{err:?}"
        );
        let err = failure("x", ExitStatus::Exited(2), b"warning\nError: disk full\n\n");
        assert_eq!(err.to_string(), "Command 'x' exited with code 2: Error: disk full");
        assert_eq!(failure("x", ExitStatus::Signaled(9), b"").to_string(), "Command 'x' was killed by signal 9");
    }

    #[test]
    fn output_becomes_json_or_text() {
        let r = registry(
            r#"
            [[commands]]
            name = "auto"
            argv = ["true"]
            [[commands]]
            name = "text"
            argv = ["true"]
            output = "text"
            [[commands]]
            name = "json"
            argv = ["true"]
            output = "json"
            "#,
        );
        let get = |n: &str| r.commands.iter().find(|c| c.name == n).expect("command");
        assert_eq!(result_of(get("auto"), b"{\"a\": [1]}\n").expect("json"), json!({"a": [1]}));
        assert_eq!(result_of(get("auto"), b"Hello, x!\n").expect("text"), json!("Hello, x!"));
        assert_eq!(result_of(get("auto"), b"").expect("empty"), Value::Null);
        assert_eq!(result_of(get("text"), b"42\n").expect("text"), json!("42"));
        assert!(result_of(get("json"), b"nope").is_err());
    }
}
