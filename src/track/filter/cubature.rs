//! The third-degree spherical–radial cubature rule (Arasaratnam and Haykin 2009; the unscented
//! transform with κ = 0, α = 1, β = 0): the 2n points x ± √n L eᵢ with L Lᵀ = P, each of weight
//! 1/(2n). Every weight is positive, so the moments it gives back are covariances, which the
//! usual unscented choice κ = 3 − n does not promise for n > 3 (the IMM filter's augmented state
//! has 11 dimensions).

use nalgebra::{SMatrix, SVector};

/// Lower Cholesky factor of `p`, after making it symmetric. A covariance that has lost a
/// direction (a plane wave's radial part, a line array's turn about its axis) is not positive
/// definite; it gets a diagonal of 1e-12 of its trace, then 1e-9, 1e-6, before giving up (None).
pub fn factor<const N: usize>(p: &SMatrix<f64, N, N>) -> Option<SMatrix<f64, N, N>> {
    let sym = (p + p.transpose()) * 0.5;
    if !sym.iter().all(|v| v.is_finite()) {
        return None;
    }
    if let Some(c) = sym.cholesky() {
        return Some(c.l());
    }
    let scale = sym.trace().abs().max(f64::MIN_POSITIVE) / N as f64;
    [1e-12, 1e-9, 1e-6].iter().find_map(|eps| {
        let mut q = sym;
        for i in 0..N {
            q[(i, i)] += eps * scale;
        }
        q.cholesky().map(|c| c.l())
    })
}

/// The 2N points of `x` with factor `l` (x ± √N lᵢ, column i of l; plus first, then minus).
pub fn points<const N: usize>(x: &SVector<f64, N>, l: &SMatrix<f64, N, N>) -> Vec<SVector<f64, N>> {
    let r = (N as f64).sqrt();
    let mut out = Vec::with_capacity(2 * N);
    for sign in [1.0, -1.0] {
        for i in 0..N {
            out.push(x + l.column(i) * (sign * r));
        }
    }
    out
}

/// Equal-weight mean and covariance of points.
pub fn moments<const M: usize>(pts: &[SVector<f64, M>]) -> (SVector<f64, M>, SMatrix<f64, M, M>) {
    let w = 1.0 / pts.len().max(1) as f64;
    let mean = pts.iter().fold(SVector::<f64, M>::zeros(), |a, p| a + p) * w;
    let cov = pts.iter().fold(SMatrix::<f64, M, M>::zeros(), |a, p| {
        let d = p - mean;
        a + d * d.transpose()
    }) * w;
    (mean, cov)
}

#[cfg(test)]
mod tests {
    use super::*;
    use nalgebra::{Matrix3, Vector3};

    #[test]
    fn linear_maps_keep_mean_and_covariance() {
        // The rule is exact for polynomials of degree three: a linear map's moments come back.
        let x = Vector3::new(1.0, -2.0, 0.5);
        let p = Matrix3::new(2.0, 0.3, 0.1, 0.3, 1.0, -0.2, 0.1, -0.2, 0.5);
        let a = Matrix3::new(1.0, 2.0, 0.0, 0.0, 1.0, -1.0, 3.0, 0.0, 1.0);
        let l = factor(&p).unwrap();
        let mapped: Vec<_> = points(&x, &l).iter().map(|q| a * q).collect();
        let (m, c) = moments(&mapped);
        assert!((m - a * x).norm() < 1e-12);
        assert!((c - a * p * a.transpose()).norm() < 1e-12);
    }

    #[test]
    fn a_lost_direction_still_factors() {
        // Rank two: the jitter makes it factor, and the factor reproduces it closely.
        let v = Vector3::new(1.0, 1.0, 0.0);
        let w = Vector3::new(0.0, 1.0, 1.0);
        let p = v * v.transpose() + w * w.transpose();
        let l = factor(&p).unwrap();
        assert!((l * l.transpose() - p).norm() < 1e-9);
        assert!(factor(&Matrix3::from_element(f64::NAN)).is_none());
    }
}
