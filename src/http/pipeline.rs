//! The request pipeline every endpoint runs behind: authenticate, admit
//! (one policy decision), bound the body, run the handler, log and audit.
//!
//! It is attached to each route by `http::router` with the route's
//! [`Endpoint`], so it knows which rule applies without matching again.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, Method};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http_body::{Body as HttpBody, Frame, SizeHint};
use http_body_util::BodyExt;

use super::error::{ApiError, ErrorCode};
use super::extract::BodyLimit;
use super::AppState;
use crate::endpoints::{Endpoint, Limit};
use crate::policy::rules::AuditMode;
use crate::policy::{Credentials, Denial, Grant, Identity, Permit};

/// Default `max_request_bytes`: 10 MiB, as the reference.
pub const DEFAULT_MAX_REQUEST_BYTES: u64 = 10 * 1024 * 1024;

/// An oversized body is read and discarded up to this many bytes so the
/// client sees the 413 instead of a reset connection.
const DRAIN_CAP: u64 = 256 * 1024 * 1024;
const DRAIN_TIMEOUT: Duration = Duration::from_secs(30);

/// What the pipeline needs to know about the route it guards.
#[derive(Clone)]
pub struct RouteContext {
    /// Shared server state.
    pub app: AppState,
    /// The endpoint this route serves.
    pub endpoint: &'static Endpoint,
}

/// The middleware function attached to every endpoint route.
pub async fn pipeline(State(route): State<RouteContext>, mut req: Request, next: Next) -> Response {
    let started = Instant::now();
    let endpoint = route.endpoint;
    let method = req.method().clone();
    let (audit, response) = match gate(&route, &mut req).await {
        Ok((grant, permit)) => {
            let response = next.run(req).await;
            (Audit { grant: Some(grant), ..Audit::default() }, hold_permit(response, permit))
        }
        Err(refusal) => (refusal.audit, refusal.error.into_response()),
    };
    let status = response.status().as_u16();
    let code = response.extensions().get::<ErrorCode>().map(|c| c.0.as_str());
    let identity_id = match (&audit.grant, &audit.identity) {
        (Some(grant), _) => grant.identity().id.as_str(),
        (None, Some(identity)) => identity.id.as_str(),
        (None, None) => "-",
    };
    let elapsed_ms = started.elapsed().as_secs_f64() * 1000.0;
    if endpoint.id == "health" {
        tracing::debug!(target: "access", endpoint = endpoint.id, identity = identity_id, %method, status, elapsed_ms);
    } else {
        tracing::info!(target: "access", endpoint = endpoint.id, identity = identity_id, %method, status, elapsed_ms);
    }
    let decision = decision(status, code);
    let mode = route.app.engine.rule(endpoint).audit;
    if mode == AuditMode::All || (mode == AuditMode::Deny && decision != "allow") {
        let code = code.or((status >= 400).then_some("error"));
        let paths = audit.grant.as_ref().map(Grant::paths_touched).unwrap_or_default();
        let paths = (!paths.is_empty()).then(|| serde_json::to_string(&paths).unwrap_or_default());
        tracing::info!(
            target: "audit",
            endpoint = endpoint.id,
            identity = identity_id,
            %method,
            decision,
            status,
            code,
            rule = audit.rule.as_deref(),
            scope = audit.scope.as_deref(),
            paths = paths.as_deref(),
        );
    }
    response
}

/// `allow` below 400; `deny` for a policy refusal (credentials, scope, a
/// disabled endpoint, a path or parameter rule, a size or rate limit);
/// `error` for any other failure.
fn decision(status: u16, code: Option<&str>) -> &'static str {
    match (status, code) {
        (..=399, _) => "allow",
        (401 | 403 | 413 | 429, _) | (_, Some("endpoint_disabled" | "ambiguous_credentials")) => "deny",
        _ => "error",
    }
}

/// What the audit line says about a request besides its status and code.
#[derive(Default)]
struct Audit {
    identity: Option<Arc<Identity>>,
    grant: Option<Grant>,
    rule: Option<String>,
    scope: Option<String>,
}

/// A request the gate refused, and what to audit about it.
struct Refusal {
    audit: Audit,
    error: ApiError,
}

impl Refusal {
    fn new(identity: Option<&Arc<Identity>>, error: ApiError) -> Self {
        Refusal { audit: Audit { identity: identity.cloned(), ..Audit::default() }, error }
    }

    /// A policy denial of an authenticated caller; the body names the endpoint.
    fn denied(identity: &Arc<Identity>, denial: Denial, endpoint: &str) -> Self {
        let (rule, scope) = match &denial {
            Denial::EndpointDisabled { rule, .. } => (Some(rule.clone()), None),
            Denial::MissingScope { scope, .. } => (None, Some(scope.clone())),
            _ => (None, None),
        };
        let audit = Audit { identity: Some(Arc::clone(identity)), rule, scope, ..Audit::default() };
        Refusal { audit, error: ApiError::from(denial).with_endpoint(endpoint) }
    }
}

async fn gate(route: &RouteContext, req: &mut Request) -> Result<(Grant, Option<Permit>), Refusal> {
    let endpoint = route.endpoint;
    let engine = &route.app.engine;
    let identity = if endpoint.auth_required {
        engine.authenticate(&credentials(req.headers())).map_err(|d| Refusal::new(None, ApiError::from(d)))?
    } else {
        engine.unauthenticated()
    };
    let (grant, permit) =
        engine.admit(endpoint, Arc::clone(&identity)).map_err(|d| Refusal::denied(&identity, d, endpoint.id))?;
    if has_duplicate_keys(req.uri().query().unwrap_or_default()) {
        return Err(Refusal::denied(&identity, Denial::DuplicateParameter, endpoint.id));
    }
    if matches!(*req.method(), Method::POST | Method::PUT | Method::DELETE) {
        // Streamed bodies go to disk as they arrive: only a policy's explicit limit applies here.
        let limit = match grant.limit(Limit::MaxRequestBytes) {
            Some(value) => value.as_u64(),
            None if endpoint.streamed_body => u64::MAX,
            None => DEFAULT_MAX_REQUEST_BYTES,
        };
        match content_length(req.headers()) {
            Err(()) => {
                return Err(Refusal::new(Some(&identity), ApiError::bad_request("Invalid Content-Length header")))
            }
            Ok(Some(size)) if size > limit => {
                drain(std::mem::take(req.body_mut()), size).await;
                let err = ApiError::payload_too_large(Some(size), limit).with_endpoint(endpoint.id).closing();
                return Err(Refusal::new(Some(&identity), err));
            }
            Ok(_) => {
                req.extensions_mut().insert(BodyLimit(limit));
            }
        }
    }
    req.extensions_mut().insert(grant.clone());
    Ok((grant, permit))
}

/// The credential headers of a request (both ports read them alike).
pub(crate) fn credentials(headers: &HeaderMap) -> Credentials<'_> {
    let values = |name| headers.get_all(name).iter().filter_map(|v| v.to_str().ok()).collect();
    Credentials { authorization: values(header::AUTHORIZATION.as_str()), access_tokens: values("x-access-token") }
}

fn has_duplicate_keys(query: &str) -> bool {
    let mut keys: Vec<_> = form_urlencoded::parse(query.as_bytes()).map(|(k, _)| k).collect();
    let total = keys.len();
    keys.sort();
    keys.dedup();
    keys.len() != total
}

/// The declared body size; `Err` when the header is malformed or repeated with different values.
fn content_length(headers: &HeaderMap) -> Result<Option<u64>, ()> {
    let mut found = None;
    for value in headers.get_all(header::CONTENT_LENGTH) {
        let text = value.to_str().map_err(|_| ())?.trim();
        if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
            return Err(());
        }
        let n: u64 = text.parse().map_err(|_| ())?;
        if found.is_some_and(|f| f != n) {
            return Err(());
        }
        found = Some(n);
    }
    Ok(found)
}

/// Reads and discards a body the server refuses, within a byte and time budget.
async fn drain(mut body: Body, size: u64) {
    if size > DRAIN_CAP {
        return;
    }
    let _ = tokio::time::timeout(DRAIN_TIMEOUT, async { while let Some(Ok(_)) = body.frame().await {} }).await;
}

/// Keeps the concurrency slot until the response body has been sent.
pub(crate) fn hold_permit(response: Response, permit: Option<Permit>) -> Response {
    match permit {
        None => response,
        Some(permit) => response.map(|body| Body::new(PermitBody { inner: body, _permit: permit })),
    }
}

struct PermitBody {
    inner: Body,
    _permit: Permit,
}

impl HttpBody for PermitBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    #[test]
    fn decisions_separate_refusals_from_failures() {
        assert_eq!(decision(200, None), "allow");
        assert_eq!(decision(401, Some("unauthorized")), "deny");
        assert_eq!(decision(403, Some("path_denied")), "deny");
        assert_eq!(decision(404, Some("endpoint_disabled")), "deny");
        assert_eq!(decision(413, Some("payload_too_large")), "deny");
        assert_eq!(decision(429, Some("rate_limited")), "deny");
        assert_eq!(decision(404, Some("not_found")), "error");
        assert_eq!(decision(500, None), "error");
    }

    #[test]
    fn duplicate_query_keys_are_found() {
        assert!(has_duplicate_keys("a=1&a=2"));
        assert!(has_duplicate_keys("a=1&b=2&a"));
        assert!(!has_duplicate_keys("a=1&b=2"));
        assert!(!has_duplicate_keys(""));
    }

    #[test]
    fn content_length_must_be_one_number() {
        let mut headers = HeaderMap::new();
        assert_eq!(content_length(&headers), Ok(None));
        headers.insert(header::CONTENT_LENGTH, HeaderValue::from_static("12"));
        assert_eq!(content_length(&headers), Ok(Some(12)));
        headers.append(header::CONTENT_LENGTH, HeaderValue::from_static("13"));
        assert_eq!(content_length(&headers), Err(()));
        headers.insert(header::CONTENT_LENGTH, HeaderValue::from_static("-1"));
        assert_eq!(content_length(&headers), Err(()));
    }
}
