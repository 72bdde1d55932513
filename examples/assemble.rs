//! `cargo run --release --example assemble`: the frame assembler's time per frame for 30 s of
//! 4-channel audio at 96 kHz pushed in capture periods of 1024 sample frames (frames of 4096
//! samples, hop 2048, frames recycled as the pipeline does); the best of five passes.

fn main() {
    let ch = 4;
    let rows = 96_000 * 30;
    let data: Vec<f32> = (0..rows * ch).map(|i| (i % 1000) as f32 * 1e-3).collect();
    let mut best = f64::MAX;
    for _ in 0..5 {
        let mut asm = sonotrack::audio::assembler::FrameAssembler::new(
            vec![0, 1, 2, 3],
            ch,
            4096,
            2048,
            96_000.0,
            0,
        );
        let t = std::time::Instant::now();
        let mut frames = 0u32;
        for period in data.chunks(1024 * ch) {
            asm.push(period);
            while let Some(f) = asm.pop() {
                frames += 1;
                asm.recycle(std::hint::black_box(f));
            }
        }
        best = best.min(t.elapsed().as_secs_f64() / f64::from(frames.max(1)));
    }
    println!("frame assembler: {:.2} us per frame", best * 1e6);
}
