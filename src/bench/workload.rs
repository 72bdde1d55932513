//! Workloads: the arrays, parameters and synthetic inputs the benchmarks time (and the tests share).

use crate::audio::frame::Frame;
use crate::config::{Config, default_models};
use crate::dsp::gcc::{GccParams, Weighting, Window};
use crate::dsp::geometry::{ArrayGeometry, PairMode};
use crate::rng::philox::{PhiloxStream, Stream};
use crate::track::measure::likelihood;
use crate::track::{FilterParams, ModelKind, TdoaMeasurement, TrackInit};

/// The five-hydrophone pier array (`boards/arrays/harbour-5-hydrophone.toml`), embedded.
const HARBOUR_ARRAY: &str = include_str!("../../boards/arrays/harbour-5-hydrophone.toml");

/// A configuration with the five-hydrophone pier array (1500 m/s, 48 kHz) and every other
/// setting at its default, without the array file's search volume.
pub fn harbour_config() -> Config {
    // The file is part of the source tree and parsed by a test of its own.
    let mut cfg = Config::parse_str(HARBOUR_ARRAY, "boards/arrays/harbour-5-hydrophone.toml")
        .expect("the embedded harbour array parses");
    cfg.array.bounds_min_m = None;
    cfg.array.bounds_max_m = None;
    cfg
}

/// The pier array's sensor positions (m).
pub fn harbour_sensors() -> Vec<[f64; 3]> {
    harbour_config().array.sensors_m
}

/// A compact array: `channels` sensors on a 0.5 m sphere, in air, at 48 kHz (every frame size
/// in the grid can hold its lags).
pub fn bench_geometry(channels: usize) -> ArrayGeometry {
    let golden = std::f64::consts::PI * (3.0 - 5f64.sqrt());
    let sensors = (0..channels)
        .map(|i| {
            let y = 1.0 - 2.0 * (i as f64 + 0.5) / channels as f64;
            let r = (1.0 - y * y).sqrt();
            let th = golden * i as f64;
            [0.5 * r * th.cos(), 0.5 * y, 0.5 * r * th.sin()]
        })
        .collect();
    ArrayGeometry::new(sensors, 343.0)
}

/// GCC-PHAT parameters for [`bench_geometry`] of `channels` sensors and frames of `frame`.
pub fn gcc_params(channels: usize, frame: usize) -> GccParams {
    let geo = bench_geometry(channels);
    let pairs = geo.pairs(PairMode::All, 0);
    GccParams::new(
        48_000.0,
        channels,
        frame,
        false,
        Window::Hann,
        [100.0, 20_000.0],
        Weighting::Phat,
        1.0,
        1e-3,
        4,
        3.0,
        true,
        &pairs,
    )
}

/// Frames of noise with each channel a delayed copy of one source.
pub fn noise_frames(channels: usize, frame: usize, count: usize, seed: u64) -> Vec<Frame> {
    let mut r = PhiloxStream::new(seed, 0, Stream::Simulate);
    (0..count)
        .map(|k| {
            let src: Vec<f32> = (0..frame + 64).map(|_| r.normal_f64() as f32).collect();
            let mut f = Frame::new(channels, frame, 48_000.0);
            f.seq = k as u64;
            for c in 0..channels {
                let d = (c * 7) % 50;
                for (i, v) in f.channel_mut(c).iter_mut().enumerate() {
                    *v = src[i + d] + 0.3 * r.normal_f64() as f32;
                }
            }
            f
        })
        .collect()
}

/// Filter parameters for `models` motion models (the defaults repeated) on a 5-hydrophone array.
pub fn pf_params(particles: usize, models: usize) -> FilterParams {
    let mut cfg = harbour_config();
    let base = default_models();
    cfg.tracker.models = (0..models)
        .map(|i| {
            let mut m = base[i % base.len()].clone();
            m.name = format!("{}{}", m.name, i);
            if m.kind == ModelKind::Cv {
                m.accel_std_m_s2 *= 1.0 + i as f64 * 0.1;
            }
            m
        })
        .collect();
    cfg.tracker.particles = particles;
    cfg.filter_params()
}

/// A track's prior near (-16, 3, -12), moving at 2 m/s in x.
pub fn pf_init() -> TrackInit {
    let mut chol = [[0.0; 6]; 6];
    for (i, row) in chol.iter_mut().enumerate() {
        row[i] = if i < 3 { 0.05 } else { 0.1 };
    }
    TrackInit {
        slot: 0,
        frame: 0,
        mean: [-16.0, 3.0, -12.0, 2.0, 0.0, 0.0],
        chol,
        speed_ball_m_s: 0.0,
        model_probs: Vec::new(),
        inv_range_max: 0.0,
    }
}

/// A measurement near a source at (-16, 3, -12) + 0.1 m per frame in x.
pub fn pf_measurement(p: &FilterParams, frame: u64) -> TdoaMeasurement {
    let k = 4;
    let x = [-16.0 + 0.1 * frame as f32, 3.0, -12.0, 2.0, 0.0, 0.0, 0.0];
    let lk = likelihood::LikelihoodConsts::new(p, p.tdoa_std_s);
    let mut pred = vec![0.0; p.pairs.len()];
    likelihood::predict_tdoas(p, &lk, &x, 0.01, &mut pred);
    let mut m = TdoaMeasurement::empty(frame, p.pairs.len(), k, p.tdoa_std_s);
    let mut r = PhiloxStream::new(frame, 1, Stream::Simulate);
    for (pi, t) in pred.iter().enumerate() {
        for j in 0..k {
            m.tdoa_s[pi * k + j] = if j == 0 {
                *t
            } else {
                *t + (r.uniform_f64() as f32 - 0.5) * 0.01
            };
            m.amp[pi * k + j] = if j == 0 { 300.0 } else { 50.0 };
        }
        m.floor[pi] = 0.1;
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_harbour_array_file_parses() {
        let c = harbour_config();
        assert_eq!(c.array.sensors_m.len(), 5);
        assert_eq!(c.array.speed_of_sound_m_s, 1500.0);
        assert_eq!(c.audio.sample_rate_hz, 48_000);
    }
}
