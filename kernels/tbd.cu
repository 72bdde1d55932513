// The curves bank of track-before-detect: the CUDA twin of src/track/filter/bernoulli/bank.rs, stage for
// stage and operation for operation (digest B2.4 and B5; tests B-6, B-11, B-12). T tracks of
// N_b birth and N_c continuing particles; blockIdx.y is the track. Particles, weights and the
// cumulative sums stay on the device; a step returns per track only the existence, the birth
// share, the two sets' log-sums, the mean's fixed-point sums and the birth-derived count.
//
// A step is nine launches: tbd_reset; tbd_lobes (each pair's lobe-table entries of the frame,
// src/track/filter/bernoulli/lobes.rs); tbd_weigh (a thread draws or moves each particle, then a warp weighs
// each one, lanes over pairs, two table reads a pair, butterfly sum); tbd_set_sums (each set's
// quantised weights, integer atomics); tbd_exist (one thread per track, f64 in fm_exp64 /
// fm_ln64); tbd_tile_sums and tbd_scan_tiles (the mixture's integer prefix over tiles); tbd_cum
// (the prefix within tiles); tbd_resample (systematic targets, binary search, gather, mean).
// Integer sums are the same in any order, so atomics give the CPU's sums.
//
// Layout: births[k][t * nb + i], cont[k][t * nc + i] (k < TBD_DIM), lw[t * per + i] with
// per = nb + nc and the births first, cum the same.

#include "common.cuh"

#define TBD_DIM 7
#define TBD_WEIGH_BLOCK 256
#define TBD_WEIGH_TILE 256
#define TBD_BLOCK 256
#define TBD_TILE 1024
#define TBD_MAX_CELLS 256
#define TBD_MAX_CANDS 16
#define TBD_KAPPA_STEPS 32
#define TBD_Q_SCALE 4294967296.0f
#define TBD_MEAN_SCALE 65536.0f
#define TBD_Q_LN 22.18070977791825
// +inf in f32 and f64 (NVRTC has no math.h macros).
#define TBD_INF __int_as_float(0x7f800000)
#define TBD_INF64 __longlong_as_double(0x7ff0000000000000ll)

// The model as the host packs it (src/gpu/cuda/tbd.rs: pack_model), 4-byte words in order.
struct TbdModel {
    u32 n_sensors, n_pairs, curve_half, w, kappa_len;
    u32 grid_n[3];
    float per_m, beta;
    float profile[3];
    float lo[3];
    float hi[3];
    float frame_s, accel_std, coherence_step, coh_lo, coh_hi, speed_max;
    float grid_size[3];
    float cand_spread, cand_norm;
};

// Per-step values (src/gpu/cuda/tbd.rs: Step), uploaded with each step.
struct TbdStep {
    u64 seed, frame;
    double p_birth, p_death;
    u32 tracks, nb, nc, n_cells, n_cands;
    float ln_nb, ln_nc;
    float shares[3];
};

// ---------------------------------------------------------------------------------------------
// f64 exp and ln (src/math/fastmath64.rs).

__device__ __forceinline__ double fm_exp64(double x) {
    if (x != x) return x;
    if (x < -708.0) return 0.0;
    if (x > 709.0) return __longlong_as_double(0x7ff0000000000000ll);
    const double ln2_hi = __longlong_as_double(0x3fe62e42fee00000ll);
    const double ln2_lo = __longlong_as_double(0x3dea39ef35793c76ll);
    double n = round(x * 1.4426950408889634);
    double r = x - n * ln2_hi - n * ln2_lo;
    double p = 1.0 / 6227020800.0;
    double fact = 6227020800.0;
    for (int k = 12; k >= 0; --k) {
        fact /= (double)(k + 1);
        p = 1.0 / fact + r * p;
    }
    return p * __longlong_as_double((long long)((u64)((long long)n + 1023) << 52));
}

__device__ __forceinline__ double fm_ln64(double x) {
    if (x != x || x < 0.0) return __longlong_as_double(0x7ff8000000000000ll);
    if (x == 0.0) return __longlong_as_double((long long)0xfff0000000000000ull);
    if (x == __longlong_as_double(0x7ff0000000000000ll)) return x;
    long long e = 0;
    if (x < 2.2250738585072014e-308) {
        x = x * 18014398509481984.0;
        e = -54;
    }
    u64 bits = (u64)__double_as_longlong(x);
    e += (long long)((bits >> 52) & 0x7ff) - 1023;
    double m = __longlong_as_double((long long)((bits & 0x000fffffffffffffull) |
                                                0x3ff0000000000000ull));
    if (m > 1.4142135623730951) {
        m *= 0.5;
        e += 1;
    }
    double s = (m - 1.0) / (m + 1.0);
    double s2 = s * s;
    double q = 1.0 / 21.0;
    for (int k = 9; k >= 0; --k) q = 1.0 / (double)(2 * k + 1) + s2 * q;
    double p = 2.0 * s * q;
    double ef = (double)e;
    const double ln2_hi = __longlong_as_double(0x3fe62e42fee00000ll);
    const double ln2_lo = __longlong_as_double(0x3dea39ef35793c76ll);
    return ef * ln2_hi + (p + ef * ln2_lo);
}

// ---------------------------------------------------------------------------------------------
// Small helpers (src/track/filter/bernoulli/bank.rs: quantise, clean, fixed, log_sum, target).

__device__ __forceinline__ u64 tbd_quantise(float w) {
    u64 q = (u64)(w * TBD_Q_SCALE);
    return q < 0xffffffffull ? q : 0xffffffffull;
}

__device__ __forceinline__ float tbd_clean(float lw) {
    if (lw != lw) return -TBD_INF;
    return fminf(lw, 3.40282347e38f);
}

__device__ __forceinline__ long long tbd_fixed(float x) {
    float v = x * TBD_MEAN_SCALE;
    if (v != v) return 0;
    v = v < -1e15f ? -1e15f : (v > 1e15f ? 1e15f : v);
    return __float2ll_rn(v);
}

__device__ __forceinline__ double tbd_log_sum(float mx, u64 q) {
    if (q == 0 || mx == -TBD_INF) return -TBD_INF64;
    return (double)mx + fm_ln64((double)q) - TBD_Q_LN;
}

// An f32 as a u32 whose unsigned order is the floats' order (for atomicMax).
__device__ __forceinline__ u32 tbd_key(float f) {
    u32 b = __float_as_uint(f);
    return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

__device__ __forceinline__ float tbd_unkey(u32 k) {
    return __uint_as_float((k & 0x80000000u) ? (k & 0x7fffffffu) : ~k);
}

__device__ __forceinline__ void tbd_uniforms6(uint4 w, float* u) {
    u[0] = uniform21(w.x >> 11);
    u[1] = uniform21(((w.x & 0x7ffu) << 10) | (w.y >> 22));
    u[2] = uniform21((w.y >> 1) & 0x1fffffu);
    u[3] = uniform21(((w.y & 1u) << 20) | (w.z >> 12));
    u[4] = uniform21(((w.z & 0xfffu) << 9) | (w.w >> 23));
    u[5] = uniform21((w.w >> 2) & 0x1fffffu);
}

// ---------------------------------------------------------------------------------------------
// The model (src/track/filter/bernoulli/bank.rs: BankModel).

__device__ __forceinline__ float tbd_delay(const TbdModel& m, const float* sens, const u32* pairs,
                                           u32 p, const float* x) {
    u32 a = pairs[2 * p], b = pairs[2 * p + 1];
    float ra = 0.0f, rb = 0.0f, num = 0.0f;
    for (int k = 0; k < 3; ++k) {
        float sa = sens[3 * a + k], sb = sens[3 * b + k];
        float da = x[k] - sa, db = x[k] - sb;
        ra += da * da;
        rb += db * db;
        num += (sb - sa) * (2.0f * x[k] - sa - sb);
    }
    float den = sqrtf(ra) + sqrtf(rb);
    return den > 0.0f ? num / den * m.per_m : 0.0f;
}

// The lobe tables (src/track/filter/bernoulli/lobes.rs): interval j of d spans
// [-(curve_half + w) + j / KAPPA_STEPS, ... + 1 / KAPPA_STEPS); its area's lags and the kappa
// values at its two ends, in integers from its midpoint.
__device__ __forceinline__ u32 tbd_lobe_reach(const TbdModel& m) { return m.curve_half + m.w; }

__device__ __forceinline__ void tbd_lobe_lags(const TbdModel& m, u32 j, int* first, int* last) {
    const u32 half = 2 * TBD_KAPPA_STEPS;
    // In half-step units from -(2 reach + 1) lags, so that every numerator is non-negative
    // and the floor divisions are plain unsigned ones.
    u32 reach = tbd_lobe_reach(m);
    u32 base = 2 * reach + 1;
    u32 mid = 2 * j + 1 + half * (base - reach);
    u32 w = half * m.w;
    int f = (int)((mid - w) / half) + 1 - (int)base;
    int l = (int)((mid + w) / half) - (int)base;
    int c = (int)m.curve_half;
    *first = f < -c ? -c : f;
    *last = l > c ? c : l;
}

__device__ __forceinline__ void tbd_lobe_ends(const TbdModel& m, const float* kap, u32 j, int l,
                                              float* a, float* b) {
    int s = TBD_KAPPA_STEPS * (l + (int)tbd_lobe_reach(m)) - (int)j;
    int len = (int)m.kappa_len;
    if (s > 0) {
        bool in = s < len;
        *a = in ? kap[s] : 0.0f;
        *b = in ? kap[s - 1] : 0.0f;
    } else {
        bool in = 1 - s < len;
        *a = in ? kap[-s] : 0.0f;
        *b = in ? kap[1 - s] : 0.0f;
    }
}

__device__ __forceinline__ float tbd_pair_term(const TbdModel& m, const float* sens,
                                               const u32* pairs, const float2* num_t,
                                               const float4* den_t, u32 n_int, float sigma,
                                               u32 p, const float* x) {
    float d = tbd_delay(m, sens, pairs, p, x);
    float c = (float)m.curve_half;
    float num = 0.0f, den = 0.0f;
    // The interval and fraction from d less its whole lags (BankModel::lobe_at).
    float reach = (float)tbd_lobe_reach(m);
    u32 j = n_int;
    float f = 0.0f;
    if (d >= -reach && d < reach) {
        float whole = floorf(d);
        float steps = (d - whole) * (float)TBD_KAPPA_STEPS;
        float k = floorf(steps);
        j = (u32)(whole + reach) * TBD_KAPPA_STEPS + (u32)k;
        f = steps - k;
    }
    if (j < n_int) {
        float2 u = num_t[(size_t)p * n_int + j];
        float4 k = den_t[j];
        float g = 1.0f - f;
        num = u.x * g + u.y * f;
        den = k.x * g * g + 2.0f * k.y * f * g + k.z * f * f;
    }
    float xr = d * (1.0f / c);
    float x2 = xr * xr;
    float v = 1.0f + m.profile[1] * x2 + m.profile[2] * x2 * x2;
    float rel = v < 0.05f ? 0.05f : (v > 1.5f ? 1.5f : v);
    float s2 = sigma * sigma * rel;
    float a = x[6];
    // (A u - A^2/2) / s^2 with u = num / den, in one division.
    return den > 0.0f ? (a * num - 0.5f * a * a * den) / (den * s2) : (-0.5f * a * a) / s2;
}

// ln l(z | x) on every lane of the warp (the same value on each).
__device__ __forceinline__ float tbd_log_lr(const TbdModel& m, const float* sens, const u32* pairs,
                                            const float2* num_t, const float4* den_t, u32 n_int,
                                            const float* sigma, const u32* ok, const float* x,
                                            u32 lane) {
    bool inside = true;
    for (int k = 0; k < 3; ++k) inside = inside && x[k] >= m.lo[k] && x[k] <= m.hi[k];
    if (!inside) return -TBD_INF;
    float v = 0.0f;
    for (u32 p = lane; p < m.n_pairs; p += 32) {
        if (ok[p] != 0) v += tbd_pair_term(m, sens, pairs, num_t, den_t, n_int, sigma[p], p, x);
    }
    for (int off = 16; off > 0; off /= 2) v = v + __shfl_xor_sync(0xffffffffu, v, off);
    return m.beta * v;
}

__device__ __forceinline__ u32 tbd_pick(u32 len, float r) {
    u32 i = (u32)(r * (float)len);
    return i < len - 1 ? i : len - 1;
}

__device__ __forceinline__ float tbd_proposal_density(const TbdModel& m, const TbdStep& st,
                                                      const u32* cells, const float* cands,
                                                      const float* x) {
    float q = st.shares[0];
    float idx[3];
    bool inside = true;
    for (int k = 0; k < 3; ++k) {
        idx[k] = floorf((x[k] - m.lo[k]) / m.grid_size[k]);
        inside = inside && idx[k] >= 0.0f && idx[k] < (float)m.grid_n[k];
    }
    if (inside && st.n_cells > 0) {
        u32 cell = (u32)idx[0] + m.grid_n[0] * ((u32)idx[1] + m.grid_n[1] * (u32)idx[2]);
        bool top = false;
        for (u32 i = 0; i < st.n_cells; ++i) top = top || cells[i] == cell;
        if (top) {
            u32 n = m.grid_n[0] * m.grid_n[1] * m.grid_n[2];
            q += st.shares[2] * (float)n / (float)st.n_cells;
        }
    }
    if (st.shares[1] > 0.0f && st.n_cands > 0) {
        float s2 = m.cand_spread * m.cand_spread;
        float sum = 0.0f;
        for (u32 c = 0; c < st.n_cands; ++c) {
            float d2 = 0.0f;
            for (int k = 0; k < 3; ++k) {
                float e = x[k] - cands[3 * c + k];
                d2 += e * e;
            }
            sum += fm_exp(-0.5f * d2 / s2);
        }
        q += st.shares[1] * m.cand_norm * sum / (float)st.n_cands;
    }
    return q;
}

// A birth drawn into x; returns ln(p_b / q_b).
__device__ __forceinline__ float tbd_draw_birth(const TbdModel& m, const TbdStep& st,
                                                const u32* cells, const float* cands, u32 t,
                                                u32 i, float* x) {
    float u[6], v[6];
    tbd_uniforms6(draw(st.seed, st.frame, t, i, S_INIT_POS), u);
    tbd_uniforms6(draw(st.seed, st.frame, t, i, S_INIT_VEL), v);
    u32 n = m.grid_n[0] * m.grid_n[1] * m.grid_n[2];
    if (u[0] >= st.shares[0] && u[0] < st.shares[0] + st.shares[1]) {
        u32 c = tbd_pick(st.n_cands, u[1]);
        float z[6];
        normals6(draw(st.seed, st.frame, t, i, S_ROUGHEN), z);
        for (int k = 0; k < 3; ++k) x[k] = cands[3 * c + k] + m.cand_spread * z[k];
    } else {
        u32 cell = (u[0] < st.shares[0] || st.n_cells == 0) ? tbd_pick(n, u[1])
                                                            : cells[tbd_pick(st.n_cells, u[1])];
        u32 idx[3] = {cell % m.grid_n[0], (cell / m.grid_n[0]) % m.grid_n[1],
                      cell / (m.grid_n[0] * m.grid_n[1])};
        for (int k = 0; k < 3; ++k) x[k] = m.lo[k] + ((float)idx[k] + u[2 + k]) * m.grid_size[k];
    }
    float vmax = m.speed_max;
    x[3] = (2.0f * u[5] - 1.0f) * vmax;
    x[4] = (2.0f * v[0] - 1.0f) * vmax;
    x[5] = (2.0f * v[1] - 1.0f) * 0.25f * vmax;
    x[6] = m.coh_lo + v[2] * (m.coh_hi - m.coh_lo);
    return -fm_ln(tbd_proposal_density(m, st, cells, cands, x));
}

__device__ __forceinline__ void tbd_propagate(const TbdModel& m, const TbdStep& st, u32 t, u32 i,
                                              float* x) {
    float g[6];
    normals6(draw(st.seed, st.frame, t, i, S_PREDICT), g);
    float dt = m.frame_s;
    for (int k = 0; k < 3; ++k) {
        float a = m.accel_std * g[k];
        x[k] = x[k] + (x[k + 3] * dt + 0.5f * a * dt * dt);
        x[k + 3] = x[k + 3] + a * dt;
    }
    float a = x[6] + m.coherence_step * g[3];
    x[6] = a < m.coh_lo ? fminf(2.0f * m.coh_lo - a, m.coh_hi)
                        : (a > m.coh_hi ? fmaxf(2.0f * m.coh_hi - a, m.coh_lo) : a);
}

// ---------------------------------------------------------------------------------------------
// The kernels.

// Each pair's lobe-table entries of the frame: thread (j, p) sums pair p's curve over interval
// j's area with the kappa values at the interval's ends (BankModel::lobe_num).
extern "C" __global__ void __launch_bounds__(TBD_BLOCK)
tbd_lobes(const TbdModel* __restrict__ mp, const float* __restrict__ kap,
          const float* __restrict__ curves, float2* __restrict__ num_t) {
    const TbdModel m = *mp;
    u32 n_int = 2 * tbd_lobe_reach(m) * TBD_KAPPA_STEPS;
    u32 j = blockIdx.x * blockDim.x + threadIdx.x;
    u32 p = blockIdx.y;
    if (j >= n_int) return;
    const float* curve = curves + (size_t)p * (2 * m.curve_half + 1);
    int first, last;
    tbd_lobe_lags(m, j, &first, &last);
    float u = 0.0f, v = 0.0f;
    int count = last - first + 1;
#pragma unroll 1
    for (int i = 0; i < count; ++i) {
        int l = first + i;
        float a, b;
        tbd_lobe_ends(m, kap, j, l, &a, &b);
        float c = curve[l + (int)m.curve_half];
        u = u + a * c;
        v = v + b * c;
    }
    num_t[(size_t)p * n_int + j] = make_float2(u, v);
}

// Zero the step's sums; the set maxima to -inf.
extern "C" __global__ void tbd_reset(u32 tracks, u32* max_key, u64* qsum, u64* msum,
                                     u32* from_birth) {
    u32 t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= tracks) return;
    for (int s = 0; s < 2; ++s) {
        max_key[2 * t + s] = tbd_key(-TBD_INF);
        qsum[2 * t + s] = 0;
    }
    for (int k = 0; k < TBD_DIM; ++k) msum[TBD_DIM * t + k] = 0;
    from_birth[t] = 0;
}

// Stage 1, TBD_WEIGH_TILE particles per block, a block within one set: each thread draws or
// moves one particle (into shared memory), then each warp weighs the block's particles one
// after another with its lanes over the pairs, then each thread writes its particle and weight
// (coalesced) and the block's largest weight goes to its set's maximum (one atomic a block).
// Dynamic shared memory: the proposal's cells and candidates.
extern "C" __global__ void __launch_bounds__(TBD_WEIGH_BLOCK)
tbd_weigh(const TbdModel* __restrict__ mp, const TbdStep* __restrict__ sp,
          const float* __restrict__ sens, const u32* __restrict__ pairs,
          const float2* __restrict__ num_t, const float4* __restrict__ den_t,
          const float* __restrict__ sigma, const u32* __restrict__ ok,
          const u32* __restrict__ cells_g, const float* __restrict__ cands_g,
          const u32* __restrict__ has_cont, float* __restrict__ births, float* __restrict__ cont,
          float* __restrict__ lw, u32* __restrict__ max_key) {
    extern __shared__ float tbd_shared[];
    __shared__ float xs[TBD_DIM][TBD_WEIGH_TILE];
    __shared__ float ratio[TBD_WEIGH_TILE];
    __shared__ float warp_max[TBD_WEIGH_BLOCK / 32];
    const TbdModel m = *mp;
    const TbdStep st = *sp;
    const u32 n_int = 2 * tbd_lobe_reach(m) * TBD_KAPPA_STEPS;
    u32* cells = (u32*)tbd_shared;
    float* cands = (float*)(cells + TBD_MAX_CELLS);
    for (u32 i = threadIdx.x; i < st.n_cells; i += blockDim.x) cells[i] = cells_g[i];
    for (u32 i = threadIdx.x; i < 3 * st.n_cands; i += blockDim.x) cands[i] = cands_g[i];
    __syncthreads();

    u32 t = blockIdx.y;
    u32 tiles_b = (st.nb + TBD_WEIGH_TILE - 1) / TBD_WEIGH_TILE;
    bool birth = blockIdx.x < tiles_b;
    u32 n_set = birth ? st.nb : st.nc;
    u32 i0 = (birth ? blockIdx.x : blockIdx.x - tiles_b) * TBD_WEIGH_TILE;
    u32 n_here = n_set - i0 < TBD_WEIGH_TILE ? n_set - i0 : TBD_WEIGH_TILE;
    bool live = birth || has_cont[t] != 0;
    u32 q = threadIdx.x;
    u32 i = i0 + q;
    size_t set_stride = (size_t)st.tracks * (birth ? st.nb : st.nc);
    size_t at = (size_t)t * (birth ? st.nb : st.nc) + i;
    float* state = birth ? births : cont;
    float corr = 0.0f;
    if (q < n_here && live) {
        float x[TBD_DIM];
        if (birth) {
            corr = tbd_draw_birth(m, st, cells, cands, t, i, x);
        } else {
            for (int k = 0; k < TBD_DIM; ++k) x[k] = cont[k * set_stride + at];
            tbd_propagate(m, st, t, st.nb + i, x);
        }
        for (int k = 0; k < TBD_DIM; ++k) xs[k][q] = x[k];
    }
    __syncthreads();
    if (live) {
        u32 warp = threadIdx.x / 32, lane = threadIdx.x % 32;
        for (u32 r = warp; r < n_here; r += TBD_WEIGH_BLOCK / 32) {
            float x[TBD_DIM];
            for (int k = 0; k < TBD_DIM; ++k) x[k] = xs[k][r];
            float l = tbd_log_lr(m, sens, pairs, num_t, den_t, n_int, sigma, ok, x, lane);
            if (lane == 0) ratio[r] = l;
        }
    }
    __syncthreads();
    float w = -TBD_INF;
    if (q < n_here) {
        if (live) {
            w = birth ? tbd_clean(ratio[q] + corr - st.ln_nb) : tbd_clean(ratio[q] - st.ln_nc);
            for (int k = 0; k < TBD_DIM; ++k) state[k * set_stride + at] = xs[k][q];
        }
        lw[(size_t)t * (st.nb + st.nc) + (birth ? 0 : st.nb) + i] = w;
    }
    float b = w;
    for (int off = 16; off > 0; off /= 2) b = fmaxf(b, __shfl_xor_sync(0xffffffffu, b, off));
    if (threadIdx.x % 32 == 0) warp_max[threadIdx.x / 32] = b;
    __syncthreads();
    if (threadIdx.x == 0) {
        float mx = warp_max[0];
        for (int k = 1; k < TBD_WEIGH_BLOCK / 32; ++k) mx = fmaxf(mx, warp_max[k]);
        atomicMax(&max_key[2 * t + (birth ? 0 : 1)], tbd_key(mx));
    }
}

// A block's u64 sum of one value per thread, on thread 0 (integers: any order).
__device__ __forceinline__ u64 tbd_block_sum(u64 v) {
    __shared__ u64 part[TBD_BLOCK / 32];
    for (int off = 16; off > 0; off /= 2) v += __shfl_xor_sync(0xffffffffu, v, off);
    if (threadIdx.x % 32 == 0) part[threadIdx.x / 32] = v;
    __syncthreads();
    u64 s = 0;
    if (threadIdx.x == 0)
        for (int k = 0; k < TBD_BLOCK / 32; ++k) s += part[k];
    return s;
}

// Stage 2: each set's quantised weights relative to its largest, summed.
extern "C" __global__ void __launch_bounds__(TBD_BLOCK)
tbd_set_sums(const TbdStep* __restrict__ sp, const float* __restrict__ lw,
             const u32* __restrict__ max_key, u64* __restrict__ qsum) {
    const TbdStep st = *sp;
    u32 t = blockIdx.y;
    u32 tiles_b = (st.nb + TBD_TILE - 1) / TBD_TILE;
    bool birth = blockIdx.x < tiles_b;
    u32 s = birth ? 0 : 1;
    u32 n_set = birth ? st.nb : st.nc;
    u32 i0 = (birth ? blockIdx.x : blockIdx.x - tiles_b) * TBD_TILE;
    float mx = tbd_unkey(max_key[2 * t + s]);
    const float* w = lw + (size_t)t * (st.nb + st.nc) + (birth ? 0 : st.nb);
    u64 q = 0;
    if (mx > -TBD_INF) {
        for (u32 i = i0 + threadIdx.x; i < i0 + TBD_TILE && i < n_set; i += TBD_BLOCK)
            q += tbd_quantise(fm_exp(w[i] - mx));
    }
    u64 total = tbd_block_sum(q);
    if (threadIdx.x == 0 && total > 0) atomicAdd(&qsum[2 * t + s], total);
}

// Stage 3: the existence update (src/track/filter/bernoulli/bank.rs: existence_update), one thread a track.
// out[t * 4 ..]: p, birth share, ln Σ births, ln Σ continuing.
extern "C" __global__ void tbd_exist(const TbdStep* __restrict__ sp, const u32* __restrict__ max_key,
                                     const u64* __restrict__ qsum, double* __restrict__ p_exist,
                                     u32* __restrict__ has_cont, float* __restrict__ off,
                                     double* __restrict__ out) {
    const TbdStep st = *sp;
    u32 t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= st.tracks) return;
    float mx[2];
    double ls[2];
    for (int s = 0; s < 2; ++s) {
        mx[s] = tbd_unkey(max_key[2 * t + s]);
        ls[s] = mx[s] > -TBD_INF ? tbd_log_sum(mx[s], qsum[2 * t + s]) : -TBD_INF64;
    }
    double p = p_exist[t];
    p = p < 0.0 ? 0.0 : (p > 1.0 ? 1.0 : p);
    double fb = fm_ln64(st.p_birth) + fm_ln64(1.0 - p);
    double fc = fm_ln64(1.0 - st.p_death) + fm_ln64(p);
    double lmb = fb + ls[0], lmc = fc + ls[1];
    double mm = fmax(lmb, lmc);
    double tot = mm == -TBD_INF64 ? mm : mm + fm_ln64(fm_exp64(lmb - mm) + fm_exp64(lmc - mm));
    double absent = fm_ln64(st.p_death * p + (1.0 - st.p_birth) * (1.0 - p));
    double x = tot - absent;
    double pn;
    if (x >= 0.0) {
        pn = 1.0 / (1.0 + fm_exp64(-x));
    } else {
        double e = fm_exp64(x);
        pn = e / (1.0 + e);
    }
    double share = tot == -TBD_INF64 ? 0.0 : fm_exp64(lmb - tot);
    double g = fmax((double)mx[0] + fb, (double)mx[1] + fc);
    off[2 * t] = g == -TBD_INF64 ? -TBD_INF : (float)(fb - g);
    off[2 * t + 1] = g == -TBD_INF64 ? -TBD_INF : (float)(fc - g);
    p_exist[t] = pn;
    has_cont[t] = 1;
    out[4 * t] = pn;
    out[4 * t + 1] = share;
    out[4 * t + 2] = ls[0];
    out[4 * t + 3] = ls[1];
}

__device__ __forceinline__ u64 tbd_mixture_q(const float* w, const float* off, u32 nb, u32 i) {
    return tbd_quantise(fm_exp(w[i] + off[i >= nb ? 1 : 0]));
}

// Stage 4a: each tile's sum of the quantised mixture weights.
extern "C" __global__ void __launch_bounds__(TBD_BLOCK)
tbd_tile_sums(const TbdStep* __restrict__ sp, const float* __restrict__ lw,
              const float* __restrict__ off, u64* __restrict__ tile_tot) {
    const TbdStep st = *sp;
    u32 t = blockIdx.y, per = st.nb + st.nc;
    u32 i0 = blockIdx.x * TBD_TILE;
    const float* w = lw + (size_t)t * per;
    u64 q = 0;
    for (u32 i = i0 + threadIdx.x; i < i0 + TBD_TILE && i < per; i += TBD_BLOCK)
        q += tbd_mixture_q(w, off + 2 * t, st.nb, i);
    u64 total = tbd_block_sum(q);
    if (threadIdx.x == 0) tile_tot[(size_t)t * gridDim.x + blockIdx.x] = total;
}

// An exclusive scan of one value per thread over the block (integers); the block's total too.
__device__ __forceinline__ u64 tbd_block_scan(u64 v, u64* total) {
    __shared__ u64 warp_tot[TBD_BLOCK / 32];
    u32 lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    u64 inc = v;
    for (int off = 1; off < 32; off *= 2) {
        u64 o = __shfl_up_sync(0xffffffffu, inc, off);
        if (lane >= (u32)off) inc += o;
    }
    if (lane == 31) warp_tot[warp] = inc;
    __syncthreads();
    u64 before = 0, all = 0;
    for (u32 k = 0; k < TBD_BLOCK / 32; ++k) {
        if (k < warp) before += warp_tot[k];
        all += warp_tot[k];
    }
    __syncthreads();
    *total = all;
    return before + inc - v;
}

// Stage 4b: each track's tiles' offsets (exclusive) and its total, one block a track.
extern "C" __global__ void __launch_bounds__(TBD_BLOCK)
tbd_scan_tiles(u32 tiles, u64* __restrict__ tile_tot, u64* __restrict__ total) {
    u32 t = blockIdx.x;
    u64* tt = tile_tot + (size_t)t * tiles;
    u32 chunk = (tiles + TBD_BLOCK - 1) / TBD_BLOCK;
    u32 a = threadIdx.x * chunk;
    u64 mine = 0;
    for (u32 k = a; k < a + chunk && k < tiles; ++k) mine += tt[k];
    u64 all;
    u64 run = tbd_block_scan(mine, &all);
    for (u32 k = a; k < a + chunk && k < tiles; ++k) {
        u64 v = tt[k];
        tt[k] = run;
        run += v;
    }
    if (threadIdx.x == 0) total[t] = all;
}

// Stage 4c: the inclusive prefix of the quantised mixture weights, TBD_TILE per block (four
// consecutive per thread).
extern "C" __global__ void __launch_bounds__(TBD_BLOCK)
tbd_cum(const TbdStep* __restrict__ sp, const float* __restrict__ lw,
        const float* __restrict__ off, const u64* __restrict__ tile_off, u64* __restrict__ cum) {
    const TbdStep st = *sp;
    u32 t = blockIdx.y, per = st.nb + st.nc;
    const float* w = lw + (size_t)t * per;
    u32 i0 = blockIdx.x * TBD_TILE + threadIdx.x * 4;
    u64 q[4];
    u64 mine = 0;
    for (int k = 0; k < 4; ++k) {
        u32 i = i0 + k;
        q[k] = i < per ? tbd_mixture_q(w, off + 2 * t, st.nb, i) : 0;
        mine += q[k];
    }
    u64 all;
    u64 run = tbd_block_scan(mine, &all) + tile_off[(size_t)t * gridDim.x + blockIdx.x];
    for (int k = 0; k < 4; ++k) {
        u32 i = i0 + k;
        run += q[k];
        if (i < per) cum[(size_t)t * per + i] = run;
    }
}

// The systematic target of output j of n (src/track/filter/bernoulli/bank.rs: target).
__device__ __forceinline__ u64 tbd_target(float u0, u32 j, u32 n, u64 total) {
    return (u64)(((double)u0 + (double)j) / (double)n * (double)total);
}

// The first index in [lo, hi) whose cumulative sum exceeds `target` (hi when none does).
__device__ __forceinline__ u32 tbd_first_over(const u64* c, u64 target, u32 lo, u32 hi) {
    while (lo < hi) {
        u32 mid = lo + (hi - lo) / 2;
        if (c[mid] <= target) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

// Stage 5: systematic resampling of N_c outputs, the gather into `next`, the mean's fixed-point
// sums and the birth-derived count.
extern "C" __global__ void __launch_bounds__(TBD_BLOCK)
tbd_resample(const TbdStep* __restrict__ sp, const u64* __restrict__ cum,
             const u64* __restrict__ total_g, const float* __restrict__ births,
             const float* __restrict__ cont, float* __restrict__ next, u64* __restrict__ msum,
             u32* __restrict__ from_birth) {
    const TbdStep st = *sp;
    u32 t = blockIdx.y, per = st.nb + st.nc;
    u32 j = blockIdx.x * TBD_BLOCK + threadIdx.x;
    bool active = j < st.nc;
    u64 total = total_g[t];
    const u64* c = cum + (size_t)t * per;
    u32 a = 0;
    if (total > 0) {
        // Targets rise with j, so the block's ancestors lie between its first output's and its
        // last's: two searches over the whole sum, then each output's within that span.
        __shared__ u32 span[2];
        float u0 = uniform(draw(st.seed, st.frame, t, 0, S_RESAMPLE).x);
        u32 j0 = blockIdx.x * TBD_BLOCK;
        u32 j1 = j0 + TBD_BLOCK - 1 < st.nc - 1 ? j0 + TBD_BLOCK - 1 : st.nc - 1;
        if (threadIdx.x < 2)
            span[threadIdx.x] = tbd_first_over(c, tbd_target(u0, threadIdx.x == 0 ? j0 : j1,
                                                              st.nc, total), 0, per);
        __syncthreads();
        if (active) {
            u32 hi = span[1] + 1 < per ? span[1] + 1 : per;
            a = tbd_first_over(c, tbd_target(u0, j, st.nc, total), span[0], hi);
            a = a < per - 1 ? a : per - 1;
        }
    } else if (active) {
        a = st.nb > 0 ? j % st.nb : st.nb + j;
    }
    bool from_b = active && a < st.nb;
    for (int k = 0; k < TBD_DIM; ++k) {
        u64 f = 0;
        if (active) {
            float v = from_b ? births[(size_t)k * st.tracks * st.nb + (size_t)t * st.nb + a]
                             : cont[(size_t)k * st.tracks * st.nc + (size_t)t * st.nc + (a - st.nb)];
            next[(size_t)k * st.tracks * st.nc + (size_t)t * st.nc + j] = v;
            f = (u64)tbd_fixed(v);
        }
        for (int off = 16; off > 0; off /= 2) f += __shfl_xor_sync(0xffffffffu, f, off);
        if (threadIdx.x % 32 == 0 && f != 0) atomicAdd(&msum[TBD_DIM * t + k], f);
    }
    u32 nb_warp = __popc(__ballot_sync(0xffffffffu, from_b));
    if (threadIdx.x % 32 == 0 && nb_warp > 0) atomicAdd(&from_birth[t], nb_warp);
}
