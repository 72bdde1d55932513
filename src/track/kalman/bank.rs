//! A batched linear Kalman filter bank (seed 002, `../shared/research/gpu-kalman-smoothing.md`,
//! checklist §4 item 1): M independent filters of one model (x_{k+1} = F x_k + ν, Q;
//! z = H x + ω, R), state resident in structure-of-arrays f32 — element e of filter j at
//! `e * M + j`, so a lane (or a GPU thread) per filter reads consecutive words — and one call
//! per stage for all of them. The update is the Joseph form with a Cholesky solve of the
//! innovation covariance. P is read from its upper triangle, and each stage computes the new
//! P's upper triangle a row at a time and mirrors it, so every covariance is symmetric by
//! construction (the GPU kernel, `kernels/kf.cu`, does the same in the same order). The CPU path
//! spreads the filters over the cores in chunks; the f64 reference is
//! [`crate::track::smooth::kalman`].

use rayon::prelude::*;

use crate::math::fastmath;

use crate::track::kalman::tdoa::{TdoaGeometry, Unscented, linearise};
use crate::track::kalman::unscented::update_pair_unscented;

/// The largest state a bank holds.
pub const MAX_N: usize = 6;
/// The largest measurement.
pub const MAX_M: usize = 3;

/// A bank's model: row-major F (n×n), Q (n×n), H (m×n), R (m×m).
#[derive(Debug, Clone, PartialEq)]
pub struct BankModel {
    pub n: usize,
    pub m: usize,
    pub f: Vec<f32>,
    pub q: Vec<f32>,
    pub h: Vec<f32>,
    pub r: Vec<f32>,
}

/// Why a bank cannot be built or stepped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BankError {
    /// The model's sizes are out of range or its matrices have the wrong length.
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
            BankError::Model(s) => write!(f, "Kalman bank model: {s}"),
            BankError::Length { what, want, got } => {
                write!(f, "Kalman bank: {what} has {got} values, needs {want}")
            }
            BankError::Backend(s) => write!(f, "Kalman bank on the GPU: {s}"),
        }
    }
}

/// A bank of filters on one backend, stepped together; states are exchanged in the
/// structure-of-arrays layout (element e of filter j at `e * M + j`).
pub trait FilterBank: Send {
    /// "cpu" or "cuda".
    fn backend(&self) -> &'static str;
    /// Filters in the bank.
    fn filters(&self) -> usize;
    /// Replace every state and covariance: `x` is n × M, `p` n·n × M.
    fn load(&mut self, x: &[f32], p: &[f32]) -> Result<(), BankError>;
    /// Every state and covariance, as [`FilterBank::load`] takes them.
    fn read(&mut self) -> Result<(Vec<f32>, Vec<f32>), BankError>;
    /// Predict every filter.
    fn predict(&mut self) -> Result<(), BankError>;
    /// Update every filter with its measurement (`z`: m × M); returns how many filters found
    /// their innovation covariance not positive definite (left at their prediction).
    fn update(&mut self, z: &[f32]) -> Result<usize, BankError>;
    /// Predict and update in one pass over the state; returns as [`FilterBank::update`].
    fn step(&mut self, z: &[f32]) -> Result<usize, BankError>;
    /// Every filter's state (n × M), without the covariances: a step's estimates.
    fn states(&mut self) -> Result<Vec<f32>, BankError>;
    /// The extended filter's step: predict with the model, then update with each pair of
    /// `geo` in turn, linearised at the state so far ([`crate::track::kalman::tdoa`]); `z` holds
    /// each pair's range difference (pairs × M, metres). Needs the 6-state constant-velocity
    /// layout (position, velocity). Returns how many filters met a singular update (that pair is
    /// skipped, the rest applied).
    fn step_tdoa(&mut self, geo: &TdoaGeometry, z: &[f32]) -> Result<usize, BankError>;
    /// The unscented filter's step: as [`FilterBank::step_tdoa`], but each pair's update
    /// propagates the sigma points of `ut` through the range difference
    /// ([`crate::track::kalman::unscented`]).
    fn step_tdoa_unscented(
        &mut self,
        geo: &TdoaGeometry,
        ut: &Unscented,
        z: &[f32],
    ) -> Result<usize, BankError>;
    /// Bytes moved between host and device so far (0 on the CPU): measurements in, estimates
    /// and counts out, never the covariances unless asked for.
    fn bytes_moved(&self) -> u64 {
        0
    }
}

impl BankModel {
    /// An f64 linear model in the bank's f32 form.
    pub fn from_linear(m: &crate::track::smooth::kalman::LinearModel) -> Self {
        let f32s = |a: &nalgebra::DMatrix<f64>| -> Vec<f32> {
            (0..a.nrows())
                .flat_map(|r| (0..a.ncols()).map(move |c| a[(r, c)] as f32))
                .collect()
        };
        Self {
            n: m.f.nrows(),
            m: m.h.nrows(),
            f: f32s(&m.f),
            q: f32s(&m.q),
            h: f32s(&m.h),
            r: f32s(&m.r),
        }
    }

    /// The model as one array, F, Q, H, R in turn (the GPU kernel's layout).
    pub fn packed(&self) -> Vec<f32> {
        [&self.f, &self.q, &self.h, &self.r]
            .iter()
            .flat_map(|v| v.iter().copied())
            .collect()
    }

    /// Check the sizes and values.
    pub fn check(&self) -> Result<(), BankError> {
        let (n, m) = (self.n, self.m);
        if !(1..=MAX_N).contains(&n) || !(1..=MAX_M.min(n)).contains(&m) {
            return Err(BankError::Model(format!(
                "n = {n}, m = {m} (use 1 <= m <= n <= {MAX_N}, m <= {MAX_M})"
            )));
        }
        for (name, v, len) in [
            ("F", &self.f, n * n),
            ("Q", &self.q, n * n),
            ("H", &self.h, m * n),
            ("R", &self.r, m * m),
        ] {
            if v.len() != len || v.iter().any(|x| !x.is_finite()) {
                return Err(BankError::Model(format!(
                    "{name} needs {len} finite values (has {})",
                    v.len()
                )));
            }
        }
        Ok(())
    }
}

/// M filters' states and covariances, structure of arrays.
#[derive(Debug, Clone)]
pub struct KalmanBank {
    model: BankModel,
    filters: usize,
    /// x: n × M; p: n·n × M (full, kept symmetric).
    x: Vec<f32>,
    p: Vec<f32>,
    /// Filters whose innovation covariance was not positive definite at the last update
    /// (left at their prediction).
    pub singular: usize,
}

/// One filter's state and covariance, loaded from the arrays.
#[derive(Clone, Copy)]
pub(super) struct Local {
    pub(super) x: [f32; MAX_N],
    pub(super) p: [[f32; MAX_N]; MAX_N],
}

/// Filters per parallel chunk (enough work per task to pay for the scheduling).
const CHUNK: usize = 1024;

impl KalmanBank {
    /// A bank of `filters` filters, each starting at `x0` (n values) and `p0` (n×n, row-major).
    pub fn new(
        model: BankModel,
        filters: usize,
        x0: &[f32],
        p0: &[f32],
    ) -> Result<Self, BankError> {
        model.check()?;
        let n = model.n;
        length("x0", x0.len(), n)?;
        length("p0", p0.len(), n * n)?;
        let (x, p) = replicated(x0, p0, filters);
        Ok(Self {
            model,
            filters,
            x,
            p,
            singular: 0,
        })
    }

    pub fn len(&self) -> usize {
        self.filters
    }

    pub fn is_empty(&self) -> bool {
        self.filters == 0
    }

    /// Filter j's state (n values).
    pub fn state(&self, j: usize) -> Vec<f32> {
        (0..self.model.n)
            .map(|e| self.x[e * self.filters + j])
            .collect()
    }

    /// Filter j's covariance (n×n, row-major).
    pub fn covariance(&self, j: usize) -> Vec<f32> {
        let n = self.model.n;
        (0..n * n).map(|e| self.p[e * self.filters + j]).collect()
    }

    /// Set filter j's state and covariance.
    pub fn set(&mut self, j: usize, x: &[f32], p: &[f32]) -> Result<(), BankError> {
        let n = self.model.n;
        length("x", x.len(), n)?;
        length("p", p.len(), n * n)?;
        for (e, v) in x.iter().enumerate() {
            self.x[e * self.filters + j] = *v;
        }
        for (e, v) in p.iter().enumerate() {
            self.p[e * self.filters + j] = *v;
        }
        Ok(())
    }

    /// Predict every filter: x = F x, P = F P Fᵀ + Q.
    pub fn predict(&mut self) {
        let model = self.model.clone();
        self.for_each(|l, _| predict(&model, l));
    }

    /// Update every filter with its measurement: `z` is m × M, structure of arrays (element i
    /// of filter j at `i * M + j`).
    pub fn update(&mut self, z: &[f32]) -> Result<(), BankError> {
        self.measure(z, false)
    }

    /// Predict and update every filter in one pass (the same arithmetic as `predict` then
    /// `update`).
    pub fn step(&mut self, z: &[f32]) -> Result<(), BankError> {
        self.measure(z, true)
    }

    /// Update every filter with its measurement, predicting it first when `predict_first`;
    /// counts the singular updates.
    fn measure(&mut self, z: &[f32], predict_first: bool) -> Result<(), BankError> {
        let (m, filters) = (self.model.m, self.filters);
        length("z", z.len(), m * filters)?;
        let model = self.model.clone();
        let singular = std::sync::atomic::AtomicUsize::new(0);
        self.for_each(|l, j| {
            if predict_first {
                predict(&model, l);
            }
            let zj: [f32; MAX_M] =
                std::array::from_fn(|i| if i < m { z[i * filters + j] } else { 0.0 });
            if !update(&model, l, &zj) {
                singular.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
        });
        self.singular = singular.into_inner();
        Ok(())
    }

    /// The extended filter's step (see [`FilterBank::step_tdoa`]).
    pub fn step_tdoa(&mut self, geo: &TdoaGeometry, z: &[f32]) -> Result<(), BankError> {
        self.tdoa_pairs(geo, z, |pair, l, zi| update_pair(geo, pair, l, zi))
    }

    /// The unscented filter's step (see [`FilterBank::step_tdoa_unscented`]).
    pub fn step_tdoa_unscented(
        &mut self,
        geo: &TdoaGeometry,
        ut: &Unscented,
        z: &[f32],
    ) -> Result<(), BankError> {
        let w = ut.weights(self.model.n)?;
        self.tdoa_pairs(geo, z, |pair, l, zi| {
            update_pair_unscented(geo, pair, &w, l, zi)
        })
    }

    /// Predict every filter, then update it with each pair of `geo` in turn through
    /// `update_pair` (false where singular: that pair skipped, the filter counted).
    fn tdoa_pairs(
        &mut self,
        geo: &TdoaGeometry,
        z: &[f32],
        update_pair: impl Fn((usize, usize), &mut Local, f32) -> bool + Sync,
    ) -> Result<(), BankError> {
        tdoa_ready(self.model.n, geo)?;
        let filters = self.filters;
        length("z", z.len(), geo.pairs.len() * filters)?;
        let model = self.model.clone();
        let singular = std::sync::atomic::AtomicUsize::new(0);
        self.for_each(|l, j| {
            predict(&model, l);
            let mut ok = true;
            for (i, &(a, b)) in geo.pairs.iter().enumerate() {
                ok &= update_pair((a as usize, b as usize), l, z[i * filters + j]);
            }
            if !ok {
                singular.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
        });
        self.singular = singular.into_inner();
        Ok(())
    }

    /// Replace every state and covariance (structure of arrays).
    pub fn load(&mut self, x: &[f32], p: &[f32]) -> Result<(), BankError> {
        let n = self.model.n;
        length("x", x.len(), n * self.filters)?;
        length("p", p.len(), n * n * self.filters)?;
        self.x.copy_from_slice(x);
        self.p.copy_from_slice(p);
        Ok(())
    }

    /// Every state and covariance (structure of arrays).
    pub fn arrays(&self) -> (&[f32], &[f32]) {
        (&self.x, &self.p)
    }

    /// Run `step` on every filter's local copy, in parallel chunks, and store the results.
    fn for_each(&mut self, step: impl Fn(&mut Local, usize) + Sync) {
        let (n, filters) = (self.model.n, self.filters);
        let (x, p) = (&self.x, &self.p);
        let chunks: Vec<(usize, Vec<Local>)> = (0..filters.div_ceil(CHUNK))
            .into_par_iter()
            .map(|c| {
                let range = c * CHUNK..((c + 1) * CHUNK).min(filters);
                let out = range
                    .clone()
                    .map(|j| {
                        let mut l = Local {
                            x: std::array::from_fn(
                                |e| if e < n { x[e * filters + j] } else { 0.0 },
                            ),
                            // P is read from its upper triangle (kept symmetric).
                            p: std::array::from_fn(|r| {
                                std::array::from_fn(|c| {
                                    let (a, b) = (r.min(c), r.max(c));
                                    if b < n {
                                        p[(a * n + b) * filters + j]
                                    } else {
                                        0.0
                                    }
                                })
                            }),
                        };
                        step(&mut l, j);
                        l
                    })
                    .collect();
                (range.start, out)
            })
            .collect();
        for (start, locals) in chunks {
            for (i, l) in locals.iter().enumerate() {
                let j = start + i;
                for e in 0..n {
                    self.x[e * filters + j] = l.x[e];
                }
                for r in 0..n {
                    for c in 0..n {
                        self.p[(r * n + c) * filters + j] = l.p[r][c];
                    }
                }
            }
        }
    }
}

impl FilterBank for KalmanBank {
    fn backend(&self) -> &'static str {
        "cpu"
    }

    fn filters(&self) -> usize {
        self.filters
    }

    fn load(&mut self, x: &[f32], p: &[f32]) -> Result<(), BankError> {
        KalmanBank::load(self, x, p)
    }

    fn read(&mut self) -> Result<(Vec<f32>, Vec<f32>), BankError> {
        Ok((self.x.clone(), self.p.clone()))
    }

    fn predict(&mut self) -> Result<(), BankError> {
        KalmanBank::predict(self);
        Ok(())
    }

    fn update(&mut self, z: &[f32]) -> Result<usize, BankError> {
        KalmanBank::update(self, z)?;
        Ok(self.singular)
    }

    fn step(&mut self, z: &[f32]) -> Result<usize, BankError> {
        KalmanBank::step(self, z)?;
        Ok(self.singular)
    }

    fn states(&mut self) -> Result<Vec<f32>, BankError> {
        Ok(self.x.clone())
    }

    fn step_tdoa(&mut self, geo: &TdoaGeometry, z: &[f32]) -> Result<usize, BankError> {
        KalmanBank::step_tdoa(self, geo, z)?;
        Ok(self.singular)
    }

    fn step_tdoa_unscented(
        &mut self,
        geo: &TdoaGeometry,
        ut: &Unscented,
        z: &[f32],
    ) -> Result<usize, BankError> {
        KalmanBank::step_tdoa_unscented(self, geo, ut, z)?;
        Ok(self.singular)
    }
}

/// Check that a bank of `n` states can take TDOA steps with `geo`: 6 states (position,
/// velocity) and a valid geometry.
pub fn tdoa_ready(n: usize, geo: &TdoaGeometry) -> Result<(), BankError> {
    if n != 6 {
        return Err(BankError::Model(format!(
            "a TDOA step needs the 6-state position-velocity model (this bank has n = {n})"
        )));
    }
    geo.check()
}

/// One pair's scalar update of the extended filter: the range difference and its Jacobian row
/// at the state, the innovation z − h(x), then the Joseph update; false if singular.
fn update_pair(geo: &TdoaGeometry, (a, b): (usize, usize), l: &mut Local, z: f32) -> bool {
    let mut h = [0.0f32; 6];
    let rd = linearise(&geo.sensors[a], &geo.sensors[b], &l.x, &mut h);
    let r = [geo.r];
    let lin = Linear {
        n: 6,
        m: 1,
        h: &h,
        r: &r,
    };
    let mut innov = [0.0f32; MAX_M];
    innov[0] = z - rd;
    update_innov(lin, l, &innov)
}

/// A bank's starting arrays: every filter at `x0` (n values) and `p0` (n×n, row-major), in the
/// structure-of-arrays layout.
pub fn replicated(x0: &[f32], p0: &[f32], filters: usize) -> (Vec<f32>, Vec<f32>) {
    let spread = |v: &[f32]| -> Vec<f32> {
        v.iter()
            .flat_map(|e| std::iter::repeat_n(*e, filters))
            .collect()
    };
    (spread(x0), spread(p0))
}

/// Check a slice's length.
pub fn length(what: &'static str, got: usize, want: usize) -> Result<(), BankError> {
    if got == want {
        Ok(())
    } else {
        Err(BankError::Length { what, want, got })
    }
}

/// x = F x, P = F P Fᵀ + Q: a row of F P at a time, then that row of the new P's upper
/// triangle, mirrored below (the kernel's order, so that the two agree bit for bit).
pub(super) fn predict(model: &BankModel, l: &mut Local) {
    let n = model.n;
    let f = |r: usize, c: usize| model.f[r * n + c];
    let mut x = [0.0f32; MAX_N];
    for (r, xr) in x.iter_mut().enumerate().take(n) {
        *xr = (0..n).map(|c| f(r, c) * l.x[c]).sum();
    }
    let mut p = [[0.0f32; MAX_N]; MAX_N];
    for r in 0..n {
        let fp: [f32; MAX_N] = std::array::from_fn(|c| {
            if c < n {
                (0..n).map(|k| f(r, k) * l.p[k][c]).sum()
            } else {
                0.0
            }
        });
        for c in r..n {
            p[r][c] = (0..n).map(|k| fp[k] * f(c, k)).sum::<f32>() + model.q[r * n + c];
            p[c][r] = p[r][c];
        }
    }
    l.x = x;
    l.p = p;
}

/// A measurement's model for one update: its size m, H (m×n, row-major) and R (m×m).
#[derive(Clone, Copy)]
pub(super) struct Linear<'a> {
    pub(super) n: usize,
    pub(super) m: usize,
    pub(super) h: &'a [f32],
    pub(super) r: &'a [f32],
}

impl<'a> Linear<'a> {
    pub(super) fn of(model: &'a BankModel) -> Self {
        Self {
            n: model.n,
            m: model.m,
            h: &model.h,
            r: &model.r,
        }
    }
}

/// Row c of A = I − W H.
fn a_row(model: Linear, w: &[[f32; MAX_M]; MAX_N], c: usize) -> [f32; MAX_N] {
    let (n, m) = (model.n, model.m);
    std::array::from_fn(|k| {
        if k >= n {
            return 0.0;
        }
        let wh: f32 = (0..m).map(|i| w[c][i] * model.h[i * n + k]).sum();
        let one = if c == k { 1.0 } else { 0.0 };
        one - wh
    })
}

/// The linear update with measurement z: the innovation z − H x, then [`update_innov`].
fn update(model: &BankModel, l: &mut Local, z: &[f32; MAX_M]) -> bool {
    update_ll(model, l, z, None)
}

/// [`update`], also writing the innovation's log-likelihood into `ll` when given.
pub(super) fn update_ll(
    model: &BankModel,
    l: &mut Local,
    z: &[f32; MAX_M],
    ll: Option<&mut f32>,
) -> bool {
    let (n, m) = (model.n, model.m);
    let mut innov = [0.0f32; MAX_M];
    for (i, v) in innov.iter_mut().enumerate().take(m) {
        *v = z[i] - (0..n).map(|k| model.h[i * n + k] * l.x[k]).sum::<f32>();
    }
    update_innov_ll(Linear::of(model), l, &innov, ll)
}

/// The Joseph-form update with innovation `innov`, P = A P Aᵀ + W R Wᵀ with A = I − W H, its
/// upper triangle a row at a time and mirrored below; false (state left as it was) where the
/// innovation covariance is not positive definite.
pub(super) fn update_innov(model: Linear, l: &mut Local, innov: &[f32; MAX_M]) -> bool {
    update_innov_ll(model, l, innov, None)
}

/// [`update_innov`], also writing the innovation's log-likelihood ln N(ν; 0, S) into `ll`
/// when given (from S's Cholesky factor: −½(|L⁻¹ν|² + 2 Σ ln Lᵢᵢ + m ln 2π)).
pub(super) fn update_innov_ll(
    model: Linear,
    l: &mut Local,
    innov: &[f32; MAX_M],
    ll: Option<&mut f32>,
) -> bool {
    let (n, m) = (model.n, model.m);
    let h = |r: usize, c: usize| model.h[r * n + c];
    // PHᵀ (n×m) and S = H P Hᵀ + R (m×m).
    let mut pht = [[0.0f32; MAX_M]; MAX_N];
    for r in 0..n {
        for c in 0..m {
            pht[r][c] = (0..n).map(|k| l.p[r][k] * h(c, k)).sum();
        }
    }
    let mut s = [[0.0f32; MAX_M]; MAX_M];
    for r in 0..m {
        for c in 0..m {
            s[r][c] = (0..n).map(|k| h(r, k) * pht[k][c]).sum::<f32>() + model.r[r * m + c];
        }
    }
    let Some(chol) = cholesky(&s, m) else {
        return false;
    };
    if let Some(ll) = ll {
        *ll = log_likelihood(&chol, innov, m);
    }
    // W = P Hᵀ S⁻¹: each row w solves S wᵀ = (P Hᵀ)ᵀ's column.
    let mut w = [[0.0f32; MAX_M]; MAX_N];
    for r in 0..n {
        w[r] = chol_solve(&chol, &pht[r], m);
    }
    for r in 0..n {
        l.x[r] += (0..m).map(|i| w[r][i] * innov[i]).sum::<f32>();
    }
    let mut p = [[0.0f32; MAX_N]; MAX_N];
    for r in 0..n {
        let ar = a_row(model, &w, r);
        let ap: [f32; MAX_N] = std::array::from_fn(|c| {
            if c < n {
                (0..n).map(|k| ar[k] * l.p[k][c]).sum()
            } else {
                0.0
            }
        });
        let wr: [f32; MAX_M] = std::array::from_fn(|c| {
            if c < m {
                (0..m).map(|k| w[r][k] * model.r[k * m + c]).sum()
            } else {
                0.0
            }
        });
        for c in r..n {
            let ac = a_row(model, &w, c);
            let apat: f32 = (0..n).map(|k| ap[k] * ac[k]).sum();
            let wrw: f32 = (0..m).map(|k| wr[k] * w[c][k]).sum();
            p[r][c] = apat + wrw;
            p[c][r] = p[r][c];
        }
    }
    l.p = p;
    true
}

/// The lower Cholesky factor of the leading m×m block of s (None unless positive definite).
pub(super) fn cholesky<const D: usize>(s: &[[f32; D]; D], m: usize) -> Option<[[f32; D]; D]> {
    let mut l = [[0.0f32; D]; D];
    for r in 0..m {
        for c in 0..=r {
            let sum: f32 = (0..c).map(|k| l[r][k] * l[c][k]).sum();
            if r == c {
                let d = s[r][r] - sum;
                if !(d > 0.0) {
                    return None;
                }
                l[r][c] = d.sqrt();
            } else {
                l[r][c] = (s[r][c] - sum) / l[c][c];
            }
        }
    }
    Some(l)
}

/// ln N(ν; 0, L Lᵀ) for the m-vector ν: a forward substitution y = L⁻¹ν, then
/// −½(|y|² + 2 Σ ln Lᵢᵢ + m ln 2π) (the kernel's order, and its ln: [`fastmath::ln`]).
fn log_likelihood(l: &[[f32; MAX_M]; MAX_M], nu: &[f32; MAX_M], m: usize) -> f32 {
    let mut y = [0.0f32; MAX_M];
    let mut quad = 0.0f32;
    let mut log_diag = 0.0f32;
    for r in 0..m {
        let mut acc = 0.0f32;
        for k in 0..r {
            acc += l[r][k] * y[k];
        }
        y[r] = (nu[r] - acc) / l[r][r];
        quad += y[r] * y[r];
        log_diag += fastmath::ln(l[r][r]);
    }
    -0.5 * (quad + 2.0 * log_diag + m as f32 * LN_2PI)
}

/// ln 2π.
const LN_2PI: f32 = 1.837_877_1;

/// Solve (L Lᵀ) y = b.
fn chol_solve(l: &[[f32; MAX_M]; MAX_M], b: &[f32; MAX_M], m: usize) -> [f32; MAX_M] {
    let mut y = [0.0f32; MAX_M];
    for r in 0..m {
        y[r] = (b[r] - (0..r).map(|k| l[r][k] * y[k]).sum::<f32>()) / l[r][r];
    }
    for r in (0..m).rev() {
        y[r] = (y[r] - (r + 1..m).map(|k| l[k][r] * y[k]).sum::<f32>()) / l[r][r];
    }
    y
}

#[cfg(test)]
#[path = "bank_tests.rs"]
mod tests;
