//! Test helpers of the curves path: an array, its model, and correlated frames of a source.

use super::curves::CurveModel;
use crate::audio::frame::Frame;
use crate::config::Config;
use crate::dsp::gcc::{Correlator, CpuCorrelator, GccFrame};
use crate::rng::philox::PhiloxStream;

pub fn config() -> Config {
    crate::testing::tbd::config(false)
}

pub fn model(cfg: &Config) -> CurveModel {
    crate::testing::tbd::model(cfg)
}

/// Frames whose channels hold a source at `s` (each channel the source's noise delayed by
/// its path, whole samples) at amplitude `amp` over unit independent noise; `amp` 0: noise.
pub fn frames(cfg: &Config, s: Option<[f64; 3]>, amp: f32, count: usize, seed: u64) -> Vec<Frame> {
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

pub fn curves(cfg: &Config, fr: &[Frame]) -> Vec<GccFrame> {
    let g = cfg.gcc_params();
    let mut cor = CpuCorrelator::new(g.clone());
    let mut out: Vec<GccFrame> = fr.iter().map(|_| GccFrame::new(&g)).collect();
    let refs: Vec<&Frame> = fr.iter().collect();
    cor.correlate(&refs, &mut out, true)
        .expect("the CPU correlator takes these frames");
    out
}
