//! Workloads of the curves bank (track-before-detect): the harbour array (or an 8-sensor cube)
//! with a search volume, its curves model, and frames of random curves with a source's lobe
//! planted in them, for the parity tests and the benchmarks.

use crate::config::Config;
use crate::rng::philox::{PhiloxStream, Stream};
use crate::testing::fixtures::harbour_config;
use crate::track::tbd::bank::{BankFrame, BankModel, BankProposal};
use crate::track::tbd::curves::{CurveModel, CurveSettings};

/// The harbour array (5 sensors, 10 pairs) with a 160 × 160 × 50 m search volume and a band
/// whose main lobe spans several lags; with `cube`, 8 sensors on a 10 m cube (28 pairs).
pub fn config(cube: bool) -> Config {
    let mut cfg = harbour_config();
    cfg.array.bounds_min_m = Some([-80.0, -80.0, -50.0]);
    cfg.array.bounds_max_m = Some([80.0, 80.0, 0.0]);
    cfg.gcc.band_hz = Some([100.0, 3000.0]);
    if cube {
        cfg.array.sensors_m = (0..8)
            .map(|i| {
                let b = |k: usize| if (i >> k) & 1 == 1 { 5.0 } else { -5.0 };
                [b(0), b(1), b(2) - 10.0]
            })
            .collect();
    }
    cfg
}

/// The curves model of `cfg`.
pub fn model(cfg: &Config) -> CurveModel {
    let frame_s = cfg.hop_samples() as f64 / cfg.sample_rate_hz();
    CurveModel::new(
        &cfg.filter_params(),
        &cfg.gcc_params(),
        CurveSettings::default(),
        frame_s,
    )
    .expect("a 3-D array with a search volume")
}

/// `count` frames of random curves (normal, σ 0.05 a lag) holding a source's lobe (amplitude
/// 0.3) at a random place that moves 0.1 m a frame, each pair usable with probability 0.9,
/// with two candidates near the source and the model's own birth proposal.
pub fn frames(
    m: &CurveModel,
    packed: &BankModel,
    seed: u64,
    count: usize,
) -> Vec<(BankFrame, BankProposal)> {
    let mut r = PhiloxStream::new(seed, 0, Stream::Simulate);
    let mut s = [
        (r.uniform_f64() - 0.5) * 100.0,
        (r.uniform_f64() - 0.5) * 100.0,
        -5.0 - 40.0 * r.uniform_f64(),
    ];
    let cl = packed.curve_len();
    let np = packed.pairs.len();
    let mut running = Vec::new();
    (0..count)
        .map(|_| {
            s[0] += 0.1;
            let x = [s[0] as f32, s[1] as f32, s[2] as f32];
            let mut curves = vec![0.0f32; np * cl];
            for p in 0..np {
                let d = packed.delay(p, &x);
                for (l, v) in curves[p * cl..(p + 1) * cl].iter_mut().enumerate() {
                    let lag = l as f32 - packed.curve_half as f32;
                    *v = 0.05 * r.normal_f64() as f32 + 0.3 * packed.kappa(lag - d);
                }
            }
            let ok: Vec<bool> = (0..np).map(|_| r.uniform_f64() < 0.9).collect();
            let mut f = m.frame(&curves, &ok, &mut running);
            f.candidates = (0..2)
                .map(|_| [0, 1, 2].map(|k| s[k] + 0.5 * r.normal_f64()))
                .collect();
            m.bank_inputs(&f)
        })
        .collect()
}
