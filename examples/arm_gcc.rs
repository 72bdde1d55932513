//! `cargo run --release --example arm_gcc`: what a one-frame correlation queued before its frame
//! is complete (`Correlator::arm`) saves. For a 4-channel, 4096-sample frame (the `tetra`
//! preset) in the correlator's mapped memory, medians over 400 frames of the call from `start`
//! to `finish`: plain, and queued ahead with the frame coming 0, 20, 100 and 1000 us after the
//! call was queued. Prints a line saying so and exits when no CUDA device is usable.

use std::time::{Duration, Instant};

use sonotrack::frame::Frame;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2] * 1e6
}

fn spin(d: Duration) {
    let t = Instant::now();
    while t.elapsed() < d {
        std::hint::spin_loop();
    }
}

fn main() {
    let mut spec = sonotrack::audio::sim::SceneSpec::preset("tetra").expect("the tetra preset");
    spec.duration_s = 1.0;
    let mut cfg = spec.config();
    cfg.gcc.frame_samples = Some(4096);
    let params = sonotrack::dsp::gcc::GccParams::from_config(&cfg);
    let mut cor = match sonotrack::gpu::correlator(params.clone(), 1) {
        Ok(c) if c.backend() == "cuda" => c,
        _ => {
            println!("arm_gcc: no CUDA device; nothing to measure");
            return;
        }
    };
    let (ch, n) = (params.channels, params.frame_len);
    let alloc = cor.frame_allocator();
    let mut f = match alloc.as_ref().and_then(|a| a(ch * n)) {
        Some(s) => Frame::with_samples(ch, n, 96_000.0, s),
        None => Frame::new(ch, n, 96_000.0),
    };
    for (i, v) in f.data.iter_mut().enumerate() {
        *v = ((i * 7919) % 2003) as f32 * 1e-4 - 0.1;
    }
    let mut out = vec![sonotrack::dsp::gcc::GccFrame::new(&params)];
    println!("frame in mapped memory: {}", f.data.is_mapped());
    for wait_us in [None, Some(0), Some(20), Some(100), Some(1000), None] {
        let mut call = Vec::new();
        let mut armed = true;
        for _ in 0..440 {
            if let Some(w) = wait_us {
                armed &= cor.arm().expect("arm");
                spin(Duration::from_micros(w));
            }
            let t = Instant::now();
            let started = cor.start(&[&f], false).expect("start");
            assert!(started);
            cor.finish(&[&f], &mut out, false).expect("finish");
            call.push(t.elapsed().as_secs_f64());
            spin(Duration::from_micros(50));
        }
        call.drain(..40);
        match wait_us {
            Some(w) => println!(
                "queued ahead (armed {armed}), frame {w:4} us later: call {:.1} us",
                median(call)
            ),
            None => println!(
                "plain:                               call {:.1} us",
                median(call)
            ),
        }
    }
}
