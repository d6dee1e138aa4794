//! Extractors whose rejections are the reference's JSON error body.
//!
//! `JsonBody` accepts any content type (as the reference does), treats an
//! empty body as `{}`, and insists on a JSON object. `Query` rejects with a
//! 400 `ValueError`. A [`Grant`](abx_domain::policy::Grant) is the admitted request's policy context,
//! put there by the pipeline.

use axum::body::{to_bytes, Body};
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use serde::de::DeserializeOwned;

use super::error::ApiError;
use super::AppState;

/// Marks a request whose body went over its limit while being read.
#[derive(Debug, Clone, Copy)]
pub struct BodyLimit(pub u64);

/// A JSON object request body, deserialised into `T`.
#[derive(Debug, Clone, Copy, Default)]
pub struct JsonBody<T>(pub T);

impl<T, S> FromRequest<S> for JsonBody<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, _state: &S) -> Result<Self, Self::Rejection> {
        let limit = req.extensions().get::<BodyLimit>().map_or(u64::MAX, |l| l.0);
        let bytes = to_bytes(req.into_body(), usize::try_from(limit).unwrap_or(usize::MAX))
            .await
            .map_err(|_| ApiError::payload_too_large(None, limit))?;
        parse_object(&bytes).map(JsonBody)
    }
}

/// Parses a request body that must be a JSON object (empty means `{}`).
///
/// # Errors
/// 400 `ValueError` for malformed JSON, a non-object, or fields of the wrong type.
pub fn parse_object<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    let value: serde_json::Value = if bytes.iter().all(u8::is_ascii_whitespace) {
        serde_json::Value::Object(serde_json::Map::new())
    } else {
        serde_json::from_slice(bytes).map_err(|e| ApiError::bad_request(format!("Invalid JSON: {e}")))?
    };
    if !value.is_object() {
        return Err(ApiError::bad_request("Invalid JSON: the body must be a JSON object"));
    }
    serde_json::from_value(value).map_err(|e| ApiError::bad_request(format!("Invalid request body: {e}")))
}

/// Query parameters deserialised into `T`.
#[derive(Debug, Clone, Copy, Default)]
pub struct Query<T>(pub T);

impl<T, S> FromRequestParts<S> for Query<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        let query = parts.uri.query().unwrap_or_default();
        serde_urlencoded::from_str(query)
            .map(Query)
            .map_err(|e| ApiError::bad_request(format!("Invalid query parameters: {e}")))
    }
}

/// The grant the pipeline attached: a handler of any port takes it as an
/// argument. One impl per port's state, written where that state is
/// defined (the orphan rule wants a local type in the impl, and `Grant` is
/// the domain's), so this plumbing names no feature.
macro_rules! grant_extractor {
    ($($state:ty),+) => {$(
        impl axum::extract::FromRequestParts<$state> for abx_domain::policy::Grant {
            type Rejection = $crate::http::error::ApiError;

            async fn from_request_parts(
                parts: &mut axum::http::request::Parts,
                _state: &$state,
            ) -> Result<Self, Self::Rejection> {
                parts.extensions.get::<abx_domain::policy::Grant>().cloned().ok_or_else(|| {
                    tracing::error!("handler ran without a grant: the pipeline was bypassed");
                    $crate::http::error::ApiError::internal()
                })
            }
        }
    )+};
}
pub(crate) use grant_extractor;

grant_extractor!(AppState);

/// Reads a whole body up to `limit` bytes (for handlers that need raw bytes).
///
/// # Errors
/// 413 when the body is larger.
pub async fn read_body(body: Body, limit: u64) -> Result<bytes::Bytes, ApiError> {
    to_bytes(body, usize::try_from(limit).unwrap_or(usize::MAX))
        .await
        .map_err(|_| ApiError::payload_too_large(None, limit))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Deserialize, Debug)]
    struct Body {
        #[serde(default)]
        name: String,
    }

    #[test]
    fn empty_bodies_are_empty_objects() {
        let body: Body = parse_object(b"  ").expect("empty is {}");
        assert_eq!(body.name, "");
    }

    #[test]
    fn non_objects_and_malformed_json_are_400() {
        for raw in [&b"[1]"[..], b"null", b"{bad", b"\"s\"", b"{\"name\": 5}"] {
            let err = parse_object::<Body>(raw).expect_err("refused");
            assert_eq!(err.status(), axum::http::StatusCode::BAD_REQUEST);
        }
    }
}
