//! Wire types of the terminal group: `/pty/sessions*` and the messages of
//! the WebSocket on the PTY port.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// `POST /pty/sessions` body, as the companion client sends it (the server
/// also takes the reference's looser forms: numbers as strings and so on).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(any(test, feature = "openapi"), derive(schemars::JsonSchema))]
pub struct PtyCreateRequest {
    /// Absolute path of the shell (default `/bin/bash`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(any(test, feature = "openapi"), schemars(example = &"/bin/sh"))]
    pub shell: Option<String>,
    /// Terminal width (default 80).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cols: Option<u16>,
    /// Terminal height (default 24).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rows: Option<u16>,
    /// Variables added to the shell's environment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env: Option<BTreeMap<String, String>>,
}

/// Answer of `POST /pty/sessions`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(any(test, feature = "openapi"), derive(schemars::JsonSchema))]
pub struct PtyCreated {
    /// The session id.
    pub session_id: String,
    /// Where to attach: `ws://<host the caller used>:<PTY port>/pty?session_id=<id>`.
    pub ws_url: String,
    /// The shell's pid.
    pub pid: i32,
}

/// One terminal session (`GET /pty/sessions/{id}`, list entries, resize answer).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(any(test, feature = "openapi"), derive(schemars::JsonSchema))]
pub struct PtySessionInfo {
    /// The session id.
    pub id: String,
    /// The shell's pid.
    pub pid: i32,
    /// Unix time of creation, in seconds.
    pub created_at: f64,
    /// Terminal width.
    pub cols: u16,
    /// Terminal height.
    pub rows: u16,
    /// Whether the shell still runs.
    pub alive: bool,
    /// The shell's exit code once it exited (minus the signal number when a signal killed it).
    #[serde(default)]
    pub exit_code: Option<i32>,
    /// The shell.
    #[serde(default)]
    pub shell: String,
    /// WebSocket connections attached now.
    #[serde(default)]
    pub attached: usize,
}

/// Answer of `GET /pty/sessions`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(any(test, feature = "openapi"), derive(schemars::JsonSchema))]
pub struct PtySessionList {
    /// Sessions, oldest first.
    pub sessions: Vec<PtySessionInfo>,
}

/// `POST /pty/sessions/{id}/resize` body.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(any(test, feature = "openapi"), derive(schemars::JsonSchema))]
pub struct PtyResizeRequest {
    /// New width.
    pub cols: u16,
    /// New height.
    pub rows: u16,
}

/// Answer of `DELETE /pty/sessions/{id}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(any(test, feature = "openapi"), derive(schemars::JsonSchema))]
pub struct PtyClosed {
    /// Always `closed`.
    pub status: String,
    /// The session id.
    pub session_id: String,
}

/// A message the client sends on the WebSocket.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(any(test, feature = "openapi"), derive(schemars::JsonSchema))]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum PtyClientMessage {
    /// Keystrokes or text for the terminal.
    Input {
        /// The text.
        data: String,
    },
    /// A new terminal size.
    Resize {
        /// Width.
        cols: u16,
        /// Height.
        rows: u16,
    },
    /// A signal for the terminal's foreground process group.
    Signal {
        /// `SIGINT`, `SIGTERM`, `SIGKILL`, `SIGHUP` or `SIGQUIT`.
        signal: String,
    },
}

/// A message the server sends on the WebSocket: `output` (terminal text in
/// `data`) or `event` (`started`, `exited`, `skipped`, `error`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(any(test, feature = "openapi"), derive(schemars::JsonSchema))]
pub struct PtyMessage {
    /// `output` or `event`.
    #[serde(rename = "type")]
    pub kind: String,
    /// Terminal text (`output`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<String>,
    /// The event's name (`event`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event: Option<String>,
    /// The session (`started`, `exited`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// The shell's pid (`started`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<i32>,
    /// Terminal width (`started`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cols: Option<u16>,
    /// Terminal height (`started`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rows: Option<u16>,
    /// The shell's exit code (`exited`; minus the signal number when a signal killed it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// The signal that killed the shell (`exited`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<i32>,
    /// Output bytes this connection missed because it fell too far behind (`skipped`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes: Option<u64>,
    /// What was wrong with a client message (`error`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The terminal's output offset after this `output`'s text (an
    /// extension): a client that reconnects with `?offset=` it resumes there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offset: Option<u64>,
}

impl PtyMessage {
    /// An `output` message.
    pub fn output(data: String) -> Self {
        PtyMessage { kind: "output".into(), data: Some(data), ..PtyMessage::default() }
    }

    /// An `event` message named `event`.
    pub fn event(event: &str) -> Self {
        PtyMessage { kind: "event".into(), event: Some(event.into()), ..PtyMessage::default() }
    }

    /// Whether this is the `event` named `name`.
    pub fn is_event(&self, name: &str) -> bool {
        self.kind == "event" && self.event.as_deref() == Some(name)
    }
}
