//! `GET /files` and `POST /files`: envd's file transfers, streamed both ways.
//!
//! Downloads stream from disk with `Range` (206/416), `Last-Modified` and
//! gzip when the client accepts it (never for a range). Uploads take a
//! multipart body (each `file` part, named by `path` or by its file name) or
//! a raw `application/octet-stream` body (`path` required), optionally
//! gzip-encoded; each file is written atomically through [`abx_domain::fs`]
//! (parents created, 507 on a full disk, nothing partial left). Credentials
//! (a token, or a URL signature that covers the path, the operation and the
//! user) are the pipeline's, as on every route.

use std::io::Write;
use std::os::unix::fs::FileExt;
use std::time::Duration;

use abx_domain::accounts::Account;
use abx_domain::envd::EnvdError;
use abx_domain::fs::{read, safe, FsError, WritePolicy};
use abx_domain::policy::{Grant, LimitValue, Op};
use abx_wire::api::envd::http::{FilesQuery, WrittenFile};
use abx_wire::endpoints::Limit;
use axum::body::{Body, Bytes};
use axum::extract::{Query, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use futures_util::{Stream, StreamExt};

use super::{blocking, http_error, plain_error, EnvdState};

/// Raw bytes per chunk of a gzip-encoded download.
const GZIP_CHUNK: usize = 256 * 1024;
/// Compressed chunks queued ahead of the client.
const GZIP_QUEUE: usize = 4;

/// The account the grant's user acts as.
async fn account(state: &EnvdState, grant: &Grant) -> Result<Option<Account>, Response> {
    let (check, user, own) = (state.clone(), grant.user().map(str::to_string), grant.identity().user.clone());
    blocking(move || check.account(own.as_deref(), user)).await.map_err(plain_error)
}

/// `GET /files`.
pub async fn download(
    State(state): State<EnvdState>,
    grant: Grant,
    headers: HeaderMap,
    Query(q): Query<FilesQuery>,
) -> Response {
    if let Err(response) = account(&state, &grant).await {
        return response;
    }
    let raw = match state.envd.path(q.path.as_deref().unwrap_or("")) {
        Ok(raw) => raw,
        Err(e) => return plain_error(e),
    };
    let (guard, max_bytes) = (grant.guard(), grant.limit(Limit::MaxBytes).map(LimitValue::as_u64));
    let opened = blocking(move || {
        let target = safe::resolve(&guard, &raw, Op::Read, "")?;
        match abx_domain::fs::list::stat_of(&guard, &target)? {
            None => return Err(EnvdError::NotFound(format!("path '{}' does not exist", target.path.display()))),
            Some(st) if st.is_dir() => {
                return Err(EnvdError::Invalid(format!("path '{}' is a directory", target.path.display())))
            }
            Some(_) => {}
        }
        Ok(read::open(&guard, &target, &raw, max_bytes)?)
    })
    .await;
    match opened {
        Ok(opened) => send(&headers, opened),
        Err(e) => plain_error(e),
    }
}

fn send(headers: &HeaderMap, opened: read::OpenFile) -> Response {
    let size = opened.stat.size;
    let ranged = headers.get(header::RANGE).and_then(|v| v.to_str().ok());
    let (gzip, identity) = crate::http::encoding::accepted(headers);
    if !identity && (!gzip || ranged.is_some()) {
        return http_error(StatusCode::NOT_ACCEPTABLE, "no acceptable encoding found, supported: [identity, gzip]");
    }
    let range = match read::parse_range(ranged, size) {
        Ok(range) => range,
        Err(_) => {
            let mut response =
                http_error(StatusCode::RANGE_NOT_SATISFIABLE, format!("range not satisfiable (size {size})"));
            if let Ok(value) = HeaderValue::from_str(&format!("bytes */{size}")) {
                response.headers_mut().insert(header::CONTENT_RANGE, value);
            }
            return response;
        }
    };
    let mut response = Response::new(Body::empty());
    let out = response.headers_mut();
    out.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/octet-stream"));
    out.insert(header::VARY, HeaderValue::from_static("Accept-Encoding"));
    out.insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
    let name = opened.path.file_name().map(|n| n.to_string_lossy().replace(['"', '\\'], "_")).unwrap_or_default();
    if let Ok(value) = HeaderValue::from_str(&format!("inline; filename=\"{name}\"")) {
        out.insert(header::CONTENT_DISPOSITION, value);
    }
    let modified = std::time::UNIX_EPOCH + Duration::from_secs(u64::try_from(opened.stat.modified.secs).unwrap_or(0));
    if let Ok(value) = HeaderValue::from_str(&httpdate::fmt_http_date(modified)) {
        out.insert(header::LAST_MODIFIED, value);
    }
    if let Some((first, last)) = range {
        let len = last - first + 1;
        *response.status_mut() = StatusCode::PARTIAL_CONTENT;
        let out = response.headers_mut();
        out.insert(header::CONTENT_LENGTH, HeaderValue::from(len));
        if let Ok(value) = HeaderValue::from_str(&format!("bytes {first}-{last}/{size}")) {
            out.insert(header::CONTENT_RANGE, value);
        }
        *response.body_mut() = Body::from_stream(read::stream(opened.file, first, len));
    } else if gzip {
        response.headers_mut().insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
        *response.body_mut() = Body::from_stream(gzip_stream(opened.file, size));
    } else {
        response.headers_mut().insert(header::CONTENT_LENGTH, HeaderValue::from(size));
        *response.body_mut() = Body::from_stream(read::stream(opened.file, 0, size));
    }
    response
}

/// The first `len` bytes of `file`, gzip-compressed on a blocking thread, a few chunks ahead of the client.
fn gzip_stream(file: std::fs::File, len: u64) -> impl Stream<Item = std::io::Result<Bytes>> + Send + 'static {
    let (tx, rx) = tokio::sync::mpsc::channel::<std::io::Result<Bytes>>(GZIP_QUEUE);
    tokio::task::spawn_blocking(move || {
        let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        let mut buffer = vec![0u8; GZIP_CHUNK];
        let mut position = 0u64;
        while position < len {
            let want = usize::try_from(len - position).map_or(GZIP_CHUNK, |left| left.min(GZIP_CHUNK));
            let step =
                file.read_exact_at(&mut buffer[..want], position).and_then(|()| encoder.write_all(&buffer[..want]));
            if let Err(e) = step {
                let _ = tx.blocking_send(Err(e));
                return;
            }
            position += want as u64;
            let ready = std::mem::take(encoder.get_mut());
            if !ready.is_empty() && tx.blocking_send(Ok(Bytes::from(ready))).is_err() {
                return;
            }
        }
        let _ = tx.blocking_send(encoder.finish().map(Bytes::from));
    });
    futures_util::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|item| (item, rx)) })
}

/// `POST /files`.
pub async fn upload(
    State(state): State<EnvdState>,
    grant: Grant,
    headers: HeaderMap,
    Query(q): Query<FilesQuery>,
    body: Body,
) -> Response {
    let account = match account(&state, &grant).await {
        Ok(account) => account,
        Err(response) => return response,
    };
    if q.signature.is_some() && q.path.as_deref().is_none_or(str::is_empty) {
        // A signature covers one path: the parts' own file names cannot choose others.
        return http_error(StatusCode::BAD_REQUEST, "a signed upload needs its path query parameter");
    }
    let encoding = headers.get(header::CONTENT_ENCODING).and_then(|v| v.to_str().ok()).map(str::trim);
    let data = body.into_data_stream();
    let body: Box<dyn Stream<Item = std::io::Result<Bytes>> + Send + Unpin> = match encoding {
        None | Some("") | Some("identity") => Box::new(data.map(|r| r.map_err(std::io::Error::other))),
        Some(e) if e.eq_ignore_ascii_case("gzip") => {
            Box::new(abx_domain::fs::inflate::gunzip(data, state.app.files.inflate_limits()))
        }
        Some(other) => {
            return http_error(
                StatusCode::BAD_REQUEST,
                format!("unsupported Content-Encoding: {other}, supported: [gzip]"),
            )
        }
    };
    let media = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    let named = headers.iter().map(|(name, value)| (name.as_str(), value.as_bytes()));
    let metadata = match abx_domain::envd::metadata::from_headers(named) {
        Ok(metadata) => metadata,
        Err(e) => return plain_error(e),
    };
    let upload = Upload { state: &state, grant: &grant, account: account.as_ref(), metadata: &metadata };
    let written = if media == "application/octet-stream" {
        let Some(path) = q.path.as_deref().filter(|p| !p.is_empty()) else {
            return http_error(StatusCode::BAD_REQUEST, "path query parameter is required for raw body upload");
        };
        let declared = if encoding.is_none() {
            headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse::<u64>().ok())
        } else {
            None
        };
        match upload.resolve(path).await {
            Ok(target) => upload.write(&target, declared, body).await.map(|file| vec![file]),
            Err(e) => Err(e),
        }
    } else if media.starts_with("multipart/") {
        let content_type = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("");
        match multer::parse_boundary(content_type) {
            Ok(boundary) => upload.multipart(multer::Multipart::new(body, boundary), q.path.as_deref()).await,
            Err(e) => Err(EnvdError::Invalid(format!("error parsing multipart form: {e}"))),
        }
    } else {
        return http_error(
            StatusCode::BAD_REQUEST,
            format!("unsupported content type: {media}, expected multipart/form-data or application/octet-stream"),
        );
    };
    match written {
        Ok(files) => Json(files).into_response(),
        Err(e) => plain_error(e),
    }
}

/// One upload request's context.
struct Upload<'a> {
    state: &'a EnvdState,
    grant: &'a Grant,
    account: Option<&'a Account>,
    /// Metadata every file of the upload gets.
    metadata: &'a std::collections::BTreeMap<String, String>,
}

impl Upload<'_> {
    fn policy(&self) -> WritePolicy {
        let mut policy = WritePolicy::for_grant(self.grant, None);
        policy.owner = abx_domain::envd::filesystem::owner_of(self.account);
        policy.xattrs = abx_domain::envd::metadata::attributes(self.metadata);
        policy
    }

    /// Resolves the caller's `path` for writing.
    async fn resolve(&self, path: &str) -> Result<safe::Resolved, EnvdError> {
        let raw = self.state.envd.path(path)?;
        let guard = self.grant.guard();
        let resolved = blocking(move || Ok(safe::resolve(&guard, &raw, Op::Write, "")?)).await?;
        Ok(resolved)
    }

    /// Writes `body` to `target` atomically.
    async fn write<S, E>(
        &self,
        target: &safe::Resolved,
        declared: Option<u64>,
        body: S,
    ) -> Result<WrittenFile, EnvdError>
    where
        S: Stream<Item = Result<Bytes, E>> + Unpin,
        E: std::error::Error + 'static,
    {
        let files = &self.state.app.files;
        files.write_stream(&self.grant.guard(), target, &self.policy(), declared, body).await.map_err(|e| match e {
            FsError::IsADirectory(path) => EnvdError::Invalid(format!("path is a directory: {}", path.display())),
            other => other.into(),
        })?;
        let kept = if self.metadata.is_empty() {
            Default::default()
        } else {
            let target = target.clone();
            blocking(move || Ok(abx_domain::envd::metadata::read_target(&target))).await?
        };
        Ok(WrittenFile {
            path: target.path.display().to_string(),
            name: abx_domain::fs::file_name(&target.path),
            kind: "file".into(),
            metadata: Some(kept).filter(|m| !m.is_empty()),
        })
    }

    /// Writes every `file` part: to `path` when given, else to the part's file name.
    async fn multipart(
        &self,
        mut form: multer::Multipart<'static>,
        path: Option<&str>,
    ) -> Result<Vec<WrittenFile>, EnvdError> {
        let mut written: Vec<WrittenFile> = Vec::new();
        loop {
            let field = match form.next_field().await {
                Ok(Some(field)) => field,
                Ok(None) => break,
                Err(e) => return Err(EnvdError::Invalid(format!("error reading form: {e}"))),
            };
            if field.name() != Some("file") {
                continue;
            }
            let named =
                path.filter(|p| !p.is_empty()).map(str::to_string).or_else(|| field.file_name().map(str::to_string));
            let Some(named) = named.filter(|n| !n.is_empty()) else {
                return Err(EnvdError::Invalid("a file part has neither a path parameter nor a file name".into()));
            };
            let target = self.resolve(&named).await?;
            if written.iter().any(|w| std::path::Path::new(&w.path) == target.path) {
                return Err(EnvdError::Invalid(format!(
                    "you cannot upload multiple files to the same path '{}' in one upload request, only the first specified file was uploaded",
                    target.path.display()
                )));
            }
            written.push(self.write(&target, None, field).await?);
        }
        Ok(written)
    }
}
