//! A track's fate each frame: its hit or miss (from the support its gates found), the miss
//! window and the M-of-N scans that confirm and delete it, and the checks on its estimate
//! (finite, not silent too long, not diverged), in that order.

use nalgebra::Vector3;

use crate::dsp::geometry::{ArrayGeometry, Pair};
use crate::track::Estimate;
use crate::track::initiate::multilat::{DIVERGED_SPREADS, spread_limit_m};
use crate::track::logic::edge::EdgeClock;
use crate::track::logic::m_of_n::{
    ConfirmRule, DeleteRule, MissWindow, ScanClock, ScanHistory, TrackLogic, Verdict,
};
use crate::track::report::TrackStatus;

/// A confirmed track without a hit for this long is reported as coasting.
pub const COAST_AFTER_S: f64 = 0.5;

/// What the logic keeps of one track.
#[derive(Debug, Clone, Default)]
pub struct LogicState {
    pub clock: ScanClock,
    pub history: ScanHistory,
    pub misses: MissWindow,
    /// State time of the last frame that was a hit.
    pub last_hit_s: f64,
    /// How long the track has predicted the same TDOAs as an older one (see
    /// [`crate::track::logic::duplicates`]).
    pub shared_s: f64,
    /// How long the track's own peaks have put its source outside the search volume.
    pub edge: EdgeClock,
}

impl LogicState {
    /// A track born at state time `t_state_s` (its birth counts as a hit).
    pub fn born(t_state_s: f64) -> Self {
        Self {
            last_hit_s: t_state_s,
            ..Self::default()
        }
    }
}

/// The rules, as the configuration sets them.
#[derive(Debug, Clone)]
pub struct LogicSettings {
    pub confirm_m: usize,
    pub confirm_n: usize,
    pub confirm_rule: ConfirmRule,
    pub scan_s: f64,
    pub hop_s: f64,
    pub delete_rule: DeleteRule,
    pub delete_window_s: f64,
    pub delete_fraction: f64,
    /// A frame is a hit when the gates hold assigned peaks in more than this share of the
    /// informative pairs.
    pub hit_fraction: f32,
    /// A track with no hit for this long is deleted.
    pub delete_after_s: f64,
}

/// The rules in frames.
#[derive(Debug, Clone)]
pub struct Judge {
    logic: TrackLogic,
    frames_per_scan: usize,
    /// The miss window of confirmed tracks: its frames, and the misses that delete.
    window_frames: usize,
    window_misses: usize,
    delete_rule: DeleteRule,
    hit_fraction: f32,
    delete_after_s: f64,
}

impl Judge {
    pub fn new(s: &LogicSettings) -> Self {
        let frames = |span_s: f64| (span_s / s.hop_s.max(1e-9)).round();
        Self {
            logic: TrackLogic {
                m: s.confirm_m,
                n: s.confirm_n,
                rule: s.confirm_rule,
            },
            frames_per_scan: (frames(s.scan_s) as usize).max(1),
            window_frames: (frames(s.delete_window_s) as usize).max(1),
            window_misses: ((frames(s.delete_window_s) * s.delete_fraction).ceil() as usize).max(1),
            delete_rule: s.delete_rule,
            hit_fraction: s.hit_fraction,
            delete_after_s: s.delete_after_s,
        }
    }

    /// The frame's hit or miss from the share of informative pairs whose gates held a peak
    /// the track took (None: no pair was informative). A degenerate step (no particle could
    /// explain the frame: in practice every one outside the bounds) supports nothing, whatever
    /// its estimate's TDOAs match.
    pub fn hit(&self, support: Option<f32>, degenerate: bool) -> Option<bool> {
        support.map(|s| !degenerate && s > self.hit_fraction)
    }

    /// Count the frame's `hit` (at state time `t_state_s`) in the miss window and the scans.
    /// Returns why the track goes, if it does.
    pub fn count(
        &self,
        st: &mut LogicState,
        hit: Option<bool>,
        t_state_s: f64,
        id: u64,
        t_centre_s: f64,
    ) -> Result<(), String> {
        if hit == Some(true) {
            st.last_hit_s = t_state_s;
        }
        let by_window = st.history.confirmed && self.delete_rule == DeleteRule::Window;
        if let (true, Some(h)) = (by_window, hit) {
            if st.misses.frame(h, self.window_frames, self.window_misses) {
                return Err(format!(
                    "it missed its gates in {} of its last {} informative frames",
                    self.window_misses, self.window_frames
                ));
            }
        }
        if let Some(scan_hit) = st.clock.frame(hit, self.frames_per_scan) {
            match self.logic.scan(&mut st.history, scan_hit) {
                Verdict::Delete if by_window => {}
                Verdict::Delete if st.history.confirmed => {
                    return Err("it missed its gates in most scans of late".into());
                }
                Verdict::Delete => return Err("it was not confirmed".into()),
                Verdict::Confirm => log::info!("track {id} confirmed at {t_centre_s:.2} s"),
                Verdict::Keep => {}
            }
        }
        Ok(())
    }

    /// Why a track with estimate `est` at state time `t_state_s` goes, if it does: its
    /// estimate is not finite, it has had no hit for too long, or (3-D) its position spread
    /// exceeds twice the array's aperture and [`DIVERGED_SPREADS`] times what the TDOAs leave
    /// there ([`Divergence`]).
    pub fn health(
        &self,
        st: &LogicState,
        est: &Estimate,
        t_state_s: f64,
        divergence: Option<&Divergence>,
    ) -> Result<(), String> {
        let pos_sd = (est.cov[0][0] + est.cov[1][1] + est.cov[2][2])
            .max(0.0)
            .sqrt();
        if est.mean.iter().any(|v| !v.is_finite()) {
            return Err("its estimate is not finite".into());
        }
        let silent = t_state_s - st.last_hit_s;
        if silent > self.delete_after_s {
            return Err(format!("no hit for {silent:.1} s"));
        }
        match divergence {
            Some(d) if d.diverged(est, pos_sd) => Err(format!(
                "its position spread {pos_sd:.1} m exceeds twice the array's aperture and {DIVERGED_SPREADS} times what the TDOAs leave there"
            )),
            _ => Ok(()),
        }
    }

    /// A live track's status: tentative until confirmed, then confirmed while hits come, and
    /// coasting once none has for [`COAST_AFTER_S`].
    pub fn status(&self, st: &LogicState, t_state_s: f64) -> TrackStatus {
        if !st.history.confirmed {
            TrackStatus::Tentative
        } else if t_state_s - st.last_hit_s <= COAST_AFTER_S {
            TrackStatus::Confirmed
        } else {
            TrackStatus::Coasting
        }
    }
}

/// What tells a diverged 3-D estimate: the array, its pairs and the TDOA noise.
pub struct Divergence<'a> {
    pub geo: &'a ArrayGeometry,
    pub pairs: &'a [Pair],
    pub sigma_s: f32,
}

impl Divergence<'_> {
    fn diverged(&self, est: &Estimate, pos_sd: f64) -> bool {
        if pos_sd <= spread_limit_m(self.geo) {
            return false;
        }
        let p = Vector3::new(est.mean[0], est.mean[1], est.mean[2]);
        let one_frame = self
            .geo
            .tdoa_spread_m(self.pairs, &p, f64::from(self.sigma_s))
            .unwrap_or(0.0);
        pos_sd > DIVERGED_SPREADS * one_frame
    }
}
