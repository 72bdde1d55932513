//! Audio sources (WAV replay, simulation, live ALSA capture) and the assembly of their sample
//! streams into frames.

pub mod assembler;
pub mod callback;
pub mod capture;
pub mod frame;
pub mod heading;
pub mod ring;
pub mod sim;
pub mod wav;

use serde::{Deserialize, Serialize};

use crate::error::Result;

/// Live capture: the sample format asked of the device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SampleFormat {
    #[default]
    I16,
    I32,
    F32,
}

/// What a read returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadResult {
    /// This many whole sample frames (one sample per channel) were written, interleaved.
    Samples(usize),
    /// Audio was lost before the next samples (a capture overrun): this many sample frames.
    Gap(u64),
    /// Nothing available yet (live sources only); try again.
    Idle,
    /// The stream has ended.
    End,
}

/// A multi-channel sample stream. Implementations convert their sample format to f32 in
/// [-1, 1] on the way in.
pub trait AudioSource: Send {
    /// A human name for logs and errors (file path, ALSA device).
    fn describe(&self) -> String;
    fn sample_rate_hz(&self) -> u32;
    fn channels(&self) -> usize;
    /// Sample frames in the whole stream, when known (files).
    fn total_frames(&self) -> Option<u64>;
    /// Fill the start of `out` (interleaved, a multiple of `channels()` long) with samples.
    fn read(&mut self, out: &mut [f32]) -> Result<ReadResult>;
    /// True for live sources (wall-clock timestamps, status on wall time).
    fn is_live(&self) -> bool {
        false
    }
    /// Problems met while reading that were not fatal (a truncated file), for the summary.
    fn warnings(&self) -> Vec<String> {
        Vec::new()
    }
}
