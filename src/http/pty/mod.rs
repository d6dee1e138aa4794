//! Handlers of the terminal group: `/pty/sessions*` on the API port, the
//! router of the PTY port (the WebSocket, behind the same pipeline as every
//! endpoint), and the mapping of the terminal domain's errors to the
//! reference's error bodies.

mod websocket;

use abx_domain::policy::{Grant, ParamValue};
use abx_domain::pty::request::{self, CreatePolicy, CreateRequest};
use abx_domain::pty::TerminalError;
use abx_wire::api::Fault;
use abx_wire::api::{PtyClosed, PtyCreated, PtySessionInfo, PtySessionList};
use abx_wire::endpoints::{Limit, Param, Port, ENDPOINTS};
use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, HeaderValue};
use axum::routing::get;
use axum::{Json, Router};
use serde_json::{Map, Value};

use self::websocket::viewer;
use crate::http::error::ApiError;
use crate::http::extract::JsonBody;
use crate::http::pipeline::{guarded, KeepAliveLayer};
use crate::http::AppState;

/// `POST /pty/sessions`.
pub async fn create(
    State(app): State<AppState>,
    grant: Grant,
    headers: HeaderMap,
    JsonBody(body): JsonBody<Map<String, Value>>,
) -> Result<Json<PtyCreated>, ApiError> {
    let endpoint = grant.endpoint().id;
    let refuse = |e: TerminalError| {
        let err = ApiError::from(e);
        if err.code().is_some() {
            err.with_endpoint(endpoint)
        } else {
            err
        }
    };
    let policy = create_policy(&grant);
    let is_secret = |name: &str| app.engine.is_secret_env(name);
    let mut request = CreateRequest::parse(&body, &policy, &is_secret).map_err(refuse)?;
    let mut env = request.environment(app.env.snapshot(), &policy);
    if let Some(user) = grant.program_user() {
        // The caller's identity has a user of its own: the shell runs as it, at home.
        user.login_env(&mut env);
        env.extend(request.env.iter().cloned());
        request.run_as = Some(user.run_as());
    }
    let base_dir = app.engine.base_dir();
    let cwd = base_dir.is_dir().then(|| base_dir.to_path_buf());
    let max_sessions = grant.limit(Limit::MaxSessions).map(|l| usize::try_from(l.as_u64()).unwrap_or(usize::MAX));
    let session = app.terminals.create(&viewer(&grant), request, env, cwd, max_sessions).await.map_err(refuse)?;
    let text = |name| headers.get(name).and_then(|v: &HeaderValue| v.to_str().ok());
    let ws_url =
        request::ws_url(text(header::HOST.as_str()), text("x-forwarded-proto"), app.terminals.ws_port(), session.id());
    Ok(Json(PtyCreated { session_id: session.id().to_string(), ws_url, pid: session.pid() }))
}

/// `GET /pty/sessions`: the caller's sessions (everyone's for an admin).
pub async fn list(State(app): State<AppState>, grant: Grant) -> Json<PtySessionList> {
    Json(PtySessionList { sessions: app.terminals.list(&viewer(&grant)) })
}

/// `GET /pty/sessions/{id}`.
pub async fn detail(
    State(app): State<AppState>,
    grant: Grant,
    Path(id): Path<String>,
) -> Result<Json<PtySessionInfo>, ApiError> {
    Ok(Json(app.terminals.get(&id, &viewer(&grant))?.info()))
}

/// `POST /pty/sessions/{id}/resize {"cols", "rows"}`.
pub async fn resize(
    State(app): State<AppState>,
    grant: Grant,
    Path(id): Path<String>,
    JsonBody(body): JsonBody<Map<String, Value>>,
) -> Result<Json<PtySessionInfo>, ApiError> {
    let session = app.terminals.get(&id, &viewer(&grant))?;
    let (cols, rows) = request::parse_resize(&body)?;
    session.resize(cols, rows);
    Ok(Json(session.info()))
}

/// `DELETE /pty/sessions/{id}`: closes the session; its shell gets `SIGHUP`, then `SIGKILL`.
pub async fn delete(
    State(app): State<AppState>,
    grant: Grant,
    Path(id): Path<String>,
) -> Result<Json<PtyClosed>, ApiError> {
    app.terminals.close(&id, &viewer(&grant))?;
    Ok(Json(PtyClosed { status: "closed".into(), session_id: id }))
}

/// The policy's `shells` and `env_deny` for a new session.
fn create_policy(grant: &Grant) -> CreatePolicy {
    let strings = |param| match grant.param(param) {
        Some(ParamValue::Strings(list)) => Some(list.clone()),
        _ => None,
    };
    let env_deny = abx_domain::policy::guards::env::VarRules::new(&[], &strings(Param::EnvDeny).unwrap_or_default());
    let commands_restricted = abx_domain::policy::guards::commands_restricted(grant.engine());
    CreatePolicy { shells: strings(Param::Shells), env_deny, commands_restricted }
}

/// The router of the PTY port: `GET /pty` upgrades to the terminal
/// WebSocket after the pipeline authenticated and admitted `pty_connect`.
/// As the reference, a `?token=` stands for the credentials headers when
/// none is sent (browsers cannot set headers on a WebSocket).
pub fn router(state: AppState) -> Router {
    let mut router = Router::new();
    for endpoint in ENDPOINTS.iter().filter(|e| e.port == Port::Pty) {
        if endpoint.id == "pty_connect" {
            router = router.route(endpoint.path, guarded(get(websocket::connect), &state, endpoint));
        }
    }
    router
        .fallback(crate::http::not_found)
        .method_not_allowed_fallback(crate::http::method_not_allowed)
        .layer(KeepAliveLayer)
        .with_state(state)
}

impl From<TerminalError> for ApiError {
    fn from(err: TerminalError) -> Self {
        match err {
            TerminalError::Env(denial) => denial.into(),
            TerminalError::Spawn(e) => {
                tracing::error!(error = %e, "cannot start a terminal");
                ApiError::of(Fault::TerminalSpawn, format!("Cannot start the terminal: {e}"))
            }
            other => ApiError::of(other.fault(), other.to_string()),
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
    use abx_domain::policy::rules::{Layer, LimitValue, Rank, RuleSpec, Selector};
    use abx_domain::policy::{ParamValue, PolicyDocument, PolicyEngine, PolicyInputs};
    use abx_wire::endpoints::{Limit, Param};

    fn app(rule: RuleSpec) -> axum::Router {
        let layer = Layer {
            selector: Selector::Exact("pty_create_session".into()),
            rank: Rank::Policy,
            rule,
            origin: "policy:endpoints.pty_create_session".into(),
        };
        let document = PolicyDocument { layers: vec![layer], ..PolicyDocument::default() };
        let engine =
            PolicyEngine::new(PolicyInputs { document: Some(document), ..PolicyInputs::default() }).expect("policy");
        crate::http::router(crate::http::AppState::new(Arc::new(engine), CancellationToken::new()))
    }

    async fn call(app: &axum::Router, method: &str, uri: &str, body: Value) -> (u16, Value) {
        let request = Request::builder()
            .method(method)
            .uri(uri)
            .header("host", "sandbox.test:9000")
            .body(Body::from(body.to_string()))
            .expect("request");
        send(app, request).await
    }

    #[tokio::test]
    async fn the_policy_decides_shells_env_and_max_sessions() {
        let strings = |v: &[&str]| ParamValue::Strings(v.iter().map(|s| s.to_string()).collect());
        let rule = RuleSpec {
            params: BTreeMap::from([(Param::Shells, strings(&["/bin/sh"])), (Param::EnvDeny, strings(&["SECRET_*"]))]),
            limits: BTreeMap::from([(Limit::MaxSessions, LimitValue::Int(1))]),
            ..RuleSpec::default()
        };
        let app = app(rule);
        let (status, body) = call(&app, "POST", "/pty/sessions", json!({"shell": "/bin/bash"})).await;
        assert_eq!(
            (status, body),
            (
                403,
                json!({"error": "Shell '/bin/bash' is not permitted by policy", "type": "PolicyDenied",
                       "code": "shell_not_allowed", "endpoint": "pty_create_session"})
            )
        );
        let (status, body) =
            call(&app, "POST", "/pty/sessions", json!({"shell": "/bin/sh", "env": {"SECRET_X": "1"}})).await;
        assert_eq!((status, body["code"].clone()), (403, json!("env_var_not_allowed")));
        assert_eq!(body["error"], "Environment variable(s) not allowed: ['SECRET_X']");

        let (status, created) = call(&app, "POST", "/pty/sessions", json!({"shell": "/bin/sh"})).await;
        assert_eq!(status, 200, "{created}");
        let id = created["session_id"].as_str().expect("id").to_string();
        assert_eq!(created["ws_url"], format!("ws://sandbox.test:9001/pty?session_id={id}"));
        let (status, body) = call(&app, "POST", "/pty/sessions", json!({"shell": "/bin/sh"})).await;
        assert_eq!(
            (status, body["error"].clone(), body["type"].clone()),
            (429, json!("Session limit reached (1)"), json!("RuntimeError"))
        );

        let (status, closed) = call(&app, "DELETE", &format!("/pty/sessions/{id}"), json!({})).await;
        assert_eq!((status, closed), (200, json!({"status": "closed", "session_id": id})));
        let (status, missing) = call(&app, "GET", &format!("/pty/sessions/{id}"), json!({})).await;
        assert_eq!(
            (status, missing),
            (404, json!({"error": format!("Session not found: {id}"), "type": "ValueError"}))
        );
    }
}
