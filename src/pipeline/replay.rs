//! Replaying a recording (or a simulated scene) through the pipeline, with accuracy against truth
//! when it is available.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::analysis::accuracy::Accuracy;
use crate::analysis::recording_bound::FrameBound;
use crate::analysis::score::{EvalOptions, Evaluation};
use crate::analysis::stream::{FrameReports, Report};
use crate::analysis::truth::Truth;
use crate::audio::AudioSource;
use crate::audio::heading::{HeadingFeed, HeadingTable};
use crate::audio::wav::WavSource;
use crate::config::Config;
use crate::error::{Error, Result};
use crate::gpu::BackendChoice;
use crate::math::linalg::upper_triangle;
use crate::output::SinkSet;
use crate::output::jsonl::JsonlSink;
use crate::pipeline::backend;
use crate::pipeline::scene::Scene;
use crate::pipeline::{Counters, FrameView, Pipeline, PipelineOptions};
use crate::plot::GccTrace;
use crate::track::manager::TrackReport;
use crate::track::report::EstimateKind;

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
    /// Write plots into this directory.
    pub plot: Option<PathBuf>,
    /// With truth: compute the Cramér–Rao bound along the recording (a second, cheaper pass).
    pub bound: bool,
    /// OSPA cut-off (m) and order for several targets.
    pub ospa_c_m: f64,
    pub ospa_p: f64,
    /// Smooth each track over all of its data (RTS) and score the smoothed estimates too.
    pub smooth: bool,
    /// A turning array's headings (a simulated scene's), in place of
    /// `array.heading_input.file`.
    pub heading: Option<HeadingTable>,
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
            plot: None,
            bound: true,
            ospa_c_m: 5.0,
            ospa_p: 1.0,
            smooth: false,
            heading: None,
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
    /// A turning array: frames without a heading, and mirror twins decided (the track's side
    /// kept, the mirror taken).
    pub heading: Option<(u64, u64, u64)>,
    /// Frames without a confirmed track, by why (see the status message's `no_track`).
    pub no_track: BTreeMap<&'static str, u64>,
    /// Wall time in the particle filter's steps.
    pub filter_wall: Duration,
    /// Target 0's accuracy (the evaluation's first row), for quick checks.
    pub accuracy: Option<Accuracy>,
    pub evaluation: Option<Evaluation>,
    /// Every frame's reports (kept with truth or plots; empty otherwise).
    pub frames: Vec<FrameReports>,
    /// The smoothed estimates (`--smooth`, `smoothing.lag_s`), kept and scored like `frames`.
    pub smoothed: Vec<EstimateScore>,
    /// The Cramér–Rao bound per frame (with truth, when computed).
    pub bounds: Option<Vec<FrameBound>>,
    /// GCC-PHAT curves kept for plots.
    pub gcc: Option<GccTrace>,
    pub model_names: Vec<String>,
    /// Plot files written.
    pub plots: Vec<PathBuf>,
    pub warnings: Vec<String>,
}

/// One kind of smoothed estimate of a replay: every frame's reports and their evaluation.
#[derive(Debug, Clone)]
pub struct EstimateScore {
    pub kind: EstimateKind,
    pub frames: Vec<FrameReports>,
    pub evaluation: Option<Evaluation>,
}

impl ReplaySummary {
    /// The frames of one estimate: the filtered ones, or a smoothed kind's (None when the replay
    /// made none of that kind).
    pub fn frames_of(&self, kind: EstimateKind) -> Option<&[FrameReports]> {
        if kind == EstimateKind::Filtered {
            return Some(&self.frames);
        }
        self.smoothed
            .iter()
            .find(|e| e.kind == kind)
            .map(|e| e.frames.as_slice())
    }

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
        let truth = match scene.truth {
            Some(t) => Some(truth_for(&cfg, t)?),
            None => None,
        };
        return Ok((cfg, scene.audio, truth));
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
        Some(truth_for(&cfg, Truth::load(&truth_path)?)?)
    } else {
        None
    };
    Ok((cfg, input.into(), truth))
}

/// A turning array's heading table (`array.heading_input.file`), if it has one.
fn heading_table(cfg: &Config) -> Result<Option<HeadingTable>> {
    match cfg
        .array
        .heading_input
        .as_ref()
        .and_then(|h| h.file.as_ref())
    {
        Some(f) => Ok(Some(HeadingTable::load(f)?)),
        None => Ok(None),
    }
}

/// The truth as the array's reports see it: in a turning array's own frame (the truth of a
/// scene is in the scene's frame).
pub fn truth_for(cfg: &Config, truth: Truth) -> Result<Truth> {
    Ok(match heading_table(cfg)? {
        Some(h) => truth_turned(cfg, &truth, &h),
        None => truth,
    })
}

/// `truth` in the frame of `cfg`'s array as it turns by `headings`.
pub fn truth_turned(cfg: &Config, truth: &Truth, headings: &HeadingTable) -> Truth {
    truth.in_array_frame(
        headings,
        &cfg.geometry().centroid().into(),
        cfg.array.speed_of_sound_m_s,
    )
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
    let mut summary = replay_source(cfg, &mut src, origin, truth, opts)?;
    let mut again = if truth.is_some() && opts.bound {
        let mut s = WavSource::open(wav)?;
        if opts.from_s.is_some() || opts.to_s.is_some() {
            s.set_range(opts.from_s, opts.to_s)?;
        }
        Some(s)
    } else {
        None
    };
    finish(
        &mut summary,
        cfg,
        again.as_mut().map(|s| (s as &mut dyn AudioSource, origin)),
        truth,
        opts,
    )?;
    Ok(summary)
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
    let mut sinks = SinkSet::open(
        &cfg.output.sinks,
        &cfg.output.nmea,
        cfg.tracker.max_tracks,
        true,
    )?;
    if let Some(out) = &opts.out {
        // Named without the path: the stream reports on its outputs, and the same replay written
        // to two different files must still be byte-identical.
        sinks.add("replay-out".into(), Box::new(JsonlSink::create(out)?), true);
    }
    let mut pipe = Pipeline::new(
        cfg,
        backends,
        sinks,
        PipelineOptions {
            want_curves: opts.want_curves || opts.plot.is_some(),
            reproducible: opts.reproducible,
            live: false,
            smooth_interval: opts.smooth,
        },
    );
    if let Some(h) = &cfg.array.heading_input {
        let table = match &opts.heading {
            Some(t) => Some(t.clone()),
            None => heading_table(cfg)?,
        };
        let table = match table {
            Some(t) => t,
            None => {
                return Err(Error::Config(crate::error::ConfigError::new(
                    "the configuration",
                    "array.heading_input.file",
                    format!(
                        "a replay needs the array's headings from a file (udp_listen = {:?} is for live runs)",
                        h.udp_listen.as_deref().unwrap_or("")
                    ),
                    "set array.heading_input.file to a time_s,heading_deg CSV, or put heading.csv in the scene directory",
                )));
            }
        };
        pipe.set_heading_feed(HeadingFeed::Table(table));
    }
    let hop = cfg.hop_samples();
    let mut asm = cfg.frame_assembler(origin);
    let total = src.total_frames().unwrap_or(0);
    let bar = opts.progress.then(|| progress_bar(total));
    // Each frame's reports are kept only for the scoring and the plots: a replay without
    // truth or plots holds no more memory after an hour than after a minute.
    let keep_frames = truth.is_some() || opts.plot.is_some();
    let mut frames: Vec<FrameReports> = Vec::new();
    let mut smoothed: BTreeMap<(EstimateKind, u64), Vec<Report>> = BTreeMap::new();
    let mut keep_smoothed = |rs: &[TrackReport]| {
        for r in rs {
            smoothed
                .entry((r.estimate, r.seq))
                .or_default()
                .push(report_of(r));
        }
    };
    let params = cfg.gcc_params();
    let mut gcc = opts
        .plot
        .as_ref()
        .map(|_| GccTrace::new(&params, total / hop.max(1) as u64 + 1, 1200));
    let start = Instant::now();
    let fs = cfg.sample_rate_hz();
    let mut observe = |v: &FrameView| {
        if keep_frames {
            frames.push(FrameReports {
                seq: v.seq,
                t_frame: v.t_centre_s,
                reports: v.reports.iter().map(report_of).collect(),
            });
            keep_smoothed(v.smoothed);
        }
        if let Some(g) = gcc.as_mut() {
            g.push(v.seq, v.t_centre_s, &v.gcc.curves, params.curve_half);
        }
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
    let last = pipe.finish_smoothing();
    if keep_frames {
        keep_smoothed(&last);
    }
    if let Some(pb) = &bar {
        pb.finish_and_clear();
    }
    pipe.sinks.flush(Duration::from_secs(30));
    let wall = start.elapsed();
    let score = |frames: &[FrameReports]| {
        truth
            .map(|t| crate::analysis::score::evaluate(frames, t, None, &eval_options(cfg, t, opts)))
    };
    let evaluation = score(&frames);
    let kinds: Vec<EstimateKind> = [EstimateKind::Smoothed, EstimateKind::Lagged]
        .into_iter()
        .filter(|k| smoothed.keys().any(|(kind, _)| kind == k))
        .collect();
    let smoothed: Vec<EstimateScore> = kinds
        .into_iter()
        .map(|kind| {
            let frames = aligned(&frames, &mut smoothed, kind);
            EstimateScore {
                kind,
                evaluation: score(&frames),
                frames,
            }
        })
        .collect();
    let mut warnings = src.warnings();
    if pipe.counters.frames_in == 0 {
        warnings.extend(shorter_than_a_frame(cfg, total));
    }
    let crosstalk: Vec<String> = pipe
        .crosstalk_seen
        .iter()
        .zip(pipe.pair_channels())
        .filter(|(seen, _)| **seen)
        .map(|(_, (a, b))| format!("{a}-{b}"))
        .collect();
    if !crosstalk.is_empty() {
        warnings.push(format!(
            "crosstalk: channel pairs {} held a peak fixed at lag zero (see gcc.crosstalk_window_s); their zero-lag peaks were ignored while it lasted. Check the wiring and grounding of the recording device",
            crosstalk.join(", ")
        ));
    }
    Ok(ReplaySummary {
        input: src.describe(),
        backend: pipe.backend().to_string(),
        backend_reason: reason,
        audio_s: total as f64 / fs,
        wall,
        counters: pipe.counters.clone(),
        births: pipe.tracker().counts.births,
        deletions: pipe.tracker().counts.deletions,
        tempered_steps: pipe.tracker().counts.tempered_steps,
        heading: cfg.turning().then(|| {
            let t = pipe.tracker();
            let c = &t.counts;
            (c.heading_missing_frames, t.twins.kept, t.twins.taken)
        }),
        no_track: pipe.tracker().counts.no_track.clone(),
        filter_wall: pipe.tracker().counts.filter_wall,
        accuracy: evaluation
            .as_ref()
            .and_then(|e| e.per_target.values().next().cloned()),
        evaluation,
        frames,
        smoothed,
        bounds: None,
        gcc,
        model_names: cfg.tracker.models.iter().map(|m| m.name.clone()).collect(),
        plots: Vec::new(),
        warnings,
    })
}

/// The reports of one smoothed `kind` frame by frame, on the filtered `frames`' sequence
/// numbers (taken out of `by_seq`).
fn aligned(
    frames: &[FrameReports],
    by_seq: &mut BTreeMap<(EstimateKind, u64), Vec<Report>>,
    kind: EstimateKind,
) -> Vec<FrameReports> {
    frames
        .iter()
        .map(|f| FrameReports {
            seq: f.seq,
            t_frame: f.t_frame,
            reports: by_seq.remove(&(kind, f.seq)).unwrap_or_default(),
        })
        .collect()
}

/// A progress bar over `total` sample frames.
fn progress_bar(total: u64) -> indicatif::ProgressBar {
    let pb = indicatif::ProgressBar::new(total);
    pb.set_style(
        indicatif::ProgressStyle::with_template(
            "{spinner} [{elapsed_precise}] {wide_bar} {percent}% {msg} ETA {eta}",
        )
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    pb
}

/// A track report as the evaluation reads it back from a stream.
fn report_of(r: &TrackReport) -> Report {
    Report {
        id: r.id,
        t: r.t_s,
        pos: r.position,
        models: r.model_probs.clone(),
        cov: Some(upper_triangle(&r.pos_cov)),
        range_m: r.range_m(),
        inv_range: r.inv_range,
        direction: r.mode.angular(),
        status: Some(r.status),
        ambiguous: r.mirror.is_some(),
    }
}

/// The warning for audio of `total` sample frames that is too short for a single frame
/// (nothing is tracked then).
fn shorter_than_a_frame(cfg: &Config, total: u64) -> Option<String> {
    let (frame, fs) = (cfg.frame_samples(), cfg.sample_rate_hz());
    (total > 0 && total < frame as u64).then(|| {
        format!(
            "the audio ({:.2} s) is shorter than one frame (gcc.frame_samples = {frame}, {:.2} s): nothing was tracked; replay a longer range or set a shorter gcc.frame_samples",
            total as f64 / fs,
            frame as f64 / fs
        )
    })
}

/// How a replay is scored: against the array's centre, with direction errors for direction-only
/// tracking and for compact arrays (aperture under a fifth of the median range to the truth).
pub fn eval_options(cfg: &Config, truth: &Truth, opts: &ReplayOptions) -> EvalOptions {
    let geo = cfg.geometry();
    let centre = geo.centroid();
    let mut ranges: Vec<f64> = truth
        .targets
        .values()
        .flat_map(|rows| {
            rows.iter()
                .map(|r| (nalgebra::Vector3::from(r.1) - centre).norm())
        })
        .collect();
    ranges.sort_by(f64::total_cmp);
    let median = ranges.get(ranges.len() / 2).copied().unwrap_or(0.0);
    let direction_only = cfg.array.mode.angular();
    let line = cfg
        .line_axes()
        .map(|(a, s)| ([a.x, a.y, a.z], [s.x, s.y, s.z]));
    EvalOptions {
        line,
        line_sides: cfg.turning(),
        warmup_s: opts.warmup_s,
        threshold_m: opts.threshold_m,
        ospa_c_m: opts.ospa_c_m,
        ospa_p: opts.ospa_p,
        centre: centre.into(),
        direction_only,
        angles: direction_only || geo.aperture_m() < 0.2 * median,
        speed_of_sound_m_s: geo.speed_of_sound_m_s,
    }
}

/// After a replay with truth: the bound along the recording (from `src`, a fresh reader of the
/// same audio) and the evaluation against it; then the plots, when asked for.
pub fn finish(
    summary: &mut ReplaySummary,
    cfg: &Config,
    src: Option<(&mut dyn AudioSource, u64)>,
    truth: Option<&Truth>,
    opts: &ReplayOptions,
) -> Result<()> {
    if let (Some(t), Some((src, origin))) = (truth, src) {
        if opts.bound {
            let k = t.targets.keys().next().copied().unwrap_or(0);
            let b = crate::analysis::recording_bound::frame_bounds(cfg, src, origin, t, k)?;
            let e = crate::analysis::score::evaluate(
                &summary.frames,
                t,
                Some(&b),
                &eval_options(cfg, t, opts),
            );
            summary.accuracy = e.per_target.values().next().cloned();
            summary.evaluation = Some(e);
            for s in &mut summary.smoothed {
                s.evaluation = Some(crate::analysis::score::evaluate(
                    &s.frames,
                    t,
                    Some(&b),
                    &eval_options(cfg, t, opts),
                ));
            }
            summary.bounds = Some(b);
        }
    }
    if let Some(dir) = &opts.plot {
        let input = crate::plot::PlotInput {
            cfg,
            frames: &summary.frames,
            model_names: &summary.model_names,
            truth,
            bounds: summary.bounds.as_deref(),
            gcc: summary.gcc.as_ref(),
            warmup_s: opts.warmup_s,
        };
        summary.plots = crate::plot::write_all(dir, &input)?;
    }
    Ok(())
}

impl ReplaySummary {
    /// The accuracy headline: with one target its figures; with several, the worst target's
    /// (fewest frames within the threshold), named as such; a target never tracked is said to
    /// be, never given as figures.
    fn headline(&self) -> Option<String> {
        headline(self.evaluation.as_ref()?)
    }
}

/// An evaluation's headline (see [`ReplaySummary::headline`]).
fn headline(e: &Evaluation) -> Option<String> {
    let per = &e.per_target;
    let (k, a) = per
        .iter()
        .min_by(|x, y| x.1.within_pct.total_cmp(&y.1.within_pct))?;
    let figures = if a.tracked == 0 {
        format!(
            "after {:.1} s no report was assigned to target {k} (0 of {} frames tracked)",
            a.warmup_s, a.frames
        )
    } else {
        a.to_string()
    };
    Some(if per.len() > 1 {
        format!("worst of {} targets, target {k}: {figures}", per.len())
    } else {
        figures
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
        if let Some((missing, kept, taken)) = self.heading {
            writeln!(
                f,
                "heading:  {missing} frames without one; sides decided by the array's turn: {kept} kept, {taken} moved to the mirror"
            )?;
        }
        if !self.no_track.is_empty() {
            let total: u64 = self.no_track.values().sum();
            let why: Vec<String> = self
                .no_track
                .iter()
                .map(|(k, n)| format!("{k} {n}"))
                .collect();
            writeln!(
                f,
                "no track: {total} frames without a confirmed track ({})",
                why.join(", ")
            )?;
        }
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
        let per_frame = |d: f64| d / c.frames_processed.max(1) as f64 * 1e6;
        let filter = self.filter_wall.as_secs_f64();
        let rest = (c.proc_total.as_secs_f64() - c.prep_exposed.as_secs_f64() - filter).max(0.0);
        if c.overlapped {
            writeln!(
                f,
                "stages:   input checks {:.1} us and GCC-PHAT {:.1} us on a second thread, overlapping the tracking ({:.1} us not hidden), particle filter {:.1} us, track management and output {:.1} us per frame",
                per_frame(c.check_total.as_secs_f64()),
                per_frame(c.gcc_total.as_secs_f64()),
                per_frame(c.prep_exposed.as_secs_f64()),
                per_frame(filter),
                per_frame(rest)
            )?;
        } else {
            writeln!(
                f,
                "stages:   input checks {:.1} us, GCC-PHAT {:.1} us, particle filter {:.1} us, track management and output {:.1} us per frame",
                per_frame(c.check_total.as_secs_f64()),
                per_frame(c.gcc_total.as_secs_f64()),
                per_frame(filter),
                per_frame(rest)
            )?;
        }
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
        if let Some(line) = self.headline() {
            writeln!(f, "accuracy: {line}")?;
        }
        if let Some(e) = &self.evaluation {
            writeln!(f, "{e}")?;
        }
        for s in &self.smoothed {
            if let Some(line) = s.evaluation.as_ref().and_then(headline) {
                let name = match s.kind {
                    EstimateKind::Lagged => "lagged",
                    _ => "smoothed",
                };
                writeln!(f, "{name}: {line}")?;
            }
        }
        for p in &self.plots {
            writeln!(f, "plot:     {}", p.display())?;
        }
        Ok(())
    }
}
