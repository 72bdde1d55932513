//! `sonotrack replay`: a recording (or a scene directory) through the pipeline, with its
//! evaluation when truth is there.

use std::path::PathBuf;

use sonotrack::error::Result;
use sonotrack::pipeline::replay::{self, ReplayOptions, ReplaySummary};

/// The arguments of `sonotrack replay`.
#[derive(clap::Args)]
pub struct Args {
    /// Scene directory or WAV file.
    pub input: PathBuf,
    /// Configuration (required for a WAV file; for a scene directory it replaces the
    /// defaults derived from array.json).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Write the position stream (JSON Lines) to this file ("-" for standard output).
    #[arg(long)]
    pub out: Option<String>,
    /// Backend: auto (the GPU when it works, else the CPU), cpu or cuda (default: the configuration's).
    #[arg(long, value_enum)]
    pub backend: Option<super::BackendArg>,
    /// Override a configuration key, e.g. --set tracker.particles=65536 (repeatable).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub sets: Vec<String>,
    /// Start at this time (seconds into the file).
    #[arg(long, value_parser = super::values::seconds)]
    pub from: Option<f64>,
    /// Stop at this time (seconds into the file).
    #[arg(long, value_parser = super::values::seconds)]
    pub to: Option<f64>,
    /// Pace the replay like live capture (optionally faster: --realtime 2).
    #[arg(long, num_args = 0..=1, default_missing_value = "1.0", value_parser = super::values::pace)]
    pub realtime: Option<f64>,
    /// No progress bar.
    #[arg(long)]
    pub no_progress: bool,
    /// Leave measured timings out of the output so runs can be diffed byte for byte.
    #[arg(long)]
    pub reproducible: bool,
    /// Accuracy ignores the first seconds (track start-up).
    #[arg(long, default_value_t = 2.0, value_parser = super::values::seconds)]
    pub warmup: f64,
    /// Distance for the "% of time within" figure, metres.
    #[arg(long, default_value_t = 2.0, value_parser = super::values::metres)]
    pub threshold: f64,
    /// Also write the summary (counters, accuracy) as JSON.
    #[arg(long)]
    pub summary_json: Option<PathBuf>,
    /// Write plots (tracks, error with the bound, GCC-PHAT heat map, model probabilities)
    /// into this directory.
    #[arg(long)]
    pub plot: Option<PathBuf>,
    /// Skip the Cramér–Rao bound (a second pass over the audio when truth is present).
    #[arg(long)]
    pub no_bound: bool,
    /// OSPA cut-off (m) for scenes with several targets.
    #[arg(long, default_value_t = 5.0, value_parser = super::values::metres)]
    pub ospa_c: f64,
    /// Also write each track smoothed over all of its data (Rauch–Tung–Striebel, once the
    /// track ends) as `"type": "smoothed"` messages, and score them beside the filtered ones.
    /// Keeps each live track's reports until it ends (about 0.6 kB a frame). Measured: half the
    /// error on the shared recordings, worse on the random trial families (BENCHMARKS.md).
    #[arg(long)]
    pub smooth: bool,
}
pub fn run(a: Args) -> Result<()> {
    let (cfg, wav, truth) = replay::resolve(&a.input, a.config.as_deref())?;
    let cfg = cfg.with_overrides(&a.sets)?;
    let opts = ReplayOptions {
        backend: a.backend.map(Into::into).unwrap_or(cfg.tracker.backend),
        out: a.out,
        from_s: a.from,
        to_s: a.to,
        pace: a.realtime,
        progress: !a.no_progress,
        reproducible: a.reproducible,
        want_curves: false,
        warmup_s: a.warmup,
        threshold_m: a.threshold,
        plot: a.plot,
        bound: !a.no_bound,
        ospa_c_m: a.ospa_c,
        ospa_p: 1.0,
        smooth: a.smooth,
        heading: None,
    };
    let summary = replay::replay_file(&cfg, &wav, truth.as_ref(), &opts)?;
    if !super::quiet() {
        eprint!("{summary}");
    }
    if let Some(path) = a.summary_json {
        super::write_json(&path, &summary_json(&summary))?;
    }
    Ok(())
}

/// The summary as `--summary-json` writes it: counters, timings and the evaluation.
fn summary_json(summary: &ReplaySummary) -> serde_json::Value {
    serde_json::json!({
        "input": summary.input,
        "backend": summary.backend,
        "audio_s": summary.audio_s,
        "processing_s": summary.counters.proc_total.as_secs_f64(),
        "checks_s": summary.counters.check_total.as_secs_f64(),
        "gcc_s": summary.counters.gcc_total.as_secs_f64(),
        // Checks and correlation not hidden behind the tracking (all of them unless
        // "overlapped").
        "prep_exposed_s": summary.counters.prep_exposed.as_secs_f64(),
        "overlapped": summary.counters.overlapped,
        "filter_s": summary.filter_wall.as_secs_f64(),
        "frames_in": summary.counters.frames_in,
        "frames_processed": summary.counters.frames_processed,
        "frames_dropped": summary.counters.frames_dropped(),
        "births": summary.births,
        "accuracy": summary.accuracy,
        "evaluation": summary.evaluation,
        "smoothed": summary.smoothed.iter().map(|s| serde_json::json!({
            "estimate": s.kind,
            "evaluation": s.evaluation,
        })).collect::<Vec<_>>(),
        "plots": summary.plots,
    })
}
