//! What the audio callback does, kept free of the audio library so that it can be tested
//! anywhere (including the no-allocation test): convert the device's samples to f32 into the
//! pre-allocated ring, turn a jump in the device's capture timestamps into a counted gap, and on
//! the first call ask for real-time scheduling. No locks, allocation or logging.

use std::sync::atomic::Ordering;

use super::ring::{Producer, RingStats};

/// A device sample format the callback accepts.
pub trait DeviceSample: Copy {
    fn to_f32(self) -> f32;
}

impl DeviceSample for i16 {
    #[inline(always)]
    fn to_f32(self) -> f32 {
        f32::from(self) * (1.0 / 32_768.0)
    }
}

impl DeviceSample for i32 {
    #[inline(always)]
    fn to_f32(self) -> f32 {
        (self as f32) * (1.0 / 2_147_483_648.0)
    }
}

impl DeviceSample for f32 {
    #[inline(always)]
    fn to_f32(self) -> f32 {
        self
    }
}

/// The callback's state (moved into the audio thread).
pub struct CallbackState {
    producer: Producer,
    channels: usize,
    sample_rate_hz: f64,
    /// Device capture time of the first sample of the next expected buffer, ns.
    expected_ns: Option<u128>,
    /// Smallest jump counted as lost audio, ns.
    tolerance_ns: u128,
    rt_priority: Option<i32>,
}

impl CallbackState {
    /// `rt_priority`: SCHED_FIFO priority to ask for on the first callback (None: do not ask).
    pub fn new(
        producer: Producer,
        channels: usize,
        sample_rate_hz: f64,
        period_frames: u32,
        rt_priority: Option<i32>,
    ) -> Self {
        let period_ns = f64::from(period_frames) / sample_rate_hz * 1e9;
        Self {
            producer,
            channels: channels.max(1),
            sample_rate_hz,
            expected_ns: None,
            tolerance_ns: (period_ns * 0.5).max(2e6) as u128,
            rt_priority,
        }
    }

    pub fn stats(&self) -> &RingStats {
        self.producer.stats()
    }

    /// One buffer from the device: interleaved samples, and the device's capture time of its
    /// first sample when the backend provides one.
    #[inline]
    pub fn on_data<T: DeviceSample>(&mut self, data: &[T], capture_ns: Option<u128>) {
        if let Some(prio) = self.rt_priority.take() {
            request_realtime(prio, self.producer.stats());
        }
        let stats = self.producer.stats();
        stats.callbacks.fetch_add(1, Ordering::Relaxed);
        let frames = data.len() / self.channels;
        if let Some(t) = capture_ns {
            if let Some(exp) = self.expected_ns {
                if t > exp + self.tolerance_ns {
                    // The device lost audio before this buffer (an over-run).
                    let lost = ((t - exp) as f64 * self.sample_rate_hz / 1e9).round() as u64;
                    if lost > 0 {
                        stats.xruns.fetch_add(1, Ordering::Relaxed);
                        stats.xrun_frames.fetch_add(lost, Ordering::Relaxed);
                        self.producer.mark_gap(lost);
                    }
                }
            }
            self.expected_ns = Some(t + (frames as f64 / self.sample_rate_hz * 1e9) as u128);
        }
        self.producer.push_with(frames, |k| data[k].to_f32());
    }

    /// The device reported an over-run without a usable timestamp.
    pub fn on_xrun(&mut self) {
        self.producer.stats().xruns.fetch_add(1, Ordering::Relaxed);
    }
}

/// Ask for SCHED_FIFO at `priority` for the calling thread; record the outcome in `stats`.
fn request_realtime(priority: i32, stats: &RingStats) {
    let param = libc::sched_param {
        sched_priority: priority,
    };
    // SAFETY: sched_setscheduler on the calling thread (pid 0) with a valid parameter block;
    // it only changes this thread's scheduling and reports failure through errno.
    let rc = unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) };
    if rc == 0 {
        stats.rt_priority.store(1, Ordering::Relaxed);
    } else {
        let errno = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
        stats.rt_errno.store(errno as u64, Ordering::Relaxed);
        stats.rt_priority.store(2, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audio::ring::{Pop, ring};

    #[test]
    fn converts_and_turns_timestamp_jumps_into_gaps() {
        let (p, mut c, stats) = ring(4096, 2);
        let mut cb = CallbackState::new(p, 2, 48_000.0, 480, None);
        let buf: Vec<i16> = (0..960)
            .map(|k| if k % 2 == 0 { 16_384 } else { -32_768 })
            .collect();
        cb.on_data(&buf, Some(1_000_000_000));
        // The next buffer arrives 10 ms late: 480 frames lost.
        cb.on_data(&buf, Some(1_000_000_000 + 20_000_000));
        let mut out = vec![0.0f32; 8192];
        assert_eq!(c.pop(&mut out), Pop::Samples(960));
        assert_eq!((out[0], out[1]), (0.5, -1.0));
        assert_eq!(c.pop(&mut out), Pop::Gap(480));
        assert_eq!(c.pop(&mut out), Pop::Samples(960));
        assert_eq!(stats.xruns.load(Ordering::Relaxed), 1);
        assert_eq!(stats.callbacks.load(Ordering::Relaxed), 2);
        let i32s = [i32::MIN, 0];
        let f = [0.25f32, -0.5];
        cb.on_data(&i32s, None);
        cb.on_data(&f, None);
        assert_eq!(c.pop(&mut out), Pop::Samples(4));
        assert_eq!(&out[..4], &[-1.0, 0.0, 0.25, -0.5]);
    }
}
