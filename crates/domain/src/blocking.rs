//! The one way the daemon hands blocking work (file-system calls, user
//! database lookups, `/proc` reads) to tokio's blocking pool and back.
//!
//! A task that panicked or was cancelled comes back as the caller's own
//! error type through its `From<JoinError>`: each domain error says once
//! what a failed task means to it (an internal error, logged).

/// Runs blocking `work` on the blocking pool and returns its result.
///
/// # Errors
/// The work's own error, or `E::from` the join error when the task failed.
pub async fn run<T, E, F>(work: F) -> Result<T, E>
where
    F: FnOnce() -> Result<T, E> + Send + 'static,
    T: Send + 'static,
    E: From<tokio::task::JoinError> + Send + 'static,
{
    tokio::task::spawn_blocking(work).await?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq)]
    enum Failed {
        Work,
        Task,
    }

    impl From<tokio::task::JoinError> for Failed {
        fn from(_: tokio::task::JoinError) -> Self {
            Failed::Task
        }
    }

    #[tokio::test]
    async fn results_errors_and_panics_come_back() {
        assert_eq!(run(|| Ok::<_, Failed>(2 + 2)).await, Ok(4));
        assert_eq!(run(|| Err::<(), _>(Failed::Work)).await, Err(Failed::Work));
        assert_eq!(run(|| -> Result<(), Failed> { panic!("boom") }).await, Err(Failed::Task));
    }
}
