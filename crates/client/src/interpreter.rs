//! [`CodeClient`]: the code-interpreter protocol (the code port, 49999, as
//! `e2b-code-interpreter` speaks it): contexts, and executions streamed as
//! NDJSON lines with rich results.
//!
//! Cancelling: dropping an [`ExecutionStream`] closes its connection and
//! the daemon interrupts the execution (the context and its state stay);
//! [`CodeClient::restart_context`] starts a fresh interpreter.

use abx_wire::api::code::{ContextInfo, CreateContextRequest, ExecuteRequest, ExecutionResult, OutputLine};
use abx_wire::codec::base64;
use abx_wire::endpoints::Port;
use futures_util::StreamExt;

use super::transport::Transport;
use super::{Client, ClientError};

/// Longest NDJSON line accepted from the code port.
const MAX_LINE_BYTES: usize = 128 * 1024 * 1024;

impl Client {
    /// A client of the code-interpreter port at `url`, with this client's
    /// credentials, timeouts, retries and connection pool.
    ///
    /// ```
    /// use abx_client::Client;
    ///
    /// let client = Client::builder("http://127.0.0.1:9000").token(Some("secret")).build()?;
    /// let code = client.code_interpreter("http://127.0.0.1:49999");
    /// assert_eq!(code.base_url(), "http://127.0.0.1:49999");
    /// # Ok::<(), abx_client::ClientError>(())
    /// ```
    pub fn code_interpreter(&self, url: &str) -> CodeClient {
        CodeClient { transport: self.transport.at(Port::Code, url) }
    }
}

/// A client of the code-interpreter port. Cheap to clone.
///
/// ```no_run
/// use abx_wire::api::code::{CreateContextRequest, ExecuteRequest};
/// # async fn demo(client: abx_client::Client) -> Result<(), abx_client::ClientError> {
/// let code = client.code_interpreter("http://127.0.0.1:49999");
/// let context = code.create_context(&CreateContextRequest::default()).await?;
/// code.run(&ExecuteRequest::in_context(&context.id, "x = 20")).await?;
/// let answer = code.run(&ExecuteRequest::in_context(&context.id, "x * 2 + 2")).await?;
/// assert_eq!(answer.text(), Some("42"));
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct CodeClient {
    transport: Transport,
}

impl CodeClient {
    /// The port's base URL, without a trailing slash.
    ///
    /// ```
    /// # let client = abx_client::Client::builder("http://h:9000").build()?;
    /// assert_eq!(client.code_interpreter("http://h:49999/").base_url(), "http://h:49999");
    /// # Ok::<(), abx_client::ClientError>(())
    /// ```
    pub fn base_url(&self) -> &str {
        &self.transport.base_url
    }

    /// `GET /health`: whether the port answers.
    ///
    /// # Errors
    /// Transport errors.
    ///
    /// ```no_run
    /// # async fn demo(code: abx_client::CodeClient) -> Result<(), abx_client::ClientError> {
    /// assert!(code.health().await?);
    /// # Ok(()) }
    /// ```
    pub async fn health(&self) -> Result<bool, ClientError> {
        let answer: String = self.transport.call("code_health", &[], &[], None::<&()>).await?;
        Ok(answer == "OK")
    }

    /// `POST /execute`: starts an execution and returns its lines as they
    /// come. Dropping the stream interrupts the execution.
    ///
    /// # Errors
    /// Transport errors and error answers (404 unknown context, 400 bad request).
    ///
    /// ```no_run
    /// use abx_wire::api::code::{ExecuteRequest, OutputLine};
    /// # async fn demo(code: abx_client::CodeClient) -> Result<(), abx_client::ClientError> {
    /// let mut lines = code.execute(&ExecuteRequest::new("for i in range(3): print(i)")).await?;
    /// while let Some(line) = lines.next().await? {
    ///     if let OutputLine::Stdout { text, .. } = line {
    ///         print!("{text}");
    ///     }
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn execute(&self, request: &ExecuteRequest) -> Result<ExecutionStream, ClientError> {
        let response = self.transport.open("code_execute", &[], &[], Some(request)).await?;
        Ok(ExecutionStream { response, buffer: Vec::new(), done: false, deadline: self.transport.deadline })
    }

    /// `POST /execute`, collected up to the end.
    ///
    /// # Errors
    /// As [`CodeClient::execute`], and a stream that breaks off.
    ///
    /// ```no_run
    /// use abx_wire::api::code::ExecuteRequest;
    /// # async fn demo(code: abx_client::CodeClient) -> Result<(), abx_client::ClientError> {
    /// let execution = code.run(&ExecuteRequest::new("import sys; print('hi'); 1 / 0")).await?;
    /// assert_eq!(execution.stdout(), "hi\n");
    /// assert_eq!(execution.error().map(|e| e.name).as_deref(), Some("ZeroDivisionError"));
    /// # Ok(()) }
    /// ```
    pub async fn run(&self, request: &ExecuteRequest) -> Result<Execution, ClientError> {
        self.execute(request).await?.collect().await
    }

    /// `POST /contexts`: a new context (Python in the server's base directory by default).
    ///
    /// # Errors
    /// Transport errors and error answers (400 unknown language or directory, 501 runtime missing).
    ///
    /// ```no_run
    /// use abx_wire::api::code::CreateContextRequest;
    /// # async fn demo(code: abx_client::CodeClient) -> Result<(), abx_client::ClientError> {
    /// let request = CreateContextRequest { language: Some("python".into()), cwd: Some("project".into()) };
    /// let context = code.create_context(&request).await?;
    /// println!("{} in {}", context.id, context.cwd);
    /// # Ok(()) }
    /// ```
    pub async fn create_context(&self, request: &CreateContextRequest) -> Result<ContextInfo, ClientError> {
        self.transport.call("code_contexts_create", &[], &[], Some(request)).await
    }

    /// `GET /contexts`: the live contexts.
    ///
    /// # Errors
    /// Transport errors and error answers.
    ///
    /// ```no_run
    /// # async fn demo(code: abx_client::CodeClient) -> Result<(), abx_client::ClientError> {
    /// for context in code.list_contexts().await? {
    ///     println!("{} {}", context.id, context.language);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn list_contexts(&self) -> Result<Vec<ContextInfo>, ClientError> {
        self.transport.call("code_contexts_list", &[], &[], None::<&()>).await
    }

    /// `POST /contexts/{id}/restart`: a fresh interpreter in the same working directory.
    ///
    /// # Errors
    /// Transport errors and error answers (404 unknown context).
    ///
    /// ```no_run
    /// # async fn demo(code: abx_client::CodeClient) -> Result<(), abx_client::ClientError> {
    /// code.restart_context("3f2a...").await?;
    /// # Ok(()) }
    /// ```
    pub async fn restart_context(&self, id: &str) -> Result<(), ClientError> {
        self.transport.call_empty("code_contexts_restart", &[("id", id)], None::<&()>).await.map(drop)
    }

    /// `DELETE /contexts/{id}`: ends the context's interpreter.
    ///
    /// # Errors
    /// Transport errors and error answers (404 unknown context).
    ///
    /// ```no_run
    /// # async fn demo(code: abx_client::CodeClient) -> Result<(), abx_client::ClientError> {
    /// code.delete_context("3f2a...").await?;
    /// # Ok(()) }
    /// ```
    pub async fn delete_context(&self, id: &str) -> Result<(), ClientError> {
        self.transport.call_empty("code_contexts_delete", &[("id", id)], None::<&()>).await.map(drop)
    }
}

/// The lines of one execution, as they arrive; dropping it interrupts the execution.
///
/// ```no_run
/// use abx_wire::api::code::ExecuteRequest;
/// # async fn demo(code: abx_client::CodeClient) -> Result<(), abx_client::ClientError> {
/// let mut lines = code.execute(&ExecuteRequest::new("while True: pass")).await?;
/// let first = lines.next().await?;
/// drop(lines); // the daemon interrupts the loop; the context lives on
/// # let _ = first; Ok(()) }
/// ```
#[derive(Debug)]
pub struct ExecutionStream {
    response: reqwest::Response,
    buffer: Vec<u8>,
    done: bool,
    deadline: Option<tokio::time::Instant>,
}

impl ExecutionStream {
    /// The next line; `None` after `end_of_execution`.
    ///
    /// # Errors
    /// Transport errors, a line that is not JSON, a stream that ends without
    /// `end_of_execution`, and the client's deadline.
    ///
    /// ```no_run
    /// use abx_wire::api::code::{ExecuteRequest, OutputLine};
    /// # async fn demo(code: abx_client::CodeClient) -> Result<(), abx_client::ClientError> {
    /// let mut lines = code.execute(&ExecuteRequest::new("print('a')")).await?;
    /// while let Some(line) = lines.next().await? {
    ///     println!("{line:?}");
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn next(&mut self) -> Result<Option<OutputLine>, ClientError> {
        loop {
            if self.done {
                return Ok(None);
            }
            if let Some(end) = self.buffer.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = self.buffer.drain(..=end).collect();
                if line.iter().all(u8::is_ascii_whitespace) {
                    continue;
                }
                let line: OutputLine = serde_json::from_slice(&line)
                    .map_err(|e| ClientError::Protocol(format!("an execution line is not valid JSON: {e}")))?;
                self.done = line == OutputLine::EndOfExecution;
                return Ok(Some(line));
            }
            let chunk = match self.deadline {
                None => self.response.chunk().await,
                Some(deadline) => tokio::time::timeout_at(deadline, self.response.chunk())
                    .await
                    .map_err(|_| ClientError::Timeout(std::time::Duration::ZERO))?,
            };
            match chunk.map_err(ClientError::Transport)? {
                Some(chunk) => {
                    if self.buffer.len() + chunk.len() > MAX_LINE_BYTES {
                        return Err(ClientError::Protocol("an execution line is too long".into()));
                    }
                    self.buffer.extend_from_slice(&chunk);
                }
                None => return Err(ClientError::Protocol("the execution stream ended before end_of_execution".into())),
            }
        }
    }

    /// Reads every remaining line into an [`Execution`] (keepalives left out).
    ///
    /// # Errors
    /// As [`ExecutionStream::next`].
    ///
    /// ```no_run
    /// use abx_wire::api::code::ExecuteRequest;
    /// # async fn demo(code: abx_client::CodeClient) -> Result<(), abx_client::ClientError> {
    /// let lines = code.execute(&ExecuteRequest::new("2 + 2")).await?;
    /// assert_eq!(lines.collect().await?.text(), Some("4"));
    /// # Ok(()) }
    /// ```
    pub async fn collect(mut self) -> Result<Execution, ClientError> {
        let mut lines = Vec::new();
        while let Some(line) = self.next().await? {
            if !matches!(line, OutputLine::Keepalive | OutputLine::EndOfExecution) {
                lines.push(line);
            }
        }
        Ok(Execution { lines })
    }

    /// The lines as a [`futures_util::Stream`], for stream combinators.
    ///
    /// ```no_run
    /// use futures_util::TryStreamExt;
    /// use abx_wire::api::code::ExecuteRequest;
    /// # async fn demo(code: abx_client::CodeClient) -> Result<(), abx_client::ClientError> {
    /// let lines = code.execute(&ExecuteRequest::new("print(1)")).await?;
    /// let all: Vec<_> = lines.into_stream().try_collect().await?;
    /// # let _ = all; Ok(()) }
    /// ```
    pub fn into_stream(self) -> impl futures_util::Stream<Item = Result<OutputLine, ClientError>> + Send {
        futures_util::stream::unfold(Some(self), |stream| async move {
            let mut stream = stream?;
            match stream.next().await {
                Ok(Some(line)) => Some((Ok(line), Some(stream))),
                Ok(None) => None,
                Err(e) => Some((Err(e), None)),
            }
        })
        .boxed()
    }
}

/// A finished execution: its lines in order (keepalives and the end marker
/// left out), and what an orchestrator usually wants from them.
///
/// ```
/// use abx_wire::api::code::OutputLine;
/// use abx_client::Execution;
///
/// let execution = Execution {
///     lines: vec![
///         OutputLine::NumberOfExecutions { execution_count: 3 },
///         OutputLine::Stdout { text: "hi\n".into(), timestamp: "2026-01-01T00:00:00Z".into() },
///     ],
/// };
/// assert_eq!(execution.stdout(), "hi\n");
/// assert_eq!(execution.execution_count(), Some(3));
/// assert!(execution.error().is_none());
/// ```
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Execution {
    /// Every line, in order.
    pub lines: Vec<OutputLine>,
}

/// The error an execution raised.
///
/// ```
/// use abx_wire::api::code::OutputLine;
/// use abx_client::Execution;
///
/// let line = OutputLine::Error { name: "ValueError".into(), value: "bad".into(), traceback: "...".into() };
/// let error = Execution { lines: vec![line] }.error().unwrap();
/// assert_eq!((error.name.as_str(), error.value.as_str()), ("ValueError", "bad"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecutionError {
    /// Exception name (`ValueError`, `TimeoutError` when interrupted by its timeout).
    pub name: String,
    /// Exception message.
    pub value: String,
    /// Formatted traceback.
    pub traceback: String,
}

impl Execution {
    /// Everything written to standard output, in order.
    ///
    /// ```
    /// assert_eq!(abx_client::Execution::default().stdout(), "");
    /// ```
    pub fn stdout(&self) -> String {
        self.text_of(|line| if let OutputLine::Stdout { text, .. } = line { Some(text) } else { None })
    }

    /// Everything written to standard error, in order.
    ///
    /// ```
    /// use abx_wire::api::code::OutputLine;
    /// use abx_client::Execution;
    ///
    /// let line = OutputLine::Stderr { text: "warning\n".into(), timestamp: String::new() };
    /// assert_eq!(Execution { lines: vec![line] }.stderr(), "warning\n");
    /// ```
    pub fn stderr(&self) -> String {
        self.text_of(|line| if let OutputLine::Stderr { text, .. } = line { Some(text) } else { None })
    }

    fn text_of<'a>(&'a self, pick: impl Fn(&'a OutputLine) -> Option<&'a String>) -> String {
        self.lines.iter().filter_map(pick).map(String::as_str).collect()
    }

    /// Every displayed value, in order (`display(...)` calls and the final expression's).
    ///
    /// ```
    /// use abx_wire::api::code::{ExecutionResult, OutputLine};
    /// use abx_client::Execution;
    ///
    /// let shown = ExecutionResult { text: Some("<Figure>".into()), ..Default::default() };
    /// let execution = Execution { lines: vec![OutputLine::Result(Box::new(shown))] };
    /// assert_eq!(execution.results().count(), 1);
    /// ```
    pub fn results(&self) -> impl Iterator<Item = &ExecutionResult> {
        self.lines.iter().filter_map(|line| if let OutputLine::Result(r) = line { Some(r.as_ref()) } else { None })
    }

    /// The value of the final expression, if it has one.
    ///
    /// ```
    /// use abx_wire::api::code::{ExecutionResult, OutputLine};
    /// use abx_client::Execution;
    ///
    /// let main = ExecutionResult { text: Some("42".into()), is_main_result: true, ..Default::default() };
    /// let execution = Execution { lines: vec![OutputLine::Result(Box::new(main))] };
    /// assert_eq!(execution.main_result().and_then(|r| r.text.as_deref()), Some("42"));
    /// ```
    pub fn main_result(&self) -> Option<&ExecutionResult> {
        self.results().find(|r| r.is_main_result)
    }

    /// The final expression's value as text (`repr` in Python).
    ///
    /// ```
    /// assert_eq!(abx_client::Execution::default().text(), None);
    /// ```
    pub fn text(&self) -> Option<&str> {
        self.main_result()?.text.as_deref()
    }

    /// The error the execution raised, if any.
    ///
    /// ```
    /// assert!(abx_client::Execution::default().error().is_none());
    /// ```
    pub fn error(&self) -> Option<ExecutionError> {
        self.lines.iter().find_map(|line| match line {
            OutputLine::Error { name, value, traceback } => {
                Some(ExecutionError { name: name.clone(), value: value.clone(), traceback: traceback.clone() })
            }
            _ => None,
        })
    }

    /// The context's execution counter for this execution.
    ///
    /// ```
    /// use abx_wire::api::code::OutputLine;
    /// use abx_client::Execution;
    ///
    /// let execution = Execution { lines: vec![OutputLine::NumberOfExecutions { execution_count: 7 }] };
    /// assert_eq!(execution.execution_count(), Some(7));
    /// ```
    pub fn execution_count(&self) -> Option<u64> {
        self.lines.iter().find_map(|line| match line {
            OutputLine::NumberOfExecutions { execution_count } => Some(*execution_count),
            _ => None,
        })
    }

    /// The first PNG image among the results (a matplotlib chart), decoded.
    ///
    /// # Errors
    /// [`ClientError::Protocol`] when the image is not valid base64.
    ///
    /// ```
    /// use abx_wire::api::code::{ExecutionResult, OutputLine};
    /// use abx_client::Execution;
    ///
    /// let chart = ExecutionResult { png: Some("iVBORw0KGgo=".into()), ..Default::default() };
    /// let execution = Execution { lines: vec![OutputLine::Result(Box::new(chart))] };
    /// assert_eq!(execution.png()?.unwrap(), b"\x89PNG\r\n\x1a\n");
    /// # Ok::<(), abx_client::ClientError>(())
    /// ```
    pub fn png(&self) -> Result<Option<Vec<u8>>, ClientError> {
        self.results()
            .find_map(|r| r.png.as_deref())
            .map(|text| base64::decode(text).map_err(|e| ClientError::Protocol(format!("invalid PNG base64: {e}"))))
            .transpose()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_execution_gathers_its_lines() {
        let result = |text: &str, main| {
            OutputLine::Result(Box::new(ExecutionResult {
                text: Some(text.into()),
                is_main_result: main,
                ..Default::default()
            }))
        };
        let out = |text: &str| OutputLine::Stdout { text: text.into(), timestamp: String::new() };
        let execution = Execution { lines: vec![out("a"), result("shown", false), out("b\n"), result("7", true)] };
        assert_eq!(execution.stdout(), "ab\n");
        assert_eq!(execution.results().count(), 2);
        assert_eq!(execution.text(), Some("7"));
        assert_eq!(execution.png().expect("no image"), None);
        let bad = ExecutionResult { png: Some("%%".into()), ..Default::default() };
        assert!(Execution { lines: vec![OutputLine::Result(Box::new(bad))] }.png().is_err());
    }
}
