//! The forward linear Kalman filter that feeds the smoothers: predict, then update with the new
//! measurement z_{k+1} (the thesis prints z_k), covariance by the Joseph form
//! (I − W H) P (I − W H)ᵀ + W R Wᵀ, which stays symmetric and positive definite where the
//! short form P − W S Wᵀ (the thesis prints "+") loses both to rounding.

use nalgebra::{DMatrix, DVector};

#[cfg(test)]
use super::Record;

/// A linear-Gaussian model: x_{k+1} = F x_k + ν (Q), z_k = H x_k + ω (R).
#[derive(Debug, Clone, PartialEq)]
pub struct LinearModel {
    pub f: DMatrix<f64>,
    pub q: DMatrix<f64>,
    pub h: DMatrix<f64>,
    pub r: DMatrix<f64>,
}

impl LinearModel {
    /// Constant velocity in `axes` dimensions (state: position and velocity per axis,
    /// position first), step `dt`, white-noise acceleration of power spectral density `q`,
    /// positions measured with variance `r` each.
    pub fn constant_velocity(axes: usize, dt: f64, q: f64, r: f64) -> Self {
        let n = 2 * axes;
        let mut f = DMatrix::identity(n, n);
        let mut qm = DMatrix::zeros(n, n);
        let mut h = DMatrix::zeros(axes, n);
        for a in 0..axes {
            let (p, v) = (a, axes + a);
            f[(p, v)] = dt;
            qm[(p, p)] = q * dt.powi(3) / 3.0;
            qm[(p, v)] = q * dt.powi(2) / 2.0;
            qm[(v, p)] = q * dt.powi(2) / 2.0;
            qm[(v, v)] = q * dt;
            h[(a, p)] = 1.0;
        }
        Self {
            f,
            q: qm,
            h,
            r: DMatrix::identity(axes, axes) * r,
        }
    }
}

#[cfg(test)]
/// Run the filter from (x0, p0) over the measurements `zs` (the first measures the state at
/// step 0). Returns one record per measurement; None where an innovation covariance is
/// singular.
pub fn filter(
    m: &LinearModel,
    x0: &DVector<f64>,
    p0: &DMatrix<f64>,
    zs: &[DVector<f64>],
) -> Option<Vec<Record>> {
    let mut out: Vec<Record> = Vec::with_capacity(zs.len());
    let (mut x, mut p) = (x0.clone(), p0.clone());
    for (k, z) in zs.iter().enumerate() {
        if k > 0 {
            let xp = &m.f * &x;
            let pp = &m.f * &p * m.f.transpose() + &m.q;
            if let Some(last) = out.last_mut() {
                last.x_pred = Some(xp.clone());
                last.p_pred = Some(pp.clone());
            }
            x = xp;
            p = pp;
        }
        (x, p) = update(m, &x, &p, z)?;
        out.push(Record {
            x: x.clone(),
            p: p.clone(),
            f: m.f.clone(),
            x_pred: None,
            p_pred: None,
        });
    }
    Some(out)
}

#[cfg(test)]
/// One Joseph-form update of (x, p) with measurement z.
pub fn update(
    m: &LinearModel,
    x: &DVector<f64>,
    p: &DMatrix<f64>,
    z: &DVector<f64>,
) -> Option<(DVector<f64>, DMatrix<f64>)> {
    update_with_innovation(m, x, p, z).map(|u| (u.x, u.p))
}

/// What an update gives: the new state and covariance, the innovation, and the Cholesky
/// factor of its covariance S (for the measurement's likelihood).
pub struct Updated {
    pub x: DVector<f64>,
    pub p: DMatrix<f64>,
    pub innovation: DVector<f64>,
    pub s_chol: nalgebra::linalg::Cholesky<f64, nalgebra::Dyn>,
}

#[cfg(test)]
/// [`update`], keeping the innovation and its covariance's factor.
pub fn update_with_innovation(
    m: &LinearModel,
    x: &DVector<f64>,
    p: &DMatrix<f64>,
    z: &DVector<f64>,
) -> Option<Updated> {
    let chol = innovation_factor(m, p)?;
    Some(update_given(m, x, p, chol, z))
}

/// The Cholesky factor of the innovation covariance S = H P Hᵀ + R at covariance `p` (None:
/// S is not positive definite). One factor serves every measurement gated or updated at `p`.
pub fn innovation_factor(
    m: &LinearModel,
    p: &DMatrix<f64>,
) -> Option<nalgebra::linalg::Cholesky<f64, nalgebra::Dyn>> {
    (&m.h * p * m.h.transpose() + &m.r).cholesky()
}

/// The Joseph-form update of (x, p) with z, given `chol`, the factor of S at `p`.
pub fn update_given(
    m: &LinearModel,
    x: &DVector<f64>,
    p: &DMatrix<f64>,
    chol: nalgebra::linalg::Cholesky<f64, nalgebra::Dyn>,
    z: &DVector<f64>,
) -> Updated {
    let innovation = z - &m.h * x;
    // W = P Hᵀ S⁻¹, by solving S Wᵀ = H P.
    let w = chol.solve(&(&m.h * p)).transpose();
    let x = x + &w * &innovation;
    let n = p.nrows();
    let i_wh = DMatrix::identity(n, n) - &w * &m.h;
    let p = &i_wh * p * i_wh.transpose() + &w * &m.r * w.transpose();
    Updated {
        x,
        p: symmetric(p),
        innovation,
        s_chol: chol,
    }
}

/// (P + Pᵀ) / 2.
pub fn symmetric(p: DMatrix<f64>) -> DMatrix<f64> {
    (&p + p.transpose()) * 0.5
}
