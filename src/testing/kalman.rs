//! Random Kalman bank workloads and their f64 reference, shared by the bank's own tests and the
//! GPU parity tests: a random model near constant velocity, random starts and measurements, and
//! the worst normwise error of a bank (any backend) against the f64 filter.

use nalgebra::{DMatrix, DVector};

use crate::rng::philox::{normals4, philox4x32_10};
use crate::track::kalman::bank::{BankError, BankModel, FilterBank};
use crate::track::smooth::Record;
use crate::track::smooth::kalman::{LinearModel, filter, symmetric, update as update64};

/// Standard normal number `i` of stream `s`.
pub fn normal(s: u32, i: usize) -> f64 {
    f64::from(normals4(philox4x32_10([(i / 4) as u32, s, 0, 0], [0xba4c, 9]))[i % 4])
}

/// A random symmetric positive-definite n×n matrix: A Aᵀ / n + `floor` I.
pub fn spd(s: u32, n: usize, scale: f64, floor: f64) -> DMatrix<f64> {
    let a = DMatrix::from_fn(n, n, |r, c| normal(s, r * n + c));
    (&a * a.transpose()) * (scale / n as f64) + DMatrix::identity(n, n) * floor
}

/// A random model with n states and m measurements: F a constant-velocity-like transition
/// with small random couplings, random SPD Q and R, a random H.
pub fn model(seed: u32, n: usize, m: usize) -> LinearModel {
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

/// Row-major f32 values of a matrix.
pub fn to_f32(m: &DMatrix<f64>) -> Vec<f32> {
    (0..m.nrows())
        .flat_map(|r| (0..m.ncols()).map(move |c| m[(r, c)] as f32))
        .collect()
}

/// The bank's form of a model.
pub fn bank_model(m: &LinearModel) -> BankModel {
    BankModel::from_linear(m)
}

/// Filter j of a CPU bank against an f64 state and covariance: the larger of the worst
/// absolute errors of x (over max(|x|, 1)) and of P (over max |P|).
pub fn filter_error(
    bank: &crate::track::kalman::bank::KalmanBank,
    j: usize,
    x: &DVector<f64>,
    p: &DMatrix<f64>,
) -> f64 {
    let n = x.len();
    let (xs, ps) = (bank.state(j), bank.covariance(j));
    let dx = (0..n)
        .map(|e| (f64::from(xs[e]) - x[e]).abs())
        .fold(0.0, f64::max)
        / x.amax().max(1.0);
    let dp = (0..n * n)
        .map(|e| (f64::from(ps[e]) - p[(e / n, e % n)]).abs())
        .fold(0.0, f64::max)
        / p.amax();
    dx.max(dp)
}

/// Normwise relative difference of an f32 vector (row-major) from an f64 matrix.
pub fn rel(got: &[f32], want: &DMatrix<f64>) -> f64 {
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

/// Filter j's values of element-major arrays of `filters` filters (`per` elements each).
pub fn column(v: &[f32], per: usize, filters: usize, j: usize) -> Vec<f32> {
    (0..per).map(|e| v[e * filters + j]).collect()
}

/// What [`compare`] found.
#[derive(Debug, Clone)]
pub struct Comparison {
    /// Worst normwise relative error of x and of P over the watched filters.
    pub x_err: f64,
    pub p_err: f64,
    /// Singular updates counted over the run.
    pub singular: usize,
    /// The bank's final arrays (x, P), for comparing backends with each other.
    pub x: Vec<f32>,
    pub p: Vec<f32>,
}

/// Give each of `bank`'s filters a random start, run `steps` predict + update steps (in one
/// pass when `fused`) on random measurements in the bank and in the f64 reference (on every
/// `check`-th filter), and compare. Every watched P must stay symmetric and positive definite
/// (an error otherwise).
pub fn compare(
    bank: &mut dyn FilterBank,
    lm: &LinearModel,
    seed: u32,
    steps: usize,
    check: usize,
    fused: bool,
) -> Result<Comparison, String> {
    let (n, m, filters) = (lm.f.nrows(), lm.h.nrows(), bank.filters());
    let e = |e: BankError| e.to_string();
    let mut xs = vec![0.0f32; n * filters];
    let mut ps = vec![0.0f32; n * n * filters];
    let mut refs: Vec<(usize, DVector<f64>, DMatrix<f64>)> = Vec::new();
    for j in 0..filters {
        let s = seed * 1000 + j as u32 % 50_000;
        let x = DVector::from_fn(n, |i, _| 3.0 * normal(s + 7, i));
        let p = spd(s + 11, n, 4.0, 0.5);
        let (xf, pf) = (x.iter().map(|v| *v as f32).collect::<Vec<_>>(), to_f32(&p));
        for (i, v) in xf.iter().enumerate() {
            xs[i * filters + j] = *v;
        }
        for (i, v) in pf.iter().enumerate() {
            ps[i * filters + j] = *v;
        }
        if j % check == 0 {
            // The reference starts from what the bank holds (rounded to f32).
            let x64 = DVector::from_iterator(n, xf.iter().map(|v| f64::from(*v)));
            let p64 = DMatrix::from_row_iterator(n, n, pf.iter().map(|v| f64::from(*v)));
            refs.push((j, x64, p64));
        }
    }
    bank.load(&xs, &ps).map_err(e)?;
    let mut z = vec![0.0f32; m * filters];
    let mut singular = 0;
    for k in 0..steps {
        for j in 0..filters {
            for i in 0..m {
                z[i * filters + j] = (5.0 * normal(seed + 50 + k as u32, j * m + i)) as f32;
            }
        }
        singular += if fused {
            bank.step(&z).map_err(e)?
        } else {
            bank.predict().map_err(e)?;
            bank.update(&z).map_err(e)?
        };
        for (w, x, p) in refs.iter_mut() {
            let xp = &lm.f * &*x;
            let pp = symmetric(&lm.f * &*p * lm.f.transpose() + &lm.q);
            let zj = DVector::from_fn(m, |i, _| f64::from(z[i * filters + *w]));
            (*x, *p) = update64(lm, &xp, &pp, &zj).ok_or("the f64 reference went singular")?;
        }
    }
    let (xs, ps) = bank.read().map_err(e)?;
    let (mut x_err, mut p_err) = (0.0f64, 0.0f64);
    for (w, x, p) in &refs {
        let got_p = column(&ps, n * n, filters, *w);
        let gp = DMatrix::from_row_iterator(n, n, got_p.iter().map(|v| f64::from(*v)));
        if (&gp - gp.transpose()).norm() > 1e-6 * gp.norm() {
            return Err(format!("filter {w}: P not symmetric"));
        }
        if gp.clone().cholesky().is_none() {
            return Err(format!("filter {w}: P not positive definite"));
        }
        let got_x = column(&xs, n, filters, *w);
        x_err = x_err.max(rel(&got_x, &DMatrix::from_column_slice(n, 1, x.as_slice())));
        p_err = p_err.max(rel(&got_p, p));
    }
    Ok(Comparison {
        x_err,
        p_err,
        singular,
        x: xs,
        p: ps,
    })
}

/// The worst difference between two backends' arrays, relative to the largest magnitude.
pub fn max_rel_diff(a: &[f32], b: &[f32]) -> f64 {
    let scale = a.iter().fold(0.0f32, |m, v| m.max(v.abs())).max(1e-30);
    let worst = a
        .iter()
        .zip(b)
        .fold(0.0f32, |m, (x, y)| m.max((x - y).abs()));
    f64::from(worst / scale)
}

/// Standard normals for run `run`, step `k`: (process noise 2, measurement noise 2).
pub fn seed_noise(run: u32, k: usize) -> [f64; 4] {
    normals4(philox4x32_10([k as u32, run, 0, 0], [0x5eed, 2])).map(f64::from)
}

/// A run of the seed 002 scenario (a 2-D constant-velocity target, T = 1 s, q = 0.1 m²/s³, R =
/// 10 m² per axis, initial velocity (10, 5) m/s): the true states and the measurements.
pub fn seed_scenario(
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

/// The seed 002 scenario's model.
pub fn seed_model() -> LinearModel {
    LinearModel::constant_velocity(2, 1.0, 0.1, 10.0)
}

/// Its prior: P₀ = diag(100, 100, 25, 25).
pub fn seed_prior() -> (DVector<f64>, DMatrix<f64>) {
    (
        DVector::from_vec(vec![0.0, 0.0, 10.0, 5.0]),
        DMatrix::from_diagonal(&DVector::from_vec(vec![100.0, 100.0, 25.0, 25.0])),
    )
}

/// Run `run` of `steps` steps: the true states and the forward filter's records.
pub fn seed_records(run: u32, steps: usize) -> (Vec<DVector<f64>>, Vec<Record>) {
    let m = seed_model();
    let (truth, zs) = seed_scenario(&m, run, steps);
    let (x0, p0) = seed_prior();
    (truth, filter(&m, &x0, &p0, &zs).unwrap())
}
