//! The `[array]` table: sensor positions, speed of sound, tracking mode and search volume, and
//! the checks that the geometry can deliver what the mode asks.

use serde::{Deserialize, Serialize};

use super::Config;
use crate::dsp::geometry::{ArrayGeometry, Span};
use crate::error::ConfigError;
use crate::math::geo::Origin;
use crate::track::TrackMode;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ArrayConfig {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
    /// Sensor positions in metres, in sensor order (see `audio.channel_map`).
    pub sensors_m: Vec<[f64; 3]>,
    /// Speed of sound: about 343 in air at 20 °C, about 1500 in sea water.
    pub speed_of_sound_m_s: f64,
    #[serde(default)]
    pub mode: TrackMode,
    /// Optional search volume (array frame). Tracks outside it are not born; particles outside it
    /// get no weight (a surface at z = 0 above a hydrophone array, the walls of a room).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bounds_min_m: Option<[f64; 3]>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bounds_max_m: Option<[f64; 3]>,
    /// Direction mode: the nearest a newborn track's source may be (metres; default the
    /// array's aperture, at least 1 m). Where the array resolves the wavefront's curvature
    /// there, each particle also carries an inverse range, spread evenly from 0 (a plane wave)
    /// to 1 / this for a newborn track; otherwise (or with `inf`) directions assume plane
    /// waves.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_range_m: Option<f64>,
    /// Line mode: the normal of a plane through the array that the sources lie in (talkers
    /// in front of a soundbar at its height, vessels over a line on the seabed). Reports are
    /// then positions in that plane on the side `plane_normal × axis` (or the side towards
    /// the search volume), with the mirror point across the axis beside them. Without it the
    /// cone about the axis is reported in the half-plane towards the search volume's centre
    /// (or horizontal, `z × axis`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plane_normal: Option<[f64; 3]>,
    /// Where the array frame's origin is on the Earth and which way its +y axis points
    /// (`latitude_deg`, `longitude_deg`, `depth_m`, `heading_deg`): needed for the NMEA TTM
    /// and TLL sentences, and for latitude and longitude in the JSON stream.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<Origin>,
    /// A turning array (a towed line, an array on a vessel): where its heading comes from, frame
    /// by frame. The heading is that of the array frame's +y axis, degrees clockwise from north
    /// (as `origin.heading_deg`, which it replaces while a heading comes in). The array turns
    /// about the vertical through its centroid (direction and line modes) or its frame's origin
    /// (3-D); its movement is not known, so a source's motion is tracked relative to it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub heading_input: Option<HeadingInput>,
}

/// Where a turning array's heading comes from (`[array.heading_input]`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HeadingInput {
    /// Replay: a CSV file of `time_s,heading_deg` rows (seconds from the recording's start;
    /// relative paths from the working directory). A scene directory's `heading.csv` is used
    /// without this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<std::path::PathBuf>,
    /// Live: a UDP address to receive NMEA 0183 heading sentences on (HDT, HDG or THS; e.g.
    /// "0.0.0.0:10110").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub udp_listen: Option<String>,
    /// Live: a heading older than this is stale (s); frames then keep the last heading and are
    /// counted in the status as `heading_stale_frames`.
    #[serde(default = "default_heading_stale_s")]
    pub stale_s: f64,
}

fn default_heading_stale_s() -> f64 {
    2.0
}

impl HeadingInput {
    /// Headings from a `time_s,heading_deg` file (a replay), with the default staleness.
    pub fn from_file(file: std::path::PathBuf) -> Self {
        Self {
            file: Some(file),
            udp_listen: None,
            stale_s: default_heading_stale_s(),
        }
    }
}

/// Most sensors an array may have (the filters size stack arrays by it).
pub const MAX_SENSORS: usize = crate::track::measure::likelihood::MAX_SENSORS;
/// Largest sensor coordinate, m (positions are relative to a point near the array).
pub const MAX_COORDINATE_M: f64 = 1e6;

impl Config {
    pub fn geometry(&self) -> ArrayGeometry {
        ArrayGeometry::new(self.array.sensors_m.clone(), self.array.speed_of_sound_m_s)
    }

    /// Direction mode: the nearest range (m) a newborn track allows for
    /// (`array.min_range_m`; default the aperture, and at least 1 m), and the wavefront's
    /// curvature there against the tracker's TDOA noise floor, both as path differences (m):
    /// max |d|² / 2r over the sensors d (relative to the centroid), and
    /// `tdoa_std_samples` × c / fs.
    pub fn direction_curvature(&self) -> (f64, f64, f64) {
        let geo = self.geometry();
        let r = self
            .array
            .min_range_m
            .unwrap_or_else(|| geo.aperture_m().max(1.0));
        let c = geo.centroid();
        let d2 = (0..geo.len())
            .map(|i| (geo.sensor(i) - c).norm_squared())
            .fold(0.0, f64::max);
        let noise =
            self.tracker.tdoa_std_samples * self.array.speed_of_sound_m_s / self.sample_rate_hz();
        (r, d2 / (2.0 * r), noise)
    }

    /// Direction mode: the largest inverse range (1/m) a newborn track's particles start with
    /// (see [`Self::direction_curvature`]); 0 for plane waves (`min_range_m = inf`, or an array
    /// too small to resolve the curvature at that range: its particles then stay on the unit
    /// sphere) and in 3-D mode.
    pub fn direction_inv_range_max(&self) -> f64 {
        if !self.array.mode.angular() {
            return 0.0;
        }
        let (r, curvature, noise) = self.direction_curvature();
        if r.is_finite() && r > 0.0 && curvature >= noise {
            1.0 / r
        } else {
            0.0
        }
    }

    /// Sensors on one line track in line mode whatever mode was asked for (neither 3-D
    /// positions nor directions are observable there); the change is logged. `source` names
    /// the file or scene.
    pub fn settle_mode(&mut self, source: &str) {
        let a = &self.array;
        if a.mode == TrackMode::Line
            || a.sensors_m.len() < 2
            || self.geometry().span() != Span::Line
        {
            return;
        }
        log::info!(
            "{source}: the {} sensors lie on one line, so they track in line mode (the angle to the array's axis and, near enough, the range) rather than {}",
            a.sensors_m.len(),
            match a.mode {
                TrackMode::ThreeD => "3-D positions",
                _ => "directions",
            }
        );
        self.array.mode = TrackMode::Line;
    }

    /// Line mode: the array's axis and the half-plane through it that directions are kept in
    /// (see [`crate::track::LineAxes`]); `None` in other modes. The side is `plane_normal ×
    /// axis` where a plane is given, else the way to the search volume's centre, else
    /// horizontal (`z × axis`; `x` for a vertical line), each made perpendicular to the axis;
    /// a plane's side turns to face the search volume where it has one.
    pub fn line_axes(&self) -> Option<(nalgebra::Vector3<f64>, nalgebra::Vector3<f64>)> {
        use nalgebra::Vector3;
        if self.array.mode != TrackMode::Line {
            return None;
        }
        let geo = self.geometry();
        let axis = geo.line_axis()?;
        let perp = |v: Vector3<f64>| {
            let q = v - axis * v.dot(&axis);
            (q.norm() > 1e-6 * v.norm().max(1e-12)).then(|| q.normalize())
        };
        let towards = match (self.array.bounds_min_m, self.array.bounds_max_m) {
            (Some(lo), Some(hi)) => {
                let mid = (Vector3::from(lo) + Vector3::from(hi)) * 0.5 - geo.centroid();
                perp(mid)
            }
            _ => None,
        };
        let side = match self
            .array
            .plane_normal
            .map(Vector3::from)
            .and_then(|n| perp(n.cross(&axis)))
        {
            Some(s) => match towards {
                Some(t) if t.dot(&s) < 0.0 => -s,
                _ => s,
            },
            None => towards
                .or_else(|| {
                    (axis.z.abs() < 0.9)
                        .then(|| perp(Vector3::z().cross(&axis)))
                        .flatten()
                })
                .or_else(|| perp(Vector3::x()))?,
        };
        Some((axis, side))
    }

    /// Whether the array turns (a heading comes in frame by frame): tracks are then held in
    /// the world's frame as the array turns under them.
    pub fn turning(&self) -> bool {
        self.array.heading_input.is_some()
    }

    /// `[array.heading_input]`: a source, a parseable address, a positive staleness, and for a
    /// line array the plane its sources lie in (its mirror is resolved by the turn only there).
    pub(super) fn validate_heading_input(&self, file: &str) -> Result<(), ConfigError> {
        let Some(h) = &self.array.heading_input else {
            return Ok(());
        };
        let err =
            |key: &str, problem: String, fix: &str| Err(ConfigError::new(file, key, problem, fix));
        if h.file.is_none() && h.udp_listen.is_none() {
            return err(
                "array.heading_input",
                "no heading source".into(),
                "set file = \"heading.csv\" (replay) or udp_listen = \"0.0.0.0:10110\" (live NMEA HDT/HDG)",
            );
        }
        if let Some(a) = &h.udp_listen {
            if a.parse::<std::net::SocketAddr>().is_err() {
                return err(
                    "array.heading_input.udp_listen",
                    format!("{a:?} is not an address and port"),
                    "use an address and port such as \"0.0.0.0:10110\"",
                );
            }
        }
        if !(h.stale_s.is_finite() && h.stale_s > 0.0) {
            return err(
                "array.heading_input.stale_s",
                format!("{} s", h.stale_s),
                "use a positive number of seconds, e.g. 2",
            );
        }
        if self.array.mode == TrackMode::Line && self.array.plane_normal.is_none() {
            return err(
                "array.plane_normal",
                "a turning line array needs the plane its sources lie in".into(),
                "set array.plane_normal (e.g. [0, 0, 1] for a horizontal towed line and vessels at the surface), or remove [array.heading_input]",
            );
        }
        Ok(())
    }

    /// The sensors: a speed of sound, finite and distinct positions, and a spread that the tracking mode can use.
    pub(super) fn validate_sensors(&self, file: &str) -> Result<(), ConfigError> {
        let err =
            |key: &str, problem: String, fix: &str| Err(ConfigError::new(file, key, problem, fix));
        let a = &self.array;
        let n = a.sensors_m.len();
        if n > MAX_SENSORS {
            return err(
                "array.sensors_m",
                format!("{n} sensors (at most {MAX_SENSORS})"),
                "use at most 64 sensors; split a larger array into sub-arrays",
            );
        }
        if !(50.0..=10_000.0).contains(&a.speed_of_sound_m_s) {
            return err(
                "array.speed_of_sound_m_s",
                format!("{} m/s is not a speed of sound", a.speed_of_sound_m_s),
                "use about 343 for air at 20 °C, about 1500 for sea water",
            );
        }
        if let Some(i) = a
            .sensors_m
            .iter()
            .position(|s| s.iter().any(|v| !v.is_finite()))
        {
            return err(
                "array.sensors_m",
                format!("sensor {i} has a non-finite coordinate"),
                "give every sensor three finite coordinates in metres",
            );
        }
        if let Some(i) = a
            .sensors_m
            .iter()
            .position(|s| s.iter().any(|v| v.abs() > MAX_COORDINATE_M))
        {
            return err(
                "array.sensors_m",
                format!(
                    "sensor {i} is at {:?}, more than {MAX_COORDINATE_M} m from the origin",
                    a.sensors_m[i]
                ),
                "give positions in metres relative to a point near the array",
            );
        }
        if let Some(problem) = a.origin.as_ref().and_then(Origin::problem) {
            return err(
                "array.origin",
                problem,
                "give the array origin's WGS-84 latitude and longitude in degrees, its depth in metres and the heading of the array's +y axis in degrees from true north",
            );
        }
        let geo = self.geometry();
        for i in 0..n {
            for j in i + 1..n {
                let d = geo.distance(i, j);
                if d < 1e-3 {
                    return err(
                        "array.sensors_m",
                        format!("sensors {i} and {j} are at the same place ({d:.4} m apart)"),
                        "each sensor needs its own position; remove the duplicate",
                    );
                }
            }
        }
        let span = self.geometry().span();
        match a.mode {
            TrackMode::ThreeD => {
                if n < 4 {
                    return err(
                        "array.sensors_m",
                        format!("3-D tracking needs at least 4 sensors, the array has {n}"),
                        "add sensors, or set array.mode = \"direction\" for bearings only",
                    );
                }
                if span != Span::Volume {
                    let s = self.geometry().spread_m();
                    return err(
                        "array.sensors_m",
                        format!(
                            "the sensors are {}: spread {:.3} / {:.3} / {:.3} m along the principal axes, so 3-D positions are ambiguous",
                            match span {
                                Span::Plane => "(nearly) coplanar",
                                Span::Line => "(nearly) collinear",
                                _ => "all at one point",
                            },
                            s[0],
                            s[1],
                            s[2]
                        ),
                        "move at least one sensor out of the plane (by 2% of the aperture or more), or set array.mode = \"direction\"",
                    );
                }
            }
            TrackMode::Line => {
                if n < 2 || span != Span::Line {
                    return err(
                        "array.sensors_m",
                        format!(
                            "line mode needs 2 or more sensors on one line (have {n}, {span:?})"
                        ),
                        "set array.mode = \"direction\" (flat arrays) or \"3d\" (arrays spread in 3-D)",
                    );
                }
            }
            TrackMode::Direction => {
                if n < 3 || matches!(span, Span::Point | Span::Line) {
                    return err(
                        "array.sensors_m",
                        format!(
                            "direction tracking needs at least 3 sensors not on one line (have {n}, {span:?})"
                        ),
                        "add a sensor off the line",
                    );
                }
            }
        }
        Ok(())
    }

    /// The direction prior's nearest range and the search volume.
    pub(super) fn validate_volume(&self, file: &str) -> Result<(), ConfigError> {
        let err =
            |key: &str, problem: String, fix: &str| Err(ConfigError::new(file, key, problem, fix));
        let a = &self.array;
        if let Some(n) = a.plane_normal {
            if a.mode != TrackMode::Line {
                return err(
                    "array.plane_normal",
                    "plane_normal applies only to line arrays (array.mode = \"line\")".into(),
                    "remove it; flat and 3-D arrays observe the direction themselves",
                );
            }
            let v = nalgebra::Vector3::from(n);
            let axis = self
                .geometry()
                .line_axis()
                .unwrap_or_else(nalgebra::Vector3::x);
            if !v.iter().all(|x| x.is_finite())
                || v.norm() < 1e-9
                || v.normalize().cross(&axis).norm() < 0.1
            {
                return err(
                    "array.plane_normal",
                    format!(
                        "{n:?} is not the normal of a plane through the array's axis {:?}",
                        [axis.x, axis.y, axis.z]
                    ),
                    "give a vector perpendicular (or nearly) to the line of sensors, e.g. [0, 0, 1] for sources at the height of a horizontal line",
                );
            }
        }
        if let Some(r) = a.min_range_m {
            if !a.mode.angular() {
                return err(
                    "array.min_range_m",
                    "min_range_m applies only to direction and line tracking".into(),
                    "remove it, or set array.mode = \"direction\"",
                );
            }
            if !(r > 0.0) {
                return err(
                    "array.min_range_m",
                    format!("{r} m is not a range"),
                    "give the nearest range a source may be at, in metres (inf for plane waves)",
                );
            }
        }
        match (a.bounds_min_m, a.bounds_max_m) {
            (Some(lo), Some(hi)) => {
                if (0..3).any(|k| !(lo[k] < hi[k])) {
                    return err(
                        "array.bounds_min_m",
                        format!(
                            "bounds_min_m {lo:?} is not below bounds_max_m {hi:?} on every axis"
                        ),
                        "give the lower corner in bounds_min_m and the upper corner in bounds_max_m",
                    );
                }
            }
            (None, None) => {}
            _ => {
                return err(
                    "array.bounds_min_m",
                    "only one of bounds_min_m and bounds_max_m is set".into(),
                    "set both corners of the search volume, or neither",
                );
            }
        }
        Ok(())
    }
}
