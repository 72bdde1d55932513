//! Track management, independent of the backend. Each frame, in order:
//!
//! 1. the frame's peaks become the flattened measurement (every pair, its top peaks);
//! 2. each track predicts its TDOAs and their spread ([`gate`](crate::track::gate)), and the
//!    peaks are assigned to tracks pair by pair, confirmed tracks first and tentative ones on
//!    what is left, by global nearest neighbour ([`associate`](crate::track::associate::gnn));
//! 3. each track's filter steps on its own view of the frame: every peak but those assigned
//!    to other tracks;
//! 4. a frame is a hit for a track when its gates held assigned peaks in enough of the
//!    informative pairs; M-of-N logic over scans ([`logic`](crate::track::logic::m_of_n)) confirms
//!    and deletes; tracks also go when they diverge, stay silent too long or follow an older
//!    track's source;
//! 5. a birth is sought every frame among the peaks no confirmed track explains
//!    ([`birth`](crate::track::initiate::multilat)); with every slot taken, the weakest tentative track
//!    gives way;
//! 6. the tracks are reported, and when no track is confirmed the frame's reason is counted.
//!
//! Time: truth and reports use the emission time. A frame centred at arrival time `t_c` sees the
//! source as it was `lag = mean range / c` earlier, so a track's state time is `t_c - lag` (the
//! likelihood corrects each pair for its own emission time; see `likelihood.rs`).

use std::collections::BTreeMap;

use nalgebra::Vector3;

use crate::dsp::coherence::{coherence_of_peak, overlap_table};
use crate::dsp::crosstalk;
use crate::dsp::gcc::{GccFrame, Peak};
use crate::dsp::geometry::{ArrayGeometry, Pair};
use crate::dsp::multilat::{Obs, refine};
use crate::error::BackendError;
use crate::math::linalg::cholesky6;
use crate::track::associate::gnn::assign_pair;
use crate::track::associate::mfa::lookahead::{
    HeldFrame, Lookahead, PairContext, WindowRow, assign_pair_over_window,
};
use crate::track::gate::{Gates, Rates, gates, rates};
use crate::track::initiate::mirror::{MirrorVerdict, Twin, mirrored_init};
use crate::track::initiate::multilat::{
    BirthFix, BirthInputs, BirthSearch, DIVERGED_SPREADS, NoBirth, birth_fix, spread_limit_m,
};
use crate::track::logic::edge::{EdgeClock, beyond, start_of};
use crate::track::logic::m_of_n::{
    ConfirmRule, DeleteRule, MissWindow, ScanClock, ScanHistory, TrackLogic, Verdict,
};
use crate::track::measure::noise::{ResidualWindow, tdoa_noise_s};
use crate::track::motion::models::Kinematics;
use crate::track::report::{EndReason, TrackEnd, report};
use crate::track::{
    Estimate, FilterBank, FilterParams, TdoaMeasurement, TrackInit, TrackMode, TrackStep,
};

pub use crate::track::report::{TrackReport, TrackStatus};

/// Peaks whose clarity (height over the curve's noise level, in its spreads) is around this
/// value are as likely noise as signal: the top of ~1000 lags of pure noise sits near 3.3.
pub const QUALITY_MID: f32 = 4.0;
/// What the birth search reads of the manager's state (taken field by field, so that a caller
/// can hold the filter bank mutably beside it).
fn birth_inputs<'a>(
    geo: &'a ArrayGeometry,
    s: &'a ManagerSettings,
    meas: &'a TdoaMeasurement,
    params: &'a FilterParams,
    last_fix: Option<Vector3<f64>>,
    explained: &'a [bool],
) -> BirthInputs<'a> {
    BirthInputs {
        geo,
        pairs: &s.pairs,
        meas,
        params,
        bounds: s.bounds,
        sample_rate_hz: s.sample_rate_hz,
        detection_probability: s.detection_probability,
        last_fix,
        explained,
    }
}

/// How to start a slot's particles again from estimate `e` (mean, covariance and model
/// probabilities), keyed by `frame`.
fn restart(slot: u32, frame: u64, e: &Estimate) -> TrackInit {
    TrackInit {
        slot,
        frame,
        mean: e.mean,
        chol: cholesky6(&e.cov),
        speed_ball_m_s: 0.0,
        model_probs: e.model_probs.clone(),
        // Each particle keeps the inverse range it draws from the estimate.
        inv_range_max: -1.0,
    }
}

/// A track's step, and its mirror twin's beside it (the same step in the twin's slot).
fn with_twin(step: TrackStep, twin: Option<&Twin>) -> Vec<TrackStep> {
    let mut steps = vec![step];
    steps.extend(twin.map(|w| TrackStep {
        slot: w.slot,
        ..step
    }));
    steps
}

/// Step a track into `est` on `view`, with its twin (if any) in the same call, so that a device
/// steps both in one launch; `meanwhile` runs while a device computes (see
/// [`FilterBank::step_overlapped`]).
fn step_track(
    bank: &mut dyn FilterBank,
    view: &TdoaMeasurement,
    step: TrackStep,
    est: &mut Estimate,
    twin: Option<&mut Twin>,
    meanwhile: &mut dyn FnMut(),
) -> Result<(), BackendError> {
    let steps = with_twin(step, twin.as_deref());
    let Some(w) = twin else {
        return bank
            .step_overlapped(view, &steps, std::slice::from_mut(est), meanwhile)
            .map(|_| ());
    };
    // (Moved out and back: an empty estimate holds no allocation.)
    let mut out = [
        std::mem::replace(est, Estimate::new(0)),
        std::mem::replace(&mut w.est, Estimate::new(0)),
    ];
    let stepped = bank.step_overlapped(view, &steps, &mut out, meanwhile);
    let [a, b] = out;
    (*est, w.est) = (a, b);
    stepped.map(|_| ())
}

/// The z-score midpoint for a pair whose physical bound is `max_lag_samples`: [`QUALITY_MID`],
/// or [`PROMINENCE_SHARE`] of the largest z-score its lags allow (a single spike among n lags
/// scores (n - 1) / sqrt(n)), whichever is lower.
pub fn prominence_mid(max_lag_samples: f64) -> f32 {
    let n = 2.0 * max_lag_samples.max(0.0).floor() + 1.0;
    QUALITY_MID.min(PROMINENCE_SHARE * ((n - 1.0) / n.sqrt()) as f32)
}

/// See [`prominence_mid`].
pub const PROMINENCE_SHARE: f32 = 0.75;

/// Width of the logistic ramp from "noise" to "signal" around [`QUALITY_MID`].
pub const QUALITY_WIDTH: f32 = 0.5;
/// A confirmed track without a hit for this long is reported as coasting.
pub const COAST_AFTER_S: f64 = 0.5;
/// A turning line array's track this close to its axis (degrees) may go on to either side:
/// its side is open again (see [`TrackManager::rearm_twins`]).
pub const ENDFIRE_DEG: f64 = 2.0;
/// A track that predicts the same TDOAs as an older one for this long is deleted as its
/// duplicate (see [`TrackManager::find_duplicates`]).
const DUPLICATE_AFTER_S: f64 = 0.5;

/// What the track manager needs to know besides its filter bank: the array, the pairs and
/// peaks of the measurement, the search volume, and its births, confirmation and deletion.
#[derive(Debug, Clone)]
pub struct ManagerSettings {
    pub geometry: ArrayGeometry,
    /// Sensor pairs in the correlator's order.
    pub pairs: Vec<Pair>,
    pub peaks_per_pair: usize,
    /// Search volume (lower and upper corners, metres); births outside it are refused.
    pub bounds: Option<([f64; 3], [f64; 3])>,
    pub sample_rate_hz: f64,
    /// Seconds between frames.
    pub hop_s: f64,
    pub detection_probability: f32,
    /// Consecutive agreeing multilateration fixes needed to propose a track.
    pub init_frames: usize,
    pub max_tracks: usize,
    /// A track with no hit for this long (silence, or a lost source) is deleted.
    pub delete_after_s: f64,
    /// Fastest expected source, m/s.
    pub max_speed_m_s: f64,
    /// A gate's half-width, in its spreads.
    pub gate_sigmas: f32,
    /// A frame is a hit for a track when its gates hold assigned peaks in at least this share
    /// of the informative pairs.
    pub hit_fraction: f32,
    /// M-of-N confirmation and deletion over scans of `scan_s`.
    pub confirm_m: usize,
    pub confirm_n: usize,
    pub confirm_rule: ConfirmRule,
    pub scan_s: f64,
    /// A confirmed track is deleted when `delete_fraction` of its informative frames of the
    /// last `delete_window_s` were misses (or by the seed's scan rule).
    pub delete_rule: DeleteRule,
    pub delete_window_s: f64,
    pub delete_fraction: f64,
    /// A turning array (`array.heading_input`): tracks are turned with it, and in line mode
    /// with a plane each gets a mirror twin ([`crate::track::initiate::mirror`]).
    pub turning: bool,
    /// The spread of a GCC curve's value under noise ([`crate::dsp::gcc::phat_noise_level`]):
    /// a peak's clarity is its height over it. `None`: the clarity is the correlator's z-score
    /// over the pair's physical lags.
    pub peak_noise: Option<f32>,
    /// The analysis window with PHAT weighting (empty without): received levels come from
    /// peak heights through it ([`crate::dsp::coherence`]).
    pub phat_window: Vec<f32>,
    /// Multi-frame assignment over this many lists (the tracks and S - 1 frames); None:
    /// global nearest neighbour frame by frame.
    pub mfa_lists: Option<usize>,
}

struct Track {
    id: u64,
    slot: u32,
    born_seq: u64,
    t_state_s: f64,
    est: Estimate,
    /// State time of the last frame that was a hit.
    last_hit_s: f64,
    frames: u64,
    /// This frame's gates (from the estimate predicted to the frame), and per pair the index
    /// of the peak assigned to the track.
    gates: Gates,
    /// Multi-frame assignment: how each pair's TDOA moves over the next frames.
    rates: Rates,
    assigned: Vec<Option<usize>>,
    clock: ScanClock,
    history: ScanHistory,
    misses: MissWindow,
    /// How long the track has predicted the same TDOAs as an older one (see
    /// [`DUPLICATE_AFTER_S`]).
    shared_s: f64,
    /// How long the track's own peaks have put its source outside the search volume.
    edge: EdgeClock,
    /// A turning array: its heading at the track's state (degrees), which the next step
    /// turns the particles from.
    heading_deg: Option<f64>,
    /// A turning line array: the track's mirror hypothesis, until the turn decides.
    twin: Option<Twin>,
    /// Whether the twin's verdict is in (without a twin, the mirror stays possible).
    side_decided: bool,
}

impl Track {
    fn confirmed(&self) -> bool {
        self.history.confirmed
    }
}

pub struct TrackManager {
    bank: Box<dyn FilterBank>,
    params: FilterParams,
    s: ManagerSettings,
    geo: ArrayGeometry,
    logic: TrackLogic,
    frames_per_scan: usize,
    /// The miss window of confirmed tracks: its frames, and the misses that delete.
    window_frames: usize,
    window_misses: usize,
    tracks: Vec<Track>,
    next_id: u64,
    births_search: BirthSearch,
    /// |assigned peak - prediction| of recent frames, seconds.
    residuals: ResidualWindow,
    /// TDOA noise in use: the configured floor or the online estimate, whichever is larger.
    sigma_s: f32,
    meas: TdoaMeasurement,
    /// A track's own view of the frame (every peak but those assigned to other tracks).
    view: TdoaMeasurement,
    steps: Vec<TrackStep>,
    est: Vec<Estimate>,
    /// Frames in which some pair was informative.
    pub informative_frames: u64,
    pub births: u64,
    pub deletions: u64,
    /// The tracks deleted in the last frame (for the outputs' `deleted` messages).
    pub ended: Vec<TrackEnd>,
    /// Per (pair, peak): the GCC-PHAT peak's height and lag (samples); height 0 where none is
    /// usable. Turned into a coherence only for the peaks a track is given.
    peak_value: Vec<(f32, f32)>,
    /// The analysis window's overlap with itself per whole lag up to the largest pair's
    /// ([`crate::dsp::coherence::overlap_table`]); empty without PHAT weighting.
    overlap: Vec<f64>,
    /// Track steps whose likelihood was tempered (β < 1).
    pub tempered_steps: u64,
    /// Filter steps launched ahead of their frame's measurement ([`Self::prepare`]), and of
    /// those the ones whose device built the measurement from the correlator's peaks.
    pub prepared_steps: u64,
    pub device_built_steps: u64,
    /// Frames without a confirmed track, by why (see [`Self::no_track_reason`]).
    pub no_track: BTreeMap<&'static str, u64>,
    /// Why the last frame had no confirmed track (None when it had one).
    pub no_track_now: Option<&'static str>,
    /// Why this frame's birth search proposed no track.
    birth_outcome: Option<NoBirth>,
    /// Wall time spent in the filter bank's steps, for the replay summary's split of the
    /// processing time.
    pub filter_wall: std::time::Duration,
    /// A turning array: this frame's heading (the last one known).
    heading_deg: Option<f64>,
    /// Frames of a turning array that came without a heading (the last one was kept).
    pub heading_missing_frames: u64,
    /// Mirror twins decided (the track's side, the twin's), and births that found no slot for
    /// a twin.
    pub mirrors_kept: u64,
    pub mirrors_taken: u64,
    pub twins_without_slot: u64,
    /// Per pair: flagged as crosstalk, its peaks at lag zero ignored (see
    /// [`crate::dsp::crosstalk`]).
    zero_masked: Vec<bool>,
    /// Multi-frame assignment: the frames held back for the window.
    lookahead: Option<Lookahead>,
    /// The frame (sequence number and centre time) whose reports the last step returned; None
    /// while the window fills.
    committed: Option<(u64, f64)>,
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

/// Whether pair `pi` tells anything this frame: its clutter floor (the weight of "none of its
/// peaks is the source") is at most one half.
fn informative_pair(m: &TdoaMeasurement, pi: usize) -> bool {
    !(m.floor[pi] > 0.5)
}

impl TrackManager {
    pub fn new(settings: ManagerSettings, bank: Box<dyn FilterBank>) -> Self {
        let params = bank.params().clone();
        let s = settings;
        let meas = TdoaMeasurement::empty(0, s.pairs.len(), s.peaks_per_pair, params.tdoa_std_s);
        Self {
            view: meas.clone(),
            meas,
            residuals: ResidualWindow::default(),
            sigma_s: params.tdoa_std_s,
            logic: TrackLogic {
                m: s.confirm_m,
                n: s.confirm_n,
                rule: s.confirm_rule,
            },
            frames_per_scan: ((s.scan_s / s.hop_s.max(1e-9)).round() as usize).max(1),
            window_frames: ((s.delete_window_s / s.hop_s.max(1e-9)).round() as usize).max(1),
            window_misses: (((s.delete_window_s / s.hop_s.max(1e-9)).round() * s.delete_fraction)
                .ceil() as usize)
                .max(1),
            tracks: Vec::new(),
            next_id: 1,
            births_search: BirthSearch::new(s.init_frames),
            steps: Vec::new(),
            est: Vec::new(),
            informative_frames: 0,
            births: 0,
            deletions: 0,
            ended: Vec::new(),
            peak_value: Vec::new(),
            overlap: {
                let max_lag = s
                    .pairs
                    .iter()
                    .map(|p| (p.max_tdoa_s * s.sample_rate_hz).ceil() as usize + 2)
                    .max()
                    .unwrap_or(0);
                overlap_table(&s.phat_window, max_lag)
            },
            tempered_steps: 0,
            prepared_steps: 0,
            device_built_steps: 0,
            no_track: BTreeMap::new(),
            no_track_now: None,
            birth_outcome: None,
            filter_wall: std::time::Duration::ZERO,
            heading_deg: None,
            heading_missing_frames: 0,
            zero_masked: Vec::new(),
            mirrors_kept: 0,
            mirrors_taken: 0,
            twins_without_slot: 0,
            lookahead: s.mfa_lists.map(Lookahead::new),
            committed: None,
            bank,
            params,
            geo: s.geometry.clone(),
            s,
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

    pub fn confirmed_tracks(&self) -> usize {
        self.tracks.iter().filter(|t| t.confirmed()).count()
    }

    /// The TDOA noise currently assumed, seconds.
    pub fn sigma_s(&self) -> f32 {
        self.sigma_s
    }

    /// Per pair: whether its peaks at lag zero are crosstalk, to be ignored from the next frame
    /// on.
    pub fn set_zero_masked(&mut self, masked: &[bool]) {
        self.zero_masked.clear();
        self.zero_masked.extend_from_slice(masked);
    }

    /// A turning array: the heading of the frame about to be stepped (degrees; None when
    /// none came, and the last one is kept and the frame counted).
    pub fn set_heading(&mut self, heading_deg: Option<f64>) {
        match heading_deg {
            Some(h) => self.heading_deg = Some(h),
            None => self.heading_missing_frames += 1,
        }
    }

    /// Move every track to another backend, restarting its particles from the last estimate
    /// (mean, covariance and model probabilities). Used when the GPU fails mid-run.
    pub fn replace_bank(&mut self, mut bank: Box<dyn FilterBank>) -> Result<(), BackendError> {
        for t in &self.tracks {
            let frame = t.born_seq ^ 0x5EED_0000_0000;
            bank.init_track(&restart(t.slot, frame, &t.est))?;
            if let Some(w) = &t.twin {
                bank.init_track(&restart(w.slot, frame, &w.est))?;
            }
        }
        self.bank = bank;
        Ok(())
    }

    /// Fill the flattened measurement from a frame's peaks. Returns the number of informative
    /// pairs.
    fn build_measurement(&mut self, seq: u64, gcc: &GccFrame, pair_ok: &[bool]) -> usize {
        let k = self.meas.peaks_per_pair;
        let sigma = self.sigma_s;
        let fs = self.s.sample_rate_hz as f32;
        let m = &mut self.meas;
        m.frame = seq;
        m.sigma_s = sigma;
        self.peak_value.clear();
        self.peak_value.resize(m.amp.len(), (0.0, 0.0));
        let mut informative = 0;
        for (pi, pair) in self.s.pairs.iter().enumerate() {
            // A pair flagged as crosstalk loses its peaks at lag zero (the rest move up).
            let mut kept = [Peak::NONE; crate::dsp::gcc::MAX_PEAKS];
            let peaks = gcc.pair_peaks(pi, k);
            let peaks = if self.zero_masked.get(pi).copied().unwrap_or(false) {
                let unmasked = peaks.iter().filter(|pk| !crosstalk::masked(pk.lag_samples));
                for (slot, pk) in kept.iter_mut().zip(unmasked) {
                    *slot = *pk;
                }
                &kept[..k]
            } else {
                peaks
            };
            let base = pi * k;
            m.amp[base..base + k].fill(0.0);
            m.floor[pi] = 1.0;
            if !pair_ok.get(pi).copied().unwrap_or(false) {
                continue;
            }
            // Detection probability scaled by how clearly the best peak stands out: above the
            // curve's noise level (its clarity; a peak buried in noise is no detection), and
            // among the pair's lags (its prominence, the correlator's z-score: reverberation
            // raises every lag, and at a compact array every lag of the one broad lobe stands out
            // of the noise). A z-score over n lags cannot exceed (n - 1) / sqrt(n), so a pair
            // with few lags needs less of it. Each peak's share is by height and prominence.
            let mid = prominence_mid(pair.max_tdoa_s * f64::from(fs));
            let mut share = [0.0f32; crate::dsp::gcc::MAX_PEAKS];
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
                continue;
            }
            let pd = self.s.detection_probability * best_q;
            let ratio = pair_ratio(pair, sigma);
            m.floor[pi] = 1.0 - pd;
            for (j, pk) in peaks.iter().enumerate() {
                m.tdoa_s[base + j] = pk.lag_samples / fs;
                m.amp[base + j] = pd * share[j] / total * ratio;
                if pk.is_some() {
                    self.peak_value[base + j] = (pk.value, pk.lag_samples);
                }
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
            let yaw = match (self.heading_deg, t.heading_deg) {
                (Some(now), Some(then)) => crate::math::geo::turn_deg(then, now).to_radians(),
                _ => 0.0,
            };
            self.steps.push(TrackStep {
                yaw_rad: yaw as f32,
                ..TrackStep::fixed(t.slot, dt as f32, lag as f32)
            });
        }
    }

    /// Between frames: launch the filter work the last step left for now (see
    /// [`FilterBank::flush`]).
    pub fn between_frames(&mut self) {
        let start = std::time::Instant::now();
        self.bank.flush();
        self.filter_wall += start.elapsed();
    }

    /// Launch the filter step of the frame `seq` centred at `t_centre_s` before its GCC result
    /// is in (see [`FilterBank::prepare_step`]): a GPU filter then predicts while the frame
    /// is correlated. Only a lone track can go ahead (several tracks step on views that need the
    /// frame's assignment). With `peaks` (where the correlator's device writes them), the
    /// filter's device builds the measurement itself from them and the frame's pair checks
    /// `pair_ok` (as [`Self::step`] will get them); without, [`Self::step`] for the same frame
    /// supplies it. Returns whether the filter took it.
    pub fn prepare(
        &mut self,
        seq: u64,
        t_centre_s: f64,
        peaks: Option<crate::dsp::gcc::DevicePeaks>,
        pair_ok: &[bool],
    ) -> Result<bool, BackendError> {
        // (A lone track with a mirror twin steps beside it, in the frame's own step; under
        // multi-frame assignment the frame to step is an older one.)
        if self.tracks.len() != 1 || self.tracks[0].twin.is_some() || self.lookahead.is_some() {
            return Ok(false);
        }
        let start = std::time::Instant::now();
        self.plan_steps(t_centre_s);
        // What `build_measurement` will set: the frame and the noise.
        self.meas.frame = seq;
        self.meas.sigma_s = self.sigma_s;
        // (A device builds the measurement from the correlator's peaks as they come, which
        // knows no masked pairs: with crosstalk flagged, the host supplies it.)
        let peaks = peaks.filter(|_| !self.zero_masked.contains(&true));
        let source = peaks.map(|peaks| crate::track::LiveSource {
            peaks,
            sample_rate_hz: self.s.sample_rate_hz as f32,
            detection_probability: self.s.detection_probability,
            ratio: self
                .s
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

    /// Each track's gates for this frame: its estimate carried to the frame (constant velocity
    /// over the step, the velocity's spread added to the position's), then its predicted TDOAs.
    fn predict_gates(&mut self) {
        // (The most agile model's acceleration: how fast a pair's TDOA rate may change.)
        let accel = self
            .params
            .models
            .iter()
            .map(|m| f64::from(m.accel_std))
            .fold(0.0, f64::max);
        for (t, step) in self.tracks.iter_mut().zip(&self.steps) {
            let dt = f64::from(step.dt_s);
            let mut e = t.est.clone();
            for a in 0..3 {
                e.mean[a] += e.mean[3 + a] * dt;
            }
            for r in 0..3 {
                for c in 0..3 {
                    e.cov[r][c] +=
                        dt * (e.cov[3 + r][c] + e.cov[r][3 + c]) + dt * dt * e.cov[3 + r][3 + c];
                }
            }
            t.gates = gates(&self.params, &e, step.lag_s, self.sigma_s);
            if self.lookahead.is_some() {
                t.rates = rates(&self.params, &e, step.lag_s, accel, self.s.hop_s);
            }
        }
    }

    /// Assign each informative pair's peaks to the tracks whose gates hold them (see
    /// [`assign_pair`]).
    fn assign(&mut self) {
        let k = self.meas.peaks_per_pair;
        let n_pairs = self.s.pairs.len();
        for t in &mut self.tracks {
            t.assigned = vec![None; n_pairs];
        }
        for pi in 0..n_pairs {
            if !informative_pair(&self.meas, pi) {
                continue;
            }
            let peaks: Vec<Option<f32>> = (0..k)
                .map(|j| {
                    let base = pi * k + j;
                    (self.meas.amp[base] > 0.0).then_some(self.meas.tdoa_s[base])
                })
                .collect();
            let got = match self.lookahead.as_mut() {
                Some(la) => {
                    let rows: Vec<WindowRow> = self
                        .tracks
                        .iter()
                        .map(|t| WindowRow {
                            confirmed: t.confirmed(),
                            gates: &t.gates,
                            rates: &t.rates,
                        })
                        .collect();
                    let c = PairContext {
                        pair: &self.s.pairs[pi],
                        index: pi,
                        sample_rate_hz: self.s.sample_rate_hz,
                        hop_s: self.s.hop_s,
                        gate_sigmas: self.s.gate_sigmas,
                    };
                    let (got, solved, changed) =
                        assign_pair_over_window(&c, &rows, &self.meas, &peaks, la.later());
                    if solved {
                        la.solved += 1;
                    } else {
                        la.fallbacks += 1;
                    }
                    la.changed += u64::from(changed);
                    got
                }
                None => {
                    let rows: Vec<(bool, &Gates)> = self
                        .tracks
                        .iter()
                        .map(|t| (t.confirmed(), &t.gates))
                        .collect();
                    assign_pair(&rows, pi, &peaks, self.s.gate_sigmas)
                }
            };
            for (t, a) in self.tracks.iter_mut().zip(got) {
                t.assigned[pi] = a;
            }
        }
    }

    /// Track `i`'s view of the frame: every peak but those assigned to other tracks.
    fn fill_view(&mut self, i: usize) {
        let k = self.meas.peaks_per_pair;
        self.view.clone_from(&self.meas);
        for (o, t) in self.tracks.iter().enumerate() {
            if o == i {
                continue;
            }
            for (pi, a) in t.assigned.iter().enumerate() {
                if let Some(j) = a {
                    if self.tracks[i].assigned[pi] != Some(*j) {
                        self.view.amp[pi * k + j] = 0.0;
                    }
                }
            }
        }
    }

    /// Step every track's filter on its view; the birth search runs meanwhile (a GPU computes
    /// the first step while the host searches). Returns the birth search's result.
    fn step_filters(&mut self) -> Result<Result<BirthFix, NoBirth>, BackendError> {
        let l = self.params.n_models();
        self.est.resize_with(self.steps.len(), || Estimate::new(l));
        let explained = self.explained();
        let mut fix = None;
        let start = std::time::Instant::now();
        if self.tracks.len() <= 1 {
            // Borrowed field by field, so that the bank can be borrowed beside it.
            let inputs = birth_inputs(
                &self.geo,
                &self.s,
                &self.meas,
                &self.params,
                self.births_search.last_fix(),
                &explained,
            );
            let mut meanwhile = || fix = Some(birth_fix(&inputs));
            if let (Some(step), Some(t)) = (self.steps.first(), self.tracks.first_mut()) {
                step_track(
                    self.bank.as_mut(),
                    &self.meas,
                    *step,
                    &mut self.est[0],
                    t.twin.as_mut(),
                    &mut meanwhile,
                )?;
            }
        } else {
            for i in 0..self.tracks.len() {
                self.fill_view(i);
                step_track(
                    self.bank.as_mut(),
                    &self.view,
                    self.steps[i],
                    &mut self.est[i],
                    self.tracks[i].twin.as_mut(),
                    &mut || {},
                )?;
            }
        }
        self.filter_wall += start.elapsed();
        Ok(match fix {
            Some(f) => f,
            None => birth_fix(&birth_inputs(
                &self.geo,
                &self.s,
                &self.meas,
                &self.params,
                self.births_search.last_fix(),
                &explained,
            )),
        })
    }

    /// Per (pair, peak): explained by a confirmed track (assigned to it, or in its gate).
    fn explained(&self) -> Vec<bool> {
        let k = self.meas.peaks_per_pair;
        let mut out = vec![false; self.meas.amp.len()];
        for t in self.tracks.iter().filter(|t| t.confirmed()) {
            for pi in 0..self.s.pairs.len() {
                for j in 0..k {
                    let in_gate = t.gates.d2(pi, self.meas.tdoa_s[pi * k + j])
                        <= self.s.gate_sigmas * self.s.gate_sigmas;
                    if in_gate || t.assigned[pi] == Some(j) {
                        out[pi * k + j] = true;
                    }
                }
            }
        }
        out
    }

    /// Process one frame's GCC result. `pair_ok[p]` is false for pairs with a bad channel.
    /// Returns the reports of the frame [`Self::committed`] names: this one, or under
    /// multi-frame assignment the one S - 2 frames before it (none while the window fills).
    pub fn step(
        &mut self,
        seq: u64,
        t_centre_s: f64,
        gcc: &GccFrame,
        pair_ok: &[bool],
    ) -> Result<Vec<TrackReport>, BackendError> {
        let informative = self.build_measurement(seq, gcc, pair_ok);
        let Some(la) = self.lookahead.as_mut() else {
            self.committed = Some((seq, t_centre_s));
            return self.commit(seq, t_centre_s, informative);
        };
        let held = HeldFrame {
            seq,
            t_centre_s,
            meas: self.meas.clone(),
            peak_value: self.peak_value.clone(),
            informative,
            heading_deg: self.heading_deg,
        };
        match la.push(held) {
            Some(f) => self.commit_held(f),
            None => {
                self.committed = None;
                Ok(Vec::new())
            }
        }
    }

    /// The end of the stream under multi-frame assignment: commit the next frame still held
    /// (with fewer frames after it in view). None once every frame is committed (and always
    /// without multi-frame assignment).
    pub fn drain_one(&mut self) -> Option<Result<Vec<TrackReport>, BackendError>> {
        let f = self.lookahead.as_mut()?.drain_one()?;
        Some(self.commit_held(f))
    }

    /// The frame (sequence number, centre time) whose reports the last [`Self::step`] or
    /// [`Self::drain_one`] returned; None while a multi-frame window fills.
    pub fn committed(&self) -> Option<(u64, f64)> {
        self.committed
    }

    /// Frames the reports run behind the newest frame (S - 2 under multi-frame assignment).
    pub fn latency_frames(&self) -> usize {
        self.lookahead.as_ref().map_or(0, Lookahead::latency_frames)
    }

    /// Multi-frame assignment: pair assignments solved over the window, those where it chose
    /// otherwise than the frame alone, and those the single frame decided (the window's
    /// problem had no solution).
    pub fn window_counts(&self) -> Option<(u64, u64, u64)> {
        self.lookahead
            .as_ref()
            .map(|l| (l.solved, l.changed, l.fallbacks))
    }

    /// Commit a held frame: its measurement and heading in place, then the frame's work. A
    /// failed commit (the filter's backend failed) goes back to the front of the window, to
    /// be redone when the caller steps the same frame again on another backend.
    fn commit_held(&mut self, f: HeldFrame) -> Result<Vec<TrackReport>, BackendError> {
        self.meas.clone_from(&f.meas);
        self.peak_value.clone_from(&f.peak_value);
        let newest = std::mem::replace(&mut self.heading_deg, f.heading_deg);
        self.committed = Some((f.seq, f.t_centre_s));
        let out = self.commit(f.seq, f.t_centre_s, f.informative);
        // (The next frame's heading, when none comes, is the newest one known.)
        if newest.is_some() {
            self.heading_deg = newest;
        }
        if out.is_err() {
            if let Some(la) = self.lookahead.as_mut() {
                la.put_back(f);
            }
        }
        out
    }

    /// One measured frame's work: gates, assignment, filter steps, track logic, births.
    fn commit(
        &mut self,
        seq: u64,
        t_centre_s: f64,
        informative: usize,
    ) -> Result<Vec<TrackReport>, BackendError> {
        if informative > 0 {
            self.informative_frames += 1;
        }
        self.plan_steps(t_centre_s);
        self.predict_gates();
        self.assign();
        let fix = self.step_filters()?;
        self.weigh_twins(t_centre_s);
        let mut reports = Vec::with_capacity(self.tracks.len() + 1);
        let mut dead = Vec::new();
        self.ended.clear();
        for i in 0..self.tracks.len() {
            match self.update_track(i, t_centre_s) {
                Ok(status) => {
                    let t = &self.tracks[i];
                    let mut r = report(
                        t.id,
                        t.t_state_s,
                        &t.est,
                        status,
                        seq,
                        t_centre_s,
                        self.support(i),
                        Kinematics::of(&self.params),
                        self.params.line,
                    );
                    r.coherence = self.coherence(i);
                    self.add_mirror(i, &mut r);
                    reports.push(r);
                }
                Err(why) => {
                    let reason = if self.tracks[i].confirmed() {
                        EndReason::Lost
                    } else {
                        EndReason::Unconfirmed
                    };
                    dead.push((i, reason, why));
                }
            }
        }
        self.find_duplicates(&mut dead, &mut reports);
        for (i, reason, why) in dead.into_iter().rev() {
            let t = self.tracks.remove(i);
            log::info!("track {} deleted at {:.2} s ({why})", t.id, t_centre_s);
            self.end(&t, reason, why);
        }
        self.rearm_twins(seq, &mut reports)?;
        if self.tracks.is_empty() {
            self.residuals.clear();
        }
        self.sigma_s = tdoa_noise_s(
            &self.residuals,
            self.params.tdoa_std_s,
            self.s.sample_rate_hz,
        );
        self.birth_outcome = None;
        let born = self.try_birth(seq, t_centre_s, fix)?;
        if let Some(r) = born {
            reports.push(r);
        }
        self.no_track_now = self.no_track_reason();
        if let Some(why) = self.no_track_now {
            *self.no_track.entry(why).or_insert(0) += 1;
        }
        Ok(reports)
    }

    /// Count and record the end of track `t`.
    fn end(&mut self, t: &Track, reason: EndReason, detail: String) {
        self.deletions += 1;
        self.ended.push(TrackEnd {
            id: t.id,
            reason,
            detail,
            was_confirmed: t.confirmed(),
        });
    }

    /// Mean coherence of the peaks assigned to track `i` this frame (None without one).
    fn coherence(&self, i: usize) -> Option<f32> {
        let k = self.meas.peaks_per_pair;
        let (sum, n) = self.tracks[i]
            .assigned
            .iter()
            .enumerate()
            .filter_map(|(pi, a)| a.and_then(|j| self.peak_value.get(pi * k + j)))
            .map(|&(v, lag)| coherence_of_peak(v, lag, &self.overlap).unwrap_or(0.0) as f32)
            .fold((0.0f32, 0u32), |(s, n), v| (s + v, n + 1));
        (n > 0).then(|| sum / n as f32)
    }

    /// The share of the informative pairs whose gates hold a peak assigned to track `i` (None
    /// when no pair was informative).
    /// Weigh each twin's evidence against its track's this frame; where the margin is
    /// reached, the winner keeps the track (and its ID) and the loser's slot is freed.
    fn weigh_twins(&mut self, t_centre_s: f64) {
        for i in 0..self.tracks.len() {
            let evidence = self.est[i].log_evidence;
            let dt = f64::from(self.steps[i].dt_s);
            let t = &mut self.tracks[i];
            let Some(w) = t.twin.as_mut() else { continue };
            match w.weigh(evidence, self.heading_deg, dt) {
                MirrorVerdict::Undecided => {}
                MirrorVerdict::TrackWins => {
                    log::info!(
                        "track {}: its side of the array is decided at {t_centre_s:.2} s (the mirror is {:.1} nats less likely)",
                        t.id,
                        -w.log_odds
                    );
                    self.mirrors_kept += 1;
                    t.twin = None;
                    t.side_decided = true;
                }
                MirrorVerdict::TwinWins => {
                    log::info!(
                        "track {}: its mirror across the array's axis is decided at {t_centre_s:.2} s ({:.1} nats more likely); the track moves there",
                        t.id,
                        w.log_odds
                    );
                    std::mem::swap(&mut self.est[i], &mut w.est);
                    t.slot = w.slot;
                    self.steps[i].slot = w.slot;
                    self.mirrors_taken += 1;
                    t.twin = None;
                    t.side_decided = true;
                }
            }
        }
    }

    /// A turning line array: a track whose side was decided and that now passes within
    /// [`ENDFIRE_DEG`] (or three of its spreads) of the axis gets a new twin, since a source
    /// there may go on to either side; its report says so.
    fn rearm_twins(&mut self, seq: u64, reports: &mut [TrackReport]) -> Result<(), BackendError> {
        let Some(line) = self.params.line.filter(|l| l.plane && l.keep_side) else {
            return Ok(());
        };
        for i in 0..self.tracks.len() {
            let t = &self.tracks[i];
            if !t.side_decided || t.twin.is_some() {
                continue;
            }
            let Some(r) = reports.iter_mut().find(|r| r.id == t.id) else {
                continue;
            };
            let Some([cone, sd]) = r.cone_deg() else {
                continue;
            };
            if cone.min(180.0 - cone) > ENDFIRE_DEG.max(3.0 * sd) {
                continue;
            }
            let (id, init, est) = (t.id, restart(t.slot, seq, &t.est), t.est.clone());
            let Some(twin) = self.mirror_twin(&init, &est, &line.side)? else {
                continue;
            };
            log::info!("track {id}: at {cone:.1}° from the array's axis its side is open again");
            let t = &mut self.tracks[i];
            t.twin = Some(twin);
            t.side_decided = false;
            r.mirror = Some(crate::track::report::mirror_across(&r.position, &line.axis));
            r.mirror_prob = Some(0.5);
        }
        Ok(())
    }

    /// Report `r` of track `i`: its mirror point (a turning line array's twin, while
    /// undecided, with its probability; else [`Self::mirror_of`]) and the array's heading.
    fn add_mirror(&self, i: usize, r: &mut TrackReport) {
        r.heading_deg = self.heading_deg.filter(|_| self.s.turning);
        let t = &self.tracks[i];
        if !self.s.turning {
            r.mirror = self.mirror_of(r);
            return;
        }
        match &t.twin {
            Some(w) => {
                let m = report(
                    t.id,
                    t.t_state_s,
                    &w.est,
                    TrackStatus::Tentative,
                    r.seq,
                    r.t_frame_s,
                    None,
                    Kinematics::of(&self.params),
                    self.params.line,
                );
                r.mirror = Some(m.position);
                r.mirror_prob = Some(w.prob());
            }
            None if !t.side_decided => r.mirror = self.mirror_of(r),
            None => {}
        }
    }

    /// Line mode with the sources in a known plane: the mirror of report `r`'s direction
    /// across the axis, unless the search volume rules a source there out (at the reported
    /// range, or at every range out to the volume's far corner when there is none).
    fn mirror_of(&self, r: &TrackReport) -> Option<[f64; 3]> {
        let line = self.params.line.filter(|l| l.plane)?;
        let m = crate::track::report::mirror_across(&r.position, &line.axis);
        let Some((lo, hi)) = self.s.bounds else {
            return Some(m);
        };
        let c = self.geo.centroid();
        let inside = |d: f64| (0..3).all(|k| (lo[k]..=hi[k]).contains(&(c[k] + m[k] * d)));
        let possible = match r.range_m() {
            Some(d) => inside(d),
            None => {
                let far = (Vector3::from(hi) - Vector3::from(lo)).norm();
                let mut d = 0.5 * self.geo.aperture_m().max(0.05);
                let mut any = false;
                while d <= 2.0 * far && !any {
                    any = inside(d);
                    d *= 1.25;
                }
                any
            }
        };
        possible.then_some(m)
    }

    fn support(&self, i: usize) -> Option<f32> {
        let t = &self.tracks[i];
        let informative = (0..self.s.pairs.len())
            .filter(|&p| informative_pair(&self.meas, p))
            .count();
        let hits = t.assigned.iter().filter(|a| a.is_some()).count();
        (informative > 0).then(|| hits as f32 / informative as f32)
    }

    /// Take track `i`'s step: its new estimate, its hit or miss, its scans' verdict. Returns
    /// its status, or why it is deleted.
    fn update_track(&mut self, i: usize, t_centre_s: f64) -> Result<TrackStatus, String> {
        let step = self.steps[i];
        let support = self.support(i);
        let k = self.meas.peaks_per_pair;
        let t = &mut self.tracks[i];
        t.t_state_s = t_centre_s - f64::from(step.lag_s);
        t.heading_deg = self.heading_deg;
        t.est = self.est[i].clone();
        t.frames += 1;
        if t.est.temper < 1.0 {
            self.tempered_steps += 1;
        }
        // A degenerate step (no particle could explain the frame: in practice every one
        // outside the bounds) supports nothing, whatever the estimate's TDOAs match. A hit:
        // the gates held assigned peaks in more than `hit_fraction` of the informative pairs.
        let degenerate = !t.est.log_evidence.is_finite();
        let hit = support.map(|s| !degenerate && s > self.s.hit_fraction);
        if hit == Some(true) {
            t.last_hit_s = t.t_state_s;
            // The noise is learnt from confirmed tracks' hits only, so that a track losing its
            // source cannot widen it to suit itself: per informative pair, the distance from
            // the updated estimate's TDOA to the nearest peak within 6 σ (or 3 spreads).
            if t.confirmed() {
                let post = gates(&self.params, &t.est, step.lag_s, self.sigma_s);
                for pi in 0..self.s.pairs.len() {
                    if !informative_pair(&self.meas, pi) {
                        continue;
                    }
                    let wide = (6.0 * self.sigma_s).max(3.0 * post.spread_s[pi]);
                    let nearest = (0..k)
                        .filter(|&j| self.meas.amp[pi * k + j] > 0.0)
                        .map(|j| (self.meas.tdoa_s[pi * k + j] - post.predicted_s[pi]).abs())
                        .fold(f32::INFINITY, f32::min);
                    if nearest <= wide {
                        self.residuals.push(nearest);
                    }
                }
            }
        }
        let by_window = t.confirmed() && self.s.delete_rule == DeleteRule::Window;
        if let (true, Some(h)) = (by_window, hit) {
            if t.misses.frame(h, self.window_frames, self.window_misses) {
                return Err(format!(
                    "it missed its gates in {} of its last {} informative frames",
                    self.window_misses, self.window_frames
                ));
            }
        }
        if let Some(scan_hit) = t.clock.frame(hit, self.frames_per_scan) {
            match self.logic.scan(&mut t.history, scan_hit) {
                Verdict::Delete if by_window => {}
                Verdict::Delete if t.history.confirmed => {
                    return Err("it missed its gates in most scans of late".into());
                }
                Verdict::Delete => return Err("it was not confirmed".into()),
                Verdict::Confirm => log::info!("track {} confirmed at {:.2} s", t.id, t_centre_s),
                Verdict::Keep => {}
            }
        }
        if t.confirmed() && self.s.bounds.is_some() {
            let outside = self.outside_bounds(i);
            let t = &mut self.tracks[i];
            if t.edge.frame(outside, f64::from(step.dt_s)) {
                return Err(format!(
                    "its own peaks have put the source outside the search volume for {:.1} s",
                    t.edge.beyond_s()
                ));
            }
        }
        let t = &mut self.tracks[i];
        let pos_sd = (t.est.cov[0][0] + t.est.cov[1][1] + t.est.cov[2][2])
            .max(0.0)
            .sqrt();
        let three_d = self.params.mode == TrackMode::ThreeD;
        if t.est.mean.iter().any(|v| !v.is_finite()) {
            return Err("its estimate is not finite".into());
        }
        let silent = t.t_state_s - t.last_hit_s;
        if silent > self.s.delete_after_s {
            return Err(format!("no hit for {silent:.1} s"));
        }
        if three_d && pos_sd > spread_limit_m(&self.geo) {
            let p = Vector3::new(t.est.mean[0], t.est.mean[1], t.est.mean[2]);
            let one_frame = self
                .geo
                .tdoa_spread_m(&self.s.pairs, &p, f64::from(self.sigma_s))
                .unwrap_or(0.0);
            if pos_sd > DIVERGED_SPREADS * one_frame {
                return Err(format!(
                    "its position spread {pos_sd:.1} m exceeds twice the array's aperture and {DIVERGED_SPREADS} times what the TDOAs leave there"
                ));
            }
        }
        Ok(if !t.confirmed() {
            TrackStatus::Tentative
        } else if t.t_state_s - t.last_hit_s <= COAST_AFTER_S {
            TrackStatus::Confirmed
        } else {
            TrackStatus::Coasting
        })
    }

    /// Whether track `i`'s assigned peaks, solved from its position without the search volume,
    /// put the source clearly outside the volume (None without a volume, in direction mode, or
    /// with too few assigned pairs for a fix).
    fn outside_bounds(&self, i: usize) -> Option<bool> {
        let bounds = self.s.bounds?;
        if self.params.mode != TrackMode::ThreeD {
            return None;
        }
        let k = self.meas.peaks_per_pair;
        let t = &self.tracks[i];
        // A track well inside (three spreads from every face) is not pressed against one.
        let (lo, hi) = bounds;
        let inside = (0..3).all(|a| {
            let sd = t.est.cov[a][a].max(0.0).sqrt();
            t.est.mean[a] - lo[a] > 3.0 * sd && hi[a] - t.est.mean[a] > 3.0 * sd
        });
        if inside {
            return Some(false);
        }
        let obs: Vec<Obs> = t
            .assigned
            .iter()
            .zip(&self.s.pairs)
            .enumerate()
            .filter_map(|(pi, (a, pair))| {
                a.map(|j| Obs {
                    pair: *pair,
                    tdoa_s: f64::from(self.meas.tdoa_s[pi * k + j]),
                })
            })
            .collect();
        if obs.len() < 4 {
            return None;
        }
        let fix = refine(
            &self.geo,
            &obs,
            start_of(&t.est.mean),
            f64::from(self.sigma_s),
        )?;
        Some(beyond(&fix, &bounds))
    }

    /// Tracks that follow the same source as an older track: each frame in which a track
    /// predicts every informative pair's TDOA within the gate of an older live track counts
    /// towards [`DUPLICATE_AFTER_S`], after which the younger is deleted (added to `dead`, kept
    /// in index order, and its report of this frame withdrawn).
    fn find_duplicates(
        &mut self,
        dead: &mut Vec<(usize, EndReason, String)>,
        reports: &mut Vec<TrackReport>,
    ) {
        let informative: Vec<usize> = (0..self.s.pairs.len())
            .filter(|&p| informative_pair(&self.meas, p))
            .collect();
        let g = self.s.gate_sigmas;
        for j in 1..self.tracks.len() {
            if dead.iter().any(|d| d.0 == j) {
                continue;
            }
            let older = (0..j)
                .filter(|i| !dead.iter().any(|d| d.0 == *i))
                .find(|&i| {
                    let (a, b) = (&self.tracks[i].gates, &self.tracks[j].gates);
                    !informative.is_empty()
                        && informative.iter().all(|&p| {
                            let gate = g * a.spread_s[p].max(b.spread_s[p]);
                            (a.predicted_s[p] - b.predicted_s[p]).abs() <= gate
                        })
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
                    EndReason::Duplicate,
                    format!(
                        "it has followed the same source as track {} for {:.1} s",
                        self.tracks[i].id, self.tracks[j].shared_s
                    ),
                ));
            }
        }
        dead.sort_by_key(|d| d.0);
    }

    /// A slot no track or twin holds, other than `besides`.
    fn free_slot(&self, besides: Option<u32>) -> Option<u32> {
        (0..self.params.slots as u32).find(|s| {
            besides != Some(*s)
                && self
                    .tracks
                    .iter()
                    .all(|t| t.slot != *s && t.twin.as_ref().is_none_or(|w| w.slot != *s))
        })
    }

    /// A free slot, or the slot of the weakest tentative track (fewest hits, then oldest),
    /// which gives way; None when every slot holds a confirmed track.
    fn slot_for_birth(&mut self, t_centre_s: f64) -> Option<u32> {
        let limit = self.s.max_tracks.min(self.params.slots);
        if self.tracks.len() < limit {
            return self.free_slot(None);
        }
        let weakest = self
            .tracks
            .iter()
            .enumerate()
            .filter(|(_, t)| !t.confirmed())
            .min_by_key(|(_, t)| (t.history.hits(), t.born_seq))
            .map(|(i, _)| i)?;
        let t = self.tracks.remove(weakest);
        log::info!(
            "track {} gives way at {:.2} s (every slot taken)",
            t.id,
            t_centre_s
        );
        self.end(&t, EndReason::Replaced, "every slot was taken".into());
        Some(t.slot)
    }

    /// Start a track when the birth search proposes one, and count why not when no confirmed
    /// track exists.
    fn try_birth(
        &mut self,
        seq: u64,
        t_centre_s: f64,
        fix: Result<BirthFix, NoBirth>,
    ) -> Result<Option<TrackReport>, BackendError> {
        let three_d = self.params.mode == TrackMode::ThreeD;
        // Not a second copy of a track we already have: its peaks are in that track's gates.
        let fix = fix.and_then(|(f, used)| {
            if self.in_some_gates(&used) {
                Err(NoBirth::Covered)
            } else {
                Ok((f, used))
            }
        });
        // (With a track confirmed, a run of 3-D fixes may have gaps: see
        // [`BirthSearch::offer`]. Directions are left out: in a room (the soundbar family) a
        // reflection's direction then made tracks, measured.)
        let tolerant = three_d && self.tracks.iter().any(Track::confirmed);
        let outcome = fix.and_then(|(f, used)| {
            let pairs_used = used.iter().flatten().count();
            self.births_search.offer(
                seq,
                t_centre_s,
                f,
                &self.geo,
                three_d,
                self.s.max_speed_m_s,
                tolerant,
                pairs_used,
            )
        });
        let (fix, scatter, t_state) = match outcome {
            Ok(v) => v,
            Err(why) => {
                // (A tolerant run's strong fixes outlive frames without a fix; its span ages
                // them out.)
                if !matches!(why, NoBirth::Disagreeing) {
                    if tolerant {
                        self.births_search.forget_weak();
                    } else {
                        self.births_search.clear();
                    }
                }
                self.count_no_track(why);
                return Ok(None);
            }
        };
        // Nor near one's position.
        let aperture = self.geo.aperture_m();
        let slack = if three_d { 0.05 * aperture } else { 0.1 };
        let covered = self.tracks.iter().any(|t| {
            let at = Vector3::new(t.est.mean[0], t.est.mean[1], t.est.mean[2]);
            // (A direction's estimate is scaled by 1 + its inverse range; the fix is a unit.)
            let at = if three_d {
                at
            } else {
                at / at.norm().max(1e-12)
            };
            (at - fix.position).norm() < 3.0 * slack.max(0.05)
        });
        if covered {
            self.births_search.clear();
            self.count_no_track(NoBirth::Covered);
            return Ok(None);
        }
        let Some(slot) = self.slot_for_birth(t_centre_s) else {
            self.count_no_track(NoBirth::SlotsFull);
            return Ok(None);
        };
        let b = self.births_search.birth(
            &fix,
            scatter,
            t_state,
            slot,
            seq,
            &self.params,
            &self.geo,
            self.sigma_s,
            self.s.sample_rate_hz,
            self.s.max_speed_m_s,
        );
        self.bank.init_track(&b.init)?;
        let twin = self.start_twin(&b.init, &b.est)?;
        let id = self.next_id;
        self.next_id += 1;
        self.births += 1;
        let p = fix.position;
        log::info!(
            "track {id} born at {t_centre_s:.2} s at [{:.2}, {:.2}, {:.2}] from {} agreeing fixes",
            p.x,
            p.y,
            p.z,
            b.fixes
        );
        let track = Track {
            id,
            slot,
            born_seq: seq,
            t_state_s: b.t_state_s,
            est: b.est,
            last_hit_s: b.t_state_s,
            frames: 0,
            gates: Gates::default(),
            rates: Rates::default(),
            assigned: vec![None; self.s.pairs.len()],
            clock: ScanClock::default(),
            history: ScanHistory::default(),
            misses: MissWindow::default(),
            shared_s: 0.0,
            edge: EdgeClock::default(),
            heading_deg: self.heading_deg,
            twin: None,
            side_decided: false,
        };
        let mut r = report(
            track.id,
            track.t_state_s,
            &track.est,
            TrackStatus::Tentative,
            seq,
            t_centre_s,
            Some(1.0),
            Kinematics::of(&self.params),
            self.params.line,
        );
        self.tracks.push(Track { twin, ..track });
        let i = self.tracks.len() - 1;
        self.add_mirror(i, &mut r);
        Ok(Some(r))
    }

    /// A turning line array in a known plane: a twin for a new track, started at the mirror
    /// of its prior in a free slot (None for other arrays, or with every slot taken: the
    /// track's mirror then stays possible).
    fn start_twin(
        &mut self,
        init: &TrackInit,
        est: &Estimate,
    ) -> Result<Option<Twin>, BackendError> {
        match self.params.line.filter(|l| l.plane && l.keep_side) {
            Some(line) => self.mirror_twin(init, est, &line.side),
            None => Ok(None),
        }
    }

    /// A twin for the track started by `init` with estimate `est`: the mirror of both across
    /// the axis (`side` perpendicular to it, in the sources' plane), in a free slot (None, and
    /// counted, when there is none).
    fn mirror_twin(
        &mut self,
        init: &TrackInit,
        est: &Estimate,
        side: &[f32; 3],
    ) -> Result<Option<Twin>, BackendError> {
        // (At a birth the track's own slot is not yet in `tracks`.)
        let Some(slot) = self.free_slot(Some(init.slot)) else {
            self.twins_without_slot += 1;
            return Ok(None);
        };
        let m = mirrored_init(init, side, slot);
        self.bank.init_track(&m)?;
        let mut e = est.clone();
        e.mean = m.mean;
        Ok(Some(Twin::new(slot, e, self.heading_deg)))
    }

    /// Whether the peaks a birth fix used (per pair, their TDOA) lie in one track's gates in
    /// every pair used but at most one.
    fn in_some_gates(&self, used: &[Option<f32>]) -> bool {
        let g2 = self.s.gate_sigmas * self.s.gate_sigmas;
        let n = used.iter().flatten().count();
        self.tracks.iter().any(|t| {
            let inside = used
                .iter()
                .enumerate()
                .filter(|(pi, u)| u.is_some_and(|tau| t.gates.d2(*pi, tau) <= g2))
                .count();
            !t.gates.predicted_s.is_empty() && n > 0 && inside + 1 >= n
        })
    }

    /// Note why this frame's birth search started no track.
    fn count_no_track(&mut self, why: NoBirth) {
        self.birth_outcome = Some(why);
    }

    /// Why the frame just stepped has no confirmed track: a tentative track awaits
    /// confirmation, or the birth search's reason (None when a track is confirmed).
    fn no_track_reason(&self) -> Option<&'static str> {
        if self.confirmed_tracks() > 0 {
            None
        } else if !self.tracks.is_empty() {
            Some("awaiting_confirmation")
        } else {
            Some(self.birth_outcome.map_or("no_peaks", NoBirth::label))
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
