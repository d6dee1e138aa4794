//! Log setup: tracing-subscriber writing plain or JSON lines to stderr
//! through a non-blocking writer, so a slow log reader never stalls requests.
//!
//! The writer's thread writes in batches (`Batched`): every authenticated
//! request logs an access line, and one `write(2)` and one thread wake-up
//! per line cost a busy server as much CPU as answering a small request.

use std::io::{BufWriter, IsTerminal, Stderr, Write};
use std::time::Duration;

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
        NonBlockingBuilder::default().buffered_lines_limit(4096).lossy(true).finish(Batched::stderr());
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

/// How long the log thread gathers lines after each batch: the most a line
/// waits, and at 50,000 lines a second about 50 lines per batch (the queue holds 4,096).
const GATHER: Duration = Duration::from_millis(1);

/// Stderr as the log thread writes it: the lines it takes off the queue in
/// one go are buffered and written at once when the queue is empty (the
/// appender flushes then), after which the thread pauses for [`GATHER`]. A
/// thread that is not parked on the queue is not woken for each new line, so
/// under load one wake-up and one `write(2)` serve a whole batch; when the
/// server is quiet a line still goes out as soon as it is logged.
struct Batched(BufWriter<Stderr>);

impl Batched {
    fn stderr() -> Self {
        Batched(BufWriter::with_capacity(16 * 1024, std::io::stderr()))
    }
}

impl Write for Batched {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.write(buf)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush()?;
        std::thread::sleep(GATHER);
        Ok(())
    }
}
