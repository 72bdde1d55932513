//! The TDOA measurement of the Kalman bank's extended filter, in range-difference metres (the
//! TDOA times the speed of sound): pair (a, b) measures |p − s_a| − |p − s_b| of a 6-state
//! constant-velocity filter's position p. The bank linearises it at each filter's current state
//! and updates with one pair at a time (scalar Joseph updates, re-linearised after each: for
//! independent pair noises the same as one joint update, and no solve larger than 1×1). The GPU
//! kernel (`kernels/kf.cu`, `kf_tdoa_row`) does the same operations in the same order.

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
