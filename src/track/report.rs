//! What the tracker reports of a track each frame: its status, its state as the outputs give it
//! (a position, or in direction mode a unit direction with its rate and inverse range), and
//! the covariance that goes with it.

use nalgebra::{Matrix3, Vector3};
use serde::Serialize;

use crate::track::motion::models::Kinematics;
use crate::track::{Estimate, LineAxes, TrackMode};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum TrackStatus {
    /// Recently born, not yet confirmed by several frames.
    Tentative,
    /// Supported by the measurements.
    Confirmed,
    /// No recent support: the position is a prediction.
    Coasting,
}

/// Why a track ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum EndReason {
    /// A confirmed track lost its source (missed gates, silence, left the volume, diverged).
    Lost,
    /// A tentative track that was never confirmed.
    Unconfirmed,
    /// It followed the same source as an older track.
    Duplicate,
    /// A tentative track that gave its slot to a new birth.
    Replaced,
}

/// A track the tracker deleted this frame.
#[derive(Debug, Clone, PartialEq)]
pub struct TrackEnd {
    pub id: u64,
    pub reason: EndReason,
    /// The tracker's words for it (as logged).
    pub detail: String,
    /// Whether the track had been confirmed.
    pub was_confirmed: bool,
}

/// Which estimate of a state a report carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum EstimateKind {
    /// From the data up to the frame (what the filter has then).
    #[default]
    Filtered,
    /// From all of the track's data (fixed-interval RTS, once the track has ended).
    Smoothed,
    /// From the data up to a fixed lag after the frame (fixed-lag RTS, live).
    Lagged,
}

/// The filter's Gaussian summary of a state: mean and covariance of position (3) then
/// velocity (3), in the filter's own coordinates (see [`Kinematics`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GaussianState {
    pub mean: [f64; 6],
    pub cov: [[f64; 6]; 6],
}

/// One track's state after a frame, as reported to the outputs.
#[derive(Debug, Clone, PartialEq)]
pub struct TrackReport {
    pub id: u64,
    pub status: TrackStatus,
    pub seq: u64,
    /// State (emission) time, seconds from the stream start.
    pub t_s: f64,
    /// Arrival time of the frame centre at the array.
    pub t_frame_s: f64,
    /// Position (m) in 3-D mode; unit direction towards the source in direction mode.
    pub position: [f64; 3],
    /// Velocity (m/s), or rate of change of the direction (1/s).
    pub velocity: [f64; 3],
    pub pos_cov: [[f64; 3]; 3],
    pub vel_std: [f64; 3],
    pub model_probs: Vec<f32>,
    pub turn_rate_rad_s: f32,
    pub ess: f32,
    /// Fraction of informative pairs with a peak where the track predicts one (NaN when the
    /// frame had no informative pair, e.g. silence).
    pub support: f32,
    pub mode: TrackMode,
    /// Direction mode: the inverse range (1/m, at least 0) and its standard deviation.
    pub inv_range: Option<[f64; 2]>,
    /// Mean coherence (0..1) of the pairs' peaks assigned to the track this frame: the share of
    /// the frame's power that is this source's (None without an assigned peak; see
    /// [`crate::dsp::coherence`]).
    pub coherence: Option<f32>,
    /// The filter's state behind the report (what a smoother works on) and its kinematics.
    pub state: GaussianState,
    pub kin: Kinematics,
    pub estimate: EstimateKind,
    /// Line mode: the array's axis and half-plane (the reported direction lies in it).
    pub line: Option<LineAxes>,
    /// Line mode with the sources in a known plane: the mirror of the reported direction
    /// across the axis, where a source there would fit the delays as well (not outside the
    /// search volume).
    pub mirror: Option<[f64; 3]>,
    /// A turning line array's mirror twin: the probability that the source is at `mirror`
    /// rather than at `position`, from the frames so far (None once the turn has decided it,
    /// or for a fixed array).
    pub mirror_prob: Option<f32>,
    /// A turning array: its heading at this frame (the array frame's +y axis, degrees
    /// clockwise from north). `position`, `velocity` and `mirror` stay in the array's frame.
    pub heading_deg: Option<f64>,
    /// A track on the GCC curves (track-before-detect): its existence probability. None for
    /// a track on the peaks.
    pub existence: Option<f32>,
}

impl TrackReport {
    /// Line mode: the angle between the reported direction and the array's axis and its
    /// standard deviation, both in degrees (0° along the axis, from the first sensor towards
    /// the last; 90° broadside).
    pub fn cone_deg(&self) -> Option<[f64; 2]> {
        let l = self.line?;
        let a = Vector3::from(l.axis.map(f64::from)).normalize();
        let u = Vector3::from(self.position);
        let cos = u.dot(&a).clamp(-1.0, 1.0);
        let theta = cos.acos();
        // The direction of growing angle at u, in the half-plane: d u / d θ.
        let away = (u - a * cos)
            .try_normalize(1e-12)
            .unwrap_or_else(|| Vector3::from(l.side.map(f64::from)).normalize());
        let t = away * cos - a * theta.sin();
        let c = Matrix3::from_fn(|r, k| self.pos_cov[r][k]);
        let sd = (t.transpose() * c * t)[(0, 0)].max(0.0).sqrt();
        Some([theta.to_degrees(), sd.to_degrees()])
    }

    /// Direction mode: the range (m), where the inverse range is at least twice its standard
    /// deviation (near enough for the wavefront's curvature to measure it).
    pub fn range_m(&self) -> Option<f64> {
        self.inv_range
            .filter(|v| v[0] > 0.0 && v[0] >= 2.0 * v[1])
            .map(|v| 1.0 / v[0])
    }
}

/// The report of a track with estimate `e` and `id`, state time `t_s`, this frame.
#[allow(clippy::too_many_arguments)]
pub(crate) fn report(
    id: u64,
    t_s: f64,
    e: &Estimate,
    status: TrackStatus,
    seq: u64,
    t_frame_s: f64,
    support: Option<f32>,
    kin: Kinematics,
    line: Option<LineAxes>,
) -> TrackReport {
    let view = view_of(&e.mean, &e.cov, kin);
    TrackReport {
        id,
        status,
        seq,
        t_s,
        t_frame_s,
        position: view.position,
        velocity: view.velocity,
        pos_cov: view.pos_cov,
        vel_std: view.vel_std,
        model_probs: e.model_probs.clone(),
        turn_rate_rad_s: e.turn_rate,
        ess: e.ess,
        support: support.unwrap_or(f32::NAN),
        mode: if line.is_some() {
            TrackMode::Line
        } else {
            view.mode
        },
        inv_range: view.inv_range,
        coherence: None,
        state: GaussianState {
            mean: e.mean,
            cov: e.cov,
        },
        kin,
        estimate: EstimateKind::Filtered,
        line,
        mirror: None,
        mirror_prob: None,
        heading_deg: None,
        existence: None,
    }
}

impl TrackReport {
    /// This report with another estimate of its state (a smoother's), its reported position,
    /// velocity and spreads worked out again from it.
    pub fn with_state(&self, state: GaussianState, estimate: EstimateKind) -> TrackReport {
        let view = view_of(&state.mean, &state.cov, self.kin);
        TrackReport {
            position: view.position,
            velocity: view.velocity,
            pos_cov: view.pos_cov,
            vel_std: view.vel_std,
            inv_range: view.inv_range,
            mirror: self
                .mirror
                .zip(self.line)
                .map(|(_, l)| mirror_across(&view.position, &l.axis)),
            state,
            estimate,
            ..self.clone()
        }
    }
}

/// Line mode: direction `u` mirrored across the array's `axis` (the same angle to the axis,
/// on the other side of it in the plane they span).
pub fn mirror_across(u: &[f64; 3], axis: &[f32; 3]) -> [f64; 3] {
    let a = Vector3::from(axis.map(f64::from)).normalize();
    let u = Vector3::from(*u);
    (a * (2.0 * u.dot(&a)) - u).into()
}

/// What the outputs give of a state.
struct ReportedState {
    mode: TrackMode,
    position: [f64; 3],
    velocity: [f64; 3],
    pos_cov: [[f64; 3]; 3],
    vel_std: [f64; 3],
    inv_range: Option<[f64; 2]>,
}

/// The reported position (or direction), velocity and spreads of a state.
fn view_of(mean: &[f64; 6], cov: &[[f64; 6]; 6], kin: Kinematics) -> ReportedState {
    let mode = match kin {
        Kinematics::ThreeD => TrackMode::ThreeD,
        _ => TrackMode::Direction,
    };
    if mode == TrackMode::Direction {
        let d = direction_of(mean, cov);
        // (With plane waves there is no range to report.)
        let inv_range =
            (kin == Kinematics::Curved).then(|| [(d.norm - 1.0).max(0.0), d.inv_range_sd]);
        return ReportedState {
            mode,
            position: d.u,
            velocity: d.rate,
            pos_cov: d.cov,
            vel_std: d.rate_std,
            inv_range,
        };
    }
    ReportedState {
        mode,
        position: [mean[0], mean[1], mean[2]],
        velocity: [mean[3], mean[4], mean[5]],
        pos_cov: std::array::from_fn(|r| std::array::from_fn(|c| cov[r][c])),
        vel_std: [3, 4, 5].map(|i| cov[i][i].max(0.0).sqrt()),
        inv_range: None,
    }
}

/// A direction-mode estimate as reported: its mean position p is the direction scaled by
/// 1 + the inverse range (see [`crate::track::measure::likelihood::sensor_terms`]).
struct DirectionView {
    /// The unit direction p / |p|.
    u: [f64; 3],
    /// |p|.
    norm: f64,
    /// The direction's covariance: p's, in the plane tangent at u, over |p|².
    cov: [[f64; 3]; 3],
    /// The standard deviation of |p| (of the inverse range, 1/m).
    inv_range_sd: f64,
    /// The direction's rate of change (rad/s): the velocity's tangent part (the velocity
    /// slots hold the source's velocity over its range, or on the unit sphere for plane
    /// waves: see `models::advance`), and its standard deviations.
    rate: [f64; 3],
    rate_std: [f64; 3],
}

fn direction_of(mean: &[f64; 6], cov6: &[[f64; 6]; 6]) -> DirectionView {
    let p = Vector3::new(mean[0], mean[1], mean[2]);
    let norm = p.norm().max(1e-12);
    let u = p / norm;
    let mut cov = Matrix3::zeros();
    for r in 0..3 {
        for c in 0..3 {
            cov[(r, c)] = cov6[r][c];
        }
    }
    let proj = Matrix3::identity() - u * u.transpose();
    let tangent = proj * cov * proj / (norm * norm);
    let v = Vector3::new(mean[3], mean[4], mean[5]);
    let vcov = Matrix3::from_fn(|r, c| cov6[3 + r][3 + c]);
    let rate = proj * v;
    let rate_cov = proj * vcov * proj;
    DirectionView {
        u: [u.x, u.y, u.z],
        norm,
        cov: std::array::from_fn(|r| std::array::from_fn(|c| tangent[(r, c)])),
        inv_range_sd: (u.transpose() * cov * u)[(0, 0)].max(0.0).sqrt(),
        rate: [rate.x, rate.y, rate.z],
        rate_std: std::array::from_fn(|i| rate_cov[(i, i)].max(0.0).sqrt()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A direction-mode estimate as reported: the unit direction, its covariance in the tangent
    /// plane over |p|², the inverse range and its spread from the radial part, and the rate of
    /// change of the direction: the tangent part of the velocity (the source's velocity over
    /// its range), without its radial part (the range's rate over the range).
    #[test]
    fn direction_estimates_are_reported_on_the_sphere() {
        let u = Vector3::new(0.6, 0.0, 0.8);
        let t1 = Vector3::new(0.0, 1.0, 0.0);
        let mut e = Estimate::new(1);
        let p = u * 1.25;
        let v = t1 * 0.5 + u * 0.3;
        e.mean = [p.x, p.y, p.z, v.x, v.y, v.z];
        // Variance 0.01 along u (the inverse range), 0.04 along t1; velocity likewise.
        let pc = u * u.transpose() * 0.01 + t1 * t1.transpose() * 0.04;
        for r in 0..3 {
            for c in 0..3 {
                e.cov[r][c] = pc[(r, c)];
                e.cov[3 + r][3 + c] = pc[(r, c)];
            }
        }
        let d = direction_of(&e.mean, &e.cov);
        assert!((Vector3::from(d.u) - u).norm() < 1e-12);
        assert!((d.norm - 1.25).abs() < 1e-12);
        assert!((d.inv_range_sd - 0.1).abs() < 1e-12);
        let cov = Matrix3::from_fn(|r, c| d.cov[r][c]);
        assert!((u.transpose() * cov * u)[(0, 0)].abs() < 1e-15);
        assert!(((t1.transpose() * cov * t1)[(0, 0)] - 0.04 / 1.5625).abs() < 1e-12);
        assert!((Vector3::from(d.rate) - t1 * 0.5).norm() < 1e-12);
        assert!((d.rate_std[1] - 0.2).abs() < 1e-12);
        // (Standard deviations: square roots of rounding-level variances.)
        assert!(
            d.rate_std[0] < 1e-7 && d.rate_std[2] < 1e-7,
            "{:?}",
            d.rate_std
        );
    }

    /// Line mode: the reported direction's angle to the axis and its spread (the covariance
    /// along the direction of growing angle), the mirror across the axis, and the mode.
    #[test]
    fn line_reports_give_the_cone_angle() {
        let line = LineAxes {
            axis: [1.0, 0.0, 0.0],
            side: [0.0, 1.0, 0.0],
            plane: true,
            keep_side: false,
        };
        let th = 60f64.to_radians();
        let u = Vector3::new(th.cos(), th.sin(), 0.0);
        let grow = Vector3::new(-th.sin(), th.cos(), 0.0);
        let mut e = Estimate::new(1);
        e.mean = [u.x, u.y, u.z, 0.0, 0.0, 0.0];
        let pc = grow * grow.transpose() * 0.01f64.powi(2);
        for r in 0..3 {
            for c in 0..3 {
                e.cov[r][c] = pc[(r, c)];
            }
        }
        let r = report(
            1,
            0.0,
            &e,
            crate::track::manager::TrackStatus::Confirmed,
            0,
            0.0,
            None,
            Kinematics::Plane,
            Some(line),
        );
        assert_eq!(r.mode, TrackMode::Line);
        let [cone, sd] = r.cone_deg().unwrap();
        assert!((cone - 60.0).abs() < 1e-9, "{cone}");
        assert!((sd - 0.01f64.to_degrees()).abs() < 1e-9, "{sd}");
        let m = Vector3::from(mirror_across(&r.position, &line.axis));
        assert!((m - Vector3::new(th.cos(), -th.sin(), 0.0)).norm() < 1e-9);
    }
}
