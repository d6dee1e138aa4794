//! Handlers of the `browser` group, and the one mapping of
//! [`BrowserError`] to the wire. Each reads its body as leniently as the
//! reference, hands the shared page to `browser::page` and shapes the answer.

pub mod egress;

use std::sync::Arc;
use std::time::Duration;

use abx_domain::browser::page::{self, WaitUntil};
use abx_domain::browser::BrowserError;
use abx_domain::policy::Grant;
use abx_domain::pyrepr;
use abx_wire::api::browser::{
    BlockedRequest, BrowserContent, BrowserPage, ClickRequest, Clicked, ConsoleLog, ConsoleLogs, ContentQuery,
    EvaluateRequest, Evaluated, NavigateRequest, Pdf, PdfRequest, Screenshot, ScreenshotRequest, TypeRequest, Typed,
};
use abx_wire::api::process::is_truthy;
use axum::extract::State;
use axum::Json;
use base64::Engine as _;
use serde_json::Value;

use super::error::ApiError;
use super::extract::{JsonBody, Query};
use super::AppState;

impl From<BrowserError> for ApiError {
    fn from(err: BrowserError) -> Self {
        let error = ApiError::of(err.fault(), err.to_string());
        match err {
            BrowserError::Blocked(blocked) => error.with_rule(&blocked.refusal.rule),
            BrowserError::Refused(refusal) => ApiError::from(refusal.denial).with_rule(&refusal.rule),
            BrowserError::TooLarge { limit } => error.with_limit(limit),
            BrowserError::Protocol(detail) => {
                tracing::error!(detail, "browser protocol error");
                ApiError::internal()
            }
            _ => error,
        }
    }
}

/// Maps a browser error; policy refusals name the endpoint.
fn at(grant: &Grant) -> impl Fn(BrowserError) -> ApiError + '_ {
    move |err| ApiError::from(err).with_endpoint(grant.endpoint().id)
}

/// A required non-empty string field, as the reference checks it.
fn required(value: Option<Value>, name: &str) -> Result<String, ApiError> {
    match value {
        Some(Value::String(s)) if !s.is_empty() => Ok(s),
        _ => Err(ApiError::bad_request(format!("Missing or invalid '{name}'"))),
    }
}

/// Milliseconds as the reference reads them: `int()`, else (or when not
/// positive) the default.
fn millis(value: Option<Value>, default: u64) -> Duration {
    let ms = value.and_then(|v| pyrepr::int_of(&v).ok()).and_then(|n| u64::try_from(n).ok()).filter(|&n| n > 0);
    Duration::from_millis(ms.unwrap_or(default))
}

fn flag(value: Option<Value>, default: bool) -> bool {
    value.map_or(default, |v| is_truthy(&v))
}

fn text(value: Option<Value>, default: &str) -> String {
    value.map_or_else(|| default.to_string(), |v| pyrepr::str_of(&v))
}

fn base64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// `POST /browser/navigate`.
pub async fn navigate(
    State(app): State<AppState>,
    grant: Grant,
    JsonBody(body): JsonBody<NavigateRequest>,
) -> Result<Json<BrowserPage>, ApiError> {
    let url = required(body.url, "url")?;
    let wait = WaitUntil::parse(&text(body.wait_until, "networkidle")).map_err(ApiError::from)?;
    let timeout = millis(body.timeout, 30_000);
    let browser = Arc::clone(&app.browser);
    browser.admit(&url).await.map_err(at(&grant))?;
    let answer = browser
        .run(&grant.identity().id, |page| async move {
            let status = page::navigate(&page, &url, wait, timeout).await?;
            let location = page::location(&page).await?;
            let blocked = page::blocked(&page)
                .into_iter()
                .map(|b| BlockedRequest {
                    url: b.url,
                    resource_type: b.resource_type,
                    code: b.refusal.denial.code().to_string(),
                    rule: b.refusal.rule,
                })
                .collect();
            Ok(BrowserPage { url: location.url, title: location.title, status, blocked })
        })
        .await;
    answer.map(Json).map_err(at(&grant))
}

/// `POST /browser/screenshot`.
pub async fn screenshot(
    State(app): State<AppState>,
    grant: Grant,
    JsonBody(body): JsonBody<ScreenshotRequest>,
) -> Result<Json<Screenshot>, ApiError> {
    let selector = body.selector.filter(is_truthy).map(|v| pyrepr::str_of(&v));
    let full_page = flag(body.full_page, true);
    let jpeg = text(body.format, "png").eq_ignore_ascii_case("jpeg");
    let shot = app.browser.run(&grant.identity().id, |page| async move {
        page::screenshot(&page, selector.as_deref(), full_page, jpeg).await
    });
    let (image, width, height) = shot.await.map_err(at(&grant))?;
    Ok(Json(Screenshot { image_base64: base64(&image), width, height }))
}

/// `GET /browser/content?type=html|text`.
pub async fn content(
    State(app): State<AppState>,
    grant: Grant,
    Query(query): Query<ContentQuery>,
) -> Result<Json<BrowserContent>, ApiError> {
    let as_text = query.kind.is_some_and(|k| k.eq_ignore_ascii_case("text"));
    let answer = app.browser.run(&grant.identity().id, |page| async move {
        let content = page::content(&page, as_text).await?;
        let location = page::location(&page).await?;
        Ok(BrowserContent { content, url: location.url, title: location.title })
    });
    answer.await.map(Json).map_err(at(&grant))
}

/// `POST /browser/click`.
pub async fn click(
    State(app): State<AppState>,
    grant: Grant,
    JsonBody(body): JsonBody<ClickRequest>,
) -> Result<Json<Clicked>, ApiError> {
    let selector = required(body.selector, "selector")?;
    let timeout = millis(body.timeout, 5_000);
    let target = selector.clone();
    app.browser
        .run(&grant.identity().id, |page| async move { page::click(&page, &target, timeout).await })
        .await
        .map_err(at(&grant))?;
    Ok(Json(Clicked { clicked: true, selector }))
}

/// `POST /browser/type`.
pub async fn type_text(
    State(app): State<AppState>,
    grant: Grant,
    JsonBody(body): JsonBody<TypeRequest>,
) -> Result<Json<Typed>, ApiError> {
    let selector = required(body.selector, "selector")?;
    let Some(Value::String(text)) = body.text else {
        return Err(ApiError::bad_request("Missing or invalid 'text'"));
    };
    let delay = body.delay.and_then(|v| pyrepr::int_of(&v).ok()).and_then(|n| u64::try_from(n).ok()).unwrap_or(50);
    let clear = flag(body.clear, false);
    let (target, typed) = (selector.clone(), text.clone());
    let typing = app.browser.run(&grant.identity().id, |page| async move {
        let wait = Duration::from_secs(30);
        page::type_text(&page, &target, &typed, Duration::from_millis(delay), clear, wait).await
    });
    typing.await.map_err(at(&grant))?;
    Ok(Json(Typed { typed: true, selector, text }))
}

/// `POST /browser/evaluate`.
pub async fn evaluate(
    State(app): State<AppState>,
    grant: Grant,
    JsonBody(body): JsonBody<EvaluateRequest>,
) -> Result<Json<Evaluated>, ApiError> {
    let script = required(body.script, "script")?;
    let timeout = millis(body.timeout, 10_000);
    let result =
        app.browser.run(&grant.identity().id, |page| async move { page::evaluate(&page, &script, timeout).await });
    Ok(Json(Evaluated { result: result.await.map_err(at(&grant))? }))
}

/// `POST /browser/pdf`.
pub async fn pdf(
    State(app): State<AppState>,
    grant: Grant,
    JsonBody(body): JsonBody<PdfRequest>,
) -> Result<Json<Pdf>, ApiError> {
    let format = text(body.format, "A4");
    let landscape = flag(body.landscape, false);
    let printed =
        app.browser.run(&grant.identity().id, |page| async move { page::pdf(&page, &format, landscape).await });
    let pdf = printed.await.map_err(at(&grant))?;
    Ok(Json(Pdf { pdf_base64: base64(&pdf), pages: page::count_pages(&pdf) }))
}

/// `GET /browser/console`: the messages since the last read (starts no browser).
pub async fn console(State(app): State<AppState>) -> Json<ConsoleLogs> {
    let logs =
        app.browser.console().into_iter().map(|e| ConsoleLog { kind: e.kind, text: e.text, timestamp: e.timestamp });
    Json(ConsoleLogs { logs: logs.collect() })
}

#[cfg(test)]
mod tests {
    use axum::http::StatusCode;

    use super::*;

    #[test]
    fn numbers_and_flags_are_read_as_the_reference_reads_them() {
        assert_eq!(millis(Some(Value::from("250")), 5), Duration::from_millis(250));
        assert_eq!(millis(Some(Value::from(-1)), 5), Duration::from_millis(5));
        assert_eq!(millis(Some(Value::from("x")), 5), Duration::from_millis(5));
        assert_eq!(millis(None, 5), Duration::from_millis(5));
        assert!(!flag(Some(Value::from(0)), true));
        assert!(flag(None, true));
        assert_eq!(required(Some(Value::from(3)), "url").expect_err("number").status(), StatusCode::BAD_REQUEST);
    }

    #[test]
    fn errors_have_the_statuses_the_client_expects() {
        let status = |e: BrowserError| ApiError::from(e).status();
        assert_eq!(status(BrowserError::NotInstalled { program: "chromium".into() }), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(status(BrowserError::Crashed("gone".into())), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(status(BrowserError::SelectorNotFound("#x".into())), StatusCode::NOT_FOUND);
        assert_eq!(status(BrowserError::Script("Error: boom".into())), StatusCode::BAD_REQUEST);
        assert_eq!(status(BrowserError::Timeout("t".into())), StatusCode::GATEWAY_TIMEOUT);
    }
}
