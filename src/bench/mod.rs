//! `sonotrack bench`: per-stage timings on synthetic input, for every backend that is available,
//! through the same traits the pipeline uses. CPU stages are timed with the wall clock; GPU
//! stages report device-event times (see `Correlator::last_device_time_s`). Medians are quoted.
//!
//! One file per stage: [`gcc`], [`pf`] and [`imm`] (the tracker's filters), [`tbd`] (the curves
//! bank of track-before-detect), [`live`] (the live path and its replay), [`fusion`] (the fusion
//! service through a broker); [`jetson`] projects the CUDA figures to the boards.

pub mod fusion;
mod gcc;
mod imm;
pub mod jetson;
mod live;
mod pf;
mod tbd;
pub mod tbd_workload;
pub mod workload;

use std::time::Instant;

use serde::Serialize;

use crate::error::Result;
use crate::gpu::BackendChoice;

pub use live::{LiveTiming, SteadyTiming, time_live_frame, time_steady_frames};
pub use pf::{PfTiming, time_pf};

/// One measured cell.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub stage: String,
    pub backend: String,
    pub params: String,
    /// Median time per call, microseconds.
    pub median_us: f64,
    /// What that means per unit (µs per frame, ns per particle-step, ...).
    pub per_unit: f64,
    pub unit: String,
    /// Achieved device-memory bandwidth, GB/s (GPU rows).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gb_s: Option<f64>,
    /// Median wall-clock time per call as the host sees it (launch, wait and copy-out
    /// included), microseconds; for GPU rows, next to the device-event time.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wall_us: Option<f64>,
    pub reps: usize,
}

impl Row {
    /// A row of median `s` seconds a call over `units` units (per unit in `unit`, which names
    /// nanoseconds: "ns/filter-step"), without bandwidth or wall-time columns.
    pub fn per_ns(
        stage: &str,
        backend: &str,
        params: String,
        s: f64,
        units: usize,
        unit: &str,
        reps: usize,
    ) -> Self {
        Self {
            stage: stage.into(),
            backend: backend.into(),
            params,
            median_us: s * 1e6,
            per_unit: s * 1e9 / units as f64,
            unit: unit.into(),
            gb_s: None,
            wall_us: None,
            reps,
        }
    }
}

/// What to run.
#[derive(Debug, Clone)]
pub struct BenchOptions {
    pub backend: BackendChoice,
    pub gcc: bool,
    /// The tracker's filters: the particle filters on each backend and the IMM on the CPU.
    pub pf: bool,
    /// The curves bank of track-before-detect.
    pub tbd: bool,
    /// The live path (GCC-PHAT of one frame, then one step of a small filter), and its
    /// workload in a steady-state replay.
    pub live: bool,
    /// Smaller grids (CI, quick looks).
    pub quick: bool,
    /// Seconds to spend per cell (at least 3 repetitions).
    pub budget_s: f64,
    /// Also replay this scene directory end to end on each backend.
    pub replay: Option<std::path::PathBuf>,
    /// Particles for the end-to-end replay.
    pub replay_particles: usize,
    /// Restrict the grids to these values (empty: the whole grid).
    pub channels: Vec<usize>,
    pub frames: Vec<usize>,
    pub pf_particles: Vec<usize>,
    pub models: Vec<usize>,
    /// The live rows' sample rate (48 kHz by default; the `tetra` preset's own rate is 96 kHz,
    /// which searches twice the lags).
    pub live_rate_hz: u32,
}

/// The grid's values, or the chosen subset.
fn pick(all: &[usize], chosen: &[usize]) -> Vec<usize> {
    if chosen.is_empty() {
        all.to_vec()
    } else {
        chosen.to_vec()
    }
}

/// The middle value of `v` once sorted (the upper one of an even count); None when empty.
fn median(v: &mut [f64]) -> Option<f64> {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied()
}

/// Median of repeated timings of `f` (seconds), after one warm-up call.
pub fn time_median(
    budget_s: f64,
    min_reps: usize,
    mut f: impl FnMut() -> Result<f64>,
) -> Result<(f64, usize)> {
    f()?;
    let start = Instant::now();
    let mut v = Vec::new();
    while v.len() < min_reps || (start.elapsed().as_secs_f64() < budget_s && v.len() < 2000) {
        v.push(f()?);
    }
    // Empty only with `min_reps` 0 and no budget: NaN then.
    Ok((median(&mut v).unwrap_or(f64::NAN), v.len()))
}

/// Medians of paired timings: (device or wall seconds, wall seconds) per call.
fn time_pair(
    budget_s: f64,
    mut f: impl FnMut() -> Result<(f64, f64)>,
) -> Result<(f64, f64, usize)> {
    let mut walls = Vec::new();
    let (dev, reps) = time_median(budget_s, 3, || {
        let (d, w) = f()?;
        walls.push(w);
        Ok(d)
    })?;
    // The first entry is the warm-up call.
    let mut w = walls.split_off(1.min(walls.len()));
    Ok((dev, median(&mut w).unwrap_or(f64::NAN), reps))
}

/// Time `call` on a backend. Where the backend times on the device: the wall clock in a pass
/// without device events, then the device time in a second pass with them (recording the
/// events costs host time); otherwise one pass, its wall clock standing for both. `call`
/// returns the call's wall seconds and the backend's device seconds. Returns (median device
/// seconds, median wall seconds, reps).
fn time_two_passes<B: ?Sized>(
    b: &mut B,
    budget_s: f64,
    set_timing: impl Fn(&mut B, bool),
    mut call: impl FnMut(&mut B) -> Result<(f64, Option<f64>)>,
) -> Result<(f64, f64, usize)> {
    set_timing(b, true);
    let (_, probe) = call(b)?;
    let mut pass = |b: &mut B, budget: f64| {
        time_pair(budget, || {
            let (wall, dev) = call(b)?;
            Ok((dev.unwrap_or(wall), wall))
        })
    };
    if probe.is_none() {
        return pass(b, budget_s);
    }
    set_timing(b, false);
    let (_, wall, r1) = pass(b, budget_s / 2.0)?;
    set_timing(b, true);
    let timed = pass(b, budget_s / 2.0);
    set_timing(b, false);
    let (dev, _, r2) = timed?;
    Ok((dev, wall, r1 + r2))
}

/// The backends to time: those asked for that are available.
fn backends_of(choice: BackendChoice) -> Vec<&'static str> {
    match choice {
        BackendChoice::Cpu => vec!["cpu"],
        BackendChoice::Cuda => vec!["cuda"],
        BackendChoice::Auto => {
            if crate::gpu::available().is_ok() {
                vec!["cuda", "cpu"]
            } else {
                vec!["cpu"]
            }
        }
    }
}

/// The GPU's copy bandwidths: device to device (the ceiling of memory-bound kernels) and host
/// to device (what a batch pays over the bus before any kernel runs).
fn copy_rows() -> Result<Vec<Row>> {
    let mut rows = Vec::new();
    let bw = crate::gpu::copy_bandwidth_gb_s()?;
    rows.push(Row {
        stage: "copy".into(),
        backend: "cuda".into(),
        params: "device-to-device, 256 MiB (read + write)".into(),
        median_us: 2.0 * 256.0 * 1048.576 / bw,
        per_unit: bw,
        unit: "GB/s".into(),
        gb_s: Some(bw),
        wall_us: None,
        reps: 10,
    });
    // The upload a batch of 16 frames of 16 channels x 4096 samples makes (4 MiB): what the
    // batched correlation pays over the bus before any kernel runs.
    let bytes = 16 * 16 * 4096 * 4;
    let up = crate::gpu::upload_bandwidth_gb_s(bytes)?;
    rows.push(Row {
        stage: "copy".into(),
        backend: "cuda".into(),
        params: "host-to-device, 4 MiB page-locked".into(),
        median_us: bytes as f64 / up / 1e3,
        per_unit: up,
        unit: "GB/s".into(),
        gb_s: Some(up),
        wall_us: None,
        reps: 10,
    });
    Ok(rows)
}

/// A scene replayed end to end on each backend.
fn replay_rows(opts: &BenchOptions, dir: &std::path::Path, backends: &[&str]) -> Result<Vec<Row>> {
    let mut rows = Vec::new();
    for &b in backends {
        let (mut cfg, wav, truth) = crate::pipeline::replay::resolve(dir, None)?;
        cfg.tracker.particles = opts.replay_particles;
        let ro = crate::pipeline::replay::ReplayOptions {
            backend: if b == "cuda" {
                BackendChoice::Cuda
            } else {
                BackendChoice::Cpu
            },
            ..crate::pipeline::replay::ReplayOptions::default()
        };
        let sum = crate::pipeline::replay::replay_file(&cfg, &wav, truth.as_ref(), &ro)?;
        let frames = sum.counters.frames_processed.max(1);
        rows.push(Row {
            stage: "replay".into(),
            backend: b.into(),
            params: format!(
                "{}, {} particles, RMSE {:.4} m",
                dir.file_name().and_then(|n| n.to_str()).unwrap_or("scene"),
                opts.replay_particles,
                sum.accuracy.as_ref().map(|a| a.rmse_m).unwrap_or(f64::NAN)
            ),
            median_us: sum.counters.proc_total.as_secs_f64() * 1e6 / frames as f64,
            per_unit: 100.0 * sum.load(),
            unit: "% of real time".into(),
            gb_s: None,
            wall_us: None,
            reps: frames as usize,
        });
    }
    Ok(rows)
}

/// Run the grids. Rows come back in the order printed.
pub fn run(opts: &BenchOptions) -> Result<Vec<Row>> {
    let backends = backends_of(opts.backend);
    let mut rows = Vec::new();
    if backends.contains(&"cuda") {
        rows.extend(copy_rows()?);
    }
    if opts.gcc {
        rows.extend(gcc::single_rows(opts, &backends)?);
        rows.extend(gcc::batch_rows(opts, &backends)?);
    }
    let whole_gcc = opts.channels.is_empty() && opts.frames.is_empty();
    if opts.live && whole_gcc && opts.pf_particles.is_empty() {
        rows.extend(live::rows(opts, &backends)?);
    }
    if opts.pf {
        rows.extend(pf::rows(opts, &backends)?);
        rows.extend(imm::rows(opts)?);
    }
    if opts.tbd {
        rows.extend(tbd::rows(opts, &backends)?);
    }
    if let Some(dir) = &opts.replay {
        rows.extend(replay_rows(opts, dir, &backends)?);
    }
    Ok(rows)
}

pub fn print(rows: &[Row]) {
    println!(
        "{:<6} {:<6} {:<44} {:>11} {:>10} {:>26} {:>8} {:>6}",
        "stage", "back", "size", "median (us)", "wall (us)", "per unit", "(GB/s)", "reps"
    );
    for r in rows {
        println!(
            "{:<6} {:<6} {:<44} {:>11.1} {:>10} {:>9.2} {:<16} {:>8} {:>6}",
            r.stage,
            r.backend,
            r.params,
            r.median_us,
            r.wall_us
                .map(|w| format!("{w:.1}"))
                .unwrap_or_else(|| "-".into()),
            r.per_unit,
            r.unit,
            r.gb_s
                .map(|g| format!("{g:.0}"))
                .unwrap_or_else(|| "-".into()),
            r.reps
        );
    }
}
