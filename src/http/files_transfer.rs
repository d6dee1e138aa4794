//! Handlers of the `file_ops` group that move bytes: the reference's base64
//! JSON transfers (streamed, decoded in chunks), the binary streaming and
//! resumable extensions, archives, and the watch stream.

use std::convert::Infallible;
use std::time::Duration;

use abx_domain::fs::{self, archive, read, safe, watch, watch_runs, FsError, Progress, WritePolicy};
use abx_domain::policy::{owner, Grant, LimitValue, Op, ParamValue, Viewer};
use abx_wire::api::files::{
    ArchiveRequest, ContentQuery, PathQuery, TransferResponse, UploadCancelled, UploadStatus, WatchQuery,
};
use abx_wire::endpoints::{Limit, Param};
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::Json;
use bytes::Bytes;
use futures_util::{Stream, StreamExt};
use serde_json::Value;

use super::error::ApiError;
use super::extract::{BodyLimit, JsonBody, Query};
use super::files::{at, limit_or, query_path, resolve_write, truthy};
use super::AppState;

const ARCHIVE_MAX_BYTES: u64 = 100 * 1024 * 1024;
const ARCHIVE_MAX_FILES: u64 = 10_000;
const WATCH_DEFAULT_SECONDS: f64 = 300.0;

/// The upload rules of the grant's endpoint.
pub fn write_policy(grant: &Grant, max_bytes: Option<u64>) -> WritePolicy {
    let strings = |key| match grant.param(key) {
        Some(ParamValue::Strings(list)) => list.clone(),
        _ => Vec::new(),
    };
    WritePolicy {
        overwrite: !matches!(grant.param(Param::Overwrite), Some(ParamValue::Bool(false))),
        allow_extensions: strings(Param::AllowExtensions),
        deny_extensions: strings(Param::DenyExtensions),
        max_bytes,
        owner: None,
        xattrs: Vec::new(),
    }
}

/// `GET /files/download-stream`: the JSON document is streamed, base64 encoded on the fly.
pub async fn download_stream(grant: Grant, Query(q): Query<PathQuery>) -> Result<Response, ApiError> {
    let raw = query_path(q.path)?;
    let opened = open_for_read(&grant, raw).await.map_err(at(&grant))?;
    let path = serde_json::to_string(&opened.path.display().to_string()).map_err(|_| ApiError::internal())?;
    let size = opened.stat.size;
    let (len, stream) = read::base64_document(
        opened.file,
        size,
        format!("{{\"path\": {path}, \"content_base64\": \""),
        format!("\", \"bytes\": {size}}}"),
    );
    Ok(json_stream(len, stream))
}

async fn open_for_read(grant: &Grant, raw: String) -> Result<read::OpenFile, FsError> {
    let guard = grant.guard();
    let max_bytes = grant.limit(Limit::MaxBytes).map(LimitValue::as_u64);
    fs::blocking(move || {
        let target = safe::resolve(&guard, &raw, Op::Read, "")?;
        read::open(&guard, &target, &raw, max_bytes)
    })
    .await
}

fn json_stream<S>(len: u64, stream: S) -> Response
where
    S: Stream<Item = std::io::Result<Bytes>> + Send + 'static,
{
    let mut response = Response::new(Body::from_stream(stream));
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    headers.insert(header::CONTENT_LENGTH, HeaderValue::from(len));
    response
}

/// `GET` and `HEAD /files/content`: raw bytes, with `ETag`, `Last-Modified`, `Range` and `If-None-Match`.
pub async fn content_read(
    method: Method,
    headers: HeaderMap,
    grant: Grant,
    Query(q): Query<PathQuery>,
) -> Result<Response, ApiError> {
    let raw = query_path(q.path)?;
    let opened = open_for_read(&grant, raw).await.map_err(at(&grant))?;
    let (size, etag) = (opened.stat.size, opened.stat.etag());
    let text = |name| headers.get(name).and_then(|v: &HeaderValue| v.to_str().ok());
    if text(header::IF_NONE_MATCH).is_some_and(|v| v.split(',').any(|t| t.trim() == etag || t.trim() == "*")) {
        return Ok(with_validators(StatusCode::NOT_MODIFIED, &opened, Body::empty()));
    }
    let range_applies = text(header::IF_RANGE).is_none_or(|v| v == etag);
    let range = match read::parse_range(text(header::RANGE).filter(|_| range_applies), size) {
        Ok(range) => range,
        Err(e) => {
            let mut response = ApiError::from(e).into_response();
            if let Ok(value) = HeaderValue::from_str(&format!("bytes */{size}")) {
                response.headers_mut().insert(header::CONTENT_RANGE, value);
            }
            return Ok(response);
        }
    };
    let (status, first, len) = match range {
        Some((first, last)) => (StatusCode::PARTIAL_CONTENT, first, last - first + 1),
        None => (StatusCode::OK, 0, size),
    };
    let mut response = with_validators(status, &opened, Body::empty());
    if method != Method::HEAD {
        *response.body_mut() = Body::from_stream(read::stream(opened.file, first, len));
    }
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_LENGTH, HeaderValue::from(len));
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/octet-stream"));
    if status == StatusCode::PARTIAL_CONTENT {
        if let Ok(value) = HeaderValue::from_str(&format!("bytes {first}-{}/{size}", first + len - 1)) {
            headers.insert(header::CONTENT_RANGE, value);
        }
    }
    Ok(response)
}

fn with_validators(status: StatusCode, opened: &read::OpenFile, body: Body) -> Response {
    let mut response = Response::new(body);
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
    if let Ok(etag) = HeaderValue::from_str(&opened.stat.etag()) {
        headers.insert(header::ETAG, etag);
    }
    let modified = std::time::UNIX_EPOCH + Duration::from_secs(u64::try_from(opened.stat.modified.secs).unwrap_or(0));
    if let Ok(value) = HeaderValue::from_str(&httpdate::fmt_http_date(modified)) {
        headers.insert(header::LAST_MODIFIED, value);
    }
    response
}

/// `PUT /files/content`: the body streamed to disk and put in place atomically;
/// with `offset` and `size`, one piece of a resumable upload.
pub async fn content_write(
    State(app): State<AppState>,
    grant: Grant,
    Query(q): Query<ContentQuery>,
    req: Request,
) -> Result<Response, ApiError> {
    let raw = query_path(q.path)?;
    let body_limit = req.extensions().get::<BodyLimit>().map(|l| l.0).filter(|l| *l != u64::MAX);
    let max_bytes = match (grant.limit(Limit::MaxBytes).map(LimitValue::as_u64), body_limit) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    let mut policy = write_policy(&grant, max_bytes);
    policy.overwrite &= q.overwrite.unwrap_or(true);
    let declared = req.headers().get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    let guard = grant.guard();
    let target = resolve_write(&grant, raw.clone()).await?;
    let body = req.into_body().into_data_stream();
    let path = target.path.display().to_string();
    let committed = match (q.offset, q.size) {
        (None, None) => app.files.write_stream(&guard, &target, &policy, declared, body).await.map_err(at(&grant))?,
        (Some(offset), Some(size)) => {
            match app.files.resume_stream(&guard, &target, &policy, (offset, size), body).await.map_err(at(&grant))? {
                Progress::Complete(committed) => committed,
                Progress::Partial { offset, size } => {
                    let status = UploadStatus { path, offset, size, complete: false };
                    return Ok((StatusCode::ACCEPTED, Json(status)).into_response());
                }
            }
        }
        _ => return Err(ApiError::bad_request("A resumable upload needs both 'offset' and 'size'")),
    };
    let status = if committed.created { StatusCode::CREATED } else { StatusCode::OK };
    let answer = TransferResponse { path, bytes: committed.stat.size, etag: Some(committed.stat.etag()) };
    Ok((status, Json(answer)).into_response())
}

/// `GET /files/uploads`: how many bytes a resumable upload holds.
pub async fn upload_status(
    State(app): State<AppState>,
    grant: Grant,
    Query(q): Query<PathQuery>,
) -> Result<Json<UploadStatus>, ApiError> {
    let target = resolve_upload(&grant, q).await?;
    let (offset, size) = app.files.status(&target.path).map_err(at(&grant))?;
    Ok(Json(UploadStatus { path: target.path.display().to_string(), offset, size, complete: false }))
}

/// `DELETE /files/uploads`: abandon a resumable upload.
pub async fn upload_cancel(
    State(app): State<AppState>,
    grant: Grant,
    Query(q): Query<PathQuery>,
) -> Result<Json<UploadCancelled>, ApiError> {
    let target = resolve_upload(&grant, q).await?;
    app.files.cancel(&target.path).map_err(at(&grant))?;
    Ok(Json(UploadCancelled { path: target.path.display().to_string(), cancelled: true }))
}

async fn resolve_upload(grant: &Grant, q: PathQuery) -> Result<safe::Resolved, ApiError> {
    resolve_write(grant, query_path(q.path)?).await
}

/// `POST /files/archive`: the archive is built in a temp file and streamed as base64 JSON.
pub async fn archive(grant: Grant, JsonBody(body): JsonBody<ArchiveRequest>) -> Result<Response, ApiError> {
    let Some(Value::Array(paths)) = body.paths.filter(|p| p.as_array().is_some_and(|a| !a.is_empty())) else {
        return Err(ApiError::bad_request("Missing or invalid 'paths'"));
    };
    let format = match &body.format {
        None => archive::Format::TarGz,
        Some(Value::String(name)) => archive::Format::from_name(name)
            .ok_or_else(|| ApiError::bad_request(format!("Unsupported format: {name}")))?,
        Some(other) => return Err(ApiError::bad_request(format!("Unsupported format: {other}"))),
    };
    let raws: Vec<String> = paths
        .iter()
        .map(|p| p.as_str().map(str::to_string))
        .collect::<Option<_>>()
        .ok_or_else(|| ApiError::bad_request("All paths must be strings"))?;
    let max_files = limit_or(&grant, Limit::MaxFiles, ARCHIVE_MAX_FILES);
    let max_bytes = limit_or(&grant, Limit::MaxBytes, ARCHIVE_MAX_BYTES);
    let guard = grant.guard();
    let built = fs::blocking(move || {
        let targets = raws.iter().map(|raw| safe::resolve(&guard, raw, Op::Read, "")).collect::<Result<Vec<_>, _>>()?;
        archive::build(&guard, &targets, format, max_files, max_bytes)
    })
    .await
    .map_err(at(&grant))?;
    let suffix = format!("\", \"format\": \"{}\", \"bytes\": {}}}", format.as_str(), built.len);
    let (len, stream) = read::base64_document(built.file, built.len, "{\"content_base64\": \"".into(), suffix);
    Ok(json_stream(len, stream))
}

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
    Sse::new(stream).keep_alive(KeepAlive::new().interval(super::process::SSE_KEEP_ALIVE)).into_response()
}
