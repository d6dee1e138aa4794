//! Qwen Code: `qwen <prompt> --output-format stream-json`, the prompt positional.

use serde_json::{json, Map, Value};

use super::stream_json::StreamJsonParser;
use super::{default_failure, Adapter, Capabilities, Descriptor, Invocation, InvocationFile, Parser, TurnContext};
use crate::agents::error::Failure;
use crate::agents::spec::{AgentSpec, McpServer, Permissions};

static DESCRIPTOR: Descriptor = Descriptor {
    name: "qwen-code",
    aliases: &["qwen", "qwen_code", "qwencode"],
    binary: Some("qwen"),
    install_steps: &[&["npm", "install", "-g", "@qwen-code/qwen-code"]],
    capabilities: Capabilities {
        resume: true,
        partial_deltas: true,
        mcp: true,
        system_prompt: "flag",
        base_url: true,
        max_turns: true,
        budget: false,
        experimental: true,
    },
    passthrough_env: &["OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_MODEL"],
    credential_env: &["OPENAI_API_KEY"],
    implemented: true,
};

/// The Qwen Code adapter.
#[derive(Debug, Clone, Copy)]
pub struct QwenCode;

impl Adapter for QwenCode {
    fn descriptor(&self) -> &'static Descriptor {
        &DESCRIPTOR
    }

    fn validate(&self, spec: &AgentSpec) -> Vec<String> {
        if spec.provider.auth.as_deref() == Some("bearer") {
            return vec!["provider.auth='bearer' is not supported by qwen-code".into()];
        }
        Vec::new()
    }

    fn invocation(&self, ctx: &TurnContext<'_>) -> Invocation {
        let spec = ctx.spec;
        let mut inv = Invocation::default();
        let mut argv: Vec<String> = vec![
            "qwen".into(),
            TurnContext::argv_prompt(&ctx.prompt),
            "--output-format".into(),
            "stream-json".into(),
            "--include-partial-messages".into(),
        ];
        if let Some(native) = &ctx.native_session_id {
            argv.extend(["--resume".into(), native.clone()]);
        }
        if let Some(model) = &spec.model {
            argv.extend(["--model".into(), model.clone()]);
            inv.env.insert("OPENAI_MODEL".into(), model.clone());
        }
        match spec.permissions {
            Permissions::FullAccess => argv.push("--yolo".into()),
            Permissions::WorkspaceWrite => argv.extend(["--approval-mode".into(), "auto-edit".into()]),
            Permissions::ReadOnly => argv.extend(["--approval-mode".into(), "plan".into()]),
        }
        if let Some(instructions) = spec.instructions.as_ref().filter(|i| !i.is_empty()) {
            argv.extend(["--append-system-prompt".into(), instructions.clone()]);
        }
        if let Some(turns) = spec.limits.max_turns {
            argv.extend(["--max-session-turns".into(), turns.to_string()]);
        }
        if let Some(url) = &spec.provider.base_url {
            inv.env.insert("OPENAI_BASE_URL".into(), url.clone());
        }
        if let Some(key) = &spec.provider.api_key {
            inv.env.insert("OPENAI_API_KEY".into(), key.clone());
        }
        if !spec.mcp_servers.is_empty() {
            let settings = json!({"mcpServers": mcp_servers(&spec.mcp_servers, "httpUrl")});
            inv.files.push(InvocationFile {
                path: ctx.workdir.join(".qwen").join("settings.json"),
                content: serde_json::to_vec_pretty(&settings).unwrap_or_default(),
                merge_key: Some("mcpServers"),
            });
        }
        argv.extend(spec.extra_args.iter().cloned());
        inv.argv = argv;
        inv
    }

    fn parser(&self, _ctx: &TurnContext<'_>) -> Box<dyn Parser> {
        Box::new(StreamJsonParser::default())
    }

    fn classify_failure(&self, exit_code: Option<i32>, stderr_tail: &str) -> Failure {
        match exit_code {
            Some(53) => Failure::new("session_budget_exceeded", "qwen-code stopped: session turn limit exceeded"),
            Some(55) => Failure::new("session_budget_exceeded", "qwen-code stopped: budget exceeded"),
            _ => default_failure("qwen", exit_code, stderr_tail),
        }
    }
}

/// The `mcpServers` map of a stream-json CLI's settings; secret values stay
/// in the environment (`${VAR}` placeholders). `http_key` names a remote
/// server's URL field for HTTP transport (`httpUrl` for Qwen, `url` for Claude).
pub fn mcp_servers(servers: &[McpServer], http_key: &str) -> Map<String, Value> {
    let mut out = Map::new();
    for server in servers {
        let mut entry = Map::new();
        if let Some(url) = &server.url {
            let key = if server.transport.as_deref() == Some("sse") { "url" } else { http_key };
            entry.insert(key.into(), json!(url));
            if http_key == "url" {
                entry.insert("type".into(), json!(server.transport.as_deref().unwrap_or("http")));
            }
            if !server.headers.is_empty() {
                let headers: Map<String, Value> = server
                    .headers
                    .keys()
                    .map(|h| (h.clone(), json!(format!("${{{}}}", server.header_var(h)))))
                    .collect();
                entry.insert("headers".into(), Value::Object(headers));
            }
        } else {
            entry.insert("command".into(), json!(server.command));
            entry.insert("args".into(), json!(server.args));
            if !server.env.is_empty() {
                let env: Map<String, Value> =
                    server.env.keys().map(|k| (k.clone(), json!(format!("${{{}}}", server.env_var(k))))).collect();
                entry.insert("env".into(), Value::Object(env));
            }
        }
        out.insert(server.name.clone(), Value::Object(entry));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn the_prompt_is_positional_and_mcp_goes_to_settings() {
        let mut spec = AgentSpec { runtime: "qwen-code".into(), workspace: "/w".into(), ..AgentSpec::default() };
        spec.model = Some("qwen3".into());
        spec.mcp_servers.push(McpServer::remote("docs", "https://d", BTreeMap::from([("Auth".into(), "x".into())])));
        let ctx = TurnContext {
            spec: &spec,
            prompt: "-rf everything".into(),
            workdir: "/w".into(),
            turn_dir: "/t".into(),
            native_session_id: None,
            is_root: true,
        };
        let inv = QwenCode.invocation(&ctx);
        assert_eq!(inv.argv[1], "Task: -rf everything");
        assert!(inv.argv.contains(&"--yolo".to_string()));
        assert_eq!(inv.env.get("OPENAI_MODEL").map(String::as_str), Some("qwen3"));
        let settings: Value = serde_json::from_slice(&inv.files[0].content).expect("json");
        assert_eq!(settings["mcpServers"]["docs"]["headers"]["Auth"], "${ABX_MCP_DOCS_AUTH}");
        assert_eq!(inv.stdin, None);
    }
}
