//! Errors of the companion client.

use crate::api::ErrorBody;

/// Why a client call failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The server could not be reached, or the connection broke.
    #[error("cannot reach the server: {0}")]
    Transport(#[source] reqwest::Error),
    /// The server answered with an error.
    #[error("{} (HTTP {status}{})", body.error, body.code.as_deref().map(|c| format!(", {c}")).unwrap_or_default())]
    Api {
        /// HTTP status.
        status: u16,
        /// The error body.
        body: Box<ErrorBody>,
    },
    /// The answer was not what the API promises.
    #[error("protocol error: {0}")]
    Protocol(String),
    /// The token cannot be sent in a header.
    #[error("the token contains characters that cannot be sent in a header")]
    InvalidToken,
    /// No endpoint has this id.
    #[error("unknown endpoint '{0}'")]
    UnknownEndpoint(String),
    /// The terminal WebSocket could not be opened or broke.
    #[error("terminal connection: {0}")]
    WebSocket(String),
}

impl ClientError {
    /// The error body's machine code, for error answers.
    pub fn code(&self) -> Option<&str> {
        match self {
            ClientError::Api { body, .. } => body.code.as_deref(),
            _ => None,
        }
    }

    /// The HTTP status, for error answers.
    pub fn status(&self) -> Option<u16> {
        match self {
            ClientError::Api { status, .. } => Some(*status),
            _ => None,
        }
    }
}
