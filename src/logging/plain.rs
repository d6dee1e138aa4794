//! The plain format, written as tracing-subscriber's default full format
//! writes it without colours (`2026-12-02T03:05:45.119019Z  INFO access:
//! endpoint="files_stat" status=200`), at a fraction of its cost.
//!
//! Every authenticated request logs an access line of seven fields. The
//! default formatter paints the target, each field's name and `=` through
//! `nu_ansi_term` even when colours are off, pads the level through the
//! formatting machinery and writes each text through `Debug`'s escaping:
//! about half the instructions an access line costs. Here the time, level,
//! target, a name and a text that needs no escaping (printable ASCII without
//! `"` or `\`) are written as they are, integers and booleans by `Display`.
//! Anything else goes to the default formatter: a line with colours, inside
//! a span, or from the `log` crate; a field that is the message, is named
//! `r#...` or `log....`, or whose text needs escaping. So a line is the same
//! byte for byte.

use std::fmt;

use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::field::{RecordFields, VisitOutput};
use tracing_subscriber::fmt::format::{DefaultFields, DefaultVisitor, Format, Full, Writer};
use tracing_subscriber::fmt::time::FormatTime;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

/// The plain format's line formatter (see the module doc).
pub struct PlainEvent<T> {
    timer: T,
    default: Format<Full, T>,
}

impl<T: FormatTime + Clone> PlainEvent<T> {
    /// Lines stamped by `timer`.
    pub fn new(timer: T) -> Self {
        PlainEvent { timer: timer.clone(), default: tracing_subscriber::fmt::format().with_timer(timer) }
    }
}

impl<S, N, T> FormatEvent<S, N> for PlainEvent<T>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
    T: FormatTime,
{
    fn format_event(&self, ctx: &FmtContext<'_, S, N>, mut writer: Writer<'_>, event: &Event<'_>) -> fmt::Result {
        let meta = event.metadata();
        let from_log = meta.fields().field("log.target").is_some();
        if writer.has_ansi_escapes() || from_log || ctx.event_scope().is_some() {
            return self.default.format_event(ctx, writer, event);
        }
        if self.timer.format_time(&mut writer).is_err() {
            writer.write_str("<unknown time>")?;
        }
        let level = match *meta.level() {
            Level::TRACE => " TRACE ",
            Level::DEBUG => " DEBUG ",
            Level::INFO => "  INFO ",
            Level::WARN => "  WARN ",
            Level::ERROR => " ERROR ",
        };
        writer.write_str(level)?;
        writer.write_str(meta.target())?;
        writer.write_str(": ")?;
        ctx.format_fields(writer.by_ref(), event)?;
        writer.write_char('\n')
    }
}

/// The plain format's field formatter (see the module doc).
#[derive(Debug, Default)]
pub struct PlainFields;

impl<'writer> FormatFields<'writer> for PlainFields {
    fn format_fields<R: RecordFields>(&self, writer: Writer<'writer>, fields: R) -> fmt::Result {
        if writer.has_ansi_escapes() {
            return DefaultFields::new().format_fields(writer, fields);
        }
        let mut visitor = Visitor { writer, is_empty: true, result: Ok(()) };
        fields.record(&mut visitor);
        visitor.result
    }
}

/// Writes fields as [`DefaultVisitor`] does with colours off.
struct Visitor<'writer> {
    writer: Writer<'writer>,
    is_empty: bool,
    result: fmt::Result,
}

impl Visitor<'_> {
    /// Writes ` name=` (no space before the first field) and then `value`.
    fn field(&mut self, name: &str, value: impl FnOnce(&mut Writer<'_>) -> fmt::Result) {
        if self.result.is_err() {
            return;
        }
        let pad = if self.is_empty { "" } else { " " };
        self.is_empty = false;
        self.result = (|| {
            self.writer.write_str(pad)?;
            self.writer.write_str(name)?;
            self.writer.write_char('=')?;
            value(&mut self.writer)
        })();
    }

    /// Hands one field to the default visitor, over the same writer.
    fn delegate(&mut self, field: &Field, record: impl FnOnce(&mut DefaultVisitor<'_>)) {
        if self.result.is_err() {
            return;
        }
        let mut visitor = DefaultVisitor::new(self.writer.by_ref(), self.is_empty);
        record(&mut visitor);
        // The default visitor skips `log.` fields (already in the line's metadata).
        if !field.name().starts_with("log.") {
            self.is_empty = false;
        }
        self.result = visitor.finish();
    }
}

/// Whether the default visitor writes `field` as `name=value`.
fn ordinary(field: &Field) -> bool {
    let name = field.name();
    name != "message" && !name.starts_with("r#") && !name.starts_with("log.")
}

/// Whether `Debug` writes `text` as it is between two quotes.
fn needs_no_escape(text: &str) -> bool {
    text.bytes().all(|b| matches!(b, b' '..=b'~') && b != b'"' && b != b'\\')
}

impl Visit for Visitor<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        if ordinary(field) && needs_no_escape(value) {
            self.field(field.name(), |w| {
                w.write_char('"')?;
                w.write_str(value)?;
                w.write_char('"')
            });
        } else {
            self.delegate(field, |v| v.record_str(field, value));
        }
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        if ordinary(field) {
            self.field(field.name(), |w| write!(w, "{value}"));
        } else {
            self.delegate(field, |v| v.record_u64(field, value));
        }
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        if ordinary(field) {
            self.field(field.name(), |w| write!(w, "{value}"));
        } else {
            self.delegate(field, |v| v.record_i64(field, value));
        }
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        if ordinary(field) {
            self.field(field.name(), |w| w.write_str(if value { "true" } else { "false" }));
        } else {
            self.delegate(field, |v| v.record_bool(field, value));
        }
    }

    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        self.delegate(field, |v| v.record_error(field, value));
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.delegate(field, |v| v.record_debug(field, value));
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use tracing_subscriber::fmt::MakeWriter;

    use super::*;

    /// A writer that keeps what it is given.
    #[derive(Clone, Default)]
    struct Kept(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Kept {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().expect("kept").extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl<'a> MakeWriter<'a> for Kept {
        type Writer = Kept;
        fn make_writer(&'a self) -> Kept {
            self.clone()
        }
    }

    /// A clock that always tells the same time.
    #[derive(Clone)]
    struct Fixed;

    impl FormatTime for Fixed {
        fn format_time(&self, w: &mut Writer<'_>) -> fmt::Result {
            w.write_str("2026-12-02T03:05:45.119019Z")
        }
    }

    /// Logs a set of awkward events through `subscriber` and returns the lines.
    fn lines(subscriber: impl Subscriber + Send + Sync + 'static, kept: &Kept) -> String {
        tracing::subscriber::with_default(subscriber, || {
            let (port, tool, none): (&str, Option<&str>, Option<&str>) = ("api", Some("stat"), None);
            tracing::info!(target: "access", port, endpoint = "files_stat", identity = "default", method = "GET",
                tool, none, status = 200_u16, elapsed_ms = 0.123_f64);
            tracing::info!(
                quoted = "say \"hi\"",
                backslash = "a\\b",
                newline = "a\nb",
                tab = "a\tb",
                escape = "\u{1b}[31m",
                unicode = "naïve ✓",
                apostrophe = "it's",
                empty = ""
            );
            tracing::warn!(negative = -7_i64, big = u64::MAX, yes = true, no = false, float = 1.0_f64, tiny = 1e-7_f64,
                r#type = "kind", debug = ?vec![1, 2], display = %"shown", "a message with \"quotes\" and {}", 42);
            tracing::error!(error = &std::io::Error::other("boom") as &(dyn std::error::Error + 'static), "failed");
            tracing::debug!("only a message");
            tracing::trace!(first = "x");
            let span = tracing::info_span!("call", id = "c1", n = 3_u64);
            span.in_scope(|| tracing::info!(inside = "yes"));
        });
        let text = String::from_utf8(kept.0.lock().expect("kept").clone()).expect("utf-8");
        text
    }

    #[test]
    fn lines_match_the_default_format_byte_for_byte() {
        let builder = || tracing_subscriber::fmt().with_ansi(false).with_max_level(tracing::Level::TRACE);
        let (ours, theirs) = (Kept::default(), Kept::default());
        let ours = lines(
            builder().event_format(PlainEvent::new(Fixed)).fmt_fields(PlainFields).with_writer(ours.clone()).finish(),
            &ours,
        );
        let theirs = lines(builder().with_timer(Fixed).with_writer(theirs.clone()).finish(), &theirs);
        assert_eq!(ours, theirs);
        assert!(ours.contains(
            r#"2026-12-02T03:05:45.119019Z  INFO access: port="api" endpoint="files_stat" identity="default" method="GET" tool="stat" status=200 elapsed_ms=0.123"#
        ), "{ours}");
        assert!(
            ours.contains(r#" INFO call{id="c1" n=3}: agent_sandbox_server::logging::plain::tests: inside="yes""#),
            "{ours}"
        );
        assert_eq!(ours.lines().count(), 7, "{ours}");
    }
}
