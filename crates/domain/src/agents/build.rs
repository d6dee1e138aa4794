//! The turn builder: turns a CLI's [`Parsed`] events into the turn's items
//! and the session's events, redacting every text on the way.
//!
//! Streamed text is released as soon as it cannot hold the beginning of a
//! registered secret; item texts are capped at [`MAX_TEXT`]. A message is
//! completed as `commentary` when more work follows it, or as the
//! `final_answer` when the turn ends.

use std::collections::HashMap;
use std::time::Instant;

use serde_json::Value;

use super::artifacts::{reported_paths, Reported};
use super::error::Failure;
use super::log::{DeltaKind, EventKind};
use super::parsed::{Parsed, SubagentOp, ToolKind};
use super::redact::Redactor;
use super::session::{Record, Session};
use super::subagents::{merge_entry, SubagentRecord, MAX_ENTRIES};
use super::turn::{Item, ItemBody, ItemStatus, Phase, Usage};

/// Longest text an item keeps (the reference's tool-output limit).
pub const MAX_TEXT: usize = 256 * 1024;
/// Longest log line kept.
const MAX_LOG_LINE: usize = 4096;
/// Log events per turn at most.
const MAX_LOGS: usize = 1000;

/// `text` cut to at most `max` bytes, at a character boundary.
pub fn truncate(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// Streamed text not yet released (it may hold the start of a secret).
#[derive(Debug, Default)]
struct TextStream {
    /// The raw text so far (up to [`MAX_TEXT`]), to compare with the final text.
    raw: String,
    raw_len: usize,
    pending: String,
}

impl TextStream {
    fn push(&mut self, redactor: &Redactor, text: &str) -> String {
        if self.raw.len() < MAX_TEXT {
            self.raw.push_str(truncate(text, MAX_TEXT - self.raw.len()));
        }
        self.raw_len += text.len();
        self.pending.push_str(text);
        let cut = redactor.safe_cut(&self.pending);
        let rest = self.pending.split_off(cut);
        let released = std::mem::replace(&mut self.pending, rest);
        redactor.redact(&released)
    }

    fn flush(&mut self, redactor: &Redactor) -> String {
        redactor.redact(&std::mem::take(&mut self.pending))
    }
}

/// Builds one turn; see the module documentation.
pub struct TurnBuilder<'a> {
    session: &'a Session,
    turn_id: String,
    turn_index: usize,
    redactor: Redactor,
    runtime: &'static str,
    cwd: Option<String>,
    native: HashMap<String, usize>,
    streams: HashMap<usize, TextStream>,
    pending_message: Option<usize>,
    started: HashMap<usize, Instant>,
    file_items: HashMap<usize, Vec<Reported>>,
    usage: Option<Usage>,
    saw_message: bool,
    logs: usize,
    /// The CLI reported a fatal error.
    pub fatal: Option<Failure>,
    result_ok: Option<bool>,
    result_text: Option<String>,
    /// Paths the successful tool calls reported as written.
    pub reported: Vec<Reported>,
}

impl<'a> TurnBuilder<'a> {
    /// A builder for turn `turn_id` of `session`.
    pub fn new(
        session: &'a Session,
        turn_id: &str,
        redactor: Redactor,
        runtime: &'static str,
        cwd: Option<String>,
    ) -> Self {
        let turn_index = session.lock().turns.iter().position(|t| t.id == turn_id).unwrap_or(usize::MAX);
        TurnBuilder {
            session,
            turn_id: turn_id.to_string(),
            turn_index,
            redactor,
            runtime,
            cwd,
            native: HashMap::new(),
            streams: HashMap::new(),
            pending_message: None,
            started: HashMap::new(),
            file_items: HashMap::new(),
            usage: None,
            saw_message: false,
            logs: 0,
            fatal: None,
            result_ok: None,
            result_text: None,
            reported: Vec::new(),
        }
    }

    /// The failure a result record reported (`ok: false`), if it did.
    pub fn result_failure(&self) -> Option<Failure> {
        if self.result_ok != Some(false) {
            return None;
        }
        let text = self.result_text.as_deref().filter(|t| !t.is_empty()).unwrap_or("agent reported an error");
        Some(Failure::new("internal_error", truncate(&self.redactor.redact(text), 2000)))
    }

    /// The redactor of this turn.
    pub fn redactor(&self) -> &Redactor {
        &self.redactor
    }

    /// Runs `f` on item `index`; returns what it returns.
    fn with_item<R>(&self, index: usize, f: impl FnOnce(&mut Item) -> R) -> Option<R> {
        let mut state = self.session.lock();
        let turn = state.turns.get_mut(self.turn_index).filter(|t| t.id == self.turn_id)?;
        turn.items.get_mut(index).map(f)
    }

    /// Runs `f` on item `index` and returns a snapshot of it afterwards.
    fn update_item(&self, index: usize, f: impl FnOnce(&mut Item)) -> Option<Item> {
        self.with_item(index, |item| {
            f(item);
            item.clone()
        })
    }

    fn emit(&self, kind: EventKind) {
        self.session.emit(Some(&self.turn_id), kind);
    }

    fn new_item(&mut self, native: Option<&str>, body: ItemBody) -> usize {
        self.flush_pending_message(Phase::Commentary);
        let item = {
            let mut state = self.session.lock();
            let Some(turn) = state.turns.get_mut(self.turn_index).filter(|t| t.id == self.turn_id) else {
                return usize::MAX;
            };
            let item = Item {
                id: format!("item_{}", crate::ids::random_hex(12)),
                turn_id: self.turn_id.clone(),
                status: ItemStatus::InProgress,
                output_index: turn.items.len(),
                body,
            };
            turn.items.push(item.clone());
            item
        };
        let index = item.output_index;
        if let Some(native) = native {
            self.native.insert(native.to_string(), index);
        }
        self.emit(EventKind::ItemAdded { item });
        index
    }

    fn flush_pending_message(&mut self, phase: Phase) {
        let Some(index) = self.pending_message.take() else { return };
        let item = self.update_item(index, |item| {
            item.status = ItemStatus::Completed;
            if let ItemBody::Message { phase: p, .. } = &mut item.body {
                *p = Some(phase);
            }
        });
        if let Some(item) = item {
            self.emit(EventKind::ItemDone { item });
        }
    }

    fn delta_kind(body: &ItemBody) -> DeltaKind {
        match body {
            ItemBody::Message { .. } => DeltaKind::Text,
            ItemBody::Reasoning { .. } => DeltaKind::Reasoning,
            _ => DeltaKind::Output,
        }
    }

    /// Appends released text to an item's text field and emits the delta.
    fn release(&self, index: usize, delta: String) {
        if delta.is_empty() {
            return;
        }
        let updated = self.with_item(index, |item| {
            let kind = Self::delta_kind(&item.body);
            let field = text_field(&mut item.body);
            if field.len() < MAX_TEXT {
                let room = MAX_TEXT - field.len();
                field.push_str(truncate(&delta, room));
            }
            (item.id.clone(), kind)
        });
        if let Some((item_id, kind)) = updated {
            self.emit(EventKind::ItemDelta { item_id, kind, delta, output_index: index });
        }
    }

    fn push(&mut self, index: usize, text: &str) {
        let delta = self.streams.entry(index).or_default().push(&self.redactor, text);
        self.release(index, delta);
    }

    /// Releases held-back text and stores the authoritative final text.
    fn close_text(&mut self, index: usize, final_text: Option<&str>) {
        let Some(mut stream) = self.streams.remove(&index) else {
            if let Some(text) = final_text {
                let redacted = self.redactor.redact(text);
                self.with_item(index, |item| *text_field(&mut item.body) = truncate(&redacted, MAX_TEXT).to_string());
            }
            return;
        };
        if let Some(text) = final_text {
            let complete = stream.raw_len == stream.raw.len();
            if complete && text.len() > stream.raw.len() && text.starts_with(&stream.raw) {
                let more = stream.push(&self.redactor, &text[stream.raw.len()..]);
                self.release(index, more);
            }
        }
        let rest = stream.flush(&self.redactor);
        self.release(index, rest);
        if let Some(text) = final_text {
            let redacted = self.redactor.redact(text);
            self.with_item(index, |item| *text_field(&mut item.body) = truncate(&redacted, MAX_TEXT).to_string());
        }
    }

    fn text_item(&mut self, native: &str, message: bool) -> usize {
        if let Some(index) = self.native.get(native) {
            return *index;
        }
        let body = if message {
            ItemBody::Message { text: String::new(), phase: None }
        } else {
            ItemBody::Reasoning { text: String::new() }
        };
        self.new_item(Some(native), body)
    }

    fn in_progress(&self, index: usize) -> bool {
        let state = self.session.lock();
        let item = state.turns.get(self.turn_index).and_then(|t| t.items.get(index));
        item.is_some_and(|i| i.status == ItemStatus::InProgress)
    }

    /// Applies one parsed event.
    pub fn handle(&mut self, event: Parsed) {
        match event {
            Parsed::Session { id } => {
                if !id.is_empty() {
                    self.session.lock().native_session_id = Some(id.clone());
                    self.session.record(&Record::Native { id });
                }
            }
            Parsed::TextDelta { item_id, text } => self.delta(&item_id, &text, true),
            Parsed::ReasoningDelta { item_id, text } => self.delta(&item_id, &text, false),
            Parsed::Message { item_id, text } => self.complete_text(&item_id, &text, true),
            Parsed::Reasoning { item_id, text } => self.complete_text(&item_id, &text, false),
            Parsed::ToolStart { item_id, kind, name, arguments, command, server } => {
                self.tool_start(&item_id, kind, &name, &arguments, command.as_deref(), server.as_deref());
            }
            Parsed::ToolOutput { item_id, text } => {
                if let Some(index) = self.native.get(&item_id).copied() {
                    if !text.is_empty() {
                        self.push(index, &text);
                    }
                }
            }
            Parsed::ToolEnd { item_id, ok, output, exit_code, error } => {
                self.tool_end(&item_id, ok, output.as_deref(), exit_code, error.as_deref());
            }
            Parsed::Usage(delta) => self.usage.get_or_insert_with(Usage::default).add(&delta),
            Parsed::Error { code, text, fatal } => {
                if fatal {
                    let code =
                        if code == "internal_error" { super::adapters::classify_text(&text).to_string() } else { code };
                    let message = self.redactor.redact(if text.is_empty() { "agent error" } else { &text });
                    self.fatal = Some(Failure::new(&code, truncate(&message, 2000)));
                }
            }
            Parsed::Result { ok, text, .. } => {
                self.result_ok = Some(ok);
                self.result_text = text;
            }
            Parsed::Log { text } => {
                self.logs += 1;
                if self.logs <= MAX_LOGS {
                    let text = self.redactor.redact(truncate(&text, MAX_LOG_LINE));
                    self.emit(EventKind::Log { text });
                }
            }
            Parsed::Subagent { op, ids, name, prompt, entry } => self.subagent(op, &ids, name, prompt, entry),
        }
    }

    fn delta(&mut self, native: &str, text: &str, message: bool) {
        let index = self.text_item(native, message);
        if !text.is_empty() && self.in_progress(index) {
            self.push(index, text);
        }
    }

    fn complete_text(&mut self, native: &str, text: &str, message: bool) {
        let existing = self.native.get(native).copied();
        let index = existing.unwrap_or_else(|| self.text_item(native, message));
        if existing.is_none() && !text.is_empty() {
            self.push(index, text);
        }
        let final_text = (existing.is_some() || !text.is_empty()).then_some(text);
        self.close_text(index, final_text);
        if message {
            self.saw_message = true;
            self.pending_message = Some(index);
        } else if let Some(item) = self.update_item(index, |item| item.status = ItemStatus::Completed) {
            self.emit(EventKind::ItemDone { item });
        }
    }

    fn tool_start(
        &mut self,
        native: &str,
        kind: ToolKind,
        name: &str,
        arguments: &Value,
        command: Option<&str>,
        server: Option<&str>,
    ) {
        let args = self.redactor.redact_value(arguments);
        let body = if kind == ToolKind::Command {
            ItemBody::CommandExecution {
                command: self.redactor.redact(command.unwrap_or("")),
                cwd: self.cwd.clone(),
                output: String::new(),
                exit_code: None,
                duration_ms: None,
                arguments: args,
            }
        } else {
            ItemBody::McpCall {
                kind,
                server_label: server.filter(|s| !s.is_empty()).unwrap_or(self.runtime).to_string(),
                name: if name.is_empty() { "tool".into() } else { name.to_string() },
                arguments: args,
                output: None,
                error: None,
            }
        };
        let index = self.new_item(Some(native), body);
        self.started.insert(index, Instant::now());
        let paths = reported_paths(kind, name, arguments);
        if !paths.is_empty() {
            self.file_items.insert(index, paths);
        }
    }

    fn tool_end(&mut self, native: &str, ok: bool, output: Option<&str>, exit_code: Option<i64>, error: Option<&str>) {
        let Some(index) = self.native.get(native).copied() else { return };
        self.close_text(index, output);
        let elapsed = self.started.remove(&index).map(|s| s.elapsed().as_millis() as u64);
        let error = error.filter(|e| !e.is_empty()).map(|e| truncate(&self.redactor.redact(e), 4000).to_string());
        let item = self.update_item(index, |item| {
            match &mut item.body {
                ItemBody::CommandExecution { exit_code: code, duration_ms, .. } => {
                    *code = exit_code;
                    *duration_ms = elapsed;
                }
                ItemBody::McpCall { error: err, output: out, .. } => {
                    if error.is_some() {
                        *err = error;
                    } else if !ok {
                        *err = Some(out.clone().unwrap_or_else(|| "tool call failed".into()));
                    }
                }
                _ => {}
            }
            item.status = if ok { ItemStatus::Completed } else { ItemStatus::Failed };
        });
        if ok {
            if let Some(paths) = self.file_items.remove(&index) {
                self.reported.extend(paths);
            }
        }
        if let Some(item) = item {
            self.emit(EventKind::ItemDone { item });
        }
    }

    fn subagent(
        &mut self,
        op: SubagentOp,
        ids: &[String],
        name: Option<String>,
        prompt: Option<String>,
        entry: Option<Value>,
    ) {
        let now = super::turn::now();
        let mut changed: Vec<SubagentRecord> = Vec::new();
        {
            let mut state = self.session.lock();
            for id in ids.iter().filter(|i| !i.is_empty()) {
                let position = match state.subagents.iter().position(|r| &r.id == id) {
                    Some(p) => p,
                    None => {
                        state.subagents.push(SubagentRecord {
                            id: id.clone(),
                            name: None,
                            instructions: None,
                            opened_at: now,
                            closed_at: None,
                            source: self.runtime.to_string(),
                            entries: Vec::new(),
                        });
                        state.subagents.len() - 1
                    }
                };
                let record = &mut state.subagents[position];
                if record.name.is_none() {
                    record.name = name.as_deref().map(|n| truncate(&self.redactor.redact(n), 256).to_string());
                }
                if record.instructions.is_none() {
                    record.instructions =
                        prompt.as_deref().map(|p| truncate(&self.redactor.redact(p), 8192).to_string());
                }
                if op == SubagentOp::Close && record.closed_at.is_none() {
                    record.closed_at = Some(now);
                }
                if let (SubagentOp::Event, Some(Value::Object(_))) = (op, &entry) {
                    if record.entries.len() < MAX_ENTRIES {
                        if let Some(entry) = &entry {
                            merge_entry(&mut record.entries, self.redactor.redact_value(entry));
                        }
                    }
                }
                changed.push(record.clone());
            }
        }
        for subagent in changed {
            self.session.record(&Record::Subagent { subagent });
        }
    }

    /// Closes open items and sets the turn's usage; a CLI that only gave a
    /// result text gets that text as its message.
    pub fn finalize(&mut self, aborted: bool) {
        if !self.saw_message && !aborted {
            if let Some(text) = self.result_text.clone().filter(|t| !t.is_empty()) {
                self.handle(Parsed::message("result-text", text));
            }
        }
        self.flush_pending_message(Phase::FinalAnswer);
        let open: Vec<usize> = {
            let state = self.session.lock();
            let items = state.turns.get(self.turn_index).map(|t| t.items.as_slice()).unwrap_or_default();
            items.iter().filter(|i| i.status == ItemStatus::InProgress).map(|i| i.output_index).collect()
        };
        for index in open {
            self.close_text(index, None);
            let item = self.update_item(index, |item| match &mut item.body {
                ItemBody::Message { phase, .. } => {
                    item.status = ItemStatus::Incomplete;
                    phase.get_or_insert(Phase::FinalAnswer);
                }
                ItemBody::Reasoning { .. } => item.status = ItemStatus::Incomplete,
                _ => item.status = ItemStatus::Failed,
            });
            if let Some(item) = item {
                self.emit(EventKind::ItemDone { item });
            }
        }
        let usage = self.usage.take();
        let mut state = self.session.lock();
        if let Some(turn) = state.turns.get_mut(self.turn_index).filter(|t| t.id == self.turn_id) {
            turn.usage = usage;
        }
    }
}

fn text_field(body: &mut ItemBody) -> &mut String {
    match body {
        ItemBody::Message { text, .. } | ItemBody::Reasoning { text } => text,
        ItemBody::CommandExecution { output, .. } => output,
        ItemBody::McpCall { output, .. } => output.get_or_insert_with(String::new),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agents::log::{EventLog, Read};
    use crate::agents::session::{SessionHeader, SessionMeta};
    use crate::agents::spec::AgentSpec;
    use crate::agents::turn::{TurnRecord, TurnStatus};

    fn session() -> Session {
        let header = SessionHeader {
            id: "agsess_t".into(),
            created_at: 0.0,
            spec: AgentSpec::default(),
            meta: SessionMeta::default(),
            metadata: serde_json::Map::new(),
        };
        let session = Session::new(&header, EventLog::in_memory(), None, std::env::temp_dir());
        let turn = TurnRecord {
            status: TurnStatus::InProgress,
            ..TurnRecord::queued("turn_t".into(), "agsess_t", "p".into())
        };
        session.lock().turns.push(turn);
        session
    }

    fn events(session: &Session) -> Vec<EventKind> {
        match session.log.read(0, usize::MAX) {
            Read::Events(events) => events.iter().map(|e| e.kind.clone()).collect(),
            other => panic!("in memory: {other:?}"),
        }
    }

    fn items(session: &Session) -> Vec<Item> {
        session.lock().turns[0].items.clone()
    }

    #[test]
    fn a_message_followed_by_work_is_commentary_and_the_last_one_the_answer() {
        let session = session();
        let mut b = TurnBuilder::new(&session, "turn_t", Redactor::default(), "codex", Some("/w".into()));
        b.handle(Parsed::message("m1", "Let me look."));
        b.handle(Parsed::ToolStart {
            item_id: "c".into(),
            kind: ToolKind::Command,
            name: "command_execution".into(),
            arguments: serde_json::json!({"command": "ls"}),
            command: Some("ls".into()),
            server: None,
        });
        b.handle(Parsed::ToolEnd {
            item_id: "c".into(),
            ok: false,
            output: Some("boom".into()),
            exit_code: Some(2),
            error: None,
        });
        b.handle(Parsed::message("m2", "Done."));
        b.handle(Parsed::Usage(crate::agents::parsed::UsageDelta {
            input_tokens: 3,
            output_tokens: 4,
            ..Default::default()
        }));
        b.finalize(false);
        let all = items(&session);
        assert!(matches!(&all[0].body, ItemBody::Message { phase: Some(Phase::Commentary), .. }));
        assert!(
            matches!(&all[1].body, ItemBody::CommandExecution { exit_code: Some(2), output, cwd: Some(_), .. } if output == "boom")
        );
        assert_eq!(all[1].status, ItemStatus::Failed);
        assert!(matches!(&all[2].body, ItemBody::Message { phase: Some(Phase::FinalAnswer), text } if text == "Done."));
        assert_eq!(session.lock().turns[0].usage.as_ref().map(|u| u.total_tokens), Some(7));
        let kinds: Vec<&str> = events(&session)
            .iter()
            .map(|e| match e {
                EventKind::ItemAdded { .. } => "added",
                EventKind::ItemDelta { .. } => "delta",
                EventKind::ItemDone { .. } => "done",
                _ => "other",
            })
            .collect();
        // The tool's output came whole with its end: no delta for it.
        assert_eq!(kinds, ["added", "delta", "done", "added", "done", "added", "delta", "done"]);
    }

    #[test]
    fn a_secret_split_across_deltas_never_leaks() {
        let session = session();
        let mut b = TurnBuilder::new(&session, "turn_t", Redactor::new(["topsecret-value"]), "qwen-code", None);
        for piece in ["the key is top", "secret-", "value, ok"] {
            b.handle(Parsed::text_delta("m", piece));
        }
        b.handle(Parsed::message("m", "the key is topsecret-value, ok"));
        b.finalize(false);
        let streamed: String = events(&session)
            .iter()
            .filter_map(|e| match e {
                EventKind::ItemDelta { delta, .. } => Some(delta.clone()),
                _ => None,
            })
            .collect();
        assert_eq!(streamed, "the key is [REDACTED], ok");
        assert!(
            matches!(&items(&session)[0].body, ItemBody::Message { text, .. } if text == "the key is [REDACTED], ok")
        );
    }

    #[test]
    fn an_aborted_turn_leaves_no_item_in_progress_and_a_bare_result_becomes_the_answer() {
        let session = session();
        let mut b = TurnBuilder::new(&session, "turn_t", Redactor::default(), "command", None);
        b.handle(Parsed::text_delta("m", "half"));
        b.handle(Parsed::tool_start("t", ToolKind::Mcp, "search", serde_json::Value::Null));
        b.finalize(true);
        let all = items(&session);
        assert_eq!((all[0].status, all[1].status), (ItemStatus::Incomplete, ItemStatus::Failed));
        assert!(matches!(&all[0].body, ItemBody::Message { text, phase: Some(Phase::FinalAnswer) } if text == "half"));

        let session = super::tests::session();
        let mut b = TurnBuilder::new(&session, "turn_t", Redactor::default(), "command", None);
        b.handle(Parsed::result(true, Some("only a result".into()), None));
        b.finalize(false);
        assert!(
            matches!(&items(&session)[0].body, ItemBody::Message { text, phase: Some(Phase::FinalAnswer) } if text == "only a result")
        );
        let mut b = TurnBuilder::new(&session, "turn_t", Redactor::default(), "command", None);
        b.handle(Parsed::result(false, Some("quota gone".into()), None));
        assert_eq!(b.result_failure(), Some(Failure::new("internal_error", "quota gone")));
    }
}
