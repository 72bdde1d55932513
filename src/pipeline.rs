//! The pipeline: frame → channel health → GCC-PHAT → tracker → messages, with the counters the
//! status stream reports. Every frame that enters is processed or counted as dropped.
//!
//! A backend error moves processing to the CPU from that frame on; the failed frame is redone on
//! the CPU (the tracks restart from their last estimates), so no frame is lost. The switch is
//! logged and counted.

use std::collections::BTreeMap;
use std::time::{Duration, Instant, SystemTime};

use crate::audio::assembler::FrameAssembler;
use crate::audio::{AudioSource, ReadResult};
use crate::backend::Backends;
use crate::config::Config;
use crate::dsp::gcc::{Correlator, CpuCorrelator, GccFrame, GccParams};
use crate::dsp::health::{FrameHealth, inspect};
use crate::error::{BackendError, Result};
use crate::frame::Frame;
use crate::output::{Message, SCHEMA_VERSION, SinkSet, StatusMessage, TrackMessage};
use crate::track::manager::{TrackManager, TrackReport};
use crate::track::pf::CpuParticleFilter;
use crate::track::{FilterParams, ParticleFilter};

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
}

pub struct Pipeline {
    cfg: Config,
    opts: PipelineOptions,
    correlator: Box<dyn Correlator>,
    tracker: TrackManager,
    pub sinks: SinkSet,
    pub counters: Counters,
    model_names: Vec<String>,
    health: FrameHealth,
    gcc: Vec<GccFrame>,
    pair_ok_batch: Vec<Vec<bool>>,
    health_batch: Vec<FrameHealth>,
    pairs: Vec<(usize, usize)>,
    next_status_s: f64,
    window: (Duration, Duration, u64),
    started: Instant,
    reports: Vec<TrackReport>,
    /// Live: when the frame being processed was complete (carried into its messages).
    pub frame_ready: Option<Instant>,
    /// Processing time per frame (its share of the correlation, the tracker step, the hand-off
    /// to the outputs), so a daemon can tell processing time from scheduling delay.
    pub proc_time: crate::output::LatencyHistogram,
}

impl Pipeline {
    pub fn new(cfg: &Config, backends: Backends, sinks: SinkSet, opts: PipelineOptions) -> Self {
        let params = backends.correlator.params().clone();
        let pairs = params.pairs.iter().map(|p| (p.a, p.b)).collect::<Vec<_>>();
        let tracker = TrackManager::new(cfg, backends.filter);
        let n_ch = cfg.array.sensors_m.len();
        Self {
            model_names: cfg.tracker.models.iter().map(|m| m.name.clone()).collect(),
            gcc: vec![GccFrame::new(&params)],
            pair_ok_batch: Vec::new(),
            health_batch: Vec::new(),
            counters: Counters {
                bad_channel_frames: vec![0; n_ch],
                ..Counters::default()
            },
            health: FrameHealth::default(),
            next_status_s: 0.0,
            window: (Duration::ZERO, Duration::ZERO, 0),
            started: Instant::now(),
            reports: Vec::new(),
            frame_ready: None,
            proc_time: crate::output::LatencyHistogram::default(),
            cfg: cfg.clone(),
            opts,
            correlator: backends.correlator,
            tracker,
            sinks,
            pairs,
        }
    }

    pub fn backend(&self) -> &'static str {
        self.tracker.backend()
    }

    pub fn tracker(&self) -> &TrackManager {
        &self.tracker
    }

    /// Replace the correlator or filter by test doubles (fault injection).
    pub fn with_backends(
        mut self,
        correlator: Box<dyn Correlator>,
        filter: Box<dyn ParticleFilter>,
    ) -> Self {
        self.correlator = correlator;
        self.tracker = TrackManager::new(&self.cfg, filter);
        self
    }

    fn switch_to_cpu(&mut self, err: &BackendError) -> Result<()> {
        log::error!(
            "{err}; processing moves to the CPU from frame {} on (the frame is redone there)",
            self.counters.frames_in
        );
        if self.correlator.backend() != "cpu" {
            self.correlator = Box::new(CpuCorrelator::new(GccParams::from_config(&self.cfg)));
        }
        if self.tracker.backend() != "cpu" {
            self.tracker.replace_bank(Box::new(CpuParticleFilter::new(
                FilterParams::from_config(&self.cfg),
            )))?;
        }
        self.counters.backend_switches += 1;
        Ok(())
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
        while self.gcc.len() < b {
            self.gcc.push(GccFrame::new(self.correlator.params()));
        }
        self.pair_ok_batch.resize(b, Vec::new());
        self.health_batch.resize(b, FrameHealth::default());
        // The checks of a batch's frames run on the rayon pool (a 5-channel frame of 4096
        // samples takes 15-30 us on one core; replays check 64 at a time).
        if b > 1 {
            use rayon::prelude::*;
            frames
                .par_iter_mut()
                .zip(self.health_batch.par_iter_mut())
                .for_each(|(frame, health)| inspect(frame, health));
        } else {
            inspect(&mut frames[0], &mut self.health_batch[0]);
        }
        for i in 0..b {
            self.counters.frames_in += 1;
            let health = &self.health_batch[i];
            self.counters.nonfinite_samples += health.nonfinite_samples;
            for (c, n) in self.counters.bad_channel_frames.iter_mut().enumerate() {
                if !health.channel_ok(c) {
                    *n += 1;
                }
            }
            let ok = &mut self.pair_ok_batch[i];
            ok.clear();
            ok.extend(
                self.pairs
                    .iter()
                    .map(|&(a, bb)| health.channel_ok(a) && health.channel_ok(bb)),
            );
            if !ok.iter().any(|&o| o) {
                self.counters.frames_without_pairs += 1;
            }
        }
        let checks = start.elapsed();
        self.counters.check_total += checks;
        let want = self.opts.want_curves;
        let refs: Vec<&Frame> = frames.iter().collect();
        if let Err(e) = self.correlator.correlate(&refs, &mut self.gcc[..b], want) {
            if self.correlator.backend() == "cpu" {
                return Err(e.into());
            }
            self.switch_to_cpu(&e)?;
            self.correlator.correlate(&refs, &mut self.gcc[..b], want)?;
        }
        let gcc_all = start.elapsed();
        self.counters.gcc_total += gcc_all.saturating_sub(checks);
        let gcc_time = gcc_all / b as u32;
        for (i, frame) in frames.iter().enumerate() {
            let start = Instant::now();
            let t_centre = frame.centre_time_s();
            let reports =
                match self
                    .tracker
                    .step(frame.seq, t_centre, &self.gcc[i], &self.pair_ok_batch[i])
                {
                    Ok(r) => r,
                    Err(e) => {
                        if self.tracker.backend() == "cpu" {
                            return Err(e.into());
                        }
                        self.switch_to_cpu(&e)?;
                        self.tracker.step(
                            frame.seq,
                            t_centre,
                            &self.gcc[i],
                            &self.pair_ok_batch[i],
                        )?
                    }
                };
            self.counters.frames_processed += 1;
            let wall = if self.opts.live {
                frame.wall_clock.or_else(|| Some(SystemTime::now()))
            } else {
                None
            };
            if !self.sinks.runners.is_empty() {
                for r in &reports {
                    let m = TrackMessage::new(r, &self.model_names, wall);
                    let mut msg = Message::track(&m, self.sinks.want_nmea);
                    msg.ready = self.frame_ready;
                    self.sinks.send(msg);
                }
            }
            self.reports = reports;
            let took = start.elapsed() + gcc_time;
            self.counters.proc_total += took;
            self.counters.proc_max = self.counters.proc_max.max(took);
            self.proc_time.record(took);
            self.window.0 += took;
            self.window.1 = self.window.1.max(took);
            self.window.2 += 1;
            let now_s = if self.opts.live {
                self.started.elapsed().as_secs_f64()
            } else {
                t_centre
            };
            if now_s >= self.next_status_s {
                self.emit_status(t_centre);
                self.next_status_s = now_s + self.cfg.output.status_interval_s;
            }
            self.health = self.health_batch[i].clone();
            observe(&FrameView {
                seq: frame.seq,
                t_centre_s: t_centre,
                reports: &self.reports,
                gcc: &self.gcc[i],
                health: &self.health_batch[i],
            });
        }
        if b > 0 {
            self.gcc.swap(0, b - 1);
        }
        Ok(())
    }

    /// The GCC result of the last processed frame.
    pub fn last_gcc(&self) -> &GccFrame {
        &self.gcc[0]
    }

    pub fn last_health(&self) -> &FrameHealth {
        &self.health
    }

    pub fn status(&self, t_s: f64) -> StatusMessage {
        let (sum, max, n) = self.window;
        let timing = !self.opts.reproducible && n > 0;
        StatusMessage {
            kind: "status",
            schema: SCHEMA_VERSION,
            t: (t_s * 1e5).round() / 1e5,
            wall: self
                .opts
                .live
                .then(|| crate::output::rfc3339(SystemTime::now())),
            backend: self.backend().to_string(),
            frames_in: self.counters.frames_in,
            frames_processed: self.counters.frames_processed,
            frames_dropped: self.counters.frames_dropped(),
            dropped: self.counters.dropped.clone(),
            nonfinite_samples: self.counters.nonfinite_samples,
            bad_channel_frames: self.counters.bad_channel_frames.clone(),
            backend_switches: self.counters.backend_switches,
            tracks: self.tracker.active_tracks(),
            proc_us_mean: timing
                .then(|| (sum.as_secs_f64() / n as f64 * 1e6 * 10.0).round() / 10.0),
            proc_us_max: timing.then(|| (max.as_secs_f64() * 1e6 * 10.0).round() / 10.0),
            sink_drops: self.sinks.drops(),
        }
    }

    pub fn emit_status(&mut self, t_s: f64) {
        let s = self.status(t_s);
        self.sinks.send(Message::status(&s, self.sinks.want_nmea));
        self.window = (Duration::ZERO, Duration::ZERO, 0);
    }

    /// Replay a source to its end through `assembler`. `observe` sees every processed frame;
    /// `progress` gets (sample frames read so far) now and then. With `pace`, frames are paced
    /// to the audio clock times that factor (1.0 = real time).
    pub fn run(
        &mut self,
        source: &mut dyn AudioSource,
        assembler: &mut FrameAssembler,
        pace: Option<f64>,
        observe: &mut dyn FnMut(&FrameView),
        progress: &mut dyn FnMut(u64),
    ) -> Result<()> {
        let ch = source.channels();
        let mut buf = vec![0.0f32; ch * 4096];
        let mut read_total = 0u64;
        let start = Instant::now();
        let fs = f64::from(source.sample_rate_hz());
        let mut last_t = 0.0;
        // Replays correlate several frames per call when the backend gains from it (the GPU);
        // paced replays and live capture go frame by frame.
        let batch = if pace.is_some() || self.opts.live {
            1
        } else {
            self.correlator.preferred_batch()
        };
        let mut pending: Vec<Frame> = Vec::with_capacity(batch);
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
                if pending.len() >= batch {
                    self.run_pending(
                        &mut pending,
                        assembler,
                        pace,
                        start,
                        fs,
                        &mut last_t,
                        observe,
                    )?;
                }
            }
            progress(read_total);
        }
        self.run_pending(
            &mut pending,
            assembler,
            pace,
            start,
            fs,
            &mut last_t,
            observe,
        )?;
        self.emit_status(last_t);
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
