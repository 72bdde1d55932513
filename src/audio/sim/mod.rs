//! Scene simulator: a user feature (plan an array before a deployment), the test data factory,
//! and the scenes of `sonotrack trial`'s families. Free field by default; a shoebox room adds
//! its reflections ([`room`]); faults and events ([`faults`]) and sources that start, stop and
//! pause make scenes harder.
//!
//! Propagation is exact retarded time: the sample a sensor records at time t was emitted at the
//! τ solving `t = τ + |p(τ) - m| / c`, found by fixed-point iteration (it contracts by |v|/c per
//! step), so Doppler and 1/r spreading come out right. The source signal is read at τ with a
//! Kaiser-windowed sinc (half-width 16, tabulated at 1024 phases with linear interpolation
//! between them), and every source signal is band-limited to 0.42 fs so that interpolation is
//! accurate. White sensor noise is set from the target SNR after a first, noise-free pass.
//!
//! The simulator streams: it keeps only a window of each source's signal, so a long scene needs
//! constant memory. It is an [`AudioSource`], so `sonotrack demo` replays a scene without files.

pub mod family;
pub mod faults;
mod path;
mod presets;
pub mod room;
mod scene_dir;
mod signal;
pub mod site;

use std::path::Path;

use serde::{Deserialize, Serialize};

pub use faults::FaultSpec;
pub use path::{ArrayTurn, Leg, PathSpec};
pub use presets::PRESETS;
pub use room::RoomSpec;
pub use scene_dir::write_scene;
pub use signal::SignalKind;
pub use site::{OtherArray, write_site};

use crate::audio::{AudioSource, ReadResult};
use crate::error::{Error, IoContext, Result};
use crate::math::interp::{SincKernel, SincTable};
use crate::rng::philox::{PhiloxStream, Stream};
use faults::Faults;
use room::Reverb;
use signal::SignalGen;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SourceSpec {
    pub signal: SignalKind,
    /// RMS amplitude at 1 m (relative; only ratios between sources matter, the file is
    /// normalised).
    #[serde(default = "unit")]
    pub level: f64,
    pub path: PathSpec,
    /// When the source sounds: [start, end] intervals in seconds (empty: throughout). Between
    /// them it is silent, with 10 ms ramps, and absent from the truth.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub active: Vec<[f64; 2]>,
}

/// Length of the fade in and out at an active interval's ends, seconds.
const FADE_S: f64 = 0.01;

impl SourceSpec {
    /// Whether the source sounds at `t` (emission time).
    pub fn is_active(&self, t: f64) -> bool {
        self.active.is_empty() || self.active.iter().any(|[a, b]| t >= *a && t <= *b)
    }

    /// The signal's gain at emission time `t`: 1 inside an active interval, 0 outside, with
    /// raised-cosine fades at the ends.
    fn gate(&self, t: f64) -> f64 {
        if self.active.is_empty() {
            return 1.0;
        }
        self.active
            .iter()
            .map(|[a, b]| {
                let edge = (t - a).min(b - t);
                if edge <= 0.0 {
                    0.0
                } else if edge >= FADE_S {
                    1.0
                } else {
                    0.5 - 0.5 * (std::f64::consts::PI * edge / FADE_S).cos()
                }
            })
            .fold(0.0, f64::max)
    }
}

/// The mean of some points.
fn centroid_of(pts: &[[f64; 3]]) -> [f64; 3] {
    let n = pts.len().max(1) as f64;
    std::array::from_fn(|k| pts.iter().map(|p| p[k]).sum::<f64>() / n)
}

fn unit() -> f64 {
    1.0
}

/// A scene: array, medium, sources, noise. Written and read as TOML (`sonotrack simulate --spec`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SceneSpec {
    #[serde(default)]
    pub description: String,
    pub sensors_m: Vec<[f64; 3]>,
    pub speed_of_sound_m_s: f64,
    pub sample_rate_hz: u32,
    pub duration_s: f64,
    /// Per-channel broadband SNR in dB: signal power over 1-s blocks / white-noise power over the
    /// whole band; the median over blocks and channels meets this value.
    pub snr_db: f64,
    #[serde(default = "default_sim_seed")]
    pub seed: u64,
    /// Search volume written to array.json.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bounds_min_m: Option<[f64; 3]>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bounds_max_m: Option<[f64; 3]>,
    /// Rows per second in truth.csv.
    #[serde(default = "default_truth_rate")]
    pub truth_rate_hz: f64,
    #[serde(rename = "source", default)]
    pub sources: Vec<SourceSpec>,
    /// A shoebox room around the scene (corner at the origin); none: free field.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub room: Option<RoomSpec>,
    #[serde(default, skip_serializing_if = "FaultSpec::is_none")]
    pub faults: FaultSpec,
    /// A turning array (free field only): `sensors_m` are then its sensors in its own frame,
    /// which turns about their centroid; `heading.csv` gives its heading and `truth.csv` stays
    /// in the scene's frame.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub array_turn: Option<ArrayTurn>,
    /// Where the scene's frame is on the Earth (written to array.json; needed with other
    /// arrays).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<crate::math::geo::Origin>,
    /// More arrays hearing the same scene, each its own audio ([`site`]).
    #[serde(rename = "other_array", default, skip_serializing_if = "Vec::is_empty")]
    pub other_arrays: Vec<OtherArray>,
}

/// Highest truth rate a scene may ask for (rows per second per source).
pub const MAX_TRUTH_RATE_HZ: f64 = 1000.0;
/// Most sources in one scene.
pub const MAX_SOURCES: usize = 64;
/// Most work (source-to-sensor distances and legs walked) the longest-delay search may take
/// (a 30-s scene with 9 sensors and 3 sources takes about 90,000).
pub const MAX_RANGE_WORK: usize = 20_000_000;
/// Most sensors in one scene.
pub const MAX_SCENE_SENSORS: usize = 64;
/// Most memory the simulator's delay lines may take over all sources, bytes (and so the most
/// signal generated before the first sample).
pub const MAX_DELAY_BYTES: f64 = 64.0 * 1024.0 * 1024.0;
/// Sources must move slower than this share of the speed of sound (the retarded-time solution
/// and the fractional delays assume a subsonic source).
pub const MAX_MACH: f64 = 0.5;
/// Longest propagation delay the simulator buffers, samples (87 s at 48 kHz; 16 MiB per
/// source). A scene starts by generating this much of each source's signal.
pub const MAX_DELAY_SAMPLES: f64 = 4_194_304.0;

fn default_sim_seed() -> u64 {
    7
}
fn default_truth_rate() -> f64 {
    20.0
}

impl SceneSpec {
    pub fn load(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).at(path)?;
        let spec: SceneSpec = toml::from_str(&text).map_err(|e| Error::Scene {
            path: path.into(),
            problem: e.to_string(),
            fix: "see `sonotrack simulate --print-preset harbour` for a complete example".into(),
        })?;
        spec.validate().map_err(|problem| Error::Scene {
            path: path.into(),
            problem,
            fix: "correct the scene file".into(),
        })?;
        Ok(spec)
    }

    pub fn validate(&self) -> std::result::Result<(), String> {
        if !(2..=MAX_SCENE_SENSORS).contains(&self.sensors_m.len()) {
            return Err(format!(
                "{} sensors (a scene needs 2 to {MAX_SCENE_SENSORS})",
                self.sensors_m.len()
            ));
        }
        if !(self.duration_s > 0.0 && self.duration_s <= 24.0 * 3600.0) {
            return Err(format!(
                "duration_s = {}: use (0, 86400] s",
                self.duration_s
            ));
        }
        if !(50.0..=10_000.0).contains(&self.speed_of_sound_m_s) {
            return Err(format!("speed_of_sound_m_s = {}", self.speed_of_sound_m_s));
        }
        if !(1000..=1_000_000).contains(&self.sample_rate_hz) {
            return Err(format!("sample_rate_hz = {}", self.sample_rate_hz));
        }
        if !self.snr_db.is_finite() {
            return Err("snr_db must be finite".into());
        }
        if self.sensors_m.iter().flatten().any(|v| !v.is_finite()) {
            return Err("a sensor position is not finite".into());
        }
        if !(self.truth_rate_hz > 0.0 && self.truth_rate_hz <= MAX_TRUTH_RATE_HZ) {
            return Err(format!(
                "truth_rate_hz = {} (use 0 < r <= {MAX_TRUTH_RATE_HZ})",
                self.truth_rate_hz
            ));
        }
        if self.sources.len() > MAX_SOURCES {
            return Err(format!(
                "{} sources (at most {MAX_SOURCES})",
                self.sources.len()
            ));
        }
        for (i, s) in self.sources.iter().enumerate() {
            if !(s.level > 0.0 && s.level.is_finite()) {
                return Err(format!("source {i}: level must be > 0"));
            }
            if let Some(p) = s.path.problem() {
                return Err(format!("source {i}: {p}"));
            }
            let v = s.path.max_speed_m_s();
            if v >= MAX_MACH * self.speed_of_sound_m_s {
                return Err(format!(
                    "source {i}: a speed of {v} m/s (the simulator needs sources slower than \
                     {MAX_MACH} x the speed of sound, {} m/s)",
                    MAX_MACH * self.speed_of_sound_m_s
                ));
            }
            if s.active
                .iter()
                .any(|[a, b]| !(a.is_finite() && b.is_finite() && a <= b))
            {
                return Err(format!(
                    "source {i}: an active interval [start, end] needs finite times with start <= end"
                ));
            }
        }
        if let Some(r) = &self.room {
            if let Some(p) = r.problem() {
                return Err(p);
            }
            if let Some(i) = self.sensors_m.iter().position(|m| !r.contains(m)) {
                return Err(format!(
                    "sensor {i} is outside the room (0..{:?} m)",
                    r.size_m
                ));
            }
        }
        if let Some(turn) = &self.array_turn {
            if let Some(p) = turn.problem() {
                return Err(p);
            }
            if self.room.is_some() {
                return Err(
                    "array_turn: a turning array is simulated in free field only; remove [room]"
                        .into(),
                );
            }
        }
        if let Some(p) = self.faults.problem(self.sensors_m.len()) {
            return Err(p);
        }
        if let Some(p) = self
            .origin
            .as_ref()
            .and_then(crate::math::geo::Origin::problem)
        {
            return Err(format!("origin: {p}"));
        }
        if let Some(p) = site::other_arrays_problem(self) {
            return Err(p);
        }
        let range_m = self.max_range_m();
        let delay_s = range_m / self.speed_of_sound_m_s;
        let delay_samples = delay_s * f64::from(self.sample_rate_hz);
        let delay_bytes = 4.0 * delay_samples * self.sources.len() as f64;
        if !(delay_samples <= MAX_DELAY_SAMPLES && delay_bytes <= MAX_DELAY_BYTES) {
            return Err(format!(
                "a source comes {:.0} m from a sensor, {delay_s:.1} s of travel ({delay_samples:.0} \
                 samples; at most {MAX_DELAY_SAMPLES} are buffered, and 64 MiB over all \
                 sources): keep sources and sensors closer",
                range_m
            ));
        }
        Ok(())
    }

    /// The longest path from a source to a sensor over the scene, m: the paths sampled every
    /// 10 ms; past 1,000 s, or where that would take more than [`MAX_RANGE_WORK`] distances,
    /// fewer samples, with the distance a source can cover between two samples added.
    pub fn max_range_m(&self) -> f64 {
        // Every 10 ms unless that would take more than MAX_RANGE_WORK distances.
        let fine_steps = (self.duration_s * 100.0).ceil() as usize + 1;
        // Work per time step: each source's distances, and the legs walked to place it.
        let legs: usize = self
            .sources
            .iter()
            .map(|s| match &s.path {
                PathSpec::Legs { legs, .. } => legs.len(),
                _ => 1,
            })
            .sum();
        let per_step = (self.sources.len() * self.sensors_m.len() + legs).max(1);
        let fine = self.duration_s <= 1000.0 && fine_steps * per_step <= MAX_RANGE_WORK;
        let steps = if fine {
            fine_steps
        } else {
            (MAX_RANGE_WORK / per_step).clamp(1000, 100_000)
        };
        let step = if fine {
            0.01
        } else {
            self.duration_s / steps as f64
        };
        // A turning array's sensors move about their centroid by up to twice their reach.
        let c = centroid_of(&self.sensors_m);
        let turning_slack = if self.array_turn.is_some() {
            2.0 * self
                .sensors_m
                .iter()
                .map(|m| ((m[0] - c[0]).powi(2) + (m[1] - c[1]).powi(2)).sqrt())
                .fold(0.0, f64::max)
        } else {
            0.0
        };
        let mut max_range = 0.0f64;
        for src in &self.sources {
            let slack = if fine {
                0.0
            } else {
                src.path.max_speed_m_s() * step
            };
            for k in 0..=steps {
                let t = if fine {
                    k as f64 / 100.0
                } else {
                    k as f64 * step
                };
                let p = src.path.position(t);
                for m in &self.sensors_m {
                    let r = ((p[0] - m[0]).powi(2) + (p[1] - m[1]).powi(2) + (p[2] - m[2]).powi(2))
                        .sqrt();
                    max_range = max_range.max(r + slack + turning_slack);
                }
            }
        }
        max_range
    }

    /// The plane the sources lie in, for a tracker: a turning (towed) line's horizontal plane.
    pub fn plane_normal(&self) -> Option<[f64; 3]> {
        self.array_turn.map(|_| [0.0, 0.0, 1.0])
    }

    /// The array's heading over the scene (a turning array), at the truth's rate.
    pub fn headings(&self) -> Option<crate::audio::heading::HeadingTable> {
        let turn = self.array_turn?;
        let dt = 1.0 / self.truth_rate_hz;
        let n = (self.duration_s / dt).round() as usize;
        Some(crate::audio::heading::HeadingTable::from_rows(
            (0..=n)
                .map(|k| (k as f64 * dt, turn.heading_at(k as f64 * dt)))
                .collect(),
        ))
    }

    /// The sensor positions and speed of sound a tracker is told: the truth, or the truth with
    /// the errors of `faults` (see [`faults::told_array`]).
    pub fn told_array(&self) -> (Vec<[f64; 3]>, f64) {
        faults::told_array(
            &self.faults,
            &self.sensors_m,
            self.speed_of_sound_m_s,
            self.seed,
        )
    }

    /// Where point clicks may come from: the search volume, or the room, or a box around the
    /// array reaching ten metres past it.
    fn click_volume(&self) -> ([f64; 3], [f64; 3]) {
        if let (Some(lo), Some(hi)) = (self.bounds_min_m, self.bounds_max_m) {
            return (lo, hi);
        }
        if let Some(r) = &self.room {
            return ([0.0; 3], r.size_m);
        }
        let lo = std::array::from_fn(|k| {
            self.sensors_m
                .iter()
                .map(|s| s[k])
                .fold(f64::INFINITY, f64::min)
                - 10.0
        });
        let hi = std::array::from_fn(|k| {
            self.sensors_m
                .iter()
                .map(|s| s[k])
                .fold(f64::NEG_INFINITY, f64::max)
                + 10.0
        });
        (lo, hi)
    }

    pub fn n_samples(&self) -> u64 {
        (self.duration_s * f64::from(self.sample_rate_hz)).round() as u64
    }
}

/// Phase count of the fractional-delay table.
const SIM_PHASES: usize = 1024;
const SIM_HALF: usize = 16;

struct SourceState {
    spec: SourceSpec,
    signal: SignalGen,
    /// Ring of signal samples: `ring[j % len]` is sample j (emission time j / fs).
    ring: Vec<f32>,
    /// Next sample index to generate.
    next: i64,
    /// Last emission time found per sensor (starting point of the iteration).
    tau: Vec<f64>,
    /// In a room: the reflections.
    reverb: Option<Reverb>,
}

/// Streams a scene's multi-channel signal.
pub struct SimSource {
    spec: SceneSpec,
    table: SincTable,
    sources: Vec<SourceState>,
    /// Next output sample index.
    n: u64,
    total: u64,
    noise_std: f64,
    gain: f64,
    noise: PhiloxStream,
    faults: Option<Faults>,
}

impl SimSource {
    pub fn new(spec: SceneSpec) -> Result<Self> {
        spec.validate().map_err(|problem| Error::Scene {
            path: "(scene)".into(),
            problem,
            fix: "correct the scene".into(),
        })?;
        // First pass without noise: signal power per 1-s block and channel, and the peak, over
        // the first minute at most (long runs would otherwise simulate everything twice).
        let mut calib = spec.clone();
        calib.duration_s = calib.duration_s.min(60.0);
        let mut dry = Self::build(calib, 0.0, 1.0, false);
        let ch = spec.sensors_m.len();
        let fs = spec.sample_rate_hz as usize;
        // (Read in tenths of a second, summed into 1-s blocks: a whole second of every channel
        // at once held a megabyte, which the allocator kept after each new scene.)
        let chunk = (fs / 10).max(1);
        let mut buf = vec![0.0f32; ch * chunk];
        let mut powers = Vec::new();
        let mut peak = 0.0f32;
        let mut sums = vec![0.0f64; ch];
        let mut in_block = 0usize;
        loop {
            let want = chunk.min(fs - in_block);
            let n = dry.generate(&mut buf[..want * ch]);
            // (One running sum per channel, sample by sample, as a single pass would add.)
            for (c, sum) in sums.iter_mut().enumerate() {
                *sum = (0..n).fold(*sum, |a, i| a + f64::from(buf[i * ch + c]).powi(2));
            }
            peak = buf[..n * ch].iter().fold(peak, |m, v| m.max(v.abs()));
            in_block += n;
            if in_block == fs || (n == 0 && in_block > 0) {
                if in_block * 2 >= fs {
                    powers.extend(sums.iter().map(|s| s / in_block as f64));
                }
                sums.fill(0.0);
                in_block = 0;
            }
            if n == 0 {
                break;
            }
        }
        powers.sort_by(f64::total_cmp);
        let median = powers.get(powers.len() / 2).copied().unwrap_or(0.0);
        let noise_var = median / 10f64.powf(spec.snr_db / 10.0);
        // A scene without sources (or silent ones) is sensor noise alone, at a fixed level.
        let noise_std = if noise_var > 0.0 {
            noise_var.sqrt()
        } else {
            1.0
        };
        // Normalise so the loudest sample sits near -6 dBFS with noise on top.
        let gain = 0.5 / (f64::from(peak) + 4.0 * noise_std).max(1e-12);
        Ok(Self::build(spec, noise_std, gain, true))
    }

    /// The simulator for `spec` with this noise and output gain; `with_faults` adds the scene's
    /// faults (the calibration pass leaves them out).
    fn build(spec: SceneSpec, noise_std: f64, gain: f64, with_faults: bool) -> Self {
        let fs = f64::from(spec.sample_rate_hz);
        let c = spec.speed_of_sound_m_s;
        let max_delay = (spec.max_range_m() / c * fs).ceil() as i64 + 4;
        let sources = spec
            .sources
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let reverb = spec
                    .room
                    .as_ref()
                    .map(|r| Reverb::new(r, c, &spec.sensors_m, fs, spec.seed, i as u32));
                // The reflections read the signal ahead of the direct path (a block past the
                // output) and, for a room already ringing at the start, from a reverberation
                // time before it.
                let (ahead, preroll) = reverb
                    .as_ref()
                    .map_or((0, 0), |r| (r.lookahead(), r.preroll()));
                let ring_len = (max_delay as usize + 2 * SIM_HALF + 4096 + ahead + preroll)
                    .next_power_of_two();
                let mut st = SourceState {
                    spec: s.clone(),
                    signal: SignalGen::new(s.signal, fs, spec.seed, i as u32),
                    ring: vec![0.0; ring_len],
                    next: (-max_delay - SIM_HALF as i64 - 2).min(-(preroll as i64) - ahead as i64),
                    tau: vec![f64::NAN; spec.sensors_m.len()],
                    reverb,
                };
                st.tau.fill(f64::NAN);
                st
            })
            .collect();
        let total = spec.n_samples();
        let faults = (with_faults && !spec.faults.is_none()).then(|| {
            Faults::new(
                &spec.faults,
                &spec.sensors_m,
                c,
                fs,
                spec.duration_s,
                spec.click_volume(),
                spec.seed,
                noise_std * gain,
            )
        });
        Self {
            faults,
            table: SincTable::new(&SincKernel::new(SIM_HALF, 8.0), SIM_PHASES),
            noise: PhiloxStream::new(spec.seed, 0, Stream::Simulate),
            spec,
            sources,
            n: 0,
            total,
            noise_std,
            gain,
        }
    }

    pub fn spec(&self) -> &SceneSpec {
        &self.spec
    }

    /// How many clicks the scene's faults hold.
    pub fn clicks(&self) -> usize {
        self.faults.as_ref().map_or(0, Faults::clicks)
    }

    /// Fill `out` (interleaved) with the next samples; returns sample frames written (0 at end).
    fn generate(&mut self, out: &mut [f32]) -> usize {
        let ch = self.spec.sensors_m.len();
        let fs = f64::from(self.spec.sample_rate_hz);
        let c = self.spec.speed_of_sound_m_s;
        let frames = (out.len() / ch).min((self.total - self.n) as usize);
        let half = SIM_HALF as i64;
        let centre = centroid_of(&self.spec.sensors_m);
        let mut placed = self.spec.sensors_m.clone();
        for i in 0..frames {
            let t = (self.n + i as u64) as f64 / fs;
            if let Some(turn) = &self.spec.array_turn {
                let h = turn.heading_at(t);
                for (p, s) in placed.iter_mut().zip(&self.spec.sensors_m) {
                    *p = ArrayTurn::place(h, &centre, s);
                }
            }
            let row = &mut out[i * ch..(i + 1) * ch];
            row.fill(0.0);
            for src in &mut self.sources {
                let ring_len = src.ring.len();
                // Generate the signal up to the latest sample this output time can need.
                let ns = (self.n + i as u64) as i64;
                let direct_need = (t * fs).floor() as i64 + half + 1;
                let need = src
                    .reverb
                    .as_ref()
                    .map_or(direct_need, |r| direct_need.max(r.signal_needed(ns)));
                let gated = !src.spec.active.is_empty();
                while src.next <= need {
                    let mut v = src.signal.next() * src.spec.level;
                    if gated {
                        v *= src.spec.gate(src.next as f64 / fs);
                    }
                    src.ring[src.next.rem_euclid(ring_len as i64) as usize] = v as f32;
                    src.next += 1;
                }
                for (m, sensor) in placed.iter().enumerate() {
                    let mut tau = if src.tau[m].is_finite() {
                        src.tau[m]
                    } else {
                        t
                    };
                    let mut r = 0.0;
                    for _ in 0..4 {
                        let p = src.spec.path.position(tau);
                        r = ((p[0] - sensor[0]).powi(2)
                            + (p[1] - sensor[1]).powi(2)
                            + (p[2] - sensor[2]).powi(2))
                        .sqrt();
                        tau = t - r / c;
                    }
                    src.tau[m] = tau;
                    // Band-limited read of the signal at sample position tau * fs.
                    let x = tau * fs;
                    let i0 = x.floor();
                    let frac = (x - i0) * SIM_PHASES as f64;
                    let p0 = frac.floor() as usize;
                    let a = frac - p0 as f64;
                    let taps0 = self.table.taps(p0 as f64 / SIM_PHASES as f64);
                    let taps1 = self
                        .table
                        .taps((p0 + 1).min(SIM_PHASES) as f64 / SIM_PHASES as f64);
                    let first = i0 as i64 - half + 1;
                    let mut acc = 0.0f64;
                    for k in 0..2 * SIM_HALF {
                        let j = (first + k as i64).rem_euclid(ring_len as i64) as usize;
                        let w = f64::from(taps0[k]) * (1.0 - a) + f64::from(taps1[k]) * a;
                        acc += f64::from(src.ring[j]) * w;
                    }
                    row[m] += (acc / r.max(1e-3) * self.gain) as f32;
                    if let Some(rev) = src.reverb.as_mut() {
                        let ring = &src.ring;
                        let signal =
                            |j: i64| f64::from(ring[j.rem_euclid(ring_len as i64) as usize]);
                        let path = &src.spec.path;
                        let position = |t: f64| path.position(t);
                        row[m] +=
                            (rev.take(ns, m, &self.table, &signal, &position) * self.gain) as f32;
                    }
                }
            }
            if self.noise_std > 0.0 {
                for v in row.iter_mut() {
                    *v += (self.noise.normal_f64() * self.noise_std * self.gain) as f32;
                }
            }
            if let Some(f) = self.faults.as_mut() {
                f.apply(self.n + i as u64, row);
            }
        }
        self.n += frames as u64;
        frames
    }

    /// Truth rows (t, target, x, y, z) at the spec's truth rate, t = emission time.
    pub fn truth(&self) -> Vec<(f64, usize, [f64; 3])> {
        let dt = 1.0 / self.spec.truth_rate_hz;
        let n = (self.spec.duration_s / dt).round() as usize;
        let mut rows = Vec::new();
        for k in 0..=n {
            let t = k as f64 * dt;
            for (i, s) in self.spec.sources.iter().enumerate() {
                if s.is_active(t) {
                    rows.push((t, i, s.path.position(t)));
                }
            }
        }
        rows
    }
}

impl AudioSource for SimSource {
    fn describe(&self) -> String {
        format!("simulated scene ({})", self.spec.description)
    }

    fn sample_rate_hz(&self) -> u32 {
        self.spec.sample_rate_hz
    }

    fn channels(&self) -> usize {
        self.spec.sensors_m.len()
    }

    fn total_frames(&self) -> Option<u64> {
        Some(self.total)
    }

    fn read(&mut self, out: &mut [f32]) -> Result<ReadResult> {
        match self.generate(out) {
            0 => Ok(ReadResult::End),
            n => Ok(ReadResult::Samples(n)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiny(snr_db: f64) -> SceneSpec {
        SceneSpec {
            room: None,
            faults: FaultSpec::default(),
            array_turn: None,
            origin: None,
            other_arrays: Vec::new(),
            description: "test".into(),
            sensors_m: vec![[0.0, 0.0, 0.0], [30.0, 0.0, 0.0]],
            speed_of_sound_m_s: 1500.0,
            sample_rate_hz: 8000,
            duration_s: 1.0,
            snr_db,
            seed: 1,
            bounds_min_m: None,
            bounds_max_m: None,
            truth_rate_hz: 20.0,
            sources: vec![SourceSpec {
                active: Vec::new(),
                signal: SignalKind::White,
                level: 1.0,
                path: PathSpec::Static {
                    position_m: [10.0, 0.0, 0.0],
                },
            }],
        }
    }

    /// A turning array: its heading over time, its sensors placed by it (heading 90°: the
    /// frame's +y axis points east), its heading table, and no room.
    #[test]
    fn a_turning_array_turns_its_sensors() {
        let turn = ArrayTurn {
            heading_deg: 350.0,
            start_s: 1.0,
            turn_deg: 100.0,
            rate_deg_s: 25.0,
        };
        assert_eq!(turn.heading_at(0.5), 350.0);
        assert!((turn.heading_at(1.5) - 2.5).abs() < 1e-9);
        assert!((turn.heading_at(9.0) - 90.0).abs() < 1e-9);
        assert_eq!(turn.end_s(), 5.0);
        let p = ArrayTurn::place(90.0, &[1.0, 1.0, -5.0], &[1.0, 3.0, -5.0]);
        assert!(
            (p[0] - 3.0).abs() < 1e-12 && (p[1] - 1.0).abs() < 1e-12,
            "{p:?}"
        );
        let mut spec = tiny(20.0);
        spec.duration_s = 4.0;
        spec.array_turn = Some(turn);
        assert!(spec.validate().is_ok());
        let h = spec.headings().unwrap();
        assert_eq!(h.rows().len(), 81);
        assert!((h.at(2.0).unwrap() - 15.0).abs() < 1e-9);
        assert_eq!(spec.plane_normal(), Some([0.0, 0.0, 1.0]));
        spec.array_turn = Some(ArrayTurn {
            rate_deg_s: 0.0,
            ..turn
        });
        assert!(spec.validate().unwrap_err().contains("rate_deg_s"));
        spec.array_turn = Some(turn);
        spec.room = Some(RoomSpec {
            size_m: [40.0, 40.0, 10.0],
            rt60_s: 0.3,
            max_order: None,
            diffuse_tail: true,
        });
        spec.sensors_m = vec![[1.0, 1.0, 1.0], [31.0, 1.0, 1.0]];
        assert!(spec.validate().unwrap_err().contains("free field"));
    }

    /// A source east of a two-sensor line along y turns from broadside to endfire as the line
    /// turns 90° to starboard: the delay between the sensors grows from zero to the spacing.
    #[test]
    fn a_turning_line_hears_the_source_move_to_endfire() {
        let mut spec = tiny(40.0);
        spec.sensors_m = vec![[0.0, -15.0, 0.0], [0.0, 15.0, 0.0]];
        spec.sources[0].path = PathSpec::Static {
            position_m: [300.0, 0.0, 0.0],
        };
        spec.duration_s = 5.0;
        spec.array_turn = Some(ArrayTurn {
            heading_deg: 0.0,
            start_s: 0.5,
            turn_deg: 90.0,
            rate_deg_s: 30.0,
        });
        let mut sim = SimSource::new(spec).unwrap();
        let x = all(&mut sim);
        let lag_at = |t0: f64| {
            let a = (t0 * 8000.0) as usize + 200;
            let b = a + 3000;
            let mut best = (f64::MIN, 0i64);
            for lag in -200i64..=200 {
                let c: f64 = (a..b)
                    .map(|i| f64::from(x[2 * i]) * f64::from(x[2 * (i as i64 + lag) as usize + 1]))
                    .sum();
                if c > best.0 {
                    best = (c, lag);
                }
            }
            best.1
        };
        // Broadside before the turn; after it sensor 1 (now east) hears it 30 m / 1500 m/s =
        // 160 samples earlier.
        assert_eq!(lag_at(0.0), 0);
        assert!((lag_at(4.0) + 160).abs() <= 2, "{}", lag_at(4.0));
    }

    fn all(sim: &mut SimSource) -> Vec<f32> {
        let ch = sim.channels();
        let mut out = Vec::new();
        let mut buf = vec![0.0; ch * 1000];
        while let ReadResult::Samples(n) = sim.read(&mut buf).unwrap() {
            out.extend_from_slice(&buf[..n * ch]);
        }
        out
    }

    /// A whole day is a valid scene; a scene whose audio would overflow a WAV file's 32-bit
    /// sizes is refused before anything is generated or written, with the fix.
    #[test]
    fn a_day_is_valid_and_an_oversized_wav_is_refused_up_front() {
        let mut day = tiny(20.0);
        day.duration_s = 86_400.0;
        assert!(day.validate().is_ok());
        day.duration_s = 86_400.5;
        assert!(day.validate().unwrap_err().contains("86400"));
        let dir = std::env::temp_dir().join(format!("sonotrack-wav-size-{}", std::process::id()));
        let mut big = tiny(20.0);
        big.duration_s = 86_400.0;
        big.sample_rate_hz = 48_000;
        big.sensors_m = vec![[0.0, 0.0, 0.0], [30.0, 0.0, 0.0], [0.0, 30.0, 0.0]];
        let e = scene_dir::write_scene(&dir, &big, true)
            .unwrap_err()
            .to_string();
        assert!(e.contains("24.88 GB") && e.contains("duration_s"), "{e}");
        let e = scene_dir::write_scene(&dir, &big, false)
            .unwrap_err()
            .to_string();
        assert!(e.contains("--s16"), "{e}");
        assert!(!dir.exists(), "nothing written");
    }

    /// Numbers that would size an allocation or a loop beyond reason are refused with the key
    /// named, before anything is built (the reliability issue's reproducers).
    #[test]
    fn out_of_range_numbers_are_refused() {
        let mut fast = tiny(20.0);
        fast.sources[0].path = PathSpec::Turn {
            start_m: [10.0, 0.0, 0.0],
            speed_m_s: 1e9,
            heading_deg: 0.0,
            turn_rate_deg_s: 0.0,
            climb_m_s: 0.0,
        };
        assert!(fast.validate().unwrap_err().contains("speed"));
        let mut climb = tiny(20.0);
        climb.sources[0].path = PathSpec::Turn {
            start_m: [10.0, 0.0, 0.0],
            speed_m_s: 1.0,
            heading_deg: 0.0,
            turn_rate_deg_s: 0.0,
            climb_m_s: f64::INFINITY,
        };
        assert!(climb.validate().is_err());
        for rate in [f64::INFINITY, f64::NAN, 1e9, 0.0, -1.0] {
            let mut r = tiny(20.0);
            r.truth_rate_hz = rate;
            assert!(
                r.validate().unwrap_err().contains("truth_rate_hz"),
                "{rate}"
            );
        }
        let mut far = tiny(20.0);
        far.sources[0].path = PathSpec::Static {
            position_m: [1e8, 0.0, 0.0],
        };
        assert!(far.validate().unwrap_err().contains("closer"));
        assert!(tiny(20.0).validate().is_ok());
    }

    /// A static source 10 m from sensor 0 and 20 m from sensor 1: sensor 1 hears the same
    /// signal 10/1500 s later at half the amplitude.
    #[test]
    fn static_source_delay_and_spreading() {
        let mut sim = SimSource::new(tiny(200.0)).unwrap();
        let x = all(&mut sim);
        let a: Vec<f32> = x.iter().step_by(2).copied().collect();
        let b: Vec<f32> = x.iter().skip(1).step_by(2).copied().collect();
        let d = 10.0 / 1500.0 * 8000.0; // 53.33 samples
        let k = SincKernel::new(32, 9.0);
        let mut err = 0.0f64;
        let mut pow = 0.0f64;
        for i in 200..7000 {
            let want = 0.5 * k.interpolate(&a, i as f64 - d);
            err += (f64::from(b[i]) - want).powi(2);
            pow += want * want;
        }
        assert!(err / pow < 1e-4, "relative error {}", err / pow);
    }

    #[test]
    fn snr_is_met() {
        let mut c = SimSource::new(tiny(300.0)).unwrap();
        let gc = c.gain;
        let clean = all(&mut c);
        let mut n = SimSource::new(tiny(10.0)).unwrap();
        let gn = n.gain;
        let noisy = all(&mut n);
        let mut sig_power = [0.0f64; 2];
        let mut noise_power = 0.0f64;
        for (i, (v, s)) in noisy.iter().zip(&clean).enumerate() {
            let sig = f64::from(*s) / gc;
            sig_power[i % 2] += sig * sig;
            noise_power += (f64::from(*v) / gn - sig).powi(2);
        }
        let frames = (clean.len() / 2) as f64;
        // One 1-s block per channel: the median of two is the larger (index len / 2).
        let median = sig_power[0].max(sig_power[1]) / frames;
        let snr = 10.0 * (median / (noise_power / (2.0 * frames))).log10();
        assert!((snr - 10.0).abs() < 0.2, "snr {snr}");
    }

    #[test]
    fn same_seed_same_samples() {
        let a = all(&mut SimSource::new(tiny(10.0)).unwrap());
        let b = all(&mut SimSource::new(tiny(10.0)).unwrap());
        assert_eq!(a, b);
        let mut s = tiny(10.0);
        s.seed = 2;
        let c = all(&mut SimSource::new(s).unwrap());
        assert_ne!(a, c);
    }

    #[test]
    fn turn_path_keeps_speed() {
        let p = PathSpec::Turn {
            start_m: [1.0, 2.0, 3.0],
            speed_m_s: 2.0,
            heading_deg: 30.0,
            turn_rate_deg_s: 5.0,
            climb_m_s: 0.0,
        };
        assert_eq!(p.position(0.0), [1.0, 2.0, 3.0]);
        for k in 0..20 {
            let t = k as f64;
            let a = p.position(t);
            let b = p.position(t + 1e-3);
            let v = ((b[0] - a[0]).powi(2) + (b[1] - a[1]).powi(2)).sqrt() / 1e-3;
            assert!((v - 2.0).abs() < 1e-3, "{v}");
        }
    }

    #[test]
    fn presets_are_valid() {
        for name in PRESETS {
            SceneSpec::preset(name).unwrap().validate().unwrap();
        }
        assert!(SceneSpec::preset("nope").is_none());
    }

    /// A dead channel carries nothing in its interval; clipping saturates every channel in its
    /// own; the other samples are the scene without faults.
    #[test]
    fn dead_channels_and_clipping_where_asked() {
        let clean = all(&mut SimSource::new(tiny(20.0)).unwrap());
        let mut spec = tiny(20.0);
        spec.faults.dead = vec![faults::DeadChannel {
            channel: 1,
            start_s: 0.2,
            duration_s: 0.1,
        }];
        spec.faults.clipping = vec![faults::Clipping {
            start_s: 0.5,
            duration_s: 0.1,
            gain: 50.0,
        }];
        let x = all(&mut SimSource::new(spec).unwrap());
        for (i, (a, b)) in x.iter().zip(&clean).enumerate() {
            let (n, ch) = (i / 2, i % 2);
            let t = n as f64 / 8000.0;
            if ch == 1 && (0.2..0.3).contains(&t) {
                assert_eq!(*a, 0.0, "sample {n}");
            } else if (0.5..0.6).contains(&t) {
                assert!(a.abs() <= 1.0);
                assert_eq!(*a, (b * 50.0).clamp(-1.0, 1.0), "sample {n}");
            } else {
                assert_eq!(a, b, "sample {n}");
            }
        }
        let saturated = x.iter().filter(|v| v.abs() == 1.0).count();
        assert!(saturated > 100, "{saturated} samples at full scale");
    }

    /// Clicks on one channel: that channel gets transients at the clicks' times, the other
    /// nothing; clicks from a point reach both sensors, the farther one later.
    #[test]
    fn clicks_are_heard_where_they_come_from() {
        let clean = all(&mut SimSource::new(tiny(40.0)).unwrap());
        let mut spec = tiny(40.0);
        spec.faults.clicks_per_min = 600.0;
        spec.faults.click_source = faults::ClickSource::Channel;
        let x = all(&mut SimSource::new(spec.clone()).unwrap());
        let diff = |x: &[f32], ch: usize| -> f64 {
            x.iter()
                .zip(&clean)
                .skip(ch)
                .step_by(2)
                .map(|(a, b)| f64::from(a - b).abs())
                .fold(0.0, f64::max)
        };
        let changed: Vec<f64> = (0..2).map(|c| diff(&x, c)).collect();
        assert!(changed.iter().any(|d| *d > 0.1), "{changed:?}");
        spec.faults.click_source = faults::ClickSource::Point;
        let y = all(&mut SimSource::new(spec).unwrap());
        assert!(diff(&y, 0) > 0.01 && diff(&y, 1) > 0.01);
    }

    /// A source silent outside its active interval, and absent from the truth there.
    #[test]
    fn sources_sound_only_when_active() {
        let mut spec = tiny(300.0);
        spec.sources[0].active = vec![[0.3, 0.6]];
        let mut sim = SimSource::new(spec).unwrap();
        let truth = sim.truth();
        assert!(truth.iter().all(|(t, _, _)| (0.3..=0.6).contains(t)));
        let x = all(&mut sim);
        // Sensor 0 is 10 m away (6.7 ms): silent (but for the faint noise) well before and after.
        let rms = |a: f64, b: f64| {
            let v: Vec<f64> = x
                .iter()
                .step_by(2)
                .enumerate()
                .filter(|(n, _)| (a..b).contains(&(*n as f64 / 8000.0)))
                .map(|(_, v)| f64::from(*v).powi(2))
                .collect();
            (v.iter().sum::<f64>() / v.len() as f64).sqrt()
        };
        assert!(
            rms(0.05, 0.25) < 1e-3 * rms(0.35, 0.55),
            "{} {}",
            rms(0.05, 0.25),
            rms(0.35, 0.55)
        );
        assert!(rms(0.7, 0.95) < 1e-3 * rms(0.35, 0.55));
    }

    /// The array a tracker is told: the truth without faults, off by about the asked error
    /// with them, and the same every time.
    #[test]
    fn told_array_carries_the_errors() {
        let mut spec = tiny(10.0);
        assert_eq!(spec.told_array(), (spec.sensors_m.clone(), 1500.0));
        spec.faults.sensor_error_m = 0.05;
        spec.faults.sound_speed_error = 0.02;
        let (told, c) = spec.told_array();
        assert_eq!((told.clone(), c), spec.told_array());
        assert!((c - 1530.0).abs() < 1e-9);
        let moved: f64 = told
            .iter()
            .zip(&spec.sensors_m)
            .map(|(a, b)| (0..3).map(|k| (a[k] - b[k]).powi(2)).sum::<f64>().sqrt())
            .sum();
        assert!(moved > 0.01 && moved < 0.6, "{moved}");
    }

    /// A room adds reflections: the same scene in a reverberant room carries more energy after
    /// the source stops (its tail), and runs end to end.
    #[test]
    fn a_room_keeps_ringing_after_the_source_stops() {
        let mut spec = tiny(300.0);
        spec.sensors_m = vec![[1.0, 1.0, 1.0], [2.0, 1.5, 1.2]];
        spec.speed_of_sound_m_s = 343.0;
        spec.sources[0].path = PathSpec::Static {
            position_m: [3.0, 2.5, 1.5],
        };
        spec.sources[0].active = vec![[0.0, 0.5]];
        let free = all(&mut SimSource::new(spec.clone()).unwrap());
        spec.room = Some(RoomSpec {
            size_m: [5.0, 4.0, 3.0],
            rt60_s: 0.4,
            max_order: None,
            diffuse_tail: true,
        });
        let room = all(&mut SimSource::new(spec).unwrap());
        let after = |x: &[f32]| -> f64 {
            x[2 * 4400..2 * 5600]
                .iter()
                .map(|v| f64::from(*v).powi(2))
                .sum::<f64>()
        };
        let during = |x: &[f32]| -> f64 {
            x[2 * 1000..2 * 3000]
                .iter()
                .map(|v| f64::from(*v).powi(2))
                .sum::<f64>()
        };
        assert!(after(&room) / during(&room) > 100.0 * after(&free) / during(&free));
    }
}
