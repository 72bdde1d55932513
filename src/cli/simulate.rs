//! `sonotrack simulate`: write a simulated scene directory.

use std::path::PathBuf;

use sonotrack::audio::sim::{SceneSpec, write_scene};
use sonotrack::error::{Error, Result};

use super::unknown_preset;

/// The arguments of `sonotrack simulate`.
#[derive(clap::Args)]
pub struct Args {
    /// Output directory.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Built-in scene (harbour, tetra, room, two-boats).
    #[arg(long, default_value = "harbour")]
    pub preset: String,
    /// Scene file (TOML); see --print-preset for the format.
    #[arg(long)]
    pub spec: Option<PathBuf>,
    /// Seconds of audio (default: the preset's or the scene file's).
    #[arg(long, value_parser = super::values::duration)]
    pub duration: Option<f64>,
    /// Per-channel SNR over the band, dB (default: the preset's or the scene file's).
    #[arg(long, value_parser = super::values::decibels)]
    pub snr_db: Option<f64>,
    /// Random seed of the noise and signals (default: the preset's or the scene file's).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Write 16-bit PCM (audio_s16.wav) instead of 32-bit float (audio.wav).
    #[arg(long)]
    pub s16: bool,
    /// Print a preset as a scene file and exit.
    #[arg(long)]
    pub print_preset: Option<String>,
}
pub fn run(a: Args) -> Result<()> {
    if let Some(name) = a.print_preset {
        let s = SceneSpec::preset(&name).ok_or_else(|| unknown_preset(&name))?;
        print!("{}", toml::to_string_pretty(&s).unwrap_or_default());
        return Ok(());
    }
    let Some(out) = a.out else {
        return Err(Error::Usage(
            "simulate needs --out DIR (or --print-preset NAME)".into(),
        ));
    };
    let mut s = match a.spec {
        Some(p) => SceneSpec::load(&p)?,
        None => SceneSpec::preset(&a.preset).ok_or_else(|| unknown_preset(&a.preset))?,
    };
    if let Some(d) = a.duration {
        s.duration_s = d;
    }
    if let Some(x) = a.snr_db {
        s.snr_db = x;
    }
    if let Some(x) = a.seed {
        s.seed = x;
    }
    let start = std::time::Instant::now();
    write_scene(&out, &s, a.s16)?;
    // A track slot per source, where the default has too few.
    let default_slots = sonotrack::config::TrackerConfig::default().max_tracks;
    let slots = match s.sources.len() {
        n if n <= default_slots => String::new(),
        n => format!(" --set tracker.max_tracks={n}"),
    };
    if !super::quiet() {
        eprintln!(
            "wrote {} ({} s, {} sensors, {} source(s), SNR {} dB) in {:.1} s; replay it with: sonotrack replay {}{slots}",
            out.display(),
            s.duration_s,
            s.sensors_m.len(),
            s.sources.len(),
            s.snr_db,
            start.elapsed().as_secs_f64(),
            out.display()
        );
    }
    Ok(())
}
