//! `sonotrack plan`: how well an array can locate a source, mapped over its search volume.

use std::path::PathBuf;

use sonotrack::analysis::plan::{PlanOptions, plan};
use sonotrack::config::Config;
use sonotrack::error::Result;
use sonotrack::plot::plan_map::write_maps;

/// The arguments of `sonotrack plan`.
#[derive(clap::Args)]
pub struct Args {
    /// Configuration file (TOML) whose array and search volume to map.
    pub config: PathBuf,
    /// Write the maps (PNG) and plan.json here.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Per-channel SNR over the band (dB) when the source is --at metres from a sensor.
    #[arg(long, default_value_t = 10.0, value_parser = super::values::decibels)]
    pub snr_db: f64,
    /// Distance (m) from the nearest sensor at which the source has the --snr-db SNR (spherical spreading elsewhere).
    #[arg(long, default_value_t = 20.0, value_parser = super::values::metres)]
    pub at: f64,
    /// Source spectrum over the band: white (flat), pink (1/f) or ship (flat to 100 Hz, then 1/f²).
    #[arg(long, value_enum, default_value = "white")]
    pub spectrum: sonotrack::analysis::plan::SourceSpectrum,
    /// Grid points along each axis.
    #[arg(long, default_value_t = 120, value_parser = super::values::resolution)]
    pub resolution: usize,
    /// Depth (z, m) of the horizontal map (default: the middle of the search volume).
    #[arg(long, allow_hyphen_values = true, value_parser = super::values::coordinate)]
    pub depth: Option<f64>,
    /// Override a configuration key, e.g. --set gcc.band_hz=[200,8000] (repeatable).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub sets: Vec<String>,
}
pub fn run(a: Args) -> Result<()> {
    let cfg = Config::load(&a.config)?.with_overrides(&a.sets)?;
    let opts = PlanOptions {
        snr_db: a.snr_db,
        at_m: a.at,
        spectrum: a.spectrum,
        resolution: a.resolution.clamp(8, 1000),
        z_m: a.depth,
        ..Default::default()
    };
    let t = std::time::Instant::now();
    let mut report = plan(&cfg, &opts)?;
    if let Some(dir) = &a.out {
        report.files = write_maps(dir, &report, &cfg.array.sensors_m)?;
    }
    if !super::quiet() {
        print!("{report}");
        println!("({:.1} s)", t.elapsed().as_secs_f64());
    }
    Ok(())
}
