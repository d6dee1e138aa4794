//! Code execution: stateful code contexts, one-shot runs and git helpers.
//!
//! - [`contexts`]: the code contexts of the code-interpreter port; each owns
//!   a [`kernel`], an interpreter running one of the embedded drivers
//!   (`drivers/`) and speaking the framed [`protocol`] over pipes.
//! - [`executions`]: executions started with `X-Abx-Detach: keep`, which
//!   outlive their connection and can be re-attached by id from a cursor.
//! - [`oneshot`]: `POST /code/run`, one program run to completion.
//! - [`git`]: `GET /git/status` and `GET /git/diff`.
//! - [`spawn`]: the one place these start processes.
//!
//! Nothing here knows about HTTP.

pub mod contexts;
pub mod executions;
pub mod git;
mod io;
pub mod kernel;
pub mod language;
pub mod oneshot;
pub mod pipe;
pub mod protocol;
pub mod spawn;

use abx_wire::api::Fault;

pub use self::contexts::{CodeConfig, CodeInterpreter};
pub use self::language::{Interpreters, Language};

/// Why a code-context request cannot be served.
#[derive(Debug, thiserror::Error)]
pub enum CodeError {
    /// A language this server does not run.
    #[error("Unsupported language '{0}'; supported: {supported}", supported = language::SUPPORTED)]
    UnsupportedLanguage(String),
    /// The language's interpreter is not installed.
    #[error("{language} is not available here: its interpreter '{program}' was not found")]
    RuntimeMissing {
        /// The language.
        language: &'static str,
        /// The program looked for.
        program: String,
    },
    /// No context has this id.
    #[error("Context {0} not found")]
    ContextNotFound(String),
    /// The context was removed after being idle.
    #[error("Context {id} not found: it expired after {idle_seconds} s without executions")]
    ContextExpired {
        /// The context id.
        id: String,
        /// The idle lifetime.
        idle_seconds: u64,
    },
    /// Both `context_id` and `language` were given.
    #[error("Only one of context_id or language can be provided")]
    ContextAndLanguage,
    /// The context limit is reached.
    #[error("Too many code contexts ({0} live); delete one or raise code_max_contexts")]
    TooManyContexts(usize),
    /// The working directory cannot be used.
    #[error("cwd '{path}': {reason}")]
    InvalidCwd {
        /// The directory asked for.
        path: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// Another malformed field.
    #[error("{0}")]
    Invalid(String),
    /// The interpreter did not start.
    #[error("the {language} interpreter did not start: {detail}")]
    StartFailed {
        /// The language.
        language: &'static str,
        /// What happened.
        detail: String,
    },
    /// No detached execution has this id for this caller.
    #[error(
        "Execution {0} not found: it was not started with X-Abx-Detach: keep, ended more than {secs} s ago, or is not yours",
        secs = executions::KEEP_GRACE.as_secs()
    )]
    ExecutionNotFound(String),
    /// A re-attach cursor that is not a position of the execution.
    #[error("Invalid re-attach cursor: {0}")]
    BadCursor(String),
    /// Too many detached executions are kept.
    #[error("Too many detached executions ({0} kept); re-attach to one or wait until one ends")]
    TooManyExecutions(usize),
    /// The server is stopping.
    #[error("the server is shutting down")]
    ShuttingDown,
}

impl CodeError {
    /// The error's row of the error table.
    pub fn fault(&self) -> Fault {
        match self {
            CodeError::ContextNotFound(_) | CodeError::ContextExpired { .. } | CodeError::ExecutionNotFound(_) => {
                Fault::NotFound
            }
            CodeError::UnsupportedLanguage(_)
            | CodeError::ContextAndLanguage
            | CodeError::InvalidCwd { .. }
            | CodeError::BadCursor(_)
            | CodeError::Invalid(_) => Fault::BadRequest,
            CodeError::RuntimeMissing { .. } => Fault::LanguageUnavailable,
            CodeError::TooManyContexts(_) | CodeError::TooManyExecutions(_) => Fault::CodeLimit,
            CodeError::StartFailed { .. } => Fault::Internal,
            CodeError::ShuttingDown => Fault::ShuttingDown,
        }
    }
}

/// A fresh random id in the UUID text form.
pub fn new_id() -> String {
    use std::io::Read;
    let mut bytes = [0u8; 16];
    let filled = std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut bytes));
    if filled.is_err() {
        // /dev/urandom is always there on Linux; std's randomly keyed hasher stands in if not.
        use std::hash::{BuildHasher, Hasher};
        for chunk in bytes.chunks_mut(8) {
            let hasher = std::collections::hash_map::RandomState::new().build_hasher();
            chunk.copy_from_slice(&hasher.finish().to_le_bytes()[..chunk.len()]);
        }
    }
    bytes[6] = (bytes[6] & 0x0f) | 0x40;
    bytes[8] = (bytes[8] & 0x3f) | 0x80;
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!("{}-{}-{}-{}-{}", &hex[..8], &hex[8..12], &hex[12..16], &hex[16..20], &hex[20..])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_uuid_v4_shaped_and_distinct() {
        let (a, b) = (new_id(), new_id());
        assert_ne!(a, b);
        assert_eq!(a.len(), 36);
        assert_eq!(&a[14..15], "4");
        assert!(a.chars().all(|c| c == '-' || c.is_ascii_hexdigit()));
    }
}
