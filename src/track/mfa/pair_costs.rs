//! The batched cost of every (track, measurement) pair of one frame (seed 001 checklist C10):
//! the corrected NLLR of a track taking a measurement ([`super::cost::nllr`] of one hit),
//! forbidden (+∞) outside the χ² gate, in f64. The GPU kernel (`kernels/mfa.cu`,
//! `mfa_pair_costs`) does the same operations in the same order, one thread per pair; these are
//! the 2-D assignment's costs (and the first list's of a window).

use crate::track::mfa::cost::ListModel;

/// The largest state and measurement.
pub const MAX_N: usize = 6;
pub const MAX_M: usize = 3;

/// One frame's tracks and measurements, row-major f64.
#[derive(Debug, Clone, PartialEq)]
pub struct PairCostInput {
    /// State and measurement sizes (n ≤ 6, m ≤ 3).
    pub n: usize,
    pub m: usize,
    /// H (m × n) and R (m × m).
    pub h: Vec<f64>,
    pub r: Vec<f64>,
    /// Each track's predicted state (T × n) and covariance (T × n × n).
    pub x: Vec<f64>,
    pub p: Vec<f64>,
    /// The measurements (M × m).
    pub z: Vec<f64>,
    /// Gate: the largest squared Mahalanobis distance a pair may have.
    pub gate_chi2: f64,
    pub list: ListModel,
}

impl PairCostInput {
    pub fn tracks(&self) -> usize {
        self.x.len() / self.n.max(1)
    }

    pub fn measurements(&self) -> usize {
        self.z.len() / self.m.max(1)
    }

    /// Check the sizes (a message naming what is wrong).
    pub fn check(&self) -> Result<(), String> {
        let (n, m) = (self.n, self.m);
        if !(1..=MAX_N).contains(&n) || !(1..=MAX_M.min(n)).contains(&m) {
            return Err(format!(
                "n = {n}, m = {m} (use 1 <= m <= n <= {MAX_N}, m <= {MAX_M})"
            ));
        }
        let t = self.tracks();
        for (what, got, want) in [
            ("H", self.h.len(), m * n),
            ("R", self.r.len(), m * m),
            ("x", self.x.len(), t * n),
            ("P", self.p.len(), t * n * n),
            ("z", self.z.len(), self.measurements() * m),
        ] {
            if got != want {
                return Err(format!("{what} has {got} values, needs {want}"));
            }
        }
        if !(self.list.pd > 0.0 && self.list.pd < 1.0 && self.list.clutter_density > 0.0) {
            return Err(format!(
                "P_D {} and λ {} (use 0 < P_D < 1, λ > 0)",
                self.list.pd, self.list.clutter_density
            ));
        }
        Ok(())
    }
}

/// Every pair's cost, `cost[t * M + j]` (+∞ outside the gate or where S is singular).
pub fn pair_costs(inp: &PairCostInput) -> Vec<f64> {
    let (t_count, m_count) = (inp.tracks(), inp.measurements());
    let consts = Consts::of(inp);
    (0..t_count * m_count)
        .map(|i| pair_cost(inp, &consts, i / m_count.max(1), i % m_count.max(1)))
        .collect()
}

/// Constants every pair shares (the kernel takes them as arguments).
pub struct Consts {
    pub ln_pd: f64,
    pub ln_lambda: f64,
    pub ln_two_pi: f64,
}

impl Consts {
    pub fn of(inp: &PairCostInput) -> Self {
        Self {
            ln_pd: inp.list.pd.ln(),
            ln_lambda: inp.list.clutter_density.ln(),
            ln_two_pi: std::f64::consts::TAU.ln(),
        }
    }
}

/// Track t and measurement j: S = H P Hᵀ + R, its Cholesky factor, the innovation's squared
/// Mahalanobis distance d² and ln N; the NLLR −(ln P_D + ln N − ln λ) inside the gate.
fn pair_cost(inp: &PairCostInput, k: &Consts, t: usize, j: usize) -> f64 {
    let (n, m) = (inp.n, inp.m);
    let x = &inp.x[t * n..(t + 1) * n];
    let p = &inp.p[t * n * n..(t + 1) * n * n];
    let mut nu = [0.0f64; MAX_M];
    let mut s = [[0.0f64; MAX_M]; MAX_M];
    for a in 0..m {
        let mut zhat = 0.0;
        for c in 0..n {
            zhat += inp.h[a * n + c] * x[c];
        }
        nu[a] = inp.z[j * m + a] - zhat;
        for b in 0..m {
            let mut acc = 0.0;
            for c in 0..n {
                let mut hp = 0.0;
                for l in 0..n {
                    hp += inp.h[a * n + l] * p[l * n + c];
                }
                acc += hp * inp.h[b * n + c];
            }
            s[a][b] = acc + inp.r[a * m + b];
        }
    }
    let mut l = [[0.0f64; MAX_M]; MAX_M];
    for a in 0..m {
        for b in 0..=a {
            let mut sum = 0.0;
            for c in 0..b {
                sum += l[a][c] * l[b][c];
            }
            if a == b {
                let d = s[a][a] - sum;
                if !(d > 0.0) {
                    return f64::INFINITY;
                }
                l[a][a] = d.sqrt();
            } else {
                l[a][b] = (s[a][b] - sum) / l[b][b];
            }
        }
    }
    let (mut d2, mut log_det) = (0.0, 0.0);
    let mut y = [0.0f64; MAX_M];
    for a in 0..m {
        let mut acc = 0.0;
        for c in 0..a {
            acc += l[a][c] * y[c];
        }
        y[a] = (nu[a] - acc) / l[a][a];
        d2 += y[a] * y[a];
        log_det += l[a][a].ln();
    }
    if !(d2 <= inp.gate_chi2) {
        return f64::INFINITY;
    }
    let ll = -0.5 * (d2 + 2.0 * log_det + m as f64 * k.ln_two_pi);
    -(k.ln_pd + ll - k.ln_lambda)
}

#[cfg(test)]
#[path = "pair_costs_tests.rs"]
mod tests;
