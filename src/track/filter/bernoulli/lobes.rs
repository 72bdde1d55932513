//! The lobe tables of the curves bank: a pair's term read from two tables instead of summed over
//! the likelihood area's 2w + 1 lags.
//!
//! κ is tabulated every 1/KAPPA_STEPS lag and interpolated linearly, and the area's first and
//! last lags change only where d ± w crosses a whole lag. So between two neighbouring grid points
//! of d (1/KAPPA_STEPS lag apart) every κ(l − d) of the area is linear in d: the κ-weighted sum
//! of a curve, Σ κ(l − d) c(l), is linear there and Σ κ(l − d)² quadratic. Per interval of d the
//! tables hold these sums' values at the interval's two ends (the limits from inside it); a
//! particle's term interpolates them. In exact arithmetic that is the sum over the area's lags,
//! at every d off the grid; it differs only by rounding.
//!
//! The intervals cover d from −(curve_half + w) to curve_half + w, where the area still reaches
//! the curve; beyond, the area is empty. The CPU twin evaluates an entry where it needs it
//! ([`BankModel::lobe_num`], [`BankModel::lobe_den`]); the GPU tabulates the same entries each
//! frame (`kernels/tbd.cu`: tbd_lobes) and once (the κ² sums, which need no curve).

use super::bank::BankModel;
use crate::track::measure::curves::kappa::KAPPA_STEPS;

impl BankModel {
    /// How far (lags) either side of 0 the intervals reach: curve_half + w.
    pub fn lobe_reach(&self) -> u32 {
        self.curve_half + self.w
    }

    /// The number of intervals, 2 (curve_half + w) KAPPA_STEPS.
    pub fn lobe_intervals(&self) -> usize {
        2 * self.lobe_reach() as usize * KAPPA_STEPS
    }

    /// Interval j's lags of the area (first, last; first > last when none), from its midpoint
    /// in 1/(2 KAPPA_STEPS) lag units, in integers.
    fn lobe_lags(&self, j: usize) -> (i64, i64) {
        let half = 2 * KAPPA_STEPS as i64;
        let mid = 2 * j as i64 + 1 - half * i64::from(self.lobe_reach());
        let w = half * i64::from(self.w);
        let c = i64::from(self.curve_half);
        let first = (mid - w).div_euclid(half) + 1;
        let last = (mid + w).div_euclid(half);
        (first.max(-c), last.min(c))
    }

    /// κ(l − d) at interval j's two ends, for lag l of its area.
    fn lobe_ends(&self, j: usize, l: i64) -> (f32, f32) {
        // Grid steps from the interval's start to lag l.
        let s = KAPPA_STEPS as i64 * (l + i64::from(self.lobe_reach())) - j as i64;
        let len = self.kappa.len() as i64;
        let at = |i: i64| self.kappa[i as usize];
        if s > 0 {
            // l − d falls from s to s − 1 steps across the interval.
            if s < len {
                (at(s), at(s - 1))
            } else {
                (0.0, 0.0)
            }
        } else if 1 - s < len {
            // d − l rises from −s to 1 − s steps.
            (at(-s), at(1 - s))
        } else {
            (0.0, 0.0)
        }
    }

    /// Interval j's κ-weighted sums of `curve` at its two ends (one pair's entry of the table).
    pub fn lobe_num(&self, j: usize, curve: &[f32]) -> [f32; 2] {
        let (first, last) = self.lobe_lags(j);
        let (mut u, mut v) = (0.0f32, 0.0f32);
        for l in first..=last {
            let (a, b) = self.lobe_ends(j, l);
            let c = curve[(l + i64::from(self.curve_half)) as usize];
            u += a * c;
            v += b * c;
        }
        [u, v]
    }

    /// Interval j's sums of κ(l − d_start)², κ(l − d_start) κ(l − d_end) and κ(l − d_end)².
    pub fn lobe_den(&self, j: usize) -> [f32; 3] {
        let (first, last) = self.lobe_lags(j);
        let mut s = [0.0f32; 3];
        for l in first..=last {
            let (a, b) = self.lobe_ends(j, l);
            s[0] += a * a;
            s[1] += a * b;
            s[2] += b * b;
        }
        s
    }

    /// Every pair's entries for `curves` (pairs × intervals × 2), as the GPU tabulates them.
    pub fn lobe_table(&self, curves: &[f32]) -> Vec<f32> {
        let cl = self.curve_len();
        (0..self.pairs.len())
            .flat_map(|p| {
                let curve = &curves[p * cl..(p + 1) * cl];
                (0..self.lobe_intervals()).flat_map(move |j| self.lobe_num(j, curve))
            })
            .collect()
    }

    /// The κ² table of every interval, four values each (the fourth 0), for the GPU.
    pub fn lobe_den_table(&self) -> Vec<f32> {
        (0..self.lobe_intervals())
            .flat_map(|j| {
                let [a, b, c] = self.lobe_den(j);
                [a, b, c, 0.0]
            })
            .collect()
    }

    /// Where delay `d` falls: its interval and the fraction across it, or None beyond the
    /// intervals (an empty area). The fraction comes from d less its whole lags, which is
    /// exact, so it keeps the precision that l − d has in the sum over lags.
    pub fn lobe_at(&self, d: f32) -> Option<(usize, f32)> {
        let reach = self.lobe_reach() as f32;
        if !(d >= -reach && d < reach) {
            return None;
        }
        let whole = d.floor();
        let steps = (d - whole) * KAPPA_STEPS as f32;
        let k = steps.floor();
        let j = (whole + reach) as usize * KAPPA_STEPS + k as usize;
        (j < self.lobe_intervals()).then_some((j, steps - k))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::track::filter::bernoulli::bank::interpolate;
    use crate::track::measure::curves::testkit::{config, model};

    /// Interval entries against the area's direct sum at random d inside each interval:
    /// the same up to f32 rounding (a part in 10⁵ of the sums' scale), for areas of ±1 to ±15 lags and d up to beyond the curve.
    #[test]
    fn the_tables_give_the_area_sum() {
        let cfg = config();
        let mut r =
            crate::rng::philox::PhiloxStream::new(3, 0, crate::rng::philox::Stream::Simulate);
        for w in [1usize, 4, 9, 15] {
            let m = model(&cfg).with_area_half(w).packed(None);
            let curve: Vec<f32> = (0..m.curve_len()).map(|_| r.normal_f64() as f32).collect();
            let reach = m.lobe_reach() as f64;
            let mut worst = 0.0f64;
            for _ in 0..4000 {
                let d = ((r.uniform_f64() * 2.0 - 1.0) * (reach + 2.0)) as f32;
                let (u, k) = match m.lobe_at(d) {
                    Some((j, f)) => interpolate(m.lobe_num(j, &curve), m.lobe_den(j), f),
                    None => (0.0, 0.0),
                };
                let (du, dk) = direct(&m, &curve, d);
                let scale = dk.max(1e-3);
                let e = ((u - du).abs() / scale.sqrt()).max((k - dk).abs() / scale);
                worst = worst.max(f64::from(e));
            }
            eprintln!("area ±{w}: worst scaled difference {worst:.2e}");
            assert!(worst < 1e-5, "area ±{w}: {worst}");
        }
    }

    /// The area's sums at d lag by lag, in f64 (κ interpolated as the model does).
    fn direct(m: &BankModel, curve: &[f32], d: f32) -> (f32, f32) {
        let d = f64::from(d);
        let (c, w) = (f64::from(m.curve_half), f64::from(m.w));
        let first = (d - w).ceil().max(-c) as i64;
        let last = (d + w).floor().min(c) as i64;
        let (mut u, mut k) = (0.0f64, 0.0f64);
        for l in first..=last {
            let x = (l as f64 - d).abs() * KAPPA_STEPS as f64;
            let i = x as usize;
            let kap = if i + 1 >= m.kappa.len() {
                0.0
            } else {
                let f = x - i as f64;
                f64::from(m.kappa[i]) * (1.0 - f) + f64::from(m.kappa[i + 1]) * f
            };
            u += kap * f64::from(curve[(l + m.curve_half as i64) as usize]);
            k += kap * kap;
        }
        (u as f32, k as f32)
    }
}
