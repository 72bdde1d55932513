//! The track manager: it sequences the tracker's parts frame by frame and owns the tracks, their
//! ids and the counters the status stream reports. Each frame, in order:
//!
//! 1. the peaks model reads the frame, and the associator holds it or gives back the frame to
//!    commit ([`Associator::hold`]; multi-frame assignment commits S - 2 frames late);
//! 2. each track's step is timed ([`steps_to`]) and its gates predicted ([`predict_gates`]),
//!    and the peaks are assigned to tracks pair by pair, confirmed tracks first
//!    ([`assign_frame`]);
//! 3. each track's filter steps on its own view of the frame (every peak but those assigned to
//!    other tracks) while the birth search runs ([`birth_fix`]);
//! 4. mirror twins are weighed ([`Twins`]); each track's hit or miss goes through its logic
//!    ([`Judge`]), the search volume's edge ([`edge`]) and the duplicate rule ([`duplicates`]);
//! 5. the TDOA noise is learnt from the confirmed tracks' hits, and a birth is proposed from
//!    the peaks no confirmed track explains ([`Screen`]);
//! 6. the tracks are reported, and when none is confirmed the frame's reason is counted.
//!
//! Time: truth and reports use the emission time. A frame centred at arrival time `t_c` sees the
//! source as it was `lag = mean range / c` earlier, so a track's state time is `t_c - lag` (the
//! likelihood corrects each pair for its own emission time; see `likelihood.rs`).

pub mod curves;
mod settings;

use crate::dsp::gcc::GccFrame;
use crate::error::BackendError;
use crate::track::associate::{Associator, HeldFrame, assign_frame, associator};
use crate::track::filter::step_with_twin;
use crate::track::gate::predict_gates;
use crate::track::initiate::multilat::{BirthFix, BirthInputs, BirthSearch, NoBirth, birth_fix};
use crate::track::initiate::twins::Twins;
use crate::track::logic::judge::Judge;
use crate::track::measure::noise::{ResidualWindow, tdoa_noise_s};
use crate::track::measure::peaks::PeaksModel;
use crate::track::measure::{FrameInput, Measurement, MeasurementModel};
use crate::track::motion::steps::{StepTo, steps_to};
use crate::track::report::TrackEnd;
use crate::track::state::{Served, Track};
use crate::track::{Estimate, FilterBank, FilterParams, TdoaMeasurement, TrackStep};

pub use crate::track::initiate::twins::ENDFIRE_DEG;
pub use crate::track::report::{TrackReport, TrackStatus};
pub use settings::{ManagerCounts, ManagerSettings};

use curves::{CurvesStage, Peaks};

pub struct TrackManager {
    bank: Box<dyn FilterBank>,
    params: FilterParams,
    s: ManagerSettings,
    judge: Judge,
    peaks: PeaksModel,
    associator: Box<dyn Associator>,
    births_search: BirthSearch,
    /// Mirror twins, and how many were decided either way.
    pub twins: Twins,
    tracks: Vec<Track>,
    next_id: u64,
    /// |assigned peak - prediction| of recent frames, seconds.
    residuals: ResidualWindow,
    /// TDOA noise in use: the configured floor or the online estimate, whichever is larger.
    sigma_s: f32,
    /// This frame's step and new estimate of each track, and a track's view of the frame.
    steps: Vec<TrackStep>,
    est: Vec<Estimate>,
    view: TdoaMeasurement,
    pub counts: ManagerCounts,
    /// The tracks the peaks path deleted in the last frame, and those of them with a follower
    /// on the curves (for the curves stage, which may carry them on).
    ended: Vec<TrackEnd>,
    dropped: Vec<Track>,
    /// What the tracks are weighed with, and the stage on the curves where they are.
    measurement: Measurement,
    curves: Option<CurvesStage>,
    /// Why the last frame had no confirmed track (None when it had one).
    pub no_track_now: Option<&'static str>,
    /// Why this frame's birth search proposed no track.
    birth_outcome: Option<NoBirth>,
    /// A turning array: this frame's heading (the last one known).
    heading_deg: Option<f64>,
    /// The frame (sequence number and centre time) whose reports the last step returned; None
    /// while a multi-frame window fills.
    committed: Option<(u64, f64)>,
}

impl TrackManager {
    pub fn new(s: ManagerSettings, bank: Box<dyn FilterBank>) -> Self {
        let params = bank.params().clone();
        Self {
            judge: Judge::new(&s.logic),
            peaks: PeaksModel::new(s.peaks.clone(), params.tdoa_std_s),
            associator: associator(s.mfa_lists),
            births_search: BirthSearch::new(s.init_frames),
            twins: Twins::new(params.line, s.turning),
            tracks: Vec::new(),
            next_id: 1,
            residuals: ResidualWindow::default(),
            sigma_s: params.tdoa_std_s,
            steps: Vec::new(),
            est: Vec::new(),
            view: TdoaMeasurement::default(),
            counts: ManagerCounts::default(),
            ended: Vec::new(),
            dropped: Vec::new(),
            measurement: Measurement::Peaks,
            curves: None,
            no_track_now: None,
            birth_outcome: None,
            heading_deg: None,
            committed: None,
            bank,
            params,
            s,
        }
    }

    /// Track on the curves too (`curves`, made for `measurement` "curves" or "auto").
    pub fn with_curves(mut self, curves: Option<CurvesStage>, measurement: Measurement) -> Self {
        self.measurement = measurement;
        self.curves = curves;
        self
    }

    /// The stage on the curves, where there is one.
    pub fn curves_mut(&mut self) -> Option<&mut CurvesStage> {
        self.curves.as_mut()
    }

    /// The tracks deleted in the last frame (for the outputs' `deleted` messages).
    pub fn ended(&self) -> &[TrackEnd] {
        self.curves.as_ref().map_or(&self.ended, |c| &c.ended)
    }

    pub fn backend(&self) -> &'static str {
        self.bank.backend()
    }

    pub fn params(&self) -> &FilterParams {
        &self.params
    }

    /// Every track: the peaks path's and those the curves alone serve.
    fn all_tracks(&self) -> impl Iterator<Item = &Track> {
        let alone = self.curves.as_ref().map_or(&[][..], |c| &c.alone[..]);
        self.tracks.iter().chain(alone)
    }

    pub fn active_tracks(&self) -> usize {
        self.all_tracks().count()
    }

    pub fn confirmed_tracks(&self) -> usize {
        self.all_tracks().filter(|t| t.confirmed()).count()
    }

    /// With a stage on the curves: the tracks whose last report the curves made.
    pub fn curves_tracks(&self) -> Option<usize> {
        self.curves.as_ref()?;
        Some(
            (self.all_tracks())
                .filter(|t| t.served() == Served::Curves)
                .count(),
        )
    }

    /// The TDOA noise currently assumed, seconds.
    pub fn sigma_s(&self) -> f32 {
        self.sigma_s
    }

    /// Per pair: whether its peaks at lag zero are crosstalk (ignored from the next frame on).
    pub fn set_zero_masked(&mut self, masked: &[bool]) {
        self.peaks.set_zero_masked(masked);
    }

    /// A turning array: the heading of the frame about to be stepped (degrees; None when
    /// none came, and the last one is kept and the frame counted).
    pub fn set_heading(&mut self, heading_deg: Option<f64>) {
        match heading_deg {
            Some(h) => self.heading_deg = Some(h),
            None => self.counts.heading_missing_frames += 1,
        }
    }

    /// Process one frame's GCC result (`pair_ok[p]`: false for pairs with a bad channel):
    /// on the peaks, on the curves, or on the peaks with each track followed on the curves
    /// ([`CurvesStage`]). Returns the reports of the frame [`Self::committed`] names: this one,
    /// or under multi-frame assignment the one S - 2 frames before it (none while the window
    /// fills).
    pub fn step(
        &mut self,
        seq: u64,
        t_centre_s: f64,
        gcc: &GccFrame,
        pair_ok: &[bool],
    ) -> Result<Vec<TrackReport>, BackendError> {
        if let (Some(c), Measurement::Curves) = (self.curves.as_mut(), self.measurement) {
            self.committed = Some((seq, t_centre_s));
            return Ok(c.step(seq, t_centre_s, gcc, pair_ok));
        }
        let reports = self.step_peaks(seq, t_centre_s, gcc, pair_ok)?;
        let Some(c) = self.curves.as_mut() else {
            return Ok(reports);
        };
        let peaks = Peaks {
            tracks: &mut self.tracks,
            dropped: std::mem::take(&mut self.dropped),
            reports,
            ended: &self.ended,
        };
        Ok(c.follow(seq, t_centre_s, gcc, pair_ok, peaks))
    }

    /// [`Self::step`] on the peaks.
    fn step_peaks(
        &mut self,
        seq: u64,
        t_centre_s: f64,
        gcc: &GccFrame,
        pair_ok: &[bool],
    ) -> Result<Vec<TrackReport>, BackendError> {
        let input = FrameInput {
            seq,
            gcc,
            pair_ok,
            sigma_s: self.sigma_s,
            held: &[],
        };
        let informative = self.peaks.read(&input).unwrap_or(0);
        if !self.associator.holds_frames() {
            // (Committed as read: nothing to keep a copy of.)
            self.committed = Some((seq, t_centre_s));
            return self.commit(seq, t_centre_s, informative);
        }
        let frame = self.peaks.take(informative);
        let held = HeldFrame {
            seq,
            t_centre_s,
            frame,
            heading_deg: self.heading_deg,
        };
        let Some(f) = self.associator.hold(held) else {
            self.committed = None;
            return Ok(Vec::new());
        };
        self.commit_held(f)
    }

    /// The end of the stream under multi-frame assignment: commit the next frame still held.
    /// None once every frame is committed (and always without multi-frame assignment).
    pub fn drain_one(&mut self) -> Option<Result<Vec<TrackReport>, BackendError>> {
        let f = self.associator.drain_one()?;
        Some(self.commit_held(f))
    }

    /// The frame (sequence number, centre time) whose reports the last [`Self::step`] or
    /// [`Self::drain_one`] returned; None while a multi-frame window fills.
    pub fn committed(&self) -> Option<(u64, f64)> {
        self.committed
    }

    /// Frames the reports run behind the newest frame (S - 2 under multi-frame assignment).
    pub fn latency_frames(&self) -> usize {
        self.associator.latency_frames()
    }

    /// Multi-frame assignment: pair assignments solved over the window, those where it chose
    /// otherwise than the frame alone, and those the single frame decided.
    pub fn window_counts(&self) -> Option<(u64, u64, u64)> {
        self.associator.window_counts()
    }

    /// Commit a held frame, its measurement and heading in place. A failed commit (the filter's
    /// backend failed) goes back to the associator, to be redone on another backend.
    fn commit_held(&mut self, f: HeldFrame) -> Result<Vec<TrackReport>, BackendError> {
        self.peaks.restore(&f.frame);
        let newest = std::mem::replace(&mut self.heading_deg, f.heading_deg);
        self.committed = Some((f.seq, f.t_centre_s));
        let out = self.commit(f.seq, f.t_centre_s, f.frame.informative);
        // (The next frame's heading, when none comes, is the newest one known.)
        if newest.is_some() {
            self.heading_deg = newest;
        }
        if out.is_err() {
            self.associator.put_back(f);
        }
        out
    }

    /// One read frame's work: steps and gates, assignment, filters, logic, noise, births.
    fn commit(
        &mut self,
        seq: u64,
        t: f64,
        informative: usize,
    ) -> Result<Vec<TrackReport>, BackendError> {
        self.counts.informative_frames += u64::from(informative > 0);
        let to = step_to(&self.s, &self.params, self.heading_deg, t);
        steps_to(&to, &self.tracks, &mut self.steps);
        let rates = self.associator.needs_rates().then_some(self.s.hop_s);
        let rows = (self.tracks.iter_mut()).map(|t| (&t.est, &mut t.gates, &mut t.rates));
        predict_gates(rows, &self.steps, &self.params, self.sigma_s, rates);
        let (hop, g) = (self.s.hop_s, self.s.gate_sigmas);
        assign_frame(
            self.associator.as_mut(),
            &self.peaks,
            &mut self.tracks,
            hop,
            g,
        );
        let fix = self.step_filters()?;
        let heading = self.heading_deg;
        (self.twins).weigh(&mut self.tracks, &mut self.est, &mut self.steps, heading, t);
        self.ended.clear();
        let mut reports = self.judge_tracks(seq, t);
        let slots = self.params.slots;
        let bank = self.bank.as_mut();
        (self.twins).rearm(bank, &mut self.tracks, slots, &mut reports, seq, heading)?;
        if self.tracks.is_empty() {
            self.residuals.clear();
        }
        let fs = self.s.peaks.sample_rate_hz;
        self.sigma_s = tdoa_noise_s(&self.residuals, self.params.tdoa_std_s, fs);
        self.birth_outcome = None;
        reports.extend(self.try_birth(seq, t, fix)?);
        self.no_track_now = self.no_track_reason();
        if let Some(why) = self.no_track_now {
            *self.counts.no_track.entry(why).or_insert(0) += 1;
        }
        Ok(reports)
    }

    /// Step every track's filter on its view (a lone track on the whole frame, while the birth
    /// search runs, so that a GPU computes the step meanwhile). Returns the search's result.
    fn step_filters(&mut self) -> Result<Result<BirthFix, NoBirth>, BackendError> {
        let l = self.params.n_models();
        self.est.resize_with(self.steps.len(), || Estimate::new(l));
        let confirmed = self.tracks.iter().filter(|t| t.confirmed());
        let explained = (self.peaks).explained(
            confirmed.map(|t| (&t.gates, t.assigned.as_slice())),
            self.s.gate_sigmas,
        );
        let inputs = BirthInputs {
            geo: &self.s.geometry,
            pairs: self.s.pairs(),
            meas: self.peaks.frame(),
            params: &self.params,
            bounds: self.s.bounds,
            sample_rate_hz: self.s.peaks.sample_rate_hz,
            detection_probability: self.s.peaks.detection_probability,
            last_fix: self.births_search.last_fix(),
            explained: &explained,
        };
        let start = std::time::Instant::now();
        let mut fix = None;
        let bank = self.bank.as_mut();
        if self.tracks.len() <= 1 {
            let mut meanwhile = || fix = Some(birth_fix(&inputs));
            if let (Some(step), Some(t)) = (self.steps.first(), self.tracks.first_mut()) {
                let twin = t.twin.as_mut().map(|w| (w.slot, &mut w.est));
                let est = &mut self.est[0];
                step_with_twin(bank, inputs.meas, *step, est, twin, &mut meanwhile)?;
            }
        } else {
            let taken: Vec<Vec<Option<usize>>> =
                self.tracks.iter().map(|t| t.assigned.clone()).collect();
            let taken: Vec<&[Option<usize>]> = taken.iter().map(Vec::as_slice).collect();
            for (i, t) in self.tracks.iter_mut().enumerate() {
                self.peaks.view(i, &taken, &mut self.view);
                let twin = t.twin.as_mut().map(|w| (w.slot, &mut w.est));
                let est = &mut self.est[i];
                step_with_twin(bank, &self.view, self.steps[i], est, twin, &mut || {})?;
            }
        }
        self.counts.filter_wall += start.elapsed();
        Ok(fix.unwrap_or_else(|| birth_fix(&inputs)))
    }
}

/// The frame centred at `t_centre_s` that the tracks step to.
fn step_to<'a>(
    s: &'a ManagerSettings,
    p: &FilterParams,
    heading_deg: Option<f64>,
    t_centre_s: f64,
) -> StepTo<'a> {
    StepTo {
        t_centre_s,
        geo: &s.geometry,
        mode: p.mode,
        heading_deg,
    }
}

mod device;
mod judging;
