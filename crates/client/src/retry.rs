//! [`RetryPolicy`]: how many times, and how far apart, a failed call is
//! tried again.
//!
//! The client retries only what is safe to repeat: idempotent calls (reads:
//! `GET`, and `POST`s whose every scope is a `:read` one, such as
//! `files_search`) after a transport failure, a 502/503/504 or a 429; and
//! any call that provably never ran: the connection was refused before the
//! request was sent, or the admission pipeline shed it for load (429
//! `rate_limited`/`concurrency_limited`, answered before any handler). Waits
//! grow exponentially with jitter, honour the server's `retry_after`, and
//! never outlast the call's timeout or the client's deadline.

use std::hash::{BuildHasher, Hasher};
use std::time::Duration;

/// How many times a call is tried, and the waits in between.
///
/// ```
/// use std::time::Duration;
/// use abx_client::{Client, RetryPolicy};
///
/// let patient = RetryPolicy::new(5, Duration::from_millis(50), Duration::from_secs(2));
/// let client = Client::builder("http://127.0.0.1:9000").retry(patient).build()?;
/// let once = client.with_retry(RetryPolicy::NEVER);
/// # let _ = once;
/// # Ok::<(), abx_client::ClientError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    attempts: u32,
    initial: Duration,
    max: Duration,
}

impl RetryPolicy {
    /// One attempt, no retry.
    ///
    /// ```
    /// use abx_client::RetryPolicy;
    ///
    /// assert_eq!(RetryPolicy::NEVER.attempts(), 1);
    /// ```
    pub const NEVER: RetryPolicy = RetryPolicy { attempts: 1, initial: Duration::ZERO, max: Duration::ZERO };

    /// Up to `attempts` tries in all (at least 1); the first wait is about
    /// `initial`, each next one about twice as long, none longer than `max`.
    /// A server's `retry_after` longer than `max` is not waited for: the
    /// call fails with the server's answer.
    ///
    /// ```
    /// use std::time::Duration;
    /// use abx_client::RetryPolicy;
    ///
    /// let policy = RetryPolicy::new(4, Duration::from_millis(100), Duration::from_secs(1));
    /// assert_eq!(policy.attempts(), 4);
    /// ```
    pub const fn new(attempts: u32, initial: Duration, max: Duration) -> Self {
        RetryPolicy { attempts: if attempts == 0 { 1 } else { attempts }, initial, max }
    }

    /// Tries in all, the first included.
    ///
    /// ```
    /// use abx_client::RetryPolicy;
    ///
    /// assert_eq!(RetryPolicy::default().attempts(), 3);
    /// ```
    pub const fn attempts(&self) -> u32 {
        self.attempts
    }

    /// The wait before retry number `retry` (0 for the first), or `None`
    /// when the policy gives up: no tries left, or the server's `hint` is
    /// longer than the policy's longest wait.
    ///
    /// ```
    /// use std::time::Duration;
    /// use abx_client::RetryPolicy;
    ///
    /// let policy = RetryPolicy::new(3, Duration::from_millis(100), Duration::from_secs(1));
    /// let first = policy.backoff(0, None).unwrap();
    /// assert!(first >= Duration::from_millis(50) && first <= Duration::from_millis(100));
    /// assert_eq!(policy.backoff(0, Some(Duration::from_millis(700))), Some(Duration::from_millis(700)));
    /// assert_eq!(policy.backoff(0, Some(Duration::from_secs(30))), None);
    /// assert_eq!(policy.backoff(2, None), None, "three tries in all");
    /// ```
    pub fn backoff(&self, retry: u32, hint: Option<Duration>) -> Option<Duration> {
        if retry + 1 >= self.attempts {
            return None;
        }
        if let Some(hint) = hint {
            return (hint <= self.max).then_some(hint);
        }
        let full = self.initial.saturating_mul(1 << retry.min(16)).min(self.max);
        // "Equal jitter": half fixed, half random, so clients that failed
        // together do not retry together.
        let half = full / 2;
        let random = u32::try_from(random() % 1024).unwrap_or(0);
        Some(half + half.mul_f64(f64::from(random) / 1023.0))
    }
}

impl Default for RetryPolicy {
    /// 3 tries, waits from about 200 ms up to 5 s.
    fn default() -> Self {
        RetryPolicy::new(3, Duration::from_millis(200), Duration::from_secs(5))
    }
}

/// A random number from the standard library's per-process random keys.
fn random() -> u64 {
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u64(0);
    hasher.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_grow_within_bounds_and_the_policy_gives_up() {
        let policy = RetryPolicy::new(6, Duration::from_millis(100), Duration::from_millis(500));
        let waits: Vec<Duration> = (0..6).map_while(|n| policy.backoff(n, None)).collect();
        assert_eq!(waits.len(), 5);
        let ceilings = [100, 200, 400, 500, 500];
        for (wait, ceiling) in waits.iter().zip(ceilings) {
            let ceiling = Duration::from_millis(ceiling);
            assert!(*wait >= ceiling / 2 && *wait <= ceiling, "{wait:?} within {ceiling:?}");
        }
        assert_eq!(RetryPolicy::NEVER.backoff(0, None), None);
        assert_eq!(RetryPolicy::new(0, Duration::ZERO, Duration::ZERO).attempts(), 1);
    }
}
