//! Shell-style splitting of a command line into argv, without a shell.
//!
//! The reference splits `command` with Python's `shlex.split` (POSIX mode,
//! no comments), and clients rely on the same tokens: `#` is an ordinary
//! character, a backslash outside quotes escapes any character (a newline
//! too), inside double quotes it escapes only `"` and `\`, and single quotes
//! escape nothing. General-purpose crates follow the POSIX shell instead
//! (comments, `\$` in double quotes), which would change argv, hence this
//! small state machine. [`quote`] is the inverse (Python's `shlex.quote`).
//!
//! The daemon splits `/shell` command lines with [`split`]; `abx exec`
//! joins its words with [`join`] so the daemon sees the same argv.
//!
//! ```
//! use abx_wire::codec::shlex::{join, split};
//!
//! let argv = ["grep", "-rn", "it's here", "#tag"];
//! let line = join(&argv);
//! assert_eq!(line, r#"grep -rn 'it'"'"'s here' '#tag'"#);
//! assert_eq!(split(&line).unwrap(), argv);
//! ```

/// Why a command line cannot be split; the messages are Python's.
///
/// ```
/// use abx_wire::codec::shlex::{split, SplitError};
///
/// let err = split("echo \\").unwrap_err();
/// assert_eq!(err, SplitError::NoEscapedCharacter);
/// assert_eq!(err.to_string(), "No escaped character");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SplitError {
    /// A quote was opened and never closed.
    #[error("No closing quotation")]
    NoClosingQuotation,
    /// The line ends with a lone backslash.
    #[error("No escaped character")]
    NoEscapedCharacter,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum State {
    Space,
    Word,
    Quote(char),
    Escape(EscapedFrom),
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum EscapedFrom {
    Word,
    DoubleQuote,
}

fn is_space(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\r' | '\n')
}

/// Splits `line` as Python's `shlex.split(line)` does.
///
/// # Errors
/// An unclosed quote or a trailing backslash.
///
/// ```
/// use abx_wire::codec::shlex::{split, SplitError};
///
/// assert_eq!(split(r#"echo "a b" c\ d"#).unwrap(), ["echo", "a b", "c d"]);
/// assert_eq!(split("echo 'open"), Err(SplitError::NoClosingQuotation));
/// ```
pub fn split(line: &str) -> Result<Vec<String>, SplitError> {
    let mut words = Vec::new();
    let mut token = String::new();
    let mut quoted = false;
    let mut state = State::Space;
    for c in line.chars() {
        state = match state {
            State::Space | State::Word => match c {
                c if is_space(c) => {
                    if state == State::Word || quoted {
                        words.push(std::mem::take(&mut token));
                        quoted = false;
                    }
                    State::Space
                }
                '\\' => State::Escape(EscapedFrom::Word),
                '\'' | '"' => {
                    quoted = true;
                    State::Quote(c)
                }
                c => {
                    token.push(c);
                    State::Word
                }
            },
            State::Quote(q) if c == q => State::Word,
            State::Quote('"') if c == '\\' => State::Escape(EscapedFrom::DoubleQuote),
            State::Quote(q) => {
                token.push(c);
                State::Quote(q)
            }
            State::Escape(from) => {
                if from == EscapedFrom::DoubleQuote && c != '"' && c != '\\' {
                    token.push('\\');
                }
                token.push(c);
                match from {
                    EscapedFrom::Word => State::Word,
                    EscapedFrom::DoubleQuote => State::Quote('"'),
                }
            }
        };
    }
    match state {
        State::Quote(_) => Err(SplitError::NoClosingQuotation),
        State::Escape(_) => Err(SplitError::NoEscapedCharacter),
        State::Word => {
            words.push(token);
            Ok(words)
        }
        State::Space => {
            if quoted {
                words.push(token);
            }
            Ok(words)
        }
    }
}

/// Quotes `word` so that [`split`] (and a POSIX shell) read it back as one word.
///
/// ```
/// use abx_wire::codec::shlex::quote;
///
/// assert_eq!(quote("plain.txt"), "plain.txt");
/// assert_eq!(quote("two words"), "'two words'");
/// assert_eq!(quote(""), "''");
/// ```
pub fn quote(word: &str) -> String {
    let safe = |c: char| c.is_ascii_alphanumeric() || "@%+=:,./-_".contains(c);
    if word.is_empty() {
        "''".to_string()
    } else if word.chars().all(safe) {
        word.to_string()
    } else {
        format!("'{}'", word.replace('\'', "'\"'\"'"))
    }
}

/// Joins words into one line that [`split`] turns back into the same words.
///
/// ```
/// assert_eq!(abx_wire::codec::shlex::join(&["ls", "-l", "my dir"]), "ls -l 'my dir'");
/// ```
pub fn join<S: AsRef<str>>(words: &[S]) -> String {
    words.iter().map(|w| quote(w.as_ref())).collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Expected values produced by Python 3.11's `shlex.split`.
    #[test]
    fn splits_like_python_shlex() {
        let cases: &[(&str, &[&str])] = &[
            ("echo hi", &["echo", "hi"]),
            ("  a   b  ", &["a", "b"]),
            ("echo # not a comment", &["echo", "#", "not", "a", "comment"]),
            ("a'b c'd", &["ab cd"]),
            (r#"say "a \"b\" \$x \n""#, &["say", r#"a "b" \$x \n"#]),
            (r"a\ b \$c \\", &["a b", "$c", "\\"]),
            ("'' \"\" x", &["", "", "x"]),
            ("'it''s'", &["its"]),
            (r"'a\b'", &[r"a\b"]),
            ("a\\\nb", &["a\nb"]),
            ("tab\tsep\rret", &["tab", "sep", "ret"]),
            ("héllo wörld", &["héllo", "wörld"]),
            ("", &[]),
            ("   ", &[]),
        ];
        for (line, expected) in cases {
            assert_eq!(
                split(line).as_deref(),
                Ok(&expected.iter().map(|s| s.to_string()).collect::<Vec<_>>()[..]),
                "{line:?}"
            );
        }
    }

    #[test]
    fn errors_are_pythons() {
        assert_eq!(split("echo \"x"), Err(SplitError::NoClosingQuotation));
        assert_eq!(split("echo 'x"), Err(SplitError::NoClosingQuotation));
        assert_eq!(split("echo \\"), Err(SplitError::NoEscapedCharacter));
        assert_eq!(SplitError::NoClosingQuotation.to_string(), "No closing quotation");
    }

    #[test]
    fn quote_round_trips() {
        let words = ["plain", "with space", "it's", "", "$HOME", "a\"b", "#", "tab\there"];
        assert_eq!(split(&join(&words)).expect("splits"), words);
        assert_eq!(quote("it's"), r#"'it'"'"'s'"#);
    }
}
