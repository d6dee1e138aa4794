//! What each API-port endpoint takes and answers, by endpoint id: the wire
//! types (`abx_wire::api`) of its query, body and answers, for the OpenAPI
//! document.
//!
//! The endpoint table says which operations exist (path, method, id, group,
//! scopes); this file only names their types. A row of the table that has
//! no entry here still appears in the document, with a generic body and
//! answer, so a new row never breaks the build: giving it a shape is one
//! line here and a `JsonSchema` derive on its wire types.

use schemars::{JsonSchema, Schema, SchemaGenerator};
use serde_json::{Map, Value};

use abx_wire::api::browser as b;
use abx_wire::api::code::{CodeRunRequest, CodeRunResult, GitDiff, GitQuery, GitStatus};
use abx_wire::api::files::{
    ArchiveRequest, ArchiveResponse, ContentQuery, DeleteResponse, DownloadResponse, FileInfo, ListQuery, ListResponse,
    MkdirRequest, MkdirResponse, MoveRequest, MoveResponse, PathQuery, SearchRequest, SearchResponse, TransferResponse,
    UploadCancelled, UploadRequest, UploadStatus, WatchQuery,
};
use abx_wire::api::process::{
    ExecRequest, OutputQuery, ProcessInfo, ProcessList, ProcessOutput, ShellResult, SignalRequest, SignalResult,
    Started, StdinRequest, StdinResult,
};
use abx_wire::api::{
    Capabilities, CheckRequest, CommandList, CommandResult, Decision, EnvQuery, EnvSetRequest, EnvUpdated,
    EnvVariables, Health, PackageList, PackagesQuery, PortList, PtyClosed, PtyCreateRequest, PtyCreated,
    PtyResizeRequest, PtySessionInfo, PtySessionList, SystemInfo, SystemMetrics,
};

/// Writes a type's schema (a `$ref` for named types) with the document's generator.
pub type SchemaFn = fn(&mut SchemaGenerator) -> Schema;

fn schema<T: JsonSchema>(generator: &mut SchemaGenerator) -> Schema {
    generator.subschema_for::<T>()
}

/// What a request body or an answer carries.
#[derive(Debug, Clone, Copy)]
pub enum Content {
    /// `application/json` of this type.
    Json(SchemaFn),
    /// `text/event-stream`: events of these names, each with JSON data (described in the text).
    Events(&'static [&'static str], &'static str),
    /// Raw bytes (`application/octet-stream`).
    Bytes,
    /// Prometheus text exposition.
    Prometheus,
    /// No body.
    Empty,
    /// Anything (a row without a shape).
    Any,
}

/// One answer an endpoint gives on success.
#[derive(Debug, Clone, Copy)]
pub struct Answer {
    /// HTTP status.
    pub status: u16,
    /// When it is given.
    pub description: &'static str,
    /// Its body.
    pub content: Content,
}

/// A follow-up call fed by the answer: `(operation id, its parameter, JSON pointer into the answer)`.
pub type Link = (&'static str, &'static str, &'static str);

/// What an endpoint takes and answers.
#[derive(Debug, Clone)]
pub struct Shape {
    /// The query string's fields, as one object type.
    pub query: Option<SchemaFn>,
    /// The request body.
    pub body: Option<Content>,
    /// Success answers.
    pub answers: Vec<Answer>,
    /// Error statuses beyond the pipeline's, each with the JSON error body.
    pub errors: &'static [u16],
    /// Calls the first answer's values feed (OpenAPI links; stateful fuzzing follows them).
    pub links: &'static [Link],
}

impl Shape {
    fn new(body: Option<Content>, ok: Content) -> Shape {
        Shape {
            query: None,
            body,
            answers: vec![Answer { status: 200, description: "Success.", content: ok }],
            errors: &[],
            links: &[],
        }
    }

    /// The shape of a row that has none here: any body, any answer.
    pub fn generic(takes_body: bool) -> Shape {
        Shape::new(takes_body.then_some(Content::Any), Content::Any)
    }

    fn query<Q: JsonSchema>(mut self) -> Shape {
        self.query = Some(schema::<Q>);
        self
    }

    fn also(mut self, status: u16, description: &'static str, content: Content) -> Shape {
        self.answers.push(Answer { status, description, content });
        self
    }

    fn errors(mut self, errors: &'static [u16]) -> Shape {
        self.errors = errors;
        self
    }

    fn links(mut self, links: &'static [Link]) -> Shape {
        self.links = links;
        self
    }
}

fn json<T: JsonSchema>() -> Content {
    Content::Json(schema::<T>)
}

/// A call without a body answering `R`.
fn reply<R: JsonSchema>() -> Shape {
    Shape::new(None, json::<R>())
}

/// A call with a JSON body `B` answering `R`.
fn post<B: JsonSchema, R: JsonSchema>() -> Shape {
    Shape::new(Some(json::<B>()), json::<R>())
}

const PROCESS_LINKS: &[Link] = &[
    ("process_detail", "pid", "/pid"),
    ("process_output", "pid", "/pid"),
    ("process_stdin", "pid", "/pid"),
    ("process_signal", "pid", "/pid"),
];
const PTY_LINKS: &[Link] = &[
    ("pty_detail", "id", "/session_id"),
    ("pty_resize", "id", "/session_id"),
    ("pty_delete_session", "id", "/session_id"),
];

/// Statuses of the file endpoints' own refusals: conflicts, and a full disk on writes.
const WRITES: &[u16] = &[409, 507];
/// A process that was started without the pipe asked for (stdin, captured output).
const CONFLICT: &[u16] = &[409];
/// A command that outlived its timeout: 500 `TimeoutError`, as the reference
/// answers and its client expects (it recognises the `type`).
const TIMEOUT: &[u16] = &[500];

/// A method one row serves besides its own (`src/http/routes.rs` binds
/// them to the same handler): its method, operation id, summary and shape.
pub type OtherMethod = (&'static str, &'static str, &'static str, Shape);

/// The other methods of the row `id`: `/mcp`'s GET (a session's stream of
/// server messages) and DELETE (ends a session), both naming the session in
/// `Mcp-Session-Id`.
pub fn other_methods(id: &str) -> Vec<OtherMethod> {
    match id {
        "mcp" => vec![
            (
                "get",
                "mcp_stream",
                "Model Context Protocol: a session's stream of server messages (`Mcp-Session-Id`), or \
                 the rest of one from `Last-Event-ID`.",
                Shape::new(None, Content::Events(&["message"], "a JSON-RPC request or notification from the server"))
                    .errors(&[405, 406, 410]),
            ),
            (
                "delete",
                "mcp_end",
                "Model Context Protocol: ends the session named in `Mcp-Session-Id`.",
                Shape {
                    answers: vec![Answer { status: 204, description: "Ended.", content: Content::Empty }],
                    ..Shape::new(None, Content::Empty)
                }
                .errors(&[405]),
            ),
        ],
        _ => Vec::new(),
    }
}

/// The shape of the endpoint `id`, when this file gives it one.
pub fn shape(id: &str) -> Option<Shape> {
    let object = json::<Map<String, Value>>;
    Some(match id {
        "health" => reply::<Health>(),
        "capabilities" => reply::<Capabilities>(),
        "capabilities_check" => post::<CheckRequest, Decision>(),
        "openapi" => Shape::new(None, json::<Map<String, Value>>()),
        "list_commands" => reply::<CommandList>(),
        "run_command" => Shape::new(Some(object()), json::<CommandResult>()).errors(TIMEOUT),
        "files_list" => reply::<ListResponse>().query::<ListQuery>(),
        "files_stat" => reply::<FileInfo>().query::<PathQuery>(),
        "files_mkdir" => post::<MkdirRequest, MkdirResponse>().errors(WRITES),
        "files_delete" => reply::<DeleteResponse>().query::<PathQuery>(),
        "files_move" => post::<MoveRequest, MoveResponse>().errors(WRITES),
        "files_search" => post::<SearchRequest, SearchResponse>(),
        "files_upload_stream" => post::<UploadRequest, TransferResponse>().errors(WRITES),
        "files_download_stream" => reply::<DownloadResponse>().query::<PathQuery>(),
        "files_archive" => post::<ArchiveRequest, ArchiveResponse>().errors(WRITES),
        "files_watch" => Shape::new(
            None,
            Content::Events(
                &["ready", "change", "end", "gap"],
                "`ready` {path}, then `change` (a WatchEvent) per change, then `end` {reason}, each with an `id`; \
                 the same URL with a `Last-Event-ID` header (within 5 s of the last connection) resumes the watch after \
                 that id (a `gap` {events} first when events after it are no longer held; 400 for an id of no watch of \
                 the caller's, or past its events)",
            ),
        )
        .query::<WatchQuery>(),
        "files_content_read" => Shape::new(None, Content::Bytes)
            .query::<PathQuery>()
            .also(206, "The requested range.", Content::Bytes)
            .also(304, "Not modified (`If-None-Match`).", Content::Empty)
            .errors(&[416]),
        "files_content_write" => Shape::new(Some(Content::Bytes), json::<TransferResponse>())
            .query::<ContentQuery>()
            .also(201, "Created.", json::<TransferResponse>())
            .also(202, "A piece of a resumable upload was stored; more is expected.", json::<UploadStatus>())
            .errors(WRITES),
        "files_upload_status" => reply::<UploadStatus>().query::<PathQuery>(),
        "files_upload_cancel" => reply::<UploadCancelled>().query::<PathQuery>(),
        "shell" => post::<ExecRequest, ShellResult>().errors(TIMEOUT),
        "shell_stream" => Shape::new(
            Some(json::<ExecRequest>()),
            Content::Events(
                &["stdout", "stderr", "exit", "error", "gap"],
                "`stdout` and `stderr` {data} per line, each with an `id`, then `exit` {exit_code}, or `error` {error}; \
                 the same request with a `Last-Event-ID` header resumes the stream after that id (a `gap` {events, bytes} \
                 first when lines after it are no longer held; 400 for an id of no stream of the caller's, or past its output)",
            ),
        ),
        "process_start" => post::<ExecRequest, Started>().links(PROCESS_LINKS),
        "process_list" => reply::<ProcessList>(),
        "process_detail" => reply::<ProcessInfo>(),
        "process_signal" => post::<SignalRequest, SignalResult>(),
        "process_stdin" => post::<StdinRequest, StdinResult>().errors(CONFLICT),
        "process_output" => reply::<ProcessOutput>().query::<OutputQuery>().errors(CONFLICT),
        "pty_create_session" => post::<PtyCreateRequest, PtyCreated>().links(PTY_LINKS),
        "pty_list_sessions" => reply::<PtySessionList>(),
        "pty_detail" => reply::<PtySessionInfo>(),
        "pty_resize" => post::<PtyResizeRequest, PtySessionInfo>(),
        "pty_delete_session" => reply::<PtyClosed>(),
        "system_info" => reply::<SystemInfo>(),
        "system_metrics" => reply::<SystemMetrics>(),
        "metrics" => Shape::new(None, Content::Prometheus),
        // The POST of MCP's streamable HTTP transport (GET opens a session's
        // stream, DELETE ends it; docs/mcp.md). The messages are JSON-RPC.
        "mcp" => Shape::new(
            Some(object()),
            Content::Events(&["message"], "a JSON-RPC response, request or notification (MCP)"),
        )
        .also(202, "A notification or a response, accepted.", Content::Empty)
        .errors(&[406, 415]),
        "env_get" => reply::<EnvVariables>().query::<EnvQuery>(),
        "env_set" => post::<EnvSetRequest, EnvUpdated>(),
        "ports" => reply::<PortList>(),
        "packages" => reply::<PackageList>().query::<PackagesQuery>(),
        "code_run" => post::<CodeRunRequest, CodeRunResult>().errors(&[408]),
        "git_status" => reply::<GitStatus>().query::<GitQuery>(),
        "git_diff" => reply::<GitDiff>().query::<GitQuery>(),
        "browser_navigate" => post::<b::NavigateRequest, b::BrowserPage>(),
        "browser_screenshot" => post::<b::ScreenshotRequest, b::Screenshot>(),
        "browser_content" => reply::<b::BrowserContent>().query::<b::ContentQuery>(),
        "browser_click" => post::<b::ClickRequest, b::Clicked>(),
        "browser_type" => post::<b::TypeRequest, b::Typed>(),
        "browser_evaluate" => post::<b::EvaluateRequest, b::Evaluated>(),
        "browser_pdf" => post::<b::PdfRequest, b::Pdf>(),
        "browser_console" => reply::<b::ConsoleLogs>(),
        _ => return None,
    })
}
