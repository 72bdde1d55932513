//! The GPU backend's entry points with the `cuda` feature: each opens the GPU (once per process)
//! and says why it cannot be used when it cannot.

use crate::dsp::gcc::{Correlator, GccParams};

use crate::error::{BackendError, Error, Result};
use crate::gpu::cuda;
use crate::gpu::spec::{GpuSpec, fp32_lanes_per_sm};
use crate::track::filter::bernoulli::bank::{
    BankError, BankModel as CurveBankModel, BankSizes, CurveBank,
};
use crate::track::filter::bernoulli::existence::Chain;
use crate::track::{FilterBank, FilterParams};

fn unavailable(why: String) -> Error {
    Error::Backend(BackendError::new("cuda", why))
}

/// A description of the GPU, or why there is none.
pub fn available() -> std::result::Result<String, String> {
    cuda::gpu().map(|g| g.describe())
}

/// A CUDA correlator for up to `batch` frames per call.
pub fn correlator(params: GccParams, batch: usize) -> Result<Box<dyn Correlator>> {
    let gpu = cuda::gpu().map_err(unavailable)?;
    Ok(Box::new(cuda::gcc::CudaCorrelator::new(
        gpu, params, batch,
    )?))
}

/// A CUDA particle-filter bank.
pub fn particle_filter(params: FilterParams) -> Result<Box<dyn FilterBank>> {
    let gpu = cuda::gpu().map_err(unavailable)?;
    Ok(Box::new(cuda::pf::CudaParticleFilter::new(gpu, params)?))
}

/// Host-to-device copy bandwidth from page-locked memory (GB/s) for copies of `bytes`.
pub fn upload_bandwidth_gb_s(bytes: usize) -> Result<f64> {
    cuda::upload_bandwidth_gb_s(bytes).map_err(Error::Backend)
}

/// The GPU's specification, for projecting its figures to other GPUs.
pub fn device_spec() -> Result<GpuSpec> {
    let g = cuda::gpu().map_err(unavailable)?;
    let (major, minor) = g.compute_capability;
    Ok(GpuSpec {
        name: g.name.clone(),
        sms: g.multiprocessors.max(0) as u32,
        lanes_per_sm: fp32_lanes_per_sm(major, minor),
        clock_ghz: f64::from(g.clock_khz) / 1e6,
        // Double data rate: two transfers per clock over the bus.
        memory_gb_s: 2.0 * f64::from(g.memory_clock_khz) * 1e3 * f64::from(g.memory_bus_bits)
            / 8.0
            / 1e9,
    })
}

/// Device-to-device copy bandwidth (bytes read plus written, GB/s), the ceiling memory-bound
/// kernels are compared with.
pub fn copy_bandwidth_gb_s() -> Result<f64> {
    cuda::copy_bandwidth_gb_s().map_err(Error::Backend)
}

/// The curves bank of track-before-detect on the GPU (`kernels/tbd.cu`): `sizes` tracks of
/// `model`, each at P(exists) = `p0`.
pub fn curve_bank(
    model: &CurveBankModel,
    sizes: BankSizes,
    chain: Chain,
    seed: u64,
    p0: f64,
) -> Result<Box<dyn CurveBank + Send>> {
    let gpu = cuda::gpu().map_err(unavailable)?;
    let bank =
        cuda::tbd::CudaCurveBank::new(gpu, model, sizes, chain, seed, p0).map_err(bank_error)?;
    Ok(Box::new(bank))
}

fn bank_error(e: BankError) -> Error {
    Error::Backend(BackendError::new("cuda", e.to_string()))
}
