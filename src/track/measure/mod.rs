//! Measurement models: what a frame says of a track's state, behind [`MeasurementModel`].
//! [`peaks`]: each pair's top GCC-PHAT peaks, with [`likelihood`], their mixture likelihood,
//! and [`noise`], the TDOA noise learnt from confirmed tracks; [`curves`]: the GCC curves
//! themselves (track-before-detect). The seed's infrared image and radar map models are
//! reproductions, built for the tests only.
//!
//! A model reads each frame once and gives each track its own view of it (the peaks less those
//! other tracks took; the curves less the other tracks' templates); the filter that serves the
//! track weighs its particles on that view (the particle bank on the peaks, on the CPU or the
//! GPU: [`likelihood`]; the Bernoulli filters on the curves:
//! [`crate::track::filter::bernoulli::CellModel`]). A new model is a file here implementing the
//! trait, a [`Measurement`] value, and the manager's stage that reads it.

pub mod curves;
#[cfg(test)]
mod infrared;
pub mod likelihood;
pub mod noise;
pub mod peaks;
#[cfg(test)]
mod radar;

use serde::{Deserialize, Serialize};

use crate::dsp::gcc::GccFrame;

/// One frame's input to the models: the correlator's result, each pair's health, and what the
/// tracker holds when it reads it.
pub struct FrameInput<'a> {
    pub seq: u64,
    pub gcc: &'a GccFrame,
    /// Per pair: both channels passed the frame's checks.
    pub pair_ok: &'a [bool],
    /// The TDOA noise the tracker assumes now, seconds.
    pub sigma_s: f32,
    /// Where the tracks are (a model that learns from the frames leaves them out).
    pub held: &'a [[f64; 3]],
}

/// A kind of evidence the tracker reads each frame and gives each track a view of.
pub trait MeasurementModel {
    /// A frame as the model reads it, and a track's view of it.
    type Frame;
    /// What a track's view leaves out: the other tracks' share of the frame.
    type Others<'a>: ?Sized;
    /// Its name in the configuration and the stream.
    fn name(&self) -> &'static str;
    /// Read one frame. Returns how many sensor pairs tell something this frame (None when the
    /// frame gives this model nothing to read).
    fn read(&mut self, input: &FrameInput) -> Option<usize>;
    /// The frame last read.
    fn frame(&self) -> &Self::Frame;
    /// Track `i`'s view of the frame last read, into `out`.
    fn view(&self, i: usize, others: &Self::Others<'_>, out: &mut Self::Frame);
}

/// What the tracker weighs its particles with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Measurement {
    /// Each pair's strongest peaks (point measurements with association).
    #[default]
    Peaks,
    /// The whole GCC-PHAT curves (track-before-detect): Bernoulli tracks with an existence
    /// probability, born from a search over the volume.
    Curves,
    /// The peaks path, with every confirmed track followed on the curves as well: when its
    /// peaks fade, the curves carry it on under the same id.
    Auto,
}
