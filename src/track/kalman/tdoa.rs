//! The TDOA measurement of the Kalman bank's extended filter, in range-difference metres (the
//! TDOA times the speed of sound): pair (a, b) measures |p − s_a| − |p − s_b| of a 6-state
//! constant-velocity filter's position p. The bank linearises it at each filter's current state
//! and updates with one pair at a time (scalar Joseph updates, re-linearised after each: for
//! independent pair noises the same as one joint update, and no solve larger than 1×1). The GPU
//! kernel (`kernels/kf.cu`, `kf_tdoa_row`) does the same operations in the same order. The
//! unscented filter's step ([`crate::track::kalman::unscented`]) takes the same geometry and
//! the sigma-point rule's parameters, [`Unscented`].

use crate::track::kalman::bank::BankError;

/// Most pairs one TDOA step takes (every pair of 16 sensors).
pub const MAX_TDOA_PAIRS: usize = 120;

/// The sensors, the pairs and the measurement noise of a TDOA bank step.
#[derive(Debug, Clone, PartialEq)]
pub struct TdoaGeometry {
    /// Sensor positions, metres.
    pub sensors: Vec<[f32; 3]>,
    /// Pairs (a, b): each measures range to a less range to b.
    pub pairs: Vec<(u32, u32)>,
    /// Variance of one pair's range difference, m².
    pub r: f32,
}

impl TdoaGeometry {
    /// Check that the pairs name sensors, that there are 1 to [`MAX_TDOA_PAIRS`] of them, and
    /// that the positions and the noise are finite (the noise positive).
    pub fn check(&self) -> Result<(), BankError> {
        let s = self.sensors.len();
        if self.pairs.is_empty() || self.pairs.len() > MAX_TDOA_PAIRS {
            return Err(BankError::Model(format!(
                "{} TDOA pairs (use 1 to {MAX_TDOA_PAIRS})",
                self.pairs.len()
            )));
        }
        if let Some((a, b)) = self
            .pairs
            .iter()
            .find(|(a, b)| *a as usize >= s || *b as usize >= s || a == b)
        {
            return Err(BankError::Model(format!(
                "TDOA pair ({a}, {b}) of {s} sensors (use two different sensors below {s})"
            )));
        }
        if self.sensors.iter().flatten().any(|v| !v.is_finite()) {
            return Err(BankError::Model("a sensor position is not finite".into()));
        }
        if !(self.r > 0.0 && self.r.is_finite()) {
            return Err(BankError::Model(format!(
                "TDOA noise variance {} (use a positive value, m²)",
                self.r
            )));
        }
        Ok(())
    }

    /// Sensor positions as one array (x, y, z per sensor), the GPU's layout.
    pub fn packed_sensors(&self) -> Vec<f32> {
        self.sensors.iter().flatten().copied().collect()
    }

    /// Pairs as one array (a, b per pair), the GPU's layout.
    pub fn packed_pairs(&self) -> Vec<u32> {
        self.pairs.iter().flat_map(|(a, b)| [*a, *b]).collect()
    }
}

/// The scaled unscented transform's parameters (Julier; Wan and van der Merwe): sigma points
/// x ± γ·(column i of chol P) with γ² = n + λ and λ = α²(n + κ) − n; the centre point's weights
/// are λ/(n + λ) for the mean and that plus 1 − α² + β for the covariance, every other point's
/// 1/(2(n + λ)).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Unscented {
    /// Spread of the points about the mean (0 < α ≤ 1).
    pub alpha: f32,
    /// Prior knowledge of the distribution (2 is optimal for a Gaussian).
    pub beta: f32,
    /// Secondary scaling (n + κ > 0).
    pub kappa: f32,
}

impl Default for Unscented {
    /// α = 1, β = 2, κ = 0: the points at ±√n standard deviations, the centre point weighted
    /// 0 in the mean and 2 in the covariance.
    fn default() -> Self {
        Self {
            alpha: 1.0,
            beta: 2.0,
            kappa: 0.0,
        }
    }
}

/// An unscented transform's weights for an n-state filter (the GPU kernel's arguments).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct UtWeights {
    /// √(n + λ).
    pub gamma: f32,
    /// The centre point's mean weight.
    pub w0m: f32,
    /// The centre point's covariance weight.
    pub w0c: f32,
    /// Every other point's weight (mean and covariance).
    pub wi: f32,
}

impl Unscented {
    /// The weights for `n` states, or why the parameters cannot give them: α in (0, 1], β ≥ 0
    /// and n + κ > 0, all finite.
    pub fn weights(&self, n: usize) -> Result<UtWeights, BankError> {
        let (a, b, k) = (self.alpha, self.beta, self.kappa);
        let nf = n as f32;
        let valid = a > 0.0 && a <= 1.0 && b >= 0.0 && b.is_finite() && nf + k > 0.0;
        if !valid {
            return Err(BankError::Model(format!(
                "unscented transform alpha {a}, beta {b}, kappa {k} (use 0 < alpha <= 1, \
                 beta >= 0 and kappa > -{n})"
            )));
        }
        let spread = a * a * (nf + k);
        let lambda = spread - nf;
        Ok(UtWeights {
            gamma: spread.sqrt(),
            w0m: lambda / spread,
            w0c: lambda / spread + 1.0 - a * a + b,
            wi: 0.5 / spread,
        })
    }
}

/// Pair (a, b)'s range difference at state `x` and its row of the Jacobian (position part; the
/// velocity's is zero), into `h`.
pub fn linearise(sa: &[f32; 3], sb: &[f32; 3], x: &[f32], h: &mut [f32; 6]) -> f32 {
    let (dxa, dya, dza) = (x[0] - sa[0], x[1] - sa[1], x[2] - sa[2]);
    let (dxb, dyb, dzb) = (x[0] - sb[0], x[1] - sb[1], x[2] - sb[2]);
    let ra = (dxa * dxa + dya * dya + dza * dza).sqrt().max(1e-6);
    let rb = (dxb * dxb + dyb * dyb + dzb * dzb).sqrt().max(1e-6);
    h[0] = dxa / ra - dxb / rb;
    h[1] = dya / ra - dyb / rb;
    h[2] = dza / ra - dzb / rb;
    h[3] = 0.0;
    h[4] = 0.0;
    h[5] = 0.0;
    ra - rb
}
