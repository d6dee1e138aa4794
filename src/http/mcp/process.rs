//! The process tools: thin calls into the `/shell` and `/process/*`
//! handlers and the process use case ([`start_process`]). `run` reports its output lines as
//! progress notifications when the client asks (a progress token), and a
//! cancelled call has its command's process group killed.

use abx_domain::process::start::{start_process, Events, RunToEnd};
use abx_wire::api::process::OutputQuery;
use abx_wire::api::process::{ExecRequest, ShellEvent, ShellResult, SignalRequest, StdinRequest};
use abx_wire::api::Fault;
use abx_wire::endpoints::Limit;
use axum::extract::{Path, State};
use rmcp::model::ProgressNotificationParam;
use rmcp::ErrorData;
use serde::Deserialize;
use serde_json::{Map, Value};

use super::call::{arguments, json_result, Ctx, Empty, Outcome};
use crate::http::error::ApiError;
use crate::http::extract::{JsonBody, Query};
use crate::http::process::{self as handlers, exec_input, IntoApiError as _};

/// Output kept per stream by `run` unless the call asks otherwise.
pub const RUN_OUTPUT: usize = 32 * 1024;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RunArgs {
    command: String,
    #[serde(default)]
    shell: bool,
    cwd: Option<String>,
    env: Option<std::collections::BTreeMap<String, String>>,
    timeout: Option<f64>,
    max_output_bytes: Option<usize>,
}

/// `run`: `POST /shell` (with progress notifications, `POST /shell/stream`'s runner).
pub async fn run(ctx: &Ctx<'_>, args: Map<String, Value>) -> Result<Outcome, ErrorData> {
    let a: RunArgs = arguments(args)?;
    let request =
        ExecRequest { shell: a.shell, cwd: a.cwd, env: a.env, timeout: a.timeout, ..ExecRequest::new(a.command) };
    let granted = ctx
        .grant
        .limit(Limit::MaxOutputBytes)
        .map_or(usize::MAX, |v| usize::try_from(v.as_u64()).unwrap_or(usize::MAX));
    let cap = a.max_output_bytes.unwrap_or(RUN_OUTPUT).min(granted);
    Ok(shell(ctx, request, cap).await.map(|r| json_result(&r)).into())
}

async fn shell(ctx: &Ctx<'_>, request: ExecRequest, cap: usize) -> Result<ShellResult, ApiError> {
    let (app, grant) = (ctx.app, ctx.grant);
    let id = grant.endpoint().id;
    let request = exec_input(request);
    let cancelled = ctx.cancelled();
    let Some((token, peer)) = ctx.progress() else {
        // Cancelling drops the run, whose guard kills the process group.
        let plane = RunToEnd { processes: &app.processes, max_output: Some(cap) };
        return tokio::select! {
            result = start_process(grant, &app.env, request, plane) => result.map_err(|e| e.into_api(id)),
            () = cancelled.cancelled() => Err(cancelled_error()),
        };
    };
    let plane = Events { processes: &app.processes, shutdown: app.shutdown.clone() };
    let (mut events, timeout) = start_process(grant, &app.env, request, plane).await.map_err(|e| e.into_api(id))?;
    let mut result = ShellResult { stdout: String::new(), stderr: String::new(), exit_code: 0, truncated: None };
    let mut lines = 0u32;
    loop {
        // Dropping the receiver on cancellation makes the runner kill the group.
        let event = tokio::select! {
            event = events.recv() => event,
            () = cancelled.cancelled() => return Err(cancelled_error()),
        };
        let Some(event) = event else { return Err(ApiError::internal()) };
        let (kept, line) = match event {
            ShellEvent::Stdout { data } => (&mut result.stdout, data),
            ShellEvent::Stderr { data } => (&mut result.stderr, data),
            ShellEvent::Exit { exit_code } => {
                result.exit_code = exit_code;
                return Ok(result);
            }
            ShellEvent::Error { error } if error == "timeout" => {
                let seconds = abx_domain::process::format_g(timeout.unwrap_or_default());
                return Err(abx_domain::process::ProcessError::Timeout(seconds).into_api(id));
            }
            ShellEvent::Error { error } => return Err(ApiError::bad_request(error)),
        };
        lines += 1;
        let note = ProgressNotificationParam::new(token.clone(), f64::from(lines)).with_message(line.clone());
        let _ = peer.notify_progress(note).await;
        if kept.len() + line.len() + 1 > cap {
            result.truncated = Some(true);
            continue;
        }
        kept.push_str(&line);
        kept.push('\n');
    }
}

fn cancelled_error() -> ApiError {
    ApiError::of(Fault::Cancelled, "Cancelled by the client")
}

/// `start`: `POST /process/start` (output always captured for `output`).
pub async fn start(ctx: &Ctx<'_>, args: Map<String, Value>) -> Result<Outcome, ErrorData> {
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Args {
        command: String,
        #[serde(default)]
        shell: bool,
        cwd: Option<String>,
        env: Option<std::collections::BTreeMap<String, String>>,
        #[serde(default)]
        stdin: bool,
    }
    let a: Args = arguments(args)?;
    let request = ExecRequest {
        shell: a.shell,
        cwd: a.cwd,
        env: a.env,
        stdin: a.stdin,
        capture_output: true,
        ..ExecRequest::new(a.command)
    };
    let answer = handlers::start(State(ctx.app.clone()), ctx.grant.clone(), JsonBody(request)).await;
    Ok(answer.map(|j| json_result(&j.0)).into())
}

/// `output`: `GET /process/{pid}/output`.
pub async fn output(ctx: &Ctx<'_>, args: Map<String, Value>) -> Result<Outcome, ErrorData> {
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Args {
        pid: i64,
        since: Option<u64>,
        wait: Option<f64>,
    }
    let a: Args = arguments(args)?;
    let wait = a.wait.unwrap_or(0.0).clamp(0.0, 30.0);
    let query: OutputQuery = serde_json::from_value(serde_json::json!({
        "since": a.since.map(|s| s.to_string()), "wait": wait.to_string()
    }))
    .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
    let answer =
        handlers::output(State(ctx.app.clone()), ctx.grant.clone(), Path(a.pid.to_string()), Query(query)).await;
    Ok(answer.map(|j| json_result(&j.0)).into())
}

/// `stdin`: `POST /process/{pid}/stdin`.
pub async fn stdin(ctx: &Ctx<'_>, args: Map<String, Value>) -> Result<Outcome, ErrorData> {
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Args {
        pid: i64,
        data: Option<String>,
        #[serde(default)]
        eof: bool,
    }
    let a: Args = arguments(args)?;
    let body = StdinRequest { data: a.data.map(Value::String), data_base64: None, eof: a.eof };
    let answer =
        handlers::stdin(State(ctx.app.clone()), ctx.grant.clone(), Path(a.pid.to_string()), JsonBody(body)).await;
    Ok(answer.map(|j| json_result(&j.0)).into())
}

/// The number of a signal named as the tool's schema allows.
fn signal_number(value: Option<&Value>) -> Result<i32, ErrorData> {
    let named = |name: &str| match name.trim().to_ascii_uppercase().trim_start_matches("SIG") {
        "TERM" => Some(15),
        "KILL" => Some(9),
        "INT" => Some(2),
        "CONT" => Some(18),
        "TSTP" => Some(20),
        other => other.parse().ok(),
    };
    match value {
        None => Some(15),
        Some(Value::Number(n)) => n.as_i64().and_then(|n| i32::try_from(n).ok()),
        Some(Value::String(s)) => named(s),
        Some(_) => None,
    }
    .ok_or_else(|| ErrorData::invalid_params("Invalid 'signal': use TERM, KILL, INT, CONT or TSTP", None))
}

/// `signal`: `POST /process/{pid}/signal`.
pub async fn signal(ctx: &Ctx<'_>, args: Map<String, Value>) -> Result<Outcome, ErrorData> {
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Args {
        pid: i64,
        signal: Option<Value>,
    }
    let a: Args = arguments(args)?;
    let body = SignalRequest::new(signal_number(a.signal.as_ref())?);
    let answer =
        handlers::signal(State(ctx.app.clone()), ctx.grant.clone(), Path(a.pid.to_string()), JsonBody(body)).await;
    Ok(answer.map(|j| json_result(&j.0)).into())
}

/// `processes`: `GET /process/list`.
pub async fn list(ctx: &Ctx<'_>, args: Map<String, Value>) -> Result<Outcome, ErrorData> {
    let _: Empty = arguments(args)?;
    let answer = handlers::list(State(ctx.app.clone()), ctx.grant.clone()).await;
    Ok(Outcome::Done(json_result(&answer.0)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signals_by_name_or_number() {
        assert_eq!(signal_number(None).ok(), Some(15));
        assert_eq!(signal_number(Some(&Value::from("KILL"))).ok(), Some(9));
        assert_eq!(signal_number(Some(&Value::from("sigint"))).ok(), Some(2));
        assert_eq!(signal_number(Some(&Value::from(18))).ok(), Some(18));
        assert!(signal_number(Some(&Value::from("HUP?"))).is_err());
    }
}
