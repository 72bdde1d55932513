// ---------------------------------------------------------------------------------------------
// The batched Kalman filter bank (src/gpu/cuda/kf.rs launches it; src/track/kalman/bank.rs is
// its CPU twin, operation for operation and in the same order, so that with --fmad=false and
// IEEE division and square root the two agree to the last bit or nearly).
//
// M independent filters of one linear model, structure of arrays: element e of filter j at
// e * M + j, so the threads of a warp (one filter each) read consecutive words. The model is one
// float array: F (n×n), Q (n×n), H (m×n), R (m×m), row-major, read by every thread (a broadcast).
// Stages: 1 predict (x = F x, P = F P Fᵀ + Q), 2 update (Joseph form with a Cholesky solve of the
// innovation covariance), 3 both in one pass over the state. Every covariance is symmetrised
// after each stage. A filter whose innovation covariance is not positive definite keeps its
// prediction and is counted.

#define KF_STAGE_PREDICT 1
#define KF_STAGE_UPDATE 2

template <int N>
__device__ __forceinline__ void kf_symmetrise(float (&p)[N][N]) {
#pragma unroll
    for (int r = 0; r < N; ++r) {
#pragma unroll
        for (int c = 0; c < r; ++c) {
            float v = 0.5f * (p[r][c] + p[c][r]);
            p[r][c] = v;
            p[c][r] = v;
        }
    }
}

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
    float fp[N][N];
#pragma unroll
    for (int r = 0; r < N; ++r) {
#pragma unroll
        for (int c = 0; c < N; ++c) {
            float acc = 0.0f;
#pragma unroll
            for (int k = 0; k < N; ++k) acc += f[r * N + k] * p[k][c];
            fp[r][c] = acc;
        }
    }
#pragma unroll
    for (int r = 0; r < N; ++r) {
#pragma unroll
        for (int c = 0; c < N; ++c) {
            float acc = 0.0f;
#pragma unroll
            for (int k = 0; k < N; ++k) acc += fp[r][k] * f[c * N + k];
            p[r][c] = acc + q[r * N + c];
        }
        x[r] = xn[r];
    }
    kf_symmetrise<N>(p);
}

// The Joseph-form update; false (state untouched) where S is not positive definite.
template <int N, int M>
__device__ __forceinline__ bool kf_update_local(const float* __restrict__ h,
                                                const float* __restrict__ rm, const float (&z)[M],
                                                float (&x)[N], float (&p)[N][N]) {
    float pht[N][M];
#pragma unroll
    for (int r = 0; r < N; ++r) {
#pragma unroll
        for (int c = 0; c < M; ++c) {
            float acc = 0.0f;
#pragma unroll
            for (int k = 0; k < N; ++k) acc += p[r][k] * h[c * N + k];
            pht[r][c] = acc;
        }
    }
    float s[M][M];
#pragma unroll
    for (int r = 0; r < M; ++r) {
#pragma unroll
        for (int c = 0; c < M; ++c) {
            float acc = 0.0f;
#pragma unroll
            for (int k = 0; k < N; ++k) acc += h[r * N + k] * pht[k][c];
            s[r][c] = acc + rm[r * M + c];
        }
    }
    // Cholesky: S = L Lᵀ.
    float l[M][M];
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
    // W = P Hᵀ S⁻¹, row by row.
    float w[N][M];
#pragma unroll
    for (int r = 0; r < N; ++r) {
        float y[M];
#pragma unroll
        for (int i = 0; i < M; ++i) {
            float acc = 0.0f;
#pragma unroll
            for (int k = 0; k < i; ++k) acc += l[i][k] * y[k];
            y[i] = (pht[r][i] - acc) / l[i][i];
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
    float innov[M];
#pragma unroll
    for (int i = 0; i < M; ++i) {
        float acc = 0.0f;
#pragma unroll
        for (int k = 0; k < N; ++k) acc += h[i * N + k] * x[k];
        innov[i] = z[i] - acc;
    }
#pragma unroll
    for (int r = 0; r < N; ++r) {
        float acc = 0.0f;
#pragma unroll
        for (int i = 0; i < M; ++i) acc += w[r][i] * innov[i];
        x[r] += acc;
    }
    // A = I − W H; P = A P Aᵀ + W R Wᵀ.
    float a[N][N];
#pragma unroll
    for (int r = 0; r < N; ++r) {
#pragma unroll
        for (int c = 0; c < N; ++c) {
            float wh = 0.0f;
#pragma unroll
            for (int i = 0; i < M; ++i) wh += w[r][i] * h[i * N + c];
            a[r][c] = (r == c ? 1.0f : 0.0f) - wh;
        }
    }
    float ap[N][N];
#pragma unroll
    for (int r = 0; r < N; ++r) {
#pragma unroll
        for (int c = 0; c < N; ++c) {
            float acc = 0.0f;
#pragma unroll
            for (int k = 0; k < N; ++k) acc += a[r][k] * p[k][c];
            ap[r][c] = acc;
        }
    }
    float wr[N][M];
#pragma unroll
    for (int r = 0; r < N; ++r) {
#pragma unroll
        for (int c = 0; c < M; ++c) {
            float acc = 0.0f;
#pragma unroll
            for (int k = 0; k < M; ++k) acc += w[r][k] * rm[k * M + c];
            wr[r][c] = acc;
        }
    }
#pragma unroll
    for (int r = 0; r < N; ++r) {
#pragma unroll
        for (int c = 0; c < N; ++c) {
            float apat = 0.0f;
#pragma unroll
            for (int k = 0; k < N; ++k) apat += ap[r][k] * a[c][k];
            float wrw = 0.0f;
#pragma unroll
            for (int k = 0; k < M; ++k) wrw += wr[r][k] * w[c][k];
            p[r][c] = apat + wrw;
        }
    }
    kf_symmetrise<N>(p);
    return true;
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
#pragma unroll
    for (int r = 0; r < N; ++r) {
#pragma unroll
        for (int c = 0; c < N; ++c) p[r][c] = ps[(r * N + c) * filters + j];
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

#define KF_CASE(N, M)                                                                          \
    case N * 4 + M:                                                                            \
        ok = kf_run<N, M>(model, filters, j, stage, xs, ps, zs);                               \
        break;

// One thread per filter; `singular` counts the filters whose update found S not positive
// definite (one atomic per warp).
extern "C" __global__ void kf_bank(const float* __restrict__ model, int n, int m,
                                   unsigned int filters_u, int stage, float* __restrict__ xs,
                                   float* __restrict__ ps, const float* __restrict__ zs,
                                   unsigned int* __restrict__ singular) {
    size_t filters = filters_u;
    size_t j = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    bool ok = true;
    if (j < filters) {
        switch (n * 4 + m) {
            KF_CASE(1, 1)
            KF_CASE(2, 1) KF_CASE(2, 2)
            KF_CASE(3, 1) KF_CASE(3, 2) KF_CASE(3, 3)
            KF_CASE(4, 1) KF_CASE(4, 2) KF_CASE(4, 3)
            KF_CASE(5, 1) KF_CASE(5, 2) KF_CASE(5, 3)
            KF_CASE(6, 1) KF_CASE(6, 2) KF_CASE(6, 3)
            default: break;
        }
    }
    unsigned int bad = __ballot_sync(0xffffffffu, !ok);
    if (bad != 0 && (threadIdx.x & 31) == 0) atomicAdd(singular, __popc(bad));
}
