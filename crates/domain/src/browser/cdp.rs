//! One Chrome DevTools Protocol connection: JSON messages over the browser's
//! WebSocket, commands matched to replies by id, events handed on in order.
//!
//! [`Cdp::call`] sends a typed [`Command`] (on the browser session or an
//! attached target's flat session) and awaits its typed reply. Events go to
//! one bounded channel, read by the instance's event loop, which must never
//! await a reply itself (it spawns tasks for that): a full channel pauses
//! the reader, and so the browser, but cannot stall a reply someone awaits
//! from the loop. When the socket closes every pending call fails with
//! [`CdpError::Closed`] and [`Cdp::closed`] fires.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use futures_util::{SinkExt, StreamExt};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::{mpsc, oneshot};
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::Message;
use tokio_util::sync::CancellationToken;

/// Largest message accepted from the browser: a full-page screenshot or a
/// page's HTML travels in one message.
pub const MAX_MESSAGE_BYTES: usize = 128 << 20;

/// Events queued between the socket reader and the event loop.
const EVENT_QUEUE: usize = 256;

/// A CDP command: its method name, parameters (the value itself) and reply type.
pub trait Command: Serialize {
    /// `Domain.method`.
    const METHOD: &'static str;
    /// The reply's `result`.
    type Reply: DeserializeOwned;
}

/// Why a CDP call failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum CdpError {
    /// The connection to the browser is gone (it exited or was killed).
    #[error("the browser connection is closed")]
    Closed,
    /// The browser answered with an error.
    #[error("{method}: {message}")]
    Protocol {
        /// The command.
        method: &'static str,
        /// The browser's message.
        message: String,
    },
    /// The reply did not have the expected shape.
    #[error("unexpected reply to {method}: {detail}")]
    Decode {
        /// The command.
        method: &'static str,
        /// The decoder's complaint.
        detail: String,
    },
    /// The WebSocket could not be opened.
    #[error("cannot connect to the browser: {0}")]
    Connect(String),
}

/// An event from the browser, decoded later by whoever handles its method.
#[derive(Debug)]
pub struct Event {
    /// `Domain.event`.
    pub method: String,
    /// The flat session it came from (`None`: the browser session).
    pub session: Option<String>,
    /// Its parameters.
    pub params: Value,
}

impl Event {
    /// The parameters as `T`.
    ///
    /// # Errors
    /// The parameters do not have `T`'s shape.
    pub fn decode<T: DeserializeOwned>(self) -> Result<T, serde_json::Error> {
        serde_json::from_value(self.params)
    }
}

#[derive(Deserialize)]
struct Incoming {
    id: Option<u64>,
    method: Option<String>,
    #[serde(rename = "sessionId")]
    session_id: Option<String>,
    #[serde(default)]
    params: Value,
    result: Option<Value>,
    error: Option<ReplyError>,
}

#[derive(Deserialize)]
struct ReplyError {
    #[serde(default)]
    message: String,
}

#[derive(Serialize)]
struct Outgoing<'a, P> {
    id: u64,
    method: &'static str,
    params: &'a P,
    #[serde(rename = "sessionId", skip_serializing_if = "Option::is_none")]
    session_id: Option<&'a str>,
}

type Pending = Mutex<HashMap<u64, oneshot::Sender<Result<Value, String>>>>;

/// A connection to the browser; cheap to clone.
#[derive(Clone)]
pub struct Cdp {
    inner: Arc<Inner>,
}

struct Inner {
    next_id: AtomicU64,
    pending: Pending,
    out: mpsc::Sender<Message>,
    closed: CancellationToken,
}

impl std::fmt::Debug for Cdp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cdp").field("closed", &self.inner.closed.is_cancelled()).finish()
    }
}

impl Cdp {
    /// Connects to the browser's DevTools WebSocket and starts the reader
    /// and writer tasks; the receiver yields the browser's events.
    ///
    /// # Errors
    /// [`CdpError::Connect`] when the socket cannot be opened.
    pub async fn connect(ws_url: &str) -> Result<(Cdp, mpsc::Receiver<Event>), CdpError> {
        let config = WebSocketConfig::default()
            .max_message_size(Some(MAX_MESSAGE_BYTES))
            .max_frame_size(Some(MAX_MESSAGE_BYTES));
        let (socket, _) = tokio_tungstenite::connect_async_with_config(ws_url, Some(config), true)
            .await
            .map_err(|e| CdpError::Connect(e.to_string()))?;
        let (mut sink, mut stream) = socket.split();
        let (out, mut outgoing) = mpsc::channel::<Message>(64);
        let (events_tx, events) = mpsc::channel(EVENT_QUEUE);
        let inner = Arc::new(Inner {
            next_id: AtomicU64::new(1),
            pending: Mutex::default(),
            out,
            closed: CancellationToken::new(),
        });
        let closed = inner.closed.clone();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    message = outgoing.recv() => {
                        let Some(message) = message else { break };
                        if sink.send(message).await.is_err() {
                            break;
                        }
                    }
                    () = closed.cancelled() => break,
                }
            }
            let _ = sink.close().await;
        });
        let reader = Arc::clone(&inner);
        tokio::spawn(async move {
            while let Some(Ok(message)) = stream.next().await {
                let Message::Text(text) = message else { continue };
                match serde_json::from_str::<Incoming>(&text) {
                    Ok(incoming) => {
                        if !reader.dispatch(incoming, &events_tx).await {
                            break;
                        }
                    }
                    Err(e) => tracing::debug!(error = %e, "undecodable message from the browser"),
                }
            }
            reader.closed.cancel();
            reader.pending.lock().unwrap_or_else(PoisonError::into_inner).clear();
        });
        Ok((Cdp { inner }, events))
    }

    /// Sends `command` on `session` (`None`: the browser session) and awaits its reply.
    ///
    /// # Errors
    /// [`CdpError::Closed`] when the browser is gone, the browser's own
    /// error, or a reply of the wrong shape.
    pub async fn call<C: Command>(&self, session: Option<&str>, command: &C) -> Result<C::Reply, CdpError> {
        let id = self.inner.next_id.fetch_add(1, Ordering::Relaxed);
        let text = serde_json::to_string(&Outgoing { id, method: C::METHOD, params: command, session_id: session })
            .map_err(|e| CdpError::Decode { method: C::METHOD, detail: e.to_string() })?;
        let (tx, rx) = oneshot::channel();
        if self.inner.closed.is_cancelled() {
            return Err(CdpError::Closed);
        }
        self.inner.pending.lock().unwrap_or_else(PoisonError::into_inner).insert(id, tx);
        let forget = || {
            self.inner.pending.lock().unwrap_or_else(PoisonError::into_inner).remove(&id);
        };
        if self.inner.out.send(Message::text(text)).await.is_err() {
            forget();
            return Err(CdpError::Closed);
        }
        // A caller that gives up (timeout, client gone) leaves no entry behind.
        let guard = scopeguard(forget);
        let reply = tokio::select! {
            reply = rx => reply,
            () = self.inner.closed.cancelled() => return Err(CdpError::Closed),
        };
        drop(guard);
        match reply {
            Ok(Ok(result)) => serde_json::from_value(result)
                .map_err(|e| CdpError::Decode { method: C::METHOD, detail: e.to_string() }),
            Ok(Err(message)) => Err(CdpError::Protocol { method: C::METHOD, message }),
            Err(_) => Err(CdpError::Closed),
        }
    }

    /// Fires when the connection is gone.
    pub fn closed(&self) -> CancellationToken {
        self.inner.closed.clone()
    }

    /// Closes the connection.
    pub fn close(&self) {
        self.inner.closed.cancel();
    }
}

impl Inner {
    /// Routes one message; `false` once the event loop is gone.
    async fn dispatch(&self, incoming: Incoming, events: &mpsc::Sender<Event>) -> bool {
        match (incoming.id, incoming.method) {
            (Some(id), _) => {
                let waiter = self.pending.lock().unwrap_or_else(PoisonError::into_inner).remove(&id);
                if let Some(waiter) = waiter {
                    let reply = match incoming.error {
                        Some(error) => Err(error.message),
                        None => Ok(incoming.result.unwrap_or(Value::Null)),
                    };
                    let _ = waiter.send(reply);
                }
                true
            }
            (None, Some(method)) => {
                let event = Event { method, session: incoming.session_id, params: incoming.params };
                events.send(event).await.is_ok()
            }
            (None, None) => true,
        }
    }
}

/// Runs `f` when dropped.
struct ScopeGuard<F: FnMut()>(F);

impl<F: FnMut()> Drop for ScopeGuard<F> {
    fn drop(&mut self) {
        (self.0)();
    }
}

fn scopeguard<F: FnMut()>(f: F) -> ScopeGuard<F> {
    ScopeGuard(f)
}
