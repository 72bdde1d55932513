//! The other position a 3-D birth's delays fit. Four sensors give three independent delays for
//! three unknowns, and the hyperboloids they define often cross twice: a far source's delays
//! fit a second point as well, often at about twice the range on the same bearing. A birth
//! there takes whichever solution the fix started nearer. So each 3-D birth whose delays fit a
//! second point inside the search volume gets a twin there ([`super::twins`]): both filters
//! step on every frame, the evidence of each frame is summed between them, the more likely
//! one is reported, its covariance widened to cover the other, and the other is reported
//! beside it until the evidence decides (as the source moves, the two points' delays part).

use nalgebra::{Matrix3, Vector3};

use crate::dsp::geometry::{ArrayGeometry, Pair};
use crate::dsp::multilat::{Obs, all_solutions, refine};
use crate::math::linalg::cholesky6;
use crate::track::{Estimate, TrackInit};

/// A second solution closer than this to the birth (m) is the same one, within the fix's own
/// spread.
pub const ALTERNATE_MIN_M: f64 = 3.0;

/// The other position (and its fix covariance at TDOA noise `sigma_s`) that gives the delays
/// of `pairs` at `x` to within `sigma_s` RMS, inside `bounds`; None when there is none (five
/// or more well-spread sensors, or a second point outside the volume).
pub fn alternate(
    geo: &ArrayGeometry,
    pairs: &[Pair],
    x: Vector3<f64>,
    sigma_s: f64,
    bounds: Option<([f64; 3], [f64; 3])>,
) -> Option<(Vector3<f64>, Matrix3<f64>)> {
    let c = geo.speed_of_sound_m_s;
    let obs: Vec<Obs> = pairs
        .iter()
        .map(|p| Obs {
            pair: *p,
            tdoa_s: ((x - geo.sensor(p.a)).norm() - (x - geo.sensor(p.b)).norm()) / c,
        })
        .collect();
    let found = all_solutions(geo, &obs, bounds, &[], sigma_s, ALTERNATE_MIN_M);
    let y = found
        .into_iter()
        .filter(|y| (y - x).norm() > ALTERNATE_MIN_M)
        .min_by(|a, b| (a - x).norm().total_cmp(&(b - x).norm()))?;
    let fix = refine(geo, &obs, y, sigma_s)?;
    ((fix.position - x).norm() > ALTERNATE_MIN_M).then_some((fix.position, fix.covariance))
}

/// The twin's prior: the birth's `init` and estimate `est` moved to `at`, its position spread
/// the birth's plus the fix covariance there (`cov`, taken four times as the birth takes its
/// own), in `slot`.
pub fn alternate_init(
    init: &TrackInit,
    est: &Estimate,
    at: Vector3<f64>,
    cov: &Matrix3<f64>,
    slot: u32,
) -> (TrackInit, Estimate) {
    let mut e = est.clone();
    e.mean[..3].copy_from_slice(&[at.x, at.y, at.z]);
    for r in 0..3 {
        for c in 0..3 {
            e.cov[r][c] += 4.0 * cov[(r, c)];
        }
    }
    let mut chol = cholesky6(&e.cov);
    // (The velocity block keeps the birth's own draw: the speed ball.)
    for (r, row) in chol.iter_mut().enumerate().skip(3) {
        *row = init.chol[r];
    }
    let m = TrackInit {
        slot,
        mean: e.mean,
        chol,
        ..init.clone()
    };
    (m, e)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dsp::geometry::PairMode;

    fn four() -> (ArrayGeometry, Vec<Pair>) {
        let s = [
            Vector3::new(0.0, 0.0, -5.0),
            Vector3::new(30.0, 0.0, -12.0),
            Vector3::new(5.0, 28.0, -20.0),
            Vector3::new(-10.0, 12.0, -3.0),
        ];
        let geo = ArrayGeometry::new(s.iter().map(|v| [v.x, v.y, v.z]).collect(), 1500.0);
        let pairs = geo.pairs(PairMode::All, 0);
        (geo, pairs)
    }

    /// Four hydrophones: a far source's delays fit a second point, which `alternate` finds and
    /// whose delays match the source's; a point near the array's centre has none.
    #[test]
    fn a_far_source_on_four_sensors_has_an_alternate() {
        let (geo, pairs) = four();
        let bounds = Some(([-300.0, -300.0, -60.0], [300.0, 300.0, 0.0]));
        let sigma = 1.0 / 48_000.0;
        let mut with = 0;
        let mut tried = 0;
        for k in 0..12 {
            let az = k as f64 * 0.52;
            let x = Vector3::new(10.0 + 80.0 * az.cos(), 10.0 + 80.0 * az.sin(), -6.0);
            tried += 1;
            let Some((y, cov)) = alternate(&geo, &pairs, x, sigma, bounds) else {
                continue;
            };
            with += 1;
            assert!((y - x).norm() > ALTERNATE_MIN_M);
            for p in &pairs {
                let d = |v: Vector3<f64>| {
                    ((v - geo.sensor(p.a)).norm() - (v - geo.sensor(p.b)).norm()) / 1500.0
                };
                assert!((d(y) - d(x)).abs() < 3.0 * sigma, "{x} and {y}");
            }
            assert!(cov.trace().is_finite());
        }
        eprintln!("{with} of {tried} far points have a second solution");
        assert!(with > 0, "no far point of {tried} had a second solution");
    }

    /// Five well-spread sensors: the delays fix one point.
    #[test]
    fn five_sensors_have_none() {
        let (geo, _) = four();
        let mut s: Vec<[f64; 3]> = (0..4).map(|i| geo.sensor(i).into()).collect();
        s.push([15.0, 15.0, -30.0]);
        let geo = ArrayGeometry::new(s, 1500.0);
        let pairs = geo.pairs(PairMode::All, 0);
        let bounds = Some(([-300.0, -300.0, -60.0], [300.0, 300.0, 0.0]));
        for k in 0..12 {
            let az = k as f64 * 0.52;
            let x = Vector3::new(10.0 + 80.0 * az.cos(), 10.0 + 80.0 * az.sin(), -6.0);
            assert!(
                alternate(&geo, &pairs, x, 1.0 / 48_000.0, bounds).is_none(),
                "{x}"
            );
        }
    }
}
