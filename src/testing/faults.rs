//! Test doubles of the backends: a correlator and a filter that behave like the CPU ones but
//! fail at a chosen frame, as a GPU might (to test the run-time fallback everywhere: CI has no
//! GPU), and the filter posing as a device in other ways.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::audio::frame::Frame;
use crate::dsp::gcc::{Correlator, CpuCorrelator, GccFrame, GccParams};
use crate::error::BackendError;
use crate::track::filter::particle::CpuParticleFilter;
use crate::track::{
    Estimate, FilterBank, FilterParams, LiveSource, Particles, TdoaMeasurement, TrackInit,
    TrackStep,
};

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

/// The CPU filter posing as a device: it can fail from a chosen frame on (as a GPU might), run
/// the caller's work inside its step (as a GPU filter does while the device computes), and
/// report a device clock and bytes per step. One delegating wrapper for every test double of
/// [`FilterBank`].
pub struct PosingFilter {
    inner: CpuParticleFilter,
    /// Every step (and early launch) of this frame or later fails.
    pub fail_at_seq: Option<u64>,
    /// `step_overlapped` runs the caller's work and counts it here.
    pub overlaps: Option<Arc<AtomicUsize>>,
    /// The device clock: the seconds and bytes of the step with this count (from 1), when
    /// device timing is on.
    pub device_clock: Option<fn(u64) -> (f64, u64)>,
    timing: bool,
    steps: u64,
}

impl PosingFilter {
    /// The CPU filter, posing as nothing yet.
    pub fn new(params: FilterParams) -> Self {
        Self {
            inner: CpuParticleFilter::new(params),
            fail_at_seq: None,
            overlaps: None,
            device_clock: None,
            timing: false,
            steps: 0,
        }
    }

    /// Failing at frame `seq` and after.
    pub fn failing_at(params: FilterParams, seq: u64) -> Self {
        Self {
            fail_at_seq: Some(seq),
            ..Self::new(params)
        }
    }

    /// Running the caller's work inside its steps, counted in `count`.
    pub fn overlapping(params: FilterParams, count: Arc<AtomicUsize>) -> Self {
        Self {
            overlaps: Some(count),
            ..Self::new(params)
        }
    }

    /// With a device clock that gives each step's seconds and bytes.
    pub fn timed_by(params: FilterParams, clock: fn(u64) -> (f64, u64)) -> Self {
        Self {
            device_clock: Some(clock),
            ..Self::new(params)
        }
    }

    fn check(&self, frame: u64, what: &str) -> Result<(), BackendError> {
        match self.fail_at_seq {
            Some(at) if frame >= at => Err(BackendError::new(
                "faulty",
                format!("injected failure at frame {at}{what}"),
            )),
            _ => Ok(()),
        }
    }
}

impl FilterBank for PosingFilter {
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
        self.check(meas.frame, "")?;
        self.steps += 1;
        self.inner.step(meas, tracks, out)
    }
    fn step_overlapped(
        &mut self,
        meas: &TdoaMeasurement,
        tracks: &[TrackStep],
        out: &mut [Estimate],
        meanwhile: &mut dyn FnMut(),
    ) -> Result<bool, BackendError> {
        let Some(count) = &self.overlaps else {
            return self.step(meas, tracks, out).map(|()| false);
        };
        meanwhile();
        count.fetch_add(1, Ordering::Relaxed);
        self.step(meas, tracks, out).map(|()| true)
    }
    /// Fails like `step` (a GPU filter's early launch can fail as its step can).
    fn prepare_step(
        &mut self,
        meas: &TdoaMeasurement,
        tracks: &[TrackStep],
        source: Option<&LiveSource>,
    ) -> Result<bool, BackendError> {
        self.check(meas.frame, " (early launch)")?;
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
    fn set_device_timing(&mut self, on: bool) {
        self.timing = on;
    }
    fn last_device_time_s(&self) -> Option<f64> {
        let clock = self.device_clock.filter(|_| self.timing)?;
        Some(clock(self.steps).0)
    }
    fn bytes_per_step(&self) -> Option<u64> {
        Some(self.device_clock?(self.steps).1)
    }
}
