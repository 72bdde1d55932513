//! The configuration: one TOML file (plus the files it `include`s, such as a board file and an
//! array file). Loading checks every key and the geometry before any audio is read; every
//! problem is a [`ConfigError`] naming the file, the dotted key and the fix.

//!
//! One file per table ([`array`], [`audio`], [`gcc`], [`tracker`], [`output`], [`board`]), each
//! with its schema, its accessors and its checks; [`load`] reads files and their includes,
//! [`overrides`] applies `--set`, [`params`] builds each stage's parameters, and [`explain`] says
//! what a configuration will do. Domain types (modes, model kinds, weightings, sinks) live with
//! the code that uses them; the configuration refers to them.

mod array;
mod audio;
mod board;
mod curves;
mod errors;
mod explain;
pub mod fuse;
mod gcc;
mod load;
mod output;
mod overrides;
mod params;
mod smoothing;
mod tracker;

use std::path::Path;

use serde::{Deserialize, Serialize};

pub use array::{ArrayConfig, HeadingInput};
pub use audio::AudioConfig;
pub use board::BoardConfig;
pub use curves::{CurvesConfig, Measurement};
pub use gcc::GccConfig;
pub use output::OutputConfig;
pub use smoothing::SmoothingConfig;
pub use tracker::{Association, FilterKind, ModelConfig, TrackerConfig, default_models};

use crate::audio::sim::SceneSpec;
use crate::dsp::geometry::Span;
use crate::error::{ConfigError, Result};
use crate::track::TrackMode;
use load::{IncludeWalk, load_table};

/// The whole configuration. Every table rejects keys it does not know.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Files merged underneath this one, paths relative to this file. Later files and this file
    /// override earlier ones key by key.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub include: Vec<String>,
    /// What the configuration is for (shown by `sonotrack check`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub board: Option<BoardConfig>,
    pub array: ArrayConfig,
    #[serde(default)]
    pub audio: AudioConfig,
    #[serde(default)]
    pub gcc: GccConfig,
    #[serde(default)]
    pub tracker: TrackerConfig,
    #[serde(default)]
    pub output: OutputConfig,
    #[serde(default)]
    pub smoothing: SmoothingConfig,
}

impl Config {
    /// A configuration for an array with every other setting at its default.
    pub fn for_array(
        sensors_m: Vec<[f64; 3]>,
        speed_of_sound_m_s: f64,
        sample_rate_hz: u32,
    ) -> Self {
        Self {
            include: Vec::new(),
            board: None,
            array: ArrayConfig {
                description: String::new(),
                sensors_m,
                speed_of_sound_m_s,
                mode: TrackMode::ThreeD,
                bounds_min_m: None,
                bounds_max_m: None,
                min_range_m: None,
                plane_normal: None,
                origin: None,
                heading_input: None,
            },
            audio: AudioConfig {
                sample_rate_hz,
                ..AudioConfig::default()
            },
            gcc: GccConfig::default(),
            tracker: TrackerConfig::default(),
            output: OutputConfig::default(),
            smoothing: SmoothingConfig::default(),
        }
    }

    /// The configuration a replay of a simulated scene starts from: the array it is told (the
    /// truth, or off by the scene's description errors), the speed of sound, sample rate and
    /// search bounds, everything else at the defaults. As for a scene directory, an array not
    /// spread in 3-D tracks directions.
    pub fn for_scene(spec: &SceneSpec) -> Self {
        let (sensors, c) = spec.told_array();
        let mut cfg = Self::for_array(sensors, c, spec.sample_rate_hz);
        if spec.array_turn.is_none() {
            cfg.array.bounds_min_m = spec.bounds_min_m;
            cfg.array.bounds_max_m = spec.bounds_max_m;
        } else {
            // (The search volume is the scene's; the array turns within it.)
            cfg.array.heading_input = Some(HeadingInput::from_file("heading.csv".into()));
        }
        cfg.array.plane_normal = spec.plane_normal();
        cfg.array.origin = spec.origin;
        if cfg.geometry().span() != Span::Volume {
            cfg.array.mode = TrackMode::Direction;
        }
        cfg.settle_mode("the scene");
        cfg
    }

    /// Load a file (and its includes), parse and validate it.
    pub fn load(path: &Path) -> Result<Self> {
        let file = path.display().to_string();
        let mut walk = IncludeWalk::default();
        let (table, merged) = load_table(path, &mut walk)?;
        if !merged {
            // Parse the user's own text (read once, by the walk), so that errors point at
            // their lines.
            let text = walk.texts.first().map_or("", |(_, t)| t.as_str());
            return Ok(Self::parse_str(text, &file)?);
        }
        let file = format!("{file} (with its includes)");
        // Lines of the merged table mean nothing to the user: the files and lines that set
        // the key say where.
        let wrote = |key: &str| walk.where_set(key);
        let mut cfg: Config = errors::parse_table(table, &file, &wrote)?;
        cfg.settle_mode(&file);
        let locate = |mut err: ConfigError| {
            let at = walk.where_set(&err.key);
            if !at.is_empty() {
                err.problem = format!("{} (set in {})", err.problem, at.join(", "));
            }
            err
        };
        cfg.validate(&file).map_err(locate)?;
        Ok(cfg)
    }

    /// Parse and validate TOML text; `file` names it in errors.
    pub fn parse_str(text: &str, file: &str) -> Result<Self, ConfigError> {
        let mut cfg: Config = errors::parse_text(text, file)?;
        cfg.settle_mode(file);
        cfg.validate(file)?;
        Ok(cfg)
    }

    /// Every check that needs only the configuration itself, table by table.
    pub fn validate(&self, file: &str) -> Result<(), ConfigError> {
        self.validate_sensors(file)?;
        self.validate_volume(file)?;
        self.validate_heading_input(file)?;
        self.validate_audio(file)?;
        self.validate_gcc(file)?;
        self.validate_models(file)?;
        self.validate_transitions(file)?;
        self.validate_tracker(file)?;
        self.validate_output(file)?;
        self.validate_curves(file)?;
        self.validate_smoothing(file)
    }

    /// Checks against an input: its channel count and sample rate.
    pub fn check_input(
        &self,
        what: &str,
        channels: usize,
        sample_rate_hz: u32,
    ) -> Result<(), ConfigError> {
        let file = what.to_string();
        if sample_rate_hz != self.audio.sample_rate_hz {
            return Err(ConfigError::new(
                file,
                "audio.sample_rate_hz",
                format!(
                    "the configuration says {} Hz but the input runs at {sample_rate_hz} Hz",
                    self.audio.sample_rate_hz
                ),
                format!("set audio.sample_rate_hz = {sample_rate_hz}, or resample the input"),
            ));
        }
        if channels != self.input_channels() {
            return Err(ConfigError::new(
                file,
                "audio.channels",
                format!(
                    "the configuration expects {} input channels but the input has {channels}",
                    self.input_channels()
                ),
                format!(
                    "set audio.channels = {channels} and audio.channel_map to say which channel is which sensor"
                ),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
