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
}

impl Group {
    /// Every group, in the reference's order.
    pub const ALL: [Group; 9] = [
        Group::Core,
        Group::Commands,
        Group::FileOps,
        Group::Process,
        Group::Terminal,
        Group::System,
        Group::DevTools,
        Group::Browser,
        Group::Agents,
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

/// The port each listener binds unless configured otherwise: the reference
/// server's and the protocols' own (`config` and the client both use them).
pub mod default_ports {
    /// The HTTP API.
    pub const API: u16 = 9000;
    /// The terminal WebSocket.
    pub const PTY: u16 = 9001;
    /// The code-interpreter protocol.
    pub const CODE: u16 = 49999;
    /// envd's protocol.
    pub const ENVD: u16 = 49983;
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
    /// Whether the endpoint can execute arbitrary programs or code.
    pub exec: bool,
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
    /// too (a rule for `files_download_stream` also governs `files_content_read`),
    /// so a policy written for the reference server cannot be bypassed through it.
    pub governed_by: Option<&'static str>,
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
            exec: false,
            streaming: false,
            auth_required: true,
            streamed_body: false,
            extension: false,
            governed_by: None,
        }
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

    const fn exec(mut self) -> Self {
        self.exec = true;
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

    /// Whether the endpoint is served by another transport and has no HTTP route.
    pub fn is_virtual(&self) -> bool {
        self.method == Method::Ws
    }

    /// Whether the endpoint can never be disabled.
    pub fn is_core(&self) -> bool {
        self.group == Group::Core
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

const fn agent(id: &'static str, method: Method, path: &'static str, summary: &'static str) -> Endpoint {
    Endpoint::new(id, method, path, Agents, &["agents:use"]).summary(summary)
}

const EXEC_LIMITS: &[Limit] = &[L::MaxOutputBytes, L::MaxProcesses, L::TimeoutSeconds];
const EXEC_PARAMS: &[Param] = &[P::AllowCommands, P::DenyCommands];
const UPLOAD_PARAMS: &[Param] = &[P::AllowExtensions, P::DenyExtensions, P::Overwrite];

/// Every endpoint, in declaration order.
pub static ENDPOINTS: &[Endpoint] = &[
    // core
    ep("health", Get, "/health", Core, &[]).anonymous().summary("Liveness probe; needs no credentials."),
    ep("capabilities", Get, "/capabilities", Core, &["core:read"])
        .summary("Discovery document: groups, identity and every endpoint's state."),
    ep("capabilities_check", Post, "/capabilities/check", Core, &["core:read"])
        .summary("The policy's decision for a call the client is about to make."),
    // commands
    ep("list_commands", Get, "/commands", Commands, &["commands:list"])
        .summary("Registered commands and their arguments."),
    ep("run_command", Post, "/commands/{name}", Commands, &["commands:run"]).summary("Run one registered command."),
    // file_ops
    ep("files_list", Get, "/files/list", FileOps, &["files:read"])
        .limits(&[L::MaxDepth, L::MaxEntries])
        .paths()
        .summary("Entries of a directory, optionally recursive."),
    ep("files_stat", Get, "/files/stat", FileOps, &["files:read"]).paths().summary("Metadata of one path."),
    ep("files_mkdir", Post, "/files/mkdir", FileOps, &["files:write"])
        .paths()
        .summary("Make a directory and its parents."),
    ep("files_delete", Delete, "/files", FileOps, &["files:delete"])
        .paths()
        .summary("Remove a file or a directory tree."),
    ep("files_move", Post, "/files/move", FileOps, &["files:write", "files:delete"])
        .paths()
        .summary("Rename or move a path."),
    ep("files_search", Post, "/files/search", FileOps, &["files:read"])
        .limits(&[L::MaxDepth, L::MaxResults, L::TimeoutSeconds])
        .paths()
        .summary("Find files by name glob or by content."),
    ep("files_upload_stream", Post, "/files/upload-stream", FileOps, &["files:write"])
        .limits(&[L::MaxBytes])
        .params(UPLOAD_PARAMS)
        .paths()
        .summary("Write a file sent as base64 JSON."),
    ep("files_download_stream", Get, "/files/download-stream", FileOps, &["files:read"])
        .limits(&[L::MaxBytes])
        .paths()
        .summary("Read a file returned as base64 JSON."),
    ep("files_archive", Post, "/files/archive", FileOps, &["files:read"])
        .limits(&[L::MaxBytes, L::MaxFiles])
        .paths()
        .summary("Pack paths into a tar.gz or zip archive."),
    ep("files_watch", Get, "/files/watch", FileOps, &["files:read"])
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
        .limits(EXEC_LIMITS)
        .params(EXEC_PARAMS)
        .paths()
        .exec()
        .summary("Run a command to completion and return its output."),
    ep("shell_stream", Post, "/shell/stream", Process, &["process:run"])
        .limits(EXEC_LIMITS)
        .params(EXEC_PARAMS)
        .paths()
        .exec()
        .streaming()
        .summary("Run a command and stream its output as server-sent events."),
    ep("process_start", Post, "/process/start", Process, &["process:run"])
        .limits(EXEC_LIMITS)
        .params(EXEC_PARAMS)
        .paths()
        .exec()
        .summary("Start a command in the background."),
    ep("process_list", Get, "/process/list", Process, &["process:read"]).summary("Processes this server started."),
    ep("process_detail", Get, "/process/{pid}", Process, &["process:read"]).summary("State of one started process."),
    ep("process_signal", Post, "/process/{pid}/signal", Process, &["process:manage"])
        .params(&[P::AllowedSignals])
        .summary("Send a signal to a started process."),
    ep("process_stdin", Post, "/process/{pid}/stdin", Process, &["process:manage"])
        .summary("Write to, or close, a process's stdin."),
    ep("process_output", Get, "/process/{pid}/output", Process, &["process:read"])
        .summary("Output of a process from a cursor on."),
    // terminal
    ep("pty_create_session", Post, "/pty/sessions", Terminal, &["terminal:use"])
        .limits(&[L::MaxSessions])
        .params(&[P::EnvDeny, P::Shells])
        .summary("Open a terminal session."),
    ep("pty_list_sessions", Get, "/pty/sessions", Terminal, &["terminal:use"]).summary("Open terminal sessions."),
    ep("pty_detail", Get, "/pty/sessions/{id}", Terminal, &["terminal:use"]).summary("State of one terminal session."),
    ep("pty_resize", Post, "/pty/sessions/{id}/resize", Terminal, &["terminal:use"])
        .summary("Change a terminal's size."),
    ep("pty_delete_session", Delete, "/pty/sessions/{id}", Terminal, &["terminal:use"])
        .summary("Close a terminal session."),
    // system
    ep("system_info", Get, "/system/info", System, &["system:read"]).summary("Operating system, CPU, memory and disk."),
    ep("env_get", Get, "/env", System, &["system:read"])
        .params(&[P::AllowVars, P::DenyVars])
        .summary("Read environment variables."),
    ep("env_set", Post, "/env", System, &["system:write"])
        .params(&[P::AllowVars, P::DenyVars])
        .summary("Set environment variables for later commands."),
    ep("ports", Get, "/ports", System, &["system:read"]).summary("Listening TCP ports and their processes."),
    ep("packages", Get, "/packages", System, &["system:read"]).summary("Installed packages of a package manager."),
    ep("system_metrics", Get, "/system/metrics", System, &["system:read"]).summary("Current CPU, memory and disk use."),
    // dev_tools
    ep("code_run", Post, "/code/run", DevTools, &["devtools:run"])
        .limits(&[L::MaxOutputBytes, L::TimeoutSeconds])
        .params(&[P::Languages])
        .exec()
        .summary("Run a code snippet once."),
    ep("git_status", Get, "/git/status", DevTools, &["devtools:read"])
        .paths()
        .summary("Branch and changed files of a repository."),
    ep("git_diff", Get, "/git/diff", DevTools, &["devtools:read"])
        .paths()
        .summary("Diff of a repository's working tree."),
    // browser
    ep("browser_navigate", Post, "/browser/navigate", Browser, &["browser:use"])
        .params(&[P::BlockPrivateNetworks, P::UrlAllow, P::UrlDeny])
        .exec()
        .summary("Open a URL in the headless browser."),
    ep("browser_screenshot", Post, "/browser/screenshot", Browser, &["browser:use"])
        .summary("Capture the page as an image."),
    ep("browser_content", Get, "/browser/content", Browser, &["browser:use"]).summary("The page's HTML or text."),
    ep("browser_click", Post, "/browser/click", Browser, &["browser:use"]).summary("Click an element."),
    ep("browser_type", Post, "/browser/type", Browser, &["browser:use"]).summary("Type text into an element."),
    ep("browser_evaluate", Post, "/browser/evaluate", Browser, &["browser:evaluate"])
        .exec()
        .summary("Evaluate a script in the page."),
    ep("browser_pdf", Post, "/browser/pdf", Browser, &["browser:use"]).summary("Print the page to PDF."),
    ep("browser_console", Get, "/browser/console", Browser, &["browser:use"]).summary("The page's console messages."),
    // terminal, served by the PTY listener
    ep("pty_connect", Ws, "/pty", Terminal, &["terminal:use"])
        .streaming()
        .summary("Attach to a terminal session over WebSocket on the PTY port."),
    // agents (opt-in)
    agent("agents_sessions_create", Post, "/v1/agents/sessions", "Create an agent session."),
    agent("agents_sessions_list", Get, "/v1/agents/sessions", "Agent sessions."),
    agent("agents_sessions_get", Get, "/v1/agents/sessions/{id}", "One agent session."),
    agent("agents_sessions_update", Post, "/v1/agents/sessions/{id}", "Change a session's metadata."),
    agent("agents_sessions_delete", Delete, "/v1/agents/sessions/{id}", "Remove an agent session."),
    agent("agents_sessions_events_create", Post, "/v1/agents/sessions/{id}/events", "Send input to a session."),
    agent(
        "agents_sessions_events_stream",
        Get,
        "/v1/agents/sessions/{id}/events",
        "A session's events as server-sent events.",
    )
    .streaming(),
    agent("agents_sessions_items_list", Get, "/v1/agents/sessions/{id}/items", "Items of a session."),
    agent("agents_sessions_turns_list", Get, "/v1/agents/sessions/{id}/turns", "Turns of a session."),
    agent("agents_sessions_turns_get", Get, "/v1/agents/sessions/{id}/turns/{turn_id}", "One turn."),
    agent(
        "agents_sessions_turns_items_list",
        Get,
        "/v1/agents/sessions/{id}/turns/{turn_id}/items",
        "Items of a turn.",
    ),
    agent("agents_artifacts_list", Get, "/v1/agents/sessions/{id}/artifacts", "Artifacts of a session."),
    agent("agents_artifacts_get", Get, "/v1/agents/sessions/{id}/artifacts/{artifact_id}", "Metadata of one artifact."),
    agent("agents_artifacts_delete", Delete, "/v1/agents/sessions/{id}/artifacts/{artifact_id}", "Remove an artifact."),
    agent(
        "agents_artifacts_content",
        Get,
        "/v1/agents/sessions/{id}/artifacts/{artifact_id}/content",
        "Bytes of an artifact.",
    )
    .streaming(),
    agent("agents_traces_list", Get, "/v1/agents/sessions/{id}/traces", "Traces of a session."),
    agent("agents_subagents_list", Get, "/v1/agents/sessions/{id}/subagents", "Subagents of a session."),
    agent("agents_subagents_get", Get, "/v1/agents/sessions/{id}/subagents/{subagent_id}", "One subagent."),
    agent(
        "agents_subagents_items_list",
        Get,
        "/v1/agents/sessions/{id}/subagents/{subagent_id}/items",
        "Items of a subagent.",
    ),
    agent(
        "agents_subagents_turns_list",
        Get,
        "/v1/agents/sessions/{id}/subagents/{subagent_id}/turns",
        "Turns of a subagent.",
    ),
    agent(
        "agents_subagents_turns_get",
        Get,
        "/v1/agents/sessions/{id}/subagents/{subagent_id}/turns/{turn_id}",
        "One turn of a subagent.",
    ),
    agent(
        "agents_subagents_turns_items_list",
        Get,
        "/v1/agents/sessions/{id}/subagents/{subagent_id}/turns/{turn_id}/items",
        "Items of a subagent's turn.",
    ),
    agent("agents_runtimes_list", Get, "/v1/agents/runtimes", "Agent runtimes available here."),
    agent("agents_environments_create", Post, "/v1/agents/environments", "Bind a local directory as an environment."),
    agent("agents_environments_list", Get, "/v1/agents/environments", "Environments."),
    agent(
        "agents_environment_templates_create",
        Post,
        "/v1/agents/environments/templates",
        "Store an environment template.",
    ),
    agent("agents_environment_templates_list", Get, "/v1/agents/environments/templates", "Environment templates."),
    agent(
        "agents_environment_templates_get",
        Get,
        "/v1/agents/environments/templates/{environment_template_id}",
        "One environment template.",
    ),
    agent(
        "agents_environment_templates_update",
        Post,
        "/v1/agents/environments/templates/{environment_template_id}",
        "Change an environment template.",
    ),
    agent(
        "agents_environment_templates_delete",
        Delete,
        "/v1/agents/environments/templates/{environment_template_id}",
        "Remove an environment template.",
    ),
    agent("agents_environments_get", Get, "/v1/agents/environments/{environment_id}", "One environment."),
    agent(
        "agents_environment_files_create",
        Post,
        "/v1/agents/environments/{environment_id}/files",
        "Stage a file in an environment.",
    ),
    agent(
        "agents_environment_files_list",
        Get,
        "/v1/agents/environments/{environment_id}/files",
        "Files of an environment.",
    ),
    agent(
        "agents_cannot_executor_registration",
        Post,
        "/v1/agents/environments/{environment_id}/register",
        "Executor registration (always refused).",
    ),
    agent(
        "agents_cannot_executor_channel",
        Get,
        "/v1/agents/environments/{environment_id}/connect",
        "Executor channel (always refused).",
    ),
    agent("agents_definitions_create", Post, "/v1/agents", "Store an agent definition."),
    agent("agents_definitions_list", Get, "/v1/agents", "Agent definitions."),
    agent("agents_definitions_get", Get, "/v1/agents/{agent_id}", "One agent definition."),
    agent("agents_definitions_update", Post, "/v1/agents/{agent_id}", "Change an agent definition."),
    agent("agents_definitions_delete", Delete, "/v1/agents/{agent_id}", "Remove an agent definition."),
    agent("agents_vaults_create", Post, "/v1/vaults", "Create an in-memory vault."),
    agent("agents_vaults_list", Get, "/v1/vaults", "Vaults."),
    agent("agents_vaults_get", Get, "/v1/vaults/{vault_id}", "One vault."),
    agent("agents_vaults_update", Post, "/v1/vaults/{vault_id}", "Change a vault."),
    agent("agents_vaults_delete", Delete, "/v1/vaults/{vault_id}", "Remove a vault and its credentials."),
    agent(
        "agents_vault_credentials_create",
        Post,
        "/v1/vaults/{vault_id}/credentials",
        "Store a write-only credential.",
    ),
    agent("agents_vault_credentials_list", Get, "/v1/vaults/{vault_id}/credentials", "Credential metadata of a vault."),
    agent(
        "agents_vault_credentials_get",
        Get,
        "/v1/vaults/{vault_id}/credentials/{credential_id}",
        "Metadata of one credential.",
    ),
    agent(
        "agents_vault_credentials_update",
        Post,
        "/v1/vaults/{vault_id}/credentials/{credential_id}",
        "Change or rotate a credential.",
    ),
    agent(
        "agents_vault_credentials_delete",
        Delete,
        "/v1/vaults/{vault_id}/credentials/{credential_id}",
        "Remove a credential.",
    ),
    agent("agents_responses_create", Post, "/v1/responses", "Run one agent turn as a response.").streaming(),
    agent("agents_responses_connect", Get, "/v1/responses", "Responses over WebSocket."),
    agent(
        "agents_cannot_responses_input_tokens",
        Post,
        "/v1/responses/input_tokens",
        "Input token counting (always refused).",
    ),
    agent("agents_responses_compact", Post, "/v1/responses/compact", "Summarise a conversation."),
    agent("agents_responses_get", Get, "/v1/responses/{response_id}", "A stored response, or its replay.").streaming(),
    agent("agents_responses_delete", Delete, "/v1/responses/{response_id}", "Remove a stored response."),
    agent("agents_responses_cancel", Post, "/v1/responses/{response_id}/cancel", "Cancel a response's running turn."),
    agent("agents_responses_input_items", Get, "/v1/responses/{response_id}/input_items", "Input items of a response."),
    agent("agents_models_list", Get, "/v1/models", "Definitions and adapters as models."),
    agent("agents_models_get", Get, "/v1/models/{model}", "One model."),
    agent("agents_cannot_models_delete", Delete, "/v1/models/{model}", "Model deletion (always refused)."),
    agent("agents_files_create", Post, "/v1/files", "Store a local data blob."),
    agent("agents_webhooks_create", Post, "/v1/webhook_endpoints", "Register a local webhook endpoint."),
    agent("agents_webhooks_list", Get, "/v1/webhook_endpoints", "Webhook endpoints."),
    agent("agents_webhooks_get", Get, "/v1/webhook_endpoints/{webhook_endpoint_id}", "One webhook endpoint."),
    agent("agents_webhooks_update", Post, "/v1/webhook_endpoints/{webhook_endpoint_id}", "Change a webhook endpoint."),
    agent(
        "agents_webhooks_delete",
        Delete,
        "/v1/webhook_endpoints/{webhook_endpoint_id}",
        "Remove a webhook endpoint.",
    ),
    agent(
        "agents_webhooks_rotate_secret",
        Post,
        "/v1/webhook_endpoints/{webhook_endpoint_id}/rotate_secret",
        "Rotate a webhook endpoint's signing secret.",
    ),
    agent(
        "agents_webhooks_test",
        Post,
        "/v1/webhook_endpoints/{webhook_endpoint_id}/test",
        "Send a signed test event.",
    ),
    agent("agents_webhook_event_types", Get, "/v1/webhook_event_types", "Webhook event types."),
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
    fn bindings_are_unique() {
        let mut seen = HashSet::new();
        for e in ENDPOINTS {
            assert!(seen.insert((e.method, e.path)), "{} {} bound twice", e.method.as_str(), e.path);
        }
    }

    #[test]
    fn group_sizes_match_the_reference() {
        let count = |g| ids_of(g).count();
        assert_eq!(count(Core), 3);
        assert_eq!(count(Commands), 2);
        assert_eq!(count(FileOps), 14);
        assert_eq!(count(Process), 8);
        assert_eq!(count(Terminal), 6);
        assert_eq!(count(System), 6);
        assert_eq!(count(DevTools), 3);
        assert_eq!(count(Browser), 8);
        assert_eq!(count(Agents), 70);
        assert_eq!(ENDPOINTS.len(), 120);
    }

    #[test]
    fn the_reference_table_is_kept_and_extensions_are_marked() {
        let reference: Vec<_> = ENDPOINTS.iter().filter(|e| !e.extension).collect();
        assert_eq!(reference.len(), 116);
        let reference_file_ops = reference.iter().filter(|e| e.group == FileOps).count();
        assert_eq!(reference_file_ops, 10);
        let extensions: Vec<_> = ENDPOINTS.iter().filter(|e| e.extension).map(|e| e.id).collect();
        assert_eq!(
            extensions,
            ["files_content_read", "files_content_write", "files_upload_status", "files_upload_cancel"]
        );
        assert!(ENDPOINTS.iter().filter(|e| e.streamed_body).all(|e| e.id == "files_content_write"));
    }

    #[test]
    fn every_endpoint_has_a_summary() {
        assert!(ENDPOINTS.iter().all(|e| !e.summary.is_empty()));
    }

    #[test]
    fn only_health_is_anonymous() {
        let anonymous: Vec<_> = ENDPOINTS.iter().filter(|e| !e.auth_required).map(|e| e.id).collect();
        assert_eq!(anonymous, ["health"]);
    }
}
