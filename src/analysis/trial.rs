//! Scoring the scenes of a trial (`sonotrack trial`): what a user of the tracker sees, one scene
//! at a time, and a family's figures over its scenes.
//!
//! Only tracks the tracker vouches for are scored: confirmed and coasting reports (tentative
//! ones are hypotheses it has not yet confirmed). Per scene, over the frames after the warm-up:
//!
//! - the error of each source's assigned report (the frame's optimal OSPA assignment, a pair
//!   counting when closer than the cut-off), pooled over the sources: RMSE, median, and the
//!   share of (frame, source) pairs with a report within the threshold (frames where a source
//!   has no report count as outside);
//! - the OSPA distance (cut-off 5 m, order 1; in degrees for direction tracking) and ID switches;
//! - the time from the first source's onset to the first confirmed report within the threshold
//!   of a source (every frame counts here, the warm-up too);
//! - frames with a confirmed track farther than `far` from every source (and the longest run of
//!   them), and false tracks: confirmed tracks most of whose reports are that far from every
//!   source, per hour of audio (a coasting report is near a source that paused if it is near
//!   where that source fell silent);
//! - whether the reported spread covers the error (NEES, as `evaluate` scores it).
//!
//! Distances are metres in 3-D and degrees between directions seen from the array's centre in
//! direction tracking (for a flat array, degrees of azimuth about its plane's normal: such an
//! array hardly sees elevation).

use std::collections::BTreeMap;

use nalgebra::Vector3;
use serde::Serialize;

use crate::analysis::accuracy::percentile;
use crate::analysis::consistency::{consistency_of, direction_nees, line_nees, nees, nees_dof};
use crate::analysis::ospa::ospa;
use crate::analysis::score::{fold_about_axis, side_of_report, truth_heard_at};
use crate::analysis::stream::{FrameReports, Report};
use crate::analysis::truth::Truth;
use crate::math::linalg::unit;
use crate::track::manager::TrackStatus;

/// The OSPA cut-off in 3-D (m), and its order.
pub const OSPA_C_M: f64 = 5.0;
pub const OSPA_P: f64 = 1.0;

/// A source of a turning line array that passes this close to the axis (degrees) after the
/// turn starts may go on to either side: its side is no longer scored
/// ([`crate::track::manager::ENDFIRE_DEG`]).
pub const ENDFIRE_DEG: f64 = crate::track::manager::ENDFIRE_DEG;

/// A turning line array must have decided its tracks' sides this long after its turn starts
/// (the line-array issue's acceptance: within 10 s of a 90° turn).
pub const SIDE_DECIDED_WITHIN_S: f64 = 10.0;

/// How a trial's scenes are scored.
#[derive(Debug, Clone, PartialEq)]
pub struct TrialScoring {
    /// Distances in degrees between directions (direction tracking), else metres.
    pub directions: bool,
    /// For a flat array tracking directions, the normal of its plane: distances are then
    /// azimuth differences about it (the angle between the directions' projections on the
    /// plane), since a flat array hardly sees elevation (and not its sign).
    pub azimuth_about: Option<[f64; 3]>,
    /// "Within": a report this close to its source (m, or degrees).
    pub threshold: f64,
    /// A confirmed track farther than this from every source is false (m, or degrees).
    pub far: f64,
    /// OSPA cut-off (m, or degrees).
    pub ospa_c: f64,
    pub warmup_s: f64,
    /// The array's centre, from where directions are seen.
    pub centre: [f64; 3],
    /// A line array's axis and the side of the half-plane its reports are in: the truth is
    /// turned about the axis into it (see [`crate::analysis::score::fold_about_axis`]).
    pub line: Option<([f64; 3], [f64; 3])>,
    /// For directions: reports carry the arrival time; the truth is taken where the sound
    /// arriving then was emitted.
    pub speed_of_sound_m_s: f64,
    /// The scene's length, for rates per hour.
    pub duration_s: f64,
    /// A turning line array: from this time on (the turn's start plus the time allowed to
    /// decide), each assigned report is checked for being on its source's side of the axis
    /// with its mirror ruled out.
    pub side_from_s: Option<f64>,
    /// A turning line array: reports on either side of the axis (see
    /// [`crate::analysis::score::EvalOptions::line_sides`]).
    pub line_sides: bool,
}

/// One scene's figures.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SceneScore {
    /// The scene's index in the family (with the trial's seed, it makes the scene again).
    pub index: u32,
    pub sources: usize,
    /// Frames after the warm-up with a source present.
    pub frames_with_source: usize,
    /// (frame, source) pairs scored, and their errors' RMSE and median (None without any
    /// assigned report); m, or degrees.
    pub pairs: usize,
    pub rmse: Option<f64>,
    pub median: Option<f64>,
    /// Share of (frame, source) pairs with a report within the threshold, %.
    pub within_pct: Option<f64>,
    /// The same from the first confirmed report within the threshold of a source on (how well
    /// a source is held once found; None before any).
    pub within_after_first_pct: Option<f64>,
    pub ospa_mean: Option<f64>,
    pub id_switches: usize,
    /// Seconds from the first source's onset to the first confirmed report within the
    /// threshold of a source; None if none came.
    pub first_track_s: Option<f64>,
    /// Frames (after the warm-up) with a confirmed track farther than `far` from every
    /// source, their share of the scored frames (%), and the longest run of them (s).
    pub far_frames: usize,
    pub far_pct: f64,
    pub longest_far_s: f64,
    /// Confirmed tracks most of whose reports were farther than `far` from every source, and
    /// per hour of audio.
    pub false_tracks: usize,
    pub false_per_hour: f64,
    /// Confirmed tracks seen (distinct IDs).
    pub tracks: usize,
    /// Reported spread against the errors: √(median NEES / χ² median), and the share of
    /// reports with the truth inside their 95 % region (%).
    pub error_over_spread: Option<f64>,
    pub inside_95_pct: Option<f64>,
    /// Direction and line tracking: the assigned reports that gave a range (near enough for
    /// the wavefront's curvature to measure it), and the median of their range errors
    /// relative to the true range (%).
    pub ranged: usize,
    pub range_median_pct: Option<f64>,
    /// A turning line array: of the assigned reports from `side_from_s` on, the share on
    /// their source's side of the axis with the mirror ruled out (%), until the source passes
    /// within [`ENDFIRE_DEG`] of the axis.
    pub side_decided_pct: Option<f64>,
    /// Processing time over the audio's duration.
    pub load: f64,
}

impl SceneScore {
    /// Whether the scene passes the usual bar of the point-source families: every frame with a
    /// source tracked within the threshold at least `pct` % of the time, and no false track
    /// held for more than 2 s.
    pub fn failed(&self, pct: f64) -> bool {
        self.within_pct.is_some_and(|w| w < pct) || self.longest_far_s > 2.0
    }
}

/// A frame's report that scoring counts: a track the tracker vouches for.
fn counts(r: &Report) -> bool {
    !matches!(r.status, Some(TrackStatus::Tentative))
}

/// Score one scene's frames against its truth.
pub fn score_scene(
    index: u32,
    frames: &[FrameReports],
    truth: &Truth,
    s: &TrialScoring,
    load: f64,
) -> SceneScore {
    let targets: Vec<u32> = truth.targets.keys().copied().collect();
    let centre = Vector3::from(s.centre);
    let mut t = SceneTally::default();
    let onset = truth
        .targets
        .values()
        .filter_map(|rows| rows.first().map(|r| r.0))
        .fold(f64::INFINITY, f64::min);
    let frame_dt = frame_spacing(frames);
    let mut far_run = 0.0f64;
    for f in frames {
        let reports: Vec<&Report> = f.reports.iter().filter(|r| counts(r)).collect();
        let alive: Vec<u32> = targets
            .iter()
            .copied()
            .filter(|&k| truth.at(k, f.t_frame).is_some())
            .collect();
        let fold = |q: [f64; 3], pos: &[f64; 3]| match s.line {
            Some((axis, side)) => {
                let side = side_of_report(&side, pos, s.line_sides);
                fold_about_axis(&q, &centre, &axis, &side)
            }
            None => q,
        };
        let truth_for = |k: u32, r: &Report| -> Option<[f64; 3]> {
            if s.directions {
                truth_heard_at(truth, k, r.t, &centre, s.speed_of_sound_m_s)
                    .or_else(|| truth.at(k, f.t_frame))
                    .map(|q| fold(q, &r.pos))
            } else {
                truth.at(k, r.t).or_else(|| truth.at(k, f.t_frame))
            }
        };
        let d: Vec<Vec<f64>> = alive
            .iter()
            .map(|&k| {
                reports
                    .iter()
                    .map(|r| {
                        truth_for(k, r).map_or(f64::INFINITY, |q| distance(s, &centre, &r.pos, &q))
                    })
                    .collect()
            })
            .collect();
        // The first confirmed track on a source (every frame counts).
        if t.first_track_s.is_none() && d.iter().flatten().any(|v| *v <= s.threshold) {
            t.first_track_s = Some((f.t_frame - onset).max(0.0));
        }
        for r in &reports {
            t.seen.insert(r.id);
        }
        if f.t_frame < s.warmup_s {
            continue;
        }
        // Reports far from every source (all of them when no source is there). A coasting
        // report (a track held without measurements) is also near a source that paused where
        // it fell silent: holding a track through a pause is right, not a false track.
        let paused: Vec<[f64; 3]> = targets
            .iter()
            .filter_map(|&k| truth.paused_at(k, f.t_frame).map(|q| fold(q, &[0.0; 3])))
            .collect();
        let mut far_here = false;
        for (j, r) in reports.iter().enumerate() {
            let held = if matches!(r.status, Some(TrackStatus::Coasting)) {
                paused
                    .iter()
                    .map(|q| distance(s, &centre, &r.pos, q))
                    .fold(f64::INFINITY, f64::min)
            } else {
                f64::INFINITY
            };
            let nearest = d.iter().map(|row| row[j]).fold(held, f64::min);
            let far = nearest > s.far;
            far_here |= far;
            let e = t.per_track.entry(r.id).or_default();
            e.0 += 1;
            e.1 += usize::from(far);
        }
        t.frames += 1;
        if far_here {
            t.far_frames += 1;
            far_run += frame_dt;
            t.longest_far_s = t.longest_far_s.max(far_run);
        } else {
            far_run = 0.0;
        }
        if alive.is_empty() {
            continue;
        }
        t.frames_with_source += 1;
        let (dd, pairs) = ospa(&d, alive.len(), reports.len(), s.ospa_c, OSPA_P);
        t.ospa.push(dd);
        for (ti, &k) in alive.iter().enumerate() {
            t.pairs += 1;
            let found = t.first_track_s.is_some();
            t.after_first += usize::from(found);
            let Some(j) = pairs[ti] else { continue };
            t.after_first_within += usize::from(found && d[ti][j] <= s.threshold);
            let r = reports[j];
            if let Some(prev) = t.last_id.insert(k, r.id) {
                t.switches += usize::from(prev != r.id);
            }
            t.errors.push(d[ti][j]);
            if let (Some(from), Some((axis, side))) = (s.side_from_s, s.line) {
                let q = if s.directions {
                    truth_heard_at(truth, k, r.t, &centre, s.speed_of_sound_m_s)
                } else {
                    truth.at(k, r.t)
                };
                if let Some(q) = q {
                    let d = Vector3::from(q) - centre;
                    let off_axis = d
                        .normalize()
                        .dot(&Vector3::from(axis))
                        .abs()
                        .acos()
                        .to_degrees();
                    if f.t_frame >= from - SIDE_DECIDED_WITHIN_S && off_axis < ENDFIRE_DEG {
                        t.passed_axis.insert(k);
                    }
                    if f.t_frame >= from && !t.passed_axis.contains(&k) {
                        let side = Vector3::from(side);
                        let report_side = Vector3::from(r.pos).dot(&side);
                        t.side_checked += 1;
                        t.side_right +=
                            usize::from(!r.ambiguous && d.dot(&side) * report_side > 0.0);
                    }
                }
            }
            if let (Some(q), Some(range)) = (truth_for(k, r), r.range_m) {
                let truth_range = (Vector3::from(q) - centre).norm();
                if truth_range > 0.0 {
                    t.range_pct
                        .push(100.0 * (range - truth_range).abs() / truth_range);
                }
            }
            if let (Some(q), Some(cov)) = (truth_for(k, r), r.cov.as_ref()) {
                let v = if let Some((axis, _)) = s.line {
                    unit(Vector3::from(q) - centre).and_then(|b| line_nees(&r.pos, &b, cov, &axis))
                } else if s.directions {
                    unit(Vector3::from(q) - centre).and_then(|b| direction_nees(&r.pos, &b, cov))
                } else {
                    nees(&[r.pos[0] - q[0], r.pos[1] - q[1], r.pos[2] - q[2]], cov)
                };
                match v {
                    Some(v) => t.nees.push(v),
                    None => t.singular += 1,
                }
            }
        }
    }
    t.finish(index, targets.len(), s, load)
}

/// The usual spacing of frames (s), from their times.
fn frame_spacing(frames: &[FrameReports]) -> f64 {
    let mut d: Vec<f64> = frames
        .windows(2)
        .map(|w| w[1].t_frame - w[0].t_frame)
        .filter(|v| *v > 0.0)
        .collect();
    d.sort_by(f64::total_cmp);
    d.get(d.len() / 2).copied().unwrap_or(0.0)
}

/// Metres between a report and the truth, or degrees between their directions from the
/// centre.
fn distance(s: &TrialScoring, centre: &Vector3<f64>, pos: &[f64; 3], q: &[f64; 3]) -> f64 {
    if s.directions {
        let onto = |v: Vector3<f64>| match s.azimuth_about {
            Some(n) => {
                let n = Vector3::from(n);
                unit(v - n * v.dot(&n))
            }
            None => unit(v),
        };
        match (onto(Vector3::from(*pos)), onto(Vector3::from(*q) - centre)) {
            (Some(a), Some(b)) => a.dot(&b).clamp(-1.0, 1.0).acos().to_degrees(),
            _ => f64::INFINITY,
        }
    } else {
        ((pos[0] - q[0]).powi(2) + (pos[1] - q[1]).powi(2) + (pos[2] - q[2]).powi(2)).sqrt()
    }
}

/// What scoring a scene collects.
#[derive(Default)]
struct SceneTally {
    frames: usize,
    frames_with_source: usize,
    pairs: usize,
    errors: Vec<f64>,
    ospa: Vec<f64>,
    last_id: BTreeMap<u32, u64>,
    switches: usize,
    first_track_s: Option<f64>,
    /// (frame, source) pairs from the first track on, and those with a report within the
    /// threshold.
    after_first: usize,
    after_first_within: usize,
    far_frames: usize,
    longest_far_s: f64,
    /// Per confirmed track: its reports after the warm-up, and how many were far.
    per_track: BTreeMap<u64, (usize, usize)>,
    seen: std::collections::BTreeSet<u64>,
    nees: Vec<f64>,
    singular: usize,
    range_pct: Vec<f64>,
    /// Assigned reports checked for their side, and those decided on the right one.
    side_checked: usize,
    side_right: usize,
    /// Sources that have passed the axis since the turn started (their side is then open
    /// again, and no longer scored).
    passed_axis: std::collections::BTreeSet<u32>,
}

impl SceneTally {
    fn finish(mut self, index: u32, sources: usize, s: &TrialScoring, load: f64) -> SceneScore {
        self.errors.sort_by(f64::total_cmp);
        let n = self.errors.len();
        let rmse =
            (n > 0).then(|| (self.errors.iter().map(|e| e * e).sum::<f64>() / n as f64).sqrt());
        let within = self.errors.iter().filter(|e| **e <= s.threshold).count();
        let false_tracks = self
            .per_track
            .values()
            .filter(|(all, far)| 2 * far > *all)
            .count();
        self.range_pct.sort_by(f64::total_cmp);
        let consistency = consistency_of(
            &self.nees,
            self.singular,
            nees_dof(s.directions, s.line.is_some()),
        );
        SceneScore {
            index,
            sources,
            frames_with_source: self.frames_with_source,
            pairs: self.pairs,
            rmse,
            median: (n > 0).then(|| percentile(&self.errors, 0.5)),
            within_pct: (self.pairs > 0).then(|| 100.0 * within as f64 / self.pairs as f64),
            within_after_first_pct: (self.after_first > 0)
                .then(|| 100.0 * self.after_first_within as f64 / self.after_first as f64),
            ospa_mean: (!self.ospa.is_empty())
                .then(|| self.ospa.iter().sum::<f64>() / self.ospa.len() as f64),
            id_switches: self.switches,
            first_track_s: self.first_track_s,
            far_frames: self.far_frames,
            far_pct: if self.frames > 0 {
                100.0 * self.far_frames as f64 / self.frames as f64
            } else {
                0.0
            },
            longest_far_s: self.longest_far_s,
            false_tracks,
            false_per_hour: false_tracks as f64 / (s.duration_s / 3600.0).max(1e-9),
            tracks: self.seen.len(),
            error_over_spread: consistency.as_ref().map(|c| c.error_over_spread),
            inside_95_pct: consistency.as_ref().map(|c| c.within_95_pct),
            ranged: self.range_pct.len(),
            range_median_pct: (!self.range_pct.is_empty())
                .then(|| percentile(&self.range_pct, 0.5)),
            side_decided_pct: (self.side_checked > 0)
                .then(|| 100.0 * self.side_right as f64 / self.side_checked as f64),
            load,
        }
    }
}

/// A family's figures over its scenes: means, and the worst scene.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FamilySummary {
    pub scenes: usize,
    /// The unit of the distance figures: "m" or "deg".
    pub unit: &'static str,
    pub mean_rmse: Option<f64>,
    pub mean_median: Option<f64>,
    pub mean_within_pct: Option<f64>,
    /// Mean over scenes of the share within the threshold from the first track on.
    pub mean_within_after_first_pct: Option<f64>,
    /// The lowest share within the threshold, and its scene.
    pub worst_within_pct: Option<f64>,
    pub worst_scene: Option<u32>,
    pub mean_ospa: Option<f64>,
    /// Scenes with no ID switch (%), and all switches.
    pub no_switch_pct: f64,
    pub id_switches: usize,
    /// Scenes where a confirmed track came, and the mean and longest time it took (s).
    pub tracked_scenes: usize,
    pub mean_first_track_s: Option<f64>,
    pub worst_first_track_s: Option<f64>,
    pub false_tracks: usize,
    /// False tracks per hour over all the audio.
    pub false_per_hour: f64,
    pub far_pct: f64,
    /// The longest run of a confirmed track far from every source in any scene (s).
    pub longest_far_s: f64,
    /// Median over scenes of the error over the reported spread, and the mean share inside
    /// the 95 % region.
    pub median_error_over_spread: Option<f64>,
    pub mean_inside_95_pct: Option<f64>,
    /// Direction and line tracking: the mean over scenes of the median relative range error
    /// where ranges were reported (%), and the share of the assigned reports that gave one.
    pub mean_range_median_pct: Option<f64>,
    pub ranged_pct: Option<f64>,
    /// A turning line array: the mean over scenes of the share of reports decided on the
    /// right side of the axis after the turn's allowance, and the worst scene's.
    pub mean_side_decided_pct: Option<f64>,
    pub worst_side_decided_pct: Option<f64>,
    pub mean_load: f64,
    /// Hours of audio scored.
    pub hours: f64,
}

/// The mean of the values present.
fn mean(v: impl Iterator<Item = Option<f64>>) -> Option<f64> {
    let v: Vec<f64> = v.flatten().collect();
    (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
}

/// A family's summary of `scores`, scenes of `duration_s` each.
pub fn summarise(scores: &[SceneScore], s: &TrialScoring) -> FamilySummary {
    let worst = scores
        .iter()
        .filter_map(|sc| sc.within_pct.map(|w| (w, sc.index)))
        .min_by(|a, b| a.0.total_cmp(&b.0));
    let mut eos: Vec<f64> = scores
        .iter()
        .filter_map(|sc| sc.error_over_spread)
        .collect();
    eos.sort_by(f64::total_cmp);
    let hours = scores.len() as f64 * s.duration_s / 3600.0;
    let false_tracks = scores.iter().map(|sc| sc.false_tracks).sum();
    let frames: usize = scores.iter().map(|sc| sc.frames_with_source.max(1)).sum();
    FamilySummary {
        scenes: scores.len(),
        unit: if s.directions { "deg" } else { "m" },
        mean_rmse: mean(scores.iter().map(|sc| sc.rmse)),
        mean_median: mean(scores.iter().map(|sc| sc.median)),
        mean_within_pct: mean(scores.iter().map(|sc| sc.within_pct)),
        mean_within_after_first_pct: mean(scores.iter().map(|sc| sc.within_after_first_pct)),
        worst_within_pct: worst.map(|w| w.0),
        worst_scene: worst.map(|w| w.1),
        mean_ospa: mean(scores.iter().map(|sc| sc.ospa_mean)),
        no_switch_pct: if scores.is_empty() {
            0.0
        } else {
            100.0 * scores.iter().filter(|sc| sc.id_switches == 0).count() as f64
                / scores.len() as f64
        },
        id_switches: scores.iter().map(|sc| sc.id_switches).sum(),
        tracked_scenes: scores
            .iter()
            .filter(|sc| sc.first_track_s.is_some())
            .count(),
        mean_first_track_s: mean(scores.iter().map(|sc| sc.first_track_s)),
        worst_first_track_s: scores
            .iter()
            .filter_map(|sc| sc.first_track_s)
            .reduce(f64::max),
        false_tracks,
        false_per_hour: false_tracks as f64 / hours.max(1e-9),
        far_pct: 100.0 * scores.iter().map(|sc| sc.far_frames).sum::<usize>() as f64
            / frames.max(1) as f64,
        longest_far_s: scores.iter().map(|sc| sc.longest_far_s).fold(0.0, f64::max),
        median_error_over_spread: (!eos.is_empty()).then(|| percentile(&eos, 0.5)),
        mean_inside_95_pct: mean(scores.iter().map(|sc| sc.inside_95_pct)),
        mean_range_median_pct: mean(scores.iter().map(|sc| sc.range_median_pct)),
        ranged_pct: {
            let (ranged, pairs) = scores
                .iter()
                .fold((0, 0), |(r, p), sc| (r + sc.ranged, p + sc.pairs));
            (s.directions && ranged > 0).then(|| 100.0 * ranged as f64 / pairs.max(1) as f64)
        },
        mean_side_decided_pct: mean(scores.iter().map(|sc| sc.side_decided_pct)),
        worst_side_decided_pct: scores
            .iter()
            .filter_map(|sc| sc.side_decided_pct)
            .reduce(f64::min),
        mean_load: scores.iter().map(|sc| sc.load).sum::<f64>() / scores.len().max(1) as f64,
        hours,
    }
}

/// A number with `d` decimals, or a dash.
fn opt(v: Option<f64>, d: usize) -> String {
    v.map_or_else(|| "-".into(), |x| format!("{x:.d$}"))
}

/// The per-scene table, one line a scene.
pub fn scene_table(scores: &[SceneScore], unit: &str) -> String {
    let mut out = format!(
        "{:>5} {:>3} {:>9} {:>9} {:>7} {:>9} {:>4} {:>8} {:>6} {:>7} {:>5} {:>6} {:>6}\n",
        "scene",
        "src",
        &format!("RMSE {unit}"),
        &format!("med {unit}"),
        "within",
        &format!("OSPA {unit}"),
        "IDsw",
        "first s",
        "far %",
        "far max",
        "false",
        "err/sd",
        "load %"
    );
    for s in scores {
        out += &format!(
            "{:>5} {:>3} {:>9} {:>9} {:>6}% {:>9} {:>4} {:>8} {:>6.1} {:>7.1} {:>5} {:>6} {:>6.1}\n",
            s.index,
            s.sources,
            opt(s.rmse, 3),
            opt(s.median, 3),
            opt(s.within_pct, 1),
            opt(s.ospa_mean, 3),
            s.id_switches,
            opt(s.first_track_s, 1),
            s.far_pct,
            s.longest_far_s,
            s.false_tracks,
            opt(s.error_over_spread, 2),
            100.0 * s.load
        );
    }
    out
}

impl std::fmt::Display for FamilySummary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let u = self.unit;
        writeln!(
            f,
            "  accuracy: RMSE {} {u} (mean over scenes), median {} {u}; within the threshold {}% (mean; {}% from the first track on), worst scene {} at {}%",
            opt(self.mean_rmse, 3),
            opt(self.mean_median, 3),
            opt(self.mean_within_pct, 1),
            opt(self.mean_within_after_first_pct, 1),
            self.worst_scene
                .map_or_else(|| "-".into(), |s| s.to_string()),
            opt(self.worst_within_pct, 1)
        )?;
        writeln!(
            f,
            "  OSPA {} {u} (mean); {} ID switches, {:.0}% of scenes without one",
            opt(self.mean_ospa, 3),
            self.id_switches,
            self.no_switch_pct
        )?;
        writeln!(
            f,
            "  first confirmed track on a source in {}/{} scenes, after {} s (mean), {} s (longest)",
            self.tracked_scenes,
            self.scenes,
            opt(self.mean_first_track_s, 1),
            opt(self.worst_first_track_s, 1)
        )?;
        writeln!(
            f,
            "  false confirmed tracks: {} in {:.2} h ({:.1} per hour); frames with a track far from every source {:.1}%, longest run {:.1} s",
            self.false_tracks, self.hours, self.false_per_hour, self.far_pct, self.longest_far_s
        )?;
        if let (Some(m), Some(share)) = (self.mean_range_median_pct, self.ranged_pct) {
            writeln!(
                f,
                "  range, where reported ({share:.1}% of the scored reports): median error {m:.1}% of the range (mean over scenes)"
            )?;
        }
        if let (Some(m), Some(w)) = (self.mean_side_decided_pct, self.worst_side_decided_pct) {
            writeln!(
                f,
                "  side of the axis, from {SIDE_DECIDED_WITHIN_S:.0} s after the turn starts until the source passes the axis: {m:.1}% of the scored reports on its side with the mirror ruled out (mean over scenes; worst scene {w:.1}%)"
            )?;
        }
        write!(
            f,
            "  reported spread: errors {}x the spread (median over scenes; 1 if honest), truth inside the 95 % region in {}% (mean); processing {:.1}% of real time",
            opt(self.median_error_over_spread, 2),
            opt(self.mean_inside_95_pct, 1),
            100.0 * self.mean_load
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scoring() -> TrialScoring {
        TrialScoring {
            directions: false,
            azimuth_about: None,
            threshold: 2.0,
            far: 10.0,
            ospa_c: OSPA_C_M,
            warmup_s: 1.0,
            centre: [0.0; 3],
            line: None,
            side_from_s: None,
            line_sides: false,
            speed_of_sound_m_s: 1500.0,
            duration_s: 10.0,
        }
    }

    fn report(id: u64, t: f64, pos: [f64; 3], status: TrackStatus) -> Report {
        Report {
            id,
            t,
            pos,
            models: Vec::new(),
            cov: Some([1.0, 0.0, 0.0, 1.0, 0.0, 1.0]),
            range_m: None,
            inv_range: None,
            direction: false,
            status: Some(status),
            ambiguous: false,
        }
    }

    /// A made-up scene: a source at x = t; track 1 follows it 0.5 m off from 2 s (tentative
    /// before 3 s); track 2 sits 50 m away, confirmed, from 5 s to the end.
    #[test]
    fn a_made_up_scene_scores_as_worked_out_by_hand() {
        let mut csv = String::from("t,target,x,y,z\n");
        for k in 0..=100 {
            let t = f64::from(k) * 0.1;
            csv += &format!("{t},0,{t},0,0\n");
        }
        let truth = Truth::parse(&csv).unwrap();
        let frames: Vec<FrameReports> = (0..100)
            .map(|k| {
                let t = f64::from(k) * 0.1;
                let mut reports = Vec::new();
                if t >= 2.0 {
                    let status = if t < 3.0 {
                        TrackStatus::Tentative
                    } else {
                        TrackStatus::Confirmed
                    };
                    reports.push(report(1, t, [t + 0.5, 0.0, 0.0], status));
                }
                if t >= 5.0 {
                    reports.push(report(2, t, [t, 50.0, 0.0], TrackStatus::Confirmed));
                }
                FrameReports {
                    seq: k as u64,
                    t_frame: t,
                    reports,
                }
            })
            .collect();
        let s = score_scene(0, &frames, &truth, &scoring(), 0.05);
        // Scored frames: t >= 1.0: 90; tracked within 2 m from 3.0: 70 of them.
        assert_eq!(s.frames_with_source, 90);
        assert_eq!(s.pairs, 90);
        assert!((s.within_pct.unwrap() - 100.0 * 70.0 / 90.0).abs() < 1e-9);
        assert!((s.rmse.unwrap() - 0.5).abs() < 1e-12);
        // First confirmed on the source at 3.0 s, onset at 0.
        assert!((s.first_track_s.unwrap() - 3.0).abs() < 1e-9);
        // Track 2: 50 frames, all far: false; the far run is 50 frames of 0.1 s.
        assert_eq!(s.false_tracks, 1);
        assert_eq!(s.far_frames, 50);
        assert!((s.longest_far_s - 5.0).abs() < 1e-9);
        assert!((s.false_per_hour - 360.0).abs() < 1e-9);
        assert_eq!(s.tracks, 2);
        assert_eq!(s.id_switches, 0);
        // The OSPA of a frame with the track 0.5 m off and a false one: (0.5 + 5) / 2.
        assert!(s.ospa_mean.unwrap() > 0.5);
        let sum = summarise(&[s.clone(), s], &scoring());
        assert_eq!(sum.false_tracks, 2);
        assert!((sum.hours - 20.0 / 3600.0).abs() < 1e-12);
        assert_eq!(sum.no_switch_pct, 100.0);
    }

    /// A source pauses from 4 to 6 s: a track coasting where it fell silent is not far (and
    /// not false); the same report claiming to be confirmed is.
    #[test]
    fn a_track_held_through_a_pause_is_not_false() {
        let mut csv = String::from("t,target,x,y,z\n");
        for k in (0..=100).filter(|k| !(41..60).contains(k)) {
            let t = f64::from(k) * 0.1;
            csv += &format!("{t},0,{t},0,0\n");
        }
        let truth = Truth::parse(&csv).unwrap();
        assert_eq!(truth.paused_at(0, 5.0), Some([4.0, 0.0, 0.0]));
        assert_eq!(truth.paused_at(0, 3.0), None);
        let scene = |held: TrackStatus| {
            let frames: Vec<FrameReports> = (0..100)
                .map(|k| {
                    let t = f64::from(k) * 0.1;
                    let (pos, status) = if (4.1..5.95).contains(&t) {
                        ([4.0, 0.0, 0.0], held)
                    } else {
                        ([t, 0.0, 0.0], TrackStatus::Confirmed)
                    };
                    FrameReports {
                        seq: k as u64,
                        t_frame: t,
                        reports: vec![report(1, t, pos, status)],
                    }
                })
                .collect();
            score_scene(0, &frames, &truth, &scoring(), 0.05)
        };
        let coasting = scene(TrackStatus::Coasting);
        assert_eq!(coasting.far_frames, 0);
        assert_eq!(coasting.false_tracks, 0);
        let confirmed = scene(TrackStatus::Confirmed);
        assert!(confirmed.far_frames >= 18, "{}", confirmed.far_frames);
    }

    #[test]
    fn flat_arrays_are_scored_in_azimuth() {
        let mut s = scoring();
        s.directions = true;
        let centre = Vector3::zeros();
        // 10 degrees of azimuth apart, one of them 30 degrees up.
        let (a, b) = (10f64.to_radians(), 30f64.to_radians());
        let up = [a.cos() * b.cos(), a.sin() * b.cos(), b.sin()];
        let flat = [1.0, 0.0, 0.0];
        let full = distance(&s, &centre, &up, &flat);
        assert!(full > 25.0, "{full}");
        s.azimuth_about = Some([0.0, 0.0, -1.0]);
        let az = distance(&s, &centre, &up, &flat);
        assert!((az - 10.0).abs() < 1e-9, "{az}");
    }
}
