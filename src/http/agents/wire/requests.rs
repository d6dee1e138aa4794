//! Request bodies of the sessions API, read into domain values with the
//! reference's validation messages and `param`s.

use std::collections::BTreeMap;

use abx_domain::agents::error::AgentError;
use abx_domain::agents::spec::{CommandParser, CommandSpec};
use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};

use super::tools::{parse_tools, McpTool};

const META_MAX: usize = 16;
const META_KEY_MAX: usize = 64;
const META_VALUE_MAX: usize = 512;
const EFFORTS: [&str; 6] = ["none", "minimal", "low", "medium", "high", "xhigh"];

fn invalid(message: impl Into<String>, param: impl Into<String>) -> AgentError {
    AgentError::invalid(message, param)
}

/// A 400 without a `param` (the reference's configuration errors).
fn config_error(message: impl Into<String>) -> AgentError {
    AgentError::Invalid { message: message.into(), param: None, code: "invalid_request" }
}

/// A non-empty, trimmed string.
fn name_at<'a>(map: &'a Map<String, Value>, key: &str) -> Option<&'a str> {
    map.get(key).and_then(Value::as_str).map(str::trim).filter(|s| !s.is_empty())
}

/// The inline `agent` block (empty when absent or not an object).
pub fn agent_block(body: &Map<String, Value>) -> Map<String, Value> {
    body.get("agent").and_then(Value::as_object).cloned().unwrap_or_default()
}

/// `model` of the inline agent block, else of the body.
pub fn model_field(body: &Map<String, Value>) -> Option<String> {
    let agent = agent_block(body);
    name_at(&agent, "model").or_else(|| name_at(body, "model")).map(str::to_string)
}

/// The runtime the caller named: the `X-ABX-Adapter` header, `adapter` or
/// `runtime` of the body or of its agent block, or a model that names a runtime.
pub fn explicit_runtime(
    header: Option<&str>,
    body: &Map<String, Value>,
    is_runtime: impl Fn(&str) -> bool,
) -> Option<String> {
    if let Some(named) = header.map(str::trim).filter(|h| !h.is_empty()) {
        return Some(named.to_string());
    }
    let agent = agent_block(body);
    for source in [body, &agent] {
        for key in ["adapter", "runtime"] {
            if let Some(name) = name_at(source, key) {
                return Some(name.to_string());
            }
        }
    }
    model_field(body).filter(|m| is_runtime(m))
}

/// An Agents `input` value (string, message, content parts) as text.
pub fn text_of(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Object(map) => {
            if let Some(text) = map.get("text").filter(|t| !t.is_object() && !t.is_array()) {
                if map.get("content").is_none_or(Value::is_null) {
                    return match text {
                        Value::String(s) => s.clone(),
                        Value::Null | Value::Bool(false) => String::new(),
                        other => abx_domain::pyrepr::str_of(other),
                    };
                }
            }
            let inner = ["content", "text", "input"].iter().find_map(|k| map.get(*k)).unwrap_or(&Value::Null);
            text_of(inner)
        }
        Value::Array(items) => items.iter().map(text_of).filter(|t| !t.is_empty()).collect::<Vec<_>>().join("\n"),
        _ => String::new(),
    }
}

/// A session's `metadata` at creation: scalars become strings (as the reference's `str()`).
///
/// # Errors
/// 400 for a non-object or a non-scalar value.
pub fn metadata_scalars(raw: Option<&Value>) -> Result<Map<String, Value>, AgentError> {
    match raw {
        None | Some(Value::Null) => Ok(Map::new()),
        Some(Value::Object(map)) => map
            .iter()
            .map(|(k, v)| match v {
                Value::Object(_) | Value::Array(_) | Value::Null => {
                    Err(config_error(format!("metadata.{k}: expected a scalar")))
                }
                other => Ok((k.clone(), json!(abx_domain::pyrepr::str_of(other)))),
            })
            .collect(),
        Some(_) => Err(config_error("metadata: expected a mapping of strings")),
    }
}

/// `metadata` under the official limits: 16 pairs, keys 1-64 characters, string values to 512.
///
/// # Errors
/// 400 naming the offending field.
pub fn metadata_strict(raw: &Value, field: &str) -> Result<Map<String, Value>, AgentError> {
    let map = match raw {
        Value::Null => return Ok(Map::new()),
        Value::Object(map) => map,
        _ => return Err(invalid(format!("{field}: expected a mapping of strings"), field)),
    };
    if map.len() > META_MAX {
        return Err(invalid(format!("{field}: at most {META_MAX} pairs"), field));
    }
    for (key, value) in map {
        if key.is_empty() || key.chars().count() > META_KEY_MAX {
            return Err(invalid(format!("{field}: keys are 1 to {META_KEY_MAX} characters"), field));
        }
        if value.as_str().is_none_or(|v| v.chars().count() > META_VALUE_MAX) {
            let message = format!("{field}.{key}: values are strings up to {META_VALUE_MAX} characters");
            return Err(invalid(message, format!("{field}.{key}")));
        }
    }
    Ok(map.clone())
}

/// The workspace of a session whose request names none (the reference's).
pub const DEFAULT_WORKSPACE: &str = "/workspace";

/// The workspace directory of `environment` ([`DEFAULT_WORKSPACE`] by default).
///
/// # Errors
/// 400 for a hosted or unknown environment type.
pub fn workspace_of(body: &Map<String, Value>) -> Result<String, AgentError> {
    let env = match body.get("environment") {
        None | Some(Value::Null) => return Ok(DEFAULT_WORKSPACE.into()),
        Some(Value::Object(env)) => env,
        Some(_) => return Err(config_error("environment: expected a mapping")),
    };
    match env.get("type").and_then(Value::as_str).filter(|t| !t.is_empty()).unwrap_or("self_hosted") {
        "openai_hosted" => {
            return Err(config_error("environment.type openai_hosted is not available; use self_hosted or none"));
        }
        "self_hosted" | "none" => {}
        _ => return Err(config_error("environment.type must be self_hosted or none")),
    }
    match env.get("workspace_directory") {
        None | Some(Value::Null) => Ok(DEFAULT_WORKSPACE.into()),
        Some(Value::String(s)) if s.is_empty() => Ok(DEFAULT_WORKSPACE.into()),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(_) => Err(config_error("environment.workspace_directory: expected a string")),
    }
}

/// The fields of an agent block that were present, validated.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AgentFields {
    /// `model`.
    pub model: Option<String>,
    /// `name`.
    pub name: Option<String>,
    /// `instructions`.
    pub instructions: Option<String>,
    /// `reasoning.effort` (Codex only).
    pub reasoning_effort: Option<String>,
    /// `tools`.
    pub tools: Vec<McpTool>,
    /// Ours: the `command` runtime's program.
    pub command: Option<CommandSpec>,
}

/// Keys a session's inline agent block may hold.
pub const INLINE_AGENT_KEYS: &[&str] = &[
    "model",
    "instructions",
    "name",
    "metadata",
    "multi_agent",
    "reasoning",
    "service_tier",
    "text",
    "tools",
    "command",
];

/// Validates the official agent fields of `src` for `runtime`.
///
/// # Errors
/// 400 naming the first offending field.
pub fn agent_fields(
    src: &Map<String, Value>,
    runtime: &str,
    prefix: &str,
    allowed: &[&str],
    create: bool,
) -> Result<AgentFields, AgentError> {
    let p = |k: &str| format!("{prefix}{k}");
    for key in src.keys() {
        if !allowed.contains(&key.as_str()) || (key == "command" && runtime != "command") {
            return Err(invalid(format!("{}: unknown or unsupported parameter", p(key)), p(key)));
        }
    }
    let mut out = AgentFields::default();
    if src.contains_key("model") || create {
        match src.get("model").and_then(Value::as_str).map(str::trim).filter(|m| !m.is_empty() && m.len() <= 256) {
            Some(model) => out.model = Some(model.to_string()),
            None => return Err(invalid(format!("{}: a non-empty string is required", p("model")), p("model"))),
        }
    }
    match src.get("name") {
        None | Some(Value::Null) => {}
        Some(Value::String(s)) if s.chars().count() <= 256 => out.name = Some(s.clone()).filter(|s| !s.is_empty()),
        Some(_) => return Err(invalid(format!("{}: expected a string", p("name")), p("name"))),
    }
    match src.get("instructions") {
        None | Some(Value::Null) => {}
        Some(Value::String(s)) if s.len() <= 256 * 1024 => out.instructions = Some(s.clone()).filter(|s| !s.is_empty()),
        Some(_) => return Err(invalid(format!("{}: expected a string", p("instructions")), p("instructions"))),
    }
    if let Some(metadata) = src.get("metadata") {
        metadata_strict(metadata, &p("metadata"))?;
    }
    match src.get("multi_agent") {
        None | Some(Value::Null) => {}
        Some(Value::Object(m)) if m.get("enabled").is_some_and(|e| !matches!(e, Value::Null | Value::Bool(false))) => {
            let param = p("multi_agent.enabled");
            return Err(invalid(format!("{param}: neither CLI has a switch that turns spawning on"), param));
        }
        Some(Value::Object(_)) => {}
        Some(_) => return Err(invalid(format!("{}: expected an object", p("multi_agent")), p("multi_agent"))),
    }
    if !matches!(src.get("service_tier"), None | Some(Value::Null))
        && !matches!(src.get("service_tier").and_then(Value::as_str), Some("auto" | "default"))
    {
        return Err(invalid(format!("{}: only auto and default are accepted", p("service_tier")), p("service_tier")));
    }
    if let Some(text) = src.get("text") {
        check_text(text, prefix)?;
    }
    if let Some(reasoning) = src.get("reasoning") {
        out.reasoning_effort = check_reasoning(reasoning, runtime, prefix)?;
    }
    if let Some(tools) = src.get("tools") {
        out.tools = parse_tools(tools, &p("tools"))?;
    }
    if let Some(command) = src.get("command") {
        out.command = Some(command_spec(command, &p("command"))?);
    }
    Ok(out)
}

fn check_text(text: &Value, prefix: &str) -> Result<(), AgentError> {
    let text = match text {
        Value::Null => return Ok(()),
        Value::Object(t) => t,
        _ => return Err(invalid(format!("{prefix}text: expected an object"), format!("{prefix}text"))),
    };
    let format_ok = match text.get("format") {
        None | Some(Value::Null) => true,
        Some(f) => f.get("type").and_then(Value::as_str) == Some("text"),
    };
    if !format_ok {
        return Err(invalid(format!("{prefix}text.format: only text is supported"), format!("{prefix}text.format")));
    }
    if !matches!(text.get("verbosity"), None | Some(Value::Null))
        && text.get("verbosity").and_then(Value::as_str) != Some("medium")
    {
        let param = format!("{prefix}text.verbosity");
        return Err(invalid(format!("{param}: the CLIs do not take a verbosity setting"), param));
    }
    Ok(())
}

fn check_reasoning(reasoning: &Value, runtime: &str, prefix: &str) -> Result<Option<String>, AgentError> {
    let r = match reasoning {
        Value::Null => return Ok(None),
        Value::Object(r) => r,
        _ => return Err(invalid(format!("{prefix}reasoning: expected an object"), format!("{prefix}reasoning"))),
    };
    if !matches!(r.get("summary"), None | Some(Value::Null)) {
        let param = format!("{prefix}reasoning.summary");
        return Err(invalid(format!("{param}: summaries cannot be requested from the CLI"), param));
    }
    let param = format!("{prefix}reasoning.effort");
    match r.get("effort") {
        None | Some(Value::Null) => Ok(None),
        Some(_) if runtime != "codex" => {
            Err(invalid(format!("{param}: {runtime} has no reasoning effort setting"), param))
        }
        Some(Value::String(e)) if EFFORTS.contains(&e.as_str()) => Ok(Some(e.clone())),
        Some(_) => Err(invalid(format!("{param}: must be none|minimal|low|medium|high|xhigh"), param)),
    }
}

/// Ours: `command` of an inline agent: an argv list, or `{argv, resume_argv, parser, prompt}`.
fn command_spec(raw: &Value, field: &str) -> Result<CommandSpec, AgentError> {
    let strings = |v: &Value| -> Option<Vec<String>> {
        v.as_array()?
            .iter()
            .map(|s| s.as_str().map(str::to_string))
            .collect::<Option<Vec<_>>>()
            .filter(|a| !a.is_empty())
    };
    let bad = || invalid(format!("{field}.argv: required non-empty list of strings"), format!("{field}.argv"));
    if raw.is_array() {
        return Ok(CommandSpec { argv: strings(raw).ok_or_else(bad)?, ..CommandSpec::default() });
    }
    let Some(map) = raw.as_object() else { return Err(bad()) };
    let argv = map.get("argv").and_then(strings).ok_or_else(bad)?;
    let resume_argv = match map.get("resume_argv") {
        None | Some(Value::Null) => None,
        Some(v) => Some(strings(v).ok_or_else(|| {
            invalid(format!("{field}.resume_argv: expected a list of strings"), format!("{field}.resume_argv"))
        })?),
    };
    let parser = match map.get("parser").and_then(Value::as_str) {
        None | Some("events") => CommandParser::Events,
        Some("text") => CommandParser::Text,
        Some("jsonl-codex") => CommandParser::JsonlCodex,
        Some("jsonl-claude") => CommandParser::JsonlClaude,
        Some(_) => {
            let param = format!("{field}.parser");
            return Err(invalid(format!("{param}: must be one of events, text, jsonl-claude, jsonl-codex"), param));
        }
    };
    let prompt_in_argv = match map.get("prompt").and_then(Value::as_str) {
        None | Some("stdin") => false,
        Some("argv") => true,
        Some(_) => return Err(invalid(format!("{field}.prompt: must be argv or stdin"), format!("{field}.prompt"))),
    };
    Ok(CommandSpec { argv, resume_argv, parser, prompt_in_argv })
}

/// What `POST /v1/agents/sessions/{id}/events` asks for: a prompt, a cancel, or both.
///
/// # Errors
/// 400 for an empty or unsupported event list.
pub fn event_input(body: &Map<String, Value>) -> Result<(String, bool), AgentError> {
    let events = match body.get("events") {
        None if body.contains_key("input") => return Ok((text_of(body.get("input").unwrap_or(&Value::Null)), false)),
        Some(Value::Array(events)) if !events.is_empty() => events,
        _ => return Err(invalid("events must be a non-empty list", "events")),
    };
    let mut texts = Vec::new();
    let mut cancel = false;
    for event in events {
        let Some(event) = event.as_object() else { return Err(invalid("each event must be an object", "events")) };
        match event.get("type").and_then(Value::as_str) {
            Some("agent.session.input.message" | "input.message") => {
                let value = ["input", "content", "text"].iter().find_map(|k| event.get(*k)).unwrap_or(&Value::Null);
                texts.push(text_of(value));
            }
            Some("agent.session.input.cancel" | "input.cancel") => cancel = true,
            Some("agent.session.input.tool_result" | "agent.session.input.computer_use_approval_request_result") => {
                return Err(AgentError::invalid_code(
                    "tool results are not supported by this server",
                    Some("events"),
                    "agents.tool_result_unsupported",
                ));
            }
            _ => {
                let kind = event.get("type").map_or_else(|| "None".into(), abx_domain::pyrepr::repr);
                return Err(invalid(format!("unsupported event type {kind}"), "events"));
            }
        }
    }
    let prompt = texts.into_iter().filter(|t| !t.is_empty()).collect::<Vec<_>>().join("\n");
    if prompt.is_empty() && !cancel {
        return Err(invalid("input message is empty", "events"));
    }
    Ok((prompt, cancel))
}

/// Checks an `Idempotency-Key` header: printable ASCII up to 128 characters.
///
/// # Errors
/// 400 otherwise.
pub fn idempotency_key(raw: Option<&str>) -> Result<Option<String>, AgentError> {
    let Some(key) = raw.map(str::trim).filter(|k| !k.is_empty()) else { return Ok(None) };
    if key.len() > 128 || !key.bytes().all(|b| (0x20..0x7f).contains(&b)) {
        return Err(invalid("Idempotency-Key must be printable ASCII up to 128 characters", "Idempotency-Key"));
    }
    Ok(Some(key.to_string()))
}

/// A digest of a body independent of its key order (to compare replays).
pub fn digest(body: &Value) -> String {
    fn canonical(v: &Value) -> Value {
        match v {
            Value::Object(map) => {
                let sorted: BTreeMap<&String, Value> = map.iter().map(|(k, v)| (k, canonical(v))).collect();
                Value::Object(sorted.into_iter().map(|(k, v)| (k.clone(), v)).collect())
            }
            Value::Array(items) => Value::Array(items.iter().map(canonical).collect()),
            other => other.clone(),
        }
    }
    Sha256::digest(canonical(body).to_string().as_bytes()).iter().map(|b| format!("{b:02x}")).collect()
}

/// Why a session field cannot be updated.
pub fn update_refusal(key: &str) -> Option<&'static str> {
    match key {
        "agent" => Some("agent cannot change after the session is created"),
        "vault_ids" => Some("vault_ids cannot change after the session is created"),
        "environment" => Some("environment cannot change after the session is created"),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obj(v: Value) -> Map<String, Value> {
        v.as_object().cloned().expect("object")
    }

    #[test]
    fn input_values_flatten_to_text() {
        assert_eq!(text_of(&json!("hi")), "hi");
        assert_eq!(text_of(&json!([{"type": "input_text", "text": "a"}, "b"])), "a\nb");
        assert_eq!(text_of(&json!({"role": "user", "content": [{"text": "c"}]})), "c");
        assert_eq!(text_of(&json!(3)), "");
    }

    #[test]
    fn events_give_a_prompt_or_a_cancel() {
        assert_eq!(event_input(&obj(json!({"input": "x"}))).expect("ok"), ("x".into(), false));
        let both =
            obj(json!({"events": [{"type": "input.message", "input": "a"}, {"type": "agent.session.input.cancel"}]}));
        assert_eq!(event_input(&both).expect("ok"), ("a".into(), true));
        let err =
            event_input(&obj(json!({"events": [{"type": "agent.session.input.tool_result"}]}))).expect_err("refused");
        assert!(matches!(err, AgentError::Invalid { code: "agents.tool_result_unsupported", .. }));
        let err = event_input(&obj(json!({"events": [{"type": "x"}]}))).expect_err("refused");
        assert_eq!(err.to_string(), "unsupported event type 'x'");
        assert!(event_input(&obj(json!({"events": []}))).is_err());
        assert!(event_input(&obj(json!({"events": [{"type": "input.message", "input": ""}]}))).is_err());
    }

    #[test]
    fn runtimes_are_named_by_header_body_agent_or_model() {
        let is_runtime = |m: &str| m == "codex" || m == "qwen";
        assert_eq!(
            explicit_runtime(Some("claude"), &obj(json!({"adapter": "x"})), is_runtime).as_deref(),
            Some("claude")
        );
        assert_eq!(
            explicit_runtime(None, &obj(json!({"agent": {"runtime": "command"}})), is_runtime).as_deref(),
            Some("command")
        );
        assert_eq!(explicit_runtime(None, &obj(json!({"model": "qwen"})), is_runtime).as_deref(), Some("qwen"));
        assert_eq!(explicit_runtime(None, &obj(json!({"model": "gpt-5"})), is_runtime), None);
    }

    #[test]
    fn tools_and_agent_fields_are_validated() {
        let tool = json!([{"type": "mcp", "server_label": "docs", "transport": {"type": "http", "server_url": "https://d/mcp", "headers": {"Authorization": "Bearer x"}}}]);
        let tools = parse_tools(&tool, "agent.tools").expect("ok");
        assert_eq!(tools[0].wire()["transport"]["headers"]["Authorization"], "***");
        let bad = json!([{"type": "function"}]);
        assert_eq!(
            parse_tools(&bad, "tools").expect_err("refused").to_string(),
            "tools[0].type: only mcp tools are supported by the local agent runtime"
        );
        let query = json!([{"type": "mcp", "server_label": "d", "transport": {"type": "http", "server_url": "https://d/?t=1"}}]);
        assert!(parse_tools(&query, "tools").is_err());
        let src = obj(json!({"reasoning": {"effort": "high"}}));
        let err = agent_fields(&src, "qwen-code", "agent.", INLINE_AGENT_KEYS, false).expect_err("refused");
        assert_eq!(err.to_string(), "agent.reasoning.effort: qwen-code has no reasoning effort setting");
        let src = obj(json!({"command": ["/bin/x"], "name": "n"}));
        let fields = agent_fields(&src, "command", "agent.", INLINE_AGENT_KEYS, false).expect("ok");
        assert_eq!(fields.command.map(|c| c.argv), Some(vec!["/bin/x".to_string()]));
        assert!(
            agent_fields(&src, "codex", "agent.", INLINE_AGENT_KEYS, false).is_err(),
            "command is for the command runtime"
        );
        assert!(agent_fields(&obj(json!({"bogus": 1})), "codex", "agent.", INLINE_AGENT_KEYS, false).is_err());
    }

    #[test]
    fn metadata_keys_and_digests() {
        assert_eq!(
            metadata_scalars(Some(&json!({"a": 1, "b": true}))).expect("ok"),
            obj(json!({"a": "1", "b": "True"}))
        );
        assert!(metadata_scalars(Some(&json!({"a": [1]}))).is_err());
        assert!(metadata_strict(&json!({"a": 1}), "metadata").is_err());
        assert_eq!(digest(&json!({"a": 1, "b": 2})), digest(&json!({"b": 2, "a": 1})));
        assert!(idempotency_key(Some("k\u{7f}")).is_err());
        assert_eq!(idempotency_key(Some(" k1 ")).expect("ok").as_deref(), Some("k1"));
    }
}
