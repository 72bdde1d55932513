//! Scoring a position stream against ground truth: `sonotrack evaluate`, and the summary at the
//! end of a replay.
//!
//! Time. Truth rows carry the *emission* time of each position. Every report carries the
//! emission time of its state (`t`) besides the arrival time of its frame (`t_frame`), so each
//! report is compared with the truth interpolated at its own `t`: the propagation delay between
//! emission and arrival (tens of milliseconds across a harbour) is removed by construction and
//! never counted as error. Frames are bucketed by their arrival time. Direction-only reports
//! have no range, so their `t` is the arrival time: they are compared with the truth at the
//! emission time whose sound reaches the array centre then (see [`truth_heard_at`]); taken at
//! `t` itself, the truth would be ahead of the sound by the source's speed over the speed of
//! sound (0.19° for a boat crossing at 5 m/s underwater).
//!
//! One target: per-frame error of the report assigned to it (below), RMSE, median, 90th
//! percentile, maximum and the share of frames within a threshold (a frame with no assigned
//! report counts as outside). Several targets: the OSPA distance per frame (cut-off c, order p;
//! Schuhmacher, Vo and Vo 2008) averaged over frames, and the number of ID switches (a target's
//! assigned track id changing from one assignment to the next). Assignment: the optimal OSPA
//! assignment of each frame (Hungarian algorithm), a pair counting only when closer than c.
//! Compact arrays (and direction-only tracking): azimuth, elevation and great-circle errors of
//! the direction from the array centre.

use std::collections::BTreeMap;

use nalgebra::Vector3;
use serde::Serialize;

use crate::analysis::accuracy::{Accuracy, accuracy_of, percentile};
use crate::analysis::consistency::{
    Consistency, InvRangeConsistency, chi2_quantiles, consistency_of, direction_nees,
    inv_range_consistency_of, line_nees, nees, nees_dof,
};
use crate::analysis::crlb::angles;
use crate::analysis::ospa::{OspaSummary, ospa};
use crate::analysis::recording_bound::{FrameBound, nearest};
use crate::analysis::stream::{FrameReports, Report};
use crate::analysis::truth::Truth;
use crate::math::linalg::unit;
#[cfg(test)]
use crate::math::linalg::upper_triangle;

/// How to score.
#[derive(Debug, Clone)]
pub struct EvalOptions {
    pub warmup_s: f64,
    pub threshold_m: f64,
    /// OSPA cut-off (m) and order.
    pub ospa_c_m: f64,
    pub ospa_p: f64,
    /// Array centre, for directions.
    pub centre: [f64; 3],
    /// Reports are unit vectors (direction-only tracking).
    pub direction_only: bool,
    /// Report azimuth/elevation errors (compact arrays; always in direction-only mode).
    pub angles: bool,
    /// Speed of sound (m/s), for direction-only reports: they carry the arrival time, and are
    /// compared with the truth at the emission time whose sound arrives then. 0 when unknown
    /// (the truth is then taken at the report's time).
    pub speed_of_sound_m_s: f64,
    /// Line arrays: the axis and side of the half-plane the reports are in (unit vectors).
    /// The truth is turned about the axis into it before scoring, so that direction errors
    /// are errors of the angle to the axis (the turn about the axis is unobservable).
    pub line: Option<([f64; 3], [f64; 3])>,
    /// A turning line array reports on either side of its axis (see
    /// [`crate::track::initiate::mirror`]): the truth is turned into the half-plane of each report's own
    /// side, so the errors stay errors of the angle to the axis (its side is scored apart).
    pub line_sides: bool,
}

impl Default for EvalOptions {
    fn default() -> Self {
        Self {
            warmup_s: 2.0,
            threshold_m: 2.0,
            ospa_c_m: 5.0,
            ospa_p: 1.0,
            centre: [0.0; 3],
            direction_only: false,
            angles: false,
            speed_of_sound_m_s: 0.0,
            line: None,
            line_sides: false,
        }
    }
}

/// Where target `k` of `truth` was when it emitted the sound that reaches `centre` at `t`: the
/// emission time τ with τ + |q(τ) - centre| / c = t, by fixed-point steps (each shrinks the
/// error by the source's speed over c). With `c` not positive, the truth at `t`.
pub fn truth_heard_at(
    truth: &Truth,
    k: u32,
    t: f64,
    centre: &Vector3<f64>,
    c: f64,
) -> Option<[f64; 3]> {
    let mut q = truth.at(k, t)?;
    if c > 0.0 {
        for _ in 0..4 {
            let tau = t - (Vector3::from(q) - centre).norm() / c;
            q = truth.at(k, tau).unwrap_or(q);
        }
    }
    Some(q)
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AngleErrors {
    pub frames: usize,
    pub azimuth_rmse_deg: f64,
    pub elevation_rmse_deg: f64,
    /// Great-circle angle between reported and true directions.
    pub angle_rmse_deg: f64,
    pub angle_median_deg: f64,
    pub angle_p90_deg: f64,
    /// A line array's reports: the angle errors are errors of the angle to its axis (the
    /// truth turned into the reports' half-plane), and azimuth and elevation mean nothing.
    pub line: bool,
    /// Reports that gave a range (`range_m`: near enough for the wavefront's curvature to
    /// measure it), and their range errors relative to the true range, median and 90th
    /// percentile (%).
    pub ranged_reports: usize,
    pub range_median_rel_pct: Option<f64>,
    pub range_p90_rel_pct: Option<f64>,
    /// Whether the reported inverse ranges' spreads were honest (None when no report gave
    /// one).
    pub inv_range: Option<InvRangeConsistency>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BoundSummary {
    /// RMS over the scored frames of the per-frame bound (metres; degrees for directions).
    pub rms_bound: f64,
    pub median_bound: f64,
    /// RMSE divided by the RMS bound (below 1: the filter gains from following the source over
    /// many frames; the bound is for one frame).
    pub ratio: f64,
    pub frames: usize,
    pub unit: &'static str,
}

/// Everything `evaluate` reports.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Evaluation {
    pub frames: usize,
    pub targets: usize,
    /// Per truth target: position accuracy of its assigned reports (3-D tracking).
    pub per_target: BTreeMap<u32, Accuracy>,
    /// Per truth target: whether the reported covariances match the errors (positions, or
    /// directions in direction-only tracking; from reports that carry a covariance).
    pub consistency: BTreeMap<u32, Consistency>,
    pub ospa: Option<OspaSummary>,
    pub id_switches: usize,
    pub angles: Option<AngleErrors>,
    /// Accuracy against the Cramér–Rao bound (target 0), when the bound was computed.
    pub bound: Option<BoundSummary>,
    pub warmup_s: f64,
    pub time_reference: &'static str,
}

pub const TIME_REFERENCE: &str = "reports are compared with the truth at their emission time (t), so the emission-to-arrival delay is not counted as error";
/// The same for direction-only reports, whose `t` is the arrival time.
pub const TIME_REFERENCE_DIRECTIONS: &str = "directions carry their arrival time (t) and are compared with the truth at the emission time whose sound reaches the array centre then, so the emission-to-arrival delay is not counted as error";

fn dist(a: &[f64; 3], b: &[f64; 3]) -> f64 {
    ((a[0] - b[0]).powi(2) + (a[1] - b[1]).powi(2) + (a[2] - b[2]).powi(2)).sqrt()
}

/// Score `frames` against `truth`; `bounds` (per frame, target 0) adds the comparison with the
/// Cramér–Rao bound.
pub fn evaluate(
    frames: &[FrameReports],
    truth: &Truth,
    bounds: Option<&[FrameBound]>,
    o: &EvalOptions,
) -> Evaluation {
    let s = Scoring {
        truth,
        bounds,
        o,
        targets: truth.targets.keys().copied().collect(),
        centre: Vector3::from(o.centre),
    };
    let mut tally = Tally::default();
    for f in frames.iter().filter(|f| f.t_frame >= o.warmup_s) {
        tally.score_frame(&s, f);
    }
    tally.finish(&s)
}

/// What scoring needs throughout: the truth, the bound, the options, the targets and the
/// array centre.
struct Scoring<'a> {
    truth: &'a Truth,
    bounds: Option<&'a [FrameBound]>,
    o: &'a EvalOptions,
    targets: Vec<u32>,
    centre: Vector3<f64>,
}

impl Scoring<'_> {
    /// The unit direction of a reported position (a unit vector already in direction-only
    /// tracking; from the array centre otherwise).
    fn direction_of(&self, p: &[f64; 3]) -> Option<Vector3<f64>> {
        if self.o.direction_only {
            unit(Vector3::from(*p))
        } else {
            unit(Vector3::from(*p) - self.centre)
        }
    }

    /// Target `k` where report `r` of frame `f` saw it: at the report's emission time (or the
    /// frame time when the truth has ended by then). A direction-only report's time is the
    /// arrival time (its state has no range): the truth is then taken where the sound arriving
    /// then was emitted.
    fn truth_for(&self, k: u32, r: &Report, f: &FrameReports) -> Option<[f64; 3]> {
        let q = self.truth_unfolded(k, r, f)?;
        Some(match self.o.line {
            Some((axis, side)) => {
                let side = side_of_report(&side, &r.pos, self.o.line_sides);
                fold_about_axis(&q, &self.centre, &axis, &side)
            }
            None => q,
        })
    }

    fn truth_unfolded(&self, k: u32, r: &Report, f: &FrameReports) -> Option<[f64; 3]> {
        if self.o.direction_only {
            truth_heard_at(self.truth, k, r.t, &self.centre, self.o.speed_of_sound_m_s)
                .or_else(|| self.truth.at(k, f.t_frame))
        } else {
            self.truth
                .at(k, r.t)
                .or_else(|| self.truth.at(k, f.t_frame))
        }
    }

    /// The distance used for assignment: metres in 3-D, chord length on the unit sphere for
    /// directions (so that c is then a fraction of a radian, about).
    fn distance(&self, k: u32, r: &Report, f: &FrameReports) -> f64 {
        match self.truth_for(k, r, f) {
            Some(q) if self.o.direction_only => {
                match (
                    self.direction_of(&r.pos),
                    unit(Vector3::from(q) - self.centre),
                ) {
                    (Some(a), Some(b)) => (a - b).norm(),
                    _ => f64::INFINITY,
                }
            }
            Some(q) => dist(&r.pos, &q),
            None => f64::INFINITY,
        }
    }
}

/// The side of the half-plane a line array's report `pos` is scored in: `side`, or with
/// `both` (a turning array, whose reports may be on either side) the side `pos` is on.
pub fn side_of_report(side: &[f64; 3], pos: &[f64; 3], both: bool) -> [f64; 3] {
    let d: f64 = (0..3).map(|k| side[k] * pos[k]).sum();
    if both && d < 0.0 {
        side.map(|v| -v)
    } else {
        *side
    }
}

/// Point `q` turned about the line through `centre` along `axis` into the half-plane of
/// `side`: the same distance along the axis and from it (what a line array measures).
pub fn fold_about_axis(
    q: &[f64; 3],
    centre: &Vector3<f64>,
    axis: &[f64; 3],
    side: &[f64; 3],
) -> [f64; 3] {
    let (a, s) = (Vector3::from(*axis), Vector3::from(*side));
    let d = Vector3::from(*q) - centre;
    let along = d.dot(&a);
    let away = (d - a * along).norm();
    (centre + a * along + s * away).into()
}

/// The sums and lists that scoring collects frame by frame.
#[derive(Default)]
struct Tally {
    errors: BTreeMap<u32, Vec<f64>>,
    /// Per target: the scored NEES values, and the reports whose covariance was unusable.
    nees_of: BTreeMap<u32, (Vec<f64>, usize)>,
    scored: BTreeMap<u32, usize>,
    ospas: Vec<f64>,
    sum_tracks: usize,
    sum_targets: usize,
    last_id: BTreeMap<u32, u64>,
    switches: usize,
    az2: f64,
    el2: f64,
    angles: Vec<f64>,
    range_rel: Vec<f64>,
    inv_range_z: Vec<f64>,
    inv_range_singular: usize,
    /// (error, bound) of target 0's assigned reports.
    bound_pairs: Vec<(f64, f64)>,
    frames: usize,
}

impl Tally {
    /// One frame: its OSPA assignment, then every target's assigned report.
    fn score_frame(&mut self, s: &Scoring, f: &FrameReports) {
        let alive: Vec<u32> = s
            .targets
            .iter()
            .copied()
            .filter(|&k| s.truth.at(k, f.t_frame).is_some())
            .collect();
        if alive.is_empty() && f.reports.is_empty() {
            return;
        }
        self.frames += 1;
        let d: Vec<Vec<f64>> = alive
            .iter()
            .map(|&k| f.reports.iter().map(|r| s.distance(k, r, f)).collect())
            .collect();
        let (dd, pairs) = ospa(&d, alive.len(), f.reports.len(), s.o.ospa_c_m, s.o.ospa_p);
        self.ospas.push(dd);
        self.sum_tracks += f.reports.len();
        self.sum_targets += alive.len();
        for (ti, &k) in alive.iter().enumerate() {
            *self.scored.entry(k).or_default() += 1;
            if let Some(j) = pairs[ti] {
                self.score_assigned(s, f, k, &f.reports[j], d[ti][j]);
            }
        }
    }

    /// Target `k`'s assigned report `r` (at assignment distance `d`): ID switches, the error,
    /// the NEES, the direction errors and the comparison with the bound.
    fn score_assigned(&mut self, s: &Scoring, f: &FrameReports, k: u32, r: &Report, d: f64) {
        if let Some(prev) = self.last_id.insert(k, r.id) {
            if prev != r.id {
                self.switches += 1;
            }
        }
        let Some(q) = s.truth_for(k, r, f) else {
            return;
        };
        if !s.o.direction_only {
            self.errors.entry(k).or_default().push(d);
        }
        self.add_nees(s, k, r, &q);
        if s.o.angles || s.o.direction_only {
            self.add_angles(s, r, &q);
        }
        if k == s.targets.first().copied().unwrap_or(0) {
            self.add_bound(s, f, &q, d);
        }
    }

    /// The report's NEES (not scored without a covariance; counted as unusable where its
    /// covariance is not positive definite).
    fn add_nees(&mut self, s: &Scoring, k: u32, r: &Report, q: &[f64; 3]) {
        let scored_nees = r.cov.as_ref().and_then(|c| {
            if let Some((axis, _)) = s.o.line {
                unit(Vector3::from(*q) - s.centre).map(|b| line_nees(&r.pos, &b, c, &axis))
            } else if s.o.direction_only {
                unit(Vector3::from(*q) - s.centre).map(|b| direction_nees(&r.pos, &b, c))
            } else {
                let e = [r.pos[0] - q[0], r.pos[1] - q[1], r.pos[2] - q[2]];
                Some(nees(&e, c))
            }
        });
        if let Some(v) = scored_nees {
            let slot = self.nees_of.entry(k).or_default();
            match v {
                Some(v) => slot.0.push(v),
                None => slot.1 += 1,
            }
        }
    }

    /// Azimuth, elevation and great-circle errors from the array centre, and the range and
    /// inverse range where the report gives them.
    fn add_angles(&mut self, s: &Scoring, r: &Report, q: &[f64; 3]) {
        let (Some(a), Some(b)) = (s.direction_of(&r.pos), unit(Vector3::from(*q) - s.centre))
        else {
            return;
        };
        let (aza, ela) = angles(&a);
        let (azb, elb) = angles(&b);
        let mut daz = (aza - azb).to_degrees();
        daz = (daz + 180.0).rem_euclid(360.0) - 180.0;
        self.az2 += daz * daz;
        self.el2 += (ela - elb).to_degrees().powi(2);
        self.angles
            .push(a.dot(&b).clamp(-1.0, 1.0).acos().to_degrees());
        let truth_range = (Vector3::from(*q) - s.centre).norm();
        if let Some(range) = r.range_m {
            self.range_rel
                .push(100.0 * (range - truth_range).abs() / truth_range);
        }
        if let Some([rho, sd]) = r.inv_range {
            if sd > 0.0 {
                self.inv_range_z.push((rho - 1.0 / truth_range) / sd);
            } else {
                self.inv_range_singular += 1;
            }
        }
    }

    /// Target 0's error beside the bound of the frame nearest in time (an angle for
    /// directions, metres otherwise).
    fn add_bound(&mut self, s: &Scoring, f: &FrameReports, q: &[f64; 3], d: f64) {
        let Some(b) = s.bounds.and_then(|b| nearest(b, f.t_frame)) else {
            return;
        };
        let err = if s.o.direction_only {
            self.angles.last().copied()
        } else {
            Some(d)
        };
        let bnd = if s.o.line.is_some() {
            b.cone_deg
        } else if s.o.direction_only {
            match (b.azimuth_deg, b.elevation_deg) {
                (Some(a), Some(e)) => {
                    let el = s.direction_of(q).map(|u| angles(&u).1).unwrap_or(0.0);
                    Some((a * a * el.cos().powi(2) + e * e).sqrt())
                }
                _ => None,
            }
        } else {
            b.position_m
        };
        if let (Some(e), Some(bv)) = (err, bnd) {
            self.bound_pairs.push((e, bv));
        }
    }

    /// The evaluation of everything collected.
    fn finish(mut self, s: &Scoring) -> Evaluation {
        let o = s.o;
        let per_target = if o.direction_only {
            BTreeMap::new()
        } else {
            s.targets
                .iter()
                .filter_map(|k| {
                    let e = self.errors.get(k).cloned().unwrap_or_default();
                    let n = self.scored.get(k).copied().unwrap_or(0);
                    accuracy_of(&e, n, o.warmup_s, o.threshold_m).map(|a| (*k, a))
                })
                .collect()
        };
        let consistency = self
            .nees_of
            .iter()
            .filter_map(|(k, (v, singular))| {
                consistency_of(v, *singular, nees_dof(o.direction_only, o.line.is_some()))
                    .map(|c| (*k, c))
            })
            .collect();
        self.range_rel.sort_by(f64::total_cmp);
        Evaluation {
            frames: self.frames,
            targets: s.targets.len(),
            per_target,
            consistency,
            ospa: self.ospa_summary(o),
            id_switches: self.switches,
            angles: self.angle_errors(o.line.is_some()),
            bound: self.bound_summary(o),
            warmup_s: o.warmup_s,
            time_reference: if o.direction_only {
                TIME_REFERENCE_DIRECTIONS
            } else {
                TIME_REFERENCE
            },
        }
    }

    fn ospa_summary(&self, o: &EvalOptions) -> Option<OspaSummary> {
        let ospas = &self.ospas;
        (!ospas.is_empty()).then(|| {
            let mut s = ospas.clone();
            s.sort_by(f64::total_cmp);
            OspaSummary {
                c_m: o.ospa_c_m,
                p: o.ospa_p,
                mean_m: ospas.iter().sum::<f64>() / ospas.len() as f64,
                median_m: percentile(&s, 0.5),
                frames: ospas.len(),
                mean_tracks: self.sum_tracks as f64 / ospas.len() as f64,
                mean_targets: self.sum_targets as f64 / ospas.len() as f64,
            }
        })
    }

    /// Needs `range_rel` sorted.
    fn angle_errors(&self, line: bool) -> Option<AngleErrors> {
        let (ang, range_rel) = (&self.angles, &self.range_rel);
        (!ang.is_empty()).then(|| {
            let n = ang.len() as f64;
            let mut s = ang.clone();
            s.sort_by(f64::total_cmp);
            AngleErrors {
                frames: ang.len(),
                azimuth_rmse_deg: (self.az2 / n).sqrt(),
                elevation_rmse_deg: (self.el2 / n).sqrt(),
                angle_rmse_deg: (ang.iter().map(|a| a * a).sum::<f64>() / n).sqrt(),
                angle_median_deg: percentile(&s, 0.5),
                angle_p90_deg: percentile(&s, 0.9),
                line,
                ranged_reports: range_rel.len(),
                range_median_rel_pct: (!range_rel.is_empty()).then(|| percentile(range_rel, 0.5)),
                range_p90_rel_pct: (!range_rel.is_empty()).then(|| percentile(range_rel, 0.9)),
                inv_range: inv_range_consistency_of(&self.inv_range_z, self.inv_range_singular),
            }
        })
    }

    fn bound_summary(&self, o: &EvalOptions) -> Option<BoundSummary> {
        let pairs = &self.bound_pairs;
        (!pairs.is_empty()).then(|| {
            let n = pairs.len() as f64;
            let rmse = (pairs.iter().map(|(e, _)| e * e).sum::<f64>() / n).sqrt();
            let rb = (pairs.iter().map(|(_, b)| b * b).sum::<f64>() / n).sqrt();
            let mut s: Vec<f64> = pairs.iter().map(|(_, b)| *b).collect();
            s.sort_by(f64::total_cmp);
            BoundSummary {
                rms_bound: rb,
                median_bound: percentile(&s, 0.5),
                ratio: rmse / rb,
                frames: pairs.len(),
                unit: if o.direction_only { "deg" } else { "m" },
            }
        })
    }
}

impl std::fmt::Display for Evaluation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "evaluation: {} frames after {:.1} s, {} truth target(s)",
            self.frames, self.warmup_s, self.targets
        )?;
        if !self.per_target.is_empty() {
            writeln!(
                f,
                "  {:>6} {:>10} {:>10} {:>10} {:>9} {:>9} {:>8}",
                "target", "RMSE m", "median m", "p90 m", "max m", "within", "tracked"
            )?;
            for (k, a) in &self.per_target {
                writeln!(
                    f,
                    "  {:>6} {:>10.4} {:>10.4} {:>10.4} {:>9.3} {:>8.1}% {:>4}/{}",
                    k, a.rmse_m, a.median_m, a.p90_m, a.max_m, a.within_pct, a.tracked, a.frames
                )?;
            }
            if let Some(a) = self.per_target.values().next() {
                writeln!(
                    f,
                    "  (within: share of frames with an error up to {} m)",
                    a.threshold_m
                )?;
            }
        }
        for (k, c) in &self.consistency {
            writeln!(
                f,
                "  reported spread, target {k}: errors {:.2}× the spread (1 if honest; NEES median {:.2}, mean {:.2}, against {:.2} and {}); truth inside the 95 % {} in {:.1} % of {} reports{}",
                c.error_over_spread,
                c.nees_median,
                c.nees_mean,
                chi2_quantiles(c.dof).0,
                c.dof,
                if c.dof == 2 { "ellipse" } else { "ellipsoid" },
                c.within_95_pct,
                c.reports,
                if c.singular > 0 {
                    format!(" ({} without a usable covariance)", c.singular)
                } else {
                    String::new()
                }
            )?;
        }
        if let Some(o) = &self.ospa {
            writeln!(
                f,
                "  OSPA (c = {} m, p = {}): mean {:.4} m, median {:.4} m; {:.2} tracks for {:.2} targets per frame; {} ID switches",
                o.c_m, o.p, o.mean_m, o.median_m, o.mean_tracks, o.mean_targets, self.id_switches
            )?;
        }
        if let Some(a) = &self.angles {
            if a.line {
                writeln!(
                    f,
                    "  angle to the array's axis: RMSE {:.3}° (median {:.3}°, p90 {:.3}°)",
                    a.angle_rmse_deg, a.angle_median_deg, a.angle_p90_deg
                )?;
            } else {
                writeln!(
                    f,
                    "  direction: azimuth RMSE {:.3}°, elevation RMSE {:.3}°, angle RMSE {:.3}° (median {:.3}°, p90 {:.3}°)",
                    a.azimuth_rmse_deg,
                    a.elevation_rmse_deg,
                    a.angle_rmse_deg,
                    a.angle_median_deg,
                    a.angle_p90_deg
                )?;
            }
            if let (Some(m), Some(p90)) = (a.range_median_rel_pct, a.range_p90_rel_pct) {
                writeln!(
                    f,
                    "  range, where reported ({} of {} reports): median error {m:.1} % of the range, p90 {p90:.1} %",
                    a.ranged_reports, a.frames
                )?;
            }
            if let Some(c) = &a.inv_range {
                writeln!(
                    f,
                    "  inverse range: errors {:.2}× the spread (1 if honest; median error {:+.2} spreads); truth within ±1.96σ in {:.1} % of {} reports{}",
                    c.error_over_spread,
                    c.median_z,
                    c.within_95_pct,
                    c.reports,
                    if c.singular > 0 {
                        format!(" ({} without a usable spread)", c.singular)
                    } else {
                        String::new()
                    }
                )?;
            }
        }
        if let Some(b) = &self.bound {
            writeln!(
                f,
                "  Cramér–Rao bound (one frame): RMS {:.4} {u}, median {:.4} {u}; RMSE / bound = {:.2} over {} frames",
                b.rms_bound,
                b.median_bound,
                b.ratio,
                b.frames,
                u = b.unit
            )?;
        }
        write!(f, "  time: {}", self.time_reference)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The truth turned about a line's axis keeps its distances along the axis and from it,
    /// and lands in the side's half-plane.
    #[test]
    fn fold_about_axis_keeps_the_line_distances() {
        let c = Vector3::new(1.0, 2.0, 0.5);
        let q = [1.5, 1.0, 2.5];
        let f = Vector3::from(fold_about_axis(&q, &c, &[1.0, 0.0, 0.0], &[0.0, 0.0, 1.0]));
        assert!(
            (f - Vector3::new(1.5, 2.0, 0.5 + 5f64.sqrt())).norm() < 1e-12,
            "{f:?}"
        );
    }

    fn fr(seq: u64, t: f64, reps: &[(u64, [f64; 3])]) -> FrameReports {
        FrameReports {
            seq,
            t_frame: t,
            reports: reps
                .iter()
                .map(|&(id, pos)| Report {
                    id,
                    t,
                    pos,
                    models: Vec::new(),
                    cov: None,
                    range_m: None,
                    inv_range: None,
                    direction: false,
                    status: None,
                    ambiguous: false,
                })
                .collect(),
        }
    }

    /// A frame with one report of track 1 at `t`, with a covariance.
    fn one(seq: u64, t: f64, pos: [f64; 3], cov: Option<[f64; 6]>) -> FrameReports {
        FrameReports {
            seq,
            t_frame: t,
            reports: vec![Report {
                id: 1,
                t,
                pos,
                models: Vec::new(),
                cov,
                range_m: None,
                inv_range: None,
                direction: false,
                status: None,
                ambiguous: false,
            }],
        }
    }

    #[test]
    fn rmse_ospa_and_id_switches_on_a_made_up_stream() {
        // Two targets moving along x at y = 0 and y = 10 for t in [0, 10].
        let truth =
            Truth::parse("t,target,x,y,z\n0,0,0,0,0\n10,0,10,0,0\n0,1,0,10,0\n10,1,10,10,0\n")
                .unwrap();
        let frames = vec![
            fr(0, 3.0, &[(1, [3.0, 0.1, 0.0]), (2, [3.0, 10.0, 0.2])]),
            // Track ids swap between the targets here: two switches.
            fr(1, 4.0, &[(2, [4.0, 0.0, 0.0]), (1, [4.0, 10.0, 0.0])]),
            // Target 1 missed, a false track far away.
            fr(2, 5.0, &[(2, [5.0, 0.3, 0.0]), (7, [50.0, 50.0, 0.0])]),
        ];
        let o = EvalOptions {
            warmup_s: 2.0,
            threshold_m: 0.25,
            ospa_c_m: 5.0,
            ospa_p: 1.0,
            ..Default::default()
        };
        let e = evaluate(&frames, &truth, None, &o);
        assert_eq!(e.frames, 3);
        assert_eq!(e.id_switches, 2);
        let a0 = &e.per_target[&0];
        // Target 0 errors: 0.1, 0, 0.3.
        assert!((a0.rmse_m - ((0.01 + 0.09) / 3.0f64).sqrt()).abs() < 1e-12);
        assert_eq!((a0.frames, a0.tracked), (3, 3));
        assert!((a0.within_pct - 200.0 / 3.0).abs() < 1e-9);
        let a1 = &e.per_target[&1];
        assert_eq!((a1.frames, a1.tracked), (3, 2));
        // OSPA per frame: (0.1 + 0.2) / 2, 0, (0.3 + 5) / 2.
        let o_ = e.ospa.unwrap();
        assert!(
            (o_.mean_m - (0.15 + 0.0 + 2.65) / 3.0).abs() < 1e-12,
            "{}",
            o_.mean_m
        );
    }

    #[test]
    fn angles_from_the_array_centre() {
        // Source due east 100 m away; report 1 m north of it: azimuth error atan(1/100).
        let truth = Truth::parse("0,0,100,0,0\n10,0,100,0,0\n").unwrap();
        let frames = vec![fr(0, 5.0, &[(1, [100.0, 1.0, 0.0])])];
        let o = EvalOptions {
            angles: true,
            ..Default::default()
        };
        let e = evaluate(&frames, &truth, None, &o);
        let a = e.angles.unwrap();
        assert!((a.azimuth_rmse_deg - (0.01f64).atan().to_degrees()).abs() < 1e-9);
        assert!(a.elevation_rmse_deg.abs() < 1e-9);
        // Direction-only reports: unit vectors.
        let o2 = EvalOptions {
            direction_only: true,
            ..Default::default()
        };
        let frames2 = vec![fr(0, 5.0, &[(1, [0.0, 1.0, 0.0])])];
        let e2 = evaluate(&frames2, &truth, None, &o2);
        assert!((e2.angles.unwrap().angle_rmse_deg - 90.0).abs() < 1e-9);
        assert!(e2.per_target.is_empty());
    }

    /// Reports whose errors are drawn from the covariance they carry score as honest; the same
    /// errors with the covariance scaled by 4 (a spread twice too wide) or by 1/4 (half too
    /// narrow) score as cautious or overconfident by that factor; a covariance that is not
    /// positive definite is counted apart.
    #[test]
    fn reported_spread_is_checked_against_the_errors() {
        use crate::rng::philox::{PhiloxStream, Stream};
        let truth = Truth::parse("0,0,0,0,0\n1000,0,100,0,0\n").unwrap();
        // A correlated covariance, P = L Lᵀ (metres).
        let l = nalgebra::Matrix3::new(0.02, 0.0, 0.0, 0.01, 0.03, 0.0, -0.005, 0.004, 0.01);
        let p = l * l.transpose();
        let mut rng = PhiloxStream::new(7, 0, Stream::Predict);
        let stream = |scale: f64, rng: &mut PhiloxStream| -> Vec<FrameReports> {
            (0..4000u64)
                .map(|i| {
                    let t = 3.0 + i as f64 * 0.05;
                    let z = Vector3::new(rng.normal_f64(), rng.normal_f64(), rng.normal_f64());
                    let e = l * z;
                    let q = truth.at(0, t).unwrap();
                    let c = p * scale;
                    let cov = if i == 0 {
                        [0.0; 6] // not positive definite
                    } else {
                        upper_triangle(&c.into())
                    };
                    one(i, t, [q[0] + e[0], q[1] + e[1], q[2] + e[2]], Some(cov))
                })
                .collect()
        };
        let o = EvalOptions::default();
        for (scale, ratio) in [(1.0, 1.0), (4.0, 0.5), (0.25, 2.0)] {
            let frames = stream(scale, &mut rng);
            let e = evaluate(&frames, &truth, None, &o);
            let c = &e.consistency[&0];
            assert_eq!((c.reports, c.singular), (3999, 1));
            assert!(
                (c.error_over_spread / ratio - 1.0).abs() < 0.05,
                "scale {scale}: {c:?}"
            );
            assert!(
                (c.nees_mean * scale - 3.0).abs() < 0.2,
                "scale {scale}: {c:?}"
            );
            if scale == 1.0 {
                assert!((c.within_95_pct - 95.0).abs() < 1.5, "{c:?}");
            }
        }
        // The scaled cases move the 95 % share the right way.
        let wide = evaluate(&stream(4.0, &mut rng), &truth, None, &o);
        let narrow = evaluate(&stream(0.25, &mut rng), &truth, None, &o);
        assert!(wide.consistency[&0].within_95_pct > 99.5);
        assert!(narrow.consistency[&0].within_95_pct < 50.0);
        assert!(format!("{wide}").contains("reported spread, target 0: errors 0.5"));
        // Reports without a covariance (older streams) leave it out.
        let none: Vec<FrameReports> = stream(1.0, &mut rng)
            .into_iter()
            .map(|mut f| {
                f.reports[0].cov = None;
                f
            })
            .collect();
        assert!(evaluate(&none, &truth, None, &o).consistency.is_empty());
    }

    /// Directions: errors drawn in the tangent plane from the covariance the reports carry
    /// (with a negligible radial part, as a cloud of unit vectors has) score as honest on two
    /// degrees of freedom; a covariance four times too small scores 2× overconfident.
    #[test]
    fn reported_direction_spread_is_checked_in_the_tangent_plane() {
        use crate::rng::philox::{PhiloxStream, Stream};
        let truth = Truth::parse("0,0,100,40,-20\n1000,0,100,40,-20\n").unwrap();
        let b = Vector3::new(100.0, 40.0, -20.0).normalize();
        let axis = Vector3::z();
        let t1 = b.cross(&axis).normalize();
        let t2 = b.cross(&t1);
        let (s1, s2) = (0.02, 0.05); // radians
        let p = t1 * t1.transpose() * (s1 * s1)
            + t2 * t2.transpose() * (s2 * s2)
            + (t1 * t2.transpose() + t2 * t1.transpose()) * (0.3 * s1 * s2)
            + b * b.transpose() * 1e-10;
        let l = nalgebra::Matrix2::new(s1 * s1, 0.3 * s1 * s2, 0.3 * s1 * s2, s2 * s2)
            .cholesky()
            .unwrap()
            .l();
        let mut rng = PhiloxStream::new(11, 0, Stream::Predict);
        let o = EvalOptions {
            direction_only: true,
            ..Default::default()
        };
        for (scale, ratio) in [(1.0, 1.0), (0.25, 2.0)] {
            let frames: Vec<FrameReports> = (0..4000u64)
                .map(|i| {
                    let t = 3.0 + i as f64 * 0.05;
                    let z = l * nalgebra::Vector2::new(rng.normal_f64(), rng.normal_f64());
                    // The report is off the truth by z in the tangent plane.
                    let u = (b - t1 * z[0] - t2 * z[1]).normalize();
                    one(i, t, u.into(), Some(upper_triangle(&(p * scale).into())))
                })
                .collect();
            let e = evaluate(&frames, &truth, None, &o);
            let c = &e.consistency[&0];
            assert_eq!((c.dof, c.reports, c.singular), (2, 4000, 0));
            assert!(
                (c.error_over_spread / ratio - 1.0).abs() < 0.06,
                "{scale}: {c:?}"
            );
            if scale == 1.0 {
                assert!((c.nees_mean - 2.0).abs() < 0.15, "{c:?}");
                assert!((c.within_95_pct - 95.0).abs() < 1.5, "{c:?}");
                assert!(format!("{e}").contains("95 % ellipse in"), "{e}");
            }
        }
        assert_eq!(
            direction_nees(&[0.0; 3], &b, &upper_triangle(&p.into())),
            None
        );
    }

    /// A direction-only report (stamped with the arrival time) is compared with where the source
    /// was when it emitted the sound arriving then: reports pointing there score no error; the
    /// truth at the report's own time would be ahead by the speed over c.
    #[test]
    fn directions_are_compared_with_the_truth_heard_then() {
        // 1000 m out along x, crossing along y at 50 m/s; c = 1500 m/s.
        let truth = Truth::parse("0,0,1000,0,0\n100,0,1000,5000,0\n").unwrap();
        let centre = Vector3::zeros();
        let c = 1500.0;
        let q = truth_heard_at(&truth, 0, 10.0, &centre, c).unwrap();
        let tau = q[1] / 50.0;
        let arrival = tau + Vector3::from(q).norm() / c;
        assert!((arrival - 10.0).abs() < 1e-6, "{q:?}, arrives at {arrival}");
        assert!(tau < 9.3, "emitted about 0.73 s earlier: {tau}");
        assert_eq!(
            truth_heard_at(&truth, 0, 10.0, &centre, 0.0),
            truth.at(0, 10.0)
        );
        let frames: Vec<FrameReports> = (0..50u64)
            .map(|i| {
                let t = 3.0 + i as f64 * 0.1;
                let u =
                    Vector3::from(truth_heard_at(&truth, 0, t, &centre, c).unwrap()).normalize();
                one(i, t, u.into(), None)
            })
            .collect();
        let mut o = EvalOptions {
            direction_only: true,
            speed_of_sound_m_s: c,
            ..Default::default()
        };
        let heard = evaluate(&frames, &truth, None, &o).angles.unwrap();
        assert!(heard.angle_rmse_deg < 1e-6, "{heard:?}");
        assert_eq!(
            evaluate(&frames, &truth, None, &o).time_reference,
            TIME_REFERENCE_DIRECTIONS
        );
        // Without the speed of sound, the truth at the report's time: ahead by about v / c
        // (a little less, as the source is not abeam): between 1.5 and 2 degrees here.
        o.speed_of_sound_m_s = 0.0;
        let at_t = evaluate(&frames, &truth, None, &o).angles.unwrap();
        assert!((1.5..2.0).contains(&at_t.angle_rmse_deg), "{at_t:?}");
    }

    /// Direction reports that give a range are scored against the true range from the array
    /// centre: the share that give one and the median and 90th-percentile relative errors.
    #[test]
    fn direction_ranges_are_scored() {
        let truth = Truth::parse("t,target,x,y,z\n0,0,10,0,0\n100,0,10,0,0\n").unwrap();
        let frames: Vec<FrameReports> = (0..10)
            .map(|i| {
                let mut f = one(i, 1.0 + i as f64, [1.0, 0.0, 0.0], None);
                // 11 m (10 % off) on even frames, none on odd ones.
                f.reports[0].range_m = (i % 2 == 0).then_some(11.0);
                f
            })
            .collect();
        let o = EvalOptions {
            direction_only: true,
            warmup_s: 0.0,
            ..EvalOptions::default()
        };
        let a = evaluate(&frames, &truth, None, &o).angles.unwrap();
        assert_eq!((a.frames, a.ranged_reports), (10, 5));
        assert!(
            (a.range_median_rel_pct.unwrap() - 10.0).abs() < 1e-9,
            "{a:?}"
        );
        assert_eq!(a.inv_range, None);
    }

    /// The reported inverse range's spread is scored: z = (ρ̂ − ρ) / σ per report. Errors drawn
    /// as the reported spread says score about 1 with about 95 % inside ±1.96σ; the same errors
    /// with spreads a third of that score about 3, and a spread of zero is counted apart.
    #[test]
    fn inverse_range_spreads_are_scored() {
        let truth = Truth::parse("t,target,x,y,z\n0,0,10,0,0\n1000,0,10,0,0\n").unwrap();
        // Deterministic standard normals (Box–Muller on a fixed sequence of uniforms).
        let normals: Vec<f64> = (0..2000)
            .map(|i| {
                let u1 = (i as f64 + 0.5) / 2000.0;
                let u2 = ((i * 7919) % 2000) as f64 / 2000.0;
                (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
            })
            .collect();
        let run = |scale: f64, zero_every: Option<usize>| {
            let frames: Vec<FrameReports> = normals
                .iter()
                .enumerate()
                .map(|(i, z)| {
                    let mut f = one(i as u64, 1.0 + 0.1 * i as f64, [1.0, 0.0, 0.0], None);
                    let sd = if zero_every.is_some_and(|n| i % n == 0) {
                        0.0
                    } else {
                        0.01 * scale
                    };
                    f.reports[0].inv_range = Some([0.1 + 0.01 * z, sd]);
                    f
                })
                .collect();
            let o = EvalOptions {
                direction_only: true,
                warmup_s: 0.0,
                ..EvalOptions::default()
            };
            evaluate(&frames, &truth, None, &o)
                .angles
                .unwrap()
                .inv_range
                .unwrap()
        };
        let honest = run(1.0, None);
        assert_eq!((honest.reports, honest.singular), (2000, 0));
        assert!((honest.error_over_spread - 1.0).abs() < 0.05, "{honest:?}");
        assert!((honest.within_95_pct - 95.0).abs() < 1.5, "{honest:?}");
        assert!(honest.median_z.abs() < 0.1, "{honest:?}");
        let narrow = run(1.0 / 3.0, Some(100));
        assert_eq!((narrow.reports, narrow.singular), (1980, 20));
        assert!((narrow.error_over_spread - 3.0).abs() < 0.15, "{narrow:?}");
        assert!(narrow.within_95_pct < 60.0, "{narrow:?}");
    }
}
