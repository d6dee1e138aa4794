//! The file tools: thin calls into the `file_ops` handlers (list, stat,
//! search, move, delete, mkdir take the same requests as over HTTP) and
//! into `fs` for what HTTP has no endpoint of its own for (lines of a text
//! file, an exact-string edit).

use abx_domain::fs::text::{self, Text};
use abx_domain::fs::{self, read, safe, FsError, WritePolicy};
use abx_domain::policy::{Grant, Op};
use abx_wire::endpoints::Limit;
use axum::extract::State;
use base64::Engine as _;
use bytes::Bytes;
use rmcp::model::{CallToolResult, ContentBlock, ResourceContents};
use rmcp::ErrorData;
use serde::Deserialize;
use serde_json::{json, Map, Value};

use super::call::{arguments, json_result, Ctx, Outcome};
use crate::http::error::ApiError;
use crate::http::extract::{JsonBody, Query};
use crate::http::files::entries as handlers;
use crate::http::files::{at, limit_or, resolve_write};
use crate::http::AppState;

/// Text returned by one `read`.
pub const READ_BUDGET: usize = 256 * 1024;
/// Largest binary file `read` returns (base64).
pub const BINARY_MAX: u64 = 1024 * 1024;
/// Largest file `edit` changes.
pub const EDIT_MAX: u64 = 10 * 1024 * 1024;

/// The tool's arguments as the HTTP request of its endpoint (same names, same checks).
fn request<T: serde::de::DeserializeOwned>(value: Value) -> Result<T, ErrorData> {
    serde_json::from_value(value).map_err(|e| ErrorData::invalid_params(format!("Invalid arguments: {e}"), None))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PathArgs {
    path: String,
}

/// `list`: `GET /files/list`.
pub async fn list(ctx: &Ctx<'_>, args: Map<String, Value>) -> Result<Outcome, ErrorData> {
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Args {
        path: String,
        recursive: Option<bool>,
        max_depth: Option<u64>,
        max_entries: Option<u64>,
    }
    let a: Args = arguments(args)?;
    let text = |v: Option<u64>| v.map(|n| n.to_string());
    let query = json!({"path": a.path, "recursive": a.recursive.map(|r| r.to_string()),
        "max_depth": text(a.max_depth), "max_entries": text(a.max_entries)});
    let answer = handlers::list(ctx.grant.clone(), Query(request(query)?)).await;
    Ok(answer.map(|j| json_result(&j.0)).into())
}

/// `stat`: `GET /files/stat`.
pub async fn stat(ctx: &Ctx<'_>, args: Map<String, Value>) -> Result<Outcome, ErrorData> {
    let a: PathArgs = arguments(args)?;
    let answer = handlers::stat(ctx.grant.clone(), Query(request(json!({"path": a.path}))?)).await;
    Ok(answer.map(|j| json_result(&j.0)).into())
}

/// `mkdir`: `POST /files/mkdir`.
pub async fn mkdir(ctx: &Ctx<'_>, args: Map<String, Value>) -> Result<Outcome, ErrorData> {
    let a: PathArgs = arguments(args)?;
    let answer = handlers::mkdir(ctx.grant.clone(), JsonBody(request(json!({"path": a.path}))?)).await;
    Ok(answer.map(|j| json_result(&j.0)).into())
}

/// `delete`: `DELETE /files`.
pub async fn delete(ctx: &Ctx<'_>, args: Map<String, Value>) -> Result<Outcome, ErrorData> {
    let a: PathArgs = arguments(args)?;
    let answer = handlers::delete(ctx.grant.clone(), Query(request(json!({"path": a.path}))?)).await;
    Ok(answer.map(|j| json_result(&j.0)).into())
}

/// `move`: `POST /files/move`.
pub async fn rename(ctx: &Ctx<'_>, args: Map<String, Value>) -> Result<Outcome, ErrorData> {
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Args {
        source: String,
        destination: String,
    }
    let a: Args = arguments(args)?;
    let body = request(json!({"source": a.source, "destination": a.destination}))?;
    let answer = handlers::rename(State(ctx.app.clone()), ctx.grant.clone(), JsonBody(body)).await;
    Ok(answer.map(|j| json_result(&j.0)).into())
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SearchArgs {
    path: String,
    pattern: Option<String>,
    regex: Option<String>,
    glob: Option<String>,
    max_results: Option<u64>,
    max_depth: Option<u64>,
}

async fn search(ctx: &Ctx<'_>, a: SearchArgs, pattern: String, content: Option<String>) -> Outcome {
    let body = json!({"path": a.path, "pattern": pattern, "content": content,
        "max_results": a.max_results, "max_depth": a.max_depth});
    let body = match serde_json::from_value(body) {
        Ok(body) => body,
        Err(e) => return Outcome::Failed(ApiError::bad_request(format!("Invalid arguments: {e}"))),
    };
    handlers::search(ctx.grant.clone(), JsonBody(body)).await.map(|j| json_result(&j.0)).into()
}

/// `find`: `POST /files/search` by name.
pub async fn find(ctx: &Ctx<'_>, args: Map<String, Value>) -> Result<Outcome, ErrorData> {
    let mut a: SearchArgs = arguments(args)?;
    let pattern = a.pattern.take().ok_or_else(|| ErrorData::invalid_params("Missing 'pattern'", None))?;
    Ok(search(ctx, a, pattern, None).await)
}

/// `grep`: `POST /files/search` by content.
pub async fn grep(ctx: &Ctx<'_>, args: Map<String, Value>) -> Result<Outcome, ErrorData> {
    let mut a: SearchArgs = arguments(args)?;
    let regex = a.regex.take().ok_or_else(|| ErrorData::invalid_params("Missing 'regex'", None))?;
    let glob = a.glob.take().unwrap_or_else(|| "*".into());
    Ok(search(ctx, a, glob, Some(regex)).await)
}

/// What [`load`] read of a file.
pub enum Loaded {
    /// Lines of a text file, under its resolved path.
    Text(String, text::Lines),
    /// A binary file's bytes (at most [`BINARY_MAX`]), under its resolved path.
    Binary(String, Vec<u8>),
}

/// Reads `raw` as the file read endpoint does (its path rule, its size
/// limit): lines `first..` (at most `limit`, within [`READ_BUDGET`]) of a
/// text file, or the bytes of a binary file up to [`BINARY_MAX`].
///
/// # Errors
/// The HTTP API's error for the same read.
pub async fn load(grant: &Grant, raw: String, first: u64, limit: Option<u64>) -> Result<Loaded, ApiError> {
    let guard = grant.guard();
    let max_bytes = grant.limit(Limit::MaxBytes).map(abx_domain::policy::LimitValue::as_u64);
    fs::blocking(move || {
        let target = safe::resolve(&guard, &raw, Op::Read, "")?;
        let opened = read::open(&guard, &target, &raw, max_bytes)?;
        let path = opened.path.display().to_string();
        let (size, io) = (opened.stat.size, |e| FsError::io(&opened.path, e));
        match text::read_lines(&opened.file, first, limit, READ_BUDGET).map_err(io)? {
            Text::Lines(lines) => Ok(Loaded::Text(path, lines)),
            Text::Binary if size > BINARY_MAX => Err(FsError::TooLarge { size: Some(size), limit: BINARY_MAX }),
            Text::Binary => {
                // The sniffing moved the offset.
                let mut file = opened.file;
                std::io::Seek::rewind(&mut file).map_err(io)?;
                let mut bytes = Vec::new();
                std::io::Read::read_to_end(&mut std::io::Read::take(file, BINARY_MAX), &mut bytes).map_err(io)?;
                Ok(Loaded::Binary(path, bytes))
            }
        }
    })
    .await
    .map_err(at(grant))
}

/// `read`: lines of a text file; an image as an image, other bytes as base64.
pub async fn read(ctx: &Ctx<'_>, args: Map<String, Value>) -> Result<Outcome, ErrorData> {
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Args {
        path: String,
        offset: Option<u64>,
        limit: Option<u64>,
    }
    let a: Args = arguments(args)?;
    let loaded = load(ctx.grant, a.path, a.offset.unwrap_or(1), a.limit).await;
    Ok(loaded.map(read_result).into())
}

fn read_result(loaded: Loaded) -> CallToolResult {
    let (path, lines) = match loaded {
        Loaded::Text(path, lines) => (path, lines),
        Loaded::Binary(path, bytes) => {
            let data = base64::engine::general_purpose::STANDARD.encode(&bytes);
            let block = match image_type(&bytes) {
                Some(mime) => ContentBlock::image(data, mime),
                None => ContentBlock::resource(
                    ResourceContents::blob(data, format!("file://{path}")).with_mime_type("application/octet-stream"),
                ),
            };
            return CallToolResult::success(vec![block]);
        }
    };
    let mut content = vec![ContentBlock::text(lines.text)];
    if let Some(next) = lines.next {
        let last = (lines.first + lines.count).saturating_sub(1);
        let note =
            format!("[{path}: lines {}-{last} shown; the file goes on: read again with offset={next}]", lines.first);
        content.push(ContentBlock::text(note));
    }
    CallToolResult::success(content)
}

/// The MIME type of an image by its magic bytes.
pub fn image_type(bytes: &[u8]) -> Option<&'static str> {
    match bytes {
        [0x89, b'P', b'N', b'G', ..] => Some("image/png"),
        [0xff, 0xd8, 0xff, ..] => Some("image/jpeg"),
        [b'G', b'I', b'F', b'8', ..] => Some("image/gif"),
        [b'R', b'I', b'F', b'F', _, _, _, _, b'W', b'E', b'B', b'P', ..] => Some("image/webp"),
        _ => None,
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WriteArgs {
    path: String,
    content: String,
    overwrite: Option<bool>,
}

/// `write`: the same atomic streamed write as `PUT /files/content`.
pub async fn write(ctx: &Ctx<'_>, args: Map<String, Value>) -> Result<Outcome, ErrorData> {
    let a: WriteArgs = arguments(args)?;
    Ok(put(ctx.app, ctx.grant, a.path, Bytes::from(a.content), a.overwrite.unwrap_or(true)).await.into())
}

async fn put(
    app: &AppState,
    grant: &Grant,
    raw: String,
    bytes: Bytes,
    overwrite: bool,
) -> Result<CallToolResult, ApiError> {
    let mut policy = WritePolicy::for_grant(grant, None);
    policy.overwrite &= overwrite;
    let guard = grant.guard();
    let target = resolve_write(grant, raw).await?;
    let len = bytes.len() as u64;
    let body = futures_util::stream::iter([Ok::<_, std::convert::Infallible>(bytes)]);
    let committed = app.files.write_stream(&guard, &target, &policy, Some(len), body).await.map_err(at(grant))?;
    let answer =
        json!({"path": target.path.display().to_string(), "bytes": committed.stat.size, "created": committed.created});
    Ok(json_result(&answer))
}

/// `edit`: an exact-string replacement, written back atomically.
pub async fn edit(ctx: &Ctx<'_>, args: Map<String, Value>) -> Result<Outcome, ErrorData> {
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Args {
        path: String,
        old_string: String,
        new_string: String,
        replace_all: Option<bool>,
    }
    let a: Args = arguments(args)?;
    let (guard, raw) = (ctx.grant.guard(), a.path.clone());
    let max = limit_or(ctx.grant, Limit::MaxBytes, EDIT_MAX).min(EDIT_MAX);
    let content = fs::blocking(move || {
        let target = safe::resolve(&guard, &raw, Op::Read, "")?;
        let opened = read::open(&guard, &target, &raw, Some(max))?;
        let mut content = String::new();
        std::io::Read::read_to_string(&mut std::io::Read::take(opened.file, max), &mut content)
            .map_err(|_| FsError::Invalid(format!("{raw} is not a UTF-8 text file")))?;
        Ok(content)
    })
    .await;
    let content = match content {
        Ok(content) => content,
        Err(e) => return Ok(Outcome::Failed(at(ctx.grant)(e))),
    };
    let (changed, replaced) =
        match text::replace(&content, &a.old_string, &a.new_string, a.replace_all.unwrap_or(false)) {
            Ok(done) => done,
            Err(e) => return Ok(Outcome::Failed(ApiError::from(e))),
        };
    let written = put(ctx.app, ctx.grant, a.path, Bytes::from(changed), true).await;
    Ok(written
        .map(|mut result| {
            if let Some(Value::Object(map)) = &mut result.structured_content {
                map.insert("replacements".into(), json!(replaced));
                result.content = vec![ContentBlock::text(Value::Object(map.clone()).to_string())];
            }
            result
        })
        .into())
}
