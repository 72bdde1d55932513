//! Motion models and model switching, per particle. `kernels/pf.cu` mirrors these functions line
//! for line; change both together.
//!
//! State: position p (3), velocity v (3), turn rate ω. Noise: four standard normals per step
//! (three accelerations and one turn-rate increment) from the particle's Philox block.

use crate::config::{ModelKind, TrackMode};
use crate::track::MotionModel;

/// Advance one particle by `dt` under `model`. `n` are four standard normals.
#[inline(always)]
pub fn predict(model: &MotionModel, mode: TrackMode, dt: f32, s: &mut [f32; 7], n: [f32; 4]) {
    let ax = model.accel_std * n[0];
    let ay = model.accel_std * n[1];
    let az = model.accel_std * n[2];
    match model.kind {
        ModelKind::Cv => {
            // Piecewise-constant white acceleration over the step.
            let h = 0.5 * dt * dt;
            s[0] += s[3] * dt + ax * h;
            s[1] += s[4] * dt + ay * h;
            s[2] += s[5] * dt + az * h;
            s[3] += ax * dt;
            s[4] += ay * dt;
            s[5] += az * dt;
        }
        ModelKind::Ct => {
            // Coordinated turn in the horizontal plane at rate ω (a random walk), vertical CV.
            let w = s[6] + model.turn_rate_std * dt.sqrt() * n[3];
            let wt = w * dt;
            let (sn, cs) = wt.sin_cos();
            // sin(ωT)/ω and (1 - cos(ωT))/ω, by series near ω = 0.
            let (a, b) = if wt.abs() < 1e-4 {
                (dt * (1.0 - wt * wt / 6.0), dt * wt * 0.5)
            } else {
                (sn / w, (1.0 - cs) / w)
            };
            let (vx, vy) = (s[3], s[4]);
            let h = 0.5 * dt * dt;
            s[0] += a * vx - b * vy + ax * h;
            s[1] += b * vx + a * vy + ay * h;
            s[2] += s[5] * dt + az * h;
            s[3] = cs * vx - sn * vy + ax * dt;
            s[4] = sn * vx + cs * vy + ay * dt;
            s[5] += az * dt;
            s[6] = w;
        }
        ModelKind::Static => {
            // Velocity relaxes to zero with time constant τ; a little velocity noise keeps the
            // particles from collapsing onto one point.
            let decay = (-dt / model.velocity_decay_s).exp();
            s[3] = s[3] * decay + ax * dt;
            s[4] = s[4] * decay + ay * dt;
            s[5] = s[5] * decay + az * dt;
            s[0] += s[3] * dt;
            s[1] += s[4] * dt;
            s[2] += s[5] * dt;
        }
    }
    if mode == TrackMode::Direction {
        // The "position" is a unit direction and the velocity its rate of change: project back
        // onto the sphere and its tangent plane.
        let norm = (s[0] * s[0] + s[1] * s[1] + s[2] * s[2]).sqrt().max(1e-12);
        s[0] /= norm;
        s[1] /= norm;
        s[2] /= norm;
        let radial = s[3] * s[0] + s[4] * s[1] + s[5] * s[2];
        s[3] -= radial * s[0];
        s[4] -= radial * s[1];
        s[5] -= radial * s[2];
    }
}

/// Next model index from the cumulative transition row of `from`, given a uniform in (0, 1).
#[inline(always)]
pub fn switch_model(cdf: &[f32], n_models: usize, from: u32, u: f32) -> u32 {
    let row = &cdf[from as usize * n_models..(from as usize + 1) * n_models];
    for (j, &c) in row.iter().enumerate() {
        if u < c {
            return j as u32;
        }
    }
    (n_models - 1) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model(kind: ModelKind) -> MotionModel {
        MotionModel {
            kind,
            accel_std: 0.0,
            turn_rate_std: 0.0,
            velocity_decay_s: 0.5,
        }
    }

    #[test]
    fn cv_without_noise_moves_straight() {
        let mut s = [1.0, 2.0, 3.0, 0.5, -1.0, 0.25, 0.0];
        predict(&model(ModelKind::Cv), TrackMode::ThreeD, 2.0, &mut s, [0.0; 4]);
        assert_eq!(&s[..6], &[2.0, 0.0, 3.5, 0.5, -1.0, 0.25]);
    }

    #[test]
    fn ct_follows_a_circle() {
        // 2 m/s east turning left at 0.1 rad/s: after a quarter turn it heads north.
        let mut s = [0.0, 0.0, 0.0, 2.0, 0.0, 0.0, 0.1];
        let steps = 1000;
        let dt = (std::f32::consts::FRAC_PI_2 / 0.1) / steps as f32;
        for _ in 0..steps {
            predict(&model(ModelKind::Ct), TrackMode::ThreeD, dt, &mut s, [0.0; 4]);
        }
        assert!(s[3].abs() < 1e-3 && (s[4] - 2.0).abs() < 1e-3, "{s:?}");
        // Radius v/ω = 20 m: the quarter circle ends at (20, 20).
        assert!((s[0] - 20.0).abs() < 0.01 && (s[1] - 20.0).abs() < 0.01, "{s:?}");
    }

    #[test]
    fn static_model_stops() {
        let mut s = [0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 0.0];
        for _ in 0..100 {
            predict(&model(ModelKind::Static), TrackMode::ThreeD, 0.05, &mut s, [0.0; 4]);
        }
        assert!(s[3].abs() < 1e-4);
        // Discrete decay: sum_k v dt e^(-k dt/τ) = v dt e^(-dt/τ) / (1 - e^(-dt/τ)) ≈ 0.475 m.
        let r = (-0.05f32 / 0.5).exp();
        let want = 0.05 * r / (1.0 - r);
        assert!((s[0] - want).abs() < 1e-3, "{} vs {want}", s[0]);
    }

    #[test]
    fn direction_mode_stays_on_the_sphere() {
        let mut s = [0.0, 0.0, 1.0, 0.3, 0.0, 0.2, 0.0];
        let mut m = model(ModelKind::Cv);
        m.accel_std = 1.0;
        for k in 0..50 {
            predict(&m, TrackMode::Direction, 0.1, &mut s, [0.1 * k as f32, -0.5, 0.3, 0.0]);
            let n = (s[0] * s[0] + s[1] * s[1] + s[2] * s[2]).sqrt();
            assert!((n - 1.0).abs() < 1e-5);
            assert!((s[0] * s[3] + s[1] * s[4] + s[2] * s[5]).abs() < 1e-5);
        }
    }

    #[test]
    fn switching_follows_the_rows() {
        let cdf = [0.9, 1.0, 0.2, 1.0];
        assert_eq!(switch_model(&cdf, 2, 0, 0.5), 0);
        assert_eq!(switch_model(&cdf, 2, 0, 0.95), 1);
        assert_eq!(switch_model(&cdf, 2, 1, 0.1), 0);
        assert_eq!(switch_model(&cdf, 2, 1, 0.9999), 1);
    }
}
