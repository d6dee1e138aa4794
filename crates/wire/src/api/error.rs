//! The JSON error body every failing request answers with, and
//! [`ErrorCode`], the vocabulary of its `code` field.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// `{"error", "type", "code"?, "endpoint"?, "rule"?, "scope"?, "limit"?, "retry_after"?}`:
/// the reference server's error shape, which its client turns into typed exceptions.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(any(test, feature = "openapi"), derive(schemars::JsonSchema))]
pub struct ErrorBody {
    /// Human-readable message.
    pub error: String,
    /// Exception name (`ValueError`, `PolicyDenied`, `FileNotFoundError`, ...).
    #[serde(rename = "type")]
    pub error_type: String,
    /// Stable machine code (`endpoint_disabled`, `path_not_allowed`, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    /// Endpoint id the error concerns.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    /// Origin of the rule that decided a denial.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule: Option<String>,
    /// Scope the identity lacks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
    /// Identity that was refused a scope.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub identity: Option<String>,
    /// The limit that was exceeded (bytes for 413).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u64>,
    /// Seconds to wait before retrying (429).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after: Option<u64>,
}

impl ErrorBody {
    /// A body with just a message and an exception name.
    pub fn new(error: impl Into<String>, error_type: impl Into<String>) -> Self {
        ErrorBody {
            error: error.into(),
            error_type: error_type.into(),
            code: None,
            endpoint: None,
            rule: None,
            scope: None,
            identity: None,
            limit: None,
            retry_after: None,
        }
    }

    /// Sets the machine code.
    pub fn with_code(mut self, code: impl Into<String>) -> Self {
        self.code = Some(code.into());
        self
    }

    /// The machine code as an [`ErrorCode`], when the body has one.
    ///
    /// ```
    /// use abx_wire::api::error::{ErrorBody, ErrorCode};
    ///
    /// let body = ErrorBody::new("File already exists", "FileExistsError").with_code("file_exists");
    /// assert_eq!(body.error_code(), Some(ErrorCode::FileExists));
    /// assert_eq!(ErrorBody::new("Path not found", "FileNotFoundError").error_code(), None);
    /// ```
    pub fn error_code(&self) -> Option<ErrorCode> {
        self.code.as_deref().map(ErrorCode::from_wire)
    }
}

/// Declares [`ErrorCode`]: each variant and its wire spelling, once.
macro_rules! error_codes {
    ($($(#[$doc:meta])* $variant:ident = $wire:literal,)+) => {
        /// The machine code (`code`) of an error answer: one variant per code
        /// the daemon sends, so a caller matches on variants, not strings.
        ///
        /// A code this build does not know (a newer server's) is kept as
        /// [`ErrorCode::Other`]. The same vocabulary names the refusals of
        /// `POST /capabilities/check` ([`crate::api::Decision`]'s `code`).
        ///
        /// ```
        /// use abx_wire::api::error::ErrorCode;
        ///
        /// let code = ErrorCode::from_wire("path_not_allowed");
        /// assert_eq!(code, ErrorCode::PathNotAllowed);
        /// assert_eq!(code.as_str(), "path_not_allowed");
        /// assert!(code.is_policy_denial());
        /// assert_eq!(ErrorCode::from_wire("brand_new"), ErrorCode::Other("brand_new".into()));
        /// ```
        #[non_exhaustive]
        #[derive(Debug, Clone, PartialEq, Eq, Hash)]
        pub enum ErrorCode {
            $($(#[$doc])* $variant,)+
            /// A code this build does not know, as the server spelled it.
            Other(String),
        }

        impl ErrorCode {
            /// Every code this build knows (all but [`ErrorCode::Other`]).
            ///
            /// ```
            /// use abx_wire::api::error::ErrorCode;
            ///
            /// assert!(ErrorCode::KNOWN.contains(&ErrorCode::RateLimited));
            /// ```
            pub const KNOWN: &'static [ErrorCode] = &[$(ErrorCode::$variant),+];

            /// The code as the wire spells it.
            ///
            /// ```
            /// use abx_wire::api::error::ErrorCode;
            ///
            /// assert_eq!(ErrorCode::EndpointDisabled.as_str(), "endpoint_disabled");
            /// ```
            pub fn as_str(&self) -> &str {
                match self {
                    $(ErrorCode::$variant => $wire,)+
                    ErrorCode::Other(code) => code,
                }
            }

            /// The wire spelling of a known code (`None` for [`ErrorCode::Other`]).
            ///
            /// ```
            /// use abx_wire::api::error::ErrorCode;
            ///
            /// assert_eq!(ErrorCode::FileExists.known_str(), Some("file_exists"));
            /// ```
            pub fn known_str(&self) -> Option<&'static str> {
                match self {
                    $(ErrorCode::$variant => Some($wire),)+
                    ErrorCode::Other(_) => None,
                }
            }

            /// The code the wire spells `code`.
            ///
            /// ```
            /// use abx_wire::api::error::ErrorCode;
            ///
            /// assert_eq!(ErrorCode::from_wire("file_exists"), ErrorCode::FileExists);
            /// ```
            pub fn from_wire(code: &str) -> ErrorCode {
                match code {
                    $($wire => ErrorCode::$variant,)+
                    other => ErrorCode::Other(other.to_string()),
                }
            }
        }
    };
}

error_codes! {
    // Admission: every request on every port passes these checks first.
    /// No or wrong credentials (401).
    Unauthorized = "unauthorized",
    /// Several distinct credentials in one request (400).
    AmbiguousCredentials = "ambiguous_credentials",
    /// The endpoint is switched off; the body's `rule` says by what (404).
    EndpointDisabled = "endpoint_disabled",
    /// The identity lacks the scope in the body's `scope` (403).
    MissingScope = "missing_scope",
    /// Too many requests per minute; retry after `retry_after` seconds (429).
    RateLimited = "rate_limited",
    /// Too many requests at once; retry after `retry_after` seconds (429).
    ConcurrencyLimited = "concurrency_limited",
    /// The port holds as many connections as it may; this one was closed
    /// unread, after `Retry-After` (503).
    ConnectionLimit = "connection_limit",
    /// Too many failed authentications from this address; credentials are not
    /// checked again for `retry_after` seconds (429).
    AuthThrottled = "auth_throttled",
    /// A signed envd `/files` URL's signature is malformed or wrong (401).
    InvalidSignature = "invalid_signature",
    /// A signed envd `/files` URL's signature has expired (401).
    SignatureExpired = "signature_expired",
    /// The `Content-Length` header cannot be read (400).
    InvalidContentLength = "invalid_content_length",
    /// A query parameter was given more than once (400).
    DuplicateParameter = "duplicate_parameter",
    /// The path exists with another method (405).
    MethodNotAllowed = "method_not_allowed",
    /// The body is over the limit in the body's `limit` (413).
    PayloadTooLarge = "payload_too_large",
    /// The endpoint is declared but this build does not serve it (501).
    NotImplemented = "not_implemented",
    /// The endpoint id is not in the table (`POST /capabilities/check`).
    UnknownEndpoint = "unknown_endpoint",
    /// An unexpected failure; details are in the server's log (500).
    Internal = "internal",
    /// The client cancelled the call (an MCP tool call, 400).
    Cancelled = "cancelled",
    /// A resume asked for events no longer held, not even as a count (an MCP stream forgotten, 410).
    DataLoss = "data_loss",
    // Paths.
    /// A path is empty, contains NUL or is too long (400).
    InvalidPath = "invalid_path",
    /// A path resolves outside every allowed directory (403).
    PathNotAllowed = "path_not_allowed",
    /// A path goes through a symlink where the policy forbids them (403).
    SymlinkDenied = "symlink_denied",
    /// A path matches a deny rule (403).
    PathDenied = "path_denied",
    /// A write or delete under a read-only rule (403).
    ReadOnly = "read_only",
    /// The operating system refused access (403).
    PermissionDenied = "permission_denied",
    /// The upload's extension is not allowed (403).
    ExtensionNotAllowed = "extension_not_allowed",
    // Files.
    /// The target exists and overwriting is off (409).
    FileExists = "file_exists",
    /// A directory is in the way of a file operation (409).
    IsADirectory = "is_a_directory",
    /// A file is in the way of a directory operation (409).
    NotADirectory = "not_a_directory",
    /// The disk or the quota is full; nothing was written (507).
    InsufficientStorage = "insufficient_storage",
    /// Too many watches are open, or the system's inotify resources are used up (429).
    WatchLimit = "watch_limit",
    /// No resumable upload is in progress for the path (404).
    UploadNotFound = "upload_not_found",
    /// A resumable upload continued from the wrong offset (409).
    OffsetMismatch = "offset_mismatch",
    /// Another request is writing the same resumable upload (409).
    UploadBusy = "upload_busy",
    /// The upload's body ended early; nothing was written (400).
    UploadInterrupted = "upload_interrupted",
    /// The requested range is outside the file (416).
    RangeNotSatisfiable = "range_not_satisfiable",
    // Processes and commands.
    /// A command line is malformed (400).
    CommandInvalid = "command_invalid",
    /// The program is not allowed by the policy (403).
    CommandNotAllowed = "command_not_allowed",
    /// A shell is not allowed here (403).
    ShellNotAllowed = "shell_not_allowed",
    /// A process request is malformed (400).
    ProcessInvalid = "process_invalid",
    /// The process request is refused by the policy (403).
    ProcessDenied = "process_denied",
    /// The signal is not allowed (403).
    SignalNotAllowed = "signal_not_allowed",
    /// The user to run as does not exist (400).
    UserUnknown = "user_unknown",
    /// Running as another user is not allowed here (403).
    UserNotAllowed = "user_not_allowed",
    /// Too many processes run already (429).
    ProcessLimit = "process_limit",
    /// The program could not be started.
    SpawnFailed = "spawn_failed",
    /// The run took longer than its timeout and was killed.
    Timeout = "timeout",
    /// The output is over the limit.
    OutputTooLarge = "output_too_large",
    /// No registered command has this name (404).
    CommandNotFound = "command_not_found",
    /// The registered command could not be started.
    CommandNotStarted = "command_not_started",
    /// The registered command failed.
    CommandFailed = "command_failed",
    /// The registered command's output is not what it declares.
    InvalidOutput = "invalid_output",
    // Terminals.
    /// The shell to start does not exist.
    ShellNotFound = "shell_not_found",
    /// Too many terminal sessions are open (429).
    SessionLimit = "session_limit",
    // Environment.
    /// An environment assignment is malformed (400).
    EnvInvalid = "env_invalid",
    /// The variable is denied by the policy (403).
    EnvVarDenied = "env_var_denied",
    /// The variable is protected or not in the allow-list (403).
    EnvVarNotAllowed = "env_var_not_allowed",
    // Code.
    /// The language is not allowed by the policy (403).
    LanguageNotAllowed = "language_not_allowed",
    // Browser.
    /// The URL cannot be parsed (400).
    UrlInvalid = "url_invalid",
    /// The URL's scheme, or the URL itself, is not allowed by the policy (403).
    UrlNotAllowed = "url_not_allowed",
    /// The URL resolves to a loopback, link-local or private address (403).
    UrlDenied = "url_denied",
    /// The browser is not installed or could not start (503).
    BrowserUnavailable = "browser_unavailable",
    /// The browser crashed (503).
    BrowserCrashed = "browser_crashed",
    /// No element matches the selector (404).
    SelectorNotFound = "selector_not_found",
    /// The page could not be loaded (502).
    NavigationFailed = "navigation_failed",
    /// The page's script threw (400).
    ScriptError = "script_error",
}

impl ErrorCode {
    /// Whether the policy refused the request (as opposed to the operation
    /// failing): the Python client's `PolicyDeniedError` family.
    ///
    /// ```
    /// use abx_wire::api::error::ErrorCode;
    ///
    /// assert!(ErrorCode::CommandNotAllowed.is_policy_denial());
    /// assert!(!ErrorCode::FileExists.is_policy_denial());
    /// ```
    pub fn is_policy_denial(&self) -> bool {
        matches!(
            self,
            ErrorCode::EndpointDisabled
                | ErrorCode::MissingScope
                | ErrorCode::PathNotAllowed
                | ErrorCode::SymlinkDenied
                | ErrorCode::PathDenied
                | ErrorCode::ReadOnly
                | ErrorCode::ExtensionNotAllowed
                | ErrorCode::CommandNotAllowed
                | ErrorCode::ShellNotAllowed
                | ErrorCode::ProcessDenied
                | ErrorCode::SignalNotAllowed
                | ErrorCode::UserNotAllowed
                | ErrorCode::EnvVarDenied
                | ErrorCode::EnvVarNotAllowed
                | ErrorCode::LanguageNotAllowed
                | ErrorCode::UrlNotAllowed
                | ErrorCode::UrlDenied
        )
    }

    /// Whether the daemon refused the request for load before reading it or
    /// before any handler ran (the admission pipeline's rate and concurrency
    /// limits, a port's connection limit): retrying later is safe for every
    /// endpoint.
    ///
    /// ```
    /// use abx_wire::api::error::ErrorCode;
    ///
    /// assert!(ErrorCode::ConcurrencyLimited.is_rate_limit());
    /// assert!(ErrorCode::ConnectionLimit.is_rate_limit());
    /// assert!(!ErrorCode::ProcessLimit.is_rate_limit());
    /// ```
    pub fn is_rate_limit(&self) -> bool {
        matches!(self, ErrorCode::RateLimited | ErrorCode::ConcurrencyLimited | ErrorCode::ConnectionLimit)
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for ErrorCode {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for ErrorCode {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d).map(|code| ErrorCode::from_wire(&code))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_round_trips_and_unknown_ones_are_kept() {
        for code in ErrorCode::KNOWN {
            assert_eq!(&ErrorCode::from_wire(code.as_str()), code);
            let json = serde_json::to_string(code).expect("serialises");
            assert_eq!(serde_json::from_str::<ErrorCode>(&json).expect("parses"), *code);
        }
        assert_eq!(ErrorCode::from_wire("later_code").as_str(), "later_code");
    }
}
