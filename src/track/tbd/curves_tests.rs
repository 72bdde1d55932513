use super::*;
use crate::audio::frame::Frame;
use crate::config::Config;
use crate::dsp::gcc::{Correlator, CpuCorrelator, GccFrame};
use crate::rng::philox::PhiloxStream;
use crate::testing::fixtures::harbour_config;

fn config() -> Config {
    let mut cfg = harbour_config();
    cfg.array.bounds_min_m = Some([-80.0, -80.0, -50.0]);
    cfg.array.bounds_max_m = Some([80.0, 80.0, 0.0]);
    // A band whose main lobe spans several lags, so the test frames' whole-sample delays
    // (up to half a sample off in each channel) stay inside it.
    cfg.gcc.band_hz = Some([100.0, 3000.0]);
    cfg
}

fn model(cfg: &Config) -> CurveModel {
    let frame_s = cfg.hop_samples() as f64 / cfg.sample_rate_hz();
    CurveModel::new(
        &cfg.filter_params(),
        &cfg.gcc_params(),
        CurveSettings::default(),
        frame_s,
    )
    .expect("a 3-D array with a search volume")
}

/// Frames whose channels hold a source at `s` (each channel the source's noise delayed by
/// its path, whole samples) at amplitude `amp` over unit independent noise; `amp` 0: noise.
fn frames(cfg: &Config, s: Option<[f64; 3]>, amp: f32, count: usize, seed: u64) -> Vec<Frame> {
    let g = cfg.gcc_params();
    let fs = cfg.sample_rate_hz();
    let c = cfg.array.speed_of_sound_m_s;
    let sensors = &cfg.array.sensors_m;
    let delays: Vec<usize> = sensors
        .iter()
        .map(|m| {
            s.map_or(0, |s| {
                let d =
                    ((s[0] - m[0]).powi(2) + (s[1] - m[1]).powi(2) + (s[2] - m[2]).powi(2)).sqrt();
                (d / c * fs).round() as usize
            })
        })
        .collect();
    let most = delays.iter().copied().max().unwrap_or(0);
    let mut r = PhiloxStream::new(seed, 0, crate::rng::philox::Stream::Simulate);
    (0..count)
        .map(|k| {
            let src: Vec<f32> = (0..g.frame_len + most)
                .map(|_| r.normal_f64() as f32)
                .collect();
            let mut f = Frame::new(sensors.len(), g.frame_len, fs);
            f.seq = k as u64;
            for (ch, &d) in delays.iter().enumerate() {
                for (i, v) in f.channel_mut(ch).iter_mut().enumerate() {
                    // Later arrival at a farther sensor: sample i holds the source at i − d.
                    *v = amp * src[i + most - d] + r.normal_f64() as f32;
                }
            }
            f
        })
        .collect()
}

fn curves(cfg: &Config, fr: &[Frame]) -> Vec<GccFrame> {
    let g = cfg.gcc_params();
    let mut cor = CpuCorrelator::new(g.clone());
    let mut out: Vec<GccFrame> = fr.iter().map(|_| GccFrame::new(&g)).collect();
    let refs: Vec<&Frame> = fr.iter().collect();
    cor.correlate(&refs, &mut out, true)
        .expect("the CPU correlator takes these frames");
    out
}

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
