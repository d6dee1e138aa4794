//! `GET /files/download-stream` and `POST /files/archive`: the reference's
//! JSON answers that carry a file (or an archive) as base64, streamed and
//! encoded on the fly, never held whole.

use abx_domain::fs::{self, archive, read, safe};
use abx_domain::policy::{Grant, Op};
use abx_wire::api::files::{ArchiveRequest, PathQuery};
use abx_wire::endpoints::Limit;
use axum::body::Body;
use axum::http::{header, HeaderValue};
use axum::response::Response;
use bytes::Bytes;
use futures_util::Stream;
use serde_json::Value;

use super::{at, limit_or, open_for_read, query_path};
use crate::http::error::ApiError;
use crate::http::extract::{JsonBody, Query};

const ARCHIVE_MAX_BYTES: u64 = 100 * 1024 * 1024;
const ARCHIVE_MAX_FILES: u64 = 10_000;

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
