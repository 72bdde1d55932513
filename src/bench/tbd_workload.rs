//! Workloads of the curves bank (track-before-detect): the harbour array (or an 8-sensor cube)
//! with a search volume, its curves model, and frames of random curves with a source's lobe
//! planted in them, for the parity tests and the benchmarks.

use crate::audio::frame::Frame;
use crate::bench::workload::harbour_config;
use crate::config::Config;
use crate::dsp::gcc::{Correlator, CpuCorrelator, GccFrame};
use crate::rng::philox::{PhiloxStream, Stream};
use crate::track::filter::bernoulli::bank::{BankFrame, BankModel, BankProposal};
use crate::track::measure::curves::{CurveModel, CurveSettings};

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

/// Frames whose channels hold a source at `s` (each channel the source's noise delayed by
/// its path, whole samples) at amplitude `amp` over unit independent noise; `amp` 0: noise.
pub fn source_frames(
    cfg: &Config,
    s: Option<[f64; 3]>,
    amp: f32,
    count: usize,
    seed: u64,
) -> Vec<Frame> {
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
    let mut r = PhiloxStream::new(seed, 0, Stream::Simulate);
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

pub fn correlate(cfg: &Config, fr: &[Frame]) -> Vec<GccFrame> {
    let g = cfg.gcc_params();
    let mut cor = CpuCorrelator::new(g.clone());
    let mut out: Vec<GccFrame> = fr.iter().map(|_| GccFrame::new(&g)).collect();
    let refs: Vec<&Frame> = fr.iter().collect();
    cor.correlate(&refs, &mut out, true)
        .expect("the CPU correlator takes these frames");
    out
}
