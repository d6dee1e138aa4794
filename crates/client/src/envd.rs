//! [`EnvdClient`]: the envd port's plain HTTP calls an orchestrator makes
//! (readiness, `/init`, the variables `/init` set, metrics).
//!
//! envd's `filesystem` and `process` Connect services are what the `e2b`
//! SDK drives; they do what the native API does ([`Client`]'s files,
//! processes and watches), so this client does not wrap them a second time.

use std::collections::BTreeMap;

use abx_wire::api::envd::http::{InitRequest, Metrics};
use abx_wire::endpoints::Port;

use super::transport::{Credentials, Transport};
use super::{Client, ClientError};

impl Client {
    /// A client of the envd port at `url`, with this client's credentials
    /// (the daemon accepts its API token there), timeouts, retries and pool.
    ///
    /// ```
    /// let client = abx_client::Client::builder("http://127.0.0.1:9000").build()?;
    /// let envd = client.envd("http://127.0.0.1:49983");
    /// assert_eq!(envd.base_url(), "http://127.0.0.1:49983");
    /// # Ok::<(), abx_client::ClientError>(())
    /// ```
    pub fn envd(&self, url: &str) -> EnvdClient {
        EnvdClient { transport: self.transport.at(Port::Envd, url) }
    }
}

/// A client of the envd port's plain HTTP endpoints. Cheap to clone.
///
/// ```no_run
/// use abx_wire::api::envd::http::InitRequest;
/// # async fn demo(client: abx_client::Client) -> Result<(), abx_client::ClientError> {
/// let envd = client.envd("http://127.0.0.1:49983");
/// let init = InitRequest { default_workdir: Some("/home/user/project".into()), ..Default::default() };
/// envd.init(&init).await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct EnvdClient {
    transport: Transport,
}

impl EnvdClient {
    /// The port's base URL, without a trailing slash.
    ///
    /// ```
    /// # let client = abx_client::Client::builder("http://h:9000").build()?;
    /// assert_eq!(client.envd("http://h:49983/").base_url(), "http://h:49983");
    /// # Ok::<(), abx_client::ClientError>(())
    /// ```
    pub fn base_url(&self) -> &str {
        &self.transport.base_url
    }

    /// This client presenting `token` instead (the access token `/init` set).
    ///
    /// # Errors
    /// [`ClientError::InvalidToken`] for a token that cannot be sent in a header.
    ///
    /// ```
    /// # let client = abx_client::Client::builder("http://h:9000").build()?;
    /// let envd = client.envd("http://h:49983").with_access_token("envd-token")?;
    /// # let _ = envd;
    /// # Ok::<(), abx_client::ClientError>(())
    /// ```
    pub fn with_access_token(&self, token: &str) -> Result<EnvdClient, ClientError> {
        let credentials = Some(std::sync::Arc::new(Credentials::new(token)?));
        Ok(EnvdClient { transport: Transport { credentials, ..self.transport.clone() } })
    }

    /// `GET /health`: whether envd is ready (204).
    ///
    /// # Errors
    /// Transport errors and error answers.
    ///
    /// ```no_run
    /// # async fn demo(envd: abx_client::EnvdClient) -> Result<(), abx_client::ClientError> {
    /// assert!(envd.health().await?);
    /// # Ok(()) }
    /// ```
    pub async fn health(&self) -> Result<bool, ClientError> {
        let status = self.transport.call_empty("envd_health", &[], None::<&()>).await?;
        Ok(status == reqwest::StatusCode::NO_CONTENT)
    }

    /// `POST /init`: variables for every later process, the access token,
    /// the default user and working directory (what a platform sends when
    /// a sandbox starts).
    ///
    /// # Errors
    /// Transport errors and error answers (401 when a token protects the port).
    ///
    /// ```no_run
    /// use abx_wire::api::envd::http::InitRequest;
    /// # async fn demo(envd: abx_client::EnvdClient) -> Result<(), abx_client::ClientError> {
    /// let init = InitRequest {
    ///     env_vars: Some([("JOB_ID".to_string(), "42".to_string())].into()),
    ///     default_user: Some("user".into()),
    ///     ..Default::default()
    /// };
    /// envd.init(&init).await?;
    /// # Ok(()) }
    /// ```
    pub async fn init(&self, request: &InitRequest) -> Result<(), ClientError> {
        self.transport.call_empty("envd_init", &[], Some(request)).await.map(drop)
    }

    /// `GET /envs`: the variables `/init` set.
    ///
    /// # Errors
    /// Transport errors and error answers.
    ///
    /// ```no_run
    /// # async fn demo(envd: abx_client::EnvdClient) -> Result<(), abx_client::ClientError> {
    /// let vars = envd.envs().await?;
    /// println!("{:?}", vars.get("JOB_ID"));
    /// # Ok(()) }
    /// ```
    pub async fn envs(&self) -> Result<BTreeMap<String, String>, ClientError> {
        self.transport.call("envd_envs", &[], &[], None::<&()>).await
    }

    /// `GET /metrics`: CPU, memory and disk use, as envd reports them.
    ///
    /// # Errors
    /// Transport errors and error answers.
    ///
    /// ```no_run
    /// # async fn demo(envd: abx_client::EnvdClient) -> Result<(), abx_client::ClientError> {
    /// let metrics = envd.metrics().await?;
    /// println!("{:.1}% CPU, {} MiB used", metrics.cpu_used_pct, metrics.mem_used_mib);
    /// # Ok(()) }
    /// ```
    pub async fn metrics(&self) -> Result<Metrics, ClientError> {
        self.transport.call("envd_metrics", &[], &[], None::<&()>).await
    }
}
