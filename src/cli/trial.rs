//! `sonotrack trial`: many random scenes of a family, simulated, tracked and scored in memory.

use std::path::PathBuf;

use sonotrack::analysis::trial::scene_table;
use sonotrack::audio::sim::family::{BUILT_IN, FamilySpec};
use sonotrack::audio::sim::write_scene;
use sonotrack::error::Result;
use sonotrack::pipeline::fuse_trial::run_two_array_trial;
use sonotrack::pipeline::trial::{TrialOptions, run_scene, run_trial, scene_config, unit_of};

/// The arguments of `sonotrack trial`.
#[derive(clap::Args)]
pub struct Args {
    /// A built-in family (pass-through, manoeuvre, faults, crossing, noise-only, compact-ring,
    /// distributed-room, line-room, soundbar, towed-line, weak-source, two-array) or a family
    /// file (TOML). A family with a `[second_array]` (two-array) scores each array alone and
    /// the fusion of the two.
    #[arg(long, default_value = "pass-through")]
    pub family: String,
    /// Scenes to draw.
    #[arg(long, default_value_t = 20, value_parser = super::values::runs)]
    pub runs: u32,
    /// Seed of the draw: the same seed gives the same scenes and figures.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Also write the figures as JSON (the format is in README.md, "Trials").
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Override a configuration key in every scene, e.g. --set tracker.max_tracks=8.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub sets: Vec<String>,
    /// Backend: auto, cpu or cuda (default: the configuration's, auto).
    #[arg(long, value_enum)]
    pub backend: Option<super::BackendArg>,
    /// No progress bar.
    #[arg(long)]
    pub no_progress: bool,
    /// Write scene INDEX of the draw as a scene directory into --out (to replay or plot it)
    /// instead of running the trial.
    #[arg(long, value_name = "INDEX", requires = "out", value_parser = super::values::scene_index)]
    pub scene: Option<u32>,
    /// With --scene: write that scene's directory here.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Scene length (s), in place of the family's.
    #[arg(long, value_parser = super::values::duration)]
    pub duration: Option<f64>,
    /// Which estimate to score: filtered, smoothed (each track by RTS over all of its data) or
    /// lagged (the fixed-lag estimates; give --set smoothing.lag_s=SECONDS).
    #[arg(long, value_enum, default_value_t = super::EstimateArg::Filtered)]
    pub estimate: super::EstimateArg,
    /// Print a built-in family's file and exit.
    #[arg(long, value_name = "NAME")]
    pub print_family: Option<String>,
}

pub fn run(a: Args) -> Result<()> {
    if let Some(name) = &a.print_family {
        let text = BUILT_IN
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, t)| *t)
            .ok_or_else(|| {
                sonotrack::error::Error::Usage(format!(
                    "no built-in family `{name}`; there are {}",
                    BUILT_IN
                        .iter()
                        .map(|(n, _)| *n)
                        .collect::<Vec<_>>()
                        .join(", ")
                ))
            })?;
        print!("{text}");
        return Ok(());
    }
    let mut family = FamilySpec::find(&a.family)?;
    if let Some(d) = a.duration {
        family = family.with_duration(d)?;
    }
    let opts = TrialOptions {
        runs: a.runs,
        seed: a.seed,
        sets: a.sets,
        backend: a.backend.map(Into::into),
        progress: !a.no_progress,
        estimate: a.estimate.into(),
    };
    if let (Some(index), Some(out)) = (a.scene, &a.out) {
        let spec = family.draw(a.seed, index);
        // Checked as the trial would run it.
        scene_config(&family, &opts, index)?;
        write_scene(out, &spec, false)?;
        let stream = out.join("trial-tracks.jsonl");
        let score = run_scene(&family, &opts, index, Some(stream.display().to_string()))?;
        if !super::quiet() {
            println!(
                "{}",
                scene_table(
                    std::slice::from_ref(&score),
                    unit_of(&family, &opts, index)?
                )
                .trim_end()
            );
            eprintln!(
                "the trial's own run of it: {} (a replay of the directory reads the audio back from the WAV and may differ in detail)",
                stream.display()
            );
            eprintln!(
                "wrote scene {index} of {} (seed {}) to {}; replay it with: sonotrack replay {} --plot {}/plots{}",
                family.name,
                a.seed,
                out.display(),
                out.display(),
                out.display(),
                opts.sets
                    .iter()
                    .map(|s| format!(" --set {s}"))
                    .collect::<String>()
            );
        }
        return Ok(());
    }
    // Each scene's births and deletions would bury the table: warnings only, unless -v.
    let level = log::max_level();
    if level < log::LevelFilter::Debug {
        log::set_max_level(log::LevelFilter::Warn);
    }
    let start = std::time::Instant::now();
    if family.second_array.is_some() {
        let report = run_two_array_trial(&family, &opts);
        log::set_max_level(level);
        return show(&report?, start, a.json.as_deref());
    }
    let report = run_trial(&family, &opts);
    log::set_max_level(level);
    show(&report?, start, a.json.as_deref())
}

/// Print a trial's report with its run time, and write it as JSON when asked.
fn show<R: std::fmt::Display + serde::Serialize>(
    report: &R,
    start: std::time::Instant,
    json: Option<&std::path::Path>,
) -> Result<()> {
    if !super::quiet() {
        println!("{report}");
        println!("({:.1} s)", start.elapsed().as_secs_f64());
    }
    if let Some(path) = json {
        super::write_json(path, report)?;
    }
    Ok(())
}
