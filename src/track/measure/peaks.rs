//! The TDOA peaks measurement: each pair's top GCC-PHAT peaks, flattened for both backends
//! ([`TdoaMeasurement`]), and [`PeaksModel`], which reads them from each frame and gives each
//! track its view.

use crate::dsp::coherence::{coherence_of_peak, overlap_table};
use crate::dsp::crosstalk;
use crate::dsp::gcc::{GccFrame, MAX_PEAKS, Peak};
use crate::dsp::geometry::Pair;
use crate::dsp::multilat::Obs;
use crate::track::LiveSource;
use crate::track::gate::Gates;
use crate::track::measure::{FrameInput, MeasurementModel};

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

/// Peaks whose clarity (height over the curve's noise level, in its spreads) is around this
/// value are as likely noise as signal: the top of ~1000 lags of pure noise sits near 3.3.
pub const QUALITY_MID: f32 = 4.0;
/// See [`prominence_mid`].
pub const PROMINENCE_SHARE: f32 = 0.75;
/// Width of the logistic ramp from "noise" to "signal" around [`QUALITY_MID`].
pub const QUALITY_WIDTH: f32 = 0.5;

/// The z-score midpoint for a pair whose physical bound is `max_lag_samples`: [`QUALITY_MID`],
/// or [`PROMINENCE_SHARE`] of the largest z-score its lags allow (a single spike among n lags
/// scores (n - 1) / sqrt(n)), whichever is lower.
pub fn prominence_mid(max_lag_samples: f64) -> f32 {
    let n = 2.0 * max_lag_samples.max(0.0).floor() + 1.0;
    QUALITY_MID.min(PROMINENCE_SHARE * ((n - 1.0) / n.sqrt()) as f32)
}

/// Gaussian peak density (noise `sigma_s`) over the clutter density 1 / (2 max_tdoa).
pub fn pair_ratio(pair: &Pair, sigma_s: f32) -> f32 {
    (2.0 * pair.max_tdoa_s as f32) / (sigma_s * (std::f32::consts::TAU).sqrt())
}

/// (With the exponential of `fastmath`, which the GPU's own build of the measurement
/// evaluates the same way: kernels/pf.cu, live_pair.)
fn logistic(x: f32) -> f32 {
    1.0 / (1.0 + crate::math::fastmath::exp(-x))
}

/// What the peaks model needs of the array and the correlator.
#[derive(Debug, Clone)]
pub struct PeaksSettings {
    /// Sensor pairs in the correlator's order.
    pub pairs: Vec<Pair>,
    pub peaks_per_pair: usize,
    pub sample_rate_hz: f64,
    pub detection_probability: f32,
    /// The spread of a GCC curve's value under noise ([`crate::dsp::gcc::phat_noise_level`]):
    /// a peak's clarity is its height over it. `None`: the clarity is the correlator's z-score
    /// over the pair's physical lags.
    pub peak_noise: Option<f32>,
    /// The analysis window with PHAT weighting (empty without): received levels come from
    /// peak heights through it ([`crate::dsp::coherence`]).
    pub phat_window: Vec<f32>,
}

/// The TDOA peaks as the tracker reads them: each frame's flattened measurement, each track's
/// view of it, and what a track's assigned peaks say (support, coherence).
#[derive(Debug, Clone)]
pub struct PeaksModel {
    s: PeaksSettings,
    meas: TdoaMeasurement,
    /// Per (pair, peak): the GCC-PHAT peak's height and lag (samples); height 0 where none is
    /// usable. Turned into a coherence only for the peaks a track is given.
    peak_value: Vec<(f32, f32)>,
    /// The analysis window's overlap with itself per whole lag up to the largest pair's
    /// ([`crate::dsp::coherence::overlap_table`]); empty without PHAT weighting.
    overlap: Vec<f64>,
    /// Per pair: flagged as crosstalk, its peaks at lag zero ignored (see
    /// [`crate::dsp::crosstalk`]).
    zero_masked: Vec<bool>,
}

/// A frame as the peaks model read it, kept while multi-frame assignment holds it back.
#[derive(Debug, Clone)]
pub struct ReadFrame {
    pub meas: TdoaMeasurement,
    pub peak_value: Vec<(f32, f32)>,
    pub informative: usize,
}

impl PeaksModel {
    pub fn new(s: PeaksSettings, sigma_s: f32) -> Self {
        let meas = TdoaMeasurement::empty(0, s.pairs.len(), s.peaks_per_pair, sigma_s);
        let max_lag = s
            .pairs
            .iter()
            .map(|p| (p.max_tdoa_s * s.sample_rate_hz).ceil() as usize + 2)
            .max()
            .unwrap_or(0);
        Self {
            meas,
            peak_value: Vec::new(),
            overlap: overlap_table(&s.phat_window, max_lag),
            zero_masked: Vec::new(),
            s,
        }
    }

    pub fn pairs(&self) -> &[Pair] {
        &self.s.pairs
    }

    pub fn sample_rate_hz(&self) -> f64 {
        self.s.sample_rate_hz
    }

    /// Per pair: whether its peaks at lag zero are crosstalk, to be ignored from the next frame
    /// on.
    pub fn set_zero_masked(&mut self, masked: &[bool]) {
        self.zero_masked.clear();
        self.zero_masked.extend_from_slice(masked);
    }

    /// Whether some pair's peaks at lag zero are masked.
    pub fn any_masked(&self) -> bool {
        self.zero_masked.contains(&true)
    }

    /// The frame number and noise that the next read will set (a step launched before its
    /// frame's peaks are in reads them).
    pub fn expect(&mut self, seq: u64, sigma_s: f32) {
        self.meas.frame = seq;
        self.meas.sigma_s = sigma_s;
    }

    /// What a device needs to build the frame's measurement from the correlator's `peaks`
    /// itself, with the frame's pair checks `pair_ok`.
    pub fn live_source(
        &self,
        peaks: crate::dsp::gcc::DevicePeaks,
        sigma_s: f32,
        pair_ok: &[bool],
    ) -> LiveSource {
        LiveSource {
            peaks,
            sample_rate_hz: self.s.sample_rate_hz as f32,
            detection_probability: self.s.detection_probability,
            ratio: self
                .s
                .pairs
                .iter()
                .map(|p| pair_ratio(p, sigma_s))
                .collect(),
            pair_ok: pair_ok.to_vec(),
        }
    }

    /// Read a frame's peaks into the flattened measurement, with TDOA noise `sigma_s`. Returns
    /// the number of informative pairs.
    fn read_peaks(&mut self, seq: u64, gcc: &GccFrame, pair_ok: &[bool], sigma_s: f32) -> usize {
        let k = self.meas.peaks_per_pair;
        self.meas.frame = seq;
        self.meas.sigma_s = sigma_s;
        self.peak_value.clear();
        self.peak_value.resize(self.meas.amp.len(), (0.0, 0.0));
        let mut informative = 0;
        for pi in 0..self.s.pairs.len() {
            let base = pi * k;
            self.meas.amp[base..base + k].fill(0.0);
            self.meas.floor[pi] = 1.0;
            if !pair_ok.get(pi).copied().unwrap_or(false) {
                continue;
            }
            let peaks = self.unmasked_peaks(gcc, pi);
            if self.read_pair(pi, &peaks[..k], sigma_s) {
                informative += 1;
            }
        }
        informative
    }

    /// Pair `pi`'s top peaks, less its peaks at lag zero where it is flagged as crosstalk (the
    /// rest move up).
    fn unmasked_peaks(&self, gcc: &GccFrame, pi: usize) -> [Peak; MAX_PEAKS] {
        let k = self.meas.peaks_per_pair;
        let mut kept = [Peak::NONE; MAX_PEAKS];
        let peaks = gcc.pair_peaks(pi, k);
        if self.zero_masked.get(pi).copied().unwrap_or(false) {
            let unmasked = peaks.iter().filter(|pk| !crosstalk::masked(pk.lag_samples));
            for (slot, pk) in kept.iter_mut().zip(unmasked) {
                *slot = *pk;
            }
        } else {
            kept[..peaks.len()].copy_from_slice(peaks);
        }
        kept
    }

    /// Pair `pi`'s terms from its `peaks`. Returns whether the pair is informative.
    ///
    /// Detection probability scaled by how clearly the best peak stands out: above the
    /// curve's noise level (its clarity; a peak buried in noise is no detection), and among
    /// the pair's lags (its prominence, the correlator's z-score: reverberation raises every
    /// lag, and at a compact array every lag of the one broad lobe stands out of the noise). A
    /// z-score over n lags cannot exceed (n - 1) / sqrt(n), so a pair with few lags needs less
    /// of it. Each peak's share is by height and prominence.
    fn read_pair(&mut self, pi: usize, peaks: &[Peak], sigma_s: f32) -> bool {
        let fs = self.s.sample_rate_hz as f32;
        let pair = &self.s.pairs[pi];
        let mid = prominence_mid(pair.max_tdoa_s * f64::from(fs));
        let mut share = [0.0f32; MAX_PEAKS];
        let mut best_q = 0.0f32;
        let mut total = 0.0f32;
        for (j, pk) in peaks.iter().enumerate() {
            if !pk.is_some() {
                continue;
            }
            let prominence = logistic((pk.quality - mid) / QUALITY_WIDTH);
            // (Where the z-score can reach the usual midpoint, it alone decides, as it
            // always has: a pair with so many lags that a peak shows among them.)
            let clear = match self.s.peak_noise {
                Some(level) if mid < QUALITY_MID => {
                    logistic((pk.value / level - QUALITY_MID) / QUALITY_WIDTH)
                }
                _ => 1.0,
            };
            best_q = best_q.max(prominence.min(clear));
            share[j] = pk.value.max(0.0) * prominence;
            total += share[j];
        }
        if !(total > 0.0) {
            return false;
        }
        let pd = self.s.detection_probability * best_q;
        let ratio = pair_ratio(pair, sigma_s);
        let base = pi * self.meas.peaks_per_pair;
        self.meas.floor[pi] = 1.0 - pd;
        for (j, pk) in peaks.iter().enumerate() {
            self.meas.tdoa_s[base + j] = pk.lag_samples / fs;
            self.meas.amp[base + j] = pd * share[j] / total * ratio;
            if pk.is_some() {
                self.peak_value[base + j] = (pk.value, pk.lag_samples);
            }
        }
        best_q > 0.5
    }

    /// The frame as read, to hold back (multi-frame assignment) and [`Self::restore`] later.
    pub fn take(&self, informative: usize) -> ReadFrame {
        ReadFrame {
            meas: self.meas.clone(),
            peak_value: self.peak_value.clone(),
            informative,
        }
    }

    /// A frame held back, in place again.
    pub fn restore(&mut self, f: &ReadFrame) {
        self.meas.clone_from(&f.meas);
        self.peak_value.clone_from(&f.peak_value);
    }

    /// Whether pair `pi` tells anything this frame: its clutter floor (the weight of "none of
    /// its peaks is the source") is at most one half.
    pub fn informative(&self, pi: usize) -> bool {
        !(self.meas.floor[pi] > 0.5)
    }

    /// The informative pairs.
    pub fn informative_pairs(&self) -> Vec<usize> {
        (0..self.s.pairs.len())
            .filter(|&p| self.informative(p))
            .collect()
    }

    /// Pair `pi`'s usable peaks (their TDOAs), None where a slot holds none.
    pub fn peaks_of(&self, pi: usize) -> Vec<Option<f32>> {
        let k = self.meas.peaks_per_pair;
        (0..k)
            .map(|j| {
                let base = pi * k + j;
                (self.meas.amp[base] > 0.0).then_some(self.meas.tdoa_s[base])
            })
            .collect()
    }

    /// Per (pair, peak): in one of `gates` or taken by its track (`assigned`).
    pub fn explained<'a>(
        &self,
        tracks: impl Iterator<Item = (&'a Gates, &'a [Option<usize>])>,
        gate_sigmas: f32,
    ) -> Vec<bool> {
        let k = self.meas.peaks_per_pair;
        let mut out = vec![false; self.meas.amp.len()];
        for (gates, assigned) in tracks {
            for pi in 0..self.s.pairs.len() {
                for j in 0..k {
                    let in_gate =
                        gates.d2(pi, self.meas.tdoa_s[pi * k + j]) <= gate_sigmas * gate_sigmas;
                    if in_gate || assigned[pi] == Some(j) {
                        out[pi * k + j] = true;
                    }
                }
            }
        }
        out
    }

    /// The share of the informative pairs whose gates hold a peak the track took (`assigned`;
    /// None when no pair was informative).
    pub fn support(&self, assigned: &[Option<usize>]) -> Option<f32> {
        let informative = (0..self.s.pairs.len())
            .filter(|&p| self.informative(p))
            .count();
        let hits = assigned.iter().filter(|a| a.is_some()).count();
        (informative > 0).then(|| hits as f32 / informative as f32)
    }

    /// Mean coherence of the peaks a track took this frame (None without one).
    pub fn coherence(&self, assigned: &[Option<usize>]) -> Option<f32> {
        let k = self.meas.peaks_per_pair;
        let (sum, n) = assigned
            .iter()
            .enumerate()
            .filter_map(|(pi, a)| a.and_then(|j| self.peak_value.get(pi * k + j)))
            .map(|&(v, lag)| coherence_of_peak(v, lag, &self.overlap).unwrap_or(0.0) as f32)
            .fold((0.0f32, 0u32), |(s, n), v| (s + v, n + 1));
        (n > 0).then(|| sum / n as f32)
    }

    /// The distance from `predicted_s` to pair `pi`'s nearest usable peak, where it is within
    /// `wide_s`.
    pub fn nearest_within(&self, pi: usize, predicted_s: f32, wide_s: f32) -> Option<f32> {
        let k = self.meas.peaks_per_pair;
        let nearest = (0..k)
            .filter(|&j| self.meas.amp[pi * k + j] > 0.0)
            .map(|j| (self.meas.tdoa_s[pi * k + j] - predicted_s).abs())
            .fold(f32::INFINITY, f32::min);
        (nearest <= wide_s).then_some(nearest)
    }

    /// The TDOAs a track took (`assigned`), as multilateration observations.
    pub fn observations(&self, assigned: &[Option<usize>]) -> Vec<Obs> {
        let k = self.meas.peaks_per_pair;
        assigned
            .iter()
            .zip(&self.s.pairs)
            .enumerate()
            .filter_map(|(pi, (a, pair))| {
                a.map(|j| Obs {
                    pair: *pair,
                    tdoa_s: f64::from(self.meas.tdoa_s[pi * k + j]),
                })
            })
            .collect()
    }
}

impl MeasurementModel for PeaksModel {
    type Frame = TdoaMeasurement;
    /// Per track, the peak of each pair it took.
    type Others<'a> = [&'a [Option<usize>]];

    fn name(&self) -> &'static str {
        "peaks"
    }

    fn read(&mut self, input: &FrameInput) -> Option<usize> {
        Some(self.read_peaks(input.seq, input.gcc, input.pair_ok, input.sigma_s))
    }

    fn frame(&self) -> &TdoaMeasurement {
        &self.meas
    }

    /// Every peak but those assigned to other tracks (`others[o][pi]`: the peak of pair pi
    /// that track o took).
    fn view(&self, i: usize, others: &Self::Others<'_>, out: &mut TdoaMeasurement) {
        let k = self.meas.peaks_per_pair;
        out.clone_from(&self.meas);
        for (o, a) in others.iter().enumerate() {
            if o == i {
                continue;
            }
            for (pi, a) in a.iter().enumerate() {
                if let Some(j) = a {
                    if others[i][pi] != Some(*j) {
                        out.amp[pi * k + j] = 0.0;
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Wide pairs keep the usual midpoint; a compact pair's is three quarters of the largest
    /// z-score its lags allow.
    #[test]
    fn a_pair_with_few_lags_needs_less_prominence() {
        assert_eq!(prominence_mid(1000.0), QUALITY_MID);
        assert_eq!(prominence_mid(40.0), QUALITY_MID);
        // 4.7 samples: 9 lags, a spike scores 8 / 3.
        let m = prominence_mid(4.7);
        assert!((m - 0.75 * 8.0 / 3.0).abs() < 1e-6, "{m}");
        assert!(prominence_mid(2.3) < m);
        assert_eq!(prominence_mid(0.0), 0.0);
        assert!(prominence_mid(f64::NAN).is_finite());
    }
}
