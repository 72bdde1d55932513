//! The `[audio]` table: sample rate, channels and which channel carries which sensor, and the
//! live capture's device settings.

use serde::{Deserialize, Serialize};

use super::Config;
use crate::audio::SampleFormat;
use crate::error::ConfigError;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AudioConfig {
    #[serde(default = "default_rate")]
    pub sample_rate_hz: u32,
    /// Channels in the input (WAV file or capture device). Defaults to the number of sensors.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub channels: Option<usize>,
    /// `channel_map[i]` is the input channel that carries sensor i. Defaults to 0, 1, 2, ...
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub channel_map: Option<Vec<usize>>,
    /// Live capture: ALSA device name (`hw:1,0`, `plughw:CARD=X`, `default`).
    #[serde(default = "default_device")]
    pub device: String,
    /// Live capture: sample format asked of the device.
    #[serde(default)]
    pub sample_format: SampleFormat,
    /// Live capture: ALSA period size in frames.
    #[serde(default = "default_period")]
    pub period_frames: u32,
    /// Live capture: capacity of the ring between the audio callback and the worker.
    #[serde(default = "default_ring_s")]
    pub ring_seconds: f64,
    /// Seconds added to the wall-clock time (UTC) stamped on each live frame's messages: the
    /// correction of a node clock known to be off (a measured NTP or PPS offset). Fusion across
    /// nodes needs their stamps to agree within its `skew_s`.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub clock_offset_s: f64,
}

fn is_zero(x: &f64) -> bool {
    *x == 0.0
}

fn default_rate() -> u32 {
    48_000
}
fn default_device() -> String {
    "default".into()
}
fn default_period() -> u32 {
    1024
}
fn default_ring_s() -> f64 {
    2.0
}

impl Default for AudioConfig {
    fn default() -> Self {
        Self {
            sample_rate_hz: default_rate(),
            channels: None,
            channel_map: None,
            device: default_device(),
            sample_format: SampleFormat::default(),
            period_frames: default_period(),
            ring_seconds: default_ring_s(),
            clock_offset_s: 0.0,
        }
    }
}

impl Config {
    pub fn sample_rate_hz(&self) -> f64 {
        f64::from(self.audio.sample_rate_hz)
    }

    pub fn input_channels(&self) -> usize {
        self.audio.channels.unwrap_or(self.array.sensors_m.len())
    }

    /// `channel_map`, or the identity.
    pub fn channel_map(&self) -> Vec<usize> {
        self.audio
            .channel_map
            .clone()
            .unwrap_or_else(|| (0..self.array.sensors_m.len()).collect())
    }

    /// The sample rate, the channel count and map, and the capture ring.
    pub(super) fn validate_audio(&self, file: &str) -> Result<(), ConfigError> {
        let err =
            |key: &str, problem: String, fix: &str| Err(ConfigError::new(file, key, problem, fix));
        let n = self.array.sensors_m.len();
        let fs = self.audio.sample_rate_hz;
        if !(1000..=2_000_000).contains(&fs) {
            return err(
                "audio.sample_rate_hz",
                format!("{fs} Hz is outside 1 kHz .. 2 MHz"),
                "give the recording's or device's sample rate",
            );
        }
        let off = self.audio.clock_offset_s;
        if !(off.is_finite() && off.abs() <= 3600.0) {
            return err(
                "audio.clock_offset_s",
                format!("{off} s"),
                "give the node clock's correction in seconds, within ±3600 (fix a clock wrong by more than that at its source)",
            );
        }
        let ch = self.input_channels();
        if ch == 0 {
            return err(
                "audio.channels",
                "0 channels".into(),
                "give the input's channel count",
            );
        }
        match &self.audio.channel_map {
            None if ch != n => {
                return err(
                    "audio.channel_map",
                    format!(
                        "the input has {ch} channels and the array {n} sensors, and no channel map says which channel is which sensor"
                    ),
                    "add audio.channel_map = [c0, c1, ...] with one input channel per sensor",
                );
            }
            Some(map) => {
                if map.len() != n {
                    return err(
                        "audio.channel_map",
                        format!("{} entries for {n} sensors", map.len()),
                        "give exactly one input channel per sensor, in sensor order",
                    );
                }
                if let Some(&c) = map.iter().find(|&&c| c >= ch) {
                    return err(
                        "audio.channel_map",
                        format!(
                            "channel {c} does not exist: the input has channels 0..{}",
                            ch - 1
                        ),
                        "use channel numbers from 0 to audio.channels - 1",
                    );
                }
                let mut seen = map.clone();
                seen.sort_unstable();
                seen.dedup();
                if seen.len() != map.len() {
                    return err(
                        "audio.channel_map",
                        "an input channel is mapped to two sensors".into(),
                        "each sensor needs its own input channel",
                    );
                }
            }
            None => {}
        }
        if !(self.audio.ring_seconds > 0.05 && self.audio.ring_seconds <= 60.0) {
            return err(
                "audio.ring_seconds",
                format!("{} s", self.audio.ring_seconds),
                "use 0.1 to 60 seconds (2 is the default)",
            );
        }
        if self.audio.period_frames == 0 {
            return err(
                "audio.period_frames",
                "0".into(),
                "use an ALSA period of e.g. 256 to 4096 frames",
            );
        }
        Ok(())
    }
}
