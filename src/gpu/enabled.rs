//! The GPU backend's entry points with the `cuda` feature: each opens the GPU (once per process)
//! and says why it cannot be used when it cannot.

use crate::dsp::gcc::{Correlator, GccParams};
use std::sync::OnceLock;

use crate::error::{BackendError, Error, Result};
use crate::gpu::cuda;
use crate::gpu::spec::{GpuSpec, fp32_lanes_per_sm};
use crate::track::kalman::bank::{BankModel, FilterBank};
use crate::track::kalman::crossover::{self, Crossover, unit_start};
use crate::track::kalman::imm_bank::{ImmBankModel, ImmFilterBank};
use crate::track::smooth::{Covariance, Record, Smoothed};
use crate::track::tbd::bank::{
    BankFrame, BankModel as CurveBankModel, BankProposal, BankSizes, CurveBank,
};
use crate::track::tbd::existence::Chain;
use crate::track::{FilterParams, ParticleFilter};

fn unavailable(why: String) -> Error {
    Error::Backend(BackendError::new("cuda", why))
}

/// Every (track, measurement) pair's multi-frame assignment cost on the GPU (the twin of
/// [`crate::track::mfa::pair_costs::pair_costs`]).
pub fn mfa_pair_costs(inp: &crate::track::mfa::pair_costs::PairCostInput) -> Result<Vec<f64>> {
    let gpu = cuda::gpu().map_err(unavailable)?;
    Ok(cuda::mfa::pair_costs(&gpu, inp)?)
}

/// A description of the GPU, or why there is none.
pub fn available() -> std::result::Result<String, String> {
    cuda::gpu().map(|g| g.describe())
}

/// A CUDA correlator for up to `batch` frames per call.
pub fn correlator(params: GccParams, batch: usize) -> Result<Box<dyn Correlator>> {
    let gpu = cuda::gpu().map_err(unavailable)?;
    Ok(Box::new(cuda::gcc::CudaCorrelator::new(
        gpu, params, batch,
    )?))
}

/// A CUDA particle-filter bank.
pub fn particle_filter(params: FilterParams) -> Result<Box<dyn ParticleFilter>> {
    let gpu = cuda::gpu().map_err(unavailable)?;
    Ok(Box::new(cuda::pf::CudaParticleFilter::new(gpu, params)?))
}

/// Host-to-device copy bandwidth from page-locked memory (GB/s) for copies of `bytes`.
pub fn upload_bandwidth_gb_s(bytes: usize) -> Result<f64> {
    cuda::upload_bandwidth_gb_s(bytes).map_err(Error::Backend)
}

/// The GPU's specification, for projecting its figures to other GPUs.
pub fn device_spec() -> Result<GpuSpec> {
    let g = cuda::gpu().map_err(unavailable)?;
    let (major, minor) = g.compute_capability;
    Ok(GpuSpec {
        name: g.name.clone(),
        sms: g.multiprocessors.max(0) as u32,
        lanes_per_sm: fp32_lanes_per_sm(major, minor),
        clock_ghz: f64::from(g.clock_khz) / 1e6,
        // Double data rate: two transfers per clock over the bus.
        memory_gb_s: 2.0 * f64::from(g.memory_clock_khz) * 1e3 * f64::from(g.memory_bus_bits)
            / 8.0
            / 1e9,
    })
}

/// Device-to-device copy bandwidth (bytes read plus written, GB/s), the ceiling memory-bound
/// kernels are compared with.
pub fn copy_bandwidth_gb_s() -> Result<f64> {
    cuda::copy_bandwidth_gb_s().map_err(Error::Backend)
}

/// A Kalman filter bank resident on the GPU.
pub fn kalman_bank(
    model: &BankModel,
    filters: usize,
    x0: &[f32],
    p0: &[f32],
) -> Result<Box<dyn FilterBank>> {
    Ok(Box::new(cuda_bank(model, filters, x0, p0)?))
}

fn cuda_bank(
    model: &BankModel,
    filters: usize,
    x0: &[f32],
    p0: &[f32],
) -> Result<cuda::kf::CudaKalmanBank> {
    let gpu = cuda::gpu().map_err(unavailable)?;
    cuda::kf::CudaKalmanBank::new(gpu, model, filters, x0, p0).map_err(bank_error)
}

fn bank_error(e: crate::track::kalman::bank::BankError) -> Error {
    Error::Backend(BackendError::new("cuda", e.to_string()))
}

/// The measured CPU/GPU crossover for banks of `model`'s sizes (measured once per process and
/// per (n, m)).
pub fn kalman_crossover(model: &BankModel) -> Result<Crossover> {
    use std::collections::HashMap;
    use std::sync::Mutex;
    static MEASURED: OnceLock<Mutex<HashMap<(usize, usize), Crossover>>> = OnceLock::new();
    let cache = MEASURED.get_or_init(|| Mutex::new(HashMap::new()));
    let key = (model.n, model.m);
    if let Some(c) = cache.lock().map_err(|_| poisoned())?.get(&key) {
        return Ok(c.clone());
    }
    cuda::gpu().map_err(unavailable)?;
    let mut make = |filters: usize| -> std::result::Result<Box<dyn FilterBank>, _> {
        let (x0, p0) = unit_start(model.n);
        cuda::gpu()
            .map_err(crate::track::kalman::bank::BankError::Backend)
            .and_then(|g| cuda::kf::CudaKalmanBank::new(g, model, filters, &x0, &p0))
            .map(|b| Box::new(b) as Box<dyn FilterBank>)
    };
    let c = crossover::measure(model, &mut make).map_err(bank_error)?;
    log::info!(
        "Kalman bank ({}x{}): {}",
        model.n,
        model.m,
        c.size.map_or(
            "the CPU was faster at every size measured, so every bank stays on it".into(),
            |s| format!("the GPU serves banks from {s} filters")
        )
    );
    cache.lock().map_err(|_| poisoned())?.insert(key, c.clone());
    Ok(c)
}

fn poisoned() -> Error {
    Error::Backend(BackendError::new(
        "cuda",
        "the crossover cache was poisoned by a panic",
    ))
}

/// Median device time (seconds, event-timed) of one launch of the bank kernel over `filters`
/// filters of `model` with `block` threads per block; `both`: predict and update in one launch,
/// else an update alone. None where the kernel cannot run blocks that large (its registers).
/// The IMM estimator over the batched bank on the GPU (`kernels/imm.cu`): `tracks` tracks of
/// `model`, every mode at (x0, p0) with probabilities mu0.
pub fn imm_bank(
    model: &ImmBankModel,
    tracks: usize,
    x0: &[f32],
    p0: &[f32],
    mu0: &[f32],
) -> Result<Box<dyn ImmFilterBank>> {
    let gpu = cuda::gpu().map_err(unavailable)?;
    let bank = cuda::imm::CudaImmBank::new(gpu, model, tracks, x0, p0, mu0).map_err(bank_error)?;
    Ok(Box::new(bank))
}

/// Device time of one IMM step of `tracks` tracks of `model` (CUDA events, median), the
/// measurements `z` (m × T) uploaded once beforehand; the states start at `x`, `p`, `mu`.
pub fn imm_kernel_time(
    model: &ImmBankModel,
    tracks: usize,
    start: (&[f32], &[f32], &[f32]),
    z: &[f32],
) -> Result<f64> {
    let g = cuda::gpu().map_err(unavailable)?;
    let (n, r) = (model.n(), model.modes());
    let mu0 = vec![1.0; r];
    let mut bank = cuda::imm::CudaImmBank::new(
        g.clone(),
        model,
        tracks,
        &vec![0.0; n],
        &vec![0.0; n * n],
        &mu0,
    )
    .map_err(bank_error)?;
    ImmFilterBank::load(&mut bank, start.0, start.1, start.2).map_err(bank_error)?;
    bank.put_measurements(z).map_err(bank_error)?;
    let s = bank.stream().clone();
    cuda::median_event_time(&g, &s, || {
        bank.enqueue()
            .map_err(|e| BackendError::new("cuda", e.to_string()))
    })
    .map_err(Error::Backend)
}

/// The curves bank of track-before-detect on the GPU (`kernels/tbd.cu`): `sizes` tracks of
/// `model`, each at P(exists) = `p0`.
pub fn curve_bank(
    model: &CurveBankModel,
    sizes: BankSizes,
    chain: Chain,
    seed: u64,
    p0: f64,
) -> Result<Box<dyn CurveBank + Send>> {
    let gpu = cuda::gpu().map_err(unavailable)?;
    let bank =
        cuda::tbd::CudaCurveBank::new(gpu, model, sizes, chain, seed, p0).map_err(bank_error)?;
    Ok(Box::new(bank))
}

/// The chain of the banks made only to time a step or read a table (any valid one).
const PROBE_CHAIN: Chain = Chain {
    p_birth: 0.05,
    p_death: 0.05,
};

/// The lobe table the GPU makes of `frame` in one step of a one-track bank (pairs × intervals
/// × 2; compare [`CurveBankModel::lobe_table`]).
pub fn curve_bank_lobes(
    model: &CurveBankModel,
    frame: &BankFrame,
    prop: &BankProposal,
) -> Result<Vec<f32>> {
    let g = cuda::gpu().map_err(unavailable)?;
    let sizes = BankSizes {
        tracks: 1,
        n_birth: 1,
        n_cont: 1,
    };
    let mut bank =
        cuda::tbd::CudaCurveBank::new(g, model, sizes, PROBE_CHAIN, 1, 0.5).map_err(bank_error)?;
    bank.step(frame, prop).map_err(bank_error)?;
    bank.lobe_table().map_err(bank_error)
}

/// Device time (CUDA events, median) of one step of a curves bank on `frame` and `prop`, the
/// frame uploaded beforehand and one step run first (so the continuing particles exist); and
/// the bytes one step reads back.
pub fn curve_bank_time(
    model: &CurveBankModel,
    sizes: BankSizes,
    frame: &BankFrame,
    prop: &BankProposal,
) -> Result<(f64, u64)> {
    let g = cuda::gpu().map_err(unavailable)?;
    let mut bank = cuda::tbd::CudaCurveBank::new(g.clone(), model, sizes, PROBE_CHAIN, 1, 0.5)
        .map_err(bank_error)?;
    bank.step(frame, prop).map_err(bank_error)?;
    let bytes = bank.bytes_read();
    let s = bank.stream().clone();
    let t = cuda::median_event_time(&g, &s, || {
        bank.enqueue()
            .map_err(|e| BackendError::new("cuda", e.to_string()))
    })
    .map_err(Error::Backend)?;
    Ok((t, bytes))
}

pub fn kalman_kernel_time(
    model: &BankModel,
    filters: usize,
    block: u32,
    both: bool,
) -> Result<Option<f64>> {
    let (x0, p0) = unit_start(model.n);
    let mut bank = cuda_bank(model, filters, &x0, &p0)?;
    let (max, _) = bank.limits().map_err(bank_error)?;
    if block > max {
        return Ok(None);
    }
    bank.set_block(block).map_err(bank_error)?;
    let z: Vec<f32> = (0..model.m * filters)
        .map(|i| (i % 7) as f32 * 0.1)
        .collect();
    bank.put_measurements(&z).map_err(bank_error)?;
    let stage = if both {
        cuda::kf::Stage::Both
    } else {
        cuda::kf::Stage::Update
    };
    let g = cuda::gpu().map_err(unavailable)?;
    let s = bank.stream().clone();
    cuda::median_event_time(&g, &s, || {
        bank.enqueue(stage)
            .map_err(|e| BackendError::new("cuda", e.to_string()))
    })
    .map(Some)
    .map_err(Error::Backend)
}

/// The parallel-in-time RTS smoother over many tracks at once: the elements built here (in
/// parallel), the scan on the GPU, one result per record of each track.
pub fn smooth_tracks(tracks: &[Vec<Record>], cov: Covariance) -> Result<Vec<Vec<Smoothed>>> {
    use rayon::prelude::*;
    let n = match tracks.iter().find_map(|t| t.first()) {
        Some(r) => r.x.len(),
        None => return Ok(tracks.iter().map(|_| Vec::new()).collect()),
    };
    if tracks.iter().flatten().any(|r| r.x.len() != n) {
        return Err(Error::Usage(
            "the GPU smoother takes tracks of one state size at a time".into(),
        ));
    }
    let elems: Vec<Vec<_>> = tracks
        .par_iter()
        .map(|t| crate::track::smooth::scan::elements(t, cov))
        .collect::<std::result::Result<_, _>>()
        .map_err(|e| Error::Usage(format!("smoothing: {e}")))?;
    let count: usize = elems.iter().map(Vec::len).sum();
    let mut host = Vec::with_capacity(count * cuda::smooth::element_len(n));
    for e in &elems {
        cuda::smooth::pack(e, n, &mut host);
    }
    let gpu = cuda::gpu().map_err(unavailable)?;
    let kernels = cuda::smooth::ScanKernels::new(gpu.clone()).map_err(Error::Backend)?;
    let s = kernels.stream.clone();
    let mut buf = s
        .clone_htod(&host)
        .map_err(cuda::err("copying the smoother's elements"))
        .map_err(Error::Backend)?;
    kernels
        .suffix_scan(n, &mut buf, count)
        .map_err(Error::Backend)?;
    s.memcpy_dtoh(&buf, &mut host)
        .map_err(cuda::err("reading the smoothed states"))
        .map_err(Error::Backend)?;
    s.synchronize()
        .map_err(cuda::err("the smoother's scan"))
        .map_err(Error::Backend)?;
    let mut k = 0;
    Ok(elems
        .iter()
        .map(|e| {
            (0..e.len())
                .map(|_| {
                    let (x, p) = cuda::smooth::unpack(&host, n, k);
                    k += 1;
                    Smoothed {
                        x,
                        p: (cov == Covariance::Smooth).then_some(p),
                    }
                })
                .collect()
        })
        .collect())
}

/// Median device time (seconds, event-timed) of the GPU scan over `tracks` copies of one
/// track's elements laid end to end (the elements already on the device). The scan works in
/// place, so each run restores the elements first; that copy is timed alone and taken off.
pub fn smooth_scan_time(track: &[Record], tracks: usize) -> Result<f64> {
    let n = track.first().map_or(0, |r| r.x.len());
    let elems = crate::track::smooth::scan::elements(track, Covariance::Smooth)
        .map_err(|e| Error::Usage(format!("smoothing: {e}")))?;
    let mut one = Vec::new();
    cuda::smooth::pack(&elems, n, &mut one);
    let host: Vec<f64> = std::iter::repeat_n(one.as_slice(), tracks)
        .flatten()
        .copied()
        .collect();
    let gpu = cuda::gpu().map_err(unavailable)?;
    let kernels = cuda::smooth::ScanKernels::new(gpu.clone()).map_err(Error::Backend)?;
    let s = kernels.stream.clone();
    let src = s
        .clone_htod(&host)
        .map_err(cuda::err("copying the smoother's elements"))
        .map_err(Error::Backend)?;
    let mut buf = src.clone();
    let count = elems.len() * tracks;
    let restore = |buf: &mut cudarc::driver::CudaSlice<f64>| {
        s.memcpy_dtod(&src, buf)
            .map_err(cuda::err("restoring the elements"))
    };
    let both = cuda::median_event_time(&gpu, &s, || {
        restore(&mut buf)?;
        kernels.suffix_scan(n, &mut buf, count)
    })
    .map_err(Error::Backend)?;
    let copy = cuda::median_event_time(&gpu, &s, || restore(&mut buf)).map_err(Error::Backend)?;
    Ok(both - copy)
}
