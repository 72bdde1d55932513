//! The manager's half that keeps each track's life: its new estimate through the logic, its
//! report, its end, and the birth of a new one.

use super::TrackManager;
use crate::error::BackendError;
use crate::track::TrackMode;
use crate::track::gate::gates;
use crate::track::initiate::births::Screen;
use crate::track::initiate::multilat::{BirthFix, NoBirth};
use crate::track::initiate::twins::{Volume, free_slot};
use crate::track::logic::duplicates::{DuplicateRow, duplicates};
use crate::track::logic::edge;
use crate::track::logic::judge::{Divergence, LogicState};
use crate::track::measure::noise::learn_from_hit;
use crate::track::motion::models::Kinematics;
use crate::track::report::{EndReason, TrackEnd, TrackReport, TrackStatus, report};
use crate::track::state::Track;

impl TrackManager {
    /// Each track's step through its logic: the reports of those that live on; those that go
    /// are removed and their ends recorded.
    pub(super) fn judge_tracks(&mut self, seq: u64, t_centre_s: f64) -> Vec<TrackReport> {
        let mut reports = Vec::with_capacity(self.tracks.len() + 1);
        let mut dead = Vec::new();
        for i in 0..self.tracks.len() {
            match self.update_track(i, t_centre_s) {
                Ok(status) => {
                    let support = self.peaks.support(&self.tracks[i].assigned);
                    let mut r = self.report_of(i, status, seq, t_centre_s, support);
                    r.coherence = self.peaks.coherence(&self.tracks[i].assigned);
                    reports.push(r);
                }
                Err(why) => {
                    let reason = if self.tracks[i].confirmed() {
                        EndReason::Lost
                    } else {
                        EndReason::Unconfirmed
                    };
                    dead.push((i, reason, why));
                }
            }
        }
        self.find_duplicates(&mut dead, &mut reports);
        for (i, reason, why) in dead.into_iter().rev() {
            let t = self.tracks.remove(i);
            log::info!("track {} deleted at {:.2} s ({why})", t.id, t_centre_s);
            self.end(t, reason, why);
        }
        reports
    }

    /// Take track `i`'s step: its new estimate, its hit or miss (a confirmed track's hit
    /// teaching the TDOA noise), its scans' verdict, the volume's edge, its estimate's health.
    /// Returns its status, or why it is deleted.
    fn update_track(&mut self, i: usize, t_centre_s: f64) -> Result<TrackStatus, String> {
        let step = self.steps[i];
        let support = self.peaks.support(&self.tracks[i].assigned);
        let t = &mut self.tracks[i];
        t.t_state_s = t_centre_s - f64::from(step.lag_s);
        t.heading_deg = self.heading_deg;
        t.est = self.est[i].clone();
        self.counts.tempered_steps += u64::from(t.est.temper < 1.0);
        let hit = self.judge.hit(support, !t.est.log_evidence.is_finite());
        if hit == Some(true) && t.confirmed() {
            let post = gates(&self.params, &t.est, step.lag_s, self.sigma_s);
            learn_from_hit(&mut self.residuals, &self.peaks, &post, self.sigma_s);
        }
        (self.judge).count(&mut t.logic, hit, t.t_state_s, t.id, t_centre_s)?;
        if t.confirmed() {
            if let Some(bounds) = self.s.bounds {
                self.edge(i, &bounds, f64::from(step.dt_s))?;
            }
        }
        let t = &self.tracks[i];
        let three_d = self.params.mode == TrackMode::ThreeD;
        let div = Divergence {
            geo: &self.s.geometry,
            pairs: self.s.pairs(),
            sigma_s: self.sigma_s,
        };
        (self.judge).health(&t.logic, &t.est, t.t_state_s, three_d.then_some(&div))?;
        Ok(self.judge.status(&t.logic, t.t_state_s))
    }

    /// A confirmed track whose own peaks have put its source outside the search volume for
    /// [`edge::LEFT_AFTER_S`] goes.
    fn edge(&mut self, i: usize, bounds: &([f64; 3], [f64; 3]), dt_s: f64) -> Result<(), String> {
        let t = &self.tracks[i];
        let outside = (self.params.mode == TrackMode::ThreeD)
            .then(|| {
                let obs = self.peaks.observations(&t.assigned);
                edge::outside(bounds, &t.est, &obs, &self.s.geometry, self.sigma_s)
            })
            .flatten();
        let st = &mut self.tracks[i].logic;
        if st.edge.frame(outside, dt_s) {
            return Err(format!(
                "its own peaks have put the source outside the search volume for {:.1} s",
                st.edge.beyond_s()
            ));
        }
        Ok(())
    }

    /// Tracks that follow an older track's source (see [`duplicates`]) join `dead` (kept in
    /// index order), their reports of this frame withdrawn.
    fn find_duplicates(
        &mut self,
        dead: &mut Vec<(usize, EndReason, String)>,
        reports: &mut Vec<TrackReport>,
    ) {
        let informative = self.peaks.informative_pairs();
        let going: Vec<bool> = (0..self.tracks.len())
            .map(|i| dead.iter().any(|d| d.0 == i))
            .collect();
        let mut rows: Vec<DuplicateRow> = (self.tracks.iter_mut().zip(&self.steps))
            .zip(going)
            .map(|((t, step), dead)| DuplicateRow {
                gates: &t.gates,
                dt_s: f64::from(step.dt_s),
                shared_s: &mut t.logic.shared_s,
                dead,
            })
            .collect();
        let found = duplicates(&mut rows, &informative, self.s.gate_sigmas);
        for (j, i) in found {
            let (tj, ti) = (&self.tracks[j], &self.tracks[i]);
            reports.retain(|r| r.id != tj.id);
            let why = format!(
                "it has followed the same source as track {} for {:.1} s",
                ti.id, tj.logic.shared_s
            );
            dead.push((j, EndReason::Duplicate, why));
        }
        dead.sort_by_key(|d| d.0);
    }

    /// Count and record the end of track `t`.
    /// End track `t` (removed from the tracks): its end recorded, and a track with a follower
    /// on the curves handed to the curves stage, which may carry it on ([`CurvesStage::follow`]).
    ///
    /// [`CurvesStage::follow`]: super::curves::CurvesStage::follow
    fn end(&mut self, t: Track, reason: EndReason, detail: String) {
        self.counts.deletions += 1;
        self.ended.push(TrackEnd {
            id: t.id,
            reason,
            detail,
            was_confirmed: t.confirmed(),
        });
        if t.curves.is_some() {
            self.dropped.push(t);
        }
    }

    /// Track `i`'s report with `status` and `support`, its mirror and heading added.
    fn report_of(
        &self,
        i: usize,
        status: TrackStatus,
        seq: u64,
        t_centre_s: f64,
        support: Option<f32>,
    ) -> TrackReport {
        let t = &self.tracks[i];
        let kin = Kinematics::of(&self.params);
        let (at, est, line) = (t.t_state_s, &t.est, self.params.line);
        let mut r = report(t.id, at, est, status, seq, t_centre_s, support, kin, line);
        let volume = Volume {
            geo: &self.s.geometry,
            bounds: self.s.bounds,
        };
        (self.twins).annotate(t, &mut r, self.heading_deg, &self.params, &volume);
        r
    }

    /// A free slot, or the slot of the weakest tentative track (fewest hits, then oldest),
    /// which gives way; None when every slot holds a confirmed track.
    fn slot_for_birth(&mut self, t_centre_s: f64) -> Option<u32> {
        let limit = self.s.max_tracks.min(self.params.slots);
        if self.tracks.len() < limit {
            return free_slot(&self.tracks, self.params.slots, None);
        }
        let weakest = (self.tracks.iter().enumerate())
            .filter(|(_, t)| !t.confirmed())
            .min_by_key(|(_, t)| (t.logic.history.hits(), t.born_seq))
            .map(|(i, _)| i)?;
        let t = self.tracks.remove(weakest);
        log::info!(
            "track {} gives way at {t_centre_s:.2} s (every slot taken)",
            t.id
        );
        let slot = t.slot;
        self.end(t, EndReason::Replaced, "every slot was taken".into());
        Some(slot)
    }

    /// Start a track when the birth search's run agrees on a new source; else note why not.
    pub(super) fn try_birth(
        &mut self,
        seq: u64,
        t_centre_s: f64,
        fix: Result<BirthFix, NoBirth>,
    ) -> Result<Option<TrackReport>, BackendError> {
        let screen = Screen {
            tracks: &self.tracks,
            geo: &self.s.geometry,
            three_d: self.params.mode == TrackMode::ThreeD,
            max_speed_m_s: self.s.max_speed_m_s,
            gate_sigmas: self.s.gate_sigmas,
        };
        let agreed = screen.offer(&mut self.births_search, seq, t_centre_s, fix);
        let (fix, scatter, t_state) = match agreed {
            Ok(v) => v,
            Err(why) => {
                self.birth_outcome = Some(why);
                return Ok(None);
            }
        };
        let Some(slot) = self.slot_for_birth(t_centre_s) else {
            self.birth_outcome = Some(NoBirth::SlotsFull);
            return Ok(None);
        };
        let (fs, speed) = (self.s.peaks.sample_rate_hz, self.s.max_speed_m_s);
        let (p, geo, sigma) = (&self.params, &self.s.geometry, self.sigma_s);
        let b =
            (self.births_search).birth(&fix, scatter, t_state, slot, seq, p, geo, sigma, fs, speed);
        self.bank.init_track(&b.init)?;
        let twin_slot = free_slot(&self.tracks, self.params.slots, Some(b.init.slot));
        let (bank, heading) = (self.bank.as_mut(), self.heading_deg);
        let twin = (self.twins).start(bank, &b.init, &b.est, twin_slot, heading)?;
        let id = self.next_id;
        self.next_id += 1;
        self.counts.births += 1;
        let p = fix.position;
        log::info!(
            "track {id} born at {t_centre_s:.2} s at [{:.2}, {:.2}, {:.2}] from {} agreeing fixes",
            p.x,
            p.y,
            p.z,
            b.fixes
        );
        self.tracks.push(Track {
            slot,
            t_state_s: b.t_state_s,
            est: b.est,
            assigned: vec![None; self.s.pairs().len()],
            logic: LogicState::born(b.t_state_s),
            heading_deg: self.heading_deg,
            twin,
            side_decided: false,
            ..Track::bare(id, seq)
        });
        let i = self.tracks.len() - 1;
        Ok(Some(self.report_of(
            i,
            TrackStatus::Tentative,
            seq,
            t_centre_s,
            Some(1.0),
        )))
    }

    /// Why the frame just stepped has no confirmed track: a tentative track awaits
    /// confirmation, or the birth search's reason (None when a track is confirmed).
    pub(super) fn no_track_reason(&self) -> Option<&'static str> {
        if self.confirmed_tracks() > 0 {
            None
        } else if !self.tracks.is_empty() {
            Some("awaiting_confirmation")
        } else {
            Some(self.birth_outcome.map_or("no_peaks", NoBirth::label))
        }
    }
}
