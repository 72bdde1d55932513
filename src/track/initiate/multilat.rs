//! Births: where a new source may be. Each frame the peaks that no confirmed track explains are
//! multilaterated (each pair's strongest unexplained peak, a robust fit started from many
//! points; in 3-D, when those fit no point, the consensus of all unexplained peaks); a run of `init_frames` consecutive fixes that agree, within what the source can move
//! and their spread, and that no track already covers, proposes a tentative track with a prior
//! from the fixes. The search reads only the frame's measurement and the array, so it can run
//! while a GPU computes the filter step.

use std::collections::VecDeque;

use nalgebra::{Matrix3, Matrix6, Vector3};

use crate::dsp::geometry::{ArrayGeometry, Pair};
use crate::dsp::multilat::{self, Fix, Obs, PairPeaks};
use crate::track::motion::models::Kinematics;
use crate::track::{Estimate, FilterParams, TdoaMeasurement, TrackInit, TrackMode};

/// Why a frame did not start a track (counted for the status stream and the summary).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum NoBirth {
    /// No pair had a peak that stands out of the noise.
    NoPeaks,
    /// Too few pairs had a peak no confirmed track explains.
    TooFewPairs,
    /// The peaks did not fit one point (the robust fit used fewer than half of them).
    NoFix,
    /// The fixes of consecutive frames did not agree (yet).
    Disagreeing,
    /// The fix lies where a track already is.
    Covered,
    /// Every track slot holds a confirmed track.
    SlotsFull,
}

impl NoBirth {
    pub fn label(self) -> &'static str {
        match self {
            NoBirth::NoPeaks => "no_peaks",
            NoBirth::TooFewPairs => "too_few_pairs",
            NoBirth::NoFix => "no_fix",
            NoBirth::Disagreeing => "fixes_disagree",
            NoBirth::Covered => "already_tracked",
            NoBirth::SlotsFull => "slots_full",
        }
    }
}

/// What the birth search reads of a frame.
pub struct BirthInputs<'a> {
    pub geo: &'a ArrayGeometry,
    pub pairs: &'a [Pair],
    pub meas: &'a TdoaMeasurement,
    pub params: &'a FilterParams,
    pub bounds: Option<([f64; 3], [f64; 3])>,
    pub sample_rate_hz: f64,
    pub detection_probability: f32,
    /// The last kept fix (a start point for the search).
    pub last_fix: Option<Vector3<f64>>,
    /// Per (pair, peak), `pair * K + peak`: explained by a confirmed track (taken by it, or in
    /// its gate), and so not a birth's.
    pub explained: &'a [bool],
}

/// While a track is confirmed, a run of agreeing fixes may spread over this many times
/// `init_frames` frames (see [`BirthSearch::offer`]).
pub const BIRTH_SPAN: usize = 3;

/// A peak takes part in a birth only if its weight is at least this share of its pair's
/// heaviest peak's.
pub const BIRTH_SHARE: f32 = 0.25;

/// The TDOA noise a first fix is solved with (and its covariance computed at): the tracker's
/// floor, but at least two samples, since timing noise of a few samples is normal for a first
/// fix and the robust loss handles the rest.
pub fn fix_sigma_s(params: &FilterParams, sample_rate_hz: f64) -> f64 {
    f64::from(params.tdoa_std_s).max(2.0 / sample_rate_hz)
}

/// A birth search's fix and, per pair, the TDOA of the peak it used (None: the pair was not
/// used).
pub type BirthFix = (Fix, Vec<Option<f32>>);

/// Multilaterate the strongest unexplained peak of each informative pair: the fix (if any),
/// and the peaks it used. In 3-D, when those peaks do not fit one point (two sources, each the
/// strongest in some pairs), the consensus of all unexplained peaks is tried
/// ([`multilat::locate_consensus`]).
pub fn birth_fix(i: &BirthInputs) -> Result<BirthFix, NoBirth> {
    let k = i.meas.peaks_per_pair;
    let sigma = fix_sigma_s(i.params, i.sample_rate_hz);
    let mut obs = Vec::new();
    let mut used = vec![None; i.pairs.len()];
    // Every pair's open peaks, for the consensus, and the index of each one's pair.
    let mut peaks: Vec<PairPeaks> = Vec::new();
    let mut peak_pair: Vec<usize> = Vec::new();
    let mut informative = 0;
    for (pi, pair) in i.pairs.iter().enumerate() {
        let base = pi * k;
        if i.meas.floor[pi] > 1.0 - 0.5 * i.detection_probability {
            continue;
        }
        informative += 1;
        // Peaks that carry a fair share of the pair's weight: a compact array's curve is one
        // broad lobe whose shoulders and bound ends are local maxima too, and a room's
        // reflections give lesser peaks beside the direct path's.
        let top = (0..k).map(|j| i.meas.amp[base + j]).fold(0.0f32, f32::max);
        let open: Vec<usize> = (0..k)
            .filter(|&j| !i.explained.get(base + j).copied().unwrap_or(false))
            .filter(|&j| i.meas.amp[base + j] > 0.0 && i.meas.amp[base + j] >= BIRTH_SHARE * top)
            .collect();
        // (The first of equal peaks, as the correlator ranks them.)
        let Some(&j) = open
            .iter()
            .rev()
            .max_by(|&&a, &&b| i.meas.amp[base + a].total_cmp(&i.meas.amp[base + b]))
        else {
            continue;
        };
        used[pi] = Some(i.meas.tdoa_s[base + j]);
        obs.push(Obs {
            pair: *pair,
            tdoa_s: f64::from(i.meas.tdoa_s[base + j]),
        });
        peak_pair.push(pi);
        peaks.push(PairPeaks {
            pair: *pair,
            tdoa_s: open
                .iter()
                .map(|&j| f64::from(i.meas.tdoa_s[base + j]))
                .collect(),
            weight: open
                .iter()
                .map(|&j| f64::from(i.meas.amp[base + j]))
                .collect(),
        });
    }
    if informative == 0 {
        return Err(NoBirth::NoPeaks);
    }
    let three_d = i.params.mode == TrackMode::ThreeD;
    let need = if three_d { 4 } else { 3 };
    if obs.len() < need.min(i.pairs.len()) {
        return Err(NoBirth::TooFewPairs);
    }
    let extra: Vec<Vector3<f64>> = i.last_fix.into_iter().collect();
    let fix = if three_d {
        multilat::locate(i.geo, &obs, sigma, i.bounds, &extra)
    } else {
        let hemisphere = match (i.params.line, i.bounds) {
            // Line mode: the cone's direction in the filter's half-plane.
            (Some(l), _) => Vector3::from(l.side.map(f64::from)),
            (None, Some((lo, hi))) => {
                Vector3::new(lo[0] + hi[0], lo[1] + hi[1], lo[2] + hi[2]) * 0.5 - i.geo.centroid()
            }
            (None, None) => Vector3::z(),
        };
        multilat::direction(i.geo, &obs, sigma, hemisphere)
    };
    match fix {
        Some(f) if 2 * f.inliers > obs.len() => return Ok((f, used)),
        _ if !three_d => return Err(NoBirth::NoFix),
        _ => {}
    }
    match multilat::locate_consensus(i.geo, &peaks, sigma, i.bounds, &extra) {
        Some((f, sel)) if f.inliers >= consensus_inliers(peaks.len()) => {
            let mut used = vec![None; i.pairs.len()];
            for ((&pi, pp), j) in peak_pair.iter().zip(&peaks).zip(sel) {
                used[pi] = Some(pp.tdoa_s[j] as f32);
            }
            Ok((f, used))
        }
        _ => Err(NoBirth::NoFix),
    }
}

/// The inlying pairs a consensus fix needs out of `pairs`: all of them up to seven, one fewer
/// per eight after. Choosing among every pair's peaks tries many combinations, and a point
/// that some of them explain within 3 σ is easy to find in clutter: with four peaks a pair
/// over a thousand lags, four pairs of six agree somewhere in nearly every frame, all six in
/// about one frame in a thousand.
pub fn consensus_inliers(pairs: usize) -> usize {
    pairs - pairs / 8
}

/// A multilateration fix kept for births.
struct Candidate {
    seq: u64,
    t_s: f64,
    fix: Fix,
    /// Nearly every pair it used fits it (see [`BirthSearch::offer`]).
    strong: bool,
}

/// A proposed birth: the prior of a new track and the time of its state.
pub struct Birth {
    pub init: TrackInit,
    pub est: Estimate,
    pub t_state_s: f64,
    pub fixes: usize,
}

/// The run of recent fixes, and what it takes to agree.
pub struct BirthSearch {
    candidates: VecDeque<Candidate>,
    pub init_frames: usize,
}

impl BirthSearch {
    pub fn new(init_frames: usize) -> Self {
        Self {
            candidates: VecDeque::new(),
            init_frames: init_frames.max(1),
        }
    }

    /// The last kept fix (a start point for the next search).
    pub fn last_fix(&self) -> Option<Vector3<f64>> {
        self.candidates.back().map(|c| c.fix.position)
    }

    /// Forget the run of fixes.
    pub fn clear(&mut self) {
        self.candidates.clear();
    }

    /// A frame without a usable fix while a track is confirmed: the weak fixes go (as
    /// [`Self::clear`] would take them), the strong ones stay for a run with gaps.
    pub fn forget_weak(&mut self) {
        self.candidates.retain(|c| c.strong);
    }

    /// Add this frame's fix (frame `seq`, centred at `t_centre_s`); when `init_frames` fixes
    /// agree, the run's position (its last fix) and the mean square scatter of the run about
    /// it.
    ///
    /// The run is the last `init_frames` fixes of consecutive frames (one frame may be
    /// missing), each agreeing with the next. While a track is confirmed (`tolerant`), its
    /// source's peaks are masked and another source is the strongest that remains only in some
    /// frames (two others take turns, and their peaks mix into fixes that fail): the run may
    /// then also be any `init_frames` strong fixes (more pairs used than four sensors have, or
    /// three for a direction, and all of them inliers, or all but one in eight:
    /// [`consensus_inliers`]) of the last [`BIRTH_SPAN`] × `init_frames` frames
    /// that agree with the newest, whatever came between. (Weaker fixes with gaps between are
    /// too often a ghost: a second solution of a tracked source's leftover peaks, or a dead
    /// channel's.)
    #[allow(clippy::too_many_arguments)]
    pub fn offer(
        &mut self,
        seq: u64,
        t_centre_s: f64,
        fix: Fix,
        geo: &ArrayGeometry,
        three_d: bool,
        max_speed_m_s: f64,
        tolerant: bool,
        pairs_used: usize,
    ) -> Result<(Fix, f64, f64), NoBirth> {
        // (Four sensors' six pairs, or three's three for a direction, hold no more independent
        // TDOAs than the fix has unknowns: any consistent set of peaks fits them exactly.)
        let exact = if three_d { 6 } else { 3 };
        let strong = pairs_used > exact && fix.inliers >= consensus_inliers(pairs_used);
        if tolerant {
            let span = (BIRTH_SPAN * self.init_frames) as u64;
            self.candidates.retain(|c| seq.saturating_sub(c.seq) < span);
        } else if self
            .candidates
            .back()
            .is_some_and(|c| seq.saturating_sub(c.seq) > 2)
        {
            // Fixes from frames before the one just before this are stale.
            self.candidates.clear();
        }
        let t_fix = t_centre_s
            - if three_d {
                geo.mean_range_m(&fix.position) / geo.speed_of_sound_m_s
            } else {
                0.0
            };
        self.candidates.push_back(Candidate {
            seq,
            t_s: t_fix,
            fix,
            strong,
        });
        if !tolerant {
            while self.candidates.len() > self.init_frames {
                self.candidates.pop_front();
            }
        }
        // The last `init_frames` fixes, from frames at most two apart.
        let recent: Vec<&Candidate> = self
            .candidates
            .iter()
            .skip(self.candidates.len().saturating_sub(self.init_frames))
            .collect();
        let consecutive = recent.windows(2).all(|w| w[1].seq - w[0].seq <= 2);
        // Fixes must agree to within what the source can move plus their spread.
        let aperture = geo.aperture_m();
        let slack = if three_d { 0.05 * aperture } else { 0.1 };
        let speed = if three_d { max_speed_m_s } else { 1.0 };
        let agree = |a: &Candidate, b: &Candidate| {
            let d = (a.fix.position - b.fix.position).norm();
            let spread = (a.fix.covariance.trace() + b.fix.covariance.trace()).sqrt();
            d <= speed * (b.t_s - a.t_s).abs() + 3.0 * spread + slack
        };
        let Some(last) = self.candidates.back() else {
            return Err(NoBirth::Disagreeing);
        };
        let chained = consecutive
            && recent.len() >= self.init_frames
            && recent.windows(2).all(|w| agree(w[0], w[1]));
        let run: Vec<&Candidate> = if chained {
            recent
        } else if tolerant && last.strong {
            self.candidates
                .iter()
                .filter(|c| c.strong && agree(c, last))
                .collect()
        } else {
            Vec::new()
        };
        if run.len() < self.init_frames {
            return Err(NoBirth::Disagreeing);
        }
        let scatter = run
            .iter()
            .map(|c| (c.fix.position - last.fix.position).norm_squared())
            .sum::<f64>()
            / run.len() as f64;
        let out = (last.fix.clone(), scatter, last.t_s);
        // (The run alone stays: a birth counts its fixes.)
        if tolerant {
            let keep: Vec<u64> = run.iter().map(|c| c.seq).collect();
            self.candidates.retain(|c| keep.contains(&c.seq));
        }
        Ok(out)
    }

    /// The prior of a track born from `fix` (with the run's `scatter`) into `slot` at frame
    /// `seq`: the fix's covariance widened to cover the scatter; a velocity prior that is the
    /// speed ball of `max_speed_m_s`.
    #[allow(clippy::too_many_arguments)]
    pub fn birth(
        &mut self,
        fix: &Fix,
        scatter: f64,
        t_state_s: f64,
        slot: u32,
        seq: u64,
        params: &FilterParams,
        geo: &ArrayGeometry,
        sigma_s: f32,
        sample_rate_hz: f64,
        max_speed_m_s: f64,
    ) -> Birth {
        let three_d = params.mode == TrackMode::ThreeD;
        let aperture = geo.aperture_m();
        let fix_cov = fix.covariance * 4.0;
        // The fix's covariance is at a first fix's conservative noise (fix_sigma_s, at least
        // two samples). Far from a compact array that makes its range axis metres long: a
        // prior the divergence rule would not let live is taken at the tracker's current TDOA
        // noise instead (never wider than the fix's).
        let fix_cov = if three_d && fix_cov.trace() > spread_limit_m(geo).powi(2) {
            let ratio = f64::from(sigma_s) / fix_sigma_s(params, sample_rate_hz);
            fix_cov * ratio.min(1.0).powi(2)
        } else {
            fix_cov
        };
        let mut pcov: Matrix3<f64> =
            fix_cov + Matrix3::identity() * (scatter + (0.005 * aperture).powi(2));
        if !three_d {
            pcov = Matrix3::identity() * (scatter + 0.05f64.powi(2));
        }
        let mut cov = Matrix6::<f64>::zeros();
        cov.fixed_view_mut::<3, 3>(0, 0).copy_from(&pcov);
        let chol_m = cov
            .fixed_view::<3, 3>(0, 0)
            .into_owned()
            .cholesky()
            .map(|c| c.l())
            .unwrap_or_else(|| Matrix3::identity() * pcov.trace().sqrt());
        let mut chol = [[0.0; 6]; 6];
        for r in 0..3 {
            for c in 0..3 {
                chol[r][c] = chol_m[(r, c)];
            }
        }
        let l = params.n_models();
        let kin = Kinematics::of(params);
        let p = fix.position;
        let init = TrackInit {
            slot,
            frame: seq,
            mean: [p.x, p.y, p.z, 0.0, 0.0, 0.0],
            chol,
            // Directions: a velocity over the range (curved wavefronts, scaled by each
            // particle's inverse range), or a rate on the unit sphere (plane waves).
            speed_ball_m_s: if kin == Kinematics::Plane {
                0.5
            } else {
                max_speed_m_s
            },
            model_probs: vec![1.0 / l as f32; l],
            inv_range_max: params.inv_range_max,
        };
        let mut est = Estimate::new(l);
        est.mean = init.mean;
        for r in 0..3 {
            for c in 0..3 {
                est.cov[r][c] = pcov[(r, c)];
            }
        }
        // Per-axis variance of a uniformly random direction with speed uniform in [0, max].
        // Curved wavefronts scale it by the particles' inverse ranges (mean square ρ_max² / 3).
        let ball_scale = if kin == Kinematics::Curved {
            f64::from(init.inv_range_max) / 3f64.sqrt()
        } else {
            1.0
        };
        let ball_var = (init.speed_ball_m_s * ball_scale).powi(2) / 9.0;
        for a in 3..6 {
            est.cov[a][a] = ball_var;
        }
        est.model_probs = init.model_probs.clone();
        est.ess = params.particles as f32;
        let fixes = self.candidates.len();
        self.candidates.clear();
        Birth {
            init,
            est,
            t_state_s,
            fixes,
        }
    }
}

/// A 3-D track has diverged, and is deleted, when its position spread (the root of its
/// covariance's trace) exceeds both this, twice the array's aperture (at least 2 m), and
/// [`DIVERGED_SPREADS`] times the spread that one frame's TDOAs leave at its position.
pub fn spread_limit_m(geo: &ArrayGeometry) -> f64 {
    2.0 * geo.aperture_m().max(1.0)
}

/// See [`spread_limit_m`]. Near an array, one frame's spread is centimetres and the aperture
/// decides. Far from a compact array it is metres along the range: there a track that follows
/// its source keeps a range spread of several metres for seconds.
pub const DIVERGED_SPREADS: f64 = 4.0;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::workload::harbour_config;

    fn inputs<'a>(
        geo: &'a ArrayGeometry,
        pairs: &'a [Pair],
        meas: &'a TdoaMeasurement,
        params: &'a FilterParams,
        explained: &'a [bool],
    ) -> BirthInputs<'a> {
        BirthInputs {
            geo,
            pairs,
            meas,
            params,
            bounds: None,
            sample_rate_hz: 48_000.0,
            detection_probability: 0.9,
            last_fix: None,
            explained,
        }
    }

    /// Two sources each the strongest in half the pairs: the strongest peaks fit no point, and
    /// the consensus of all peaks gives one of the sources, with every pair's peak its own.
    /// The same frame with one pair's peaks for that source missing is still born (five sensors,
    /// ten pairs: one may miss); with three missing it is not.
    #[test]
    fn two_sources_mixed_across_pairs_give_a_birth() {
        let cfg = harbour_config();
        let geo = cfg.geometry();
        let pairs = geo.pairs(crate::dsp::geometry::PairMode::All, 0);
        let params = cfg.filter_params();
        let c = geo.centroid();
        let (a, b) = (
            c + Vector3::new(25.0, -10.0, 5.0),
            c + Vector3::new(-30.0, 20.0, -3.0),
        );
        let mut meas = TdoaMeasurement::empty(0, pairs.len(), 2, 2e-5);
        for (pi, pair) in pairs.iter().enumerate() {
            let (strong, weak) = if pi % 2 == 0 { (a, b) } else { (b, a) };
            meas.tdoa_s[2 * pi] = geo.tdoa_s(&strong, pair) as f32;
            meas.tdoa_s[2 * pi + 1] = geo.tdoa_s(&weak, pair) as f32;
            meas.amp[2 * pi] = 0.6;
            meas.amp[2 * pi + 1] = 0.4;
            meas.floor[pi] = 0.1;
        }
        let explained = vec![false; 2 * pairs.len()];
        let (fix, used) = birth_fix(&inputs(&geo, &pairs, &meas, &params, &explained))
            .expect("the consensus finds a source");
        let src = if (fix.position - a).norm() < (fix.position - b).norm() {
            a
        } else {
            b
        };
        assert!((fix.position - src).norm() < 0.5, "{}", fix.position);
        for (pi, pair) in pairs.iter().enumerate() {
            let want = geo.tdoa_s(&src, pair);
            assert!(
                (f64::from(used[pi].unwrap()) - want).abs() < 1e-6,
                "pair {pi}"
            );
        }
        // Move that source's peak away in some pairs (a clutter peak 2 ms off instead).
        let spoil = |n: usize| {
            let mut m = meas.clone();
            for pi in 0..n {
                let j = (0..2)
                    .min_by(|&x, &y| {
                        let d = |k: usize| {
                            (f64::from(m.tdoa_s[2 * pi + k]) - geo.tdoa_s(&src, &pairs[pi])).abs()
                        };
                        d(x).total_cmp(&d(y))
                    })
                    .unwrap();
                m.tdoa_s[2 * pi + j] += 2e-3;
            }
            m
        };
        let one = spoil(1);
        assert!(birth_fix(&inputs(&geo, &pairs, &one, &params, &explained)).is_ok());
        let three = spoil(3);
        let r = birth_fix(&inputs(&geo, &pairs, &three, &params, &explained));
        // (What is left may fit the other source, which keeps all its peaks.)
        if let Ok((f, _)) = r {
            let other = if src == a { b } else { a };
            assert!((f.position - other).norm() < 0.5, "{}", f.position);
        }
        assert_eq!(consensus_inliers(6), 6);
        assert_eq!(consensus_inliers(10), 9);
        assert_eq!(consensus_inliers(36), 32);
    }
}

#[cfg(test)]
mod run_tests {
    use super::*;
    use crate::bench::workload::harbour_config;

    fn fix(x: f64, inliers: usize) -> Fix {
        Fix {
            position: Vector3::new(x, 5.0, -8.0),
            covariance: Matrix3::identity() * 1e-4,
            residual_rms_s: 1e-6,
            inliers,
        }
    }

    /// Offer fixes of one source at the given frames (10 pairs used, `inliers` of them fit),
    /// with other frames' fixes elsewhere between; whether a birth came.
    fn born(frames: &[u64], tolerant: bool, pairs_used: usize, inliers: usize) -> bool {
        let geo = harbour_config().geometry();
        let mut s = BirthSearch::new(3);
        let mut any = false;
        for seq in 0..=*frames.last().unwrap() {
            let f = if frames.contains(&seq) {
                fix(10.0, inliers)
            } else {
                // Another source's fix, far from the first.
                fix(-40.0, 6)
            };
            let t = seq as f64 * 0.05;
            any |= s
                .offer(seq, t, f, &geo, true, 5.0, tolerant, pairs_used)
                .is_ok_and(|(f, _, _)| (f.position.x - 10.0).abs() < 1e-9);
        }
        any
    }

    /// Three consecutive agreeing fixes make a birth either way. A source whose fixes come
    /// every third frame (another's between) makes one only while a track is confirmed
    /// (`tolerant`), and only from strong fixes: more pairs than four sensors have, nearly all
    /// inliers.
    #[test]
    fn a_gapped_run_needs_a_confirmed_track_and_strong_fixes() {
        assert!(born(&[4, 5, 6], false, 10, 10));
        assert!(born(&[4, 5, 6], true, 10, 10));
        let gapped = [0, 3, 6];
        assert!(
            !born(&gapped, false, 10, 10),
            "no track: consecutive fixes only"
        );
        assert!(born(&gapped, true, 10, 10));
        assert!(born(&gapped, true, 10, 9), "one in eight may miss");
        assert!(!born(&gapped, true, 10, 7), "weak fixes");
        assert!(
            !born(&gapped, true, 6, 6),
            "four sensors fit anything consistent"
        );
        // Too far apart: beyond the span of 3 × init_frames frames.
        assert!(!born(&[0, 5, 10], true, 10, 10));
    }
}
