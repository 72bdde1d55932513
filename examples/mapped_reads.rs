//! `cargo run --release --example mapped_reads`: where a live frame's host time goes when its
//! samples lie in the CUDA correlator's mapped memory (see `Correlator::frame_allocator`)
//! rather than on the heap. For a 4-channel, 4096-sample frame (the `tetra` preset), medians over
//! 400 frames of: writing the frame (with plain stores, as the assembler does, or with the
//! non-temporal stores of the correlator's own staging copy), the input checks alone, the checks
//! while the GPU correlates the frame, and the whole correlation call (start, checks, finish).
//! Prints a line saying so and exits when no CUDA device is usable.

use std::time::Instant;

use sonotrack::audio::frame::Frame;
use sonotrack::dsp::health::{FrameHealth, inspect};
use sonotrack::gpu::cuda::host::copy_for_device;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2] * 1e6
}

fn main() {
    let mut spec = sonotrack::audio::sim::SceneSpec::preset("tetra").expect("the tetra preset");
    spec.duration_s = 1.0;
    let mut cfg = sonotrack::config::Config::for_scene(&spec);
    cfg.gcc.frame_samples = Some(4096);
    let params = cfg.gcc_params();
    let mut cor = match sonotrack::gpu::correlator(params.clone(), 1) {
        Ok(c) if c.backend() == "cuda" => c,
        _ => {
            println!("mapped_reads: no CUDA device; nothing to measure");
            return;
        }
    };
    let (ch, n) = (params.channels, params.frame_len);
    let src: Vec<f32> = (0..ch * n)
        .map(|i| ((i * 7919) % 2003) as f32 * 1e-4 - 0.1)
        .collect();
    let alloc = cor.frame_allocator();
    let mut out = vec![sonotrack::dsp::gcc::GccFrame::new(&params)];
    println!("mode                      write   checks alone   checks beside GPU   call (us)");
    for mode in [
        "heap, plain stores",
        "mapped, non-temporal",
        "mapped, plain stores",
    ] {
        let mut f = if mode.starts_with("heap") {
            Frame::new(ch, n, 96_000.0)
        } else {
            match alloc.as_ref().and_then(|a| a(ch * n)) {
                Some(s) => Frame::with_samples(ch, n, 96_000.0, s),
                None => {
                    println!("{mode:24}: the correlator gives no mapped memory");
                    continue;
                }
            }
        };
        let mut h = FrameHealth::default();
        let (mut write, mut alone, mut beside, mut call) = (vec![], vec![], vec![], vec![]);
        for i in 0..440 {
            let t = Instant::now();
            if mode.ends_with("non-temporal") {
                copy_for_device(&mut f.data, &src);
            } else {
                f.data.copy_from_slice(&src);
            }
            let t_write = t.elapsed().as_secs_f64();
            let t = Instant::now();
            inspect(&mut f, &mut h);
            let t_alone = t.elapsed().as_secs_f64();
            // Again, beside the GPU, from memory as the assembler leaves it.
            if mode.ends_with("non-temporal") {
                copy_for_device(&mut f.data, &src);
            } else {
                f.data.copy_from_slice(&src);
            }
            let t0 = Instant::now();
            let started = cor.start(&[&f], false).expect("start");
            let t1 = Instant::now();
            inspect(&mut f, &mut h);
            let t2 = Instant::now();
            if started {
                cor.finish(&[&f], &mut out, false).expect("finish");
            }
            let t3 = Instant::now();
            if i >= 40 {
                write.push(t_write);
                alone.push(t_alone);
                beside.push((t2 - t1).as_secs_f64());
                call.push((t3 - t0).as_secs_f64());
            }
        }
        println!(
            "{mode:24} {:7.2} {:14.2} {:19.2} {:11.2}",
            median(write),
            median(alone),
            median(beside),
            median(call)
        );
    }
}
