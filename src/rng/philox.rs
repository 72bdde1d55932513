//! Philox4x32-10 counter-based random numbers (Salmon et al., SC'11), identical on the CPU and in
//! `kernels/philox.cuh`, so both backends draw the same numbers for the same particle.
//!
//! Keying: key = the 64-bit seed; counter = (particle, track slot | stream << 16, frame low,
//! frame high). Each (seed, frame, track, particle, stream) gives four independent 32-bit words.

/// What a draw is for; part of the counter so that different uses never share numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum Stream {
    /// Process noise of the motion model (four normals).
    Predict = 0,
    /// Model switching (one uniform) and spare words.
    Switch = 1,
    /// Particle initialisation (two calls' worth: position and velocity).
    InitPosition = 2,
    InitVelocity = 3,
    /// The one uniform offset of systematic resampling (particle index 0).
    Resample = 4,
    /// Simulator noise and source signals (track = channel).
    Simulate = 5,
    /// Regularisation jitter after a resampling (one block: six normals, `normals6`).
    Roughen = 6,
}

const M0: u32 = 0xD251_1F53;
const M1: u32 = 0xCD9E_8D57;
const W0: u32 = 0x9E37_79B9;
const W1: u32 = 0xBB67_AE85;

/// One Philox4x32 block with 10 rounds.
#[inline(always)]
pub fn philox4x32_10(mut ctr: [u32; 4], key: [u32; 2]) -> [u32; 4] {
    let (mut k0, mut k1) = (key[0], key[1]);
    for round in 0..10 {
        if round > 0 {
            k0 = k0.wrapping_add(W0);
            k1 = k1.wrapping_add(W1);
        }
        let p0 = u64::from(M0) * u64::from(ctr[0]);
        let p1 = u64::from(M1) * u64::from(ctr[2]);
        let (hi0, lo0) = ((p0 >> 32) as u32, p0 as u32);
        let (hi1, lo1) = ((p1 >> 32) as u32, p1 as u32);
        ctr = [hi1 ^ ctr[1] ^ k0, lo1, hi0 ^ ctr[3] ^ k1, lo0];
    }
    ctr
}

/// The four words for (seed, frame, track, particle, stream).
#[inline(always)]
pub fn draw(seed: u64, frame: u64, track: u32, particle: u32, stream: Stream) -> [u32; 4] {
    let ctr = [
        particle,
        (track & 0xFFFF) | ((stream as u32) << 16),
        frame as u32,
        (frame >> 32) as u32,
    ];
    philox4x32_10(ctr, [seed as u32, (seed >> 32) as u32])
}

/// A uniform in the open interval (0, 1), from the top 23 bits: every value is exact in f32, so
/// both backends agree bit for bit and neither 0 nor 1 can occur (Box–Muller takes a logarithm).
#[inline(always)]
pub fn uniform(word: u32) -> f32 {
    (word >> 9) as f32 * (1.0 / 8_388_608.0) + (0.5 / 8_388_608.0)
}

/// A second uniform from a block whose four words make normals (`normals4` reads the top 23 bits
/// of each): the low 9 bits of words 0 and 1 and the low 5 of word 2, 23 bits that `normals4`
/// leaves alone, scaled as `uniform` (exact in f32, in the open interval). A filter step takes
/// its model-switch uniform from here instead of from a Philox block of its own: the GPU step
/// spent about 80 of its 2,350 instructions per particle on that block, for one word.
#[inline(always)]
pub fn spare_uniform(w: [u32; 4]) -> f32 {
    let bits = ((w[0] & 0x1ff) << 14) | ((w[1] & 0x1ff) << 5) | (w[2] & 0x1f);
    // Scaled as a word's top 23 bits.
    uniform(bits << 9)
}

/// Four standard normals from one block by Box–Muller (both the cosine and sine branches),
/// with the branch-free `fastmath` approximations, so that scalar and vectorised code draw the
/// very same numbers.
#[inline(always)]
pub fn normals4(w: [u32; 4]) -> [f32; 4] {
    let (a0, a1) = crate::math::fastmath::box_muller(uniform(w[0]), uniform(w[1]));
    let (b0, b1) = crate::math::fastmath::box_muller(uniform(w[2]), uniform(w[3]));
    [a0, a1, b0, b1]
}

/// Six uniforms in (0, 1) from one block: its 128 bits cut into six 21-bit fields (the two low
/// bits of the last word unused), each scaled as `uniform` scales 23 (exact in f32, never 0 or 1).
#[inline(always)]
pub fn uniforms6(w: [u32; 4]) -> [f32; 6] {
    let f = [
        w[0] >> 11,
        ((w[0] & 0x7ff) << 10) | (w[1] >> 22),
        (w[1] >> 1) & 0x1f_ffff,
        ((w[1] & 1) << 20) | (w[2] >> 12),
        ((w[2] & 0xfff) << 9) | (w[3] >> 23),
        (w[3] >> 2) & 0x1f_ffff,
    ];
    f.map(|b| b as f32 * (1.0 / 2_097_152.0) + (0.5 / 2_097_152.0))
}

/// Six standard normals from one block (`uniforms6`, three Box–Muller pairs), where `normals4`
/// would need two blocks: the regularisation's draw (a block is about 70 GPU instructions, a
/// sixth of the jitter's cost). The 21-bit uniforms cut the normals' tails at 5.5 sigma.
#[inline(always)]
pub fn normals6(w: [u32; 4]) -> [f32; 6] {
    let u = uniforms6(w);
    let (a0, a1) = crate::math::fastmath::box_muller(u[0], u[1]);
    let (b0, b1) = crate::math::fastmath::box_muller(u[2], u[3]);
    let (c0, c1) = crate::math::fastmath::box_muller(u[4], u[5]);
    [a0, a1, b0, b1, c0, c1]
}

/// A sequential generator over one (seed, track, stream) for code that wants a stream of numbers
/// rather than per-particle draws (the simulator, property tests).
#[derive(Debug, Clone)]
pub struct PhiloxStream {
    seed: u64,
    track: u32,
    stream: Stream,
    block: u64,
    buf: [u32; 4],
    used: usize,
}

impl PhiloxStream {
    pub fn new(seed: u64, track: u32, stream: Stream) -> Self {
        Self {
            seed,
            track,
            stream,
            block: 0,
            buf: [0; 4],
            used: 4,
        }
    }

    pub fn next_u32(&mut self) -> u32 {
        if self.used == 4 {
            // The block counter is spread over the particle and frame words: 2^64 blocks in all.
            self.buf = draw(
                self.seed,
                self.block >> 32,
                self.track,
                self.block as u32,
                self.stream,
            );
            self.block += 1;
            self.used = 0;
        }
        let w = self.buf[self.used];
        self.used += 1;
        w
    }

    pub fn uniform_f64(&mut self) -> f64 {
        let hi = u64::from(self.next_u32() >> 5);
        let lo = u64::from(self.next_u32() >> 6);
        ((hi << 26 | lo) as f64 + 0.5) / (1u64 << 53) as f64
    }

    pub fn normal_f64(&mut self) -> f64 {
        let u1 = self.uniform_f64();
        let u2 = self.uniform_f64();
        (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Known-answer vectors from Random123's `kat_vectors` for philox4x32_10.
    #[test]
    fn known_answers() {
        assert_eq!(
            philox4x32_10([0; 4], [0; 2]),
            [0x6627_e8d5, 0xe169_c58d, 0xbc57_ac4c, 0x9b00_dbd8]
        );
        assert_eq!(
            philox4x32_10([u32::MAX; 4], [u32::MAX; 2]),
            [0x408f_276d, 0x41c8_3b0e, 0xa20b_c7c6, 0x6d54_51fd]
        );
        assert_eq!(
            philox4x32_10(
                [0x243f_6a88, 0x85a3_08d3, 0x1319_8a2e, 0x0370_7344],
                [0xa409_3822, 0x299f_31d0]
            ),
            [0xd16c_fe09, 0x94fd_cceb, 0x5001_e420, 0x2412_6ea1]
        );
    }

    #[test]
    fn uniform_is_open_interval() {
        assert!(uniform(0) > 0.0);
        assert!(uniform(u32::MAX) < 1.0);
    }

    #[test]
    fn normals_have_unit_variance() {
        let n = 50_000u32;
        let (mut s, mut s2) = (0.0f64, 0.0f64);
        for p in 0..n {
            for z in normals4(draw(7, 3, 1, p, Stream::Predict)) {
                s += f64::from(z);
                s2 += f64::from(z) * f64::from(z);
            }
        }
        let m = s / f64::from(4 * n);
        let v = s2 / f64::from(4 * n) - m * m;
        assert!(m.abs() < 0.01, "mean {m}");
        assert!((v - 1.0).abs() < 0.02, "variance {v}");
    }

    /// `uniforms6` takes every bit but the last word's two lowest, each once, and stays inside
    /// (0, 1); `normals6` has zero mean, unit variance and uncorrelated components.
    #[test]
    fn six_normals_from_one_block() {
        assert!(uniforms6([0; 4]).iter().all(|&u| u > 0.0));
        assert!(uniforms6([u32::MAX; 4]).iter().all(|&u| u < 1.0));
        for word in 0..4 {
            for bit in 0..32 {
                let mut w = [0u32; 4];
                w[word] = 1 << bit;
                let changed = uniforms6(w)
                    .iter()
                    .zip(uniforms6([0; 4]))
                    .filter(|(a, b)| **a != *b)
                    .count();
                let unused = word == 3 && bit < 2;
                assert_eq!(changed, usize::from(!unused), "word {word} bit {bit}");
            }
        }
        let n = 50_000u32;
        let (mut s, mut s2, mut cross) = ([0.0f64; 6], [0.0f64; 6], [[0.0f64; 6]; 6]);
        for p in 0..n {
            let z = normals6(draw(7, 3, 1, p, Stream::Roughen)).map(f64::from);
            for a in 0..6 {
                s[a] += z[a];
                s2[a] += z[a] * z[a];
                for b in 0..6 {
                    cross[a][b] += z[a] * z[b];
                }
            }
        }
        let nf = f64::from(n);
        for a in 0..6 {
            let m = s[a] / nf;
            assert!(m.abs() < 0.02, "mean {m} of component {a}");
            assert!((s2[a] / nf - m * m - 1.0).abs() < 0.03, "variance of {a}");
            for b in 0..a {
                assert!((cross[a][b] / nf).abs() < 0.03, "correlation {a} {b}");
            }
        }
    }

    /// The spare uniform is uniform on (0, 1) and independent of the normals drawn from the same
    /// block: its mean, variance and deciles, and its correlation with each of the four normals
    /// and with their squares.
    #[test]
    fn spare_uniform_is_uniform_and_independent_of_the_normals() {
        assert!(spare_uniform([0; 4]) > 0.0);
        assert!(spare_uniform([u32::MAX; 4]) < 1.0);
        let n = 200_000u32;
        let mut deciles = [0u32; 10];
        let (mut s, mut s2) = (0.0f64, 0.0f64);
        let mut cross = [0.0f64; 8];
        for p in 0..n {
            let w = draw(11, 5, 2, p, Stream::Predict);
            let u = f64::from(spare_uniform(w));
            deciles[((u * 10.0) as usize).min(9)] += 1;
            s += u;
            s2 += u * u;
            for (c, z) in normals4(w).into_iter().enumerate() {
                let z = f64::from(z);
                cross[c] += (u - 0.5) * z;
                cross[4 + c] += (u - 0.5) * (z * z - 1.0);
            }
        }
        let nf = f64::from(n);
        let m = s / nf;
        let v = s2 / nf - m * m;
        assert!((m - 0.5).abs() < 0.003, "mean {m}");
        assert!((v - 1.0 / 12.0).abs() < 0.002, "variance {v}");
        for d in deciles {
            let f = f64::from(d) / nf;
            assert!((f - 0.1).abs() < 0.004, "decile share {f}");
        }
        // Correlations: (u - 1/2) has sd 0.289, z sd 1, z^2 - 1 sd 1.41; 5 sigma at n = 200,000.
        for (c, x) in cross.iter().enumerate() {
            let sd = if c < 4 { 0.289 } else { 0.289 * 1.414 };
            let r = x / nf / sd;
            assert!(r.abs() < 5.0 / nf.sqrt(), "correlation {c}: {r}");
        }
    }

    #[test]
    fn keys_separate_streams() {
        let a = draw(1, 2, 3, 4, Stream::Predict);
        assert_ne!(a, draw(1, 2, 3, 4, Stream::Switch));
        assert_ne!(a, draw(2, 2, 3, 4, Stream::Predict));
        assert_ne!(a, draw(1, 3, 3, 4, Stream::Predict));
        assert_ne!(a, draw(1, 2, 4, 4, Stream::Predict));
        assert_ne!(a, draw(1, 2, 3, 5, Stream::Predict));
    }
}
