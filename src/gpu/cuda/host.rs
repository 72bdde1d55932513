//! Page-locked host buffers and captured CUDA graphs, the two things that take the host out of
//! the per-frame path: a pinned buffer can be the end of an asynchronous copy that a graph
//! replays, and a graph replays a whole stage sequence (copies, kernels, cuFFT) with one launch.

use std::marker::PhantomData;

use bytemuck::Pod;
use cudarc::driver::sys::{CUgraphInstantiate_flags, CUstreamCaptureMode};
use cudarc::driver::{CudaContext, CudaEvent, CudaGraph, CudaStream, result};

use super::{env_is_one, err};
use crate::error::BackendError;

/// Copy `src` into `dst` (the same length) for a GPU to read next: on x86_64 with
/// non-temporal stores, so that the data goes to memory instead of staying in this core's
/// cache, where the GPU's reads over the bus would have to fetch it from (measured on the H200
/// host: batches of 64 16-channel frames copied by 16 threads with plain stores took the
/// batch's device time from 6.9 to 10.5 us per frame). Elsewhere (the boards' shared memory) a
/// plain copy.
pub fn copy_for_device(dst: &mut [f32], src: &[f32]) {
    assert_eq!(dst.len(), src.len(), "copy_for_device: lengths differ");
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_loadu_ps, _mm_sfence, _mm_stream_ps};
        // Elements before the first 16-byte boundary of dst, and then whole 4-float vectors.
        let head = dst.as_ptr().align_offset(16).min(dst.len());
        let body = (dst.len() - head) / 4 * 4;
        dst[..head].copy_from_slice(&src[..head]);
        // SAFETY: SSE2 is part of every x86_64 CPU. dst[head..head + body] starts on a 16-byte
        // boundary (align_offset), as _mm_stream_ps needs, and every access is inside both
        // slices (i + 4 <= body); the loads are unaligned loads. The fence orders the streamed
        // stores before anything this thread does next (the caller then hands the buffer to
        // the GPU).
        unsafe {
            let d = dst.as_mut_ptr().add(head);
            let s = src.as_ptr().add(head);
            let mut i = 0;
            while i < body {
                _mm_stream_ps(d.add(i), _mm_loadu_ps(s.add(i)));
                i += 4;
            }
            _mm_sfence();
        }
        dst[head + body..].copy_from_slice(&src[head + body..]);
    }
    #[cfg(not(target_arch = "x86_64"))]
    dst.copy_from_slice(src);
}

/// Device time of the work enqueued between `start` and `stop`, by two events. Off until `set`
/// turns it on: recording and reading the events costs the host a few microseconds a call, so
/// the backends time on the device only when the bench asks them to.
pub struct DeviceTimer {
    start: CudaEvent,
    end: CudaEvent,
    on: bool,
}

impl DeviceTimer {
    pub fn new(ctx: &std::sync::Arc<CudaContext>, on: bool) -> Result<Self, BackendError> {
        let event = || {
            ctx.new_event(Some(cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT))
                .map_err(err("creating an event"))
        };
        Ok(Self {
            start: event()?,
            end: event()?,
            on,
        })
    }

    pub fn set(&mut self, on: bool) {
        self.on = on;
    }

    pub fn is_on(&self) -> bool {
        self.on
    }

    /// Mark the start on `stream` (when on).
    pub fn start(&self, stream: &CudaStream) -> Result<(), BackendError> {
        if self.on {
            self.start
                .record(stream)
                .map_err(err("recording an event"))?;
        }
        Ok(())
    }

    /// Mark the end on `stream` (when on); a later `stop` moves the end.
    pub fn stop(&self, stream: &CudaStream) -> Result<(), BackendError> {
        if self.on {
            self.end.record(stream).map_err(err("recording an event"))?;
        }
        Ok(())
    }

    /// Seconds from the start to the end mark, once the stream has passed both; None when off.
    pub fn elapsed_s(&self) -> Option<f64> {
        if !self.on {
            return None;
        }
        self.start
            .elapsed_ms(&self.end)
            .ok()
            .map(|ms| f64::from(ms) * 1e-3)
    }
}

/// A page-locked host buffer of `len` values of `T` (cached, not write-combined, because the host
/// reads results from it), zeroed at allocation.
pub struct Pinned<T: Pod> {
    ptr: *mut T,
    len: usize,
    _t: PhantomData<T>,
}

// SAFETY: the buffer is plain memory owned by this value; moving it to another thread moves the
// ownership. It is not shared (no Sync), and every access goes through &self / &mut self.
unsafe impl<T: Pod> Send for Pinned<T> {}

impl<T: Pod> Pinned<T> {
    pub fn new(len: usize) -> Result<Self, BackendError> {
        Self::with_flags(len, 0)
    }

    /// Page-locked memory that kernels can also write directly (mapped into the device's
    /// address space: see [`Self::device_ptr`]).
    pub fn mapped(len: usize) -> Result<Self, BackendError> {
        Self::with_flags(len, cudarc::driver::sys::CU_MEMHOSTALLOC_DEVICEMAP)
    }

    fn with_flags(len: usize, flags: u32) -> Result<Self, BackendError> {
        let len = len.max(1);
        let bytes = len * std::mem::size_of::<T>();
        // SAFETY: cuMemHostAlloc returns `bytes` of page-locked memory (page aligned, so
        // aligned for any Pod type) or an error; it is zeroed before any read.
        let ptr = unsafe { result::malloc_host(bytes, flags) }
            .map_err(err("allocating page-locked host memory"))? as *mut T;
        if ptr.is_null() {
            return Err(BackendError::new(
                "cuda",
                "allocating page-locked host memory returned null",
            ));
        }
        // SAFETY: `ptr` points to `bytes` writable bytes; all-zero is a valid Pod value.
        unsafe { std::ptr::write_bytes(ptr.cast::<u8>(), 0, bytes) };
        Ok(Self {
            ptr,
            len,
            _t: PhantomData,
        })
    }

    pub fn len(&self) -> usize {
        self.len
    }

    /// The device's address of memory made by [`Self::mapped`] (an error for other memory).
    pub fn device_ptr(&self) -> Result<u64, BackendError> {
        let mut d = 0u64;
        // SAFETY: `ptr` came from cuMemHostAlloc; the call only writes the address into `d`.
        unsafe { cudarc::driver::sys::cuMemHostGetDevicePointer_v2(&mut d, self.ptr.cast(), 0) }
            .result()
            .map_err(err("mapping page-locked memory into the device"))?;
        Ok(d)
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The start of the buffer, for reads that must not hold a reference while the device
    /// may write (polling a flag a kernel sets).
    pub fn as_ptr(&self) -> *const T {
        self.ptr
    }

    /// The host values. Callers synchronise the stream before reading what a copy wrote.
    pub fn as_slice(&self) -> &[T] {
        // SAFETY: `ptr` holds `len` initialised values for the life of `self`.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }

    pub fn as_mut_slice(&mut self) -> &mut [T] {
        // SAFETY: as above, and &mut self makes this the only view.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }

    /// Enqueue a copy of the first `len` values to device address `dst`.
    ///
    /// # Safety
    /// `dst` must hold at least `len` values of `T`, and the host values must not change until
    /// the stream has passed the copy.
    pub unsafe fn copy_to_device(
        &self,
        dst: u64,
        len: usize,
        stream: &CudaStream,
    ) -> Result<(), BackendError> {
        // SAFETY: the caller's contract.
        unsafe { self.copy_range_to_device(0, dst, len, stream) }
    }

    /// Enqueue a copy of values `from..from + len` to device address `dst`.
    ///
    /// # Safety
    /// `dst` must hold at least `len` values of `T`, and the host values must not change until
    /// the stream has passed the copy.
    pub unsafe fn copy_range_to_device(
        &self,
        from: usize,
        dst: u64,
        len: usize,
        stream: &CudaStream,
    ) -> Result<(), BackendError> {
        let from = from.min(self.len);
        let len = len.min(self.len - from);
        // SAFETY: the caller's contract; the source is page-locked, so the copy is asynchronous
        // (and may be captured into a graph).
        unsafe {
            result::memcpy_htod_async(dst, &self.as_slice()[from..from + len], stream.cu_stream())
        }
        .map_err(err("copying to the device"))
    }

    /// Enqueue a copy of columns `from..to` of the buffer seen as `rows` rows of `row_len`
    /// values, into the same places of a buffer of the same shape at device address `dst` (one
    /// strided copy: a frame's channels are its rows).
    ///
    /// # Safety
    /// `dst` must hold `rows * row_len` values of `T`, and the host values copied must not
    /// change until the stream has passed the copy.
    pub unsafe fn copy_columns_to_device(
        &self,
        row_len: usize,
        rows: usize,
        from: usize,
        to: usize,
        dst: u64,
        stream: &CudaStream,
    ) -> Result<(), BackendError> {
        use cudarc::driver::sys::{CUDA_MEMCPY2D, CUmemorytype};
        if rows * row_len > self.len || from > to || to > row_len {
            return Err(BackendError::new(
                "cuda",
                format!(
                    "a copy of columns {from}..{to} of {rows} x {row_len} values does not fit the buffer of {}",
                    self.len
                ),
            ));
        }
        if from == to || rows == 0 {
            return Ok(());
        }
        let size = std::mem::size_of::<T>();
        let c = CUDA_MEMCPY2D {
            srcXInBytes: from * size,
            srcY: 0,
            srcMemoryType: CUmemorytype::CU_MEMORYTYPE_HOST,
            srcHost: self.ptr.cast(),
            srcDevice: 0,
            srcArray: std::ptr::null_mut(),
            srcPitch: row_len * size,
            dstXInBytes: from * size,
            dstY: 0,
            dstMemoryType: CUmemorytype::CU_MEMORYTYPE_DEVICE,
            dstHost: std::ptr::null_mut(),
            dstDevice: dst,
            dstArray: std::ptr::null_mut(),
            dstPitch: row_len * size,
            WidthInBytes: (to - from) * size,
            Height: rows,
        };
        // SAFETY: the source rows lie in this page-locked buffer (checked above), the
        // destination's by the caller's contract; the copy is asynchronous on `stream`.
        unsafe { cudarc::driver::sys::cuMemcpy2DAsync_v2(&c, stream.cu_stream()) }
            .result()
            .map_err(err("copying columns to the device"))
    }

    /// Enqueue a copy of `len` values from device address `src` into the first `len` values.
    ///
    /// # Safety
    /// `src` must hold at least `len` values of `T`; the host values are only read after the
    /// stream has been synchronised.
    pub unsafe fn copy_from_device(
        &mut self,
        src: u64,
        len: usize,
        stream: &CudaStream,
    ) -> Result<(), BackendError> {
        let len = len.min(self.len);
        let cu = stream.cu_stream();
        // SAFETY: the caller's contract; page-locked destination as above.
        unsafe { result::memcpy_dtoh_async(&mut self.as_mut_slice()[..len], src, cu) }
            .map_err(err("copying from the device"))
    }
}

impl<T: Pod> Drop for Pinned<T> {
    fn drop(&mut self) {
        // SAFETY: `ptr` came from cuMemHostAlloc and is freed once. Work that may still copy
        // into it was synchronised by its owner (every user synchronises before returning).
        unsafe {
            let _ = result::free_host(self.ptr.cast());
        }
    }
}

/// A captured, instantiated graph.
pub struct Graph(CudaGraph);

// SAFETY: a graph is only launched through &mut of the value that owns it (the correlator or
// the filter, each used by one thread at a time), which is the serialisation CUDA asks for.
unsafe impl Send for Graph {}

impl Graph {
    pub fn launch(&mut self) -> Result<(), BackendError> {
        self.0.launch().map_err(err("launching a CUDA graph"))
    }
}

/// Record what `enqueue` puts on `stream` into a graph. `Ok(None)` means the sequence cannot be
/// captured on this device or driver, or graphs are switched off with `SONOTRACK_NO_GRAPHS=1`
/// (the caller then enqueues it directly every time); an error from `enqueue` itself is
/// returned as is.
pub fn capture(
    stream: &std::sync::Arc<CudaStream>,
    enqueue: impl FnOnce() -> Result<(), BackendError>,
) -> Result<Option<Graph>, BackendError> {
    if env_is_one("SONOTRACK_NO_GRAPHS") {
        return Ok(None);
    }
    if let Err(e) = stream.begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL) {
        log::info!("CUDA graphs unavailable ({e:?}); launching stages one by one");
        return Ok(None);
    }
    let queued = enqueue();
    let ended = stream
        .end_capture(CUgraphInstantiate_flags::CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH);
    queued?;
    match ended {
        Ok(Some(g)) => Ok(Some(Graph(g))),
        Ok(None) => {
            log::info!("CUDA graph capture recorded nothing; launching stages one by one");
            Ok(None)
        }
        Err(e) => {
            log::info!("CUDA graph capture failed ({e:?}); launching stages one by one");
            Ok(None)
        }
    }
}

/// How long the host waits for a kernel's results before it gives the device up.
pub const WAIT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Whether `stream` has finished its work (without waiting); an error, naming `what` ran,
/// when the device reports one.
pub fn stream_done(stream: &CudaStream, what: &str) -> Result<bool, BackendError> {
    // SAFETY: a query of a live stream (the caller holds it).
    let r = unsafe { cudarc::driver::sys::cuStreamQuery(stream.cu_stream()) };
    match r {
        cudarc::driver::sys::CUresult::CUDA_SUCCESS => Ok(true),
        cudarc::driver::sys::CUresult::CUDA_ERROR_NOT_READY => Ok(false),
        e => Err(BackendError::new("cuda", format!("running {what}: {e:?}"))),
    }
}

/// Spin until `ready()` says the kernels on `stream` have written their results into mapped
/// host memory (each writes its results, fences system-wide and then a flag, which `ready`
/// reads), without waiting for the rest of the stream. A stream query every 64 spins turns a
/// device error, or a stream that finished without the flags, into an error, and WAIT_TIMEOUT
/// into one. The results are safe to read once this returns Ok.
pub fn wait_until(
    stream: &CudaStream,
    what: &str,
    ready: impl Fn() -> bool,
) -> Result<(), BackendError> {
    let start = std::time::Instant::now();
    let mut spins = 0u32;
    loop {
        if ready() {
            // The results were written before the flags.
            std::sync::atomic::fence(std::sync::atomic::Ordering::Acquire);
            return Ok(());
        }
        spins = spins.wrapping_add(1);
        if spins % 64 == 0 {
            if stream_done(stream, what)? {
                if ready() {
                    std::sync::atomic::fence(std::sync::atomic::Ordering::Acquire);
                    return Ok(());
                }
                return Err(BackendError::new(
                    "cuda",
                    format!("{what} finished without writing their results"),
                ));
            }
            if start.elapsed() > WAIT_TIMEOUT {
                return Err(BackendError::new(
                    "cuda",
                    format!("{what} did not finish within {} s", WAIT_TIMEOUT.as_secs()),
                ));
            }
        }
        std::hint::spin_loop();
    }
}

/// Wait, sleeping, for `stream` to finish before its buffers are freed, but at most
/// WAIT_TIMEOUT: a device that stopped answering must not hang the fallback to the CPU (the
/// call that found it out has already failed over). Logs when it gives up.
pub fn drain_before_drop(stream: &CudaStream, what: &str) {
    let start = std::time::Instant::now();
    while start.elapsed() < WAIT_TIMEOUT {
        if !matches!(stream_done(stream, what), Ok(false)) {
            return;
        }
        std::thread::sleep(std::time::Duration::from_micros(50));
    }
    log::warn!(
        "{what} did not finish within {} s; their buffers are freed regardless",
        WAIT_TIMEOUT.as_secs()
    );
}

#[cfg(test)]
mod tests {
    /// The streamed copy gives the plain copy's result at every alignment and length
    /// (head, vector body and tail), on fresh random data.
    #[test]
    fn copy_for_device_copies_exactly() {
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            f32::from_bits((seed as u32 & 0x807f_ffff) | 0x3f00_0000)
        };
        let src: Vec<f32> = (0..300).map(|_| next()).collect();
        let mut dst = vec![0.0f32; 304];
        for off in 0..4 {
            for len in [0, 1, 3, 4, 5, 17, 64, 255, 299] {
                dst.fill(-1.0);
                super::copy_for_device(&mut dst[off..off + len], &src[..len]);
                assert_eq!(
                    &dst[off..off + len],
                    &src[..len],
                    "offset {off}, length {len}"
                );
                assert!(dst[..off].iter().all(|&v| v == -1.0));
                assert!(dst[off + len..].iter().all(|&v| v == -1.0));
            }
        }
    }
}
