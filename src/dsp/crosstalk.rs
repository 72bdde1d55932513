//! Crosstalk: pairs whose curves hold a peak fixed at lag zero, frame after frame.
//!
//! Channels of one recording device share ground and supply noise, and each picks up a little
//! of its neighbours: the same signal on both channels with no delay, a peak at lag zero in
//! their pair's curve that does not move while the sources do. Tracked as a source it becomes a
//! track fixed at the pair's bisecting plane (broadside of a line array, overhead of a flat one).
//!
//! [`CrosstalkMonitor`] counts, per pair, the frames with a clear peak within
//! [`ZERO_TOL_SAMPLES`] of lag zero, in a running share over `window_s`. A pair whose share
//! reaches [`FLAG_SHARE`] is a suspect (until it falls below [`CLEAR_SHARE`]). A source can hold
//! a pair's peak at zero too, by staying on its bisecting plane (a boat heading straight away
//! from a line array's broadside, a talker in front of a soundbar's middle), so the suspects are
//! flagged only when no source position could explain them: one that puts every suspect's lag
//! within [`EXPLAIN_SAMPLES`] of zero would also put at zero every other pair whose lag it
//! makes smaller than [`OTHER_ZERO_SAMPLES`] ([`explainable`]). A line array's pairs are
//! parallel: a source with the lag of one at zero from afar has them all at zero, so crosstalk
//! inside each device of a line of several is told from such a source. Crosstalk inside one
//! compact group of channels only (one device of several, or two channels of a flat array) is
//! not: a source close in front of that group, or on the two channels' bisecting plane, would
//! look the same in the lags.
//!
//! Pairs shorter than [`MIN_JUDGED_LAG_SAMPLES`] are not judged: a room's diffuse sound (its
//! reverberation, or noise from everywhere) correlates two channels over lags within the
//! pair's bound, and where that bound is within the peak's own width the result is a peak at
//! zero. Measured on the line-room and compact-ring families (3-5 cm spacing, RT60 0.2-0.5 s):
//! their shortest pairs held one in 35-40 % of frames with no crosstalk at all. A short pair
//! whose channels are joined by flagged pairs (one device) is flagged with them. The tracker then ignores a
//! flagged pair's peaks within [`MASK_SAMPLES`] of zero and keeps the rest of its curve.

use nalgebra::{Matrix3, Vector3};

use crate::dsp::gcc::{GccFrame, Peak};
use crate::dsp::geometry::{ArrayGeometry, Pair};

/// A peak this close to lag zero (samples) counts as a zero-lag peak. (Crosstalk's own peak
/// sits at zero; a source's peak a sample or two away on a short pair pulls it off by tenths.)
pub const ZERO_TOL_SAMPLES: f32 = 0.25;
/// Frames seen before anything is flagged, at least.
pub const MIN_FRAMES: u64 = 10;
/// Pairs whose largest lag (samples) is below this are not judged by themselves.
pub const MIN_JUDGED_LAG_SAMPLES: f64 = 2.5;
/// A flagged pair's peaks this close to zero (samples) are masked.
pub const MASK_SAMPLES: f32 = 0.5;
/// Share of frames with a zero-lag peak that makes a pair a suspect.
pub const FLAG_SHARE: f32 = 0.35;
/// Share below which a suspect is cleared.
pub const CLEAR_SHARE: f32 = 0.2;
/// A peak is clear when its value is this many times the curve's noise level (PHAT), or,
/// without a noise level, when its z-score over the pair's lags is at least this.
pub const CLEAR_TIMES_NOISE: f32 = 5.0;
/// A source explains a suspect when it puts the pair's lag within this of zero (samples).
pub const EXPLAIN_SAMPLES: f64 = 0.35;
/// ... and is ruled out by a pair that is no suspect whose lag it puts within this of zero,
pub const OTHER_ZERO_SAMPLES: f64 = 0.1;
/// ... where that pair showed a zero-lag peak in fewer than this share of frames. (Crosstalk's
/// share is all or nothing: its devices' pairs hold their peak, the others almost never have
/// one, under 2 % on the crosstalk families. A source moving near a pair's bisecting plane
/// gives shares in between, and a pair just outside the suspects then is no evidence against
/// it.)
pub const OTHER_SHARE_MAX: f32 = 0.1;

/// Which pairs of a frame are flagged as crosstalk, with the running share of frames with a
/// zero-lag peak that decides it.
#[derive(Debug, Clone)]
pub struct CrosstalkMonitor {
    geo: ArrayGeometry,
    pairs: Vec<Pair>,
    sample_rate_hz: f64,
    /// Frames in the window: the running share is the mean over the frames seen until there
    /// are this many, then a running mean with this time constant.
    window_frames: f32,
    /// Frames seen; nothing is flagged before half a window (at least [`MIN_FRAMES`]).
    frames: u64,
    warmup_frames: u64,
    noise_level: Option<f32>,
    share: Vec<f32>,
    /// Per pair: long enough to be judged by itself.
    judged: Vec<bool>,
    suspect: Vec<bool>,
    flagged: Vec<bool>,
    /// `flagged` before the last change.
    flagged_before: Vec<bool>,
}

impl CrosstalkMonitor {
    /// A monitor for `pairs` of `geo` at `frame_rate_hz` frames a second over `window_s`;
    /// `noise_level` is the curves' noise spread ([`crate::dsp::gcc::phat_noise_level`]).
    pub fn new(
        geo: ArrayGeometry,
        pairs: Vec<Pair>,
        sample_rate_hz: f64,
        frame_rate_hz: f64,
        window_s: f64,
        noise_level: Option<f32>,
    ) -> Self {
        let frames = (window_s * frame_rate_hz).max(1.0);
        let n = pairs.len();
        let judged = pairs
            .iter()
            .map(|p| p.max_tdoa_s * sample_rate_hz >= MIN_JUDGED_LAG_SAMPLES)
            .collect();
        Self {
            judged,
            geo,
            pairs,
            sample_rate_hz,
            window_frames: frames as f32,
            frames: 0,
            warmup_frames: ((frames / 2.0).ceil() as u64).max(MIN_FRAMES),
            noise_level,
            share: vec![0.0; n],
            suspect: vec![false; n],
            flagged: vec![false; n],
            flagged_before: vec![false; n],
        }
    }

    /// Count one frame's peaks (`k` per pair; pairs not `ok` are left as they were). Returns
    /// true when a pair was flagged or freed by it.
    pub fn observe(&mut self, gcc: &GccFrame, k: usize, pair_ok: &[bool]) -> bool {
        self.frames += 1;
        let warm = self.frames >= self.warmup_frames;
        let alpha = 1.0 / (self.frames as f32).min(self.window_frames);
        let mut changed = false;
        for (p, (share, sus)) in self.share.iter_mut().zip(&mut self.suspect).enumerate() {
            if !pair_ok.get(p).copied().unwrap_or(false) || gcc.peaks.len() < (p + 1) * k {
                continue;
            }
            let judged = self.judged[p];
            let hit = gcc
                .pair_peaks(p, k)
                .iter()
                .any(|pk| at_zero(pk) && clear(pk, self.noise_level));
            *share += alpha * (f32::from(u8::from(hit)) - *share);
            let now = judged
                && if *sus {
                    *share >= CLEAR_SHARE
                } else {
                    warm && *share >= FLAG_SHARE
                };
            changed |= now != *sus;
            *sus = now;
        }
        if !changed {
            return false;
        }
        let flag = self.suspect.contains(&true)
            && !explainable(
                &self.geo,
                &self.pairs,
                &self.suspect,
                &self.evidence(),
                self.sample_rate_hz,
            );
        let now = if flag {
            with_devices(&self.pairs, &self.suspect, self.geo.len())
        } else {
            vec![false; self.pairs.len()]
        };
        if now == self.flagged {
            return false;
        }
        self.flagged_before = std::mem::replace(&mut self.flagged, now);
        true
    }

    /// Per pair: whether a source putting its lag at zero would be ruled out by it (judged,
    /// and almost never a zero-lag peak: see [`OTHER_SHARE_MAX`]).
    fn evidence(&self) -> Vec<bool> {
        self.judged
            .iter()
            .zip(&self.share)
            .map(|(&j, &s)| j && s < OTHER_SHARE_MAX)
            .collect()
    }

    /// Per pair: flagged as crosstalk before the last call of [`Self::observe`] that changed
    /// it (to tell which pairs it flagged or freed).
    pub fn flagged_before(&self) -> &[bool] {
        &self.flagged_before
    }

    /// Per pair: flagged as crosstalk.
    pub fn flagged(&self) -> &[bool] {
        &self.flagged
    }

    /// Per pair: the running share of frames with a clear zero-lag peak.
    pub fn share(&self) -> &[f32] {
        &self.share
    }

    /// Whether any pair is flagged.
    pub fn any(&self) -> bool {
        self.flagged.iter().any(|&f| f)
    }
}

/// `flagged`, and every other pair whose two channels are joined by a chain of flagged pairs
/// (one device's channels) among `n` channels.
fn with_devices(pairs: &[Pair], flagged: &[bool], n: usize) -> Vec<bool> {
    let mut root: Vec<usize> = (0..n).collect();
    fn find(root: &mut [usize], mut i: usize) -> usize {
        while root[i] != i {
            root[i] = root[root[i]];
            i = root[i];
        }
        i
    }
    for (p, _) in pairs.iter().zip(flagged).filter(|(_, f)| **f) {
        if p.a < n && p.b < n {
            let (ra, rb) = (find(&mut root, p.a), find(&mut root, p.b));
            root[ra] = rb;
        }
    }
    pairs
        .iter()
        .zip(flagged)
        .map(|(p, &f)| f || (p.a < n && p.b < n && find(&mut root, p.a) == find(&mut root, p.b)))
        .collect()
}

/// Whether one source position puts every pair of `zero` at lag zero (within
/// [`EXPLAIN_SAMPLES`]) and no `evidence` pair outside them within [`OTHER_ZERO_SAMPLES`] of
/// it (other pairs count for neither).
///
/// A pair's lag is zero on its bisecting plane. The candidates: the point nearest every
/// suspect's plane (least squares, drawn to the array's centre), then from it along every
/// direction the suspects' baselines leave free (none, one, or a circle of them) at ranges
/// from a quarter of the aperture out to 10⁵ apertures, and the far field in those directions.
pub fn explainable(
    geo: &ArrayGeometry,
    pairs: &[Pair],
    zero: &[bool],
    evidence: &[bool],
    fs: f64,
) -> bool {
    let c = geo.speed_of_sound_m_s;
    let centre = geo.centroid();
    let aperture = geo.aperture_m().max(1e-3);
    let mut a = Matrix3::<f64>::identity() * 1e-9;
    let mut b = centre * 1e-9;
    for (pair, _) in pairs.iter().zip(zero).filter(|(_, z)| **z) {
        let (sa, sb) = (geo.sensor(pair.a), geo.sensor(pair.b));
        let Some(n) = (sb - sa).try_normalize(1e-12) else {
            continue;
        };
        a += n * n.transpose();
        b += n * n.dot(&((sa + sb) * 0.5));
    }
    let Some(x0) = a.try_inverse().map(|inv| inv * b) else {
        return true;
    };
    let eig = a.symmetric_eigen();
    let top = eig.eigenvalues.max();
    let free: Vec<Vector3<f64>> = (0..3)
        .filter(|&i| eig.eigenvalues[i] < 1e-3 * top)
        .map(|i| eig.eigenvectors.column(i).into_owned())
        .collect();
    let fits = |lag: &dyn Fn(&Pair) -> f64| {
        pairs.iter().zip(zero).zip(evidence).all(|((p, &z), &e)| {
            let l = (lag(p) * fs).abs();
            if z {
                l <= EXPLAIN_SAMPLES
            } else {
                !e || l > OTHER_ZERO_SAMPLES
            }
        })
    };
    let near = |x: Vector3<f64>| fits(&|p: &Pair| geo.tdoa_s(&x, p));
    let far = |u: Vector3<f64>| {
        // (TDOA convention: r_a - r_b, so the far-field lag is (m_b - m_a) . u / c.)
        fits(&|p: &Pair| (geo.sensor(p.b) - geo.sensor(p.a)).dot(&u) / c)
    };
    if near(x0) {
        return true;
    }
    let directions: Vec<Vector3<f64>> = match free.as_slice() {
        [] => Vec::new(),
        [v] => vec![*v, -*v],
        [v1, v2, ..] => (0..360)
            .map(|d| {
                let t = f64::from(d).to_radians();
                *v1 * t.cos() + *v2 * t.sin()
            })
            .collect(),
    };
    directions
        .iter()
        .any(|&u| far(u) || (0..60).any(|k| near(x0 + u * (0.25 * aperture * 1.25f64.powi(k)))))
}

/// Whether a peak lies at lag zero.
fn at_zero(pk: &Peak) -> bool {
    pk.is_some() && pk.lag_samples.abs() <= ZERO_TOL_SAMPLES
}

/// Whether a peak stands clear of the curve's noise.
fn clear(pk: &Peak, noise_level: Option<f32>) -> bool {
    match noise_level {
        Some(level) => pk.value >= CLEAR_TIMES_NOISE * level,
        None => pk.quality >= CLEAR_TIMES_NOISE,
    }
}

/// Whether a flagged pair's peak at `lag_samples` is masked.
pub fn masked(lag_samples: f32) -> bool {
    lag_samples.abs() <= MASK_SAMPLES
}

#[cfg(test)]
mod tests {
    use super::*;

    const FS: f64 = 16_000.0;

    /// Eight microphones on a line, 4 cm apart, and every pair.
    fn line8() -> (ArrayGeometry, Vec<Pair>) {
        let geo = ArrayGeometry::new(
            (0..8).map(|i| [0.04 * f64::from(i), 0.0, 0.0]).collect(),
            343.0,
        );
        let pairs = geo.pairs(crate::dsp::geometry::PairMode::All, 0);
        (geo, pairs)
    }

    fn frame(lags: &[f32]) -> GccFrame {
        GccFrame {
            seq: 0,
            peaks: lags
                .iter()
                .map(|&l| Peak {
                    lag_samples: l,
                    value: 0.5,
                    quality: 9.0,
                })
                .collect(),
            curves: Vec::new(),
        }
    }

    fn monitor(window_s: f64, noise: Option<f32>) -> CrosstalkMonitor {
        let (geo, pairs) = line8();
        CrosstalkMonitor::new(geo, pairs, FS, 10.0, window_s, noise)
    }

    /// The line in two devices of four channels: the six pairs inside each device have a
    /// peak at zero in every frame, the others a source's peak elsewhere. Those twelve are
    /// flagged once half the window has passed, and freed once the peak has gone long
    /// enough; with every pair at zero (a source at broadside) none is.
    #[test]
    fn crosstalk_inside_devices_is_flagged_and_a_broadside_source_is_not() {
        let (_, pairs) = line8();
        let same_device = |p: &Pair| p.a / 4 == p.b / 4;
        let lags: Vec<f32> = pairs
            .iter()
            .map(|p| if same_device(p) { 0.02 } else { 3.0 })
            .collect();
        let ok = vec![true; pairs.len()];
        let mut m = monitor(5.0, Some(0.02));
        let mut first = None;
        for i in 0..30 {
            if m.observe(&frame(&lags), 1, &ok) && first.is_none() {
                first = Some(i + 1);
            }
        }
        assert_eq!(first, Some(25), "flagged after the warm-up (25 frames)");
        let want: Vec<bool> = pairs.iter().map(same_device).collect();
        assert_eq!(m.flagged(), want.as_slice());
        assert!(m.any());
        let gone: Vec<f32> = vec![3.0; pairs.len()];
        let mut freed = None;
        for i in 0..200 {
            if m.observe(&frame(&gone), 1, &ok) {
                freed = Some(i + 1);
                break;
            }
        }
        // The mean over the first 50 frames is 30/50 = 0.6; from there a 50-frame running mean
        // falls below 0.2 in 55 more frames.
        assert_eq!(freed, Some(75));
        assert!(!m.any());

        let mut b = monitor(5.0, Some(0.02));
        for _ in 0..100 {
            assert!(!b.observe(&frame(&vec![0.03; pairs.len()]), 1, &ok));
        }
        assert!(b.share().iter().all(|&s| s > 0.99));
        assert!(!b.any());
    }

    /// A peak that crosses zero as its source passes is no suspect; weak peaks, pairs not ok
    /// and empty slots count for nothing.
    #[test]
    fn passing_and_weak_peaks_do_not_count() {
        let (_, pairs) = line8();
        let n = pairs.len();
        let ok = vec![true; n];
        let mut m = monitor(2.0, Some(0.02));
        for i in 0..100 {
            let lag = (i as f32 - 50.0) * 0.1;
            m.observe(&frame(&vec![lag; n]), 1, &ok);
        }
        assert!(m.share().iter().all(|&s| s < 0.15), "{:?}", m.share());
        let mut w = monitor(1.0, Some(0.2));
        let mut bad = ok.clone();
        bad[0] = false;
        for _ in 0..50 {
            let mut f = frame(&vec![0.0; n]);
            f.peaks[1] = Peak::NONE;
            w.observe(&f, 1, &bad);
        }
        // Value 0.5 is 2.5x a noise level of 0.2: not clear.
        assert!(w.share().iter().all(|&s| s == 0.0));
        assert!(masked(-0.5) && masked(0.2) && !masked(0.6));
    }

    /// Pairs judged by themselves.
    fn judged(pairs: &[Pair]) -> Vec<bool> {
        pairs
            .iter()
            .map(|p| p.max_tdoa_s * FS >= MIN_JUDGED_LAG_SAMPLES)
            .collect()
    }

    /// Lags (samples) of every pair for a source at `x`.
    fn lags(geo: &ArrayGeometry, pairs: &[Pair], x: [f64; 3]) -> Vec<f64> {
        let x = Vector3::from(x);
        pairs.iter().map(|p| geo.tdoa_s(&x, p) * FS).collect()
    }

    /// Sources that hold pairs at zero explain them: a talker 1 m in front of the middle of
    /// a line (its symmetric pairs at zero, near-symmetric ones within a quarter sample), a
    /// far source at broadside (every pair), a talker above the middle of a flat ring. Zero
    /// lags inside the devices of a line, or inside three channels of a ring, are not.
    #[test]
    fn what_a_source_explains_and_what_it_does_not() {
        let (geo, pairs) = line8();
        for x in [[0.14, 1.0, 0.0], [0.14, 0.6, 0.3], [0.14, 400.0, 0.0]] {
            let zero: Vec<bool> = lags(&geo, &pairs, x)
                .iter()
                .map(|l| l.abs() <= f64::from(ZERO_TOL_SAMPLES))
                .collect();
            assert!(zero.contains(&true));
            assert!(
                explainable(&geo, &pairs, &zero, &judged(&pairs), FS),
                "{x:?}"
            );
        }
        let devices: Vec<bool> = pairs
            .iter()
            .zip(judged(&pairs))
            .map(|(p, j)| j && p.a / 4 == p.b / 4)
            .collect();
        assert!(!explainable(&geo, &pairs, &devices, &judged(&pairs), FS));
        // One device alone is explained by a talker 0.2-1.5 m in front of its middle (its
        // pairs within a third of a sample of zero, the others' lags at least 0.1): the limit
        // of what lags can tell.
        let first: Vec<bool> = pairs
            .iter()
            .zip(judged(&pairs))
            .map(|(p, j)| j && p.b < 4)
            .collect();
        assert!(explainable(&geo, &pairs, &first, &judged(&pairs), FS));

        // A ring of eight, 5 cm radius, and its centre.
        let mut ring: Vec<[f64; 3]> = (0..8)
            .map(|i| {
                let t = f64::from(i) * std::f64::consts::TAU / 8.0;
                [0.05 * t.cos(), 0.05 * t.sin(), 0.0]
            })
            .collect();
        ring.push([0.0; 3]);
        let geo = ArrayGeometry::new(ring, 343.0);
        let pairs = geo.pairs(crate::dsp::geometry::PairMode::All, 0);
        let zero: Vec<bool> = lags(&geo, &pairs, [0.0, 0.0, 2.0])
            .iter()
            .map(|l| l.abs() <= f64::from(ZERO_TOL_SAMPLES))
            .collect();
        assert!(explainable(&geo, &pairs, &zero, &judged(&pairs), FS));
        // Four channels of the ring on one device: of its pairs, those long enough to judge.
        let j = judged(&pairs);
        let device: Vec<bool> = pairs.iter().zip(&j).map(|(p, &j)| j && p.b < 4).collect();
        assert_eq!(device.iter().filter(|&&d| d).count(), 3);
        assert!(!explainable(&geo, &pairs, &device, &j, FS));
    }
}
