//! One connection: HTTP/1.1 served by hyper, with its timeouts.
//!
//! A connection is always in one phase: idle, waiting for its first byte
//! (at most `idle_timeout`, from the accept or the end of the last
//! response), reading a request's head (at most `header_read_timeout` from
//! its first byte, so trickling a head byte by byte does not keep it alive),
//! handling requests (no timeout: a long response or upload is the handler's
//! business), or upgraded to a WebSocket (no timeout). A fresh connection
//! counts as idle: client pools open connections ahead of need, and closing
//! one at the (shorter) head timeout raced the request the pool then sent on
//! it. A phase that
//! runs out closes the connection. The phases are tracked by an I/O wrapper
//! that hyper reads through, told by the service when a request starts and
//! when its response body is done.
//!
//! A connection served from a port's reserve answers only requests the
//! port's priority admits; others get 503 and the connection is closed.
//! While a connection waits for a request (idle or reading a head), the
//! accept loop may close it through its [`Watch`] to make room for a new one.
//! Every request carries the peer address as axum's `ConnectInfo`.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, Waker};

use abx_wire::api::Fault;
use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::{header, HeaderValue, Request, Response, StatusCode};
use axum::Router;
use bytes::Bytes;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::time::{Instant, Sleep};
use tokio_util::sync::CancellationToken;
use tower::{Layer, ServiceExt};
use tower_http::normalize_path::NormalizePathLayer;

use super::error::ApiError;
use super::limits::{ConnectionLimits, Priority};

/// Where a connection stands among its port's connections.
#[derive(Clone)]
pub(super) enum Tier {
    /// Served as usual.
    Open,
    /// In the reserve: served only for what the priority admits.
    Reserved(Priority),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    AwaitingHead(Instant),
    Busy(usize),
    Idle(Instant),
    Upgraded,
}

/// The phase of one connection, shared by its I/O and its service.
struct Clock {
    phase: Mutex<Phase>,
    /// Whether a request has started on it (a kept-alive connection, not a fresh one).
    served: AtomicBool,
    limits: ConnectionLimits,
    reader: Mutex<Option<Waker>>,
}

impl Clock {
    fn phase(&self) -> MutexGuard<'_, Phase> {
        self.phase.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn deadline(&self) -> Option<Instant> {
        match *self.phase() {
            Phase::AwaitingHead(since) => Some(since + self.limits.header_read_timeout),
            Phase::Idle(since) => Some(since + self.limits.idle_timeout),
            Phase::Busy(_) | Phase::Upgraded => None,
        }
    }

    fn bytes_arrived(&self) {
        let mut phase = self.phase();
        if let Phase::Idle(_) = *phase {
            *phase = Phase::AwaitingHead(Instant::now());
        }
    }

    fn request_started(&self) {
        self.served.store(true, Ordering::Relaxed);
        let mut phase = self.phase();
        *phase = match *phase {
            Phase::Busy(n) => Phase::Busy(n + 1),
            Phase::Upgraded => Phase::Upgraded,
            Phase::AwaitingHead(_) | Phase::Idle(_) => Phase::Busy(1),
        };
    }

    fn request_finished(&self) {
        let now_idle = {
            let mut phase = self.phase();
            *phase = match *phase {
                Phase::Busy(n) if n > 1 => Phase::Busy(n - 1),
                Phase::Busy(_) => Phase::Idle(Instant::now()),
                other => other,
            };
            matches!(*phase, Phase::Idle(_))
        };
        if now_idle {
            // The reader may be parked without a deadline: let it arm the idle one.
            if let Some(waker) = self.reader.lock().unwrap_or_else(PoisonError::into_inner).take() {
                waker.wake();
            }
        }
    }

    fn upgraded(&self) {
        *self.phase() = Phase::Upgraded;
    }
}

/// What the accept loop sees of one connection: whether it is still
/// waiting for a request, and a way to close it.
#[derive(Clone)]
pub(super) struct Watch {
    clock: Arc<Clock>,
    evict: CancellationToken,
}

impl Watch {
    /// A fresh connection's watch (idle from now).
    pub(super) fn new(limits: ConnectionLimits) -> Self {
        let clock = Clock {
            phase: Mutex::new(Phase::Idle(Instant::now())),
            served: AtomicBool::new(false),
            limits,
            reader: Mutex::new(None),
        };
        Watch { clock: Arc::new(clock), evict: CancellationToken::new() }
    }

    /// While the connection waits for a request or reads its head: whether
    /// it has served one before, and since when it waits. `None` while a
    /// request is handled or the connection is upgraded.
    pub(super) fn waiting(&self) -> Option<(bool, Instant)> {
        match *self.clock.phase() {
            Phase::Idle(since) | Phase::AwaitingHead(since) => Some((self.clock.served.load(Ordering::Relaxed), since)),
            Phase::Busy(_) | Phase::Upgraded => None,
        }
    }

    /// Closes the connection if it still waits for a request (under the
    /// phase's lock, so a request that has started is never cut); whether it did.
    pub(super) fn evict(&self) -> bool {
        let phase = self.clock.phase();
        if matches!(*phase, Phase::Busy(_) | Phase::Upgraded) {
            return false;
        }
        self.evict.cancel();
        true
    }
}

/// Marks a request finished when dropped (its response body done, or the request abandoned).
struct Finish(Arc<Clock>);

impl Drop for Finish {
    fn drop(&mut self) {
        self.0.request_finished();
    }
}

/// A response body that holds its request's [`Finish`] until it is done.
struct Tracked {
    inner: Body,
    _finish: Finish,
}

impl http_body::Body for Tracked {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

/// The socket as hyper reads it: a read waiting past its phase's deadline fails.
struct TimedIo {
    tcp: TcpStream,
    clock: Arc<Clock>,
    sleep: Pin<Box<Sleep>>,
    armed: Option<Instant>,
}

impl AsyncRead for TimedIo {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        match Pin::new(&mut this.tcp).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                if buf.filled().len() > before {
                    this.clock.bytes_arrived();
                }
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => {
                *this.clock.reader.lock().unwrap_or_else(PoisonError::into_inner) = Some(cx.waker().clone());
                let Some(deadline) = this.clock.deadline() else { return Poll::Pending };
                if this.armed != Some(deadline) {
                    this.sleep.as_mut().reset(deadline);
                    this.armed = Some(deadline);
                }
                match this.sleep.as_mut().poll(cx) {
                    Poll::Ready(()) => Poll::Ready(Err(std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        "the connection waited too long for a request",
                    ))),
                    Poll::Pending => Poll::Pending,
                }
            }
        }
    }
}

impl AsyncWrite for TimedIo {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().tcp).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().tcp).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.tcp.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().tcp).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().tcp).poll_shutdown(cx)
    }
}

/// The JSON body of a port's connection-limit refusal, the same on every
/// port (it is written before any router runs): the error table's
/// `connection_limit` row with `message`.
pub(super) fn connection_limit(message: &str) -> String {
    ApiError::of(Fault::ConnectionLimit, message).json()
}

/// The answer to a request a reserved connection may not serve.
fn busy() -> Response<Body> {
    let message = "Too many connections on this port; only /health and authenticated requests are served now";
    let mut response = Response::new(Body::from(connection_limit(message)));
    *response.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
    headers.insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    response
}

/// Serves one accepted connection until it closes, times out, or the server
/// shuts down (then in-flight requests finish first).
pub(super) async fn serve(
    tcp: TcpStream,
    peer: SocketAddr,
    router: Router,
    tier: Tier,
    watch: Watch,
    shutdown: CancellationToken,
) {
    let Watch { clock, evict } = watch;
    let now = Instant::now();
    let io = TimedIo { tcp, clock: Arc::clone(&clock), sleep: Box::pin(tokio::time::sleep_until(now)), armed: None };
    let app = NormalizePathLayer::trim_trailing_slash().layer(router);
    let service = hyper::service::service_fn(move |mut request: Request<Incoming>| {
        let (clock, app, tier) = (Arc::clone(&clock), app.clone(), tier.clone());
        async move {
            clock.request_started();
            let finish = Finish(Arc::clone(&clock));
            request.extensions_mut().insert(ConnectInfo(peer));
            let (parts, body) = request.into_parts();
            let admitted = match &tier {
                Tier::Open => true,
                Tier::Reserved(priority) => priority(&parts),
            };
            let response = if admitted {
                match app.oneshot(Request::from_parts(parts, Body::new(body))).await {
                    Ok(response) => response,
                    Err(never) => match never {},
                }
            } else {
                busy()
            };
            if response.status() == StatusCode::SWITCHING_PROTOCOLS {
                clock.upgraded();
            }
            Ok::<_, std::convert::Infallible>(response.map(|inner| Body::new(Tracked { inner, _finish: finish })))
        }
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder.header_read_timeout(None);
    let connection = builder.serve_connection(TokioIo::new(io), service).with_upgrades();
    tokio::pin!(connection);
    let result = tokio::select! {
        result = connection.as_mut() => result,
        () = evict.cancelled() => {
            tracing::debug!(%peer, "connection closed to make room: it was still waiting for a request");
            return;
        }
        () = shutdown.cancelled() => {
            connection.as_mut().graceful_shutdown();
            connection.await
        }
    };
    if let Err(e) = result {
        tracing::debug!(%peer, error = %e, "connection ended");
    }
}
