use nalgebra::{DMatrix, DVector};

use super::*;
use crate::rng::philox::{normals4, philox4x32_10};
use crate::track::report::{EndReason, TrackStatus, report};
use crate::track::{Estimate, ModelKind};

const DT: f64 = 0.05;
const Q: f64 = 0.2;
const R: f64 = 0.25;

fn normals(run: u32, k: usize, lane: u32) -> [f64; 4] {
    normals4(philox4x32_10([k as u32, run, lane, 0], [0x5300, 7])).map(f64::from)
}

fn models() -> Vec<MotionModel> {
    vec![MotionModel {
        kind: ModelKind::Cv,
        accel_std: Q.sqrt() as f32,
        turn_rate_std: 0.0,
        velocity_decay_s: 1.0,
    }]
}

/// A 3-D constant-velocity source with white-noise acceleration (density Q) measured in
/// position (variance R per axis) every DT, run through the matching Kalman filter: its true
/// states and its filtered states as a track's reports.
fn filtered_track(run: u32, steps: usize) -> (Vec<DVector<f64>>, Vec<TrackReport>) {
    let m = LinearModel::constant_velocity(3, DT, Q, R);
    let q_chol = m.q.clone().cholesky().map(|c| c.l()).unwrap();
    let mut x = DVector::from_vec(vec![10.0, -5.0, -3.0, 1.0, 0.5, 0.0]);
    let mut xf = DVector::from_vec(vec![10.0, -5.0, -3.0, 0.0, 0.0, 0.0]);
    let mut pf = DMatrix::from_diagonal(&DVector::from_vec(vec![1.0, 1.0, 1.0, 4.0, 4.0, 4.0]));
    let (mut truth, mut reports) = (Vec::new(), Vec::new());
    for k in 0..steps {
        let (a, b) = (normals(run, k, 0), normals(run, k, 1));
        if k > 0 {
            x = &m.f * &x + &q_chol * DVector::from_vec(vec![a[0], a[1], a[2], a[3], b[0], b[1]]);
            xf = &m.f * &xf;
            pf = &m.f * &pf * m.f.transpose() + &m.q;
        }
        let c = normals(run, k, 2);
        let z = &m.h * &x + DVector::from_vec(vec![c[0], c[1], c[2]]) * R.sqrt();
        (xf, pf) = super::super::kalman::update(&m, &xf, &pf, &z).unwrap();
        let mut e = Estimate::new(1);
        e.model_probs = vec![1.0];
        e.mean = std::array::from_fn(|i| xf[i]);
        e.cov = std::array::from_fn(|i| std::array::from_fn(|j| pf[(i, j)]));
        let t = k as f64 * DT;
        let status = TrackStatus::Confirmed;
        reports.push(report(
            7,
            t,
            &e,
            status,
            k as u64,
            t,
            None,
            Kinematics::ThreeD,
            None,
        ));
        truth.push(x.clone());
    }
    (truth, reports)
}

fn end(id: u64) -> TrackEnd {
    TrackEnd {
        id,
        reason: EndReason::Lost,
        detail: String::new(),
        was_confirmed: true,
    }
}

/// Position RMSE and mean position NEES of reports against the true states, after `skip`.
fn rmse_nees(truth: &[DVector<f64>], reports: &[TrackReport], skip: usize) -> (f64, f64) {
    let (mut se, mut nees, mut n) = (0.0, 0.0, 0.0);
    for (x, r) in truth.iter().zip(reports).skip(skip) {
        let e = nalgebra::Vector3::new(
            r.position[0] - x[0],
            r.position[1] - x[1],
            r.position[2] - x[2],
        );
        let p = nalgebra::Matrix3::from_fn(|i, j| r.pos_cov[i][j]);
        se += e.norm_squared();
        nees += (e.transpose() * p.try_inverse().unwrap() * e)[(0, 0)];
        n += 1.0;
    }
    ((se / n).sqrt(), nees / n)
}

/// Where the filter's summaries are a linear Kalman filter's with the moment-matched model,
/// the smoother is exactly RTS: the smoothed error is well under the filtered one and the
/// smoothed covariance covers it (mean NEES near 3 for positions, over 40 runs).
#[test]
fn interval_smoothing_of_kalman_summaries_is_rts_and_honest() {
    let (mut f_se, mut s_se, mut s_nees, mut runs) = (0.0, 0.0, 0.0, 0.0);
    for run in 0..40 {
        let (truth, reports) = filtered_track(run, 400);
        let mut sm = TrackSmoother::new(Mode::Interval, &models());
        let mut out = Vec::new();
        for r in &reports {
            out.extend(sm.push(std::slice::from_ref(r), &[]));
        }
        assert!(out.is_empty(), "nothing before the track ends");
        assert_eq!(sm.held(), 400);
        out.extend(sm.push(&[], &[end(7)]));
        assert_eq!(sm.held(), 0);
        assert_eq!(out.len(), reports.len());
        for (a, b) in out.iter().zip(&reports) {
            assert_eq!(
                (a.id, a.seq, a.estimate),
                (b.id, b.seq, EstimateKind::Smoothed)
            );
        }
        let (fr, _) = rmse_nees(&truth, &reports, 50);
        let (sr, sn) = rmse_nees(&truth, &out, 50);
        f_se += fr * fr;
        s_se += sr * sr;
        s_nees += sn;
        runs += 1.0;
        assert_eq!(sm.failures, 0);
    }
    let (f, s, nees) = ((f_se / runs).sqrt(), (s_se / runs).sqrt(), s_nees / runs);
    assert!(s < 0.75 * f, "smoothed {s:.4} m against filtered {f:.4} m");
    assert!(
        (2.7..3.3).contains(&nees),
        "smoothed position NEES {nees:.3}"
    );
}

/// The lagged report of frame k is RTS over the track's data up to k + L; every filtered
/// report gets exactly one lagged one, those of a track's last L frames when it ends.
#[test]
fn lagged_reports_are_rts_up_to_the_lag_and_one_per_report() {
    let (_, reports) = filtered_track(3, 60);
    for lag in [0usize, 1, 8] {
        let mut sm = TrackSmoother::new(Mode::Lag(lag), &models());
        let mut out = Vec::new();
        for (k, r) in reports.iter().enumerate() {
            let got = sm.push(std::slice::from_ref(r), &[]);
            if k >= lag {
                assert_eq!(got.len(), 1, "lag {lag}, frame {k}");
                let want = smooth_reports(&reports[..=k], &models()).unwrap();
                let s = &want[k - lag];
                for i in 0..6 {
                    let d = got[0].state.mean[i] - s.x[i];
                    assert!(d.abs() < 1e-8, "lag {lag} k {k} i {i}: {d}");
                }
                assert_eq!(got[0].seq, (k - lag) as u64);
            } else {
                assert!(got.is_empty());
            }
            out.extend(got);
        }
        out.extend(sm.push(&[], &[end(7)]));
        let seqs: Vec<u64> = out.iter().map(|r| r.seq).collect();
        assert_eq!(seqs, (0..60).collect::<Vec<u64>>(), "lag {lag}");
        assert!(out.iter().all(|r| r.estimate == EstimateKind::Lagged));
        assert_eq!(sm.held(), 0);
    }
}

/// Tracks still alive at the end of the stream are smoothed by `finish`; two tracks' reports
/// stay apart.
#[test]
fn finish_smooths_the_tracks_still_alive() {
    let (_, a) = filtered_track(1, 30);
    let mut sm = TrackSmoother::new(Mode::Interval, &models());
    for r in &a {
        let mut b = r.clone();
        b.id = 8;
        assert!(sm.push(&[r.clone(), b], &[]).is_empty());
    }
    let out = sm.finish();
    assert_eq!(out.len(), 60);
    assert_eq!(out.iter().filter(|r| r.id == 7).count(), 30);
    assert_eq!(out.iter().filter(|r| r.id == 8).count(), 30);
}

/// A plane-wave track's state lies on the unit sphere (its covariance is singular along the
/// direction): the smoother still runs and reports unit directions.
#[test]
fn direction_tracks_on_the_sphere_smooth_without_failing() {
    let mut reports = Vec::new();
    for k in 0..50 {
        let a = 0.3 + 0.01 * k as f64;
        let u = nalgebra::Vector3::new(a.cos(), a.sin(), 0.0);
        let t = nalgebra::Vector3::new(-a.sin(), a.cos(), 0.0);
        let z = nalgebra::Vector3::z();
        let pc = t * t.transpose() * 1e-4 + z * z.transpose() * 1e-4;
        let mut e = Estimate::new(1);
        e.model_probs = vec![1.0];
        let v = t * 0.2;
        e.mean = [u.x, u.y, u.z, v.x, v.y, v.z];
        for r in 0..3 {
            for c in 0..3 {
                e.cov[r][c] = pc[(r, c)];
                e.cov[3 + r][3 + c] = pc[(r, c)] * 10.0;
            }
        }
        let tk = k as f64 * DT;
        let st = TrackStatus::Confirmed;
        reports.push(report(1, tk, &e, st, k, tk, None, Kinematics::Plane, None));
    }
    let mut sm = TrackSmoother::new(Mode::Interval, &models());
    for r in &reports {
        sm.push(std::slice::from_ref(r), &[]);
    }
    let out = sm.finish();
    assert_eq!(sm.failures, 0);
    assert_eq!(out.len(), 50);
    for r in &out {
        let n = nalgebra::Vector3::from(r.position).norm();
        assert!((n - 1.0).abs() < 1e-9, "{n}");
    }
}
