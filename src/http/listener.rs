//! Every port's accept loop: connection limits, the reserve, and what
//! happens when the daemon runs out of file descriptors.
//!
//! Each port counts its open connections. Below `max_connections -
//! reserve` a new connection is served as usual; in the last `reserve`
//! places it is served only for `/health` and for callers whose credentials
//! authenticate (anything else gets 503 and the connection is closed), so a
//! flood of anonymous or half-open connections cannot lock out probes and
//! the orchestrator. At `max_connections` a new connection takes the place
//! of the connection that has waited longest for a request (fresh ones and
//! those still reading a head first, then kept-alive idle ones), and is
//! served as in the reserve: slow connections that never finish a head can
//! only push each other out, never a probe whose request has arrived. Only
//! when every connection is busy is a new one answered 503 at once, unread,
//! and closed. Each connection's timeouts are `conn`'s.
//!
//! When `accept` fails because the process is out of descriptors, the loop
//! closes the port's longest-waiting connection in the same way and accepts
//! again once it is gone; with none to close, it gives back one descriptor
//! it keeps in reserve (on `/dev/null`), takes the waiting connection,
//! answers it 503, closes it and takes the spare again, so callers get an
//! answer instead of a hang and the port recovers by itself once
//! descriptors are free.

use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use axum::Router;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::conn::{self, Tier, Watch};
use super::limits::{ConnectionLimits, Priority};

/// How long a refusal may take to write before the connection is dropped.
const REFUSAL_WRITE: Duration = Duration::from_secs(1);
/// How long the loop, out of descriptors, waits for a connection it closed to be gone.
const EVICTION_WAIT: Duration = Duration::from_millis(100);

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
    mut spare: Spare,
) {
    let live = Arc::new(Live::default());
    let tracker = TaskTracker::new();
    let Connections { limits, priority } = connections;
    loop {
        let accepted = tokio::select! {
            () = shutdown.cancelled() => break,
            accepted = listener.accept() => accepted,
        };
        let (tcp, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(e) if out_of_descriptors(&e) => {
                match live.evict_longest_waiting() {
                    Some(gone) => {
                        let _ = tokio::time::timeout(EVICTION_WAIT, gone.cancelled()).await;
                    }
                    None => spare.shed(&listener).await,
                }
                continue;
            }
            Err(e) => {
                // A connection that failed before it was accepted: nothing to serve.
                tracing::debug!(error = %e, "accept failed");
                continue;
            }
        };
        let _ = tcp.set_nodelay(true);
        let watch = Watch::new(limits);
        let (slot, count) = live.admit(&watch, limits.max_connections);
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
            conn::serve(tcp, peer, router, tier, watch, shutdown).await;
            drop(slot);
        });
    }
    tracker.close();
    tracker.wait().await;
}

/// A port's open connections, each with its watch.
#[derive(Default)]
struct Live {
    table: Mutex<Table>,
}

#[derive(Default)]
struct Table {
    next: u64,
    open: HashMap<u64, Entry>,
}

struct Entry {
    watch: Watch,
    /// Cancelled when the connection's place is given back.
    gone: CancellationToken,
}

impl Live {
    fn table(&self) -> MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Counts a new connection in; at `max`, first closes the one that has
    /// waited longest for a request. Returns its place and the count with it.
    fn admit(self: &Arc<Self>, watch: &Watch, max: usize) -> (Slot, usize) {
        if self.table().open.len() >= max {
            self.evict_longest_waiting();
        }
        let mut table = self.table();
        let id = table.next;
        table.next += 1;
        let gone = CancellationToken::new();
        table.open.insert(id, Entry { watch: watch.clone(), gone: gone.clone() });
        let count = table.open.len();
        (Slot { live: Arc::clone(self), id, gone }, count)
    }

    /// Closes the connection that has waited longest
    /// for a request, preferring those that never had one; its place is free
    /// at once, and the token returned is cancelled once it is gone.
    fn evict_longest_waiting(&self) -> Option<CancellationToken> {
        let mut table = self.table();
        let mut candidates: Vec<(bool, tokio::time::Instant, u64)> = table
            .open
            .iter()
            .filter_map(|(id, entry)| entry.watch.waiting().map(|(served, since)| (served, since, *id)))
            .collect();
        candidates.sort_unstable();
        for (_, _, id) in candidates {
            let evicted = table.open.get(&id).is_some_and(|entry| entry.watch.evict());
            if evicted {
                return table.open.remove(&id).map(|entry| entry.gone);
            }
        }
        None
    }
}

/// A place counted among a port's open connections, given back when dropped.
struct Slot {
    live: Arc<Live>,
    id: u64,
    gone: CancellationToken,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.live.table().open.remove(&self.id);
        self.gone.cancel();
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
    let body = conn::connection_limit(message);
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
pub(super) struct Spare {
    fd: Option<OwnedFd>,
    warned: Option<Instant>,
}

impl Spare {
    /// Opens the spare (on `/dev/null`).
    pub(super) fn take() -> Spare {
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
