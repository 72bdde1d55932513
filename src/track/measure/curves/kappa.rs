//! κ(δ), the GCC-PHAT curve of a pure delay in the band (normalised to 1 at δ = 0): the table
//! the curves model, its bank and the bank's lobe tables read it from, and its main lobe's
//! half-width.

use crate::dsp::gcc::GccParams;

/// Samples of κ per lag in its table.
pub(crate) const KAPPA_STEPS: usize = 32;

/// κ(δ) = Σ t_k cos(2π k δ / N) / Σ t_k over the band's bins (the PHAT curve of a pure delay,
/// normalised to 1 at δ = 0), tabulated every 1/KAPPA_STEPS lag out to its first zero plus
/// two lags (at most 64 lags).
pub(crate) fn kappa_table(g: &GccParams) -> Vec<f64> {
    let (lo, hi) = g.band_bins;
    let n = g.fft_len as f64;
    let t: Vec<(f64, f64)> = (lo..=hi)
        .map(|k| {
            (
                k as f64,
                f64::from(g.band_taper.get(k).copied().unwrap_or(0.0)),
            )
        })
        .collect();
    let total: f64 = t.iter().map(|x| x.1).sum::<f64>().max(1e-12);
    let mut out = Vec::new();
    let mut zero_at = None;
    for i in 0..64 * KAPPA_STEPS {
        let d = i as f64 / KAPPA_STEPS as f64;
        let v: f64 = t
            .iter()
            .map(|&(k, w)| w * (std::f64::consts::TAU * k * d / n).cos())
            .sum::<f64>()
            / total;
        out.push(v);
        if zero_at.is_none() && v <= 0.0 {
            zero_at = Some(i);
        }
        if zero_at.is_some_and(|z| i >= z + 2 * KAPPA_STEPS) {
            break;
        }
    }
    out
}

/// The main lobe's half-width: the first whole lag where κ has fallen to zero (1 to 16).
pub(crate) fn lobe_half_width(kappa: &[f64]) -> usize {
    let first = kappa.iter().position(|&v| v <= 0.0).unwrap_or(kappa.len());
    (first.div_ceil(KAPPA_STEPS)).clamp(1, 16)
}
