//! The manager's dealings with a device filter bank: a lone track's step launched before its
//! frame's peaks are in, the work a step leaves for between frames, and every track moved to
//! another backend when the GPU fails.

use super::{TrackManager, step_to};
use crate::error::BackendError;
use crate::track::FilterBank;
use crate::track::initiate::twins::restart;
use crate::track::measure::MeasurementModel;
use crate::track::motion::steps::steps_to;

impl TrackManager {
    /// Move every track to another backend, restarting its particles from the last estimate
    /// (mean, covariance and model probabilities). Used when the GPU fails mid-run.
    pub fn replace_bank(&mut self, mut bank: Box<dyn FilterBank>) -> Result<(), BackendError> {
        for t in &self.tracks {
            let frame = t.born_seq ^ 0x5EED_0000_0000;
            bank.init_track(&restart(t.slot, frame, &t.est))?;
            if let Some(w) = &t.twin {
                bank.init_track(&restart(w.slot, frame, &w.est))?;
            }
        }
        self.bank = bank;
        Ok(())
    }

    /// Between frames: launch the filter work the last step left for now
    /// ([`FilterBank::flush`]).
    pub fn between_frames(&mut self) {
        let start = std::time::Instant::now();
        self.bank.flush();
        self.counts.filter_wall += start.elapsed();
    }

    /// Launch the filter step of frame `seq` centred at `t_centre_s` before its GCC result is
    /// in ([`FilterBank::prepare_step`]), so that a GPU predicts while the frame is correlated.
    /// Only a lone track without a twin goes ahead, and not under multi-frame assignment (its
    /// frame to step is an older one). With `peaks` (where the correlator's device writes
    /// them), the filter's device builds the measurement from them and the pair checks
    /// `pair_ok`; without, [`Self::step`] supplies it. Returns whether the filter took it.
    pub fn prepare(
        &mut self,
        seq: u64,
        t_centre_s: f64,
        peaks: Option<crate::dsp::gcc::DevicePeaks>,
        pair_ok: &[bool],
    ) -> Result<bool, BackendError> {
        let lone = self.tracks.len() == 1 && self.tracks[0].twin.is_none();
        if !lone || self.associator.latency_frames() > 0 {
            return Ok(false);
        }
        let start = std::time::Instant::now();
        let to = step_to(&self.s, &self.params, self.heading_deg, t_centre_s);
        steps_to(&to, &self.tracks, &mut self.steps);
        self.peaks.expect(seq, self.sigma_s);
        // (A device builds the measurement from the correlator's peaks as they come, which
        // knows no masked pairs: with crosstalk flagged, the host supplies it.)
        let peaks = peaks.filter(|_| !self.peaks.any_masked());
        let source = peaks.map(|p| self.peaks.live_source(p, self.sigma_s, pair_ok));
        let took = (self.bank).prepare_step(self.peaks.frame(), &self.steps, source.as_ref());
        if let Ok(true) = took {
            self.counts.prepared_steps += 1;
            self.counts.device_built_steps += u64::from(source.is_some());
        }
        self.counts.filter_wall += start.elapsed();
        took
    }
}
