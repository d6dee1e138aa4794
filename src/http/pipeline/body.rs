//! Request and response bodies at the edge.
//!
//! - [`KeepAliveLayer`]: a request body a handler (or a refusal) left unread
//!   would make hyper drop the keep-alive connection whenever the rest of
//!   the body had not arrived yet, and a client's pool would then see a
//!   reset on its next request. The layer reads a small leftover to its end
//!   before answering (a chunked one too, if it ends quickly); a large or
//!   slow one is answered with `Connection: close` and read on in the
//!   background (within a byte and time budget), so the connection closes
//!   cleanly after the answer instead of with a reset.
//! - [`Held`]: a response body that keeps the concurrency permit (and the
//!   grant) until it has been sent, as streams hold their slot.

use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use abx_domain::policy::Permit;
use abx_wire::endpoints::Endpoint;
use axum::body::Body;
use axum::extract::Request;
use axum::http::{header, HeaderMap, HeaderValue};
use axum::response::Response;
use bytes::Bytes;
use futures_util::future::{BoxFuture, Either};
use http_body::{Body as HttpBody, Frame, SizeHint};
use http_body_util::BodyExt;
use std::convert::Infallible;
use tower::{Layer, Service};

use crate::metrics::{ByteMeter, Metrics};

/// A leftover body up to this size is read before answering (the connection stays open).
const INLINE_DRAIN: u64 = 64 * 1024;
/// How long reading a small leftover may take before the connection is closed instead.
const INLINE_DRAIN_TIME: Duration = Duration::from_secs(2);
/// A refused body is read and discarded in the background up to this many bytes...
pub(super) const DRAIN_CAP: u64 = 256 * 1024 * 1024;
/// ...and for this long, so the client sees the answer instead of a reset.
pub(super) const DRAIN_TIME: Duration = Duration::from_secs(30);

struct Shared {
    body: Mutex<Option<Body>>,
    done: AtomicBool,
    /// Bytes read so far (for the metrics).
    read: ByteMeter,
}

/// The request body as handlers see it: reads go through to the real one,
/// which stays reachable by [`keep_alive`] when the handler drops it unread.
struct Guarded(Arc<Shared>);

impl HttpBody for Guarded {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let mut slot = self.0.body.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(body) = slot.as_mut() else { return Poll::Ready(None) };
        let polled = Pin::new(body).poll_frame(cx);
        match &polled {
            Poll::Ready(Some(Ok(frame))) => {
                let len = frame.data_ref().map_or(0, |d| d.len() as u64);
                self.0.read.fetch_add(len, Ordering::Relaxed);
            }
            Poll::Ready(None | Some(Err(_))) => self.0.done.store(true, Ordering::Release),
            Poll::Pending => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.0.body.lock().unwrap_or_else(PoisonError::into_inner).as_ref().is_none_or(HttpBody::is_end_stream)
    }

    fn size_hint(&self) -> SizeHint {
        self.0.body.lock().unwrap_or_else(PoisonError::into_inner).as_ref().map(HttpBody::size_hint).unwrap_or_default()
    }
}

/// Whether a request announces a body (a length above zero, or chunked).
fn has_body(headers: &HeaderMap) -> bool {
    headers.contains_key(header::TRANSFER_ENCODING)
        || headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()).is_some_and(|v| v.trim() != "0")
}

pub(super) fn expects_continue(headers: &HeaderMap) -> bool {
    headers.get(header::EXPECT).and_then(|v| v.to_str().ok()).is_some_and(|v| v.eq_ignore_ascii_case("100-continue"))
}

/// The layer every router runs outermost (see the module documentation);
/// a request without a body passes through it without any allocation.
#[derive(Debug, Clone, Copy, Default)]
pub struct KeepAliveLayer;

impl<S> Layer<S> for KeepAliveLayer {
    type Service = KeepAlive<S>;

    fn layer(&self, inner: S) -> KeepAlive<S> {
        KeepAlive(inner)
    }
}

/// The service of [`KeepAliveLayer`].
#[derive(Debug, Clone)]
pub struct KeepAlive<S>(S);

impl<S> Service<Request> for KeepAlive<S>
where
    S: Service<Request, Response = Response, Error = Infallible> + Clone + Send + 'static,
    S::Future: Send + 'static,
{
    type Response = Response;
    type Error = Infallible;
    type Future = Either<S::Future, BoxFuture<'static, Result<Response, Infallible>>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, request: Request) -> Self::Future {
        if !has_body(request.headers()) {
            return Either::Left(self.0.call(request));
        }
        // The service that was made ready runs the request; a clone stays for the next one.
        let clone = self.0.clone();
        let ready = std::mem::replace(&mut self.0, clone);
        Either::Right(Box::pin(async move { Ok(guard(request, ready).await) }))
    }
}

/// Runs `request` through `inner` with its body guarded (see the module documentation).
async fn guard<S>(mut request: Request, mut inner: S) -> Response
where
    S: Service<Request, Response = Response, Error = Infallible>,
{
    let declared = request.headers().get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.trim().parse().ok());
    let expect_continue = expects_continue(request.headers());
    let body = std::mem::take(request.body_mut());
    let read = ByteMeter::default();
    request.extensions_mut().insert(Arc::clone(&read));
    let shared = Arc::new(Shared { body: Mutex::new(Some(body)), done: AtomicBool::new(false), read });
    *request.body_mut() = Body::new(Guarded(Arc::clone(&shared)));
    let Ok(response) = inner.call(request).await;
    if shared.done.load(Ordering::Acquire) || Arc::strong_count(&shared) > 1 {
        // Read to its end, or still being read by the answer (a stream, a background drain).
        return response;
    }
    let Some(mut body) = shared.body.lock().unwrap_or_else(PoisonError::into_inner).take() else {
        return response;
    };
    if body.is_end_stream() {
        return response;
    }
    if expect_continue {
        // The client waits for "100 Continue" before sending; it will not come now.
        return closing(response);
    }
    // A small leftover (or a chunked one, of unknown size, that ends within
    // the budget) is read now, so the connection stays open.
    if declared.is_none_or(|n: u64| n <= INLINE_DRAIN) && drain_from(&mut body, INLINE_DRAIN, INLINE_DRAIN_TIME).await {
        return response;
    }
    // Read on in the background: hyper reads the connection while the body
    // is alive, so the answer is followed by a clean close, not a reset
    // over unread bytes.
    tokio::spawn(drain(body, DRAIN_CAP, DRAIN_TIME));
    closing(response)
}

fn closing(mut response: Response) -> Response {
    response.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}

/// Reads and discards `body` within `cap` bytes and `time`; whether it reached its end.
pub(super) async fn drain(mut body: Body, cap: u64, time: Duration) -> bool {
    drain_from(&mut body, cap, time).await
}

/// [`drain`] that leaves what it did not read in `body`, for a later drain to go on with.
async fn drain_from(body: &mut Body, cap: u64, time: Duration) -> bool {
    let read = async {
        let mut seen = 0u64;
        while let Some(frame) = body.frame().await {
            let Ok(frame) = frame else { return false };
            seen += frame.data_ref().map_or(0, |d| d.len() as u64);
            if seen > cap {
                return false;
            }
        }
        true
    };
    tokio::time::timeout(time, read).await.unwrap_or(false)
}

/// What a response holds until it has been sent: the concurrency slot,
/// and what the metrics need to count its bytes.
pub(super) struct Hold {
    pub(super) _permit: Option<Permit>,
    pub(super) read: Option<ByteMeter>,
    pub(super) metrics: Arc<Metrics>,
    pub(super) endpoint: &'static Endpoint,
}

/// A response body that keeps a [`Hold`] until it has been sent (or
/// dropped), then counts the bytes read and sent.
pub(super) struct Held {
    inner: Body,
    hold: Option<Hold>,
    sent: u64,
}

impl Held {
    /// `response` with its body wrapped.
    pub(super) fn wrap(response: Response, hold: Hold) -> Response {
        response.map(|inner| Body::new(Held { inner, hold: Some(hold), sent: 0 }))
    }

    fn finish(&mut self) {
        if let Some(hold) = self.hold.take() {
            let read = hold.read.as_ref().map_or(0, |r| r.load(Ordering::Relaxed));
            hold.metrics.transferred(hold.endpoint, read, self.sent);
        }
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.finish();
    }
}

impl HttpBody for Held {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        match &polled {
            Poll::Ready(Some(Ok(frame))) => self.sent += frame.data_ref().map_or(0, |d| d.len() as u64),
            Poll::Ready(None | Some(Err(_))) => self.finish(),
            Poll::Pending => {}
        }
        polled
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

    #[tokio::test]
    async fn drain_reads_to_the_end_within_its_cap() {
        assert!(drain(Body::from(vec![0u8; 1000]), 2000, Duration::from_secs(1)).await);
        assert!(!drain(Body::from(vec![0u8; 3000]), 2000, Duration::from_secs(1)).await);
    }

    #[test]
    fn bodies_are_announced_by_length_or_chunking() {
        let mut headers = HeaderMap::new();
        assert!(!has_body(&headers));
        headers.insert(header::CONTENT_LENGTH, HeaderValue::from_static("0"));
        assert!(!has_body(&headers));
        headers.insert(header::CONTENT_LENGTH, HeaderValue::from_static("12"));
        assert!(has_body(&headers));
        headers.remove(header::CONTENT_LENGTH);
        headers.insert(header::TRANSFER_ENCODING, HeaderValue::from_static("chunked"));
        assert!(has_body(&headers));
    }
}
