//! The particle-filter bank on the GPU: the [`ParticleFilter`] twin of `CpuParticleFilter`.
//!
//! Particles stay on the device. A step is: `pf_ref` (each track's reference particle),
//! `pf_step` (switch, predict, weigh and per-block sums for every particle of every track, one
//! launch), `pf_finalize` (per-track sums in f64), and one copy of the sums back. The host turns
//! the sums into the estimate with the CPU's own code (`finish_estimate`) and decides per track
//! whether to temper (rare: new tracks) and to resample; resampling is `pf_scan_local`,
//! `pf_scan_totals` and `pf_resample` (binary search, one thread per output slot) into the other
//! half of a double buffer, then `pf_roughen` after a tempered update.

use std::sync::Arc;

use bytemuck::{Pod, Zeroable};
use cudarc::driver::{CudaEvent, CudaFunction, CudaSlice, LaunchConfig, PushKernelArg};

use super::{Gpu, err};
use crate::config::{ModelSelection, TrackMode};
use crate::error::BackendError;
use crate::philox::{self, Stream};
use crate::track::models::{CoeffTable, StepCoeffs, padded_cdf};
use crate::track::pf::{
    ChunkSums, finish_estimate, needs_temper, roughen_factor, temper_from_grid,
};
use crate::track::{
    Estimate, FilterParams, MAX_MODELS, ParticleFilter, Particles, STATE_DIM, TEMPER_GRID,
    TdoaMeasurement, TrackInit, TrackStep,
};

const PF_BLOCK: u32 = 256;
const SCAN_BLOCK: u32 = 1024;
const PART: usize = 48;

#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct StepParams {
    seed: u64,
    frame: u64,
    n: u32,
    n_models: u32,
    n_sensors: u32,
    n_pairs: u32,
    k: u32,
    mode: u32,
    has_bounds: u32,
    forced_model: u32,
    inv_c: f32,
    inv_two_var: f32,
    gate: f32,
    pad0: f32,
    lo: [f32; 3],
    hi: [f32; 3],
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
    pad0: f32,
    pad1: f32,
}

#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct Coeffs {
    kind: [u32; MAX_MODELS],
    accel_std: [f32; MAX_MODELS],
    turn_sd: [f32; MAX_MODELS],
    decay: [f32; MAX_MODELS],
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
    pad: u32,
    frame: u64,
}

struct Kernels {
    reference: CudaFunction,
    step: CudaFunction,
    sums: CudaFunction,
    finalize: CudaFunction,
    temper_bounds: CudaFunction,
    temper_grid: CudaFunction,
    reweight: CudaFunction,
    fill: CudaFunction,
    scan_local: CudaFunction,
    scan_totals: CudaFunction,
    resample: CudaFunction,
    roughen: CudaFunction,
    init: CudaFunction,
}

pub struct CudaParticleFilter {
    gpu: Arc<Gpu>,
    p: FilterParams,
    n: usize,
    k: Kernels,
    s0: CudaSlice<f32>,
    s1: CudaSlice<f32>,
    m0: CudaSlice<u32>,
    m1: CudaSlice<u32>,
    log_w: CudaSlice<f32>,
    ll: CudaSlice<f32>,
    e: CudaSlice<f32>,
    sensors: CudaSlice<f32>,
    pairs: CudaSlice<u32>,
    d_step: CudaSlice<u8>,
    d_tracks: CudaSlice<u8>,
    d_coeffs: CudaSlice<u8>,
    d_init: CudaSlice<u8>,
    tdoa: CudaSlice<f32>,
    amp: CudaSlice<f32>,
    floor: CudaSlice<f32>,
    reference: CudaSlice<f32>,
    partials: CudaSlice<f32>,
    sums: CudaSlice<f64>,
    temper_parts: CudaSlice<f32>,
    temper_grid: CudaSlice<f64>,
    betas: CudaSlice<f32>,
    chol: CudaSlice<f32>,
    cdf: CudaSlice<f64>,
    block_tot: CudaSlice<f64>,
    /// Which buffer holds each slot's particles.
    cur: Vec<u32>,
    log_norm: Vec<f64>,
    ev_start: CudaEvent,
    ev_end: CudaEvent,
    last_s: Option<f64>,
}

/// Blocks of `per_block` threads over `n` particles, for each of `tracks` tracks.
fn grid(n: usize, per_block: u32, tracks: usize) -> LaunchConfig {
    LaunchConfig {
        grid_dim: ((n as u32).div_ceil(per_block), tracks as u32, 1),
        block_dim: (per_block, 1, 1),
        shared_mem_bytes: 0,
    }
}

fn bytes<T: Pod>(v: &[T]) -> &[u8] {
    bytemuck::cast_slice(v)
}

impl CudaParticleFilter {
    pub fn new(gpu: Arc<Gpu>, p: FilterParams) -> Result<Self, BackendError> {
        if p.selection == ModelSelection::Nearest {
            return Err(BackendError::new(
                "cuda",
                "the nearest-model rule runs on the CPU backend only",
            ));
        }
        if p.sensors.len() > crate::track::likelihood::MAX_SENSORS {
            return Err(BackendError::new(
                "cuda",
                format!(
                    "{} sensors; the GPU filter takes at most {}",
                    p.sensors.len(),
                    crate::track::likelihood::MAX_SENSORS
                ),
            ));
        }
        let s = gpu.stream.clone();
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
        let kpp = 16usize;
        let k = Kernels {
            reference: gpu.function("pf_ref")?,
            step: gpu.function("pf_step")?,
            sums: gpu.function("pf_sums")?,
            finalize: gpu.function("pf_finalize")?,
            temper_bounds: gpu.function("pf_temper_bounds")?,
            temper_grid: gpu.function("pf_temper_grid")?,
            reweight: gpu.function("pf_reweight")?,
            fill: gpu.function("pf_fill_log_w")?,
            scan_local: gpu.function("pf_scan_local")?,
            scan_totals: gpu.function("pf_scan_totals")?,
            resample: gpu.function("pf_resample")?,
            roughen: gpu.function("pf_roughen")?,
            init: gpu.function("pf_init")?,
        };
        Ok(Self {
            s0: f32s(slots * STATE_DIM * n)?,
            s1: f32s(slots * STATE_DIM * n)?,
            m0: u32s(slots * n)?,
            m1: u32s(slots * n)?,
            log_w: f32s(slots * n)?,
            ll: f32s(slots * n)?,
            e: f32s(slots * n)?,
            sensors,
            pairs,
            d_step: u8s(std::mem::size_of::<StepParams>())?,
            d_tracks: u8s(slots * std::mem::size_of::<TrackParams>())?,
            d_coeffs: u8s(slots * std::mem::size_of::<Coeffs>())?,
            d_init: u8s(std::mem::size_of::<InitParams>())?,
            tdoa: f32s(p.pairs.len() * kpp)?,
            amp: f32s(p.pairs.len() * kpp)?,
            floor: f32s(p.pairs.len())?,
            reference: f32s(slots * 8)?,
            partials: f32s(slots * nb * PART)?,
            sums: f64s(slots * PART)?,
            temper_parts: f32s(slots * nb * 2)?,
            temper_grid: f64s(slots * nb * 34)?,
            betas: f32s(slots)?,
            chol: f32s(slots * 36)?,
            cdf: f64s(slots * n)?,
            block_tot: f64s(slots * (nsb + 1))?,
            cur: vec![0; slots],
            log_norm: vec![(n as f64).ln(); slots],
            ev_start: gpu
                .ctx
                .new_event(Some(cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT))
                .map_err(err("creating an event"))?,
            ev_end: gpu
                .ctx
                .new_event(Some(cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT))
                .map_err(err("creating an event"))?,
            last_s: None,
            n,
            k,
            p,
            gpu,
        })
    }

    fn step_params(&self, meas: &TdoaMeasurement) -> StepParams {
        let p = &self.p;
        let sigma = meas.sigma_s.max(1e-12);
        let (has_bounds, lo, hi) = match p.bounds {
            Some((lo, hi)) => (1, lo, hi),
            None => (0, [0.0; 3], [0.0; 3]),
        };
        StepParams {
            seed: p.seed,
            frame: meas.frame,
            n: self.n as u32,
            n_models: p.n_models() as u32,
            n_sensors: p.sensors.len() as u32,
            n_pairs: p.pairs.len() as u32,
            k: meas.peaks_per_pair as u32,
            mode: u32::from(p.mode == TrackMode::Direction),
            has_bounds,
            forced_model: u32::MAX,
            inv_c: 1.0 / p.speed_of_sound_m_s,
            inv_two_var: 1.0 / (2.0 * sigma * sigma),
            gate: crate::track::likelihood::GATE_SIGMAS * sigma,
            pad0: 0.0,
            lo,
            hi,
            cdf: padded_cdf(&p.transition_cdf, p.n_models()),
        }
    }

    fn upload_tracks(&mut self, tracks: &[TrackParams]) -> Result<(), BackendError> {
        let s = self.gpu.stream.clone();
        s.memcpy_htod(bytes(tracks), &mut self.d_tracks)
            .map_err(err("uploading track parameters"))
    }

    /// Block sums of the current weights and their per-track combination, copied back.
    fn sums_now(&mut self, t: usize, out: &mut [f64]) -> Result<(), BackendError> {
        let nn = self.n;
        let s = self.gpu.stream.clone();
        let nb = self.n.div_ceil(PF_BLOCK as usize) as u32;
        // SAFETY: argument lists match kernels/pf.cu; buffers are sized for every slot.
        unsafe {
            s.launch_builder(&self.k.sums)
                .arg(&self.d_step)
                .arg(&self.d_tracks)
                .arg(&mut self.s0)
                .arg(&mut self.s1)
                .arg(&mut self.m0)
                .arg(&mut self.m1)
                .arg(&self.log_w)
                .arg(&mut self.e)
                .arg(&self.reference)
                .arg(&mut self.partials)
                .arg(&nb)
                .launch(grid(nn, PF_BLOCK, t))
                .map_err(err("pf_sums"))?;
        }
        self.finalize(t, out)
    }

    fn finalize(&mut self, t: usize, out: &mut [f64]) -> Result<(), BackendError> {
        let s = self.gpu.stream.clone();
        let nb = self.n.div_ceil(PF_BLOCK as usize) as u32;
        unsafe {
            s.launch_builder(&self.k.finalize)
                .arg(&self.partials)
                .arg(&nb)
                .arg(&mut self.sums)
                .launch(LaunchConfig {
                    grid_dim: (t as u32, 1, 1),
                    block_dim: (256, 1, 1),
                    shared_mem_bytes: 0,
                })
                .map_err(err("pf_finalize"))?;
        }
        s.memcpy_dtoh(&self.sums, out)
            .map_err(err("copying sums back"))?;
        s.synchronize()
            .map_err(err("running the particle-filter kernels"))
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

    /// Tempering for the tracks listed (indices into the step's tracks `tp`): the grid sums on
    /// the device, the choice on the host (the CPU's rule), the reweighting on the device for
    /// those tracks only.
    fn temper(&mut self, tp: &[TrackParams], which: &[usize]) -> Result<Vec<f32>, BackendError> {
        let nn = self.n;
        let t = tp.len();
        let s = self.gpu.stream.clone();
        let nb = self.n.div_ceil(PF_BLOCK as usize);
        let nbu = nb as u32;
        unsafe {
            s.launch_builder(&self.k.temper_bounds)
                .arg(&self.d_step)
                .arg(&self.d_tracks)
                .arg(&self.log_w)
                .arg(&self.ll)
                .arg(&mut self.temper_parts)
                .arg(&nbu)
                .launch(grid(nn, PF_BLOCK, t))
                .map_err(err("pf_temper_bounds"))?;
        }
        let mut parts = vec![0.0f32; t * nb * 2];
        s.memcpy_dtoh(&self.temper_parts.slice(0..t * nb * 2), &mut parts)
            .map_err(err("copying tempering bounds"))?;
        s.synchronize().map_err(err("tempering"))?;
        let mut bounds = vec![0.0f32; t * 2];
        for tr in 0..t {
            let (mut mp, mut ml) = (f32::NEG_INFINITY, f32::NEG_INFINITY);
            for b in 0..nb {
                mp = mp.max(parts[(tr * nb + b) * 2]);
                ml = ml.max(parts[(tr * nb + b) * 2 + 1]);
            }
            bounds[tr * 2] = mp;
            bounds[tr * 2 + 1] = ml;
        }
        let mut d_bounds = s.alloc_zeros::<f32>(t * 2).map_err(err("allocating"))?;
        s.memcpy_htod(&bounds, &mut d_bounds)
            .map_err(err("uploading tempering bounds"))?;
        let grid_len = TEMPER_GRID as u32;
        unsafe {
            s.launch_builder(&self.k.temper_grid)
                .arg(&self.d_step)
                .arg(&self.d_tracks)
                .arg(&self.log_w)
                .arg(&self.ll)
                .arg(&d_bounds)
                .arg(&grid_len)
                .arg(&mut self.temper_grid)
                .arg(&nbu)
                .launch(grid(nn, PF_BLOCK, t))
                .map_err(err("pf_temper_grid"))?;
        }
        let mut g = vec![0.0f64; t * nb * 34];
        s.memcpy_dtoh(&self.temper_grid.slice(0..t * nb * 34), &mut g)
            .map_err(err("copying tempering sums"))?;
        s.synchronize().map_err(err("tempering"))?;
        let mut betas = vec![1.0f32; t];
        for &tr in which {
            let mut gs = [0.0f64; TEMPER_GRID + 1];
            let mut gs2 = [0.0f64; TEMPER_GRID + 1];
            for b in 0..nb {
                for k in 0..=TEMPER_GRID {
                    gs[k] += g[(tr * nb + b) * 34 + 2 * k];
                    gs2[k] += g[(tr * nb + b) * 34 + 2 * k + 1];
                }
            }
            betas[tr] = temper_from_grid(&gs, &gs2, self.n);
        }
        let sub: Vec<TrackParams> = which.iter().map(|&i| tp[i]).collect();
        let sub_betas: Vec<f32> = which.iter().map(|&i| betas[i]).collect();
        self.upload_tracks(&sub)?;
        s.memcpy_htod(&sub_betas, &mut self.betas.slice_mut(0..sub_betas.len()))
            .map_err(err("uploading tempering exponents"))?;
        unsafe {
            s.launch_builder(&self.k.reweight)
                .arg(&self.d_step)
                .arg(&self.d_tracks)
                .arg(&self.betas)
                .arg(&mut self.log_w)
                .arg(&self.ll)
                .launch(grid(nn, 256, sub.len()))
                .map_err(err("pf_reweight"))?;
        }
        self.upload_tracks(tp)?;
        Ok(betas)
    }
}

impl ParticleFilter for CudaParticleFilter {
    fn backend(&self) -> &'static str {
        "cuda"
    }

    fn params(&self) -> &FilterParams {
        &self.p
    }

    fn init_track(&mut self, init: &TrackInit) -> Result<(), BackendError> {
        let nn = self.n;
        let slot = init.slot as usize;
        if slot >= self.p.slots {
            return Err(BackendError::new(
                "cuda",
                format!("track slot {slot} out of range ({} slots)", self.p.slots),
            ));
        }
        let s = self.gpu.stream.clone();
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
            pad: 0,
            frame: init.frame,
        };
        let sp = self.step_params(&TdoaMeasurement::empty(
            init.frame,
            self.p.pairs.len(),
            1,
            self.p.tdoa_std_s,
        ));
        s.memcpy_htod(bytes(&[sp]), &mut self.d_step)
            .map_err(err("uploading parameters"))?;
        s.memcpy_htod(bytes(&[ip]), &mut self.d_init)
            .map_err(err("uploading the prior"))?;
        unsafe {
            s.launch_builder(&self.k.init)
                .arg(&self.d_step)
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
        self.log_norm[slot] = (self.n as f64).ln();
        Ok(())
    }

    fn step(
        &mut self,
        meas: &TdoaMeasurement,
        tracks: &[TrackStep],
        out: &mut [Estimate],
    ) -> Result<(), BackendError> {
        let nn = self.n;
        let t = tracks.len();
        if t == 0 {
            return Ok(());
        }
        if meas.pairs() != self.p.pairs.len() || meas.peaks_per_pair > 16 {
            return Err(BackendError::new(
                "cuda",
                "measurement does not match the filter",
            ));
        }
        if let Some(bad) = tracks.iter().find(|tr| tr.slot as usize >= self.p.slots) {
            return Err(BackendError::new(
                "cuda",
                format!("track slot {} out of range", bad.slot),
            ));
        }
        let s = self.gpu.stream.clone();
        let n = self.n;
        let l = self.p.n_models();
        self.ev_start
            .record(&s)
            .map_err(err("recording an event"))?;
        let sp = self.step_params(meas);
        let mut tp: Vec<TrackParams> = tracks
            .iter()
            .map(|tr| TrackParams {
                slot: tr.slot,
                cur: self.cur[tr.slot as usize],
                dt: tr.dt_s,
                lag: tr.lag_s,
                offset: self.log_norm[tr.slot as usize] as f32,
                u0: philox::uniform(
                    philox::draw(self.p.seed, meas.frame, tr.slot, 0, Stream::Resample)[0],
                ),
                pad0: 0.0,
                pad1: 0.0,
            })
            .collect();
        let coeffs: Vec<Coeffs> = tracks
            .iter()
            .map(|tr| {
                let c = CoeffTable::new(
                    &self
                        .p
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
        s.memcpy_htod(bytes(&[sp]), &mut self.d_step)
            .map_err(err("uploading step parameters"))?;
        self.upload_tracks(&tp)?;
        s.memcpy_htod(bytes(&coeffs), &mut self.d_coeffs)
            .map_err(err("uploading model coefficients"))?;
        let k = meas.peaks_per_pair;
        s.memcpy_htod(&meas.tdoa_s, &mut self.tdoa.slice_mut(0..meas.tdoa_s.len()))
            .map_err(err("uploading the measurement"))?;
        s.memcpy_htod(&meas.amp, &mut self.amp.slice_mut(0..meas.amp.len()))
            .map_err(err("uploading the measurement"))?;
        s.memcpy_htod(&meas.floor, &mut self.floor.slice_mut(0..meas.floor.len()))
            .map_err(err("uploading the measurement"))?;
        let _ = k;
        let nb = n.div_ceil(PF_BLOCK as usize) as u32;
        let (tu, nu) = (t as u32, n as u32);
        // SAFETY (all launches): argument lists match kernels/pf.cu; every buffer is sized for
        // all slots, and the launch grids cover `t` tracks of `n` particles.
        unsafe {
            s.launch_builder(&self.k.reference)
                .arg(&self.d_tracks)
                .arg(&tu)
                .arg(&nu)
                .arg(&mut self.s0)
                .arg(&mut self.s1)
                .arg(&mut self.reference)
                .launch(LaunchConfig {
                    grid_dim: (1, 1, 1),
                    block_dim: (64, 1, 1),
                    shared_mem_bytes: 0,
                })
                .map_err(err("pf_ref"))?;
            s.launch_builder(&self.k.step)
                .arg(&self.d_step)
                .arg(&self.d_tracks)
                .arg(&self.d_coeffs)
                .arg(&self.sensors)
                .arg(&self.pairs)
                .arg(&self.tdoa)
                .arg(&self.amp)
                .arg(&self.floor)
                .arg(&mut self.s0)
                .arg(&mut self.s1)
                .arg(&mut self.m0)
                .arg(&mut self.m1)
                .arg(&mut self.log_w)
                .arg(&mut self.ll)
                .arg(&mut self.e)
                .arg(&self.reference)
                .arg(&mut self.partials)
                .arg(&nb)
                .launch(grid(nn, PF_BLOCK, t))
                .map_err(err("pf_step"))?;
        }
        let mut sums = vec![0.0f64; self.p.slots * PART];
        self.finalize(t, &mut sums)?;
        let mut reference = vec![0.0f32; self.p.slots * 8];
        s.memcpy_dtoh(&self.reference, &mut reference)
            .map_err(err("copying references back"))?;
        s.synchronize()
            .map_err(err("running the particle-filter kernels"))?;
        // Degenerate tracks (every particle weightless): equal weights, sums again.
        let degenerate: Vec<bool> = (0..t)
            .map(|i| !(sums[i * PART] as f32).is_finite())
            .collect();
        if degenerate.iter().any(|&d| d) {
            let zero = 0.0f32;
            // Only the degenerate tracks are reset: the others get their weights unchanged by
            // launching over the degenerate subset.
            let subset: Vec<TrackParams> = tp
                .iter()
                .zip(&degenerate)
                .filter(|(_, d)| **d)
                .map(|(p, _)| *p)
                .collect();
            self.upload_tracks(&subset)?;
            unsafe {
                s.launch_builder(&self.k.fill)
                    .arg(&self.d_step)
                    .arg(&self.d_tracks)
                    .arg(&mut self.log_w)
                    .arg(&zero)
                    .launch(grid(nn, 256, subset.len()))
                    .map_err(err("pf_fill_log_w"))?;
            }
            self.upload_tracks(&tp)?;
            self.sums_now(t, &mut sums)?;
        }
        let mut tempered = vec![1.0f32; t];
        let need: Vec<usize> = (0..t)
            .filter(|&i| {
                !degenerate[i] && needs_temper(&Self::unpack(&sums[i * PART..(i + 1) * PART]).1, n)
            })
            .collect();
        if !need.is_empty() {
            let betas = self.temper(&tp, &need)?;
            for &i in &need {
                tempered[i] = betas[i];
            }
            self.sums_now(t, &mut sums)?;
        }
        let mut resample = Vec::new();
        for (i, (tr, o)) in tracks.iter().zip(out.iter_mut()).enumerate() {
            let slot = tr.slot as usize;
            let (mx, tot) = Self::unpack(&sums[i * PART..(i + 1) * PART]);
            let rf: [f32; 6] = std::array::from_fn(|c| reference[i * 8 + c]);
            let log_norm = finish_estimate(mx, &tot, &rf, l, degenerate[i], o);
            o.chosen_model = None;
            o.temper = tempered[i];
            o.resampled = f64::from(o.ess) < f64::from(self.p.ess_fraction) * n as f64;
            if o.resampled {
                resample.push(i);
                self.log_norm[slot] = (n as f64).ln();
            } else {
                self.log_norm[slot] = log_norm;
            }
        }
        if !resample.is_empty() {
            let sub: Vec<TrackParams> = resample.iter().map(|&i| tp[i]).collect();
            // The scan and gather index partials and sums by the track's position in the step:
            // keep the full list, and run them over all tracks of the step that resample.
            self.upload_tracks(&sub)?;
            let sub_sums: Vec<f64> = resample
                .iter()
                .flat_map(|&i| sums[i * PART..(i + 1) * PART].to_vec())
                .collect();
            let mut d_sub_sums = s
                .alloc_zeros::<f64>(sub_sums.len())
                .map_err(err("allocating"))?;
            s.memcpy_htod(&sub_sums, &mut d_sub_sums)
                .map_err(err("uploading sums"))?;
            // Partials of the resampling tracks, in their order.
            let nbz = nb as usize;
            let mut sub_parts = s
                .alloc_zeros::<f32>(resample.len() * nbz * PART)
                .map_err(err("allocating"))?;
            for (j, &i) in resample.iter().enumerate() {
                let src = self.partials.slice(i * nbz * PART..(i + 1) * nbz * PART);
                let mut dst = sub_parts.slice_mut(j * nbz * PART..(j + 1) * nbz * PART);
                s.memcpy_dtod(&src, &mut dst)
                    .map_err(err("copying partials"))?;
            }
            let r = resample.len();
            unsafe {
                s.launch_builder(&self.k.scan_local)
                    .arg(&self.d_step)
                    .arg(&self.d_tracks)
                    .arg(&self.e)
                    .arg(&sub_parts)
                    .arg(&nb)
                    .arg(&d_sub_sums)
                    .arg(&mut self.cdf)
                    .arg(&mut self.block_tot)
                    .launch(grid(nn, SCAN_BLOCK, r))
                    .map_err(err("pf_scan_local"))?;
                s.launch_builder(&self.k.scan_totals)
                    .arg(&self.d_step)
                    .arg(&mut self.block_tot)
                    .launch(LaunchConfig {
                        grid_dim: (1, r as u32, 1),
                        block_dim: (1024, 1, 1),
                        shared_mem_bytes: 0,
                    })
                    .map_err(err("pf_scan_totals"))?;
                s.launch_builder(&self.k.resample)
                    .arg(&self.d_step)
                    .arg(&self.d_tracks)
                    .arg(&self.cdf)
                    .arg(&self.block_tot)
                    .arg(&mut self.s0)
                    .arg(&mut self.s1)
                    .arg(&mut self.m0)
                    .arg(&mut self.m1)
                    .arg(&mut self.log_w)
                    .launch(grid(nn, PF_BLOCK, r))
                    .map_err(err("pf_resample"))?;
            }
            for &i in &resample {
                let slot = tracks[i].slot as usize;
                self.cur[slot] ^= 1;
                tp[i].cur = self.cur[slot];
            }
            // Regularise tracks whose update was tempered.
            let rough: Vec<usize> = resample
                .iter()
                .copied()
                .filter(|&i| tempered[i] < 1.0)
                .collect();
            if !rough.is_empty() {
                let sub: Vec<TrackParams> = rough.iter().map(|&i| tp[i]).collect();
                self.upload_tracks(&sub)?;
                let chol: Vec<f32> = rough
                    .iter()
                    .flat_map(|&i| {
                        roughen_factor(&out[i].cov)
                            .iter()
                            .flat_map(|r| r.to_vec())
                            .collect::<Vec<_>>()
                    })
                    .collect();
                s.memcpy_htod(&chol, &mut self.chol.slice_mut(0..chol.len()))
                    .map_err(err("uploading roughening factors"))?;
                unsafe {
                    s.launch_builder(&self.k.roughen)
                        .arg(&self.d_step)
                        .arg(&self.d_tracks)
                        .arg(&self.chol)
                        .arg(&mut self.s0)
                        .arg(&mut self.s1)
                        .launch(grid(nn, 256, rough.len()))
                        .map_err(err("pf_roughen"))?;
                }
            }
        }
        self.ev_end.record(&s).map_err(err("recording an event"))?;
        s.synchronize().map_err(err("resampling"))?;
        self.last_s = self
            .ev_start
            .elapsed_ms(&self.ev_end)
            .ok()
            .map(|ms| f64::from(ms) * 1e-3);
        Ok(())
    }

    fn read_particles(&mut self, slot: u32) -> Result<Particles, BackendError> {
        let sl = slot as usize;
        if sl >= self.p.slots {
            return Err(BackendError::new(
                "cuda",
                format!("track slot {slot} out of range"),
            ));
        }
        let s = self.gpu.stream.clone();
        let n = self.n;
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
        let sl = slot as usize;
        let n = self.n;
        if sl >= self.p.slots
            || parts.state.len() != STATE_DIM * n
            || parts.model.len() != n
            || parts.log_weight.len() != n
        {
            return Err(BackendError::new(
                "cuda",
                "particle arrays do not match the filter size",
            ));
        }
        let s = self.gpu.stream.clone();
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

    fn last_device_time_s(&self) -> Option<f64> {
        self.last_s
    }

    fn bytes_per_step(&self) -> Option<u64> {
        // Per particle: state read and written (7 + 7 floats), model read and written, log
        // weight read and written, log-likelihood and e written; resampling reads e, writes and
        // reads the f64 cdf, gathers the state and model and writes weights.
        let n = self.n as u64;
        Some(n * (4 * (7 + 7 + 2 + 2 + 2) + 4 + 8 * 2 + 4 * (8 + 8 + 1)))
    }
}
