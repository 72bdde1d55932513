//! sonotrack: acoustic source tracking with GCC-PHAT and a multi-model particle filter.
pub mod audio;
pub mod config;
pub mod dsp;
pub mod error;
pub mod frame;
pub mod philox;
pub mod track;
