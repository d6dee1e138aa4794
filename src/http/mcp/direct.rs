//! Tool calls answered on their HTTP request's own task.
//!
//! The SDK hands every message of a legacy session to the session's worker
//! task, which passes it to the service loop, which spawns a task for the
//! handler; the answer goes back through both and out as an event stream
//! (a priming event, then the answer, each its own write). For a `read` of a
//! small file that machinery cost as much again as the read over HTTP
//! (bench/mcp.py: 1.85x at p50; profiled, most of the extra was the three
//! task hops, their wake-ups and the second write).
//!
//! A `tools/call` of a tool that reports no progress and watches no
//! cancellation ([`Tool::direct`]), sent in a live session of its caller
//! with a legacy protocol version and nothing else in its `params`, is run
//! here through the same [`server::call`] (same admission, same audit) and
//! answered as one event in one body. Nothing of the session stream is lost:
//! such a call sends nothing before its answer, and an answer given in the
//! response that carries it needs no resuming. Any other message, and any
//! request this module does not recognise exactly, goes to the SDK unchanged
//! (which also answers every malformed request as before).

use std::sync::Arc;
use std::time::{Duration, Instant};

use abx_domain::policy::Identity;
use axum::body::Body;
use axum::http::request::Parts;
use axum::http::{header, HeaderMap, HeaderValue, Method};
use axum::response::{IntoResponse, Response};
use rmcp::model::{ProtocolVersion, RequestId, ServerJsonRpcMessage, ServerResult};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use serde::Deserialize;
use serde_json::{Map, Value};

use super::tools::{self, Tool};
use super::{server, SESSION_HEADER};
use crate::http::error::ApiError;
use crate::http::AppState;

/// How often a session used only by direct calls tells its worker it is in
/// use: the SDK closes a session whose worker hears nothing for
/// [`SESSION_IDLE`](super::SESSION_IDLE).
const TOUCH_EVERY: Duration = Duration::from_secs(60);

/// The header naming the protocol version of a session's requests.
const VERSION_HEADER: &str = "mcp-protocol-version";

/// A `tools/call` request as it must be to be answered here: its id, method,
/// and the tool's name and arguments. Anything more (`_meta` with a progress
/// token or a protocol version, a task) is the SDK's to handle.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Call {
    jsonrpc: String,
    id: RequestId,
    method: String,
    params: Params,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Params {
    name: String,
    arguments: Option<Map<String, Value>>,
}

/// The answer to `body` when it is a direct call in a live session, or
/// `None` for a message the SDK answers. The session's owner was checked by
/// the caller.
pub async fn answer(
    app: &AppState,
    sessions: &LocalSessionManager,
    identity: &Arc<Identity>,
    parts: &Parts,
    body: &[u8],
) -> Option<Response> {
    if parts.method != Method::POST || !legacy_json_call(&parts.headers) {
        return None;
    }
    let session = parts.headers.get(SESSION_HEADER)?.to_str().ok()?;
    let call: Call = serde_json::from_slice(body).ok()?;
    if call.jsonrpc != "2.0" || call.method != "tools/call" || !tools::find(&call.params.name).is_some_and(Tool::direct)
    {
        return None;
    }
    live(app, sessions, session).await?;
    let arguments = call.params.arguments.unwrap_or_default();
    let message = match server::call(app, identity, &call.params.name, arguments, None).await {
        Ok(result) => ServerJsonRpcMessage::response(ServerResult::CallToolResult(result), call.id),
        Err(error) => ServerJsonRpcMessage::error(error, Some(call.id)),
    };
    Some(event(&message))
}

/// Whether the headers are those the SDK accepts for a message of a legacy
/// session: a JSON body, both answer types accepted (without parameters, so
/// no weighting is to be read), and a known protocol version from before
/// the stateless revision (whose requests the SDK serves without sessions).
fn legacy_json_call(headers: &HeaderMap) -> bool {
    let accepted = || {
        headers.get_all(header::ACCEPT).iter().filter_map(|v| v.to_str().ok()).flat_map(|v| v.split(',')).map(str::trim)
    };
    let accepts = |mime: &str| accepted().any(|entry| entry.eq_ignore_ascii_case(mime));
    let json = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(';').next().unwrap_or_default().trim().eq_ignore_ascii_case("application/json"));
    let version = headers.get(VERSION_HEADER).and_then(|v| v.to_str().ok());
    let legacy = version.is_some_and(|v| {
        v < ProtocolVersion::V_2026_07_28.as_str() && ProtocolVersion::KNOWN_VERSIONS.iter().any(|k| k.as_str() == v)
    });
    json && legacy && accepts("application/json") && accepts("text/event-stream")
}

/// `Some` when the session is live (known to the SDK and to its owner
/// record). When no direct call told its worker of it for [`TOUCH_EVERY`],
/// sends the worker a message that changes nothing (closing a request
/// stream no request has), which restarts its idle clock as any message does.
async fn live(app: &AppState, sessions: &LocalSessionManager, id: &str) -> Option<()> {
    let due = app.mcp.owners().get(id)?.touched.elapsed() >= TOUCH_EVERY;
    let handle = sessions.sessions.read().await.get(id).cloned()?;
    if due {
        handle.close_request_wise_channel(u64::MAX).await.ok()?;
        if let Some(owner) = app.mcp.owners().get_mut(id) {
            owner.touched = Instant::now();
        }
    }
    Some(())
}

/// `message` as the one event of an event stream, in one body (one write).
fn event(message: &ServerJsonRpcMessage) -> Response {
    let mut body = Vec::with_capacity(1024);
    body.extend_from_slice(b"data: ");
    if serde_json::to_writer(&mut body, message).is_err() {
        return ApiError::internal().into_response();
    }
    body.extend_from_slice(b"\n\n");
    let headers = [
        (header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream")),
        (header::CACHE_CONTROL, HeaderValue::from_static("no-cache")),
    ];
    (headers, Body::from(body)).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(*name, HeaderValue::from_static(value));
        }
        map
    }

    const CALL: [(&str, &str); 3] = [
        ("accept", "application/json, text/event-stream"),
        ("content-type", "application/json"),
        ("mcp-protocol-version", "2025-06-18"),
    ];

    #[test]
    fn only_a_legacy_json_call_accepting_both_answers_is_taken() {
        assert!(legacy_json_call(&headers(&CALL)));
        let charset = [CALL[0], ("content-type", "application/json; charset=utf-8"), CALL[2]];
        assert!(legacy_json_call(&headers(&charset)));
        let split = [("accept", "text/event-stream"), ("accept", "application/json"), CALL[1], CALL[2]];
        assert!(legacy_json_call(&headers(&split)));
        // The SDK decides everything else: weights, one answer type, other bodies, versions.
        let weighted = [("accept", "application/json;q=0, text/event-stream"), CALL[1], CALL[2]];
        let sse_only = [("accept", "text/event-stream"), CALL[1], CALL[2]];
        let text = [CALL[0], ("content-type", "text/plain"), CALL[2]];
        let stateless = [CALL[0], CALL[1], ("mcp-protocol-version", "2026-07-28")];
        let unknown = [CALL[0], CALL[1], ("mcp-protocol-version", "2025-01-01")];
        for refused in [&weighted[..], &sse_only, &text, &stateless, &unknown, &CALL[..2]] {
            assert!(!legacy_json_call(&headers(refused)), "{refused:?}");
        }
    }
}
