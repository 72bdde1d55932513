// Shared device code: Philox4x32-10, the branch-free fast math, the motion models and the TDOA
// likelihood. Each function mirrors its Rust twin operation for operation (src/philox.rs,
// src/fastmath.rs, src/track/motion/models.rs, src/track/measure/likelihood.rs). The module is compiled with
// --fmad=false (no contraction into fused multiply-adds) and IEEE division and square root, so a
// particle's prediction and log-likelihood come out as on the CPU.
//
// Each .cu file in kernels/ is an NVRTC program of its own that includes this header
// (src/gpu/cuda/programs.rs lists them with their entry points).

#pragma once

typedef unsigned int u32;
typedef unsigned long long u64;

#define MAX_MODELS 16
#define MODEL_MASK (MAX_MODELS - 1)
#define MAX_SENSORS 64
#define PAIR_GROUP 4
#define STATE_DIM 7

// Wait until the previous kernel on the stream has finished and its writes are visible, when
// this kernel was launched early (programmatic dependent launch, sm_90 and later:
// src/gpu/cuda/mod.rs, launch_early); a kernel launched as usual returns at once, as its
// previous kernel has finished before it starts.
__device__ __forceinline__ void wait_for_previous_kernel() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// ---------------------------------------------------------------------------------------------
// Philox4x32-10 (Salmon et al., SC'11), keyed as in src/philox.rs.

enum Stream { S_PREDICT = 0, S_SWITCH = 1, S_INIT_POS = 2, S_INIT_VEL = 3, S_RESAMPLE = 4,
              S_SIMULATE = 5, S_ROUGHEN = 6 };

__device__ __forceinline__ uint4 philox(uint4 c, u32 k0, u32 k1) {
    for (int round = 0; round < 10; ++round) {
        if (round > 0) {
            k0 += 0x9E3779B9u;
            k1 += 0xBB67AE85u;
        }
        u64 p0 = (u64)0xD2511F53u * (u64)c.x;
        u64 p1 = (u64)0xCD9E8D57u * (u64)c.z;
        u32 hi0 = (u32)(p0 >> 32), lo0 = (u32)p0;
        u32 hi1 = (u32)(p1 >> 32), lo1 = (u32)p1;
        c = make_uint4(hi1 ^ c.y ^ k0, lo1, hi0 ^ c.w ^ k1, lo0);
    }
    return c;
}

__device__ __forceinline__ uint4 draw(u64 seed, u64 frame, u32 track, u32 particle, u32 stream) {
    uint4 ctr = make_uint4(particle, (track & 0xFFFFu) | (stream << 16), (u32)frame,
                           (u32)(frame >> 32));
    return philox(ctr, (u32)seed, (u32)(seed >> 32));
}

// A uniform in (0, 1) from the top 23 bits: exact in f32.
__device__ __forceinline__ float uniform(u32 w) {
    return (float)(w >> 9) * (1.0f / 8388608.0f) + (0.5f / 8388608.0f);
}

// ---------------------------------------------------------------------------------------------
// Fast math (src/fastmath.rs).

__device__ __forceinline__ float f_round(float x) { return roundf(x); }

// e^x for x already in [-87.3, 88.7] (fm_exp without its clamp, which would not change x).
__device__ __forceinline__ float fm_exp_in_range(float x) {
    // Rounded to the nearest integer (ties to even) by adding and subtracting 1.5 * 2^23, as
    // src/fastmath.rs: exp does.
    float n = (x * 1.44269504088896340736f + 12582912.0f) - 12582912.0f;
    float r = x - n * 0.69314575f - n * 1.4286068e-6f;
    float p = 1.0f + r * (1.0f + r * (0.5f + r * (1.0f / 6.0f + r * (1.0f / 24.0f +
              r * (1.0f / 120.0f + r * (1.0f / 720.0f))))));
    u32 biased = __float_as_uint(n + 8388735.0f) & 0xffu;
    return p * __uint_as_float(biased << 23);
}

__device__ __forceinline__ float fm_exp(float x) {
    return fm_exp_in_range(fminf(fmaxf(x, -87.3f), 88.7f));
}

// a / b correctly rounded (as IEEE division) for a and b whose quotient and operands are
// normal numbers or a zero numerator, where the compiler's division would first check for
// the other cases (FCHK and a branch to a slow path): the same reciprocal and two Newton
// corrections as its fast path, so the same bits.
__device__ __forceinline__ float div_normal(float a, float b) {
    float r;
    asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(b));
    float e = __fmaf_rn(-b, r, 1.0f);
    r = __fmaf_rn(r, e, r);
    float q = __fmaf_rn(a, r, 0.0f);
    float d = __fmaf_rn(-b, q, a);
    return __fmaf_rn(r, d, q);
}

__device__ __forceinline__ float fm_ln(float x) {
    x = fmaxf(x, 1.17549435e-38f);
    u32 bits = __float_as_uint(x);
    int e = (int)((bits >> 23) & 0xffu) - 127;
    float m = __uint_as_float((bits & 0x007fffffu) | 0x3f800000u);
    bool big = m > 1.41421356237309504880f;
    m = big ? m * 0.5f : m;
    e += big ? 1 : 0;
    // m in [0.707, 1.415): m + 1 and a nonzero m - 1 are normal, and so is their quotient.
    float s = div_normal(m - 1.0f, m + 1.0f);
    float s2 = s * s;
    float p = 2.0f * s * (1.0f + s2 * (1.0f / 3.0f + s2 * (1.0f / 5.0f + s2 * (1.0f / 7.0f +
              s2 * (1.0f / 9.0f)))));
    return p + (float)e * 0.693147180559945309417f;
}

// (sin 2 pi u, cos 2 pi u).
__device__ __forceinline__ void fm_sincos_2pi(float u, float* sn, float* cs) {
    float y = 2.0f * (u - f_round(u));
    float s = y > 0.5f ? 1.0f : (y < -0.5f ? -1.0f : 0.0f);
    float z = s != 0.0f ? s - y : y;
    float cos_sign = s != 0.0f ? -1.0f : 1.0f;
    float t = 3.14159265358979323846f * z;
    float t2 = t * t;
    float sin_ = t * (1.0f - t2 * (1.0f / 6.0f - t2 * (1.0f / 120.0f - t2 * (1.0f / 5040.0f -
                 t2 * (1.0f / 362880.0f - t2 / 39916800.0f)))));
    float cos_ = 1.0f - t2 * (0.5f - t2 * (1.0f / 24.0f - t2 * (1.0f / 720.0f -
                 t2 * (1.0f / 40320.0f - t2 * (1.0f / 3628800.0f - t2 / 479001600.0f)))));
    *sn = sin_;
    *cs = cos_sign * cos_;
}

// A second uniform from the bits of a block that normals4 leaves alone (src/philox.rs:
// spare_uniform): the low 9 bits of x and y and the low 5 of z.
__device__ __forceinline__ float spare_uniform(uint4 w) {
    u32 bits = ((w.x & 0x1ffu) << 14) | ((w.y & 0x1ffu) << 5) | (w.z & 0x1fu);
    return uniform(bits << 9); // scaled as a word's top 23 bits
}

__device__ __forceinline__ void box_muller(float u1, float u2, float* a, float* b) {
    float r = sqrtf(-2.0f * fm_ln(u1));
    float s, c;
    fm_sincos_2pi(u2, &s, &c);
    *a = r * c;
    *b = r * s;
}

// Six normals from one block (src/philox.rs: uniforms6, normals6): six 21-bit fields, each
// scaled to (0, 1) exactly as the host does, then three Box-Muller pairs.
__device__ __forceinline__ float uniform21(u32 f) {
    return (float)f * (1.0f / 2097152.0f) + (0.5f / 2097152.0f);
}

__device__ __forceinline__ void normals6(uint4 w, float* z) {
    float u0 = uniform21(w.x >> 11);
    float u1 = uniform21(((w.x & 0x7ffu) << 10) | (w.y >> 22));
    float u2 = uniform21((w.y >> 1) & 0x1fffffu);
    float u3 = uniform21(((w.y & 1u) << 20) | (w.z >> 12));
    float u4 = uniform21(((w.z & 0xfffu) << 9) | (w.w >> 23));
    float u5 = uniform21((w.w >> 2) & 0x1fffffu);
    box_muller(u0, u1, &z[0], &z[1]);
    box_muller(u2, u3, &z[2], &z[3]);
    box_muller(u4, u5, &z[4], &z[5]);
}

__device__ __forceinline__ float4 normals4(uint4 w) {
    float4 z;
    box_muller(uniform(w.x), uniform(w.y), &z.x, &z.y);
    box_muller(uniform(w.z), uniform(w.w), &z.z, &z.w);
    return z;
}

// ---------------------------------------------------------------------------------------------
// Step parameters shared by every track of a step (uploaded once per step).

struct StepParams {
    u64 seed;
    u64 frame;
    // Device addresses of the host's page-locked copies of the step's sums, flags and
    // tempering exponents (0: none, and a copy brings them back): what is written to `sums_out`,
    // `flags` and `betas` is written there too, so the host reads it without a copy.
    u64 mirror_sums;
    u64 mirror_flags;
    u64 mirror_betas;
    u32 n;            // particles per track
    u32 n_models;
    u32 n_sensors;
    u32 n_pairs;
    u32 k;            // peaks per pair
    u32 mode;         // 0: 3-D, 1: direction (curved wavefronts), 2: direction (plane waves)
    u32 has_bounds;
    u32 forced_model; // 0xffffffff: Markov switching
    // pf_step_live: this step's stamp value (the stamp reads it once the host has copied the
    // measurement in, and it | LIVE_CANCEL when the step is withdrawn: see live_wait); 0 for
    // the other kernels.
    u32 live;
    u32 line;         // line mode: particles are turned about `axis` into the half-plane of `side`
    float inv_c;
    float inv_two_var;
    float gate;
    float ess_fraction; // resample when the ESS falls below this fraction of n
    float lo[3];
    float hi[3];
    float axis[3];
    float side[3];
    // Cumulative transition rows, padded to MAX_MODELS x MAX_MODELS.
    float cdf[MAX_MODELS * MAX_MODELS];
};

// Where pf_step_live finds its measurement when the device builds it from the frame's peaks
// (src/gpu/cuda/pf.rs: LiveMeas, and src/track/manager.rs: build_measurement, which it
// follows operation for operation).
struct LiveMeas {
    u64 peaks;   // the correlator's peaks (lag, value, quality per pair and peak); 0: the host
                 // copies the measurement in instead
    u64 done;    // the correlator's count of one-frame blocks with their peaks written...
    u64 ratio;   // per pair: the peak density over the clutter density's factor
    u64 pair_ok; // per pair: nonzero when both channels passed the host's checks
    u32 expect;  // ...once this frame's peaks are written
    float fs;
    float pd;    // detection probability
    float q_mid;
    float q_width;
    u32 pad;
};

// Motion-model coefficients of one track's step (they depend on the track's dt), indexed by
// model & MODEL_MASK (src/track/motion/models.rs: CoeffTable).
struct Coeffs {
    u32 kind[MAX_MODELS];
    float accel_std[MAX_MODELS];
    float turn_sd[MAX_MODELS];
    float decay[MAX_MODELS];
};

// Per-track inputs of a step.
struct TrackParams {
    u32 slot;     // track slot (part of the random-number key)
    u32 cur;      // which state buffer holds the slot's particles (0 or 1)
    float dt;
    float lag;
    float offset; // log of the sum of exp(log w) before the step
    float u0;     // systematic-resampling offset
    // sin and cos of the particles' turn about z before the step (a turning array; 0 and 1 for
    // a fixed one: src/track/mod.rs, TrackStep::turn)
    float turn_sin, turn_cos;
};

// ---------------------------------------------------------------------------------------------
// Direction mode: a particle's position p is its direction scaled by 1 + its inverse range
// (src/track/measure/likelihood.rs: sensor_terms).

// |p| (src/track/motion/models.rs: dir_norm).
__device__ __forceinline__ float dir_norm(float x, float y, float z) {
    return fmaxf(sqrtf(x * x + y * y + z * z), 1e-12f);
}

// A particle past infinity (|p| < 1) reflected back, its radial velocity turned round
// (src/track/motion/models.rs: reflect_at_infinity).
__device__ __forceinline__ void reflect_at_infinity(float* s) {
    float n = dir_norm(s[0], s[1], s[2]);
    bool beyond = n < 1.0f;
    float k = beyond ? (2.0f - n) / n : 1.0f;
    float u0 = s[0] / n, u1 = s[1] / n, u2 = s[2] / n;
    float radial = s[3] * u0 + s[4] * u1 + s[5] * u2;
    float f = beyond ? 2.0f * radial : 0.0f;
    s[0] *= k;
    s[1] *= k;
    s[2] *= k;
    s[3] -= f * u0;
    s[4] -= f * u1;
    s[5] -= f * u2;
}

// Plane waves: the position back on the unit sphere, the velocity in its tangent plane
// (src/track/motion/models.rs: onto_unit_sphere).
__device__ __forceinline__ void onto_unit_sphere(float* s) {
    float n = dir_norm(s[0], s[1], s[2]);
    float u0 = s[0] / n, u1 = s[1] / n, u2 = s[2] / n;
    float radial = s[3] * u0 + s[4] * u1 + s[5] * u2;
    s[0] = u0;
    s[1] = u1;
    s[2] = u2;
    s[3] -= radial * u0;
    s[4] -= radial * u1;
    s[5] -= radial * u2;
}

// Line mode: a particle turned about the array's axis into the half-plane of `side`, its
// velocity keeping its parts along the axis and away from it (src/track/motion/models.rs:
// fold_to_half_plane).
__device__ __forceinline__ void fold_to_half_plane(float* s, const float* axis,
                                                   const float* side) {
    float pa = s[0] * axis[0] + s[1] * axis[1] + s[2] * axis[2];
    float va = s[3] * axis[0] + s[4] * axis[1] + s[5] * axis[2];
    float qx = s[0] - pa * axis[0], qy = s[1] - pa * axis[1], qz = s[2] - pa * axis[2];
    float q = sqrtf(qx * qx + qy * qy + qz * qz);
    float away = q > 1e-12f ? (s[3] * qx + s[4] * qy + s[5] * qz) / q
                            : s[3] * side[0] + s[4] * side[1] + s[5] * side[2];
    for (int k = 0; k < 3; ++k) {
        s[k] = pa * axis[k] + q * side[k];
        s[3 + k] = va * axis[k] + away * side[k];
    }
}

// Line mode's fold (src/track/motion/models.rs: fold_line): onto side's half-plane, or with keep (a
// turning array) onto the half-plane of the side the particle is on.
__device__ __forceinline__ void fold_line(float* s, const float* axis, const float* side,
                                          bool keep) {
    float d = s[0] * side[0] + s[1] * side[1] + s[2] * side[2];
    if (keep && d < 0.0f) {
        float neg[3] = {-side[0], -side[1], -side[2]};
        fold_to_half_plane(s, axis, neg);
    } else {
        fold_to_half_plane(s, axis, side);
    }
}

// A particle's position and velocity turned about z (src/track/motion/models.rs: turn_about_z).
__device__ __forceinline__ void turn_about_z(float* s, float sn, float cs) {
    for (int k = 0; k < 6; k += 3) {
        float x = s[k], y = s[k + 1];
        s[k] = cs * x - sn * y;
        s[k + 1] = sn * x + cs * y;
    }
}

// The path to sensor (mx, my, mz) (relative to the centroid) less the range, for a source in
// direction p / n at inverse range inv (src/track/measure/likelihood.rs: direction_path).
__device__ __forceinline__ float dir_path(float mx, float my, float mz, float x, float y,
                                          float z, float n, float inv) {
    float ud = (mx * x + my * y + mz * z) / n;
    float dd = mx * mx + my * my + mz * mz;
    float root = sqrtf(fmaxf(1.0f - 2.0f * inv * ud + inv * inv * dd, 0.0f));
    return (inv * dd - 2.0f * ud) / (1.0f + root);
}

// Curved wavefronts, before a step: p replaced by its direction; returns the inverse range
// (src/track/motion/models.rs: to_unit_direction).
__device__ __forceinline__ float to_unit_direction(float* s) {
    float n = dir_norm(s[0], s[1], s[2]);
    s[0] /= n;
    s[1] /= n;
    s[2] /= n;
    return fmaxf(n - 1.0f, 0.0f);
}

// Curved wavefronts, after a step: the moved point and velocity back to p and w
// (src/track/motion/models.rs: from_unit_direction).
__device__ __forceinline__ void from_unit_direction(float* s, float rho) {
    float m = fmaxf(sqrtf(s[0] * s[0] + s[1] * s[1] + s[2] * s[2]), 1e-6f);
    float f = (1.0f + rho / m) / m;
    s[0] *= f;
    s[1] *= f;
    s[2] *= f;
    s[3] /= m;
    s[4] /= m;
    s[5] /= m;
}

// ---------------------------------------------------------------------------------------------
// Motion models (src/track/motion/models.rs: advance). Curved wavefronts (mode 1) step the direction
// and the velocity over the range, with the accelerations scaled by the inverse range.

__device__ __forceinline__ void advance(const Coeffs* cf, u32 mode, u32 m, float dt, float* s,
                                        float4 z) {
    u32 mi = m & MODEL_MASK;
    u32 kind = cf->kind[mi];
    float accel = cf->accel_std[mi];
    float turn_sd = cf->turn_sd[mi];
    float decay = cf->decay[mi];
    bool is_ct = kind == 1;
    bool is_static = kind == 2;
    float rho = 0.0f;
    if (mode == 1) rho = to_unit_direction(s);
    float ax = accel * z.x;
    float ay = accel * z.y;
    float az = accel * z.z;
    if (mode == 1) {
        ax *= rho;
        ay *= rho;
        az *= rho;
    }
    float w = s[6] + turn_sd * z.w;
    // The turn's terms only for a coordinated-turn particle (the CPU computes them for every
    // lane and then selects; the other models do not use them): a warp of other models skips
    // the sine, cosine and two divisions.
    float sn = 0.0f, cs = 1.0f, a_ct = 0.0f, b_ct = 0.0f;
    if (is_ct) {
        float wt = w * dt;
        fm_sincos_2pi(wt * (0.5f / 3.14159265358979323846f), &sn, &cs);
        bool small = fabsf(wt) < 1e-4f;
        a_ct = small ? dt * (1.0f - wt * wt / 6.0f) : sn / w;
        b_ct = small ? dt * wt * 0.5f : (1.0f - cs) / w;
    }
    float d = is_static ? decay : 1.0f;
    float pxx = is_ct ? a_ct : d * dt;
    float pxy = is_ct ? b_ct : 0.0f;
    float rc = is_ct ? cs : d;
    float rs = is_ct ? sn : 0.0f;
    float pz = d * dt;
    float hp = is_static ? dt * dt : 0.5f * dt * dt;
    float vx = s[3], vy = s[4], vz = s[5];
    s[0] += pxx * vx - pxy * vy + ax * hp;
    s[1] += pxy * vx + pxx * vy + ay * hp;
    s[2] += pz * vz + az * hp;
    s[3] = rc * vx - rs * vy + ax * dt;
    s[4] = rs * vx + rc * vy + ay * dt;
    s[5] = d * vz + az * dt;
    s[6] = is_ct ? w : s[6];
    if (mode == 1) from_unit_direction(s, rho);
    else if (mode == 2) onto_unit_sphere(s);
}

// Model switching: the number of cumulative thresholds at or below u (src/track/motion/models.rs:
// switch_slice).
__device__ __forceinline__ u32 switch_model(const StepParams* sp, u32 from, float u) {
    u32 out = 0;
    u32 row = (from & MODEL_MASK) * MAX_MODELS;
    for (u32 j = 0; j + 1 < sp->n_models; ++j) {
        out += sp->cdf[(row + j) & (MAX_MODELS * MAX_MODELS - 1)] <= u ? 1u : 0u;
    }
    return out;
}

// ---------------------------------------------------------------------------------------------
// TDOA likelihood (src/track/measure/likelihood.rs: log_likelihood_slice, per particle).

// Arrays of up to this many sensors keep each thread's distances and range rates in shared
// memory (pf_step: SharedMeas); larger ones in per-thread local memory (GlobalMeas).
#define RR_SHARED 8

// The per-particle log-likelihood, operation for operation as on the CPU. `M` says where the
// measurement, the geometry and the particle's distances (rho) and range rates live, and K > 0
// fixes the peaks per pair at compile time (K = 0: sp->k): the access policy and a constant
// stride and peak count keep address arithmetic out of the innermost loop, where the profile
// put half of pf_step's instructions when all of it went through generic pointers. A pair's
// sensors come as the policy's own handles (m.pair_a, m.pair_b: an index, or an offset ready
// for m.rho and m.rate), after m.load_pair(pi) (where a policy may load the pair's data at
// once); the sensor loop sets rho and rate by sensor index (m.set).
// MODE: -1 reads the mode from sp; 0 (3-D) or 1 (direction) fixes it at compile time, so
// that a kernel built for one mode carries none of the other's code (pf_step, pf_step_dir).
template <int MODE = -1, class M>
__device__ __forceinline__ float log_likelihood_t(const StepParams* sp, const float* s, float lag,
                                                  M& m) {
    // The step's constants, read once (the compiler cannot tell they do not change).
    const u32 ns = sp->n_sensors < MAX_SENSORS ? sp->n_sensors : MAX_SENSORS;
    const u32 n_pairs = sp->n_pairs;
    const u32 kk = M::K > 0 ? (u32)M::K : sp->k;
    const float inv_c = sp->inv_c, inv_two_var = sp->inv_two_var, gate = sp->gate;
    const bool three_d = MODE >= 0 ? MODE == 0 : sp->mode == 0;
    if (three_d) {
        for (u32 a = 0; a < ns; ++a) {
            float mx = m.sensor(3 * a), my = m.sensor(3 * a + 1), mz = m.sensor(3 * a + 2);
            float dx = s[0] - mx;
            float dy = s[1] - my;
            float dz = s[2] - mz;
            float d = fmaxf(sqrtf(dx * dx + dy * dy + dz * dz), 1e-6f);
            m.set(a, d, (dx * s[3] + dy * s[4] + dz * s[5]) / d);
        }
    } else {
        float dn = dir_norm(s[0], s[1], s[2]);
        float dinv = fmaxf(dn - 1.0f, 0.0f);
        for (u32 a = 0; a < ns; ++a) {
            float mx = m.sensor(3 * a), my = m.sensor(3 * a + 1), mz = m.sensor(3 * a + 2);
            m.set(a, dir_path(mx, my, mz, s[0], s[1], s[2], dn, dinv), 0.0f);
        }
    }
    float total = 0.0f;
    float prod = 1.0f;
    for (u32 pi = 0; pi < n_pairs; ++pi) {
        m.load_pair(pi);
        const u32 a = m.pair_a(pi), b = m.pair_b(pi);
        float ra = m.rho(a), rb = m.rho(b);
        float delta = three_d ? lag - 0.5f * (ra + rb) * inv_c : 0.0f;
        float pred = (ra - rb + (m.rate(a) - m.rate(b)) * delta) * inv_c;
        float l = m.floor(pi);
        // A peak with amp <= 0 is skipped (a NaN amplitude is not), as on the CPU. Outside the
        // gate a peak adds nothing (the CPU adds 0 branch-free); skipping its exponential saves
        // most of the work, since the particles of a track agree on which peaks are far.
        if (M::K > 0) {
            // The first peak (the strongest) alone, then the rest, which a particle seldom has
            // in its gate, behind one test for all of them (one branch instead of K - 1).
            constexpr int KC = M::K > 0 ? M::K : 1;
            float am[KC], d[KC];
            bool in[KC];
            bool rest = false;
#pragma unroll
            for (int j = 0; j < KC; ++j) {
                am[j] = m.amp(pi, j);
                d[j] = m.tdoa(pi, j) - pred;
                in[j] = !(am[j] <= 0.0f) && fabsf(d[j]) < gate;
                if (j > 0) rest |= in[j];
            }
            // In the gate (|d| < 6 sigma, sigma >= 1e-12 s: src/gpu/cuda/pf.rs) the exponent is
            // at least -18: fm_exp's clamp would not change it.
            if (in[0]) l += am[0] * fm_exp_in_range(-d[0] * d[0] * inv_two_var);
            if (rest) {
#pragma unroll
                for (int j = 1; j < KC; ++j)
                    if (in[j]) l += am[j] * fm_exp_in_range(-d[j] * d[j] * inv_two_var);
            }
        } else {
            for (u32 j = 0; j < kk; ++j) {
                float am = m.amp(pi, j);
                float d = m.tdoa(pi, j) - pred;
                if (!(am <= 0.0f) && fabsf(d) < gate)
                    l += am * fm_exp_in_range(-d * d * inv_two_var);
            }
        }
        prod *= l;
        if (pi % PAIR_GROUP == PAIR_GROUP - 1) {
            total += fm_ln(prod);
            prod = 1.0f;
        }
    }
    return total + fm_ln(prod);
}

// The measurement and geometry in global memory, rho and rate in per-thread local memory: for
// measurements or arrays too large for pf_step's shared arrays.
struct GlobalMeas {
    static const int K = 0;
    const float* sensors;
    const u32* pairs;
    const float* tdoa_;
    const float* amp_;
    const float* floor_;
    float rho_[MAX_SENSORS];
    float rate_[MAX_SENSORS];
    // rho_ and rate_ are written before they are read (no zeroing of 128 floats per call).
    __device__ GlobalMeas(const float* s, const u32* p, const float* t, const float* a,
                          const float* f, u32 kk)
        : sensors(s), pairs(p), tdoa_(t), amp_(a), floor_(f), k(kk) {}
    u32 k;
    __device__ void load_pair(u32) {}
    __device__ float sensor(u32 i) const { return sensors[i]; }
    __device__ u32 pair_a(u32 pi) const { return pairs[2 * pi]; }
    __device__ u32 pair_b(u32 pi) const { return pairs[2 * pi + 1]; }
    __device__ float tdoa(u32 pi, u32 j) const { return tdoa_[pi * k + j]; }
    __device__ float amp(u32 pi, u32 j) const { return amp_[pi * k + j]; }
    __device__ float floor(u32 pi) const { return floor_[pi]; }
    __device__ void set(u32 a, float r, float q) {
        rho_[a] = r;
        rate_[a] = q;
    }
    __device__ float rho(u32 a) const { return rho_[a]; }
    __device__ float rate(u32 a) const { return rate_[a]; }
};

// ---------------------------------------------------------------------------------------------
// Block reductions.

__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ double warp_sum_d(double v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_down_sync(0xffffffffu, v, o));
    return v;
}

// Pick a or b by a lane-uniform-or-not condition with bit operations. A plain `c ? v[i] :
// v[i + half]` on array elements is turned by the compiler into a load from a computed index,
// which moves the whole array to local memory (measured: the reduce-scatters below spilled
// their 32 values to the stack in pf_step, pf_sums and pf_temper_grid).
__device__ __forceinline__ float pick(bool c, float a, float b) {
    u32 m = c ? 0xffffffffu : 0u;
    return __uint_as_float((__float_as_uint(a) & m) | (__float_as_uint(b) & ~m));
}
__device__ __forceinline__ double pick(bool c, double a, double b) {
    u64 m = c ? ~0ull : 0ull;
    return __longlong_as_double((long long)(((u64)__double_as_longlong(a) & m) |
                                            ((u64)__double_as_longlong(b) & ~m)));
}

// One halving step of a reduce-scatter: lanes with bit HALF set keep the upper half of v[0..2
// HALF), the others the lower half, each adding its partner's copy. HALF is a template
// argument so that the loop is unrolled completely (with a run-time bound the compiler
// unrolled it only partly, indexed v at run time and so kept it in local memory).
template <int HALF, typename T>
__device__ __forceinline__ void reduce_scatter_step(T* v, int lane) {
    bool upper = (lane & HALF) != 0;
#pragma unroll
    for (int i = 0; i < HALF; ++i) {
        T lo = v[i], hi = v[i + HALF];
        T send = pick(upper, lo, hi);
        T keep = pick(upper, hi, lo);
        v[i] = keep + __shfl_xor_sync(0xffffffffu, send, HALF);
    }
}

// Reduce-scatter over a warp: on entry every lane holds v[0..32); on exit lane l's v[0] is the
// sum over the warp's lanes of v[l] (31 shuffles for 32 sums, against 160 for 32 warp_sums).
template <typename T>
__device__ __forceinline__ T warp_reduce_scatter32(T (&v)[32]) {
    int lane = threadIdx.x & 31;
    reduce_scatter_step<16>(v, lane);
    reduce_scatter_step<8>(v, lane);
    reduce_scatter_step<4>(v, lane);
    reduce_scatter_step<2>(v, lane);
    reduce_scatter_step<1>(v, lane);
    return v[0];
}

// The same for 16 values: lane l's result is the sum of v[l & 15].
template <typename T>
__device__ __forceinline__ T warp_reduce_scatter16(T (&v)[16]) {
    int lane = threadIdx.x & 31;
#pragma unroll
    for (int i = 0; i < 16; ++i) v[i] += __shfl_xor_sync(0xffffffffu, v[i], 16);
    reduce_scatter_step<8>(v, lane);
    reduce_scatter_step<4>(v, lane);
    reduce_scatter_step<2>(v, lane);
    reduce_scatter_step<1>(v, lane);
    return v[0];
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024); the result is valid in
// thread 0. `scratch` holds 32 floats.
__device__ float block_sum(float v, float* scratch) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    v = warp_sum(v);
    __syncthreads();
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    int nw = blockDim.x >> 5;
    v = threadIdx.x < nw ? scratch[threadIdx.x] : 0.0f;
    if (warp == 0) v = warp_sum(v);
    return v;
}

// Sums of a and b over the block, in every thread (as block_sum's, with one barrier for both).
// `scratch` (32 float2) must not be in use.
__device__ __forceinline__ void block_sum2_all(float& a, float& b, float2* scratch) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    a = warp_sum(a);
    b = warp_sum(b);
    if (lane == 0) scratch[warp] = make_float2(a, b);
    __syncthreads();
    int nw = blockDim.x >> 5;
    float2 v = lane < nw ? scratch[lane] : make_float2(0.0f, 0.0f);
    // warp_sum's total is in lane 0.
    a = __shfl_sync(0xffffffffu, warp_sum(v.x), 0);
    b = __shfl_sync(0xffffffffu, warp_sum(v.y), 0);
}

// Maximum over the block, valid in every thread.
__device__ float block_max_all(float v, float* scratch) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    v = warp_max(v);
    __syncthreads();
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    int nw = blockDim.x >> 5;
    v = threadIdx.x < nw ? scratch[threadIdx.x] : __int_as_float(0xff800000);
    if (warp == 0) v = warp_max(v);
    if (threadIdx.x == 0) scratch[0] = v;
    __syncthreads();
    v = scratch[0];
    __syncthreads();
    return v;
}
