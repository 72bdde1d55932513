//! Systematic resampling. Output slot j takes the particle whose interval of the cumulative
//! weights contains `(u0 + j) / N`: a single uniform per track and frame, and each particle is
//! copied either floor(N w) or ceil(N w) times. The GPU finds each slot's ancestor by binary
//! search (one thread per slot, balanced work); the CPU walks the sorted positions, a block of
//! slots at a time, each block starting from a binary search. Both give the same ancestors for
//! the same cumulative sums.

/// Inclusive prefix sums of `weights` (need not be normalised), in f64.
pub fn cumulative(weights: impl Iterator<Item = f64>, out: &mut Vec<f64>) {
    out.clear();
    let mut acc = 0.0f64;
    for w in weights {
        acc += w;
        out.push(acc);
    }
}

/// Output slots per block: the filter resamples blocks in parallel, each fused with the gather
/// of its particles (see `CpuParticleFilter::step_one`).
pub const BLOCK: usize = 1024;

/// Slots `j0..j0 + out.len()` of `n`, by a walk from the block's first ancestor (found by binary
/// search). Each slot probes the next four cumulative sums at once instead of stepping one by
/// one, so irregular copy counts cost neither mispredicted branches nor a chain of dependent
/// loads.
/// (Counting each particle's slots instead, from an estimate corrected against the exact
/// targets, was measured slower twice: 4x with a rounding call and divisions per particle, and
/// still 1.4x with the targets tabulated per block.)
pub fn systematic_block(cdf: &[f64], u0: f64, j0: usize, n: usize, out: &mut [u32]) {
    let len = cdf.len();
    if len == 0 || out.is_empty() {
        out.fill(0);
        return;
    }
    let total = cdf[len - 1];
    let mut targets = [0.0f64; BLOCK];
    let mut i = ancestor(cdf, u0, j0, n) as usize;
    for (base, o) in out.chunks_mut(BLOCK).enumerate() {
        let jb = j0 + base * BLOCK;
        let t = &mut targets[..o.len()];
        for (k, t) in t.iter_mut().enumerate() {
            *t = (u0 + (jb + k) as f64) / n as f64 * total;
        }
        let at = |i: usize| cdf.get(i).copied().unwrap_or(f64::INFINITY);
        for (o, &t) in o.iter_mut().zip(t.iter()) {
            // Four probes at once: the cumulative sums are sorted, so the ones at or below the
            // target form a prefix and their count is the step (most slots move 0-2 places, so
            // the loop rarely goes round twice).
            loop {
                let step = usize::from(at(i) <= t)
                    + usize::from(at(i + 1) <= t)
                    + usize::from(at(i + 2) <= t)
                    + usize::from(at(i + 3) <= t);
                i += step;
                if step < 4 {
                    break;
                }
            }
            *o = i.min(len - 1) as u32;
        }
    }
}

/// The ancestor of one output slot by binary search (the GPU's form).
pub fn ancestor(cdf: &[f64], u0: f64, j: usize, n: usize) -> u32 {
    let total = cdf.last().copied().unwrap_or(0.0);
    let target = (u0 + j as f64) / n as f64 * total;
    // First index whose cumulative weight exceeds the target.
    let idx = cdf.partition_point(|&c| c <= target);
    idx.min(cdf.len() - 1) as u32
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// All slots in one walk.
    fn systematic(cdf: &[f64], u0: f64, out: &mut [u32]) {
        systematic_block(cdf, u0, 0, out.len(), out);
    }

    /// Blocks of slots in parallel, as the filter runs them.
    fn systematic_par(cdf: &[f64], u0: f64, out: &mut [u32]) {
        use rayon::prelude::*;
        let n = out.len();
        out.par_chunks_mut(BLOCK)
            .enumerate()
            .for_each(|(b, o)| systematic_block(cdf, u0, b * BLOCK, n, o));
    }

    proptest! {
        /// The count is kept, each particle is copied floor(Nw) or ceil(Nw) times (which makes
        /// the scheme unbiased: E[copies] = N w), and the binary-search form agrees.
        #[test]
        fn counts_are_kept_and_unbiased(
            w in proptest::collection::vec(prop_oneof![Just(0.0f64), 0.0f64..1.0, 0.0f64..1e-9], 1..3000),
            u0 in 0.0001f64..0.9999,
        ) {
            prop_assume!(w.iter().sum::<f64>() > 1e-6);
            let n = w.len();
            let mut cdf = Vec::new();
            cumulative(w.iter().copied(), &mut cdf);
            let mut anc = vec![0u32; n];
            systematic(&cdf, u0, &mut anc);
            prop_assert_eq!(anc.len(), n);
            let mut par = vec![0u32; n];
            systematic_par(&cdf, u0, &mut par);
            prop_assert_eq!(&par, &anc);
            let total: f64 = w.iter().sum();
            let mut copies = vec![0usize; n];
            for (j, &a) in anc.iter().enumerate() {
                prop_assert_eq!(a, ancestor(&cdf, u0, j, n));
                copies[a as usize] += 1;
            }
            for (i, &c) in copies.iter().enumerate() {
                let expect = n as f64 * w[i] / total;
                // floor(N w) or ceil(N w) copies (a hair of slack for rounding at exact integers).
                prop_assert!((c as f64 - expect).abs() < 1.0 + 1e-6, "particle {} copied {} times, expected {}", i, c, expect);
            }
            // Zero-weight particles are never chosen.
            for (i, &c) in copies.iter().enumerate() {
                if w[i] == 0.0 {
                    prop_assert_eq!(c, 0);
                }
            }
        }
    }

    /// Blocks in parallel give the same ancestors as one walk and as the binary search.
    #[test]
    fn parallel_blocks_match_the_walk() {
        for &n in &[1usize, 7, BLOCK, BLOCK + 1, 3 * BLOCK + 17] {
            let w: Vec<f64> = (0..n)
                .map(|i| {
                    let x = (i as f64 * 0.618_033_988_7).fract();
                    if i % 5 == 0 { 0.0 } else { x * x * x }
                })
                .collect();
            let mut cdf = Vec::new();
            cumulative(w.iter().copied(), &mut cdf);
            for &u0 in &[0.001, 0.5, 0.999] {
                let mut a = vec![0u32; n];
                let mut b = vec![0u32; n];
                systematic(&cdf, u0, &mut a);
                systematic_par(&cdf, u0, &mut b);
                assert_eq!(a, b, "n {n}, u0 {u0}");
                for (j, &x) in a.iter().enumerate() {
                    assert_eq!(x, ancestor(&cdf, u0, j, n));
                }
            }
        }
    }

    /// Averaged over u0, the copies of each particle equal N w exactly (unbiasedness).
    #[test]
    fn average_over_offsets_is_n_w() {
        let w = [0.05, 0.3, 0.001, 0.249, 0.4];
        let n = w.len();
        let mut cdf = Vec::new();
        cumulative(w.iter().copied(), &mut cdf);
        let trials = 10_000;
        let mut copies = [0.0f64; 5];
        let mut anc = vec![0u32; n];
        for t in 0..trials {
            systematic(&cdf, (t as f64 + 0.5) / trials as f64, &mut anc);
            for &a in &anc {
                copies[a as usize] += 1.0;
            }
        }
        for i in 0..n {
            let mean = copies[i] / trials as f64;
            assert!((mean - n as f64 * w[i]).abs() < 1e-3, "{i}: {mean}");
        }
    }
}
