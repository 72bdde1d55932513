//! The audio callback's work allocates nothing: a counting global allocator watches the thread
//! that runs `CallbackState::on_data` (the function the cpal callback calls) over many buffers of
//! every sample format, with over-runs and a ring that overflows.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};

use sonotrack::audio::callback::CallbackState;
use sonotrack::audio::ring::ring;

struct Counting;

static ALLOCS: AtomicU64 = AtomicU64::new(0);

thread_local! {
    static WATCH: Cell<bool> = const { Cell::new(false) };
}

// SAFETY: forwards to the system allocator unchanged; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if WATCH.with(|w| w.get()) {
            ALLOCS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: the caller's contract is passed on.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if WATCH.with(|w| w.get()) {
            ALLOCS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: as above.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

#[test]
fn the_callback_allocates_nothing() {
    let ch = 8;
    let (p, mut c, stats) = ring(4096, ch);
    // Real-time priority is asked for on the first call too (a syscall, no allocation).
    let mut cb = CallbackState::new(p, ch, 48_000.0, 512, Some(10));
    let i16s = vec![1000i16; 512 * ch];
    let i32s = vec![1 << 20; 512 * ch];
    let f32s = vec![0.25f32; 512 * ch];
    let mut out = vec![0.0f32; 4096 * ch];
    let mut t = 1_000_000_000u128;
    let period = 512u128 * 1_000_000_000 / 48_000;
    WATCH.with(|w| w.set(true));
    for k in 0..3000u32 {
        // Every 100th buffer comes late (an over-run); the ring is drained only now and then,
        // so it also overflows.
        if k % 100 == 99 {
            t += 5 * period;
        }
        match k % 3 {
            0 => cb.on_data(&i16s, Some(t)),
            1 => cb.on_data(&i32s, Some(t)),
            _ => cb.on_data(&f32s, Some(t)),
        }
        t += period;
        if k % 16 == 0 {
            WATCH.with(|w| w.set(false));
            while !matches!(c.pop(&mut out), sonotrack::audio::ring::Pop::Empty) {}
            WATCH.with(|w| w.set(true));
        }
    }
    WATCH.with(|w| w.set(false));
    assert_eq!(ALLOCS.load(Ordering::Relaxed), 0, "the callback allocated");
    assert_eq!(stats.callbacks.load(Ordering::Relaxed), 3000);
    assert!(stats.xruns.load(Ordering::Relaxed) >= 29);
    assert!(stats.overflows.load(Ordering::Relaxed) > 0);
    assert_ne!(stats.rt_priority.load(Ordering::Relaxed), 0);
}
