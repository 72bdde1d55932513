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
