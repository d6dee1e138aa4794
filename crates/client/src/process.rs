//! Process calls: `/shell`, `/shell/stream`, `/process/*`.
//!
//! Cancelling: dropping the stream of [`Client::shell_stream`] disconnects,
//! and the daemon kills the command's whole process group; a background
//! process runs until it exits or is stopped with [`Client::kill`] (or any
//! [`Client::signal`]).

use std::time::Duration;

use abx_wire::api::process::{
    ExecRequest, OutputEvent, ProcessInfo, ProcessList, ProcessOutput, ShellEvent, ShellResult, SignalRequest,
    SignalResult, Started, StdinRequest, StdinResult,
};
use abx_wire::codec::base64;
use futures_util::{Stream, StreamExt};

use super::{sse, Client, ClientError};

/// `SIGKILL`.
const SIGKILL: i32 = 9;

impl Client {
    /// `POST /shell`: runs a command to completion (split shell-style, no
    /// shell, unless `shell` is set) and returns its output and exit code.
    ///
    /// # Errors
    /// Transport errors and error answers (a timeout is `type: TimeoutError`:
    /// see [`ClientError::is_timeout`]).
    ///
    /// ```no_run
    /// use abx_wire::api::process::ExecRequest;
    /// # async fn demo(client: abx_client::Client) -> Result<(), abx_client::ClientError> {
    /// let request = ExecRequest { cwd: Some("project".into()), timeout: Some(120.0), ..ExecRequest::new("cargo build") };
    /// let run = client.shell(&request).await?;
    /// if run.exit_code != 0 {
    ///     eprintln!("{}", run.stderr);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn shell(&self, request: &ExecRequest) -> Result<ShellResult, ClientError> {
        self.call("shell", &[], &[], Some(request)).await
    }

    /// `POST /shell/stream`: the command's output line by line as it runs,
    /// ending with `exit` (or a lone `error` when it cannot start). Dropping
    /// the stream disconnects, which makes the daemon kill the command.
    ///
    /// # Errors
    /// Transport errors and error answers before the stream starts.
    ///
    /// ```no_run
    /// use futures_util::StreamExt;
    /// use abx_wire::api::process::{ExecRequest, ShellEvent};
    /// # async fn demo(client: abx_client::Client) -> Result<(), abx_client::ClientError> {
    /// let mut events = client.shell_stream(&ExecRequest::new("pytest -q")).await?;
    /// while let Some(event) = events.next().await {
    ///     match event? {
    ///         ShellEvent::Stdout { data } | ShellEvent::Stderr { data } => println!("{data}"),
    ///         ShellEvent::Exit { exit_code } => println!("exit {exit_code}"),
    ///         ShellEvent::Error { error } => eprintln!("{error}"),
    ///     }
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn shell_stream(
        &self,
        request: &ExecRequest,
    ) -> Result<impl Stream<Item = Result<ShellEvent, ClientError>> + Send + Unpin + use<>, ClientError> {
        let body = serde_json::to_value(request).map_err(|e| ClientError::Protocol(e.to_string()))?;
        let response = self.open("shell_stream", &[], &[], Some(&body)).await?;
        let events = sse::events(response).filter_map(|item| async move {
            match item {
                Err(e) => Some(Err(e)),
                Ok(event) => {
                    let data = serde_json::from_str(&event.data).unwrap_or(serde_json::Value::Null);
                    ShellEvent::from_sse(&event.event, &data).map(Ok)
                }
            }
        });
        Ok(self.transport.until_deadline(events))
    }

    /// `POST /process/start`: starts a background process.
    ///
    /// # Errors
    /// Transport errors and error answers (`process_limit` when too many run).
    ///
    /// ```no_run
    /// use abx_wire::api::process::ExecRequest;
    /// # async fn demo(client: abx_client::Client) -> Result<(), abx_client::ClientError> {
    /// let request = ExecRequest { capture_output: true, ..ExecRequest::new("python -m http.server 8000") };
    /// let started = client.start(&request).await?;
    /// println!("pid {}", started.pid);
    /// # Ok(()) }
    /// ```
    pub async fn start(&self, request: &ExecRequest) -> Result<Started, ClientError> {
        self.call("process_start", &[], &[], Some(request)).await
    }

    /// `GET /process/list`: the processes the daemon started.
    ///
    /// # Errors
    /// Transport errors and error answers.
    ///
    /// ```no_run
    /// # async fn demo(client: abx_client::Client) -> Result<(), abx_client::ClientError> {
    /// for process in client.processes().await? {
    ///     println!("{} {} {}", process.pid, process.state, process.command);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn processes(&self) -> Result<Vec<ProcessInfo>, ClientError> {
        let list: ProcessList = self.call("process_list", &[], &[], None::<&()>).await?;
        Ok(list.processes)
    }

    /// `GET /process/{pid}`: one started process.
    ///
    /// # Errors
    /// Transport errors and error answers (404 for an unknown pid).
    ///
    /// ```no_run
    /// # async fn demo(client: abx_client::Client) -> Result<(), abx_client::ClientError> {
    /// let info = client.process(4242).await?;
    /// println!("{} (exit {:?})", info.state, info.exit_code);
    /// # Ok(()) }
    /// ```
    pub async fn process(&self, pid: i32) -> Result<ProcessInfo, ClientError> {
        self.call("process_detail", &[("pid", &pid.to_string())], &[], None::<&()>).await
    }

    /// `POST /process/{pid}/signal`: sends signal number `signal` to the
    /// process's group (2, 9, 15, 18 and 20 are accepted).
    ///
    /// # Errors
    /// Transport errors and error answers (`signal_not_allowed` for other signals).
    ///
    /// ```no_run
    /// # async fn demo(client: abx_client::Client) -> Result<(), abx_client::ClientError> {
    /// client.signal(4242, 2).await?; // SIGINT, as Ctrl-C would
    /// # Ok(()) }
    /// ```
    pub async fn signal(&self, pid: i32, signal: i32) -> Result<SignalResult, ClientError> {
        self.call("process_signal", &[("pid", &pid.to_string())], &[], Some(&SignalRequest::new(signal))).await
    }

    /// Kills a background process and its whole process group (`SIGKILL`).
    ///
    /// # Errors
    /// As [`Client::signal`].
    ///
    /// ```no_run
    /// # async fn demo(client: abx_client::Client) -> Result<(), abx_client::ClientError> {
    /// client.kill(4242).await?;
    /// # Ok(()) }
    /// ```
    pub async fn kill(&self, pid: i32) -> Result<SignalResult, ClientError> {
        self.signal(pid, SIGKILL).await
    }

    /// `POST /process/{pid}/stdin`: writes `data` (as base64, so any bytes)
    /// and closes stdin when `eof`.
    ///
    /// # Errors
    /// Transport errors and error answers (409 without a stdin pipe).
    ///
    /// ```no_run
    /// # async fn demo(client: abx_client::Client) -> Result<(), abx_client::ClientError> {
    /// client.write_stdin(4242, b"SELECT 1;\n", true).await?;
    /// # Ok(()) }
    /// ```
    pub async fn write_stdin(&self, pid: i32, data: &[u8], eof: bool) -> Result<StdinResult, ClientError> {
        let encoded = (!data.is_empty()).then(|| base64::encode(data).into());
        let body = StdinRequest { data: None, data_base64: encoded, eof };
        self.call("process_stdin", &[("pid", &pid.to_string())], &[], Some(&body)).await
    }

    /// `GET /process/{pid}/output`: captured events from cursor `since`,
    /// waiting up to `wait` for one (keep `wait` under the per-call timeout).
    ///
    /// # Errors
    /// Transport errors and error answers (409 without `capture_output`).
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// # async fn demo(client: abx_client::Client) -> Result<(), abx_client::ClientError> {
    /// let chunk = client.output(4242, 0, Duration::from_secs(5)).await?;
    /// for event in &chunk.events {
    ///     print!("{}", event.data);
    /// }
    /// let next_cursor = chunk.next;
    /// # let _ = next_cursor; Ok(()) }
    /// ```
    pub async fn output(&self, pid: i32, since: u64, wait: Duration) -> Result<ProcessOutput, ClientError> {
        let query = [("since", since.to_string()), ("wait", wait.as_secs_f64().to_string())];
        self.call("process_output", &[("pid", &pid.to_string())], &query, None::<&()>).await
    }

    /// Follows a captured process's output until it has exited and every
    /// event has been read, long-polling `poll` at a time.
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use futures_util::StreamExt;
    /// # async fn demo(client: abx_client::Client) -> Result<(), abx_client::ClientError> {
    /// let mut output = client.follow(4242, 0, Duration::from_secs(10));
    /// while let Some(event) = output.next().await {
    ///     print!("{}", event?.data);
    /// }
    /// # Ok(()) }
    /// ```
    pub fn follow(
        &self,
        pid: i32,
        since: u64,
        poll: Duration,
    ) -> impl Stream<Item = Result<OutputEvent, ClientError>> + Send + Unpin + '_ {
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
        .boxed()
    }
}
