//! What sources emit: white, pink, ship-like and speech-like signals, band-limited so that the
//! fractional-delay interpolator reads them accurately, each deterministic from its seed.

use serde::{Deserialize, Serialize};

use crate::math::interp::SincKernel;
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
pub(super) struct SignalGen {
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
    pub(super) fn new(kind: SignalKind, fs: f64, seed: u64, index: u32) -> Self {
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

    pub(super) fn next(&mut self) -> f64 {
        self.raw() * self.gain
    }
}
