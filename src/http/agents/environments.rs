//! `/v1/agents/environments` (create, list, get), their files (write one,
//! list) and the reduced templates (create, list, get, update, delete).
//! Every path an environment writes or lists, and its directory when it
//! must be created, is admitted by the endpoint's path policy first (the
//! reference creates the directory before asking, wherever it is); the
//! writes then go through that same guard. File work runs off the runtime.

use std::sync::Arc;

use abx_domain::agents::records::Stored;
use abx_domain::agents::resources::Environment;
use abx_domain::agents::workspace_files::{list_files, workspace_missing};
use abx_domain::agents::{AgentError, Agents};
use abx_domain::policy::{Grant, Op};
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::{Map, Value};

use super::{owner, page, runtime, AgentsError, ListQuery};
use crate::http::agents::wire::environments::{
    environment_file_object, environment_object, files_page, known_keys, parse_environment, parse_file,
    parse_files_query, parse_template, template_deleted, template_object, FilesQuery,
};
use crate::http::agents::wire::Page;
use crate::http::error::ApiError;
use crate::http::extract::{JsonBody, Query};
use crate::http::AppState;

/// An agents refusal (the OpenAI envelope) or a path policy denial (the
/// policy's error body, as the reference answers it).
#[derive(Debug)]
pub enum Refusal {
    /// Refused by the agents group.
    Agents(AgentError),
    /// Refused by the endpoint's path policy.
    Policy(Box<ApiError>),
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        match self {
            Refusal::Agents(e) => AgentsError(e).into_response(),
            Refusal::Policy(e) => e.into_response(),
        }
    }
}

impl From<AgentsError> for Refusal {
    fn from(AgentsError(e): AgentsError) -> Self {
        Refusal::Agents(e)
    }
}

impl From<AgentError> for Refusal {
    fn from(e: AgentError) -> Self {
        Refusal::Agents(e)
    }
}

type Answer = std::result::Result<Json<Value>, Refusal>;

fn refuse(err: AgentError) -> Refusal {
    Refusal::Agents(err)
}

/// A blocking environment task that panicked or was cancelled.
impl From<tokio::task::JoinError> for Refusal {
    fn from(e: tokio::task::JoinError) -> Self {
        refuse(AgentError::internal("environment file work failed", e))
    }
}

/// Runs blocking file work off the runtime ([`abx_domain::blocking::run`]).
async fn blocking<T: Send + 'static>(work: impl FnOnce() -> Result<T, Refusal> + Send + 'static) -> Result<T, Refusal> {
    abx_domain::blocking::run(work).await
}

/// Admits `path` for `op` under the endpoint's path policy.
fn admit(grant: &Grant, path: &std::path::Path, op: Op) -> Result<(), Refusal> {
    grant
        .resolve(&path.to_string_lossy(), op, "path")
        .map(|_| ())
        .map_err(|d| Refusal::Policy(Box::new(ApiError::from(d).with_endpoint(grant.endpoint().id))))
}

fn environment(agents: &Agents, owner: &str, id: &str) -> Result<Arc<Stored<Environment>>, Refusal> {
    agents
        .resources
        .environments
        .get(owner, id)
        .ok_or_else(|| refuse(AgentError::not_found("environment", id, "environment_id")))
}

/// `POST /v1/agents/environments`: binds (and creates) the directory, applies the template and files.
pub async fn environments_create(
    State(app): State<AppState>,
    grant: Grant,
    JsonBody(body): JsonBody<Map<String, Value>>,
) -> Answer {
    let agents = runtime(&app).await;
    let new = parse_environment(&body, agents.resources.max_file_bytes)?;
    let owner = owner(&grant).to_string();
    // Each named vault must be the caller's (the first unknown one is 404).
    agents.vaults().resolve(&owner, &new.vault_ids)?;
    let record = blocking(move || {
        let prepared = agents.resources.prepare_environment(&owner, new)?;
        // A directory the environment would create is a write under the path rules.
        if workspace_missing(&prepared.environment.workspace_directory) {
            admit(&grant, &prepared.environment.root, Op::Write)?;
        }
        for target in prepared.targets() {
            admit(&grant, &target, Op::Write)?;
        }
        agents.resources.commit_environment(&owner, prepared, &grant.guard()).map_err(refuse)
    })
    .await?;
    Ok(Json(environment_object(&record)))
}

/// `GET /v1/agents/environments/{environment_id}`.
pub async fn environments_get(State(app): State<AppState>, grant: Grant, Path(id): Path<String>) -> Answer {
    let agents = runtime(&app).await;
    Ok(Json(environment_object(&*environment(&agents, owner(&grant), &id)?)))
}

/// The query of the environments list.
#[derive(Debug, Default, Deserialize)]
pub struct EnvironmentsQuery {
    #[serde(flatten)]
    list: ListQuery,
    #[serde(rename = "type")]
    kind: Option<String>,
}

/// `GET /v1/agents/environments` (`type` other than `self_hosted` lists none).
pub async fn environments_list(
    State(app): State<AppState>,
    grant: Grant,
    Query(query): Query<EnvironmentsQuery>,
) -> Result<Json<Page<Value>>, Refusal> {
    let agents = runtime(&app).await;
    let mut records = agents.resources.environments.list(owner(&grant));
    if query.kind.as_deref().is_some_and(|k| !k.is_empty() && k != "self_hosted") {
        records.clear();
    }
    let Json(listed) = page(records, |r| r.id.clone(), &query.list)?;
    Ok(Json(listed.map(|r| environment_object(&r))))
}

/// `POST /v1/agents/environments/{environment_id}/files`: one new file, never an overwrite.
pub async fn environment_files_create(
    State(app): State<AppState>,
    grant: Grant,
    Path(id): Path<String>,
    JsonBody(body): JsonBody<Map<String, Value>>,
) -> Answer {
    let agents = runtime(&app).await;
    let owner = owner(&grant).to_string();
    let record = environment(&agents, &owner, &id)?;
    known_keys(&body, &["type", "data", "file_id", "path"], "")?;
    let file = parse_file(&Value::Object(body), "file", agents.resources.max_file_bytes)?;
    let planned = blocking(move || {
        admit(&grant, &record.data.root.join(&file.rel), Op::Write)?;
        agents.resources.add_environment_file(&owner, &record, &file, &grant.guard()).map_err(refuse)
    })
    .await?;
    Ok(Json(environment_file_object(&id, &planned.rel, planned.size, true)))
}

/// `GET /v1/agents/environments/{environment_id}/files`: regular files, by path, paged with `page` tokens.
pub async fn environment_files_list(
    State(app): State<AppState>,
    grant: Grant,
    Path(id): Path<String>,
    Query(query): Query<FilesQuery>,
) -> Answer {
    let agents = runtime(&app).await;
    let record = environment(&agents, owner(&grant), &id)?;
    let listing = parse_files_query(&query)?;
    let (root, prefix) = (record.data.root.clone(), listing.prefix.clone());
    let rows = blocking(move || {
        let base = if prefix.is_empty() { root.clone() } else { root.join(&prefix) };
        admit(&grant, &base, Op::Read)?;
        Ok(list_files(&grant.guard(), &root, &prefix))
    })
    .await?;
    Ok(Json(files_page(&id, rows, &listing)))
}

fn template_not_found(id: &str) -> Refusal {
    refuse(AgentError::not_found("environment template", id, "environment_template_id"))
}

/// `POST /v1/agents/environments/templates`.
pub async fn templates_create(
    State(app): State<AppState>,
    grant: Grant,
    JsonBody(body): JsonBody<Map<String, Value>>,
) -> Answer {
    let agents = runtime(&app).await;
    let fields = parse_template(&body, true, agents.resources.max_file_bytes)?;
    let owner = owner(&grant).to_string();
    let record = blocking(move || {
        let files = fields.files.unwrap_or_default();
        let name = fields.name.flatten();
        agents.resources.create_template(&owner, name, fields.env.unwrap_or_default(), &files).map_err(refuse)
    })
    .await?;
    Ok(Json(template_object(&record)))
}

/// `GET /v1/agents/environments/templates/{environment_template_id}`.
pub async fn templates_get(State(app): State<AppState>, grant: Grant, Path(id): Path<String>) -> Answer {
    let found = runtime(&app).await.resources.templates.get(owner(&grant), &id);
    Ok(Json(template_object(&*found.ok_or_else(|| template_not_found(&id))?)))
}

/// `POST /v1/agents/environments/templates/{environment_template_id}`: the fields given replace its own.
pub async fn templates_update(
    State(app): State<AppState>,
    grant: Grant,
    Path(id): Path<String>,
    JsonBody(body): JsonBody<Map<String, Value>>,
) -> Answer {
    let agents: Arc<Agents> = runtime(&app).await;
    let owner = owner(&grant).to_string();
    if agents.resources.templates.get(&owner, &id).is_none() {
        return Err(template_not_found(&id));
    }
    let fields = parse_template(&body, false, agents.resources.max_file_bytes)?;
    let record = blocking(move || {
        let files = fields.files.as_deref();
        agents.resources.update_template(&owner, &id, fields.name, fields.env, files).map_err(refuse)
    })
    .await?;
    Ok(Json(template_object(&record)))
}

/// `GET /v1/agents/environments/templates`.
pub async fn templates_list(
    State(app): State<AppState>,
    grant: Grant,
    Query(query): Query<ListQuery>,
) -> Result<Json<Page<Value>>, Refusal> {
    let agents = runtime(&app).await;
    let Json(listed) = page(agents.resources.templates.list(owner(&grant)), |r| r.id.clone(), &query)?;
    Ok(Json(listed.map(|r| template_object(&r))))
}

/// `DELETE /v1/agents/environments/templates/{environment_template_id}`.
///
/// On the blocking pool: it removes the template's file bytes, and waits
/// for an environment that may be copying them.
pub async fn templates_delete(State(app): State<AppState>, grant: Grant, Path(id): Path<String>) -> Answer {
    let agents: Arc<Agents> = runtime(&app).await;
    let (owner, wanted) = (owner(&grant).to_string(), id.clone());
    let deleted = blocking(move || agents.resources.delete_template(&owner, &wanted).map_err(refuse)).await?;
    deleted.ok_or_else(|| template_not_found(&id))?;
    Ok(Json(template_deleted(&id)))
}
