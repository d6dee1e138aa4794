//! `abx ls`, `stat`, `cat`, `get`, `put`, `rm`, `mv`, `mkdir`, `find`, `grep`, `watch`.

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;

use abx_client::files::{ProgressFn, STREAMING_THRESHOLD};
use abx_client::Client;
use abx_wire::api::files::SearchRequest;
use clap::Subcommand;
use futures_util::StreamExt;
use indicatif::{ProgressBar, ProgressStyle};

use super::{print_json, Failure};

/// File verbs.
#[derive(Debug, Subcommand)]
pub enum FilesCommand {
    /// List a directory.
    Ls {
        /// Directory (relative paths are under the server's base directory).
        #[arg(default_value = ".")]
        path: String,
        /// Enter subdirectories.
        #[arg(short, long)]
        recursive: bool,
        /// Most entries.
        #[arg(long)]
        max: Option<u64>,
    },
    /// Print a path's metadata as JSON.
    Stat {
        /// Path.
        path: String,
    },
    /// Print a file's content.
    Cat {
        /// File.
        path: String,
    },
    /// Download a file.
    Get {
        /// Remote file.
        remote: String,
        /// Local destination (default: the remote file's name).
        local: Option<PathBuf>,
    },
    /// Upload a file (large files stream and resume after broken connections).
    Put {
        /// Local file.
        local: PathBuf,
        /// Remote destination.
        remote: String,
    },
    /// Remove a file or a directory tree.
    Rm {
        /// Path.
        path: String,
    },
    /// Move or rename.
    Mv {
        /// Source.
        source: String,
        /// Destination (an existing directory receives the source).
        destination: String,
    },
    /// Make a directory and its parents.
    Mkdir {
        /// Directory.
        path: String,
    },
    /// Find files by name glob.
    Find {
        /// Directory to search.
        path: String,
        /// Name glob (`*.rs`).
        pattern: String,
        /// Deepest level.
        #[arg(long)]
        max_depth: Option<u64>,
        /// Most results.
        #[arg(long)]
        max_results: Option<u64>,
    },
    /// Find lines matching a regular expression.
    Grep {
        /// Regular expression.
        regex: String,
        /// Directory to search.
        #[arg(default_value = ".")]
        path: String,
        /// Only files whose name matches this glob.
        #[arg(long, default_value = "*")]
        name: String,
        /// Most files.
        #[arg(long)]
        max_results: Option<u64>,
    },
    /// Print change events as JSON lines.
    Watch {
        /// Directory.
        path: String,
        /// Include subdirectories.
        #[arg(short, long)]
        recursive: bool,
        /// Seconds to watch.
        #[arg(long)]
        timeout: Option<f64>,
    },
}

/// Runs a file verb.
pub async fn run(client: &Client, command: FilesCommand) -> Result<(), Failure> {
    match command {
        FilesCommand::Ls { path, recursive, max } => {
            for entry in client.list(&path, recursive, max).await? {
                let name = if recursive { entry.path } else { entry.name };
                println!("{:<9} {:>12} {} {name}", entry.kind, entry.size, entry.modified);
            }
        }
        FilesCommand::Stat { path } => print_json(&client.stat(&path).await?)?,
        FilesCommand::Cat { path } => {
            let (_, mut stream) = client.download_stream(&path).await?;
            let mut out = std::io::stdout().lock();
            while let Some(chunk) = stream.next().await {
                out.write_all(&chunk?).map_err(|e| Failure::Message(e.to_string()))?;
            }
            out.flush().map_err(|e| Failure::Message(e.to_string()))?;
        }
        FilesCommand::Get { remote, local } => {
            let local = local.unwrap_or_else(|| PathBuf::from(remote.rsplit('/').next().unwrap_or("download")));
            let size = client.stat(&remote).await?.size;
            let (bar, progress) = progress_bar(size);
            let written = client.download_file(&remote, &local, progress).await?;
            bar.finish_and_clear();
            eprintln!("{written} bytes -> {}", local.display());
        }
        FilesCommand::Put { local, remote } => {
            let size =
                std::fs::metadata(&local).map_err(|e| Failure::Message(format!("{}: {e}", local.display())))?.len();
            let (bar, progress) = progress_bar(size);
            let answer = client.upload_file(&local, &remote, progress).await?;
            bar.finish_and_clear();
            eprintln!("{} bytes -> {}", answer.bytes, answer.path);
        }
        FilesCommand::Rm { path } => print_json(&client.delete(&path).await?)?,
        FilesCommand::Mv { source, destination } => print_json(&client.rename(&source, &destination).await?)?,
        FilesCommand::Mkdir { path } => print_json(&client.mkdir(&path).await?)?,
        FilesCommand::Find { path, pattern, max_depth, max_results } => {
            let request = SearchRequest {
                path: Some(path),
                pattern: Some(pattern),
                max_depth: max_depth.map(Into::into),
                max_results: max_results.map(Into::into),
                ..SearchRequest::default()
            };
            let answer = client.search(&request).await?;
            for hit in &answer.results {
                println!("{}", hit.path);
            }
            if answer.timed_out {
                eprintln!("abx: the search timed out; results are partial");
            }
        }
        FilesCommand::Grep { regex, path, name, max_results } => {
            let request = SearchRequest {
                path: Some(path),
                pattern: Some(name),
                content: Some(regex),
                max_results: max_results.map(Into::into),
                ..SearchRequest::default()
            };
            let answer = client.search(&request).await?;
            for hit in &answer.results {
                for m in hit.matches.iter().flatten() {
                    println!("{}:{}:{}", hit.path, m.line, m.text);
                }
            }
            if answer.results.is_empty() {
                return Err(Failure::Exit(1));
            }
        }
        FilesCommand::Watch { path, recursive, timeout } => {
            let mut events = Box::pin(client.watch(&path, recursive, timeout).await?);
            while let Some(event) = events.next().await {
                let line = serde_json::to_string(&event?).map_err(|e| Failure::Message(e.to_string()))?;
                println!("{line}");
            }
        }
    }
    Ok(())
}

/// A progress bar on stderr for transfers over the streaming threshold (hidden otherwise).
fn progress_bar(size: u64) -> (ProgressBar, Option<ProgressFn>) {
    if size <= STREAMING_THRESHOLD {
        return (ProgressBar::hidden(), None);
    }
    let bar = ProgressBar::new(size);
    if let Ok(style) = ProgressStyle::with_template("{bar:40} {bytes}/{total_bytes} {bytes_per_sec} eta {eta}") {
        bar.set_style(style);
    }
    let handle = bar.clone();
    (bar, Some(Arc::new(move |n| handle.set_position(n))))
}
