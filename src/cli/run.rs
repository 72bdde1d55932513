//! `sonotrack run`: the live daemon.

use std::path::PathBuf;

use sonotrack::error::Result;
use sonotrack::pipeline::daemon::{self, RunOptions};

/// The arguments of `sonotrack run`.
#[derive(clap::Args)]
pub struct Args {
    /// Configuration file (TOML): array, audio device, outputs.
    #[arg(long)]
    pub config: PathBuf,
    /// Override a configuration key, e.g. --set tracker.particles=65536 (repeatable).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub sets: Vec<String>,
    /// Backend: auto, cpu or cuda (default: the configuration's).
    #[arg(long, value_enum)]
    pub backend: Option<super::BackendArg>,
    /// Read this WAV file paced like a live device instead of capturing.
    #[arg(long)]
    pub input: Option<PathBuf>,
    /// Or simulate a built-in scene (harbour, tetra, room, two-boats) paced like a live
    /// device; the configuration's array must be the preset's.
    #[arg(long, conflicts_with = "input")]
    pub simulate: Option<String>,
    /// Pace factor for --input (1 = real time).
    #[arg(long, default_value_t = 1.0, value_parser = super::values::pace)]
    pub speed: f64,
    /// Stop after this many seconds.
    #[arg(long, value_parser = super::values::duration)]
    pub seconds: Option<f64>,
}
pub fn run(a: Args) -> Result<()> {
    let summary = daemon::run(&RunOptions {
        config: a.config,
        sets: a.sets,
        backend: a.backend.map(Into::into),
        input: a.input,
        simulate: a.simulate,
        speed: a.speed,
        max_seconds: a.seconds,
    })?;
    if !super::quiet() {
        eprint!("{summary}");
    }
    Ok(())
}
