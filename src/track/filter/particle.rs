//! The CPU particle-filter bank: the reference twin of `kernels/pf.cu`.
//!
//! Particles are stored as structure-of-arrays, like on the GPU: for each track slot, seven
//! component arrays (position, velocity, turn rate), the model index and the log weight. Work
//! is split into fixed chunks of [`CHUNK`] particles on the rayon pool, and within a chunk
//! particles go through the filter [`LANES`] at a time in straight-line code that the compiler
//! vectorises (AVX2 when the processor has it, detected at run time; NEON on the boards). Every
//! sum is combined in chunk order and no fused multiply-add is used, so the result depends on
//! neither the thread count nor the vector width: the same seed gives byte-identical output.

use rayon::prelude::*;

use crate::error::BackendError;
use crate::math::fastmath::{self, F, LANES, U};
use crate::rng::lanes;
use crate::rng::philox::{self, Stream};
use crate::track::ModelSelection;
use crate::track::filter::resample;
use crate::track::measure::likelihood::{
    LikScratch, LikelihoodConsts, log_likelihood_slice, predict_tdoas,
};
use crate::track::motion::models;
use crate::track::motion::models::{
    CoeffTable, Kinematics, StepCoeffs, advance_slice, padded_cdf, predict, switch_slice,
};
use crate::track::{
    Estimate, FilterBank, FilterParams, MAX_MODELS, Particles, ROUGHEN_H, ROUGHEN_RESAMPLE_H,
    STATE_DIM, TEMPER_GRID, TEMPER_MIN_ESS, TdoaMeasurement, TrackInit, TrackStep,
};

/// Particles per unit of parallel work (a multiple of [`LANES`]).
pub const CHUNK: usize = 1024;

/// Weighted sums over particles, relative to a reference state (e = exp(log w - max)). Both
/// backends produce these and turn them into an estimate with [`finish_estimate`].
#[derive(Debug, Clone, PartialEq)]
pub struct ChunkSums {
    pub s: f64,
    pub s2: f64,
    pub x: [f64; 6],
    pub xx: [f64; 21],
    pub models: [f64; MAX_MODELS],
    pub turn: f64,
}

impl ChunkSums {
    pub fn zero() -> Self {
        Self {
            s: 0.0,
            s2: 0.0,
            x: [0.0; 6],
            xx: [0.0; 21],
            models: [0.0; MAX_MODELS],
            turn: 0.0,
        }
    }
}

/// Mutable views of one chunk of one slot.
struct ChunkMut<'a> {
    start: usize,
    s: [&'a mut [f32]; STATE_DIM],
    model: &'a mut [u32],
    log_w: &'a mut [f32],
    /// This step's log-likelihoods (kept for tempering).
    log_lik: &'a mut [f32],
    /// exp(log_w - the chunk's largest log_w).
    weight_exp: &'a mut [f32],
}

/// The per-slot arrays a step works on.
struct SlotArrays<'a> {
    state: &'a mut [f32],
    model: &'a mut [u32],
    log_w: &'a mut [f32],
    log_lik: &'a mut [f32],
    weight_exp: &'a mut [f32],
}

/// One slot's views of the bank's arrays (a free function, so that the caller can borrow other
/// fields at the same time); `state` is already the slot's own buffer.
fn slot_arrays<'a>(
    state: &'a mut [f32],
    model: &'a mut [u32],
    log_w: &'a mut [f32],
    log_lik: &'a mut [f32],
    weight_exp: &'a mut [f32],
    n: usize,
    slot: usize,
) -> SlotArrays<'a> {
    SlotArrays {
        state,
        model: &mut model[slot * n..(slot + 1) * n],
        log_w: &mut log_w[slot * n..(slot + 1) * n],
        log_lik,
        weight_exp,
    }
}

/// Split a slot's arrays into chunks (all arrays `n` long per component).
fn split(a: SlotArrays<'_>, n: usize) -> Vec<ChunkMut<'_>> {
    let mut comps: Vec<std::slice::ChunksMut<'_, f32>> =
        a.state.chunks_mut(n).map(|c| c.chunks_mut(CHUNK)).collect();
    let mut m = a.model.chunks_mut(CHUNK);
    let mut w = a.log_w.chunks_mut(CHUNK);
    let mut l = a.log_lik.chunks_mut(CHUNK);
    let mut e = a.weight_exp.chunks_mut(CHUNK);
    (0..n.div_ceil(CHUNK))
        .map(|ci| ChunkMut {
            start: ci * CHUNK,
            s: std::array::from_fn(|c| comps[c].next().unwrap_or_default()),
            model: m.next().unwrap_or_default(),
            log_w: w.next().unwrap_or_default(),
            log_lik: l.next().unwrap_or_default(),
            weight_exp: e.next().unwrap_or_default(),
        })
        .collect()
}

/// Everything pass 1 needs besides the chunk.
struct StepCtx<'a> {
    p: &'a FilterParams,
    k: &'a LikelihoodConsts,
    meas: &'a TdoaMeasurement,
    t: &'a TrackStep,
    forced: Option<u32>,
    offset: f32,
    coeffs: &'a CoeffTable,
    cdf: &'a [f32; MAX_MODELS * MAX_MODELS],
    reference: [f32; 6],
}

/// Load lanes `b..b+LANES` of a chunk (lanes past the end repeat the first).
#[inline(always)]
fn load(s: &[&mut [f32]; STATE_DIM], b: usize, cnt: usize) -> [F; STATE_DIM] {
    std::array::from_fn(|c| std::array::from_fn(|i| s[c][b + if i < cnt { i } else { 0 }]))
}

/// Pass 1 on one chunk: switch model, predict, weight (each stage one loop over the chunk),
/// then the weighted sums relative to the chunk's own largest log weight. Returns (that
/// maximum, the sums).
#[inline(always)]
fn pass1_impl(
    x: &StepCtx,
    ch: &mut ChunkMut,
    u: &[f32],
    z: &[Vec<f32>; 4],
    sc: &mut LikScratch,
    sw: &mut [u32],
) -> (f32, ChunkSums) {
    let p = x.p;
    let len = ch.log_w.len();
    match x.forced {
        Some(f) => ch.model.fill(f),
        None => switch_slice(x.cdf, p.n_models(), ch.model, u, sw),
    }
    if let Some(turn) = x.t.turn() {
        models::turn_slice(&mut ch.s, turn);
    }
    advance_slice(
        x.coeffs,
        ch.model,
        Kinematics::of(p),
        x.t.dt_s,
        &mut ch.s,
        z,
    );
    if let Some(line) = &p.line {
        models::fold_slice(&mut ch.s, line);
    }
    log_likelihood_slice(p, x.k, x.meas, &ch.s, x.t.lag_s, sc, ch.log_lik);
    if let Some((lo, hi)) = p.bounds {
        let (sx, sy, sz) = (&ch.s[0][..len], &ch.s[1][..len], &ch.s[2][..len]);
        for (i, ll) in ch.log_lik[..len].iter_mut().enumerate() {
            let inside = sx[i] >= lo[0]
                && sx[i] <= hi[0]
                && sy[i] >= lo[1]
                && sy[i] <= hi[1]
                && sz[i] >= lo[2]
                && sz[i] <= hi[2];
            *ll = if inside { *ll } else { f32::NEG_INFINITY };
        }
    }
    for (w, ll) in ch.log_w[..len].iter_mut().zip(ch.log_lik[..len].iter_mut()) {
        if ll.is_nan() {
            *ll = f32::NEG_INFINITY;
        }
        *w = *w - x.offset + *ll;
    }
    sums_impl(ch, &x.reference)
}

/// The largest value (NaN-ignoring, as `f32::max`), in lanes so the comparisons overlap.
#[inline(always)]
fn max_lanes(v: &[f32]) -> f32 {
    let mut m = [f32::NEG_INFINITY; LANES];
    let mut blocks = v.chunks_exact(LANES);
    for b in &mut blocks {
        for i in 0..LANES {
            m[i] = m[i].max(b[i]);
        }
    }
    for &x in blocks.remainder() {
        m[0] = m[0].max(x);
    }
    m.iter().copied().fold(f32::NEG_INFINITY, f32::max)
}

/// The chunk's largest log weight `m` and the weighted sums with e = exp(log w - m) (also left
/// in `e`), relative to `reference`.
#[inline(always)]
fn sums_impl(ch: &mut ChunkMut, reference: &[f32; 6]) -> (f32, ChunkSums) {
    let len = ch.log_w.len();
    let mx = max_lanes(ch.log_w);
    let mut out = ChunkSums::zero();
    if !mx.is_finite() {
        ch.weight_exp.fill(0.0);
        return (mx, out);
    }
    let mut x = [[0.0f64; LANES]; 6];
    let mut xx = [[0.0f64; LANES]; 21];
    let mut s = [0.0f64; LANES];
    let mut s2 = [0.0f64; LANES];
    let mut turn = [0.0f64; LANES];
    let mut models = [[0.0f64; MAX_MODELS]; LANES];
    // The exponentials first, in a loop of their own that vectorises (inside the lane loop the
    // partial last block kept them scalar).
    for (e, &w) in ch.weight_exp[..len].iter_mut().zip(&ch.log_w[..len]) {
        *e = fastmath::exp(w - mx);
    }
    let mut b = 0;
    while b < len {
        let cnt = (len - b).min(LANES);
        let mut e = [0.0f32; LANES];
        e[..cnt].copy_from_slice(&ch.weight_exp[b..b + cnt]);
        let st = load(&ch.s, b, cnt);
        for i in 0..LANES {
            let w = f64::from(e[i]);
            s[i] += w;
            s2[i] += w * w;
            let d: [f64; 6] = std::array::from_fn(|c| f64::from(st[c][i] - reference[c]));
            let mut idx = 0;
            for a in 0..6 {
                x[a][i] += w * d[a];
                for bb in a..6 {
                    xx[idx][i] += w * d[a] * d[bb];
                    idx += 1;
                }
            }
            turn[i] += w * f64::from(st[6][i]);
        }
        // Per-lane model sums: consecutive particles mostly share a model, and one running
        // sum per model would make every addition wait on the previous one.
        for i in 0..cnt {
            models[i][ch.model[b + i] as usize] += f64::from(e[i]);
        }
        b += LANES;
    }
    for i in 0..LANES {
        out.s += s[i];
        out.s2 += s2[i];
        out.turn += turn[i];
        for a in 0..6 {
            out.x[a] += x[a][i];
        }
        for a in 0..21 {
            out.xx[a] += xx[a][i];
        }
        for (o, m) in out.models.iter_mut().zip(&models[i]) {
            *o += m;
        }
    }
    (mx, out)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn pass1_avx2(
    x: &StepCtx,
    ch: &mut ChunkMut,
    u: &[f32],
    z: &[Vec<f32>; 4],
    sc: &mut LikScratch,
    sw: &mut [u32],
) -> (f32, ChunkSums) {
    pass1_impl(x, ch, u, z, sc, sw)
}

/// Pass 1 with its random numbers generated first (see `lanes::step_noise`).
fn pass1(x: &StepCtx, ch: &mut ChunkMut, avx2: bool) -> (f32, ChunkSums) {
    // Scratch kept per worker thread: a step would otherwise allocate and clear eleven buffers
    // per chunk. Nothing in pass 1 re-enters it on the same thread; if it ever did, the inner
    // call gets fresh buffers instead of a panic.
    thread_local! {
        static SCRATCH: std::cell::RefCell<Pass1Scratch> =
            std::cell::RefCell::new(Pass1Scratch::default());
    }
    SCRATCH.with(|cell| match cell.try_borrow_mut() {
        Ok(mut s) => pass1_with(x, ch, avx2, &mut s),
        Err(_) => pass1_with(x, ch, avx2, &mut Pass1Scratch::default()),
    })
}

/// Pass 1's buffers: the random numbers and the likelihood's and model switch's scratch.
#[derive(Default)]
struct Pass1Scratch {
    u: Vec<f32>,
    z: [Vec<f32>; 4],
    sc: LikScratch,
    sw: Vec<u32>,
}

fn pass1_with(
    x: &StepCtx,
    ch: &mut ChunkMut,
    avx2: bool,
    s: &mut Pass1Scratch,
) -> (f32, ChunkSums) {
    let len = ch.log_w.len();
    // Every element is written before it is read (`step_noise` fills u and z, the switch
    // clears its scratch): resizing only keeps the lengths right.
    s.u.resize(len, 0.0);
    s.sw.resize(len, 0);
    for z in &mut s.z {
        z.resize(len, 0.0);
    }
    let Pass1Scratch { u, z, sc, sw } = s;
    let (u, sw) = (&mut u[..len], &mut sw[..len]);
    lanes::step_noise(x.p.seed, x.meas.frame, x.t.slot, ch.start, u, z, avx2);
    #[cfg(target_arch = "x86_64")]
    if avx2 {
        // SAFETY: `avx2` is true only when the processor reported AVX2 at start-up.
        return unsafe { pass1_avx2(x, ch, u, z, sc, sw) };
    }
    pass1_impl(x, ch, u, z, sc, sw)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn sums_avx2(ch: &mut ChunkMut, reference: &[f32; 6]) -> (f32, ChunkSums) {
    sums_impl(ch, reference)
}

fn sums(ch: &mut ChunkMut, reference: &[f32; 6], avx2: bool) -> (f32, ChunkSums) {
    #[cfg(target_arch = "x86_64")]
    if avx2 {
        // SAFETY: `avx2` is true only when the processor reported AVX2 at start-up.
        return unsafe { sums_avx2(ch, reference) };
    }
    let _ = avx2;
    sums_impl(ch, reference)
}

/// The estimate from combined sums (relative to the largest log weight `mx` and to
/// `reference`): weighted mean and covariance, model probabilities, turn rate, effective sample
/// size and evidence. Returns log of the sum of the weights (the new normaliser).
pub fn finish_estimate(
    mx: f32,
    tot: &ChunkSums,
    reference: &[f32; 6],
    n_models: usize,
    degenerate: bool,
    out: &mut Estimate,
) -> f64 {
    let s = tot.s.max(1e-300);
    let log_norm = f64::from(mx) + s.ln();
    out.log_evidence = if degenerate {
        f32::NEG_INFINITY
    } else {
        log_norm as f32
    };
    out.ess = (tot.s * tot.s / tot.s2.max(1e-300)) as f32;
    let d = cloud_moments(tot, &mut out.cov);
    for a in 0..6 {
        out.mean[a] = f64::from(reference[a]) + d[a];
    }
    out.model_probs.resize(n_models, 0.0);
    for (m, pr) in out.model_probs.iter_mut().enumerate() {
        *pr = (tot.models[m] / s) as f32;
    }
    out.turn_rate = (tot.turn / s) as f32;
    log_norm
}

/// The weighted cloud's mean offset from the sums' reference point (returned) and its
/// covariance (into `cov`), from a track's sums.
pub fn cloud_moments(tot: &ChunkSums, cov: &mut [[f64; 6]; 6]) -> [f64; 6] {
    let s = tot.s.max(1e-300);
    let d = tot.x.map(|x| x / s);
    let mut idx = 0;
    for a in 0..6 {
        for b in a..6 {
            let c = tot.xx[idx] / s - d[a] * d[b];
            cov[a][b] = c;
            cov[b][a] = c;
            idx += 1;
        }
    }
    d
}

/// Whether an update with these sums leaves too few effective particles (tempering is needed).
pub fn needs_temper(tot: &ChunkSums, n: usize) -> bool {
    tot.s * tot.s < TEMPER_MIN_ESS * n as f64 * tot.s2
}

/// The tempering rule on the grid sums: the largest β = 2^-g whose update keeps at least
/// TEMPER_MIN_ESS × N effective particles.
pub fn temper_from_grid(s: &[f64], s2: &[f64], n: usize) -> f32 {
    for g in 0..=TEMPER_GRID {
        if s2[g] > 0.0 && s[g] * s[g] >= TEMPER_MIN_ESS * n as f64 * s2[g] {
            return (-(g as f32)).exp2();
        }
    }
    (-(TEMPER_GRID as f32)).exp2()
}

/// Combine per-chunk (max, sums) into sums relative to the overall maximum, which is returned;
/// `scales[c]` receives exp(max_c - max) for rescaling the chunk's `e` values.
fn combine(parts: &[(f32, ChunkSums)], scales: &mut Vec<f64>) -> (f32, ChunkSums) {
    let mx = parts.iter().map(|p| p.0).fold(f32::NEG_INFINITY, f32::max);
    scales.clear();
    let mut tot = ChunkSums::zero();
    for (m, c) in parts {
        let f = if m.is_finite() {
            f64::from(m - mx).exp()
        } else {
            0.0
        };
        scales.push(f);
        tot.s += f * c.s;
        tot.s2 += f * f * c.s2;
        for i in 0..6 {
            tot.x[i] += f * c.x[i];
        }
        for i in 0..21 {
            tot.xx[i] += f * c.xx[i];
        }
        for i in 0..MAX_MODELS {
            tot.models[i] += f * c.models[i];
        }
        tot.turn += f * c.turn;
    }
    (mx, tot)
}

pub struct CpuParticleFilter {
    params: FilterParams,
    /// Particles per track.
    particles: usize,
    /// `state[(slot * STATE_DIM + c) * n + i]`: component c of particle i of a slot.
    /// One buffer per slot, STATE_DIM × n each (component-major), so that resampling can
    /// swap a slot's buffer with the scratch instead of copying back.
    state: Vec<Vec<f32>>,
    model: Vec<u32>,
    log_w: Vec<f32>,
    /// Per slot: log of the sum of exp(log_w); subtracting it normalises the weights.
    log_norm: Vec<f64>,
    /// One slot's worth of this step's log-likelihoods.
    log_lik: Vec<f32>,
    /// One slot's worth of exp(log_w - chunk maximum).
    weight_exp: Vec<f32>,
    /// Per chunk: exp(chunk maximum - overall maximum).
    scales: Vec<f64>,
    scratch_state: Vec<f32>,
    scratch_model: Vec<u32>,
    cdf: Vec<f64>,
    /// Each particle's ancestor in the last resampling.
    ancestors: Vec<u32>,
    avx2: bool,
}

impl CpuParticleFilter {
    pub fn new(p: FilterParams) -> Self {
        let n = p.particles;
        #[cfg(target_arch = "x86_64")]
        let avx2 = std::is_x86_feature_detected!("avx2");
        #[cfg(not(target_arch = "x86_64"))]
        let avx2 = false;
        Self {
            particles: n,
            state: vec![vec![0.0; STATE_DIM * n]; p.slots],
            model: vec![0; p.slots * n],
            log_w: vec![0.0; p.slots * n],
            log_norm: vec![(n as f64).ln(); p.slots],
            log_lik: vec![0.0; n],
            weight_exp: vec![0.0; n],
            scales: Vec::new(),
            scratch_state: vec![0.0; STATE_DIM * n],
            scratch_model: vec![0; n],
            cdf: Vec::with_capacity(n),
            ancestors: vec![0; n],
            avx2,
            params: p,
        }
    }

    fn check_slot(&self, slot: u32) -> Result<usize, BackendError> {
        if (slot as usize) < self.params.slots {
            Ok(slot as usize)
        } else {
            Err(BackendError::new(
                "cpu",
                format!(
                    "track slot {slot} out of range ({} slots)",
                    self.params.slots
                ),
            ))
        }
    }

    fn particle(&self, slot: usize, i: usize) -> [f32; 7] {
        std::array::from_fn(|c| self.state[slot][c * self.particles + i])
    }

    /// The paper's rule: the model whose weighted-mean predicted TDOAs lie closest (L1) to the
    /// strongest peak of each usable pair.
    fn nearest_model(
        &self,
        slot: usize,
        meas: &TdoaMeasurement,
        t: &TrackStep,
        k: &LikelihoodConsts,
    ) -> u32 {
        let np = self.params.pairs.len();
        let kk = meas.peaks_per_pair;
        let offset = self.log_norm[slot];
        let p = &self.params;
        let mut best = (f64::INFINITY, 0u32);
        let turn = t.turn();
        for (mi, model) in p.models.iter().enumerate() {
            let sums: Vec<(f64, Vec<f64>)> = (0..self.particles.div_ceil(CHUNK))
                .into_par_iter()
                .map(|ci| {
                    let mut acc = vec![0.0f64; np];
                    let mut sw = 0.0f64;
                    let mut pred = vec![0.0f32; np];
                    for i in ci * CHUNK..((ci + 1) * CHUNK).min(self.particles) {
                        let mut s = self.particle(slot, i);
                        let z = philox::normals4(philox::draw(
                            p.seed,
                            meas.frame,
                            t.slot,
                            i as u32,
                            Stream::Predict,
                        ));
                        if let Some(turn) = turn {
                            models::turn_about_z(&mut s, turn);
                        }
                        predict(model, Kinematics::of(p), t.dt_s, &mut s, z);
                        if let Some(line) = &p.line {
                            models::fold_line(&mut s, line);
                        }
                        predict_tdoas(p, k, &s, t.lag_s, &mut pred);
                        let w = (f64::from(self.log_w[slot * self.particles + i]) - offset).exp();
                        sw += w;
                        for (a, v) in acc.iter_mut().zip(&pred) {
                            *a += w * f64::from(*v);
                        }
                    }
                    (sw, acc)
                })
                .collect();
            let mut sw = 0.0;
            let mut acc = vec![0.0f64; np];
            for (s, a) in &sums {
                sw += s;
                for (x, y) in acc.iter_mut().zip(a) {
                    *x += y;
                }
            }
            let mut err = 0.0f64;
            for pi in 0..np {
                if meas.amp[pi * kk] > 0.0 {
                    err += (f64::from(meas.tdoa_s[pi * kk]) - acc[pi] / sw.max(1e-300)).abs();
                }
            }
            if err < best.0 {
                best = (err, mi as u32);
            }
        }
        best.1
    }

    fn arrays(&mut self, slot: usize) -> SlotArrays<'_> {
        slot_arrays(
            &mut self.state[slot],
            &mut self.model,
            &mut self.log_w,
            &mut self.log_lik,
            &mut self.weight_exp,
            self.particles,
            slot,
        )
    }

    /// Weighted sums of one slot's current log weights (e left in `self.weight_exp`, chunk scales in
    /// `self.scales`). Returns the overall maximum and the sums relative to it.
    fn weighted_sums(&mut self, slot: usize, reference: &[f32; 6]) -> (f32, ChunkSums) {
        let n = self.particles;
        let avx2 = self.avx2;
        let chunks = split(self.arrays(slot), n);
        let parts: Vec<(f32, ChunkSums)> = chunks
            .into_par_iter()
            .map(|mut ch| sums(&mut ch, reference, avx2))
            .collect();
        combine(&parts, &mut self.scales)
    }

    /// The largest β = 2^-k (k = 0..=TEMPER_GRID) whose tempered update keeps an effective
    /// sample size of at least TEMPER_MIN_ESS × N. Every grid point is evaluated in one pass
    /// (as on the GPU), with e^(β b) for the halving βs by repeated squaring.
    fn choose_temper(&self, slot: usize) -> f32 {
        let n = self.particles;
        const G: usize = TEMPER_GRID + 1;
        let lw = &self.log_w[slot * n..(slot + 1) * n];
        // prev_i = log_w_i - ll_i; bound the exponent by max(prev) + β max(ll).
        let (mut mp, mut ml) = (f32::NEG_INFINITY, f32::NEG_INFINITY);
        for (w, ll) in lw.iter().zip(&self.log_lik) {
            if ll.is_finite() {
                mp = mp.max(w - ll);
                ml = ml.max(*ll);
            }
        }
        let avx2 = self.avx2;
        let parts: Vec<([f64; G], [f64; G])> = lw
            .par_chunks(CHUNK)
            .zip(self.log_lik.par_chunks(CHUNK))
            .map(|(wc, lc)| temper_grid_sums(wc, lc, mp, ml, avx2))
            .collect();
        let mut s = [0.0f64; G];
        let mut s2 = [0.0f64; G];
        for (a, b) in &parts {
            for g in 0..G {
                s[g] += a[g];
                s2[g] += b[g];
            }
        }
        temper_from_grid(&s, &s2, n)
    }

    fn step_one(
        &mut self,
        meas: &TdoaMeasurement,
        t: &TrackStep,
        out: &mut Estimate,
    ) -> Result<(), BackendError> {
        let slot = self.check_slot(t.slot)?;
        let n = self.particles;
        let w = self.weigh(slot, meas, t);
        let l = self.params.n_models();
        let log_norm = finish_estimate(w.max, &w.sums, &w.reference, l, w.degenerate, out);
        out.chosen_model = w.forced.map(|f| f as usize);
        out.temper = w.temper;
        out.resampled = f64::from(out.ess) < f64::from(self.params.ess_fraction) * n as f64;
        if !out.resampled {
            self.log_norm[slot] = log_norm;
            return Ok(());
        }
        self.resample_slot(slot, meas, t);
        // Regularised: widely after a tempered update, narrowly after any other.
        let h = if w.temper < 1.0 {
            ROUGHEN_H
        } else {
            ROUGHEN_RESAMPLE_H
        };
        let lchol = roughen_factor(&out.cov, h);
        let (seed, frame, track, mode) = (
            self.params.seed,
            meas.frame,
            t.slot,
            Jitter::of(&self.params),
        );
        split(self.arrays(slot), n)
            .into_par_iter()
            .for_each(|ch| roughen_chunk(ch, &lchol, seed, frame, track, mode));
        Ok(())
    }

    /// Predict and weigh slot `slot`'s particles on `meas` (tempered where a full update
    /// would leave too few effective particles), and take the weighted sums.
    fn weigh(&mut self, slot: usize, meas: &TdoaMeasurement, t: &TrackStep) -> Weighed {
        let n = self.particles;
        let k = LikelihoodConsts::new(&self.params, meas.sigma_s);
        let forced = match self.params.selection {
            ModelSelection::Markov => None,
            ModelSelection::Nearest => Some(self.nearest_model(slot, meas, t, &k)),
        };
        let coeffs = CoeffTable::new(
            &self
                .params
                .models
                .iter()
                .map(|m| StepCoeffs::new(m, t.dt_s))
                .collect::<Vec<_>>(),
        );
        let cdf = padded_cdf(&self.params.transition_cdf, self.params.n_models());
        // Sums are taken relative to a particle of the cloud, so that covariances of a cloud
        // far from the origin keep their precision.
        let p0 = self.particle(slot, 0);
        let reference: [f32; 6] = std::array::from_fn(|c| p0[c]);
        let avx2 = self.avx2;
        let offset = self.log_norm[slot] as f32;
        let ctx = StepCtx {
            p: &self.params,
            k: &k,
            meas,
            t,
            forced,
            offset,
            coeffs: &coeffs,
            cdf: &cdf,
            reference,
        };
        let chunks = split(
            slot_arrays(
                &mut self.state[slot],
                &mut self.model,
                &mut self.log_w,
                &mut self.log_lik,
                &mut self.weight_exp,
                n,
                slot,
            ),
            n,
        );
        let parts: Vec<(f32, ChunkSums)> = chunks
            .into_par_iter()
            .map(|mut ch| pass1(&ctx, &mut ch, avx2))
            .collect();
        let (mut mx, mut tot) = combine(&parts, &mut self.scales);
        let degenerate = !mx.is_finite();
        if degenerate {
            // Every particle left the search volume or matched nothing at all: keep the cloud
            // with equal weights and report no evidence; the manager decides what to do.
            self.log_w[slot * n..(slot + 1) * n].fill(0.0);
            (mx, tot) = self.weighted_sums(slot, &reference);
        }
        let mut temper = 1.0f32;
        if !degenerate && needs_temper(&tot, n) {
            temper = self.choose_temper(slot);
            // log_w - ll is the previous (normalised) weight; apply the tempered likelihood.
            for (lw, ll) in self.log_w[slot * n..(slot + 1) * n]
                .iter_mut()
                .zip(&self.log_lik)
            {
                *lw = if ll.is_finite() {
                    *lw - ll + temper * ll
                } else {
                    f32::NEG_INFINITY
                };
            }
            (mx, tot) = self.weighted_sums(slot, &reference);
        }
        Weighed {
            max: mx,
            sums: tot,
            reference,
            degenerate,
            temper,
            forced,
        }
    }

    /// Systematic resampling of slot `slot` on the chunk-rescaled weights: one parallel pass
    /// per block of output slots, its ancestors, then its share of every state component and
    /// of the model index; the weights equal again.
    fn resample_slot(&mut self, slot: usize, meas: &TdoaMeasurement, t: &TrackStep) {
        let n = self.particles;
        let p = &self.params;
        let scales = &self.scales;
        resample::cumulative(
            self.weight_exp
                .iter()
                .enumerate()
                .map(|(i, &e)| f64::from(e) * scales[i / CHUNK]),
            &mut self.cdf,
        );
        let u0 = f64::from(philox::uniform(
            philox::draw(p.seed, meas.frame, t.slot, 0, Stream::Resample)[0],
        ));
        let src = &self.state[slot];
        let src_m = &self.model[slot * n..(slot + 1) * n];
        let cdf = &self.cdf;
        let mut comps: Vec<std::slice::ChunksMut<'_, f32>> = self
            .scratch_state
            .chunks_mut(n)
            .map(|c| c.chunks_mut(resample::BLOCK))
            .collect();
        let mut models = self.scratch_model.chunks_mut(resample::BLOCK);
        let mut ancs = self.ancestors.chunks_mut(resample::BLOCK);
        let blocks: Vec<_> = (0..n.div_ceil(resample::BLOCK))
            .map(|_| {
                let dst: [&mut [f32]; STATE_DIM] =
                    std::array::from_fn(|c| comps[c].next().unwrap_or_default());
                (
                    dst,
                    models.next().unwrap_or_default(),
                    ancs.next().unwrap_or_default(),
                )
            })
            .collect();
        blocks
            .into_par_iter()
            .enumerate()
            .for_each(|(b, (mut dst, dm, anc))| {
                resample::systematic_block(cdf, u0, b * resample::BLOCK, n, anc);
                for (c, d) in dst.iter_mut().enumerate() {
                    let comp = &src[c * n..(c + 1) * n];
                    for (d, &a) in d.iter_mut().zip(anc.iter()) {
                        *d = comp[a as usize];
                    }
                }
                for (d, &a) in dm.iter_mut().zip(anc.iter()) {
                    *d = src_m[a as usize];
                }
            });
        std::mem::swap(&mut self.state[slot], &mut self.scratch_state);
        self.model[slot * n..(slot + 1) * n].copy_from_slice(&self.scratch_model);
        self.log_w[slot * n..(slot + 1) * n].fill(0.0);
        self.log_norm[slot] = (n as f64).ln();
    }
}

/// A slot's weighing: the largest log-weight and the weighted sums (relative to `reference`,
/// a particle of the cloud), whether no particle explained the frame, the tempering exponent
/// and the model the nearest-model rule forced.
struct Weighed {
    max: f32,
    sums: ChunkSums,
    reference: [f32; 6],
    degenerate: bool,
    temper: f32,
    forced: Option<u32>,
}

/// Lanes of f64 in the tempering sums (four fill an AVX2 register).
const TEMPER_LANES: usize = 4;

/// One chunk's tempering sums on the grid: s[g] = Σ e_g, s2[g] = Σ e_g² with
/// e_g = e^(prev - mp) e^(β_g (ll - ml)), β_g = 2^-g, for particles with a finite likelihood.
/// Lanes of particles are summed separately (so the loop vectorises) and added at the end.
#[inline(always)]
fn temper_grid_sums_impl(
    wc: &[f32],
    lc: &[f32],
    mp: f32,
    ml: f32,
) -> ([f64; TEMPER_GRID + 1], [f64; TEMPER_GRID + 1]) {
    const G: usize = TEMPER_GRID + 1;
    let finest = (-(TEMPER_GRID as f64)).exp2();
    let mut s = [[0.0f64; TEMPER_LANES]; G];
    let mut s2 = [[0.0f64; TEMPER_LANES]; G];
    for (wb, lb) in wc.chunks(TEMPER_LANES).zip(lc.chunks(TEMPER_LANES)) {
        let mut a = [0.0f64; TEMPER_LANES];
        let mut y = [0.0f64; TEMPER_LANES];
        for (i, (&w, &ll)) in wb.iter().zip(lb).enumerate() {
            if ll.is_finite() {
                a[i] = f64::from(w - ll - mp).exp();
                // y = e^(b 2^-G+1), squared up to e^b.
                y[i] = (f64::from(ll - ml) * finest).exp();
            }
        }
        for g in (0..G).rev() {
            for i in 0..TEMPER_LANES {
                let e = a[i] * y[i];
                s[g][i] += e;
                s2[g][i] += e * e;
                y[i] *= y[i];
            }
        }
    }
    (
        std::array::from_fn(|g| s[g].iter().sum()),
        std::array::from_fn(|g| s2[g].iter().sum()),
    )
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn temper_grid_sums_avx2(
    wc: &[f32],
    lc: &[f32],
    mp: f32,
    ml: f32,
) -> ([f64; TEMPER_GRID + 1], [f64; TEMPER_GRID + 1]) {
    temper_grid_sums_impl(wc, lc, mp, ml)
}

fn temper_grid_sums(
    wc: &[f32],
    lc: &[f32],
    mp: f32,
    ml: f32,
    avx2: bool,
) -> ([f64; TEMPER_GRID + 1], [f64; TEMPER_GRID + 1]) {
    #[cfg(target_arch = "x86_64")]
    if avx2 {
        // SAFETY: `avx2` is true only when the processor reported AVX2 at start-up.
        return unsafe { temper_grid_sums_avx2(wc, lc, mp, ml) };
    }
    let _ = avx2;
    temper_grid_sums_impl(wc, lc, mp, ml)
}

/// Regularise one chunk after a resampling (lanes of Philox normals).
fn roughen_chunk(ch: ChunkMut, l: &[[f32; 6]; 6], seed: u64, frame: u64, track: u32, mode: Jitter) {
    let len = ch.log_w.len();
    let mut b = 0;
    while b < len {
        let cnt = (len - b).min(LANES);
        let idx: U = std::array::from_fn(|i| (ch.start + b + if i < cnt { i } else { 0 }) as u32);
        let zl = lanes::normals6_lanes(&lanes::draw_lanes(
            seed,
            frame,
            track,
            &idx,
            Stream::Roughen,
        ));
        for i in 0..cnt {
            let z = zl.map(|lane| lane[i]);
            let mut part = [0.0f32; 8];
            for c in 0..STATE_DIM {
                part[c] = ch.s[c][b + i];
            }
            jitter(&mut part, l, &z, mode);
            for c in 0..STATE_DIM {
                ch.s[c][b + i] = part[c];
            }
        }
        b += LANES;
    }
}

/// `h` times the lower Cholesky factor of the cloud covariance (regularised), as f32.
pub fn roughen_factor(cov: &[[f64; 6]; 6], h: f64) -> [[f32; 6]; 6] {
    let l = crate::math::linalg::cholesky6(cov);
    l.map(|row| row.map(|v| (h * v) as f32))
}

/// Move one particle by `l z` with z six standard normals from its Philox block.
pub fn roughen(
    part: &mut [f32; 8],
    l: &[[f32; 6]; 6],
    seed: u64,
    frame: u64,
    slot: u32,
    i: u32,
    mode: Jitter,
) {
    let z = philox::normals6(philox::draw(seed, frame, slot, i, Stream::Roughen));
    jitter(part, l, &z, mode);
}

/// What a roughening jitter keeps: the kinematics, and in line mode the half-plane.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Jitter {
    pub kin: Kinematics,
    pub line: Option<crate::track::LineAxes>,
}

impl Jitter {
    pub fn of(p: &FilterParams) -> Self {
        Self {
            kin: Kinematics::of(p),
            line: p.line,
        }
    }
}

#[inline(always)]
fn jitter(part: &mut [f32; 8], l: &[[f32; 6]; 6], z: &[f32; 6], j: Jitter) {
    let mode = j.kin;
    for r in 0..6 {
        let mut acc = 0.0f32;
        for (c, zc) in z.iter().enumerate().take(r + 1) {
            acc += l[r][c] * zc;
        }
        part[r] += acc;
    }
    if mode != Kinematics::ThreeD {
        // Curved: the jitter moves the inverse range too (|p| - 1), reflected at 0. Plane:
        // back on the unit sphere.
        let n = models::dir_norm(part[0], part[1], part[2]);
        let k = if mode == Kinematics::Plane {
            1.0 / n
        } else if n < 1.0 {
            (2.0 - n) / n
        } else {
            1.0
        };
        for v in part.iter_mut().take(3) {
            *v *= k;
        }
    }
    if let Some(line) = &j.line {
        models::fold_line(&mut part[..6], line);
    }
}

/// Draw one particle of a prior (shared with the GPU's init kernel).
pub fn init_particle(p: &FilterParams, init: &TrackInit, i: u32) -> ([f32; 7], u32) {
    let z0 = philox::normals4(philox::draw(
        p.seed,
        init.frame,
        init.slot,
        i,
        Stream::InitPosition,
    ));
    let z1 = philox::normals4(philox::draw(
        p.seed,
        init.frame,
        init.slot,
        i,
        Stream::InitVelocity,
    ));
    let w = philox::draw(p.seed, init.frame, init.slot, i, Stream::Switch);
    let z = [z0[0], z0[1], z0[2], z0[3], z1[0], z1[1]];
    let mut x = init.mean;
    for (r, xr) in x.iter_mut().enumerate() {
        for (c, zc) in z.iter().enumerate().take(r + 1) {
            *xr += init.chol[r][c] * f64::from(*zc);
        }
    }
    // A velocity with a uniform random direction (three normals) and a speed uniform in
    // [0, max]: as wide as a uniform ball, but without the ball's bias towards fast sources
    // (a uniform ball of 5 m/s puts 99% of its mass above 1 m/s).
    let dz = fastmath::box_muller(philox::uniform(w[1]), philox::uniform(w[2])).0;
    let d = [z1[2], z1[3], dz];
    let dn = (d[0] * d[0] + d[1] * d[1] + d[2] * d[2]).sqrt().max(1e-12);
    let radius = init.speed_ball_m_s as f32 * philox::uniform(w[3]);
    let mut s = [0.0f32; 7];
    for a in 0..6 {
        s[a] = x[a] as f32;
    }
    for a in 0..3 {
        s[3 + a] += d[a] / dn * radius;
    }
    if p.mode.angular() {
        let plane = Kinematics::of(p) == Kinematics::Plane;
        if plane {
            // Plane waves: the direction drawn, its rate in the tangent plane.
            let (u, v) = models::onto_unit_sphere([s[0], s[1], s[2]], [s[3], s[4], s[5]]);
            s[..3].copy_from_slice(&u);
            s[3..6].copy_from_slice(&v);
        } else if init.inv_range_max >= 0.0 {
            // A newborn track: the direction drawn, the inverse range ρ (|p| - 1) spread evenly
            // over [0, max], and the velocity drawn (the speed ball) over the particle's range:
            // the velocity slots hold w = v ρ (see `models::advance`).
            let rho = init.inv_range_max * ((i as f32 + 0.5) / p.particles as f32);
            let n = models::dir_norm(s[0], s[1], s[2]);
            let keep = (1.0 + rho) / n;
            for a in 0..3 {
                s[a] *= keep;
                s[3 + a] *= rho;
            }
        } else {
            // Drawn from an estimate: as drawn, reflected at infinity.
            let (q, v) = models::reflect_at_infinity([s[0], s[1], s[2]], [s[3], s[4], s[5]]);
            s[..3].copy_from_slice(&q);
            s[3..6].copy_from_slice(&v);
        }
        if let Some(line) = &p.line {
            models::fold_line(&mut s, line);
        }
    }
    // Initial model by the given probabilities, from the first spare word.
    let u = philox::uniform(w[0]);
    let mut acc = 0.0f32;
    let mut model = (init.model_probs.len().max(1) - 1) as u32;
    for (m, pr) in init.model_probs.iter().enumerate() {
        acc += pr;
        if u < acc {
            model = m as u32;
            break;
        }
    }
    (s, model)
}

impl FilterBank for CpuParticleFilter {
    fn backend(&self) -> &'static str {
        "cpu"
    }

    fn params(&self) -> &FilterParams {
        &self.params
    }

    fn init_track(&mut self, init: &TrackInit) -> Result<(), BackendError> {
        let slot = self.check_slot(init.slot)?;
        let n = self.particles;
        let p = &self.params;
        split(
            slot_arrays(
                &mut self.state[slot],
                &mut self.model,
                &mut self.log_w,
                &mut self.log_lik,
                &mut self.weight_exp,
                n,
                slot,
            ),
            n,
        )
        .into_par_iter()
        .for_each(|ch| {
            for j in 0..ch.log_w.len() {
                let (s, model) = init_particle(p, init, (ch.start + j) as u32);
                for c in 0..STATE_DIM {
                    ch.s[c][j] = s[c];
                }
                ch.model[j] = model;
                ch.log_w[j] = 0.0;
            }
        });
        self.log_norm[slot] = (n as f64).ln();
        Ok(())
    }

    fn step(
        &mut self,
        meas: &TdoaMeasurement,
        tracks: &[TrackStep],
        out: &mut [Estimate],
    ) -> Result<(), BackendError> {
        if meas.pairs() != self.params.pairs.len() {
            return Err(BackendError::new(
                "cpu",
                format!(
                    "measurement has {} pairs, the filter {}",
                    meas.pairs(),
                    self.params.pairs.len()
                ),
            ));
        }
        for (t, o) in tracks.iter().zip(out.iter_mut()) {
            self.step_one(meas, t, o)?;
        }
        Ok(())
    }

    fn read_particles(&mut self, slot: u32) -> Result<Particles, BackendError> {
        let s = self.check_slot(slot)?;
        let n = self.particles;
        let off = self.log_norm[s] as f32;
        Ok(Particles {
            state: self.state[s].clone(),
            model: self.model[s * n..(s + 1) * n].to_vec(),
            log_weight: self.log_w[s * n..(s + 1) * n]
                .iter()
                .map(|w| w - off)
                .collect(),
        })
    }

    fn write_particles(&mut self, slot: u32, parts: &Particles) -> Result<(), BackendError> {
        let s = self.check_slot(slot)?;
        let n = self.particles;
        if parts.state.len() != STATE_DIM * n
            || parts.model.len() != n
            || parts.log_weight.len() != n
        {
            return Err(BackendError::new(
                "cpu",
                "particle arrays do not match the filter size",
            ));
        }
        self.state[s].copy_from_slice(&parts.state);
        self.model[s * n..(s + 1) * n].copy_from_slice(&parts.model);
        self.log_w[s * n..(s + 1) * n].copy_from_slice(&parts.log_weight);
        self.log_norm[s] = 0.0;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::workload::harbour_config;
    use proptest::prelude::*;

    fn filter(particles: usize) -> CpuParticleFilter {
        let mut c = harbour_config();
        c.tracker.particles = particles;
        CpuParticleFilter::new(c.filter_params())
    }

    fn init(slot: u32) -> TrackInit {
        let mut chol = [[0.0; 6]; 6];
        for (i, row) in chol.iter_mut().enumerate() {
            row[i] = if i < 3 { 0.5 } else { 0.2 };
        }
        TrackInit {
            slot,
            frame: 0,
            mean: [-16.0, 3.0, -12.0, 1.0, 0.0, 0.0],
            chol,
            speed_ball_m_s: 2.0,
            model_probs: vec![0.25; 4],
            inv_range_max: 0.0,
        }
    }

    /// The memory `check` states and caps (`Config::particle_memory_bytes`) is what the bank
    /// allocates.
    #[test]
    fn stated_particle_memory_is_what_is_allocated() {
        let mut c = harbour_config();
        c.tracker.particles = 1000;
        c.tracker.max_tracks = 3;
        let f = CpuParticleFilter::new(c.filter_params());
        let f32s: usize = f.state.iter().map(Vec::len).sum::<usize>()
            + f.log_w.len()
            + f.log_lik.len()
            + f.weight_exp.len()
            + f.scratch_state.len();
        let u32s = f.model.len() + f.scratch_model.len() + f.ancestors.len();
        let bytes = 4 * (f32s + u32s) + 8 * f.cdf.capacity();
        assert_eq!(bytes as u64, c.particle_memory_bytes());
    }

    /// The tempering grid sums in lanes (either build) agree with one plain loop, including
    /// particles with an infinite log-likelihood and a length that is not a multiple of the lanes.
    #[test]
    fn temper_grid_sums_match_a_plain_loop() {
        let n = 1000 + 3;
        let (mut lw, mut ll) = (Vec::new(), Vec::new());
        for i in 0..n as u32 {
            let w = philox::draw(7, 3, 0, i, Stream::Predict);
            ll.push(if i % 17 == 0 {
                f32::NEG_INFINITY
            } else {
                -40.0 * philox::uniform(w[0])
            });
            lw.push(-5.0 * philox::uniform(w[1]) + ll[i as usize]);
        }
        let (mut mp, mut ml) = (f32::NEG_INFINITY, f32::NEG_INFINITY);
        for (w, l) in lw.iter().zip(&ll) {
            if l.is_finite() {
                mp = mp.max(w - l);
                ml = ml.max(*l);
            }
        }
        const G: usize = TEMPER_GRID + 1;
        let (mut s, mut s2) = ([0.0f64; G], [0.0f64; G]);
        for (&w, &l) in lw.iter().zip(&ll) {
            if !l.is_finite() {
                continue;
            }
            for (g, (sg, s2g)) in s.iter_mut().zip(s2.iter_mut()).enumerate() {
                let beta = (-(g as f64)).exp2();
                let e = f64::from(w - l - mp).exp() * (f64::from(l - ml) * beta).exp();
                *sg += e;
                *s2g += e * e;
            }
        }
        #[cfg(target_arch = "x86_64")]
        let has_avx2 = std::is_x86_feature_detected!("avx2");
        #[cfg(not(target_arch = "x86_64"))]
        let has_avx2 = false;
        for avx2 in [false, has_avx2] {
            let (a, b) = temper_grid_sums(&lw, &ll, mp, ml, avx2);
            for g in 0..G {
                assert!(
                    (a[g] - s[g]).abs() <= 1e-9 * s[g].abs().max(1e-300),
                    "s[{g}] {} {}",
                    a[g],
                    s[g]
                );
                assert!(
                    (b[g] - s2[g]).abs() <= 1e-9 * s2[g].abs().max(1e-300),
                    "s2[{g}]"
                );
            }
        }
    }

    /// A measurement made from the exact TDOAs of a point.
    fn measurement(f: &CpuParticleFilter, frame: u64, at: [f32; 3]) -> TdoaMeasurement {
        let p = f.params();
        let k = LikelihoodConsts::new(p, p.tdoa_std_s);
        let mut pred = vec![0.0; p.pairs.len()];
        predict_tdoas(
            p,
            &k,
            &[at[0], at[1], at[2], 0.0, 0.0, 0.0, 0.0],
            0.0,
            &mut pred,
        );
        let mut m = TdoaMeasurement::empty(frame, p.pairs.len(), 1, p.tdoa_std_s);
        for (i, t) in pred.iter().enumerate() {
            m.tdoa_s[i] = *t;
            m.amp[i] = 200.0;
            m.floor[i] = 0.1;
        }
        m
    }

    #[test]
    fn prior_has_the_asked_for_moments() {
        let mut f = filter(20_000);
        f.init_track(&init(0)).unwrap();
        let parts = f.read_particles(0).unwrap();
        let n = 20_000;
        let mean = |c: usize| {
            parts.state[c * n..(c + 1) * n]
                .iter()
                .map(|v| f64::from(*v))
                .sum::<f64>()
                / n as f64
        };
        assert!((mean(0) + 16.0).abs() < 0.02);
        assert!((mean(3) - 1.0).abs() < 0.03);
        let var0 = parts.state[..n]
            .iter()
            .map(|v| (f64::from(*v) + 16.0).powi(2))
            .sum::<f64>()
            / n as f64;
        assert!((var0 - 0.25).abs() < 0.02, "{var0}");
        // Velocity spread: 0.2² Gaussian plus a uniform direction with speed uniform in [0, 2]
        // (variance E[s²]/3 = (4/3)/3 per axis).
        let var4 = parts.state[4 * n..5 * n]
            .iter()
            .map(|v| f64::from(*v).powi(2))
            .sum::<f64>()
            / n as f64;
        assert!((var4 - (0.04 + 4.0 / 9.0)).abs() < 0.04, "{var4}");
        let counts = (0..4)
            .map(|m| parts.model.iter().filter(|&&x| x == m).count())
            .collect::<Vec<_>>();
        for c in counts {
            assert!((c as f64 / n as f64 - 0.25).abs() < 0.02);
        }
    }

    #[test]
    fn weights_normalise_and_estimates_converge() {
        let mut f = filter(8192);
        f.init_track(&init(0)).unwrap();
        let target = [-15.5f32, 3.4, -12.2];
        let mut est = vec![Estimate::new(4)];
        for frame in 1..=30 {
            let m = measurement(&f, frame, target);
            f.step(&m, &[TrackStep::fixed(0, 0.05, 0.0)], &mut est)
                .unwrap();
            let parts = f.read_particles(0).unwrap();
            let total: f64 = parts.log_weight.iter().map(|w| f64::from(*w).exp()).sum();
            assert!((total - 1.0).abs() < 1e-3, "weights sum to {total}");
            let pm: f32 = est[0].model_probs.iter().sum();
            assert!((pm - 1.0).abs() < 1e-4);
            assert!(est[0].ess > 0.0 && est[0].ess <= 8192.5);
        }
        let e = &est[0];
        let err = ((e.mean[0] - f64::from(target[0])).powi(2)
            + (e.mean[1] - f64::from(target[1])).powi(2)
            + (e.mean[2] - f64::from(target[2])).powi(2))
        .sqrt();
        assert!(err < 0.05, "error {err}");
    }

    #[test]
    fn same_seed_same_particles_and_slots_are_independent() {
        let run = |slot: u32| {
            let mut f = filter(3000);
            f.init_track(&init(slot)).unwrap();
            let m = measurement(&f, 1, [-15.0, 3.0, -12.0]);
            let mut est = vec![Estimate::new(4)];
            f.step(&m, &[TrackStep::fixed(slot, 0.05, 0.01)], &mut est)
                .unwrap();
            (f.read_particles(slot).unwrap(), est)
        };
        assert_eq!(run(0), run(0));
        // A slot past the bank's last is an error, not a panic.
        let mut f = filter(3000);
        let past = f.params().slots as u32;
        assert!(f.init_track(&init(past)).is_err());
    }

    #[test]
    fn nearest_model_rule_picks_a_model() {
        let mut f = filter(4096);
        f.params.selection = ModelSelection::Nearest;
        f.init_track(&init(0)).unwrap();
        let m = measurement(&f, 1, [-15.9, 3.0, -12.0]);
        let mut est = vec![Estimate::new(4)];
        f.step(&m, &[TrackStep::fixed(0, 0.05, 0.0)], &mut est)
            .unwrap();
        let chosen = est[0].chosen_model.unwrap();
        assert!((est[0].model_probs[chosen] - 1.0).abs() < 1e-6);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(24))]
        /// Weights stay normalised and the particle count is kept, whatever the measurement.
        #[test]
        fn invariants_hold_for_random_measurements(seed in 0u64..1000, amp in 0.0f32..500.0, floor in 0.01f32..1.0) {
            let mut f = filter(1024);
            f.params.seed = seed;
            f.init_track(&init(0)).unwrap();
            let mut m = TdoaMeasurement::empty(1, f.params.pairs.len(), 2, f.params.tdoa_std_s);
            let mut r = crate::rng::philox::PhiloxStream::new(seed, 9, Stream::Simulate);
            for i in 0..m.tdoa_s.len() {
                m.tdoa_s[i] = (r.uniform_f64() * 0.04 - 0.02) as f32;
                m.amp[i] = amp;
            }
            m.floor.fill(floor);
            let mut est = vec![Estimate::new(4)];
            f.step(&m, &[TrackStep::fixed(0, 0.05, 0.0)], &mut est).unwrap();
            let parts = f.read_particles(0).unwrap();
            prop_assert_eq!(parts.model.len(), 1024);
            let total: f64 = parts.log_weight.iter().map(|w| f64::from(*w).exp()).sum();
            prop_assert!((total - 1.0).abs() < 1e-3, "sum {}", total);
            prop_assert!(est[0].mean.iter().all(|v| v.is_finite()));
        }
    }
}
