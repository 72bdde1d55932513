//! Random numbers: Philox4x32-10, keyed by (seed, frame, track, particle, stream), identical on
//! the CPU and in the CUDA kernels, one particle at a time ([`philox`]) or a lane of particles at
//! a time ([`lanes`]).

pub mod lanes;
pub mod philox;
