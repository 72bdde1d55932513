//! Track management, independent of the backend: turns GCC peaks into the flattened measurement,
//! times each step, starts tracks from agreeing multilateration fixes, keeps their status, deletes
//! lost ones, and reports estimates.
//!
//! Time: truth and reports use the emission time. A frame centred at arrival time `t_c` sees the
//! source as it was `lag = mean range / c` earlier, so a track's state time is `t_c - lag` (the
//! likelihood corrects each pair for its own emission time; see `likelihood.rs`).

use std::collections::VecDeque;

use nalgebra::{Matrix3, Matrix6, Vector3};
use serde::Serialize;

use crate::dsp::gcc::GccFrame;
use crate::dsp::geometry::{ArrayGeometry, Pair};
use crate::dsp::multilat::{self, Fix, Obs};
use crate::error::BackendError;
use crate::track::likelihood::{LikelihoodConsts, predict_tdoas};
use crate::track::models::Kinematics;
use crate::track::{
    Estimate, FilterParams, ParticleFilter, TdoaMeasurement, TrackInit, TrackMode, TrackStep,
};

/// Peaks whose quality (z-score above the curve) is around this value are as likely noise as
/// signal: the top of ~1000 lags of pure noise sits near 3.3.
pub const QUALITY_MID: f32 = 4.0;
/// Width of the logistic ramp from "noise" to "signal" around [`QUALITY_MID`].
pub const QUALITY_WIDTH: f32 = 0.5;
/// A track that found no support for this long is reported as coasting.
pub const COAST_AFTER_S: f64 = 0.5;
/// Residuals kept for the online estimate of the TDOA noise.
pub const RESIDUAL_WINDOW: usize = 256;

/// The last [`RESIDUAL_WINDOW`] residuals, in arrival order and in order of size, so that their
/// median is read rather than selected on every frame (a selection over 256 values, with its
/// copy, took about 1 us per frame on dev-cpu, on the live path's host tail). The median is the
/// element `select_nth_unstable_by(len / 2, f32::total_cmp)` would pick: the same value.
#[derive(Default)]
struct ResidualWindow {
    fifo: VecDeque<f32>,
    sorted: Vec<f32>,
}

impl ResidualWindow {
    fn len(&self) -> usize {
        self.fifo.len()
    }

    /// Add `r`, dropping the oldest residual when the window is full.
    fn push(&mut self, r: f32) {
        if self.fifo.len() == RESIDUAL_WINDOW {
            if let Some(old) = self.fifo.pop_front() {
                // Present: every value in `fifo` is in `sorted`, equal under total_cmp.
                if let Ok(i) = self.sorted.binary_search_by(|x| x.total_cmp(&old)) {
                    self.sorted.remove(i);
                }
            }
        }
        self.fifo.push_back(r);
        let at = self.sorted.partition_point(|x| x.total_cmp(&r).is_lt());
        self.sorted.insert(at, r);
    }

    fn clear(&mut self) {
        self.fifo.clear();
        self.sorted.clear();
    }

    /// The middle residual in order of size (0 when empty).
    fn median(&self) -> f32 {
        self.sorted
            .get(self.sorted.len() / 2)
            .copied()
            .unwrap_or(0.0)
    }
}
/// The TDOA noise estimate never exceeds this many samples: beyond it a track is lost, not noisy.
pub const SIGMA_CEILING_SAMPLES: f32 = 4.0;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum TrackStatus {
    /// Recently born, not yet confirmed by several frames.
    Tentative,
    /// Supported by the measurements.
    Confirmed,
    /// No recent support: the position is a prediction.
    Coasting,
}

/// One track's state after a frame, as reported to the outputs.
#[derive(Debug, Clone, PartialEq)]
pub struct TrackReport {
    pub id: u64,
    pub status: TrackStatus,
    pub seq: u64,
    /// State (emission) time, seconds from the stream start.
    pub t_s: f64,
    /// Arrival time of the frame centre at the array.
    pub t_frame_s: f64,
    /// Position (m) in 3-D mode; unit direction towards the source in direction mode.
    pub position: [f64; 3],
    /// Velocity (m/s), or rate of change of the direction (1/s).
    pub velocity: [f64; 3],
    pub pos_cov: [[f64; 3]; 3],
    pub vel_std: [f64; 3],
    pub model_probs: Vec<f32>,
    pub turn_rate_rad_s: f32,
    pub ess: f32,
    /// Fraction of informative pairs with a peak where the track predicts one (NaN when the
    /// frame had no informative pair, e.g. silence).
    pub support: f32,
    pub mode: TrackMode,
    /// Direction mode: the inverse range (1/m, at least 0) and its standard deviation.
    pub inv_range: Option<[f64; 2]>,
}

impl TrackReport {
    /// Direction mode: the range (m), where the inverse range is at least twice its standard
    /// deviation (near enough for the wavefront's curvature to measure it).
    pub fn range_m(&self) -> Option<f64> {
        self.inv_range
            .filter(|v| v[0] > 0.0 && v[0] >= 2.0 * v[1])
            .map(|v| 1.0 / v[0])
    }
}

/// What the birth search reads, borrowed field by field (so that the filter bank can be
/// borrowed mutably beside it while a GPU step runs).
macro_rules! birth_inputs {
    ($m:expr, $t_centre_s:expr) => {
        BirthInputs {
            // (Only while a slot is free: no birth is sought otherwise.)
            claims: if $m.tracks.len() < $m.max_tracks {
                $m.tracks
                    .iter()
                    .map(|t| {
                        let lag = ($t_centre_s - t.t_state_s) as f32;
                        let (pred, _, wide) =
                            track_tdoas(&$m.params, &$m.geo, &$m.meas, &t.est, lag);
                        (pred, wide)
                    })
                    .collect()
            } else {
                Vec::new()
            },
            geo: &$m.geo,
            pairs: &$m.pairs,
            meas: &$m.meas,
            params: &$m.params,
            bounds: $m.bounds,
            sample_rate_hz: $m.sample_rate_hz,
            detection_probability: $m.detection_probability,
            last_fix: $m.candidates.back().map(|c| c.fix.position),
        }
    };
}

struct Track {
    id: u64,
    slot: u32,
    born_seq: u64,
    t_state_s: f64,
    est: Estimate,
    last_support_s: f64,
    /// Informative time without support since the last supported frame.
    miss_s: f64,
    frames: u64,
    /// This frame's predicted TDOA for every pair and the gate within which a peak supports
    /// the track (see [`track_tdoas`]).
    claim: (Vec<f32>, f32),
    /// How long the track has predicted the same TDOAs as an older one (see
    /// [`DUPLICATE_AFTER_S`]).
    shared_s: f64,
}

/// A multilateration fix kept for births.
struct Candidate {
    seq: u64,
    t_s: f64,
    fix: Fix,
}

/// What the track manager needs to know besides its filter bank: the array, the pairs and
/// peaks of the measurement, the search volume, and its births and deletions.
#[derive(Debug, Clone)]
pub struct ManagerSettings {
    pub geometry: ArrayGeometry,
    /// Sensor pairs in the correlator's order.
    pub pairs: Vec<Pair>,
    pub peaks_per_pair: usize,
    /// Search volume (lower and upper corners, metres); births outside it are refused.
    pub bounds: Option<([f64; 3], [f64; 3])>,
    pub sample_rate_hz: f64,
    pub detection_probability: f32,
    /// Consecutive agreeing multilateration fixes needed to start a track.
    pub init_frames: usize,
    pub max_tracks: usize,
    /// A track with no supporting measurement for this long is deleted.
    pub delete_after_s: f64,
    /// Fastest expected source, m/s.
    pub max_speed_m_s: f64,
}

pub struct TrackManager {
    bank: Box<dyn ParticleFilter>,
    params: FilterParams,
    geo: ArrayGeometry,
    pairs: Vec<Pair>,
    sample_rate_hz: f64,
    detection_probability: f32,
    init_frames: usize,
    max_tracks: usize,
    delete_after_s: f64,
    max_speed_m_s: f64,
    bounds: Option<([f64; 3], [f64; 3])>,
    tracks: Vec<Track>,
    next_id: u64,
    candidates: VecDeque<Candidate>,
    /// |peak - prediction| of recent informative pairs near a track, seconds.
    residuals: ResidualWindow,
    /// TDOA noise in use: the configured floor or the online estimate, whichever is larger.
    sigma_s: f32,
    meas: TdoaMeasurement,
    steps: Vec<TrackStep>,
    est: Vec<Estimate>,
    /// Frames in which some pair was informative.
    pub informative_frames: u64,
    pub births: u64,
    pub deletions: u64,
    /// Track steps whose likelihood was tempered (β < 1).
    pub tempered_steps: u64,
    /// Filter steps launched ahead of their frame's measurement ([`Self::prepare`]), and of
    /// those the ones whose device built the measurement from the correlator's peaks.
    pub prepared_steps: u64,
    pub device_built_steps: u64,
    /// Wall time spent in the filter bank's steps, for the replay summary's split of the
    /// processing time.
    pub filter_wall: std::time::Duration,
}

/// Gaussian peak density (noise `sigma_s`) over the clutter density 1 / (2 max_tdoa).
fn pair_ratio(pair: &Pair, sigma_s: f32) -> f32 {
    (2.0 * pair.max_tdoa_s as f32) / (sigma_s * (std::f32::consts::TAU).sqrt())
}

/// (With the exponential of `fastmath`, which the GPU's own build of the measurement
/// evaluates the same way: kernels/pf.cu, live_pair.)
fn logistic(x: f32) -> f32 {
    1.0 / (1.0 + crate::math::fastmath::exp(-x))
}

impl TrackManager {
    pub fn new(settings: ManagerSettings, bank: Box<dyn ParticleFilter>) -> Self {
        let params = bank.params().clone();
        let s = settings;
        Self {
            meas: TdoaMeasurement::empty(0, s.pairs.len(), s.peaks_per_pair, params.tdoa_std_s),
            residuals: ResidualWindow::default(),
            sigma_s: params.tdoa_std_s,
            bounds: s.bounds,
            sample_rate_hz: s.sample_rate_hz,
            detection_probability: s.detection_probability,
            init_frames: s.init_frames,
            max_tracks: s.max_tracks.min(params.slots),
            delete_after_s: s.delete_after_s,
            max_speed_m_s: s.max_speed_m_s,
            tracks: Vec::new(),
            next_id: 1,
            candidates: VecDeque::new(),
            steps: Vec::new(),
            est: Vec::new(),
            informative_frames: 0,
            births: 0,
            deletions: 0,
            tempered_steps: 0,
            prepared_steps: 0,
            device_built_steps: 0,
            filter_wall: std::time::Duration::ZERO,
            bank,
            params,
            geo: s.geometry,
            pairs: s.pairs,
        }
    }

    pub fn backend(&self) -> &'static str {
        self.bank.backend()
    }

    pub fn params(&self) -> &FilterParams {
        &self.params
    }

    pub fn active_tracks(&self) -> usize {
        self.tracks.len()
    }

    /// The TDOA noise currently assumed, seconds.
    pub fn sigma_s(&self) -> f32 {
        self.sigma_s
    }

    /// Update the noise estimate from the residuals: 1.4826 × median |residual| (a robust
    /// standard deviation), between the configured floor and the ceiling.
    fn update_sigma(&mut self) {
        let floor = self.params.tdoa_std_s;
        if self.residuals.len() < 16 {
            self.sigma_s = floor;
            return;
        }
        let median = self.residuals.median();
        let ceiling = SIGMA_CEILING_SAMPLES / self.sample_rate_hz as f32;
        self.sigma_s = (1.4826 * median).clamp(floor, ceiling.max(floor));
    }

    /// Move every track to another backend, restarting its particles from the last estimate
    /// (mean, covariance and model probabilities). Used when the GPU fails mid-run.
    pub fn replace_bank(&mut self, mut bank: Box<dyn ParticleFilter>) -> Result<(), BackendError> {
        for t in &self.tracks {
            let init = TrackInit {
                slot: t.slot,
                frame: t.born_seq ^ 0x5EED_0000_0000,
                mean: t.est.mean,
                chol: cholesky6(&t.est.cov),
                speed_ball_m_s: 0.0,
                model_probs: t.est.model_probs.clone(),
                // Each particle keeps the inverse range it draws from the estimate.
                inv_range_max: -1.0,
            };
            bank.init_track(&init)?;
        }
        self.bank = bank;
        Ok(())
    }

    /// Fill the flattened measurement from a frame's peaks. Returns the number of informative
    /// pairs.
    fn build_measurement(&mut self, seq: u64, gcc: &GccFrame, pair_ok: &[bool]) -> usize {
        let k = self.meas.peaks_per_pair;
        let sigma = self.sigma_s;
        let fs = self.sample_rate_hz as f32;
        let m = &mut self.meas;
        m.frame = seq;
        m.sigma_s = sigma;
        let mut informative = 0;
        for (pi, pair) in self.pairs.iter().enumerate() {
            let peaks = gcc.pair_peaks(pi, k);
            let base = pi * k;
            m.amp[base..base + k].fill(0.0);
            m.floor[pi] = 1.0;
            if !pair_ok.get(pi).copied().unwrap_or(false) {
                continue;
            }
            // Detection probability scaled by how clearly the best peak stands out, and each
            // peak's share by its height and clarity.
            let mut share = [0.0f32; crate::dsp::gcc::MAX_PEAKS];
            let mut best_q = 0.0f32;
            let mut total = 0.0f32;
            for (j, pk) in peaks.iter().enumerate() {
                if !pk.is_some() {
                    continue;
                }
                let q = logistic((pk.quality - QUALITY_MID) / QUALITY_WIDTH);
                best_q = best_q.max(q);
                share[j] = pk.value.max(0.0) * q;
                total += share[j];
            }
            if !(total > 0.0) {
                continue;
            }
            let pd = self.detection_probability * best_q;
            let ratio = pair_ratio(pair, sigma);
            m.floor[pi] = 1.0 - pd;
            for (j, pk) in peaks.iter().enumerate() {
                m.tdoa_s[base + j] = pk.lag_samples / fs;
                m.amp[base + j] = pd * share[j] / total * ratio;
            }
            if best_q > 0.5 {
                informative += 1;
            }
        }
        informative
    }

    /// Each track's step to the frame centred at `t_centre_s` (into `self.steps`).
    fn plan_steps(&mut self, t_centre_s: f64) {
        let c = self.geo.speed_of_sound_m_s;
        let three_d = self.params.mode == TrackMode::ThreeD;
        self.steps.clear();
        for t in &self.tracks {
            let lag = if three_d {
                // Predict where the source is now to time the step.
                let pos = Vector3::new(t.est.mean[0], t.est.mean[1], t.est.mean[2]);
                let vel = Vector3::new(t.est.mean[3], t.est.mean[4], t.est.mean[5]);
                let guess = t_centre_s - self.geo.mean_range_m(&pos) / c;
                let pred = pos + vel * (guess - t.t_state_s);
                self.geo.mean_range_m(&pred) / c
            } else {
                0.0
            };
            let dt = (t_centre_s - lag - t.t_state_s).max(1e-6);
            self.steps.push(TrackStep {
                slot: t.slot,
                dt_s: dt as f32,
                lag_s: lag as f32,
            });
        }
    }

    /// Between frames: launch the filter work the last step left for now (see
    /// [`ParticleFilter::flush`]).
    pub fn between_frames(&mut self) {
        let start = std::time::Instant::now();
        self.bank.flush();
        self.filter_wall += start.elapsed();
    }

    /// Launch the filter step of the frame `seq` centred at `t_centre_s` before its GCC result
    /// is in (see [`ParticleFilter::prepare_step`]): a GPU filter then predicts while the frame
    /// is correlated. With `peaks` (where the correlator's device writes them), the filter's
    /// device builds the measurement itself from them and the frame's pair checks `pair_ok`
    /// (as [`Self::step`] will get them); without, [`Self::step`] for the same frame supplies
    /// it. Returns whether the filter took it.
    pub fn prepare(
        &mut self,
        seq: u64,
        t_centre_s: f64,
        peaks: Option<crate::dsp::gcc::DevicePeaks>,
        pair_ok: &[bool],
    ) -> Result<bool, BackendError> {
        if self.tracks.is_empty() {
            return Ok(false);
        }
        let start = std::time::Instant::now();
        self.plan_steps(t_centre_s);
        // What `build_measurement` will set: the frame and the noise.
        self.meas.frame = seq;
        self.meas.sigma_s = self.sigma_s;
        let source = peaks.map(|peaks| crate::track::LiveSource {
            peaks,
            sample_rate_hz: self.sample_rate_hz as f32,
            detection_probability: self.detection_probability,
            ratio: self
                .pairs
                .iter()
                .map(|p| pair_ratio(p, self.sigma_s))
                .collect(),
            pair_ok: pair_ok.to_vec(),
        });
        let took = self
            .bank
            .prepare_step(&self.meas, &self.steps, source.as_ref());
        if let Ok(true) = took {
            self.prepared_steps += 1;
            self.device_built_steps += u64::from(source.is_some());
        }
        self.filter_wall += start.elapsed();
        took
    }

    /// Process one frame's GCC result. `pair_ok[p]` is false for pairs with a bad channel.
    pub fn step(
        &mut self,
        seq: u64,
        t_centre_s: f64,
        gcc: &GccFrame,
        pair_ok: &[bool],
    ) -> Result<Vec<TrackReport>, BackendError> {
        let informative = self.build_measurement(seq, gcc, pair_ok);
        if informative > 0 {
            self.informative_frames += 1;
        }
        let three_d = self.params.mode == TrackMode::ThreeD;
        self.plan_steps(t_centre_s);
        let l = self.params.n_models();
        self.est.resize_with(self.steps.len(), || Estimate::new(l));
        // The birth search needs only this frame's measurement: a GPU filter runs it while the
        // device computes the step (tracks are only ever removed below, so a frame that can
        // have a birth after the step could before it).
        let want_birth = self.tracks.len() < self.max_tracks;
        let mut early_fix = None;
        if !self.steps.is_empty() {
            let start = std::time::Instant::now();
            let inputs = birth_inputs!(self, t_centre_s);
            let mut meanwhile = || {
                if want_birth {
                    early_fix = Some(birth_fix(&inputs));
                }
            };
            self.bank
                .step_overlapped(&self.meas, &self.steps, &mut self.est, &mut meanwhile)?;
            self.filter_wall += start.elapsed();
        }

        let mut reports = Vec::with_capacity(self.tracks.len() + 1);
        let spread_limit = spread_limit_m(&self.geo);
        let sigma = f64::from(self.sigma_s);
        let mut dead = Vec::new();
        for (i, t) in self.tracks.iter_mut().enumerate() {
            let step = self.steps[i];
            t.t_state_s = t_centre_s - f64::from(step.lag_s);
            t.est = self.est[i].clone();
            if t.est.temper < 1.0 {
                self.tempered_steps += 1;
                log::debug!(
                    "track {} at {:.2} s: tempered update, beta {}, ess {:.0}, evidence {:.1}, sigma {:.2} samples",
                    t.id,
                    t_centre_s,
                    t.est.temper,
                    t.est.ess,
                    t.est.log_evidence,
                    self.sigma_s * self.sample_rate_hz as f32
                );
            }
            // (In direction mode the estimate keeps its norm, 1 + the inverse range, for the
            // track's predicted TDOAs; its report gives the unit direction: see `report`.)
            t.frames += 1;
            let mut res = Vec::new();
            let (pred, gate, wide) =
                track_tdoas(&self.params, &self.geo, &self.meas, &t.est, step.lag_s);
            let support = support(&self.meas, &pred, gate, wide, &mut res);
            t.claim = (pred, gate);
            for r in res {
                self.residuals.push(r);
            }
            // A degenerate step (no particle could explain the frame: in practice every one
            // outside the bounds) resets the weights and leaves the cloud where it was, so it
            // supports nothing, whatever the estimate's TDOAs match: far from a compact array a
            // point at the wrong range, even above the surface, matches the same TDOAs, and
            // such a track would coast outside the bounds for good.
            let degenerate = !t.est.log_evidence.is_finite();
            match support {
                Some(s) if s >= 0.5 && !degenerate => {
                    t.last_support_s = t.t_state_s;
                    t.miss_s = 0.0;
                }
                Some(_) => t.miss_s += f64::from(step.dt_s),
                None if degenerate => t.miss_s += f64::from(step.dt_s),
                None => {}
            }
            let pos_sd = (t.est.cov[0][0] + t.est.cov[1][1] + t.est.cov[2][2])
                .max(0.0)
                .sqrt();
            let lost = !t.est.log_evidence.is_finite() && t.est.mean.iter().any(|v| !v.is_finite());
            let why = if lost {
                Some("its estimate is not finite".to_string())
            } else if t.miss_s > self.delete_after_s {
                Some(format!("no support for {:.1} s", t.miss_s))
            } else if three_d
                && pos_sd > spread_limit
                && pos_sd > DIVERGED_SPREADS * tdoa_spread(&self.geo, &self.pairs, &t.est, sigma)
            {
                Some(format!(
                    "its position spread {pos_sd:.1} m exceeds twice the array's aperture and {DIVERGED_SPREADS} times what the TDOAs leave there"
                ))
            } else {
                None
            };
            if let Some(why) = why {
                dead.push((i, why));
                continue;
            }
            let status = if t.frames < 2 * self.init_frames as u64 {
                TrackStatus::Tentative
            } else if t.t_state_s - t.last_support_s <= COAST_AFTER_S {
                TrackStatus::Confirmed
            } else {
                TrackStatus::Coasting
            };
            reports.push(report(
                t,
                status,
                seq,
                t_centre_s,
                support,
                Kinematics::of(&self.params),
            ));
        }
        self.find_duplicates(&mut dead, &mut reports);
        for (i, why) in dead.iter().rev() {
            let t = self.tracks.remove(*i);
            log::info!("track {} deleted at {:.2} s ({why})", t.id, t_centre_s);
            self.deletions += 1;
        }

        if self.tracks.is_empty() {
            self.residuals.clear();
        }
        self.update_sigma();
        if self.tracks.len() < self.max_tracks {
            if let Some(r) = self.try_birth(seq, t_centre_s, early_fix)? {
                reports.push(r);
            }
        }
        Ok(reports)
    }

    /// Tracks that follow the same source as an older track: each frame in which a track
    /// predicts every informative pair's TDOA within the gate of an older live track counts
    /// towards [`DUPLICATE_AFTER_S`], after which the younger is deleted (added to `dead`, kept
    /// in index order, and its report of this frame withdrawn). A second track can be born
    /// beside a first from peaks that the first does not claim (a reflection, or the first
    /// lagging its source) and then slide onto the first's source.
    fn find_duplicates(&mut self, dead: &mut Vec<(usize, String)>, reports: &mut Vec<TrackReport>) {
        let informative: Vec<usize> = (0..self.pairs.len())
            .filter(|&p| informative_pair(&self.meas, p))
            .collect();
        for j in 1..self.tracks.len() {
            if dead.iter().any(|d| d.0 == j) {
                continue;
            }
            let tj = &self.tracks[j];
            let older = (0..j)
                .filter(|i| !dead.iter().any(|d| d.0 == *i))
                .find(|&i| {
                    let ti = &self.tracks[i];
                    let gate = ti.claim.1.max(tj.claim.1);
                    let n = self.pairs.len();
                    !informative.is_empty()
                        && ti.claim.0.len() == n
                        && tj.claim.0.len() == n
                        && informative
                            .iter()
                            .all(|&p| (ti.claim.0[p] - tj.claim.0[p]).abs() <= gate)
                });
            let dt = f64::from(self.steps[j].dt_s);
            let tj = &mut self.tracks[j];
            match older {
                Some(_) => tj.shared_s += dt,
                // (A frame without an informative pair says nothing either way.)
                None if informative.is_empty() => {}
                None => tj.shared_s = 0.0,
            }
            if let Some(i) = older.filter(|_| tj.shared_s >= DUPLICATE_AFTER_S) {
                let id = tj.id;
                reports.retain(|r| r.id != id);
                dead.push((
                    j,
                    format!(
                        "it has followed the same source as track {} for {:.1} s",
                        self.tracks[i].id, self.tracks[j].shared_s
                    ),
                ));
            }
        }
        dead.sort_by_key(|d| d.0);
    }

    /// Start a track when the last `init_frames` fixes (this frame's: `fix`, when it was taken
    /// while the filter step ran, else taken here) agree with one another and with no existing
    /// track.
    fn try_birth(
        &mut self,
        seq: u64,
        t_centre_s: f64,
        fix: Option<(Option<Fix>, usize)>,
    ) -> Result<Option<TrackReport>, BackendError> {
        let three_d = self.params.mode == TrackMode::ThreeD;
        let (fix, n_obs) = match fix {
            Some(f) => f,
            None => birth_fix(&birth_inputs!(self, t_centre_s)),
        };
        let Some(fix) = fix.filter(|f| 2 * f.inliers > n_obs) else {
            self.candidates.clear();
            return Ok(None);
        };
        // Drop fixes that are not from the frames just before this one.
        while self
            .candidates
            .back()
            .is_some_and(|c| seq.saturating_sub(c.seq) > 2)
        {
            self.candidates.clear();
        }
        let t_fix = t_centre_s
            - if three_d {
                self.geo.mean_range_m(&fix.position) / self.geo.speed_of_sound_m_s
            } else {
                0.0
            };
        self.candidates.push_back(Candidate {
            seq,
            t_s: t_fix,
            fix,
        });
        while self.candidates.len() > self.init_frames {
            self.candidates.pop_front();
        }
        if self.candidates.len() < self.init_frames {
            return Ok(None);
        }
        // Consecutive fixes must agree to within what the source can move plus their spread.
        let aperture = self.geo.aperture_m();
        let slack = if three_d { 0.05 * aperture } else { 0.1 };
        let speed = if three_d { self.max_speed_m_s } else { 1.0 };
        let agree = self
            .candidates
            .iter()
            .zip(self.candidates.iter().skip(1))
            .all(|(a, b)| {
                let d = (a.fix.position - b.fix.position).norm();
                let spread = (a.fix.covariance.trace() + b.fix.covariance.trace()).sqrt();
                d <= speed * (b.t_s - a.t_s).abs() + 3.0 * spread + slack
            });
        if !agree {
            return Ok(None);
        }
        let Some(last) = self.candidates.back().map(|c| c.fix.clone()) else {
            return Ok(None);
        };
        // Not a second copy of a track we already have.
        if self.tracks.iter().any(|t| {
            let at = Vector3::new(t.est.mean[0], t.est.mean[1], t.est.mean[2]);
            // (A direction's estimate is scaled by 1 + its inverse range; the fix is a unit.)
            let at = if three_d {
                at
            } else {
                at / at.norm().max(1e-12)
            };
            (at - last.position).norm() < 3.0 * slack.max(0.05)
        }) {
            return Ok(None);
        }
        let Some(slot) =
            (0..self.params.slots as u32).find(|s| self.tracks.iter().all(|t| t.slot != *s))
        else {
            return Ok(None);
        };
        // Position prior: the fix's covariance, widened to cover the scatter of the fixes.
        let scatter = self
            .candidates
            .iter()
            .map(|c| (c.fix.position - last.position).norm_squared())
            .sum::<f64>()
            / self.candidates.len() as f64;
        let fix_cov = last.covariance * 4.0;
        // The fix's covariance is at a first fix's conservative noise (fix_sigma_s, at least
        // two samples). Far from a compact array that makes its range axis metres long: the
        // `tetra` preset at 48 kHz had a prior spread of 7 m against a deletion limit of 4 m,
        // and every track was deleted at its first update (52 born, 51 deleted in 20 s). A
        // prior the deletion rule would not let live is taken at the tracker's current TDOA
        // noise instead (never wider than the fix's).
        let fix_cov = if three_d && fix_cov.trace() > spread_limit_m(&self.geo).powi(2) {
            let ratio = f64::from(self.sigma_s) / fix_sigma_s(&self.params, self.sample_rate_hz);
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
        let l = self.params.n_models();
        let init = TrackInit {
            slot,
            frame: seq,
            mean: [
                last.position.x,
                last.position.y,
                last.position.z,
                0.0,
                0.0,
                0.0,
            ],
            chol,
            // Directions: a velocity over the range (curved wavefronts, scaled by each
            // particle's inverse range), or a rate on the unit sphere (plane waves).
            speed_ball_m_s: if Kinematics::of(&self.params) == Kinematics::Plane {
                0.5
            } else {
                self.max_speed_m_s
            },
            model_probs: vec![1.0 / l as f32; l],
            inv_range_max: self.params.inv_range_max,
        };
        self.bank.init_track(&init)?;
        let id = self.next_id;
        self.next_id += 1;
        self.births += 1;
        let mut est = Estimate::new(l);
        est.mean = init.mean;
        for r in 0..3 {
            for c in 0..3 {
                est.cov[r][c] = pcov[(r, c)];
            }
        }
        // Per-axis variance of a uniformly random direction with speed uniform in [0, max].
        // Curved wavefronts scale it by the particles' inverse ranges (mean square ρ_max² / 3).
        let ball_scale = if Kinematics::of(&self.params) == Kinematics::Curved {
            f64::from(init.inv_range_max) / 3f64.sqrt()
        } else {
            1.0
        };
        let ball_var = (init.speed_ball_m_s * ball_scale).powi(2) / 9.0;
        for a in 3..6 {
            est.cov[a][a] = ball_var;
        }
        est.model_probs = init.model_probs.clone();
        est.ess = self.params.particles as f32;
        let t_state = self.candidates.back().map(|c| c.t_s).unwrap_or(t_centre_s);
        log::info!(
            "track {id} born at {:.2} s at [{:.2}, {:.2}, {:.2}] from {} agreeing fixes",
            t_centre_s,
            last.position.x,
            last.position.y,
            last.position.z,
            self.candidates.len()
        );
        let track = Track {
            id,
            slot,
            born_seq: seq,
            t_state_s: t_state,
            est,
            last_support_s: t_state,
            miss_s: 0.0,
            frames: 0,
            claim: (Vec::new(), 0.0),
            shared_s: 0.0,
        };
        let r = report(
            &track,
            TrackStatus::Tentative,
            seq,
            t_centre_s,
            Some(1.0),
            Kinematics::of(&self.params),
        );
        self.tracks.push(track);
        self.candidates.clear();
        Ok(Some(r))
    }
}

/// What the birth search reads: the frame's measurement and the array.
struct BirthInputs<'a> {
    geo: &'a ArrayGeometry,
    pairs: &'a [Pair],
    meas: &'a TdoaMeasurement,
    params: &'a FilterParams,
    bounds: Option<([f64; 3], [f64; 3])>,
    sample_rate_hz: f64,
    detection_probability: f32,
    /// The last kept fix (a start point for the search).
    last_fix: Option<Vector3<f64>>,
    /// What the existing tracks claim: each one's predicted TDOA for every pair at this frame,
    /// and the gate around it (see [`track_tdoas`]). A birth is sought among the peaks that no
    /// track claims, so that a second source is found beside the first.
    claims: Vec<(Vec<f32>, f32)>,
}

/// The TDOA noise a first fix is solved with (and its covariance computed at): the tracker's
/// floor, but at least two samples, since timing noise of a few samples is normal for a first
/// fix and the robust loss handles the rest.
fn fix_sigma_s(params: &FilterParams, sample_rate_hz: f64) -> f64 {
    f64::from(params.tdoa_std_s).max(2.0 / sample_rate_hz)
}

/// A 3-D track has diverged, and is deleted, when its position spread (the root of its
/// covariance's trace) exceeds both this, twice the array's aperture (at least 2 m), and
/// DIVERGED_SPREADS times the spread that one frame's TDOAs leave at its position
/// ([`tdoa_spread`]).
fn spread_limit_m(geo: &ArrayGeometry) -> f64 {
    2.0 * geo.aperture_m().max(1.0)
}

/// See [`spread_limit_m`]. Near an array, one frame's spread is centimetres and the aperture
/// decides. Far from a compact array it is metres along the range: there a track that follows
/// its source keeps a range spread of several metres for seconds, and with the aperture alone
/// the `tetra` array (2 m) at 12-16 m deleted every newborn track at its first update (23
/// born and 22 deleted in 10 s).
const DIVERGED_SPREADS: f64 = 4.0;

/// A track that predicts the same TDOAs as an older one for this long is deleted as its
/// duplicate (see [`TrackManager::find_duplicates`]).
const DUPLICATE_AFTER_S: f64 = 0.5;

/// The position spread one frame's TDOAs (every pair, at the tracker's TDOA noise `sigma_s`)
/// leave at a track's estimated position; 0 where the geometry leaves a direction unobservable
/// there, or the estimate is not finite (the aperture alone then decides).
fn tdoa_spread(geo: &ArrayGeometry, pairs: &[Pair], est: &Estimate, sigma_s: f64) -> f64 {
    let p = Vector3::new(est.mean[0], est.mean[1], est.mean[2]);
    if !p.iter().all(|v| v.is_finite()) {
        return 0.0;
    }
    geo.tdoa_spread_m(pairs, &p, sigma_s).unwrap_or(0.0)
}

/// Multilaterate the best peak of each informative pair: the fix (if any) and how many pairs
/// it used. It reads only the measurement and the array, so it can run while a GPU computes
/// the filter step.
fn birth_fix(i: &BirthInputs) -> (Option<Fix>, usize) {
    let k = i.meas.peaks_per_pair;
    let sigma = fix_sigma_s(i.params, i.sample_rate_hz);
    let mut obs = Vec::new();
    for (pi, pair) in i.pairs.iter().enumerate() {
        // The peak with the largest weight, if the pair is informative.
        let base = pi * k;
        if i.meas.floor[pi] > 1.0 - 0.5 * i.detection_probability {
            continue;
        }
        let claimed = |j: usize| {
            let tdoa = i.meas.tdoa_s[base + j];
            i.claims
                .iter()
                .any(|(pred, gate)| (tdoa - pred[pi]).abs() <= *gate)
        };
        let (j, amp) = (0..k)
            .filter(|&j| !claimed(j))
            .map(|j| (j, i.meas.amp[base + j]))
            .fold((0, 0.0f32), |b, x| if x.1 > b.1 { x } else { b });
        if amp > 0.0 {
            obs.push(Obs {
                pair: *pair,
                tdoa_s: f64::from(i.meas.tdoa_s[base + j]),
            });
        }
    }
    let three_d = i.params.mode == TrackMode::ThreeD;
    let need = if three_d { 4 } else { 3 };
    let fix = if obs.len() < need.min(i.pairs.len()) {
        None
    } else if three_d {
        let extra: Vec<Vector3<f64>> = i.last_fix.into_iter().collect();
        // Timing noise of a few samples is normal for a first fix; the robust loss handles
        // the rest.
        multilat::locate(i.geo, &obs, sigma, i.bounds, &extra)
    } else {
        let hemisphere = match i.bounds {
            Some((lo, hi)) => {
                Vector3::new(lo[0] + hi[0], lo[1] + hi[1], lo[2] + hi[2]) * 0.5 - i.geo.centroid()
            }
            None => Vector3::z(),
        };
        multilat::direction(i.geo, &obs, sigma, hemisphere)
    };
    (fix, obs.len())
}

/// A track's predicted TDOA for every pair (`lag_s` after its state's time, see
/// [`predict_tdoas`]), the gate within which a peak supports it (4 σ plus its spread), and the
/// wide gate (at least 6 σ) of the noise estimate and of the birth search's claims.
fn track_tdoas(
    p: &FilterParams,
    geo: &ArrayGeometry,
    m: &TdoaMeasurement,
    est: &Estimate,
    lag_s: f32,
) -> (Vec<f32>, f32, f32) {
    let pos_sd = (est.cov[0][0] + est.cov[1][1] + est.cov[2][2])
        .max(0.0)
        .sqrt();
    let c = geo.speed_of_sound_m_s;
    let three_d = p.mode == TrackMode::ThreeD;
    let spread = if three_d {
        2.0 * pos_sd / c
    } else {
        // The direction's spread over the aperture, and the inverse range's over the
        // curvature term (ρ |d|² / 2 per sensor, |d| at most the aperture from the centroid).
        let d = direction_of(est);
        let a = geo.aperture_m();
        let tangent_sd = (d.cov[0][0] + d.cov[1][1] + d.cov[2][2]).max(0.0).sqrt();
        2.0 * (tangent_sd * a + d.inv_range_sd * 0.5 * a * a) / c
    } as f32;
    let gate = 4.0 * m.sigma_s + spread;
    let wide = (6.0 * m.sigma_s).max(gate);
    let state = [0, 1, 2, 3, 4, 5].map(|i| est.mean[i] as f32);
    let state = [
        state[0],
        state[1],
        state[2],
        state[3],
        state[4],
        state[5],
        est.turn_rate,
    ];
    let mut pred = vec![0.0f32; p.pairs.len()];
    predict_tdoas(
        p,
        &LikelihoodConsts::new(p, m.sigma_s),
        &state,
        lag_s,
        &mut pred,
    );
    (pred, gate, wide)
}

/// Whether pair `pi` tells anything this frame: its clutter floor (the weight of "none of its
/// peaks is the source") is at most one half. Support and the duplicate check count only these.
fn informative_pair(m: &TdoaMeasurement, pi: usize) -> bool {
    !(m.floor[pi] > 0.5)
}

/// The share of the frame's informative pairs with a peak within `gate` of a track's
/// predicted TDOA `pred` (see [`track_tdoas`]); the distance to the nearest peak of each pair
/// within `wide` goes to `residuals`.
fn support(
    m: &TdoaMeasurement,
    pred: &[f32],
    gate: f32,
    wide: f32,
    residuals: &mut Vec<f32>,
) -> Option<f32> {
    let k = m.peaks_per_pair;
    let mut informative = 0;
    let mut hits = 0;
    for (pi, pr) in pred.iter().enumerate() {
        if !informative_pair(m, pi) {
            continue;
        }
        informative += 1;
        let nearest = (0..k)
            .filter(|&j| m.amp[pi * k + j] > 0.0)
            .map(|j| (m.tdoa_s[pi * k + j] - pr).abs())
            .fold(f32::INFINITY, f32::min);
        if nearest <= gate {
            hits += 1;
        }
        if nearest <= wide {
            residuals.push(nearest);
        }
    }
    (informative > 0).then(|| hits as f32 / informative as f32)
}

fn report(
    t: &Track,
    status: TrackStatus,
    seq: u64,
    t_frame_s: f64,
    support: Option<f32>,
    kin: Kinematics,
) -> TrackReport {
    let mode = match kin {
        Kinematics::ThreeD => TrackMode::ThreeD,
        _ => TrackMode::Direction,
    };
    let e = &t.est;
    let mut pos_cov = [[0.0; 3]; 3];
    for r in 0..3 {
        for c in 0..3 {
            pos_cov[r][c] = e.cov[r][c];
        }
    }
    let mut position = [e.mean[0], e.mean[1], e.mean[2]];
    let mut velocity = [e.mean[3], e.mean[4], e.mean[5]];
    let mut vel_std = [3, 4, 5].map(|i| e.cov[i][i].max(0.0).sqrt());
    let mut inv_range = None;
    if mode == TrackMode::Direction {
        let d = direction_of(e);
        position = d.u;
        velocity = d.rate;
        vel_std = d.rate_std;
        pos_cov = d.cov;
        // (With plane waves there is no range to report.)
        inv_range = (kin == Kinematics::Curved).then(|| [(d.norm - 1.0).max(0.0), d.inv_range_sd]);
    }
    TrackReport {
        id: t.id,
        status,
        seq,
        t_s: t.t_state_s,
        t_frame_s,
        position,
        velocity,
        pos_cov,
        vel_std,
        model_probs: e.model_probs.clone(),
        turn_rate_rad_s: e.turn_rate,
        ess: e.ess,
        support: support.unwrap_or(f32::NAN),
        mode,
        inv_range,
    }
}

/// A direction-mode estimate as reported: its mean position p is the direction scaled by
/// 1 + the inverse range (see [`crate::track::likelihood::sensor_terms`]).
struct DirectionView {
    /// The unit direction p / |p|.
    u: [f64; 3],
    /// |p|.
    norm: f64,
    /// The direction's covariance: p's, in the plane tangent at u, over |p|².
    cov: [[f64; 3]; 3],
    /// The standard deviation of |p| (of the inverse range, 1/m).
    inv_range_sd: f64,
    /// The direction's rate of change (rad/s): the velocity's tangent part (the velocity
    /// slots hold the source's velocity over its range, or on the unit sphere for plane
    /// waves: see `models::advance`), and its standard deviations.
    rate: [f64; 3],
    rate_std: [f64; 3],
}

fn direction_of(e: &Estimate) -> DirectionView {
    let p = Vector3::new(e.mean[0], e.mean[1], e.mean[2]);
    let norm = p.norm().max(1e-12);
    let u = p / norm;
    let mut cov = Matrix3::zeros();
    for r in 0..3 {
        for c in 0..3 {
            cov[(r, c)] = e.cov[r][c];
        }
    }
    let proj = Matrix3::identity() - u * u.transpose();
    let tangent = proj * cov * proj / (norm * norm);
    let v = Vector3::new(e.mean[3], e.mean[4], e.mean[5]);
    let vcov = Matrix3::from_fn(|r, c| e.cov[3 + r][3 + c]);
    let rate = proj * v;
    let rate_cov = proj * vcov * proj;
    DirectionView {
        u: [u.x, u.y, u.z],
        norm,
        cov: std::array::from_fn(|r| std::array::from_fn(|c| tangent[(r, c)])),
        inv_range_sd: (u.transpose() * cov * u)[(0, 0)].max(0.0).sqrt(),
        rate: [rate.x, rate.y, rate.z],
        rate_std: std::array::from_fn(|i| rate_cov[(i, i)].max(0.0).sqrt()),
    }
}

/// Lower Cholesky factor of a 6×6 covariance, regularised so it always exists.
pub fn cholesky6(cov: &[[f64; 6]; 6]) -> [[f64; 6]; 6] {
    let mut m = Matrix6::<f64>::zeros();
    for r in 0..6 {
        for c in 0..6 {
            m[(r, c)] = 0.5 * (cov[r][c] + cov[c][r]);
        }
    }
    let scale = (0..6)
        .map(|i| m[(i, i)].abs())
        .fold(0.0, f64::max)
        .max(1e-12);
    let mut eps = 1e-9 * scale;
    for _ in 0..20 {
        if let Some(ch) = (m + Matrix6::identity() * eps).cholesky() {
            let l = ch.l();
            let mut out = [[0.0; 6]; 6];
            for r in 0..6 {
                for c in 0..6 {
                    out[r][c] = l[(r, c)];
                }
            }
            return out;
        }
        eps *= 10.0;
    }
    let mut out = [[0.0; 6]; 6];
    for (i, row) in out.iter_mut().enumerate() {
        row[i] = m[(i, i)].abs().sqrt();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A direction-mode estimate as reported: the unit direction, its covariance in the tangent
    /// plane over |p|², the inverse range and its spread from the radial part, and the rate of
    /// change of the direction: the tangent part of the velocity (the source's velocity over
    /// its range), without its radial part (the range's rate over the range).
    #[test]
    fn direction_estimates_are_reported_on_the_sphere() {
        let u = Vector3::new(0.6, 0.0, 0.8);
        let t1 = Vector3::new(0.0, 1.0, 0.0);
        let mut e = Estimate::new(1);
        let p = u * 1.25;
        let v = t1 * 0.5 + u * 0.3;
        e.mean = [p.x, p.y, p.z, v.x, v.y, v.z];
        // Variance 0.01 along u (the inverse range), 0.04 along t1; velocity likewise.
        let pc = u * u.transpose() * 0.01 + t1 * t1.transpose() * 0.04;
        for r in 0..3 {
            for c in 0..3 {
                e.cov[r][c] = pc[(r, c)];
                e.cov[3 + r][3 + c] = pc[(r, c)];
            }
        }
        let d = direction_of(&e);
        assert!((Vector3::from(d.u) - u).norm() < 1e-12);
        assert!((d.norm - 1.25).abs() < 1e-12);
        assert!((d.inv_range_sd - 0.1).abs() < 1e-12);
        let cov = Matrix3::from_fn(|r, c| d.cov[r][c]);
        assert!((u.transpose() * cov * u)[(0, 0)].abs() < 1e-15);
        assert!(((t1.transpose() * cov * t1)[(0, 0)] - 0.04 / 1.5625).abs() < 1e-12);
        assert!((Vector3::from(d.rate) - t1 * 0.5).norm() < 1e-12);
        assert!((d.rate_std[1] - 0.2).abs() < 1e-12);
        // (Standard deviations: square roots of rounding-level variances.)
        assert!(
            d.rate_std[0] < 1e-7 && d.rate_std[2] < 1e-7,
            "{:?}",
            d.rate_std
        );
    }

    /// The window's median is the value a selection over the last RESIDUAL_WINDOW residuals
    /// gives, bit for bit, through fills, evictions, repeated values and clears.
    #[test]
    fn residual_window_median_matches_a_selection() {
        let mut rng =
            crate::rng::philox::PhiloxStream::new(11, 0, crate::rng::philox::Stream::Simulate);
        let mut next = || (u64::from(rng.next_u32()) << 32) | u64::from(rng.next_u32());
        let mut w = ResidualWindow::default();
        let mut all: Vec<f32> = Vec::new();
        for i in 0..3000 {
            if i == 1700 {
                w.clear();
                all.clear();
            }
            let x = next();
            // Coarse values (many repeats), fine values, and now and then an infinity or NaN.
            let r = match x % 50 {
                0 => f32::INFINITY,
                1 => f32::NAN,
                k if k < 25 => (x >> 40) as f32 % 7.0 * 1e-5,
                _ => (x >> 40) as f32 * 1e-12,
            };
            w.push(r);
            all.push(r);
            let last = &all[all.len().saturating_sub(RESIDUAL_WINDOW)..];
            assert_eq!(w.len(), last.len());
            let mut v = last.to_vec();
            let mid = v.len() / 2;
            let (_, m, _) = v.select_nth_unstable_by(mid, f32::total_cmp);
            assert_eq!(w.median().to_bits(), m.to_bits(), "residual {i}");
        }
    }
}
