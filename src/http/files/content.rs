//! `GET`, `HEAD` and `PUT /files/content` (raw bytes, with validators,
//! ranges and resumable pieces) and `GET`/`DELETE /files/uploads` (the
//! state of a resumable upload).

use std::time::Duration;

use abx_domain::fs::{safe, Progress, WritePolicy};
use abx_domain::policy::{Grant, LimitValue};
use abx_wire::api::files::{ContentQuery, PathQuery, TransferResponse, UploadCancelled, UploadStatus};
use abx_wire::endpoints::Limit;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;

use abx_domain::fs::read;

use super::{at, open_for_read, query_path, resolve_write};
use crate::http::error::ApiError;
use crate::http::extract::{BodyLimit, Query};
use crate::http::AppState;

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
    let mut policy = WritePolicy::for_grant(&grant, None);
    policy.max_bytes = max_bytes;
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
