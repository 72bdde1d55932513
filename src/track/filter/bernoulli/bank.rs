//! Many curves tracks stepped together in f32 (digest B2.4 and B5; B-6, B-11, B-12): the CPU
//! twin of `kernels/tbd.cu`, stage for stage and operation for operation, so that the two
//! backends give the same bits.
//!
//! Each of T tracks is a Bernoulli filter with N_b birth and N_c continuing particles of the
//! GCC-curve model ([`crate::track::measure::curves`], state x y z vx vy vz A). A step:
//! 1. weighs every particle: births drawn from the frame's proposal and weighted by
//!    l · p_b / q_b / N_b, continuing particles moved and weighted by l / N_c. A particle's
//!    ratio sums its pairs as a warp does on the device: lane k takes pairs k, k + 32, …, and
//!    the 32 lane sums meet in a butterfly (lane i adds lane i ⊕ 16, ⊕ 8, …);
//! 2. sums each set's weights relative to the set's largest, quantised to integers (an integer
//!    sum is the same in any order, so the device's atomics give the CPU's sum);
//! 3. updates the existence in f64 with [`crate::math::fastmath64`];
//! 4. resamples the N_b + N_c particles down to N_c by systematic resampling on an integer
//!    cumulative sum of the mixture weights;
//! 5. returns per track only the existence, the birth share and the mean (summed in fixed point).

use super::DrawKey;
use super::existence::Chain;
use crate::math::{fastmath as fm, fastmath64 as fm64};
use crate::rng::philox::{Stream, draw, normals6, uniform, uniforms6};

/// State dimension (as [`crate::track::measure::curves::DIM`]).
pub const DIM: usize = 7;
/// Lanes of a warp: the pair sum's layout.
pub const LANES: usize = 32;
use crate::track::measure::curves::kappa::KAPPA_STEPS;
/// Scale of the quantised weights: a weight of 1 (the largest) is 2^32 − 1.
const Q_SCALE: f32 = 4_294_967_296.0;
/// Scale of the fixed-point sums of the mean: 2^16 per metre (or m/s).
const MEAN_SCALE: f32 = 65_536.0;
/// Largest candidates and top cells a proposal may hold (the device keeps them in shared memory).
pub const MAX_CANDIDATES: usize = 16;
pub const MAX_TOP_CELLS: usize = 256;

/// Σ κ c and Σ κ² at a fraction `f` across an interval from its ends' values.
pub fn interpolate(num: [f32; 2], den: [f32; 3], f: f32) -> (f32, f32) {
    let g = 1.0 - f;
    let u = num[0] * g + num[1] * f;
    let k = den[0] * g * g + 2.0 * den[1] * f * g + den[2] * f * f;
    (u, k)
}

/// Why a curves bank cannot be built or stepped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BankError {
    /// The model's sizes are out of range or its values are not usable.
    Model(String),
    /// A slice handed in has the wrong length.
    Length {
        what: &'static str,
        want: usize,
        got: usize,
    },
    /// The GPU failed (allocation, copy or launch).
    Backend(String),
}

impl std::fmt::Display for BankError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BankError::Model(s) => write!(f, "curves bank model: {s}"),
            BankError::Length { what, want, got } => {
                write!(f, "curves bank: {what} has {got} values, needs {want}")
            }
            BankError::Backend(s) => write!(f, "curves bank on the GPU: {s}"),
        }
    }
}

/// `Ok` when a slice of `got` values has the `want` it needs.
pub fn length(what: &'static str, got: usize, want: usize) -> Result<(), BankError> {
    if got == want {
        Ok(())
    } else {
        Err(BankError::Length { what, want, got })
    }
}

/// The curves model packed for the bank (f32; what the device holds).
#[derive(Debug, Clone, PartialEq)]
pub struct BankModel {
    pub sensors: Vec<[f32; 3]>,
    /// Sensor indices (a, b) of each pair.
    pub pairs: Vec<(u32, u32)>,
    /// Samples per metre of path difference.
    pub per_m: f32,
    pub curve_half: u32,
    /// κ every 1/KAPPA_STEPS lag from 0.
    pub kappa: Vec<f32>,
    /// The likelihood area's half-width in lags.
    pub w: u32,
    /// Tempering over pairs.
    pub beta: f32,
    /// u's relative noise variance against x = lag / curve_half: 1 + p₁ x² + p₂ x⁴
    /// (`[1, p₁, p₂]`: the f64 model's quartic over its constant).
    pub profile: [f32; 3],
    pub lo: [f32; 3],
    pub hi: [f32; 3],
    /// Motion: frame length (s), acceleration noise, coherence walk × √frame.
    pub frame_s: f32,
    pub accel_std: f32,
    pub coherence_step: f32,
    pub coherence: (f32, f32),
    pub speed_max: f32,
    /// The birth grid: cells per axis and their size.
    pub grid_n: [u32; 3],
    pub grid_size: [f32; 3],
    pub candidate_spread_m: f32,
    /// (2π spread²)^−1.5 × the volume: a candidate normal's density over the uniform prior's.
    pub candidate_norm: f32,
}

impl BankModel {
    fn check(&self) -> Result<(), BankError> {
        let m = self.sensors.len() as u32;
        let bad = |why: String| Err(BankError::Model(why));
        if self.pairs.is_empty() || self.pairs.iter().any(|&(a, b)| a >= m || b >= m) {
            return bad(format!(
                "{} pairs over {m} sensors (each pair's sensors must exist)",
                self.pairs.len()
            ));
        }
        if !(1..=15).contains(&self.w) || self.kappa.len() < 2 {
            return bad(format!(
                "a likelihood area of ±{} lags (use 1 to 15) and {} κ values",
                self.w,
                self.kappa.len()
            ));
        }
        if self.grid_n.contains(&0) || (0..3).any(|k| self.hi[k] <= self.lo[k]) {
            return bad("an empty search volume or birth grid".into());
        }
        Ok(())
    }

    pub fn curve_len(&self) -> usize {
        2 * self.curve_half as usize + 1
    }

    fn cells(&self) -> usize {
        self.grid_n.iter().map(|&n| n as usize).product()
    }

    /// κ at a lag offset, linear between table entries; 0 beyond the table.
    pub fn kappa(&self, d: f32) -> f32 {
        let x = d.abs() * KAPPA_STEPS as f32;
        let i = x as usize;
        if i + 1 >= self.kappa.len() {
            return 0.0;
        }
        let f = x - i as f32;
        self.kappa[i] * (1.0 - f) + self.kappa[i + 1] * f
    }

    /// Pair p's delay (samples) at `x`: the range difference as (b − a)·(2x − a − b) / (r_a + r_b),
    /// which keeps its precision where the plain difference of two long ranges would cancel.
    pub fn delay(&self, p: usize, x: &[f32]) -> f32 {
        let (a, b) = self.pairs[p];
        let (sa, sb) = (self.sensors[a as usize], self.sensors[b as usize]);
        let (mut ra, mut rb, mut num) = (0.0f32, 0.0f32, 0.0f32);
        for k in 0..3 {
            let (da, db) = (x[k] - sa[k], x[k] - sb[k]);
            ra += da * da;
            rb += db * db;
            num += (sb[k] - sa[k]) * (2.0 * x[k] - sa[k] - sb[k]);
        }
        let den = ra.sqrt() + rb.sqrt();
        if den > 0.0 {
            num / den * self.per_m
        } else {
            0.0
        }
    }

    /// One pair's term (A u − A²/2) / σ²(d) at `x` on `curve`, u = Σ κ c / Σ κ² over the
    /// likelihood area read from the lobe tables ([`super::lobes`]).
    fn pair_term(&self, p: usize, curve: &[f32], sigma: f32, x: &[f32]) -> f32 {
        let d = self.delay(p, x);
        let c = self.curve_half as f32;
        let (num, den) = match self.lobe_at(d) {
            Some((j, f)) => interpolate(self.lobe_num(j, curve), self.lobe_den(j), f),
            None => (0.0, 0.0),
        };
        let xr = d * (1.0 / c);
        let x2 = xr * xr;
        let [_, p1, p2] = self.profile;
        let rel = (1.0 + p1 * x2 + p2 * x2 * x2).clamp(0.05, 1.5);
        let s2 = sigma * sigma * rel;
        let a = x[6];
        // (A u − A²/2) / s² with u = num / den, in one division.
        if den > 0.0 {
            (a * num - 0.5 * a * a * den) / (den * s2)
        } else {
            (-0.5 * a * a) / s2
        }
    }

    /// ln l(z | x): −∞ outside the volume; else β × the butterfly sum of the lanes' pair sums.
    pub fn log_lr(&self, f: &BankFrame, x: &[f32]) -> f32 {
        let inside = (0..3).all(|k| x[k] >= self.lo[k] && x[k] <= self.hi[k]);
        if !inside {
            return f32::NEG_INFINITY;
        }
        let cl = self.curve_len();
        let mut lane = [0.0f32; LANES];
        for (k, v) in lane.iter_mut().enumerate() {
            let mut p = k;
            while p < self.pairs.len() {
                if f.ok[p] != 0 {
                    *v += self.pair_term(p, &f.curves[p * cl..(p + 1) * cl], f.sigma[p], x);
                }
                p += LANES;
            }
        }
        let mut off = LANES / 2;
        while off > 0 {
            let old = lane;
            for (i, v) in lane.iter_mut().enumerate() {
                *v = old[i] + old[i ^ off];
            }
            off /= 2;
        }
        self.beta * lane[0]
    }

    /// Draws a birth into `x` from `prop`; returns ln(p_b / q_b) (CurveModel::draw_birth in f32).
    pub fn draw_birth(&self, prop: &BankProposal, key: DrawKey, x: &mut [f32]) -> f32 {
        let u = uniforms6(key.words(Stream::InitPosition));
        let v = uniforms6(key.words(Stream::InitVelocity));
        let pick = |len: usize, r: f32| ((r * len as f32) as usize).min(len - 1);
        let sh = prop.shares;
        let n = self.cells();
        if u[0] >= sh[0] && u[0] < sh[0] + sh[1] {
            let c = prop.candidates[pick(prop.candidates.len(), u[1])];
            let z = normals6(key.words(Stream::Roughen));
            for k in 0..3 {
                x[k] = c[k] + self.candidate_spread_m * z[k];
            }
        } else {
            let cell = if u[0] < sh[0] || prop.cells.is_empty() {
                pick(n, u[1])
            } else {
                prop.cells[pick(prop.cells.len(), u[1])] as usize
            };
            let g = self.grid_n.map(|v| v as usize);
            let idx = [cell % g[0], (cell / g[0]) % g[1], cell / (g[0] * g[1])];
            for k in 0..3 {
                x[k] = self.lo[k] + (idx[k] as f32 + u[2 + k]) * self.grid_size[k];
            }
        }
        let vmax = self.speed_max;
        x[3] = (2.0 * u[5] - 1.0) * vmax;
        x[4] = (2.0 * v[0] - 1.0) * vmax;
        x[5] = (2.0 * v[1] - 1.0) * 0.25 * vmax;
        let (alo, ahi) = self.coherence;
        x[6] = alo + v[2] * (ahi - alo);
        -fm::ln(self.proposal_density(prop, x))
    }

    /// q_b(x) over the uniform prior's density: the uniform share, the top cells' share when x
    /// lies in one, and the candidates' normals.
    fn proposal_density(&self, prop: &BankProposal, x: &[f32]) -> f32 {
        let sh = prop.shares;
        let mut q = sh[0];
        let g = self.grid_n;
        let idx = [0, 1, 2].map(|k| ((x[k] - self.lo[k]) / self.grid_size[k]).floor());
        let inside = (0..3).all(|k| idx[k] >= 0.0 && idx[k] < g[k] as f32);
        if inside && !prop.cells.is_empty() {
            let cell = idx[0] as u32 + g[0] * (idx[1] as u32 + g[1] * idx[2] as u32);
            if prop.cells.contains(&cell) {
                q += sh[2] * self.cells() as f32 / prop.cells.len() as f32;
            }
        }
        if sh[1] > 0.0 && !prop.candidates.is_empty() {
            let s2 = self.candidate_spread_m * self.candidate_spread_m;
            let mut sum = 0.0f32;
            for c in &prop.candidates {
                let mut d2 = 0.0f32;
                for k in 0..3 {
                    let e = x[k] - c[k];
                    d2 += e * e;
                }
                sum += fm::exp(-0.5 * d2 / s2);
            }
            q += sh[1] * self.candidate_norm * sum / prop.candidates.len() as f32;
        }
        q
    }

    /// Moves a continuing particle one frame on (CurveModel::propagate in f32).
    pub fn propagate(&self, key: DrawKey, x: &mut [f32]) {
        let g = normals6(key.words(Stream::Predict));
        let t = self.frame_s;
        for k in 0..3 {
            let a = self.accel_std * g[k];
            x[k] += x[k + 3] * t + 0.5 * a * t * t;
            x[k + 3] += a * t;
        }
        let (alo, ahi) = self.coherence;
        let a = x[6] + self.coherence_step * g[3];
        x[6] = if a < alo {
            (2.0 * alo - a).min(ahi)
        } else if a > ahi {
            (2.0 * ahi - a).max(alo)
        } else {
            a
        };
    }
}

/// One frame as the bank weighs it.
#[derive(Debug, Clone, PartialEq)]
pub struct BankFrame {
    /// `pairs × curve_len`, lag −curve_half first.
    pub curves: Vec<f32>,
    /// Each pair's σ of u at lag 0.
    pub sigma: Vec<f32>,
    /// 1 where the pair is usable.
    pub ok: Vec<u32>,
}

/// The frame's birth proposal, shared by every track of the step.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct BankProposal {
    /// Shares: uniform, around the candidates, the top cells (summing to 1).
    pub shares: [f32; 3],
    pub cells: Vec<u32>,
    pub candidates: Vec<[f32; 3]>,
}

/// What a step gives per track.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TrackSums {
    pub p_exist: f64,
    pub birth_share: f64,
    /// ln Σ w̃ of the birth and continuing sets (−∞ when empty).
    pub log_sum_birth: f64,
    pub log_sum_cont: f64,
    /// Mean of the resampled particles.
    pub mean: [f64; DIM],
    pub from_birth: u32,
}

/// Sizes of a bank.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BankSizes {
    pub tracks: usize,
    pub n_birth: usize,
    pub n_cont: usize,
}

/// A bank of curves tracks on one backend.
pub trait CurveBank {
    fn sizes(&self) -> BankSizes;
    /// One frame for every track; returns each track's sums.
    fn step(&mut self, frame: &BankFrame, prop: &BankProposal)
    -> Result<Vec<TrackSums>, BankError>;
    /// Each track's continuing particles, `DIM × (T · N_c)` (state-major).
    fn particles(&self) -> Result<Vec<f32>, BankError>;
    /// The last step's log-weights, `T × (N_b + N_c)` (births first in each track).
    fn log_weights(&self) -> Result<Vec<f32>, BankError>;
    /// Replaces every track's continuing particles and existence.
    fn load(&mut self, particles: &[f32], p_exist: &[f64]) -> Result<(), BankError>;
    /// Every track back to P(exists) = `p0` with no particles (the next step's births seed
    /// them), as a new bank starts.
    fn reset(&mut self, p0: f64) -> Result<(), BankError>;
    /// The lobe table of `frame` as the last step (which was on it) read it: pairs ×
    /// intervals × 2 ([`BankModel::lobe_table`]).
    fn lobe_table(&self, frame: &BankFrame) -> Result<Vec<f32>, BankError>;
    /// Time each step with device events from now on (`on`), or not; host backends have no
    /// device clock.
    fn set_device_timing(&mut self, _on: bool) {}
    /// Device time of the last step's kernels (when timed); None for host backends.
    fn last_device_time_s(&self) -> Option<f64> {
        None
    }
    /// Bytes read back from the device by the steps so far (B-12; 0 on the host).
    fn bytes_read(&self) -> u64 {
        0
    }
}

/// 32 ln 2: the quantised sums' scale in the log domain.
const Q_LN: f64 = 22.180_709_777_918_25;

/// A weight in (0, 1] as an integer of at most 2^32 − 1.
pub fn quantise(w: f32) -> u64 {
    ((w * Q_SCALE) as u64).min(u64::from(u32::MAX))
}

/// A particle's log-weight made safe to sum: NaN is no weight, +∞ the largest finite.
pub fn clean(lw: f32) -> f32 {
    if lw.is_nan() {
        f32::NEG_INFINITY
    } else {
        lw.min(f32::MAX)
    }
}

/// A state value in fixed point for the mean's sum (NaN counts 0).
pub fn fixed(x: f32) -> i64 {
    let v = x * MEAN_SCALE;
    if v.is_nan() {
        0
    } else {
        v.clamp(-1e15, 1e15).round_ties_even() as i64
    }
}

/// The mean of `n` values from the wrapping sum of their [`fixed`] forms.
pub fn mean_of_fixed(sum: i64, n: usize) -> f64 {
    sum as f64 / f64::from(MEAN_SCALE) / n as f64
}

/// Where state component `k` of particle `i` of track `t` lies in a state-major array of
/// `tracks` tracks of `n` particles each (births, continuing: the layout of both backends).
pub fn slot(tracks: usize, n: usize, k: usize, t: usize, i: usize) -> usize {
    k * tracks * n + t * n + i
}

/// ln of a set's weight sum from its largest log-weight and its quantised sum.
pub fn log_sum(max: f32, qsum: u64) -> f64 {
    if qsum == 0 || max == f32::NEG_INFINITY {
        f64::NEG_INFINITY
    } else {
        f64::from(max) + fm64::ln(qsum as f64) - Q_LN
    }
}

/// The existence update of [`super::existence::update`] in [`fm64`]'s arithmetic, and the two
/// sets' f32 offsets that make the mixture weights relative to the largest (≤ 0 in the log).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Update {
    pub p: f64,
    pub birth_share: f64,
    pub off: [f32; 2],
}

pub fn existence_update(chain: &Chain, p_prev: f64, max: [f32; 2], log_sums: [f64; 2]) -> Update {
    let p = p_prev.clamp(0.0, 1.0);
    let fb = fm64::ln(chain.p_birth) + fm64::ln(1.0 - p);
    let fc = fm64::ln(1.0 - chain.p_death) + fm64::ln(p);
    let lmb = fb + log_sums[0];
    let lmc = fc + log_sums[1];
    let tot = log_add(lmb, lmc);
    let absent = fm64::ln(chain.p_death * p + (1.0 - chain.p_birth) * (1.0 - p));
    let x = tot - absent;
    let p_new = if x >= 0.0 {
        1.0 / (1.0 + fm64::exp(-x))
    } else {
        let e = fm64::exp(x);
        e / (1.0 + e)
    };
    let birth_share = if tot == f64::NEG_INFINITY {
        0.0
    } else {
        fm64::exp(lmb - tot)
    };
    let g = (f64::from(max[0]) + fb).max(f64::from(max[1]) + fc);
    let off = if g == f64::NEG_INFINITY {
        [f32::NEG_INFINITY; 2]
    } else {
        [(fb - g) as f32, (fc - g) as f32]
    };
    Update {
        p: p_new,
        birth_share,
        off,
    }
}

fn log_add(a: f64, b: f64) -> f64 {
    let m = a.max(b);
    if m == f64::NEG_INFINITY {
        return m;
    }
    m + fm64::ln(fm64::exp(a - m) + fm64::exp(b - m))
}

/// The systematic target of output j of n: ⌊(u0 + j) / n · total⌋.
pub fn target(u0: f32, j: usize, n: usize, total: u64) -> u64 {
    ((f64::from(u0) + j as f64) / n as f64 * total as f64) as u64
}

/// The CPU twin of the device bank.
#[derive(Debug, Clone)]
pub struct CpuCurveBank {
    model: BankModel,
    sizes: BankSizes,
    chain: Chain,
    seed: u64,
    frame: u64,
    p: Vec<f64>,
    has_cont: Vec<bool>,
    /// `DIM × (T · N_c)`, state-major.
    cont: Vec<f32>,
    /// `DIM × (T · N_b)`, state-major.
    births: Vec<f32>,
    /// `T × (N_b + N_c)`.
    lw: Vec<f32>,
    next: Vec<f32>,
}

/// What both backends check before building a bank.
pub fn check_sizes(model: &BankModel, sizes: BankSizes) -> Result<(), BankError> {
    model.check()?;
    let BankSizes {
        tracks,
        n_birth,
        n_cont,
    } = sizes;
    let per = n_birth + n_cont;
    if tracks == 0 || n_cont == 0 || per >= 1 << 24 || tracks.saturating_mul(per) >= 1 << 31 {
        return Err(BankError::Model(format!(
            "{tracks} tracks of {n_birth} births and {n_cont} continuing particles (use at least \
             one track and one continuing particle, under 2^24 particles a track and 2^31 in all)"
        )));
    }
    Ok(())
}

impl CpuCurveBank {
    /// `sizes` tracks of `model`, each starting with P(exists) = `p0` and no particles (the
    /// first step's births seed them).
    pub fn new(
        model: BankModel,
        sizes: BankSizes,
        chain: Chain,
        seed: u64,
        p0: f64,
    ) -> Result<Self, BankError> {
        check_sizes(&model, sizes)?;
        let BankSizes {
            tracks,
            n_birth,
            n_cont,
        } = sizes;
        Ok(Self {
            model,
            sizes,
            chain,
            seed,
            frame: 0,
            p: vec![p0.clamp(0.0, 1.0); tracks],
            has_cont: vec![false; tracks],
            cont: vec![0.0; DIM * tracks * n_cont],
            births: vec![0.0; DIM * tracks * n_birth],
            lw: vec![f32::NEG_INFINITY; tracks * (n_birth + n_cont)],
            next: vec![0.0; DIM * tracks * n_cont],
        })
    }

    fn key(&self, t: usize, i: usize) -> DrawKey {
        DrawKey {
            seed: self.seed,
            frame: self.frame,
            track: t as u32,
            particle: i as u32,
        }
    }

    /// Stage 1: every particle drawn or moved, and weighed.
    fn weigh(&mut self, f: &BankFrame, prop: &BankProposal, ln_n: [f32; 2]) {
        let BankSizes {
            tracks,
            n_birth: nb,
            n_cont: nc,
        } = self.sizes;
        let per = nb + nc;
        let mut x = [0.0f32; DIM];
        for t in 0..tracks {
            for i in 0..nb {
                let corr = self.model.draw_birth(prop, self.key(t, i), &mut x);
                for (k, v) in x.iter().enumerate() {
                    self.births[slot(tracks, nb, k, t, i)] = *v;
                }
                self.lw[t * per + i] = clean(self.model.log_lr(f, &x) + corr - ln_n[0]);
            }
            for i in 0..nc {
                let lw = if self.has_cont[t] {
                    for (k, v) in x.iter_mut().enumerate() {
                        *v = self.cont[slot(tracks, nc, k, t, i)];
                    }
                    self.model.propagate(self.key(t, nb + i), &mut x);
                    for (k, v) in x.iter().enumerate() {
                        self.cont[slot(tracks, nc, k, t, i)] = *v;
                    }
                    clean(self.model.log_lr(f, &x) - ln_n[1])
                } else {
                    f32::NEG_INFINITY
                };
                self.lw[t * per + nb + i] = lw;
            }
        }
    }

    /// Stages 2 to 5 for track t.
    fn finish_track(&mut self, t: usize) -> TrackSums {
        let BankSizes {
            tracks,
            n_birth: nb,
            n_cont: nc,
        } = self.sizes;
        let per = nb + nc;
        let lw = &self.lw[t * per..(t + 1) * per];
        let sets = [&lw[..nb], &lw[nb..]];
        let max = sets.map(|s| s.iter().copied().fold(f32::NEG_INFINITY, f32::max));
        let mut log_sums = [f64::NEG_INFINITY; 2];
        for s in 0..2 {
            if max[s] > f32::NEG_INFINITY {
                let q: u64 = sets[s].iter().map(|&v| quantise(fm::exp(v - max[s]))).sum();
                log_sums[s] = log_sum(max[s], q);
            }
        }
        let e = existence_update(&self.chain, self.p[t], max, log_sums);
        let mut cum = Vec::with_capacity(per);
        let mut total = 0u64;
        for (i, &v) in lw.iter().enumerate() {
            total += quantise(fm::exp(v + e.off[usize::from(i >= nb)]));
            cum.push(total);
        }
        let u0 = uniform(draw(self.seed, self.frame, t as u32, 0, Stream::Resample)[0]);
        let mut sums = [0i64; DIM];
        let mut from_birth = 0u32;
        for j in 0..nc {
            let a = if total > 0 {
                let tj = target(u0, j, nc, total);
                cum.partition_point(|&c| c <= tj).min(per - 1)
            } else if nb > 0 {
                j % nb
            } else {
                nb + j
            };
            for (k, s) in sums.iter_mut().enumerate() {
                let v = if a < nb {
                    self.births[slot(tracks, nb, k, t, a)]
                } else {
                    self.cont[slot(tracks, nc, k, t, a - nb)]
                };
                self.next[slot(tracks, nc, k, t, j)] = v;
                *s = s.wrapping_add(fixed(v));
            }
            from_birth += u32::from(a < nb);
        }
        self.p[t] = e.p;
        TrackSums {
            p_exist: e.p,
            birth_share: e.birth_share,
            log_sum_birth: log_sums[0],
            log_sum_cont: log_sums[1],
            mean: sums.map(|s| mean_of_fixed(s, nc)),
            from_birth,
        }
    }
}

/// ln N_b and ln N_c as the host hands them to both backends.
pub fn ln_counts(sizes: BankSizes) -> [f32; 2] {
    [
        (sizes.n_birth.max(1) as f64).ln() as f32,
        (sizes.n_cont.max(1) as f64).ln() as f32,
    ]
}

/// Checks a frame and proposal against the model.
pub fn check_frame(m: &BankModel, f: &BankFrame, prop: &BankProposal) -> Result<(), BankError> {
    let np = m.pairs.len();
    length("curves", f.curves.len(), np * m.curve_len())?;
    length("sigma", f.sigma.len(), np)?;
    length("ok", f.ok.len(), np)?;
    if prop.cells.len() > MAX_TOP_CELLS || prop.candidates.len() > MAX_CANDIDATES {
        return Err(BankError::Model(format!(
            "a proposal of {} cells and {} candidates (at most {MAX_TOP_CELLS} and \
             {MAX_CANDIDATES})",
            prop.cells.len(),
            prop.candidates.len()
        )));
    }
    let cells = m.cells() as u32;
    if prop.cells.iter().any(|&c| c >= cells) {
        return Err(BankError::Model(format!(
            "a proposal cell beyond the grid's {cells}"
        )));
    }
    let sh = prop.shares;
    if !sh.iter().all(|s| s.is_finite() && *s >= 0.0) || (sh[1] > 0.0 && prop.candidates.is_empty())
    {
        return Err(BankError::Model(format!(
            "proposal shares {sh:?} (each finite and at least 0; the candidates' share needs \
             candidates)"
        )));
    }
    Ok(())
}

impl CurveBank for CpuCurveBank {
    fn sizes(&self) -> BankSizes {
        self.sizes
    }

    fn step(&mut self, f: &BankFrame, prop: &BankProposal) -> Result<Vec<TrackSums>, BankError> {
        check_frame(&self.model, f, prop)?;
        self.weigh(f, prop, ln_counts(self.sizes));
        let out = (0..self.sizes.tracks)
            .map(|t| self.finish_track(t))
            .collect();
        std::mem::swap(&mut self.cont, &mut self.next);
        self.has_cont.fill(true);
        self.frame += 1;
        Ok(out)
    }

    fn particles(&self) -> Result<Vec<f32>, BankError> {
        Ok(self.cont.clone())
    }

    fn log_weights(&self) -> Result<Vec<f32>, BankError> {
        Ok(self.lw.clone())
    }

    fn load(&mut self, particles: &[f32], p_exist: &[f64]) -> Result<(), BankError> {
        length("particles", particles.len(), self.cont.len())?;
        length("p_exist", p_exist.len(), self.sizes.tracks)?;
        self.cont.copy_from_slice(particles);
        for (p, &v) in self.p.iter_mut().zip(p_exist) {
            *p = v.clamp(0.0, 1.0);
        }
        self.has_cont.fill(true);
        Ok(())
    }

    fn lobe_table(&self, frame: &BankFrame) -> Result<Vec<f32>, BankError> {
        Ok(self.model.lobe_table(&frame.curves))
    }

    fn reset(&mut self, p0: f64) -> Result<(), BankError> {
        self.p.fill(p0.clamp(0.0, 1.0));
        self.has_cont.fill(false);
        Ok(())
    }
}

#[cfg(test)]
#[path = "bank_tests.rs"]
mod tests;
