//! How webhook deliveries ended, counted for the daemon's metrics
//! (`abx_webhook_deliveries_total{outcome}` on `GET /metrics`).

use std::sync::atomic::{AtomicU64, Ordering};

use crate::metrics::Deliveries;

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
