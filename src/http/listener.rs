//! Every port's accept loop: connection limits, the reserve, and what
//! happens when the daemon runs out of file descriptors.
//!
//! Each port counts its open connections. Below `max_connections -
//! reserve` a new connection is served as usual; in the last `reserve`
//! places it is served only for `/health` and for callers whose credentials
//! authenticate (anything else gets 503 and the connection is closed), so a
//! flood of anonymous or half-open connections cannot lock out probes and
//! the orchestrator; past `max_connections` it is answered 503 at once,
//! unread, and closed. Each connection's timeouts are `conn`'s.
//!
//! When `accept` fails because the process is out of descriptors, the loop
//! gives back one it keeps in reserve (on `/dev/null`), takes the waiting
//! connection, answers it 503, closes it and takes the spare again, so
//! callers get an answer instead of a hang and the port recovers by itself
//! once descriptors are free.

use std::net::SocketAddr;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::ConnectInfo;
use axum::http::request::Parts;
use axum::Router;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::conn::{self, Tier};
use crate::policy::PolicyEngine;

/// Default time a client has to send a request's head.
pub const DEFAULT_HEADER_READ_TIMEOUT: Duration = Duration::from_secs(15);
/// Default time a kept-alive connection may wait for its next request.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a refusal may take to write before the connection is dropped.
const REFUSAL_WRITE: Duration = Duration::from_secs(1);

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
        header_read_seconds: Option<f64>,
        idle_seconds: Option<f64>,
        max_connections: Option<usize>,
        reserve: Option<usize>,
    ) -> Result<Self, String> {
        let seconds = |name: &str, value: Option<f64>, default: Duration| match value {
            None => Ok(default),
            Some(s) if s.is_finite() && s > 0.0 => Ok(Duration::from_secs_f64(s)),
            Some(s) => Err(format!("{name} must be > 0, got {s}")),
        };
        let header_read_timeout =
            seconds("header_read_timeout_seconds", header_read_seconds, DEFAULT_HEADER_READ_TIMEOUT)?;
        let idle_timeout = seconds("idle_timeout_seconds", idle_seconds, DEFAULT_IDLE_TIMEOUT)?;
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

/// How one port treats its connections.
#[derive(Clone)]
pub struct Connections {
    /// Timeouts and counts.
    pub limits: ConnectionLimits,
    /// Who may use the reserve.
    pub priority: Priority,
}

/// Accepts and serves connections until `shutdown`, then waits for the
/// open ones to finish their requests (the caller bounds that wait).
pub(super) async fn accept_loop(
    listener: TcpListener,
    router: Router,
    shutdown: CancellationToken,
    connections: Connections,
) {
    let open = Arc::new(AtomicUsize::new(0));
    let tracker = TaskTracker::new();
    let mut spare = Spare::take();
    let Connections { limits, priority } = connections;
    loop {
        let accepted = tokio::select! {
            () = shutdown.cancelled() => break,
            accepted = listener.accept() => accepted,
        };
        let (tcp, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(e) if out_of_descriptors(&e) => {
                spare.shed(&listener).await;
                continue;
            }
            Err(e) => {
                // A connection that failed before it was accepted: nothing to serve.
                tracing::debug!(error = %e, "accept failed");
                continue;
            }
        };
        let _ = tcp.set_nodelay(true);
        let count = open.fetch_add(1, Ordering::AcqRel) + 1;
        let slot = Slot(Arc::clone(&open));
        let tier = if count > limits.max_connections {
            tracker.spawn(async move {
                refuse(tcp, "Too many connections on this port; retry later").await;
                drop(slot);
            });
            continue;
        } else if count > limits.max_connections.saturating_sub(limits.reserve) {
            Tier::Reserved(Arc::clone(&priority))
        } else {
            Tier::Open
        };
        let (router, shutdown) = (router.clone(), shutdown.clone());
        tracker.spawn(async move {
            conn::serve(tcp, peer, router, tier, limits, shutdown).await;
            drop(slot);
        });
    }
    tracker.close();
    tracker.wait().await;
}

/// A place counted among a port's open connections, given back when dropped.
struct Slot(Arc<AtomicUsize>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

fn out_of_descriptors(e: &std::io::Error) -> bool {
    matches!(
        e.raw_os_error().map(nix::errno::Errno::from_raw),
        Some(nix::errno::Errno::EMFILE | nix::errno::Errno::ENFILE)
    )
}

/// A 503 written to a connection that is not read, then closed.
pub(super) async fn refuse(mut tcp: TcpStream, message: &str) {
    let body = serde_json::json!({"error": message, "type": "ServiceUnavailable", "code": "connection_limit"});
    let body = body.to_string();
    let head = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\
         retry-after: 1\r\nconnection: close\r\n\r\n",
        body.len()
    );
    let write = async {
        tcp.write_all(head.as_bytes()).await?;
        tcp.write_all(body.as_bytes()).await?;
        tcp.shutdown().await
    };
    let _ = tokio::time::timeout(REFUSAL_WRITE, write).await;
}

/// One descriptor held back for the moment all others are in use.
struct Spare {
    fd: Option<OwnedFd>,
    warned: Option<Instant>,
}

impl Spare {
    fn take() -> Spare {
        Spare { fd: Self::open(), warned: None }
    }

    fn open() -> Option<OwnedFd> {
        std::fs::File::open("/dev/null").ok().map(OwnedFd::from)
    }

    /// Out of descriptors: frees the spare, answers one waiting connection
    /// 503, and takes the spare again.
    async fn shed(&mut self, listener: &TcpListener) {
        if self.warned.is_none_or(|at| at.elapsed() > Duration::from_secs(10)) {
            tracing::warn!("out of file descriptors: new connections are answered 503 until some close");
            self.warned = Some(Instant::now());
        }
        self.fd = None;
        let waiting = tokio::time::timeout(Duration::from_millis(50), listener.accept()).await;
        if let Ok(Ok((tcp, _))) = waiting {
            // Answered inline and closed, so the spare can be taken back right after.
            refuse(tcp, "The server is out of file descriptors; retry later").await;
        }
        self.fd = Self::open();
        if self.fd.is_none() {
            // Someone took it: let connections and files close before trying again.
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}
