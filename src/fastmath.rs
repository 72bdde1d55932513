//! Branch-free f32 approximations of exp, ln and sin/cos(2πu), plus Philox and Box–Muller over
//! lanes of particles, written so the compiler vectorises loops over [`LANES`] particles.
//!
//! Accuracy (checked in the tests against the standard library): exp and ln to a few ulp
//! (relative error < 4e-7 over the ranges used), sincos to 2e-7 absolute. The CUDA kernels
//! (kernels/common.cuh) evaluate the same polynomials, operation for operation and without
//! fused multiply-adds, so the two backends' particles agree to the last bit or nearly; the
//! likelihood is sharp enough that a few-ulp difference in these functions moves log weights by
//! more than the parity tests' 1e-4. No fused multiply-add is used here either, so every vector
//! width gives bit-identical results.

use crate::philox::{self, Stream};

/// Particles processed together.
pub const LANES: usize = 8;
pub type F = [f32; LANES];
pub type U = [u32; LANES];

/// 1.5 * 2^23: added to and subtracted from an f32 of magnitude below 2^22, it rounds it to the
/// nearest integer (ties to even).
const ROUND_MAGIC: f32 = 12_582_912.0;

/// e^x for x in about [-87, 88]; below that it returns 0, above it +inf.
#[inline(always)]
pub fn exp(x: f32) -> f32 {
    let x = x.clamp(-87.3, 88.7);
    // x = n ln2 + r, |r| <= ln2 / 2, with ln2 split in two for an exact reduction. n is
    // x log2(e) rounded to the nearest integer (ties to even) by adding and subtracting
    // 1.5 * 2^23: exact for |x log2(e)| < 2^22, two additions on every backend and lane
    // width (round() was a library call per lane here, and four instructions on the GPU).
    let n = (x * std::f32::consts::LOG2_E + ROUND_MAGIC) - ROUND_MAGIC;
    let r = x - n * 0.693_145_75 - n * 1.428_606_8e-6;
    // e^r by a degree-6 Taylor polynomial (error < 2e-8 on the interval).
    let p = 1.0
        + r * (1.0
            + r * (0.5
                + r * (1.0 / 6.0 + r * (1.0 / 24.0 + r * (1.0 / 120.0 + r * (1.0 / 720.0))))));
    // Scale by 2^n through the exponent bits, without a float-to-int conversion (Rust's
    // saturating `as` would stop the loop from vectorising): n + 2^23 + 127 is an integer in
    // [2^23, 2^24), so its low mantissa bits hold n + 127.
    let biased = (n + 8_388_735.0).to_bits() & 0xff;
    p * f32::from_bits(biased << 23)
}

/// ln x for positive normal x (0 gives a large negative number, not -inf).
#[inline(always)]
pub fn ln(x: f32) -> f32 {
    let x = x.max(f32::MIN_POSITIVE);
    let bits = x.to_bits();
    // x = m 2^e with m in [sqrt(1/2), sqrt(2)).
    let mut e = ((bits >> 23) & 0xff) as i32 - 127;
    let mut m = f32::from_bits((bits & 0x007f_ffff) | 0x3f80_0000);
    let big = m > std::f32::consts::SQRT_2;
    m = if big { m * 0.5 } else { m };
    e += big as i32;
    // ln m = 2 atanh(s), s = (m - 1) / (m + 1), |s| < 0.172.
    let s = (m - 1.0) / (m + 1.0);
    let s2 = s * s;
    let p =
        2.0 * s * (1.0 + s2 * (1.0 / 3.0 + s2 * (1.0 / 5.0 + s2 * (1.0 / 7.0 + s2 * (1.0 / 9.0)))));
    p + e as f32 * std::f32::consts::LN_2
}

/// (sin 2πu, cos 2πu) for any finite u.
#[inline(always)]
pub fn sincos_2pi(u: f32) -> (f32, f32) {
    // y in [-1, 1]: the angle π y.
    let y = 2.0 * (u - u.round());
    // Fold |y| > 1/2 onto [-1/2, 1/2]: sin(π(±1 - y)) = sin(πy), cos flips sign.
    let s = if y > 0.5 {
        1.0
    } else if y < -0.5 {
        -1.0
    } else {
        0.0
    };
    let z = if s != 0.0 { s - y } else { y };
    let cos_sign = if s != 0.0 { -1.0 } else { 1.0 };
    let t = std::f32::consts::PI * z;
    let t2 = t * t;
    let sin = t
        * (1.0
            - t2 * (1.0 / 6.0
                - t2 * (1.0 / 120.0
                    - t2 * (1.0 / 5040.0 - t2 * (1.0 / 362_880.0 - t2 / 39_916_800.0)))));
    let cos = 1.0
        - t2 * (0.5
            - t2 * (1.0 / 24.0
                - t2 * (1.0 / 720.0
                    - t2 * (1.0 / 40320.0 - t2 * (1.0 / 3_628_800.0 - t2 / 479_001_600.0)))));
    (sin, cos_sign * cos)
}

/// Box–Muller with the approximations above: two normals from two uniforms in (0, 1).
#[inline(always)]
pub fn box_muller(u1: f32, u2: f32) -> (f32, f32) {
    let r = (-2.0 * ln(u1)).sqrt();
    let (s, c) = sincos_2pi(u2);
    (r * c, r * s)
}

/// Philox4x32-10 for lanes that differ only in the first counter word (the particle index).
#[inline(always)]
pub fn philox_lanes(particle: &U, word1: u32, frame: u64, seed: u64) -> [U; 4] {
    let mut c0 = *particle;
    let mut c1 = [word1; LANES];
    let mut c2 = [frame as u32; LANES];
    let mut c3 = [(frame >> 32) as u32; LANES];
    let (mut k0, mut k1) = (seed as u32, (seed >> 32) as u32);
    for round in 0..10 {
        if round > 0 {
            k0 = k0.wrapping_add(0x9E37_79B9);
            k1 = k1.wrapping_add(0xBB67_AE85);
        }
        for i in 0..LANES {
            let p0 = u64::from(0xD251_1F53u32) * u64::from(c0[i]);
            let p1 = u64::from(0xCD9E_8D57u32) * u64::from(c2[i]);
            let (hi0, lo0) = ((p0 >> 32) as u32, p0 as u32);
            let (hi1, lo1) = ((p1 >> 32) as u32, p1 as u32);
            let n0 = hi1 ^ c1[i] ^ k0;
            let n2 = hi0 ^ c3[i] ^ k1;
            c0[i] = n0;
            c1[i] = lo1;
            c2[i] = n2;
            c3[i] = lo0;
        }
    }
    [c0, c1, c2, c3]
}

/// The four words of `philox::draw` for each lane's particle.
#[inline(always)]
pub fn draw_lanes(seed: u64, frame: u64, track: u32, particle: &U, stream: Stream) -> [U; 4] {
    philox_lanes(
        particle,
        (track & 0xFFFF) | ((stream as u32) << 16),
        frame,
        seed,
    )
}

/// Four standard normals per lane (as `philox::normals4`, with the approximations above).
#[inline(always)]
pub fn normals4_lanes(w: &[U; 4]) -> [F; 4] {
    let mut out = [[0.0f32; LANES]; 4];
    for i in 0..LANES {
        let (a0, a1) = box_muller(philox::uniform(w[0][i]), philox::uniform(w[1][i]));
        let (b0, b1) = box_muller(philox::uniform(w[2][i]), philox::uniform(w[3][i]));
        out[0][i] = a0;
        out[1][i] = a1;
        out[2][i] = b0;
        out[3][i] = b1;
    }
    out
}

/// Six standard normals per lane (as `philox::normals6`).
#[inline(always)]
pub fn normals6_lanes(w: &[U; 4]) -> [F; 6] {
    let mut out = [[0.0f32; LANES]; 6];
    for i in 0..LANES {
        let z = philox::normals6([w[0][i], w[1][i], w[2][i], w[3][i]]);
        for (o, v) in out.iter_mut().zip(z) {
            o[i] = v;
        }
    }
    out
}

/// The random numbers of one step for particles `start..start + uniforms.len()`: the switch
/// uniform and the four process-noise normals (`normals[c][i]`), all from one Philox block per
/// particle (`philox::spare_uniform`). A pass of its own: in this
/// simple loop the compiler vectorises Philox and Box–Muller, which it does not do inside the
/// larger filter loop.
#[inline(always)]
fn step_noise_impl(
    seed: u64,
    frame: u64,
    track: u32,
    start: usize,
    uniforms: &mut [f32],
    normals: &mut [Vec<f32>; 4],
) {
    let len = uniforms.len();
    let mut b = 0;
    while b < len {
        let idx: U = std::array::from_fn(|i| (start + b + i) as u32);
        let w = draw_lanes(seed, frame, track, &idx, Stream::Predict);
        let z = normals4_lanes(&w);
        let cnt = (len - b).min(LANES);
        for i in 0..cnt {
            uniforms[b + i] = philox::spare_uniform([w[0][i], w[1][i], w[2][i], w[3][i]]);
            for c in 0..4 {
                normals[c][b + i] = z[c][i];
            }
        }
        b += LANES;
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn step_noise_avx2(
    seed: u64,
    frame: u64,
    track: u32,
    start: usize,
    uniforms: &mut [f32],
    normals: &mut [Vec<f32>; 4],
) {
    step_noise_impl(seed, frame, track, start, uniforms, normals)
}

/// The random numbers of one step (see `step_noise_impl`); `avx2` selects the AVX2 build of
/// the loop.
pub fn step_noise(
    seed: u64,
    frame: u64,
    track: u32,
    start: usize,
    uniforms: &mut [f32],
    normals: &mut [Vec<f32>; 4],
    avx2: bool,
) {
    #[cfg(target_arch = "x86_64")]
    if avx2 {
        // SAFETY: callers pass `avx2` = true only when the processor reported AVX2.
        return unsafe { step_noise_avx2(seed, frame, track, start, uniforms, normals) };
    }
    let _ = avx2;
    step_noise_impl(seed, frame, track, start, uniforms, normals)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exp_matches_std() {
        let mut worst = 0.0f64;
        let mut x = -80.0f32;
        while x < 80.0 {
            let want = f64::from(x).exp();
            let got = f64::from(exp(x));
            worst = worst.max(((got - want) / want).abs());
            x += 0.0137;
        }
        assert!(worst < 4e-7, "relative error {worst}");
        assert_eq!(exp(-200.0), 0.0f32.max(exp(-200.0)));
        assert!(exp(-200.0) < 1e-37);
    }

    #[test]
    fn ln_matches_std() {
        let mut worst = 0.0f64;
        let mut x = 1e-30f32;
        while x < 1e30 {
            let want = f64::from(x).ln();
            let got = f64::from(ln(x));
            worst = worst.max((got - want).abs() / want.abs().max(1.0));
            x *= 1.0173;
        }
        assert!(worst < 4e-7, "error {worst}");
        assert!(ln(0.0) < -80.0);
    }

    #[test]
    fn sincos_matches_std() {
        let mut worst = 0.0f64;
        for i in 0..100_000 {
            let u = (i as f32 + 0.5) / 100_000.0 * 3.0 - 1.0;
            let (s, c) = sincos_2pi(u);
            let a = std::f64::consts::TAU * f64::from(u);
            worst = worst
                .max((f64::from(s) - a.sin()).abs())
                .max((f64::from(c) - a.cos()).abs());
        }
        assert!(worst < 5e-7, "error {worst}");
    }

    #[test]
    fn philox_lanes_match_scalar() {
        let particles: U = [0, 1, 2, 77, 1000, 65_535, 1 << 20, u32::MAX];
        let w = draw_lanes(0x1234_5678_9abc, 42, 3, &particles, Stream::Predict);
        for (i, &p) in particles.iter().enumerate() {
            let s = philox::draw(0x1234_5678_9abc, 42, 3, p, Stream::Predict);
            assert_eq!([w[0][i], w[1][i], w[2][i], w[3][i]], s);
        }
        let n = normals4_lanes(&w);
        let n6 = normals6_lanes(&w);
        for (i, &p) in particles.iter().enumerate() {
            let block = philox::draw(0x1234_5678_9abc, 42, 3, p, Stream::Predict);
            let s = philox::normals4(block);
            for k in 0..4 {
                assert_eq!(
                    n[k][i].to_bits(),
                    s[k].to_bits(),
                    "lane and scalar draws are identical"
                );
            }
            let s6 = philox::normals6(block);
            for k in 0..6 {
                assert_eq!(n6[k][i].to_bits(), s6[k].to_bits());
            }
        }
    }
}
