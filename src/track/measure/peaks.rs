//! The TDOA peaks measurement: each pair's top GCC-PHAT peaks, flattened for both backends.

/// One frame's measurement, flattened for both backends.
///
/// For pair p and peak k: `tdoa_s[p*K + k]` and `amp[p*K + k]`; the pair's likelihood ratio
/// against clutter is `floor[p] + sum_k amp[p*K+k] * exp(-0.5 ((tdoa - predicted) / sigma)^2)`.
/// `amp` folds together the detection probability, the peak's share of it and the ratio of the
/// Gaussian's peak density to the clutter density; a pair with nothing usable has floor 1 and
/// all amps 0 (it then leaves every particle's weight unchanged).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TdoaMeasurement {
    /// Frame sequence number (part of the random-number key).
    pub frame: u64,
    pub peaks_per_pair: usize,
    /// Standard deviation of a true peak around the predicted TDOA, seconds.
    pub sigma_s: f32,
    pub tdoa_s: Vec<f32>,
    pub amp: Vec<f32>,
    pub floor: Vec<f32>,
}

impl TdoaMeasurement {
    pub fn pairs(&self) -> usize {
        self.floor.len()
    }

    /// A measurement that carries no information (every pair at floor 1).
    pub fn empty(frame: u64, pairs: usize, k: usize, sigma_s: f32) -> Self {
        Self {
            frame,
            peaks_per_pair: k,
            sigma_s,
            tdoa_s: vec![0.0; pairs * k],
            amp: vec![0.0; pairs * k],
            floor: vec![1.0; pairs],
        }
    }
}
