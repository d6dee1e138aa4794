//! Agent definitions on the wire (`/v1/agents`): the create and update
//! bodies read into a [`Definition`] with the reference's validation, and
//! the `agent` object (MCP header values masked).

use abx_domain::agents::records::Stored;
use abx_domain::agents::resources::{Definition, DefinitionTool};
use abx_domain::agents::AgentError;
use serde_json::{json, Map, Value};

use super::requests::{agent_fields, metadata_strict};
use super::tools::McpTool;
use super::Label;

/// Keys a definition body may hold (`command`: ours, for the `command` runtime).
const DEFINITION_KEYS: &[&str] = &[
    "model",
    "instructions",
    "metadata",
    "multi_agent",
    "name",
    "reasoning",
    "service_tier",
    "text",
    "tools",
    "adapter",
    "runtime",
    "command",
];

fn stored_tools(tools: &[McpTool]) -> Vec<DefinitionTool> {
    tools.iter().map(|t| DefinitionTool { server: t.server(), credential_id: t.credential_id.clone() }).collect()
}

/// The MCP tools of a definition, as an agent block's tools.
pub fn tools_of(definition: &Definition) -> Vec<McpTool> {
    definition
        .tools
        .iter()
        .map(|t| McpTool {
            label: t.server.name.clone(),
            url: t.server.url.clone().unwrap_or_default(),
            headers: t.server.headers.clone(),
            credential_id: t.credential_id.clone(),
        })
        .collect()
}

/// `POST /v1/agents`: the definition of `body` for `runtime` (already selected).
///
/// # Errors
/// 400 naming the first offending field.
pub fn parse_create(body: &Map<String, Value>, runtime: &str) -> Result<Definition, AgentError> {
    let fields = agent_fields(body, runtime, "", DEFINITION_KEYS, true)?;
    let metadata = match body.get("metadata") {
        Some(raw) => metadata_strict(raw, "metadata")?,
        None => Map::new(),
    };
    Ok(Definition {
        adapter: runtime.to_string(),
        model: fields.model.unwrap_or_default(),
        name: fields.name,
        instructions: fields.instructions,
        metadata,
        reasoning_effort: fields.reasoning_effort,
        tools: stored_tools(&fields.tools),
        command: fields.command,
    })
}

/// `POST /v1/agents/{agent_id}`: applies the fields `body` holds; the
/// others stay as they are.
///
/// # Errors
/// 400 for a change of runtime or an invalid field.
pub fn apply_update(definition: &mut Definition, body: &Map<String, Value>) -> Result<(), AgentError> {
    if body.contains_key("adapter") || body.contains_key("runtime") {
        return Err(AgentError::invalid("adapter: a definition cannot change runtime", "adapter"));
    }
    let fields = agent_fields(body, &definition.adapter, "", DEFINITION_KEYS, false)?;
    if let Some(model) = fields.model {
        definition.model = model;
    }
    if body.contains_key("name") {
        definition.name = fields.name;
    }
    if body.contains_key("instructions") {
        definition.instructions = fields.instructions;
    }
    if let Some(raw) = body.get("metadata") {
        definition.metadata = metadata_strict(raw, "metadata")?;
    }
    if body.contains_key("reasoning") {
        definition.reasoning_effort = fields.reasoning_effort;
    }
    if body.contains_key("tools") {
        definition.tools = stored_tools(&fields.tools);
    }
    if fields.command.is_some() {
        definition.command = fields.command;
    }
    Ok(())
}

/// The `agent` object.
pub fn definition_object(record: &Stored<Definition>) -> Value {
    let d = &record.data;
    let label = Label::state(&["update_in_place", "snapshot_at_session_start"]).with("runtime", d.adapter.as_str());
    json!({
        "id": record.id,
        "object": "agent",
        "created_at": record.created_at,
        "updated_at": record.updated_at,
        "name": d.name,
        "model": d.model,
        "instructions": d.instructions,
        "metadata": d.metadata,
        "multi_agent": {"enabled": false, "max_concurrent_subagents": null},
        "reasoning": {"effort": d.reasoning_effort, "summary": null},
        "service_tier": "default",
        "text": {"format": {"type": "text"}, "verbosity": "medium"},
        "tools": tools_of(d).iter().map(McpTool::wire).collect::<Vec<_>>(),
        "x_agent_sandbox": label,
    })
}

/// The `agent.deleted` receipt.
pub fn deleted_object(record: &Stored<Definition>) -> Value {
    let label = Label::state(&["snapshot_at_session_start"]).with("runtime", record.data.adapter.as_str());
    json!({"id": record.id, "object": "agent.deleted", "deleted": true, "x_agent_sandbox": label})
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obj(v: Value) -> Map<String, Value> {
        v.as_object().cloned().expect("object")
    }

    #[test]
    fn a_definition_is_read_updated_in_place_and_masked() {
        let tool = json!([{"type": "mcp", "server_label": "docs", "transport": {"type": "http", "server_url": "https://d/mcp", "headers": {"X-Key": "v1"}}}]);
        let body = obj(json!({"model": "gpt-5", "name": "n", "tools": tool, "metadata": {"a": "b"}}));
        let mut d = parse_create(&body, "codex").expect("ok");
        assert_eq!((d.model.as_str(), d.name.as_deref(), d.tools.len()), ("gpt-5", Some("n"), 1));
        apply_update(&mut d, &obj(json!({"instructions": "be brief", "name": null}))).expect("update");
        assert_eq!((d.instructions.as_deref(), d.name.as_deref(), d.model.as_str()), (Some("be brief"), None, "gpt-5"));
        assert!(apply_update(&mut d, &obj(json!({"runtime": "qwen-code"}))).is_err());
        let record = Stored { id: "agent_x".into(), owner: "o".into(), created_at: 1, updated_at: 2, data: d };
        let wire = definition_object(&record);
        assert_eq!(wire["tools"][0]["transport"]["headers"]["X-Key"], "***");
        assert_eq!(wire["x_agent_sandbox"]["runtime"], "codex");
        assert!(parse_create(&obj(json!({})), "codex").is_err(), "model is required");
        assert!(parse_create(&obj(json!({"model": "m", "bogus": 1})), "codex").is_err());
    }
}
