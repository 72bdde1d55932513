//! What an output is, as the configuration's `[[output.sink]]` tables name it.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SerialFormat {
    /// One JSON object per line, as on every other output.
    #[default]
    Jsonl,
    /// `$PSNTR,...*CS` NMEA-0183-style sentences for small receivers.
    Nmea,
}

/// One output. Several may run at once; each has its own queue and thread.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase", deny_unknown_fields)]
pub enum SinkConfig {
    /// JSON Lines to a file, or to standard output with `path = "-"`.
    Jsonl {
        path: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        max_rate_hz: Option<f64>,
    },
    /// One JSON object per UDP datagram.
    Udp {
        /// `host:port` of the receiver.
        address: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        max_rate_hz: Option<f64>,
    },
    Serial {
        port: String,
        #[serde(default = "default_baud")]
        baud: u32,
        #[serde(default)]
        format: SerialFormat,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        max_rate_hz: Option<f64>,
    },
}

fn default_baud() -> u32 {
    115_200
}

impl SinkConfig {
    /// A short human name: `udp:10.0.0.5:9000`, `serial:/dev/ttyTHS0`, `jsonl:-`.
    pub fn name(&self) -> String {
        match self {
            SinkConfig::Jsonl { path, .. } => format!("jsonl:{path}"),
            SinkConfig::Udp { address, .. } => format!("udp:{address}"),
            SinkConfig::Serial { port, .. } => format!("serial:{port}"),
        }
    }

    pub fn max_rate_hz(&self) -> Option<f64> {
        match self {
            SinkConfig::Jsonl { max_rate_hz, .. }
            | SinkConfig::Udp { max_rate_hz, .. }
            | SinkConfig::Serial { max_rate_hz, .. } => *max_rate_hz,
        }
    }
}
