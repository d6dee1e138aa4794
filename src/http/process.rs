//! Handlers of the process group: `/shell`, `/shell/stream`, `/process/*`.
//!
//! Each extracts, calls the process domain (starting through
//! [`abx_domain::process::start::start_process`]), and maps the result; `/shell/stream`
//! answers server-sent events with keep-alive comments and, on line
//! events, ids a client resumes from with `Last-Event-ID`. A client that
//! disconnects from `/shell/stream` and does not resume within the grace
//! has its command's process group terminated (SIGTERM, then SIGKILL).

use std::convert::Infallible;

use abx_domain::policy::guards::{check_signal, ALLOWED_SIGNALS};
use abx_domain::policy::Grant;
use abx_domain::process::exec::{CommandLine, ExecInput};
use abx_domain::process::output::Stream;
use abx_domain::process::start::{max_output, start_process, viewer, Background, RunToEnd, StreamLines};
use abx_domain::process::stream_runs::{Cursor, Delivery};
use abx_domain::process::ProcessError;
use abx_domain::pyrepr;
use abx_wire::api::process::{
    ExecRequest, OutputQuery, ProcessInfo, ProcessList, ProcessOutput, ShellEvent, ShellResult, SignalRequest,
    SignalResult, Started, StdinRequest, StdinResult,
};
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::IntoResponse;
use axum::Json;
use nix::sys::signal::Signal;
use serde_json::Value;

use super::error::ApiError;
use super::extract::{JsonBody, Query};
use super::AppState;

/// How a [`ProcessError`] is answered.
pub trait IntoApiError {
    /// The wire error, naming `endpoint` on policy refusals (as the reference).
    fn into_api(self, endpoint: &str) -> ApiError;
}

impl IntoApiError for ProcessError {
    fn into_api(self, endpoint: &str) -> ApiError {
        match self {
            ProcessError::Denied(denial) => ApiError::from(denial).with_endpoint(endpoint),
            ProcessError::Internal(detail) => {
                tracing::error!(endpoint, detail, "process operation failed");
                ApiError::internal()
            }
            other => ApiError::of(other.fault(), other.to_string()),
        }
    }
}

/// The request body in the domain's terms.
pub(crate) fn exec_input(request: ExecRequest) -> ExecInput {
    let command = if request.shell { CommandLine::Shell(request.command) } else { CommandLine::Split(request.command) };
    ExecInput { command, cwd: request.cwd, env: request.env, timeout: request.timeout, user: request.user }
}

/// `POST /shell`: run to completion.
pub async fn shell(
    State(app): State<AppState>,
    grant: Grant,
    JsonBody(request): JsonBody<ExecRequest>,
) -> Result<Json<ShellResult>, ApiError> {
    let plane = RunToEnd { processes: &app.processes, max_output: max_output(&grant) };
    let result = start_process(&grant, &app.env, exec_input(request), plane).await;
    result.map(Json).map_err(|e| e.into_api(grant.endpoint().id))
}

fn sse(event: &ShellEvent) -> Event {
    Event::default().event(event.name()).data(event.data().to_string())
}

/// One item of a run as an SSE event: lines carry their resume id.
fn sse_of(delivery: Delivery) -> Event {
    match delivery {
        Delivery::Line { stream, data, id } => {
            let data = String::from_utf8_lossy(&data).into_owned();
            let event = match stream {
                Stream::Stdout => ShellEvent::Stdout { data },
                Stream::Stderr => ShellEvent::Stderr { data },
            };
            sse(&event).id(id.to_string())
        }
        Delivery::Gap(lost) => Event::default()
            .event("gap")
            .data(serde_json::json!({"events": lost.events, "bytes": lost.bytes}).to_string()),
        Delivery::Closing(event) => sse(&event),
    }
}

/// The `Last-Event-ID` header, if any.
fn resume_cursor(headers: &HeaderMap) -> Result<Option<Cursor>, ApiError> {
    let Some(value) = headers.get("last-event-id") else { return Ok(None) };
    let text = value.to_str().map_err(|_| ApiError::bad_request("Invalid Last-Event-ID"))?;
    Cursor::parse(text).map(Some).map_err(|e| ApiError::bad_request(e.to_string()))
}

/// `POST /shell/stream`: run and stream line events; with `Last-Event-ID`
/// (ours), resume the run that id belongs to after it instead.
pub async fn shell_stream(
    State(app): State<AppState>,
    grant: Grant,
    headers: HeaderMap,
    JsonBody(request): JsonBody<ExecRequest>,
) -> Result<impl IntoResponse, ApiError> {
    let attached = match resume_cursor(&headers)? {
        Some(cursor) => {
            let run = app.processes.streams().find(cursor, &viewer(&grant));
            run.and_then(|run| run.attach(Some(cursor))).map_err(|e| ApiError::bad_request(e.to_string()))?
        }
        None => {
            let plane = StreamLines { processes: &app.processes, shutdown: app.shutdown.clone() };
            let started = start_process(&grant, &app.env, exec_input(request), plane).await;
            started.map_err(|e| e.into_api(grant.endpoint().id))?
        }
    };
    let body = futures_util::stream::unfold(attached, |mut attached| async move {
        attached.next().await.map(|item| (Ok::<_, Infallible>(sse_of(item)), attached))
    });
    Ok(Sse::new(body).keep_alive(KeepAlive::new().interval(super::SSE_KEEP_ALIVE)))
}

/// `POST /process/start`: start in the background.
pub async fn start(
    State(app): State<AppState>,
    grant: Grant,
    JsonBody(request): JsonBody<ExecRequest>,
) -> Result<Json<Started>, ApiError> {
    let plane = Background { processes: &app.processes, capture: request.capture_output, stdin: request.stdin };
    let started = start_process(&grant, &app.env, exec_input(request), plane).await;
    started.map(Json).map_err(|e| e.into_api(grant.endpoint().id))
}

/// `GET /process/list`: the caller's processes (everyone's for an admin).
pub async fn list(State(app): State<AppState>, grant: Grant) -> Json<ProcessList> {
    Json(ProcessList { processes: app.processes.list(&viewer(&grant)) })
}

fn parse_pid(raw: &str) -> Result<i64, ApiError> {
    raw.trim().parse::<i64>().map_err(|_| ApiError::bad_request(format!("Invalid pid: {}", pyrepr::repr_str(raw))))
}

/// `GET /process/{pid}`.
pub async fn detail(
    State(app): State<AppState>,
    grant: Grant,
    Path(raw): Path<String>,
) -> Result<Json<ProcessInfo>, ApiError> {
    let pid = parse_pid(&raw)?;
    app.processes.get(pid, &viewer(&grant)).map(Json).map_err(|e| e.into_api(grant.endpoint().id))
}

/// The signal number of a body, read as Python's `int(...)`.
fn signal_number(body: &SignalRequest) -> Result<i64, ApiError> {
    let Some(value) = &body.signal else {
        return Err(ApiError::bad_request("Missing 'signal' in body"));
    };
    pyrepr::int_of(value).map_err(|_| {
        let shown = match value {
            Value::String(s) => pyrepr::repr_str(s),
            other => other.to_string(),
        };
        ApiError::bad_request(format!("Invalid signal value: {shown}"))
    })
}

/// `POST /process/{pid}/signal`: one of the allowed signals, to the process's group.
pub async fn signal(
    State(app): State<AppState>,
    grant: Grant,
    Path(raw): Path<String>,
    JsonBody(body): JsonBody<SignalRequest>,
) -> Result<Json<SignalResult>, ApiError> {
    let id = grant.endpoint().id;
    let pid = parse_pid(&raw)?;
    let number = signal_number(&body)?;
    if !ALLOWED_SIGNALS.contains(&number) {
        return Err(ApiError::bad_request(format!("Signal {number} not allowed; permitted: [2, 9, 15, 18, 20]")));
    }
    check_signal(&grant, number).map_err(|d| ProcessError::from(d).into_api(id))?;
    if pid == 1 || pid == i64::from(std::process::id()) {
        return Err(ProcessError::Refused(pid).into_api(id));
    }
    let signal = i32::try_from(number).ok().and_then(|n| Signal::try_from(n).ok());
    let signal = signal.ok_or_else(|| ApiError::bad_request(format!("Invalid signal value: {number}")))?;
    app.processes.signal(pid, signal, &viewer(&grant)).map_err(|e| e.into_api(id))?;
    Ok(Json(SignalResult { pid: i32::try_from(pid).unwrap_or_default(), signal: signal as i32 }))
}

/// `POST /process/{pid}/stdin`.
pub async fn stdin(
    State(app): State<AppState>,
    grant: Grant,
    Path(raw): Path<String>,
    JsonBody(body): JsonBody<StdinRequest>,
) -> Result<Json<StdinResult>, ApiError> {
    let pid = parse_pid(&raw)?;
    let written = app.processes.write_stdin(pid, body, &viewer(&grant)).await;
    written.map(Json).map_err(|e| e.into_api(grant.endpoint().id))
}

/// `GET /process/{pid}/output?since=&wait=`: captured output from a cursor, long-polling.
pub async fn output(
    State(app): State<AppState>,
    grant: Grant,
    Path(raw): Path<String>,
    Query(query): Query<OutputQuery>,
) -> Result<Json<ProcessOutput>, ApiError> {
    let pid = parse_pid(&raw)?;
    let invalid = || ApiError::bad_request("Invalid 'since' or 'wait'");
    let since = match query.since.as_deref() {
        None => 0,
        Some(s) => s.trim().parse::<i64>().map_err(|_| invalid())?.max(0).unsigned_abs(),
    };
    let wait = match query.wait.as_deref() {
        None => 0.0,
        Some(w) => w.trim().parse::<f64>().map_err(|_| invalid())?,
    };
    let output = app.processes.output(pid, since, wait, &viewer(&grant)).await;
    output.map(Json).map_err(|e| e.into_api(grant.endpoint().id))
}
