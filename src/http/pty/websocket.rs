//! The terminal WebSocket (`GET /pty?session_id=<id>` on the PTY port): the
//! handshake's refusals as JSON error bodies, then one loop per connection
//! that forwards output and the shell's exit to the client and its input,
//! resizes and signals to the session.
//!
//! Dropping the connection only detaches it: the session keeps running and
//! a new connection replays its scrollback.

use std::collections::VecDeque;
use std::sync::Arc;

use abx_domain::policy::{owner, Grant, Viewer};
use abx_domain::process::ExitStatus;
use abx_domain::pty::request::{parse_message, ClientMessage};
use abx_domain::pty::{Session, TerminalError, Update};
use abx_wire::api::Fault;
use abx_wire::api::PtyMessage;
use axum::extract::ws::rejection::WebSocketUpgradeRejection;
use axum::extract::ws::{CloseFrame, Message, Utf8Bytes, WebSocket, WebSocketUpgrade};
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use serde::Deserialize;
use tokio_util::sync::CancellationToken;

use crate::http::error::ApiError;
use crate::http::extract::Query;
use crate::http::AppState;

/// The close code of a connection to an unknown or ended session (policy violation, as the reference).
const UNKNOWN_SESSION: u16 = 1008;
/// Largest message a client may send.
const MAX_MESSAGE: usize = 1024 * 1024;
/// Input accepted but not yet written to the terminal before the connection stops reading.
const MAX_PENDING_INPUT: usize = 1024 * 1024;
/// How long input a client sent just before leaving may take to reach a shell that reads slowly.
const INPUT_FLUSH: std::time::Duration = std::time::Duration::from_secs(1);

/// The query of the WebSocket URL.
#[derive(Debug, Deserialize)]
pub struct ConnectQuery {
    /// The session to attach to.
    pub session_id: Option<String>,
    /// Resume at this output offset (the `offset` of the last `output`
    /// received) rather than replay the scrollback (an extension).
    pub offset: Option<u64>,
}

/// `GET /pty?session_id=<id>`: attaches to a session; an unknown one is
/// accepted and closed at once with code 1008 and a reason naming it.
pub async fn connect(
    State(app): State<AppState>,
    grant: abx_domain::policy::Grant,
    Query(query): Query<ConnectQuery>,
    upgrade: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> Response {
    let Some(id) = query.session_id.filter(|id| !id.is_empty()) else {
        return ApiError::bad_request("Missing session_id parameter").into_response();
    };
    let session = app.terminals.get(&id, &viewer(&grant));
    let upgrade = match (upgrade, session.as_ref()) {
        (Ok(upgrade), _) => upgrade,
        (Err(_), Err(_)) => return ApiError::from(TerminalError::NotFound(id)).into_response(),
        (Err(rejection), Ok(_)) => {
            let message = format!("Expected a WebSocket upgrade: {rejection}");
            return ApiError::of(Fault::UpgradeRequired, message).into_response();
        }
    };
    let Ok(session) = session else {
        // As the reference: the handshake succeeds and the socket closes with a reason,
        // so the client reports the session closed rather than a network failure.
        return upgrade.on_upgrade(move |mut socket| async move {
            let reason = Utf8Bytes::from(format!("Unknown session: {id}"));
            let _ = socket.send(Message::Close(Some(CloseFrame { code: UNKNOWN_SESSION, reason }))).await;
        });
    };
    // Refused before the upgrade; the offset stays valid (output only grows).
    if let Some(offset) = query.offset {
        if let Err(e) = session.check_offset(offset) {
            return ApiError::from(e).into_response();
        }
    }
    let shutdown = app.shutdown.clone();
    upgrade.max_message_size(MAX_MESSAGE).on_upgrade(move |socket| serve(socket, session, query.offset, shutdown))
}

/// One connection's life: `started`, then output, input, resizes and
/// signals until the shell exits, the client leaves or the server stops.
async fn serve(mut socket: WebSocket, session: Arc<Session>, offset: Option<u64>, shutdown: CancellationToken) {
    let mut attachment = match offset {
        Some(offset) => session.attach_at(offset),
        None => session.attach(),
    };
    let (cols, rows) = session.size();
    let started = PtyMessage {
        session_id: Some(session.id().to_string()),
        pid: Some(session.pid()),
        cols: Some(cols),
        rows: Some(rows),
        ..PtyMessage::event("started")
    };
    if send(&mut socket, &started).await.is_err() {
        return;
    }
    let mut input: VecDeque<Bytes> = VecDeque::new();
    let mut pending = 0usize;
    let exit = loop {
        let next_input = input.front().cloned();
        tokio::select! {
            () = shutdown.cancelled() => {
                close(&mut socket, 1001, "server shutting down").await;
                break None;
            }
            update = attachment.next() => match update {
                Update::Output { text, skipped, end } => {
                    if skipped > 0 {
                        let notice = PtyMessage { bytes: Some(skipped), ..PtyMessage::event("skipped") };
                        if send(&mut socket, &notice).await.is_err() {
                            break None;
                        }
                    }
                    if !text.is_empty() {
                        let output = PtyMessage { offset: Some(end), ..PtyMessage::output(text) };
                        if send(&mut socket, &output).await.is_err() {
                            break None;
                        }
                    }
                }
                Update::Exited(exit) => break Some(exit),
            },
            written = write(&session, next_input), if !input.is_empty() => match written {
                Ok(n) => {
                    pending -= n;
                    if let Some(front) = input.front_mut() {
                        *front = front.slice(n..);
                        if front.is_empty() {
                            input.pop_front();
                        }
                    }
                }
                Err(e) => {
                    tracing::debug!(session = session.id(), error = %e, "terminal input dropped");
                    input.clear();
                    pending = 0;
                }
            },
            incoming = socket.recv(), if pending < MAX_PENDING_INPUT => {
                let text = match incoming {
                    Some(Ok(Message::Text(text))) => text.as_str().to_string(),
                    Some(Ok(Message::Binary(bytes))) => String::from_utf8_lossy(&bytes).into_owned(),
                    Some(Ok(Message::Ping(_) | Message::Pong(_))) => continue,
                    Some(Ok(Message::Close(_)) | Err(_)) | None => break None,
                };
                match parse_message(&text, session.size()) {
                    Ok(ClientMessage::Input(data)) if !data.is_empty() => {
                        pending += data.len();
                        input.push_back(Bytes::from(data.into_bytes()));
                    }
                    Ok(ClientMessage::Input(_)) => {}
                    Ok(ClientMessage::Resize(cols, rows)) => session.resize(cols, rows),
                    Ok(ClientMessage::Signal(signal)) => session.signal(signal),
                    Err(problem) => {
                        let error = PtyMessage { message: Some(problem), ..PtyMessage::event("error") };
                        if send(&mut socket, &error).await.is_err() {
                            break None;
                        }
                    }
                }
            }
        }
    };
    let delivered = attachment.is_done();
    // Detached first: whoever asks after the client hears of the exit sees no
    // connection, and the shell's output no longer waits for this reader.
    drop(attachment);
    if exit.is_none() && !shutdown.is_cancelled() {
        // A client that types and leaves at once still has its keystrokes delivered.
        let _ = tokio::time::timeout(INPUT_FLUSH, flush(&session, input)).await;
    }
    if let Some(exit) = exit {
        let _ = send(&mut socket, &exited(&session, exit)).await;
        close(&mut socket, 1000, "shell exited").await;
    }
    tracing::debug!(session = session.id(), delivered_exit = delivered, "terminal connection ended");
}

/// Writes all of `input` to the terminal (until it is gone).
async fn flush(session: &Session, input: VecDeque<Bytes>) {
    for mut chunk in input {
        while !chunk.is_empty() {
            match session.write_input(&chunk).await {
                Ok(n) => chunk = chunk.slice(n..),
                Err(_) => return,
            }
        }
    }
}

async fn write(session: &Session, chunk: Option<Bytes>) -> std::io::Result<usize> {
    let chunk = chunk.unwrap_or_default();
    session.write_input(&chunk).await
}

fn exited(session: &Session, exit: ExitStatus) -> PtyMessage {
    PtyMessage {
        session_id: Some(session.id().to_string()),
        exit_code: Some(exit.code()),
        signal: exit.signal(),
        ..PtyMessage::event("exited")
    }
}

async fn send(socket: &mut WebSocket, message: &PtyMessage) -> Result<(), axum::Error> {
    let text = serde_json::to_string(message).unwrap_or_default();
    socket.send(Message::Text(Utf8Bytes::from(text))).await
}

async fn close(socket: &mut WebSocket, code: u16, reason: &'static str) {
    let _ = socket.send(Message::Close(Some(CloseFrame { code, reason: Utf8Bytes::from_static(reason) }))).await;
}

/// The caller as the terminals' owner checks see it.
pub fn viewer(grant: &Grant) -> Viewer {
    Viewer::new(grant.identity(), owner::TERMINAL_ADMIN)
}
