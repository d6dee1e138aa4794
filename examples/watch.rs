//! An orchestrator waiting on work in a sandbox: watch a directory while a
//! job writes into it, and stop when the job drops its `done` marker.
//!
//! ```text
//! ABX_SERVER_URL=http://10.0.0.7:9000 ABX_SERVER_TOKEN=... cargo run --example watch -- jobs/42
//! ```

use std::error::Error;
use std::io::Write;

use abx_client::Client;
use abx_wire::api::files::WatchEvent;
use abx_wire::api::process::ExecRequest;
use futures_util::StreamExt;

/// The job: writes its results a piece at a time, then the marker.
const JOB: &str = "mkdir -p out && for i in 1 2 3; do echo part $i > out/part-$i.txt; sleep 0.1; done; touch done";

/// Watches `dir` (recursively) while a background job works in it,
/// writing each change to `out`, until `dir/done` appears; returns the
/// changes seen.
pub async fn run(
    client: &Client,
    dir: &str,
    out: &mut impl Write,
) -> Result<Vec<WatchEvent>, Box<dyn Error + Send + Sync>> {
    client.mkdir(dir).await?;
    // The watch is in place when `watch` returns: nothing the job does is missed.
    let mut changes = client.watch(dir, true, Some(60.0)).await?;
    let job = ExecRequest { cwd: Some(dir.into()), shell: true, ..ExecRequest::new(JOB) };
    let started = client.start(&job).await?;
    writeln!(out, "job {} started", started.pid)?;
    let mut seen = Vec::new();
    while let Some(change) = changes.next().await {
        let change = change?;
        writeln!(out, "{:<8} {}", change.kind, change.path)?;
        let finished = change.kind == "created" && change.path.ends_with("/done");
        seen.push(change);
        if finished {
            // Dropping the stream ends the daemon's watch.
            return Ok(seen);
        }
    }
    Err("the watch ended before the job finished".into())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn Error + Send + Sync>> {
    let dir = std::env::args().nth(1).unwrap_or_else(|| "job".into());
    let url = std::env::var("ABX_SERVER_URL").unwrap_or_else(|_| "http://127.0.0.1:9000".into());
    let client = Client::builder(&url).token(std::env::var("ABX_SERVER_TOKEN").ok()).build()?;
    let seen = run(&client, &dir, &mut std::io::stdout()).await?;
    println!("{} changes until done", seen.len());
    Ok(())
}
