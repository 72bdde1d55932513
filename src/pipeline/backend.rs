//! Choosing the compute backend once, at start-up, in this one place: the CUDA correlator and
//! filter bank when asked for and available, else their CPU twins, with the reason; and the
//! curves search's bank (`tracker.curves.search_on_gpu`).

use crate::config::{Config, FilterKind};
use crate::dsp::gcc::{Correlator, CpuCorrelator};
use crate::error::{BackendError, Error, Result};
use crate::gpu::{self, BackendChoice};
use crate::pipeline::overlap_batches;
use crate::track::FilterBank;
use crate::track::filter::imm::ImmFilter;
use crate::track::filter::particle::CpuParticleFilter;

/// The two halves of a backend.
pub struct Backends {
    pub correlator: Box<dyn Correlator>,
    pub filter: Box<dyn FilterBank>,
    /// Why this backend was chosen (logged once).
    pub reason: String,
}

/// The CPU correlator and filter bank of a configuration.
pub fn cpu(cfg: &Config) -> (Box<dyn Correlator>, Box<dyn FilterBank>) {
    (
        Box::new(CpuCorrelator::new(cfg.gcc_params())),
        cpu_filter(cfg),
    )
}

/// The configuration's filter on the CPU: the particle filters, or the IMM bank (which runs on
/// the CPU whatever the backend).
pub fn cpu_filter(cfg: &Config) -> Box<dyn FilterBank> {
    match cfg.tracker.filter {
        FilterKind::Particle => Box::new(CpuParticleFilter::new(cfg.filter_params())),
        FilterKind::Imm => Box::new(ImmFilter::new(cfg.filter_params())),
    }
}

/// The reason inside an error, without the "cuda backend:" prefix callers add themselves.
fn reason(e: Error) -> String {
    match e {
        Error::Backend(b) => b.what,
        other => other.to_string(),
    }
}

/// The CUDA backend for a configuration, made ready for the batch sizes a replay uses; the
/// error says why it cannot be used.
fn open_gpu(cfg: &Config) -> std::result::Result<Backends, String> {
    let mut correlator = gpu::correlator(cfg.gcc_params(), gpu::REPLAY_BATCH).map_err(reason)?;
    correlator
        .prepare_batches(&overlap_batches(gpu::REPLAY_BATCH))
        .map_err(|e| e.what)?;
    let filter = match cfg.tracker.filter {
        FilterKind::Particle => gpu::particle_filter(cfg.filter_params()).map_err(reason)?,
        FilterKind::Imm => cpu_filter(cfg),
    };
    Ok(Backends {
        correlator,
        filter,
        reason: gpu::available().unwrap_or_default(),
    })
}

/// `auto`: CUDA when it loads and the kernels compile, else the CPU with the reason.
/// `cuda`: CUDA or an error saying why not. `cpu`: the CPU.
pub fn select(cfg: &Config, choice: BackendChoice) -> Result<Backends> {
    match choice {
        BackendChoice::Cpu => {
            let (correlator, filter) = cpu(cfg);
            Ok(Backends {
                correlator,
                filter,
                reason: "backend = cpu".into(),
            })
        }
        BackendChoice::Cuda => open_gpu(cfg).map_err(|why| {
            Error::Backend(BackendError::new(
                "cuda",
                format!(
                    "{why}\n  fix: install the NVIDIA driver with libnvrtc and libcufft (CUDA 12.2 or newer), or use backend = \"auto\" or \"cpu\""
                ),
            ))
        }),
        BackendChoice::Auto => match open_gpu(cfg) {
            Ok(b) => Ok(b),
            Err(why) => {
                let (correlator, filter) = cpu(cfg);
                Ok(Backends {
                    correlator,
                    filter,
                    reason: format!("CPU backend (no GPU backend: {why})"),
                })
            }
        },
    }
}

/// `tracker.curves.search_on_gpu`: the curves search on the GPU's bank when the backend is
/// CUDA; it stays on the CPU (logged) otherwise or if the bank cannot be made.
pub fn gpu_search(t: &mut crate::track::manager::curves::CurvesStage, backend: &str, seed: u64) {
    if backend != "cuda" {
        log::warn!(
            "tracker.curves.search_on_gpu: the backend is {backend}, so the curves search runs on the CPU"
        );
        return;
    }
    let (model, sizes, chain) = t.search().bank_spec(t.model());
    match crate::gpu::curve_bank(&model, sizes, chain, seed, 0.0) {
        Ok(bank) => {
            log::info!(
                "curves: the search runs on the GPU ({} births and {} continuing particles a frame)",
                sizes.n_birth,
                sizes.n_cont
            );
            t.set_search_bank(bank, "the GPU");
        }
        Err(e) => log::warn!(
            "tracker.curves.search_on_gpu: the GPU bank could not be made ({e}); the curves search runs on the CPU"
        ),
    }
}
