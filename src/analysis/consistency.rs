//! Whether reported uncertainties are honest: the normalised estimation error squared (NEES) of
//! each report against the χ² law it follows when the reported covariance is right.

use nalgebra::Vector3;
use serde::Serialize;

use crate::analysis::accuracy::percentile;
use crate::math::linalg::{symmetric, unit};

/// Whether the reported inverse range's standard deviation σ was honest: the normalised error
/// z = (ρ̂ − ρ) / σ of each report that gave one, ρ = 1 / r the true inverse range. For an
/// honest, unbiased report z² follows a χ² law with one degree of freedom (median 0.455, |z|
/// below 1.96 in 95 % of reports).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct InvRangeConsistency {
    /// Reports scored (those with a positive σ).
    pub reports: usize,
    /// Reports whose σ was zero (not scored).
    pub singular: usize,
    /// sqrt(median z² / the χ² median): 1 when honest, above 1 when overconfident.
    pub error_over_spread: f64,
    /// Percentage of reports with the true inverse range within ±1.96 σ.
    pub within_95_pct: f64,
    /// Median of z: how far, in spreads, the typical report sits beyond (positive: nearer
    /// than) the truth.
    pub median_z: f64,
}

/// Scores normalised inverse-range errors `z` (see [`InvRangeConsistency`]): z² is a NEES
/// with one degree of freedom, scored as the positions' and directions' are
/// ([`consistency_of`]); None when empty.
pub fn inv_range_consistency_of(z: &[f64], singular: usize) -> Option<InvRangeConsistency> {
    let z2: Vec<f64> = z.iter().map(|v| v * v).collect();
    let c = consistency_of(&z2, singular, 1)?;
    let mut zs = z.to_vec();
    zs.sort_by(f64::total_cmp);
    Some(InvRangeConsistency {
        reports: c.reports,
        singular,
        error_over_spread: c.error_over_spread,
        within_95_pct: c.within_95_pct,
        median_z: percentile(&zs, 0.5),
    })
}

/// Whether a target's reported covariances were honest: the normalised estimation error squared
/// (NEES, eᵀ P⁻¹ e for the error e and the reported position covariance P) of its assigned
/// reports. For an unbiased tracker whose covariance is right, NEES follows a χ² law with three
/// degrees of freedom: mean 3, median 2.366, below 7.815 (the truth inside the reported 95 %
/// ellipsoid) in 95 % of reports. Direction-only tracking reports a unit vector: its error and
/// covariance are taken in the plane tangent to the sphere at the report, two degrees of
/// freedom (mean 2, median 1.386, 95 % below 5.991).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Consistency {
    /// Degrees of freedom: 3 for positions, 2 for directions.
    pub dof: u32,
    /// Reports scored (those with a positive definite covariance).
    pub reports: usize,
    /// Reports whose covariance was not positive definite (not scored).
    pub singular: usize,
    pub nees_mean: f64,
    pub nees_median: f64,
    /// Percentage of reports with the truth inside the reported 95 % ellipsoid.
    pub within_95_pct: f64,
    /// The typical error over the typical reported spread, sqrt(median NEES / the χ² median):
    /// 1 when honest, above 1 when the reports are overconfident, below 1 when they are
    /// cautious.
    pub error_over_spread: f64,
}

/// χ² with three degrees of freedom: median and 95th percentile.
pub const CHI2_3_MEDIAN: f64 = 2.365_973_884;
pub const CHI2_3_P95: f64 = 7.814_727_903;
/// χ² with two degrees of freedom: median (2 ln 2) and 95th percentile (2 ln 20).
pub const CHI2_2_MEDIAN: f64 = 1.386_294_361;
pub const CHI2_2_P95: f64 = 5.991_464_547;

/// χ² with one degree of freedom: median and 95th percentile (1.96²).
pub const CHI2_1_MEDIAN: f64 = 0.454_936_423_119_572_7;
pub const CHI2_1_P95: f64 = 3.841_458_821;

/// The χ² median and 95th percentile for `dof` degrees of freedom (1 for an inverse range, 2
/// for directions, else 3).
pub fn chi2_quantiles(dof: u32) -> (f64, f64) {
    match dof {
        1 => (CHI2_1_MEDIAN, CHI2_1_P95),
        2 => (CHI2_2_MEDIAN, CHI2_2_P95),
        _ => (CHI2_3_MEDIAN, CHI2_3_P95),
    }
}

/// eᵀ P⁻¹ e for P given by its upper triangle; None when P is not positive definite (or not
/// finite).
pub fn nees(e: &[f64; 3], cov: &[f64; 6]) -> Option<f64> {
    let chol = symmetric(cov)?.cholesky()?;
    let e = Vector3::from(*e);
    let v = e.dot(&chol.solve(&e));
    v.is_finite().then_some(v)
}

/// The NEES of a reported direction `u` (a unit vector, or any vector along it) against the
/// true direction `truth` (unit), in the plane tangent to the sphere at `u`: the error's and the
/// covariance's components along two unit vectors orthogonal to `u`. None when `u` is zero or
/// the projected covariance is not positive definite.
pub fn direction_nees(u: &[f64; 3], truth: &Vector3<f64>, cov: &[f64; 6]) -> Option<f64> {
    let u = unit(Vector3::from(*u))?;
    // Any axis not along u gives the first tangent vector.
    let axis = if u.x.abs() < 0.9 {
        Vector3::x()
    } else {
        Vector3::y()
    };
    let t1 = u.cross(&axis).normalize();
    let t2 = u.cross(&t1);
    let p = symmetric(cov)?;
    let t = nalgebra::Matrix3x2::from_columns(&[t1, t2]);
    let p2 = t.transpose() * p * t;
    let e = truth - u;
    let e2 = nalgebra::Vector2::new(e.dot(&t1), e.dot(&t2));
    let chol = p2.cholesky()?;
    let v = e2.dot(&chol.solve(&e2));
    v.is_finite().then_some(v)
}

/// A line array's direction NEES, one degree of freedom: the error along the direction of
/// growing angle to the array's `axis` (the truth turned into the report's half-plane, so the
/// error lies there) over the covariance along it. None on the axis itself (endfire) or for a
/// covariance with no spread there.
pub fn line_nees(
    u: &[f64; 3],
    truth: &Vector3<f64>,
    cov: &[f64; 6],
    axis: &[f64; 3],
) -> Option<f64> {
    let u = unit(Vector3::from(*u))?;
    let a = Vector3::from(*axis);
    let t = unit(a - u * u.dot(&a))?;
    let p = symmetric(cov)?;
    let var = (t.transpose() * p * t)[(0, 0)];
    let e = (truth - u).dot(&t);
    let v = e * e / var;
    (var > 0.0 && v.is_finite()).then_some(v)
}

/// The degrees of freedom of a report's NEES: 3 for positions, 2 for directions, 1 for a line
/// array's angle to its axis.
pub fn nees_dof(directions: bool, line: bool) -> u32 {
    match (directions, line) {
        (_, true) => 1,
        (true, false) => 2,
        (false, false) => 3,
    }
}

pub fn consistency_of(nees: &[f64], singular: usize, dof: u32) -> Option<Consistency> {
    if nees.is_empty() {
        return None;
    }
    let (chi2_median, chi2_p95) = chi2_quantiles(dof);
    let mut s = nees.to_vec();
    s.sort_by(f64::total_cmp);
    let median = percentile(&s, 0.5);
    Some(Consistency {
        dof,
        reports: s.len(),
        singular,
        nees_mean: s.iter().sum::<f64>() / s.len() as f64,
        nees_median: median,
        within_95_pct: 100.0 * s.iter().filter(|&&v| v <= chi2_p95).count() as f64 / s.len() as f64,
        error_over_spread: (median / chi2_median).sqrt(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nees_by_hand() {
        // Diagonal P = diag(1, 4, 9): e = (1, 2, 3) gives 1 + 1 + 1.
        let v = nees(&[1.0, 2.0, 3.0], &[1.0, 0.0, 0.0, 4.0, 0.0, 9.0]).unwrap();
        assert!((v - 3.0).abs() < 1e-12);
        assert_eq!(
            nees(&[1.0, 0.0, 0.0], &[1.0, 0.0, 0.0, -1.0, 0.0, 1.0]),
            None
        );
        assert_eq!(
            nees(&[1.0, 0.0, 0.0], &[f64::NAN, 0.0, 0.0, 1.0, 0.0, 1.0]),
            None
        );
    }
}
