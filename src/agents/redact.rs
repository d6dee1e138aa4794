//! Secret redaction of everything a turn stores or streams: registered
//! secret values (verbatim, URL-encoded and JSON-escaped) and common token
//! shapes (`sk-...`, GitHub tokens, bearer tokens, `api_key=...`).
//!
//! Best effort, as the reference: a transformed copy (base64, split across
//! two tool calls) cannot be recognised.

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
            for form in [value.to_string(), url_quote(value), json[1..json.len() - 1].to_string()] {
                if !form.is_empty() && !self.needles.contains(&form) {
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
        assert_eq!(r.safe_cut("hello topsecret and more text"), "hello topsecret and more text".len() - 8);
        assert_eq!(Redactor::default().safe_cut("anything"), 8);
        assert_eq!(r.safe_cut("ééé"), 0);
    }
}
