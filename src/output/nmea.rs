//! NMEA 0183 sentences for chart plotters, radar displays and small serial receivers.
//!
//! Standard sentences (need `array.origin`), talker `output.nmea.talker` (default `II`):
//! - `TTM` (tracked target message) per track report: target number 01–99, distance and true
//!   bearing from the array origin, speed and true course, the closest point of approach and
//!   the time to it (minutes, negative once passed), units (`N`: nautical miles and knots, `K`:
//!   kilometres and km/h), name `T<id>`, status (`Q` tentative, `T` tracking, `L` lost: sent once
//!   when the track ends), UTC `hhmmss.ss` of the frame when live, acquisition `A`.
//! - `TLL` (target latitude and longitude): number, `ddmm.mmmmm,N,dddmm.mmmmm,E`, name, UTC,
//!   status. Omitted where the position is unknown (direction mode without a range).
//!
//! Proprietary sentences ("P" + "SNT", sonotrack's mnemonic; the `psnt` family):
//! `$PSNTR,t,id,status,x,y,z,vx,vy,vz,sd,model*HH` per track report (status T tentative,
//! C confirmed, K coasting; `sd` the RMS position standard deviation in metres),
//! `$PSNTD,t,id,reason*HH` when a track ends, and `$PSNTS,t,frames_in,frames_dropped,backend,
//! tracks*HH` per status.
//!
//! HH is the XOR of every character between `$` and `*`, in upper-case hex; lines end in CR LF
//! and are at most 82 characters, `$` and CR LF included (fixed `heapless` buffers: a sentence
//! that would not fit is sent without its name field, and values are clamped to what fits).

use std::collections::BTreeMap;
use std::fmt::Write;

use serde::{Deserialize, Serialize};

use crate::output::message::{DeletedMessage, GeoFix, StatusMessage, TrackMessage};
use crate::track::manager::TrackStatus;

/// Longest NMEA 0183 sentence, `$` and CR LF included.
pub const MAX_SENTENCE: usize = 82;

/// One sentence in a fixed buffer.
pub type Sentence = heapless::String<MAX_SENTENCE>;

/// Which sentences an output carries (`sentences` of an `[[output.sink]]` table).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SentenceKind {
    /// `$PSNTR`, `$PSNTD` and `$PSNTS` (sonotrack's own, in the array frame).
    Psnt,
    /// `$--TTM`: distance, bearing, speed and course from the array origin.
    Ttm,
    /// `$--TLL`: latitude and longitude.
    Tll,
}

impl SentenceKind {
    /// Bytes of a typical track report's sentence of this kind (for line budgets; measured on
    /// replays, CR LF included).
    pub fn typical_report_bytes(self) -> usize {
        match self {
            SentenceKind::Psnt => 74,
            SentenceKind::Ttm => 76,
            SentenceKind::Tll => 58,
        }
    }
}

/// Units of TTM distances and speeds (`output.nmea.units`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NmeaUnits {
    /// Nautical miles and knots (`N`).
    #[default]
    Nautical,
    /// Kilometres and kilometres per hour (`K`).
    Metric,
}

/// The `[output.nmea]` table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NmeaSettings {
    /// Two-character talker of the TTM and TLL sentences (`II`: integrated instrumentation;
    /// some displays want `RA`).
    #[serde(default = "default_talker")]
    pub talker: String,
    #[serde(default)]
    pub units: NmeaUnits,
}

impl Default for NmeaSettings {
    fn default() -> Self {
        Self {
            talker: default_talker(),
            units: NmeaUnits::default(),
        }
    }
}

fn default_talker() -> String {
    "II".into()
}

/// The sentences of one message, each tagged with its kind; a sink writes those it carries.
#[derive(Debug, Clone, Default)]
pub struct NmeaLines(pub heapless::Vec<(SentenceKind, Sentence), 3>);

impl NmeaLines {
    /// The sentences of `kinds`, in order.
    pub fn of<'a>(&'a self, kinds: &'a [SentenceKind]) -> impl Iterator<Item = &'a str> + 'a {
        self.0
            .iter()
            .filter(move |(k, _)| kinds.contains(k))
            .map(|(_, s)| s.as_str())
    }

    fn push(&mut self, kind: SentenceKind, s: Option<Sentence>) {
        if let Some(s) = s {
            // (Three slots: a message yields at most one sentence of each kind.)
            let _ = self.0.push((kind, s));
        }
    }
}

/// A track's TTM/TLL state: its target number and last fix (repeated when it is lost).
#[derive(Debug, Clone, Copy)]
struct Target {
    number: u8,
    fix: GeoFix,
}

/// Builds the sentences the outputs want, once per message, and numbers the targets.
#[derive(Debug, Clone)]
pub struct NmeaEncoder {
    kinds: Vec<SentenceKind>,
    settings: NmeaSettings,
    targets: BTreeMap<u64, Target>,
    /// Track reports without a TTM/TLL because all 99 target numbers were in use.
    pub unnumbered: u64,
}

impl NmeaEncoder {
    /// An encoder for the sentences of `kinds` (the union over the outputs).
    pub fn new(mut kinds: Vec<SentenceKind>, settings: NmeaSettings) -> Self {
        kinds.sort();
        kinds.dedup();
        Self {
            kinds,
            settings,
            targets: BTreeMap::new(),
            unnumbered: 0,
        }
    }

    fn wants(&self, k: SentenceKind) -> bool {
        self.kinds.contains(&k)
    }

    pub fn track(&mut self, m: &TrackMessage) -> NmeaLines {
        let mut out = NmeaLines::default();
        if self.wants(SentenceKind::Psnt) {
            out.push(SentenceKind::Psnt, Some(track_sentence(m)));
        }
        let standard = self.wants(SentenceKind::Ttm) || self.wants(SentenceKind::Tll);
        let Some(fix) = m.geo.filter(|_| standard) else {
            return out;
        };
        let Some(number) = self.number_for(m.id) else {
            self.unnumbered += 1;
            return out;
        };
        self.targets.insert(m.id, Target { number, fix });
        let status = match m.status {
            TrackStatus::Tentative => 'Q',
            TrackStatus::Confirmed | TrackStatus::Coasting => 'T',
        };
        let utc = m.wall.as_deref().map(utc_of_rfc3339).unwrap_or_default();
        if self.wants(SentenceKind::Ttm) {
            let s = ttm(&self.settings, number, m.id, &fix, status, &utc);
            out.push(SentenceKind::Ttm, Some(s));
        }
        if self.wants(SentenceKind::Tll) {
            out.push(
                SentenceKind::Tll,
                tll(&self.settings, number, m.id, &fix, status, &utc),
            );
        }
        out
    }

    /// The `L` (lost) sentences of a track that ended, repeating its last fix; its number is
    /// free again.
    pub fn deleted(&mut self, m: &DeletedMessage) -> NmeaLines {
        let mut out = NmeaLines::default();
        if self.wants(SentenceKind::Psnt) {
            out.push(SentenceKind::Psnt, Some(deleted_sentence(m)));
        }
        let Some(t) = self.targets.remove(&m.id) else {
            return out;
        };
        let utc = m.wall.as_deref().map(utc_of_rfc3339).unwrap_or_default();
        if self.wants(SentenceKind::Ttm) {
            let s = ttm(&self.settings, t.number, m.id, &t.fix, 'L', &utc);
            out.push(SentenceKind::Ttm, Some(s));
        }
        if self.wants(SentenceKind::Tll) {
            out.push(
                SentenceKind::Tll,
                tll(&self.settings, t.number, m.id, &t.fix, 'L', &utc),
            );
        }
        out
    }

    pub fn status(&mut self, m: &StatusMessage) -> NmeaLines {
        let mut out = NmeaLines::default();
        if self.wants(SentenceKind::Psnt) {
            out.push(SentenceKind::Psnt, Some(status_sentence(m)));
        }
        out
    }

    /// Track `id`'s target number: the one it has, else the lowest free one in 1..=99.
    fn number_for(&self, id: u64) -> Option<u8> {
        if let Some(t) = self.targets.get(&id) {
            return Some(t.number);
        }
        (1..=99u8).find(|n| self.targets.values().all(|t| t.number != *n))
    }
}

/// XOR checksum of a sentence body (between `$` and `*`).
pub fn checksum(body: &str) -> u8 {
    body.bytes().fold(0u8, |a, b| a ^ b)
}

/// `$body*HH\r\n` in a fixed buffer; None when it does not fit.
fn wrap(body: &str) -> Option<Sentence> {
    let mut s = Sentence::new();
    write!(s, "${body}*{:02X}\r\n", checksum(body)).ok()?;
    Some(s)
}

/// A sentence body built into a fixed buffer (None when it overflows).
fn body(f: impl FnOnce(&mut heapless::String<MAX_SENTENCE>) -> std::fmt::Result) -> Option<String> {
    let mut b = heapless::String::<MAX_SENTENCE>::new();
    f(&mut b).ok()?;
    Some(b.as_str().to_owned())
}

/// Clamp a value into what a field of the sentence may hold.
fn fit(x: f64, limit: f64) -> f64 {
    if x.is_finite() {
        x.clamp(-limit, limit)
    } else {
        0.0
    }
}

pub fn track_sentence(m: &TrackMessage) -> Sentence {
    let status = match m.status {
        TrackStatus::Tentative => 'T',
        TrackStatus::Confirmed => 'C',
        TrackStatus::Coasting => 'K',
    };
    let sd = (m.pos_std[0].powi(2) + m.pos_std[1].powi(2) + m.pos_std[2].powi(2)).sqrt();
    let model: String = m
        .model
        .chars()
        .filter(|c| c.is_ascii_alphanumeric())
        .take(8)
        .collect();
    let p = m.pos.map(|v| fit(v, 99_999.0));
    let v = m.vel.map(|v| fit(v, 999.0));
    let make = |model: &str| {
        let text = body(|b| {
            write!(
                b,
                "PSNTR,{:.3},{},{},{:.3},{:.3},{:.3},{:.2},{:.2},{:.2},{:.3},{}",
                fit(m.t, 9.9e7),
                m.id % 100_000_000,
                status,
                p[0],
                p[1],
                p[2],
                v[0],
                v[1],
                v[2],
                fit(sd, 99_999.0),
                model
            )
        })?;
        wrap(&text)
    };
    make(&model)
        .or_else(|| make(""))
        .unwrap_or_else(|| overflow_sentence("PSNTR"))
}

pub fn deleted_sentence(m: &DeletedMessage) -> Sentence {
    let reason = serde_json::to_value(m.reason)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default();
    wrap(&format!(
        "PSNTD,{:.3},{},{reason}",
        fit(m.t, 9.9e7),
        m.id % 100_000_000
    ))
    .unwrap_or_else(|| overflow_sentence("PSNTD"))
}

pub fn status_sentence(m: &StatusMessage) -> Sentence {
    let backend: String = m.backend.chars().take(8).collect();
    wrap(&format!(
        "PSNTS,{:.3},{},{},{},{}",
        fit(m.t, 9.9e7),
        m.frames_in % 10_000_000_000,
        m.frames_dropped % 10_000_000_000,
        backend,
        m.tracks
    ))
    .unwrap_or_else(|| overflow_sentence("PSNTS"))
}

/// A sentence that cannot overflow, for the (unreachable with clamped fields) case that one
/// would: the address with empty fields.
fn overflow_sentence(address: &str) -> Sentence {
    wrap(address).unwrap_or_default()
}

/// `hhmmss.ss` from an RFC 3339 time (`2026-11-27T14:05:09.250Z` -> `140509.25`).
fn utc_of_rfc3339(t: &str) -> String {
    let Some((_, time)) = t.split_once('T') else {
        return String::new();
    };
    let digits: String = time
        .chars()
        .filter(|c| c.is_ascii_digit() || *c == '.')
        .collect();
    // hhmmss.fff -> hhmmss.ff
    match digits.split_once('.') {
        Some((hms, frac)) if hms.len() == 6 => {
            format!("{hms}.{:0<2}", &frac[..frac.len().min(2)])
        }
        _ if digits.len() == 6 => format!("{digits}.00"),
        _ => String::new(),
    }
}

/// Distance and speed in the sentence's units: (distance, speed, unit letter).
fn in_units(units: NmeaUnits, metres: f64, m_s: f64) -> (f64, f64, char) {
    match units {
        NmeaUnits::Nautical => (metres / 1852.0, m_s * 3600.0 / 1852.0, 'N'),
        NmeaUnits::Metric => (metres / 1000.0, m_s * 3.6, 'K'),
    }
}

/// Closest point of approach to the array origin on a straight course: (distance in m, time to
/// it in minutes; negative once passed). None without a position or a motion.
fn cpa(fix: &GeoFix) -> Option<(f64, f64)> {
    let r = fix.range_m?;
    let speed = fix.speed_m_s?;
    let course = fix.course_deg?;
    if !(speed > 1e-6) {
        return None;
    }
    let b = fix.bearing_deg.to_radians();
    let (pe, pn) = (r * b.sin(), r * b.cos());
    let c = course.to_radians();
    let (ve, vn) = (speed * c.sin(), speed * c.cos());
    let t = -(pe * ve + pn * vn) / (speed * speed);
    let d = (pe + ve * t).hypot(pn + vn * t);
    Some((d, t / 60.0))
}

/// Optional number field: empty when absent.
fn opt(x: Option<f64>, decimals: usize, limit: f64) -> String {
    x.map(|v| format!("{:.*}", decimals, fit(v, limit)))
        .unwrap_or_default()
}

fn ttm(s: &NmeaSettings, number: u8, id: u64, fix: &GeoFix, status: char, utc: &str) -> Sentence {
    let to_units = |m: Option<f64>, v: Option<f64>| {
        let (d, sp, _) = in_units(s.units, m.unwrap_or(0.0), v.unwrap_or(0.0));
        (m.map(|_| d), v.map(|_| sp))
    };
    let (dist, speed) = to_units(fix.range_m, fix.speed_m_s);
    let (_, _, unit) = in_units(s.units, 0.0, 0.0);
    let (cpa_d, tcpa) = match cpa(fix) {
        Some((d, t)) => (to_units(Some(d), None).0, Some(t)),
        None => (None, None),
    };
    let course = fix.course_deg.filter(|_| speed.is_some());
    let make = |name: &str| {
        let b = body(|b| {
            write!(
                b,
                "{}TTM,{:02},{},{:.1},T,{},{},T,{},{},{},{},{},,{},A",
                s.talker,
                number,
                opt(dist, 4, 9999.0),
                fit(fix.bearing_deg, 360.0),
                opt(speed, 2, 999.0),
                opt(course, 1, 360.0),
                opt(cpa_d, 4, 9999.0),
                opt(tcpa, 2, 99_999.0),
                unit,
                name,
                status,
                utc
            )
        })?;
        wrap(&b)
    };
    make(&format!("T{id}"))
        .or_else(|| make(""))
        .unwrap_or_else(|| overflow_sentence("IITTM"))
}

/// `ddmm.mmmmm` / `dddmm.mmmmm` and the hemisphere letter.
fn degrees_minutes(v: f64, deg_digits: usize, pos: char, neg: char) -> String {
    let a = v.abs();
    let mut d = a.trunc();
    let mut min = (a - d) * 60.0;
    if (min * 1e5).round() >= 60.0 * 1e5 {
        d += 1.0;
        min = 0.0;
    }
    format!(
        "{:0w$}{:08.5},{}",
        d as u32,
        min,
        if v < 0.0 { neg } else { pos },
        w = deg_digits
    )
}

fn tll(
    s: &NmeaSettings,
    number: u8,
    id: u64,
    fix: &GeoFix,
    status: char,
    utc: &str,
) -> Option<Sentence> {
    let (lat, lon) = (fix.lat_deg?, fix.lon_deg?);
    let lat = degrees_minutes(fit(lat, 90.0), 2, 'N', 'S');
    let lon = degrees_minutes(fit(lon, 180.0), 3, 'E', 'W');
    let make = |name: &str| {
        let b = body(|b| {
            write!(
                b,
                "{}TLL,{:02},{lat},{lon},{name},{utc},{status},",
                s.talker, number
            )
        })?;
        wrap(&b)
    };
    make(&format!("T{id}")).or_else(|| make(""))
}

/// Check a received sentence's checksum (for receivers and tests).
pub fn verify(line: &str) -> bool {
    let line = line.trim_end();
    let Some(body) = line.strip_prefix('$') else {
        return false;
    };
    let Some((body, cs)) = body.rsplit_once('*') else {
        return false;
    };
    u8::from_str_radix(cs, 16).is_ok_and(|v| v == checksum(body))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_checksum() {
        // A classic GPS sentence with a published checksum.
        assert!(verify(
            "$GPGGA,092750.000,5321.6802,N,00630.3372,W,1,8,1.03,61.7,M,55.2,M,,*76"
        ));
        assert!(!verify(
            "$GPGGA,092750.000,5321.6802,N,00630.3372,W,1,8,1.03,61.7,M,55.2,M,,*77"
        ));
        let s = wrap("PSNTS,1.000,10,0,cpu,1").unwrap();
        assert!(verify(&s) && s.ends_with("\r\n"));
    }

    #[test]
    fn utc_from_the_stream_time() {
        assert_eq!(utc_of_rfc3339("2026-11-27T14:05:09.257Z"), "140509.25");
        assert_eq!(utc_of_rfc3339("2026-11-27T00:00:00.000Z"), "000000.00");
        assert_eq!(utc_of_rfc3339("nonsense"), "");
    }

    #[test]
    fn degrees_and_minutes() {
        assert_eq!(degrees_minutes(53.5, 2, 'N', 'S'), "5330.00000,N");
        assert_eq!(degrees_minutes(-6.25, 3, 'E', 'W'), "00615.00000,W");
        // 59.999999' rounds up into the next degree, never to "60.00000".
        assert_eq!(degrees_minutes(9.999_999_99, 3, 'E', 'W'), "01000.00000,E");
    }

    fn fix(range: f64, bearing: f64, speed: f64, course: f64) -> GeoFix {
        GeoFix {
            lat_deg: Some(53.5),
            lon_deg: Some(-6.25),
            depth_m: Some(2.0),
            bearing_deg: bearing,
            range_m: Some(range),
            speed_m_s: Some(speed),
            course_deg: Some(course),
            enu_m: None,
            enu_vel_m_s: None,
            enu_cov: None,
        }
    }

    /// A target 1852 m due north heading south at 1852 m/h (1 knot) passes over the origin in
    /// 60 minutes; heading east it is at its closest now.
    #[test]
    fn closest_point_of_approach() {
        let (d, t) = cpa(&fix(1852.0, 0.0, 1852.0 / 3600.0, 180.0)).unwrap();
        assert!(d < 1e-6 && (t - 60.0).abs() < 1e-9);
        let (d, t) = cpa(&fix(1852.0, 0.0, 1.0, 90.0)).unwrap();
        assert!((d - 1852.0).abs() < 1e-6 && t.abs() < 1e-9);
    }

    #[test]
    fn ttm_and_tll_fields() {
        let s = NmeaSettings::default();
        let t = ttm(
            &s,
            7,
            12,
            &fix(1852.0, 45.0, 1852.0 / 3600.0, 225.0),
            'T',
            "101010.50",
        );
        assert!(verify(&t), "{t}");
        let f: Vec<&str> = t.trim_end().split(['*', ',']).collect();
        assert_eq!(f[0], "$IITTM");
        assert_eq!(
            &f[1..8],
            &["07", "1.0000", "45.0", "T", "1.00", "225.0", "T"]
        );
        assert_eq!(
            &f[8..16],
            &["0.0000", "60.00", "N", "T12", "T", "", "101010.50", "A"]
        );
        let l = tll(&s, 7, 12, &fix(1852.0, 45.0, 1.0, 0.0), 'L', "").unwrap();
        assert!(verify(&l), "{l}");
        assert!(
            l.starts_with("$IITLL,07,5330.00000,N,00615.00000,W,T12,,L,*"),
            "{l}"
        );
        let metric = NmeaSettings {
            talker: "RA".into(),
            units: NmeaUnits::Metric,
        };
        let t = ttm(&metric, 1, 1, &fix(500.0, 0.0, 1.0, 0.0), 'Q', "");
        assert!(t.starts_with("$RATTM,01,0.5000,0.0,T,3.60,0.0,T,"), "{t}");
    }

    /// Extreme values still give a sentence of at most 82 characters with a valid checksum.
    #[test]
    fn sentences_never_exceed_82_characters() {
        let s = NmeaSettings::default();
        let big = GeoFix {
            lat_deg: Some(-89.999_999),
            lon_deg: Some(-179.999_999),
            depth_m: Some(1e9),
            bearing_deg: 359.99,
            range_m: Some(1e12),
            speed_m_s: Some(1e9),
            course_deg: Some(359.9),
            enu_m: None,
            enu_vel_m_s: None,
            enu_cov: None,
        };
        let t = ttm(&s, 99, u64::MAX, &big, 'T', "235959.99");
        assert!(verify(&t) && t.len() <= MAX_SENTENCE, "{t}");
        let l = tll(&s, 99, u64::MAX, &big, 'T', "235959.99").unwrap();
        assert!(verify(&l) && l.len() <= MAX_SENTENCE, "{l}");
    }
}
