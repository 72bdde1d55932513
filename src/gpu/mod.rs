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
    available, copy_bandwidth_gb_s, correlator, curve_bank, curve_bank_lobes, curve_bank_time,
    device_spec, imm_bank, imm_kernel_time, kalman_bank, kalman_crossover, kalman_kernel_time,
    mfa_pair_costs, particle_filter, smooth_scan_time, smooth_tracks, upload_bandwidth_gb_s,
};
#[cfg(feature = "cuda")]
pub use enabled::{
    available, copy_bandwidth_gb_s, correlator, curve_bank, curve_bank_lobes, curve_bank_time,
    device_spec, imm_bank, imm_kernel_time, kalman_bank, kalman_crossover, kalman_kernel_time,
    mfa_pair_costs, particle_filter, smooth_scan_time, smooth_tracks, upload_bandwidth_gb_s,
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

/// Threads per block of the Kalman bank kernel unless set: the fastest of `sonotrack bench
/// --what kf`'s sweep on the H200 (BENCHMARKS.md, "Batched Kalman filter bank").
pub const KF_BLOCK: u32 = 128;

/// Frames transformed per call when the pipeline batches (replay).
pub const REPLAY_BATCH: usize = 64;

/// A Kalman bank on the backend the measured crossover picks for its size: the GPU from the
/// crossover on, the CPU below it or where no GPU can be used.
pub fn kalman_bank_auto(
    model: &crate::track::kalman::bank::BankModel,
    filters: usize,
    x0: &[f32],
    p0: &[f32],
) -> crate::error::Result<Box<dyn crate::track::kalman::bank::FilterBank>> {
    use crate::track::kalman::bank::KalmanBank;
    if kalman_crossover(model).is_ok_and(|c| c.gpu_for(filters)) {
        return kalman_bank(model, filters, x0, p0);
    }
    let bank = KalmanBank::new(model.clone(), filters, x0, p0).map_err(|e| {
        crate::error::Error::Backend(crate::error::BackendError::new("cpu", e.to_string()))
    })?;
    Ok(Box::new(bank))
}
