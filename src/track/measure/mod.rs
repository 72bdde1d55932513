//! Measurement models: what a frame says of a track's state. [`peaks`]: each pair's top
//! GCC-PHAT peaks, with [`likelihood`], their mixture likelihood, and [`noise`], the TDOA noise
//! learnt from confirmed tracks; [`curves`]: the GCC curves themselves (track-before-detect).
//! The seed's infrared image and radar map models are reproductions, built for the tests only.

pub mod curves;
#[cfg(test)]
mod infrared;
pub mod likelihood;
pub mod noise;
pub mod peaks;
#[cfg(test)]
mod radar;

use serde::{Deserialize, Serialize};

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
