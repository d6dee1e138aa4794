//! `filesystem.Filesystem`: each method admitted by its native endpoint's
//! rule, then served by [`crate::envd`] on the blocking pool.

use std::time::Duration;

use axum::response::Response;
use futures_util::StreamExt;

use super::connect::{self, CallOptions, ConnectError};
use super::pace::{self, Paced};
use super::{holding, Call, Caller, EnvdState};
use crate::api::envd::filesystem::{
    CreateWatcherResponse, Empty, EntryResponse, ListDirRequest, ListDirResponse, MoveRequest, PathRequest,
    WatchDirResponse, WatchRequest, WatcherEventsResponse, WatcherRequest,
};
use crate::endpoints::Limit;
use crate::envd::filesystem as ops;
use crate::envd::watchers::{self, Item, WatchOptions};
use crate::fs::safe;
use crate::policy::{Op, Permit};

/// The caller's path as the guard takes it, the guard, and the endpoint's
/// concurrency permit (hold it until the operation is done), after the user check.
fn prepared(
    state: &EnvdState,
    caller: &Caller,
    id: &str,
    raw: &str,
) -> Result<(crate::policy::PathGuard, String, Option<Permit>), ConnectError> {
    let (grant, permit) = state.admit(caller, id)?;
    Ok((grant.guard(), state.envd.path(raw)?, permit))
}

/// `Stat`.
pub async fn stat(call: Call) -> Response {
    call.unary(|state, caller, req: PathRequest| async move {
        let (guard, raw, _permit) = prepared(&state, &caller, "files_stat", &req.path)?;
        let entry = state.blocking_as(caller.user, move |_| ops::stat(&guard, &raw)).await?;
        Ok(EntryResponse { entry })
    })
    .await
}

/// `ListDir`.
pub async fn list_dir(call: Call) -> Response {
    call.unary(|state, caller, req: ListDirRequest| async move {
        let (guard, raw, _permit) = prepared(&state, &caller, "files_list", &req.path)?;
        let entries = state.blocking_as(caller.user, move |_| ops::list_dir(&guard, &raw, req.depth)).await?;
        Ok(ListDirResponse { entries })
    })
    .await
}

/// `MakeDir`.
pub async fn make_dir(call: Call) -> Response {
    call.unary(|state, caller, req: PathRequest| async move {
        let (guard, raw, _permit) = prepared(&state, &caller, "files_mkdir", &req.path)?;
        let entry =
            state.blocking_as(caller.user, move |account| ops::make_dir(&guard, &raw, account.as_ref())).await?;
        Ok(EntryResponse { entry })
    })
    .await
}

/// `Move`.
pub async fn move_entry(call: Call) -> Response {
    call.unary(|state, caller, req: MoveRequest| async move {
        let (guard, source, _permit) = prepared(&state, &caller, "files_move", &req.source)?;
        let destination = state.envd.path(&req.destination)?;
        let files = state.app.files.clone();
        let entry = state
            .blocking_as(caller.user, move |_| ops::move_entry(&guard, &source, &destination, files.writes()))
            .await?;
        Ok(EntryResponse { entry })
    })
    .await
}

/// `Remove`.
pub async fn remove(call: Call) -> Response {
    call.unary(|state, caller, req: PathRequest| async move {
        let (guard, raw, _permit) = prepared(&state, &caller, "files_delete", &req.path)?;
        state.blocking_as(caller.user, move |_| ops::remove(&guard, &raw)).await?;
        Ok(Empty {})
    })
    .await
}

/// Starts a watch for `req` (the policy's `max_duration_seconds` of
/// `files_watch`, when set, bounds it like the call's own deadline).
async fn open_watch(
    state: &EnvdState,
    caller: Caller,
    req: &WatchRequest,
) -> Result<(tokio::sync::mpsc::Receiver<Item>, Option<Duration>, Option<Permit>), ConnectError> {
    let (grant, permit) = state.admit(&caller, "files_watch")?;
    let cap = grant.limit(Limit::MaxDurationSeconds).map(|v| Duration::from_secs_f64(v.as_f64().max(0.0)));
    let (guard, raw) = (grant.guard(), state.envd.path(&req.path)?);
    let options = WatchOptions { recursive: req.recursive, include_entry: req.include_entry };
    let shutdown = state.app.shutdown.clone();
    let runtime = tokio::runtime::Handle::current();
    let items = state
        .blocking_as(caller.user, move |_| {
            let target = safe::resolve(&guard, &raw, Op::Read, "")?;
            watchers::start(guard, target, options, shutdown, runtime)
        })
        .await?;
    Ok((items, cap, permit))
}

/// `WatchDir`: `start`, then events, a keepalive after each quiet interval,
/// until the client leaves, the deadline passes, or the directory goes away.
pub async fn watch_dir(call: Call) -> Response {
    let started = tokio::time::Instant::now();
    call.stream(|state, caller, req: WatchRequest, mut options: CallOptions| async move {
        let (items, cap, permit) = open_watch(&state, caller, &req).await?;
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
        Ok(holding(pace::paced(source, options, started, || WatchDirResponse::Keepalive(Empty {})), permit))
    })
    .await
}

/// `CreateWatcher`: a watch whose events wait for `GetWatcherEvents`.
pub async fn create_watcher(call: Call) -> Response {
    call.unary(|state, caller, req: WatchRequest| async move {
        let (grant, _permit) = state.admit(&caller, "files_watch")?;
        let (guard, raw) = (grant.guard(), state.envd.path(&req.path)?);
        let options = WatchOptions { recursive: req.recursive, include_entry: req.include_entry };
        let (envd, runtime) = (state.envd.clone(), tokio::runtime::Handle::current());
        let watcher_id = state
            .blocking_as(caller.user, move |_| {
                let target = safe::resolve(&guard, &raw, Op::Read, "")?;
                envd.watchers.create(guard, target, options, runtime)
            })
            .await?;
        Ok(CreateWatcherResponse { watcher_id })
    })
    .await
}

/// `GetWatcherEvents`.
pub async fn watcher_events(call: Call) -> Response {
    call.unary(|state, caller, req: WatcherRequest| async move {
        state.admit(&caller, "files_watch")?;
        let events = state.envd.watchers.events(&req.watcher_id)?;
        Ok(WatcherEventsResponse { events })
    })
    .await
}

/// `RemoveWatcher`.
pub async fn remove_watcher(call: Call) -> Response {
    call.unary(|state, caller, req: WatcherRequest| async move {
        state.admit(&caller, "files_watch")?;
        state.envd.watchers.remove(&req.watcher_id).map_err(ConnectError::from)?;
        Ok(Empty {})
    })
    .await
}
