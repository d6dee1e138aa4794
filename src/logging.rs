//! Log setup: tracing-subscriber writing plain or JSON lines to stderr
//! through a non-blocking writer, so a slow log reader never stalls requests.

use std::io::IsTerminal;

use tracing_appender::non_blocking::{NonBlockingBuilder, WorkerGuard};
use tracing_subscriber::EnvFilter;

use crate::config::LogFormat;

/// Installs the global subscriber. `RUST_LOG` beats `default_filter`.
/// Keep the returned guard alive: dropping it flushes and stops the writer.
pub fn init(format: LogFormat, default_filter: &str) -> WorkerGuard {
    let filter = EnvFilter::try_from_default_env()
        .or_else(|_| EnvFilter::try_new(default_filter))
        .unwrap_or_else(|_| EnvFilter::new("info"));
    // The default queue preallocates 128,000 lines (about 4 MB resident); a few
    // thousand absorb any burst, and past that lines are dropped, not waited for.
    let (writer, guard) =
        NonBlockingBuilder::default().buffered_lines_limit(4096).lossy(true).finish(std::io::stderr());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(writer);
    let _ = match format {
        LogFormat::Plain => builder.try_init(),
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
    };
    guard
}
