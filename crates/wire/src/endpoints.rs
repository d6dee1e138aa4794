//! The endpoint table: every endpoint the daemon knows, declared exactly once.
//!
//! Each [`Endpoint`] carries its stable id (the name policies, audit lines,
//! `GET /capabilities` and the client use), its HTTP binding, its capability
//! group, its default scopes and the limit and parameter names a policy may
//! tune. Routing (`http::router`), the policy engine (`policy`) and the
//! discovery document all derive from [`ENDPOINTS`], so they cannot drift.
//!
//! The table mirrors the Python `agent-sandbox-server` 0.4.0a6 contract: the
//! same ids, methods, paths, groups and scopes.

use std::fmt;

pub use crate::powers::Power;

/// A capability group: a named alias for the endpoints that declare it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Group {
    /// Health and discovery; always on.
    Core,
    /// Registered commands.
    Commands,
    /// File operations.
    FileOps,
    /// Processes.
    Process,
    /// Pseudo-terminals.
    Terminal,
    /// System information and environment.
    System,
    /// Code runner and git helpers (opt-in).
    DevTools,
    /// Headless browser (opt-in).
    Browser,
    /// Local agents API (opt-in).
    Agents,
    /// envd's protocol, served on the envd port (this server's own group).
    Envd,
    /// The code-interpreter protocol, served on the code port (this server's own group).
    CodeInterpreter,
}

impl Group {
    /// Every group: the reference's nine in its order, then this server's own.
    pub const ALL: [Group; 11] = [
        Group::Core,
        Group::Commands,
        Group::FileOps,
        Group::Process,
        Group::Terminal,
        Group::System,
        Group::DevTools,
        Group::Browser,
        Group::Agents,
        Group::Envd,
        Group::CodeInterpreter,
    ];

    /// The wire name of the group (`file_ops`, `dev_tools`, ...).
    pub const fn as_str(self) -> &'static str {
        match self {
            Group::Core => "core",
            Group::Commands => "commands",
            Group::FileOps => "file_ops",
            Group::Process => "process",
            Group::Terminal => "terminal",
            Group::System => "system",
            Group::DevTools => "dev_tools",
            Group::Browser => "browser",
            Group::Agents => "agents",
            Group::Envd => "envd",
            Group::CodeInterpreter => "code_interpreter",
        }
    }

    /// Parses a wire name.
    pub fn from_name(name: &str) -> Option<Group> {
        Group::ALL.into_iter().find(|g| g.as_str() == name)
    }

    /// Whether the group starts disabled until a policy or the environment turns it on.
    pub const fn opt_in(self) -> bool {
        matches!(self, Group::DevTools | Group::Browser | Group::Agents)
    }
}

impl fmt::Display for Group {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The listener an endpoint is served on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Port {
    /// The API port (9000): the reference's HTTP API.
    Api,
    /// The PTY port (9001): the terminal WebSocket.
    Pty,
    /// The envd port (49983): envd's Connect services and plain endpoints, for the `e2b` SDK.
    Envd,
    /// The code-interpreter port (49999), for `e2b-code-interpreter`.
    Code,
}

impl Port {
    /// Every port.
    pub const ALL: [Port; 4] = [Port::Api, Port::Pty, Port::Envd, Port::Code];

    /// The listener's name (`api`, `pty`, `envd`, `code`), as logs and audit lines spell it.
    pub const fn as_str(self) -> &'static str {
        match self {
            Port::Api => "api",
            Port::Pty => "pty",
            Port::Envd => "envd",
            Port::Code => "code",
        }
    }

    /// The port number the listener binds unless configured otherwise: the
    /// reference server's and the protocols' own (`config` and the client use it).
    pub const fn default_number(self) -> u16 {
        match self {
            Port::Api => 9000,
            Port::Pty => 9001,
            Port::Envd => 49983,
            Port::Code => 49999,
        }
    }
}

/// What a signed envd `/files` URL may do: the operation its signature names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SignedOp {
    /// `GET /files`.
    Read,
    /// `POST /files`.
    Write,
}

impl SignedOp {
    /// The word the signature covers (`read`, `write`).
    pub const fn as_str(self) -> &'static str {
        match self {
            SignedOp::Read => "read",
            SignedOp::Write => "write",
        }
    }
}

/// How an endpoint is reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Method {
    /// HTTP GET.
    Get,
    /// HTTP POST.
    Post,
    /// HTTP PUT.
    Put,
    /// HTTP DELETE.
    Delete,
    /// HTTP HEAD.
    Head,
    /// A WebSocket served on another listener (the PTY port); no HTTP route.
    Ws,
}

impl Method {
    /// The wire name (`GET`, `WS`, ...).
    pub const fn as_str(self) -> &'static str {
        match self {
            Method::Get => "GET",
            Method::Post => "POST",
            Method::Put => "PUT",
            Method::Delete => "DELETE",
            Method::Head => "HEAD",
            Method::Ws => "WS",
        }
    }
}

/// Declares a closed vocabulary of policy keys as an enum with wire names.
macro_rules! policy_keys {
    ($(#[$doc:meta])* $name:ident { $($(#[$vdoc:meta])* $variant:ident = $wire:literal),+ $(,)? }) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum $name {
            $($(#[$vdoc])* $variant),+
        }

        impl $name {
            /// Every key of the vocabulary.
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            /// The wire name of the key.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $wire),+
                }
            }

            /// Parses a wire name.
            pub fn from_name(name: &str) -> Option<$name> {
                Self::ALL.iter().copied().find(|k| k.as_str() == name)
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

policy_keys! {
    /// A limit a policy may set on an endpoint.
    Limit {
        /// Largest accepted request body.
        MaxRequestBytes = "max_request_bytes",
        /// Requests per minute per identity.
        RatePerMinute = "rate_per_minute",
        /// Concurrent requests per identity.
        MaxConcurrency = "max_concurrency",
        /// Largest file transferred.
        MaxBytes = "max_bytes",
        /// Output kept per stream.
        MaxOutputBytes = "max_output_bytes",
        /// Entries in a listing.
        MaxEntries = "max_entries",
        /// Recursion depth.
        MaxDepth = "max_depth",
        /// Search results.
        MaxResults = "max_results",
        /// Files in an archive.
        MaxFiles = "max_files",
        /// Live server-started processes.
        MaxProcesses = "max_processes",
        /// Live terminal sessions.
        MaxSessions = "max_sessions",
        /// Wall-clock timeout of a run.
        TimeoutSeconds = "timeout_seconds",
        /// Lifetime of a stream.
        MaxDurationSeconds = "max_duration_seconds",
    }
}

policy_keys! {
    /// A parameter a policy may set on an endpoint.
    Param {
        /// Whether uploads may replace an existing file.
        Overwrite = "overwrite",
        /// Extensions an upload may have.
        AllowExtensions = "allow_extensions",
        /// Extensions an upload may not have.
        DenyExtensions = "deny_extensions",
        /// Programs that may be run.
        AllowCommands = "allow_commands",
        /// Programs that may not be run.
        DenyCommands = "deny_commands",
        /// Signal numbers that may be sent.
        AllowedSignals = "allowed_signals",
        /// Shells a terminal may start.
        Shells = "shells",
        /// Variables removed from a terminal's environment.
        EnvDeny = "env_deny",
        /// Variables that may be read or set.
        AllowVars = "allow_vars",
        /// Variables that may not be read or set.
        DenyVars = "deny_vars",
        /// Languages the code runner accepts.
        Languages = "languages",
        /// URLs the browser may open.
        UrlAllow = "url_allow",
        /// URLs the browser may not open.
        UrlDeny = "url_deny",
        /// Refuse private network addresses in the browser.
        BlockPrivateNetworks = "block_private_networks",
    }
}

/// Limits every endpoint accepts.
pub const COMMON_LIMITS: [Limit; 3] = [Limit::MaxRequestBytes, Limit::RatePerMinute, Limit::MaxConcurrency];

/// One declared endpoint: identity, HTTP binding, group and policy defaults.
#[derive(Debug, Clone, Copy)]
pub struct Endpoint {
    /// Stable id used by policies, audit lines, discovery and the client.
    pub id: &'static str,
    /// HTTP method (or [`Method::Ws`] for the PTY WebSocket).
    pub method: Method,
    /// Path pattern with `{param}` placeholders.
    pub path: &'static str,
    /// Capability group.
    pub group: Group,
    /// One-line description for discovery.
    pub summary: &'static str,
    /// Scopes an identity needs by default.
    pub scopes: &'static [&'static str],
    /// Endpoint-specific limits a policy may tune (besides [`COMMON_LIMITS`]).
    pub limits: &'static [Limit],
    /// Parameters a policy may tune.
    pub params: &'static [Param],
    /// Whether the endpoint takes paths governed by `paths` rules.
    pub paths: bool,
    /// The powers the endpoint exercises (empty for an extension: it has
    /// those of the endpoint governing it); see [`Endpoint::powers`].
    pub declared_powers: &'static [Power],
    /// Whether the response is a stream (SSE or WebSocket).
    pub streaming: bool,
    /// Whether a caller must authenticate (`/health` does not).
    pub auth_required: bool,
    /// Whether the request body is streamed to its destination: only the
    /// policy's `max_bytes` (and `max_request_bytes` when a policy sets it)
    /// bound it, not the 10 MiB default body limit.
    pub streamed_body: bool,
    /// Whether the endpoint is this server's extension (not in the reference's table).
    pub extension: bool,
    /// For an extension, the reference endpoint whose policy rules govern it
    /// too (a rule for `files_download_stream` also governs `files_content_read`,
    /// envd's `Stat` is governed by `files_stat`), so a policy written for the
    /// reference server cannot be bypassed through it: every selector that
    /// selects the governing endpoint (its group, a glob on its id, its id)
    /// selects this one too, and both count against the same rate and
    /// concurrency limits.
    pub governed_by: Option<&'static str>,
    /// The listener serving it.
    pub port: Port,
    /// For an envd `/files` route: a URL signed for this operation stands for credentials.
    pub signed: Option<SignedOp>,
    /// Whether a `?token=` query parameter stands for the credential headers
    /// (the PTY WebSocket: browsers cannot set headers on one).
    pub query_token: bool,
    /// A second endpoint whose rule a call must also pass when it asks for
    /// more than its own (envd `Start` with a terminal is also `pty_create_session`).
    pub also: Option<&'static str>,
}

impl Endpoint {
    const fn new(
        id: &'static str,
        method: Method,
        path: &'static str,
        group: Group,
        scopes: &'static [&'static str],
    ) -> Self {
        Endpoint {
            id,
            method,
            path,
            group,
            summary: "",
            scopes,
            limits: &[],
            params: &[],
            paths: false,
            declared_powers: &[],
            streaming: false,
            auth_required: true,
            streamed_body: false,
            extension: false,
            governed_by: None,
            port: Port::Api,
            signed: None,
            query_token: false,
            also: None,
        }
    }

    const fn on(mut self, port: Port) -> Self {
        self.port = port;
        self
    }

    const fn signed(mut self, op: SignedOp) -> Self {
        self.signed = Some(op);
        self
    }

    const fn query_token(mut self) -> Self {
        self.query_token = true;
        self
    }

    const fn also(mut self, id: &'static str) -> Self {
        self.also = Some(id);
        self
    }

    const fn limits(mut self, limits: &'static [Limit]) -> Self {
        self.limits = limits;
        self
    }

    const fn params(mut self, params: &'static [Param]) -> Self {
        self.params = params;
        self
    }

    const fn paths(mut self) -> Self {
        self.paths = true;
        self
    }

    const fn declares(mut self, powers: &'static [Power]) -> Self {
        self.declared_powers = powers;
        self
    }

    const fn streaming(mut self) -> Self {
        self.streaming = true;
        self
    }

    const fn streamed_body(mut self) -> Self {
        self.streamed_body = true;
        self
    }

    const fn governed_by(mut self, reference: &'static str) -> Self {
        self.governed_by = Some(reference);
        self
    }

    const fn extension(mut self) -> Self {
        self.extension = true;
        self
    }

    const fn anonymous(mut self) -> Self {
        self.auth_required = false;
        self
    }

    const fn summary(mut self, summary: &'static str) -> Self {
        self.summary = summary;
        self
    }

    /// Whether a policy may set `limit` on this endpoint.
    pub fn accepts_limit(&self, limit: Limit) -> bool {
        COMMON_LIMITS.contains(&limit) || self.limits.contains(&limit)
    }

    /// Whether a policy may set `param` on this endpoint.
    pub fn accepts_param(&self, param: Param) -> bool {
        self.params.contains(&param)
    }

    /// The powers the endpoint exercises: its own declaration, or for an
    /// extension that declares none, those of the endpoint governing it.
    pub fn powers(&self) -> &'static [Power] {
        match (self.declared_powers, self.governed_by.and_then(find)) {
            ([], Some(governing)) => governing.declared_powers,
            (own, _) => own,
        }
    }

    /// Whether the endpoint exercises `power`.
    pub fn has(&self, power: Power) -> bool {
        self.powers().contains(&power)
    }

    /// Whether the endpoint can execute arbitrary programs or code.
    pub fn runs_programs(&self) -> bool {
        self.has(Power::RunsPrograms)
    }

    /// Whether the endpoint is served by another transport and has no HTTP route.
    pub fn is_virtual(&self) -> bool {
        self.method == Method::Ws
    }

    /// Whether the endpoint can never be disabled: the core group, and the
    /// other ports' health probes (governed by `health`).
    pub fn is_core(&self) -> bool {
        self.group == Group::Core || self.governed_by.and_then(find).is_some_and(|g| g.group == Group::Core)
    }

    /// The endpoint whose rule governs this one: its `governed_by`, else itself.
    pub fn governing(&'static self) -> &'static Endpoint {
        self.governed_by.and_then(find).unwrap_or(self)
    }

    /// Whether the endpoint speaks envd's Connect protocol (its errors are Connect errors).
    pub fn is_connect(&self) -> bool {
        self.port == Port::Envd && (self.path.starts_with("/filesystem.") || self.path.starts_with("/process."))
    }
}

use Group::*;
use Limit as L;
use Method::{Delete, Get, Post, Put, Ws};
use Param as P;

const fn ep(
    id: &'static str,
    method: Method,
    path: &'static str,
    group: Group,
    scopes: &'static [&'static str],
) -> Endpoint {
    Endpoint::new(id, method, path, group, scopes)
}

/// A route of another port than the API's, in its own group, governed by
/// the native endpoint `governed_by`, with its scopes.
const fn elsewhere(
    port: Port,
    group: Group,
    (id, method, path): (&'static str, Method, &'static str),
    governed_by: &'static str,
    scopes: &'static [&'static str],
) -> Endpoint {
    Endpoint::new(id, method, path, group, scopes).on(port).extension().governed_by(governed_by)
}

/// An envd route.
const fn envd(
    id: &'static str,
    method: Method,
    path: &'static str,
    by: &'static str,
    scopes: &'static [&'static str],
) -> Endpoint {
    elsewhere(Port::Envd, Envd, (id, method, path), by, scopes)
}

/// A code-port route.
const fn code(
    id: &'static str,
    method: Method,
    path: &'static str,
    by: &'static str,
    scopes: &'static [&'static str],
) -> Endpoint {
    elsewhere(Port::Code, CodeInterpreter, (id, method, path), by, scopes)
}

const fn agent(id: &'static str, method: Method, path: &'static str, summary: &'static str) -> Endpoint {
    Endpoint::new(id, method, path, Agents, &["agents:use"]).summary(summary)
}

const RUN: &[Power] = &[Power::RunsPrograms];
const RUN_WRITE: &[Power] = &[Power::RunsPrograms, Power::WritesFiles];
const RUN_NET: &[Power] = &[Power::RunsPrograms, Power::Network];
const REGISTERED: &[Power] = &[Power::RunsRegistered];
const READ: &[Power] = &[Power::ReadsFiles];
const WRITE: &[Power] = &[Power::WritesFiles];
const NET_CREDS: &[Power] = &[Power::Network, Power::Credentials];
const CREDS: &[Power] = &[Power::Credentials];
const STATE: &[Power] = &[Power::DaemonState];

const EXEC_LIMITS: &[Limit] = &[L::MaxOutputBytes, L::MaxProcesses, L::TimeoutSeconds];
const EXEC_PARAMS: &[Param] = &[P::AllowCommands, P::DenyCommands];
const UPLOAD_PARAMS: &[Param] = &[P::AllowExtensions, P::DenyExtensions, P::Overwrite];

/// Every endpoint, in declaration order.
pub static ENDPOINTS: &[Endpoint] = &[
    // core
    ep("health", Get, "/health", Core, &[])
        .declares(STATE)
        .anonymous()
        .summary("Liveness probe; needs no credentials."),
    ep("capabilities", Get, "/capabilities", Core, &["core:read"])
        .declares(STATE)
        .summary("Discovery document: groups, identity and every endpoint's state."),
    ep("capabilities_check", Post, "/capabilities/check", Core, &["core:read"])
        .declares(STATE)
        .summary("The policy's decision for a call the client is about to make."),
    // core extension: this port's OpenAPI document (its rules are capabilities')
    ep("openapi", Get, "/openapi.json", Core, &["core:read"])
        .extension()
        .governed_by("capabilities")
        .summary("This port's OpenAPI 3.1 document, generated from the endpoint table."),
    // commands
    ep("list_commands", Get, "/commands", Commands, &["commands:list"])
        .declares(STATE)
        .summary("Registered commands and their arguments."),
    ep("run_command", Post, "/commands/{name}", Commands, &["commands:run"])
        .declares(REGISTERED)
        .summary("Run one registered command."),
    // file_ops
    ep("files_list", Get, "/files/list", FileOps, &["files:read"])
        .declares(READ)
        .limits(&[L::MaxDepth, L::MaxEntries])
        .paths()
        .summary("Entries of a directory, optionally recursive."),
    ep("files_stat", Get, "/files/stat", FileOps, &["files:read"])
        .declares(READ)
        .paths()
        .summary("Metadata of one path."),
    ep("files_mkdir", Post, "/files/mkdir", FileOps, &["files:write"])
        .declares(WRITE)
        .paths()
        .summary("Make a directory and its parents."),
    ep("files_delete", Delete, "/files", FileOps, &["files:delete"])
        .declares(WRITE)
        .paths()
        .summary("Remove a file or a directory tree."),
    ep("files_move", Post, "/files/move", FileOps, &["files:write", "files:delete"])
        .declares(WRITE)
        .paths()
        .summary("Rename or move a path."),
    ep("files_search", Post, "/files/search", FileOps, &["files:read"])
        .declares(READ)
        .limits(&[L::MaxDepth, L::MaxResults, L::TimeoutSeconds])
        .paths()
        .summary("Find files by name glob or by content."),
    ep("files_upload_stream", Post, "/files/upload-stream", FileOps, &["files:write"])
        .declares(WRITE)
        .limits(&[L::MaxBytes])
        .params(UPLOAD_PARAMS)
        .paths()
        .summary("Write a file sent as base64 JSON."),
    ep("files_download_stream", Get, "/files/download-stream", FileOps, &["files:read"])
        .declares(READ)
        .limits(&[L::MaxBytes])
        .paths()
        .summary("Read a file returned as base64 JSON."),
    ep("files_archive", Post, "/files/archive", FileOps, &["files:read"])
        .declares(READ)
        .limits(&[L::MaxBytes, L::MaxFiles])
        .paths()
        .summary("Pack paths into a tar.gz or zip archive."),
    ep("files_watch", Get, "/files/watch", FileOps, &["files:read"])
        .declares(READ)
        .limits(&[L::MaxDurationSeconds])
        .paths()
        .streaming()
        .summary("File-system events as server-sent events."),
    // file_ops extensions: binary streaming transfers and resumable uploads
    ep("files_content_read", Get, "/files/content", FileOps, &["files:read"])
        .limits(&[L::MaxBytes])
        .paths()
        .extension()
        .governed_by("files_download_stream")
        .summary("Raw bytes of a file, streamed, with ETag and Range support (HEAD for metadata)."),
    ep("files_content_write", Put, "/files/content", FileOps, &["files:write"])
        .limits(&[L::MaxBytes])
        .params(UPLOAD_PARAMS)
        .paths()
        .streamed_body()
        .extension()
        .governed_by("files_upload_stream")
        .summary("Write a file from the raw request body, atomically; resumable with offset and size."),
    ep("files_upload_status", Get, "/files/uploads", FileOps, &["files:write"])
        .paths()
        .extension()
        .governed_by("files_upload_stream")
        .summary("Bytes received so far by a resumable upload."),
    ep("files_upload_cancel", Delete, "/files/uploads", FileOps, &["files:write"])
        .paths()
        .extension()
        .governed_by("files_upload_stream")
        .summary("Abandon a resumable upload and discard its bytes."),
    // process
    ep("shell", Post, "/shell", Process, &["process:run"])
        .declares(RUN)
        .limits(EXEC_LIMITS)
        .params(EXEC_PARAMS)
        .paths()
        .summary("Run a command to completion and return its output."),
    ep("shell_stream", Post, "/shell/stream", Process, &["process:run"])
        .declares(RUN)
        .limits(EXEC_LIMITS)
        .params(EXEC_PARAMS)
        .paths()
        .streaming()
        .summary("Run a command and stream its output as server-sent events."),
    ep("process_start", Post, "/process/start", Process, &["process:run"])
        .declares(RUN)
        .limits(EXEC_LIMITS)
        .params(EXEC_PARAMS)
        .paths()
        .summary("Start a command in the background."),
    ep("process_list", Get, "/process/list", Process, &["process:read"])
        .declares(STATE)
        .summary("Processes this server started."),
    ep("process_detail", Get, "/process/{pid}", Process, &["process:read"])
        .declares(STATE)
        .summary("State of one started process."),
    ep("process_signal", Post, "/process/{pid}/signal", Process, &["process:manage"])
        .declares(STATE)
        .params(&[P::AllowedSignals])
        .summary("Send a signal to a started process."),
    ep("process_stdin", Post, "/process/{pid}/stdin", Process, &["process:manage"])
        .declares(STATE)
        .summary("Write to, or close, a process's stdin."),
    ep("process_output", Get, "/process/{pid}/output", Process, &["process:read"])
        .declares(STATE)
        .summary("Output of a process from a cursor on."),
    // terminal
    ep("pty_create_session", Post, "/pty/sessions", Terminal, &["terminal:use"])
        .declares(RUN)
        .limits(&[L::MaxSessions])
        .params(&[P::EnvDeny, P::Shells])
        .summary("Open a terminal session."),
    ep("pty_list_sessions", Get, "/pty/sessions", Terminal, &["terminal:use"])
        .declares(STATE)
        .summary("Open terminal sessions."),
    ep("pty_detail", Get, "/pty/sessions/{id}", Terminal, &["terminal:use"])
        .declares(STATE)
        .summary("State of one terminal session."),
    ep("pty_resize", Post, "/pty/sessions/{id}/resize", Terminal, &["terminal:use"])
        .declares(STATE)
        .summary("Change a terminal's size."),
    ep("pty_delete_session", Delete, "/pty/sessions/{id}", Terminal, &["terminal:use"])
        .declares(STATE)
        .summary("Close a terminal session."),
    // system
    ep("system_info", Get, "/system/info", System, &["system:read"])
        .declares(STATE)
        .summary("Operating system, CPU, memory and disk."),
    ep("env_get", Get, "/env", System, &["system:read"])
        .declares(STATE)
        .params(&[P::AllowVars, P::DenyVars])
        .summary("Read environment variables."),
    ep("env_set", Post, "/env", System, &["system:write"])
        .declares(STATE)
        .params(&[P::AllowVars, P::DenyVars])
        .summary("Set environment variables for later commands."),
    ep("ports", Get, "/ports", System, &["system:read"])
        .declares(STATE)
        .summary("Listening TCP ports and their processes."),
    ep("packages", Get, "/packages", System, &["system:read"])
        .declares(STATE)
        .summary("Installed packages of a package manager."),
    ep("system_metrics", Get, "/system/metrics", System, &["system:read"])
        .declares(STATE)
        .summary("Current CPU, memory and disk use."),
    // dev_tools
    ep("code_run", Post, "/code/run", DevTools, &["devtools:run"])
        .declares(RUN)
        .limits(&[L::MaxOutputBytes, L::TimeoutSeconds])
        .params(&[P::Languages])
        .summary("Run a code snippet once."),
    ep("git_status", Get, "/git/status", DevTools, &["devtools:read"])
        .declares(READ)
        .paths()
        .summary("Branch and changed files of a repository."),
    ep("git_diff", Get, "/git/diff", DevTools, &["devtools:read"])
        .declares(READ)
        .paths()
        .summary("Diff of a repository's working tree."),
    // browser
    ep("browser_navigate", Post, "/browser/navigate", Browser, &["browser:use"])
        .declares(RUN_NET)
        .params(&[P::BlockPrivateNetworks, P::UrlAllow, P::UrlDeny])
        .summary("Open a URL in the headless browser."),
    ep("browser_screenshot", Post, "/browser/screenshot", Browser, &["browser:use"])
        .declares(STATE)
        .summary("Capture the page as an image."),
    ep("browser_content", Get, "/browser/content", Browser, &["browser:use"])
        .declares(STATE)
        .summary("The page's HTML or text."),
    ep("browser_click", Post, "/browser/click", Browser, &["browser:use"])
        .declares(RUN_NET)
        .summary("Click an element."),
    ep("browser_type", Post, "/browser/type", Browser, &["browser:use"])
        .declares(RUN_NET)
        .summary("Type text into an element."),
    ep("browser_evaluate", Post, "/browser/evaluate", Browser, &["browser:evaluate"])
        .declares(RUN_NET)
        .summary("Evaluate a script in the page."),
    ep("browser_pdf", Post, "/browser/pdf", Browser, &["browser:use"])
        .declares(STATE)
        .summary("Print the page to PDF."),
    ep("browser_console", Get, "/browser/console", Browser, &["browser:use"])
        .declares(STATE)
        .summary("The page's console messages."),
    // terminal, served by the PTY listener
    ep("pty_connect", Ws, "/pty", Terminal, &["terminal:use"])
        .declares(RUN)
        .on(Port::Pty)
        .query_token()
        .streaming()
        .summary("Attach to a terminal session over WebSocket on the PTY port."),
    // agents (opt-in)
    agent("agents_sessions_create", Post, "/v1/agents/sessions", "Create an agent session.").declares(RUN_WRITE),
    agent("agents_sessions_list", Get, "/v1/agents/sessions", "Agent sessions.").declares(STATE),
    agent("agents_sessions_get", Get, "/v1/agents/sessions/{id}", "One agent session.").declares(STATE),
    agent("agents_sessions_update", Post, "/v1/agents/sessions/{id}", "Change a session's metadata.").declares(STATE),
    agent("agents_sessions_delete", Delete, "/v1/agents/sessions/{id}", "Remove an agent session.").declares(STATE),
    agent("agents_sessions_events_create", Post, "/v1/agents/sessions/{id}/events", "Send input to a session.")
        .declares(RUN_WRITE),
    agent(
        "agents_sessions_events_stream",
        Get,
        "/v1/agents/sessions/{id}/events",
        "A session's events as server-sent events.",
    )
    .declares(STATE)
    .streaming(),
    agent("agents_sessions_items_list", Get, "/v1/agents/sessions/{id}/items", "Items of a session.").declares(STATE),
    agent("agents_sessions_turns_list", Get, "/v1/agents/sessions/{id}/turns", "Turns of a session.").declares(STATE),
    agent("agents_sessions_turns_get", Get, "/v1/agents/sessions/{id}/turns/{turn_id}", "One turn.").declares(STATE),
    agent(
        "agents_sessions_turns_items_list",
        Get,
        "/v1/agents/sessions/{id}/turns/{turn_id}/items",
        "Items of a turn.",
    )
    .declares(STATE),
    agent("agents_artifacts_list", Get, "/v1/agents/sessions/{id}/artifacts", "Artifacts of a session.")
        .declares(STATE),
    agent("agents_artifacts_get", Get, "/v1/agents/sessions/{id}/artifacts/{artifact_id}", "Metadata of one artifact.")
        .declares(STATE),
    agent("agents_artifacts_delete", Delete, "/v1/agents/sessions/{id}/artifacts/{artifact_id}", "Remove an artifact.")
        .declares(STATE),
    agent(
        "agents_artifacts_content",
        Get,
        "/v1/agents/sessions/{id}/artifacts/{artifact_id}/content",
        "Bytes of an artifact.",
    )
    .declares(STATE)
    .streaming(),
    agent("agents_traces_list", Get, "/v1/agents/sessions/{id}/traces", "Traces of a session.").declares(STATE),
    agent("agents_subagents_list", Get, "/v1/agents/sessions/{id}/subagents", "Subagents of a session.")
        .declares(STATE),
    agent("agents_subagents_get", Get, "/v1/agents/sessions/{id}/subagents/{subagent_id}", "One subagent.")
        .declares(STATE),
    agent(
        "agents_subagents_items_list",
        Get,
        "/v1/agents/sessions/{id}/subagents/{subagent_id}/items",
        "Items of a subagent.",
    )
    .declares(STATE),
    agent(
        "agents_subagents_turns_list",
        Get,
        "/v1/agents/sessions/{id}/subagents/{subagent_id}/turns",
        "Turns of a subagent.",
    )
    .declares(STATE),
    agent(
        "agents_subagents_turns_get",
        Get,
        "/v1/agents/sessions/{id}/subagents/{subagent_id}/turns/{turn_id}",
        "One turn of a subagent.",
    )
    .declares(STATE),
    agent(
        "agents_subagents_turns_items_list",
        Get,
        "/v1/agents/sessions/{id}/subagents/{subagent_id}/turns/{turn_id}/items",
        "Items of a subagent's turn.",
    )
    .declares(STATE),
    agent("agents_runtimes_list", Get, "/v1/agents/runtimes", "Agent runtimes available here.").declares(STATE),
    agent("agents_environments_create", Post, "/v1/agents/environments", "Bind a local directory as an environment.")
        .declares(WRITE),
    agent("agents_environments_list", Get, "/v1/agents/environments", "Environments.").declares(STATE),
    agent(
        "agents_environment_templates_create",
        Post,
        "/v1/agents/environments/templates",
        "Store an environment template.",
    )
    .declares(STATE),
    agent("agents_environment_templates_list", Get, "/v1/agents/environments/templates", "Environment templates.")
        .declares(STATE),
    agent(
        "agents_environment_templates_get",
        Get,
        "/v1/agents/environments/templates/{environment_template_id}",
        "One environment template.",
    )
    .declares(STATE),
    agent(
        "agents_environment_templates_update",
        Post,
        "/v1/agents/environments/templates/{environment_template_id}",
        "Change an environment template.",
    )
    .declares(STATE),
    agent(
        "agents_environment_templates_delete",
        Delete,
        "/v1/agents/environments/templates/{environment_template_id}",
        "Remove an environment template.",
    )
    .declares(STATE),
    agent("agents_environments_get", Get, "/v1/agents/environments/{environment_id}", "One environment.")
        .declares(STATE),
    agent(
        "agents_environment_files_create",
        Post,
        "/v1/agents/environments/{environment_id}/files",
        "Stage a file in an environment.",
    )
    .declares(WRITE),
    agent(
        "agents_environment_files_list",
        Get,
        "/v1/agents/environments/{environment_id}/files",
        "Files of an environment.",
    )
    .declares(READ),
    agent(
        "agents_cannot_executor_registration",
        Post,
        "/v1/agents/environments/{environment_id}/register",
        "Executor registration (always refused).",
    )
    .declares(STATE),
    agent(
        "agents_cannot_executor_channel",
        Get,
        "/v1/agents/environments/{environment_id}/connect",
        "Executor channel (always refused).",
    )
    .declares(STATE),
    agent("agents_definitions_create", Post, "/v1/agents", "Store an agent definition.").declares(STATE),
    agent("agents_definitions_list", Get, "/v1/agents", "Agent definitions.").declares(STATE),
    agent("agents_definitions_get", Get, "/v1/agents/{agent_id}", "One agent definition.").declares(STATE),
    agent("agents_definitions_update", Post, "/v1/agents/{agent_id}", "Change an agent definition.").declares(STATE),
    agent("agents_definitions_delete", Delete, "/v1/agents/{agent_id}", "Remove an agent definition.").declares(STATE),
    agent("agents_vaults_create", Post, "/v1/vaults", "Create an in-memory vault.").declares(CREDS),
    agent("agents_vaults_list", Get, "/v1/vaults", "Vaults.").declares(CREDS),
    agent("agents_vaults_get", Get, "/v1/vaults/{vault_id}", "One vault.").declares(CREDS),
    agent("agents_vaults_update", Post, "/v1/vaults/{vault_id}", "Change a vault.").declares(CREDS),
    agent("agents_vaults_delete", Delete, "/v1/vaults/{vault_id}", "Remove a vault and its credentials.")
        .declares(CREDS),
    agent(
        "agents_vault_credentials_create",
        Post,
        "/v1/vaults/{vault_id}/credentials",
        "Store a write-only credential.",
    )
    .declares(CREDS),
    agent("agents_vault_credentials_list", Get, "/v1/vaults/{vault_id}/credentials", "Credential metadata of a vault.")
        .declares(CREDS),
    agent(
        "agents_vault_credentials_get",
        Get,
        "/v1/vaults/{vault_id}/credentials/{credential_id}",
        "Metadata of one credential.",
    )
    .declares(CREDS),
    agent(
        "agents_vault_credentials_update",
        Post,
        "/v1/vaults/{vault_id}/credentials/{credential_id}",
        "Change or rotate a credential.",
    )
    .declares(CREDS),
    agent(
        "agents_vault_credentials_delete",
        Delete,
        "/v1/vaults/{vault_id}/credentials/{credential_id}",
        "Remove a credential.",
    )
    .declares(CREDS),
    agent("agents_responses_create", Post, "/v1/responses", "Run one agent turn as a response.")
        .declares(RUN_WRITE)
        .streaming(),
    agent("agents_responses_connect", Get, "/v1/responses", "Responses over WebSocket.").declares(RUN_WRITE),
    agent(
        "agents_cannot_responses_input_tokens",
        Post,
        "/v1/responses/input_tokens",
        "Input token counting (always refused).",
    )
    .declares(STATE),
    agent("agents_responses_compact", Post, "/v1/responses/compact", "Summarise a conversation.").declares(RUN_WRITE),
    agent("agents_responses_get", Get, "/v1/responses/{response_id}", "A stored response, or its replay.")
        .declares(STATE)
        .streaming(),
    agent("agents_responses_delete", Delete, "/v1/responses/{response_id}", "Remove a stored response.")
        .declares(STATE),
    agent("agents_responses_cancel", Post, "/v1/responses/{response_id}/cancel", "Cancel a response's running turn.")
        .declares(STATE),
    agent("agents_responses_input_items", Get, "/v1/responses/{response_id}/input_items", "Input items of a response.")
        .declares(STATE),
    agent("agents_models_list", Get, "/v1/models", "Definitions and adapters as models.").declares(STATE),
    agent("agents_models_get", Get, "/v1/models/{model}", "One model.").declares(STATE),
    agent("agents_cannot_models_delete", Delete, "/v1/models/{model}", "Model deletion (always refused).")
        .declares(STATE),
    agent("agents_files_create", Post, "/v1/files", "Store a local data blob.").declares(STATE),
    agent("agents_webhooks_create", Post, "/v1/webhook_endpoints", "Register a local webhook endpoint.")
        .declares(NET_CREDS),
    agent("agents_webhooks_list", Get, "/v1/webhook_endpoints", "Webhook endpoints.").declares(STATE),
    agent("agents_webhooks_get", Get, "/v1/webhook_endpoints/{webhook_endpoint_id}", "One webhook endpoint.")
        .declares(STATE),
    agent("agents_webhooks_update", Post, "/v1/webhook_endpoints/{webhook_endpoint_id}", "Change a webhook endpoint.")
        .declares(NET_CREDS),
    agent(
        "agents_webhooks_delete",
        Delete,
        "/v1/webhook_endpoints/{webhook_endpoint_id}",
        "Remove a webhook endpoint.",
    )
    .declares(STATE),
    agent(
        "agents_webhooks_rotate_secret",
        Post,
        "/v1/webhook_endpoints/{webhook_endpoint_id}/rotate_secret",
        "Rotate a webhook endpoint's signing secret.",
    )
    .declares(CREDS),
    agent(
        "agents_webhooks_test",
        Post,
        "/v1/webhook_endpoints/{webhook_endpoint_id}/test",
        "Send a signed test event.",
    )
    .declares(NET_CREDS),
    agent("agents_webhook_event_types", Get, "/v1/webhook_event_types", "Webhook event types.").declares(STATE),
    // system extension: Prometheus metrics of the pipeline
    ep("metrics", Get, "/metrics", System, &["system:read"])
        .extension()
        .governed_by("system_metrics")
        .summary("Request counts, latencies, bytes and live resources in the Prometheus text format."),
    // core extension: the Model Context Protocol (GET and DELETE /mcp too); every tool call is
    // decided by the rule of the endpoint of the same power (docs/mcp.md)
    ep("mcp", Post, "/mcp", Core, &["core:read"])
        .declares(STATE)
        .extension()
        .governed_by("capabilities")
        .summary("Model Context Protocol over streamable HTTP: each tool is decided by its endpoint's rule."),
    // envd (49983): every route, each governed by the native endpoint of the same power
    envd("envd_health", Get, "/health", "health", &[]).anonymous().summary("envd's liveness probe."),
    envd("envd_metrics", Get, "/metrics", "system_metrics", &["system:read"])
        .summary("CPU, memory and disk as envd's JSON metrics."),
    envd("envd_envs", Get, "/envs", "env_get", &["system:read"])
        .params(&[P::AllowVars, P::DenyVars])
        .summary("The variables /init set."),
    envd("envd_init", Post, "/init", "env_set", &["envd:init"])
        .params(&[P::AllowVars, P::DenyVars])
        .summary("Set variables, the envd access token, the default user and working directory."),
    envd("envd_files_read", Get, "/files", "files_download_stream", &["files:read"])
        .limits(&[L::MaxBytes])
        .paths()
        .signed(SignedOp::Read)
        .summary("Download a file, streamed, with ranges and gzip; a signed URL stands for credentials."),
    envd("envd_files_write", Post, "/files", "files_upload_stream", &["files:write"])
        .limits(&[L::MaxBytes])
        .params(UPLOAD_PARAMS)
        .paths()
        .streamed_body()
        .signed(SignedOp::Write)
        .summary("Upload files (multipart or raw, optionally gzip), written atomically."),
    envd("envd_stat", Post, "/filesystem.Filesystem/Stat", "files_stat", &["files:read"])
        .paths()
        .summary("Filesystem.Stat: one entry."),
    envd("envd_list_dir", Post, "/filesystem.Filesystem/ListDir", "files_list", &["files:read"])
        .limits(&[L::MaxDepth, L::MaxEntries])
        .paths()
        .summary("Filesystem.ListDir: entries to a depth."),
    envd("envd_make_dir", Post, "/filesystem.Filesystem/MakeDir", "files_mkdir", &["files:write"])
        .paths()
        .summary("Filesystem.MakeDir: a directory and its parents."),
    envd("envd_move", Post, "/filesystem.Filesystem/Move", "files_move", &["files:write", "files:delete"])
        .paths()
        .summary("Filesystem.Move: rename or move an entry."),
    envd("envd_remove", Post, "/filesystem.Filesystem/Remove", "files_delete", &["files:delete"])
        .paths()
        .summary("Filesystem.Remove: a file or a tree."),
    envd("envd_watch_dir", Post, "/filesystem.Filesystem/WatchDir", "files_watch", &["files:read"])
        .limits(&[L::MaxDurationSeconds])
        .paths()
        .streaming()
        .summary("Filesystem.WatchDir: events of a directory as a stream."),
    envd("envd_create_watcher", Post, "/filesystem.Filesystem/CreateWatcher", "files_watch", &["files:read"])
        .limits(&[L::MaxDurationSeconds])
        .paths()
        .summary("Filesystem.CreateWatcher: a watch polled with GetWatcherEvents."),
    envd("envd_get_watcher_events", Post, "/filesystem.Filesystem/GetWatcherEvents", "files_watch", &["files:read"])
        .summary("Filesystem.GetWatcherEvents: the events a watcher gathered."),
    envd("envd_remove_watcher", Post, "/filesystem.Filesystem/RemoveWatcher", "files_watch", &["files:read"])
        .summary("Filesystem.RemoveWatcher: end a watcher."),
    envd("envd_process_start", Post, "/process.Process/Start", "process_start", &["process:run"])
        .limits(EXEC_LIMITS)
        .params(EXEC_PARAMS)
        .paths()
        .streaming()
        .also("pty_create_session")
        .summary("Process.Start: a process (or a terminal) and its events."),
    envd("envd_process_connect", Post, "/process.Process/Connect", "process_output", &["process:read"])
        .streaming()
        .summary("Process.Connect: a process's events, replayed then live."),
    envd("envd_process_list", Post, "/process.Process/List", "process_list", &["process:read"])
        .summary("Process.List: running processes."),
    envd("envd_process_send_input", Post, "/process.Process/SendInput", "process_stdin", &["process:manage"])
        .summary("Process.SendInput: write to stdin or the terminal."),
    envd("envd_process_stream_input", Post, "/process.Process/StreamInput", "process_stdin", &["process:manage"])
        .streamed_body()
        .summary("Process.StreamInput: a stream of input messages."),
    envd("envd_process_close_stdin", Post, "/process.Process/CloseStdin", "process_stdin", &["process:manage"])
        .summary("Process.CloseStdin: close a process's stdin."),
    envd("envd_process_send_signal", Post, "/process.Process/SendSignal", "process_signal", &["process:manage"])
        .params(&[P::AllowedSignals])
        .summary("Process.SendSignal: SIGTERM or SIGKILL to a process's group."),
    envd("envd_process_update", Post, "/process.Process/Update", "pty_resize", &["terminal:use"])
        .summary("Process.Update: resize a terminal process."),
    // code interpreter (49999): executing code is process execution
    code("code_health", Get, "/health", "health", &[]).anonymous().summary("The code port's liveness probe."),
    code("code_execute", Post, "/execute", "process_start", &["process:run"])
        .params(EXEC_PARAMS)
        .streaming()
        .summary("Execute code in a context; output as NDJSON lines."),
    code("code_execution_attach", Get, "/executions/{id}", "process_start", &["process:run"])
        .streaming()
        .summary("Re-attach to a detached execution after a cursor (this server's extension)."),
    code("code_contexts_create", Post, "/contexts", "process_start", &["process:run"])
        .params(EXEC_PARAMS)
        .paths()
        .summary("Start a context (a kernel) in a working directory."),
    code("code_contexts_list", Get, "/contexts", "process_list", &["process:read"]).summary("The live contexts."),
    code("code_contexts_restart", Post, "/contexts/{id}/restart", "process_start", &["process:run"])
        .params(EXEC_PARAMS)
        .summary("Restart a context's kernel, clearing its state."),
    code("code_contexts_delete", Delete, "/contexts/{id}", "process_signal", &["process:manage"])
        .summary("End a context and its kernel."),
];

/// Looks an endpoint up by id.
pub fn find(id: &str) -> Option<&'static Endpoint> {
    ENDPOINTS.iter().find(|e| e.id == id)
}

/// The ids a group expands to, in declaration order.
pub fn ids_of(group: Group) -> impl Iterator<Item = &'static str> {
    ENDPOINTS.iter().filter(move |e| e.group == group).map(|e| e.id)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn ids_are_unique_and_snake_case() {
        let mut seen = HashSet::new();
        for e in ENDPOINTS {
            assert!(seen.insert(e.id), "duplicate id {}", e.id);
            assert!(e.id.chars().all(|c| c.is_ascii_lowercase() || c == '_'), "{}", e.id);
        }
    }

    #[test]
    fn bindings_are_unique_per_port() {
        let mut seen = HashSet::new();
        for e in ENDPOINTS {
            assert!(seen.insert((e.port, e.method, e.path)), "{} {} bound twice", e.method.as_str(), e.path);
        }
    }

    /// The reference's endpoints: the API and PTY ports' entries that are not extensions.
    fn reference() -> impl Iterator<Item = &'static Endpoint> {
        ENDPOINTS.iter().filter(|e| !e.extension)
    }

    #[test]
    fn group_sizes_match_the_reference() {
        let count = |g| reference().filter(|e| e.group == g).count();
        assert_eq!(count(Core), 3);
        assert_eq!(count(Commands), 2);
        assert_eq!(count(FileOps), 10);
        assert_eq!(count(Process), 8);
        assert_eq!(count(Terminal), 6);
        assert_eq!(count(System), 6);
        assert_eq!(count(DevTools), 3);
        assert_eq!(count(Browser), 8);
        assert_eq!(count(Agents), 70);
        assert_eq!(reference().count(), 116);
        assert!(reference().all(|e| matches!(e.port, Port::Api | Port::Pty)));
    }

    #[test]
    fn the_reference_table_is_kept_and_extensions_are_marked() {
        let api_extensions: Vec<_> =
            ENDPOINTS.iter().filter(|e| e.extension && e.port == Port::Api).map(|e| e.id).collect();
        assert_eq!(
            api_extensions,
            [
                "openapi",
                "files_content_read",
                "files_content_write",
                "files_upload_status",
                "files_upload_cancel",
                "metrics",
                "mcp"
            ]
        );
        let streamed: Vec<_> = ENDPOINTS.iter().filter(|e| e.streamed_body).map(|e| e.id).collect();
        assert_eq!(streamed, ["files_content_write", "envd_files_write", "envd_process_stream_input"]);
        assert_eq!(ENDPOINTS.iter().filter(|e| e.port == Port::Envd).count(), 23);
        assert_eq!(ENDPOINTS.iter().filter(|e| e.port == Port::Code).count(), 7);
        let pty: Vec<_> = ENDPOINTS.iter().filter(|e| e.port == Port::Pty).map(|e| e.id).collect();
        assert_eq!(pty, ["pty_connect"]);
    }

    #[test]
    fn every_extension_is_governed_by_a_reference_endpoint_of_its_power() {
        for e in ENDPOINTS.iter().filter(|e| e.extension) {
            let governing =
                e.governed_by.and_then(find).unwrap_or_else(|| panic!("{} has no governing endpoint", e.id));
            assert!(!governing.extension, "{} is governed by another extension", e.id);
            assert!(!e.paths || governing.paths, "{}: path rules must reach it as they reach {}", e.id, governing.id);
            assert_eq!(e.auth_required, governing.auth_required, "{}", e.id);
            for limit in e.limits {
                assert!(governing.accepts_limit(*limit), "{}: {limit} unknown to {}", e.id, governing.id);
            }
            for param in e.params {
                assert!(governing.accepts_param(*param), "{}: {param} unknown to {}", e.id, governing.id);
            }
        }
        let also: Vec<_> = ENDPOINTS.iter().filter_map(|e| e.also).collect();
        assert!(also.iter().all(|id| find(id).is_some()), "{also:?}");
    }

    #[test]
    fn docs_ports_names_the_rule_governing_every_extension() {
        let doc = include_str!("../../../docs/ports.md");
        for e in ENDPOINTS.iter().filter(|e| e.extension) {
            let governing = e.governed_by.unwrap_or_default();
            let row = doc.lines().find(|l| l.contains(&format!("| `{}` |", e.id)));
            let row = row.unwrap_or_else(|| panic!("docs/ports.md has no row for {}", e.id));
            assert!(row.contains(&format!("| `{governing}`")), "docs/ports.md: {} is governed by {governing}", e.id);
        }
    }

    #[test]
    fn every_endpoint_declares_its_powers() {
        for e in ENDPOINTS {
            assert!(!e.powers().is_empty(), "{} declares no power", e.id);
            let declared = e.declared_powers;
            assert!(!declared.is_empty() || e.extension, "{} must declare its powers: it governs itself", e.id);
        }
    }

    #[test]
    fn an_extension_has_no_power_its_governing_endpoint_lacks() {
        // A preset switches a power off on the governing endpoints; an extension follows its rule.
        for e in ENDPOINTS.iter().filter(|e| e.extension) {
            let governing = e.governing();
            for p in e.powers() {
                assert!(governing.has(*p), "{}: {p} is not a power of {}", e.id, governing.id);
            }
        }
    }

    #[test]
    fn every_endpoint_has_a_summary() {
        assert!(ENDPOINTS.iter().all(|e| !e.summary.is_empty()));
    }

    #[test]
    fn only_health_probes_are_anonymous_and_core() {
        let anonymous: Vec<_> = ENDPOINTS.iter().filter(|e| !e.auth_required).map(|e| e.id).collect();
        assert_eq!(anonymous, ["health", "envd_health", "code_health"]);
        let core: Vec<_> = ENDPOINTS.iter().filter(|e| e.is_core()).map(|e| e.id).collect();
        assert_eq!(
            core,
            ["health", "capabilities", "capabilities_check", "openapi", "mcp", "envd_health", "code_health"]
        );
    }
}
