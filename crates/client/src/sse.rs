//! A minimal server-sent events reader over a streaming response: the
//! framing of `/shell/stream`, `/files/watch` and other SSE endpoints, for
//! endpoints this client does not wrap.

use bytes::{Buf, BytesMut};
use futures_util::{Stream, StreamExt};

use super::ClientError;

/// One event: its name (`message` when unnamed) and its data lines joined by `\n`.
///
/// ```
/// use abx_client::sse::SseEvent;
///
/// let event = SseEvent { event: "stdout".into(), data: r#"{"data":"hi"}"#.into() };
/// assert_eq!(event.event, "stdout");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    /// The `event:` field.
    pub event: String,
    /// The `data:` lines.
    pub data: String,
}

#[derive(Default)]
struct Parser {
    buffer: BytesMut,
    event: Option<String>,
    data: Vec<String>,
}

impl Parser {
    /// The next complete event in the buffer, if any.
    fn next_event(&mut self) -> Option<SseEvent> {
        while let Some(end) = self.buffer.iter().position(|b| *b == b'\n') {
            let raw = self.buffer.split_to(end);
            self.buffer.advance(1);
            let line = String::from_utf8_lossy(&raw);
            let line = line.strip_suffix('\r').unwrap_or(&line);
            if line.is_empty() {
                let event = self.event.take().unwrap_or_else(|| "message".into());
                if !self.data.is_empty() {
                    return Some(SseEvent { event, data: std::mem::take(&mut self.data).join("\n") });
                }
            } else if let Some(value) = field(line, "event") {
                self.event = Some(value.to_string());
            } else if let Some(value) = field(line, "data") {
                self.data.push(value.to_string());
            }
        }
        None
    }
}

fn field<'a>(line: &'a str, name: &str) -> Option<&'a str> {
    let rest = line.strip_prefix(name)?.strip_prefix(':')?;
    Some(rest.strip_prefix(' ').unwrap_or(rest))
}

/// The events of an SSE response, in order; ends with the response.
///
/// ```no_run
/// use futures_util::StreamExt;
/// use abx_client::sse;
/// # async fn demo(client: abx_client::Client) -> Result<(), abx_client::ClientError> {
/// let query = [("path", "logs".to_string()), ("timeout", "5".to_string())];
/// let response = client.request("files_watch", &[], &query)?.send().await.map_err(abx_client::ClientError::Transport)?;
/// let mut events = std::pin::pin!(sse::events(response));
/// while let Some(event) = events.next().await {
///     let event = event?;
///     println!("{}: {}", event.event, event.data);
/// }
/// # Ok(()) }
/// ```
pub fn events(response: reqwest::Response) -> impl Stream<Item = Result<SseEvent, ClientError>> + Send {
    let body = response.bytes_stream().boxed();
    futures_util::stream::unfold((body, Parser::default()), |(mut body, mut parser)| async move {
        loop {
            if let Some(event) = parser.next_event() {
                return Some((Ok(event), (body, parser)));
            }
            match body.next().await {
                Some(Ok(chunk)) => parser.buffer.extend_from_slice(&chunk),
                Some(Err(e)) => return Some((Err(ClientError::Transport(e)), (body, parser))),
                None => return None,
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_are_framed_by_blank_lines_and_comments_ignored() {
        let mut parser = Parser::default();
        parser
            .buffer
            .extend_from_slice(b": keep-alive\n\nevent: stdout\ndata: {\"data\":\"a\"}\n\nevent: exit\r\ndata:{\"exit");
        assert_eq!(parser.next_event(), Some(SseEvent { event: "stdout".into(), data: "{\"data\":\"a\"}".into() }));
        assert_eq!(parser.next_event(), None);
        parser.buffer.extend_from_slice(b"_code\":0}\r\n\r\n");
        assert_eq!(parser.next_event(), Some(SseEvent { event: "exit".into(), data: "{\"exit_code\":0}".into() }));
    }
}
