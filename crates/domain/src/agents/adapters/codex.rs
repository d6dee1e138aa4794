//! OpenAI Codex CLI: `codex exec [resume ID] --json ... -`, prompt on stdin.

use std::collections::HashSet;

use serde_json::{json, Map, Value};

use super::{toml_key, toml_value, Adapter, Capabilities, Descriptor, Invocation, Parser, TurnContext};
use crate::agents::parsed::{json_object, json_text, str_at, u64_at, Parsed, SubagentOp, ToolKind, UsageDelta};
use crate::agents::spec::{AgentSpec, Permissions};

/// The variable that carries a custom provider's key.
pub const PROVIDER_KEY_ENV: &str = "ABX_PROVIDER_API_KEY";

static DESCRIPTOR: Descriptor = Descriptor {
    name: "codex",
    aliases: &["openai-codex"],
    binary: Some("codex"),
    install_steps: &[&["npm", "install", "-g", "@openai/codex"]],
    capabilities: Capabilities {
        resume: true,
        partial_deltas: false,
        mcp: true,
        system_prompt: "preamble",
        base_url: true,
        max_turns: false,
        budget: false,
        experimental: false,
    },
    passthrough_env: &["OPENAI_API_KEY", "CODEX_API_KEY", "OPENAI_BASE_URL"],
    credential_env: &["CODEX_API_KEY", "OPENAI_API_KEY"],
    implemented: true,
};

/// The Codex adapter.
#[derive(Debug, Clone, Copy)]
pub struct Codex;

impl Adapter for Codex {
    fn descriptor(&self) -> &'static Descriptor {
        &DESCRIPTOR
    }

    fn validate(&self, spec: &AgentSpec) -> Vec<String> {
        if spec.provider.auth.as_deref() == Some("bearer") {
            return vec!["provider.auth='bearer' is not supported by codex (use api_key)".into()];
        }
        Vec::new()
    }

    fn invocation(&self, ctx: &TurnContext<'_>) -> Invocation {
        let spec = ctx.spec;
        let mut inv = Invocation::default();
        let mut argv: Vec<String> = vec!["codex".into(), "exec".into()];
        if let Some(native) = &ctx.native_session_id {
            argv.extend(["resume".into(), native.clone()]);
        }
        argv.extend(["--json".into(), "--skip-git-repo-check".into()]);
        if ctx.native_session_id.is_none() {
            argv.extend(["-C".into(), ctx.workdir.display().to_string()]);
        }
        if let Some(model) = &spec.model {
            argv.extend(["-m".into(), model.clone()]);
        }
        let sandbox = match spec.permissions {
            Permissions::ReadOnly => "read-only",
            Permissions::WorkspaceWrite => "workspace-write",
            Permissions::FullAccess => "danger-full-access",
        };
        let mut overrides: Vec<(String, Value)> =
            vec![("sandbox_mode".into(), json!(sandbox)), ("approval_policy".into(), json!("never"))];
        if let Some(effort) = &spec.reasoning_effort {
            overrides.push(("model_reasoning_effort".into(), json!(effort)));
        }
        let provider = &spec.provider;
        if provider.base_url.is_some() || provider.api_key_env.is_some() {
            overrides.push(("model_provider".into(), json!("abx")));
            overrides.push(("model_providers.abx.name".into(), json!("abx")));
            overrides.push((
                "model_providers.abx.wire_api".into(),
                json!(provider.wire_api.as_deref().unwrap_or("responses")),
            ));
            if let Some(url) = &provider.base_url {
                overrides.push(("model_providers.abx.base_url".into(), json!(url)));
            }
            let key_env = provider.api_key_env.clone().unwrap_or_else(|| PROVIDER_KEY_ENV.into());
            overrides.push(("model_providers.abx.env_key".into(), json!(key_env)));
            if let Some(key) = &provider.api_key {
                inv.env.insert(key_env, key.clone());
            }
        } else if let Some(key) = &provider.api_key {
            inv.env.insert("CODEX_API_KEY".into(), key.clone());
            inv.env.insert("OPENAI_API_KEY".into(), key.clone());
        }
        for server in &spec.mcp_servers {
            let base = format!("mcp_servers.{}", toml_key(&server.name));
            if let Some(url) = &server.url {
                overrides.push((format!("{base}.url"), json!(url)));
                if !server.headers.is_empty() {
                    let vars: Map<String, Value> =
                        server.headers.keys().map(|h| (h.clone(), json!(server.header_var(h)))).collect();
                    overrides.push((format!("{base}.env_http_headers"), Value::Object(vars)));
                }
            } else if let Some(command) = &server.command {
                overrides.push((format!("{base}.command"), json!(command)));
                if !server.args.is_empty() {
                    overrides.push((format!("{base}.args"), json!(server.args)));
                }
                if !server.env.is_empty() {
                    overrides.push((format!("{base}.env_vars"), json!(server.env.keys().collect::<Vec<_>>())));
                    inv.env.extend(server.env.clone());
                }
            }
        }
        for (key, value) in overrides {
            argv.extend(["-c".into(), format!("{key}={}", toml_value(&value))]);
        }
        argv.extend(spec.extra_args.iter().cloned());
        argv.push("-".into());
        inv.argv = argv;
        inv.stdin = Some(ctx.with_preamble().into_bytes());
        inv
    }

    fn parser(&self, _ctx: &TurnContext<'_>) -> Box<dyn Parser> {
        Box::new(CodexParser::default())
    }
}

/// Parser of `codex exec --json` lines.
#[derive(Debug, Default)]
pub struct CodexParser {
    started: HashSet<String>,
}

impl Parser for CodexParser {
    fn feed(&mut self, line: &str, out: &mut Vec<Parsed>) {
        if line.trim().is_empty() {
            return;
        }
        let Some(obj) = json_object(line) else {
            out.push(Parsed::log(line));
            return;
        };
        match str_at(&obj, "type") {
            "thread.started" if !str_at(&obj, "thread_id").is_empty() => {
                out.push(Parsed::Session { id: str_at(&obj, "thread_id").into() });
            }
            "item.started" | "item.updated" | "item.completed" => {
                if let Some(item) = obj.get("item").and_then(Value::as_object) {
                    self.item(str_at(&obj, "type") == "item.completed", item, out);
                }
            }
            "turn.completed" => {
                if let Some(usage) = obj.get("usage").and_then(Value::as_object).filter(|u| !u.is_empty()) {
                    out.push(Parsed::Usage(UsageDelta {
                        input_tokens: u64_at(usage, "input_tokens"),
                        output_tokens: u64_at(usage, "output_tokens"),
                        cached_tokens: u64_at(usage, "cached_input_tokens"),
                        reasoning_tokens: u64_at(usage, "reasoning_output_tokens"),
                        cost_usd: None,
                    }));
                }
                out.push(Parsed::result(true, None, None));
            }
            "turn.failed" => {
                let message = match obj.get("error") {
                    Some(Value::Object(e)) => str_at(e, "message").to_string(),
                    Some(other) => json_text(other),
                    None => String::new(),
                };
                let message = if message.is_empty() { "turn failed".into() } else { message };
                out.push(Parsed::error("internal_error", message, true));
                out.push(Parsed::result(false, None, None));
            }
            "error" => {
                let message = Some(str_at(&obj, "message")).filter(|m| !m.is_empty()).unwrap_or("error");
                out.push(Parsed::error("internal_error", message, false));
            }
            _ => {}
        }
    }
}

impl CodexParser {
    fn item(&mut self, done: bool, item: &Map<String, Value>, out: &mut Vec<Parsed>) {
        let id = str_at(item, "id").to_string();
        match str_at(item, "type") {
            "agent_message" if done => out.push(Parsed::message(id, str_at(item, "text"))),
            "reasoning" if done && !str_at(item, "text").is_empty() => {
                out.push(Parsed::Reasoning { item_id: id, text: str_at(item, "text").into() });
            }
            "command_execution" => {
                if self.started.insert(id.clone()) {
                    let command = str_at(item, "command").to_string();
                    out.push(Parsed::ToolStart {
                        item_id: id.clone(),
                        kind: ToolKind::Command,
                        name: "command_execution".into(),
                        arguments: json!({"command": item.get("command").cloned().unwrap_or(Value::Null)}),
                        command: Some(command),
                        server: None,
                    });
                }
                if done {
                    let code = item.get("exit_code").and_then(Value::as_i64);
                    let status = str_at(item, "status");
                    let ok = !matches!(status, "failed" | "declined") && code.is_none_or(|c| c == 0);
                    out.push(Parsed::ToolEnd {
                        item_id: id,
                        ok,
                        output: Some(str_at(item, "aggregated_output").into()),
                        exit_code: code,
                        error: None,
                    });
                }
            }
            "mcp_tool_call" => {
                if self.started.insert(id.clone()) {
                    let name = Some(str_at(item, "tool")).filter(|t| !t.is_empty()).unwrap_or("tool");
                    out.push(Parsed::ToolStart {
                        item_id: id.clone(),
                        kind: ToolKind::Mcp,
                        name: name.into(),
                        arguments: item.get("arguments").cloned().unwrap_or(Value::Null),
                        command: None,
                        server: Some(str_at(item, "server").into()),
                    });
                }
                if done {
                    let error = match item.get("error") {
                        None | Some(Value::Null) => None,
                        Some(Value::Object(e)) => Some(str_at(e, "message").to_string()),
                        Some(other) => Some(json_text(other)),
                    };
                    let output = item.get("result").filter(|r| !r.is_null()).map(json_text);
                    let ok = str_at(item, "status") != "failed" && error.is_none();
                    out.push(Parsed::ToolEnd { item_id: id, ok, output, exit_code: None, error });
                }
            }
            "file_change" if done => {
                let changes = item.get("changes").cloned().unwrap_or_else(|| json!([]));
                let summary = changes
                    .as_array()
                    .map(|cs| {
                        cs.iter()
                            .filter_map(Value::as_object)
                            .map(|c| format!("{}: {}", python_str(c.get("kind")), python_str(c.get("path"))))
                            .collect::<Vec<_>>()
                            .join("\n")
                    })
                    .unwrap_or_default();
                out.push(Parsed::tool_start(
                    id.clone(),
                    ToolKind::FileChange,
                    "file_change",
                    json!({"changes": changes}),
                ));
                out.push(Parsed::tool_end(id, str_at(item, "status") != "failed", Some(summary)));
            }
            "collab_tool_call" if done => collab(item, out),
            "web_search" if done => {
                let query = item.get("query").cloned().unwrap_or(Value::Null);
                out.push(Parsed::tool_start(id.clone(), ToolKind::WebSearch, "web_search", json!({"query": query})));
                out.push(Parsed::tool_end(id, true, Some(str_at(item, "query").into())));
            }
            "error" if done => {
                let message = Some(str_at(item, "message")).filter(|m| !m.is_empty()).unwrap_or("error");
                out.push(Parsed::error("internal_error", message, false));
            }
            _ => {}
        }
    }
}

/// Python's `str()` of an optional JSON value (`None` for absent).
fn python_str(value: Option<&Value>) -> String {
    match value {
        None | Some(Value::Null) => "None".into(),
        Some(v) => json_text(v),
    }
}

/// Subagent ids of a `collab_tool_call` (`receiver_thread_ids`, `agents_states`).
fn collab(item: &Map<String, Value>, out: &mut Vec<Parsed>) {
    let tool = str_at(item, "tool");
    let mut ids: Vec<String> = item
        .get("receiver_thread_ids")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).filter(|s| !s.is_empty()).map(str::to_string).collect())
        .unwrap_or_default();
    let mut closed: Vec<String> = Vec::new();
    if let Some(states) = item.get("agents_states").and_then(Value::as_object) {
        for (thread, state) in states {
            if !ids.contains(thread) {
                ids.push(thread.clone());
            }
            if matches!(state.get("status").and_then(Value::as_str), Some("shutdown" | "closed")) {
                closed.push(thread.clone());
            }
        }
    }
    if tool == "close_agent" {
        for id in &ids {
            if !closed.contains(id) {
                closed.push(id.clone());
            }
        }
    }
    let prompt = (tool == "spawn_agent").then(|| str_at(item, "prompt").to_string()).filter(|p| !p.is_empty());
    if !ids.is_empty() {
        out.push(Parsed::Subagent { op: SubagentOp::Open, ids, name: None, prompt, entry: None });
    }
    if !closed.is_empty() {
        out.push(Parsed::Subagent { op: SubagentOp::Close, ids: closed, name: None, prompt: None, entry: None });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agents::spec::Provider;

    fn parse(lines: &[&str]) -> Vec<Parsed> {
        crate::agents::adapters::parse_lines(&mut CodexParser::default(), lines)
    }

    #[test]
    fn a_codex_stream_becomes_events() {
        let out = parse(&[
            r#"{"type":"thread.started","thread_id":"th-1"}"#,
            r#"{"type":"item.started","item":{"id":"i1","type":"command_execution","command":"ls","status":"in_progress"}}"#,
            r#"{"type":"item.completed","item":{"id":"i1","type":"command_execution","command":"ls","aggregated_output":"a\n","exit_code":0,"status":"completed"}}"#,
            r#"{"type":"item.completed","item":{"id":"i2","type":"agent_message","text":"done"}}"#,
            r#"{"type":"turn.completed","usage":{"input_tokens":10,"cached_input_tokens":2,"output_tokens":5}}"#,
            "not json",
        ]);
        assert_eq!(out[0], Parsed::Session { id: "th-1".into() });
        assert!(matches!(&out[1], Parsed::ToolStart { kind: ToolKind::Command, command: Some(c), .. } if c == "ls"));
        assert!(matches!(&out[2], Parsed::ToolEnd { ok: true, exit_code: Some(0), output: Some(o), .. } if o == "a\n"));
        assert_eq!(out[3], Parsed::message("i2", "done"));
        assert!(matches!(&out[4], Parsed::Usage(u) if u.input_tokens == 10 && u.cached_tokens == 2));
        assert_eq!(out[5], Parsed::result(true, None, None));
        assert_eq!(out[6], Parsed::log("not json"));
    }

    #[test]
    fn file_changes_failures_and_subagents() {
        let out = parse(&[
            r#"{"type":"item.completed","item":{"id":"f","type":"file_change","changes":[{"path":"/w/a","kind":"add"}],"status":"completed"}}"#,
            r#"{"type":"item.completed","item":{"id":"c","type":"collab_tool_call","tool":"spawn_agent","prompt":"go","receiver_thread_ids":["t2"]}}"#,
            r#"{"type":"turn.failed","error":{"message":"boom"}}"#,
        ]);
        assert!(matches!(&out[1], Parsed::ToolEnd { output: Some(o), .. } if o == "add: /w/a"));
        assert!(matches!(&out[2], Parsed::Subagent { op: SubagentOp::Open, prompt: Some(p), .. } if p == "go"));
        assert_eq!(out[3], Parsed::error("internal_error", "boom", true));
    }

    #[test]
    fn the_invocation_resumes_and_configures_a_provider() {
        let mut spec = AgentSpec { runtime: "codex".into(), workspace: "/w".into(), ..AgentSpec::default() };
        spec.provider = Provider {
            base_url: Some("http://127.0.0.1:9/v1".into()),
            api_key: Some("k".into()),
            ..Provider::default()
        };
        let ctx = TurnContext {
            spec: &spec,
            prompt: "hi".into(),
            workdir: "/w".into(),
            turn_dir: "/t".into(),
            native_session_id: Some("th-1".into()),
            is_root: false,
        };
        let inv = Codex.invocation(&ctx);
        assert_eq!(&inv.argv[..4], ["codex", "exec", "resume", "th-1"]);
        assert!(inv.argv.contains(&r#"model_providers.abx.base_url="http://127.0.0.1:9/v1""#.to_string()));
        assert_eq!(inv.env.get(PROVIDER_KEY_ENV).map(String::as_str), Some("k"));
        assert_eq!(inv.argv.last().map(String::as_str), Some("-"));
        assert_eq!(inv.stdin.as_deref(), Some(&b"hi"[..]));
    }
}
