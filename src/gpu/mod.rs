//! The CUDA backend (cargo feature `cuda`). Without the feature this module keeps the same name
//! and API, and `open` says why no GPU backend is available, so callers carry no `cfg`.

use crate::config::Config;
use crate::dsp::gcc::Correlator;
use crate::track::ParticleFilter;

/// Open the CUDA backend: (correlator, particle filter, description). The error says why not.
pub fn open(_cfg: &Config) -> Result<(Box<dyn Correlator>, Box<dyn ParticleFilter>, String), String> {
    if cfg!(feature = "cuda") {
        Err("the CUDA backend is not part of this build yet".into())
    } else {
        Err("built without the `cuda` feature".into())
    }
}
