//! [`ClientError`]: why a call failed, as a matchable enum.
//!
//! An error answer keeps its HTTP status, the server's [`ErrorCode`] (the
//! daemon's vocabulary, one variant per code) and the whole body; a
//! timeout, a transport failure and a local file's error are variants of
//! their own, so a caller decides by matching, never by parsing messages.

use std::path::PathBuf;
use std::time::Duration;

use abx_wire::api::{ErrorBody, ErrorCode};

/// Why a client call failed.
///
/// ```
/// use abx_wire::api::ErrorCode;
/// use abx_client::{Client, ClientError};
///
/// # async fn demo(client: Client) -> Result<(), ClientError> {
/// match client.mkdir("project").await {
///     Ok(_) => {}
///     Err(ClientError::Api { code: Some(ErrorCode::PathNotAllowed), .. }) => {
///         eprintln!("the policy keeps us out of there");
///     }
///     Err(e) if e.is_retryable() => eprintln!("try again later: {e}"),
///     Err(e) => return Err(e),
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    /// The server could not be reached, or the connection broke.
    #[error("cannot reach the server: {0}")]
    Transport(#[source] reqwest::Error),
    /// The call's timeout, or the client's deadline, passed first.
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    /// The server answered with an error.
    #[error("{} (HTTP {status}{})", body.error, code.as_ref().map(|c| format!(", {c}")).unwrap_or_default())]
    Api {
        /// HTTP status.
        status: u16,
        /// The body's machine code, when it has one.
        code: Option<ErrorCode>,
        /// The whole error body (`type`, `rule`, `scope`, `limit`, `retry_after`, ...).
        body: Box<ErrorBody>,
    },
    /// The answer was not what the protocol promises.
    #[error("protocol error: {0}")]
    Protocol(String),
    /// A local file could not be read or written (uploads and downloads).
    #[error("{}: {source}", path.display())]
    Local {
        /// The local file.
        path: PathBuf,
        /// What went wrong.
        #[source]
        source: std::io::Error,
    },
    /// The token cannot be sent in a header.
    #[error("the token contains characters that cannot be sent in a header")]
    InvalidToken,
    /// No endpoint has this id on this client's port.
    #[error("no endpoint '{0}' on this client's port")]
    UnknownEndpoint(String),
    /// The terminal WebSocket could not be opened or broke.
    #[error("terminal connection: {0}")]
    WebSocket(String),
}

impl ClientError {
    /// The error answer for `status` and `body`, its code parsed.
    ///
    /// ```
    /// use abx_wire::api::{ErrorBody, ErrorCode};
    /// use abx_client::ClientError;
    ///
    /// let err = ClientError::api(409, ErrorBody::new("File already exists", "FileExistsError").with_code("file_exists"));
    /// assert_eq!(err.code(), Some(&ErrorCode::FileExists));
    /// assert_eq!(err.to_string(), "File already exists (HTTP 409, file_exists)");
    /// ```
    pub fn api(status: u16, body: ErrorBody) -> Self {
        ClientError::Api { status, code: body.error_code(), body: Box::new(body) }
    }

    /// The server's machine code, for error answers that carry one.
    ///
    /// ```
    /// use abx_wire::api::{ErrorBody, ErrorCode};
    /// use abx_client::ClientError;
    ///
    /// let err = ClientError::api(429, ErrorBody::new("Rate limit exceeded", "RateLimited").with_code("rate_limited"));
    /// assert_eq!(err.code(), Some(&ErrorCode::RateLimited));
    /// assert_eq!(ClientError::Protocol("x".into()).code(), None);
    /// ```
    pub fn code(&self) -> Option<&ErrorCode> {
        match self {
            ClientError::Api { code, .. } => code.as_ref(),
            _ => None,
        }
    }

    /// The HTTP status, for error answers.
    ///
    /// ```
    /// use abx_wire::api::ErrorBody;
    /// use abx_client::ClientError;
    ///
    /// assert_eq!(ClientError::api(404, ErrorBody::new("gone", "FileNotFoundError")).status(), Some(404));
    /// ```
    pub fn status(&self) -> Option<u16> {
        match self {
            ClientError::Api { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// The whole error body, for error answers.
    ///
    /// ```
    /// use abx_wire::api::ErrorBody;
    /// use abx_client::ClientError;
    ///
    /// let err = ClientError::api(400, ErrorBody::new("bad", "ValueError"));
    /// assert_eq!(err.body().map(|b| b.error_type.as_str()), Some("ValueError"));
    /// ```
    pub fn body(&self) -> Option<&ErrorBody> {
        match self {
            ClientError::Api { body, .. } => Some(body),
            _ => None,
        }
    }

    /// How long the server asks to wait before retrying (429 answers).
    ///
    /// ```
    /// use std::time::Duration;
    /// use abx_wire::api::ErrorBody;
    /// use abx_client::ClientError;
    ///
    /// let mut body = ErrorBody::new("Rate limit exceeded", "RateLimited").with_code("rate_limited");
    /// body.retry_after = Some(3);
    /// assert_eq!(ClientError::api(429, body).retry_after(), Some(Duration::from_secs(3)));
    /// ```
    pub fn retry_after(&self) -> Option<Duration> {
        self.body().and_then(|b| b.retry_after).map(Duration::from_secs)
    }

    /// Whether the thing asked for does not exist: a 404 that is not a
    /// disabled endpoint (a missing file, process, session, context, ...).
    ///
    /// ```
    /// use abx_wire::api::ErrorBody;
    /// use abx_client::ClientError;
    ///
    /// assert!(ClientError::api(404, ErrorBody::new("Path not found", "FileNotFoundError")).is_not_found());
    /// let disabled = ErrorBody::new("off", "EndpointDisabled").with_code("endpoint_disabled");
    /// assert!(!ClientError::api(404, disabled).is_not_found());
    /// ```
    pub fn is_not_found(&self) -> bool {
        matches!(self, ClientError::Api { status: 404, code, .. } if code.as_ref() != Some(&ErrorCode::EndpointDisabled))
    }

    /// Whether time ran out: this client's timeout or deadline, or the
    /// server's own timeout of the work (`type: TimeoutError`, code `timeout`).
    ///
    /// ```
    /// use std::time::Duration;
    /// use abx_wire::api::ErrorBody;
    /// use abx_client::ClientError;
    ///
    /// assert!(ClientError::Timeout(Duration::from_secs(1)).is_timeout());
    /// assert!(ClientError::api(408, ErrorBody::new("timed out", "TimeoutError")).is_timeout());
    /// ```
    pub fn is_timeout(&self) -> bool {
        match self {
            ClientError::Timeout(_) => true,
            ClientError::Transport(e) => e.is_timeout(),
            ClientError::Api { code, body, .. } => {
                code.as_ref() == Some(&ErrorCode::Timeout) || body.error_type == "TimeoutError"
            }
            _ => false,
        }
    }

    /// Whether the same call may succeed later: the server could not be
    /// reached, shed load (429, 503) or a proxy failed (502, 504). The
    /// client retries these itself where that is safe ([`RetryPolicy`](super::RetryPolicy)).
    ///
    /// ```
    /// use abx_wire::api::ErrorBody;
    /// use abx_client::ClientError;
    ///
    /// assert!(ClientError::api(503, ErrorBody::new("shutting down", "Unavailable")).is_retryable());
    /// assert!(!ClientError::api(400, ErrorBody::new("bad", "ValueError")).is_retryable());
    /// ```
    pub fn is_retryable(&self) -> bool {
        match self {
            ClientError::Transport(_) => true,
            ClientError::Api { status, .. } => matches!(status, 429 | 502 | 503 | 504),
            _ => false,
        }
    }
}
