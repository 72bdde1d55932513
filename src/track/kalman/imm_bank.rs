//! The IMM estimator over the batched bank (seed 001 §2.7 on seed 002's bank): T tracks, each
//! with r ≤ [`MAX_MODES`] linear models of one state and measurement size and a Markov matrix Π,
//! stepped together in f32 structure of arrays. Per track and step: the predicted mode
//! probabilities c̄ⱼ = Σᵢ πᵢⱼ μᵢ, each mode's mixed start (the moments of the old mode estimates
//! under πᵢⱼ μᵢ / c̄ⱼ), the bank's predict and Joseph update with the innovation's
//! log-likelihood, the new mode probabilities ∝ c̄ⱼ Λⱼ in the log domain, and the combined
//! estimate. A track where any mode's innovation covariance is not positive definite keeps its
//! state (as the f64 reference, [`crate::track::kalman::imm::Imm::step`]) and is counted. Mode j
//! of track t: element e of x at `(j·n + e)·T + t`, of P at `(j·n·n + e)·T + t`, μ at `j·T + t`.
//! The GPU kernel (`kernels/imm.cu`) does the same operations in the same order, with ln and exp
//! from the same polynomials ([`crate::math::fastmath`]), so the twins agree bit for bit.

use rayon::prelude::*;

use crate::math::fastmath;

use crate::track::kalman::bank::{
    BankError, BankModel, Local, MAX_M, MAX_N, length, predict, update_ll,
};
use crate::track::kalman::imm::Imm;

/// Every mode's states (r·n × T), covariances (r·n·n × T) and probabilities (r × T).
pub type ImmArrays = (Vec<f32>, Vec<f32>, Vec<f32>);

/// A track after a step: its modes, its combined estimate, and whether its update was regular.
type Stepped = (Modes, Local, bool);

/// The most models an IMM bank takes.
pub const MAX_MODES: usize = 4;

/// The models (one size) and the Markov matrix (r × r, row-major: πᵢⱼ = P(mode j | mode i)).
#[derive(Debug, Clone, PartialEq)]
pub struct ImmBankModel {
    pub models: Vec<BankModel>,
    pub transition: Vec<f32>,
}

impl ImmBankModel {
    /// The f64 estimator's models and Markov matrix, in f32.
    pub fn from_imm(imm: &Imm) -> Self {
        let t = &imm.transition;
        Self {
            models: imm.models.iter().map(BankModel::from_linear).collect(),
            transition: (0..t.nrows())
                .flat_map(|r| (0..t.ncols()).map(move |c| t[(r, c)] as f32))
                .collect(),
        }
    }

    /// Models in the set.
    pub fn modes(&self) -> usize {
        self.models.len()
    }

    /// State size (every model's).
    pub fn n(&self) -> usize {
        self.models.first().map_or(0, |m| m.n)
    }

    /// Measurement size (every model's).
    pub fn m(&self) -> usize {
        self.models.first().map_or(0, |m| m.m)
    }

    /// Check: 1 to [`MAX_MODES`] valid models of one size, and Π's rows distributions.
    pub fn check(&self) -> Result<(), BankError> {
        let r = self.modes();
        if !(1..=MAX_MODES).contains(&r) {
            return Err(BankError::Model(format!(
                "{r} IMM models (use 1 to {MAX_MODES})"
            )));
        }
        for (i, m) in self.models.iter().enumerate() {
            m.check()
                .map_err(|e| BankError::Model(format!("IMM model {i}: {e}")))?;
            if (m.n, m.m) != (self.n(), self.m()) {
                return Err(BankError::Model(format!(
                    "IMM model {i} has n = {}, m = {} where model 0 has {}, {} (use one size)",
                    m.n,
                    m.m,
                    self.n(),
                    self.m()
                )));
            }
        }
        length("Markov matrix", self.transition.len(), r * r)?;
        for (i, row) in self.transition.chunks(r).enumerate() {
            let sum: f32 = row.iter().sum();
            if row.iter().any(|v| !(0.0..=1.0).contains(v)) || (sum - 1.0).abs() > 1e-5 {
                return Err(BankError::Model(format!(
                    "row {i} of the Markov matrix is not a distribution (sum {sum}; use \
                     values in [0, 1] summing to 1)"
                )));
            }
        }
        Ok(())
    }

    /// The GPU kernel's layout: each model's F, Q, H, R in turn, then Π.
    pub fn packed(&self) -> Vec<f32> {
        let mut v: Vec<f32> = self.models.iter().flat_map(|m| m.packed()).collect();
        v.extend_from_slice(&self.transition);
        v
    }
}

/// T tracks' IMM states on one backend, stepped together.
pub trait ImmFilterBank: Send {
    /// "cpu" or "cuda".
    fn backend(&self) -> &'static str;
    /// Tracks in the bank.
    fn tracks(&self) -> usize;
    /// Replace every mode's state and covariance and the mode probabilities (the layout of the
    /// module's header: x r·n × T, p r·n·n × T, mu r × T).
    fn load(&mut self, x: &[f32], p: &[f32], mu: &[f32]) -> Result<(), BankError>;
    /// Every mode's state and covariance and the mode probabilities, as `load` takes them.
    fn read(&mut self) -> Result<ImmArrays, BankError>;
    /// One IMM cycle of every track with its measurement (`z`: m × T); returns how many tracks
    /// met a singular update (left as they were).
    fn step(&mut self, z: &[f32]) -> Result<usize, BankError>;
    /// The last step's combined estimates (n × T) and mode probabilities (r × T): what a
    /// tracker reads each frame, without the covariances.
    fn estimates(&mut self) -> Result<(Vec<f32>, Vec<f32>), BankError>;
    /// The last step's combined covariances (n·n × T).
    fn covariances(&mut self) -> Result<Vec<f32>, BankError>;
}

/// The CPU bank (the twin of `kernels/imm.cu`).
#[derive(Debug, Clone)]
pub struct ImmBank {
    model: ImmBankModel,
    tracks: usize,
    x: Vec<f32>,
    p: Vec<f32>,
    mu: Vec<f32>,
    /// The combined estimate of the last step (n × T, n·n × T).
    xc: Vec<f32>,
    pc: Vec<f32>,
    pub singular: usize,
}

/// One track's modes, loaded from the arrays.
#[derive(Clone, Copy)]
struct Modes {
    est: [Local; MAX_MODES],
    mu: [f32; MAX_MODES],
}

/// Tracks per parallel chunk.
const CHUNK: usize = 256;

impl ImmBank {
    /// `tracks` tracks, every mode at `x0` (n) and `p0` (n×n), mode probabilities `mu0` (r).
    pub fn new(
        model: ImmBankModel,
        tracks: usize,
        x0: &[f32],
        p0: &[f32],
        mu0: &[f32],
    ) -> Result<Self, BankError> {
        let (x, p, mu) = start_arrays(&model, tracks, x0, p0, mu0)?;
        let n = model.n();
        Ok(Self {
            xc: vec![0.0; n * tracks],
            pc: vec![0.0; n * n * tracks],
            model,
            tracks,
            x,
            p,
            mu,
            singular: 0,
        })
    }

    /// One IMM cycle of every track (see [`ImmFilterBank::step`]).
    pub fn step(&mut self, z: &[f32]) -> Result<(), BankError> {
        let (n, m, r, t) = (
            self.model.n(),
            self.model.m(),
            self.model.modes(),
            self.tracks,
        );
        length("z", z.len(), m * t)?;
        let model = &self.model;
        let (x, p, mu) = (&self.x, &self.p, &self.mu);
        let results: Vec<(usize, Vec<Stepped>)> = (0..t.div_ceil(CHUNK))
            .into_par_iter()
            .map(|c| {
                let range = c * CHUNK..((c + 1) * CHUNK).min(t);
                let out = range
                    .clone()
                    .map(|j| {
                        let mut modes = load_modes(x, p, mu, n, r, t, j);
                        let zj: [f32; MAX_M] =
                            std::array::from_fn(|i| if i < m { z[i * t + j] } else { 0.0 });
                        match imm_cycle(model, &modes, &zj) {
                            Some((next, combined)) => {
                                modes = next;
                                (modes, combined, true)
                            }
                            None => (modes, mixture(&modes.est, &modes.mu, r, n), false),
                        }
                    })
                    .collect();
                (range.start, out)
            })
            .collect();
        let mut singular = 0;
        for (start, out) in results {
            for (i, (modes, combined, ok)) in out.iter().enumerate() {
                let j = start + i;
                singular += usize::from(!ok);
                store_modes(self, modes, j);
                for e in 0..n {
                    self.xc[e * t + j] = combined.x[e];
                }
                for e in 0..n * n {
                    self.pc[e * t + j] = combined.p[e / n][e % n];
                }
            }
        }
        self.singular = singular;
        Ok(())
    }
}

/// A bank's starting arrays (the module header's layout): every track's every mode at (x0,
/// p0), mode probabilities mu0 (normalised); the model checked first. Both backends start so.
pub fn start_arrays(
    model: &ImmBankModel,
    tracks: usize,
    x0: &[f32],
    p0: &[f32],
    mu0: &[f32],
) -> Result<ImmArrays, BankError> {
    model.check()?;
    let (n, r) = (model.n(), model.modes());
    length("x0", x0.len(), n)?;
    length("p0", p0.len(), n * n)?;
    length("mu0", mu0.len(), r)?;
    let total: f32 = mu0.iter().sum();
    if !(total > 0.0) || mu0.iter().any(|v| !(*v >= 0.0)) {
        return Err(BankError::Model(format!(
            "starting mode probabilities {mu0:?} (use non-negative values, not all 0)"
        )));
    }
    let xm: Vec<f32> = (0..r).flat_map(|_| x0.iter().copied()).collect();
    let pm: Vec<f32> = (0..r).flat_map(|_| p0.iter().copied()).collect();
    let mu: Vec<f32> = mu0.iter().map(|v| v / total).collect();
    let (x, p) = crate::track::kalman::bank::replicated(&xm, &pm, tracks);
    let (mu, _) = crate::track::kalman::bank::replicated(&mu, &[], tracks);
    Ok((x, p, mu))
}

/// Track j's modes from the arrays (P from its upper triangle).
fn load_modes(x: &[f32], p: &[f32], mu: &[f32], n: usize, r: usize, t: usize, j: usize) -> Modes {
    Modes {
        est: std::array::from_fn(|k| {
            if k >= r {
                return Local {
                    x: [0.0; MAX_N],
                    p: [[0.0; MAX_N]; MAX_N],
                };
            }
            Local {
                x: std::array::from_fn(|e| if e < n { x[(k * n + e) * t + j] } else { 0.0 }),
                p: std::array::from_fn(|a| {
                    std::array::from_fn(|b| {
                        let (lo, hi) = (a.min(b), a.max(b));
                        if hi < n {
                            p[(k * n * n + lo * n + hi) * t + j]
                        } else {
                            0.0
                        }
                    })
                }),
            }
        }),
        mu: std::array::from_fn(|k| if k < r { mu[k * t + j] } else { 0.0 }),
    }
}

/// Track j's modes into the bank's arrays.
fn store_modes(bank: &mut ImmBank, modes: &Modes, j: usize) {
    let (n, r, t) = (bank.model.n(), bank.model.modes(), bank.tracks);
    for k in 0..r {
        for e in 0..n {
            bank.x[(k * n + e) * t + j] = modes.est[k].x[e];
        }
        for e in 0..n * n {
            bank.p[(k * n * n + e) * t + j] = modes.est[k].p[e / n][e % n];
        }
        bank.mu[k * t + j] = modes.mu[k];
    }
}

/// One IMM cycle of one track: the new modes and the combined estimate, or None where a mode's
/// update is singular.
fn imm_cycle(model: &ImmBankModel, old: &Modes, z: &[f32; MAX_M]) -> Option<(Modes, Local)> {
    let (n, r) = (model.n(), model.modes());
    let pi = |i: usize, j: usize| model.transition[i * r + j];
    let mut c_bar = [0.0f32; MAX_MODES];
    for (j, c) in c_bar.iter_mut().enumerate().take(r) {
        for i in 0..r {
            *c += pi(i, j) * old.mu[i];
        }
    }
    let mut next = *old;
    let mut ll = [0.0f32; MAX_MODES];
    for j in 0..r {
        let w: [f32; MAX_MODES] = std::array::from_fn(|i| {
            if i >= r {
                0.0
            } else if c_bar[j] > 0.0 {
                pi(i, j) * old.mu[i] / c_bar[j]
            } else if i == j {
                1.0
            } else {
                0.0
            }
        });
        let mut est = mixture(&old.est, &w, r, n);
        predict(&model.models[j], &mut est);
        if !update_ll(&model.models[j], &mut est, z, Some(&mut ll[j])) {
            return None;
        }
        next.est[j] = est;
    }
    next.mu = mode_probabilities(&c_bar, &ll, r)?;
    let combined = mixture(&next.est, &next.mu, r, n);
    Some((next, combined))
}

/// μⱼ ∝ c̄ⱼ Λⱼ, in the log domain (ln c̄ⱼ + ln Λⱼ less the largest, exponentiated and
/// normalised); None where no mode has a finite weight.
fn mode_probabilities(
    c_bar: &[f32; MAX_MODES],
    ll: &[f32; MAX_MODES],
    r: usize,
) -> Option<[f32; MAX_MODES]> {
    let mut terms = [f32::NEG_INFINITY; MAX_MODES];
    let mut top = f32::NEG_INFINITY;
    for j in 0..r {
        if c_bar[j] > 0.0 {
            terms[j] = ll[j] + fastmath::ln(c_bar[j]);
        }
        top = top.max(terms[j]);
    }
    if !top.is_finite() {
        return None;
    }
    let mut e = [0.0f32; MAX_MODES];
    let mut sum = 0.0f32;
    for j in 0..r {
        // A mode no other can reach (c̄ⱼ = 0) gets 0, not the polynomial's floor.
        e[j] = if c_bar[j] > 0.0 {
            fastmath::exp(terms[j] - top)
        } else {
            0.0
        };
        sum += e[j];
    }
    Some(std::array::from_fn(
        |j| if j < r { e[j] / sum } else { 0.0 },
    ))
}

/// The mean and covariance of a Gaussian mixture: x = Σ wᵢ xᵢ, P = Σ wᵢ [Pᵢ + dᵢ dᵢᵀ] with
/// dᵢ = xᵢ − x, P's upper triangle computed and mirrored (with one component of weight 1,
/// exactly that component).
fn mixture(est: &[Local; MAX_MODES], w: &[f32; MAX_MODES], r: usize, n: usize) -> Local {
    let mut out = Local {
        x: [0.0; MAX_N],
        p: [[0.0; MAX_N]; MAX_N],
    };
    for e in 0..n {
        let mut acc = 0.0f32;
        for i in 0..r {
            acc += w[i] * est[i].x[e];
        }
        out.x[e] = acc;
    }
    for a in 0..n {
        for b in a..n {
            let mut acc = 0.0f32;
            for i in 0..r {
                let (da, db) = (est[i].x[a] - out.x[a], est[i].x[b] - out.x[b]);
                acc += w[i] * (est[i].p[a][b] + da * db);
            }
            out.p[a][b] = acc;
            out.p[b][a] = acc;
        }
    }
    out
}

impl ImmFilterBank for ImmBank {
    fn backend(&self) -> &'static str {
        "cpu"
    }

    fn tracks(&self) -> usize {
        self.tracks
    }

    fn load(&mut self, x: &[f32], p: &[f32], mu: &[f32]) -> Result<(), BankError> {
        let (n, r, t) = (self.model.n(), self.model.modes(), self.tracks);
        length("x", x.len(), r * n * t)?;
        length("p", p.len(), r * n * n * t)?;
        length("mu", mu.len(), r * t)?;
        self.x.copy_from_slice(x);
        self.p.copy_from_slice(p);
        self.mu.copy_from_slice(mu);
        Ok(())
    }

    fn read(&mut self) -> Result<ImmArrays, BankError> {
        Ok((self.x.clone(), self.p.clone(), self.mu.clone()))
    }

    fn step(&mut self, z: &[f32]) -> Result<usize, BankError> {
        ImmBank::step(self, z)?;
        Ok(self.singular)
    }

    fn estimates(&mut self) -> Result<(Vec<f32>, Vec<f32>), BankError> {
        Ok((self.xc.clone(), self.mu.clone()))
    }

    fn covariances(&mut self) -> Result<Vec<f32>, BankError> {
        Ok(self.pc.clone())
    }
}

#[cfg(test)]
#[path = "imm_bank_tests.rs"]
mod tests;
