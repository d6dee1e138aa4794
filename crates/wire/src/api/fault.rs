//! [`Fault`]: the one table of the daemon's error answers. Each row is one
//! distinct answer and carries everything a port needs to render it: the HTTP
//! status and the reference's exception type (the API and PTY ports' JSON
//! error), the machine [`ErrorCode`] when the answer has one, and the
//! [`ConnectCode`] (envd's Connect protocol).
//!
//! A wire code can be several rows: `selector_not_found` is a `ValueError`
//! when nothing matches and a `TimeoutError` when the wait ran out, and a
//! failed spawn reports the exception type of its errno. A row without a
//! code is an answer the reference sends without one (`FileNotFoundError`,
//! a plain `ValueError`).
//!
//! Domain errors name their row (`fn fault(&self) -> Fault`); each port
//! renders a row in one place. Nothing here knows about HTTP servers.

use super::error::ErrorCode;

/// A Connect error code (the Connect protocol's list, as envd answers them).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ConnectCode {
    /// The call was cancelled.
    Canceled,
    /// Unknown error.
    Unknown,
    /// A malformed request.
    InvalidArgument,
    /// The deadline passed.
    DeadlineExceeded,
    /// Nothing by that name.
    NotFound,
    /// It exists already.
    AlreadyExists,
    /// Not allowed.
    PermissionDenied,
    /// A limit is reached.
    ResourceExhausted,
    /// Not in the state the call needs.
    FailedPrecondition,
    /// Not served.
    Unimplemented,
    /// A server fault.
    Internal,
    /// Shutting down.
    Unavailable,
    /// No or wrong credentials.
    Unauthenticated,
    /// Data was lost (output a stream could not deliver).
    DataLoss,
}

impl ConnectCode {
    /// The wire name (`not_found`).
    ///
    /// ```
    /// use abx_wire::api::fault::ConnectCode;
    ///
    /// assert_eq!(ConnectCode::ResourceExhausted.as_str(), "resource_exhausted");
    /// ```
    pub fn as_str(self) -> &'static str {
        match self {
            ConnectCode::Canceled => "canceled",
            ConnectCode::Unknown => "unknown",
            ConnectCode::InvalidArgument => "invalid_argument",
            ConnectCode::DeadlineExceeded => "deadline_exceeded",
            ConnectCode::NotFound => "not_found",
            ConnectCode::AlreadyExists => "already_exists",
            ConnectCode::PermissionDenied => "permission_denied",
            ConnectCode::ResourceExhausted => "resource_exhausted",
            ConnectCode::FailedPrecondition => "failed_precondition",
            ConnectCode::Unimplemented => "unimplemented",
            ConnectCode::Internal => "internal",
            ConnectCode::Unavailable => "unavailable",
            ConnectCode::Unauthenticated => "unauthenticated",
            ConnectCode::DataLoss => "data_loss",
        }
    }

    /// The HTTP status of a unary error with this code (the Connect specification's table).
    ///
    /// ```
    /// use abx_wire::api::fault::ConnectCode;
    ///
    /// assert_eq!(ConnectCode::NotFound.http_status(), 404);
    /// ```
    pub fn http_status(self) -> u16 {
        match self {
            ConnectCode::Canceled => 499,
            ConnectCode::Unknown | ConnectCode::Internal | ConnectCode::DataLoss => 500,
            ConnectCode::InvalidArgument | ConnectCode::FailedPrecondition => 400,
            ConnectCode::DeadlineExceeded => 504,
            ConnectCode::NotFound => 404,
            ConnectCode::AlreadyExists => 409,
            ConnectCode::PermissionDenied => 403,
            ConnectCode::ResourceExhausted => 429,
            ConnectCode::Unimplemented => 501,
            ConnectCode::Unavailable => 503,
            ConnectCode::Unauthenticated => 401,
        }
    }
}

/// Declares [`Fault`]: each row with its status, exception type, Connect code
/// and, when it has one, its machine code, once.
macro_rules! faults {
    ($($(#[$doc:meta])* $row:ident: $status:literal $type:literal $connect:ident $($code:ident)?,)+) => {
        /// One distinct error answer of the daemon; see the [module docs](self).
        ///
        /// ```
        /// use abx_wire::api::fault::{ConnectCode, Fault};
        /// use abx_wire::api::ErrorCode;
        ///
        /// let row = Fault::FileExists;
        /// assert_eq!((row.status(), row.error_type()), (409, "FileExistsError"));
        /// assert_eq!(row.code(), Some(ErrorCode::FileExists));
        /// assert_eq!(row.connect(), ConnectCode::AlreadyExists);
        /// assert_eq!(Fault::FileNotFound.code(), None);
        /// ```
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum Fault {
            $($(#[$doc])* $row,)+
        }

        impl Fault {
            /// Every row.
            pub const ALL: &'static [Fault] = &[$(Fault::$row),+];

            /// The HTTP status of the API and PTY ports' answer.
            pub fn status(self) -> u16 {
                match self { $(Fault::$row => $status,)+ }
            }

            /// The exception name the reference reports in the body's `type`.
            pub fn error_type(self) -> &'static str {
                match self { $(Fault::$row => $type,)+ }
            }

            /// The Connect code envd's port answers with.
            pub fn connect(self) -> ConnectCode {
                match self { $(Fault::$row => ConnectCode::$connect,)+ }
            }

            /// The machine code (`code`), when the answer has one.
            pub fn code(self) -> Option<ErrorCode> {
                match self { $(Fault::$row => faults!(@code $($code)?),)+ }
            }
        }
    };
    (@code) => { None };
    (@code $code:ident) => { Some(ErrorCode::$code) };
}

faults! {
    // Admission and policy refusals (`Denial`).
    /// No or wrong credentials.
    Unauthorized: 401 "AuthError" Unauthenticated Unauthorized,
    /// Several distinct credentials in one request.
    AmbiguousCredentials: 400 "ValueError" InvalidArgument AmbiguousCredentials,
    /// A signed envd `/files` URL's signature is malformed or wrong.
    InvalidSignature: 401 "AuthError" Unauthenticated InvalidSignature,
    /// A signed envd `/files` URL's signature has expired.
    SignatureExpired: 401 "AuthError" Unauthenticated SignatureExpired,
    /// A switched-off endpoint or group, as the reference answers it.
    EndpointDisabled: 404 "ValueError" PermissionDenied EndpointDisabled,
    /// An endpoint a preset closes as a power (`preset:NAME:powers.POWER`):
    /// a permission refusal, with the same code.
    PowerClosed: 403 "ValueError" PermissionDenied EndpointDisabled,
    /// The identity lacks a scope.
    MissingScope: 403 "PolicyDenied" PermissionDenied MissingScope,
    /// Too many requests per minute.
    RateLimited: 429 "RateLimited" ResourceExhausted RateLimited,
    /// Too many failed authentications from an address.
    AuthThrottled: 429 "RateLimited" ResourceExhausted AuthThrottled,
    /// Too many requests at once.
    ConcurrencyLimited: 429 "RateLimited" ResourceExhausted ConcurrencyLimited,
    /// The port holds as many connections as it may (answered before any request is read).
    ConnectionLimit: 503 "ServiceUnavailable" Unavailable ConnectionLimit,
    /// A query parameter given twice.
    DuplicateParameter: 400 "ValueError" InvalidArgument DuplicateParameter,
    /// An unreadable `Content-Length`.
    InvalidContentLength: 400 "ValueError" InvalidArgument InvalidContentLength,
    /// A body (or a file, an archive, an inflated body) over its limit.
    PayloadTooLarge: 413 "ValueError" ResourceExhausted PayloadTooLarge,
    /// A path that is empty, contains NUL or is too long.
    InvalidPath: 400 "ValueError" InvalidArgument InvalidPath,
    /// A path outside every allowed directory.
    PathNotAllowed: 403 "PolicyDenied" PermissionDenied PathNotAllowed,
    /// A path through a forbidden symlink.
    SymlinkDenied: 403 "PolicyDenied" PermissionDenied SymlinkDenied,
    /// A path matching a deny rule.
    PathDenied: 403 "PolicyDenied" PermissionDenied PathDenied,
    /// A write or delete under a read-only rule.
    ReadOnly: 403 "PolicyDenied" PermissionDenied ReadOnly,
    /// An upload whose extension is not allowed.
    ExtensionNotAllowed: 403 "PolicyDenied" PermissionDenied ExtensionNotAllowed,
    /// The operating system refused access to a path.
    PermissionDenied: 403 "PermissionError" PermissionDenied PermissionDenied,
    /// A malformed command line.
    CommandInvalid: 400 "ValueError" InvalidArgument CommandInvalid,
    /// A program the policy does not allow.
    CommandNotAllowed: 403 "PolicyDenied" PermissionDenied CommandNotAllowed,
    /// A shell where none is allowed.
    ShellNotAllowed: 403 "PolicyDenied" PermissionDenied ShellNotAllowed,
    /// A malformed process request.
    ProcessInvalid: 400 "ValueError" InvalidArgument ProcessInvalid,
    /// Process execution refused by the policy.
    ProcessDenied: 403 "PolicyDenied" PermissionDenied ProcessDenied,
    /// A signal the policy does not allow.
    SignalNotAllowed: 403 "PolicyDenied" PermissionDenied SignalNotAllowed,
    /// A user to run as that does not exist.
    UserUnknown: 400 "ValueError" InvalidArgument UserUnknown,
    /// Running as another user, where that is not allowed.
    UserNotAllowed: 403 "PermissionError" PermissionDenied UserNotAllowed,
    /// A malformed environment assignment.
    EnvInvalid: 400 "ValueError" InvalidArgument EnvInvalid,
    /// A variable the policy denies.
    EnvVarDenied: 403 "PolicyDenied" PermissionDenied EnvVarDenied,
    /// A protected variable, or one outside the allow-list.
    EnvVarNotAllowed: 403 "PolicyDenied" PermissionDenied EnvVarNotAllowed,
    /// A language the policy does not allow.
    LanguageNotAllowed: 403 "PolicyDenied" PermissionDenied LanguageNotAllowed,
    /// A URL that cannot be parsed.
    UrlInvalid: 400 "ValueError" InvalidArgument UrlInvalid,
    /// A URL (or its scheme) the policy does not allow.
    UrlNotAllowed: 403 "PolicyDenied" PermissionDenied UrlNotAllowed,
    /// A URL resolving to a loopback, link-local or private address.
    UrlDenied: 403 "PolicyDenied" PermissionDenied UrlDenied,

    // Requests and the server.
    /// A malformed request, without a code of its own.
    BadRequest: 400 "ValueError" InvalidArgument,
    /// A path no endpoint serves.
    RouteNotFound: 404 "ValueError" NotFound,
    /// A path served with another method.
    MethodNotAllowed: 405 "ValueError" Unimplemented MethodNotAllowed,
    /// A WebSocket endpoint asked without an upgrade.
    UpgradeRequired: 426 "ValueError" FailedPrecondition,
    /// An endpoint this build does not serve.
    NotImplemented: 501 "NotImplementedError" Unimplemented NotImplemented,
    /// A feature that is off on this server (the MCP code tools without a code port).
    FeatureOff: 501 "NotImplementedError" Unimplemented,
    /// An unexpected failure; details go to the log.
    Internal: 500 "InternalError" Internal Internal,
    /// Output or events a stream could not deliver (envd).
    DataLoss: 500 "RuntimeError" DataLoss,
    /// A resume from a stream so long forgotten that not even its count is kept (MCP).
    StreamForgotten: 410 "ValueError" DataLoss DataLoss,
    /// A call the client cancelled (an MCP tool call).
    Cancelled: 400 "CancelledError" Canceled Cancelled,

    // Files.
    /// No such file or directory.
    FileNotFound: 404 "FileNotFoundError" NotFound,
    /// The target exists.
    FileExists: 409 "FileExistsError" AlreadyExists FileExists,
    /// A directory in the way of a file operation.
    IsADirectory: 409 "IsADirectoryError" InvalidArgument IsADirectory,
    /// A file in the way of a directory operation.
    NotADirectory: 409 "NotADirectoryError" InvalidArgument NotADirectory,
    /// The disk or the quota is full.
    InsufficientStorage: 507 "OSError" ResourceExhausted InsufficientStorage,
    /// Too many watches.
    WatchLimit: 429 "ResourceError" ResourceExhausted WatchLimit,
    /// No resumable upload for the path.
    UploadNotFound: 404 "FileNotFoundError" NotFound UploadNotFound,
    /// A resumable upload continued from the wrong offset.
    OffsetMismatch: 409 "ValueError" FailedPrecondition OffsetMismatch,
    /// Another request writes the same resumable upload.
    UploadBusy: 409 "ValueError" FailedPrecondition UploadBusy,
    /// An upload body that ended early.
    UploadInterrupted: 400 "ValueError" Canceled UploadInterrupted,
    /// A range outside the file.
    RangeNotSatisfiable: 416 "ValueError" InvalidArgument RangeNotSatisfiable,

    // Processes, commands, terminals.
    /// A program that is not there.
    SpawnNotFound: 500 "FileNotFoundError" InvalidArgument SpawnFailed,
    /// A program that may not be executed.
    SpawnPermission: 500 "PermissionError" InvalidArgument SpawnFailed,
    /// A program path through a file.
    SpawnNotADirectory: 500 "NotADirectoryError" InvalidArgument SpawnFailed,
    /// A program that could not be started for another reason.
    SpawnFailed: 500 "OSError" InvalidArgument SpawnFailed,
    /// A run that outlived its timeout.
    ProcessTimeout: 500 "TimeoutError" InvalidArgument Timeout,
    /// Too many processes.
    ProcessLimit: 429 "ResourceError" ResourceExhausted ProcessLimit,
    /// No such process (or job, or session).
    NotFound: 404 "NotFoundError" NotFound,
    /// The target is not in a state that allows the call.
    Conflict: 409 "ConflictError" FailedPrecondition,
    /// Not allowed to the caller (signalling another's process).
    Refused: 403 "PermissionError" PermissionDenied,
    /// No registered command by that name.
    CommandNotFound: 404 "ValueError" NotFound CommandNotFound,
    /// A registered command's argument of the wrong type.
    ArgumentType: 400 "TypeError" InvalidArgument,
    /// A registered command failed (its own exception type replaces this one).
    CommandFailed: 500 "RuntimeError" Internal CommandFailed,
    /// A registered command that outlived its timeout.
    CommandTimeout: 500 "TimeoutError" DeadlineExceeded Timeout,
    /// Output over the limit.
    OutputTooLarge: 500 "RuntimeError" ResourceExhausted OutputTooLarge,
    /// A registered command's output that is not what it declares.
    InvalidOutput: 500 "RuntimeError" Internal InvalidOutput,
    /// A registered command that could not be started.
    CommandNotStarted: 500 "OSError" Internal CommandNotStarted,
    /// A terminal's shell that does not exist.
    ShellNotFound: 400 "ValueError" InvalidArgument ShellNotFound,
    /// Too many terminal (or MCP) sessions.
    SessionLimit: 429 "RuntimeError" ResourceExhausted SessionLimit,
    /// Too many MCP sessions.
    McpSessionLimit: 429 "ResourceError" ResourceExhausted SessionLimit,
    /// No terminal session by that id.
    SessionNotFound: 404 "ValueError" NotFound,
    /// A terminal that could not be started.
    TerminalSpawn: 500 "OSError" Internal,
    /// A variable the server protects (`/env`).
    EnvProtected: 403 "PermissionError" PermissionDenied,
    /// A system listing that outlived its timeout.
    ListingTimeout: 500 "TimeoutError" DeadlineExceeded Timeout,

    // Code and git.
    /// A `/code/run` or git call that outlived its timeout.
    RunTimeout: 408 "TimeoutError" DeadlineExceeded,
    /// An interpreter or git that is not installed.
    RuntimeNotFound: 500 "FileNotFoundError" Unimplemented,
    /// git failed.
    GitFailed: 400 "GitError" FailedPrecondition,
    /// A language whose interpreter is not installed (the code port).
    LanguageUnavailable: 501 "NotImplementedError" Unimplemented,
    /// Too many code contexts or executions.
    CodeLimit: 429 "ResourceError" ResourceExhausted,
    /// The server is shutting down.
    ShuttingDown: 503 "RuntimeError" Unavailable,
    /// The code port refused an MCP code tool call (its status is the code port's).
    CodeRefused: 400 "CodeError" FailedPrecondition,

    // Browser.
    /// The browser is not installed or could not start.
    BrowserUnavailable: 503 "RuntimeError" Unavailable BrowserUnavailable,
    /// The browser crashed.
    BrowserCrashed: 503 "RuntimeError" Unavailable BrowserCrashed,
    /// No element matches the selector.
    SelectorNotFound: 404 "ValueError" NotFound SelectorNotFound,
    /// No element matched the selector before the wait ran out.
    SelectorTimeout: 404 "TimeoutError" NotFound SelectorNotFound,
    /// A browser operation that outlived its timeout.
    BrowserTimeout: 504 "TimeoutError" DeadlineExceeded Timeout,
    /// The page could not be loaded.
    NavigationFailed: 502 "Error" Unavailable NavigationFailed,
    /// The page's script threw.
    ScriptError: 400 "Error" InvalidArgument ScriptError,
}

impl Fault {
    /// The machine code as the wire spells it, when the answer has one.
    ///
    /// ```
    /// use abx_wire::api::fault::Fault;
    ///
    /// assert_eq!(Fault::PowerClosed.code_str(), Some("endpoint_disabled"));
    /// ```
    pub fn code_str(self) -> Option<&'static str> {
        self.code().and_then(|code| code.known_str())
    }

    /// Whether the row is a policy refusal (the code's
    /// [`ErrorCode::is_policy_denial`]).
    pub fn is_policy_denial(self) -> bool {
        self.code().is_some_and(|code| code.is_policy_denial())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};

    use super::*;

    #[test]
    fn every_row_has_a_status_a_type_and_a_connect_code() {
        for row in Fault::ALL {
            assert!((400..600).contains(&row.status()), "{row:?}: {}", row.status());
            let name = row.error_type();
            assert!(!name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric()), "{row:?}: {name}");
            assert!(name.starts_with(|c: char| c.is_ascii_uppercase()), "{row:?}: {name}");
            assert!(!row.connect().as_str().is_empty());
            if let Some(code) = row.code_str() {
                assert_eq!(ErrorCode::from_wire(code), row.code().expect("a code"), "{row:?}");
            }
        }
    }

    /// The daemon sends every code the client knows (no orphan variants), and
    /// one code's rows differ in status or type, never in policy family.
    #[test]
    fn every_known_code_is_sent_and_the_wire_spellings_are_unique() {
        let sent: BTreeSet<&str> = Fault::ALL.iter().filter_map(|row| row.code_str()).collect();
        let known: Vec<&str> = ErrorCode::KNOWN.iter().map(ErrorCode::as_str).collect();
        let unique: BTreeSet<&str> = known.iter().copied().collect();
        assert_eq!(unique.len(), known.len(), "a wire spelling used twice");
        let orphans: Vec<&str> = known.iter().copied().filter(|code| !sent.contains(code)).collect();
        // Codes that name a refusal of `POST /capabilities/check` only.
        assert_eq!(orphans, ["unknown_endpoint"], "codes no row sends");
        let mut families: BTreeMap<&str, BTreeSet<bool>> = BTreeMap::new();
        for row in Fault::ALL {
            if let Some(code) = row.code_str() {
                families.entry(code).or_default().insert(row.is_policy_denial());
            }
        }
        assert!(families.values().all(|f| f.len() == 1));
    }

    /// The table as docs/errors.md shows it.
    fn markdown() -> String {
        let mut out = String::from("| row | `code` | status | `type` | Connect code |\n|---|---|---|---|---|\n");
        for row in Fault::ALL {
            let code = row.code_str().map_or("—".to_string(), |c| format!("`{c}`"));
            let line = format!(
                "| {row:?} | {code} | {} | `{}` | `{}` |\n",
                row.status(),
                row.error_type(),
                row.connect().as_str()
            );
            out.push_str(&line);
        }
        out
    }

    /// docs/errors.md shows the table; `ABX_UPDATE_DOCS=1` rewrites it.
    #[test]
    fn the_docs_table_is_the_table() {
        let (start, end) = ("<!-- error-table:start -->\n", "<!-- error-table:end -->");
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/errors.md");
        let page = std::fs::read_to_string(path).expect("docs/errors.md");
        let table = markdown();
        let from = page.find(start).expect("start marker") + start.len();
        let to = page.find(end).expect("end marker");
        if std::env::var_os("ABX_UPDATE_DOCS").is_some() {
            std::fs::write(path, format!("{}{table}{}", &page[..from], &page[to..])).expect("write");
            return;
        }
        assert!(page[from..to] == table, "docs/errors.md's table is stale: run with ABX_UPDATE_DOCS=1");
    }

    /// docs/errors.md lists every code of [`ErrorCode`], and no other.
    #[test]
    fn the_documented_codes_are_the_known_ones() {
        let page = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/errors.md"));
        let page = page.expect("docs/errors.md");
        let codes = page.split("## The codes").nth(1).expect("a codes section");
        let documented: Vec<&str> =
            codes.lines().filter_map(|l| l.strip_prefix("| `")).filter_map(|l| l.split('`').next()).collect();
        let known: Vec<&str> = ErrorCode::KNOWN.iter().map(ErrorCode::as_str).collect();
        assert_eq!(documented, known);
    }
}
