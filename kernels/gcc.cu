// GCC-PHAT kernels: the CUDA twin of src/dsp/gcc.rs. Frames are windowed into the FFT input,
// cuFFT transforms all channels of all frames in one batched R2C, gcc_cross weights every
// pair's cross-spectrum (one block per frame and pair), one batched C2R gives the curves, and
// gcc_peaks finds and refines each pair's peaks. Only the peaks (and curves when asked for)
// leave the device.

#include "common.cuh"

#define GCC_NEG_INF __int_as_float(0xff800000)
#define PEAK_HALF 16     // PEAK_INTERP_HALF_WIDTH
#define PEAK_GRID 16     // PEAK_GRID: offsets -0.5..=0.5 in steps of 1/16
#define MAX_PEAKS 16
// The interpolation taps: PEAK_GRID + 1 phases of 2 PEAK_HALF. In shared memory (as doubles)
// each phase takes PEAK_TAP_STRIDE, so that the grid points of a refinement, which read
// different phases at the same tap, fall in different banks (a stride of 32 doubles put all
// 17 in one).
#define PEAK_TAPS ((PEAK_GRID + 1) * 2 * PEAK_HALF)
#define PEAK_TAP_STRIDE (2 * PEAK_HALF + 1)
// gcc_peaks refines this many candidates ahead for a frame's few pairs (a thread per grid point).
#define PEAK_AHEAD (PEAK_THREADS_MAX / (PEAK_GRID + 1))
// find_peaks examines at most min(4 k + 8, MAX_CANDIDATES) local maxima, best first.
#define MAX_CANDIDATES 72
// A listed local maximum that has been examined (no lag reaches it: curves in shared memory
// have at most 4095 lags each side).
#define CAND_GONE 0x7fff
// Curves up to this many lags are searched in shared memory (the search and the refinement
// read each value many times); longer ones are read from global memory. The curve (2
// curve_half + 1 floats) and the list of its local maxima (at most curve_half + 2 lags, as
// shorts) live in dynamic shared memory sized by the host (peaks_shared_bytes in
// src/gpu/cuda/gcc.rs), so that short curves leave room for more blocks per SM.
#define PEAK_SHARED 8192

// Window and zero-pad: in[row][frame_len] -> out[row][fft_len], rows = frames x channels.
// Each row's first `upto` samples are read from `copy` instead (same layout: a live frame's
// samples sent to the device while it filled; upto 0 and copy null otherwise), the rest from
// `in` (for a live frame, host memory mapped into the device).
extern "C" __global__ void gcc_window(const float* in, const float* copy, u32 upto,
                                      const float* window, float* out, u32 frame_len,
                                      u32 fft_len) {
    u32 row = blockIdx.y;
    u32 i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= fft_len) return;
    const float* src = i < upto ? copy : in;
    out[(size_t)row * fft_len + i] = i < frame_len ? src[(size_t)row * frame_len + i] * window[i] : 0.0f;
}

__device__ __forceinline__ float mag(float2 x, float beta) {
    float a = sqrtf(x.x * x.x + x.y * x.y);
    return beta == 1.0f ? a : powf(a, beta);
}

// One pair of one frame: weighted cross-spectrum and its normalisation (as weight_pair). A
// block per pair and frame; GCC_CROSS_BLOCK threads, so that each walks few bins (with 256 a
// single frame's few pairs left the kernel latency-bound).
//
// HOLD > 0 (gcc_cross_few, a frame's few pairs): a thread's first HOLD bins (k = threadIdx.x +
// i blockDim.x: all of them for a frame of 4096 samples and 1024 threads) are loaded once, with
// their taper, before the regulariser's barrier, and their magnitudes' product is kept for the
// weight; further bins are loaded again after it. By the device's clock (H100) this took block
// 0 of a 4-channel frame of 4096 samples from 3.8-4.1 us to 3.1-3.3. HOLD = 0 (gcc_cross, a
// grid that fills the GPU): the registers that holding takes (41 against 30) cost the grid
// occupancy, and batches of 16-channel frames 2-8 % of their time.
#define GCC_CROSS_BLOCK 1024
template <u32 HOLD>
__device__ __forceinline__ void cross_body(const float2* spectra, const u32* pairs,
                                           const float* taper, u32 channels, u32 n_pairs, u32 nb,
                                           u32 lo, u32 hi, u32 phat, float beta,
                                           float regularisation, float2* cross, float* norms) {
    __shared__ float scratch[32];
    __shared__ float shared_reg;
    u32 p = blockIdx.x, f = blockIdx.y;
    u32 a = pairs[2 * p], b = pairs[2 * p + 1];
    // The spectra come from the R2C before (pairs and taper never change).
    wait_for_previous_kernel();
    const float2* xa = spectra + ((size_t)f * channels + a) * nb;
    const float2* xb = spectra + ((size_t)f * channels + b) * nb;
    float2* out = cross + ((size_t)f * n_pairs + p) * nb;
    constexpr u32 CROSS_HOLD = HOLD > 0 ? HOLD : 1;
    float2 xh[CROSS_HOLD], yh[CROSS_HOLD];
    float th[CROSS_HOLD], mh[CROSS_HOLD];
    float sum = 0.0f;
#pragma unroll
    for (u32 i = 0; i < HOLD; ++i) {
        const u32 k = threadIdx.x + i * blockDim.x;
        xh[i] = yh[i] = make_float2(0.0f, 0.0f);
        th[i] = mh[i] = 0.0f;
        if (k < nb) {
            xh[i] = xa[k];
            yh[i] = xb[k];
            th[i] = taper[k];
        }
        if (phat && k >= lo && k <= hi) {
            mh[i] = mag(xh[i], beta) * mag(yh[i], beta);
            sum += mh[i];
        }
    }
    float reg = 1.17549435e-38f;
    if (phat) {
        // (Without holding, the band's bins from lo, as before.)
        for (u32 k = HOLD > 0 ? threadIdx.x + HOLD * blockDim.x : lo + threadIdx.x; k <= hi;
             k += blockDim.x)
            if (k >= lo) sum += mag(xa[k], beta) * mag(xb[k], beta);
        sum = block_sum(sum, scratch);
        if (threadIdx.x == 0) shared_reg = regularisation * (sum / (float)(hi - lo + 1)) + 1.17549435e-38f;
        __syncthreads();
        reg = shared_reg;
    }
    float norm = 0.0f;
    const u32 n_half = nb - 1;
    // Bin k's weighted cross-spectrum and its share of the norm (m: the magnitudes' product).
    auto weigh = [&](u32 k, float2 x, float2 y, float t, float m) {
        float2 gw = make_float2(0.0f, 0.0f);
        if (k >= lo && k <= hi) {
            float2 g = make_float2(x.x * y.x + x.y * y.y, x.y * y.x - x.x * y.y);
            float w = phat ? t / (m + reg) : t;
            gw = make_float2(g.x * w, g.y * w);
            float mult = (k == 0 || k == n_half) ? 1.0f : 2.0f;
            norm += mult * sqrtf(gw.x * gw.x + gw.y * gw.y);
        }
        // The inverse transform wants purely real end bins (after the norm, as on the CPU).
        if (k == 0 || k == n_half) gw.y = 0.0f;
        out[k] = gw;
    };
#pragma unroll
    for (u32 i = 0; i < HOLD; ++i) {
        const u32 k = threadIdx.x + i * blockDim.x;
        if (k < nb) weigh(k, xh[i], yh[i], th[i], mh[i]);
    }
    for (u32 k = threadIdx.x + HOLD * blockDim.x; k < nb; k += blockDim.x) {
        const float2 zero = make_float2(0.0f, 0.0f);
        if (k >= lo && k <= hi) {
            const float2 x = xa[k], y = xb[k];
            weigh(k, x, y, taper[k], phat ? mag(x, beta) * mag(y, beta) : 0.0f);
        } else {
            weigh(k, zero, zero, 0.0f, 0.0f); // (out of the band: a zero)
        }
    }
    norm = block_sum(norm, scratch);
    if (threadIdx.x == 0) norms[(size_t)f * n_pairs + p] = norm;
}

#define GCC_CROSS_ARGS                                                                         \
    const float2 *spectra, const u32 *pairs, const float *taper, u32 channels, u32 n_pairs,   \
        u32 nb, u32 lo, u32 hi, u32 phat, float beta, float regularisation, float2 *cross,    \
        float *norms
#define GCC_CROSS_PASS                                                                         \
    spectra, pairs, taper, channels, n_pairs, nb, lo, hi, phat, beta, regularisation, cross, norms

extern "C" __global__ void __launch_bounds__(GCC_CROSS_BLOCK) gcc_cross(GCC_CROSS_ARGS) {
    cross_body<0>(GCC_CROSS_PASS);
}

extern "C" __global__ void __launch_bounds__(GCC_CROSS_BLOCK) gcc_cross_few(GCC_CROSS_ARGS) {
    cross_body<3>(GCC_CROSS_PASS);
}

struct PeakOut {
    float lag;
    float value;
    float quality;
};

// Grid point g (offset (g - 8) / 16) around integer lag `lag` of a curve stored for lags
// -ch..=ch: the interpolation taps to use and the curve index of the first (refine_peak's
// eval on the CPU).
template <typename T, int STRIDE>
__device__ __forceinline__ const T* grid_taps(int lag, int ch, int g, const T* taps, int* first) {
    double t = (double)(lag + ch) + (double)(g - PEAK_GRID / 2) / (double)PEAK_GRID;
    double i0 = floor(t);
    double frac = t - i0;
    int phase = min((int)llround(frac * (double)PEAK_GRID), PEAK_GRID);
    *first = (int)i0 - PEAK_HALF + 1;
    return taps + phase * STRIDE;
}

// The interpolant at grid point g around integer lag `lag` of a curve `sc` in shared memory
// (lags -ch..=ch), in f64 as refine_peak's eval. T is float, or double for a curve and taps
// converted once (the search for a frame's few pairs: converting each value for each of its
// uses took a fifth of that kernel's time, H100); a phase's taps start every STRIDE values
// (2 PEAK_HALF as uploaded, PEAK_TAP_STRIDE in shared memory).
template <typename T, int STRIDE = 2 * PEAK_HALF>
__device__ __forceinline__ double grid_value(const T* sc, int ch, int lag, int g, const T* taps) {
    int first;
    const T* tw = grid_taps<T, STRIDE>(lag, ch, g, taps, &first);
    double acc = 0.0;
#pragma unroll
    for (int k = 0; k < 2 * PEAK_HALF; ++k) {
        int j = first + k;
        if (j >= 0 && j < 2 * ch + 1) acc += (double)sc[j] * (double)tw[k];
    }
    return acc;
}

// The refined peak from the interpolant on the 17-point grid around integer lag `lag`: the best
// grid point and a parabola through it and its neighbours (refine_peak), clamped to the bound.
__device__ PeakOut refined_peak(const double* grid, int lag, float ml, float mean, float std) {
    int best = 0;
    for (int g = 1; g <= PEAK_GRID; ++g) if (grid[g] > grid[best]) best = g;
    double h = 1.0 / (double)PEAK_GRID;
    double offset = (double)(best - PEAK_GRID / 2) * h;
    double value = grid[best];
    if (best > 0 && best < PEAK_GRID) {
        double a = grid[best - 1], b = grid[best], cc = grid[best + 1];
        double den = a - 2.0 * b + cc;
        if (den < 0.0) {
            double d = 0.5 * (a - cc) / den;
            offset += d * h;
            value = b - 0.25 * (a - cc) * d;
        }
    }
    float lag_f = fminf(fmaxf((float)lag + (float)offset, -ml), ml);
    float q = (float)(((double)(float)value - (double)mean) / (double)std);
    return PeakOut{lag_f, (float)value, q};
}

// Lanes 0..=PEAK_GRID of a warp evaluate the grid around `lag` into `g`, and lane 0 refines
// the peak into *dst. Every lane of the warp calls it.
template <typename T = float, int STRIDE = 2 * PEAK_HALF>
__device__ __forceinline__ void refine_warp(const T* sc, int ch, int lag, const T* taps, double* g,
                                            float ml, float mean, float std, int lane,
                                            PeakOut* dst) {
    if (lane <= PEAK_GRID) g[lane] = grid_value<T, STRIDE>(sc, ch, lag, lane, taps);
    __syncwarp();
    if (lane == 0) *dst = refined_peak(g, lag, ml, mean, std);
}

// One pair of one frame: curve, statistics over the physical lags, the best peaks at least
// min_sep apart (best first), each refined on a 17-point grid of the band-limited interpolant
// and a parabola (as find_peaks and refine_peak).
// One warp per pair and frame (PEAK_THREADS) when the grid fills the GPU: the selection of
// the best peaks is sequential and runs in one warp, and with more warps per block the others
// only waited at the final barrier (72 % of the kernel's stalls in a batch of 16 16-channel
// frames) while holding the SM's warp slots. A grid of a few pairs (one frame, the live path)
// gets PEAK_THREADS_MAX threads per pair instead: one warp alone spent most of the kernel
// loading the curve, taking its statistics and listing its maxima (16.5 us for a 4-channel
// frame of 4096 samples).
#define PEAK_THREADS 32
#define PEAK_THREADS_MAX 256

// A one-frame call's peaks go straight to the host's mapped buffer, and `flag` (mapped too;
// null on other calls) tells the host when every block's are there; they go to device memory
// too, for a filter step waiting on the device (src/gpu/cuda/pf.rs, pf_step_live), which
// `ticket[0]` counts blocks for. Thread 0, which writes the block's peaks, first fences them
// device-wide and counts the block in `ticket[0]` (a waiting step goes ahead once its frame's
// blocks are all counted); then it fences them system-wide and the last block to finish that
// (`ticket[1]`, which it resets for the next launch) raises the flag. So the step's go-ahead
// waits neither for the host's copies to cross the bus nor for a last block to count the
// frame (a second fence and count). Every thread of the block calls it, once, after thread 0
// has written the peaks.
__device__ __forceinline__ void peaks_signal(u32* ticket, u32 n_blocks, u32* flag) {
    // Thread 0 wrote the block's peaks: it alone fences (a system-wide fence by every thread
    // cost the kernel a few microseconds).
    if (!flag || threadIdx.x != 0) return;
    __threadfence();
    atomicAdd(ticket, 1u);
    __threadfence_system();
    if (atomicAdd(ticket + 1, 1u) == n_blocks - 1) {
        ticket[1] = 0;
        __threadfence_system();
        *(volatile u32*)flag = 1u;
    }
}

// A pair without peaks (no physical lags, or a flat curve): thread 0 writes k empty peaks, and
// the block signals as any other. Every thread of the block calls it.
__device__ __forceinline__ void no_peaks(PeakOut* po, PeakOut* pd, u32 k_peaks, u32* ticket,
                                         u32 n_blocks, u32* flag) {
    const PeakOut none{0.0f, GCC_NEG_INF, 0.0f};
    if (threadIdx.x == 0)
        for (u32 j = 0; j < k_peaks; ++j) {
            po[j] = none;
            if (pd) pd[j] = none;
        }
    peaks_signal(ticket, n_blocks, flag);
}

extern "C" __global__ void __launch_bounds__(PEAK_THREADS_MAX)
gcc_peaks(const float* corr, const float* norms, const float* max_lag, const float* taps,
          u32 n_pairs, u32 fft_len, u32 curve_half, u32 k_peaks, float min_sep, u32 want_curves,
          float* curves, PeakOut* peaks, u32* ticket, u32 n_blocks, u32* flag, u32 few,
          PeakOut* peaks_dev) {
    __shared__ float2 scratch2[32];
    __shared__ float best_v[32];
    __shared__ int best_l[32];
    __shared__ int excluded[MAX_CANDIDATES]; // at most cap <= MAX_CANDIDATES are examined
    __shared__ int n_excluded;
    __shared__ PeakOut accepted[MAX_PEAKS];
    __shared__ int n_accepted;
    __shared__ double grid[PEAK_GRID + 1];
    __shared__ int order[MAX_CANDIDATES];
    __shared__ int cand_lag;
    __shared__ float cand_v;
    __shared__ int stop;
    extern __shared__ float dyn_shared[];
    __shared__ int n_cand;
    u32 p = blockIdx.x, f = blockIdx.y;
    size_t row = (size_t)f * n_pairs + p;
    const float* c = corr + row * fft_len;
    const float ml = max_lag[p];
    // The curves come from the C2R before, the norms from gcc_cross before it (the lag bounds
    // never change).
    wait_for_previous_kernel();
    float nrm = norms[row];
    const bool nrm_ok = nrm > 0.0f && isfinite(nrm);
    float inv = nrm_ok ? 1.0f / nrm : 0.0f;
    int ch = (int)curve_half;
    int n = (int)fft_len;
    // Curve value at a lag (negative lags wrap to the end of the circular correlation). The
    // load does not wait for the norm's (a load under the norm's condition did).
    auto curve_g = [&](int l) {
        float raw = c[ch < n ? (l < 0 ? l + n : l) : ((l % n) + n) % n];
        return nrm_ok ? raw * inv : 0.0f;
    };
    bool use_sh = 2 * ch + 1 <= PEAK_SHARED;
    float* sc = dyn_shared;
    short* cand = (short*)(dyn_shared + ((2 * ch + 1 + 3) & ~3));
    const int cand_cap = ch + 2;
    const int cap = min(4 * (int)k_peaks + 8, MAX_CANDIDATES);
    // With `few` (a frame's few pairs), past the list of maxima from a 16-byte boundary: the
    // interpolation taps and the curve in f64, each candidate's (value, lag), the refinement
    // grids of the first PEAK_AHEAD candidates, and the refined peaks of the first `cap`
    // (peaks_few_bytes in src/gpu/cuda/gcc.rs).
    char* extra =
        (char*)dyn_shared + ((((2 * ch + 1 + 3) & ~3) * 4 + cand_cap * 2 + 15) & ~15);
    double* taps_d = (double*)extra;
    double* sc_d = taps_d + (PEAK_GRID + 1) * PEAK_TAP_STRIDE;
    int2* kv = (int2*)(sc_d + ((2 * ch + 1 + 1) & ~1));
    double* gridv = (double*)(kv + PEAK_THREADS_MAX);
    PeakOut* refined = (PeakOut*)(gridv + PEAK_AHEAD * (PEAK_GRID + 1));
#define CURVE(l) (use_sh ? sc[(l) + ch] : curve_g(l))
    // Before the first barrier (the curve's, or the statistics' for a curve in global memory).
    if (threadIdx.x == 0) {
        n_excluded = 0;
        n_accepted = 0;
        n_cand = 0;
        stop = 0;
    }
    if (use_sh) {
        for (int i = threadIdx.x; i < 2 * ch + 1; i += blockDim.x) {
            float v = curve_g(i - ch);
            sc[i] = v;
            if (few) sc_d[i] = (double)v;
        }
        if (few)
            for (int i = threadIdx.x; i < PEAK_TAPS; i += blockDim.x)
                taps_d[i / (2 * PEAK_HALF) * PEAK_TAP_STRIDE + i % (2 * PEAK_HALF)] =
                    (double)taps[i];
        __syncthreads();
    }
    if (want_curves) {
        float* out = curves + row * (2 * curve_half + 1);
        for (int i = threadIdx.x; i < 2 * ch + 1; i += blockDim.x) out[i] = CURVE(i - ch);
    }
    PeakOut* po = peaks + row * k_peaks;
    // (A one-frame call's peaks in device memory too, for a live filter step: pf_step_live.)
    PeakOut* pd = peaks_dev ? peaks_dev + row * k_peaks : nullptr;
    int bound = min((int)floorf(ml), ch);
    if (bound < 0) {
        no_peaks(po, pd, k_peaks, ticket, n_blocks, flag);
        return;
    }
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    // Statistics over the physical lags, and (from a curve in shared memory) the local maxima
    // (an end of the bound counts if it rises towards the end), listed once, in one pass.
    float s = 0.0f, s2 = 0.0f;
    for (int l = -bound + (int)threadIdx.x; l <= bound; l += blockDim.x) {
        float v = CURVE(l);
        s += v;
        s2 += v * v;
        if (!use_sh) continue;
        float left = l > -bound ? CURVE(l - 1) : GCC_NEG_INF;
        float right = l < bound ? CURVE(l + 1) : GCC_NEG_INF;
        if (v >= left && v > right && isfinite(v)) {
            int at = atomicAdd(&n_cand, 1);
            if (at < cand_cap) cand[at] = (short)l;
        }
    }
    // Both sums in every thread (its barrier also publishes the list of maxima).
    block_sum2_all(s, s2, scratch2);
    const float cnt = (float)(2 * bound + 1);
    const float mean_v = s / cnt;
    const float var = s2 / cnt - mean_v * mean_v;
    const float std_v = sqrtf(fmaxf(var, 0.0f));
    if (!(var > 1e-18f)) {
        no_peaks(po, pd, k_peaks, ticket, n_blocks, flag);
        return;
    }
    if (use_sh && n_cand <= cand_cap) {
        // find_peaks examines the candidates best first (ties: the smaller lag), at most `cap`
        // of them, until it has k: a candidate within min_sep of an accepted peak is passed
        // over, each accepted one is refined on the 17-point grid (a warp: lane g evaluates
        // grid point g) and a parabola.
        int nc = n_cand;
        if (!few || (int)blockDim.x < nc) {
            // A warp per pair (a batch), or more candidates than threads, or no shared memory
            // for the search below: one warp takes them one at a time, each the best of those
            // left, and stops as soon as it has k.
            if (warp != 0) goto done;
            int n_acc = 0;
            for (int examined = 0; examined < cap && n_acc < (int)k_peaks; ++examined) {
                float bv = GCC_NEG_INF;
                int bl = 0x7fffffff, bi = -1;
                for (int q = lane; q < nc; q += 32) {
                    int l = cand[q];
                    if (l == CAND_GONE) continue;
                    float v = sc[l + ch];
                    if (v > bv || (v == bv && l < bl)) {
                        bv = v;
                        bl = l;
                        bi = q;
                    }
                }
                for (int o = 16; o > 0; o >>= 1) {
                    float ov = __shfl_xor_sync(0xffffffffu, bv, o);
                    int ol = __shfl_xor_sync(0xffffffffu, bl, o);
                    int oi = __shfl_xor_sync(0xffffffffu, bi, o);
                    if (ov > bv || (ov == bv && ol < bl)) {
                        bv = ov;
                        bl = ol;
                        bi = oi;
                    }
                }
                if (!(bv > GCC_NEG_INF)) break;
                // Every lane has read the list for this round before lane 0 changes it.
                __syncwarp();
                if (lane == 0) cand[bi] = (short)CAND_GONE;
                bool near = lane < n_acc && fabsf(accepted[lane].lag - (float)bl) < min_sep;
                if (__any_sync(0xffffffffu, near)) {
                    __syncwarp();
                    continue;
                }
                refine_warp(sc, ch, bl, taps, grid, ml, mean_v, std_v, lane, &accepted[n_acc]);
                ++n_acc;
                __syncwarp();
            }
            if (lane == 0) n_accepted = n_acc;
            goto done;
        }
        // A frame's few pairs, a block each, with the shared memory for it (`few`): every
        // candidate's place in the order is counted by a thread of its own, the first few are
        // all refined at once (a thread per candidate and grid point), and then one warp
        // accepts or passes over them in order, from registers. Refining as they were accepted
        // (and the ranking loop reading a lag and then its value) left the kernel
        // latency-bound: 16.8 us for a 4-channel frame of 4096 samples (ncu, H100).
        int m = min(nc, cap);
        if ((int)threadIdx.x < nc) {
            int l = cand[threadIdx.x];
            kv[threadIdx.x] = make_int2(__float_as_int(sc[l + ch]), l);
        }
        __syncthreads();
        if ((int)threadIdx.x < nc) {
            int2 me = kv[threadIdx.x];
            float v = __int_as_float(me.x);
            int rank = 0;
#pragma unroll 8
            for (int q = 0; q < nc; ++q) {
                int2 o = kv[q];
                float vq = __int_as_float(o.x);
                rank += (vq > v || (vq == v && o.y < me.y)) ? 1 : 0;
            }
            if (rank < m) order[rank] = me.y;
        }
        __syncthreads();
        // The first `ahead` in one round of a thread each (almost always all the accepted ones;
        // warp 0 refines any later one it accepts).
        const int ahead = min(m, min((int)blockDim.x / (PEAK_GRID + 1), PEAK_AHEAD));
        for (int task = threadIdx.x; task < ahead * (PEAK_GRID + 1); task += blockDim.x) {
            int r = task / (PEAK_GRID + 1), g = task - r * (PEAK_GRID + 1);
            gridv[task] =
                grid_value<double, PEAK_TAP_STRIDE>(sc_d, ch, order[r], g, taps_d);
        }
        __syncthreads();
        if ((int)threadIdx.x < ahead)
            refined[threadIdx.x] = refined_peak(gridv + threadIdx.x * (PEAK_GRID + 1),
                                                order[threadIdx.x], ml, mean_v, std_v);
        __syncthreads();
        // Warp 0 alone from here: the others are done.
        if (warp != 0) return;
        // Lane j holds accepted peak j's lag and where it is in `refined` (k <= MAX_PEAKS <= 32).
        int n_acc = 0, acc_at = 0;
        float acc_lag = 0.0f;
#pragma unroll 4
        for (int r = 0; r < m && n_acc < (int)k_peaks; ++r) {
            float bl = (float)order[r];
            bool near = lane < n_acc && fabsf(acc_lag - bl) < min_sep;
            if (__any_sync(0xffffffffu, near)) continue;
            if (r >= ahead) {
                refine_warp<double, PEAK_TAP_STRIDE>(sc_d, ch, order[r], taps_d, grid, ml,
                                                     mean_v, std_v, lane, &refined[r]);
                __syncwarp();
            }
            if (lane == n_acc) {
                acc_lag = refined[r].lag;
                acc_at = r;
            }
            ++n_acc;
        }
        // Best first by refined value (ties keep the order of acceptance, as the other paths'
        // insertion sort at `done` does): lane j < n_acc writes its peak at its rank, lanes
        // n_acc..k the empty ones; then lane 0 signals.
        PeakOut mine = lane < n_acc ? refined[acc_at] : PeakOut{0.0f, GCC_NEG_INF, 0.0f};
        int rank = lane;
        if (lane < n_acc) {
            rank = 0;
            for (int j = 0; j < n_acc; ++j) {
                float vj = __shfl_sync(0xffffffffu >> (32 - n_acc), mine.value, j);
                rank += (vj > mine.value || (vj == mine.value && j < lane)) ? 1 : 0;
            }
        }
        if (lane < (int)k_peaks) {
            po[rank] = mine;
            if (pd) pd[rank] = mine;
        }
        __syncwarp();
        peaks_signal(ticket, n_blocks, flag);
        return;
    }
    // Fallback for curves too long for shared memory: the block finds the best remaining local
    // maximum by a scan of the curve, one candidate at a time.
    for (int iter = 0; iter < cap; ++iter) {
        // The best local maximum not yet excluded (ties: the smaller lag).
        float bv = GCC_NEG_INF;
        int bl = 0x7fffffff;
        for (int l = -bound + (int)threadIdx.x; l <= bound; l += blockDim.x) {
            float v = CURVE(l);
            float left = l > -bound ? CURVE(l - 1) : GCC_NEG_INF;
            float right = l < bound ? CURVE(l + 1) : GCC_NEG_INF;
            if (!(v >= left && v > right && isfinite(v))) continue;
            bool ex = false;
            for (int e = 0; e < n_excluded; ++e) ex |= excluded[e] == l;
            if (ex) continue;
            if (v > bv || (v == bv && l < bl)) {
                bv = v;
                bl = l;
            }
        }
        for (int o = 16; o > 0; o >>= 1) {
            float ov = __shfl_down_sync(0xffffffffu, bv, o);
            int ol = __shfl_down_sync(0xffffffffu, bl, o);
            if (ov > bv || (ov == bv && ol < bl)) {
                bv = ov;
                bl = ol;
            }
        }
        if (lane == 0) {
            best_v[warp] = bv;
            best_l[warp] = bl;
        }
        __syncthreads();
        if (threadIdx.x == 0) {
            float v = GCC_NEG_INF;
            int l = 0x7fffffff;
            for (int w = 0; w < (int)(blockDim.x >> 5); ++w) {
                if (best_v[w] > v || (best_v[w] == v && best_l[w] < l)) {
                    v = best_v[w];
                    l = best_l[w];
                }
            }
            cand_v = v;
            cand_lag = l;
            stop = !(v > GCC_NEG_INF) || n_accepted >= (int)k_peaks || n_excluded >= cap;
            if (!stop) {
                excluded[n_excluded++] = l;
                for (int a = 0; a < n_accepted; ++a) {
                    if (fabsf(accepted[a].lag - (float)l) < min_sep) cand_v = GCC_NEG_INF;
                }
            }
        }
        __syncthreads();
        if (stop) break;
        if (!(cand_v > GCC_NEG_INF)) continue;
        // Refinement: grid point g at offset (g - 8) / 16; eight threads per grid point, four
        // taps each, summed over the eight by shuffles (in rounds of blockDim / 8 grid points,
        // the same number of rounds for every thread).
        for (int g0 = 0; g0 <= PEAK_GRID; g0 += (int)(blockDim.x / 8)) {
            int g = g0 + (int)threadIdx.x / 8, part = threadIdx.x % 8;
            double acc = 0.0;
            if (g <= PEAK_GRID) {
                int first;
                const float* tw =
                    grid_taps<float, 2 * PEAK_HALF>(cand_lag, ch, g, taps, &first);
                for (int k = part * 4; k < part * 4 + 4; ++k) {
                    int j = first + k;
                    if (j >= 0 && j < 2 * ch + 1) acc += (double)CURVE(j - ch) * (double)tw[k];
                }
            }
            for (int o = 4; o > 0; o >>= 1) acc += __shfl_down_sync(0xffffffffu, acc, o, 8);
            if (g <= PEAK_GRID && part == 0) grid[g] = acc;
        }
        __syncthreads();
        if (threadIdx.x == 0)
            accepted[n_accepted++] = refined_peak(grid, cand_lag, ml, mean_v, std_v);
        __syncthreads();
    }
done:
    __syncthreads();
    if (threadIdx.x == 0) {
        // Best first by refined value.
        for (int a = 1; a < n_accepted; ++a) {
            PeakOut x = accepted[a];
            int b = a - 1;
            while (b >= 0 && accepted[b].value < x.value) {
                accepted[b + 1] = accepted[b];
                --b;
            }
            accepted[b + 1] = x;
        }
        for (int j = 0; j < (int)k_peaks; ++j) {
            const PeakOut x = j < n_accepted ? accepted[j] : PeakOut{0.0f, GCC_NEG_INF, 0.0f};
            po[j] = x;
            if (pd) pd[j] = x;
        }
    }
    peaks_signal(ticket, n_blocks, flag);
#undef CURVE
}
