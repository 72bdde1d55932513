//! The seed's acceptance tests (checklist §4 items 2, 6-9) on its re-simulated scenario: a 2-D
//! constant-velocity target, T = 1 s, q = 0.1 m²/s³, R = 10 m² per axis, P₀ = diag(100, 100,
//! 25, 25), initial velocity (10, 5) m/s; 50 Monte Carlo runs of 500 steps, the first 50 left
//! out of the figures.

use nalgebra::{DMatrix, DVector};

use super::*;
use crate::rng::philox::{normals4, philox4x32_10};
use crate::track::smooth::kalman::{LinearModel, filter};

/// Standard normals for run `run`, step `k`: (process noise 2, measurement noise 2).
fn seed_noise(run: u32, k: usize) -> [f64; 4] {
    normals4(philox4x32_10([k as u32, run, 0, 0], [0x5eed, 2])).map(f64::from)
}

/// A run of the scenario: the true states and the measurements.
fn seed_scenario(
    m: &LinearModel,
    run: u32,
    steps: usize,
) -> (Vec<DVector<f64>>, Vec<DVector<f64>>) {
    let q_chol = m.q.clone().cholesky().map(|c| c.l());
    let mut x = DVector::from_vec(vec![0.0, 0.0, 10.0, 5.0]);
    let (mut truth, mut zs) = (Vec::new(), Vec::new());
    for k in 0..steps {
        let w = seed_noise(run, k);
        if k > 0 {
            // Process noise through Q's Cholesky factor (its two axes are independent).
            let mut v = DVector::zeros(4);
            if let Some(l) = &q_chol {
                let u = DVector::from_vec(vec![
                    w[0],
                    w[1],
                    seed_noise(run + 1000, k)[0],
                    seed_noise(run + 1000, k)[1],
                ]);
                v = l * u;
            }
            x = &m.f * &x + v;
        }
        let z = &m.h * &x + DVector::from_vec(vec![w[2], w[3]]) * m.r[(0, 0)].sqrt();
        truth.push(x.clone());
        zs.push(z);
    }
    (truth, zs)
}

/// Run `run` of `steps` steps: the true states and the forward filter's records.
fn records(run: u32, steps: usize) -> (Vec<DVector<f64>>, Vec<Record>) {
    let m = LinearModel::constant_velocity(2, 1.0, 0.1, 10.0);
    let (truth, zs) = seed_scenario(&m, run, steps);
    let x0 = DVector::from_vec(vec![0.0, 0.0, 10.0, 5.0]);
    let p0 = DMatrix::from_diagonal(&DVector::from_vec(vec![100.0, 100.0, 25.0, 25.0]));
    (truth, filter(&m, &x0, &p0, &zs).unwrap())
}

const STEPS: usize = 500;
const RUNS: u32 = 50;
const SKIP: usize = 50;

fn rel(a: &DMatrix<f64>, b: &DMatrix<f64>) -> f64 {
    (a - b).norm() / b.norm().max(1e-300)
}

/// A textbook RTS with explicit inverses, as the reference.
fn textbook(records: &[Record]) -> Vec<(DVector<f64>, DMatrix<f64>)> {
    let n = records.len();
    let mut out = vec![(records[n - 1].x.clone(), records[n - 1].p.clone()); n];
    for k in (0..n - 1).rev() {
        let r = &records[k];
        let pp = r.p_pred.clone().unwrap();
        let c = &r.p * r.f.transpose() * pp.clone().try_inverse().unwrap();
        let x = &r.x + &c * (&out[k + 1].0 - r.x_pred.clone().unwrap());
        let p = &r.p + &c * (&out[k + 1].1 - &pp) * c.transpose();
        out[k] = (x, p);
    }
    out
}

#[test]
fn rts_matches_a_textbook_smoother() {
    let (_, recs) = records(1, 200);
    let s = rts::smooth(&recs, Covariance::Smooth).unwrap();
    for (a, b) in s.iter().zip(textbook(&recs)) {
        assert!(
            rel(
                &DMatrix::from_column_slice(4, 1, a.x.as_slice()),
                &DMatrix::from_column_slice(4, 1, b.0.as_slice())
            ) < 1e-12
        );
        assert!(rel(a.p.as_ref().unwrap(), &b.1) < 1e-12);
    }
}

/// Position RMSE (m) and mean NEES of estimates against truth, over steps after `SKIP`.
fn score(truth: &[DVector<f64>], est: &[(DVector<f64>, DMatrix<f64>)]) -> (f64, f64, usize) {
    let (mut se, mut nees, mut n) = (0.0, 0.0, 0);
    for (t, (x, p)) in truth.iter().zip(est).skip(SKIP) {
        let e = x - t;
        se += e[0] * e[0] + e[1] * e[1];
        nees += (e.transpose() * p.clone().try_inverse().unwrap() * &e)[(0, 0)];
        n += 1;
    }
    (se, nees, n)
}

/// Monte Carlo over the scenario: (KF RMSE, RTS RMSE, KF mean NEES, RTS mean NEES), the RTS
/// with `gain`.
fn monte_carlo(
    gain: impl Fn(&Record, usize) -> Result<DMatrix<f64>, SmoothError> + Copy,
) -> (f64, f64, f64, f64) {
    let (mut kf, mut sm) = ((0.0, 0.0, 0), (0.0, 0.0, 0));
    for run in 0..RUNS {
        let (truth, recs) = records(run, STEPS);
        let f: Vec<_> = recs.iter().map(|r| (r.x.clone(), r.p.clone())).collect();
        let s: Vec<_> = rts::smooth_with(&recs, Covariance::Smooth, gain)
            .unwrap()
            .into_iter()
            .map(|s| (s.x, s.p.unwrap()))
            .collect();
        let a = score(&truth, &f);
        let b = score(&truth, &s);
        kf = (kf.0 + a.0, kf.1 + a.1, kf.2 + a.2);
        sm = (sm.0 + b.0, sm.1 + b.1, sm.2 + b.2);
    }
    let rmse = |t: (f64, f64, usize)| (t.0 / t.2 as f64).sqrt();
    let nees = |t: (f64, f64, usize)| t.1 / t.2 as f64;
    (rmse(kf), rmse(sm), nees(kf), nees(sm))
}

/// Checklist items 2 and 6: KF position RMSE 2.68 ± 0.1 m, RTS at most 0.65 of it, mean NEES
/// of both near 4 (n = 4: the 95 % band of a mean over 50 × 450 samples is 4 ± 0.08; runs share
/// their steps' truth-free noise, so allow 4 ± 0.4).
#[test]
fn kalman_and_rts_meet_the_seed_figures() {
    let (kf, rts_rmse, kf_nees, rts_nees) = monte_carlo(gain);
    eprintln!("KF RMSE {kf:.3} m, RTS {rts_rmse:.3} m; NEES {kf_nees:.2}, {rts_nees:.2}");
    assert!((kf - 2.68).abs() <= 0.1, "KF RMSE {kf}");
    assert!(rts_rmse <= 0.65 * kf, "RTS {rts_rmse} against KF {kf}");
    assert!((kf_nees - 4.0).abs() < 0.4, "KF NEES {kf_nees}");
    assert!((rts_nees - 4.0).abs() < 0.4, "RTS NEES {rts_nees}");
}

/// The thesis's printed gain P_{k|k} Fᵀ P_{k|k}⁻¹ fails the same check.
#[test]
fn the_printed_gain_fails() {
    let printed = |r: &Record, _k: usize| -> Result<DMatrix<f64>, SmoothError> {
        let inv =
            r.p.clone()
                .try_inverse()
                .ok_or(SmoothError::NotPositiveDefinite(0))?;
        Ok(&r.p * r.f.transpose() * inv)
    };
    let (kf, rts_rmse, _, rts_nees) = monte_carlo(printed);
    eprintln!("printed gain: KF {kf:.3} m, RTS {rts_rmse:.3} m, NEES {rts_nees:.2}");
    assert!(
        rts_rmse > 0.65 * kf || (rts_nees - 4.0).abs() >= 0.4,
        "the printed gain passed: RTS {rts_rmse} against KF {kf}, NEES {rts_nees}"
    );
}

/// Checklist item 9: skipping the covariances leaves the means bit for bit.
#[test]
fn skipping_covariances_keeps_the_means() {
    let (_, recs) = records(3, 300);
    let with = rts::smooth(&recs, Covariance::Smooth).unwrap();
    let without = rts::smooth(&recs, Covariance::Skip).unwrap();
    assert!(without.iter().all(|s| s.p.is_none()));
    for (a, b) in with.iter().zip(&without) {
        assert_eq!(a.x, b.x);
    }
}

/// Checklist item 8: the fixed-lag output x̂_{k|k+L} is RTS over the data up to k + L.
#[test]
fn fixed_lag_equals_rts_on_the_data_so_far() {
    let (_, recs) = records(5, 120);
    for lag in [0usize, 1, 5, 20] {
        let mut fl = fixed_lag::FixedLag::new(lag, Covariance::Smooth);
        for (i, r) in recs.iter().enumerate() {
            let mut newest = r.clone();
            newest.x_pred = None;
            newest.p_pred = None;
            if i > 0 {
                let prev = &recs[i - 1];
                fl.set_prediction(
                    prev.f.clone(),
                    prev.x_pred.clone().unwrap(),
                    prev.p_pred.clone().unwrap(),
                );
            }
            let Some(out) = fl.push(newest).unwrap() else {
                assert!(i < lag);
                continue;
            };
            let k = i - lag;
            let mut upto: Vec<Record> = recs[..=i].to_vec();
            if let Some(last) = upto.last_mut() {
                last.x_pred = None;
                last.p_pred = None;
            }
            let want = &rts::smooth(&upto, Covariance::Smooth).unwrap()[k];
            assert!(
                (&out.x - &want.x).norm() <= 1e-9 * want.x.norm(),
                "lag {lag}, k {k}"
            );
            assert!(rel(out.p.as_ref().unwrap(), want.p.as_ref().unwrap()) <= 1e-9);
        }
    }
}
