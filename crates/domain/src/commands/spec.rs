//! `[[commands]]` in the config file: what a template author writes, and
//! its validation into a [`Command`] at start, with errors that say what to
//! change.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;

use super::coerce::{parse_scalar, ArgRule, ArgType};
use crate::pyrepr;

/// Default `timeout_seconds` of a command.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);
/// Default `max_output_bytes` of a command.
pub const DEFAULT_MAX_OUTPUT: usize = 1024 * 1024;

/// How a command's arguments reach its program.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum InputMode {
    /// Only through `{name}` placeholders in `argv` (every argument must appear in one).
    #[default]
    Argv,
    /// As `ARG_<NAME>` environment variables (placeholders still work).
    Env,
    /// As one JSON object on standard input (placeholders still work).
    Json,
}

/// How a command's standard output becomes its `result`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OutputMode {
    /// JSON when it parses as JSON, else the text (one trailing newline removed).
    #[default]
    Auto,
    /// Must be JSON (an error otherwise).
    Json,
    /// Always the text (one trailing newline removed).
    Text,
}

/// One `[[commands]]` entry as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CommandSpec {
    /// The name in `POST /commands/{name}`.
    pub name: String,
    /// Shown by `GET /commands`.
    #[serde(default)]
    pub description: String,
    /// The program and its arguments; `{arg}` placeholders are filled per call.
    pub argv: Vec<String>,
    /// The arguments callers pass.
    #[serde(default)]
    pub args: Vec<ArgSpec>,
    /// How arguments reach the program.
    #[serde(default)]
    pub input: InputMode,
    /// How its output becomes the result.
    #[serde(default)]
    pub output: OutputMode,
    /// Wall-clock limit (default 60).
    pub timeout_seconds: Option<f64>,
    /// Largest standard output (default 1 MiB).
    pub max_output_bytes: Option<u64>,
    /// Working directory (default: the base directory).
    pub cwd: Option<PathBuf>,
    /// Variables added to the child environment.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Scopes a caller needs besides `commands:run` (and to see it listed).
    #[serde(default)]
    pub scopes: Vec<String>,
    /// Runnable but not listed.
    #[serde(default)]
    pub hidden: bool,
}

/// One argument of a command as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ArgSpec {
    /// Its name (an identifier).
    pub name: String,
    /// Its type (default `string`).
    #[serde(rename = "type", default = "default_type")]
    pub kind: ArgType,
    /// Whether callers must give it (default: when it has no default).
    pub required: Option<bool>,
    /// Its value when not given.
    pub default: Option<Value>,
    /// Shown by `GET /commands`.
    #[serde(default)]
    pub description: String,
}

fn default_type() -> ArgType {
    ArgType::String
}

/// A validated argument.
#[derive(Debug, Clone, PartialEq)]
pub struct Arg {
    /// Coercion rule.
    pub rule: ArgRule,
    /// Description.
    pub description: String,
    /// The default as the reference lists it (`"1"`, `"False"`, `"[\"a\"]"`).
    pub listed_default: Option<String>,
}

/// One piece of an `argv` element.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Piece {
    /// Text as written (`{{` and `}}` unescaped).
    Text(String),
    /// The value of an argument.
    Arg(String),
}

/// A validated command.
#[derive(Debug, Clone, PartialEq)]
pub struct Command {
    /// Its name.
    pub name: String,
    /// Its description.
    pub description: String,
    /// Its arguments, in declaration order.
    pub args: Vec<Arg>,
    /// The `argv` template, element by element.
    pub argv: Vec<Vec<Piece>>,
    /// How arguments reach the program.
    pub input: InputMode,
    /// How output becomes the result.
    pub output: OutputMode,
    /// Wall-clock limit.
    pub timeout: Duration,
    /// Largest standard output.
    pub max_output: usize,
    /// Working directory, if set.
    pub cwd: Option<PathBuf>,
    /// Fixed variables.
    pub env: BTreeMap<String, String>,
    /// Extra scopes.
    pub scopes: Vec<String>,
    /// Not listed.
    pub hidden: bool,
}

impl CommandSpec {
    /// Validates the entry.
    ///
    /// # Errors
    /// What is wrong and how to fix it (without the entry's position; the caller adds it).
    pub fn validate(&self) -> Result<Command, String> {
        if self.name.is_empty() || !self.name.bytes().all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b)) {
            return Err(format!("name {} must be letters, digits, '_', '.' or '-'", pyrepr::repr_str(&self.name)));
        }
        let mut args: Vec<Arg> = Vec::with_capacity(self.args.len());
        for spec in &self.args {
            let arg = spec.validate().map_err(|e| format!("arg {}: {e}", pyrepr::repr_str(&spec.name)))?;
            if args.iter().any(|a| a.rule.name == arg.rule.name) {
                return Err(format!("arg {} is declared twice", pyrepr::repr_str(&spec.name)));
            }
            args.push(arg);
        }
        if self.argv.first().is_none_or(String::is_empty) {
            return Err("argv must start with the program to run".into());
        }
        let names: Vec<&str> = args.iter().map(|a| a.rule.name.as_str()).collect();
        let mut argv = Vec::with_capacity(self.argv.len());
        for (i, element) in self.argv.iter().enumerate() {
            let pieces =
                parse_template(element).map_err(|e| format!("argv[{i}] {}: {e}", pyrepr::repr_str(element)))?;
            for piece in &pieces {
                if let Piece::Arg(name) = piece {
                    if !names.contains(&name.as_str()) {
                        let hint = crate::policy::suggest(name, names.iter().copied());
                        return Err(format!("argv[{i}] uses {{{name}}}, which is not a declared arg{hint}"));
                    }
                }
            }
            argv.push(pieces);
        }
        if matches!(argv.first().map(Vec::as_slice), Some([Piece::Arg(_)])) {
            return Err("argv[0] must name the program, not a placeholder".into());
        }
        if self.input == InputMode::Argv {
            let used = |name: &str| argv.iter().flatten().any(|p| matches!(p, Piece::Arg(n) if n == name));
            if let Some(unused) = names.iter().find(|n| !used(n)) {
                return Err(format!(
                    "arg '{unused}' is not used in argv: add a {{{unused}}} placeholder, or set input = \"env\" or \"json\""
                ));
            }
        }
        let timeout = match self.timeout_seconds {
            None => DEFAULT_TIMEOUT,
            Some(s) if s.is_finite() && s > 0.0 && s <= 86_400.0 => Duration::from_secs_f64(s),
            Some(s) => return Err(format!("timeout_seconds must be more than 0 and at most 86400, got {s}")),
        };
        let max_output = match self.max_output_bytes {
            None => DEFAULT_MAX_OUTPUT,
            Some(0) => return Err("max_output_bytes must be at least 1".into()),
            Some(n) => usize::try_from(n).map_err(|_| "max_output_bytes is too large".to_string())?,
        };
        for name in self.env.keys() {
            if !crate::policy::guards::env::is_valid_name(name) || name.to_ascii_uppercase().starts_with("ABX_") {
                return Err(format!("env {} is not a settable variable name", pyrepr::repr_str(name)));
            }
        }
        if let Some(scope) = self.scopes.iter().find(|s| s.trim().is_empty()) {
            return Err(format!("scopes may not contain an empty scope ({})", pyrepr::repr_str(scope)));
        }
        Ok(Command {
            name: self.name.clone(),
            description: self.description.clone(),
            args,
            argv,
            input: self.input,
            output: self.output,
            timeout,
            max_output,
            cwd: self.cwd.clone(),
            env: self.env.clone(),
            scopes: self.scopes.clone(),
            hidden: self.hidden,
        })
    }
}

impl ArgSpec {
    fn validate(&self) -> Result<Arg, String> {
        if !crate::policy::guards::env::is_valid_name(&self.name) {
            return Err("the name must be an identifier ([A-Za-z_][A-Za-z0-9_]*)".into());
        }
        let required = self.required.unwrap_or(self.default.is_none());
        if required && self.default.is_some() {
            return Err("a required argument cannot have a default".into());
        }
        let default = match &self.default {
            None => None,
            Some(raw) => {
                // A string_array default may also be written as JSON text, as in Python.
                let raw = match (self.kind, raw) {
                    (ArgType::StringArray, Value::String(text)) => serde_json::from_str(text).unwrap_or(Value::Null),
                    _ => raw.clone(),
                };
                let value = parse_scalar(&raw, self.kind).map_err(|e| {
                    format!("default {} is not a valid {}: {e}", pyrepr::repr(&raw), self.kind.as_str())
                })?;
                Some(value)
            }
        };
        let listed_default = default.as_ref().map(|v| listed(v, self.kind));
        Ok(Arg {
            rule: ArgRule { name: self.name.clone(), kind: self.kind, required, default },
            description: self.description.clone(),
            listed_default,
        })
    }
}

/// A default as the reference lists it: `str()` of a scalar, `json.dumps` of an array.
fn listed(value: &Value, kind: ArgType) -> String {
    match (kind, value) {
        (ArgType::StringArray, Value::Array(items)) => {
            let items: Vec<String> = items.iter().map(|s| pyrepr::json_str(s.as_str().unwrap_or_default())).collect();
            format!("[{}]", items.join(", "))
        }
        _ => pyrepr::str_of(value),
    }
}

/// Splits an `argv` element into text and `{arg}` placeholders (`{{` is a literal `{`).
fn parse_template(element: &str) -> Result<Vec<Piece>, String> {
    let mut pieces = Vec::new();
    let mut text = String::new();
    let mut chars = element.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '{' if chars.peek() == Some(&'{') => {
                chars.next();
                text.push('{');
            }
            '}' if chars.peek() == Some(&'}') => {
                chars.next();
                text.push('}');
            }
            '{' => {
                let mut name = String::new();
                let mut closed = false;
                for c in chars.by_ref() {
                    if c == '}' {
                        closed = true;
                        break;
                    }
                    name.push(c);
                }
                if !closed || !crate::policy::guards::env::is_valid_name(&name) {
                    return Err(format!("'{{{name}' is not a placeholder (write {{{{ for a literal brace)"));
                }
                if !text.is_empty() {
                    pieces.push(Piece::Text(std::mem::take(&mut text)));
                }
                pieces.push(Piece::Arg(name));
            }
            '}' => return Err("unmatched '}' (write }} for a literal brace)".into()),
            c => text.push(c),
        }
    }
    if !text.is_empty() || pieces.is_empty() {
        pieces.push(Piece::Text(text));
    }
    Ok(pieces)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(toml_text: &str) -> Result<Command, String> {
        let spec: CommandSpec = toml::from_str(toml_text).map_err(|e| e.to_string())?;
        spec.validate()
    }

    #[test]
    fn a_full_command_validates_and_lists_defaults_as_the_reference() {
        let command = spec(
            r#"
            name = "greet"
            argv = ["greet", "--name={name}", "{times}", "{loud}", "{ratio}", "{tags}"]
            args = [
              { name = "name", description = "who" },
              { name = "times", type = "integer", default = 1 },
              { name = "loud", type = "boolean", default = false },
              { name = "ratio", type = "float", default = "0.5" },
              { name = "tags", type = "string_array", default = ["a", "é"] },
            ]
            "#,
        )
        .expect("valid");
        let listed: Vec<Option<&str>> = command.args.iter().map(|a| a.listed_default.as_deref()).collect();
        assert_eq!(listed, [None, Some("1"), Some("False"), Some("0.5"), Some("[\"a\", \"\\u00e9\"]")]);
        assert!(command.args[0].rule.required && !command.args[1].rule.required);
        assert_eq!(command.argv[1], [Piece::Text("--name=".into()), Piece::Arg("name".into())]);
        assert_eq!((command.timeout, command.max_output), (DEFAULT_TIMEOUT, DEFAULT_MAX_OUTPUT));
    }

    #[test]
    fn mistakes_are_explained() {
        let cases = [
            (
                r#"name = "x y"
                argv = ["a"]"#,
                "name 'x y' must be letters",
            ),
            (
                r#"name = "x"
                argv = []"#,
                "argv must start with the program",
            ),
            (
                r#"name = "x"
                argv = ["a", "{nme}"]
                args = [{ name = "name" }]"#,
                "argv[1] uses {nme}, which is not a declared arg (did you mean 'name'?)",
            ),
            (
                r#"name = "x"
                argv = ["a"]
                args = [{ name = "name" }]"#,
                "arg 'name' is not used in argv",
            ),
            (
                r#"name = "x"
                argv = ["a", "{n}"]
                args = [{ name = "n", type = "integer", default = "many" }]"#,
                "arg 'n': default 'many' is not a valid integer",
            ),
            (
                r#"name = "x"
                argv = ["a", "{n}"]
                args = [{ name = "n", required = true, default = "1" }]"#,
                "a required argument cannot have a default",
            ),
            (
                r#"name = "x"
                argv = ["a", "{n"]
                args = [{ name = "n" }]"#,
                "argv[1] '{n': '{n' is not a placeholder",
            ),
            (
                r#"name = "x"
                argv = ["a"]
                timeout_seconds = 0"#,
                "timeout_seconds must be more than 0",
            ),
            (
                r#"name = "x"
                argv = ["a"]
                args = [{ name = "n", type = "list" }]"#,
                "unknown variant `list`",
            ),
            (
                r#"name = "x"
                argv = ["a"]
                env = { ABX_SERVER_TOKEN = "t" }"#,
                "env 'ABX_SERVER_TOKEN' is not a settable variable name",
            ),
        ];
        for (text, expected) in cases {
            let err = spec(text).expect_err(text);
            assert!(err.contains(expected), "{err}\n  does not contain: {expected}");
        }
    }

    #[test]
    fn env_and_json_inputs_need_no_placeholders_and_braces_escape() {
        let command = spec(
            r#"
            name = "x"
            argv = ["printf", "{{%s}}"]
            input = "json"
            args = [{ name = "n", required = false }]
            "#,
        )
        .expect("valid");
        assert_eq!(command.argv[1], [Piece::Text("{%s}".into())]);
        assert!(!command.args[0].rule.required && command.args[0].rule.default.is_none());
    }
}
