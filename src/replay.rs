//! Replaying a recording (or a simulated scene) through the pipeline, with accuracy against truth
//! when it is available.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::audio::AudioSource;
use crate::audio::assembler::FrameAssembler;
use crate::audio::wav::WavSource;
use crate::backend;
use crate::config::{BackendChoice, Config};
use crate::error::{Error, Result};
use crate::eval::{Accuracy, Recorder};
use crate::output::SinkSet;
use crate::output::jsonl::JsonlSink;
use crate::pipeline::{Counters, FrameView, Pipeline, PipelineOptions};
use crate::scene::{Scene, Truth};

/// What to replay and how.
#[derive(Debug, Clone)]
pub struct ReplayOptions {
    pub backend: BackendChoice,
    /// Write the position stream (JSON Lines) here; "-" is standard output.
    pub out: Option<String>,
    pub from_s: Option<f64>,
    pub to_s: Option<f64>,
    /// Pace frames to the audio clock (1.0 = real time).
    pub pace: Option<f64>,
    pub progress: bool,
    pub reproducible: bool,
    pub want_curves: bool,
    /// Accuracy ignores frames before this time (track start-up).
    pub warmup_s: f64,
    pub threshold_m: f64,
}

impl Default for ReplayOptions {
    fn default() -> Self {
        Self {
            backend: BackendChoice::Auto,
            out: None,
            from_s: None,
            to_s: None,
            pace: None,
            progress: false,
            reproducible: false,
            want_curves: false,
            warmup_s: 2.0,
            threshold_m: 2.0,
        }
    }
}

/// What a replay did.
#[derive(Debug, Clone)]
pub struct ReplaySummary {
    pub input: String,
    pub backend: String,
    pub backend_reason: String,
    pub audio_s: f64,
    pub wall: Duration,
    pub counters: Counters,
    pub births: u64,
    pub deletions: u64,
    pub tempered_steps: u64,
    pub accuracy: Option<Accuracy>,
    pub recorder: Recorder,
    pub warnings: Vec<String>,
}

impl ReplaySummary {
    /// Processing time as a fraction of the audio's duration.
    pub fn load(&self) -> f64 {
        self.counters.proc_total.as_secs_f64() / self.audio_s.max(1e-9)
    }
}

/// Resolve a replay input: a scene directory, or a WAV file with a configuration.
pub fn resolve(input: &Path, config: Option<&Path>) -> Result<(Config, PathBuf, Option<Truth>)> {
    if input.is_dir() {
        let scene = Scene::open(input)?;
        let cfg = match config {
            Some(c) => Config::load(c)?,
            None => scene.config,
        };
        return Ok((cfg, scene.audio, scene.truth));
    }
    let Some(c) = config else {
        return Err(Error::Usage(format!(
            "{}: a WAV file needs --config CONFIG (or give a scene directory holding audio*.wav and array.json)",
            input.display()
        )));
    };
    let cfg = Config::load(c)?;
    // A truth.csv beside the WAV is used when present.
    let truth_path = input.with_file_name("truth.csv");
    let truth = if truth_path.exists() {
        Some(Truth::load(&truth_path)?)
    } else {
        None
    };
    Ok((cfg, input.into(), truth))
}

/// Replay `wav` with `cfg`. The configuration is checked against the file before any audio is
/// processed.
pub fn replay_file(
    cfg: &Config,
    wav: &Path,
    truth: Option<&Truth>,
    opts: &ReplayOptions,
) -> Result<ReplaySummary> {
    let mut src = WavSource::open(wav)?;
    cfg.check_input(
        &wav.display().to_string(),
        src.channels(),
        src.sample_rate_hz(),
    )
    .map_err(Error::Config)?;
    if opts.from_s.is_some() || opts.to_s.is_some() {
        src.set_range(opts.from_s, opts.to_s)?;
    }
    let origin = src.first_frame();
    replay_source(cfg, &mut src, origin, truth, opts)
}

/// Replay any source (a WAV file, a simulated scene).
pub fn replay_source(
    cfg: &Config,
    src: &mut dyn AudioSource,
    origin: u64,
    truth: Option<&Truth>,
    opts: &ReplayOptions,
) -> Result<ReplaySummary> {
    cfg.check_input(&src.describe(), src.channels(), src.sample_rate_hz())
        .map_err(Error::Config)?;
    let backends = backend::select(cfg, opts.backend)?;
    log::info!("{}", backends.reason);
    let reason = backends.reason.clone();
    let mut sinks = SinkSet::open(&cfg.output.sinks, true)?;
    if let Some(out) = &opts.out {
        // Named without the path: the stream reports on its outputs, and the same replay written
        // to two different files must still be byte-identical.
        sinks.add("replay-out".into(), Box::new(JsonlSink::open(out)?), true);
    }
    let mut pipe = Pipeline::new(
        cfg,
        backends,
        sinks,
        PipelineOptions {
            want_curves: opts.want_curves,
            reproducible: opts.reproducible,
            live: false,
        },
    );
    let hop = cfg.hop_samples();
    let mut asm = FrameAssembler::new(
        cfg.channel_map(),
        cfg.input_channels(),
        cfg.frame_samples(),
        hop,
        cfg.sample_rate_hz(),
        origin,
    );
    let total = src.total_frames().unwrap_or(0);
    let bar = if opts.progress {
        let pb = indicatif::ProgressBar::new(total);
        pb.set_style(
            indicatif::ProgressStyle::with_template(
                "{spinner} [{elapsed_precise}] {wide_bar} {percent}% {msg} ETA {eta}",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        Some(pb)
    } else {
        None
    };
    let mut rec = Recorder::default();
    let start = Instant::now();
    let fs = cfg.sample_rate_hz();
    let mut frames_seen = 0u64;
    let mut observe = |v: &FrameView| {
        frames_seen += 1;
        // One source in this version: score the first track's report.
        rec.push(v.t_centre_s, v.reports.first().map(|r| (r.t_s, r.position)));
    };
    let mut last_update = Instant::now();
    let mut progress = |read: u64| {
        if let Some(pb) = &bar {
            if last_update.elapsed() > Duration::from_millis(100) {
                pb.set_position(read);
                let secs = start.elapsed().as_secs_f64().max(1e-9);
                pb.set_message(format!(
                    "{:.0} frames/s, {:.1}x real time",
                    read as f64 / hop as f64 / secs,
                    read as f64 / fs / secs
                ));
                last_update = Instant::now();
            }
        }
    };
    pipe.run(src, &mut asm, opts.pace, &mut observe, &mut progress)?;
    if let Some(pb) = &bar {
        pb.finish_and_clear();
    }
    pipe.sinks.flush(Duration::from_secs(30));
    let wall = start.elapsed();
    let accuracy = truth.and_then(|t| rec.accuracy(t, 0, opts.warmup_s, opts.threshold_m));
    Ok(ReplaySummary {
        input: src.describe(),
        backend: pipe.backend().to_string(),
        backend_reason: reason,
        audio_s: total as f64 / fs,
        wall,
        counters: pipe.counters.clone(),
        births: pipe.tracker().births,
        deletions: pipe.tracker().deletions,
        tempered_steps: pipe.tracker().tempered_steps,
        accuracy,
        recorder: rec,
        warnings: src.warnings(),
    })
}

impl std::fmt::Display for ReplaySummary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let c = &self.counters;
        writeln!(f, "input:    {}", self.input)?;
        writeln!(f, "backend:  {} ({})", self.backend, self.backend_reason)?;
        writeln!(
            f,
            "frames:   {} in, {} processed, {} dropped{}; {} tracks born, {} deleted; {} tempered updates",
            c.frames_in,
            c.frames_processed,
            c.frames_dropped(),
            if c.dropped.is_empty() {
                String::new()
            } else {
                format!(" {:?}", c.dropped)
            },
            self.births,
            self.deletions,
            self.tempered_steps
        )?;
        if c.nonfinite_samples > 0 || c.bad_channel_frames.iter().any(|&n| n > 0) {
            writeln!(
                f,
                "channels: {} non-finite samples zeroed; frames with an unusable channel, per channel: {:?}",
                c.nonfinite_samples, c.bad_channel_frames
            )?;
        }
        writeln!(
            f,
            "time:     {:.1} s of audio processed in {:.3} s ({:.2}% of real time, {:.0} us per frame, max {:.0} us); wall {:.3} s",
            self.audio_s,
            c.proc_total.as_secs_f64(),
            100.0 * self.load(),
            c.proc_total.as_secs_f64() / c.frames_processed.max(1) as f64 * 1e6,
            c.proc_max.as_secs_f64() * 1e6,
            self.wall.as_secs_f64()
        )?;
        if c.backend_switches > 0 {
            writeln!(
                f,
                "warning:  the backend failed {} time(s); processing moved to the CPU",
                c.backend_switches
            )?;
        }
        for w in &self.warnings {
            writeln!(f, "warning:  {w}")?;
        }
        if let Some(a) = &self.accuracy {
            writeln!(f, "accuracy: {a}")?;
        }
        Ok(())
    }
}
