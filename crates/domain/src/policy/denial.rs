//! Why the policy refused a request: one enum, each variant a row of the
//! error table ([`Fault`]), which carries its code, status and type.
//!
//! Each port renders a [`Denial`] in one place (`http::error` for the
//! reference's JSON error); nothing here knows about HTTP.

use abx_wire::api::Fault;
use thiserror::Error;

/// A policy refusal. [`Denial::fault`] is its row of the error table.
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
        /// Whether a preset closes the endpoint as a power
        /// (`preset:read-only:powers.runs_programs`): a permission refusal
        /// ([`Fault::PowerClosed`]) rather than a switch of the reference's.
        power: bool,
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
        /// The row of the error table (`CommandNotAllowed`, `SignalNotAllowed`, ...).
        fault: Fault,
        /// Human-readable explanation.
        message: String,
    },
}

impl Denial {
    /// The refusal's row of the error table: its code, status and type.
    pub fn fault(&self) -> Fault {
        match self {
            Denial::Unauthorized => Fault::Unauthorized,
            Denial::AmbiguousCredentials => Fault::AmbiguousCredentials,
            Denial::EndpointDisabled { power: true, .. } => Fault::PowerClosed,
            Denial::EndpointDisabled { .. } => Fault::EndpointDisabled,
            Denial::MissingScope { .. } => Fault::MissingScope,
            Denial::RateLimited { .. } => Fault::RateLimited,
            Denial::AuthThrottled { .. } => Fault::AuthThrottled,
            Denial::ConcurrencyLimited => Fault::ConcurrencyLimited,
            Denial::DuplicateParameter => Fault::DuplicateParameter,
            Denial::PayloadTooLarge { .. } => Fault::PayloadTooLarge,
            Denial::InvalidPath { .. } => Fault::InvalidPath,
            Denial::PathNotAllowed { .. } => Fault::PathNotAllowed,
            Denial::SymlinkDenied { .. } => Fault::SymlinkDenied,
            Denial::PathDenied { .. } => Fault::PathDenied,
            Denial::ReadOnly { .. } => Fault::ReadOnly,
            Denial::Other { fault, .. } => *fault,
        }
    }

    /// The stable machine code of the refusal (every denial row has one).
    pub fn code(&self) -> &'static str {
        self.fault().code_str().unwrap_or_default()
    }

    /// The HTTP status the reference answers this refusal with.
    pub fn status(&self) -> u16 {
        self.fault().status()
    }

    /// The exception name the reference reports in the body's `type`.
    pub fn error_type(&self) -> &'static str {
        self.fault().error_type()
    }

    /// Seconds a client should wait before retrying, for 429s.
    pub fn retry_after(&self) -> Option<u64> {
        match self {
            Denial::RateLimited { retry_after } | Denial::AuthThrottled { retry_after } => Some(*retry_after),
            Denial::ConcurrencyLimited => Some(1),
            _ => None,
        }
    }

    /// A refusal that is the table's row `fault`, with `message`.
    pub fn new(fault: Fault, message: impl Into<String>) -> Self {
        Denial::Other { fault, message: message.into() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_and_types_follow_the_reference() {
        assert_eq!((Denial::Unauthorized.status(), Denial::Unauthorized.error_type()), (401, "AuthError"));
        let disabled = Denial::EndpointDisabled { message: "off".into(), rule: "r".into(), power: false };
        assert_eq!((disabled.status(), disabled.code()), (404, "endpoint_disabled"));
        let closed = Denial::EndpointDisabled { message: "off".into(), rule: "p".into(), power: true };
        assert_eq!(
            (closed.status(), closed.code()),
            (403, "endpoint_disabled"),
            "a closed power is a permission refusal"
        );
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
