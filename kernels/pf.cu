// The particle-filter kernels: the CUDA twin of src/track/filter/particle.rs. Every stage runs for every
// track of the step in one launch (blockIdx.y is the track), particles stay on the device, and
// only per-track sums come back. Weighted sums are taken per block relative to the block's own
// largest log weight and combined in f64 by step_finalize (all sums are linear in the weights).
//
// Layout: state[buf][slot][c][i] for buf in {0, 1} (double buffer for resampling), model[buf]
// [slot][i], log_w[slot][i], ll[slot][i], e[slot][i]. Per-block partials: PART values per block.

#include "common.cuh"

#define PF_BLOCK 256
// pf_step keeps measurements of up to MEAS_SHARED peaks and MEAS_PAIRS pairs in shared memory.
#define MEAS_SHARED 1024
#define MEAS_PAIRS 256
// Peaks per pair at most (src/gpu/cuda/pf.rs: KPP).
#define KPP 16
#define NEG_INF __int_as_float(0xff800000)

// Partial sums per block: [0] max, [1] s, [2] s2, [3..9] x, [9..30] xx, [30..46] models,
// [46] turn, [47] unused.
#define PART 48

// Must equal TEMPER_MIN_ESS, ROUGHEN_H and ROUGHEN_RESAMPLE_H in src/track/mod.rs (a unit test
// checks).
#define TEMPER_MIN_ESS 0.3
#define ROUGHEN_H 0.2
#define ROUGHEN_RESAMPLE_H 0.05

// What step_finalize decided for a track (the CPU's rules, on the same f64 sums):
#define FLAG_KEEP 0u       // no resampling
#define FLAG_RESAMPLE 1u   // resample in this step
#define FLAG_TEMPER 2u     // too few effective particles: the host tempers the update
#define FLAG_DEGENERATE 3u // every particle weightless: reset the weights
// ...and after the slow-path graph (tempering or reset) has handled those:
#define FLAG_TEMPERED_KEEP 4u
#define FLAG_TEMPERED_RESAMPLE 5u
#define FLAG_RESET_KEEP 6u
#define FLAG_RESET_RESAMPLE 7u
// pf_step_live waited LIVE_TIMEOUT_NS for its measurement and gave up (nothing written).
#define FLAG_LIVE_TIMEOUT 8u
// The host's stamp for a live step it withdraws (its value | LIVE_CANCEL): nothing written.
#define LIVE_CANCEL 0x80000000u
#define LIVE_TIMEOUT_NS 1000000000ull
#define IS_SLOW(f) ((f) == FLAG_TEMPER || (f) == FLAG_DEGENERATE)
// Resampling kernels act on tracks whose flag is in their mask: 1 << flag.
#define IN_MASK(mask, f) ((((mask) >> (f)) & 1u) != 0u)

__device__ __forceinline__ float* slot_state(float* s0, float* s1, u32 cur, u32 slot, u32 n) {
    return (cur ? s1 : s0) + (size_t)slot * STATE_DIM * n;
}

__device__ __forceinline__ u32* slot_model(u32* m0, u32* m1, u32 cur, u32 slot, u32 n) {
    return (cur ? m1 : m0) + (size_t)slot * n;
}

// Sums are taken relative to each track's reference point `ref[t * 8 ..]` (uploaded with the
// step: the track's last estimate, near its cloud) so that covariances of a cloud far from the
// origin keep their precision.

// Each thread of pf_step and pf_sums holds PF_PER_THREAD particles (i, i + PF_BLOCK, ...): a
// block covers a tile of PF_TILE particles, and writes one row of partial sums per tile.
#define PF_PER_THREAD 2
#define PF_TILE (PF_BLOCK * PF_PER_THREAD)
// Small filters (the live path: a few thousand particles) would occupy only a few SMs with
// those tiles, each thread working through its particles one after the other: pf_step_small
// and pf_sums_small take one particle per thread in blocks of PF_SMALL_BLOCK, spreading the
// same work over many more SMs (src/gpu/cuda/pf.rs picks by the particle count). 256 threads:
// the live step's 2,000 particles then fit the eight blocks of one portable thread-block
// cluster (pf_step_live_cluster).
#define PF_SMALL_BLOCK 256

// This thread's weights summed per model, for models 0..NM.
template <int NM, int P>
__device__ __forceinline__ void model_sums(const u32 (&model)[P], const float (&e)[P],
                                           float (&b)[NM]) {
#pragma unroll
    for (int m = 0; m < NM; ++m) {
        b[m] = 0.0f;
#pragma unroll
        for (int q = 0; q < P; ++q) b[m] += model[q] == (u32)m ? e[q] : 0.0f;
    }
}

// Weighted sums of one tile of particles, relative to the tile's largest log weight; the
// block writes them to `out` (one PART row). Each thread first sums its own particles' moments,
// then per warp the 30 moment sums are reduce-scattered in one pass (lane j ends with sum j),
// and the model sums in a second pass only when there is more than one model.
template <int B, int P>
__device__ __forceinline__ void tile_sums(const float (&lw)[P], const float (&st)[P][STATE_DIM],
                                          const u32 (&model)[P], u32 valid_mask,
                                          const float* ref, float* e_out, float* out,
                                          u32 n_models, bool write = true,
                                          float* out2 = nullptr) {
    __shared__ float scratch[32];
    __shared__ float warp_parts[B / 32][PART];
    float mine_max = NEG_INF;
#pragma unroll
    for (int q = 0; q < P; ++q)
        if (valid_mask & (1u << q)) mine_max = fmaxf(mine_max, lw[q]);
    float mx = block_max_all(mine_max, scratch);
    float r[6];
#pragma unroll
    for (int c = 0; c < 6; ++c) r[c] = ref[c];
    // Moments in PART order: [1] s, [2] s2, [3..9) x, [9..30) xx; [30] carries turn (PART 46).
    float a[32];
#pragma unroll
    for (int k = 0; k < 32; ++k) a[k] = 0.0f;
    float e[P];
#pragma unroll
    for (int q = 0; q < P; ++q) {
        bool valid = (valid_mask & (1u << q)) != 0;
        e[q] = (valid && mx > NEG_INF) ? fm_exp(lw[q] - mx) : 0.0f;
        if (valid && write) e_out[q * B] = e[q];
        float d[6];
#pragma unroll
        for (int c = 0; c < 6; ++c) d[c] = valid ? st[q][c] - r[c] : 0.0f;
        // Fused multiply-adds (explicit: the module is compiled without contraction): these
        // sums are the GPU's own, summed in another order than the CPU's anyway, and only the
        // particle update has to repeat the CPU's arithmetic exactly.
        a[1] += e[q];
        a[2] = __fmaf_rn(e[q], e[q], a[2]);
#pragma unroll
        for (int c = 0; c < 6; ++c) {
            float ed = e[q] * d[c];
            a[3 + c] += ed;
            int idx = 9 + c * 6 - c * (c - 1) / 2; // row c of the upper triangle
#pragma unroll
            for (int k = c; k < 6; ++k) a[idx + k - c] = __fmaf_rn(ed, d[k], a[idx + k - c]);
        }
        a[30] = __fmaf_rn(e[q], valid ? st[q][6] : 0.0f, a[30]);
    }
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    float mine = warp_reduce_scatter32(a);
    int slot = lane < 30 ? lane : (lane == 30 ? 46 : PART - 1);
    warp_parts[warp][slot] = mine;
    float s_all = __shfl_sync(0xffffffffu, mine, 1);
    if (n_models > 4) {
        float b[16];
        model_sums<16, P>(model, e, b);
        float mm = warp_reduce_scatter16(b);
        if (lane < 16) warp_parts[warp][30 + lane] = mm;
    } else if (n_models > 1) {
        // Up to four models (the usual case): four sums, reduce-scattered over lanes 0..3 and
        // then summed over the rest of the warp (a sixth of the sixteen's instructions).
        float b[4];
        model_sums<4, P>(model, e, b);
        reduce_scatter_step<2>(b, lane);
        reduce_scatter_step<1>(b, lane);
        float mm = b[0]; // models lane & 3, over the lanes that share bits 2..4
#pragma unroll
        for (int o = 4; o < 32; o <<= 1) mm += __shfl_xor_sync(0xffffffffu, mm, o);
        if (lane < 16) warp_parts[warp][30 + lane] = lane < 4 ? mm : 0.0f;
    } else if (lane < 16) {
        warp_parts[warp][30 + lane] = lane == 0 ? s_all : 0.0f;
    }
    __syncthreads();
    if (threadIdx.x >= 1 && threadIdx.x < PART - 1) {
        float acc = 0.0f;
        for (int w = 0; w < B / 32; ++w) acc += warp_parts[w][threadIdx.x];
        if (write) out[threadIdx.x] = acc;
        if (write && out2) out2[threadIdx.x] = acc;
    }
    if (write && threadIdx.x == 0) out[0] = mx;
    if (write && threadIdx.x == PART - 1) out[PART - 1] = 0.0f; // the unused slot
    // (out2: the same row again, in a cluster's leader block: pf_step_live_cluster.)
    if (write && out2 && threadIdx.x == 0) out2[0] = mx;
    if (write && out2 && threadIdx.x == PART - 1) out2[PART - 1] = 0.0f;
    // (warp_parts is read above and written again by a second call only after that call's
    // barriers.)
}

// pf_step's measurement in shared memory, MEAS_WORDS floats in one of two layouts:
// - any number of peaks per pair (SharedMeas): tdoa[MEAS_SHARED], amp[MEAS_SHARED],
//   floor[MEAS_PAIRS], then the pairs' sensor indices [2 * MEAS_PAIRS];
// - four peaks per pair, the usual case (PackedMeas4): per pair three float4, {where sensor a's
//   rho sits in the thread's column of rr, where b's does, floor, 0}, tdoa[4], amp[4], so that
//   the pair loop reads a pair with three loads from one running address.
// Each thread's rho and range rate per sensor go in its column of rr: rho of sensor a at
// rr[a * B], its rate at rr[(RR_SHARED + a) * B] (from the thread's own column start).
#define MEAS_WORDS (3 * 4 * MEAS_PAIRS)
static_assert(MEAS_WORDS >= 2 * MEAS_SHARED + 3 * MEAS_PAIRS, "both layouts fit");

// Shared-memory loads and stores at 32-bit shared addresses, so that addresses are plain
// integers (a running table address, the thread's column plus an offset): through C++ pointers
// the compiler rebuilt each array's shared-window address in every pass of the pair loop, about
// 20 of its 55 instructions before the exponentials (SASS, sm_90). Every access to rr and keep
// goes through these (volatile: they stay in program order among themselves, which matters
// since a thread's last particle is kept where its rho and rate were), and the pair table is
// written before the block's barrier.
__device__ __forceinline__ u32 smem_addr(const void* p) {
    // Through an opaque move: the compiler otherwise recomputes the address (a shared-window
    // base and offset) at every use, inside the loops.
    u32 a = (u32)__cvta_generic_to_shared(p), out;
    asm volatile("mov.b32 %0, %1;" : "=r"(out) : "r"(a));
    return out;
}
__device__ __forceinline__ float lds_f32(u32 a) {
    float v;
    asm volatile("ld.shared.f32 %0, [%1];" : "=f"(v) : "r"(a));
    return v;
}
__device__ __forceinline__ float4 lds_f32x4(u32 a) {
    float4 v;
    asm volatile("ld.shared.v4.f32 {%0, %1, %2, %3}, [%4];"
                 : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
                 : "r"(a));
    return v;
}
__device__ __forceinline__ void sts_f32(u32 a, float v) {
    asm volatile("st.shared.f32 [%0], %1;" ::"r"(a), "f"(v));
}

// What both shared-memory measurement policies have: the thread's column of rr (its shared
// address), written by sensor index.
template <int B>
struct RrColumn {
    u32 rr;
    __device__ void set(u32 a, float r, float q) {
        sts_f32(rr + a * (4 * B), r);
        sts_f32(rr + (RR_SHARED + a) * (4 * B), q);
    }
};

template <int B>
struct SharedMeas : RrColumn<B> {
    static const int K = 0;
    const float* sens;
    const float* meas;
    u32 k;
    __device__ void load_pair(u32) {}
    __device__ float sensor(u32 i) const { return sens[i]; }
    __device__ u32 pair_a(u32 pi) const {
        return __float_as_uint(meas[2 * MEAS_SHARED + MEAS_PAIRS + 2 * pi]);
    }
    __device__ u32 pair_b(u32 pi) const {
        return __float_as_uint(meas[2 * MEAS_SHARED + MEAS_PAIRS + 2 * pi + 1]);
    }
    __device__ float tdoa(u32 pi, u32 j) const { return meas[pi * k + j]; }
    __device__ float amp(u32 pi, u32 j) const { return meas[MEAS_SHARED + pi * k + j]; }
    __device__ float floor(u32 pi) const { return meas[2 * MEAS_SHARED + pi]; }
    // By sensor index.
    __device__ float rho(u32 a) const { return lds_f32(this->rr + a * (4 * B)); }
    __device__ float rate(u32 a) const { return lds_f32(this->rr + (RR_SHARED + a) * (4 * B)); }
};

template <int B>
struct PackedMeas4 : RrColumn<B> {
    static const int K = 4;
    u32 tab; // shared address of the pair table
    const float* sens;
    float4 head, td, am; // the current pair's entry
    __device__ static float lane(float4 v, u32 j) {
        return j == 0 ? v.x : (j == 1 ? v.y : (j == 2 ? v.z : v.w));
    }
    __device__ void load_pair(u32 pi) {
        u32 at = tab + pi * 48;
        head = lds_f32x4(at);
        td = lds_f32x4(at + 16);
        am = lds_f32x4(at + 32);
    }
    __device__ float sensor(u32 i) const { return sens[i]; }
    // The handles are byte offsets into the thread's column of rr.
    __device__ u32 pair_a(u32) const { return __float_as_uint(head.x); }
    __device__ u32 pair_b(u32) const { return __float_as_uint(head.y); }
    __device__ float floor(u32) const { return head.z; }
    __device__ float tdoa(u32, u32 j) const { return lane(td, j); }
    __device__ float amp(u32, u32 j) const { return lane(am, j); }
    __device__ float rho(u32 off) const { return lds_f32(this->rr + off); }
    __device__ float rate(u32 off) const { return lds_f32(this->rr + RR_SHARED * 4 * B + off); }
};

// Where a thread keeps its particle q after the update (pf_step): its column of rr for the last
// one (rr has 2 * RR_SHARED >= KEEP_ROWS rows), of keep for the others.
#define KEEP_ROWS (STATE_DIM + 2)
static_assert(2 * RR_SHARED >= KEEP_ROWS, "the last particle fits in rr");
template <int B, int P>
__device__ __forceinline__ u32 keep_at(int q, u32 keep_col, u32 rr_col) {
    return q == P - 1 ? rr_col : keep_col + (u32)q * (KEEP_ROWS * 4 * B);
}

// Switch model and predict particle i (state s, model m) with its own draws. The draw comes
// before anything uses the particle's loads: its Philox rounds (integer work that needs none of
// them) cover their latency. The switch uniform comes from the same block's spare bits
// (src/philox.rs: spare_uniform).
template <int MODE = -1>
__device__ __forceinline__ void predict_particle(const StepParams* sp, const TrackParams& tp,
                                                 const Coeffs* cf, u32 i, float* s, u32& m) {
    const u32 mode_switch = sp->forced_model != 0xffffffffu ? 0u : (sp->n_models > 1 ? 1u : 2u);
    const uint4 w_pred = draw(sp->seed, sp->frame, tp.slot, i, S_PREDICT);
    const float u_switch = spare_uniform(w_pred);
    // The normals before the switch, which needs the model's load (ptxas places that load just
    // before its first use: after the normals, their work covers its latency).
    float4 z = normals4(w_pred);
    if (mode_switch == 0u) {
        m = sp->forced_model;
    } else if (mode_switch == 1u) {
        m = switch_model(sp, m, u_switch);
    } else {
        m = 0; // what switch_model gives for one model
    }
    if (tp.turn_sin != 0.0f) turn_about_z(s, tp.turn_sin, tp.turn_cos);
    advance(cf, MODE >= 0 ? (u32)MODE : sp->mode, m, tp.dt, s, z);
    if (sp->line) fold_line(s, sp->axis, sp->side, sp->line == 2u);
}

__device__ __forceinline__ u64 global_ns() {
    u64 t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

// pf_step_live, launched before the frame's measurement exists: whether it can go on, rather
// than the host having withdrawn the step (the stamp, a word in device memory the host sets,
// reads sp->live | LIVE_CANCEL) or no answer having come for LIVE_TIMEOUT_NS (the block then
// says so in the track's flag). It can once the host has copied the measurement in (the stamp
// reads sp->live) or, when the device builds the measurement (lm->peaks), once the
// correlator's count of blocks with their peaks written (a block per pair) has reached
// lm->expect. Thread 0 polls; every thread of the block gets the same answer.
__device__ __forceinline__ bool live_wait(const StepParams* sp, const LiveMeas* lm,
                                          const volatile u32* stamp, u32* flags, u32 t) {
    __shared__ u32 go;
    if (threadIdx.x == 0) {
        const u32 want = sp->live;
        const u64 t0 = global_ns();
        const volatile u32* done = lm->peaks ? (const volatile u32*)lm->done : nullptr;
        const u32 expect = lm->expect;
        u32 v = *stamp, answer = 2u; // 2: none yet, 1: go on, 0: withdrawn or timed out
        while (answer == 2u) {
            if (v == (want | LIVE_CANCEL)) {
                answer = 0u;
            } else if (done == nullptr ? v == want : (int)(*done - expect) >= 0) {
                answer = 1u;
            } else if (global_ns() - t0 > LIVE_TIMEOUT_NS) {
                flags[t] = FLAG_LIVE_TIMEOUT;
                if (sp->mirror_flags) ((volatile u32*)sp->mirror_flags)[t] = FLAG_LIVE_TIMEOUT;
                answer = 0u;
            } else {
                v = *stamp;
            }
        }
        // The measurement's reads (after the barrier) come after what said it is there.
        __threadfence();
        go = answer;
    }
    __syncthreads();
    return go == 1u;
}

// Switch model, predict, weigh, and the tile's weighted sums: B threads, P particles each.
#define PF_STEP_ARGS                                                                           \
    const StepParams *sp, const TrackParams *tracks, const Coeffs *coeffs,                    \
        const float *sensors, const u32 *pairs, const float *tdoa, const float *amp,          \
        const float *floor_, float *s0, float *s1, u32 *m0, u32 *m1, float *log_w,            \
        float *ll_out, float *e_out, const float *ref, float *partials, u32 n_tiles
// What pf_step's and pf_sums' finalize writes: group rows, tickets, the
// track sums and flags.
#define PF_FIN_ARGS double *fin_groups, u32 *fin_tickets, double *sums_out, u32 *flags
#define PF_STEP_PASS                                                                           \
    sp, tracks, coeffs, sensors, pairs, tdoa, amp, floor_, s0, s1, m0, m1, log_w, ll_out, e_out, \
        ref, partials, n_tiles
// What pair q's measurement needs besides the frame's peaks: all of it is in place before the
// step's go-ahead (pf_fetch brought the LiveMeas, the ratios and the checks' verdicts; the pairs
// are the array's), so a live step loads it while it waits, and only the peaks' loads remain
// after the go-ahead (loaded after it, the chain of dependent loads from L2 took block 0 about
// 4 us from its go-ahead to its measurement on the H100, by the device's clock).
struct LivePairIn {
    const float* pk; // the pair's peaks (lag, value, quality) x k, written by gcc_peaks
    float q_mid, q_width, pd, ratio, fs;
    u32 a, b; // the pair's sensors
    bool ok;
    __device__ static LivePairIn load(const LiveMeas* lm, const u32* pairs, u32 q, u32 k) {
        LivePairIn in;
        in.pk = (const float*)lm->peaks + (size_t)q * k * 3;
        in.q_mid = lm->q_mid;
        in.q_width = lm->q_width;
        in.pd = lm->pd;
        in.ratio = ((const float*)lm->ratio)[q];
        in.fs = lm->fs;
        in.a = pairs[2 * q];
        in.b = pairs[2 * q + 1];
        in.ok = ((const u32*)lm->pair_ok)[q] != 0u;
        return in;
    }
};

// The measurement of pair q as build_measurement (src/track/manager.rs) makes it from the
// frame's peaks: its k peaks' TDOAs and amplitudes, and its floor. The peaks' values are all
// loaded at once (one wait for L2), then used in the CPU's order.
__device__ __forceinline__ void live_pair(const LivePairIn& in, u32 k, float* td, float* am,
                                          float* fl) {
    float lag[KPP], val[KPP], qual[KPP];
#pragma unroll
    for (u32 j = 0; j < KPP; ++j) {
        if (j < k) {
            lag[j] = __ldcg(in.pk + 3 * j);
            val[j] = __ldcg(in.pk + 3 * j + 1);
            qual[j] = __ldcg(in.pk + 3 * j + 2);
        }
    }
    float share[KPP], best = 0.0f, total = 0.0f;
#pragma unroll
    for (u32 j = 0; j < KPP; ++j) {
        if (j >= k) break;
        share[j] = 0.0f;
        if (isfinite(val[j])) {
            float x = (qual[j] - in.q_mid) / in.q_width;
            float qq = 1.0f / (1.0f + fm_exp(-x));
            best = fmaxf(best, qq);
            share[j] = fmaxf(val[j], 0.0f) * qq;
            total += share[j];
        }
    }
    if (!in.ok || !(total > 0.0f)) {
        // (The TDOAs of a pair without weight change nothing.)
        for (u32 j = 0; j < k; ++j) td[j] = am[j] = 0.0f;
        *fl = 1.0f;
        return;
    }
    const float pd = in.pd * best;
    *fl = 1.0f - pd;
#pragma unroll
    for (u32 j = 0; j < KPP; ++j) {
        if (j >= k) break;
        td[j] = lag[j] / in.fs;
        am[j] = pd * share[j] / total * in.ratio;
    }
}

// Pair q's entry in the packed layout (PackedMeas4): where its sensors' rho sit in a thread's
// column of rr, its floor, then its four TDOAs and amplitudes.
template <int B>
__device__ __forceinline__ void put_packed(float* meas, u32 a, u32 b, u32 q, float fl,
                                           float4 td, float4 am) {
    float4* tab = reinterpret_cast<float4*>(meas);
    tab[3 * q] = make_float4(__uint_as_float(a * (4 * B)), __uint_as_float(b * (4 * B)), fl,
                             0.0f);
    tab[3 * q + 1] = td;
    tab[3 * q + 2] = am;
}

// Pair q's floor and sensor indices in the other layout (SharedMeas).
__device__ __forceinline__ void put_pair_rest(float* meas, u32 a, u32 b, u32 q, float fl) {
    meas[2 * MEAS_SHARED + q] = fl;
    meas[2 * MEAS_SHARED + MEAS_PAIRS + 2 * q] = __uint_as_float(a);
    meas[2 * MEAS_SHARED + MEAS_PAIRS + 2 * q + 1] = __uint_as_float(b);
}

// `stamp` and `lm` (pf_step_live only, else null): the measurement is read once the stamp says
// the host has copied it in, or built from the correlator's peaks once they are written (see
// live_wait). Returns false when a live step was withdrawn or timed out, having written nothing.
// MODE: see log_likelihood_t.
template <int B, int P, int MODE = -1>
__device__ __forceinline__ bool pf_step_body(PF_STEP_ARGS, const volatile u32* stamp,
                                             const LiveMeas* lm, u32* flags,
                                             float* row_copy = nullptr) {
    __shared__ float rr[2 * RR_SHARED * B];
    // The measurement and geometry in shared memory when they fit (every thread reads all of
    // it, in the innermost loop).
    __shared__ __align__(16) float meas[MEAS_WORDS];
    __shared__ float m_sensors[3 * MAX_SENSORS];
    // Each thread's particles after the update (state, model bits, log weight: KEEP_ROWS rows
    // of its column), for the sums: the last one in rr, which its likelihood no longer needs,
    // the others here.
    __shared__ float keep[P > 1 ? P - 1 : 1][KEEP_ROWS][B];
    u32 t = blockIdx.y;
    const TrackParams tp = tracks[t];
    u32 n = sp->n;
    u32 i0 = blockIdx.x * (B * P) + threadIdx.x;
    float* st = slot_state(s0, s1, tp.cur, tp.slot, n);
    u32* md = slot_model(m0, m1, tp.cur, tp.slot, n);
    size_t base = (size_t)tp.slot * n;
    // One particle per thread (pf_step_small): its loads go out before the measurement's copy
    // and barrier, so that the two wait for memory together (after the barrier they were one
    // more round trip in the small filter's chain of them).
    float s_pre[STATE_DIM];
    u32 m_pre = 0;
    float lw_pre = NEG_INF;
    // A live step predicts before it waits for its measurement (the prediction needs none);
    // the others after the measurement's copy, whose loads then wait with the particle's.
    const bool early = P == 1 && stamp != nullptr;
    if (P == 1 && i0 < n) {
        for (int c = 0; c < STATE_DIM; ++c) s_pre[c] = st[(size_t)c * n + i0];
        m_pre = md[i0];
        lw_pre = log_w[base + i0];
        if (early) predict_particle<MODE>(sp, tp, &coeffs[t], i0, s_pre, m_pre);
    }
    u32 np = sp->n_pairs, nk = np * sp->k;
    bool msh = nk <= MEAS_SHARED && np <= MEAS_PAIRS;
    bool packed = msh && sp->k == 4 && sp->n_sensors <= RR_SHARED;
    const bool build = stamp != nullptr && lm->peaks != 0;
    // What the device-built measurement of this thread's first pair needs, loaded before the
    // wait (LivePairIn); and the geometry, which no step changes.
    LivePairIn pre{};
    if (msh && build && threadIdx.x < np) pre = LivePairIn::load(lm, pairs, threadIdx.x, sp->k);
    const u32 ns = min(sp->n_sensors, (u32)MAX_SENSORS);
    if (msh)
        for (u32 q = threadIdx.x; q < 3 * ns; q += blockDim.x) m_sensors[q] = sensors[q];
    // A live step runs what follows twice: first while it waits for its go-ahead, on whatever
    // measurement is there (the last frame's peaks, or this frame's while gcc_peaks or the
    // host's copy writes them: the values are thrown away), writing nothing but shared memory,
    // and then for real. The first pass brings the code into the SM's instruction caches for
    // the second, which the frame waits for (H100, by the device's clock: the estimate 0.8-1.0
    // us earlier).
    const int first_pass = P == 1 && stamp != nullptr ? 0 : 1;
    // A live step's measurement was copied in after this kernel started: read it from L2.
    auto ld = [stamp](const float* p) { return stamp != nullptr ? __ldcg(p) : *p; };
    const u32 rr_col = smem_addr(rr + threadIdx.x), tab_at = smem_addr(meas);
    // (One particle per thread keeps it in rr: keep is then never referenced, and not
    // allocated.)
    const u32 keep_col = P > 1 ? smem_addr(&keep[0][0][threadIdx.x]) : 0u;
#pragma unroll 1
    for (int pass = first_pass; pass < 2; ++pass) {
        const bool real = pass == 1;
        if (real && stamp != nullptr && !live_wait(sp, lm, stamp, flags, t)) return false;
        if (msh) {
            if (build) {
                // The pairs' measurements from the frame's peaks, into either layout.
                const u32 k = sp->k;
                for (u32 q = threadIdx.x; q < np; q += blockDim.x) {
                    const LivePairIn in =
                        q == threadIdx.x ? pre : LivePairIn::load(lm, pairs, q, k);
                    float td[KPP], am[KPP], fl;
                    live_pair(in, k, td, am, &fl);
                    if (packed) {
                        put_packed<B>(meas, in.a, in.b, q, fl,
                                      make_float4(td[0], td[1], td[2], td[3]),
                                      make_float4(am[0], am[1], am[2], am[3]));
                    } else {
                        for (u32 j = 0; j < k; ++j) {
                            meas[q * k + j] = td[j];
                            meas[MEAS_SHARED + q * k + j] = am[j];
                        }
                        put_pair_rest(meas, in.a, in.b, q, fl);
                    }
                }
            } else if (packed) {
                for (u32 q = threadIdx.x; q < np; q += blockDim.x) {
                    const float* td = tdoa + 4 * q;
                    const float* am = amp + 4 * q;
                    put_packed<B>(meas, pairs[2 * q], pairs[2 * q + 1], q, ld(floor_ + q),
                                  make_float4(ld(td), ld(td + 1), ld(td + 2), ld(td + 3)),
                                  make_float4(ld(am), ld(am + 1), ld(am + 2), ld(am + 3)));
                }
            } else {
                for (u32 q = threadIdx.x; q < nk; q += blockDim.x) {
                    meas[q] = ld(tdoa + q);
                    meas[MEAS_SHARED + q] = ld(amp + q);
                }
                for (u32 q = threadIdx.x; q < np; q += blockDim.x)
                    put_pair_rest(meas, pairs[2 * q], pairs[2 * q + 1], q, ld(floor_ + q));
            }
            __syncthreads();
        }
        u32 valid_mask = 0;
        // One particle at a time, the loop kept rolled: unrolled, the kernel's code was two copies
        // of the whole particle update (11,400 instructions), and a third of pf_step's stall
        // samples were warps waiting for instructions (ncu, pf_step at 262,144 particles).
#pragma unroll 1
        for (int q = 0; q < P; ++q) {
            u32 i = i0 + q * B;
            if (i >= n) continue;
            valid_mask |= 1u << q;
            float s[STATE_DIM];
            for (int c = 0; c < STATE_DIM; ++c) s[c] = P == 1 ? s_pre[c] : st[(size_t)c * n + i];
            u32 m = P == 1 ? m_pre : md[i];
            // Loaded with the state: issued after the likelihood, this load's latency was the
            // single largest stall in pf_step (ncu, 1M particles).
            const float lw_prev = P == 1 ? lw_pre : log_w[base + i];
            if (!early) predict_particle<MODE>(sp, tp, &coeffs[t], i, s, m);
            float l;
            if (packed) {
                PackedMeas4<B> m;
                m.rr = rr_col;
                m.tab = tab_at;
                m.sens = m_sensors;
                l = log_likelihood_t<MODE>(sp, s, tp.lag, m);
            } else if (msh && sp->n_sensors <= RR_SHARED) {
                SharedMeas<B> m{{rr_col}, m_sensors, meas, sp->k};
                l = log_likelihood_t<MODE>(sp, s, tp.lag, m);
            } else {
                // A measurement or an array too large for the shared arrays: from global memory.
                GlobalMeas m(sensors, pairs, tdoa, amp, floor_, sp->k);
                l = log_likelihood_t<MODE>(sp, s, tp.lag, m);
            }
            if (sp->has_bounds) {
                bool inside = s[0] >= sp->lo[0] && s[0] <= sp->hi[0] && s[1] >= sp->lo[1] &&
                              s[1] <= sp->hi[1] && s[2] >= sp->lo[2] && s[2] <= sp->hi[2];
                if (!inside) l = NEG_INF;
            }
            if (l != l) l = NEG_INF;
            float lw = lw_prev - tp.offset + l;
            const u32 kq = keep_at<B, P>(q, keep_col, rr_col);
            for (int c = 0; c < STATE_DIM; ++c) {
                if (real) st[(size_t)c * n + i] = s[c];
                sts_f32(kq + c * (4 * B), s[c]);
            }
            if (real) {
                md[i] = m;
                ll_out[base + i] = l;
                log_w[base + i] = lw;
            }
            sts_f32(kq + STATE_DIM * (4 * B), __uint_as_float(m));
            sts_f32(kq + (STATE_DIM + 1) * (4 * B), lw);
        }
        // The tile sums from what this thread just stored, kept in its column of shared memory
        // (read back from global memory instead, those loads' latency was a tenth of pf_step's
        // stall samples).
        float sv[P][STATE_DIM];
        float lwv[P];
        u32 mv[P];
#pragma unroll
        for (int q = 0; q < P; ++q) {
            bool valid = (valid_mask & (1u << q)) != 0;
            const u32 kq = keep_at<B, P>(q, keep_col, rr_col);
#pragma unroll
            for (int c = 0; c < STATE_DIM; ++c) sv[q][c] = valid ? lds_f32(kq + c * (4 * B)) : 0.0f;
            mv[q] = valid ? __float_as_uint(lds_f32(kq + STATE_DIM * (4 * B))) : 0;
            lwv[q] = valid ? lds_f32(kq + (STATE_DIM + 1) * (4 * B)) : NEG_INF;
        }
        tile_sums<B, P>(lwv, sv, mv, valid_mask, ref + t * 8, e_out + base + i0,
                        partials + ((size_t)t * n_tiles + blockIdx.x) * PART, sp->n_models, real,
                        row_copy);
    }
    return true;
}


// The tile sums alone for the tracks of the slow path, from their weights after a reset, or
// after tempering (tempering, step 3: for FLAG_TEMPER tracks the chosen exponent is applied
// first, log w = prev + beta ll, and written back).
#define PF_SUMS_ARGS                                                                           \
    const StepParams *sp, const TrackParams *tracks, u32 *flags, float *s0, float *s1,        \
        u32 *m0, u32 *m1, float *log_w, const float *ll, const float *betas, float *e_out,     \
        const float *ref, float *partials, u32 n_tiles
#define PF_SUMS_PASS                                                                           \
    sp, tracks, flags, s0, s1, m0, m1, log_w, ll, betas, e_out, ref, partials, n_tiles
template <int B, int P>
__device__ __forceinline__ void pf_sums_body(PF_SUMS_ARGS) {
    u32 t = blockIdx.y;
    u32 flag = flags[t];
    const TrackParams tp = tracks[t];
    const float beta = betas[t];
    u32 n = sp->n;
    u32 i0 = blockIdx.x * (B * P) + threadIdx.x;
    const float* st = slot_state(s0, s1, tp.cur, tp.slot, n);
    const u32* md = slot_model(m0, m1, tp.cur, tp.slot, n);
    size_t base = (size_t)tp.slot * n;
    float sv[P][STATE_DIM];
    float lwv[P];
    u32 mv[P];
    u32 valid_mask = 0;
#pragma unroll
    for (int q = 0; q < P; ++q) {
        u32 i = i0 + q * B;
        bool valid = i < n;
        if (valid) valid_mask |= 1u << q;
#pragma unroll
        for (int c = 0; c < STATE_DIM; ++c) sv[q][c] = valid ? st[(size_t)c * n + i] : 0.0f;
        mv[q] = valid ? md[i] : 0;
        lwv[q] = valid ? log_w[base + i] : NEG_INF;
        if (valid && flag == FLAG_TEMPER) {
            float l = ll[base + i];
            lwv[q] = isfinite(l) ? lwv[q] - l + beta * l : NEG_INF;
            log_w[base + i] = lwv[q];
        }
    }
    tile_sums<B, P>(lwv, sv, mv, valid_mask, ref + t * 8, e_out + base + i0,
                    partials + ((size_t)t * n_tiles + blockIdx.x) * PART, sp->n_models);
}


// Combining a track's tile partials in f64 (step_finalize, at the end of pf_step and pf_sums):
// out[t] = [max, s, s2, x(6), xx(21), models(16), turn] relative to the overall maximum;
// flags[t] says what comes next (FLAG_*), decided exactly as the host would from these sums.
// After the slow path, only its tracks (tempered or reset) are combined again, and their flag
// says whether they resample now.
//
// Two levels: the last block of each group of FIN_ROWS tiles to finish combines the group's
// rows relative to their own largest log weight into one f64 row of `groups`; the last group of
// a track (tickets, which their last users reset) combines the group rows and decides. A single
// block per track walking all tile rows was latency-bound (43 us at 1M particles, 2048 rows).
#define FIN_ROWS 64

// A value of a tile row (float) or of a group row (double), written by other blocks of the
// same launch (pf_step's own finalize) or by an earlier kernel: read from L2.
__device__ __forceinline__ double row_value(const float* p) { return (double)__ldcg(p); }
__device__ __forceinline__ double row_value(const double* p) { return __ldcg(p); }

// combine_rows' staging buffer for a small block's rows: 64 float tile rows or 32 double group
// rows (one buffer for every instantiation: the two are never staged at once).
#define COMBINE_STAGE_BYTES (64 * 4 * PART)
__device__ __forceinline__ unsigned char* combine_stage() {
    __shared__ __align__(16) unsigned char stage[COMBINE_STAGE_BYTES];
    return stage;
}

// combine_rows' sums, with row r's column c read through at(r, c) (as a double).
template <int NT, class At>
__device__ __forceinline__ void combine_from(At at, u32 n_rows, double* fin, float* scratch,
                                             double (*red)[PART], double* fac) {
    constexpr u32 SPLIT = NT / PART; // row groups, each PART threads wide
    float mx = NEG_INF;
    for (u32 r = threadIdx.x; r < n_rows; r += blockDim.x) mx = fmaxf(mx, (float)at(r, 0));
    mx = block_max_all(mx, scratch);
    u32 g = threadIdx.x / PART, j = threadIdx.x % PART;
    bool col = g < SPLIT && j >= 1 && j < PART - 1;
    double acc[2] = {0.0, 0.0};
    for (u32 c0 = 0; c0 < n_rows; c0 += NT) {
        u32 cn = min((u32)NT, n_rows - c0);
        // Each row's factor exp(row max - max), once.
        if (threadIdx.x < cn) {
            double bm = at(c0 + threadIdx.x, 0);
            fac[threadIdx.x] = bm > (double)NEG_INF ? exp(bm - (double)mx) : 0.0;
        }
        __syncthreads();
        if (col) {
            u32 r = g;
            // Unrolled so that several rows' loads (from L2) are in flight at once: one at a
            // time, the small filter's last block spent about 3 us here waiting for them.
#pragma unroll 4
            for (; r + SPLIT < cn; r += 2 * SPLIT) {
#pragma unroll
                for (int q = 0; q < 2; ++q) {
                    u32 rr = r + q * SPLIT;
                    double fb = fac[rr];
                    acc[q] += (j == 2 ? fb * fb : fb) * at(c0 + rr, j);
                }
            }
            if (r < cn) {
                double fb = fac[r];
                acc[0] += (j == 2 ? fb * fb : fb) * at(c0 + r, j);
            }
        }
        __syncthreads();
    }
    if (g < SPLIT) red[g][j] = acc[0] + acc[1];
    __syncthreads();
    if (threadIdx.x < PART) {
        double v = 0.0;
        for (int k = 0; k < SPLIT; ++k) v += red[k][threadIdx.x];
        fin[threadIdx.x] = threadIdx.x == 0 ? (double)mx : (threadIdx.x == PART - 1 ? 0.0 : v);
    }
    __syncthreads();
}

// Sum rows [0, n_rows) of `rows` (row r at rows + r * PART, value at column j, largest log
// weight at column 0) relative to their largest log weight, into fin[0..PART) (fin[0] = that
// maximum). T is float for tile rows and double for group rows. Every thread of the block calls
// it.
template <typename T, int NT, bool STAGE>
__device__ void combine_rows(const T* rows, u32 n_rows, double* fin, float* scratch,
                             double (*red)[PART], double* fac) {
    // The small filter's blocks (STAGE) with at most PRE rows (its 8 tile rows for 2,000
    // particles): the rows are first staged in shared memory with 16-byte loads that are all in
    // flight at once, so that they cost one wait for L2 instead of one for the maxima, one for
    // the factors and several for the columns (2.8 us of the small filter's finalize on the
    // H100, by the device's clock, with 32 rows of 64-thread tiles). The sums are the same
    // either way. (pf_step's blocks do not stage: the buffer would cost them occupancy.)
    constexpr u32 PRE = COMBINE_STAGE_BYTES / (PART * sizeof(T));
    if constexpr (STAGE) {
        if (n_rows <= PRE) {
            T* stage = reinterpret_cast<T*>(combine_stage());
            constexpr u32 VEC = 16 / sizeof(T), MAX_ITER = PRE * PART / VEC / NT;
            const u32 n_vec = n_rows * PART / VEC;
#pragma unroll
            for (u32 k = 0; k < MAX_ITER; ++k) {
                const u32 i = k * NT + threadIdx.x;
                if (i < n_vec)
                    reinterpret_cast<float4*>(stage)[i] =
                        __ldcg(reinterpret_cast<const float4*>(rows) + i);
            }
            __syncthreads();
            combine_from<NT>([&](u32 r, u32 c) { return (double)stage[r * PART + c]; }, n_rows,
                             fin, scratch, red, fac);
            return;
        }
    }
    combine_from<NT>([&](u32 r, u32 c) { return row_value(rows + (size_t)r * PART + c); },
                     n_rows, fin, scratch, red, fac);
}

// The roughening factor of a resampled track on the slow path, from the track's sums `v`
// (step_finalize's last thread 0 of the track, into `chol`): `h` times the Cholesky factor of
// the estimate's covariance, with a growing diagonal jitter when the covariance is not positive
// definite (src/track/manager.rs: cholesky6, src/track/filter/particle.rs: roughen_factor and
// finish_estimate). A track that resamples after the usual step gets its factor from the host
// instead (`rough`, see pf_scan_local), which has the same sums in hand when it launches the
// resampling.
__device__ void roughen_factor(const double* v, float* chol, double h) {
    double s = fmax(v[1], 1e-300);
    double d[6], m[6][6];
    for (int a = 0; a < 6; ++a) d[a] = v[3 + a] / s;
    int idx = 9;
    for (int a = 0; a < 6; ++a)
        for (int b = a; b < 6; ++b) {
            double c = v[idx++] / s - d[a] * d[b];
            m[a][b] = c;
            m[b][a] = c;
        }
    double scale = 0.0;
    for (int i = 0; i < 6; ++i) scale = fmax(scale, fabs(m[i][i]));
    scale = fmax(scale, 1e-12);
    double eps = 1e-9 * scale;
    double l[6][6];
    bool ok = false;
    for (int attempt = 0; attempt < 20 && !ok; ++attempt, eps *= 10.0) {
        ok = true;
        for (int r = 0; r < 6 && ok; ++r) {
            for (int c = 0; c <= r; ++c) {
                double acc = m[r][c] + (r == c ? eps : 0.0);
                for (int k = 0; k < c; ++k) acc -= l[r][k] * l[c][k];
                if (r == c) {
                    if (!(acc > 0.0)) {
                        ok = false;
                        break;
                    }
                    l[r][c] = sqrt(acc);
                } else {
                    l[r][c] = acc / l[c][c];
                }
            }
            for (int c = r + 1; c < 6; ++c) l[r][c] = 0.0;
        }
    }
    if (!ok) {
        for (int r = 0; r < 6; ++r)
            for (int c = 0; c < 6; ++c) l[r][c] = r == c ? sqrt(fabs(m[r][r])) : 0.0;
    }
    for (int r = 0; r < 6; ++r)
        for (int c = 0; c < 6; ++c) chol[r * 6 + c] = (float)(h * l[r][c]);
}

// Write a track's combined sums `fin` to out[t] and decide its flag (thread 0 writes the
// flag and returns it; the sums are written by threads 1..PART-1 and 0). `before` is the flag
// before a slow path (with `after_slow`).
__device__ __forceinline__ u32 finalize_write(const StepParams* sp, const double* fin, u32 t,
                                              u32 before, u32 after_slow, double* out,
                                              u32* flags) {
    __shared__ u32 decided;
    u32 flag = FLAG_KEEP;
    double* mirror = (double*)sp->mirror_sums;
    if (threadIdx.x >= 1 && threadIdx.x < PART - 1) {
        out[(size_t)t * PART + threadIdx.x] = fin[threadIdx.x];
        if (mirror) mirror[(size_t)t * PART + threadIdx.x] = fin[threadIdx.x];
    }
    if (threadIdx.x == 0) {
        double mx = fin[0];
        out[(size_t)t * PART] = mx;
        if (mirror) mirror[(size_t)t * PART] = mx;
        // src/gpu/cuda/pf.rs and src/track/filter/particle.rs: degenerate, needs_temper, resampled.
        double s = fin[1], s2 = fin[2], n = (double)sp->n;
        float ess = (float)(s * s / fmax(s2, 1e-300));
        bool low = (double)ess < (double)sp->ess_fraction * n;
        if (after_slow) {
            if (before == FLAG_TEMPER) flag = low ? FLAG_TEMPERED_RESAMPLE : FLAG_TEMPERED_KEEP;
            else flag = low ? FLAG_RESET_RESAMPLE : FLAG_RESET_KEEP;
        } else if (!isfinite(mx)) {
            flag = FLAG_DEGENERATE;
        } else if (s * s < TEMPER_MIN_ESS * n * s2) {
            flag = FLAG_TEMPER;
        } else {
            flag = low ? FLAG_RESAMPLE : FLAG_KEEP;
        }
        flags[t] = flag;
        decided = flag;
    }
    // The host takes a track's sums once it sees the track's flag in its copy (without waiting
    // for the rest of the graph): the sums must be visible there first.
    if (sp->mirror_flags) {
        __threadfence_system();
        __syncthreads();
        if (threadIdx.x == 0) ((volatile u32*)sp->mirror_flags)[t] = decided;
    }
    return flag;
}

// Whether this block is the last of `n` to arrive at ticket counter `c` (which the last one
// resets for the next launch). Every thread calls it after writing what the last one reads.
__device__ __forceinline__ bool last_to_arrive(u32* c, u32 n, bool* last) {
    // The barrier orders the block's writes before thread 0's fence, and the fence (cumulative)
    // makes them visible device-wide before its ticket (cooperative groups' grid barrier does
    // the same); one warp fencing instead of all of them.
    __syncthreads();
    if (threadIdx.x == 0) {
        __threadfence();
        u32 ticket = atomicAdd(c, 1u);
        *last = ticket == n - 1;
        if (*last) *c = 0;
    }
    __syncthreads();
    bool l = *last;
    if (l) __threadfence();
    return l;
}

// The finalize at the end of pf_step (and of pf_sums on the slow path), without a launch of
// its own: each group of FIN_ROWS tiles' last block to finish combines the group's rows,
// and the track's last group combines the group rows and decides. Tickets per track: [0] the
// groups, [1 + g] group g's tiles. NT is the kernel's block size; `before`, `after_slow` and
// `chol`: the flag before the slow path, whether this is it, and where the roughening factor of
// a track that resamples on the slow path goes (the step passes FLAG_KEEP, 0 and no factor).
template <int NT, bool STAGE>
__device__ void step_finalize(const StepParams* sp, const float* partials, u32 n_blocks,
                              double* groups, u32* tickets, double* out, u32* flags, u32 before,
                              u32 after_slow, float* chol) {
    __shared__ float scratch[32];
    __shared__ double red[NT / PART][PART];
    __shared__ double fin[PART];
    __shared__ double fac[NT];
    __shared__ bool last;
    u32 t = blockIdx.y, grp = blockIdx.x / FIN_ROWS;
    u32 n_groups = (n_blocks + FIN_ROWS - 1) / FIN_ROWS;
    u32 r0 = grp * FIN_ROWS;
    u32 rows = min((u32)FIN_ROWS, n_blocks - r0);
    u32* tk = tickets + (size_t)t * (n_groups + 1);
    if (!last_to_arrive(&tk[1 + grp], rows, &last)) return;
    combine_rows<float, NT, STAGE>(partials + ((size_t)t * n_blocks + r0) * PART, rows, fin, scratch,
                            red, fac);
    if (n_groups > 1) {
        double* grow = groups + ((size_t)t * n_groups + grp) * PART;
        if (threadIdx.x < PART) grow[threadIdx.x] = fin[threadIdx.x];
        if (!last_to_arrive(&tk[0], n_groups, &last)) return;
        combine_rows<double, NT, STAGE>((const double*)(groups + (size_t)t * n_groups * PART), n_groups,
                                 fin, scratch, red, fac);
    }
    u32 flag = finalize_write(sp, fin, t, before, after_slow, out, flags);
    if (threadIdx.x == 0 && flag == FLAG_TEMPERED_RESAMPLE)
        roughen_factor(fin, chol + t * 36, ROUGHEN_H);
    if (threadIdx.x == 0 && flag == FLAG_RESET_RESAMPLE)
        roughen_factor(fin, chol + t * 36, ROUGHEN_RESAMPLE_H);
}

// At least four blocks per SM (64 registers): measured 7 % faster at 1M particles than the
// compiler's own choice (80 registers, three blocks), the few spilled registers included.
// Both end with the finalize (step_finalize): one launch less per step.
// Built for one mode each (3-D, direction): with the direction mode's curved-wavefront code
// beside the 3-D code, the 3-D step at 1M particles x 4 models ran 1.4 % more instructions
// (ncu) and took 1.3 % longer.
extern "C" __global__ void __launch_bounds__(PF_BLOCK, 4) pf_step(PF_STEP_ARGS, PF_FIN_ARGS) {
    pf_step_body<PF_BLOCK, PF_PER_THREAD, 0>(PF_STEP_PASS, nullptr, nullptr, flags);
    step_finalize<PF_BLOCK, false>(sp, partials, n_tiles, fin_groups, fin_tickets, sums_out, flags,
                            FLAG_KEEP, 0, nullptr);
}

extern "C" __global__ void __launch_bounds__(PF_BLOCK, 4) pf_step_dir(PF_STEP_ARGS, PF_FIN_ARGS) {
    // (Curved or plane wavefronts, read from sp.)
    pf_step_body<PF_BLOCK, PF_PER_THREAD, -1>(PF_STEP_PASS, nullptr, nullptr, flags);
    step_finalize<PF_BLOCK, false>(sp, partials, n_tiles, fin_groups, fin_tickets, sums_out, flags,
                            FLAG_KEEP, 0, nullptr);
}

extern "C" __global__ void __launch_bounds__(PF_SMALL_BLOCK)
pf_step_small(PF_STEP_ARGS, PF_FIN_ARGS) {
    pf_step_body<PF_SMALL_BLOCK, 1>(PF_STEP_PASS, nullptr, nullptr, flags);
    step_finalize<PF_SMALL_BLOCK, true>(sp, partials, n_tiles, fin_groups, fin_tickets, sums_out,
                                  flags, FLAG_KEEP, 0, nullptr);
}

// pf_step_small for the live path, launched while the frame is still being correlated: it
// loads and predicts its particles, waits (live_wait), then reads the measurement the host
// copied in, or builds it from the frame's peaks, and goes on as pf_step_small does.
extern "C" __global__ void __launch_bounds__(PF_SMALL_BLOCK)
pf_step_live(PF_STEP_ARGS, PF_FIN_ARGS, const volatile u32* stamp, const LiveMeas* lm) {
    if (!pf_step_body<PF_SMALL_BLOCK, 1>(PF_STEP_PASS, stamp, lm, flags)) return;
    step_finalize<PF_SMALL_BLOCK, true>(sp, partials, n_tiles, fin_groups, fin_tickets, sums_out,
                                  flags, FLAG_KEEP, 0, nullptr);
}

// Thread-block clusters (compute capability 9.0 and later): the block's rank in its cluster,
// the cluster's size, a generic address of `p` (this block's shared memory) in block `rank`'s
// shared memory, and the cluster's barrier (release on arrival, acquire on the wait; every
// thread of the block takes part, as the .aligned forms require).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
__device__ __forceinline__ u32 cluster_rank() {
    u32 r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
    return r;
}
__device__ __forceinline__ u32 cluster_blocks() {
    u32 r;
    asm volatile("mov.u32 %0, %%cluster_nctarank;" : "=r"(r));
    return r;
}
template <typename T>
__device__ __forceinline__ T* cluster_map(T* p, u32 rank) {
    u64 out;
    asm volatile("mapa.u64 %0, %1, %2;" : "=l"(out) : "l"((u64)p), "r"(rank));
    return (T*)out;
}
__device__ __forceinline__ void cluster_arrive() {
    asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory");
}
__device__ __forceinline__ void cluster_wait() {
    asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory");
}
#endif

// Blocks of a pf_step_live_cluster cluster at most (the portable cluster size).
#define LIVE_CLUSTER_MAX 8

// pf_step_live for a track whose tiles make one thread-block cluster (launched with the
// cluster's size equal to the grid's width, at most LIVE_CLUSTER_MAX; src/gpu/cuda/pf.rs picks
// it on compute capability 9.0 and later). Each block writes its tile row into the leader's
// (rank 0's) shared memory as well as to `partials`; the cluster's barrier replaces
// step_finalize's fence, ticket and last block, and the leader combines the rows from its own
// shared memory (the same sums, in the same order, as step_finalize's: its results agree to
// the last bit). A block that was withdrawn or timed out (live_wait) still arrives, without its
// mark: the leader then combines nothing, as no last block would have.
extern "C" __global__ void __launch_bounds__(PF_SMALL_BLOCK)
pf_step_live_cluster(PF_STEP_ARGS, PF_FIN_ARGS, const volatile u32* stamp, const LiveMeas* lm) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    __shared__ float rows[LIVE_CLUSTER_MAX][PART];
    __shared__ u32 marks[LIVE_CLUSTER_MAX];
    __shared__ float scratch[32];
    __shared__ double red[PF_SMALL_BLOCK / PART][PART];
    __shared__ double fin[PART];
    __shared__ double fac[PF_SMALL_BLOCK];
    __shared__ bool all_in;
    const u32 rank = cluster_rank(), nr = cluster_blocks();
    if (threadIdx.x < LIVE_CLUSTER_MAX) marks[threadIdx.x] = 0u;
    // Every block of the cluster is running, and the leader's marks are cleared, before any
    // block writes into the leader's shared memory. (The kernel starts long before its frame's
    // peaks: this costs the frame nothing.)
    cluster_arrive();
    cluster_wait();
    const bool ran = pf_step_body<PF_SMALL_BLOCK, 1>(PF_STEP_PASS, stamp, lm, flags,
                                                     cluster_map(&rows[rank][0], 0));
    if (ran && threadIdx.x == 0) *cluster_map(&marks[rank], 0) = 1u;
    cluster_arrive();
    // The others are done: the leader's shared memory, which they wrote, lives until it leaves.
    if (rank != 0) return;
    cluster_wait();
    if (threadIdx.x == 0) {
        bool a = true;
        for (u32 r = 0; r < nr; ++r) a = a && marks[r] != 0u;
        all_in = a;
    }
    __syncthreads();
    if (!all_in) return;
    combine_from<PF_SMALL_BLOCK>([&](u32 r, u32 c) { return (double)rows[r][c]; }, nr, fin,
                                 scratch, red, fac);
    finalize_write(sp, fin, blockIdx.y, FLAG_KEEP, 0, sums_out, flags);
#endif
}

// What pf_sums' own finalize writes besides the flags: as pf_step's, and the roughening factors.
#define PF_SUMS_FIN_ARGS double *fin_groups, u32 *fin_tickets, double *sums_out, float *chol

// The slow path's sums, ending with the finalize for its tracks (after_slow: their flag
// says whether they resample now, and a track that does gets its roughening factor).
// Tracks not on the slow path return at once (every block of the track alike), so their flag
// stays as the step left it.
template <int B, int P>
__device__ __forceinline__ void pf_sums_fin(PF_SUMS_ARGS, PF_SUMS_FIN_ARGS) {
    u32 before = flags[blockIdx.y];
    if (!IS_SLOW(before)) return; // uniform over the track's blocks
    pf_sums_body<B, P>(PF_SUMS_PASS);
    step_finalize<B, P == 1>(sp, partials, n_tiles, fin_groups, fin_tickets, sums_out, flags,
                             before, 1,
                     chol);
}

// At least four blocks per SM, as pf_step (the finalize would otherwise take 112 registers).
extern "C" __global__ void __launch_bounds__(PF_BLOCK, 4)
pf_sums(PF_SUMS_ARGS, PF_SUMS_FIN_ARGS) {
    pf_sums_fin<PF_BLOCK, PF_PER_THREAD>(PF_SUMS_PASS, fin_groups, fin_tickets, sums_out, chol);
}

extern "C" __global__ void __launch_bounds__(PF_SMALL_BLOCK)
pf_sums_small(PF_SUMS_ARGS, PF_SUMS_FIN_ARGS) {
    pf_sums_fin<PF_SMALL_BLOCK, 1>(PF_SUMS_PASS, fin_groups, fin_tickets, sums_out, chol);
}

// The slow path's first kernel. Tracks flagged FLAG_DEGENERATE get every log weight reset to
// zero. For tracks flagged FLAG_TEMPER (tempering, step 1), each block takes max(log_w - ll)
// and max(ll) over its particles with finite ll, and the last block of the track to finish (an
// atomic ticket in `counters`, which it resets) takes the maxima over the blocks into
// `bounds`.
extern "C" __global__ void __launch_bounds__(PF_BLOCK)
pf_slow_begin(const StepParams* sp, const TrackParams* tracks, const u32* flags, float* log_w,
              const float* ll, float* parts, u32 n_blocks, u32* counters, float* bounds) {
    __shared__ float scratch[32];
    __shared__ bool last;
    u32 t = blockIdx.y;
    u32 flag = flags[t];
    u32 n = sp->n;
    u32 i = blockIdx.x * PF_BLOCK + threadIdx.x;
    size_t base = (size_t)tracks[t].slot * n;
    if (flag == FLAG_DEGENERATE) {
        if (i < n) log_w[base + i] = 0.0f;
        return;
    }
    if (flag != FLAG_TEMPER) return; // uniform over the block
    float mp = NEG_INF, ml = NEG_INF;
    if (i < n) {
        float l = ll[base + i];
        if (isfinite(l)) {
            mp = log_w[base + i] - l;
            ml = l;
        }
    }
    mp = block_max_all(mp, scratch);
    ml = block_max_all(ml, scratch);
    if (threadIdx.x == 0) {
        parts[((size_t)t * n_blocks + blockIdx.x) * 2] = mp;
        parts[((size_t)t * n_blocks + blockIdx.x) * 2 + 1] = ml;
        // The fence makes this block's maxima visible to the last block.
        __threadfence();
        u32 ticket = atomicAdd(&counters[t], 1u);
        last = ticket == n_blocks - 1;
        if (last) counters[t] = 0; // ready for the next launch
    }
    __syncthreads();
    if (!last) return;
    __threadfence();
    mp = NEG_INF;
    ml = NEG_INF;
    for (u32 b = threadIdx.x; b < n_blocks; b += blockDim.x) {
        mp = fmaxf(mp, parts[((size_t)t * n_blocks + b) * 2]);
        ml = fmaxf(ml, parts[((size_t)t * n_blocks + b) * 2 + 1]);
    }
    mp = block_max_all(mp, scratch);
    ml = block_max_all(ml, scratch);
    if (threadIdx.x == 0) {
        bounds[t * 2] = mp;
        bounds[t * 2 + 1] = ml;
    }
}

// Tempering, step 2: per block, s[g] and s2[g] for beta = 2^-g, g = 0..TEMPER_G (as
// CpuParticleFilter::choose_temper: e^(beta b) by repeated squaring). Output per block: 34
// doubles, [2g] = s[g], [2g + 1] = s2[g].
#define TEMPER_G 16 // must equal TEMPER_GRID in src/track/mod.rs (a unit test checks)

// Tempering, step 2b, at the end of pf_temper_grid: its rows of grid sums are combined in two
// levels (the last block of each group of TEMPER_GROUP blocks sums the group's rows into a
// group row; the track's last group sums those), so that no block walks all of a large
// filter's rows (one block summing 1,024 rows at 262,144 particles took 14 us), and the track's
// last block chooses the exponent (src/track/filter/particle.rs: temper_from_grid): the largest
// beta = 2^-g that keeps TEMPER_MIN_ESS x n effective particles.
#define CHOOSE_COLS (2 * (TEMPER_G + 1))
#define CHOOSE_GROUPS (PF_BLOCK / CHOOSE_COLS)
#define TEMPER_GROUP 32

// Column sums of rows [0, n_rows) of CHOOSE_COLS doubles each (written by other blocks of
// this launch: read from L2) into tot. Every thread of the block calls it.
__device__ void temper_column_sums(const double* rows, u32 n_rows, double* tot) {
    __shared__ double red[CHOOSE_GROUPS][CHOOSE_COLS];
    u32 g = threadIdx.x / CHOOSE_COLS, j = threadIdx.x % CHOOSE_COLS;
    if (g < CHOOSE_GROUPS) {
        double acc = 0.0;
        for (u32 b = g; b < n_rows; b += CHOOSE_GROUPS) acc += __ldcg(rows + (size_t)b * CHOOSE_COLS + j);
        red[g][j] = acc;
    }
    __syncthreads();
    if (threadIdx.x < CHOOSE_COLS) {
        double v = 0.0;
        for (int k = 0; k < CHOOSE_GROUPS; ++k) v += red[k][threadIdx.x];
        tot[threadIdx.x] = v;
    }
    __syncthreads();
}

// The exponent for track t (thread 0), into betas[t] and the host's copy.
__device__ void temper_choose(const StepParams* sp, const double* tot, u32 t, float* betas) {
    if (threadIdx.x == 0) {
        double n = (double)sp->n;
        float beta = ldexpf(1.0f, -TEMPER_G);
        for (int gg = 0; gg <= TEMPER_G; ++gg) {
            double s = tot[2 * gg], s2 = tot[2 * gg + 1];
            if (s2 > 0.0 && s * s >= TEMPER_MIN_ESS * n * s2) {
                beta = ldexpf(1.0f, -gg);
                break;
            }
        }
        betas[t] = beta;
        if (sp->mirror_betas) {
            ((float*)sp->mirror_betas)[t] = beta;
            __threadfence_system(); // before pf_sums writes the flag the host waits for
        }
    }
}

extern "C" __global__ void __launch_bounds__(PF_BLOCK)
pf_temper_grid(const StepParams* sp, const TrackParams* tracks, const u32* flags,
               const float* log_w, const float* ll, const float* bounds, u32 grid, double* out,
               u32 n_blocks, u32* tickets, double* groups, float* betas) {
    __shared__ double warp_parts[PF_BLOCK / 32][2 * (TEMPER_G + 1)];
    __shared__ double tot[CHOOSE_COLS];
    __shared__ bool last;
    u32 t = blockIdx.y;
    if (flags[t] != FLAG_TEMPER) {
        // Tracks that do not temper keep the whole update.
        if (blockIdx.x == 0 && threadIdx.x == 0) {
            betas[t] = 1.0f;
            if (sp->mirror_betas) {
                ((float*)sp->mirror_betas)[t] = 1.0f;
                __threadfence_system();
            }
        }
        return; // uniform over the block
    }
    u32 n = sp->n;
    u32 i = blockIdx.x * PF_BLOCK + threadIdx.x;
    size_t base = (size_t)tracks[t].slot * n;
    float mp = bounds[t * 2], ml = bounds[t * 2 + 1];
    // v[g] = s[g], v[16 + g] = s2[g] for g < 16; g = 16 separately.
    double v[32];
    double last_s = 0.0, last_s2 = 0.0;
#pragma unroll
    for (int k = 0; k < 32; ++k) v[k] = 0.0;
    if (i < n) {
        float l = ll[base + i];
        if (isfinite(l)) {
            double a = exp((double)(log_w[base + i] - l - mp));
            double y = exp((double)(l - ml) * exp2(-(double)TEMPER_G));
            double e = a * y;
            last_s = e;
            last_s2 = e * e;
            y *= y;
#pragma unroll
            for (int g = TEMPER_G - 1; g >= 0; --g) {
                e = a * y;
                v[g] = e;
                v[16 + g] = e * e;
                y *= y;
            }
        }
    }
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    double mine = warp_reduce_scatter32(v);
    warp_parts[warp][lane < 16 ? 2 * lane : 2 * (lane - 16) + 1] = mine;
    last_s = warp_sum_d(last_s);
    last_s2 = warp_sum_d(last_s2);
    if (lane == 0) {
        warp_parts[warp][2 * TEMPER_G] = last_s;
        warp_parts[warp][2 * TEMPER_G + 1] = last_s2;
    }
    __syncthreads();
    if (threadIdx.x < 2 * (TEMPER_G + 1)) {
        double acc = 0.0;
        for (int w = 0; w < PF_BLOCK / 32; ++w) acc += warp_parts[w][threadIdx.x];
        out[((size_t)t * n_blocks + blockIdx.x) * 34 + threadIdx.x] = acc;
    }
    // Step 2b in this launch (one launch less than a kernel of its own): tickets per track,
    // [0] the groups, [1 + g] group g's blocks, each reset by its last user.
    u32 grp = blockIdx.x / TEMPER_GROUP, n_groups = (n_blocks + TEMPER_GROUP - 1) / TEMPER_GROUP;
    u32 r0 = grp * TEMPER_GROUP, rows = min((u32)TEMPER_GROUP, n_blocks - r0);
    u32* tk = tickets + (size_t)t * (n_groups + 1);
    if (!last_to_arrive(&tk[1 + grp], rows, &last)) return;
    temper_column_sums(out + ((size_t)t * n_blocks + r0) * CHOOSE_COLS, rows, tot);
    if (n_groups > 1) {
        if (threadIdx.x < CHOOSE_COLS)
            groups[((size_t)t * n_groups + grp) * CHOOSE_COLS + threadIdx.x] = tot[threadIdx.x];
        if (!last_to_arrive(&tk[0], n_groups, &last)) return;
        temper_column_sums(groups + (size_t)t * n_groups * CHOOSE_COLS, n_groups, tot);
    }
    temper_choose(sp, tot, t, betas);
}

#define SCAN_BLOCK 1024

// Inclusive scan of one double per thread across the block: within each warp by shuffles, then
// over the warp totals (warp_tot: 32 doubles of shared memory, which may still be being read
// from an earlier call, hence the first barrier). Every thread of the block calls it.
__device__ __forceinline__ double block_inclusive_scan(double v, double* warp_tot) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (int o = 1; o < 32; o <<= 1) {
        double y = __shfl_up_sync(0xffffffffu, v, o);
        if (lane >= o) v += y;
    }
    __syncthreads();
    if (lane == 31) warp_tot[warp] = v;
    __syncthreads();
    if (warp == 0) {
        double w = lane < (int)(blockDim.x >> 5) ? warp_tot[lane] : 0.0;
        for (int o = 1; o < 32; o <<= 1) {
            double y = __shfl_up_sync(0xffffffffu, w, o);
            if (lane >= o) w += y;
        }
        warp_tot[lane] = w;
    }
    __syncthreads();
    if (warp > 0) v += warp_tot[warp - 1];
    return v;
}

// Exclusive scan of one track's block totals bt[0..nb) by one block of SCAN_BLOCK threads; the
// total goes after the last entry. Each thread sums a run of consecutive totals, the runs are
// scanned across the block (warp shuffles), and each thread writes its run back.
__device__ void scan_totals_body(u32 nb, double* bt, double* warp_tot) {
    u32 per = (nb + blockDim.x - 1) / blockDim.x;
    u32 lo = min(nb, threadIdx.x * per), hi = min(nb, lo + per);
    double run = 0.0;
    for (u32 k = lo; k < hi; ++k) run += bt[k];
    // Inclusive scan of the runs.
    double v = block_inclusive_scan(run, warp_tot);
    double acc = v - run; // exclusive
    for (u32 k = lo; k < hi; ++k) {
        double x = bt[k];
        bt[k] = acc;
        acc += x;
    }
    if (threadIdx.x == blockDim.x - 1) bt[nb] = v;
}

// Resampling, step 1: inclusive scan (f64) of e * scale within blocks of SCAN_BLOCK particles;
// scale = exp(block max - overall max) from the step's partials and finalize output. The last
// block of a track to finish (an atomic ticket in `counters`, which it resets) then scans the
// track's block totals, so that pf_resample finds every offset ready (one launch less than a
// separate kernel for the totals: a few microseconds a step).
extern "C" __global__ void __launch_bounds__(SCAN_BLOCK)
pf_scan_local(const StepParams* sp, const TrackParams* tracks, const u32* flags, u32 mask,
              const float* e, const float* partials, u32 n_blocks, u32 tile, const double* sums,
              double* cdf, double* block_tot, u32* counters, const float* rough, float* chol) {
    __shared__ double warp_tot[32];
    __shared__ bool last;
    u32 t = blockIdx.y;
    u32 flag = flags[t];
    if (!IN_MASK(mask, flag)) return; // uniform over the block
    u32 n = sp->n;
    size_t base = (size_t)tracks[t].slot * n;
    u32 nb = (n + SCAN_BLOCK - 1) / SCAN_BLOCK;
    double* bt = block_tot + (size_t)t * (nb + 1);
    double mx = sums[(size_t)t * PART];
    // Block 0 brings a track's roughening factor, which the host worked out from the step's
    // sums before it launched the resampling (src/gpu/cuda/pf.rs: put_roughening), from `rough`
    // (mapped host memory) into `chol` for pf_resample: loaded here, stored after the scan, so
    // that the read across the bus overlaps the scan. On the slow path (any other flag) the
    // finalize put the factor into `chol` itself.
    bool bring = blockIdx.x == 0 && threadIdx.x < 36 && flag == FLAG_RESAMPLE;
    float lv = bring ? rough[t * 36 + threadIdx.x] : 0.0f;
    // Chunks of SCAN_BLOCK particles, gridDim.x apart (a grid of at most a wave, so that a
    // track that does not resample, whose blocks all return at once, costs one wave of them).
    for (u32 c = blockIdx.x; c < nb; c += gridDim.x) {
        u32 i = c * SCAN_BLOCK + threadIdx.x;
        double v = 0.0;
        if (i < n) {
            float bm = partials[((size_t)t * n_blocks + i / tile) * PART];
            double f = bm > NEG_INF ? exp((double)bm - mx) : 0.0;
            v = (double)e[base + i] * f;
        }
        v = block_inclusive_scan(v, warp_tot);
        if (i < n) cdf[base + i] = v;
        // The last thread holds the chunk's total (particles past the end contribute nothing).
        if (threadIdx.x == blockDim.x - 1) bt[c] = v;
    }
    if (bring) chol[t * 36 + threadIdx.x] = lv;
    // The last block of the track to get here scans the totals.
    if (!last_to_arrive(&counters[t], gridDim.x, &last)) return;
    scan_totals_body(nb, bt, warp_tot);
}

// Resampling, step 2: output slot j takes the particle whose cumulative interval contains
// (u0 + j) / N of the total (binary search: one thread per slot, balanced work). Copies into
// the other buffer and resets the weights. The slots of one block need ancestors from a narrow
// stretch of the cumulative sum: the block finds that stretch together, loads it into
// shared memory, and each thread searches there (global memory when the stretch is long).
#define RS_SHARED 2048
__device__ __forceinline__ double cum_at(const double* cdf, const double* bt, size_t base, u32 i) {
    return bt[i / SCAN_BLOCK] + cdf[base + i];
}

// Add every thread's two counts into cnt[0] and cnt[1] (shared): a warp sum, then one atomic
// per warp.
__device__ __forceinline__ void add_counts2(u32 c0, u32 c1, u32* cnt) {
    for (int o = 16; o > 0; o >>= 1) {
        c0 += __shfl_down_sync(0xffffffffu, c0, o);
        c1 += __shfl_down_sync(0xffffffffu, c1, o);
    }
    if ((threadIdx.x & 31) == 0) {
        atomicAdd(&cnt[0], c0);
        atomicAdd(&cnt[1], c1);
    }
}

// The ancestors of two targets t0 <= t1, found by the whole block at once (the two ends of a
// block's slots): count the chunk starts at or below each target (the chunk holding it: bt is
// non-decreasing), then the particles of that chunk whose cumulative weight is at or below it.
// The same answers as binary searches over the chunk starts and then within the chunk (the
// first index whose cumulative weight exceeds the target, n - 1 when none does), from two
// rounds of coalesced loads instead of two threads' chains of dependent ones, which left the rest of the block waiting at a barrier
// for half of pf_resample's time (ncu, pier_five at 262,144 particles). `cnt` is 4 shared
// words; every thread of the block must call this.
__device__ __forceinline__ void block_search2(const double* cdf, const double* bt, size_t base,
                                              u32 n, u32 nb, double t0, double t1, u32* cnt,
                                              u32* out) {
    if (threadIdx.x < 4) cnt[threadIdx.x] = 0;
    __syncthreads();
    u32 c0 = 0, c1 = 0;
    for (u32 k = threadIdx.x; k < nb; k += blockDim.x) {
        double v = bt[k];
        c0 += v <= t0 ? 1u : 0u;
        c1 += v <= t1 ? 1u : 0u;
    }
    add_counts2(c0, c1, cnt);
    __syncthreads();
    // bt[0] = 0 <= any target, so each count is at least 1.
    u32 k0 = max(cnt[0], 1u) - 1, k1 = max(cnt[1], 1u) - 1;
    double off0 = bt[k0], off1 = bt[k1];
    u32 a0 = k0 * SCAN_BLOCK, a1 = k1 * SCAN_BLOCK;
    u32 e0 = min(n, a0 + SCAN_BLOCK), e1 = min(n, a1 + SCAN_BLOCK);
    c0 = 0;
    c1 = 0;
    for (u32 q = threadIdx.x; q < SCAN_BLOCK; q += blockDim.x) {
        if (a0 + q < e0) c0 += off0 + cdf[base + a0 + q] <= t0 ? 1u : 0u;
        if (a1 + q < e1) c1 += off1 + cdf[base + a1 + q] <= t1 ? 1u : 0u;
    }
    add_counts2(c0, c1, cnt + 2);
    __syncthreads();
    out[0] = min(a0 + cnt[2], n - 1);
    out[1] = min(a1 + cnt[3], n - 1);
}

// Regularisation after a resampling, applied by pf_resample to the particle it just
// copied into output slot i: state += L z (L lower-triangular, per track, z six normals).
__device__ __forceinline__ void roughen(const StepParams* sp, u32 slot, u32 i, const float* l,
                                        float* s) {
    float z[6];
    normals6(draw(sp->seed, sp->frame, slot, i, S_ROUGHEN), z);
    float part[6];
    for (int r = 0; r < 6; ++r) {
        float acc = 0.0f;
        for (int c = 0; c <= r; ++c) acc += l[r * 6 + c] * z[c];
        part[r] = s[r] + acc;
    }
    if (sp->mode != 0) {
        // Curved: the jitter moves the inverse range too (|p| - 1), reflected at 0. Plane:
        // back on the unit sphere.
        float nn = dir_norm(part[0], part[1], part[2]);
        float k = sp->mode == 2 ? 1.0f / nn : (nn < 1.0f ? (2.0f - nn) / nn : 1.0f);
        part[0] *= k;
        part[1] *= k;
        part[2] *= k;
    }
    if (sp->line) fold_line(part, sp->axis, sp->side, sp->line == 2u);
    for (int r = 0; r < 6; ++r) s[r] = part[r];
}

// The first index in [lo, hi] whose cumulative weight cum(index) exceeds `target`, or hi when
// none does.
template <class Cum>
__device__ __forceinline__ u32 first_above(Cum cum, u32 lo, u32 hi, double target) {
    while (lo < hi) {
        u32 mid = (lo + hi) / 2;
        if (cum(mid) <= target) lo = mid + 1; else hi = mid;
    }
    return lo;
}

// Systematic resampling's target for output slot j of n: (u0 + j) / n of the total weight.
__device__ __forceinline__ double systematic_target(float u0, u32 j, u32 n, double total) {
    return ((double)u0 + (double)j) / (double)n * total;
}

// Output slot j of track t's resampling takes particle a (state and model from the current
// buffers into the other ones), roughened by the factor `l` (row-major, lower triangle); its
// log weight restarts at 0.
__device__ __forceinline__ void copy_ancestor(const StepParams* sp, const TrackParams& tp,
                                              u32 j, u32 a, float* s0, float* s1, u32* m0,
                                              u32* m1, float* log_w, const float* l) {
    u32 n = sp->n;
    const float* src = slot_state(s0, s1, tp.cur, tp.slot, n);
    float* dst = slot_state(s0, s1, 1 - tp.cur, tp.slot, n);
    float v[STATE_DIM];
    for (int c = 0; c < STATE_DIM; ++c) v[c] = src[(size_t)c * n + a];
    roughen(sp, tp.slot, j, l, v);
    for (int c = 0; c < STATE_DIM; ++c) dst[(size_t)c * n + j] = v[c];
    slot_model(m0, m1, 1 - tp.cur, tp.slot, n)[j] = slot_model(m0, m1, tp.cur, tp.slot, n)[a];
    log_w[(size_t)tp.slot * n + j] = 0.0f;
}

// Eight blocks per SM (32 registers), as many as its grid of one wave assumes (src/gpu/cuda/
// pf.rs: wave): with the compiler's own choice for the striding loop (58 registers, four blocks
// per SM) a resampling step took 52 us at 1M particles against 41 before the loop.
extern "C" __global__ void __launch_bounds__(PF_BLOCK, 8)
pf_resample(const StepParams* sp, const TrackParams* tracks, const u32* flags, u32 mask,
            const double* cdf, const double* block_tot, float* s0, float* s1, u32* m0, u32* m1,
            float* log_w, const float* chol) {
    __shared__ double cum[RS_SHARED];
    __shared__ u32 cnt[4];
    u32 t = blockIdx.y;
    u32 flag = flags[t];
    if (!IN_MASK(mask, flag)) return; // uniform over the block
    // Every resampled track's factor is in `chol`: from the slow path's finalize, or brought
    // from the host by pf_scan_local.
    const float* l = chol + t * 36;
    const TrackParams tp = tracks[t];
    u32 n = sp->n;
    u32 nb = (n + SCAN_BLOCK - 1) / SCAN_BLOCK;
    const double* bt = block_tot + (size_t)t * (nb + 1);
    size_t base = (size_t)tp.slot * n;
    double total = bt[nb];
    // Output slots in runs of PF_BLOCK, gridDim.x runs apart (as pf_scan_local's chunks).
    for (u32 j0 = blockIdx.x * PF_BLOCK; j0 < n; j0 += gridDim.x * PF_BLOCK) {
        u32 j = j0 + threadIdx.x;
        u32 j_last = min(n, j0 + PF_BLOCK) - 1;
        double target = systematic_target(tp.u0, j, n, total);
        u32 range[2];
        // (block_search2 begins with a barrier, after which this block's last run is done
        // with cum.)
        block_search2(cdf, bt, base, n, nb, systematic_target(tp.u0, j0, n, total),
                      systematic_target(tp.u0, j_last, n, total), cnt, range);
        u32 a_lo = range[0], a_hi = range[1];
        u32 len = a_hi - a_lo + 1;
        bool sh = len <= RS_SHARED;
        if (sh) {
            for (u32 k = threadIdx.x; k < len; k += PF_BLOCK) cum[k] = cum_at(cdf, bt, base, a_lo + k);
        }
        __syncthreads();
        if (j < n) {
            // The answer lies in [a_lo, a_hi]: the first index there whose cumulative weight
            // exceeds the target (a_hi when none does, as the global search's clamp).
            u32 a;
            if (sh) {
                a = a_lo + first_above([&](u32 k) { return cum[k]; }, 0, len - 1, target);
            } else {
                // A long stretch (most particles weightless): the same search in global memory.
                a = first_above([&](u32 k) { return cum_at(cdf, bt, base, k); }, a_lo, a_hi,
                                target);
            }
            copy_ancestor(sp, tp, j, a, s0, s1, m0, m1, log_w, l);
        }
    }
}

// Resampling of a small filter (n <= RS_SMALL_MAX, the live path) in a few blocks per track:
// pf_scan_local's scan and pf_resample's search and copy without a launch or a pass through
// global memory between them (the two took 5-18 us for 2,000 particles, mostly launch and
// latency). Each block scans all of the track's weights (each thread its RS_SMALL_PER
// consecutive ones, then the block the threads' totals), and the cumulative sums stay in
// shared memory for the searches; output slot j takes the first particle whose cumulative
// weight exceeds (u0 + j) / n of the total (n - 1 when none does), as pf_resample, and
// roughens it by the track's factor: the host's (`rough`, as pf_scan_local) after the usual
// step, the finalize's (`chol`) on the slow path. The track's blocks (gridDim.x) share out the
// output slots in equal runs: the roughening's normals cost each particle a few hundred
// instructions, which one block, alone on its SM, took 5 us over for 2,000 particles.
#define RS_SMALL_THREADS 1024
#define RS_SMALL_PER 4
#define RS_SMALL_MAX (RS_SMALL_THREADS * RS_SMALL_PER)
extern "C" __global__ void __launch_bounds__(RS_SMALL_THREADS)
pf_resample_small(const StepParams* sp, const TrackParams* tracks, const u32* flags, u32 mask,
                  const float* e, const float* partials, u32 n_blocks, u32 tile,
                  const double* sums, float* s0, float* s1, u32* m0, u32* m1, float* log_w,
                  const float* chol, const float* rough) {
    __shared__ double cum[RS_SMALL_MAX];
    __shared__ double warp_tot[32];
    __shared__ float l[36];
    u32 t = blockIdx.y;
    u32 flag = flags[t];
    if (!IN_MASK(mask, flag)) return; // uniform over the block
    // The factor's load is issued now and stored to shared memory after the scan (before the
    // barrier that ends it), so that a read across the bus overlaps the scan.
    const float* src = (flag == FLAG_RESAMPLE ? rough : chol) + t * 36;
    float lv = threadIdx.x < 36 ? src[threadIdx.x] : 0.0f;
    const TrackParams tp = tracks[t];
    u32 n = sp->n;
    size_t base = (size_t)tp.slot * n;
    double mx = sums[(size_t)t * PART];
    u32 i0 = threadIdx.x * RS_SMALL_PER;
    double run = 0.0;
    double local[RS_SMALL_PER];
#pragma unroll
    for (int q = 0; q < RS_SMALL_PER; ++q) {
        u32 i = i0 + q;
        double v = 0.0;
        if (i < n) {
            float bm = partials[((size_t)t * n_blocks + i / tile) * PART];
            double f = bm > NEG_INF ? exp((double)bm - mx) : 0.0;
            v = (double)e[base + i] * f;
        }
        run += v;
        local[q] = run;
    }
    double offset = block_inclusive_scan(run, warp_tot) - run;
#pragma unroll
    for (int q = 0; q < RS_SMALL_PER; ++q)
        if (i0 + q < n) cum[i0 + q] = offset + local[q];
    if (threadIdx.x < 36) l[threadIdx.x] = lv;
    __syncthreads();
    double total = cum[n - 1];
    u32 per = (n + gridDim.x - 1) / gridDim.x;
    u32 j_end = min(n, (blockIdx.x + 1) * per);
    for (u32 j = blockIdx.x * per + threadIdx.x; j < j_end; j += RS_SMALL_THREADS) {
        u32 a = first_above([&](u32 k) { return cum[k]; }, 0, n - 1,
                            systematic_target(tp.u0, j, n, total));
        copy_ancestor(sp, tp, j, a, s0, s1, m0, m1, log_w, l);
    }
}

// A track's prior (as src/track/filter/particle.rs: init_particle).
struct InitParams {
    double mean[6];
    double chol[36];
    double speed_ball;
    float model_cdf[MAX_MODELS];
    u32 n_model_probs;
    u32 slot;
    u32 cur;
    float inv_range_max; // direction mode (src/track/mod.rs: TrackInit)
    u64 frame;
};

// The step's parameters, from the host's page-locked copy (mapped into the device's address
// space) into device memory: as the first node of the step's graph this is cheaper than a copy
// node. `n16` 16-byte words; read uncached, since the host rewrites them
// between launches.
extern "C" __global__ void pf_fetch(const uint4* src, uint4* dst, u32 n16) {
    for (u32 i = blockIdx.x * blockDim.x + threadIdx.x; i < n16; i += gridDim.x * blockDim.x)
        dst[i] = __ldcv(src + i);
}

extern "C" __global__ void pf_init(const StepParams* sp, const InitParams* ip, float* s0,
                                   float* s1, u32* m0, u32* m1, float* log_w) {
    u32 n = sp->n;
    u32 i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float4 z0 = normals4(draw(sp->seed, ip->frame, ip->slot, i, S_INIT_POS));
    float4 z1 = normals4(draw(sp->seed, ip->frame, ip->slot, i, S_INIT_VEL));
    uint4 w = draw(sp->seed, ip->frame, ip->slot, i, S_SWITCH);
    float z[6] = {z0.x, z0.y, z0.z, z0.w, z1.x, z1.y};
    double x[6];
    for (int r = 0; r < 6; ++r) {
        x[r] = ip->mean[r];
        for (int c = 0; c <= r; ++c) x[r] += ip->chol[r * 6 + c] * (double)z[c];
    }
    float dz, unused;
    box_muller(uniform(w.y), uniform(w.z), &dz, &unused);
    float d[3] = {z1.z, z1.w, dz};
    float dn = fmaxf(sqrtf(d[0] * d[0] + d[1] * d[1] + d[2] * d[2]), 1e-12f);
    float radius = (float)ip->speed_ball * uniform(w.w);
    float s[7];
    for (int a = 0; a < 6; ++a) s[a] = (float)x[a];
    s[6] = 0.0f;
    for (int a = 0; a < 3; ++a) s[3 + a] += d[a] / dn * radius;
    if (sp->mode != 0) {
        if (sp->mode == 2) {
            // Plane waves: the direction drawn, its rate in the tangent plane.
            onto_unit_sphere(s);
        } else if (ip->inv_range_max >= 0.0f) {
            // A newborn track: the direction drawn, the inverse range (|p| - 1) spread evenly
            // over [0, max], the velocity over the particle's range (src/track/filter/particle.rs:
            // init_particle).
            float rho = ip->inv_range_max * (((float)i + 0.5f) / (float)n);
            float keep = (1.0f + rho) / dir_norm(s[0], s[1], s[2]);
            for (int a = 0; a < 3; ++a) {
                s[a] *= keep;
                s[3 + a] *= rho;
            }
        } else {
            reflect_at_infinity(s);
        }
        if (sp->line) fold_line(s, sp->axis, sp->side, sp->line == 2u);
    }
    float u = uniform(w.x);
    u32 model = ip->n_model_probs > 0 ? ip->n_model_probs - 1 : 0;
    for (u32 m = 0; m < ip->n_model_probs; ++m) {
        if (u < ip->model_cdf[m]) {
            model = m;
            break;
        }
    }
    float* st = slot_state(s0, s1, ip->cur, ip->slot, n);
    for (int c = 0; c < STATE_DIM; ++c) st[(size_t)c * n + i] = s[c];
    slot_model(m0, m1, ip->cur, ip->slot, n)[i] = model;
    log_w[(size_t)ip->slot * n + i] = 0.0f;
}
