//! The position stream's messages (schema version 1): track, status and deletion messages as
//! they are serialised ([`crate::output::outgoing`] holds one serialised for every sink).

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Serialize;

use crate::math::geo::{Origin, bearing_deg};
use crate::math::linalg::upper_triangle;
use crate::track::manager::{TrackReport, TrackStatus};
use crate::track::report::{EndReason, EstimateKind, TrackEnd};

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

/// What every message of one frame shares.
#[derive(Debug, Clone, Copy, Default)]
pub struct FrameStamp<'a> {
    /// Live: the frame's UTC time (from the sample clock).
    pub wall: Option<SystemTime>,
    /// Mean power of the frame's usable channels (full scale 1.0), for received levels.
    pub power: Option<f64>,
    /// How many track messages the frame has.
    pub reports: usize,
    /// The array's place on the Earth, when configured.
    pub origin: Option<&'a Origin>,
}

/// A track's place on the Earth and its motion over it (the array configured with
/// `array.origin`).
#[derive(Debug, Clone, Copy, Serialize, PartialEq)]
pub struct GeoFix {
    /// WGS-84 latitude and longitude, degrees (absent in direction mode without a range).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lat_deg: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lon_deg: Option<f64>,
    /// Metres below the surface (negative above it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub depth_m: Option<f64>,
    /// True bearing from the array origin, degrees clockwise from north.
    pub bearing_deg: f64,
    /// Horizontal distance from the array origin, metres (absent when not observable).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub range_m: Option<f64>,
    /// Speed over the ground (m/s) and true course (degrees), absent in direction mode.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub speed_m_s: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub course_deg: Option<f64>,
    /// East, north and up of the array origin, metres (absent in direction mode without a
    /// range).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub enu_m: Option<[f64; 3]>,
    /// 3-D mode: the velocity in east-north-up (m/s) and the position covariance turned into
    /// east-north-up, upper triangle ee, en, eu, nn, nu, uu (m²): what a fusion service needs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub enu_vel_m_s: Option<[f64; 3]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub enu_cov: Option<[f64; 6]>,
}

impl GeoFix {
    /// Where track report `r` is on the Earth, by `origin`.
    fn of(r: &TrackReport, origin: &Origin) -> Self {
        let direction = r.mode.angular();
        let point = if direction {
            r.range_m().map(|d| r.position.map(|u| u * d))
        } else {
            Some(r.position)
        };
        let [e, n, _] = origin.enu(r.position);
        let geo = point.map(|p| origin.geodetic(p));
        let [ve, vn, _] = origin.enu(r.velocity);
        let moving = !direction;
        Self {
            // (Nine decimals, 0.1 mm: what the node's own position carries. Seven, 1 cm,
            // would add more error than a compact array makes to whatever fuses positions.)
            lat_deg: geo.map(|g| round(g.latitude_deg, 9)),
            lon_deg: geo.map(|g| round(g.longitude_deg, 9)),
            depth_m: geo.map(|g| round(g.depth_m, 4)),
            bearing_deg: round(bearing_deg(e, n), 2),
            range_m: point.map(|p| {
                let [e, n, _] = origin.enu(p);
                round(e.hypot(n), 3)
            }),
            speed_m_s: moving.then(|| round(ve.hypot(vn), 3)),
            course_deg: moving.then(|| round(bearing_deg(ve, vn), 2)),
            enu_m: point.map(|p| origin.enu(p).map(|v| round(v, 4))),
            enu_vel_m_s: moving.then(|| origin.enu(r.velocity).map(|v| round(v, 4))),
            enu_cov: moving
                .then(|| upper_triangle(&origin.enu_cov(&r.pos_cov)).map(|v| round(v, 8))),
        }
    }
}

/// The `type` of a smoothed track message.
pub const SMOOTHED: &str = "smoothed";

/// A track message (schema version 1). See docs/stream.md.
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
    /// The frame's sequence number (0 for the stream's first frame): every message of one
    /// frame carries the same `seq`.
    pub seq: u64,
    /// How many track messages this frame has (a rate-limited output may carry fewer).
    pub frame_reports: usize,
    pub id: u64,
    pub status: TrackStatus,
    /// Which estimate: "filtered" (`type` "track"), "smoothed" (fixed-interval, `replay
    /// --smooth`) or "lagged" (fixed-lag, `smoothing.lag_s`; both `type` "smoothed").
    pub estimate: EstimateKind,
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
    /// Line mode: the angle between the direction and the array's axis (0° along it, from
    /// the first sensor towards the last; 90° broadside) and its standard deviation, degrees;
    /// `pos` is the direction in the half-plane the tracker keeps (see docs/stream.md).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cone_deg: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cone_std_deg: Option<f64>,
    /// Line mode with `array.plane_normal`: the mirror of `pos` across the axis, present while
    /// a source there would fit as well (the position is ambiguous); absent once the search
    /// volume rules it out.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mirror: Option<[f64; 3]>,
    /// A turning line array: the probability that the source is at `mirror` rather than at
    /// `pos`, from the frames so far; absent once the array's turn has decided between them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mirror_prob: Option<f64>,
    /// A turning array (`array.heading_input`): its heading at this frame (the array frame's
    /// +y axis, degrees clockwise from north), and the true bearings of `pos` and `mirror`
    /// by it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub heading_deg: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bearing_deg: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mirror_bearing_deg: Option<f64>,
    pub model: String,
    pub models: BTreeMap<String, f64>,
    pub turn_rate: f64,
    pub ess: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub support: Option<f64>,
    /// Estimated received level of this source, dB re full scale (a full-scale sine is
    /// −3 dB): the frame's mean channel power times the share of it coherent at the track's
    /// delays (absent when no peak was assigned to the track this frame).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub level_dbfs: Option<f64>,
    /// A track on the GCC-PHAT curves (`tracker.measurement` "curves" or "auto"):
    /// `measurement` is "curves" and `existence` the track's existence probability. Absent on
    /// a track the peaks carry.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub measurement: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub existence: Option<f64>,
    /// With `array.origin`: latitude, longitude, depth, bearing, range, speed and course.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub geo: Option<GeoFix>,
    /// A fused track (`sonotrack fuse`): the node tracks it joins now.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub fused_from: Vec<FusedSource>,
}

/// One node track behind a fused track.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FusedSource {
    pub node: String,
    pub id: u64,
}

impl TrackMessage {
    pub fn new(r: &TrackReport, model_names: &[String], frame: &FrameStamp) -> Self {
        let c = &r.pos_cov;
        let best = r
            .model_probs
            .iter()
            .enumerate()
            .max_by(|a, b| a.1.total_cmp(b.1))
            .map(|(i, _)| i)
            .unwrap_or(0);
        let direction = r.mode.angular();
        let (az, el) = if direction {
            let [x, y, z] = r.position;
            (
                Some(round(y.atan2(x).to_degrees(), 3)),
                Some(round(z.clamp(-1.0, 1.0).asin().to_degrees(), 3)),
            )
        } else {
            (None, None)
        };
        let cone = r.cone_deg();
        Self {
            kind: match r.estimate {
                EstimateKind::Filtered => "track",
                _ => SMOOTHED,
            },
            schema: SCHEMA_VERSION,
            t: round(r.t_s, 5),
            t_frame: round(r.t_frame_s, 5),
            wall: frame.wall.map(rfc3339),
            seq: r.seq,
            frame_reports: frame.reports,
            id: r.id,
            status: r.status,
            estimate: r.estimate,
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
            cone_deg: cone.map(|v| round(v[0], 3)),
            cone_std_deg: cone.map(|v| round(v[1], 3)),
            mirror: r.mirror.map(|m| m.map(|v| round(v, 4))),
            mirror_prob: r.mirror_prob.map(|p| round(f64::from(p), 4)),
            heading_deg: r.heading_deg.map(|h| round(h, 2)),
            bearing_deg: r
                .heading_deg
                .map(|h| round(true_bearing(h, &r.position), 2)),
            mirror_bearing_deg: r
                .heading_deg
                .zip(r.mirror)
                .map(|(h, m)| round(true_bearing(h, &m), 2)),
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
            level_dbfs: level_dbfs(frame.power, r.coherence),
            measurement: r.existence.map(|_| "curves"),
            existence: r.existence.map(|p| round(f64::from(p), 4)),
            geo: frame.origin.map(|o| {
                // A turning array's heading replaces the configured one.
                let o = Origin {
                    heading_deg: r.heading_deg.unwrap_or(o.heading_deg),
                    ..*o
                };
                GeoFix::of(r, &o)
            }),
            fused_from: Vec::new(),
        }
    }
}

/// The true bearing (degrees clockwise from north) of array-frame vector `v` for an array
/// whose +y axis heads `heading_deg`.
fn true_bearing(heading_deg: f64, v: &[f64; 3]) -> f64 {
    let o = Origin {
        latitude_deg: 0.0,
        longitude_deg: 0.0,
        depth_m: 0.0,
        heading_deg,
    };
    let [e, n, _] = o.enu(*v);
    bearing_deg(e, n)
}

/// The received level of a source: `power` × `coherence`, in dB (None where either is
/// missing or the product is not positive).
fn level_dbfs(power: Option<f64>, coherence: Option<f32>) -> Option<f64> {
    let p = power? * f64::from(coherence?);
    (p > 0.0 && p.is_finite()).then(|| round(10.0 * p.log10(), 1))
}

/// A track's end (schema version 1): sent once, after its last track message.
#[derive(Debug, Clone, Serialize)]
pub struct DeletedMessage {
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub schema: u32,
    /// Arrival time of the frame in which the track ended, seconds from the stream start.
    pub t: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wall: Option<String>,
    pub seq: u64,
    pub id: u64,
    /// `lost`, `unconfirmed`, `duplicate` or `replaced`.
    pub reason: EndReason,
    /// The tracker's explanation, as logged.
    pub detail: String,
    pub was_confirmed: bool,
}

impl DeletedMessage {
    pub fn new(e: &TrackEnd, seq: u64, t_frame_s: f64, wall: Option<SystemTime>) -> Self {
        Self {
            kind: "deleted",
            schema: SCHEMA_VERSION,
            t: round(t_frame_s, 5),
            wall: wall.map(rfc3339),
            seq,
            id: e.id,
            reason: e.reason,
            detail: e.detail.clone(),
            was_confirmed: e.was_confirmed,
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
    /// `tracker.measurement` "curves" or "auto": of `tracks`, those the GCC curves serve (a
    /// track the curves search found, or one whose peaks coasted or were lost while the curves
    /// still hold it); the others are served by their TDOA peaks.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub curves_tracks: Option<usize>,
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
    /// A turning array: frames that came without a (fresh) heading and kept the last one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub heading_missing_frames: Option<u64>,
    /// Channel pairs flagged as crosstalk now (a peak fixed at lag zero; their zero-lag peaks
    /// are ignored), as [a, b]; omitted when none.
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub crosstalk_pairs: Vec<[usize; 2]>,
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

    /// A line-mode report's message: the angle to the axis and its spread, and the mirror
    /// while it is one; no such keys in other modes.
    #[test]
    fn line_reports_carry_the_cone_angle() {
        use crate::track::motion::models::Kinematics;
        use crate::track::report::GaussianState;
        use crate::track::{LineAxes, TrackMode};
        let line = LineAxes {
            axis: [1.0, 0.0, 0.0],
            side: [0.0, 1.0, 0.0],
            plane: true,
            keep_side: false,
        };
        let th = 40f64.to_radians();
        let mut r = TrackReport {
            id: 3,
            status: crate::track::manager::TrackStatus::Confirmed,
            seq: 1,
            t_s: 0.5,
            t_frame_s: 0.5,
            position: [th.cos(), th.sin(), 0.0],
            velocity: [0.0; 3],
            pos_cov: [[0.0; 3]; 3],
            vel_std: [0.0; 3],
            model_probs: vec![1.0],
            turn_rate_rad_s: 0.0,
            ess: 100.0,
            support: 1.0,
            mode: TrackMode::Line,
            inv_range: None,
            coherence: None,
            state: GaussianState {
                mean: [0.0; 6],
                cov: [[0.0; 6]; 6],
            },
            kin: Kinematics::Plane,
            estimate: EstimateKind::Filtered,
            line: Some(line),
            mirror: Some([th.cos(), -th.sin(), 0.0]),
            mirror_prob: None,
            heading_deg: None,
            existence: None,
        };
        let stamp = FrameStamp {
            wall: None,
            power: None,
            reports: 1,
            origin: None,
        };
        let v = serde_json::to_value(TrackMessage::new(&r, &["cv".into()], &stamp)).unwrap();
        assert!((v["cone_deg"].as_f64().unwrap() - 40.0).abs() < 1e-3, "{v}");
        assert_eq!(v["cone_std_deg"].as_f64(), Some(0.0));
        assert!(
            (v["mirror"][1].as_f64().unwrap() + th.sin()).abs() < 1e-4,
            "{v}"
        );
        // A turning array heading 090: the array's +y axis points east, so the direction
        // 40° from its x axis towards y bears 180 - 40 = 140, and its mirror 220.
        r.heading_deg = Some(90.0);
        r.mirror_prob = Some(0.25);
        let v = serde_json::to_value(TrackMessage::new(&r, &["cv".into()], &stamp)).unwrap();
        assert_eq!(v["heading_deg"].as_f64(), Some(90.0));
        assert_eq!(v["mirror_prob"].as_f64(), Some(0.25));
        assert!(
            (v["bearing_deg"].as_f64().unwrap() - 140.0).abs() < 0.01,
            "{v}"
        );
        assert!(
            (v["mirror_bearing_deg"].as_f64().unwrap() - 220.0).abs() < 0.01,
            "{v}"
        );
        r.heading_deg = None;
        r.mirror_prob = None;
        r.line = None;
        r.mirror = None;
        r.mode = TrackMode::Direction;
        let v = serde_json::to_value(TrackMessage::new(&r, &["cv".into()], &stamp)).unwrap();
        assert!(
            v.get("cone_deg").is_none() && v.get("mirror").is_none(),
            "{v}"
        );
    }
}
