//! Free-field scene simulator: a user feature (plan an array before a deployment) and the test
//! data factory.
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

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::audio::wav::WavWriter;
use crate::audio::{AudioSource, ReadResult};
use crate::error::{Error, IoContext, Result};
use crate::math::interp::{SincKernel, SincTable};
use crate::rng::philox::{PhiloxStream, Stream};

/// What a source emits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SignalKind {
    White,
    Pink,
    /// Ship-like: pink cavitation noise amplitude-modulated at the blade rate, plus machinery lines.
    Ship,
    /// Speech-like: pink noise in syllable bursts (about 4 per second) with pauses between phrases.
    Speech,
}

/// A source trajectory.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase", deny_unknown_fields)]
pub enum PathSpec {
    Static {
        position_m: [f64; 3],
    },
    /// Constant velocity.
    Line {
        start_m: [f64; 3],
        velocity_m_s: [f64; 3],
    },
    /// Constant speed on a horizontal circle arc (positive turn rate turns left), climbing at a
    /// constant rate.
    Turn {
        start_m: [f64; 3],
        speed_m_s: f64,
        heading_deg: f64,
        turn_rate_deg_s: f64,
        #[serde(default)]
        climb_m_s: f64,
    },
}

impl PathSpec {
    pub fn position(&self, t: f64) -> [f64; 3] {
        match self {
            PathSpec::Static { position_m } => *position_m,
            PathSpec::Line {
                start_m,
                velocity_m_s,
            } => [
                start_m[0] + velocity_m_s[0] * t,
                start_m[1] + velocity_m_s[1] * t,
                start_m[2] + velocity_m_s[2] * t,
            ],
            PathSpec::Turn {
                start_m,
                speed_m_s,
                heading_deg,
                turn_rate_deg_s,
                climb_m_s,
            } => {
                let h0 = heading_deg.to_radians();
                let w = turn_rate_deg_s.to_radians();
                let (dx, dy) = if w.abs() < 1e-9 {
                    (speed_m_s * t * h0.cos(), speed_m_s * t * h0.sin())
                } else {
                    let r = speed_m_s / w;
                    (
                        r * ((h0 + w * t).sin() - h0.sin()),
                        -r * ((h0 + w * t).cos() - h0.cos()),
                    )
                };
                [start_m[0] + dx, start_m[1] + dy, start_m[2] + climb_m_s * t]
            }
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SourceSpec {
    pub signal: SignalKind,
    /// RMS amplitude at 1 m (relative; only ratios between sources matter, the file is
    /// normalised).
    #[serde(default = "unit")]
    pub level: f64,
    pub path: PathSpec,
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
    #[serde(rename = "source")]
    pub sources: Vec<SourceSpec>,
}

fn default_sim_seed() -> u64 {
    7
}
fn default_truth_rate() -> f64 {
    20.0
}

/// Built-in scenes. `harbour` is also what `sonotrack demo` replays.
pub const PRESETS: &[&str] = &["harbour", "tetra", "room", "two-boats"];

impl SceneSpec {
    pub fn preset(name: &str) -> Option<Self> {
        let turn = |start: [f64; 3], speed: f64, heading: f64, rate: f64| PathSpec::Turn {
            start_m: start,
            speed_m_s: speed,
            heading_deg: heading,
            turn_rate_deg_s: rate,
            climb_m_s: 0.0,
        };
        let spec = match name {
            "harbour" => SceneSpec {
                description: "5 hydrophones on pier piles, 12-30 m apart; a boat on a slow left turn".into(),
                sensors_m: vec![
                    [0.0, 0.0, -4.0],
                    [22.0, 2.0, -10.0],
                    [4.0, 19.0, -7.0],
                    [-12.0, 8.0, -15.0],
                    [7.0, 5.0, -22.0],
                ],
                speed_of_sound_m_s: 1500.0,
                sample_rate_hz: 48_000,
                duration_s: 12.0,
                snr_db: 10.0,
                seed: 7,
                bounds_min_m: Some([-80.0, -80.0, -50.0]),
                bounds_max_m: Some([80.0, 80.0, 0.0]),
                truth_rate_hz: 20.0,
                sources: vec![SourceSpec {
                    signal: SignalKind::Ship,
                    level: 1.0,
                    path: turn([-20.0, -6.0, -3.0], 2.0, 20.0, 3.0),
                }],
            },
            "tetra" => SceneSpec {
                description: "a 2 m hydrophone tetrahedron; a diver swimming past at 1 m/s".into(),
                sensors_m: vec![
                    [0.0, 0.0, -10.0],
                    [2.0, 0.0, -10.0],
                    [1.0, 1.732, -10.0],
                    [1.0, 0.577, -11.633],
                ],
                speed_of_sound_m_s: 1500.0,
                sample_rate_hz: 96_000,
                duration_s: 10.0,
                snr_db: 12.0,
                seed: 11,
                bounds_min_m: Some([-30.0, -30.0, -40.0]),
                bounds_max_m: Some([30.0, 30.0, 0.0]),
                truth_rate_hz: 20.0,
                sources: vec![SourceSpec {
                    signal: SignalKind::Pink,
                    level: 1.0,
                    path: PathSpec::Line {
                        start_m: [-5.0, 4.0, -8.0],
                        velocity_m_s: [1.0, -0.2, 0.0],
                    },
                }],
            },
            "room" => SceneSpec {
                description: "6 microphones in a 6 x 5 x 3 m room (free field, no reverberation); a talker walking".into(),
                sensors_m: vec![
                    [0.1, 0.1, 2.6],
                    [5.9, 0.2, 1.0],
                    [5.8, 4.9, 2.4],
                    [0.2, 4.8, 1.1],
                    [3.0, 0.1, 1.8],
                    [3.0, 4.9, 0.4],
                ],
                speed_of_sound_m_s: 343.0,
                sample_rate_hz: 16_000,
                duration_s: 12.0,
                snr_db: 15.0,
                seed: 5,
                bounds_min_m: Some([0.0, 0.0, 0.0]),
                bounds_max_m: Some([6.0, 5.0, 3.0]),
                truth_rate_hz: 20.0,
                sources: vec![SourceSpec {
                    signal: SignalKind::Speech,
                    level: 1.0,
                    path: PathSpec::Line {
                        start_m: [1.0, 1.5, 1.6],
                        velocity_m_s: [0.3, 0.15, 0.0],
                    },
                }],
            },
            "two-boats" => {
                let mut s = Self::preset("harbour")?;
                s.description = "the harbour array with two boats crossing".into();
                s.sources = vec![
                    SourceSpec {
                        signal: SignalKind::Ship,
                        level: 1.0,
                        path: turn([-25.0, -10.0, -2.0], 2.0, 30.0, 2.0),
                    },
                    SourceSpec {
                        signal: SignalKind::Ship,
                        level: 0.7,
                        path: PathSpec::Line {
                            start_m: [30.0, 25.0, -3.0],
                            velocity_m_s: [-2.5, -0.5, 0.0],
                        },
                    },
                ];
                s.seed = 13;
                s
            }
            _ => return None,
        };
        Some(spec)
    }

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
        if self.sensors_m.len() < 2 {
            return Err("a scene needs at least 2 sensors".into());
        }
        if self.sources.is_empty() {
            return Err("a scene needs at least one [[source]]".into());
        }
        if !(self.duration_s > 0.0 && self.duration_s < 24.0 * 3600.0) {
            return Err(format!(
                "duration_s = {} (use 0 < d < 86400)",
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
        for (i, s) in self.sources.iter().enumerate() {
            if !(s.level > 0.0 && s.level.is_finite()) {
                return Err(format!("source {i}: level must be > 0"));
            }
        }
        Ok(())
    }

    pub fn n_samples(&self) -> u64 {
        (self.duration_s * f64::from(self.sample_rate_hz)).round() as u64
    }
}

/// A finite-impulse-response filter run sample by sample over a ring.
#[derive(Debug, Clone)]
struct Fir {
    taps: Vec<f64>,
    ring: Vec<f64>,
    pos: usize,
}

impl Fir {
    /// Lowpass at `cut` (fraction of the sample rate) with a Kaiser-windowed sinc.
    fn lowpass(cut: f64, half: usize) -> Self {
        let k = SincKernel::new(half, 8.0);
        let taps: Vec<f64> = (0..2 * half + 1)
            .map(|i| {
                let x = i as f64 - half as f64;
                // sinc scaled to the cut-off, windowed by the Kaiser shape of the kernel.
                let window = if x == 0.0 {
                    1.0
                } else {
                    k.at(x) / ((std::f64::consts::PI * x).sin() / (std::f64::consts::PI * x))
                };
                let s = if x == 0.0 {
                    2.0 * cut
                } else {
                    (std::f64::consts::TAU * cut * x).sin() / (std::f64::consts::PI * x)
                };
                s * if window.is_finite() { window } else { 0.0 }
            })
            .collect();
        let n = taps.len();
        Self {
            taps,
            ring: vec![0.0; n],
            pos: 0,
        }
    }

    fn push(&mut self, x: f64) -> f64 {
        let n = self.taps.len();
        self.ring[self.pos] = x;
        let mut acc = 0.0;
        for (i, t) in self.taps.iter().enumerate() {
            acc += t * self.ring[(self.pos + n - i) % n];
        }
        self.pos = (self.pos + 1) % n;
        acc
    }
}

/// Generates one source's signal sample by sample (deterministic from the seed).
#[derive(Debug, Clone)]
struct SignalGen {
    kind: SignalKind,
    fs: f64,
    noise: PhiloxStream,
    env_rng: PhiloxStream,
    pink: [f64; 7],
    lowpass: Fir,
    n: u64,
    gain: f64,
    /// Speech: current burst's (start, end) sample and the next burst's start.
    burst: (u64, u64),
}

impl SignalGen {
    fn new(kind: SignalKind, fs: f64, seed: u64, index: u32) -> Self {
        let mut g = Self {
            kind,
            fs,
            noise: PhiloxStream::new(seed, 1000 + index, Stream::Simulate),
            env_rng: PhiloxStream::new(seed, 2000 + index, Stream::Simulate),
            pink: [0.0; 7],
            lowpass: Fir::lowpass(0.42, 48),
            n: 0,
            gain: 1.0,
            burst: (0, 0),
        };
        // Unit RMS: measure one second of a copy and scale.
        let mut probe = g.clone();
        let m = fs.round() as usize;
        let p: f64 = (0..m).map(|_| probe.raw().powi(2)).sum::<f64>() / m as f64;
        g.gain = 1.0 / p.sqrt().max(1e-12);
        g
    }

    /// Paul Kellet's pink-noise filter (refined version), accurate to ±0.05 dB above fs/1000.
    fn pink_sample(&mut self, w: f64) -> f64 {
        let b = &mut self.pink;
        b[0] = 0.99886 * b[0] + w * 0.0555179;
        b[1] = 0.99332 * b[1] + w * 0.0750759;
        b[2] = 0.96900 * b[2] + w * 0.1538520;
        b[3] = 0.86650 * b[3] + w * 0.3104856;
        b[4] = 0.55000 * b[4] + w * 0.5329522;
        b[5] = -0.7616 * b[5] - w * 0.0168980;
        let out = b[0] + b[1] + b[2] + b[3] + b[4] + b[5] + b[6] + w * 0.5362;
        b[6] = w * 0.115926;
        out
    }

    fn raw(&mut self) -> f64 {
        let w = self.noise.normal_f64();
        let t = self.n as f64 / self.fs;
        self.n += 1;
        let x = match self.kind {
            SignalKind::White => w,
            SignalKind::Pink => self.pink_sample(w),
            SignalKind::Ship => {
                // Cavitation noise, modulated at a blade rate of 8 Hz, plus machinery lines.
                let am = 1.0 + 0.35 * (std::f64::consts::TAU * 8.0 * t).sin();
                let lines = 0.6 * (std::f64::consts::TAU * 50.0 * t).sin()
                    + 0.3 * (std::f64::consts::TAU * 150.0 * t + 0.7).sin();
                am * self.pink_sample(w) + lines * 0.1
            }
            SignalKind::Speech => {
                let i = self.n;
                if i >= self.burst.1 && i >= self.burst.0 {
                    // Next syllable: 120-250 ms long, 30-120 ms apart; every few syllables a
                    // phrase pause of 0.3-0.9 s.
                    let len = (0.12 + 0.13 * self.env_rng.uniform_f64()) * self.fs;
                    let gap = if self.env_rng.uniform_f64() < 0.2 {
                        0.3 + 0.6 * self.env_rng.uniform_f64()
                    } else {
                        0.03 + 0.09 * self.env_rng.uniform_f64()
                    } * self.fs;
                    let start = i + gap as u64;
                    self.burst = (start, start + len as u64);
                }
                let env = if i >= self.burst.0 && i < self.burst.1 {
                    let x = (i - self.burst.0) as f64 / (self.burst.1 - self.burst.0) as f64;
                    (std::f64::consts::PI * x).sin()
                } else {
                    0.0
                };
                env * self.pink_sample(w)
            }
        };
        self.lowpass.push(x)
    }

    fn next(&mut self) -> f64 {
        self.raw() * self.gain
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
        let mut dry = Self::build(calib, 0.0, 1.0);
        let ch = spec.sensors_m.len();
        let fs = spec.sample_rate_hz as usize;
        let mut buf = vec![0.0f32; ch * fs];
        let mut powers = Vec::new();
        let mut peak = 0.0f32;
        loop {
            let n = dry.generate(&mut buf);
            if n == 0 {
                break;
            }
            for c in 0..ch {
                let p: f64 = (0..n)
                    .map(|i| f64::from(buf[i * ch + c]).powi(2))
                    .sum::<f64>()
                    / n as f64;
                if n * 2 >= fs {
                    powers.push(p);
                }
            }
            peak = buf[..n * ch].iter().fold(peak, |m, v| m.max(v.abs()));
        }
        powers.sort_by(f64::total_cmp);
        let median = powers.get(powers.len() / 2).copied().unwrap_or(0.0);
        let noise_var = median / 10f64.powf(spec.snr_db / 10.0);
        let noise_std = noise_var.sqrt();
        // Normalise so the loudest sample sits near -6 dBFS with noise on top.
        let gain = 0.5 / (f64::from(peak) + 4.0 * noise_std).max(1e-12);
        Ok(Self::build(spec, noise_std, gain))
    }

    fn build(spec: SceneSpec, noise_std: f64, gain: f64) -> Self {
        let fs = f64::from(spec.sample_rate_hz);
        let c = spec.speed_of_sound_m_s;
        // Longest propagation delay over the scene (path sampled every 10 ms).
        let steps = (spec.duration_s * 100.0).ceil() as usize + 1;
        let mut max_range = 0.0f64;
        for src in &spec.sources {
            for k in 0..=steps {
                let p = src.path.position(k as f64 / 100.0);
                for m in &spec.sensors_m {
                    let r = ((p[0] - m[0]).powi(2) + (p[1] - m[1]).powi(2) + (p[2] - m[2]).powi(2))
                        .sqrt();
                    max_range = max_range.max(r);
                }
            }
        }
        let max_delay = (max_range / c * fs).ceil() as i64 + 4;
        let ring_len = (max_delay as usize + 2 * SIM_HALF + 4096).next_power_of_two();
        let sources = spec
            .sources
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let mut st = SourceState {
                    spec: s.clone(),
                    signal: SignalGen::new(s.signal, fs, spec.seed, i as u32),
                    ring: vec![0.0; ring_len],
                    next: -max_delay - SIM_HALF as i64 - 2,
                    tau: vec![f64::NAN; spec.sensors_m.len()],
                };
                st.tau.fill(f64::NAN);
                st
            })
            .collect();
        let total = spec.n_samples();
        Self {
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

    /// Fill `out` (interleaved) with the next samples; returns sample frames written (0 at end).
    fn generate(&mut self, out: &mut [f32]) -> usize {
        let ch = self.spec.sensors_m.len();
        let fs = f64::from(self.spec.sample_rate_hz);
        let c = self.spec.speed_of_sound_m_s;
        let frames = (out.len() / ch).min((self.total - self.n) as usize);
        let half = SIM_HALF as i64;
        for i in 0..frames {
            let t = (self.n + i as u64) as f64 / fs;
            let row = &mut out[i * ch..(i + 1) * ch];
            row.fill(0.0);
            for src in &mut self.sources {
                let ring_len = src.ring.len();
                // Generate the signal up to the latest sample this output time can need.
                let need = (t * fs).floor() as i64 + half + 1;
                while src.next <= need {
                    let v = src.signal.next() * src.spec.level;
                    src.ring[src.next.rem_euclid(ring_len as i64) as usize] = v as f32;
                    src.next += 1;
                }
                for (m, sensor) in self.spec.sensors_m.iter().enumerate() {
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
                }
            }
            if self.noise_std > 0.0 {
                for v in row.iter_mut() {
                    *v += (self.noise.normal_f64() * self.noise_std * self.gain) as f32;
                }
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
                rows.push((t, i, s.path.position(t)));
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

/// Write a scene directory: audio.wav (32-bit float, or audio_s16.wav), array.json, truth.csv,
/// meta.json and the scene spec as scene.toml.
pub fn write_scene(dir: &Path, spec: &SceneSpec, s16: bool) -> Result<()> {
    std::fs::create_dir_all(dir).at(dir)?;
    let mut sim = SimSource::new(spec.clone())?;
    let truth = sim.truth();
    let ch = spec.sensors_m.len();
    let fs = spec.sample_rate_hz;
    let wav_path = dir.join(if s16 { "audio_s16.wav" } else { "audio.wav" });
    let mut w = WavWriter::create(&wav_path, ch, fs, s16)?;
    let mut buf = vec![0.0f32; ch * 8192];
    loop {
        let n = sim.generate(&mut buf);
        if n == 0 {
            break;
        }
        w.write(&buf[..n * ch])?;
    }
    w.finish()?;

    let mut array = serde_json::json!({
        "sample_rate": fs,
        "speed_of_sound": spec.speed_of_sound_m_s,
        "sensors": spec.sensors_m,
        "description": spec.description,
    });
    if let (Some(lo), Some(hi)) = (spec.bounds_min_m, spec.bounds_max_m) {
        array["search_bounds"] = serde_json::json!({"min": lo, "max": hi});
    }
    let array_path = dir.join("array.json");
    std::fs::write(
        &array_path,
        serde_json::to_string_pretty(&array).unwrap_or_default(),
    )
    .at(&array_path)?;

    let mut csv = String::from("t,target,x,y,z\n");
    for (t, i, p) in &truth {
        csv.push_str(&format!("{t:.3},{i},{:.4},{:.4},{:.4}\n", p[0], p[1], p[2]));
    }
    let truth_path = dir.join("truth.csv");
    std::fs::write(&truth_path, csv).at(&truth_path)?;

    let meta = serde_json::json!({
        "generator": format!("sonotrack {} simulate", env!("CARGO_PKG_VERSION")),
        "n_channels": ch,
        "sample_rate": fs,
        "duration_s": spec.duration_s,
        "n_targets": spec.sources.len(),
        "snr_db_target": spec.snr_db,
        "snr_definition": "per-channel broadband SNR: signal power in 1-s blocks / white sensor-noise power over the full 0..fs/2 band; the median over all blocks and channels meets the target",
        "propagation": "free field, exact retarded time (Doppler), 1/r spreading, Kaiser-sinc fractional delay; truth t is emission time",
    });
    let meta_path = dir.join("meta.json");
    std::fs::write(
        &meta_path,
        serde_json::to_string_pretty(&meta).unwrap_or_default(),
    )
    .at(&meta_path)?;
    let spec_path = dir.join("scene.toml");
    std::fs::write(&spec_path, toml::to_string_pretty(spec).unwrap_or_default()).at(&spec_path)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiny(snr_db: f64) -> SceneSpec {
        SceneSpec {
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
                signal: SignalKind::White,
                level: 1.0,
                path: PathSpec::Static {
                    position_m: [10.0, 0.0, 0.0],
                },
            }],
        }
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
}
