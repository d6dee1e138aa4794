//! The Connect protocol over HTTP/1.1 with the JSON codec, as the envd SDKs speak it.
//!
//! - Unary: `POST /<package>.<Service>/<Method>`, `Content-Type:
//!   application/json`, the message as the body; the answer is 200 with the
//!   message, or an error status with `{"code": "not_found", "message": ...}`.
//! - Server streaming: `Content-Type: application/connect+json`, the request
//!   message in one envelope (a flags byte, a big-endian `u32` length, the
//!   JSON); the answer is 200 and a sequence of envelopes, the last one
//!   flagged `0x02` and carrying `{}` or `{"error": {"code", "message"}}`.
//! - Client streaming (`StreamInput`): request envelopes in, one message
//!   envelope and the end envelope out.
//!
//! `Connect-Timeout-Ms` bounds a call ([`CallOptions`]); compression is not
//! offered (the SDKs send none), so a compressed request is refused.

use std::future::Future;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use futures_util::stream::BoxStream;
use futures_util::{Stream, StreamExt};
use serde::de::DeserializeOwned;
use serde::Serialize;

use abx_wire::api::envd::decode;

/// Largest request message accepted.
pub const MAX_MESSAGE_BYTES: usize = 16 * 1024 * 1024;
/// Envelope flag: the payload is compressed.
const FLAG_COMPRESSED: u8 = 0x01;
/// Envelope flag: the end-of-stream message.
const FLAG_END: u8 = 0x02;
/// envd's keepalive period when the client names none.
pub const DEFAULT_KEEPALIVE: Duration = Duration::from_secs(90);
/// Shortest keepalive period honoured.
const MIN_KEEPALIVE: Duration = Duration::from_secs(1);

/// A Connect error code: the error table's Connect column.
pub use abx_wire::api::ConnectCode as Code;

/// The HTTP status of a unary error with `code`.
pub fn status(code: Code) -> StatusCode {
    StatusCode::from_u16(code.http_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
}

/// A Connect error: a code and a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectError {
    /// The code.
    pub code: Code,
    /// What went wrong.
    pub message: String,
}

impl ConnectError {
    /// An error with `code` and `message`.
    pub fn new(code: Code, message: impl Into<String>) -> Self {
        ConnectError { code, message: message.into() }
    }

    fn body(&self) -> serde_json::Value {
        serde_json::json!({ "code": self.code.as_str(), "message": self.message })
    }
}

/// Unary errors: the code's status and `{"code", "message"}`.
impl IntoResponse for ConnectError {
    fn into_response(self) -> Response {
        let mut response = (status(self.code), self.body().to_string()).into_response();
        response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
        response
    }
}

/// How a call is bounded: `Connect-Timeout-Ms` and `Keepalive-Ping-Interval` (seconds).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallOptions {
    /// The call's deadline, from its start.
    pub timeout: Option<Duration>,
    /// How often a quiet stream sends a keepalive.
    pub keepalive: Duration,
}

impl CallOptions {
    /// Reads the headers.
    ///
    /// # Errors
    /// `invalid_argument` for a timeout that is not a number of milliseconds.
    pub fn from_headers(headers: &HeaderMap) -> Result<Self, ConnectError> {
        let text = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).map(str::trim);
        let timeout = match text("connect-timeout-ms") {
            None | Some("") => None,
            Some(ms) => match ms.parse::<u64>() {
                Ok(0) => None,
                Ok(ms) => Some(Duration::from_millis(ms)),
                Err(_) => {
                    return Err(ConnectError::new(Code::InvalidArgument, format!("invalid Connect-Timeout-Ms: {ms}")))
                }
            },
        };
        let keepalive = text("keepalive-ping-interval")
            .and_then(|s| s.parse::<u64>().ok())
            .map_or(DEFAULT_KEEPALIVE, |s| Duration::from_secs(s).max(MIN_KEEPALIVE));
        Ok(CallOptions { timeout, keepalive })
    }
}

fn content_type(headers: &HeaderMap) -> &str {
    headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("")
}

fn media_type(headers: &HeaderMap) -> String {
    content_type(headers).split(';').next().unwrap_or("").trim().to_ascii_lowercase()
}

/// Whether a request is a streaming call (`application/connect+...`).
pub fn is_streaming(headers: &HeaderMap) -> bool {
    media_type(headers).starts_with("application/connect+")
}

/// Checks a unary request's content type and encoding.
///
/// # Errors
/// `unimplemented` for the binary codec or a compressed body; `invalid_argument` otherwise.
pub fn check_unary(headers: &HeaderMap) -> Result<(), ConnectError> {
    if media_type(headers) == "application/proto" {
        return Err(ConnectError::new(Code::Unimplemented, "this server speaks the JSON codec only"));
    }
    match headers.get(header::CONTENT_ENCODING).and_then(|v| v.to_str().ok()) {
        None | Some("identity") => Ok(()),
        Some(other) => Err(ConnectError::new(Code::Unimplemented, format!("unsupported content encoding: {other}"))),
    }
}

/// Checks a streaming request's content type and encoding.
///
/// # Errors
/// As [`check_unary`].
pub fn check_stream(headers: &HeaderMap) -> Result<(), ConnectError> {
    if media_type(headers) == "application/connect+proto" {
        return Err(ConnectError::new(Code::Unimplemented, "this server speaks the JSON codec only"));
    }
    match headers.get("connect-content-encoding").and_then(|v| v.to_str().ok()) {
        None | Some("identity") => Ok(()),
        Some(other) => Err(ConnectError::new(Code::Unimplemented, format!("unsupported content encoding: {other}"))),
    }
}

/// 415 for a request whose content type is not one of `accepted` (a
/// streaming type on a unary method or the other way round), as the
/// protocol answers before any Connect error.
pub fn media_type_refusal(headers: &HeaderMap, accepted: &[&str]) -> Option<Response> {
    let media = media_type(headers);
    if accepted.contains(&media.as_str()) {
        return None;
    }
    let mut response =
        (StatusCode::UNSUPPORTED_MEDIA_TYPE, format!("unsupported content type: {media}")).into_response();
    if let Ok(value) = HeaderValue::from_str(&accepted.join(", ")) {
        response.headers_mut().insert("accept-post", value);
    }
    Some(response)
}

/// Content types of unary calls.
pub const UNARY_TYPES: [&str; 3] = ["application/json", "application/proto", ""];
/// Content types of streaming calls.
pub const STREAM_TYPES: [&str; 2] = ["application/connect+json", "application/connect+proto"];

/// Reads a unary request message.
///
/// # Errors
/// `invalid_argument` for a body that is not the message; `resource_exhausted` past [`MAX_MESSAGE_BYTES`].
pub async fn read_unary<T: DeserializeOwned>(body: Body) -> Result<T, ConnectError> {
    let bytes = axum::body::to_bytes(body, MAX_MESSAGE_BYTES)
        .await
        .map_err(|_| ConnectError::new(Code::ResourceExhausted, "the request message is too large"))?;
    decode(&bytes).map_err(|e| ConnectError::new(Code::InvalidArgument, e.to_string()))
}

/// Splits one envelope off the front of `buffer`: `(flags, payload)`, or `None` until it is complete.
pub fn split_envelope(buffer: &mut Vec<u8>) -> Result<Option<(u8, Vec<u8>)>, ConnectError> {
    if buffer.len() < 5 {
        return Ok(None);
    }
    let len = u32::from_be_bytes([buffer[1], buffer[2], buffer[3], buffer[4]]) as usize;
    if len > MAX_MESSAGE_BYTES {
        return Err(ConnectError::new(Code::ResourceExhausted, "the request message is too large"));
    }
    if buffer.len() < 5 + len {
        return Ok(None);
    }
    let flags = buffer[0];
    let payload = buffer[5..5 + len].to_vec();
    buffer.drain(..5 + len);
    if flags & FLAG_COMPRESSED != 0 {
        return Err(ConnectError::new(Code::Unimplemented, "compressed messages are not supported"));
    }
    Ok(Some((flags, payload)))
}

/// Reads the one request message of a server-streaming call.
///
/// # Errors
/// `invalid_argument` for a missing or malformed envelope or message.
pub async fn read_stream_request<T: DeserializeOwned>(body: Body) -> Result<T, ConnectError> {
    let mut buffer = axum::body::to_bytes(body, MAX_MESSAGE_BYTES + 5)
        .await
        .map_err(|_| ConnectError::new(Code::ResourceExhausted, "the request message is too large"))?
        .to_vec();
    match split_envelope(&mut buffer)? {
        Some((_, payload)) => decode(&payload).map_err(|e| ConnectError::new(Code::InvalidArgument, e.to_string())),
        None => Err(ConnectError::new(Code::InvalidArgument, "the request has no complete message envelope")),
    }
}

/// The request messages of a client-streaming call, as they arrive.
pub fn stream_messages<T: DeserializeOwned + Send + 'static>(
    body: Body,
) -> impl Stream<Item = Result<T, ConnectError>> + Send + 'static {
    let state = (body.into_data_stream(), Vec::new(), false);
    futures_util::stream::unfold(state, |(mut data, mut buffer, done)| async move {
        if done {
            return None;
        }
        loop {
            match split_envelope(&mut buffer) {
                Err(e) => return Some((Err(e), (data, buffer, true))),
                Ok(Some((flags, _))) if flags & FLAG_END != 0 => return None,
                Ok(Some((_, payload))) => {
                    let message = decode(&payload).map_err(|e| ConnectError::new(Code::InvalidArgument, e.to_string()));
                    let failed = message.is_err();
                    return Some((message, (data, buffer, failed)));
                }
                Ok(None) => {}
            }
            match data.next().await {
                Some(Ok(chunk)) => buffer.extend_from_slice(&chunk),
                Some(Err(_)) => {
                    let error = ConnectError::new(Code::Canceled, "the request stream broke");
                    return Some((Err(error), (data, buffer, true)));
                }
                None if buffer.is_empty() => return None,
                None => {
                    let error = ConnectError::new(Code::InvalidArgument, "the request stream ends inside a message");
                    return Some((Err(error), (data, buffer, true)));
                }
            }
        }
    })
}

/// A successful unary answer.
pub fn unary<T: Serialize>(message: &T) -> Response {
    match serde_json::to_vec(message) {
        Ok(body) => {
            let mut response = Response::new(Body::from(body));
            response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
            response
        }
        Err(e) => ConnectError::new(Code::Internal, format!("cannot encode the answer: {e}")).into_response(),
    }
}

/// One message in an envelope.
pub fn envelope(flags: u8, payload: &[u8]) -> Bytes {
    let mut frame = Vec::with_capacity(5 + payload.len());
    frame.push(flags);
    frame.extend_from_slice(&u32::try_from(payload.len()).unwrap_or(u32::MAX).to_be_bytes());
    frame.extend_from_slice(payload);
    Bytes::from(frame)
}

/// The end-of-stream envelope: `{}` or the error.
pub fn end_envelope(error: Option<&ConnectError>) -> Bytes {
    let body = match error {
        None => serde_json::json!({}),
        Some(e) => serde_json::json!({ "error": e.body() }),
    };
    envelope(FLAG_END, body.to_string().as_bytes())
}

/// What a streaming handler yields: a message, or the error that ends the stream.
pub type StreamItem<T> = Result<T, ConnectError>;

/// The request messages of a client-streaming call, as they arrive.
pub type Messages<T> = BoxStream<'static, Result<T, ConnectError>>;

/// A streaming answer: every message in an envelope, then the end envelope
/// (carrying the first error, which also ends the stream).
pub fn stream_response<T, S>(messages: S) -> Response
where
    T: Serialize + Send + 'static,
    S: Stream<Item = StreamItem<T>> + Send + 'static,
{
    let frames = futures_util::stream::unfold((Box::pin(messages), false), |(mut messages, ended)| async move {
        if ended {
            return None;
        }
        let frame = match messages.next().await {
            Some(Ok(message)) => match serde_json::to_vec(&message) {
                Ok(payload) => {
                    return Some((Ok::<_, std::convert::Infallible>(envelope(0, &payload)), (messages, false)))
                }
                Err(e) => end_envelope(Some(&ConnectError::new(Code::Internal, format!("cannot encode: {e}")))),
            },
            Some(Err(error)) => end_envelope(Some(&error)),
            None => end_envelope(None),
        };
        Some((Ok(frame), (messages, true)))
    });
    streaming(Body::from_stream(frames))
}

/// A streaming call that failed before its first message: 200 and the end envelope, as the protocol wants.
pub fn stream_error(error: ConnectError) -> Response {
    streaming(Body::from(end_envelope(Some(&error))))
}

fn streaming(body: Body) -> Response {
    let mut response = Response::new(body);
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/connect+json"));
    response
}

/// The two kinds of call, as their content types tell them apart
/// ([`UNARY_TYPES`], [`STREAM_TYPES`]).
#[derive(Debug, Clone, Copy)]
enum Kind {
    Unary,
    Streaming,
}

/// What every call passes before its message is read: a content type of
/// its `kind` (else 415), the JSON codec and no compression, and readable
/// [`CallOptions`]; then `answer` answers. A failed check or `answer`'s
/// error is answered as `kind` answers errors.
async fn serve<Fut>(headers: &HeaderMap, kind: Kind, answer: impl FnOnce(CallOptions) -> Fut) -> Response
where
    Fut: Future<Output = Result<Response, ConnectError>>,
{
    let accepted: &[&str] = match kind {
        Kind::Unary => &UNARY_TYPES,
        Kind::Streaming => &STREAM_TYPES,
    };
    if let Some(refusal) = media_type_refusal(headers, accepted) {
        return refusal;
    }
    let served = async {
        match kind {
            Kind::Unary => check_unary(headers)?,
            Kind::Streaming => check_stream(headers)?,
        }
        answer(CallOptions::from_headers(headers)?).await
    }
    .await;
    match (served, kind) {
        (Ok(response), _) => response,
        (Err(error), Kind::Unary) => error.into_response(),
        (Err(error), Kind::Streaming) => stream_error(error),
    }
}

/// `work` within the call's deadline, if it has one.
async fn within<T>(
    timeout: Option<Duration>,
    work: impl Future<Output = Result<T, ConnectError>>,
) -> Result<T, ConnectError> {
    match timeout {
        Some(limit) => tokio::time::timeout(limit, work).await.map_err(|_| deadline_exceeded())?,
        None => work.await,
    }
}

/// Serves one unary call: checks the request, reads the message, runs
/// `handler` within the call's deadline, and writes the answer or the error.
pub async fn handle_unary<Req, Res, F, Fut>(headers: &HeaderMap, body: Body, handler: F) -> Response
where
    Req: DeserializeOwned,
    Res: Serialize,
    F: FnOnce(Req) -> Fut,
    Fut: Future<Output = Result<Res, ConnectError>>,
{
    serve(headers, Kind::Unary, |options| async move {
        let request = read_unary::<Req>(body).await?;
        Ok(unary(&within(options.timeout, handler(request)).await?))
    })
    .await
}

/// The error of a call whose `Connect-Timeout-Ms` passed.
pub fn deadline_exceeded() -> ConnectError {
    ConnectError::new(Code::DeadlineExceeded, "the deadline (Connect-Timeout-Ms) passed")
}

/// Serves one server-streaming call: checks the request, reads its message,
/// and lets `open` start the stream (an error before the first message ends
/// the call with that error).
pub async fn handle_stream<Req, T, S, F, Fut>(headers: &HeaderMap, body: Body, open: F) -> Response
where
    Req: DeserializeOwned,
    T: Serialize + Send + 'static,
    S: Stream<Item = StreamItem<T>> + Send + 'static,
    F: FnOnce(Req, CallOptions) -> Fut,
    Fut: Future<Output = Result<S, ConnectError>>,
{
    serve(headers, Kind::Streaming, |options| async move {
        let request = read_stream_request::<Req>(body).await?;
        Ok(stream_response(open(request, options).await?))
    })
    .await
}

/// Serves one client-streaming call: checks the request, lets `consume`
/// take its messages as they arrive within the call's deadline, and sends
/// its answer as the one message of the response stream.
pub async fn handle_client_stream<Req, Res, F, Fut>(headers: &HeaderMap, body: Body, consume: F) -> Response
where
    Req: DeserializeOwned + Send + 'static,
    Res: Serialize + Send + 'static,
    F: FnOnce(Messages<Req>) -> Fut,
    Fut: Future<Output = Result<Res, ConnectError>>,
{
    serve(headers, Kind::Streaming, |options| async move {
        let answer = within(options.timeout, consume(stream_messages::<Req>(body).boxed())).await?;
        Ok(stream_response(futures_util::stream::once(async { Ok(answer) })))
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn envelopes_round_trip_and_split_across_reads() {
        let mut buffer = envelope(0, b"{\"a\":1}").to_vec();
        buffer.extend_from_slice(&end_envelope(None));
        let mut partial = buffer[..3].to_vec();
        assert_eq!(split_envelope(&mut partial).expect("ok"), None);
        let (flags, payload) = split_envelope(&mut buffer).expect("ok").expect("one");
        assert_eq!((flags, payload.as_slice()), (0, &b"{\"a\":1}"[..]));
        let (flags, payload) = split_envelope(&mut buffer).expect("ok").expect("end");
        assert_eq!((flags, payload.as_slice()), (FLAG_END, &b"{}"[..]));
        assert!(buffer.is_empty());
        let mut compressed = envelope(FLAG_COMPRESSED, b"x").to_vec();
        assert_eq!(split_envelope(&mut compressed).map_err(|e| e.code), Err(Code::Unimplemented));
        let error = ConnectError::new(Code::NotFound, "gone");
        let end = end_envelope(Some(&error));
        assert_eq!(&end[5..], br#"{"error":{"code":"not_found","message":"gone"}}"#);
        assert_eq!(end[0], 2);
        assert_eq!(u32::from_be_bytes([end[1], end[2], end[3], end[4]]) as usize, end.len() - 5);
    }

    #[test]
    fn headers_bound_calls() {
        let mut headers = HeaderMap::new();
        assert_eq!(
            CallOptions::from_headers(&headers).expect("ok"),
            CallOptions { timeout: None, keepalive: DEFAULT_KEEPALIVE }
        );
        headers.insert("connect-timeout-ms", HeaderValue::from_static("1500"));
        headers.insert("keepalive-ping-interval", HeaderValue::from_static("50"));
        let options = CallOptions::from_headers(&headers).expect("ok");
        assert_eq!((options.timeout, options.keepalive), (Some(Duration::from_millis(1500)), Duration::from_secs(50)));
        headers.insert("connect-timeout-ms", HeaderValue::from_static("soon"));
        assert!(CallOptions::from_headers(&headers).is_err());
        assert_eq!(status(Code::NotFound), StatusCode::NOT_FOUND);
        assert_eq!(status(Code::Unimplemented), StatusCode::NOT_IMPLEMENTED);
    }
}
