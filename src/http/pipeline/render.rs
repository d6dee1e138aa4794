//! One [`Denial`], rendered at the edge in the protocol of the port that
//! refused it: the reference's JSON error on the API and PTY ports, a
//! Connect error on envd's Connect routes (an end-of-stream message for a
//! streaming call), envd's `{"code", "message"}` on its plain routes, and
//! plain text on the code port (as every error of that port).

use abx_domain::policy::Denial;
use abx_wire::api::envd::http::HttpError;
use abx_wire::endpoints::{Endpoint, Port};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;

use crate::http::envd::connect::{self, ConnectError};
use crate::http::error::{ApiError, ErrorCode};
use crate::http::text_error::TextError;

/// A plain endpoint's error answer: the status and `{"code": status, "message"}`.
pub fn http_error(status: StatusCode, message: impl Into<String>) -> Response {
    (status, Json(HttpError { code: status.as_u16(), message: message.into() })).into_response()
}

/// The answer to a refused request for `endpoint`; `close` asks the client
/// to close the connection (the body was not read).
pub(super) fn render(endpoint: &Endpoint, headers: &HeaderMap, denial: Denial, close: bool) -> Response {
    let code = denial.code();
    let retry_after = denial.retry_after();
    let mut response = match endpoint.port {
        Port::Api | Port::Pty => reference(endpoint, denial),
        Port::Envd if endpoint.is_connect() => {
            let error = connect_error(&denial);
            if connect::is_streaming(headers) {
                connect::stream_error(error)
            } else {
                error.into_response()
            }
        }
        Port::Envd => {
            let status = other_port_status(&denial);
            let message = with_hint(&denial, "send a valid access token in X-Access-Token");
            http_error(status, message)
        }
        Port::Code => {
            let message = with_hint(&denial, "send the server token as a bearer token or in X-Access-Token");
            TextError::new(denial.fault(), message).with_status(other_port_status(&denial)).into_response()
        }
    };
    response.extensions_mut().insert(ErrorCode(code.to_string()));
    let out = response.headers_mut();
    if let Some(seconds) = retry_after {
        out.insert(header::RETRY_AFTER, HeaderValue::from(seconds));
    }
    if close {
        out.insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    response
}

/// The reference's JSON error: credential refusals name no endpoint, policy refusals do.
fn reference(endpoint: &Endpoint, denial: Denial) -> Response {
    let credentials =
        matches!(denial, Denial::Unauthorized | Denial::AmbiguousCredentials | Denial::AuthThrottled { .. })
            || denial.status() == 401;
    let error = ApiError::from(denial);
    if credentials {
        error.into_response()
    } else {
        error.with_endpoint(endpoint.id).into_response()
    }
}

/// envd's and the code port's status: as the reference, except that a
/// switched-off endpoint is 403 (a 404 reads as "file not found" to their SDKs).
fn other_port_status(denial: &Denial) -> StatusCode {
    match denial {
        Denial::EndpointDisabled { .. } => StatusCode::FORBIDDEN,
        other => StatusCode::from_u16(other.status()).unwrap_or(StatusCode::FORBIDDEN),
    }
}

fn with_hint(denial: &Denial, hint: &str) -> String {
    match denial {
        Denial::Unauthorized => format!("{denial}: {hint}"),
        other => other.to_string(),
    }
}

/// The Connect error of a refusal: its row's Connect code.
pub(crate) fn connect_error(denial: &Denial) -> ConnectError {
    ConnectError::new(denial.fault().connect(), with_hint(denial, "send a valid access token in X-Access-Token"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use abx_wire::endpoints::find;

    async fn rendered(id: &str, streaming: bool, denial: Denial) -> (u16, serde_json::Value, String) {
        let mut headers = HeaderMap::new();
        let media = if streaming { "application/connect+json" } else { "application/json" };
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(media));
        let response = render(find(id).expect("endpoint"), &headers, denial, false);
        let status = response.status().as_u16();
        let content_type = response.headers()[header::CONTENT_TYPE].to_str().unwrap_or("").to_string();
        let body = axum::body::to_bytes(response.into_body(), 1 << 16).await.expect("body");
        let json = if streaming { serde_json::from_slice(&body[5..]) } else { serde_json::from_slice(&body) };
        let text = serde_json::Value::String(String::from_utf8_lossy(&body).into_owned());
        (status, json.unwrap_or(text), content_type)
    }

    #[tokio::test]
    async fn each_port_renders_a_denial_in_its_protocol() {
        let disabled = || Denial::EndpointDisabled {
            message: "off".into(),
            rule: "preset:read-only:groups.process".into(),
            power: false,
        };
        let (status, body, _) = rendered("shell", false, disabled()).await;
        assert_eq!(
            (status, body["code"].as_str(), body["endpoint"].as_str()),
            (404, Some("endpoint_disabled"), Some("shell"))
        );
        let (status, body, _) = rendered("envd_remove", false, disabled()).await;
        assert_eq!((status, body["code"].as_str()), (403, Some("permission_denied")));
        let (status, body, media) = rendered("envd_process_start", true, disabled()).await;
        assert_eq!((status, media.as_str()), (200, "application/connect+json"));
        assert_eq!(body["error"]["code"], "permission_denied");
        let (status, body, _) = rendered("envd_files_write", false, Denial::Unauthorized).await;
        assert_eq!((status, body["code"].as_u64()), (401, Some(401)));
        let (status, body, media) = rendered("code_execute", false, disabled()).await;
        assert_eq!((status, media.as_str()), (403, "text/plain; charset=utf-8"));
        assert_eq!(body, "off", "the code port answers every error in plain text");
        let closed = Denial::EndpointDisabled { message: "closed".into(), rule: "p".into(), power: true };
        let (status, body, _) = rendered("shell", false, closed).await;
        assert_eq!(
            (status, body["code"].as_str(), body["type"].as_str()),
            (403, Some("endpoint_disabled"), Some("ValueError"))
        );
        let limited = connect_error(&Denial::RateLimited { retry_after: 1 }).code;
        assert_eq!(limited, connect::Code::ResourceExhausted);
    }
}
