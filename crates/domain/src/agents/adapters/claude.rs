//! Claude Code: `claude -p --output-format stream-json`, prompt on stdin
//! (declared by the reference, implemented here).

use serde_json::json;

use super::qwen::mcp_servers;
use super::stream_json::StreamJsonParser;
use super::{Adapter, Capabilities, Descriptor, Invocation, InvocationFile, Parser, TurnContext};
use crate::agents::spec::Permissions;

static DESCRIPTOR: Descriptor = Descriptor {
    name: "claude-code",
    aliases: &["claude", "claude_code", "claudecode"],
    binary: Some("claude"),
    install_steps: &[&["npm", "install", "-g", "@anthropic-ai/claude-code"]],
    capabilities: Capabilities {
        resume: true,
        partial_deltas: true,
        mcp: true,
        system_prompt: "flag",
        base_url: true,
        max_turns: true,
        budget: true,
        experimental: false,
    },
    passthrough_env: &["ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_BASE_URL", "CLAUDE_CODE_OAUTH_TOKEN"],
    credential_env: &["ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN"],
    implemented: true,
};

/// The Claude Code adapter.
#[derive(Debug, Clone, Copy)]
pub struct ClaudeCode;

impl Adapter for ClaudeCode {
    fn descriptor(&self) -> &'static Descriptor {
        &DESCRIPTOR
    }

    fn invocation(&self, ctx: &TurnContext<'_>) -> Invocation {
        let spec = ctx.spec;
        let mut inv = Invocation::default();
        let mut argv: Vec<String> =
            ["claude", "-p", "--output-format", "stream-json", "--verbose", "--include-partial-messages"]
                .map(String::from)
                .to_vec();
        if let Some(native) = &ctx.native_session_id {
            argv.extend(["--resume".into(), native.clone()]);
        }
        if let Some(model) = &spec.model {
            argv.extend(["--model".into(), model.clone()]);
        }
        match spec.permissions {
            Permissions::ReadOnly => argv.extend(["--permission-mode".into(), "plan".into()]),
            Permissions::WorkspaceWrite => argv.extend(
                ["--permission-mode", "acceptEdits", "--allowedTools", "Read,Edit,Write,Bash,Glob,Grep"]
                    .map(String::from),
            ),
            Permissions::FullAccess => {
                argv.extend(["--permission-mode".into(), "bypassPermissions".into()]);
                if ctx.is_root {
                    // Claude Code refuses to bypass permissions as root outside a sandbox it knows of.
                    inv.env.insert("IS_SANDBOX".into(), "1".into());
                }
            }
        }
        if let Some(instructions) = spec.instructions.as_ref().filter(|i| !i.is_empty()) {
            argv.extend(["--append-system-prompt".into(), instructions.clone()]);
        }
        if let Some(turns) = spec.limits.max_turns {
            argv.extend(["--max-turns".into(), turns.to_string()]);
        }
        if let Some(budget) = spec.limits.max_budget_usd {
            argv.extend(["--max-budget-usd".into(), budget.to_string()]);
        }
        if let Some(url) = &spec.provider.base_url {
            inv.env.insert("ANTHROPIC_BASE_URL".into(), url.clone());
        }
        if let Some(key) = &spec.provider.api_key {
            let var = if spec.provider.auth.as_deref() == Some("bearer") {
                "ANTHROPIC_AUTH_TOKEN"
            } else {
                "ANTHROPIC_API_KEY"
            };
            inv.env.insert(var.into(), key.clone());
        }
        if !spec.mcp_servers.is_empty() {
            let path = ctx.turn_dir.join("mcp.json");
            let config = json!({"mcpServers": mcp_servers(&spec.mcp_servers, "url")});
            inv.files.push(InvocationFile {
                path: path.clone(),
                content: serde_json::to_vec_pretty(&config).unwrap_or_default(),
                merge_key: None,
            });
            argv.extend(["--mcp-config".into(), path.display().to_string()]);
        }
        argv.extend(spec.extra_args.iter().cloned());
        inv.argv = argv;
        inv.stdin = Some(ctx.prompt.clone().into_bytes());
        inv
    }

    fn parser(&self, _ctx: &TurnContext<'_>) -> Box<dyn Parser> {
        Box::new(StreamJsonParser::default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agents::spec::AgentSpec;

    #[test]
    fn root_runs_get_is_sandbox_and_the_prompt_goes_to_stdin() {
        let spec = AgentSpec { runtime: "claude-code".into(), workspace: "/w".into(), ..AgentSpec::default() };
        let ctx = TurnContext {
            spec: &spec,
            prompt: "hello".into(),
            workdir: "/w".into(),
            turn_dir: "/t".into(),
            native_session_id: Some("s-1".into()),
            is_root: true,
        };
        let inv = ClaudeCode.invocation(&ctx);
        assert_eq!(&inv.argv[..2], ["claude", "-p"]);
        assert!(inv.argv.windows(2).any(|w| w == ["--resume", "s-1"]));
        assert_eq!(inv.env.get("IS_SANDBOX").map(String::as_str), Some("1"));
        assert_eq!(inv.stdin.as_deref(), Some(&b"hello"[..]));
    }
}
