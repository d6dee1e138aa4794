//! Rate (`rate_per_minute`) and concurrency (`max_concurrency`) limits per
//! identity and endpoint.
//!
//! One lock per endpoint, holding a slot per identity: requests to different
//! endpoints never contend, and a lookup allocates nothing (an identity's slot
//! is created on its first limited request; identities are a fixed set).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use super::{Denial, Identity};

/// Token buckets and in-flight counters, one table per endpoint.
#[derive(Debug)]
pub struct Limiter {
    endpoints: Vec<Mutex<HashMap<String, Slot>>>,
}

#[derive(Debug, Default)]
struct Slot {
    bucket: Option<Bucket>,
    inflight: u64,
}

#[derive(Debug)]
struct Bucket {
    tokens: f64,
    stamp: Instant,
}

/// A concurrency slot; released when dropped.
#[derive(Debug)]
pub struct Permit {
    limiter: Arc<Limiter>,
    endpoint: usize,
    identity: Arc<Identity>,
}

impl Drop for Permit {
    fn drop(&mut self) {
        if let Some(table) = self.limiter.endpoints.get(self.endpoint) {
            let mut slots = table.lock().unwrap_or_else(PoisonError::into_inner);
            if let Some(slot) = slots.get_mut(&self.identity.id) {
                slot.inflight = slot.inflight.saturating_sub(1);
            }
        }
    }
}

impl Limiter {
    /// A limiter for `endpoints` endpoints, indexed like the endpoint table.
    pub fn new(endpoints: usize) -> Self {
        Limiter { endpoints: (0..endpoints).map(|_| Mutex::default()).collect() }
    }

    /// Takes a rate token and a concurrency slot of endpoint number `endpoint`, as the limits ask.
    ///
    /// # Errors
    /// [`Denial::RateLimited`] with the seconds until a token is available,
    /// or [`Denial::ConcurrencyLimited`].
    pub fn admit(
        self: &Arc<Self>,
        endpoint: usize,
        identity: &Arc<Identity>,
        per_minute: Option<u64>,
        max_concurrency: Option<u64>,
    ) -> Result<Option<Permit>, Denial> {
        let per_minute = per_minute.filter(|n| *n > 0);
        let max_concurrency = max_concurrency.filter(|n| *n > 0);
        if per_minute.is_none() && max_concurrency.is_none() {
            return Ok(None);
        }
        let Some(table) = self.endpoints.get(endpoint) else {
            return Ok(None);
        };
        let mut slots = table.lock().unwrap_or_else(PoisonError::into_inner);
        if !slots.contains_key(identity.id.as_str()) {
            slots.insert(identity.id.clone(), Slot::default());
        }
        let Some(slot) = slots.get_mut(identity.id.as_str()) else {
            return Ok(None);
        };
        if let Some(per_minute) = per_minute {
            let capacity = per_minute as f64;
            let rate = capacity / 60.0;
            let now = Instant::now();
            let bucket = slot.bucket.get_or_insert(Bucket { tokens: capacity, stamp: now });
            bucket.tokens = (bucket.tokens + now.duration_since(bucket.stamp).as_secs_f64() * rate).min(capacity);
            bucket.stamp = now;
            if bucket.tokens < 1.0 {
                let wait = (1.0 - bucket.tokens) / rate;
                return Err(Denial::RateLimited { retry_after: (wait.ceil() as u64).max(1) });
            }
            bucket.tokens -= 1.0;
        }
        let Some(max) = max_concurrency else {
            return Ok(None);
        };
        if slot.inflight >= max {
            return Err(Denial::ConcurrencyLimited);
        }
        slot.inflight += 1;
        Ok(Some(Permit { limiter: Arc::clone(self), endpoint, identity: Arc::clone(identity) }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn who(id: &str) -> Arc<Identity> {
        Arc::new(Identity::new(id, ["*"]))
    }

    #[test]
    fn rate_limit_refuses_past_the_burst_with_a_retry_hint() {
        let limiter = Arc::new(Limiter::new(2));
        let (a, b) = (who("a"), who("b"));
        for _ in 0..3 {
            assert!(limiter.admit(0, &a, Some(3), None).is_ok());
        }
        assert_eq!(limiter.admit(0, &a, Some(3), None).map(|_| ()), Err(Denial::RateLimited { retry_after: 20 }));
        assert!(limiter.admit(0, &b, Some(3), None).is_ok(), "buckets are per identity");
        assert!(limiter.admit(1, &a, Some(3), None).is_ok(), "and per endpoint");
    }

    #[test]
    fn concurrency_slots_return_when_permits_drop() {
        let limiter = Arc::new(Limiter::new(1));
        let a = who("a");
        let first = limiter.admit(0, &a, None, Some(1)).expect("first");
        assert_eq!(limiter.admit(0, &a, None, Some(1)).map(|_| ()), Err(Denial::ConcurrencyLimited));
        drop(first);
        assert!(limiter.admit(0, &a, None, Some(1)).is_ok());
    }

    #[test]
    fn no_limits_take_no_lock_and_no_permit() {
        let limiter = Arc::new(Limiter::new(1));
        assert!(matches!(limiter.admit(0, &who("a"), None, None), Ok(None)));
        assert!(limiter.endpoints[0].lock().expect("lock").is_empty());
    }

    #[test]
    fn parallel_callers_never_exceed_the_concurrency_limit() {
        let limiter = Arc::new(Limiter::new(1));
        let a = who("a");
        let held: Vec<_> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..16).map(|_| s.spawn(|| limiter.admit(0, &a, None, Some(4)))).collect();
            handles.into_iter().map(|h| h.join().expect("thread")).collect()
        });
        assert_eq!(held.iter().filter(|r| matches!(r, Ok(Some(_)))).count(), 4);
        assert_eq!(held.iter().filter(|r| matches!(r, Err(Denial::ConcurrencyLimited))).count(), 12);
    }
}
