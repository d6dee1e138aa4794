//! `/v1/webhook_endpoints` (create, list, get, update, delete, rotate the
//! secret, send a test event) and `GET /v1/webhook_event_types`. The
//! endpoints and their deliveries are `agents::webhooks`'.

use std::sync::Arc;

use abx_domain::agents::webhooks::registry::WebhookEndpoint;
use abx_domain::agents::{AgentError, Agents};
use abx_domain::policy::Grant;
use axum::extract::{FromRequestParts, Path, State};
use axum::http::request::Parts;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{Map, Value};

use super::{owner, page, runtime, AgentsError, ListQuery, Result};
use crate::http::agents::wire::webhooks::{
    endpoint_fields, endpoint_label, rotation, test_event_type, EventTypeList, TestResult, WebhookEndpointObject,
};
use crate::http::agents::wire::{Deleted, Page};
use crate::http::extract::{JsonBody, Query};
use crate::http::AppState;

/// The endpoint a request's path names, found for its caller before the
/// body is read (an unknown id is a 404 whatever the body, as the reference).
pub struct Named {
    agents: Arc<Agents>,
    owner: String,
    endpoint: WebhookEndpoint,
}

impl FromRequestParts<AppState> for Named {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, app: &AppState) -> std::result::Result<Self, Response> {
        let grant = Grant::from_request_parts(parts, app).await.map_err(IntoResponse::into_response)?;
        let Path(id) = Path::<String>::from_request_parts(parts, app).await.map_err(IntoResponse::into_response)?;
        let agents = runtime(app).await;
        let owner = owner(&grant).to_string();
        let endpoint = agents.webhooks.get(&owner, &id).map_err(|e| AgentsError(e).into_response())?;
        Ok(Named { agents, owner, endpoint })
    }
}

/// `POST /v1/webhook_endpoints`: the signing secret is in this answer only.
pub async fn webhooks_create(
    State(app): State<AppState>,
    grant: Grant,
    JsonBody(body): JsonBody<Map<String, Value>>,
) -> Result<Json<WebhookEndpointObject>> {
    let agents = runtime(&app).await;
    let fields = endpoint_fields(&body, true, |url| agents.webhooks.admit(url))?;
    let endpoint = agents.webhooks.create(owner(&grant), fields)?;
    Ok(Json(WebhookEndpointObject::new(&endpoint, true)))
}

/// `GET /v1/webhook_endpoints`.
pub async fn webhooks_list(
    State(app): State<AppState>,
    grant: Grant,
    Query(query): Query<ListQuery>,
) -> Result<Json<Page<WebhookEndpointObject>>> {
    let agents = runtime(&app).await;
    let objects = agents.webhooks.list(owner(&grant)).iter().map(|e| WebhookEndpointObject::new(e, false)).collect();
    page(objects, |o| o.id.clone(), &query)
}

/// `GET /v1/webhook_endpoints/{webhook_endpoint_id}`: no secret.
pub async fn webhooks_get(named: Named) -> Json<WebhookEndpointObject> {
    Json(WebhookEndpointObject::new(&named.endpoint, false))
}

/// `POST /v1/webhook_endpoints/{webhook_endpoint_id}`.
pub async fn webhooks_update(
    named: Named,
    JsonBody(body): JsonBody<Map<String, Value>>,
) -> Result<Json<WebhookEndpointObject>> {
    let Named { agents, owner, endpoint } = named;
    let fields = endpoint_fields(&body, false, |url| agents.webhooks.admit(url))?;
    Ok(Json(WebhookEndpointObject::new(&agents.webhooks.update(&owner, &endpoint.id, fields)?, false)))
}

/// `DELETE /v1/webhook_endpoints/{webhook_endpoint_id}`.
pub async fn webhooks_delete(named: Named) -> Result<Json<Deleted>> {
    let endpoint = named.agents.webhooks.delete(&named.owner, &named.endpoint.id)?;
    let label = endpoint_label();
    Ok(Json(Deleted { id: endpoint.id, object: "webhook_endpoint.deleted", deleted: true, x_agent_sandbox: label }))
}

/// `POST /v1/webhook_endpoints/{webhook_endpoint_id}/rotate_secret`: the new secret is in this answer only.
pub async fn webhooks_rotate_secret(
    named: Named,
    JsonBody(body): JsonBody<Map<String, Value>>,
) -> Result<Json<WebhookEndpointObject>> {
    rotation(&body)?;
    let rotated = named.agents.webhooks.rotate(&named.owner, &named.endpoint.id)?;
    Ok(Json(WebhookEndpointObject::new(&rotated, true)))
}

/// `POST /v1/webhook_endpoints/{webhook_endpoint_id}/test`: one signed event, sent now.
pub async fn webhooks_test(named: Named, JsonBody(body): JsonBody<Map<String, Value>>) -> Result<Json<TestResult>> {
    let event_type = test_event_type(&body)?;
    let status = named
        .agents
        .webhooks
        .test(&named.endpoint, event_type)
        .await
        .map_err(|e| AgentError::invalid_code(e.to_string(), Some("url"), "agents.webhook_delivery_failed"))?;
    Ok(Json(TestResult {
        object: "webhook_endpoint.test",
        event_type,
        status_code: status,
        success: true,
        webhook_endpoint_id: named.endpoint.id,
        x_agent_sandbox: endpoint_label(),
    }))
}

/// `GET /v1/webhook_event_types`: the types this server sends.
pub async fn webhook_event_types() -> Json<EventTypeList> {
    Json(EventTypeList::default())
}
