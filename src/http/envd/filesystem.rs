//! `filesystem.Filesystem`: each method, admitted by the pipeline under the
//! rule of its row (governed by its native endpoint), served by
//! [`crate::envd`] on the blocking pool as the grant's user.

use std::time::Duration;

use axum::response::Response;
use futures_util::StreamExt;

use super::connect::{self, CallOptions, ConnectError};
use super::pace::{self, Paced};
use super::{Call, EnvdState};
use crate::api::envd::filesystem::{
    CreateWatcherResponse, Empty, EntryResponse, ListDirRequest, ListDirResponse, MoveRequest, PathRequest,
    WatchDirResponse, WatchRequest, WatcherEventsResponse, WatcherRequest,
};
use crate::endpoints::Limit;
use crate::envd::filesystem as ops;
use crate::envd::watchers::{self, Item, WatchOptions};
use crate::fs::safe;
use crate::policy::{Grant, Op, PathGuard};

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

/// Starts a watch for `req` (the policy's `max_duration_seconds` of
/// `files_watch`, when set, bounds it like the call's own deadline).
async fn open_watch(
    state: &EnvdState,
    grant: &Grant,
    req: &WatchRequest,
) -> Result<(tokio::sync::mpsc::Receiver<Item>, Option<Duration>), ConnectError> {
    let cap = grant.limit(Limit::MaxDurationSeconds).map(|v| Duration::from_secs_f64(v.as_f64().max(0.0)));
    let (guard, raw) = prepared(state, grant, &req.path)?;
    let options = WatchOptions { recursive: req.recursive, include_entry: req.include_entry };
    let shutdown = state.app.shutdown.clone();
    let runtime = tokio::runtime::Handle::current();
    let items = state
        .blocking_as(grant, move |_| {
            let target = safe::resolve(&guard, &raw, Op::Read, "")?;
            watchers::start(guard, target, options, shutdown, runtime)
        })
        .await?;
    Ok((items, cap))
}

/// `WatchDir`: `start`, then events, a keepalive after each quiet interval,
/// until the client leaves, the deadline passes, or the directory goes away.
pub async fn watch_dir(call: Call) -> Response {
    let started = tokio::time::Instant::now();
    call.stream(|state, grant, req: WatchRequest, mut options: CallOptions| async move {
        let (items, cap) = open_watch(&state, &grant, &req).await?;
        if let Some(cap) = cap {
            options.timeout = Some(options.timeout.map_or(cap, |t| t.min(cap)));
        }
        let events = futures_util::stream::unfold(items, |mut items| async move {
            let item = items.recv().await?;
            Some((item, items))
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
    .await
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
