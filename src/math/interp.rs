//! Band-limited interpolation with a Kaiser-windowed sinc: reading a sampled signal between its
//! samples. Used to refine GCC peaks to a fraction of a sample and, with a longer kernel, by the
//! simulator to apply exact fractional propagation delays.

/// Zeroth-order modified Bessel function of the first kind (power series; converges fast for the
/// arguments a Kaiser window uses).
pub fn bessel_i0(x: f64) -> f64 {
    let mut sum = 1.0;
    let mut term = 1.0;
    let q = x * x / 4.0;
    for k in 1..64 {
        term *= q / (k as f64 * k as f64);
        sum += term;
        if term < sum * 1e-17 {
            break;
        }
    }
    sum
}

/// A Kaiser-windowed sinc kernel of half-width `half_width` samples.
#[derive(Debug, Clone)]
pub struct SincKernel {
    pub half_width: usize,
    beta: f64,
    inv_i0_beta: f64,
}

impl SincKernel {
    /// `half_width` taps each side; `beta` sets the Kaiser window (8 gives about -80 dB sidelobes).
    pub fn new(half_width: usize, beta: f64) -> Self {
        Self {
            half_width,
            beta,
            inv_i0_beta: 1.0 / bessel_i0(beta),
        }
    }

    /// The kernel at offset `x` (samples).
    #[inline]
    pub fn at(&self, x: f64) -> f64 {
        let m = self.half_width as f64;
        if x.abs() >= m {
            return 0.0;
        }
        let r = x / m;
        let w = bessel_i0(self.beta * (1.0 - r * r).max(0.0).sqrt()) * self.inv_i0_beta;
        let s = if x.abs() < 1e-12 {
            1.0
        } else {
            let px = std::f64::consts::PI * x;
            px.sin() / px
        };
        s * w
    }

    /// The signal `s` at fractional index `t`; samples outside `s` count as zero.
    pub fn interpolate(&self, s: &[f32], t: f64) -> f64 {
        let m = self.half_width as i64;
        let i0 = t.floor() as i64;
        let mut acc = 0.0;
        for j in (i0 - m + 1)..=(i0 + m) {
            if j < 0 || j as usize >= s.len() {
                continue;
            }
            acc += f64::from(s[j as usize]) * self.at(t - j as f64);
        }
        acc
    }
}

/// A kernel sampled at a fixed set of fractional offsets, for fast repeated use: `taps(phase)`
/// gives the 2·half_width weights for fractional part `phase / phases`.
#[derive(Debug, Clone)]
pub struct SincTable {
    pub half_width: usize,
    pub phases: usize,
    table: Vec<f32>,
}

impl SincTable {
    pub fn new(kernel: &SincKernel, phases: usize) -> Self {
        let m = kernel.half_width;
        let mut table = Vec::with_capacity((phases + 1) * 2 * m);
        for p in 0..=phases {
            let frac = p as f64 / phases as f64;
            // Weight for sample (i0 - m + 1 + k) when t = i0 + frac.
            for k in 0..2 * m {
                let j = k as f64 - m as f64 + 1.0;
                table.push(kernel.at(frac - j) as f32);
            }
        }
        Self {
            half_width: m,
            phases,
            table,
        }
    }

    /// The whole table: (phases + 1) rows of 2·half_width taps (uploaded to the GPU as is).
    pub fn data(&self) -> &[f32] {
        &self.table
    }

    /// Taps for fractional part `frac` in [0, 1], nearest tabulated phase.
    #[inline]
    pub fn taps(&self, frac: f64) -> &[f32] {
        let p = ((frac * self.phases as f64).round() as usize).min(self.phases);
        let w = 2 * self.half_width;
        &self.table[p * w..(p + 1) * w]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn i0_known_values() {
        assert!((bessel_i0(0.0) - 1.0).abs() < 1e-15);
        assert!((bessel_i0(1.0) - 1.266_065_877_752_008_4).abs() < 1e-12);
        assert!((bessel_i0(8.0) - 427.564_115_721_804_7).abs() < 1e-8);
    }

    #[test]
    fn kernel_interpolates_samples_exactly() {
        let k = SincKernel::new(8, 8.0);
        let s: Vec<f32> = (0..64).map(|i| (i as f32 * 0.37).sin()).collect();
        for i in 10..50 {
            assert!((k.interpolate(&s, i as f64) - f64::from(s[i])).abs() < 1e-6);
        }
    }

    #[test]
    fn kernel_reproduces_a_band_limited_sine_between_samples() {
        let k = SincKernel::new(16, 8.0);
        let f = 0.31; // cycles per sample, well inside the band
        let s: Vec<f32> = (0..200)
            .map(|i| (std::f64::consts::TAU * f * i as f64).sin() as f32)
            .collect();
        for i in 0..50 {
            let t = 60.0 + i as f64 * 1.37;
            let want = (std::f64::consts::TAU * f * t).sin();
            assert!((k.interpolate(&s, t) - want).abs() < 2e-3, "t={t}");
        }
    }

    #[test]
    fn table_matches_kernel() {
        let k = SincKernel::new(4, 6.0);
        let t = SincTable::new(&k, 64);
        let taps = t.taps(0.25);
        for (idx, w) in taps.iter().enumerate() {
            let j = idx as f64 - 3.0;
            assert!((f64::from(*w) - k.at(0.25 - j)).abs() < 1e-6);
        }
    }
}
