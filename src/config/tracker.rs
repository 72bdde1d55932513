//! The `[tracker]` table: particles, motion models and their transitions, measurement noise,
//! births and deletion.

use serde::{Deserialize, Serialize};

use super::Config;
use crate::error::ConfigError;
use crate::gpu::BackendChoice;
pub use crate::track::associate::Association;
pub use crate::track::filter::FilterKind;
use crate::track::logic::m_of_n::{ConfirmRule, DeleteRule};
use crate::track::{ModelKind, ModelSelection};

/// One motion model (`[[tracker.models]]`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelConfig {
    pub name: String,
    pub kind: ModelKind,
    /// Acceleration noise (per axis, standard deviation).
    #[serde(default)]
    pub accel_std_m_s2: f64,
    /// Ct: turn-rate random walk, rad/s per square-root second.
    #[serde(default)]
    pub turn_rate_std_rad_s2: f64,
    /// Static: time constant with which velocity decays to zero.
    #[serde(default)]
    pub velocity_decay_s: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrackerConfig {
    #[serde(default)]
    pub backend: BackendChoice,
    /// Particles per track, shared by all motion models.
    #[serde(default = "default_particles")]
    pub particles: usize,
    #[serde(default = "default_seed")]
    pub seed: u64,
    #[serde(default = "default_models")]
    pub models: Vec<ModelConfig>,
    /// Probability that a particle keeps its model from one frame to the next; the rest is
    /// spread evenly over the other models. Ignored when `transition` is given.
    #[serde(default = "default_stay")]
    pub stay_probability: f64,
    /// Full model transition matrix (rows: from, columns: to; rows sum to 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transition: Option<Vec<Vec<f64>>>,
    #[serde(default)]
    pub model_selection: ModelSelection,
    /// Standard deviation of a TDOA measurement around the truth, in samples.
    #[serde(default = "default_tdoa_std")]
    pub tdoa_std_samples: f64,
    /// Probability that the true TDOA is among a pair's peaks (the rest is uniform clutter).
    #[serde(default = "default_pd")]
    pub detection_probability: f64,
    /// Resample when the effective sample size falls below this fraction of the particles.
    #[serde(default = "default_ess")]
    pub ess_fraction: f64,
    /// Fastest expected source: sets the width of the initial velocity prior.
    #[serde(default = "default_speed")]
    pub max_speed_m_s: f64,
    /// Consecutive agreeing multilateration fixes needed to start a track.
    #[serde(default = "default_init_frames")]
    pub init_frames: usize,
    /// The most tracks held at once (every source its own).
    #[serde(default = "default_max_tracks")]
    pub max_tracks: usize,
    /// A track with no hit for this long (silence, or a lost source) is deleted.
    #[serde(default = "default_delete")]
    pub delete_after_s: f64,
    /// A gate's half-width, in the spreads of the predicted TDOA (the estimate's spread
    /// carried through the TDOAs, with the TDOA noise).
    #[serde(default = "default_gate_sigmas")]
    pub gate_sigmas: f64,
    /// A frame is a hit for a track when its gates hold assigned peaks in at least this share
    /// of the informative pairs.
    #[serde(default = "default_hit_fraction")]
    pub hit_fraction: f64,
    /// M-of-N confirmation over scans: M hits ...
    #[serde(default = "default_confirm_m")]
    pub confirm_m: usize,
    /// ... of N scans (a confirmed track is deleted at N - M + 1 misses in its last N).
    #[serde(default = "default_confirm_n")]
    pub confirm_n: usize,
    /// "cascade" (M of the first M scans, then M of the next N) or "sliding" (M of the first N).
    #[serde(default)]
    pub confirm_rule: ConfirmRule,
    /// Length of a scan, seconds (converted to frames at the hop).
    #[serde(default = "default_scan_s")]
    pub scan_s: f64,
    /// How a confirmed track is deleted: "window" (`delete_fraction` of its informative frames
    /// in the last `delete_window_s` missed) or "scans" (the seed's M-of-N rule).
    #[serde(default)]
    pub delete_rule: DeleteRule,
    #[serde(default = "default_delete_window")]
    pub delete_window_s: f64,
    #[serde(default = "default_delete_fraction")]
    pub delete_fraction: f64,
    /// "peaks", "curves" (track-before-detect) or "auto" (peaks, with the curves holding a
    /// track whose peaks fade).
    #[serde(default)]
    pub measurement: super::Measurement,
    #[serde(default)]
    pub curves: super::CurvesConfig,
    /// "particle" (the default) or "imm" (the interacting multiple model estimator: cheap, no
    /// GPU needed, one Gaussian per motion model).
    #[serde(default)]
    pub filter: FilterKind,
    /// "gnn" (the default) or "mfa" (multi-frame assignment: later frames help decide each
    /// frame's peaks, at S - 2 frames of latency).
    #[serde(default)]
    pub association: Association,
    /// Multi-frame assignment: S, the lists of its window (the tracks and S - 1 frames), 3 to 5.
    #[serde(default = "default_mfa_lists")]
    pub mfa_lists: usize,
}

fn default_mfa_lists() -> usize {
    3
}

/// Bytes per particle and track slot: 7 state floats, a model index and a log-weight.
pub const PARTICLE_SLOT_BYTES: u64 = 7 * 4 + 4 + 4;
/// Bytes per particle of one step's scratch: a state copy, model, likelihood, weight,
/// cumulative sum (f64) and ancestor.
pub const PARTICLE_SCRATCH_BYTES: u64 = 7 * 4 + 4 + 4 + 4 + 8 + 4;
/// Most particle memory a configuration may ask for: 4 GiB, a quarter of the smallest Jetson
/// Orin NX's memory shared with everything else (32 tracks x 1M particles fit).
pub const MAX_PARTICLE_BYTES: u64 = 4 << 30;
const GIB: f64 = (1u64 << 30) as f64;

fn default_particles() -> usize {
    16_384
}
fn default_seed() -> u64 {
    1
}
fn default_stay() -> f64 {
    0.95
}
fn default_tdoa_std() -> f64 {
    0.5
}
fn default_pd() -> f64 {
    0.9
}
fn default_ess() -> f64 {
    0.8
}
fn default_speed() -> f64 {
    5.0
}
fn default_init_frames() -> usize {
    3
}
fn default_max_tracks() -> usize {
    8
}
fn default_gate_sigmas() -> f64 {
    3.0
}
fn default_hit_fraction() -> f64 {
    0.5
}
fn default_confirm_m() -> usize {
    2
}
fn default_confirm_n() -> usize {
    3
}
fn default_scan_s() -> f64 {
    0.1
}
fn default_delete_window() -> f64 {
    1.0
}
fn default_delete_fraction() -> f64 {
    0.75
}
fn default_delete() -> f64 {
    3.0
}

/// Quiet and agile constant velocity, a coordinated turn, and near-static.
pub fn default_models() -> Vec<ModelConfig> {
    let m = |name: &str, kind, a, w, d| ModelConfig {
        name: name.into(),
        kind,
        accel_std_m_s2: a,
        turn_rate_std_rad_s2: w,
        velocity_decay_s: d,
    };
    vec![
        m("quiet", ModelKind::Cv, 0.05, 0.0, 0.0),
        m("agile", ModelKind::Cv, 1.0, 0.0, 0.0),
        m("turn", ModelKind::Ct, 0.05, 0.1, 0.0),
        m("static", ModelKind::Static, 0.02, 0.0, 0.5),
    ]
}

impl Default for TrackerConfig {
    fn default() -> Self {
        Self {
            backend: BackendChoice::default(),
            particles: default_particles(),
            seed: default_seed(),
            models: default_models(),
            stay_probability: default_stay(),
            transition: None,
            model_selection: ModelSelection::default(),
            tdoa_std_samples: default_tdoa_std(),
            detection_probability: default_pd(),
            ess_fraction: default_ess(),
            max_speed_m_s: default_speed(),
            init_frames: default_init_frames(),
            max_tracks: default_max_tracks(),
            delete_after_s: default_delete(),
            gate_sigmas: default_gate_sigmas(),
            hit_fraction: default_hit_fraction(),
            confirm_m: default_confirm_m(),
            confirm_n: default_confirm_n(),
            confirm_rule: ConfirmRule::default(),
            scan_s: default_scan_s(),
            delete_rule: DeleteRule::default(),
            delete_window_s: default_delete_window(),
            delete_fraction: default_delete_fraction(),
            measurement: super::Measurement::default(),
            curves: super::CurvesConfig::default(),
            filter: FilterKind::default(),
            association: Association::default(),
            mfa_lists: default_mfa_lists(),
        }
    }
}

impl Config {
    /// The model transition matrix (rows from, columns to).
    pub fn transition_matrix(&self) -> Vec<Vec<f64>> {
        if let Some(t) = &self.tracker.transition {
            return t.clone();
        }
        let l = self.tracker.models.len();
        let p = self.tracker.stay_probability;
        (0..l)
            .map(|i| {
                (0..l)
                    .map(|j| {
                        if l == 1 {
                            1.0
                        } else if i == j {
                            p
                        } else {
                            (1.0 - p) / (l - 1) as f64
                        }
                    })
                    .collect()
            })
            .collect()
    }

    /// Memory the filter bank holds for its particles, bytes: per particle and slot the state
    /// (7 floats), its model and log-weight, and once per particle the step's scratch (the
    /// CPU bank's layout, [`crate::track::filter::particle::CpuParticleFilter`]; the GPU's is alike).
    pub fn particle_memory_bytes(&self) -> u64 {
        let t = &self.tracker;
        t.particles as u64 * (PARTICLE_SLOT_BYTES * t.max_tracks as u64 + PARTICLE_SCRATCH_BYTES)
    }

    /// The particle count and every motion model.
    pub(super) fn validate_models(&self, file: &str) -> Result<(), ConfigError> {
        let err =
            |key: &str, problem: String, fix: &str| Err(ConfigError::new(file, key, problem, fix));
        let t = &self.tracker;
        if !(64..=1 << 22).contains(&t.particles) {
            return err(
                "tracker.particles",
                format!("{}", t.particles),
                "use 64 to 4194304 particles per track (accuracy stops improving long before)",
            );
        }
        let l = t.models.len();
        if !(1..=16).contains(&l) {
            return err(
                "tracker.models",
                format!("{l} models"),
                "give 1 to 16 [[tracker.models]] tables",
            );
        }
        for (i, m) in t.models.iter().enumerate() {
            let key = |k: &str| format!("tracker.models[{i}].{k}");
            if t.models[..i].iter().any(|o| o.name == m.name) || m.name.is_empty() {
                return err(
                    &key("name"),
                    format!("`{}` is empty or used twice", m.name),
                    "give each model its own name",
                );
            }
            if !(m.accel_std_m_s2 >= 0.0 && m.accel_std_m_s2.is_finite()) {
                return err(
                    &key("accel_std_m_s2"),
                    format!("{}", m.accel_std_m_s2),
                    "use a finite value >= 0",
                );
            }
            match m.kind {
                ModelKind::Cv => {}
                ModelKind::Ct => {
                    if !(m.turn_rate_std_rad_s2 > 0.0 && m.turn_rate_std_rad_s2.is_finite()) {
                        return err(
                            &key("turn_rate_std_rad_s2"),
                            format!("{}", m.turn_rate_std_rad_s2),
                            "a turn model needs a turn-rate noise > 0, e.g. 0.1",
                        );
                    }
                }
                ModelKind::Static => {
                    if !(m.velocity_decay_s > 0.0 && m.velocity_decay_s.is_finite()) {
                        return err(
                            &key("velocity_decay_s"),
                            format!("{}", m.velocity_decay_s),
                            "a static model needs a velocity decay time > 0, e.g. 0.5",
                        );
                    }
                }
            }
        }
        Ok(())
    }

    /// The model transitions (a matrix, or the probability of staying).
    pub(super) fn validate_transitions(&self, file: &str) -> Result<(), ConfigError> {
        let err =
            |key: &str, problem: String, fix: &str| Err(ConfigError::new(file, key, problem, fix));
        let t = &self.tracker;
        let l = t.models.len();
        if let Some(tr) = &t.transition {
            if tr.len() != l || tr.iter().any(|r| r.len() != l) {
                return err(
                    "tracker.transition",
                    format!("not {l} x {l}"),
                    "give one row and one column per model",
                );
            }
            for (i, row) in tr.iter().enumerate() {
                let s: f64 = row.iter().sum();
                if let Some(j) = row.iter().position(|&p| !(0.0..=1.0).contains(&p)) {
                    return err(
                        &format!("tracker.transition[{i}][{j}]"),
                        format!("{} is not a probability", row[j]),
                        "each entry is a probability from 0 to 1, and each row sums to 1",
                    );
                }
                if (s - 1.0).abs() > 1e-6 {
                    return err(
                        &format!("tracker.transition[{i}]"),
                        format!("row sums to {s}"),
                        "each row holds probabilities that sum to 1",
                    );
                }
            }
        } else if !(t.stay_probability > 0.0 && t.stay_probability <= 1.0) {
            return err(
                "tracker.stay_probability",
                format!("{}", t.stay_probability),
                "use a probability in (0, 1], e.g. 0.95",
            );
        }
        Ok(())
    }

    /// Measurement noise, detection, resampling, speed, births and deletion.
    pub(super) fn validate_tracker(&self, file: &str) -> Result<(), ConfigError> {
        let err =
            |key: &str, problem: String, fix: &str| Err(ConfigError::new(file, key, problem, fix));
        let t = &self.tracker;
        if !(t.tdoa_std_samples > 0.0 && t.tdoa_std_samples < 1000.0) {
            return err(
                "tracker.tdoa_std_samples",
                format!("{}", t.tdoa_std_samples),
                "use a positive value, e.g. 0.5",
            );
        }
        if !(t.detection_probability > 0.0 && t.detection_probability < 1.0) {
            return err(
                "tracker.detection_probability",
                format!("{}", t.detection_probability),
                "use a probability strictly between 0 and 1, e.g. 0.9",
            );
        }
        if !(t.ess_fraction > 0.0 && t.ess_fraction <= 1.0) {
            return err(
                "tracker.ess_fraction",
                format!("{}", t.ess_fraction),
                "use a fraction in (0, 1], e.g. 0.8",
            );
        }
        if !(t.max_speed_m_s > 0.0 && t.max_speed_m_s < 1000.0) {
            return err(
                "tracker.max_speed_m_s",
                format!("{}", t.max_speed_m_s),
                "give the fastest expected source speed in m/s, > 0",
            );
        }
        if !(3..=5).contains(&t.mfa_lists) {
            return err(
                "tracker.mfa_lists",
                format!("{}", t.mfa_lists),
                "use 3 to 5 lists (the tracks and 2 to 4 frames; 3 is the default)",
            );
        }
        if t.association == Association::Mfa && t.measurement != super::Measurement::Peaks {
            return err(
                "tracker.association",
                format!(
                    "\"mfa\" with tracker.measurement = \"{}\"",
                    match t.measurement {
                        super::Measurement::Curves => "curves",
                        _ => "auto",
                    }
                ),
                "multi-frame assignment serves the peaks path only: set tracker.measurement = \"peaks\", or tracker.association = \"gnn\"",
            );
        }
        if !(1..=100).contains(&t.init_frames) {
            return err(
                "tracker.init_frames",
                format!("{}", t.init_frames),
                "use 1 to 100",
            );
        }
        if !(1..=64).contains(&t.max_tracks) {
            return err(
                "tracker.max_tracks",
                format!("{}", t.max_tracks),
                "use 1 to 64",
            );
        }
        let bytes = self.particle_memory_bytes();
        if bytes > MAX_PARTICLE_BYTES {
            return err(
                "tracker.particles",
                format!(
                    "{} particles x {} track slots need {:.1} GiB (at most {:.0} GiB)",
                    t.particles,
                    t.max_tracks,
                    bytes as f64 / GIB,
                    MAX_PARTICLE_BYTES as f64 / GIB
                ),
                "use fewer particles or fewer tracker.max_tracks",
            );
        }
        if !(t.delete_after_s > 0.0) {
            return err(
                "tracker.delete_after_s",
                format!("{}", t.delete_after_s),
                "use a positive number of seconds",
            );
        }
        if !(t.gate_sigmas >= 1.0 && t.gate_sigmas <= 20.0) {
            return err(
                "tracker.gate_sigmas",
                format!("{}", t.gate_sigmas),
                "use 1 to 20 spreads (3 is the default)",
            );
        }
        if !(t.hit_fraction > 0.0 && t.hit_fraction <= 1.0) {
            return err(
                "tracker.hit_fraction",
                format!("{}", t.hit_fraction),
                "use a share of the pairs in (0, 1], e.g. 0.5",
            );
        }
        if !(1..=100).contains(&t.confirm_m) || !(t.confirm_m..=100).contains(&t.confirm_n) {
            return err(
                "tracker.confirm_m",
                format!("{} of {}", t.confirm_m, t.confirm_n),
                "use 1 <= confirm_m <= confirm_n <= 100, e.g. 2 of 3",
            );
        }
        if !(t.scan_s > 0.0 && t.scan_s <= 60.0) {
            return err(
                "tracker.scan_s",
                format!("{}", t.scan_s),
                "use a positive number of seconds, at most 60 (0.1 is the default)",
            );
        }
        if !(t.delete_window_s > 0.0 && t.delete_window_s <= 60.0) {
            return err(
                "tracker.delete_window_s",
                format!("{}", t.delete_window_s),
                "use a positive number of seconds, at most 60 (1 is the default)",
            );
        }
        if !(t.delete_fraction > 0.0 && t.delete_fraction <= 1.0) {
            return err(
                "tracker.delete_fraction",
                format!("{}", t.delete_fraction),
                "use a share of the frames in (0, 1], e.g. 0.75",
            );
        }
        Ok(())
    }
}
