//! `sonotrack fuse`: the fusion service of several arrays (docs/fusion.md).

use std::path::PathBuf;

use sonotrack::config::fuse::FuseConfig;
use sonotrack::error::Result;
use sonotrack::pipeline::fuse::{FuseOptions, run as serve};

/// The arguments of `sonotrack fuse`.
#[derive(clap::Args)]
pub struct Args {
    /// The fusion configuration (TOML): broker, site, origin, `[fusion]`, outputs.
    #[arg(long)]
    pub config: PathBuf,
    /// Stop after this many seconds.
    #[arg(long)]
    pub seconds: Option<f64>,
    /// Check the configuration and exit.
    #[arg(long)]
    pub check: bool,
}

pub fn run(a: Args) -> Result<()> {
    let cfg = FuseConfig::load(&a.config)?;
    if let Some(s) = a.seconds {
        if !(s > 0.0 && s.is_finite()) {
            return Err(sonotrack::error::Error::Usage(format!(
                "--seconds {s}: give a positive number of seconds"
            )));
        }
    }
    if a.check {
        if !super::quiet() {
            println!(
                "{}: fuses the nodes of {}/{}/+ on {} at {} Hz, {} output(s)",
                a.config.display(),
                cfg.prefix,
                cfg.site,
                cfg.broker.address,
                cfg.rate_hz,
                cfg.output.sinks.len()
            );
        }
        return Ok(());
    }
    let summary = serve(&cfg, &FuseOptions { seconds: a.seconds })?;
    log::info!(
        "fusion done: {} steps, {} node reports, {} fused messages, ignored {:?}",
        summary.steps,
        summary.reports,
        summary.fused_messages,
        summary.ignored
    );
    Ok(())
}
