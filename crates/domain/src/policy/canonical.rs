//! Canonical JSON of a normalised policy document and its revision hash.
//!
//! The text is what Python's `json.dumps(doc, sort_keys=True,
//! separators=(",", ":"))` writes (keys sorted, no spaces, non-ASCII escaped
//! as `\uXXXX`, floats in `repr` form), so the same policy gets the same
//! `revision` from this server and from the reference.

use std::fmt::Write;

use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::pyrepr::json_str;

/// The canonical text of `value`.
pub fn to_text(value: &Value) -> String {
    let mut out = String::new();
    write_value(&mut out, value);
    out
}

/// The revision of a normalised document: the first 16 hex digits of the
/// SHA-256 of its canonical text.
pub fn revision(value: &Value) -> String {
    let digest = Sha256::digest(to_text(value).as_bytes());
    digest.iter().take(8).fold(String::with_capacity(16), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

fn write_value(out: &mut String, value: &Value) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => match (n.as_i64(), n.as_u64(), n.as_f64()) {
            (Some(i), _, _) => {
                let _ = write!(out, "{i}");
            }
            (None, Some(u), _) => {
                let _ = write!(out, "{u}");
            }
            (None, None, Some(f)) => out.push_str(&python_float(f)),
            _ => out.push_str("null"),
        },
        Value::String(s) => out.push_str(&json_str(s)),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_value(out, item);
            }
            out.push(']');
        }
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, key) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&json_str(key));
                out.push(':');
                write_value(out, &map[key]);
            }
            out.push('}');
        }
    }
}

/// A float as Python's `json.dumps` writes it: its `repr`, and `NaN` /
/// `Infinity` for the values JSON has no spelling for.
fn python_float(f: f64) -> String {
    match f {
        f if f.is_nan() => "NaN".into(),
        f if f.is_infinite() => if f > 0.0 { "Infinity" } else { "-Infinity" }.into(),
        f => crate::pyrepr::float_repr(f),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn keys_are_sorted_and_separators_compact() {
        let doc = json!({"version": 1, "endpoints": {"b": {"enabled": false}, "a": {"scopes": ["x:y"]}}});
        assert_eq!(to_text(&doc), r#"{"endpoints":{"a":{"scopes":["x:y"]},"b":{"enabled":false}},"version":1}"#);
    }

    #[test]
    fn non_ascii_and_controls_are_escaped_like_python() {
        assert_eq!(to_text(&json!("é\u{1F600}\n\u{1}\"\\/")), r#""\u00e9\ud83d\ude00\n\u0001\"\\/""#);
    }

    #[test]
    fn floats_follow_python_repr() {
        assert_eq!(python_float(1.5), "1.5");
        assert_eq!(python_float(30.0), "30.0");
        assert_eq!(python_float(0.0001), "0.0001");
        assert_eq!(python_float(0.00001), "1e-05");
        assert_eq!(python_float(1.5e-7), "1.5e-07");
        assert_eq!(python_float(1e16), "1e+16");
        assert_eq!(python_float(123456789.125), "123456789.125");
    }

    #[test]
    fn revisions_match_the_reference() {
        // Revisions the reference (ServerPolicy(...).revision) computes for these documents.
        let cases = [
            (json!({"version": 1, "endpoints": {"files_*": {"limits": {"max_depth": 3}}}}), "9a32fbff33b1fb22"),
            (json!({"version": 1, "endpoints": {"shell": {"limits": {"timeout_seconds": 1.5}}}}), "fd379d163ab1a886"),
            (
                json!({"version": 1, "endpoints": {"files_list": {"limits": {"max_request_bytes": 1536}}}}),
                "5a82ec6234f88f91",
            ),
            (json!({"version": 1, "description": "5"}), "9210b08d6991a9d2"),
        ];
        for (doc, expected) in cases {
            assert_eq!(revision(&doc), expected, "{doc}");
        }
    }
}
