//! Smoothing the tracker's own tracks: each track's filtered Gaussian summaries (the particle
//! filter's weighted mean and covariance, [`GaussianState`]) smoothed backwards under a
//! constant-velocity model, as a replay's fixed-interval RTS pass when the track ends
//! ([`Mode::Interval`]) or as a live fixed-lag estimate L frames behind ([`Mode::Lag`]).
//!
//! The backward pass needs the filter's prediction from step k to k + 1. The particle filter's
//! motion is a mixture (quiet and agile constant velocity, coordinated turn, near-static), so
//! the smoother uses its moment match: F the constant-velocity transition over the step and Q
//! the continuous white-noise-acceleration covariance with spectral density q = Σ_m μ_m σ_m²
//! (μ the track's model probabilities, σ_m each model's acceleration noise) plus the turn's
//! centripetal acceleration (|v| ω)², the part of a turn a straight-line model sees as noise.
//! In direction mode the state is a direction scaled by 1 + the inverse range ρ and the
//! accelerations act on it divided by the range: σ_m ρ (see `models::advance`).

use std::collections::{BTreeMap, VecDeque};

use nalgebra::{DMatrix, DVector};

use super::fixed_lag::FixedLag;
use super::kalman::{LinearModel, symmetric};
use super::{Covariance, Record, SmoothError, Smoothed, rts};
use crate::track::MotionModel;
use crate::track::motion::models::Kinematics;
use crate::track::report::{EstimateKind, GaussianState, TrackEnd, TrackReport};

/// How the tracks are smoothed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Every report of a track again once it has ended, from all of its data (replays: the
    /// track's reports are kept until then).
    Interval,
    /// Each report again `lag` frames later, from the data up to then (live; the last `lag`
    /// reports of a track that ends come from the data it had).
    Lag(usize),
}

/// Per-track histories and the smoothed reports they give.
#[derive(Debug)]
pub struct TrackSmoother {
    mode: Mode,
    /// The tracker's motion models (configuration order).
    models: Vec<MotionModel>,
    tracks: BTreeMap<u64, History>,
    /// Backward passes that failed (a predicted covariance not positive definite): the
    /// filtered reports stood in for the smoothed ones.
    pub failures: u64,
}

/// One track's reports since it began (interval) or its last `lag` + 1 (fixed lag).
#[derive(Debug)]
struct History {
    reports: VecDeque<TrackReport>,
    lag: Option<FixedLag>,
}

impl TrackSmoother {
    pub fn new(mode: Mode, models: &[MotionModel]) -> Self {
        Self {
            mode,
            models: models.to_vec(),
            tracks: BTreeMap::new(),
            failures: 0,
        }
    }

    /// Take one frame's reports and the tracks that ended in it; return the smoothed reports
    /// that are ready (of this or earlier frames), in time order per track.
    pub fn push(&mut self, reports: &[TrackReport], ended: &[TrackEnd]) -> Vec<TrackReport> {
        let mut out = Vec::new();
        for r in reports {
            let h = self.tracks.entry(r.id).or_insert_with(|| History {
                reports: VecDeque::new(),
                lag: match self.mode {
                    Mode::Lag(l) => Some(FixedLag::new(l, Covariance::Smooth)),
                    Mode::Interval => None,
                },
            });
            if let Some(prev) = h.reports.back() {
                if let Some(lag) = h.lag.as_mut() {
                    let (f, xp, pp) = predict(prev, &record_of(prev), r.t_s, &self.models);
                    lag.set_prediction(f, xp, pp);
                }
            }
            h.reports.push_back(r.clone());
            let Mode::Lag(l) = self.mode else {
                continue;
            };
            let Some(lag) = h.lag.as_mut() else {
                continue;
            };
            let smoothed = lag.push(record_of(r));
            if h.reports.len() > l + 1 {
                h.reports.pop_front();
            }
            if h.reports.len() == l + 1 {
                match smoothed {
                    Ok(Some(s)) => out.push(as_report(&h.reports[0], &s, EstimateKind::Lagged)),
                    Ok(None) => {}
                    Err(_) => {
                        self.failures += 1;
                        out.push(relabel(&h.reports[0], EstimateKind::Lagged));
                    }
                }
            }
        }
        for e in ended {
            out.extend(self.end_track(e.id));
        }
        out
    }

    /// The smoothed reports still held for every track (end of the stream).
    pub fn finish(&mut self) -> Vec<TrackReport> {
        let ids: Vec<u64> = self.tracks.keys().copied().collect();
        ids.into_iter().flat_map(|id| self.end_track(id)).collect()
    }

    /// How many reports are held, over all tracks.
    pub fn held(&self) -> usize {
        self.tracks.values().map(|h| h.reports.len()).sum()
    }

    /// A track ended: its held reports smoothed from the data it had (all of it in interval
    /// mode; in lag mode the reports not yet given out).
    fn end_track(&mut self, id: u64) -> Vec<TrackReport> {
        let Some(h) = self.tracks.remove(&id) else {
            return Vec::new();
        };
        let reports: Vec<TrackReport> = h.reports.into();
        let (kind, skip) = match self.mode {
            Mode::Interval => (EstimateKind::Smoothed, 0),
            // The window's first report has gone out already (once the window was full).
            Mode::Lag(l) => (EstimateKind::Lagged, usize::from(reports.len() == l + 1)),
        };
        match smooth_reports(&reports, &self.models) {
            Ok(s) => reports
                .iter()
                .zip(&s)
                .skip(skip)
                .map(|(r, s)| as_report(r, s, kind))
                .collect(),
            Err(_) => {
                self.failures += 1;
                reports
                    .iter()
                    .skip(skip)
                    .map(|r| relabel(r, kind))
                    .collect()
            }
        }
    }
}

/// Fixed-interval RTS over one track's reports (in time order).
pub fn smooth_reports(
    reports: &[TrackReport],
    models: &[MotionModel],
) -> Result<Vec<Smoothed>, SmoothError> {
    let mut records: Vec<Record> = reports.iter().map(record_of).collect();
    for (k, next) in reports.iter().enumerate().skip(1) {
        let (f, xp, pp) = predict(&reports[k - 1], &records[k - 1], next.t_s, models);
        records[k - 1].f = f;
        records[k - 1].x_pred = Some(xp);
        records[k - 1].p_pred = Some(pp);
    }
    rts::smooth(&records, Covariance::Smooth)
}

/// A report's filtered state as the smoother's record (its prediction is attached when the
/// next report comes).
fn record_of(r: &TrackReport) -> Record {
    let x = DVector::from_row_slice(&r.state.mean);
    let p = DMatrix::from_fn(6, 6, |i, j| r.state.cov[i][j]);
    Record {
        x,
        p: symmetric(p),
        f: DMatrix::identity(6, 6),
        x_pred: None,
        p_pred: None,
    }
}

/// The step from `prev`'s state time to `t_s` (at least a microsecond).
fn step_dt(prev: &TrackReport, t_s: f64) -> f64 {
    (t_s - prev.t_s).max(1e-6)
}

/// The transition F from `prev`'s state time to `t_s` and the prediction x̂ = F x,
/// P = F P Fᵀ + Q of its record `r`.
fn predict(
    prev: &TrackReport,
    r: &Record,
    t_s: f64,
    models: &[MotionModel],
) -> (DMatrix<f64>, DVector<f64>, DMatrix<f64>) {
    let m = cv_model(prev, t_s, models);
    let pp = symmetric(&m.f * &r.p * m.f.transpose() + &m.q);
    let xp = &m.f * &r.x;
    (m.f, xp, pp)
}

/// The moment-matched constant-velocity model from `prev`'s state time to `t_s`: continuous
/// white-noise acceleration, whose Q is positive definite for any step (unlike the
/// piecewise-constant form), so the backward gain's solve never meets a singular prediction.
fn cv_model(prev: &TrackReport, t_s: f64, models: &[MotionModel]) -> LinearModel {
    LinearModel::constant_velocity(3, step_dt(prev, t_s), accel_density(prev, models), 1.0)
}

/// The mean of `value` over the models, weighted by the track's model probabilities (equal
/// weights where it has none).
fn mixture(r: &TrackReport, models: &[MotionModel], value: impl Fn(&MotionModel) -> f64) -> f64 {
    let probs = &r.model_probs;
    if probs.len() == models.len() && !models.is_empty() {
        let total: f64 = probs.iter().map(|p| f64::from(*p)).sum();
        if total > 0.0 {
            return probs
                .iter()
                .zip(models)
                .map(|(p, m)| f64::from(*p) * value(m))
                .sum::<f64>()
                / total;
        }
    }
    models.iter().map(&value).sum::<f64>() / models.len().max(1) as f64
}

/// The acceleration density of the moment-matched model for a track in state `r` (see the
/// module's notes), in the state's units.
fn accel_density(r: &TrackReport, models: &[MotionModel]) -> f64 {
    let mut q = mixture(r, models, |m| f64::from(m.accel_std).powi(2));
    let m = &r.state.mean;
    let speed = (m[3] * m[3] + m[4] * m[4] + m[5] * m[5]).sqrt();
    let turn = speed * f64::from(r.turn_rate_rad_s);
    q += turn * turn;
    if r.kin == Kinematics::Curved {
        let rho = ((m[0] * m[0] + m[1] * m[1] + m[2] * m[2]).sqrt() - 1.0).max(0.0);
        q *= rho * rho;
    }
    // (Never zero: a static source still needs a positive-definite prediction.)
    q.max(1e-12)
}

/// `r` with the smoothed state `s`.
fn as_report(r: &TrackReport, s: &Smoothed, kind: EstimateKind) -> TrackReport {
    let p = s.p.as_ref().map_or(r.state.cov, |p| {
        std::array::from_fn(|i| std::array::from_fn(|j| p[(i, j)]))
    });
    let state = GaussianState {
        mean: std::array::from_fn(|i| s.x[i]),
        cov: p,
    };
    r.with_state(state, kind)
}

/// `r` unchanged, labelled as `kind` (where a backward pass failed).
fn relabel(r: &TrackReport, kind: EstimateKind) -> TrackReport {
    TrackReport {
        estimate: kind,
        ..r.clone()
    }
}

#[cfg(test)]
#[path = "tracks_tests.rs"]
mod tests;
