// ---------------------------------------------------------------------------------------------
// The batched cost of every (track, measurement) pair of one frame for multi-frame assignment
// (seed 001 checklist C10; src/track/mfa/pair_costs.rs is the CPU twin, operation for operation
// in the same order, f64): S = H P Hᵀ + R, its Cholesky factor, the innovation's squared
// Mahalanobis distance, and the corrected NLLR −(ln P_D + ln N − ln λ) inside the χ² gate, +∞
// outside it or where S is not positive definite. One thread per pair: tracks × measurements.

#define MFA_MAX_N 6
#define MFA_MAX_M 3

extern "C" __global__ void mfa_pair_costs(const double* __restrict__ xs,
                                          const double* __restrict__ ps,
                                          const double* __restrict__ h,
                                          const double* __restrict__ rm,
                                          const double* __restrict__ zs, int n, int m,
                                          unsigned int tracks, unsigned int meas, double gate,
                                          double ln_pd, double ln_lambda, double ln_two_pi,
                                          double* __restrict__ cost) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)tracks * meas) return;
    size_t t = i / meas;
    size_t j = i % meas;
    const double* x = xs + t * n;
    const double* p = ps + t * n * n;
    double nu[MFA_MAX_M];
    double s[MFA_MAX_M][MFA_MAX_M];
    for (int a = 0; a < m; ++a) {
        double zhat = 0.0;
        for (int c = 0; c < n; ++c) zhat += h[a * n + c] * x[c];
        nu[a] = zs[j * m + a] - zhat;
        for (int b = 0; b < m; ++b) {
            double acc = 0.0;
            for (int c = 0; c < n; ++c) {
                double hp = 0.0;
                for (int l = 0; l < n; ++l) hp += h[a * n + l] * p[l * n + c];
                acc += hp * h[b * n + c];
            }
            s[a][b] = acc + rm[a * m + b];
        }
    }
    double l[MFA_MAX_M][MFA_MAX_M];
    for (int a = 0; a < m; ++a) {
        for (int b = 0; b <= a; ++b) {
            double sum = 0.0;
            for (int c = 0; c < b; ++c) sum += l[a][c] * l[b][c];
            if (a == b) {
                double d = s[a][a] - sum;
                if (!(d > 0.0)) {
                    cost[i] = __longlong_as_double(0x7ff0000000000000LL);
                    return;
                }
                l[a][a] = sqrt(d);
            } else {
                l[a][b] = (s[a][b] - sum) / l[b][b];
            }
        }
    }
    double d2 = 0.0, log_det = 0.0;
    double y[MFA_MAX_M];
    for (int a = 0; a < m; ++a) {
        double acc = 0.0;
        for (int c = 0; c < a; ++c) acc += l[a][c] * y[c];
        y[a] = (nu[a] - acc) / l[a][a];
        d2 += y[a] * y[a];
        log_det += log(l[a][a]);
    }
    if (!(d2 <= gate)) {
        cost[i] = __longlong_as_double(0x7ff0000000000000LL);
        return;
    }
    double ll = -0.5 * (d2 + 2.0 * log_det + (double)m * ln_two_pi);
    cost[i] = -(ln_pd + ll - ln_lambda);
}
