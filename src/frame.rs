//! The unit of work: K channels × N samples of f32, planar, with a sequence number and a
//! sample-clock timestamp. Sources convert every sample format to this on the way in.
//!
//! A frame's samples normally live on the heap. A backend that can read host memory directly
//! (a GPU with page-locked memory mapped into it) can hand the frame assembler its own memory
//! instead ([`FrameAlloc`]), so that a live frame goes to the device without a copy.

use std::ops::{Deref, DerefMut};
use std::sync::Arc;
use std::time::SystemTime;

#[derive(Debug, Clone)]
pub struct Frame {
    /// 0 for the first frame of the stream, then +1 per frame (gaps after dropped audio).
    pub seq: u64,
    /// Index of this frame's first sample on the stream's sample clock.
    pub start_sample: u64,
    pub sample_rate_hz: f64,
    /// Samples per channel.
    pub len: usize,
    /// Channels (one per sensor, in sensor order).
    pub channels: usize,
    /// Planar samples: channel c occupies `data[c * len .. (c + 1) * len]`.
    pub data: Samples,
    /// Wall-clock time of the first sample, for live capture.
    pub wall_clock: Option<SystemTime>,
}

impl Frame {
    pub fn new(channels: usize, len: usize, sample_rate_hz: f64) -> Self {
        Self::with_samples(
            channels,
            len,
            sample_rate_hz,
            Samples::zeros(channels * len),
        )
    }

    /// A frame over `data` (which must hold `channels * len` samples: the caller's allocator
    /// made it for this size; a wrong size is replaced by zeroed heap memory).
    pub fn with_samples(channels: usize, len: usize, sample_rate_hz: f64, data: Samples) -> Self {
        let data = if data.len() == channels * len {
            data
        } else {
            Samples::zeros(channels * len)
        };
        Self {
            seq: 0,
            start_sample: 0,
            sample_rate_hz,
            len,
            channels,
            data,
            wall_clock: None,
        }
    }

    pub fn channel(&self, c: usize) -> &[f32] {
        &self.data[c * self.len..(c + 1) * self.len]
    }

    pub fn channel_mut(&mut self, c: usize) -> &mut [f32] {
        &mut self.data[c * self.len..(c + 1) * self.len]
    }

    /// Arrival time of the frame's centre at the array, seconds from the stream start.
    pub fn centre_time_s(&self) -> f64 {
        (self.start_sample as f64 + (self.len as f64 - 1.0) / 2.0) / self.sample_rate_hz
    }
}

/// Sample memory that a device can read where it lies: page-locked host memory mapped into a
/// GPU. Its owner (the backend that made it) keeps whatever the memory needs alive.
pub trait MappedSamples: Send + Sync {
    fn as_slice(&self) -> &[f32];
    fn as_mut_slice(&mut self) -> &mut [f32];
    /// The device's address of the samples, if the memory is mapped into the device that
    /// `owner` identifies (each backend knows its own token; any other owner gets None).
    fn device_address(&self, owner: usize) -> Option<u64>;
}

/// Makes the memory of a frame of `n` samples, or None (the frame then lives on the heap).
pub type FrameAlloc = Arc<dyn Fn(usize) -> Option<Samples> + Send + Sync>;

/// A frame's samples: on the heap, or in memory a device reads directly ([`MappedSamples`]).
/// Either way a slice of f32; a clone is always on the heap.
pub struct Samples(Repr);

enum Repr {
    Heap(Vec<f32>),
    Mapped(Box<dyn MappedSamples>),
}

impl Samples {
    pub fn zeros(n: usize) -> Self {
        Self(Repr::Heap(vec![0.0; n]))
    }

    pub fn mapped(m: Box<dyn MappedSamples>) -> Self {
        Self(Repr::Mapped(m))
    }

    /// Whether the samples lie in memory a device reads directly.
    pub fn is_mapped(&self) -> bool {
        matches!(self.0, Repr::Mapped(_))
    }

    /// See [`MappedSamples::device_address`]; None for heap memory.
    pub fn device_address(&self, owner: usize) -> Option<u64> {
        match &self.0 {
            Repr::Heap(_) => None,
            Repr::Mapped(m) => m.device_address(owner),
        }
    }

    /// Overwrite every sample with `src` (the same length): for memory a device reads, with the
    /// stores [`copy_for_device`] uses.
    pub fn fill_from(&mut self, src: &[f32]) {
        match &mut self.0 {
            Repr::Heap(v) => v.copy_from_slice(src),
            Repr::Mapped(m) => copy_for_device(m.as_mut_slice(), src),
        }
    }
}

impl From<Vec<f32>> for Samples {
    fn from(v: Vec<f32>) -> Self {
        Self(Repr::Heap(v))
    }
}

impl Deref for Samples {
    type Target = [f32];
    fn deref(&self) -> &[f32] {
        match &self.0 {
            Repr::Heap(v) => v,
            Repr::Mapped(m) => m.as_slice(),
        }
    }
}

impl DerefMut for Samples {
    fn deref_mut(&mut self) -> &mut [f32] {
        match &mut self.0 {
            Repr::Heap(v) => v,
            Repr::Mapped(m) => m.as_mut_slice(),
        }
    }
}

impl Clone for Samples {
    fn clone(&self) -> Self {
        Self(Repr::Heap(self.to_vec()))
    }
}

impl PartialEq for Samples {
    fn eq(&self, other: &Self) -> bool {
        **self == **other
    }
}

impl std::fmt::Debug for Samples {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = if self.is_mapped() { "mapped" } else { "heap" };
        write!(f, "Samples({} on the {kind})", self.len())
    }
}

/// Copy `src` into `dst` (the same length) for a GPU to read next: on x86_64 with
/// non-temporal stores, so that the data goes to memory instead of staying in this core's
/// cache, where the GPU's reads over the bus would have to fetch it from (measured on the H200
/// host: batches of 64 16-channel frames copied by 16 threads with plain stores took the
/// batch's device time from 6.9 to 10.5 us per frame). Elsewhere (the boards' shared memory) a
/// plain copy.
pub fn copy_for_device(dst: &mut [f32], src: &[f32]) {
    assert_eq!(dst.len(), src.len(), "copy_for_device: lengths differ");
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_loadu_ps, _mm_sfence, _mm_stream_ps};
        // Elements before the first 16-byte boundary of dst, and then whole 4-float vectors.
        let head = dst.as_ptr().align_offset(16).min(dst.len());
        let body = (dst.len() - head) / 4 * 4;
        dst[..head].copy_from_slice(&src[..head]);
        // SAFETY: SSE2 is part of every x86_64 CPU. dst[head..head + body] starts on a 16-byte
        // boundary (align_offset), as _mm_stream_ps needs, and every access is inside both
        // slices (i + 4 <= body); the loads are unaligned loads. The fence orders the streamed
        // stores before anything this thread does next (the caller then hands the buffer to
        // the GPU).
        unsafe {
            let d = dst.as_mut_ptr().add(head);
            let s = src.as_ptr().add(head);
            let mut i = 0;
            while i < body {
                _mm_stream_ps(d.add(i), _mm_loadu_ps(s.add(i)));
                i += 4;
            }
            _mm_sfence();
        }
        dst[head + body..].copy_from_slice(&src[head + body..]);
    }
    #[cfg(not(target_arch = "x86_64"))]
    dst.copy_from_slice(src);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The streamed copy gives the plain copy's result at every alignment and length
    /// (head, vector body and tail), on fresh random data.
    #[test]
    fn copy_for_device_copies_exactly() {
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            f32::from_bits((seed as u32 & 0x807f_ffff) | 0x3f00_0000)
        };
        let src: Vec<f32> = (0..300).map(|_| next()).collect();
        let mut dst = vec![0.0f32; 304];
        for off in 0..4 {
            for len in [0, 1, 3, 4, 5, 17, 64, 255, 299] {
                dst.fill(-1.0);
                super::copy_for_device(&mut dst[off..off + len], &src[..len]);
                assert_eq!(
                    &dst[off..off + len],
                    &src[..len],
                    "offset {off}, length {len}"
                );
                assert!(dst[..off].iter().all(|&v| v == -1.0));
                assert!(dst[off + len..].iter().all(|&v| v == -1.0));
            }
        }
    }

    /// Memory "mapped" at a fixed address for owner 7 (for the tests: heap memory).
    struct FakeMapped(Vec<f32>);

    impl MappedSamples for FakeMapped {
        fn as_slice(&self) -> &[f32] {
            &self.0
        }
        fn as_mut_slice(&mut self) -> &mut [f32] {
            &mut self.0
        }
        fn device_address(&self, owner: usize) -> Option<u64> {
            (owner == 7).then_some(0x1000)
        }
    }

    /// Mapped samples read and write like heap samples, name their address only to their owner,
    /// and a clone (or a frame of the wrong size) lives on the heap.
    #[test]
    fn mapped_samples_behave_as_a_slice() {
        let mut f = Frame::with_samples(
            2,
            3,
            10.0,
            Samples::mapped(Box::new(FakeMapped(vec![0.0; 6]))),
        );
        assert!(f.data.is_mapped());
        f.data.fill_from(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        assert_eq!(f.channel(1), &[4.0, 5.0, 6.0]);
        f.channel_mut(0)[1] = -2.0;
        assert_eq!(&f.data[..3], &[1.0, -2.0, 3.0]);
        assert_eq!(f.data.device_address(7), Some(0x1000));
        assert_eq!(f.data.device_address(8), None);
        let g = f.clone();
        assert!(!g.data.is_mapped());
        assert_eq!(g.data, f.data);
        assert_eq!(g.data.device_address(7), None);
        assert!(format!("{:?}", f.data).contains("6 on the mapped"));
        let wrong = Frame::with_samples(
            2,
            4,
            10.0,
            Samples::mapped(Box::new(FakeMapped(vec![1.0; 6]))),
        );
        assert!(!wrong.data.is_mapped());
        assert_eq!(wrong.data.len(), 8);
        assert!(wrong.data.iter().all(|&v| v == 0.0));
    }
}
