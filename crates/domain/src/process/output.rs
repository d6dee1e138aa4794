//! Child output: UTF-8-safe chunking, line splitting, and the bounded,
//! cursor-addressable capture of background processes.
//!
//! - Chunks are cut at character boundaries by the one incremental UTF-8
//!   decoder, [`abx_wire::codec::utf8`] (process output, terminal scrollback and
//!   code pipes all use it), so a character is never split across events.
//! - [`LineSplitter`] cuts a byte stream into lines (without the `\n`),
//!   bounding a line's length so memory stays flat on output without newlines.
//! - [`Capture`] (in [`super::capture`]) keeps the newest events of a
//!   process up to a byte budget; attached subscribers hold the writer back
//!   so nothing is dropped silently under them.

use abx_wire::codec::utf8::complete_len;

pub use super::capture::{Capture, CaptureRead, CapturedEvent};

/// Which output stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    /// Standard output.
    Stdout,
    /// Standard error.
    Stderr,
}

impl Stream {
    /// `stdout` or `stderr`.
    pub fn as_str(self) -> &'static str {
        match self {
            Stream::Stdout => "stdout",
            Stream::Stderr => "stderr",
        }
    }
}

/// Splits a byte stream into lines, none longer than `max` bytes.
#[derive(Debug)]
pub struct LineSplitter {
    partial: Vec<u8>,
    max: usize,
}

impl LineSplitter {
    /// A splitter that cuts lines longer than `max` bytes (at a character boundary).
    pub fn new(max: usize) -> Self {
        LineSplitter { partial: Vec::new(), max: max.max(4) }
    }

    /// Adds `bytes`; calls `emit` with every completed line (without its `\n`).
    pub fn push(&mut self, mut bytes: &[u8], mut emit: impl FnMut(Vec<u8>)) {
        while !bytes.is_empty() {
            let room = self.max - self.partial.len();
            match bytes.iter().take(room + 1).position(|b| *b == b'\n') {
                Some(i) => {
                    self.partial.extend_from_slice(&bytes[..i]);
                    emit(std::mem::take(&mut self.partial));
                    bytes = &bytes[i + 1..];
                }
                None => {
                    let take = room.min(bytes.len());
                    self.partial.extend_from_slice(&bytes[..take]);
                    bytes = &bytes[take..];
                    if self.partial.len() >= self.max {
                        let cut = complete_len(&self.partial).max(1);
                        let rest = self.partial.split_off(cut);
                        emit(std::mem::replace(&mut self.partial, rest));
                    }
                }
            }
        }
    }

    /// The last line, if the stream did not end with a newline.
    pub fn finish(&mut self) -> Option<Vec<u8>> {
        (!self.partial.is_empty()).then(|| std::mem::take(&mut self.partial))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_split_on_newlines_and_length() {
        let mut lines = Vec::new();
        let mut splitter = LineSplitter::new(8);
        splitter.push(b"one\ntw", |l| lines.push(l));
        splitter.push(b"o\n\nabcdefghijkl", |l| lines.push(l));
        assert_eq!(splitter.finish(), Some(b"ijkl".to_vec()));
        assert_eq!(lines, [&b"one"[..], b"two", b"", b"abcdefgh"]);
        let mut lines = Vec::new();
        let mut splitter = LineSplitter::new(8);
        splitter.push("aaaaaaa€".as_bytes(), |l| lines.push(l));
        assert_eq!(lines, [b"aaaaaaa".to_vec()], "the euro sign stays whole");
        assert_eq!(splitter.finish(), Some("€".as_bytes().to_vec()));
        assert_eq!(splitter.finish(), None);
    }
}
