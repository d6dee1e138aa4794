//! The MCP sessions, with every stream of a session kept for a resume.
//!
//! [`Sessions`] is the SDK's [`SessionManager`]: the SDK's own local manager
//! runs each session (its worker, its routing of messages to streams), and
//! this layer keeps what the SDK sends on each stream, a call's stream and
//! the standalone `GET /mcp` stream, in a [`Ring`](abx_domain::resume::Ring) of its own (the last
//! `STREAM_MESSAGES` messages and `STREAM_BYTES` bytes), numbered with
//! its own event ids (`<stream>:<seq>` for a call's, `<seq>` for the
//! standalone one's). A task drains each of the SDK's streams into its ring
//! whether or not a client reads it, so a call that ends while its client is
//! away leaves its answer in the ring; a connection reads the ring. A call's
//! stream is kept for at least [`KEEP_FINISHED`] after its answer (until the
//! session closes, or newer ended calls of the session pass [`MAX_FINISHED`]
//! streams or [`FINISHED_BYTES`] bytes).
//!
//! A resume (`Last-Event-ID`) gets exactly the events after the one it
//! names, then the rest live. One from further back than a ring holds gets
//! an explicit marker: MCP defines no gap message, so a call's stream
//! answers the call with a JSON-RPC error ([`DATA_LOSS`], `data.lost`
//! counting the messages lost, `data.resume_from` naming where the held
//! ones start), which clients surface as the call's error; the standalone
//! stream, which answers no request, carries an error-level log message
//! with the same data, then the rest.
//!
//! While a client reads a stream, the stream's producer waits for it rather
//! than evict what it has not read (as the SDK's channel did); only a stream
//! nobody reads loses its oldest messages.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use abx_domain::resume::{parse_cursor, MalformedCursor, Slot};
use rmcp::model::{ClientJsonRpcMessage, ErrorCode, ErrorData, RequestId, ServerJsonRpcMessage};
use rmcp::transport::streamable_http_server::session::local::{LocalSessionManager, LocalSessionManagerError};
use rmcp::transport::streamable_http_server::session::{ServerSseMessage, SessionId, SessionManager};
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use super::kept::{drain, Kept, Reader, STREAM_BYTES, STREAM_MESSAGES};

/// How long a call's stream is kept at least after its answer.
pub const KEEP_FINISHED: Duration = Duration::from_secs(60);
/// Ended call streams a session keeps; the oldest goes first.
pub const MAX_FINISHED: usize = 32;
/// Bytes of ended call streams a session keeps; the oldest goes first.
pub const FINISHED_BYTES: usize = 4 << 20;
/// Streams forgotten whose resume is still answered with the count lost.
const MAX_GONE: usize = 1024;
/// The JSON-RPC error code of a resume from further back than a ring holds
/// (in the range JSON-RPC leaves to servers, unused by MCP).
pub const DATA_LOSS: i32 = -32030;

/// A call stream no longer held: what a resume of it is told.
struct Gone {
    stream: u64,
    request: RequestId,
    /// Messages the stream had in all.
    total: u64,
}

#[derive(Default)]
struct Calls {
    /// The id the next call's stream gets (ids start at 1).
    next: u64,
    kept: BTreeMap<u64, Arc<Kept>>,
    gone: VecDeque<Gone>,
}

/// One session's streams.
struct Session {
    common: Arc<Kept>,
    common_drained: AtomicBool,
    calls: Mutex<Calls>,
    closed: CancellationToken,
}

/// Where a `Last-Event-ID` points.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Position {
    Common(u64),
    Call { stream: u64, seq: u64 },
}

fn position(text: &str) -> Result<Position, MalformedCursor> {
    if text.contains(':') {
        parse_cursor::<2>(text).map(|[stream, seq]| Position::Call { stream, seq })
    } else {
        parse_cursor::<1>(text).map(|[seq]| Position::Common(seq))
    }
}

/// A `Last-Event-ID` this session never gave.
#[derive(Debug, thiserror::Error)]
pub enum ResumeError {
    /// Not an id of this server.
    #[error("Last-Event-ID {0:?} is not an event id of this server")]
    Malformed(String),
    /// An event not sent yet, or a stream not opened yet.
    #[error("Last-Event-ID {0:?} names an event this session has not sent")]
    Future(String),
    /// A stream forgotten so long ago that not even its count is kept.
    #[error("Last-Event-ID {0:?} names a stream no longer held: its messages and answer are lost")]
    Forgotten(String),
}

/// Errors of [`Sessions`] (the SDK answers them 500, or an empty stream for a resume).
#[derive(Debug, thiserror::Error)]
pub enum SessionsError {
    /// The SDK's session manager refused.
    #[error(transparent)]
    Local(#[from] LocalSessionManagerError),
    /// A session the SDK knows and this layer does not.
    #[error("session {0} not found")]
    Unknown(SessionId),
    /// A resume this layer refuses.
    #[error(transparent)]
    Resume(#[from] ResumeError),
}

/// The MCP session manager: the SDK's local one, with each stream kept for a resume.
#[derive(Default)]
pub struct Sessions {
    local: LocalSessionManager,
    sessions: Mutex<HashMap<SessionId, Arc<Session>>>,
}

impl Sessions {
    /// Wraps the SDK's local manager (configured by the caller).
    pub fn new(local: LocalSessionManager) -> Self {
        Sessions { local, sessions: Mutex::default() }
    }

    /// The SDK's manager of the sessions' workers.
    pub fn local(&self) -> &LocalSessionManager {
        &self.local
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<SessionId, Arc<Session>>> {
        self.sessions.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn session(&self, id: &SessionId) -> Result<Arc<Session>, SessionsError> {
        self.lock().get(id).cloned().ok_or_else(|| SessionsError::Unknown(id.clone()))
    }

    /// Refuses a `Last-Event-ID` the session `id` never gave (malformed, or
    /// ahead of what it sent), or whose stream is forgotten. An unknown
    /// session passes: the SDK answers it 404.
    ///
    /// # Errors
    /// [`ResumeError`].
    pub fn check_resume(&self, id: &str, last_event_id: &str) -> Result<(), ResumeError> {
        let Some(session) = self.lock().get(id).cloned() else { return Ok(()) };
        let future = || ResumeError::Future(last_event_id.chars().take(64).collect());
        let sent = |kept: &Kept| kept.ring.next_seq() - 1;
        match position(last_event_id).map_err(|m| ResumeError::Malformed(m.0))? {
            Position::Common(seq) if seq > sent(&session.common) => Err(future()),
            Position::Common(_) => Ok(()),
            Position::Call { stream, seq } => match session.find(stream) {
                Found::Kept(kept) if seq > sent(&kept) => Err(future()),
                Found::Gone { total, .. } if seq > total => Err(future()),
                Found::Kept(_) | Found::Gone { .. } => Ok(()),
                Found::Forgotten => Err(ResumeError::Forgotten(last_event_id.chars().take(64).collect())),
                Found::Future => Err(future()),
            },
        }
    }
}

enum Found {
    Kept(Arc<Kept>),
    Gone { request: RequestId, total: u64 },
    Forgotten,
    Future,
}

impl Session {
    fn new() -> Self {
        Session {
            common: Arc::new(Kept::new(0, None)),
            common_drained: AtomicBool::new(false),
            calls: Mutex::new(Calls { next: 1, ..Calls::default() }),
            closed: CancellationToken::new(),
        }
    }

    fn calls(&self) -> MutexGuard<'_, Calls> {
        self.calls.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn find(&self, stream: u64) -> Found {
        let calls = self.calls();
        if let Some(kept) = calls.kept.get(&stream) {
            return Found::Kept(Arc::clone(kept));
        }
        if let Some(gone) = calls.gone.iter().find(|g| g.stream == stream) {
            return Found::Gone { request: gone.request.clone(), total: gone.total };
        }
        if stream == 0 || stream >= calls.next {
            Found::Future
        } else {
            Found::Forgotten
        }
    }

    /// A new call's stream; forgets the ended ones past their time or count.
    fn open_call(&self, request: Option<RequestId>) -> Arc<Kept> {
        let mut calls = self.calls();
        let ended: Vec<(u64, Instant, usize)> =
            calls.kept.values().filter_map(|k| Some((k.id, k.ended_at()?, k.ring.held_now().1))).collect();
        let mut count = ended.len();
        let mut bytes: usize = ended.iter().map(|(_, _, bytes)| bytes).sum();
        // Oldest first: past their time, or while over the count or the bytes.
        for (id, at, held) in ended {
            if count > MAX_FINISHED || bytes > FINISHED_BYTES || at.elapsed() >= KEEP_FINISHED {
                calls.forget(id);
                count -= 1;
                bytes -= held;
            }
        }
        let id = calls.next;
        calls.next += 1;
        let kept = Arc::new(Kept::new(id, request));
        calls.kept.insert(id, Arc::clone(&kept));
        kept
    }
}

impl Calls {
    fn forget(&mut self, id: u64) {
        let Some(kept) = self.kept.remove(&id) else { return };
        if let Some(request) = kept.request.clone() {
            self.gone.push_back(Gone { stream: id, request, total: kept.ring.next_seq() - 1 });
            if self.gone.len() > MAX_GONE {
                self.gone.pop_front();
            }
        }
    }
}

/// The answer to `request` saying that messages of its stream are gone; it
/// stands in for them, so it carries the id of the last one lost (a client
/// resuming from it gets the messages still held).
fn lost_answer(request: RequestId, message: String, data: Value, id: String) -> ServerSseMessage {
    let error = ErrorData::new(ErrorCode(DATA_LOSS), message, Some(data));
    ServerSseMessage::new(id, ServerJsonRpcMessage::error(error, Some(request)))
}

impl SessionManager for Sessions {
    type Error = SessionsError;
    type Transport = <LocalSessionManager as SessionManager>::Transport;

    async fn create_session(&self) -> Result<(SessionId, Self::Transport), Self::Error> {
        let (id, transport) = self.local.create_session().await?;
        self.lock().insert(id.clone(), Arc::new(Session::new()));
        Ok((id, transport))
    }

    async fn initialize_session(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<ServerJsonRpcMessage, Self::Error> {
        Ok(self.local.initialize_session(id, message).await?)
    }

    async fn has_session(&self, id: &SessionId) -> Result<bool, Self::Error> {
        Ok(self.local.has_session(id).await?)
    }

    async fn close_session(&self, id: &SessionId) -> Result<(), Self::Error> {
        if let Some(session) = self.lock().remove(id) {
            session.closed.cancel();
        }
        Ok(self.local.close_session(id).await?)
    }

    async fn create_stream(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<impl futures_util::Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        let session = self.session(id)?;
        let request = match &message {
            ClientJsonRpcMessage::Request(request) => Some(request.id.clone()),
            _ => None,
        };
        let inner = self.local.create_stream(id, message).await?;
        let kept = session.open_call(request);
        let reader = Reader::attach(&kept, 1, None, session.closed.clone());
        tokio::spawn(drain(kept, inner, session.closed.clone()));
        Ok(reader)
    }

    async fn accept_message(&self, id: &SessionId, message: ClientJsonRpcMessage) -> Result<(), Self::Error> {
        Ok(self.local.accept_message(id, message).await?)
    }

    async fn create_standalone_stream(
        &self,
        id: &SessionId,
    ) -> Result<impl futures_util::Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        let session = self.session(id)?;
        if !session.common_drained.swap(true, Ordering::AcqRel) {
            match self.local.create_standalone_stream(id).await {
                Ok(inner) => drop(tokio::spawn(drain(Arc::clone(&session.common), inner, session.closed.clone()))),
                Err(error) => {
                    session.common_drained.store(false, Ordering::Release);
                    return Err(error.into());
                }
            }
        }
        if session.common.presence.count() > 0 {
            return Ok(Reader::idle(session.closed.clone()));
        }
        // A new standalone stream starts with what no standalone connection was sent.
        let from = session.common.ring.read_mark();
        Ok(Reader::attach(&session.common, from, None, session.closed.clone()))
    }

    async fn resume(
        &self,
        id: &SessionId,
        last_event_id: String,
    ) -> Result<impl futures_util::Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        let session = self.session(id)?;
        self.check_resume(id, &last_event_id)?;
        let position = position(&last_event_id).map_err(|m| ResumeError::Malformed(m.0))?;
        match position {
            Position::Common(seq) => {
                if session.common.presence.count() > 0 {
                    return Ok(Reader::idle(session.closed.clone()));
                }
                let marker = match session.common.ring.get(seq + 1) {
                    Slot::Gap(lost) => common_loss(lost, &last_event_id, session.common.event_id(seq + lost)),
                    _ => None,
                };
                Ok(Reader::attach(&session.common, seq + 1, marker, session.closed.clone()))
            }
            Position::Call { stream, seq } => match session.find(stream) {
                Found::Kept(kept) => match (kept.ring.get(seq + 1), kept.request.clone()) {
                    (Slot::Gap(lost), Some(request)) => {
                        let (held, _) = kept.ring.held_now();
                        let resume_from = kept.event_id(seq + lost);
                        let message = format!(
                            "{lost} messages of this call's stream after event {last_event_id} are no longer held \
                             (each stream keeps its last {STREAM_MESSAGES} messages and {STREAM_BYTES} bytes): \
                             this answer replaces the call's; resume from {resume_from} for the {held} held"
                        );
                        let data = json!({"code": "data_loss", "lost": lost, "held": held, "resume_from": resume_from});
                        Ok(Reader::of(vec![lost_answer(request, message, data, resume_from)]))
                    }
                    _ => Ok(Reader::attach(&kept, seq + 1, None, session.closed.clone())),
                },
                Found::Gone { request, total } => {
                    let lost = total - seq;
                    let message = format!(
                        "the {lost} messages of this call's stream after event {last_event_id}, its answer \
                         included, are no longer held (an ended call's stream is kept {}s, and at most {MAX_FINISHED} \
                         of them and {FINISHED_BYTES} bytes per session)",
                        KEEP_FINISHED.as_secs()
                    );
                    let data = json!({"code": "data_loss", "lost": lost, "held": 0});
                    let id = format!("{stream}:{total}");
                    Ok(Reader::of(vec![lost_answer(request, message, data, id)]))
                }
                Found::Forgotten | Found::Future => Err(ResumeError::Forgotten(last_event_id).into()),
            },
        }
    }
}

/// The standalone stream's marker of `lost` messages: an error-level log
/// message (it answers no request), then the rest follows.
fn common_loss(lost: u64, last_event_id: &str, id: String) -> Option<ServerSseMessage> {
    let text = format!(
        "{lost} messages of the session's standalone stream after event {last_event_id} are no longer held \
         (it keeps its last {STREAM_MESSAGES} messages and {STREAM_BYTES} bytes)"
    );
    let notification = json!({"jsonrpc": "2.0", "method": "notifications/message", "params": {
        "level": "error", "logger": "agent-sandbox-server",
        "data": {"code": "data_loss", "lost": lost, "message": text}}});
    serde_json::from_value::<ServerJsonRpcMessage>(notification).ok().map(|m| ServerSseMessage::new(id, m))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_ids_name_a_call_stream_and_a_position_or_the_standalone_stream() {
        assert_eq!(position("3:17"), Ok(Position::Call { stream: 3, seq: 17 }));
        assert_eq!(position("0"), Ok(Position::Common(0)));
        for bad in ["", "1/2", "a", "1:2:3", "-1"] {
            assert!(position(bad).is_err(), "{bad}");
        }
        let kept = Kept::new(4, Some(RequestId::Number(9)));
        assert_eq!((kept.event_id(2), Kept::new(0, None).event_id(5)), ("4:2".to_string(), "5".to_string()));
    }

    #[test]
    fn ended_calls_past_the_count_are_forgotten_oldest_first_and_their_resume_counted() {
        let session = Session::new();
        let first = session.open_call(Some(RequestId::Number(1)));
        first.ring.push(ServerSseMessage::default(), false);
        *first.ended.lock().expect("lock") = Some(Instant::now());
        for i in 0..MAX_FINISHED - 1 {
            let kept = session.open_call(Some(RequestId::Number(2 + i as i64)));
            *kept.ended.lock().expect("lock") = Some(Instant::now());
        }
        let live = session.open_call(None);
        assert!(matches!(session.find(first.id), Found::Kept(_)), "{MAX_FINISHED} ended calls are kept");
        *live.ended.lock().expect("lock") = Some(Instant::now());
        session.open_call(None);
        assert!(matches!(session.find(first.id), Found::Gone { total: 1, .. }), "the oldest ended call went first");
        assert!(matches!(session.find(1000), Found::Future));
    }

    #[test]
    fn ended_calls_past_the_sessions_bytes_are_forgotten_oldest_first() {
        let session = Session::new();
        let ended = |n: i64| {
            let kept = session.open_call(Some(RequestId::Number(n)));
            kept.ring.push_sized(ServerSseMessage::default(), FINISHED_BYTES / 2 + 1, false);
            *kept.ended.lock().expect("lock") = Some(Instant::now());
            kept
        };
        let (first, second) = (ended(1), ended(2));
        assert!(matches!(session.find(first.id), Found::Kept(_)));
        session.open_call(None);
        assert!(matches!(session.find(first.id), Found::Gone { total: 1, .. }), "over the bytes: the oldest went");
        assert!(matches!(session.find(second.id), Found::Kept(_)));
    }
}
