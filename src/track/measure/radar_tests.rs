use super::*;
use crate::track::filter::bernoulli::existence::Chain;
use crate::track::filter::bernoulli::filter::{BernoulliFilter, BernoulliParams};

/// ln I₀ against 30-digit values (mpmath, written to the digits an f64 holds) across both branches, up to x = 10⁴ where I₀ itself
/// overflows f64.
#[test]
#[allow(clippy::excessive_precision)] // the reference values as printed
fn ln_i0_matches_reference_values() {
    let cases = [
        (0.5, 0.061_549_719_185_481_304),
        (1.0, 0.235_914_358_507_178_65),
        (3.0, 1.585_307_621_813_420_9),
        (10.0, 7.942_972_083_118_695_6),
        (14.9, 12.639_073_730_400_434),
        (15.1, 12.832_287_538_686_563),
        (20.0, 17.589_610_428_244_274),
        (50.0, 47.127_575_501_871_805),
        (100.0, 96.779_732_689_942_584),
        (700.0, 695.805_699_998_443_45),
        (1e4, 9_994.475_903_781_432),
    ];
    for (x, want) in cases {
        let got = ln_i0(x);
        assert!(
            (got - want).abs() <= 1e-14 * want.abs().max(1.0),
            "ln I0({x}) = {got}, not {want}"
        );
    }
    assert_eq!(ln_i0(0.0), 0.0);
    assert_eq!(ln_i0(-3.0), ln_i0(3.0));
}

/// The Rician ratio is the ratio of the two power densities within 1e-9 (relative), for blurs
/// and powers where both densities are finite.
#[test]
fn the_ratio_is_the_ratio_of_the_densities() {
    let m = RadarModel::reference(3.0);
    let s2 = m.sigma * m.sigma;
    let i0 = |x: f64| {
        // Direct power series (every term positive) where I₀ is finite.
        let q = x * x / 4.0;
        let (mut t, mut s, mut k) = (1.0f64, 1.0f64, 1.0f64);
        while t > s * 1e-18 {
            t *= q / (k * k);
            s += t;
            k += 1.0;
        }
        s
    };
    for &h in &[0.0, 0.1, 0.5, 0.9, 1.0] {
        for &z in &[0.0, 0.3, 1.0, 4.0, 20.0, 80.0] {
            let noise = (-z / (2.0 * s2)).exp() / (2.0 * s2);
            let signal = (-(z + m.power * h * h) / (2.0 * s2)).exp() / (2.0 * s2)
                * i0(h * (m.power * z).sqrt() / s2);
            let want = signal / noise;
            let got = m.cell_log_lr(z, h).exp();
            assert!(
                (got - want).abs() <= 1e-9 * want,
                "h {h}, z {z}: {got} against {want}"
            );
        }
    }
}

/// The CDF of z / σ² for a cell whose mean amplitude is `a`: non-central χ² with two degrees of
/// freedom and λ = a² / σ² (a Poisson mixture of central χ² with 2 + 2j degrees).
fn noncentral_cdf(x: f64, lambda: f64) -> f64 {
    let (half_l, half_x) = (lambda / 2.0, x / 2.0);
    let mut total = 0.0;
    let mut poisson = (-half_l).exp();
    for j in 0..400 {
        // P(χ²_{2 + 2j} ≤ x) = 1 − e^{−x/2} Σ_{i ≤ j} (x/2)^i / i!
        let (mut term, mut tail) = ((-half_x).exp(), 0.0);
        for i in 0..=j {
            if i > 0 {
                term *= half_x / i as f64;
            }
            tail += term;
        }
        total += poisson * (1.0 - tail);
        poisson *= half_l / (j + 1) as f64;
        if poisson < 1e-18 && j as f64 > half_l {
            break;
        }
    }
    total
}

/// The Kolmogorov–Smirnov p-value of `sample` against `cdf` (the asymptotic distribution).
fn ks_p(sample: &mut [f64], cdf: impl Fn(f64) -> f64) -> f64 {
    sample.sort_by(f64::total_cmp);
    let n = sample.len() as f64;
    let d = sample
        .iter()
        .enumerate()
        .map(|(i, &v)| {
            let f = cdf(v);
            (f - i as f64 / n).abs().max(((i + 1) as f64 / n - f).abs())
        })
        .fold(0.0, f64::max);
    let t = (n.sqrt() + 0.12 + 0.11 / n.sqrt()) * d;
    let p: f64 = (1..100)
        .map(|k| {
            let k = f64::from(k);
            2.0 * (-1f64).powf(k - 1.0) * (-2.0 * k * k * t * t).exp()
        })
        .sum();
    p.clamp(0.0, 1.0)
}

/// B-10: noise cells' power is exponential (mean 2σ²) and a target cell's is non-central χ²:
/// Kolmogorov–Smirnov p > 0.01 for both, and the test rejects the wrong distribution.
#[test]
fn cell_powers_follow_their_distributions() {
    let m = RadarModel::reference(3.0);
    let mut noise = PhiloxStream::new(21, 0, Stream::Simulate);
    let s2 = m.sigma * m.sigma;
    // Noise: cells of 20 maps without a target.
    let mut z: Vec<f64> = (0..20).flat_map(|_| m.frame(None, &mut noise).z).collect();
    let p_noise = ks_p(&mut z, |v| 1.0 - (-v / (2.0 * s2)).exp());
    // The target's own cell, centred in it (h = 1), over 3,000 maps.
    let (i, j) = (20usize, 5usize);
    let r = m.r0 + (i as f64 + 0.5) * m.cell_r;
    let d = m.d0 + (j as f64 + 0.5) * m.cell_d;
    let target = [r, d, 0.0, 0.0];
    let mut zt: Vec<f64> = (0..3000)
        .map(|_| m.frame(Some(&target), &mut noise).z[j * m.nr + i] / s2)
        .collect();
    let lambda = m.power / s2;
    let p_target = ks_p(&mut zt, |v| noncentral_cdf(v, lambda));
    let p_wrong = ks_p(&mut zt, |v| 1.0 - (-v / 2.0).exp());
    eprintln!(
        "KS p: noise {p_noise:.3}, target {p_target:.3}, target against noise's law {p_wrong:.2e}"
    );
    assert!(p_noise > 0.01 && p_target > 0.01);
    assert!(p_wrong < 1e-6);
}

/// The radar model through the same Bernoulli filter: a 10 dB target in frames 7-21 of 30 is
/// detected (existence over 0.9 at frame 21, within a range cell, in at least 5 of 6 runs), and
/// noise alone stays under 0.5 (in at least 5 of 6).
#[test]
fn the_filter_detects_a_radar_target() {
    let m = RadarModel::reference(10.0);
    let params = BernoulliParams {
        chain: Chain {
            p_birth: 0.05,
            p_death: 0.05,
        },
        n_birth: 2000,
        n_cont: 2000,
    };
    let (mut detected, mut false_alarms) = (0, 0);
    let trials = 6;
    for trial in 0..trials {
        let mut noise = PhiloxStream::new(100 + trial, 0, Stream::Simulate);
        let truth: Vec<Option<[f64; 4]>> = {
            let mut x = [89.6, -0.15, 0.0, 0.0];
            (0..30)
                .map(|k| {
                    if (7..=21).contains(&k) {
                        if k > 7 {
                            let n = [(); 4].map(|_| noise.normal_f64());
                            m.move_state(&mut x, n);
                        }
                        Some(x)
                    } else {
                        None
                    }
                })
                .collect()
        };
        let mut with = BernoulliFilter::new(params, 4, trial, 0, 0.0);
        let mut without = BernoulliFilter::new(params, 4, trial + 1000, 0, 0.0);
        let (mut p21, mut err21, mut worst_noise) = (0.0, f64::INFINITY, 0.0f64);
        for (k, x) in truth.iter().enumerate() {
            let f = m.frame(x.as_ref(), &mut noise);
            let s = with.step(&m, &f);
            if k == 21 {
                p21 = s.existence.p;
                let (r, _) = RadarModel::range_doppler(&s.mean);
                let (rt, _) = RadarModel::range_doppler(&x.expect("present at 21"));
                err21 = (r - rt).abs();
            }
            let f0 = m.frame(None, &mut noise);
            worst_noise = worst_noise.max(without.step(&m, &f0).existence.p);
        }
        detected += usize::from(p21 > 0.9 && err21 < m.cell_r);
        false_alarms += usize::from(worst_noise > 0.5);
    }
    eprintln!("detected {detected} of {trials}; noise over 0.5 in {false_alarms}");
    assert!(detected >= 5, "{detected}");
    assert!(false_alarms <= 1, "{false_alarms}");
}
