//! The acoustic measurement model of track-before-detect (digest B5): a particle is weighed by
//! each pair's GCC-PHAT curve around the lag it predicts, with no peak picking.
//!
//! A source at delay d (samples, sub-sample) adds A κ(ℓ − d) to pair p's curve, κ being the
//! PHAT main lobe of the analysis band (κ(0) = 1) and A the source's coherence. Over the lags
//! C = {ℓ : |ℓ − d| ≤ w} the Gaussian log-likelihood ratio is Σ h(2R − h) / 2σ² with
//! h = A κ(ℓ − d) (B5). Neighbouring lags are not independent: the noise of a PHAT curve is
//! itself band-limited, with about the main lobe's correlation, so that sum counts each lobe's
//! evidence Σκ² times. Dividing by Σκ² gives the ratio of the lobe's least-squares amplitude
//! u = Σκ R / Σκ² alone: (A u − A²/2) / σ², with σ² the variance of u under noise, which each
//! frame estimates from lags no source can produce (beyond the pair's physical window).
//! Pairs that share a sensor carry the same source's evidence more than once; with M sensors
//! only M − 1 pairs are independent, so the sum over pairs is tempered by (M − 1) / P.
//!
//! State: position (3), velocity (3), coherence A. [`kappa`] tabulates κ, [`clutter`] is the
//! curves' slow mean that a clutter map takes off them.

pub mod clutter;
pub mod kappa;
pub mod reader;
#[cfg(test)]
pub(crate) mod testkit;

use crate::dsp::gcc::GccParams;
use crate::rng::philox::{Stream, normals6, uniforms6};
use crate::track::FilterParams;
use crate::track::filter::bernoulli::bank::{BankFrame, BankModel, BankProposal, MAX_CANDIDATES};
use crate::track::filter::bernoulli::{CellModel, DrawKey, strongest};
use kappa::{KAPPA_STEPS, kappa_table, lobe_half_width};

/// State dimension: x, y, z, vx, vy, vz, A.
pub const DIM: usize = 7;
/// Frames of noise-level memory: a frame's σ² estimate counts this many frames' worth of
/// reference lags from the running level beside its own.
const NOISE_PRIOR_LAGS: f64 = 64.0;

/// What the curves path is set to (`[tracker.curves]`).
#[derive(Debug, Clone, PartialEq)]
pub struct CurveSettings {
    /// Coherence of a new source: uniform on this range.
    pub coherence: (f64, f64),
    /// Random walk of the coherence, per √s.
    pub coherence_walk: f64,
    /// Acceleration noise (m/s², per axis, constant over a frame).
    pub accel_std: f64,
    /// A new source's speed: each horizontal component uniform on ±this, the vertical on ±¼.
    pub speed_max: f64,
    /// Birth proposal: cells of the coarse grid over the search volume, the strongest kept,
    /// and the share drawn uniformly over the volume.
    pub grid_cells: usize,
    pub top_cells: usize,
    pub uniform_share: f64,
    /// Births around the recent frames' consensus fixes of the peaks (where any): this share,
    /// spread by `candidate_spread_m` (a normal per axis).
    pub candidate_share: f64,
    pub candidate_spread_m: f64,
}

impl Default for CurveSettings {
    fn default() -> Self {
        Self {
            coherence: (0.02, 0.6),
            coherence_walk: 0.02,
            accel_std: 0.3,
            speed_max: 6.0,
            grid_cells: 4096,
            top_cells: 64,
            uniform_share: 0.25,
            candidate_share: 0.5,
            candidate_spread_m: 0.5,
        }
    }
}

/// One pair as the model sees it.
#[derive(Debug, Clone, Copy, PartialEq)]
struct PairGeo {
    a: usize,
    b: usize,
    /// Lags (samples, absolute) at and beyond which no source can be: the physical window plus
    /// the main lobe.
    reference_from: usize,
}

/// The GCC-curve model of a fixed 3-D array.
#[derive(Debug, Clone)]
pub struct CurveModel {
    sensors: Vec<[f64; 3]>,
    pairs: Vec<PairGeo>,
    /// Samples per metre of path difference: fs / c.
    per_m: f64,
    /// Speed of sound, m/s.
    c: f64,
    curve_half: usize,
    /// κ at lag offsets 0, 1/KAPPA_STEPS, … (even function).
    kappa: Vec<f64>,
    /// Half-width of the likelihood area, lags.
    w: usize,
    /// (M − 1) / P.
    beta: f64,
    /// The variance of u on noise against the lag's magnitude, relative to lag 0: the even
    /// quartic c₀ + c₁ x² + c₂ x⁴ with x = lag / curve_half (a windowed frame's correlation
    /// holds fewer samples at long lags; see [`Self::noise_profile`]).
    profile: [f64; 3],
    /// The noise level of u from the band alone (before any frame): the PHAT curve's level
    /// times the lobe's gain on noise whose correlation across lags is κ.
    sigma_prior: f64,
    lo: [f64; 3],
    hi: [f64; 3],
    frame_s: f64,
    set: CurveSettings,
    grid: Grid,
}

/// The coarse grid of the birth proposal: cells and, per cell and pair, the lags it can give.
#[derive(Debug, Clone)]
struct Grid {
    n: [usize; 3],
    size: [f64; 3],
    /// `cells × pairs` index ranges into the curve (inclusive).
    spans: Vec<(u32, u32)>,
}

/// Tracks on the curves closer than this (m) are one source: the later is ended as a
/// duplicate, and neither's template is taken off the other's view.
pub const DUPLICATE_M: f64 = 2.0;

/// Whether `a` and `b` (their first three components) are closer than `m` metres.
pub fn near(a: &[f64], b: &[f64], m: f64) -> bool {
    (0..3).map(|k| (a[k] - b[k]).powi(2)).sum::<f64>() < m * m
}

/// One frame as the model weighs it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CurveFrame {
    /// `pairs × (2 curve_half + 1)`, lag −curve_half first.
    pub curves: Vec<f64>,
    /// Each pair's noise level σ of the lobe amplitude u at lag 0 (at lag ℓ it is σ times
    /// the model's profile).
    pub sigma: Vec<f64>,
    /// Pairs to use (both channels healthy).
    pub ok: Vec<bool>,
    /// Where the peaks of recent frames agree a source may be (births are drawn around them);
    /// filled by the tracker.
    pub candidates: Vec<[f64; 3]>,
}

/// The birth proposal's view of a frame: the strongest grid cells.
#[derive(Debug, Clone, PartialEq)]
pub struct TopCells {
    pub cells: Vec<usize>,
    pub is_top: Vec<bool>,
    /// The frame's candidate positions.
    pub candidates: Vec<[f64; 3]>,
}

impl CurveModel {
    /// The model for the array and correlator of `p` and `g`, one frame every `frame_s`
    /// seconds. None without a search volume (births need one) or outside 3-D mode.
    pub fn new(p: &FilterParams, g: &GccParams, set: CurveSettings, frame_s: f64) -> Option<Self> {
        if p.mode != crate::track::TrackMode::ThreeD || p.pairs.is_empty() {
            return None;
        }
        let (lo, hi) = p.bounds?;
        let kappa = kappa_table(g);
        let w = lobe_half_width(&kappa);
        let m = p.sensors.len();
        let pairs = g
            .pairs
            .iter()
            .map(|s| PairGeo {
                a: s.a,
                b: s.b,
                reference_from: s.max_lag_samples.ceil() as usize + w + 1,
            })
            .collect::<Vec<_>>();
        let mut model = Self {
            sensors: p.sensors.iter().map(|s| s.map(f64::from)).collect(),
            beta: ((m.max(2) - 1) as f64 / pairs.len() as f64).min(1.0),
            pairs,
            per_m: g.sample_rate_hz / f64::from(p.speed_of_sound_m_s),
            c: f64::from(p.speed_of_sound_m_s),
            curve_half: g.curve_half,
            kappa,
            w,
            profile: [1.0, 0.0, 0.0],
            sigma_prior: 0.0,
            lo: lo.map(f64::from),
            hi: hi.map(f64::from),
            frame_s,
            grid: Grid {
                n: [1; 3],
                size: [1.0; 3],
                spans: Vec::new(),
            },
            set,
        };
        model.grid = model.make_grid();
        let curve_level = crate::dsp::gcc::phat_noise_level(g).map_or(0.05, f64::from);
        model.sigma_prior = curve_level * model.lobe_noise_gain();
        model.profile = model.noise_profile(g);
        Some(model)
    }

    /// Whether `x` lies within `margin` metres of a face of the search volume (or outside).
    pub fn at_edge(&self, x: &[f64], margin: f64) -> bool {
        (0..3).any(|k| x[k] < self.lo[k] + margin || x[k] > self.hi[k] - margin)
    }

    /// A new source's coherence range.
    pub fn coherence_range(&self) -> (f64, f64) {
        self.set.coherence
    }

    pub fn pairs(&self) -> usize {
        self.pairs.len()
    }

    /// The likelihood area's half-width in lags.
    pub fn area_half(&self) -> usize {
        self.w
    }

    pub fn curve_len(&self) -> usize {
        2 * self.curve_half + 1
    }

    /// κ at a lag offset (linear interpolation in the table; 0 beyond it).
    fn kappa(&self, d: f64) -> f64 {
        let x = d.abs() * KAPPA_STEPS as f64;
        let i = x as usize;
        if i + 1 >= self.kappa.len() {
            return 0.0;
        }
        let f = x - i as f64;
        self.kappa[i] * (1.0 - f) + self.kappa[i + 1] * f
    }

    /// Pair p's delay for a source at `s`, samples: (|s − m_a| − |s − m_b|) fs / c.
    pub fn delay(&self, p: usize, s: &[f64]) -> f64 {
        let g = self.pairs[p];
        (dist(s, &self.sensors[g.a]) - dist(s, &self.sensors[g.b])) * self.per_m
    }

    /// The lobe amplitude u = Σκ(ℓ − d) R[ℓ] / Σκ² of one curve at delay d.
    fn lobe(&self, curve: &[f64], d: f64) -> f64 {
        let c = self.curve_half as f64;
        let first = (d - self.w as f64).ceil().max(-c) as i64;
        let last = (d + self.w as f64).floor().min(c) as i64;
        let (mut num, mut den) = (0.0, 0.0);
        for l in first..=last {
            let k = self.kappa(l as f64 - d);
            num += k * curve[(l + self.curve_half as i64) as usize];
            den += k * k;
        }
        if den > 0.0 { num / den } else { 0.0 }
    }

    /// The spread of u over the spread of one lag, when the noise's correlation between lags
    /// ℓ and ℓ' is κ(ℓ − ℓ'): √(Σ κᵢ κⱼ κ(i − j)) / Σ κ² at a whole-lag delay.
    fn lobe_noise_gain(&self) -> f64 {
        let w = self.w as i64;
        let (mut num, mut den) = (0.0, 0.0);
        for i in -w..=w {
            let ki = self.kappa(i as f64);
            den += ki * ki;
            for j in -w..=w {
                num += ki * self.kappa(j as f64) * self.kappa((i - j) as f64);
            }
        }
        if den > 0.0 {
            num.max(0.0).sqrt() / den
        } else {
            1.0
        }
    }

    /// The relative variance of u on noise at `lag` samples (1 at lag 0).
    fn relative_variance(&self, lag: f64) -> f64 {
        let x = lag / self.curve_half.max(1) as f64;
        let x2 = x * x;
        let [c0, c1, c2] = self.profile;
        ((c0 + c1 * x2 + c2 * x2 * x2) / c0).clamp(0.05, 1.5)
    }

    /// The noise profile of this correlator: u's variance on independent noise against the lag,
    /// from 48 frames of simulated noise through the CPU correlator (same frame, window, band
    /// and padding), fitted by least squares with an even quartic. A windowed frame overlaps
    /// itself less at long lags, so at a lag of a third of the frame u's spread is about
    /// two-thirds of its spread at lag 0: levels measured beyond the physical window must be
    /// carried back to the lags a source gives.
    fn noise_profile(&self, g: &GccParams) -> [f64; 3] {
        use crate::dsp::gcc::{Correlator, CpuCorrelator, GccFrame, PairSpec};
        let mut one = g.clone();
        one.channels = 2;
        one.pairs = vec![PairSpec {
            a: 0,
            b: 1,
            max_lag_samples: self.curve_half as f32,
        }];
        let mut cor = CpuCorrelator::new(one.clone());
        let mut r = crate::rng::philox::PhiloxStream::new(0x5eed, 0, Stream::Simulate);
        let frames: Vec<crate::audio::frame::Frame> = (0..48)
            .map(|k| {
                let mut f = crate::audio::frame::Frame::new(2, g.frame_len, g.sample_rate_hz);
                f.seq = k;
                for c in 0..2 {
                    for v in f.channel_mut(c) {
                        *v = r.normal_f64() as f32;
                    }
                }
                f
            })
            .collect();
        let refs: Vec<&crate::audio::frame::Frame> = frames.iter().collect();
        let mut out: Vec<GccFrame> = frames.iter().map(|_| GccFrame::new(&one)).collect();
        if cor.correlate(&refs, &mut out, true).is_err() {
            return [1.0, 0.0, 0.0];
        }
        // Normal equations of the even quartic over every whole lag the lobe fits at.
        let top = self.curve_half.saturating_sub(self.w);
        let mut ata = [[0.0f64; 3]; 3];
        let mut atb = [0.0f64; 3];
        for f in &out {
            let curve: Vec<f64> = f.curves.iter().map(|&v| f64::from(v)).collect();
            for lag in (0..=top).step_by(3) {
                for d in [lag as f64, -(lag as f64)] {
                    let u = self.lobe(&curve, d);
                    let x2 = (d / self.curve_half.max(1) as f64).powi(2);
                    let basis = [1.0, x2, x2 * x2];
                    for i in 0..3 {
                        atb[i] += basis[i] * u * u;
                        for j in 0..3 {
                            ata[i][j] += basis[i] * basis[j];
                        }
                    }
                }
            }
        }
        let m = nalgebra::Matrix3::from_fn(|i, j| ata[i][j]);
        let b = nalgebra::Vector3::from(atb);
        match m.lu().solve(&b) {
            Some(c) if c[0] > 0.0 => [c[0], c[1], c[2]],
            _ => [1.0, 0.0, 0.0],
        }
    }

    /// A frame from the correlator's curves (`pairs × curve_len`) and the pairs' health, with
    /// each pair's noise level from its reference lags, pooled with `running` (the level so
    /// far, updated here; start it empty).
    pub fn frame(&self, curves: &[f32], ok: &[bool], running: &mut Vec<f64>) -> CurveFrame {
        let cl = self.curve_len();
        let curves: Vec<f64> = curves.iter().map(|&v| f64::from(v)).collect();
        let first = running.len() != self.pairs.len();
        if first {
            *running = vec![self.sigma_prior * self.sigma_prior; self.pairs.len()];
        }
        let mut sigma = Vec::with_capacity(self.pairs.len());
        for (p, g) in self.pairs.iter().enumerate() {
            let curve = &curves[p * cl..(p + 1) * cl];
            let (mut s2, mut n) = (0.0, 0.0);
            for lag in g.reference_from..=self.curve_half.saturating_sub(self.w) {
                let rel = self.relative_variance(lag as f64);
                for d in [lag as f64, -(lag as f64)] {
                    let u = self.lobe(curve, d);
                    s2 += u * u / rel;
                    n += 1.0;
                }
            }
            // The first frame with reference lags replaces the band's level outright.
            let prior = if first { 0.0 } else { NOISE_PRIOR_LAGS };
            let v = (prior * running[p] + s2) / (prior + n);
            if v.is_finite() && v > 0.0 {
                running[p] = v;
            }
            sigma.push(running[p].sqrt());
        }
        let ok = (0..self.pairs.len())
            .map(|p| ok.get(p).copied().unwrap_or(true))
            .collect();
        CurveFrame {
            curves,
            sigma,
            ok,
            candidates: Vec::new(),
        }
    }

    /// `frame` with the lags around each of `positions`' delays set to zero in every pair:
    /// what a birth search sees once those sources have tracks.
    pub fn masked(&self, frame: &CurveFrame, positions: &[[f64; 3]]) -> CurveFrame {
        let mut out = frame.clone();
        for (v, held) in out.curves.iter_mut().zip(self.held_lags(positions)) {
            if held {
                *v = 0.0;
            }
        }
        out
    }

    /// The joint template (digest B5.7: where two sources' lobes overlap in a pair, the
    /// separable likelihood counts one lobe twice). `frame` less each of `others`' templates,
    /// a·κ(ℓ − d) over κ's whole support about its delay d in every pair (a its amplitude, at
    /// least 0): weighed on it, a track's ratio is the two-source template's ratio less the
    /// other source's alone, (a u − a²/2 − a a' ρ)/σ², conditioned on the other's estimate.
    pub fn without(&self, frame: &CurveFrame, others: &[([f64; 3], f64)]) -> CurveFrame {
        let mut out = frame.clone();
        let (cl, c) = (self.curve_len(), self.curve_half as f64);
        let reach = self.kappa_reach();
        for (s, a) in others {
            let a = a.max(0.0);
            for p in 0..self.pairs.len() {
                let d = self.delay(p, s);
                let first = (d - reach).ceil().max(-c) as i64;
                let last = (d + reach).floor().min(c) as i64;
                for l in first..=last {
                    let i = p * cl + (l + self.curve_half as i64) as usize;
                    out.curves[i] -= a * self.kappa(l as f64 - d);
                }
            }
        }
        out
    }

    /// Whether a track at `x` and a source at `y` overlap in some working pair of `frame`:
    /// the other's template (κ's support) reaches the track's lobe window.
    pub fn overlaps(&self, frame: &CurveFrame, x: &[f64], y: &[f64]) -> bool {
        let reach = self.kappa_reach() + self.w as f64;
        (0..self.pairs.len())
            .any(|p| frame.ok[p] && (self.delay(p, x) - self.delay(p, y)).abs() < reach)
    }

    /// The lag offset beyond which the κ table (and so κ) is zero.
    fn kappa_reach(&self) -> f64 {
        self.kappa.len().saturating_sub(1) as f64 / KAPPA_STEPS as f64
    }

    /// Per (pair, lag) of a frame's curves: whether it lies within two main lobes of one of
    /// `positions`' delays.
    pub fn held_lags(&self, positions: &[[f64; 3]]) -> Vec<bool> {
        let cl = self.curve_len();
        let mut out = vec![false; self.pairs.len() * cl];
        let reach = 2 * self.w as i64 + 1;
        for s in positions {
            for p in 0..self.pairs.len() {
                let d = self.delay(p, s).round() as i64 + self.curve_half as i64;
                let lo = (d - reach).max(0) as usize;
                let hi = (d + reach).min(cl as i64 - 1);
                if hi < lo as i64 {
                    continue;
                }
                out[p * cl + lo..=p * cl + hi as usize].fill(true);
            }
        }
        out
    }

    fn make_grid(&self) -> Grid {
        let ext: Vec<f64> = (0..3)
            .map(|k| (self.hi[k] - self.lo[k]).max(1e-3))
            .collect();
        let side = (ext.iter().product::<f64>() / self.set.grid_cells.max(1) as f64).cbrt();
        let n = [0, 1, 2].map(|k| ((ext[k] / side).ceil() as usize).max(1));
        let size = [0, 1, 2].map(|k| ext[k] / n[k] as f64);
        let cells = n[0] * n[1] * n[2];
        let mut spans = Vec::with_capacity(cells * self.pairs.len());
        let ch = self.curve_half as f64;
        for c in 0..cells {
            let idx = [c % n[0], (c / n[0]) % n[1], c / (n[0] * n[1])];
            for p in 0..self.pairs.len() {
                let (mut a, mut b) = (f64::INFINITY, f64::NEG_INFINITY);
                for corner in 0..8 {
                    let s = [0, 1, 2]
                        .map(|k| self.lo[k] + (idx[k] + ((corner >> k) & 1)) as f64 * size[k]);
                    let d = self.delay(p, &s);
                    a = a.min(d);
                    b = b.max(d);
                }
                let lo = (a.floor() + ch).clamp(0.0, 2.0 * ch) as u32;
                let hi = (b.ceil() + ch).clamp(0.0, 2.0 * ch) as u32;
                spans.push((lo, hi));
            }
        }
        Grid { n, size, spans }
    }

    /// Each grid cell's score: over usable pairs, the largest curve value among the lags the
    /// cell can give, in units of the pair's per-lag noise level, less the largest that noise
    /// alone would give over that many lags (√(2 ln n) over n / w independent lobes), so a cell
    /// is not favoured for spanning many lags.
    fn cell_scores(&self, f: &CurveFrame) -> Vec<f64> {
        let cl = self.curve_len();
        let np = self.pairs.len();
        let tables: Vec<RangeMax> = (0..np)
            .map(|p| RangeMax::new(&f.curves[p * cl..(p + 1) * cl]))
            .collect();
        let spread: Vec<f64> = (0..np)
            .map(|p| lag_spread(&f.curves[p * cl..(p + 1) * cl]))
            .collect();
        let lobe = self.w.max(1) as f64;
        let cells = self.grid.spans.len() / np.max(1);
        (0..cells)
            .map(|c| {
                (0..np)
                    .filter(|&p| f.ok[p] && spread[p] > 0.0)
                    .map(|p| {
                        let (lo, hi) = self.grid.spans[c * np + p];
                        let n = f64::from(hi - lo + 1) / lobe;
                        let expected = (2.0 * n.max(1.0).ln()).sqrt();
                        tables[p].max(lo as usize, hi as usize) / spread[p] - expected
                    })
                    .sum()
            })
            .collect()
    }
}

impl CurveModel {
    /// The proposal's shares: uniform, around candidates, top cells (the candidates' share
    /// goes to the top cells when there are none).
    fn shares(&self, prop: &TopCells) -> [f64; 3] {
        let uni = self.set.uniform_share;
        let cand = if prop.candidates.is_empty() {
            0.0
        } else {
            self.set.candidate_share.min(1.0 - uni)
        };
        [uni, cand, (1.0 - uni - cand).max(0.0)]
    }

    /// q_b(x) over the birth prior's density at x (uniform over the volume): the mixture of
    /// the uniform share, the top cells (each as likely as the others) and the normals around
    /// the candidates.
    fn proposal_density(&self, prop: &TopCells, shares: &[f64; 3], x: &[f64]) -> f64 {
        let n = (self.grid.spans.len() / self.pairs.len().max(1)).max(1);
        let g = &self.grid;
        let idx = [0, 1, 2].map(|k| ((x[k] - self.lo[k]) / g.size[k]).floor());
        let inside = (0..3).all(|k| idx[k] >= 0.0 && (idx[k] as usize) < g.n[k]);
        let mut q = shares[0];
        if inside && !prop.cells.is_empty() {
            let cell = idx[0] as usize + g.n[0] * (idx[1] as usize + g.n[1] * idx[2] as usize);
            if prop.is_top.get(cell).copied().unwrap_or(false) {
                q += shares[2] * n as f64 / prop.cells.len() as f64;
            }
        }
        if shares[1] > 0.0 {
            let volume: f64 = (0..3).map(|k| self.hi[k] - self.lo[k]).product();
            let s2 = self.set.candidate_spread_m * self.set.candidate_spread_m;
            let norm = (std::f64::consts::TAU * s2).powf(-1.5);
            let sum: f64 = prop
                .candidates
                .iter()
                .map(|c| {
                    let d2: f64 = (0..3).map(|k| (x[k] - c[k]).powi(2)).sum();
                    norm * (-0.5 * d2 / s2).exp()
                })
                .sum();
            q += shares[1] * volume * sum / prop.candidates.len() as f64;
        }
        q
    }

    /// Where this frame's peaks agree a source is: the consensus fix of every usable pair's
    /// peaks and, with four sensors, the other position that fits the same delays. Empty when
    /// fewer than three pairs have peaks or nothing fits.
    pub fn peak_candidates(&self, gcc: &crate::dsp::gcc::GccFrame, ok: &[bool]) -> Vec<[f64; 3]> {
        use crate::dsp::geometry::{ArrayGeometry, Pair};
        use crate::dsp::multilat::{Obs, PairPeaks, all_solutions, locate_consensus};
        let np = self.pairs.len();
        let k = gcc.peaks.len().checked_div(np).unwrap_or(0);
        if k == 0 {
            return Vec::new();
        }
        let fs = self.per_m * self.c;
        let geo = ArrayGeometry::new(self.sensors.clone(), self.c);
        let mut peaks = Vec::new();
        for (p, g) in self.pairs.iter().enumerate() {
            if !ok.get(p).copied().unwrap_or(true) {
                continue;
            }
            let pair = Pair {
                a: g.a,
                b: g.b,
                max_tdoa_s: dist(&self.sensors[g.a], &self.sensors[g.b]) / self.c,
            };
            let list: Vec<_> = gcc
                .pair_peaks(p, k)
                .iter()
                .filter(|q| q.is_some())
                .collect();
            if list.is_empty() {
                continue;
            }
            peaks.push(PairPeaks {
                pair,
                tdoa_s: list.iter().map(|q| f64::from(q.lag_samples) / fs).collect(),
                weight: list.iter().map(|q| f64::from(q.value).max(0.0)).collect(),
            });
        }
        let bounds = Some((self.lo, self.hi));
        let sigma = 1.0 / fs;
        let Some((fix, sel)) = locate_consensus(&geo, &peaks, sigma, bounds, &[]) else {
            return Vec::new();
        };
        let obs: Vec<Obs> = peaks
            .iter()
            .zip(&sel)
            .map(|(pp, &j)| Obs {
                pair: pp.pair,
                tdoa_s: pp.tdoa_s[j],
            })
            .collect();
        let x = fix.position;
        let mut out = vec![[x.x, x.y, x.z]];
        for y in all_solutions(&geo, &obs, bounds, &[x], 3.0 * sigma, 1.0) {
            if (y - x).norm() > 1.0 {
                out.push([y.x, y.y, y.z]);
            }
        }
        out
    }
}

impl CurveModel {
    /// The model packed for the batched bank ([`crate::track::filter::bernoulli::bank`]) in f32, its likelihood area
    /// ±`area_half` lags where given (1 to 15; the band's main lobe otherwise).
    pub fn packed(&self, area_half: Option<usize>) -> BankModel {
        let s2 = self.set.candidate_spread_m * self.set.candidate_spread_m;
        let volume: f64 = (0..3).map(|k| self.hi[k] - self.lo[k]).product();
        let f3 = |v: [f64; 3]| v.map(|x| x as f32);
        BankModel {
            sensors: self.sensors.iter().map(|&s| f3(s)).collect(),
            pairs: self
                .pairs
                .iter()
                .map(|g| (g.a as u32, g.b as u32))
                .collect(),
            per_m: self.per_m as f32,
            curve_half: self.curve_half as u32,
            kappa: self.kappa.iter().map(|&v| v as f32).collect(),
            w: area_half.unwrap_or(self.w) as u32,
            beta: self.beta as f32,
            profile: f3([
                1.0,
                self.profile[1] / self.profile[0],
                self.profile[2] / self.profile[0],
            ]),
            lo: f3(self.lo),
            hi: f3(self.hi),
            frame_s: self.frame_s as f32,
            accel_std: self.set.accel_std as f32,
            coherence_step: (self.set.coherence_walk * self.frame_s.sqrt()) as f32,
            coherence: (self.set.coherence.0 as f32, self.set.coherence.1 as f32),
            speed_max: self.set.speed_max as f32,
            grid_n: self.grid.n.map(|n| n as u32),
            grid_size: f3(self.grid.size),
            candidate_spread_m: self.set.candidate_spread_m as f32,
            candidate_norm: ((std::f64::consts::TAU * s2).powf(-1.5) * volume) as f32,
        }
    }

    /// This model with a likelihood area of ±`w` lags (the bank's LR-area sweep; tests).
    pub fn with_area_half(mut self, w: usize) -> Self {
        self.w = w.clamp(1, 16);
        self
    }

    /// A frame and its birth proposal as the bank takes them.
    pub fn bank_inputs(&self, f: &CurveFrame) -> (BankFrame, BankProposal) {
        let prop = self.proposal(f);
        let shares = self.shares(&prop).map(|v| v as f32);
        let frame = BankFrame {
            curves: f.curves.iter().map(|&v| v as f32).collect(),
            sigma: f.sigma.iter().map(|&v| v as f32).collect(),
            ok: f.ok.iter().map(|&b| u32::from(b)).collect(),
        };
        let proposal = BankProposal {
            shares,
            cells: prop.cells.iter().map(|&c| c as u32).collect(),
            // The newest ones where there are more than the bank takes (the tracker lists
            // the last second's fixes oldest first).
            candidates: prop.candidates[prop.candidates.len().saturating_sub(MAX_CANDIDATES)..]
                .iter()
                .map(|c| c.map(|v| v as f32))
                .collect(),
        };
        (frame, proposal)
    }
}

/// A curve's per-lag noise level, robustly: 1.4826 × the median absolute value (a source's
/// lobe covers too few lags to move it).
fn lag_spread(curve: &[f64]) -> f64 {
    let mut a: Vec<f64> = curve.iter().map(|v| v.abs()).collect();
    if a.is_empty() {
        return 0.0;
    }
    let mid = a.len() / 2;
    let (_, m, _) = a.select_nth_unstable_by(mid, f64::total_cmp);
    1.4826 * *m
}

impl CellModel for CurveModel {
    type Frame = CurveFrame;
    type Proposal = TopCells;

    fn dim(&self) -> usize {
        DIM
    }

    fn log_lr(&self, f: &CurveFrame, x: &[f64]) -> f64 {
        let inside = (0..3).all(|k| x[k] >= self.lo[k] && x[k] <= self.hi[k]);
        if !inside {
            return f64::NEG_INFINITY;
        }
        let a = x[6];
        let cl = self.curve_len();
        let mut sum = 0.0;
        for p in 0..self.pairs.len() {
            if !f.ok[p] {
                continue;
            }
            let d = self.delay(p, x);
            let u = self.lobe(&f.curves[p * cl..(p + 1) * cl], d);
            let s2 = f.sigma[p] * f.sigma[p] * self.relative_variance(d);
            sum += (a * u - 0.5 * a * a) / s2;
        }
        self.beta * sum
    }

    fn proposal(&self, f: &CurveFrame) -> TopCells {
        let (cells, is_top) = strongest(&self.cell_scores(f), self.set.top_cells);
        TopCells {
            cells,
            is_top,
            candidates: f.candidates.clone(),
        }
    }

    fn draw_birth(&self, prop: &TopCells, key: DrawKey, x: &mut [f64]) -> f64 {
        let u = uniforms6(key.words(Stream::InitPosition)).map(f64::from);
        let v = uniforms6(key.words(Stream::InitVelocity)).map(f64::from);
        let n = self.grid.spans.len() / self.pairs.len().max(1);
        let pick = |len: usize, r: f64| ((r * len as f64) as usize).min(len - 1);
        let shares = self.shares(prop);
        let g = &self.grid;
        if u[0] < shares[0] + shares[1] && u[0] >= shares[0] {
            // Around a candidate.
            let c = prop.candidates[pick(prop.candidates.len(), u[1])];
            let z = normals6(key.words(Stream::Roughen));
            for k in 0..3 {
                x[k] = c[k] + self.set.candidate_spread_m * f64::from(z[k]);
            }
        } else {
            let cell = if u[0] < shares[0] || prop.cells.is_empty() {
                pick(n, u[1])
            } else {
                prop.cells[pick(prop.cells.len(), u[1])]
            };
            let idx = [
                cell % g.n[0],
                (cell / g.n[0]) % g.n[1],
                cell / (g.n[0] * g.n[1]),
            ];
            for k in 0..3 {
                x[k] = self.lo[k] + (idx[k] as f64 + u[2 + k]) * g.size[k];
            }
        }
        let vmax = self.set.speed_max;
        x[3] = (2.0 * u[5] - 1.0) * vmax;
        x[4] = (2.0 * v[0] - 1.0) * vmax;
        x[5] = (2.0 * v[1] - 1.0) * 0.25 * vmax;
        let (alo, ahi) = self.set.coherence;
        x[6] = alo + v[2] * (ahi - alo);
        -self.proposal_density(prop, &shares, x).ln()
    }

    fn propagate(&self, key: DrawKey, x: &mut [f64]) {
        let g = normals6(key.words(Stream::Predict)).map(f64::from);
        let t = self.frame_s;
        for k in 0..3 {
            let a = self.set.accel_std * g[k];
            x[k] += x[k + 3] * t + 0.5 * a * t * t;
            x[k + 3] += a * t;
        }
        let (alo, ahi) = self.set.coherence;
        let a = x[6] + self.set.coherence_walk * t.sqrt() * g[3];
        // Reflect into the range: a random walk that stays inside without piling up at an edge.
        x[6] = if a < alo {
            (2.0 * alo - a).min(ahi)
        } else if a > ahi {
            (2.0 * ahi - a).max(alo)
        } else {
            a
        };
    }
}

fn dist(a: &[f64], b: &[f64; 3]) -> f64 {
    let d = [a[0] - b[0], a[1] - b[1], a[2] - b[2]];
    (d[0] * d[0] + d[1] * d[1] + d[2] * d[2]).sqrt()
}

/// Range maxima of one curve in O(1) per query (a sparse table).
struct RangeMax {
    levels: Vec<Vec<f64>>,
}

impl RangeMax {
    fn new(v: &[f64]) -> Self {
        let mut levels = vec![v.to_vec()];
        let mut span = 1;
        while 2 * span <= v.len() {
            let prev = &levels[levels.len() - 1];
            let next: Vec<f64> = (0..=v.len() - 2 * span)
                .map(|i| prev[i].max(prev[i + span]))
                .collect();
            levels.push(next);
            span *= 2;
        }
        Self { levels }
    }

    /// The largest value in `lo..=hi` (clamped to the curve; −∞ when empty).
    fn max(&self, lo: usize, hi: usize) -> f64 {
        let len = self.levels[0].len();
        if len == 0 || lo > hi || lo >= len {
            return f64::NEG_INFINITY;
        }
        let hi = hi.min(len - 1);
        let n = hi - lo + 1;
        let k = usize::BITS as usize - 1 - n.leading_zeros() as usize;
        let l = &self.levels[k];
        l[lo].max(l[hi + 1 - (1 << k)])
    }
}

#[cfg(test)]
mod tests;
