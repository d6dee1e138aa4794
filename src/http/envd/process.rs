//! `process.Process`: each method admitted by the pipeline under its row's
//! rule, governed by its native counterpart (`Start` by `process_start`,
//! and a terminal `Start` by `pty_create_session` too; `Connect` by
//! `process_output`; `List` by `process_list`; input by `process_stdin`;
//! signals by `process_signal`; `Update` by `pty_resize`), the command
//! checked by the same exec policy as `/process/start`, then served by
//! [`abx_domain::envd::processes`]. Processes and terminals count against the
//! daemon's `max_processes` and `max_sessions` together with the API's.

use std::sync::Arc;

use abx_domain::envd::events::Delivery;
use abx_domain::envd::processes::Process;
use abx_domain::envd::start::Start;
use abx_domain::policy::{owner, Identity, Viewer};
use abx_domain::process::start::start_process;
use abx_wire::api::envd::filesystem::Empty;
use abx_wire::api::envd::process::{
    EventResponse, Input, ListResponse, ProcessEvent, SelectRequest, SendInputRequest, SendSignalRequest, Signal,
    StartRequest, StreamInputRequest, UpdateRequest,
};
use axum::response::Response;
use futures_util::StreamExt;

use super::connect::{self, CallOptions, Code, ConnectError, Messages};
use super::pace::{self, Paced};
use super::Call;

/// Longest `SendSignal(SIGKILL)` waits for the process to be gone before answering.
const KILL_SETTLE: std::time::Duration = std::time::Duration::from_secs(2);

/// The caller as the registry's owner checks see it.
fn viewer(identity: &Identity) -> Viewer {
    Viewer::new(identity, owner::PROCESS_ADMIN)
}

/// The events of `process` as a paced stream of responses; `end` is the
/// last one, or a `data_loss` error saying what output was lost.
fn event_stream(
    process: &Arc<Process>,
    options: CallOptions,
    started: tokio::time::Instant,
) -> impl futures_util::Stream<Item = connect::StreamItem<EventResponse>> + Send + 'static {
    let source = process.events().map(|delivery| match delivery {
        Delivery::Event(event @ ProcessEvent::End(_)) => Paced::Last(EventResponse { event }),
        Delivery::Event(event) => Paced::Message(EventResponse { event }),
        Delivery::Truncated(report) => Paced::Fail(ConnectError::new(Code::DataLoss, report)),
    });
    pace::paced(source, options, started, || EventResponse { event: ProcessEvent::Keepalive(Empty {}) })
}

/// `Start`: the process ([`abx_domain::envd::start`]), then its events on this stream.
pub async fn start(call: Call) -> Response {
    let started = tokio::time::Instant::now();
    call.stream(|state, grant, req: StartRequest, options: CallOptions| async move {
        let base = state.app.engine.base_dir().to_path_buf();
        let (command, plane) = Start::new(&grant, &state.envd, &state.app.terminals, base, req, options.timeout)?;
        let process = start_process(&grant, &state.app.env, command, plane).await?;
        Ok(event_stream(&process, options, started))
    })
    .await
}

/// `Connect`: a running or recently ended process's events (the output still held, then live).
pub async fn connect(call: Call) -> Response {
    let started = tokio::time::Instant::now();
    call.stream(|state, grant, req: SelectRequest, options: CallOptions| async move {
        let process = state.envd.processes.find(&req.process, &viewer(grant.identity()))?;
        Ok(event_stream(&process, options, started))
    })
    .await
}

/// `List`: running processes.
pub async fn list(call: Call) -> Response {
    call.unary(|state, grant, _: Empty| async move {
        Ok(ListResponse { processes: state.envd.processes.list(&viewer(grant.identity())) })
    })
    .await
}

async fn send(process: &Process, input: Input) -> Result<(), ConnectError> {
    match input {
        Input::Stdin(data) => process.write(&data, false).await?,
        Input::Pty(data) => process.write(&data, true).await?,
    }
    Ok(())
}

/// `SendInput`.
pub async fn send_input(call: Call) -> Response {
    call.unary(|state, grant, req: SendInputRequest| async move {
        let process = state.envd.processes.find(&req.process, &viewer(grant.identity()))?;
        send(&process, req.input).await?;
        Ok(Empty {})
    })
    .await
}

/// `StreamInput`: a start message naming the process, then input messages, in order.
pub async fn stream_input(call: Call) -> Response {
    call.client_stream(|state, grant, mut messages: Messages<StreamInputRequest>| async move {
        let mut process = None;
        while let Some(message) = messages.next().await {
            match (message?, &process) {
                (StreamInputRequest::Start { process: selector }, None) => {
                    process = Some(state.envd.processes.find(&selector, &viewer(grant.identity()))?);
                }
                (StreamInputRequest::Start { .. }, Some(_)) => {
                    return Err(ConnectError::new(Code::InvalidArgument, "the input stream already started"));
                }
                (StreamInputRequest::Data { input }, Some(target)) => send(target, input).await?,
                (StreamInputRequest::Data { .. }, None) => {
                    return Err(ConnectError::new(Code::InvalidArgument, "the first message must name the process"));
                }
                (StreamInputRequest::Keepalive {}, _) => {}
            }
        }
        Ok(Empty {})
    })
    .await
}

/// `CloseStdin`.
pub async fn close_stdin(call: Call) -> Response {
    call.unary(|state, grant, req: SelectRequest| async move {
        state.envd.processes.find(&req.process, &viewer(grant.identity()))?.close_stdin().await?;
        Ok(Empty {})
    })
    .await
}

/// `SendSignal`: `SIGTERM` or `SIGKILL` to the process's group.
pub async fn send_signal(call: Call) -> Response {
    call.unary(|state, grant, req: SendSignalRequest| async move {
        let signal = match req.signal {
            Signal::Term => nix::sys::signal::Signal::SIGTERM,
            Signal::Kill => nix::sys::signal::Signal::SIGKILL,
        };
        abx_domain::policy::guards::process::check_signal(&grant, signal as i64)?;
        let process = state.envd.processes.find(&req.process, &viewer(grant.identity()))?;
        process.signal(signal)?;
        if signal == nix::sys::signal::Signal::SIGKILL {
            // Answer once it is gone, so a List right after no longer shows it.
            process.exited(KILL_SETTLE).await;
        }
        Ok(Empty {})
    })
    .await
}

/// `Update`: resizes a terminal process.
pub async fn update(call: Call) -> Response {
    call.unary(|state, grant, req: UpdateRequest| async move {
        let process = state.envd.processes.find(&req.process, &viewer(grant.identity()))?;
        if let Some(pty) = req.pty {
            process.resize(pty.size.cols, pty.size.rows)?;
        }
        Ok(Empty {})
    })
    .await
}
