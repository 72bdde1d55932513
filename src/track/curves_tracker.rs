//! Several sources on the curves (digest B5.6): one Bernoulli filter per track plus a birth
//! search, itself a Bernoulli filter whose births come from the volume. When the search's
//! existence passes the confirmation threshold it becomes a track and a new search starts,
//! which sees the curves with the tracks' lags masked so it does not find them again. A track
//! ends when its existence falls below the deletion threshold.

use crate::dsp::gcc::GccFrame;
use crate::rng::philox::{Stream, normals6, uniform};
use crate::track::Estimate;
use crate::track::filter::bernoulli::DrawKey;
use crate::track::filter::bernoulli::bank::{BankModel, BankSizes, CurveBank, slot};
use crate::track::filter::bernoulli::existence::Chain;
use crate::track::filter::bernoulli::filter::{BernoulliFilter, BernoulliParams};
use crate::track::measure::curves::clutter::ClutterMap;
use crate::track::measure::curves::{CurveFrame, CurveModel, DIM};
use crate::track::motion::models::Kinematics;
use crate::track::report::{EndReason, TrackEnd, TrackReport, TrackStatus, report};

/// A track whose mean stays within this of the search volume's faces…
const EDGE_M: f64 = 1.0;
/// …for this long has left it (a source beyond the volume pins the particles to its edge, where
/// the delays fit nearly as well as at the source).
const EDGE_S: f64 = 1.0;

/// `auto`: a coasting peaks track is reported from the curves once it has coasted this long
/// (s); the particle filter bridges shorter gaps in its peaks as well on its own.
const COAST_S: f64 = 0.5;

/// Thresholds, rates and sizes (`[tracker.curves]`).
#[derive(Debug, Clone, PartialEq)]
pub struct TbdSettings {
    pub particles: usize,
    pub birth_particles: usize,
    pub confirm: f64,
    pub delete: f64,
    pub births_per_s: f64,
    pub lifetime_s: f64,
    pub max_tracks: usize,
    pub seed: u64,
    /// Run the birth search (off when the peaks path gives the births: `auto`).
    pub search: bool,
    /// The search's existence must stay at the confirmation threshold this long (s) before
    /// it becomes a track: a birth drawn onto a peak of noise can lift it for a frame or two
    /// (its weights are an importance-sampling estimate with heavy tails), a source holds it.
    pub confirm_s: f64,
    /// The clutter map's time constant (s; 0: no map). See [`ClutterMap`].
    pub clutter_map_s: f64,
    /// Weigh each track on the curves less the overlapping tracks' templates
    /// ([`CurveModel::without`]).
    pub joint_template: bool,
}

/// One track on the curves.
#[derive(Debug, Clone)]
pub struct CurveTrack {
    pub id: u64,
    pub filter: BernoulliFilter,
    /// Its existence has passed the confirmation threshold.
    pub confirmed: bool,
    /// The last frame's mean state.
    pub mean: Vec<f64>,
    /// Consecutive frames its mean has spent at the search volume's edge.
    pub edge_frames: usize,
    /// `auto`: consecutive frames its peaks track has coasted.
    pub coast_frames: usize,
}

/// The tracks on the curves and the search for new ones.
#[derive(Debug)]
pub struct TbdTracker {
    model: CurveModel,
    set: TbdSettings,
    /// The noise levels so far (see [`CurveModel::frame`]).
    levels: Vec<f64>,
    /// The curves' slow mean, taken from each frame (`clutter_map_s`).
    clutter: Option<ClutterMap>,
    search: BernoulliFilter,
    /// The search on a one-track curves bank instead (the GPU's; [`Self::set_search_bank`]).
    search_bank: Option<SearchBank>,
    /// The search's existence after the last frame.
    search_p: f64,
    /// Consecutive frames the search has held the confirmation threshold.
    search_held: usize,
    /// The peaks' consensus fixes of the last second's frames (births are drawn around them).
    recent: std::collections::VecDeque<Vec<[f64; 3]>>,
    pub tracks: Vec<CurveTrack>,
    /// Tracks ended by the last frame.
    pub ended: Vec<TrackEnd>,
    next_id: u64,
    /// Random-number key of the next filter made (each filter its own).
    next_key: u32,
    frame_s: f64,
}

impl TbdTracker {
    pub fn new(model: CurveModel, set: TbdSettings, frame_s: f64) -> Self {
        let clutter =
            (set.clutter_map_s > 0.0).then(|| ClutterMap::new(set.clutter_map_s, frame_s));
        let mut t = Self {
            search: BernoulliFilter::new(search_params(&set, frame_s), DIM, set.seed, 0, 0.0),
            model,
            set,
            levels: Vec::new(),
            clutter,
            search_bank: None,
            search_p: 0.0,
            search_held: 0,
            recent: std::collections::VecDeque::new(),
            tracks: Vec::new(),
            ended: Vec::new(),
            next_id: 1,
            next_key: 1,
            frame_s,
        };
        t.search = t.new_search();
        t
    }

    pub fn model(&self) -> &CurveModel {
        &self.model
    }

    /// The search's existence probability (how close a new source is to confirmation).
    pub fn search_existence(&self) -> f64 {
        self.search_p
    }

    /// What a bank for the search must be: the model in f32 (the band's lobe as its area),
    /// one track of the search's birth and continuing particles, and its chain.
    pub fn search_bank_spec(&self) -> (BankModel, BankSizes, Chain) {
        let params = search_params(&self.set, self.frame_s);
        let sizes = BankSizes {
            tracks: 1,
            n_birth: params.n_birth,
            n_cont: params.n_cont,
        };
        (self.model.packed(None), sizes, params.chain)
    }

    /// Run the search on `bank` from the next frame (made to [`Self::search_bank_spec`]) and
    /// hand its particles to each track it confirms; `what` names it in the log. If the bank
    /// fails, the search carries on on the CPU, from scratch.
    pub fn set_search_bank(&mut self, bank: Box<dyn CurveBank + Send>, what: &str) {
        self.search_bank = Some(SearchBank {
            bank,
            what: what.to_string(),
        });
    }

    /// Where the search runs: "cpu" or the bank's name.
    pub fn search_on(&self) -> &str {
        self.search_bank.as_ref().map_or("cpu", |b| b.what.as_str())
    }

    fn key(&mut self) -> u32 {
        let k = self.next_key;
        self.next_key = self.next_key.wrapping_add(1);
        k
    }

    fn new_search(&mut self) -> BernoulliFilter {
        let key = self.key();
        BernoulliFilter::new(
            search_params(&self.set, self.frame_s),
            DIM,
            self.set.seed,
            key,
            0.0,
        )
    }

    /// The frame as the model weighs it, with the pairs' health.
    /// With a clutter map, the map is taken from the curves and learns them, but not around
    /// the tracks' delays.
    pub fn frame_of(&mut self, gcc: &GccFrame, pair_ok: &[bool]) -> Option<CurveFrame> {
        let want = self.model.pairs() * self.model.curve_len();
        if gcc.curves.len() != want {
            return None;
        }
        let mut frame = self.model.frame(&gcc.curves, pair_ok, &mut self.levels);
        if let Some(map) = self.clutter.as_mut() {
            let held: Vec<[f64; 3]> = self
                .tracks
                .iter()
                .map(|t| [t.mean[0], t.mean[1], t.mean[2]])
                .collect();
            map.apply(&mut frame.curves, &self.model.held_lags(&held));
        }
        Some(frame)
    }

    /// One frame: every track, then the search (on the curves less the confirmed tracks'
    /// lags); returns the confirmed tracks' reports.
    pub fn step(
        &mut self,
        seq: u64,
        t_centre_s: f64,
        gcc: &GccFrame,
        pair_ok: &[bool],
    ) -> Vec<TrackReport> {
        self.ended.clear();
        let Some(mut frame) = self.frame_of(gcc, pair_ok) else {
            return Vec::new();
        };
        self.step_tracks(&frame);
        if self.set.search {
            let keep = (1.0 / self.frame_s).ceil().max(1.0) as usize;
            self.recent
                .push_back(self.model.peak_candidates(gcc, pair_ok));
            while self.recent.len() > keep {
                self.recent.pop_front();
            }
            frame.candidates = self.recent.iter().flatten().copied().collect();
            self.step_search(&frame);
        }
        self.reports(seq, t_centre_s)
    }

    /// Moves every track one frame and ends those whose existence fell below the threshold
    /// (or that follow the same source as an older track).
    pub fn step_tracks(&mut self, frame: &CurveFrame) {
        // Each track is weighed on the curves less the templates of the other tracks whose
        // lobes overlap its own (the joint template), at their last means. Tracks within the
        // duplicate distance are left to the duplicate rule below; a track seeded this frame
        // has no amplitude yet and is not subtracted.
        let others: Vec<(u64, [f64; 3], f64)> = if self.set.joint_template {
            self.tracks
                .iter()
                .filter_map(|t| {
                    let a = *t.mean.get(6)?;
                    Some((t.id, [t.mean[0], t.mean[1], t.mean[2]], a))
                })
                .collect()
        } else {
            Vec::new()
        };
        for t in &mut self.tracks {
            let overlapping: Vec<([f64; 3], f64)> = others
                .iter()
                .filter(|(id, pos, _)| {
                    *id != t.id
                        && !near(pos, &t.mean, DUPLICATE_M)
                        && self.model.overlaps(frame, &t.mean, pos)
                })
                .map(|(_, pos, a)| (*pos, *a))
                .collect();
            let own;
            let seen = if overlapping.is_empty() {
                frame
            } else {
                own = self.model.without(frame, &overlapping);
                &own
            };
            let s = t.filter.step(&self.model, seen);
            t.mean = s.mean;
            if s.existence.p >= self.set.confirm {
                t.confirmed = true;
            }
            if self.model.at_edge(&t.mean, EDGE_M) {
                t.edge_frames += 1;
            } else {
                t.edge_frames = 0;
            }
        }
        let edge_frames = (EDGE_S / self.frame_s).ceil() as usize;
        let mut keep = Vec::with_capacity(self.tracks.len());
        for t in std::mem::take(&mut self.tracks) {
            let dup = keep
                .iter()
                .any(|o: &CurveTrack| near(&o.mean, &t.mean, DUPLICATE_M));
            let left = t.edge_frames >= edge_frames;
            if t.filter.p_exist() < self.set.delete || dup || left {
                let detail = if left {
                    format!("it has sat at the search volume's edge for {EDGE_S} s")
                } else {
                    format!("existence {:.3} on the curves", t.filter.p_exist())
                };
                self.ended.push(TrackEnd {
                    id: t.id,
                    reason: if dup {
                        EndReason::Duplicate
                    } else if t.confirmed {
                        EndReason::Lost
                    } else {
                        EndReason::Unconfirmed
                    },
                    detail,
                    was_confirmed: t.confirmed,
                });
            } else {
                keep.push(t);
            }
        }
        self.tracks = keep;
    }

    fn step_search(&mut self, frame: &CurveFrame) {
        let held: Vec<[f64; 3]> = self
            .tracks
            .iter()
            .map(|t| [t.mean[0], t.mean[1], t.mean[2]])
            .collect();
        let masked;
        let seen = if held.is_empty() {
            frame
        } else {
            masked = {
                let mut m = self.model.masked(frame, &held);
                m.candidates
                    .retain(|c| held.iter().all(|h| !near(c, h, 3.0)));
                m
            };
            &masked
        };
        let (p, mean) = self.search_step(seen);
        self.search_p = p;
        if p < self.set.confirm {
            self.search_held = 0;
            return;
        }
        self.search_held += 1;
        let needed = (self.set.confirm_s / self.frame_s).ceil().max(1.0) as usize;
        if self.search_held < needed || self.tracks.len() >= self.set.max_tracks {
            return;
        }
        self.search_held = 0;
        let Some(filter) = self.hand_over(p) else {
            return;
        };
        self.search_p = 0.0;
        let id = self.next_id;
        self.next_id += 1;
        log::info!(
            "curves: track {id} confirmed at existence {:.3}, ({:.1}, {:.1}, {:.1}) m",
            p,
            mean[0],
            mean[1],
            mean[2]
        );
        self.tracks.push(CurveTrack {
            id,
            filter,
            confirmed: true,
            mean,
            edge_frames: 0,
            coast_frames: 0,
        });
    }

    /// One step of the search, on the bank where there is one: its existence and mean.
    fn search_step(&mut self, seen: &CurveFrame) -> (f64, Vec<f64>) {
        if let Some(b) = self.search_bank.as_mut() {
            let (f, prop) = self.model.bank_inputs(seen);
            match b.bank.step(&f, &prop) {
                Ok(sums) => match sums.first() {
                    Some(t) => return (t.p_exist, t.mean.to_vec()),
                    None => self.bank_failed("a step without the track's sums"),
                },
                Err(e) => self.bank_failed(&e.to_string()),
            }
        }
        let s = self.search.step(&self.model, seen);
        (s.existence.p, s.mean)
    }

    /// The bank failed: the search carries on on the CPU, from scratch.
    fn bank_failed(&mut self, why: &str) {
        if let Some(b) = self.search_bank.take() {
            log::warn!(
                "curves: the search on {} failed ({why}); it runs on the CPU from now on, from scratch",
                b.what
            );
        }
        self.search = self.new_search();
    }

    /// The search's particles as a confirmed track's filter, at existence `p`, and a fresh
    /// search; None if the bank failed (the search restarts on the CPU).
    fn hand_over(&mut self, p: f64) -> Option<BernoulliFilter> {
        let params = track_params(&self.set, self.frame_s);
        let Some(b) = self.search_bank.as_mut() else {
            let fresh = self.new_search();
            let mut filter = std::mem::replace(&mut self.search, fresh);
            filter.set_params(params);
            return Some(filter);
        };
        let taken = b
            .bank
            .particles()
            .and_then(|x| b.bank.reset(0.0).map(|()| x));
        match taken {
            Ok(x) => {
                // The bank's one track, state-major, as the filter's particle-major f64.
                let n = x.len() / DIM;
                let particles: Vec<f64> = (0..n)
                    .flat_map(|i| (0..DIM).map(move |k| (k, i)))
                    .map(|(k, i)| f64::from(x[slot(1, n, k, 0, i)]))
                    .collect();
                let key = self.key();
                Some(BernoulliFilter::seeded(
                    params,
                    DIM,
                    self.set.seed,
                    key,
                    p,
                    particles,
                ))
            }
            Err(e) => {
                self.bank_failed(&e.to_string());
                None
            }
        }
    }

    /// `auto`: the peaks path's tracks, each followed on the curves as well. A confirmed peaks
    /// track gets a curves track of the same id, seeded from its state (and seeded again when
    /// the two part by more than 5 m while the peaks still support it). A peaks track that has
    /// coasted (no support) for `COAST_S` is reported from its curves track while that one's
    /// existence is at the confirmation threshold, and one the peaks path ends lives on as its
    /// curves track until the existence falls below the deletion threshold. `peaks_ended`
    /// are the peaks path's ends this frame; [`Self::ended`] holds the merged ones.
    pub fn follow(
        &mut self,
        seq: u64,
        t_centre_s: f64,
        gcc: &GccFrame,
        pair_ok: &[bool],
        peaks: Vec<TrackReport>,
        peaks_ended: &[TrackEnd],
    ) -> Vec<TrackReport> {
        self.ended.clear();
        let Some(frame) = self.frame_of(gcc, pair_ok) else {
            self.ended.extend_from_slice(peaks_ended);
            return peaks;
        };
        self.step_tracks(&frame);
        for r in &peaks {
            let supported = r.status == TrackStatus::Confirmed;
            let at = self.tracks.iter().position(|t| t.id == r.id);
            let reseed = match at {
                None => supported,
                Some(i) => supported && !near(&self.tracks[i].mean, &r.position, 5.0),
            };
            if reseed {
                let t = self.seeded_track(r);
                match at {
                    Some(i) => self.tracks[i] = t,
                    None => self.tracks.push(t),
                }
            }
        }
        // Curves tracks that ended this frame and whose peaks track lives on are not ends.
        let live: Vec<u64> = peaks.iter().map(|r| r.id).collect();
        self.ended.retain(|e| !live.contains(&e.id));
        let mut out = Vec::with_capacity(peaks.len());
        let hold = (COAST_S / self.frame_s).ceil() as usize;
        for t in &mut self.tracks {
            let coasting = peaks
                .iter()
                .any(|r| r.id == t.id && r.status == TrackStatus::Coasting);
            t.coast_frames = if coasting { t.coast_frames + 1 } else { 0 };
        }
        for r in peaks {
            let curve = self.tracks.iter().find(|t| t.id == r.id);
            match curve {
                Some(t)
                    if r.status == TrackStatus::Coasting
                        && t.coast_frames >= hold
                        && t.filter.p_exist() >= self.set.confirm =>
                {
                    out.push(track_report(t, TrackStatus::Confirmed, r.seq, r.t_frame_s));
                }
                _ => out.push(r),
            }
        }
        // A curves track carried alone that a confirmed peaks track has found again (a new
        // id on the same source) gives way to it.
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
        // Peaks tracks that ended: their curves tracks carry on alone.
        for e in peaks_ended {
            // A track the peaks path ended as a duplicate, or that left the volume, is not
            // carried (the edge rule ends those on the curves too).
            let carried = e.reason == EndReason::Lost
                && self.tracks.iter().any(|t| {
                    t.id == e.id
                        && t.filter.p_exist() >= self.set.confirm
                        && !self.model.at_edge(&t.mean, EDGE_M)
                });
            if !carried {
                self.tracks.retain(|t| t.id != e.id);
                self.ended.push(e.clone());
            }
        }
        let reported: Vec<u64> = out.iter().map(|r| r.id).collect();
        for t in &self.tracks {
            if !reported.contains(&t.id) && t.confirmed {
                let status = if t.filter.p_exist() >= self.set.confirm {
                    TrackStatus::Confirmed
                } else {
                    TrackStatus::Coasting
                };
                out.push(track_report(t, status, seq, t_centre_s));
            }
        }
        out
    }

    /// A curves track of a peaks track's id, its particles drawn from the report's Gaussian
    /// (spreads at least 0.5 m and 0.3 m/s) and coherences from the prior, at the confirmation
    /// threshold's existence.
    fn seeded_track(&mut self, r: &TrackReport) -> CurveTrack {
        let key = self.key();
        let n = self.set.particles;
        let g = &r.state;
        let mut cov = nalgebra::Matrix6::from_fn(|i, j| g.cov[i][j]);
        for k in 0..6 {
            let floor = if k < 3 { 0.25 } else { 0.09 };
            cov[(k, k)] = cov[(k, k)].max(floor);
        }
        let l = nalgebra::Cholesky::new(cov)
            .map(|c| c.l())
            .unwrap_or_else(|| nalgebra::Matrix6::from_diagonal_element(0.5));
        let mut x = Vec::with_capacity(n * DIM);
        for i in 0..n {
            let k = DrawKey {
                seed: self.set.seed,
                frame: 0,
                track: key,
                particle: i as u32,
            };
            let z6 = normals6(k.words(Stream::InitPosition)).map(f64::from);
            let u = uniform(k.words(Stream::InitVelocity)[0]);
            let d = l * nalgebra::Vector6::from(z6);
            for k in 0..6 {
                x.push(g.mean[k] + d[k]);
            }
            let (lo, hi) = self.model.coherence_range();
            x.push(lo + f64::from(u) * (hi - lo));
        }
        let p0 = self.set.confirm;
        let filter = BernoulliFilter::seeded(
            track_params(&self.set, self.frame_s),
            DIM,
            self.set.seed,
            key,
            p0,
            x,
        );
        CurveTrack {
            id: r.id,
            filter,
            confirmed: true,
            mean: g.mean.to_vec(),
            edge_frames: 0,
            coast_frames: 0,
        }
    }

    /// Reports of the confirmed tracks (coasting while their existence is below the
    /// confirmation threshold).
    pub fn reports(&self, seq: u64, t_centre_s: f64) -> Vec<TrackReport> {
        self.tracks
            .iter()
            .filter(|t| t.confirmed)
            .map(|t| {
                let status = if t.filter.p_exist() >= self.set.confirm {
                    TrackStatus::Confirmed
                } else {
                    TrackStatus::Coasting
                };
                track_report(t, status, seq, t_centre_s)
            })
            .collect()
    }
}

/// A bank the search runs on, and its name for the log.
struct SearchBank {
    bank: Box<dyn CurveBank + Send>,
    what: String,
}

impl std::fmt::Debug for SearchBank {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SearchBank")
            .field("what", &self.what)
            .field("sizes", &self.bank.sizes())
            .finish()
    }
}

/// The search: births from the volume at the chain's birth rate.
fn search_params(set: &TbdSettings, frame_s: f64) -> BernoulliParams {
    BernoulliParams {
        chain: Chain::per_second(set.births_per_s, set.lifetime_s, frame_s),
        n_birth: set.birth_particles,
        n_cont: set.particles,
    }
}

/// A track: no births (a new source is the search's), the same lifetime.
fn track_params(set: &TbdSettings, frame_s: f64) -> BernoulliParams {
    BernoulliParams {
        chain: Chain {
            p_birth: 0.0,
            ..Chain::per_second(set.births_per_s, set.lifetime_s, frame_s)
        },
        n_birth: 0,
        n_cont: set.particles,
    }
}

/// Tracks closer than this (m) are one source: the later is ended as a duplicate.
const DUPLICATE_M: f64 = 2.0;

fn near(a: &[f64], b: &[f64], m: f64) -> bool {
    (0..3).map(|k| (a[k] - b[k]).powi(2)).sum::<f64>() < m * m
}

/// A track's report: the particles' mean and covariance of position and velocity.
fn track_report(t: &CurveTrack, status: TrackStatus, seq: u64, t_centre_s: f64) -> TrackReport {
    let x = t.filter.particles();
    let n = (x.len() / DIM).max(1) as f64;
    let mut mean = [0.0; 6];
    for p in x.chunks(DIM) {
        for k in 0..6 {
            mean[k] += p[k] / n;
        }
    }
    let mut cov = [[0.0; 6]; 6];
    for p in x.chunks(DIM) {
        for i in 0..6 {
            for j in 0..6 {
                cov[i][j] += (p[i] - mean[i]) * (p[j] - mean[j]) / n;
            }
        }
    }
    let coherence = x.chunks(DIM).map(|p| p[6]).sum::<f64>() / n;
    let e = Estimate {
        mean,
        cov,
        model_probs: Vec::new(),
        turn_rate: 0.0,
        ess: n as f32,
        resampled: true,
        log_evidence: 0.0,
        chosen_model: None,
        temper: 1.0,
    };
    let mut r = report(
        t.id,
        t_centre_s,
        &e,
        status,
        seq,
        t_centre_s,
        None,
        Kinematics::ThreeD,
        None,
    );
    r.coherence = Some(coherence as f32);
    r.existence = Some(t.filter.p_exist() as f32);
    r
}

#[cfg(test)]
#[path = "curves_tracker_tests.rs"]
mod tests;
