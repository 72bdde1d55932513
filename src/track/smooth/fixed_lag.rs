//! A fixed-lag smoother for live output: after record k + L arrives, x̂_{k|k+L} — what an RTS
//! run over the data up to k + L gives for step k — by RTS over the last L + 1 records (cost
//! O(L n³) a step per track). Receivers that can wait L steps get better positions.

use std::collections::VecDeque;

use super::{Covariance, Record, SmoothError, Smoothed, rts};

/// A window of the last `lag` + 1 records of one track.
#[derive(Debug, Clone)]
pub struct FixedLag {
    lag: usize,
    window: VecDeque<Record>,
    cov: Covariance,
}

impl FixedLag {
    pub fn new(lag: usize, cov: Covariance) -> Self {
        Self {
            lag,
            window: VecDeque::with_capacity(lag + 1),
            cov,
        }
    }

    /// Take the filter's newest record (the previous one must carry its prediction for this
    /// step) and return x̂_{k|k+L} for k = newest − L, once L + 1 records have come.
    pub fn push(&mut self, r: Record) -> Result<Option<Smoothed>, SmoothError> {
        self.window.push_back(r);
        if self.window.len() > self.lag + 1 {
            self.window.pop_front();
        }
        if self.window.len() < self.lag + 1 {
            return Ok(None);
        }
        let records: Vec<Record> = self.window.iter().cloned().collect();
        let mut s = rts::smooth(&records, self.cov)?;
        Ok(Some(s.swap_remove(0)))
    }

    /// Attach the transition to the next step and its prediction to the newest record (the
    /// filter learns them only when it predicts).
    pub fn set_prediction(
        &mut self,
        f: nalgebra::DMatrix<f64>,
        x_pred: nalgebra::DVector<f64>,
        p_pred: nalgebra::DMatrix<f64>,
    ) {
        if let Some(last) = self.window.back_mut() {
            last.f = f;
            last.x_pred = Some(x_pred);
            last.p_pred = Some(p_pred);
        }
    }
}
