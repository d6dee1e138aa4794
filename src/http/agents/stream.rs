//! `GET /v1/agents/sessions/{id}/events`: the session's events as
//! server-sent events. `?after=<seq>` (or `evt_<seq>`, or a
//! `Last-Event-ID` header) replays from there, from disk when the events
//! are no longer in memory; without it the stream starts now. It ends after
//! a `session.idle` that leaves nothing running or queued, when the session
//! is deleted, or when the server stops; `: ping` keeps it alive.
//!
//! Frames are written a batch at a time (up to [`BATCH`] runtime events per
//! body chunk), so a fast reader costs one write per batch, not per event,
//! and a slow one holds at most one batch in memory.

use abx_domain::agents::{AgentError, Subscription};
use abx_domain::policy::Grant;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, HeaderValue};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures_util::stream;
use serde::Deserialize;
use tokio_util::sync::CancellationToken;

use super::{owner, runtime, Result};
use crate::http::agents::wire::events::{is_idle, map, parse_after};
use crate::http::extract::Query;
use crate::http::AppState;

/// Runtime events read per batch (one body chunk).
const BATCH: usize = 256;

/// The query of the events stream.
#[derive(Debug, Default, Deserialize)]
pub struct StreamQuery {
    after: Option<String>,
}

/// `GET /v1/agents/sessions/{id}/events`.
pub async fn events_stream(
    State(app): State<AppState>,
    grant: Grant,
    Path(id): Path<String>,
    headers: HeaderMap,
    Query(query): Query<StreamQuery>,
) -> Result<Response> {
    let agents = runtime(&app).await;
    let session = agents.session(owner(&grant), &id)?;
    let raw = query.after.filter(|a| !a.is_empty()).or_else(|| {
        let last = headers.get("last-event-id").and_then(|v| v.to_str().ok()).map(str::trim);
        last.filter(|v| !v.is_empty()).map(str::to_string)
    });
    let after = match raw {
        None => None,
        Some(raw) => {
            let parsed = parse_after(&raw);
            Some(parsed.ok_or_else(|| AgentError::invalid("after must be a sequence number or evt_<seq>", "after"))?)
        }
    };
    let subscription = agents.subscribe(&session, after)?;
    let body = Body::from_stream(chunks(subscription, app.shutdown.clone()));
    let mut response = body.into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    Ok(response)
}

struct Cursor {
    subscription: Subscription,
    done: bool,
    shutdown: CancellationToken,
}

/// The stream's body: one chunk of SSE frames per batch of runtime events.
fn chunks(
    subscription: Subscription,
    shutdown: CancellationToken,
) -> impl futures_util::Stream<Item = std::result::Result<Bytes, std::convert::Infallible>> {
    let cursor = Cursor { subscription, done: false, shutdown };
    stream::unfold(cursor, |mut c| async move {
        if c.done {
            return None;
        }
        let batch = tokio::select! {
            batch = tokio::time::timeout(crate::http::SSE_KEEP_ALIVE, c.subscription.next(BATCH)) => match batch {
                Ok(batch) => batch?,
                Err(_) => return Some((Ok(Bytes::from_static(b": ping\n\n")), c)),
            },
            () = c.shutdown.cancelled() => return None,
        };
        let session = std::sync::Arc::clone(c.subscription.session());
        let view = session.view();
        let mut out = Vec::with_capacity(batch.len() * 512);
        for event in batch {
            for wire in map(&event, &view) {
                out.extend_from_slice(format!("id: {}\nevent: {}\ndata: ", event.seq, wire.kind).as_bytes());
                out.extend_from_slice(wire.data.as_bytes());
                out.extend_from_slice(b"\n\n");
            }
            if is_idle(&event) && session.caught_up(event.seq) {
                c.done = true;
                break;
            }
        }
        Some((Ok(Bytes::from(out)), c))
    })
}
