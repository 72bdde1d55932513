//! Choosing the compute backend once, at start-up, and the deliberate-fault wrappers that test
//! the run-time fallback everywhere (CI has no GPU).

use crate::config::{BackendChoice, Config};
use crate::dsp::gcc::{Correlator, CpuCorrelator, GccFrame, GccParams};
use crate::error::{BackendError, Error, Result};
use crate::frame::Frame;
use crate::gpu;
use crate::track::pf::CpuParticleFilter;
use crate::track::{
    Estimate, FilterParams, ParticleFilter, Particles, TdoaMeasurement, TrackInit, TrackStep,
};

/// The two halves of a backend.
pub struct Backends {
    pub correlator: Box<dyn Correlator>,
    pub filter: Box<dyn ParticleFilter>,
    /// Why this backend was chosen (logged once).
    pub reason: String,
}

pub fn cpu(cfg: &Config) -> (Box<dyn Correlator>, Box<dyn ParticleFilter>) {
    (
        Box::new(CpuCorrelator::new(GccParams::from_config(cfg))),
        Box::new(CpuParticleFilter::new(FilterParams::from_config(cfg))),
    )
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
        BackendChoice::Cuda => match gpu::open(cfg) {
            Ok(b) => Ok(b),
            Err(why) => Err(Error::Backend(BackendError::new(
                "cuda",
                format!(
                    "{why}\n  fix: install the NVIDIA driver with libnvrtc and libcufft (CUDA 12.2 or newer), or use backend = \"auto\" or \"cpu\""
                ),
            ))),
        },
        BackendChoice::Auto => match gpu::open(cfg) {
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

/// A correlator that behaves like the CPU one but fails at a chosen frame, as a GPU might.
pub struct FaultyCorrelator {
    inner: CpuCorrelator,
    pub fail_at_seq: u64,
    /// The batch it asks replays for (1, as the CPU's, unless set: more makes a replay
    /// correlate ahead on a second thread, as with a GPU).
    pub batch: usize,
    /// Work ahead as the GPU does ([`Correlator::start`]: correlate the frames as they are when
    /// started, before their checks), and fail in `finish`, as an asynchronous GPU error
    /// surfaces when the host waits.
    pub works_ahead: bool,
    pending: Option<Vec<GccFrame>>,
}

impl FaultyCorrelator {
    pub fn new(params: GccParams, fail_at_seq: u64) -> Self {
        Self {
            inner: CpuCorrelator::new(params),
            fail_at_seq,
            batch: 1,
            works_ahead: false,
            pending: None,
        }
    }

    /// Work ahead of the input checks, as the GPU does.
    pub fn working_ahead(mut self) -> Self {
        self.works_ahead = true;
        self
    }

    fn check(&self, frames: &[&Frame]) -> Result<(), BackendError> {
        if frames.iter().any(|f| f.seq >= self.fail_at_seq) {
            return Err(BackendError::new(
                "faulty",
                format!("injected failure at frame {}", self.fail_at_seq),
            ));
        }
        Ok(())
    }

    /// Ask replays for batches of `batch` frames.
    pub fn with_batch(mut self, batch: usize) -> Self {
        self.batch = batch.max(1);
        self
    }
}

impl Correlator for FaultyCorrelator {
    fn backend(&self) -> &'static str {
        "faulty"
    }
    fn params(&self) -> &GccParams {
        self.inner.params()
    }
    fn correlate(
        &mut self,
        frames: &[&Frame],
        out: &mut [GccFrame],
        want_curves: bool,
    ) -> Result<(), BackendError> {
        self.check(frames)?;
        self.inner.correlate(frames, out, want_curves)
    }
    fn start(&mut self, frames: &[&Frame], want_curves: bool) -> Result<bool, BackendError> {
        self.pending = None;
        if !self.works_ahead {
            return Ok(false);
        }
        let mut out: Vec<GccFrame> = frames
            .iter()
            .map(|_| GccFrame::new(self.inner.params()))
            .collect();
        self.inner.correlate(frames, &mut out, want_curves)?;
        self.pending = Some(out);
        Ok(true)
    }
    fn finish(
        &mut self,
        frames: &[&Frame],
        out: &mut [GccFrame],
        _want_curves: bool,
    ) -> Result<(), BackendError> {
        let pending = self
            .pending
            .take()
            .filter(|p| p.len() == frames.len() && p.len() == out.len())
            .ok_or_else(|| BackendError::new("faulty", "finish without a matching start"))?;
        self.check(frames)?;
        for (o, p) in out.iter_mut().zip(pending) {
            *o = p;
        }
        Ok(())
    }
    fn preferred_batch(&self) -> usize {
        self.batch
    }
}

/// A particle filter that behaves like the CPU one but fails at a chosen frame.
pub struct FaultyFilter {
    inner: CpuParticleFilter,
    pub fail_at_seq: u64,
}

impl FaultyFilter {
    pub fn new(params: FilterParams, fail_at_seq: u64) -> Self {
        Self {
            inner: CpuParticleFilter::new(params),
            fail_at_seq,
        }
    }
}

impl ParticleFilter for FaultyFilter {
    fn backend(&self) -> &'static str {
        "faulty"
    }
    fn params(&self) -> &FilterParams {
        self.inner.params()
    }
    fn init_track(&mut self, init: &TrackInit) -> Result<(), BackendError> {
        self.inner.init_track(init)
    }
    fn step(
        &mut self,
        meas: &TdoaMeasurement,
        tracks: &[TrackStep],
        out: &mut [Estimate],
    ) -> Result<(), BackendError> {
        if meas.frame >= self.fail_at_seq {
            return Err(BackendError::new(
                "faulty",
                format!("injected failure at frame {}", self.fail_at_seq),
            ));
        }
        self.inner.step(meas, tracks, out)
    }
    /// Fails like `step` (a GPU filter's early launch can fail as its step can).
    fn prepare_step(
        &mut self,
        meas: &TdoaMeasurement,
        tracks: &[TrackStep],
        source: Option<&crate::track::LiveSource>,
    ) -> Result<bool, BackendError> {
        if meas.frame >= self.fail_at_seq {
            return Err(BackendError::new(
                "faulty",
                format!(
                    "injected failure at frame {} (early launch)",
                    self.fail_at_seq
                ),
            ));
        }
        self.inner.prepare_step(meas, tracks, source)
    }
    fn flush(&mut self) {
        self.inner.flush()
    }
    fn read_particles(&mut self, slot: u32) -> Result<Particles, BackendError> {
        self.inner.read_particles(slot)
    }
    fn write_particles(&mut self, slot: u32, p: &Particles) -> Result<(), BackendError> {
        self.inner.write_particles(slot, p)
    }
}
