//! Small linear algebra: the stream's packed covariances, unit vectors.

use nalgebra::{Matrix6, Vector3};

/// The symmetric matrix of an upper triangle (see [`upper_triangle`]); None when an entry is
/// not finite.
pub fn symmetric(c: &[f64; 6]) -> Option<nalgebra::Matrix3<f64>> {
    let p = nalgebra::Matrix3::new(c[0], c[1], c[2], c[1], c[3], c[4], c[2], c[4], c[5]);
    p.iter().all(|v| v.is_finite()).then_some(p)
}

/// The upper triangle of a symmetric 3 × 3 matrix: xx, xy, xz, yy, yz, zz (the stream's
/// `pos_cov` order).
pub fn upper_triangle(c: &[[f64; 3]; 3]) -> [f64; 6] {
    [c[0][0], c[0][1], c[0][2], c[1][1], c[1][2], c[2][2]]
}

/// `v` scaled to unit length; None when it is (nearly) zero.
pub fn unit(v: Vector3<f64>) -> Option<Vector3<f64>> {
    let n = v.norm();
    (n > 1e-12).then(|| v / n)
}

/// Lower Cholesky factor of a 6×6 covariance, regularised so it always exists.
pub fn cholesky6(cov: &[[f64; 6]; 6]) -> [[f64; 6]; 6] {
    let mut m = Matrix6::<f64>::zeros();
    for r in 0..6 {
        for c in 0..6 {
            m[(r, c)] = 0.5 * (cov[r][c] + cov[c][r]);
        }
    }
    let scale = (0..6)
        .map(|i| m[(i, i)].abs())
        .fold(0.0, f64::max)
        .max(1e-12);
    let mut eps = 1e-9 * scale;
    for _ in 0..20 {
        if let Some(ch) = (m + Matrix6::identity() * eps).cholesky() {
            let l = ch.l();
            let mut out = [[0.0; 6]; 6];
            for r in 0..6 {
                for c in 0..6 {
                    out[r][c] = l[(r, c)];
                }
            }
            return out;
        }
        eps *= 10.0;
    }
    let mut out = [[0.0; 6]; 6];
    for (i, row) in out.iter_mut().enumerate() {
        row[i] = m[(i, i)].abs().sqrt();
    }
    out
}
