//! Live capture: the device settings, and the capture source itself, through cpal on ALSA with
//! the cargo feature `capture` ([`alsa`]) or a stand-in of the same API that says how to get it
//! ([`stub`]), so that callers carry no `cfg`.

#[cfg(feature = "capture")]
mod alsa;
#[cfg(not(feature = "capture"))]
mod stub;

#[cfg(feature = "capture")]
pub use alsa::{CaptureSource, describe_device, list_devices};
#[cfg(not(feature = "capture"))]
pub use stub::{CaptureSource, describe_device, list_devices};

use crate::audio::SampleFormat;

/// SCHED_FIFO priority the audio thread asks for.
pub const RT_PRIORITY: i32 = 70;

/// Whether this build can capture live audio.
pub const AVAILABLE: bool = cfg!(feature = "capture");

/// What live capture asks of the device (`[audio]` in the configuration).
#[derive(Debug, Clone, PartialEq)]
pub struct CaptureSettings {
    /// ALSA device name (`hw:1,0`, `plughw:CARD=X`, `default`).
    pub device: String,
    pub channels: usize,
    pub sample_rate_hz: u32,
    pub period_frames: u32,
    /// Capacity of the ring between the audio callback and the worker.
    pub ring_seconds: f64,
    pub sample_format: SampleFormat,
}
