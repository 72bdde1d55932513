//! `sonotrack simulate`: write a simulated scene directory.

use std::path::PathBuf;

use sonotrack::audio::sim::family::FamilySpec;
use sonotrack::audio::sim::{SceneSpec, write_scene, write_site};
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
    /// Scene file (TOML); see --print-preset for the format. `[[other_array]]` tables add
    /// arrays hearing the same scene (a site directory: one scene directory per array).
    #[arg(long, conflicts_with = "family")]
    pub spec: Option<PathBuf>,
    /// Or scene --index of a trial family (built-in name or file), as `trial --family F --seed
    /// S` draws it; a family with a second array writes a site directory.
    #[arg(long)]
    pub family: Option<String>,
    /// With --family: which scene (0-based).
    #[arg(long, default_value_t = 0, requires = "family")]
    pub index: u32,
    /// Seconds of audio (default: the preset's or the scene file's).
    #[arg(long, value_parser = super::values::duration)]
    pub duration: Option<f64>,
    /// Per-channel SNR over the band, dB (default: the preset's or the scene file's).
    #[arg(long, value_parser = super::values::decibels)]
    pub snr_db: Option<f64>,
    /// Random seed of the noise and signals (default: the preset's or the scene file's); with
    /// --family, the trial's seed (default 1).
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
    let mut s = match (&a.spec, &a.family) {
        (Some(p), _) => SceneSpec::load(p)?,
        (None, Some(f)) => {
            let mut family = FamilySpec::find(f)?;
            if let Some(d) = a.duration {
                family = family.with_duration(d)?;
            }
            family.draw(a.seed.unwrap_or(1), a.index)
        }
        (None, None) => SceneSpec::preset(&a.preset).ok_or_else(|| unknown_preset(&a.preset))?,
    };
    if let Some(d) = a.duration {
        s.duration_s = d;
    }
    if let Some(x) = a.snr_db {
        s.snr_db = x;
    }
    if let (Some(x), None) = (a.seed, &a.family) {
        s.seed = x;
    }
    s.validate()
        .map_err(|problem| Error::Usage(format!("the scene: {problem}")))?;
    let start = std::time::Instant::now();
    if !s.other_arrays.is_empty() {
        let names = write_site(&out, &s, a.s16)?;
        if !super::quiet() {
            print_site_help(
                &out,
                &names,
                a.s16,
                s.duration_s,
                start.elapsed().as_secs_f64(),
            );
        }
        return Ok(());
    }
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

/// How to run a site directory: a broker, a node per array, the fusion service.
fn print_site_help(
    out: &std::path::Path,
    names: &[String],
    s16: bool,
    duration_s: f64,
    took_s: f64,
) {
    eprintln!(
        "wrote {} ({} arrays: {}) in {took_s:.1} s; with a Mosquitto broker on 127.0.0.1:1883, from that directory:",
        out.display(),
        names.len(),
        names.join(", ")
    );
    eprintln!(
        "  sonotrack fuse --config fuse.toml --seconds {:.0} &",
        duration_s + 5.0
    );
    for n in names {
        let wav = if s16 { "audio_s16.wav" } else { "audio.wav" };
        eprintln!("  sonotrack run --config {n}/node.toml --input {n}/{wav} &");
    }
    eprintln!(
        "  (fused tracks go to fused.jsonl; each array alone: sonotrack replay {}/<array>)",
        out.display()
    );
}
