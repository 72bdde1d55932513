//! Frame assembly: interleaved input samples in, planar frames out.
//!
//! Frame k always starts at sample `origin + k * hop`, so a frame's sequence number says where it
//! sits in the stream. Each incoming sample is written straight into every frame that contains
//! it (overlapping frames are filled side by side), so a frame leaves as soon as its last sample
//! is written, without a copy; with a backend's allocator (`set_allocator`) it is then already
//! in the memory the GPU reads. After a gap (lost audio), the partial frames are discarded and
//! assembly resumes at the first grid position after the gap: a frame never spans missing
//! audio, and the frames that could not be formed are counted.

use std::collections::VecDeque;

use crate::audio::frame::{Frame, FrameAlloc};

pub struct FrameAssembler {
    map: Vec<usize>,
    in_channels: usize,
    frame_len: usize,
    hop: usize,
    sample_rate_hz: f64,
    origin: u64,
    /// Frames being filled, oldest first: each holds its samples from its start up to `clock`.
    /// Samples go straight into every frame they belong to (with overlapping frames, into
    /// several), so a frame is complete, without a copy, when its last sample arrives.
    open: VecDeque<Frame>,
    /// Start of the next frame to open (a grid position).
    next_start: u64,
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
        Self {
            map,
            in_channels,
            frame_len: frame_len.max(1),
            hop: hop.max(1),
            sample_rate_hz,
            origin,
            open: VecDeque::new(),
            next_start: origin,
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
        let ch = self.in_channels.max(1);
        let n = self.frame_len as u64;
        // Whole sample frames only (a partial one at the end is ignored).
        let mut rest = &interleaved[..interleaved.len() / ch * ch];
        while !rest.is_empty() {
            let rows = (rest.len() / ch) as u64;
            if self.clock == self.next_start {
                self.open_frame();
            }
            // Up to the next event: a frame starts or the oldest one is complete.
            let mut take = rows;
            if self.next_start > self.clock {
                take = take.min(self.next_start - self.clock);
            }
            let Some(oldest) = self.open.front() else {
                // No frame wants these samples (a hop longer than a frame, or after a gap).
                rest = &rest[take as usize * ch..];
                self.clock += take;
                continue;
            };
            take = take.min(oldest.start_sample + n - self.clock);
            let (chunk, tail) = rest.split_at(take as usize * ch);
            for f in self.open.iter_mut() {
                let at = (self.clock - f.start_sample) as usize;
                write_rows(f, &self.map, ch, at, chunk);
            }
            self.clock += take;
            rest = tail;
            while self
                .open
                .front()
                .is_some_and(|f| f.start_sample + n == self.clock)
            {
                if let Some(f) = self.open.pop_front() {
                    self.ready.push_back(f);
                }
            }
        }
    }

    /// Start filling the frame that begins at `next_start` (== `clock`).
    fn open_frame(&mut self) {
        let (n, sensors) = (self.frame_len, self.map.len());
        let mut frame = self.pool.pop().unwrap_or_else(|| {
            match self.alloc.as_ref().and_then(|a| a(sensors * n)) {
                Some(data) => Frame::with_samples(sensors, n, self.sample_rate_hz, data),
                None => Frame::new(sensors, n, self.sample_rate_hz),
            }
        });
        frame.start_sample = self.next_start;
        frame.seq = (self.next_start - self.origin) / self.hop as u64;
        frame.wall_clock = None;
        // A new fill: nothing of it has been sent ahead.
        frame.data.send_ahead(0, n);
        self.open.push_back(frame);
        self.next_start += self.hop as u64;
    }

    /// `lost` sample frames are missing before the next push. Returns the frames lost with them.
    pub fn gap(&mut self, lost: u64) -> u64 {
        if lost == 0 {
            return 0;
        }
        self.clock += lost;
        let hop = self.hop as u64;
        // The oldest frame not yet complete (open, or the next to open).
        let first = self
            .open
            .front()
            .map_or(self.next_start, |f| f.start_sample);
        let old_k = (first - self.origin) / hop;
        // First grid start at or after the end of the gap.
        let new_k = (self.clock - self.origin).div_ceil(hop);
        let lost_frames = new_k.saturating_sub(old_k);
        self.next_start = self.origin + new_k * hop;
        while let Some(f) = self.open.pop_front() {
            self.recycle(f);
        }
        self.lost_frames += lost_frames;
        lost_frames
    }

    /// Send the samples written so far into the frames still being filled to the device whose
    /// memory they are in (see [`crate::audio::frame::MappedSamples::send_ahead`]), so that a frame's
    /// correlation has only its last samples to read over the bus. For the time between
    /// frames (after processing those complete), not for the push that completes a frame:
    /// with frames on the heap it does nothing.
    pub fn send_ahead(&mut self) {
        let n = self.frame_len;
        for f in self.open.iter_mut() {
            // (Open frames are never complete: clock - start < n.)
            let rows = (self.clock - f.start_sample).min(n as u64) as usize;
            f.data.send_ahead(rows, n);
        }
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

/// Write interleaved `chunk` (rows of `ch` input channels) into frame `f` from sample `at`:
/// a sensor at a time, one input channel's samples into its contiguous row (faster than a
/// sample at a time across the sensors, when measured with the earlier assembler).
///
/// `cargo run --release --example assemble` (4 channels, frames of 4096 samples, hop 2048) on
/// dev-cpu, 2026-11-23: 5.2-8.5 us per frame, against 29.3-30.2 for the assembler that gathered
/// each frame in a buffer of its own and copied it out (and the buffer's overlap down) when it
/// was complete (`efce105`).
fn write_rows(f: &mut Frame, map: &[usize], ch: usize, at: usize, chunk: &[f32]) {
    let n = f.len;
    let take = chunk.len() / ch;
    // Samples from `at` on: past whatever was sent ahead (see `FrameAssembler::send_ahead`).
    let data = f.data.appending();
    for (s, &c) in map.iter().enumerate() {
        let row = &mut data[s * n + at..s * n + at + take];
        for (d, r) in row.iter_mut().zip(chunk.chunks_exact(ch)) {
            *d = r[c];
        }
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

    impl crate::audio::frame::MappedSamples for Mapped {
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

    /// An allocator that gives `k` buffers, then none; and how many it was asked for.
    fn limited(
        k: usize,
    ) -> (
        crate::audio::frame::FrameAlloc,
        std::sync::Arc<std::sync::atomic::AtomicUsize>,
    ) {
        use std::sync::atomic::Ordering;
        let asked = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counter = asked.clone();
        let alloc: crate::audio::frame::FrameAlloc = std::sync::Arc::new(move |n| {
            (counter.fetch_add(1, Ordering::Relaxed) < k)
                .then(|| crate::audio::frame::Samples::mapped(Box::new(Mapped(vec![0.0; n]))))
        });
        (alloc, asked)
    }

    /// Frames made by an allocator carry its memory and the same samples as heap frames; when
    /// the allocator has none to give, frames go on the heap; recycled frames are reused, so
    /// that frames taken one at a time need only the frames that overlap (8-sample frames,
    /// hop 3: three filling, one out).
    #[test]
    fn an_allocator_gives_frames_its_memory() {
        use std::sync::atomic::Ordering;
        let input = ramp(3, 0, 100);
        let mut heap = FrameAssembler::new(vec![2, 0], 3, 8, 3, 100.0, 0);
        heap.push(&input);
        let expected: Vec<Frame> = std::iter::from_fn(|| heap.pop()).collect();
        let (alloc, asked) = limited(4);
        let mut a = FrameAssembler::new(vec![2, 0], 3, 8, 3, 100.0, 0);
        a.set_allocator(Some(alloc));
        let mut buffers = std::collections::HashSet::new();
        let mut seen = 0;
        for rows in input.chunks(3) {
            a.push(rows);
            while let Some(f) = a.pop() {
                assert!(f.data.is_mapped(), "frame {}", f.seq);
                buffers.insert(f.data.device_address(0));
                assert_eq!(f.data, expected[f.seq as usize].data, "frame {}", f.seq);
                seen += 1;
                a.recycle(f);
            }
        }
        assert_eq!(seen, expected.len());
        assert!(buffers.len() <= 4, "{} buffers", buffers.len());
        assert!(asked.load(Ordering::Relaxed) <= 4);
        // Frames held at once: the first four mapped, the rest on the heap.
        let (alloc, _) = limited(4);
        let mut b = FrameAssembler::new(vec![2, 0], 3, 8, 3, 100.0, 0);
        b.set_allocator(Some(alloc));
        b.push(&input);
        let held: Vec<Frame> = std::iter::from_fn(|| b.pop()).collect();
        assert_eq!(held.len(), expected.len());
        for (i, (g, e)) in held.iter().zip(&expected).enumerate() {
            assert_eq!(g.data.is_mapped(), i < 4, "frame {i}");
            assert_eq!(g.data, e.data);
        }
    }

    /// Heap memory with a "device" copy of its first samples, kept as a GPU backend keeps it:
    /// `send_ahead` copies each channel's newly final samples, any write through
    /// `as_mut_slice` drops the copy, `appending` keeps it.
    struct Ahead {
        host: Vec<f32>,
        device: Vec<f32>,
        sent: usize,
        sends: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    }

    impl crate::audio::frame::MappedSamples for Ahead {
        fn as_slice(&self) -> &[f32] {
            &self.host
        }
        fn as_mut_slice(&mut self) -> &mut [f32] {
            self.sent = 0;
            &mut self.host
        }
        fn appending(&mut self) -> &mut [f32] {
            &mut self.host
        }
        fn device_address(&self, _owner: usize) -> Option<u64> {
            Some(1)
        }
        fn send_ahead(&mut self, rows: usize, len: usize) {
            if rows < self.sent || rows == 0 {
                self.sent = 0;
            }
            for c in 0..self.host.len() / len {
                let r = c * len + self.sent..c * len + rows;
                self.device[r.clone()].copy_from_slice(&self.host[r]);
            }
            if rows > self.sent {
                self.sends
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            self.sent = rows;
        }
        fn sent_rows(&self) -> usize {
            self.sent
        }
        /// (Checks that the copy is the host's samples, as a device would read them.)
        fn sent_ahead(&self, _owner: usize, stream: u64) -> Option<(u64, usize)> {
            let len = stream as usize;
            for c in 0..self.host.len() / len {
                let r = c * len..c * len + self.sent;
                assert_eq!(self.device[r.clone()], self.host[r], "channel {c}");
            }
            (self.sent > 0).then_some((2, self.sent))
        }
    }

    /// Samples sent ahead between pushes are exactly the complete frame's first samples (what a
    /// device would read from its copy), never a whole frame, and a new fill or any other
    /// writer drops them; frames on the heap send nothing.
    #[test]
    fn samples_sent_ahead_are_the_frames_own() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let (frame, hop, ch, period) = (16usize, 8usize, 3usize, 4usize);
        let sends = std::sync::Arc::new(AtomicUsize::new(0));
        let counter = sends.clone();
        let alloc: crate::audio::frame::FrameAlloc = std::sync::Arc::new(move |n| {
            Some(crate::audio::frame::Samples::mapped(Box::new(Ahead {
                host: vec![0.0; n],
                device: vec![f32::NAN; n],
                sent: 0,
                sends: counter.clone(),
            })))
        });
        let input = ramp(ch, 0, 200);
        let mut a = FrameAssembler::new(vec![2, 0], ch, frame, hop, 100.0, 0);
        a.set_allocator(Some(alloc));
        let mut plain = FrameAssembler::new(vec![2, 0], ch, frame, hop, 100.0, 0);
        let (mut frames, mut with_copy) = (0, 0);
        for rows in input.chunks(period * ch) {
            a.push(rows);
            plain.push(rows);
            while let Some(mut f) = a.pop() {
                let e = plain.pop().unwrap();
                assert_eq!(f.data, e.data);
                frames += 1;
                // (The fake takes the frame's length for a stream, and checks its copy.)
                if let Some((_, sent)) = f.data.sent_ahead(0, frame as u64) {
                    with_copy += 1;
                    assert!(sent >= hop && sent < frame, "frame {}: {sent} sent", f.seq);
                    assert_eq!(f.data.sent_rows(), sent);
                }
                // Any other writer drops the copy (the checks zeroing a NaN, say).
                f.channel_mut(0)[0] = -1.0;
                assert_eq!(f.data.sent_ahead(0, frame as u64), None);
                assert_eq!(f.data.sent_rows(), 0);
                a.recycle(f);
            }
            a.send_ahead();
        }
        assert!(frames >= 20);
        // Every frame after the first had its first half or more sent while it filled.
        assert!(with_copy >= frames - 1, "{with_copy} of {frames}");
        assert!(sends.load(Ordering::Relaxed) >= 2 * (frames - 1));
        // On the heap: nothing to send, nothing sent.
        let mut h = FrameAssembler::new(vec![0], 1, 8, 4, 100.0, 0);
        h.push(&ramp(1, 0, 6));
        h.send_ahead();
        h.push(&ramp(1, 6, 6));
        assert_eq!(h.pop().unwrap().data.sent_ahead(0, 8), None);
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
