//! `sonotrack plan`: how well an array can locate a source, mapped over its search volume.

use std::path::PathBuf;

use sonotrack::analysis::plan::{PlanOptions, plan};
use sonotrack::config::Config;
use sonotrack::error::Result;
use sonotrack::plot::plan_map::write_maps;

/// The arguments of `sonotrack plan`.
#[derive(clap::Args)]
pub struct Args {
    pub config: PathBuf,
    /// Write the maps (PNG) and plan.json here.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Per-channel SNR over the band (dB) when the source is --at metres from a sensor.
    #[arg(long, default_value_t = 10.0, value_parser = super::values::decibels)]
    pub snr_db: f64,
    #[arg(long, default_value_t = 20.0, value_parser = super::values::metres)]
    pub at: f64,
    #[arg(long, value_enum, default_value = "white")]
    pub spectrum: sonotrack::analysis::plan::SourceSpectrum,
    /// Grid points along each axis.
    #[arg(long, default_value_t = 120, value_parser = super::values::resolution)]
    pub resolution: usize,
    /// Depth (z, m) of the horizontal map (default: the middle of the search volume).
    #[arg(long, allow_hyphen_values = true, value_parser = super::values::coordinate)]
    pub depth: Option<f64>,
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
    print!("{report}");
    println!("({:.1} s)", t.elapsed().as_secs_f64());
    Ok(())
}
