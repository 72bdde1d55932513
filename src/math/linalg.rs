//! Small linear algebra: the stream's packed covariances, unit vectors.

use nalgebra::Vector3;

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
