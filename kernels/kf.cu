// ---------------------------------------------------------------------------------------------
// The batched Kalman filter bank (src/gpu/cuda/kf.rs launches it; src/track/kalman/bank.rs is
// its CPU twin, operation for operation and in the same order, so that with --fmad=false and
// IEEE division and square root the two agree to the last bit or nearly).
//
// M independent filters of one linear model, structure of arrays: element e of filter j at
// e * M + j, so the threads of a warp (one filter each) read consecutive words. The model is one
// float array: F (n×n), Q (n×n), H (m×n), R (m×m), row-major, read by every thread (a broadcast).
// Stages: 1 predict (x = F x, P = F P Fᵀ + Q), 2 update (Joseph form with a Cholesky solve of the
// innovation covariance), 3 both in one pass over the state. P is read from its upper triangle,
// and each stage computes the upper triangle of the new P and mirrors it (the result is
// symmetric by construction, and few values are live at once: without that the 6-state kernel
// needed 255 registers a thread and ran at half the memory bandwidth). A filter whose
// innovation covariance is not positive definite keeps its prediction and is counted.

#define KF_STAGE_PREDICT 1
#define KF_STAGE_UPDATE 2

// x = F x; P = F P Fᵀ + Q, a row at a time (row r of F P, then the upper triangle's row r of
// (F P) Fᵀ + Q, mirrored below), so that only P, the new P and one row are live at once.
template <int N>
__device__ __forceinline__ void kf_predict_local(const float* __restrict__ f,
                                                 const float* __restrict__ q, float (&x)[N],
                                                 float (&p)[N][N]) {
    float xn[N];
#pragma unroll
    for (int r = 0; r < N; ++r) {
        float acc = 0.0f;
#pragma unroll
        for (int c = 0; c < N; ++c) acc += f[r * N + c] * x[c];
        xn[r] = acc;
    }
    float pn[N][N];
#pragma unroll
    for (int r = 0; r < N; ++r) {
        float fp[N];
#pragma unroll
        for (int c = 0; c < N; ++c) {
            float acc = 0.0f;
#pragma unroll
            for (int k = 0; k < N; ++k) acc += f[r * N + k] * p[k][c];
            fp[c] = acc;
        }
#pragma unroll
        for (int c = r; c < N; ++c) {
            float acc = 0.0f;
#pragma unroll
            for (int k = 0; k < N; ++k) acc += fp[k] * f[c * N + k];
            pn[r][c] = acc + q[r * N + c];
            pn[c][r] = pn[r][c];
        }
    }
#pragma unroll
    for (int r = 0; r < N; ++r) {
        x[r] = xn[r];
#pragma unroll
        for (int c = 0; c < N; ++c) p[r][c] = pn[r][c];
    }
}

// Row c of A = I − W H.
template <int N, int M>
__device__ __forceinline__ void kf_a_row(const float (&w)[N][M], const float* __restrict__ h,
                                         int c, float (&a)[N]) {
#pragma unroll
    for (int k = 0; k < N; ++k) {
        float wh = 0.0f;
#pragma unroll
        for (int i = 0; i < M; ++i) wh += w[c][i] * h[i * N + k];
        a[k] = (c == k ? 1.0f : 0.0f) - wh;
    }
}

// The lower Cholesky factor l of the M×M matrix s; false where s is not positive definite.
template <int M>
__device__ __forceinline__ bool kf_cholesky(const float (&s)[M][M], float (&l)[M][M]) {
#pragma unroll
    for (int r = 0; r < M; ++r) {
#pragma unroll
        for (int c = 0; c < M; ++c) {
            if (c > r) {
                l[r][c] = 0.0f;
                continue;
            }
            float sum = 0.0f;
#pragma unroll
            for (int k = 0; k < c; ++k) sum += l[r][k] * l[c][k];
            if (r == c) {
                float d = s[r][r] - sum;
                if (!(d > 0.0f)) return false;
                l[r][c] = sqrtf(d);
            } else {
                l[r][c] = (s[r][c] - sum) / l[c][c];
            }
        }
    }
    return true;
}

// The Joseph-form update with innovation `innov`, P = A P Aᵀ + W R Wᵀ with A = I − W H, its
// upper triangle a row at a time and mirrored below; false (state untouched) where S is not
// positive definite.
// Where `ll` is given, it receives the innovation's log-likelihood ln N(ν; 0, S) from S's
// Cholesky factor, −½(|L⁻¹ν|² + 2 Σ ln Lᵢᵢ + M ln 2π) (the bank's `log_likelihood`).
template <int N, int M>
__device__ __forceinline__ bool kf_update_innov(const float* __restrict__ h,
                                                const float* __restrict__ rm,
                                                const float (&innov)[M], float (&x)[N],
                                                float (&p)[N][N], float* ll = nullptr) {
    // W starts as P Hᵀ and is solved in place, row by row.
    float w[N][M];
#pragma unroll
    for (int r = 0; r < N; ++r) {
#pragma unroll
        for (int c = 0; c < M; ++c) {
            float acc = 0.0f;
#pragma unroll
            for (int k = 0; k < N; ++k) acc += p[r][k] * h[c * N + k];
            w[r][c] = acc;
        }
    }
    float s[M][M];
#pragma unroll
    for (int r = 0; r < M; ++r) {
#pragma unroll
        for (int c = 0; c < M; ++c) {
            float acc = 0.0f;
#pragma unroll
            for (int k = 0; k < N; ++k) acc += h[r * N + k] * w[k][c];
            s[r][c] = acc + rm[r * M + c];
        }
    }
    // Cholesky: S = L Lᵀ.
    float l[M][M];
    if (!kf_cholesky<M>(s, l)) return false;
    if (ll != nullptr) {
        float y[M];
        float quad = 0.0f, log_diag = 0.0f;
#pragma unroll
        for (int r = 0; r < M; ++r) {
            float acc = 0.0f;
#pragma unroll
            for (int k = 0; k < r; ++k) acc += l[r][k] * y[k];
            y[r] = (innov[r] - acc) / l[r][r];
            quad += y[r] * y[r];
            log_diag += fm_ln(l[r][r]);
        }
        *ll = -0.5f * (quad + 2.0f * log_diag + (float)M * 1.8378771f);
    }
    // W = P Hᵀ S⁻¹, row by row.
#pragma unroll
    for (int r = 0; r < N; ++r) {
        float y[M];
#pragma unroll
        for (int i = 0; i < M; ++i) {
            float acc = 0.0f;
#pragma unroll
            for (int k = 0; k < i; ++k) acc += l[i][k] * y[k];
            y[i] = (w[r][i] - acc) / l[i][i];
        }
#pragma unroll
        for (int i = M - 1; i >= 0; --i) {
            float acc = 0.0f;
#pragma unroll
            for (int k = i + 1; k < M; ++k) acc += l[k][i] * y[k];
            y[i] = (y[i] - acc) / l[i][i];
        }
#pragma unroll
        for (int i = 0; i < M; ++i) w[r][i] = y[i];
    }
#pragma unroll
    for (int r = 0; r < N; ++r) {
        float acc = 0.0f;
#pragma unroll
        for (int i = 0; i < M; ++i) acc += w[r][i] * innov[i];
        x[r] += acc;
    }
    float pn[N][N];
#pragma unroll
    for (int r = 0; r < N; ++r) {
        float ar[N];
        kf_a_row<N, M>(w, h, r, ar);
        float ap[N];
#pragma unroll
        for (int c = 0; c < N; ++c) {
            float acc = 0.0f;
#pragma unroll
            for (int k = 0; k < N; ++k) acc += ar[k] * p[k][c];
            ap[c] = acc;
        }
        float wr[M];
#pragma unroll
        for (int c = 0; c < M; ++c) {
            float acc = 0.0f;
#pragma unroll
            for (int k = 0; k < M; ++k) acc += w[r][k] * rm[k * M + c];
            wr[c] = acc;
        }
#pragma unroll
        for (int c = r; c < N; ++c) {
            float ac[N];
            kf_a_row<N, M>(w, h, c, ac);
            float apat = 0.0f;
#pragma unroll
            for (int k = 0; k < N; ++k) apat += ap[k] * ac[k];
            float wrw = 0.0f;
#pragma unroll
            for (int k = 0; k < M; ++k) wrw += wr[k] * w[c][k];
            pn[r][c] = apat + wrw;
            pn[c][r] = pn[r][c];
        }
    }
#pragma unroll
    for (int r = 0; r < N; ++r) {
#pragma unroll
        for (int c = 0; c < N; ++c) p[r][c] = pn[r][c];
    }
    return true;
}

// The linear update with measurement z: the innovation z − H x, then kf_update_innov.
template <int N, int M>
__device__ __forceinline__ bool kf_update_local(const float* __restrict__ h,
                                                const float* __restrict__ rm, const float (&z)[M],
                                                float (&x)[N], float (&p)[N][N],
                                                float* ll = nullptr) {
    float innov[M];
#pragma unroll
    for (int i = 0; i < M; ++i) {
        float acc = 0.0f;
#pragma unroll
        for (int k = 0; k < N; ++k) acc += h[i * N + k] * x[k];
        innov[i] = z[i] - acc;
    }
    return kf_update_innov<N, M>(h, rm, innov, x, p, ll);
}

// One filter's stages: load, predict and/or update, store; true unless its update was singular.
template <int N, int M>
__device__ __forceinline__ bool kf_run(const float* __restrict__ model, size_t filters, size_t j,
                                       int stage, float* __restrict__ xs, float* __restrict__ ps,
                                       const float* __restrict__ zs) {
    float x[N];
    float p[N][N];
#pragma unroll
    for (int e = 0; e < N; ++e) x[e] = xs[e * filters + j];
    // P is read from its upper triangle (the bank keeps it symmetric).
#pragma unroll
    for (int r = 0; r < N; ++r) {
#pragma unroll
        for (int c = r; c < N; ++c) {
            p[r][c] = ps[(r * N + c) * filters + j];
            p[c][r] = p[r][c];
        }
    }
    const float* f = model;
    const float* q = model + N * N;
    const float* h = model + 2 * N * N;
    const float* rm = h + M * N;
    if (stage & KF_STAGE_PREDICT) kf_predict_local<N>(f, q, x, p);
    bool ok = true;
    if (stage & KF_STAGE_UPDATE) {
        float z[M];
#pragma unroll
        for (int i = 0; i < M; ++i) z[i] = zs[i * filters + j];
        // A singular update leaves the (predicted) state as it was.
        ok = kf_update_local<N, M>(h, rm, z, x, p);
    }
#pragma unroll
    for (int e = 0; e < N; ++e) xs[e * filters + j] = x[e];
#pragma unroll
    for (int r = 0; r < N; ++r) {
#pragma unroll
        for (int c = 0; c < N; ++c) ps[(r * N + c) * filters + j] = p[r][c];
    }
    return ok;
}

// One thread per filter, one kernel per (n, m) (each with its own registers); `singular` counts
// the filters whose update found S not positive definite (one atomic per warp). The 6-state
// kernels are held to blocks of at most 128 threads, 5 an SM (at most 102 registers a thread,
// a few bytes spilled, for 25 % more warps to hide the memory latency).
#define KF_KERNEL(N, M, MAX_BLOCK, MIN_BLOCKS)                                                 \
    extern "C" __global__ void __launch_bounds__(MAX_BLOCK, MIN_BLOCKS) kf_bank_##N##_##M(     \
        const float* __restrict__ model, unsigned int filters_u, int stage,                    \
        float* __restrict__ xs, float* __restrict__ ps, const float* __restrict__ zs,          \
        unsigned int* __restrict__ singular) {                                                 \
        size_t filters = filters_u;                                                            \
        size_t j = (size_t)blockIdx.x * blockDim.x + threadIdx.x;                              \
        bool ok = j >= filters || kf_run<N, M>(model, filters, j, stage, xs, ps, zs);          \
        unsigned int bad = __ballot_sync(0xffffffffu, !ok);                                    \
        if (bad != 0 && (threadIdx.x & 31) == 0) atomicAdd(singular, __popc(bad));             \
    }

KF_KERNEL(1, 1, 1024, 1)
KF_KERNEL(2, 1, 1024, 1)
KF_KERNEL(2, 2, 1024, 1)
KF_KERNEL(3, 1, 1024, 1)
KF_KERNEL(3, 2, 1024, 1)
KF_KERNEL(3, 3, 1024, 1)
KF_KERNEL(4, 1, 1024, 1)
KF_KERNEL(4, 2, 1024, 1)
KF_KERNEL(4, 3, 1024, 1)
KF_KERNEL(5, 1, 1024, 1)
KF_KERNEL(5, 2, 1024, 1)
KF_KERNEL(5, 3, 1024, 1)
KF_KERNEL(6, 1, 128, 5)
KF_KERNEL(6, 2, 128, 5)
KF_KERNEL(6, 3, 128, 5)

// The extended filter's TDOA measurement (src/track/kalman/tdoa.rs, `linearise`): pair (a, b)'s
// range difference |p − s_a| − |p − s_b| at the state, and its Jacobian row (position part).
__device__ __forceinline__ float kf_tdoa_row(const float* __restrict__ sa,
                                             const float* __restrict__ sb, const float (&x)[6],
                                             float (&h)[6]) {
    float dxa = x[0] - sa[0], dya = x[1] - sa[1], dza = x[2] - sa[2];
    float dxb = x[0] - sb[0], dyb = x[1] - sb[1], dzb = x[2] - sb[2];
    float ra = fmaxf(sqrtf(dxa * dxa + dya * dya + dza * dza), 1e-6f);
    float rb = fmaxf(sqrtf(dxb * dxb + dyb * dyb + dzb * dzb), 1e-6f);
    h[0] = dxa / ra - dxb / rb;
    h[1] = dya / ra - dyb / rb;
    h[2] = dza / ra - dzb / rb;
    h[3] = 0.0f;
    h[4] = 0.0f;
    h[5] = 0.0f;
    return ra - rb;
}

// |x + sign·step − s| − |x − s| for sensor s, as (2 (x − s)·d + d·d) / (|x + d − s| + |x − s|)
// with d = sign·step (src/track/kalman/unscented.rs, `range_change`): no cancellation where the
// two ranges are nearly equal.
__device__ __forceinline__ float kf_range_change(const float* __restrict__ s, const float (&x)[6],
                                                 const float (&step)[3], float sign) {
    float dot = 0.0f, dd = 0.0f, far = 0.0f, near = 0.0f;
#pragma unroll
    for (int e = 0; e < 3; ++e) {
        float d = sign * step[e];
        float r = x[e] - s[e];
        dot += r * d;
        dd += d * d;
        near += r * r;
        far += (r + d) * (r + d);
    }
    return (2.0f * dot + dd) / fmaxf(sqrtf(far) + sqrtf(near), 1e-6f);
}

// The unscented filter's update with one pair (src/track/kalman/unscented.rs): the range
// differences at the sigma points x ± γ·(column i of chol P) less the centre's, their mean,
// variance S_y and g_i = w_i γ (dy₊ᵢ − dy₋ᵢ); then the Joseph update with h̃ = L⁻ᵀ g and
// R + max(S_y − |g|², 0). w holds γ, the centre's mean and covariance weights and every other
// point's weight.
__device__ __forceinline__ bool kf_ukf_pair(const float* __restrict__ sa,
                                            const float* __restrict__ sb, float r,
                                            const float (&w)[4], float z, float (&x)[6],
                                            float (&p)[6][6]) {
    const float gamma = w[0], w0c = w[2], wi = w[3];
    float c[6][6];
    if (!kf_cholesky<6>(p, c)) return false;
    float scratch[6];
    float y0 = kf_tdoa_row(sa, sb, x, scratch);
    float dyp[6], dym[6];
#pragma unroll
    for (int i = 0; i < 6; ++i) {
        float step[3];
#pragma unroll
        for (int e = 0; e < 3; ++e) step[e] = gamma * c[e][i];
        dyp[i] = kf_range_change(sa, x, step, 1.0f) - kf_range_change(sb, x, step, 1.0f);
        dym[i] = kf_range_change(sa, x, step, -1.0f) - kf_range_change(sb, x, step, -1.0f);
    }
    float shift = 0.0f;
#pragma unroll
    for (int i = 0; i < 6; ++i) {
        shift += wi * dyp[i];
        shift += wi * dym[i];
    }
    float mean = y0 + shift;
    float s_y = w0c * (shift * shift);
    float g[6];
#pragma unroll
    for (int i = 0; i < 6; ++i) {
        float dp = dyp[i] - shift, dm = dym[i] - shift;
        s_y += wi * (dp * dp);
        s_y += wi * (dm * dm);
        g[i] = wi * gamma * (dyp[i] - dym[i]);
    }
    float h[6];
#pragma unroll
    for (int rr = 5; rr >= 0; --rr) {
        float acc = 0.0f;
#pragma unroll
        for (int k = rr + 1; k < 6; ++k) acc += c[k][rr] * h[k];
        h[rr] = (g[rr] - acc) / c[rr][rr];
    }
    float linear = 0.0f;
#pragma unroll
    for (int i = 0; i < 6; ++i) linear += g[i] * g[i];
    const float rm[1] = {r + fmaxf(s_y - linear, 0.0f)};
    float innov[1] = {z - mean};
    return kf_update_innov<6, 1>(h, rm, innov, x, p);
}

// The TDOA step over 6-state constant-velocity filters: predict with the model (F, Q as
// kf_bank's), then one scalar update per pair with the pair's range difference zs[i * M + j]:
// extended (re-linearised after each pair) unless `unscented`, else unscented with the weights w.
// A singular pair is skipped and the filter counted.
__device__ __forceinline__ void kf_tdoa_run(const float* __restrict__ model, unsigned int filters_u,
                                            const float* __restrict__ sensors,
                                            const unsigned int* __restrict__ pairs,
                                            unsigned int n_pairs, float r, bool unscented,
                                            const float (&w)[4], float* __restrict__ xs,
                                            float* __restrict__ ps, const float* __restrict__ zs,
                                            unsigned int* __restrict__ singular) {
    size_t filters = filters_u;
    size_t j = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    bool ok = true;
    if (j < filters) {
        float x[6];
        float p[6][6];
#pragma unroll
        for (int e = 0; e < 6; ++e) x[e] = xs[e * filters + j];
#pragma unroll
        for (int rr = 0; rr < 6; ++rr) {
#pragma unroll
            for (int c = rr; c < 6; ++c) {
                p[rr][c] = ps[(rr * 6 + c) * filters + j];
                p[c][rr] = p[rr][c];
            }
        }
        kf_predict_local<6>(model, model + 36, x, p);
        const float rm[1] = {r};
        for (unsigned int i = 0; i < n_pairs; ++i) {
            const float* sa = sensors + 3 * pairs[2 * i];
            const float* sb = sensors + 3 * pairs[2 * i + 1];
            float z = zs[i * filters + j];
            if (!unscented) {
                float h[6];
                float rd = kf_tdoa_row(sa, sb, x, h);
                float innov[1] = {z - rd};
                ok = kf_update_innov<6, 1>(h, rm, innov, x, p) && ok;
            } else {
                ok = kf_ukf_pair(sa, sb, r, w, z, x, p) && ok;
            }
        }
#pragma unroll
        for (int e = 0; e < 6; ++e) xs[e * filters + j] = x[e];
#pragma unroll
        for (int rr = 0; rr < 6; ++rr) {
#pragma unroll
            for (int c = 0; c < 6; ++c) ps[(rr * 6 + c) * filters + j] = p[rr][c];
        }
    }
    unsigned int bad = __ballot_sync(0xffffffffu, !ok);
    if (bad != 0 && (threadIdx.x & 31) == 0) atomicAdd(singular, __popc(bad));
}

// The extended filter's step (kf_tdoa_run without sigma points).
extern "C" __global__ void __launch_bounds__(128, 5)
    kf_tdoa_6(const float* __restrict__ model, unsigned int filters_u,
              const float* __restrict__ sensors, const unsigned int* __restrict__ pairs,
              unsigned int n_pairs, float r, float* __restrict__ xs, float* __restrict__ ps,
              const float* __restrict__ zs, unsigned int* __restrict__ singular) {
    const float none[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    kf_tdoa_run(model, filters_u, sensors, pairs, n_pairs, r, false, none, xs, ps, zs, singular);
}

// The unscented filter's step (kf_tdoa_run with the sigma-point weights: γ, w0m, w0c, wi).
extern "C" __global__ void __launch_bounds__(128, 4)
    kf_tdoa_ukf_6(const float* __restrict__ model, unsigned int filters_u,
                  const float* __restrict__ sensors, const unsigned int* __restrict__ pairs,
                  unsigned int n_pairs, float r, float gamma, float w0m, float w0c, float wi,
                  float* __restrict__ xs, float* __restrict__ ps, const float* __restrict__ zs,
                  unsigned int* __restrict__ singular) {
    const float w[4] = {gamma, w0m, w0c, wi};
    kf_tdoa_run(model, filters_u, sensors, pairs, n_pairs, r, true, w, xs, ps, zs, singular);
}
