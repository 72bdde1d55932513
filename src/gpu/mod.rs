//! The CUDA backend (cargo feature `cuda`, on by default; it needs no CUDA to build). With the
//! feature, [`enabled`] opens the GPU through [`cuda`]; without it, [`dummy`] keeps the same API
//! and every entry point says why no GPU backend is available, so callers carry no `cfg`. On a
//! machine without the NVIDIA libraries the enabled API says so the same way.

#[cfg(feature = "cuda")]
pub mod cuda;
#[cfg(not(feature = "cuda"))]
mod dummy;
#[cfg(feature = "cuda")]
mod enabled;
pub mod spec;

use serde::{Deserialize, Serialize};

#[cfg(not(feature = "cuda"))]
pub use dummy::{
    available, copy_bandwidth_gb_s, correlator, curve_bank, device_spec, particle_filter,
    upload_bandwidth_gb_s,
};
#[cfg(feature = "cuda")]
pub use enabled::{
    available, copy_bandwidth_gb_s, correlator, curve_bank, device_spec, particle_filter,
    upload_bandwidth_gb_s,
};

/// Which compute backend to use (`tracker.backend`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BackendChoice {
    /// CUDA when the driver, NVRTC and cuFFT load and the kernels compile; else the CPU.
    #[default]
    Auto,
    Cpu,
    Cuda,
}

/// Frames transformed per call when the pipeline batches (replay).
pub const REPLAY_BATCH: usize = 64;
