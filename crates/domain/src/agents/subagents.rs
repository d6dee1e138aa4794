//! Subagents, built only from ids the CLIs themselves emitted.
//!
//! Codex: `collab_tool_call` items name child thread ids; the parent's own
//! rollout file (under `CODEX_HOME/sessions`) can name more. A child's turns
//! and items are read from that child's rollout, and only for ids the
//! session's stream or rollout named: `CODEX_HOME` is never scanned for
//! unrelated threads. Stream-json CLIs (Qwen Code, Claude Code) tag every
//! subagent message with `parent_tool_use_id`; those entries are kept and
//! grouped into turns at each assistant message.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// Entries kept per subagent.
pub const MAX_ENTRIES: usize = 2000;
const MAX_ROLLOUT_BYTES: u64 = 16 * 1024 * 1024;
const MAX_TEXT: usize = 64 * 1024;
const ID_KEYS: [&str; 3] = ["receiver_thread_ids", "receiver_thread_id", "new_thread_id"];

/// One subagent of a session.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SubagentRecord {
    /// The id the CLI gave it.
    pub id: String,
    /// Its name, if the CLI gave one.
    pub name: Option<String>,
    /// Its instructions, if the CLI gave them.
    pub instructions: Option<String>,
    /// When it was first seen.
    pub opened_at: f64,
    /// When the CLI closed it.
    pub closed_at: Option<f64>,
    /// The runtime that reported it.
    pub source: String,
    /// Its stream entries (`kind`: message, reasoning, tool_call).
    #[serde(default)]
    pub entries: Vec<Value>,
}

/// One turn of a subagent.
#[derive(Debug, Clone, PartialEq)]
pub struct SubagentTurn {
    /// The CLI's turn id, or `turn_<n>_<subagent id>`.
    pub id: String,
    /// Its entries.
    pub entries: Vec<Value>,
    /// Whether it ended (an assistant message, or a rollout turn).
    pub complete: bool,
}

/// How a subagent's turns were found (a difference code of the wire).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TurnSource {
    /// Read from the child's Codex rollout.
    Rollout,
    /// Groups of the tagged parent stream.
    ParentStream,
}

/// Appends `entry` to `entries`; a tool result is folded into its call.
pub fn merge_entry(entries: &mut Vec<Value>, entry: Value) {
    if entry.get("kind").and_then(Value::as_str) == Some("tool_result") {
        let call = entry.get("call_id").cloned();
        for existing in entries.iter_mut().rev() {
            if existing.get("kind").and_then(Value::as_str) == Some("tool_call")
                && existing.get("call_id") == call.as_ref()
            {
                if let Some(map) = existing.as_object_mut() {
                    map.insert("output".into(), entry.get("output").cloned().unwrap_or(Value::Null));
                    map.insert("ok".into(), entry.get("ok").cloned().unwrap_or(Value::Bool(true)));
                }
                return;
            }
        }
        return;
    }
    if entries.len() < MAX_ENTRIES {
        entries.push(entry);
    }
}

fn valid_id(id: &str) -> bool {
    let len = id.len();
    (6..=96).contains(&len)
        && id.bytes().next().is_some_and(|b| b.is_ascii_alphanumeric())
        && id.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b':' | b'-'))
}

/// Where Codex keeps rollouts for the daemon's children.
pub fn codex_home(child_env: &std::collections::BTreeMap<String, String>) -> Option<PathBuf> {
    match child_env.get("CODEX_HOME") {
        Some(home) if !home.is_empty() => Some(PathBuf::from(home)),
        _ => child_env.get("HOME").map(|h| Path::new(h).join(".codex")),
    }
}

/// The rollout file of thread `id` under `home/sessions` (not following symlinks).
fn find_rollout(home: &Path, id: &str) -> Option<PathBuf> {
    if !valid_id(id) {
        return None;
    }
    let suffix = format!("-{id}.jsonl");
    let mut found: Vec<PathBuf> = Vec::new();
    let mut stack = vec![home.join("sessions")];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        for entry in entries.flatten() {
            let Ok(kind) = entry.file_type() else { continue };
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if kind.is_dir() {
                stack.push(entry.path());
            } else if kind.is_file() && name.starts_with("rollout-") && name.ends_with(&suffix) {
                found.push(entry.path());
            }
        }
    }
    found.sort();
    found.into_iter().next()
}

fn read_rows(path: &Path) -> Vec<Map<String, Value>> {
    let Ok(file) = std::fs::File::open(path) else { return Vec::new() };
    if file.metadata().map_or(true, |m| m.len() > MAX_ROLLOUT_BYTES) {
        return Vec::new();
    }
    BufReader::new(file)
        .lines()
        .map_while(Result::ok)
        .filter_map(|line| match serde_json::from_str::<Value>(&line) {
            Ok(Value::Object(map)) => Some(map),
            _ => None,
        })
        .collect()
}

fn named_ids(node: &Value, out: &mut Vec<String>) {
    match node {
        Value::Object(map) => {
            for (key, value) in map {
                if ID_KEYS.contains(&key.as_str()) {
                    let values = match value {
                        Value::Array(items) => items.iter().collect(),
                        other => vec![other],
                    };
                    out.extend(
                        values.into_iter().filter_map(Value::as_str).filter(|v| valid_id(v)).map(str::to_string),
                    );
                } else {
                    named_ids(value, out);
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|v| named_ids(v, out)),
        _ => {}
    }
}

/// Child thread ids named in the parent thread's own rollout.
pub fn rollout_child_ids(home: &Path, parent: &str) -> Vec<String> {
    let Some(path) = find_rollout(home, parent) else { return Vec::new() };
    let mut found = Vec::new();
    for row in read_rows(&path) {
        named_ids(&Value::Object(row), &mut found);
    }
    let mut unique: Vec<String> = Vec::new();
    for id in found {
        if id != parent && !unique.contains(&id) {
            unique.push(id);
        }
    }
    unique
}

fn cap(text: &str) -> String {
    let mut end = text.len().min(MAX_TEXT);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_string()
}

fn content_text(content: Option<&Value>) -> String {
    match content {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => parts.iter().filter_map(|p| p.get("text").and_then(Value::as_str)).collect(),
        _ => String::new(),
    }
}

/// The turns of a Codex child thread, from its rollout rows.
fn rollout_turns(id: &str, rows: &[Map<String, Value>]) -> Vec<SubagentTurn> {
    let mut turns: Vec<SubagentTurn> = Vec::new();
    let start = |turns: &mut Vec<SubagentTurn>, native: Option<&str>| {
        let id = native.map_or_else(|| format!("turn_{}_{id}", turns.len() + 1), str::to_string);
        turns.push(SubagentTurn { id, entries: Vec::new(), complete: true });
    };
    for row in rows {
        let Some(payload) = row.get("payload").and_then(Value::as_object) else { continue };
        let kind = row.get("type").and_then(Value::as_str).unwrap_or("");
        let ptype = payload.get("type").and_then(Value::as_str).unwrap_or("");
        if kind == "turn_context" || (kind == "event_msg" && matches!(ptype, "task_started" | "turn_started")) {
            let native = payload.get("turn_id").and_then(Value::as_str);
            match turns.last_mut() {
                Some(last) if last.entries.is_empty() => {
                    if let Some(native) = native {
                        last.id = native.to_string();
                    }
                }
                _ => start(&mut turns, native),
            }
            continue;
        }
        if kind != "response_item" {
            continue;
        }
        if turns.is_empty() {
            start(&mut turns, None);
        }
        let Some(current) = turns.last_mut() else { continue };
        let entries = &mut current.entries;
        match ptype {
            "message" => {
                let role = payload.get("role").and_then(Value::as_str).unwrap_or("");
                let text = content_text(payload.get("content"));
                if matches!(role, "user" | "assistant") && !text.is_empty() {
                    entries.push(serde_json::json!({"kind": "message", "role": role, "text": cap(&text)}));
                }
            }
            "reasoning" => {
                let text = content_text(payload.get("summary"));
                if !text.is_empty() {
                    entries.push(serde_json::json!({"kind": "reasoning", "role": "assistant", "text": cap(&text)}));
                }
            }
            "function_call" => {
                let raw = payload.get("arguments").cloned().unwrap_or(Value::Null);
                let arguments = match &raw {
                    Value::String(s) => serde_json::from_str(s).unwrap_or(raw),
                    _ => raw,
                };
                entries.push(serde_json::json!({
                    "kind": "tool_call", "role": "assistant",
                    "call_id": payload.get("call_id").and_then(Value::as_str).unwrap_or(""),
                    "name": payload.get("name").and_then(Value::as_str).unwrap_or("tool"),
                    "arguments": arguments, "output": null, "ok": null,
                }));
            }
            "function_call_output" => {
                let output = match payload.get("output") {
                    Some(Value::String(s)) => s.clone(),
                    Some(other) => other.to_string(),
                    None => "null".into(),
                };
                let call = payload.get("call_id").cloned();
                merge_entry(
                    entries,
                    serde_json::json!({"kind": "tool_result", "call_id": call, "output": cap(&output), "ok": true}),
                );
            }
            _ => {}
        }
    }
    turns
}

/// Groups a tagged parent stream: a turn ends at each assistant message.
fn stream_turns(id: &str, entries: &[Value]) -> Vec<SubagentTurn> {
    let mut turns: Vec<SubagentTurn> = Vec::new();
    let mut open = false;
    for entry in entries {
        if !open {
            turns.push(SubagentTurn {
                id: format!("turn_{}_{id}", turns.len() + 1),
                entries: Vec::new(),
                complete: false,
            });
            open = true;
        }
        if let Some(current) = turns.last_mut() {
            current.entries.push(entry.clone());
            let assistant_message = entry.get("kind").and_then(Value::as_str) == Some("message")
                && entry.get("role").and_then(Value::as_str) == Some("assistant");
            if assistant_message {
                current.complete = true;
                open = false;
            }
        }
    }
    turns
}

/// The turns of one subagent and how they were found (reads files: blocking).
pub fn turns_for(record: &SubagentRecord, codex_home: Option<&Path>) -> (Vec<SubagentTurn>, TurnSource) {
    if record.source == "codex" {
        let rows =
            codex_home.and_then(|home| find_rollout(home, &record.id)).map(|p| read_rows(&p)).unwrap_or_default();
        return (rollout_turns(&record.id, &rows), TurnSource::Rollout);
    }
    (stream_turns(&record.id, &record.entries), TurnSource::ParentStream)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn tool_results_fold_into_their_calls() {
        let mut entries = Vec::new();
        merge_entry(&mut entries, json!({"kind": "tool_call", "call_id": "c1", "output": null, "ok": null}));
        merge_entry(&mut entries, json!({"kind": "tool_result", "call_id": "c1", "output": "done", "ok": false}));
        assert_eq!(entries, [json!({"kind": "tool_call", "call_id": "c1", "output": "done", "ok": false})]);
    }

    #[test]
    fn a_parent_stream_splits_at_assistant_messages() {
        let entries = [
            json!({"kind": "tool_call", "call_id": "c"}),
            json!({"kind": "message", "role": "assistant", "text": "one"}),
            json!({"kind": "message", "role": "user", "text": "two"}),
        ];
        let turns = stream_turns("sub_123456", &entries);
        assert_eq!(turns.len(), 2);
        assert_eq!(turns[0].id, "turn_1_sub_123456");
        assert!(turns[0].complete && !turns[1].complete);
    }

    #[test]
    fn codex_rollouts_give_child_ids_and_turns() {
        let home = tempfile::tempdir().expect("home");
        let day = home.path().join("sessions/2026/11/30");
        std::fs::create_dir_all(&day).expect("dirs");
        let parent = "0199aaaa-0000-7000-8000-000000000001";
        let child = "0199aaaa-0000-7000-8000-000000000002";
        let parent_rows =
            format!("{}\n", json!({"type": "response_item", "payload": {"receiver_thread_ids": [child]}}));
        std::fs::write(day.join(format!("rollout-2026-11-30T00-00-00-{parent}.jsonl")), parent_rows).expect("write");
        let child_rows = [
            json!({"type": "turn_context", "payload": {"turn_id": "t-1"}}),
            json!({"type": "response_item", "payload": {"type": "message", "role": "assistant", "content": [{"text": "hi"}]}}),
            json!({"type": "response_item", "payload": {"type": "function_call", "call_id": "c", "name": "shell", "arguments": "{\"cmd\":\"ls\"}"}}),
            json!({"type": "response_item", "payload": {"type": "function_call_output", "call_id": "c", "output": "a.txt"}}),
        ];
        let text: String = child_rows.iter().map(|r| format!("{r}\n")).collect();
        std::fs::write(day.join(format!("rollout-2026-11-30T00-00-01-{child}.jsonl")), text).expect("write");
        assert_eq!(rollout_child_ids(home.path(), parent), [child]);
        let record = SubagentRecord {
            id: child.into(),
            name: None,
            instructions: None,
            opened_at: 0.0,
            closed_at: None,
            source: "codex".into(),
            entries: Vec::new(),
        };
        let (turns, source) = turns_for(&record, Some(home.path()));
        assert_eq!(source, TurnSource::Rollout);
        assert_eq!(turns.len(), 1);
        assert_eq!(turns[0].id, "t-1");
        assert_eq!(turns[0].entries[1]["arguments"], json!({"cmd": "ls"}));
        assert_eq!(turns[0].entries[1]["output"], "a.txt");
        assert!(find_rollout(home.path(), "../etc").is_none());
    }
}
