//! Rate (`rate_per_minute`) and concurrency (`max_concurrency`) limits per
//! identity and endpoint.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use super::Denial;

type Key = (String, &'static str);

/// Token buckets and in-flight counters, keyed by (identity, endpoint).
#[derive(Debug, Default)]
pub struct Limiter {
    buckets: Mutex<HashMap<Key, Bucket>>,
    inflight: Arc<Mutex<HashMap<Key, u64>>>,
}

#[derive(Debug)]
struct Bucket {
    tokens: f64,
    stamp: Instant,
}

/// A concurrency slot; released when dropped.
#[derive(Debug)]
pub struct Permit {
    key: Key,
    inflight: Arc<Mutex<HashMap<Key, u64>>>,
}

impl Drop for Permit {
    fn drop(&mut self) {
        let mut inflight = self.inflight.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(n) = inflight.get_mut(&self.key) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                inflight.remove(&self.key);
            }
        }
    }
}

impl Limiter {
    /// Takes a rate token and a concurrency slot, as the limits ask.
    ///
    /// # Errors
    /// [`Denial::RateLimited`] with the seconds until a token is available,
    /// or [`Denial::ConcurrencyLimited`].
    pub fn admit(
        &self,
        identity: &str,
        endpoint: &'static str,
        per_minute: Option<u64>,
        max_concurrency: Option<u64>,
    ) -> Result<Option<Permit>, Denial> {
        let key = (identity.to_string(), endpoint);
        if let Some(per_minute) = per_minute.filter(|n| *n > 0) {
            let capacity = per_minute as f64;
            let rate = capacity / 60.0;
            let mut buckets = self.buckets.lock().unwrap_or_else(PoisonError::into_inner);
            let now = Instant::now();
            let bucket = buckets.entry(key.clone()).or_insert(Bucket { tokens: capacity, stamp: now });
            bucket.tokens = (bucket.tokens + now.duration_since(bucket.stamp).as_secs_f64() * rate).min(capacity);
            bucket.stamp = now;
            if bucket.tokens < 1.0 {
                let wait = (1.0 - bucket.tokens) / rate;
                return Err(Denial::RateLimited { retry_after: (wait.ceil() as u64).max(1) });
            }
            bucket.tokens -= 1.0;
        }
        let Some(max) = max_concurrency.filter(|n| *n > 0) else {
            return Ok(None);
        };
        let mut inflight = self.inflight.lock().unwrap_or_else(PoisonError::into_inner);
        let count = inflight.entry(key.clone()).or_insert(0);
        if *count >= max {
            return Err(Denial::ConcurrencyLimited);
        }
        *count += 1;
        Ok(Some(Permit { key, inflight: Arc::clone(&self.inflight) }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rate_limit_refuses_past_the_burst_with_a_retry_hint() {
        let limiter = Limiter::default();
        for _ in 0..3 {
            assert!(limiter.admit("a", "shell", Some(3), None).is_ok());
        }
        assert_eq!(
            limiter.admit("a", "shell", Some(3), None).map(|_| ()),
            Err(Denial::RateLimited { retry_after: 20 })
        );
        assert!(limiter.admit("b", "shell", Some(3), None).is_ok(), "buckets are per identity");
    }

    #[test]
    fn concurrency_slots_return_when_permits_drop() {
        let limiter = Limiter::default();
        let first = limiter.admit("a", "shell", None, Some(1)).expect("first");
        assert_eq!(limiter.admit("a", "shell", None, Some(1)).map(|_| ()), Err(Denial::ConcurrencyLimited));
        drop(first);
        assert!(limiter.admit("a", "shell", None, Some(1)).is_ok());
    }
}
