//! Decoding a byte stream that arrives in chunks (pipe reads, terminal
//! output, keystrokes, network frames) as UTF-8 text.
//!
//! A read may end in the middle of a multibyte character. Decoding each
//! chunk on its own would turn both halves into replacement characters;
//! [`Utf8Decoder`] holds the incomplete tail back (at most 3 bytes, so its
//! memory is bounded whatever the input) and completes it with the next
//! chunk. Invalid bytes become U+FFFD exactly as decoding the whole stream
//! at once with [`String::from_utf8_lossy`] would make them: the output
//! never depends on where the chunks were cut.
//!
//! ```
//! use abx_wire::codec::utf8::Utf8Decoder;
//!
//! let euro = "€".as_bytes(); // three bytes
//! let mut decoder = Utf8Decoder::new();
//! assert_eq!(decoder.decode(&[b'1', euro[0]]), "1");
//! assert_eq!(decoder.decode(&euro[1..]), "€");
//! assert_eq!(decoder.finish(), "");
//! ```

/// The longest incomplete character held back between chunks.
const MAX_PENDING: usize = 3;

/// A streaming UTF-8 decoder: characters split across chunks are joined,
/// invalid bytes become U+FFFD, and at most 3 bytes are held back.
///
/// [`decode`](Utf8Decoder::decode) gives text; [`push`](Utf8Decoder::push)
/// gives the raw bytes cut at a character boundary, for callers that keep
/// bytes (invalid ones included) and decode later.
///
/// ```
/// use abx_wire::codec::utf8::Utf8Decoder;
///
/// let mut decoder = Utf8Decoder::new();
/// let mut text = String::new();
/// for chunk in "naïve 😀".as_bytes().chunks(2) {
///     text += &decoder.decode(chunk);
/// }
/// text += &decoder.finish();
/// assert_eq!(text, "naïve 😀");
/// ```
#[derive(Debug, Clone, Default)]
pub struct Utf8Decoder {
    pending: Vec<u8>,
    resync: bool,
}

impl Utf8Decoder {
    /// A decoder at the start of a stream.
    ///
    /// ```
    /// let decoder = abx_wire::codec::utf8::Utf8Decoder::new();
    /// assert!(decoder.pending().is_empty());
    /// ```
    pub fn new() -> Self {
        Self::default()
    }

    /// The text of `bytes`, after what was held back, without an incomplete last character.
    ///
    /// ```
    /// use abx_wire::codec::utf8::Utf8Decoder;
    ///
    /// let mut decoder = Utf8Decoder::new();
    /// assert_eq!(decoder.decode(b"a\xffb\xe2\x82"), "a\u{FFFD}b");
    /// assert_eq!(decoder.decode(b"\xac"), "€");
    /// ```
    pub fn decode(&mut self, bytes: &[u8]) -> String {
        let mut text = String::with_capacity(bytes.len() + self.pending.len());
        self.decode_into(bytes, &mut text);
        text
    }

    /// [`decode`](Utf8Decoder::decode), appending to `out` (no allocation when it has room).
    ///
    /// ```
    /// use abx_wire::codec::utf8::Utf8Decoder;
    ///
    /// let mut decoder = Utf8Decoder::new();
    /// let mut out = String::from("> ");
    /// decoder.decode_into(b"ok", &mut out);
    /// assert_eq!(out, "> ok");
    /// ```
    pub fn decode_into(&mut self, bytes: &[u8], out: &mut String) {
        let rest = self.complete_pending(bytes, |done| push_lossy(out, done));
        if let Some(rest) = rest {
            let end = complete_len(rest);
            push_lossy(out, &rest[..end]);
            self.pending.extend_from_slice(&rest[end..]);
        }
    }

    /// The bytes of `bytes`, after what was held back, up to the last
    /// complete character; invalid bytes are kept as they are.
    ///
    /// ```
    /// use abx_wire::codec::utf8::Utf8Decoder;
    ///
    /// let mut decoder = Utf8Decoder::new();
    /// assert_eq!(decoder.push(b"\xff\xc3"), b"\xff");
    /// assert_eq!(decoder.push(b"\xa9!"), "é!".as_bytes());
    /// ```
    pub fn push(&mut self, bytes: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(bytes.len() + self.pending.len());
        let rest = self.complete_pending(bytes, |done| out.extend_from_slice(done));
        if let Some(rest) = rest {
            let end = complete_len(rest);
            out.extend_from_slice(&rest[..end]);
            self.pending.extend_from_slice(&rest[end..]);
        }
        out
    }

    /// Whatever is held back, decoded as it is (at the end of the stream).
    ///
    /// ```
    /// use abx_wire::codec::utf8::Utf8Decoder;
    ///
    /// let mut decoder = Utf8Decoder::new();
    /// assert_eq!(decoder.decode(b"x\xe2\x82"), "x");
    /// assert_eq!(decoder.finish(), "\u{FFFD}");
    /// assert_eq!(decoder.finish(), "");
    /// ```
    pub fn finish(&mut self) -> String {
        let text = String::from_utf8_lossy(&self.pending).into_owned();
        self.pending.clear();
        text
    }

    /// Whatever is held back, as raw bytes (at the end of the stream).
    ///
    /// ```
    /// use abx_wire::codec::utf8::Utf8Decoder;
    ///
    /// let mut decoder = Utf8Decoder::new();
    /// decoder.push(b"\xf0\x9f");
    /// assert_eq!(decoder.finish_bytes(), b"\xf0\x9f");
    /// ```
    pub fn finish_bytes(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.pending)
    }

    /// The incomplete character held back (at most 3 bytes).
    ///
    /// ```
    /// use abx_wire::codec::utf8::Utf8Decoder;
    ///
    /// let mut decoder = Utf8Decoder::new();
    /// decoder.decode(b"\xe2");
    /// assert_eq!(decoder.pending(), b"\xe2");
    /// ```
    pub fn pending(&self) -> &[u8] {
        &self.pending
    }

    /// Forgets a held-back partial character, and drops continuation bytes
    /// at the start of the next chunk: the stream is re-entered mid-way (a
    /// terminal reader that lost part of the scrollback).
    ///
    /// ```
    /// use abx_wire::codec::utf8::Utf8Decoder;
    ///
    /// let mut decoder = Utf8Decoder::new();
    /// decoder.resync();
    /// assert_eq!(decoder.decode(&"€z".as_bytes()[1..]), "z");
    /// ```
    pub fn resync(&mut self) {
        self.pending.clear();
        self.resync = true;
    }

    /// Completes (or proves invalid) the held-back character with the head
    /// of `bytes`, hands it to `done`, and returns the rest of `bytes`;
    /// `None` when all of `bytes` went into a still incomplete character.
    fn complete_pending<'a>(&mut self, mut bytes: &'a [u8], done: impl FnOnce(&[u8])) -> Option<&'a [u8]> {
        if self.resync {
            let skip = bytes.iter().take(MAX_PENDING).take_while(|b| is_continuation(**b)).count();
            bytes = &bytes[skip..];
            self.resync = bytes.is_empty();
        }
        let Some(&lead) = self.pending.first() else { return Some(bytes) };
        let held = self.pending.len();
        let take = sequence_len(lead).saturating_sub(held).min(bytes.len());
        self.pending.extend_from_slice(&bytes[..take]);
        let used = match std::str::from_utf8(&self.pending) {
            Ok(_) => {
                done(&self.pending);
                take
            }
            // Still incomplete: `bytes` ran out.
            Err(e) if e.error_len().is_none() => return None,
            // Invalid from a byte of `bytes` on: the held bytes and those
            // before it are one replacement; the rest is decoded afresh.
            Err(e) => {
                let bad = e.error_len().unwrap_or(held).max(held);
                done(&self.pending[..bad]);
                bad - held
            }
        };
        self.pending.clear();
        Some(&bytes[used..])
    }
}

/// Whether `byte` continues a multibyte character (`10xxxxxx`).
fn is_continuation(byte: u8) -> bool {
    byte & 0xC0 == 0x80
}

/// The length of the character a lead byte starts (1 for anything else).
fn sequence_len(lead: u8) -> usize {
    match lead {
        0xC2..=0xDF => 2,
        0xE0..=0xEF => 3,
        0xF0..=0xF4 => 4,
        _ => 1,
    }
}

/// The length of `bytes` without a trailing incomplete (but so far valid)
/// character; invalid bytes elsewhere count as complete.
///
/// ```
/// use abx_wire::codec::utf8::complete_len;
///
/// assert_eq!(complete_len(b"ab\xe2\x82"), 2);
/// assert_eq!(complete_len(b"ab\xff"), 3);
/// assert_eq!(complete_len("é".as_bytes()), 2);
/// ```
pub fn complete_len(bytes: &[u8]) -> usize {
    let len = bytes.len();
    // An incomplete character is a lead byte and at most 2 continuation bytes.
    let floor = len.saturating_sub(MAX_PENDING);
    let Some(start) = (floor..len).rev().find(|&i| !is_continuation(bytes[i])) else { return len };
    if len - start >= sequence_len(bytes[start]) {
        return len;
    }
    match std::str::from_utf8(&bytes[start..]) {
        Err(e) if e.error_len().is_none() => start,
        _ => len,
    }
}

/// Appends `bytes` to `out`, invalid sequences as U+FFFD.
fn push_lossy(out: &mut String, bytes: &[u8]) {
    for chunk in bytes.utf8_chunks() {
        out.push_str(chunk.valid());
        if !chunk.invalid().is_empty() {
            out.push(char::REPLACEMENT_CHARACTER);
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// Decodes `bytes` cut at `cuts`, through `decode` and through `push`.
    fn chunked(bytes: &[u8], cuts: &[usize]) -> (String, Vec<u8>) {
        let (mut text, mut raw) = (String::new(), Vec::new());
        let (mut decoder, mut pusher) = (Utf8Decoder::new(), Utf8Decoder::new());
        let mut from = 0;
        for &cut in cuts.iter().chain(std::iter::once(&bytes.len())) {
            let cut = cut.clamp(from, bytes.len());
            text += &decoder.decode(&bytes[from..cut]);
            let complete = pusher.push(&bytes[from..cut]);
            assert!(pusher.pending().len() <= MAX_PENDING && decoder.pending().len() <= MAX_PENDING);
            raw.extend_from_slice(&complete);
            from = cut;
        }
        text += &decoder.finish();
        raw.extend(pusher.finish_bytes());
        (text, raw)
    }

    #[test]
    fn characters_split_anywhere_are_joined() {
        let text = "héllo €𝄞!";
        let bytes = text.as_bytes();
        for a in 0..=bytes.len() {
            for b in a..=bytes.len() {
                assert_eq!(chunked(bytes, &[a, b]), (text.to_string(), bytes.to_vec()), "cuts {a} {b}");
            }
        }
    }

    #[test]
    fn invalid_sequences_are_replaced_as_a_whole_decode_would() {
        let cases: &[&[u8]] = &[
            b"a\xffb",
            b"\xe2\x82a",
            b"\xe0\x80\x80",
            b"\xf4\x90\x80\x80",
            b"\xf0\x9f\x98",
            b"\xed\xa0\x80",
            b"\xc0\xaf",
            b"\x80\x80\x80\x80x",
            b"\xe2\x82\xe2\x82\xac",
        ];
        for bytes in cases {
            let whole = String::from_utf8_lossy(bytes).into_owned();
            for cut in 0..=bytes.len() {
                assert_eq!(chunked(bytes, &[cut]), (whole.clone(), bytes.to_vec()), "{bytes:x?} cut at {cut}");
            }
        }
    }

    #[test]
    fn complete_pieces_end_on_character_boundaries() {
        let mut decoder = Utf8Decoder::new();
        assert_eq!(decoder.push("a€".as_bytes().split_at(3).0), b"a");
        assert_eq!(decoder.pending(), &"€".as_bytes()[..2]);
        assert_eq!(complete_len(b""), 0);
        assert_eq!(complete_len(b"\xf0\x9f\x98"), 0);
        assert_eq!(complete_len(b"\xf0\x9f\x98\x80"), 4);
        assert_eq!(complete_len(b"\x9f\x98\x80"), 3, "lone continuation bytes are invalid, not pending");
    }

    #[test]
    fn a_stream_entered_mid_character_starts_at_the_next_one() {
        let mut decoder = Utf8Decoder::new();
        decoder.resync();
        assert_eq!(decoder.decode(&"😀".as_bytes()[1..2]), "");
        assert_eq!(decoder.decode(&"😀z".as_bytes()[2..]), "z");
        decoder.decode(b"\xe2");
        decoder.resync();
        assert_eq!(decoder.pending(), b"");
        assert_eq!(decoder.decode(b"ok"), "ok");
    }

    proptest! {
        #[test]
        fn any_bytes_cut_anywhere_decode_as_a_whole(
            bytes in proptest::collection::vec(prop_oneof![any::<u8>(), 0x80u8..0xC0, 0xE0u8..0xF5], 0..40),
            cuts in proptest::collection::vec(0usize..40, 0..6),
        ) {
            let mut cuts = cuts;
            cuts.sort_unstable();
            let (text, raw) = chunked(&bytes, &cuts);
            prop_assert_eq!(text, String::from_utf8_lossy(&bytes).into_owned());
            prop_assert_eq!(raw, bytes);
        }
    }
}
