//! Test doubles of the backends (faults, a filter posing as a device) and the fuzz harness's
//! case runner: built for the tests only (`cfg(test)`, or the `testing` feature that the
//! integration tests turn on), never into the shipped binary.

pub mod faults;
pub mod fuzz;
