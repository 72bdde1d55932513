//! Gates: where each pair's peak of a track's source can be this frame. A track predicts each
//! pair's TDOA from its estimate, with a spread from its state covariance carried through the
//! TDOAs (sigma points along the position's principal axes, so that the curved TDOA map of a
//! near or far source is followed, not linearised) plus the TDOA noise. A peak is in a pair's
//! gate when its normalised distance d = (τ − τ̂) / s is within `gate_sigmas`.

use nalgebra::{Matrix3, Vector3};

use crate::track::measure::likelihood::{LikelihoodConsts, predict_tdoas};
use crate::track::{Estimate, FilterParams, TrackStep};

/// One track's gates for a frame: per pair, the predicted TDOA (s) and the spread s (s) a
/// peak's distance is measured in.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Gates {
    pub predicted_s: Vec<f32>,
    pub spread_s: Vec<f32>,
}

impl Gates {
    /// Squared normalised distance of a TDOA `tau_s` on pair `p`.
    pub fn d2(&self, p: usize, tau_s: f32) -> f32 {
        let d = (tau_s - self.predicted_s[p]) / self.spread_s[p];
        d * d
    }

    /// The gate's half-width on pair `p` (s) at `sigmas`.
    pub fn half_width_s(&self, p: usize, sigmas: f32) -> f32 {
        sigmas * self.spread_s[p]
    }
}

/// Each track's gates for this frame (`rows`: its estimate, gates and rates; `steps`, its
/// step, in the same order): its estimate carried to the frame ([`carried`]), then its
/// predicted TDOAs with TDOA noise `sigma_s`; with `rates_of` (the hop, s: multi-frame
/// assignment), also how its TDOAs move, at the most agile model's acceleration.
pub fn predict_gates<'a>(
    rows: impl Iterator<Item = (&'a Estimate, &'a mut Gates, &'a mut Rates)>,
    steps: &[TrackStep],
    p: &FilterParams,
    sigma_s: f32,
    rates_of: Option<f64>,
) {
    // (The most agile model's acceleration: how fast a pair's TDOA rate may change.)
    let accel = p
        .models
        .iter()
        .map(|m| f64::from(m.accel_std))
        .fold(0.0, f64::max);
    for ((est, g, r), step) in rows.zip(steps) {
        let e = carried(est, f64::from(step.dt_s));
        *g = gates(p, &e, step.lag_s, sigma_s);
        if let Some(hop_s) = rates_of {
            *r = rates(p, &e, step.lag_s, accel, hop_s);
        }
    }
}

/// Estimate `e` carried `dt_s` on at constant velocity, the velocity's spread added to the
/// position's: where a track's gates are taken from.
pub fn carried(e: &Estimate, dt_s: f64) -> Estimate {
    let mut e = e.clone();
    for a in 0..3 {
        e.mean[a] += e.mean[3 + a] * dt_s;
    }
    for r in 0..3 {
        for c in 0..3 {
            e.cov[r][c] +=
                dt_s * (e.cov[3 + r][c] + e.cov[r][3 + c]) + dt_s * dt_s * e.cov[3 + r][3 + c];
        }
    }
    e
}

/// The gates of a track with estimate `est`, `lag_s` after its state time, with TDOA noise
/// `sigma_s`.
pub fn gates(p: &FilterParams, est: &Estimate, lag_s: f32, sigma_s: f32) -> Gates {
    let k = LikelihoodConsts::new(p, sigma_s);
    let state = |pos: &Vector3<f64>| -> [f32; 7] {
        [
            pos.x as f32,
            pos.y as f32,
            pos.z as f32,
            est.mean[3] as f32,
            est.mean[4] as f32,
            est.mean[5] as f32,
            est.turn_rate,
        ]
    };
    let mean = Vector3::new(est.mean[0], est.mean[1], est.mean[2]);
    let n = p.pairs.len();
    let mut predicted = vec![0.0f32; n];
    predict_tdoas(p, &k, &state(&mean), lag_s, &mut predicted);
    // The position covariance's square root: sigma points at ± each of its columns.
    let cov = Matrix3::from_fn(|r, c| est.cov[r][c]);
    let root = cov
        .symmetric_eigen()
        .eigenvectors
        .column_iter()
        .zip(cov.symmetric_eigen().eigenvalues.iter())
        .map(|(v, l)| v.into_owned() * l.max(0.0).sqrt())
        .collect::<Vec<_>>();
    let mut var = vec![0.0f64; n];
    let mut plus = vec![0.0f32; n];
    let mut minus = vec![0.0f32; n];
    for col in &root {
        if !col.iter().all(|v| v.is_finite()) {
            continue;
        }
        predict_tdoas(p, &k, &state(&(mean + col)), lag_s, &mut plus);
        predict_tdoas(p, &k, &state(&(mean - col)), lag_s, &mut minus);
        for i in 0..n {
            // Half the difference across the pair of points: one standard deviation along
            // this axis.
            let d = 0.5 * f64::from(plus[i] - minus[i]);
            var[i] += d * d;
        }
    }
    let noise = f64::from(sigma_s).powi(2);
    Gates {
        predicted_s: predicted,
        spread_s: var
            .iter()
            .map(|v| {
                let s = (v + noise).sqrt();
                if s.is_finite() {
                    s as f32
                } else {
                    f32::INFINITY
                }
            })
            .collect(),
    }
}

/// How each pair's TDOA moves over the next frames: its rate, the rate's variance from the
/// velocity's spread, and the power spectral density of the rate's random walk under
/// accelerations of `accel_std` per axis (s/s, s²/s², s²/s³). For a track with estimate `est`
/// at the frame (already carried to it) and frames `hop_s` apart; [`multi-frame
/// assignment`](crate::track::associate::mfa::pair_window) follows each pair's TDOA with them.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Rates {
    pub rate: Vec<f64>,
    pub rate_var: Vec<f64>,
    pub accel_psd: Vec<f64>,
}

/// Each pair's TDOA rate for a track (see [`Rates`]): finite differences of the predicted
/// TDOAs over one hop along the velocity, at the velocity's sigma points, and with one axis's
/// velocity raised by `accel_std` × 1 s at a time.
pub fn rates(p: &FilterParams, est: &Estimate, lag_s: f32, accel_std: f64, hop_s: f64) -> Rates {
    let k = LikelihoodConsts::new(p, p.tdoa_std_s);
    let n = p.pairs.len();
    let pos = Vector3::new(est.mean[0], est.mean[1], est.mean[2]);
    let vel = Vector3::new(est.mean[3], est.mean[4], est.mean[5]);
    // (The state's own velocity stays the estimate's in every evaluation: the TDOAs' small
    // correction for motion during the propagation is not what moves them between frames.)
    let at = |x: Vector3<f64>, out: &mut Vec<f32>| {
        let state = [
            x.x as f32,
            x.y as f32,
            x.z as f32,
            vel.x as f32,
            vel.y as f32,
            vel.z as f32,
            est.turn_rate,
        ];
        predict_tdoas(p, &k, &state, lag_s, out);
    };
    let tdoas = |v: &Vector3<f64>, out: &mut Vec<f32>| at(pos + v * hop_s, out);
    let mut now = vec![0.0f32; n];
    at(pos, &mut now);
    let rate_of = |v: &Vector3<f64>, out: &mut Vec<f32>| -> Vec<f64> {
        tdoas(v, out);
        out.iter()
            .zip(&now)
            .map(|(a, b)| f64::from(a - b) / hop_s)
            .collect()
    };
    let mut buf = vec![0.0f32; n];
    let rate = rate_of(&vel, &mut buf);
    let cov = Matrix3::from_fn(|r, c| est.cov[3 + r][3 + c]);
    let eig = cov.symmetric_eigen();
    let mut rate_var = vec![0.0f64; n];
    for (col, l) in eig.eigenvectors.column_iter().zip(eig.eigenvalues.iter()) {
        let d = col.into_owned() * l.max(0.0).sqrt();
        if !d.iter().all(|v| v.is_finite()) {
            continue;
        }
        let plus = rate_of(&(vel + d), &mut buf);
        let minus = rate_of(&(vel - d), &mut buf);
        for i in 0..n {
            rate_var[i] += (0.5 * (plus[i] - minus[i])).powi(2);
        }
    }
    let mut accel_psd = vec![0.0f64; n];
    for a in 0..3 {
        let mut v = vel;
        v[a] += accel_std;
        let up = rate_of(&v, &mut buf);
        for i in 0..n {
            accel_psd[i] += (up[i] - rate[i]).powi(2) * hop_s;
        }
    }
    Rates {
        rate,
        rate_var,
        accel_psd,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::workload::harbour_config;

    /// A track with a tight estimate has gates a TDOA noise wide; spreading its position widens
    /// every pair's gate by what the pair's TDOA moves over that spread (about |∇τ| σ).
    #[test]
    fn gates_widen_with_the_estimate_spread() {
        let p = harbour_config().filter_params();
        let sigma = p.tdoa_std_s;
        let mut est = Estimate::new(p.n_models());
        est.mean = [10.0, 5.0, -8.0, 0.0, 0.0, 0.0];
        for i in 0..6 {
            est.cov[i][i] = 1e-10;
        }
        let tight = gates(&p, &est, 0.01, sigma);
        for s in &tight.spread_s {
            assert!((s / sigma - 1.0).abs() < 1e-3, "{s} against {sigma}");
        }
        for i in 0..3 {
            est.cov[i][i] = 1.0;
        }
        let wide = gates(&p, &est, 0.01, sigma);
        assert_eq!(tight.predicted_s, wide.predicted_s);
        let c = 1500.0f64;
        for (i, (a, b)) in p.pairs.iter().enumerate() {
            // |∇τ| = |u_a − u_b| / c for unit vectors from the sensors to the source.
            let x = Vector3::new(10.0, 5.0, -8.0);
            let ua = (x - Vector3::from(p.sensors[*a as usize].map(f64::from))).normalize();
            let ub = (x - Vector3::from(p.sensors[*b as usize].map(f64::from))).normalize();
            let want = ((ua - ub).norm() / c).hypot(f64::from(sigma));
            let got = f64::from(wide.spread_s[i]);
            assert!(
                (got / want - 1.0).abs() < 0.02,
                "pair {i}: {got} against {want}"
            );
        }
        // A peak one spread away is at d² = 1.
        let tau = wide.predicted_s[0] + wide.spread_s[0];
        assert!((wide.d2(0, tau) - 1.0).abs() < 1e-4);
    }
    /// drawn from the estimate's own spread, with the TDOA noise added, the true TDOA
    /// falls inside a 3-spread gate in 99.73 % of draws (the normal's share), ± 0.5 %.
    #[test]
    fn gates_hold_the_truth_as_often_as_their_width_says() {
        use crate::rng::philox::{Stream, draw, normals4};
        use crate::track::measure::likelihood::{LikelihoodConsts, predict_tdoas};
        let p = harbour_config().filter_params();
        let sigma = p.tdoa_std_s;
        let k = LikelihoodConsts::new(&p, sigma);
        let mut est = Estimate::new(p.n_models());
        est.mean = [12.0, -4.0, -9.0, 0.0, 0.0, 0.0];
        // A correlated position spread of about 20 cm.
        let l = [[0.2, 0.0, 0.0], [0.05, 0.15, 0.0], [-0.03, 0.04, 0.1]];
        for r in 0..3 {
            for c in 0..3 {
                est.cov[r][c] = (0..3).map(|j| l[r][j] * l[c][j]).sum();
            }
        }
        let g = gates(&p, &est, 0.01, sigma);
        let n_pairs = p.pairs.len();
        let (mut inside, mut total) = (0usize, 0usize);
        let mut tau = vec![0.0f32; n_pairs];
        for i in 0..20_000u32 {
            let z = normals4(draw(7, 1, 0, i, Stream::Predict));
            let noise = normals4(draw(7, 2, 0, i, Stream::Predict));
            let x: Vec<f64> = (0..3)
                .map(|r| est.mean[r] + (0..3).map(|j| l[r][j] * f64::from(z[j])).sum::<f64>())
                .collect();
            let state = [x[0] as f32, x[1] as f32, x[2] as f32, 0.0, 0.0, 0.0, 0.0];
            predict_tdoas(&p, &k, &state, 0.01, &mut tau);
            for (pi, t) in tau.iter().enumerate() {
                let measured = t + sigma * noise[pi % 4];
                inside += usize::from(g.d2(pi, measured) <= 9.0);
                total += 1;
            }
        }
        let share = inside as f64 / total as f64;
        assert!((share - 0.9973).abs() < 0.005, "{share}");
    }
}
