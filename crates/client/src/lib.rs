//! The companion client: a typed async Rust client of the daemon, for an
//! orchestrator that drives sandboxes from outside.
//!
//! A crate of its own on the wire crate ([`abx_wire`]) alone: an
//! orchestrator that depends on it compiles nothing of the daemon
//! (`docs/client.md`).
//!
//! - [`Client`]: the native API (port 9000): files, processes, terminals,
//!   system, registered commands, one-shot code runs and git, the browser. Every call
//!   names an endpoint id; its method and path come from the endpoint table
//!   and its request and response types from `api`, so the client cannot
//!   drift from the server.
//! - [`CodeClient`]: the code-interpreter protocol (port 49999): contexts,
//!   and executions streamed line by line with rich results (charts).
//! - [`EnvdClient`]: envd's plain HTTP calls (port 49983) an orchestrator
//!   makes: readiness, `/init`, the variables `/init` set, and metrics.
//!
//! What every call shares:
//! - **One connection pool**: a client and every clone of it, and the
//!   code-interpreter and envd clients made from it, reuse the same
//!   connections; [`ClientBuilder::http_client`] shares one pool between
//!   the clients of many sandboxes.
//! - **Timeouts**: a per-call [`timeout`](ClientBuilder::timeout) (the
//!   whole call, retries included; for a stream, until it starts) and an
//!   overall [`deadline`](Client::with_deadline) that bounds every call and
//!   stream made through a handle, for a step made of many calls.
//! - **Retries** with exponential backoff and jitter, only where repeating
//!   is safe ([`RetryPolicy`]).
//! - **Typed errors**: [`ClientError`] keeps the status and the server's
//!   [`ErrorCode`], matchable variants mirroring the daemon's codes.
//! - **Cancellation**: dropping a call's future abandons it; dropping a
//!   stream closes its connection, and the daemon stops that work
//!   (`/shell/stream` kills the command, `/execute` interrupts the code, a
//!   watch ends). Explicit stops: [`Client::kill`], [`Client::signal`],
//!   [`Client::pty_close`], [`CodeClient::restart_context`].
//!
//! ```no_run
//! use std::time::Duration;
//! use abx_wire::api::process::ExecRequest;
//! use abx_client::{Client, ClientError};
//!
//! # async fn demo() -> Result<(), ClientError> {
//! let client = Client::builder("http://127.0.0.1:9000")
//!     .token(Some("secret"))
//!     .timeout(Duration::from_secs(30))
//!     .build()?;
//! client.upload("hello.txt", "hi\n".into()).await?;
//! let run = client.shell(&ExecRequest::new("cat hello.txt")).await?;
//! assert_eq!(run.stdout, "hi\n");
//! # Ok(()) }
//! ```

mod browser;
mod code;
mod commands;
mod envd;
mod error;
pub mod files;
mod interpreter;
mod process;
mod pty;
mod retry;
pub mod sse;
mod system;
mod transfer;
mod transport;

use std::sync::Arc;
use std::time::Duration;

pub use abx_wire::api::ErrorCode;
use abx_wire::api::{Capabilities, CheckRequest, Decision, Health};
use abx_wire::endpoints::Port;
use serde::de::DeserializeOwned;
use serde::Serialize;

pub use self::envd::EnvdClient;
pub use self::error::ClientError;
pub use self::interpreter::{CodeClient, Execution, ExecutionStream};
pub use self::pty::{pty_url, PtyConnection, PtyReceiver, PtySender};
pub use self::retry::RetryPolicy;
use self::transport::{Credentials, Transport};

/// Builds a [`Client`].
///
/// ```
/// use std::time::Duration;
/// use abx_client::{Client, RetryPolicy};
///
/// let client = Client::builder("http://10.0.0.7:9000")
///     .token(Some("secret"))
///     .timeout(Duration::from_secs(60))
///     .connect_timeout(Duration::from_secs(3))
///     .retry(RetryPolicy::default())
///     .build()?;
/// assert_eq!(client.base_url(), "http://10.0.0.7:9000");
/// # Ok::<(), abx_client::ClientError>(())
/// ```
#[derive(Debug, Clone)]
pub struct ClientBuilder {
    base_url: String,
    token: Option<String>,
    timeout: Option<Duration>,
    connect_timeout: Duration,
    retry: RetryPolicy,
    http: Option<reqwest::Client>,
}

impl ClientBuilder {
    /// Sends this token (as `Authorization: Bearer` and `X-Access-Token`);
    /// `None` or an empty token sends none.
    ///
    /// ```
    /// use abx_client::Client;
    ///
    /// let from_env: Option<String> = std::env::var("ABX_SERVER_TOKEN").ok();
    /// let client = Client::builder("http://127.0.0.1:9000").token(from_env).build()?;
    /// # let _ = client;
    /// # Ok::<(), abx_client::ClientError>(())
    /// ```
    pub fn token<T: Into<String>>(mut self, token: Option<T>) -> Self {
        self.token = token.map(Into::into).filter(|t| !t.is_empty());
        self
    }

    /// Bounds every call: from sending it to reading its whole answer,
    /// retries included; a streaming call until its stream starts. None by
    /// default; [`Client::with_timeout`] changes it for some calls.
    ///
    /// ```
    /// use std::time::Duration;
    /// use abx_client::Client;
    ///
    /// let client = Client::builder("http://127.0.0.1:9000").timeout(Duration::from_secs(30)).build()?;
    /// # let _ = client;
    /// # Ok::<(), abx_client::ClientError>(())
    /// ```
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Bounds opening a connection (10 s by default); a refused or timed-out
    /// connection is retried per the [`RetryPolicy`].
    ///
    /// ```
    /// use std::time::Duration;
    /// use abx_client::Client;
    ///
    /// let client = Client::builder("http://127.0.0.1:9000").connect_timeout(Duration::from_secs(2)).build()?;
    /// # let _ = client;
    /// # Ok::<(), abx_client::ClientError>(())
    /// ```
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// How failed calls are retried ([`RetryPolicy::default`] unless set).
    ///
    /// ```
    /// use abx_client::{Client, RetryPolicy};
    ///
    /// let client = Client::builder("http://127.0.0.1:9000").retry(RetryPolicy::NEVER).build()?;
    /// # let _ = client;
    /// # Ok::<(), abx_client::ClientError>(())
    /// ```
    pub fn retry(mut self, retry: RetryPolicy) -> Self {
        self.retry = retry;
        self
    }

    /// Uses this HTTP client, and its connection pool, instead of a new one:
    /// an orchestrator of many sandboxes shares one pool between their
    /// clients. The builder's connect timeout does not apply to it.
    ///
    /// ```
    /// use abx_client::Client;
    ///
    /// let pool = reqwest::Client::new();
    /// let a = Client::builder("http://10.0.0.7:9000").http_client(pool.clone()).build()?;
    /// let b = Client::builder("http://10.0.0.8:9000").http_client(pool).build()?;
    /// # let _ = (a, b);
    /// # Ok::<(), abx_client::ClientError>(())
    /// ```
    pub fn http_client(mut self, http: reqwest::Client) -> Self {
        self.http = Some(http);
        self
    }

    /// Builds the client.
    ///
    /// # Errors
    /// A token that is not a valid header value, or an HTTP client that cannot be built.
    ///
    /// ```
    /// use abx_client::{Client, ClientError};
    ///
    /// let refused = Client::builder("http://127.0.0.1:9000").token(Some("line\nbreak")).build();
    /// assert!(matches!(refused, Err(ClientError::InvalidToken)));
    /// ```
    pub fn build(self) -> Result<Client, ClientError> {
        let credentials = self.token.as_deref().map(Credentials::new).transpose()?.map(Arc::new);
        let http = match self.http {
            Some(http) => http,
            None => reqwest::Client::builder()
                .tcp_nodelay(true)
                .connect_timeout(self.connect_timeout)
                .pool_idle_timeout(Duration::from_secs(60))
                .build()
                .map_err(ClientError::Transport)?,
        };
        let transport = Transport {
            http,
            port: Port::Api,
            base_url: self.base_url.trim_end_matches('/').into(),
            credentials,
            timeout: self.timeout,
            deadline: None,
            retry: self.retry,
        };
        Ok(Client { transport })
    }
}

/// A client of one server's API port. Cheap to clone: clones share the
/// connection pool.
///
/// ```no_run
/// use abx_client::Client;
///
/// # async fn demo() -> Result<(), abx_client::ClientError> {
/// let client = Client::builder("http://127.0.0.1:9000").token(Some("secret")).build()?;
/// assert!(client.health().await?);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Client {
    transport: Transport,
}

impl Client {
    /// A builder for the server at `base_url` (`http://127.0.0.1:9000`).
    ///
    /// ```
    /// let builder = abx_client::Client::builder("http://127.0.0.1:9000/");
    /// assert_eq!(builder.build()?.base_url(), "http://127.0.0.1:9000");
    /// # Ok::<(), abx_client::ClientError>(())
    /// ```
    pub fn builder(base_url: &str) -> ClientBuilder {
        ClientBuilder {
            base_url: base_url.to_string(),
            token: None,
            timeout: None,
            connect_timeout: Duration::from_secs(10),
            retry: RetryPolicy::default(),
            http: None,
        }
    }

    /// The server's base URL, without a trailing slash.
    ///
    /// ```
    /// let client = abx_client::Client::builder("http://sandbox:9000").build()?;
    /// assert_eq!(client.base_url(), "http://sandbox:9000");
    /// # Ok::<(), abx_client::ClientError>(())
    /// ```
    pub fn base_url(&self) -> &str {
        &self.transport.base_url
    }

    /// This client with another per-call timeout (same pool and credentials).
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// # async fn demo(client: abx_client::Client) -> Result<(), abx_client::ClientError> {
    /// let quick = client.with_timeout(Duration::from_secs(2));
    /// let exists = quick.exists("setup.done").await?;
    /// # let _ = exists; Ok(()) }
    /// ```
    pub fn with_timeout(&self, timeout: Duration) -> Client {
        Client { transport: Transport { timeout: Some(timeout), ..self.transport.clone() } }
    }

    /// This client with an overall deadline: every call and stream made
    /// through it fails with [`ClientError::Timeout`] once `deadline` has
    /// passed, whatever the per-call timeout (same pool and credentials).
    ///
    /// ```no_run
    /// use std::time::{Duration, Instant};
    /// use abx_wire::api::process::ExecRequest;
    /// # async fn demo(client: abx_client::Client) -> Result<(), abx_client::ClientError> {
    /// // The whole build step, however many calls it makes, gets ten minutes.
    /// let step = client.with_deadline(Instant::now() + Duration::from_secs(600));
    /// step.shell(&ExecRequest::new("make")).await?;
    /// step.shell(&ExecRequest::new("make test")).await?;
    /// # Ok(()) }
    /// ```
    pub fn with_deadline(&self, deadline: std::time::Instant) -> Client {
        let deadline = Some(tokio::time::Instant::from_std(deadline));
        Client { transport: Transport { deadline, ..self.transport.clone() } }
    }

    /// This client with another retry policy (same pool and credentials).
    ///
    /// ```
    /// use abx_client::{Client, RetryPolicy};
    ///
    /// let client = Client::builder("http://127.0.0.1:9000").build()?;
    /// let once = client.with_retry(RetryPolicy::NEVER);
    /// # let _ = once;
    /// # Ok::<(), abx_client::ClientError>(())
    /// ```
    pub fn with_retry(&self, retry: RetryPolicy) -> Client {
        Client { transport: Transport { retry, ..self.transport.clone() } }
    }

    /// The HTTP client (and pool) every call uses, for requests this client does not wrap.
    ///
    /// ```
    /// let client = abx_client::Client::builder("http://127.0.0.1:9000").build()?;
    /// let shared: reqwest::Client = client.http_client().clone();
    /// # let _ = shared;
    /// # Ok::<(), abx_client::ClientError>(())
    /// ```
    pub fn http_client(&self) -> &reqwest::Client {
        &self.transport.http
    }

    /// `GET /health`: whether the server answers `ok`.
    ///
    /// # Errors
    /// The server cannot be reached.
    ///
    /// ```no_run
    /// # async fn demo(client: abx_client::Client) -> Result<(), abx_client::ClientError> {
    /// if !client.health().await? {
    ///     eprintln!("the sandbox is not ready");
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn health(&self) -> Result<bool, ClientError> {
        let health: Health = self.call("health", &[], &[], None::<&()>).await?;
        Ok(health.status == "ok")
    }

    /// `GET /capabilities`: the discovery document for this client's identity.
    ///
    /// # Errors
    /// Transport errors and error answers.
    ///
    /// ```no_run
    /// # async fn demo(client: abx_client::Client) -> Result<(), abx_client::ClientError> {
    /// let capabilities = client.capabilities().await?;
    /// let can_run = capabilities.endpoints.get("shell").is_some_and(|e| e.enabled && e.allowed);
    /// println!("{} may run commands: {can_run}", capabilities.identity.id);
    /// # Ok(()) }
    /// ```
    pub async fn capabilities(&self) -> Result<Capabilities, ClientError> {
        self.call("capabilities", &[], &[], None::<&()>).await
    }

    /// `POST /capabilities/check`: the server's decision for a hypothetical call.
    ///
    /// # Errors
    /// Transport errors and error answers.
    ///
    /// ```no_run
    /// use abx_wire::api::CheckRequest;
    /// # async fn demo(client: abx_client::Client) -> Result<(), abx_client::ClientError> {
    /// let request = CheckRequest { endpoint: "files_delete".into(), path: Some("/etc/passwd".into()), ..Default::default() };
    /// let decision = client.check(&request).await?;
    /// if !decision.allowed {
    ///     println!("refused: {:?}", decision.code);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn check(&self, request: &CheckRequest) -> Result<Decision, ClientError> {
        self.call("capabilities_check", &[], &[], Some(request)).await
    }

    /// The request for endpoint `id`, with this client's credentials: its
    /// method and path from the table, `{param}`s filled from `params` and
    /// the query from `query`. For calls this client does not wrap; it is
    /// sent as it is (no timeout, deadline or retry).
    ///
    /// # Errors
    /// [`ClientError::UnknownEndpoint`] for an id the table does not know on the API port.
    ///
    /// ```
    /// let client = abx_client::Client::builder("http://127.0.0.1:9000").build()?;
    /// let request = client.request("process_detail", &[("pid", "42")], &[])?.build().unwrap();
    /// assert_eq!(request.url().as_str(), "http://127.0.0.1:9000/process/42");
    /// assert!(client.request("no_such_endpoint", &[], &[]).is_err());
    /// assert!(client.request("code_execute", &[], &[]).is_err(), "the code port's: see code_interpreter()");
    /// # Ok::<(), abx_client::ClientError>(())
    /// ```
    pub fn request(
        &self,
        id: &str,
        params: &[(&str, &str)],
        query: &[(&str, String)],
    ) -> Result<reqwest::RequestBuilder, ClientError> {
        Ok(self.transport.build(self.transport.endpoint(id)?, params, query))
    }

    /// Calls endpoint `id` with an optional JSON body and decodes the JSON
    /// answer, within the timeout and deadline, retried per the policy.
    ///
    /// # Errors
    /// Transport errors, error answers ([`ClientError::Api`]), timeouts and undecodable answers.
    ///
    /// ```no_run
    /// use abx_wire::api::SystemInfo;
    /// # async fn demo(client: abx_client::Client) -> Result<(), abx_client::ClientError> {
    /// let info: SystemInfo = client.call("system_info", &[], &[], None::<&()>).await?;
    /// # let _ = info; Ok(()) }
    /// ```
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
        self.transport.call(id, params, query, body).await
    }

    /// Starts a call of endpoint `id` whose answer is a stream; the per-call
    /// timeout bounds its start, the deadline all of it.
    async fn open(
        &self,
        id: &str,
        params: &[(&str, &str)],
        query: &[(&str, String)],
        body: Option<&serde_json::Value>,
    ) -> Result<reqwest::Response, ClientError> {
        self.transport.open(id, params, query, body).await
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    /// Every public item of the client (functions, types, constants) has an
    /// example in its documentation; doc tests compile (and, where they need
    /// no server, run) them.
    #[test]
    fn every_public_item_has_an_example() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut missing = Vec::new();
        let mut items = 0;
        for entry in std::fs::read_dir(&dir).expect("src is readable").flatten() {
            let text = std::fs::read_to_string(entry.path()).expect("readable");
            let source = text.split("#[cfg(test)]").next().unwrap_or_default();
            let lines: Vec<&str> = source.lines().collect();
            for (i, line) in lines.iter().enumerate() {
                let item = line.trim_start();
                let kinds = [
                    "pub fn ",
                    "pub async fn ",
                    "pub const fn ",
                    "pub struct ",
                    "pub enum ",
                    "pub const ",
                    "pub type ",
                ];
                if !kinds.iter().any(|k| item.starts_with(k)) {
                    continue;
                }
                items += 1;
                let doc: Vec<&str> = lines[..i]
                    .iter()
                    .rev()
                    .map(|l| l.trim_start())
                    .skip_while(|l| l.starts_with("#["))
                    .take_while(|l| l.starts_with("///"))
                    .collect();
                if !doc.iter().any(|l| l.starts_with("/// ```")) {
                    missing.push(format!("{}:{}: {item}", entry.path().display(), i + 1));
                }
            }
        }
        assert!(items > 60, "the scan found the client's items ({items})");
        assert!(missing.is_empty(), "public items without an example:\n{}", missing.join("\n"));
    }
}
