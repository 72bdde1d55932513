//! The CUDA backend (cargo feature `cuda`, on by default; it needs no CUDA to build). Without the
//! feature, or on a machine without the NVIDIA libraries, this module keeps the same API and
//! every entry point says why no GPU backend is available, so callers carry no `cfg`.

#[cfg(feature = "cuda")]
pub mod cuda;

use crate::backend::Backends;
use crate::config::Config;
use crate::dsp::gcc::{Correlator, GccParams};
use crate::error::{BackendError, Error, Result};
use crate::track::{FilterParams, ParticleFilter};

/// Frames transformed per call when the pipeline batches (replay).
pub const REPLAY_BATCH: usize = 64;

/// A description of the GPU, or why there is none.
pub fn available() -> std::result::Result<String, String> {
    #[cfg(feature = "cuda")]
    {
        cuda::gpu().map(|g| g.describe())
    }
    #[cfg(not(feature = "cuda"))]
    {
        Err("built without the `cuda` feature".into())
    }
}

fn unavailable(why: String) -> Error {
    Error::Backend(BackendError::new("cuda", why))
}

/// The reason inside an error, without the "cuda backend:" prefix callers add themselves.
fn reason(e: Error) -> String {
    match e {
        Error::Backend(b) => b.what,
        other => other.to_string(),
    }
}

/// Open the CUDA backend for a configuration; the error says why it cannot be used.
pub fn open(cfg: &Config) -> std::result::Result<Backends, String> {
    let correlator = correlator(GccParams::from_config(cfg), REPLAY_BATCH).map_err(reason)?;
    let filter = particle_filter(FilterParams::from_config(cfg)).map_err(reason)?;
    Ok(Backends {
        correlator,
        filter,
        reason: available().unwrap_or_default(),
    })
}

/// A CUDA correlator for up to `batch` frames per call.
pub fn correlator(params: GccParams, batch: usize) -> Result<Box<dyn Correlator>> {
    #[cfg(feature = "cuda")]
    {
        let gpu = cuda::gpu().map_err(unavailable)?;
        Ok(Box::new(cuda::gcc::CudaCorrelator::new(
            gpu, params, batch,
        )?))
    }
    #[cfg(not(feature = "cuda"))]
    {
        let _ = (params, batch);
        Err(unavailable(available().err().unwrap_or_default()))
    }
}

/// A CUDA particle-filter bank.
pub fn particle_filter(params: FilterParams) -> Result<Box<dyn ParticleFilter>> {
    #[cfg(feature = "cuda")]
    {
        let gpu = cuda::gpu().map_err(unavailable)?;
        Ok(Box::new(cuda::pf::CudaParticleFilter::new(gpu, params)?))
    }
    #[cfg(not(feature = "cuda"))]
    {
        let _ = params;
        Err(unavailable(available().err().unwrap_or_default()))
    }
}

/// Host-to-device copy bandwidth from page-locked memory (GB/s) for copies of `bytes`.
pub fn upload_bandwidth_gb_s(bytes: usize) -> Result<f64> {
    #[cfg(feature = "cuda")]
    {
        cuda::upload_bandwidth_gb_s(bytes).map_err(Error::Backend)
    }
    #[cfg(not(feature = "cuda"))]
    {
        let _ = bytes;
        Err(unavailable(available().err().unwrap_or_default()))
    }
}

/// The GPU's specification, for projecting its figures to other GPUs.
pub fn device_spec() -> Result<crate::project::GpuSpec> {
    #[cfg(feature = "cuda")]
    {
        let g = cuda::gpu().map_err(unavailable)?;
        let (major, minor) = g.compute_capability;
        Ok(crate::project::GpuSpec {
            name: g.name.clone(),
            sms: g.multiprocessors.max(0) as u32,
            lanes_per_sm: crate::project::fp32_lanes_per_sm(major, minor),
            clock_ghz: f64::from(g.clock_khz) / 1e6,
            // Double data rate: two transfers per clock over the bus.
            memory_gb_s: 2.0 * f64::from(g.memory_clock_khz) * 1e3 * f64::from(g.memory_bus_bits)
                / 8.0
                / 1e9,
        })
    }
    #[cfg(not(feature = "cuda"))]
    {
        Err(unavailable(available().err().unwrap_or_default()))
    }
}

/// Device-to-device copy bandwidth (bytes read plus written, GB/s), the ceiling memory-bound
/// kernels are compared with.
pub fn copy_bandwidth_gb_s() -> Result<f64> {
    #[cfg(feature = "cuda")]
    {
        cuda::copy_bandwidth_gb_s().map_err(Error::Backend)
    }
    #[cfg(not(feature = "cuda"))]
    {
        Err(unavailable(available().err().unwrap_or_default()))
    }
}
