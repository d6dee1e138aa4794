//! What a session runs: the agent specification a session copies when it is
//! created (runtime, model, instructions, workspace, MCP servers, limits).
//!
//! Secret values (provider keys, `secrets`, MCP header and env values) live
//! in memory only: they are skipped when a spec is persisted, and every one
//! of them is registered with the turn's redactor.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// How much a CLI may touch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Permissions {
    /// Read only (plan mode).
    ReadOnly,
    /// Edits inside the workspace.
    WorkspaceWrite,
    /// Anything the daemon's user may do (the reference's default).
    #[default]
    FullAccess,
}

/// Per-turn limits.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Limits {
    /// Wall-clock limit of a turn.
    pub turn_timeout: Duration,
    /// A turn with no output for this long is ended.
    pub idle_timeout: Duration,
    /// Bytes of standard output a turn may produce.
    pub max_output_bytes: u64,
    /// Model round trips the CLI may make (where it has the switch).
    pub max_turns: Option<u32>,
    /// Spending cap (Claude Code's `--max-budget-usd`).
    pub max_budget_usd: Option<f64>,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            turn_timeout: Duration::from_secs(1800),
            idle_timeout: Duration::from_secs(300),
            max_output_bytes: 8 * 1024 * 1024,
            max_turns: None,
            max_budget_usd: None,
        }
    }
}

/// The model endpoint a CLI talks to, when the session sets one.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Provider {
    /// Base URL of an OpenAI- or Anthropic-compatible endpoint.
    pub base_url: Option<String>,
    /// The key (memory only).
    #[serde(skip)]
    pub api_key: Option<String>,
    /// `responses` or `chat` (Codex).
    pub wire_api: Option<String>,
    /// `api_key` or `bearer` (Claude Code).
    pub auth: Option<String>,
    /// Variable the CLI reads the key from (Codex).
    pub api_key_env: Option<String>,
}

/// One MCP server handed to the CLI (remote by URL, or a local command).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct McpServer {
    /// Its label (`[A-Za-z0-9_-]{1,40}`).
    pub name: String,
    /// Remote servers: the URL.
    pub url: Option<String>,
    /// Remote servers: `http` or `sse`.
    pub transport: Option<String>,
    /// Remote servers: headers (values memory only).
    #[serde(serialize_with = "names_only")]
    pub headers: BTreeMap<String, String>,
    /// Local servers: the program.
    pub command: Option<String>,
    /// Local servers: its arguments.
    #[serde(default)]
    pub args: Vec<String>,
    /// Local servers: its environment (values memory only).
    #[serde(serialize_with = "names_only")]
    pub env: BTreeMap<String, String>,
}

fn names_only<S: serde::Serializer>(map: &BTreeMap<String, String>, s: S) -> Result<S::Ok, S::Error> {
    s.collect_map(map.keys().map(|k| (k, "")))
}

impl McpServer {
    /// A remote server at `url` with these headers.
    pub fn remote(name: &str, url: &str, headers: BTreeMap<String, String>) -> Self {
        McpServer {
            name: name.into(),
            url: Some(url.into()),
            transport: None,
            headers,
            command: None,
            args: Vec::new(),
            env: BTreeMap::new(),
        }
    }

    /// The variable that carries header `header`'s value to the CLI.
    pub fn header_var(&self, header: &str) -> String {
        env_var(&["ABX_MCP", &self.name, header])
    }

    /// The variable that carries env entry `key` to a local server.
    pub fn env_var(&self, key: &str) -> String {
        env_var(&["ABX_MCP", &self.name, "ENV", key])
    }
}

/// `ABX_MCP_<NAME>_<PART>`: every run of other characters becomes `_`, upper case.
fn env_var(parts: &[&str]) -> String {
    let clean = |p: &str| {
        let mut out = String::new();
        for c in p.chars() {
            if c.is_ascii_alphanumeric() {
                out.push(c.to_ascii_uppercase());
            } else if !out.ends_with('_') {
                out.push('_');
            }
        }
        out.trim_matches('_').to_string()
    };
    parts.iter().map(|p| clean(p)).filter(|p| !p.is_empty()).collect::<Vec<_>>().join("_")
}

/// How the `command` runtime's output is parsed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CommandParser {
    /// The runtime's own event JSON lines (`parsed.rs`).
    #[default]
    Events,
    /// Every line is assistant text.
    Text,
    /// `codex exec --json` lines.
    JsonlCodex,
    /// Claude-Code-style `stream-json` lines.
    JsonlClaude,
}

/// The program of the `command` runtime.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CommandSpec {
    /// Argv template: `{prompt}`, `{model}`, `{session_id}`, `{workdir}` are expanded.
    pub argv: Vec<String>,
    /// Argv of later turns, when the program can resume its own session.
    pub resume_argv: Option<Vec<String>>,
    /// How its output is parsed.
    #[serde(default)]
    pub parser: CommandParser,
    /// The prompt goes on standard input unless `{prompt}` is in argv or this says `argv`.
    #[serde(default)]
    pub prompt_in_argv: bool,
}

/// A session's copy of the agent it runs.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AgentSpec {
    /// The canonical runtime name (`codex`, `qwen-code`, `claude-code`, `command`).
    pub runtime: String,
    /// The model string handed to the CLI.
    pub model: Option<String>,
    /// System instructions.
    pub instructions: Option<String>,
    /// The working directory of every turn.
    pub workspace: String,
    /// Extra variables of the CLI's environment.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Secret variables of the CLI's environment (memory only).
    #[serde(skip)]
    pub secrets: BTreeMap<String, String>,
    /// MCP servers.
    #[serde(default)]
    pub mcp_servers: Vec<McpServer>,
    /// What the CLI may touch.
    #[serde(default)]
    pub permissions: Permissions,
    /// Per-turn limits.
    #[serde(default)]
    pub limits: Limits,
    /// Codex's reasoning effort.
    pub reasoning_effort: Option<String>,
    /// The model endpoint, when the session sets one.
    #[serde(default)]
    pub provider: Provider,
    /// The program of the `command` runtime.
    pub command: Option<CommandSpec>,
    /// Arguments appended to the CLI's.
    #[serde(default)]
    pub extra_args: Vec<String>,
}

impl AgentSpec {
    /// Every secret value the spec holds (for redaction).
    pub fn secret_values(&self) -> Vec<&str> {
        let mut values: Vec<&str> = self.secrets.values().map(String::as_str).collect();
        values.extend(self.provider.api_key.as_deref());
        for server in &self.mcp_servers {
            values.extend(server.headers.values().map(String::as_str));
            values.extend(server.env.values().map(String::as_str));
        }
        values.retain(|v| !v.is_empty());
        values
    }

    /// Variables that carry MCP header and env values to the CLI.
    pub fn mcp_env(&self) -> BTreeMap<String, String> {
        let mut out = BTreeMap::new();
        for server in &self.mcp_servers {
            for (header, value) in &server.headers {
                out.insert(server.header_var(header), value.clone());
            }
            for (key, value) in &server.env {
                out.insert(server.env_var(key), value.clone());
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mcp_variables_are_upper_snake_case() {
        let server = McpServer::remote("my-docs", "https://x", BTreeMap::from([("X-Api-Key".into(), "v".into())]));
        assert_eq!(server.header_var("X-Api-Key"), "ABX_MCP_MY_DOCS_X_API_KEY");
        assert_eq!(server.env_var("TOKEN"), "ABX_MCP_MY_DOCS_ENV_TOKEN");
    }

    #[test]
    fn secrets_are_not_persisted() {
        let mut spec = AgentSpec { runtime: "codex".into(), workspace: "/w".into(), ..AgentSpec::default() };
        spec.secrets.insert("TOKEN".into(), "s3cr3t-value".into());
        spec.provider.api_key = Some("sk-key-value".into());
        spec.mcp_servers.push(McpServer::remote("m", "https://x", BTreeMap::from([("A".into(), "hdr-value".into())])));
        let text = serde_json::to_string(&spec).expect("json");
        for secret in spec.secret_values() {
            assert!(!text.contains(secret), "{secret} leaked into {text}");
        }
        let back: AgentSpec = serde_json::from_str(&text).expect("back");
        assert_eq!(back.mcp_servers[0].headers.keys().collect::<Vec<_>>(), ["A"]);
    }
}
