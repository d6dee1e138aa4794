//! Why the policy refused a request: one enum, each variant a stable wire code.
//!
//! The HTTP layer maps a [`Denial`] to the reference's JSON error body and
//! status in one place (`http::error`); nothing here knows about HTTP.

use thiserror::Error;

/// A policy refusal. `code()` is the stable machine string of the reference.
#[derive(Debug, Clone, Error, PartialEq)]
pub enum Denial {
    /// No or wrong credentials.
    #[error("unauthorized")]
    Unauthorized,
    /// Several distinct credentials in one request.
    #[error("Multiple distinct credential headers")]
    AmbiguousCredentials,
    /// The endpoint is switched off; `rule` names the rule that decided.
    #[error("{message}")]
    EndpointDisabled {
        /// Human-readable explanation naming the deciding rule.
        message: String,
        /// Origin of the deciding rule (`default:opt-in:dev_tools`, `policy:groups.process`).
        rule: String,
    },
    /// The identity lacks a scope the endpoint needs.
    #[error("Identity '{identity}' lacks scope '{scope}' required by endpoint '{endpoint}'")]
    MissingScope {
        /// The caller.
        identity: String,
        /// The scope it lacks.
        scope: String,
        /// The endpoint asked for.
        endpoint: String,
    },
    /// The identity exceeded `rate_per_minute`.
    #[error("Rate limit exceeded")]
    RateLimited {
        /// Seconds until a request would be admitted.
        retry_after: u64,
    },
    /// The peer address failed to authenticate too often; its credentials are not checked now.
    #[error("Too many failed authentications from this address")]
    AuthThrottled {
        /// Seconds until the address may try again.
        retry_after: u64,
    },
    /// The identity exceeded `max_concurrency`.
    #[error("Too many concurrent requests")]
    ConcurrencyLimited,
    /// The request body is larger than the endpoint's `max_request_bytes`.
    #[error("Request body too large{}; limit is {limit}", size.map(|s| format!(" ({s} bytes)")).unwrap_or_default())]
    PayloadTooLarge {
        /// The declared size, when known.
        size: Option<u64>,
        /// The limit.
        limit: u64,
    },
    /// A query parameter was given more than once.
    #[error("Repeated query parameters are not allowed")]
    DuplicateParameter,
    /// A path is malformed (empty, NUL byte, too long).
    #[error("{field}{reason}")]
    InvalidPath {
        /// `"<field>: "` or empty.
        field: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A path resolves outside every allowed directory.
    #[error("{field}Path is outside the allowed directories")]
    PathNotAllowed {
        /// `"<field>: "` or empty.
        field: String,
    },
    /// A path goes through a symlink where the rule forbids them.
    #[error("{field}Symlinks are not allowed here")]
    SymlinkDenied {
        /// `"<field>: "` or empty.
        field: String,
    },
    /// A path matches a deny pattern.
    #[error("{field}Path is denied by policy")]
    PathDenied {
        /// `"<field>: "` or empty.
        field: String,
    },
    /// A write or delete on a read-only endpoint.
    #[error("{field}This endpoint is read-only")]
    ReadOnly {
        /// `"<field>: "` or empty.
        field: String,
    },
    /// Any other refusal a guard raises (commands, env, signals, ...).
    #[error("{message}")]
    Other {
        /// Stable machine code (`command_not_allowed`, `signal_not_allowed`, ...).
        code: &'static str,
        /// Human-readable explanation.
        message: String,
        /// HTTP status to answer with.
        status: u16,
        /// Exception name the reference reports in `type`.
        error_type: &'static str,
    },
}

/// Whether `rule` (a deciding rule's origin) is a preset closing a power
/// (`preset:NAME:powers.POWER`) rather than a switch of the reference's.
pub fn is_power_closure(rule: &str) -> bool {
    rule.strip_prefix("preset:").and_then(|r| r.split_once(':')).is_some_and(|(_, what)| what.starts_with("powers."))
}

impl Denial {
    /// The stable machine code of the refusal.
    pub fn code(&self) -> &'static str {
        match self {
            Denial::Unauthorized => "unauthorized",
            Denial::AmbiguousCredentials => "ambiguous_credentials",
            Denial::EndpointDisabled { .. } => "endpoint_disabled",
            Denial::MissingScope { .. } => "missing_scope",
            Denial::RateLimited { .. } => "rate_limited",
            Denial::AuthThrottled { .. } => "auth_throttled",
            Denial::ConcurrencyLimited => "concurrency_limited",
            Denial::DuplicateParameter => "duplicate_parameter",
            Denial::PayloadTooLarge { .. } => "payload_too_large",
            Denial::InvalidPath { .. } => "invalid_path",
            Denial::PathNotAllowed { .. } => "path_not_allowed",
            Denial::SymlinkDenied { .. } => "symlink_denied",
            Denial::PathDenied { .. } => "path_denied",
            Denial::ReadOnly { .. } => "read_only",
            Denial::Other { code, .. } => code,
        }
    }

    /// The HTTP status the reference answers this refusal with.
    pub fn status(&self) -> u16 {
        match self {
            Denial::Unauthorized => 401,
            Denial::AmbiguousCredentials | Denial::DuplicateParameter | Denial::InvalidPath { .. } => 400,
            // A power a preset closes (`preset:read-only:powers.runs_programs`) is a permission
            // refusal; a switched-off endpoint or group answers as the reference's does.
            Denial::EndpointDisabled { rule, .. } if is_power_closure(rule) => 403,
            Denial::EndpointDisabled { .. } => 404,
            Denial::PayloadTooLarge { .. } => 413,
            Denial::RateLimited { .. } | Denial::AuthThrottled { .. } | Denial::ConcurrencyLimited => 429,
            Denial::Other { status, .. } => *status,
            _ => 403,
        }
    }

    /// The exception name the reference reports in the body's `type`.
    pub fn error_type(&self) -> &'static str {
        match self {
            Denial::Unauthorized => "AuthError",
            Denial::AmbiguousCredentials
            | Denial::DuplicateParameter
            | Denial::InvalidPath { .. }
            | Denial::PayloadTooLarge { .. }
            | Denial::EndpointDisabled { .. } => "ValueError",
            Denial::RateLimited { .. } | Denial::AuthThrottled { .. } | Denial::ConcurrencyLimited => "RateLimited",
            Denial::Other { error_type, .. } => error_type,
            _ => "PolicyDenied",
        }
    }

    /// Seconds a client should wait before retrying, for 429s.
    pub fn retry_after(&self) -> Option<u64> {
        match self {
            Denial::RateLimited { retry_after } | Denial::AuthThrottled { retry_after } => Some(*retry_after),
            Denial::ConcurrencyLimited => Some(1),
            _ => None,
        }
    }

    /// A generic 403 refusal with a custom code.
    pub fn forbidden(code: &'static str, message: impl Into<String>) -> Self {
        Denial::Other { code, message: message.into(), status: 403, error_type: "PolicyDenied" }
    }

    /// A 400 refusal of a malformed value, with a custom code.
    pub fn invalid(code: &'static str, message: impl Into<String>) -> Self {
        Denial::Other { code, message: message.into(), status: 400, error_type: "ValueError" }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_and_types_follow_the_reference() {
        assert_eq!((Denial::Unauthorized.status(), Denial::Unauthorized.error_type()), (401, "AuthError"));
        let disabled = Denial::EndpointDisabled { message: "off".into(), rule: "r".into() };
        assert_eq!((disabled.status(), disabled.code()), (404, "endpoint_disabled"));
        let closed =
            Denial::EndpointDisabled { message: "off".into(), rule: "preset:read-only:powers.runs_programs".into() };
        assert_eq!(
            (closed.status(), closed.code()),
            (403, "endpoint_disabled"),
            "a closed power is a permission refusal"
        );
        let named = Denial::EndpointDisabled { message: "off".into(), rule: "preset:read-only:groups.process".into() };
        assert_eq!(named.status(), 404, "the reference's own preset switches keep its status");
        let path = Denial::PathNotAllowed { field: String::new() };
        assert_eq!((path.status(), path.error_type()), (403, "PolicyDenied"));
        assert_eq!(Denial::RateLimited { retry_after: 3 }.retry_after(), Some(3));
        assert_eq!(Denial::ConcurrencyLimited.status(), 429);
    }

    #[test]
    fn field_labels_prefix_path_messages() {
        let d = Denial::PathNotAllowed { field: "cwd: ".into() };
        assert_eq!(d.to_string(), "cwd: Path is outside the allowed directories");
    }
}
