//! Process calls: `/shell`, `/shell/stream`, `/process/*`.

use std::time::Duration;

use futures_util::{Stream, StreamExt};

use super::{decode, sse, Client, ClientError};
use crate::api::process::{
    ExecRequest, OutputEvent, ProcessInfo, ProcessList, ProcessOutput, ShellEvent, ShellResult, SignalRequest,
    SignalResult, Started, StdinRequest, StdinResult,
};

impl Client {
    /// `POST /shell`: runs a command to completion.
    ///
    /// # Errors
    /// Transport errors and error answers (a timeout is `type: TimeoutError`).
    pub async fn shell(&self, request: &ExecRequest) -> Result<ShellResult, ClientError> {
        self.call("shell", &[], &[], Some(request)).await
    }

    /// `POST /shell/stream`: the command's line events, ending with `exit`
    /// (or a lone `error` when it cannot start). Dropping the stream
    /// disconnects, which makes the server terminate the command.
    ///
    /// # Errors
    /// Transport errors and error answers before the stream starts.
    pub async fn shell_stream(
        &self,
        request: &ExecRequest,
    ) -> Result<impl Stream<Item = Result<ShellEvent, ClientError>> + Send, ClientError> {
        let response =
            self.request("shell_stream", &[], &[])?.json(request).send().await.map_err(ClientError::Transport)?;
        if !response.status().is_success() {
            return Err(decode::<serde_json::Value>(response)
                .await
                .err()
                .unwrap_or_else(|| ClientError::Protocol("an error status with a success body".into())));
        }
        Ok(sse::events(response).filter_map(|item| async move {
            match item {
                Err(e) => Some(Err(e)),
                Ok(event) => {
                    let data = serde_json::from_str(&event.data).unwrap_or(serde_json::Value::Null);
                    ShellEvent::from_sse(&event.event, &data).map(Ok)
                }
            }
        }))
    }

    /// `POST /process/start`: starts a background process.
    ///
    /// # Errors
    /// Transport errors and error answers (`process_limit` when too many run).
    pub async fn start(&self, request: &ExecRequest) -> Result<Started, ClientError> {
        self.call("process_start", &[], &[], Some(request)).await
    }

    /// `GET /process/list`.
    ///
    /// # Errors
    /// Transport errors and error answers.
    pub async fn processes(&self) -> Result<Vec<ProcessInfo>, ClientError> {
        let list: ProcessList = self.call("process_list", &[], &[], None::<&()>).await?;
        Ok(list.processes)
    }

    /// `GET /process/{pid}`.
    ///
    /// # Errors
    /// Transport errors and error answers (404 for an unknown pid).
    pub async fn process(&self, pid: i32) -> Result<ProcessInfo, ClientError> {
        self.call("process_detail", &[("pid", &pid.to_string())], &[], None::<&()>).await
    }

    /// `POST /process/{pid}/signal`: sends signal number `signal` to the process's group.
    ///
    /// # Errors
    /// Transport errors and error answers (only 2, 9, 15, 18 and 20 are accepted).
    pub async fn signal(&self, pid: i32, signal: i32) -> Result<SignalResult, ClientError> {
        self.call("process_signal", &[("pid", &pid.to_string())], &[], Some(&SignalRequest::new(signal))).await
    }

    /// `POST /process/{pid}/stdin`: writes `data` (as base64, so any bytes)
    /// and closes stdin when `eof`.
    ///
    /// # Errors
    /// Transport errors and error answers (409 without a stdin pipe).
    pub async fn write_stdin(&self, pid: i32, data: &[u8], eof: bool) -> Result<StdinResult, ClientError> {
        use base64::Engine;
        let encoded = (!data.is_empty()).then(|| base64::engine::general_purpose::STANDARD.encode(data).into());
        let body = StdinRequest { data: None, data_base64: encoded, eof };
        self.call("process_stdin", &[("pid", &pid.to_string())], &[], Some(&body)).await
    }

    /// `GET /process/{pid}/output`: captured events from cursor `since`,
    /// waiting up to `wait` for one.
    ///
    /// # Errors
    /// Transport errors and error answers (409 without `capture_output`).
    pub async fn output(&self, pid: i32, since: u64, wait: Duration) -> Result<ProcessOutput, ClientError> {
        let query = [("since", since.to_string()), ("wait", wait.as_secs_f64().to_string())];
        self.call("process_output", &[("pid", &pid.to_string())], &query, None::<&()>).await
    }

    /// Follows a captured process's output until it has exited and every
    /// event has been read, long-polling `poll` at a time.
    pub fn follow(
        &self,
        pid: i32,
        since: u64,
        poll: Duration,
    ) -> impl Stream<Item = Result<OutputEvent, ClientError>> + Send + '_ {
        let start: (Option<u64>, std::vec::IntoIter<OutputEvent>) = (Some(since), Vec::new().into_iter());
        futures_util::stream::unfold(start, move |(mut cursor, mut pending)| async move {
            loop {
                if let Some(event) = pending.next() {
                    return Some((Ok(event), (cursor, pending)));
                }
                let since = cursor?;
                match self.output(pid, since, poll).await {
                    Err(e) => return Some((Err(e), (None, pending))),
                    Ok(chunk) if chunk.state != "running" && chunk.events.is_empty() => return None,
                    Ok(chunk) => {
                        cursor = Some(chunk.next);
                        pending = chunk.events.into_iter();
                    }
                }
            }
        })
    }
}
