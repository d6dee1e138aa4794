//! Wire types of the envd data plane: the messages of `filesystem.Filesystem`
//! and `process.Process` in the Connect protocol's JSON codec (protojson),
//! and the JSON bodies of envd's plain HTTP endpoints.
//!
//! protojson conventions, as the SDKs write and read them: field names in
//! lowerCamelCase (the proto's snake_case names are accepted too), 64-bit
//! integers as strings (numbers accepted), `bytes` as base64 (standard or
//! URL-safe, padded or not), enums by name (numbers accepted), timestamps as
//! RFC 3339 in UTC, and zero values left out. Unknown fields are ignored and
//! `null` means the zero value.

pub mod filesystem;
pub mod http;
pub mod process;

use base64::Engine;
use serde::de::{DeserializeOwned, Error as _};
use serde::{Deserialize, Deserializer, Serializer};
use serde_json::Value;

/// Why a protojson message could not be read.
#[derive(Debug, thiserror::Error)]
#[error("invalid message: {0}")]
pub struct DecodeError(String);

/// Reads a protojson message; an empty body is the empty message.
///
/// # Errors
/// The body is not JSON or does not fit the message.
pub fn decode<T: DeserializeOwned>(body: &[u8]) -> Result<T, DecodeError> {
    let body: &[u8] = if body.iter().all(u8::is_ascii_whitespace) { b"{}" } else { body };
    let mut value: Value = serde_json::from_slice(body).map_err(|e| DecodeError(e.to_string()))?;
    if !value.is_object() {
        return Err(DecodeError("a message must be a JSON object".into()));
    }
    strip_nulls(&mut value);
    serde_json::from_value(value).map_err(|e| DecodeError(e.to_string()))
}

/// protojson reads `null` as the field's zero value: drop such fields.
fn strip_nulls(value: &mut Value) {
    match value {
        Value::Object(map) => {
            map.retain(|_, v| !v.is_null());
            map.values_mut().for_each(strip_nulls);
        }
        Value::Array(items) => items.iter_mut().for_each(strip_nulls),
        _ => {}
    }
}

/// Whether a value is its type's zero value (protojson leaves those out).
pub fn is_zero<T: Default + PartialEq>(value: &T) -> bool {
    *value == T::default()
}

/// An integer field written as a number or a string.
fn integer<'de, D: Deserializer<'de>, T: TryFrom<i128>>(d: D) -> Result<T, D::Error> {
    let number = match Value::deserialize(d)? {
        Value::Number(n) => n.as_i64().map(i128::from).or_else(|| n.as_u64().map(i128::from)),
        Value::String(s) => s.trim().parse::<i128>().ok(),
        _ => None,
    };
    number.and_then(|n| T::try_from(n).ok()).ok_or_else(|| D::Error::custom("expected an integer in range"))
}

/// A `uint32` field.
pub fn de_u32<'de, D: Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    integer(d)
}

/// An optional `uint32` field.
pub fn de_opt_u32<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u32>, D::Error> {
    integer(d).map(Some)
}

/// An `int64` written as a string, as protojson does.
pub fn ser_i64<S: Serializer>(value: &i64, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&value.to_string())
}

/// A `bytes` field: base64, standard or URL-safe, with or without padding.
pub fn de_bytes<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
    let text = String::deserialize(d)?;
    decode_base64(&text).ok_or_else(|| D::Error::custom("invalid base64"))
}

/// Decodes protojson base64 (either alphabet, padding optional).
pub fn decode_base64(text: &str) -> Option<Vec<u8>> {
    use base64::engine::general_purpose::{STANDARD_NO_PAD, URL_SAFE_NO_PAD};
    let trimmed = text.trim_end_matches('=');
    STANDARD_NO_PAD.decode(trimmed).or_else(|_| URL_SAFE_NO_PAD.decode(trimmed)).ok()
}

/// A `bytes` field as standard padded base64, as protojson writes it.
pub fn ser_bytes<S: Serializer>(value: &[u8], s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&base64::engine::general_purpose::STANDARD.encode(value))
}

/// A `google.protobuf.Timestamp` as RFC 3339 in UTC: 0, 3, 6 or 9 fractional digits, as Go's protojson.
pub fn timestamp(secs: i64, nanos: u32) -> String {
    let (year, month, day, h, m, s) = crate::time::utc_parts(secs);
    let fraction = match nanos {
        0 => String::new(),
        n if n % 1_000_000 == 0 => format!(".{:03}", n / 1_000_000),
        n if n % 1_000 == 0 => format!(".{:06}", n / 1_000),
        n => format!(".{n:09}"),
    };
    format!("{year:04}-{month:02}-{day:02}T{h:02}:{m:02}:{s:02}{fraction}Z")
}

/// An enum field: its name (`prefix` + `names[i]` or the bare name) or its number.
fn enum_value(value: &Value, prefix: &str, names: &[(&str, i32)]) -> Option<i32> {
    match value {
        Value::Number(n) => n.as_i64().and_then(|n| i32::try_from(n).ok()),
        Value::String(s) => {
            let bare = s.strip_prefix(prefix).unwrap_or(s);
            names.iter().find(|(name, _)| *name == bare).map(|(_, n)| *n)
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Deserialize, PartialEq, Default)]
    #[serde(rename_all = "camelCase", default)]
    struct Sample {
        path: String,
        #[serde(alias = "include_entry")]
        include_entry: bool,
        #[serde(deserialize_with = "de_u32")]
        depth: u32,
        #[serde(deserialize_with = "de_bytes")]
        data: Vec<u8>,
    }

    #[test]
    fn messages_read_either_spelling_nulls_and_lenient_numbers() {
        let a: Sample = decode(br#"{"path":"/a","includeEntry":true,"depth":"2","data":"aGk="}"#).expect("camel");
        let b: Sample = decode(br#"{"path":"/a","include_entry":true,"depth":2,"data":"aGk","x":1}"#).expect("snake");
        assert_eq!(a, b);
        assert_eq!(a.data, b"hi");
        let empty: Sample = decode(b"").expect("empty");
        assert_eq!(empty, Sample::default());
        let nulls: Sample = decode(br#"{"path":null,"depth":null}"#).expect("nulls");
        assert_eq!(nulls, Sample::default());
        assert!(decode::<Sample>(b"[1]").is_err());
        assert!(decode::<Sample>(br#"{"depth":-1}"#).is_err());
        assert_eq!(decode_base64("-_8"), Some(vec![0xfb, 0xff]));
    }

    #[test]
    fn timestamps_are_rfc3339_with_go_precision() {
        assert_eq!(timestamp(0, 0), "1970-01-01T00:00:00Z");
        assert_eq!(timestamp(1_700_000_000, 5_000_000), "2023-11-14T22:13:20.005Z");
        assert_eq!(timestamp(1_700_000_000, 123_456_000), "2023-11-14T22:13:20.123456Z");
        assert_eq!(timestamp(1_700_000_000, 1), "2023-11-14T22:13:20.000000001Z");
    }

    #[test]
    fn enums_read_names_with_or_without_prefix_and_numbers() {
        let names = [("SIGTERM", 15), ("SIGKILL", 9)];
        assert_eq!(enum_value(&Value::from("SIGNAL_SIGKILL"), "SIGNAL_", &names), Some(9));
        assert_eq!(enum_value(&Value::from("SIGTERM"), "SIGNAL_", &names), Some(15));
        assert_eq!(enum_value(&Value::from(9), "SIGNAL_", &names), Some(9));
        assert_eq!(enum_value(&Value::from("SIGHUP"), "SIGNAL_", &names), None);
    }
}
