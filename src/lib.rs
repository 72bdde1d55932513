//! sonotrack: acoustic source tracking with GCC-PHAT and a multi-model particle filter.
//!
//! Data flows one way, and the modules follow it:
//!
//! - [`audio`]: sources (WAV, simulation, live capture) and the assembly of their samples into
//!   [`audio::frame::Frame`]s;
//! - [`dsp`]: a [`dsp::gcc::Correlator`] (CPU here, CUDA in [`gpu`]) turns frames into GCC-PHAT
//!   curves and TDOA peaks; array geometry and multilateration;
//! - [`track`]: a [`track::manager::TrackManager`] over a [`track::FilterBank`] bank (CPU
//!   here, CUDA in [`gpu`]) turns peaks into tracks;
//! - [`output`]: the position stream's schema and the sinks that carry it;
//! - [`pipeline`]: the stages in sequence, for the live daemon and for replays.
//!
//! Around the flow: [`config`] (one TOML file, referring to the stages' own types), [`analysis`]
//! (scoring against truth, the Cramér–Rao bound, array planning), [`plot`], [`bench`], and the
//! shared maths of [`rng`] and [`math`]. `testing` holds the test doubles and the fuzz runner
//! (tests only; the benchmarks' synthetic workloads are [`bench::workload`]).

// Validation writes `!(x > 0.0)` on purpose: unlike `x <= 0.0` it also rejects NaN.
#![allow(clippy::neg_cmp_op_on_partial_ord)]
// Numeric kernels index several parallel arrays with one loop counter; that form is clearer
// than zipped iterators there, and it is the form the compiler vectorises.
#![allow(clippy::needless_range_loop)]
pub mod analysis;
pub mod audio;
pub mod bench;
pub mod config;
pub mod dsp;
pub mod error;
pub mod fusion;
pub mod gpu;
pub mod math;
pub mod output;
pub mod pipeline;
pub mod plot;
pub mod rng;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
pub mod track;
