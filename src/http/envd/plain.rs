//! envd's plain HTTP endpoints besides `/files`: `/metrics`, `/envs`, `/init`.

use std::collections::BTreeMap;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};

use super::{credentials, http_error, plain_error, Caller, EnvdState};
use crate::api::envd::http::{InitRequest, Metrics};
use crate::system::host;

/// `GET /metrics`: CPU, memory and the base directory's disk, as envd's `Metrics`.
pub async fn metrics(State(state): State<EnvdState>, Extension(caller): Extension<Caller>) -> Response {
    let _admitted = match state.admit(&caller, "system_metrics") {
        Ok(admitted) => admitted,
        Err(e) => return http_error(e.code.status(), e.message),
    };
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

/// `GET /envs`: the variables `/init` set.
pub async fn envs(State(state): State<EnvdState>, Extension(caller): Extension<Caller>) -> Response {
    if let Err(e) = state.admit(&caller, "env_get") {
        return http_error(e.code.status(), e.message);
    }
    let mut response = Json::<BTreeMap<String, String>>(state.envd.init_env()).into_response();
    response.headers_mut().insert(header::CACHE_CONTROL, header::HeaderValue::from_static("no-store"));
    response
}

/// `POST /init`: variables for later processes, the access token, the default
/// user and working directory; 204. Allowed without credentials only while
/// no token protects the plane (first setup); afterwards it needs a valid
/// `X-Access-Token` or the current `/init` token in the body.
pub async fn init(State(state): State<EnvdState>, headers: HeaderMap, body: Bytes) -> Response {
    let request: InitRequest = if body.iter().all(u8::is_ascii_whitespace) {
        InitRequest::default()
    } else {
        match serde_json::from_slice(&body) {
            Ok(request) => request,
            Err(e) => return http_error(StatusCode::BAD_REQUEST, format!("invalid /init body: {e}")),
        }
    };
    let engine = &state.app.engine;
    if !state.envd.tokens.may_init(engine, &credentials(&headers), request.access_token.as_deref()) {
        return http_error(StatusCode::UNAUTHORIZED, "access token validation failed");
    }
    let envd = state.envd.clone();
    let restricted = crate::policy::guards::commands_restricted(engine);
    match tokio::task::spawn_blocking(move || envd.init(request, restricted)).await {
        Ok(Ok(())) => StatusCode::NO_CONTENT.into_response(),
        Ok(Err(e)) => plain_error(e),
        Err(_) => http_error(StatusCode::INTERNAL_SERVER_ERROR, "init failed"),
    }
}
