//! The plain format's fields, written as tracing-subscriber's default
//! visitor writes them without colours (`endpoint="files_stat" status=200`),
//! at a fraction of its cost.
//!
//! Every authenticated request logs an access line of seven fields. The
//! default visitor paints each name and `=` through `nu_ansi_term` even
//! when colours are off, and writes each text through `Debug`'s escaping: two
//! fifths of the instructions an access line costs. Here a name and a text
//! that needs no escaping (printable ASCII without `"` or `\`) are written
//! as they are, integers and booleans by `Display`; anything else (the message,
//! `r#` names, `log.` fields, texts that need escaping, other values, colours
//! on) goes to the default visitor, so the line is the same byte for byte.

use std::fmt;

use tracing::field::{Field, Visit};
use tracing_subscriber::field::{RecordFields, VisitOutput};
use tracing_subscriber::fmt::format::{DefaultFields, DefaultVisitor, Writer};
use tracing_subscriber::fmt::FormatFields;

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

    /// Logs a set of awkward events and returns the lines.
    fn lines<F>(fields: F) -> String
    where
        F: for<'w> FormatFields<'w> + Send + Sync + 'static,
    {
        let kept = Kept::default();
        let subscriber = tracing_subscriber::fmt()
            .with_ansi(false)
            .without_time()
            .with_max_level(tracing::Level::TRACE)
            .fmt_fields(fields)
            .with_writer(kept.clone())
            .finish();
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
    fn lines_match_the_default_visitor_byte_for_byte() {
        let ours = lines(PlainFields);
        assert_eq!(ours, lines(DefaultFields::new()));
        assert!(ours.contains(
            r#"INFO access: port="api" endpoint="files_stat" identity="default" method="GET" tool="stat" status=200 elapsed_ms=0.123"#
        ), "{ours}");
        assert!(ours.contains(r#"call{id="c1" n=3}: "#), "{ours}");
        assert_eq!(ours.lines().count(), 7, "{ours}");
    }
}
