//! Text files as coding agents use them: a range of lines read within a byte
//! budget, and an exact-string replacement with a uniqueness check.
//!
//! Reads stream through a buffered reader and keep at most the budget, so
//! memory stays flat whatever the file's size.

use std::io::{BufRead, BufReader, Read};

use super::FsError;

/// Bytes looked at to tell a binary file from a text file.
const SNIFF: usize = 8 * 1024;

/// What [`read_lines`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Text {
    /// Lines of a text file.
    Lines(Lines),
    /// The file holds NUL bytes in its first 8 KiB: not text.
    Binary,
}

/// A range of lines.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lines {
    /// The lines, each with its line ending (invalid UTF-8 replaced).
    pub text: String,
    /// The first line returned (1-based).
    pub first: u64,
    /// Lines returned.
    pub count: u64,
    /// The next line to read, when the file goes on past what was returned.
    pub next: Option<u64>,
}

/// Reads from line `first` (1-based) at most `limit` lines and `budget`
/// bytes of `file` (a `&File` leaves the file to the caller, its offset
/// moved); a line longer than the whole budget is cut.
///
/// # Errors
/// I/O errors while reading.
pub fn read_lines(file: impl Read, first: u64, limit: Option<u64>, budget: usize) -> Result<Text, std::io::Error> {
    let mut reader = BufReader::with_capacity(64 * 1024, file);
    if reader.fill_buf()?.iter().take(SNIFF).any(|b| *b == 0) {
        return Ok(Text::Binary);
    }
    let first = first.max(1);
    let mut line = Vec::new();
    let mut number = 0u64;
    let mut kept = Vec::new();
    let mut count = 0u64;
    loop {
        line.clear();
        // One line, but never more than the budget; the rest of a longer one is skipped.
        let read = (&mut reader).take(budget as u64 + 1).read_until(b'\n', &mut line)?;
        if read == 0 {
            break;
        }
        if !line.ends_with(b"\n") && read > budget {
            skip_line(&mut reader)?;
        }
        number += 1;
        if number < first {
            continue;
        }
        if limit.is_some_and(|l| count >= l) || kept.len() + line.len() > budget {
            let next = if kept.is_empty() {
                // A single line over the budget: its start.
                kept.extend_from_slice(&line[..budget.min(line.len())]);
                count = 1;
                number + 1
            } else {
                number
            };
            return Ok(Text::Lines(Lines { text: lossy(kept), first, count, next: Some(next) }));
        }
        kept.extend_from_slice(&line);
        count += 1;
    }
    Ok(Text::Lines(Lines { text: lossy(kept), first, count, next: None }))
}

/// Consumes the rest of the current line.
fn skip_line(reader: &mut impl BufRead) -> Result<(), std::io::Error> {
    loop {
        let buffer = reader.fill_buf()?;
        if buffer.is_empty() {
            return Ok(());
        }
        match memchr::memchr(b'\n', buffer) {
            Some(end) => {
                reader.consume(end + 1);
                return Ok(());
            }
            None => {
                let len = buffer.len();
                reader.consume(len);
            }
        }
    }
}

fn lossy(bytes: Vec<u8>) -> String {
    String::from_utf8(bytes).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

/// `content` with `old` replaced by `new`: exactly once unless `all`.
///
/// # Errors
/// [`FsError::Invalid`] when `old` is empty, missing, or (without `all`) not unique.
pub fn replace(content: &str, old: &str, new: &str, all: bool) -> Result<(String, usize), FsError> {
    if old.is_empty() {
        return Err(FsError::Invalid("'old_string' must not be empty".into()));
    }
    let found = content.matches(old).count();
    match (found, all) {
        (0, _) => Err(FsError::Invalid("'old_string' was not found in the file".into())),
        (1, _) | (_, true) => Ok((content.replace(old, new), found)),
        (n, false) => Err(FsError::Invalid(format!(
            "'old_string' occurs {n} times; add surrounding lines to make it unique, or set replace_all"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::File;
    use std::io::Write;

    fn file(content: &[u8]) -> File {
        let mut f = tempfile::tempfile().expect("tempfile");
        f.write_all(content).expect("write");
        std::io::Seek::rewind(&mut f).expect("rewind");
        f
    }

    fn lines(text: Text) -> Lines {
        match text {
            Text::Lines(lines) => lines,
            Text::Binary => panic!("binary"),
        }
    }

    #[test]
    fn ranges_of_lines_say_where_to_go_on() {
        let all = lines(read_lines(file(b"a\nb\nc\nd"), 1, None, 1024).expect("read"));
        assert_eq!((all.text.as_str(), all.count, all.next), ("a\nb\nc\nd", 4, None));
        let two = lines(read_lines(file(b"a\nb\nc\nd"), 2, Some(2), 1024).expect("read"));
        assert_eq!((two.text.as_str(), two.first, two.next), ("b\nc\n", 2, Some(4)));
        let past = lines(read_lines(file(b"a\n"), 5, None, 1024).expect("read"));
        assert_eq!((past.text.as_str(), past.count), ("", 0));
    }

    #[test]
    fn the_budget_cuts_between_lines_and_inside_a_huge_one() {
        let cut = lines(read_lines(file(b"aaaa\nbbbb\ncccc\n"), 1, None, 10).expect("read"));
        assert_eq!((cut.text.as_str(), cut.next), ("aaaa\nbbbb\n", Some(3)));
        let long = lines(read_lines(file(&[b'x'; 100]), 1, None, 10).expect("read"));
        assert_eq!((long.text.len(), long.next), (10, Some(2)));
    }

    #[test]
    fn nul_bytes_mean_binary() {
        assert_eq!(read_lines(file(b"\x89PNG\0\0"), 1, None, 10).expect("read"), Text::Binary);
    }

    #[test]
    fn replacements_must_be_unique_unless_all() {
        assert_eq!(replace("a b a", "b", "c", false).expect("unique"), ("a c a".into(), 1));
        assert!(replace("a b a", "a", "c", false).is_err());
        assert_eq!(replace("a b a", "a", "c", true).expect("all"), ("c b c".into(), 2));
        assert!(replace("abc", "x", "y", false).is_err());
        assert!(replace("abc", "", "y", true).is_err());
    }
}
