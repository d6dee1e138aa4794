//! Request bodies of the code port, checked as the code-interpreter server
//! checks them: a body that is not JSON, not an object, lacks a required
//! field or has a field of the wrong type is answered 422 with a JSON
//! `detail` list (`type`, `loc`, `msg`, `input`), the validation error
//! format of the `e2b-code-interpreter` SDK's server. Every other error,
//! a refusal at the door included, is plain text ([`TextError`]).

use abx_domain::code::CodeError;
use abx_domain::policy::{Denial, Grant, Op};
use abx_wire::api::code::{CreateContextRequest, ExecuteRequest};
use abx_wire::api::Fault;
use axum::body::to_bytes;
use axum::extract::{FromRequest, Request};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::de::DeserializeOwned;
use serde_json::{json, Map, Value};

use crate::http::pipeline::DEFAULT_MAX_REQUEST_BYTES;
use crate::http::text_error::TextError;

impl From<Denial> for TextError {
    fn from(denial: Denial) -> Self {
        TextError::new(denial.fault(), denial.to_string())
    }
}

impl From<CodeError> for TextError {
    fn from(e: CodeError) -> Self {
        TextError::new(e.fault(), e.to_string())
    }
}

/// The JSON type a field must have.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A string.
    Str,
    /// A number.
    Number,
    /// An object of strings.
    StrMap,
}

/// A body field: name, type, whether it must be there.
pub type Field = (&'static str, Kind, bool);

/// A request body whose fields are checked before it is deserialized.
pub trait Checked: DeserializeOwned {
    /// The fields (unknown ones are ignored, `null` is absent).
    const FIELDS: &'static [Field];
}

impl Checked for ExecuteRequest {
    const FIELDS: &'static [Field] = &[
        ("code", Kind::Str, true),
        ("context_id", Kind::Str, false),
        ("language", Kind::Str, false),
        ("env_vars", Kind::StrMap, false),
        ("timeout", Kind::Number, false),
    ];
}

impl Checked for CreateContextRequest {
    const FIELDS: &'static [Field] = &[("cwd", Kind::Str, false), ("language", Kind::Str, false)];
}

/// A 422 answer with a validation `detail` list.
#[derive(Debug)]
pub struct Invalid(Vec<Value>);

impl IntoResponse for Invalid {
    fn into_response(self) -> Response {
        (StatusCode::UNPROCESSABLE_ENTITY, Json(json!({ "detail": self.0 }))).into_response()
    }
}

/// Why a body was refused.
#[derive(Debug)]
pub enum Refusal {
    /// Larger than the request size limit (413, plain text).
    TooLarge(TextError),
    /// Not a valid body (422).
    Invalid(Invalid),
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        match self {
            Refusal::TooLarge(e) => e.into_response(),
            Refusal::Invalid(e) => e.into_response(),
        }
    }
}

/// An interpreter runs any program its code asks for, as a shell does: while
/// the policy restricts commands (`allow_commands`, `deny_commands` of
/// `process_start`), code execution is refused like a shell is.
pub fn commands_unrestricted(grant: &Grant) -> Result<(), TextError> {
    let restricted = abx_domain::policy::guards::commands::command_guard(grant).map_or(true, |g| !g.is_empty());
    if restricted {
        let message = "Code execution is not permitted while the policy restricts commands";
        return Err(Denial::new(Fault::ShellNotAllowed, message).into());
    }
    Ok(())
}

/// A new context's working directory, resolved under the path rules of
/// process execution (none given: the interpreter's default).
///
/// # Errors
/// The path rule's refusal.
pub fn context_cwd(grant: &Grant, raw: Option<&str>) -> Result<Option<String>, TextError> {
    match raw.filter(|c| !c.is_empty()) {
        Some(raw) => Ok(Some(grant.resolve(raw, Op::Exec, "cwd")?.display().to_string())),
        None => Ok(None),
    }
}

/// A checked JSON request body (any content type; an empty body is `{}`).
pub struct Payload<T>(pub T);

impl<T: Checked, S: Send + Sync> FromRequest<S> for Payload<T> {
    type Rejection = Refusal;

    async fn from_request(req: Request, _state: &S) -> Result<Self, Self::Rejection> {
        let limit = usize::try_from(DEFAULT_MAX_REQUEST_BYTES).unwrap_or(usize::MAX);
        let bytes = to_bytes(req.into_body(), limit).await.map_err(|_| {
            Refusal::TooLarge(TextError::new(
                Fault::PayloadTooLarge,
                format!("Request body too large; limit is {limit} bytes"),
            ))
        })?;
        let bytes: &[u8] = if bytes.iter().all(u8::is_ascii_whitespace) { b"{}" } else { &bytes };
        parse::<T>(bytes).map(Payload).map_err(Refusal::Invalid)
    }
}

/// Parses and checks a body.
///
/// # Errors
/// The validation details.
pub fn parse<T: Checked>(bytes: &[u8]) -> Result<T, Invalid> {
    let value: Value = serde_json::from_slice(bytes).map_err(|e| {
        Invalid(vec![json!({
            "type": "json_invalid",
            "loc": ["body", e.column()],
            "msg": "JSON decode error",
            "input": {},
            "ctx": { "error": e.to_string() },
        })])
    })?;
    let Value::Object(object) = &value else {
        return Err(Invalid(vec![json!({
            "type": "model_attributes_type",
            "loc": ["body"],
            "msg": "Input should be a valid dictionary or object to extract fields from",
            "input": value,
        })]));
    };
    let details: Vec<Value> = T::FIELDS.iter().filter_map(|field| check(object, *field)).collect();
    if !details.is_empty() {
        return Err(Invalid(details));
    }
    serde_json::from_value(value).map_err(|e| {
        Invalid(vec![json!({ "type": "value_error", "loc": ["body"], "msg": e.to_string(), "input": {} })])
    })
}

fn check(object: &Map<String, Value>, (name, kind, required): Field) -> Option<Value> {
    let detail = |kind: &str, msg: &str, input: &Value| {
        Some(json!({ "type": kind, "loc": ["body", name], "msg": msg, "input": input }))
    };
    let value = match object.get(name) {
        None | Some(Value::Null) if required => {
            return detail("missing", "Field required", &Value::Object(object.clone()))
        }
        None | Some(Value::Null) => return None,
        Some(value) => value,
    };
    match (kind, value) {
        (Kind::Str, Value::String(_)) | (Kind::Number, Value::Number(_)) => None,
        (Kind::Str, _) => detail("string_type", "Input should be a valid string", value),
        (Kind::Number, _) => detail("float_type", "Input should be a valid number", value),
        (Kind::StrMap, Value::Object(map)) => map.iter().find(|(_, v)| !v.is_string()).map(|(key, v)| {
            json!({ "type": "string_type", "loc": ["body", name, key], "msg": "Input should be a valid string", "input": v })
        }),
        (Kind::StrMap, _) => detail("dict_type", "Input should be a valid dictionary", value),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn details(body: &str) -> Vec<Value> {
        parse::<ExecuteRequest>(body.as_bytes()).expect_err("invalid").0
    }

    #[test]
    fn valid_bodies_parse() {
        let request =
            parse::<ExecuteRequest>(br#"{"code":"1","env_vars":{"A":"it's \"q\""},"language":null}"#).expect("valid");
        assert_eq!(request.env_vars.and_then(|e| e.get("A").cloned()).as_deref(), Some("it's \"q\""));
        assert!(parse::<CreateContextRequest>(b"{}").is_ok());
    }

    #[test]
    fn invalid_bodies_get_validation_details() {
        let missing = details(r#"{"language":"python"}"#);
        assert_eq!(missing[0]["type"], "missing");
        assert_eq!(missing[0]["loc"], json!(["body", "code"]));
        assert_eq!(missing[0]["msg"], "Field required");
        let wrong = details(r#"{"code":1,"env_vars":{"A":2}}"#);
        assert_eq!(wrong.len(), 2);
        assert_eq!((wrong[0]["type"].as_str(), wrong[0]["input"].as_i64()), (Some("string_type"), Some(1)));
        assert_eq!(wrong[1]["loc"], json!(["body", "env_vars", "A"]));
        assert_eq!(details("{nope")[0]["type"], "json_invalid");
        assert_eq!(details("[1]")[0]["type"], "model_attributes_type");
        assert_eq!(details(r#"{"code":"1","timeout":"x"}"#)[0]["loc"], json!(["body", "timeout"]));
    }
}
