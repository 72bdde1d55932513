//! The built-in scenes. `harbour` is also what `sonotrack demo` replays.

use super::{FaultSpec, PathSpec, SceneSpec, SignalKind, SourceSpec};

/// Built-in scenes. `harbour` is also what `sonotrack demo` replays.
pub const PRESETS: &[&str] = &["harbour", "tetra", "room", "two-boats"];

impl SceneSpec {
    pub fn preset(name: &str) -> Option<Self> {
        let turn = |start: [f64; 3], speed: f64, heading: f64, rate: f64| PathSpec::Turn {
            start_m: start,
            speed_m_s: speed,
            heading_deg: heading,
            turn_rate_deg_s: rate,
            climb_m_s: 0.0,
        };
        let spec = match name {
            "harbour" => SceneSpec {
                room: None,
                faults: FaultSpec::default(),
                array_turn: None,
                origin: None,
                other_arrays: Vec::new(),
                description: "5 hydrophones on pier piles, 12-30 m apart; a boat on a slow left turn".into(),
                sensors_m: vec![
                    [0.0, 0.0, -4.0],
                    [22.0, 2.0, -10.0],
                    [4.0, 19.0, -7.0],
                    [-12.0, 8.0, -15.0],
                    [7.0, 5.0, -22.0],
                ],
                speed_of_sound_m_s: 1500.0,
                sample_rate_hz: 48_000,
                duration_s: 12.0,
                snr_db: 10.0,
                seed: 7,
                bounds_min_m: Some([-80.0, -80.0, -50.0]),
                bounds_max_m: Some([80.0, 80.0, 0.0]),
                truth_rate_hz: 20.0,
                sources: vec![SourceSpec {
                    active: Vec::new(),
                    signal: SignalKind::Ship,
                    level: 1.0,
                    path: turn([-20.0, -6.0, -3.0], 2.0, 20.0, 3.0),
                }],
            },
            "tetra" => SceneSpec {
                room: None,
                faults: FaultSpec::default(),
                array_turn: None,
                origin: None,
                other_arrays: Vec::new(),
                description: "a 2 m hydrophone tetrahedron; a diver swimming past at 1 m/s".into(),
                sensors_m: vec![
                    [0.0, 0.0, -10.0],
                    [2.0, 0.0, -10.0],
                    [1.0, 1.732, -10.0],
                    [1.0, 0.577, -11.633],
                ],
                speed_of_sound_m_s: 1500.0,
                sample_rate_hz: 96_000,
                duration_s: 10.0,
                snr_db: 12.0,
                seed: 11,
                bounds_min_m: Some([-30.0, -30.0, -40.0]),
                bounds_max_m: Some([30.0, 30.0, 0.0]),
                truth_rate_hz: 20.0,
                sources: vec![SourceSpec {
                    active: Vec::new(),
                    signal: SignalKind::Pink,
                    level: 1.0,
                    path: PathSpec::Line {
                        start_m: [-5.0, 4.0, -8.0],
                        velocity_m_s: [1.0, -0.2, 0.0],
                    },
                }],
            },
            "room" => SceneSpec {
                room: None,
                faults: FaultSpec::default(),
                array_turn: None,
                origin: None,
                other_arrays: Vec::new(),
                description: "6 microphones in a 6 x 5 x 3 m room (free field, no reverberation); a talker walking".into(),
                sensors_m: vec![
                    [0.1, 0.1, 2.6],
                    [5.9, 0.2, 1.0],
                    [5.8, 4.9, 2.4],
                    [0.2, 4.8, 1.1],
                    [3.0, 0.1, 1.8],
                    [3.0, 4.9, 0.4],
                ],
                speed_of_sound_m_s: 343.0,
                sample_rate_hz: 16_000,
                duration_s: 12.0,
                snr_db: 15.0,
                seed: 5,
                bounds_min_m: Some([0.0, 0.0, 0.0]),
                bounds_max_m: Some([6.0, 5.0, 3.0]),
                truth_rate_hz: 20.0,
                sources: vec![SourceSpec {
                    active: Vec::new(),
                    signal: SignalKind::Speech,
                    level: 1.0,
                    path: PathSpec::Line {
                        start_m: [1.0, 1.5, 1.6],
                        velocity_m_s: [0.3, 0.15, 0.0],
                    },
                }],
            },
            "two-boats" => {
                let mut s = Self::preset("harbour")?;
                s.description = "the harbour array with two boats crossing".into();
                s.sources = vec![
                    SourceSpec {
                        active: Vec::new(),
                        signal: SignalKind::Ship,
                        level: 1.0,
                        path: turn([-25.0, -10.0, -2.0], 2.0, 30.0, 2.0),
                    },
                    SourceSpec {
                        active: Vec::new(),
                        signal: SignalKind::Ship,
                        level: 0.7,
                        path: PathSpec::Line {
                            start_m: [30.0, 25.0, -3.0],
                            velocity_m_s: [-2.5, -0.5, 0.0],
                        },
                    },
                ];
                s.seed = 13;
                s
            }
            _ => return None,
        };
        Some(spec)
    }
}
