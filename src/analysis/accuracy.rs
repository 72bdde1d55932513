//! Accuracy against ground truth.
//!
//! Truth times are emission times; reports carry the emission time of their state (`t`), so the
//! truth is interpolated at the report's `t`. Comparing at the arrival time instead would charge
//! the tracker with the propagation delay (tens of milliseconds underwater: centimetres).

use serde::Serialize;

use crate::analysis::truth::Truth;

/// Single-source accuracy over the frames after a warm-up.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Accuracy {
    /// Frames scored (truth defined, after the warm-up).
    pub frames: usize,
    /// Of those, frames with a track report.
    pub tracked: usize,
    pub rmse_m: f64,
    pub median_m: f64,
    pub p90_m: f64,
    pub max_m: f64,
    pub threshold_m: f64,
    /// Percentage of scored frames with a report within the threshold (frames without a report
    /// count as outside).
    pub within_pct: f64,
    pub warmup_s: f64,
}

/// A reported position: (emission time, position).
pub type Fix = (f64, [f64; 3]);

/// Collects (frame time, best report) pairs during a replay.
#[derive(Debug, Clone, Default)]
pub struct Recorder {
    /// (frame centre time, the report when a track reported).
    pub rows: Vec<(f64, Option<Fix>)>,
}

impl Recorder {
    pub fn push(&mut self, t_frame: f64, report: Option<Fix>) {
        self.rows.push((t_frame, report));
    }

    /// Score against target `target` of `truth`, ignoring frames before `warmup_s`.
    pub fn accuracy(
        &self,
        truth: &Truth,
        target: u32,
        warmup_s: f64,
        threshold_m: f64,
    ) -> Option<Accuracy> {
        let mut errors = Vec::new();
        let mut frames = 0usize;
        for (t_frame, rep) in &self.rows {
            if *t_frame < warmup_s {
                continue;
            }
            match rep {
                Some((t, p)) => {
                    let Some(q) = truth.at(target, *t) else {
                        continue;
                    };
                    frames += 1;
                    errors.push(
                        ((p[0] - q[0]).powi(2) + (p[1] - q[1]).powi(2) + (p[2] - q[2]).powi(2))
                            .sqrt(),
                    );
                }
                None => {
                    if truth.at(target, *t_frame).is_some() {
                        frames += 1;
                    }
                }
            }
        }
        accuracy_of(&errors, frames, warmup_s, threshold_m)
    }
}

/// RMSE, median, 90th percentile, max and % within a threshold.
pub fn accuracy_of(
    errors: &[f64],
    frames: usize,
    warmup_s: f64,
    threshold_m: f64,
) -> Option<Accuracy> {
    if frames == 0 {
        return None;
    }
    let mut e = errors.to_vec();
    e.sort_by(f64::total_cmp);
    let n = e.len();
    Some(Accuracy {
        frames,
        tracked: n,
        rmse_m: if n > 0 {
            (e.iter().map(|v| v * v).sum::<f64>() / n as f64).sqrt()
        } else {
            f64::NAN
        },
        median_m: percentile(&e, 0.5),
        p90_m: percentile(&e, 0.9),
        max_m: e.last().copied().unwrap_or(f64::NAN),
        threshold_m,
        within_pct: 100.0 * e.iter().filter(|&&v| v <= threshold_m).count() as f64 / frames as f64,
        warmup_s,
    })
}

/// The `q` quantile of sorted values, interpolating linearly between order statistics (NaN when
/// empty).
pub fn percentile(sorted: &[f64], q: f64) -> f64 {
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

impl std::fmt::Display for Accuracy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "after {:.1} s: RMSE {:.4} m, median {:.4} m, p90 {:.4} m, max {:.3} m, {:.1}% of {} frames within {} m ({} tracked)",
            self.warmup_s,
            self.rmse_m,
            self.median_m,
            self.p90_m,
            self.max_m,
            self.within_pct,
            self.frames,
            self.threshold_m,
            self.tracked
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hand_computed_case() {
        // Errors 3, 4, 0, 1 and one untracked frame.
        let a = accuracy_of(&[3.0, 4.0, 0.0, 1.0], 5, 0.0, 2.0).unwrap();
        assert!((a.rmse_m - (26.0f64 / 4.0).sqrt()).abs() < 1e-12);
        assert!((a.median_m - 2.0).abs() < 1e-12);
        assert!((a.p90_m - 3.7).abs() < 1e-12);
        assert_eq!(a.max_m, 4.0);
        assert!((a.within_pct - 40.0).abs() < 1e-12);
        assert_eq!((a.frames, a.tracked), (5, 4));
    }

    #[test]
    fn recorder_uses_emission_time_and_warmup() {
        let truth = Truth::parse("0,0,0,0,0\n10,0,10,0,0\n").unwrap();
        let mut r = Recorder::default();
        r.push(1.0, Some((1.0, [5.0, 0.0, 0.0]))); // before warm-up
        r.push(3.02, Some((3.0, [3.0, 0.0, 0.0]))); // exact at emission time 3.0
        r.push(4.0, None);
        let a = r.accuracy(&truth, 0, 2.0, 0.5).unwrap();
        assert_eq!(a.frames, 2);
        assert!(a.rmse_m < 1e-12);
        assert!((a.within_pct - 50.0).abs() < 1e-12);
    }
}
