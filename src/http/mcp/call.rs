//! What every tool body uses: the call's context, how it ended, its
//! arguments read against its schema, and its results (a handler's JSON
//! answer, or the HTTP API's error body as a tool error).

use abx_domain::policy::Grant;
use rmcp::model::{CallToolResult, ContentBlock, ProgressToken};
use rmcp::service::{Peer, RequestContext};
use rmcp::{ErrorData, RoleServer};
use serde::Deserialize;
use serde_json::{Map, Value};
use tokio_util::sync::CancellationToken;

use crate::http::error::ApiError;
use crate::http::AppState;

/// What a tool body gets: the server's state, the admitted call, and the
/// protocol's request context (cancellation, progress).
pub struct Ctx<'a> {
    /// Shared server state.
    pub app: &'a AppState,
    /// The admitted call of the tool's endpoint.
    pub grant: &'a Grant,
    /// The protocol request (its cancellation token, its peer for progress);
    /// `None` for a call answered on its HTTP request's task
    /// (`direct.rs`), which neither reports progress nor is cancelled.
    pub request: Option<&'a RequestContext<RoleServer>>,
}

impl Ctx<'_> {
    /// Cancelled when the client cancels the call (never for a direct call).
    pub fn cancelled(&self) -> CancellationToken {
        self.request.map_or_else(CancellationToken::new, |r| r.ct.clone())
    }

    /// The client's progress token and the peer to report progress to, if it asked for progress.
    pub fn progress(&self) -> Option<(ProgressToken, Peer<RoleServer>)> {
        let request = self.request?;
        request.meta.get_progress_token().map(|token| (token, request.peer.clone()))
    }
}

/// How a tool that ran ended: its result, or the error the same call over
/// HTTP would have answered (reported as a tool error, and audited with its status).
pub enum Outcome {
    /// The tool's result.
    Done(CallToolResult),
    /// The HTTP API's error for the same call.
    Failed(ApiError),
}

impl From<Result<CallToolResult, ApiError>> for Outcome {
    fn from(result: Result<CallToolResult, ApiError>) -> Self {
        match result {
            Ok(done) => Outcome::Done(done),
            Err(error) => Outcome::Failed(error),
        }
    }
}

/// A tool error whose text is the HTTP API's JSON error body (`error`,
/// `type`, `code`, `endpoint`, `rule`, ...), so a refusal names its rule.
pub fn refused(error: &ApiError) -> CallToolResult {
    let body = serde_json::to_string(error.body()).unwrap_or_else(|_| "{}".into());
    CallToolResult::error(vec![ContentBlock::text(body)])
}

/// The arguments as `T`; a mismatch is the protocol's invalid-params error.
pub fn arguments<T: serde::de::DeserializeOwned>(arguments: Map<String, Value>) -> Result<T, ErrorData> {
    serde_json::from_value(Value::Object(arguments))
        .map_err(|e| ErrorData::invalid_params(format!("Invalid arguments: {e}"), None))
}

/// A handler's JSON answer as the tool's result: text, and the same value as structured content.
pub fn json_result<T: serde::Serialize>(value: &T) -> CallToolResult {
    let value = serde_json::to_value(value).unwrap_or(Value::Null);
    let mut result = CallToolResult::success(vec![ContentBlock::text(value.to_string())]);
    if value.is_object() {
        result.structured_content = Some(value);
    }
    result
}

/// The arguments of a tool that takes none.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Empty {}
