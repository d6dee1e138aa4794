//! Client calls of the terminal group: sessions over HTTP, and
//! [`PtyConnection`], the WebSocket attached to one session.
//!
//! Closing a connection leaves the session running (it can be re-attached
//! and replays its scrollback); [`Client::pty_close`] ends the shell.

use std::time::Duration;

use abx_wire::api::{
    ErrorBody, PtyClientMessage, PtyClosed, PtyCreateRequest, PtyCreated, PtyMessage, PtyResizeRequest, PtySessionInfo,
    PtySessionList,
};
use futures_util::stream::{SplitSink, SplitStream};
use futures_util::{SinkExt, StreamExt};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::{self, Message};
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

use super::{Client, ClientError};

type Socket = WebSocketStream<MaybeTlsStream<TcpStream>>;

impl Client {
    /// `POST /pty/sessions`: starts a shell on a new terminal.
    ///
    /// # Errors
    /// Transport errors and refusals (shell not allowed, session limit, ...).
    ///
    /// ```no_run
    /// use abx_wire::api::PtyCreateRequest;
    /// # async fn demo(client: abx_client::Client) -> Result<(), abx_client::ClientError> {
    /// let request = PtyCreateRequest { shell: Some("/bin/bash".into()), cols: Some(120), rows: Some(40), env: None };
    /// let created = client.pty_create(&request).await?;
    /// let terminal = client.pty_connect(&created.ws_url).await?;
    /// # let _ = terminal; Ok(()) }
    /// ```
    pub async fn pty_create(&self, request: &PtyCreateRequest) -> Result<PtyCreated, ClientError> {
        self.call("pty_create_session", &[], &[], Some(request)).await
    }

    /// `GET /pty/sessions`: every session, oldest first.
    ///
    /// # Errors
    /// Transport errors and error answers.
    ///
    /// ```no_run
    /// # async fn demo(client: abx_client::Client) -> Result<(), abx_client::ClientError> {
    /// for session in client.pty_list().await? {
    ///     println!("{} {} attached: {}", session.id, session.shell, session.attached);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn pty_list(&self) -> Result<Vec<PtySessionInfo>, ClientError> {
        let list: PtySessionList = self.call("pty_list_sessions", &[], &[], None::<&()>).await?;
        Ok(list.sessions)
    }

    /// `GET /pty/sessions/{id}`: one session's state.
    ///
    /// # Errors
    /// Transport errors; 404 for an unknown session.
    ///
    /// ```no_run
    /// # async fn demo(client: abx_client::Client) -> Result<(), abx_client::ClientError> {
    /// let session = client.pty_get("a1b2c3").await?;
    /// println!("exit code: {:?}", session.exit_code);
    /// # Ok(()) }
    /// ```
    pub async fn pty_get(&self, id: &str) -> Result<PtySessionInfo, ClientError> {
        self.call("pty_detail", &[("id", id)], &[], None::<&()>).await
    }

    /// `POST /pty/sessions/{id}/resize`.
    ///
    /// # Errors
    /// Transport errors; 400 for a size outside 1..=1000; 404 for an unknown session.
    ///
    /// ```no_run
    /// # async fn demo(client: abx_client::Client) -> Result<(), abx_client::ClientError> {
    /// client.pty_resize("a1b2c3", 200, 50).await?;
    /// # Ok(()) }
    /// ```
    pub async fn pty_resize(&self, id: &str, cols: u16, rows: u16) -> Result<PtySessionInfo, ClientError> {
        self.call("pty_resize", &[("id", id)], &[], Some(&PtyResizeRequest { cols, rows })).await
    }

    /// `DELETE /pty/sessions/{id}`: ends the shell and forgets the session.
    ///
    /// # Errors
    /// Transport errors; 404 for an unknown session.
    ///
    /// ```no_run
    /// # async fn demo(client: abx_client::Client) -> Result<(), abx_client::ClientError> {
    /// client.pty_close("a1b2c3").await?;
    /// # Ok(()) }
    /// ```
    pub async fn pty_close(&self, id: &str) -> Result<(), ClientError> {
        let _: PtyClosed = self.call("pty_delete_session", &[("id", id)], &[], None::<&()>).await?;
        Ok(())
    }

    /// Attaches to a session through its `ws_url` (from [`Client::pty_create`]
    /// or [`pty_url`]), sending this client's token.
    ///
    /// # Errors
    /// [`ClientError::Api`] when the server refuses the handshake (401, 403,
    /// 404 for an unknown session), [`ClientError::WebSocket`] otherwise,
    /// [`ClientError::Timeout`] when the handshake outlasts the per-call timeout.
    ///
    /// ```no_run
    /// use abx_client::pty_url;
    /// # async fn demo(client: abx_client::Client) -> Result<(), abx_client::ClientError> {
    /// let mut terminal = client.pty_connect(&pty_url("ws://127.0.0.1:9001", "a1b2c3")).await?;
    /// terminal.send_input("ls\r").await?;
    /// # Ok(()) }
    /// ```
    pub async fn pty_connect(&self, ws_url: &str) -> Result<PtyConnection, ClientError> {
        let mut request = ws_url.into_client_request().map_err(|e| ClientError::WebSocket(e.to_string()))?;
        if let Some(credentials) = &self.transport.credentials {
            credentials.apply(request.headers_mut());
        }
        let connect = async {
            match tokio_tungstenite::connect_async(request).await {
                Ok((socket, _)) => Ok(PtyConnection { socket }),
                Err(tungstenite::Error::Http(response)) => {
                    let status = response.status().as_u16();
                    let bytes = response.body().clone().unwrap_or_default();
                    let body = serde_json::from_slice::<ErrorBody>(&bytes).unwrap_or_else(|_| {
                        ErrorBody::new(format!("WebSocket handshake refused (HTTP {status})"), "ProtocolError")
                    });
                    Err(ClientError::api(status, body))
                }
                Err(e) => Err(ClientError::WebSocket(e.to_string())),
            }
        };
        self.transport.bounded(connect).await
    }
}

/// The WebSocket URL of session `id` on the PTY listener at `pty_base`
/// (`ws://127.0.0.1:9001` or `http://...`).
///
/// ```
/// use abx_client::pty_url;
///
/// assert_eq!(pty_url("http://10.0.0.7:9001", "a1"), "ws://10.0.0.7:9001/pty?session_id=a1");
/// ```
pub fn pty_url(pty_base: &str, id: &str) -> String {
    let base = pty_base.trim_end_matches('/');
    let base = base.strip_prefix("http://").map(|rest| format!("ws://{rest}")).unwrap_or_else(|| base.to_string());
    let id: String = form_urlencoded::byte_serialize(id.as_bytes()).collect();
    let path = abx_wire::endpoints::find("pty_connect").map_or("/pty", |e| e.path);
    format!("{base}{path}?session_id={id}")
}

/// A WebSocket attached to a terminal session.
///
/// ```no_run
/// use std::time::Duration;
/// # async fn demo(client: abx_client::Client, ws_url: &str) -> Result<(), abx_client::ClientError> {
/// let mut terminal = client.pty_connect(ws_url).await?;
/// terminal.send_input("echo ready\r").await?;
/// terminal.expect("ready", Duration::from_secs(5)).await?;
/// terminal.close().await;
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct PtyConnection {
    socket: Socket,
}

impl PtyConnection {
    /// Sends keystrokes or text.
    ///
    /// # Errors
    /// The connection broke.
    ///
    /// ```no_run
    /// # async fn demo(mut terminal: abx_client::PtyConnection) -> Result<(), abx_client::ClientError> {
    /// terminal.send_input("make test\r").await?;
    /// # Ok(()) }
    /// ```
    pub async fn send_input(&mut self, data: &str) -> Result<(), ClientError> {
        send(&mut self.socket, &PtyClientMessage::Input { data: data.to_string() }).await
    }

    /// Resizes the terminal.
    ///
    /// # Errors
    /// The connection broke.
    ///
    /// ```no_run
    /// # async fn demo(mut terminal: abx_client::PtyConnection) -> Result<(), abx_client::ClientError> {
    /// terminal.resize(132, 43).await?;
    /// # Ok(()) }
    /// ```
    pub async fn resize(&mut self, cols: u16, rows: u16) -> Result<(), ClientError> {
        send(&mut self.socket, &PtyClientMessage::Resize { cols, rows }).await
    }

    /// Sends a signal (`SIGINT`, ...) to the terminal's foreground process group.
    ///
    /// # Errors
    /// The connection broke.
    ///
    /// ```no_run
    /// # async fn demo(mut terminal: abx_client::PtyConnection) -> Result<(), abx_client::ClientError> {
    /// terminal.signal("SIGINT").await?;
    /// # Ok(()) }
    /// ```
    pub async fn signal(&mut self, name: &str) -> Result<(), ClientError> {
        send(&mut self.socket, &PtyClientMessage::Signal { signal: name.to_string() }).await
    }

    /// The next message; `None` once the server closed the connection.
    ///
    /// # Errors
    /// The connection broke or a message is not JSON.
    ///
    /// ```no_run
    /// # async fn demo(mut terminal: abx_client::PtyConnection) -> Result<(), abx_client::ClientError> {
    /// while let Some(message) = terminal.recv().await? {
    ///     if message.kind == "output" {
    ///         print!("{}", message.data.unwrap_or_default());
    ///     } else if message.is_event("exited") {
    ///         break;
    ///     }
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn recv(&mut self) -> Result<Option<PtyMessage>, ClientError> {
        receive(&mut self.socket).await
    }

    /// Reads until the terminal's output contains `needle`; returns the output
    /// read so far. Other messages are skipped.
    ///
    /// # Errors
    /// [`ClientError::Timeout`] when `needle` does not appear within `timeout`;
    /// [`ClientError::WebSocket`] when the connection closes first, or breaks.
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// # async fn demo(mut terminal: abx_client::PtyConnection) -> Result<(), abx_client::ClientError> {
    /// terminal.send_input("python3\r").await?;
    /// terminal.expect(">>> ", Duration::from_secs(10)).await?;
    /// # Ok(()) }
    /// ```
    pub async fn expect(&mut self, needle: &str, timeout: Duration) -> Result<String, ClientError> {
        let mut seen = String::new();
        let collect = async {
            while !seen.contains(needle) {
                match self.recv().await? {
                    Some(message) if message.kind == "output" => seen.push_str(message.data.as_deref().unwrap_or("")),
                    Some(_) => {}
                    None => return Err(ClientError::WebSocket(format!("closed before {needle:?} appeared"))),
                }
            }
            Ok(())
        };
        match tokio::time::timeout(timeout, collect).await {
            Ok(Ok(())) => Ok(seen),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(ClientError::Timeout(timeout)),
        }
    }

    /// Closes the connection (the session goes on).
    ///
    /// ```no_run
    /// # async fn demo(terminal: abx_client::PtyConnection) {
    /// terminal.close().await;
    /// # }
    /// ```
    pub async fn close(mut self) {
        let _ = self.socket.close(None).await;
    }

    /// Splits the connection so input and output can be handled by different tasks.
    ///
    /// ```no_run
    /// use abx_wire::api::PtyClientMessage;
    /// # async fn demo(terminal: abx_client::PtyConnection) -> Result<(), abx_client::ClientError> {
    /// let (mut input, mut output) = terminal.split();
    /// tokio::spawn(async move { input.send(&PtyClientMessage::Input { data: "exit\r".into() }).await });
    /// while let Some(message) = output.recv().await? {
    ///     println!("{message:?}");
    /// }
    /// # Ok(()) }
    /// ```
    pub fn split(self) -> (PtySender, PtyReceiver) {
        let (sink, stream) = self.socket.split();
        (PtySender { sink }, PtyReceiver { stream })
    }
}

/// The sending half of a [`PtyConnection`] (see [`PtyConnection::split`]).
///
/// ```no_run
/// use abx_wire::api::PtyClientMessage;
/// # async fn demo(mut input: abx_client::PtySender) -> Result<(), abx_client::ClientError> {
/// input.send(&PtyClientMessage::Resize { cols: 100, rows: 30 }).await?;
/// input.close().await;
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct PtySender {
    sink: SplitSink<Socket, Message>,
}

impl PtySender {
    /// Sends a message.
    ///
    /// # Errors
    /// The connection broke.
    ///
    /// ```no_run
    /// use abx_wire::api::PtyClientMessage;
    /// # async fn demo(mut input: abx_client::PtySender) -> Result<(), abx_client::ClientError> {
    /// input.send(&PtyClientMessage::Signal { signal: "SIGINT".into() }).await?;
    /// # Ok(()) }
    /// ```
    pub async fn send(&mut self, message: &PtyClientMessage) -> Result<(), ClientError> {
        let text = serde_json::to_string(message).map_err(|e| ClientError::Protocol(e.to_string()))?;
        self.sink.send(Message::text(text)).await.map_err(|e| ClientError::WebSocket(e.to_string()))
    }

    /// Closes the connection (the session goes on).
    ///
    /// ```no_run
    /// # async fn demo(mut input: abx_client::PtySender) {
    /// input.close().await;
    /// # }
    /// ```
    pub async fn close(&mut self) {
        let _ = self.sink.close().await;
    }
}

/// The receiving half of a [`PtyConnection`] (see [`PtyConnection::split`]).
///
/// ```no_run
/// # async fn demo(mut output: abx_client::PtyReceiver) -> Result<(), abx_client::ClientError> {
/// let first = output.recv().await?;
/// # let _ = first; Ok(()) }
/// ```
#[derive(Debug)]
pub struct PtyReceiver {
    stream: SplitStream<Socket>,
}

impl PtyReceiver {
    /// The next message; `None` once the server closed the connection.
    ///
    /// # Errors
    /// The connection broke or a message is not JSON.
    ///
    /// ```no_run
    /// # async fn demo(mut output: abx_client::PtyReceiver) -> Result<(), abx_client::ClientError> {
    /// while let Some(message) = output.recv().await? {
    ///     println!("{message:?}");
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn recv(&mut self) -> Result<Option<PtyMessage>, ClientError> {
        receive(&mut self.stream).await
    }
}

async fn send(socket: &mut Socket, message: &PtyClientMessage) -> Result<(), ClientError> {
    let text = serde_json::to_string(message).map_err(|e| ClientError::Protocol(e.to_string()))?;
    socket.send(Message::text(text)).await.map_err(|e| ClientError::WebSocket(e.to_string()))
}

async fn receive<S>(stream: &mut S) -> Result<Option<PtyMessage>, ClientError>
where
    S: futures_util::Stream<Item = Result<Message, tungstenite::Error>> + Unpin,
{
    loop {
        let text = match stream.next().await {
            None | Some(Ok(Message::Close(_))) => return Ok(None),
            Some(Err(tungstenite::Error::ConnectionClosed | tungstenite::Error::AlreadyClosed)) => return Ok(None),
            Some(Err(e)) => return Err(ClientError::WebSocket(e.to_string())),
            Some(Ok(Message::Text(text))) => text.to_string(),
            Some(Ok(Message::Binary(bytes))) => String::from_utf8_lossy(&bytes).into_owned(),
            Some(Ok(_)) => continue,
        };
        return serde_json::from_str(&text)
            .map(Some)
            .map_err(|e| ClientError::Protocol(format!("terminal message is not JSON: {e}")));
    }
}

#[cfg(test)]
mod tests {
    use super::pty_url;

    #[test]
    fn urls_are_built_from_a_base() {
        assert_eq!(pty_url("ws://127.0.0.1:9001/", "ab"), "ws://127.0.0.1:9001/pty?session_id=ab");
        assert_eq!(pty_url("http://h:7", "a b"), "ws://h:7/pty?session_id=a+b");
    }
}
