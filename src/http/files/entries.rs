//! Handlers of the `file_ops` group that answer with a JSON document about
//! entries: list, stat, mkdir, delete, move, search.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use abx_domain::fs::{self, list::ListOptions, safe, search};
use abx_domain::policy::{Grant, LimitValue, Op};
use abx_domain::pyrepr;
use abx_wire::api::files::{
    DeleteResponse, FileInfo, ListQuery, ListResponse, MkdirRequest, MkdirResponse, MoveRequest, MoveResponse,
    PathQuery, SearchRequest, SearchResponse,
};
use abx_wire::endpoints::Limit;
use axum::extract::State;
use axum::Json;
use serde_json::Value;

use super::{at, body_field, limit_or, query_path, truthy};
use crate::http::error::ApiError;
use crate::http::extract::{JsonBody, Query};
use crate::http::AppState;

const DEFAULT_MAX_ENTRIES: u64 = 1000;
const DEFAULT_LIST_DEPTH: u64 = 3;
const DEFAULT_SEARCH_DEPTH: u64 = 5;
const DEFAULT_SEARCH_RESULTS: u64 = 100;
const DEFAULT_SEARCH_SECONDS: f64 = 10.0;

/// `GET /files/list`.
pub async fn list(grant: Grant, Query(q): Query<ListQuery>) -> Result<Json<ListResponse>, ApiError> {
    let raw = query_path(q.path)?;
    let lenient = |v: Option<String>, default: u64| {
        v.and_then(|v| v.trim().parse::<i64>().ok()).map_or(default, |n| n.max(0) as u64)
    };
    let options = ListOptions {
        recursive: truthy(q.recursive.as_deref()),
        max_entries: to_usize(lenient(q.max_entries, DEFAULT_MAX_ENTRIES).min(limit_or(
            &grant,
            Limit::MaxEntries,
            DEFAULT_MAX_ENTRIES,
        ))),
        max_depth: to_usize(lenient(q.max_depth, u64::MAX).min(limit_or(&grant, Limit::MaxDepth, DEFAULT_LIST_DEPTH))),
    };
    let guard = grant.guard();
    let entries = fs::blocking(move || {
        let target = safe::resolve(&guard, &raw, Op::Read, "")?;
        fs::list::list(&guard, &target, &raw, options)
    })
    .await
    .map_err(at(&grant))?;
    Ok(Json(ListResponse { entries }))
}

/// `GET /files/stat`: a missing path is 200 with `exists: false`.
pub async fn stat(grant: Grant, Query(q): Query<PathQuery>) -> Result<Json<FileInfo>, ApiError> {
    let raw = query_path(q.path)?;
    let info = fs::list::stat_path(grant.guard(), raw).await.map_err(at(&grant))?;
    Ok(Json(info))
}

/// `POST /files/mkdir`.
pub async fn mkdir(grant: Grant, JsonBody(body): JsonBody<MkdirRequest>) -> Result<Json<MkdirResponse>, ApiError> {
    let raw = body_field(body.path, "path")?;
    let guard = grant.guard();
    let path = fs::blocking(move || {
        let target = safe::resolve(&guard, &raw, Op::Write, "")?;
        fs::ops::mkdir(&guard, &target).map(|()| target.path)
    })
    .await
    .map_err(at(&grant))?;
    Ok(Json(MkdirResponse { path: path.display().to_string(), created: true }))
}

/// `DELETE /files`.
pub async fn delete(grant: Grant, Query(q): Query<PathQuery>) -> Result<Json<DeleteResponse>, ApiError> {
    let raw = query_path(q.path)?;
    let guard = grant.guard();
    let path = fs::blocking(move || {
        let target = safe::resolve(&guard, &raw, Op::Delete, "")?;
        fs::ops::delete(&guard, &target, &raw).map(|()| target.path)
    })
    .await
    .map_err(at(&grant))?;
    Ok(Json(DeleteResponse { path: path.display().to_string(), deleted: true }))
}

/// `POST /files/move`.
pub async fn rename(
    State(app): State<AppState>,
    grant: Grant,
    JsonBody(body): JsonBody<MoveRequest>,
) -> Result<Json<MoveResponse>, ApiError> {
    let source = body_field(body.source, "source")?;
    let destination = body_field(body.destination, "destination")?;
    let guard = grant.guard();
    let files = Arc::clone(&app.files);
    let (from, to) = fs::blocking(move || {
        let from = safe::resolve(&guard, &source, Op::Delete, "source")?;
        let to = safe::resolve(&guard, &destination, Op::Write, "destination")?;
        let moved = fs::ops::rename(&guard, &from, &to, &source, files.writes())?;
        Ok((from.path, moved))
    })
    .await
    .map_err(at(&grant))?;
    Ok(Json(MoveResponse { source: from.display().to_string(), destination: to.display().to_string() }))
}

/// `POST /files/search`: names by glob, and contents by regular expression when `content` is set.
pub async fn search(grant: Grant, JsonBody(body): JsonBody<SearchRequest>) -> Result<Json<SearchResponse>, ApiError> {
    let raw = body_field(body.path, "path")?;
    let pattern = body_field(body.pattern, "pattern")?;
    let invalid = || ApiError::bad_request("Invalid 'max_depth' or 'max_results': must be integers");
    let max_depth = integer(body.max_depth.as_ref(), DEFAULT_SEARCH_DEPTH).ok_or_else(invalid)?;
    let max_results = integer(body.max_results.as_ref(), DEFAULT_SEARCH_RESULTS).ok_or_else(invalid)?;
    let cap = grant.limit(Limit::TimeoutSeconds).map_or(DEFAULT_SEARCH_SECONDS, LimitValue::as_f64);
    let seconds = body.timeout.filter(|t| t.is_finite() && *t > 0.0).map_or(cap, |t| t.min(cap));
    let query = search::Query::compile(
        &pattern,
        body.content.as_deref().filter(|c| !c.is_empty()),
        to_usize(max_depth.min(limit_or(&grant, Limit::MaxDepth, u64::MAX))),
        to_usize(max_results.min(limit_or(&grant, Limit::MaxResults, u64::MAX))),
        Instant::now() + Duration::from_secs_f64(seconds),
    )?;
    let guard = grant.guard();
    let cancel = Arc::new(AtomicBool::new(false));
    let _stop_when_dropped = CancelOnDrop(Arc::clone(&cancel));
    let response = fs::blocking(move || {
        let target = safe::resolve(&guard, &raw, Op::Read, "")?;
        search::search(&guard, &target, &raw, &query, &cancel)
    })
    .await
    .map_err(at(&grant))?;
    Ok(Json(response))
}

/// Python's `int()` of a JSON value: integers, floats (truncated), numeric strings, booleans.
fn integer(value: Option<&Value>, default: u64) -> Option<u64> {
    match value {
        None => Some(default),
        Some(value) => pyrepr::int_of(value).ok().map(|n| n.max(0).unsigned_abs()),
    }
}

fn to_usize(n: u64) -> usize {
    usize::try_from(n).unwrap_or(usize::MAX)
}

/// Sets the flag when the request's future is dropped (the client went away).
struct CancelOnDrop(Arc<AtomicBool>);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}
