//! The lock-free ring between the audio callback and the worker: one producer (the callback),
//! one consumer (the worker), fixed capacity allocated up front. The producer never blocks,
//! allocates or locks: samples that do not fit are counted as an overflow and become a gap, which
//! the consumer sees in stream order (the frame assembler then restarts, so no frame spans
//! missing audio). Gaps found from the device's timestamps (xruns) travel the same way.

use std::cell::UnsafeCell;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Most gap markers in flight; more are merged into the last one.
const MARKERS: usize = 64;
/// A gap marker's length once the consumer has taken it: the producer no longer merges into it.
const TAKEN: u64 = u64::MAX;

struct Inner {
    buf: Box<[UnsafeCell<f32>]>,
    /// Samples ever written / read (monotonic; index = count % capacity).
    head: AtomicU64,
    tail: AtomicU64,
    /// Gap markers: (sample position in the stream of written samples, lost sample frames).
    marker_pos: Box<[AtomicU64]>,
    marker_len: Box<[AtomicU64]>,
    marker_head: AtomicU64,
    marker_tail: AtomicU64,
    /// Lost sample frames that found the marker queue full and its newest marker taken (the
    /// consumer reports them once no marker is pending).
    spill: AtomicU64,
    stats: Arc<RingStats>,
}

// SAFETY: the single producer only writes slots in [tail + capacity, head) after the consumer
// has released them (tail is read with Acquire), and the single consumer only reads slots in
// [tail, head) after the producer has published them (head is stored with Release); a slot is
// never accessed by both at once. The handles are not Clone, so there is one of each.
unsafe impl Sync for Inner {}
// SAFETY: as above; the buffer is plain data.
unsafe impl Send for Inner {}

/// Counters shared with whoever reports on the capture.
#[derive(Debug, Default)]
pub struct RingStats {
    /// Callbacks served.
    pub callbacks: AtomicU64,
    /// Sample frames that did not fit (the worker fell behind).
    pub overflow_frames: AtomicU64,
    /// Overflow events.
    pub overflows: AtomicU64,
    /// Device over-runs seen in the timestamps (audio the device lost before the callback).
    pub xruns: AtomicU64,
    pub xrun_frames: AtomicU64,
    /// The callback thread asked for real-time priority: 1 granted, 2 refused (0: not yet).
    pub rt_priority: AtomicU64,
    /// errno of the refusal.
    pub rt_errno: AtomicU64,
    /// The device reported an error (disconnected, broken stream).
    pub device_error: AtomicBool,
}

pub struct Producer {
    inner: Arc<Inner>,
    channels: usize,
}

pub struct Consumer {
    inner: Arc<Inner>,
    channels: usize,
}

/// A ring for `capacity_frames` frames of `channels` samples.
pub fn ring(capacity_frames: usize, channels: usize) -> (Producer, Consumer, Arc<RingStats>) {
    let cap = capacity_frames.max(1) * channels.max(1);
    let stats = Arc::new(RingStats::default());
    let inner = Arc::new(Inner {
        buf: (0..cap).map(|_| UnsafeCell::new(0.0)).collect(),
        head: AtomicU64::new(0),
        tail: AtomicU64::new(0),
        marker_pos: (0..MARKERS).map(|_| AtomicU64::new(0)).collect(),
        marker_len: (0..MARKERS).map(|_| AtomicU64::new(0)).collect(),
        marker_head: AtomicU64::new(0),
        marker_tail: AtomicU64::new(0),
        spill: AtomicU64::new(0),
        stats: stats.clone(),
    });
    (
        Producer {
            inner: inner.clone(),
            channels: channels.max(1),
        },
        Consumer {
            inner,
            channels: channels.max(1),
        },
        stats,
    )
}

impl Producer {
    /// Free space, in whole frames.
    pub fn free_frames(&self) -> usize {
        let cap = self.inner.buf.len() as u64;
        let used =
            self.inner.head.load(Ordering::Relaxed) - self.inner.tail.load(Ordering::Acquire);
        ((cap - used) / self.channels as u64) as usize
    }

    /// Record that `frames` sample frames are missing at the current write position.
    pub fn mark_gap(&mut self, frames: u64) {
        if frames == 0 {
            return;
        }
        let i = &self.inner;
        let pos = i.head.load(Ordering::Relaxed);
        let mh = i.marker_head.load(Ordering::Relaxed);
        let mt = i.marker_tail.load(Ordering::Acquire);
        if mh > mt {
            // Merge with the last marker when it is at the same position or the queue is full,
            // unless the consumer has taken it meanwhile (its length is then TAKEN: adding to
            // it after the consumer read it lost the frames).
            let last = ((mh - 1) % MARKERS as u64) as usize;
            let full = mh - mt >= MARKERS as u64;
            if full || i.marker_pos[last].load(Ordering::Relaxed) == pos {
                #[cfg(test)]
                tests::widen_race();
                let mut cur = i.marker_len[last].load(Ordering::Acquire);
                while cur != TAKEN {
                    match i.marker_len[last].compare_exchange_weak(
                        cur,
                        cur + frames,
                        Ordering::AcqRel,
                        Ordering::Acquire,
                    ) {
                        Ok(_) => return,
                        Err(now) => cur = now,
                    }
                }
                // Taken. With the queue still full the consumer is between taking it and
                // moving the marker tail: it reports these frames after the markers.
                if full && mh - i.marker_tail.load(Ordering::Acquire) >= MARKERS as u64 {
                    i.spill.fetch_add(frames, Ordering::Release);
                    return;
                }
            }
        }
        // A new marker: its slot was taken and released by the consumer (fewer than MARKERS
        // are in flight).
        let slot = (mh % MARKERS as u64) as usize;
        i.marker_pos[slot].store(pos, Ordering::Relaxed);
        i.marker_len[slot].store(frames, Ordering::Relaxed);
        i.marker_head.store(mh + 1, Ordering::Release);
    }

    /// Write `frames` interleaved frames, sample k produced by `sample(k)`. Frames that do not
    /// fit are dropped whole, counted, and become a gap. Returns the frames written.
    #[inline]
    pub fn push_with(&mut self, frames: usize, mut sample: impl FnMut(usize) -> f32) -> usize {
        let i = &self.inner;
        let fit = frames.min(self.free_frames());
        let n = fit * self.channels;
        let cap = i.buf.len() as u64;
        let head = i.head.load(Ordering::Relaxed);
        for k in 0..n {
            let slot = ((head + k as u64) % cap) as usize;
            // SAFETY: slots [head, head + n) are free (checked above against the consumer's
            // tail) and only this producer writes them (see the Sync impl).
            unsafe { *i.buf[slot].get() = sample(k) };
        }
        i.head.store(head + n as u64, Ordering::Release);
        if fit < frames {
            let lost = (frames - fit) as u64;
            i.stats.overflows.fetch_add(1, Ordering::Relaxed);
            i.stats.overflow_frames.fetch_add(lost, Ordering::Relaxed);
            self.mark_gap(lost);
        }
        fit
    }

    pub fn stats(&self) -> &RingStats {
        &self.inner.stats
    }
}

/// What the consumer got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pop {
    /// This many samples (whole frames) were copied.
    Samples(usize),
    /// This many sample frames are missing here in the stream.
    Gap(u64),
    /// Nothing available now.
    Empty,
}

impl Consumer {
    /// Copy available samples (whole frames, up to `out.len()`), or report a gap that comes
    /// before them in the stream.
    pub fn pop(&mut self, out: &mut [f32]) -> Pop {
        let i = &self.inner;
        let tail = i.tail.load(Ordering::Relaxed);
        let head = i.head.load(Ordering::Acquire);
        // A gap marker at or before the read position comes first.
        let mt = i.marker_tail.load(Ordering::Relaxed);
        let mh = i.marker_head.load(Ordering::Acquire);
        let mut limit = head;
        if mt < mh {
            let slot = (mt % MARKERS as u64) as usize;
            let pos = i.marker_pos[slot].load(Ordering::Relaxed);
            if pos <= tail {
                // Taken before the tail moves on, so the producer merges no more into it.
                let len = i.marker_len[slot].swap(TAKEN, Ordering::AcqRel);
                i.marker_tail.store(mt + 1, Ordering::Release);
                return Pop::Gap(len);
            }
            limit = limit.min(pos);
        } else if i.spill.load(Ordering::Acquire) > 0 {
            return Pop::Gap(i.spill.swap(0, Ordering::AcqRel));
        }
        let avail = (limit - tail) as usize;
        let n = (avail.min(out.len()) / self.channels) * self.channels;
        if n == 0 {
            return Pop::Empty;
        }
        let cap = i.buf.len() as u64;
        for (k, o) in out[..n].iter_mut().enumerate() {
            let slot = ((tail + k as u64) % cap) as usize;
            // SAFETY: slots [tail, head) were published by the producer (Acquire on head) and
            // are not written again until tail moves past them.
            *o = unsafe { *i.buf[slot].get() };
        }
        i.tail.store(tail + n as u64, Ordering::Release);
        Pop::Samples(n)
    }

    pub fn stats(&self) -> &RingStats {
        &self.inner.stats
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn order_overflow_and_gaps() {
        let (mut p, mut c, stats) = ring(4, 2);
        assert_eq!(p.push_with(3, |k| k as f32), 3);
        let mut out = [0.0; 16];
        assert_eq!(c.pop(&mut out), Pop::Samples(6));
        assert_eq!(&out[..6], &[0.0, 1.0, 2.0, 3.0, 4.0, 5.0]);
        // Fill, overflow by 2 frames: the gap comes after the 4 frames that fit.
        assert_eq!(p.push_with(6, |k| 100.0 + k as f32), 4);
        assert_eq!(stats.overflow_frames.load(Ordering::Relaxed), 2);
        assert_eq!(p.push_with(1, |_| 7.0), 0, "still full");
        assert_eq!(c.pop(&mut out), Pop::Samples(8));
        assert_eq!(out[0], 100.0);
        assert_eq!(c.pop(&mut out), Pop::Gap(3), "2 + 1 lost frames, merged");
        assert_eq!(c.pop(&mut out), Pop::Empty);
        p.push_with(1, |_| 9.0);
        assert_eq!(c.pop(&mut out), Pop::Samples(2));
        assert_eq!(out[0], 9.0);
        // A device gap between two writes.
        p.push_with(1, |_| 1.0);
        p.mark_gap(480);
        p.push_with(1, |_| 2.0);
        assert_eq!(c.pop(&mut out), Pop::Samples(2));
        assert_eq!(c.pop(&mut out), Pop::Gap(480));
        assert_eq!(c.pop(&mut out), Pop::Samples(2));
        assert_eq!(out[0], 2.0);
    }

    /// A producer thread and a consumer thread: every sample arrives once, in order, or is
    /// accounted as a gap.
    /// Tests may widen the window between the producer's look at the newest gap marker and
    /// its merge into it (where the consumer can take the marker).
    static WIDE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    pub(super) fn widen_race() {
        if WIDE.load(Ordering::Relaxed) {
            for _ in 0..50 {
                std::thread::yield_now();
            }
        }
    }

    #[test]
    fn gap_merged_while_taken_is_not_lost() {
        WIDE.store(true, Ordering::Relaxed);
        threads_keep_order_and_account_for_everything();
    }

    #[test]
    fn threads_keep_order_and_account_for_everything() {
        let (mut p, mut c, _stats) = ring(256, 3);
        let total_frames = 200_000usize;
        let prod = std::thread::spawn(move || {
            let mut next = 0usize;
            let mut written = 0usize;
            while next < total_frames {
                let n = 37.min(total_frames - next);
                let base = next;
                let w = p.push_with(n, |k| ((base * 3 + k) % 1_000_003) as f32);
                written += w;
                next += n;
                if next % 4096 < 37 {
                    std::thread::yield_now();
                }
            }
            written
        });
        let mut seen_frames = 0u64;
        let mut gap_frames = 0u64;
        let mut out = vec![0.0f32; 300];
        let mut expect = 0usize;
        while seen_frames + gap_frames < total_frames as u64 {
            match c.pop(&mut out) {
                Pop::Samples(n) => {
                    for v in &out[..n] {
                        assert_eq!(*v, (expect % 1_000_003) as f32);
                        expect += 1;
                    }
                    seen_frames += (n / 3) as u64;
                }
                Pop::Gap(g) => {
                    gap_frames += g;
                    expect += g as usize * 3;
                }
                Pop::Empty => std::thread::yield_now(),
            }
        }
        let written = prod.join().unwrap();
        assert_eq!(seen_frames, written as u64);
        assert_eq!(seen_frames + gap_frames, total_frames as u64);
    }
}
