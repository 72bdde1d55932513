//! GCC-PHAT timings: one frame at a time over a grid of channel counts and frame lengths, and
//! batched as replays run it.

use std::time::Instant;

use super::{BenchOptions, Row, pick, time_two_passes};
use crate::audio::frame::Frame;
use crate::bench::workload::{gcc_params, noise_frames};
use crate::dsp::gcc::{Correlator, CpuCorrelator, GccFrame, GccParams};
use crate::error::Result;

/// Time one correlator over a batch of frames. Returns (median seconds per call on the device
/// clock where there is one, median wall seconds per call, reps).
pub fn time_gcc(
    cor: &mut dyn Correlator,
    frames: &[Frame],
    budget_s: f64,
) -> Result<(f64, f64, usize)> {
    let refs: Vec<&Frame> = frames.iter().collect();
    let mut out: Vec<GccFrame> = frames.iter().map(|_| GccFrame::new(cor.params())).collect();
    time_two_passes(
        cor,
        budget_s,
        |c, on| c.set_device_timing(on),
        |c| {
            let t = Instant::now();
            c.correlate(&refs, &mut out, false)?;
            Ok((t.elapsed().as_secs_f64(), c.last_device_time_s()))
        },
    )
}

/// A correlator of `params` on `backend` ("cuda" or "cpu") for up to `batch` frames per call.
fn correlator(backend: &str, params: &GccParams, batch: usize) -> Result<Box<dyn Correlator>> {
    Ok(match backend {
        "cuda" => crate::gpu::correlator(params.clone(), batch)?,
        _ => Box::new(CpuCorrelator::new(params.clone())),
    })
}

/// One frame per call over the grid of channel counts and frame lengths.
pub(super) fn single_rows(opts: &BenchOptions, backends: &[&str]) -> Result<Vec<Row>> {
    let mut rows = Vec::new();
    let (channels, frames): (&[usize], &[usize]) = if opts.quick {
        (&[4, 16], &[1024, 4096])
    } else {
        (&[4, 8, 16, 64], &[1024, 4096, 16384])
    };
    let (channels, frames) = (pick(channels, &opts.channels), pick(frames, &opts.frames));
    for &ch in &channels {
        for &n in &frames {
            let params = gcc_params(ch, n);
            for &b in backends {
                let frames = noise_frames(ch, n, 1, 3);
                let mut cor = correlator(b, &params, 1)?;
                let (s, wall, reps) = time_gcc(cor.as_mut(), &frames, opts.budget_s)?;
                rows.push(Row {
                    stage: "gcc".into(),
                    backend: b.into(),
                    params: format!("{ch} ch x {n}, {} pairs", params.pairs.len()),
                    median_us: s * 1e6,
                    per_unit: s * 1e6,
                    unit: "us/frame".into(),
                    gb_s: cor.bytes_per_call().map(|by| by as f64 / s / 1e9),
                    wall_us: Some(wall * 1e6),
                    reps,
                });
            }
        }
    }
    Ok(rows)
}

/// Batched correlation (replay), and a steady-state loop of 16-channel frames: µs per frame over
/// a call's frames (each where the channel and frame filters allow it).
pub(super) fn batch_rows(opts: &BenchOptions, backends: &[&str]) -> Result<Vec<Row>> {
    let mut rows = Vec::new();
    let wanted = |ch: usize, n: usize| {
        (opts.channels.is_empty() || opts.channels.contains(&ch))
            && (opts.frames.is_empty() || opts.frames.contains(&n))
    };
    for &(ch, n, batch) in [(16usize, 4096usize, 16usize), (16, 4096, 64), (4, 4096, 64)]
        .iter()
        .filter(|&&(ch, n, _)| wanted(ch, n))
    {
        let params = gcc_params(ch, n);
        for &b in backends {
            let frames = noise_frames(ch, n, batch, 5);
            let mut cor = correlator(b, &params, batch)?;
            let (s, wall, reps) = time_gcc(cor.as_mut(), &frames, opts.budget_s)?;
            let per = s / batch as f64;
            rows.push(Row {
                stage: "gcc".into(),
                backend: b.into(),
                params: format!("{ch} ch x {n}, batch {batch}: {:.0} frames/s", 1.0 / per),
                median_us: s * 1e6,
                per_unit: per * 1e6,
                unit: "us/frame".into(),
                gb_s: cor.bytes_per_call().map(|by| by as f64 / s / 1e9),
                wall_us: Some(wall * 1e6),
                reps,
            });
        }
    }
    Ok(rows)
}
