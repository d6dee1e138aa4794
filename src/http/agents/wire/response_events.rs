//! The server-sent events of a streamed response, in the Responses API's
//! types and order: `response.created`, `response.in_progress`, then per
//! output item `response.output_item.added`, (for messages)
//! `response.content_part.added`, `response.output_text.delta`...,
//! `response.output_text.done`, `response.content_part.done`, then
//! `response.output_item.done`, and last `response.completed`,
//! `response.failed` or `response.incomplete` (a cancelled turn).
//!
//! Unlike the reference, which replays the stored turn once it is over, the
//! events follow the turn's own events as the CLI prints them: each runtime
//! event of the response's turn maps to its Responses events as it happens.
//! The mapping depends only on the session's event log, so a replay of the
//! same turn (`GET /v1/responses/{id}?stream=true`) numbers its events the
//! same way and `starting_after` resumes exactly.

use std::collections::HashMap;

use abx_domain::agents::log::{DeltaKind, Event, EventKind};
use abx_domain::agents::turn::{Item, ItemBody};
use serde_json::{json, Map, Value};

use super::responses::output_item;

/// One event of the stream: its number and its JSON.
#[derive(Debug, Clone, PartialEq)]
pub struct StreamEvent {
    /// `sequence_number`.
    pub seq: u64,
    /// `type`.
    pub kind: &'static str,
    /// The JSON, with `type` and `sequence_number`.
    pub data: Value,
}

impl StreamEvent {
    /// The SSE frame.
    pub fn frame(&self) -> String {
        format!("event: {}\ndata: {}\n\n", self.kind, self.data)
    }
}

/// Turns one response's runtime events into stream events.
#[derive(Debug)]
pub struct ResponseStream {
    turn_id: String,
    next: u64,
    /// Bytes of each open message's text already sent as deltas.
    sent: HashMap<String, usize>,
}

/// What ends a stream: the terminal event type of a final response status.
pub fn terminal_kind(status: &str) -> Option<&'static str> {
    match status {
        "completed" => Some("response.completed"),
        "failed" => Some("response.failed"),
        "cancelled" => Some("response.incomplete"),
        _ => None,
    }
}

impl ResponseStream {
    /// A stream of the turn `turn_id`.
    pub fn new(turn_id: &str) -> Self {
        ResponseStream { turn_id: turn_id.to_string(), next: 0, sent: HashMap::new() }
    }

    fn add(&mut self, out: &mut Vec<StreamEvent>, kind: &'static str, fields: Value) {
        let mut data = Map::new();
        data.insert("type".into(), json!(kind));
        data.insert("sequence_number".into(), json!(self.next));
        if let Value::Object(fields) = fields {
            data.extend(fields);
        }
        out.push(StreamEvent { seq: self.next, kind, data: Value::Object(data) });
        self.next += 1;
    }

    /// `response.created` and `response.in_progress` with `shell` (the
    /// response as it starts: in progress, no output yet).
    pub fn opening(&mut self, shell: &Value) -> Vec<StreamEvent> {
        let mut out = Vec::new();
        self.add(&mut out, "response.created", json!({"response": shell}));
        self.add(&mut out, "response.in_progress", json!({"response": shell}));
        out
    }

    /// The stream events of `event`; `true` when it ends the turn (the
    /// caller then sends [`ResponseStream::closing`]).
    pub fn map(&mut self, event: &Event) -> (Vec<StreamEvent>, bool) {
        let mut out = Vec::new();
        if event.turn_id.as_deref() != Some(self.turn_id.as_str()) {
            return (out, false);
        }
        match &event.kind {
            EventKind::ItemAdded { item } => self.added(&mut out, item),
            EventKind::ItemDelta { item_id, kind: DeltaKind::Text, delta, output_index } => {
                if let Some(sent) = self.sent.get_mut(item_id) {
                    *sent += delta.len();
                    let id = format!("msg_{}", item_id.strip_prefix("item_").unwrap_or(item_id));
                    let fields = json!({"item_id": id, "output_index": output_index, "content_index": 0, "delta": delta, "logprobs": []});
                    self.add(&mut out, "response.output_text.delta", fields);
                }
            }
            EventKind::ItemDone { item } => self.done(&mut out, item),
            EventKind::TurnEnded { .. } => return (out, true),
            _ => {}
        }
        (out, false)
    }

    fn added(&mut self, out: &mut Vec<StreamEvent>, item: &Item) {
        let mut wire = output_item(item);
        wire["status"] = json!("in_progress");
        let index = item.output_index;
        if let ItemBody::Message { text, .. } = &item.body {
            wire["content"] = json!([]);
            let id = wire["id"].clone();
            self.add(out, "response.output_item.added", json!({"output_index": index, "item": wire}));
            let part = json!({"type": "output_text", "text": "", "annotations": []});
            let fields = json!({"item_id": id, "output_index": index, "content_index": 0, "part": part});
            self.add(out, "response.content_part.added", fields);
            self.sent.insert(item.id.clone(), 0);
            if !text.is_empty() {
                self.sent.insert(item.id.clone(), text.len());
                let fields =
                    json!({"item_id": id, "output_index": index, "content_index": 0, "delta": text, "logprobs": []});
                self.add(out, "response.output_text.delta", fields);
            }
        } else {
            self.add(out, "response.output_item.added", json!({"output_index": index, "item": wire}));
        }
    }

    fn done(&mut self, out: &mut Vec<StreamEvent>, item: &Item) {
        let wire = output_item(item);
        let index = item.output_index;
        if let ItemBody::Message { text, .. } = &item.body {
            if !self.sent.contains_key(&item.id) {
                self.added(out, item);
            }
            let sent = self.sent.remove(&item.id).unwrap_or(0);
            let id = wire["id"].clone();
            // Text the deltas did not carry (a message printed whole, or held back by redaction).
            if sent < text.len() && text.is_char_boundary(sent) {
                let fields = json!({"item_id": id, "output_index": index, "content_index": 0, "delta": &text[sent..], "logprobs": []});
                self.add(out, "response.output_text.delta", fields);
            }
            let fields =
                json!({"item_id": id, "output_index": index, "content_index": 0, "text": text, "logprobs": []});
            self.add(out, "response.output_text.done", fields);
            let part = wire["content"][0].clone();
            let fields = json!({"item_id": id, "output_index": index, "content_index": 0, "part": part});
            self.add(out, "response.content_part.done", fields);
        }
        self.add(out, "response.output_item.done", json!({"output_index": index, "item": wire}));
    }

    /// The terminal event of the final `response` object, if its status is final.
    pub fn closing(&mut self, response: &Value) -> Vec<StreamEvent> {
        let mut out = Vec::new();
        if let Some(kind) = response.get("status").and_then(Value::as_str).and_then(terminal_kind) {
            self.add(&mut out, kind, json!({"response": response}));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use abx_domain::agents::turn::{ItemStatus, TurnStatus, TurnSummary};

    fn event(seq: u64, turn: &str, kind: EventKind) -> Event {
        Event { seq, ts: 0.0, turn_id: Some(turn.into()), kind }
    }

    fn message(text: &str, status: ItemStatus) -> Item {
        Item {
            id: "item_ab".into(),
            turn_id: "turn_1".into(),
            status,
            output_index: 0,
            body: ItemBody::Message { text: text.into(), phase: None },
        }
    }

    #[test]
    fn a_message_streams_in_the_responses_order_and_text_printed_whole_still_arrives() {
        let mut stream = ResponseStream::new("turn_1");
        let mut kinds: Vec<&str> = stream.opening(&json!({})).iter().map(|e| e.kind).collect();
        let mut texts = String::new();
        let events = [
            event(1, "turn_other", EventKind::ItemAdded { item: message("x", ItemStatus::InProgress) }),
            event(2, "turn_1", EventKind::ItemAdded { item: message("", ItemStatus::InProgress) }),
            event(
                3,
                "turn_1",
                EventKind::ItemDelta {
                    item_id: "item_ab".into(),
                    kind: DeltaKind::Text,
                    delta: "he".into(),
                    output_index: 0,
                },
            ),
            event(4, "turn_1", EventKind::ItemDone { item: message("hello", ItemStatus::Completed) }),
        ];
        for e in &events {
            let (out, end) = stream.map(e);
            assert!(!end);
            for s in out {
                if s.kind == "response.output_text.delta" {
                    texts.push_str(s.data["delta"].as_str().unwrap_or_default());
                    assert_eq!(s.data["item_id"], "msg_ab");
                }
                kinds.push(s.kind);
            }
        }
        let summary = TurnSummary {
            id: "turn_1".into(),
            status: TurnStatus::Completed,
            created_at: 0.0,
            started_at: None,
            completed_at: None,
            error: None,
            usage: None,
        };
        assert!(stream.map(&event(5, "turn_1", EventKind::TurnEnded { turn: summary })).1);
        let closing = stream.closing(&json!({"status": "completed"}));
        kinds.extend(closing.iter().map(|e| e.kind));
        assert_eq!(
            kinds,
            [
                "response.created",
                "response.in_progress",
                "response.output_item.added",
                "response.content_part.added",
                "response.output_text.delta",
                "response.output_text.delta",
                "response.output_text.done",
                "response.content_part.done",
                "response.output_item.done",
                "response.completed",
            ]
        );
        assert_eq!(texts, "hello", "the deltas add up to the final text");
        assert_eq!(closing[0].data["sequence_number"], 9);
    }
}
