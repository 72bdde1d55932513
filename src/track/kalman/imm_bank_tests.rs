use super::*;
use crate::testing::imm_bank::{reference, workload};
use crate::testing::kalman::{bank_model, compare as compare_bank, max_rel_diff, model};
use crate::track::kalman::bank::KalmanBank;

/// A bank loaded with the workload's starts.
fn loaded(w: &crate::testing::imm_bank::ImmWorkload, tracks: usize) -> ImmBank {
    let mut bank = ImmBank::new(
        w.model.clone(),
        tracks,
        &[0.0; 4],
        &[0.0; 16],
        &[1.0, 1.0, 1.0],
    )
    .unwrap();
    ImmFilterBank::load(&mut bank, &w.x, &w.p, &w.mu).unwrap();
    bank
}

/// With one model (Π = [1]) the IMM bank is the plain Kalman bank, bit for bit.
#[test]
fn one_model_is_the_kalman_bank_bit_for_bit() {
    let lm = model(9, 4, 2);
    let one = ImmBankModel {
        models: vec![bank_model(&lm)],
        transition: vec![1.0],
    };
    let filters = 97;
    let mut kf = KalmanBank::new(bank_model(&lm), filters, &[0.0; 4], &[0.0; 16]).unwrap();
    // One step of the Kalman bank's random workload gives random starting arrays; both banks
    // start from them and take the same measurements.
    compare_bank(&mut kf, &lm, 9, 1, 1, false).unwrap();
    let (x0, p0) = {
        let (x, p) = kf.arrays();
        (x.to_vec(), p.to_vec())
    };
    let mut imm = ImmBank::new(one, filters, &[0.0; 4], &[0.0; 16], &[1.0]).unwrap();
    ImmFilterBank::load(&mut imm, &x0, &p0, &vec![1.0; filters]).unwrap();
    for k in 0..50 {
        let z: Vec<f32> = (0..2 * filters)
            .map(|i| crate::testing::kalman::normal(100 + k, i) as f32)
            .collect();
        kf.step(&z).unwrap();
        imm.step(&z).unwrap();
    }
    let (xi, pi, mu) = ImmFilterBank::read(&mut imm).unwrap();
    let (xk, pk) = kf.arrays();
    assert_eq!(max_rel_diff(&xi, xk), 0.0);
    assert_eq!(max_rel_diff(&pi, pk), 0.0);
    assert!(mu.iter().all(|m| *m == 1.0));
    let (xc, _) = imm.estimates().unwrap();
    assert_eq!(max_rel_diff(&xc, xk), 0.0);
}

/// The f32 bank against the f64 estimator, track by track, on 300 turning targets: combined
/// state and covariance (normwise relative, as the Kalman bank's checklist item 1) and mode
/// probabilities (absolute) within 1e-4 after one scan and 1e-3 after 100 (measured 1.6e-5 and
/// 8.7e-5: the mode weights pass through ln and exp in f32), every track's probabilities a
/// distribution.
#[test]
fn the_bank_matches_the_f64_imm() {
    let (tracks, steps) = (300, 100);
    let w = workload(71, tracks, steps);
    let mut bank = loaded(&w, tracks);
    let (mut worst1, mut worst_n) = (0.0f64, 0.0f64);
    for (k, z) in w.z.iter().enumerate() {
        assert_eq!(ImmFilterBank::step(&mut bank, z).unwrap(), 0);
        if k != 0 && k + 1 != steps {
            continue;
        }
        let (xc, mu) = bank.estimates().unwrap();
        let pc = bank.covariances().unwrap();
        for t in (0..tracks).step_by(7) {
            let (x, p, mu_ref) = reference(&w, t, k + 1);
            let dx = (0..4)
                .map(|e| (f64::from(xc[e * tracks + t]) - x[e]).abs())
                .fold(0.0, f64::max)
                / x.amax().max(1.0);
            let dp = (0..16)
                .map(|e| (f64::from(pc[e * tracks + t]) - p[(e / 4, e % 4)]).abs())
                .fold(0.0, f64::max)
                / p.amax();
            let dmu = (0..3)
                .map(|j| (f64::from(mu[j * tracks + t]) - mu_ref[j]).abs())
                .fold(0.0, f64::max);
            let worst = if k == 0 { &mut worst1 } else { &mut worst_n };
            *worst = worst.max(dx).max(dp).max(dmu);
        }
        for t in 0..tracks {
            let sum: f32 = (0..3).map(|j| mu[j * tracks + t]).sum();
            assert!((sum - 1.0).abs() < 1e-5, "track {t}: μ sums to {sum}");
        }
    }
    eprintln!("IMM bank against f64: {worst1:.1e} after one scan, {worst_n:.1e} after {steps}");
    assert!(worst1 <= 1e-4 && worst_n <= 1e-3, "{worst1:e} {worst_n:e}");
}

/// The turn's mode takes over in the turn: mean probability of the turn's own mode over the
/// tracks, 5 scans into their turns, above 0.5; and the combined error stays near the
/// measurement noise.
#[test]
fn the_turn_mode_takes_over_in_the_turn() {
    let (tracks, steps) = (400, 60);
    let w = workload(72, tracks, steps);
    let mut bank = loaded(&w, tracks);
    let (mut own, mut count, mut sq, mut n_sq) = (0.0f64, 0usize, 0.0f64, 0usize);
    for (k, z) in w.z.iter().enumerate() {
        ImmFilterBank::step(&mut bank, z).unwrap();
        let (xc, mu) = bank.estimates().unwrap();
        for t in 0..tracks {
            let truth = w.truth[k][t];
            sq += (0..2)
                .map(|a| (f64::from(xc[a * tracks + t]) - truth[a]).powi(2))
                .sum::<f64>();
            n_sq += 1;
            // The workload's turns: onset and sign recomputed from the truth's heading change.
            if k >= 6 {
                let before = w.truth[k - 5][t];
                let turn = (before[2] * truth[3] - before[3] * truth[2]).signum();
                let cross = (w.truth[k - 1][t][2] * truth[3] - w.truth[k - 1][t][3] * truth[2])
                    / (15.0 * 15.0);
                let five_back = (w.truth[k - 6][t][2] * w.truth[k - 5][t][3]
                    - w.truth[k - 6][t][3] * w.truth[k - 5][t][2])
                    / (15.0 * 15.0);
                // In a turn now and for the five scans before.
                if cross.abs() > 0.1 && five_back.abs() > 0.1 {
                    let mode = if turn > 0.0 { 1 } else { 2 };
                    own += f64::from(mu[mode * tracks + t]);
                    count += 1;
                }
            }
        }
    }
    let own = own / count.max(1) as f64;
    let rmse = (sq / n_sq as f64).sqrt();
    eprintln!("turn mode's mean probability in turns {own:.2} ({count} samples); RMSE {rmse:.2} m");
    assert!(count > 1000 && own > 0.5, "{own} over {count}");
    assert!(
        rmse < 2.0 * crate::testing::imm_bank::R.sqrt(),
        "RMSE {rmse}"
    );
}

/// A track whose covariance is not positive definite meets a singular update: counted, left as
/// it was, the others stepped.
#[test]
fn a_singular_track_is_counted_and_kept() {
    let w = workload(73, 3, 1);
    let mut bank = loaded(&w, 3);
    let (mut x, mut p, mu) = ImmFilterBank::read(&mut bank).unwrap();
    for k in 0..3 {
        for e in 0..16 {
            p[(k * 16 + e) * 3 + 1] = -1e9;
        }
    }
    ImmFilterBank::load(&mut bank, &x, &p, &mu).unwrap();
    assert_eq!(ImmFilterBank::step(&mut bank, &w.z[0]).unwrap(), 1);
    let (x2, p2, mu2) = ImmFilterBank::read(&mut bank).unwrap();
    for k in 0..3 {
        for e in 0..4 {
            assert_eq!(x2[(k * 4 + e) * 3 + 1], x[(k * 4 + e) * 3 + 1]);
        }
        assert_eq!(p2[(k * 16) * 3 + 1], p[(k * 16) * 3 + 1]);
        assert_eq!(mu2[k * 3 + 1], mu[k * 3 + 1]);
    }
    assert_ne!(x2[0], x[0]);
    x.clear();
}

/// What a bank cannot take is refused, naming the fix.
#[test]
fn bad_imm_banks_are_refused() {
    let w = workload(1, 2, 1);
    let good = w.model.clone();
    let cases = [
        ImmBankModel {
            models: vec![],
            ..good.clone()
        },
        ImmBankModel {
            models: vec![good.models[0].clone(); 5],
            transition: vec![0.2; 25],
        },
        ImmBankModel {
            transition: vec![0.5; 9],
            ..good.clone()
        },
        ImmBankModel {
            transition: vec![1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, f32::NAN],
            ..good.clone()
        },
        ImmBankModel {
            models: vec![
                good.models[0].clone(),
                bank_model(&model(3, 6, 3)),
                good.models[2].clone(),
            ],
            ..good.clone()
        },
    ];
    for bad in cases {
        let e = ImmBank::new(bad, 2, &[0.0; 4], &[0.0; 16], &[1.0, 0.0, 0.0]).unwrap_err();
        assert!(matches!(e, BankError::Model(_)), "{e}");
        assert!(e.to_string().contains("use"), "{e}");
    }
    let e = ImmBank::new(good.clone(), 2, &[0.0; 4], &[0.0; 16], &[0.0; 3]).unwrap_err();
    assert!(e.to_string().contains("not all 0"), "{e}");
    let mut bank = ImmBank::new(good, 2, &[0.0; 4], &[0.0; 16], &[1.0; 3]).unwrap();
    assert!(matches!(
        bank.step(&[0.0; 3]),
        Err(BankError::Length { what: "z", .. })
    ));
}
