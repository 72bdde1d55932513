//! Multilateration: a source position (or, far field, a direction) from one frame's TDOAs.
//!
//! Levenberg–Marquardt on the TDOA residuals with Huber weights (a wrong peak on one pair is
//! down-weighted rather than dragging the fix), started from several points so that the local
//! minimum it finds is the global one. Used to start tracks, and as the snapshot baseline.

use nalgebra::{Matrix3, Vector3};

use crate::dsp::geometry::{ArrayGeometry, Pair};

/// One multilateration result.
#[derive(Debug, Clone, PartialEq)]
pub struct Fix {
    /// Position (3-D) or unit direction (far field).
    pub position: Vector3<f64>,
    /// Position covariance, m² (σ² (JᵀWJ)⁻¹ at the solution).
    pub covariance: Matrix3<f64>,
    /// RMS of the TDOA residuals over the pairs used, seconds.
    pub residual_rms_s: f64,
    /// Pairs whose residual is within 3 σ.
    pub inliers: usize,
}

/// One TDOA observation.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Obs {
    pub pair: Pair,
    pub tdoa_s: f64,
}

fn residual_and_jacobian(geo: &ArrayGeometry, obs: &Obs, x: &Vector3<f64>) -> (f64, Vector3<f64>) {
    let c = geo.speed_of_sound_m_s;
    let ra = (x - geo.sensor(obs.pair.a)).norm().max(1e-9);
    let rb = (x - geo.sensor(obs.pair.b)).norm().max(1e-9);
    ((ra - rb) / c - obs.tdoa_s, geo.tdoa_gradient(x, &obs.pair))
}

/// Robust Levenberg–Marquardt from one start. Returns (position, robust cost).
fn solve_from(
    geo: &ArrayGeometry,
    obs: &[Obs],
    start: Vector3<f64>,
    sigma_s: f64,
) -> (Vector3<f64>, f64) {
    let huber = 1.5 * sigma_s;
    let cost = |x: &Vector3<f64>| -> f64 {
        obs.iter()
            .map(|o| {
                let r = residual_and_jacobian(geo, o, x).0.abs();
                if r <= huber {
                    0.5 * r * r
                } else {
                    huber * (r - 0.5 * huber)
                }
            })
            .sum()
    };
    let mut x = start;
    let mut lambda = 1e-3;
    let mut f = cost(&x);
    for _ in 0..60 {
        let mut jtj = Matrix3::<f64>::zeros();
        let mut jtr = Vector3::<f64>::zeros();
        for o in obs {
            let (r, j) = residual_and_jacobian(geo, o, &x);
            let w = if r.abs() <= huber {
                1.0
            } else {
                huber / r.abs()
            };
            jtj += w * j * j.transpose();
            jtr += w * r * j;
        }
        let mut improved = false;
        for _ in 0..10 {
            let mut a = jtj;
            for k in 0..3 {
                a[(k, k)] += lambda * (jtj[(k, k)] + 1e-12);
            }
            let Some(step) = a.lu().solve(&(-jtr)) else {
                lambda *= 10.0;
                continue;
            };
            let xn = x + step;
            let fnew = cost(&xn);
            if fnew < f {
                let small = step.norm() < 1e-7 * (1.0 + x.norm());
                x = xn;
                f = fnew;
                lambda = (lambda * 0.3).max(1e-9);
                improved = true;
                if small {
                    return (x, f);
                }
                break;
            }
            lambda *= 10.0;
        }
        if !improved {
            break;
        }
    }
    (x, f)
}

/// Whether `x` lies in `bounds` (to a micrometre), or anywhere when there are none.
fn within(bounds: Option<([f64; 3], [f64; 3])>, x: &Vector3<f64>) -> bool {
    match bounds {
        Some((lo, hi)) => (0..3).all(|k| x[k] >= lo[k] - 1e-6 && x[k] <= hi[k] + 1e-6),
        None => true,
    }
}

/// Candidate starting points: the centroid pushed out along the principal axes and a coarse
/// grid over the search volume (or ±2 apertures around the array).
pub fn start_points(
    geo: &ArrayGeometry,
    bounds: Option<([f64; 3], [f64; 3])>,
) -> Vec<Vector3<f64>> {
    let c = geo.centroid();
    let ap = geo.aperture_m().max(1e-3);
    let (lo, hi) = match bounds {
        Some((lo, hi)) => (Vector3::from(lo), Vector3::from(hi)),
        None => (c.add_scalar(-2.0 * ap), c.add_scalar(2.0 * ap)),
    };
    let mut pts = vec![c.zip_map(&lo, f64::max).zip_map(&hi, f64::min)];
    let n = 4;
    for i in 0..n {
        for j in 0..n {
            for k in 0..n {
                let f = |a: usize| (a as f64 + 0.5) / n as f64;
                pts.push(Vector3::new(
                    lo.x + f(i) * (hi.x - lo.x),
                    lo.y + f(j) * (hi.y - lo.y),
                    lo.z + f(k) * (hi.z - lo.z),
                ));
            }
        }
    }
    pts
}

/// The 3-D fix that best explains `obs`, within `bounds` when given.
pub fn locate(
    geo: &ArrayGeometry,
    obs: &[Obs],
    sigma_s: f64,
    bounds: Option<([f64; 3], [f64; 3])>,
    extra_starts: &[Vector3<f64>],
) -> Option<Fix> {
    if obs.len() < 3 {
        return None;
    }
    let inside = |x: &Vector3<f64>| within(bounds, x);
    // The solves from the 65 or so start points are independent: they run on the rayon pool
    // (a fix took about a millisecond on one core, every frame while a track could be born),
    // and the best is taken in the order of the starts, as a sequential loop would.
    use rayon::prelude::*;
    let starts: Vec<Vector3<f64>> = extra_starts
        .iter()
        .copied()
        .chain(start_points(geo, bounds))
        .collect();
    let solved: Vec<(Vector3<f64>, f64)> = starts
        .par_iter()
        .map(|&s| solve_from(geo, obs, s, sigma_s))
        .collect();
    let mut best: Option<(Vector3<f64>, f64)> = None;
    for (x, f) in solved {
        if !x.iter().all(|v| v.is_finite()) || !inside(&x) {
            continue;
        }
        if best.as_ref().is_none_or(|b| f < b.1) {
            best = Some((x, f));
        }
    }
    let (x, _) = best?;
    fix_at(geo, obs, x, sigma_s)
}

/// One pair's candidate TDOAs (its peaks, seconds) and a weight for each (the peak's height).
#[derive(Debug, Clone, PartialEq)]
pub struct PairPeaks {
    pub pair: Pair,
    pub tdoa_s: Vec<f64>,
    pub weight: Vec<f64>,
}

/// Each pair's peak nearest to what a source at `x` would give it.
fn nearest_peaks(geo: &ArrayGeometry, peaks: &[PairPeaks], x: &Vector3<f64>) -> Vec<usize> {
    peaks
        .iter()
        .map(|pp| {
            let model = geo.tdoa_s(x, &pp.pair);
            (0..pp.tdoa_s.len())
                .min_by(|&a, &b| {
                    (pp.tdoa_s[a] - model)
                        .abs()
                        .total_cmp(&(pp.tdoa_s[b] - model).abs())
                })
                .unwrap_or(0)
        })
        .collect()
}

/// The 3-D fix that the pairs' peaks agree on best when several sources (or echoes) each give
/// every pair a peak: from each start point, alternately take each pair's peak nearest the
/// current position and solve (until the choice settles); the position whose inlying peaks
/// weigh most wins. Returns the fix over the chosen peaks and each pair's chosen peak (an index
/// into its `tdoa_s`). Pairs without a peak must be left out of `peaks`.
pub fn locate_consensus(
    geo: &ArrayGeometry,
    peaks: &[PairPeaks],
    sigma_s: f64,
    bounds: Option<([f64; 3], [f64; 3])>,
    extra_starts: &[Vector3<f64>],
) -> Option<(Fix, Vec<usize>)> {
    if peaks.len() < 3 || peaks.iter().any(|pp| pp.tdoa_s.is_empty()) {
        return None;
    }
    let inside = |x: &Vector3<f64>| within(bounds, x);
    let obs_of = |sel: &[usize]| -> Vec<Obs> {
        peaks
            .iter()
            .zip(sel)
            .map(|(pp, &j)| Obs {
                pair: pp.pair,
                tdoa_s: pp.tdoa_s[j],
            })
            .collect()
    };
    // A settled start: its position, each pair's chosen peak, and the weight it explains.
    type Settled = (Vector3<f64>, Vec<usize>, f64);
    let settle = |start: Vector3<f64>| -> Option<Settled> {
        let mut x = start;
        let mut sel = nearest_peaks(geo, peaks, &x);
        for _ in 0..6 {
            let (xn, _) = solve_from(geo, &obs_of(&sel), x, sigma_s);
            if !xn.iter().all(|v| v.is_finite()) {
                return None;
            }
            x = xn;
            let next = nearest_peaks(geo, peaks, &x);
            if next == sel {
                break;
            }
            sel = next;
        }
        // The weight of the peaks that the position explains within 3 σ.
        let score: f64 = peaks
            .iter()
            .zip(&sel)
            .filter(|(pp, j)| (geo.tdoa_s(&x, &pp.pair) - pp.tdoa_s[**j]).abs() <= 3.0 * sigma_s)
            .map(|(pp, &j)| pp.weight[j])
            .sum();
        inside(&x).then_some((x, sel, score))
    };
    use rayon::prelude::*;
    let starts: Vec<Vector3<f64>> = extra_starts
        .iter()
        .copied()
        .chain(start_points(geo, bounds))
        .collect();
    let settled: Vec<Option<Settled>> = starts.par_iter().map(|&s| settle(s)).collect();
    // The best in the order of the starts (ties keep the earlier start, as a loop would).
    let mut best: Option<Settled> = None;
    for c in settled.into_iter().flatten() {
        if best.as_ref().is_none_or(|b| c.2 > b.2) {
            best = Some(c);
        }
    }
    let (x, sel, _) = best?;
    let fix = fix_at(geo, &obs_of(&sel), x, sigma_s)?;
    Some((fix, sel))
}

/// The fix reached from `start` alone (a local solve, unbounded): where a track's own peaks
/// put the source, wherever that is. None with fewer than three observations or a singular
/// geometry.
pub fn refine(geo: &ArrayGeometry, obs: &[Obs], start: Vector3<f64>, sigma_s: f64) -> Option<Fix> {
    if obs.len() < 3 {
        return None;
    }
    let (x, _) = solve_from(geo, obs, start, sigma_s);
    x.iter()
        .all(|v| v.is_finite())
        .then(|| fix_at(geo, obs, x, sigma_s))?
}

/// The fix at `x`: its covariance, residual and inliers.
fn fix_at(geo: &ArrayGeometry, obs: &[Obs], x: Vector3<f64>, sigma_s: f64) -> Option<Fix> {
    let mut jtj = Matrix3::<f64>::zeros();
    let mut ss = 0.0;
    let mut inliers = 0;
    for o in obs {
        let (r, j) = residual_and_jacobian(geo, o, &x);
        jtj += j * j.transpose();
        ss += r * r;
        if r.abs() <= 3.0 * sigma_s {
            inliers += 1;
        }
    }
    let covariance = jtj.try_inverse().map(|m| m * sigma_s * sigma_s)?;
    Some(Fix {
        position: x,
        covariance,
        residual_rms_s: (ss / obs.len() as f64).sqrt(),
        inliers,
    })
}

/// Every distinct position that explains `obs` almost exactly (residual RMS below `tol_s`),
/// searched from the standard start points and `extra_starts`, within `bounds`: more than one
/// means the TDOAs are ambiguous there (four sensors, or sources near a planar array's plane).
pub fn all_solutions(
    geo: &ArrayGeometry,
    obs: &[Obs],
    bounds: Option<([f64; 3], [f64; 3])>,
    extra_starts: &[Vector3<f64>],
    tol_s: f64,
    min_separation_m: f64,
) -> Vec<Vector3<f64>> {
    let inside = |x: &Vector3<f64>| within(bounds, x);
    let mut found: Vec<Vector3<f64>> = Vec::new();
    for s in extra_starts
        .iter()
        .copied()
        .chain(start_points(geo, bounds))
    {
        let (x, _) = solve_from(geo, obs, s, tol_s);
        if !x.iter().all(|v| v.is_finite()) || !inside(&x) {
            continue;
        }
        let rms = (obs
            .iter()
            .map(|o| residual_and_jacobian(geo, o, &x).0.powi(2))
            .sum::<f64>()
            / obs.len().max(1) as f64)
            .sqrt();
        if rms <= tol_s && found.iter().all(|f| (f - x).norm() > min_separation_m) {
            found.push(x);
        }
    }
    found
}

/// Far-field direction (unit vector from the array towards the source) by linear least squares
/// on `c τ_ab = (m_b - m_a) · u`. For a planar array the out-of-plane component comes from the
/// unit norm, on the side of `hemisphere` (a vector pointing into the half-space to prefer).
pub fn direction(
    geo: &ArrayGeometry,
    obs: &[Obs],
    sigma_s: f64,
    hemisphere: Vector3<f64>,
) -> Option<Fix> {
    // (One pair is enough for a pair of sensors: it measures the one angle they can see.)
    if obs.is_empty() {
        return None;
    }
    let c = geo.speed_of_sound_m_s;
    let mut ata = Matrix3::<f64>::zeros();
    let mut atb = Vector3::<f64>::zeros();
    for o in obs {
        let a = geo.sensor(o.pair.b) - geo.sensor(o.pair.a);
        ata += a * a.transpose();
        atb += a * (c * o.tdoa_s);
    }
    let eig = ata.symmetric_eigen();
    let mut u = Vector3::zeros();
    let max_ev = eig.eigenvalues.max();
    let mut null_dirs: Vec<Vector3<f64>> = Vec::new();
    let mut pinv = Matrix3::<f64>::zeros();
    for k in 0..3 {
        let ev = eig.eigenvalues[k];
        let v: Vector3<f64> = eig.eigenvectors.column(k).into();
        if ev > 1e-6 * max_ev {
            u += v * (v.dot(&atb) / ev);
            pinv += v * v.transpose() / ev;
        } else {
            null_dirs.push(v);
        }
    }
    let n2 = u.norm_squared();
    if !null_dirs.is_empty() {
        // The unobserved part fills the unit norm along the hemisphere's share of the null
        // space (a flat array's normal, or for a line the way to the half-plane asked for).
        let towards: Vector3<f64> = null_dirs.iter().map(|v| v * v.dot(&hemisphere)).sum();
        let fill = towards.try_normalize(1e-9).unwrap_or(null_dirs[0]);
        u += fill * (1.0 - n2).max(0.0).sqrt();
    }
    let norm = u.norm();
    if !(norm > 1e-9) {
        return None;
    }
    let u = u / norm;
    let mut ss = 0.0;
    let mut inliers = 0;
    for o in obs {
        let r = geo.tdoa_far_s(&u, &o.pair) - o.tdoa_s;
        ss += r * r;
        if r.abs() <= 3.0 * sigma_s {
            inliers += 1;
        }
    }
    // A line array's unobserved turn about its axis is left out of the covariance (the
    // observed angle's alone), not made infinite as a flat array's normal is.
    let cov = if null_dirs.len() == 2 {
        pinv
    } else {
        ata.try_inverse()
            .unwrap_or_else(|| Matrix3::identity() * 1e6)
    } * (c * sigma_s).powi(2);
    Some(Fix {
        position: u,
        covariance: cov,
        residual_rms_s: (ss / obs.len() as f64).sqrt(),
        inliers,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dsp::geometry::PairMode;
    use crate::rng::philox::{PhiloxStream, Stream};
    use proptest::prelude::*;

    fn pier() -> ArrayGeometry {
        ArrayGeometry::new(crate::bench::workload::harbour_sensors(), 1500.0)
    }

    fn observe(geo: &ArrayGeometry, p: &Vector3<f64>, mode: PairMode) -> Vec<Obs> {
        geo.pairs(mode, 0)
            .into_iter()
            .map(|pair| Obs {
                pair,
                tdoa_s: geo.tdoa_s(p, &pair),
            })
            .collect()
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        /// Exact TDOAs of a point inside the search volume lead back to that point.
        #[test]
        fn round_trip(x in -70.0f64..70.0, y in -70.0f64..70.0, z in -55.0f64..-1.0) {
            let geo = pier();
            let p = Vector3::new(x, y, z);
            let bounds = Some(([-80.0, -80.0, -60.0], [80.0, 80.0, 0.0]));
            let fix = locate(&geo, &observe(&geo, &p, PairMode::All), 1e-6, bounds, &[]).unwrap();
            prop_assert!((fix.position - p).norm() < 1e-3, "{:?} vs {:?}", fix.position, p);
            prop_assert!(fix.residual_rms_s < 1e-9);
        }
    }

    /// A line array's far-field fix: the angle to the axis from the delays, the rest of the
    /// unit norm along the hemisphere's share of the unobserved plane, and a covariance along
    /// the observed angle only.
    #[test]
    fn line_direction_fills_towards_the_hemisphere() {
        let geo = ArrayGeometry::new((0..6).map(|i| [0.04 * i as f64, 0.0, 1.0]).collect(), 343.0);
        let u = Vector3::new(0.5, -0.3, 0.81f64).normalize();
        let obs: Vec<Obs> = geo
            .pairs(PairMode::All, 0)
            .into_iter()
            .map(|pair| Obs {
                pair,
                tdoa_s: geo.tdoa_far_s(&u, &pair),
            })
            .collect();
        let f = direction(&geo, &obs, 1e-5, Vector3::new(0.0, 1.0, 0.2)).unwrap();
        let away = (1.0 - u.x * u.x).sqrt();
        let want = Vector3::new(u.x, away / 1.04f64.sqrt(), 0.2 * away / 1.04f64.sqrt());
        assert!(
            (f.position - want).norm() < 1e-9,
            "{:?} vs {want:?}",
            f.position
        );
        assert_eq!(f.inliers, obs.len());
        assert!(f.covariance[(0, 0)] > 0.0);
        assert!(f.covariance[(1, 1)].abs() < 1e-12 && f.covariance[(2, 2)].abs() < 1e-12);
        // One pair (a two-microphone array) gives the same angle.
        let one = direction(&geo, &obs[..1], 1e-5, Vector3::new(0.0, 1.0, 0.2)).unwrap();
        assert!((one.position - want).norm() < 1e-9, "{:?}", one.position);
        assert!(direction(&geo, &[], 1e-5, Vector3::y()).is_none());
    }

    #[test]
    fn one_wrong_pair_is_outvoted() {
        let geo = pier();
        let p = Vector3::new(-16.0, 3.0, -12.0);
        let mut obs = observe(&geo, &p, PairMode::All);
        obs[4].tdoa_s += 3e-3; // a reverberant peak 4.5 m off
        let mut rng = PhiloxStream::new(3, 0, Stream::Simulate);
        for o in obs.iter_mut() {
            o.tdoa_s += 2e-6 * rng.normal_f64();
        }
        let fix = locate(&geo, &obs, 5e-6, None, &[]).unwrap();
        assert!((fix.position - p).norm() < 0.1, "{:?}", fix.position);
        assert_eq!(fix.inliers, obs.len() - 1);
    }

    /// Two sources whose peaks are the strongest in alternate pairs: the strongest-peak fix
    /// mixes them and fails; the consensus finds the one whose peaks weigh more, and every pair's
    /// chosen peak is that source's.
    #[test]
    fn consensus_separates_two_sources() {
        let geo = pier();
        let a = Vector3::new(-16.0, 3.0, -12.0);
        let b = Vector3::new(20.0, -25.0, -8.0);
        let (oa, ob) = (
            observe(&geo, &a, PairMode::All),
            observe(&geo, &b, PairMode::All),
        );
        let mut rng = PhiloxStream::new(5, 0, Stream::Simulate);
        let peaks: Vec<PairPeaks> = oa
            .iter()
            .zip(&ob)
            .enumerate()
            .map(|(i, (x, y))| {
                // A slightly stronger overall, but B on top in every other pair; a clutter peak.
                let (wa, wb) = if i % 2 == 0 { (1.0, 0.8) } else { (0.7, 0.9) };
                PairPeaks {
                    pair: x.pair,
                    tdoa_s: vec![
                        y.tdoa_s + 2e-6 * rng.normal_f64(),
                        x.tdoa_s + 2e-6 * rng.normal_f64(),
                        0.011,
                    ],
                    weight: vec![wb, wa, 0.3],
                }
            })
            .collect();
        let strongest: Vec<Obs> = peaks
            .iter()
            .enumerate()
            .map(|(i, pp)| Obs {
                pair: pp.pair,
                tdoa_s: pp.tdoa_s[if i % 2 == 0 { 1 } else { 0 }],
            })
            .collect();
        let mixed = locate(&geo, &strongest, 5e-6, None, &[]).unwrap();
        assert!(2 * mixed.inliers <= strongest.len() || (mixed.position - a).norm() > 1.0);
        let (fix, sel) = locate_consensus(&geo, &peaks, 5e-6, None, &[]).unwrap();
        assert!((fix.position - a).norm() < 0.1, "{:?}", fix.position);
        assert_eq!(fix.inliers, peaks.len());
        assert!(sel.iter().all(|&j| j == 1), "{sel:?}");
        // Without A's peaks, B is found.
        let only_b: Vec<PairPeaks> = peaks
            .iter()
            .map(|pp| PairPeaks {
                pair: pp.pair,
                tdoa_s: vec![pp.tdoa_s[0], pp.tdoa_s[2]],
                weight: vec![pp.weight[0], pp.weight[2]],
            })
            .collect();
        let (fix, _) = locate_consensus(&geo, &only_b, 5e-6, None, &[]).unwrap();
        assert!((fix.position - b).norm() < 0.1, "{:?}", fix.position);
    }

    #[test]
    fn direction_of_a_planar_array() {
        // An 8-microphone circle of 5 cm radius: far-field direction with elevation from the norm.
        let sensors: Vec<[f64; 3]> = (0..8)
            .map(|i| {
                let a = i as f64 * std::f64::consts::TAU / 8.0;
                [0.05 * a.cos(), 0.05 * a.sin(), 0.0]
            })
            .collect();
        let geo = ArrayGeometry::new(sensors, 343.0);
        let u = Vector3::new(0.5, -0.6, 0.4).normalize();
        let obs: Vec<Obs> = geo
            .pairs(PairMode::All, 0)
            .into_iter()
            .map(|pair| Obs {
                pair,
                tdoa_s: geo.tdoa_far_s(&u, &pair),
            })
            .collect();
        let fix = direction(&geo, &obs, 1e-6, Vector3::z()).unwrap();
        assert!((fix.position - u).norm() < 1e-6, "{:?}", fix.position);
        let below = direction(&geo, &obs, 1e-6, -Vector3::z()).unwrap();
        assert!(
            (below.position.z + u.z).abs() < 1e-6,
            "mirror image below the plane"
        );
    }
}
