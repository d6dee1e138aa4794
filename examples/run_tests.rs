//! An orchestrator's test step: upload a local project into a sandbox and
//! run its tests there, printing their output as it comes.
//!
//! ```text
//! ABX_SERVER_URL=http://10.0.0.7:9000 ABX_SERVER_TOKEN=... \
//!   cargo run --example run_tests -- ./my-project "python3 -m unittest -v"
//! ```
//!
//! Exits with the tests' exit code.

use std::error::Error;
use std::io::Write;
use std::path::Path;

use abx_client::Client;
use abx_wire::api::process::{ExecRequest, ShellEvent};
use futures_util::StreamExt;

/// Uploads the directory `project` to `remote` in the sandbox, runs
/// `command` there and writes its output to `out` line by line as it
/// arrives; returns the command's exit code.
pub async fn run(
    client: &Client,
    project: &Path,
    remote: &str,
    command: &str,
    out: &mut impl Write,
) -> Result<i32, Box<dyn Error + Send + Sync>> {
    let uploaded = client.upload_dir(project, remote).await?;
    writeln!(out, "uploaded {} files to {remote}", uploaded.len())?;
    // A ten-minute budget the daemon enforces: on timeout it kills the
    // whole process group and reports an `error` event before `exit`.
    let request = ExecRequest { cwd: Some(remote.into()), timeout: Some(600.0), ..ExecRequest::new(command) };
    // Dropping `events` (a crash of ours, Ctrl-C) disconnects, and the daemon kills the tests.
    let mut events = client.shell_stream(&request).await?;
    while let Some(event) = events.next().await {
        match event? {
            ShellEvent::Stdout { data } | ShellEvent::Stderr { data } => writeln!(out, "{data}")?,
            ShellEvent::Error { error } => writeln!(out, "[{error}]")?,
            ShellEvent::Exit { exit_code } => return Ok(exit_code),
        }
    }
    Err("the stream ended without an exit code".into())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn Error + Send + Sync>> {
    let mut args = std::env::args().skip(1);
    let project = args.next().ok_or("usage: run_tests <project directory> [test command]")?;
    let command = args.next().unwrap_or_else(|| "python3 -m unittest -v".into());
    let url = std::env::var("ABX_SERVER_URL").unwrap_or_else(|_| "http://127.0.0.1:9000".into());
    let client = Client::builder(&url).token(std::env::var("ABX_SERVER_TOKEN").ok()).build()?;
    let code = run(&client, Path::new(&project), "project", &command, &mut std::io::stdout()).await?;
    std::process::exit(code)
}
