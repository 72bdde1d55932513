//! Page-locked host buffers and captured CUDA graphs, the two things that take the host out of
//! the per-frame path: a pinned buffer can be the end of an asynchronous copy that a graph
//! replays, and a graph replays a whole stage sequence (copies, kernels, cuFFT) with one launch.

use std::marker::PhantomData;

use bytemuck::Pod;
use cudarc::driver::sys::{CUgraphInstantiate_flags, CUstreamCaptureMode};
use cudarc::driver::{CudaGraph, CudaStream, result};

use super::err;
use crate::error::BackendError;

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
        let len = len.max(1);
        let bytes = len * std::mem::size_of::<T>();
        // SAFETY: cuMemHostAlloc with no flags returns `bytes` of page-locked memory (page
        // aligned, so aligned for any Pod type) or an error; it is zeroed before any read.
        let ptr = unsafe { result::malloc_host(bytes, 0) }
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

    pub fn is_empty(&self) -> bool {
        self.len == 0
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
    if std::env::var_os("SONOTRACK_NO_GRAPHS").is_some_and(|v| v == "1") {
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
