//! Python's spelling of JSON values and its number parsing, so argument
//! coercion, error messages and policy hashes come out exactly as the
//! reference server's (`repr`, `str`, `json.dumps`, type names, `int()`,
//! `float()` of a value decoded from JSON). Used by commands, terminals and
//! the policy.

use serde_json::Value;

/// Python's `repr` of a string: single quotes unless it holds a single quote and no double quote.
pub fn repr_str(s: &str) -> String {
    let quote = if s.contains('\'') && !s.contains('"') { '"' } else { '\'' };
    let mut out = String::with_capacity(s.len() + 2);
    out.push(quote);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if (c as u32) < 0x20 || (0x7f..0xa0).contains(&(c as u32)) => {
                out.push_str(&format!("\\x{:02x}", c as u32));
            }
            c => out.push(c),
        }
    }
    out.push(quote);
    out
}

/// `json.dumps` of a string with Python's defaults (`ensure_ascii`): the
/// short escapes (`\n`, `\b`, ...), printable ASCII as it is, and every
/// other character as `\uXXXX` UTF-16 units.
pub fn json_str(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{08}' => out.push_str("\\b"),
            '\u{0c}' => out.push_str("\\f"),
            ' '..='~' => out.push(c),
            _ => {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    out.push_str(&format!("\\u{unit:04x}"));
                }
            }
        }
    }
    out.push('"');
    out
}

/// `json.dumps` of a value with Python's defaults: `", "` and `": "` as
/// separators, `ensure_ascii`, floats as Python writes them.
pub fn json_dumps(value: &Value) -> String {
    match value {
        Value::String(s) => json_str(s),
        Value::Array(items) => format!("[{}]", items.iter().map(json_dumps).collect::<Vec<_>>().join(", ")),
        Value::Object(map) => format!(
            "{{{}}}",
            map.iter().map(|(k, v)| format!("{}: {}", json_str(k), json_dumps(v))).collect::<Vec<_>>().join(", ")
        ),
        Value::Number(n) if n.is_f64() => n.as_f64().map_or_else(|| n.to_string(), float_repr),
        other => other.to_string(),
    }
}

/// Python's `repr` of a JSON-decoded value (`None`, `True`, `[1, 'a']`, `{'k': 1.0}`).
pub fn repr(value: &Value) -> String {
    match value {
        Value::String(s) => repr_str(s),
        other => str_of(other),
    }
}

/// Python's `str` of a JSON-decoded value (a string is itself).
pub fn str_of(value: &Value) -> String {
    match value {
        Value::Null => "None".into(),
        Value::Bool(true) => "True".into(),
        Value::Bool(false) => "False".into(),
        Value::Number(n) => match (n.as_i64(), n.as_u64(), n.as_f64()) {
            (Some(i), _, _) => i.to_string(),
            (_, Some(u), _) => u.to_string(),
            (_, _, Some(f)) => float_repr(f),
            _ => n.to_string(),
        },
        Value::String(s) => s.clone(),
        Value::Array(items) => format!("[{}]", items.iter().map(repr).collect::<Vec<_>>().join(", ")),
        Value::Object(map) => format!(
            "{{{}}}",
            map.iter().map(|(k, v)| format!("{}: {}", repr_str(k), repr(v))).collect::<Vec<_>>().join(", ")
        ),
    }
}

/// Python's `repr` of a float: shortest round-trip digits, `1.0`, `1e+16`, `1e-05`.
pub fn float_repr(f: f64) -> String {
    if f.is_nan() {
        return "nan".into();
    }
    if f.is_infinite() {
        return if f > 0.0 { "inf".into() } else { "-inf".into() };
    }
    // `{:e}` gives the shortest round-trip digits: "-1.2345e-7".
    let sci = format!("{f:e}");
    let (mantissa, exponent) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exponent: i32 = exponent.parse().unwrap_or(0);
    let (sign, mantissa) = mantissa.strip_prefix('-').map_or(("", mantissa), |m| ("-", m));
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    if (-4..16).contains(&exponent) {
        let point = exponent + 1;
        let text = if point <= 0 {
            format!("0.{}{digits}", "0".repeat(point.unsigned_abs() as usize))
        } else {
            let point = point as usize;
            if digits.len() > point {
                format!("{}.{}", &digits[..point], &digits[point..])
            } else {
                format!("{digits}{}.0", "0".repeat(point - digits.len()))
            }
        };
        format!("{sign}{text}")
    } else {
        let mantissa = if digits.len() > 1 { format!("{}.{}", &digits[..1], &digits[1..]) } else { digits };
        let esign = if exponent < 0 { '-' } else { '+' };
        format!("{sign}{mantissa}e{esign}{:02}", exponent.unsigned_abs())
    }
}

/// The Python type name of a JSON-decoded value.
pub fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "NoneType",
        Value::Bool(_) => "bool",
        Value::Number(n) if n.is_f64() => "float",
        Value::Number(_) => "int",
        Value::String(_) => "str",
        Value::Array(_) => "list",
        Value::Object(_) => "dict",
    }
}

/// Python's `int(value)`: integers as they are, booleans as 0 and 1, floats
/// truncated, strings in base 10 (surrounding whitespace, a sign and `_`
/// between digits allowed).
///
/// # Errors
/// Python's message, or "integer out of range" beyond 64 bits.
pub fn int_of(value: &Value) -> Result<i64, String> {
    match value {
        Value::Bool(b) => Ok(i64::from(*b)),
        Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                return Ok(i);
            }
            match n.as_f64() {
                Some(f) if n.is_f64() && f.is_finite() && f.trunc().abs() < 9.2e18 => Ok(f.trunc() as i64),
                _ => Err("integer out of range".into()),
            }
        }
        Value::String(s) => {
            parse_int(s).ok_or_else(|| format!("invalid literal for int() with base 10: {}", repr_str(s)))
        }
        other => Err(format!(
            "int() argument must be a string, a bytes-like object or a real number, not '{}'",
            type_name(other)
        )),
    }
}

fn parse_int(s: &str) -> Option<i64> {
    let t = s.trim();
    let (negative, digits) = match t.as_bytes().first() {
        Some(b'-') => (true, &t[1..]),
        Some(b'+') => (false, &t[1..]),
        _ => (false, t),
    };
    let cleaned = without_underscores(digits)?;
    if cleaned.is_empty() || !cleaned.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let magnitude: i128 = cleaned.parse().ok()?;
    i64::try_from(if negative { -magnitude } else { magnitude }).ok()
}

/// Removes `_` that sit between two digits; `None` when one sits elsewhere.
fn without_underscores(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = String::with_capacity(s.len());
    for (i, &b) in bytes.iter().enumerate() {
        if b == b'_' {
            let between = i > 0 && bytes[i - 1].is_ascii_digit() && bytes.get(i + 1).is_some_and(u8::is_ascii_digit);
            if !between {
                return None;
            }
        } else {
            out.push(char::from(b));
        }
    }
    Some(out)
}

/// Python's `float(value)`: numbers and booleans as they are, strings as
/// Python reads them (`1e3`, ` 2.5 `, `1_000.5`, `inf`, `nan`).
///
/// # Errors
/// Python's message.
pub fn float_of(value: &Value) -> Result<f64, String> {
    match value {
        Value::Bool(b) => Ok(if *b { 1.0 } else { 0.0 }),
        Value::Number(n) => n.as_f64().ok_or_else(|| "number out of range".into()),
        Value::String(s) => parse_float(s).ok_or_else(|| format!("could not convert string to float: {}", repr_str(s))),
        other => Err(format!("float() argument must be a string or a real number, not '{}'", type_name(other))),
    }
}

fn parse_float(s: &str) -> Option<f64> {
    let t = s.trim();
    let lower = t.to_ascii_lowercase();
    let unsigned = lower.trim_start_matches(['+', '-']);
    if matches!(unsigned, "inf" | "infinity" | "nan") {
        return lower.parse().ok().or_else(|| (unsigned == "nan").then_some(f64::NAN));
    }
    let cleaned = without_underscores(t)?;
    let valid = !cleaned.is_empty()
        && cleaned.bytes().all(|b| b.is_ascii_digit() || matches!(b, b'.' | b'e' | b'E' | b'+' | b'-'))
        && cleaned.bytes().any(|b| b.is_ascii_digit());
    if valid {
        cleaned.parse().ok()
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn reprs_read_as_pythons() {
        assert_eq!(repr(&json!("it's")), "\"it's\"");
        assert_eq!(repr(&json!("a\nb\\")), "'a\\nb\\\\'");
        assert_eq!(repr(&json!(null)), "None");
        assert_eq!(
            str_of(&json!([1, "a", {"k": null}, 1.0, 1e20, 1e-5, true])),
            "[1, 'a', {'k': None}, 1.0, 1e+20, 1e-05, True]"
        );
    }

    #[test]
    fn json_values_are_dumped_as_pythons_json_dumps() {
        assert_eq!(
            json_dumps(&json!({"a": [1, 2.5, null], "b": "\u{e9}"})),
            "{\"a\": [1, 2.5, null], \"b\": \"\\u00e9\"}"
        );
    }

    #[test]
    fn json_strings_are_escaped_as_pythons_json_dumps() {
        // json.dumps("a\b\f\x7f\x01é😀\"\\/\n") in Python.
        assert_eq!(
            json_str("a\u{8}\u{c}\u{7f}\u{1}é\u{1F600}\"\\/\n"),
            r#""a\b\f\u007f\u0001\u00e9\ud83d\ude00\"\\/\n""#
        );
    }

    #[test]
    fn floats_are_spelled_as_python_does() {
        let cases = [
            (1.0, "1.0"),
            (0.5, "0.5"),
            (-2.25, "-2.25"),
            (1e16, "1e+16"),
            (1e15, "1000000000000000.0"),
            (1.5e16, "1.5e+16"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (123.456, "123.456"),
            (0.1 + 0.2, "0.30000000000000004"),
            (0.0, "0.0"),
            (1e100, "1e+100"),
        ];
        for (f, text) in cases {
            assert_eq!(float_repr(f), text, "{f}");
        }
    }

    #[test]
    fn int_follows_python() {
        assert_eq!(int_of(&json!(" 4_2 ")), Ok(42));
        assert_eq!(int_of(&json!("-007")), Ok(-7));
        assert_eq!(int_of(&json!(3.9)), Ok(3));
        assert_eq!(int_of(&json!(-3.9)), Ok(-3));
        assert_eq!(int_of(&json!(true)), Ok(1));
        assert_eq!(int_of(&json!("1e3")), Err("invalid literal for int() with base 10: '1e3'".into()));
        assert_eq!(int_of(&json!("4__2")), Err("invalid literal for int() with base 10: '4__2'".into()));
        assert_eq!(
            int_of(&json!(null)),
            Err("int() argument must be a string, a bytes-like object or a real number, not 'NoneType'".into())
        );
    }

    #[test]
    fn float_follows_python() {
        assert_eq!(float_of(&json!("2")), Ok(2.0));
        assert_eq!(float_of(&json!(" 1e3 ")), Ok(1000.0));
        assert_eq!(float_of(&json!("1_000.5")), Ok(1000.5));
        assert_eq!(float_of(&json!(true)), Ok(1.0));
        assert!(float_of(&json!("nan")).is_ok_and(f64::is_nan));
        assert_eq!(float_of(&json!("-inf")), Ok(f64::NEG_INFINITY));
        assert_eq!(float_of(&json!("abc")), Err("could not convert string to float: 'abc'".into()));
        assert_eq!(float_of(&json!([1])), Err("float() argument must be a string or a real number, not 'list'".into()));
    }
}
