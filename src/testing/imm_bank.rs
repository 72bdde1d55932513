//! A random workload for the IMM bank ([`crate::track::kalman::imm_bank`]) and its f64
//! reference ([`crate::track::kalman::imm::Imm`]), shared by the bank's tests, the GPU parity
//! tests and the benchmark: T targets at 15 m/s in the plane, each straight, then turning left
//! or right at 0.15 rad/s for 25 s from a random scan, then straight; positions measured with
//! 2 m noise each second; the three-model set (constant velocity, a left and a right
//! coordinated turn, 20 s sojourns).

use nalgebra::{DMatrix, DVector};

use crate::testing::kalman::normal;
use crate::track::kalman::imm::{Imm, ImmState, coordinated_turn};
use crate::track::kalman::imm_bank::ImmBankModel;
use crate::track::smooth::kalman::LinearModel;

/// Scan interval (s), position noise variance (m²), the models' acceleration noise (m²/s³) and
/// the turn rate (rad/s).
pub const DT: f64 = 1.0;
pub const R: f64 = 4.0;
pub const Q: f64 = 0.05;
pub const OMEGA: f64 = 0.15;

/// The workload: the f64 estimator, its f32 bank model, every track's start (the layout of
/// the bank's `load`), each step's measurements (2 × T, structure of arrays) and truths.
pub struct ImmWorkload {
    pub imm: Imm,
    pub model: ImmBankModel,
    pub x: Vec<f32>,
    pub p: Vec<f32>,
    pub mu: Vec<f32>,
    pub z: Vec<Vec<f32>>,
    pub truth: Vec<Vec<[f64; 4]>>,
}

/// The three-model set.
pub fn three_models() -> Imm {
    let models = vec![
        LinearModel::constant_velocity(2, DT, Q, R),
        coordinated_turn(DT, OMEGA, Q, R),
        coordinated_turn(DT, -OMEGA, Q, R),
    ];
    // The sojourn matrix's rows are distributions by construction.
    Imm::new(models, Imm::sojourn_matrix(&[20.0; 3], DT)).expect("a valid three-model set")
}

/// `tracks` targets over `steps` scans from stream `seed`.
pub fn workload(seed: u32, tracks: usize, steps: usize) -> ImmWorkload {
    let imm = three_models();
    let model = ImmBankModel::from_imm(&imm);
    let (n, r) = (4, 3);
    let mut x = vec![0.0f32; r * n * tracks];
    let mut p = vec![0.0f32; r * n * n * tracks];
    let mut mu = vec![0.0f32; r * tracks];
    let mut truth_now = Vec::with_capacity(tracks);
    let mut turns = Vec::with_capacity(tracks);
    for t in 0..tracks {
        let heading = normal(seed, t * 8) * 3.0;
        let pos = [
            500.0 * normal(seed, t * 8 + 1),
            500.0 * normal(seed, t * 8 + 2),
        ];
        let v = [15.0 * heading.cos(), 15.0 * heading.sin()];
        truth_now.push([pos[0], pos[1], v[0], v[1]]);
        let onset = (normal(seed, t * 8 + 3).abs() * 20.0) as usize;
        let sign = if normal(seed, t * 8 + 4) > 0.0 {
            1.0
        } else {
            -1.0
        };
        turns.push((onset, sign));
        let start = [
            pos[0] + R.sqrt() * normal(seed + 1, t * 4),
            pos[1] + R.sqrt() * normal(seed + 1, t * 4 + 1),
            v[0] + 2.0 * normal(seed + 1, t * 4 + 2),
            v[1] + 2.0 * normal(seed + 1, t * 4 + 3),
        ];
        let diag = [R, R, 4.0, 4.0];
        for k in 0..r {
            for e in 0..n {
                x[(k * n + e) * tracks + t] = start[e] as f32;
                p[(k * n * n + e * n + e) * tracks + t] = diag[e] as f32;
            }
            mu[k * tracks + t] = [0.8, 0.1, 0.1][k];
        }
    }
    let cv = LinearModel::constant_velocity(2, DT, 0.0, R);
    let left = coordinated_turn(DT, OMEGA, 0.0, R);
    let right = coordinated_turn(DT, -OMEGA, 0.0, R);
    let mut z = Vec::with_capacity(steps);
    let mut truth = Vec::with_capacity(steps);
    for k in 0..steps {
        let mut zk = vec![0.0f32; 2 * tracks];
        for (t, s) in truth_now.iter_mut().enumerate() {
            let (onset, sign) = turns[t];
            let f = if (onset..onset + 25).contains(&k) {
                if sign > 0.0 { &left.f } else { &right.f }
            } else {
                &cv.f
            };
            let next = f * DVector::from_row_slice(s);
            *s = [next[0], next[1], next[2], next[3]];
            for a in 0..2 {
                let e = normal(seed + 2 + k as u32, t * 2 + a);
                zk[a * tracks + t] = (s[a] + R.sqrt() * e) as f32;
            }
        }
        z.push(zk);
        truth.push(truth_now.clone());
    }
    ImmWorkload {
        imm,
        model,
        x,
        p,
        mu,
        z,
        truth,
    }
}

/// Track t's f64 IMM state after `steps` scans, with the combined estimate (x, P) and the mode
/// probabilities of the last.
pub fn reference(
    w: &ImmWorkload,
    t: usize,
    steps: usize,
) -> (DVector<f64>, DMatrix<f64>, Vec<f64>) {
    let tracks = w.z[0].len() / 2;
    let (n, r) = (4, 3);
    let mut st = ImmState {
        x: (0..r)
            .map(|k| DVector::from_fn(n, |e, _| f64::from(w.x[(k * n + e) * tracks + t])))
            .collect(),
        p: (0..r)
            .map(|k| {
                DMatrix::from_fn(n, n, |a, b| {
                    f64::from(w.p[(k * n * n + a * n + b) * tracks + t])
                })
            })
            .collect(),
        mu: DVector::from_fn(r, |k, _| f64::from(w.mu[k * tracks + t])),
    };
    let (mut x, mut p) = w.imm.combined(&st);
    for zk in w.z.iter().take(steps) {
        let z = DVector::from_vec(vec![f64::from(zk[t]), f64::from(zk[tracks + t])]);
        if let Some(out) = w.imm.step(&mut st, &z) {
            x = out.x;
            p = out.p;
        }
    }
    (x, p, st.mu.iter().copied().collect())
}
