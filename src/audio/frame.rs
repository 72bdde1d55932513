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
///
/// A backend may also keep a copy of a frame's first samples on its device, sent while the
/// frame is still being filled ([`Self::send_ahead`]), so that only the rest crosses the bus
/// once the frame is complete. Any write through [`Self::as_mut_slice`] drops that copy; the
/// frame assembler, which only writes past what it has sent, writes through
/// [`Self::appending`].
pub trait MappedSamples: Send + Sync {
    fn as_slice(&self) -> &[f32];
    /// Every sample, for any writer: what was sent ahead no longer counts.
    fn as_mut_slice(&mut self) -> &mut [f32];
    /// Every sample, for a writer that leaves the samples sent ahead as they are (the frame
    /// assembler, which writes each channel's samples from its current fill on).
    fn appending(&mut self) -> &mut [f32] {
        self.as_mut_slice()
    }
    /// The device's address of the samples, if the memory is mapped into the device that
    /// `owner` identifies (each backend knows its own token; any other owner gets None).
    fn device_address(&self, owner: usize) -> Option<u64>;
    /// The first `rows` samples of each channel (channels of `len` samples) are final: send
    /// those not yet sent to the device now, ahead of the frame's correlation. `rows` smaller
    /// than before starts a new fill (0: nothing is sent). Nothing by default.
    fn send_ahead(&mut self, rows: usize, len: usize) {
        let _ = (rows, len);
    }
    /// Where the samples sent ahead lie on `owner`'s device and how many of each channel's
    /// first samples the copy holds, once device stream `stream` (a backend's handle) has been
    /// made to wait for their copy; None when nothing was sent (or for another owner).
    fn sent_ahead(&self, owner: usize, stream: u64) -> Option<(u64, usize)> {
        let _ = (owner, stream);
        None
    }
    /// How many of each channel's first samples were sent ahead and still count (0: none).
    fn sent_rows(&self) -> usize {
        0
    }
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

    /// The samples for a writer that only writes past what was sent ahead (see
    /// [`MappedSamples::appending`]).
    pub fn appending(&mut self) -> &mut [f32] {
        match &mut self.0 {
            Repr::Heap(v) => v,
            Repr::Mapped(m) => m.appending(),
        }
    }

    /// See [`MappedSamples::send_ahead`]; nothing for heap memory.
    pub fn send_ahead(&mut self, rows: usize, len: usize) {
        if let Repr::Mapped(m) = &mut self.0 {
            m.send_ahead(rows, len);
        }
    }

    /// See [`MappedSamples::sent_rows`]; 0 for heap memory.
    pub fn sent_rows(&self) -> usize {
        match &self.0 {
            Repr::Heap(_) => 0,
            Repr::Mapped(m) => m.sent_rows(),
        }
    }

    /// See [`MappedSamples::sent_ahead`]; None for heap memory.
    pub fn sent_ahead(&self, owner: usize, stream: u64) -> Option<(u64, usize)> {
        match &self.0 {
            Repr::Heap(_) => None,
            Repr::Mapped(m) => m.sent_ahead(owner, stream),
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

#[cfg(test)]
mod tests {
    use super::*;

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
        f.data.copy_from_slice(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
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
