//! `/v1/webhook_endpoints` (create, list, get, update, delete, rotate the
//! secret, send a test event) and `GET /v1/webhook_event_types`. The
//! endpoints and their deliveries are `agents::webhooks`'.

use axum::extract::{Path, State};
use axum::Json;
use serde_json::{Map, Value};

use super::{owner, page, runtime, ListQuery, Result};
use crate::agents::AgentError;
use crate::api::agents::webhooks::{
    endpoint_fields, endpoint_label, rotation, test_event_type, EventTypeList, TestResult, WebhookEndpointObject,
};
use crate::api::agents::{Deleted, Page};
use crate::http::extract::{JsonBody, Query};
use crate::http::AppState;
use crate::policy::Grant;

/// `POST /v1/webhook_endpoints`: the signing secret is in this answer only.
pub async fn webhooks_create(
    State(app): State<AppState>,
    grant: Grant,
    JsonBody(body): JsonBody<Map<String, Value>>,
) -> Result<Json<WebhookEndpointObject>> {
    let agents = runtime(&app).await;
    let hooks = &agents.webhooks;
    let fields = endpoint_fields(&body, true, |url| hooks.admit(url))?;
    let (url, types, name) =
        (fields.url.unwrap_or_default(), fields.event_types.unwrap_or_default(), fields.name.unwrap_or_default());
    let endpoint = hooks.create(owner(&grant), url, types, name)?;
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
pub async fn webhooks_get(
    State(app): State<AppState>,
    grant: Grant,
    Path(id): Path<String>,
) -> Result<Json<WebhookEndpointObject>> {
    let agents = runtime(&app).await;
    Ok(Json(WebhookEndpointObject::new(&agents.webhooks.get(owner(&grant), &id)?, false)))
}

/// `POST /v1/webhook_endpoints/{webhook_endpoint_id}`.
pub async fn webhooks_update(
    State(app): State<AppState>,
    grant: Grant,
    Path(id): Path<String>,
    JsonBody(body): JsonBody<Map<String, Value>>,
) -> Result<Json<WebhookEndpointObject>> {
    let agents = runtime(&app).await;
    let hooks = &agents.webhooks;
    hooks.get(owner(&grant), &id)?;
    let fields = endpoint_fields(&body, false, |url| hooks.admit(url))?;
    Ok(Json(WebhookEndpointObject::new(&hooks.update(owner(&grant), &id, fields)?, false)))
}

/// `DELETE /v1/webhook_endpoints/{webhook_endpoint_id}`.
pub async fn webhooks_delete(
    State(app): State<AppState>,
    grant: Grant,
    Path(id): Path<String>,
) -> Result<Json<Deleted>> {
    let agents = runtime(&app).await;
    let endpoint = agents.webhooks.delete(owner(&grant), &id)?;
    Ok(Json(Deleted {
        id: endpoint.id,
        object: "webhook_endpoint.deleted",
        deleted: true,
        x_agent_sandbox: endpoint_label(),
    }))
}

/// `POST /v1/webhook_endpoints/{webhook_endpoint_id}/rotate_secret`: the new secret is in this answer only.
pub async fn webhooks_rotate_secret(
    State(app): State<AppState>,
    grant: Grant,
    Path(id): Path<String>,
    JsonBody(body): JsonBody<Map<String, Value>>,
) -> Result<Json<WebhookEndpointObject>> {
    let agents = runtime(&app).await;
    agents.webhooks.get(owner(&grant), &id)?;
    rotation(&body)?;
    Ok(Json(WebhookEndpointObject::new(&agents.webhooks.rotate(owner(&grant), &id)?, true)))
}

/// `POST /v1/webhook_endpoints/{webhook_endpoint_id}/test`: one signed event, sent now.
pub async fn webhooks_test(
    State(app): State<AppState>,
    grant: Grant,
    Path(id): Path<String>,
    JsonBody(body): JsonBody<Map<String, Value>>,
) -> Result<Json<TestResult>> {
    let agents = runtime(&app).await;
    let endpoint = agents.webhooks.get(owner(&grant), &id)?;
    let event_type = test_event_type(&body)?;
    let status = agents
        .webhooks
        .test(&endpoint, event_type)
        .await
        .map_err(|e| AgentError::invalid_code(e.to_string(), Some("url"), "agents.webhook_delivery_failed"))?;
    Ok(Json(TestResult {
        object: "webhook_endpoint.test",
        event_type,
        status_code: status,
        success: true,
        webhook_endpoint_id: endpoint.id,
        x_agent_sandbox: endpoint_label(),
    }))
}

/// `GET /v1/webhook_event_types`: the types this server sends.
pub async fn webhook_event_types() -> Json<EventTypeList> {
    Json(EventTypeList::default())
}
