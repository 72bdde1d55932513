//! The seed's radar scenario (digest B2.3): a range–Doppler power map whose cells hold
//! z = |A h_A(X) + n|², A of known power P and random phase (Swerling 0), n complex Gaussian
//! with σ_n² per component. Its per-cell likelihood ratio is Rician,
//! l = exp(−P h²/2σ_n²) I₀(h √(P z)/σ_n²), with ln I₀ computed without overflow. The map has one
//! bearing cell, so the bearing term drops out. It goes through the same Bernoulli filter as
//! the infrared and acoustic models (B-10).
//!
//! State `[x, ẋ, y, ẏ]` (km, km/s); range r = |(x, y)|, Doppler d = (x ẋ + y ẏ)/r.

use crate::rng::philox::{PhiloxStream, Stream, normals6, uniforms6};
use crate::track::filter::bernoulli::{CellModel, DrawKey, TopCells};

/// The power map, the motion model and the birth proposal.
#[derive(Debug, Clone, PartialEq)]
pub struct RadarModel {
    /// Range cells from `r0` (km) every `cell_r`; Doppler cells from `d0` (km/s) every `cell_d`.
    pub nr: usize,
    pub nd: usize,
    pub r0: f64,
    pub cell_r: f64,
    pub d0: f64,
    pub cell_d: f64,
    /// Power-loss constants of the blur in range and Doppler.
    pub loss_r: f64,
    pub loss_d: f64,
    /// Noise standard deviation per component, and the target's power P.
    pub sigma: f64,
    pub power: f64,
    /// Frame interval and the acceleration bounds per axis (km/s²).
    pub t: f64,
    pub a_max: f64,
    /// Cells within this many of the nearest one in range and Doppler form the ratio's area.
    pub area_half: usize,
    /// Birth proposal: the `top_k` strongest cells, mixed with `uniform_share` of the prior.
    pub top_k: usize,
    pub uniform_share: f64,
    /// Birth prior: x, ẋ, y, ẏ uniform on these ranges.
    pub prior: [(f64, f64); 4],
}

impl RadarModel {
    /// A 50 × 16 map (the digest's cell counts) over 80-90 km and ±0.4 km/s, a target of
    /// `snr_db` (P / 2σ_n², the peak cell's power SNR), and the digest's particle prior.
    pub fn reference(snr_db: f64) -> Self {
        let sigma = 1.0;
        Self {
            nr: 50,
            nd: 16,
            r0: 80.0,
            cell_r: 0.2,
            d0: -0.4,
            cell_d: 0.05,
            loss_r: 1.0,
            loss_d: 1.0,
            sigma,
            power: 2.0 * sigma * sigma * 10f64.powf(snr_db / 10.0),
            t: 1.0,
            a_max: 0.001,
            area_half: 2,
            top_k: 20,
            uniform_share: 0.25,
            prior: [(85.0, 90.0), (-0.22, -0.10), (-0.1, 0.1), (-0.10, 0.10)],
        }
    }

    pub fn cells(&self) -> usize {
        self.nr * self.nd
    }

    /// Range and Doppler of a state.
    pub fn range_doppler(x: &[f64]) -> (f64, f64) {
        let r = (x[0] * x[0] + x[2] * x[2]).sqrt();
        let d = if r > 0.0 {
            (x[0] * x[1] + x[2] * x[3]) / r
        } else {
            0.0
        };
        (r, d)
    }

    /// The blur h_A at cell (i, j) for range r and Doppler d.
    pub fn h(&self, i: usize, j: usize, r: f64, d: f64) -> f64 {
        let dr = self.r0 + (i as f64 + 0.5) * self.cell_r - r;
        let dd = self.d0 + (j as f64 + 0.5) * self.cell_d - d;
        (-dr * dr * self.loss_r / (2.0 * self.cell_r * self.cell_r)
            - dd * dd * self.loss_d / (2.0 * self.cell_d * self.cell_d))
            .exp()
    }

    /// The nearest cell's index of `v` on an axis of `n` cells from `v0` every `size`, clamped.
    fn nearest(v: f64, v0: f64, size: f64, n: usize) -> usize {
        let k = ((v - v0) / size).floor();
        if k.is_nan() || k < 0.0 {
            0
        } else {
            (k as usize).min(n - 1)
        }
    }

    /// The per-cell log-likelihood ratio of power z where the target's blur is h (Rician).
    pub fn cell_log_lr(&self, z: f64, h: f64) -> f64 {
        let s2 = self.sigma * self.sigma;
        -self.power * h * h / (2.0 * s2) + ln_i0(h * (self.power * z.max(0.0)).sqrt() / s2)
    }

    /// One frame: each cell's power, with the target (range and Doppler) where given.
    pub fn frame(&self, target: Option<&[f64; 4]>, noise: &mut PhiloxStream) -> RadarFrame {
        let a = self.power.sqrt();
        let rd = target.map(|x| Self::range_doppler(x));
        let mut z = Vec::with_capacity(self.cells());
        for j in 0..self.nd {
            for i in 0..self.nr {
                let phase = std::f64::consts::TAU * noise.uniform_f64();
                let s = rd.map_or(0.0, |(r, d)| a * self.h(i, j, r, d));
                let re = s * phase.cos() + self.sigma * noise.normal_f64();
                let im = s * phase.sin() + self.sigma * noise.normal_f64();
                z.push(re * re + im * im);
            }
        }
        RadarFrame { z }
    }

    /// The motion model's step for a state, with four standard normals (clipped to ±1 so that
    /// the acceleration stays within a_max).
    pub fn move_state(&self, x: &mut [f64], n: [f64; 4]) {
        let t = self.t;
        for (axis, v) in [(0, n[0]), (2, n[2])] {
            let a = self.a_max * v.clamp(-1.0, 1.0);
            x[axis] += t * x[axis + 1] + 0.5 * a * t * t;
            x[axis + 1] += a * t;
        }
    }
}

impl RadarModel {
    /// ln(p_b(x) / q_b(x)) for the birth proposal of `prop`: p_b is uniform over the prior's
    /// box; q_b mixes it (share s) with the top cells' branch, whose density at x is
    /// (x² / r²) / (K · cell_r · cell_d · Δy · Δẏ) where x's cell is one of the K top cells (the
    /// Jacobian of (r, d) against (x, ẋ) is x² / r²). −∞ outside the prior.
    fn log_prior_over_proposal(&self, prop: &TopCells, x: &[f64]) -> f64 {
        let in_prior = (0..4).all(|k| x[k] >= self.prior[k].0 && x[k] <= self.prior[k].1);
        if !in_prior {
            return f64::NEG_INFINITY;
        }
        let width = |k: usize| self.prior[k].1 - self.prior[k].0;
        let pb = 1.0 / (0..4).map(width).product::<f64>();
        if prop.cells.is_empty() {
            return 0.0;
        }
        let (r, d) = Self::range_doppler(x);
        let i = Self::nearest(r, self.r0, self.cell_r, self.nr);
        let j = Self::nearest(d, self.d0, self.cell_d, self.nd);
        let inside = r >= self.r0
            && r < self.r0 + self.nr as f64 * self.cell_r
            && d >= self.d0
            && d < self.d0 + self.nd as f64 * self.cell_d;
        let top = inside && prop.is_top.get(j * self.nr + i).copied().unwrap_or(false);
        let g = if top && r > 0.0 {
            (x[0] * x[0] / (r * r))
                / (prop.cells.len() as f64 * self.cell_r * self.cell_d * width(2) * width(3))
        } else {
            0.0
        };
        let s = self.uniform_share;
        (pb / (s * pb + (1.0 - s) * g)).ln()
    }
}

/// One power map, `nd` rows of `nr` cells.
#[derive(Debug, Clone, PartialEq)]
pub struct RadarFrame {
    pub z: Vec<f64>,
}

/// ln I₀(x) for x ≥ 0: the power series below 15 (its terms (x²/4)^k / (k!)² all positive),
/// the asymptotic series e^x / √(2πx) · Σ ((2k − 1)!!)² / (k! 8^k x^k) above, summed while its
/// terms fall; relative error about 1e-15 on both sides.
pub fn ln_i0(x: f64) -> f64 {
    let x = x.abs();
    if x.is_nan() {
        return x;
    }
    if x < 15.0 {
        let q = x * x / 4.0;
        let (mut term, mut sum) = (1.0f64, 1.0f64);
        let mut k = 1.0;
        while term > sum * 1e-17 {
            term *= q / (k * k);
            sum += term;
            k += 1.0;
        }
        sum.ln()
    } else {
        let (mut term, mut sum) = (1.0f64, 1.0f64);
        for k in 1..30 {
            let k = f64::from(k);
            let next = term * (2.0 * k - 1.0) * (2.0 * k - 1.0) / (k * 8.0 * x);
            if next >= term || next < sum * 1e-17 {
                break;
            }
            term = next;
            sum += term;
        }
        x - 0.5 * (std::f64::consts::TAU * x).ln() + sum.ln()
    }
}

impl CellModel for RadarModel {
    type Frame = RadarFrame;
    type Proposal = TopCells;

    fn dim(&self) -> usize {
        4
    }

    /// Σ over the area of the per-cell Rician log-ratio.
    fn log_lr(&self, frame: &RadarFrame, x: &[f64]) -> f64 {
        let (r, d) = Self::range_doppler(x);
        let i = Self::nearest(r, self.r0, self.cell_r, self.nr);
        let j = Self::nearest(d, self.d0, self.cell_d, self.nd);
        let w = self.area_half;
        let mut sum = 0.0;
        for jj in j.saturating_sub(w)..(j + w + 1).min(self.nd) {
            for ii in i.saturating_sub(w)..(i + w + 1).min(self.nr) {
                sum += self.cell_log_lr(frame.z[jj * self.nr + ii], self.h(ii, jj, r, d));
            }
        }
        sum
    }

    fn proposal(&self, frame: &RadarFrame) -> TopCells {
        TopCells::of(&frame.z, self.top_k)
    }

    /// With the uniform share, a state from the prior; otherwise a top cell's range and
    /// Doppler, a bearing within the prior's cross-range, and the prior's cross-range speed;
    /// returns ln(p_b / q_b) ([`Self::log_prior_over_proposal`]).
    fn draw_birth(&self, prop: &TopCells, key: DrawKey, x: &mut [f64]) -> f64 {
        let u = uniforms6(key.words(Stream::InitPosition)).map(f64::from);
        let v = uniforms6(key.words(Stream::InitVelocity)).map(f64::from);
        let lerp = |(a, b): (f64, f64), t: f64| a + t * (b - a);
        if u[0] < self.uniform_share || prop.cells.is_empty() {
            for k in 0..4 {
                x[k] = lerp(self.prior[k], u[1 + k]);
            }
        } else {
            let c =
                prop.cells[((u[1] * prop.cells.len() as f64) as usize).min(prop.cells.len() - 1)];
            let (i, j) = (c % self.nr, c / self.nr);
            let r = self.r0 + (i as f64 + u[2]) * self.cell_r;
            let d = self.d0 + (j as f64 + u[3]) * self.cell_d;
            let y = lerp(self.prior[2], u[4]);
            let vy = lerp(self.prior[3], v[0]);
            let xx = (r * r - y * y).max(0.0).sqrt();
            x[0] = xx;
            x[2] = y;
            x[3] = vy;
            // ẋ from the Doppler: d r = x ẋ + y ẏ.
            x[1] = if xx > 0.0 { (d * r - y * vy) / xx } else { 0.0 };
        }
        self.log_prior_over_proposal(prop, x)
    }

    fn propagate(&self, key: DrawKey, x: &mut [f64]) {
        let g = normals6(key.words(Stream::Predict));
        self.move_state(x, [0, 1, 2, 3].map(|k| f64::from(g[k])));
    }
}

#[cfg(test)]
#[path = "radar_tests.rs"]
mod tests;
