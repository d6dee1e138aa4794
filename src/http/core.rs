//! Handlers of the core group: `GET /health`, `GET /capabilities`, `POST
//! /capabilities/check`, and the extension `GET /openapi.json`.

use abx_domain::policy::{Grant, Op};
use abx_wire::api::{Capabilities, CheckRequest, Decision, Health};
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue};
use axum::response::{IntoResponse, Response};
use axum::Json;

use super::error::ApiError;
use super::extract::JsonBody;
use super::AppState;

/// `GET /health`: always `{"status": "ok"}` while the server runs.
pub async fn health() -> Json<Health> {
    Json(Health { status: "ok".into() })
}

/// `GET /capabilities`: the discovery document for the caller.
pub async fn capabilities(State(app): State<AppState>, grant: Grant) -> Json<Capabilities> {
    Json(app.engine.describe(grant.identity(), &|ep| app.served(ep)))
}

/// `POST /capabilities/check`: the decision for a call the client is about to make.
pub async fn check(
    State(app): State<AppState>,
    grant: Grant,
    JsonBody(body): JsonBody<CheckRequest>,
) -> Result<Json<Decision>, ApiError> {
    if body.endpoint.is_empty() {
        return Err(ApiError::bad_request("Missing or invalid 'endpoint'"));
    }
    let op = match body.op.as_deref() {
        None => None,
        Some(name) => {
            Some(Op::from_name(name).ok_or_else(|| ApiError::bad_request("'op' must be read, write, delete or exec"))?)
        }
    };
    let paths: Vec<String> = body.path.into_iter().chain(body.paths.unwrap_or_default()).collect();
    Ok(Json(app.engine.check(grant.identity(), &body.endpoint, &paths, op, &|ep| app.served(ep))))
}

/// `GET /openapi.json`: this port's OpenAPI document (the committed `docs/openapi.json`, embedded):
/// gzip-encoded as embedded when the client accepts gzip, plain otherwise.
pub async fn openapi(headers: HeaderMap) -> Response {
    let json = (header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    let vary = (header::VARY, HeaderValue::from_static("Accept-Encoding"));
    if super::encoding::accepted(&headers).0 {
        let gzip = (header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
        ([json, vary, gzip], crate::openapi::document_gzip()).into_response()
    } else {
        ([json, vary], crate::openapi::document()).into_response()
    }
}
