//! Motion models and model switching, per particle. `kernels/pf.cu` mirrors these functions line
//! for line; change both together.
//!
//! State: position p (3), velocity v (3), turn rate ω. Noise: four standard normals per step
//! (three accelerations and one turn-rate increment) from the particle's Philox block.

use crate::math::fastmath;
use crate::track::{MAX_MODELS, MotionModel};
use crate::track::{ModelKind, TrackMode};

/// Advance one particle by `dt` under `model`. `n` are four standard normals.
#[inline(always)]
pub fn predict(model: &MotionModel, mode: Kinematics, dt: f32, s: &mut [f32; 7], n: [f32; 4]) {
    let c = StepCoeffs::new(model, dt);
    advance(&c, mode, dt, s, n);
}

/// Per-model constants of one step.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StepCoeffs {
    /// 0: constant velocity, 1: coordinated turn, 2: near-static.
    pub kind: u32,
    pub accel_std: f32,
    /// Turn-rate increment scale, σ_ω √dt (turn model only).
    pub turn_sd: f32,
    /// Velocity decay over the step, e^(-dt/τ) (static model only; 1 otherwise).
    pub decay: f32,
}

impl StepCoeffs {
    pub fn new(m: &MotionModel, dt: f32) -> Self {
        match m.kind {
            ModelKind::Cv => Self {
                kind: 0,
                accel_std: m.accel_std,
                turn_sd: 0.0,
                decay: 1.0,
            },
            ModelKind::Ct => Self {
                kind: 1,
                accel_std: m.accel_std,
                turn_sd: m.turn_rate_std * dt.sqrt(),
                decay: 1.0,
            },
            ModelKind::Static => Self {
                kind: 2,
                accel_std: m.accel_std,
                turn_sd: 0.0,
                decay: fastmath::exp(-dt / m.velocity_decay_s),
            },
        }
    }
}

/// One step of any motion model, written without branches (selects only) so that a loop over
/// particles with different models still vectorises. Every model is "rotate and decay the
/// velocity, then advance the position":
///
/// - constant velocity: p += v dt + a dt²/2, v += a dt;
/// - coordinated turn at rate ω (a random walk): the horizontal velocity turns by ωT and the
///   position follows the arc (sin ωT / ω, (1 - cos ωT) / ω); vertical as constant velocity;
/// - near-static: v = d v + a dt, p += v dt, with d = e^(-dt/τ).
///
/// Curved wavefronts (direction mode): the velocity slots hold w, the source's velocity over
/// its range (1/s), and the step is the model's own in Cartesian space, exact at every range
/// (the modified spherical coordinates of angle-only tracking). Scaled by the inverse range
/// ρ = |p| - 1, the source sits at the direction u = p / |p| and moves with w; so the model
/// moves (u, w) as a point and its velocity, with accelerations scaled by ρ, to (y, w̃), and
/// then u' = y / |y|, ρ' = ρ / |y| and w' = w̃ / |y|. A source moving straight at constant
/// speed is then a constant-velocity path, where moving p itself needed accelerations that
/// grow as the source nears the array (the diver 3.3 m from the 2 m tetrahedron: 0.16 /s²).
/// The tangent part of w is the direction's rate of change; at ρ = 0 (a plane wave) the
/// accelerations vanish, and ρ stays at least 0.
#[inline(always)]
pub fn advance(c: &StepCoeffs, mode: Kinematics, dt: f32, s: &mut [f32; 7], n: [f32; 4]) {
    let is_ct = c.kind == 1;
    let is_static = c.kind == 2;
    let curved = mode == Kinematics::Curved;
    let rho = if curved { to_unit_direction(s) } else { 0.0 };
    let (mut ax, mut ay, mut az) = (c.accel_std * n[0], c.accel_std * n[1], c.accel_std * n[2]);
    if curved {
        (ax, ay, az) = (ax * rho, ay * rho, az * rho);
    }
    let w = s[6] + c.turn_sd * n[3];
    let wt = w * dt;
    let (sn, cs) = fastmath::sincos_2pi(wt * (0.5 / std::f32::consts::PI));
    // sin(ωT)/ω and (1 - cos(ωT))/ω, by series near ω = 0.
    let small = wt.abs() < 1e-4;
    let a_ct = if small {
        dt * (1.0 - wt * wt / 6.0)
    } else {
        sn / w
    };
    let b_ct = if small { dt * wt * 0.5 } else { (1.0 - cs) / w };
    let d = if is_static { c.decay } else { 1.0 };
    let (pxx, pxy, rc, rs) = if is_ct {
        (a_ct, b_ct, cs, sn)
    } else {
        (d * dt, 0.0, d, 0.0)
    };
    let pz = d * dt;
    let hp = if is_static { dt * dt } else { 0.5 * dt * dt };
    let (vx, vy, vz) = (s[3], s[4], s[5]);
    s[0] += pxx * vx - pxy * vy + ax * hp;
    s[1] += pxy * vx + pxx * vy + ay * hp;
    s[2] += pz * vz + az * hp;
    s[3] = rc * vx - rs * vy + ax * dt;
    s[4] = rs * vx + rc * vy + ay * dt;
    s[5] = d * vz + az * dt;
    s[6] = if is_ct { w } else { s[6] };
    if curved {
        from_unit_direction(s, rho);
    } else if mode == Kinematics::Plane {
        let (p, v) = onto_unit_sphere([s[0], s[1], s[2]], [s[3], s[4], s[5]]);
        s[..3].copy_from_slice(&p);
        s[3..6].copy_from_slice(&v);
    }
}

/// Curved wavefronts, before a step: the position p replaced by its direction u = p / |p|;
/// returns the inverse range ρ = |p| - 1 (at least 0). See [`advance`]; kernels/common.cuh:
/// `to_unit_direction`.
#[inline(always)]
pub fn to_unit_direction(s: &mut [f32; 7]) -> f32 {
    let n = dir_norm(s[0], s[1], s[2]);
    s[0] /= n;
    s[1] /= n;
    s[2] /= n;
    (n - 1.0).max(0.0)
}

/// Curved wavefronts, after a step: the moved point y (in the position slots, one range
/// away) and velocity w̃ back to p' = (y / |y|) (1 + ρ / |y|) and w' = w̃ / |y|. See
/// [`advance`]; kernels/common.cuh: `from_unit_direction`.
#[inline(always)]
pub fn from_unit_direction(s: &mut [f32; 7], rho: f32) {
    // |y| is 1 moved by at most the step's fraction of the range; the floor only guards a
    // source passing through the array's centre within one step.
    let m = (s[0] * s[0] + s[1] * s[1] + s[2] * s[2]).sqrt().max(1e-6);
    let f = (1.0 + rho / m) / m;
    s[0] *= f;
    s[1] *= f;
    s[2] *= f;
    s[3] /= m;
    s[4] /= m;
    s[5] /= m;
}

/// How a particle's position is kept: a point (3-D mode); a direction scaled by 1 + its
/// inverse range (direction mode, curved wavefronts); or a unit direction (direction mode where
/// the array cannot resolve the curvature: a plane wave). kernels/common.cuh: the step's mode
/// 0, 1 and 2.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kinematics {
    ThreeD,
    Curved,
    Plane,
}

impl Kinematics {
    pub fn of(p: &crate::track::FilterParams) -> Self {
        match p.mode {
            TrackMode::ThreeD => Self::ThreeD,
            TrackMode::Direction | TrackMode::Line if p.inv_range_max > 0.0 => Self::Curved,
            TrackMode::Direction | TrackMode::Line => Self::Plane,
        }
    }

    /// The step's mode number in kernels/common.cuh (`StepParams::mode`).
    pub fn kernel_mode(self) -> u32 {
        match self {
            Self::ThreeD => 0,
            Self::Curved => 1,
            Self::Plane => 2,
        }
    }
}

/// The position back on the unit sphere, the velocity in its tangent plane.
/// kernels/common.cuh: `onto_unit_sphere`.
#[inline(always)]
pub fn onto_unit_sphere(p: [f32; 3], v: [f32; 3]) -> ([f32; 3], [f32; 3]) {
    let n = dir_norm(p[0], p[1], p[2]);
    let u = [p[0] / n, p[1] / n, p[2] / n];
    let radial = v[0] * u[0] + v[1] * u[1] + v[2] * u[2];
    (
        u,
        [
            v[0] - radial * u[0],
            v[1] - radial * u[1],
            v[2] - radial * u[2],
        ],
    )
}

/// Line mode: a particle turned about the array's axis into the half-plane of `side` (unit,
/// perpendicular to `axis`). Its position keeps its distance along the axis and from it (so
/// |p|, and the inverse range, are unchanged, and so is every delay a line array measures);
/// its velocity keeps its parts along the axis and away from it, and loses the part around
/// the axis, which no line array sees. A particle on the axis (endfire) goes to the side's
/// direction. kernels/common.cuh: `fold_to_half_plane`.
#[inline(always)]
pub fn fold_to_half_plane(s: &mut [f32], axis: &[f32; 3], side: &[f32; 3]) {
    let pa = s[0] * axis[0] + s[1] * axis[1] + s[2] * axis[2];
    let va = s[3] * axis[0] + s[4] * axis[1] + s[5] * axis[2];
    let (qx, qy, qz) = (
        s[0] - pa * axis[0],
        s[1] - pa * axis[1],
        s[2] - pa * axis[2],
    );
    let q = (qx * qx + qy * qy + qz * qz).sqrt();
    let away = if q > 1e-12 {
        (s[3] * qx + s[4] * qy + s[5] * qz) / q
    } else {
        s[3] * side[0] + s[4] * side[1] + s[5] * side[2]
    };
    for k in 0..3 {
        s[k] = pa * axis[k] + q * side[k];
        s[3 + k] = va * axis[k] + away * side[k];
    }
}

/// Line mode's fold: onto `line.side`'s half-plane, or, for a turning array
/// (`line.keep_side`), onto the half-plane of the side the particle is on. kernels/common.cuh:
/// `fold_line`.
#[inline(always)]
pub fn fold_line(s: &mut [f32], line: &crate::track::LineAxes) {
    let d = s[0] * line.side[0] + s[1] * line.side[1] + s[2] * line.side[2];
    if line.keep_side && d < 0.0 {
        fold_to_half_plane(s, &line.axis, &line.side.map(|v| -v));
    } else {
        fold_to_half_plane(s, &line.axis, &line.side);
    }
}

/// Turn a particle's position and velocity about z by the angle whose sine and cosine are
/// given (counter-clockwise seen from above; see [`crate::track::TrackStep::turn`]).
/// kernels/common.cuh: `turn_about_z`.
#[inline(always)]
pub fn turn_about_z(s: &mut [f32], (sn, cs): (f32, f32)) {
    for k in [0, 3] {
        let (x, y) = (s[k], s[k + 1]);
        s[k] = cs * x - sn * y;
        s[k + 1] = sn * x + cs * y;
    }
}

/// [`turn_about_z`] for a slice of particles (`s[c][i]`).
pub fn turn_slice(s: &mut [&mut [f32]; 7], turn: (f32, f32)) {
    for i in 0..s[0].len() {
        let mut st = [s[0][i], s[1][i], 0.0, s[3][i], s[4][i], 0.0];
        turn_about_z(&mut st, turn);
        (s[0][i], s[1][i], s[3][i], s[4][i]) = (st[0], st[1], st[3], st[4]);
    }
}

/// |p| of a direction-mode position (1 + its inverse range: see
/// [`crate::track::measure::likelihood::sensor_terms`]). kernels/common.cuh: `dir_norm`.
#[inline(always)]
pub fn dir_norm(x: f32, y: f32, z: f32) -> f32 {
    (x * x + y * y + z * z).sqrt().max(1e-12)
}

/// A direction-mode particle (curved wavefronts) after a jitter: its position p is its
/// direction scaled by 1 + its inverse range ρ (see [`crate::track::measure::likelihood::sensor_terms`]),
/// and roughening or a prior drawn from an estimate can put it past infinity (|p| < 1, ρ < 0).
/// Such a particle is reflected back: |p| becomes 2 - |p| and the radial part of its velocity
/// turns round. (The motion models keep ρ at least 0 by themselves: see [`advance`].)
/// kernels/common.cuh: `reflect_at_infinity`.
#[inline(always)]
pub fn reflect_at_infinity(p: [f32; 3], v: [f32; 3]) -> ([f32; 3], [f32; 3]) {
    let n = dir_norm(p[0], p[1], p[2]);
    let beyond = n < 1.0;
    let k = if beyond { (2.0 - n) / n } else { 1.0 };
    let u = [p[0] / n, p[1] / n, p[2] / n];
    let radial = v[0] * u[0] + v[1] * u[1] + v[2] * u[2];
    let f = if beyond { 2.0 * radial } else { 0.0 };
    (
        [p[0] * k, p[1] * k, p[2] * k],
        [v[0] - f * u[0], v[1] - f * u[1], v[2] - f * u[2]],
    )
}

/// The step coefficients of every model as fixed-size arrays indexed by the model number
/// masked to [`MAX_MODELS`] - 1. The loops over particles vectorise only when the compiler can
/// see that a lookup cannot fail, and a masked index into a fixed array is one it can see.
#[derive(Debug, Clone, PartialEq)]
pub struct CoeffTable {
    pub kind: [u32; MAX_MODELS],
    pub accel_std: [f32; MAX_MODELS],
    pub turn_sd: [f32; MAX_MODELS],
    pub decay: [f32; MAX_MODELS],
}

/// Masks a model index into the fixed tables (MAX_MODELS is a power of two).
pub const MODEL_MASK: usize = MAX_MODELS - 1;
const _: () = assert!(MAX_MODELS.is_power_of_two());

impl CoeffTable {
    pub fn new(coeffs: &[StepCoeffs]) -> Self {
        let mut t = Self {
            kind: [0; MAX_MODELS],
            accel_std: [0.0; MAX_MODELS],
            turn_sd: [0.0; MAX_MODELS],
            decay: [1.0; MAX_MODELS],
        };
        for (i, c) in coeffs.iter().take(MAX_MODELS).enumerate() {
            t.kind[i] = c.kind;
            t.accel_std[i] = c.accel_std;
            t.turn_sd[i] = c.turn_sd;
            t.decay[i] = c.decay;
        }
        t
    }
}

/// A model transition table padded to MAX_MODELS × MAX_MODELS (see [`CoeffTable`]).
pub fn padded_cdf(cdf: &[f32], n_models: usize) -> [f32; MAX_MODELS * MAX_MODELS] {
    let mut t = [1.0f32; MAX_MODELS * MAX_MODELS];
    for from in 0..n_models.min(MAX_MODELS) {
        for to in 0..n_models.min(MAX_MODELS) {
            t[from * MAX_MODELS + to] = cdf[from * n_models + to];
        }
    }
    t
}

/// [`advance`] for a slice of particles (`s[c][i]`: component c of particle i), each with its
/// own model's coefficients. One straight loop, which the compiler vectorises; the arithmetic
/// per particle is exactly that of `advance`.
#[inline(always)]
pub fn advance_slice(
    t: &CoeffTable,
    m: &[u32],
    mode: Kinematics,
    dt: f32,
    s: &mut [&mut [f32]; 7],
    z: &[Vec<f32>; 4],
) {
    let n = m.len();
    if mode == Kinematics::Curved {
        // Curved wavefronts: the scalar step, particle by particle (direction mode is not the
        // hot path of the CPU's 3-D replays).
        for i in 0..n {
            let mi = m[i] as usize & MODEL_MASK;
            let c = StepCoeffs {
                kind: t.kind[mi],
                accel_std: t.accel_std[mi],
                turn_sd: t.turn_sd[mi],
                decay: t.decay[mi],
            };
            let mut st = [0.0f32; 7];
            for (k, v) in st.iter_mut().enumerate() {
                *v = s[k][i];
            }
            advance(&c, mode, dt, &mut st, [z[0][i], z[1][i], z[2][i], z[3][i]]);
            for (k, v) in st.iter().enumerate() {
                s[k][i] = *v;
            }
        }
        return;
    }
    let h_cv = 0.5 * dt * dt;
    let h_st = dt * dt;
    let [s0, s1, s2, s3, s4, s5, s6] = s;
    let (s0, s1, s2, s3, s4, s5, s6) = (
        &mut s0[..n],
        &mut s1[..n],
        &mut s2[..n],
        &mut s3[..n],
        &mut s4[..n],
        &mut s5[..n],
        &mut s6[..n],
    );
    let (z0, z1, z2, z3) = (&z[0][..n], &z[1][..n], &z[2][..n], &z[3][..n]);
    let m = &m[..n];
    for i in 0..n {
        let mi = m[i] as usize & MODEL_MASK;
        let (kind, accel, turn_sd, decay) =
            (t.kind[mi], t.accel_std[mi], t.turn_sd[mi], t.decay[mi]);
        let is_ct = kind == 1;
        let is_static = kind == 2;
        let ax = accel * z0[i];
        let ay = accel * z1[i];
        let az = accel * z2[i];
        let w = s6[i] + turn_sd * z3[i];
        let wt = w * dt;
        let (sn, cs) = fastmath::sincos_2pi(wt * (0.5 / std::f32::consts::PI));
        let small = wt.abs() < 1e-4;
        let a_ct = if small {
            dt * (1.0 - wt * wt / 6.0)
        } else {
            sn / w
        };
        let b_ct = if small { dt * wt * 0.5 } else { (1.0 - cs) / w };
        let d = if is_static { decay } else { 1.0 };
        let pxx = if is_ct { a_ct } else { d * dt };
        let pxy = if is_ct { b_ct } else { 0.0 };
        let rc = if is_ct { cs } else { d };
        let rs = if is_ct { sn } else { 0.0 };
        let pz = d * dt;
        let hp = if is_static { h_st } else { h_cv };
        let (vx, vy, vz) = (s3[i], s4[i], s5[i]);
        s0[i] += pxx * vx - pxy * vy + ax * hp;
        s1[i] += pxy * vx + pxx * vy + ay * hp;
        s2[i] += pz * vz + az * hp;
        s3[i] = rc * vx - rs * vy + ax * dt;
        s4[i] = rs * vx + rc * vy + ay * dt;
        s5[i] = d * vz + az * dt;
        s6[i] = if is_ct { w } else { s6[i] };
    }
    if mode == Kinematics::Plane {
        for i in 0..n {
            let (p, v) = onto_unit_sphere([s0[i], s1[i], s2[i]], [s3[i], s4[i], s5[i]]);
            (s0[i], s1[i], s2[i]) = (p[0], p[1], p[2]);
            (s3[i], s4[i], s5[i]) = (v[0], v[1], v[2]);
        }
    }
}

/// [`fold_line`] for a slice of particles (`s[c][i]`), after a step of line mode.
pub fn fold_slice(s: &mut [&mut [f32]; 7], line: &crate::track::LineAxes) {
    let n = s[0].len();
    for i in 0..n {
        let mut st = [0.0f32; 6];
        for (k, v) in st.iter_mut().enumerate() {
            *v = s[k][i];
        }
        fold_line(&mut st, line);
        for (k, v) in st.iter().enumerate() {
            s[k][i] = *v;
        }
    }
}

/// [`switch_model`] for a slice of particles: the new model is the number of cumulative
/// thresholds at or below the uniform (the same answer as the scalar search, without its early
/// exit). `cdf` is the table from [`padded_cdf`]; `scratch` is at least as long as `m`.
#[inline(always)]
pub fn switch_slice(
    cdf: &[f32; MAX_MODELS * MAX_MODELS],
    n_models: usize,
    m: &mut [u32],
    u: &[f32],
    scratch: &mut [u32],
) {
    let n = m.len();
    let out = &mut scratch[..n];
    out.fill(0);
    let u = &u[..n];
    for j in 0..n_models.saturating_sub(1) {
        let mm = &m[..n];
        for i in 0..n {
            let idx =
                ((mm[i] as usize & MODEL_MASK) * MAX_MODELS + j) & (MAX_MODELS * MAX_MODELS - 1);
            out[i] += u32::from(cdf[idx] <= u[i]);
        }
    }
    m.copy_from_slice(out);
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

    /// A heading 30° to starboard turns a world-fixed direction 30° counter-clockwise in the
    /// array's frame: north-east (array frame at heading 0) becomes north; speeds turn alike.
    #[test]
    fn a_turn_moves_directions_the_other_way() {
        let step = crate::track::TrackStep {
            yaw_rad: 45f32.to_radians(),
            ..crate::track::TrackStep::fixed(0, 0.05, 0.0)
        };
        let turn = step.turn().unwrap();
        let h = std::f32::consts::FRAC_1_SQRT_2;
        let mut s = [h, h, 0.2, 2.0 * h, 2.0 * h, 0.0, 0.0];
        turn_about_z(&mut s, turn);
        let want = [0.0, 1.0, 0.2, 0.0, 2.0, 0.0];
        for k in 0..6 {
            assert!((s[k] - want[k]).abs() < 1e-6, "{s:?}");
        }
        assert!(
            crate::track::TrackStep::fixed(0, 0.05, 0.0)
                .turn()
                .is_none()
        );
        let mut slice: [Vec<f32>; 7] =
            std::array::from_fn(|c| vec![[h, h, 0.2, 2.0 * h, 2.0 * h, 0.0, 0.0][c]; 2]);
        let mut refs: [&mut [f32]; 7] = slice.each_mut().map(|v| v.as_mut_slice());
        turn_slice(&mut refs, turn);
        for k in 0..6 {
            assert!((slice[k][1] - want[k]).abs() < 1e-6);
        }
    }

    /// A turning array's fold keeps each particle on its own side; a fixed one's folds it
    /// onto `side`.
    #[test]
    fn a_turning_fold_keeps_the_side() {
        let mut line = crate::track::LineAxes {
            axis: [0.0, 1.0, 0.0],
            side: [-1.0, 0.0, 0.0],
            plane: true,
            keep_side: true,
        };
        let s0 = [0.6f32, 0.8, 0.1, 0.2, 0.0, 0.0];
        let mut s = s0;
        fold_line(&mut s, &line);
        assert!(s[0] > 0.59 && s[2].abs() < 1e-6, "{s:?}");
        assert!((s[1] - 0.8).abs() < 1e-6);
        line.keep_side = false;
        let mut s = s0;
        fold_line(&mut s, &line);
        assert!(s[0] < -0.59 && s[2].abs() < 1e-6, "{s:?}");
    }

    /// The fold keeps |p| and the distances along and from the axis (every delay a line
    /// array measures), puts the particle in the side's half-plane, and keeps the velocity's
    /// parts along the axis and away from it; a particle on the axis goes to the side.
    #[test]
    fn fold_keeps_what_a_line_measures() {
        let axis = [0.6f32, 0.8, 0.0];
        let side = [0.48f32, -0.36, 0.8];
        let normal = [0.64f32, -0.48, -0.6];
        let dot = |a: &[f32], b: &[f32]| a[0] * b[0] + a[1] * b[1] + a[2] * b[2];
        for s0 in [
            [0.3f32, -0.2, 0.9, 0.1, 0.05, -0.2, 0.0],
            [-0.5, 0.1, -0.8, -0.3, 0.2, 0.1, 0.1],
            [0.9 * 0.6, 0.9 * 0.8, 0.0, 0.0, 0.0, 0.4, 0.0],
        ] {
            let mut s = s0;
            fold_to_half_plane(&mut s, &axis, &side);
            let along = dot(&s0[..3], &axis);
            let away0 = (dot(&s0[..3], &s0[..3]) - along * along).max(0.0).sqrt();
            assert!((dot(&s[..3], &axis) - along).abs() < 1e-6);
            assert!((dot(&s[..3], &side) - away0).abs() < 1e-6, "{s:?}");
            assert!(dot(&s[..3], &normal).abs() < 1e-6);
            assert!(dot(&s[3..6], &normal).abs() < 1e-6);
            assert!((dot(&s[3..6], &axis) - dot(&s0[3..6], &axis)).abs() < 1e-6);
            assert!((dir_norm(s[0], s[1], s[2]) - dir_norm(s0[0], s0[1], s0[2])).abs() < 1e-6);
            // Folding again changes nothing.
            let mut t = s;
            fold_to_half_plane(&mut t, &axis, &side);
            for k in 0..6 {
                assert!((t[k] - s[k]).abs() < 1e-6);
            }
        }
        // On the axis: the velocity's part along the side is kept.
        let mut s = [0.6f32, 0.8, 0.0, 0.0, 0.0, 0.5, 0.0];
        fold_to_half_plane(&mut s, &axis, &side);
        assert!((dot(&s[3..6], &side) - 0.4).abs() < 1e-6, "{s:?}");
    }

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
        predict(
            &model(ModelKind::Cv),
            Kinematics::ThreeD,
            2.0,
            &mut s,
            [0.0; 4],
        );
        assert_eq!(&s[..6], &[2.0, 0.0, 3.5, 0.5, -1.0, 0.25]);
    }

    #[test]
    fn ct_follows_a_circle() {
        // 2 m/s east turning left at 0.1 rad/s: after a quarter turn it heads north.
        let mut s = [0.0, 0.0, 0.0, 2.0, 0.0, 0.0, 0.1];
        let steps = 1000;
        let dt = (std::f32::consts::FRAC_PI_2 / 0.1) / steps as f32;
        for _ in 0..steps {
            predict(
                &model(ModelKind::Ct),
                Kinematics::ThreeD,
                dt,
                &mut s,
                [0.0; 4],
            );
        }
        assert!(s[3].abs() < 1e-3 && (s[4] - 2.0).abs() < 1e-3, "{s:?}");
        // Radius v/ω = 20 m: the quarter circle ends at (20, 20).
        assert!(
            (s[0] - 20.0).abs() < 0.01 && (s[1] - 20.0).abs() < 0.01,
            "{s:?}"
        );
    }

    #[test]
    fn static_model_stops() {
        let mut s = [0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 0.0];
        for _ in 0..100 {
            predict(
                &model(ModelKind::Static),
                Kinematics::ThreeD,
                0.05,
                &mut s,
                [0.0; 4],
            );
        }
        assert!(s[3].abs() < 1e-4);
        // Discrete decay: sum_k v dt e^(-k dt/τ) = v dt e^(-dt/τ) / (1 - e^(-dt/τ)) ≈ 0.475 m.
        let r = (-0.05f32 / 0.5).exp();
        let want = 0.05 * r / (1.0 - r);
        assert!((s[0] - want).abs() < 1e-3, "{} vs {want}", s[0]);
    }

    /// Curved wavefronts: a step of any model on (direction × (1 + ρ), velocity × ρ) is the
    /// same model's 3-D step carried through that map, noise included, at every range; so a
    /// source moving straight is followed exactly however near it passes, and one receding to
    /// infinity reaches ρ = 0 without passing it.
    #[test]
    fn curved_steps_are_the_3d_steps_in_inverse_range() {
        let to_dir = |x: [f32; 7]| {
            let r = (x[0] * x[0] + x[1] * x[1] + x[2] * x[2]).sqrt();
            let rho = 1.0 / r;
            [
                x[0] / r * (1.0 + rho),
                x[1] / r * (1.0 + rho),
                x[2] / r * (1.0 + rho),
                x[3] * rho,
                x[4] * rho,
                x[5] * rho,
                x[6],
            ]
        };
        for kind in [ModelKind::Cv, ModelKind::Ct, ModelKind::Static] {
            let mut m = model(kind);
            m.accel_std = 0.4;
            m.turn_rate_std = 0.05;
            for &x0 in &[
                [3.0f32, -1.0, 0.5, -0.8, 0.6, 0.1, 0.05],
                [40.0, 25.0, -3.0, 2.0, -4.0, 0.2, -0.02],
                [0.0, 900.0, 10.0, 5.0, 0.0, 0.0, 0.0],
            ] {
                let (mut x, mut d) = (x0, to_dir(x0));
                for k in 0..40 {
                    let n = [0.3 - 0.02 * k as f32, -0.7, 1.1, 0.4];
                    predict(&m, Kinematics::ThreeD, 0.05, &mut x, n);
                    predict(&m, Kinematics::Curved, 0.05, &mut d, n);
                }
                let want = to_dir(x);
                // The 3-D reference itself rounds in f32 (at 900 m, to 6e-5 m).
                let w_scale = want[3].abs().max(want[4].abs()).max(want[5].abs());
                for c in 0..7 {
                    let tol = if c < 3 {
                        2e-5
                    } else {
                        1e-3 * w_scale.max(0.01)
                    };
                    assert!(
                        (d[c] - want[c]).abs() <= tol,
                        "{kind:?} from {x0:?}: {d:?} vs {want:?}"
                    );
                }
            }
        }
        // A plane wave stays one; a receding source approaches ρ = 0 from above.
        let cv = model(ModelKind::Cv);
        let mut plane = [0.6f32, 0.8, 0.0, 0.1, -0.075, 0.0, 0.0];
        predict(
            &cv,
            Kinematics::Curved,
            0.1,
            &mut plane,
            [1.0, -2.0, 0.5, 0.0],
        );
        let n = (plane[0] * plane[0] + plane[1] * plane[1] + plane[2] * plane[2]).sqrt();
        assert!((n - 1.0).abs() < 1e-6, "{plane:?}");
        let mut away = to_dir([2.0, 0.0, 0.0, 10.0, 0.0, 0.0, 0.0]);
        for _ in 0..1000 {
            predict(&cv, Kinematics::Curved, 0.1, &mut away, [0.0; 4]);
            let rho = away[0].hypot(away[1]).hypot(away[2]) - 1.0;
            assert!(rho > 0.0, "{away:?}");
        }
        assert!(away[0] - 1.0 < 2e-3, "{away:?}"); // 1 km away
    }

    #[test]
    fn slices_match_the_scalar_model() {
        let models = [
            MotionModel {
                kind: ModelKind::Cv,
                accel_std: 0.3,
                turn_rate_std: 0.0,
                velocity_decay_s: 0.0,
            },
            MotionModel {
                kind: ModelKind::Ct,
                accel_std: 0.1,
                turn_rate_std: 0.2,
                velocity_decay_s: 0.0,
            },
            MotionModel {
                kind: ModelKind::Static,
                accel_std: 0.05,
                turn_rate_std: 0.0,
                velocity_decay_s: 0.7,
            },
        ];
        let dt = 0.043;
        let coeffs: Vec<StepCoeffs> = models.iter().map(|m| StepCoeffs::new(m, dt)).collect();
        let n = 11;
        let m: Vec<u32> = (0..n).map(|i| (i * 7 % 3) as u32).collect();
        let st: Vec<Vec<f32>> = (0..7)
            .map(|c| {
                (0..n)
                    .map(|i| {
                        if c == 6 {
                            if i % 3 == 0 { 1e-7 } else { 0.2 * i as f32 }
                        } else {
                            (c * 8 + i) as f32 * 0.37 - 3.0
                        }
                    })
                    .collect()
            })
            .collect();
        let z: [Vec<f32>; 4] = std::array::from_fn(|c| {
            (0..n)
                .map(|i| ((c + 1) * (i + 2)) as f32 * 0.13 - 1.0)
                .collect()
        });
        for mode in [Kinematics::ThreeD, Kinematics::Curved, Kinematics::Plane] {
            let mut lanes = st.clone();
            {
                let mut it = lanes.iter_mut();
                let mut refs: [&mut [f32]; 7] =
                    std::array::from_fn(|_| it.next().unwrap().as_mut_slice());
                advance_slice(&CoeffTable::new(&coeffs), &m, mode, dt, &mut refs, &z);
            }
            for i in 0..n {
                let mut s: [f32; 7] = std::array::from_fn(|c| st[c][i]);
                advance(
                    &coeffs[m[i] as usize],
                    mode,
                    dt,
                    &mut s,
                    [z[0][i], z[1][i], z[2][i], z[3][i]],
                );
                for c in 0..7 {
                    assert_eq!(
                        s[c].to_bits(),
                        lanes[c][i].to_bits(),
                        "particle {i} component {c}"
                    );
                }
            }
        }
        let cdf = [0.9, 0.95, 1.0, 0.05, 0.9, 1.0, 0.1, 0.2, 1.0];
        let u = [0.5, 0.92, 0.99, 0.01, 0.5, 0.95, 0.15, 0.9];
        let mut ml = vec![0u32, 0, 0, 1, 1, 1, 2, 2];
        let from = ml.clone();
        let mut scratch = vec![0u32; 8];
        switch_slice(&padded_cdf(&cdf, 3), 3, &mut ml, &u, &mut scratch);
        for i in 0..8 {
            assert_eq!(ml[i], switch_model(&cdf, 3, from[i], u[i]));
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
