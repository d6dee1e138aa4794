//! The `command` runtime: any program, for custom agents and tests. By
//! default it prints the runtime's own event JSON lines (`parsed.rs`);
//! `parser` can instead read plain text, Codex JSONL or stream-json.

use super::codex::CodexParser;
use super::stream_json::StreamJsonParser;
use super::{Adapter, Capabilities, Descriptor, Invocation, Parser, TurnContext};
use crate::agents::parsed::Parsed;
use crate::agents::spec::{AgentSpec, CommandParser};

static DESCRIPTOR: Descriptor = Descriptor {
    name: "command",
    aliases: &["custom"],
    binary: None,
    install_steps: &[],
    capabilities: Capabilities {
        resume: false,
        partial_deltas: true,
        mcp: false,
        system_prompt: "preamble",
        base_url: false,
        max_turns: false,
        budget: false,
        experimental: false,
    },
    passthrough_env: &[],
    credential_env: &[],
    implemented: true,
};

/// The command adapter.
#[derive(Debug, Clone, Copy)]
pub struct Command;

impl Adapter for Command {
    fn descriptor(&self) -> &'static Descriptor {
        &DESCRIPTOR
    }

    fn validate(&self, spec: &AgentSpec) -> Vec<String> {
        let mut problems = Vec::new();
        match &spec.command {
            None => problems.push("command: required for runtime 'command' (argv, parser, ...)".to_string()),
            Some(command) if command.argv.is_empty() || command.argv[0].is_empty() => {
                problems.push("command.argv: required non-empty list of strings".into());
            }
            Some(_) => {}
        }
        if !spec.mcp_servers.is_empty() {
            problems.push("mcp_servers is not supported by the generic command runtime".into());
        }
        problems
    }

    fn invocation(&self, ctx: &TurnContext<'_>) -> Invocation {
        let Some(command) = &ctx.spec.command else { return Invocation::default() };
        let template = match (&ctx.native_session_id, &command.resume_argv) {
            (Some(_), Some(resume)) => resume,
            _ => &command.argv,
        };
        let prompt = ctx.with_preamble();
        let expand = |part: &str| {
            part.replace("{prompt}", &prompt)
                .replace("{model}", ctx.spec.model.as_deref().unwrap_or(""))
                .replace("{session_id}", ctx.native_session_id.as_deref().unwrap_or(""))
                .replace("{workdir}", &ctx.workdir.display().to_string())
        };
        let in_template = template.iter().any(|p| p.contains("{prompt}"));
        let mut argv: Vec<String> = template.iter().map(|p| expand(p)).collect();
        argv.extend(ctx.spec.extra_args.iter().cloned());
        if command.prompt_in_argv && !in_template {
            argv.push(TurnContext::argv_prompt(&prompt));
        }
        let on_stdin = !(in_template || command.prompt_in_argv);
        Invocation { argv, stdin: on_stdin.then(|| prompt.into_bytes()), ..Invocation::default() }
    }

    fn parser(&self, ctx: &TurnContext<'_>) -> Box<dyn Parser> {
        match ctx.spec.command.as_ref().map(|c| c.parser).unwrap_or_default() {
            CommandParser::Events => Box::new(EventsParser),
            CommandParser::Text => Box::new(TextParser::default()),
            CommandParser::JsonlCodex => Box::new(CodexParser::default()),
            CommandParser::JsonlClaude => Box::new(StreamJsonParser::default()),
        }
    }
}

/// Reads the runtime's own event lines; anything else is a log line.
#[derive(Debug, Default)]
pub struct EventsParser;

impl Parser for EventsParser {
    fn feed(&mut self, line: &str, out: &mut Vec<Parsed>) {
        if line.trim().is_empty() {
            return;
        }
        match serde_json::from_str::<Parsed>(line) {
            Ok(event) => out.push(event),
            Err(_) => out.push(Parsed::log(line)),
        }
    }
}

/// Every line is assistant text; the whole output is one message.
#[derive(Debug, Default)]
pub struct TextParser {
    text: String,
}

impl Parser for TextParser {
    fn feed(&mut self, line: &str, out: &mut Vec<Parsed>) {
        let chunk = format!("{line}\n");
        if self.text.len() < 256 * 1024 {
            self.text.push_str(&chunk);
        }
        out.push(Parsed::text_delta("text", chunk));
    }

    fn finish(&mut self, exit_code: Option<i32>, out: &mut Vec<Parsed>) {
        let text = self.text.trim_end_matches('\n').to_string();
        if !text.is_empty() {
            out.push(Parsed::message("text", text.clone()));
        }
        out.push(Parsed::result(exit_code == Some(0), Some(text).filter(|t| !t.is_empty()), None));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agents::spec::CommandSpec;

    fn spec(argv: &[&str], prompt_in_argv: bool) -> AgentSpec {
        AgentSpec {
            runtime: "command".into(),
            workspace: "/w".into(),
            command: Some(CommandSpec {
                argv: argv.iter().map(|s| s.to_string()).collect(),
                prompt_in_argv,
                ..CommandSpec::default()
            }),
            ..AgentSpec::default()
        }
    }

    fn ctx(spec: &AgentSpec) -> TurnContext<'_> {
        TurnContext {
            spec,
            prompt: "go".into(),
            workdir: "/w".into(),
            turn_dir: "/t".into(),
            native_session_id: None,
            is_root: false,
        }
    }

    #[test]
    fn the_prompt_goes_where_the_template_says() {
        let s = spec(&["/bin/agent", "--task={prompt}", "{workdir}"], false);
        let inv = Command.invocation(&ctx(&s));
        assert_eq!(inv.argv, ["/bin/agent", "--task=go", "/w"]);
        assert_eq!(inv.stdin, None);
        let s = spec(&["/bin/agent"], false);
        assert_eq!(Command.invocation(&ctx(&s)).stdin.as_deref(), Some(&b"go"[..]));
        let s = spec(&["/bin/agent"], true);
        assert_eq!(Command.invocation(&ctx(&s)).argv, ["/bin/agent", "go"]);
        assert!(Command.validate(&spec(&[], false))[0].contains("command.argv"));
    }

    #[test]
    fn malformed_lines_are_logs_and_text_output_is_one_message() {
        let mut out = Vec::new();
        EventsParser.feed(r#"{"type":"message","item_id":"m","text":"hi"}"#, &mut out);
        EventsParser.feed("{not json", &mut out);
        EventsParser.feed(r#"{"type":"unknown"}"#, &mut out);
        assert_eq!(out, [Parsed::message("m", "hi"), Parsed::log("{not json"), Parsed::log(r#"{"type":"unknown"}"#)]);
        let mut text = TextParser::default();
        let mut out = Vec::new();
        text.feed("a", &mut out);
        text.feed("b", &mut out);
        text.finish(Some(0), &mut out);
        assert_eq!(out[2], Parsed::message("text", "a\nb"));
        assert_eq!(out[3], Parsed::result(true, Some("a\nb".into()), None));
    }
}
