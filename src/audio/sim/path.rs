//! Source trajectories.

use serde::{Deserialize, Serialize};

/// A source trajectory.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase", deny_unknown_fields)]
pub enum PathSpec {
    Static {
        position_m: [f64; 3],
    },
    /// Constant velocity.
    Line {
        start_m: [f64; 3],
        velocity_m_s: [f64; 3],
    },
    /// Constant speed on a horizontal circle arc (positive turn rate turns left), climbing at a
    /// constant rate.
    Turn {
        start_m: [f64; 3],
        speed_m_s: f64,
        heading_deg: f64,
        turn_rate_deg_s: f64,
        #[serde(default)]
        climb_m_s: f64,
    },
    /// Legs one after the other, each at a constant speed, turn rate (positive turns left) and
    /// climb, from `start_m` with the first leg's heading; after the last leg the source goes on
    /// as in it. Turns, speed changes and walks between waypoints are made of legs.
    Legs {
        start_m: [f64; 3],
        heading_deg: f64,
        legs: Vec<Leg>,
    },
}

/// One leg of a [`PathSpec::Legs`] path.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Leg {
    pub duration_s: f64,
    pub speed_m_s: f64,
    #[serde(default)]
    pub turn_rate_deg_s: f64,
    #[serde(default)]
    pub climb_m_s: f64,
}

/// Most legs a path may have (each position is found by walking the legs).
pub const MAX_LEGS: usize = 10_000;

impl PathSpec {
    /// The same path moved by `d` (m): what an array whose origin sits at `-d` hears.
    pub fn shifted(&self, d: [f64; 3]) -> PathSpec {
        let add = |p: &[f64; 3]| [p[0] + d[0], p[1] + d[1], p[2] + d[2]];
        let mut out = self.clone();
        match &mut out {
            PathSpec::Static { position_m } => *position_m = add(position_m),
            PathSpec::Line { start_m, .. }
            | PathSpec::Turn { start_m, .. }
            | PathSpec::Legs { start_m, .. } => *start_m = add(start_m),
        }
        out
    }

    pub fn position(&self, t: f64) -> [f64; 3] {
        match self {
            PathSpec::Static { position_m } => *position_m,
            PathSpec::Line {
                start_m,
                velocity_m_s,
            } => [
                start_m[0] + velocity_m_s[0] * t,
                start_m[1] + velocity_m_s[1] * t,
                start_m[2] + velocity_m_s[2] * t,
            ],
            PathSpec::Turn {
                start_m,
                speed_m_s,
                heading_deg,
                turn_rate_deg_s,
                climb_m_s,
            } => {
                let h0 = heading_deg.to_radians();
                let w = turn_rate_deg_s.to_radians();
                let (dx, dy) = if w.abs() < 1e-9 {
                    (speed_m_s * t * h0.cos(), speed_m_s * t * h0.sin())
                } else {
                    let r = speed_m_s / w;
                    (
                        r * ((h0 + w * t).sin() - h0.sin()),
                        -r * ((h0 + w * t).cos() - h0.cos()),
                    )
                };
                [start_m[0] + dx, start_m[1] + dy, start_m[2] + climb_m_s * t]
            }
            PathSpec::Legs {
                start_m,
                heading_deg,
                legs,
            } => legs_position(*start_m, heading_deg.to_radians(), legs, t),
        }
    }

    /// The fastest speed along the path, m/s (horizontal and vertical together).
    pub fn max_speed_m_s(&self) -> f64 {
        let turn = |v: f64, climb: f64| v.hypot(climb);
        match self {
            PathSpec::Static { .. } => 0.0,
            PathSpec::Line { velocity_m_s, .. } => {
                velocity_m_s.iter().map(|v| v * v).sum::<f64>().sqrt()
            }
            PathSpec::Turn {
                speed_m_s,
                climb_m_s,
                ..
            } => turn(*speed_m_s, *climb_m_s),
            PathSpec::Legs { legs, .. } => legs
                .iter()
                .map(|l| turn(l.speed_m_s, l.climb_m_s))
                .fold(0.0, f64::max),
        }
    }

    /// Why the path cannot be simulated, if it cannot: a non-finite number, legs without a
    /// positive duration, or more than [`MAX_LEGS`] legs.
    pub fn problem(&self) -> Option<String> {
        let finite = |v: &[f64]| v.iter().all(|x| x.is_finite());
        match self {
            PathSpec::Static { position_m } => {
                (!finite(position_m)).then(|| "a non-finite position".into())
            }
            PathSpec::Line {
                start_m,
                velocity_m_s,
            } => (!finite(start_m) || !finite(velocity_m_s))
                .then(|| "a non-finite start or velocity".into()),
            PathSpec::Turn {
                start_m,
                speed_m_s,
                heading_deg,
                turn_rate_deg_s,
                climb_m_s,
            } => (!finite(start_m)
                || !finite(&[*speed_m_s, *heading_deg, *turn_rate_deg_s, *climb_m_s]))
            .then(|| "a non-finite number in a turn".into()),
            PathSpec::Legs {
                start_m,
                heading_deg,
                legs,
            } => {
                if legs.is_empty() {
                    return Some("a path of legs without any leg".into());
                }
                if legs.len() > MAX_LEGS {
                    return Some(format!(
                        "{} legs (at most {MAX_LEGS}; join legs of equal speed and turn)",
                        legs.len()
                    ));
                }
                if !finite(start_m) || !heading_deg.is_finite() {
                    return Some("a non-finite start or heading".into());
                }
                legs.iter().enumerate().find_map(|(i, l)| {
                    let ok = l.duration_s > 0.0
                        && finite(&[l.duration_s, l.speed_m_s, l.turn_rate_deg_s, l.climb_m_s]);
                    (!ok).then(|| {
                        format!("leg {i}: a duration that is not positive, or a non-finite number")
                    })
                })
            }
        }
    }
}

/// Where a source on `legs` is at `t`: each leg's end is the next one's start.
fn legs_position(start: [f64; 3], heading: f64, legs: &[Leg], t: f64) -> [f64; 3] {
    let (mut p, mut h, mut t0) = (start, heading, 0.0);
    for (i, leg) in legs.iter().enumerate() {
        let last = i + 1 == legs.len();
        let dt = if last {
            t - t0
        } else {
            (t - t0).min(leg.duration_s)
        };
        let (q, h1) = advance(p, h, leg, dt.max(0.0));
        if last || t <= t0 + leg.duration_s {
            return q;
        }
        p = q;
        h = h1;
        t0 += leg.duration_s;
    }
    p
}

/// A point at heading `h` (radians) after `dt` seconds of `leg`; and its heading then.
fn advance(p: [f64; 3], h: f64, leg: &Leg, dt: f64) -> ([f64; 3], f64) {
    let w = leg.turn_rate_deg_s.to_radians();
    let v = leg.speed_m_s;
    let (dx, dy) = if w.abs() < 1e-9 {
        (v * dt * h.cos(), v * dt * h.sin())
    } else {
        let r = v / w;
        (
            r * ((h + w * dt).sin() - h.sin()),
            -r * ((h + w * dt).cos() - h.cos()),
        )
    };
    (
        [p[0] + dx, p[1] + dy, p[2] + leg.climb_m_s * dt],
        h + w * dt,
    )
}

/// A turning array (a towed line behind a vessel that turns): the array frame turns about the
/// vertical through the sensors' centroid, from `heading_deg` (the heading of its +y axis,
/// degrees clockwise from north) by `turn_deg` (positive: clockwise, to starboard) at
/// `rate_deg_s`, starting at `start_s`. At heading 0 the array frame is the scene's.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ArrayTurn {
    #[serde(default)]
    pub heading_deg: f64,
    pub start_s: f64,
    pub turn_deg: f64,
    pub rate_deg_s: f64,
}

impl ArrayTurn {
    /// The heading at time `t` (degrees, in [0, 360)).
    pub fn heading_at(&self, t: f64) -> f64 {
        let done = ((t - self.start_s) * self.rate_deg_s.abs()).clamp(0.0, self.turn_deg.abs());
        crate::math::geo::wrap_deg(self.heading_deg + done * self.turn_deg.signum())
    }

    /// When the turn is over (s).
    pub fn end_s(&self) -> f64 {
        self.start_s + self.turn_deg.abs() / self.rate_deg_s.abs().max(1e-9)
    }

    /// What is wrong with the numbers, if anything.
    pub fn problem(&self) -> Option<String> {
        let ok = [
            self.heading_deg,
            self.start_s,
            self.turn_deg,
            self.rate_deg_s,
        ]
        .iter()
        .all(|v| v.is_finite());
        if !ok || self.start_s < 0.0 || self.turn_deg.abs() > 3600.0 {
            return Some("array_turn: finite numbers, start_s >= 0, |turn_deg| <= 3600".into());
        }
        if self.turn_deg != 0.0 && !(self.rate_deg_s.abs() > 0.0 && self.rate_deg_s.abs() <= 30.0) {
            return Some("array_turn: rate_deg_s must lie in (0, 30]".into());
        }
        None
    }

    /// Sensor `s` of the array frame at heading `heading_deg`, turned about `centre` into the
    /// scene's frame (as `Origin::enu` turns the array frame into east-north-up).
    pub fn place(heading_deg: f64, centre: &[f64; 3], s: &[f64; 3]) -> [f64; 3] {
        let (sn, cs) = heading_deg.to_radians().sin_cos();
        let (x, y) = (s[0] - centre[0], s[1] - centre[1]);
        [
            centre[0] + x * cs + y * sn,
            centre[1] - x * sn + y * cs,
            s[2],
        ]
    }
}
