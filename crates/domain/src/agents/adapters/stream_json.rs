//! Parser of the Claude-Code-style `--output-format stream-json` protocol,
//! which Qwen Code's headless mode speaks too.

use std::collections::{HashMap, HashSet, VecDeque};

use serde_json::{json, Map, Value};

use super::{classify_text, Parser};
use crate::agents::parsed::{json_object, str_at, u64_at, Parsed, SubagentOp, ToolKind, UsageDelta};

/// Text of a message or tool-result `content` (a string or text blocks).
fn content_text(content: Option<&Value>) -> String {
    match content {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(blocks)) => blocks
            .iter()
            .filter_map(|b| match b {
                Value::Object(o) if str_at(o, "type") == "text" => Some(str_at(o, "text").to_string()),
                Value::String(s) => Some(s.clone()),
                _ => None,
            })
            .collect(),
        None | Some(Value::Null) => String::new(),
        Some(other) => other.to_string(),
    }
}

/// A `tool_start` for a `tool_use` block: `Bash` is a command, `mcp__server__tool` an MCP call.
pub fn tool_event(block: &Map<String, Value>) -> Parsed {
    let name = Some(str_at(block, "name")).filter(|n| !n.is_empty()).unwrap_or("tool");
    let args = block.get("input").cloned().unwrap_or(Value::Null);
    let id = str_at(block, "id").to_string();
    if name == "Bash" || name == "run_shell_command" {
        if let Some(command) = args.get("command").and_then(Value::as_str) {
            let command = command.to_string();
            return Parsed::ToolStart {
                item_id: id,
                kind: ToolKind::Command,
                name: "command_execution".into(),
                arguments: args,
                command: Some(command),
                server: None,
            };
        }
    }
    if let Some(rest) = name.strip_prefix("mcp__") {
        if let Some((server, tool)) = rest.split_once("__") {
            return Parsed::ToolStart {
                item_id: id,
                kind: ToolKind::Mcp,
                name: tool.into(),
                arguments: args,
                command: None,
                server: Some(server.into()),
            };
        }
    }
    Parsed::tool_start(id, ToolKind::Other, name, args)
}

/// Parser of stream-json lines.
#[derive(Debug, Default)]
pub struct StreamJsonParser {
    message_id: Option<String>,
    streamed_text: HashMap<String, VecDeque<String>>,
    streamed_thinking: HashMap<String, VecDeque<String>>,
    blocks: HashMap<u64, String>,
    counter: u64,
    seen_tools: HashSet<String>,
    agent_tools: HashMap<String, (Option<String>, Option<String>)>,
    subagents_seen: HashSet<String>,
}

impl Parser for StreamJsonParser {
    fn feed(&mut self, line: &str, out: &mut Vec<Parsed>) {
        if line.trim().is_empty() {
            return;
        }
        let Some(obj) = json_object(line) else {
            out.push(Parsed::log(line));
            return;
        };
        let kind = str_at(&obj, "type");
        let parent = obj.get("parent_tool_use_id").filter(|p| !p.is_null() && p.as_str() != Some(""));
        if let (Some(parent), "assistant" | "user" | "stream_event") = (parent, kind) {
            let parent = parent.as_str().map_or_else(|| parent.to_string(), str::to_string);
            return self.subagent(&obj, &parent, out);
        }
        match kind {
            "system"
                if matches!(str_at(&obj, "subtype"), "init" | "session_start")
                    && !str_at(&obj, "session_id").is_empty() =>
            {
                out.push(Parsed::Session { id: str_at(&obj, "session_id").into() });
            }
            "stream_event" => self.stream_event(&obj, out),
            "assistant" => self.assistant(&obj, out),
            "user" => self.user(&obj, out),
            "result" => result(&obj, out),
            _ => {}
        }
    }
}

impl StreamJsonParser {
    fn next_id(&mut self, prefix: &str) -> String {
        self.counter += 1;
        format!("{prefix}:{}", self.counter)
    }

    fn subagent(&mut self, obj: &Map<String, Value>, parent: &str, out: &mut Vec<Parsed>) {
        if str_at(obj, "type") == "stream_event" {
            return;
        }
        let (name, prompt) = self.agent_tools.get(parent).cloned().unwrap_or_default();
        let role = if str_at(obj, "type") == "user" { "user" } else { "assistant" };
        let content = obj.get("message").and_then(|m| m.get("content"));
        let before = out.len();
        let mut emit = |entry: Value| {
            out.push(Parsed::Subagent {
                op: SubagentOp::Event,
                ids: vec![parent.to_string()],
                name: name.clone(),
                prompt: prompt.clone(),
                entry: Some(entry),
            });
        };
        match content {
            Some(Value::String(text)) if !text.is_empty() => {
                emit(json!({"kind": "message", "role": role, "text": text}))
            }
            Some(Value::Array(blocks)) => {
                for block in blocks.iter().filter_map(Value::as_object) {
                    match str_at(block, "type") {
                        "text" if !str_at(block, "text").is_empty() => {
                            emit(json!({"kind": "message", "role": role, "text": str_at(block, "text")}));
                        }
                        "thinking" if !str_at(block, "thinking").is_empty() => {
                            emit(json!({"kind": "reasoning", "role": "assistant", "text": str_at(block, "thinking")}));
                        }
                        "tool_use" => emit(json!({
                            "kind": "tool_call", "role": "assistant", "call_id": str_at(block, "id"),
                            "name": Some(str_at(block, "name")).filter(|n| !n.is_empty()).unwrap_or("tool"),
                            "arguments": block.get("input").cloned().unwrap_or(Value::Null), "output": null, "ok": null,
                        })),
                        "tool_result" => emit(json!({
                            "kind": "tool_result", "call_id": str_at(block, "tool_use_id"),
                            "output": content_text(block.get("content")),
                            "ok": !block.get("is_error").and_then(Value::as_bool).unwrap_or(false),
                        })),
                        _ => {}
                    }
                }
            }
            _ => {}
        }
        if out.len() == before {
            out.push(Parsed::Subagent { op: SubagentOp::Open, ids: vec![parent.into()], name, prompt, entry: None });
        }
        self.subagents_seen.insert(parent.to_string());
    }

    fn stream_event(&mut self, obj: &Map<String, Value>, out: &mut Vec<Parsed>) {
        let Some(event) = obj.get("event").and_then(Value::as_object) else { return };
        let et = str_at(event, "type");
        if et == "message_start" {
            let id = event.get("message").and_then(|m| m.get("id")).and_then(Value::as_str).map(str::to_string);
            self.message_id = Some(id.unwrap_or_else(|| self.next_id("msg")));
            self.blocks.clear();
            return;
        }
        let mid = self.message_id.clone().unwrap_or_else(|| "msg".into());
        let index = u64_at(event, "index");
        let item_id = format!("{mid}:{index}");
        match et {
            "content_block_start" => {
                let btype =
                    event.get("content_block").and_then(|b| b.get("type")).and_then(Value::as_str).unwrap_or("");
                self.blocks.insert(index, item_id.clone());
                match btype {
                    "text" => self.streamed_text.entry(mid).or_default().push_back(item_id),
                    "thinking" => self.streamed_thinking.entry(mid).or_default().push_back(item_id),
                    _ => {}
                }
            }
            "content_block_delta" => {
                let Some(delta) = event.get("delta").and_then(Value::as_object) else { return };
                let item_id = self.blocks.get(&index).cloned().unwrap_or(item_id);
                match str_at(delta, "type") {
                    "text_delta" if !str_at(delta, "text").is_empty() => {
                        out.push(Parsed::text_delta(item_id, str_at(delta, "text")));
                    }
                    "thinking_delta" if !str_at(delta, "thinking").is_empty() => {
                        out.push(Parsed::ReasoningDelta { item_id, text: str_at(delta, "thinking").into() });
                    }
                    _ => {}
                }
            }
            _ => {}
        }
    }

    fn assistant(&mut self, obj: &Map<String, Value>, out: &mut Vec<Parsed>) {
        let Some(message) = obj.get("message").and_then(Value::as_object) else { return };
        let mid = Some(str_at(message, "id")).filter(|m| !m.is_empty()).unwrap_or("msg").to_string();
        let Some(blocks) = message.get("content").and_then(Value::as_array) else { return };
        for block in blocks.iter().filter_map(Value::as_object) {
            match str_at(block, "type") {
                "text" => {
                    let queued = self.streamed_text.get_mut(&mid).and_then(VecDeque::pop_front);
                    let id = queued.unwrap_or_else(|| self.next_id(&mid));
                    out.push(Parsed::message(id, str_at(block, "text")));
                }
                "thinking" => {
                    let queued = self.streamed_thinking.get_mut(&mid).and_then(VecDeque::pop_front);
                    let id = queued.unwrap_or_else(|| self.next_id(&mid));
                    if !str_at(block, "thinking").is_empty() {
                        out.push(Parsed::Reasoning { item_id: id, text: str_at(block, "thinking").into() });
                    }
                }
                "tool_use" => {
                    let id = str_at(block, "id").to_string();
                    if !id.is_empty() && self.seen_tools.insert(id.clone()) {
                        self.note_agent_tool(&id, block);
                        out.push(tool_event(block));
                    }
                }
                _ => {}
            }
        }
    }

    fn note_agent_tool(&mut self, id: &str, block: &Map<String, Value>) {
        let name = str_at(block, "name").to_ascii_lowercase();
        let Some(args) = block.get("input").and_then(Value::as_object) else { return };
        if name == "agent" || name == "task" {
            let label =
                [str_at(args, "description"), str_at(args, "subagent_type")].into_iter().find(|s| !s.is_empty());
            let prompt = Some(str_at(args, "prompt")).filter(|p| !p.is_empty());
            self.agent_tools.insert(id.to_string(), (label.map(str::to_string), prompt.map(str::to_string)));
        }
    }

    fn user(&mut self, obj: &Map<String, Value>, out: &mut Vec<Parsed>) {
        let content = obj.get("message").and_then(|m| m.get("content")).and_then(Value::as_array);
        for block in content.into_iter().flatten().filter_map(Value::as_object) {
            if str_at(block, "type") != "tool_result" {
                continue;
            }
            let ok = !block.get("is_error").and_then(Value::as_bool).unwrap_or(false);
            let text = content_text(block.get("content"));
            let id = str_at(block, "tool_use_id").to_string();
            if self.subagents_seen.contains(&id) {
                out.push(Parsed::Subagent {
                    op: SubagentOp::Close,
                    ids: vec![id.clone()],
                    name: None,
                    prompt: None,
                    entry: None,
                });
            }
            let error = (!ok).then(|| text.clone());
            out.push(Parsed::ToolEnd { item_id: id, ok, output: Some(text), exit_code: None, error });
        }
    }
}

fn result(obj: &Map<String, Value>, out: &mut Vec<Parsed>) {
    if let Some(usage) = obj.get("usage").and_then(Value::as_object) {
        let cache_read = u64_at(usage, "cache_read_input_tokens");
        out.push(Parsed::Usage(UsageDelta {
            input_tokens: u64_at(usage, "input_tokens") + u64_at(usage, "cache_creation_input_tokens") + cache_read,
            output_tokens: u64_at(usage, "output_tokens"),
            cached_tokens: cache_read,
            reasoning_tokens: 0,
            cost_usd: obj.get("total_cost_usd").and_then(Value::as_f64),
        }));
    }
    let subtype = obj.get("subtype").and_then(Value::as_str);
    let text = obj.get("result").and_then(Value::as_str).map(str::to_string);
    let is_error = obj.get("is_error").and_then(Value::as_bool).unwrap_or(false);
    let ok = !is_error && matches!(subtype, None | Some("success"));
    if !ok {
        let detail = text.clone().or_else(|| subtype.map(str::to_string)).unwrap_or_else(|| "agent error".into());
        let code = match subtype {
            Some("error_max_turns" | "error_max_budget_usd" | "error_max_session_turns") => "session_budget_exceeded",
            _ => classify_text(text.as_deref().or(subtype).unwrap_or("")),
        };
        out.push(Parsed::error(code, detail, true));
    }
    out.push(Parsed::result(ok, text, subtype.map(str::to_string)));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(lines: &[&str]) -> Vec<Parsed> {
        crate::agents::adapters::parse_lines(&mut StreamJsonParser::default(), lines)
    }

    #[test]
    fn streamed_text_keeps_its_item_and_tools_become_calls() {
        let out = parse(&[
            r#"{"type":"system","subtype":"init","session_id":"s-1"}"#,
            r#"{"type":"stream_event","event":{"type":"message_start","message":{"id":"m1"}}}"#,
            r#"{"type":"stream_event","event":{"type":"content_block_start","index":0,"content_block":{"type":"text"}}}"#,
            r#"{"type":"stream_event","event":{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hel"}}}"#,
            r#"{"type":"assistant","message":{"id":"m1","content":[{"type":"text","text":"Hello"},{"type":"tool_use","id":"t1","name":"Bash","input":{"command":"ls"}}]}}"#,
            r#"{"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"t1","content":"a.txt","is_error":false}]}}"#,
            r#"{"type":"result","subtype":"success","result":"Hello","usage":{"input_tokens":3,"cache_read_input_tokens":1,"output_tokens":2}}"#,
        ]);
        assert_eq!(out[0], Parsed::Session { id: "s-1".into() });
        assert_eq!(out[1], Parsed::text_delta("m1:0", "Hel"));
        assert_eq!(out[2], Parsed::message("m1:0", "Hello"));
        assert!(matches!(&out[3], Parsed::ToolStart { kind: ToolKind::Command, command: Some(c), .. } if c == "ls"));
        assert!(matches!(&out[4], Parsed::ToolEnd { ok: true, output: Some(o), .. } if o == "a.txt"));
        assert!(matches!(&out[5], Parsed::Usage(u) if u.input_tokens == 4 && u.cached_tokens == 1));
        assert_eq!(out[6], Parsed::result(true, Some("Hello".into()), Some("success".into())));
    }

    #[test]
    fn errors_subagents_and_mcp_tools() {
        let out = parse(&[
            r#"{"type":"assistant","message":{"id":"m","content":[{"type":"tool_use","id":"a1","name":"Task","input":{"description":"helper","prompt":"do it"}},{"type":"tool_use","id":"x","name":"mcp__docs__search","input":{}}]}}"#,
            r#"{"type":"assistant","parent_tool_use_id":"a1","message":{"content":[{"type":"text","text":"sub says"}]}}"#,
            r#"{"type":"result","subtype":"error_max_turns","is_error":true}"#,
        ]);
        assert!(
            matches!(&out[1], Parsed::ToolStart { kind: ToolKind::Mcp, server: Some(s), name, .. } if s == "docs" && name == "search")
        );
        assert!(matches!(&out[2], Parsed::Subagent { op: SubagentOp::Event, name: Some(n), .. } if n == "helper"));
        assert_eq!(out[3], Parsed::error("session_budget_exceeded", "error_max_turns", true));
    }
}
