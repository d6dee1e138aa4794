//! Adapters: one per coding-agent CLI. An adapter turns a turn into the
//! CLI's argv, environment, standard input and config files, and parses
//! its output lines into [`Parsed`] events. Adapters never spawn anything:
//! the runner (`runner.rs`) does, under the process supervisor.
//!
//! Built in: `codex` (`codex exec --json`), `qwen-code` (`qwen ...
//! --output-format stream-json`), `claude-code` (`claude -p --output-format
//! stream-json`), and `command` (any program printing the runtime's own
//! event lines). `cursor` is declared, as in the reference, and not
//! implemented.

pub mod claude;
pub mod codex;
pub mod command;
pub mod qwen;
pub mod stream_json;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::LazyLock;

use regex::Regex;
use serde::Serialize;

use super::error::Failure;
use super::parsed::Parsed;
use super::spec::AgentSpec;

/// What a runtime supports (reported by `GET /v1/agents/runtimes`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Capabilities {
    /// Later turns continue the CLI's own session.
    pub resume: bool,
    /// Text streams in deltas.
    pub partial_deltas: bool,
    /// MCP servers can be attached.
    pub mcp: bool,
    /// `flag` or `preamble`: how instructions reach the model.
    pub system_prompt: &'static str,
    /// The model endpoint can be set.
    pub base_url: bool,
    /// A model round-trip limit exists.
    pub max_turns: bool,
    /// A spending limit exists.
    pub budget: bool,
    /// Marked experimental upstream.
    pub experimental: bool,
}

/// A file the runner writes before starting the CLI.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvocationFile {
    /// Where.
    pub path: PathBuf,
    /// What.
    pub content: Vec<u8>,
    /// Merge into an existing JSON file under this key instead of replacing it.
    pub merge_key: Option<&'static str>,
}

/// Everything needed to start one turn's CLI (secrets only in `env`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Invocation {
    /// Program and arguments.
    pub argv: Vec<String>,
    /// Variables added to the CLI's environment.
    pub env: BTreeMap<String, String>,
    /// Bytes written to its standard input (then closed); `None` is `/dev/null`.
    pub stdin: Option<Vec<u8>>,
    /// Files written first.
    pub files: Vec<InvocationFile>,
}

/// The inputs of one turn.
#[derive(Debug, Clone)]
pub struct TurnContext<'a> {
    /// The session's spec.
    pub spec: &'a AgentSpec,
    /// The turn's prompt (with per-turn instructions already prepended).
    pub prompt: String,
    /// The workspace directory.
    pub workdir: PathBuf,
    /// A private directory that lives as long as the turn.
    pub turn_dir: PathBuf,
    /// The CLI's own session id from an earlier turn.
    pub native_session_id: Option<String>,
    /// Whether the daemon runs as root.
    pub is_root: bool,
}

impl TurnContext<'_> {
    /// The prompt with the agent's instructions before it, on the first turn only.
    pub fn with_preamble(&self) -> String {
        match (&self.spec.instructions, &self.native_session_id) {
            (Some(instructions), None) if !instructions.is_empty() => {
                format!("{}\n\n---\n\n{}", instructions.trim(), self.prompt)
            }
            _ => self.prompt.clone(),
        }
    }

    /// A prompt safe as one argv element: it never starts with `-`.
    pub fn argv_prompt(prompt: &str) -> String {
        if prompt.starts_with('-') {
            format!("Task: {prompt}")
        } else {
            prompt.to_string()
        }
    }
}

/// An incremental parser of one turn's output.
pub trait Parser: Send {
    /// Parses one line of standard output (without its newline).
    fn feed(&mut self, line: &str, out: &mut Vec<Parsed>);
    /// Flushes what is pending once the CLI has exited.
    fn finish(&mut self, _exit_code: Option<i32>, _out: &mut Vec<Parsed>) {}
}

/// The fixed facts of an adapter.
#[derive(Debug, Clone, Copy)]
pub struct Descriptor {
    /// Canonical name.
    pub name: &'static str,
    /// Other names it answers to.
    pub aliases: &'static [&'static str],
    /// Its program (`None`: no fixed binary).
    pub binary: Option<&'static str>,
    /// How the reference installs it.
    pub install_steps: &'static [&'static [&'static str]],
    /// What it supports.
    pub capabilities: Capabilities,
    /// Server variables handed to this runtime's CLI only.
    pub passthrough_env: &'static [&'static str],
    /// Conventional credential variables (the health report says whether one is set).
    pub credential_env: &'static [&'static str],
    /// Whether this server runs it.
    pub implemented: bool,
}

/// A coding-agent CLI.
pub trait Adapter: Send + Sync {
    /// Its fixed facts.
    fn descriptor(&self) -> &'static Descriptor;
    /// Problems of `spec` for this runtime.
    fn validate(&self, _spec: &AgentSpec) -> Vec<String> {
        Vec::new()
    }
    /// The argv, environment, input and files of one turn.
    fn invocation(&self, ctx: &TurnContext<'_>) -> Invocation;
    /// A fresh parser for one turn.
    fn parser(&self, ctx: &TurnContext<'_>) -> Box<dyn Parser>;
    /// The failure of a non-zero exit (the message is redacted by the caller).
    fn classify_failure(&self, exit_code: Option<i32>, stderr_tail: &str) -> Failure {
        default_failure(self.descriptor().binary.unwrap_or("the agent"), exit_code, stderr_tail)
    }
}

/// The failure of a non-zero exit: a code guessed from the stderr text.
pub fn default_failure(binary: &str, exit_code: Option<i32>, stderr_tail: &str) -> Failure {
    let text = stderr_tail.trim();
    let code = classify_text(text);
    if text.is_empty() {
        let status = exit_code.map_or_else(|| "a signal".to_string(), |c| format!("status {c}"));
        return Failure::new(code, format!("{binary} exited with {status}"));
    }
    let start = text.char_indices().rev().nth(1499).map_or(0, |(i, _)| i);
    Failure::new(code, &text[start..])
}

static CLASSIFIERS: LazyLock<Vec<(&'static str, Regex)>> = LazyLock::new(|| {
    [
        (
            "authentication_error",
            r"(?i)\b401\b|\b403\b|unauthori[sz]ed|invalid[ _-]?api[ _-]?key|incorrect api key|authentication|not logged in|/login|invalid x-api-key|permission denied.*api",
        ),
        ("rate_limit_exceeded", r"(?i)\b429\b|rate[ _-]?limit|quota|too many requests"),
        ("server_overloaded", r"(?i)overloaded|\b503\b|\b529\b|service unavailable"),
        ("context_length_exceeded", r"(?i)context[ _-]?length|prompt is too long|too many tokens|maximum context"),
        ("connection_failed", r"(?i)ECONNREFUSED|ENOTFOUND|connection (?:refused|reset)|getaddrinfo"),
    ]
    .into_iter()
    .filter_map(|(code, pattern)| Regex::new(pattern).ok().map(|re| (code, re)))
    .collect()
});

/// Best-effort Agents error code of an error text.
pub fn classify_text(text: &str) -> &'static str {
    CLASSIFIERS.iter().find(|(_, re)| re.is_match(text)).map_or("internal_error", |(code, _)| code)
}

/// Every declared runtime, in the reference's product order first.
pub struct Adapters {
    all: Vec<Box<dyn Adapter>>,
}

impl std::fmt::Debug for Adapters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.all.iter().map(|a| a.descriptor().name)).finish()
    }
}

/// `cursor`: declared by the reference, implemented by neither.
pub static CURSOR: Descriptor = Descriptor {
    name: "cursor",
    aliases: &["cursor-agent", "cursor_agent"],
    binary: Some("cursor-agent"),
    install_steps: &[&["sh", "-c", "curl -fsS https://cursor.com/install | bash"]],
    capabilities: Capabilities {
        resume: true,
        partial_deltas: true,
        mcp: true,
        system_prompt: "preamble",
        base_url: false,
        max_turns: false,
        budget: false,
        experimental: true,
    },
    passthrough_env: &[],
    credential_env: &["CURSOR_API_KEY"],
    implemented: false,
};

struct Declared(&'static Descriptor);

impl Adapter for Declared {
    fn descriptor(&self) -> &'static Descriptor {
        self.0
    }
    fn invocation(&self, _ctx: &TurnContext<'_>) -> Invocation {
        Invocation::default()
    }
    fn parser(&self, _ctx: &TurnContext<'_>) -> Box<dyn Parser> {
        Box::new(command::TextParser::default())
    }
}

/// Runtimes a request that names none tries, in order (as the reference).
pub const DEFAULT_ORDER: [&str; 2] = ["codex", "qwen-code"];

impl Default for Adapters {
    fn default() -> Self {
        Adapters {
            all: vec![
                Box::new(codex::Codex),
                Box::new(qwen::QwenCode),
                Box::new(claude::ClaudeCode),
                Box::new(command::Command),
                Box::new(Declared(&CURSOR)),
            ],
        }
    }
}

impl Adapters {
    /// The canonical name of `name` or an alias (case-insensitive).
    pub fn resolve(&self, name: &str) -> Option<&'static str> {
        let key = name.trim().to_ascii_lowercase();
        self.all
            .iter()
            .map(|a| a.descriptor())
            .find(|d| d.name == key || d.aliases.contains(&key.as_str()))
            .map(|d| d.name)
    }

    /// The adapter called `name` (or an alias).
    pub fn get(&self, name: &str) -> Option<&dyn Adapter> {
        let canonical = self.resolve(name)?;
        self.all.iter().find(|a| a.descriptor().name == canonical).map(AsRef::as_ref)
    }

    /// Every declared runtime: the default order first, then by name.
    pub fn ordered(&self) -> Vec<&'static Descriptor> {
        let mut rest: Vec<&'static Descriptor> =
            self.all.iter().map(|a| a.descriptor()).filter(|d| !DEFAULT_ORDER.contains(&d.name)).collect();
        rest.sort_by_key(|d| d.name);
        DEFAULT_ORDER.iter().filter_map(|n| self.get(n).map(|a| a.descriptor())).chain(rest).collect()
    }
}

/// Every event `parser` makes of `lines` (for tests of parsers).
#[cfg(test)]
pub fn parse_lines(parser: &mut dyn Parser, lines: &[&str]) -> Vec<Parsed> {
    let mut out = Vec::new();
    for line in lines {
        parser.feed(line, &mut out);
    }
    out
}

/// A TOML key segment, quoted when it is not bare.
pub fn toml_key(key: &str) -> String {
    if !key.is_empty() && key.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-') {
        key.to_string()
    } else {
        serde_json::Value::String(key.to_string()).to_string()
    }
}

/// A JSON value as a TOML literal (strings, booleans, numbers, arrays, inline tables).
pub fn toml_value(value: &serde_json::Value) -> String {
    use serde_json::Value;
    match value {
        Value::Null => "\"\"".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => Value::String(s.clone()).to_string(),
        Value::Array(items) => format!("[{}]", items.iter().map(toml_value).collect::<Vec<_>>().join(", ")),
        Value::Object(map) => format!(
            "{{{}}}",
            map.iter().map(|(k, v)| format!("{} = {}", toml_key(k), toml_value(v))).collect::<Vec<_>>().join(", ")
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_aliases_resolve_and_order_follows_the_reference() {
        let adapters = Adapters::default();
        assert_eq!(adapters.resolve("Qwen"), Some("qwen-code"));
        assert_eq!(adapters.resolve("claude"), Some("claude-code"));
        assert_eq!(adapters.resolve("custom"), Some("command"));
        assert_eq!(adapters.resolve("nope"), None);
        let names: Vec<_> = adapters.ordered().iter().map(|d| d.name).collect();
        assert_eq!(names, ["codex", "qwen-code", "claude-code", "command", "cursor"]);
    }

    #[test]
    fn failures_are_classified_from_their_text() {
        assert_eq!(classify_text("HTTP 429 Too Many Requests"), "rate_limit_exceeded");
        assert_eq!(classify_text("Invalid API key provided"), "authentication_error");
        assert_eq!(classify_text("connect ECONNREFUSED 127.0.0.1:1"), "connection_failed");
        assert_eq!(classify_text("segfault"), "internal_error");
        assert_eq!(default_failure("codex", Some(2), "").message, "codex exited with status 2");
    }

    #[test]
    fn toml_literals() {
        let v = serde_json::json!({"a b": [1, "x"], "ok": true});
        assert_eq!(toml_value(&v), r#"{"a b" = [1, "x"], ok = true}"#);
    }
}
