//! One message serialised for every sink: its JSON, and its NMEA sentences when some output
//! wants them ([`crate::output::nmea`]), with what the sinks route and rate-limit it by.

use crate::output::message::{DeletedMessage, SMOOTHED, StatusMessage, TrackMessage};
use crate::output::nmea::{NmeaEncoder, NmeaLines};

/// What a message says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MessageKind {
    Track,
    /// A track's state again, smoothed (`"type": "smoothed"`).
    Smoothed,
    Status,
    Deleted,
}

/// One serialised message, shared by every sink.
#[derive(Debug, Clone)]
pub struct Message {
    pub kind: MessageKind,
    pub track_id: Option<u64>,
    /// Stream time, for rate limiting.
    pub t_s: f64,
    pub json: String,
    /// The NMEA sentences some output wants, when one does.
    pub nmea: NmeaLines,
    /// Live: when the frame behind this message was complete (for the latency figure).
    pub ready: Option<std::time::Instant>,
}

impl Message {
    /// A track message; a smoothed one (`m.kind` "smoothed") carries no NMEA sentences (a
    /// sentence receiver knows no second estimate of a past fix).
    pub fn track(m: &TrackMessage, nmea: Option<&mut NmeaEncoder>) -> Self {
        let smoothed = m.kind == SMOOTHED;
        Self {
            kind: if smoothed {
                MessageKind::Smoothed
            } else {
                MessageKind::Track
            },
            track_id: Some(m.id),
            t_s: m.t,
            json: serde_json::to_string(m).unwrap_or_default(),
            nmea: nmea
                .filter(|_| !smoothed)
                .map(|n| n.track(m))
                .unwrap_or_default(),
            ready: None,
        }
    }

    pub fn status(m: &StatusMessage, nmea: Option<&mut NmeaEncoder>) -> Self {
        Self {
            kind: MessageKind::Status,
            track_id: None,
            t_s: m.t,
            json: serde_json::to_string(m).unwrap_or_default(),
            nmea: nmea.map(|n| n.status(m)).unwrap_or_default(),
            ready: None,
        }
    }

    pub fn deleted(m: &DeletedMessage, nmea: Option<&mut NmeaEncoder>) -> Self {
        Self {
            kind: MessageKind::Deleted,
            track_id: Some(m.id),
            t_s: m.t,
            json: serde_json::to_string(m).unwrap_or_default(),
            nmea: nmea.map(|n| n.deleted(m)).unwrap_or_default(),
            ready: None,
        }
    }

    /// A message of another producer (tests, tools): JSON only.
    pub fn json_only(kind: MessageKind, track_id: Option<u64>, t_s: f64, json: String) -> Self {
        Self {
            kind,
            track_id,
            t_s,
            json,
            nmea: NmeaLines::default(),
            ready: None,
        }
    }
}
