//! `sonotrack bench`: per-stage timings, and the CUDA figures projected to the Jetson boards.

use std::path::PathBuf;

use sonotrack::bench::{self, BenchOptions, jetson};
use sonotrack::error::{Error, Result};

/// The arguments of `sonotrack bench`.
#[derive(clap::Args)]
pub struct Args {
    /// Which stages: gcc, pf (the tracker's filters: particles on each backend, the IMM), tbd
    /// (the curves bank of track-before-detect), live (one frame through GCC-PHAT and a small
    /// filter, as capture runs it, and the same frames replayed), all, or none (with
    /// --replay); or fusion (the fusion service under simulated nodes through the broker of
    /// --broker; not part of all).
    #[arg(long, default_value = "all")]
    pub what: String,
    /// Backends to time: auto (every one available), cpu or cuda.
    #[arg(long, value_enum, default_value = "auto")]
    pub backend: super::BackendArg,
    /// Smaller grids.
    #[arg(long)]
    pub quick: bool,
    /// Seconds per measured cell.
    #[arg(long, default_value_t = 0.5, value_parser = super::values::budget)]
    pub budget: f64,
    /// Also write the rows as JSON.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Also replay this scene directory end to end on each backend.
    #[arg(long)]
    pub replay: Option<PathBuf>,
    /// Particles for the end-to-end replay.
    #[arg(long, default_value_t = 262_144, value_parser = super::values::particles)]
    pub particles: usize,
    /// Only these channel counts in the GCC grid (e.g. 16 or 4,16).
    #[arg(long, value_delimiter = ',', value_parser = super::values::channels)]
    pub channels: Vec<usize>,
    /// Only these frame lengths in the GCC grid.
    #[arg(long, value_delimiter = ',', value_parser = super::values::frame_samples)]
    pub frames: Vec<usize>,
    /// Only these particle counts in the filter grid (e.g. 1048576).
    #[arg(long, value_delimiter = ',', value_parser = super::values::bench_particles)]
    pub pf_particles: Vec<usize>,
    /// Only these model counts in the filter grid.
    #[arg(long, value_delimiter = ',', value_parser = super::values::models)]
    pub models: Vec<usize>,
    /// Sample rate of the live path's scene (48 kHz is the workload; 96 kHz, the
    /// `tetra` preset's own rate, searches twice the lags).
    #[arg(long, default_value_t = 48_000, value_parser = super::values::sample_rate)]
    pub live_rate: u32,
    /// --what fusion: the broker (host:port) the simulated nodes and the service meet at.
    #[arg(long)]
    pub broker: Option<String>,
    /// --what fusion: simulated nodes (1-256).
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u16).range(1..=256))]
    pub nodes: u16,
    /// --what fusion: tracks per node (1-64).
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u16).range(1..=64))]
    pub tracks: u16,
    /// --what fusion: reports a second per track (1-200).
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u16).range(1..=200))]
    pub rate: u16,
    /// --what fusion: seconds of load (2-3600).
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u16).range(2..=3600))]
    pub seconds: u16,
}
pub fn run(a: Args) -> Result<()> {
    let what = a.what.as_str();
    if what == "fusion" {
        let broker = a.broker.as_deref().ok_or_else(|| {
            Error::Usage(
                "--what fusion needs --broker HOST:PORT (a running broker, e.g. mosquitto)".into(),
            )
        })?;
        let load = bench::fusion::FusionLoad {
            nodes: a.nodes.into(),
            tracks: a.tracks.into(),
            rate_hz: a.rate.into(),
            seconds: a.seconds.into(),
        };
        let r = bench::fusion::run(broker, &load)?;
        println!("{r}");
        if let Some(path) = a.json {
            super::write_json(&path, &r)?;
        }
        return Ok(());
    }
    let opts = BenchOptions {
        backend: a.backend.into(),
        gcc: what == "all" || what == "gcc",
        pf: what == "all" || what == "pf",
        tbd: what == "all" || what == "tbd",
        live: what == "all" || what == "live",
        quick: a.quick,
        budget_s: a.budget,
        replay: a.replay,
        replay_particles: a.particles,
        channels: a.channels,
        frames: a.frames,
        pf_particles: a.pf_particles,
        models: a.models,
        live_rate_hz: a.live_rate,
    };
    if !opts.gcc && !opts.pf && !opts.tbd && !opts.live && what != "none" {
        return Err(Error::Usage(format!(
            "--what {what}: use gcc, pf, tbd, live, all or none (with --replay)"
        )));
    }
    let mut rows = bench::run(&opts)?;
    bench::print(&rows);
    // The CUDA figures projected to the Jetson boards (printed, and in the JSON).
    if rows.iter().any(|r| r.backend == "cuda") {
        if let Ok(spec) = sonotrack::gpu::device_spec() {
            let boards = jetson::jetson_boards();
            let projected = jetson::project(&rows, &spec, &boards);
            jetson::print(&rows, &projected, &spec, &boards);
            rows.extend(projected);
        }
    }
    if let Some(path) = a.json {
        super::write_json(&path, &rows)?;
    }
    Ok(())
}
