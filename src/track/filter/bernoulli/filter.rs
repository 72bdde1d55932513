//! One single-target PF-TBD filter (digest B2.4): N_b birth particles drawn from the model's
//! proposal, N_c continuing particles moved by the motion model, both weighted by the frame's
//! likelihood ratio, the existence update, and systematic resampling of the N_b + N_c weighted
//! particles down to N_c. Weights stay logarithms until they are normalised together.

use rayon::prelude::*;

use super::existence::{self, Chain, Existence};
use super::{CellModel, DrawKey};
use crate::rng::philox::{Stream, draw, uniform};
use crate::track::filter::resample;

/// Sizes and the existence chain of one filter.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BernoulliParams {
    pub chain: Chain,
    pub n_birth: usize,
    pub n_cont: usize,
}

/// What one frame gave.
#[derive(Debug, Clone, PartialEq)]
pub struct TbdStep {
    pub existence: Existence,
    /// The continuing particles' mean after resampling.
    pub mean: Vec<f64>,
    /// How many of the resampled particles descend from the birth set.
    pub from_birth: usize,
}

/// A Bernoulli track: its continuing particles (equal weights after each frame) and P(exists).
#[derive(Debug, Clone)]
pub struct BernoulliFilter {
    params: BernoulliParams,
    dim: usize,
    seed: u64,
    track: u32,
    frame: u64,
    p_exist: f64,
    /// `n_cont × dim`, row per particle; empty before the first frame.
    particles: Vec<f64>,
    // Per-frame scratch, kept to avoid allocating each frame.
    births: Vec<f64>,
    log_w: Vec<f64>,
    cdf: Vec<f64>,
    ancestors: Vec<u32>,
    next: Vec<f64>,
}

/// Particles per rayon task.
const CHUNK: usize = 4096;

impl BernoulliFilter {
    /// A filter with P(exists) = `p0` and no particles yet (the first frame's births seed it).
    pub fn new(params: BernoulliParams, dim: usize, seed: u64, track: u32, p0: f64) -> Self {
        Self {
            params,
            dim,
            seed,
            track,
            frame: 0,
            p_exist: p0.clamp(0.0, 1.0),
            particles: Vec::new(),
            births: Vec::new(),
            log_w: Vec::new(),
            cdf: Vec::new(),
            ancestors: Vec::new(),
            next: Vec::new(),
        }
    }

    /// New sizes and chain from the next frame on (a search that becomes a track stops
    /// drawing births). The continuing set keeps its particles when its size is unchanged;
    /// otherwise it is drawn again from them, evenly.
    pub fn set_params(&mut self, params: BernoulliParams) {
        let n_old = self.particles.len() / self.dim.max(1);
        if n_old > 0 && n_old != params.n_cont {
            let mut next = Vec::with_capacity(params.n_cont * self.dim);
            for j in 0..params.n_cont {
                let i = j * n_old / params.n_cont;
                next.extend_from_slice(&self.particles[i * self.dim..(i + 1) * self.dim]);
            }
            self.particles = next;
        }
        self.params = params;
    }

    /// A filter whose continuing particles are `particles` (`n_cont × dim`) with P(exists) =
    /// `p`: a track handed over from another path.
    pub fn seeded(
        params: BernoulliParams,
        dim: usize,
        seed: u64,
        track: u32,
        p: f64,
        particles: Vec<f64>,
    ) -> Self {
        let mut f = Self::new(params, dim, seed, track, p);
        f.particles = particles;
        f
    }

    pub fn p_exist(&self) -> f64 {
        self.p_exist
    }

    /// The continuing particles, `dim` values each.
    pub fn particles(&self) -> &[f64] {
        &self.particles
    }

    /// One frame: births, continuing particles, existence, resampling, estimate.
    pub fn step<M: CellModel>(&mut self, model: &M, frame: &M::Frame) -> TbdStep {
        let (dim, nb) = (self.dim, self.params.n_birth);
        let has_cont = self.particles.len() == self.params.n_cont * dim && dim > 0;
        let nc = if has_cont { self.params.n_cont } else { 0 };
        self.log_w.clear();
        self.log_w.resize(nb + nc, f64::NEG_INFINITY);
        self.births.clear();
        self.births.resize(nb * dim, 0.0);

        // Births (eq. 20): l · p_b / q_b / N_b.
        let proposal = model.proposal(frame);
        let (seed, frame_no, track) = (self.seed, self.frame, self.track);
        let keys = |i: usize| DrawKey {
            seed,
            frame: frame_no,
            track,
            particle: i as u32,
        };
        let (lw_birth, lw_cont) = self.log_w.split_at_mut(nb);
        let ln_nb = (nb.max(1) as f64).ln();
        self.births
            .par_chunks_mut(CHUNK * dim.max(1))
            .zip(lw_birth.par_chunks_mut(CHUNK))
            .enumerate()
            .for_each(|(c, (xs, lw))| {
                for (k, (x, w)) in xs.chunks_mut(dim).zip(lw.iter_mut()).enumerate() {
                    let i = c * CHUNK + k;
                    let log_ratio = model.draw_birth(&proposal, keys(i), x);
                    *w = model.log_lr(frame, x) + log_ratio - ln_nb;
                }
            });
        // Continuing (eq. 21): l / N_c. Their keys follow the births' so no two share numbers.
        let ln_nc = (nc.max(1) as f64).ln();
        if nc > 0 {
            self.particles
                .par_chunks_mut(CHUNK * dim)
                .zip(lw_cont.par_chunks_mut(CHUNK))
                .enumerate()
                .for_each(|(c, (xs, lw))| {
                    for (k, (x, w)) in xs.chunks_mut(dim).zip(lw.iter_mut()).enumerate() {
                        let i = nb + c * CHUNK + k;
                        model.propagate(keys(i), x);
                        *w = model.log_lr(frame, x) - ln_nc;
                    }
                });
        }
        let e = existence::update(
            &self.params.chain,
            self.p_exist,
            existence::log_sum_exp(&self.log_w[..nb]),
            existence::log_sum_exp(&self.log_w[nb..]),
        );
        let from_birth = self.resample(&e, nb);
        self.p_exist = e.p;
        self.frame += 1;
        TbdStep {
            existence: e,
            mean: self.mean(),
            from_birth,
        }
    }

    /// Step 6: the N_b + N_c particles, weighted by the mixture, down to N_c equal ones by
    /// systematic resampling; returns how many came from the births.
    fn resample(&mut self, e: &Existence, nb: usize) -> usize {
        let (dim, n) = (self.dim, self.params.n_cont);
        let (fb, fc, tot) = (e.log_birth_factor, e.log_cont_factor, e.log_total);
        let weight = |i: usize, lw: f64| {
            let f = if i < nb { fb } else { fc };
            let w = (lw + f - tot).exp();
            if w.is_finite() { w } else { 0.0 }
        };
        resample::cumulative(
            self.log_w.iter().enumerate().map(|(i, &lw)| weight(i, lw)),
            &mut self.cdf,
        );
        self.ancestors.clear();
        self.ancestors.resize(n, 0);
        if self.cdf.last().is_some_and(|&t| t > 0.0) {
            let u0 = f64::from(uniform(
                draw(self.seed, self.frame, self.track, 0, Stream::Resample)[0],
            ));
            resample::systematic_block(&self.cdf, u0, 0, n, &mut self.ancestors);
        } else {
            // No mass anywhere (every ratio underflowed): start again from the births.
            for (j, a) in self.ancestors.iter_mut().enumerate() {
                *a = (j % nb.max(1)) as u32;
            }
        }
        self.next.clear();
        self.next.reserve(n * dim);
        let mut from_birth = 0;
        for &a in &self.ancestors {
            let a = a as usize;
            let src = if a < nb {
                from_birth += 1;
                &self.births[a * dim..(a + 1) * dim]
            } else {
                &self.particles[(a - nb) * dim..(a - nb + 1) * dim]
            };
            self.next.extend_from_slice(src);
        }
        std::mem::swap(&mut self.particles, &mut self.next);
        from_birth
    }

    /// Step 7: the mean of the (equally weighted) continuing particles.
    pub fn mean(&self) -> Vec<f64> {
        let dim = self.dim;
        let n = self.particles.len() / dim.max(1);
        let mut m = vec![0.0; dim];
        for x in self.particles.chunks(dim) {
            for (m, v) in m.iter_mut().zip(x) {
                *m += v;
            }
        }
        m.iter_mut().for_each(|v| *v /= n.max(1) as f64);
        m
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A one-dimensional model for the filter's own tests: births uniform on [0, 1) (the prior,
    /// so the correction is 0), a random-walk-free motion, and a likelihood ratio that the test
    /// sets as a function of x.
    struct Flat<F: Fn(f64) -> f64 + Sync> {
        lr: F,
    }

    impl<F: Fn(f64) -> f64 + Sync> CellModel for Flat<F> {
        type Frame = ();
        type Proposal = ();
        fn dim(&self) -> usize {
            1
        }
        fn log_lr(&self, _: &(), x: &[f64]) -> f64 {
            (self.lr)(x[0])
        }
        fn proposal(&self, _: &()) {}
        fn draw_birth(&self, _: &(), key: DrawKey, x: &mut [f64]) -> f64 {
            let w = draw(
                key.seed,
                key.frame,
                key.track,
                key.particle,
                Stream::InitPosition,
            );
            x[0] = f64::from(uniform(w[0]));
            0.0
        }
        fn propagate(&self, _: DrawKey, _: &mut [f64]) {}
    }

    fn params(nb: usize, nc: usize) -> BernoulliParams {
        BernoulliParams {
            chain: Chain {
                p_birth: 0.05,
                p_death: 0.05,
            },
            n_birth: nb,
            n_cont: nc,
        }
    }

    /// B-5: N_b + N_c weighted particles become N_c, and the share descended from the births
    /// equals M_b within 3 standard errors over 10,000 repetitions (systematic resampling keeps
    /// it within one particle of N_c · M_b every time).
    #[test]
    fn mixture_resampling_keeps_the_birth_share() {
        let model = Flat {
            lr: |x: f64| 3.0 * x,
        };
        let (nb, nc) = (50, 40);
        let mut f = BernoulliFilter::new(params(nb, nc), 1, 11, 0, 0.0);
        f.step(&model, &());
        let reps = 10_000;
        let (mut sum_share, mut sum_mb, mut sum_sq) = (0.0, 0.0, 0.0);
        for r in 0..reps {
            // Each repetition from the same prior particles and existence, a fresh frame index.
            let mut g = f.clone();
            g.frame = 1 + r as u64;
            let s = g.step(&model, &());
            assert_eq!(g.particles().len(), nc);
            let share = s.from_birth as f64 / nc as f64;
            let mb = s.existence.birth_share;
            assert!(
                (share - mb).abs() <= 1.0 / nc as f64 + 1e-12,
                "{share} {mb}"
            );
            sum_share += share;
            sum_mb += mb;
            sum_sq += (share - mb) * (share - mb);
        }
        let n = f64::from(reps);
        let bias = (sum_share - sum_mb) / n;
        let se = (sum_sq / n).sqrt() / n.sqrt();
        assert!(bias.abs() <= 3.0 * se + 1e-12, "bias {bias}, se {se}");
    }

    /// With no information the filter follows the prior and its estimate is the births' mean.
    #[test]
    fn an_uninformative_sensor_gives_the_prior() {
        let model = Flat { lr: |_| 0.0 };
        let mut f = BernoulliFilter::new(params(2000, 2000), 1, 3, 0, 0.0);
        let mut p = 0.0;
        for _ in 0..30 {
            let s = f.step(&model, &());
            p = params(1, 1).chain.predict(p);
            assert!((s.existence.p - p).abs() < 1e-12);
            assert!((s.mean[0] - 0.5).abs() < 0.05, "{:?}", s.mean);
        }
    }

    /// A strong ratio concentrates the particles and raises the existence to near 1.
    #[test]
    fn a_strong_ratio_is_found() {
        let model = Flat {
            lr: |x: f64| 20.0 - 2000.0 * (x - 0.3) * (x - 0.3),
        };
        let mut f = BernoulliFilter::new(params(500, 500), 1, 5, 0, 0.0);
        let mut last = None;
        for _ in 0..5 {
            last = Some(f.step(&model, &()));
        }
        let s = last.expect("five steps ran");
        assert!(s.existence.p > 0.99, "{}", s.existence.p);
        assert!((s.mean[0] - 0.3).abs() < 0.01, "{:?}", s.mean);
    }

    /// The same seed gives the same particles, whatever the thread count.
    #[test]
    fn steps_are_reproducible() {
        let model = Flat {
            lr: |x: f64| 5.0 * x,
        };
        let run = || {
            let mut f = BernoulliFilter::new(params(9000, 9000), 1, 8, 2, 0.1);
            for _ in 0..3 {
                f.step(&model, &());
            }
            f.particles().to_vec()
        };
        let a = run();
        let b = rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .build()
            .expect("a one-thread pool")
            .install(run);
        assert_eq!(a, b);
    }
}
