//! A source that leaves the search volume: the filter's particles cannot follow it, so the
//! track piles up against the volume's face while the TDOAs, barely changing with range in the
//! far field, still pass its gates. The track's own assigned peaks, solved without the volume
//! from the track's position, say where the source is; when they put it clearly outside for
//! [`LEFT_AFTER_S`], the track is deleted rather than reported at the face.

use nalgebra::Vector3;

use crate::dsp::geometry::ArrayGeometry;
use crate::dsp::multilat::{Fix, Obs, refine};
use crate::track::Estimate;

/// How long the track's own fixes must lie outside before the track is deleted.
pub const LEFT_AFTER_S: f64 = 1.0;
/// "Outside": beyond a face by more than this many of the fix's spreads along its axis (one: more
/// than 84 % of the fix's probability outside, for a second of frames on end).
pub const BEYOND_SPREADS: f64 = 1.0;

/// Whether `fix` lies outside `bounds` by more than [`BEYOND_SPREADS`] of its own spread along
/// some axis.
pub fn beyond(fix: &Fix, bounds: &([f64; 3], [f64; 3])) -> bool {
    let (lo, hi) = bounds;
    (0..3).any(|a| {
        let sd = fix.covariance[(a, a)].max(0.0).sqrt();
        let x = fix.position[a];
        x < lo[a] - BEYOND_SPREADS * sd || x > hi[a] + BEYOND_SPREADS * sd
    })
}

/// The time a track's own fixes have lain outside the volume without a break.
#[derive(Debug, Clone, Copy, Default)]
pub struct EdgeClock {
    beyond_s: f64,
}

impl EdgeClock {
    /// One frame `dt_s` long: `beyond` is None when the track had too few peaks for a fix
    /// (the clock holds). Returns whether the source has left the volume.
    pub fn frame(&mut self, beyond: Option<bool>, dt_s: f64) -> bool {
        match beyond {
            Some(true) => self.beyond_s += dt_s,
            Some(false) => self.beyond_s = 0.0,
            None => {}
        }
        self.beyond_s >= LEFT_AFTER_S
    }

    pub fn beyond_s(&self) -> f64 {
        self.beyond_s
    }
}

/// Where the track's estimate is, as the start of its own fix.
pub fn start_of(mean: &[f64]) -> Vector3<f64> {
    Vector3::new(mean[0], mean[1], mean[2])
}

/// Whether a 3-D track with estimate `est`, whose assigned peaks are `obs`, has its source
/// clearly outside the search volume `bounds`, those peaks solved from its position without
/// the volume (None with too few assigned pairs for a fix, or no fix).
pub fn outside(
    bounds: &([f64; 3], [f64; 3]),
    est: &Estimate,
    obs: &[Obs],
    geo: &ArrayGeometry,
    sigma_s: f32,
) -> Option<bool> {
    // A track well inside (three spreads from every face) is not pressed against one.
    let (lo, hi) = bounds;
    let inside = (0..3).all(|a| {
        let sd = est.cov[a][a].max(0.0).sqrt();
        est.mean[a] - lo[a] > 3.0 * sd && hi[a] - est.mean[a] > 3.0 * sd
    });
    if inside {
        return Some(false);
    }
    if obs.len() < 4 {
        return None;
    }
    let fix = refine(geo, obs, start_of(&est.mean), f64::from(sigma_s))?;
    Some(beyond(&fix, bounds))
}

#[cfg(test)]
mod tests {
    use super::*;
    use nalgebra::Matrix3;

    fn fix_at(p: [f64; 3], sd: f64) -> Fix {
        Fix {
            position: Vector3::from(p),
            covariance: Matrix3::identity() * sd * sd,
            residual_rms_s: 0.0,
            inliers: 6,
        }
    }

    #[test]
    fn outside_only_beyond_the_spread() {
        let b = ([-10.0, -10.0, -10.0], [10.0, 10.0, 0.0]);
        assert!(!beyond(&fix_at([0.0, 0.0, -5.0], 1.0), &b));
        // Outside, but within a spread of the face: it may be noise.
        assert!(!beyond(&fix_at([10.5, 0.0, -5.0], 1.0), &b));
        assert!(beyond(&fix_at([11.5, 0.0, -5.0], 1.0), &b));
        assert!(beyond(&fix_at([0.0, -11.5, -5.0], 1.0), &b));
        assert!(beyond(&fix_at([0.0, 0.0, 1.5], 1.0), &b));
        assert!(!beyond(&fix_at([0.0, 0.0, 1.5], 2.0), &b));
    }

    #[test]
    fn clock_needs_an_unbroken_second() {
        let mut c = EdgeClock::default();
        let dt = 0.1;
        for _ in 0..9 {
            assert!(!c.frame(Some(true), dt));
        }
        // A frame without a fix neither counts nor breaks the run.
        assert!(!c.frame(None, dt));
        assert!(!c.frame(Some(false), dt));
        assert_eq!(c.beyond_s(), 0.0);
        let mut left = false;
        for _ in 0..11 {
            left = c.frame(Some(true), dt);
        }
        assert!(left);
    }
}
