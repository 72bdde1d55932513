// ---------------------------------------------------------------------------------------------
// The IMM estimator over the batched bank (src/gpu/cuda/imm.rs launches it;
// src/track/kalman/imm_bank.rs is its CPU twin, operation for operation and in the same order;
// both take ln and exp from the same polynomials, fm_ln and fm_exp of common.cuh and
// src/math/fastmath.rs, so that they agree bit for bit). One thread per track; r ≤ 4 linear
// models of one size, packed as kf_bank's (F, Q, H, R) one after another, then the Markov
// matrix Π (r × r). Mode k of track t: x at (k·N + e)·T + t, P at (k·N·N + e)·T + t, μ at
// k·T + t. Per step: c̄ⱼ = Σᵢ πᵢⱼ μᵢ; each mode's mixed start; kf_bank's predict and Joseph
// update with the innovation's log-likelihood; μⱼ ∝ c̄ⱼ Λⱼ in the log domain; the combined
// estimate into xc, pc. A track where a mode's update is singular keeps its state (its
// combined estimate is its old modes' mixture) and is counted.

#define IMM_MAX_MODES 4

// The mixture's moments: x = Σ wᵢ xᵢ, P = Σ wᵢ (Pᵢ + dᵢ dᵢᵀ), dᵢ = xᵢ − x, upper triangle
// mirrored.
template <int N>
__device__ __forceinline__ void imm_mixture(const float (&xs)[IMM_MAX_MODES][N],
                                            const float (&ps)[IMM_MAX_MODES][N][N],
                                            const float (&w)[IMM_MAX_MODES], int r, float (&x)[N],
                                            float (&p)[N][N]) {
#pragma unroll
    for (int e = 0; e < N; ++e) {
        float acc = 0.0f;
#pragma unroll
        for (int i = 0; i < IMM_MAX_MODES; ++i)
            if (i < r) acc += w[i] * xs[i][e];
        x[e] = acc;
    }
#pragma unroll
    for (int a = 0; a < N; ++a) {
#pragma unroll
        for (int b = a; b < N; ++b) {
            float acc = 0.0f;
#pragma unroll
            for (int i = 0; i < IMM_MAX_MODES; ++i) {
                if (i < r) {
                    float da = xs[i][a] - x[a], db = xs[i][b] - x[b];
                    acc += w[i] * (ps[i][a][b] + da * db);
                }
            }
            p[a][b] = acc;
            p[b][a] = acc;
        }
    }
}

// μⱼ ∝ c̄ⱼ Λⱼ in the log domain; false where no mode has a finite weight.
__device__ __forceinline__ bool imm_mode_probabilities(const float (&c_bar)[IMM_MAX_MODES],
                                                       const float (&ll)[IMM_MAX_MODES], int r,
                                                       float (&mu)[IMM_MAX_MODES]) {
    float terms[IMM_MAX_MODES];
    float top = __int_as_float(0xff800000);
#pragma unroll
    for (int j = 0; j < IMM_MAX_MODES; ++j) {
        terms[j] = __int_as_float(0xff800000);
        if (j < r) {
            if (c_bar[j] > 0.0f) terms[j] = ll[j] + fm_ln(c_bar[j]);
            top = fmaxf(top, terms[j]);
        }
    }
    if (!isfinite(top)) return false;
    float e[IMM_MAX_MODES];
    float sum = 0.0f;
#pragma unroll
    for (int j = 0; j < IMM_MAX_MODES; ++j) {
        if (j < r) {
            // A mode no other can reach (c̄ⱼ = 0) gets 0, not fm_exp's floor.
            e[j] = c_bar[j] > 0.0f ? fm_exp(terms[j] - top) : 0.0f;
            sum += e[j];
        }
    }
#pragma unroll
    for (int j = 0; j < IMM_MAX_MODES; ++j) mu[j] = j < r ? e[j] / sum : 0.0f;
    return true;
}

// One track's IMM cycle; false where a mode's update was singular (state left as it was).
template <int N, int M>
__device__ __forceinline__ bool imm_run(const float* __restrict__ model, int r, size_t tracks,
                                        size_t t, float* __restrict__ xs, float* __restrict__ ps,
                                        float* __restrict__ mus, const float* __restrict__ zs,
                                        float* __restrict__ xc, float* __restrict__ pc) {
    const int stride = 2 * N * N + M * N + M * M;
    const float* pi = model + r * stride;
    float x[IMM_MAX_MODES][N];
    float p[IMM_MAX_MODES][N][N];
    float mu[IMM_MAX_MODES];
#pragma unroll
    for (int k = 0; k < IMM_MAX_MODES; ++k) {
        mu[k] = k < r ? mus[k * tracks + t] : 0.0f;
#pragma unroll
        for (int a = 0; a < N; ++a) {
            x[k][a] = k < r ? xs[(k * N + a) * tracks + t] : 0.0f;
#pragma unroll
            for (int b = a; b < N; ++b) {
                p[k][a][b] = k < r ? ps[(k * N * N + a * N + b) * tracks + t] : 0.0f;
                p[k][b][a] = p[k][a][b];
            }
        }
    }
    float z[M];
#pragma unroll
    for (int i = 0; i < M; ++i) z[i] = zs[i * tracks + t];
    float c_bar[IMM_MAX_MODES];
#pragma unroll
    for (int j = 0; j < IMM_MAX_MODES; ++j) {
        float acc = 0.0f;
#pragma unroll
        for (int i = 0; i < IMM_MAX_MODES; ++i)
            if (i < r && j < r) acc += pi[i * r + j] * mu[i];
        c_bar[j] = acc;
    }
    float nx[IMM_MAX_MODES][N];
    float np[IMM_MAX_MODES][N][N];
    float ll[IMM_MAX_MODES];
    bool ok = true;
    for (int j = 0; j < r && ok; ++j) {
        float w[IMM_MAX_MODES];
#pragma unroll
        for (int i = 0; i < IMM_MAX_MODES; ++i) {
            if (i >= r)
                w[i] = 0.0f;
            else if (c_bar[j] > 0.0f)
                w[i] = pi[i * r + j] * mu[i] / c_bar[j];
            else
                w[i] = i == j ? 1.0f : 0.0f;
        }
        imm_mixture<N>(x, p, w, r, nx[j], np[j]);
        const float* m = model + j * stride;
        kf_predict_local<N>(m, m + N * N, nx[j], np[j]);
        ok = kf_update_local<N, M>(m + 2 * N * N, m + 2 * N * N + M * N, z, nx[j], np[j], &ll[j]);
    }
    float next_mu[IMM_MAX_MODES];
    if (ok) ok = imm_mode_probabilities(c_bar, ll, r, next_mu);
    float cx[N];
    float cp[N][N];
    if (ok) {
        for (int k = 0; k < r; ++k) {
            mus[k * tracks + t] = next_mu[k];
#pragma unroll
            for (int a = 0; a < N; ++a) {
                xs[(k * N + a) * tracks + t] = nx[k][a];
#pragma unroll
                for (int b = 0; b < N; ++b) ps[(k * N * N + a * N + b) * tracks + t] = np[k][a][b];
            }
        }
        imm_mixture<N>(nx, np, next_mu, r, cx, cp);
    } else {
        imm_mixture<N>(x, p, mu, r, cx, cp);
    }
#pragma unroll
    for (int a = 0; a < N; ++a) {
        xc[a * tracks + t] = cx[a];
#pragma unroll
        for (int b = 0; b < N; ++b) pc[(a * N + b) * tracks + t] = cp[a][b];
    }
    return ok;
}

// One thread per track; `singular` counts the tracks with a singular update (one atomic per
// warp).
#define IMM_KERNEL(N, M)                                                                       \
    extern "C" __global__ void __launch_bounds__(128) imm_bank_##N##_##M(                      \
        const float* __restrict__ model, int modes, unsigned int tracks_u,                     \
        float* __restrict__ xs, float* __restrict__ ps, float* __restrict__ mus,               \
        const float* __restrict__ zs, float* __restrict__ xc, float* __restrict__ pc,          \
        unsigned int* __restrict__ singular) {                                                 \
        size_t tracks = tracks_u;                                                              \
        size_t t = (size_t)blockIdx.x * blockDim.x + threadIdx.x;                              \
        bool ok = t >= tracks ||                                                               \
                  imm_run<N, M>(model, modes, tracks, t, xs, ps, mus, zs, xc, pc);             \
        unsigned int bad = __ballot_sync(0xffffffffu, !ok);                                    \
        if (bad != 0 && (threadIdx.x & 31) == 0) atomicAdd(singular, __popc(bad));             \
    }

IMM_KERNEL(2, 1)
IMM_KERNEL(4, 2)
IMM_KERNEL(6, 3)
