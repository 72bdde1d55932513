//! The IMM estimator over the batched bank ([`crate::track::kalman::imm_bank`], `kernels/imm.cu`):
//! three 2-D models (constant velocity, a left and a right coordinated turn) over T turning
//! targets, one step of every track: on the CPU the wall time per track-step; on the GPU the
//! device time of the one launch (CUDA events, median) for 1,024 tracks (the figure) and
//! up, and the wall time of a step as a caller sees it (the measurements up, the count back).

use super::{BenchOptions, Row, time_median};
use crate::error::{Error, Result};
use crate::testing::imm_bank::workload;
use crate::track::kalman::bank::BankError;
use crate::track::kalman::imm_bank::{ImmBank, ImmFilterBank};

/// Track counts timed on the GPU (`--quick`: the first two).
const GPU_TRACKS: [usize; 4] = [1024, 16_384, 262_144, 1_048_576];
/// Track counts timed on the CPU (`--quick`: the first).
const CPU_TRACKS: [usize; 2] = [1024, 65_536];

fn bank_err(e: BankError) -> Error {
    Error::Usage(e.to_string())
}

pub fn rows(opts: &BenchOptions, backends: &[&str]) -> Result<Vec<Row>> {
    let mut rows = Vec::new();
    if backends.contains(&"cuda") {
        let sizes = if opts.quick {
            &GPU_TRACKS[..2]
        } else {
            &GPU_TRACKS[..]
        };
        for &tracks in sizes {
            let w = workload(3, tracks, 1);
            let s = crate::gpu::imm_kernel_time(&w.model, tracks, (&w.x, &w.p, &w.mu), &w.z[0])?;
            rows.push(Row::per_ns(
                "imm-bank",
                "cuda",
                format!("{tracks} tracks x 3 models (CV, CT ±0.15 rad/s) 2-D, device time"),
                s,
                tracks,
                "ns/track-step",
                11,
            ));
        }
        rows.push(wall_row(opts, "cuda", 1024)?);
    }
    if backends.contains(&"cpu") {
        let sizes = if opts.quick {
            &CPU_TRACKS[..1]
        } else {
            &CPU_TRACKS[..]
        };
        for &tracks in sizes {
            rows.push(wall_row(opts, "cpu", tracks)?);
        }
    }
    Ok(rows)
}

/// Wall time of one step of `tracks` tracks on `backend`, restarted from the workload's
/// starts each repetition.
fn wall_row(opts: &BenchOptions, backend: &str, tracks: usize) -> Result<Row> {
    let w = workload(3, tracks, 1);
    let (x0, p0, mu0) = ([0.0f32; 4], [0.0f32; 16], [1.0f32; 3]);
    let mut bank: Box<dyn ImmFilterBank> = match backend {
        "cuda" => crate::gpu::imm_bank(&w.model, tracks, &x0, &p0, &mu0)?,
        _ => Box::new(ImmBank::new(w.model.clone(), tracks, &x0, &p0, &mu0).map_err(bank_err)?),
    };
    let (s, reps) = time_median(opts.budget_s, 3, || {
        bank.load(&w.x, &w.p, &w.mu).map_err(bank_err)?;
        let t = std::time::Instant::now();
        let singular = bank.step(&w.z[0]).map_err(bank_err)?;
        let took = t.elapsed().as_secs_f64();
        if singular > 0 {
            return Err(Error::Usage(format!(
                "{singular} IMM tracks met a singular update"
            )));
        }
        Ok(took)
    })?;
    Ok(Row::per_ns(
        "imm-bank",
        backend,
        format!(
            "{tracks} tracks x 3 models (CV, CT ±0.15 rad/s) 2-D, f32, step wall{}",
            if backend == "cpu" {
                format!(", {} threads", rayon::current_num_threads())
            } else {
                " (z up, count back)".into()
            }
        ),
        s,
        tracks,
        "ns/track-step",
        reps,
    ))
}
