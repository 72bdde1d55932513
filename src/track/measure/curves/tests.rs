use super::*;
use crate::rng::philox::PhiloxStream;
use crate::track::measure::curves::testkit::{config, curves, frames, model};

#[test]
fn kappa_is_one_at_zero_and_even() {
    let cfg = config();
    let m = model(&cfg);
    assert!((m.kappa(0.0) - 1.0).abs() < 1e-12);
    for d in [0.3, 1.0, 2.7] {
        assert_eq!(m.kappa(d), m.kappa(-d));
        assert!(m.kappa(d) < 1.0);
    }
    assert!((1..=16).contains(&m.area_half()), "{}", m.area_half());
}

#[test]
fn range_maxima_equal_a_scan() {
    let mut r = PhiloxStream::new(5, 0, crate::rng::philox::Stream::Simulate);
    let v: Vec<f64> = (0..301).map(|_| r.normal_f64()).collect();
    let t = RangeMax::new(&v);
    for lo in (0..301).step_by(7) {
        for hi in (lo..301).step_by(11) {
            let scan = v[lo..=hi].iter().copied().fold(f64::NEG_INFINITY, f64::max);
            assert_eq!(t.max(lo, hi), scan);
        }
    }
    assert_eq!(t.max(5, 4), f64::NEG_INFINITY);
}

/// The noise level each frame estimates from the reference lags is the spread of the lobe
/// amplitude u at the lags a source can give, on noise alone, within 15 %.
#[test]
fn the_noise_level_is_the_spread_of_u_on_noise() {
    let cfg = config();
    let m = model(&cfg);
    let out = curves(&cfg, &frames(&cfg, None, 0.0, 60, 1));
    let mut running = Vec::new();
    let cl = m.curve_len();
    // Near lag 0 and two-thirds of the way out: the profile carries the level across.
    for centre in [0.0, 0.66 * m.curve_half as f64] {
        let (mut s2, mut level) = (0.0, 0.0);
        for g in &out {
            let f = m.frame(&g.curves, &[], &mut running);
            for p in 0..m.pairs() {
                for k in 0..5 {
                    let d = centre - 20.0 + 10.0 * k as f64 + 0.37;
                    let u = m.lobe(&f.curves[p * cl..(p + 1) * cl], d);
                    s2 += u * u;
                    level += f.sigma[p] * f.sigma[p] * m.relative_variance(d);
                }
            }
        }
        let ratio = (s2 / level).sqrt();
        assert!(
            (ratio - 1.0).abs() < 0.1,
            "at {centre}: spread / level {ratio}"
        );
    }
    // The band's own level (before any frame) is the spread at lag 0 within 10 %.
    let at0 = m.relative_variance(0.0);
    assert!((at0 - 1.0).abs() < 1e-12);
}

/// A source's frames give their largest log-likelihood ratio at its position: above every one
/// of 2,000 random positions in the volume, and positive; noise frames give a negative mean.
#[test]
fn the_ratio_peaks_at_the_source() {
    let cfg = config();
    let m = model(&cfg);
    let s = [30.0, -20.0, -12.0];
    let out = curves(&cfg, &frames(&cfg, Some(s), 0.5, 4, 2));
    let mut running = Vec::new();
    let mut r = PhiloxStream::new(9, 0, crate::rng::philox::Stream::Simulate);
    for g in &out {
        let f = m.frame(&g.curves, &[], &mut running);
        let at = m.log_lr(&f, &[s[0], s[1], s[2], 0.0, 0.0, 0.0, 0.2]);
        assert!(at > 0.0, "{at}");
        for _ in 0..2000 {
            let x = [
                -80.0 + 160.0 * r.uniform_f64(),
                -80.0 + 160.0 * r.uniform_f64(),
                -50.0 * r.uniform_f64(),
            ];
            let other = m.log_lr(&f, &[x[0], x[1], x[2], 0.0, 0.0, 0.0, 0.2]);
            let d = (0..3).map(|k| (x[k] - s[k]).powi(2)).sum::<f64>().sqrt();
            if d > 3.0 {
                assert!(other < at, "{other} at {x:?} against {at}");
            }
        }
    }
    let noise = curves(&cfg, &frames(&cfg, None, 0.0, 20, 3));
    let mut mean = 0.0;
    for g in &noise {
        let f = m.frame(&g.curves, &[], &mut running);
        mean += m.log_lr(&f, &[s[0], s[1], s[2], 0.0, 0.0, 0.0, 0.2]);
    }
    assert!(mean < 0.0, "{mean}");
    // The volume's edge: nothing outside it.
    let f = m.frame(&out[0].curves, &[], &mut running);
    assert_eq!(
        m.log_lr(&f, &[0.0, 0.0, 5.0, 0.0, 0.0, 0.0, 0.2]),
        f64::NEG_INFINITY
    );
}

/// The birth proposal's strongest cells hold a source at 0 dB per channel; masking its lags
/// removes it.
#[test]
fn births_come_from_the_source_and_masking_removes_it() {
    let cfg = config();
    let m = model(&cfg);
    let s = [-40.0, 25.0, -20.0];
    let out = curves(&cfg, &frames(&cfg, Some(s), 1.0, 1, 4));
    let mut running = Vec::new();
    let f = m.frame(&out[0].curves, &[], &mut running);
    let cell_of = |x: &[f64; 3]| {
        let i = [0, 1, 2].map(|k| ((x[k] - m.lo[k]) / m.grid.size[k]) as usize);
        i[0] + m.grid.n[0] * (i[1] + m.grid.n[1] * i[2])
    };
    let top = m.proposal(&f);
    assert!(
        top.is_top[cell_of(&s)],
        "the source's cell is not among the top cells"
    );
    let masked = m.masked(&f, &[s]);
    let at = |f: &CurveFrame| m.log_lr(f, &[s[0], s[1], s[2], 0.0, 0.0, 0.0, 0.2]);
    assert!(at(&masked) < 0.0 && at(&f) > 0.0);
}

/// The joint template on two sources 2.2 m apart whose lobes overlap in some pairs: each
/// source's lobe amplitude, measured at its delays in the overlapping pairs, is biased by the
/// other's lobe on the raw curves; on the curves less the other's template (at the other's
/// amplitude measured in the pairs where they do not overlap) the bias falls to under half.
#[test]
fn the_joint_template_removes_the_other_sources_lobe() {
    let cfg = config();
    let m = model(&cfg);
    let (loud, quiet) = ([20.0, -25.0, -15.0], [21.5, -23.5, -15.5]);
    let mut fa = frames(&cfg, Some(loud), 1.5, 40, 31);
    let fb = frames(&cfg, Some(quiet), 0.8, 40, 32);
    for (x, y) in fa.iter_mut().zip(&fb) {
        for ch in 0..cfg.array.sensors_m.len() {
            for (u, v) in x.channel_mut(ch).iter_mut().zip(y.channel(ch)) {
                *u += *v;
            }
        }
    }
    let out = curves(&cfg, &fa);
    let cl = m.curve_len();
    let mut running = Vec::new();
    let first = m.frame(&out[0].curves, &[], &mut running);
    let single = |p: usize| {
        let mut f = first.clone();
        f.ok = (0..m.pairs()).map(|q| q == p).collect();
        f
    };
    let (over, apart): (Vec<usize>, Vec<usize>) =
        (0..m.pairs()).partition(|&p| m.overlaps(&single(p), &loud, &quiet));
    assert!(!over.is_empty() && !apart.is_empty(), "{over:?} {apart:?}");
    let (mut raw_bias, mut joint_bias) = (0.0, 0.0);
    for g in &out {
        let f = m.frame(&g.curves, &[], &mut running);
        let amp = |s: &[f64; 3], f: &CurveFrame, pairs: &[usize]| {
            pairs
                .iter()
                .map(|&p| m.lobe(&f.curves[p * cl..(p + 1) * cl], m.delay(p, s)))
                .sum::<f64>()
                / pairs.len() as f64
        };
        let (a_loud, a_quiet) = (amp(&loud, &f, &apart), amp(&quiet, &f, &apart));
        for (s, a, other, a_other) in [
            (quiet, a_quiet, loud, a_loud),
            (loud, a_loud, quiet, a_quiet),
        ] {
            let joint = m.without(&f, &[(other, a_other)]);
            raw_bias += (amp(&s, &f, &over) - a).abs();
            joint_bias += (amp(&s, &joint, &over) - a).abs();
        }
    }
    eprintln!(
        "{} of {} pairs overlap; lobe bias raw {:.3}, joint {:.3} (sum over 40 frames, 2 sources)",
        over.len(),
        m.pairs(),
        raw_bias,
        joint_bias
    );
    assert!(
        joint_bias < 0.5 * raw_bias,
        "raw {raw_bias} joint {joint_bias}"
    );
}
