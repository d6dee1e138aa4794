//! `GET /v1/agents/sessions/{id}/events`: the session's events as
//! server-sent events. `?after=<seq>` (or `evt_<seq>`, or a
//! `Last-Event-ID` header) replays from there, from disk when the events
//! are no longer in memory; without it the stream starts now. It ends after
//! a `session.idle` that leaves nothing running or queued, when the session
//! is deleted, or when the server stops; `: ping` keeps it alive.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::IntoResponse;
use futures_util::stream::{self, Stream};
use serde::Deserialize;
use tokio_util::sync::CancellationToken;

use super::{owner, runtime, Result};
use crate::agents::{AgentError, Subscription};
use crate::api::agents::events::{is_idle, map, parse_after, WireEvent};
use crate::http::extract::Query;
use crate::http::AppState;
use crate::policy::Grant;

/// Runtime events read per batch.
const BATCH: usize = 256;
/// Interval of the `: ping` comments.
const KEEP_ALIVE: Duration = Duration::from_secs(15);

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
) -> Result<impl IntoResponse> {
    let agents = runtime(&app).await;
    let session = agents.session(owner(&grant), &id)?;
    let raw = query.after.filter(|a| !a.is_empty()).or_else(|| {
        headers
            .get("last-event-id")
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
            .filter(|v| !v.is_empty())
            .map(str::to_string)
    });
    let after = match raw {
        None => None,
        Some(raw) => Some(
            parse_after(&raw)
                .ok_or_else(|| AgentError::invalid("after must be a sequence number or evt_<seq>", "after"))?,
        ),
    };
    let subscription = agents.subscribe(&session, after)?;
    let frames = frames(subscription, app.shutdown.clone());
    Ok(Sse::new(frames).keep_alive(KeepAlive::new().interval(KEEP_ALIVE).text("ping")))
}

struct Cursor {
    subscription: Subscription,
    pending: VecDeque<(u64, WireEvent)>,
    done: bool,
    shutdown: CancellationToken,
}

/// The SSE frames of a subscription, batch by batch (memory stays flat).
fn frames(
    subscription: Subscription,
    shutdown: CancellationToken,
) -> impl Stream<Item = std::result::Result<Event, Infallible>> {
    let cursor = Cursor { subscription, pending: VecDeque::new(), done: false, shutdown };
    stream::unfold(cursor, |mut c| async move {
        loop {
            if let Some((seq, wire)) = c.pending.pop_front() {
                let data = wire.data.to_string();
                let frame = Event::default().id(seq.to_string()).event(wire.kind).data(data);
                return Some((Ok(frame), c));
            }
            if c.done {
                return None;
            }
            let batch = tokio::select! {
                batch = c.subscription.next(BATCH) => batch?,
                () = c.shutdown.cancelled() => return None,
            };
            let session = Arc::clone(c.subscription.session());
            let view = session.view();
            for event in batch {
                c.pending.extend(map(&event, &view).into_iter().map(|w| (event.seq, w)));
                if is_idle(&event) && session.caught_up(event.seq) {
                    c.done = true;
                    break;
                }
            }
        }
    })
}
