//! `sonotrack demo`: a built-in scene simulated and tracked in memory, its track printed beside
//! the truth.

use std::path::PathBuf;

use sonotrack::analysis::truth::Truth;
use sonotrack::audio::AudioSource;
use sonotrack::audio::sim::{SceneSpec, SimSource};
use sonotrack::config::Config;
use sonotrack::error::{Error, Result};
use sonotrack::pipeline::replay::{self, ReplayOptions, ReplaySummary};

use super::unknown_preset;

/// The arguments of `sonotrack demo`.
#[derive(clap::Args)]
pub struct Args {
    /// Built-in scene to simulate.
    #[arg(long, default_value = "harbour")]
    pub preset: String,
    /// Random seed of the scene and the tracker (default: the preset's).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Seconds of audio to simulate.
    #[arg(long, value_parser = super::values::duration)]
    pub duration: Option<f64>,
    /// Backend: auto (the GPU when it works, else the CPU), cpu or cuda.
    #[arg(long, value_enum, default_value = "auto")]
    pub backend: super::BackendArg,
    /// Write plots (tracks, error with the bound, GCC-PHAT heat map, model probabilities)
    /// into this directory.
    #[arg(long)]
    pub plot: Option<PathBuf>,
}
pub fn run(a: Args) -> Result<()> {
    let mut spec = SceneSpec::preset(&a.preset).ok_or_else(|| unknown_preset(&a.preset))?;
    if let Some(s) = a.seed {
        spec.seed = s;
    }
    if let Some(d) = a.duration {
        spec.duration_s = d;
    }
    let cfg = Config::for_scene(&spec);
    cfg.validate("demo")?;
    if !super::quiet() {
        println!(
            "demo: {} ({} s at {} Hz, SNR {} dB); simulating and tracking in memory...",
            spec.description, spec.duration_s, spec.sample_rate_hz, spec.snr_db
        );
    }
    let mut sim = SimSource::new(spec.clone())?;
    let truth = truth_of(&mut sim)?;
    let opts = ReplayOptions {
        backend: a.backend.into(),
        warmup_s: 2.0,
        threshold_m: 1.0,
        plot: a.plot,
        ..ReplayOptions::default()
    };
    let mut summary = replay::replay_source(&cfg, &mut sim, 0, Some(&truth), &opts)?;
    // The bound needs the audio again: the simulation is deterministic, so simulate it anew.
    let mut again = SimSource::new(spec)?;
    replay::finish(
        &mut summary,
        &cfg,
        Some((&mut again as &mut dyn AudioSource, 0)),
        Some(&truth),
        &opts,
    )?;
    if !super::quiet() {
        print_track(&summary, &truth);
        print!("{summary}");
    }
    Ok(())
}

/// The simulation's truth, as a scene's truth.csv would give it.
fn truth_of(sim: &mut SimSource) -> Result<Truth> {
    let mut csv = String::new();
    for (t, id, p) in sim.truth() {
        csv.push_str(&format!("{t},{id},{},{},{}\n", p[0], p[1], p[2]));
    }
    Truth::parse(&csv).map_err(|(l, e)| Error::Usage(format!("truth line {l}: {e}")))
}

/// The first track beside the truth, once a second.
fn print_track(summary: &ReplaySummary, truth: &Truth) {
    println!(
        "{:>7} {:>26} {:>26} {:>8}",
        "t (s)", "track x, y, z (m)", "truth x, y, z (m)", "err (m)"
    );
    let mut next = 0.0;
    for f in &summary.frames {
        let t_frame = &f.t_frame;
        if *t_frame < next {
            continue;
        }
        next = t_frame.floor() + 1.0;
        match f.reports.first().map(|r| (&r.t, &r.pos)) {
            Some((t, p)) => {
                let q = truth.at(0, *t).unwrap_or([f64::NAN; 3]);
                let e =
                    ((p[0] - q[0]).powi(2) + (p[1] - q[1]).powi(2) + (p[2] - q[2]).powi(2)).sqrt();
                println!(
                    "{t:>7.2} {:>8.2} {:>8.2} {:>8.2} {:>8.2} {:>8.2} {:>8.2} {e:>8.3}",
                    p[0], p[1], p[2], q[0], q[1], q[2]
                );
            }
            None => println!("{t_frame:>7.2} {:>26} {:>26}", "(no track yet)", ""),
        }
    }
}
