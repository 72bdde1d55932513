//! What the tests and the benchmarks share: fixtures (arrays, parameters, synthetic frames and
//! measurements) and test doubles of the backends (faults, a filter posing as a device).

pub mod faults;
pub mod fixtures;
pub mod fuzz;
pub mod imm_bank;
pub mod kalman;
pub mod kalman_tdoa;
pub mod mfa;
pub mod tbd;
