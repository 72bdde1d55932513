//! The configuration: one TOML file (plus the files it `include`s, such as a board file and an
//! array file). Loading checks every key and the geometry before any audio is read; every
//! problem is a [`ConfigError`] naming the file, the dotted key and the fix.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::dsp::geometry::{ArrayGeometry, PairMode, Span};
use crate::error::{ConfigError, Error, IoContext, Result};

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
}

/// A board description (files in `boards/`). Informational, plus sizing hints the daemon uses.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BoardConfig {
    pub name: String,
    /// CUDA architecture of the board's GPU, e.g. "sm_87"; empty for a CPU-only board.
    #[serde(default)]
    pub gpu_arch: String,
    /// JetPack release the numbers were chosen for.
    #[serde(default)]
    pub jetpack: String,
    #[serde(default)]
    pub notes: String,
}

/// Tracking mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum TrackMode {
    /// Position and velocity in 3-D (needs four or more non-coplanar sensors).
    #[default]
    #[serde(rename = "3d")]
    ThreeD,
    /// Direction only (azimuth, elevation), for compact arrays whose range is unobservable.
    #[serde(rename = "direction")]
    Direction,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ArrayConfig {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
    /// Sensor positions in metres, in sensor order (see `audio.channel_map`).
    pub sensors_m: Vec<[f64; 3]>,
    /// Speed of sound: about 343 in air at 20 °C, about 1500 in sea water.
    pub speed_of_sound_m_s: f64,
    #[serde(default)]
    pub mode: TrackMode,
    /// Optional search volume (array frame). Tracks outside it are not born; particles outside it
    /// get no weight (a surface at z = 0 above a hydrophone array, the walls of a room).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bounds_min_m: Option<[f64; 3]>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bounds_max_m: Option<[f64; 3]>,
    /// Direction mode: the nearest a newborn track's source may be (metres; default the
    /// array's aperture, at least 1 m). Where the array resolves the wavefront's curvature
    /// there, each particle also carries an inverse range, spread evenly from 0 (a plane wave)
    /// to 1 / this for a newborn track; otherwise (or with `inf`) directions assume plane
    /// waves.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_range_m: Option<f64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SampleFormat {
    #[default]
    I16,
    I32,
    F32,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AudioConfig {
    #[serde(default = "default_rate")]
    pub sample_rate_hz: u32,
    /// Channels in the input (WAV file or capture device). Defaults to the number of sensors.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub channels: Option<usize>,
    /// `channel_map[i]` is the input channel that carries sensor i. Defaults to 0, 1, 2, ...
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub channel_map: Option<Vec<usize>>,
    /// Live capture: ALSA device name (`hw:1,0`, `plughw:CARD=X`, `default`).
    #[serde(default = "default_device")]
    pub device: String,
    /// Live capture: sample format asked of the device.
    #[serde(default)]
    pub sample_format: SampleFormat,
    /// Live capture: ALSA period size in frames.
    #[serde(default = "default_period")]
    pub period_frames: u32,
    /// Live capture: capacity of the ring between the audio callback and the worker.
    #[serde(default = "default_ring_s")]
    pub ring_seconds: f64,
}

fn default_rate() -> u32 {
    48_000
}
fn default_device() -> String {
    "default".into()
}
fn default_period() -> u32 {
    1024
}
fn default_ring_s() -> f64 {
    2.0
}

impl Default for AudioConfig {
    fn default() -> Self {
        Self {
            sample_rate_hz: default_rate(),
            channels: None,
            channel_map: None,
            device: default_device(),
            sample_format: SampleFormat::default(),
            period_frames: default_period(),
            ring_seconds: default_ring_s(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Window {
    #[default]
    Hann,
    Hamming,
    Blackman,
    Rect,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Weighting {
    /// Phase transform: X_a X_b* / (|X_a X_b*|^beta + regulariser).
    #[default]
    Phat,
    /// Plain cross-correlation (no whitening).
    None,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GccConfig {
    /// Samples per frame. Default: the power of two nearest 85 ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub frame_samples: Option<usize>,
    /// Samples between frame starts. Default: half a frame.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hop_samples: Option<usize>,
    #[serde(default)]
    pub window: Window,
    /// Band used for the cross-spectrum, [low, high] in Hz. Default: the whole band.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub band_hz: Option<[f64; 2]>,
    #[serde(default)]
    pub weighting: Weighting,
    /// beta-PHAT exponent: 1 is full PHAT, 0 plain correlation; 0.7-0.9 helps in reverberant rooms.
    #[serde(default = "one")]
    pub beta: f64,
    /// PHAT regulariser, relative to the mean cross-spectrum magnitude in band.
    #[serde(default = "default_reg")]
    pub regularisation: f64,
    /// Peaks kept per pair (the tracker treats all but the true one as clutter).
    #[serde(default = "default_peaks")]
    pub peaks_per_pair: usize,
    #[serde(default = "default_pairs")]
    pub pairs: PairMode,
    /// Reference sensor for `pairs = "reference"`.
    #[serde(default)]
    pub reference: usize,
    /// Zero-pad frames so the correlation is linear rather than circular (twice the FFT work).
    #[serde(default)]
    pub zero_pad: bool,
    /// Raised-cosine taper over the outer 10% of the band at each edge: lower sidelobes, and
    /// unbiased sub-sample peaks even when the band reaches the Nyquist frequency.
    #[serde(default = "yes")]
    pub band_taper: bool,
    /// Two kept peaks of one pair are at least this far apart, in samples.
    #[serde(default = "default_sep")]
    pub min_peak_separation_samples: f64,
}

fn one() -> f64 {
    1.0
}
fn yes() -> bool {
    true
}
fn default_reg() -> f64 {
    1e-3
}
fn default_peaks() -> usize {
    4
}
fn default_pairs() -> PairMode {
    PairMode::All
}
fn default_sep() -> f64 {
    3.0
}

impl Default for GccConfig {
    fn default() -> Self {
        Self {
            frame_samples: None,
            hop_samples: None,
            window: Window::default(),
            band_hz: None,
            weighting: Weighting::default(),
            beta: one(),
            regularisation: default_reg(),
            peaks_per_pair: default_peaks(),
            pairs: default_pairs(),
            reference: 0,
            zero_pad: false,
            band_taper: true,
            min_peak_separation_samples: default_sep(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BackendChoice {
    /// CUDA when the driver, NVRTC and cuFFT load and the kernels compile; else the CPU.
    #[default]
    Auto,
    Cpu,
    Cuda,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ModelSelection {
    /// Jump-Markov: every particle carries a model index that switches by the transition matrix.
    #[default]
    Markov,
    /// The source paper's rule: propagate every particle under every model and keep the model
    /// whose mean predicted TDOAs are closest to the measured ones.
    Nearest,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ModelKind {
    /// Constant velocity with white acceleration noise.
    Cv,
    /// Coordinated turn in the horizontal plane; turn rate is a random walk.
    Ct,
    /// Near-static: velocity decays to zero, position diffuses slowly.
    Static,
}

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
    #[serde(default = "one_usize")]
    pub max_tracks: usize,
    /// A track with no supporting measurement for this long is deleted.
    #[serde(default = "default_delete")]
    pub delete_after_s: f64,
}

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
fn one_usize() -> usize {
    1
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
            max_tracks: one_usize(),
            delete_after_s: default_delete(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SerialFormat {
    /// One JSON object per line, as on every other output.
    #[default]
    Jsonl,
    /// `$PSNTR,...*CS` NMEA-0183-style sentences for small receivers.
    Nmea,
}

/// One output. Several may run at once; each has its own queue and thread.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase", deny_unknown_fields)]
pub enum SinkConfig {
    /// JSON Lines to a file, or to standard output with `path = "-"`.
    Jsonl {
        path: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        max_rate_hz: Option<f64>,
    },
    /// One JSON object per UDP datagram.
    Udp {
        /// `host:port` of the receiver.
        address: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        max_rate_hz: Option<f64>,
    },
    Serial {
        port: String,
        #[serde(default = "default_baud")]
        baud: u32,
        #[serde(default)]
        format: SerialFormat,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        max_rate_hz: Option<f64>,
    },
}

fn default_baud() -> u32 {
    115_200
}

impl SinkConfig {
    /// A short human name: `udp:10.0.0.5:9000`, `serial:/dev/ttyTHS0`, `jsonl:-`.
    pub fn name(&self) -> String {
        match self {
            SinkConfig::Jsonl { path, .. } => format!("jsonl:{path}"),
            SinkConfig::Udp { address, .. } => format!("udp:{address}"),
            SinkConfig::Serial { port, .. } => format!("serial:{port}"),
        }
    }

    pub fn max_rate_hz(&self) -> Option<f64> {
        match self {
            SinkConfig::Jsonl { max_rate_hz, .. }
            | SinkConfig::Udp { max_rate_hz, .. }
            | SinkConfig::Serial { max_rate_hz, .. } => *max_rate_hz,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OutputConfig {
    /// Seconds between status objects (stream time in replay, wall time live).
    #[serde(default = "one")]
    pub status_interval_s: f64,
    /// Outputs (`[[output.sink]]` tables).
    #[serde(default, rename = "sink")]
    pub sinks: Vec<SinkConfig>,
}

impl Default for OutputConfig {
    fn default() -> Self {
        Self {
            status_interval_s: 1.0,
            sinks: Vec::new(),
        }
    }
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
            },
            audio: AudioConfig {
                sample_rate_hz,
                ..AudioConfig::default()
            },
            gcc: GccConfig::default(),
            tracker: TrackerConfig::default(),
            output: OutputConfig::default(),
        }
    }

    /// Load a file (and its includes), parse and validate it.
    pub fn load(path: &Path) -> Result<Self> {
        let file = path.display().to_string();
        let (table, merged) = load_table(path, &mut Vec::new())?;
        if !merged {
            // Parse the user's own text, so that errors point at their lines.
            let text = std::fs::read_to_string(path).at(path)?;
            return Ok(Self::parse_str(&text, &file)?);
        }
        let text = toml::to_string(&table).map_err(|e| {
            ConfigError::new(&file, "(file)", e.to_string(), "check the TOML syntax")
        })?;
        let file = format!("{file} (with its includes)");
        let cfg: Config = toml::from_str(&text).map_err(|e| {
            let mut err = toml_error(&file, &text, &e);
            // Lines of the merged text mean nothing to the user; the key says where.
            if let Some(i) = err.problem.rfind(" (line ") {
                err.problem.truncate(i);
            }
            err
        })?;
        cfg.validate(&file)?;
        Ok(cfg)
    }

    /// Parse and validate TOML text; `file` names it in errors.
    pub fn parse_str(text: &str, file: &str) -> Result<Self, ConfigError> {
        let cfg: Config = toml::from_str(text).map_err(|e| toml_error(file, text, &e))?;
        cfg.validate(file)?;
        Ok(cfg)
    }

    /// Apply `key=value` overrides (dotted keys, TOML values; bare words are strings), e.g.
    /// `gcc.frame_samples=8192` or `tracker.backend=cpu`, and validate the result.
    pub fn with_overrides(&self, sets: &[String]) -> Result<Self, ConfigError> {
        if sets.is_empty() {
            return Ok(self.clone());
        }
        let file = "--set";
        let text = toml::to_string(self)
            .map_err(|e| ConfigError::new(file, "(all)", e.to_string(), "report this as a bug"))?;
        let mut table: toml::Table = toml::from_str(&text)
            .map_err(|e| ConfigError::new(file, "(all)", e.to_string(), "report this as a bug"))?;
        for set in sets {
            let Some((key, value)) = set.split_once('=') else {
                return Err(ConfigError::new(
                    file,
                    set,
                    "not of the form key=value",
                    "write e.g. --set gcc.frame_samples=8192",
                ));
            };
            let key = key.trim();
            let value: toml::Value =
                toml::from_str::<toml::Table>(&format!("v = {}", value.trim()))
                    .ok()
                    .and_then(|mut t| t.remove("v"))
                    .unwrap_or_else(|| toml::Value::String(value.trim().to_string()));
            let parts: Vec<&str> = key.split('.').collect();
            let mut cur = &mut table;
            for part in &parts[..parts.len() - 1] {
                let entry = cur
                    .entry(part.to_string())
                    .or_insert_with(|| toml::Value::Table(toml::Table::new()));
                cur = match entry {
                    toml::Value::Table(t) => t,
                    _ => {
                        return Err(ConfigError::new(
                            file,
                            key,
                            format!("`{part}` is not a table"),
                            "set a key inside a table, e.g. gcc.frame_samples",
                        ));
                    }
                };
            }
            cur.insert(parts[parts.len() - 1].to_string(), value);
        }
        let text = toml::to_string(&table)
            .map_err(|e| ConfigError::new(file, "(all)", e.to_string(), "report this as a bug"))?;
        Config::parse_str(&text, file)
    }

    /// Direction mode: the nearest range (m) a newborn track allows for
    /// (`array.min_range_m`; default the aperture, and at least 1 m), and the wavefront's
    /// curvature there against the tracker's TDOA noise floor, both as path differences (m):
    /// max |d|² / 2r over the sensors d (relative to the centroid), and
    /// `tdoa_std_samples` × c / fs.
    pub fn direction_curvature(&self) -> (f64, f64, f64) {
        let geo = self.geometry();
        let r = self
            .array
            .min_range_m
            .unwrap_or_else(|| geo.aperture_m().max(1.0));
        let c = geo.centroid();
        let d2 = (0..geo.len())
            .map(|i| (geo.sensor(i) - c).norm_squared())
            .fold(0.0, f64::max);
        let noise =
            self.tracker.tdoa_std_samples * self.array.speed_of_sound_m_s / self.sample_rate_hz();
        (r, d2 / (2.0 * r), noise)
    }

    /// Direction mode: the largest inverse range (1/m) a newborn track's particles start with
    /// (see [`Self::direction_curvature`]); 0 for plane waves (`min_range_m = inf`, or an array
    /// too small to resolve the curvature at that range: its particles then stay on the unit
    /// sphere) and in 3-D mode.
    pub fn direction_inv_range_max(&self) -> f64 {
        if self.array.mode != TrackMode::Direction {
            return 0.0;
        }
        let (r, curvature, noise) = self.direction_curvature();
        if r.is_finite() && r > 0.0 && curvature >= noise {
            1.0 / r
        } else {
            0.0
        }
    }

    pub fn geometry(&self) -> ArrayGeometry {
        ArrayGeometry::new(self.array.sensors_m.clone(), self.array.speed_of_sound_m_s)
    }

    pub fn sample_rate_hz(&self) -> f64 {
        f64::from(self.audio.sample_rate_hz)
    }

    pub fn input_channels(&self) -> usize {
        self.audio.channels.unwrap_or(self.array.sensors_m.len())
    }

    /// `channel_map`, or the identity.
    pub fn channel_map(&self) -> Vec<usize> {
        self.audio
            .channel_map
            .clone()
            .unwrap_or_else(|| (0..self.array.sensors_m.len()).collect())
    }

    pub fn frame_samples(&self) -> usize {
        self.gcc.frame_samples.unwrap_or_else(|| {
            // The power of two nearest 85 ms (4096 at 48 kHz, 1024 at 16 kHz): long enough for
            // sub-sample TDOAs at modest SNR, short enough that a moving source smears its TDOA
            // by little within one frame. The tracker integrates over frames.
            let target = 0.085 * self.sample_rate_hz();
            let lo = 2f64.powf(target.log2().floor());
            let hi = lo * 2.0;
            let n = if target / lo < hi / target { lo } else { hi };
            (n as usize).max(64)
        })
    }

    pub fn hop_samples(&self) -> usize {
        self.gcc
            .hop_samples
            .unwrap_or_else(|| (self.frame_samples() / 2).max(1))
    }

    pub fn band_hz(&self) -> [f64; 2] {
        self.gcc
            .band_hz
            .unwrap_or([0.0, self.sample_rate_hz() / 2.0])
    }

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

    /// Every check that needs only the configuration itself.
    pub fn validate(&self, file: &str) -> Result<(), ConfigError> {
        let err =
            |key: &str, problem: String, fix: &str| Err(ConfigError::new(file, key, problem, fix));
        let a = &self.array;
        let n = a.sensors_m.len();
        if !(50.0..=10_000.0).contains(&a.speed_of_sound_m_s) {
            return err(
                "array.speed_of_sound_m_s",
                format!("{} m/s is not a speed of sound", a.speed_of_sound_m_s),
                "use about 343 for air at 20 °C, about 1500 for sea water",
            );
        }
        if let Some(i) = a
            .sensors_m
            .iter()
            .position(|s| s.iter().any(|v| !v.is_finite()))
        {
            return err(
                "array.sensors_m",
                format!("sensor {i} has a non-finite coordinate"),
                "give every sensor three finite coordinates in metres",
            );
        }
        for i in 0..n {
            for j in i + 1..n {
                let d = self.geometry().distance(i, j);
                if d < 1e-3 {
                    return err(
                        "array.sensors_m",
                        format!("sensors {i} and {j} are at the same place ({d:.4} m apart)"),
                        "each sensor needs its own position; remove the duplicate",
                    );
                }
            }
        }
        let span = self.geometry().span();
        match a.mode {
            TrackMode::ThreeD => {
                if n < 4 {
                    return err(
                        "array.sensors_m",
                        format!("3-D tracking needs at least 4 sensors, the array has {n}"),
                        "add sensors, or set array.mode = \"direction\" for bearings only",
                    );
                }
                if span != Span::Volume {
                    let s = self.geometry().spread_m();
                    return err(
                        "array.sensors_m",
                        format!(
                            "the sensors are {}: spread {:.3} / {:.3} / {:.3} m along the principal axes, so 3-D positions are ambiguous",
                            match span {
                                Span::Plane => "(nearly) coplanar",
                                Span::Line => "(nearly) collinear",
                                _ => "all at one point",
                            },
                            s[0],
                            s[1],
                            s[2]
                        ),
                        "move at least one sensor out of the plane (by 2% of the aperture or more), or set array.mode = \"direction\"",
                    );
                }
            }
            TrackMode::Direction => {
                if n < 3 || matches!(span, Span::Point | Span::Line) {
                    return err(
                        "array.sensors_m",
                        format!(
                            "direction tracking needs at least 3 sensors not on one line (have {n}, {span:?})"
                        ),
                        "add a sensor off the line",
                    );
                }
            }
        }
        if let Some(r) = a.min_range_m {
            if a.mode != TrackMode::Direction {
                return err(
                    "array.min_range_m",
                    "min_range_m applies only to direction tracking".into(),
                    "remove it, or set array.mode = \"direction\"",
                );
            }
            if !(r > 0.0) {
                return err(
                    "array.min_range_m",
                    format!("{r} m is not a range"),
                    "give the nearest range a source may be at, in metres (inf for plane waves)",
                );
            }
        }
        match (a.bounds_min_m, a.bounds_max_m) {
            (Some(lo), Some(hi)) => {
                if (0..3).any(|k| !(lo[k] < hi[k])) {
                    return err(
                        "array.bounds_min_m",
                        format!(
                            "bounds_min_m {lo:?} is not below bounds_max_m {hi:?} on every axis"
                        ),
                        "give the lower corner in bounds_min_m and the upper corner in bounds_max_m",
                    );
                }
            }
            (None, None) => {}
            _ => {
                return err(
                    "array.bounds_min_m",
                    "only one of bounds_min_m and bounds_max_m is set".into(),
                    "set both corners of the search volume, or neither",
                );
            }
        }

        let fs = self.audio.sample_rate_hz;
        if !(1000..=2_000_000).contains(&fs) {
            return err(
                "audio.sample_rate_hz",
                format!("{fs} Hz is outside 1 kHz .. 2 MHz"),
                "give the recording's or device's sample rate",
            );
        }
        let ch = self.input_channels();
        if ch == 0 {
            return err(
                "audio.channels",
                "0 channels".into(),
                "give the input's channel count",
            );
        }
        match &self.audio.channel_map {
            None if ch != n => {
                return err(
                    "audio.channel_map",
                    format!(
                        "the input has {ch} channels and the array {n} sensors, and no channel map says which channel is which sensor"
                    ),
                    "add audio.channel_map = [c0, c1, ...] with one input channel per sensor",
                );
            }
            Some(map) => {
                if map.len() != n {
                    return err(
                        "audio.channel_map",
                        format!("{} entries for {n} sensors", map.len()),
                        "give exactly one input channel per sensor, in sensor order",
                    );
                }
                if let Some(&c) = map.iter().find(|&&c| c >= ch) {
                    return err(
                        "audio.channel_map",
                        format!(
                            "channel {c} does not exist: the input has channels 0..{}",
                            ch - 1
                        ),
                        "use channel numbers from 0 to audio.channels - 1",
                    );
                }
                let mut seen = map.clone();
                seen.sort_unstable();
                seen.dedup();
                if seen.len() != map.len() {
                    return err(
                        "audio.channel_map",
                        "an input channel is mapped to two sensors".into(),
                        "each sensor needs its own input channel",
                    );
                }
            }
            None => {}
        }
        if !(self.audio.ring_seconds > 0.05 && self.audio.ring_seconds <= 60.0) {
            return err(
                "audio.ring_seconds",
                format!("{} s", self.audio.ring_seconds),
                "use 0.1 to 60 seconds (2 is the default)",
            );
        }
        if self.audio.period_frames == 0 {
            return err(
                "audio.period_frames",
                "0".into(),
                "use an ALSA period of e.g. 256 to 4096 frames",
            );
        }

        let g = &self.gcc;
        let frame = self.frame_samples();
        if !(64..=1 << 20).contains(&frame) {
            return err(
                "gcc.frame_samples",
                format!("{frame} samples"),
                "use 64 to 1048576 samples (a power of two is fastest)",
            );
        }
        let hop = self.hop_samples();
        if hop == 0 || hop > 16 * frame {
            return err(
                "gcc.hop_samples",
                format!("{hop} samples for a {frame}-sample frame"),
                "use a hop between 1 sample and a few frames (half a frame is the default)",
            );
        }
        let max_lag = self.geometry().aperture_m() / a.speed_of_sound_m_s * f64::from(fs);
        if 2.0 * max_lag + 8.0 >= frame as f64 {
            return err(
                "gcc.frame_samples",
                format!(
                    "{frame} samples cannot hold the largest possible TDOA of this array ({max_lag:.0} samples either way)"
                ),
                &format!(
                    "use gcc.frame_samples = {} or more",
                    (2.0 * max_lag + 8.0).ceil().max(64.0) as usize
                ),
            );
        }
        let band = self.band_hz();
        if !(band[0] >= 0.0 && band[0] < band[1] && band[1] <= f64::from(fs) / 2.0 + 1e-9) {
            return err(
                "gcc.band_hz",
                format!("[{}, {}] Hz", band[0], band[1]),
                &format!(
                    "give [low, high] with 0 <= low < high <= {} (half the sample rate)",
                    fs / 2
                ),
            );
        }
        let bins = (band[1] - band[0]) / f64::from(fs) * frame as f64;
        if bins < 8.0 {
            return err(
                "gcc.band_hz",
                format!("the band holds only {bins:.1} FFT bins"),
                "widen the band or lengthen the frame",
            );
        }
        if !(0.0..=1.0).contains(&g.beta) {
            return err(
                "gcc.beta",
                format!("{}", g.beta),
                "use 0 (plain correlation) to 1 (full PHAT)",
            );
        }
        if !(g.regularisation >= 0.0 && g.regularisation < 10.0) {
            return err(
                "gcc.regularisation",
                format!("{}", g.regularisation),
                "use 0 to 1 (1e-3 is the default)",
            );
        }
        if !(1..=16).contains(&g.peaks_per_pair) {
            return err(
                "gcc.peaks_per_pair",
                format!("{}", g.peaks_per_pair),
                "use 1 to 16",
            );
        }
        if g.reference >= n {
            return err(
                "gcc.reference",
                format!("sensor {} does not exist (the array has {n})", g.reference),
                "use a sensor index from 0",
            );
        }
        if !(g.min_peak_separation_samples >= 1.0) {
            return err(
                "gcc.min_peak_separation_samples",
                format!("{}", g.min_peak_separation_samples),
                "use 1 or more",
            );
        }

        let t = &self.tracker;
        if !(64..=1 << 26).contains(&t.particles) {
            return err(
                "tracker.particles",
                format!("{}", t.particles),
                "use 64 to 67108864 particles per track",
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
                if row.iter().any(|&p| !(0.0..=1.0).contains(&p)) || (s - 1.0).abs() > 1e-6 {
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
        if !(t.delete_after_s > 0.0) {
            return err(
                "tracker.delete_after_s",
                format!("{}", t.delete_after_s),
                "use a positive number of seconds",
            );
        }

        let o = &self.output;
        if !(o.status_interval_s > 0.0) {
            return err(
                "output.status_interval_s",
                format!("{}", o.status_interval_s),
                "use a positive number of seconds",
            );
        }
        for (i, s) in o.sinks.iter().enumerate() {
            if let Some(r) = s.max_rate_hz() {
                if !(r > 0.0) {
                    return err(
                        &format!("output.sink[{i}].max_rate_hz"),
                        format!("{r}"),
                        "use a positive rate, or leave it out for no limit",
                    );
                }
            }
            match s {
                SinkConfig::Udp { address, .. } if !address.contains(':') => {
                    return err(
                        &format!("output.sink[{i}].address"),
                        format!("`{address}` has no port"),
                        "write host:port, e.g. \"192.168.1.20:5005\"",
                    );
                }
                SinkConfig::Serial { baud, .. } if *baud == 0 => {
                    return err(
                        &format!("output.sink[{i}].baud"),
                        "0".into(),
                        "use the receiver's baud rate, e.g. 115200",
                    );
                }
                SinkConfig::Jsonl { path, .. } if path.is_empty() => {
                    return err(
                        &format!("output.sink[{i}].path"),
                        "empty".into(),
                        "give a file path, or \"-\" for standard output",
                    );
                }
                _ => {}
            }
        }
        Ok(())
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

    /// A human explanation of what this configuration will do (for `sonotrack check`).
    pub fn explain(&self) -> String {
        use std::fmt::Write;
        let mut s = String::new();
        let geo = self.geometry();
        let fs = self.sample_rate_hz();
        let c = self.array.speed_of_sound_m_s;
        if let Some(b) = &self.board {
            let _ = writeln!(
                s,
                "board: {} (GPU {}, JetPack {})",
                b.name,
                if b.gpu_arch.is_empty() {
                    "none"
                } else {
                    &b.gpu_arch
                },
                b.jetpack
            );
        }
        let spread = geo.spread_m();
        let _ = writeln!(
            s,
            "array: {} sensors, aperture {:.3} m, spread {:.3}/{:.3}/{:.3} m ({:?}), c = {c} m/s, mode {}",
            geo.len(),
            geo.aperture_m(),
            spread[0],
            spread[1],
            spread[2],
            geo.span(),
            match self.array.mode {
                TrackMode::ThreeD => "3-D position",
                TrackMode::Direction => "direction only",
            }
        );
        if let (Some(lo), Some(hi)) = (self.array.bounds_min_m, self.array.bounds_max_m) {
            let _ = writeln!(s, "search volume: {lo:?} .. {hi:?} m");
        }
        if self.array.mode == TrackMode::Direction {
            let (r, curvature, noise) = self.direction_curvature();
            let _ = if self.direction_inv_range_max() > 0.0 {
                writeln!(
                    s,
                    "directions allow for the wavefront's curvature: a new track's ranges start from {r:.2} m out (array.min_range_m), where the curvature ({:.1} mm) exceeds the TDOA noise floor ({:.1} mm)",
                    curvature * 1e3,
                    noise * 1e3
                )
            } else {
                writeln!(
                    s,
                    "directions assume plane waves: the curvature at {r:.2} m (array.min_range_m) is {:.2} mm, below the TDOA noise floor ({:.1} mm)",
                    curvature * 1e3,
                    noise * 1e3
                )
            };
        }
        let _ = writeln!(
            s,
            "audio: {} Hz, {} input channels, sensor i <- channel {:?}",
            self.audio.sample_rate_hz,
            self.input_channels(),
            self.channel_map()
        );
        let frame = self.frame_samples();
        let hop = self.hop_samples();
        let band = self.band_hz();
        let pairs = geo.pairs(self.gcc.pairs, self.gcc.reference);
        let _ = writeln!(
            s,
            "gcc: frame {frame} samples ({:.1} ms), hop {hop} ({:.1} ms, {:.1} frames/s), {:?} window, {:?} beta {} band {:.0}-{:.0} Hz, {} pairs ({:?}), {} peaks each",
            frame as f64 / fs * 1e3,
            hop as f64 / fs * 1e3,
            fs / hop as f64,
            self.gcc.window,
            self.gcc.weighting,
            self.gcc.beta,
            band[0],
            band[1],
            pairs.len(),
            self.gcc.pairs,
            self.gcc.peaks_per_pair
        );
        let _ = writeln!(
            s,
            "  one sample of TDOA = {:.4} m of range difference; largest pair lag {:.1} samples",
            c / fs,
            pairs.iter().map(|p| p.max_tdoa_s).fold(0.0, f64::max) * fs
        );
        let t = &self.tracker;
        let names: Vec<_> = t
            .models
            .iter()
            .map(|m| format!("{}({:?})", m.name, m.kind))
            .collect();
        let _ = writeln!(
            s,
            "tracker: backend {:?}, {} particles, models {} ({:?} selection), TDOA std {} samples, Pd {}, max speed {} m/s, seed {}",
            t.backend,
            t.particles,
            names.join(", "),
            t.model_selection,
            t.tdoa_std_samples,
            t.detection_probability,
            t.max_speed_m_s,
            t.seed
        );
        if self.output.sinks.is_empty() {
            let _ = writeln!(s, "outputs: none configured");
        }
        for sink in &self.output.sinks {
            let _ = writeln!(s, "output: {}", sink.name());
        }
        s
    }
}

/// Read a TOML file into a table, merging its `include`s underneath it. The flag says whether
/// anything was merged.
fn load_table(path: &Path, stack: &mut Vec<PathBuf>) -> Result<(toml::Table, bool)> {
    let file = path.display().to_string();
    let canon = path.canonicalize().at(path)?;
    if stack.contains(&canon) {
        return Err(ConfigError::new(
            &file,
            "include",
            "the file includes itself (directly or through others)",
            "remove the cycle",
        )
        .into());
    }
    let text = std::fs::read_to_string(path).at(path)?;
    let mut table: toml::Table =
        toml::from_str(&text).map_err(|e| Error::Config(toml_error(&file, &text, &e)))?;
    let includes = match table.get("include") {
        None => Vec::new(),
        Some(toml::Value::Array(a)) => a
            .iter()
            .map(|v| {
                v.as_str().map(str::to_string).ok_or_else(|| {
                    ConfigError::new(
                        &file,
                        "include",
                        "entries must be strings",
                        "write include = [\"../boards/agx-orin.toml\"]",
                    )
                })
            })
            .collect::<Result<Vec<_>, _>>()?,
        Some(_) => {
            return Err(ConfigError::new(
                &file,
                "include",
                "must be a list of paths",
                "write include = [\"../boards/agx-orin.toml\"]",
            )
            .into());
        }
    };
    table.remove("include");
    if includes.is_empty() {
        return Ok((table, false));
    }
    stack.push(canon);
    let dir = path.parent().unwrap_or_else(|| Path::new("."));
    let mut base = toml::Table::new();
    for inc in includes {
        let (sub, _) = load_table(&dir.join(&inc), stack)?;
        merge(&mut base, sub);
    }
    stack.pop();
    merge(&mut base, table);
    Ok((base, true))
}

/// Edit distance, for suggesting the key a user probably meant.
fn levenshtein(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            cur[j + 1] = (prev[j] + usize::from(ca != *cb))
                .min(prev[j + 1] + 1)
                .min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

/// Merge `over` into `base`: tables merge key by key, everything else (arrays too) replaces.
fn merge(base: &mut toml::Table, over: toml::Table) {
    for (k, v) in over {
        match (base.get_mut(&k), v) {
            (Some(toml::Value::Table(b)), toml::Value::Table(o)) => merge(b, o),
            (_, v) => {
                base.insert(k, v);
            }
        }
    }
}

/// Turn a TOML/serde error into a ConfigError with the dotted key where it can be found.
fn toml_error(file: &str, text: &str, e: &toml::de::Error) -> ConfigError {
    let msg = e.message().to_string();
    let (line, section) = match e.span() {
        Some(span) => {
            let before = &text[..span.start.min(text.len())];
            let line = before.matches('\n').count() + 1;
            // The nearest table header above the error is the key's parent.
            let section = before
                .lines()
                .rev()
                .map(str::trim)
                .find(|l| l.starts_with('['))
                .map(|l| l.trim_matches(|c| c == '[' || c == ']').trim().to_string());
            (Some(line), section)
        }
        None => (None, None),
    };
    let field = msg.split('`').nth(1).map(str::to_string).filter(|_| {
        msg.starts_with("unknown field")
            || msg.starts_with("missing field")
            || msg.starts_with("unknown variant")
    });
    let key = match (&section, &field) {
        (Some(s), Some(f)) if msg.starts_with("unknown variant") => {
            s.clone() + " (value `" + f + "`)"
        }
        (Some(s), Some(f)) => format!("{s}.{f}"),
        (None, Some(f)) => f.clone(),
        (Some(s), None) => s.clone(),
        (None, None) => "(file)".into(),
    };
    let missing = msg.starts_with("missing field");
    // For a misspelt key, the accepted key closest to it.
    let suggestion = field.as_ref().and_then(|f| {
        let expected = msg.split("expected").nth(1)?;
        expected
            .split('`')
            .skip(1)
            .step_by(2)
            .map(|k| (levenshtein(f, k), k))
            .filter(|(d, _)| *d <= 3)
            .min_by_key(|(d, _)| *d)
            .map(|(_, k)| k.to_string())
    });
    let unknown_fix;
    let fix = if msg.starts_with("unknown field") {
        unknown_fix = match &suggestion {
            Some(k) => format!("did you mean `{k}`? (the message lists the keys this table accepts)"),
            None => "remove the key or correct its spelling (the message lists the keys this table accepts)".to_string(),
        };
        unknown_fix.as_str()
    } else if missing && key == "array" {
        "add an [array] table (sensor positions and speed of sound); a board file is not a configuration by itself: include it from one, e.g. include = [\"boards/orin-nx.toml\"] (see boards/examples/)"
    } else if missing {
        "add the key (see the configuration reference in README.md)"
    } else if msg.starts_with("unknown variant") {
        "use one of the values the message lists"
    } else {
        "correct the value's type or the TOML syntax at that line"
    };
    // A missing key has no line of its own (the parser points at the table's start).
    let at = line
        .filter(|_| !missing)
        .map(|l| format!(" (line {l})"))
        .unwrap_or_default();
    ConfigError::new(file, key, format!("{msg}{at}"), fix)
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
[array]
sensors_m = [[0,0,-6],[24,-3,-14],[6,21,-9],[-14,9,-20],[9,6,-28]]
speed_of_sound_m_s = 1500.0
[audio]
sample_rate_hz = 48000
"#;

    #[test]
    fn good_config_parses_with_defaults() {
        let c = Config::parse_str(GOOD, "t.toml").unwrap();
        assert_eq!(c.frame_samples(), 4096);
        assert_eq!(c.hop_samples(), 2048);
        assert_eq!(c.band_hz(), [0.0, 24_000.0]);
        assert_eq!(c.tracker.models.len(), 4);
        let t = c.transition_matrix();
        for row in &t {
            assert!((row.iter().sum::<f64>() - 1.0).abs() < 1e-12);
        }
        assert!(c.explain().contains("5 sensors"));
    }

    #[test]
    fn default_frame_tracks_sample_rate() {
        let mut c = Config::parse_str(GOOD, "t").unwrap();
        c.audio.sample_rate_hz = 16_000;
        assert_eq!(c.frame_samples(), 1024);
        c.audio.sample_rate_hz = 44_100;
        assert_eq!(c.frame_samples(), 4096);
    }

    #[test]
    fn unknown_key_names_the_key() {
        let e = Config::parse_str(&format!("{GOOD}\n[gcc]\nframe = 4096\n"), "t.toml").unwrap_err();
        assert_eq!(e.key, "gcc.frame");
        assert!(e.problem.contains("unknown field"), "{e}");
        assert!(e.problem.contains("line"), "{e}");
    }

    #[test]
    fn unknown_top_level_table() {
        let e = Config::parse_str(&format!("{GOOD}\n[gccc]\nx = 1\n"), "t.toml").unwrap_err();
        assert!(e.problem.contains("gccc"), "{e}");
    }

    #[test]
    fn bad_enum_value() {
        let e = Config::parse_str(&format!("{GOOD}\n[gcc]\nwindow = \"kaiser\"\n"), "t.toml")
            .unwrap_err();
        assert!(e.key.starts_with("gcc"), "{e}");
        assert!(e.problem.contains("kaiser"), "{e}");
    }

    #[test]
    fn coplanar_array_is_refused_for_3d() {
        let text = r#"
[array]
sensors_m = [[0,0,0],[1,0,0],[0,1,0],[1,1,0]]
speed_of_sound_m_s = 343
[audio]
sample_rate_hz = 16000
"#;
        let e = Config::parse_str(text, "t.toml").unwrap_err();
        assert_eq!(e.key, "array.sensors_m");
        assert!(e.problem.contains("coplanar"), "{e}");
        assert!(e.fix.contains("direction"), "{e}");
        let ok = text.replace(
            "speed_of_sound_m_s = 343",
            "speed_of_sound_m_s = 343\nmode = \"direction\"",
        );
        Config::parse_str(&ok, "t.toml").unwrap();
    }

    /// `array.min_range_m`: direction mode only, a positive range or `inf`; it sets the largest
    /// inverse range a newborn track's particles start with (the aperture by default).
    #[test]
    fn min_range_checks() {
        let base = "[array]\nsensors_m = [[0,0,0],[2,0,0],[1,1.732,0],[1,0.577,1.633]]\nspeed_of_sound_m_s = 1500\nmode = \"direction\"\n";
        let tail = "[audio]\nsample_rate_hz = 48000\n";
        let c = Config::parse_str(&format!("{base}{tail}"), "t.toml").unwrap();
        assert!(
            (c.direction_inv_range_max() - 0.5).abs() < 1e-3,
            "the aperture, 2 m"
        );
        let c = Config::parse_str(&format!("{base}min_range_m = 8\n{tail}"), "t.toml").unwrap();
        assert!((c.direction_inv_range_max() - 0.125).abs() < 1e-12);
        let c = Config::parse_str(&format!("{base}min_range_m = inf\n{tail}"), "t.toml").unwrap();
        assert_eq!(c.direction_inv_range_max(), 0.0);
        for bad in ["0", "-3", "nan"] {
            let e = Config::parse_str(&format!("{base}min_range_m = {bad}\n{tail}"), "t.toml")
                .unwrap_err();
            assert_eq!(e.key, "array.min_range_m", "{bad}: {e}");
        }
        let three_d = base.replace("mode = \"direction\"\n", "");
        let e =
            Config::parse_str(&format!("{three_d}min_range_m = 8\n{tail}"), "t.toml").unwrap_err();
        assert_eq!(e.key, "array.min_range_m");
        assert!(e.fix.contains("direction"), "{e}");
        // A 10 cm microphone circle cannot resolve the curvature at its default nearest range
        // (1 m: 1.25 mm against half a sample, 3.6 mm): plane waves. At 0.2 m it can.
        let mics = "[array]\nsensors_m = [[0.05,0,0],[0,0.05,0],[-0.05,0,0],[0,-0.05,0]]\nspeed_of_sound_m_s = 343\nmode = \"direction\"\n";
        let c = Config::parse_str(&format!("{mics}{tail}"), "t.toml").unwrap();
        assert_eq!(c.direction_inv_range_max(), 0.0);
        assert!(c.explain().contains("plane waves"), "{}", c.explain());
        let c = Config::parse_str(&format!("{mics}min_range_m = 0.2\n{tail}"), "t.toml").unwrap();
        assert!((c.direction_inv_range_max() - 5.0).abs() < 1e-9);
    }

    #[test]
    fn too_few_sensors() {
        let text = "[array]\nsensors_m = [[0,0,0],[1,0,0],[0,1,1]]\nspeed_of_sound_m_s = 343\n[audio]\nsample_rate_hz = 16000\n";
        let e = Config::parse_str(text, "t.toml").unwrap_err();
        assert!(e.problem.contains("at least 4"), "{e}");
    }

    #[test]
    fn channel_map_checks() {
        let e = Config::parse_str(
            &GOOD.replace(
                "sample_rate_hz = 48000",
                "sample_rate_hz = 48000\nchannels = 8",
            ),
            "t",
        )
        .unwrap_err();
        assert_eq!(e.key, "audio.channel_map");
        Config::parse_str(
            &GOOD.replace(
                "sample_rate_hz = 48000",
                "sample_rate_hz = 48000\nchannels = 8\nchannel_map = [7,6,5,4,3]",
            ),
            "t",
        )
        .unwrap();
        let e = Config::parse_str(
            &GOOD.replace(
                "sample_rate_hz = 48000",
                "sample_rate_hz = 48000\nchannels = 8\nchannel_map = [7,6,5,4,8]",
            ),
            "t",
        )
        .unwrap_err();
        assert!(e.problem.contains("channel 8"), "{e}");
    }

    #[test]
    fn input_mismatch_names_key_and_fix() {
        let c = Config::parse_str(GOOD, "t").unwrap();
        let e = c.check_input("x.wav", 4, 48_000).unwrap_err();
        assert_eq!(e.key, "audio.channels");
        let e = c.check_input("x.wav", 5, 44_100).unwrap_err();
        assert_eq!(e.key, "audio.sample_rate_hz");
        assert!(e.fix.contains("44100"));
    }

    #[test]
    fn frame_too_short_for_array() {
        let e =
            Config::parse_str(&format!("{GOOD}\n[gcc]\nframe_samples = 1024\n"), "t").unwrap_err();
        assert_eq!(e.key, "gcc.frame_samples");
        assert!(e.fix.contains("or more"), "{e}");
    }

    #[test]
    fn sinks_parse_and_reject_unknown_keys() {
        let c = Config::parse_str(
            &format!("{GOOD}\n[[output.sink]]\nkind = \"udp\"\naddress = \"127.0.0.1:5005\"\n[[output.sink]]\nkind = \"serial\"\nport = \"/dev/ttyUSB0\"\nformat = \"nmea\"\n"),
            "t",
        )
        .unwrap();
        assert_eq!(c.output.sinks.len(), 2);
        let e = Config::parse_str(&format!("{GOOD}\n[[output.sink]]\nkind = \"udp\"\naddress = \"127.0.0.1:5005\"\nbaud = 9600\n"), "t")
            .unwrap_err();
        assert!(e.problem.contains("baud"), "{e}");
    }

    #[test]
    fn overrides_apply_and_are_validated() {
        let c = Config::parse_str(GOOD, "t").unwrap();
        let d = c
            .with_overrides(&[
                "gcc.frame_samples=8192".into(),
                "tracker.backend=cpu".into(),
                "gcc.band_hz=[100.0, 9000.0]".into(),
            ])
            .unwrap();
        assert_eq!(d.frame_samples(), 8192);
        assert_eq!(d.tracker.backend, BackendChoice::Cpu);
        assert_eq!(d.band_hz(), [100.0, 9000.0]);
        let e = c.with_overrides(&["gcc.framesize=1".into()]).unwrap_err();
        assert!(e.problem.contains("framesize"), "{e}");
        assert!(c.with_overrides(&["nokey".into()]).is_err());
    }

    #[test]
    fn includes_merge_under_the_file() {
        let dir = std::env::temp_dir().join(format!("sonotrack-cfg-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("board.toml"),
            "[tracker]\nparticles = 4096\nseed = 9\n[board]\nname = \"x\"\n",
        )
        .unwrap();
        std::fs::write(
            dir.join("main.toml"),
            format!("include = [\"board.toml\"]\n{GOOD}\n[tracker]\nseed = 3\n"),
        )
        .unwrap();
        let c = Config::load(&dir.join("main.toml")).unwrap();
        assert_eq!(c.tracker.particles, 4096);
        assert_eq!(c.tracker.seed, 3);
        assert_eq!(c.board.unwrap().name, "x");
        std::fs::write(dir.join("loop.toml"), "include = [\"loop.toml\"]\n").unwrap();
        assert!(Config::load(&dir.join("loop.toml")).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
