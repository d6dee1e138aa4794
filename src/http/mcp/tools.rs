//! The tool table: each tool's name, the endpoint whose rule decides it,
//! its description and input schema (written for a model: concise, limits
//! stated), and the dispatch to its body.

use std::borrow::Cow;
use std::sync::Arc;

use abx_wire::endpoints::{self, Endpoint};
use rmcp::model::ToolAnnotations;
use rmcp::ErrorData;
use serde_json::{json, Map, Value};

use super::call::{Ctx, Outcome};
use super::{code, files, process, system};

/// One tool.
#[derive(Debug)]
pub struct Tool {
    /// The tool's name.
    pub name: &'static str,
    /// The endpoint whose rule decides it (its scopes, switches, limits, paths).
    pub endpoint: &'static str,
    /// A second endpoint whose rule must allow it too (`edit` reads and writes).
    pub also: Option<&'static str>,
    /// What a model reads.
    pub description: &'static str,
    /// Properties of the input schema, and the required ones.
    schema: fn() -> (Value, &'static [&'static str]),
    /// Whether it changes nothing.
    read_only: bool,
}

impl Tool {
    /// The tool's endpoints: its own, then its second one.
    pub fn endpoints(&self) -> impl Iterator<Item = &'static Endpoint> {
        [Some(self.endpoint), self.also].into_iter().flatten().filter_map(endpoints::find)
    }

    /// Whether a call may be answered on its HTTP request's own task
    /// (`direct.rs`): quick, bounded work (a file of at most the
    /// read, write or edit limit, one directory entry) that reports no progress and
    /// watches no cancellation, so nothing of the SDK's session stream is
    /// needed to answer it.
    pub fn direct(&self) -> bool {
        matches!(self.name, "read" | "write" | "edit" | "stat" | "mkdir")
    }

    /// The tool as `tools/list` shows it.
    pub fn describe(&self) -> rmcp::model::Tool {
        let (properties, required) = (self.schema)();
        let schema =
            json!({"type": "object", "properties": properties, "required": required, "additionalProperties": false});
        let schema: Map<String, Value> = match schema {
            Value::Object(map) => map,
            _ => Map::new(),
        };
        let annotations = ToolAnnotations::new().read_only(self.read_only).destructive(!self.read_only);
        rmcp::model::Tool::new(Cow::Borrowed(self.name), Cow::Borrowed(self.description), Arc::new(schema))
            .with_annotations(annotations)
    }
}

/// The tool named `name`.
pub fn find(name: &str) -> Option<&'static Tool> {
    TOOLS.iter().find(|t| t.name == name)
}

/// Runs `tool` with `arguments`; `Err` for arguments that do not fit its schema.
pub async fn call(tool: &Tool, ctx: &Ctx<'_>, arguments: Map<String, Value>) -> Result<Outcome, ErrorData> {
    let outcome = match tool.name {
        "read" => files::read(ctx, arguments).await?,
        "write" => files::write(ctx, arguments).await?,
        "edit" => files::edit(ctx, arguments).await?,
        "list" => files::list(ctx, arguments).await?,
        "stat" => files::stat(ctx, arguments).await?,
        "find" => files::find(ctx, arguments).await?,
        "grep" => files::grep(ctx, arguments).await?,
        "move" => files::rename(ctx, arguments).await?,
        "delete" => files::delete(ctx, arguments).await?,
        "mkdir" => files::mkdir(ctx, arguments).await?,
        "run" => process::run(ctx, arguments).await?,
        "start" => process::start(ctx, arguments).await?,
        "output" => process::output(ctx, arguments).await?,
        "stdin" => process::stdin(ctx, arguments).await?,
        "signal" => process::signal(ctx, arguments).await?,
        "processes" => process::list(ctx, arguments).await?,
        "run_code" => code::run(ctx, arguments).await?,
        "code_contexts" => code::list(ctx, arguments).await?,
        "code_context_create" => code::create(ctx, arguments).await?,
        "code_context_restart" => code::restart(ctx, arguments).await?,
        "system_info" => system::info(ctx, arguments).await?,
        "system_metrics" => system::metrics(ctx, arguments).await?,
        _ => return Err(ErrorData::invalid_params(format!("Unknown tool: {}", tool.name), None)),
    };
    Ok(outcome)
}

const fn tool(
    name: &'static str,
    endpoint: &'static str,
    read_only: bool,
    description: &'static str,
    schema: fn() -> (Value, &'static [&'static str]),
) -> Tool {
    Tool { name, endpoint, also: None, description, schema, read_only }
}

const PATH: &str = "Path, absolute or relative to the base directory.";

/// Every tool, in the order `tools/list` gives them.
pub static TOOLS: &[Tool] = &[
    tool(
        "read",
        "files_content_read",
        true,
        "Read a text file, optionally a range of lines (offset is the first line, 1-based). At most \
         256 KiB of text per call; the result says where it stopped so you can continue. Images come \
         back as images, other binary files as base64 (at most 1 MiB).",
        || {
            let p = json!({
                "path": {"type": "string", "description": PATH},
                "offset": {"type": "integer", "minimum": 1, "description": "First line to return (default 1)."},
                "limit": {"type": "integer", "minimum": 1, "description": "Lines to return (default: to the end, within 256 KiB)."}
            });
            (p, &["path"])
        },
    ),
    tool(
        "write",
        "files_content_write",
        false,
        "Write a text file (created with its parent directories, or replaced), atomically.",
        || {
            let p = json!({
                "path": {"type": "string", "description": PATH},
                "content": {"type": "string", "description": "The whole new content."},
                "overwrite": {"type": "boolean", "description": "Replace an existing file (default true)."}
            });
            (p, &["path", "content"])
        },
    ),
    Tool {
        also: Some("files_content_read"),
        ..tool(
            "edit",
            "files_content_write",
            false,
            "Replace an exact string in a text file, atomically. old_string must occur exactly once \
             unless replace_all is true; include enough surrounding lines to make it unique. Files up \
             to 10 MiB.",
            || {
                let p = json!({
                    "path": {"type": "string", "description": PATH},
                    "old_string": {"type": "string", "description": "The exact text to replace (not empty)."},
                    "new_string": {"type": "string", "description": "The replacement."},
                    "replace_all": {"type": "boolean", "description": "Replace every occurrence (default false)."}
                });
                (p, &["path", "old_string", "new_string"])
            },
        )
    },
    tool(
        "list",
        "files_list",
        true,
        "List a directory's entries (name, type, size, modified). recursive descends up to max_depth \
         (default 3); at most max_entries entries (default 1000).",
        || {
            let p = json!({
                "path": {"type": "string", "description": PATH},
                "recursive": {"type": "boolean"},
                "max_depth": {"type": "integer", "minimum": 0},
                "max_entries": {"type": "integer", "minimum": 1}
            });
            (p, &["path"])
        },
    ),
    tool("stat", "files_stat", true, "Metadata of one path; a missing path answers exists: false.", || {
        (json!({"path": {"type": "string", "description": PATH}}), &["path"])
    }),
    tool(
        "find",
        "files_search",
        true,
        "Find files whose name matches a glob (e.g. *.py) under a directory, recursively (depth 5, \
         100 results by default).",
        || {
            let p = json!({
                "path": {"type": "string", "description": "Directory to search."},
                "pattern": {"type": "string", "description": "Glob on file names, e.g. *.rs or test_*."},
                "max_results": {"type": "integer", "minimum": 1},
                "max_depth": {"type": "integer", "minimum": 0}
            });
            (p, &["path", "pattern"])
        },
    ),
    tool(
        "grep",
        "files_search",
        true,
        "Search file contents for a regular expression under a directory; returns matching files \
         with line numbers and lines (100 results by default).",
        || {
            let p = json!({
                "path": {"type": "string", "description": "Directory to search."},
                "regex": {"type": "string", "description": "Regular expression (Rust syntax)."},
                "glob": {"type": "string", "description": "Only files whose name matches (default *)."},
                "max_results": {"type": "integer", "minimum": 1},
                "max_depth": {"type": "integer", "minimum": 0}
            });
            (p, &["path", "regex"])
        },
    ),
    tool("move", "files_move", false, "Move or rename a file or directory.", || {
        let p = json!({"source": {"type": "string", "description": PATH}, "destination": {"type": "string", "description": PATH}});
        (p, &["source", "destination"])
    }),
    tool("delete", "files_delete", false, "Delete a file or a directory tree.", || {
        (json!({"path": {"type": "string", "description": PATH}}), &["path"])
    }),
    tool("mkdir", "files_mkdir", false, "Make a directory and its parents.", || {
        (json!({"path": {"type": "string", "description": PATH}}), &["path"])
    }),
    tool(
        "run",
        "shell",
        false,
        "Run a command to completion and return exit_code, stdout and stderr. The command is split \
         shell-style and run without a shell unless shell is true (then /bin/sh -c, for pipes and \
         redirections). Timeout 300 s by default; each stream is cut at max_output_bytes (default \
         32 KiB) and the cut is reported. With a progress token, output lines arrive as progress \
         notifications. Cancelling the call kills the command's process group.",
        || {
            let p = json!({
                "command": {"type": "string"},
                "shell": {"type": "boolean", "description": "Run through /bin/sh -c (default false)."},
                "cwd": {"type": "string", "description": "Working directory (default: the base directory)."},
                "env": {"type": "object", "additionalProperties": {"type": "string"}},
                "timeout": {"type": "number", "exclusiveMinimum": 0, "description": "Seconds (default 300)."},
                "max_output_bytes": {"type": "integer", "minimum": 1, "description": "Per stream (default 32768)."}
            });
            (p, &["command"])
        },
    ),
    tool(
        "start",
        "process_start",
        false,
        "Start a command in the background; returns its pid. Read its output with the output tool, \
         write to it with stdin (when stdin is true), stop it with signal.",
        || {
            let p = json!({
                "command": {"type": "string"},
                "shell": {"type": "boolean"},
                "cwd": {"type": "string"},
                "env": {"type": "object", "additionalProperties": {"type": "string"}},
                "stdin": {"type": "boolean", "description": "Keep a stdin pipe open (default false)."}
            });
            (p, &["command"])
        },
    ),
    tool(
        "output",
        "process_output",
        true,
        "Output of a background process from a cursor (since, default 0); waits up to wait seconds \
         (at most 30) for new output. Returns events, the next cursor, and the exit code once it ended.",
        || {
            let p = json!({
                "pid": {"type": "integer"},
                "since": {"type": "integer", "minimum": 0},
                "wait": {"type": "number", "minimum": 0, "maximum": 30}
            });
            (p, &["pid"])
        },
    ),
    tool("stdin", "process_stdin", false, "Write text to a background process's stdin; eof closes it.", || {
        let p = json!({"pid": {"type": "integer"}, "data": {"type": "string"}, "eof": {"type": "boolean"}});
        (p, &["pid"])
    }),
    tool(
        "signal",
        "process_signal",
        false,
        "Send a signal to a background process's group: TERM (default), KILL, INT, CONT or TSTP \
         (or 15, 9, 2, 18, 20).",
        || {
            let p = json!({"pid": {"type": "integer"}, "signal": {"type": ["string", "integer"]}});
            (p, &["pid"])
        },
    ),
    tool("processes", "process_list", true, "Background processes this server started, with their state.", || {
        (json!({}), &[])
    }),
    tool(
        "run_code",
        "code_execute",
        false,
        "Run code in a stateful context (variables persist between calls): python (default), \
         javascript, typescript, r, java or bash. Without context_id the language's default context \
         is used. Text and data come back as text, figures as images; an exception is a tool error \
         with its traceback. Output is cut at 64 KiB per stream.",
        || {
            let p = json!({
                "code": {"type": "string"},
                "language": {"type": "string", "description": "Not with context_id."},
                "context_id": {"type": "string"},
                "timeout": {"type": "number", "exclusiveMinimum": 0, "description": "Seconds; interrupts the execution."}
            });
            (p, &["code"])
        },
    ),
    tool("code_contexts", "code_contexts_list", true, "The live code contexts (id, language, cwd).", || {
        (json!({}), &[])
    }),
    tool(
        "code_context_create",
        "code_contexts_create",
        false,
        "Start a new code context (its own interpreter) in a working directory; returns its id.",
        || (json!({"language": {"type": "string"}, "cwd": {"type": "string"}}), &[]),
    ),
    tool(
        "code_context_restart",
        "code_contexts_restart",
        false,
        "Restart a code context's interpreter, clearing its state.",
        || (json!({"context_id": {"type": "string"}}), &["context_id"]),
    ),
    tool("system_info", "system_info", true, "Operating system, CPU, memory and disk of the sandbox.", || {
        (json!({}), &[])
    }),
    tool("system_metrics", "system_metrics", true, "Current CPU, memory and disk use.", || (json!({}), &[])),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_tool_names_known_endpoints_and_a_valid_schema() {
        let mut names = std::collections::HashSet::new();
        for tool in TOOLS {
            assert!(names.insert(tool.name), "{} twice", tool.name);
            assert_eq!(tool.endpoints().count(), 1 + usize::from(tool.also.is_some()), "{}", tool.name);
            let described = tool.describe();
            let schema = Value::Object((*described.input_schema).clone());
            let required = schema["required"].as_array().cloned().unwrap_or_default();
            for name in required {
                let name = name.as_str().unwrap_or_default();
                assert!(schema["properties"].get(name).is_some(), "{}: {name} required but not declared", tool.name);
            }
        }
    }

    #[test]
    fn every_tool_has_a_body() {
        let source = include_str!("tools.rs");
        for tool in TOOLS {
            assert!(source.contains(&format!("\"{}\" =>", tool.name)), "{} is not dispatched", tool.name);
        }
    }
}
