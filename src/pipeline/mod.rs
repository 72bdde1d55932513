//! The pipeline: frame → channel health → GCC-PHAT → tracker → messages, with the counters the
//! status stream reports. Every frame that enters is processed or counted as dropped.
//!
//! A backend error moves processing to the CPU from that frame on; the failed frame is redone on
//! the CPU (the tracks restart from their last estimates), so no frame is lost. The switch is
//! logged and counted.

pub mod backend;
pub mod daemon;
pub mod fuse;
pub mod fuse_trial;
pub mod replay;
pub mod scene;
pub mod trial;

use std::collections::BTreeMap;
use std::time::{Duration, Instant, SystemTime};

use crate::audio::assembler::FrameAssembler;
use crate::audio::frame::Frame;
use crate::audio::{AudioSource, ReadResult};
use crate::config::Config;
use crate::dsp::crosstalk::CrosstalkMonitor;
use crate::dsp::gcc::{Correlator, CpuCorrelator, GccFrame};
use crate::dsp::health::{FrameHealth, inspect};
use crate::error::{BackendError, Result};
use crate::output::{
    DeletedMessage, FrameStamp, Message, SCHEMA_VERSION, SinkSet, StatusMessage, TrackMessage,
};
use crate::pipeline::backend::Backends;
use crate::track::FilterBank;
use crate::track::manager::{TrackManager, TrackReport};
use crate::track::smooth::tracks::{Mode as SmoothMode, TrackSmoother};

/// Frame accounting and timing, reported in status messages and the replay summary.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Counters {
    pub frames_in: u64,
    pub frames_processed: u64,
    pub dropped: BTreeMap<String, u64>,
    /// Processed frames in which no pair had a usable channel pair.
    pub frames_without_pairs: u64,
    pub nonfinite_samples: u64,
    pub bad_channel_frames: Vec<u64>,
    pub backend_switches: u64,
    pub proc_total: Duration,
    pub proc_max: Duration,
    /// The shares of `proc_total` spent checking the input (non-finite samples, dead
    /// channels) and in GCC-PHAT (the correlator calls).
    pub check_total: Duration,
    pub gcc_total: Duration,
    /// The part of `proc_total` outside the tracker's frames: the checks and correlation when
    /// they run before the tracking, or, in a replay that prepares the next batch on a second
    /// thread while the tracker works through the current one, the time the tracker waited for
    /// that thread (the first batch, and any batch that took longer than the tracking).
    pub prep_exposed: Duration,
    /// Checks and correlation ran on a second thread, overlapping the tracking.
    pub overlapped: bool,
}

impl Counters {
    pub fn frames_dropped(&self) -> u64 {
        self.dropped.values().sum()
    }

    pub fn drop_frames(&mut self, reason: &str, n: u64) {
        if n > 0 {
            *self.dropped.entry(reason.to_string()).or_insert(0) += n;
            self.frames_in += n;
        }
    }
}

/// What one processed frame produced (for observers: evaluation, plots).
pub struct FrameView<'a> {
    pub seq: u64,
    pub t_centre_s: f64,
    pub reports: &'a [TrackReport],
    /// Smoothed reports that became ready with this frame (of it or earlier frames).
    pub smoothed: &'a [TrackReport],
    pub gcc: &'a GccFrame,
    pub health: &'a FrameHealth,
}

#[derive(Debug, Clone, Default)]
pub struct PipelineOptions {
    /// Keep GCC curves (plots, track-before-detect).
    pub want_curves: bool,
    /// Leave measured processing times out of the output so two runs can be compared byte for
    /// byte.
    pub reproducible: bool,
    /// Live capture: status on wall time and wall-clock stamps on messages.
    pub live: bool,
    /// Smooth each track over all of its data when it ends (`replay --smooth`).
    pub smooth_interval: bool,
}

pub struct Pipeline {
    cfg: Config,
    opts: PipelineOptions,
    /// Dropped before the correlator (fields drop in order): a GPU filter's live step may be
    /// waiting on the correlator's device memory.
    tracker: TrackManager,
    /// `None` only while a call has it (an overlapped replay lends it to its second thread).
    correlator: Option<Box<dyn Correlator>>,
    pub sinks: SinkSet,
    pub counters: Counters,
    model_names: Vec<String>,
    gcc: Vec<GccFrame>,
    pair_ok: Vec<bool>,
    health_batch: Vec<FrameHealth>,
    pairs: Vec<(usize, usize)>,
    next_status_s: f64,
    window: (Duration, Duration, u64),
    started: Instant,
    reports: Vec<TrackReport>,
    /// Fixed-interval (`replay --smooth`) and fixed-lag (`smoothing.lag_s`) smoothers.
    smoothers: Vec<TrackSmoother>,
    smoothed: Vec<TrackReport>,
    /// Live: when the frame being processed was complete (carried into its messages).
    pub frame_ready: Option<Instant>,
    /// Processing time per frame (its share of the correlation, the tracker step, the hand-off
    /// to the outputs), so a daemon can tell processing time from scheduling delay.
    pub proc_time: crate::output::LatencyHistogram,
    /// A turning array: where each frame's heading comes from.
    heading: Option<crate::audio::heading::HeadingFeed>,
    /// Pairs with a peak fixed at lag zero (`gcc.crosstalk_window_s`; None: off), and the
    /// pairs it has flagged at any time.
    crosstalk: Option<CrosstalkMonitor>,
    pub crosstalk_seen: Vec<bool>,
}

/// The configuration's tracker over the filter bank `filter`, with its stage on the curves
/// where `tracker.measurement` asks for one.
fn tracker_of(cfg: &Config, filter: Box<dyn FilterBank>) -> TrackManager {
    TrackManager::new(cfg.manager_settings(), filter)
        .with_curves(cfg.curves_stage(), cfg.tracker.measurement)
}

impl Pipeline {
    pub fn new(
        cfg: &Config,
        backends: Backends,
        sinks: SinkSet,
        mut opts: PipelineOptions,
    ) -> Self {
        let params = backends.correlator.params().clone();
        let pairs = params.pairs.iter().map(|p| (p.a, p.b)).collect::<Vec<_>>();
        let mut tracker = tracker_of(cfg, backends.filter);
        let backend = tracker.backend();
        if let Some(t) = tracker.curves_mut() {
            opts.want_curves = true;
            if cfg.tracker.curves.search_on_gpu {
                backend::gpu_search(t, backend, cfg.tracker.seed);
            }
        }
        let n_ch = cfg.array.sensors_m.len();
        let models = tracker.params().models.clone();
        let crosstalk = (cfg.gcc.crosstalk_window_s > 0.0).then(|| {
            let fs = cfg.sample_rate_hz();
            // (The correlator's pairs, in its order: `gcc_params` takes them from `pairs()`.)
            CrosstalkMonitor::new(
                cfg.geometry(),
                cfg.pairs(),
                fs,
                fs / cfg.hop_samples() as f64,
                cfg.gcc.crosstalk_window_s,
                crate::dsp::gcc::phat_noise_level(&params),
            )
        });
        let mut smoothers = Vec::new();
        if opts.smooth_interval {
            smoothers.push(TrackSmoother::new(SmoothMode::Interval, &models));
        }
        if let Some(l) = cfg.lag_frames() {
            smoothers.push(TrackSmoother::new(SmoothMode::Lag(l), &models));
        }
        Self {
            smoothers,
            smoothed: Vec::new(),
            model_names: cfg.tracker.models.iter().map(|m| m.name.clone()).collect(),
            gcc: vec![GccFrame::new(&params)],
            pair_ok: Vec::new(),
            health_batch: Vec::new(),
            counters: Counters {
                bad_channel_frames: vec![0; n_ch],
                ..Counters::default()
            },
            next_status_s: 0.0,
            window: (Duration::ZERO, Duration::ZERO, 0),
            started: Instant::now(),
            reports: Vec::new(),
            frame_ready: None,
            proc_time: crate::output::LatencyHistogram::default(),
            heading: None,
            crosstalk,
            crosstalk_seen: vec![false; pairs.len()],
            cfg: cfg.clone(),
            opts,
            correlator: Some(backends.correlator),
            tracker,
            sinks,
            pairs,
        }
    }

    /// One frame's tracking; a failing GPU filter moves to the CPU and the frame is redone
    /// there.
    fn track_one(&mut self, seq: u64, t_centre: f64, gcc: &GccFrame) -> Result<Vec<TrackReport>> {
        match self.tracker.step(seq, t_centre, gcc, &self.pair_ok) {
            Ok(r) => Ok(r),
            Err(e) if self.tracker.backend() == "cpu" => Err(e.into()),
            Err(e) => {
                self.switch_to_cpu(None, &e)?;
                Ok(self.tracker.step(seq, t_centre, gcc, &self.pair_ok)?)
            }
        }
    }

    pub fn backend(&self) -> &'static str {
        self.tracker.backend()
    }

    /// Take each frame's heading from `feed` (a turning array: `array.heading_input`).
    pub fn set_heading_feed(&mut self, feed: crate::audio::heading::HeadingFeed) {
        self.heading = Some(feed);
    }

    pub fn tracker(&self) -> &TrackManager {
        &self.tracker
    }

    /// What the frame assembler of a live source should make frames with (see
    /// [`Correlator::frame_allocator`]): memory the GPU reads directly, or None.
    pub fn frame_allocator(&self) -> Option<crate::audio::frame::FrameAlloc> {
        self.correlator.as_ref()?.frame_allocator()
    }

    /// Replace the correlator or filter by test doubles (fault injection).
    pub fn with_backends(
        mut self,
        correlator: Box<dyn Correlator>,
        filter: Box<dyn FilterBank>,
    ) -> Self {
        self.correlator = Some(correlator);
        self.tracker = tracker_of(&self.cfg, filter);
        self
    }

    /// After a backend error: the tracker (its tracks restart from their last estimates) and
    /// the correlator `cor`, when given, move to the CPU, logged and counted once. A correlator
    /// not given follows later ([`Self::correlator_to_cpu`]).
    fn switch_to_cpu(
        &mut self,
        cor: Option<&mut Box<dyn Correlator>>,
        err: &BackendError,
    ) -> Result<()> {
        log::error!(
            "{err}; processing moves to the CPU from frame {} on (the frame is redone there)",
            self.counters.frames_in
        );
        // The filter first: a live step of a GPU filter may be waiting on the correlator's
        // device memory, which must outlive it.
        if self.tracker.backend() != "cpu" {
            self.tracker.replace_bank(backend::cpu_filter(&self.cfg))?;
        }
        if let Some(c) = cor {
            self.correlator_to_cpu(c);
        }
        self.counters.backend_switches += 1;
        Ok(())
    }

    fn correlator_to_cpu(&self, cor: &mut Box<dyn Correlator>) {
        if cor.backend() != "cpu" {
            *cor = Box::new(CpuCorrelator::new(self.cfg.gcc_params()));
        }
    }

    /// Correlate `frames` into `out` with `cor`; a failing backend moves to the CPU and the
    /// frames are correlated again there.
    fn correlate_or_switch(
        &mut self,
        cor: &mut Box<dyn Correlator>,
        frames: &[Frame],
        out: &mut Vec<GccFrame>,
    ) -> Result<()> {
        let want = self.opts.want_curves;
        if let Err(e) = correlate(cor.as_mut(), frames, out, want) {
            if cor.backend() == "cpu" {
                return Err(e.into());
            }
            self.switch_to_cpu(Some(cor), &e)?;
            correlate(cor.as_mut(), frames, out, want)?;
        }
        Ok(())
    }

    /// Start correlating `frames` ahead of their checks when `cor` can (see
    /// [`Correlator::start`]); a failing backend moves to the CPU (which does not work ahead).
    fn start_or_switch(&mut self, cor: &mut Box<dyn Correlator>, frames: &[Frame]) -> Result<bool> {
        let refs: Vec<&Frame> = frames.iter().collect();
        match cor.start(&refs, self.opts.want_curves) {
            Ok(started) => Ok(started),
            Err(e) => {
                self.switch_to_cpu(Some(cor), &e)?;
                Ok(false)
            }
        }
    }

    /// Collect the correlation [`Self::start_or_switch`] started. Frames in which the checks
    /// found non-finite samples (now zeroed) are correlated again as they are now; a failing
    /// backend moves to the CPU and the frames are correlated there.
    fn finish_or_switch(
        &mut self,
        cor: &mut Box<dyn Correlator>,
        frames: &[Frame],
        out: &mut Vec<GccFrame>,
        health: &[FrameHealth],
    ) -> Result<()> {
        grow_outputs(cor.as_ref(), out, frames.len());
        let refs: Vec<&Frame> = frames.iter().collect();
        match cor.finish(&refs, &mut out[..frames.len()], self.opts.want_curves) {
            Ok(()) if health.iter().all(|h| h.nonfinite_samples == 0) => Ok(()),
            Ok(()) => self.correlate_or_switch(cor, frames, out),
            Err(e) => {
                // Now on the CPU, where correlate_or_switch correlates them.
                self.switch_to_cpu(Some(cor), &e)?;
                self.correlate_or_switch(cor, frames, out)
            }
        }
    }

    /// Process one frame: returns the track reports it produced.
    pub fn process(&mut self, frame: &mut Frame) -> Result<&[TrackReport]> {
        self.process_batch(std::slice::from_mut(frame), &mut |_| {})?;
        Ok(&self.reports)
    }

    /// Process frames in order, correlating them in one call (a GPU transforms the whole batch
    /// at once); `observe` sees each frame after it is tracked.
    pub fn process_batch(
        &mut self,
        frames: &mut [Frame],
        observe: &mut dyn FnMut(&FrameView),
    ) -> Result<()> {
        let b = frames.len();
        if b == 0 {
            return Ok(());
        }
        let start = Instant::now();
        let mut health = std::mem::take(&mut self.health_batch);
        let mut gcc = std::mem::take(&mut self.gcc);
        // A correlator that works ahead (the GPU) gets the frames before they are checked, so
        // that the checks run on the host while it correlates.
        let mut cor = self.correlator.take();
        let started = match cor.as_mut() {
            Some(c) => self.start_or_switch(c, frames),
            None => Ok(false),
        };
        let check_start = Instant::now();
        check_frames(frames, &mut health);
        let checks = check_start.elapsed();
        // One frame on its way through a GPU (live) and clean (a frame whose checks zeroed
        // non-finite samples is correlated again): the filter's step goes out now too, to
        // predict while the frame is correlated and, where the correlator's device writes the
        // peaks, to build the measurement from them there. A failure moves the filter to the
        // CPU once the frame is correlated (unless the correlation's own failure has taken both
        // there by then).
        let mut prepare_time = Duration::ZERO;
        let mut prepare_err = None;
        if b == 1
            && matches!(started, Ok(true))
            && self.tracker.backend() != "cpu"
            && health[0].nonfinite_samples == 0
        {
            let t = Instant::now();
            let f = &frames[0];
            let peaks = cor.as_ref().and_then(|c| c.device_peaks());
            self.fill_pair_ok(&health[0]);
            prepare_err = self
                .tracker
                .prepare(f.seq, f.centre_time_s(), peaks, &self.pair_ok)
                .err();
            prepare_time = t.elapsed();
        }
        let correlated = started.and_then(|started| match cor.as_mut() {
            Some(c) if started => self.finish_or_switch(c, frames, &mut gcc, &health[..b]),
            Some(c) => self.correlate_or_switch(c, frames, &mut gcc),
            None => Err(BackendError::new("pipeline", "the correlator is in use").into()),
        });
        self.correlator = cor;
        let correlated = correlated.and_then(|()| match prepare_err {
            Some(e) if self.tracker.backend() != "cpu" => self.switch_to_cpu(None, &e),
            _ => Ok(()),
        });
        let tracked = correlated.and_then(|()| {
            let prep = start.elapsed().saturating_sub(prepare_time);
            self.counters.check_total += checks;
            self.counters.gcc_total += prep.saturating_sub(checks);
            self.counters.prep_exposed += prep;
            // (The filter's work launched early, if any, is the frame's too.)
            let share = prep / b as u32 + prepare_time;
            self.track_frames(frames, &gcc[..b], &health[..b], share, observe)
                .map(|_| ())
        });
        self.gcc = gcc;
        self.health_batch = health;
        tracked
    }

    /// Work to do between frames, after a frame's reports are out and before the next frame
    /// comes: a GPU filter launches the resampling its last step left (so that a live frame's
    /// estimate did not wait for that launch). Never fails: a failed launch is reported with the
    /// next frame, which is then redone on the CPU as any failed step is.
    pub fn between_frames(&mut self) {
        self.tracker.between_frames();
    }

    /// Which pairs have both channels usable in a frame of health `h` (into `pair_ok`).
    fn fill_pair_ok(&mut self, h: &FrameHealth) {
        self.pair_ok.clear();
        self.pair_ok.extend(
            self.pairs
                .iter()
                .map(|&(a, bb)| h.channel_ok(a) && h.channel_ok(bb)),
        );
    }

    /// Track checked, correlated frames in order, sending their messages and showing them to
    /// `observe`. `share` is each frame's part of the work done for the batch before (checks,
    /// correlation). A failing filter moves to the CPU and the frame is redone there; the
    /// correlator is left to the caller (see [`Self::switch_to_cpu`]). Returns the time the
    /// frames took here (their processing time, which status messages and `proc_total` count)
    /// and the time spent outside it (in `observe` and emitting status messages).
    fn track_frames(
        &mut self,
        frames: &[Frame],
        gcc: &[GccFrame],
        health: &[FrameHealth],
        share: Duration,
        observe: &mut dyn FnMut(&FrameView),
    ) -> Result<(Duration, Duration)> {
        let mut total = Duration::ZERO;
        let mut outside = Duration::ZERO;
        for ((frame, gcc), health) in frames.iter().zip(gcc).zip(health) {
            let start = Instant::now();
            self.counters.frames_in += 1;
            self.counters.nonfinite_samples += health.nonfinite_samples;
            for (c, n) in self.counters.bad_channel_frames.iter_mut().enumerate() {
                if !health.channel_ok(c) {
                    *n += 1;
                }
            }
            self.fill_pair_ok(health);
            if !self.pair_ok.iter().any(|&o| o) {
                self.counters.frames_without_pairs += 1;
            }
            let t_centre = frame.centre_time_s();
            self.watch_crosstalk(gcc, t_centre);
            if let Some(feed) = &self.heading {
                self.tracker.set_heading(feed.at(t_centre));
            }
            let reports = self.track_one(frame.seq, t_centre, gcc)?;
            self.counters.frames_processed += 1;
            let wall = if self.opts.live {
                let now = frame.wall_clock.unwrap_or_else(SystemTime::now);
                Some(shift_clock(now, self.cfg.audio.clock_offset_s))
            } else {
                None
            };
            // (Under multi-frame assignment the reports are an older frame's, and none come
            // while its window fills.)
            let shown = if self.tracker.latency_frames() > 0 {
                self.tracker.committed()
            } else {
                Some((frame.seq, t_centre))
            };
            self.smoothed.clear();
            self.reports = reports;
            if let Some((seq, t)) = shown {
                self.publish(seq, t, health, wall);
            }
            let here = start.elapsed();
            total += here;
            let took = here + share;
            self.counters.proc_total += took;
            self.counters.proc_max = self.counters.proc_max.max(took);
            self.proc_time.record(took);
            self.window.0 += took;
            self.window.1 = self.window.1.max(took);
            self.window.2 += 1;
            let after = Instant::now();
            let now_s = if self.opts.live {
                self.started.elapsed().as_secs_f64()
            } else {
                t_centre
            };
            if now_s >= self.next_status_s {
                self.emit_status(t_centre);
                self.next_status_s = now_s + self.cfg.output.status_interval_s;
            }
            if let Some((seq, t)) = shown {
                observe(&FrameView {
                    seq,
                    t_centre_s: t,
                    reports: &self.reports,
                    smoothed: &self.smoothed,
                    gcc,
                    health,
                });
            }
            outside += after.elapsed();
        }
        Ok((total, outside))
    }

    /// A frame's reports (in `self.reports`) to the smoothers and the sinks.
    fn publish(&mut self, seq: u64, t: f64, health: &FrameHealth, wall: Option<SystemTime>) {
        let reports = std::mem::take(&mut self.reports);
        let ended = self.tracker.ended();
        for sm in &mut self.smoothers {
            self.smoothed.extend(sm.push(&reports, ended));
        }
        if !self.sinks.runners.is_empty() {
            self.send_frame(seq, t, &reports, health, wall);
        }
        self.reports = reports;
    }

    /// The end of the stream under multi-frame assignment: the frames its window still holds
    /// are committed (each with the frames after it that there are), published and shown. A
    /// failing filter moves to the CPU and the frame is redone there.
    fn drain_tracker(&mut self, observe: &mut dyn FnMut(&FrameView)) -> Result<()> {
        let health = FrameHealth::default();
        let gcc = GccFrame {
            seq: 0,
            peaks: Vec::new(),
            curves: Vec::new(),
        };
        while let Some(res) = self.tracker.drain_one() {
            let reports = match res {
                Ok(r) => r,
                Err(e) if self.tracker.backend() != "cpu" => {
                    self.switch_to_cpu(None, &e)?;
                    continue;
                }
                Err(e) => return Err(e.into()),
            };
            let Some((seq, t)) = self.tracker.committed() else {
                continue;
            };
            self.smoothed.clear();
            self.reports = reports;
            self.publish(seq, t, &health, None);
            observe(&FrameView {
                seq,
                t_centre_s: t,
                reports: &self.reports,
                smoothed: &self.smoothed,
                gcc: &gcc,
                health: &health,
            });
        }
        if let Some((solved, changed, fallbacks)) = self.tracker.window_counts() {
            log::info!(
                "multi-frame assignment: {solved} pair assignments over the window, {changed} of them changed by the later frames; {fallbacks} decided frame by frame (no solution over the window)"
            );
        }
        Ok(())
    }
    /// Count a frame's zero-lag peaks; when that flags or frees a pair, tell the tracker and
    /// log which channels.
    fn watch_crosstalk(&mut self, gcc: &GccFrame, t_s: f64) {
        let k = self.cfg.gcc.peaks_per_pair;
        let Some(m) = self.crosstalk.as_mut() else {
            return;
        };
        if !m.observe(gcc, k, &self.pair_ok) {
            return;
        }
        self.tracker.set_zero_masked(m.flagged());
        for (p, (&was, &now)) in m.flagged_before().iter().zip(m.flagged()).enumerate() {
            let (a, b) = self.pairs[p];
            if now && !was {
                self.crosstalk_seen[p] = true;
                log::warn!(
                    "t = {t_s:.1} s: channels {a} and {b} share a peak fixed at lag zero in {:.0} % of the last {} s (crosstalk, or a common ground or supply noise): their pair's peaks at lag zero are ignored until it goes; check the wiring and grounding of the device",
                    100.0 * m.share()[p],
                    self.cfg.gcc.crosstalk_window_s
                );
            } else if was && !now {
                log::info!("t = {t_s:.1} s: channels {a} and {b}: the zero-lag peak has gone");
            }
        }
    }

    /// Each pair's channels, in the correlator's order.
    pub fn pair_channels(&self) -> &[(usize, usize)] {
        &self.pairs
    }

    /// The channel pairs flagged as crosstalk now.
    pub fn crosstalk_pairs(&self) -> Vec<[usize; 2]> {
        self.crosstalk.as_ref().map_or_else(Vec::new, |m| {
            self.pairs
                .iter()
                .zip(m.flagged())
                .filter(|(_, f)| **f)
                .map(|(&(a, b), _)| [a, b])
                .collect()
        })
    }

    /// Send one frame's messages: each track's report, then each track that ended.
    fn send_frame(
        &mut self,
        seq: u64,
        t_centre_s: f64,
        reports: &[TrackReport],
        health: &FrameHealth,
        wall: Option<SystemTime>,
    ) {
        let stamp = FrameStamp {
            wall,
            power: mean_power(health),
            reports: reports.len(),
            origin: self.cfg.array.origin.as_ref(),
        };
        for r in reports {
            let m = TrackMessage::new(r, &self.model_names, &stamp);
            let mut msg = Message::track(&m, self.sinks.nmea.as_mut());
            msg.ready = self.frame_ready;
            self.sinks.send(msg);
        }
        for e in self.tracker.ended() {
            let m = DeletedMessage::new(e, seq, t_centre_s, wall);
            let msg = Message::deleted(&m, self.sinks.nmea.as_mut());
            self.sinks.send(msg);
        }
        let stamp = FrameStamp {
            reports: 0,
            ..stamp
        };
        send_smoothed(&mut self.sinks, &self.smoothed, &self.model_names, &stamp);
    }

    /// End of the stream: the smoothed reports of the tracks still alive, sent and returned.
    pub fn finish_smoothing(&mut self) -> Vec<TrackReport> {
        self.smoothed.clear();
        for sm in &mut self.smoothers {
            self.smoothed.extend(sm.finish());
            if sm.failures > 0 {
                log::warn!(
                    "smoothing: {} backward passes failed (a prediction not positive definite); their tracks' filtered states were given instead",
                    sm.failures
                );
            }
        }
        let stamp = FrameStamp {
            wall: None,
            power: None,
            reports: 0,
            origin: self.cfg.array.origin.as_ref(),
        };
        send_smoothed(&mut self.sinks, &self.smoothed, &self.model_names, &stamp);
        std::mem::take(&mut self.smoothed)
    }

    pub fn status(&self, t_s: f64) -> StatusMessage {
        let (sum, max, n) = self.window;
        let timing = !self.opts.reproducible && n > 0;
        StatusMessage {
            kind: "status",
            schema: SCHEMA_VERSION,
            t: (t_s * 1e5).round() / 1e5,
            wall: self.opts.live.then(|| {
                crate::output::rfc3339(shift_clock(
                    SystemTime::now(),
                    self.cfg.audio.clock_offset_s,
                ))
            }),
            backend: self.backend().to_string(),
            frames_in: self.counters.frames_in,
            frames_processed: self.counters.frames_processed,
            frames_dropped: self.counters.frames_dropped(),
            dropped: self.counters.dropped.clone(),
            nonfinite_samples: self.counters.nonfinite_samples,
            bad_channel_frames: self.counters.bad_channel_frames.clone(),
            backend_switches: self.counters.backend_switches,
            tracks: self.tracker.active_tracks(),
            confirmed_tracks: self.tracker.confirmed_tracks(),
            curves_tracks: self.tracker.curves_tracks(),
            no_track: self.tracker.no_track_now,
            no_track_frames: self.tracker.counts.no_track.clone(),
            tdoa_noise_samples: (f64::from(self.tracker.sigma_s())
                * self.cfg.sample_rate_hz()
                * 1e3)
                .round()
                / 1e3,
            proc_us_mean: timing
                .then(|| (sum.as_secs_f64() / n as f64 * 1e6 * 10.0).round() / 10.0),
            proc_us_max: timing.then(|| (max.as_secs_f64() * 1e6 * 10.0).round() / 10.0),
            sink_drops: self.sinks.drops(),
            heading_missing_frames: self
                .heading
                .as_ref()
                .map(|_| self.tracker.counts.heading_missing_frames),
            crosstalk_pairs: self.crosstalk_pairs(),
        }
    }

    pub fn emit_status(&mut self, t_s: f64) {
        let s = self.status(t_s);
        let msg = Message::status(&s, self.sinks.nmea.as_mut());
        self.sinks.send(msg);
        self.window = (Duration::ZERO, Duration::ZERO, 0);
    }

    /// Replay a source to its end through `assembler`. `observe` sees every processed frame;
    /// `progress` gets (sample frames read so far) now and then. With `pace`, frames are paced
    /// to the audio clock times that factor (1.0 = real time).
    ///
    /// Unpaced replays with a backend that correlates batches (the GPU) check and correlate
    /// the next batch on a second thread while the tracker works through the current one.
    pub fn run(
        &mut self,
        source: &mut dyn AudioSource,
        assembler: &mut FrameAssembler,
        pace: Option<f64>,
        observe: &mut dyn FnMut(&FrameView),
        progress: &mut dyn FnMut(u64),
    ) -> Result<()> {
        // Replays correlate several frames per call when the backend gains from it (the GPU);
        // paced replays and live capture go frame by frame.
        let batch = if pace.is_some() || self.opts.live {
            1
        } else {
            self.correlator.as_ref().map_or(1, |c| c.preferred_batch())
        };
        let mut ahead = if batch > 1 {
            self.correlator.take().map(|cor| Ahead {
                cor,
                ready: None,
                spare: Batch::default(),
                pool: prep_pool(),
            })
        } else {
            None
        };
        let res = self.read_all(
            source,
            assembler,
            pace,
            batch,
            ahead.as_mut(),
            observe,
            progress,
        );
        // The correlator goes back whatever happened.
        if let Some(a) = ahead {
            self.correlator = Some(a.cor);
        }
        res
    }

    #[allow(clippy::too_many_arguments)]
    fn read_all(
        &mut self,
        source: &mut dyn AudioSource,
        assembler: &mut FrameAssembler,
        pace: Option<f64>,
        batch: usize,
        mut ahead: Option<&mut Ahead>,
        observe: &mut dyn FnMut(&FrameView),
        progress: &mut dyn FnMut(u64),
    ) -> Result<()> {
        let ch = source.channels();
        let mut buf = vec![0.0f32; ch * 4096];
        let mut read_total = 0u64;
        let start = Instant::now();
        let fs = f64::from(source.sample_rate_hz());
        let mut last_t = 0.0;
        let mut pending: Vec<Frame> = Vec::with_capacity(batch);
        // An overlapped replay starts with small batches that double up to `batch`: the first
        // batch's preparation has nothing to hide behind, and the first frames (no track yet)
        // are quick to track.
        let mut target = if ahead.is_some() {
            batch.min(FIRST_BATCH)
        } else {
            batch
        };
        let mut flush = |me: &mut Self,
                         pending: &mut Vec<Frame>,
                         ahead: Option<&mut Ahead>,
                         assembler: &mut FrameAssembler,
                         last: bool|
         -> Result<()> {
            match ahead {
                Some(a) => {
                    if !pending.is_empty() {
                        let frames = std::mem::take(pending);
                        me.advance(a, Some(frames), assembler, &mut last_t, observe)?;
                    }
                    if last {
                        me.advance(a, None, assembler, &mut last_t, observe)?;
                    }
                    Ok(())
                }
                None => me.run_pending(pending, assembler, pace, start, fs, &mut last_t, observe),
            }
        };
        loop {
            match source.read(&mut buf)? {
                ReadResult::Samples(n) => {
                    read_total += n as u64;
                    assembler.push(&buf[..n * ch]);
                }
                ReadResult::Gap(lost) => {
                    let frames = assembler.gap(lost);
                    self.counters.drop_frames("capture_gap", frames);
                    continue;
                }
                ReadResult::Idle => {
                    std::thread::sleep(Duration::from_millis(1));
                    continue;
                }
                ReadResult::End => break,
            }
            while let Some(frame) = assembler.pop() {
                pending.push(frame);
                if pending.len() >= target {
                    flush(self, &mut pending, ahead.as_deref_mut(), assembler, false)?;
                    target = (target * 2).min(batch);
                }
            }
            progress(read_total);
        }
        flush(self, &mut pending, ahead, assembler, true)?;
        self.drain_tracker(observe)?;
        self.emit_status(last_t);
        Ok(())
    }

    /// One turn of an overlapped replay: track the batch that is ready while a second thread
    /// checks and correlates `next`, which is then ready. The first batch is prepared here, with
    /// nothing to overlap; `None` tracks the last one.
    fn advance(
        &mut self,
        a: &mut Ahead,
        next: Option<Vec<Frame>>,
        assembler: &mut FrameAssembler,
        last_t: &mut f64,
        observe: &mut dyn FnMut(&FrameView),
    ) -> Result<()> {
        let start = Instant::now();
        self.counters.overlapped = true;
        let mut next = next.map(|frames| {
            let mut b = std::mem::take(&mut a.spare);
            b.frames = frames;
            b
        });
        let want = self.opts.want_curves;
        let Some(mut cur) = a.ready.take() else {
            if let Some(mut b) = next {
                let prepared = b.prepare(a.cor.as_mut(), want);
                self.take_prepared(a, &mut b, prepared)?;
                let took = start.elapsed();
                self.counters.prep_exposed += took;
                self.counters.proc_total += took;
                a.ready = Some(b);
            }
            return Ok(());
        };
        let cor = &mut a.cor;
        let pool = a.pool.as_ref();
        let (tracked, prepared) = std::thread::scope(|s| {
            let worker = next.as_mut().map(|b| {
                s.spawn(move || match pool {
                    Some(p) => p.install(|| b.prepare(cor.as_mut(), want)),
                    None => b.prepare(cor.as_mut(), want),
                })
            });
            let tracked =
                self.track_frames(&cur.frames, &cur.gcc, &cur.health, Duration::ZERO, observe);
            let prepared =
                worker.map(|w| w.join().unwrap_or_else(|p| std::panic::resume_unwind(p)));
            (tracked, prepared)
        });
        let (tracking, outside) = tracked?;
        if let Some(f) = cur.frames.last() {
            *last_t = f.centre_time_s();
        }
        if let (Some(b), Some(p)) = (next.as_mut(), prepared) {
            self.take_prepared(a, b, p)?;
        }
        // A filter that failed in this batch took the tracker to the CPU; the correlator
        // follows from the next batch on.
        if self.tracker.backend() == "cpu" {
            self.correlator_to_cpu(&mut a.cor);
        }
        let exposed = start.elapsed().saturating_sub(tracking + outside);
        log::debug!(
            "overlapped batch: {} frames tracked in {:.0} us ({:.0} us outside the tracking), the next {} prepared, {:.0} us not hidden",
            cur.frames.len(),
            tracking.as_secs_f64() * 1e6,
            outside.as_secs_f64() * 1e6,
            next.as_ref().map_or(0, |b| b.frames.len()),
            exposed.as_secs_f64() * 1e6
        );
        self.counters.prep_exposed += exposed;
        self.counters.proc_total += exposed;
        self.window.0 += exposed;
        for f in cur.frames.drain(..) {
            assembler.recycle(f);
        }
        a.spare = cur;
        a.ready = next;
        Ok(())
    }

    /// Count a batch's preparation, and after a failed correlation move to the CPU and
    /// correlate the batch again there.
    fn take_prepared(&mut self, a: &mut Ahead, b: &mut Batch, p: Prepared) -> Result<()> {
        self.counters.check_total += p.checks;
        self.counters.gcc_total += p.correlation;
        if let Err(e) = p.result {
            if a.cor.backend() == "cpu" {
                return Err(e.into());
            }
            self.switch_to_cpu(Some(&mut a.cor), &e)?;
            correlate(a.cor.as_mut(), &b.frames, &mut b.gcc, self.opts.want_curves)?;
        }
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn run_pending(
        &mut self,
        pending: &mut Vec<Frame>,
        assembler: &mut FrameAssembler,
        pace: Option<f64>,
        start: Instant,
        fs: f64,
        last_t: &mut f64,
        observe: &mut dyn FnMut(&FrameView),
    ) -> Result<()> {
        if pending.is_empty() {
            return Ok(());
        }
        if let Some(speed) = pace {
            if let Some(f) = pending.last() {
                let due = Duration::from_secs_f64(
                    (f.start_sample + f.len as u64) as f64 / fs / speed.max(1e-6),
                );
                if let Some(wait) = due.checked_sub(start.elapsed()) {
                    std::thread::sleep(wait);
                }
            }
        }
        self.process_batch(pending, observe)?;
        if let Some(f) = pending.last() {
            *last_t = f.centre_time_s();
        }
        for f in pending.drain(..) {
            assembler.recycle(f);
        }
        Ok(())
    }
}

/// The first batch of an overlapped replay (see [`Pipeline::run`]).
pub const FIRST_BATCH: usize = 8;

/// Send the smoothed reports that are ready (`frame_reports` 0: they belong to earlier frames,
/// whose `seq` they carry).
fn send_smoothed(
    sinks: &mut SinkSet,
    smoothed: &[TrackReport],
    model_names: &[String],
    stamp: &FrameStamp,
) {
    for r in smoothed {
        let m = TrackMessage::new(r, model_names, stamp);
        sinks.send(Message::track(&m, None));
    }
}

/// The batch sizes an overlapped replay of batches up to `batch` uses: [`FIRST_BATCH`],
/// doubling up to `batch`, and `batch` itself.
pub fn overlap_batches(batch: usize) -> Vec<usize> {
    let mut sizes = Vec::new();
    let mut b = FIRST_BATCH;
    while b < batch {
        sizes.push(b);
        b *= 2;
    }
    sizes.push(batch);
    sizes
}

/// Zero non-finite samples and find unusable channels in every frame (on the rayon pool for a
/// batch: a 5-channel frame of 4096 samples takes 15-30 us on one core; replays check 64 at a
/// time).
fn check_frames(frames: &mut [Frame], health: &mut Vec<FrameHealth>) {
    health.resize(frames.len(), FrameHealth::default());
    if frames.len() > 1 {
        use rayon::prelude::*;
        frames
            .par_iter_mut()
            .zip(health.par_iter_mut())
            .for_each(|(frame, health)| inspect(frame, health));
    } else if let (Some(f), Some(h)) = (frames.first_mut(), health.first_mut()) {
        inspect(f, h);
    }
}

/// Correlate `frames` into the first `frames.len()` results of `out` (grown as needed).
fn correlate(
    cor: &mut dyn Correlator,
    frames: &[Frame],
    out: &mut Vec<GccFrame>,
    want_curves: bool,
) -> std::result::Result<(), BackendError> {
    grow_outputs(cor, out, frames.len());
    let refs: Vec<&Frame> = frames.iter().collect();
    cor.correlate(&refs, &mut out[..frames.len()], want_curves)
}

/// At least `n` results in `out`, for `cor`'s parameters.
fn grow_outputs(cor: &dyn Correlator, out: &mut Vec<GccFrame>, n: usize) {
    while out.len() < n {
        out.push(GccFrame::new(cor.params()));
    }
}

/// A batch of frames on its way through an overlapped replay: checked and correlated on one
/// thread, then tracked on the other.
#[derive(Default)]
struct Batch {
    frames: Vec<Frame>,
    gcc: Vec<GccFrame>,
    health: Vec<FrameHealth>,
}

impl Batch {
    /// Check and correlate the frames (on whichever thread calls it).
    fn prepare(&mut self, cor: &mut dyn Correlator, want_curves: bool) -> Prepared {
        let start = Instant::now();
        check_frames(&mut self.frames, &mut self.health);
        let checks = start.elapsed();
        let result = correlate(cor, &self.frames, &mut self.gcc, want_curves);
        Prepared {
            result,
            checks,
            correlation: start.elapsed().saturating_sub(checks),
        }
    }
}

/// How a batch's preparation went, and what its two parts took.
struct Prepared {
    result: std::result::Result<(), BackendError>,
    checks: Duration,
    correlation: Duration,
}

/// An overlapped replay's state: the correlator (lent by the pipeline for the replay), the
/// batch ready for the tracker, and a spare batch's buffers.
struct Ahead {
    cor: Box<dyn Correlator>,
    ready: Option<Batch>,
    spare: Batch,
    /// Threads for the second thread's parallel parts (the checks, the GPU correlator's staging
    /// copy), fewer than the cores, so that they do not crowd out the tracker's thread.
    pool: Option<rayon::ThreadPool>,
}

/// The pool an overlapped replay prepares batches on: a quarter of the cores, one to four
/// threads (None, and the global pool, if it cannot be made).
fn prep_pool() -> Option<rayon::ThreadPool> {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let default = (cores / 4).clamp(1, 4);
    let n = match std::env::var("SONOTRACK_PREP_THREADS") {
        Ok(v) => v.trim().parse().unwrap_or_else(|_| {
            log::warn!("SONOTRACK_PREP_THREADS={v:?} is not a number of threads; using {default}");
            default
        }),
        Err(_) => default,
    };
    if n == 0 {
        return None;
    }
    rayon::ThreadPoolBuilder::new()
        .num_threads(n)
        .thread_name(|i| format!("sonotrack-prep-{i}"))
        .build()
        .map_err(|e| {
            log::warn!("no thread pool for the replay's preparation ({e}); using the global one")
        })
        .ok()
}

/// Mean power of a frame's usable channels (None when none is usable).
fn mean_power(h: &FrameHealth) -> Option<f64> {
    let (sum, n) = h
        .rms
        .iter()
        .enumerate()
        .filter(|(c, _)| h.channel_ok(*c))
        .fold((0.0f64, 0u32), |(s, n), (_, r)| {
            (s + f64::from(*r).powi(2), n + 1)
        });
    (n > 0).then(|| sum / f64::from(n))
}

/// `t` moved by `offset_s` seconds (either way; unchanged where the result is not representable).
fn shift_clock(t: SystemTime, offset_s: f64) -> SystemTime {
    let d = Duration::from_secs_f64(offset_s.abs());
    let moved = if offset_s >= 0.0 {
        t.checked_add(d)
    } else {
        t.checked_sub(d)
    };
    moved.unwrap_or(t)
}
