//! The particle-filter bank on the GPU: the [`FilterBank`] twin of `CpuParticleFilter`.
//!
//! Particles stay on the device. A step is `pf_fetch` (one block reads the step's parameters
//! and measurement, with each track's reference point: its last estimate's mean, which the
//! block sums are taken relative to, from page-locked host memory mapped into the device),
//! `pf_step` (switch, predict, weigh and
//! per-block sums for every particle of every track, one launch, ending with the finalize:
//! per-track sums in f64 in two levels, the last block of each group of tiles combining
//! the group's and the last group combining theirs, and the per-track decision the CPU would
//! take from them: keep, resample, temper, or reset). The finalize writes the sums and the
//! decision into mapped host memory too (the flag last, after a system fence), so the sequence,
//! captured once per track count into a CUDA graph, has no copy nodes, and the host waits only
//! until each track's flag appears there (see `wait_for`); without mapped memory, copies and a
//! synchronisation do it. When a track decided to resample, the host then launches the
//! resampling kernels, a graph of their own: `pf_scan_local` (its last block per track also
//! scans the block totals) and `pf_resample` (binary search, one thread per output slot, into
//! the other half of a double buffer). They run on while the host uses the estimate, and the
//! next step queues behind them; a step in which no track resamples runs no resampling kernel.
//! The host turns the sums into the estimate with the CPU's own code
//! (`finish_estimate`). Tracks that need tempering (too few effective particles after the
//! update: new tracks, sharp measurements) or a weight reset then take another, slower graph:
//! `pf_slow_begin` (weight reset, or the bounds for tempering), `pf_temper_grid` (the grid of
//! exponents' sums, its last block per track choosing the exponent), `pf_sums` (the sums again,
//! ending with the finalize's work and decisions) and the same resampling. Resampling roughens
//! the particles it copies (src/track/mod.rs: `ROUGHEN_H` for a tempered track,
//! `ROUGHEN_RESAMPLE_H` for the others).
//!
//! Filters of fewer than `SMALL_FILTER` particles (the live path) use `pf_step_small` and
//! `pf_sums_small`: one particle per thread in small blocks, so that a step of a few thousand
//! particles runs on many SMs at once rather than on a few threads each working through two.
//! A live step (`pf_step_live`) of at most 2,048 particles runs, on compute capability 9.0 and
//! later, as one thread-block cluster per track (`pf_step_live_cluster`), whose blocks hand
//! their tile sums to the leader through its shared memory instead of a last block's tickets.
//! Filters of at most `RS_SMALL_MAX` particles resample with `pf_resample_small`, the scan and
//! the resampling in one kernel (a few blocks per track, each scanning the whole track and
//! copying its share of the slots), instead of `pf_scan_local` and `pf_resample`.

use std::sync::Arc;

use bytemuck::{Pod, Zeroable};
use cudarc::driver::{
    CudaFunction, CudaSlice, CudaStream, LaunchArgs, LaunchConfig, PushKernelArg, result,
};

use super::host::{DeviceTimer, Graph, Pinned, capture, drain_before_drop, wait_until};
use super::programs::PF;
use super::{DriverFunction, Gpu, dptr, env_is_one, err, launch_cluster};
use crate::error::BackendError;
use crate::rng::philox::{self, Stream};
use crate::track::ModelSelection;
use crate::track::filter::particle::{ChunkSums, cloud_moments, finish_estimate, roughen_factor};
use crate::track::motion::models::{CoeffTable, StepCoeffs, padded_cdf};
use crate::track::{
    Estimate, FilterBank, FilterParams, LiveSource, MAX_MODELS, Particles, ROUGHEN_RESAMPLE_H,
    STATE_DIM, TEMPER_GRID, TdoaMeasurement, TrackInit, TrackStep,
};

const PF_BLOCK: u32 = 256;
/// Particles per block of pf_step and pf_sums (kernels/pf.cu: PF_TILE), each of which writes
/// one row of partial sums.
const PF_TILE: u32 = 512;
/// Filters with fewer particles than this take pf_step_small and pf_sums_small: one particle
/// per thread in blocks of PF_SMALL_BLOCK (kernels/pf.cu), so that a small step spreads over
/// many SMs instead of running a few long threads on a few.
const SMALL_FILTER: usize = 131_072;
const PF_SMALL_BLOCK: u32 = 256;
/// A live step whose tiles are at most this many (2,048 particles) runs as one thread-block
/// cluster per track where the device has them (kernels/pf.cu: pf_step_live_cluster,
/// LIVE_CLUSTER_MAX).
const LIVE_CLUSTER_MAX: usize = 8;
const SCAN_BLOCK: u32 = 1024;
const PART: usize = 48;
/// Tile rows the finalize at the end of pf_step and pf_sums combines per group (kernels/pf.cu).
const FIN_ROWS: usize = 64;
/// Blocks of pf_temper_grid whose rows one block combines (kernels/pf.cu).
const TEMPER_GROUP: usize = 32;
/// Filters of at most this many particles resample with pf_resample_small: one block of
/// RS_SMALL_THREADS per track (kernels/pf.cu).
const RS_SMALL_THREADS: u32 = 1024;
const RS_SMALL_MAX: usize = 4096;
/// Output slots per block of pf_resample_small (its launch splits a track's slots).
const RS_SMALL_SLOTS: usize = 256;

/// Whether a filter of `n` particles takes pf_step_small and pf_sums_small.
fn small_filter(n: usize) -> bool {
    n < SMALL_FILTER
}

/// The finalize's groups per track for `n_tiles` rows of tile sums.
fn fin_groups(n_tiles: usize) -> usize {
    n_tiles.div_ceil(FIN_ROWS).max(1)
}

/// Threads per block and particles per block (tile) of pf_step and pf_sums for `n` particles.
fn tiling(n: usize) -> (u32, u32) {
    if small_filter(n) {
        (PF_SMALL_BLOCK, PF_SMALL_BLOCK)
    } else {
        (PF_BLOCK, PF_TILE)
    }
}

/// The finalize's decisions (kernels/pf.cu: FLAG_*).
const FLAG_KEEP: u32 = 0;
const FLAG_RESAMPLE: u32 = 1;
const FLAG_TEMPER: u32 = 2;
const FLAG_DEGENERATE: u32 = 3;
const FLAG_TEMPERED_KEEP: u32 = 4;
const FLAG_TEMPERED_RESAMPLE: u32 = 5;
const FLAG_RESET_KEEP: u32 = 6;
const FLAG_RESET_RESAMPLE: u32 = 7;
/// pf_step_live waited LIVE_TIMEOUT_NS (kernels/pf.cu) for its measurement and gave up.
const FLAG_LIVE_TIMEOUT: u32 = 8;
/// The stamp of a live step the host withdraws: its value | LIVE_CANCEL (kernels/pf.cu).
const LIVE_CANCEL: u32 = 0x8000_0000;
/// The measurement fits pf_step's shared memory (kernels/pf.cu: MEAS_SHARED, MEAS_PAIRS),
/// which a live step needs (it builds or copies the measurement there once it may go on).
const MEAS_SHARED: usize = 1024;
const MEAS_PAIRS: usize = 256;
/// What the host writes into its copy of a flag before the device writes the flag itself.
const FLAG_PENDING: u32 = u32::MAX;
/// What the waits and errors call the filter's work.
const KERNELS: &str = "the particle-filter kernels";

#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct StepParams {
    seed: u64,
    frame: u64,
    /// Device addresses of the parts of `down` (page-locked, mapped), which the kernels write
    /// besides their own copies; 0 where the memory could not be mapped (then a copy brings them
    /// back).
    mirror_sums: u64,
    mirror_flags: u64,
    mirror_betas: u64,
    n: u32,
    n_models: u32,
    n_sensors: u32,
    n_pairs: u32,
    k: u32,
    mode: u32,
    has_bounds: u32,
    forced_model: u32,
    /// pf_step_live: this step's stamp value (the stamp reads it once the host has copied the
    /// measurement in, and it | LIVE_CANCEL when the step is withdrawn); 0 otherwise.
    live: u32,
    /// Line mode: 1, and particles are turned about `axis` into the half-plane of `side`; 2,
    /// into the half-plane of whichever of `side` and `-side` they are on (a turning array).
    line: u32,
    inv_c: f32,
    inv_two_var: f32,
    gate: f32,
    ess_fraction: f32,
    lo: [f32; 3],
    hi: [f32; 3],
    axis: [f32; 3],
    side: [f32; 3],
    cdf: [f32; MAX_MODELS * MAX_MODELS],
}

#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct TrackParams {
    slot: u32,
    cur: u32,
    dt: f32,
    lag: f32,
    offset: f32,
    u0: f32,
    /// The particles' turn about z (`TrackStep::turn`; 0 and 1 for a fixed array).
    turn_sin: f32,
    turn_cos: f32,
}

#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct Coeffs {
    kind: [u32; MAX_MODELS],
    accel_std: [f32; MAX_MODELS],
    turn_sd: [f32; MAX_MODELS],
    decay: [f32; MAX_MODELS],
}

/// Where pf_step_live finds its measurement when the device builds it (kernels/common.cuh).
#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct LiveMeas {
    /// The correlator's peaks on the device; 0: the host copies the measurement in.
    peaks: u64,
    done: u64,
    ratio: u64,
    pair_ok: u64,
    expect: u32,
    fs: f32,
    pd: f32,
    q_mid: f32,
    q_width: f32,
    pad: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct InitParams {
    mean: [f64; 6],
    chol: [f64; 36],
    speed_ball: f64,
    model_cdf: [f32; MAX_MODELS],
    n_model_probs: u32,
    slot: u32,
    cur: u32,
    inv_range_max: f32,
    frame: u64,
}

struct Kernels {
    /// pf_step or pf_step_small (by the particle count; likewise pf_sums).
    step: CudaFunction,
    sums: CudaFunction,
    slow_begin: CudaFunction,
    temper_grid: CudaFunction,
    scan_local: CudaFunction,
    resample: CudaFunction,
    /// Scan and resampling in one kernel, for filters of at most RS_SMALL_MAX.
    resample_small: CudaFunction,
    init: CudaFunction,
    fetch: CudaFunction,
    /// pf_step_small launched ahead of its measurement (`prepare_step`).
    live: CudaFunction,
    /// The same as one thread-block cluster per track (`launch_cluster`), where the device has
    /// clusters and the filter's tiles fit one.
    live_cluster: Option<DriverFunction>,
}

/// Page-locked host memory mapped into the device (with its device address), or, where that
/// fails, page-locked memory that copies move.
/// `SONOTRACK_NO_MAPPED_PARAMS=1` takes the copies (to test that path on a GPU that maps).
fn mapped_or_not(len: usize) -> Result<(Pinned<u8>, Option<u64>), BackendError> {
    if env_is_one("SONOTRACK_NO_MAPPED_PARAMS") {
        return Ok((Pinned::new(len)?, None));
    }
    match Pinned::<u8>::mapped(len).and_then(|d| {
        let at = d.device_ptr()?;
        Ok((d, at))
    }) {
        Ok((d, at)) => Ok((d, Some(at))),
        Err(e) => {
            log::info!("{e}; the filter's parameters and results move by copies");
            Ok((Pinned::new(len)?, None))
        }
    }
}

/// Byte offsets of the parts of the per-step upload (`up`) and download (`down`) buffers.
#[derive(Clone, Copy)]
struct Layout {
    step: usize,
    tracks: usize,
    coeffs: usize,
    tdoa: usize,
    amp: usize,
    floor: usize,
    reference: usize,
    live: usize,
    ratio: usize,
    pair_ok: usize,
    /// What a step's fetch brings to the device: `up` up to here.
    up_len: usize,
    /// The roughening factors of the tracks that resample after the usual step (36 f32 per
    /// track, by the step's track index), written by the host after the step's decisions
    /// (`put_roughening`); after `up_len`, so that no step's fetch carries them.
    rough: usize,
    /// The whole of `up` (and `d_up`).
    up_size: usize,
    sums: usize,
    flags: usize,
    betas: usize,
    down_len: usize,
}

/// Peaks per pair the measurement buffers hold.
const KPP: usize = 16;

impl Layout {
    fn new(slots: usize, pairs: usize) -> Self {
        let align = |x: usize| x.div_ceil(256) * 256;
        let step = 0;
        let tracks = align(step + std::mem::size_of::<StepParams>());
        let coeffs = align(tracks + slots * std::mem::size_of::<TrackParams>());
        // The measurement last: a live step's parameters are fetched without it (its own copy
        // comes later, `Stamp::write`), so that the fetch cannot overwrite that copy.
        let reference = align(coeffs + slots * std::mem::size_of::<Coeffs>());
        let live = align(reference + slots * 8 * 4);
        let ratio = align(live + std::mem::size_of::<LiveMeas>());
        let pair_ok = align(ratio + pairs.max(1) * 4);
        let tdoa = align(pair_ok + pairs.max(1) * 4);
        let amp = align(tdoa + pairs * KPP * 4);
        let floor = align(amp + pairs * KPP * 4);
        let up_len = align(floor + pairs.max(1) * 4);
        let rough = up_len;
        let up_size = align(rough + slots * 36 * 4);
        let sums = 0;
        let flags = align(sums + slots * PART * 8);
        let betas = align(flags + slots * 4);
        let down_len = align(betas + slots * 4);
        Self {
            step,
            tracks,
            coeffs,
            tdoa,
            amp,
            floor,
            up_len,
            rough,
            up_size,
            sums,
            reference,
            live,
            ratio,
            pair_ok,
            flags,
            betas,
            down_len,
        }
    }
}

/// Device addresses of the parts of `up` and `down`.
#[derive(Clone, Copy)]
struct Ptrs {
    step: u64,
    tracks: u64,
    coeffs: u64,
    tdoa: u64,
    amp: u64,
    floor: u64,
    sums: u64,
    reference: u64,
    flags: u64,
    betas: u64,
    live: u64,
    ratio: u64,
    pair_ok: u64,
    /// Where the resampling kernels read the host's roughening factors: `up`'s part in mapped
    /// memory, or `d_up`'s, which the resampling's sequence then fills by a copy first.
    rough: u64,
}

/// The arguments pf_resample_small and pf_scan_local start with (kernels/pf.cu): the step,
/// tracks, flags and track mask, then the weights' exponentials, the tiles' rows (their maxima),
/// the tile count and size, and the tracks' sums.
fn weights_args<'a>(
    b: &mut LaunchArgs<'a>,
    p: &'a Ptrs,
    mask: &'a u32,
    e: &'a CudaSlice<f32>,
    partials: &'a CudaSlice<f32>,
    n_tiles: &'a u32,
    tile: &'a u32,
) {
    b.arg(&p.step)
        .arg(&p.tracks)
        .arg(&p.flags)
        .arg(mask)
        .arg(e)
        .arg(partials)
        .arg(n_tiles)
        .arg(tile)
        .arg(&p.sums);
}

/// The arguments the resampling kernels end with: both state and both model buffers, the log
/// weights and the roughening factors.
fn particle_args<'a>(
    b: &mut LaunchArgs<'a>,
    state: [&'a mut CudaSlice<f32>; 2],
    model: [&'a mut CudaSlice<u32>; 2],
    log_w: &'a mut CudaSlice<f32>,
    chol: &'a CudaSlice<f32>,
) {
    let [s0, s1] = state;
    let [m0, m1] = model;
    b.arg(s0).arg(s1).arg(m0).arg(m1).arg(log_w).arg(chol);
}

pub struct CudaParticleFilter {
    gpu: Arc<Gpu>,
    /// The filter's own stream (forked from the context's when it is made), so that filters in
    /// one process never queue work into each other's graph captures.
    stream: Arc<CudaStream>,
    params: FilterParams,
    /// Particles per track.
    particles: usize,
    k: Kernels,
    s0: CudaSlice<f32>,
    s1: CudaSlice<f32>,
    m0: CudaSlice<u32>,
    m1: CudaSlice<u32>,
    log_w: CudaSlice<f32>,
    /// This step's log-likelihoods.
    log_lik: CudaSlice<f32>,
    /// exp(log_w - the tile's largest log_w).
    weight_exp: CudaSlice<f32>,
    sensors: CudaSlice<f32>,
    pairs: CudaSlice<u32>,
    /// Step parameters, track parameters, coefficients and the measurement, uploaded at once
    /// (owns the memory `ptr` points into).
    _d_up: CudaSlice<u8>,
    /// Sums, reference particles and decisions, downloaded at once (likewise).
    _d_down: CudaSlice<u8>,
    d_init: CudaSlice<u8>,
    lay: Layout,
    ptr: Ptrs,
    up: Pinned<u8>,
    down: Pinned<u8>,
    /// The device's address of `down`, when the kernels write it directly.
    mirror: Option<u64>,
    /// The device's address of `up`, when a kernel reads it directly.
    up_mapped: Option<u64>,
    partials: CudaSlice<f32>,
    /// Scratch for the finalize at the end of pf_step and pf_sums: one f64 row of sums per
    /// group of FIN_ROWS tile rows.
    fin_groups: CudaSlice<f64>,
    /// Tickets for that finalize, per track: [0] the groups, [1 + g] the tiles of group g
    /// (each reset by its last block).
    step_tickets: CudaSlice<u32>,
    /// pf_scan_local's per-track tickets (the last block scans the block totals; it resets
    /// the counter).
    scan_counters: CudaSlice<u32>,
    /// pf_slow_begin's per-track tickets (the last block takes the bounds over the blocks;
    /// it resets the counter).
    temper_counters: CudaSlice<u32>,
    /// pf_temper_grid's tickets per track ([0] the groups, [1 + g] the blocks of group g of
    /// TEMPER_GROUP, each reset by its last user) and its group rows of grid sums.
    temper_tickets: CudaSlice<u32>,
    temper_groups: CudaSlice<f64>,
    temper_parts: CudaSlice<f32>,
    temper_grid: CudaSlice<f64>,
    temper_bounds: CudaSlice<f32>,
    chol: CudaSlice<f32>,
    cdf: CudaSlice<f64>,
    block_tot: CudaSlice<f64>,
    /// The captured sequences (`Seq`) by number of tracks (None where capture failed).
    graphs: std::collections::HashMap<(usize, Seq), Option<Graph>>,
    /// Which buffer holds each slot's particles.
    cur: Vec<u32>,
    log_norm: Vec<f64>,
    /// Each slot's reference point for the next step's sums (src/track/filter/particle.rs takes its particle
    /// 0; any point near the cloud keeps the covariance's precision): the last estimate's mean,
    /// the prior's mean after `init_track`, particle 0 after `write_particles`.
    reference: Vec<[f32; 6]>,
    timer: DeviceTimer,
    last_s: Option<f64>,
    /// Tracks that resampled in the last step (for the bytes-moved figure).
    last_resampled: usize,
    last_tracks: usize,
    /// pf_step_live's stamp (see `Stamp`); None where live steps are off.
    stamp: Option<Stamp>,
    /// The last stamp value a live step was given.
    live_count: u32,
    /// The live step launched ahead of its measurement, if any.
    prepared: Option<Prepared>,
    /// A resampling (`Seq::Resample`, for this many tracks, after the step of this frame)
    /// that the last step left for between frames (`FilterBank::flush`), and the error of
    /// such a launch, which the next call reports (see `settle`).
    deferred: Option<(usize, u64)>,
    deferred_err: Option<BackendError>,
    /// Fault injection (tests): deferred resamplings of steps from this frame on are not
    /// launched and report a failure instead (see [`Self::fail_deferred_launches_from`]).
    fail_deferred_from: Option<u64>,
}

/// pf_step_live's stamp: a word in device memory that the kernel polls, which the host sets
/// (after copying the measurement in) on a stream of its own, beside the filter's stream where
/// the kernel waits. (Polling a word in mapped host memory instead, 32 blocks' reads crossing
/// the bus slowed everything else that crossed it, the frame's correlation included, by
/// hundreds of microseconds on the H100.)
struct Stamp {
    /// Owns the word at `at`.
    _dev: CudaSlice<u32>,
    at: u64,
    aux: Arc<cudarc::driver::CudaStream>,
}

impl Stamp {
    fn new(gpu: &Gpu) -> Result<Self, BackendError> {
        let aux = gpu
            .ctx
            .new_stream()
            .map_err(err("creating the live step's stream"))?;
        let dev = aux
            .alloc_zeros::<u32>(1)
            .map_err(err("allocating the live step's stamp"))?;
        aux.synchronize()
            .map_err(err("allocating the live step's stamp"))?;
        let at = dptr(&dev, &aux);
        Ok(Self { _dev: dev, at, aux })
    }

    /// Copy `len` bytes from page-locked `src` to device address `dst` (if any), then set the
    /// stamp to `v`, on the stamp's stream (without waiting).
    ///
    /// # Safety
    /// `src` must hold `len` bytes of page-locked memory that stay unchanged until the stream
    /// has passed the copy, and `dst` must hold `len` bytes.
    unsafe fn write(
        &self,
        v: u32,
        copy: Option<(u64, *const u8, usize)>,
    ) -> Result<(), BackendError> {
        let st = self.aux.cu_stream();
        if let Some((dst, src, len)) = copy {
            // SAFETY: as the caller promises.
            unsafe { cudarc::driver::sys::cuMemcpyHtoDAsync_v2(dst, src.cast(), len, st) }
                .result()
                .map_err(err("copying the live step's measurement"))?;
        }
        // SAFETY: the stamp's word is alive as long as `self`.
        unsafe { cudarc::driver::sys::cuMemsetD32Async(self.at, v, 1, st) }
            .result()
            .map_err(err("setting the live step's stamp"))
    }
}

/// A live step launched by `prepare_step`, waiting for its measurement.
struct Prepared {
    value: u32,
    /// The device builds the measurement from the correlator's peaks (`LiveSource`).
    built: bool,
    /// What its parameters were made from (with the slots' state, which only a step, an init
    /// or a write changes, and those withdraw it): the step that completes it must have the
    /// same.
    frame: u64,
    sigma_bits: u32,
    peaks_per_pair: usize,
    steps: Vec<(u32, u32, u32, u32)>,
}

impl Prepared {
    fn key(tracks: &[TrackStep]) -> Vec<(u32, u32, u32, u32)> {
        tracks
            .iter()
            .map(|tr| {
                (
                    tr.slot,
                    tr.dt_s.to_bits(),
                    tr.lag_s.to_bits(),
                    tr.yaw_rad.to_bits(),
                )
            })
            .collect()
    }

    fn matches(&self, meas: &TdoaMeasurement, tracks: &[TrackStep]) -> bool {
        self.frame == meas.frame
            && self.sigma_bits == meas.sigma_s.to_bits()
            && self.peaks_per_pair == meas.peaks_per_pair
            && self.steps == Self::key(tracks)
    }
}

/// The captured sequences of a step (one graph each per track count).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
enum Seq {
    /// The step's parameters, the step and its finalize (`enqueue_step`).
    Step,
    /// The resampling of the tracks that decided to (flag FLAG_RESAMPLE).
    Resample,
    /// The slow path (`enqueue_slow`), with its own resampling.
    Slow,
    /// A live step: the parameters, then pf_step_live waiting for its measurement
    /// (`enqueue_live`).
    Live,
}

/// Blocks of `per_block` threads over `n` particles, for each of `tracks` tracks.
fn grid(n: usize, per_block: u32, tracks: usize) -> LaunchConfig {
    LaunchConfig {
        grid_dim: ((n as u32).div_ceil(per_block), tracks as u32, 1),
        block_dim: (per_block, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// pf_scan_local's and pf_resample's grids: blocks of `per_block` threads over `n` particles,
/// at most `per_sm` blocks per multiprocessor (one wave: the kernels stride over the rest), for
/// each of `tracks` tracks. The blocks of a track that does not resample return at once: a wave
/// of them costs less than the thousands a grid over every particle would have (4,096 for
/// pf_resample at 1M particles).
fn wave(n: usize, per_block: u32, per_sm: u32, sms: i32, tracks: usize) -> LaunchConfig {
    let mut g = grid(n, per_block, tracks);
    g.grid_dim.0 = g.grid_dim.0.min(per_sm * sms.max(1) as u32).max(1);
    g
}

/// pf_step's and pf_sums's blocks over tiles of particles, for each of `tracks` tracks.
fn tiles(n: usize, tracks: usize) -> LaunchConfig {
    let (block, tile) = tiling(n);
    LaunchConfig {
        grid_dim: ((n as u32).div_ceil(tile), tracks as u32, 1),
        block_dim: (block, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// Rows of tile sums per track for `n` particles.
fn n_tiles(n: usize) -> usize {
    n.div_ceil(tiling(n).1 as usize)
}

fn bytes<T: Pod>(v: &[T]) -> &[u8] {
    bytemuck::cast_slice(v)
}

/// Write `v` at byte offset `at` of a host buffer.
fn put<T: Pod>(buf: &mut [u8], at: usize, v: &[T]) {
    let b = bytes(v);
    buf[at..at + b.len()].copy_from_slice(b);
}

/// Read `len` values of `T` at byte offset `at` of a host buffer.
fn get<T: Pod>(buf: &[u8], at: usize, len: usize) -> Vec<T> {
    let size = std::mem::size_of::<T>();
    let mut v = vec![T::zeroed(); len];
    bytemuck::cast_slice_mut::<T, u8>(&mut v).copy_from_slice(&buf[at..at + len * size]);
    v
}

impl CudaParticleFilter {
    /// Fault injection for tests: from the step of frame `frame` on, a resampling left for
    /// between frames is not launched, and the next call reports that failure, as it would a
    /// device that failed between frames (the pipeline then redoes the frame on the CPU).
    #[doc(hidden)]
    pub fn fail_deferred_launches_from(&mut self, frame: u64) {
        self.fail_deferred_from = Some(frame);
    }

    pub fn new(gpu: Arc<Gpu>, p: FilterParams) -> Result<Self, BackendError> {
        if p.selection == ModelSelection::Nearest {
            return Err(BackendError::new(
                "cuda",
                "the nearest-model rule runs on the CPU backend only",
            ));
        }
        if p.sensors.len() > crate::track::measure::likelihood::MAX_SENSORS {
            return Err(BackendError::new(
                "cuda",
                format!(
                    "{} sensors; the GPU filter takes at most {}",
                    p.sensors.len(),
                    crate::track::measure::likelihood::MAX_SENSORS
                ),
            ));
        }
        let s = gpu
            .stream
            .fork()
            .map_err(err("creating the filter's stream"))?;
        let n = p.particles;
        let slots = p.slots;
        let nb = n.div_ceil(PF_BLOCK as usize);
        let nsb = n.div_ceil(SCAN_BLOCK as usize);
        let f32s = |len: usize| {
            s.alloc_zeros::<f32>(len.max(1))
                .map_err(err("allocating particle buffers"))
        };
        let u32s = |len: usize| {
            s.alloc_zeros::<u32>(len.max(1))
                .map_err(err("allocating particle buffers"))
        };
        let f64s = |len: usize| {
            s.alloc_zeros::<f64>(len.max(1))
                .map_err(err("allocating particle buffers"))
        };
        let u8s = |len: usize| {
            s.alloc_zeros::<u8>(len.max(1))
                .map_err(err("allocating parameter buffers"))
        };
        let sensor_flat: Vec<f32> = p.sensors.iter().flat_map(|s| *s).collect();
        let pair_flat: Vec<u32> = p.pairs.iter().flat_map(|&(a, b)| [a, b]).collect();
        let mut sensors = f32s(sensor_flat.len())?;
        s.memcpy_htod(&sensor_flat, &mut sensors)
            .map_err(err("uploading sensors"))?;
        let mut pairs = u32s(pair_flat.len())?;
        s.memcpy_htod(&pair_flat, &mut pairs)
            .map_err(err("uploading pairs"))?;
        let k = Kernels {
            // The large step is built for one mode each (kernels/pf.cu: pf_step).
            step: gpu.function(
                &PF,
                if small_filter(n) {
                    "pf_step_small"
                } else if p.mode.angular() {
                    "pf_step_dir"
                } else {
                    "pf_step"
                },
            )?,
            sums: gpu.function(
                &PF,
                if small_filter(n) {
                    "pf_sums_small"
                } else {
                    "pf_sums"
                },
            )?,
            slow_begin: gpu.function(&PF, "pf_slow_begin")?,
            temper_grid: gpu.function(&PF, "pf_temper_grid")?,
            scan_local: gpu.function(&PF, "pf_scan_local")?,
            resample: gpu.function(&PF, "pf_resample")?,
            resample_small: gpu.function(&PF, "pf_resample_small")?,
            init: gpu.function(&PF, "pf_init")?,
            fetch: gpu.function(&PF, "pf_fetch")?,
            live: gpu.function(&PF, "pf_step_live")?,
            live_cluster: if gpu.clusters && small_filter(n) && n_tiles(n) <= LIVE_CLUSTER_MAX {
                gpu.driver_function(&PF, "pf_step_live_cluster")?
            } else {
                None
            },
        };
        let lay = Layout::new(slots, p.pairs.len());
        let d_up = u8s(lay.up_size)?;
        let d_down = u8s(lay.down_len)?;
        let (up0, down0) = (dptr(&d_up, &s), dptr(&d_down, &s));
        let mut ptr = Ptrs {
            step: up0 + lay.step as u64,
            tracks: up0 + lay.tracks as u64,
            coeffs: up0 + lay.coeffs as u64,
            tdoa: up0 + lay.tdoa as u64,
            amp: up0 + lay.amp as u64,
            floor: up0 + lay.floor as u64,
            sums: down0 + lay.sums as u64,
            reference: up0 + lay.reference as u64,
            flags: down0 + lay.flags as u64,
            betas: down0 + lay.betas as u64,
            live: up0 + lay.live as u64,
            ratio: up0 + lay.ratio as u64,
            pair_ok: up0 + lay.pair_ok as u64,
            rough: up0 + lay.rough as u64,
        };
        // The kernels write the sums, flags and exponents straight into `down` as well, so a
        // step needs no copy back, and a one-block kernel reads `up` where it is, so none
        // there either (graph nodes are cheaper than copies). Without mapped memory, copies do
        // it.
        let (down, mirror) = mapped_or_not(lay.down_len)?;
        let (up, up_mapped) = mapped_or_not(lay.up_size)?;
        if let Some(m) = up_mapped {
            ptr.rough = m + lay.rough as u64;
        }
        // Live steps need the parameters and results in mapped memory, and a small filter;
        // `SONOTRACK_NO_LIVE_STEP=1` turns them off (for comparison).
        let live_off = env_is_one("SONOTRACK_NO_LIVE_STEP");
        let stamp = if small_filter(n) && mirror.is_some() && up_mapped.is_some() && !live_off {
            Stamp::new(&gpu)
                .map_err(|e| log::debug!("no live filter steps: {e}"))
                .ok()
        } else {
            None
        };
        Ok(Self {
            s0: f32s(slots * STATE_DIM * n)?,
            s1: f32s(slots * STATE_DIM * n)?,
            m0: u32s(slots * n)?,
            m1: u32s(slots * n)?,
            log_w: f32s(slots * n)?,
            log_lik: f32s(slots * n)?,
            weight_exp: f32s(slots * n)?,
            sensors,
            pairs,
            _d_up: d_up,
            _d_down: d_down,
            d_init: u8s(std::mem::size_of::<InitParams>())?,
            up,
            up_mapped,
            down,
            mirror,
            lay,
            ptr,
            partials: f32s(slots * n_tiles(n) * PART)?,
            fin_groups: f64s(slots * fin_groups(n_tiles(n)) * PART)?,
            step_tickets: u32s(slots * (fin_groups(n_tiles(n)) + 1))?,
            scan_counters: u32s(slots)?,
            temper_counters: u32s(slots)?,
            temper_tickets: u32s(slots * (nb.div_ceil(TEMPER_GROUP) + 1))?,
            temper_groups: f64s(slots * nb.div_ceil(TEMPER_GROUP) * 34)?,
            temper_parts: f32s(slots * nb * 2)?,
            temper_grid: f64s(slots * nb * 34)?,
            temper_bounds: f32s(slots * 2)?,
            chol: f32s(slots * 36)?,
            cdf: f64s(slots * n)?,
            block_tot: f64s(slots * (nsb + 1))?,
            graphs: std::collections::HashMap::new(),
            cur: vec![0; slots],
            log_norm: vec![(n as f64).ln(); slots],
            reference: vec![[0.0; 6]; slots],
            timer: DeviceTimer::new(&gpu.ctx, false)?,
            last_s: None,
            last_resampled: 0,
            last_tracks: 0,
            stamp,
            live_count: 0,
            prepared: None,
            deferred: None,
            deferred_err: None,
            fail_deferred_from: None,
            particles: n,
            k,
            params: p,
            stream: s.clone(),
            gpu,
        })
    }

    fn step_params(&self, meas: &TdoaMeasurement) -> StepParams {
        let p = &self.params;
        let sigma = meas.sigma_s.max(1e-12);
        let (has_bounds, lo, hi) = match p.bounds {
            Some((lo, hi)) => (1, lo, hi),
            None => (0, [0.0; 3], [0.0; 3]),
        };
        let at = |off: usize| self.mirror.map_or(0, |m| m + off as u64);
        StepParams {
            seed: p.seed,
            frame: meas.frame,
            mirror_sums: at(self.lay.sums),
            mirror_flags: at(self.lay.flags),
            mirror_betas: at(self.lay.betas),
            n: self.particles as u32,
            n_models: p.n_models() as u32,
            n_sensors: p.sensors.len() as u32,
            n_pairs: p.pairs.len() as u32,
            k: meas.peaks_per_pair as u32,
            mode: crate::track::motion::models::Kinematics::of(p).kernel_mode(),
            has_bounds,
            forced_model: u32::MAX,
            live: 0,
            line: p.line.map_or(0, |l| if l.keep_side { 2 } else { 1 }),
            inv_c: 1.0 / p.speed_of_sound_m_s,
            inv_two_var: 1.0 / (2.0 * sigma * sigma),
            gate: crate::track::measure::likelihood::GATE_SIGMAS * sigma,
            ess_fraction: p.ess_fraction,
            lo,
            hi,
            axis: p.line.map_or([0.0; 3], |l| l.axis),
            side: p.line.map_or([0.0; 3], |l| l.side),
            cdf: padded_cdf(&p.transition_cdf, p.n_models()),
        }
    }

    /// Copy host values to a device address now (slow path; pageable source).
    fn upload_to<T: Pod>(&self, dst: u64, v: &[T], what: &str) -> Result<(), BackendError> {
        if v.is_empty() {
            return Ok(());
        }
        let st = self.stream.cu_stream();
        // SAFETY: every destination passed is a part of `d_up`/`d_down` or a buffer sized for
        // all slots, which holds `v`; a pageable source is staged by the driver before the
        // call returns.
        unsafe { result::memcpy_htod_async(dst, v, st) }.map_err(err(what))
    }

    /// The resampling of the tracks that decided to after the usual step (`Seq::Resample`),
    /// roughened by the factors the host has put into `up` (`put_roughening`): where `up` is
    /// not mapped, a copy brings them to `d_up` first.
    fn enqueue_resample(&mut self, t: usize) -> Result<(), BackendError> {
        if self.up_mapped.is_none() {
            let s = self.stream.clone();
            // SAFETY: `d_up` is `up_size` bytes like `up`, and `ptr.rough` is its part at
            // `lay.rough`; the factors are not written again until the next step's decisions,
            // which come after this copy on the stream.
            unsafe {
                self.up
                    .copy_range_to_device(self.lay.rough, self.ptr.rough, t * 36 * 4, &s)?
            };
        }
        self.launch_resample(t, 1 << FLAG_RESAMPLE)
    }

    /// Resample the step's tracks whose flag is in `mask` (bits 1 << flag), into the other
    /// buffer, roughening the particles as it copies them: by the factors of the slow path's
    /// finalize (`chol`) or, after the usual step, by the host's (`ptr.rough`).
    fn launch_resample(&mut self, t: usize, mask: u32) -> Result<(), BackendError> {
        let s = self.stream.clone();
        let nn = self.particles;
        let nb = n_tiles(self.particles) as u32;
        let tile = tiling(self.particles).1;
        // A small filter resamples in one kernel (the scan, search and copy); a large one scans
        // first. Both start with the weights' arguments.
        let small = nn <= RS_SMALL_MAX;
        let first = if small {
            &self.k.resample_small
        } else {
            &self.k.scan_local
        };
        let mut b = s.launch_builder(first);
        weights_args(
            &mut b,
            &self.ptr,
            &mask,
            &self.weight_exp,
            &self.partials,
            &nb,
            &tile,
        );
        // The kernel that copies the ancestors: the small filter's one, or pf_resample after
        // pf_scan_local.
        let (mut b, cfg, name) = if small {
            // A block per RS_SMALL_SLOTS output slots (each block scans the whole track, and
            // copies and roughens its share), no more blocks than SMs.
            let split = nn
                .div_ceil(RS_SMALL_SLOTS)
                .clamp(1, self.gpu.multiprocessors.max(1) as usize);
            let blocks = LaunchConfig {
                grid_dim: (split as u32, t as u32, 1),
                block_dim: (RS_SMALL_THREADS, 1, 1),
                shared_mem_bytes: 0,
            };
            (b, blocks, "pf_resample_small")
        } else {
            b.arg(&mut self.cdf)
                .arg(&mut self.block_tot)
                .arg(&mut self.scan_counters)
                .arg(&self.ptr.rough)
                .arg(&mut self.chol);
            let sms = self.gpu.multiprocessors;
            // SAFETY: the argument list matches pf_scan_local; every buffer is sized for all
            // slots (the kernel strides over the chunks its grid does not cover).
            unsafe { b.launch(wave(nn, SCAN_BLOCK, 2, sms, t)) }.map_err(err("pf_scan_local"))?;
            let mut b = s.launch_builder(&self.k.resample);
            b.arg(&self.ptr.step)
                .arg(&self.ptr.tracks)
                .arg(&self.ptr.flags)
                .arg(&mask)
                .arg(&self.cdf)
                .arg(&self.block_tot);
            (b, wave(nn, PF_BLOCK, 8, sms, t), "pf_resample")
        };
        particle_args(
            &mut b,
            [&mut self.s0, &mut self.s1],
            [&mut self.m0, &mut self.m1],
            &mut self.log_w,
            &self.chol,
        );
        if small {
            b.arg(&self.ptr.rough);
        }
        // SAFETY: the argument list matches the kernel (pf_resample_small or pf_resample);
        // every buffer is sized for all slots, and a small filter's n fits pf_resample_small's
        // shared cumulative sums.
        unsafe { b.launch(cfg) }.map_err(err(name))?;
        Ok(())
    }

    /// The common step for `t` tracks whose parameters are in `up`: upload, step,
    /// finalize (with decisions), download. No synchronisation. The tracks that decided to
    /// resample do so in a sequence of their own (`Seq::Resample`), which `step_with` launches
    /// once it has read the decisions, and only when a track needs it.
    fn enqueue_step(&mut self, t: usize) -> Result<(), BackendError> {
        let s = self.stream.clone();
        self.enqueue_fetch(&s, self.lay.up_len)?;
        self.launch_step(&s, t, false)?;
        self.bring_back(&s)
    }

    /// A live step for `t` tracks (`prepare_step`): the parameters (already in `up`; the
    /// measurement, last in `up`, is left out), then pf_step_live, which predicts and waits
    /// (for the correlator's peaks, or for the host's own copy of the measurement:
    /// `Stamp::write`). The results come back through the mapped `down` (a live step needs
    /// it).
    fn enqueue_live(&mut self, t: usize) -> Result<(), BackendError> {
        let s = self.stream.clone();
        self.enqueue_fetch(&s, self.lay.tdoa)?;
        self.launch_step(&s, t, true)
    }

    /// The first `len` bytes of `up` (a multiple of 16) to `d_up`: by pf_fetch where `up` is
    /// mapped, else by a copy.
    fn enqueue_fetch(
        &mut self,
        s: &cudarc::driver::CudaStream,
        len: usize,
    ) -> Result<(), BackendError> {
        match self.up_mapped {
            Some(src) => {
                let n16 = (len / 16) as u32;
                // A thread per 16 bytes (each read crosses the bus: a second round of them cost
                // the step a microsecond and a half).
                let threads = n16.div_ceil(32).clamp(1, 32) * 32;
                // SAFETY: `src` is the device's address of `up` and `ptr.step` the start of
                // `d_up`, both `up_len >= len` bytes; the part of `up` fetched is not written
                // until the step has been synchronised.
                unsafe {
                    s.launch_builder(&self.k.fetch)
                        .arg(&src)
                        .arg(&self.ptr.step)
                        .arg(&n16)
                        .launch(LaunchConfig {
                            grid_dim: (1, 1, 1),
                            block_dim: (threads, 1, 1),
                            shared_mem_bytes: 0,
                        })
                        .map_err(err("pf_fetch"))?;
                }
                Ok(())
            }
            // SAFETY: `up` and `d_up` have the same length, at least `len`; the part copied is
            // not written until the step has been synchronised.
            None => unsafe { self.up.copy_to_device(self.ptr.step, len, s) },
        }
    }

    /// pf_step (or pf_step_small), or with `live` pf_step_live, for `t` tracks.
    fn launch_step(
        &mut self,
        s: &cudarc::driver::CudaStream,
        t: usize,
        live: bool,
    ) -> Result<(), BackendError> {
        let nb = n_tiles(self.particles) as u32;
        let (f, name) = if live {
            (&self.k.live, "pf_step_live")
        } else {
            (&self.k.step, "pf_step")
        };
        let stamp = self.stamp.as_ref().map_or(0, |st| st.at);
        if let (true, Some(fc)) = (live, self.k.live_cluster) {
            let (sensors, pairs) = (dptr(&self.sensors, s), dptr(&self.pairs, s));
            let (s0, s1) = (dptr(&self.s0, s), dptr(&self.s1, s));
            let (m0, m1) = (dptr(&self.m0, s), dptr(&self.m1, s));
            let (log_w, ll, e) = (
                dptr(&self.log_w, s),
                dptr(&self.log_lik, s),
                dptr(&self.weight_exp, s),
            );
            let (partials, groups) = (dptr(&self.partials, s), dptr(&self.fin_groups, s));
            let tickets = dptr(&self.step_tickets, s);
            let p = &self.ptr;
            let a = |v: &u64| std::ptr::from_ref(v).cast_mut().cast::<std::ffi::c_void>();
            let mut args = [
                a(&p.step),
                a(&p.tracks),
                a(&p.coeffs),
                a(&sensors),
                a(&pairs),
                a(&p.tdoa),
                a(&p.amp),
                a(&p.floor),
                a(&s0),
                a(&s1),
                a(&m0),
                a(&m1),
                a(&log_w),
                a(&ll),
                a(&e),
                a(&p.reference),
                a(&partials),
                std::ptr::from_ref(&nb).cast_mut().cast(),
                a(&groups),
                a(&tickets),
                a(&p.sums),
                a(&p.flags),
                a(&stamp),
                a(&p.live),
            ];
            let cfg = tiles(self.particles, t);
            // SAFETY: the arguments are pf_step_live's (kernels/pf.cu: pf_step_live_cluster has
            // its signature), each a pointer to a value of the kernel's type (device addresses as
            // u64, the tile count as u32) that lives through the call; the buffers are those of
            // the cudarc launch below, sized for all slots; the grid is one cluster per track.
            return unsafe { launch_cluster(fc, cfg, cfg.grid_dim.0, s, &mut args) };
        }
        let mut b = s.launch_builder(f);
        b.arg(&self.ptr.step)
            .arg(&self.ptr.tracks)
            .arg(&self.ptr.coeffs)
            .arg(&self.sensors)
            .arg(&self.pairs)
            .arg(&self.ptr.tdoa)
            .arg(&self.ptr.amp)
            .arg(&self.ptr.floor)
            .arg(&mut self.s0)
            .arg(&mut self.s1)
            .arg(&mut self.m0)
            .arg(&mut self.m1)
            .arg(&mut self.log_w)
            .arg(&mut self.log_lik)
            .arg(&mut self.weight_exp)
            .arg(&self.ptr.reference)
            .arg(&mut self.partials)
            .arg(&nb)
            .arg(&mut self.fin_groups)
            .arg(&mut self.step_tickets)
            .arg(&self.ptr.sums)
            .arg(&self.ptr.flags);
        if live {
            b.arg(&stamp).arg(&self.ptr.live);
        }
        // SAFETY: the argument list matches kernels/pf.cu (pf_step_live's ends with the stamp's
        // device address and its LiveMeas in `d_up`); every buffer is sized for all slots, and
        // the grid covers `t` tracks of `n` particles.
        unsafe { b.launch(tiles(self.particles, t)) }.map_err(err(name))?;
        Ok(())
    }

    /// Enqueue the copy of the sums, flags and exponents to the host, unless the kernels
    /// write them there themselves.
    fn bring_back(&mut self, s: &cudarc::driver::CudaStream) -> Result<(), BackendError> {
        if self.mirror.is_none() {
            // SAFETY: `down` and `d_down` have the same length; the caller synchronises before
            // reading.
            unsafe {
                self.down
                    .copy_from_device(self.ptr.sums, self.lay.down_len, s)?;
            }
        }
        Ok(())
    }

    /// The slow path for the step's tracks flagged FLAG_TEMPER or FLAG_DEGENERATE, on the
    /// device: reset the weights of degenerate tracks; for tempered ones the bounds, the grid
    /// sums, the choice of exponent and the reweighting; their sums again (and the decision to
    /// resample); resampling and roughening; download. The other
    /// tracks are left as the step left them. No synchronisation.
    fn enqueue_slow(&mut self, t: usize) -> Result<(), BackendError> {
        let s = self.stream.clone();
        let nn = self.particles;
        let nb = n_tiles(self.particles) as u32;
        let nbt = self.particles.div_ceil(PF_BLOCK as usize) as u32;
        let grid_len = TEMPER_GRID as u32;
        // SAFETY (launches): argument lists match kernels/pf.cu; every buffer is sized for all
        // slots, and the grids cover `t` tracks of `n` particles.
        unsafe {
            s.launch_builder(&self.k.slow_begin)
                .arg(&self.ptr.step)
                .arg(&self.ptr.tracks)
                .arg(&self.ptr.flags)
                .arg(&mut self.log_w)
                .arg(&self.log_lik)
                .arg(&mut self.temper_parts)
                .arg(&nbt)
                .arg(&mut self.temper_counters)
                .arg(&mut self.temper_bounds)
                .launch(grid(nn, PF_BLOCK, t))
                .map_err(err("pf_slow_begin"))?;
            s.launch_builder(&self.k.temper_grid)
                .arg(&self.ptr.step)
                .arg(&self.ptr.tracks)
                .arg(&self.ptr.flags)
                .arg(&self.log_w)
                .arg(&self.log_lik)
                .arg(&self.temper_bounds)
                .arg(&grid_len)
                .arg(&mut self.temper_grid)
                .arg(&nbt)
                .arg(&mut self.temper_tickets)
                .arg(&mut self.temper_groups)
                .arg(&self.ptr.betas)
                .launch(grid(nn, PF_BLOCK, t))
                .map_err(err("pf_temper_grid"))?;
            s.launch_builder(&self.k.sums)
                .arg(&self.ptr.step)
                .arg(&self.ptr.tracks)
                .arg(&self.ptr.flags)
                .arg(&mut self.s0)
                .arg(&mut self.s1)
                .arg(&mut self.m0)
                .arg(&mut self.m1)
                .arg(&mut self.log_w)
                .arg(&self.log_lik)
                .arg(&self.ptr.betas)
                .arg(&mut self.weight_exp)
                .arg(&self.ptr.reference)
                .arg(&mut self.partials)
                .arg(&nb)
                .arg(&mut self.fin_groups)
                .arg(&mut self.step_tickets)
                .arg(&self.ptr.sums)
                .arg(&mut self.chol)
                .launch(tiles(nn, t))
                .map_err(err("pf_sums"))?;
        }
        // Resampling roughens the particles as it copies them (tempered tracks the widest).
        self.launch_resample(
            t,
            (1 << FLAG_TEMPERED_RESAMPLE) | (1 << FLAG_RESET_RESAMPLE),
        )?;
        self.bring_back(&s)
    }

    /// Run the captured sequence `seq` for `t` tracks, capturing it first if needed. No
    /// synchronisation.
    fn run_graph(&mut self, t: usize, seq: Seq) -> Result<(), BackendError> {
        let s = self.stream.clone();
        let enqueue = |me: &mut Self| match seq {
            Seq::Step => me.enqueue_step(t),
            Seq::Resample => me.enqueue_resample(t),
            Seq::Slow => me.enqueue_slow(t),
            Seq::Live => me.enqueue_live(t),
        };
        if !self.graphs.contains_key(&(t, seq)) {
            let g = capture(&s, || enqueue(self))?;
            self.graphs.insert((t, seq), g);
        }
        match self.graphs.get_mut(&(t, seq)) {
            Some(Some(g)) => g.launch()?,
            _ => enqueue(self)?,
        }
        Ok(())
    }

    /// Set the flags of tracks `which` in the host's copy to FLAG_PENDING, for the device to
    /// overwrite.
    fn mark_pending(&mut self, which: &[usize]) {
        let flags = self.lay.flags;
        let d = self.down.as_mut_slice();
        for &i in which {
            put(d, flags + 4 * i, &[FLAG_PENDING]);
        }
    }

    /// Wait until the device has written the flags of tracks `which` into the host's copy
    /// (`early`), or until the stream has finished. Fails when the stream reports an error,
    /// finishes without writing the flags, or takes longer than WAIT_TIMEOUT.
    fn wait_for(&self, early: bool, which: &[usize]) -> Result<(), BackendError> {
        let s = &self.stream;
        if !early {
            return s
                .synchronize()
                .map_err(err("running the particle-filter kernels"));
        }
        let base = self.down.as_ptr();
        wait_until(s, KERNELS, || {
            which.iter().all(|&i| {
                // SAFETY: `down` holds the flags of every slot at `lay.flags` (4-byte aligned,
                // inside the buffer); the device writes them, so they are read through a raw
                // pointer without holding a reference.
                let f = unsafe {
                    std::ptr::read_volatile(base.add(self.lay.flags + 4 * i).cast::<u32>())
                };
                f != FLAG_PENDING
            })
        })
    }

    /// Why a step of `tracks` with `meas` cannot run, if it cannot.
    fn check_step(
        &self,
        meas: &TdoaMeasurement,
        tracks: &[TrackStep],
        out_len: usize,
    ) -> Result<(), BackendError> {
        if meas.pairs() != self.params.pairs.len() || meas.peaks_per_pair > KPP {
            return Err(BackendError::new(
                "cuda",
                "measurement does not match the filter",
            ));
        }
        if let Some(bad) = tracks
            .iter()
            .find(|tr| tr.slot as usize >= self.params.slots)
        {
            return Err(BackendError::new(
                "cuda",
                format!("track slot {} out of range", bad.slot),
            ));
        }
        if out_len < tracks.len() {
            return Err(BackendError::new("cuda", "fewer estimates than tracks"));
        }
        Ok(())
    }

    /// The step's parameters, its tracks' and their motion coefficients.
    fn step_inputs(
        &self,
        meas: &TdoaMeasurement,
        tracks: &[TrackStep],
    ) -> (StepParams, Vec<TrackParams>, Vec<Coeffs>) {
        let sp = self.step_params(meas);
        let tp: Vec<TrackParams> = tracks
            .iter()
            .map(|tr| TrackParams {
                slot: tr.slot,
                cur: self.cur[tr.slot as usize],
                dt: tr.dt_s,
                lag: tr.lag_s,
                offset: self.log_norm[tr.slot as usize] as f32,
                u0: philox::uniform(
                    philox::draw(self.params.seed, meas.frame, tr.slot, 0, Stream::Resample)[0],
                ),
                turn_sin: tr.turn().map_or(0.0, |t| t.0),
                turn_cos: tr.turn().map_or(1.0, |t| t.1),
            })
            .collect();
        let coeffs: Vec<Coeffs> = tracks
            .iter()
            .map(|tr| {
                let c = CoeffTable::new(
                    &self
                        .params
                        .models
                        .iter()
                        .map(|m| StepCoeffs::new(m, tr.dt_s))
                        .collect::<Vec<_>>(),
                );
                Coeffs {
                    kind: c.kind,
                    accel_std: c.accel_std,
                    turn_sd: c.turn_sd,
                    decay: c.decay,
                }
            })
            .collect();
        (sp, tp, coeffs)
    }

    /// Write the step's parameters, tracks, coefficients and reference points into `up`.
    fn put_params(&mut self, sp: &StepParams, tp: &[TrackParams], coeffs: &[Coeffs]) {
        let lay = self.lay;
        let refs: Vec<[f32; 8]> = tp
            .iter()
            .map(|tr| {
                let r = self.reference[tr.slot as usize];
                [r[0], r[1], r[2], r[3], r[4], r[5], 0.0, 0.0]
            })
            .collect();
        let up = self.up.as_mut_slice();
        put(up, lay.step, &[*sp]);
        put(up, lay.tracks, tp);
        put(up, lay.coeffs, coeffs);
        put(up, lay.reference, &refs);
    }

    /// Write the measurement into `up`.
    fn put_measurement(&mut self, meas: &TdoaMeasurement) {
        let lay = self.lay;
        let up = self.up.as_mut_slice();
        put(up, lay.tdoa, &meas.tdoa_s);
        put(up, lay.amp, &meas.amp);
        put(up, lay.floor, &meas.floor);
    }

    /// Whether a step of `t` tracks with `meas`'s shape can run live (`prepare_step`): a small
    /// filter with its parameters and results in mapped memory, no device timing (which
    /// synchronises), a measurement that fits the kernel's shared memory, and blocks enough
    /// for at most half the SMs, so that the frame's correlation has the GPU beside the
    /// waiting blocks.
    fn live_possible(&self, meas: &TdoaMeasurement, t: usize) -> bool {
        let np = self.params.pairs.len();
        let blocks = n_tiles(self.particles) * t;
        self.stamp.is_some()
            && !self.timer.is_on()
            && t > 0
            && np <= MEAS_PAIRS
            && np * meas.peaks_per_pair <= MEAS_SHARED
            && 2 * blocks <= self.gpu.multiprocessors.max(0) as usize
    }

    /// Set the stamp pf_step_live polls to `v` (on the stamp's stream).
    fn write_stamp(&mut self, v: u32) -> Result<(), BackendError> {
        match self.stamp.as_ref() {
            // SAFETY: no copy.
            Some(st) => unsafe { st.write(v, None) },
            None => Ok(()),
        }
    }

    /// Launch the resampling the last step deferred (`flush`), if it is still waiting, and
    /// report a failure of that launch, here or between frames: every call that queues work
    /// or reads the particles starts with this, so the device sees the same order of work
    /// whether or not `flush` ran between frames.
    fn settle(&mut self) -> Result<(), BackendError> {
        self.launch_deferred();
        match self.deferred_err.take() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    fn launch_deferred(&mut self) {
        if let Some((t, frame)) = self.deferred.take() {
            if self.fail_deferred_from.is_some_and(|f| frame >= f) {
                self.deferred_err.get_or_insert(BackendError::new(
                    "cuda",
                    format!("injected failure: the resampling of frame {frame} was not launched"),
                ));
                return;
            }
            // The step's flags and sums stay in `down` until the next step, which settles this
            // first.
            self.put_roughening(t);
            if let Err(e) = self.run_graph(t, Seq::Resample) {
                self.deferred_err.get_or_insert(e);
            }
        }
    }

    /// Withdraw the live step waiting for its measurement, if any, and wait until its kernels
    /// have seen that and ended (so that `up` may be written again).
    fn cancel_prepared(&mut self) -> Result<(), BackendError> {
        if let Some(pr) = self.prepared.take() {
            self.write_stamp(pr.value | LIVE_CANCEL)?;
            self.stream
                .synchronize()
                .map_err(err("withdrawing a live filter step"))?;
        }
        Ok(())
    }

    /// Launch the step of `tracks` for frame `meas.frame` now, before its measurement exists
    /// (`FilterBank::prepare_step`), where `live_possible`.
    fn prepare_live(
        &mut self,
        meas: &TdoaMeasurement,
        tracks: &[TrackStep],
        source: Option<&LiveSource>,
    ) -> Result<bool, BackendError> {
        self.settle()?;
        self.cancel_prepared()?;
        let t = tracks.len();
        let np = self.params.pairs.len();
        if !self.live_possible(meas, t)
            || self.check_step(meas, tracks, t).is_err()
            || source.is_some_and(|src| src.ratio.len() != np || src.pair_ok.len() != np)
        {
            return Ok(false);
        }
        let live = match source {
            Some(src) => LiveMeas {
                peaks: src.peaks.peaks,
                done: src.peaks.done,
                ratio: self.ptr.ratio,
                pair_ok: self.ptr.pair_ok,
                expect: src.peaks.expect,
                fs: src.sample_rate_hz,
                pd: src.detection_probability,
                q_mid: crate::track::measure::peaks::QUALITY_MID,
                q_width: crate::track::measure::peaks::QUALITY_WIDTH,
                pad: 0,
            },
            None => LiveMeas::zeroed(),
        };
        {
            let l = self.lay;
            let up = self.up.as_mut_slice();
            put(up, l.live, &[live]);
            if let Some(src) = source {
                put(up, l.ratio, &src.ratio);
                let ok: Vec<u32> = src.pair_ok.iter().map(|&o| u32::from(o)).collect();
                put(up, l.pair_ok, &ok);
            }
        }
        let (mut sp, tp, coeffs) = self.step_inputs(meas, tracks);
        // Stamp values count up from 1 below LIVE_CANCEL (the stamp starts at 0).
        self.live_count = self.live_count % (LIVE_CANCEL - 1) + 1;
        let value = self.live_count;
        sp.live = value;
        self.put_params(&sp, &tp, &coeffs);
        let all: Vec<usize> = (0..t).collect();
        self.mark_pending(&all);
        self.run_graph(t, Seq::Live)?;
        self.prepared = Some(Prepared {
            value,
            built: source.is_some(),
            frame: meas.frame,
            sigma_bits: meas.sigma_s.to_bits(),
            peaks_per_pair: meas.peaks_per_pair,
            steps: Prepared::key(tracks),
        });
        Ok(true)
    }

    /// One step, running `meanwhile` while the device computes it (the live step that
    /// `prepare_step` launched for it, when it matches, else a step launched here).
    fn step_with(
        &mut self,
        meas: &TdoaMeasurement,
        tracks: &[TrackStep],
        out: &mut [Estimate],
        meanwhile: &mut dyn FnMut(),
    ) -> Result<(), BackendError> {
        self.settle()?;
        let n = self.particles;
        let t = tracks.len();
        if let Err(e) = self.check_step(meas, tracks, out.len()) {
            self.cancel_prepared()?;
            return Err(e);
        }
        if t == 0 {
            return self.cancel_prepared();
        }
        let l = self.params.n_models();
        // The step launched ahead, if it is this one.
        let live = match self.prepared.take() {
            Some(pr) if pr.matches(meas, tracks) => Some((pr.value, pr.built)),
            other => {
                self.prepared = other;
                self.cancel_prepared()?;
                None
            }
        };
        let s = self.stream.clone();
        // Where the kernels write the results into `down` themselves, the host waits only for
        // the tracks' flags there (each written after its sums), not for the whole graph: the
        // resampling after the finalize goes on on the device while the host uses the
        // estimate, and the next step queues behind it. With device timing on (the bench), or
        // without mapped memory, the stream is synchronised instead.
        let early = self.mirror.is_some() && !self.timer.is_on();
        let all: Vec<usize> = (0..t).collect();
        match live {
            // Building its own measurement from the same peaks and checks.
            Some((_, true)) => {}
            Some((v, false)) => {
                // Its kernels are waiting for the measurement (and the flags are pending): it
                // goes into `up`, from there to `d_up`, and then the stamp.
                self.put_measurement(meas);
                let lay = self.lay;
                let copy = (
                    self.ptr.tdoa,
                    // SAFETY: `lay.tdoa` is inside `up`.
                    unsafe { self.up.as_ptr().add(lay.tdoa) },
                    lay.up_len - lay.tdoa,
                );
                if let Some(st) = self.stamp.as_ref() {
                    // SAFETY: the measurement's part of `up` (tdoa, amp and floor, to its end)
                    // is page-locked and unchanged until the next step's `put_measurement`,
                    // after this step's kernel (which waits for the copy); its part of `d_up`
                    // has the same length.
                    unsafe { st.write(v, Some(copy))? };
                }
            }
            None => {
                let (sp, tp, coeffs) = self.step_inputs(meas, tracks);
                self.put_params(&sp, &tp, &coeffs);
                self.put_measurement(meas);
                if early {
                    self.mark_pending(&all);
                }
                self.timer.start(&s)?;
                self.run_graph(t, Seq::Step)?;
                self.timer.stop(&s)?;
            }
        }
        meanwhile();
        self.wait_for(early, &all)?;
        let flags: Vec<u32> = get(self.down.as_slice(), self.lay.flags, t);
        // The tracks that decided to resample, in a launch of their own, only when there are
        // any: a step in which no track resamples runs no resampling kernel at all, where
        // launching them every time to find nothing to do cost a large filter's step about 4 us
        // of device time. The host does not wait for it; the next step queues behind it.
        let slow: Vec<usize> = (0..t)
            .filter(|&i| flags[i] == FLAG_TEMPER || flags[i] == FLAG_DEGENERATE)
            .collect();
        if flags.contains(&FLAG_RESAMPLE) {
            if early && slow.is_empty() && live.is_some() {
                // A live step's (a frame at a time, launched ahead): its factors worked out and
                // its launch made between frames (`flush`), or by the next call, so that the
                // estimate comes back without that host time (about 2 us), and the device still
                // runs the resampling before anything queued after it. Replays keep the launch
                // here: there the next step follows at once, and a resampling launched with it
                // would keep the device idle until then (measured: 22 -> 28 us per frame back
                // to back, and `pier_five` at 262,144 particles 83 -> 100 us).
                self.deferred = Some((t, meas.frame));
            } else {
                self.put_roughening(t);
                self.run_graph(t, Seq::Resample)?;
                self.timer.stop(&s)?;
            }
        }
        // The slow path, for the tracks the step flagged (one more launch and wait; the usual
        // step needs only the one above).
        if !slow.is_empty() {
            if early {
                self.mark_pending(&slow);
            }
            self.run_graph(t, Seq::Slow)?;
            self.timer.stop(&s)?;
            self.wait_for(early, &slow)?;
        }
        let (sums, flags, betas) = {
            let d = self.down.as_slice();
            (
                get::<f64>(d, self.lay.sums, t * PART),
                get::<u32>(d, self.lay.flags, t),
                get::<f32>(d, self.lay.betas, t),
            )
        };
        let mut resampled = 0;
        for (i, (tr, o)) in tracks.iter().zip(out.iter_mut()).enumerate() {
            let slot = tr.slot as usize;
            let (degenerate, tempered, resample) = match flags[i] {
                FLAG_KEEP => (false, false, false),
                FLAG_RESAMPLE => (false, false, true),
                FLAG_TEMPERED_KEEP => (false, true, false),
                FLAG_TEMPERED_RESAMPLE => (false, true, true),
                FLAG_RESET_KEEP => (true, false, false),
                FLAG_RESET_RESAMPLE => (true, false, true),
                FLAG_LIVE_TIMEOUT => {
                    return Err(BackendError::new(
                        "cuda",
                        format!(
                            "track slot {slot}: the live step waited a second for its \
                             measurement and gave up"
                        ),
                    ));
                }
                other => {
                    return Err(BackendError::new(
                        "cuda",
                        format!("track slot {slot}: the step ended in state {other}"),
                    ));
                }
            };
            let (mx, tot) = Self::unpack(&sums[i * PART..(i + 1) * PART]);
            let rf = self.reference[slot];
            let log_norm = finish_estimate(mx, &tot, &rf, l, degenerate, o);
            o.chosen_model = None;
            o.temper = if tempered { betas[i] } else { 1.0 };
            o.resampled = resample;
            if o.mean.iter().all(|v| v.is_finite()) {
                self.reference[slot] = o.mean.map(|v| v as f32);
            }
            if resample {
                self.cur[slot] ^= 1;
                self.log_norm[slot] = (n as f64).ln();
                resampled += 1;
            } else {
                self.log_norm[slot] = log_norm;
            }
        }
        self.last_s = self.timer.elapsed_s();
        self.last_resampled = resampled;
        self.last_tracks = t;
        Ok(())
    }

    /// The roughening factor of each of the step's `t` tracks that resamples after the usual
    /// step (flag FLAG_RESAMPLE), from its flag and sums in `down`, into `up` at `lay.rough`
    /// (36 f32 by track index): the CPU twin's `roughen_factor` of the same covariance, at
    /// `ROUGHEN_RESAMPLE_H`.
    /// Worked out here, where the sums already are, rather than by one device thread's f64
    /// Cholesky factorisation inside the resampling, which would hold its block for
    /// microseconds.
    fn put_roughening(&mut self, t: usize) {
        let flags: Vec<u32> = get(self.down.as_slice(), self.lay.flags, t);
        let mut cov = [[0.0f64; 6]; 6];
        for (i, _) in flags
            .iter()
            .enumerate()
            .filter(|(_, f)| **f == FLAG_RESAMPLE)
        {
            let sums: Vec<f64> = get(self.down.as_slice(), self.lay.sums + i * PART * 8, PART);
            cloud_moments(&Self::unpack(&sums).1, &mut cov);
            let l: [f32; 36] = bytemuck::cast(roughen_factor(&cov, ROUGHEN_RESAMPLE_H));
            put(self.up.as_mut_slice(), self.lay.rough + i * 36 * 4, &l);
        }
    }

    fn unpack(v: &[f64]) -> (f32, ChunkSums) {
        let mut c = ChunkSums::zero();
        c.s = v[1];
        c.s2 = v[2];
        c.x.copy_from_slice(&v[3..9]);
        c.xx.copy_from_slice(&v[9..30]);
        c.models.copy_from_slice(&v[30..46]);
        c.turn = v[46];
        (v[0] as f32, c)
    }
}

impl Drop for CudaParticleFilter {
    fn drop(&mut self) {
        // A live step still waiting for its measurement is withdrawn; a step returns before
        // its resampling has run (see `wait_for`); let them finish before the buffers go.
        if let Some(pr) = self.prepared.take() {
            let _ = self.write_stamp(pr.value | LIVE_CANCEL);
        }
        drain_before_drop(&self.stream, KERNELS);
    }
}

impl FilterBank for CudaParticleFilter {
    fn backend(&self) -> &'static str {
        "cuda"
    }

    fn params(&self) -> &FilterParams {
        &self.params
    }

    fn init_track(&mut self, init: &TrackInit) -> Result<(), BackendError> {
        self.settle()?;
        // (Queued behind a waiting live step, the prior's kernel would wait with it.)
        self.cancel_prepared()?;
        let nn = self.particles;
        let slot = init.slot as usize;
        if slot >= self.params.slots {
            return Err(BackendError::new(
                "cuda",
                format!(
                    "track slot {slot} out of range ({} slots)",
                    self.params.slots
                ),
            ));
        }
        let s = self.stream.clone();
        let mut model_cdf = [0.0f32; MAX_MODELS];
        let mut acc = 0.0f32;
        for (m, pr) in init.model_probs.iter().take(MAX_MODELS).enumerate() {
            acc += pr;
            model_cdf[m] = acc;
        }
        let mut chol = [0.0f64; 36];
        for r in 0..6 {
            for c in 0..6 {
                chol[r * 6 + c] = init.chol[r][c];
            }
        }
        let ip = InitParams {
            mean: init.mean,
            chol,
            speed_ball: init.speed_ball_m_s,
            model_cdf,
            n_model_probs: init.model_probs.len().min(MAX_MODELS) as u32,
            slot: init.slot,
            cur: self.cur[slot],
            inv_range_max: init.inv_range_max,
            frame: init.frame,
        };
        let sp = self.step_params(&TdoaMeasurement::empty(
            init.frame,
            self.params.pairs.len(),
            1,
            self.params.tdoa_std_s,
        ));
        self.upload_to(self.ptr.step, bytes(&[sp]), "uploading parameters")?;
        s.memcpy_htod(bytes(&[ip]), &mut self.d_init)
            .map_err(err("uploading the prior"))?;
        // SAFETY: argument list matches pf_init; buffers hold every slot.
        unsafe {
            s.launch_builder(&self.k.init)
                .arg(&self.ptr.step)
                .arg(&self.d_init)
                .arg(&mut self.s0)
                .arg(&mut self.s1)
                .arg(&mut self.m0)
                .arg(&mut self.m1)
                .arg(&mut self.log_w)
                .launch(grid(nn, 256, 1))
                .map_err(err("pf_init"))?;
        }
        s.synchronize().map_err(err("initialising a track"))?;
        self.log_norm[slot] = (self.particles as f64).ln();
        if init.mean.iter().all(|v| v.is_finite()) {
            self.reference[slot] = init.mean.map(|v| v as f32);
        }
        Ok(())
    }

    fn step(
        &mut self,
        meas: &TdoaMeasurement,
        tracks: &[TrackStep],
        out: &mut [Estimate],
    ) -> Result<(), BackendError> {
        self.step_with(meas, tracks, out, &mut || {})
    }

    fn step_overlapped(
        &mut self,
        meas: &TdoaMeasurement,
        tracks: &[TrackStep],
        out: &mut [Estimate],
        meanwhile: &mut dyn FnMut(),
    ) -> Result<bool, BackendError> {
        self.step_with(meas, tracks, out, meanwhile).map(|()| true)
    }

    fn prepare_step(
        &mut self,
        meas: &TdoaMeasurement,
        tracks: &[TrackStep],
        source: Option<&LiveSource>,
    ) -> Result<bool, BackendError> {
        self.prepare_live(meas, tracks, source)
    }

    fn flush(&mut self) {
        self.launch_deferred();
    }

    fn read_particles(&mut self, slot: u32) -> Result<Particles, BackendError> {
        self.settle()?;
        self.cancel_prepared()?;
        let sl = slot as usize;
        if sl >= self.params.slots {
            return Err(BackendError::new(
                "cuda",
                format!("track slot {slot} out of range"),
            ));
        }
        let s = self.stream.clone();
        let n = self.particles;
        let mut state = vec![0.0f32; STATE_DIM * n];
        let mut model = vec![0u32; n];
        let mut log_weight = vec![0.0f32; n];
        let (src_s, src_m) = if self.cur[sl] == 0 {
            (&self.s0, &self.m0)
        } else {
            (&self.s1, &self.m1)
        };
        s.memcpy_dtoh(
            &src_s.slice(sl * STATE_DIM * n..(sl + 1) * STATE_DIM * n),
            &mut state,
        )
        .map_err(err("copying particles back"))?;
        s.memcpy_dtoh(&src_m.slice(sl * n..(sl + 1) * n), &mut model)
            .map_err(err("copying particles back"))?;
        s.memcpy_dtoh(&self.log_w.slice(sl * n..(sl + 1) * n), &mut log_weight)
            .map_err(err("copying particles back"))?;
        s.synchronize().map_err(err("copying particles back"))?;
        let off = self.log_norm[sl] as f32;
        for w in log_weight.iter_mut() {
            *w -= off;
        }
        Ok(Particles {
            state,
            model,
            log_weight,
        })
    }

    fn write_particles(&mut self, slot: u32, parts: &Particles) -> Result<(), BackendError> {
        self.settle()?;
        self.cancel_prepared()?;
        let sl = slot as usize;
        let n = self.particles;
        if sl >= self.params.slots
            || parts.state.len() != STATE_DIM * n
            || parts.model.len() != n
            || parts.log_weight.len() != n
        {
            return Err(BackendError::new(
                "cuda",
                "particle arrays do not match the filter size",
            ));
        }
        self.reference[sl] = std::array::from_fn(|c| parts.state[c * n]);
        let s = self.stream.clone();
        let (dst_s, dst_m) = if self.cur[sl] == 0 {
            (&mut self.s0, &mut self.m0)
        } else {
            (&mut self.s1, &mut self.m1)
        };
        s.memcpy_htod(
            &parts.state,
            &mut dst_s.slice_mut(sl * STATE_DIM * n..(sl + 1) * STATE_DIM * n),
        )
        .map_err(err("copying particles in"))?;
        s.memcpy_htod(&parts.model, &mut dst_m.slice_mut(sl * n..(sl + 1) * n))
            .map_err(err("copying particles in"))?;
        s.memcpy_htod(
            &parts.log_weight,
            &mut self.log_w.slice_mut(sl * n..(sl + 1) * n),
        )
        .map_err(err("copying particles in"))?;
        s.synchronize().map_err(err("copying particles in"))?;
        self.log_norm[sl] = 0.0;
        Ok(())
    }

    fn set_device_timing(&mut self, on: bool) {
        self.timer.set(on);
    }

    fn last_device_time_s(&self) -> Option<f64> {
        self.last_s
    }

    fn bytes_per_step(&self) -> Option<u64> {
        // Per particle of every track: state read and written (7 + 7 floats), model read and
        // written, log weight read and written, log-likelihood and e written. Per particle of a
        // resampling track: e read, the f64 cdf written and read, the state and model gathered
        // and written, the weight written.
        let n = self.particles as u64;
        let step = 4 * (7 + 7 + 2 + 2 + 2);
        let resample = 4 + 8 * 2 + 4 * (8 + 8 + 1);
        Some(n * (self.last_tracks as u64 * step + self.last_resampled as u64 * resample))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The kernels take the CPU's tempering decision with the CPU's threshold, and share the
    /// host's block and tile sizes.
    #[test]
    fn kernel_threshold_matches_the_cpu() {
        for want in [
            format!("#define TEMPER_MIN_ESS {}", crate::track::TEMPER_MIN_ESS),
            format!("#define ROUGHEN_H {}", crate::track::ROUGHEN_H),
            format!(
                "#define ROUGHEN_RESAMPLE_H {}",
                crate::track::ROUGHEN_RESAMPLE_H
            ),
            format!("#define TEMPER_G {}", crate::track::TEMPER_GRID),
            format!("#define PF_BLOCK {PF_BLOCK}"),
            format!("#define PF_PER_THREAD {}", PF_TILE / PF_BLOCK),
            format!("#define PF_SMALL_BLOCK {PF_SMALL_BLOCK}"),
            format!("#define KPP {KPP}"),
            format!("#define MEAS_SHARED {MEAS_SHARED}"),
            format!("#define MEAS_PAIRS {MEAS_PAIRS}"),
            format!("#define FLAG_LIVE_TIMEOUT {FLAG_LIVE_TIMEOUT}u"),
            format!("#define LIVE_CANCEL 0x{LIVE_CANCEL:08x}u"),
            format!("#define FIN_ROWS {FIN_ROWS}"),
            format!("#define TEMPER_GROUP {TEMPER_GROUP}"),
            format!("#define RS_SMALL_THREADS {RS_SMALL_THREADS}"),
            format!(
                "#define RS_SMALL_PER {}",
                RS_SMALL_MAX / RS_SMALL_THREADS as usize
            ),
        ] {
            assert!(super::super::programs::PF.source.contains(&want), "{want}");
        }
    }

    #[test]
    fn layout_parts_do_not_overlap() {
        let l = Layout::new(8, 10);
        let up = [
            l.step,
            l.tracks,
            l.coeffs,
            l.reference,
            l.live,
            l.ratio,
            l.pair_ok,
            l.tdoa,
            l.amp,
            l.floor,
            l.up_len,
        ];
        assert!(up.windows(2).all(|w| w[0] < w[1]));
        assert!(l.tracks >= std::mem::size_of::<StepParams>());
        assert!(l.reference - l.coeffs >= 8 * std::mem::size_of::<Coeffs>());
        assert!(l.live - l.reference >= 8 * 8 * 4);
        assert!(l.ratio - l.live >= std::mem::size_of::<LiveMeas>());
        assert!(l.tdoa - l.pair_ok >= 10 * 4);
        assert!(l.amp - l.tdoa >= 10 * KPP * 4);
        assert!(l.up_len - l.floor >= 10 * 4);
        // All multiples of 16 (pf_fetch copies 16 bytes at a time).
        assert!(up.iter().all(|&x| x % 16 == 0));
        let down = [l.sums, l.flags, l.betas, l.down_len];
        assert!(down.windows(2).all(|w| w[0] < w[1]));
        assert!(l.flags - l.sums >= 8 * PART * 8);
    }
}
