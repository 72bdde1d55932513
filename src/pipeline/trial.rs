//! `sonotrack trial`: many scenes of a family, each simulated and replayed in memory (no files)
//! and scored, in parallel on the cores. The same family, seed and settings give the same
//! figures.

use serde::Serialize;

use crate::analysis::trial::{
    FamilySummary, OSPA_C_M, SIDE_DECIDED_WITHIN_S, SceneScore, TrialScoring, scene_table,
    score_scene, summarise,
};
use crate::analysis::truth::Truth;
use crate::audio::sim::SimSource;
use crate::audio::sim::family::FamilySpec;
use crate::config::Config;
use crate::error::{Error, Result};
use crate::gpu::BackendChoice;
use crate::pipeline::replay::{ReplayOptions, replay_source};
use crate::track::TrackMode;
use crate::track::report::EstimateKind;

/// What to run.
#[derive(Debug, Clone)]
pub struct TrialOptions {
    pub runs: u32,
    pub seed: u64,
    /// `--set key=value` overrides of the tracker's configuration, applied to every scene.
    pub sets: Vec<String>,
    /// None: each scene's configuration decides (`tracker.backend`, auto by default).
    pub backend: Option<BackendChoice>,
    pub progress: bool,
    /// Which estimate is scored: filtered, smoothed (each track's RTS once it ends) or lagged
    /// (`smoothing.lag_s`).
    pub estimate: EstimateKind,
}

/// A trial's result (what `--json` writes).
#[derive(Debug, Clone, Serialize)]
pub struct TrialReport {
    pub family: String,
    pub description: String,
    pub seed: u64,
    pub runs: u32,
    pub sets: Vec<String>,
    /// The estimate scored.
    pub estimate: EstimateKind,
    /// Scene length (s), and the tracking mode ("3d" or "direction").
    pub duration_s: f64,
    pub mode: &'static str,
    /// "Within" and "far" distances (m, or degrees in direction mode).
    pub threshold: f64,
    pub far: f64,
    pub summary: FamilySummary,
    pub scenes: Vec<SceneScore>,
}

impl std::fmt::Display for TrialReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let u = self.summary.unit;
        writeln!(
            f,
            "family {}: {} ({} scenes of {} s, seed {}, {} tracking{}; within {} {u}, far {} {u})",
            self.family,
            self.description,
            self.runs,
            self.duration_s,
            self.seed,
            self.mode,
            match self.estimate {
                EstimateKind::Filtered => "",
                EstimateKind::Smoothed => ", smoothed estimates",
                EstimateKind::Lagged => ", lagged estimates",
            },
            self.threshold,
            self.far
        )?;
        write!(f, "{}", scene_table(&self.scenes, u))?;
        writeln!(f, "{}", self.summary)?;
        if let Some(w) = self.summary.worst_scene {
            write!(
                f,
                "  worst scene: {w}; write it with `sonotrack trial --family {} --seed {} --scene {w} --out DIR{}`, then replay and plot it",
                self.family,
                self.seed,
                self.sets
                    .iter()
                    .map(|s| format!(" --set {s}"))
                    .collect::<String>()
            )?;
        }
        Ok(())
    }
}

/// Run `runs` scenes of `family`.
pub fn run_trial(family: &FamilySpec, o: &TrialOptions) -> Result<TrialReport> {
    use rayon::prelude::*;
    if o.runs == 0 {
        return Err(Error::Usage("--runs must be at least 1".into()));
    }
    // The first scene's configuration says the mode and checks the settings before any work.
    let first = scene_config(family, o, 0)?;
    let directions = first.array.mode.angular();
    let bar = o.progress.then(|| {
        let pb = indicatif::ProgressBar::new(u64::from(o.runs));
        pb.set_style(
            indicatif::ProgressStyle::with_template(
                "{spinner} [{elapsed_precise}] {wide_bar} {pos}/{len} scenes ETA {eta}",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        pb
    });
    let scores: Vec<Result<SceneScore>> = (0..o.runs)
        .into_par_iter()
        .map(|i| {
            let s = run_scene(family, o, i, None);
            if let Some(pb) = &bar {
                pb.inc(1);
            }
            s
        })
        .collect();
    if let Some(pb) = &bar {
        pb.finish_and_clear();
    }
    let scenes = scores.into_iter().collect::<Result<Vec<_>>>()?;
    let scoring = scoring_of(family, &first, directions);
    Ok(TrialReport {
        family: family.name.clone(),
        description: family.description.clone(),
        seed: o.seed,
        runs: o.runs,
        sets: o.sets.clone(),
        estimate: o.estimate,
        duration_s: family.duration_s,
        mode: if directions { "direction" } else { "3d" },
        threshold: scoring.threshold,
        far: scoring.far,
        summary: summarise(&scenes, &scoring),
        scenes,
    })
}

/// Scene `index`'s configuration: what a replay of its scene directory starts from, with the
/// trial's overrides.
pub fn scene_config(family: &FamilySpec, o: &TrialOptions, index: u32) -> Result<Config> {
    let spec = family.draw(o.seed, index);
    let cfg = Config::for_scene(&spec).with_overrides(&o.sets)?;
    cfg.validate(&format!("{} scene {index}", family.name))?;
    Ok(cfg)
}

/// How a family's scenes are scored, for a configuration's array.
pub(crate) fn scoring_of(family: &FamilySpec, cfg: &Config, directions: bool) -> TrialScoring {
    let sc = &family.scoring;
    TrialScoring {
        directions,
        azimuth_about: cfg
            .geometry()
            .plane_normal()
            .filter(|_| directions && cfg.array.mode == TrackMode::Direction)
            .map(Into::into),
        threshold: if directions {
            sc.threshold_deg
        } else {
            sc.threshold_m
        },
        far: if directions { sc.far_deg } else { sc.far_m },
        ospa_c: if directions { sc.far_deg } else { OSPA_C_M },
        warmup_s: sc.warmup_s,
        centre: cfg.geometry().centroid().into(),
        line: cfg
            .line_axes()
            .map(|(a, s)| ([a.x, a.y, a.z], [s.x, s.y, s.z])),
        speed_of_sound_m_s: cfg.array.speed_of_sound_m_s,
        duration_s: family.duration_s,
        side_from_s: None,
        line_sides: cfg.turning(),
    }
}

/// Held by a scene replaying on the GPU (see [`run_scene`]).
static GPU_TURN: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Simulate, replay and score scene `index`, writing its position stream to `stream` when
/// given (what the trial scored, frame for frame).
pub fn run_scene(
    family: &FamilySpec,
    o: &TrialOptions,
    index: u32,
    stream: Option<String>,
) -> Result<SceneScore> {
    let spec = family.draw(o.seed, index);
    let cfg = scene_config(family, o, index)?;
    let headings = spec.headings();
    let turn = spec.array_turn;
    let mut sim = SimSource::new(spec)?;
    let mut truth = Truth::from_rows(&sim.truth());
    if let Some(h) = &headings {
        // Scored in the turning array's frame, as it reports.
        truth = crate::pipeline::replay::truth_turned(&cfg, &truth, h);
    }
    let opts = ReplayOptions {
        backend: o.backend.unwrap_or(cfg.tracker.backend),
        progress: false,
        bound: false,
        warmup_s: family.scoring.warmup_s,
        out: stream,
        smooth: o.estimate == EstimateKind::Smoothed,
        heading: headings,
        ..ReplayOptions::default()
    };
    if o.estimate == EstimateKind::Lagged && cfg.lag_frames().is_none() {
        return Err(Error::Usage(
            "--estimate lagged scores the fixed-lag estimates: give their lag too, e.g. --set smoothing.lag_s=1".into(),
        ));
    }
    // Scenes on the GPU take turns: they share the process's CUDA context, and one scene's
    // graph capture on its stream does not survive another's work on the device meanwhile.
    let on_gpu = opts.backend != BackendChoice::Cpu && crate::gpu::available().is_ok();
    let gpu_turn = on_gpu.then(|| GPU_TURN.lock().unwrap_or_else(|e| e.into_inner()));
    let summary = replay_source(&cfg, &mut sim, 0, Some(&truth), &opts)?;
    drop(gpu_turn);
    let directions = cfg.array.mode.angular();
    let mut scoring = scoring_of(family, &cfg, directions);
    scoring.side_from_s = turn.map(|t| t.start_s + SIDE_DECIDED_WITHIN_S);
    let frames = summary
        .frames_of(o.estimate)
        .unwrap_or(summary.frames.as_slice());
    Ok(score_scene(index, frames, &truth, &scoring, summary.load()))
}

/// The unit of scene `index`'s distance figures: "deg" when it tracks directions, else "m".
pub fn unit_of(family: &FamilySpec, o: &TrialOptions, index: u32) -> Result<&'static str> {
    let cfg = scene_config(family, o, index)?;
    Ok(if cfg.array.mode.angular() { "deg" } else { "m" })
}
