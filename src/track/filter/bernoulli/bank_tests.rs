use super::*;
use crate::dsp::gcc::GccFrame;
use crate::track::filter::bernoulli::filter::{BernoulliFilter, BernoulliParams};
use crate::track::filter::bernoulli::{CellModel, existence};
use crate::track::measure::curves::CurveModel;
use crate::track::measure::curves::testkit::{config, curves, frames, model};

const CHAIN: Chain = Chain {
    p_birth: 0.05,
    p_death: 0.05,
};

/// The bank's frame and proposal for each correlator frame, with the peaks' candidates (as the
/// curves tracker gives its search).
fn inputs(m: &CurveModel, g: &[GccFrame]) -> Vec<(BankFrame, BankProposal)> {
    let mut running = Vec::new();
    let ok = vec![true; m.pairs()];
    g.iter()
        .map(|g| {
            let mut f = m.frame(&g.curves, &ok, &mut running);
            f.candidates = m.peak_candidates(g, &ok);
            m.bank_inputs(&f)
        })
        .collect()
}

fn sizes(tracks: usize, n_birth: usize, n_cont: usize) -> BankSizes {
    BankSizes {
        tracks,
        n_birth,
        n_cont,
    }
}

/// B-6 (the acoustic form): the bank's f32 ratio of a particle equals the f64 model's within
/// 1e-4 of its size (at least 1), for likelihood areas of ±1 to ±15 lags, on particles spread
/// over the volume and gathered about a source. Particles within 1e-4 lags of an area edge in
/// some pair are counted apart (under 5 %).
#[test]
fn the_bank_weighs_as_the_f64_model() {
    let cfg = config();
    let s = [25.0, -30.0, -15.0];
    let g = curves(&cfg, &frames(&cfg, Some(s), 1.0, 6, 7));
    for w in [1usize, 3, 5, 7, 9, 11, 13, 15] {
        let m = model(&cfg).with_area_half(w);
        let packed = m.packed(None);
        assert_eq!(packed.w as usize, w);
        let reach = (packed.kappa.len() - 1) as f64 / 32.0;
        let ins = inputs(&m, &g);
        let mut bank = CpuCurveBank::new(packed.clone(), sizes(2, 3000, 3000), CHAIN, 5, 0.0)
            .expect("a valid bank");
        let (mut worst, mut largest) = (0.0f64, 0.0f64);
        let (mut edges, mut compared) = (0usize, 0usize);
        for (f, prop) in &ins {
            bank.step(f, prop).expect("the frame fits the model");
            let x = bank.particles().expect("the CPU bank's particles");
            let n = x.len() / DIM;
            let frame64 = m.frame(&f.curves, &[], &mut Vec::new());
            let frame64 = crate::track::measure::curves::CurveFrame {
                sigma: f.sigma.iter().map(|&v| f64::from(v)).collect(),
                ..frame64
            };
            for i in (0..n).step_by(7) {
                let p: Vec<f32> = (0..DIM).map(|k| x[k * n + i]).collect();
                let a = packed.log_lr(f, &p);
                let p64: Vec<f64> = p.iter().map(|&v| f64::from(v)).collect();
                let b = m.log_lr(&frame64, &p64);
                if b == f64::NEG_INFINITY {
                    assert_eq!(a, f32::NEG_INFINITY);
                    continue;
                }
                // The area's first or last lag changes where d ± w crosses a whole lag, and κ's
                // table ends (κ steps to 0) where d ± its reach does: there the ratio steps, and
                // a 1e-5-lag difference in d may land either side.
                let at_edge = (0..m.pairs()).any(|q| {
                    [w as f64, reach, -reach].iter().any(|r| {
                        let d = m.delay(q, &p64) + r;
                        (d - d.round()).abs() < 1e-4
                    })
                });
                if at_edge {
                    edges += 1;
                    continue;
                }
                compared += 1;
                let e = (f64::from(a) - b).abs() / b.abs().max(1.0);

                worst = worst.max(e);
                largest = largest.max(b.abs());
            }
        }
        eprintln!(
            "area ±{w}: worst relative difference {worst:.2e} over {compared} particles (largest \
             |ratio| {largest:.1}); {edges} at an area edge"
        );
        assert!(worst < 1e-4, "area ±{w}: {worst}");
        assert!(edges * 20 < compared, "{edges} of {compared} at an edge");
    }
}

/// The fixed-arithmetic existence update is the f64 recursion's within 1e-12, and a set's
/// quantised log-sum is the exact one's within 1e-7.
#[test]
fn existence_in_fixed_arithmetic_is_the_recursion() {
    let mut r = crate::rng::philox::PhiloxStream::new(9, 0, Stream::Simulate);
    for _ in 0..2000 {
        let p = r.uniform_f64();
        let ls = [r.normal_f64() * 30.0, r.normal_f64() * 30.0];
        let a = existence_update(&CHAIN, p, [0.0; 2], ls);
        let b = existence::update(&CHAIN, p, ls[0], ls[1]);
        assert!((a.p - b.p).abs() < 1e-12, "{a:?} {b:?}");
        assert!((a.birth_share - b.birth_share).abs() < 1e-12);
    }
    let lw: Vec<f32> = (0..5000).map(|_| (r.normal_f64() * 3.0) as f32).collect();
    let max = lw.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let q: u64 = lw.iter().map(|&v| quantise(fm::exp(v - max))).sum();
    let exact = existence::log_sum_exp(&lw.iter().map(|&v| f64::from(v)).collect::<Vec<_>>());
    assert!(
        (log_sum(max, q) - exact).abs() < 1e-6,
        "{}",
        log_sum(max, q) - exact
    );
    assert_eq!(log_sum(f32::NEG_INFINITY, 0), f64::NEG_INFINITY);
}

/// B-4 and B-5 in the bank: with no usable pair every ratio is 1 and the existence follows the
/// Markov prior (within 1e-6: ln N is rounded to f32); each step's birth-derived share equals M_b within one particle.
#[test]
fn no_information_follows_the_prior_and_resampling_keeps_the_birth_share() {
    let cfg = config();
    let m = model(&cfg);
    let g = curves(&cfg, &frames(&cfg, None, 0.0, 1, 3));
    let (mut f, _) = inputs(&m, &g).remove(0);
    f.ok.fill(0);
    // A volume no particle leaves in 40 frames (outside it the ratio is 0, which is information).
    let mut packed = m.packed(None);
    packed.lo = [-1e4; 3];
    packed.hi = [1e4; 3];
    packed.grid_n = [1; 3];
    packed.grid_size = [2e4; 3];
    let prop = BankProposal {
        shares: [1.0, 0.0, 0.0],
        ..BankProposal::default()
    };
    let nc = 500;
    let mut bank =
        CpuCurveBank::new(packed, sizes(3, 700, nc), CHAIN, 4, 0.0).expect("a valid bank");
    let mut p = 0.0;
    for _ in 0..40 {
        let out = bank.step(&f, &prop).expect("the frame fits");
        p = CHAIN.predict(p);
        for t in &out {
            assert!((t.p_exist - p).abs() < 1e-6, "{} {p}", t.p_exist);
            let share = f64::from(t.from_birth) / nc as f64;
            assert!((share - t.birth_share).abs() <= 1.0 / nc as f64 + 1e-9);
        }
    }
}

/// The bank finds a 0 dB source as the f64 filter does: existence over 0.9 and the mean
/// within 2 m after 40 frames; on noise neither ends above 0.5.
#[test]
fn the_bank_finds_a_source_as_the_f64_filter_does() {
    let cfg = config();
    let m = model(&cfg);
    let s = [25.0, -30.0, -15.0];
    let (nb, nc) = (4096, 2048);
    for (amp, seed) in [(1.0f32, 7u64), (0.0, 8)] {
        let g = curves(&cfg, &frames(&cfg, Some(s), amp, 40, seed));
        let mut bank = CpuCurveBank::new(m.packed(None), sizes(1, nb, nc), CHAIN, 3, 0.0)
            .expect("a valid bank");
        let params = BernoulliParams {
            chain: CHAIN,
            n_birth: nb,
            n_cont: nc,
        };
        let mut f64_filter = BernoulliFilter::new(params, m.dim(), 3, 0, 0.0);
        let mut running = Vec::new();
        let ok = vec![true; m.pairs()];
        let (mut a, mut b) = (None, None);
        for gf in &g {
            let mut cf = m.frame(&gf.curves, &ok, &mut running);
            cf.candidates = m.peak_candidates(gf, &ok);
            let (f, prop) = m.bank_inputs(&cf);
            a = bank.step(&f, &prop).expect("the frame fits").pop();
            b = Some(f64_filter.step(&m, &cf));
        }
        let (a, b) = (a.expect("40 steps"), b.expect("40 steps"));
        let d = |x: &[f64]| (0..3).map(|k| (x[k] - s[k]).powi(2)).sum::<f64>().sqrt();
        eprintln!(
            "amplitude {amp}: bank p {:.3} at {:.2} m, f64 p {:.3} at {:.2} m",
            a.p_exist,
            d(&a.mean),
            b.existence.p,
            d(&b.mean)
        );
        if amp > 0.0 {
            assert!(a.p_exist > 0.9 && b.existence.p > 0.9);
            assert!(d(&a.mean) < 2.0 && d(&b.mean) < 2.0);
        } else {
            assert!(a.p_exist < 0.5 && b.existence.p < 0.5);
        }
    }
}

/// Wrong sizes, a proposal beyond the grid and an area beyond ±15 lags are refused with the
/// reason; a NaN or infinite ratio never reaches the sums.
#[test]
fn bad_inputs_are_refused() {
    let cfg = config();
    let m = model(&cfg);
    let packed = m.packed(None);
    assert!(CpuCurveBank::new(packed.clone(), sizes(0, 1, 1), CHAIN, 1, 0.0).is_err());
    assert!(CpuCurveBank::new(packed.clone(), sizes(1, 1, 0), CHAIN, 1, 0.0).is_err());
    let mut wide = packed.clone();
    wide.w = 16;
    let e = CpuCurveBank::new(wide, sizes(1, 1, 1), CHAIN, 1, 0.0).unwrap_err();
    assert!(e.to_string().contains("1 to 15"), "{e}");
    let mut bank = CpuCurveBank::new(packed.clone(), sizes(1, 8, 8), CHAIN, 1, 0.0).unwrap();
    let g = curves(&cfg, &frames(&cfg, None, 0.0, 1, 3));
    let (f, prop) = inputs(&m, &g).remove(0);
    let mut short = f.clone();
    short.sigma.pop();
    assert!(
        bank.step(&short, &prop)
            .unwrap_err()
            .to_string()
            .contains("sigma")
    );
    let mut far = prop.clone();
    far.cells = vec![u32::MAX];
    assert!(bank.step(&f, &far).is_err());
    assert_eq!(clean(f32::NAN), f32::NEG_INFINITY);
    assert_eq!(clean(f32::INFINITY), f32::MAX);
    assert_eq!(fixed(f32::NAN), 0);
    let mut zero = f.clone();
    zero.sigma.fill(0.0);
    let out = bank.step(&zero, &prop).unwrap();
    assert!(out[0].p_exist.is_finite() && out[0].mean.iter().all(|v| v.is_finite()));
}
