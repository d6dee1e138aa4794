//! `POST /v1/files`: a `purpose=user_data` blob that environment and
//! template files can name by `file_id`. The bytes come as base64 in a JSON
//! body (`data` or `file`) or as the `file` part of a `multipart/form-data`
//! upload (what the `openai` SDK's `files.create` sends), which is streamed
//! to disk and never held whole in memory; both are bounded by
//! `agents_max_file_bytes` and the caller's quota.

use abx_domain::agents::resources::Blob;
use abx_domain::agents::{AgentError, Agents};
use abx_domain::policy::Grant;
use axum::body::to_bytes;
use axum::extract::{Request, State};
use axum::http::header;
use axum::Json;
use futures_util::StreamExt;
use serde_json::{Map, Value};
use tokio::io::AsyncWriteExt;

use super::{owner, runtime, Result};
use crate::http::agents::wire::environments::{blob_object, decode_base64, known_keys};
use crate::http::extract::{parse_object, BodyLimit};
use crate::http::AppState;

/// Longest text field of a multipart upload.
const MAX_FIELD: usize = 4096;

fn too_large(limit: u64) -> AgentError {
    AgentError::invalid_code(format!("file: larger than {limit} bytes"), Some("file"), "agents.file_too_large")
}

/// `POST /v1/files`.
pub async fn files_create(State(app): State<AppState>, grant: Grant, req: Request) -> Result<Json<Value>> {
    let agents = runtime(&app).await;
    let content_type = req.headers().get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("").to_string();
    let upload = agents.resources.upload_path();
    let received = async {
        let (fields, bytes) = if content_type.trim_start().to_ascii_lowercase().starts_with("multipart/form-data") {
            multipart(&agents, &content_type, req, &upload).await?
        } else {
            json(&agents, req, &upload).await?
        };
        Ok::<_, AgentError>((check_fields(&fields)?, bytes))
    };
    let (filename, bytes) = match received.await {
        Ok(done) => done,
        Err(e) => {
            let _ = tokio::fs::remove_file(&upload).await;
            return Err(e.into());
        }
    };
    let owner = owner(&grant).to_string();
    let record = tokio::task::spawn_blocking(move || {
        agents.resources.commit_blob(
            &owner,
            &upload,
            Blob { filename: filename.unwrap_or_else(|| "upload".into()), bytes },
        )
    })
    .await
    .map_err(|e| AgentError::internal("cannot store a file", e))??;
    Ok(Json(blob_object(&record)))
}

/// `purpose` must be `user_data`; `filename` a string up to 255 characters.
fn check_fields(fields: &Map<String, Value>) -> std::result::Result<Option<String>, AgentError> {
    known_keys(fields, &["purpose", "filename", "data", "file"], "")?;
    if fields.get("purpose").and_then(Value::as_str) != Some("user_data") {
        return Err(AgentError::invalid("purpose: only user_data is supported", "purpose"));
    }
    match fields.get("filename") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if s.chars().count() <= 255 => Ok(Some(s.clone()).filter(|s| !s.is_empty())),
        Some(_) => Err(AgentError::invalid("filename: expected a string up to 255 characters", "filename")),
    }
}

/// A JSON body: its fields, and `data` (or `file`) decoded into `upload`.
async fn json(
    agents: &Agents,
    req: Request,
    upload: &std::path::Path,
) -> std::result::Result<(Map<String, Value>, u64), AgentError> {
    let limit = req.extensions().get::<BodyLimit>().map_or(u64::MAX, |l| l.0);
    let body = to_bytes(req.into_body(), usize::try_from(limit).unwrap_or(usize::MAX))
        .await
        .map_err(|_| AgentError::invalid_code(format!("body: larger than {limit} bytes"), None, "payload_too_large"))?;
    let fields: Map<String, Value> =
        parse_object(&body).map_err(|_| AgentError::invalid_code("Invalid JSON body", None, "invalid_request"))?;
    check_fields(&fields)?;
    let raw = fields.get("data").or_else(|| fields.get("file"));
    let bytes = decode_base64(raw, "data", agents.resources.max_file_bytes)?;
    tokio::fs::write(upload, &bytes).await.map_err(|e| AgentError::internal("cannot store a file", e))?;
    Ok((fields, bytes.len() as u64))
}

/// A multipart body: its text fields, and the `file` part streamed into `upload`.
async fn multipart(
    agents: &Agents,
    content_type: &str,
    req: Request,
    upload: &std::path::Path,
) -> std::result::Result<(Map<String, Value>, u64), AgentError> {
    let bad =
        |e: multer::Error| AgentError::invalid_code(format!("Invalid multipart body: {e}"), None, "invalid_request");
    let boundary = multer::parse_boundary(content_type).map_err(bad)?;
    let mut form = multer::Multipart::new(req.into_body().into_data_stream(), boundary);
    let limit = agents.resources.max_file_bytes;
    let mut fields = Map::new();
    let mut uploaded_name = None;
    let mut size = None;
    while let Some(mut field) = form.next_field().await.map_err(bad)? {
        let name = field.name().unwrap_or_default().to_string();
        if name.is_empty() {
            return Err(AgentError::invalid_code(
                "Invalid multipart body: a part without a name",
                None,
                "invalid_request",
            ));
        }
        if name == "file" {
            uploaded_name = field.file_name().map(str::to_string).filter(|n| !n.is_empty());
            let mut file =
                tokio::fs::File::create(upload).await.map_err(|e| AgentError::internal("cannot store a file", e))?;
            let mut written = 0u64;
            while let Some(chunk) = field.next().await {
                let chunk = chunk.map_err(bad)?;
                written += chunk.len() as u64;
                if written > limit {
                    return Err(too_large(limit));
                }
                file.write_all(&chunk).await.map_err(|e| AgentError::internal("cannot store a file", e))?;
            }
            file.flush().await.map_err(|e| AgentError::internal("cannot store a file", e))?;
            size = Some(written);
            fields.insert(name, Value::Null);
        } else {
            let mut text = Vec::new();
            while let Some(chunk) = field.chunk().await.map_err(bad)? {
                text.extend_from_slice(&chunk);
                if text.len() > MAX_FIELD {
                    return Err(AgentError::invalid(format!("{name}: longer than {MAX_FIELD} bytes"), name));
                }
            }
            fields.insert(name, Value::String(String::from_utf8_lossy(&text).into_owned()));
        }
    }
    if let Some(name) = uploaded_name {
        fields.entry("filename").or_insert(Value::String(name));
    }
    let Some(size) = size else { return Err(AgentError::invalid("data: expected a base64 string", "data")) };
    Ok((fields, size))
}
