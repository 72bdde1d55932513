//! The TDOA noise the tracker assumes: the configured floor, or a robust estimate from the
//! residuals of the peaks assigned to tracks, whichever is larger, and never above a ceiling
//! (beyond it a track is lost, not noisy).

use crate::track::gate::Gates;
use crate::track::measure::peaks::PeaksModel;
use std::collections::VecDeque;

/// Residuals kept for the online estimate of the TDOA noise.
pub const RESIDUAL_WINDOW: usize = 256;

/// The last [`RESIDUAL_WINDOW`] residuals, in arrival order and in order of size, so that their
/// median is read rather than selected on every frame (a selection over 256 values, with its
/// copy, took about 1 us per frame on dev-cpu, on the live path's host tail). The median is the
/// element `select_nth_unstable_by(len / 2, f32::total_cmp)` would pick: the same value.
#[derive(Default)]
pub struct ResidualWindow {
    fifo: VecDeque<f32>,
    sorted: Vec<f32>,
}

impl ResidualWindow {
    pub fn len(&self) -> usize {
        self.fifo.len()
    }

    pub fn is_empty(&self) -> bool {
        self.fifo.is_empty()
    }

    /// Add `r`, dropping the oldest residual when the window is full.
    pub fn push(&mut self, r: f32) {
        if self.fifo.len() == RESIDUAL_WINDOW {
            if let Some(old) = self.fifo.pop_front() {
                // Present: every value in `fifo` is in `sorted`, equal under total_cmp.
                if let Ok(i) = self.sorted.binary_search_by(|x| x.total_cmp(&old)) {
                    self.sorted.remove(i);
                }
            }
        }
        self.fifo.push_back(r);
        let at = self.sorted.partition_point(|x| x.total_cmp(&r).is_lt());
        self.sorted.insert(at, r);
    }

    pub fn clear(&mut self) {
        self.fifo.clear();
        self.sorted.clear();
    }

    /// The middle residual in order of size (0 when empty).
    pub fn median(&self) -> f32 {
        self.sorted
            .get(self.sorted.len() / 2)
            .copied()
            .unwrap_or(0.0)
    }
}

/// The TDOA noise estimate never exceeds this many samples: beyond it a track is lost, not noisy.
pub const SIGMA_CEILING_SAMPLES: f32 = 2.0;

/// The noise to assume (s): 1.4826 × the median residual (a robust standard deviation, once
/// there are 16 residuals), between `floor_s` and the ceiling at `sample_rate_hz`.
pub fn tdoa_noise_s(residuals: &ResidualWindow, floor_s: f32, sample_rate_hz: f64) -> f32 {
    if residuals.len() < 16 {
        return floor_s;
    }
    let ceiling = SIGMA_CEILING_SAMPLES / sample_rate_hz as f32;
    (1.4826 * residuals.median()).clamp(floor_s, ceiling.max(floor_s))
}

/// A confirmed track's hit: per informative pair of the frame `peaks` read, the distance from
/// the track's updated TDOA (`post`, its gates at the new estimate) to the nearest peak within
/// 6 σ (or 3 spreads), into `residuals`. Only confirmed tracks' hits teach the noise, so that a
/// track losing its source cannot widen it to suit itself.
pub fn learn_from_hit(
    residuals: &mut ResidualWindow,
    peaks: &PeaksModel,
    post: &Gates,
    sigma_s: f32,
) {
    for pi in 0..peaks.pairs().len() {
        if !peaks.informative(pi) {
            continue;
        }
        let wide = (6.0 * sigma_s).max(3.0 * post.spread_s[pi]);
        if let Some(r) = peaks.nearest_within(pi, post.predicted_s[pi], wide) {
            residuals.push(r);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The window's median is the value a selection over the last RESIDUAL_WINDOW residuals
    /// gives, bit for bit, through fills, evictions, repeated values and clears.
    #[test]
    fn residual_window_median_matches_a_selection() {
        let mut rng =
            crate::rng::philox::PhiloxStream::new(11, 0, crate::rng::philox::Stream::Simulate);
        let mut next = || (u64::from(rng.next_u32()) << 32) | u64::from(rng.next_u32());
        let mut w = ResidualWindow::default();
        let mut all: Vec<f32> = Vec::new();
        for i in 0..3000 {
            if i == 1700 {
                w.clear();
                all.clear();
            }
            let x = next();
            // Coarse values (many repeats), fine values, and now and then an infinity or NaN.
            let r = match x % 50 {
                0 => f32::INFINITY,
                1 => f32::NAN,
                k if k < 25 => (x >> 40) as f32 % 7.0 * 1e-5,
                _ => (x >> 40) as f32 * 1e-12,
            };
            w.push(r);
            all.push(r);
            let last = &all[all.len().saturating_sub(RESIDUAL_WINDOW)..];
            assert_eq!(w.len(), last.len());
            let mut v = last.to_vec();
            let mid = v.len() / 2;
            let (_, m, _) = v.select_nth_unstable_by(mid, f32::total_cmp);
            assert_eq!(w.median().to_bits(), m.to_bits(), "residual {i}");
        }
    }
}
