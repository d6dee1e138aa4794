//! Slowing down credential guessing: failed authentications per peer address.
//!
//! Each address that presents wrong credentials draws from a bucket of
//! [`BURST`] failures refilled at [`REFILL_PER_SECOND`]. An empty bucket
//! makes the address's next requests that present credentials answer 429
//! (`auth_throttled`, with `Retry-After`) without checking them, so a guesser
//! gets about one try a second whatever its concurrency. Requests without
//! credentials are never counted or held back. The table keeps at most
//! [`MAX_PEERS`] addresses: full buckets are forgotten first, then the
//! stalest entry.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::Instant;

use super::Denial;

/// Failures an address may make in a burst.
pub const BURST: f64 = 30.0;
/// Failures forgiven per second.
pub const REFILL_PER_SECOND: f64 = 1.0;
/// Addresses remembered at most.
pub const MAX_PEERS: usize = 4096;

#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    stamp: Instant,
}

impl Bucket {
    fn refilled(self, now: Instant) -> f64 {
        (self.tokens + now.saturating_duration_since(self.stamp).as_secs_f64() * REFILL_PER_SECOND).min(BURST)
    }
}

/// Failed authentications per peer address, bounded.
#[derive(Debug, Default)]
pub struct Throttle {
    peers: Mutex<HashMap<IpAddr, Bucket>>,
    /// Whether any failure was ever recorded: until then a check takes no lock.
    failed_once: AtomicBool,
}

impl Throttle {
    /// Whether `peer` may try credentials now.
    ///
    /// # Errors
    /// [`Denial::AuthThrottled`] with the seconds until it may try again.
    pub fn check(&self, peer: IpAddr) -> Result<(), Denial> {
        if !self.failed_once.load(Ordering::Relaxed) {
            return Ok(());
        }
        let peers = self.peers.lock().unwrap_or_else(PoisonError::into_inner);
        match peers.get(&peer) {
            Some(bucket) if bucket.refilled(Instant::now()) < 1.0 => {
                let wait = (1.0 - bucket.refilled(Instant::now())) / REFILL_PER_SECOND;
                Err(Denial::AuthThrottled { retry_after: (wait.ceil() as u64).max(1) })
            }
            _ => Ok(()),
        }
    }

    /// Records a failed authentication by `peer`.
    pub fn failed(&self, peer: IpAddr) {
        self.failed_once.store(true, Ordering::Relaxed);
        let now = Instant::now();
        let mut peers = self.peers.lock().unwrap_or_else(PoisonError::into_inner);
        if !peers.contains_key(&peer) && peers.len() >= MAX_PEERS {
            peers.retain(|_, b| b.refilled(now) < BURST);
            if peers.len() >= MAX_PEERS {
                if let Some(stalest) = peers.iter().min_by_key(|(_, b)| b.stamp).map(|(ip, _)| *ip) {
                    peers.remove(&stalest);
                }
            }
        }
        let bucket = peers.entry(peer).or_insert(Bucket { tokens: BURST, stamp: now });
        bucket.tokens = (bucket.refilled(now) - 1.0).max(0.0);
        bucket.stamp = now;
    }

    /// Addresses remembered now.
    pub fn len(&self) -> usize {
        self.peers.lock().unwrap_or_else(PoisonError::into_inner).len()
    }

    /// Whether no address is remembered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_of_failures_throttles_that_address_only() {
        let throttle = Throttle::default();
        let (guesser, other) = (IpAddr::from([10, 0, 0, 1]), IpAddr::from([10, 0, 0, 2]));
        for _ in 0..BURST as usize {
            assert!(throttle.check(guesser).is_ok());
            throttle.failed(guesser);
        }
        assert_eq!(throttle.check(guesser), Err(Denial::AuthThrottled { retry_after: 1 }));
        assert!(throttle.check(other).is_ok());
    }

    #[test]
    fn memory_stays_bounded() {
        let throttle = Throttle::default();
        for i in 0..(MAX_PEERS as u32 + 100) {
            throttle.failed(IpAddr::from(i.to_be_bytes()));
        }
        assert!(throttle.len() <= MAX_PEERS);
    }
}
