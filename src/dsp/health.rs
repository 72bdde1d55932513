//! Per-frame channel health: non-finite samples are replaced by zero and counted, and channels
//! that carry nothing (unplugged, muted, flat-lined) are marked dead for that frame so their
//! pairs are left out of the measurement instead of feeding noise to the tracker.

use crate::frame::Frame;

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

/// Sanitise `frame` in place and report on it.
pub fn inspect(frame: &mut Frame, out: &mut FrameHealth) {
    out.nonfinite_samples = 0;
    out.bad_channels = 0;
    out.dead_channels = 0;
    out.rms.clear();
    let n = frame.len;
    for c in 0..frame.channels {
        let x = frame.channel_mut(c);
        let mut bad = 0usize;
        let (mut s, mut s2) = (0.0f64, 0.0f64);
        for v in x.iter_mut() {
            if !v.is_finite() {
                *v = 0.0;
                bad += 1;
            }
            let f = f64::from(*v);
            s += f;
            s2 += f * f;
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
