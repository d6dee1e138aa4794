//! `filesystem.Filesystem`: each method, admitted by the pipeline under the
//! rule of its row (governed by its native endpoint), served by
//! [`abx_domain::envd`] on the blocking pool as the grant's user.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use abx_domain::envd::dir_watches::{DirCursor, DirResumeError, Resumed, Target};
use abx_domain::envd::filesystem as ops;
use abx_domain::envd::watchers::{self, Item, WatchOptions};
use abx_domain::fs::safe;
use abx_domain::policy::{owner, Grant, Op, PathGuard, Viewer};
use abx_wire::api::envd::filesystem::{
    CreateWatcherResponse, Empty, EntryResponse, ListDirRequest, ListDirResponse, MoveRequest, PathRequest,
    WatchDirResponse, WatchRequest, WatcherEventsResponse, WatcherRequest,
};
use abx_wire::endpoints::Limit;
use axum::http::HeaderValue;
use axum::response::Response;
use futures_util::StreamExt;

use super::connect::{self, CallOptions, ConnectError};
use super::pace::{self, Paced};
use super::{Call, EnvdState};

/// The caller's path as the guard takes it, and the guard of the grant's rule.
fn prepared(state: &EnvdState, grant: &Grant, raw: &str) -> Result<(PathGuard, String), ConnectError> {
    let raw = state.envd.path(raw)?;
    Ok((grant.guard(), raw))
}

/// `Stat`.
pub async fn stat(call: Call) -> Response {
    call.unary(|state, grant, req: PathRequest| async move {
        let (guard, raw) = prepared(&state, &grant, &req.path)?;
        let entry = state.blocking_as(&grant, move |_| ops::stat(&guard, &raw)).await?;
        Ok(EntryResponse { entry })
    })
    .await
}

/// `ListDir`.
pub async fn list_dir(call: Call) -> Response {
    call.unary(|state, grant, req: ListDirRequest| async move {
        let (guard, raw) = prepared(&state, &grant, &req.path)?;
        let entries = state.blocking_as(&grant, move |_| ops::list_dir(&guard, &raw, req.depth)).await?;
        Ok(ListDirResponse { entries })
    })
    .await
}

/// `MakeDir`.
pub async fn make_dir(call: Call) -> Response {
    call.unary(|state, grant, req: PathRequest| async move {
        let (guard, raw) = prepared(&state, &grant, &req.path)?;
        let entry = state.blocking_as(&grant, move |account| ops::make_dir(&guard, &raw, account.as_ref())).await?;
        Ok(EntryResponse { entry })
    })
    .await
}

/// `Move`.
pub async fn move_entry(call: Call) -> Response {
    call.unary(|state, grant, req: MoveRequest| async move {
        let (guard, source) = prepared(&state, &grant, &req.source)?;
        let (_, destination) = prepared(&state, &grant, &req.destination)?;
        let files = state.app.files.clone();
        let entry =
            state.blocking_as(&grant, move |_| ops::move_entry(&guard, &source, &destination, files.writes())).await?;
        Ok(EntryResponse { entry })
    })
    .await
}

/// `Remove`.
pub async fn remove(call: Call) -> Response {
    call.unary(|state, grant, req: PathRequest| async move {
        let (guard, raw) = prepared(&state, &grant, &req.path)?;
        state.blocking_as(&grant, move |_| ops::remove(&guard, &raw)).await?;
        Ok(Empty {})
    })
    .await
}

/// Request header of a `WatchDir` that resumes a watch (ours):
/// `<watch>:<events received>`.
pub const RESUME_HEADER: &str = "abx-watch-resume";
/// Response header of every `WatchDir`: the watch's id (ours).
pub const WATCH_HEADER: &str = "abx-watch-id";
/// Response header of a resumed `WatchDir`: the events after the cursor
/// the watch no longer held (ours).
pub const LOST_HEADER: &str = "abx-watch-lost";

/// The policy's `max_duration_seconds` of `files_watch`, when set: it
/// bounds a stream like the call's own deadline.
fn duration_cap(grant: &Grant) -> Option<Duration> {
    grant.limit(Limit::MaxDurationSeconds).map(|v| Duration::from_secs_f64(v.as_f64().max(0.0)))
}

/// Attaches the stream of `req` to a new watch, or with `cursor` to the
/// watch it names, after the events the client received.
async fn attach_watch(
    state: &EnvdState,
    grant: &Grant,
    req: &WatchRequest,
    cursor: Option<DirCursor>,
) -> Result<Resumed, ConnectError> {
    let (guard, raw) = prepared(state, grant, &req.path)?;
    let options = WatchOptions { recursive: req.recursive, include_entry: req.include_entry };
    let viewer = Viewer::new(grant.identity(), owner::PROCESS_ADMIN);
    let invalid = |e: DirResumeError| ConnectError::new(connect::Code::InvalidArgument, e.to_string());
    if let Some(cursor) = cursor {
        let path = state
            .blocking_as(grant, move |_| Ok(safe::resolve(&guard, &raw, Op::Read, "")?.path.display().to_string()))
            .await?;
        return state.envd.dir_watches.resume(cursor, &Target::new(path, options), &viewer).map_err(invalid);
    }
    let shutdown = state.app.shutdown.clone();
    let runtime = tokio::runtime::Handle::current();
    let (path, items) = state
        .blocking_as(grant, move |_| {
            let target = safe::resolve(&guard, &raw, Op::Read, "")?;
            let path = target.path.display().to_string();
            watchers::start(guard, target, options, shutdown, runtime).map(|items| (path, items))
        })
        .await?;
    Ok(state.envd.dir_watches.keep(&viewer, Target::new(path, options), items))
}

/// `WatchDir`: `start`, then events, a keepalive after each quiet interval,
/// until the client leaves, the deadline passes, or the directory goes away.
/// With [`RESUME_HEADER`] (ours), the events of that watch after the
/// cursor instead ([`abx_domain::envd::dir_watches`]).
pub async fn watch_dir(call: Call) -> Response {
    let started = tokio::time::Instant::now();
    let cursor = call.headers.get(RESUME_HEADER).map(|v| {
        let text = v.to_str().unwrap_or("");
        DirCursor::parse(text).map_err(|e| ConnectError::new(connect::Code::InvalidArgument, e.to_string()))
    });
    let named = Arc::new(OnceLock::new());
    let seen = Arc::clone(&named);
    let mut response = call
        .stream(|state, grant, req: WatchRequest, mut options: CallOptions| async move {
            let cursor = cursor.transpose()?;
            let resumed = attach_watch(&state, &grant, &req, cursor).await?;
            let _ = seen.set((resumed.watch, cursor.map(|_| resumed.lost)));
            if let Some(cap) = duration_cap(&grant) {
                options.timeout = Some(options.timeout.map_or(cap, |t| t.min(cap)));
            }
            let events = futures_util::stream::unfold(resumed.attached, |mut attached| async move {
                let item = attached.next().await?;
                Some((item, attached))
            })
            .map(|item| match item {
                Item::Event(event) => Paced::Message(WatchDirResponse::Filesystem(event)),
                Item::End("shutdown") => {
                    Paced::Fail(ConnectError::new(connect::Code::Unavailable, "the server is shutting down"))
                }
                Item::End(_) => {
                    Paced::Fail(ConnectError::new(connect::Code::NotFound, "the watched directory was removed"))
                }
            });
            let source =
                futures_util::stream::once(async { Paced::Message(WatchDirResponse::Start(Empty {})) }).chain(events);
            Ok(pace::paced(source, options, started, || WatchDirResponse::Keepalive(Empty {})))
        })
        .await;
    if let Some((watch, lost)) = named.get() {
        let headers = response.headers_mut();
        headers.insert(WATCH_HEADER, HeaderValue::from(*watch));
        if let Some(lost) = lost {
            headers.insert(LOST_HEADER, HeaderValue::from(*lost));
        }
    }
    response
}

/// `CreateWatcher`: a watch whose events wait for `GetWatcherEvents`.
pub async fn create_watcher(call: Call) -> Response {
    call.unary(|state, grant, req: WatchRequest| async move {
        let (guard, raw) = prepared(&state, &grant, &req.path)?;
        let options = WatchOptions { recursive: req.recursive, include_entry: req.include_entry };
        let envd = state.envd.clone();
        let watcher_id = state
            .blocking_as(&grant, move |_| {
                let target = safe::resolve(&guard, &raw, Op::Read, "")?;
                envd.watchers.create(guard, target, options)
            })
            .await?;
        Ok(CreateWatcherResponse { watcher_id })
    })
    .await
}

/// `GetWatcherEvents`.
pub async fn watcher_events(call: Call) -> Response {
    call.unary(|state, _grant, req: WatcherRequest| async move {
        let envd = state.envd.clone();
        let events = super::blocking(move || envd.watchers.events(&req.watcher_id)).await?;
        Ok(WatcherEventsResponse { events })
    })
    .await
}

/// `RemoveWatcher`.
pub async fn remove_watcher(call: Call) -> Response {
    call.unary(|state, _grant, req: WatcherRequest| async move {
        state.envd.watchers.remove(&req.watcher_id).map_err(ConnectError::from)?;
        Ok(Empty {})
    })
    .await
}
