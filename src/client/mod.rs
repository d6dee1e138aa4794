//! The companion client: a typed async Rust client of the HTTP API.
//!
//! Every call names an endpoint id; its method and path come from the
//! endpoint table and its request and response types from `api`, so the
//! client cannot drift from the server.

mod code;
mod commands;
mod error;
pub mod files;
mod process;
mod pty;
pub mod sse;
mod system;

use std::time::Duration;

use reqwest::header::{HeaderMap, HeaderValue, AUTHORIZATION};
use serde::de::DeserializeOwned;
use serde::Serialize;

pub use self::code::{CodeClient, ExecutionStream};
pub use self::error::ClientError;
pub use self::pty::{pty_url, PtyConnection, PtyReceiver, PtySender};
use crate::api::{Capabilities, CheckRequest, Decision, ErrorBody, Health};
use crate::endpoints::{self, Method};

/// Builds a [`Client`].
#[derive(Debug, Clone)]
pub struct ClientBuilder {
    base_url: String,
    token: Option<String>,
    timeout: Option<Duration>,
}

impl ClientBuilder {
    /// Sends this token as `Authorization: Bearer` and `X-Access-Token`.
    pub fn token(mut self, token: Option<String>) -> Self {
        self.token = token.filter(|t| !t.is_empty());
        self
    }

    /// Bounds every request (none by default: streams may be long).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Builds the client.
    ///
    /// # Errors
    /// A token that is not a valid header value, or an HTTP client that cannot be built.
    pub fn build(self) -> Result<Client, ClientError> {
        let mut headers = HeaderMap::new();
        if let Some(token) = &self.token {
            let bearer = HeaderValue::from_str(&format!("Bearer {token}")).map_err(|_| ClientError::InvalidToken)?;
            let mut access = HeaderValue::from_str(token).map_err(|_| ClientError::InvalidToken)?;
            access.set_sensitive(true);
            headers.insert(AUTHORIZATION, bearer);
            headers.insert("x-access-token", access);
        }
        let mut http = reqwest::Client::builder().default_headers(headers).tcp_nodelay(true);
        if let Some(timeout) = self.timeout {
            http = http.timeout(timeout);
        }
        let http = http.build().map_err(ClientError::Transport)?;
        Ok(Client { base_url: self.base_url.trim_end_matches('/').to_string(), http, token: Token(self.token) })
    }
}

/// A client of one server.
#[derive(Debug, Clone)]
pub struct Client {
    base_url: String,
    http: reqwest::Client,
    token: Token,
}

/// The token, kept for the terminal WebSocket's handshake; never printed.
#[derive(Clone)]
struct Token(Option<String>);

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() { "Some(<redacted>)" } else { "None" })
    }
}

impl Client {
    /// The server's base URL, without a trailing slash.
    pub fn base_url(&self) -> &str {
        &self.base_url
    }

    /// A builder for the server at `base_url` (`http://127.0.0.1:9000`).
    pub fn builder(base_url: &str) -> ClientBuilder {
        ClientBuilder { base_url: base_url.to_string(), token: None, timeout: None }
    }

    /// `GET /health`: whether the server answers `ok`.
    ///
    /// # Errors
    /// The server cannot be reached.
    pub async fn health(&self) -> Result<bool, ClientError> {
        let health: Health = self.call("health", &[], &[], None::<&()>).await?;
        Ok(health.status == "ok")
    }

    /// `GET /capabilities`: the discovery document for this client's identity.
    ///
    /// # Errors
    /// Transport errors and error answers.
    pub async fn capabilities(&self) -> Result<Capabilities, ClientError> {
        self.call("capabilities", &[], &[], None::<&()>).await
    }

    /// `POST /capabilities/check`: the server's decision for a hypothetical call.
    ///
    /// # Errors
    /// Transport errors and error answers.
    pub async fn check(&self, request: &CheckRequest) -> Result<Decision, ClientError> {
        self.call("capabilities_check", &[], &[], Some(request)).await
    }

    /// The request for endpoint `id`: its method and path from the table,
    /// `{param}`s filled from `params` and the query from `query`.
    ///
    /// # Errors
    /// [`ClientError::UnknownEndpoint`] for an id the table does not know.
    pub fn request(
        &self,
        id: &str,
        params: &[(&str, &str)],
        query: &[(&str, String)],
    ) -> Result<reqwest::RequestBuilder, ClientError> {
        let endpoint = endpoints::find(id).ok_or_else(|| ClientError::UnknownEndpoint(id.to_string()))?;
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
        let mut builder = self.http.request(method, format!("{}{path}", self.base_url));
        if !query.is_empty() {
            builder = builder.query(query);
        }
        Ok(builder)
    }

    /// Calls endpoint `id` with an optional JSON body and decodes the JSON answer.
    ///
    /// # Errors
    /// Transport errors, error answers ([`ClientError::Api`]) and undecodable answers.
    pub async fn call<B, T>(
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
        let mut request = self.request(id, params, query)?;
        if let Some(body) = body {
            request = request.json(body);
        }
        let response = request.send().await.map_err(ClientError::Transport)?;
        decode(response).await
    }
}

/// Decodes a JSON answer, or its error body.
///
/// # Errors
/// [`ClientError::Api`] for 4xx and 5xx answers, [`ClientError::Protocol`] for bodies that are not the expected JSON.
pub async fn decode<T: DeserializeOwned>(response: reqwest::Response) -> Result<T, ClientError> {
    let status = response.status();
    let bytes = response.bytes().await.map_err(ClientError::Transport)?;
    if !status.is_success() {
        let body = serde_json::from_slice::<ErrorBody>(&bytes)
            .unwrap_or_else(|_| ErrorBody::new(String::from_utf8_lossy(&bytes).into_owned(), "ProtocolError"));
        return Err(ClientError::Api { status: status.as_u16(), body: Box::new(body) });
    }
    serde_json::from_slice(&bytes).map_err(|e| ClientError::Protocol(format!("unexpected answer (HTTP {status}): {e}")))
}
