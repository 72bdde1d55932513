//! `sonotrack check`: validate a configuration and explain what it will do.

use std::path::PathBuf;

use sonotrack::audio::AudioSource;
use sonotrack::audio::wav::WavSource;
use sonotrack::config::Config;
use sonotrack::error::Result;

/// The arguments of `sonotrack check`.
#[derive(clap::Args)]
pub struct Args {
    /// Configuration file (TOML) to check.
    pub config: PathBuf,
    /// Also check it against this WAV file (channels, sample rate).
    #[arg(long)]
    pub wav: Option<PathBuf>,
    /// Override a configuration key before checking, e.g. --set tracker.particles=65536 (repeatable).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub sets: Vec<String>,
}
pub fn run(a: Args) -> Result<()> {
    let cfg = Config::load(&a.config)?.with_overrides(&a.sets)?;
    if let Some(w) = a.wav {
        let src = WavSource::open(&w)?;
        cfg.check_input(
            &w.display().to_string(),
            src.channels(),
            src.sample_rate_hz(),
        )?;
        if !super::quiet() {
            println!(
                "{}: {} channels at {} Hz, {:.1} s: matches",
                w.display(),
                src.channels(),
                src.sample_rate_hz(),
                src.total_frames().unwrap_or(0) as f64 / f64::from(src.sample_rate_hz())
            );
        }
    }
    if !super::quiet() {
        print!("{}: OK\n{}", a.config.display(), cfg.explain());
    }
    Ok(())
}
