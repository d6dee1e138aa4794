//! The front door: the pipeline every route of every port runs behind.
//!
//! For each request, in order: authenticate (`credentials`: every
//! credential form, one parser), decide (one [`PolicyEngine::admit_as`]:
//! enabled, scopes, rate and concurrency in the governing endpoint's
//! buckets), bound the body (a declared size over the limit is answered 413
//! at once), hand the [`Grant`] to the handler, and write one access line,
//! one audit line (as the rule's `audit` asks) and the metrics. A refusal
//! is one [`Denial`], rendered in the port's own protocol (`render`).
//!
//! Routers attach it to each route with the route's [`Endpoint`]
//! ([`guarded`]), so it knows which rule applies without matching again.

mod body;
mod credentials;
mod render;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use abx_domain::policy::rules::AuditMode;
use abx_domain::policy::{Denial, Grant, Identity, Permit, PolicyEngine};
use abx_wire::api::Fault;
use abx_wire::endpoints::{Endpoint, Limit, Port};
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{header, HeaderMap, Method};
use axum::middleware::{from_fn_with_state, Next};
use axum::response::Response;
use axum::routing::MethodRouter;

pub use self::body::KeepAliveLayer;
use self::body::{Held, Hold};
pub(crate) use self::credentials::from_headers;
pub(crate) use self::render::connect_error;
pub use self::render::http_error;
use super::error::ErrorCode;
use super::extract::BodyLimit;
use super::AppState;

/// Default `max_request_bytes`: 10 MiB, as the reference.
pub const DEFAULT_MAX_REQUEST_BYTES: u64 = 10 * 1024 * 1024;

/// What the pipeline needs to know about the route it guards.
#[derive(Clone)]
pub struct RouteContext {
    /// Shared server state.
    pub app: AppState,
    /// The endpoint this route serves.
    pub endpoint: &'static Endpoint,
}

/// `route` (the handler of `endpoint`) behind the pipeline: the one way
/// every router of every port attaches a handler.
pub fn guarded<S>(route: MethodRouter<S>, app: &AppState, endpoint: &'static Endpoint) -> MethodRouter<S>
where
    S: Clone + Send + Sync + 'static,
{
    route.layer(from_fn_with_state(RouteContext { app: app.clone(), endpoint }, pipeline))
}

/// The middleware function attached to every endpoint route.
pub async fn pipeline(State(route): State<RouteContext>, mut req: Request, next: Next) -> Response {
    let started = Instant::now();
    let endpoint = route.endpoint;
    let method = req.method().clone();
    let read = req.extensions().get::<crate::metrics::ByteMeter>().cloned();
    let (grant, identity, refused, permit, response) = match gate(&route, &mut req).await {
        Ok((grant, permit)) => {
            let identity = Arc::clone(grant.identity_arc());
            let response = next.run(req).await;
            (Some(grant), Some(identity), None, permit, response)
        }
        Err(refusal) => {
            let refused = Refused::of(&refusal.denial);
            let response = render::render(endpoint, req.headers(), refusal.denial, refusal.close);
            (None, refusal.identity, Some(refused), None, response)
        }
    };
    let status = response.status().as_u16();
    let code = response.extensions().get::<ErrorCode>().map(|c| c.0.as_str());
    let identity_id = identity.as_ref().map_or("-", |i| i.id.as_str());
    let outcome = Outcome { status, code, grant: grant.as_ref(), refused: refused.as_ref() };
    record(&route.app, endpoint, identity_id, (method.as_str(), None), &outcome, started);
    // The slot is held, and the bytes counted, until the answer has been sent.
    let metrics = Arc::clone(&route.app.metrics);
    Held::wrap(response, Hold { _permit: permit, read, metrics, endpoint })
}

/// How a decided call ended, for its access and audit lines.
struct Outcome<'a> {
    status: u16,
    code: Option<&'a str>,
    grant: Option<&'a Grant>,
    /// Set when the door refused it (whatever the status its rendering has).
    refused: Option<&'a Refused>,
}

/// The access line, the audit line (as the rule's `audit` mode asks) and the
/// metrics of one decided call; `via` is the HTTP method, or the transport
/// and the tool of a call that is not an HTTP route.
fn record(
    app: &AppState,
    endpoint: &'static Endpoint,
    identity: &str,
    via: (&str, Option<&str>),
    outcome: &Outcome<'_>,
    started: Instant,
) {
    let Outcome { status, code, grant, refused } = *outcome;
    let elapsed = started.elapsed();
    app.metrics.answered(endpoint, status, elapsed.as_secs_f64());
    // To the microsecond: `0.373`, not `0.37349699999999997`.
    let elapsed_ms = elapsed.as_micros() as f64 / 1000.0;
    let (port, method, tool) = (endpoint.port.as_str(), via.0, via.1);
    if endpoint.auth_required {
        tracing::info!(target: "access", port, endpoint = endpoint.id, identity, method, tool, status, elapsed_ms);
    } else {
        tracing::debug!(target: "access", port, endpoint = endpoint.id, identity, method, tool, status, elapsed_ms);
    }
    // A refusal at the door is a denial whatever its rendering (a Connect stream answers 200).
    let decision = if refused.is_some() { "deny" } else { decision(status, code) };
    let mode = app.engine.rule(endpoint).audit;
    if !(mode == AuditMode::All || (mode == AuditMode::Deny && decision != "allow")) {
        return;
    }
    let code = code.or((status >= 400).then_some("error"));
    let paths = grant.map(Grant::paths_touched).unwrap_or_default();
    let paths = (!paths.is_empty()).then(|| serde_json::to_string(&paths).unwrap_or_default());
    let refused = refused.cloned().unwrap_or_default();
    tracing::info!(
        target: "audit",
        port,
        endpoint = endpoint.id,
        identity,
        method,
        tool,
        decision,
        status,
        code,
        rule = refused.rule.as_deref(),
        scope = refused.scope.as_deref(),
        paths = paths.as_deref(),
    );
}

/// A call that is not an HTTP route (an MCP tool call), admitted by the same
/// decision as a request to its endpoint and audited by the same lines.
pub struct Call {
    app: AppState,
    grant: Grant,
    via: (&'static str, &'static str),
    started: Instant,
    _permit: Option<Permit>,
}

/// Admits `identity`'s call of `endpoint` through `via` (the transport and
/// the tool): the endpoint's rule decides (enabled, scopes, rate and
/// concurrency in the governing endpoint's buckets). A refusal is audited
/// here, as the pipeline audits one at the door.
///
/// # Errors
/// The rule's [`Denial`].
pub fn admit_call(
    app: &AppState,
    endpoint: &'static Endpoint,
    identity: &Arc<Identity>,
    via: (&'static str, &'static str),
) -> Result<Call, Denial> {
    let started = Instant::now();
    match app.engine.admit(endpoint, Arc::clone(identity)) {
        Ok((grant, permit)) => Ok(Call { app: app.clone(), grant, via, started, _permit: permit }),
        Err(denial) => {
            let refused = Refused::of(&denial);
            let outcome =
                Outcome { status: denial.status(), code: Some(denial.code()), grant: None, refused: Some(&refused) };
            record(app, endpoint, &identity.id, (via.0, Some(via.1)), &outcome, started);
            Err(denial)
        }
    }
}

impl Call {
    /// What the rule granted: path guard, limits, parameters.
    pub fn grant(&self) -> &Grant {
        &self.grant
    }

    /// Writes the call's access and audit lines and metrics: `status` and
    /// `code` are what the same call over HTTP would have answered.
    pub fn finish(self, status: u16, code: Option<&str>) {
        let endpoint = self.grant.endpoint();
        let outcome = Outcome { status, code, grant: Some(&self.grant), refused: None };
        let identity = &self.grant.identity().id;
        record(&self.app, endpoint, identity, (self.via.0, Some(self.via.1)), &outcome, self.started);
    }
}

/// `allow` below 400; `deny` for a policy refusal (credentials, scope, a
/// disabled endpoint, a path or parameter rule, a size or rate limit);
/// `error` for any other failure.
fn decision(status: u16, code: Option<&str>) -> &'static str {
    match (status, code) {
        (..=399, _) => "allow",
        (401 | 403 | 413 | 429, _) | (_, Some("endpoint_disabled" | "ambiguous_credentials" | "auth_throttled")) => {
            "deny"
        }
        _ => "error",
    }
}

/// The rule or scope a refusal names, kept for the audit line.
#[derive(Debug, Clone, Default)]
struct Refused {
    rule: Option<String>,
    scope: Option<String>,
}

impl Refused {
    fn of(denial: &Denial) -> Self {
        match denial {
            Denial::EndpointDisabled { rule, .. } => Refused { rule: Some(rule.clone()), scope: None },
            Denial::MissingScope { scope, .. } => Refused { rule: None, scope: Some(scope.clone()) },
            _ => Refused::default(),
        }
    }
}

/// A request the gate refused.
struct Refusal {
    identity: Option<Arc<Identity>>,
    denial: Denial,
    /// Answer with `Connection: close` (the body is read on in the background, or not at all).
    close: bool,
}

impl Refusal {
    fn new(identity: Option<&Arc<Identity>>, denial: Denial) -> Self {
        Refusal { identity: identity.cloned(), denial, close: false }
    }
}

/// The peer's address, when the listener records it.
fn peer(req: &Request) -> Option<std::net::IpAddr> {
    req.extensions().get::<ConnectInfo<SocketAddr>>().map(|c| c.0.ip())
}

/// Whether `endpoint` answers without credentials on this server.
fn anonymous(app: &AppState, endpoint: &Endpoint) -> bool {
    !endpoint.auth_required || (endpoint.id == "metrics" && app.metrics_anonymous)
}

async fn gate(route: &RouteContext, req: &mut Request) -> Result<(Grant, Option<Permit>), Refusal> {
    let endpoint = route.endpoint;
    let engine: &Arc<PolicyEngine> = &route.app.engine;
    let (identity, user) = if !endpoint.auth_required {
        (engine.unauthenticated(), None)
    } else if anonymous(&route.app, endpoint) {
        // Configured open (`/metrics`): an anonymous caller with just what the rule asks.
        (Arc::new(Identity::new("anonymous", engine.rule(endpoint).scopes.iter().cloned())), None)
    } else {
        let caller = credentials::authenticate(engine, endpoint, req.headers(), req.uri(), peer(req))
            .map_err(|d| Refusal::new(None, d))?;
        (caller.identity, caller.user)
    };
    let (grant, permit) =
        engine.admit_as(endpoint, Arc::clone(&identity), user).map_err(|d| Refusal::new(Some(&identity), d))?;
    if matches!(endpoint.port, Port::Api | Port::Pty) && has_duplicate_keys(req.uri().query().unwrap_or_default()) {
        return Err(Refusal::new(Some(&identity), Denial::DuplicateParameter));
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
                let denial = Denial::new(Fault::InvalidContentLength, "Invalid Content-Length header");
                return Err(Refusal { close: true, ..Refusal::new(Some(&identity), denial) });
            }
            Ok(Some(size)) if size > limit => {
                // Answered at once; the body is read on in the background so the
                // client sees the answer, then the connection closes.
                let body = std::mem::take(req.body_mut());
                if !body::expects_continue(req.headers()) && size <= body::DRAIN_CAP {
                    tokio::spawn(body::drain(body, body::DRAIN_CAP, body::DRAIN_TIME));
                }
                let denial = Denial::PayloadTooLarge { size: Some(size), limit };
                return Err(Refusal { close: true, ..Refusal::new(Some(&identity), denial) });
            }
            Ok(_) => {
                req.extensions_mut().insert(BodyLimit(limit));
            }
        }
    }
    req.extensions_mut().insert(grant.clone());
    Ok((grant, permit))
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
