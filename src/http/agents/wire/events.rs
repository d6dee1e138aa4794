//! The server-sent events of `GET /v1/agents/sessions/{id}/events`: each
//! runtime event becomes zero or more Agents-API events. Every frame's SSE
//! `id` is the runtime sequence number (resume with `?after=` or
//! `Last-Event-ID`); `event_id` is `evt_<seq, 10 digits>` with `_<n>` for
//! the second and later events of one runtime event.

use abx_domain::agents::log::{DeltaKind, Event, EventKind};
use abx_domain::agents::session::SessionView;
use abx_domain::agents::turn::{ItemBody, TurnStatus};
use serde::Serialize;
use serde_json::{json, Map, Value};

use super::objects::{item_object, SessionObject, TurnObject, UsageObject};

/// One wire event: its type and its JSON text.
#[derive(Debug, Clone, PartialEq)]
pub struct WireEvent {
    /// The SSE `event:` (and the JSON's `type`).
    pub kind: String,
    /// The JSON, serialised.
    pub data: String,
}

/// A text delta, the most frequent event: serialised without building a JSON tree.
#[derive(Serialize)]
struct Delta<'a> {
    #[serde(rename = "type")]
    kind: &'a str,
    event_id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    content_index: Option<u8>,
    #[serde(skip_serializing_if = "Option::is_none")]
    summary_index: Option<u8>,
    session_id: &'a str,
    turn_id: Option<&'a str>,
    item_id: &'a str,
    output_index: usize,
    delta: &'a str,
}

fn event_id(seq: u64, n: usize) -> String {
    if n == 0 {
        format!("evt_{seq:010}")
    } else {
        format!("evt_{seq:010}_{n}")
    }
}

/// The wire events of `event` of the session `view` describes now.
pub fn map(event: &Event, view: &SessionView) -> Vec<WireEvent> {
    let sid = view.id.as_str();
    let tid = event.turn_id.as_deref();
    let agent_id = view.meta.display_id.as_str();
    let mut out: Vec<WireEvent> = Vec::new();
    let mut add = |kind: &str, fields: Value| {
        let mut data = Map::new();
        data.insert("type".into(), json!(kind));
        data.insert("event_id".into(), json!(event_id(event.seq, out.len())));
        if let Value::Object(fields) = fields {
            data.extend(fields);
        }
        out.push(WireEvent { kind: kind.to_string(), data: Value::Object(data).to_string() });
    };
    let base = |extra: Value| {
        let mut map = Map::new();
        map.insert("session_id".into(), json!(sid));
        map.insert("turn_id".into(), json!(tid));
        if let Value::Object(extra) = extra {
            map.extend(extra);
        }
        Value::Object(map)
    };
    match &event.kind {
        EventKind::SessionInProgress { usage } => {
            add("agent.session.in_progress", json!({"session": SessionObject::then(view, "in_progress", usage)}));
        }
        EventKind::SessionIdle { usage } => {
            add("agent.session.idle", json!({"session": SessionObject::then(view, "idle", usage)}));
        }
        EventKind::TurnQueued { turn } | EventKind::TurnStarted { turn } | EventKind::TurnEnded { turn } => {
            let kind = match (&event.kind, turn.status) {
                (EventKind::TurnQueued { .. }, _) => "agent.session.turn.created",
                (EventKind::TurnStarted { .. }, _) => "agent.session.turn.in_progress",
                (_, TurnStatus::Completed) => "agent.session.turn.completed",
                (_, TurnStatus::Cancelled) => "agent.session.turn.cancelled",
                _ => "agent.session.turn.failed",
            };
            let object = TurnObject::new(turn, sid, agent_id, false);
            let mut fields = base(json!({"turn": object}));
            if matches!(event.kind, EventKind::TurnEnded { .. }) {
                if let (Some(usage), Value::Object(map)) = (&turn.usage, &mut fields) {
                    map.insert("usage".into(), json!(UsageObject::from(usage)));
                }
            }
            add(kind, fields);
        }
        EventKind::ItemAdded { item } => {
            let idx = item.output_index;
            add("agent.session.turn.item.added", base(json!({"output_index": idx, "item": item_object(item, false)})));
            match item.body {
                ItemBody::Message { .. } => add(
                    "agent.session.turn.content_part.added",
                    base(
                        json!({"item_id": item.id, "output_index": idx, "content_index": 0, "part": {"type": "output_text", "text": ""}}),
                    ),
                ),
                ItemBody::Reasoning { .. } => add(
                    "agent.session.turn.reasoning_summary_part.added",
                    base(
                        json!({"item_id": item.id, "output_index": idx, "summary_index": 0, "part": {"type": "summary_text", "text": ""}}),
                    ),
                ),
                _ => {}
            }
        }
        EventKind::ItemDelta { item_id, kind, delta, output_index } => {
            let (name, content_index, summary_index) = match kind {
                DeltaKind::Text => ("agent.session.turn.output_text.delta", Some(0), None),
                DeltaKind::Reasoning => ("agent.session.turn.reasoning_summary_text.delta", None, Some(0)),
                DeltaKind::Output => ("agent.output.command_execution_output.delta", None, None),
            };
            let wire = Delta {
                kind: name,
                event_id: event_id(event.seq, 0),
                content_index,
                summary_index,
                session_id: sid,
                turn_id: tid,
                item_id,
                output_index: *output_index,
                delta,
            };
            let data = serde_json::to_string(&wire).unwrap_or_default();
            return vec![WireEvent { kind: name.to_string(), data }];
        }
        EventKind::ItemDone { item } => {
            let idx = item.output_index;
            let id = &item.id;
            match &item.body {
                ItemBody::Message { text, .. } => {
                    add(
                        "agent.session.turn.output_text.done",
                        base(json!({"item_id": id, "output_index": idx, "content_index": 0, "text": text})),
                    );
                    add(
                        "agent.session.turn.content_part.done",
                        base(
                            json!({"item_id": id, "output_index": idx, "content_index": 0, "part": {"type": "output_text", "text": text}}),
                        ),
                    );
                }
                ItemBody::Reasoning { text } => {
                    add(
                        "agent.session.turn.reasoning_summary_text.done",
                        base(json!({"item_id": id, "output_index": idx, "summary_index": 0, "text": text})),
                    );
                    add(
                        "agent.session.turn.reasoning_summary_part.done",
                        base(
                            json!({"item_id": id, "output_index": idx, "summary_index": 0, "part": {"type": "summary_text", "text": text}}),
                        ),
                    );
                }
                _ => {}
            }
            add("agent.session.turn.item.done", base(json!({"output_index": idx, "item": item_object(item, false)})));
        }
        EventKind::Log { text } => add("x_agent_sandbox.turn.log", base(json!({"stream": "stdout", "text": text}))),
    }
    out
}

/// Whether `event` is a `session.idle` (a stream may end after it when caught up).
pub fn is_idle(event: &Event) -> bool {
    matches!(event.kind, EventKind::SessionIdle { .. })
}

/// Reads `after` of the events query: a sequence number or `evt_<seq>[...]`.
pub fn parse_after(raw: &str) -> Option<u64> {
    let digits = match raw.strip_prefix("evt_") {
        Some(rest) => rest.split(|c: char| !c.is_ascii_digit()).next().unwrap_or(""),
        None => raw,
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn after_takes_numbers_and_event_ids() {
        assert_eq!(parse_after("12"), Some(12));
        assert_eq!(parse_after("evt_0000000012"), Some(12));
        assert_eq!(parse_after("evt_0000000012_2"), Some(12));
        assert_eq!(parse_after("abc"), None);
        assert_eq!(parse_after("evt_"), None);
        assert_eq!(parse_after("-1"), None);
    }
}
