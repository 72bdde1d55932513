//! The GPU backend's entry points without the `cuda` feature: the same API as the enabled one,
//! every call saying that this build has no GPU backend.

use crate::dsp::gcc::{Correlator, GccParams};
use crate::error::{BackendError, Error, Result};
use crate::gpu::spec::GpuSpec;
use crate::track::filter::bernoulli::bank::{BankModel as CurveBankModel, BankSizes, CurveBank};
use crate::track::filter::bernoulli::existence::Chain;
use crate::track::{FilterBank, FilterParams};

const WHY: &str = "built without the `cuda` feature";

fn not_compiled() -> Error {
    Error::Backend(BackendError::new("cuda", WHY))
}

/// Why there is no GPU: this build has none.
pub fn available() -> std::result::Result<String, String> {
    Err(WHY.into())
}

pub fn correlator(_params: GccParams, _batch: usize) -> Result<Box<dyn Correlator>> {
    Err(not_compiled())
}

pub fn particle_filter(_params: FilterParams) -> Result<Box<dyn FilterBank>> {
    Err(not_compiled())
}

pub fn upload_bandwidth_gb_s(_bytes: usize) -> Result<f64> {
    Err(not_compiled())
}

pub fn device_spec() -> Result<GpuSpec> {
    Err(not_compiled())
}

pub fn copy_bandwidth_gb_s() -> Result<f64> {
    Err(not_compiled())
}

pub fn curve_bank(
    _model: &CurveBankModel,
    _sizes: BankSizes,
    _chain: Chain,
    _seed: u64,
    _p0: f64,
) -> Result<Box<dyn CurveBank + Send>> {
    Err(not_compiled())
}
