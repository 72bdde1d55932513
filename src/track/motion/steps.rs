//! Each track's step to a frame: how long since its state, the propagation delay that times the
//! new state, and the array's turn since (a turning array).

use nalgebra::Vector3;

use crate::dsp::geometry::ArrayGeometry;
use crate::track::state::Track;
use crate::track::{TrackMode, TrackStep};

/// The frame the tracks step to.
pub struct StepTo<'a> {
    /// Its centre (arrival time), s.
    pub t_centre_s: f64,
    pub geo: &'a ArrayGeometry,
    pub mode: TrackMode,
    /// A turning array: its heading now (degrees).
    pub heading_deg: Option<f64>,
}

/// Each track's step to frame `f`, into `out`. In 3-D the state time is the frame centre less
/// the source's propagation delay, from where the track predicts the source to be then.
pub fn steps_to(f: &StepTo, tracks: &[Track], out: &mut Vec<TrackStep>) {
    let c = f.geo.speed_of_sound_m_s;
    let three_d = f.mode == TrackMode::ThreeD;
    out.clear();
    for t in tracks {
        let lag = if three_d {
            // Predict where the source is now to time the step.
            let pos = Vector3::new(t.est.mean[0], t.est.mean[1], t.est.mean[2]);
            let vel = Vector3::new(t.est.mean[3], t.est.mean[4], t.est.mean[5]);
            let guess = f.t_centre_s - f.geo.mean_range_m(&pos) / c;
            let pred = pos + vel * (guess - t.t_state_s);
            f.geo.mean_range_m(&pred) / c
        } else {
            0.0
        };
        let dt = (f.t_centre_s - lag - t.t_state_s).max(1e-6);
        let yaw = match (f.heading_deg, t.heading_deg) {
            (Some(now), Some(then)) => crate::math::geo::turn_deg(then, now).to_radians(),
            _ => 0.0,
        };
        out.push(TrackStep {
            yaw_rad: yaw as f32,
            ..TrackStep::fixed(t.slot, dt as f32, lag as f32)
        });
    }
}
