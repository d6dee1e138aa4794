//! How every call of every plane travels: one connection pool, the
//! credentials, the per-call timeout and the overall deadline, retries, and
//! error answers turned into [`ClientError`]s.
//!
//! [`Client`](super::Client), [`CodeClient`](super::CodeClient) and
//! [`EnvdClient`](super::EnvdClient) each hold a [`Transport`] to their port;
//! clones share the pool (`reqwest::Client` is a handle to it). A call names
//! an endpoint id: its port, method and path come from the endpoint table,
//! and whether repeating it is safe from its method and scopes.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use abx_wire::api::{ErrorBody, ErrorCode};
use abx_wire::endpoints::{self, Endpoint, Method, Port};
use bytes::Bytes;
use futures_util::stream::BoxStream;
use futures_util::{Stream, StreamExt};
use reqwest::header::{HeaderMap, HeaderValue, AUTHORIZATION, CONTENT_TYPE, RETRY_AFTER};
use reqwest::{RequestBuilder, Response, StatusCode};
use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio::time::Instant;

use super::{ClientError, RetryPolicy};

/// Error bodies longer than this are cut (they are a line of JSON or text).
const MAX_ERROR_BODY: usize = 64 * 1024;

/// The credentials, as header values ready to send; never printed.
#[derive(Clone)]
pub(crate) struct Credentials {
    bearer: HeaderValue,
    access: HeaderValue,
}

impl Credentials {
    /// The headers for `token`.
    pub(crate) fn new(token: &str) -> Result<Self, ClientError> {
        let mut bearer = HeaderValue::from_str(&format!("Bearer {token}")).map_err(|_| ClientError::InvalidToken)?;
        let mut access = HeaderValue::from_str(token).map_err(|_| ClientError::InvalidToken)?;
        bearer.set_sensitive(true);
        access.set_sensitive(true);
        Ok(Credentials { bearer, access })
    }

    /// Adds `Authorization: Bearer` and `X-Access-Token` (the daemon accepts either).
    pub(crate) fn apply(&self, headers: &mut HeaderMap) {
        headers.insert(AUTHORIZATION, self.bearer.clone());
        headers.insert("x-access-token", self.access.clone());
    }
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<redacted>")
    }
}

/// A port of one server, and how calls to it are made.
#[derive(Debug, Clone)]
pub(crate) struct Transport {
    pub(crate) http: reqwest::Client,
    pub(crate) port: Port,
    pub(crate) base_url: Arc<str>,
    pub(crate) credentials: Option<Arc<Credentials>>,
    pub(crate) timeout: Option<Duration>,
    pub(crate) deadline: Option<Instant>,
    pub(crate) retry: RetryPolicy,
}

impl Transport {
    /// The same settings and pool, for `port` at `base_url`.
    pub(crate) fn at(&self, port: Port, base_url: &str) -> Transport {
        Transport { port, base_url: base_url.trim_end_matches('/').into(), ..self.clone() }
    }

    /// The endpoint `id` of this transport's port.
    ///
    /// # Errors
    /// [`ClientError::UnknownEndpoint`] for an id the table does not know on this port.
    pub(crate) fn endpoint(&self, id: &str) -> Result<&'static Endpoint, ClientError> {
        endpoints::find(id).filter(|e| e.port == self.port).ok_or_else(|| ClientError::UnknownEndpoint(id.to_string()))
    }

    /// The request for `endpoint`, with the credentials: `{param}`s filled
    /// from `params`, the query from `query`.
    pub(crate) fn build(
        &self,
        endpoint: &Endpoint,
        params: &[(&str, &str)],
        query: &[(&str, String)],
    ) -> RequestBuilder {
        let mut path = endpoint.path.to_string();
        for (name, value) in params {
            let encoded: String = form_urlencoded::byte_serialize(value.as_bytes()).collect();
            path = path.replace(&format!("{{{name}}}"), &encoded);
        }
        let method = match endpoint.method {
            Method::Get | Method::Ws => reqwest::Method::GET,
            Method::Post => reqwest::Method::POST,
            Method::Put => reqwest::Method::PUT,
            Method::Delete => reqwest::Method::DELETE,
            Method::Head => reqwest::Method::HEAD,
        };
        let mut headers = HeaderMap::new();
        if let Some(credentials) = &self.credentials {
            credentials.apply(&mut headers);
        }
        let request = self.http.request(method, format!("{}{path}", self.base_url)).headers(headers);
        if query.is_empty() {
            request
        } else {
            request.query(query)
        }
    }

    /// Calls endpoint `id` with an optional JSON body and decodes its JSON
    /// answer, within the budget, retried where safe.
    ///
    /// # Errors
    /// Transport errors, error answers, timeouts and undecodable answers.
    pub(crate) async fn call<B, T>(
        &self,
        id: &str,
        params: &[(&str, &str)],
        query: &[(&str, String)],
        body: Option<&B>,
    ) -> Result<T, ClientError>
    where
        B: Serialize + ?Sized,
        T: DeserializeOwned,
    {
        let endpoint = self.endpoint(id)?;
        let body = json_body(body)?;
        let build = || with_body(self.build(endpoint, params, query), body.as_ref());
        self.bounded(async { decode(self.send(idempotent(endpoint), build).await?).await }).await
    }

    /// Calls endpoint `id` and reads nothing of its successful answer.
    ///
    /// # Errors
    /// As [`Transport::call`].
    pub(crate) async fn call_empty<B: Serialize + ?Sized>(
        &self,
        id: &str,
        params: &[(&str, &str)],
        body: Option<&B>,
    ) -> Result<reqwest::StatusCode, ClientError> {
        let endpoint = self.endpoint(id)?;
        let body = json_body(body)?;
        let build = || with_body(self.build(endpoint, params, &[]), body.as_ref());
        self.bounded(async { self.send(idempotent(endpoint), build).await.map(|r| r.status()) }).await
    }

    /// Starts a call of endpoint `id` whose answer is a stream: the
    /// per-call timeout bounds its start (the answer's head); the deadline
    /// bounds the stream too (see [`Transport::until_deadline`]).
    ///
    /// # Errors
    /// As [`Transport::send`], and [`ClientError::Timeout`].
    pub(crate) async fn open<B: Serialize + ?Sized>(
        &self,
        id: &str,
        params: &[(&str, &str)],
        query: &[(&str, String)],
        body: Option<&B>,
    ) -> Result<Response, ClientError> {
        let endpoint = self.endpoint(id)?;
        let body = json_body(body)?;
        let build = || with_body(self.build(endpoint, params, query), body.as_ref());
        self.bounded(self.send(idempotent(endpoint), build)).await
    }

    /// The time one call may take: the per-call timeout, cut by the deadline.
    ///
    /// # Errors
    /// [`ClientError::Timeout`] once the deadline has passed.
    fn budget(&self) -> Result<Option<Duration>, ClientError> {
        let left = self.deadline.map(|d| d.saturating_duration_since(Instant::now()));
        if left == Some(Duration::ZERO) {
            return Err(ClientError::Timeout(Duration::ZERO));
        }
        Ok(match (self.timeout, left) {
            (Some(t), Some(l)) => Some(t.min(l)),
            (t, l) => t.or(l),
        })
    }

    /// Runs `call` within the call's budget.
    ///
    /// # Errors
    /// [`ClientError::Timeout`] when the budget runs out first, and `call`'s errors.
    pub(crate) async fn bounded<T>(
        &self,
        call: impl Future<Output = Result<T, ClientError>>,
    ) -> Result<T, ClientError> {
        match self.budget()? {
            None => call.await,
            Some(budget) => tokio::time::timeout(budget, call).await.map_err(|_| ClientError::Timeout(budget))?,
        }
    }

    /// Sends the request `build` makes (once per attempt), retrying per the
    /// policy; returns a successful response. Not bounded: callers bound
    /// the whole call, the reading of the answer included.
    ///
    /// # Errors
    /// The last attempt's transport error or error answer.
    pub(crate) async fn send(
        &self,
        idempotent: bool,
        build: impl Fn() -> RequestBuilder,
    ) -> Result<Response, ClientError> {
        let mut retry = 0;
        loop {
            let outcome = match build().send().await {
                Ok(response) => checked(response).await,
                Err(e) => Err(ClientError::Transport(e)),
            };
            let err = match outcome {
                Ok(response) => return Ok(response),
                Err(e) => e,
            };
            let wait = if may_retry(&err, idempotent) { self.retry.backoff(retry, err.retry_after()) } else { None };
            let fits = |wait: Duration| self.deadline.is_none_or(|d| Instant::now() + wait < d);
            match wait {
                Some(wait) if fits(wait) => tokio::time::sleep(wait).await,
                _ => return Err(err),
            }
            retry += 1;
        }
    }

    /// `stream`, ended by a [`ClientError::Timeout`] item when the deadline passes.
    pub(crate) fn until_deadline<S, T>(&self, stream: S) -> BoxStream<'static, Result<T, ClientError>>
    where
        S: Stream<Item = Result<T, ClientError>> + Send + 'static,
        T: Send + 'static,
    {
        let deadline = self.deadline;
        futures_util::stream::unfold((Box::pin(stream), false), move |(mut stream, over)| async move {
            if over {
                return None;
            }
            let next = match deadline {
                None => stream.next().await,
                Some(deadline) => match tokio::time::timeout_at(deadline, stream.next()).await {
                    Ok(next) => next,
                    Err(_) => return Some((Err(ClientError::Timeout(Duration::ZERO)), (stream, true))),
                },
            };
            next.map(|item| (item, (stream, false)))
        })
        .boxed()
    }
}

/// `body` as JSON, serialised once (re-sent as it is on retries).
fn json_body<B: Serialize + ?Sized>(body: Option<&B>) -> Result<Option<Bytes>, ClientError> {
    body.map(|b| serde_json::to_vec(b).map(Bytes::from))
        .transpose()
        .map_err(|e| ClientError::Protocol(format!("cannot encode the request: {e}")))
}

fn with_body(request: RequestBuilder, body: Option<&Bytes>) -> RequestBuilder {
    match body {
        Some(body) => request.header(CONTENT_TYPE, "application/json").body(body.clone()),
        None => request,
    }
}

/// Whether repeating a call of `endpoint` is harmless: reads (`GET`,
/// `HEAD`) and calls whose every scope is a `:read` one (`files_search`,
/// `capabilities_check`, `files_archive`).
pub(crate) fn idempotent(endpoint: &Endpoint) -> bool {
    matches!(endpoint.method, Method::Get | Method::Head)
        || (!endpoint.scopes.is_empty() && endpoint.scopes.iter().all(|s| s.ends_with(":read")))
}

/// Whether `err` may be retried: connection refused (nothing was sent) and
/// load shedding (the admission pipeline's 429s, the listener's 503
/// `connection_limit`: the handler never ran) for any call; transport failures and 502/503/504 for idempotent calls only.
/// Never `auth_throttled`: it follows failed authentications, which the
/// same credentials would repeat.
fn may_retry(err: &ClientError, idempotent: bool) -> bool {
    match err {
        ClientError::Transport(e) => e.is_connect() || idempotent,
        ClientError::Api { code: Some(ErrorCode::AuthThrottled), .. } => false,
        ClientError::Api { code: Some(code), status: 429 | 503, .. } if code.is_rate_limit() => true,
        ClientError::Api { status, .. } => idempotent && matches!(status, 429 | 502 | 503 | 504),
        _ => false,
    }
}

/// The response when it is a success; otherwise its error answer.
///
/// # Errors
/// [`ClientError::Api`] for 4xx and 5xx answers.
pub(crate) async fn checked(response: Response) -> Result<Response, ClientError> {
    if response.status().is_success() {
        return Ok(response);
    }
    Err(error_answer(response).await)
}

/// An error answer as a [`ClientError`]: the daemon's JSON error body, an
/// envd `{code, message}` body, or plain text (the code-interpreter port).
pub(crate) async fn error_answer(mut response: Response) -> ClientError {
    let status = response.status();
    let hinted = response.headers().get(RETRY_AFTER).and_then(|v| v.to_str().ok()?.trim().parse::<u64>().ok());
    let mut bytes = Vec::new();
    while let Ok(Some(chunk)) = response.chunk().await {
        bytes.extend_from_slice(&chunk[..chunk.len().min(MAX_ERROR_BODY - bytes.len())]);
        if bytes.len() >= MAX_ERROR_BODY {
            break;
        }
    }
    let mut body = error_body(status, &bytes);
    if body.retry_after.is_none() {
        body.retry_after = hinted;
    }
    ClientError::api(status.as_u16(), body)
}

/// The other ports' error bodies: envd's `{code, message}` and the code
/// port's validation errors, `{detail: [{loc, msg, ...}]}`.
#[derive(serde::Deserialize)]
#[serde(untagged)]
enum OtherBody {
    Envd { message: String },
    Detail { detail: Vec<DetailItem> },
}

#[derive(serde::Deserialize)]
struct DetailItem {
    msg: String,
    #[serde(default)]
    loc: Vec<serde_json::Value>,
}

/// The error body of an answer with `status` and `bytes`.
fn error_body(status: StatusCode, bytes: &[u8]) -> ErrorBody {
    if let Ok(body) = serde_json::from_slice::<ErrorBody>(bytes) {
        return body;
    }
    let text = match serde_json::from_slice::<OtherBody>(bytes) {
        Ok(OtherBody::Envd { message }) => message,
        Ok(OtherBody::Detail { detail }) => detail
            .iter()
            .map(|d| {
                let at: Vec<String> = d.loc.iter().map(|l| l.as_str().map_or(l.to_string(), str::to_string)).collect();
                format!("{}: {}", at.join("."), d.msg)
            })
            .collect::<Vec<_>>()
            .join("; "),
        Err(_) => String::from_utf8_lossy(bytes).trim().to_string(),
    };
    let text = if text.is_empty() { format!("HTTP {status}") } else { text };
    let error_type = match status {
        StatusCode::UNAUTHORIZED => "AuthError",
        StatusCode::FORBIDDEN => "PolicyDenied",
        StatusCode::NOT_FOUND => "NotFoundError",
        StatusCode::BAD_REQUEST | StatusCode::UNPROCESSABLE_ENTITY => "ValueError",
        _ => "HTTPError",
    };
    ErrorBody::new(text, error_type)
}

/// Decodes a successful JSON answer.
///
/// # Errors
/// [`ClientError::Protocol`] for a body that is not the expected JSON.
pub(crate) async fn decode<T: DeserializeOwned>(response: Response) -> Result<T, ClientError> {
    let status = response.status();
    let bytes = response.bytes().await.map_err(ClientError::Transport)?;
    let bytes: &[u8] = if bytes.is_empty() { b"null" } else { &bytes };
    serde_json::from_slice(bytes).map_err(|e| ClientError::Protocol(format!("unexpected answer (HTTP {status}): {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_bodies_of_every_port_become_typed_errors() {
        let json = br#"{"error":"off","type":"EndpointDisabled","code":"endpoint_disabled","rule":"policy:x"}"#;
        let body = error_body(StatusCode::NOT_FOUND, json);
        assert_eq!((body.error.as_str(), body.rule.as_deref()), ("off", Some("policy:x")));
        let envd = error_body(StatusCode::NOT_FOUND, br#"{"code":404,"message":"path not found"}"#);
        assert_eq!((envd.error.as_str(), envd.error_type.as_str()), ("path not found", "NotFoundError"));
        let text = error_body(StatusCode::BAD_REQUEST, b"context_id and language are exclusive\n");
        assert_eq!(
            (text.error.as_str(), text.error_type.as_str()),
            ("context_id and language are exclusive", "ValueError")
        );
        assert_eq!(error_body(StatusCode::BAD_GATEWAY, b"").error, "HTTP 502 Bad Gateway");
        let detail = br#"{"detail":[{"type":"missing","loc":["body","code"],"msg":"Field required","input":{}}]}"#;
        let invalid = error_body(StatusCode::UNPROCESSABLE_ENTITY, detail);
        assert_eq!((invalid.error.as_str(), invalid.error_type.as_str()), ("body.code: Field required", "ValueError"));
    }

    #[test]
    fn only_calls_that_are_safe_to_repeat_are_retried() {
        let answer = |status, code: &str| ClientError::api(status, ErrorBody::new("x", "X").with_code(code));
        assert!(may_retry(&answer(429, "rate_limited"), false), "shed before any handler ran");
        assert!(may_retry(&answer(503, "connection_limit"), false), "closed unread");
        assert!(!may_retry(&answer(429, "process_limit"), false));
        assert!(!may_retry(&answer(429, "auth_throttled"), true), "the credentials failed; they would again");
        assert!(may_retry(&answer(503, "internal"), true));
        assert!(!may_retry(&answer(503, "internal"), false));
        assert!(!may_retry(&answer(500, "internal"), true));
        assert!(!may_retry(&ClientError::Timeout(Duration::ZERO), true));
    }

    #[test]
    fn reads_are_idempotent_and_writes_are_not() {
        let of = |id| idempotent(endpoints::find(id).expect("known"));
        assert!(of("files_stat") && of("files_search") && of("capabilities_check") && of("process_output"));
        assert!(of("code_contexts_list") && of("envd_envs") && of("envd_health"));
        assert!(!of("shell") && !of("files_upload_stream") && !of("files_delete") && !of("process_signal"));
        assert!(!of("env_set") && !of("run_command") && !of("pty_create_session") && !of("code_execute"));
    }

    #[tokio::test]
    async fn a_passed_deadline_fails_at_once() {
        let transport = Transport {
            http: reqwest::Client::new(),
            port: Port::Api,
            base_url: "http://127.0.0.1:9".into(),
            credentials: None,
            timeout: Some(Duration::from_secs(60)),
            deadline: Some(Instant::now()),
            retry: RetryPolicy::default(),
        };
        let err = transport.bounded(async { Ok(()) }).await.expect_err("deadline passed");
        assert!(matches!(err, ClientError::Timeout(_)));
    }
}
