//! A session's artifacts (`GET`, `DELETE`, and the bytes of one, streamed
//! from its snapshot) and traces.

use abx_domain::agents::artifacts::ArtifactRecord;
use abx_domain::agents::{AgentError, Session};
use abx_domain::policy::Grant;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::Value;

use super::{owner, page, runtime, value_id, ListQuery, Result};
use crate::http::agents::wire::objects::ArtifactObject;
use crate::http::agents::wire::traces::trace_object;
use crate::http::agents::wire::{Deleted, Label, Page};
use crate::http::extract::Query;
use crate::http::AppState;

fn object(session: &Session, record: &ArtifactRecord) -> ArtifactObject {
    ArtifactObject::new(record, &session.id, session.meta().environment_id.as_deref())
}

fn find(session: &Session, artifact_id: &str) -> Result<ArtifactRecord> {
    let found = session.artifacts().into_iter().find(|a| a.id == artifact_id);
    Ok(found.ok_or_else(|| AgentError::not_found("artifact", artifact_id, "artifact_id"))?)
}

/// `GET /v1/agents/sessions/{id}/artifacts`.
pub async fn artifacts_list(
    State(app): State<AppState>,
    grant: Grant,
    Path(id): Path<String>,
    Query(query): Query<ListQuery>,
) -> Result<Json<Page<ArtifactObject>>> {
    let session = runtime(&app).await.session(owner(&grant), &id)?;
    let mut objects: Vec<ArtifactObject> = session.artifacts().iter().map(|a| object(&session, a)).collect();
    if let Some(env) = query.environment_id.as_deref().filter(|e| !e.is_empty()) {
        objects.retain(|o| o.environment_id == env);
    }
    page(objects, |o| o.id.clone(), &query)
}

/// `GET /v1/agents/sessions/{id}/artifacts/{artifact_id}`.
pub async fn artifacts_get(
    State(app): State<AppState>,
    grant: Grant,
    Path((id, artifact_id)): Path<(String, String)>,
) -> Result<Json<ArtifactObject>> {
    let session = runtime(&app).await.session(owner(&grant), &id)?;
    let record = find(&session, &artifact_id)?;
    Ok(Json(object(&session, &record)))
}

/// `DELETE /v1/agents/sessions/{id}/artifacts/{artifact_id}`: the snapshot only.
pub async fn artifacts_delete(
    State(app): State<AppState>,
    grant: Grant,
    Path((id, artifact_id)): Path<(String, String)>,
) -> Result<Json<Deleted>> {
    let agents = runtime(&app).await;
    let session = agents.session(owner(&grant), &id)?;
    agents.delete_artifact(&session, &artifact_id)?;
    let label = Label::state(&["delete_removes_snapshot_only", "snapshot_copy"]).with("deleted_scope", "snapshot");
    Ok(Json(Deleted {
        id: artifact_id,
        object: "agent.session.artifact.deleted",
        deleted: true,
        x_agent_sandbox: label,
    }))
}

/// `GET /v1/agents/sessions/{id}/artifacts/{artifact_id}/content`: the
/// snapshot's bytes, streamed from disk.
pub async fn artifact_content(
    State(app): State<AppState>,
    grant: Grant,
    Path((id, artifact_id)): Path<(String, String)>,
) -> Result<Response> {
    let session = runtime(&app).await.session(owner(&grant), &id)?;
    let record = find(&session, &artifact_id)?;
    let dir = session.dir().to_path_buf();
    let opened = {
        let record = record.clone();
        tokio::task::spawn_blocking(move || abx_domain::agents::artifacts::open(&dir, &record)).await
    };
    let Ok(Ok(file)) = opened else {
        return Err(AgentError::not_found("artifact", &artifact_id, "artifact_id").into());
    };
    let name: String =
        record.rel.rsplit('/').next().unwrap_or("artifact").chars().filter(|c| *c != '"' && *c != '\\').collect();
    let disposition = HeaderValue::from_str(&format!("attachment; filename=\"{name}\""))
        .unwrap_or_else(|_| HeaderValue::from_static("attachment"));
    let body = Body::from_stream(tokio_util::io::ReaderStream::new(tokio::fs::File::from_std(file)));
    let mut response = body.into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/octet-stream"));
    headers.insert(header::CONTENT_LENGTH, HeaderValue::from(record.size_bytes));
    headers.insert(header::CONTENT_DISPOSITION, disposition);
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    Ok(response)
}

/// `GET /v1/agents/sessions/{id}/traces`: one per finished turn with
/// `ABX_AGENTS_TRACES=1`, none otherwise.
pub async fn traces_list(
    State(app): State<AppState>,
    grant: Grant,
    Path(id): Path<String>,
    Query(query): Query<ListQuery>,
) -> Result<Json<Page<Value>>> {
    let agents = runtime(&app).await;
    let session = agents.session(owner(&grant), &id)?;
    let traces: Vec<Value> = if agents.config().traces {
        session.turns().iter().filter_map(|t| trace_object(&session.id, t)).collect()
    } else {
        Vec::new()
    };
    page(traces, value_id, &query)
}
