//! How much of a frame's power is one source's: the coherence between two channels read from
//! the height of a GCC-PHAT peak.
//!
//! PHAT weighting turns each frequency bin of the cross-spectrum into a unit phasor. Where the
//! channels share a component of coherence γ (signal power over total power, equal in both
//! channels) and the rest is independent Gaussian noise, the phasor's mean is
//! g(γ) = (π/4) γ ₂F₁(½, ½; 2; γ²) (the mean resultant length of the phase of a complex
//! Gaussian pair, e.g. Carter, "Coherence and time delay estimation", 1987): 0.406 at γ = ½, 1 at
//! γ = 1. The peak of the normalised curve is that mean, shrunk by the analysis window's overlap
//! with itself at the pair's delay (a delayed copy shares only part of the windowed frame).
//! Undoing both gives γ, and the source's received power is γ times the frame's power.

/// ₂F₁(½, ½; 2; x) for 0 <= x <= 1, by its series (terms fall as k^-2.5 at x = 1: 400 terms
/// leave an error below 1e-4 there, and far less below it).
fn hyp(x: f64) -> f64 {
    let mut term = 1.0;
    let mut sum = 1.0;
    for k in 0..400u32 {
        let k = f64::from(k);
        term *= (k + 0.5) * (k + 0.5) / ((k + 2.0) * (k + 1.0)) * x;
        sum += term;
        if term < 1e-12 {
            break;
        }
    }
    sum
}

/// The mean PHAT phasor g(γ) for a coherence γ in [0, 1] (increasing, g(0) = 0, g(1) = 1).
pub fn mean_phasor(gamma: f64) -> f64 {
    let g = gamma.clamp(0.0, 1.0);
    std::f64::consts::FRAC_PI_4 * g * hyp(g * g)
}

/// The coherence whose mean phasor is `rho` (inverse of [`mean_phasor`], by bisection).
pub fn coherence_of_phasor(rho: f64) -> f64 {
    let rho = rho.clamp(0.0, 1.0);
    let (mut lo, mut hi) = (0.0, 1.0);
    for _ in 0..40 {
        let mid = 0.5 * (lo + hi);
        if mean_phasor(mid) < rho {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    0.5 * (lo + hi)
}

/// The window's overlap with itself shifted by `lag` samples, relative to no shift.
pub fn window_overlap(window: &[f32], lag: f32) -> f64 {
    let n = window.len();
    let d = (lag.abs().round() as usize).min(n);
    let full: f64 = window.iter().map(|&w| f64::from(w) * f64::from(w)).sum();
    if !(full > 0.0) {
        return 0.0;
    }
    let shared: f64 = window[..n - d]
        .iter()
        .zip(&window[d..])
        .map(|(&a, &b)| f64::from(a) * f64::from(b))
        .sum();
    shared / full
}

/// [`window_overlap`] for every whole lag from 0 to `max_lag` samples, computed once (a frame's
/// peaks then look theirs up instead of summing the window each time).
pub fn overlap_table(window: &[f32], max_lag: usize) -> Vec<f64> {
    (0..=max_lag.min(window.len()))
        .map(|d| window_overlap(window, d as f32))
        .collect()
}

/// The coherence between a pair's channels from its PHAT peak of height `value` at `lag`
/// samples, with the analysis window's [`overlap_table`] (None where the window leaves nothing
/// at that lag, or the lag is beyond the table).
pub fn coherence_of_peak(value: f32, lag: f32, overlap: &[f64]) -> Option<f64> {
    let o = *overlap.get(lag.abs().round() as usize)?;
    (o > 0.05).then(|| coherence_of_phasor(f64::from(value) / o))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mean_phasor_at_known_points() {
        assert_eq!(mean_phasor(0.0), 0.0);
        assert!(
            (mean_phasor(1.0) - 1.0).abs() < 2e-3,
            "{}",
            mean_phasor(1.0)
        );
        // (π/4)(½)(1 + 1/32 + 3/1024 + ...) = 0.4063
        assert!(
            (mean_phasor(0.5) - 0.4063).abs() < 1e-3,
            "{}",
            mean_phasor(0.5)
        );
        for g in [0.05, 0.3, 0.7, 0.95] {
            assert!((coherence_of_phasor(mean_phasor(g)) - g).abs() < 1e-6);
        }
    }

    /// Simulated unit phasors of two channels sharing a component of coherence γ: their mean
    /// is g(γ).
    #[test]
    fn simulated_phasors_agree() {
        // (Philox counters as the seed of six normals per draw.)
        let mut ctr = 0u32;
        let mut six = || {
            ctr += 1;
            let w = crate::rng::philox::philox4x32_10([ctr, 0, 0, 0], [7, 11]);
            let v = crate::rng::philox::philox4x32_10([ctr, 1, 0, 0], [7, 11]);
            let a = crate::rng::philox::normals4(w);
            let b = crate::rng::philox::normals4(v);
            [a[0], a[1], a[2], a[3], b[0], b[1]].map(f64::from)
        };
        for gamma in [0.2f64, 0.5, 0.9] {
            let (a, b) = (gamma.sqrt(), (1.0 - gamma).sqrt());
            let n = 200_000;
            let mut sum = 0.0;
            for _ in 0..n {
                let d = six();
                let (s, n1, n2) = ((d[0], d[1]), (d[2], d[3]), (d[4], d[5]));
                let x = (a * s.0 + b * n1.0, a * s.1 + b * n1.1);
                let y = (a * s.0 + b * n2.0, a * s.1 + b * n2.1);
                // Re(x y*) / |x y*|
                let re = x.0 * y.0 + x.1 * y.1;
                let im = x.1 * y.0 - x.0 * y.1;
                sum += re / re.hypot(im);
            }
            let got = sum / f64::from(n);
            assert!((got - mean_phasor(gamma)).abs() < 0.01, "γ {gamma}: {got}");
        }
    }

    #[test]
    fn the_window_overlap() {
        let rect = vec![1.0f32; 100];
        assert!((window_overlap(&rect, 25.0) - 0.75).abs() < 1e-12);
        assert_eq!(window_overlap(&rect, -100.0), 0.0);
        let table = overlap_table(&rect, 100);
        assert!((table[25] - 0.75).abs() < 1e-12);
        assert!(coherence_of_peak(0.5, 99.0, &table).is_none());
        assert!(coherence_of_peak(0.5, 101.0, &table).is_none());
        let g = coherence_of_peak(0.3, 0.0, &table).unwrap();
        assert!((mean_phasor(g) - 0.3).abs() < 1e-6);
    }
}
