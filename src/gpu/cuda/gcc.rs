//! GCC-PHAT on the GPU: the [`Correlator`] twin of `CpuCorrelator`.
//!
//! Per call, for up to `batch` frames: copy the frames in, window them (`gcc_window`), one
//! batched R2C for every channel of every frame, `gcc_cross` for every pair of every frame, one
//! batched C2R, `gcc_peaks`, and copy the peaks (and curves when asked for) back. The host ends
//! of the copies are page-locked, and the whole sequence is captured once per batch size into a
//! CUDA graph, so a call costs one graph launch and one synchronisation; the plans and graphs
//! for one frame and for a whole batch are made with the correlator, and other sizes run padded
//! to a power of two. A batch goes through in parts (up to four, by its size), each part's
//! upload (on a second stream) overlapping the previous part's kernels; the frames are staged
//! into the page-locked buffer by the rayon pool. `gcc_peaks` lists each curve's local maxima
//! once, fixes the order `find_peaks` on the CPU examines them in (best first), has every warp
//! refine the first few, and one warp accepts or passes over them in that order.
//!
//! A one-frame call (the live path) has no copies where the host's page-locked buffers map
//! into the device: `gcc_window` reads the frame from host memory, `gcc_peaks` writes the
//! peaks there and raises a flag once every pair's are in, and the host waits for the flag
//! rather than for the stream. [`Correlator::start`] queues such a call and returns, so that
//! the pipeline checks the frame while the GPU correlates it.

use std::collections::HashMap;
use std::sync::Arc;

use cudarc::cufft::{result as fft, sys as fft_sys};
use cudarc::driver::{CudaEvent, CudaFunction, CudaSlice, CudaStream, LaunchConfig, PushKernelArg};

use super::host::{
    DeviceTimer, Graph, Pinned, capture, copy_for_device, drain_before_drop, wait_until,
};
use super::programs::GCC;
use super::{DriverFunction, Gpu, dptr, env_is_one, err, launch_early};
use crate::audio::frame::{Frame, FrameAlloc, MappedSamples, Samples};
use crate::dsp::gcc::{Correlator, DevicePeaks, GccFrame, GccParams, Peak, peak_interpolator};
use crate::error::BackendError;

/// Most threads per block of gcc_cross (kernels/gcc.cu: GCC_CROSS_BLOCK).
const GCC_CROSS_BLOCK: u32 = 1024;

/// A batch is uploaded in parts, each part's kernels running while the next part is copied
/// in. Each part adds its own chain of five kernels (roughly 15 us on the H200) and hides all
/// uploads but the first part's, so the best count grows with the square root of the batch's
/// bytes: about one part per square root of a MiB. Measured on the H200 (`sonotrack bench
/// --what gcc`, frames of 4096 samples, us per frame): 16 channels in batches of 16 (4 MiB)
/// 13.2 / 10.8 / 12.2 with 4 / 2 / 1 parts; in batches of 64 (16 MiB) 11.0 / 8.0 / 6.9 / 7.8
/// with 16 / 8 / 4 / 2 parts; 4 channels in batches of 64 (4 MiB) 8.1 / 4.4 / 2.6 / 2.4 with
/// 16 / 8 / 4 / 2 parts.
const MAX_PARTS: usize = 4;
/// Parts are at least this many frames.
const MIN_PART_FRAMES: usize = 4;

fn n_parts(b: usize, frame_bytes: usize) -> usize {
    let mib = (b * frame_bytes) as f64 / f64::from(1u32 << 20);
    (mib.sqrt().round() as usize)
        .min(MAX_PARTS)
        .min(b / MIN_PART_FRAMES)
        .max(1)
}

/// The parts (first frame, frames) a batch of `b` frames of `frame_bytes` each is processed in
/// (no allocation: this runs for every call, frame by frame in the live path).
fn parts(b: usize, frame_bytes: usize) -> impl Iterator<Item = (usize, usize)> {
    let k = n_parts(b, frame_bytes);
    (0..k).map(move |i| (i * (b / k) + i.min(b % k), b / k + usize::from(i < b % k)))
}

/// The batch size a call of `b` frames runs as: the next power of two, at most the batch the
/// correlator was made for. Each size needs its own cuFFT plans (milliseconds to make) and
/// graph, so a replay's last, short batch runs padded (the frames past `b` are whatever the
/// buffer held, and their results are not read) instead of making new ones.
fn run_size(b: usize, batch: usize) -> usize {
    b.next_power_of_two().min(batch).max(b)
}

/// Threads per block of gcc_peaks: one warp per pair and frame when the grid fills the GPU,
/// PEAK_THREADS_MAX when it does not (kernels/gcc.cu).
const PEAK_THREADS: u32 = 32;
const PEAK_THREADS_MAX: u32 = 256;

/// Curves up to this many lags are searched in shared memory (kernels/gcc.cu: PEAK_SHARED).
const PEAK_SHARED: usize = 8192;

/// gcc_peaks's dynamic shared memory: the curve (rounded up to four floats) and its list of
/// local maxima (shorts), or nothing for a curve too long for it (searched in global memory).
/// At most 8192 * 4 + 4097 * 2 bytes, within the 48 KiB a launch may take without opting in
/// (with the kernel's static 1.4 KiB).
fn peaks_shared_bytes(curve_half: usize) -> u32 {
    let len = 2 * curve_half + 1;
    if len > PEAK_SHARED {
        return 0;
    }
    (len.div_ceil(4) * 4 * 4 + (curve_half + 2) * 2) as u32
}

/// The peak refinement's taps in gcc_peaks's shared memory: a row per phase, each padded by
/// one (kernels/gcc.cu: PEAK_TAP_STRIDE).
const PEAK_TAPS_SHARED: usize =
    (crate::dsp::gcc::PEAK_GRID + 1) * (2 * crate::dsp::gcc::PEAK_INTERP_HALF_WIDTH + 1);

/// At most this much dynamic shared memory for gcc_peaks's search of a frame's few pairs (with
/// the kernel's static 1.4 KiB, within the 48 KiB a launch may take without opting in).
const PEAK_FEW_SHARED_MAX: usize = 44 * 1024;

/// gcc_peaks's dynamic shared memory for a frame's few pairs (`few`, PEAK_THREADS_MAX threads
/// each), or None when it does not fit: [`peaks_shared_bytes`] rounded up to 16 bytes, then the
/// taps and the curve in f64, a (value, lag) per thread, the refinement grids (doubles) of the
/// candidates refined ahead (kernels/gcc.cu: PEAK_AHEAD), and a refined peak for each of the
/// `cap` candidates examined (`find_peaks`'s cap for `k` peaks).
fn peaks_few_bytes(curve_half: usize, k: usize) -> Option<u32> {
    let base = peaks_shared_bytes(curve_half) as usize;
    let cap = (4 * k + 8).min(crate::dsp::gcc::MAX_CANDIDATES);
    let grid = crate::dsp::gcc::PEAK_GRID + 1;
    let total = base.div_ceil(16) * 16
        + PEAK_TAPS_SHARED * 8
        + (2 * curve_half + 2) * 8
        + PEAK_THREADS_MAX as usize * 8
        + PEAK_THREADS_MAX as usize / grid * grid * 8
        + cap * 12;
    (base > 0 && total <= PEAK_FEW_SHARED_MAX).then_some(total as u32)
}

/// Launch a kernel with the arguments listed (each a reference to its value, in the kernel's
/// order): early (`launch_early`) when `$early` holds its [`DriverFunction`], else through cudarc's
/// launcher. Evaluates to a `Result<(), BackendError>`; to be used inside `unsafe` (the
/// arguments must match the kernel's signature).
macro_rules! launch {
    ($s:expr, $f:expr, $early:expr, $cfg:expr, $what:expr; $($a:expr),* $(,)?) => {
        match $early {
            Some(ef) => {
                let mut args = [$(std::ptr::from_ref($a).cast_mut().cast::<std::ffi::c_void>()),*];
                launch_early(ef, $cfg, &$s, &mut args)
            }
            None => {
                let mut b = $s.launch_builder($f);
                $(b.arg($a);)*
                b.launch($cfg).map(|_| ()).map_err(err($what))
            }
        }
    };
}

/// Page-locked memory mapped into the device when the driver allows it, else plain
/// page-locked memory (the one-frame call then copies as a batch does).
fn mapped_or_not<T: bytemuck::Pod>(len: usize) -> Result<Pinned<T>, BackendError> {
    Pinned::mapped(len).or_else(|_| Pinned::new(len))
}

struct Plans {
    r2c: fft_sys::cufftHandle,
    c2r: fft_sys::cufftHandle,
}

pub struct CudaCorrelator {
    gpu: Arc<Gpu>,
    /// The correlator's work runs here (and on `copy_stream`), apart from the filter's.
    stream: Arc<CudaStream>,
    params: GccParams,
    batch: usize,
    f_window: CudaFunction,
    f_cross: CudaFunction,
    /// gcc_cross for a few pairs (one frame), which holds each thread's bins in registers.
    f_cross_few: CudaFunction,
    f_peaks: CudaFunction,
    /// gcc_cross_few and gcc_peaks for launches before the transform they follow has finished
    /// (sm_90 and later: see [`launch_early`]); None elsewhere.
    early: Option<[DriverFunction; 2]>,
    d_in: CudaSlice<f32>,
    d_window: CudaSlice<f32>,
    d_fft_in: CudaSlice<f32>,
    d_spec: CudaSlice<f32>,
    d_pairs: CudaSlice<u32>,
    d_taper: CudaSlice<f32>,
    d_maxlag: CudaSlice<f32>,
    d_taps: CudaSlice<f32>,
    d_cross: CudaSlice<f32>,
    d_norms: CudaSlice<f32>,
    d_corr: CudaSlice<f32>,
    d_curves: CudaSlice<f32>,
    d_peaks: CudaSlice<f32>,
    /// Uploads of a batch's later parts run here while the main stream transforms the earlier
    /// ones; every use is ordered against the main stream by events.
    copy_stream: Arc<CudaStream>,
    plans: HashMap<usize, Plans>,
    /// Captured sequences by (frames, curves wanted); None where capture failed.
    graphs: HashMap<(usize, bool), Option<Graph>>,
    /// Captured one-frame sequences that read the frame where it lies, by (where it lies and
    /// how much of it a device copy holds, curves wanted): see [`Self::frame_allocator`]. At
    /// most [`FRAME_GRAPHS_MAX`].
    frame_graphs: HashMap<(FrameIn, bool), Option<Graph>>,
    host_in: Pinned<f32>,
    host_peaks: Pinned<f32>,
    host_curves: Option<Pinned<f32>>,
    timer: DeviceTimer,
    last_s: Option<f64>,
    /// Frames of `host_in` ever written: a padded call (see [`run_size`]) fills the slots past
    /// this with its last frame rather than computing on zeros.
    filled: usize,
    last_bytes: u64,
    /// What [`Correlator::start`] queued (frames, curves wanted) until `finish` collects it.
    started: Option<(usize, bool)>,
    /// The one-frame call without copy nodes, where the host buffers map into the device.
    single: Option<Single>,
    /// gcc_peaks's counts for a one-frame call (kernels/gcc.cu, peaks_signal): [0] blocks of
    /// one-frame calls whose peaks are visible on the device (which a live filter step waits
    /// for), [1] blocks whose peaks are visible to the host (the last one raises the flag and
    /// resets it).
    d_ticket: CudaSlice<u32>,
    /// Blocks of the one-frame calls launched with the flag, a block per pair (what
    /// `d_ticket[0]` reads once they are done).
    single_blocks: u32,
}

/// A one-frame call (the live path) without copies: the frame is read from the page-locked
/// buffer by `gcc_window` (when small: see [`MAPPED_INPUT_BYTES`]), `gcc_peaks` writes the peaks
/// into the host's buffer and, once every pair's are there, raises `flag`, on which the host
/// waits instead of synchronising the stream.
struct Single {
    /// Device address of the frame in `host_in` (None: copied in as for a batch).
    input: Option<u64>,
    /// Device address of `host_peaks`.
    peaks: u64,
    flag: Pinned<u32>,
    flag_dev: u64,
}

/// Where a one-frame call's `gcc_window` reads the frame: the samples at `host` (in host memory
/// mapped into the device), except each channel's first `upto`, which it reads from a copy on
/// the device at `copy` (sent ahead while the frame filled: see [`MappedFrame`]; 0 and 0 when
/// there is none).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
struct FrameIn {
    host: u64,
    copy: u64,
    upto: u32,
}

impl FrameIn {
    fn host(host: u64) -> Self {
        Self {
            host,
            copy: 0,
            upto: 0,
        }
    }
}

/// Frames up to this size are read by the window kernel straight from host memory on a
/// one-frame call (a copy node costs a few microseconds whatever its size; larger frames read
/// faster by the copy engine).
const MAPPED_INPUT_BYTES: usize = 256 << 10;

/// Frame buffers with a graph of their own. A live source's assembler cycles through a few: the
/// frames being filled side by side (two with a hop of half a frame) and the one being
/// processed, and its pool keeps at most 8. Frames in other buffers are copied as heap frames
/// are.
const FRAME_GRAPHS_MAX: usize = 16;

/// A live frame's samples in page-locked host memory mapped into the device, made by
/// [`CudaCorrelator::frame_allocator`]'s allocator for the frame assembler: `gcc_window` reads
/// them where the assembler wrote them, instead of from a copy in `host_in`.
///
/// While the assembler fills the frame, it sends the samples it has written so far ahead
/// ([`MappedSamples::send_ahead`], between frames): they are copied into a device buffer of
/// the frame's own (`ahead`), so that the correlation, once the frame is complete, reads only
/// its last samples over the bus. On the H100 host the window kernel read a 4-channel frame of
/// 4096 samples out of the CPU's cache in about 4.5 us; with its first three quarters on the
/// device, in about 2.
struct MappedFrame {
    buf: Pinned<f32>,
    dev: u64,
    /// None where the device buffer, stream or event could not be made (nothing is then sent
    /// ahead), or after an upload failed.
    ahead: Option<Ahead>,
    /// The context the memory belongs to, kept alive as long as the frame (which may outlive
    /// the correlator: a frame in the assembler's pool after a switch to the CPU).
    gpu: Arc<Gpu>,
}

/// A mapped frame's device copy of its first samples.
struct Ahead {
    copy: CudaSlice<f32>,
    /// The uploads' stream (one for all the frames of an allocator), and an event recorded
    /// after the frame's last upload, which a correlation's stream waits for.
    stream: Arc<CudaStream>,
    done: CudaEvent,
    /// Each channel's first `sent` samples are in `copy` (0: none).
    sent: usize,
}

impl Ahead {
    /// Upload each channel's samples `from..to` of `buf` (channels of `len`) into the copy;
    /// then the copy holds each channel's first `to`.
    fn upload(
        &mut self,
        buf: &Pinned<f32>,
        from: usize,
        to: usize,
        len: usize,
    ) -> Result<(), BackendError> {
        let dst = dptr(&self.copy, &self.stream);
        let rows = buf.len() / len.max(1);
        // SAFETY: both buffers hold `rows` channels of `len` samples and `from <= to <= len`
        // (checked by the copy). The assembler writes only samples past `to` until the frame's
        // next fill, which starts after its correlation (which waits for this copy) has read
        // it. Any other writer (the checks zeroing a NaN) drops the copy (`as_mut_slice`), so
        // a value it changes while the copy runs is never read from the copy; and the buffer
        // is not freed before the copy is done (MappedFrame's Drop).
        unsafe { buf.copy_columns_to_device(len, rows, from, to, dst, &self.stream)? };
        self.done
            .record(&self.stream)
            .map_err(err("recording an upload"))?;
        self.sent = to;
        Ok(())
    }
}

// SAFETY: shared references to a MappedFrame only read: the samples (as a slice, like a
// Vec's), the device address and the context's identity, and the device copy's address and
// event (which `sent_ahead` has a stream wait for: a CUDA call that changes nothing here).
unsafe impl Sync for MappedFrame {}

impl MappedSamples for MappedFrame {
    fn as_slice(&self) -> &[f32] {
        self.buf.as_slice()
    }
    fn as_mut_slice(&mut self) -> &mut [f32] {
        // Any sample may change: the device copy no longer counts.
        if let Some(a) = self.ahead.as_mut() {
            a.sent = 0;
        }
        self.buf.as_mut_slice()
    }
    fn appending(&mut self) -> &mut [f32] {
        self.buf.as_mut_slice()
    }
    fn device_address(&self, owner: usize) -> Option<u64> {
        (owner == owner_token(&self.gpu)).then_some(self.dev)
    }
    fn send_ahead(&mut self, rows: usize, len: usize) {
        let Some(a) = self.ahead.as_mut() else {
            return;
        };
        if rows < a.sent || rows == 0 {
            a.sent = 0;
        }
        let (from, to) = (a.sent, rows.min(len));
        if to <= from {
            return;
        }
        if let Err(e) = a.upload(&self.buf, from, to, len) {
            // The frame is then read from host memory, as without a copy.
            log::warn!(
                "sending a frame's samples ahead to the GPU: {e}; this frame is read from host memory"
            );
            self.ahead = None;
        }
    }
    fn sent_rows(&self) -> usize {
        self.ahead.as_ref().map_or(0, |a| a.sent)
    }
    fn sent_ahead(&self, owner: usize, stream: u64) -> Option<(u64, usize)> {
        let a = self.ahead.as_ref()?;
        if owner != owner_token(&self.gpu) || a.sent == 0 {
            return None;
        }
        // SAFETY: `stream` is the correlator's stream (a live handle of this context), and the
        // event is ours; the wait only orders the stream's later work after the upload.
        unsafe {
            cudarc::driver::sys::cuStreamWaitEvent(
                stream as cudarc::driver::sys::CUstream,
                a.done.cu_event(),
                0,
            )
        }
        .result()
        .ok()?;
        Some((dptr(&a.copy, &a.stream), a.sent))
    }
}

impl Drop for MappedFrame {
    fn drop(&mut self) {
        // The memory is freed (next, by `buf`) with its context current on this thread, and
        // not while an upload from it may still be running.
        let _ = self.gpu.ctx.bind_to_thread();
        if let Some(a) = self.ahead.as_ref() {
            let _ = a.done.synchronize();
        }
    }
}

/// Which device a frame's mapped memory belongs to (see [`MappedSamples::device_address`]).
fn owner_token(gpu: &Arc<Gpu>) -> usize {
    Arc::as_ptr(&gpu.ctx) as usize
}

/// What the host writes into the flag before a one-frame call, and what `gcc_peaks` raises it
/// to.
const FLAG_PENDING: u32 = 0;
const FLAG_DONE: u32 = 1;

impl CudaCorrelator {
    /// A correlator that transforms up to `batch` frames per call.
    pub fn new(gpu: Arc<Gpu>, params: GccParams, batch: usize) -> Result<Self, BackendError> {
        // At most 64 MiB of frames per call (page-locked host memory is a scarce resource).
        let frame_bytes = (params.channels * params.frame_len * 4).max(1);
        let batch = batch.clamp(1, (64 << 20) / frame_bytes).max(1);
        // A stream of its own, so that a replay's correlation of the next batch (on a second
        // thread) runs beside the filter's steps on the device.
        let s = gpu
            .stream
            .fork()
            .map_err(err("creating the correlator's stream"))?;
        let (c, p, nb) = (params.channels, params.pairs.len(), params.n_bins());
        let alloc = |n: usize| {
            s.alloc_zeros::<f32>(n.max(1))
                .map_err(err("allocating GCC buffers"))
        };
        let pairs: Vec<u32> = params
            .pairs
            .iter()
            .flat_map(|q| [q.a as u32, q.b as u32])
            .collect();
        let maxlag: Vec<f32> = params.pairs.iter().map(|q| q.max_lag_samples).collect();
        let taps = peak_interpolator();
        let mut d_pairs = s
            .alloc_zeros::<u32>(pairs.len().max(1))
            .map_err(err("allocating GCC buffers"))?;
        s.memcpy_htod(&pairs, &mut d_pairs)
            .map_err(err("uploading pairs"))?;
        let mut d_window = alloc(params.frame_len)?;
        s.memcpy_htod(&params.window_coefficients(), &mut d_window)
            .map_err(err("uploading the window"))?;
        let mut d_taper = alloc(nb)?;
        s.memcpy_htod(&params.band_taper, &mut d_taper)
            .map_err(err("uploading the band taper"))?;
        let mut d_maxlag = alloc(p)?;
        s.memcpy_htod(&maxlag, &mut d_maxlag)
            .map_err(err("uploading lag bounds"))?;
        let mut d_taps = alloc(taps.data().len())?;
        s.memcpy_htod(taps.data(), &mut d_taps)
            .map_err(err("uploading interpolator taps"))?;
        let mut me = Self {
            f_window: gpu.function(&GCC, "gcc_window")?,
            f_cross: gpu.function(&GCC, "gcc_cross")?,
            f_cross_few: gpu.function(&GCC, "gcc_cross_few")?,
            f_peaks: gpu.function(&GCC, "gcc_peaks")?,
            early: match (
                gpu.early_launch,
                gpu.driver_function(&GCC, "gcc_cross_few")?,
                gpu.driver_function(&GCC, "gcc_peaks")?,
            ) {
                (true, Some(a), Some(b)) => Some([a, b]),
                _ => None,
            },
            d_in: alloc(batch * c * params.frame_len)?,
            d_fft_in: alloc(batch * c * params.fft_len)?,
            d_spec: alloc(batch * c * nb * 2)?,
            d_cross: alloc(batch * p * nb * 2)?,
            d_norms: alloc(batch * p)?,
            d_corr: alloc(batch * p * params.fft_len)?,
            d_curves: alloc(batch * p * params.curve_len())?,
            d_peaks: alloc(batch * p * params.peaks_per_pair * 3)?,
            d_window,
            d_pairs,
            d_taper,
            d_maxlag,
            d_taps,
            copy_stream: s.fork().map_err(err("creating the upload stream"))?,
            stream: s.clone(),
            plans: HashMap::new(),
            graphs: HashMap::new(),
            frame_graphs: HashMap::new(),
            host_in: mapped_or_not(batch * c * params.frame_len)?,
            host_peaks: mapped_or_not(batch * p * params.peaks_per_pair * 3)?,
            host_curves: None,
            timer: DeviceTimer::new(&gpu.ctx, false)?,
            last_s: None,
            last_bytes: 0,
            filled: 0,
            started: None,
            single: None,
            d_ticket: s
                .alloc_zeros::<u32>(2)
                .map_err(err("allocating GCC buffers"))?,
            single_blocks: 0,
            batch,
            params,
            gpu,
        };
        me.single = me.single_io();
        // Plans and graphs for the two sizes calls come in (one frame live, whole batches in
        // replay) are made now, so that the first frames do not pay for them.
        me.prepare(1, false)?;
        me.prepare(batch, false)?;
        Ok(me)
    }

    fn plans(&mut self, frames: usize) -> Result<&Plans, BackendError> {
        if !self.plans.contains_key(&frames) {
            let n = self.params.fft_len as i32;
            let nb = self.params.n_bins() as i32;
            let mut dims = [n];
            // SAFETY: plan_many reads `dims` (rank 1) and null embeddings (contiguous data);
            // set_stream gets a live plan and our stream.
            let plans = unsafe {
                let r2c = fft::plan_many(
                    1,
                    dims.as_mut_ptr(),
                    std::ptr::null_mut(),
                    1,
                    n,
                    std::ptr::null_mut(),
                    1,
                    nb,
                    fft_sys::cufftType::CUFFT_R2C,
                    (frames * self.params.channels) as i32,
                )
                .map_err(err("cuFFT R2C plan"))?;
                let c2r = fft::plan_many(
                    1,
                    dims.as_mut_ptr(),
                    std::ptr::null_mut(),
                    1,
                    nb,
                    std::ptr::null_mut(),
                    1,
                    n,
                    fft_sys::cufftType::CUFFT_C2R,
                    (frames * self.params.pairs.len()).max(1) as i32,
                )
                .map_err(err("cuFFT C2R plan"))?;
                let st = self.stream.cu_stream() as fft_sys::cudaStream_t;
                fft::set_stream(r2c, st).map_err(err("cuFFT stream"))?;
                fft::set_stream(c2r, st).map_err(err("cuFFT stream"))?;
                Plans { r2c, c2r }
            };
            self.plans.insert(frames, plans);
        }
        self.plans
            .get(&frames)
            .ok_or_else(|| BackendError::new("cuda", "cuFFT plan missing"))
    }

    /// The addresses of a one-frame call without copies, or None (logged) when the host
    /// buffers do not map into the device.
    fn single_io(&self) -> Option<Single> {
        let io = || -> Result<Single, BackendError> {
            let flag = Pinned::<u32>::mapped(1)?;
            let frame_bytes = self.params.channels * self.params.frame_len * 4;
            Ok(Single {
                input: if frame_bytes <= MAPPED_INPUT_BYTES {
                    Some(self.host_in.device_ptr()?)
                } else {
                    None
                },
                peaks: self.host_peaks.device_ptr()?,
                flag_dev: flag.device_ptr()?,
                flag,
            })
        };
        io().map_err(|e| log::debug!("one-frame GCC calls copy (no mapped host memory: {e})"))
            .ok()
    }

    /// Enqueue the whole sequence for `b` frames already in `host_in`: copy in, window, R2C,
    /// cross-spectra, C2R, peaks, copy peaks (and curves) out. No synchronisation.
    ///
    /// A batch goes in [`n_parts`] parts: the copy stream uploads part i + 1 while the main
    /// stream transforms part i (each part's kernels wait on its upload by an event), so that
    /// the bus and the kernels work at the same time (the upload of a batch of 16 16-channel
    /// frames alone is 81 us on the H200).
    ///
    /// `frame`: where a one-frame call's frame lies (a [`MappedFrame`], with what of it is
    /// on the device) instead of in `host_in`.
    fn enqueue(
        &mut self,
        b: usize,
        want_curves: bool,
        frame: Option<FrameIn>,
    ) -> Result<(), BackendError> {
        let p = self.params.clone();
        let (c, np, k) = (p.channels, p.pairs.len(), p.peaks_per_pair);
        let s = self.stream.clone();
        let row = c * p.frame_len;
        // One frame: no copies where the host buffers map (see `Single`).
        let single = (b == 1)
            .then(|| {
                let m = self.single.as_ref()?;
                Some((frame.or(m.input.map(FrameIn::host)), m.peaks, m.flag_dev))
            })
            .flatten();
        for (i, (f0, n)) in parts(b, row * 4).enumerate() {
            if let Some((Some(_), _, _)) = single {
                // gcc_window reads the frame from host memory.
            } else if n == b {
                // SAFETY: d_in holds `batch` frames, b <= batch; the host buffer is not touched
                // until the caller has synchronised.
                unsafe {
                    self.host_in
                        .copy_range_to_device(0, dptr(&self.d_in, &s), b * row, &s)?;
                }
            } else {
                // The copy stream starts after what the main stream had queued before the
                // batch, copies the parts one after the other, and the main stream waits for
                // each part's copy only (the last wait joins the two streams again).
                let cs = self.copy_stream.clone();
                if i == 0 {
                    cs.join(&s).map_err(err("ordering the upload"))?;
                }
                // SAFETY: as above, for frames f0..f0 + n of the batch.
                unsafe {
                    self.host_in.copy_range_to_device(
                        f0 * row,
                        dptr(&self.d_in, &s) + (f0 * row * 4) as u64,
                        n * row,
                        &cs,
                    )?;
                }
                s.join(&cs).map_err(err("ordering the upload"))?;
            }
            self.enqueue_part(f0, n, b, want_curves, single)?;
        }
        // SAFETY: both device buffers hold `batch` frames of results; the host reads them only
        // after synchronising.
        unsafe {
            if single.is_none() {
                self.host_peaks
                    .copy_from_device(dptr(&self.d_peaks, &s), b * np * k * 3, &s)?;
            }
            if want_curves {
                let cl = p.curve_len();
                if let Some(h) = self.host_curves.as_mut() {
                    h.copy_from_device(dptr(&self.d_curves, &s), b * np * cl, &s)?;
                }
            }
        }
        Ok(())
    }

    /// The kernels for frames `f0..f0 + n` of a batch of `b` (already on the device), on the
    /// main stream: window, R2C, cross-spectra, C2R, peaks. `single`: a one-frame call's
    /// mapped frame (when read from the host), peaks and flag (see [`Single`]).
    fn enqueue_part(
        &mut self,
        f0: usize,
        n: usize,
        b: usize,
        want_curves: bool,
        single: Option<(Option<FrameIn>, u64, u64)>,
    ) -> Result<(), BackendError> {
        let p = self.params.clone();
        let (c, np, nb, k) = (p.channels, p.pairs.len(), p.n_bins(), p.peaks_per_pair);
        let plans = self.plans(n)?;
        let (r2c, c2r) = (plans.r2c, plans.c2r);
        let s = self.stream.clone();
        // Device addresses of this part's frames in each buffer (f32 elements of 4 bytes).
        let at =
            |buf: &CudaSlice<f32>, per_frame: usize| dptr(buf, &s) + (f0 * per_frame * 4) as u64;
        let d_in = at(&self.d_in, c * p.frame_len);
        let d_fft_in = at(&self.d_fft_in, c * p.fft_len);
        let d_spec = at(&self.d_spec, c * nb * 2);
        let d_cross = at(&self.d_cross, np * nb * 2);
        let d_norms = at(&self.d_norms, np);
        let d_corr = at(&self.d_corr, np * p.fft_len);
        let d_curves = at(&self.d_curves, np * p.curve_len());
        let d_peaks = at(&self.d_peaks, np * k * 3);
        // A one-frame call writes its peaks into the host's buffer, and into `d_peaks` too (for
        // a live filter step: `device_peaks`).
        let (d_in, d_peaks, flag, peaks_dev) = match single {
            Some((input, peaks, flag)) => {
                (input.unwrap_or(FrameIn::host(d_in)), peaks, flag, d_peaks)
            }
            None => (FrameIn::host(d_in), d_peaks, 0u64, 0u64),
        };
        let d_ticket = dptr(&self.d_ticket, &s);
        let blocks = (np * n) as u32;
        // gcc_cross: a few pairs (one frame) get 1024 threads each, so that each thread walks few
        // bins; a grid that fills the GPU gets 256 (measured on the H200: a 4-channel frame
        // 38-43 us against 42-46 us, a batch of 16 16-channel frames 217 us against 227 us).
        // Likewise gcc_peaks: PEAK_THREADS_MAX threads per pair for a few pairs, one warp
        // otherwise. A few pairs' cross-spectra hold their bins in registers (gcc_cross_few).
        let few = np * b < self.gpu.multiprocessors.max(1) as usize;
        let cross_threads = if few { GCC_CROSS_BLOCK } else { 256 };
        let peak_threads = if few { PEAK_THREADS_MAX } else { PEAK_THREADS };
        let few_shared = few.then(|| peaks_few_bytes(p.curve_half, k)).flatten();
        let peak_shared = few_shared.unwrap_or_else(|| peaks_shared_bytes(p.curve_half));
        let few_search = u32::from(few_shared.is_some());
        let (frame_len, fft_len) = (p.frame_len as u32, p.fft_len as u32);
        // SAFETY (all launches below): argument types and order match the kernel signatures in
        // kernels/gcc.cu, and every address is inside its buffer, allocated for `batch` >=
        // f0 + n frames.
        unsafe {
            s.launch_builder(&self.f_window)
                .arg(&d_in.host)
                .arg(&d_in.copy)
                .arg(&d_in.upto)
                .arg(&self.d_window)
                .arg(&d_fft_in)
                .arg(&frame_len)
                .arg(&fft_len)
                .launch(LaunchConfig {
                    grid_dim: (fft_len.div_ceil(256), (n * c) as u32, 1),
                    block_dim: (256, 1, 1),
                    shared_mem_bytes: 0,
                })
                .map_err(err("gcc_window"))?;
        }
        // SAFETY: the plan was made for n x channels transforms of fft_len reals into
        // fft_len/2+1 complex values, which is what the two parts of the buffers hold.
        unsafe {
            fft::exec_r2c(
                r2c,
                d_fft_in as *mut f32,
                d_spec as *mut fft_sys::cufftComplex,
            )
        }
        .map_err(err("cuFFT R2C"))?;
        let (channels, n_pairs, nbu) = (c as u32, np as u32, nb as u32);
        let (lo, hi) = (p.band_bins.0 as u32, p.band_bins.1 as u32);
        let phat = u32::from(p.weighting == crate::dsp::gcc::Weighting::Phat);
        if np == 0 {
            return Ok(());
        }
        let f_cross = if few {
            &self.f_cross_few
        } else {
            &self.f_cross
        };
        // A few pairs' kernels after the transforms are launched early where the device can
        // (see `launch_early`): their blocks are in place when the transform's last block ends.
        let (early_cross, early_peaks) = match (few, &self.early) {
            (true, Some([c, pk])) => (Some(*c), Some(*pk)),
            _ => (None, None),
        };
        let (d_pairs, d_taper) = (dptr(&self.d_pairs, &s), dptr(&self.d_taper, &s));
        let cross_cfg = LaunchConfig {
            grid_dim: (n_pairs, n as u32, 1),
            block_dim: (cross_threads, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: as for the launches above.
        unsafe {
            launch!(s, f_cross, early_cross, cross_cfg, "gcc_cross";
                &d_spec, &d_pairs, &d_taper, &channels, &n_pairs, &nbu, &lo, &hi, &phat,
                &p.beta, &p.regularisation, &d_cross, &d_norms)?;
        }
        // SAFETY: the plan was made for n x pairs inverse transforms matching the buffers.
        unsafe {
            fft::exec_c2r(
                c2r,
                d_cross as *mut fft_sys::cufftComplex,
                d_corr as *mut f32,
            )
        }
        .map_err(err("cuFFT C2R"))?;
        let (ch, ku, wc) = (p.curve_half as u32, k as u32, u32::from(want_curves));
        let (d_maxlag, d_taps) = (dptr(&self.d_maxlag, &s), dptr(&self.d_taps, &s));
        let peaks_cfg = LaunchConfig {
            grid_dim: (n_pairs, n as u32, 1),
            block_dim: (peak_threads, 1, 1),
            shared_mem_bytes: peak_shared,
        };
        // SAFETY: as for the launches above.
        unsafe {
            launch!(s, &self.f_peaks, early_peaks, peaks_cfg, "gcc_peaks";
                &d_corr, &d_norms, &d_maxlag, &d_taps, &n_pairs, &fft_len, &ch, &ku,
                &p.min_separation_samples, &wc, &d_curves, &d_peaks, &d_ticket, &blocks, &flag,
                &few_search, &peaks_dev)?;
        }
        Ok(())
    }

    /// Make what a call of `b` frames needs (the curves' host buffer, the cuFFT plans of its
    /// parts, its graph) if it is not there yet. Plans are made outside any capture (making one
    /// allocates).
    fn prepare(&mut self, b: usize, want_curves: bool) -> Result<(), BackendError> {
        let p = &self.params;
        if want_curves && self.host_curves.is_none() {
            self.host_curves = Some(Pinned::new(self.batch * p.pairs.len() * p.curve_len())?);
        }
        for (_, n) in parts(b, p.channels * p.frame_len * 4) {
            self.plans(n)?;
        }
        if !self.graphs.contains_key(&(b, want_curves)) {
            let s = self.stream.clone();
            let g = capture(&s, || self.enqueue(b, want_curves, None))?;
            self.graphs.insert((b, want_curves), g);
        }
        Ok(())
    }

    /// Where a one-frame call reads `f`'s samples if it can read them where they lie (a
    /// [`MappedFrame`] of this context, while a one-frame call reads its frame from host
    /// memory), with its graph made; None: the frame is copied.
    ///
    /// A device copy of the frame's first samples (sent ahead) counts in whole quarters of the
    /// frame, so that a frame buffer has at most four graphs of its own; the stream then waits
    /// for the copy's upload (only when the copy is used). With the graphs all taken, a frame
    /// buffer's graph without a copy is used if it has one.
    fn frame_in_place(
        &mut self,
        f: &Frame,
        want_curves: bool,
    ) -> Result<Option<FrameIn>, BackendError> {
        let owner = owner_token(&self.gpu);
        let Some(host) = f.data.device_address(owner) else {
            return Ok(None);
        };
        if self.single.as_ref().is_none_or(|m| m.input.is_none()) {
            return Ok(None);
        }
        let len = self.params.frame_len;
        let quarter = (len / 4).max(1);
        // The copy's whole quarters (`sent_rows`: no CUDA call yet).
        let upto = f.data.sent_rows().min(len) / quarter * quarter;
        let full = self.frame_graphs.len() >= FRAME_GRAPHS_MAX;
        // A frame buffer has one device copy, so its graph for this much of the copy is known
        // by the buffer and the amount.
        let use_copy = upto > 0
            && (!full
                || self
                    .frame_graphs
                    .keys()
                    .any(|(k, c)| *c == want_curves && k.host == host && k.upto as usize == upto));
        // Only a copy that is used has the stream wait for its upload (`sent_ahead`).
        let at = use_copy
            .then(|| f.data.sent_ahead(owner, self.stream.cu_stream() as u64))
            .flatten()
            .map_or(FrameIn::host(host), |(copy, _)| FrameIn {
                host,
                copy,
                // (At most the frame's length, which fits a u32 like the kernels' sizes.)
                upto: upto as u32,
            });
        let key = (at, want_curves);
        if !self.frame_graphs.contains_key(&key) {
            if full {
                return Ok(None);
            }
            self.prepare(1, want_curves)?;
            let s = self.stream.clone();
            let g = capture(&s, || self.enqueue(1, want_curves, Some(at)))?;
            self.frame_graphs.insert(key, g);
        }
        Ok(Some(at))
    }

    /// Make the context current on the calling thread: a replay calls from a second thread
    /// (the pipeline correlates ahead of the tracker).
    fn bind(&self) -> Result<(), BackendError> {
        self.gpu
            .ctx
            .bind_to_thread()
            .map_err(err("making the CUDA context current"))
    }

    fn run_batch(
        &mut self,
        frames: &[&Frame],
        out: &mut [GccFrame],
        want_curves: bool,
    ) -> Result<(), BackendError> {
        self.launch(frames, want_curves)?;
        self.collect(frames, out, want_curves)
    }

    /// Stage up to `batch` frames into the page-locked buffer (unless one frame lies in mapped
    /// memory) and queue their correlation (without waiting for it: see [`Self::collect`]).
    fn launch(&mut self, frames: &[&Frame], want_curves: bool) -> Result<(), BackendError> {
        self.params.check_frames("cuda", frames)?;
        // A live frame in memory the device reads (see `frame_allocator`) goes without a copy.
        let in_place = match frames {
            [f] => self.frame_in_place(f, want_curves)?,
            _ => None,
        };
        let run = match in_place {
            Some(_) => 1,
            None => self.stage(frames, want_curves)?,
        };
        if run == 1 {
            if let Some(m) = self.single.as_mut() {
                m.flag.as_mut_slice()[0] = FLAG_PENDING;
                let blocks = self.params.pairs.len() as u32;
                self.single_blocks = self.single_blocks.wrapping_add(blocks);
            }
        }
        let s = self.stream.clone();
        self.timer.start(&s)?;
        let graph = match in_place {
            Some(a) => self.frame_graphs.get_mut(&(a, want_curves)),
            None => self.graphs.get_mut(&(run, want_curves)),
        };
        match graph {
            Some(Some(g)) => g.launch()?,
            _ => self.enqueue(run, want_curves, in_place)?,
        }
        self.timer.stop(&s)?;
        Ok(())
    }

    /// Copy `frames` (sizes checked) into the page-locked buffer and make what a call of their
    /// run size needs; returns the run size (see [`run_size`]).
    fn stage(&mut self, frames: &[&Frame], want_curves: bool) -> Result<usize, BackendError> {
        let b = frames.len();
        let row = self.params.channels * self.params.frame_len;
        let host = &mut self.host_in.as_mut_slice()[..b * row];
        if b > 1 {
            // The staging copy of a batch on the rayon pool (one core moved 5 MB in 650 us),
            // with non-temporal stores (see `copy_for_device`: with plain stores from 16
            // threads the upload that follows took twice as long).
            use rayon::prelude::*;
            host.par_chunks_mut(row)
                .zip(frames.par_iter())
                .for_each(|(h, f)| copy_for_device(h, &f.data));
        } else if let Some(f) = frames.first() {
            copy_for_device(host, &f.data);
        }
        let run = run_size(b, self.batch);
        if b > 0 && run > self.filled.max(b) {
            let host = self.host_in.as_mut_slice();
            for i in self.filled.max(b)..run {
                host.copy_within((b - 1) * row..b * row, i * row);
            }
        }
        self.filled = self.filled.max(run);
        self.prepare(run, want_curves)?;
        Ok(run)
    }

    /// Wait for the correlation [`Self::launch`] queued for `frames` and fill `out`.
    fn collect(
        &mut self,
        frames: &[&Frame],
        out: &mut [GccFrame],
        want_curves: bool,
    ) -> Result<(), BackendError> {
        let b = frames.len();
        let p = &self.params;
        let (c, np, nb, k) = (p.channels, p.pairs.len(), p.n_bins(), p.peaks_per_pair);
        let (cl, frame_len, fft_len) = (p.curve_len(), p.frame_len, p.fft_len);
        // A one-frame call waits for the peaks' flag, unless the curves come back too (a copy
        // after the kernels) or device timing is on (its end event must have passed).
        let flag = match &self.single {
            Some(m) if b == 1 && !want_curves && !self.timer.is_on() => Some(m.flag.as_ptr()),
            _ => None,
        };
        match flag {
            Some(f) => wait_until(&self.stream, "the GCC kernels", || {
                // SAFETY: `f` points to the live, mapped flag, which the device writes: read
                // through a raw pointer, without holding a reference.
                unsafe { std::ptr::read_volatile(f) == FLAG_DONE }
            })?,
            None => self
                .stream
                .synchronize()
                .map_err(err("running the GCC kernels"))?,
        }
        self.last_s = self.timer.elapsed_s();
        // Bytes through device memory: frames in, FFT input written and read, spectra written
        // and read twice per pair they take part in (bounded by once per pair), cross-spectra
        // written and read, curves written and read, peaks out.
        let f4 = 4u64;
        self.last_bytes = f4
            * (b * c * frame_len
                + 2 * b * c * fft_len
                + 2 * b * c * nb * 2
                + 2 * b * np * nb * 2 * 2
                + 2 * b * np * fft_len
                + b * np * k * 3) as u64;
        let peaks = self.host_peaks.as_slice();
        for (i, o) in out.iter_mut().enumerate().take(b) {
            o.seq = frames[i].seq;
            o.peaks.resize(np * k, Peak::NONE);
            for (j, pk) in o.peaks.iter_mut().enumerate() {
                let at = (i * np * k + j) * 3;
                *pk = Peak {
                    lag_samples: peaks[at],
                    value: peaks[at + 1],
                    quality: peaks[at + 2],
                };
            }
            o.curves.clear();
            if want_curves {
                if let Some(h) = &self.host_curves {
                    o.curves
                        .extend_from_slice(&h.as_slice()[i * np * cl..(i + 1) * np * cl]);
                }
            }
        }
        Ok(())
    }
}

impl Correlator for CudaCorrelator {
    fn backend(&self) -> &'static str {
        "cuda"
    }

    fn params(&self) -> &GccParams {
        &self.params
    }

    fn correlate(
        &mut self,
        frames: &[&Frame],
        out: &mut [GccFrame],
        want_curves: bool,
    ) -> Result<(), BackendError> {
        self.params.check_call("cuda", frames, out.len())?;
        self.bind()?;
        let mut total_s = 0.0;
        let mut total_bytes = 0;
        for (fr, o) in frames.chunks(self.batch).zip(out.chunks_mut(self.batch)) {
            self.run_batch(fr, o, want_curves)?;
            total_s += self.last_s.unwrap_or(0.0);
            total_bytes += self.last_bytes;
        }
        self.last_s = Some(total_s);
        self.last_bytes = total_bytes;
        Ok(())
    }

    fn start(&mut self, frames: &[&Frame], want_curves: bool) -> Result<bool, BackendError> {
        if frames.is_empty() || frames.len() > self.batch {
            return Ok(false);
        }
        self.started = None;
        self.bind()?;
        self.launch(frames, want_curves)?;
        self.started = Some((frames.len(), want_curves));
        Ok(true)
    }

    fn finish(
        &mut self,
        frames: &[&Frame],
        out: &mut [GccFrame],
        want_curves: bool,
    ) -> Result<(), BackendError> {
        if self.started.take() != Some((frames.len(), want_curves)) || out.len() != frames.len() {
            return Err(BackendError::new(
                "cuda",
                "finish does not match the started correlation",
            ));
        }
        self.collect(frames, out, want_curves)
    }

    fn device_peaks(&self) -> Option<DevicePeaks> {
        self.single.as_ref()?;
        match self.started {
            Some((1, false)) => Some(DevicePeaks {
                peaks: dptr(&self.d_peaks, &self.stream),
                done: dptr(&self.d_ticket, &self.stream),
                expect: self.single_blocks,
            }),
            _ => None,
        }
    }

    fn frame_allocator(&self) -> Option<FrameAlloc> {
        // Only where a one-frame call reads its frame from host memory (small frames, mapped
        // memory), and unless switched off (for comparisons).
        self.single.as_ref()?.input?;
        if env_is_one("SONOTRACK_NO_MAPPED_FRAMES") {
            return None;
        }
        let gpu = self.gpu.clone();
        let n_frame = self.params.channels * self.params.frame_len;
        // The stream the frames' samples are sent ahead on (None: nothing is sent ahead).
        let uploads = if env_is_one("SONOTRACK_NO_SEND_AHEAD") {
            None
        } else {
            gpu.ctx
                .new_stream()
                .map_err(|e| log::debug!("frames are not sent ahead (no upload stream: {e:?})"))
                .ok()
        };
        Some(Arc::new(move |n: usize| {
            if n != n_frame {
                return None;
            }
            let made = gpu
                .ctx
                .bind_to_thread()
                .map_err(err("making the CUDA context current"))
                .and_then(|()| {
                    let buf = Pinned::<f32>::mapped(n)?;
                    let dev = buf.device_ptr()?;
                    let ahead = uploads.as_ref().and_then(|st| {
                        let made = st
                            .alloc_zeros::<f32>(n)
                            .and_then(|copy| Ok((copy, gpu.ctx.new_event(None)?)));
                        match made {
                            Ok((copy, done)) => Some(Ahead {
                                copy,
                                stream: st.clone(),
                                done,
                                sent: 0,
                            }),
                            Err(e) => {
                                log::debug!("a frame not sent ahead (no device copy: {e:?})");
                                None
                            }
                        }
                    });
                    Ok(MappedFrame {
                        buf,
                        dev,
                        ahead,
                        gpu: gpu.clone(),
                    })
                });
            match made {
                Ok(m) => Some(Samples::mapped(Box::new(m))),
                Err(e) => {
                    log::debug!("a frame on the heap instead of in mapped memory: {e}");
                    None
                }
            }
        }))
    }

    fn prepare_batches(&mut self, sizes: &[usize]) -> Result<(), BackendError> {
        let largest = self.batch;
        for &b in sizes.iter().filter(|&&b| b <= largest) {
            self.prepare(b, false)?;
        }
        Ok(())
    }
    fn preferred_batch(&self) -> usize {
        self.batch
    }

    fn set_device_timing(&mut self, on: bool) {
        self.timer.set(on);
    }

    fn last_device_time_s(&self) -> Option<f64> {
        self.last_s
    }

    fn bytes_per_call(&self) -> Option<u64> {
        Some(self.last_bytes)
    }
}

impl Drop for CudaCorrelator {
    fn drop(&mut self) {
        // A one-frame call returns when its peaks are in, perhaps before its stream has
        // finished; so does a started call that was never collected.
        drain_before_drop(&self.stream, "the GCC kernels");
        // Graphs that use the plans go first.
        self.graphs.clear();
        self.frame_graphs.clear();
        for (_, p) in self.plans.drain() {
            // SAFETY: each plan was created by plan_many and is destroyed once.
            unsafe {
                let _ = fft::destroy(p.r2c);
                let _ = fft::destroy(p.c2r);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    /// The kernels' constants agree with the host's.
    #[test]
    fn kernel_constants_match_the_host() {
        for want in [
            format!("#define GCC_CROSS_BLOCK {}", super::GCC_CROSS_BLOCK),
            format!("#define MAX_CANDIDATES {}", crate::dsp::gcc::MAX_CANDIDATES),
            format!("#define MAX_PEAKS {}", crate::dsp::gcc::MAX_PEAKS),
            format!("#define PEAK_SHARED {}", super::PEAK_SHARED),
            format!("#define PEAK_THREADS {}", super::PEAK_THREADS),
            format!("#define PEAK_THREADS_MAX {}", super::PEAK_THREADS_MAX),
            format!(
                "#define PEAK_HALF {}",
                crate::dsp::gcc::PEAK_INTERP_HALF_WIDTH
            ),
            format!("#define PEAK_GRID {}", crate::dsp::gcc::PEAK_GRID),
        ] {
            assert!(super::super::programs::GCC.source.contains(&want), "{want}");
        }
    }

    /// Batches split into parts that cover every frame once, in order, as many as measured
    /// best on the H200 for the sizes measured.
    #[test]
    fn parts_cover_the_batch() {
        for frame_bytes in [4 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20] {
            for b in 1..70 {
                let p: Vec<_> = super::parts(b, frame_bytes).collect();
                assert!((1..=super::MAX_PARTS).contains(&p.len()));
                assert!(p.len() == 1 || b / p.len() >= super::MIN_PART_FRAMES);
                let mut next = 0;
                for (f0, n) in p {
                    assert_eq!(f0, next);
                    assert!(n > 0);
                    next += n;
                }
                assert_eq!(next, b);
            }
        }
        // 16 channels x 4096 samples of f32: 256 KiB a frame; 4 channels: 64 KiB.
        assert_eq!(super::n_parts(16, 256 << 10), 2);
        assert_eq!(super::n_parts(64, 256 << 10), 4);
        assert_eq!(super::n_parts(64, 64 << 10), 2);
        assert_eq!(super::n_parts(1, 256 << 10), 1);
    }

    /// Calls run as powers of two up to the batch, never fewer frames than they carry.
    #[test]
    fn run_sizes_are_few() {
        for batch in [1, 16, 64, 100] {
            let mut sizes = std::collections::BTreeSet::new();
            for b in 1..=batch {
                let r = super::run_size(b, batch);
                assert!(r >= b && r <= batch);
                sizes.insert(r);
            }
            assert!(sizes.len() <= 1 + batch.ilog2() as usize + 1, "{sizes:?}");
        }
        assert_eq!(super::run_size(1, 64), 1);
        assert_eq!(super::run_size(19, 64), 32);
        assert_eq!(super::run_size(64, 64), 64);
        assert_eq!(super::run_size(70, 100), 100);
    }

    /// The largest curve searched in shared memory fits a launch's default 48 KiB with the
    /// kernel's static shared memory (about 1.4 KiB).
    #[test]
    fn peak_search_fits_in_shared_memory() {
        let most = super::peaks_shared_bytes((super::PEAK_SHARED - 1) / 2);
        // gcc_peaks's static shared memory is 1,440 bytes (sm_90, ptxas -v).
        assert!(most > 0 && most as usize + 4096 <= 48 * 1024, "{most}");
        assert_eq!(super::peaks_shared_bytes(super::PEAK_SHARED / 2), 0);
        // The few pairs' search takes curves of up to about 1,300 lags each side (arrays of
        // 20 m at 96 kHz in water), with the most peaks, and leaves longer ones to the warp's.
        let few = super::peaks_few_bytes(1300, crate::dsp::gcc::MAX_PEAKS);
        assert!(
            few.is_some_and(|b| b as usize <= super::PEAK_FEW_SHARED_MAX),
            "{few:?}"
        );
        assert!(super::peaks_few_bytes((super::PEAK_SHARED - 1) / 2, 4).is_none());
        assert!(super::peaks_few_bytes(super::PEAK_SHARED / 2, 4).is_none());
    }
}
