//! Georeferencing: the array frame placed on the WGS-84 ellipsoid.
//!
//! The array frame is right-handed with z up. An origin gives the geodetic position of the
//! frame's (0, 0, 0) and the heading of its +y axis (degrees clockwise from true north), so
//! that heading 0 makes the frame east-north-up. Depth is metres below the ellipsoid
//! (negative above it); the difference between the ellipsoid and mean sea level (the geoid,
//! tens of metres) is left to the user, as NMEA receivers do.

use serde::{Deserialize, Serialize};

/// WGS-84 semi-major axis (m) and flattening.
const A: f64 = 6_378_137.0;
const F: f64 = 1.0 / 298.257_223_563;
/// First eccentricity squared.
const E2: f64 = F * (2.0 - F);

/// Where the array frame's origin is on the Earth, and which way it faces.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Origin {
    /// Geodetic latitude, degrees north (−90..90).
    pub latitude_deg: f64,
    /// Longitude, degrees east (−180..180).
    pub longitude_deg: f64,
    /// Depth of the frame's origin below the surface, metres (negative: height above it).
    #[serde(default)]
    pub depth_m: f64,
    /// True bearing of the array frame's +y axis, degrees clockwise from north (0..360).
    #[serde(default)]
    pub heading_deg: f64,
}

/// A geodetic position: latitude and longitude (degrees) and depth (m, positive down).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Geodetic {
    pub latitude_deg: f64,
    pub longitude_deg: f64,
    pub depth_m: f64,
}

impl Origin {
    /// A vector of the array frame (position or velocity) in east-north-up.
    pub fn enu(&self, v: [f64; 3]) -> [f64; 3] {
        let (s, c) = self.heading_deg.to_radians().sin_cos();
        [v[0] * c + v[1] * s, -v[0] * s + v[1] * c, v[2]]
    }

    /// A 3×3 covariance of the array frame in east-north-up.
    pub fn enu_cov(&self, p: &[[f64; 3]; 3]) -> [[f64; 3]; 3] {
        let (s, c) = self.heading_deg.to_radians().sin_cos();
        let r = [[c, s, 0.0], [-s, c, 0.0], [0.0, 0.0, 1.0]];
        let mut out = [[0.0; 3]; 3];
        for i in 0..3 {
            for j in 0..3 {
                out[i][j] = (0..3)
                    .flat_map(|k| (0..3).map(move |l| (k, l)))
                    .map(|(k, l)| r[i][k] * p[k][l] * r[j][l])
                    .sum();
            }
        }
        out
    }

    /// The geodetic position of array-frame point `p` (m).
    /// This frame moved by `at` (m, in this frame), not turned: the origin of a frame whose
    /// point `at` is this one's.
    pub fn moved(&self, at: [f64; 3]) -> Origin {
        let g = self.geodetic(at);
        Origin {
            latitude_deg: g.latitude_deg,
            longitude_deg: g.longitude_deg,
            depth_m: g.depth_m,
            heading_deg: self.heading_deg,
        }
    }

    pub fn geodetic(&self, p: [f64; 3]) -> Geodetic {
        let [e, n, u] = self.enu(p);
        let (lat0, lon0) = (
            self.latitude_deg.to_radians(),
            self.longitude_deg.to_radians(),
        );
        let o = ecef(lat0, lon0, -self.depth_m);
        let (sl, cl) = lat0.sin_cos();
        let (so, co) = lon0.sin_cos();
        let x = o[0] - so * e - sl * co * n + cl * co * u;
        let y = o[1] + co * e - sl * so * n + cl * so * u;
        let z = o[2] + cl * n + sl * u;
        let (lat, lon, h) = from_ecef(x, y, z);
        Geodetic {
            latitude_deg: lat.to_degrees(),
            longitude_deg: lon.to_degrees(),
            depth_m: -h,
        }
    }

    /// The array-frame coordinates (m) of geodetic point `g`: the inverse of [`Self::geodetic`].
    pub fn local(&self, g: &Geodetic) -> [f64; 3] {
        let (lat0, lon0) = (
            self.latitude_deg.to_radians(),
            self.longitude_deg.to_radians(),
        );
        let o = ecef(lat0, lon0, -self.depth_m);
        let p = ecef(
            g.latitude_deg.to_radians(),
            g.longitude_deg.to_radians(),
            -g.depth_m,
        );
        let d = [p[0] - o[0], p[1] - o[1], p[2] - o[2]];
        let r = ecef_to_enu(lat0, lon0);
        let enu = [0, 1, 2].map(|i| (0..3).map(|k| r[i][k] * d[k]).sum::<f64>());
        // East-north-up into the array frame (the inverse turn of [`Self::enu`]).
        let (s, c) = self.heading_deg.to_radians().sin_cos();
        [enu[0] * c - enu[1] * s, enu[0] * s + enu[1] * c, enu[2]]
    }

    /// The problem with this origin's values, if any (for the configuration's check).
    pub fn problem(&self) -> Option<String> {
        let o = self;
        if !(o.latitude_deg.is_finite() && o.latitude_deg.abs() <= 90.0) {
            Some(format!("latitude_deg = {} (use −90..90)", o.latitude_deg))
        } else if !(o.longitude_deg.is_finite() && o.longitude_deg.abs() <= 180.0) {
            Some(format!(
                "longitude_deg = {} (use −180..180)",
                o.longitude_deg
            ))
        } else if !(o.depth_m.is_finite() && o.depth_m.abs() <= 12_000.0) {
            Some(format!("depth_m = {} (use −12000..12000)", o.depth_m))
        } else if !(o.heading_deg.is_finite() && (0.0..360.0).contains(&o.heading_deg)) {
            Some(format!(
                "heading_deg = {} (use 0 <= h < 360)",
                o.heading_deg
            ))
        } else {
            None
        }
    }
}

/// True bearing (degrees, 0..360) of the horizontal east-north vector (e, n).
pub fn bearing_deg(e: f64, n: f64) -> f64 {
    let b = e.atan2(n).to_degrees();
    if b < 0.0 { b + 360.0 } else { b }
}

/// A heading in [0, 360).
pub fn wrap_deg(h: f64) -> f64 {
    let w = h.rem_euclid(360.0);
    if w >= 360.0 { 0.0 } else { w }
}

/// The turn from heading `a` to heading `b` the short way, degrees in (-180, 180].
pub fn turn_deg(a: f64, b: f64) -> f64 {
    let d = (b - a).rem_euclid(360.0);
    if d > 180.0 { d - 360.0 } else { d }
}

/// The rotation from east-north-up at geodetic (`lat_deg`, `lon_deg`) `from` to east-north-up
/// at `to`: the two tangent planes differ by the angle the Earth's curvature puts between them
/// (about 9″ a kilometre apart), which vectors and covariances of one node must be turned by to
/// join another's.
pub fn enu_turn(from: (f64, f64), to: (f64, f64)) -> [[f64; 3]; 3] {
    let a = ecef_to_enu(from.0.to_radians(), from.1.to_radians());
    let b = ecef_to_enu(to.0.to_radians(), to.1.to_radians());
    // b · aᵀ
    let mut out = [[0.0; 3]; 3];
    for i in 0..3 {
        for j in 0..3 {
            out[i][j] = (0..3).map(|k| b[i][k] * a[j][k]).sum();
        }
    }
    out
}

/// The rows of east, north and up in ECEF at latitude and longitude (radians).
fn ecef_to_enu(lat: f64, lon: f64) -> [[f64; 3]; 3] {
    let (sl, cl) = lat.sin_cos();
    let (so, co) = lon.sin_cos();
    [
        [-so, co, 0.0],
        [-sl * co, -sl * so, cl],
        [cl * co, cl * so, sl],
    ]
}

/// Earth-centred, Earth-fixed coordinates of a geodetic point (radians, metres).
fn ecef(lat: f64, lon: f64, h: f64) -> [f64; 3] {
    let (sl, cl) = lat.sin_cos();
    let n = A / (1.0 - E2 * sl * sl).sqrt();
    [
        (n + h) * cl * lon.cos(),
        (n + h) * cl * lon.sin(),
        (n * (1.0 - E2) + h) * sl,
    ]
}

/// Geodetic latitude, longitude (radians) and height (m) of an ECEF point, by fixed-point
/// iteration on the latitude (converges to well under a millimetre in a few steps near the
/// surface).
fn from_ecef(x: f64, y: f64, z: f64) -> (f64, f64, f64) {
    let lon = y.atan2(x);
    let p = x.hypot(y);
    let mut lat = z.atan2(p * (1.0 - E2));
    let mut h = 0.0;
    for _ in 0..8 {
        let sl = lat.sin();
        let n = A / (1.0 - E2 * sl * sl).sqrt();
        h = if lat.cos().abs() > 1e-9 {
            p / lat.cos() - n
        } else {
            z.abs() - n * (1.0 - E2)
        };
        lat = z.atan2(p * (1.0 - E2 * n / (n + h)));
    }
    (lat, lon, h)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn origin(lat: f64, lon: f64, heading: f64) -> Origin {
        Origin {
            latitude_deg: lat,
            longitude_deg: lon,
            depth_m: 5.0,
            heading_deg: heading,
        }
    }

    #[test]
    fn the_origin_maps_to_itself() {
        let o = origin(53.5, -6.5, 30.0);
        let g = o.geodetic([0.0; 3]);
        assert!((g.latitude_deg - 53.5).abs() < 1e-10);
        assert!((g.longitude_deg + 6.5).abs() < 1e-10);
        assert!((g.depth_m - 5.0).abs() < 1e-6);
    }

    /// A kilometre north at latitude 45° is 1 / M radians of latitude, M the meridian radius
    /// of curvature there (6,367,381.8 m); a kilometre east is 1 / (N cos φ).
    #[test]
    fn a_kilometre_north_and_east() {
        let o = origin(45.0, 10.0, 0.0);
        let g = o.geodetic([0.0, 1000.0, 0.0]);
        let m = A * (1.0 - E2) / (1.0 - E2 * 0.5f64).powf(1.5);
        let want = 45.0 + (1000.0 / m).to_degrees();
        assert!((g.latitude_deg - want).abs() < 1e-7, "{}", g.latitude_deg);
        assert!((g.longitude_deg - 10.0).abs() < 1e-12);
        let g = o.geodetic([1000.0, 0.0, 0.0]);
        let n = A / (1.0 - E2 * 0.5f64).sqrt();
        let want = 10.0 + (1000.0 / (n * 45f64.to_radians().cos())).to_degrees();
        assert!((g.longitude_deg - want).abs() < 1e-6, "{}", g.longitude_deg);
        // (The tangent plane rises 1000² / 2R ≈ 0.08 m above the curved surface there.)
        assert!((g.depth_m - 5.0 + 0.0785).abs() < 0.01, "{}", g.depth_m);
    }

    /// Heading 90: the frame's +y axis points east, so +x points south.
    #[test]
    fn heading_rotates_the_frame() {
        let o = origin(0.0, 0.0, 90.0);
        let [e, n, _] = o.enu([0.0, 10.0, 0.0]);
        assert!((e - 10.0).abs() < 1e-12 && n.abs() < 1e-12);
        let [e, n, _] = o.enu([10.0, 0.0, 0.0]);
        assert!(e.abs() < 1e-12 && (n + 10.0).abs() < 1e-12);
        assert!((bearing_deg(e, n) - 180.0).abs() < 1e-9);
        assert!((bearing_deg(-1.0, 0.0) - 270.0).abs() < 1e-9);
        let c = o.enu_cov(&[[4.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 9.0]]);
        assert!((c[0][0] - 1.0).abs() < 1e-12 && (c[1][1] - 4.0).abs() < 1e-12);
        assert!((c[2][2] - 9.0).abs() < 1e-12 && c[0][1].abs() < 1e-12);
    }

    /// `local` undoes `geodetic` (a point 2 km away, heading 30°); `enu_turn` maps a node's
    /// east-north-up to another's as ECEF does.
    #[test]
    fn local_inverts_geodetic_and_tangent_planes_turn() {
        let o = origin(53.5, 9.9, 30.0);
        let p = [1200.0, -1600.0, -7.0];
        let back = o.local(&o.geodetic(p));
        for k in 0..3 {
            assert!((back[k] - p[k]).abs() < 1e-6, "{back:?}");
        }
        let other = origin(53.52, 9.95, 0.0);
        let turn = enu_turn((53.5, 9.9), (53.52, 9.95));
        // The same displacement, 10 m east of the first node, seen from the second.
        let a = o.geodetic([0.0; 3]);
        let b = Origin {
            heading_deg: 0.0,
            ..o
        }
        .geodetic([10.0, 0.0, 0.0]);
        let (la, lb) = (other.local(&a), other.local(&b));
        let d = [lb[0] - la[0], lb[1] - la[1], lb[2] - la[2]];
        let t = [0, 1, 2].map(|i| turn[i][0] * 10.0);
        for k in 0..3 {
            assert!((d[k] - t[k]).abs() < 1e-6, "{d:?} {t:?}");
        }
        assert!(t[1].abs() > 1e-5, "the planes differ measurably");
    }

    #[test]
    fn round_trip_through_ecef_near_a_pole() {
        let o = origin(89.9999, 45.0, 0.0);
        let g = o.geodetic([3.0, 4.0, -2.0]);
        let p = ecef(
            g.latitude_deg.to_radians(),
            g.longitude_deg.to_radians(),
            -g.depth_m,
        );
        let (lat, lon, h) = from_ecef(p[0], p[1], p[2]);
        assert!((lat.to_degrees() - g.latitude_deg).abs() < 1e-10);
        assert!((lon.to_degrees() - g.longitude_deg).abs() < 1e-8);
        assert!((h + g.depth_m).abs() < 1e-4);
    }

    #[test]
    fn bad_values_are_named() {
        assert!(
            origin(91.0, 0.0, 0.0)
                .problem()
                .unwrap()
                .contains("latitude")
        );
        assert!(
            origin(0.0, 0.0, 360.0)
                .problem()
                .unwrap()
                .contains("heading")
        );
        assert!(
            origin(0.0, f64::NAN, 0.0)
                .problem()
                .unwrap()
                .contains("longitude")
        );
        assert!(origin(0.0, 0.0, 0.0).problem().is_none());
    }
}
