//! `sonotrack bench`: per-stage timings on synthetic input, for every backend that is available,
//! through the same traits the pipeline uses. CPU stages are timed with the wall clock; GPU
//! stages report device-event times (see `Correlator::last_device_time_s`). Medians are quoted.

use std::time::Instant;

use serde::Serialize;

use crate::config::{BackendChoice, Config, ModelKind, Weighting, Window};
use crate::dsp::gcc::{Correlator, CpuCorrelator, GccFrame, GccParams};
use crate::dsp::geometry::{ArrayGeometry, PairMode};
use crate::error::Result;
use crate::frame::Frame;
use crate::philox::{PhiloxStream, Stream};
use crate::track::pf::CpuParticleFilter;
use crate::track::{Estimate, FilterParams, ParticleFilter, TdoaMeasurement, TrackInit, TrackStep};

/// One measured cell.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub stage: String,
    pub backend: String,
    pub params: String,
    /// Median time per call, microseconds.
    pub median_us: f64,
    /// What that means per unit (µs per frame, ns per particle-step, ...).
    pub per_unit: f64,
    pub unit: String,
    /// Achieved device-memory bandwidth, GB/s (GPU rows).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gb_s: Option<f64>,
    /// Median wall-clock time per call as the host sees it (launch, wait and copy-out
    /// included), microseconds; for GPU rows, next to the device-event time.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wall_us: Option<f64>,
    pub reps: usize,
}

/// What to run.
#[derive(Debug, Clone)]
pub struct BenchOptions {
    pub backend: BackendChoice,
    pub gcc: bool,
    pub pf: bool,
    /// The live path (GCC-PHAT of one frame, then one step of a small filter), and its
    /// workload in a steady-state replay.
    pub live: bool,
    /// Smaller grids (CI, quick looks).
    pub quick: bool,
    /// Seconds to spend per cell (at least 3 repetitions).
    pub budget_s: f64,
    /// Also replay this scene directory end to end on each backend.
    pub replay: Option<std::path::PathBuf>,
    /// Particles for the end-to-end replay.
    pub replay_particles: usize,
    /// Restrict the grids to these values (empty: the whole grid).
    pub channels: Vec<usize>,
    pub frames: Vec<usize>,
    pub pf_particles: Vec<usize>,
    pub models: Vec<usize>,
    /// The live rows' sample rate (the workload is 48 kHz; the rows of the earlier
    /// sessions' BENCHMARKS.md sections ran at the `tetra` preset's 96 kHz).
    pub live_rate_hz: u32,
}

/// The grid's values, or the chosen subset.
fn pick(all: &[usize], chosen: &[usize]) -> Vec<usize> {
    if chosen.is_empty() {
        all.to_vec()
    } else {
        chosen.to_vec()
    }
}

/// The middle value of `v` once sorted (the upper one of an even count); None when empty.
fn median(v: &mut [f64]) -> Option<f64> {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied()
}

/// Median of repeated timings of `f` (seconds), after one warm-up call.
pub fn time_median(
    budget_s: f64,
    min_reps: usize,
    mut f: impl FnMut() -> Result<f64>,
) -> Result<(f64, usize)> {
    f()?;
    let start = Instant::now();
    let mut v = Vec::new();
    while v.len() < min_reps || (start.elapsed().as_secs_f64() < budget_s && v.len() < 2000) {
        v.push(f()?);
    }
    // Empty only with `min_reps` 0 and no budget: NaN then.
    Ok((median(&mut v).unwrap_or(f64::NAN), v.len()))
}

/// A compact array: `channels` sensors on a 0.5 m sphere, in air, at 48 kHz (every frame size
/// in the grid can hold its lags).
pub fn bench_geometry(channels: usize) -> ArrayGeometry {
    let golden = std::f64::consts::PI * (3.0 - 5f64.sqrt());
    let sensors = (0..channels)
        .map(|i| {
            let y = 1.0 - 2.0 * (i as f64 + 0.5) / channels as f64;
            let r = (1.0 - y * y).sqrt();
            let th = golden * i as f64;
            [0.5 * r * th.cos(), 0.5 * y, 0.5 * r * th.sin()]
        })
        .collect();
    ArrayGeometry::new(sensors, 343.0)
}

pub fn gcc_params(channels: usize, frame: usize) -> GccParams {
    let geo = bench_geometry(channels);
    let pairs = geo.pairs(PairMode::All, 0);
    GccParams::new(
        48_000.0,
        channels,
        frame,
        false,
        Window::Hann,
        [100.0, 20_000.0],
        Weighting::Phat,
        1.0,
        1e-3,
        4,
        3.0,
        true,
        &pairs,
    )
}

/// Frames of noise with each channel a delayed copy of one source.
pub fn noise_frames(channels: usize, frame: usize, count: usize, seed: u64) -> Vec<Frame> {
    let mut r = PhiloxStream::new(seed, 0, Stream::Simulate);
    (0..count)
        .map(|k| {
            let src: Vec<f32> = (0..frame + 64).map(|_| r.normal_f64() as f32).collect();
            let mut f = Frame::new(channels, frame, 48_000.0);
            f.seq = k as u64;
            for c in 0..channels {
                let d = (c * 7) % 50;
                for (i, v) in f.channel_mut(c).iter_mut().enumerate() {
                    *v = src[i + d] + 0.3 * r.normal_f64() as f32;
                }
            }
            f
        })
        .collect()
}

/// Filter parameters for `models` motion models (the defaults repeated) on a 5-hydrophone array.
pub fn pf_params(particles: usize, models: usize) -> FilterParams {
    let mut cfg = Config::for_array(
        vec![
            [0.0, 0.0, -6.0],
            [24.0, -3.0, -14.0],
            [6.0, 21.0, -9.0],
            [-14.0, 9.0, -20.0],
            [9.0, 6.0, -28.0],
        ],
        1500.0,
        48_000,
    );
    let base = crate::config::default_models();
    cfg.tracker.models = (0..models)
        .map(|i| {
            let mut m = base[i % base.len()].clone();
            m.name = format!("{}{}", m.name, i);
            if m.kind == ModelKind::Cv {
                m.accel_std_m_s2 *= 1.0 + i as f64 * 0.1;
            }
            m
        })
        .collect();
    cfg.tracker.particles = particles;
    FilterParams::from_config(&cfg)
}

pub fn pf_init() -> TrackInit {
    let mut chol = [[0.0; 6]; 6];
    for (i, row) in chol.iter_mut().enumerate() {
        row[i] = if i < 3 { 0.05 } else { 0.1 };
    }
    TrackInit {
        slot: 0,
        frame: 0,
        mean: [-16.0, 3.0, -12.0, 2.0, 0.0, 0.0],
        chol,
        speed_ball_m_s: 0.0,
        model_probs: Vec::new(),
        inv_range_max: 0.0,
    }
}

/// A measurement near a source at (-16, 3, -12) + 0.1 m per frame in x.
pub fn pf_measurement(p: &FilterParams, frame: u64) -> TdoaMeasurement {
    let k = 4;
    let x = [-16.0 + 0.1 * frame as f32, 3.0, -12.0, 2.0, 0.0, 0.0, 0.0];
    let lk = crate::track::likelihood::LikelihoodConsts::new(p, p.tdoa_std_s);
    let mut pred = vec![0.0; p.pairs.len()];
    crate::track::likelihood::predict_tdoas(p, &lk, &x, 0.01, &mut pred);
    let mut m = TdoaMeasurement::empty(frame, p.pairs.len(), k, p.tdoa_std_s);
    let mut r = PhiloxStream::new(frame, 1, Stream::Simulate);
    for (pi, t) in pred.iter().enumerate() {
        for j in 0..k {
            m.tdoa_s[pi * k + j] = if j == 0 {
                *t
            } else {
                *t + (r.uniform_f64() as f32 - 0.5) * 0.01
            };
            m.amp[pi * k + j] = if j == 0 { 300.0 } else { 50.0 };
        }
        m.floor[pi] = 0.1;
    }
    m
}

/// Medians of paired timings: (device or wall seconds, wall seconds) per call.
fn time_pair(
    budget_s: f64,
    mut f: impl FnMut() -> Result<(f64, f64)>,
) -> Result<(f64, f64, usize)> {
    let mut walls = Vec::new();
    let (dev, reps) = time_median(budget_s, 3, || {
        let (d, w) = f()?;
        walls.push(w);
        Ok(d)
    })?;
    // The first entry is the warm-up call.
    let mut w = walls.split_off(1.min(walls.len()));
    Ok((dev, median(&mut w).unwrap_or(f64::NAN), reps))
}

/// Time one correlator over a batch of frames. Returns (median seconds per call on the device
/// clock where there is one, median wall seconds per call, reps).
pub fn time_gcc(
    cor: &mut dyn Correlator,
    frames: &[Frame],
    budget_s: f64,
) -> Result<(f64, f64, usize)> {
    let refs: Vec<&Frame> = frames.iter().collect();
    let mut out: Vec<GccFrame> = frames.iter().map(|_| GccFrame::new(cor.params())).collect();
    time_two_passes(
        cor,
        budget_s,
        |c, on| c.set_device_timing(on),
        |c| {
            let t = Instant::now();
            c.correlate(&refs, &mut out, false)?;
            Ok((t.elapsed().as_secs_f64(), c.last_device_time_s()))
        },
    )
}

/// Time `call` on a backend. Where the backend times on the device: the wall clock in a pass
/// without device events, then the device time in a second pass with them (recording the
/// events costs host time); otherwise one pass, its wall clock standing for both. `call`
/// returns the call's wall seconds and the backend's device seconds. Returns (median device
/// seconds, median wall seconds, reps).
fn time_two_passes<B: ?Sized>(
    b: &mut B,
    budget_s: f64,
    set_timing: impl Fn(&mut B, bool),
    mut call: impl FnMut(&mut B) -> Result<(f64, Option<f64>)>,
) -> Result<(f64, f64, usize)> {
    set_timing(b, true);
    let (_, probe) = call(b)?;
    let mut pass = |b: &mut B, budget: f64| {
        time_pair(budget, || {
            let (wall, dev) = call(b)?;
            Ok((dev.unwrap_or(wall), wall))
        })
    };
    if probe.is_none() {
        return pass(b, budget_s);
    }
    set_timing(b, false);
    let (_, wall, r1) = pass(b, budget_s / 2.0)?;
    set_timing(b, true);
    let timed = pass(b, budget_s / 2.0);
    set_timing(b, false);
    let (dev, _, r2) = timed?;
    Ok((dev, wall, r1 + r2))
}

/// One filter step's timing: medians over the timed steps.
pub struct PfTiming {
    /// Seconds per step on the device clock where there is one, else the wall clock.
    pub s: f64,
    /// Wall seconds per step.
    pub wall_s: f64,
    /// Achieved device-memory bandwidth (GB/s): the median over the device-timed steps of each
    /// step's own bytes over its own device time. Steps that resample move more bytes and take
    /// longer than those that do not, so a step's bytes are only ever divided by that step's
    /// time. None where the backend has no device clock.
    pub gb_s: Option<f64>,
    pub reps: usize,
}

/// Time one filter step (see [`PfTiming`]).
pub fn time_pf(pf: &mut dyn ParticleFilter, budget_s: f64) -> Result<PfTiming> {
    let p = pf.params().clone();
    let mut init = pf_init();
    init.model_probs = vec![1.0 / p.n_models() as f32; p.n_models()];
    pf.init_track(&init)?;
    let mut est = vec![Estimate::new(p.n_models())];
    let mut k = 0u64;
    let mut rates = Vec::new();
    let (s, wall_s, reps) = time_two_passes(
        pf,
        budget_s,
        |f, on| f.set_device_timing(on),
        |f| {
            // The source moves steadily (2 m/s, as the prior): the common step, with
            // resampling whenever the effective sample size falls low enough.
            k += 1;
            let m = pf_measurement(&p, k);
            let t = Instant::now();
            f.step(
                &m,
                &[TrackStep {
                    slot: 0,
                    dt_s: 0.05,
                    lag_s: 0.01,
                }],
                &mut est,
            )?;
            let wall = t.elapsed().as_secs_f64();
            let dev = f.last_device_time_s();
            if let (Some(d), Some(by)) = (dev, f.bytes_per_step()) {
                if d > 0.0 {
                    rates.push(by as f64 / d / 1e9);
                }
            }
            Ok((wall, dev))
        },
    )?;
    Ok(PfTiming {
        s,
        wall_s,
        gb_s: median(&mut rates),
        reps,
    })
}

/// The live path's workload: the `tetra` scene (4 channels, a 2 m array with a diver 5-10 m
/// away) at `rate_hz` (the transforms are those of any 4096-sample frame; the rate sets how many
/// lags are searched: 64 at 48 kHz, 128 at the preset's 96 kHz), in frames of 4096 samples, and
/// a 2000-particle, one-model filter on `backend`: constant velocity, the default model set's
/// `agile` one (the diver swims at 1 m/s from the start, and a track is born at rest: with the
/// low-noise `quiet` model, which the sessions before the twenty-first used, the track never
/// caught up and drifted off by metres, out of the water at 48 kHz). The scene lasts
/// `duration_s` at any rate, so 48 kHz times half as many frames as 96 kHz. Returns the
/// pipeline, the scene's audio (synthesised up front, so that the timing leaves it out) and the
/// diver's path (to score the track).
fn tetra_workload(
    backend: BackendChoice,
    particles: usize,
    duration_s: f64,
    rate_hz: u32,
    live: bool,
) -> Result<(
    Config,
    crate::pipeline::Pipeline,
    Recorded,
    crate::audio::sim::PathSpec,
)> {
    use crate::audio::AudioSource;
    use crate::audio::sim::SimSource;
    let mut spec = crate::audio::sim::SceneSpec::preset("tetra")
        .ok_or_else(|| crate::error::Error::Usage("no tetra preset".into()))?;
    spec.duration_s = duration_s;
    spec.sample_rate_hz = rate_hz;
    let mut cfg = spec.config();
    cfg.gcc.frame_samples = Some(4096);
    cfg.tracker.particles = particles;
    let cv = crate::config::default_models()
        .into_iter()
        .filter(|m| m.kind == ModelKind::Cv)
        .max_by(|a, b| a.accel_std_m_s2.total_cmp(&b.accel_std_m_s2))
        .ok_or_else(|| crate::error::Error::Usage("no CV model".into()))?;
    let path = spec
        .sources
        .first()
        .map(|s| s.path.clone())
        .ok_or_else(|| crate::error::Error::Usage("the tetra preset has no source".into()))?;
    cfg.tracker.models = vec![cv];
    cfg.validate("bench")?;
    let backends = crate::backend::select(&cfg, backend)?;
    let pipe = crate::pipeline::Pipeline::new(
        &cfg,
        backends,
        crate::output::SinkSet::default(),
        crate::pipeline::PipelineOptions {
            live,
            ..Default::default()
        },
    );
    let mut src = SimSource::new(spec)?;
    let ch = src.channels();
    let mut audio = Vec::new();
    let mut buf = vec![0.0f32; ch * 4096];
    loop {
        match src.read(&mut buf)? {
            ReadResult::Samples(n) => audio.extend_from_slice(&buf[..n * ch]),
            ReadResult::End => break,
            _ => continue,
        }
    }
    let rec = Recorded {
        channels: ch,
        rate_hz: src.sample_rate_hz(),
        audio,
        at: 0,
    };
    Ok((cfg, pipe, rec, path))
}

/// A live-path row times a filter that follows the diver: say so when it does not.
fn warn_untracked(row: &str, rms_m: f64) {
    if !(rms_m <= 1.0) {
        log::warn!(
            "bench: the {row} row's track is {rms_m:.2} m off the simulated diver (RMS): its time is that of a filter that is not tracking"
        );
    }
}

/// Sums of squared distances between a workload's track reports and the diver's position at
/// each report's state time (the emission time, as the path gives it).
#[derive(Default)]
struct TrackError {
    sq: f64,
    n: usize,
}

impl TrackError {
    fn add(
        &mut self,
        path: &crate::audio::sim::PathSpec,
        reports: &[crate::track::manager::TrackReport],
    ) {
        for r in reports {
            let p = path.position(r.t_s);
            self.sq += (0..3).map(|k| (r.position[k] - p[k]).powi(2)).sum::<f64>();
            self.n += 1;
        }
    }
    /// RMS error, metres (NaN without reports).
    fn rms_m(&self) -> f64 {
        (self.sq / self.n as f64).sqrt()
    }
}

use crate::audio::ReadResult;

/// Interleaved samples held in memory, read in capture-sized periods.
struct Recorded {
    audio: Vec<f32>,
    channels: usize,
    rate_hz: u32,
    at: usize,
}

impl crate::audio::AudioSource for Recorded {
    fn describe(&self) -> String {
        "recorded tetra scene".into()
    }
    fn sample_rate_hz(&self) -> u32 {
        self.rate_hz
    }
    fn channels(&self) -> usize {
        self.channels
    }
    fn total_frames(&self) -> Option<u64> {
        Some((self.audio.len() / self.channels) as u64)
    }
    fn read(&mut self, out: &mut [f32]) -> Result<ReadResult> {
        let n = out.len().min(self.audio.len() - self.at);
        let n = n - n % self.channels;
        if n == 0 {
            return Ok(ReadResult::End);
        }
        out[..n].copy_from_slice(&self.audio[self.at..self.at + n]);
        self.at += n;
        Ok(ReadResult::Samples(n / self.channels))
    }
}

/// Capture delivers this many sample frames per period (the frame assembler gets them as they
/// come, and each frame is processed as soon as it is complete).
const CAPTURE_PERIOD: usize = 1024;

/// The live path, frame by frame, as `Pipeline::process` runs it for capture: GCC-PHAT of a
/// 4-channel, 4096-sample frame (the `tetra` scene), the measurement, and one step of
/// a 2000-particle, one-model filter, plus the track bookkeeping. As in capture, the samples go
/// into the frame assembler a period at a time and each frame is processed as soon as it is
/// complete (so it is in the CPU's cache, as the assembler just wrote it: with a GPU that reads
/// mapped host memory, into the correlator's page-locked frame memory, as the daemon has it;
/// `SONOTRACK_NO_MAPPED_FRAMES=1` puts frames on the heap, from where the correlator copies
/// them). Returns the median wall-clock time per frame over the frames after the track is
/// established (and the medians of the input checks, GCC-PHAT and filter stages, and of the
/// assembler's push that completed each frame), and the frames timed.
pub fn time_live_frame(
    backend: BackendChoice,
    particles: usize,
    rate_hz: u32,
) -> Result<LiveTiming> {
    use crate::audio::assembler::FrameAssembler;
    let (cfg, mut pipe, rec, path) = tetra_workload(backend, particles, 8.0, rate_hz, true)?;
    let mut err = TrackError::default();
    let mut asm = FrameAssembler::for_config(&cfg, 0);
    // As the daemon does: frames in memory the GPU reads where it lies.
    asm.set_allocator(pipe.frame_allocator());
    let (ch, audio) = (rec.channels, rec.audio);
    // Births and deletions at start-up would flood the bench's output.
    let level = log::max_level();
    log::set_max_level(log::LevelFilter::Warn);
    let mut times = Vec::new();
    // Per frame: checks, GCC-PHAT, filter (from the pipeline's own stage clocks).
    let mut parts: [Vec<f64>; 3] = Default::default();
    let stage_clocks = |p: &crate::pipeline::Pipeline| {
        [
            p.counters.check_total.as_secs_f64(),
            p.counters.gcc_total.as_secs_f64(),
            p.tracker().filter_wall.as_secs_f64(),
        ]
    };
    // The push that completes each timed frame (the period's copy and the frame's assembly,
    // which the frame's latency includes too: it is not in `process`).
    let mut assemble = Vec::new();
    // What the daemon does between frames: the filter's deferred resampling launched
    // (`Pipeline::between_frames`) and the samples of the frames being filled sent to the
    // device (see `FrameAssembler::send_ahead`); and the timed frames that had some.
    let mut sends = Vec::new();
    let mut sent_ahead = 0usize;
    // After each period that completed a timed frame: the filter's launches between frames.
    let mut launches = Vec::new();
    let mut run = || -> Result<()> {
        for period in audio.chunks(CAPTURE_PERIOD * ch) {
            let t = Instant::now();
            asm.push(period);
            let pushed = t.elapsed().as_secs_f64();
            let mut timed_here = false;
            while let Some(mut f) = asm.pop() {
                let had_copy = f.data.sent_rows() > 0;
                let before = stage_clocks(&pipe);
                let t = Instant::now();
                let reports = pipe.process(&mut f)?;
                let dt = t.elapsed().as_secs_f64();
                // Time the steady state: a confirmed track, after the first two seconds.
                let timed = !reports.is_empty() && f.centre_time_s() > 2.0;
                if timed {
                    err.add(&path, reports);
                }
                let after = stage_clocks(&pipe);
                if timed {
                    timed_here = true;
                    sent_ahead += usize::from(had_copy);
                    times.push(dt);
                    assemble.push(pushed);
                    for k in 0..3 {
                        parts[k].push(after[k] - before[k]);
                    }
                }
                asm.recycle(f);
            }
            let t = Instant::now();
            pipe.between_frames();
            if timed_here {
                launches.push(t.elapsed().as_secs_f64());
            }
            let t = Instant::now();
            asm.send_ahead();
            sends.push(t.elapsed().as_secs_f64());
        }
        Ok(())
    };
    let res = run();
    log::set_max_level(level);
    res?;
    if times.is_empty() {
        return Err(crate::error::Error::Usage(
            "the live-path benchmark never established a track".into(),
        ));
    }
    // Never empty (checked above; the stage lists have one entry per timed frame).
    let median = |v: &mut Vec<f64>| median(v).unwrap_or(f64::NAN);
    let [mut c, mut g, mut p] = parts;
    Ok(LiveTiming {
        assemble_s: median(&mut assemble),
        send_ahead_s: median(&mut sends),
        sent_ahead,
        between_s: median(&mut launches),
        median_s: median(&mut times),
        checks_s: median(&mut c),
        gcc_s: median(&mut g),
        filter_s: median(&mut p),
        frames: times.len(),
        track_rms_m: err.rms_m(),
    })
}

/// The live path's median time per frame and the medians of its timed stages, and of the
/// frame assembler's push that completed the frame (outside the frame's time).
pub struct LiveTiming {
    pub assemble_s: f64,
    /// The median time the host took to send the samples of the frames being filled to the
    /// device between frames, and how many timed frames had some of theirs there.
    pub send_ahead_s: f64,
    pub sent_ahead: usize,
    /// The median time of the filter's launches between frames (`Pipeline::between_frames`:
    /// the resampling a live step leaves for then), after the timed frames.
    pub between_s: f64,
    pub median_s: f64,
    pub checks_s: f64,
    pub gcc_s: f64,
    pub filter_s: f64,
    pub frames: usize,
    /// RMS distance of the timed frames' track reports from the diver, metres.
    pub track_rms_m: f64,
}

/// The live path's workload in a steady-state loop: the same scene (12 s of it, the diver
/// within about 10 m of the array; the sessions before the twenty-first replayed 30 s, out to
/// 25 m) and filter as [`time_live_frame`], replayed unpaced as `sonotrack replay` runs them
/// (on the GPU, the next batch is checked and correlated while the filter tracks the current
/// one).
pub fn time_steady_frames(
    backend: BackendChoice,
    particles: usize,
    rate_hz: u32,
) -> Result<SteadyTiming> {
    use crate::audio::assembler::FrameAssembler;
    let (cfg, mut pipe, mut src, path) = tetra_workload(backend, particles, 12.0, rate_hz, false)?;
    let mut err = TrackError::default();
    let mut asm = FrameAssembler::for_config(&cfg, 0);
    let level = log::max_level();
    log::set_max_level(log::LevelFilter::Warn);
    // When each frame after the first two seconds was done, and whether it had a track.
    let mut seen: Vec<(Instant, bool)> = Vec::new();
    let res = pipe.run(
        &mut src,
        &mut asm,
        None,
        &mut |v| {
            if v.t_centre_s > 2.0 {
                seen.push((Instant::now(), !v.reports.is_empty()));
                err.add(&path, v.reports);
            }
        },
        &mut |_| {},
    );
    log::set_max_level(level);
    res?;
    let mut tracked: Vec<f64> = seen
        .windows(2)
        .filter(|w| w[1].1)
        .map(|w| (w[1].0 - w[0].0).as_secs_f64())
        .collect();
    if tracked.is_empty() {
        return Err(crate::error::Error::Usage(
            "the steady-state benchmark never established a track".into(),
        ));
    }
    tracked.sort_by(f64::total_cmp);
    let c = &pipe.counters;
    let proc_mean_s = c.proc_total.as_secs_f64() / c.frames_processed.max(1) as f64;
    // Never empty: `tracked` has an entry per pair of frames.
    let (first, last) = (seen[0].0, seen[seen.len() - 1].0);
    Ok(SteadyTiming {
        mean_s: (last - first).as_secs_f64() / (seen.len() - 1) as f64,
        median_tracked_s: tracked[tracked.len() / 2],
        p90_tracked_s: tracked[tracked.len() * 9 / 10],
        proc_mean_s,
        frames: seen.len(),
        tracked: tracked.len(),
        track_rms_m: err.rms_m(),
    })
}

/// Time per frame in the steady-state loop after the first two seconds: the mean over every
/// frame (wall clock: the replay reading and assembling each next batch between batches, and
/// any frame without a track, which searches for one, included), and the median and p90 over
/// frames that had a track (from the frame before's end to theirs).
pub struct SteadyTiming {
    pub mean_s: f64,
    pub median_tracked_s: f64,
    pub p90_tracked_s: f64,
    /// The pipeline's own processing time per frame over the whole replay (what `sonotrack
    /// replay` reports: tracking, and the checks and correlation not hidden, without reading
    /// and assembling the frames).
    pub proc_mean_s: f64,
    pub frames: usize,
    pub tracked: usize,
    /// RMS distance of the track reports after the first two seconds from the diver, metres.
    pub track_rms_m: f64,
}

/// Run the grids. Rows come back in the order printed.
pub fn run(opts: &BenchOptions) -> Result<Vec<Row>> {
    let mut rows = Vec::new();
    let backends: Vec<&str> = match opts.backend {
        BackendChoice::Cpu => vec!["cpu"],
        BackendChoice::Cuda => vec!["cuda"],
        BackendChoice::Auto => {
            if crate::gpu::available().is_ok() {
                vec!["cuda", "cpu"]
            } else {
                vec!["cpu"]
            }
        }
    };
    if backends.contains(&"cuda") {
        let bw = crate::gpu::copy_bandwidth_gb_s()?;
        rows.push(Row {
            stage: "copy".into(),
            backend: "cuda".into(),
            params: "device-to-device, 256 MiB (read + write)".into(),
            median_us: 2.0 * 256.0 * 1048.576 / bw,
            per_unit: bw,
            unit: "GB/s".into(),
            gb_s: Some(bw),
            wall_us: None,
            reps: 10,
        });
        // The upload a batch of 16 frames of 16 channels x 4096 samples makes (4 MiB): what the
        // batched correlation pays over the bus before any kernel runs.
        let bytes = 16 * 16 * 4096 * 4;
        let up = crate::gpu::upload_bandwidth_gb_s(bytes)?;
        rows.push(Row {
            stage: "copy".into(),
            backend: "cuda".into(),
            params: "host-to-device, 4 MiB page-locked".into(),
            median_us: bytes as f64 / up / 1e3,
            per_unit: up,
            unit: "GB/s".into(),
            gb_s: Some(up),
            wall_us: None,
            reps: 10,
        });
    }
    if opts.gcc {
        let (channels, frames): (&[usize], &[usize]) = if opts.quick {
            (&[4, 16], &[1024, 4096])
        } else {
            (&[4, 8, 16, 64], &[1024, 4096, 16384])
        };
        let (channels, frames) = (pick(channels, &opts.channels), pick(frames, &opts.frames));
        for &ch in &channels {
            for &n in &frames {
                let params = gcc_params(ch, n);
                for &b in &backends {
                    let frames = noise_frames(ch, n, 1, 3);
                    let mut cor: Box<dyn Correlator> = match b {
                        "cuda" => crate::gpu::correlator(params.clone(), 1)?,
                        _ => Box::new(CpuCorrelator::new(params.clone())),
                    };
                    let (s, wall, reps) = time_gcc(cor.as_mut(), &frames, opts.budget_s)?;
                    rows.push(Row {
                        stage: "gcc".into(),
                        backend: b.into(),
                        params: format!("{ch} ch x {n}, {} pairs", params.pairs.len()),
                        median_us: s * 1e6,
                        per_unit: s * 1e6,
                        unit: "us/frame".into(),
                        gb_s: cor.bytes_per_call().map(|by| by as f64 / s / 1e9),
                        wall_us: Some(wall * 1e6),
                        reps,
                    });
                }
            }
        }
    }
    let whole_gcc = opts.channels.is_empty() && opts.frames.is_empty();
    if opts.gcc {
        // Batched correlation (replay), and a steady-state loop of 16-channel frames: µs per
        // frame over a call's frames (each where the channel and frame filters allow it).
        let wanted = |ch: usize, n: usize| {
            (opts.channels.is_empty() || opts.channels.contains(&ch))
                && (opts.frames.is_empty() || opts.frames.contains(&n))
        };
        for &(ch, n, batch) in [(16usize, 4096usize, 16usize), (16, 4096, 64), (4, 4096, 64)]
            .iter()
            .filter(|&&(ch, n, _)| wanted(ch, n))
        {
            let params = gcc_params(ch, n);
            for &b in &backends {
                let frames = noise_frames(ch, n, batch, 5);
                let mut cor: Box<dyn Correlator> = match b {
                    "cuda" => crate::gpu::correlator(params.clone(), batch)?,
                    _ => Box::new(CpuCorrelator::new(params.clone())),
                };
                let (s, wall, reps) = time_gcc(cor.as_mut(), &frames, opts.budget_s)?;
                let per = s / batch as f64;
                rows.push(Row {
                    stage: "gcc".into(),
                    backend: b.into(),
                    params: format!("{ch} ch x {n}, batch {batch}: {:.0} frames/s", 1.0 / per),
                    median_us: s * 1e6,
                    per_unit: per * 1e6,
                    unit: "us/frame".into(),
                    gb_s: cor.bytes_per_call().map(|by| by as f64 / s / 1e9),
                    wall_us: Some(wall * 1e6),
                    reps,
                });
            }
        }
    }
    if opts.live && whole_gcc && opts.pf_particles.is_empty() {
        for &b in &backends {
            let choice = if b == "cuda" {
                BackendChoice::Cuda
            } else {
                BackendChoice::Cpu
            };
            let rate = opts.live_rate_hz;
            let khz = f64::from(rate) / 1000.0;
            let lt = time_live_frame(choice, 2000, rate)?;
            warn_untracked("live", lt.track_rms_m);
            let (s, frames) = (lt.median_s, lt.frames);
            rows.push(Row {
                stage: "live".into(),
                backend: b.into(),
                params: format!(
                    "tetra 4 ch x 4096 at {khz} kHz + 2000 particles x 1 (checks {:.1}, gcc {:.1}, filter {:.1} us; before it, assembly {:.1} us; between frames, the filter's launch {:.1} us and {} sent ahead in {:.1} us; track off by {:.3} m RMS)",
                    lt.checks_s * 1e6,
                    lt.gcc_s * 1e6,
                    lt.filter_s * 1e6,
                    lt.assemble_s * 1e6,
                    lt.between_s * 1e6,
                    lt.sent_ahead,
                    lt.send_ahead_s * 1e6,
                    lt.track_rms_m
                ),
                median_us: s * 1e6,
                per_unit: s * 1e6,
                unit: "us/frame (wall)".into(),
                gb_s: None,
                wall_us: Some(s * 1e6),
                reps: frames,
            });
            let st = time_steady_frames(choice, 2000, rate)?;
            warn_untracked("steady", st.track_rms_m);
            rows.push(Row {
                stage: "steady".into(),
                backend: b.into(),
                params: format!(
                    "tetra 4 ch x 4096 at {khz} kHz + 2000 particles x 1, replayed (median of {} tracked frames, p90 {:.1} us; processing {:.1} us per frame; wall {:.1} us per frame with reading; track off by {:.3} m RMS)",
                    st.tracked,
                    st.p90_tracked_s * 1e6,
                    st.proc_mean_s * 1e6,
                    st.mean_s * 1e6,
                    st.track_rms_m
                ),
                median_us: st.median_tracked_s * 1e6,
                per_unit: st.median_tracked_s * 1e6,
                unit: "us/frame (wall)".into(),
                gb_s: None,
                wall_us: Some(st.mean_s * 1e6),
                reps: st.frames,
            });
        }
    }
    if opts.pf {
        let (parts, models): (&[usize], &[usize]) = if opts.quick {
            (&[2048, 16_384], &[1, 4])
        } else {
            (&[2048, 16_384, 262_144, 1 << 20, 1 << 22], &[1, 4, 16])
        };
        let (parts, models) = (pick(parts, &opts.pf_particles), pick(models, &opts.models));
        for &n in &parts {
            for &l in &models {
                let p = pf_params(n, l);
                for &b in &backends {
                    let mut pf: Box<dyn ParticleFilter> = match b {
                        "cuda" => crate::gpu::particle_filter(p.clone())?,
                        _ => Box::new(CpuParticleFilter::new(p.clone())),
                    };
                    let t = time_pf(pf.as_mut(), opts.budget_s)?;
                    rows.push(Row {
                        stage: "pf".into(),
                        backend: b.into(),
                        params: format!("{n} particles x {l} models"),
                        median_us: t.s * 1e6,
                        per_unit: t.s * 1e9 / n as f64,
                        unit: "ns/particle".into(),
                        gb_s: t.gb_s,
                        wall_us: Some(t.wall_s * 1e6),
                        reps: t.reps,
                    });
                }
            }
        }
    }
    if let Some(dir) = &opts.replay {
        for &b in &backends {
            let (mut cfg, wav, truth) = crate::replay::resolve(dir, None)?;
            cfg.tracker.particles = opts.replay_particles;
            let ro = crate::replay::ReplayOptions {
                backend: if b == "cuda" {
                    BackendChoice::Cuda
                } else {
                    BackendChoice::Cpu
                },
                ..crate::replay::ReplayOptions::default()
            };
            let sum = crate::replay::replay_file(&cfg, &wav, truth.as_ref(), &ro)?;
            let frames = sum.counters.frames_processed.max(1);
            rows.push(Row {
                stage: "replay".into(),
                backend: b.into(),
                params: format!(
                    "{}, {} particles, RMSE {:.4} m",
                    dir.file_name().and_then(|n| n.to_str()).unwrap_or("scene"),
                    opts.replay_particles,
                    sum.accuracy.as_ref().map(|a| a.rmse_m).unwrap_or(f64::NAN)
                ),
                median_us: sum.counters.proc_total.as_secs_f64() * 1e6 / frames as f64,
                per_unit: 100.0 * sum.load(),
                unit: "% of real time".into(),
                gb_s: None,
                wall_us: None,
                reps: frames as usize,
            });
        }
    }
    Ok(rows)
}

pub fn print(rows: &[Row]) {
    println!(
        "{:<6} {:<6} {:<44} {:>11} {:>10} {:>14} {:>7} {:>6}",
        "stage", "back", "size", "median us", "wall us", "per unit", "GB/s", "reps"
    );
    for r in rows {
        println!(
            "{:<6} {:<6} {:<44} {:>11.1} {:>10} {:>9.2} {:<5} {:>7} {:>6}",
            r.stage,
            r.backend,
            r.params,
            r.median_us,
            r.wall_us
                .map(|w| format!("{w:.1}"))
                .unwrap_or_else(|| "-".into()),
            r.per_unit,
            if r.unit.starts_with('%') {
                "%"
            } else if r.unit == "GB/s" {
                "GB/s"
            } else {
                r.unit.split('/').next_back().unwrap_or("")
            },
            r.gb_s
                .map(|g| format!("{g:.0}"))
                .unwrap_or_else(|| "-".into()),
            r.reps
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::BackendError;
    use crate::track::Particles;

    /// The CPU filter, posing as a device whose steps alternate between a short one that moves
    /// few bytes and a long one that moves many (as steps without and with resampling do), at
    /// the same rate of 2 GB/s.
    struct Alternating {
        cpu: CpuParticleFilter,
        timing: bool,
        steps: u64,
    }

    impl Alternating {
        fn long(&self) -> bool {
            self.steps % 2 == 0
        }
    }

    impl ParticleFilter for Alternating {
        fn backend(&self) -> &'static str {
            "test"
        }
        fn params(&self) -> &FilterParams {
            self.cpu.params()
        }
        fn init_track(&mut self, init: &TrackInit) -> Result<(), BackendError> {
            self.cpu.init_track(init)
        }
        fn step(
            &mut self,
            meas: &TdoaMeasurement,
            tracks: &[TrackStep],
            out: &mut [Estimate],
        ) -> Result<(), BackendError> {
            self.steps += 1;
            self.cpu.step(meas, tracks, out)
        }
        fn read_particles(&mut self, slot: u32) -> Result<Particles, BackendError> {
            self.cpu.read_particles(slot)
        }
        fn write_particles(&mut self, slot: u32, p: &Particles) -> Result<(), BackendError> {
            self.cpu.write_particles(slot, p)
        }
        fn set_device_timing(&mut self, on: bool) {
            self.timing = on;
        }
        fn last_device_time_s(&self) -> Option<f64> {
            self.timing
                .then_some(if self.long() { 300e-6 } else { 100e-6 })
        }
        fn bytes_per_step(&self) -> Option<u64> {
            Some(if self.long() { 600_000 } else { 200_000 })
        }
    }

    /// A step's bytes are divided by that step's own time, not by the median step's: the
    /// figure is the device's rate whichever kind of step came last.
    #[test]
    fn filter_bandwidth_pairs_each_step_with_its_own_time() {
        let mut pf = Alternating {
            cpu: CpuParticleFilter::new(pf_params(256, 1)),
            timing: false,
            steps: 0,
        };
        let t = time_pf(&mut pf, 0.05).unwrap();
        let gb_s = t.gb_s.unwrap();
        assert!((gb_s - 2.0).abs() < 1e-9, "{gb_s} GB/s");
        assert!(t.s == 100e-6 || t.s == 300e-6, "median step {} s", t.s);
        assert!(t.reps >= 3);
    }

    /// A host backend has no device clock and no bandwidth figure.
    #[test]
    fn cpu_filter_has_no_bandwidth() {
        let mut pf = CpuParticleFilter::new(pf_params(256, 1));
        let t = time_pf(&mut pf, 0.02).unwrap();
        assert!(t.gb_s.is_none());
        assert!(t.s > 0.0 && t.wall_s > 0.0);
    }
}
