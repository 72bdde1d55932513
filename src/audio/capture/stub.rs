//! The capture source of a build without the `capture` feature: the same API, every entry point
//! saying how to get live capture.

use super::CaptureSettings;
use crate::audio::{AudioSource, ReadResult};
use crate::error::{Error, Result};

/// Never constructed: [`CaptureSource::open`] always fails in this build.
pub struct CaptureSource {
    never: std::convert::Infallible,
}

/// No capture devices can be listed without the feature.
pub fn list_devices() -> Vec<(String, String)> {
    Vec::new()
}

/// Nothing can be said of a device without the feature.
pub fn describe_device(_name: &str) -> Vec<String> {
    vec!["this build has no live capture (build with --features capture)".into()]
}

impl CaptureSource {
    /// Fails: this build has no live capture.
    pub fn open(cfg: &CaptureSettings) -> Result<Self> {
        Err(Error::Audio {
            device: cfg.device.clone(),
            problem: "this build has no live capture".into(),
            fix: "build with `--features capture` (needs libasound2-dev), or give --input FILE.wav"
                .into(),
        })
    }
}

impl AudioSource for CaptureSource {
    fn describe(&self) -> String {
        match self.never {}
    }

    fn sample_rate_hz(&self) -> u32 {
        match self.never {}
    }

    fn channels(&self) -> usize {
        match self.never {}
    }

    fn total_frames(&self) -> Option<u64> {
        match self.never {}
    }

    fn read(&mut self, _out: &mut [f32]) -> Result<ReadResult> {
        match self.never {}
    }
}
