//! A measured ROC of the curves search's existence on the GPU bank (issue 38: thresholds from
//! noise-only input, set per second): one hour of noise-only frames on the harbour array through
//! a search track (the tracker's sizes and existence chain: 16,384 births and 8,192 continuing
//! particles, 0.02 births a second, 60 s lifetimes), counting how often the existence rises
//! over each threshold and how often it stays there for the confirmation hold; then sources at
//! −14, −10 and −6 dB per channel, 5 s each, counting how many are confirmed and how soon.
//!
//! Needs a GPU (an hour of frames takes minutes there); ignored by default:
//! `cargo test --release --test tbd_roc -- --ignored --nocapture`.

use rayon::prelude::*;
use sonotrack::bench::tbd_workload::{config, correlate, model, source_frames};
use sonotrack::gpu;
use sonotrack::track::filter::bernoulli::bank::{BankSizes, CurveBank};
use sonotrack::track::filter::bernoulli::existence::Chain;
use sonotrack::track::measure::curves::CurveModel;

const THRESHOLDS: [f64; 6] = [0.5, 0.7, 0.8, 0.9, 0.95, 0.99];
/// The confirmation hold (`tracker.curves.confirm_s`), seconds.
const HOLD_S: f64 = 1.0;

fn sizes() -> BankSizes {
    BankSizes {
        tracks: 1,
        n_birth: 16_384,
        n_cont: 8_192,
    }
}

/// The search track's existence and mean over `count` frames of a source at `s` (amplitude
/// `amp` over unit noise; none: noise), frames made `chunk` at a time on all cores.
fn run(
    bank: &mut dyn CurveBank,
    m: &CurveModel,
    s: Option<[f64; 3]>,
    amp: f32,
    count: usize,
    seed: u64,
) -> Vec<(f64, [f64; 3])> {
    let cfg = config(false);
    let chunk = 1024;
    let ok = vec![true; m.pairs()];
    let mut running = Vec::new();
    let mut out = Vec::with_capacity(count);
    for c in 0..count.div_ceil(chunk) {
        let n = chunk.min(count - c * chunk);
        let gcc: Vec<_> = (0..n)
            .into_par_iter()
            .map(|k| {
                let f = source_frames(&cfg, s, amp, 1, seed * 1_000_003 + (c * chunk + k) as u64);
                correlate(&cfg, &f).remove(0)
            })
            .collect();
        for g in &gcc {
            let mut f = m.frame(&g.curves, &ok, &mut running);
            f.candidates = m.peak_candidates(g, &ok);
            let (bf, prop) = m.bank_inputs(&f);
            let t = bank.step(&bf, &prop).expect("a step")[0];
            out.push((t.p_exist, [t.mean[0], t.mean[1], t.mean[2]]));
        }
        if count > 10 * chunk && c % 10 == 9 {
            eprintln!("  {} frames", out.len());
        }
    }
    out
}

/// Up-crossings of `th`, and runs at or over it for at least `hold` frames.
fn crossings(p: &[f64], th: f64, hold: usize) -> (usize, usize) {
    let (mut up, mut held, mut run) = (0, 0, 0);
    for (k, &v) in p.iter().enumerate() {
        if v >= th {
            if k == 0 || p[k - 1] < th {
                up += 1;
            }
            run += 1;
            if run == hold {
                held += 1;
            }
        } else {
            run = 0;
        }
    }
    (up, held)
}

#[test]
#[ignore]
fn roc_of_the_curves_search_on_the_gpu() {
    if let Err(why) = gpu::available() {
        eprintln!("skipped: {why}");
        return;
    }
    let cfg = config(false);
    let m = model(&cfg);
    let frame_s = cfg.hop_samples() as f64 / cfg.sample_rate_hz();
    let chain = Chain::per_second(0.02, 60.0, frame_s);
    let hold = (HOLD_S / frame_s).ceil() as usize;
    let packed = m.packed(None);
    // Minutes of noise (60 unless SONOTRACK_ROC_MINUTES says otherwise).
    let minutes: f64 = std::env::var("SONOTRACK_ROC_MINUTES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(60.0);
    let hour = (60.0 * minutes / frame_s).round() as usize;
    let t0 = std::time::Instant::now();
    let mut bank = gpu::curve_bank(&packed, sizes(), chain, 11, 0.0).expect("a GPU bank");
    let noise: Vec<f64> = run(bank.as_mut(), &m, None, 0.0, hour, 1)
        .iter()
        .map(|v| v.0)
        .collect();
    eprintln!(
        "noise: {hour} frames ({:.0} s of audio) in {:.0} s; largest existence {:.4}",
        hour as f64 * frame_s,
        t0.elapsed().as_secs_f64(),
        noise.iter().copied().fold(0.0, f64::max)
    );
    // Sources: 20 per amplitude, 20-60 m out, 5 s each, a fresh search each.
    let per_amp = 20;
    let frames = (5.0 / frame_s).round() as usize;
    let mut rows = Vec::new();
    for (db, amp) in [(-14.0, 0.2f32), (-10.0, 0.316), (-6.0, 0.5)] {
        let mut runs = Vec::new();
        for k in 0..per_amp {
            let mut r = sonotrack::rng::philox::PhiloxStream::new(
                77 + k as u64,
                0,
                sonotrack::rng::philox::Stream::Simulate,
            );
            let range = 20.0 + 40.0 * r.uniform_f64();
            let az = std::f64::consts::TAU * r.uniform_f64();
            let s = [
                range * az.cos(),
                range * az.sin(),
                -5.0 - 40.0 * r.uniform_f64(),
            ];
            let mut b =
                gpu::curve_bank(&packed, sizes(), chain, 100 + k as u64, 0.0).expect("a GPU bank");
            let out = run(b.as_mut(), &m, Some(s), amp, frames, 5000 + k as u64);
            runs.push((s, out));
        }
        rows.push((db, runs));
    }
    eprintln!(
        "| threshold | noise: crossings in {minutes} min | held {HOLD_S} s | -14 dB: confirmed, mean \
         s to confirm, within 2 m | -10 dB | -6 dB |"
    );
    for th in THRESHOLDS {
        let (up, held) = crossings(&noise, th, hold);
        let mut line = format!("| {th} | {up} | {held} |");
        for (_, runs) in &rows {
            let (mut n, mut t, mut near) = (0, 0.0, 0);
            for (s, out) in runs {
                let p: Vec<f64> = out.iter().map(|v| v.0).collect();
                // First frame at which a run of `hold` frames at or over th completes.
                let mut run = 0;
                let first = p.iter().position(|&v| {
                    run = if v >= th { run + 1 } else { 0 };
                    run >= hold
                });
                if let Some(k) = first {
                    n += 1;
                    t += (k + 1) as f64 * frame_s;
                    let x = out.last().expect("frames").1;
                    let d = (0..3).map(|i| (x[i] - s[i]).powi(2)).sum::<f64>().sqrt();
                    near += usize::from(d < 2.0);
                }
            }
            let mean_t = if n > 0 { t / n as f64 } else { f64::NAN };
            line += &format!(" {n}/{} , {mean_t:.2} s, {near} |", runs.len());
        }
        eprintln!("{line}");
    }
    eprintln!("total {:.0} s", t0.elapsed().as_secs_f64());
}
