//! The server-sent events of a response (`POST /v1/responses` with
//! `stream: true`, `GET /v1/responses/{id}?stream=true`): the opening
//! events at once, then the turn's events as they happen, read from the
//! session's event log from where the turn began, and the terminal event.
//! A replay reads the same log, so it numbers its events the same way.
//! One body chunk per batch of runtime events; `: keep-alive` comments
//! while the CLI is quiet; the stream ends with the turn, with its session
//! or with the server.

use std::sync::Arc;

use abx_domain::agents::responses::FoundResponse;
use abx_domain::agents::{Agents, Subscription};
use axum::body::Body;
use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures_util::stream;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::Result;
use crate::http::agents::wire::response_events::{ResponseStream, StreamEvent};
use crate::http::agents::wire::responses::response_object;

/// Runtime events read per batch (one body chunk).
const BATCH: usize = 256;

struct Cursor {
    subscription: Subscription,
    mapper: ResponseStream,
    found: FoundResponse,
    /// Events numbered up to this one were sent before (`starting_after`).
    after: Option<u64>,
    opening: Option<Vec<StreamEvent>>,
    done: bool,
    shutdown: CancellationToken,
}

impl Cursor {
    fn write(&self, events: &[StreamEvent], out: &mut Vec<u8>) {
        for event in events.iter().filter(|e| self.after.is_none_or(|a| e.seq > a)) {
            out.extend_from_slice(event.frame().as_bytes());
        }
    }
}

/// The stream of `found`'s events after `after` (a `sequence_number`).
///
/// # Errors
/// 429 when the session has too many streams.
pub fn sse(
    agents: &Arc<Agents>,
    found: &FoundResponse,
    after: Option<u64>,
    shutdown: CancellationToken,
) -> Result<Response> {
    let subscription = agents.subscribe(&found.session, Some(found.record.log_start))?;
    let mut mapper = ResponseStream::new(&found.turn.id);
    let mut shell = response_object(&found.record, &found.turn);
    shell["status"] = json!("in_progress");
    shell["output"] = json!([]);
    shell["usage"] = json!(null);
    shell["completed_at"] = json!(null);
    let opening = Some(mapper.opening(&shell));
    let cursor = Cursor { subscription, mapper, found: found.clone(), after, opening, done: false, shutdown };
    let body = Body::from_stream(stream::unfold(cursor, |mut c| async move {
        let mut out = Vec::new();
        if let Some(opening) = c.opening.take() {
            c.write(&opening, &mut out);
            return Some((Ok::<_, std::convert::Infallible>(Bytes::from(out)), c));
        }
        if c.done {
            return None;
        }
        let batch = tokio::select! {
            batch = tokio::time::timeout(crate::http::SSE_KEEP_ALIVE, c.subscription.next(BATCH)) => match batch {
                Ok(batch) => batch?,
                Err(_) => return Some((Ok(Bytes::from_static(b": keep-alive\n\n")), c)),
            },
            () = c.shutdown.cancelled() => return None,
        };
        for event in batch {
            let (events, ended) = c.mapper.map(&event);
            c.write(&events, &mut out);
            if ended {
                let turn = c.found.session.turn(&c.found.turn.id).unwrap_or_else(|| c.found.turn.clone());
                let closing = c.mapper.closing(&response_object(&c.found.record, &turn));
                c.write(&closing, &mut out);
                c.done = true;
                break;
            }
        }
        Some((Ok(Bytes::from(out)), c))
    }));
    let mut response = body.into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    Ok(response)
}
