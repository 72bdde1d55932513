//! The live path, frame by frame as capture runs it, and the same workload replayed: the `tetra`
//! scene with a small filter that must follow the diver for its time to count.

use std::time::Instant;

use super::{BenchOptions, Row, median};
use crate::audio::ReadResult;
use crate::config::Config;
use crate::error::Result;
use crate::gpu::BackendChoice;
use crate::track::ModelKind;

/// The live path's workload: the `tetra` scene (4 channels, a 2 m array with a diver 5-10 m
/// away) at `rate_hz` (the transforms are those of any 4096-sample frame; the rate sets how many
/// lags are searched: 64 at 48 kHz, 128 at the preset's 96 kHz), in frames of 4096 samples, and
/// a 2000-particle, one-model filter on `backend`: constant velocity, the default model set's
/// `agile` one (the diver swims at 1 m/s from the start, and a track is born at rest: with the
/// low-noise `quiet` model the track never catches up and drifts off by metres, out of the
/// water at 48 kHz). The scene lasts
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
    let mut cfg = Config::for_scene(&spec);
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
    let backends = crate::pipeline::backend::select(&cfg, backend)?;
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
    let (cfg, mut pipe, rec, path) = tetra_workload(backend, particles, 8.0, rate_hz, true)?;
    let mut err = TrackError::default();
    let mut asm = cfg.frame_assembler(0);
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
            p.tracker().counts.filter_wall.as_secs_f64(),
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
/// within about 10 m of the array) and filter as [`time_live_frame`], replayed unpaced as `sonotrack replay` runs them
/// (on the GPU, the next batch is checked and correlated while the filter tracks the current
/// one).
pub fn time_steady_frames(
    backend: BackendChoice,
    particles: usize,
    rate_hz: u32,
) -> Result<SteadyTiming> {
    let (cfg, mut pipe, mut src, path) = tetra_workload(backend, particles, 12.0, rate_hz, false)?;
    let mut err = TrackError::default();
    let mut asm = cfg.frame_assembler(0);
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

/// The live and steady-state rows of every backend.
pub(super) fn rows(opts: &BenchOptions, backends: &[&str]) -> Result<Vec<Row>> {
    let mut rows = Vec::new();
    for &b in backends {
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
    Ok(rows)
}
