//! Log setup: tracing-subscriber writing plain or JSON lines to stderr
//! through a non-blocking writer, so a slow log reader never stalls requests.
//!
//! The writer's thread writes in batches (`Batched`): every authenticated
//! request logs an access line, and one `write(2)` and one thread wake-up
//! per line cost a busy server as much CPU as answering a small request.

use std::cell::RefCell;
use std::fmt::Write as _;
use std::io::{BufWriter, IsTerminal, Stderr, Write};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tracing_appender::non_blocking::{NonBlockingBuilder, WorkerGuard};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::time::FormatTime;
use tracing_subscriber::EnvFilter;

use crate::config::LogFormat;

mod plain;

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
        LogFormat::Plain => {
            builder.event_format(plain::PlainEvent::new(Clock)).fmt_fields(plain::PlainFields).try_init()
        }
        LogFormat::Json => builder.with_timer(Clock).json().flatten_event(true).try_init(),
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

/// The lines' clock: the RFC 3339 UTC time with microseconds that
/// tracing-subscriber's default clock writes (`2026-12-02T03:05:45.119019Z`),
/// with the date and time of day formatted once a second per thread rather
/// than on every line (a tenth of an access line's cost went to the calendar).
#[derive(Clone, Copy)]
struct Clock;

impl FormatTime for Clock {
    fn format_time(&self, w: &mut Writer<'_>) -> std::fmt::Result {
        thread_local! {
            /// The second last formatted, and its text up to the seconds.
            static SECOND: RefCell<(u64, String)> = const { RefCell::new((u64::MAX, String::new())) };
        }
        let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
        SECOND.with_borrow_mut(|(second, text)| {
            if *second != now.as_secs() {
                let (y, mo, d, h, mi, s) = abx_wire::time::utc_parts(i64::try_from(now.as_secs()).unwrap_or(i64::MAX));
                text.clear();
                write!(text, "{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}")?;
                *second = now.as_secs();
            }
            write!(w, "{text}.{:06}Z", now.subsec_micros())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_clock_writes_what_the_default_clock_writes() {
        let (mut ours, mut theirs) = (String::new(), String::new());
        // The same second on both sides (retried across a second's turn).
        for _ in 0..3 {
            ours.clear();
            theirs.clear();
            tracing_subscriber::fmt::time::SystemTime.format_time(&mut Writer::new(&mut theirs)).expect("default");
            Clock.format_time(&mut Writer::new(&mut ours)).expect("ours");
            if ours[..19] == theirs[..19] {
                break;
            }
        }
        assert_eq!(ours.len(), "2026-12-02T03:05:45.119019Z".len(), "{ours}");
        assert_eq!(ours[..20], theirs[..20], "{ours} against {theirs}");
        assert!(ours.ends_with('Z') && ours[20..26].bytes().all(|b| b.is_ascii_digit()), "{ours}");
    }
}
