//! Filters over all tracks at once, behind [`FilterBank`] (one call a stage for every track, so
//! a device runs them in one launch): [`particle`], the multi-model particle filter (CPU here,
//! CUDA in [`crate::gpu`]) with [`resample`]; [`imm`], the interacting multiple model estimator
//! (CPU, f64) with [`cubature`], its sigma-point rule; [`bernoulli`], the Bernoulli filters of
//! track-before-detect.
//!
//! Everything a bank needs per frame is flattened into [`TdoaMeasurement`] (plain arrays that
//! copy to a device as they are), and everything it returns per track into [`Estimate`].

pub mod bernoulli;
pub mod cubature;
pub mod imm;
pub mod particle;
pub mod resample;

use serde::{Deserialize, Serialize};

use crate::error::BackendError;
use crate::track::motion::ModelSelection;
use crate::track::motion::MotionModel;
use crate::track::{LineAxes, TdoaMeasurement, TrackMode};

/// The filter each track runs (`tracker.filter`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FilterKind {
    /// A multi-model particle filter per track (CPU or CUDA; the default for every kind of
    /// array: the one filter the scene families measure as good or better on every family of
    /// each kind, BENCHMARKS.md "Which filter, measurement and association for which array").
    #[default]
    Particle,
    /// An interacting multiple model estimator over the same motion models: per mode one
    /// cubature Kalman filter with data association over each pair's peaks (CPU, f64; see
    /// [`imm`]).
    Imm,
}

/// Parameters shared by every track of a bank.
#[derive(Debug, Clone, PartialEq)]
pub struct FilterParams {
    /// Particles per track.
    pub particles: usize,
    /// Track slots (the most tracks held at once).
    pub slots: usize,
    pub models: Vec<MotionModel>,
    pub model_names: Vec<String>,
    /// Row-major L×L cumulative transition rows: `cdf[from * L + to]`.
    pub transition_cdf: Vec<f32>,
    pub selection: ModelSelection,
    pub mode: TrackMode,
    /// The configured TDOA noise floor (the manager may use more; see `TdoaMeasurement`).
    pub tdoa_std_s: f32,
    pub ess_fraction: f32,
    pub seed: u64,
    pub speed_of_sound_m_s: f32,
    /// Sensor positions (f32; metres). In direction mode relative to the array's centroid,
    /// the point the directions are taken from.
    pub sensors: Vec<[f32; 3]>,
    /// Sensor pairs (a, b) in the correlator's order.
    pub pairs: Vec<(u32, u32)>,
    /// Search volume; particles outside get no weight.
    pub bounds: Option<([f32; 3], [f32; 3])>,
    /// Direction mode: a newborn track's particles take inverse ranges spread evenly over
    /// [0, this] (1/m; 0: a plane wave). See [`likelihood::sensor_terms`].
    pub inv_range_max: f32,
    /// Line mode: the axis and the half-plane the directions are kept in.
    pub line: Option<LineAxes>,
}

impl FilterParams {
    pub fn n_models(&self) -> usize {
        self.models.len()
    }
}

/// Per-track inputs of one step.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TrackStep {
    pub slot: u32,
    /// Time since the track's previous state, seconds.
    pub dt_s: f32,
    /// State time = frame centre minus this lag (the propagation delay from the source to the
    /// array, seconds); each pair's prediction is corrected for the difference between its own
    /// emission time and the state time.
    pub lag_s: f32,
    /// The array's turn about its z axis since the track's previous state, radians (clockwise
    /// seen from above, as a heading grows): every particle is turned as far the other way
    /// (counter-clockwise) about z before the step, as a world-fixed direction moves in the
    /// array's frame. 0 for a fixed array.
    pub yaw_rad: f32,
}

impl TrackStep {
    /// A step of a fixed array.
    pub fn fixed(slot: u32, dt_s: f32, lag_s: f32) -> Self {
        Self {
            slot,
            dt_s,
            lag_s,
            yaw_rad: 0.0,
        }
    }

    /// sin and cos of the particles' turn about z, counter-clockwise seen from above by the
    /// heading's (clockwise) change, as both backends use them (worked out once, on the host).
    pub fn turn(&self) -> Option<(f32, f32)> {
        (self.yaw_rad != 0.0).then(|| {
            let (s, c) = f64::from(self.yaw_rad).sin_cos();
            (s as f32, c as f32)
        })
    }
}

/// What a backend returns per track and step.
#[derive(Debug, Clone, PartialEq)]
pub struct Estimate {
    /// Weighted mean: position (3) then velocity (3).
    pub mean: [f64; 6],
    /// Weighted covariance of the same six components.
    pub cov: [[f64; 6]; 6],
    /// Probability of each motion model (sums to 1).
    pub model_probs: Vec<f32>,
    /// Weighted mean turn rate, rad/s.
    pub turn_rate: f32,
    /// Effective sample size before any resampling.
    pub ess: f32,
    pub resampled: bool,
    /// log p(z_k | z_1..k-1): how well the frame fits the track (relative to clutter).
    pub log_evidence: f32,
    /// Model chosen by the nearest-model rule (None in Markov mode).
    pub chosen_model: Option<usize>,
    /// Tempering exponent applied to this frame's likelihood (1 unless the update would have
    /// left too few effective particles; see [`TEMPER_GRID`]).
    pub temper: f32,
}

/// Tempering: when a full update would leave fewer than `TEMPER_MIN_ESS` × N effective
/// particles, the likelihood is raised to the largest β = 2^-k (k = 0..TEMPER_GRID) that keeps
/// at least that many. A new track's wide prior then contracts over a few frames instead of
/// collapsing onto the few particles that happened to land near the source.
pub const TEMPER_MIN_ESS: f64 = 0.3;
/// Number of halvings tried (β down to 2^-TEMPER_GRID).
pub const TEMPER_GRID: usize = 16;
/// Regularisation bandwidth: after a tempered update's resampling, each particle moves by
/// `h L z` with `L L^T` the cloud's 6×6 covariance and z standard normal. While the prior is
/// still wide (a new track), this keeps the diversity in velocity that the next, sharper updates
/// need; without it the cloud can collapse onto a few ancestors with a wrong velocity.
pub const ROUGHEN_H: f64 = 0.2;
/// The same regularisation after every other resampling, with this bandwidth. Resampling alone
/// leaves copies of a few ancestors, and the motion models' process noise regrows only a small
/// part of the spread the cloud loses: a cloud could collapse to centimetres in a direction the
/// frames hardly measure (range, far from a compact array) and stay there while the source moved
/// on. Measured over 18 simulated and recorded scenes and 10 tracker seeds: 0.05 is the largest
/// of 0.05, 0.1 and 0.2 that leaves no scene worse (0.1 gains more on most scenes but costs
/// `pier_five` 2 %).
pub const ROUGHEN_RESAMPLE_H: f64 = 0.05;

impl Estimate {
    pub fn new(models: usize) -> Self {
        Self {
            mean: [0.0; 6],
            cov: [[0.0; 6]; 6],
            model_probs: vec![0.0; models],
            turn_rate: 0.0,
            ess: 0.0,
            resampled: false,
            log_evidence: 0.0,
            chosen_model: None,
            temper: 1.0,
        }
    }
}

/// How to start (or restart) a track's particles.
#[derive(Debug, Clone, PartialEq)]
pub struct TrackInit {
    pub slot: u32,
    /// Key for the random draws (the frame the track starts at).
    pub frame: u64,
    /// Mean state (position, velocity).
    pub mean: [f64; 6],
    /// Lower-triangular Cholesky factor of the state covariance, row-major 6×6.
    pub chol: [[f64; 6]; 6],
    /// Extra velocity spread: each particle also gets a velocity in a uniformly random direction
    /// with a speed uniform in [0, this] (the prior for a source whose speed is unknown but
    /// bounded).
    pub speed_ball_m_s: f64,
    /// Initial model probabilities (cumulative draw per particle).
    pub model_probs: Vec<f32>,
    /// Direction mode: at or above 0, particle i of n takes the inverse range
    /// `this * (i + 0.5) / n` (a newborn track: every range from the nearest out); below 0,
    /// each particle keeps the inverse range it draws from `mean` and `chol` (a track moved to
    /// another backend). See [`likelihood::sensor_terms`].
    pub inv_range_max: f32,
}

/// A host copy of one track's particles (tests, parity checks).
#[derive(Debug, Clone, PartialEq)]
pub struct Particles {
    /// `state[c * N + i]`: component c of particle i.
    pub state: Vec<f32>,
    pub model: Vec<u32>,
    pub log_weight: Vec<f32>,
}

/// What a device needs to build a frame's measurement from its correlator's peaks itself, as
/// `TrackManager::build_measurement` does on the host.
#[derive(Debug, Clone)]
pub struct LiveSource {
    pub peaks: crate::dsp::gcc::DevicePeaks,
    pub sample_rate_hz: f32,
    pub detection_probability: f32,
    /// Per pair: the peak density over the clutter density's factor, 2 max_tdoa / (sigma
    /// sqrt(2 pi)).
    pub ratio: Vec<f32>,
    /// Per pair: both channels passed the frame's checks (what `step` will be given).
    pub pair_ok: Vec<bool>,
}

/// A bank of particle filters, one slot per track. Implemented by the CPU and CUDA backends.
pub trait FilterBank: Send {
    /// "cpu" or "cuda".
    fn backend(&self) -> &'static str;
    fn params(&self) -> &FilterParams;
    /// Draw a slot's particles from a prior.
    fn init_track(&mut self, init: &TrackInit) -> Result<(), BackendError>;
    /// One predict–update–estimate–resample step for each listed track.
    fn step(
        &mut self,
        meas: &TdoaMeasurement,
        tracks: &[TrackStep],
        out: &mut [Estimate],
    ) -> Result<(), BackendError>;
    /// `step`, running `meanwhile` on this thread while a device computes it (after the launch,
    /// before the wait). Returns whether `meanwhile` ran; host backends leave it to the caller
    /// (false), who runs it afterwards.
    fn step_overlapped(
        &mut self,
        meas: &TdoaMeasurement,
        tracks: &[TrackStep],
        out: &mut [Estimate],
        _meanwhile: &mut dyn FnMut(),
    ) -> Result<bool, BackendError> {
        self.step(meas, tracks, out).map(|()| false)
    }
    /// Launch the step of `tracks` for frame `meas.frame` before its measurement exists (only
    /// the measurement's frame, noise and peaks per pair are read), so that a device predicts
    /// while the frame is still being correlated. With `source`, the device builds the
    /// measurement itself from the correlator's peaks as soon as they are written; without,
    /// the next `step` supplies it. The next `step` for the same frame and tracks (and, with
    /// `source`, pair checks) completes it, and any other call withdraws it. Returns whether a
    /// step was launched (host backends: never).
    fn prepare_step(
        &mut self,
        _meas: &TdoaMeasurement,
        _tracks: &[TrackStep],
        _source: Option<&LiveSource>,
    ) -> Result<bool, BackendError> {
        Ok(false)
    }
    /// Launch the work a step left for between frames, if any (a GPU filter's resampling after
    /// a live step, so that the step's estimate comes back without the launch's host time).
    /// Never fails: a failed launch is reported by the next call that needs its result (any
    /// other method), which also launches the work itself when no `flush` came between.
    fn flush(&mut self) {}
    fn read_particles(&mut self, slot: u32) -> Result<Particles, BackendError>;
    fn write_particles(&mut self, slot: u32, particles: &Particles) -> Result<(), BackendError>;
    /// Time each step with device events from now on (`on`), or not. Recording and reading
    /// the events costs host time on every step, so it is off until asked for (`bench`).
    fn set_device_timing(&mut self, _on: bool) {}
    /// Device time of the last `step` (GPU event timing, when turned on); None for host
    /// backends.
    fn last_device_time_s(&self) -> Option<f64> {
        None
    }
    /// Bytes the last `step` moved through device memory (for achieved-bandwidth figures; a
    /// step that resamples moves more, so divide by that step's own device time).
    fn bytes_per_step(&self) -> Option<u64> {
        None
    }
}

/// Step a track into `est` on `view`, with its mirror twin (if any: `twin`, its slot and
/// estimate) in the same call, so that a device steps both in one launch; `meanwhile` runs
/// while a device computes (see [`FilterBank::step_overlapped`]).
pub fn step_with_twin(
    bank: &mut dyn FilterBank,
    view: &TdoaMeasurement,
    step: TrackStep,
    est: &mut Estimate,
    twin: Option<(u32, &mut Estimate)>,
    meanwhile: &mut dyn FnMut(),
) -> Result<(), BackendError> {
    let Some((slot, twin_est)) = twin else {
        return bank
            .step_overlapped(view, &[step], std::slice::from_mut(est), meanwhile)
            .map(|_| ());
    };
    let steps = [step, TrackStep { slot, ..step }];
    // (Moved out and back: an empty estimate holds no allocation.)
    let mut out = [
        std::mem::replace(est, Estimate::new(0)),
        std::mem::replace(twin_est, Estimate::new(0)),
    ];
    let stepped = bank.step_overlapped(view, &steps, &mut out, meanwhile);
    let [a, b] = out;
    (*est, *twin_est) = (a, b);
    stepped.map(|_| ())
}
