//! Faults and events a scene can carry besides its sources: clicks (transients from random
//! points, or on one channel only), dead channels, clipping after a gain glitch, crosstalk
//! between the channels of one recording device, and an array description that is off (sensor
//! positions, speed of sound). The clicks are drawn from the
//! scene's seed, so a scene is the same every time.

use serde::{Deserialize, Serialize};

use crate::math::interp::SincKernel;
use crate::rng::philox::{PhiloxStream, Stream};

/// Where clicks come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ClickSource {
    /// A point in the water or the room (snapping shrimp, a dropped tool): every sensor hears
    /// it, each at its own delay.
    #[default]
    Point,
    /// One channel only (a connector, a cable knocked): the others hear nothing.
    Channel,
    /// Half of each.
    Both,
}

/// A channel that carries nothing for an interval (unplugged, muted).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeadChannel {
    pub channel: usize,
    pub start_s: f64,
    pub duration_s: f64,
}

/// A gain glitch: every channel amplified by `gain` for an interval, and clipped at full scale.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Clipping {
    pub start_s: f64,
    pub duration_s: f64,
    pub gain: f64,
}

/// Crosstalk between the channels of one recording device: the channels come in devices of
/// `group` consecutive channels (a last device of one channel has none); the channels of a device share an electrical noise (ground
/// or supply noise, the same on each: a peak fixed at lag zero in every pair of the device) at
/// `level_db` relative to each channel's own noise, and each channel after the first of its
/// device picks up the one before it at `leak_db` (default: no leak).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Crosstalk {
    pub group: usize,
    pub level_db: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leak_db: Option<f64>,
}

/// Faults and events of a scene (`[faults]` in a scene file). Every field defaults to none.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FaultSpec {
    /// Clicks per minute (a Poisson process over the scene).
    #[serde(default)]
    pub clicks_per_min: f64,
    #[serde(default)]
    pub click_source: ClickSource,
    /// A click's peak at the nearest sensor (or on its channel), as a fraction of full scale
    /// (the loudest source sample sits near 0.5). Default 0.5.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub click_peak: Option<f64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dead: Vec<DeadChannel>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub clipping: Vec<Clipping>,
    /// Standard deviation (m, per axis) of the error in the sensor positions the tracker is told
    /// (`array.json`); the simulation uses the true positions.
    #[serde(default)]
    pub sensor_error_m: f64,
    /// Relative error of the speed of sound the tracker is told: 0.01 tells it 1 % too fast.
    #[serde(default)]
    pub sound_speed_error: f64,
    /// Crosstalk within recording devices (`[faults.crosstalk]`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub crosstalk: Option<Crosstalk>,
}

impl FaultSpec {
    pub fn is_none(&self) -> bool {
        *self == FaultSpec::default()
    }

    /// Why the faults cannot be simulated for `channels` channels, if they cannot.
    pub fn problem(&self, channels: usize) -> Option<String> {
        if !(self.clicks_per_min >= 0.0 && self.clicks_per_min <= 6000.0) {
            return Some(format!(
                "clicks_per_min = {}: use 0 to 6000",
                self.clicks_per_min
            ));
        }
        if let Some(p) = self.click_peak.filter(|p| !(*p > 0.0 && *p <= 10.0)) {
            return Some(format!(
                "click_peak = {p}: use a fraction of full scale in (0, 10]"
            ));
        }
        if let Some(d) = self.dead.iter().find(|d| d.channel >= channels) {
            return Some(format!(
                "dead channel {} does not exist (the scene has {channels})",
                d.channel
            ));
        }
        let interval_ok = |s: f64, d: f64| s.is_finite() && s >= 0.0 && d.is_finite() && d >= 0.0;
        if self
            .dead
            .iter()
            .any(|d| !interval_ok(d.start_s, d.duration_s))
        {
            return Some("a dead channel's start_s and duration_s must be finite and >= 0".into());
        }
        if self
            .clipping
            .iter()
            .any(|c| !(interval_ok(c.start_s, c.duration_s) && (1.0..=1e4).contains(&c.gain)))
        {
            return Some(
                "a clipping interval needs a finite start and duration >= 0 and a gain of 1 to 10000"
                    .into(),
            );
        }
        if !(self.sensor_error_m >= 0.0 && self.sensor_error_m <= 100.0) {
            return Some(format!("sensor_error_m = {}", self.sensor_error_m));
        }
        if !(self.sound_speed_error.abs() <= 0.5) {
            return Some(format!(
                "sound_speed_error = {}: use a fraction between -0.5 and 0.5",
                self.sound_speed_error
            ));
        }
        if let Some(x) = &self.crosstalk {
            if !(2..=channels.max(2)).contains(&x.group) {
                return Some(format!(
                    "crosstalk group = {}: use 2 to the scene's {channels} channels",
                    x.group
                ));
            }
            if !(x.level_db.is_finite() && x.level_db <= 40.0) {
                return Some(format!(
                    "crosstalk level_db = {}: use a finite level of at most 40 dB",
                    x.level_db
                ));
            }
            if let Some(l) = x.leak_db.filter(|l| !(l.is_finite() && *l <= 0.0)) {
                return Some(format!(
                    "crosstalk leak_db = {l}: use a finite level of at most 0 dB"
                ));
            }
        }
        None
    }
}

/// Crosstalk laid out for the output: device size, the shared noise's standard deviation in
/// output units, the leak's gain, and the noise's own stream.
struct CrosstalkNoise {
    group: usize,
    std: f64,
    leak: f64,
    rng: PhiloxStream,
    /// The row before the leak (each channel picks up its neighbour's own signal).
    before: Vec<f32>,
}

impl CrosstalkNoise {
    fn apply(&mut self, row: &mut [f32]) {
        self.before.clear();
        self.before.extend_from_slice(row);
        for (d, dev) in row.chunks_mut(self.group).enumerate() {
            let shared = (self.rng.normal_f64() * self.std) as f32;
            if dev.len() < 2 {
                // (A last device of one channel shares its noise with nothing.)
                continue;
            }
            let first = d * self.group;
            for (i, v) in dev.iter_mut().enumerate() {
                *v += shared;
                if i > 0 {
                    *v += (self.leak * f64::from(self.before[first + i - 1])) as f32;
                }
            }
        }
    }
}

/// Where a click is heard.
#[derive(Debug, Clone, Copy)]
enum ClickAt {
    Point([f64; 3]),
    Channel(usize),
}

/// One click: its emission time (s), where it comes from, and its peak.
#[derive(Debug, Clone, Copy)]
struct Click {
    t_s: f64,
    at: ClickAt,
    peak: f64,
}

/// The faults of a scene laid out in time, applied to the output samples as they are made.
pub struct Faults {
    clicks: Vec<Click>,
    /// The first click that can still be heard.
    next_click: usize,
    dead: Vec<(usize, u64, u64)>,
    clipping: Vec<(u64, u64, f64)>,
    crosstalk: Option<CrosstalkNoise>,
    kernel: SincKernel,
    sensors: Vec<[f64; 3]>,
    c: f64,
    fs: f64,
}

/// Half-width of a click's band-limited impulse (samples).
const CLICK_HALF: usize = 8;

impl Faults {
    /// Lay out `spec`'s faults for a scene of `duration_s` with `sensors` at speed of sound `c`;
    /// point clicks come from anywhere in the box `volume` (lower and upper corners);
    /// `noise_std` is each channel's own noise in output units (crosstalk's reference).
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        spec: &FaultSpec,
        sensors: &[[f64; 3]],
        c: f64,
        fs: f64,
        duration_s: f64,
        volume: ([f64; 3], [f64; 3]),
        seed: u64,
        noise_std: f64,
    ) -> Self {
        let mut rng = PhiloxStream::new(seed, 3000, Stream::Simulate);
        let rate = spec.clicks_per_min / 60.0;
        let mut clicks = Vec::new();
        let mut t = 0.0;
        loop {
            if rate <= 0.0 {
                break;
            }
            t += -(1.0 - rng.uniform_f64()).max(1e-300).ln() / rate;
            if t >= duration_s {
                break;
            }
            let point = match spec.click_source {
                ClickSource::Point => true,
                ClickSource::Channel => false,
                ClickSource::Both => rng.uniform_f64() < 0.5,
            };
            let at = if point || sensors.is_empty() {
                ClickAt::Point(std::array::from_fn(|k| {
                    volume.0[k] + rng.uniform_f64() * (volume.1[k] - volume.0[k])
                }))
            } else {
                ClickAt::Channel(
                    ((rng.uniform_f64() * sensors.len() as f64) as usize).min(sensors.len() - 1),
                )
            };
            let peak = spec.click_peak.unwrap_or(0.5) * (0.5 + rng.uniform_f64());
            clicks.push(Click { t_s: t, at, peak });
        }
        let samples = |s: f64| (s.max(0.0) * fs).round() as u64;
        Self {
            clicks,
            next_click: 0,
            dead: spec
                .dead
                .iter()
                .map(|d| {
                    (
                        d.channel,
                        samples(d.start_s),
                        samples(d.start_s + d.duration_s),
                    )
                })
                .collect(),
            clipping: spec
                .clipping
                .iter()
                .map(|c| {
                    (
                        samples(c.start_s),
                        samples(c.start_s + c.duration_s),
                        c.gain,
                    )
                })
                .collect(),
            crosstalk: spec.crosstalk.as_ref().map(|x| CrosstalkNoise {
                group: x.group.max(1),
                std: noise_std * 10f64.powf(x.level_db / 20.0),
                leak: x.leak_db.map_or(0.0, |l| 10f64.powf(l / 20.0)),
                rng: PhiloxStream::new(seed, 5000, Stream::Simulate),
                before: Vec::with_capacity(sensors.len()),
            }),
            kernel: SincKernel::new(CLICK_HALF, 8.0),
            sensors: sensors.to_vec(),
            c,
            fs,
        }
    }

    /// How many clicks the scene has.
    pub fn clicks(&self) -> usize {
        self.clicks.len()
    }

    /// Apply every fault to output sample `n` (one value per channel, full-scale units).
    pub fn apply(&mut self, n: u64, row: &mut [f32]) {
        self.add_clicks(n, row);
        if let Some(x) = self.crosstalk.as_mut() {
            x.apply(row);
        }
        for &(ch, a, b) in &self.dead {
            if n >= a && n < b {
                row[ch] = 0.0;
            }
        }
        for &(a, b, gain) in &self.clipping {
            if n >= a && n < b {
                for v in row.iter_mut() {
                    *v = (*v * gain as f32).clamp(-1.0, 1.0);
                }
            }
        }
    }

    fn add_clicks(&mut self, n: u64, row: &mut [f32]) {
        let t = n as f64;
        let half = CLICK_HALF as f64;
        // Clicks whose last arrival is over: the farthest sensor is within this many samples.
        let reach = self.sensors.iter().fold(0.0f64, |m, s| {
            m.max(s.iter().map(|v| v * v).sum::<f64>().sqrt())
        });
        while let Some(c) = self.clicks.get(self.next_click) {
            let latest = c.t_s * self.fs + self.max_delay_samples(c, reach) + half;
            if latest < t {
                self.next_click += 1;
            } else {
                break;
            }
        }
        for c in &self.clicks[self.next_click..] {
            let emitted = c.t_s * self.fs;
            if emitted - half > t {
                break;
            }
            match c.at {
                ClickAt::Channel(m) => {
                    row[m] += (c.peak * self.kernel.at(t - emitted)) as f32;
                }
                ClickAt::Point(p) => {
                    let dist = |s: &[f64; 3]| {
                        ((p[0] - s[0]).powi(2) + (p[1] - s[1]).powi(2) + (p[2] - s[2]).powi(2))
                            .sqrt()
                            .max(0.1)
                    };
                    let nearest = self.sensors.iter().map(dist).fold(f64::INFINITY, f64::min);
                    for (m, s) in self.sensors.iter().enumerate() {
                        let r = dist(s);
                        let arrival = emitted + r / self.c * self.fs;
                        row[m] += (c.peak * nearest / r * self.kernel.at(t - arrival)) as f32;
                    }
                }
            }
        }
    }

    /// A bound on the click's arrival delay (samples) at any sensor.
    fn max_delay_samples(&self, c: &Click, sensor_reach_m: f64) -> f64 {
        match c.at {
            ClickAt::Channel(_) => 0.0,
            ClickAt::Point(p) => {
                let r = p.iter().map(|v| v * v).sum::<f64>().sqrt() + sensor_reach_m;
                r / self.c * self.fs
            }
        }
    }
}

/// The sensor positions and speed of sound a tracker is told for a scene with `faults`: the
/// truth, each coordinate off by a normal error of `sensor_error_m`, and the speed of sound
/// scaled by 1 + `sound_speed_error`. Deterministic from `seed`.
pub fn told_array(
    faults: &FaultSpec,
    sensors: &[[f64; 3]],
    c: f64,
    seed: u64,
) -> (Vec<[f64; 3]>, f64) {
    let mut rng = PhiloxStream::new(seed, 4000, Stream::Simulate);
    let told = sensors
        .iter()
        .map(|s| {
            std::array::from_fn(|k| {
                let e = rng.normal_f64() * faults.sensor_error_m;
                s[k] + e
            })
        })
        .collect();
    (told, c * (1.0 + faults.sound_speed_error))
}
