//! How webhook deliveries ended, counted for the daemon's metrics
//! (`abx_webhook_deliveries_total{outcome}` on `GET /metrics`).

use std::sync::atomic::{AtomicU64, Ordering};

/// Webhook deliveries by outcome, counted since the agents group started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Deliveries {
    /// Answered 2xx by the receiver.
    pub delivered: u64,
    /// Given up: out of attempts, a status not worth retrying, or a private address.
    pub failed: u64,
    /// Attempts after the first.
    pub retried: u64,
    /// Never sent: the queue was full or deliveries are off.
    pub dropped: u64,
}

/// Deliveries by outcome since the runtime started; every event counts once
/// at its end, and each attempt after the first once more in `retried`.
#[derive(Debug, Default)]
pub struct Tally {
    delivered: AtomicU64,
    failed: AtomicU64,
    retried: AtomicU64,
    dropped: AtomicU64,
}

impl Tally {
    pub(super) fn delivered(&self) {
        self.delivered.fetch_add(1, Ordering::Relaxed);
    }

    pub(super) fn failed(&self) {
        self.failed.fetch_add(1, Ordering::Relaxed);
    }

    pub(super) fn retried(&self) {
        self.retried.fetch_add(1, Ordering::Relaxed);
    }

    pub(super) fn dropped(&self) {
        self.dropped.fetch_add(1, Ordering::Relaxed);
    }

    /// The counts now, as the metrics show them.
    pub fn read(&self) -> Deliveries {
        Deliveries {
            delivered: self.delivered.load(Ordering::Relaxed),
            failed: self.failed.load(Ordering::Relaxed),
            retried: self.retried.load(Ordering::Relaxed),
            dropped: self.dropped.load(Ordering::Relaxed),
        }
    }
}
