//! The `[output]` table: the status interval and the sinks (`[[output.sink]]`).

use serde::{Deserialize, Serialize};

use super::Config;
use crate::error::ConfigError;
use crate::output::nmea::{NmeaSettings, SentenceKind};
use crate::output::{SerialFormat, SinkConfig};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OutputConfig {
    /// Seconds between status objects (stream time in replay, wall time live).
    #[serde(default = "one_second")]
    pub status_interval_s: f64,
    /// Outputs (`[[output.sink]]` tables).
    #[serde(default, rename = "sink")]
    pub sinks: Vec<SinkConfig>,
    /// Talker and units of the NMEA TTM and TLL sentences.
    #[serde(default)]
    pub nmea: NmeaSettings,
}

impl Default for OutputConfig {
    fn default() -> Self {
        Self {
            status_interval_s: 1.0,
            sinks: Vec::new(),
            nmea: NmeaSettings::default(),
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
        let t = &o.nmea.talker;
        if t.len() != 2 || !t.bytes().all(|b| b.is_ascii_uppercase()) {
            return err(
                "output.nmea.talker",
                format!("`{t}`"),
                "use two upper-case letters, e.g. \"II\" (integrated instrumentation) or \"RA\" (radar)",
            );
        }
        for (i, s) in o.sinks.iter().enumerate() {
            if let Some((key, problem, fix)) = sink_problem(s, self.array.origin.is_some()) {
                return err(&format!("output.sink[{i}].{key}"), problem, fix);
            }
        }
        Ok(())
    }
}

/// The first problem with output `s` (its key relative to the sink's table), for a stream whose
/// positions are on the Earth when `georeferenced`. Shared by a node's `[output]` and
/// `sonotrack fuse`'s.
pub(super) fn sink_problem(
    s: &SinkConfig,
    georeferenced: bool,
) -> Option<(String, String, &'static str)> {
    let problem = |key: &str, what: String, fix: &'static str| Some((key.to_string(), what, fix));
    let sentences = s.nmea_sentences();
    let standard = sentences
        .iter()
        .any(|k| matches!(k, SentenceKind::Ttm | SentenceKind::Tll));
    if standard && !georeferenced {
        return problem(
            "sentences",
            "TTM and TLL give positions on the Earth, but the array has no origin".into(),
            "add [array.origin] with latitude_deg, longitude_deg, depth_m and heading_deg, or keep sentences = [\"psnt\"]",
        );
    }
    let nmea = matches!(
        s,
        SinkConfig::Udp {
            format: SerialFormat::Nmea,
            ..
        } | SinkConfig::Serial {
            format: SerialFormat::Nmea,
            ..
        }
    );
    if nmea && sentences.is_empty() {
        return problem(
            "sentences",
            "empty".into(),
            "name at least one of \"psnt\", \"ttm\", \"tll\"",
        );
    }
    if let Some(r) = s.max_rate_hz() {
        if !(r > 0.0) {
            return problem(
                "max_rate_hz",
                format!("{r}"),
                "use a positive rate, or leave it out for no limit",
            );
        }
    }
    match s {
        SinkConfig::Udp { address, .. } if !address.contains(':') => problem(
            "address",
            format!("`{address}` has no port"),
            "write host:port, e.g. \"192.168.1.20:5005\"",
        ),
        SinkConfig::Serial { baud, .. } if *baud == 0 => problem(
            "baud",
            "0".into(),
            "use the receiver's baud rate, e.g. 115200",
        ),
        SinkConfig::Mqtt(m) => m.problem(),
        SinkConfig::Jsonl { path, .. } if path.is_empty() => problem(
            "path",
            "empty".into(),
            "give a file path, or \"-\" for standard output",
        ),
        _ => None,
    }
}
