//! Covariance intersection (Julier and Uhlmann): fuses estimates whose cross-correlations are
//! unknown — two arrays hearing one source in one sea share its noise and its multipath — into
//! an estimate whose covariance is consistent whatever those correlations are.
//!
//! P⁻¹ = Σ ωᵢ Pᵢ⁻¹ and x = P Σ ωᵢ Pᵢ⁻¹ xᵢ with ωᵢ ≥ 0, Σ ωᵢ = 1. Two inputs: ω minimises the
//! trace of the fused position covariance (golden-section search; the trace is convex in ω).
//! More: the fast weights ωᵢ ∝ 1 / tr Pᵢ (Niehsen 2002).

use nalgebra::{Matrix3, Matrix6, Vector6};

/// An estimate: mean and covariance (position then velocity).
pub type Estimate = (Vector6<f64>, Matrix6<f64>);

/// The covariance intersection of `items` (None when empty or a covariance is singular).
pub fn covariance_intersection(items: &[Estimate]) -> Option<Estimate> {
    match items {
        [] => None,
        [one] => Some(*one),
        [a, b] => {
            let ia = a.1.try_inverse()?;
            let ib = b.1.try_inverse()?;
            let w = golden_min(|w| {
                combine(&[(w, &ia), (1.0 - w, &ib)]).map_or(f64::INFINITY, |p| position_trace(&p))
            });
            fuse(&[(w, a, &ia), (1.0 - w, b, &ib)])
        }
        many => {
            let inv: Option<Vec<Matrix6<f64>>> = many.iter().map(|e| e.1.try_inverse()).collect();
            let inv = inv?;
            let raw: Vec<f64> = many
                .iter()
                .map(|e| 1.0 / position_trace(&e.1).max(1e-300))
                .collect();
            let sum: f64 = raw.iter().sum();
            let parts: Vec<_> = many
                .iter()
                .zip(&inv)
                .zip(&raw)
                .map(|((e, i), r)| (r / sum, e, i))
                .collect();
            fuse(&parts)
        }
    }
}

fn position_trace(p: &Matrix6<f64>) -> f64 {
    p.fixed_view::<3, 3>(0, 0).trace()
}

/// (Σ ωᵢ Pᵢ⁻¹)⁻¹.
fn combine(parts: &[(f64, &Matrix6<f64>)]) -> Option<Matrix6<f64>> {
    let info: Matrix6<f64> = parts.iter().map(|(w, i)| *i * *w).sum();
    info.try_inverse()
}

fn fuse(parts: &[(f64, &Estimate, &Matrix6<f64>)]) -> Option<Estimate> {
    let p = combine(&parts.iter().map(|(w, _, i)| (*w, *i)).collect::<Vec<_>>())?;
    let y: Vector6<f64> = parts.iter().map(|(w, e, i)| *i * e.0 * *w).sum();
    let p = (p + p.transpose()) * 0.5;
    Some((p * y, p))
}

/// The ω in [0, 1] minimising `f` (golden-section search to 1e-6).
fn golden_min(f: impl Fn(f64) -> f64) -> f64 {
    let g = (5f64.sqrt() - 1.0) / 2.0;
    let (mut a, mut b) = (0.0, 1.0);
    let mut c = b - g * (b - a);
    let mut d = a + g * (b - a);
    let (mut fc, mut fd) = (f(c), f(d));
    while b - a > 1e-6 {
        if fc < fd {
            b = d;
            d = c;
            fd = fc;
            c = b - g * (b - a);
            fc = f(c);
        } else {
            a = c;
            c = d;
            fc = fd;
            d = a + g * (b - a);
            fd = f(d);
        }
    }
    (a + b) / 2.0
}

/// The squared Mahalanobis distance between two positions under covariance `s` (None when
/// `s` is singular).
pub fn mahalanobis2(a: &Vector6<f64>, b: &Vector6<f64>, s: &Matrix3<f64>) -> Option<f64> {
    let d = a.fixed_rows::<3>(0) - b.fixed_rows::<3>(0);
    let si = s.try_inverse()?;
    Some((d.transpose() * si * d)[(0, 0)])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::philox::{PhiloxStream, Stream};

    fn diag(v: [f64; 6]) -> Matrix6<f64> {
        Matrix6::from_diagonal(&Vector6::from(v))
    }

    #[test]
    fn one_is_itself_and_two_identical_give_the_same() {
        let e = (
            Vector6::new(1.0, 2.0, 3.0, 0.1, 0.2, 0.0),
            diag([4.0, 1.0, 2.0, 0.1, 0.1, 0.1]),
        );
        assert_eq!(covariance_intersection(&[e]), Some(e));
        let (x, p) = covariance_intersection(&[e, e]).unwrap();
        assert!((x - e.0).norm() < 1e-9);
        assert!((p - e.1).norm() < 1e-6);
        assert!(covariance_intersection(&[]).is_none());
    }

    /// Two arrays at right angles: one measures x well and y badly, the other the reverse;
    /// their intersection is good in both.
    #[test]
    fn crossed_ellipses_give_a_tight_fix() {
        let a = (Vector6::zeros(), diag([0.01, 4.0, 1.0, 1.0, 1.0, 1.0]));
        let b = (Vector6::zeros(), diag([4.0, 0.01, 1.0, 1.0, 1.0, 1.0]));
        let (_, p) = covariance_intersection(&[a, b]).unwrap();
        assert!(p[(0, 0)] < 0.03 && p[(1, 1)] < 0.03, "{p}");
        let three = covariance_intersection(&[a, b, a]).unwrap().1;
        assert!(three[(0, 0)] < 0.05 && three[(1, 1)] < 0.2, "{three}");
    }

    /// Whatever the correlation between the two inputs' errors (here 0, 0.5 and 0.95), the
    /// intersection's covariance covers its error: mean NEES at most the dimension.
    #[test]
    fn consistent_for_any_correlation() {
        let mut rng = PhiloxStream::new(7, 0, Stream::Simulate);
        let pa = diag([1.0, 9.0, 2.0, 0.5, 0.5, 0.5]);
        let pb = diag([9.0, 1.0, 2.0, 0.5, 0.5, 0.5]);
        let (la, lb) = (pa.cholesky().unwrap().l(), pb.cholesky().unwrap().l());
        for rho in [0.0, 0.5, 0.95] {
            let n = 4000;
            let mut nees = 0.0;
            for _ in 0..n {
                let shared = Vector6::from_fn(|_, _| rng.normal_f64());
                let own_a = Vector6::from_fn(|_, _| rng.normal_f64());
                let own_b = Vector6::from_fn(|_, _| rng.normal_f64());
                let k = (1.0f64 - rho).sqrt();
                let ea = la * (shared * rho.sqrt() + own_a * k);
                let eb = lb * (shared * rho.sqrt() + own_b * k);
                let (x, p) = covariance_intersection(&[(ea, pa), (eb, pb)]).unwrap();
                nees += (x.transpose() * p.try_inverse().unwrap() * x)[(0, 0)];
            }
            let mean = nees / n as f64;
            assert!(mean <= 6.2, "rho {rho}: mean NEES {mean}");
        }
    }
}
