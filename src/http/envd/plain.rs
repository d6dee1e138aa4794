//! envd's plain HTTP endpoints besides `/files`: `/metrics`, `/envs`, `/init`.

use std::collections::BTreeMap;

use std::sync::Arc;

use abx_domain::envd::EnvdError;
use abx_domain::policy::Grant;
use abx_domain::system::host;
use abx_wire::api::envd::http::{InitRequest, Metrics};
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;

use super::{blocking, http_error, plain_error, EnvdState};

/// `GET /metrics`: CPU, memory and the base directory's disk, as envd's `Metrics`.
pub async fn metrics(State(state): State<EnvdState>) -> Response {
    let cpu_used_pct = state.app.system.metrics().await.ok().and_then(|m| m.cpu_percent).unwrap_or(0.0);
    let base = state.app.engine.base_dir().to_path_buf();
    let read = tokio::task::spawn_blocking(move || {
        let meminfo = host::read_text("/proc/meminfo").unwrap_or_default();
        let memory = host::parse_meminfo(&meminfo);
        let cached = meminfo
            .lines()
            .find_map(|l| l.strip_prefix("Cached:"))
            .and_then(|rest| rest.split_whitespace().next()?.parse::<u64>().ok())
            .map_or(0, |kib| kib.saturating_mul(1024));
        (memory, cached, host::read_disk(&base))
    })
    .await;
    let Ok((memory, cached, disk)) = read else {
        return http_error(StatusCode::INTERNAL_SERVER_ERROR, "cannot read the system's state");
    };
    let (total, available) = memory.map_or((0, 0), |m| (m.total, m.available));
    let used = total.saturating_sub(available);
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    Json(Metrics {
        ts: i64::try_from(now).unwrap_or(i64::MAX),
        cpu_count: std::thread::available_parallelism().map_or(1, |n| n.get() as u64),
        cpu_used_pct,
        mem_total: total,
        mem_used: used,
        mem_cache: cached,
        mem_total_mib: host::mib(total),
        mem_used_mib: host::mib(used),
        disk_used: disk.map_or(0, |d| d.used),
        disk_total: disk.map_or(0, |d| d.total),
    })
    .into_response()
}

/// `GET /envs`: the variables `/init` set that `env_get`'s rules let the caller see.
pub async fn envs(State(state): State<EnvdState>, grant: Grant) -> Response {
    let rules = crate::http::system::var_rules(&grant);
    let engine = &state.app.engine;
    let mut visible = state.envd.init_env();
    visible.retain(|name, _| rules.allows(name) && !engine.is_secret_env(name));
    let mut response = Json::<BTreeMap<String, String>>(visible).into_response();
    response.headers_mut().insert(header::CACHE_CONTROL, header::HeaderValue::from_static("no-store"));
    response
}

/// `POST /init`: variables for later processes (under `env_set`'s rules:
/// its allow and deny lists, secrets, the protected names), the access
/// token (acting with the caller's own scopes), the default user and
/// working directory; 204. Admitted like every call: the caller needs the
/// `envd:init` scope (an orchestrator's), and `env_set`'s switch governs it.
pub async fn init(State(state): State<EnvdState>, grant: Grant, body: Bytes) -> Response {
    let request: InitRequest = if body.iter().all(u8::is_ascii_whitespace) {
        InitRequest::default()
    } else {
        match serde_json::from_slice(&body) {
            Ok(request) => request,
            Err(e) => return http_error(StatusCode::BAD_REQUEST, format!("invalid /init body: {e}")),
        }
    };
    if let Some(user) = request.default_user.clone().filter(|u| !u.is_empty()) {
        let known = blocking(move || abx_domain::envd::access::account(&user).map(|_| ())).await;
        if let Err(e) = known {
            return plain_error(EnvdError::Invalid(format!("invalid default user: {e}")));
        }
    }
    let vars = request.env_vars.clone().unwrap_or_default();
    if !vars.is_empty() {
        let engine = Arc::clone(&state.app.engine);
        let is_secret = move |name: &str| engine.is_secret_env(name);
        let json = serde_json::Value::Object(vars.iter().map(|(k, v)| (k.clone(), v.clone().into())).collect());
        let rules = crate::http::system::var_rules(&grant);
        let restricted = abx_domain::policy::guards::commands_restricted(&state.app.engine);
        if let Err(e) = abx_domain::system::env::set(&state.app.env, &rules, &is_secret, restricted, &json) {
            let status = match &e {
                abx_domain::system::env::EnvError::Denied(denial) => {
                    StatusCode::from_u16(denial.status()).unwrap_or(StatusCode::FORBIDDEN)
                }
                abx_domain::system::env::EnvError::Protected(_) => StatusCode::FORBIDDEN,
                abx_domain::system::env::EnvError::NotAnObject => StatusCode::BAD_REQUEST,
            };
            return http_error(status, e.to_string());
        }
    }
    let envd = state.envd.clone();
    let (user, workdir) = (request.default_user.clone(), request.default_workdir.clone());
    if let Err(e) = blocking(move || envd.init(vars, user, workdir)).await {
        return plain_error(e);
    }
    if let Some(token) = request.access_token.as_deref() {
        state.app.engine.set_access_token(token, grant.identity());
    }
    StatusCode::NO_CONTENT.into_response()
}
