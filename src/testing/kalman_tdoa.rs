//! A random workload for the Kalman bank's extended (TDOA) step and its f64 reference, shared by
//! the bank's tests and the GPU parity tests: sources moving at constant velocity 20-60 m from a
//! five-sensor array, each pair measuring the range difference with noise, and the same
//! sequential per-pair extended filter in f64.

use nalgebra::{DMatrix, DVector};

use crate::testing::kalman::{bank_model, normal};
use crate::track::kalman::bank::BankModel;
use crate::track::kalman::tdoa::{TdoaGeometry, Unscented};
use crate::track::smooth::kalman::LinearModel;

/// Frame step of the workload, seconds.
pub const DT: f64 = 0.1;
/// Range-difference noise, m (standard deviation).
pub const SIGMA_M: f64 = 0.01;

/// One workload: the model, the geometry, every filter's truth (6 × M per step, structure of
/// arrays, step 0 first), its starting state and covariance, and every step's measurements
/// (pairs × M).
pub struct TdoaWorkload {
    pub model: LinearModel,
    pub bank_model: BankModel,
    pub geo: TdoaGeometry,
    pub x0: Vec<f32>,
    pub p0: Vec<f32>,
    pub truth: Vec<Vec<f64>>,
    pub z: Vec<Vec<f32>>,
}

/// The array: four sensors on a 10 m tetrahedron and one at its centre; every pair.
pub fn geometry() -> TdoaGeometry {
    let sensors = vec![
        [0.0, 0.0, 0.0],
        [10.0, 0.0, -2.0],
        [-3.0, 9.0, -4.0],
        [-4.0, -8.0, -6.0],
        [1.0, 1.0, -10.0],
    ];
    let pairs = (0..5u32)
        .flat_map(|a| (a + 1..5).map(move |b| (a, b)))
        .collect();
    TdoaGeometry {
        sensors,
        pairs,
        r: (SIGMA_M * SIGMA_M) as f32,
    }
}

/// `filters` sources over `steps` steps from stream `seed`: 20-60 m from the array, priors 1 m
/// and 0.5 m/s off (standard deviations).
pub fn workload(seed: u32, filters: usize, steps: usize) -> TdoaWorkload {
    workload_at(seed, filters, steps, (20.0, 60.0), 1.0)
}

/// As [`workload`], with the sources' ranges in `range` (metres) and the priors' position
/// error `prior_m` (standard deviation, metres; the covariance says the same).
pub fn workload_at(
    seed: u32,
    filters: usize,
    steps: usize,
    range: (f64, f64),
    prior_m: f64,
) -> TdoaWorkload {
    let model = LinearModel::constant_velocity(3, DT, 0.01, 1.0);
    let geo = geometry();
    let at = |s: u32, j: usize, k: usize| normal(s, j * 8 + k);
    let mut x = vec![0.0f64; 6 * filters];
    let mut x0 = vec![0.0f32; 6 * filters];
    for j in 0..filters {
        let range = range.0 + (range.1 - range.0) * (0.5 + 0.5 * at(seed, j, 0).tanh());
        let az = at(seed, j, 1) * 3.0;
        let pos = [
            range * az.cos(),
            range * az.sin(),
            -5.0 + 3.0 * at(seed, j, 2),
        ];
        for a in 0..3 {
            x[a * filters + j] = pos[a];
            x[(3 + a) * filters + j] = at(seed + 1, j, a);
            x0[a * filters + j] = (pos[a] + prior_m * at(seed + 2, j, a)) as f32;
            x0[(3 + a) * filters + j] =
                (x[(3 + a) * filters + j] + 0.5 * at(seed + 2, j, 3 + a)) as f32;
        }
    }
    let v = prior_m * prior_m;
    let p_start = DMatrix::from_diagonal(&DVector::from_vec(vec![v, v, v, 0.25, 0.25, 0.25]));
    let p0 = crate::track::kalman::bank::replicated(
        &[0.0; 6],
        &crate::testing::kalman::to_f32(&p_start),
        filters,
    )
    .1;
    let mut truth = Vec::with_capacity(steps);
    let mut z = Vec::with_capacity(steps);
    for k in 0..steps {
        for j in 0..filters {
            for a in 0..3 {
                let v = x[(3 + a) * filters + j];
                x[a * filters + j] += v * DT;
            }
        }
        let mut zk = vec![0.0f32; geo.pairs.len() * filters];
        for j in 0..filters {
            let p = [x[j], x[filters + j], x[2 * filters + j]];
            for (i, &(a, b)) in geo.pairs.iter().enumerate() {
                let rd = dist(&p, &geo.sensors[a as usize]) - dist(&p, &geo.sensors[b as usize]);
                let e = normal(seed + 10 + k as u32, j * geo.pairs.len() + i);
                zk[i * filters + j] = (rd + SIGMA_M * e) as f32;
            }
        }
        truth.push(x.clone());
        z.push(zk);
    }
    TdoaWorkload {
        bank_model: bank_model(&model),
        model,
        geo,
        x0,
        p0,
        truth,
        z,
    }
}

fn dist(p: &[f64; 3], s: &[f32; 3]) -> f64 {
    let d: f64 = (0..3).map(|a| (p[a] - f64::from(s[a])).powi(2)).sum();
    d.sqrt()
}

/// The f64 reference: filter j's state and covariance after `steps` of the workload (predict,
/// then one scalar Joseph update per pair at the state so far).
pub fn reference(w: &TdoaWorkload, j: usize, steps: usize) -> (DVector<f64>, DMatrix<f64>) {
    let filters = w.x0.len() / 6;
    let mut x = DVector::from_fn(6, |e, _| f64::from(w.x0[e * filters + j]));
    let mut p = DMatrix::from_fn(6, 6, |r, c| f64::from(w.p0[(r * 6 + c) * filters + j]));
    let r = f64::from(w.geo.r);
    for zk in w.z.iter().take(steps) {
        x = &w.model.f * &x;
        p = &w.model.f * &p * w.model.f.transpose() + &w.model.q;
        for (i, &(a, b)) in w.geo.pairs.iter().enumerate() {
            let pos = [x[0], x[1], x[2]];
            let (sa, sb) = (&w.geo.sensors[a as usize], &w.geo.sensors[b as usize]);
            let (ra, rb) = (dist(&pos, sa), dist(&pos, sb));
            let h = DMatrix::from_fn(1, 6, |_, c| {
                if c < 3 {
                    (pos[c] - f64::from(sa[c])) / ra - (pos[c] - f64::from(sb[c])) / rb
                } else {
                    0.0
                }
            });
            let s = (&h * &p * h.transpose())[(0, 0)] + r;
            let k = &p * h.transpose() / s;
            let innov = f64::from(zk[i * filters + j]) - (ra - rb);
            x += &k * innov;
            let a_mat = DMatrix::identity(6, 6) - &k * &h;
            p = &a_mat * &p * a_mat.transpose() + &k * k.transpose() * r;
        }
    }
    (x, p)
}

/// The unscented filter's f64 reference, the textbook form: filter j after `steps` of the
/// workload (predict, then per pair: sigma points x ± γ·chol(P)ᵢ, ŷ, S = Σ wᶜ (y − ŷ)² + R,
/// P_xy, K = P_xy / S, x += K (z − ŷ), P −= K S Kᵀ).
pub fn reference_unscented(
    w: &TdoaWorkload,
    ut: &Unscented,
    j: usize,
    steps: usize,
) -> (DVector<f64>, DMatrix<f64>) {
    let filters = w.x0.len() / 6;
    let mut x = DVector::from_fn(6, |e, _| f64::from(w.x0[e * filters + j]));
    let mut p = DMatrix::from_fn(6, 6, |r, c| f64::from(w.p0[(r * 6 + c) * filters + j]));
    let r = f64::from(w.geo.r);
    let (alpha, beta, kappa) = (f64::from(ut.alpha), f64::from(ut.beta), f64::from(ut.kappa));
    let spread = alpha * alpha * (6.0 + kappa);
    let lambda = spread - 6.0;
    let (w0m, wi) = (lambda / spread, 0.5 / spread);
    let w0c = w0m + 1.0 - alpha * alpha + beta;
    for zk in w.z.iter().take(steps) {
        x = &w.model.f * &x;
        p = &w.model.f * &p * w.model.f.transpose() + &w.model.q;
        for (i, &(a, b)) in w.geo.pairs.iter().enumerate() {
            let (sa, sb) = (&w.geo.sensors[a as usize], &w.geo.sensors[b as usize]);
            let rd = |v: &DVector<f64>| {
                let pos = [v[0], v[1], v[2]];
                dist(&pos, sa) - dist(&pos, sb)
            };
            let Some(chol) = p.clone().cholesky() else {
                continue;
            };
            let l = chol.l() * spread.sqrt();
            let mut points = vec![(x.clone(), w0m, w0c)];
            for c in 0..6 {
                points.push((&x + l.column(c), wi, wi));
                points.push((&x - l.column(c), wi, wi));
            }
            let ys: Vec<f64> = points.iter().map(|(v, _, _)| rd(v)).collect();
            let mean: f64 = points.iter().zip(&ys).map(|((_, wm, _), y)| wm * y).sum();
            let s = points
                .iter()
                .zip(&ys)
                .map(|((_, _, wc), y)| wc * (y - mean).powi(2))
                .sum::<f64>()
                + r;
            let pxy = points
                .iter()
                .zip(&ys)
                .fold(DVector::zeros(6), |acc, ((v, _, wc), y)| {
                    acc + (v - &x) * (wc * (y - mean))
                });
            let k = &pxy / s;
            x += &k * (f64::from(zk[i * filters + j]) - mean);
            p -= &k * k.transpose() * s;
        }
    }
    (x, p)
}

/// Position RMSE and mean position NEES of a bank of this workload's filters against the truth
/// of one step (6 × M, structure of arrays); a singular covariance counts 0 NEES.
pub fn score(bank: &crate::track::kalman::bank::KalmanBank, truth: &[f64]) -> (f64, f64) {
    let filters = bank.len();
    let (mut sq, mut nees) = (0.0, 0.0);
    for j in 0..filters {
        let x = bank.state(j);
        let d = nalgebra::Vector3::from_fn(|a, _| f64::from(x[a]) - truth[a * filters + j]);
        let c = bank.covariance(j);
        let pc = nalgebra::Matrix3::from_fn(|r, cc| f64::from(c[r * 6 + cc]));
        sq += d.norm_squared();
        nees += d.dot(&(pc.try_inverse().unwrap_or_else(nalgebra::Matrix3::zeros) * d));
    }
    ((sq / filters as f64).sqrt(), nees / filters as f64)
}
