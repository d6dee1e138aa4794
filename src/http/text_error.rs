//! `TextError`: every failure on the code port but a validation error,
//! rendered once from its row of the error table ([`Fault`]) as plain text,
//! the way the code-interpreter server answers and both of its clients read
//! (the pipeline's refusals on that port included; the code feature's own
//! errors convert into it in `http::code::wire`).

use abx_wire::api::Fault;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

/// Every error answer of the code port but a validation error: plain text,
/// as the code-interpreter server answers its refusals and as both clients
/// read them (the message of their exception is the body's text). The
/// status is the error table's, or the one the door chose for a refusal.
#[derive(Debug)]
pub struct TextError {
    status: StatusCode,
    message: String,
}

impl TextError {
    /// The answer of the table's row `fault`, with `message`.
    pub fn new(fault: Fault, message: impl Into<String>) -> Self {
        let status = StatusCode::from_u16(fault.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        TextError { status, message: message.into() }
    }

    /// Replaces the status (the door answers a switched-off endpoint with 403).
    pub fn with_status(mut self, status: StatusCode) -> Self {
        self.status = status;
        self
    }

    /// Its status and text (what an MCP tool error shows).
    pub fn parts(&self) -> (StatusCode, &str) {
        (self.status, &self.message)
    }
}

impl IntoResponse for TextError {
    fn into_response(self) -> Response {
        let mut response = (self.status, self.message).into_response();
        response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
        response
    }
}
