// ---------------------------------------------------------------------------------------------
// The RTS smoother parallel in time on the GPU (src/gpu/cuda/smooth.rs launches it;
// src/track/smooth/scan.rs is its CPU twin). Each step is an element e_k = (E_k, g_k, L_k) in
// f64, laid out as E (n×n, row-major), g (n), L (n×n): 2n² + n doubles an element. Composition
// a • b (b applied first) = (E_a E_b, E_a g_b + g_a, sym(E_a L_b E_aᵀ + L_a)) is associative,
// and the smoothed states are the suffixes e_k • e_{k+1} • … • e_last, computed in tiles:
// sm_tile_totals composes each tile (one thread a tile), the host scans the totals the same way
// (recursively) into the carry entering each tile, and sm_tile_apply writes each tile's suffixes
// composed with its carry, in place. Several tracks are one sequence end to end: a track's
// terminal element has E = 0, which cuts off everything after it exactly.

template <int N>
struct SmElem {
    double e[N][N];
    double g[N];
    double l[N][N];
};

template <int N>
__device__ __forceinline__ void sm_load(const double* __restrict__ p, SmElem<N>& a) {
#pragma unroll
    for (int r = 0; r < N; ++r) {
#pragma unroll
        for (int c = 0; c < N; ++c) a.e[r][c] = p[r * N + c];
    }
#pragma unroll
    for (int r = 0; r < N; ++r) a.g[r] = p[N * N + r];
#pragma unroll
    for (int r = 0; r < N; ++r) {
#pragma unroll
        for (int c = 0; c < N; ++c) a.l[r][c] = p[N * N + N + r * N + c];
    }
}

template <int N>
__device__ __forceinline__ void sm_store(double* __restrict__ p, const SmElem<N>& a) {
#pragma unroll
    for (int r = 0; r < N; ++r) {
#pragma unroll
        for (int c = 0; c < N; ++c) p[r * N + c] = a.e[r][c];
    }
#pragma unroll
    for (int r = 0; r < N; ++r) p[N * N + r] = a.g[r];
#pragma unroll
    for (int r = 0; r < N; ++r) {
#pragma unroll
        for (int c = 0; c < N; ++c) p[N * N + N + r * N + c] = a.l[r][c];
    }
}

// out = a • b (apply b first).
template <int N>
__device__ __forceinline__ void sm_then(const SmElem<N>& a, const SmElem<N>& b, SmElem<N>& out) {
#pragma unroll
    for (int r = 0; r < N; ++r) {
#pragma unroll
        for (int c = 0; c < N; ++c) {
            double acc = 0.0;
#pragma unroll
            for (int k = 0; k < N; ++k) acc += a.e[r][k] * b.e[k][c];
            out.e[r][c] = acc;
        }
        double acc = 0.0;
#pragma unroll
        for (int k = 0; k < N; ++k) acc += a.e[r][k] * b.g[k];
        out.g[r] = acc + a.g[r];
    }
    // E_a L_b, then (E_a L_b) E_aᵀ + L_a, symmetrised.
    double el[N][N];
#pragma unroll
    for (int r = 0; r < N; ++r) {
#pragma unroll
        for (int c = 0; c < N; ++c) {
            double acc = 0.0;
#pragma unroll
            for (int k = 0; k < N; ++k) acc += a.e[r][k] * b.l[k][c];
            el[r][c] = acc;
        }
    }
#pragma unroll
    for (int r = 0; r < N; ++r) {
#pragma unroll
        for (int c = 0; c < N; ++c) {
            double acc = 0.0;
#pragma unroll
            for (int k = 0; k < N; ++k) acc += el[r][k] * a.e[c][k];
            out.l[r][c] = acc + a.l[r][c];
        }
    }
#pragma unroll
    for (int r = 0; r < N; ++r) {
#pragma unroll
        for (int c = 0; c < r; ++c) {
            double v = 0.5 * (out.l[r][c] + out.l[c][r]);
            out.l[r][c] = v;
            out.l[c][r] = v;
        }
    }
}

template <int N>
__device__ __forceinline__ void sm_copy(const SmElem<N>& a, SmElem<N>& out) {
#pragma unroll
    for (int r = 0; r < N; ++r) {
#pragma unroll
        for (int c = 0; c < N; ++c) {
            out.e[r][c] = a.e[r][c];
            out.l[r][c] = a.l[r][c];
        }
        out.g[r] = a.g[r];
    }
}

// Tile t's composition e_start • … • e_end-1, right to left.
template <int N>
__device__ void sm_totals(const double* __restrict__ el, unsigned long long count,
                          unsigned long long tile, unsigned long long t,
                          double* __restrict__ totals) {
    const unsigned long long es = 2 * N * N + N;
    unsigned long long start = t * tile;
    unsigned long long end = min(start + tile, count);
    SmElem<N> acc, e, tmp;
    sm_load<N>(el + (end - 1) * es, acc);
    for (unsigned long long k = end - 1; k > start; --k) {
        sm_load<N>(el + (k - 1) * es, e);
        sm_then<N>(e, acc, tmp);
        sm_copy<N>(tmp, acc);
    }
    sm_store<N>(totals + t * es, acc);
}

// Tile t's suffixes, each composed with the carry (the suffix of the tiles after it), in place.
template <int N>
__device__ void sm_apply(double* __restrict__ el, unsigned long long count,
                         unsigned long long tile, unsigned long long t,
                         const double* __restrict__ suffixes) {
    const unsigned long long es = 2 * N * N + N;
    unsigned long long tiles = (count + tile - 1) / tile;
    unsigned long long start = t * tile;
    unsigned long long end = min(start + tile, count);
    SmElem<N> acc, e, tmp;
    bool have = suffixes != nullptr && t + 1 < tiles;
    if (have) sm_load<N>(suffixes + (t + 1) * es, acc);
    for (unsigned long long k = end; k > start; --k) {
        sm_load<N>(el + (k - 1) * es, e);
        if (have) {
            sm_then<N>(e, acc, tmp);
            sm_copy<N>(tmp, acc);
        } else {
            sm_copy<N>(e, acc);
            have = true;
        }
        sm_store<N>(el + (k - 1) * es, acc);
    }
}

#define SM_DISPATCH(CALL)                                                                      \
    switch (n) {                                                                               \
        case 1: CALL(1); break;                                                                \
        case 2: CALL(2); break;                                                                \
        case 3: CALL(3); break;                                                                \
        case 4: CALL(4); break;                                                                \
        case 5: CALL(5); break;                                                                \
        case 6: CALL(6); break;                                                                \
        default: break;                                                                        \
    }

extern "C" __global__ void sm_tile_totals(const double* __restrict__ el, int n,
                                          unsigned long long count, unsigned long long tile,
                                          double* __restrict__ totals) {
    unsigned long long t = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= (count + tile - 1) / tile) return;
#define SM_TOTALS(N) sm_totals<N>(el, count, tile, t, totals)
    SM_DISPATCH(SM_TOTALS)
#undef SM_TOTALS
}

// `suffixes`: the inclusive suffixes of the tiles' totals (null: one tile, no carry).
extern "C" __global__ void sm_tile_apply(double* __restrict__ el, int n, unsigned long long count,
                                         unsigned long long tile,
                                         const double* __restrict__ suffixes) {
    unsigned long long t = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= (count + tile - 1) / tile) return;
#define SM_APPLY(N) sm_apply<N>(el, count, tile, t, suffixes)
    SM_DISPATCH(SM_APPLY)
#undef SM_APPLY
}
