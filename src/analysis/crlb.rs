//! The Cramér–Rao bound on position (and direction) from one frame of array data.
//!
//! Model: in each frequency bin of a frame, the sensors receive one Gaussian source through
//! delays τ_i plus independent Gaussian noise, so the bin's snapshot is complex Gaussian with
//! covariance R = S d dᴴ + diag(N_i), d_i = e^{-jωτ_i}. Only the per-sensor signal-to-noise
//! ratio a_i = S_i / N_i of each bin matters. The Fisher information of the arrival times from
//! one bin is tr(R⁻¹ ∂R/∂τ_i R⁻¹ ∂R/∂τ_j), which works out (with P = (11ᵀ + diag(1/a))⁻¹,
//! u = P1, σ = 1ᵀP1) to
//!
//! ```text
//!     J_τ = Σ_bins 2 ω² (σ P − u uᵀ)
//! ```
//!
//! summed over the bins of the processing band (positive frequencies; the factor 2 counts the
//! conjugate bins of a real signal). J_τ 1 = 0: a common shift of all arrival times (the unknown
//! emission time) carries no information, so only differences count. For two sensors this is
//! Knapp and Carter's bound, var(τ₂ − τ₁) ≥ 1 / (2 Σ ω² γ²/(1 − γ²)) with γ² = a₁a₂ / ((1 + a₁)
//! (1 + a₂)) the coherence (tested below, and against a Monte-Carlo run of the maximum-likelihood
//! estimator).
//!
//! Position: τ_i = t₀ + |x − s_i| / c, so J_x = Gᵀ J_τ G / c² with G's rows the unit vectors from
//! the sensors to x; the bound on the position covariance is J_x⁻¹ and its RMS figure
//! √trace(J_x⁻¹). Direction (far field): τ_i = −s_i·u / c with u(azimuth, elevation); with the
//! range unknown, the direction block of the bound on (azimuth, elevation, inverse range).

use nalgebra::{DMatrix, DVector, Matrix2, Matrix3, Vector3};

/// The arrival-time Fisher information of one frame (M × M, seconds⁻²) for per-bin, per-sensor
/// SNRs: `snr[b][i]` is sensor i's signal-to-noise power ratio in bin b at angular frequency
/// `omega[b]` (rad/s). Bins with every SNR zero add nothing.
pub fn delay_fim(omega: &[f64], snr: &[Vec<f64>]) -> DMatrix<f64> {
    let m = snr.first().map(|v| v.len()).unwrap_or(0);
    let mut j = DMatrix::<f64>::zeros(m, m);
    for (w, a) in omega.iter().zip(snr) {
        add_bin(&mut j, *w, a);
    }
    j
}

/// Add one bin's information (weighted by 2 ω²) to `j`.
pub fn add_bin(j: &mut DMatrix<f64>, omega: f64, a: &[f64]) {
    let m = a.len();
    // P = D − D11ᵀD / (1 + Σa), D = diag(a): u = P1 = a / (1 + Σa), σ = Σa / (1 + Σa).
    let sum: f64 = a.iter().map(|v| v.max(0.0)).sum();
    if sum <= 0.0 {
        return;
    }
    let k = 1.0 / (1.0 + sum);
    let sigma = sum * k;
    let w2 = 2.0 * omega * omega;
    for r in 0..m {
        let ar = a[r].max(0.0);
        for c in 0..m {
            let ac = a[c].max(0.0);
            let p = if r == c { ar } else { 0.0 } - ar * ac * k;
            let (ur, uc) = (ar * k, ac * k);
            j[(r, c)] += w2 * (sigma * p - ur * uc);
        }
    }
}

/// Knapp and Carter's two-sensor bound on the variance of a time difference (s²) for per-bin
/// SNRs `a1[b]`, `a2[b]`: 1 / (2 Σ ω² γ²/(1 − γ²)).
pub fn knapp_carter_var(omega: &[f64], a1: &[f64], a2: &[f64]) -> f64 {
    let info: f64 = omega
        .iter()
        .zip(a1.iter().zip(a2))
        .map(|(w, (x, y))| 2.0 * w * w * x * y / (1.0 + x + y))
        .sum();
    1.0 / info
}

/// Unit vectors from each sensor to `x` (rows of G).
fn directions(sensors: &[[f64; 3]], x: &Vector3<f64>) -> Option<DMatrix<f64>> {
    let mut g = DMatrix::<f64>::zeros(sensors.len(), 3);
    for (i, s) in sensors.iter().enumerate() {
        let d = x - Vector3::from(*s);
        let r = d.norm();
        if r < 1e-9 {
            return None;
        }
        for c in 0..3 {
            g[(i, c)] = d[c] / r;
        }
    }
    Some(g)
}

/// The bound on the position covariance (m²) at `x` from the arrival-time information `j_tau`,
/// or None where the geometry leaves a direction unobservable there.
pub fn position_cov(
    sensors: &[[f64; 3]],
    speed_of_sound_m_s: f64,
    x: [f64; 3],
    j_tau: &DMatrix<f64>,
) -> Option<Matrix3<f64>> {
    let g = directions(sensors, &Vector3::from(x))?;
    let jx = g.transpose() * j_tau * &g / (speed_of_sound_m_s * speed_of_sound_m_s);
    let jx = Matrix3::from_iterator(jx.iter().copied());
    invert_spd3(&jx)
}

/// √trace of the position bound (m): the smallest RMS position error an unbiased estimator can
/// reach from this frame.
pub fn position_rms(
    sensors: &[[f64; 3]],
    speed_of_sound_m_s: f64,
    x: [f64; 3],
    j_tau: &DMatrix<f64>,
) -> Option<f64> {
    position_cov(sensors, speed_of_sound_m_s, x, j_tau).map(|c| c.trace().max(0.0).sqrt())
}

fn invert_spd3(m: &Matrix3<f64>) -> Option<Matrix3<f64>> {
    let scale = m.diagonal().max();
    if !(scale > 0.0) || !scale.is_finite() {
        return None;
    }
    // Condition check: a nearly singular information matrix (a direction the geometry cannot
    // see) has no finite bound.
    let ev = m.symmetric_eigenvalues();
    if ev.min() <= 1e-12 * ev.max() {
        return None;
    }
    m.try_inverse()
}

/// Unit vector for azimuth (from +x towards +y) and elevation (up from the x-y plane), radians.
pub fn unit_vector(azimuth: f64, elevation: f64) -> Vector3<f64> {
    Vector3::new(
        elevation.cos() * azimuth.cos(),
        elevation.cos() * azimuth.sin(),
        elevation.sin(),
    )
}

/// ∂u/∂azimuth and ∂u/∂elevation of [`unit_vector`].
fn unit_vector_derivatives(azimuth: f64, elevation: f64) -> (Vector3<f64>, Vector3<f64>) {
    (
        Vector3::new(
            -elevation.cos() * azimuth.sin(),
            elevation.cos() * azimuth.cos(),
            0.0,
        ),
        Vector3::new(
            -elevation.sin() * azimuth.cos(),
            -elevation.sin() * azimuth.sin(),
            elevation.cos(),
        ),
    )
}

/// Azimuth and elevation (radians) of a direction.
pub fn angles(u: &Vector3<f64>) -> (f64, f64) {
    let n = u.norm().max(1e-300);
    (u.y.atan2(u.x), (u.z / n).clamp(-1.0, 1.0).asin())
}

/// The bound on (azimuth, elevation) in radians² for a far-field source in direction
/// (azimuth, elevation), or None where unobservable (e.g. elevation from a planar array seen
/// edge-on, or azimuth at the zenith).
pub fn direction_cov(
    sensors: &[[f64; 3]],
    speed_of_sound_m_s: f64,
    azimuth: f64,
    elevation: f64,
    j_tau: &DMatrix<f64>,
) -> Option<Matrix2<f64>> {
    // τ_i = −s_i·u / c: ∂τ_i/∂θ = −s_i·∂u/∂θ / c.
    let (du_az, du_el) = unit_vector_derivatives(azimuth, elevation);
    let m = sensors.len();
    let mut h = DMatrix::<f64>::zeros(m, 2);
    for (i, s) in sensors.iter().enumerate() {
        let sv = Vector3::from(*s);
        h[(i, 0)] = -sv.dot(&du_az) / speed_of_sound_m_s;
        h[(i, 1)] = -sv.dot(&du_el) / speed_of_sound_m_s;
    }
    let j = h.transpose() * j_tau * h;
    let j = Matrix2::new(j[(0, 0)], j[(0, 1)], j[(1, 0)], j[(1, 1)]);
    let det = j.determinant();
    let scale = j[(0, 0)].max(j[(1, 1)]);
    if !(scale > 0.0) || det <= 1e-12 * scale * scale {
        return None;
    }
    j.try_inverse()
}

/// A line array's bound on the angle θ between a far-field source and its `axis` (radians²):
/// the direction is cos θ axis + sin θ `side`, and the line's delays move only with θ. None
/// along the axis (endfire), where the delays are flat in the angle.
pub fn cone_var(
    sensors: &[[f64; 3]],
    speed_of_sound_m_s: f64,
    theta: f64,
    axis: &Vector3<f64>,
    side: &Vector3<f64>,
    j_tau: &DMatrix<f64>,
) -> Option<f64> {
    let t = -axis * theta.sin() + side * theta.cos();
    let h = DVector::from_iterator(
        sensors.len(),
        sensors
            .iter()
            .map(|s| -Vector3::from(*s).dot(&t) / speed_of_sound_m_s),
    );
    let j = (h.transpose() * j_tau * &h)[(0, 0)];
    let scale = h.norm_squared() * j_tau.norm();
    (j > 1e-12 * scale && j.is_finite()).then(|| 1.0 / j)
}

/// A line array's bound on the angle θ to its `axis` (radians²) for a source at inverse range
/// `inv_range` (1/m; 0 for a plane wave) whose range is not known: the θ entry of the inverse
/// information on (θ, inverse range), with the delays of the tracker's curved-wavefront model
/// (see [`direction_cov_unknown_range`]) differentiated numerically. Where the curvature
/// carries no information (a plane wave far away) it is [`cone_var`]. None where unobservable.
pub fn cone_var_unknown_range(
    sensors: &[[f64; 3]],
    speed_of_sound_m_s: f64,
    theta: f64,
    inv_range: f64,
    axis: &Vector3<f64>,
    side: &Vector3<f64>,
    j_tau: &DMatrix<f64>,
) -> Option<f64> {
    let delays = |th: f64, rho: f64| -> DVector<f64> {
        let u = axis * th.cos() + side * th.sin();
        DVector::from_iterator(
            sensors.len(),
            sensors.iter().map(|s| {
                let d = Vector3::from(*s);
                let q = (u - rho * d).norm();
                (rho * d.norm_squared() - 2.0 * u.dot(&d)) / (1.0 + q) / speed_of_sound_m_s
            }),
        )
    };
    let rho = inv_range.max(0.0);
    let (ht, hr) = (1e-6, 1e-6 * (1.0 + rho));
    let dt = (delays(theta + ht, rho) - delays(theta - ht, rho)) / (2.0 * ht);
    let dr = (delays(theta, rho + hr) - delays(theta, (rho - hr).max(0.0)))
        / (rho + hr - (rho - hr).max(0.0));
    let jtt = (dt.transpose() * j_tau * &dt)[(0, 0)];
    let jtr = (dt.transpose() * j_tau * &dr)[(0, 0)];
    let jrr = (dr.transpose() * j_tau * &dr)[(0, 0)];
    let det = jtt * jrr - jtr * jtr;
    if !(jtt > 0.0) || !det.is_finite() {
        return None;
    }
    if det <= 1e-9 * jtt * jrr.max(1e-300) {
        // No information on the range (or none beyond the angle's): the angle alone.
        return cone_var(sensors, speed_of_sound_m_s, theta, axis, side, j_tau);
    }
    Some(jrr / det)
}

/// The bound on (azimuth, elevation) in radians² for a source in direction (azimuth,
/// elevation) at inverse range `inv_range` (1/m; 0 for a plane wave) from the array centre,
/// whose range is not known: the direction block of the inverse information on (azimuth,
/// elevation, inverse range). That is the information on the direction with the range's share
/// taken out (a Schur complement); at ρ = 0 it is never below [`direction_cov`]'s, which takes
/// the plane wave as known. `sensors` are relative to the array centre. The delay of sensor
/// i relative to the centre is the exact (ρ|d|² − 2u·d) / (1 + |u − ρd|) / c for its offset d,
/// as the tracker's curved-wavefront model; at ρ = 0 it is the plane wave's −u·d / c. None
/// where the direction is unobservable.
pub fn direction_cov_unknown_range(
    sensors: &[[f64; 3]],
    speed_of_sound_m_s: f64,
    azimuth: f64,
    elevation: f64,
    inv_range: f64,
    j_tau: &DMatrix<f64>,
) -> Option<Matrix2<f64>> {
    let u = unit_vector(azimuth, elevation);
    let (du_az, du_el) = unit_vector_derivatives(azimuth, elevation);
    let rho = inv_range.max(0.0);
    let m = sensors.len();
    let mut h = DMatrix::<f64>::zeros(m, 3);
    for (i, s) in sensors.iter().enumerate() {
        let d = Vector3::from(*s);
        // f = (ρ|d|² − 2u·d) / (1 + q), q = |u − ρd|.
        let w = u - rho * d;
        let q = w.norm();
        if q < 1e-12 {
            return None;
        }
        let num = rho * d.norm_squared() - 2.0 * u.dot(&d);
        let den = 1.0 + q;
        // ∂f/∂u and ∂f/∂ρ.
        let df_du = (-2.0 * d * den - num * w / q) / (den * den);
        let df_drho = (d.norm_squared() * den + num * d.dot(&w) / q) / (den * den);
        h[(i, 0)] = df_du.dot(&du_az) / speed_of_sound_m_s;
        h[(i, 1)] = df_du.dot(&du_el) / speed_of_sound_m_s;
        h[(i, 2)] = df_drho / speed_of_sound_m_s;
    }
    let j = h.transpose() * j_tau * h;
    let mut jd = Matrix2::new(j[(0, 0)], j[(0, 1)], j[(1, 0)], j[(1, 1)]);
    let jrr = j[(2, 2)];
    if jrr > 0.0 {
        let b = nalgebra::Vector2::new(j[(0, 2)], j[(1, 2)]);
        jd -= b * b.transpose() / jrr;
    }
    let det = jd.determinant();
    let scale = jd[(0, 0)].max(jd[(1, 1)]);
    if !(scale > 0.0) || det <= 1e-12 * scale * scale {
        return None;
    }
    jd.try_inverse()
}

/// Frequency bands (bin ranges) for SNR estimation and the bound: the processing band cut into
/// at most `max_bands` runs of equal width.
pub fn bands(lo_bin: usize, hi_bin: usize, max_bands: usize) -> Vec<(usize, usize)> {
    if hi_bin < lo_bin {
        return Vec::new();
    }
    let n = hi_bin - lo_bin + 1;
    let count = max_bands.clamp(1, n);
    (0..count)
        .map(|b| (lo_bin + b * n / count, lo_bin + (b + 1) * n / count - 1))
        .collect()
}

/// Largest per-bin SNR `snr_from_coherence` reports (30 dB).
pub const MAX_SNR: f64 = 1000.0;

/// Per-sensor SNR from pairwise magnitude-squared coherences: γ²_ij = b_i b_j with b = a / (1 +
/// a), solved for log b in least squares over the pairs (three or more sensors). `msc[p]` is
/// the coherence of `pairs[p]`.
pub fn snr_from_coherence(m: usize, pairs: &[(usize, usize)], msc: &[f64]) -> Vec<f64> {
    // Normal equations of Σ_p (y_a + y_b − log γ²_p)² in y = log b.
    let mut ata = DMatrix::<f64>::zeros(m, m);
    let mut atb = nalgebra::DVector::<f64>::zeros(m);
    for (&(a, b), &g) in pairs.iter().zip(msc) {
        let l = g.clamp(1e-9, 1.0 - 1e-9).ln();
        ata[(a, a)] += 1.0;
        ata[(b, b)] += 1.0;
        ata[(a, b)] += 1.0;
        ata[(b, a)] += 1.0;
        atb[a] += l;
        atb[b] += l;
    }
    // A tiny ridge keeps sensors without pairs at b ≈ e^0 · 0 (no information).
    for i in 0..m {
        ata[(i, i)] += 1e-9;
    }
    let y = ata
        .lu()
        .solve(&atb)
        .unwrap_or_else(|| nalgebra::DVector::from_element(m, -30.0));
    // Per-bin SNR is capped at 30 dB: a coherence estimate a hair from 1 (few cells, a tonal
    // component) would otherwise claim near-infinite information.
    y.iter()
        .map(|&v| {
            let b = v.exp().min(MAX_SNR / (1.0 + MAX_SNR));
            b / (1.0 - b)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::philox::{PhiloxStream, Stream};
    use rustfft::num_complex::Complex64;

    fn omegas(n: usize, fs: f64, lo: usize, hi: usize) -> Vec<f64> {
        (lo..=hi)
            .map(|k| 2.0 * std::f64::consts::PI * k as f64 * fs / n as f64)
            .collect()
    }

    /// Two sensors: the multi-sensor information of the difference equals Knapp–Carter.
    #[test]
    fn two_sensors_reduce_to_knapp_carter() {
        let w = omegas(1024, 48_000.0, 10, 400);
        let a1: Vec<f64> = (0..w.len()).map(|b| 0.5 + 0.01 * b as f64).collect();
        let a2: Vec<f64> = (0..w.len())
            .map(|b| 3.0 / (1.0 + 0.02 * b as f64))
            .collect();
        let snr: Vec<Vec<f64>> = a1.iter().zip(&a2).map(|(x, y)| vec![*x, *y]).collect();
        let j = delay_fim(&w, &snr);
        // Info of D = τ2 − τ1 with the common shift eliminated: J_22 (J 1 = 0).
        assert!((j[(0, 0)] + j[(0, 1)]).abs() <= 1e-9 * j[(0, 0)], "J 1 = 0");
        let var = 1.0 / j[(1, 1)];
        let kc = knapp_carter_var(&w, &a1, &a2);
        assert!((var - kc).abs() <= 1e-12 * kc, "{var} vs {kc}");
    }

    /// A common shift of every arrival time is unobservable with any number of sensors.
    #[test]
    fn common_shift_carries_no_information() {
        let w = omegas(512, 16_000.0, 5, 200);
        let snr: Vec<Vec<f64>> = (0..w.len())
            .map(|b| vec![1.0, 0.3, 2.0 + b as f64 * 0.01, 0.7, 5.0])
            .collect();
        let j = delay_fim(&w, &snr);
        let ones = nalgebra::DVector::from_element(5, 1.0);
        let r = &j * ones;
        assert!(r.norm() <= 1e-9 * j.norm());
    }

    /// The bound against a Monte-Carlo run of the maximum-likelihood estimator, for a static
    /// source seen by four sensors with equal white SNR: per bin, X_i = s e^{-jωτ_i} + n_i, and
    /// the position maximising the steered response power Σ_k |Σ_i X_i e^{jωτ_i(x)}|² (the ML
    /// estimator for this model) is found by Newton steps from the truth. Its RMS error matches
    /// √trace(J_x⁻¹) within the Monte-Carlo spread.
    #[test]
    fn bound_matches_monte_carlo_ml_estimator() {
        let sensors = [
            [0.0, 0.0, 0.0],
            [1.2, 0.1, 0.0],
            [0.2, 1.1, 0.1],
            [0.4, 0.3, 0.9],
        ];
        let c = 343.0;
        let fs = 16_000.0;
        let n = 512;
        let (lo, hi) = (8usize, 200usize);
        let w = omegas(n, fs, lo, hi);
        let a = 0.5; // -3 dB per bin and sensor
        let x0 = [1.5, 1.8, 0.6];
        let snr: Vec<Vec<f64>> = w.iter().map(|_| vec![a; 4]).collect();
        let jt = delay_fim(&w, &snr);
        let bound = position_rms(&sensors, c, x0, &jt).unwrap();
        let tau = |x: &[f64; 3]| -> Vec<f64> {
            sensors
                .iter()
                .map(|s| {
                    ((x[0] - s[0]).powi(2) + (x[1] - s[1]).powi(2) + (x[2] - s[2]).powi(2)).sqrt()
                        / c
                })
                .collect()
        };
        let t0 = tau(&x0);
        let mut r = PhiloxStream::new(5, 0, Stream::Simulate);
        let mut sq = 0.0;
        let trials = 300;
        for _ in 0..trials {
            // Signal power 1 per bin, noise power 1/a (complex Gaussian, E|z|² as given).
            let data: Vec<Vec<Complex64>> = w
                .iter()
                .map(|&om| {
                    let s = Complex64::new(r.normal_f64(), r.normal_f64()) * (0.5f64).sqrt();
                    (0..4)
                        .map(|i| {
                            let nz =
                                Complex64::new(r.normal_f64(), r.normal_f64()) * (0.5 / a).sqrt();
                            s * Complex64::from_polar(1.0, -om * t0[i]) + nz
                        })
                        .collect()
                })
                .collect();
            let srp = |x: &[f64; 3]| -> f64 {
                let t = tau(x);
                w.iter()
                    .zip(&data)
                    .map(|(&om, xs)| {
                        xs.iter()
                            .zip(&t)
                            .map(|(v, ti)| v * Complex64::from_polar(1.0, om * ti))
                            .sum::<Complex64>()
                            .norm_sqr()
                    })
                    .sum()
            };
            // Newton ascent with central differences.
            let mut x = x0;
            for _ in 0..6 {
                let h = 2e-4;
                let mut g = [0.0; 3];
                let mut hm = Matrix3::<f64>::zeros();
                let f0 = srp(&x);
                for i in 0..3 {
                    let mut xp = x;
                    xp[i] += h;
                    let mut xm = x;
                    xm[i] -= h;
                    let (fp, fm) = (srp(&xp), srp(&xm));
                    g[i] = (fp - fm) / (2.0 * h);
                    hm[(i, i)] = (fp - 2.0 * f0 + fm) / (h * h);
                    for k in 0..i {
                        let mut a_ = x;
                        a_[i] += h;
                        a_[k] += h;
                        let mut b_ = x;
                        b_[i] += h;
                        b_[k] -= h;
                        let mut c_ = x;
                        c_[i] -= h;
                        c_[k] += h;
                        let mut d_ = x;
                        d_[i] -= h;
                        d_[k] -= h;
                        let v = (srp(&a_) - srp(&b_) - srp(&c_) + srp(&d_)) / (4.0 * h * h);
                        hm[(i, k)] = v;
                        hm[(k, i)] = v;
                    }
                }
                let Some(inv) = hm.try_inverse() else { break };
                let step = inv * Vector3::from(g);
                for i in 0..3 {
                    x[i] -= step[i];
                }
            }
            sq += (0..3).map(|i| (x[i] - x0[i]).powi(2)).sum::<f64>();
        }
        let rmse = (sq / trials as f64).sqrt();
        // 300 trials: the RMS of a 3-D error is within about ±10 % of its expectation.
        assert!(
            (rmse / bound - 1.0).abs() < 0.2,
            "ML RMSE {rmse} m vs bound {bound} m"
        );
    }

    #[test]
    fn coherence_inverts_to_snr() {
        let a = [0.5, 2.0, 8.0, 1.0];
        let b: Vec<f64> = a.iter().map(|v| v / (1.0 + v)).collect();
        let mut pairs = Vec::new();
        let mut msc = Vec::new();
        for i in 0..4 {
            for j in i + 1..4 {
                pairs.push((i, j));
                msc.push(b[i] * b[j]);
            }
        }
        let est = snr_from_coherence(4, &pairs, &msc);
        for (e, t) in est.iter().zip(&a) {
            assert!((e / t - 1.0).abs() < 1e-6, "{est:?}");
        }
    }

    /// A planar array cannot tell up from down: the bound grows without limit as the source
    /// approaches the array's plane from above, and the direction bound has no elevation
    /// information at zero elevation.
    #[test]
    fn bound_grows_towards_the_plane_of_a_planar_array() {
        let sensors = [
            [0.0, 0.0, 0.0],
            [2.0, 0.0, 0.0],
            [0.0, 2.0, 0.0],
            [2.0, 2.0, 0.0],
        ];
        let w = omegas(1024, 48_000.0, 10, 300);
        let snr: Vec<Vec<f64>> = w.iter().map(|_| vec![1.0; 4]).collect();
        let j = delay_fim(&w, &snr);
        // Height is what a planar array sees worst, and worse the closer the source is to the
        // plane (its mirror plane: a source and its mirror image give the same delays).
        let sd_z =
            |z: f64| position_cov(&sensors, 1500.0, [4.0, 1.5, z], &j).unwrap()[(2, 2)].sqrt();
        assert!(
            sd_z(0.1) > 3.0 * sd_z(1.0),
            "{} vs {}",
            sd_z(0.1),
            sd_z(1.0)
        );
        assert!(sd_z(0.5) > sd_z(1.0));
        let high = position_rms(&sensors, 1500.0, [4.0, 1.5, 2.0], &j).unwrap();
        assert!(position_rms(&sensors, 1500.0, [4.0, 1.5, 0.0], &j).is_none());
        assert!(position_rms(&sensors, 1500.0, [1.0, 1.0, 5.0], &j).is_none());
        // The bound grows with range.
        let far = position_rms(
            &sensors,
            1500.0,
            [1.0 + 70.7 * 0.955, 1.0 + 70.7 * 0.296, 70.7],
            &j,
        )
        .unwrap();
        assert!(far > 10.0 * high, "{far} vs {high}");
    }

    /// A frame's arrival-time information for `m` sensors with unequal SNRs (J 1 = 0).
    fn uneven_fim(m: usize) -> DMatrix<f64> {
        let w = omegas(4096, 48_000.0, 20, 1500);
        let snr: Vec<Vec<f64>> = (0..w.len())
            .map(|b| {
                (0..m)
                    .map(|i| (0.3 + 0.4 * i as f64) / (1.0 + 0.002 * b as f64))
                    .collect()
            })
            .collect();
        delay_fim(&w, &snr)
    }

    /// With the range unknown, the direction bound is the direction part of the 3-D position
    /// bound: (azimuth, elevation, inverse range) only reparametrise the position. Checked at
    /// several ranges and directions around a 2 m tetrahedron (positions relative to its
    /// centre), against `position_cov` carried through ∂(azimuth, elevation)/∂x.
    /// A line's angle bound: 1 / sin² θ in the far field (the delays move as sin θ), never
    /// lower with the range unknown than with the plane wave known, near or far (as the
    /// direction bound, the unknown range takes its share at every range); endfire
    /// unobservable.
    #[test]
    fn line_angle_bound() {
        let sensors: Vec<[f64; 3]> = (0..8)
            .map(|i| [0.03 * (i as f64 - 3.5), 0.0, 0.0])
            .collect();
        let j = uneven_fim(8);
        let (a, s) = (Vector3::x(), Vector3::y());
        let var = |th: f64| cone_var(&sensors, 343.0, th, &a, &s, &j).unwrap();
        let ratio = var(30f64.to_radians()) / var(90f64.to_radians());
        assert!((ratio - 4.0).abs() < 1e-6, "{ratio}");
        assert!(cone_var(&sensors, 343.0, 0.0, &a, &s, &j).is_none());
        for th in [0.5f64, 1.2, 2.0] {
            let far = var(th);
            let near = cone_var_unknown_range(&sensors, 343.0, th, 1.0 / 0.3, &a, &s, &j).unwrap();
            let away = cone_var_unknown_range(&sensors, 343.0, th, 1e-4, &a, &s, &j).unwrap();
            assert!(near >= far * (1.0 - 1e-6), "{th}: {near} vs {far}");
            assert!(away >= far * (1.0 - 1e-6), "{th}: {away} vs {far}");
        }
    }

    #[test]
    fn direction_bound_with_unknown_range_is_the_position_bounds_direction() {
        let sensors = [
            [-1.0, -0.577, 0.408],
            [1.0, -0.577, 0.408],
            [0.0, 1.155, 0.408],
            [0.0, 0.0, -1.225],
        ];
        let j = uneven_fim(4);
        for &(r, az, el) in &[(3.0, 0.3, -0.2), (8.0, 2.0, 0.4), (40.0, -1.2, -0.7)] {
            let u = unit_vector(az, el);
            let x = r * u;
            let pc = position_cov(&sensors, 1500.0, x.into(), &j).unwrap();
            let (du_az, du_el) = unit_vector_derivatives(az, el);
            let g_az = du_az / (r * el.cos() * el.cos());
            let g_el = du_el / r;
            let want = Matrix2::new(
                g_az.dot(&(pc * g_az)),
                g_az.dot(&(pc * g_el)),
                g_el.dot(&(pc * g_az)),
                g_el.dot(&(pc * g_el)),
            );
            let got = direction_cov_unknown_range(&sensors, 1500.0, az, el, 1.0 / r, &j).unwrap();
            for k in 0..4 {
                assert!(
                    (got[k] - want[k]).abs() <= 1e-6 * want[(0, 0)].max(want[(1, 1)]),
                    "r {r}: {got} vs {want}"
                );
            }
        }
    }

    /// For an array symmetric about its centre (each sensor's mirror image is a sensor too),
    /// a plane wave's curvature term is even in the offsets and its direction term odd, so not
    /// knowing the range costs nothing at ρ = 0; a tetrahedron (not symmetric) pays for it.
    #[test]
    fn unknown_range_costs_a_symmetric_array_nothing_at_infinity() {
        let cube: Vec<[f64; 3]> = (0..8)
            .map(|k| {
                [
                    if k & 1 == 0 { -0.5 } else { 0.5 },
                    if k & 2 == 0 { -0.4 } else { 0.4 },
                    if k & 4 == 0 { -0.3 } else { 0.3 },
                ]
            })
            .collect();
        let snr_equal = |m: usize| {
            let w = omegas(4096, 48_000.0, 20, 1500);
            let snr: Vec<Vec<f64>> = (0..w.len()).map(|_| vec![2.0; m]).collect();
            delay_fim(&w, &snr)
        };
        let j = snr_equal(8);
        let (az, el) = (0.7, 0.25);
        let known = direction_cov(&cube, 1500.0, az, el, &j).unwrap();
        let unknown = direction_cov_unknown_range(&cube, 1500.0, az, el, 0.0, &j).unwrap();
        for k in 0..4 {
            assert!(
                (known[k] - unknown[k]).abs() <= 1e-9 * known[(0, 0)],
                "{known} vs {unknown}"
            );
        }
        let tetra = [
            [-1.0, -0.577, 0.408],
            [1.0, -0.577, 0.408],
            [0.0, 1.155, 0.408],
            [0.0, 0.0, -1.225],
        ];
        let j = snr_equal(4);
        let known = direction_cov(&tetra, 1500.0, az, el, &j).unwrap();
        let unknown = direction_cov_unknown_range(&tetra, 1500.0, az, el, 0.0, &j).unwrap();
        assert!(
            unknown.trace() > 1.01 * known.trace(),
            "{known} vs {unknown}"
        );
        // Positive semi-definite difference: the unknown range never helps.
        let diff = unknown - known;
        assert!(diff[(0, 0)] >= 0.0 && diff.determinant() >= -1e-12 * diff.norm_squared());
    }

    #[test]
    fn bands_cover_the_range() {
        let b = bands(10, 109, 7);
        assert_eq!(b.first().unwrap().0, 10);
        assert_eq!(b.last().unwrap().1, 109);
        for w in b.windows(2) {
            assert_eq!(w[0].1 + 1, w[1].0);
        }
    }
}
