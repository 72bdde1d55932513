//! A turning line array's mirror twins. A line array in a known plane cannot tell a source
//! from its mirror across the axis while it holds its heading: both fit every frame alike. Once
//! it turns, a world-fixed source moves one way in the array's frame and its mirror the other,
//! so the frames tell them apart. Each track of such an array gets a twin: a second filter
//! started at the mirror of the track's birth, stepped on the same view of every frame, whose
//! evidence (log p(z_k | z_1..k-1), summed) is weighed against the track's. When the sum leaves
//! [`MIRROR_DECIDED_NATS`] on either side, the winner keeps the track's ID and the loser's slot
//! is freed.
//!
//! While the array keeps the heading it had at the birth, the two filters see mirror images of
//! the same problem and their evidence differs only by Monte-Carlo noise, a random walk that
//! would cross any margin on a long enough straight leg: the sum starts once the heading has
//! left the birth heading by [`MIRROR_HEADING_DEG`], and forgets with the time constant
//! [`MIRROR_MEMORY_S`], which bounds the noise's walk (a turn adds hundreds of nats in
//! seconds).

use crate::math::linalg::cholesky6;
use crate::track::{Estimate, TrackInit};

/// Log-evidence margin (nats) that decides between a track and its mirror twin: a likelihood
/// ratio of e^12 (about 160,000 to 1). Before a turn, the two filters' summed evidence differs
/// only by the particle filters' own noise (measured on the `towed-line` family: see
/// BENCHMARKS.md, "Line arrays").
pub const MIRROR_DECIDED_NATS: f64 = 12.0;
/// The heading change since the birth (degrees) from which the evidence counts: more than a
/// compass's jitter.
pub const MIRROR_HEADING_DEG: f64 = 1.0;
/// The evidence sum's memory, seconds.
pub const MIRROR_MEMORY_S: f64 = 30.0;

/// A track's mirror hypothesis.
#[derive(Debug, Clone)]
pub struct Twin {
    pub slot: u32,
    pub est: Estimate,
    /// log p(frames | twin) - log p(frames | track), summed since the array first turned
    /// after the birth (with a fading memory).
    pub log_odds: f64,
    /// The array's heading at the birth (None for an array without a heading), and whether it
    /// has since turned by [`MIRROR_HEADING_DEG`].
    pub birth_heading_deg: Option<f64>,
    pub turned: bool,
}

/// What one frame's evidence says of a track and its twin.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MirrorVerdict {
    Undecided,
    /// The track's side won: the twin goes.
    TrackWins,
    /// The twin's side won: it takes the track's place (and ID), the track's filter goes.
    TwinWins,
}

impl Twin {
    /// A twin in `slot` with its estimate, for an array heading `heading_deg` at the birth.
    pub fn new(slot: u32, est: Estimate, heading_deg: Option<f64>) -> Self {
        Self {
            slot,
            est,
            log_odds: 0.0,
            birth_heading_deg: heading_deg,
            turned: false,
        }
    }

    /// Add a frame's evidence (`dt_s` after the last): the track's and the twin's (in
    /// `self.est`), the array heading `heading_deg`. A filter that could explain nothing
    /// (evidence not finite) loses at once.
    pub fn weigh(
        &mut self,
        track_evidence: f32,
        heading_deg: Option<f64>,
        dt_s: f64,
    ) -> MirrorVerdict {
        if let (Some(h0), Some(h)) = (self.birth_heading_deg, heading_deg) {
            self.turned |= crate::math::geo::turn_deg(h0, h).abs() > MIRROR_HEADING_DEG;
        }
        let (a, b) = (track_evidence, self.est.log_evidence);
        match (a.is_finite(), b.is_finite()) {
            (_, false) => MirrorVerdict::TrackWins,
            (false, true) => MirrorVerdict::TwinWins,
            (true, _) if !self.turned => MirrorVerdict::Undecided,
            (true, true) => {
                let keep = (-dt_s.max(0.0) / MIRROR_MEMORY_S).exp();
                self.log_odds = keep * self.log_odds + f64::from(b) - f64::from(a);
                if self.log_odds >= MIRROR_DECIDED_NATS {
                    MirrorVerdict::TwinWins
                } else if self.log_odds <= -MIRROR_DECIDED_NATS {
                    MirrorVerdict::TrackWins
                } else {
                    MirrorVerdict::Undecided
                }
            }
        }
    }

    /// The probability that the twin's side is the source's.
    pub fn prob(&self) -> f32 {
        (1.0 / (1.0 + (-self.log_odds).exp())) as f32
    }
}

/// The reflection across the plane through the axis normal to `side`, applied to a 6-state
/// (position and velocity).
fn reflect6(v: &[f64; 6], side: &[f64; 3]) -> [f64; 6] {
    let mut out = *v;
    for b in [0, 3] {
        let d: f64 = (0..3).map(|k| v[b + k] * side[k]).sum();
        for k in 0..3 {
            out[b + k] -= 2.0 * d * side[k];
        }
    }
    out
}

/// A birth's prior mirrored across the axis (in the plane of the axis and `side`, a unit
/// vector perpendicular to the axis), for the twin's `slot`.
pub fn mirrored_init(init: &TrackInit, side: &[f32; 3], slot: u32) -> TrackInit {
    let n = side.map(f64::from);
    let norm = (n[0] * n[0] + n[1] * n[1] + n[2] * n[2]).sqrt().max(1e-12);
    let n = n.map(|v| v / norm);
    // cov = L Lᵀ; the mirrored covariance is R cov Rᵀ with R the reflection of each block.
    let l = &init.chol;
    let mut rl = [[0.0f64; 6]; 6];
    for c in 0..6 {
        let col: [f64; 6] = std::array::from_fn(|r| l[r][c]);
        let m = reflect6(&col, &n);
        for r in 0..6 {
            rl[r][c] = m[r];
        }
    }
    let mut cov = [[0.0f64; 6]; 6];
    for r in 0..6 {
        for c in 0..6 {
            cov[r][c] = (0..6).map(|k| rl[r][k] * rl[c][k]).sum();
        }
    }
    TrackInit {
        slot,
        mean: reflect6(&init.mean, &n),
        chol: cholesky6(&cov),
        // (Its own random draws: another key than the track's.)
        frame: init.frame ^ 0x4D49_5252_0000_0000,
        ..init.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn est(ev: f32) -> Estimate {
        let mut e = Estimate::new(1);
        e.log_evidence = ev;
        e
    }

    #[test]
    fn evidence_decides_after_the_margin() {
        let mut t = Twin::new(1, est(-1.0), Some(359.5));
        // Before the array turns, nothing counts, however the frames differ.
        for _ in 0..100 {
            assert_eq!(t.weigh(5.0, Some(0.4), 0.05), MirrorVerdict::Undecided);
        }
        assert_eq!(t.log_odds, 0.0);
        assert!((t.prob() - 0.5).abs() < 1e-6);
        // Turned: equal evidence leaves it undecided, and the track explaining each frame 3
        // nats better (3.1, less what fades) decides on the fourth.
        assert_eq!(t.weigh(-1.0, Some(1.0), 0.05), MirrorVerdict::Undecided);
        let v: Vec<_> = (0..4).map(|_| t.weigh(2.1, Some(0.0), 0.05)).collect();
        assert_eq!(v[..3], [MirrorVerdict::Undecided; 3]);
        assert_eq!(v[3], MirrorVerdict::TrackWins);
        // The sum fades: 10 nats halve in MIRROR_MEMORY_S ln 2.
        let mut t = Twin::new(1, est(0.0), Some(0.0));
        t.turned = true;
        t.log_odds = 10.0;
        t.weigh(0.0, None, MIRROR_MEMORY_S * 2f64.ln());
        assert!((t.log_odds - 5.0).abs() < 1e-9, "{}", t.log_odds);
        t.log_odds = 11.0;
        assert_eq!(t.weigh(-1.5, None, 0.0), MirrorVerdict::TwinWins);
        t.est.log_evidence = f32::NEG_INFINITY;
        assert_eq!(t.weigh(0.0, None, 0.0), MirrorVerdict::TrackWins);
        t.est.log_evidence = 0.0;
        assert_eq!(t.weigh(f32::NAN, None, 0.0), MirrorVerdict::TwinWins);
    }

    #[test]
    fn the_mirrored_prior_is_the_reflection() {
        // A covariance with the position correlated across the axis (x) and side (y).
        let cov = [
            [4.0, 1.0, 0.0, 0.5, 0.0, 0.0],
            [1.0, 2.0, 0.0, 0.0, 0.3, 0.0],
            [0.0, 0.0, 1.0, 0.0, 0.0, 0.0],
            [0.5, 0.0, 0.0, 1.0, 0.2, 0.0],
            [0.0, 0.3, 0.0, 0.2, 1.0, 0.0],
            [0.0, 0.0, 0.0, 0.0, 0.0, 1.0],
        ];
        let chol = cholesky6(&cov);
        let init = TrackInit {
            slot: 0,
            frame: 7,
            mean: [0.6, 0.8, 0.0, 0.1, 0.2, 0.0],
            chol,
            speed_ball_m_s: 1.0,
            model_probs: vec![1.0],
            inv_range_max: 0.5,
        };
        let m = mirrored_init(&init, &[0.0, 2.0, 0.0], 3);
        assert_eq!(m.slot, 3);
        assert_ne!(m.frame, init.frame);
        let want = [0.6, -0.8, 0.0, 0.1, -0.2, 0.0];
        for k in 0..6 {
            assert!((m.mean[k] - want[k]).abs() < 1e-12, "{:?}", m.mean);
        }
        // L Lᵀ of the mirror: the cross terms with y (and its rate) change sign.
        let back: [[f64; 6]; 6] = std::array::from_fn(|r| {
            std::array::from_fn(|c| (0..6).map(|k| m.chol[r][k] * m.chol[c][k]).sum())
        });
        let sign = [1.0, -1.0, 1.0, 1.0, -1.0, 1.0];
        for r in 0..6 {
            for c in 0..6 {
                let w = cov[r][c] * sign[r] * sign[c];
                assert!((back[r][c] - w).abs() < 1e-6, "{r},{c}: {} {w}", back[r][c]);
            }
        }
    }
}
