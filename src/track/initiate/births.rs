//! The birth of a track, from the multilateration search's fix of the frame: whether the fix is
//! a new source (not the peaks of a track we have, nor near one's position) and, once a run of
//! fixes agrees ([`BirthSearch::offer`]), the run's position and time.

use nalgebra::Vector3;

use crate::dsp::geometry::ArrayGeometry;
use crate::dsp::multilat::Fix;
use crate::track::initiate::multilat::{BirthFix, BirthSearch, NoBirth};
use crate::track::state::Track;

/// What a birth is screened against.
pub struct Screen<'a> {
    pub tracks: &'a [Track],
    pub geo: &'a ArrayGeometry,
    pub three_d: bool,
    pub max_speed_m_s: f64,
    pub gate_sigmas: f32,
}

/// An agreed fix: its position, the run's mean square scatter about it and its state time.
pub type Agreed = (Fix, f64, f64);

impl Screen<'_> {
    /// Offer this frame's `fix` (frame `seq`, centred at `t_centre_s`) to the run in `search`;
    /// the agreed fix of a new source, or why there is none.
    pub fn offer(
        &self,
        search: &mut BirthSearch,
        seq: u64,
        t_centre_s: f64,
        fix: Result<BirthFix, NoBirth>,
    ) -> Result<Agreed, NoBirth> {
        // Not a second copy of a track we already have: its peaks are in that track's gates.
        let fix = fix.and_then(|(f, used)| {
            if self.in_some_gates(&used) {
                Err(NoBirth::Covered)
            } else {
                Ok((f, used))
            }
        });
        // (With a track confirmed, a run of 3-D fixes may have gaps: see
        // [`BirthSearch::offer`]. Directions are left out: in a room (the soundbar family) a
        // reflection's direction then made tracks, measured.)
        let tolerant = self.three_d && self.tracks.iter().any(Track::confirmed);
        let outcome = fix.and_then(|(f, used)| {
            let pairs_used = used.iter().flatten().count();
            search.offer(
                seq,
                t_centre_s,
                f,
                self.geo,
                self.three_d,
                self.max_speed_m_s,
                tolerant,
                pairs_used,
            )
        });
        let agreed = match outcome {
            Ok(v) => v,
            Err(why) => {
                // (A tolerant run's strong fixes outlive frames without a fix; its span ages
                // them out.)
                if !matches!(why, NoBirth::Disagreeing) {
                    if tolerant {
                        search.forget_weak();
                    } else {
                        search.clear();
                    }
                }
                return Err(why);
            }
        };
        // Nor near one's position.
        if self.near_a_track(&agreed.0.position) {
            search.clear();
            return Err(NoBirth::Covered);
        }
        Ok(agreed)
    }

    /// Whether the peaks a birth fix used (per pair, their TDOA) lie in one track's gates in
    /// every pair used but at most one.
    fn in_some_gates(&self, used: &[Option<f32>]) -> bool {
        let g2 = self.gate_sigmas * self.gate_sigmas;
        let n = used.iter().flatten().count();
        self.tracks.iter().any(|t| {
            let inside = used
                .iter()
                .enumerate()
                .filter(|(pi, u)| u.is_some_and(|tau| t.gates.d2(*pi, tau) <= g2))
                .count();
            !t.gates.predicted_s.is_empty() && n > 0 && inside + 1 >= n
        })
    }

    /// Whether a track's estimate is within three slacks of `position` (5 % of the aperture in
    /// 3-D, 0.1 for a unit direction; at least 0.05).
    fn near_a_track(&self, position: &Vector3<f64>) -> bool {
        let aperture = self.geo.aperture_m();
        let slack = if self.three_d { 0.05 * aperture } else { 0.1 };
        self.tracks.iter().any(|t| {
            let at = Vector3::from(t.position());
            // (A direction's estimate is scaled by 1 + its inverse range; the fix is a unit.)
            let at = if self.three_d {
                at
            } else {
                at / at.norm().max(1e-12)
            };
            (at - position).norm() < 3.0 * slack.max(0.05)
        })
    }
}
