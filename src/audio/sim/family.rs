//! Scene families: a named distribution over arrays, paths, signals, SNR, rooms and faults, from
//! which `sonotrack trial` draws scenes. A family is a TOML file (the built-in ones are in
//! `families/`, embedded); every number given as `[low, high]` is drawn uniformly, a single
//! number is fixed, and a list of words is a choice. Scene `i` of a family drawn with seed `s`
//! is the same scene every time.

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::{
    ArrayTurn, FaultSpec, Leg, OtherArray, PathSpec, RoomSpec, SceneSpec, SignalKind, SourceSpec,
    faults,
};
use crate::error::{Error, IoContext, Result};
use crate::math::geo::Origin;
use crate::rng::philox::{PhiloxStream, Stream};

/// The built-in families: (name, TOML).
pub const BUILT_IN: &[(&str, &str)] = &[
    (
        "pass-through",
        include_str!("../../../families/pass-through.toml"),
    ),
    (
        "two-array",
        include_str!("../../../families/two-array.toml"),
    ),
    (
        "manoeuvre",
        include_str!("../../../families/manoeuvre.toml"),
    ),
    ("faults", include_str!("../../../families/faults.toml")),
    ("crossing", include_str!("../../../families/crossing.toml")),
    (
        "noise-only",
        include_str!("../../../families/noise-only.toml"),
    ),
    (
        "compact-ring",
        include_str!("../../../families/compact-ring.toml"),
    ),
    (
        "distributed-room",
        include_str!("../../../families/distributed-room.toml"),
    ),
    (
        "line-room",
        include_str!("../../../families/line-room.toml"),
    ),
    ("soundbar", include_str!("../../../families/soundbar.toml")),
    (
        "towed-line",
        include_str!("../../../families/towed-line.toml"),
    ),
    (
        "weak-source",
        include_str!("../../../families/weak-source.toml"),
    ),
];

/// A number that is fixed or drawn uniformly from `[low, high]`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Draw {
    Fixed(f64),
    Range([f64; 2]),
}

impl Default for Draw {
    fn default() -> Self {
        Draw::Fixed(0.0)
    }
}

impl Draw {
    fn sample(&self, rng: &mut PhiloxStream) -> f64 {
        match *self {
            Draw::Fixed(v) => v,
            Draw::Range([a, b]) => a + (b - a) * rng.uniform_f64(),
        }
    }

    fn bounds(&self) -> (f64, f64) {
        match *self {
            Draw::Fixed(v) => (v, v),
            Draw::Range([a, b]) => (a, b),
        }
    }

    fn is_valid(&self) -> bool {
        let (a, b) = self.bounds();
        a.is_finite() && b.is_finite() && a <= b
    }
}

/// How the array is drawn.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "layout", rename_all = "kebab-case", deny_unknown_fields)]
pub enum ArrayDraw {
    /// `sensors` hydrophones spread in 3-D (not coplanar), every pair `spacing_m` apart, at
    /// depths `depth_m` (below the surface, z = 0).
    Spread {
        sensors: usize,
        spacing_m: Draw,
        depth_m: Draw,
    },
    /// `sensors` microphones on a horizontal circle of `radius_m`, plus one at the centre if
    /// `centre`, at `height_m` above the floor near the room's middle.
    Ring {
        sensors: usize,
        radius_m: Draw,
        #[serde(default)]
        centre: bool,
        height_m: Draw,
    },
    /// `sensors` microphones on the walls and in the corners of the room, at `height_m`.
    Walls { sensors: usize, height_m: Draw },
    /// `sensors` microphones on a horizontal line, `spacing_m` apart, at `height_m`: along a
    /// wall, 5-15 cm from it and near its middle (a soundbar), with `wall`; else near the
    /// room's middle at a random heading (a microphone stick on a table).
    Line {
        sensors: usize,
        spacing_m: Draw,
        height_m: Draw,
        #[serde(default)]
        wall: bool,
    },
    /// The same sensors every time.
    Fixed { sensors_m: Vec<[f64; 3]> },
    /// `sensors` hydrophones on a horizontal line along y (the array frame's heading axis),
    /// `spacing_m` apart, centred `depth_m` below the surface over the origin: a towed line (in
    /// free field; with `[turn]`, its heading changes).
    Towed {
        sensors: usize,
        spacing_m: Draw,
        depth_m: Draw,
    },
}

/// How a turning array's turn is drawn (`[turn]`): its heading before the turn, when the turn
/// starts, how far it turns (either way, drawn) and how fast.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TurnDraw {
    pub heading_deg: Draw,
    pub start_s: Draw,
    pub turn_deg: Draw,
    pub rate_deg_s: Draw,
}

/// How a source's path is drawn.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case", deny_unknown_fields)]
pub enum PathDraw {
    /// A straight pass: starting `start_range_m` from the array's centre (horizontally), passing
    /// `miss_m` from it at `speed_m_s`, at `depth_m`.
    Pass {
        start_range_m: Draw,
        miss_m: Draw,
        speed_m_s: Draw,
        depth_m: Draw,
    },
    /// A pass with one turn of `turn_deg` (either way) at `turn_rate_deg_s`, starting at a
    /// `turn_at` fraction of the scene, after which the speed is scaled by `speed_factor`.
    Manoeuvre {
        start_range_m: Draw,
        miss_m: Draw,
        speed_m_s: Draw,
        depth_m: Draw,
        turn_deg: Draw,
        turn_rate_deg_s: Draw,
        turn_at: Draw,
        speed_factor: Draw,
    },
    /// Straight passes that cross near the array around the middle of the scene, each at its
    /// closest approach to the first source `closest_m` away.
    Cross {
        speed_m_s: Draw,
        depth_m: Draw,
        closest_m: Draw,
    },
    /// A talker walking round the array's centre at `radius_m` (varying by a tenth), at
    /// `speed_m_s`, at `height_m`.
    Orbit {
        radius_m: Draw,
        speed_m_s: Draw,
        height_m: Draw,
    },
    /// A talker walking between random points of the room (half a metre from the walls) at
    /// `speed_m_s`, at `height_m`.
    Walk { speed_m_s: Draw, height_m: Draw },
}

/// One kind of source in a family.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SourceDraw {
    /// How many sources of this kind (drawn, rounded down).
    #[serde(default = "one")]
    pub count: Draw,
    /// The signals to choose from; several sources of one kind take different ones while they
    /// last.
    pub signal: Vec<SignalKind>,
    /// Level of each source relative to the first of its kind, dB.
    #[serde(default = "zero")]
    pub level_db: Draw,
    pub path: PathDraw,
    /// When the source starts (s); it sounds from then to the end but for its pauses.
    #[serde(default = "zero")]
    pub start_s: Draw,
    /// Pauses: how many, and how long each (s).
    #[serde(default = "zero")]
    pub pauses: Draw,
    #[serde(default = "zero")]
    pub pause_s: Draw,
}

fn one() -> Draw {
    Draw::Fixed(1.0)
}
fn zero() -> Draw {
    Draw::Fixed(0.0)
}

/// The room a family's scenes are in.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RoomDraw {
    /// Each axis between the two corners, drawn independently.
    pub size_m: [[f64; 3]; 2],
    pub rt60_s: Draw,
    #[serde(default = "yes")]
    pub diffuse_tail: bool,
}

fn yes() -> bool {
    true
}

/// The faults of a family's scenes.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FaultDraw {
    #[serde(default = "zero")]
    pub clicks_per_min: Draw,
    #[serde(default)]
    pub click_source: faults::ClickSource,
    /// One channel, drawn, dead for this long at a random time (0: none).
    #[serde(default = "zero")]
    pub dead_channel_s: Draw,
    /// This long of clipping at a random time, after a gain glitch of `clipping_gain` (0: none).
    #[serde(default = "zero")]
    pub clipping_s: Draw,
    #[serde(default = "clip_gain")]
    pub clipping_gain: Draw,
    #[serde(default = "zero")]
    pub sensor_error_m: Draw,
    #[serde(default = "zero")]
    pub sound_speed_error: Draw,
    /// Channels per recording device whose channels cross-talk (0: no crosstalk); the shared
    /// noise's level over each channel's own (dB) and each channel's leak from the one before
    /// it in its device (dB; none: no leak). See [`faults::Crosstalk`].
    #[serde(default)]
    pub crosstalk_group: usize,
    #[serde(default = "zero")]
    pub crosstalk_db: Draw,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub crosstalk_leak_db: Option<Draw>,
}

fn clip_gain() -> Draw {
    Draw::Range([10.0, 30.0])
}

/// How a family's scenes are scored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScoringSpec {
    /// A report within this distance of its source counts as "within" (m).
    #[serde(default = "two")]
    pub threshold_m: f64,
    /// A confirmed track farther than this from every source is a false one (m).
    #[serde(default = "ten")]
    pub far_m: f64,
    /// Direction tracking: the same two, in degrees.
    #[serde(default = "five")]
    pub threshold_deg: f64,
    #[serde(default = "ten")]
    pub far_deg: f64,
    /// Frames before this time are not scored (s).
    #[serde(default = "two")]
    pub warmup_s: f64,
}

fn two() -> f64 {
    2.0
}
fn five() -> f64 {
    5.0
}
fn ten() -> f64 {
    10.0
}

impl Default for ScoringSpec {
    fn default() -> Self {
        Self {
            threshold_m: two(),
            far_m: ten(),
            threshold_deg: five(),
            far_deg: ten(),
            warmup_s: two(),
        }
    }
}

/// A family (one TOML file).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FamilySpec {
    pub name: String,
    #[serde(default)]
    pub description: String,
    pub duration_s: f64,
    pub sample_rate_hz: u32,
    pub speed_of_sound_m_s: f64,
    /// Per-channel SNR (dB), as the simulator defines it.
    pub snr_db: Draw,
    pub array: ArrayDraw,
    #[serde(default, rename = "source")]
    pub sources: Vec<SourceDraw>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub room: Option<RoomDraw>,
    #[serde(default)]
    pub faults: FaultDraw,
    #[serde(default)]
    pub scoring: ScoringSpec,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn: Option<TurnDraw>,
    /// A second array hearing the same scene (drawn into each scene's `[[other_array]]`;
    /// `sonotrack trial` then fuses the two).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub second_array: Option<SecondArrayDraw>,
}

/// Where a family's scenes with a second array are on the Earth (any place serves: the scene
/// is local).
pub const SITE_ORIGIN: Origin = Origin {
    latitude_deg: 53.5,
    longitude_deg: 9.9,
    depth_m: 0.0,
    heading_deg: 0.0,
};

/// `[second_array]`: another array of the same layout, its centre `distance_m` from the first
/// array's centre at a random bearing, in the same water (its own noise).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SecondArrayDraw {
    pub distance_m: Draw,
}

impl FamilySpec {
    /// A built-in family by name, or a family file.
    pub fn find(name_or_path: &str) -> Result<Self> {
        if let Some((_, text)) = BUILT_IN.iter().find(|(n, _)| *n == name_or_path) {
            return Self::parse(text, name_or_path);
        }
        let path = Path::new(name_or_path);
        if path.exists() {
            let text = std::fs::read_to_string(path).at(path)?;
            return Self::parse(&text, name_or_path);
        }
        Err(Error::Usage(format!(
            "no family `{name_or_path}`: give a family file (TOML) or one of {}",
            BUILT_IN
                .iter()
                .map(|(n, _)| *n)
                .collect::<Vec<_>>()
                .join(", ")
        )))
    }

    /// Parse and check a family's TOML; `file` names it in errors.
    pub fn parse(text: &str, file: &str) -> Result<Self> {
        let err = |problem: String| {
            Error::Scene {
            path: file.into(),
            problem,
            fix: "see the built-in families (`sonotrack trial --print-family pass-through`) for the format".into(),
        }
        };
        let f: FamilySpec = toml::from_str(text).map_err(|e| err(e.to_string()))?;
        f.check().map_err(err)?;
        Ok(f)
    }

    /// The family with scenes `duration_s` long, checked.
    pub fn with_duration(mut self, duration_s: f64) -> Result<Self> {
        self.duration_s = duration_s;
        let name = self.name.clone();
        self.check().map_err(|problem| {
            Error::Usage(format!("--duration {duration_s} for {name}: {problem}"))
        })?;
        Ok(self)
    }

    /// Why the family cannot be drawn, if it cannot.
    fn check(&self) -> std::result::Result<(), String> {
        if !(self.duration_s > 0.0 && self.duration_s <= 24.0 * 3600.0) {
            return Err(format!(
                "duration_s = {}: use (0, 86400] s",
                self.duration_s
            ));
        }
        if !self.snr_db.is_valid() {
            return Err("snr_db: a number or [low, high] with low <= high".into());
        }
        let sensors = match &self.array {
            ArrayDraw::Spread { sensors, .. }
            | ArrayDraw::Ring { sensors, .. }
            | ArrayDraw::Walls { sensors, .. }
            | ArrayDraw::Line { sensors, .. }
            | ArrayDraw::Towed { sensors, .. } => *sensors,
            ArrayDraw::Fixed { sensors_m } => sensors_m.len(),
        };
        if !(2..=64).contains(&sensors) {
            return Err(format!("array: {sensors} sensors; use 2 to 64"));
        }
        if let ArrayDraw::Line {
            spacing_m,
            height_m,
            ..
        } = &self.array
        {
            if !(spacing_m.is_valid() && spacing_m.bounds().0 > 0.0 && height_m.is_valid()) {
                return Err(
                    "array: a line needs spacing_m > 0 and height_m, each a number or [low, high] with low <= high".into(),
                );
            }
        }
        if let ArrayDraw::Towed {
            spacing_m, depth_m, ..
        } = &self.array
        {
            if !(spacing_m.is_valid() && spacing_m.bounds().0 > 0.0 && depth_m.is_valid()) {
                return Err(
                    "array: a towed line needs spacing_m > 0 and depth_m, each a number or [low, high] with low <= high".into(),
                );
            }
        }
        if let Some(t) = &self.turn {
            if ![t.heading_deg, t.start_s, t.turn_deg, t.rate_deg_s]
                .iter()
                .all(Draw::is_valid)
            {
                return Err("turn: heading_deg, start_s, turn_deg and rate_deg_s, each a number or [low, high] with low <= high".into());
            }
        }
        let needs_room = matches!(self.array, ArrayDraw::Walls { .. } | ArrayDraw::Line { .. })
            || self
                .sources
                .iter()
                .any(|s| matches!(s.path, PathDraw::Walk { .. }));
        if needs_room && self.room.is_none() {
            return Err("the array or a path needs a [room]".into());
        }
        for (i, s) in self.sources.iter().enumerate() {
            if s.signal.is_empty() {
                return Err(format!("source {i}: give at least one signal"));
            }
            if !(s.count.is_valid() && s.count.bounds().1 <= 16.0 && s.count.bounds().0 >= 0.0) {
                return Err(format!("source {i}: count must lie in [0, 16]"));
            }
        }
        if let Some(r) = &self.room {
            if !r.rt60_s.is_valid() {
                return Err("room.rt60_s: a number or [low, high]".into());
            }
        }
        // Draw a scene to check what the numbers make.
        let scene = self.draw(1, 0);
        scene.validate()
    }

    /// Scene `index` of the family drawn with `seed`.
    pub fn draw(&self, seed: u64, index: u32) -> SceneSpec {
        let mut rng = PhiloxStream::new(seed, index, Stream::Simulate);
        let room = self.room.as_ref().map(|r| RoomSpec {
            size_m: std::array::from_fn(|k| {
                r.size_m[0][k] + (r.size_m[1][k] - r.size_m[0][k]) * rng.uniform_f64()
            }),
            rt60_s: r.rt60_s.sample(&mut rng),
            max_order: None,
            diffuse_tail: r.diffuse_tail,
        });
        let sensors = draw_array(&self.array, room.as_ref(), &mut rng);
        let centre = centroid(&sensors);
        let mut sources = Vec::new();
        for s in &self.sources {
            sources.extend(self.draw_sources(s, &centre, room.as_ref(), &mut rng));
        }
        let (bounds_min_m, bounds_max_m) = match &room {
            Some(r) => (Some([0.0; 3]), Some(r.size_m)),
            None => {
                let reach = self.reach_m().max(50.0) + 30.0;
                let deepest = sensors.iter().map(|s| s[2]).fold(0.0, f64::min);
                (
                    Some([centre[0] - reach, centre[1] - reach, deepest - 30.0]),
                    Some([centre[0] + reach, centre[1] + reach, 0.0]),
                )
            }
        };
        let faults = self.draw_faults(sensors.len(), &mut rng);
        let array_turn = self.turn.as_ref().map(|t| ArrayTurn {
            heading_deg: t.heading_deg.sample(&mut rng),
            start_s: t.start_s.sample(&mut rng),
            turn_deg: t.turn_deg.sample(&mut rng)
                * if rng.uniform_f64() < 0.5 { -1.0 } else { 1.0 },
            rate_deg_s: t.rate_deg_s.sample(&mut rng),
        });
        let mut spec = SceneSpec {
            description: format!("{} scene {index} (seed {seed})", self.name),
            sensors_m: sensors,
            speed_of_sound_m_s: self.speed_of_sound_m_s,
            sample_rate_hz: self.sample_rate_hz,
            duration_s: self.duration_s,
            snr_db: self.snr_db.sample(&mut rng),
            seed: seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ u64::from(index),
            bounds_min_m,
            bounds_max_m,
            truth_rate_hz: 20.0,
            sources,
            room,
            faults,
            array_turn,
            origin: None,
            other_arrays: Vec::new(),
        };
        if let Some(b) = self.draw_second_array(seed, index, &spec) {
            spec.origin = Some(SITE_ORIGIN);
            spec.other_arrays = vec![b];
        }
        spec
    }

    /// The second array of scene `index` (None without `[second_array]`): named "b", a fresh
    /// draw of the family's layout, its centre `distance_m` from `first`'s at a random bearing.
    fn draw_second_array(&self, seed: u64, index: u32, first: &SceneSpec) -> Option<OtherArray> {
        let d = self.second_array.as_ref()?;
        let mut rng = PhiloxStream::new(seed ^ 0x5EC0_A44A, index, Stream::Simulate);
        let sensors = draw_array(&self.array, None, &mut rng);
        let own = centroid(&sensors);
        let first_centre = centroid(&first.sensors_m);
        let dist = d.distance_m.sample(&mut rng);
        let (s, c) = (std::f64::consts::TAU * rng.uniform_f64()).sin_cos();
        Some(OtherArray {
            name: "b".into(),
            at_m: [
                first_centre[0] + dist * c - own[0],
                first_centre[1] + dist * s - own[1],
                0.0,
            ],
            sensors_m: Some(sensors),
            seed: Some(first.seed ^ 0xB0B0_B0B0),
        })
    }

    /// The farthest any source starts from the array (m).
    fn reach_m(&self) -> f64 {
        self.sources
            .iter()
            .map(|s| match &s.path {
                PathDraw::Pass { start_range_m, .. }
                | PathDraw::Manoeuvre { start_range_m, .. } => start_range_m.bounds().1,
                // Each crosses near the array around mid-scene.
                PathDraw::Cross { speed_m_s, .. } => speed_m_s.bounds().1 * self.duration_s * 0.6,
                PathDraw::Orbit { radius_m, .. } => radius_m.bounds().1,
                PathDraw::Walk { .. } => 0.0,
            })
            .fold(0.0, f64::max)
    }

    /// The sources of one kind.
    fn draw_sources(
        &self,
        s: &SourceDraw,
        centre: &[f64; 3],
        room: Option<&RoomSpec>,
        rng: &mut PhiloxStream,
    ) -> Vec<SourceSpec> {
        let count = s.count.sample(rng).floor().max(0.0) as usize;
        let mut signals = s.signal.clone();
        let mut paths = Vec::new();
        // Crossings: where and when the first source passes, and its velocity.
        let mut anchor = None;
        for i in 0..count {
            let path = match &s.path {
                PathDraw::Cross {
                    speed_m_s,
                    depth_m,
                    closest_m,
                } => {
                    let (path, a) = crossing(
                        centre,
                        speed_m_s.sample(rng),
                        depth_m.sample(rng),
                        closest_m.sample(rng),
                        anchor,
                        self.duration_s,
                        rng,
                    );
                    if i == 0 {
                        anchor = Some(a);
                    }
                    path
                }
                p => draw_path(p, centre, room, self.duration_s, rng),
            };
            paths.push(path);
        }
        paths
            .into_iter()
            .enumerate()
            .map(|(i, path)| {
                let k = (rng.uniform_f64() * signals.len() as f64) as usize;
                let signal = if signals.len() > 1 {
                    signals.remove(k.min(signals.len() - 1))
                } else {
                    signals[0]
                };
                let level_db = if i == 0 { 0.0 } else { s.level_db.sample(rng) };
                SourceSpec {
                    signal,
                    level: 10f64.powf(level_db / 20.0),
                    path,
                    active: activity(s, self.duration_s, rng),
                }
            })
            .collect()
    }

    /// One drawn scene's faults.
    fn draw_faults(&self, channels: usize, rng: &mut PhiloxStream) -> FaultSpec {
        let f = &self.faults;
        let at = |len: f64, rng: &mut PhiloxStream| {
            (self.duration_s - len).max(0.0) * (0.2 + 0.6 * rng.uniform_f64())
        };
        let dead_s = f.dead_channel_s.sample(rng);
        let dead = if dead_s > 0.0 {
            vec![faults::DeadChannel {
                channel: ((rng.uniform_f64() * channels as f64) as usize).min(channels - 1),
                start_s: at(dead_s, rng),
                duration_s: dead_s,
            }]
        } else {
            Vec::new()
        };
        let clip_s = f.clipping_s.sample(rng);
        let clipping = if clip_s > 0.0 {
            vec![faults::Clipping {
                start_s: at(clip_s, rng),
                duration_s: clip_s,
                gain: f.clipping_gain.sample(rng),
            }]
        } else {
            Vec::new()
        };
        FaultSpec {
            clicks_per_min: f.clicks_per_min.sample(rng),
            click_source: f.click_source,
            click_peak: None,
            dead,
            clipping,
            sensor_error_m: f.sensor_error_m.sample(rng),
            sound_speed_error: f.sound_speed_error.sample(rng),
            // (Drawn last, and only when asked for, so families without it draw as before.)
            crosstalk: (f.crosstalk_group > 0).then(|| faults::Crosstalk {
                group: f.crosstalk_group.min(channels.max(2)),
                level_db: f.crosstalk_db.sample(rng),
                leak_db: f.crosstalk_leak_db.as_ref().map(|d| d.sample(rng)),
            }),
        }
    }
}

/// When a source sounds: from its start to the end, less its pauses (none: always).
fn activity(s: &SourceDraw, duration_s: f64, rng: &mut PhiloxStream) -> Vec<[f64; 2]> {
    let start = s.start_s.sample(rng).max(0.0);
    let pauses = s.pauses.sample(rng).floor().max(0.0) as usize;
    if start == 0.0 && pauses == 0 {
        return Vec::new();
    }
    let mut cuts: Vec<(f64, f64)> = (0..pauses)
        .map(|_| {
            let len = s.pause_s.sample(rng).max(0.0);
            let at = start + (duration_s - start - len).max(0.0) * rng.uniform_f64();
            (at, at + len)
        })
        .collect();
    cuts.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut active = Vec::new();
    let mut from = start;
    for (a, b) in cuts {
        if a > from {
            active.push([from, a]);
        }
        from = from.max(b);
    }
    if from < duration_s {
        active.push([from, duration_s + 1.0]);
    }
    active
}

/// `n` sensors `spacing` apart on a horizontal line at height `z` in a room of `size`: along
/// the y = 0 wall, 5-15 cm out, its centre within a tenth of the wall's middle (`wall`), or
/// through a point near the room's middle at a random heading.
fn line_array(
    n: usize,
    spacing: f64,
    z: f64,
    wall: bool,
    size: &[f64; 3],
    rng: &mut PhiloxStream,
) -> Vec<[f64; 3]> {
    let (c, heading) = if wall {
        let c = [
            size[0] * (0.4 + 0.2 * rng.uniform_f64()),
            0.05 + 0.1 * rng.uniform_f64(),
            z,
        ];
        (c, 0.0)
    } else {
        let c = [
            size[0] * (0.4 + 0.2 * rng.uniform_f64()),
            size[1] * (0.4 + 0.2 * rng.uniform_f64()),
            z,
        ];
        (c, rng.uniform_f64() * std::f64::consts::PI)
    };
    let (sn, cs) = f64::sin_cos(heading);
    (0..n)
        .map(|i| {
            let d = (i as f64 - 0.5 * (n as f64 - 1.0)) * spacing;
            [c[0] + d * cs, c[1] + d * sn, c[2]]
        })
        .collect()
}

/// The sensors of one drawn array.
fn draw_array(a: &ArrayDraw, room: Option<&RoomSpec>, rng: &mut PhiloxStream) -> Vec<[f64; 3]> {
    match a {
        ArrayDraw::Fixed { sensors_m } => sensors_m.clone(),
        ArrayDraw::Spread {
            sensors,
            spacing_m,
            depth_m,
        } => spread_array(*sensors, spacing_m, depth_m, rng),
        ArrayDraw::Ring {
            sensors,
            radius_m,
            centre,
            height_m,
        } => {
            let r = radius_m.sample(rng);
            let z = height_m.sample(rng);
            let size = room.map_or([0.0; 3], |r| r.size_m);
            // Near the room's middle, off it by up to a fifth of each side.
            let c = [
                size[0] * (0.4 + 0.2 * rng.uniform_f64()),
                size[1] * (0.4 + 0.2 * rng.uniform_f64()),
                z,
            ];
            let phase = rng.uniform_f64() * std::f64::consts::TAU;
            let ring = sensors - usize::from(*centre);
            let mut out: Vec<[f64; 3]> = (0..ring)
                .map(|i| {
                    let a = phase + std::f64::consts::TAU * i as f64 / ring as f64;
                    [c[0] + r * a.cos(), c[1] + r * a.sin(), c[2]]
                })
                .collect();
            if *centre {
                out.push(c);
            }
            out
        }
        ArrayDraw::Line {
            sensors,
            spacing_m,
            height_m,
            wall,
        } => {
            let size = room.map_or([5.0, 4.0, 3.0], |r| r.size_m);
            line_array(
                *sensors,
                spacing_m.sample(rng),
                height_m.sample(rng),
                *wall,
                &size,
                rng,
            )
        }
        ArrayDraw::Towed {
            sensors,
            spacing_m,
            depth_m,
        } => {
            let d = spacing_m.sample(rng);
            let z = -depth_m.sample(rng);
            let n = *sensors;
            (0..n)
                .map(|i| [0.0, (i as f64 - 0.5 * (n as f64 - 1.0)) * d, z])
                .collect()
        }
        ArrayDraw::Walls { sensors, height_m } => {
            let size = room.map_or([5.0, 4.0, 3.0], |r| r.size_m);
            walls_array(*sensors, height_m, &size, rng)
        }
    }
}

/// `n` microphones on the walls of a room of `size` (every third in a corner), at heights
/// drawn from `height`, no two closer than a quarter of the room's shorter side: drawn until
/// they are that far apart.
fn walls_array(n: usize, height: &Draw, size: &[f64; 3], rng: &mut PhiloxStream) -> Vec<[f64; 3]> {
    let inset = 0.05;
    let min_gap = 0.25 * size[0].min(size[1]);
    let mut pts: Vec<[f64; 3]> = Vec::new();
    for _ in 0..100_000 {
        if pts.len() == n {
            break;
        }
        let i = pts.len();
        let z = height.sample(rng).clamp(0.1, size[2] - 0.1);
        let p = if i % 3 == 0 {
            let cx = if rng.uniform_f64() < 0.5 {
                inset
            } else {
                size[0] - inset
            };
            let cy = if rng.uniform_f64() < 0.5 {
                inset
            } else {
                size[1] - inset
            };
            [cx, cy, z]
        } else {
            let u = rng.uniform_f64();
            match (rng.uniform_f64() * 4.0) as usize {
                0 => [inset, u * size[1], z],
                1 => [size[0] - inset, u * size[1], z],
                2 => [u * size[0], inset, z],
                _ => [u * size[0], size[1] - inset, z],
            }
        };
        let clear = pts
            .iter()
            .all(|q| (0..3).map(|k| (p[k] - q[k]).powi(2)).sum::<f64>().sqrt() >= min_gap);
        if clear {
            pts.push(p);
        }
    }
    pts
}

/// `n` sensors in 3-D whose every pair is within `spacing`: random points in a box of the
/// spacing's size, drawn until the pairs fit and the array is not flat (its smallest principal
/// spread at least a sixth of the largest).
fn spread_array(n: usize, spacing: &Draw, depth: &Draw, rng: &mut PhiloxStream) -> Vec<[f64; 3]> {
    let (lo, hi) = spacing.bounds();
    let (dlo, dhi) = depth.bounds();
    let mut best = Vec::new();
    for _ in 0..10_000 {
        let side = 0.9 * hi;
        let pts: Vec<[f64; 3]> = (0..n)
            .map(|_| {
                [
                    side * rng.uniform_f64(),
                    side * rng.uniform_f64(),
                    -(dlo + (dhi - dlo) * rng.uniform_f64()),
                ]
            })
            .collect();
        best = pts.clone();
        let pairs_fit = (0..n).all(|i| {
            (i + 1..n).all(|j| {
                let d = (0..3)
                    .map(|k| (pts[i][k] - pts[j][k]).powi(2))
                    .sum::<f64>()
                    .sqrt();
                d >= lo && d <= hi
            })
        });
        if pairs_fit && spread_ratio(&pts) >= 1.0 / 6.0 {
            return pts;
        }
    }
    best
}

/// The smallest principal spread of points over the largest.
fn spread_ratio(pts: &[[f64; 3]]) -> f64 {
    let c = centroid(pts);
    let mut m = nalgebra::Matrix3::<f64>::zeros();
    for p in pts {
        let d = nalgebra::Vector3::new(p[0] - c[0], p[1] - c[1], p[2] - c[2]);
        m += d * d.transpose();
    }
    let e = m.symmetric_eigen().eigenvalues;
    let (min, max) = e
        .iter()
        .fold((f64::INFINITY, 0.0f64), |(a, b), v| (a.min(*v), b.max(*v)));
    if max > 0.0 {
        (min.max(0.0) / max).sqrt()
    } else {
        0.0
    }
}

fn centroid(pts: &[[f64; 3]]) -> [f64; 3] {
    let n = pts.len().max(1) as f64;
    std::array::from_fn(|k| pts.iter().map(|p| p[k]).sum::<f64>() / n)
}

/// A pass's start, heading (rad) and closest point: from `range` away horizontally, passing
/// `miss` from the centre.
fn pass_start(
    centre: &[f64; 3],
    range: f64,
    miss: f64,
    z: f64,
    rng: &mut PhiloxStream,
) -> ([f64; 3], f64) {
    let heading = rng.uniform_f64() * std::f64::consts::TAU;
    let side = if rng.uniform_f64() < 0.5 { 1.0 } else { -1.0 };
    let (u, n) = (
        [heading.cos(), heading.sin()],
        [-heading.sin(), heading.cos()],
    );
    let along = (range * range - miss * miss).max(0.0).sqrt();
    let closest = [
        centre[0] + side * miss * n[0],
        centre[1] + side * miss * n[1],
    ];
    (
        [closest[0] - along * u[0], closest[1] - along * u[1], z],
        heading,
    )
}

/// One source's path (all kinds but `Cross`).
fn draw_path(
    p: &PathDraw,
    centre: &[f64; 3],
    room: Option<&RoomSpec>,
    duration_s: f64,
    rng: &mut PhiloxStream,
) -> PathSpec {
    match p {
        PathDraw::Pass {
            start_range_m,
            miss_m,
            speed_m_s,
            depth_m,
        } => {
            let (range, miss, v, z) = (
                start_range_m.sample(rng),
                miss_m.sample(rng),
                speed_m_s.sample(rng),
                -depth_m.sample(rng),
            );
            let (start, h) = pass_start(centre, range, miss, z, rng);
            PathSpec::Line {
                start_m: start,
                velocity_m_s: [v * h.cos(), v * h.sin(), 0.0],
            }
        }
        PathDraw::Manoeuvre {
            start_range_m,
            miss_m,
            speed_m_s,
            depth_m,
            turn_deg,
            turn_rate_deg_s,
            turn_at,
            speed_factor,
        } => {
            let (range, miss, v, z) = (
                start_range_m.sample(rng),
                miss_m.sample(rng),
                speed_m_s.sample(rng),
                -depth_m.sample(rng),
            );
            let (start, h) = pass_start(centre, range, miss, z, rng);
            let sign = if rng.uniform_f64() < 0.5 { 1.0 } else { -1.0 };
            let turn = turn_deg.sample(rng);
            let rate = turn_rate_deg_s.sample(rng).max(1.0);
            let t0 = turn_at.sample(rng) * duration_s;
            let factor = speed_factor.sample(rng);
            PathSpec::Legs {
                start_m: start,
                heading_deg: h.to_degrees(),
                legs: vec![
                    Leg {
                        duration_s: t0.max(0.1),
                        speed_m_s: v,
                        turn_rate_deg_s: 0.0,
                        climb_m_s: 0.0,
                    },
                    Leg {
                        duration_s: turn / rate,
                        // The speed changes over the turn.
                        speed_m_s: v * (1.0 + factor) / 2.0,
                        turn_rate_deg_s: sign * rate,
                        climb_m_s: 0.0,
                    },
                    Leg {
                        duration_s: duration_s.max(1.0),
                        speed_m_s: v * factor,
                        turn_rate_deg_s: 0.0,
                        climb_m_s: 0.0,
                    },
                ],
            }
        }
        PathDraw::Orbit {
            radius_m,
            speed_m_s,
            height_m,
        } => {
            let (r, v, z) = (
                radius_m.sample(rng),
                speed_m_s.sample(rng),
                height_m.sample(rng),
            );
            let r = match room {
                // Keep the walk half a metre inside the walls.
                Some(room) => r
                    .min(
                        [
                            centre[0],
                            room.size_m[0] - centre[0],
                            centre[1],
                            room.size_m[1] - centre[1],
                        ]
                        .iter()
                        .fold(f64::INFINITY, |m, v| m.min(*v))
                            - 0.5,
                    )
                    .max(0.3),
                None => r,
            };
            let phase = rng.uniform_f64() * std::f64::consts::TAU;
            let sign = if rng.uniform_f64() < 0.5 { 1.0 } else { -1.0 };
            // Round the circle at `v`, its radius breathing by a tenth: legs of a tenth of a
            // turn, each a little tighter or wider.
            let start = [centre[0] + r * phase.cos(), centre[1] + r * phase.sin(), z];
            let heading = phase + sign * std::f64::consts::FRAC_PI_2;
            let mut legs = Vec::new();
            let mut t = 0.0;
            while t < duration_s + 1.0 {
                let rr = r * (0.9 + 0.2 * rng.uniform_f64());
                let w = (v / rr).to_degrees();
                let d = 36.0 / w;
                legs.push(Leg {
                    duration_s: d,
                    speed_m_s: v,
                    turn_rate_deg_s: sign * w,
                    climb_m_s: 0.0,
                });
                t += d;
            }
            PathSpec::Legs {
                start_m: start,
                heading_deg: heading.to_degrees(),
                legs,
            }
        }
        PathDraw::Walk {
            speed_m_s,
            height_m,
        } => {
            let size = room.map_or([5.0, 4.0, 3.0], |r| r.size_m);
            let z = height_m.sample(rng);
            let point = |rng: &mut PhiloxStream| {
                [
                    0.5 + (size[0] - 1.0) * rng.uniform_f64(),
                    0.5 + (size[1] - 1.0) * rng.uniform_f64(),
                ]
            };
            let v = speed_m_s.sample(rng);
            let mut at = point(rng);
            let start = [at[0], at[1], z];
            let mut legs = Vec::new();
            let mut heading0 = None;
            let mut t = 0.0;
            while t < duration_s + 1.0 {
                let next = point(rng);
                let (dx, dy) = (next[0] - at[0], next[1] - at[1]);
                let d = (dx * dx + dy * dy).sqrt().max(0.2);
                let h = dy.atan2(dx);
                if heading0.is_none() {
                    heading0 = Some(h);
                }
                // A straight leg to the next point; the heading jumps there (a pivot).
                legs.push((h, d / v));
                t += d / v;
                at = next;
            }
            walk_legs(start, heading0.unwrap_or(0.0), &legs, v)
        }
        PathDraw::Cross { .. } => PathSpec::Static {
            position_m: *centre,
        },
    }
}

/// A walk of straight legs with pivots between them, as a path of legs: each pivot is a
/// quarter-second turn at the speed of the walk.
fn walk_legs(start: [f64; 3], heading0: f64, legs: &[(f64, f64)], v: f64) -> PathSpec {
    let pivot_s = 0.25;
    let mut out = Vec::new();
    let mut h = heading0;
    for (i, &(heading, dt)) in legs.iter().enumerate() {
        if i > 0 {
            // The shortest turn to the new heading.
            let d = (heading - h + std::f64::consts::PI).rem_euclid(std::f64::consts::TAU)
                - std::f64::consts::PI;
            out.push(Leg {
                duration_s: pivot_s,
                speed_m_s: 0.2 * v,
                turn_rate_deg_s: d.to_degrees() / pivot_s,
                climb_m_s: 0.0,
            });
        }
        out.push(Leg {
            duration_s: dt.max(0.05),
            speed_m_s: v,
            turn_rate_deg_s: 0.0,
            climb_m_s: 0.0,
        });
        h = heading;
    }
    PathSpec::Legs {
        start_m: start,
        heading_deg: heading0.to_degrees(),
        legs: out,
    }
}

/// Where and when the first of crossing sources passes, and its velocity.
#[derive(Debug, Clone, Copy)]
struct Crossing {
    point: [f64; 2],
    t_s: f64,
    velocity: [f64; 2],
}

/// A straight pass through a point near the array around mid-scene (the first source's), or,
/// for a later source, through the first one's crossing point at a time such that its closest
/// approach to the first source is `closest`.
fn crossing(
    centre: &[f64; 3],
    speed: f64,
    depth: f64,
    closest: f64,
    first: Option<Crossing>,
    duration_s: f64,
    rng: &mut PhiloxStream,
) -> (PathSpec, Crossing) {
    let sign = |rng: &mut PhiloxStream| if rng.uniform_f64() < 0.5 { 1.0 } else { -1.0 };
    let c = match first {
        Some(f) => {
            // At least 40 degrees off the first source's course, either way.
            let off = (40.0 + 100.0 * rng.uniform_f64()).to_radians() * sign(rng);
            let heading = f.velocity[1].atan2(f.velocity[0]) + off;
            let v = [speed * heading.cos(), speed * heading.sin()];
            // Through the point at t + delta: relative to the first, the separation is
            // w (t - t1) + v delta with w = v1 - v, whose smallest size is |v x w| |delta| / |w|.
            let w = [f.velocity[0] - v[0], f.velocity[1] - v[1]];
            let wn = (w[0] * w[0] + w[1] * w[1]).sqrt();
            let cross = (v[0] * w[1] - v[1] * w[0]).abs();
            let delta = if cross > 1e-9 {
                closest * wn / cross
            } else {
                0.0
            };
            Crossing {
                point: f.point,
                t_s: f.t_s + sign(rng) * delta,
                velocity: v,
            }
        }
        None => {
            let heading = rng.uniform_f64() * std::f64::consts::TAU;
            Crossing {
                point: [
                    centre[0] + 8.0 * (rng.uniform_f64() - 0.5),
                    centre[1] + 8.0 * (rng.uniform_f64() - 0.5),
                ],
                t_s: duration_s * (0.4 + 0.2 * rng.uniform_f64()),
                velocity: [speed * heading.cos(), speed * heading.sin()],
            }
        }
    };
    let (x, v, t) = (c.point, c.velocity, c.t_s);
    let path = PathSpec::Line {
        start_m: [x[0] - v[0] * t, x[1] - v[1] * t, -depth],
        velocity_m_s: [v[0], v[1], 0.0],
    };
    (path, c)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every built-in family parses, draws valid scenes, and draws the same scene for the same
    /// seed and index (and another for another index).
    #[test]
    fn built_in_families_draw_valid_repeatable_scenes() {
        for (name, _) in BUILT_IN {
            let f = FamilySpec::find(name).unwrap();
            assert_eq!(&f.name, name);
            for i in 0..5 {
                let s = f.draw(7, i);
                s.validate()
                    .unwrap_or_else(|e| panic!("{name} scene {i}: {e}"));
                assert_eq!(s, f.draw(7, i));
            }
            assert_ne!(f.draw(7, 0), f.draw(7, 1));
        }
    }

    /// The pass-through family's arrays and paths are what its file says: four sensors 20-40 m
    /// apart, not coplanar; the source starts 50-90 m out and passes 2-15 m from the centre.
    #[test]
    fn pass_through_scenes_fit_their_description() {
        let f = FamilySpec::find("pass-through").unwrap();
        for i in 0..20 {
            let s = f.draw(3, i);
            let n = s.sensors_m.len();
            assert_eq!(n, 4);
            for a in 0..n {
                for b in a + 1..n {
                    let d = (0..3)
                        .map(|k| (s.sensors_m[a][k] - s.sensors_m[b][k]).powi(2))
                        .sum::<f64>()
                        .sqrt();
                    assert!(
                        (20.0..=40.0).contains(&d),
                        "scene {i}: sensors {a}, {b} {d:.1} m apart"
                    );
                }
            }
            assert!(spread_ratio(&s.sensors_m) >= 1.0 / 6.0);
            let c = centroid(&s.sensors_m);
            let p0 = s.sources[0].path.position(0.0);
            let r0 = ((p0[0] - c[0]).powi(2) + (p0[1] - c[1]).powi(2)).sqrt();
            assert!(
                (49.0..=91.0).contains(&r0),
                "scene {i}: starts {r0:.1} m out"
            );
            let closest = (0..6000)
                .map(|k| {
                    let p = s.sources[0].path.position(f64::from(k) * 0.05);
                    ((p[0] - c[0]).powi(2) + (p[1] - c[1]).powi(2)).sqrt()
                })
                .fold(f64::INFINITY, f64::min);
            assert!(
                (1.9..=15.1).contains(&closest),
                "scene {i}: passes {closest:.1} m from the centre"
            );
        }
    }

    /// Crossing sources come within the drawn distance of the first one.
    #[test]
    fn crossing_sources_meet_at_their_closest_approach() {
        let f = FamilySpec::find("crossing").unwrap();
        for i in 0..20 {
            let s = f.draw(5, i);
            assert!((2..=3).contains(&s.sources.len()));
            let a = &s.sources[0].path;
            for b in &s.sources[1..] {
                let closest = (0..12_000)
                    .map(|k| {
                        let t = f64::from(k) * 0.01;
                        let (p, q) = (a.position(t), b.path.position(t));
                        ((p[0] - q[0]).powi(2) + (p[1] - q[1]).powi(2)).sqrt()
                    })
                    .fold(f64::INFINITY, f64::min);
                assert!((2.9..=10.1).contains(&closest), "scene {i}: {closest:.2} m");
            }
        }
    }

    /// A family file with a mistake is an error naming the file and the problem.
    #[test]
    fn bad_family_files_are_named() {
        let e = FamilySpec::parse("name = \"x\"", "mine.toml")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("mine.toml") && e.contains("missing field"),
            "{e}"
        );
        let text = BUILT_IN[0].1.replace("sensors = 4", "sensors = 1");
        let e = FamilySpec::parse(&text, "mine.toml")
            .unwrap_err()
            .to_string();
        assert!(e.contains("sensors"), "{e}");
        assert!(FamilySpec::find("no-such-family").is_err());
        // A line layout's spacing: positive, and a range low to high.
        let line = FamilySpec::find("line-room").unwrap();
        let text = toml::to_string(&line).unwrap();
        for bad in ["spacing_m = -0.03", "spacing_m = [0.05, 0.01]"] {
            let t = text.replace("spacing_m = [0.03, 0.05]", bad);
            assert_ne!(t, text);
            let e = FamilySpec::parse(&t, "mine.toml").unwrap_err().to_string();
            assert!(e.contains("spacing_m"), "{bad}: {e}");
        }
    }
}
