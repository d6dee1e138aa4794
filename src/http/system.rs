//! Handlers of the system group: `GET /system/info`, `GET /system/metrics`,
//! `GET /env`, `POST /env`, `GET /ports`, `GET /packages`, and the mapping
//! of the system domain's errors to the reference's error bodies.

use abx_domain::policy::guards::env::VarRules;
use abx_domain::policy::{Grant, ParamValue};
use abx_domain::system::env::{self, EnvError};
use abx_domain::system::run::RunError;
use abx_domain::system::SystemError;
use abx_wire::api::Fault;
use abx_wire::api::{
    EnvQuery, EnvSetRequest, EnvUpdated, EnvVariables, PackageList, PackagesQuery, PortList, SystemInfo, SystemMetrics,
};
use abx_wire::endpoints::Param;
use axum::extract::State;
use axum::Json;

use super::error::ApiError;
use super::extract::{JsonBody, Query};
use super::AppState;

/// `GET /system/info`.
pub async fn info(State(app): State<AppState>) -> Result<Json<SystemInfo>, ApiError> {
    Ok(Json(app.system.info(&app.env, app.engine.base_dir()).await?))
}

/// `GET /system/metrics`.
pub async fn metrics(State(app): State<AppState>) -> Result<Json<SystemMetrics>, ApiError> {
    Ok(Json(app.system.metrics().await?))
}

/// `GET /env?filter=A,B`.
pub async fn env_get(State(app): State<AppState>, grant: Grant, Query(query): Query<EnvQuery>) -> Json<EnvVariables> {
    let is_secret = |name: &str| app.engine.is_secret_env(name);
    Json(EnvVariables { variables: env::visible(&app.env, &var_rules(&grant), &is_secret, query.filter.as_deref()) })
}

/// `POST /env {"vars": {...}}`.
pub async fn env_set(
    State(app): State<AppState>,
    grant: Grant,
    JsonBody(body): JsonBody<EnvSetRequest>,
) -> Result<Json<EnvUpdated>, ApiError> {
    let is_secret = |name: &str| app.engine.is_secret_env(name);
    let restricted = abx_domain::policy::guards::commands_restricted(&app.engine);
    match env::set(&app.env, &var_rules(&grant), &is_secret, restricted, &body.vars) {
        Ok(updated) => Ok(Json(EnvUpdated { updated })),
        Err(EnvError::Denied(denial)) => Err(ApiError::from(denial).with_endpoint(grant.endpoint().id)),
        Err(e) => Err(ApiError::of(e.fault(), e.to_string())),
    }
}

/// `GET /metrics`: the pipeline's Prometheus metrics and the live resources.
pub async fn prometheus(State(app): State<AppState>) -> axum::response::Response {
    use axum::response::IntoResponse;
    let live = crate::metrics::Live {
        processes: app.processes.registry().live(),
        terminals: app.terminals.live() as u64,
        code_contexts: app.interpreter.as_ref().map_or(0, |code| code.count() as u64),
        watches: abx_domain::fs::watch::live() as u64,
        webhooks: app.agents.if_started().map(|agents| agents.webhooks.outcomes()).unwrap_or_default(),
    };
    let content_type = [(axum::http::header::CONTENT_TYPE, crate::metrics::CONTENT_TYPE)];
    (content_type, app.metrics.render(live)).into_response()
}

/// `GET /ports`.
pub async fn ports(State(app): State<AppState>) -> Result<Json<PortList>, ApiError> {
    Ok(Json(PortList { listening: app.system.ports().await? }))
}

/// `GET /packages?manager=pip|npm|dpkg`.
pub async fn packages(
    State(app): State<AppState>,
    Query(query): Query<PackagesQuery>,
) -> Result<Json<PackageList>, ApiError> {
    let manager = query.manager.as_deref().unwrap_or("pip");
    Ok(Json(app.system.packages(manager, &app.env, app.engine.base_dir()).await?))
}

/// The endpoint's `allow_vars` / `deny_vars` (envd's `/init` and `/envs` use `env_set`'s and `env_get`'s).
pub(crate) fn var_rules(grant: &Grant) -> VarRules {
    let list = |param| match grant.param(param) {
        Some(ParamValue::Strings(patterns)) => patterns.as_slice(),
        _ => &[],
    };
    VarRules::new(list(Param::AllowVars), list(Param::DenyVars))
}

impl From<SystemError> for ApiError {
    fn from(err: SystemError) -> Self {
        match &err {
            SystemError::UnsupportedManager(_) => ApiError::bad_request(err.to_string()),
            SystemError::Listing { manager, source: RunError::Timeout } => {
                ApiError::of(Fault::ListingTimeout, format!("{manager} timed out"))
            }
            SystemError::Listing { manager, source: RunError::TooMuchOutput(limit) } => {
                ApiError::of(Fault::OutputTooLarge, format!("{manager} listed more than {limit} bytes"))
            }
            SystemError::Listing { .. } | SystemError::Reader(_) => {
                tracing::error!(error = %err, "system call failed");
                ApiError::internal()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::Arc;

    use axum::body::Body;
    use axum::http::Request;
    use serde_json::{json, Value};
    use tokio_util::sync::CancellationToken;

    use crate::http::testing::send;
    use abx_domain::policy::rules::{Layer, Rank, RuleSpec, Selector};
    use abx_domain::policy::{ParamValue, PolicyDocument, PolicyEngine, PolicyInputs};
    use abx_wire::endpoints::Param;

    fn rule(endpoint: &str, params: &[(Param, &[&str])]) -> Layer {
        let params: BTreeMap<Param, ParamValue> =
            params.iter().map(|(p, v)| (*p, ParamValue::Strings(v.iter().map(|s| s.to_string()).collect()))).collect();
        Layer {
            selector: Selector::Exact(endpoint.into()),
            rank: Rank::Policy,
            rule: RuleSpec { params, ..RuleSpec::default() },
            origin: format!("policy:endpoints.{endpoint}"),
        }
    }

    async fn call(app: &axum::Router, method: &str, uri: &str, body: Value) -> (u16, Value) {
        let request = Request::builder().method(method).uri(uri).body(Body::from(body.to_string())).expect("request");
        send(app, request).await
    }

    #[tokio::test]
    async fn allow_vars_and_deny_vars_come_from_the_policy() {
        let layers = vec![
            rule("env_set", &[(Param::AllowVars, &["SYS_TEST_*"]), (Param::DenyVars, &["SYS_TEST_NO*"])]),
            rule("env_get", &[(Param::AllowVars, &["SYS_TEST_*"]), (Param::DenyVars, &["SYS_TEST_HIDDEN"])]),
        ];
        let document = PolicyDocument { layers, ..PolicyDocument::default() };
        let engine =
            PolicyEngine::new(PolicyInputs { document: Some(document), ..PolicyInputs::default() }).expect("policy");
        let app = super::super::router(super::AppState::new(Arc::new(engine), CancellationToken::new()));

        let set = json!({"vars": {"SYS_TEST_A": "1", "SYS_TEST_HIDDEN": "2"}});
        assert_eq!(call(&app, "POST", "/env", set).await, (200, json!({"updated": ["SYS_TEST_A", "SYS_TEST_HIDDEN"]})));
        for name in ["SYS_TEST_NOPE", "OTHER"] {
            let (status, body) = call(&app, "POST", "/env", json!({"vars": {name: "x"}})).await;
            assert_eq!(status, 403);
            assert_eq!(body["code"], "env_var_not_allowed");
            assert_eq!(body["endpoint"], "env_set");
            assert_eq!(body["error"], format!("Environment variable '{name}' is not allowed"));
        }
        let (status, body) = call(&app, "GET", "/env", json!({})).await;
        assert_eq!((status, body), (200, json!({"variables": {"SYS_TEST_A": "1"}})), "allow list and deny list");
    }
}
