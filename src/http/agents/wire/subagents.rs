//! `agent.session.subagent` and a subagent's turns and items, built from
//! the records and stream entries the runtime kept (`agents::subagents`).

use abx_domain::agents::subagents::{SubagentRecord, SubagentTurn, TurnSource};
use serde_json::{json, Value};

use super::Label;

fn label(source: Option<TurnSource>) -> Label {
    match source {
        None => Label::process(&["ids_from_cli_only"]),
        Some(TurnSource::Rollout) => Label::process(&["ids_from_cli_only", "turns_from_rollout"]),
        Some(TurnSource::ParentStream) => Label::process(&["ids_from_cli_only", "turns_grouped_from_parent_stream"]),
    }
}

/// `agent.session.subagent`.
pub fn subagent_object(record: &SubagentRecord, session_id: &str, parent_agent_id: &str) -> Value {
    let instructions = record.instructions.as_ref().map(|text| json!([{"type": "input_text", "text": text}]));
    json!({
        "id": record.id,
        "object": "agent.session.subagent",
        "session_id": session_id,
        "parent_agent_id": parent_agent_id,
        "name": record.name,
        "instructions": instructions,
        "opened_at": record.opened_at as i64,
        "closed_at": record.closed_at.map(|t| t as i64),
        "status": if record.closed_at.is_some() { "closed" } else { "active" },
        "x_agent_sandbox": label(None),
    })
}

/// A subagent's turns as `agent.session.turn` objects; while the session
/// runs, a turn that has not ended is `in_progress`.
pub fn turn_objects(
    record: &SubagentRecord,
    session_id: &str,
    turns: &[SubagentTurn],
    source: TurnSource,
    running: bool,
) -> Vec<Value> {
    let opened = record.opened_at as i64;
    turns
        .iter()
        .map(|turn| {
            let complete = turn.complete || !running;
            json!({
                "id": turn.id,
                "object": "agent.session.turn",
                "agent_id": record.id,
                "session_id": session_id,
                "status": if complete { "completed" } else { "in_progress" },
                "created_at": opened,
                "started_at": opened,
                "completed_at": complete.then(|| record.closed_at.map_or(opened, |t| t as i64)),
                "error": null,
                "subagent_id": record.id,
                "usage": null,
                "x_agent_sandbox": label(Some(source)),
            })
        })
        .collect()
}

/// The items of a subagent's turns.
pub fn item_objects(turns: &[SubagentTurn], source: TurnSource) -> Vec<Value> {
    let mut items = Vec::new();
    for turn in turns {
        for (position, entry) in turn.entries.iter().enumerate() {
            let id = format!("item_{}_{}", position + 1, turn.id);
            let text = entry.get("text").and_then(Value::as_str).unwrap_or("");
            let item = match entry.get("kind").and_then(Value::as_str) {
                Some("message") => {
                    let role =
                        entry.get("role").and_then(Value::as_str).filter(|r| !r.is_empty()).unwrap_or("assistant");
                    let part = if role == "assistant" { "output_text" } else { "input_text" };
                    json!({"id": id, "turn_id": turn.id, "x_agent_sandbox": label(Some(source)),
                        "type": "message", "role": role, "status": "completed", "content": [{"type": part, "text": text}]})
                }
                Some("reasoning") => json!({"id": id, "turn_id": turn.id, "x_agent_sandbox": label(Some(source)),
                    "type": "reasoning", "status": "completed", "summary": [{"type": "summary_text", "text": text}]}),
                Some("tool_call") => {
                    let status = match entry.get("ok").and_then(Value::as_bool) {
                        None => "in_progress",
                        Some(true) => "completed",
                        Some(false) => "failed",
                    };
                    json!({"id": id, "turn_id": turn.id, "x_agent_sandbox": label(Some(source)),
                        "type": "tool_call", "status": status, "tool_name": entry.get("name"),
                        "arguments": entry.get("arguments"), "output": entry.get("output")})
                }
                _ => continue,
            };
            items.push(item);
        }
    }
    items
}
