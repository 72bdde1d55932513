//! The seed's infrared scenario (digest B2.1, B2.2): a point target blurred by a Gaussian
//! point-spread function on a grid of cells in white Gaussian noise, with an unknown intensity.
//! It is the reproduction that checks the Bernoulli filter against the digest's re-simulated
//! reference curves; the acoustic model (GCC curves) goes through the very same filter.
//!
//! State `[x, ẋ, y, ẏ, I]`; cell (i, j) (0-based) has its centre at ((i + 1)Δ, (j + 1)Δ).

use crate::rng::philox::{PhiloxStream, Stream, normals6, uniform, uniforms6};
use crate::track::filter::bernoulli::{CellModel, DrawKey, TopCells};

/// The image model, the motion model and the birth proposal.
#[derive(Debug, Clone, PartialEq)]
pub struct IrModel {
    /// Cells along x and y.
    pub nx: usize,
    pub ny: usize,
    /// Cell size.
    pub delta: f64,
    /// Point-spread (blur) standard deviation Σ.
    pub blur: f64,
    /// Noise standard deviation σ per cell.
    pub sigma: f64,
    /// Frame interval T.
    pub t: f64,
    /// Acceleration-noise level q₁ and intensity-noise level q₂.
    pub q1: f64,
    pub q2: f64,
    /// The likelihood-ratio area: cells within this many of the nearest one (2 → 5 × 5).
    pub area_half: usize,
    /// Birth proposal: the `top_k` strongest cells…
    pub top_k: usize,
    /// …mixed with this share of the uniform birth prior, so the proposal covers all the prior
    /// does (a proposal on the top cells alone never draws the rest, and its weights then
    /// estimate only part of the birth integral: `top_cells_alone_miss_part_of_the_integral`).
    pub uniform_share: f64,
    /// Birth prior: each velocity component uniform on ±`v_max`, intensity uniform on `i_range`.
    pub v_max: f64,
    pub i_range: (f64, f64),
}

impl IrModel {
    /// The digest's re-simulation set-up ([C] in B3): 20 × 20 cells, Δ = 1, Σ = 0.7, T = 1,
    /// q₁ = 0.001, q₂ = 0.01, a 5 × 5 area, births from the 20 strongest cells with velocity
    /// on ±1 and intensity on [10, 30], and the noise that gives a peak-cell SNR of `snr_db`
    /// for intensity 20.
    pub fn reference(snr_db: f64) -> Self {
        let mut m = Self {
            nx: 20,
            ny: 20,
            delta: 1.0,
            blur: 0.7,
            sigma: 1.0,
            t: 1.0,
            q1: 0.001,
            q2: 0.01,
            area_half: 2,
            top_k: 20,
            uniform_share: 0.0,
            v_max: 1.0,
            i_range: (10.0, 30.0),
        };
        m.sigma = m.peak(20.0) / 10f64.powf(snr_db / 20.0);
        m
    }

    /// The cell value at a target's own cell centre: Δ² I / (2π Σ²). The SNR is this over σ
    /// (peak-cell SNR, B2.2: with I = 20, 3 dB means σ = 4.60).
    pub fn peak(&self, intensity: f64) -> f64 {
        self.delta * self.delta * intensity / (std::f64::consts::TAU * self.blur * self.blur)
    }

    pub fn cells(&self) -> usize {
        self.nx * self.ny
    }

    /// Cell centre along one axis.
    fn centre(&self, i: usize) -> f64 {
        (i + 1) as f64 * self.delta
    }

    /// h at cell (i, j) for a target at (x, y) with intensity `a`.
    pub fn h(&self, i: usize, j: usize, x: f64, y: f64, a: f64) -> f64 {
        let (dx, dy) = (self.centre(i) - x, self.centre(j) - y);
        self.peak(a) * (-(dx * dx + dy * dy) / (2.0 * self.blur * self.blur)).exp()
    }

    /// The nearest cell's index along an axis of `n` cells, clamped into the grid.
    fn nearest(&self, v: f64, n: usize) -> usize {
        let k = (v / self.delta).round() - 1.0;
        if k.is_nan() || k < 0.0 {
            0
        } else {
            (k as usize).min(n - 1)
        }
    }

    /// The cells of a state's likelihood-ratio area: index ranges along x and y.
    fn area(&self, x: f64, y: f64) -> (std::ops::Range<usize>, std::ops::Range<usize>) {
        let (i, j, r) = (
            self.nearest(x, self.nx),
            self.nearest(y, self.ny),
            self.area_half,
        );
        (
            i.saturating_sub(r)..(i + r + 1).min(self.nx),
            j.saturating_sub(r)..(j + r + 1).min(self.ny),
        )
    }

    /// Draws one frame: h(X) over the whole grid when a target is present, plus white noise.
    pub fn frame(&self, target: Option<&[f64; 5]>, noise: &mut PhiloxStream) -> IrFrame {
        let mut z = Vec::with_capacity(self.cells());
        for j in 0..self.ny {
            for i in 0..self.nx {
                let s = target.map_or(0.0, |x| self.h(i, j, x[0], x[2], x[4]));
                z.push(s + self.sigma * noise.normal_f64());
            }
        }
        IrFrame { z }
    }

    /// The motion model's step for a state, with five standard normals.
    fn move_state(&self, x: &mut [f64], n: [f64; 5]) {
        let t = self.t;
        // Cholesky factor of Q1 = [[T³/3, T²/2], [T²/2, T]].
        let l11 = (t * t * t / 3.0).sqrt();
        let l21 = t * t / 2.0 / l11;
        let l22 = (t - l21 * l21).max(0.0).sqrt();
        let sq = self.q1.sqrt();
        for (axis, (a, b)) in [(0, (n[0], n[1])), (2, (n[2], n[3]))] {
            x[axis] += t * x[axis + 1] + sq * l11 * a;
            x[axis + 1] += sq * (l21 * a + l22 * b);
        }
        x[4] += (self.q2 * t).sqrt() * n[4];
    }

    /// The truth of one target over `frames` frames: present from `appear` to `vanish`
    /// (inclusive), starting at `x0` and moving by the motion model.
    pub fn truth(
        &self,
        x0: [f64; 5],
        frames: usize,
        appear: usize,
        vanish: usize,
        noise: &mut PhiloxStream,
    ) -> Vec<Option<[f64; 5]>> {
        let mut x = x0;
        (0..frames)
            .map(|k| {
                if k < appear || k > vanish {
                    return None;
                }
                if k > appear {
                    let n = [(); 5].map(|_| noise.normal_f64());
                    self.move_state(&mut x, n);
                }
                Some(x)
            })
            .collect()
    }
}

/// One image, `ny` rows of `nx` cells.
#[derive(Debug, Clone, PartialEq)]
pub struct IrFrame {
    pub z: Vec<f64>,
}

impl CellModel for IrModel {
    type Frame = IrFrame;
    type Proposal = TopCells;

    fn dim(&self) -> usize {
        5
    }

    /// Λ = Σ over the area of h (2z − h) / (2σ²) (B2.2, log form).
    fn log_lr(&self, frame: &IrFrame, x: &[f64]) -> f64 {
        let (xs, ys) = self.area(x[0], x[2]);
        let k = 1.0 / (2.0 * self.sigma * self.sigma);
        let mut sum = 0.0;
        for j in ys {
            for i in xs.clone() {
                let h = self.h(i, j, x[0], x[2], x[4]);
                sum += h * (2.0 * frame.z[j * self.nx + i] - h);
            }
        }
        sum * k
    }

    fn proposal(&self, frame: &IrFrame) -> TopCells {
        TopCells::of(&frame.z, self.top_k)
    }

    /// A cell from the mixture (uniform share over all cells, the rest over the top cells), a
    /// uniform position inside it, velocity and intensity from the prior. p_b / q_b is the
    /// ratio of the cell's probabilities.
    fn draw_birth(&self, prop: &TopCells, key: DrawKey, x: &mut [f64]) -> f64 {
        let u = uniforms6(key.words(Stream::InitPosition)).map(f64::from);
        let ui = f64::from(uniform(key.words(Stream::InitVelocity)[0]));
        let n = self.cells();
        let pick = |len: usize, v: f64| ((v * len as f64) as usize).min(len - 1);
        let cell = if u[0] < self.uniform_share || prop.cells.is_empty() {
            pick(n, u[1])
        } else {
            prop.cells[pick(prop.cells.len(), u[1])]
        };
        let (i, j) = (cell % self.nx, cell / self.nx);
        x[0] = self.centre(i) + (u[2] - 0.5) * self.delta;
        x[2] = self.centre(j) + (u[3] - 0.5) * self.delta;
        x[1] = (2.0 * u[4] - 1.0) * self.v_max;
        x[3] = (2.0 * u[5] - 1.0) * self.v_max;
        x[4] = self.i_range.0 + ui * (self.i_range.1 - self.i_range.0);
        let top = if prop.is_top.get(cell).copied().unwrap_or(false) {
            (1.0 - self.uniform_share) / prop.cells.len().max(1) as f64
        } else {
            0.0
        };
        let q = self.uniform_share / n as f64 + top;
        (1.0 / n as f64 / q).ln()
    }

    fn propagate(&self, key: DrawKey, x: &mut [f64]) {
        let g = normals6(key.words(Stream::Predict));
        self.move_state(x, [0, 1, 2, 3, 4].map(|k| f64::from(g[k])));
    }
}

#[cfg(test)]
#[path = "infrared_tests.rs"]
mod tests;
