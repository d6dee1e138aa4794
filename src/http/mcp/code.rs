//! The code tools: thin calls into the code interpreter (the same contexts
//! `POST /execute` runs in), with the code port's checks (`http/code/wire.rs`). An execution's
//! text and data come back as text content, figures as image content, an
//! exception as a tool error with its traceback; a cancelled call
//! interrupts the execution.

use std::sync::Arc;

use abx_domain::code::CodeInterpreter;
use abx_wire::api::code::{ExecuteRequest, ExecutionResult, OutputLine};
use abx_wire::api::Fault;
use rmcp::model::{CallToolResult, ContentBlock};
use rmcp::ErrorData;
use serde::Deserialize;
use serde_json::{Map, Value};

use super::call::{arguments, Ctx, Outcome};
use super::call::{json_result, Empty};
use crate::http::code::wire::{commands_unrestricted, context_cwd};
use crate::http::error::ApiError;
use crate::http::text_error::TextError;

/// Text kept per stream of one execution.
pub const CODE_OUTPUT: usize = 64 * 1024;

/// The code port's error as the tool error (its status and text).
fn api_error(error: &TextError) -> ApiError {
    let (status, text) = error.parts();
    ApiError::of(Fault::CodeRefused, text).with_status(status)
}

/// The code port's contexts (present when the code port runs).
fn contexts(ctx: &Ctx<'_>) -> Result<Arc<CodeInterpreter>, ApiError> {
    ctx.app
        .interpreter
        .clone()
        .ok_or_else(|| ApiError::of(Fault::FeatureOff, "The code interpreter is off on this server"))
}

/// `run_code`: `POST /execute` on the code port, its lines gathered.
pub async fn run(ctx: &Ctx<'_>, args: Map<String, Value>) -> Result<Outcome, ErrorData> {
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Args {
        code: String,
        language: Option<String>,
        context_id: Option<String>,
        timeout: Option<f64>,
    }
    let a: Args = arguments(args)?;
    let request = ExecuteRequest {
        code: a.code,
        context_id: a.context_id,
        language: a.language,
        env_vars: None,
        timeout: a.timeout,
    };
    Ok(execute(ctx, request).await.into())
}

async fn execute(ctx: &Ctx<'_>, request: ExecuteRequest) -> Result<CallToolResult, ApiError> {
    let code = contexts(ctx)?;
    commands_unrestricted(ctx.grant).map_err(|e| api_error(&e))?;
    let mut lines =
        code.execute(request, ctx.grant.program_user()).await.map_err(|e| api_error(&TextError::from(e)))?;
    let mut gathered = Gathered::default();
    let cancelled = ctx.cancelled();
    loop {
        // Dropping the receiver on cancellation interrupts the execution.
        let line = tokio::select! {
            line = lines.recv() => line,
            () = cancelled.cancelled() => return Err(ApiError::bad_request("Cancelled by the client")),
        };
        match line {
            Some(line) => gathered.add(line),
            None => return Ok(gathered.result()),
        }
    }
}

/// What an execution printed, displayed and raised.
#[derive(Default)]
struct Gathered {
    stdout: String,
    stderr: String,
    blocks: Vec<ContentBlock>,
    error: Option<String>,
    cut: bool,
}

impl Gathered {
    fn add(&mut self, line: OutputLine) {
        match line {
            OutputLine::Stdout { text, .. } => self.cut |= push_capped(&mut self.stdout, &text),
            OutputLine::Stderr { text, .. } => self.cut |= push_capped(&mut self.stderr, &text),
            OutputLine::Result(result) => self.blocks.extend(blocks(&result)),
            OutputLine::Error { name, value, traceback } => {
                self.error = Some(format!("{name}: {value}\n{traceback}"));
            }
            _ => {}
        }
    }

    fn result(self) -> CallToolResult {
        let mut content = Vec::new();
        if !self.stdout.is_empty() {
            content.push(ContentBlock::text(self.stdout));
        }
        if !self.stderr.is_empty() {
            content.push(ContentBlock::text(format!("[stderr]\n{}", self.stderr)));
        }
        content.extend(self.blocks);
        if self.cut {
            content.push(ContentBlock::text(format!("[output cut at {CODE_OUTPUT} bytes per stream]")));
        }
        match self.error {
            Some(error) => {
                content.push(ContentBlock::text(error));
                CallToolResult::error(content)
            }
            None => CallToolResult::success(content),
        }
    }
}

/// Appends within [`CODE_OUTPUT`]; true when something was left out.
fn push_capped(kept: &mut String, text: &str) -> bool {
    let room = CODE_OUTPUT.saturating_sub(kept.len());
    if text.len() <= room {
        kept.push_str(text);
        return false;
    }
    let end = (0..=room).rev().find(|i| text.is_char_boundary(*i)).unwrap_or(0);
    kept.push_str(&text[..end]);
    true
}

/// A displayed value: figures as images, the rest as its best text form.
fn blocks(result: &ExecutionResult) -> Vec<ContentBlock> {
    let mut blocks = Vec::new();
    if let Some(png) = &result.png {
        blocks.push(ContentBlock::image(png.clone(), "image/png"));
    }
    if let Some(jpeg) = &result.jpeg {
        blocks.push(ContentBlock::image(jpeg.clone(), "image/jpeg"));
    }
    let json = result.json.as_ref().or(result.data.as_ref()).map(Value::to_string);
    let text = result.text.clone().or_else(|| result.markdown.clone()).or(json).or_else(|| result.html.clone());
    if let Some(text) = text.filter(|_| blocks.is_empty() || result.is_main_result) {
        blocks.push(ContentBlock::text(text));
    }
    blocks
}

/// `code_contexts`: `GET /contexts`.
pub async fn list(ctx: &Ctx<'_>, args: Map<String, Value>) -> Result<Outcome, ErrorData> {
    let _: Empty = arguments(args)?;
    let listed =
        contexts(ctx).map(|code| json_result(&serde_json::json!({ "contexts": code.list(ctx.grant.program_user()) })));
    Ok(listed.into())
}

/// `code_context_create`: `POST /contexts`, its working directory under the
/// path rules of process execution.
pub async fn create(ctx: &Ctx<'_>, args: Map<String, Value>) -> Result<Outcome, ErrorData> {
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Args {
        language: Option<String>,
        cwd: Option<String>,
    }
    let a: Args = arguments(args)?;
    Ok(created(ctx, a.language, a.cwd).await.map(|info| json_result(&info)).into())
}

async fn created(
    ctx: &Ctx<'_>,
    language: Option<String>,
    cwd: Option<String>,
) -> Result<abx_wire::api::code::ContextInfo, ApiError> {
    let code = contexts(ctx)?;
    commands_unrestricted(ctx.grant).map_err(|e| api_error(&e))?;
    let cwd = context_cwd(ctx.grant, cwd.as_deref()).map_err(|e| api_error(&e))?;
    let user = ctx.grant.program_user();
    code.create(language.as_deref(), cwd.as_deref(), user).await.map_err(|e| api_error(&TextError::from(e)))
}

/// `code_context_restart`: `POST /contexts/{id}/restart`.
pub async fn restart(ctx: &Ctx<'_>, args: Map<String, Value>) -> Result<Outcome, ErrorData> {
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Args {
        context_id: String,
    }
    let a: Args = arguments(args)?;
    let restarted = async {
        let code = contexts(ctx)?;
        commands_unrestricted(ctx.grant).map_err(|e| api_error(&e))?;
        code.restart(&a.context_id, ctx.grant.program_user()).await.map_err(|e| api_error(&TextError::from(e)))
    };
    let answer =
        restarted.await.map(|_| json_result(&serde_json::json!({"context_id": a.context_id, "restarted": true})));
    Ok(answer.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_is_cut_on_a_character_boundary() {
        let mut kept = "x".repeat(CODE_OUTPUT - 1);
        assert!(push_capped(&mut kept, "é"));
        assert_eq!(kept.len(), CODE_OUTPUT - 1);
        assert!(!push_capped(&mut String::new(), "short"));
    }

    #[test]
    fn figures_are_images_and_values_text() {
        let figure = ExecutionResult { png: Some("iVBOR".into()), text: Some("<Figure>".into()), ..Default::default() };
        let shown = blocks(&figure);
        assert_eq!(shown.len(), 1);
        assert!(shown[0].as_image().is_some());
        let value = ExecutionResult { text: Some("2".into()), is_main_result: true, ..Default::default() };
        assert_eq!(blocks(&value)[0].as_text().map(|t| t.text.as_str()), Some("2"));
    }
}
