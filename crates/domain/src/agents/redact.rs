//! Secret redaction of everything a turn stores or streams: registered
//! secret values (verbatim, URL-encoded with either case of hex digits,
//! JSON-escaped, hex in either case, and base64, standard and URL-safe, at
//! each of the three alignments it can have inside a longer encoded text,
//! so `echo "Bearer $TOKEN" | base64` is caught) and common token shapes
//! (`sk-...`, GitHub tokens, bearer tokens, `api_key=...`).
//!
//! Best effort: a copy transformed otherwise (encrypted, reversed, split
//! across two tool calls) cannot be recognised.

use std::sync::LazyLock;

use regex::Regex;

/// What a secret becomes.
pub const REDACTED: &str = "[REDACTED]";

/// Secrets shorter than this are not registered (they would mask ordinary text).
const MIN_SECRET_LEN: usize = 6;

static TOKENS: LazyLock<Vec<Regex>> = LazyLock::new(|| {
    [
        r"\bsk-[A-Za-z0-9_\-]{16,}",
        r"\b(?:ghp|gho|ghs|ghu|github_pat)_[A-Za-z0-9_]{16,}",
        r"(?i)\bbearer\s+[A-Za-z0-9._~+/=\-]{16,}",
    ]
    .iter()
    .filter_map(|p| Regex::new(p).ok())
    .collect()
});

static ASSIGNMENT: LazyLock<Option<Regex>> =
    LazyLock::new(|| Regex::new(r#"(?i)(x-api-key|api[_-]?key|authorization)(\s*[:=]\s*)(['"]?)[^\s'",]{8,}"#).ok());

/// Masks registered secrets and common token shapes in text.
#[derive(Debug, Clone, Default)]
pub struct Redactor {
    /// Every form of every secret, longest first.
    needles: Vec<String>,
}

impl Redactor {
    /// A redactor for these secret values.
    pub fn new<'a>(secrets: impl IntoIterator<Item = &'a str>) -> Self {
        let mut redactor = Redactor::default();
        redactor.add(secrets);
        redactor
    }

    /// Registers more secret values (shorter than six characters are ignored).
    pub fn add<'a>(&mut self, secrets: impl IntoIterator<Item = &'a str>) {
        for value in secrets {
            if value.chars().count() < MIN_SECRET_LEN {
                continue;
            }
            let json = crate::pyrepr::json_str(value);
            let quoted = url_quote(value);
            let mut forms = vec![
                value.to_string(),
                lowercase_escapes(&quoted),
                quoted,
                json[1..json.len() - 1].to_string(),
                crate::ids::hex(value.as_bytes()),
                crate::ids::hex(value.as_bytes()).to_ascii_uppercase(),
            ];
            forms.extend(base64_forms(value.as_bytes()));
            for form in forms {
                if form.chars().count() >= MIN_SECRET_LEN && !self.needles.contains(&form) {
                    self.needles.push(form);
                }
            }
        }
        self.needles.sort_by_key(|n| std::cmp::Reverse(n.len()));
    }

    /// `text` with secrets masked.
    pub fn redact(&self, text: &str) -> String {
        if text.is_empty() {
            return String::new();
        }
        let mut out = text.to_string();
        for needle in &self.needles {
            if out.contains(needle.as_str()) {
                out = out.replace(needle.as_str(), REDACTED);
            }
        }
        for pattern in TOKENS.iter() {
            if pattern.is_match(&out) {
                out = pattern.replace_all(&out, REDACTED).into_owned();
            }
        }
        if let Some(assignment) = ASSIGNMENT.as_ref() {
            if assignment.is_match(&out) {
                out = assignment.replace_all(&out, format!("${{1}}${{2}}${{3}}{REDACTED}")).into_owned();
            }
        }
        out
    }

    /// Every string inside a JSON value, redacted.
    pub fn redact_value(&self, value: &serde_json::Value) -> serde_json::Value {
        use serde_json::Value;
        match value {
            Value::String(s) => Value::String(self.redact(s)),
            Value::Array(items) => Value::Array(items.iter().map(|v| self.redact_value(v)).collect()),
            Value::Object(map) => Value::Object(map.iter().map(|(k, v)| (k.clone(), self.redact_value(v))).collect()),
            other => other.clone(),
        }
    }

    /// Byte index up to which `text` can be released without splitting a
    /// registered secret: the tail that could be the start of one is held
    /// back until more text arrives.
    pub fn safe_cut(&self, text: &str) -> usize {
        let Some(longest) = self.needles.first() else { return text.len() };
        let mut cut = floor_char(text, text.len().saturating_sub(longest.len() - 1));
        for needle in &self.needles {
            let mut from = 0;
            while let Some(pos) = text[from..].find(needle.as_str()).map(|p| p + from) {
                if pos < cut && cut < pos + needle.len() {
                    cut = pos;
                }
                from = pos + 1;
                while !text.is_char_boundary(from) {
                    from += 1;
                }
            }
        }
        cut
    }

    /// Whether any secret is registered.
    pub fn has_secrets(&self) -> bool {
        !self.needles.is_empty()
    }
}

/// The largest char boundary at or below `index`.
fn floor_char(text: &str, mut index: usize) -> usize {
    while index > 0 && !text.is_char_boundary(index) {
        index -= 1;
    }
    index
}

/// Python's `urllib.parse.quote(value, safe="")`.
/// The base64 text that `bytes` alone decide, standard and URL-safe, for
/// each of the three offsets (mod 3) they can start at inside a longer
/// encoded text: the characters that also depend on a neighbouring byte are
/// left out, so the needle matches wherever the secret sits.
fn base64_forms(bytes: &[u8]) -> Vec<String> {
    use base64::Engine as _;
    let mut forms = Vec::new();
    for offset in 0..3usize {
        let mut shifted = vec![0u8; offset];
        shifted.extend_from_slice(bytes);
        let encoded = base64::engine::general_purpose::STANDARD_NO_PAD.encode(&shifted);
        let (first_bit, end_bit) = (offset * 8, (offset + bytes.len()) * 8);
        let (start, end) = (first_bit.div_ceil(6), end_bit / 6);
        let Some(own) = encoded.get(start..end.max(start)) else { continue };
        forms.push(own.to_string());
        forms.push(own.replace('+', "-").replace('/', "_"));
    }
    forms
}

/// A URL-encoded text with lower-case hex digits in its escapes.
fn lowercase_escapes(quoted: &str) -> String {
    let mut out = String::with_capacity(quoted.len());
    let mut rest = quoted;
    while let Some(at) = rest.find('%') {
        out.push_str(&rest[..at]);
        let escape = rest.get(at..at + 3).unwrap_or(&rest[at..]);
        out.push_str(&escape.to_ascii_lowercase());
        rest = &rest[at + escape.len()..];
    }
    out.push_str(rest);
    out
}

fn url_quote(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for b in value.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registered_secrets_are_masked_in_every_form() {
        let r = Redactor::new(["s3cr3t/val\"ue"]);
        assert_eq!(r.redact("a s3cr3t/val\"ue b"), "a [REDACTED] b");
        assert_eq!(r.redact("q=s3cr3t%2Fval%22ue"), "q=[REDACTED]");
        assert_eq!(r.redact(r#"{"k":"s3cr3t/val\"ue"}"#), r#"{"k":"[REDACTED]"}"#);
        assert_eq!(Redactor::new(["short"]).redact("short"), "short", "too short to register");
    }

    #[test]
    fn encoded_copies_of_a_secret_are_masked_wherever_it_sits() {
        use base64::Engine as _;
        let secret = "vault-secret-7f3a9c2e41d8";
        let r = Redactor::new([secret]);
        for prefix in ["", "B", "Be", "Bearer ", "Authorization: Bearer "] {
            let plain = format!("{prefix}{secret}\n");
            for engine in [base64::engine::general_purpose::STANDARD, base64::engine::general_purpose::URL_SAFE] {
                let encoded = engine.encode(plain.as_bytes());
                let masked = r.redact(&encoded);
                assert!(masked.contains(REDACTED), "{prefix:?}: {encoded} -> {masked}");
                assert!(masked.len() < encoded.len() / 2 + 20, "most of it is masked: {masked}");
            }
            let hex = crate::ids::hex(plain.as_bytes());
            assert!(r.redact(&hex).contains(REDACTED) && r.redact(&hex.to_uppercase()).contains(REDACTED));
        }
        let quoted = "q=vault%2Dsecret".to_string();
        assert_eq!(Redactor::new(["vault/secret!"]).redact("vault%2fsecret%21"), REDACTED, "lower-case escapes");
        assert_eq!(r.redact(&quoted), quoted, "an unrelated text is left alone");
    }

    #[test]
    fn token_shapes_are_masked_without_registration() {
        let r = Redactor::default();
        assert_eq!(r.redact("key sk-abcdefghijklmnop1234 end"), "key [REDACTED] end");
        assert_eq!(r.redact("ghp_0123456789abcdef0123"), "[REDACTED]");
        assert_eq!(r.redact("Authorization: Bearer abcdefghijklmnopqrstu"), "Authorization: [REDACTED]");
        assert_eq!(r.redact("api_key='abcdefgh1234'"), "api_key='[REDACTED]'");
        assert_eq!(r.redact("nothing here"), "nothing here");
    }

    #[test]
    fn a_secret_split_across_chunks_is_held_back() {
        let r = Redactor::new(["topsecret"]);
        let text = "hello tops";
        let cut = r.safe_cut(text);
        assert!(cut <= "hello ".len() + 1, "{cut}");
        // The tail held back is as long as the longest form (hex, twice the secret), less one:
        // here it would end inside the secret, so the cut moves before it.
        assert_eq!(r.safe_cut("hello topsecret and more text"), "hello ".len());
        let long = format!("hello topsecret{}", " ".repeat(40));
        assert_eq!(r.safe_cut(&long), long.len() - 17);
        assert_eq!(Redactor::default().safe_cut("anything"), 8);
        assert_eq!(r.safe_cut("ééé"), 0);
    }
}
