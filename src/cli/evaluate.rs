//! `sonotrack evaluate`: score a position stream against truth.

use std::path::{Path, PathBuf};

use sonotrack::analysis::recording_bound::{FrameBound, frame_bounds};
use sonotrack::analysis::score::{EvalOptions, evaluate};
use sonotrack::analysis::stream::{read_stream, stream_holds_directions};
use sonotrack::analysis::truth::Truth;
use sonotrack::audio::wav::WavSource;
use sonotrack::config::Config;
use sonotrack::error::{Error, Result};
use sonotrack::pipeline::replay::{self, ReplayOptions};
use sonotrack::track::TrackMode;

/// The arguments of `sonotrack evaluate`.
#[derive(clap::Args)]
pub struct Args {
    /// The position stream.
    pub tracks: PathBuf,
    /// Ground truth (t,target,x,y,z with t the emission time). Default: the scene's.
    #[arg(long)]
    pub truth: Option<PathBuf>,
    /// Scene directory the stream came from (truth, audio and array for the bound).
    #[arg(long)]
    pub scene: Option<PathBuf>,
    /// Or: the recording and its configuration (for the bound).
    #[arg(long)]
    pub audio: Option<PathBuf>,
    /// Configuration of the recording given with --audio.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Accuracy ignores the first seconds (track start-up).
    #[arg(long, default_value_t = 2.0, value_parser = super::values::seconds)]
    pub warmup: f64,
    /// Distance for the "% of time within" figure, metres.
    #[arg(long, default_value_t = 2.0, value_parser = super::values::metres)]
    pub threshold: f64,
    /// OSPA cut-off, metres.
    #[arg(long, default_value_t = 5.0, value_parser = super::values::metres)]
    pub ospa_c: f64,
    /// OSPA order.
    #[arg(long, default_value_t = 1.0, value_parser = super::values::ospa_order)]
    pub ospa_p: f64,
    /// Also write the evaluation as JSON.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Which estimate to score: the filtered track messages, or the smoothed messages that
    /// `replay --smooth` (smoothed) or `smoothing.lag_s` (lagged) wrote.
    #[arg(long, value_enum, default_value_t = super::EstimateArg::Filtered)]
    pub estimate: super::EstimateArg,
}
pub fn run(a: Args) -> Result<()> {
    let frames = read_stream(&a.tracks, a.estimate.into())?;
    let (mut cfg, wav, scene_truth) = inputs(&a)?;
    let truth = match (&a.truth, scene_truth) {
        (Some(p), _) => match &cfg {
            // (A turning array's reports are in its own frame.)
            Some(c) => replay::truth_for(c, Truth::load(p)?)?,
            None => Truth::load(p)?,
        },
        (None, Some(t)) => t,
        (None, None) => {
            return Err(Error::Usage(
                "no truth: give --truth truth.csv or --scene DIR holding truth.csv".into(),
            ));
        }
    };
    // (A filtered stream with frames but no report is scored: nothing was tracked.)
    let none = match a.estimate {
        super::EstimateArg::Filtered => frames.is_empty(),
        _ => frames.iter().all(|f| f.reports.is_empty()),
    };
    if none {
        return Err(Error::Usage(format!(
            "{}: no {} to evaluate{}",
            a.tracks.display(),
            a.estimate.messages(),
            a.estimate.how_to_get()
        )));
    }
    // The stream says what it holds: a stream of directions (written with `--set
    // array.mode=direction`, say) is scored as directions whatever the scene's array.json says,
    // and 3-D positions as positions.
    let holds_directions = stream_holds_directions(&frames).map_err(|problem| Error::Scene {
        path: a.tracks.clone(),
        problem,
        fix: "give one run's stream".into(),
    })?;
    if let (Some(c), Some(directions)) = (cfg.as_mut(), holds_directions) {
        score_as_the_stream_holds(c, directions, &a.tracks)?;
    }
    let (eopts, bounds) = match &cfg {
        Some(c) => {
            let bounds = match &wav {
                Some(w) => Some(bounds_along(c, w, &truth)?),
                None => None,
            };
            let ropts = ReplayOptions {
                warmup_s: a.warmup,
                threshold_m: a.threshold,
                ospa_c_m: a.ospa_c,
                ospa_p: a.ospa_p,
                ..ReplayOptions::default()
            };
            (replay::eval_options(c, &truth, &ropts), bounds)
        }
        None => (
            options_without_array(&a, holds_directions == Some(true)),
            None,
        ),
    };
    let e = evaluate(&frames, &truth, bounds.as_deref(), &eopts);
    if !super::quiet() {
        println!("{e}");
    }
    if bounds.is_none() && !super::quiet() {
        println!("  (give --scene DIR, or --audio WAV --config C, for the Cramér–Rao bound)");
    }
    if let Some(path) = a.json {
        super::write_json(&path, &e)?;
    }
    Ok(())
}

/// Where the configuration, the audio and the truth come from: a scene directory, or a
/// recording with its configuration, or a configuration alone.
fn inputs(a: &Args) -> Result<(Option<Config>, Option<PathBuf>, Option<Truth>)> {
    Ok(match (&a.scene, &a.audio) {
        (Some(dir), _) => {
            let (c, w, t) = replay::resolve(dir, a.config.as_deref())?;
            (Some(c), Some(w), t)
        }
        (None, Some(w)) => {
            let Some(c) = &a.config else {
                return Err(Error::Usage(
                    "--audio needs --config (the array and frame settings the stream used)".into(),
                ));
            };
            (Some(Config::load(c)?), Some(w.clone()), None)
        }
        (None, None) => (
            a.config.as_deref().map(Config::load).transpose()?,
            None,
            None,
        ),
    })
}

/// Score the stream as what it holds (directions or 3-D positions), saying so where the
/// configuration tracks the other kind.
fn score_as_the_stream_holds(c: &mut Config, directions: bool, tracks: &Path) -> Result<()> {
    let mode = if directions {
        TrackMode::Direction
    } else {
        TrackMode::ThreeD
    };
    if c.array.mode == mode || (directions && c.array.mode == TrackMode::Line) {
        return Ok(());
    }
    let name = |m: TrackMode| match m {
        TrackMode::Direction => "directions",
        TrackMode::Line => "angles to a line array's axis",
        TrackMode::ThreeD => "3-D positions",
    };
    println!(
        "note: {} holds {}, where the configuration tracks {}: scored as {}",
        tracks.display(),
        name(mode),
        name(c.array.mode),
        name(mode)
    );
    c.array.mode = mode;
    c.validate(&tracks.display().to_string())?;
    Ok(())
}

/// The Cramér–Rao bound along the recording `wav`, for the first truth target.
fn bounds_along(c: &Config, wav: &Path, truth: &Truth) -> Result<Vec<FrameBound>> {
    let mut src = WavSource::open(wav)?;
    let k = truth.targets.keys().next().copied().unwrap_or(0);
    frame_bounds(c, &mut src, 0, truth, k)
}

/// How to score without the array: from the origin, directions against the truth at the
/// report's own time.
fn options_without_array(a: &Args, direction_only: bool) -> EvalOptions {
    if direction_only {
        println!(
            "note: {} holds directions; without the array (--scene, or --config) they are scored from the origin, and against the truth at the report's own time",
            a.tracks.display()
        );
    }
    EvalOptions {
        warmup_s: a.warmup,
        threshold_m: a.threshold,
        ospa_c_m: a.ospa_c,
        ospa_p: a.ospa_p,
        direction_only,
        ..Default::default()
    }
}
