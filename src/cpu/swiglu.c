/* swiglu.c — the elementwise part of the SwiGLU feed-forward on the CPU (Shazeer 2020, "GLU
 * Variants Improve Transformer", eq. 6): out = silu(a) * b with a = w1 x, b = w3 x side by side
 * in one (N, 2F) buffer, silu(a) = a sigmoid(a); and its backward. */
#include "cpu/cpu_ops.h"

static inline float sigmoid(float a) { return 1.0f / (1.0f + tlm_cpu_expf(-a)); }

void tlm_cpu_swiglu_forward(tlm_backend *be, float *out, const float *ab, int N, int F) {
    /* out (N,F); ab (N,2F) = [a | b] */
#pragma omp parallel for schedule(static) if ((size_t)N * F >= TLM_CPU_GRAIN)
    for (int n = 0; n < N; n++) {
        const float *restrict a = ab + (size_t)n * 2 * F; /* (F) */
        const float *restrict b = a + F;                  /* (F) */
        float *restrict o = out + (size_t)n * F;          /* (F) */
        for (int j = 0; j < F; j++) o[j] = a[j] * sigmoid(a[j]) * b[j];
    }
}

/* d/da silu(a) = s (1 + a (1 - s)), s = sigmoid(a) */
void tlm_cpu_swiglu_backward(tlm_backend *be, float *dab, const float *dout, const float *ab,
                             int N, int F) {
    /* dab (N,2F) = [da | db]; dout (N,F); ab (N,2F) = [a | b] */
#pragma omp parallel for schedule(static) if ((size_t)N * F >= TLM_CPU_GRAIN)
    for (int n = 0; n < N; n++) {
        const float *restrict a = ab + (size_t)n * 2 * F;
        const float *restrict b = a + F;
        const float *restrict d = dout + (size_t)n * F;
        float *restrict da = dab + (size_t)n * 2 * F;
        float *restrict db = da + F;
        for (int j = 0; j < F; j++) {
            float s = sigmoid(a[j]);
            float silu = a[j] * s;
            da[j] = d[j] * b[j] * s * (1.0f + a[j] * (1.0f - s));
            db[j] = d[j] * silu;
        }
    }
}
