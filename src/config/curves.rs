//! `tracker.measurement` and the `[tracker.curves]` table: track-before-detect on the GCC-PHAT
//! curves (see `track::filter::bernoulli`).

use serde::{Deserialize, Serialize};

use super::Config;
use crate::error::ConfigError;
use crate::track::initiate::curves::SearchSettings;
use crate::track::manager::curves::{CurvesSettings, CurvesStage};
pub use crate::track::measure::Measurement;
use crate::track::measure::curves::{CurveModel, CurveSettings};

/// `[tracker.curves]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CurvesConfig {
    /// Particles of each curves track (and of the search's continuing set).
    #[serde(default = "default_particles")]
    pub particles: usize,
    /// Birth particles the search draws each frame.
    #[serde(default = "default_birth_particles")]
    pub birth_particles: usize,
    /// Existence probability at which a track is confirmed (and reported).
    #[serde(default = "default_confirm")]
    pub confirm: f64,
    /// How long (s) the search's existence must hold `confirm` before it becomes a track.
    #[serde(default = "default_confirm_s")]
    pub confirm_s: f64,
    /// Existence probability below which a track is deleted.
    #[serde(default = "default_delete")]
    pub delete: f64,
    /// Expected appearances of a source per second while none is there (the chain's birth
    /// probability, set per second so the frame rate does not change it).
    #[serde(default = "default_births")]
    pub births_per_s: f64,
    /// Expected lifetime of a source (s): the chain's death probability.
    #[serde(default = "default_lifetime")]
    pub lifetime_s: f64,
    /// A new source's coherence (the PHAT peak height it would give), uniform on this range.
    #[serde(default = "default_coherence")]
    pub coherence: [f64; 2],
    /// Acceleration noise per axis (m/s²).
    #[serde(default = "default_accel")]
    pub accel_std_m_s2: f64,
    /// Time constant (s) of the clutter map taken from the curves (0: none): what stays put
    /// for about this long fades from the curves, except around tracked sources.
    #[serde(default)]
    pub clutter_map_s: f64,
    /// Weigh each track on the curves less the other tracks' lobe templates where their lags
    /// overlap in a pair (the joint template); off by default (see BENCHMARKS.md).
    #[serde(default)]
    pub joint_template: bool,
    /// Run the search on the GPU's curves bank (`kernels/tbd.cu`) when the backend is CUDA;
    /// the tracks stay on the CPU. Off by default: its accuracy against the CPU search has not
    /// been measured on the scene families.
    #[serde(default)]
    pub search_on_gpu: bool,
}

fn default_particles() -> usize {
    8192
}
fn default_birth_particles() -> usize {
    16_384
}
fn default_confirm() -> f64 {
    0.9
}
fn default_confirm_s() -> f64 {
    1.0
}
fn default_delete() -> f64 {
    0.1
}
fn default_births() -> f64 {
    0.02
}
fn default_lifetime() -> f64 {
    60.0
}
fn default_coherence() -> [f64; 2] {
    [0.02, 0.6]
}
fn default_accel() -> f64 {
    0.3
}

impl Default for CurvesConfig {
    fn default() -> Self {
        Self {
            particles: default_particles(),
            birth_particles: default_birth_particles(),
            confirm: default_confirm(),
            confirm_s: default_confirm_s(),
            delete: default_delete(),
            births_per_s: default_births(),
            lifetime_s: default_lifetime(),
            coherence: default_coherence(),
            accel_std_m_s2: default_accel(),
            clutter_map_s: 0.0,
            joint_template: false,
            search_on_gpu: false,
        }
    }
}

impl Config {
    pub(super) fn validate_curves(&self, file: &str) -> Result<(), ConfigError> {
        let c = &self.tracker.curves;
        let err = |key: &str, got: String, fix: &str| {
            Err(ConfigError::new(
                file,
                format!("tracker.curves.{key}"),
                got,
                fix,
            ))
        };
        if !(64..=1 << 22).contains(&c.particles) {
            return err("particles", c.particles.to_string(), "use 64 to 4194304");
        }
        if !(64..=1 << 22).contains(&c.birth_particles) {
            return err(
                "birth_particles",
                c.birth_particles.to_string(),
                "use 64 to 4194304",
            );
        }
        if !(c.delete > 0.0 && c.delete < c.confirm && c.confirm < 1.0) {
            return err(
                "confirm",
                format!("confirm {} with delete {}", c.confirm, c.delete),
                "use 0 < delete < confirm < 1 (e.g. delete 0.1, confirm 0.9)",
            );
        }
        if !(c.clutter_map_s == 0.0 || (1.0..=3600.0).contains(&c.clutter_map_s)) {
            return err(
                "clutter_map_s",
                c.clutter_map_s.to_string(),
                "use 0 (no clutter map) or 1 to 3600 s",
            );
        }
        if !(c.confirm_s >= 0.0 && c.confirm_s <= 60.0) {
            return err("confirm_s", c.confirm_s.to_string(), "use 0 to 60 s");
        }
        if !(c.births_per_s > 0.0 && c.births_per_s <= 10.0) {
            return err(
                "births_per_s",
                c.births_per_s.to_string(),
                "use a rate above 0 and at most 10 per second",
            );
        }
        if !(c.lifetime_s >= 1.0 && c.lifetime_s.is_finite()) {
            return err("lifetime_s", c.lifetime_s.to_string(), "use at least 1 s");
        }
        let [lo, hi] = c.coherence;
        if !(lo > 0.0 && lo < hi && hi <= 1.0) {
            return err(
                "coherence",
                format!("[{lo}, {hi}]"),
                "use 0 < low < high <= 1",
            );
        }
        if !(c.accel_std_m_s2 >= 0.0 && c.accel_std_m_s2 <= 50.0) {
            return err(
                "accel_std_m_s2",
                c.accel_std_m_s2.to_string(),
                "use 0 to 50",
            );
        }
        if self.tracker.measurement == Measurement::Curves && !self.curves_usable() {
            return Err(ConfigError::new(
                file,
                "tracker.measurement",
                format!(
                    "{:?} in {:?} mode",
                    self.tracker.measurement, self.array.mode
                ),
                "the curves need 3-D tracking and a search volume (array.bounds_min_m and array.bounds_max_m); use \"peaks\" otherwise",
            ));
        }
        Ok(())
    }

    /// Whether the curves can be used here: 3-D tracking with a search volume (what
    /// `CurveModel::new` needs).
    pub fn curves_usable(&self) -> bool {
        self.array.mode == crate::track::TrackMode::ThreeD
            && self.array.bounds_min_m.is_some()
            && self.array.bounds_max_m.is_some()
    }

    /// The tracker's stage on the curves (None with `measurement = "peaks"`, and with "auto"
    /// where the curves cannot be used: outside 3-D tracking or without a search volume, which
    /// "curves" itself is refused for at validation).
    pub fn curves_stage(&self) -> Option<CurvesStage> {
        if self.tracker.measurement == Measurement::Peaks {
            return None;
        }
        if !self.curves_usable() {
            log::info!(
                "tracker.measurement = \"auto\": the curves need 3-D tracking and a search volume; tracking on the peaks alone"
            );
            return None;
        }
        let frame_s = self.hop_samples() as f64 / self.sample_rate_hz();
        let Some(model) = CurveModel::new(
            &self.filter_params(),
            &self.gcc_params(),
            self.curve_settings(),
            frame_s,
        ) else {
            log::warn!(
                "tracker.measurement: the curve model could not be built; tracking on the peaks alone"
            );
            return None;
        };
        let c = &self.tracker.curves;
        let set = CurvesSettings {
            search: SearchSettings {
                particles: c.particles,
                birth_particles: c.birth_particles,
                births_per_s: c.births_per_s,
                lifetime_s: c.lifetime_s,
                confirm: c.confirm,
                confirm_s: c.confirm_s,
                max_tracks: self.tracker.max_tracks,
                seed: self.tracker.seed,
            },
            delete: c.delete,
            searching: self.tracker.measurement == Measurement::Curves,
            clutter_map_s: c.clutter_map_s,
            joint_template: c.joint_template,
        };
        Some(CurvesStage::new(model, set, frame_s))
    }

    /// The curve model's settings from `[tracker.curves]`.
    pub fn curve_settings(&self) -> CurveSettings {
        let c = &self.tracker.curves;
        CurveSettings {
            coherence: (c.coherence[0], c.coherence[1]),
            accel_std: c.accel_std_m_s2,
            speed_max: self.tracker.max_speed_m_s,
            ..CurveSettings::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ARRAY: &str =
        "[array]\nsensors_m = [[0,0,0],[1,0,0],[0,1,0],[0,0,1]]\nspeed_of_sound_m_s = 343.0\n";

    #[test]
    fn peaks_by_default_and_bad_values_are_named() {
        let c = Config::parse_str(ARRAY, "t.toml").unwrap();
        assert_eq!(c.tracker.measurement, Measurement::Peaks);
        let c = Config::parse_str(
            &format!("{ARRAY}[tracker]\nmeasurement = \"auto\"\n"),
            "t.toml",
        )
        .unwrap();
        assert_eq!(c.tracker.measurement, Measurement::Auto);
        // No search volume: auto tracks on the peaks alone, and says so; curves is refused.
        assert!(c.curves_stage().is_none());
        assert!(c.explain().contains("not used here"), "{}", c.explain());
        let e = Config::parse_str(
            &format!("{ARRAY}[tracker]\nmeasurement = \"curves\"\n"),
            "t.toml",
        )
        .unwrap_err();
        assert_eq!(e.key, "tracker.measurement");
        let vol = "bounds_min_m = [-20, -20, -20]\nbounds_max_m = [20, 20, 20]\n";
        let c = Config::parse_str(
            &format!("{ARRAY}{vol}[tracker]\nmeasurement = \"curves\"\n"),
            "t.toml",
        )
        .unwrap();
        assert!(c.curves_stage().is_some());
        assert!(
            c.explain().contains("curves, track-before-detect alone"),
            "{}",
            c.explain()
        );
        assert!(
            Config::parse_str(
                &format!("{ARRAY}[tracker]\nmeasurement = \"lines\"\n"),
                "t.toml"
            )
            .is_err()
        );
        for (key, bad) in [
            ("confirm", "1.5"),
            ("delete", "0.95"),
            ("particles", "10"),
            ("lifetime_s", "0"),
            ("coherence", "[0.5, 0.2]"),
            ("births_per_s", "nan"),
        ] {
            let text = format!("{ARRAY}[tracker.curves]\n{key} = {bad}\n");
            let e = Config::parse_str(&text, "t.toml").unwrap_err();
            assert!(e.key.starts_with("tracker.curves."), "{key}: {e}");
        }
    }
}
