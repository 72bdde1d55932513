//! The sequential Rauch–Tung–Striebel smoother, backward from the last record:
//! x̂_{k|N} = x̂_{k|k} + C_k (x̂_{k+1|N} − x̂_{k+1|k}),
//! P_{k|N} = P_{k|k} + C_k (P_{k+1|N} − P_{k+1|k}) C_kᵀ, C_k = P_{k|k} F_kᵀ P_{k+1|k}⁻¹.

use super::kalman::symmetric;
use super::{Covariance, Record, SmoothError, Smoothed, gain};

/// Smooth one track's records (in time order).
pub fn smooth(records: &[Record], cov: Covariance) -> Result<Vec<Smoothed>, SmoothError> {
    smooth_with(records, cov, gain)
}

/// [`smooth`] with another gain (tests use it to show the thesis's printed gain fails).
pub fn smooth_with(
    records: &[Record],
    cov: Covariance,
    gain: impl Fn(&Record, usize) -> Result<nalgebra::DMatrix<f64>, SmoothError>,
) -> Result<Vec<Smoothed>, SmoothError> {
    let Some(last) = records.last() else {
        return Ok(Vec::new());
    };
    let mut out = vec![
        Smoothed {
            x: last.x.clone(),
            p: (cov == Covariance::Smooth).then(|| last.p.clone()),
        };
        records.len()
    ];
    for k in (0..records.len() - 1).rev() {
        let r = &records[k];
        let c = gain(r, k)?;
        let xp = r.x_pred.as_ref().ok_or(SmoothError::MissingPrediction(k))?;
        let x = &r.x + &c * (&out[k + 1].x - xp);
        let p = match (&out[k + 1].p, &r.p_pred) {
            (Some(next), Some(pp)) => Some(symmetric(&r.p + &c * (next - pp) * c.transpose())),
            _ => None,
        };
        out[k] = Smoothed { x, p };
    }
    Ok(out)
}
