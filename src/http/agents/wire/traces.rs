//! `agent.session.trace`: one OTLP trace per finished turn, served only with
//! `ABX_AGENTS_TRACES=1`. A span holds the turn's start and end times and
//! its status and item count, never text, commands or arguments.

use abx_domain::agents::turn::{TurnRecord, TurnStatus};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use super::Label;

fn attr_str(key: &str, value: &str) -> Value {
    json!({"key": key, "value": {"stringValue": value}})
}

fn attr_int(key: &str, value: usize) -> Value {
    json!({"key": key, "value": {"intValue": value.to_string()}})
}

/// The trace of a finished turn (`None` while it has not both started and ended).
pub fn trace_object(session_id: &str, turn: &TurnRecord) -> Option<Value> {
    let (started, completed) = (turn.started_at?, turn.completed_at?);
    let digest: String = Sha256::digest(turn.id.as_bytes()).iter().map(|b| format!("{b:02x}")).collect();
    let nanos = |t: f64| format!("{}", (t * 1e9) as i128);
    let span = json!({
        "traceId": &digest[..32],
        "spanId": &digest[32..48],
        "name": "agent.turn",
        "kind": 1,
        "startTimeUnixNano": nanos(started),
        "endTimeUnixNano": nanos(completed),
        "attributes": [attr_str("turn.status", turn.status.as_str()), attr_int("turn.items", turn.items.len())],
        "status": {"code": if turn.status == TurnStatus::Failed { 2 } else { 1 }},
    });
    Some(json!({
        "id": format!("trace_{}", &digest[..24]),
        "object": "agent.session.trace",
        "created_at": completed as i64,
        "session_id": session_id,
        "otlp": {"resourceSpans": [{
            "resource": {"attributes": [attr_str("service.name", "agent-sandbox-local")]},
            "scopeSpans": [{"scope": {"name": "agent-sandbox-agents"}, "spans": [span]}],
        }]},
        "x_agent_sandbox": Label::state(&["trace_from_journal_timing_only"]),
    }))
}
