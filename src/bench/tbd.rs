//! The curves bank of track-before-detect ([`crate::track::filter::bernoulli::bank`], `kernels/tbd.cu`):
//! - GPU: one step of 1,048,576 particles (N_b = N_c = 524,288) on an 8-sensor cube, 28 pairs ×
//!   9 lags (area ±4), existence and resampling included (device time, CUDA events), and the
//!   bytes a step reads back; the LR-area sweep of B-11 in its acoustic form (N_b = N_c = 10⁴,
//!   areas ±0 … ±7, i.e. 1 to 15 lags per pair) on both backends.
//! - CPU: the curves path's cost per particle (the f64 filter the tracker runs, on all cores,
//!   and the bank's single-threaded f32 twin) against the peaks path's particle filter, and the
//!   largest particle count one track keeps within real time.

use std::time::Instant;

use super::{BenchOptions, Row, time_median};
use crate::bench::tbd_workload::{config, frames, model};
use crate::error::{Error, Result};
use crate::track::filter::bernoulli::bank::BankError;
use crate::track::filter::bernoulli::bank::{
    BankFrame, BankProposal, BankSizes, CpuCurveBank, CurveBank,
};
use crate::track::filter::bernoulli::existence::Chain;
use crate::track::filter::bernoulli::filter::{BernoulliFilter, BernoulliParams};

const CHAIN: Chain = Chain {
    p_birth: 0.05,
    p_death: 0.05,
};

fn bank_err(e: BankError) -> Error {
    Error::Usage(e.to_string())
}

pub fn rows(opts: &BenchOptions, backends: &[&str]) -> Result<Vec<Row>> {
    let mut rows = Vec::new();
    let cfg = config(true);
    let m = model(&cfg);
    if backends.contains(&"cuda") {
        let packed = m.packed(Some(4));
        let inputs = frames(&m, &packed, 5, 1);
        let (f, prop) = &inputs[0];
        let half = 524_288;
        for (nb, nc) in [(half, half), (0, 2 * half)] {
            let sizes = BankSizes {
                tracks: 1,
                n_birth: nb,
                n_cont: nc,
            };
            let mut bank = crate::gpu::curve_bank(&packed, sizes, CHAIN, 1, 0.5)?;
            let (s, reps) = time_bank(bank.as_mut(), f, prop, opts.budget_s)?;
            let bytes = bank.bytes_read() / (reps as u64 + 2).max(1);
            rows.push(Row::per_ns(
                "tbd-bank",
                "cuda",
                format!(
                    "{nb} births + {nc} continuing, 28 pairs x 9 lags, existence and resampling \
                     included; {bytes} B read back a step"
                ),
                s,
                nb + nc,
                "ns/particle-step",
                reps,
            ));
        }
    }
    for area in area_sweep(opts) {
        let packed = m.packed(Some(area));
        let inputs = frames(&m, &packed, 6, 1);
        let (f, prop) = &inputs[0];
        let sizes = BankSizes {
            tracks: 1,
            n_birth: 10_000,
            n_cont: 10_000,
        };
        let what = format!("N_b = N_c = 10^4, 28 pairs x {} lags", 2 * area + 1);
        for &b in backends {
            let mut bank: Box<dyn CurveBank + Send> = if b == "cuda" {
                crate::gpu::curve_bank(&packed, sizes, CHAIN, 1, 0.5)?
            } else {
                let cpu = CpuCurveBank::new(packed.clone(), sizes, CHAIN, 1, 0.5);
                Box::new(cpu.map_err(bank_err)?)
            };
            let (s, reps) = time_bank(bank.as_mut(), f, prop, opts.budget_s)?;
            let what = if b == "cuda" {
                what.clone()
            } else {
                format!("{what}, the f32 twin, one thread")
            };
            rows.push(Row::per_ns(
                "tbd-area",
                b,
                what,
                s,
                20_000,
                "ns/particle-step",
                reps,
            ));
        }
    }
    if backends.contains(&"cpu") {
        rows.push(curves_filter_row(opts)?);
    }
    Ok(rows)
}

/// Median seconds of a step of `bank` on frame `f` (its device time where it has a device
/// clock, else the wall clock), after one untimed step that makes the continuing particles, and
/// the steps timed.
fn time_bank(
    bank: &mut (dyn CurveBank + Send),
    f: &BankFrame,
    prop: &BankProposal,
    budget_s: f64,
) -> Result<(f64, usize)> {
    bank.step(f, prop).map_err(bank_err)?;
    bank.set_device_timing(true);
    let timed = time_median(budget_s, 10, || {
        let t = Instant::now();
        bank.step(f, prop).map_err(bank_err)?;
        let wall = t.elapsed().as_secs_f64();
        Ok(bank.last_device_time_s().unwrap_or(wall))
    });
    bank.set_device_timing(false);
    timed
}

/// Likelihood half-widths of the sweep (`--quick`: three).
fn area_sweep(opts: &BenchOptions) -> Vec<usize> {
    if opts.quick {
        vec![1, 4, 7]
    } else {
        (1..=7).collect()
    }
}

/// The curves path as the tracker runs it: one f64 Bernoulli filter of 8,192 continuing
/// particles on the harbour array (10 pairs, its band's own area), on all cores.
fn curves_filter_row(opts: &BenchOptions) -> Result<Row> {
    use crate::track::filter::bernoulli::CellModel;
    let cfg = config(false);
    let m = model(&cfg);
    let packed = m.packed(None);
    let n = 8192;
    let params = BernoulliParams {
        chain: CHAIN,
        n_birth: 0,
        n_cont: n,
    };
    // Frames of the workload, as the f64 model's frames (the same curves).
    let inputs = frames(&m, &packed, 7, 1);
    let mut running = Vec::new();
    let ok: Vec<bool> = inputs[0].0.ok.iter().map(|&v| v != 0).collect();
    let frame = m.frame(&inputs[0].0.curves, &ok, &mut running);
    let start: Vec<f64> = (0..n)
        .flat_map(|i| {
            let r = i as f64 / n as f64;
            [20.0 * r, -10.0, -20.0, 0.0, 0.0, 0.0, 0.3]
        })
        .collect();
    let mut f = BernoulliFilter::seeded(params, m.dim(), 1, 0, 0.9, start);
    let (s, reps) = time_median(opts.budget_s, 3, || {
        let t = Instant::now();
        f.step(&m, &frame);
        Ok(t.elapsed().as_secs_f64())
    })?;
    Ok(Row::per_ns(
        "tbd-filter",
        "cpu",
        format!(
            "one f64 track, {n} particles, 10 pairs x {} lags, all cores",
            2 * packed.w + 1
        ),
        s,
        n,
        "ns/particle-step",
        reps,
    ))
}
