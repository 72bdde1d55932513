//! Frame-to-message latency, as a histogram of fixed size.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Latency from a frame being complete to its message leaving, as a fixed histogram (flat
/// memory however long the daemon runs): 50 µs bins up to 100 ms, then one overflow bin.
#[derive(Debug)]
pub struct LatencyHistogram {
    bins: Box<[AtomicU64]>,
}

impl Default for LatencyHistogram {
    fn default() -> Self {
        Self {
            bins: (0..=LATENCY_BINS).map(|_| AtomicU64::new(0)).collect(),
        }
    }
}

const LATENCY_BINS: usize = 2000;
const LATENCY_BIN_US: f64 = 50.0;

impl LatencyHistogram {
    pub fn record(&self, d: Duration) {
        let bin = ((d.as_secs_f64() * 1e6 / LATENCY_BIN_US) as usize).min(LATENCY_BINS);
        self.bins[bin].fetch_add(1, Ordering::Relaxed);
    }

    pub fn count(&self) -> u64 {
        self.bins.iter().map(|b| b.load(Ordering::Relaxed)).sum()
    }

    /// The q-quantile in milliseconds (upper edge of its bin), None when empty.
    pub fn quantile_ms(&self, q: f64) -> Option<f64> {
        let n = self.count();
        if n == 0 {
            return None;
        }
        let target = ((n as f64 * q).ceil() as u64).max(1);
        let mut acc = 0;
        for (i, b) in self.bins.iter().enumerate() {
            acc += b.load(Ordering::Relaxed);
            if acc >= target {
                return Some((i + 1) as f64 * LATENCY_BIN_US / 1000.0);
            }
        }
        None
    }
}
