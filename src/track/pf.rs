//! The CPU particle-filter bank: the reference twin of `kernels/pf.cu`.
//!
//! Work is split into fixed chunks of [`CHUNK`] particles (run on the rayon pool) and every sum
//! is combined in chunk order, so the result does not depend on the number of threads: the
//! same seed gives byte-identical output on any machine with the same float behaviour.

use rayon::prelude::*;

use crate::config::{ModelSelection, TrackMode};
use crate::error::BackendError;
use crate::philox::{self, Stream};
use crate::track::likelihood::{LikelihoodConsts, inside, log_likelihood, predict_tdoas};
use crate::track::models::{predict, switch_model};
use crate::track::resample;
use crate::track::{
    Estimate, FilterParams, MAX_MODELS, ParticleFilter, Particles, ROUGHEN_H, STATE_DIM, TEMPER_GRID, TEMPER_MIN_ESS, TdoaMeasurement,
    TrackInit, TrackStep,
};

/// Particles per unit of parallel work.
pub const CHUNK: usize = 2048;

/// Weighted sums over one chunk (e = exp(log w - max)).
#[derive(Debug, Clone)]
struct ChunkSums {
    s: f64,
    s2: f64,
    x: [f64; 6],
    xx: [f64; 21],
    models: [f64; MAX_MODELS],
    turn: f64,
}

impl ChunkSums {
    fn zero() -> Self {
        Self {
            s: 0.0,
            s2: 0.0,
            x: [0.0; 6],
            xx: [0.0; 21],
            models: [0.0; MAX_MODELS],
            turn: 0.0,
        }
    }

    fn add(&mut self, o: &ChunkSums) {
        self.s += o.s;
        self.s2 += o.s2;
        for i in 0..6 {
            self.x[i] += o.x[i];
        }
        for i in 0..21 {
            self.xx[i] += o.xx[i];
        }
        for i in 0..MAX_MODELS {
            self.models[i] += o.models[i];
        }
        self.turn += o.turn;
    }
}

pub struct CpuParticleFilter {
    p: FilterParams,
    n: usize,
    /// slots × n particles; `[0..7]` is the state, `[7]` padding.
    particles: Vec<[f32; 8]>,
    model: Vec<u32>,
    log_w: Vec<f32>,
    /// This step's log-likelihood of each particle (for tempering), one slot's worth.
    ll: Vec<f32>,
    /// Per slot: log of the sum of exp(log_w); subtracting it normalises the weights.
    log_norm: Vec<f64>,
    scratch_p: Vec<[f32; 8]>,
    scratch_m: Vec<u32>,
    e: Vec<f64>,
    cdf: Vec<f64>,
    anc: Vec<u32>,
}

impl CpuParticleFilter {
    pub fn new(p: FilterParams) -> Self {
        let n = p.particles;
        let total = n * p.slots;
        Self {
            n,
            particles: vec![[0.0; 8]; total],
            model: vec![0; total],
            log_w: vec![0.0; total],
            ll: vec![0.0; n],
            log_norm: vec![(n as f64).ln(); p.slots],
            scratch_p: vec![[0.0; 8]; n],
            scratch_m: vec![0; n],
            e: vec![0.0; n],
            cdf: Vec::with_capacity(n),
            anc: vec![0; n],
            p,
        }
    }

    fn check_slot(&self, slot: u32) -> Result<usize, BackendError> {
        if (slot as usize) < self.p.slots {
            Ok(slot as usize * self.n)
        } else {
            Err(BackendError::new("cpu", format!("track slot {slot} out of range ({} slots)", self.p.slots)))
        }
    }

    /// The paper's rule: the model whose weighted-mean predicted TDOAs lie closest (L1) to the
    /// strongest peak of each usable pair.
    fn nearest_model(&self, base: usize, meas: &TdoaMeasurement, t: &TrackStep) -> usize {
        let np = self.p.pairs.len();
        let kk = meas.peaks_per_pair;
        let offset = self.log_norm[t.slot as usize];
        let mut best = (f64::INFINITY, 0usize);
        let k = &LikelihoodConsts::new(&self.p, meas.sigma_s);
        for (mi, model) in self.p.models.iter().enumerate() {
            let p = &self.p;
            let sums: Vec<(f64, Vec<f64>)> = self.particles[base..base + self.n]
                .par_chunks(CHUNK)
                .zip(self.log_w[base..base + self.n].par_chunks(CHUNK))
                .enumerate()
                .map(|(ci, (pc, wc))| {
                    let mut acc = vec![0.0f64; np];
                    let mut sw = 0.0f64;
                    let mut pred = vec![0.0f32; np];
                    for (j, (part, &lw)) in pc.iter().zip(wc).enumerate() {
                        let g = (ci * CHUNK + j) as u32;
                        let mut s: [f32; 7] = part[..7].try_into().unwrap_or([0.0; 7]);
                        let z = philox::normals4(philox::draw(p.seed, meas.frame, t.slot, g, Stream::Predict));
                        predict(model, p.mode, t.dt_s, &mut s, z);
                        predict_tdoas(p, k, &s, t.lag_s, &mut pred);
                        let w = (f64::from(lw) - offset).exp();
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
                best = (err, mi);
            }
        }
        best.1
    }

    /// Pass 2: weighted sums for the estimate, e = exp(log_w - mx) (also kept in `self.e`).
    fn weighted_sums(&mut self, base: usize, mx: f32) -> ChunkSums {
        let n = self.n;
        let chunks: Vec<ChunkSums> = self.particles[base..base + n]
            .par_chunks(CHUNK)
            .zip(self.model[base..base + n].par_chunks(CHUNK))
            .zip(self.log_w[base..base + n].par_chunks(CHUNK))
            .zip(self.e.par_chunks_mut(CHUNK))
            .map(|(((pc, mc), wc), ec)| {
                let mut c = ChunkSums::zero();
                for (((part, &m), &lw), e) in pc.iter().zip(mc).zip(wc).zip(ec.iter_mut()) {
                    // f32 exp of a value <= 0 is exact enough for a weight; the sums are f64.
                    let w = f64::from((lw - mx).exp());
                    *e = w;
                    c.s += w;
                    c.s2 += w * w;
                    let x = [
                        f64::from(part[0]),
                        f64::from(part[1]),
                        f64::from(part[2]),
                        f64::from(part[3]),
                        f64::from(part[4]),
                        f64::from(part[5]),
                    ];
                    let mut idx = 0;
                    for a in 0..6 {
                        c.x[a] += w * x[a];
                        for b in a..6 {
                            c.xx[idx] += w * x[a] * x[b];
                            idx += 1;
                        }
                    }
                    c.models[m as usize] += w;
                    c.turn += w * f64::from(part[6]);
                }
                c
            })
            .collect();
        let mut tot = ChunkSums::zero();
        for c in &chunks {
            tot.add(c);
        }
        tot
    }

    /// The largest β = 2^-k (k = 0..=TEMPER_GRID) whose tempered update keeps an effective
    /// sample size of at least TEMPER_MIN_ESS × N. Every grid point is evaluated (one pass),
    /// as the GPU does, so both pick the same β.
    fn choose_temper(&self, base: usize) -> f32 {
        let n = self.n;
        const G: usize = TEMPER_GRID + 1;
        // prev_i = log_w_i - ll_i; bound the exponent by max(prev) + β max(ll).
        let (mut mp, mut ml) = (f32::NEG_INFINITY, f32::NEG_INFINITY);
        for (lw, ll) in self.log_w[base..base + n].iter().zip(&self.ll) {
            if ll.is_finite() {
                mp = mp.max(lw - ll);
                ml = ml.max(*ll);
            }
        }
        let parts: Vec<([f64; G], [f64; G])> = self.log_w[base..base + n]
            .par_chunks(CHUNK)
            .zip(self.ll.par_chunks(CHUNK))
            .map(|(wc, lc)| {
                let mut s = [0.0f64; G];
                let mut s2 = [0.0f64; G];
                for (&lw, &ll) in wc.iter().zip(lc) {
                    if !ll.is_finite() {
                        continue;
                    }
                    let a = f64::from(lw - ll - mp);
                    let b = f64::from(ll - ml);
                    for g in 0..G {
                        let beta = (-(g as f64)).exp2();
                        let e = (a + beta * b).exp();
                        s[g] += e;
                        s2[g] += e * e;
                    }
                }
                (s, s2)
            })
            .collect();
        let mut s = [0.0f64; G];
        let mut s2 = [0.0f64; G];
        for (a, b) in &parts {
            for g in 0..G {
                s[g] += a[g];
                s2[g] += b[g];
            }
        }
        for g in 0..G {
            if s2[g] > 0.0 && s[g] * s[g] >= TEMPER_MIN_ESS * n as f64 * s2[g] {
                return (-(g as f32)).exp2();
            }
        }
        (-(TEMPER_GRID as f32)).exp2()
    }

    fn step_one(&mut self, meas: &TdoaMeasurement, t: &TrackStep, out: &mut Estimate) -> Result<(), BackendError> {
        let base = self.check_slot(t.slot)?;
        let n = self.n;
        let l = self.p.n_models();
        let forced = match self.p.selection {
            ModelSelection::Markov => None,
            ModelSelection::Nearest => Some(self.nearest_model(base, meas, t)),
        };
        let offset = self.log_norm[t.slot as usize] as f32;
        let k = &LikelihoodConsts::new(&self.p, meas.sigma_s);
        let p = &self.p;
        // Pass 1: switch, predict, weight. Returns each chunk's largest log weight.
        let maxes: Vec<f32> = self.particles[base..base + n]
            .par_chunks_mut(CHUNK)
            .zip(self.model[base..base + n].par_chunks_mut(CHUNK))
            .zip(self.log_w[base..base + n].par_chunks_mut(CHUNK))
            .zip(self.ll.par_chunks_mut(CHUNK))
            .enumerate()
            .map(|(ci, (((pc, mc), wc), lc))| {
                let mut mx = f32::NEG_INFINITY;
                let ns = p.sensors.len();
                let mut rho = vec![0.0f32; ns];
                let mut rate = vec![0.0f32; ns];
                for (j, (((part, m), lw), llo)) in pc.iter_mut().zip(mc.iter_mut()).zip(wc.iter_mut()).zip(lc.iter_mut()).enumerate() {
                    let g = (ci * CHUNK + j) as u32;
                    *m = match forced {
                        Some(f) => f as u32,
                        None => {
                            let u = philox::uniform(philox::draw(p.seed, meas.frame, t.slot, g, Stream::Switch)[0]);
                            switch_model(&p.transition_cdf, l, *m, u)
                        }
                    };
                    let z = philox::normals4(philox::draw(p.seed, meas.frame, t.slot, g, Stream::Predict));
                    let mut s: [f32; 7] = [part[0], part[1], part[2], part[3], part[4], part[5], part[6]];
                    predict(&p.models[*m as usize], p.mode, t.dt_s, &mut s, z);
                    part[..7].copy_from_slice(&s);
                    let ll = if inside(&p.bounds, &s) {
                        log_likelihood(p, k, meas, &s, t.lag_s, &mut rho, &mut rate)
                    } else {
                        f32::NEG_INFINITY
                    };
                    let ll = if ll.is_nan() { f32::NEG_INFINITY } else { ll };
                    *llo = ll;
                    *lw = *lw - offset + ll;
                    mx = mx.max(*lw);
                }
                mx
            })
            .collect();
        let mut mx = maxes.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let degenerate = !mx.is_finite();
        if degenerate {
            // Every particle left the search volume or matched nothing at all: keep the cloud
            // with equal weights and report no evidence; the manager decides what to do.
            self.log_w[base..base + n].fill(0.0);
            mx = 0.0;
        }
        let mut sums = self.weighted_sums(base, mx);
        let mut temper = 1.0f32;
        if !degenerate && sums.s * sums.s < TEMPER_MIN_ESS * n as f64 * sums.s2 {
            temper = self.choose_temper(base);
            // log_w - ll is the previous (normalised) weight; apply the tempered likelihood.
            let mut m2 = f32::NEG_INFINITY;
            for (lw, ll) in self.log_w[base..base + n].iter_mut().zip(&self.ll) {
                let prev = if ll.is_finite() { *lw - ll } else { f32::NEG_INFINITY };
                *lw = if ll.is_finite() { prev + temper * ll } else { f32::NEG_INFINITY };
                m2 = m2.max(*lw);
            }
            mx = m2;
            sums = self.weighted_sums(base, mx);
        }
        let tot = sums;
        let p = &self.p;
        let s = tot.s.max(1e-300);
        let log_norm = f64::from(mx) + s.ln();
        out.log_evidence = if degenerate { f32::NEG_INFINITY } else { log_norm as f32 };
        out.ess = (tot.s * tot.s / tot.s2.max(1e-300)) as f32;
        let mut idx = 0;
        for a in 0..6 {
            out.mean[a] = tot.x[a] / s;
        }
        for a in 0..6 {
            for b in a..6 {
                let c = tot.xx[idx] / s - out.mean[a] * out.mean[b];
                out.cov[a][b] = c;
                out.cov[b][a] = c;
                idx += 1;
            }
        }
        out.model_probs.resize(l, 0.0);
        for (m, pr) in out.model_probs.iter_mut().enumerate() {
            *pr = (tot.models[m] / s) as f32;
        }
        out.turn_rate = (tot.turn / s) as f32;
        out.chosen_model = forced;
        out.temper = temper;
        // Resample when the effective sample size is too low.
        out.resampled = f64::from(out.ess) < f64::from(p.ess_fraction) * n as f64;
        if out.resampled {
            resample::cumulative(self.e.iter().copied(), &mut self.cdf);
            let u0 = f64::from(philox::uniform(philox::draw(p.seed, meas.frame, t.slot, 0, Stream::Resample)[0]));
            resample::systematic(&self.cdf, u0, &mut self.anc);
            let (src_p, src_m) = (&self.particles[base..base + n], &self.model[base..base + n]);
            self.scratch_p
                .par_chunks_mut(CHUNK)
                .zip(self.scratch_m.par_chunks_mut(CHUNK))
                .zip(self.anc.par_chunks(CHUNK))
                .for_each(|((dp, dm), ac)| {
                    for ((d, m), &a) in dp.iter_mut().zip(dm.iter_mut()).zip(ac) {
                        *d = src_p[a as usize];
                        *m = src_m[a as usize];
                    }
                });
            self.particles[base..base + n].copy_from_slice(&self.scratch_p);
            self.model[base..base + n].copy_from_slice(&self.scratch_m);
            self.log_w[base..base + n].fill(0.0);
            self.log_norm[t.slot as usize] = (n as f64).ln();
            if temper < 1.0 {
                let l = roughen_factor(&out.cov);
                let (seed, frame, slot, mode) = (p.seed, meas.frame, t.slot, p.mode);
                self.particles[base..base + n].par_chunks_mut(CHUNK).enumerate().for_each(|(ci, pc)| {
                    for (j, part) in pc.iter_mut().enumerate() {
                        roughen(part, &l, seed, frame, slot, (ci * CHUNK + j) as u32, mode);
                    }
                });
            }
        } else {
            self.log_norm[t.slot as usize] = log_norm;
        }
        Ok(())
    }
}

/// `ROUGHEN_H` times the lower Cholesky factor of the cloud covariance (regularised), as f32.
pub fn roughen_factor(cov: &[[f64; 6]; 6]) -> [[f32; 6]; 6] {
    let l = crate::track::manager::cholesky6(cov);
    l.map(|row| row.map(|v| (ROUGHEN_H * v) as f32))
}

/// Move one particle by `l z` with z six standard normals from its Philox blocks.
#[inline(always)]
pub fn roughen(part: &mut [f32; 8], l: &[[f32; 6]; 6], seed: u64, frame: u64, slot: u32, i: u32, mode: TrackMode) {
    let a = philox::normals4(philox::draw(seed, frame, slot, i, Stream::Roughen));
    let b = philox::normals4(philox::draw(seed, frame, slot, i, Stream::Roughen2));
    let z = [a[0], a[1], a[2], a[3], b[0], b[1]];
    for r in 0..6 {
        let mut acc = 0.0f32;
        for (c, zc) in z.iter().enumerate().take(r + 1) {
            acc += l[r][c] * zc;
        }
        part[r] += acc;
    }
    if mode == TrackMode::Direction {
        let n = (part[0] * part[0] + part[1] * part[1] + part[2] * part[2]).sqrt().max(1e-12);
        for v in part.iter_mut().take(3) {
            *v /= n;
        }
    }
}

/// Draw one particle of a prior (shared with the GPU's init kernel).
pub fn init_particle(p: &FilterParams, init: &TrackInit, i: u32) -> ([f32; 7], u32) {
    let z0 = philox::normals4(philox::draw(p.seed, init.frame, init.slot, i, Stream::InitPosition));
    let z1 = philox::normals4(philox::draw(p.seed, init.frame, init.slot, i, Stream::InitVelocity));
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
    let dz = {
        let (u1, u2) = (philox::uniform(w[1]), philox::uniform(w[2]));
        (-2.0 * u1.ln()).sqrt() * (std::f32::consts::TAU * u2).cos()
    };
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
    if p.mode == TrackMode::Direction {
        let nrm = (s[0] * s[0] + s[1] * s[1] + s[2] * s[2]).sqrt().max(1e-12);
        for v in s.iter_mut().take(3) {
            *v /= nrm;
        }
        let radial = s[3] * s[0] + s[4] * s[1] + s[5] * s[2];
        for a in 0..3 {
            s[3 + a] -= radial * s[a];
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

impl ParticleFilter for CpuParticleFilter {
    fn backend(&self) -> &'static str {
        "cpu"
    }

    fn params(&self) -> &FilterParams {
        &self.p
    }

    fn init_track(&mut self, init: &TrackInit) -> Result<(), BackendError> {
        let base = self.check_slot(init.slot)?;
        let n = self.n;
        let p = &self.p;
        self.particles[base..base + n]
            .par_chunks_mut(CHUNK)
            .zip(self.model[base..base + n].par_chunks_mut(CHUNK))
            .enumerate()
            .for_each(|(ci, (pc, mc))| {
                for (j, (part, m)) in pc.iter_mut().zip(mc.iter_mut()).enumerate() {
                    let (s, model) = init_particle(p, init, (ci * CHUNK + j) as u32);
                    part[..7].copy_from_slice(&s);
                    part[7] = 0.0;
                    *m = model;
                }
            });
        self.log_w[base..base + n].fill(0.0);
        self.log_norm[init.slot as usize] = (n as f64).ln();
        Ok(())
    }

    fn step(&mut self, meas: &TdoaMeasurement, tracks: &[TrackStep], out: &mut [Estimate]) -> Result<(), BackendError> {
        if meas.pairs() != self.p.pairs.len() {
            return Err(BackendError::new(
                "cpu",
                format!("measurement has {} pairs, the filter {}", meas.pairs(), self.p.pairs.len()),
            ));
        }
        for (t, o) in tracks.iter().zip(out.iter_mut()) {
            self.step_one(meas, t, o)?;
        }
        Ok(())
    }

    fn read_particles(&mut self, slot: u32) -> Result<Particles, BackendError> {
        let base = self.check_slot(slot)?;
        let n = self.n;
        let mut state = vec![0.0f32; STATE_DIM * n];
        for i in 0..n {
            for c in 0..STATE_DIM {
                state[c * n + i] = self.particles[base + i][c];
            }
        }
        let off = self.log_norm[slot as usize] as f32;
        Ok(Particles {
            state,
            model: self.model[base..base + n].to_vec(),
            log_weight: self.log_w[base..base + n].iter().map(|w| w - off).collect(),
        })
    }

    fn write_particles(&mut self, slot: u32, parts: &Particles) -> Result<(), BackendError> {
        let base = self.check_slot(slot)?;
        let n = self.n;
        if parts.state.len() != STATE_DIM * n || parts.model.len() != n || parts.log_weight.len() != n {
            return Err(BackendError::new("cpu", "particle arrays do not match the filter size"));
        }
        for i in 0..n {
            for c in 0..STATE_DIM {
                self.particles[base + i][c] = parts.state[c * n + i];
            }
        }
        self.model[base..base + n].copy_from_slice(&parts.model);
        self.log_w[base..base + n].copy_from_slice(&parts.log_weight);
        self.log_norm[slot as usize] = 0.0;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use proptest::prelude::*;

    fn filter(particles: usize) -> CpuParticleFilter {
        let mut c = Config::for_array(
            vec![
                [0.0, 0.0, -6.0],
                [24.0, -3.0, -14.0],
                [6.0, 21.0, -9.0],
                [-14.0, 9.0, -20.0],
                [9.0, 6.0, -28.0],
            ],
            1500.0,
            48_000,
        );
        c.tracker.particles = particles;
        CpuParticleFilter::new(FilterParams::from_config(&c))
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
        }
    }

    /// A measurement made from the exact TDOAs of a point.
    fn measurement(f: &CpuParticleFilter, frame: u64, at: [f32; 3]) -> TdoaMeasurement {
        let p = f.params();
        let k = LikelihoodConsts::new(p, p.tdoa_std_s);
        let mut pred = vec![0.0; p.pairs.len()];
        predict_tdoas(p, &k, &[at[0], at[1], at[2], 0.0, 0.0, 0.0, 0.0], 0.0, &mut pred);
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
        let mean = |c: usize| parts.state[c * n..(c + 1) * n].iter().map(|v| f64::from(*v)).sum::<f64>() / n as f64;
        assert!((mean(0) + 16.0).abs() < 0.02);
        assert!((mean(3) - 1.0).abs() < 0.03);
        let var0 = parts.state[..n].iter().map(|v| (f64::from(*v) + 16.0).powi(2)).sum::<f64>() / n as f64;
        assert!((var0 - 0.25).abs() < 0.02, "{var0}");
        // Velocity spread: 0.2² Gaussian plus a uniform direction with speed uniform in [0, 2]
        // (variance E[s²]/3 = (4/3)/3 per axis).
        let var4 = parts.state[4 * n..5 * n].iter().map(|v| f64::from(*v).powi(2)).sum::<f64>() / n as f64;
        assert!((var4 - (0.04 + 4.0 / 9.0)).abs() < 0.04, "{var4}");
        let counts = (0..4).map(|m| parts.model.iter().filter(|&&x| x == m).count()).collect::<Vec<_>>();
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
            f.step(&m, &[TrackStep { slot: 0, dt_s: 0.05, lag_s: 0.0 }], &mut est).unwrap();
            let parts = f.read_particles(0).unwrap();
            let total: f64 = parts.log_weight.iter().map(|w| f64::from(*w).exp()).sum();
            assert!((total - 1.0).abs() < 1e-3, "weights sum to {total}");
            let pm: f32 = est[0].model_probs.iter().sum();
            assert!((pm - 1.0).abs() < 1e-4);
            assert!(est[0].ess > 0.0 && est[0].ess <= 8192.5);
        }
        let e = &est[0];
        let err = ((e.mean[0] - f64::from(target[0])).powi(2) + (e.mean[1] - f64::from(target[1])).powi(2) + (e.mean[2] - f64::from(target[2])).powi(2)).sqrt();
        assert!(err < 0.05, "error {err}");
    }

    #[test]
    fn same_seed_same_particles_and_slots_are_independent() {
        let run = |slot: u32| {
            let mut f = filter(3000);
            f.init_track(&init(slot)).unwrap();
            let m = measurement(&f, 1, [-15.0, 3.0, -12.0]);
            let mut est = vec![Estimate::new(4)];
            f.step(&m, &[TrackStep { slot, dt_s: 0.05, lag_s: 0.01 }], &mut est).unwrap();
            (f.read_particles(slot).unwrap(), est)
        };
        assert_eq!(run(0), run(0));
        // Only slot 0 exists here: others are an error, not a panic.
        let mut f = filter(3000);
        assert!(f.init_track(&init(3)).is_err());
    }

    #[test]
    fn nearest_model_rule_picks_a_model() {
        let mut f = filter(4096);
        f.p.selection = ModelSelection::Nearest;
        f.init_track(&init(0)).unwrap();
        let m = measurement(&f, 1, [-15.9, 3.0, -12.0]);
        let mut est = vec![Estimate::new(4)];
        f.step(&m, &[TrackStep { slot: 0, dt_s: 0.05, lag_s: 0.0 }], &mut est).unwrap();
        let chosen = est[0].chosen_model.unwrap();
        assert!((est[0].model_probs[chosen] - 1.0).abs() < 1e-6);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(24))]
        /// Weights stay normalised and the particle count is kept, whatever the measurement.
        #[test]
        fn invariants_hold_for_random_measurements(seed in 0u64..1000, amp in 0.0f32..500.0, floor in 0.01f32..1.0) {
            let mut f = filter(1024);
            f.p.seed = seed;
            f.init_track(&init(0)).unwrap();
            let mut m = TdoaMeasurement::empty(1, f.p.pairs.len(), 2, f.p.tdoa_std_s);
            let mut r = crate::philox::PhiloxStream::new(seed, 9, Stream::Simulate);
            for i in 0..m.tdoa_s.len() {
                m.tdoa_s[i] = (r.uniform_f64() * 0.04 - 0.02) as f32;
                m.amp[i] = amp;
            }
            m.floor.fill(floor);
            let mut est = vec![Estimate::new(4)];
            f.step(&m, &[TrackStep { slot: 0, dt_s: 0.05, lag_s: 0.0 }], &mut est).unwrap();
            let parts = f.read_particles(0).unwrap();
            prop_assert_eq!(parts.model.len(), 1024);
            let total: f64 = parts.log_weight.iter().map(|w| f64::from(*w).exp()).sum();
            prop_assert!((total - 1.0).abs() < 1e-3, "sum {}", total);
            prop_assert!(est[0].mean.iter().all(|v| v.is_finite()));
        }
    }
}
