//! The manager's stage on the GCC curves (`tracker.measurement = "curves" | "auto"`): each
//! frame the curves are read ([`CurvesReader`]), every track's follower on them steps
//! ([`followers::step_all`]) and the existence rule keeps or ends it ([`ExistenceRule`]); then
//! either the curves search proposes new tracks ([`CurvesSearch`], "curves"), or the peaks
//! path's tracks are followed on the curves ("auto": a confirmed peaks track gets a follower,
//! and a peaks track that has coasted, or ended as lost, is served by its follower while the
//! follower's existence holds). The tracks are the manager's one [`Track`] type: those the
//! peaks path holds (with their followers), and here those the curves alone serve.

use crate::dsp::gcc::GccFrame;
use crate::track::filter::bernoulli::FilterKeys;
use crate::track::filter::bernoulli::bank::CurveBank;
use crate::track::filter::bernoulli::existence::Chain;
use crate::track::filter::bernoulli::followers::{
    self, Follower, Seed, curve_report, seeded, track_params,
};
use crate::track::initiate::curves::{CurvesSearch, SearchSettings};
use crate::track::logic::existence::{EDGE_M, ExistenceRule};
use crate::track::measure::curves::reader::CurvesReader;
use crate::track::measure::curves::{CurveModel, near};
use crate::track::measure::{FrameInput, MeasurementModel};
use crate::track::report::{EndReason, TrackEnd, TrackReport, TrackStatus};
use crate::track::state::{NO_SLOT, Track};

/// `auto`: a coasting peaks track is reported from the curves once it has coasted this long
/// (s); the particle filter bridges shorter gaps in its peaks as well on its own.
const COAST_S: f64 = 0.5;

/// Thresholds, rates and sizes (`[tracker.curves]`).
#[derive(Debug, Clone, PartialEq)]
pub struct CurvesSettings {
    /// The search's settings (its particles and the tracks' too).
    pub search: SearchSettings,
    /// Existence below which a track ends.
    pub delete: f64,
    /// Run the curves search (off when the peaks path gives the births: `auto`).
    pub searching: bool,
    /// The clutter map's time constant (s; 0: no map).
    pub clutter_map_s: f64,
    /// Weigh each track on the curves less the overlapping tracks' templates.
    pub joint_template: bool,
}

/// The tracks the curves alone serve, the search for new ones, and what the followers need.
#[derive(Debug)]
pub struct CurvesStage {
    reader: CurvesReader,
    set: CurvesSettings,
    rule: ExistenceRule,
    search: CurvesSearch,
    /// The tracks the curves alone serve (the search's; in `auto`, those the peaks lost that
    /// the curves still hold), in their followers' order.
    pub alone: Vec<Track>,
    /// Tracks ended by the last frame (in `auto`, merged with the peaks path's).
    pub ended: Vec<TrackEnd>,
    next_id: u64,
    /// The next follower's place ([`Follower::order`]).
    next_order: u64,
    /// Random-number keys of the filters (the search's is the first, in every mode).
    keys: FilterKeys,
    frame_s: f64,
}

/// `auto`: what the peaks path gives the curves stage each frame.
pub struct Peaks<'a> {
    /// Its tracks, each with its follower where it has one.
    pub tracks: &'a mut [Track],
    /// The tracks it ended this frame that had followers.
    pub dropped: Vec<Track>,
    /// Its reports, and the ends of the tracks it ended.
    pub reports: Vec<TrackReport>,
    pub ended: &'a [TrackEnd],
}

/// A track's place among the followers ([`Follower::order`]; last without one).
fn follower_order(t: &Track) -> u64 {
    t.curves.as_ref().map_or(u64::MAX, |f| f.order)
}

/// The positions of the tracks' followers, in their order.
fn positions<'a>(tracks: impl Iterator<Item = &'a Track>) -> Vec<[f64; 3]> {
    let mut rows: Vec<&Track> = tracks.filter(|t| t.curves.is_some()).collect();
    rows.sort_by_key(|t| follower_order(t));
    (rows.iter())
        .filter_map(|t| t.curves.as_ref().map(Follower::position))
        .collect()
}

impl CurvesStage {
    pub fn new(model: CurveModel, set: CurvesSettings, frame_s: f64) -> Self {
        let mut keys = FilterKeys::default();
        let search = CurvesSearch::new(set.search.clone(), frame_s, &mut keys);
        Self {
            reader: CurvesReader::new(model, set.clutter_map_s, frame_s),
            rule: ExistenceRule::new(set.search.confirm, set.delete, frame_s),
            search,
            set,
            alone: Vec::new(),
            ended: Vec::new(),
            next_id: 1,
            next_order: 0,
            keys,
            frame_s,
        }
    }

    pub fn model(&self) -> &CurveModel {
        self.reader.model()
    }

    pub fn search(&self) -> &CurvesSearch {
        &self.search
    }

    /// Run the search on `bank` (see [`CurvesSearch::set_bank`]).
    pub fn set_search_bank(&mut self, bank: Box<dyn CurveBank + Send>, what: &str) {
        self.search.set_bank(bank, what);
    }

    /// Read the frame as the model weighs it (the clutter map, if any, learning it away from
    /// the followers at `held`); false when the frame holds no curves to read.
    fn read(&mut self, seq: u64, gcc: &GccFrame, pair_ok: &[bool], held: &[[f64; 3]]) -> bool {
        let input = FrameInput {
            seq,
            gcc,
            pair_ok,
            sigma_s: 0.0,
            held,
        };
        self.reader.read(&input).is_some()
    }

    /// `curves`: every track, then the search (on the curves less the tracks' lags); returns
    /// the confirmed tracks' reports.
    pub fn step(&mut self, seq: u64, t: f64, gcc: &GccFrame, pair_ok: &[bool]) -> Vec<TrackReport> {
        self.ended.clear();
        let mut alone = std::mem::take(&mut self.alone);
        let held = positions(alone.iter());
        let read = self.read(seq, gcc, pair_ok, &held);
        if read {
            self.step_followers(alone.iter_mut());
            alone.retain(|t| t.curves.is_some());
        }
        self.alone = alone;
        if !read {
            return Vec::new();
        }
        if self.set.searching {
            self.search_once(seq, gcc, pair_ok);
        }
        self.reports(seq, t)
    }

    /// One frame of the curves search; a source it found becomes a track.
    fn search_once(&mut self, seq: u64, gcc: &GccFrame, pair_ok: &[bool]) {
        let model = self.reader.model();
        self.search.remember(model, gcc, pair_ok);
        let frame = self.reader.frame().clone();
        let held = positions(self.alone.iter());
        let Some(f) = (self.search).step(model, frame, &held, &mut self.keys) else {
            return;
        };
        let id = self.next_id;
        self.next_id += 1;
        let m = &f.mean;
        log::info!(
            "curves: track {id} confirmed at existence {:.3}, ({:.1}, {:.1}, {:.1}) m",
            f.p,
            m[0],
            m[1],
            m[2]
        );
        let order = self.take_order();
        let follower = Follower::confirmed(f.filter, f.mean, order);
        self.alone.push(Track::on_curves(id, seq, follower));
    }

    fn take_order(&mut self) -> u64 {
        self.next_order += 1;
        self.next_order - 1
    }

    /// Move every listed track's follower one frame, in their order; a follower the existence
    /// rule ends is taken from its track, and its end recorded.
    fn step_followers<'a>(&mut self, tracks: impl Iterator<Item = &'a mut Track>) {
        let (joint, confirm) = (self.set.joint_template, self.rule.confirm);
        let mut tracks: Vec<&mut Track> = tracks.filter(|t| t.curves.is_some()).collect();
        tracks.sort_by_key(|t| follower_order(t));
        let ends = {
            let mut rows: Vec<(u64, &mut Follower)> = (tracks.iter_mut())
                .filter_map(|t| t.curves.as_mut().map(|f| (t.id, f)))
                .collect();
            followers::step_all(&mut rows, &self.reader, joint, confirm, EDGE_M);
            let view: Vec<(u64, &Follower)> = rows.iter().map(|(id, f)| (*id, &**f)).collect();
            self.rule.ends(&view)
        };
        for (t, end) in tracks.into_iter().zip(ends) {
            if let Some(e) = end {
                t.curves = None;
                self.ended.push(e);
            }
        }
    }

    /// Reports of the confirmed tracks the curves alone serve (coasting while their existence
    /// is below the confirmation threshold).
    pub fn reports(&self, seq: u64, t_centre_s: f64) -> Vec<TrackReport> {
        (self.alone.iter())
            .filter_map(|t| t.curves.as_ref().map(|f| (t.id, f)))
            .filter(|(_, f)| f.confirmed)
            .map(|(id, f)| curve_report(id, f, self.rule.status(f), seq, t_centre_s))
            .collect()
    }

    /// `auto`: the peaks path's tracks, each followed on the curves as well. A confirmed peaks
    /// track gets a follower, seeded from its state (and seeded again when the two part by more
    /// than 5 m while the peaks still support it). A peaks track that has coasted for `COAST_S`
    /// is reported from its follower while the follower's existence is at the confirmation
    /// threshold, and one the peaks path ends as lost lives on here, on the curves alone, until
    /// that existence falls below the deletion threshold. [`Self::ended`] holds the merged ends.
    pub fn follow(
        &mut self,
        seq: u64,
        t: f64,
        gcc: &GccFrame,
        pair_ok: &[bool],
        peaks: Peaks,
    ) -> Vec<TrackReport> {
        self.ended.clear();
        let Peaks {
            tracks,
            dropped,
            reports,
            ended,
        } = peaks;
        let mut alone = std::mem::take(&mut self.alone);
        // (The dropped tracks' followers are the curves' alone now, until `carry` decides.)
        alone.extend(dropped.into_iter().map(on_curves_alone));
        let held = positions(tracks.iter().chain(alone.iter()));
        if !self.read(seq, gcc, pair_ok, &held) {
            self.alone = sorted(alone);
            self.ended.extend_from_slice(ended);
            return reports;
        }
        self.step_followers(tracks.iter_mut().chain(alone.iter_mut()));
        alone.retain(|t| t.curves.is_some());
        self.alone = sorted(alone);
        self.reseed(tracks, &reports);
        // Followers that ended this frame and whose peaks track lives on are not ends.
        let live: Vec<u64> = reports.iter().map(|r| r.id).collect();
        self.ended.retain(|e| !live.contains(&e.id));
        let mut out = self.serve(tracks, reports);
        self.give_way(&out);
        self.carry(ended);
        out.extend(self.reports(seq, t));
        out
    }

    /// Each confirmed peaks report whose track has no follower (or one more than 5 m from it)
    /// gets one, seeded from the report.
    fn reseed(&mut self, tracks: &mut [Track], peaks: &[TrackReport]) {
        for r in peaks {
            let Some(tr) = tracks.iter_mut().find(|t| t.id == r.id) else {
                continue;
            };
            let reseed = r.status == TrackStatus::Confirmed
                && (tr.curves.as_ref()).is_none_or(|f| !near(&f.mean, &r.position, 5.0));
            if !reseed {
                continue;
            }
            let chain = Chain::per_second(
                self.set.search.births_per_s,
                self.set.search.lifetime_s,
                self.frame_s,
            );
            let order = match &tr.curves {
                Some(f) => f.order,
                None => self.take_order(),
            };
            let s = Seed {
                model: self.reader.model(),
                params: track_params(chain, self.set.search.particles),
                seed: self.set.search.seed,
                key: self.keys.next_key(),
                p0: self.rule.confirm,
            };
            tr.curves = Some(seeded(&s, r, order));
        }
    }

    /// The peaks reports, each a coasting one served from its track's follower once that track
    /// has coasted for `COAST_S` with its follower's existence at the confirmation threshold.
    fn serve(&mut self, tracks: &mut [Track], peaks: Vec<TrackReport>) -> Vec<TrackReport> {
        let hold = (COAST_S / self.frame_s).ceil() as usize;
        for f in (self.alone.iter_mut()).filter_map(|t| t.curves.as_mut()) {
            f.coast_frames = 0;
        }
        let confirm = self.rule.confirm;
        let mut out = Vec::with_capacity(peaks.len());
        for r in peaks {
            let Some(tr) = tracks.iter_mut().find(|t| t.id == r.id) else {
                out.push(r);
                continue;
            };
            let Some(f) = tr.curves.as_mut() else {
                out.push(r);
                continue;
            };
            let coasting = r.status == TrackStatus::Coasting;
            f.coast_frames = if coasting { f.coast_frames + 1 } else { 0 };
            f.reporting = coasting && f.coast_frames >= hold && f.filter.p_exist() >= confirm;
            if f.reporting {
                out.push(curve_report(
                    r.id,
                    f,
                    TrackStatus::Confirmed,
                    r.seq,
                    r.t_frame_s,
                ));
            } else {
                out.push(r);
            }
        }
        out
    }

    /// A track on the curves alone that a confirmed peaks track of `out` has found again (a
    /// new id on the same source) gives way.
    fn give_way(&mut self, out: &[TrackReport]) {
        let confirmed: Vec<[f64; 3]> = out
            .iter()
            .filter(|r| r.status == TrackStatus::Confirmed && r.existence.is_none())
            .map(|r| r.position)
            .collect();
        let mut gone = Vec::new();
        self.alone.retain(|t| {
            let found = (t.curves.as_ref())
                .is_some_and(|f| confirmed.iter().any(|p| near(&f.mean, p, 3.0)));
            if found {
                gone.push(TrackEnd {
                    id: t.id,
                    reason: EndReason::Duplicate,
                    detail: "the peaks path has the source again".into(),
                    was_confirmed: true,
                });
            }
            !found
        });
        self.ended.extend(gone);
    }

    /// Peaks tracks that ended as lost: they carry on on the curves alone while their
    /// followers' existence holds and they are away from the volume's edge; the others' ends
    /// stand.
    fn carry(&mut self, peaks_ended: &[TrackEnd]) {
        for e in peaks_ended {
            // A track the peaks path ended as a duplicate, or that left the volume, is not
            // carried (the edge rule ends those on the curves too).
            let carried = e.reason == EndReason::Lost
                && self.alone.iter().any(|t| {
                    t.id == e.id
                        && t.curves.as_ref().is_some_and(|f| {
                            f.filter.p_exist() >= self.rule.confirm
                                && !self.reader.model().at_edge(&f.mean, EDGE_M)
                        })
                });
            if !carried {
                self.alone.retain(|t| t.id != e.id);
                self.ended.push(e.clone());
            }
        }
    }
}

/// A track the peaks path dropped, on the curves alone: its filter slot given back.
fn on_curves_alone(mut t: Track) -> Track {
    t.slot = NO_SLOT;
    t
}

/// Tracks in their followers' order.
fn sorted(mut tracks: Vec<Track>) -> Vec<Track> {
    tracks.sort_by_key(follower_order);
    tracks
}

#[cfg(test)]
#[path = "curves_tests.rs"]
mod tests;
