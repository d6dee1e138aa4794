//! The JSON upload body's structure, followed across frames.
//!
//! [`Scanner`] keeps the body (`rest`) except the characters of the
//! top-level `content_base64` string, which it stages in pieces for the
//! caller to decode; see the parent module for why answers stay exact.

use std::ops::Range;

use abx_domain::fs::b64::PIECE;

/// The key whose string value is streamed, as it appears in the body.
const CONTENT_KEY: &[u8] = b"\"content_base64\"";
/// The key whose value names the file.
const PATH_KEY: &[u8] = b"\"path\"";

/// What the caller of [`Scanner::feed`] must act on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Event {
    /// The top-level `content_base64` string value just opened: begin the upload, or [`Scanner::keep_whole`].
    ContentStart,
    /// [`Scanner::staged`] holds the next piece of content: call [`Scanner::written`] or [`Scanner::keep_whole`].
    Piece,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
enum Mode {
    /// Following the document's structure.
    #[default]
    Structure,
    /// Inside the content string.
    Content,
    /// Keeping everything from here on, unscanned.
    Whole,
}

/// Follows a JSON upload body's structure across frames; see the module doc.
#[derive(Debug, Default)]
pub(crate) struct Scanner {
    /// The body without the elided content characters.
    rest: Vec<u8>,
    /// Content characters of the piece in progress.
    staged: Vec<u8>,
    /// Where in `rest` the elided characters were.
    elide_at: usize,
    /// How many were elided.
    elided: usize,
    mode: Mode,
    depth: u32,
    in_string: bool,
    escaped: bool,
    string_start: usize,
    /// At the top level of the object, the next string is a key.
    expect_key: bool,
    /// The top-level key just read, waiting for its `:`.
    key: Option<Range<usize>>,
    /// The top-level key whose value comes next.
    value_of: Option<Range<usize>>,
    /// Waiting for the first byte of a top-level value.
    awaiting_value: bool,
    /// Inside the value of the first top-level `path`, from this offset of `rest`.
    path_from: Option<usize>,
    /// The raw JSON of the first top-level `path` value, once complete.
    path: Option<Range<usize>>,
    seen_content: bool,
    /// Content characters per piece.
    piece: PieceLen,
}

/// Content characters per piece: [`PIECE`] unless a caller chose fewer.
#[derive(Debug, Clone, Copy)]
struct PieceLen(usize);

impl Default for PieceLen {
    fn default() -> Self {
        PieceLen(PIECE)
    }
}

impl Scanner {
    /// A scanner staging pieces of `piece` content characters (rounded
    /// down to a multiple of 4, at least 4) instead of [`PIECE`]: unit tests
    /// choose small pieces, so that small bodies cross their boundaries.
    #[cfg(test)]
    pub(crate) fn with_piece(piece: usize) -> Self {
        Scanner { piece: PieceLen((piece / 4 * 4).max(4)), ..Scanner::default() }
    }

    /// Content characters per piece.
    pub(crate) fn piece(&self) -> usize {
        self.piece.0
    }

    /// Consumes `input` until it is empty (`None`) or the caller must act.
    pub(crate) fn feed(&mut self, input: &mut &[u8]) -> Option<Event> {
        while !input.is_empty() {
            match self.mode {
                Mode::Whole => {
                    self.rest.extend_from_slice(input);
                    *input = &[];
                }
                Mode::Content => {
                    if let Some(event) = self.content(input) {
                        return Some(event);
                    }
                }
                Mode::Structure => {
                    let byte = input[0];
                    *input = &input[1..];
                    if self.structure(byte) {
                        return Some(Event::ContentStart);
                    }
                }
            }
        }
        None
    }

    /// Stages content characters up to a piece, the closing quote or an escape.
    fn content(&mut self, input: &mut &[u8]) -> Option<Event> {
        let room = self.piece.0 - self.staged.len();
        let window = &input[..input.len().min(room)];
        match memchr::memchr2(b'"', b'\\', window) {
            Some(end) => {
                self.staged.extend_from_slice(&window[..end]);
                *input = &input[end..];
                if input[0] == b'\\' {
                    // An escape: whatever it means, the plain parse decides.
                    self.keep_whole();
                    return None;
                }
                // The closing quote is left for the structure to read.
                self.mode = Mode::Structure;
                (!self.staged.is_empty()).then_some(Event::Piece)
            }
            None => {
                self.staged.extend_from_slice(window);
                *input = &input[window.len()..];
                (self.staged.len() == self.piece.0).then_some(Event::Piece)
            }
        }
    }

    /// Reads one byte of structure; `true` when it opened the content string.
    fn structure(&mut self, byte: u8) -> bool {
        if self.awaiting_value && !byte.is_ascii_whitespace() {
            self.awaiting_value = false;
            let key = self.value_of.clone().map(|k| &self.rest[k]);
            if byte == b'"' && !self.seen_content && key == Some(CONTENT_KEY) {
                self.seen_content = true;
                self.rest.push(byte);
                self.elide_at = self.rest.len();
                self.in_string = true;
                self.mode = Mode::Content;
                return true;
            }
            if self.path.is_none() && self.path_from.is_none() && key == Some(PATH_KEY) {
                self.path_from = Some(self.rest.len());
            }
        }
        let at = self.rest.len();
        self.rest.push(byte);
        if self.in_string {
            if self.escaped {
                self.escaped = false;
            } else if byte == b'\\' {
                self.escaped = true;
            } else if byte == b'"' {
                self.in_string = false;
                if self.depth == 1 && self.expect_key {
                    self.key = Some(self.string_start..at + 1);
                }
            }
            return false;
        }
        match byte {
            b'"' => {
                self.in_string = true;
                self.string_start = at;
            }
            b'{' | b'[' => {
                self.depth += 1;
                if self.depth == 1 {
                    self.expect_key = byte == b'{';
                }
            }
            b'}' | b']' => {
                if self.depth == 1 {
                    self.end_value(at);
                }
                self.depth = self.depth.saturating_sub(1);
            }
            b':' if self.depth == 1 && self.expect_key => {
                self.expect_key = false;
                self.value_of = self.key.take();
                self.awaiting_value = true;
            }
            b',' if self.depth == 1 => {
                self.end_value(at);
                self.expect_key = true;
                self.value_of = None;
            }
            _ => {}
        }
        false
    }

    fn end_value(&mut self, at: usize) {
        if let Some(from) = self.path_from.take() {
            self.path = Some(from..at);
        }
    }

    /// The raw JSON of the top-level `path` value, if it came before the content.
    pub(crate) fn path(&self) -> Option<&[u8]> {
        self.path.clone().map(|range| &self.rest[range])
    }

    /// The piece of content to decode.
    pub(crate) fn staged(&self) -> &[u8] {
        &self.staged
    }

    /// The staged piece was decoded and written: it leaves `rest` for good.
    pub(crate) fn written(&mut self) {
        self.elided += self.staged.len();
        self.staged.clear();
    }

    /// Keeps the staged characters and everything after them in `rest`.
    pub(crate) fn keep_whole(&mut self) {
        self.rest.extend_from_slice(&self.staged);
        self.staged.clear();
        self.mode = Mode::Whole;
    }

    /// The body ended.
    pub(crate) fn end(&mut self) {
        if self.mode == Mode::Content {
            self.keep_whole();
        }
    }

    /// Whether the body is kept whole (the plain way decides).
    pub(crate) fn whole(&self) -> bool {
        self.mode == Mode::Whole
    }

    /// The body kept so far (without the elided characters).
    pub(crate) fn rest(&self) -> &[u8] {
        &self.rest
    }

    /// How many content characters were decoded and left out of [`Scanner::rest`].
    pub(crate) fn elided(&self) -> usize {
        self.elided
    }

    /// The body with each elided character replaced by `A`.
    pub(crate) fn shadow(&self) -> bytes::Bytes {
        let mut shadow = Vec::with_capacity(self.rest.len() + self.elided);
        shadow.extend_from_slice(&self.rest[..self.elide_at]);
        shadow.resize(self.elide_at + self.elided, b'A');
        shadow.extend_from_slice(&self.rest[self.elide_at..]);
        bytes::Bytes::from(shadow)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds `body` in frames of `frame` bytes, taking every piece; returns the scanner,
    /// the content it staged, and the path it saw when the content started.
    fn scan(body: &[u8], frame: usize) -> (Scanner, Vec<u8>, Option<Vec<u8>>) {
        let mut scanner = Scanner::default();
        let (mut content, mut path) = (Vec::new(), None);
        for chunk in body.chunks(frame) {
            let mut input = chunk;
            while let Some(event) = scanner.feed(&mut input) {
                match event {
                    Event::ContentStart => path = scanner.path().map(<[u8]>::to_vec),
                    Event::Piece => {
                        assert!(scanner.staged().len() <= PIECE);
                        content.extend_from_slice(scanner.staged());
                        scanner.written();
                    }
                }
            }
        }
        scanner.end();
        (scanner, content, path)
    }

    #[test]
    fn content_is_staged_in_pieces_whatever_the_framing() {
        let text = "QUJD".repeat(PIECE / 4 * 2 + 7);
        let body =
            format!("{{ \"path\" : \"a/b.bin\" ,\n \"content_base64\": \"{text}\", \"x\": [1, {{\"y\": \"}}\"}}]}}");
        for frame in [1, 3, 4096, 5000, body.len()] {
            let (scanner, content, path) = scan(body.as_bytes(), frame);
            assert!(!scanner.whole(), "frame {frame}");
            assert_eq!(content, text.as_bytes(), "frame {frame}");
            assert_eq!(path.as_deref(), Some(&br#""a/b.bin" "#[..]), "frame {frame}");
            assert_eq!(scanner.elided(), text.len());
            assert_eq!(&scanner.shadow()[..], body.replace(&text, &"A".repeat(text.len())).as_bytes());
            let rest: serde_json::Value = serde_json::from_slice(scanner.rest()).expect("rest parses");
            assert_eq!(rest["content_base64"], "");
        }
    }

    #[test]
    fn only_the_first_top_level_content_string_is_streamed() {
        for body in [
            &br#"{"a": {"content_base64": "QUJD"}, "path": "p"}"#[..],
            br#"{"a": "\"content_base64\": \"QUJD\"", "path": "p"}"#,
            br#"{"content\u005fbase64": "QUJD", "path": "p"}"#,
            br#"["content_base64", "QUJD"]"#,
            br#"{"content_base64": 5}"#,
        ] {
            let (scanner, content, _) = scan(body, 2);
            assert!(content.is_empty(), "{}", String::from_utf8_lossy(body));
            assert_eq!(scanner.rest(), body);
        }
        let (scanner, content, _) = scan(br#"{"content_base64": "QUJD", "content_base64": "REVG"}"#, 1);
        assert_eq!((content.as_slice(), scanner.elided()), (&b"QUJD"[..], 4));
    }

    #[test]
    fn escapes_and_unterminated_content_keep_the_body_whole() {
        let body = br#"{"path": "p", "content_base64": "QUJD\/QUJD"}"#;
        let (scanner, content, _) = scan(body, 7);
        assert!(scanner.whole() && content.is_empty());
        assert_eq!(scanner.rest(), body);
        let body = br#"{"path": "p", "content_base64": "QUJDQUJD"#;
        let (scanner, content, _) = scan(body, 3);
        assert!(scanner.whole() && content.is_empty());
        assert_eq!(scanner.rest(), body);
    }

    #[test]
    fn a_path_after_the_content_is_not_known_at_its_start() {
        let (_, content, path) = scan(br#"{"content_base64": "QUJD", "path": "p"}"#, 5);
        assert_eq!((content.as_slice(), path), (&b"QUJD"[..], None));
        let (_, _, path) = scan(br#"{"path": {"a": ["b", "c"]}, "content_base64": ""}"#, 1);
        assert_eq!(path.as_deref(), Some(&br#"{"a": ["b", "c"]}"#[..]));
    }
}
