/* swiglu.c — the elementwise part of the SwiGLU feed-forward on the CPU (Shazeer 2020, "GLU
 * Variants Improve Transformer", eq. 6): out = silu(a) * b with a = w1 x, b = w3 x side by side
 * in one (N, 2F) buffer, silu(a) = a sigmoid(a); and its backward. All tensors dt: read as
 * fp32, computed in fp32, rounded to dt.
 *
 * The arithmetic is in the row kernels, once. fp32 runs them on the tensors in a loop of its
 * own: run from the loop that also widens and rounds bf16/fp16 rows (as the other row ops
 * do), GCC 12 -O3 vectorised the fp32 forward 10% slower (measured). */
#include "cpu/cpu_ops.h"

static inline float sigmoid(float a) { return 1.0f / (1.0f + tlm_cpu_expf(-a)); }

/* o (F) = silu(a (F)) * b (F) */
static inline void swiglu_forward_row(float *restrict o, const float *restrict a,
                                      const float *restrict b, int F) {
    for (int j = 0; j < F; j++) o[j] = a[j] * sigmoid(a[j]) * b[j];
}

/* da, db (F) = d * b * silu'(a), d * silu(a);  silu'(a) = s (1 + a (1 - s)), s = sigmoid(a) */
static inline void swiglu_backward_row(float *restrict da, float *restrict db,
                                       const float *restrict d, const float *restrict a,
                                       const float *restrict b, int F) {
    for (int j = 0; j < F; j++) {
        float s = sigmoid(a[j]);
        float silu = a[j] * s;
        da[j] = d[j] * b[j] * s * (1.0f + a[j] * (1.0f - s));
        db[j] = d[j] * silu;
    }
}

void tlm_cpu_swiglu_forward(tlm_backend *be, void *out, const void *ab, int N, int F,
                            tlm_dtype dt) {
    /* out (N,F); ab (N,2F) = [a | b] */
    const size_t F1 = (size_t)F, F2 = 2 * F1;
    if (dt == TLM_DTYPE_F32) {
#pragma omp parallel for schedule(static) if ((size_t)N * F >= TLM_CPU_GRAIN)
        for (int n = 0; n < N; n++) {
            const float *a = (const float *)ab + n * F2;
            swiglu_forward_row((float *)out + n * F1, a, a + F, F);
        }
        return;
    }
    tlm_cpu_thread_scratch rows = /* a row of ab, then a row of out */
        tlm_cpu_scratch_per_thread(be, F2 + F1, "swiglu_forward");
#pragma omp parallel for schedule(static) if ((size_t)N * F >= TLM_CPU_GRAIN)
    for (int n = 0; n < N; n++) {
        const float *a = tlm_cpu_row_in(ab, n * F2, F2, dt, tlm_cpu_thread_buf(rows, 0));
        float *o = tlm_cpu_row_out(out, n * F1, dt, tlm_cpu_thread_buf(rows, F2));
        swiglu_forward_row(o, a, a + F, F);
        tlm_cpu_row_done(out, n * F1, o, F1, dt);
    }
}

void tlm_cpu_swiglu_backward(tlm_backend *be, void *dab, const void *dout, const void *ab,
                             int N, int F, tlm_dtype dt) {
    /* dab (N,2F) = [da | db]; dout (N,F); ab (N,2F) = [a | b] */
    const size_t F1 = (size_t)F, F2 = 2 * F1;
    if (dt == TLM_DTYPE_F32) {
#pragma omp parallel for schedule(static) if ((size_t)N * F >= TLM_CPU_GRAIN)
        for (int n = 0; n < N; n++) {
            const float *a = (const float *)ab + n * F2;
            float *da = (float *)dab + n * F2;
            swiglu_backward_row(da, da + F, (const float *)dout + n * F1, a, a + F, F);
        }
        return;
    }
    tlm_cpu_thread_scratch rows = /* a row of ab, of dab, of dout */
        tlm_cpu_scratch_per_thread(be, 2 * F2 + F1, "swiglu_backward");
#pragma omp parallel for schedule(static) if ((size_t)N * F >= TLM_CPU_GRAIN)
    for (int n = 0; n < N; n++) {
        const float *a = tlm_cpu_row_in(ab, n * F2, F2, dt, tlm_cpu_thread_buf(rows, 0));
        float *da = tlm_cpu_row_out(dab, n * F2, dt, tlm_cpu_thread_buf(rows, F2));
        const float *d = tlm_cpu_row_in(dout, n * F1, F1, dt, tlm_cpu_thread_buf(rows, 2 * F2));
        swiglu_backward_row(da, da + F, d, a, a + F, F);
        tlm_cpu_row_done(dab, n * F2, da, F2, dt);
    }
}

/* The SwiGLU feed-forward's backward GEMM with SwiGLU's backward (ops.def): on the CPU the two ops
 * composed, so the numbers are those of the unfused sequence exactly. */
void tlm_cpu_matmul_swiglu_backward(tlm_backend *be, void *dab, void *dg, const void *dy, const void *w2,
                                    const void *ab, int N, int C, int F, tlm_precision p) {
    tlm_cpu_matmul_backward(be, dg, NULL, TLM_DTYPE_F32, dy, NULL, w2, N, F, C, p); /* d_g = dy W2 */
    tlm_cpu_swiglu_backward(be, dab, dg, ab, N, F, tlm_precision_act_dtype(p));
}
