//! The `[output]` table: the status interval and the sinks (`[[output.sink]]`).

use serde::{Deserialize, Serialize};

use super::Config;
use crate::error::ConfigError;
use crate::output::SinkConfig;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OutputConfig {
    /// Seconds between status objects (stream time in replay, wall time live).
    #[serde(default = "one_second")]
    pub status_interval_s: f64,
    /// Outputs (`[[output.sink]]` tables).
    #[serde(default, rename = "sink")]
    pub sinks: Vec<SinkConfig>,
}

impl Default for OutputConfig {
    fn default() -> Self {
        Self {
            status_interval_s: 1.0,
            sinks: Vec::new(),
        }
    }
}

fn one_second() -> f64 {
    1.0
}

impl Config {
    /// The status interval and each sink.
    pub(super) fn validate_output(&self, file: &str) -> Result<(), ConfigError> {
        let err =
            |key: &str, problem: String, fix: &str| Err(ConfigError::new(file, key, problem, fix));
        let o = &self.output;
        if !(o.status_interval_s > 0.0) {
            return err(
                "output.status_interval_s",
                format!("{}", o.status_interval_s),
                "use a positive number of seconds",
            );
        }
        for (i, s) in o.sinks.iter().enumerate() {
            if let Some(r) = s.max_rate_hz() {
                if !(r > 0.0) {
                    return err(
                        &format!("output.sink[{i}].max_rate_hz"),
                        format!("{r}"),
                        "use a positive rate, or leave it out for no limit",
                    );
                }
            }
            match s {
                SinkConfig::Udp { address, .. } if !address.contains(':') => {
                    return err(
                        &format!("output.sink[{i}].address"),
                        format!("`{address}` has no port"),
                        "write host:port, e.g. \"192.168.1.20:5005\"",
                    );
                }
                SinkConfig::Serial { baud, .. } if *baud == 0 => {
                    return err(
                        &format!("output.sink[{i}].baud"),
                        "0".into(),
                        "use the receiver's baud rate, e.g. 115200",
                    );
                }
                SinkConfig::Jsonl { path, .. } if path.is_empty() => {
                    return err(
                        &format!("output.sink[{i}].path"),
                        "empty".into(),
                        "give a file path, or \"-\" for standard output",
                    );
                }
                _ => {}
            }
        }
        Ok(())
    }
}
