//! `fuse.toml`, the fusion service's configuration: the broker and the site it listens to, the
//! frame it fuses in, the association's parameters and its outputs.

use serde::{Deserialize, Serialize};

use super::errors::parse_text;
use super::output::sink_problem;
use crate::error::ConfigError;
use crate::fusion::engine::FuseParams;
use crate::math::geo::Origin;
use crate::output::SinkConfig;
use crate::output::broker::{BrokerConfig, topic_level_ok, topic_prefix_ok};
use crate::output::mqtt::default_prefix;
use crate::output::nmea::NmeaSettings;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FuseConfig {
    pub broker: BrokerConfig,
    /// Topic prefix and site of the nodes (`<prefix>/<site>/<node>/tracks`).
    #[serde(default = "default_prefix")]
    pub prefix: String,
    pub site: String,
    /// The fused tracks' frame: east-north-up (turned by `heading_deg`) of this point.
    pub origin: Origin,
    /// Fused estimates a second.
    #[serde(default = "ten")]
    pub rate_hz: f64,
    /// The fusion time trails the clock by this much, so that reports of that time have
    /// arrived (network and the nodes' own latency), s.
    #[serde(default = "default_delay")]
    pub delay_s: f64,
    /// Seconds between fusion status messages.
    #[serde(default = "one")]
    pub status_interval_s: f64,
    /// `[fusion]`: association and timing.
    #[serde(default)]
    pub fusion: FuseParams,
    #[serde(default)]
    pub output: FuseOutput,
}

/// `[output]`: the sinks of the fused stream, as a node's.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FuseOutput {
    #[serde(default, rename = "sink")]
    pub sinks: Vec<SinkConfig>,
    #[serde(default)]
    pub nmea: NmeaSettings,
}

fn ten() -> f64 {
    10.0
}
fn one() -> f64 {
    1.0
}
fn default_delay() -> f64 {
    0.3
}

impl FuseConfig {
    /// Read and check `path`.
    pub fn load(path: &std::path::Path) -> Result<Self, ConfigError> {
        let file = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| {
            ConfigError::new(
                &file,
                "",
                format!("cannot read it: {e}"),
                "give the path of a fuse.toml (see docs/fusion.md)",
            )
        })?;
        Self::parse_str(&text, &file)
    }

    pub fn parse_str(text: &str, file: &str) -> Result<Self, ConfigError> {
        let cfg: FuseConfig = parse_text(text, file)?;
        cfg.validate(file)?;
        Ok(cfg)
    }

    fn validate(&self, file: &str) -> Result<(), ConfigError> {
        let err =
            |key: &str, problem: String, fix: &str| Err(ConfigError::new(file, key, problem, fix));
        if let Some((key, problem, fix)) = self.broker.problem() {
            return err(&format!("broker.{key}"), problem, fix);
        }
        if !topic_prefix_ok(&self.prefix) {
            return err(
                "prefix",
                format!("`{}`", self.prefix),
                "use the nodes' prefix: levels of letters, digits, '-', '_' or '.'",
            );
        }
        if !topic_level_ok(&self.site) {
            return err(
                "site",
                format!("`{}`", self.site),
                "use the nodes' site: 1-64 letters, digits, '-', '_' or '.'",
            );
        }
        if let Some(p) = self.origin.problem() {
            return err("origin", p, "give the fused frame's origin on the Earth");
        }
        let f = &self.fusion;
        let checks: [(&str, f64, f64, f64, &str); 7] = [
            (
                "rate_hz",
                self.rate_hz,
                0.1,
                1000.0,
                "use 0.1-1000 fused estimates a second",
            ),
            ("delay_s", self.delay_s, 0.0, 60.0, "use 0-60 s"),
            (
                "status_interval_s",
                self.status_interval_s,
                0.1,
                3600.0,
                "use 0.1-3600 s",
            ),
            (
                "fusion.gate_chi2",
                f.gate_chi2,
                1.0,
                1000.0,
                "use 1-1000 (16.27: the χ²(3) 0.999 quantile)",
            ),
            (
                "fusion.max_age_s",
                f.max_age_s,
                0.05,
                600.0,
                "use 0.05-600 s",
            ),
            ("fusion.skew_s", f.skew_s, 0.0, 60.0, "use 0-60 s"),
            (
                "fusion.survey_std_m",
                f.survey_std_m,
                0.0,
                1000.0,
                "use 0-1000 m",
            ),
        ];
        for (key, v, lo, hi, fix) in checks {
            if !(v >= lo && v <= hi) {
                return err(key, format!("{v}"), fix);
            }
        }
        for (key, v) in [
            ("fusion.unlink_after", f.unlink_after),
            ("fusion.merge_after", f.merge_after),
            ("fusion.split_probation", f.split_probation),
        ] {
            if !(1..=1000).contains(&v) {
                return err(key, format!("{v}"), "use 1-1000 steps");
            }
        }
        for (i, s) in self.output.sinks.iter().enumerate() {
            // (The fused stream is always on the Earth: it has an origin.)
            if let Some((key, problem, fix)) = sink_problem(s, true) {
                return err(&format!("output.sink[{i}].{key}"), problem, fix);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = "site = \"harbour\"\nbroker = { address = \"127.0.0.1:1883\" }\n\
                        [origin]\nlatitude_deg = 53.5\nlongitude_deg = 9.9\n";

    #[test]
    fn a_minimal_file_takes_the_defaults() {
        let c = FuseConfig::parse_str(GOOD, "fuse.toml").unwrap();
        assert_eq!(c.prefix, "sonotrack");
        assert_eq!(c.fusion, FuseParams::default());
        assert_eq!((c.rate_hz, c.delay_s), (10.0, 0.3));
    }

    #[test]
    fn errors_name_the_key() {
        for (extra, key) in [
            ("rate_hz = 0\n", "rate_hz"),
            ("[fusion]\nskew_s = -1\n", "fusion.skew_s"),
            ("[fusion]\nmerge_after = 0\n", "fusion.merge_after"),
            ("[fusion]\ngate = 3\n", "fusion.gate"),
        ] {
            let text = if extra.starts_with('[') {
                format!("{GOOD}{extra}")
            } else {
                format!("{extra}{GOOD}")
            };
            let e = FuseConfig::parse_str(&text, "fuse.toml").unwrap_err();
            assert_eq!(e.key, key, "{extra}: {e}");
        }
        let e = FuseConfig::parse_str(&GOOD.replace("harbour", "a/b"), "f").unwrap_err();
        assert_eq!(e.key, "site");
        let e = FuseConfig::parse_str(&GOOD.replace("53.5", "95"), "f").unwrap_err();
        assert_eq!(e.key, "origin");
    }
}
