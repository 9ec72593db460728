/* sum_squares.c — the sum of squares of a float32 vector on the CPU, in float64 (the global gradient
 * norm for clipping, ops.def): fixed blocks of SUMSQ_BLOCK elements, each summed over 8 lanes
 * (element i into lane i % 8, the lanes added in order), then the block sums in index order. The
 * blocks do not depend on the thread count, so the result is the same bits with any number of
 * threads. */
#include "cpu/cpu_ops.h"

#define SUMSQ_BLOCK 8192
#define SUMSQ_LANES 8

/* x (n), n <= SUMSQ_BLOCK: sum of x[i]^2 in float64, lanes as above */
static double block_sum_squares(const float *restrict x, size_t n) {
    double lane[SUMSQ_LANES] = {0};
    size_t i = 0;
    for (; i + SUMSQ_LANES <= n; i += SUMSQ_LANES)
        for (int k = 0; k < SUMSQ_LANES; k++) lane[k] += (double)x[i + k] * (double)x[i + k];
    for (; i < n; i++) lane[i % SUMSQ_LANES] += (double)x[i] * (double)x[i];
    double s = 0.0;
    for (int k = 0; k < SUMSQ_LANES; k++) s += lane[k];
    return s;
}

void tlm_cpu_sum_squares(tlm_backend *be, double *out, const float *x, size_t n) {
    /* out (1) float64; x (n) float32 */
    const size_t nblocks = (n + SUMSQ_BLOCK - 1) / SUMSQ_BLOCK;
    if (nblocks <= 1) {
        out[0] = block_sum_squares(x, n);
        return;
    }
    double *part = tlm_cpu_scratch(be, nblocks * sizeof(double), "sum_squares"); /* (nblocks) */
#pragma omp parallel for schedule(static) if (n >= TLM_CPU_GRAIN)
    for (size_t b = 0; b < nblocks; b++) {
        const size_t i0 = b * SUMSQ_BLOCK;
        part[b] = block_sum_squares(x + i0, n - i0 < SUMSQ_BLOCK ? n - i0 : SUMSQ_BLOCK);
    }
    double s = 0.0;
    for (size_t b = 0; b < nblocks; b++) s += part[b];
    out[0] = s;
}
