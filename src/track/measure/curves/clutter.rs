//! The curves' clutter map (`tracker.curves.clutter_map_s`): a slow running mean of every
//! pair's GCC-PHAT curve, lag by lag, subtracted from each frame before the particles weigh it.
//! What stays put for longer than its time constant — a persistent reflection, a moored pump, a
//! fixed interferer — fades from the curves the model sees, so it is not detected as a source;
//! a source that moves, or one that appears, stands out of the map.
//!
//! The map starts empty and rises towards the curves' mean (an exponential mean from zero, so
//! a feature present from the start is taken away by 1 − e^(−t/τ) of itself after t seconds, not
//! at once). The lags around each held track's delays are left out of the update: a tracked
//! source that holds still is not learnt away beneath its track.

/// The map of one tracker.
#[derive(Debug, Clone)]
pub struct ClutterMap {
    /// Per frame, the new curve's weight in the mean (frame / τ).
    alpha: f64,
    /// `pairs × curve_len`, as the frame's curves.
    mean: Vec<f64>,
}

impl ClutterMap {
    /// A map with time constant `time_constant_s` over frames `frame_s` apart.
    pub fn new(time_constant_s: f64, frame_s: f64) -> Self {
        Self {
            alpha: (frame_s / time_constant_s.max(frame_s)).clamp(0.0, 1.0),
            mean: Vec::new(),
        }
    }

    /// Subtract the map from `curves` and learn them (as they came) into it, except at the
    /// lags `held` marks. A non-finite value is neither learnt nor changed.
    pub fn apply(&mut self, curves: &mut [f64], held: &[bool]) {
        if self.mean.len() != curves.len() {
            self.mean = vec![0.0; curves.len()];
        }
        for (i, (c, m)) in curves.iter_mut().zip(&mut self.mean).enumerate() {
            if !c.is_finite() {
                continue;
            }
            let raw = *c;
            *c = raw - *m;
            if !held.get(i).copied().unwrap_or(false) {
                *m += self.alpha * (raw - *m);
            }
        }
    }

    /// The map (empty before the first frame).
    pub fn mean(&self) -> &[f64] {
        &self.mean
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A constant feature fades by 1 − e^(−t/τ); a held lag is never learnt; a feature that
    /// appears late stands out at first.
    #[test]
    fn a_steady_feature_fades_and_a_held_one_stays() {
        let (tau, frame) = (10.0, 0.05);
        let mut map = ClutterMap::new(tau, frame);
        let held = [false, true, false];
        let mut seen = [0.0; 3];
        let frames = (tau / frame) as usize;
        for _ in 0..frames {
            seen = [1.0, 1.0, 0.0];
            map.apply(&mut seen, &held);
        }
        // After one time constant: 1 − (1 − α)^n ≈ 1 − e^−1 of the feature is taken away.
        let want = (1.0f64 - frame / tau).powi(frames as i32 - 1);
        assert!((seen[0] - want).abs() < 1e-9, "{} against {want}", seen[0]);
        assert!((seen[0] - (-1.0f64).exp()).abs() < 0.01);
        assert_eq!(seen[1], 1.0, "a held lag is not learnt");
        assert_eq!(map.mean()[1], 0.0);
        // A feature appearing now is seen whole.
        let mut now = [1.0, 1.0, 0.7];
        map.apply(&mut now, &held);
        assert!((now[2] - 0.7).abs() < 1e-12);
        // A non-finite lag passes unchanged and is not learnt.
        let mut bad = [f64::NAN, 1.0, 0.0];
        map.apply(&mut bad, &held);
        assert!(bad[0].is_nan() && map.mean()[0].is_finite());
    }
}
