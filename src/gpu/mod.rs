//! The CUDA backend (cargo feature `cuda`). Without the feature this module keeps the same name
//! and API, and every entry point says why no GPU backend is available, so callers carry no
//! `cfg`.

use crate::backend::Backends;
use crate::config::Config;
use crate::dsp::gcc::{Correlator, GccParams};
use crate::error::{BackendError, Error, Result};
use crate::track::{FilterParams, ParticleFilter};

/// Why the GPU cannot be used, or a description of it.
pub fn available() -> std::result::Result<String, String> {
    if cfg!(feature = "cuda") {
        Err("the CUDA backend is not part of this build yet".into())
    } else {
        Err("built without the `cuda` feature".into())
    }
}

fn unavailable() -> Error {
    Error::Backend(BackendError::new(
        "cuda",
        available().err().unwrap_or_default(),
    ))
}

/// Open the CUDA backend for a configuration: (correlator, particle filter, description).
pub fn open(_cfg: &Config) -> std::result::Result<Backends, String> {
    Err(available().err().unwrap_or_default())
}

/// A CUDA correlator for `batch` frames per call.
pub fn correlator(_params: GccParams, _batch: usize) -> Result<Box<dyn Correlator>> {
    Err(unavailable())
}

/// A CUDA particle-filter bank.
pub fn particle_filter(_params: FilterParams) -> Result<Box<dyn ParticleFilter>> {
    Err(unavailable())
}
