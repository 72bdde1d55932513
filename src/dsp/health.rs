//! Per-frame channel health: non-finite samples are replaced by zero and counted, and channels
//! that carry nothing (unplugged, muted, flat-lined) are marked dead for that frame so their
//! pairs are left out of the measurement instead of feeding noise to the tracker.

use crate::audio::frame::Frame;

/// Below this RMS (about -140 dBFS) a channel is dead whatever the others do.
pub const DEAD_ABSOLUTE_RMS: f32 = 1e-7;
/// A channel this far below the median channel (-50 dB) is dead.
pub const DEAD_RELATIVE: f32 = 3.162e-3;
/// A channel with more than this fraction of non-finite samples is unusable for the frame.
pub const MAX_NONFINITE_FRACTION: f32 = 0.01;

/// What [`inspect`] found in one frame.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FrameHealth {
    /// Non-finite samples replaced by zero, all channels.
    pub nonfinite_samples: u64,
    /// Bit c set: channel c is unusable in this frame (dead or mostly non-finite).
    pub bad_channels: u64,
    /// Bit c set: channel c was dead (silent or flat).
    pub dead_channels: u64,
    /// RMS of each channel after removing its mean.
    pub rms: Vec<f32>,
}

impl FrameHealth {
    pub fn channel_ok(&self, c: usize) -> bool {
        self.bad_channels & (1 << c) == 0
    }
}

/// Running sums per channel in `inspect`: lane k adds the samples at k, k + LANES, ...
const LANES: usize = 16;

/// Sum and sum of squares of `x` in f64, in LANES running sums (one chain of dependent f64
/// additions took 15-20 us for a 4-channel frame of 4096 samples), the lanes then added in
/// order. Where the CPU has AVX, four lanes to a register with explicit vector instructions
/// (left to the compiler, the loop converted one sample at a time: the checks of a 4-channel
/// frame of 4096 samples took 7.9-9.6 us against 2.2-2.3 with them); the
/// result is the same to the last bit either way.
fn channel_sums(x: &[f32]) -> (f64, f64) {
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("avx") {
        // SAFETY: the CPU has AVX (checked just above).
        return unsafe { channel_sums_avx(x) };
    }
    channel_sums_with(x)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx")]
unsafe fn channel_sums_avx(x: &[f32]) -> (f64, f64) {
    use std::arch::x86_64::{
        __m256d, _mm_loadu_ps, _mm256_add_pd, _mm256_cvtps_pd, _mm256_mul_pd, _mm256_setzero_pd,
        _mm256_storeu_pd,
    };
    let mut chunks = x.chunks_exact(LANES);
    let mut s: [__m256d; 4] = [_mm256_setzero_pd(); 4];
    let mut s2: [__m256d; 4] = [_mm256_setzero_pd(); 4];
    for ch in &mut chunks {
        for j in 0..4 {
            // SAFETY: `ch` holds LANES = 16 floats, so ch[4 j..4 j + 4] is in bounds for this
            // unaligned 4-float load.
            let v = _mm256_cvtps_pd(unsafe { _mm_loadu_ps(ch.as_ptr().add(4 * j)) });
            s[j] = _mm256_add_pd(s[j], v);
            s2[j] = _mm256_add_pd(s2[j], _mm256_mul_pd(v, v));
        }
    }
    let (mut sl, mut s2l) = ([0.0f64; LANES], [0.0f64; LANES]);
    for j in 0..4 {
        // SAFETY: each store writes 4 doubles into lanes 4 j..4 j + 4 of a 16-lane array.
        unsafe {
            _mm256_storeu_pd(sl.as_mut_ptr().add(4 * j), s[j]);
            _mm256_storeu_pd(s2l.as_mut_ptr().add(4 * j), s2[j]);
        }
    }
    finish_lanes(sl, s2l, chunks.remainder())
}

#[inline(always)]
fn channel_sums_with(x: &[f32]) -> (f64, f64) {
    let (mut sl, mut s2l) = ([0.0f64; LANES], [0.0f64; LANES]);
    let mut chunks = x.chunks_exact(LANES);
    for ch in &mut chunks {
        for k in 0..LANES {
            let f = f64::from(ch[k]);
            sl[k] += f;
            s2l[k] += f * f;
        }
    }
    finish_lanes(sl, s2l, chunks.remainder())
}

/// The samples after the last whole chunk into lane 0, then the lanes added in order.
#[inline(always)]
fn finish_lanes(mut sl: [f64; LANES], mut s2l: [f64; LANES], rest: &[f32]) -> (f64, f64) {
    for &v in rest {
        let f = f64::from(v);
        sl[0] += f;
        s2l[0] += f * f;
    }
    (sl.iter().sum(), s2l.iter().sum())
}

/// Zero the non-finite samples of `x`; returns how many there were.
fn zero_nonfinite(x: &mut [f32]) -> usize {
    let mut bad = 0;
    for v in x.iter_mut() {
        if !v.is_finite() {
            *v = 0.0;
            bad += 1;
        }
    }
    bad
}

/// Sanitise `frame` in place and report on it.
pub fn inspect(frame: &mut Frame, out: &mut FrameHealth) {
    out.nonfinite_samples = 0;
    out.bad_channels = 0;
    out.dead_channels = 0;
    out.rms.clear();
    let n = frame.len;
    for c in 0..frame.channels {
        let x = frame.channel_mut(c);
        // A non-finite sample makes the sums non-finite (a finite f32 squared cannot overflow
        // an f64 sum), so finite sums need no second look at the samples.
        let (mut s, mut s2) = channel_sums(x);
        let mut bad = 0;
        if !(s.is_finite() && s2.is_finite()) {
            bad = zero_nonfinite(x);
            (s, s2) = channel_sums(x);
        }
        let mean = s / n as f64;
        let rms = (s2 / n as f64 - mean * mean).max(0.0).sqrt() as f32;
        out.rms.push(rms);
        out.nonfinite_samples += bad as u64;
        if bad as f32 > MAX_NONFINITE_FRACTION * n as f32 {
            out.bad_channels |= 1 << c;
        }
    }
    let mut sorted = out.rms.clone();
    sorted.sort_by(f32::total_cmp);
    let median = sorted.get(sorted.len() / 2).copied().unwrap_or(0.0);
    for (c, &r) in out.rms.iter().enumerate() {
        if r < DEAD_ABSOLUTE_RMS || r < DEAD_RELATIVE * median {
            out.dead_channels |= 1 << c;
            out.bad_channels |= 1 << c;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lane_sums_match_one_running_sum() {
        for len in [0usize, 1, 7, 8, 9, 15, 16, 17, 33, 4095, 4096] {
            let x: Vec<f32> = (0..len).map(|i| (i as f32 * 0.37).sin() + 0.25).collect();
            let (s0, s20) = x.iter().fold((0.0f64, 0.0f64), |(a, b), &v| {
                (a + f64::from(v), b + f64::from(v) * f64::from(v))
            });
            let (fast, plain) = (channel_sums(&x), channel_sums_with(&x));
            assert_eq!(
                (fast.0.to_bits(), fast.1.to_bits()),
                (plain.0.to_bits(), plain.1.to_bits()),
                "{len}: the vector sums differ from the plain ones"
            );
            for (s, s2) in [fast, plain] {
                assert!(
                    (s - s0).abs() <= 1e-12 * s0.abs().max(1.0),
                    "{len}: {s} {s0}"
                );
                assert!(
                    (s2 - s20).abs() <= 1e-12 * s20.max(1.0),
                    "{len}: {s2} {s20}"
                );
            }
        }
        let (s, _) = channel_sums(&[1.0, f32::NAN, 2.0]);
        assert!(!s.is_finite(), "a NaN must show in the sums");
        let (_, s2) = channel_sums(&[f32::MAX, f32::MAX]);
        assert!(s2.is_finite(), "finite samples never overflow the f64 sums");
    }

    #[test]
    fn nan_is_zeroed_and_counted_and_silence_is_dead() {
        let mut f = Frame::new(4, 1000, 1000.0);
        for c in 0..4 {
            for (i, v) in f.channel_mut(c).iter_mut().enumerate() {
                *v = ((i * (c + 1)) as f32 * 0.1).sin() * 0.1;
            }
        }
        f.channel_mut(1)[10] = f32::NAN;
        f.channel_mut(1)[11] = f32::INFINITY;
        f.channel_mut(2).fill(0.25); // flat-lined at a DC offset
        for v in f.channel_mut(3).iter_mut().take(50) {
            *v = f32::NAN;
        }
        let mut h = FrameHealth::default();
        inspect(&mut f, &mut h);
        assert_eq!(h.nonfinite_samples, 52);
        assert!(f.data.iter().all(|v| v.is_finite()));
        assert!(h.channel_ok(0));
        assert!(h.channel_ok(1), "2 bad samples in 1000 is tolerable");
        assert!(!h.channel_ok(2));
        assert_eq!(h.dead_channels, 1 << 2);
        assert!(!h.channel_ok(3), "5% non-finite is not");
    }
}
