//! The Responses API's request and object: `POST /v1/responses` read into
//! domain values with the reference's validation (what a local CLI turn
//! cannot honour is refused, sampling parameters are accepted and ignored),
//! and the `response` object of a stored response and its turn.

use std::collections::BTreeMap;

use abx_domain::agents::error::AgentError;
use abx_domain::agents::parsed::ToolKind;
use abx_domain::agents::responses::ResponseRecord;
use abx_domain::agents::turn::{Item, ItemBody, ItemStatus, TurnRecord, TurnStatus, Usage};
use serde_json::{json, Map, Value};

use super::requests::metadata_strict;
use super::tools::{url_check, McpTool};
use super::Label;

/// Accepted and ignored: a CLI turn has no sampling controls.
const SAMPLING_IGNORED: &[&str] = &[
    "temperature",
    "top_p",
    "max_output_tokens",
    "top_logprobs",
    "truncation",
    "parallel_tool_calls",
    "user",
    "safety_identifier",
    "prompt_cache_key",
    "prompt_cache_retention",
    "stream_options",
];
const ACCEPTED: &[&str] = &[
    "model",
    "input",
    "instructions",
    "tools",
    "metadata",
    "previous_response_id",
    "store",
    "background",
    "stream",
    "tool_choice",
    "service_tier",
    "reasoning",
    "text",
    "include",
    "conversation",
    "prompt",
    "adapter",
    "runtime",
];
const TOOL_KEYS: &[&str] = &[
    "type",
    "server_label",
    "server_url",
    "headers",
    "authorization",
    "require_approval",
    "allowed_tools",
    "server_description",
];

/// The response header naming the ignored sampling parameters.
pub const IGNORED_HEADER: &str = "x-agent-sandbox-ignored-params";

fn invalid(message: impl Into<String>, param: impl Into<String>) -> AgentError {
    AgentError::invalid(message, param)
}

fn set(body: &Map<String, Value>, key: &str) -> bool {
    body.get(key).is_some_and(|v| !v.is_null())
}

/// A `POST /v1/responses` body, validated.
#[derive(Debug, Clone, Default)]
pub struct CreateRequest {
    /// `model` (trimmed).
    pub model: String,
    /// The user messages, joined.
    pub prompt: String,
    /// `instructions` followed by the system and developer messages.
    pub instructions: Option<String>,
    /// `instructions` as sent.
    pub instructions_sent: Option<String>,
    /// The input items as accepted.
    pub input_items: Vec<Value>,
    /// The caller's metadata.
    pub metadata: Map<String, Value>,
    /// MCP tools of this response.
    pub tools: Vec<McpTool>,
    /// `store` (default true).
    pub store: bool,
    /// `background`.
    pub background: bool,
    /// `stream`.
    pub stream: bool,
    /// `previous_response_id`.
    pub previous_response_id: Option<Value>,
    /// `reasoning`, when sent.
    pub reasoning: Option<Value>,
    /// Sampling parameters present and ignored.
    pub ignored: Vec<String>,
}

/// Reads and validates a create body, in the reference's order of checks.
///
/// # Errors
/// 400 naming the first offending field.
pub fn parse_create(body: &Map<String, Value>) -> Result<CreateRequest, AgentError> {
    let ignored = validate(body)?;
    let model = body.get("model").and_then(Value::as_str).map(str::trim).filter(|m| !m.is_empty());
    let model = model.ok_or_else(|| invalid("model: required", "model"))?.to_string();
    let metadata = metadata_strict(body.get("metadata").unwrap_or(&Value::Null), "metadata")?;
    let tools = parse_tools(body.get("tools").unwrap_or(&Value::Null))?;
    let (prompt, system, input_items) = normalize_input(body.get("input").unwrap_or(&Value::Null))?;
    let instructions_sent = match body.get("instructions") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(_) => return Err(invalid("instructions: expected a string", "instructions")),
    };
    let instructions = match (&instructions_sent, system) {
        (Some(i), Some(s)) if !i.is_empty() => Some(format!("{i}\n\n{s}")),
        (_, Some(s)) => Some(s),
        (i, None) => i.clone(),
    };
    let flag = |key: &str| body.get(key).and_then(Value::as_bool);
    Ok(CreateRequest {
        model,
        prompt,
        instructions,
        instructions_sent,
        input_items,
        metadata,
        tools,
        store: flag("store") != Some(false),
        background: flag("background") == Some(true),
        stream: flag("stream") == Some(true),
        previous_response_id: body.get("previous_response_id").filter(|v| !v.is_null()).cloned(),
        reasoning: body.get("reasoning").filter(|v| !v.is_null()).cloned(),
        ignored,
    })
}

/// Refuses what a CLI turn cannot honour; returns the ignored sampling parameters present.
fn validate(body: &Map<String, Value>) -> Result<Vec<String>, AgentError> {
    if let Some(key) = body.keys().find(|k| !ACCEPTED.contains(&k.as_str()) && !SAMPLING_IGNORED.contains(&k.as_str()))
    {
        return Err(invalid(format!("{key}: unknown or unsupported parameter"), key.clone()));
    }
    if set(body, "conversation") {
        return Err(invalid("conversation: stored conversations are not available", "conversation"));
    }
    if set(body, "prompt") {
        return Err(invalid("prompt: stored prompt templates are not available", "prompt"));
    }
    if body.get("include").is_some_and(abx_wire::api::process::is_truthy) {
        return Err(invalid("include: the local runtime cannot fill any includable output", "include"));
    }
    if !matches!(body.get("service_tier"), None | Some(Value::Null))
        && !matches!(body.get("service_tier").and_then(Value::as_str), Some("auto" | "default"))
    {
        return Err(invalid("service_tier: only auto and default", "service_tier"));
    }
    if !matches!(body.get("tool_choice"), None | Some(Value::Null))
        && body.get("tool_choice").and_then(Value::as_str) != Some("auto")
    {
        return Err(invalid("tool_choice: only auto", "tool_choice"));
    }
    let text = body.get("text").filter(|t| !t.is_null());
    if let Some(text) = text {
        let Some(text) = text.as_object() else { return Err(invalid("text: expected an object", "text")) };
        let format = text.get("format").filter(|f| !f.is_null());
        if format.is_some_and(|f| f.get("type").and_then(Value::as_str) != Some("text")) {
            return Err(invalid("text.format: only text is supported", "text.format"));
        }
    }
    for flag in ["store", "background", "stream"] {
        if set(body, flag) && !body[flag].is_boolean() {
            return Err(invalid(format!("{flag}: expected a boolean"), flag));
        }
    }
    if body.get("background") == Some(&json!(true)) && body.get("store") == Some(&json!(false)) {
        return Err(invalid("background: requires store to be true", "background"));
    }
    let mut ignored: Vec<String> = SAMPLING_IGNORED.iter().filter(|k| set(body, k)).map(|k| k.to_string()).collect();
    if text.and_then(|t| t.get("verbosity")).is_some_and(|v| !v.is_null()) {
        ignored.push("text.verbosity".into());
    }
    Ok(ignored)
}

/// `(prompt, system text, stored input items)` of an `input` value: a
/// string, or a list of user, system or developer messages of `input_text`.
fn normalize_input(raw: &Value) -> Result<(String, Option<String>, Vec<Value>), AgentError> {
    let items = match raw {
        Value::Null => return Err(invalid("input: required", "input")),
        Value::String(s) if s.is_empty() => return Err(invalid("input: required", "input")),
        Value::Array(a) if a.is_empty() => return Err(invalid("input: required", "input")),
        Value::String(_) => vec![json!({"type": "message", "role": "user", "content": raw})],
        Value::Array(items) => items.clone(),
        _ => return Err(invalid("input: expected a string or a list of messages", "input")),
    };
    let (mut prompt, mut system, mut stored) = (Vec::new(), Vec::new(), Vec::new());
    for (i, item) in items.iter().enumerate() {
        let at = format!("input[{i}]");
        let is_message = item.as_object().is_some_and(|m| m.get("type").is_none_or(|t| t == "message"));
        if !is_message {
            return Err(invalid(format!("{at}.type: only message items are supported"), format!("{at}.type")));
        }
        let role = item.get("role").and_then(Value::as_str).filter(|r| matches!(*r, "user" | "system" | "developer"));
        let Some(role) = role else {
            let message = format!("{at}.role: user, system or developer (assistant history is not replayable)");
            return Err(invalid(message, format!("{at}.role")));
        };
        let parts = match item.get("content") {
            Some(Value::String(s)) => vec![json!({"type": "input_text", "text": s})],
            Some(Value::Array(parts)) => parts.clone(),
            _ => return Err(invalid(format!("{at}.content: required"), format!("{at}.content"))),
        };
        let mut texts = Vec::new();
        for (j, part) in parts.iter().enumerate() {
            let here = format!("{at}.content[{j}]");
            if part.get("type").and_then(Value::as_str) != Some("input_text") {
                return Err(invalid(format!("{here}.type: only input_text is supported"), format!("{here}.type")));
            }
            let Some(text) = part.get("text").and_then(Value::as_str) else {
                return Err(invalid(format!("{here}.text: expected a string"), format!("{here}.text")));
            };
            texts.push(text.to_string());
        }
        let joined = texts.join("\n");
        if role == "user" { &mut prompt } else { &mut system }.push(joined);
        let content: Vec<Value> = texts.iter().map(|t| json!({"type": "input_text", "text": t})).collect();
        let id = format!("msg_{}", abx_domain::ids::random_hex(12));
        stored.push(json!({"id": id, "type": "message", "role": role, "content": content}));
    }
    let join = |parts: Vec<String>| parts.into_iter().filter(|p| !p.is_empty()).collect::<Vec<_>>().join("\n\n");
    let prompt = join(prompt);
    if prompt.is_empty() {
        return Err(invalid("input: needs at least one non-empty user message", "input"));
    }
    let system = Some(join(system)).filter(|s| !s.is_empty());
    Ok((prompt, system, stored))
}

/// `tools` of a response: only `mcp` tools, which each CLI reaches itself.
fn parse_tools(raw: &Value) -> Result<Vec<McpTool>, AgentError> {
    let list = match raw {
        Value::Null => return Ok(Vec::new()),
        Value::Array(list) => list,
        _ => return Err(invalid("tools: expected a list", "tools")),
    };
    let mut tools: Vec<McpTool> = Vec::new();
    for (i, tool) in list.iter().enumerate() {
        let at = format!("tools[{i}]");
        let Some(tool) = tool.as_object().filter(|t| t.get("type").and_then(Value::as_str) == Some("mcp")) else {
            let message = format!("{at}.type: only mcp tools are supported by the local agent runtime");
            return Err(invalid(message, format!("{at}.type")));
        };
        if let Some(key) = tool.keys().find(|k| !TOOL_KEYS.contains(&k.as_str())) {
            return Err(invalid(format!("{at}.{key}: unsupported parameter"), format!("{at}.{key}")));
        }
        let label = tool.get("server_label").and_then(Value::as_str).filter(|l| {
            (1..=40).contains(&l.len())
                && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
                && !tools.iter().any(|t| t.label == *l)
        });
        let Some(label) = label else {
            let param = format!("{at}.server_label");
            return Err(invalid(format!("{param}: a unique label of 1 to 40 [A-Za-z0-9_-] characters"), param));
        };
        let url = url_check(tool.get("server_url"), &format!("{at}.server_url"))?;
        if tool.get("allowed_tools").is_some_and(abx_wire::api::process::is_truthy) {
            let param = format!("{at}.allowed_tools");
            return Err(invalid(format!("{param}: neither CLI can restrict the MCP tool list"), param));
        }
        if !matches!(tool.get("require_approval"), None | Some(Value::Null))
            && tool.get("require_approval").and_then(Value::as_str) != Some("never")
        {
            let param = format!("{at}.require_approval");
            return Err(invalid(format!("{param}: the CLI runs unattended; only never applies"), param));
        }
        let headers = tool_headers(tool, &at)?;
        tools.push(McpTool { label: label.to_string(), url, headers, credential_id: None });
    }
    Ok(tools)
}

fn header_value_ok(value: &str) -> bool {
    !value.is_empty() && !value.contains(['\r', '\n', '\0'])
}

fn tool_headers(tool: &Map<String, Value>, at: &str) -> Result<BTreeMap<String, String>, AgentError> {
    let mut headers = BTreeMap::new();
    match tool.get("headers") {
        None | Some(Value::Null) => {}
        Some(Value::Object(map)) => {
            for (name, value) in map {
                match value.as_str().filter(|v| !name.is_empty() && header_value_ok(v)) {
                    Some(v) => drop(headers.insert(name.clone(), v.to_string())),
                    None => return Err(invalid(format!("{at}.headers: invalid header"), format!("{at}.headers"))),
                }
            }
        }
        Some(_) => return Err(invalid(format!("{at}.headers: expected a mapping"), format!("{at}.headers"))),
    }
    match tool.get("authorization") {
        None | Some(Value::Null) => {}
        Some(Value::String(token)) if header_value_ok(token) => {
            headers.insert("Authorization".into(), format!("Bearer {token}"));
        }
        Some(_) => {
            let param = format!("{at}.authorization");
            return Err(invalid(format!("{param}: expected a token string"), param));
        }
    }
    Ok(headers)
}

/// A tool as a response echoes it (no headers, no token).
pub fn tool_echo(tool: &McpTool) -> Value {
    json!({"type": "mcp", "server_label": tool.label, "server_url": tool.url})
}

fn item_status(status: ItemStatus) -> &'static str {
    status.as_str()
}

/// One output item of a response: what the CLI did, never shaped like a hosted tool.
pub fn output_item(item: &Item) -> Value {
    let suffix = item.id.strip_prefix("item_").unwrap_or(&item.id);
    let label = || json!(Label::process(&["response_is_cli_turn"]));
    match &item.body {
        ItemBody::Message { text, .. } => {
            let status = if item.status == ItemStatus::Failed { "completed" } else { item.status.as_str() };
            json!({
                "id": format!("msg_{suffix}"), "type": "message", "status": status, "role": "assistant",
                "content": [{"type": "output_text", "text": text, "annotations": []}],
            })
        }
        ItemBody::Reasoning { text } => {
            let summary = if text.is_empty() { json!([]) } else { json!([{"type": "summary_text", "text": text}]) };
            json!({"id": format!("rs_{suffix}"), "type": "reasoning", "summary": summary, "status": item_status(item.status)})
        }
        ItemBody::CommandExecution { command, cwd, output, exit_code, duration_ms, .. } => json!({
            "id": format!("cmd_{suffix}"), "type": "command_execution", "status": item_status(item.status),
            "command": command, "cwd": cwd, "output": output, "exit_code": exit_code, "duration_ms": duration_ms,
            "x_agent_sandbox": label(),
        }),
        ItemBody::McpCall { kind: ToolKind::Mcp, server_label, name, arguments, output, error } => json!({
            "id": format!("mcp_{suffix}"), "type": "mcp_call", "status": item_status(item.status),
            "server_label": server_label, "name": if name.is_empty() { "tool" } else { name },
            "arguments": abx_domain::pyrepr::json_dumps(arguments), "output": output, "error": error,
            "x_agent_sandbox": label(),
        }),
        ItemBody::McpCall { name, arguments, output, error, .. } => json!({
            "id": format!("tc_{suffix}"), "type": "tool_call", "status": item_status(item.status),
            "tool_name": if name.is_empty() { "tool" } else { name }, "arguments": arguments,
            "output": output, "error": error, "x_agent_sandbox": label(),
        }),
    }
}

/// The Responses API's usage object.
pub fn usage_object(usage: &Usage) -> Value {
    json!({
        "input_tokens": usage.input_tokens,
        "input_tokens_details": {"cached_tokens": usage.cached_tokens, "cache_write_tokens": 0},
        "output_tokens": usage.output_tokens,
        "output_tokens_details": {"reasoning_tokens": usage.reasoning_tokens},
        "total_tokens": usage.total_tokens,
    })
}

/// The label of a response: what it is, and whether the model was handed to the CLI.
pub fn response_label(record: &ResponseRecord) -> Label {
    let differences: &[&'static str] =
        if record.model_resolved { &["response_is_cli_turn", "model_passthrough"] } else { &["response_is_cli_turn"] };
    Label::process(differences).with("model_resolved", record.model_resolved)
}

/// The `response` object of `record` and its turn as it is now.
pub fn response_object(record: &ResponseRecord, turn: &TurnRecord) -> Value {
    let status = turn.status.as_str();
    let error = turn.error.as_ref().map(|e| {
        let code = if e.code == "rate_limit_exceeded" { "rate_limit_exceeded" } else { "server_error" };
        json!({"code": code, "message": e.message})
    });
    let completed_at = turn.completed_at.filter(|_| turn.status == TurnStatus::Completed).map(|t| t as i64);
    json!({
        "id": record.id,
        "object": "response",
        "created_at": record.created_at,
        "completed_at": completed_at,
        "status": status,
        "background": record.background,
        "error": error,
        "incomplete_details": null,
        "instructions": record.instructions,
        "metadata": record.metadata,
        "model": record.model,
        "output": turn.items.iter().map(output_item).collect::<Vec<_>>(),
        "parallel_tool_calls": false,
        "previous_response_id": record.previous_response_id,
        "service_tier": null,
        "store": record.store,
        "temperature": null,
        "text": {"format": {"type": "text"}},
        "tool_choice": "auto",
        "tools": record.tools,
        "top_p": null,
        "usage": turn.usage.as_ref().map(usage_object),
        "x_agent_sandbox": response_label(record),
    })
}

/// An input item as `input_items` lists it.
pub fn input_item(item: &Value) -> Value {
    let mut item = item.clone();
    if let Some(map) = item.as_object_mut() {
        map.insert("x_agent_sandbox".into(), json!(Label::state(&["response_is_cli_turn"])));
    }
    item
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(value: Value) -> Map<String, Value> {
        value.as_object().cloned().unwrap_or_default()
    }

    fn refusal(value: Value) -> (String, Option<String>) {
        match parse_create(&body(value)) {
            Err(AgentError::Invalid { message, param, .. }) => (message, param),
            other => panic!("accepted: {other:?}"),
        }
    }

    #[test]
    fn input_becomes_a_prompt_instructions_and_stored_items() {
        let request = parse_create(&body(json!({
            "model": " gpt-5 ", "instructions": "Be brief.", "temperature": 0.2,
            "input": [
                {"role": "developer", "content": "Use tabs."},
                {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "a"}, {"type": "input_text", "text": "b"}]},
            ],
        })))
        .expect("valid");
        assert_eq!(request.model, "gpt-5");
        assert_eq!(request.prompt, "a\nb");
        assert_eq!(request.instructions.as_deref(), Some("Be brief.\n\nUse tabs."));
        assert_eq!(request.ignored, ["temperature"]);
        assert!(request.store && !request.stream && !request.background);
        assert_eq!(request.input_items.len(), 2);
        assert_eq!(request.input_items[1]["content"][1], json!({"type": "input_text", "text": "b"}));
    }

    #[test]
    fn what_a_cli_turn_cannot_honour_is_refused_by_field() {
        let cases = [
            (json!({"model": "m", "input": "x", "seed": 1}), "seed"),
            (json!({"input": "x"}), "model"),
            (json!({"model": "m"}), "input"),
            (json!({"model": "m", "input": 5}), "input"),
            (json!({"model": "m", "input": [{"role": "assistant", "content": "x"}]}), "input[0].role"),
            (
                json!({"model": "m", "input": [{"role": "user", "content": [{"type": "input_image"}]}]}),
                "input[0].content[0].type",
            ),
            (json!({"model": "m", "input": "x", "stream": "yes"}), "stream"),
            (json!({"model": "m", "input": "x", "background": true, "store": false}), "background"),
            (json!({"model": "m", "input": "x", "tools": [{"type": "function", "name": "f"}]}), "tools[0].type"),
            (
                json!({"model": "m", "input": "x", "tools": [{"type": "mcp", "server_label": "a b", "server_url": "http://h"}]}),
                "tools[0].server_label",
            ),
            (json!({"model": "m", "input": "x", "text": {"format": {"type": "json_object"}}}), "text.format"),
            (json!({"model": "m", "input": "x", "tool_choice": "required"}), "tool_choice"),
            (json!({"model": "m", "input": "x", "metadata": {"k": 1}}), "metadata.k"),
        ];
        for (value, param) in cases {
            let (message, got) = refusal(value.clone());
            assert_eq!(got.as_deref(), Some(param), "{value}: {message}");
        }
    }

    #[test]
    fn mcp_tools_keep_their_token_as_a_header_and_echo_without_it() {
        let request = parse_create(&body(json!({"model": "m", "input": "x", "tools": [
            {"type": "mcp", "server_label": "docs", "server_url": "http://127.0.0.1:9/mcp", "authorization": "tok"}
        ]})))
        .expect("valid");
        let tool = &request.tools[0];
        assert_eq!(tool.headers.get("Authorization").map(String::as_str), Some("Bearer tok"));
        assert_eq!(
            tool_echo(tool),
            json!({"type": "mcp", "server_label": "docs", "server_url": "http://127.0.0.1:9/mcp"})
        );
    }
}
