//! The `[gcc]` table: frame and hop, window, band, weighting and peaks of GCC-PHAT.

use serde::{Deserialize, Serialize};

use super::Config;
use crate::dsp::gcc::{Weighting, Window};
use crate::dsp::geometry::PairMode;
use crate::error::ConfigError;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GccConfig {
    /// Samples per frame. Default: the power of two nearest 85 ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub frame_samples: Option<usize>,
    /// Samples between frame starts. Default: half a frame.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hop_samples: Option<usize>,
    #[serde(default)]
    pub window: Window,
    /// Band used for the cross-spectrum, [low, high] in Hz. Default: the whole band.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub band_hz: Option<[f64; 2]>,
    #[serde(default)]
    pub weighting: Weighting,
    /// beta-PHAT exponent: 1 is full PHAT, 0 plain correlation; 0.7-0.9 helps in reverberant rooms.
    #[serde(default = "one")]
    pub beta: f64,
    /// PHAT regulariser, relative to the mean cross-spectrum magnitude in band.
    #[serde(default = "default_reg")]
    pub regularisation: f64,
    /// Peaks kept per pair (the tracker treats all but the true one as clutter).
    #[serde(default = "default_peaks")]
    pub peaks_per_pair: usize,
    #[serde(default = "default_pairs")]
    pub pairs: PairMode,
    /// Most pairs correlated and tracked: above it (17 or more sensors with every pair) the
    /// pairs with the longest baselines are kept, each sensor in about as many as the others
    /// (see `dsp::geometry::longest_baselines`). Cost grows with the pairs.
    #[serde(default = "default_max_pairs")]
    pub max_pairs: usize,
    /// Reference sensor for `pairs = "reference"`.
    #[serde(default)]
    pub reference: usize,
    /// Zero-pad frames so the correlation is linear rather than circular (twice the FFT work).
    #[serde(default)]
    pub zero_pad: bool,
    /// Raised-cosine taper over the outer 10% of the band at each edge: lower sidelobes, and
    /// unbiased sub-sample peaks even when the band reaches the Nyquist frequency.
    #[serde(default = "yes")]
    pub band_taper: bool,
    /// Two kept peaks of one pair are at least this far apart, in samples.
    #[serde(default = "default_sep")]
    pub min_peak_separation_samples: f64,
    /// Crosstalk check (`dsp::crosstalk`): a pair with a clear peak fixed at lag zero in most
    /// frames of this window (s) is flagged and its zero-lag peaks are masked. 0 turns it off.
    #[serde(default = "default_crosstalk_window")]
    pub crosstalk_window_s: f64,
}

/// Most pairs `gcc.max_pairs` allows: every pair of 64 sensors.
pub const MAX_PAIRS: usize = 64 * 63 / 2;

fn one() -> f64 {
    1.0
}
fn yes() -> bool {
    true
}
fn default_reg() -> f64 {
    1e-3
}
fn default_peaks() -> usize {
    4
}
fn default_pairs() -> PairMode {
    PairMode::All
}
fn default_max_pairs() -> usize {
    120
}
fn default_sep() -> f64 {
    3.0
}
fn default_crosstalk_window() -> f64 {
    10.0
}

impl Default for GccConfig {
    fn default() -> Self {
        Self {
            frame_samples: None,
            hop_samples: None,
            window: Window::default(),
            band_hz: None,
            weighting: Weighting::default(),
            beta: one(),
            regularisation: default_reg(),
            peaks_per_pair: default_peaks(),
            pairs: default_pairs(),
            max_pairs: default_max_pairs(),
            reference: 0,
            zero_pad: false,
            band_taper: true,
            min_peak_separation_samples: default_sep(),
            crosstalk_window_s: default_crosstalk_window(),
        }
    }
}

impl Config {
    pub fn frame_samples(&self) -> usize {
        self.gcc.frame_samples.unwrap_or_else(|| {
            // The power of two nearest 85 ms (4096 at 48 kHz, 1024 at 16 kHz): long enough for
            // sub-sample TDOAs at modest SNR, short enough that a moving source smears its TDOA
            // by little within one frame. The tracker integrates over frames.
            let target = 0.085 * self.sample_rate_hz();
            let lo = 2f64.powf(target.log2().floor());
            let hi = lo * 2.0;
            let n = if target / lo < hi / target { lo } else { hi };
            (n as usize).max(64)
        })
    }

    pub fn hop_samples(&self) -> usize {
        self.gcc
            .hop_samples
            .unwrap_or_else(|| (self.frame_samples() / 2).max(1))
    }

    pub fn band_hz(&self) -> [f64; 2] {
        self.gcc
            .band_hz
            .unwrap_or([0.0, self.sample_rate_hz() / 2.0])
    }

    /// Frame, hop, band, weighting and peaks against the array's largest delay.
    pub(super) fn validate_gcc(&self, file: &str) -> Result<(), ConfigError> {
        let err =
            |key: &str, problem: String, fix: &str| Err(ConfigError::new(file, key, problem, fix));
        let a = &self.array;
        let n = a.sensors_m.len();
        let fs = self.audio.sample_rate_hz;
        let g = &self.gcc;
        if g.max_pairs < n.saturating_sub(1).max(1) || g.max_pairs > MAX_PAIRS {
            return err(
                "gcc.max_pairs",
                format!("{} pairs for {n} sensors", g.max_pairs),
                "use at least one fewer than the sensors (every sensor needs a pair) and at most 2016",
            );
        }
        let w = g.crosstalk_window_s;
        if !(w == 0.0 || (1.0..=3600.0).contains(&w)) {
            return err(
                "gcc.crosstalk_window_s",
                format!("{w} s"),
                "use 1 to 3600 s (10 s is the default), or 0 to turn the crosstalk check off",
            );
        }
        let frame = self.frame_samples();
        if !(64..=1 << 20).contains(&frame) {
            return err(
                "gcc.frame_samples",
                format!("{frame} samples"),
                "use 64 to 1048576 samples (a power of two is fastest)",
            );
        }
        let hop = self.hop_samples();
        if hop == 0 || hop > 16 * frame {
            return err(
                "gcc.hop_samples",
                format!("{hop} samples for a {frame}-sample frame"),
                "use a hop between 1 sample and a few frames (half a frame is the default)",
            );
        }
        let max_lag = self.geometry().aperture_m() / a.speed_of_sound_m_s * f64::from(fs);
        if 2.0 * max_lag + 8.0 >= frame as f64 {
            return err(
                "gcc.frame_samples",
                format!(
                    "{frame} samples cannot hold the largest possible TDOA of this array ({max_lag:.0} samples either way)"
                ),
                &format!(
                    "use gcc.frame_samples = {} or more",
                    (2.0 * max_lag + 8.0).ceil().max(64.0) as usize
                ),
            );
        }
        let band = self.band_hz();
        if !(band[0] >= 0.0 && band[0] < band[1] && band[1] <= f64::from(fs) / 2.0 + 1e-9) {
            return err(
                "gcc.band_hz",
                format!("[{}, {}] Hz", band[0], band[1]),
                &format!(
                    "give [low, high] with 0 <= low < high <= {} (half the sample rate)",
                    fs / 2
                ),
            );
        }
        let bins = (band[1] - band[0]) / f64::from(fs) * frame as f64;
        if bins < 8.0 {
            return err(
                "gcc.band_hz",
                format!("the band holds only {bins:.1} FFT bins"),
                "widen the band or lengthen the frame",
            );
        }
        if !(0.0..=1.0).contains(&g.beta) {
            return err(
                "gcc.beta",
                format!("{}", g.beta),
                "use 0 (plain correlation) to 1 (full PHAT)",
            );
        }
        if !(g.regularisation >= 0.0 && g.regularisation < 10.0) {
            return err(
                "gcc.regularisation",
                format!("{}", g.regularisation),
                "use 0 to 1 (1e-3 is the default)",
            );
        }
        if !(1..=16).contains(&g.peaks_per_pair) {
            return err(
                "gcc.peaks_per_pair",
                format!("{}", g.peaks_per_pair),
                "use 1 to 16",
            );
        }
        if g.reference >= n {
            return err(
                "gcc.reference",
                format!("sensor {} does not exist (the array has {n})", g.reference),
                "use a sensor index from 0",
            );
        }
        if !(g.min_peak_separation_samples >= 1.0) {
            return err(
                "gcc.min_peak_separation_samples",
                format!("{}", g.min_peak_separation_samples),
                "use 1 or more",
            );
        }
        Ok(())
    }
}
