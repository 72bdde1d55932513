//! The curves bank of track-before-detect on the GPU (`kernels/tbd.cu`): T tracks' particles,
//! weights and cumulative sums resident on the device in the CPU twin's layout
//! ([`crate::track::filter::bernoulli::bank`]). A step uploads the frame (curves, noise levels, usable pairs)
//! and the birth proposal, queues nine launches and reads back per track only the existence,
//! the birth share, the sets' log-sums, the mean's fixed-point sums and the birth-derived count
//! (B-12: about a hundred bytes a track; [`CudaCurveBank::bytes_read`] counts them).

use std::sync::Arc;

use cudarc::driver::{CudaFunction, CudaSlice, CudaStream, LaunchConfig, PushKernelArg};

use super::host::DeviceTimer;
use super::programs::TBD;
use super::{Gpu, err};
use crate::track::filter::bernoulli::bank::{BankError, length};
use crate::track::filter::bernoulli::bank::{
    BankFrame, BankModel, BankProposal, BankSizes, CurveBank, DIM, MAX_CANDIDATES, MAX_TOP_CELLS,
    TrackSums, check_frame, check_sizes, ln_counts, mean_of_fixed,
};
use crate::track::filter::bernoulli::existence::Chain;

/// Particles a weighing block takes (a thread each to draw, a warp each to weigh), and a
/// block's tile elsewhere:
/// `kernels/tbd.cu`'s TBD_WEIGH_TILE and TBD_TILE.
const WEIGH_TILE: usize = 256;
const WEIGH_BLOCK: u32 = 256;
const TILE: usize = 1024;
const BLOCK: u32 = 256;

/// The kernels of one step.
struct Kernels {
    reset: CudaFunction,
    lobes: CudaFunction,
    weigh: CudaFunction,
    set_sums: CudaFunction,
    exist: CudaFunction,
    tile_sums: CudaFunction,
    scan_tiles: CudaFunction,
    cum: CudaFunction,
    resample: CudaFunction,
}

/// T curves tracks resident on the GPU.
pub struct CudaCurveBank {
    /// Keeps the GPU (context and kernels) for as long as the bank lives.
    _gpu: Arc<Gpu>,
    stream: Arc<CudaStream>,
    k: Kernels,
    /// The model as given (the frame checks).
    host_model: BankModel,
    sizes: BankSizes,
    chain: Chain,
    seed: u64,
    frame: u64,
    lobe_intervals: usize,
    model: CudaSlice<u32>,
    step: CudaSlice<u32>,
    sensors: CudaSlice<f32>,
    pair_idx: CudaSlice<u32>,
    kappa: CudaSlice<f32>,
    curves: CudaSlice<f32>,
    /// The frame's lobe-table entries (pairs × intervals × 2) and the κ² sums (intervals × 4).
    lobe_num: CudaSlice<f32>,
    lobe_den: CudaSlice<f32>,
    sigma: CudaSlice<f32>,
    ok: CudaSlice<u32>,
    cells: CudaSlice<u32>,
    cands: CudaSlice<f32>,
    has_cont: CudaSlice<u32>,
    p_exist: CudaSlice<f64>,
    births: CudaSlice<f32>,
    cont: CudaSlice<f32>,
    next: CudaSlice<f32>,
    lw: CudaSlice<f32>,
    max_key: CudaSlice<u32>,
    qsum: CudaSlice<u64>,
    off: CudaSlice<f32>,
    out: CudaSlice<f64>,
    tile_tot: CudaSlice<u64>,
    total: CudaSlice<u64>,
    cum: CudaSlice<u64>,
    msum: CudaSlice<u64>,
    from_birth: CudaSlice<u32>,
    bytes_read: u64,
    /// Device events around each step's kernels (when timing is on), and the last step's time.
    timer: DeviceTimer,
    last_s: Option<f64>,
}

/// The model as `kernels/tbd.cu`'s TbdModel: 30 four-byte words in its order.
fn pack_model(m: &BankModel) -> Vec<u32> {
    let mut w = vec![
        m.sensors.len() as u32,
        m.pairs.len() as u32,
        m.curve_half,
        m.w,
        m.kappa.len() as u32,
    ];
    w.extend(m.grid_n);
    let f = [
        [m.per_m, m.beta].as_slice(),
        &m.profile,
        &m.lo,
        &m.hi,
        &[
            m.frame_s,
            m.accel_std,
            m.coherence_step,
            m.coherence.0,
            m.coherence.1,
            m.speed_max,
        ],
        &m.grid_size,
        &[m.candidate_spread_m, m.candidate_norm],
    ]
    .concat();
    w.extend(f.iter().map(|v| v.to_bits()));
    w
}

/// A step's TbdStep: u64 seed and frame, f64 chain, five u32 sizes, ln N_b, ln N_c, shares.
fn pack_step(
    seed: u64,
    frame: u64,
    chain: &Chain,
    sizes: BankSizes,
    prop: &BankProposal,
) -> Vec<u32> {
    let split = |v: u64| [v as u32, (v >> 32) as u32];
    let mut w = Vec::with_capacity(18);
    w.extend(split(seed));
    w.extend(split(frame));
    w.extend(split(chain.p_birth.to_bits()));
    w.extend(split(chain.p_death.to_bits()));
    w.extend([
        sizes.tracks as u32,
        sizes.n_birth as u32,
        sizes.n_cont as u32,
        prop.cells.len() as u32,
        prop.candidates.len() as u32,
    ]);
    let ln = ln_counts(sizes);
    w.extend(ln.map(f32::to_bits));
    w.extend(prop.shares.map(f32::to_bits));
    w
}

impl From<crate::error::BackendError> for BankError {
    fn from(e: crate::error::BackendError) -> Self {
        BankError::Backend(e.what)
    }
}

impl CudaCurveBank {
    /// `sizes` tracks of `model`, each starting with P(exists) = `p0` and no particles.
    pub fn new(
        gpu: Arc<Gpu>,
        model: &BankModel,
        sizes: BankSizes,
        chain: Chain,
        seed: u64,
        p0: f64,
    ) -> Result<Self, BankError> {
        check_sizes(model, sizes)?;
        if sizes.tracks > 0xffff {
            return Err(BankError::Model(format!(
                "{} tracks (the GPU bank takes at most 65,535)",
                sizes.tracks
            )));
        }
        let s = gpu
            .stream
            .fork()
            .map_err(err("creating the curves bank's stream"))?;
        let BankSizes {
            tracks: t,
            n_birth: nb,
            n_cont: nc,
        } = sizes;
        let per = nb + nc;
        let tiles = per.div_ceil(TILE);
        let f = |name: &str| gpu.function(&TBD, name);
        let k = Kernels {
            reset: f("tbd_reset")?,
            lobes: f("tbd_lobes")?,
            weigh: f("tbd_weigh")?,
            set_sums: f("tbd_set_sums")?,
            exist: f("tbd_exist")?,
            tile_sums: f("tbd_tile_sums")?,
            scan_tiles: f("tbd_scan_tiles")?,
            cum: f("tbd_cum")?,
            resample: f("tbd_resample")?,
        };
        let a32 = |n: usize| {
            s.alloc_zeros::<f32>(n.max(1))
                .map_err(err("allocating the bank"))
        };
        let au = |n: usize| {
            s.alloc_zeros::<u32>(n.max(1))
                .map_err(err("allocating the bank"))
        };
        let a64 = |n: usize| {
            s.alloc_zeros::<u64>(n.max(1))
                .map_err(err("allocating the bank"))
        };
        let sensors: Vec<f32> = model.sensors.iter().flatten().copied().collect();
        let pairs: Vec<u32> = model.pairs.iter().flat_map(|&(a, b)| [a, b]).collect();
        let bank = Self {
            host_model: model.clone(),
            lobe_intervals: model.lobe_intervals(),
            model: s
                .clone_htod(&pack_model(model))
                .map_err(err("copying the model"))?,
            step: au(18)?,
            sensors: s.clone_htod(&sensors).map_err(err("copying the sensors"))?,
            pair_idx: s.clone_htod(&pairs).map_err(err("copying the pairs"))?,
            kappa: s.clone_htod(&model.kappa).map_err(err("copying κ"))?,
            curves: a32(model.pairs.len() * model.curve_len())?,
            lobe_num: a32(2 * model.pairs.len() * model.lobe_intervals())?,
            lobe_den: s
                .clone_htod(&model.lobe_den_table())
                .map_err(err("copying the κ² sums"))?,
            sigma: a32(model.pairs.len())?,
            ok: au(model.pairs.len())?,
            cells: au(MAX_TOP_CELLS)?,
            cands: a32(3 * MAX_CANDIDATES)?,
            has_cont: au(t)?,
            p_exist: s
                .clone_htod(&vec![p0.clamp(0.0, 1.0); t])
                .map_err(err("copying the existence"))?,
            births: a32(DIM * t * nb)?,
            cont: a32(DIM * t * nc)?,
            next: a32(DIM * t * nc)?,
            lw: a32(t * per)?,
            max_key: au(2 * t)?,
            qsum: a64(2 * t)?,
            off: a32(2 * t)?,
            out: s
                .alloc_zeros::<f64>(4 * t)
                .map_err(err("allocating the bank"))?,
            tile_tot: a64(t * tiles)?,
            total: a64(t)?,
            cum: a64(t * per)?,
            msum: a64(DIM * t)?,
            from_birth: au(t)?,
            k,
            sizes,
            chain,
            seed,
            frame: 0,
            stream: s,
            bytes_read: 0,
            timer: DeviceTimer::new(&gpu.ctx, false)?,
            last_s: None,
            _gpu: gpu,
        };
        Ok(bank)
    }

    /// Check and upload a frame and its proposal for the next step.
    fn put_frame(&mut self, f: &BankFrame, prop: &BankProposal) -> Result<(), BankError> {
        check_frame(&self.host_model, f, prop)?;
        let s = self.stream.clone();
        s.memcpy_htod(&f.curves, &mut self.curves)
            .map_err(err("copying the curves"))?;
        s.memcpy_htod(&f.sigma, &mut self.sigma)
            .map_err(err("copying the noise levels"))?;
        s.memcpy_htod(&f.ok, &mut self.ok)
            .map_err(err("copying the usable pairs"))?;
        if !prop.cells.is_empty() {
            let mut cells = self.cells.slice_mut(..prop.cells.len());
            s.memcpy_htod(&prop.cells, &mut cells)
                .map_err(err("copying the proposal"))?;
        }
        if !prop.candidates.is_empty() {
            let c: Vec<f32> = prop.candidates.iter().flatten().copied().collect();
            let mut cands = self.cands.slice_mut(..c.len());
            s.memcpy_htod(&c, &mut cands)
                .map_err(err("copying the proposal"))?;
        }
        let st = pack_step(self.seed, self.frame, &self.chain, self.sizes, prop);
        s.memcpy_htod(&st, &mut self.step)
            .map_err(err("copying the step"))?;
        Ok(())
    }

    /// Queue one step's nine launches (the frame already uploaded) without waiting.
    fn enqueue(&mut self) -> Result<(), BankError> {
        let s = self.stream.clone();
        let BankSizes {
            tracks: t,
            n_birth: nb,
            n_cont: nc,
        } = self.sizes;
        let per = nb + nc;
        let tiles = per.div_ceil(TILE) as u32;
        let tracks = t as u32;
        let one = |n: usize, block: u32| LaunchConfig {
            grid_dim: ((n as u32).div_ceil(block), 1, 1),
            block_dim: (block, 1, 1),
            shared_mem_bytes: 0,
        };
        let grid = |x: u32, block: u32, shared: u32| LaunchConfig {
            grid_dim: (x, tracks, 1),
            block_dim: (block, 1, 1),
            shared_mem_bytes: shared,
        };
        let mut b = s.launch_builder(&self.k.reset);
        b.arg(&tracks)
            .arg(&mut self.max_key)
            .arg(&mut self.qsum)
            .arg(&mut self.msum)
            .arg(&mut self.from_birth);
        // SAFETY: tbd_reset(u32, u32*, u64*, u64*, u32*): the buffers hold 2T, 2T, 7T and T
        // values, and threads past T return.
        unsafe { b.launch(one(t, 128)) }.map_err(err("tbd_reset"))?;

        let n_int = self.lobe_intervals as u32;
        let pairs = self.host_model.pairs.len() as u32;
        let mut b = s.launch_builder(&self.k.lobes);
        b.arg(&self.model)
            .arg(&self.kappa)
            .arg(&self.curves)
            .arg(&mut self.lobe_num);
        // SAFETY: tbd_lobes(const TbdModel*, const float*, const float*, float2*): κ and the
        // curves are the model's and the frame's, the table holds pairs × intervals float2
        // (allocated from the same model), and threads past the intervals return.
        unsafe {
            b.launch(LaunchConfig {
                grid_dim: (n_int.div_ceil(BLOCK), pairs, 1),
                block_dim: (BLOCK, 1, 1),
                shared_mem_bytes: 0,
            })
        }
        .map_err(err("tbd_lobes"))?;

        let weigh_tiles = (nb.div_ceil(WEIGH_TILE) + nc.div_ceil(WEIGH_TILE)) as u32;
        let shared = ((MAX_TOP_CELLS + 3 * MAX_CANDIDATES) * 4) as u32;
        let mut b = s.launch_builder(&self.k.weigh);
        b.arg(&self.model)
            .arg(&self.step)
            .arg(&self.sensors)
            .arg(&self.pair_idx)
            .arg(&self.lobe_num)
            .arg(&self.lobe_den)
            .arg(&self.sigma)
            .arg(&self.ok)
            .arg(&self.cells)
            .arg(&self.cands)
            .arg(&self.has_cont)
            .arg(&mut self.births)
            .arg(&mut self.cont)
            .arg(&mut self.lw)
            .arg(&mut self.max_key);
        // SAFETY: the arguments match tbd_weigh's signature; the model's words follow TbdModel
        // (pack_model) and the step's TbdStep (pack_step); the sensors, pairs and κ² sums are
        // the model's, the lobe table, σ and ok one frame's (checked lengths; the table holds
        // every pair's intervals), the proposal within its buffers (check_frame); the grid's x
        // covers both sets' tiles and y the tracks, and the dynamic shared memory holds the
        // cells and the candidates.
        unsafe { b.launch(grid(weigh_tiles, WEIGH_BLOCK, shared)) }.map_err(err("tbd_weigh"))?;

        let set_tiles = (nb.div_ceil(TILE) + nc.div_ceil(TILE)) as u32;
        let mut b = s.launch_builder(&self.k.set_sums);
        b.arg(&self.step)
            .arg(&self.lw)
            .arg(&self.max_key)
            .arg(&mut self.qsum);
        // SAFETY: tbd_set_sums's arguments; lw holds T (N_b + N_c) weights, max_key and qsum
        // 2T; the grid covers both sets' tiles for every track.
        unsafe { b.launch(grid(set_tiles, BLOCK, 0)) }.map_err(err("tbd_set_sums"))?;

        let mut b = s.launch_builder(&self.k.exist);
        b.arg(&self.step)
            .arg(&self.max_key)
            .arg(&self.qsum)
            .arg(&mut self.p_exist)
            .arg(&mut self.has_cont)
            .arg(&mut self.off)
            .arg(&mut self.out);
        // SAFETY: tbd_exist's arguments, each holding T, 2T or 4T values; threads past T
        // return.
        unsafe { b.launch(one(t, 128)) }.map_err(err("tbd_exist"))?;

        let mut b = s.launch_builder(&self.k.tile_sums);
        b.arg(&self.step)
            .arg(&self.lw)
            .arg(&self.off)
            .arg(&mut self.tile_tot);
        // SAFETY: tbd_tile_sums's arguments; tile_tot holds T × tiles values, the grid's x is
        // the tiles.
        unsafe { b.launch(grid(tiles, BLOCK, 0)) }.map_err(err("tbd_tile_sums"))?;

        let mut b = s.launch_builder(&self.k.scan_tiles);
        b.arg(&tiles).arg(&mut self.tile_tot).arg(&mut self.total);
        // SAFETY: tbd_scan_tiles(u32, u64*, u64*): one block per track over its `tiles` totals.
        unsafe {
            b.launch(LaunchConfig {
                grid_dim: (tracks, 1, 1),
                block_dim: (BLOCK, 1, 1),
                shared_mem_bytes: 0,
            })
        }
        .map_err(err("tbd_scan_tiles"))?;

        let mut b = s.launch_builder(&self.k.cum);
        b.arg(&self.step)
            .arg(&self.lw)
            .arg(&self.off)
            .arg(&self.tile_tot)
            .arg(&mut self.cum);
        // SAFETY: tbd_cum's arguments; cum holds T (N_b + N_c) values; the grid as tile_sums'.
        unsafe { b.launch(grid(tiles, BLOCK, 0)) }.map_err(err("tbd_cum"))?;

        let out_blocks = (nc as u32).div_ceil(BLOCK);
        let mut b = s.launch_builder(&self.k.resample);
        b.arg(&self.step)
            .arg(&self.cum)
            .arg(&self.total)
            .arg(&self.births)
            .arg(&self.cont)
            .arg(&mut self.next)
            .arg(&mut self.msum)
            .arg(&mut self.from_birth);
        // SAFETY: tbd_resample's arguments; next holds 7 T N_c values; the grid covers N_c
        // outputs per track.
        unsafe { b.launch(grid(out_blocks, BLOCK, 0)) }.map_err(err("tbd_resample"))?;
        std::mem::swap(&mut self.cont, &mut self.next);
        self.frame += 1;
        Ok(())
    }

    /// Each track's sums of the last step (waits for it).
    fn read_sums(&mut self) -> Result<Vec<TrackSums>, BankError> {
        let t = self.sizes.tracks;
        let s = self.stream.clone();
        let mut out = vec![0.0f64; 4 * t];
        let mut msum = vec![0u64; DIM * t];
        let mut fb = vec![0u32; t];
        s.memcpy_dtoh(&self.out, &mut out)
            .map_err(err("reading the existence"))?;
        s.memcpy_dtoh(&self.msum, &mut msum)
            .map_err(err("reading the means"))?;
        s.memcpy_dtoh(&self.from_birth, &mut fb)
            .map_err(err("reading the counts"))?;
        s.synchronize().map_err(err("the curves bank's step"))?;
        self.bytes_read += (out.len() * 8 + msum.len() * 8 + fb.len() * 4) as u64;
        let nc = self.sizes.n_cont;
        Ok((0..t)
            .map(|i| TrackSums {
                p_exist: out[4 * i],
                birth_share: out[4 * i + 1],
                log_sum_birth: out[4 * i + 2],
                log_sum_cont: out[4 * i + 3],
                mean: std::array::from_fn(|k| mean_of_fixed(msum[DIM * i + k] as i64, nc)),
                from_birth: fb[i],
            })
            .collect())
    }

    fn fetch<T: cudarc::driver::DeviceRepr + Default + Clone>(
        &self,
        from: &CudaSlice<T>,
        len: usize,
    ) -> Result<Vec<T>, BankError> {
        let mut v = vec![T::default(); len];
        self.stream
            .memcpy_dtoh(&from.slice(..len), &mut v)
            .map_err(err("reading the curves bank"))?;
        self.stream
            .synchronize()
            .map_err(err("reading the curves bank"))?;
        Ok(v)
    }
}

impl CurveBank for CudaCurveBank {
    fn sizes(&self) -> BankSizes {
        self.sizes
    }

    fn step(&mut self, f: &BankFrame, prop: &BankProposal) -> Result<Vec<TrackSums>, BankError> {
        self.put_frame(f, prop)?;
        let s = self.stream.clone();
        self.timer.start(&s)?;
        self.enqueue()?;
        self.timer.stop(&s)?;
        let sums = self.read_sums()?;
        self.last_s = self.timer.elapsed_s();
        Ok(sums)
    }

    fn lobe_table(&self, _frame: &BankFrame) -> Result<Vec<f32>, BankError> {
        self.fetch(
            &self.lobe_num,
            2 * self.host_model.pairs.len() * self.lobe_intervals,
        )
    }

    fn set_device_timing(&mut self, on: bool) {
        self.timer.set(on);
    }

    fn last_device_time_s(&self) -> Option<f64> {
        self.last_s
    }

    fn bytes_read(&self) -> u64 {
        self.bytes_read
    }

    fn particles(&self) -> Result<Vec<f32>, BankError> {
        self.fetch(&self.cont, DIM * self.sizes.tracks * self.sizes.n_cont)
    }

    fn log_weights(&self) -> Result<Vec<f32>, BankError> {
        let BankSizes {
            tracks,
            n_birth,
            n_cont,
        } = self.sizes;
        self.fetch(&self.lw, tracks * (n_birth + n_cont))
    }

    fn load(&mut self, particles: &[f32], p_exist: &[f64]) -> Result<(), BankError> {
        let t = self.sizes.tracks;
        length("particles", particles.len(), DIM * t * self.sizes.n_cont)?;
        length("p_exist", p_exist.len(), t)?;
        let s = self.stream.clone();
        let p: Vec<f64> = p_exist.iter().map(|v| v.clamp(0.0, 1.0)).collect();
        s.memcpy_htod(particles, &mut self.cont)
            .map_err(err("copying the particles"))?;
        s.memcpy_htod(&p, &mut self.p_exist)
            .map_err(err("copying the existence"))?;
        s.memcpy_htod(&vec![1u32; t], &mut self.has_cont)
            .map_err(err("copying the flags"))?;
        s.synchronize().map_err(err("loading the curves bank"))?;
        Ok(())
    }

    fn reset(&mut self, p0: f64) -> Result<(), BankError> {
        let t = self.sizes.tracks;
        let s = self.stream.clone();
        s.memcpy_htod(&vec![p0.clamp(0.0, 1.0); t], &mut self.p_exist)
            .map_err(err("copying the existence"))?;
        s.memcpy_htod(&vec![0u32; t], &mut self.has_cont)
            .map_err(err("copying the flags"))?;
        s.synchronize().map_err(err("resetting the curves bank"))?;
        Ok(())
    }
}
