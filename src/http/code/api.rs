//! Handlers of the dev_tools group: `POST /code/run`, `GET /git/status`,
//! `GET /git/diff`, and the mapping of their errors to the wire.

use std::time::Duration;

use abx_domain::code::git::{self, GitError};
use abx_domain::code::oneshot::{
    self, CodeRunError as RunError, RunSpec, DEFAULT_TIMEOUT_SECONDS, MAX_TIMEOUT_SECONDS,
};
use abx_domain::policy::{Denial, Grant, LimitValue, Op, ParamValue};
use abx_domain::pyrepr;
use abx_wire::api::code::{CodeRunResult, GitDiff, GitQuery, GitStatus};
use abx_wire::api::Fault;
use abx_wire::endpoints::{Limit, Param};
use axum::extract::State;
use axum::Json;
use serde_json::{Map, Value};

use crate::http::error::ApiError;
use crate::http::extract::{JsonBody, Query};
use crate::http::AppState;

/// `POST /code/run`: runs a snippet once and returns its output.
pub async fn code_run(
    State(app): State<AppState>,
    grant: Grant,
    JsonBody(body): JsonBody<Map<String, Value>>,
) -> Result<Json<CodeRunResult>, ApiError> {
    let code = match body.get("code") {
        Some(Value::String(code)) if !code.is_empty() => code.clone(),
        _ => return Err(ApiError::bad_request("Missing or invalid 'code'")),
    };
    let language = match body.get("language") {
        None => "python".to_string(),
        Some(Value::String(s)) => s.to_lowercase(),
        Some(other) => other.to_string().to_lowercase(),
    };
    if !oneshot::LANGUAGES.contains(&language.as_str()) {
        return Err(ApiError::bad_request(format!(
            "Unsupported language '{language}'; supported: {}",
            oneshot::LANGUAGES.join(", ")
        )));
    }
    if let Some(ParamValue::Strings(allowed)) = grant.param(Param::Languages) {
        if !allowed.iter().any(|l| l.to_lowercase() == language) {
            let message = format!("Language '{language}' is not permitted by policy");
            return Err(Denial::new(Fault::LanguageNotAllowed, message).into());
        }
    }
    let mut timeout = requested_timeout(body.get("timeout"));
    if let Some(cap) = grant.limit(Limit::TimeoutSeconds) {
        timeout = timeout.min(cap.as_u64()).max(1);
    }
    let spec = RunSpec {
        language: language.clone(),
        code,
        timeout: Duration::from_secs(timeout),
        max_output_bytes: grant
            .limit(Limit::MaxOutputBytes)
            .map_or(oneshot::DEFAULT_MAX_OUTPUT_BYTES, LimitValue::as_u64),
        cwd: grant.guard().primary_root().to_path_buf(),
        env: login_env(&grant, app.env.snapshot()),
        interpreters: (*app.interpreters).clone(),
        run_as: grant.run_as(),
    };
    let outcome = oneshot::run(spec).await?;
    Ok(Json(CodeRunResult {
        stdout: outcome.stdout,
        stderr: outcome.stderr,
        exit_code: outcome.exit_code,
        language,
        execution_time_ms: (outcome.elapsed.as_secs_f64() * 100_000.0).round() / 100.0,
        truncated: outcome.truncated,
    }))
}

/// The timeout the caller asked for, read as leniently as the reference:
/// an integer, a float (truncated) or a numeric string; anything else, or
/// a non-positive value, means the default; at most 300 s.
fn requested_timeout(raw: Option<&Value>) -> u64 {
    match raw.and_then(|v| pyrepr::int_of(v).ok()) {
        Some(s) if s > 0 => u64::try_from(s).unwrap_or(MAX_TIMEOUT_SECONDS).min(MAX_TIMEOUT_SECONDS),
        _ => DEFAULT_TIMEOUT_SECONDS,
    }
}

/// `GET /git/status`: branch and changed files.
pub async fn git_status(
    State(app): State<AppState>,
    grant: Grant,
    Query(query): Query<GitQuery>,
) -> Result<Json<GitStatus>, ApiError> {
    let dir = grant.resolve_path(query.path.as_deref().unwrap_or("."))?;
    Ok(Json(git::status(&dir, &app.env.snapshot(), grant.run_as().as_ref()).await?))
}

/// `GET /git/diff`: the working tree's (or the index's) diff and its counts.
pub async fn git_diff(
    State(app): State<AppState>,
    grant: Grant,
    Query(query): Query<GitQuery>,
) -> Result<Json<GitDiff>, ApiError> {
    let dir = grant.resolve_path(query.path.as_deref().unwrap_or("."))?;
    let file = query.file.filter(|f| !f.is_empty());
    match &file {
        Some(file) => {
            grant.guard().resolve(&dir.join(file).to_string_lossy(), Op::Read, "file")?;
        }
        None if !grant.rule().deny.is_empty() => {
            let message = "A 'file' filter is required while path deny rules are configured";
            return Err(Denial::new(Fault::PathDenied, message).into());
        }
        None => {}
    }
    if file.as_deref().is_some_and(|f| f.split('/').any(|c| c == "..")) {
        return Err(ApiError::bad_request("Path traversal ('..') is not allowed in file parameter"));
    }
    let staged = query.staged.is_some_and(|s| matches!(s.to_lowercase().as_str(), "true" | "yes" | "1"));
    let run_as = grant.run_as();
    Ok(Json(git::diff(&dir, staged, file.as_deref(), &app.env.snapshot(), run_as.as_ref()).await?))
}

impl From<RunError> for ApiError {
    fn from(e: RunError) -> Self {
        if let RunError::Spawn(language, source) = &e {
            tracing::error!(language, error = %source, "cannot start a /code/run interpreter");
            return ApiError::internal();
        }
        ApiError::of(e.fault(), e.to_string())
    }
}

impl From<GitError> for ApiError {
    fn from(e: GitError) -> Self {
        if let GitError::Spawn(source) = &e {
            tracing::error!(error = %source, "cannot start git");
            return ApiError::internal();
        }
        ApiError::of(e.fault(), e.to_string())
    }
}

/// `env` with `HOME`, `USER` and `LOGNAME` of the user the caller's programs
/// run as, when its identity names one.
fn login_env(
    grant: &Grant,
    mut env: std::collections::BTreeMap<String, String>,
) -> std::collections::BTreeMap<String, String> {
    if let Some(user) = grant.program_user() {
        user.login_env(&mut env);
    }
    env
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use axum::body::Body;
    use axum::http::Request;
    use serde_json::json;
    use tokio_util::sync::CancellationToken;

    use super::*;
    use crate::http::testing::send;
    use abx_domain::policy::document::PolicyDocument;
    use abx_domain::policy::rules::{Layer, Rank, RuleSpec, Selector};
    use abx_domain::policy::{PolicyEngine, PolicyInputs};

    async fn code_run_with(router: &axum::Router, body: Value) -> (u16, Value) {
        let request = Request::post("/code/run").body(Body::from(body.to_string())).expect("request");
        send(router, request).await
    }

    #[tokio::test]
    async fn policy_languages_timeout_and_output_limits_apply() {
        let rule = RuleSpec {
            enabled: Some(true),
            limits: [(Limit::TimeoutSeconds, LimitValue::Int(1)), (Limit::MaxOutputBytes, LimitValue::Int(4))].into(),
            params: [(Param::Languages, ParamValue::Strings(vec!["Bash".into()]))].into(),
            ..RuleSpec::default()
        };
        let layer = Layer { selector: Selector::parse("code_run"), rank: Rank::Policy, rule, origin: "test".into() };
        let document = PolicyDocument { layers: vec![layer], ..PolicyDocument::default() };
        let inputs =
            PolicyInputs { base_dir: std::env::temp_dir(), document: Some(document), ..PolicyInputs::default() };
        let engine = Arc::new(PolicyEngine::new(inputs).expect("policy"));
        let router = crate::http::router(AppState::new(engine, CancellationToken::new()));

        let (status, body) = code_run_with(&router, json!({"code": "print(1)", "language": "python"})).await;
        assert_eq!((status, body["code"].as_str()), (403, Some("language_not_allowed")));
        let (status, body) = code_run_with(&router, json!({"code": "printf 123456", "language": "bash"})).await;
        assert_eq!((status, body["stdout"].as_str(), body["truncated"].as_bool()), (200, Some("1234"), Some(true)));
        let (status, body) =
            code_run_with(&router, json!({"code": "sleep 20", "language": "bash", "timeout": 60})).await;
        assert_eq!((status, body["error"].as_str()), (408, Some("Code execution timed out after 1s")));
    }

    #[test]
    fn timeouts_are_read_as_leniently_as_the_reference() {
        let t = |v: Value| requested_timeout(Some(&v));
        assert_eq!(requested_timeout(None), 30);
        assert_eq!(t(json!(5)), 5);
        assert_eq!(t(json!(2.9)), 2);
        assert_eq!(t(json!("7")), 7);
        assert_eq!(t(json!("2.5")), 30);
        assert_eq!(t(json!(0)), 30);
        assert_eq!(t(json!(-3)), 30);
        assert_eq!(t(json!(10_000)), 300);
        assert_eq!(t(json!(null)), 30);
        assert_eq!(t(json!(true)), 1);
    }
}
