//! Analysis of what the pipeline produced, against ground truth and against theory: position
//! streams read back ([`stream`]), ground truth ([`truth`]), scoring ([`score`]: accuracy, OSPA,
//! ID switches, direction errors, NEES consistency), the Cramér–Rao bound ([`crlb`] for the
//! model, [`recording_bound`] along a recording), array planning ([`plan`]) and the scoring of
//! many simulated scenes ([`trial`]).

pub mod accuracy;
pub mod consistency;
pub mod crlb;
pub mod ospa;
pub mod plan;
pub mod recording_bound;
pub mod score;
pub mod stream;
pub mod trial;
pub mod truth;
