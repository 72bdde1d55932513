//! e^x and ln x in f64 by fixed polynomials, written so that the CUDA kernels
//! (`kernels/common.cuh`: fm_exp64, fm_ln64) evaluate the same operations in the same order
//! and get the same bits: the track-before-detect bank's existence recursion runs on both
//! backends and feeds the resampling, where a last-bit difference would pick another ancestor.
//! Neither uses a fused multiply-add (the kernels are compiled with `--fmad=false`).
//!
//! Accuracy (checked in the tests against the standard library): a few ulp.

/// ln 2 split so that n · LN2_HI is exact for |n| < 2^11 (fdlibm's split).
const LN2_HI: f64 = f64::from_bits(0x3fe6_2e42_fee0_0000);
const LN2_LO: f64 = f64::from_bits(0x3dea_39ef_3579_3c76);

/// e^x: 0 below −708, +∞ above 709, NaN for NaN.
pub fn exp(x: f64) -> f64 {
    if x.is_nan() {
        return x;
    }
    if x < -708.0 {
        return 0.0;
    }
    if x > 709.0 {
        return f64::INFINITY;
    }
    // x = n ln2 + r, |r| <= ln2 / 2 (round: half away from zero on both backends).
    let n = (x * std::f64::consts::LOG2_E).round();
    let r = x - n * LN2_HI - n * LN2_LO;
    // e^r by its Taylor polynomial to degree 13 (truncation < 1e-17 on the interval), by
    // Horner's rule from the highest term: p = 1/k! + r p for k = 12 down to 0.
    let mut p = 1.0 / 6_227_020_800.0;
    let mut fact = 6_227_020_800.0;
    for k in (0..13).rev() {
        fact /= f64::from(k + 1);
        p = 1.0 / fact + r * p;
    }
    // n is in [-1022, 1023] here, so 2^n is a normal number built from its exponent bits.
    p * f64::from_bits(((n as i64 + 1023) as u64) << 52)
}

/// ln x: −∞ at 0, NaN below 0 or for NaN, +∞ at +∞.
pub fn ln(x: f64) -> f64 {
    if x.is_nan() || x < 0.0 {
        return f64::NAN;
    }
    if x == 0.0 {
        return f64::NEG_INFINITY;
    }
    if x == f64::INFINITY {
        return x;
    }
    // Subnormals scaled into the normal range first.
    let (x, mut e) = if x < f64::MIN_POSITIVE {
        (x * 18_014_398_509_481_984.0, -54i64)
    } else {
        (x, 0i64)
    };
    let bits = x.to_bits();
    e += ((bits >> 52) & 0x7ff) as i64 - 1023;
    let mut m = f64::from_bits((bits & 0x000f_ffff_ffff_ffff) | 0x3ff0_0000_0000_0000);
    if m > std::f64::consts::SQRT_2 {
        m *= 0.5;
        e += 1;
    }
    // ln m = 2 atanh(s), s = (m − 1) / (m + 1), |s| < 0.172: the odd series to s^21, by
    // Horner's rule in s²: q = 1/k + s² q for k = 19, 17, …, 1.
    let s = (m - 1.0) / (m + 1.0);
    let s2 = s * s;
    let mut q = 1.0 / 21.0;
    for k in (0..10).rev() {
        q = 1.0 / f64::from(2 * k + 1) + s2 * q;
    }
    let p = 2.0 * s * q;
    let e = e as f64;
    e * LN2_HI + (p + e * LN2_LO)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exp_matches_std() {
        let mut worst: f64 = 0.0;
        for i in 0..200_001 {
            let x = -708.0 + 1417.0 * i as f64 / 200_000.0;
            let (a, b) = (exp(x), x.exp());
            worst = worst.max(((a - b) / b).abs());
        }
        assert!(worst < 1e-15, "{worst}");
        assert_eq!(exp(-800.0), 0.0);
        assert_eq!(exp(800.0), f64::INFINITY);
        assert_eq!(exp(f64::NEG_INFINITY), 0.0);
        assert_eq!(exp(0.0), 1.0);
        assert!(exp(f64::NAN).is_nan());
    }

    #[test]
    fn ln_matches_std() {
        let mut worst: f64 = 0.0;
        for i in 0..200_001 {
            let x = 10f64.powf(-300.0 + 600.0 * i as f64 / 200_000.0);
            let (a, b) = (ln(x), x.ln());
            worst = worst.max((a - b).abs() / b.abs().max(1.0));
        }
        assert!(worst < 1e-15, "{worst}");
        assert!((ln(5e-320) - 5e-320f64.ln()).abs() < 1e-12);
        assert_eq!(ln(1.0), 0.0);
        assert_eq!(ln(0.0), f64::NEG_INFINITY);
        assert_eq!(ln(f64::INFINITY), f64::INFINITY);
        assert!(ln(-1.0).is_nan() && ln(f64::NAN).is_nan());
    }
}
