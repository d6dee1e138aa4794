//! CPU use between two samples of the cumulative counters (host `/proc/stat`
//! and the cgroup's CPU time).
//!
//! A metrics request compares against the previous request's sample when
//! that one is recent enough (between [`MIN_WINDOW`] and [`MAX_AGE`] old),
//! so a caller polling every few seconds gets the use over its own polling
//! interval with no waiting; otherwise the request takes a second sample
//! [`MIN_WINDOW`] later (an async sleep, never a blocked thread).

use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use super::host::CpuTimes;

/// Shortest window a percentage is computed over.
pub const MIN_WINDOW: Duration = Duration::from_millis(100);

/// Oldest earlier sample still taken as "current" use.
pub const MAX_AGE: Duration = Duration::from_secs(10);

/// Cumulative CPU counters at one instant.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sample {
    /// When it was taken.
    pub at: Instant,
    /// Host ticks.
    pub host: Option<CpuTimes>,
    /// The cgroup's CPU seconds.
    pub cgroup_seconds: Option<f64>,
}

/// CPU use over a window.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Usage {
    /// Window length, seconds.
    pub window: f64,
    /// Host busy share of all CPUs, percent.
    pub host_percent: Option<f64>,
    /// The cgroup's CPU seconds used per second of the window (1.0 = one CPU busy).
    pub cgroup_cores: Option<f64>,
}

impl Usage {
    /// The use between `earlier` and `later`.
    pub fn between(earlier: &Sample, later: &Sample) -> Usage {
        let window = later.at.saturating_duration_since(earlier.at).as_secs_f64();
        let host_percent = match (earlier.host, later.host) {
            (Some(a), Some(b)) => b.busy_percent_since(&a),
            _ => None,
        };
        let cgroup_cores = match (earlier.cgroup_seconds, later.cgroup_seconds) {
            (Some(a), Some(b)) if window > 0.0 && b >= a => Some((b - a) / window),
            _ => None,
        };
        Usage { window, host_percent, cgroup_cores }
    }
}

/// Keeps the last sample taken.
#[derive(Debug, Default)]
pub struct Sampler {
    last: Mutex<Option<Sample>>,
}

impl Sampler {
    /// Stores `now` and returns the previous sample if it makes a usable window with it.
    pub fn exchange(&self, now: Sample) -> Option<Sample> {
        let mut last = self.last.lock().unwrap_or_else(PoisonError::into_inner);
        let previous = last.replace(now)?;
        let age = now.at.checked_duration_since(previous.at)?;
        if age >= MIN_WINDOW && age <= MAX_AGE {
            Some(previous)
        } else if age < MIN_WINDOW {
            // Too close: keep the older sample so the next caller still gets a window.
            *last = Some(previous);
            None
        } else {
            None
        }
    }

    /// Records a sample without comparing.
    pub fn store(&self, sample: Sample) {
        *self.last.lock().unwrap_or_else(PoisonError::into_inner) = Some(sample);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(at: Instant, total: u64, idle: u64, cg: f64) -> Sample {
        Sample { at, host: Some(CpuTimes { total, idle }), cgroup_seconds: Some(cg) }
    }

    #[test]
    fn usage_is_measured_between_samples() {
        let t0 = Instant::now();
        let usage = Usage::between(&sample(t0, 1000, 900, 1.0), &sample(t0 + Duration::from_secs(2), 1400, 1000, 2.5));
        assert_eq!(usage, Usage { window: 2.0, host_percent: Some(75.0), cgroup_cores: Some(0.75) });
    }

    #[test]
    fn only_recent_enough_samples_make_a_window() {
        let sampler = Sampler::default();
        let t0 = Instant::now();
        assert_eq!(sampler.exchange(sample(t0, 0, 0, 0.0)), None, "first sample");
        assert_eq!(sampler.exchange(sample(t0 + Duration::from_millis(10), 0, 0, 0.0)), None, "too close");
        let later = sample(t0 + Duration::from_secs(1), 0, 0, 0.0);
        assert_eq!(sampler.exchange(later).map(|s| s.at), Some(t0), "the older sample was kept");
        assert_eq!(sampler.exchange(sample(t0 + Duration::from_secs(60), 0, 0, 0.0)), None, "too old");
    }
}
