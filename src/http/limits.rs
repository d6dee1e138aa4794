//! The connection bounds of every port ([`ConnectionLimits`]) and who may
//! use a port's last, reserved places ([`priority`]): what the accept loop
//! ([`super::listener`]) and each connection (`conn`) enforce.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::ConnectInfo;
use axum::http::request::Parts;

use abx_domain::policy::PolicyEngine;

/// Default time a client has to send a request's head.
pub const DEFAULT_HEADER_READ_TIMEOUT: Duration = Duration::from_secs(15);
/// Default time a kept-alive connection may wait for its next request.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(60);

/// The connection bounds of every port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// From the start of waiting for a request until its whole head has arrived.
    pub header_read_timeout: Duration,
    /// How long a kept-alive connection may wait for its next request.
    pub idle_timeout: Duration,
    /// Open connections per port.
    pub max_connections: usize,
    /// Of those, the last places kept for `/health` and authenticated callers.
    pub reserve: usize,
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        let max_connections = default_max_connections();
        ConnectionLimits {
            header_read_timeout: DEFAULT_HEADER_READ_TIMEOUT,
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
            max_connections,
            reserve: default_reserve(max_connections),
        }
    }
}

impl ConnectionLimits {
    /// The limits from the configured values (`None`: the default).
    ///
    /// # Errors
    /// A timeout that is not positive, no connection allowed, or a reserve
    /// that leaves no place outside it.
    pub fn resolve(
        header_read_timeout: Option<Duration>,
        idle_timeout: Option<Duration>,
        max_connections: Option<usize>,
        reserve: Option<usize>,
    ) -> Result<Self, String> {
        let positive = |name: &str, value: Option<Duration>, default: Duration| match value {
            None => Ok(default),
            Some(d) if d.is_zero() => Err(format!("{name} must be > 0, got 0")),
            Some(d) => Ok(d),
        };
        let header_read_timeout =
            positive("header_read_timeout_seconds", header_read_timeout, DEFAULT_HEADER_READ_TIMEOUT)?;
        let idle_timeout = positive("idle_timeout_seconds", idle_timeout, DEFAULT_IDLE_TIMEOUT)?;
        let max_connections = match max_connections {
            None => default_max_connections(),
            Some(0) => return Err("max_connections must be at least 1".into()),
            Some(n) => n,
        };
        let reserve = match reserve {
            None => default_reserve(max_connections),
            Some(n) if n < max_connections => n,
            Some(n) => {
                return Err(format!("connection_reserve must be below max_connections ({max_connections}), got {n}"))
            }
        };
        Ok(ConnectionLimits { header_read_timeout, idle_timeout, max_connections, reserve })
    }
}

/// An eighth of the descriptors the process may open (four ports, and room
/// for files, pipes and watches), from 32 to 4096.
pub fn default_max_connections() -> usize {
    let soft =
        nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE).map_or(1024, |(soft, _)| soft);
    usize::try_from(soft / 8).unwrap_or(4096).clamp(32, 4096)
}

/// An eighth of `max_connections`, at least one.
pub fn default_reserve(max_connections: usize) -> usize {
    (max_connections / 8).max(1)
}

/// Whether a request may use a port's reserved connections.
pub type Priority = Arc<dyn Fn(&Parts) -> bool + Send + Sync>;

/// `/health`, or credentials that authenticate to a token identity of
/// `engine` (any port's: the policy's tokens, envd's access token). A peer
/// the engine holds back for failed attempts is refused, and a failure here
/// counts like one at the front door, so the reserve is no guessing oracle.
pub fn priority(engine: Arc<PolicyEngine>) -> Priority {
    Arc::new(move |parts| {
        if parts.uri.path() == "/health" {
            return true;
        }
        let peer = parts.extensions.get::<ConnectInfo<SocketAddr>>().map(|info| info.0.ip());
        if peer.is_some_and(|peer| engine.throttle.check(peer).is_err()) {
            return false;
        }
        match engine.authenticate(&super::pipeline::from_headers(&parts.headers)) {
            Ok(identity) => identity.id != "anonymous",
            Err(denial) => {
                if let (Some(peer), 401) = (peer, denial.status()) {
                    engine.throttle.failed(peer);
                }
                false
            }
        }
    })
}
