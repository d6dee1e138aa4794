//! `ApiError`: every failure a handler or the pipeline returns, written once
//! as the reference server's JSON error body with its exact status.

use abx_wire::api::ErrorBody;
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
    /// An error with a status, message and exception name.
    pub fn new(status: StatusCode, message: impl Into<String>, error_type: &str) -> Self {
        ApiError { status, body: Box::new(ErrorBody::new(message, error_type)), close: false }
    }

    /// 400 `ValueError`: the request is malformed.
    pub fn bad_request(message: impl Into<String>) -> Self {
        ApiError::new(StatusCode::BAD_REQUEST, message, "ValueError")
    }

    /// 404 `ValueError` for a path no endpoint serves.
    pub fn route_not_found(path: &str) -> Self {
        ApiError::new(StatusCode::NOT_FOUND, format!("Not found: {path}"), "ValueError")
    }

    /// 405 for a known path with another method.
    pub fn method_not_allowed(method: &str, path: &str) -> Self {
        ApiError::new(StatusCode::METHOD_NOT_ALLOWED, format!("Method {method} is not allowed on {path}"), "ValueError")
            .with_code("method_not_allowed")
    }

    /// 413 with the limit, for a body over `max_request_bytes`.
    pub fn payload_too_large(size: Option<u64>, limit: u64) -> Self {
        ApiError::from(Denial::PayloadTooLarge { size, limit })
    }

    /// 501 for an endpoint this build does not serve yet.
    pub fn not_implemented(endpoint: &str) -> Self {
        ApiError::new(
            StatusCode::NOT_IMPLEMENTED,
            format!("Endpoint '{endpoint}' is not implemented by this server"),
            "NotImplementedError",
        )
        .with_code("not_implemented")
        .with_endpoint(endpoint)
    }

    /// 500 whose details went to the log, not to the client.
    pub fn internal() -> Self {
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "Internal server error", "InternalError").with_code("internal")
    }

    /// Sets the machine code.
    pub fn with_code(mut self, code: &str) -> Self {
        self.body.code = Some(code.to_string());
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

    /// Replaces the message.
    pub fn with_message(mut self, message: impl Into<String>) -> Self {
        self.body.error = message.into();
        self
    }
}

impl From<Denial> for ApiError {
    fn from(denial: Denial) -> Self {
        let status = StatusCode::from_u16(denial.status()).unwrap_or(StatusCode::FORBIDDEN);
        let mut body = ErrorBody::new(denial.to_string(), denial.error_type()).with_code(denial.code());
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
        ApiError { status, body: Box::new(body), close: false }
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
    use std::path::Path;

    use super::*;

    #[test]
    fn denials_carry_rule_scope_and_retry_hint() {
        let err = ApiError::from(Denial::EndpointDisabled { message: "off".into(), rule: "policy:x".into() });
        assert_eq!(err.status(), StatusCode::NOT_FOUND);
        assert_eq!(err.body.rule.as_deref(), Some("policy:x"));
        let err = ApiError::from(Denial::RateLimited { retry_after: 7 });
        let response = err.into_response();
        assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(response.headers()[header::RETRY_AFTER], "7");
    }

    /// The daemon's codes are string literals where its errors are built
    /// (`with_code("..")`, `Denial::forbidden("..", ..)`, ...). Every one must
    /// be a variant, so the client's enum mirrors the server: a new code
    /// without a variant fails here. envd's Connect codes and the agents
    /// group's OpenAI error envelope are other protocols' and are not scanned.
    #[test]
    fn every_code_the_daemon_sends_is_a_variant() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut files = Vec::new();
        let mut dirs = vec![root.clone()];
        while let Some(dir) = dirs.pop() {
            for entry in std::fs::read_dir(&dir).expect("src is readable").flatten() {
                let path = entry.path();
                let skip = ["envd", "agents"].iter().any(|d| path.ends_with(d));
                if path.is_dir() && !skip {
                    dirs.push(path);
                } else if path.extension().is_some_and(|e| e == "rs") {
                    files.push(path);
                }
            }
        }
        // Where a code is written: the first code-like literal after one of these.
        let markers = [
            "with_code(",
            "forbidden(",
            "::invalid(",
            "code: \"",
            "refuse(",
            "conflict(",
            "DENIED: &str",
            "Refusal::new(",
            "unavailable(",
            "unauthorized(",
        ];
        let is_code = |literal: &str| {
            !literal.is_empty()
                && literal.contains('_')
                && literal.chars().all(|c| c.is_ascii_lowercase() || c == '_')
                && !literal.starts_with('_')
        };
        let mut seen = 0;
        let mut unknown = Vec::new();
        for file in &files {
            let text = std::fs::read_to_string(file).expect("readable");
            let source = text.split("#[cfg(test)]").next().unwrap_or_default();
            let lines: Vec<&str> = source.lines().collect();
            for (i, line) in lines.iter().enumerate() {
                for marker in markers {
                    for (at, _) in line.match_indices(marker) {
                        let mut tail = line[at + marker.len()..].to_string();
                        if let Some(next) = lines.get(i + 1) {
                            tail.push_str(next);
                        }
                        let literals = if marker.ends_with('"') { format!("\"{tail}") } else { tail };
                        let Some(code) = literals.split('"').skip(1).step_by(2).find(|l| is_code(l)) else { continue };
                        seen += 1;
                        if matches!(abx_wire::api::ErrorCode::from_wire(code), abx_wire::api::ErrorCode::Other(_)) {
                            unknown.push(format!("{}:{}: {code}", file.display(), i + 1));
                        }
                    }
                }
            }
        }
        assert!(seen > 30, "the scan found the daemon's codes ({seen})");
        assert!(unknown.is_empty(), "codes without an ErrorCode variant:\n{}", unknown.join("\n"));
    }
}
