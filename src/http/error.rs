//! `ApiError`: every failure a handler or the pipeline returns on the API and
//! PTY ports, rendered once from its row of the error table ([`Fault`]) as
//! the reference server's JSON error body with its exact status.

use abx_wire::api::{ErrorBody, Fault};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;

use abx_domain::policy::Denial;

/// The machine code of an error response, kept as a response extension for the audit line.
#[derive(Debug, Clone)]
pub struct ErrorCode(pub String);

/// An error answer: status, JSON body and whether to close the connection.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    body: Box<ErrorBody>,
    close: bool,
}

impl ApiError {
    /// The answer of the table's row `fault`: its status, `type` and `code`, with `message`.
    pub fn of(fault: Fault, message: impl Into<String>) -> Self {
        let status = StatusCode::from_u16(fault.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let mut body = ErrorBody::new(message, fault.error_type());
        body.code = fault.code_str().map(str::to_string);
        ApiError { status, body: Box::new(body), close: false }
    }

    /// 400 `ValueError`: the request is malformed.
    pub fn bad_request(message: impl Into<String>) -> Self {
        ApiError::of(Fault::BadRequest, message)
    }

    /// 404 `ValueError` for a path no endpoint serves.
    pub fn route_not_found(path: &str) -> Self {
        ApiError::of(Fault::RouteNotFound, format!("Not found: {path}"))
    }

    /// 405 for a known path with another method.
    pub fn method_not_allowed(method: &str, path: &str) -> Self {
        ApiError::of(Fault::MethodNotAllowed, format!("Method {method} is not allowed on {path}"))
    }

    /// 413 with the limit, for a body over `max_request_bytes`.
    pub fn payload_too_large(size: Option<u64>, limit: u64) -> Self {
        ApiError::from(Denial::PayloadTooLarge { size, limit })
    }

    /// 501 for an endpoint this build does not serve yet.
    pub fn not_implemented(endpoint: &str) -> Self {
        let message = format!("Endpoint '{endpoint}' is not implemented by this server");
        ApiError::of(Fault::NotImplemented, message).with_endpoint(endpoint)
    }

    /// 500 whose details went to the log, not to the client.
    pub fn internal() -> Self {
        ApiError::of(Fault::Internal, "Internal server error")
    }

    /// Replaces the exception type with one the error carries as data (a
    /// registered command reports its own).
    pub fn with_type(mut self, error_type: impl Into<String>) -> Self {
        self.body.error_type = error_type.into();
        self
    }

    /// Replaces the status with the one another protocol answered (the MCP
    /// transport's rejection, the code port's answer to an MCP code tool).
    pub fn with_status(mut self, status: StatusCode) -> Self {
        self.status = status;
        self
    }

    /// Sets the limit that was exceeded.
    pub fn with_limit(mut self, limit: u64) -> Self {
        self.body.limit = Some(limit);
        self
    }

    /// Sets the endpoint id, unless one is set.
    pub fn with_endpoint(mut self, endpoint: &str) -> Self {
        self.body.endpoint.get_or_insert_with(|| endpoint.to_string());
        self
    }

    /// Sets the rule that decided a refusal.
    pub fn with_rule(mut self, rule: &str) -> Self {
        self.body.rule = Some(rule.to_string());
        self
    }

    /// Sets the scope a refusal concerns.
    pub fn with_scope(mut self, scope: &str) -> Self {
        self.body.scope = Some(scope.to_string());
        self
    }

    /// Closes the connection after answering (the request body was not read).
    pub fn closing(mut self) -> Self {
        self.close = true;
        self
    }

    /// The status.
    pub fn status(&self) -> StatusCode {
        self.status
    }

    /// The machine code, if any.
    pub fn code(&self) -> Option<&str> {
        self.body.code.as_deref()
    }

    /// The JSON body (what an MCP tool error shows).
    pub fn body(&self) -> &ErrorBody {
        &self.body
    }

    /// The JSON body as the wire carries it (for an answer written before any router runs).
    pub fn json(&self) -> String {
        serde_json::to_string(&self.body).unwrap_or_default()
    }

    /// Replaces the message.
    pub fn with_message(mut self, message: impl Into<String>) -> Self {
        self.body.error = message.into();
        self
    }
}

impl From<Denial> for ApiError {
    fn from(denial: Denial) -> Self {
        let ApiError { status, mut body, .. } = ApiError::of(denial.fault(), denial.to_string());
        body.retry_after = denial.retry_after();
        match denial {
            Denial::EndpointDisabled { rule, .. } => body.rule = Some(rule),
            Denial::PayloadTooLarge { limit, .. } => body.limit = Some(limit),
            Denial::MissingScope { identity, scope, endpoint } => {
                body.scope = Some(scope);
                body.identity = Some(identity);
                body.endpoint = Some(endpoint);
            }
            _ => {}
        }
        ApiError { status, body, close: false }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let retry_after = self.body.retry_after;
        let code = self.body.code.clone();
        let mut response = (self.status, Json(self.body)).into_response();
        if let Some(code) = code {
            response.extensions_mut().insert(ErrorCode(code));
        }
        let headers = response.headers_mut();
        if let Some(seconds) = retry_after {
            headers.insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
        if self.close {
            headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn denials_carry_rule_scope_and_retry_hint() {
        let err =
            ApiError::from(Denial::EndpointDisabled { message: "off".into(), rule: "policy:x".into(), power: false });
        assert_eq!(err.status(), StatusCode::NOT_FOUND);
        assert_eq!(err.body.rule.as_deref(), Some("policy:x"));
        let err = ApiError::from(Denial::RateLimited { retry_after: 7 });
        let response = err.into_response();
        assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(response.headers()[header::RETRY_AFTER], "7");
    }
}
