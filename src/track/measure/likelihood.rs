//! The TDOA likelihood of one particle, as a ratio to pure clutter. `kernels/pf.cu` mirrors it.
//!
//! Each pair contributes `floor + sum_k amp_k exp(-(tdoa_k - predicted)^2 / (2 sigma^2))`: a
//! mixture of "the true TDOA is peak k" (Gaussian) and "no peak is the source" (uniform over the
//! pair's physical lags). A wrong peak therefore costs a particle little, and a pair with no
//! usable peak costs nothing.
//!
//! Emission time: a pair's correlation measures the source where it was when the sound that
//! reaches both sensors mid-frame left it, `t_centre - (r_a + r_b) / 2c`, while the state is at
//! `t_centre - lag`. The prediction moves the particle by `v * delta` with
//! `delta = lag - (r_a + r_b) / 2c`, to first order: `r_a(p + v delta) = r_a + (u_a . v) delta`.
//! For a source at a few m/s in water this is worth a large fraction of a sample.

use crate::math::fastmath;
use crate::track::TrackMode;
use crate::track::{FilterParams, TdoaMeasurement};

/// Most sensors a filter supports (sizes stack arrays on both backends).
pub const MAX_SENSORS: usize = 64;
/// Peaks further than this many standard deviations from the prediction contribute nothing.
pub const GATE_SIGMAS: f32 = 6.0;
/// Pairs multiplied together before a logarithm is taken. A pair's factor is at most
/// 1 + 2 max_tdoa / (sigma sqrt(2 pi)) (about 10^4 for a 100 m array at 0.1 sample), so four
/// factors stay far inside f32's range.
pub const PAIR_GROUP: usize = 4;

/// Precomputed constants for evaluating the likelihood.
#[derive(Debug, Clone)]
pub struct LikelihoodConsts {
    pub inv_c: f32,
    pub inv_two_var: f32,
    pub gate_s: f32,
    pub mode: TrackMode,
}

impl LikelihoodConsts {
    pub fn new(p: &FilterParams, sigma_s: f32) -> Self {
        let sigma = sigma_s.max(1e-12);
        Self {
            inv_c: 1.0 / p.speed_of_sound_m_s,
            inv_two_var: 1.0 / (2.0 * sigma * sigma),
            gate_s: GATE_SIGMAS * sigma,
            mode: p.mode,
        }
    }
}

/// Per-sensor terms of the prediction: `rho[a]` (range; in direction mode the path to sensor a
/// less the path to the array's centroid) and `rate[a]` (range rate u_a . v; zero in direction
/// mode), for the first `sensors.len()` entries of each.
///
/// In direction mode a particle's position p is its direction u = p / |p| scaled by 1 + ρ, with
/// ρ the inverse of its range r (1/m): the inverse-depth parametrisation, in which a far source
/// (ρ → 0) is a plane wave and a near one's curved wavefront is modelled exactly. With d_a the
/// sensor relative to the centroid, |r u - d_a| - r = (ρ |d_a|² - 2 u·d_a) / (1 + |u - ρ d_a|)
/// (see [`direction_path`]), -u·d_a at ρ = 0.
#[inline(always)]
pub fn sensor_terms(
    p: &FilterParams,
    k: &LikelihoodConsts,
    s: &[f32; 7],
    rho: &mut [f32],
    rate: &mut [f32],
) {
    match k.mode {
        TrackMode::ThreeD => {
            for ((m, r), q) in p.sensors.iter().zip(rho.iter_mut()).zip(rate.iter_mut()) {
                let dx = s[0] - m[0];
                let dy = s[1] - m[1];
                let dz = s[2] - m[2];
                let d = (dx * dx + dy * dy + dz * dz).sqrt().max(1e-6);
                *r = d;
                *q = (dx * s[3] + dy * s[4] + dz * s[5]) / d;
            }
        }
        TrackMode::Direction | TrackMode::Line => {
            let (n, inv) = norm_and_inverse_range(s[0], s[1], s[2]);
            for ((m, r), q) in p.sensors.iter().zip(rho.iter_mut()).zip(rate.iter_mut()) {
                *r = direction_path(m, s[0], s[1], s[2], n, inv);
                *q = 0.0;
            }
        }
    }
}

/// A direction-mode particle's |p| and inverse range ρ = |p| - 1 (at least 0); see
/// [`sensor_terms`]. The GPU's `dir_norm` (kernels/common.cuh) does the same operations.
#[inline(always)]
pub fn norm_and_inverse_range(x: f32, y: f32, z: f32) -> (f32, f32) {
    let n = crate::track::motion::models::dir_norm(x, y, z);
    (n, (n - 1.0).max(0.0))
}

/// The path from a source in direction p / n at inverse range `inv` to sensor `m` (relative
/// to the centroid), less its range: (ρ |m|² - 2 u·m) / (1 + |u - ρ m|), exact at every range
/// and without the cancellation of subtracting two long paths; the GPU's `dir_path`
/// (kernels/common.cuh) does the same operations.
#[inline(always)]
pub fn direction_path(m: &[f32; 3], x: f32, y: f32, z: f32, n: f32, inv: f32) -> f32 {
    let ud = (m[0] * x + m[1] * y + m[2] * z) / n;
    let dd = m[0] * m[0] + m[1] * m[1] + m[2] * m[2];
    let root = (1.0 - 2.0 * inv * ud + inv * inv * dd).max(0.0).sqrt();
    (inv * dd - 2.0 * ud) / (1.0 + root)
}

/// Predicted TDOA of pair (a, b) from the sensor terms.
#[inline(always)]
pub fn pair_tdoa(
    k: &LikelihoodConsts,
    rho: &[f32],
    rate: &[f32],
    a: usize,
    b: usize,
    lag_s: f32,
) -> f32 {
    let delta = if k.mode == TrackMode::ThreeD {
        lag_s - 0.5 * (rho[a] + rho[b]) * k.inv_c
    } else {
        0.0
    };
    (rho[a] - rho[b] + (rate[a] - rate[b]) * delta) * k.inv_c
}

/// Predicted TDOA of every pair for state `s` (pos, vel, ω) with the state time `lag_s` before
/// the frame centre, written to `out`.
pub fn predict_tdoas(
    p: &FilterParams,
    k: &LikelihoodConsts,
    s: &[f32; 7],
    lag_s: f32,
    out: &mut [f32],
) {
    let mut rho = [0.0f32; MAX_SENSORS];
    let mut rate = [0.0f32; MAX_SENSORS];
    sensor_terms(p, k, s, &mut rho, &mut rate);
    for (o, &(a, b)) in out.iter_mut().zip(&p.pairs) {
        *o = pair_tdoa(k, &rho, &rate, a as usize, b as usize, lag_s);
    }
}

/// Scratch for [`log_likelihood_slice`], sized for one chunk of particles.
#[derive(Debug, Clone, Default)]
pub struct LikScratch {
    rho: Vec<f32>,
    rate: Vec<f32>,
    pred: Vec<f32>,
    l: Vec<f32>,
    prod: Vec<f32>,
}

/// log of the likelihood ratio against clutter of every particle of a slice (`s[c][i]`:
/// component c of particle i), into `out`. Each stage is one loop over the particles, which the
/// compiler vectorises.
#[inline(always)]
pub fn log_likelihood_slice(
    p: &FilterParams,
    k: &LikelihoodConsts,
    m: &TdoaMeasurement,
    s: &[&mut [f32]; 7],
    lag_s: f32,
    sc: &mut LikScratch,
    out: &mut [f32],
) {
    let n = out.len();
    sensor_ranges(p, k, s, sc, n);
    let three_d = k.mode == TrackMode::ThreeD;
    let kk = m.peaks_per_pair;
    let total = &mut out[..n];
    total.fill(0.0);
    let prod = &mut sc.prod[..n];
    prod.fill(1.0);
    let pred = &mut sc.pred[..n];
    let l = &mut sc.l[..n];
    for (pi, &(a, b)) in p.pairs.iter().enumerate() {
        let (a, b) = (a as usize, b as usize);
        let (ra, rb) = (&sc.rho[a * n..(a + 1) * n], &sc.rho[b * n..(b + 1) * n]);
        let (qa, qb) = (&sc.rate[a * n..(a + 1) * n], &sc.rate[b * n..(b + 1) * n]);
        for i in 0..n {
            let delta = if three_d {
                lag_s - 0.5 * (ra[i] + rb[i]) * k.inv_c
            } else {
                0.0
            };
            pred[i] = (ra[i] - rb[i] + (qa[i] - qb[i]) * delta) * k.inv_c;
        }
        l.fill(m.floor[pi]);
        for j in 0..kk {
            let amp = m.amp[pi * kk + j];
            let t = m.tdoa_s[pi * kk + j];
            if amp <= 0.0 {
                continue;
            }
            // A clutter peak usually lies outside the gate of every particle: skip its
            // exponentials (they would all be gated to zero). An integer OR, which vectorises.
            let mut any = 0u32;
            for &v in pred.iter() {
                any |= u32::from((t - v).abs() < k.gate_s);
            }
            if any == 0 {
                continue;
            }
            for i in 0..n {
                let d = t - pred[i];
                let e = fastmath::exp(-d * d * k.inv_two_var);
                l[i] += if d.abs() < k.gate_s { amp * e } else { 0.0 };
            }
        }
        for i in 0..n {
            prod[i] *= l[i];
        }
        if pi % PAIR_GROUP == PAIR_GROUP - 1 {
            for i in 0..n {
                total[i] += fastmath::ln(prod[i]);
                prod[i] = 1.0;
            }
        }
    }
    for i in 0..n {
        total[i] += fastmath::ln(prod[i]);
    }
}

/// Each particle's range to every sensor (its path, for a direction) into `sc.rho`, and in 3-D
/// the range's rate into `sc.rate` (`sc.rate` 0 for a direction), sensor-major: particle i of
/// sensor a at `a * n + i`.
#[inline(always)]
fn sensor_ranges(
    p: &FilterParams,
    k: &LikelihoodConsts,
    s: &[&mut [f32]; 7],
    sc: &mut LikScratch,
    n: usize,
) {
    let ns = p.sensors.len();
    sc.rho.resize(ns * n, 0.0);
    sc.rate.resize(ns * n, 0.0);
    sc.pred.resize(n, 0.0);
    sc.l.resize(n, 0.0);
    sc.prod.resize(n, 0.0);
    let (x, y, z) = (&s[0][..n], &s[1][..n], &s[2][..n]);
    let (vx, vy, vz) = (&s[3][..n], &s[4][..n], &s[5][..n]);
    if k.mode.angular() {
        // Each particle's |p| and inverse range, once for every sensor (in `pred` and `l`,
        // which the pair loop below fills afresh).
        for i in 0..n {
            (sc.pred[i], sc.l[i]) = norm_and_inverse_range(x[i], y[i], z[i]);
        }
    }
    for (a, sensor) in p.sensors.iter().enumerate() {
        let r = &mut sc.rho[a * n..(a + 1) * n];
        let q = &mut sc.rate[a * n..(a + 1) * n];
        match k.mode {
            TrackMode::ThreeD => {
                for i in 0..n {
                    let dx = x[i] - sensor[0];
                    let dy = y[i] - sensor[1];
                    let dz = z[i] - sensor[2];
                    let d = (dx * dx + dy * dy + dz * dz).sqrt().max(1e-6);
                    r[i] = d;
                    q[i] = (dx * vx[i] + dy * vy[i] + dz * vz[i]) / d;
                }
            }
            TrackMode::Direction | TrackMode::Line => {
                let (nn, inv) = (&sc.pred[..n], &sc.l[..n]);
                for i in 0..n {
                    r[i] = direction_path(sensor, x[i], y[i], z[i], nn[i], inv[i]);
                    q[i] = 0.0;
                }
            }
        }
    }
}

/// log of one particle's likelihood ratio against clutter (the slice version on one particle).
pub fn log_likelihood(
    p: &FilterParams,
    k: &LikelihoodConsts,
    m: &TdoaMeasurement,
    s: &[f32; 7],
    lag_s: f32,
) -> f32 {
    let mut comps: [[f32; 1]; 7] = std::array::from_fn(|c| [s[c]]);
    let mut it = comps.iter_mut();
    let refs: [&mut [f32]; 7] =
        std::array::from_fn(|_| it.next().map(|a| a.as_mut_slice()).unwrap_or_default());
    let mut out = [0.0f32];
    log_likelihood_slice(p, k, m, &refs, lag_s, &mut LikScratch::default(), &mut out);
    out[0]
}

/// Is the particle inside the search volume?
#[inline(always)]
pub fn inside(bounds: &Option<([f32; 3], [f32; 3])>, s: &[f32; 7]) -> bool {
    match bounds {
        Some((lo, hi)) => (0..3).all(|i| s[i] >= lo[i] && s[i] <= hi[i]),
        None => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The direction-mode path difference is the exact |r u - d| - r at every range, and the
    /// plane wave's -u·d at infinity.
    #[test]
    fn direction_path_is_exact_at_every_range() {
        let d = [0.9f32, -0.6, 0.4];
        let u = [0.48f32, 0.6, -0.64];
        let plane = -(d[0] * u[0] + d[1] * u[1] + d[2] * u[2]);
        assert!((direction_path(&d, u[0], u[1], u[2], 1.0, 0.0) - plane).abs() < 1e-7);
        for r in [1.5f64, 3.0, 10.0, 160.0, 1e5] {
            let inv = (1.0 / r) as f32;
            let p = u.map(|v| v * (1.0 + inv));
            let (n, got_inv) = norm_and_inverse_range(p[0], p[1], p[2]);
            let got = direction_path(&d, p[0], p[1], p[2], n, got_inv);
            let src = u.map(|v| f64::from(v) * r);
            let exact = ((src[0] - f64::from(d[0])).powi(2)
                + (src[1] - f64::from(d[1])).powi(2)
                + (src[2] - f64::from(d[2])).powi(2))
            .sqrt()
                - r;
            assert!(
                (f64::from(got) - exact).abs() < 2e-6,
                "r = {r}: {got} against {exact}"
            );
        }
    }
    use crate::bench::workload::harbour_config;
    use crate::dsp::geometry::ArrayGeometry;
    use crate::track::ModelSelection;
    use nalgebra::Vector3;

    fn params() -> FilterParams {
        let mut c = harbour_config();
        c.tracker.model_selection = ModelSelection::Markov;
        c.filter_params()
    }

    #[test]
    fn static_prediction_is_the_exact_tdoa() {
        let p = params();
        let k = LikelihoodConsts::new(&p, p.tdoa_std_s);
        let geo = ArrayGeometry::new(
            p.sensors
                .iter()
                .map(|s| [f64::from(s[0]), f64::from(s[1]), f64::from(s[2])])
                .collect(),
            1500.0,
        );
        let x = Vector3::new(-16.0, 3.0, -12.0);
        let s = [-16.0, 3.0, -12.0, 0.0, 0.0, 0.0, 0.0];
        let mut out = vec![0.0; p.pairs.len()];
        predict_tdoas(&p, &k, &s, 0.02, &mut out);
        for (o, &(a, b)) in out.iter().zip(&p.pairs) {
            let pair = crate::dsp::geometry::Pair {
                a: a as usize,
                b: b as usize,
                max_tdoa_s: 1.0,
            };
            assert!((f64::from(*o) - geo.tdoa_s(&x, &pair)).abs() < 1e-8);
        }
    }

    /// The first-order emission-time correction matches moving the source exactly.
    #[test]
    fn emission_time_correction_matches_exact_motion() {
        let p = params();
        let k = LikelihoodConsts::new(&p, p.tdoa_std_s);
        let s = [-16.0f32, 3.0, -12.0, 2.2, -0.4, 0.1, 0.0];
        let lag = 0.02f32;
        let mut out = vec![0.0; p.pairs.len()];
        predict_tdoas(&p, &k, &s, lag, &mut out);
        for (o, &(a, b)) in out.iter().zip(&p.pairs) {
            let (ma, mb) = (p.sensors[a as usize], p.sensors[b as usize]);
            let pos = |t: f64| {
                [
                    f64::from(s[0]) + f64::from(s[3]) * t,
                    f64::from(s[1]) + f64::from(s[4]) * t,
                    f64::from(s[2]) + f64::from(s[5]) * t,
                ]
            };
            let dist = |q: [f64; 3], m: [f32; 3]| {
                ((q[0] - f64::from(m[0])).powi(2)
                    + (q[1] - f64::from(m[1])).powi(2)
                    + (q[2] - f64::from(m[2])).powi(2))
                .sqrt()
            };
            // Solve for delta with the position at the pair's own emission time.
            let mut delta = 0.0;
            for _ in 0..10 {
                let q = pos(delta);
                delta = f64::from(lag) - 0.5 * (dist(q, ma) + dist(q, mb)) / 1500.0;
            }
            let q = pos(delta);
            let exact = (dist(q, ma) - dist(q, mb)) / 1500.0;
            // First order in v·delta: the remainder (v delta)^2 / r is ~3e-8 s here (0.0014
            // samples at 48 kHz), far below what GCC can resolve.
            assert!((f64::from(*o) - exact).abs() < 5e-8, "{o} vs {exact}");
        }
    }

    #[test]
    fn mixture_prefers_the_true_peak_and_tolerates_a_wrong_one() {
        let p = params();
        let k = LikelihoodConsts::new(&p, p.tdoa_std_s);
        let s = [-16.0f32, 3.0, -12.0, 0.0, 0.0, 0.0, 0.0];
        let mut truth = vec![0.0; p.pairs.len()];
        predict_tdoas(&p, &k, &s, 0.0, &mut truth);
        let mut m = TdoaMeasurement::empty(0, p.pairs.len(), 2, p.tdoa_std_s);
        for (pi, t) in truth.iter().enumerate() {
            m.tdoa_s[pi * 2] = *t;
            m.amp[pi * 2] = 100.0;
            m.tdoa_s[pi * 2 + 1] = *t + 3e-3;
            m.amp[pi * 2 + 1] = 50.0;
            m.floor[pi] = 0.1;
        }
        let at_truth = log_likelihood(&p, &k, &m, &s, 0.0);
        let mut off = s;
        off[0] += 0.5;
        let away = log_likelihood(&p, &k, &m, &off, 0.0);
        assert!(at_truth > away + 10.0, "{at_truth} vs {away}");
        // No information: every pair at floor 1 gives log 1 = 0.
        let none = TdoaMeasurement::empty(0, p.pairs.len(), 2, p.tdoa_std_s);
        assert!(log_likelihood(&p, &k, &none, &s, 0.0).abs() < 1e-6);
    }
}
