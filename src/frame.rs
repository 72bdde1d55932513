//! The unit of work: K channels × N samples of f32, planar, with a sequence number and a
//! sample-clock timestamp. Sources convert every sample format to this on the way in.

use std::time::SystemTime;

#[derive(Debug, Clone)]
pub struct Frame {
    /// 0 for the first frame of the stream, then +1 per frame (gaps after dropped audio).
    pub seq: u64,
    /// Index of this frame's first sample on the stream's sample clock.
    pub start_sample: u64,
    pub sample_rate_hz: f64,
    /// Samples per channel.
    pub len: usize,
    /// Channels (one per sensor, in sensor order).
    pub channels: usize,
    /// Planar samples: channel c occupies `data[c * len .. (c + 1) * len]`.
    pub data: Vec<f32>,
    /// Wall-clock time of the first sample, for live capture.
    pub wall_clock: Option<SystemTime>,
}

impl Frame {
    pub fn new(channels: usize, len: usize, sample_rate_hz: f64) -> Self {
        Self {
            seq: 0,
            start_sample: 0,
            sample_rate_hz,
            len,
            channels,
            data: vec![0.0; channels * len],
            wall_clock: None,
        }
    }

    pub fn channel(&self, c: usize) -> &[f32] {
        &self.data[c * self.len..(c + 1) * self.len]
    }

    pub fn channel_mut(&mut self, c: usize) -> &mut [f32] {
        &mut self.data[c * self.len..(c + 1) * self.len]
    }

    /// Arrival time of the frame's centre at the array, seconds from the stream start.
    pub fn centre_time_s(&self) -> f64 {
        (self.start_sample as f64 + (self.len as f64 - 1.0) / 2.0) / self.sample_rate_hz
    }
}
