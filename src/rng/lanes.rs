//! Philox and Box–Muller over lanes of particles: the same draws as [`super::philox`], for
//! [`LANES`] particles at a time, in loops the compiler vectorises.

use super::philox::{self, Stream};
use crate::math::fastmath::{F, LANES, U, box_muller};

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
