//! What the handlers' in-crate router tests share: one request through a
//! router (`oneshot`, as axum's testing example), its answer read back as
//! the status and the JSON body.

use axum::body::Body;
use axum::http::Request;
use serde_json::Value;
use tower::ServiceExt;

/// Sends `request` through `app`: the answer's status and JSON body.
pub async fn send(app: &axum::Router, request: Request<Body>) -> (u16, Value) {
    let response = app.clone().oneshot(request).await.expect("response");
    let status = response.status().as_u16();
    let bytes = axum::body::to_bytes(response.into_body(), 1 << 20).await.expect("body");
    (status, serde_json::from_slice(&bytes).expect("JSON"))
}
