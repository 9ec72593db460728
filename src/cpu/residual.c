/* residual.c — the residual connection on the CPU (He et al. 2016, "Deep Residual Learning",
 * eq. 1): out = x + y; and dst += src, which the backward uses to sum gradients.
 * Elementwise, so out may be x or y (no restrict). */
#include "cpu/cpu_ops.h"

void tlm_cpu_residual_forward(tlm_backend *be, float *out, const float *x, const float *y,
                              size_t n) {
    /* out, x, y (n) */
#pragma omp parallel for simd schedule(static) if (n >= TLM_CPU_GRAIN)
    for (size_t i = 0; i < n; i++) out[i] = x[i] + y[i];
}

void tlm_cpu_add_inplace(tlm_backend *be, float *dst, const float *src, size_t n) {
    /* dst, src (n) */
#pragma omp parallel for simd schedule(static) if (n >= TLM_CPU_GRAIN)
    for (size_t i = 0; i < n; i++) dst[i] += src[i];
}
