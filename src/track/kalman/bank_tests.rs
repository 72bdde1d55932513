use super::*;
use crate::testing::kalman::{bank_model, compare as compare_bank, max_rel_diff, model};

/// Run `steps` steps of `filters` random filters of a random (n, m) model on the CPU bank (one
/// pass per step when `fused`) against the f64 reference; the worst relative errors of x and P.
fn compare(
    seed: u32,
    n: usize,
    m: usize,
    filters: usize,
    steps: usize,
    check: usize,
) -> (f64, f64) {
    let lm = model(seed, n, m);
    let mut bank =
        KalmanBank::new(bank_model(&lm), filters, &vec![0.0; n], &vec![0.0; n * n]).unwrap();
    let c = compare_bank(&mut bank, &lm, seed, steps, check, false).unwrap();
    assert_eq!(c.singular, 0);
    (c.x_err, c.p_err)
}

/// The one-pass step is the same arithmetic as predict then update, bit for bit.
#[test]
fn the_fused_step_equals_predict_then_update() {
    let lm = model(5, 6, 3);
    let make = || KalmanBank::new(bank_model(&lm), 257, &[0.0; 6], &[0.0; 36]).unwrap();
    let (mut a, mut b) = (make(), make());
    let ca = compare_bank(&mut a, &lm, 5, 20, 16, false).unwrap();
    let cb = compare_bank(&mut b, &lm, 5, 20, 16, true).unwrap();
    assert_eq!(max_rel_diff(&ca.x, &cb.x), 0.0);
    assert_eq!(max_rel_diff(&ca.p, &cb.p), 0.0);
}

/// Checklist item 1: banks of 1, 63, 64, 65, 1,000 and 100,003 filters (no multiple-of-a-block
/// assumption) of CV-2D (n = 4, m = 2), CA-2D and CV-3D (n = 6, m = 2 and 3) models: after one
/// step, f32 within 1e-5 of the f64 reference (normwise relative, x and P).
#[test]
fn one_step_matches_the_f64_reference() {
    for (n, m) in [(4, 2), (6, 2), (6, 3)] {
        for filters in [1usize, 63, 64, 65, 1000, 100_003] {
            let check = (filters / 200).max(1);
            let (ex, ep) = compare(3 + n as u32 * 10 + m as u32, n, m, filters, 1, check);
            eprintln!("n {n} m {m} M {filters}: x {ex:.1e}, P {ep:.1e}");
            assert!(
                ex <= 1e-5 && ep <= 1e-5,
                "n {n} m {m} M {filters}: x {ex:e}, P {ep:e}"
            );
        }
    }
}

/// Checklist item 1: after 1,000 steps (Joseph form, symmetrised), within 1e-4, every P still
/// symmetric and positive definite.
#[test]
fn a_thousand_steps_stay_within_1e_4_of_the_f64_reference() {
    for (n, m) in [(4, 2), (6, 3)] {
        let (ex, ep) = compare(17 + n as u32, n, m, 65, 1000, 1);
        eprintln!("1,000 steps, n {n} m {m}: x {ex:.1e}, P {ep:.1e}");
        assert!(ex <= 1e-4 && ep <= 1e-4, "n {n} m {m}: x {ex:e}, P {ep:e}");
    }
}

/// Bad input is an error naming what is wrong, never a panic.
#[test]
fn malformed_models_and_slices_are_refused() {
    let lm = model(1, 4, 2);
    let mut bad = bank_model(&lm);
    bad.q.pop();
    assert!(KalmanBank::new(bad, 3, &[0.0; 4], &[0.0; 16]).is_err());
    let mut nan = bank_model(&lm);
    nan.r[0] = f32::NAN;
    assert!(KalmanBank::new(nan, 3, &[0.0; 4], &[0.0; 16]).is_err());
    let mut big = bank_model(&lm);
    big.n = 7;
    assert!(KalmanBank::new(big, 3, &[0.0; 4], &[0.0; 16]).is_err());
    let mut bank = KalmanBank::new(bank_model(&lm), 3, &[0.0; 4], &[0.0; 16]).unwrap();
    assert_eq!(
        bank.update(&[0.0; 5]),
        Err(BankError::Length {
            what: "z",
            want: 6,
            got: 5
        })
    );
    // A zero covariance with a zero R: the innovation covariance is singular, counted.
    let mut z = bank_model(&lm);
    z.r = vec![0.0; 4];
    let mut b = KalmanBank::new(z, 2, &[0.0; 4], &[0.0; 16]).unwrap();
    b.update(&[1.0; 4]).unwrap();
    assert_eq!(b.singular, 2);
}

/// The extended (TDOA) step against its f64 reference, and as a tracker: 300 sources 20-60 m
/// from a five-sensor array, 10 pairs of range differences with 1 cm noise, priors 1 m off.
#[test]
fn tdoa_step_matches_f64_and_tracks() {
    use crate::testing::kalman_tdoa::{reference, workload};
    let (filters, steps) = (300, 100);
    let w = workload(41, filters, steps);
    let mut bank = KalmanBank::new(w.bank_model.clone(), filters, &[0.0; 6], &[0.0; 36]).unwrap();
    bank.load(&w.x0, &w.p0).unwrap();
    let (mut worst1, mut worst_n) = (0.0f64, 0.0f64);
    for (k, z) in w.z.iter().enumerate() {
        bank.step_tdoa(&w.geo, z).unwrap();
        assert_eq!(bank.singular, 0);
        if k == 0 || k + 1 == steps {
            for j in (0..filters).step_by(7) {
                let (x, p) = reference(&w, j, k + 1);
                let e = crate::testing::kalman::filter_error(&bank, j, &x, &p);
                let worst = if k == 0 { &mut worst1 } else { &mut worst_n };
                *worst = worst.max(e);
            }
        }
    }
    // Errors and NEES over the last step.
    let (rmse, nees) = crate::testing::kalman_tdoa::score(&bank, &w.truth[steps - 1]);
    eprintln!(
        "TDOA bank: f32 against f64 {worst1:.1e} after one step, {worst_n:.1e} after {steps}; \
         RMSE {rmse:.3} m, position NEES {nees:.2} (3 if honest)"
    );
    assert!(worst1 <= 1e-4 && worst_n <= 1e-3, "{worst1:e} {worst_n:e}");
    assert!(rmse < 0.5, "RMSE {rmse}");
    assert!((1.5..6.0).contains(&nees), "NEES {nees}");
}

/// A TDOA step refuses what it cannot take: a bank not of 6 states, pairs naming missing or
/// equal sensors, a noise that is not positive, measurements of the wrong length.
#[test]
fn tdoa_step_refuses_bad_geometry() {
    use crate::testing::kalman_tdoa::geometry;
    let lm = model(1, 4, 2);
    let mut four = KalmanBank::new(bank_model(&lm), 2, &[0.0; 4], &[0.0; 16]).unwrap();
    let geo = geometry();
    let z = vec![0.0; geo.pairs.len() * 2];
    assert!(four.step_tdoa(&geo, &z).is_err());
    let w = crate::testing::kalman_tdoa::workload(1, 2, 1);
    let mut bank = KalmanBank::new(w.bank_model, 2, &[0.0; 6], &[0.0; 36]).unwrap();
    for bad in [
        TdoaGeometry {
            pairs: vec![(0, 9)],
            ..geo.clone()
        },
        TdoaGeometry {
            pairs: vec![(2, 2)],
            ..geo.clone()
        },
        TdoaGeometry {
            pairs: vec![],
            ..geo.clone()
        },
        TdoaGeometry {
            r: 0.0,
            ..geo.clone()
        },
        TdoaGeometry {
            r: f32::NAN,
            ..geo.clone()
        },
    ] {
        let z = vec![0.0; bad.pairs.len() * 2];
        let e = bank.step_tdoa(&bad, &z).unwrap_err();
        assert!(matches!(e, BankError::Model(_)), "{e}");
    }
    assert!(matches!(
        bank.step_tdoa(&geo, &[0.0; 3]),
        Err(BankError::Length { what: "z", .. })
    ));
}
