//! sonotrack: acoustic source tracking with GCC-PHAT and a multi-model particle filter.
//!
//! Data flows one way: an [`audio::AudioSource`] yields samples, [`audio::assembler`] cuts them
//! into [`frame::Frame`]s, a [`dsp::gcc::Correlator`] (CPU or CUDA) turns frames into TDOA peaks,
//! a [`track::manager::TrackManager`] over a [`track::ParticleFilter`] bank (CPU or CUDA) turns
//! peaks into tracks, and [`output`] sinks carry the position stream.

// Validation writes `!(x > 0.0)` on purpose: unlike `x <= 0.0` it also rejects NaN.
#![allow(clippy::neg_cmp_op_on_partial_ord)]
// Numeric kernels index several parallel arrays with one loop counter; that form is clearer
// than zipped iterators there, and it is the form the compiler vectorises.
#![allow(clippy::needless_range_loop)]
pub mod audio;
pub mod backend;
pub mod bench;
pub mod bound;
pub mod config;
pub mod crlb;
pub mod daemon;
pub mod dsp;
pub mod error;
pub mod eval;
pub mod evaluate;
pub mod fastmath;
pub mod frame;
pub mod gpu;
pub mod output;
pub mod philox;
pub mod pipeline;
pub mod plan;
pub mod plot;
pub mod project;
pub mod replay;
pub mod scene;
pub mod track;
