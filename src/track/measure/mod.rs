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
