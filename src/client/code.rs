//! Code execution in the companion client: the dev_tools group of the API
//! port (`/code/run`, `/git/*`) and [`CodeClient`] for the code-interpreter
//! port (streamed executions and contexts).

use reqwest::StatusCode;

use super::{decode, Client, ClientError};
use crate::api::code::{
    CodeRunRequest, CodeRunResult, ContextInfo, CreateContextRequest, ExecuteRequest, GitDiff, GitStatus, OutputLine,
};
use crate::api::ErrorBody;

/// Longest NDJSON line accepted from the code port.
const MAX_LINE_BYTES: usize = 128 * 1024 * 1024;

impl Client {
    /// `POST /code/run`: runs a snippet once (`python`, `node` or `bash`).
    ///
    /// # Errors
    /// Transport errors and error answers (408 `TimeoutError` when it ran too long).
    pub async fn run_once(&self, request: &CodeRunRequest) -> Result<CodeRunResult, ClientError> {
        self.call("code_run", &[], &[], Some(request)).await
    }

    /// `GET /git/status` of the repository at `path`.
    ///
    /// # Errors
    /// Transport errors and error answers (400 `GitError` outside a repository).
    pub async fn git_status(&self, path: &str) -> Result<GitStatus, ClientError> {
        self.call("git_status", &[], &[("path", path.to_string())], None::<&()>).await
    }

    /// `GET /git/diff` of the repository at `path`, of the index with `staged`, of one `file`.
    ///
    /// # Errors
    /// Transport errors and error answers.
    pub async fn git_diff(&self, path: &str, staged: bool, file: Option<&str>) -> Result<GitDiff, ClientError> {
        let mut query = vec![("path", path.to_string()), ("staged", staged.to_string())];
        if let Some(file) = file {
            query.push(("file", file.to_string()));
        }
        self.call("git_diff", &[], &query, None::<&()>).await
    }

    /// A client of the code-interpreter port at `url`, with this client's credentials.
    pub fn code_interpreter(&self, url: &str) -> CodeClient {
        CodeClient { base_url: url.trim_end_matches('/').to_string(), http: self.http.clone() }
    }
}

/// A client of the code-interpreter port.
#[derive(Debug, Clone)]
pub struct CodeClient {
    base_url: String,
    http: reqwest::Client,
}

impl CodeClient {
    /// `POST /execute`: starts an execution and returns its stream of lines.
    ///
    /// # Errors
    /// Transport errors and error answers (404 unknown context, 400 bad request).
    pub async fn execute(&self, request: &ExecuteRequest) -> Result<ExecutionStream, ClientError> {
        let response =
            self.http.post(self.url("/execute")).json(request).send().await.map_err(ClientError::Transport)?;
        Ok(ExecutionStream { response: checked(response).await?, buffer: Vec::new(), done: false })
    }

    /// `POST /execute`, collecting every line up to the end (keepalives left out).
    ///
    /// # Errors
    /// As [`CodeClient::execute`], and a stream that breaks off.
    pub async fn run(&self, request: &ExecuteRequest) -> Result<Vec<OutputLine>, ClientError> {
        let mut stream = self.execute(request).await?;
        let mut lines = Vec::new();
        while let Some(line) = stream.next().await? {
            if !matches!(line, OutputLine::Keepalive | OutputLine::EndOfExecution) {
                lines.push(line);
            }
        }
        Ok(lines)
    }

    /// `POST /contexts`: a new context (Python and the server's base directory by default).
    ///
    /// # Errors
    /// Transport errors and error answers.
    pub async fn create_context(&self, request: &CreateContextRequest) -> Result<ContextInfo, ClientError> {
        let response =
            self.http.post(self.url("/contexts")).json(request).send().await.map_err(ClientError::Transport)?;
        decode(checked(response).await?).await
    }

    /// `GET /contexts`.
    ///
    /// # Errors
    /// Transport errors and error answers.
    pub async fn list_contexts(&self) -> Result<Vec<ContextInfo>, ClientError> {
        let response = self.http.get(self.url("/contexts")).send().await.map_err(ClientError::Transport)?;
        decode(checked(response).await?).await
    }

    /// `POST /contexts/{id}/restart`: a fresh interpreter in the same working directory.
    ///
    /// # Errors
    /// Transport errors and error answers (404 unknown context).
    pub async fn restart_context(&self, id: &str) -> Result<(), ClientError> {
        let url = self.url(&format!("/contexts/{}/restart", encode(id)));
        checked(self.http.post(url).send().await.map_err(ClientError::Transport)?).await.map(drop)
    }

    /// `DELETE /contexts/{id}`.
    ///
    /// # Errors
    /// Transport errors and error answers (404 unknown context).
    pub async fn delete_context(&self, id: &str) -> Result<(), ClientError> {
        let url = self.url(&format!("/contexts/{}", encode(id)));
        checked(self.http.delete(url).send().await.map_err(ClientError::Transport)?).await.map(drop)
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base_url)
    }
}

fn encode(segment: &str) -> String {
    form_urlencoded::byte_serialize(segment.as_bytes()).collect()
}

/// The response, or its plain-text (or JSON) error as [`ClientError::Api`].
async fn checked(response: reqwest::Response) -> Result<reqwest::Response, ClientError> {
    let status = response.status();
    if status.is_success() {
        return Ok(response);
    }
    let text = response.text().await.map_err(ClientError::Transport)?;
    let body = serde_json::from_str::<ErrorBody>(&text).unwrap_or_else(|_| ErrorBody::new(text, error_type(status)));
    Err(ClientError::Api { status: status.as_u16(), body: Box::new(body) })
}

fn error_type(status: StatusCode) -> &'static str {
    match status {
        StatusCode::NOT_FOUND => "NotFoundError",
        StatusCode::UNAUTHORIZED => "AuthError",
        _ => "CodeInterpreterError",
    }
}

/// The lines of one execution, as they arrive.
#[derive(Debug)]
pub struct ExecutionStream {
    response: reqwest::Response,
    buffer: Vec<u8>,
    done: bool,
}

impl ExecutionStream {
    /// The next line; `None` after `end_of_execution`.
    ///
    /// # Errors
    /// Transport errors, a line that is not JSON, or a stream that ends without `end_of_execution`.
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
            match self.response.chunk().await.map_err(ClientError::Transport)? {
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
}
