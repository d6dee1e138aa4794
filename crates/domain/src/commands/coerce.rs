//! Argument validation and coercion, as the reference's `_coerce.py`:
//! undeclared names refused first, then each declared argument in order
//! (coerced when given, refused when required and missing, its default
//! otherwise). Messages and exception names are the reference's.

use abx_wire::api::Fault;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Number, Value};

use crate::pyrepr::{self, repr, repr_str};

/// The type of a command argument.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ArgType {
    /// Any value, as Python's `str()` spells it.
    String,
    /// A whole number (`int()`; booleans refused).
    Integer,
    /// A finite number (`float()`).
    Float,
    /// `true/false/yes/no/1/0` in any case, or a JSON boolean.
    Boolean,
    /// A JSON array of strings, nothing else.
    StringArray,
}

impl ArgType {
    /// The wire name (`string_array`, ...).
    pub const fn as_str(self) -> &'static str {
        match self {
            ArgType::String => "string",
            ArgType::Integer => "integer",
            ArgType::Float => "float",
            ArgType::Boolean => "boolean",
            ArgType::StringArray => "string_array",
        }
    }
}

/// What coercion needs to know about a declared argument.
#[derive(Debug, Clone, PartialEq)]
pub struct ArgRule {
    /// Its name.
    pub name: String,
    /// Its type.
    pub kind: ArgType,
    /// Whether a caller must give it.
    pub required: bool,
    /// Its value when not given (already coerced).
    pub default: Option<Value>,
}

/// Why arguments were refused: Python's exception name and message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ArgError {
    /// A missing or undeclared argument (`ValueError`).
    #[error("{0}")]
    Value(String),
    /// A value that cannot be converted (`TypeError`).
    #[error("{0}")]
    Type(String),
}

impl ArgError {
    /// The error's row of the error table (`ValueError` or `TypeError`).
    pub fn fault(&self) -> Fault {
        match self {
            ArgError::Value(_) => Fault::BadRequest,
            ArgError::Type(_) => Fault::ArgumentType,
        }
    }
}

/// Python's `parse_scalar(value, type)`.
///
/// # Errors
/// The conversion's message (without the argument's name).
pub fn parse_scalar(value: &Value, kind: ArgType) -> Result<Value, String> {
    match kind {
        ArgType::String => Ok(Value::String(pyrepr::str_of(value))),
        ArgType::Integer => {
            if value.is_boolean() {
                return Err("JSON boolean is not an integer argument".into());
            }
            pyrepr::int_of(value).map(|i| Value::Number(i.into()))
        }
        ArgType::Float => {
            let f = pyrepr::float_of(value)?;
            Number::from_f64(f).map(Value::Number).ok_or_else(|| "non-finite numbers are not accepted".into())
        }
        ArgType::Boolean => {
            if let Value::Bool(b) = value {
                return Ok(Value::Bool(*b));
            }
            match pyrepr::str_of(value).to_lowercase().as_str() {
                "true" | "yes" | "1" => Ok(Value::Bool(true)),
                "false" | "no" | "0" => Ok(Value::Bool(false)),
                _ => Err(format!("Cannot parse {} as boolean; accepted values: true/false/yes/no/1/0", repr(value))),
            }
        }
        ArgType::StringArray => match value {
            Value::Array(items) if items.iter().all(Value::is_string) => Ok(value.clone()),
            _ => Err("Expected a JSON array containing only strings".into()),
        },
    }
}

/// Python's `coerce_kwargs(args, raw)`: the arguments a command runs with.
///
/// # Errors
/// [`ArgError::Value`] for undeclared or missing arguments, [`ArgError::Type`] for unconvertible values.
pub fn coerce(rules: &[ArgRule], raw: &Map<String, Value>) -> Result<Map<String, Value>, ArgError> {
    let mut undeclared: Vec<&String> = raw.keys().filter(|k| !rules.iter().any(|r| &r.name == *k)).collect();
    if !undeclared.is_empty() {
        undeclared.sort();
        let mut declared: Vec<&str> = rules.iter().map(|r| r.name.as_str()).collect();
        declared.sort_unstable();
        let declared = if declared.is_empty() { "(none)".to_string() } else { list_repr(declared.iter().copied()) };
        return Err(ArgError::Value(format!(
            "Unexpected argument(s): {}; declared: {declared}",
            list_repr(undeclared.iter().map(|s| s.as_str()))
        )));
    }
    let mut coerced = Map::new();
    for rule in rules {
        if let Some(value) = raw.get(&rule.name) {
            let value = parse_scalar(value, rule.kind).map_err(|e| {
                ArgError::Type(format!(
                    "Cannot convert argument {} to {}: {e}",
                    repr_str(&rule.name),
                    rule.kind.as_str()
                ))
            })?;
            coerced.insert(rule.name.clone(), value);
        } else if rule.required {
            return Err(ArgError::Value(format!("Required argument {} missing", repr_str(&rule.name))));
        } else if let Some(default) = &rule.default {
            coerced.insert(rule.name.clone(), default.clone());
        }
    }
    Ok(coerced)
}

/// Python's `repr` of a list of strings.
pub fn list_repr<'a>(items: impl Iterator<Item = &'a str>) -> String {
    format!("[{}]", items.map(repr_str).collect::<Vec<_>>().join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rules() -> Vec<ArgRule> {
        let rule =
            |name: &str, kind, required, default: Option<Value>| ArgRule { name: name.into(), kind, required, default };
        vec![
            rule("name", ArgType::String, true, None),
            rule("times", ArgType::Integer, false, Some(json!(1))),
            rule("loud", ArgType::Boolean, false, Some(json!(false))),
            rule("ratio", ArgType::Float, false, Some(json!(0.5))),
            rule("tags", ArgType::StringArray, false, Some(json!(["a"]))),
            rule("note", ArgType::String, false, None),
        ]
    }

    fn run(raw: Value) -> Result<Value, (String, &'static str)> {
        coerce(&rules(), raw.as_object().expect("object"))
            .map(Value::Object)
            .map_err(|e| (e.to_string(), e.fault().error_type()))
    }

    #[test]
    fn values_are_coerced_and_defaults_filled() {
        assert_eq!(
            run(json!({"name": 5, "times": "7", "loud": "YES", "ratio": "2", "tags": ["b"]})),
            Ok(json!({"name": "5", "times": 7, "loud": true, "ratio": 2.0, "tags": ["b"]}))
        );
        assert_eq!(
            run(json!({"name": "x", "times": 3.9, "ratio": true})),
            Ok(json!({"name": "x", "times": 3, "loud": false, "ratio": 1.0, "tags": ["a"]}))
        );
        assert_eq!(run(json!({"name": [1, "a"]})).map(|v| v["name"].clone()), Ok(json!("[1, 'a']")));
    }

    #[test]
    fn refusals_read_as_the_references() {
        let cases = [
            (json!({}), "Required argument 'name' missing", "ValueError"),
            (
                json!({"name": "x", "zz": 1, "bogus": 2}),
                "Unexpected argument(s): ['bogus', 'zz']; declared: ['loud', 'name', 'note', 'ratio', 'tags', 'times']",
                "ValueError",
            ),
            (
                json!({"name": "x", "times": "abc"}),
                "Cannot convert argument 'times' to integer: invalid literal for int() with base 10: 'abc'",
                "TypeError",
            ),
            (
                json!({"name": "x", "times": true}),
                "Cannot convert argument 'times' to integer: JSON boolean is not an integer argument",
                "TypeError",
            ),
            (
                json!({"name": "x", "ratio": null}),
                "Cannot convert argument 'ratio' to float: float() argument must be a string or a real number, not 'NoneType'",
                "TypeError",
            ),
            (
                json!({"name": "x", "loud": "maybe"}),
                "Cannot convert argument 'loud' to boolean: Cannot parse 'maybe' as boolean; accepted values: true/false/yes/no/1/0",
                "TypeError",
            ),
            (
                json!({"name": "x", "loud": null}),
                "Cannot convert argument 'loud' to boolean: Cannot parse None as boolean; accepted values: true/false/yes/no/1/0",
                "TypeError",
            ),
            (
                json!({"name": "x", "tags": "a,b"}),
                "Cannot convert argument 'tags' to string_array: Expected a JSON array containing only strings",
                "TypeError",
            ),
            (
                json!({"name": "x", "tags": ["a", 1]}),
                "Cannot convert argument 'tags' to string_array: Expected a JSON array containing only strings",
                "TypeError",
            ),
        ];
        for (raw, message, kind) in cases {
            assert_eq!(run(raw.clone()), Err((message.to_string(), kind)), "{raw}");
        }
        let none = coerce(&[], json!({"a": 1}).as_object().expect("object")).expect_err("undeclared");
        assert_eq!(none.to_string(), "Unexpected argument(s): ['a']; declared: (none)");
    }

    #[test]
    fn non_finite_floats_are_refused() {
        assert_eq!(
            run(json!({"name": "x", "ratio": "nan"})).map_err(|e| e.0),
            Err("Cannot convert argument 'ratio' to float: non-finite numbers are not accepted".into())
        );
    }
}
