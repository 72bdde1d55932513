//! The parallel-in-time RTS smoother on the GPU (`kernels/smooth.cu`): the elements of any
//! number of tracks, end to end in one f64 buffer on the device, scanned in tiles whose totals
//! are scanned the same way, recursively (depth log_TILE of the length). The elements are built
//! on the host ([`crate::track::smooth::scan::elements`], in parallel over the tracks and
//! steps); the scan is the sequential part this moves to the GPU.

use std::sync::Arc;

use cudarc::driver::{CudaFunction, CudaSlice, CudaStream, LaunchConfig, PushKernelArg};
use nalgebra::{DMatrix, DVector};

use super::{Gpu, err};
use crate::error::BackendError;
use crate::track::smooth::scan::{Element, TILE};

/// Threads per block of the two scan kernels (one thread a tile).
const BLOCK: u32 = 128;

/// Doubles an element of an n-state track takes.
pub fn element_len(n: usize) -> usize {
    2 * n * n + n
}

/// The scan's two kernels and the stream they run on.
pub struct ScanKernels {
    pub stream: Arc<CudaStream>,
    totals: CudaFunction,
    apply: CudaFunction,
}

impl ScanKernels {
    pub fn new(gpu: Arc<Gpu>) -> Result<Self, BackendError> {
        Ok(Self {
            totals: gpu.function("sm_tile_totals")?,
            apply: gpu.function("sm_tile_apply")?,
            stream: gpu
                .stream
                .fork()
                .map_err(err("creating the smoother's stream"))?,
        })
    }

    /// Replace the `count` elements of n states in `buf` by their suffixes s_k = e_k • … •
    /// e_last, in place; queued on the GPU's stream.
    pub fn suffix_scan(
        &self,
        n: usize,
        buf: &mut CudaSlice<f64>,
        count: usize,
    ) -> Result<(), BackendError> {
        if count == 0 {
            return Ok(());
        }
        if !(1..=6).contains(&n) {
            return Err(BackendError::new(
                "cuda",
                format!("the GPU smoother takes 1 to 6 states, not {n}"),
            ));
        }
        let s = self.stream.clone();
        let tiles = count.div_ceil(TILE);
        let cfg = LaunchConfig {
            grid_dim: ((tiles as u32).div_ceil(BLOCK), 1, 1),
            block_dim: (BLOCK, 1, 1),
            shared_mem_bytes: 0,
        };
        let (ni, cnt, tile) = (n as i32, count as u64, TILE as u64);
        if tiles == 1 {
            let none: u64 = 0;
            let mut b = s.launch_builder(&self.apply);
            b.arg(&mut *buf).arg(&ni).arg(&cnt).arg(&tile).arg(&none);
            // SAFETY: sm_tile_apply(el, n, count, tile, suffixes): `buf` holds `count` elements
            // of 2n² + n doubles; a null suffix pointer means no carry.
            unsafe { b.launch(cfg) }.map_err(err("sm_tile_apply"))?;
            return Ok(());
        }
        let mut totals = s
            .alloc_zeros::<f64>(tiles * element_len(n))
            .map_err(err("allocating the tile totals"))?;
        let mut b = s.launch_builder(&self.totals);
        b.arg(&*buf).arg(&ni).arg(&cnt).arg(&tile).arg(&mut totals);
        // SAFETY: sm_tile_totals(el, n, count, tile, totals): `totals` holds one element per
        // tile.
        unsafe { b.launch(cfg) }.map_err(err("sm_tile_totals"))?;
        self.suffix_scan(n, &mut totals, tiles)?;
        let mut b = s.launch_builder(&self.apply);
        b.arg(&mut *buf).arg(&ni).arg(&cnt).arg(&tile).arg(&totals);
        // SAFETY: as above; `totals` now holds the inclusive suffixes of the tiles' totals, and
        // stays alive until the stream has run this launch (freed after it, in stream order).
        unsafe { b.launch(cfg) }.map_err(err("sm_tile_apply"))?;
        Ok(())
    }
}

/// Pack elements of n states into the kernels' layout (E, g, L; L zero when skipped).
pub fn pack(elems: &[Element], n: usize, out: &mut Vec<f64>) {
    for el in elems {
        out.extend((0..n * n).map(|i| el.e[(i / n, i % n)]));
        out.extend(el.g.iter().copied());
        match &el.l {
            Some(l) => out.extend((0..n * n).map(|i| l[(i / n, i % n)])),
            None => out.extend(std::iter::repeat_n(0.0, n * n)),
        }
    }
}

/// Element `k`'s smoothed mean (its g) and covariance (its L) from the kernels' layout.
pub fn unpack(buf: &[f64], n: usize, k: usize) -> (DVector<f64>, DMatrix<f64>) {
    let base = k * element_len(n);
    let g = DVector::from_column_slice(&buf[base + n * n..base + n * n + n]);
    let l = DMatrix::from_row_slice(n, n, &buf[base + n * n + n..base + element_len(n)]);
    (g, l)
}
