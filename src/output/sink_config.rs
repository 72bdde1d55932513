//! What an output is, as the configuration's `[[output.sink]]` tables name it.

use serde::{Deserialize, Serialize};

use crate::output::mqtt::MqttSinkConfig;
use crate::output::nmea::SentenceKind;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SerialFormat {
    /// One JSON object per line, as on every other output.
    #[default]
    Jsonl,
    /// NMEA 0183 sentences (those of `sentences`), for chart plotters and small receivers.
    Nmea,
}

fn default_sentences() -> Vec<SentenceKind> {
    vec![SentenceKind::Psnt]
}

fn is_default_sentences(v: &[SentenceKind]) -> bool {
    v == [SentenceKind::Psnt]
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
    /// One JSON object, or one message's NMEA sentences, per UDP datagram.
    Udp {
        /// `host:port` of the receiver.
        address: String,
        #[serde(default)]
        format: SerialFormat,
        /// With `format = "nmea"`: `psnt`, `ttm`, `tll` (default `["psnt"]`).
        #[serde(
            default = "default_sentences",
            skip_serializing_if = "is_default_sentences"
        )]
        sentences: Vec<SentenceKind>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        max_rate_hz: Option<f64>,
    },
    /// JSON Lines or NMEA sentences over a serial line. The line's capacity (baud / 10 bytes
    /// a second) is enforced: a report that would overrun it is dropped and counted as rate
    /// limited, and a track's end is always sent.
    Serial {
        port: String,
        #[serde(default = "default_baud")]
        baud: u32,
        #[serde(default)]
        format: SerialFormat,
        /// With `format = "nmea"`: `psnt`, `ttm`, `tll` (default `["psnt"]`).
        #[serde(
            default = "default_sentences",
            skip_serializing_if = "is_default_sentences"
        )]
        sentences: Vec<SentenceKind>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        max_rate_hz: Option<f64>,
    },
    /// The stream published to an MQTT broker under `<prefix>/<site>/<node>/…` (QoS 1,
    /// persistent session, last will, bounded offline queue).
    Mqtt(Box<MqttSinkConfig>),
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
            SinkConfig::Mqtt(m) => format!("mqtt:{}", m.broker.address),
        }
    }

    /// The NMEA sentences this output carries (none unless its format is NMEA).
    pub fn nmea_sentences(&self) -> &[SentenceKind] {
        match self {
            SinkConfig::Udp {
                format: SerialFormat::Nmea,
                sentences,
                ..
            }
            | SinkConfig::Serial {
                format: SerialFormat::Nmea,
                sentences,
                ..
            } => sentences,
            _ => &[],
        }
    }

    pub fn max_rate_hz(&self) -> Option<f64> {
        match self {
            SinkConfig::Jsonl { max_rate_hz, .. }
            | SinkConfig::Udp { max_rate_hz, .. }
            | SinkConfig::Serial { max_rate_hz, .. } => *max_rate_hz,
            SinkConfig::Mqtt(m) => m.max_rate_hz,
        }
    }
}
