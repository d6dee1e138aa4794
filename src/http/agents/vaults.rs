//! `/v1/vaults` and `/v1/vaults/{vault_id}/credentials`: create, list, get,
//! update and delete vaults and their write-only credentials. Lists take
//! the reference's filters: `metadata[key]=value` pairs and `status`
//! (every record is `active`).

use abx_domain::policy::Grant;
use axum::extract::{Path, State};
use axum::Json;
use serde_json::{Map, Value};

use super::{owner, page, runtime, ListQuery, Result};
use crate::http::agents::wire::vaults::{self as wire, credential_object, vault_object};
use crate::http::agents::wire::{Deleted, Page};
use crate::http::extract::{JsonBody, Query};
use crate::http::AppState;

/// A list's query: paging, then the filters.
struct Filters {
    paging: ListQuery,
    metadata: Vec<(String, String)>,
    statuses: Vec<String>,
}

impl Filters {
    fn new(pairs: Vec<(String, String)>) -> Self {
        let first = |name: &str| pairs.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone());
        let paging =
            ListQuery { limit: first("limit"), order: first("order"), after: first("after"), ..ListQuery::default() };
        let mut metadata: Vec<(String, String)> = Vec::new();
        for (key, value) in &pairs {
            if let Some(name) = key.strip_prefix("metadata[").and_then(|k| k.strip_suffix(']')) {
                if !metadata.iter().any(|(k, _)| k == name) {
                    metadata.push((name.to_string(), value.clone()));
                }
            }
        }
        let statuses = pairs.iter().filter(|(k, _)| k == "status" || k == "status[]").map(|(_, v)| v.clone()).collect();
        Filters { paging, metadata, statuses }
    }

    /// Whether a record with `metadata` is listed.
    fn keeps(&self, metadata: &Map<String, Value>) -> bool {
        (self.statuses.is_empty() || self.statuses.iter().any(|s| s == "active"))
            && self.metadata.iter().all(|(k, v)| metadata.get(k).and_then(Value::as_str) == Some(v.as_str()))
    }
}

/// `POST /v1/vaults`.
pub async fn vaults_create(
    State(app): State<AppState>,
    grant: Grant,
    JsonBody(body): JsonBody<Map<String, Value>>,
) -> Result<Json<Value>> {
    let (name, metadata) = wire::vault_create(&body)?;
    let vault = runtime(&app).await.vaults().create_vault(owner(&grant), name, metadata)?;
    Ok(Json(vault_object(&vault)))
}

/// `GET /v1/vaults`.
pub async fn vaults_list(
    State(app): State<AppState>,
    grant: Grant,
    Query(pairs): Query<Vec<(String, String)>>,
) -> Result<Json<Page<Value>>> {
    let filters = Filters::new(pairs);
    let vaults = runtime(&app).await.vaults().vaults(owner(&grant));
    let listed = vaults.iter().filter(|v| filters.keeps(&v.metadata)).collect();
    objects(page(listed, |v| v.id.clone(), &filters.paging)?, vault_object)
}

/// A page of records as a page of their wire objects (only the page's are built).
fn objects<T>(Json(page): Json<Page<T>>, object: impl Fn(T) -> Value) -> Result<Json<Page<Value>>> {
    let Page { object: kind, data, first_id, last_id, has_more } = page;
    Ok(Json(Page { object: kind, data: data.into_iter().map(object).collect(), first_id, last_id, has_more }))
}

/// `GET /v1/vaults/{vault_id}`.
pub async fn vaults_get(
    State(app): State<AppState>,
    grant: Grant,
    Path(vault_id): Path<String>,
) -> Result<Json<Value>> {
    let vault = runtime(&app).await.vaults().vault(owner(&grant), &vault_id)?;
    Ok(Json(vault_object(&vault)))
}

/// `POST /v1/vaults/{vault_id}`: `name` and `metadata` only.
pub async fn vaults_update(
    State(app): State<AppState>,
    grant: Grant,
    Path(vault_id): Path<String>,
    JsonBody(body): JsonBody<Map<String, Value>>,
) -> Result<Json<Value>> {
    let agents = runtime(&app).await;
    agents.vaults().vault(owner(&grant), &vault_id)?;
    let change = wire::vault_update(&body)?;
    let vault = agents.vaults().update_vault(owner(&grant), &vault_id, change)?;
    Ok(Json(vault_object(&vault)))
}

/// `DELETE /v1/vaults/{vault_id}`: the vault and every credential in it.
pub async fn vaults_delete(
    State(app): State<AppState>,
    grant: Grant,
    Path(vault_id): Path<String>,
) -> Result<Json<Deleted>> {
    runtime(&app).await.vaults().delete_vault(owner(&grant), &vault_id)?;
    Ok(Json(wire::vault_deleted(&vault_id)))
}

/// `POST /v1/vaults/{vault_id}/credentials`.
pub async fn credentials_create(
    State(app): State<AppState>,
    grant: Grant,
    Path(vault_id): Path<String>,
    JsonBody(body): JsonBody<Map<String, Value>>,
) -> Result<Json<Value>> {
    let agents = runtime(&app).await;
    agents.vaults().vault(owner(&grant), &vault_id)?;
    let new = wire::credential_create(&body, agents.config().allow_private_urls)?;
    let credential = agents.vaults().create_credential(owner(&grant), &vault_id, new)?;
    Ok(Json(credential_object(&credential)))
}

/// `GET /v1/vaults/{vault_id}/credentials`.
pub async fn credentials_list(
    State(app): State<AppState>,
    grant: Grant,
    Path(vault_id): Path<String>,
    Query(pairs): Query<Vec<(String, String)>>,
) -> Result<Json<Page<Value>>> {
    let filters = Filters::new(pairs);
    let credentials = runtime(&app).await.vaults().credentials(owner(&grant), &vault_id)?;
    let listed = credentials.iter().filter(|c| filters.keeps(&c.metadata)).collect();
    objects(page(listed, |c| c.id.clone(), &filters.paging)?, credential_object)
}

/// `GET /v1/vaults/{vault_id}/credentials/{credential_id}`.
pub async fn credentials_get(
    State(app): State<AppState>,
    grant: Grant,
    Path((vault_id, credential_id)): Path<(String, String)>,
) -> Result<Json<Value>> {
    let credential = runtime(&app).await.vaults().credential(owner(&grant), &vault_id, &credential_id)?;
    Ok(Json(credential_object(&credential)))
}

/// `POST /v1/vaults/{vault_id}/credentials/{credential_id}`: new metadata, a rotated token.
pub async fn credentials_update(
    State(app): State<AppState>,
    grant: Grant,
    Path((vault_id, credential_id)): Path<(String, String)>,
    JsonBody(body): JsonBody<Map<String, Value>>,
) -> Result<Json<Value>> {
    let vaults = runtime(&app).await;
    let vaults = vaults.vaults();
    let current = vaults.credential(owner(&grant), &vault_id, &credential_id)?;
    let change = wire::credential_update(&body, current.kind())?;
    let credential = vaults.update_credential(owner(&grant), &vault_id, &credential_id, change)?;
    Ok(Json(credential_object(&credential)))
}

/// `DELETE /v1/vaults/{vault_id}/credentials/{credential_id}`.
pub async fn credentials_delete(
    State(app): State<AppState>,
    grant: Grant,
    Path((vault_id, credential_id)): Path<(String, String)>,
) -> Result<Json<Deleted>> {
    let credential = runtime(&app).await.vaults().delete_credential(owner(&grant), &vault_id, &credential_id)?;
    Ok(Json(wire::credential_deleted(&credential.id)))
}
