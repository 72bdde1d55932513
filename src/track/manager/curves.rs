//! The manager's stage on the GCC curves (`tracker.measurement = "curves" | "auto"`): each
//! frame the curves are read ([`CurvesReader`]), every track on them steps
//! ([`followers::step_all`]) and the existence rule keeps or ends it ([`ExistenceRule`]); then
//! either the curves search proposes new tracks ([`CurvesSearch`], "curves"), or the peaks
//! path's tracks are followed on the curves ("auto": a confirmed peaks track gets a curves
//! track of its id, and a peaks track that has coasted, or ended as lost, is served from the
//! curves while their existence holds).

use crate::dsp::gcc::GccFrame;
use crate::track::filter::bernoulli::FilterKeys;
use crate::track::filter::bernoulli::bank::CurveBank;
use crate::track::filter::bernoulli::existence::Chain;
use crate::track::filter::bernoulli::followers::{
    self, CurveTrack, Seed, curve_report, seeded, track_params,
};
use crate::track::initiate::curves::{CurvesSearch, SearchSettings};
use crate::track::logic::existence::{EDGE_M, ExistenceRule};
use crate::track::measure::curves::reader::CurvesReader;
use crate::track::measure::curves::{CurveModel, near};
use crate::track::measure::{FrameInput, MeasurementModel};
use crate::track::report::{EndReason, TrackEnd, TrackReport, TrackStatus};

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

/// The tracks on the curves, the search for new ones, and what they need.
#[derive(Debug)]
pub struct CurvesStage {
    reader: CurvesReader,
    set: CurvesSettings,
    rule: ExistenceRule,
    search: CurvesSearch,
    pub tracks: Vec<CurveTrack>,
    /// Tracks ended by the last frame (in `auto`, merged with the peaks path's).
    pub ended: Vec<TrackEnd>,
    next_id: u64,
    /// Random-number keys of the filters (the search's is the first, in every mode).
    keys: FilterKeys,
    frame_s: f64,
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
            tracks: Vec::new(),
            ended: Vec::new(),
            next_id: 1,
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
    /// the tracks); false when the frame holds no curves to read.
    fn read(&mut self, seq: u64, gcc: &GccFrame, pair_ok: &[bool]) -> bool {
        let held: Vec<[f64; 3]> = (self.tracks.iter())
            .map(|t| [t.mean[0], t.mean[1], t.mean[2]])
            .collect();
        let input = FrameInput {
            seq,
            gcc,
            pair_ok,
            sigma_s: 0.0,
            held: &held,
        };
        self.reader.read(&input).is_some()
    }

    /// `curves`: every track, then the search (on the curves less the tracks' lags); returns
    /// the confirmed tracks' reports.
    pub fn step(&mut self, seq: u64, t: f64, gcc: &GccFrame, pair_ok: &[bool]) -> Vec<TrackReport> {
        self.ended.clear();
        if !self.read(seq, gcc, pair_ok) {
            return Vec::new();
        }
        self.step_tracks();
        if self.set.searching {
            let model = self.reader.model();
            self.search.remember(model, gcc, pair_ok);
            let frame = self.reader.frame().clone();
            let found = (self.search).step(model, frame, &self.tracks, &mut self.keys);
            if let Some(f) = found {
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
                self.tracks.push(CurveTrack {
                    id,
                    filter: f.filter,
                    confirmed: true,
                    mean: f.mean,
                    edge_frames: 0,
                    coast_frames: 0,
                });
            }
        }
        self.reports(seq, t)
    }

    /// Move every track one frame and end those the existence rule ends.
    fn step_tracks(&mut self) {
        let (joint, confirm) = (self.set.joint_template, self.rule.confirm);
        followers::step_all(&mut self.tracks, &self.reader, joint, confirm, EDGE_M);
        let tracks = std::mem::take(&mut self.tracks);
        self.tracks = self.rule.keep(tracks, &mut self.ended);
    }

    /// Reports of the confirmed tracks (coasting while their existence is below the
    /// confirmation threshold).
    pub fn reports(&self, seq: u64, t_centre_s: f64) -> Vec<TrackReport> {
        (self.tracks.iter())
            .filter(|t| t.confirmed)
            .map(|t| curve_report(t, self.rule.status(t), seq, t_centre_s))
            .collect()
    }

    /// `auto`: the peaks path's tracks (`peaks`, and its ends this frame `peaks_ended`), each
    /// followed on the curves as well. A confirmed peaks track gets a curves track of the same
    /// id, seeded from its state (and seeded again when the two part by more than 5 m while the
    /// peaks still support it). A peaks track that has coasted for `COAST_S` is reported from
    /// its curves track while that one's existence is at the confirmation threshold, and one
    /// the peaks path ends lives on as its curves track until the existence falls below the
    /// deletion threshold. [`Self::ended`] holds the merged ends.
    pub fn follow(
        &mut self,
        seq: u64,
        t: f64,
        gcc: &GccFrame,
        pair_ok: &[bool],
        peaks: Vec<TrackReport>,
        peaks_ended: &[TrackEnd],
    ) -> Vec<TrackReport> {
        self.ended.clear();
        if !self.read(seq, gcc, pair_ok) {
            self.ended.extend_from_slice(peaks_ended);
            return peaks;
        }
        self.step_tracks();
        self.reseed(&peaks);
        // Curves tracks that ended this frame and whose peaks track lives on are not ends.
        let live: Vec<u64> = peaks.iter().map(|r| r.id).collect();
        self.ended.retain(|e| !live.contains(&e.id));
        let mut out = self.serve(peaks);
        self.give_way(&out, &live);
        self.carry(peaks_ended);
        let reported: Vec<u64> = out.iter().map(|r| r.id).collect();
        for c in self.tracks.iter().filter(|c| c.confirmed) {
            if !reported.contains(&c.id) {
                out.push(curve_report(c, self.rule.status(c), seq, t));
            }
        }
        out
    }

    /// Each confirmed peaks report without a curves track (or more than 5 m from it) gets
    /// one, seeded from the report.
    fn reseed(&mut self, peaks: &[TrackReport]) {
        for r in peaks {
            let supported = r.status == TrackStatus::Confirmed;
            let at = self.tracks.iter().position(|t| t.id == r.id);
            let reseed = match at {
                None => supported,
                Some(i) => supported && !near(&self.tracks[i].mean, &r.position, 5.0),
            };
            if !reseed {
                continue;
            }
            let chain = Chain::per_second(
                self.set.search.births_per_s,
                self.set.search.lifetime_s,
                self.frame_s,
            );
            let s = Seed {
                model: self.reader.model(),
                params: track_params(chain, self.set.search.particles),
                seed: self.set.search.seed,
                key: self.keys.next_key(),
                p0: self.rule.confirm,
            };
            let t = seeded(&s, r);
            match at {
                Some(i) => self.tracks[i] = t,
                None => self.tracks.push(t),
            }
        }
    }

    /// The peaks reports, each a coasting one served from its curves track once that track has
    /// coasted for `COAST_S` with its existence at the confirmation threshold.
    fn serve(&mut self, peaks: Vec<TrackReport>) -> Vec<TrackReport> {
        let hold = (COAST_S / self.frame_s).ceil() as usize;
        for t in &mut self.tracks {
            let coasting =
                (peaks.iter()).any(|r| r.id == t.id && r.status == TrackStatus::Coasting);
            t.coast_frames = if coasting { t.coast_frames + 1 } else { 0 };
        }
        let confirm = self.rule.confirm;
        let mut out = Vec::with_capacity(peaks.len());
        for r in peaks {
            let curve = self.tracks.iter().find(|t| t.id == r.id);
            match curve {
                Some(t)
                    if r.status == TrackStatus::Coasting
                        && t.coast_frames >= hold
                        && t.filter.p_exist() >= confirm =>
                {
                    out.push(curve_report(t, TrackStatus::Confirmed, r.seq, r.t_frame_s));
                }
                _ => out.push(r),
            }
        }
        out
    }

    /// A curves track carried alone (its id not among the peaks path's `live` tracks) that a
    /// confirmed peaks track of `out` has found again (a new id on the same source) gives way.
    fn give_way(&mut self, out: &[TrackReport], live: &[u64]) {
        let confirmed: Vec<[f64; 3]> = out
            .iter()
            .filter(|r| r.status == TrackStatus::Confirmed && r.existence.is_none())
            .map(|r| r.position)
            .collect();
        let mut gone = Vec::new();
        self.tracks.retain(|t| {
            let orphan = !live.contains(&t.id);
            let found = confirmed.iter().any(|p| near(&t.mean, p, 3.0));
            if orphan && found {
                gone.push(TrackEnd {
                    id: t.id,
                    reason: EndReason::Duplicate,
                    detail: "the peaks path has the source again".into(),
                    was_confirmed: true,
                });
            }
            !(orphan && found)
        });
        self.ended.extend(gone);
    }

    /// Peaks tracks that ended as lost: their curves tracks carry on alone while their
    /// existence holds and they are away from the volume's edge; the others' ends stand.
    fn carry(&mut self, peaks_ended: &[TrackEnd]) {
        for e in peaks_ended {
            // A track the peaks path ended as a duplicate, or that left the volume, is not
            // carried (the edge rule ends those on the curves too).
            let carried = e.reason == EndReason::Lost
                && self.tracks.iter().any(|t| {
                    t.id == e.id
                        && t.filter.p_exist() >= self.rule.confirm
                        && !self.reader.model().at_edge(&t.mean, EDGE_M)
                });
            if !carried {
                self.tracks.retain(|t| t.id != e.id);
                self.ended.push(e.clone());
            }
        }
    }
}

#[cfg(test)]
#[path = "curves_tests.rs"]
mod tests;
