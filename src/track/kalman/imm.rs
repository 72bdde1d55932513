//! The interacting multiple model (IMM) estimator (seed 001, `../shared/research/mfa-imm.md`
//! §2.7; Blom and Bar-Shalom 1988): M linear-Gaussian models of one state, a Markov matrix Π of
//! mode switches, and per step the mixing of the mode-matched estimates, one Kalman predict and
//! Joseph-form update per model, the mode probabilities from the innovations' likelihoods (in
//! the log domain), and the combined estimate. f64, one track: the reference a batched bank
//! mirrors. The models here: constant velocity and the coordinated turn at a known rate (a
//! linear model for a fixed rate; a left and a right turn make the usual three-model set).

use nalgebra::{DMatrix, DVector};

use crate::track::smooth::kalman::{LinearModel, symmetric, update_with_innovation};

/// Why an IMM cannot be built or stepped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImmError(pub String);

impl std::fmt::Display for ImmError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "IMM: {}", self.0)
    }
}

/// The models and their Markov matrix: `transition[(i, j)]` = P(mode j now | mode i before),
/// rows summing to one.
#[derive(Debug, Clone, PartialEq)]
pub struct Imm {
    pub models: Vec<LinearModel>,
    pub transition: DMatrix<f64>,
}

/// One track's IMM state: each mode's estimate and the mode probabilities.
#[derive(Debug, Clone, PartialEq)]
pub struct ImmState {
    pub x: Vec<DVector<f64>>,
    pub p: Vec<DMatrix<f64>>,
    pub mu: DVector<f64>,
}

/// What a step gives besides the new state: the combined estimate, and the measurement's
/// log-likelihood under the prediction, ln Σ_j c̄_j N(z; ẑ_j, S_j) (the association cost's).
#[derive(Debug, Clone, PartialEq)]
pub struct ImmOutput {
    pub x: DVector<f64>,
    pub p: DMatrix<f64>,
    pub log_likelihood: f64,
}

impl Imm {
    /// Check that the models share their state and measurement sizes and that `transition`
    /// is a Markov matrix of their number.
    pub fn new(models: Vec<LinearModel>, transition: DMatrix<f64>) -> Result<Self, ImmError> {
        let Some(first) = models.first() else {
            return Err(ImmError("no models".into()));
        };
        let (n, m) = (first.f.nrows(), first.h.nrows());
        for (i, md) in models.iter().enumerate() {
            let shapes = [
                (md.f.shape(), (n, n)),
                (md.q.shape(), (n, n)),
                (md.h.shape(), (m, n)),
                (md.r.shape(), (m, m)),
            ];
            if shapes.iter().any(|(got, want)| got != want) {
                return Err(ImmError(format!(
                    "model {i}'s matrices do not match model 0's sizes (state {n}, measurement {m})"
                )));
            }
        }
        let k = models.len();
        if transition.shape() != (k, k) {
            return Err(ImmError(format!(
                "the Markov matrix is {:?} for {k} models",
                transition.shape()
            )));
        }
        for (i, row) in transition.row_iter().enumerate() {
            let sum: f64 = row.iter().sum();
            if row.iter().any(|v| !(0.0..=1.0).contains(v)) || (sum - 1.0).abs() > 1e-9 {
                return Err(ImmError(format!(
                    "row {i} of the Markov matrix is not a distribution (sum {sum})"
                )));
            }
        }
        Ok(Self { models, transition })
    }

    /// The Markov matrix that keeps each mode for `sojourn_s[i]` seconds on average at steps of
    /// `dt` (π_ii = 1 − dt / τ_i, the rest spread evenly over the other modes).
    pub fn sojourn_matrix(sojourn_s: &[f64], dt: f64) -> DMatrix<f64> {
        let k = sojourn_s.len();
        DMatrix::from_fn(k, k, |i, j| {
            let stay = (1.0 - dt / sojourn_s[i].max(dt)).clamp(0.0, 1.0);
            if k == 1 {
                1.0
            } else if i == j {
                stay
            } else {
                (1.0 - stay) / (k - 1) as f64
            }
        })
    }

    /// Every mode at (x0, p0), with mode probabilities `mu0`.
    pub fn init(&self, x0: &DVector<f64>, p0: &DMatrix<f64>, mu0: &[f64]) -> ImmState {
        let k = self.models.len();
        let total: f64 = mu0.iter().take(k).sum();
        let mu = DVector::from_fn(k, |j, _| {
            mu0.get(j)
                .copied()
                .filter(|_| total > 0.0)
                .map_or(1.0 / k as f64, |m| m / total)
        });
        ImmState {
            x: vec![x0.clone(); k],
            p: vec![p0.clone(); k],
            mu,
        }
    }

    /// One cycle: mix, predict and update each mode with `z`, weigh the modes, combine. None
    /// (the state unchanged) where an innovation covariance is not positive definite.
    pub fn step(&self, st: &mut ImmState, z: &DVector<f64>) -> Option<ImmOutput> {
        let k = self.models.len();
        // 1. Predicted mode probabilities and mixing weights.
        let c_bar: Vec<f64> = (0..k)
            .map(|j| (0..k).map(|i| self.transition[(i, j)] * st.mu[i]).sum())
            .collect();
        let mut xs = Vec::with_capacity(k);
        let mut ps = Vec::with_capacity(k);
        let mut log_l = Vec::with_capacity(k);
        for (j, model) in self.models.iter().enumerate() {
            // 2. Mixed initial condition of mode j.
            let w: Vec<f64> = (0..k)
                .map(|i| {
                    if c_bar[j] > 0.0 {
                        self.transition[(i, j)] * st.mu[i] / c_bar[j]
                    } else {
                        f64::from(u8::from(i == j))
                    }
                })
                .collect();
            let (x0, p0) = moments(&st.x, &st.p, &w);
            // 3. Mode-matched predict and update (as the plain filter's).
            let xp = &model.f * &x0;
            let pp = &model.f * &p0 * model.f.transpose() + &model.q;
            let u = update_with_innovation(model, &xp, &pp, z)?;
            log_l.push(log_gauss(&u.innovation, &u.s_chol));
            xs.push(u.x);
            ps.push(u.p);
        }
        // 4. Mode probabilities, ∝ Λ_j c̄_j, in the log domain.
        let terms: Vec<f64> = (0..k)
            .map(|j| {
                if c_bar[j] > 0.0 {
                    log_l[j] + c_bar[j].ln()
                } else {
                    f64::NEG_INFINITY
                }
            })
            .collect();
        let top = terms.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        if !top.is_finite() {
            return None;
        }
        let sum: f64 = terms.iter().map(|t| (t - top).exp()).sum();
        let mu = DVector::from_fn(k, |j, _| (terms[j] - top).exp() / sum);
        // 5. Combined output.
        let weights: Vec<f64> = mu.iter().copied().collect();
        let (x, p) = moments(&xs, &ps, &weights);
        st.x = xs;
        st.p = ps;
        st.mu = mu;
        Some(ImmOutput {
            x,
            p,
            log_likelihood: top + sum.ln(),
        })
    }

    /// The combined estimate of a state (Σ μ_j x_j and its spread).
    pub fn combined(&self, st: &ImmState) -> (DVector<f64>, DMatrix<f64>) {
        let w: Vec<f64> = st.mu.iter().copied().collect();
        moments(&st.x, &st.p, &w)
    }
}

/// The mean and covariance of a Gaussian mixture: Σ w_i x_i and Σ w_i [P_i + (x_i − x)(·)ᵀ].
fn moments(xs: &[DVector<f64>], ps: &[DMatrix<f64>], w: &[f64]) -> (DVector<f64>, DMatrix<f64>) {
    let n = xs[0].len();
    let mut x = DVector::zeros(n);
    for (xi, wi) in xs.iter().zip(w) {
        x += xi * *wi;
    }
    let mut p = DMatrix::zeros(n, n);
    for ((xi, pi), wi) in xs.iter().zip(ps).zip(w) {
        let d = xi - &x;
        p += (pi + &d * d.transpose()) * *wi;
    }
    (x, symmetric(p))
}

/// ln N(ν; 0, S) with S = L Lᵀ.
fn log_gauss(nu: &DVector<f64>, chol: &nalgebra::linalg::Cholesky<f64, nalgebra::Dyn>) -> f64 {
    let m = nu.len() as f64;
    let maha = nu.dot(&chol.solve(nu));
    let log_det: f64 = 2.0 * chol.l().diagonal().iter().map(|d| d.ln()).sum::<f64>();
    -0.5 * (maha + log_det + m * std::f64::consts::TAU.ln())
}

/// A coordinated turn in the horizontal plane at a known rate `omega` (rad/s, positive turns
/// left), with the state of [`LinearModel::constant_velocity`] for two axes ([x, y, vx, vy]),
/// white-noise acceleration of spectral density `q` and positions measured with variance `r`.
/// `omega` = 0 is constant velocity.
pub fn coordinated_turn(dt: f64, omega: f64, q: f64, r: f64) -> LinearModel {
    let mut m = LinearModel::constant_velocity(2, dt, q, r);
    if omega.abs() < 1e-12 {
        return m;
    }
    let (s, c) = (omega * dt).sin_cos();
    let f = &mut m.f;
    // x += (s vx − (1 − c) vy) / ω; y += ((1 − c) vx + s vy) / ω; v turns by ω dt.
    f[(0, 2)] = s / omega;
    f[(0, 3)] = -(1.0 - c) / omega;
    f[(1, 2)] = (1.0 - c) / omega;
    f[(1, 3)] = s / omega;
    f[(2, 2)] = c;
    f[(2, 3)] = -s;
    f[(3, 2)] = s;
    f[(3, 3)] = c;
    m
}

#[cfg(test)]
#[path = "imm_tests.rs"]
mod tests;
