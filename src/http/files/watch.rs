//! `GET /files/watch`: a directory's changes as server-sent events, and the
//! resumption of a watch by `Last-Event-ID`.

use std::convert::Infallible;
use std::time::Duration;

use abx_domain::fs::{self, safe, watch, watch_runs};
use abx_domain::policy::{owner, Grant, LimitValue, Op, Viewer};
use abx_wire::api::files::WatchQuery;
use abx_wire::endpoints::Limit;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt;

use super::{at, query_path, truthy};
use crate::http::error::ApiError;
use crate::http::extract::Query;
use crate::http::AppState;

const WATCH_DEFAULT_SECONDS: f64 = 300.0;

/// `GET /files/watch`: `ready`, then `change` events, then `end`, as
/// server-sent events with ids; with `Last-Event-ID` (ours), resume the
/// watch that id belongs to after it instead ([`watch_runs`]).
pub async fn watch(
    State(app): State<AppState>,
    grant: Grant,
    headers: HeaderMap,
    Query(q): Query<WatchQuery>,
) -> Result<Response, ApiError> {
    let viewer = Viewer::new(grant.identity(), owner::PROCESS_ADMIN);
    if let Some(value) = headers.get("last-event-id") {
        let text = value.to_str().map_err(|_| ApiError::bad_request("Invalid Last-Event-ID"))?;
        let bad = |e: watch_runs::WatchResumeError| ApiError::bad_request(e.to_string());
        let cursor = watch_runs::WatchCursor::parse(text).map_err(bad)?;
        let run = app.files.watches().find(cursor, &viewer).map_err(bad)?;
        let attached = run.attach(Some(cursor)).map_err(bad)?;
        return Ok(watch_stream(run.path().to_string(), attached, false));
    }
    let raw = query_path(q.path)?;
    let invalid = || ApiError::bad_request("Invalid 'interval' or 'timeout'");
    let number = |v: Option<String>, default: f64| {
        v.map_or(Ok(default), |v| v.trim().parse::<f64>().ok().filter(|f| !f.is_nan()).ok_or_else(invalid))
    };
    let interval = number(q.interval, 0.5)?.clamp(0.1, 5.0);
    let cap = grant.limit(Limit::MaxDurationSeconds).map_or(WATCH_DEFAULT_SECONDS, LimitValue::as_f64);
    let seconds = number(q.timeout, WATCH_DEFAULT_SECONDS)?.max(0.1).min(cap);
    let options = watch::Options {
        recursive: truthy(q.recursive.as_deref()),
        interval: Duration::from_secs_f64(interval),
        duration: Duration::from_secs_f64(seconds),
        batch: watch::BATCH,
        attributes: false,
    };
    let (guard, shutdown, runtime) = (grant.guard(), app.shutdown.clone(), tokio::runtime::Handle::current());
    let (path, rx) = fs::blocking(move || {
        let target = safe::resolve(&guard, &raw, Op::Read, "")?;
        let path = target.path.display().to_string();
        watch::start(guard, target, &raw, options, shutdown, runtime).map(|rx| (path, rx))
    })
    .await
    .map_err(at(&grant))?;
    let attached = app.files.watches().keep(&viewer, path.clone(), watch_runs::RING_EVENTS, rx);
    Ok(watch_stream(path, attached, true))
}

/// The SSE answer of a watch connection: `ready`, then what it delivers.
/// `ready` has the id `<watch>:0` on the first connection and none on a
/// resume (so it never moves a client's position back).
fn watch_stream(path: String, attached: watch_runs::Attached, first: bool) -> Response {
    let mut ready = Event::default().event("ready").data(serde_json::json!({ "path": path }).to_string());
    if first {
        ready = ready.id(attached.ready_id().to_string());
    }
    let events = futures_util::stream::unfold(attached, |mut attached| async move {
        attached.next().await.map(|item| (item, attached))
    })
    .map(|delivery| {
        Ok::<_, Infallible>(match delivery {
            watch_runs::Delivery::Event(id, watch::Output::Change(change)) => Event::default()
                .event("change")
                .id(id.to_string())
                .data(serde_json::to_string(&change).unwrap_or_default()),
            watch_runs::Delivery::Event(id, watch::Output::End(reason)) => Event::default()
                .event("end")
                .id(id.to_string())
                .data(serde_json::json!({ "reason": reason }).to_string()),
            watch_runs::Delivery::Gap(lost) => {
                Event::default().event("gap").data(serde_json::json!({ "events": lost }).to_string())
            }
        })
    });
    let stream = futures_util::stream::once(async move { Ok(ready) }).chain(events);
    Sse::new(stream).keep_alive(KeepAlive::new().interval(crate::http::SSE_KEEP_ALIVE)).into_response()
}
