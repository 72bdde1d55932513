//! The `[smoothing]` table: the live fixed-lag estimate (`replay --smooth` needs no setting).

use serde::{Deserialize, Serialize};

use super::Config;
use crate::error::ConfigError;

/// The longest lag accepted (s). Each frame smooths every track back over the lag (about a
/// third of a millisecond per track and second of lag on a desktop core, BENCHMARKS.md), and the
/// gain is mostly in the first second; a receiver that can wait longer can replay.
pub const MAX_LAG_S: f64 = 5.0;

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

#[cfg(test)]
mod tests {
    use super::*;

    const ARRAY: &str =
        "[array]\nsensors_m = [[0,0,0],[1,0,0],[0,1,0],[0,0,1]]\nspeed_of_sound_m_s = 343.0\n";

    /// Off by default; a lag is whole frames, rounded up; out-of-range or non-numbers are
    /// refused naming the key and the range.
    #[test]
    fn the_lag_is_checked_and_counted_in_frames() {
        let c = Config::parse_str(ARRAY, "t.toml").unwrap();
        assert_eq!(c.lag_frames(), None);
        let c = Config::parse_str(&format!("{ARRAY}[smoothing]\nlag_s = 1.0\n"), "t.toml").unwrap();
        let hop_s = c.hop_samples() as f64 / c.sample_rate_hz();
        assert_eq!(c.lag_frames(), Some((1.0 / hop_s).ceil() as usize));
        // `check` states the lag and what it costs.
        let said = c.explain();
        assert!(
            said.contains("smoothing: each track's state again 1.00 s later"),
            "{said}"
        );
        assert!(said.contains("% of real time on a desktop core"), "{said}");
        for bad in ["-1.0", "5.5", "nan", "inf"] {
            let e = Config::parse_str(&format!("{ARRAY}[smoothing]\nlag_s = {bad}\n"), "t.toml")
                .unwrap_err();
            assert_eq!(e.key, "smoothing.lag_s", "{bad}");
            assert!(e.fix.contains("5 s"), "{bad}: {e}");
        }
        assert!(Config::parse_str(&format!("{ARRAY}[smoothing]\nlags = 1\n"), "t.toml").is_err());
    }
}
