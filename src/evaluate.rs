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
use std::path::Path;

use nalgebra::Vector3;
use serde::Serialize;

use crate::bound::FrameBound;
use crate::error::{Error, Result};
use crate::eval::{Accuracy, accuracy_of};
use crate::scene::Truth;

/// One track report, as read back from a position stream.
#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    pub id: u64,
    /// Emission time of the state.
    pub t: f64,
    pub pos: [f64; 3],
    /// Model probabilities in configuration order (empty when unknown).
    pub models: Vec<f32>,
    /// The reported position covariance, upper triangle (xx, xy, xz, yy, yz, zz, m²), as in the
    /// stream's `pos_cov`; None when the report has none.
    pub cov: Option<[f64; 6]>,
    /// Direction mode: the range (m) where the report gives one (the stream's `range_m`).
    pub range_m: Option<f64>,
    /// Direction mode with curved wavefronts: the inverse range (1/m) and its standard
    /// deviation (the stream's `inv_range` and `inv_range_std`).
    pub inv_range: Option<[f64; 2]>,
    /// A direction report (the stream's message carries `az_deg`): `pos` is a unit vector.
    pub direction: bool,
}

/// The reports of one frame.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FrameReports {
    pub seq: u64,
    /// Arrival time of the frame centre.
    pub t_frame: f64,
    pub reports: Vec<Report>,
}

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
pub struct OspaSummary {
    pub c_m: f64,
    pub p: f64,
    /// Mean over scored frames.
    pub mean_m: f64,
    pub median_m: f64,
    pub frames: usize,
    /// Mean number of reports and of truth targets per scored frame.
    pub mean_tracks: f64,
    pub mean_targets: f64,
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

/// Whether the reported inverse range's standard deviation σ was honest: the normalised error
/// z = (ρ̂ − ρ) / σ of each report that gave one, ρ = 1 / r the true inverse range. For an
/// honest, unbiased report z² follows a χ² law with one degree of freedom (median 0.455, |z|
/// below 1.96 in 95 % of reports).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct InvRangeConsistency {
    /// Reports scored (those with a positive σ).
    pub reports: usize,
    /// Reports whose σ was zero (not scored).
    pub singular: usize,
    /// sqrt(median z² / the χ² median): 1 when honest, above 1 when overconfident.
    pub error_over_spread: f64,
    /// Percentage of reports with the true inverse range within ±1.96 σ.
    pub within_95_pct: f64,
    /// Median of z: how far, in spreads, the typical report sits beyond (positive: nearer
    /// than) the truth.
    pub median_z: f64,
}

/// Scores normalised inverse-range errors `z` (see [`InvRangeConsistency`]): z² is a NEES
/// with one degree of freedom, scored as the positions' and directions' are
/// ([`consistency_of`]); None when empty.
fn inv_range_consistency_of(z: &[f64], singular: usize) -> Option<InvRangeConsistency> {
    let z2: Vec<f64> = z.iter().map(|v| v * v).collect();
    let c = consistency_of(&z2, singular, 1)?;
    let mut zs = z.to_vec();
    zs.sort_by(f64::total_cmp);
    Some(InvRangeConsistency {
        reports: c.reports,
        singular,
        error_over_spread: c.error_over_spread,
        within_95_pct: c.within_95_pct,
        median_z: percentile(&zs, 0.5),
    })
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

/// Whether a target's reported covariances were honest: the normalised estimation error squared
/// (NEES, eᵀ P⁻¹ e for the error e and the reported position covariance P) of its assigned
/// reports. For an unbiased tracker whose covariance is right, NEES follows a χ² law with three
/// degrees of freedom: mean 3, median 2.366, below 7.815 (the truth inside the reported 95 %
/// ellipsoid) in 95 % of reports. Direction-only tracking reports a unit vector: its error and
/// covariance are taken in the plane tangent to the sphere at the report, two degrees of
/// freedom (mean 2, median 1.386, 95 % below 5.991).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Consistency {
    /// Degrees of freedom: 3 for positions, 2 for directions.
    pub dof: u32,
    /// Reports scored (those with a positive definite covariance).
    pub reports: usize,
    /// Reports whose covariance was not positive definite (not scored).
    pub singular: usize,
    pub nees_mean: f64,
    pub nees_median: f64,
    /// Percentage of reports with the truth inside the reported 95 % ellipsoid.
    pub within_95_pct: f64,
    /// The typical error over the typical reported spread, sqrt(median NEES / the χ² median):
    /// 1 when honest, above 1 when the reports are overconfident, below 1 when they are
    /// cautious.
    pub error_over_spread: f64,
}

/// χ² with three degrees of freedom: median and 95th percentile.
pub const CHI2_3_MEDIAN: f64 = 2.365_973_884;
pub const CHI2_3_P95: f64 = 7.814_727_903;
/// χ² with two degrees of freedom: median (2 ln 2) and 95th percentile (2 ln 20).
pub const CHI2_2_MEDIAN: f64 = 1.386_294_361;
pub const CHI2_2_P95: f64 = 5.991_464_547;

/// χ² with one degree of freedom: median and 95th percentile (1.96²).
pub const CHI2_1_MEDIAN: f64 = 0.454_936_423_119_572_7;
pub const CHI2_1_P95: f64 = 3.841_458_821;

/// The χ² median and 95th percentile for `dof` degrees of freedom (1 for an inverse range, 2
/// for directions, else 3).
fn chi2_quantiles(dof: u32) -> (f64, f64) {
    match dof {
        1 => (CHI2_1_MEDIAN, CHI2_1_P95),
        2 => (CHI2_2_MEDIAN, CHI2_2_P95),
        _ => (CHI2_3_MEDIAN, CHI2_3_P95),
    }
}

/// The symmetric matrix of an upper triangle (see [`upper_triangle`]); None when an entry is
/// not finite.
fn symmetric(c: &[f64; 6]) -> Option<nalgebra::Matrix3<f64>> {
    let p = nalgebra::Matrix3::new(c[0], c[1], c[2], c[1], c[3], c[4], c[2], c[4], c[5]);
    p.iter().all(|v| v.is_finite()).then_some(p)
}

/// The upper triangle of a symmetric 3 × 3 matrix: xx, xy, xz, yy, yz, zz (the stream's
/// `pos_cov` order).
pub fn upper_triangle(c: &[[f64; 3]; 3]) -> [f64; 6] {
    [c[0][0], c[0][1], c[0][2], c[1][1], c[1][2], c[2][2]]
}

/// eᵀ P⁻¹ e for P given by its upper triangle; None when P is not positive definite (or not
/// finite).
pub fn nees(e: &[f64; 3], cov: &[f64; 6]) -> Option<f64> {
    let chol = symmetric(cov)?.cholesky()?;
    let e = Vector3::from(*e);
    let v = e.dot(&chol.solve(&e));
    v.is_finite().then_some(v)
}

/// The NEES of a reported direction `u` (a unit vector, or any vector along it) against the
/// true direction `truth` (unit), in the plane tangent to the sphere at `u`: the error's and the
/// covariance's components along two unit vectors orthogonal to `u`. None when `u` is zero or
/// the projected covariance is not positive definite.
pub fn direction_nees(u: &[f64; 3], truth: &Vector3<f64>, cov: &[f64; 6]) -> Option<f64> {
    let u = unit(Vector3::from(*u))?;
    // Any axis not along u gives the first tangent vector.
    let axis = if u.x.abs() < 0.9 {
        Vector3::x()
    } else {
        Vector3::y()
    };
    let t1 = u.cross(&axis).normalize();
    let t2 = u.cross(&t1);
    let p = symmetric(cov)?;
    let t = nalgebra::Matrix3x2::from_columns(&[t1, t2]);
    let p2 = t.transpose() * p * t;
    let e = truth - u;
    let e2 = nalgebra::Vector2::new(e.dot(&t1), e.dot(&t2));
    let chol = p2.cholesky()?;
    let v = e2.dot(&chol.solve(&e2));
    v.is_finite().then_some(v)
}

fn consistency_of(nees: &[f64], singular: usize, dof: u32) -> Option<Consistency> {
    if nees.is_empty() {
        return None;
    }
    let (chi2_median, chi2_p95) = chi2_quantiles(dof);
    let mut s = nees.to_vec();
    s.sort_by(f64::total_cmp);
    let median = percentile(&s, 0.5);
    Some(Consistency {
        dof,
        reports: s.len(),
        singular,
        nees_mean: s.iter().sum::<f64>() / s.len() as f64,
        nees_median: median,
        within_95_pct: 100.0 * s.iter().filter(|&&v| v <= chi2_p95).count() as f64 / s.len() as f64,
        error_over_spread: (median / chi2_median).sqrt(),
    })
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

/// Read a JSON Lines position stream: track messages grouped by frame; status lines give the
/// number of frames processed, so frames without any report are counted too.
pub fn read_stream(path: &Path) -> Result<Vec<FrameReports>> {
    let text = std::fs::read_to_string(path).map_err(|e| Error::Io {
        path: path.into(),
        source: e,
    })?;
    parse_stream(&text).map_err(|(line, problem)| Error::Scene {
        path: path.into(),
        problem: format!("line {line}: {problem}"),
        fix: "give the JSON Lines written by `sonotrack replay --out` or a live JSONL/UDP sink"
            .into(),
    })
}

/// Whether a stream's reports are directions (`Some(true)`) or 3-D positions (`Some(false)`);
/// None when it has no reports; an error naming the two kinds when it mixes them.
pub fn stream_holds_directions(
    frames: &[FrameReports],
) -> std::result::Result<Option<bool>, String> {
    let mut kinds = frames.iter().flat_map(|f| &f.reports).map(|r| r.direction);
    let Some(first) = kinds.next() else {
        return Ok(None);
    };
    if kinds.any(|k| k != first) {
        return Err(
            "the stream mixes direction reports (with `az_deg`) and 3-D positions; evaluate each run's stream on its own"
                .into(),
        );
    }
    Ok(Some(first))
}

/// Parse a position stream (see `read_stream`).
pub fn parse_stream(text: &str) -> std::result::Result<Vec<FrameReports>, (usize, String)> {
    let mut by_seq: BTreeMap<u64, FrameReports> = BTreeMap::new();
    let mut frames_in = 0u64;
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let v: serde_json::Value =
            serde_json::from_str(line).map_err(|e| (i + 1, format!("not JSON: {e}")))?;
        match v.get("type").and_then(|t| t.as_str()) {
            Some("track") => {
                let num = |k: &str| {
                    v.get(k)
                        .and_then(|x| x.as_f64())
                        .ok_or_else(|| (i + 1, format!("track message without `{k}`")))
                };
                let pos = v
                    .get("pos")
                    .and_then(|p| p.as_array())
                    .filter(|a| a.len() == 3)
                    .and_then(|a| Some([a[0].as_f64()?, a[1].as_f64()?, a[2].as_f64()?]))
                    .ok_or_else(|| (i + 1, "track message without a 3-element `pos`".into()))?;
                let seq = num("seq")? as u64;
                let e = by_seq.entry(seq).or_insert_with(|| FrameReports {
                    seq,
                    ..Default::default()
                });
                e.t_frame = num("t_frame")?;
                // Streams written before the covariance was reported have none: they are scored
                // without the consistency check. One that is there must be six numbers.
                let cov = match v.get("pos_cov") {
                    None => None,
                    Some(p) => Some(
                        p.as_array()
                            .filter(|a| a.len() == 6)
                            .and_then(|a| {
                                let mut c = [0.0; 6];
                                for (x, y) in c.iter_mut().zip(a) {
                                    *x = y.as_f64()?;
                                }
                                Some(c)
                            })
                            .ok_or_else(|| {
                                (
                                    i + 1,
                                    "track message whose `pos_cov` is not 6 numbers (xx, xy, xz, yy, yz, zz)"
                                        .to_string(),
                                )
                            })?,
                    ),
                };
                let range_m = match v.get("range_m") {
                    None => None,
                    Some(r) => Some(r.as_f64().filter(|r| *r > 0.0).ok_or_else(|| {
                        (
                            i + 1,
                            "track message whose `range_m` is not a positive number".to_string(),
                        )
                    })?),
                };
                // The inverse range and its spread come together, or not at all.
                let inv_range = match (v.get("inv_range"), v.get("inv_range_std")) {
                    (None, None) => None,
                    (a, b) => {
                        let non_negative = |x: Option<&serde_json::Value>| {
                            x.and_then(|x| x.as_f64()).filter(|x| *x >= 0.0)
                        };
                        match (non_negative(a), non_negative(b)) {
                            (Some(a), Some(b)) => Some([a, b]),
                            _ => {
                                return Err((
                                    i + 1,
                                    "track message whose `inv_range` and `inv_range_std` are not both non-negative numbers".to_string(),
                                ));
                            }
                        }
                    }
                };
                e.reports.push(Report {
                    id: num("id")? as u64,
                    t: num("t")?,
                    pos,
                    models: Vec::new(),
                    cov,
                    range_m,
                    inv_range,
                    direction: v.get("az_deg").is_some(),
                });
            }
            Some("status") => {
                if let Some(n) = v.get("frames_in").and_then(|x| x.as_u64()) {
                    frames_in = frames_in.max(n);
                }
            }
            Some(other) => return Err((i + 1, format!("unknown message type `{other}`"))),
            None => return Err((i + 1, "message without `type`".into())),
        }
    }
    if by_seq.is_empty() {
        return Ok(Vec::new());
    }
    // Frame times are regular in the sequence number: fit t_frame = a + b seq and fill in the
    // frames without reports.
    let pts: Vec<(f64, f64)> = by_seq.values().map(|f| (f.seq as f64, f.t_frame)).collect();
    let n = pts.len() as f64;
    let (mx, my) = pts
        .iter()
        .fold((0.0, 0.0), |(a, b), (x, y)| (a + x / n, b + y / n));
    let sxx: f64 = pts.iter().map(|(x, _)| (x - mx) * (x - mx)).sum();
    let sxy: f64 = pts.iter().map(|(x, y)| (x - mx) * (y - my)).sum();
    let slope = if sxx > 0.0 { sxy / sxx } else { 0.0 };
    let last = by_seq
        .keys()
        .next_back()
        .copied()
        .unwrap_or(0)
        .max(frames_in.saturating_sub(1));
    let mut out = Vec::with_capacity(last as usize + 1);
    if slope <= 0.0 {
        // One frame only: no spacing to infer.
        return Ok(by_seq.into_values().collect());
    }
    for seq in 0..=last {
        out.push(by_seq.remove(&seq).unwrap_or_else(|| FrameReports {
            seq,
            t_frame: my + slope * (seq as f64 - mx),
            reports: Vec::new(),
        }));
    }
    Ok(out)
}

/// Minimum-cost assignment of rows to columns of a square cost matrix (Hungarian algorithm,
/// O(n³)). Returns the column of each row.
pub fn hungarian(cost: &[Vec<f64>]) -> Vec<usize> {
    let n = cost.len();
    if n == 0 {
        return Vec::new();
    }
    // Potentials formulation (1-based arrays with a virtual column 0).
    let inf = f64::INFINITY;
    let mut u = vec![0.0; n + 1];
    let mut v = vec![0.0; n + 1];
    let mut p = vec![0usize; n + 1];
    let mut way = vec![0usize; n + 1];
    for i in 1..=n {
        p[0] = i;
        let mut j0 = 0usize;
        let mut minv = vec![inf; n + 1];
        let mut used = vec![false; n + 1];
        loop {
            used[j0] = true;
            let i0 = p[j0];
            let mut delta = inf;
            let mut j1 = 0usize;
            for j in 1..=n {
                if used[j] {
                    continue;
                }
                let cur = cost[i0 - 1][j - 1] - u[i0] - v[j];
                if cur < minv[j] {
                    minv[j] = cur;
                    way[j] = j0;
                }
                if minv[j] < delta {
                    delta = minv[j];
                    j1 = j;
                }
            }
            for j in 0..=n {
                if used[j] {
                    u[p[j]] += delta;
                    v[j] -= delta;
                } else {
                    minv[j] -= delta;
                }
            }
            j0 = j1;
            if p[j0] == 0 {
                break;
            }
        }
        loop {
            let j1 = way[j0];
            p[j0] = p[j1];
            j0 = j1;
            if j0 == 0 {
                break;
            }
        }
    }
    let mut ans = vec![0usize; n];
    for j in 1..=n {
        if p[j] > 0 {
            ans[p[j] - 1] = j - 1;
        }
    }
    ans
}

/// OSPA distance between sets `x` and `y` (distances `d[i][j]` given), cut-off `c`, order `p`;
/// also the optimal assignment: for each x, the y it is paired with (when closer than c).
pub fn ospa(d: &[Vec<f64>], m: usize, n: usize, c: f64, p: f64) -> (f64, Vec<Option<usize>>) {
    let k = m.max(n);
    if k == 0 {
        return (0.0, Vec::new());
    }
    let cp = c.powf(p);
    let cost: Vec<Vec<f64>> = (0..k)
        .map(|i| {
            (0..k)
                .map(|j| {
                    if i < m && j < n {
                        d[i][j].min(c).powf(p)
                    } else {
                        cp
                    }
                })
                .collect()
        })
        .collect();
    let a = hungarian(&cost);
    let total: f64 = a.iter().enumerate().map(|(i, &j)| cost[i][j]).sum();
    let pairs = (0..m)
        .map(|i| {
            let j = a[i];
            (j < n && d[i][j] < c).then_some(j)
        })
        .collect();
    ((total / k as f64).powf(1.0 / p), pairs)
}

fn dist(a: &[f64; 3], b: &[f64; 3]) -> f64 {
    ((a[0] - b[0]).powi(2) + (a[1] - b[1]).powi(2) + (a[2] - b[2]).powi(2)).sqrt()
}

fn unit(v: Vector3<f64>) -> Option<Vector3<f64>> {
    let n = v.norm();
    (n > 1e-12).then(|| v / n)
}

fn percentile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let x = q * (sorted.len() - 1) as f64;
    let i = x.floor() as usize;
    let f = x - i as f64;
    if i + 1 < sorted.len() {
        sorted[i] * (1.0 - f) + sorted[i + 1] * f
    } else {
        sorted[sorted.len() - 1]
    }
}

/// Score `frames` against `truth`; `bounds` (per frame, target 0) adds the comparison with the
/// Cramér–Rao bound.
pub fn evaluate(
    frames: &[FrameReports],
    truth: &Truth,
    bounds: Option<&[FrameBound]>,
    o: &EvalOptions,
) -> Evaluation {
    let targets: Vec<u32> = truth.targets.keys().copied().collect();
    let centre = Vector3::from(o.centre);
    // Distance used for assignment: metres in 3-D, chord length on the unit sphere for
    // directions (so that c is then a fraction of a radian, about).
    let direction_of = |p: &[f64; 3]| -> Option<Vector3<f64>> {
        if o.direction_only {
            unit(Vector3::from(*p))
        } else {
            unit(Vector3::from(*p) - centre)
        }
    };
    let mut errors: BTreeMap<u32, Vec<f64>> = BTreeMap::new();
    let mut nees_of: BTreeMap<u32, (Vec<f64>, usize)> = BTreeMap::new();
    let mut scored: BTreeMap<u32, usize> = BTreeMap::new();
    let mut ospas = Vec::new();
    let (mut sum_tracks, mut sum_targets) = (0usize, 0usize);
    let mut last_id: BTreeMap<u32, u64> = BTreeMap::new();
    let mut switches = 0usize;
    let (mut az2, mut el2, mut ang) = (0.0, 0.0, Vec::new());
    let mut range_rel: Vec<f64> = Vec::new();
    let (mut inv_range_z, mut inv_range_singular): (Vec<f64>, usize) = (Vec::new(), 0);
    let mut bound_pairs: Vec<(f64, f64)> = Vec::new();
    let mut scored_frames = 0usize;
    for f in frames {
        if f.t_frame < o.warmup_s {
            continue;
        }
        let alive: Vec<u32> = targets
            .iter()
            .copied()
            .filter(|&k| truth.at(k, f.t_frame).is_some())
            .collect();
        if alive.is_empty() && f.reports.is_empty() {
            continue;
        }
        scored_frames += 1;
        // Distances with the truth at each report's emission time (or the frame time when the
        // truth has ended by then).
        // A direction-only report's time is the arrival time (its state has no range): the
        // truth is then taken where the sound arriving then was emitted.
        let truth_for = |k: u32, r: &Report| {
            if o.direction_only {
                truth_heard_at(truth, k, r.t, &centre, o.speed_of_sound_m_s)
                    .or_else(|| truth.at(k, f.t_frame))
            } else {
                truth.at(k, r.t).or_else(|| truth.at(k, f.t_frame))
            }
        };
        let d: Vec<Vec<f64>> = alive
            .iter()
            .map(|&k| {
                f.reports
                    .iter()
                    .map(|r| match truth_for(k, r) {
                        Some(q) if o.direction_only => {
                            match (direction_of(&r.pos), unit(Vector3::from(q) - centre)) {
                                (Some(a), Some(b)) => (a - b).norm(),
                                _ => f64::INFINITY,
                            }
                        }
                        Some(q) => dist(&r.pos, &q),
                        None => f64::INFINITY,
                    })
                    .collect()
            })
            .collect();
        let (dd, pairs) = ospa(&d, alive.len(), f.reports.len(), o.ospa_c_m, o.ospa_p);
        ospas.push(dd);
        sum_tracks += f.reports.len();
        sum_targets += alive.len();
        for (ti, &k) in alive.iter().enumerate() {
            *scored.entry(k).or_default() += 1;
            let Some(j) = pairs[ti] else { continue };
            let r = &f.reports[j];
            if let Some(prev) = last_id.insert(k, r.id) {
                if prev != r.id {
                    switches += 1;
                }
            }
            let Some(q) = truth_for(k, r) else { continue };
            if !o.direction_only {
                errors.entry(k).or_default().push(d[ti][j]);
            }
            // The report's NEES (None: not scored; Some(None): its covariance is unusable).
            let scored_nees = r.cov.as_ref().and_then(|c| {
                if o.direction_only {
                    unit(Vector3::from(q) - centre).map(|b| direction_nees(&r.pos, &b, c))
                } else {
                    let e = [r.pos[0] - q[0], r.pos[1] - q[1], r.pos[2] - q[2]];
                    Some(nees(&e, c))
                }
            });
            if let Some(v) = scored_nees {
                let slot = nees_of.entry(k).or_default();
                match v {
                    Some(v) => slot.0.push(v),
                    None => slot.1 += 1,
                }
            }
            if o.angles || o.direction_only {
                if let (Some(a), Some(b)) = (direction_of(&r.pos), unit(Vector3::from(q) - centre))
                {
                    let (aza, ela) = crate::crlb::angles(&a);
                    let (azb, elb) = crate::crlb::angles(&b);
                    let mut daz = (aza - azb).to_degrees();
                    daz = (daz + 180.0).rem_euclid(360.0) - 180.0;
                    az2 += daz * daz;
                    el2 += (ela - elb).to_degrees().powi(2);
                    ang.push(a.dot(&b).clamp(-1.0, 1.0).acos().to_degrees());
                    let truth_range = (Vector3::from(q) - centre).norm();
                    if let Some(range) = r.range_m {
                        range_rel.push(100.0 * (range - truth_range).abs() / truth_range);
                    }
                    if let Some([rho, sd]) = r.inv_range {
                        if sd > 0.0 {
                            inv_range_z.push((rho - 1.0 / truth_range) / sd);
                        } else {
                            inv_range_singular += 1;
                        }
                    }
                }
            }
            if k == targets.first().copied().unwrap_or(0) {
                if let Some(b) = bounds.and_then(|b| crate::bound::nearest(b, f.t_frame)) {
                    let err = if o.direction_only {
                        ang.last().copied()
                    } else {
                        Some(d[ti][j])
                    };
                    let bnd = if o.direction_only {
                        match (b.azimuth_deg, b.elevation_deg) {
                            (Some(a), Some(e)) => {
                                let el = direction_of(&q)
                                    .map(|u| crate::crlb::angles(&u).1)
                                    .unwrap_or(0.0);
                                Some((a * a * el.cos().powi(2) + e * e).sqrt())
                            }
                            _ => None,
                        }
                    } else {
                        b.position_m
                    };
                    if let (Some(e), Some(bv)) = (err, bnd) {
                        bound_pairs.push((e, bv));
                    }
                }
            }
        }
    }
    let per_target = if o.direction_only {
        BTreeMap::new()
    } else {
        targets
            .iter()
            .filter_map(|k| {
                let e = errors.get(k).cloned().unwrap_or_default();
                let n = scored.get(k).copied().unwrap_or(0);
                accuracy_of(&e, n, o.warmup_s, o.threshold_m).map(|a| (*k, a))
            })
            .collect()
    };
    let consistency = nees_of
        .iter()
        .filter_map(|(k, (v, singular))| {
            consistency_of(v, *singular, if o.direction_only { 2 } else { 3 }).map(|c| (*k, c))
        })
        .collect();
    let ospa = (!ospas.is_empty()).then(|| {
        let mut s = ospas.clone();
        s.sort_by(f64::total_cmp);
        OspaSummary {
            c_m: o.ospa_c_m,
            p: o.ospa_p,
            mean_m: ospas.iter().sum::<f64>() / ospas.len() as f64,
            median_m: percentile(&s, 0.5),
            frames: ospas.len(),
            mean_tracks: sum_tracks as f64 / ospas.len() as f64,
            mean_targets: sum_targets as f64 / ospas.len() as f64,
        }
    });
    range_rel.sort_by(f64::total_cmp);
    let angles = (!ang.is_empty()).then(|| {
        let n = ang.len() as f64;
        let mut s = ang.clone();
        s.sort_by(f64::total_cmp);
        AngleErrors {
            frames: ang.len(),
            azimuth_rmse_deg: (az2 / n).sqrt(),
            elevation_rmse_deg: (el2 / n).sqrt(),
            angle_rmse_deg: (ang.iter().map(|a| a * a).sum::<f64>() / n).sqrt(),
            angle_median_deg: percentile(&s, 0.5),
            angle_p90_deg: percentile(&s, 0.9),
            ranged_reports: range_rel.len(),
            range_median_rel_pct: (!range_rel.is_empty()).then(|| percentile(&range_rel, 0.5)),
            range_p90_rel_pct: (!range_rel.is_empty()).then(|| percentile(&range_rel, 0.9)),
            inv_range: inv_range_consistency_of(&inv_range_z, inv_range_singular),
        }
    });
    let bound = (!bound_pairs.is_empty()).then(|| {
        let n = bound_pairs.len() as f64;
        let rmse = (bound_pairs.iter().map(|(e, _)| e * e).sum::<f64>() / n).sqrt();
        let rb = (bound_pairs.iter().map(|(_, b)| b * b).sum::<f64>() / n).sqrt();
        let mut s: Vec<f64> = bound_pairs.iter().map(|(_, b)| *b).collect();
        s.sort_by(f64::total_cmp);
        BoundSummary {
            rms_bound: rb,
            median_bound: percentile(&s, 0.5),
            ratio: rmse / rb,
            frames: bound_pairs.len(),
            unit: if o.direction_only { "deg" } else { "m" },
        }
    });
    Evaluation {
        frames: scored_frames,
        targets: targets.len(),
        per_target,
        consistency,
        ospa,
        id_switches: switches,
        angles,
        bound,
        warmup_s: o.warmup_s,
        time_reference: if o.direction_only {
            TIME_REFERENCE_DIRECTIONS
        } else {
            TIME_REFERENCE
        },
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
            writeln!(
                f,
                "  direction: azimuth RMSE {:.3}°, elevation RMSE {:.3}°, angle RMSE {:.3}° (median {:.3}°, p90 {:.3}°)",
                a.azimuth_rmse_deg,
                a.elevation_rmse_deg,
                a.angle_rmse_deg,
                a.angle_median_deg,
                a.angle_p90_deg
            )?;
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
            }],
        }
    }

    #[test]
    fn hungarian_finds_the_optimum() {
        let c = vec![
            vec![4.0, 1.0, 3.0],
            vec![2.0, 0.0, 5.0],
            vec![3.0, 2.0, 2.0],
        ];
        let a = hungarian(&c);
        let total: f64 = a.iter().enumerate().map(|(i, &j)| c[i][j]).sum();
        assert_eq!(total, 5.0); // 1 + 2 + 2
        let mut seen = a.clone();
        seen.sort();
        assert_eq!(seen, vec![0, 1, 2]);
    }

    /// OSPA by hand: targets at 0 and 10 (on a line), tracks at 1 and 30; c = 5, p = 1.
    /// Pairs: 0-1 (distance 1), 10-30 (cut to 5): (1 + 5) / 2 = 3. One extra track far away:
    /// (1 + 5 + 5) / 3. Empty against two targets: c.
    #[test]
    fn ospa_by_hand() {
        let d = vec![vec![1.0, 30.0], vec![9.0, 20.0]];
        let (v, pairs) = ospa(&d, 2, 2, 5.0, 1.0);
        assert!((v - 3.0).abs() < 1e-12, "{v}");
        assert_eq!(pairs, vec![Some(0), None]);
        let d3 = vec![vec![1.0, 30.0, 50.0], vec![9.0, 20.0, 40.0]];
        let (v3, _) = ospa(&d3, 2, 3, 5.0, 1.0);
        assert!((v3 - 11.0 / 3.0).abs() < 1e-12, "{v3}");
        let (v0, _) = ospa(&[vec![], vec![]], 2, 0, 5.0, 1.0);
        assert!((v0 - 5.0).abs() < 1e-12);
        // p = 2: sqrt((1 + 25) / 2).
        let (v2, _) = ospa(&d, 2, 2, 5.0, 2.0);
        assert!((v2 - 13.0f64.sqrt()).abs() < 1e-12);
        assert_eq!(ospa(&[], 0, 0, 5.0, 1.0).0, 0.0);
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
        use crate::philox::{PhiloxStream, Stream};
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
        use crate::philox::{PhiloxStream, Stream};
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

    #[test]
    fn nees_by_hand() {
        // Diagonal P = diag(1, 4, 9): e = (1, 2, 3) gives 1 + 1 + 1.
        let v = nees(&[1.0, 2.0, 3.0], &[1.0, 0.0, 0.0, 4.0, 0.0, 9.0]).unwrap();
        assert!((v - 3.0).abs() < 1e-12);
        assert_eq!(
            nees(&[1.0, 0.0, 0.0], &[1.0, 0.0, 0.0, -1.0, 0.0, 1.0]),
            None
        );
        assert_eq!(
            nees(&[1.0, 0.0, 0.0], &[f64::NAN, 0.0, 0.0, 1.0, 0.0, 1.0]),
            None
        );
    }

    #[test]
    fn stream_parsing_fills_frames_without_reports() {
        let text = r#"{"type":"status","t":1.0,"frames_in":6}
{"type":"track","t":0.1,"t_frame":0.125,"seq":1,"id":3,"pos":[1,2,3],"pos_cov":[1,0,0,2,0,3]}
{"type":"track","t":0.2,"t_frame":0.25,"seq":2,"id":3,"pos":[1,2,3]}
{"type":"track","t":0.45,"t_frame":0.5,"seq":4,"id":3,"pos":[1,2,3]}
"#;
        let f = parse_stream(text).unwrap();
        assert_eq!(f.len(), 6);
        assert!(f[3].reports.is_empty());
        assert_eq!(f[1].reports[0].cov, Some([1.0, 0.0, 0.0, 2.0, 0.0, 3.0]));
        assert_eq!(f[2].reports[0].cov, None);
        assert!((f[3].t_frame - 0.375).abs() < 1e-12);
        assert!((f[0].t_frame - 0.0).abs() < 1e-12);
        assert_eq!(parse_stream("{\"type\":\"x\"}").unwrap_err().0, 1);
        assert!(parse_stream("{\"type\":\"track\",\"seq\":1}").is_err());
        assert!(parse_stream("not json").is_err());
        // A covariance that is there but malformed is an error naming the line, not a report
        // scored without it.
        let bad = "{\"type\":\"track\",\"t\":0.1,\"t_frame\":0.1,\"seq\":1,\"id\":3,\"pos\":[1,2,3],\"pos_cov\":[1,0,0,2,0]}";
        let (line, problem) = parse_stream(&format!("\n{bad}\n")).unwrap_err();
        assert_eq!(line, 2);
        assert!(problem.contains("`pos_cov`"), "{problem}");
        // A direction's range: read where given, an error naming the line where malformed.
        let ranged = "{\"type\":\"track\",\"t\":0.1,\"t_frame\":0.1,\"seq\":1,\"id\":3,\"pos\":[1,0,0],\"range_m\":12.5}";
        let f = parse_stream(ranged).unwrap();
        assert_eq!(f.last().unwrap().reports[0].range_m, Some(12.5));
        for bad in ["\"far\"", "-2"] {
            let line = ranged.replace("12.5", bad);
            let (_, problem) = parse_stream(&line).unwrap_err();
            assert!(problem.contains("`range_m`"), "{bad}: {problem}");
        }
        // The inverse range and its spread: read together; one without the other, or a
        // negative or non-numeric one, is an error naming the line.
        let inv = ranged.replace("}", ",\"inv_range\":0.08,\"inv_range_std\":0.004}");
        let f = parse_stream(&inv).unwrap();
        assert_eq!(f.last().unwrap().reports[0].inv_range, Some([0.08, 0.004]));
        assert_eq!(parse_stream(ranged).unwrap()[0].reports[0].inv_range, None);
        for bad in [
            ",\"inv_range\":0.08}",
            ",\"inv_range_std\":0.004}",
            ",\"inv_range\":-0.1,\"inv_range_std\":0.004}",
            ",\"inv_range\":0.08,\"inv_range_std\":\"wide\"}",
        ] {
            let line = format!("\n\n{}", ranged.replace("}", bad));
            let (n, problem) = parse_stream(&line).unwrap_err();
            assert_eq!(n, 3, "{bad}");
            assert!(problem.contains("`inv_range`"), "{bad}: {problem}");
        }
    }

    /// A stream says what it holds: direction reports carry `az_deg`; mixing the two kinds is
    /// an error, an empty stream holds neither.
    #[test]
    fn streams_say_whether_they_hold_directions() {
        let three_d =
            "{\"type\":\"track\",\"t\":0.1,\"t_frame\":0.1,\"seq\":1,\"id\":3,\"pos\":[5,1,-2]}";
        let direction = "{\"type\":\"track\",\"t\":0.2,\"t_frame\":0.2,\"seq\":2,\"id\":3,\"pos\":[0.6,0.8,0],\"az_deg\":53.13,\"el_deg\":0}";
        let kind = |text: &str| stream_holds_directions(&parse_stream(text).unwrap());
        assert_eq!(kind(three_d), Ok(Some(false)));
        assert_eq!(kind(direction), Ok(Some(true)));
        assert_eq!(kind(""), Ok(None));
        let mixed = kind(&format!("{three_d}\n{direction}")).unwrap_err();
        assert!(mixed.contains("mixes"), "{mixed}");
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
