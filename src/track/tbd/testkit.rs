//! Test helpers of the curves path: the shared workloads of [`crate::testing::tbd`] under the
//! names the unit tests use, on the harbour array.

use crate::config::Config;
pub use crate::testing::tbd::{correlate as curves, model, source_frames as frames};

pub fn config() -> Config {
    crate::testing::tbd::config(false)
}
