//! The position stream's messages (schema version 1): track and status messages, serialised
//! once (JSON, and NMEA when a serial sink wants it) and shared by every sink.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Serialize;

use crate::math::linalg::upper_triangle;
use crate::output::nmea;
use crate::track::TrackMode;
use crate::track::manager::{TrackReport, TrackStatus};

/// Version of the message schema; bumped on any incompatible change.
pub const SCHEMA_VERSION: u32 = 1;

/// Round to a fixed number of decimals for compact, stable output.
fn round(x: f64, decimals: i32) -> f64 {
    let s = 10f64.powi(decimals);
    let r = (x * s).round() / s;
    if r == 0.0 { 0.0 } else { r }
}

/// RFC 3339 UTC time with milliseconds.
pub fn rfc3339(t: SystemTime) -> String {
    let d = t.duration_since(UNIX_EPOCH).unwrap_or(Duration::ZERO);
    let secs = d.as_secs() as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Civil date from days since 1970-01-01 (H. Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = if month <= 2 { y + 1 } else { y };
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        d.subsec_millis()
    )
}

/// A track message (schema version 1). See README.md, "Output schema".
#[derive(Debug, Clone, Serialize)]
pub struct TrackMessage {
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub schema: u32,
    /// Emission time of the reported state, seconds from the stream start (in direction mode,
    /// which knows no range, the arrival time: `t_frame`).
    pub t: f64,
    /// Arrival time of the frame centre at the array, seconds from the stream start.
    pub t_frame: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wall: Option<String>,
    pub seq: u64,
    pub id: u64,
    pub status: TrackStatus,
    /// Metres, array frame (3-D mode); a unit vector towards the source in direction mode.
    pub pos: [f64; 3],
    pub vel: [f64; 3],
    pub pos_std: [f64; 3],
    /// Upper triangle of the position covariance: xx, xy, xz, yy, yz, zz (m²).
    pub pos_cov: [f64; 6],
    pub vel_std: [f64; 3],
    #[serde(skip_serializing_if = "Option::is_none")]
    pub az_deg: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub el_deg: Option<f64>,
    /// Direction mode: the inverse range (1/m; 0 is a plane wave) and its standard deviation.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub inv_range: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub inv_range_std: Option<f64>,
    /// Direction mode: the range (m), 1 / `inv_range`, where the inverse range is at least
    /// twice its standard deviation (nearer, the wavefront's curvature measures it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub range_m: Option<f64>,
    pub model: String,
    pub models: BTreeMap<String, f64>,
    pub turn_rate: f64,
    pub ess: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub support: Option<f64>,
}

impl TrackMessage {
    pub fn new(r: &TrackReport, model_names: &[String], wall: Option<SystemTime>) -> Self {
        let c = &r.pos_cov;
        let best = r
            .model_probs
            .iter()
            .enumerate()
            .max_by(|a, b| a.1.total_cmp(b.1))
            .map(|(i, _)| i)
            .unwrap_or(0);
        let direction = r.mode == TrackMode::Direction;
        let (az, el) = if direction {
            let [x, y, z] = r.position;
            (
                Some(round(y.atan2(x).to_degrees(), 3)),
                Some(round(z.clamp(-1.0, 1.0).asin().to_degrees(), 3)),
            )
        } else {
            (None, None)
        };
        Self {
            kind: "track",
            schema: SCHEMA_VERSION,
            t: round(r.t_s, 5),
            t_frame: round(r.t_frame_s, 5),
            wall: wall.map(rfc3339),
            seq: r.seq,
            id: r.id,
            status: r.status,
            pos: r.position.map(|v| round(v, 4)),
            vel: r.velocity.map(|v| round(v, 4)),
            pos_std: [0, 1, 2].map(|i| round(c[i][i].max(0.0).sqrt(), 5)),
            pos_cov: upper_triangle(c).map(|v| round(v, 8)),
            vel_std: r.vel_std.map(|v| round(v, 4)),
            az_deg: az,
            el_deg: el,
            inv_range: r.inv_range.map(|v| round(v[0], 6)),
            inv_range_std: r.inv_range.map(|v| round(v[1], 6)),
            range_m: r.range_m().map(|v| round(v, 3)),
            model: model_names.get(best).cloned().unwrap_or_default(),
            models: model_names
                .iter()
                .zip(&r.model_probs)
                .map(|(n, p)| (n.clone(), round(f64::from(*p), 4)))
                .collect(),
            turn_rate: round(f64::from(r.turn_rate_rad_s), 5),
            ess: round(f64::from(r.ess), 1),
            support: r
                .support
                .is_finite()
                .then(|| round(f64::from(r.support), 3)),
        }
    }
}

/// A status message (schema version 1), once per `output.status_interval_s`.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct StatusMessage {
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub schema: u32,
    /// Stream time of the last frame, seconds.
    pub t: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wall: Option<String>,
    pub backend: String,
    pub frames_in: u64,
    pub frames_processed: u64,
    pub frames_dropped: u64,
    /// Dropped frames by reason.
    pub dropped: BTreeMap<String, u64>,
    /// Non-finite samples replaced by zero so far.
    pub nonfinite_samples: u64,
    /// Frames in which each channel was unusable (dead or mostly non-finite).
    pub bad_channel_frames: Vec<u64>,
    pub backend_switches: u64,
    pub tracks: usize,
    /// Of `tracks`, those confirmed.
    pub confirmed_tracks: usize,
    /// Why the last frame had no confirmed track (absent when it had one): `no_peaks` (no
    /// pair's peak stood out of the noise), `too_few_pairs` (too few pairs had a peak no track
    /// explains), `no_fix` (the peaks fit no point), `fixes_disagree` (consecutive fixes did
    /// not agree yet), `already_tracked`, `slots_full`, or `awaiting_confirmation` (a
    /// tentative track exists).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub no_track: Option<&'static str>,
    /// Frames without a confirmed track so far, by that reason.
    pub no_track_frames: BTreeMap<&'static str, u64>,
    /// The TDOA noise the tracker assumes now, in samples: its online estimate from the
    /// tracks' residuals, at least `tracker.tdoa_std_samples`. It rises with reverberation,
    /// noise or a second source near a track.
    pub tdoa_noise_samples: f64,
    /// Mean and largest processing time per frame since the last status, microseconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub proc_us_mean: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub proc_us_max: Option<f64>,
    /// Messages each output dropped (queue full or write failed), by output name.
    pub sink_drops: BTreeMap<String, u64>,
}

/// One serialised message, shared by every sink.
#[derive(Debug, Clone)]
pub struct Message {
    pub is_status: bool,
    pub track_id: Option<u64>,
    /// Stream time, for rate limiting.
    pub t_s: f64,
    pub json: String,
    pub nmea: Option<String>,
    /// Live: when the frame behind this message was complete (for the latency figure).
    pub ready: Option<std::time::Instant>,
}

impl Message {
    pub fn track(m: &TrackMessage, want_nmea: bool) -> Self {
        Self {
            is_status: false,
            track_id: Some(m.id),
            t_s: m.t,
            json: serde_json::to_string(m).unwrap_or_default(),
            nmea: want_nmea.then(|| nmea::track_sentence(m)),
            ready: None,
        }
    }

    pub fn status(m: &StatusMessage, want_nmea: bool) -> Self {
        Self {
            is_status: true,
            track_id: None,
            t_s: m.t,
            json: serde_json::to_string(m).unwrap_or_default(),
            nmea: want_nmea.then(|| nmea::status_sentence(m)),
            ready: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_known_dates() {
        assert_eq!(rfc3339(UNIX_EPOCH), "1970-01-01T00:00:00.000Z");
        let t = UNIX_EPOCH + Duration::from_millis(1_795_262_400_123);
        assert_eq!(rfc3339(t), "2026-11-21T12:00:00.123Z");
        let leap = UNIX_EPOCH + Duration::from_secs(951_782_400); // 2000-02-29
        assert_eq!(rfc3339(leap), "2000-02-29T00:00:00.000Z");
    }
}
