//! The `[smoothing]` table: the live fixed-lag estimate (`replay --smooth` needs no setting).

use serde::{Deserialize, Serialize};

use super::Config;
use crate::error::ConfigError;

/// The longest lag accepted (s): a receiver that can wait longer can replay.
pub const MAX_LAG_S: f64 = 60.0;

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SmoothingConfig {
    /// Send each track's state again this many seconds later, smoothed by the data up to then
    /// (`"type": "smoothed"`, `"estimate": "lagged"` messages); 0 sends none.
    #[serde(default)]
    pub lag_s: f64,
}

impl Config {
    pub(super) fn validate_smoothing(&self, file: &str) -> Result<(), ConfigError> {
        let lag = self.smoothing.lag_s;
        if !(0.0..=MAX_LAG_S).contains(&lag) {
            return Err(ConfigError::new(
                file,
                "smoothing.lag_s",
                format!("{lag}"),
                format!("use 0 (off) to {MAX_LAG_S} s"),
            ));
        }
        Ok(())
    }

    /// The fixed lag in frames (None when off): the lag rounded up to whole hops.
    pub fn lag_frames(&self) -> Option<usize> {
        let lag = self.smoothing.lag_s;
        (lag > 0.0).then(|| {
            let hop_s = self.hop_samples() as f64 / self.sample_rate_hz();
            (lag / hop_s).ceil() as usize
        })
    }
}
