//! Test helpers of the curves path: the shared workloads of [`crate::bench::tbd_workload`] under the
//! names the unit tests use, on the harbour array.

pub use crate::bench::tbd_workload::{correlate as curves, model, source_frames as frames};
use crate::config::Config;

pub fn config() -> Config {
    crate::bench::tbd_workload::config(false)
}
