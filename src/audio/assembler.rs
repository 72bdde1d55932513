//! Frame assembly: interleaved input samples in, planar frames out.
//!
//! Frame k always starts at sample `origin + k * hop`, so a frame's sequence number says where it
//! sits in the stream. After a gap (lost audio), the partial frames are discarded and assembly
//! resumes at the first grid position after the gap: a frame never spans missing audio, and the
//! frames that could not be formed are counted.

use std::collections::VecDeque;

use crate::frame::{Frame, FrameAlloc};

pub struct FrameAssembler {
    map: Vec<usize>,
    in_channels: usize,
    frame_len: usize,
    hop: usize,
    sample_rate_hz: f64,
    origin: u64,
    /// Planar, sensors × frame_len.
    buf: Vec<f32>,
    have: usize,
    /// Sample index of `buf`'s first sample (a grid position).
    buf_start: u64,
    /// Sample index of the next incoming sample.
    clock: u64,
    ready: VecDeque<Frame>,
    pool: Vec<Frame>,
    /// Where new frames' samples go (None: the heap). See [`Self::set_allocator`].
    alloc: Option<FrameAlloc>,
    /// Frames that could not be formed because their audio was lost.
    pub lost_frames: u64,
}

impl FrameAssembler {
    /// The assembler a configuration describes (its channel map, input channels, frame, hop
    /// and sample rate); `origin` as for [`FrameAssembler::new`].
    pub fn for_config(cfg: &crate::config::Config, origin: u64) -> Self {
        Self::new(
            cfg.channel_map(),
            cfg.input_channels(),
            cfg.frame_samples(),
            cfg.hop_samples(),
            cfg.sample_rate_hz(),
            origin,
        )
    }

    /// `map[i]` is the input channel of sensor i; `origin` is the sample index of the first
    /// sample that will be pushed.
    pub fn new(
        map: Vec<usize>,
        in_channels: usize,
        frame_len: usize,
        hop: usize,
        sample_rate_hz: f64,
        origin: u64,
    ) -> Self {
        let sensors = map.len();
        Self {
            map,
            in_channels,
            frame_len,
            hop,
            sample_rate_hz,
            origin,
            buf: vec![0.0; sensors * frame_len],
            have: 0,
            buf_start: origin,
            clock: origin,
            ready: VecDeque::new(),
            pool: Vec::new(),
            alloc: None,
            lost_frames: 0,
        }
    }

    /// Make new frames' samples with `alloc` (a backend's memory that its device reads
    /// directly: `Pipeline::frame_allocator`), or on the heap when None or when `alloc` has
    /// none to give. Frames made before are dropped from the pool.
    pub fn set_allocator(&mut self, alloc: Option<FrameAlloc>) {
        self.alloc = alloc;
        self.pool.clear();
    }

    pub fn sensors(&self) -> usize {
        self.map.len()
    }

    /// Push whole interleaved sample frames; completed frames become available from `pop`.
    pub fn push(&mut self, interleaved: &[f32]) {
        let ch = self.in_channels;
        let n = self.frame_len;
        // Whole sample frames only (a partial one at the end is ignored).
        let mut rest = &interleaved[..interleaved.len() / ch.max(1) * ch];
        while !rest.is_empty() {
            let rows = rest.len() / ch;
            // Skip samples before the next frame start (hop longer than a frame, or after a gap).
            if self.clock < self.buf_start {
                let skip = ((self.buf_start - self.clock) as usize).min(rows);
                rest = &rest[skip * ch..];
                self.clock += skip as u64;
                continue;
            }
            let take = (n - self.have).min(rows);
            let (chunk, tail) = rest.split_at(take * ch);
            // A sensor at a time: one input channel's samples into its contiguous row (a
            // sample at a time across the sensors took 10.5 us per 4-channel frame of 4096
            // samples, hop 2048, against 7.2 on dev-cpu: `cargo run --release --example
            // assemble`).
            for (s, &c) in self.map.iter().enumerate() {
                let at = s * n + self.have;
                let dst = &mut self.buf[at..at + take];
                for (d, row) in dst.iter_mut().zip(chunk.chunks_exact(ch)) {
                    *d = row[c];
                }
            }
            self.have += take;
            self.clock += take as u64;
            rest = tail;
            if self.have == n {
                self.emit();
            }
        }
    }

    fn emit(&mut self) {
        let n = self.frame_len;
        let sensors = self.map.len();
        let mut frame = self.pool.pop().unwrap_or_else(|| {
            match self.alloc.as_ref().and_then(|a| a(sensors * n)) {
                Some(data) => Frame::with_samples(sensors, n, self.sample_rate_hz, data),
                None => Frame::new(sensors, n, self.sample_rate_hz),
            }
        });
        frame.data.copy_from_slice(&self.buf);
        frame.start_sample = self.buf_start;
        frame.seq = (self.buf_start - self.origin) / self.hop as u64;
        frame.wall_clock = None;
        self.ready.push_back(frame);
        self.buf_start += self.hop as u64;
        if self.hop < n {
            for s in 0..sensors {
                self.buf.copy_within(s * n + self.hop..(s + 1) * n, s * n);
            }
            self.have = n - self.hop;
        } else {
            self.have = 0;
        }
    }

    /// `lost` sample frames are missing before the next push. Returns the frames lost with them.
    pub fn gap(&mut self, lost: u64) -> u64 {
        if lost == 0 {
            return 0;
        }
        self.clock += lost;
        let hop = self.hop as u64;
        let old_k = (self.buf_start - self.origin) / hop;
        // First grid start at or after the end of the gap.
        let new_k = (self.clock - self.origin).div_ceil(hop);
        let lost_frames = new_k.saturating_sub(old_k);
        self.buf_start = self.origin + new_k * hop;
        self.have = 0;
        self.lost_frames += lost_frames;
        lost_frames
    }

    pub fn pop(&mut self) -> Option<Frame> {
        self.ready.pop_front()
    }

    /// Give a frame back for reuse (avoids an allocation per frame).
    pub fn recycle(&mut self, frame: Frame) {
        if frame.len == self.frame_len && frame.channels == self.map.len() && self.pool.len() < 8 {
            self.pool.push(frame);
        }
    }

    /// Sample index of the next expected input sample.
    pub fn clock(&self) -> u64 {
        self.clock
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Input channel c carries value c*1000 + sample index.
    fn ramp(ch: usize, from: u64, n: usize) -> Vec<f32> {
        let mut v = Vec::new();
        for i in 0..n as u64 {
            for c in 0..ch {
                v.push((c as u64 * 1000 + from + i) as f32);
            }
        }
        v
    }

    #[test]
    fn frames_follow_the_grid_and_the_map() {
        let mut a = FrameAssembler::new(vec![2, 0], 3, 8, 3, 100.0, 0);
        a.push(&ramp(3, 0, 5));
        a.push(&ramp(3, 5, 20));
        let mut seqs = Vec::new();
        while let Some(f) = a.pop() {
            assert_eq!(f.start_sample, f.seq * 3);
            assert_eq!(f.channel(0)[0], (2000 + f.start_sample) as f32);
            assert_eq!(f.channel(1)[7], (f.start_sample + 7) as f32);
            seqs.push(f.seq);
            a.recycle(f);
        }
        // Frames start at 0, 3, 6, 9, 12, 15 (ending at 7..22 <= 24).
        assert_eq!(seqs, vec![0, 1, 2, 3, 4, 5]);
    }

    /// Every sample of every frame is the input's, whatever sizes the pushes come in (a
    /// sensor may repeat an input channel; a push may end inside a sample frame, whose samples
    /// are ignored).
    #[test]
    fn pushes_of_any_size_give_the_same_frames() {
        for (map, frame, hop) in [
            (vec![2, 0, 2], 8, 3),
            (vec![1], 4, 10),
            (vec![0, 1, 2], 16, 16),
        ] {
            let input = ramp(3, 0, 200);
            let mut expected: Vec<Frame> = Vec::new();
            let mut one = FrameAssembler::new(map.clone(), 3, frame, hop, 100.0, 0);
            one.push(&input);
            while let Some(f) = one.pop() {
                for (s, &c) in map.iter().enumerate() {
                    for (i, v) in f.channel(s).iter().enumerate() {
                        assert_eq!(*v, (c as u64 * 1000 + f.start_sample + i as u64) as f32);
                    }
                }
                expected.push(f);
            }
            assert!(expected.len() >= 10);
            for step in [1usize, 2, 7, 64] {
                let mut a = FrameAssembler::new(map.clone(), 3, frame, hop, 100.0, 0);
                for rows in input.chunks(step * 3) {
                    a.push(rows);
                }
                // A partial sample frame at the end is left out.
                a.push(&[1e9, 1e9]);
                let got: Vec<Frame> = std::iter::from_fn(|| a.pop()).collect();
                assert_eq!(got.len(), expected.len(), "step {step}");
                for (g, e) in got.iter().zip(&expected) {
                    assert_eq!((g.seq, g.start_sample), (e.seq, e.start_sample));
                    assert_eq!(g.data, e.data, "step {step}, frame {}", g.seq);
                }
                assert_eq!(a.clock(), 200);
            }
        }
    }

    /// Heap memory posing as a device's (for the allocator test).
    struct Mapped(Vec<f32>);

    impl crate::frame::MappedSamples for Mapped {
        fn as_slice(&self) -> &[f32] {
            &self.0
        }
        fn as_mut_slice(&mut self) -> &mut [f32] {
            &mut self.0
        }
        fn device_address(&self, _owner: usize) -> Option<u64> {
            Some(self.0.as_ptr() as u64)
        }
    }

    /// Frames made by an allocator carry its memory and the same samples as heap frames; when
    /// the allocator has none to give, frames go on the heap; recycled frames are reused.
    #[test]
    fn an_allocator_gives_frames_its_memory() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let input = ramp(3, 0, 100);
        let mut heap = FrameAssembler::new(vec![2, 0], 3, 8, 3, 100.0, 0);
        heap.push(&input);
        let expected: Vec<Frame> = std::iter::from_fn(|| heap.pop()).collect();
        let made = std::sync::Arc::new(AtomicUsize::new(0));
        let counter = made.clone();
        let alloc: crate::frame::FrameAlloc = std::sync::Arc::new(move |n| {
            // Two buffers, then none.
            (counter.fetch_add(1, Ordering::Relaxed) < 2)
                .then(|| crate::frame::Samples::mapped(Box::new(Mapped(vec![0.0; n]))))
        });
        let mut a = FrameAssembler::new(vec![2, 0], 3, 8, 3, 100.0, 0);
        a.set_allocator(Some(alloc));
        // One frame at a time, recycled: the first buffer serves every frame.
        let mut seen = Vec::new();
        for rows in input.chunks(3) {
            a.push(rows);
            while let Some(f) = a.pop() {
                assert!(f.data.is_mapped());
                seen.push(f.data.device_address(0));
                assert_eq!(f.data, expected[f.seq as usize].data, "frame {}", f.seq);
                a.recycle(f);
            }
        }
        assert_eq!(seen.len(), expected.len());
        assert!(seen.iter().all(|&d| d == seen[0]));
        assert_eq!(made.load(Ordering::Relaxed), 1);
        // Frames held at once: the second is mapped, the third on the heap.
        let mut b = FrameAssembler::new(vec![2, 0], 3, 8, 3, 100.0, 0);
        b.set_allocator(a.alloc.clone());
        b.push(&input);
        let held: Vec<Frame> = std::iter::from_fn(|| b.pop()).collect();
        assert!(held[0].data.is_mapped() && !held[1].data.is_mapped());
        for (g, e) in held.iter().zip(&expected) {
            assert_eq!(g.data, e.data);
        }
    }

    #[test]
    fn hop_longer_than_frame_skips_samples() {
        let mut a = FrameAssembler::new(vec![0], 1, 4, 10, 100.0, 0);
        a.push(&ramp(1, 0, 35));
        let starts: Vec<u64> = std::iter::from_fn(|| a.pop())
            .map(|f| f.start_sample)
            .collect();
        assert_eq!(starts, vec![0, 10, 20, 30]);
    }

    #[test]
    fn a_gap_drops_the_frames_that_would_span_it() {
        let mut a = FrameAssembler::new(vec![0], 1, 8, 4, 100.0, 0);
        a.push(&ramp(1, 0, 10)); // frame 0 (0..8) done; frame 1 (4..12) partial
        assert_eq!(a.pop().unwrap().seq, 0);
        let lost = a.gap(5); // samples 10..15 lost
        // Frames 1 (4..12), 2 (8..16) and 3 (12..20) would include lost samples: next is 4 (16..24).
        assert_eq!(lost, 3);
        a.push(&ramp(1, 15, 20)); // samples 15..35
        let f = a.pop().unwrap();
        assert_eq!((f.seq, f.start_sample), (4, 16));
        assert_eq!(f.channel(0)[0], 16.0);
        assert_eq!(a.lost_frames, 3);
    }
}
