use nalgebra::{DMatrix, DVector};

use super::*;
use crate::rng::philox::{normals4, philox4x32_10};
use crate::track::smooth::kalman::{LinearModel, symmetric, update as update64};

/// Standard normal number `i` of stream `s`.
fn normal(s: u32, i: usize) -> f64 {
    f64::from(normals4(philox4x32_10([(i / 4) as u32, s, 0, 0], [0xba4c, 9]))[i % 4])
}

/// A random symmetric positive-definite n×n matrix: A Aᵀ / n + `floor` I.
fn spd(s: u32, n: usize, scale: f64, floor: f64) -> DMatrix<f64> {
    let a = DMatrix::from_fn(n, n, |r, c| normal(s, r * n + c));
    (&a * a.transpose()) * (scale / n as f64) + DMatrix::identity(n, n) * floor
}

/// A random model with n states and m measurements: F a constant-velocity-like transition
/// with small random couplings, random SPD Q and R, a random H.
fn model(seed: u32, n: usize, m: usize) -> LinearModel {
    let f = DMatrix::from_fn(n, n, |r, c| {
        let base = if r == c {
            1.0
        } else if c == r + n / 2 && n % 2 == 0 {
            0.1
        } else {
            0.0
        };
        base + 0.02 * normal(seed, 100 + r * n + c)
    });
    LinearModel {
        f,
        q: spd(seed + 1, n, 0.01, 1e-3),
        h: DMatrix::from_fn(m, n, |r, c| normal(seed + 2, r * n + c)),
        r: spd(seed + 3, m, 1.0, 1.0),
    }
}

fn to_f32(m: &DMatrix<f64>) -> Vec<f32> {
    // Row-major.
    (0..m.nrows())
        .flat_map(|r| (0..m.ncols()).map(move |c| m[(r, c)] as f32))
        .collect()
}

fn bank_model(m: &LinearModel) -> BankModel {
    BankModel {
        n: m.f.nrows(),
        m: m.h.nrows(),
        f: to_f32(&m.f),
        q: to_f32(&m.q),
        h: to_f32(&m.h),
        r: to_f32(&m.r),
    }
}

/// Normwise relative difference of an f32 vector (row-major) from an f64 matrix.
fn rel(got: &[f32], want: &DMatrix<f64>) -> f64 {
    let want_v: Vec<f64> = (0..want.nrows())
        .flat_map(|r| (0..want.ncols()).map(move |c| want[(r, c)]))
        .collect();
    let diff: f64 = got
        .iter()
        .zip(&want_v)
        .map(|(a, b)| (f64::from(*a) - b).powi(2))
        .sum::<f64>()
        .sqrt();
    let norm: f64 = want_v.iter().map(|v| v * v).sum::<f64>().sqrt();
    diff / norm.max(1e-30)
}

/// Run `steps` predict + update steps of `filters` filters (each its own random start and
/// measurements) in f32 and in the f64 reference; returns the worst relative error of x and of
/// P over the filters, after checking every P symmetric and positive definite.
fn compare(
    seed: u32,
    n: usize,
    m: usize,
    filters: usize,
    steps: usize,
    check: usize,
) -> (f64, f64) {
    let lm = model(seed, n, m);
    let x0 = vec![0.0f32; n];
    let p0 = to_f32(&DMatrix::identity(n, n));
    let mut bank = KalmanBank::new(bank_model(&lm), filters, &x0, &p0).unwrap();
    // The f64 reference is run on every `check`-th filter (all of them for small banks).
    let watched: Vec<usize> = (0..filters).step_by(check).collect();
    let mut refs: Vec<(DVector<f64>, DMatrix<f64>)> = Vec::new();
    for j in 0..filters {
        let s = seed * 1000 + j as u32 % 50_000;
        let x = DVector::from_fn(n, |i, _| 3.0 * normal(s + 7, i));
        let p = spd(s + 11, n, 4.0, 0.5);
        let (xf, pf) = (x.iter().map(|v| *v as f32).collect::<Vec<_>>(), to_f32(&p));
        bank.set(j, &xf, &pf).unwrap();
        if j % check == 0 {
            // The reference starts from what the bank holds (rounded to f32).
            let x64 = DVector::from_iterator(n, xf.iter().map(|v| f64::from(*v)));
            let p64 = DMatrix::from_row_iterator(n, n, pf.iter().map(|v| f64::from(*v)));
            refs.push((x64, p64));
        }
    }
    let mut z = vec![0.0f32; m * filters];
    for k in 0..steps {
        for j in 0..filters {
            for i in 0..m {
                z[i * filters + j] = (5.0 * normal(seed + 50 + k as u32, j * m + i)) as f32;
            }
        }
        bank.predict();
        bank.update(&z).unwrap();
        assert_eq!(bank.singular, 0);
        for (w, (x, p)) in watched.iter().zip(refs.iter_mut()) {
            let xp = &lm.f * &*x;
            let pp = symmetric(&lm.f * &*p * lm.f.transpose() + &lm.q);
            let zj = DVector::from_fn(m, |i, _| f64::from(z[i * filters + w]));
            (*x, *p) = update64(&lm, &xp, &pp, &zj).unwrap();
        }
    }
    let (mut ex, mut ep) = (0.0f64, 0.0f64);
    for (w, (x, p)) in watched.iter().zip(&refs) {
        let got_p = bank.covariance(*w);
        let gp = DMatrix::from_row_iterator(n, n, got_p.iter().map(|v| f64::from(*v)));
        assert!(
            (&gp - gp.transpose()).norm() <= 1e-6 * gp.norm(),
            "P not symmetric"
        );
        assert!(gp.clone().cholesky().is_some(), "P not positive definite");
        ex = ex.max(rel(
            &bank.state(*w),
            &DMatrix::from_column_slice(n, 1, x.as_slice()),
        ));
        ep = ep.max(rel(&got_p, p));
    }
    (ex, ep)
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
