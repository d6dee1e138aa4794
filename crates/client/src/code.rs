//! The dev_tools group of the API port: one-shot code runs (`/code/run`)
//! and git (`/git/*`). Stateful contexts are the code-interpreter port's:
//! [`CodeClient`](super::CodeClient).

use abx_wire::api::code::{CodeRunRequest, CodeRunResult, GitDiff, GitStatus};

use super::{Client, ClientError};

impl Client {
    /// `POST /code/run`: runs a snippet once (`python`, `node` or `bash`)
    /// and returns its output.
    ///
    /// # Errors
    /// Transport errors and error answers (408 `TimeoutError` when it ran
    /// too long; 404 `endpoint_disabled` unless the dev_tools group is on).
    ///
    /// ```no_run
    /// use abx_wire::api::code::CodeRunRequest;
    /// # async fn demo(client: abx_client::Client) -> Result<(), abx_client::ClientError> {
    /// let request = CodeRunRequest { code: "print(6 * 7)".into(), language: "python".into(), timeout: Some(10.0) };
    /// let run = client.run_once(&request).await?;
    /// assert_eq!(run.stdout, "42\n");
    /// # Ok(()) }
    /// ```
    pub async fn run_once(&self, request: &CodeRunRequest) -> Result<CodeRunResult, ClientError> {
        self.call("code_run", &[], &[], Some(request)).await
    }

    /// `GET /git/status` of the repository at `path`.
    ///
    /// # Errors
    /// Transport errors and error answers (400 `GitError` outside a repository).
    ///
    /// ```no_run
    /// # async fn demo(client: abx_client::Client) -> Result<(), abx_client::ClientError> {
    /// let status = client.git_status("project").await?;
    /// println!("{} clean: {}", status.branch, status.clean);
    /// # Ok(()) }
    /// ```
    pub async fn git_status(&self, path: &str) -> Result<GitStatus, ClientError> {
        self.call("git_status", &[], &[("path", path.to_string())], None::<&()>).await
    }

    /// `GET /git/diff` of the repository at `path`, of the index with `staged`, of one `file`.
    ///
    /// # Errors
    /// Transport errors and error answers.
    ///
    /// ```no_run
    /// # async fn demo(client: abx_client::Client) -> Result<(), abx_client::ClientError> {
    /// let diff = client.git_diff("project", false, None).await?;
    /// println!("+{} -{}", diff.stats.insertions, diff.stats.deletions);
    /// # Ok(()) }
    /// ```
    pub async fn git_diff(&self, path: &str, staged: bool, file: Option<&str>) -> Result<GitDiff, ClientError> {
        let mut query = vec![("path", path.to_string()), ("staged", staged.to_string())];
        if let Some(file) = file {
            query.push(("file", file.to_string()));
        }
        self.call("git_diff", &[], &query, None::<&()>).await
    }
}
