//! One stream of an MCP session kept for a resume: its ring, the task that
//! drains the SDK's stream into it whether or not a client reads, and the
//! connections that read it ([`Reader`]).

use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Instant;

use abx_domain::resume::{Presence, Ring, Slot};
use futures_util::StreamExt;
use rmcp::model::{RequestId, ServerJsonRpcMessage};
use rmcp::transport::streamable_http_server::session::ServerSseMessage;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// Messages of each stream kept for a resume.
pub const STREAM_MESSAGES: usize = 256;
/// Bytes (of serialized messages) of each stream kept for a resume; a
/// stream's newest message is kept whatever its size.
pub const STREAM_BYTES: usize = 1 << 20;

/// One stream of a session: a call's (`id` > 0) or the standalone one (0).
pub(super) struct Kept {
    pub(super) id: u64,
    /// The request a call's stream answers.
    pub(super) request: Option<RequestId>,
    pub(super) ring: Ring<ServerSseMessage>,
    pub(super) presence: Presence,
    pub(super) ended: Mutex<Option<Instant>>,
}

impl Kept {
    pub(super) fn new(id: u64, request: Option<RequestId>) -> Self {
        Kept {
            id,
            request,
            ring: Ring::with_bytes(STREAM_MESSAGES, STREAM_BYTES),
            presence: Presence::default(),
            ended: Mutex::new(None),
        }
    }

    pub(super) fn ended_at(&self) -> Option<Instant> {
        *self.ended.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(super) fn event_id(&self, seq: u64) -> String {
        if self.id == 0 {
            seq.to_string()
        } else {
            format!("{}:{seq}", self.id)
        }
    }

    /// Whether `message` is the answer to this stream's call (its last message).
    fn answers(&self, message: &ServerSseMessage) -> bool {
        let id = match message.message.as_deref() {
            Some(ServerJsonRpcMessage::Response(response)) => Some(&response.id),
            Some(ServerJsonRpcMessage::Error(error)) => error.id.as_ref(),
            _ => None,
        };
        id.is_some() && id == self.request.as_ref()
    }

    async fn vacant(&self) {
        let _ = self.presence.subscribe().wait_for(|(count, _)| *count == 0).await;
    }
}

/// Drains the SDK's stream into `kept`'s ring until the stream's answer,
/// its end or the session's; waits for an attached reader rather than
/// evict what it has not read.
pub(super) async fn drain(
    kept: Arc<Kept>,
    inner: impl futures_util::Stream<Item = ServerSseMessage>,
    closed: CancellationToken,
) {
    let mut inner = std::pin::pin!(inner);
    loop {
        let next = tokio::select! {
            next = inner.next() => next,
            () = closed.cancelled() => None,
        };
        let Some(mut message) = next else { break };
        let size = size(&message);
        if kept.presence.count() > 0 {
            tokio::select! {
                () = kept.ring.room_for(size) => {}
                () = kept.vacant() => {}
                () = closed.cancelled() => break,
            }
        }
        message.event_id = Some(kept.event_id(kept.ring.next_seq()));
        let last = kept.answers(&message);
        kept.ring.push_sized(message, size, last);
        if last {
            break;
        }
    }
    kept.ring.end();
    *kept.ended.lock().unwrap_or_else(PoisonError::into_inner) = Some(Instant::now());
    if kept.id != 0 && kept.presence.count() == 0 {
        tracing::debug!(stream = kept.id, "an MCP call's stream ended with no client attached; kept for a resume");
    }
}

/// The bytes a message takes serialized (what the ring's byte bound counts).
fn size(message: &ServerSseMessage) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0 += bytes.len();
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    if let Some(message) = &message.message {
        let _ = serde_json::to_writer(&mut count, message.as_ref());
    }
    count.0 + message.event_id.as_ref().map_or(0, String::len)
}

/// One connection's events, as the SDK's response body reads them.
pub struct Reader(mpsc::Receiver<ServerSseMessage>);

impl futures_util::Stream for Reader {
    type Item = ServerSseMessage;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<ServerSseMessage>> {
        self.0.poll_recv(cx)
    }
}

impl Reader {
    /// A connection given `events`, then ended.
    pub(super) fn of(events: Vec<ServerSseMessage>) -> Reader {
        let (tx, rx) = mpsc::channel(events.len().max(1));
        for event in events {
            let _ = tx.try_send(event);
        }
        Reader(rx)
    }

    /// A connection that gets nothing but keep-alives until the session ends
    /// (a second standalone stream, as the SDK does: two clients taking the
    /// stream from each other would reconnect in a loop).
    pub(super) fn idle(closed: CancellationToken) -> Reader {
        let (tx, rx) = mpsc::channel(1);
        tokio::spawn(async move {
            tokio::select! {
                () = closed.cancelled() => {}
                () = tx.closed() => {}
            }
        });
        Reader(rx)
    }

    /// A connection reading `kept` from `from` on, after `first`; a newer
    /// connection to the same stream takes over.
    pub(super) fn attach(
        kept: &Arc<Kept>,
        from: u64,
        first: Option<ServerSseMessage>,
        closed: CancellationToken,
    ) -> Reader {
        let generation = kept.presence.join();
        kept.ring.mark_read(from);
        let (tx, rx) = mpsc::channel(1);
        let kept = Arc::clone(kept);
        tokio::spawn(async move {
            let mut attached = kept.presence.subscribe();
            let taken_over = |attached: &mut tokio::sync::watch::Receiver<(usize, u64)>| {
                let mut attached = attached.clone();
                async move {
                    let _ = attached.wait_for(|(_, newest)| *newest != generation).await;
                }
            };
            let mut next = from;
            let mut sent = match first {
                Some(event) => tokio::select! {
                    sent = tx.send(event) => sent.is_ok(),
                    () = closed.cancelled() => false,
                },
                None => true,
            };
            while sent && attached.borrow_and_update().1 == generation {
                match kept.ring.get(next) {
                    // Counted when the connection attached; nothing is evicted unread while it is.
                    Slot::Gap(lost) => next += lost,
                    Slot::Item(event) => {
                        sent = tokio::select! {
                            sent = tx.send(event) => sent.is_ok(),
                            () = taken_over(&mut attached) => false,
                            () = closed.cancelled() => false,
                        };
                        // Marked once handed over: the producer waits only for what is not sent.
                        if sent {
                            next += 1;
                            kept.ring.mark_read(next);
                        }
                    }
                    Slot::Ended => break,
                    Slot::Pending => {
                        tokio::select! {
                            () = kept.ring.grown_past(next) => {}
                            () = taken_over(&mut attached) => break,
                            () = tx.closed() => break,
                            () = closed.cancelled() => break,
                        }
                    }
                }
            }
            kept.presence.leave();
        });
        Reader(rx)
    }
}
