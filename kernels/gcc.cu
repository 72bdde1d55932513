// GCC-PHAT kernels: the CUDA twin of src/dsp/gcc.rs. Frames are windowed into the FFT input,
// cuFFT transforms all channels of all frames in one batched R2C, gcc_cross weights every
// pair's cross-spectrum (one block per frame and pair), one batched C2R gives the curves, and
// gcc_peaks finds and refines each pair's peaks. Only the peaks (and curves when asked for)
// leave the device.

#define GCC_NEG_INF __int_as_float(0xff800000)
#define PEAK_HALF 16     // PEAK_INTERP_HALF_WIDTH
#define PEAK_GRID 16     // PEAK_GRID: offsets -0.5..=0.5 in steps of 1/16
#define MAX_PEAKS 16
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
extern "C" __global__ void gcc_window(const float* in, const float* window, float* out,
                                      u32 frame_len, u32 fft_len) {
    u32 row = blockIdx.y;
    u32 i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= fft_len) return;
    out[(size_t)row * fft_len + i] = i < frame_len ? in[(size_t)row * frame_len + i] * window[i] : 0.0f;
}

__device__ __forceinline__ float mag(float2 x, float beta) {
    float a = sqrtf(x.x * x.x + x.y * x.y);
    return beta == 1.0f ? a : powf(a, beta);
}

// The PHAT regularisation of pair (xa, xb): `regularisation` times the mean product of the
// magnitudes over the band (the smallest normal float without PHAT). Every thread of the block
// calls it; the result is valid in all of them.
__device__ __forceinline__ float cross_reg(const float2* xa, const float2* xb, u32 lo, u32 hi,
                                           u32 phat, float beta, float regularisation,
                                           float* scratch, float* shared_reg) {
    if (!phat) return 1.17549435e-38f;
    float sum = 0.0f;
    for (u32 k = lo + threadIdx.x; k <= hi; k += blockDim.x) sum += mag(xa[k], beta) * mag(xb[k], beta);
    sum = block_sum(sum, scratch);
    if (threadIdx.x == 0) *shared_reg = regularisation * (sum / (float)(hi - lo + 1)) + 1.17549435e-38f;
    __syncthreads();
    return *shared_reg;
}

// The weighted cross-spectrum of pair (xa, xb) into out[0..nb) (as weight_pair); returns this
// thread's part of the norm (the sum of the magnitudes over the full spectrum).
__device__ __forceinline__ float cross_bins(const float2* xa, const float2* xb, const float* taper,
                                           u32 nb, u32 lo, u32 hi, u32 phat, float beta,
                                           float reg, float2* out) {
    float norm = 0.0f;
    u32 n_half = nb - 1;
    for (u32 k = threadIdx.x; k < nb; k += blockDim.x) {
        float2 gw = make_float2(0.0f, 0.0f);
        if (k >= lo && k <= hi) {
            float2 x = xa[k], y = xb[k];
            float2 g = make_float2(x.x * y.x + x.y * y.y, x.y * y.x - x.x * y.y);
            float t = taper[k];
            float w = phat ? t / (mag(x, beta) * mag(y, beta) + reg) : t;
            gw = make_float2(g.x * w, g.y * w);
            float mult = (k == 0 || k == n_half) ? 1.0f : 2.0f;
            norm += mult * sqrtf(gw.x * gw.x + gw.y * gw.y);
        }
        // The inverse transform wants purely real end bins (after the norm, as on the CPU).
        if (k == 0 || k == n_half) gw.y = 0.0f;
        out[k] = gw;
    }
    return norm;
}

// One pair of one frame: weighted cross-spectrum and its normalisation (as weight_pair). A
// block per pair and frame; GCC_CROSS_BLOCK threads, so that each walks few bins (with 256 a
// single frame's few pairs left the kernel latency-bound).
#define GCC_CROSS_BLOCK 1024
extern "C" __global__ void __launch_bounds__(GCC_CROSS_BLOCK)
gcc_cross(const float2* spectra, const u32* pairs, const float* taper, u32 channels, u32 n_pairs,
          u32 nb, u32 lo, u32 hi, u32 phat, float beta, float regularisation, float2* cross,
          float* norms) {
    __shared__ float scratch[32];
    __shared__ float shared_reg;
    u32 p = blockIdx.x, f = blockIdx.y;
    u32 a = pairs[2 * p], b = pairs[2 * p + 1];
    const float2* xa = spectra + ((size_t)f * channels + a) * nb;
    const float2* xb = spectra + ((size_t)f * channels + b) * nb;
    float reg = cross_reg(xa, xb, lo, hi, phat, beta, regularisation, scratch, &shared_reg);
    float norm = cross_bins(xa, xb, taper, nb, lo, hi, phat, beta, reg,
                           cross + ((size_t)f * n_pairs + p) * nb);
    norm = block_sum(norm, scratch);
    if (threadIdx.x == 0) norms[(size_t)f * n_pairs + p] = norm;
}

struct PeakOut {
    float lag;
    float value;
    float quality;
};

// Grid point g (offset (g - 8) / 16) around integer lag `lag` of a curve stored for lags
// -ch..=ch: the interpolation taps to use and the curve index of the first (refine_peak's
// eval on the CPU).
__device__ __forceinline__ const float* grid_taps(int lag, int ch, int g, const float* taps,
                                                  int* first) {
    double t = (double)(lag + ch) + (double)(g - PEAK_GRID / 2) / (double)PEAK_GRID;
    double i0 = floor(t);
    double frac = t - i0;
    int phase = min((int)llround(frac * (double)PEAK_GRID), PEAK_GRID);
    *first = (int)i0 - PEAK_HALF + 1;
    return taps + phase * 2 * PEAK_HALF;
}

// The interpolant at grid point g around integer lag `lag` of a curve `sc` in shared memory
// (lags -ch..=ch), in f64 as refine_peak's eval.
__device__ __forceinline__ double grid_value(const float* sc, int ch, int lag, int g,
                                             const float* taps) {
    int first;
    const float* tw = grid_taps(lag, ch, g, taps, &first);
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
__device__ __forceinline__ void refine_warp(const float* sc, int ch, int lag, const float* taps,
                                            double* g, float ml, float mean, float std, int lane,
                                            PeakOut* dst) {
    if (lane <= PEAK_GRID) g[lane] = grid_value(sc, ch, lag, lane, taps);
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
// null on other calls) tells the host when every block's are there: thread 0, which writes
// the block's peaks, fences them system-wide, and the last block to finish (`ticket`, which it
// resets for the next launch) raises the flag. Every thread of the block calls it, once, after
// thread 0 has written the peaks.
__device__ __forceinline__ void peaks_signal(u32* ticket, u32 n_blocks, u32* flag) {
    // Thread 0 wrote the block's peaks: it alone fences (a system-wide fence by every thread
    // cost the kernel a few microseconds).
    if (!flag || threadIdx.x != 0) return;
    __threadfence_system();
    u32 t = atomicAdd(ticket, 1u);
    if (t == n_blocks - 1) {
        *ticket = 0;
        __threadfence_system();
        *(volatile u32*)flag = 1u;
    }
}

// A pair without peaks (no physical lags, or a flat curve): thread 0 writes k empty peaks, and
// the block signals as any other. Every thread of the block calls it.
__device__ __forceinline__ void no_peaks(PeakOut* po, u32 k_peaks, u32* ticket, u32 n_blocks,
                                         u32* flag) {
    if (threadIdx.x == 0)
        for (u32 j = 0; j < k_peaks; ++j) po[j] = PeakOut{0.0f, GCC_NEG_INF, 0.0f};
    peaks_signal(ticket, n_blocks, flag);
}

// The peaks of one pair's curve `c` (fft_len values of the circular correlation, in global or
// shared memory; its norm `nrm`): pair p of the call, results in row `row`. Every thread of
// the block calls it (gcc_peaks, gcc_one_pairs).
__device__ __forceinline__ void peaks_body(const float* c, float nrm, u32 p, size_t row,
                                           const float* max_lag, const float* taps, u32 fft_len,
                                           u32 curve_half, u32 k_peaks, float min_sep,
                                           u32 want_curves, float* curves, PeakOut* peaks,
                                           u32* ticket, u32 n_blocks, u32* flag) {
    __shared__ float scratch[32];
    __shared__ float best_v[32];
    __shared__ int best_l[32];
    __shared__ int excluded[MAX_CANDIDATES]; // at most cap <= MAX_CANDIDATES are examined
    __shared__ int n_excluded;
    __shared__ PeakOut accepted[MAX_PEAKS];
    __shared__ int n_accepted;
    __shared__ double grid[PEAK_GRID + 1];
    __shared__ double grid_w[PEAK_THREADS_MAX / 32][PEAK_GRID + 1];
    __shared__ int order[MAX_CANDIDATES];
    __shared__ PeakOut refined[2 * PEAK_THREADS_MAX / 32];
    __shared__ int cand_lag;
    __shared__ float cand_v;
    __shared__ int stop;
    extern __shared__ float dyn_shared[];
    __shared__ int n_cand;
    float inv = (nrm > 0.0f && isfinite(nrm)) ? 1.0f / nrm : 0.0f;
    int ch = (int)curve_half;
    int n = (int)fft_len;
    // Curve value at a lag (negative lags wrap to the end of the circular correlation).
#define CURVE_G(l) ((nrm > 0.0f && isfinite(nrm)) ? c[(((l) % n) + n) % n] * inv : 0.0f)
    bool use_sh = 2 * ch + 1 <= PEAK_SHARED;
    float* sc = dyn_shared;
    short* cand = (short*)(dyn_shared + ((2 * ch + 1 + 3) & ~3));
    const int cand_cap = ch + 2;
#define CURVE(l) (use_sh ? sc[(l) + ch] : CURVE_G(l))
    if (use_sh) {
        for (int i = threadIdx.x; i < 2 * ch + 1; i += blockDim.x) sc[i] = CURVE_G(i - ch);
        __syncthreads();
    }
    if (want_curves) {
        float* out = curves + row * (2 * curve_half + 1);
        for (int i = threadIdx.x; i < 2 * ch + 1; i += blockDim.x) out[i] = CURVE(i - ch);
    }
    PeakOut* po = peaks + row * k_peaks;
    float ml = max_lag[p];
    int bound = min((int)floorf(ml), ch);
    if (threadIdx.x == 0) {
        n_excluded = 0;
        n_accepted = 0;
        n_cand = 0;
        stop = 0;
    }
    if (bound < 0) {
        no_peaks(po, k_peaks, ticket, n_blocks, flag);
        return;
    }
    float s = 0.0f, s2 = 0.0f;
    for (int l = -bound + (int)threadIdx.x; l <= bound; l += blockDim.x) {
        float v = CURVE(l);
        s += v;
        s2 += v * v;
    }
    s = block_sum(s, scratch);
    s2 = block_sum(s2, scratch);
    __shared__ float mean_sh, std_sh;
    __shared__ int flat;
    if (threadIdx.x == 0) {
        float cnt = (float)(2 * bound + 1);
        float mean = s / cnt;
        float var = s2 / cnt - mean * mean;
        flat = !(var > 1e-18f);
        mean_sh = mean;
        std_sh = sqrtf(fmaxf(var, 0.0f));
    }
    __syncthreads();
    if (flat) {
        no_peaks(po, k_peaks, ticket, n_blocks, flag);
        return;
    }
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int cap = min(4 * (int)k_peaks + 8, MAX_CANDIDATES);
    // The local maxima (an end of the bound counts if it rises towards the end), listed once.
    for (int l = -bound + (int)threadIdx.x; l <= bound && use_sh; l += blockDim.x) {
        float v = CURVE(l);
        float left = l > -bound ? CURVE(l - 1) : GCC_NEG_INF;
        float right = l < bound ? CURVE(l + 1) : GCC_NEG_INF;
        if (v >= left && v > right && isfinite(v)) {
            int at = atomicAdd(&n_cand, 1);
            if (at < cand_cap) cand[at] = (short)l;
        }
    }
    __syncthreads();
    if (use_sh && n_cand <= cand_cap) {
        // find_peaks examines the candidates best first (ties: the smaller lag), at most `cap`
        // of them, until it has k: a candidate within min_sep of an accepted peak is passed
        // over, each accepted one is refined on the 17-point grid (a warp: lane g evaluates
        // grid point g) and a parabola.
        int nc = n_cand;
        if ((int)blockDim.x < nc) {
            // More candidates than threads (a warp per pair in a batch): one warp takes them
            // one at a time, each the best of those left, and stops as soon as it has k.
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
                refine_warp(sc, ch, bl, taps, grid, ml, mean_sh, std_sh, lane, &accepted[n_acc]);
                ++n_acc;
                __syncwarp();
            }
            if (lane == 0) n_accepted = n_acc;
            goto done;
        }
        // A thread per candidate (a frame's few pairs, a block each): each candidate's place in
        // the order is the number of candidates before it; every warp refines some of the first
        // few at once (one warp refining peaks one after the other was most of the kernel's
        // time); then one warp accepts or passes over them in order, refining any others it
        // accepts itself.
        int m = min(nc, cap);
        if ((int)threadIdx.x < nc) {
            int l = cand[threadIdx.x];
            float v = sc[l + ch];
            int rank = 0;
#pragma unroll 4
            for (int q = 0; q < nc; ++q) {
                int lq = cand[q];
                float vq = sc[lq + ch];
                rank += (vq > v || (vq == v && lq < l)) ? 1 : 0;
            }
            if (rank < m) order[rank] = l;
        }
        __syncthreads();
        // (At most PEAK_THREADS_MAX / 32 warps refine: gcc_one_pairs has more.)
        int n_warps = min((int)(blockDim.x >> 5), PEAK_THREADS_MAX / 32);
        int ahead = n_warps > 1 ? min(m, 2 * n_warps) : 0;
        for (int r = warp; r < ahead && warp < n_warps; r += n_warps) {
            refine_warp(sc, ch, order[r], taps, grid_w[warp], ml, mean_sh, std_sh, lane,
                        &refined[r]);
            __syncwarp();
        }
        __syncthreads();
        if (warp != 0) goto done;
        int n_acc = 0;
        for (int r = 0; r < m && n_acc < (int)k_peaks; ++r) {
            int bl = order[r];
            bool near = lane < n_acc && fabsf(accepted[lane].lag - (float)bl) < min_sep;
            if (__any_sync(0xffffffffu, near)) continue;
            if (r < ahead) {
                if (lane == 0) accepted[n_acc] = refined[r];
            } else {
                refine_warp(sc, ch, bl, taps, grid_w[0], ml, mean_sh, std_sh, lane,
                            &accepted[n_acc]);
            }
            ++n_acc;
            __syncwarp();
        }
        if (lane == 0) n_accepted = n_acc;
        goto done;
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
                const float* tw = grid_taps(cand_lag, ch, g, taps, &first);
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
            accepted[n_accepted++] = refined_peak(grid, cand_lag, ml, mean_sh, std_sh);
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
        for (int j = 0; j < (int)k_peaks; ++j) po[j] = j < n_accepted ? accepted[j] : PeakOut{0.0f, GCC_NEG_INF, 0.0f};
    }
    peaks_signal(ticket, n_blocks, flag);
#undef CURVE
#undef CURVE_G
}

extern "C" __global__ void __launch_bounds__(PEAK_THREADS_MAX)
gcc_peaks(const float* corr, const float* norms, const float* max_lag, const float* taps,
          u32 n_pairs, u32 fft_len, u32 curve_half, u32 k_peaks, float min_sep, u32 want_curves,
          float* curves, PeakOut* peaks, u32* ticket, u32 n_blocks, u32* flag) {
    u32 p = blockIdx.x, f = blockIdx.y;
    size_t row = (size_t)f * n_pairs + p;
    peaks_body(corr + row * fft_len, norms[row], p, row, max_lag, taps, fft_len, curve_half,
               k_peaks, min_sep, want_curves, curves, peaks, ticket, n_blocks, flag);
}

// ---------------------------------------------------------------------------------------------
// One frame in two kernels (the live path): gcc_one_spectra transforms each channel in a block
// of its own (window, zero padding, a real FFT in shared memory), gcc_one_pairs each pair
// (cross-spectrum, inverse real FFT in shared memory, peaks). In place of the five kernels of a
// batch (window, cuFFT R2C, gcc_cross, cuFFT C2R, gcc_peaks), each of which runs a few
// latency-bound microseconds on one small frame. For FFT lengths 4..=2 ONE_FFT_MAX (powers of
// two); the host takes the batch's kernels for others.

// Float4 loads per thread that cover a frame of the largest transform.
#define ONE_LOADS (2 * ONE_FFT_MAX / 4 / ONE_THREADS)
// Complex points of the largest transform (the real FFT of 2 ONE_FFT_MAX samples); one radix-16
// butterfly per thread of ONE_THREADS in each pass.
#define ONE_FFT_MAX 4096
#define ONE_FFT_BUF (ONE_FFT_MAX + ONE_FFT_MAX / 16)
// The twiddle table `tw` both kernels take: e^(-2 pi i k / ONE_TWIDDLES), k < ONE_TWIDDLES
// (made on the host in f64: src/gpu/cuda/gcc.rs).
#define ONE_TWIDDLES (2 * ONE_FFT_MAX)
#define ONE_THREADS 256
// gcc_one_pairs's threads: more than the transform needs, for the cross-spectrum's bins.
#define ONE_PAIR_THREADS 512

__device__ __forceinline__ float2 cmul(float2 a, float2 b) {
    return make_float2(a.x * b.x - a.y * b.y, a.x * b.y + a.y * b.x);
}
__device__ __forceinline__ float2 cadd(float2 a, float2 b) { return make_float2(a.x + b.x, a.y + b.y); }
__device__ __forceinline__ float2 csub(float2 a, float2 b) { return make_float2(a.x - b.x, a.y - b.y); }
__device__ __forceinline__ float2 conjf2(float2 a) { return make_float2(a.x, -a.y); }

// cos(2 pi m / 16) (a constant once m is: inlined, without recursion).
__device__ __forceinline__ float cos16(int m) {
    m &= 15;
    int a = m <= 8 ? m : 16 - m;   // cos(2 pi (16 - m) / 16) = cos(2 pi m / 16)
    int b = a > 4 ? 8 - a : a;     // cos(pi - x) = -cos(x)
    float v = b == 0 ? 1.0f
            : b == 1 ? 0.923879532511286756f
            : b == 2 ? 0.707106781186547524f
            : b == 3 ? 0.382683432365089772f
                     : 0.0f;
    return a > 4 ? -v : v;
}

// i (bits <= 4 bits) with its bits reversed (a constant once i is).
__device__ __forceinline__ int bit_reverse(int i, int bits) {
    int r4 = ((i & 1) << 3) | ((i & 2) << 1) | ((i & 4) >> 1) | ((i & 8) >> 3);
    return r4 >> (4 - bits);
}

__device__ constexpr int log2_const(int r) { return r <= 1 ? 0 : 1 + log2_const(r / 2); }

// The radix-2 steps of dft_regs that combine transforms of LEN / 2 points into LEN, and the
// ones after (LEN a template parameter, so that every loop unrolls and the values stay in
// registers).
template <int R, int LEN>
__device__ __forceinline__ void dft_stage(float (&re)[R], float (&im)[R], bool inv) {
    if constexpr (LEN <= R) {
#pragma unroll
        for (int i = 0; i < R; i += LEN) {
#pragma unroll
            for (int k = 0; k < LEN / 2; ++k) {
                constexpr int step = 16 / LEN;
                int m = k * step;
                float wr = cos16(m), ws = cos16((m + 12) & 15); // sin(2 pi m / 16)
                float wi = inv ? ws : -ws;
                int a = i + k, b = i + k + LEN / 2;
                float br = re[b] * wr - im[b] * wi, bi = re[b] * wi + im[b] * wr;
                re[b] = re[a] - br;
                im[b] = im[a] - bi;
                re[a] = re[a] + br;
                im[a] = im[a] + bi;
            }
        }
        dft_stage<R, 2 * LEN>(re, im, inv);
    }
}

// The R-point DFT (R a power of two up to 16) of (re, im) in registers, forward (e^-) or
// inverse (e^+), by radix-2 steps on the bit-reversed values. (Separate real and imaginary
// arrays: as float2, NVVM kept the values in local memory.)
template <int R>
__device__ __forceinline__ void dft_regs(float (&re)[R], float (&im)[R], bool inv) {
    constexpr int bits = log2_const(R);
#pragma unroll
    for (int i = 0; i < R; ++i) {
        int j = bit_reverse(i, bits);
        if (i < j) {
            float t = re[i];
            re[i] = re[j];
            re[j] = t;
            t = im[i];
            im[i] = im[j];
            im[j] = t;
        }
    }
    dft_stage<R, 2>(re, im, inv);
}

// Index i of a transform in shared memory with a pad after every 16 points, so that the
// strided writes of a pass spread over the banks.
__device__ __forceinline__ int pad16(int i) { return i + (i >> 4); }

// One radix-R pass of a Stockham FFT of m points in shared memory `buf` (the pass after
// those that made sub-transforms of ns points): thread j reads points j + r m / R, twists
// them, transforms them and writes them to their places in the transforms of ns R points.
// The first pass reads and the last writes the points in order, the others padded (pad16).
// m / R <= blockDim.x; every thread of the block calls it.
template <int R>
__device__ __forceinline__ void fft_pass(float2* buf, const float2* tw, int m, int ns, bool inv) {
    int items = m / R, j = threadIdx.x;
    bool act = j < items, pad_in = ns > 1, pad_out = ns * R < m;
    float re[R], im[R];
    // Threads past the pass's butterflies compute one too (on the first's values) and store
    // nothing: arrays defined on one path only were kept in local memory.
    int jj = act ? j : 0;
#pragma unroll
    for (int r = 0; r < R; ++r) {
        int i = jj + r * items;
        float2 x = buf[pad_in ? pad16(i) : i];
        re[r] = x.x;
        im[r] = x.y;
    }
    __syncthreads();
    {
        int j = jj;
        int jm = j & (ns - 1);
        if (ns > 1) {
            // w^r for w = e^(-+2 pi i jm / (ns R)), from the table.
            int stride = jm * (ONE_TWIDDLES / (ns * R));
            float2 w[R];
#pragma unroll
            for (int r = 1; r < R; ++r) w[r] = __ldg(&tw[r * stride]);
#pragma unroll
            for (int r = 1; r < R; ++r) {
                float wi = inv ? -w[r].y : w[r].y;
                float x = re[r] * w[r].x - im[r] * wi;
                im[r] = re[r] * wi + im[r] * w[r].x;
                re[r] = x;
            }
        }
        dft_regs<R>(re, im, inv);
        int at = (j - jm) * R + jm;
#pragma unroll
        for (int r = 0; r < R; ++r) {
            int i = at + r * ns;
            if (act) buf[pad_out ? pad16(i) : i] = make_float2(re[r], im[r]);
        }
    }
    __syncthreads();
}

// The passes of an M-point transform from sub-transforms of NS points on (every size known at
// compile time, so that each pass's values stay in registers).
template <int M, int NS>
__device__ __forceinline__ void fft_from(float2* buf, const float2* tw, bool inv) {
    if constexpr (NS < M) {
        constexpr int R = M / NS >= 16 ? 16 : M / NS;
        fft_pass<R>(buf, tw, M, NS, inv);
        fft_from<M, NS * R>(buf, tw, inv);
    }
}

// The m-point DFT (m a power of two, 2..=ONE_FFT_MAX) of buf in place, unnormalised; forward
// (e^-) or inverse (e^+); in and out in order, with room for the padded points in between
// (ONE_FFT_BUF). Every thread of the block calls it; blockDim.x >= m / 16.
__device__ __forceinline__ void fft_shared(float2* buf, const float2* tw, int m, bool inv) {
    switch (m) {
    case 4096: fft_from<4096, 1>(buf, tw, inv); break;
    case 2048: fft_from<2048, 1>(buf, tw, inv); break;
    case 1024: fft_from<1024, 1>(buf, tw, inv); break;
    case 512: fft_from<512, 1>(buf, tw, inv); break;
    case 256: fft_from<256, 1>(buf, tw, inv); break;
    case 128: fft_from<128, 1>(buf, tw, inv); break;
    case 64: fft_from<64, 1>(buf, tw, inv); break;
    case 32: fft_from<32, 1>(buf, tw, inv); break;
    case 16: fft_from<16, 1>(buf, tw, inv); break;
    case 8: fft_from<8, 1>(buf, tw, inv); break;
    case 4: fft_from<4, 1>(buf, tw, inv); break;
    default: fft_from<2, 1>(buf, tw, inv); break;
    }
}

// One channel of one frame per block: window, zero-pad to fft_len, real FFT (the fft_len / 2
// point complex FFT of the even and odd samples, then split), spectra[channel][0..fft_len/2].
extern "C" __global__ void __launch_bounds__(ONE_THREADS)
gcc_one_spectra(const float* in, const float* window, const float2* tw, u32 frame_len,
                u32 fft_len, float2* spectra) {
    __shared__ float2 buf[ONE_FFT_BUF];
    u32 c = blockIdx.x;
    const float* x = in + (size_t)c * frame_len;
    int m = (int)(fft_len / 2);
    if ((frame_len & 3) == 0 && fft_len / 4 <= ONE_LOADS * ONE_THREADS) {
        // Four samples per load, every load of the thread issued before the first is used
        // (the frame may be read over the bus from mapped host memory).
        const float4* x4 = (const float4*)x;
        const float4* w4 = (const float4*)window;
        float4 a[ONE_LOADS], w[ONE_LOADS];
#pragma unroll
        for (int i = 0; i < ONE_LOADS; ++i) {
            u32 q = threadIdx.x + i * ONE_THREADS;
            bool in = 4 * q < frame_len;
            a[i] = in ? x4[q] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            w[i] = in ? w4[q] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        }
#pragma unroll
        for (int i = 0; i < ONE_LOADS; ++i) {
            u32 q = threadIdx.x + i * ONE_THREADS;
            if (4 * q < fft_len) {
                buf[2 * q] = make_float2(a[i].x * w[i].x, a[i].y * w[i].y);
                buf[2 * q + 1] = make_float2(a[i].z * w[i].z, a[i].w * w[i].w);
            }
        }
    } else {
        for (u32 q = threadIdx.x; q < (u32)m; q += blockDim.x) {
            u32 i = 2 * q;
            float a = i < frame_len ? x[i] * window[i] : 0.0f;
            float b = i + 1 < frame_len ? x[i + 1] * window[i + 1] : 0.0f;
            buf[q] = make_float2(a, b);
        }
    }
    __syncthreads();
    fft_shared(buf, tw, m, false);
    // X[k] = (Z[k] + conj Z[m-k]) / 2 - i e^(-i pi k / m) (Z[k] - conj Z[m-k]) / 2.
    float2* out = spectra + (size_t)c * (m + 1);
    for (int k = threadIdx.x; k <= m; k += blockDim.x) {
        float2 zk = buf[k & (m - 1)], zm = conjf2(buf[(m - k) & (m - 1)]);
        float2 e = make_float2(0.5f * (zk.x + zm.x), 0.5f * (zk.y + zm.y));
        float2 d = make_float2(0.5f * (zk.y - zm.y), -0.5f * (zk.x - zm.x)); // -i (zk - zm) / 2
        // e^(-i pi k / m) = tw[k ONE_TWIDDLES / (2 m)].
        out[k] = cadd(e, cmul(d, __ldg(&tw[k * (ONE_TWIDDLES / (2 * m))])));
    }
}

// One pair of one frame per block: the weighted cross-spectrum (as gcc_cross), the inverse
// real FFT into shared memory (the curve, unnormalised as cuFFT's C2R), and the peaks (as
// gcc_peaks, with its dynamic shared memory).
extern "C" __global__ void __launch_bounds__(ONE_PAIR_THREADS)
gcc_one_pairs(const float2* spectra, const float2* tw, const u32* pairs, const float* taper, u32 nb, u32 lo,
              u32 hi, u32 phat, float beta, float regularisation, const float* max_lag,
              const float* taps, u32 fft_len, u32 curve_half, u32 k_peaks, float min_sep,
              u32 want_curves, float* curves, PeakOut* peaks, u32* ticket, u32 n_blocks,
              u32* flag) {
    __shared__ float2 buf[ONE_FFT_BUF];
    __shared__ float scratch[32];
    __shared__ float shared_reg, shared_norm;
    u32 p = blockIdx.x;
    const float2* xa = spectra + (size_t)pairs[2 * p] * nb;
    const float2* xb = spectra + (size_t)pairs[2 * p + 1] * nb;
    float reg = cross_reg(xa, xb, lo, hi, phat, beta, regularisation, scratch, &shared_reg);
    float norm = cross_bins(xa, xb, taper, nb, lo, hi, phat, beta, reg, buf);
    norm = block_sum(norm, scratch);
    if (threadIdx.x == 0) shared_norm = norm;
    __syncthreads();
    // Z[k] = (Y[k] + conj Y[m-k]) + i e^(i pi k / m) (Y[k] - conj Y[m-k]), k < m, in place:
    // thread k makes Z[k] and Z[m-k] from Y[k] and Y[m-k] (Y[m] is read only for Z[0]).
    int m = (int)(fft_len / 2);
    int half = m / 2;
    for (int k = threadIdx.x; k <= half; k += blockDim.x) {
        float2 yk = buf[k], ym = buf[m - k];
        // e^(i pi k / m): the table's conjugate.
        float2 t = __ldg(&tw[k * (ONE_TWIDDLES / (2 * m))]);
        float co = t.x, s = -t.y;
        float2 a = yk, b = conjf2(ym);
        float2 d = cmul(csub(a, b), make_float2(co, s));
        float2 z0 = make_float2(a.x + b.x - d.y, a.y + b.y + d.x);
        // Z[m-k]: e^(i pi (m-k) / m) = -e^(-i pi k / m).
        float2 a1 = ym, b1 = conjf2(yk);
        float2 d1 = cmul(csub(a1, b1), make_float2(-co, s));
        float2 z1 = make_float2(a1.x + b1.x - d1.y, a1.y + b1.y + d1.x);
        buf[k] = z0;
        if (k != 0 && k != half) buf[m - k] = z1;
    }
    __syncthreads();
    fft_shared(buf, tw, m, true);
    peaks_body((const float*)buf, shared_norm, p, p, max_lag, taps, fft_len, curve_half, k_peaks,
               min_sep, want_curves, curves, peaks, ticket, n_blocks, flag);
}
