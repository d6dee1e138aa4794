//! The framed protocol between the daemon and an interpreter's driver.
//!
//! Commands (daemon to driver, descriptor 3) are NUL-terminated fields, a
//! format every driver reads natively (bash included):
//! `exec NUL <seq> NUL <n> NUL (<name> NUL <value> NUL){n} <code> NUL`.
//! Code and variables travel as data: nothing is spliced into source.
//!
//! Events (driver to daemon, descriptor 4) are JSON objects, each followed by
//! a NUL byte (JSON text never contains a raw NUL):
//! `{"t":"ready"}`, `{"t":"out","s":"stdout"|"stderr","text":…}`,
//! `{"t":"result","main":bool,"data":{<mime>: …}}`,
//! `{"t":"error","name":…,"value":…,"traceback":…}`, `{"t":"done","seq":N}`,
//! and, instead of `ready`, `{"t":"missing","program":…}` from a driver
//! whose language needs a program that is not installed.

use std::time::{Duration, SystemTime};

use serde::Deserialize;
use serde_json::{Map, Value};

use abx_wire::api::code::{ExecutionResult, OutputLine};
use abx_wire::time::utc_parts;

/// Largest result a driver sends (its encoded event); a larger value to
/// display becomes an error of the execution, raised by the driver.
pub const MAX_RESULT_BYTES: usize = 32 * 1024 * 1024;
/// Largest event accepted from a driver; a larger one breaks the protocol.
pub const MAX_EVENT_BYTES: usize = 2 * MAX_RESULT_BYTES;

/// Encodes an `exec` command.
pub fn encode_exec(seq: u64, env: &[(String, String)], code: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(code.len() + 32);
    let mut field = |s: &str| {
        out.extend_from_slice(s.as_bytes());
        out.push(0);
    };
    field("exec");
    field(&seq.to_string());
    field(&env.len().to_string());
    for (name, value) in env {
        field(name);
        field(value);
    }
    field(code);
    out
}

/// Which output stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Stream {
    /// Standard output.
    Stdout,
    /// Standard error.
    Stderr,
}

/// One event from a driver.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(tag = "t", rename_all = "lowercase")]
pub enum Event {
    /// The driver is ready for commands.
    Ready,
    /// The driver cannot run: a program its language needs is missing.
    Missing {
        /// What is missing, as a user would install it.
        program: String,
    },
    /// Output written through the language's own streams.
    Out {
        /// Which stream.
        s: Stream,
        /// The text.
        text: String,
    },
    /// A value to display: the final expression (`main`) or a display call.
    Result {
        /// Whether it is the value of the final expression.
        #[serde(default)]
        main: bool,
        /// Representations by MIME type.
        data: Map<String, Value>,
    },
    /// The execution raised.
    Error {
        /// Exception name.
        name: String,
        /// Exception message.
        value: String,
        /// Formatted traceback.
        #[serde(default)]
        traceback: String,
    },
    /// The execution `seq` finished.
    Done {
        /// The command's sequence number.
        seq: u64,
    },
}

/// Splits the event stream into frames.
#[derive(Debug, Default)]
pub struct FrameSplitter {
    buf: Vec<u8>,
}

/// A frame that is not a valid event, or one too large.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    /// More than [`MAX_EVENT_BYTES`] without a terminator.
    #[error("an event from the interpreter is larger than {MAX_EVENT_BYTES} bytes")]
    TooLarge,
}

impl FrameSplitter {
    /// Adds bytes read from the pipe; returns the complete frames they finish.
    ///
    /// # Errors
    /// [`FrameError::TooLarge`] when a frame grows past the limit.
    pub fn push(&mut self, bytes: &[u8]) -> Result<Vec<Vec<u8>>, FrameError> {
        let mut frames = Vec::new();
        let mut rest = bytes;
        while let Some(pos) = rest.iter().position(|&b| b == 0) {
            let mut frame = std::mem::take(&mut self.buf);
            frame.extend_from_slice(&rest[..pos]);
            frames.push(frame);
            rest = &rest[pos + 1..];
        }
        if self.buf.len() + rest.len() > MAX_EVENT_BYTES {
            return Err(FrameError::TooLarge);
        }
        self.buf.extend_from_slice(rest);
        Ok(frames)
    }
}

/// Parses one frame; `None` for a frame that is not an event this daemon knows.
pub fn parse_event(frame: &[u8]) -> Option<Event> {
    match serde_json::from_slice(frame) {
        Ok(event) => Some(event),
        Err(e) => {
            tracing::debug!(error = %e, "ignoring an unknown event from an interpreter");
            None
        }
    }
}

/// Maps a MIME bundle to the result fields the code-interpreter protocol uses.
///
/// A string `text/plain` wrapped in one pair of matching quotes is unwrapped,
/// as the code-interpreter server does, so `'abc'` reads `abc`.
pub fn result_from_bundle(main: bool, mut data: Map<String, Value>) -> ExecutionResult {
    let mut take_str = |key: &str| match data.remove(key) {
        Some(Value::String(s)) => Some(s),
        Some(other) if !other.is_null() => Some(other.to_string()),
        _ => None,
    };
    let text = take_str("text/plain").map(unquote);
    let html = take_str("text/html");
    let markdown = take_str("text/markdown");
    let svg = take_str("image/svg+xml");
    let png = take_str("image/png");
    let jpeg = take_str("image/jpeg");
    let pdf = take_str("application/pdf");
    let latex = take_str("text/latex");
    let javascript = take_str("application/javascript");
    let json = data.remove("application/json").filter(|v| !v.is_null());
    let table = data.remove("e2b/data").filter(|v| !v.is_null());
    let chart = data.remove("e2b/chart").filter(|v| !v.is_null());
    let extra = (!data.is_empty()).then_some(data);
    ExecutionResult {
        text,
        html,
        markdown,
        svg,
        png,
        jpeg,
        pdf,
        latex,
        json,
        javascript,
        data: table,
        chart,
        extra,
        is_main_result: main,
    }
}

fn unquote(text: String) -> String {
    let quoted = text.len() >= 2
        && ((text.starts_with('\'') && text.ends_with('\'')) || (text.starts_with('"') && text.ends_with('"')));
    if quoted {
        text[1..text.len() - 1].to_string()
    } else {
        text
    }
}

/// RFC 3339 UTC timestamp with microseconds, as output lines carry.
pub fn timestamp(at: SystemTime) -> String {
    let since = at.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
    let (year, month, day, h, m, s) = utc_parts(i64::try_from(since.as_secs()).unwrap_or(i64::MAX));
    format!("{year:04}-{month:02}-{day:02}T{h:02}:{m:02}:{s:02}.{:06}+00:00", since.subsec_micros())
}

/// An `error` line.
pub fn error_line(name: &str, value: impl Into<String>, traceback: impl Into<String>) -> OutputLine {
    OutputLine::Error { name: name.into(), value: value.into(), traceback: traceback.into() }
}

/// A `stdout` or `stderr` line stamped now.
pub fn output_line(stream: Stream, text: String) -> OutputLine {
    let timestamp = timestamp(SystemTime::now());
    match stream {
        Stream::Stdout => OutputLine::Stdout { text, timestamp },
        Stream::Stderr => OutputLine::Stderr { text, timestamp },
    }
}

/// The `error` line of an execution interrupted by its timeout.
pub fn timeout_error(after: Duration, traceback: impl Into<String>) -> OutputLine {
    error_line(
        "TimeoutError",
        format!("the execution timed out after {} s and was interrupted", after.as_secs_f64()),
        traceback,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn exec_commands_carry_code_and_env_as_data() {
        let env = vec![("A".to_string(), "it's \"quoted\"\nline".to_string())];
        let bytes = encode_exec(7, &env, "print(1)\n");
        let fields: Vec<&[u8]> = bytes.split(|&b| b == 0).collect();
        assert_eq!(fields, [&b"exec"[..], b"7", b"1", b"A", "it's \"quoted\"\nline".as_bytes(), b"print(1)\n", b""]);
    }

    #[test]
    fn frames_split_across_reads() {
        let mut splitter = FrameSplitter::default();
        assert!(splitter.push(b"{\"t\":\"re").expect("ok").is_empty());
        let frames = splitter.push(b"ady\"}\0{\"t\":\"done\",\"seq\":3}\0{\"t\"").expect("ok");
        let events: Vec<_> = frames.iter().filter_map(|f| parse_event(f)).collect();
        assert_eq!(events, [Event::Ready, Event::Done { seq: 3 }]);
        assert!(parse_event(b"{\"t\":\"future\"}").is_none());
    }

    #[test]
    fn oversized_frames_are_refused() {
        let mut splitter = FrameSplitter::default();
        let big = vec![b'x'; MAX_EVENT_BYTES + 1];
        assert!(splitter.push(&big).is_err());
    }

    #[test]
    fn timestamps_are_rfc3339_utc() {
        let at = SystemTime::UNIX_EPOCH + Duration::new(1_709_210_096, 123_456_789);
        assert_eq!(timestamp(at), "2024-02-29T12:34:56.123456+00:00");
        assert_eq!(timestamp(SystemTime::UNIX_EPOCH), "1970-01-01T00:00:00.000000+00:00");
    }

    #[test]
    fn bundles_map_to_result_fields() {
        let data = json!({"text/plain": "'abc'", "image/png": "iVBOR", "application/json": {"a": 1}, "x/y": "z"});
        let Value::Object(data) = data else { unreachable!() };
        let result = result_from_bundle(true, data);
        assert_eq!(result.text.as_deref(), Some("abc"));
        assert_eq!(result.png.as_deref(), Some("iVBOR"));
        assert_eq!(result.json, Some(json!({"a": 1})));
        assert_eq!(result.extra.map(|e| e.len()), Some(1));
        assert!(result.is_main_result);
        assert_eq!(unquote("'".into()), "'");
        assert_eq!(unquote("\"a'".into()), "\"a'");
    }
}
