//! Smoothing a linear-Gaussian track after the fact (seed 002, `../shared/research/
//! gpu-kalman-smoothing.md`, checklist §4 items 6-9), on the CPU in f64:
//!
//! - [`kalman`]: the forward linear Kalman filter whose records the smoothers read (Joseph-form
//!   update, innovation from the new measurement);
//! - [`rts`]: the sequential Rauch–Tung–Striebel smoother, means and covariances, with the
//!   correct gain C_k = P_{k|k} F_kᵀ P_{k+1|k}⁻¹ (the thesis prints P_{k|k}⁻¹);
//! - [`fixed_lag`]: x̂_{k|k+L} for live output, by RTS over a window of L + 1 records;
//! - [`tracks`]: the tracker's own tracks smoothed from their filtered Gaussian summaries
//!   (`replay --smooth`, `smoothing.lag_s`).
//!
//! Each takes the forward filter's [`Record`]s of one track and returns [`Smoothed`] states.

pub mod fixed_lag;
pub mod kalman;
pub mod rts;
pub mod tracks;

use nalgebra::{DMatrix, DVector};

/// What the forward filter keeps of step k for the smoother: the filtered state and
/// covariance, the transition F_k to step k + 1 and the prediction it gave for k + 1.
#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    /// x̂_{k|k}, P_{k|k}.
    pub x: DVector<f64>,
    pub p: DMatrix<f64>,
    /// F_k (step k to k + 1); unused for the last record.
    pub f: DMatrix<f64>,
    /// x̂_{k+1|k}, P_{k+1|k} (None for the last record).
    pub x_pred: Option<DVector<f64>>,
    pub p_pred: Option<DMatrix<f64>>,
}

/// A smoothed state x̂_{k|N} and, when asked for, its covariance P_{k|N}.
#[derive(Debug, Clone, PartialEq)]
pub struct Smoothed {
    pub x: DVector<f64>,
    pub p: Option<DMatrix<f64>>,
}

/// Whether a smoother computes covariances too (the seed's option 4 skips them: the means do
/// not depend on them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Covariance {
    Smooth,
    Skip,
}

/// Why a smoother cannot run on some records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SmoothError {
    /// A record other than the last lacks its prediction.
    MissingPrediction(usize),
    /// P_{k+1|k} is not positive definite at record k.
    NotPositiveDefinite(usize),
}

impl std::fmt::Display for SmoothError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SmoothError::MissingPrediction(k) => {
                write!(f, "record {k} has no prediction for the next step")
            }
            SmoothError::NotPositiveDefinite(k) => {
                write!(
                    f,
                    "the predicted covariance after record {k} is not positive definite"
                )
            }
        }
    }
}

/// The smoother gain C_k = P_{k|k} F_kᵀ P_{k+1|k}⁻¹, by a Cholesky solve (P_{k+1|k} C_kᵀ =
/// F_k P_{k|k}, both symmetric).
pub fn gain(r: &Record, k: usize) -> Result<DMatrix<f64>, SmoothError> {
    let pp = r.p_pred.as_ref().ok_or(SmoothError::MissingPrediction(k))?;
    let chol = pp
        .clone()
        .cholesky()
        .ok_or(SmoothError::NotPositiveDefinite(k))?;
    let rhs = &r.f * &r.p;
    Ok(chol.solve(&rhs).transpose())
}

#[cfg(test)]
mod tests;
