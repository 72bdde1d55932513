//! What the fusion service takes from a node's `tracks` topic: a track message read into the
//! fusion's one east-north-up frame, a deletion, or a counted reason to ignore the payload.
//!
//! Payloads are untrusted: bounded in size, parsed by serde into fixed shapes, every number
//! checked finite, the node's name taken from the topic (checked) and never from the payload.

use nalgebra::{Matrix3, Matrix6, Vector6};
use serde::Deserialize;

use crate::math::geo::{Geodetic, Origin, enu_turn};

/// Largest payload read (bytes); a track message is about 1 kB.
pub const MAX_PAYLOAD: usize = 64 * 1024;

/// One node track in the fusion frame.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeTrack {
    pub node: String,
    pub id: u64,
    pub confirmed: bool,
    /// Sample-clock UTC of the state, seconds since 1970.
    pub t: f64,
    /// Position (m) and velocity (m/s) in the fusion origin's frame (east-north-up turned by its
    /// heading).
    pub x: Vector6<f64>,
    pub p: Matrix6<f64>,
}

/// What a payload on a `tracks` topic is.
#[derive(Debug, Clone, PartialEq)]
pub enum Payload {
    Track(Box<NodeTrack>),
    /// The node ended its track `id`.
    Deleted(u64),
    /// Not used, and why (a counter's name).
    Ignored(&'static str),
}

#[derive(Deserialize)]
struct Wire {
    #[serde(rename = "type")]
    kind: String,
    id: Option<u64>,
    status: Option<String>,
    wall: Option<String>,
    /// Emission time and frame time (s of the node's stream): the state is `t_frame - t`
    /// older than the frame's wall time (the sound's travel).
    t: Option<f64>,
    t_frame: Option<f64>,
    vel_std: Option<[f64; 3]>,
    geo: Option<WireGeo>,
}

#[derive(Deserialize)]
struct WireGeo {
    lat_deg: Option<f64>,
    lon_deg: Option<f64>,
    depth_m: Option<f64>,
    enu_vel_m_s: Option<[f64; 3]>,
    enu_cov: Option<[f64; 6]>,
}

/// Which clock a report's time is read from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeBase {
    /// `wall`, the node's sample-clock UTC (live nodes: what the service uses).
    Wall,
    /// `t_frame`, seconds of the node's stream (replays that started together: trials).
    Stream,
}

/// Read a payload of node `node` into the frame of `origin` (east-north-up when its heading is
/// 0), timed by its wall clock.
pub fn parse(node: &str, payload: &[u8], origin: &Origin) -> Payload {
    parse_timed(node, payload, origin, TimeBase::Wall)
}

/// [`parse`], with the time read from `base`.
pub fn parse_timed(node: &str, payload: &[u8], origin: &Origin, base: TimeBase) -> Payload {
    if payload.len() > MAX_PAYLOAD {
        return Payload::Ignored("oversized");
    }
    let Ok(w) = serde_json::from_slice::<Wire>(payload) else {
        return Payload::Ignored("malformed");
    };
    match w.kind.as_str() {
        "deleted" => w.id.map_or(Payload::Ignored("malformed"), Payload::Deleted),
        "track" => track(node, &w, origin, base),
        "smoothed" => Payload::Ignored("smoothed"),
        _ => Payload::Ignored("unknown_type"),
    }
}

fn track(node: &str, w: &Wire, origin: &Origin, base: TimeBase) -> Payload {
    let Some(id) = w.id else {
        return Payload::Ignored("malformed");
    };
    let clock = match base {
        TimeBase::Wall => w.wall.as_deref().and_then(parse_rfc3339),
        TimeBase::Stream => w.t_frame.filter(|t| t.is_finite()),
    };
    let Some(wall) = clock else {
        return Payload::Ignored("no_wall_time");
    };
    let travel = match (w.t, w.t_frame) {
        (Some(t), Some(f)) if (0.0..60.0).contains(&(f - t)) => f - t,
        _ => 0.0,
    };
    let t = wall - travel;
    let Some(g) = &w.geo else {
        return Payload::Ignored("no_georeference");
    };
    let (Some(lat), Some(lon), Some(depth), Some(v), Some(c), Some(vs)) = (
        g.lat_deg,
        g.lon_deg,
        g.depth_m,
        g.enu_vel_m_s,
        g.enu_cov,
        w.vel_std,
    ) else {
        return Payload::Ignored("no_position");
    };
    let numbers = [lat, lon, depth].into_iter().chain(v).chain(c).chain(vs);
    if !numbers.clone().all(f64::is_finite) || lat.abs() > 90.0 || lon.abs() > 180.0 {
        return Payload::Ignored("malformed");
    }
    let pos = origin.local(&Geodetic {
        latitude_deg: lat,
        longitude_deg: lon,
        depth_m: depth,
    });
    // The node's east-north-up is the tangent plane near the track (within the array's reach
    // of its origin, which the message does not carry): turn it into the fusion's.
    // (nalgebra reads nested arrays as columns: transpose to get the rows.)
    let turn = Matrix3::from(enu_turn(
        (lat, lon),
        (origin.latitude_deg, origin.longitude_deg),
    ))
    .transpose();
    // East-north-up into the origin's frame (its +y axis heading `heading_deg`), as `local`.
    let (sh, ch) = origin.heading_deg.to_radians().sin_cos();
    let r = Matrix3::new(ch, -sh, 0.0, sh, ch, 0.0, 0.0, 0.0, 1.0) * turn;
    let cov = Matrix3::new(c[0], c[1], c[2], c[1], c[3], c[4], c[2], c[4], c[5]);
    let cov = r * cov * r.transpose();
    let vel = r * nalgebra::Vector3::from(v);
    let mut x = Vector6::zeros();
    let mut p = Matrix6::zeros();
    for k in 0..3 {
        x[k] = pos[k];
        x[k + 3] = vel[k];
        p[(k + 3, k + 3)] = vs[k] * vs[k];
    }
    p.fixed_view_mut::<3, 3>(0, 0).copy_from(&cov);
    if p.fixed_view::<3, 3>(0, 0).cholesky().is_none() {
        return Payload::Ignored("malformed");
    }
    Payload::Track(Box::new(NodeTrack {
        node: node.to_string(),
        id,
        confirmed: w.status.as_deref() != Some("tentative"),
        t,
        x,
        p,
    }))
}

/// Seconds since 1970 of an RFC 3339 UTC time as the stream writes it
/// (`2026-11-28T07:46:18.123Z`; fractions of any length, `Z` or `+00:00`).
pub fn parse_rfc3339(s: &str) -> Option<f64> {
    let s = s.strip_suffix('Z').or_else(|| s.strip_suffix("+00:00"))?;
    let (date, time) = s.split_once('T')?;
    let mut d = date.splitn(3, '-');
    let y: i64 = d.next()?.parse().ok()?;
    let m: i64 = d.next()?.parse().ok()?;
    let day: i64 = d.next()?.parse().ok()?;
    let mut t = time.splitn(3, ':');
    let hh: i64 = t.next()?.parse().ok()?;
    let mm: i64 = t.next()?.parse().ok()?;
    let ss: f64 = t.next()?.parse().ok()?;
    let ok = (1..=12).contains(&m)
        && (1..=31).contains(&day)
        && (0..24).contains(&hh)
        && (0..60).contains(&mm)
        && (0.0..61.0).contains(&ss)
        && (1970..=9999).contains(&y);
    if !ok {
        return None;
    }
    // Days from civil (H. Hinnant), the inverse of `output::rfc3339`.
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some((days * 86_400 + hh * 3600 + mm * 60) as f64 + ss)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::output::rfc3339;
    use std::time::{Duration, UNIX_EPOCH};

    fn origin() -> Origin {
        Origin {
            latitude_deg: 53.5,
            longitude_deg: 9.9,
            depth_m: 0.0,
            heading_deg: 0.0,
        }
    }

    #[test]
    fn rfc3339_round_trips() {
        for secs in [0u64, 951_782_400, 1_795_852_800, 4_102_444_799] {
            let t = UNIX_EPOCH + Duration::from_millis(secs * 1000 + 123);
            let s = rfc3339(t);
            let back = parse_rfc3339(&s).unwrap();
            assert!((back - secs as f64 - 0.123).abs() < 1e-6, "{s}");
        }
        for bad in [
            "",
            "2026-13-01T00:00:00Z",
            "2026-11-28 07:00:00Z",
            "2026-11-28T07:00:00",
        ] {
            assert!(parse_rfc3339(bad).is_none(), "{bad}");
        }
    }

    fn message(extra: &str) -> String {
        format!(
            r#"{{"type":"track","t":9.96,"t_frame":10.0,"id":7,"status":"confirmed","wall":"2026-11-28T07:00:01.500Z","vel_std":[0.1,0.1,0.1],"geo":{{"lat_deg":53.5001,"lon_deg":9.9001,"depth_m":4.0,"bearing_deg":30,"enu_vel_m_s":[1.0,0.5,0.0],"enu_cov":[0.04,0.01,0,0.09,0,0.25]{extra}}}}}"#
        )
    }

    #[test]
    fn a_track_message_lands_in_the_fusion_frame() {
        let Payload::Track(t) = parse("north", message("").as_bytes(), &origin()) else {
            panic!("a track")
        };
        assert_eq!((t.node.as_str(), t.id, t.confirmed), ("north", 7, true));
        assert!(
            (t.x[1] - 11.13).abs() < 0.05,
            "north of the origin {}",
            t.x[1]
        );
        assert!((t.x[0] - 6.63).abs() < 0.05, "east {}", t.x[0]);
        assert!((t.x[2] + 4.0).abs() < 1e-3, "up {}", t.x[2]);
        assert!((t.x[3] - 1.0).abs() < 1e-4 && (t.p[(1, 1)] - 0.09).abs() < 1e-6);
        assert!((t.p[(3, 3)] - 0.01).abs() < 1e-12);
        let day = parse_rfc3339("2026-11-28T07:00:00Z").unwrap();
        assert!((t.t - day - 1.46).abs() < 1e-6, "the emission time");
    }

    #[test]
    fn bad_payloads_are_named_not_fatal() {
        let o = origin();
        let cases: [(&[u8], &str); 6] = [
            (b"not json", "malformed"),
            (br#"{"type":"smoothed","id":1}"#, "smoothed"),
            (br#"{"type":"status"}"#, "unknown_type"),
            (br#"{"type":"track","id":1,"wall":"x"}"#, "no_wall_time"),
            (
                br#"{"type":"track","id":1,"wall":"2026-11-28T07:00:00Z"}"#,
                "no_georeference",
            ),
            (&[b'{'; MAX_PAYLOAD + 1], "oversized"),
        ];
        for (p, why) in cases {
            assert_eq!(parse("n", p, &o), Payload::Ignored(why));
        }
        let negative = message("").replace("[0.04,0.01,0,0.09,0,0.25]", "[-1,0,0,1,0,1]");
        assert_eq!(
            parse("n", negative.as_bytes(), &o),
            Payload::Ignored("malformed")
        );
        assert_eq!(
            parse("n", br#"{"type":"deleted","id":9}"#, &o),
            Payload::Deleted(9)
        );
    }
}
