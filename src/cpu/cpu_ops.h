/* cpu_ops.h — the CPU backend's ops (one tlm_cpu_<op> per member of tlm_ops, same signatures
 * and semantics as documented in tlm/backend.h), and what they share: TLM_CPU_GRAIN, the size
 * below which a loop stays on one thread, and tlm_cpu_expf, an exp that vectorises.
 * Internal to src/cpu: the model reaches the ops only through tlm_backend.ops. */
#ifndef TLM_CPU_OPS_H
#define TLM_CPU_OPS_H

#include <stddef.h>
#include <stdint.h>
#include <math.h>
#include "tlm/backend.h"

/* Loops over fewer elements than this run on one thread (OpenMP `if` clause): starting a
 * parallel region costs microseconds. PyTorch uses the same grain (at::internal::GRAIN_SIZE). */
#define TLM_CPU_GRAIN 32768

/* embedding.c */
void tlm_cpu_embedding_forward(tlm_backend *be, float *out, const int32_t *tokens,
                               const float *wte, int N, int C);
void tlm_cpu_embedding_backward(tlm_backend *be, float *dwte, const float *dout,
                                const int32_t *tokens, int N, int V, int C);

/* rmsnorm.c */
void tlm_cpu_rmsnorm_forward(tlm_backend *be, float *out, float *rstd, const float *x,
                             const float *w, int N, int C, float eps);
void tlm_cpu_rmsnorm_backward(tlm_backend *be, float *dx, float *dw, const float *dout,
                              const float *x, const float *w, const float *rstd, int N, int C);

/* matmul.c */
void tlm_cpu_matmul_forward(tlm_backend *be, float *y, const float *x, const float *w,
                            int N, int in, int out);
void tlm_cpu_matmul_backward(tlm_backend *be, float *dx, float *dw, const float *dy,
                             const float *x, const float *w, int N, int in, int out);

/* rope.c */
void tlm_cpu_rope_forward(tlm_backend *be, float *x, const float *cos, const float *sin,
                          int B, int T, int nheads, int D, int ld);
void tlm_cpu_rope_backward(tlm_backend *be, float *dx, const float *cos, const float *sin,
                           int B, int T, int nheads, int D, int ld);

/* attention.c */
void tlm_cpu_attention_forward(tlm_backend *be, float *out, float *probs, const float *q,
                               const float *k, const float *v, int ld, int B, int T, int H, int D);
void tlm_cpu_attention_backward(tlm_backend *be, float *dq, float *dk, float *dv, float *dprobs,
                                const float *dout, const float *q, const float *k, const float *v,
                                const float *probs, int ld, int B, int T, int H, int D);

/* swiglu.c */
void tlm_cpu_swiglu_forward(tlm_backend *be, float *out, const float *ab, int N, int F);
void tlm_cpu_swiglu_backward(tlm_backend *be, float *dab, const float *dout, const float *ab,
                             int N, int F);

/* residual.c */
void tlm_cpu_residual_forward(tlm_backend *be, float *out, const float *x, const float *y, size_t n);
void tlm_cpu_add_inplace(tlm_backend *be, float *dst, const float *src, size_t n);

/* cross_entropy.c */
void tlm_cpu_cross_entropy_forward(tlm_backend *be, float *losses, float *lse, const float *logits,
                                   const int32_t *targets, int N, int V);
void tlm_cpu_cross_entropy_backward(tlm_backend *be, float *dlogits, const float *logits,
                                    const float *lse, const int32_t *targets, int N, int V,
                                    float dloss);

/* adamw.c */
void tlm_cpu_adamw_step(tlm_backend *be, float *params, const float *grads, float *m, float *v,
                        size_t n, float lr, float beta1, float beta2, float eps,
                        float weight_decay, int t);

/* exp(x) in float, written so that loops calling it vectorise (libm's expf is a call, which
 * stops GCC's vectoriser without -ffast-math). Cody–Waite range reduction x = n ln2 + r,
 * |r| <= ln2/2, with ln2 split in two; exp(r) by a degree-7 polynomial (Cephes expf's
 * coefficients); 2^n built in the exponent bits. Relative error < 1e-7 (<= 1 ulp from glibc's
 * expf) on [-87.3, 88.7]; returns 0 below (exp is subnormal there), +inf above, NaN for NaN. */
static inline float tlm_cpu_expf(float x) {
    float xc = x > -87.33654f ? x : -87.33654f;                         /* NaN goes to -87.3 */
    xc = xc < 88.72283f ? xc : 88.72283f;
    float n = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f; /* round(x / ln2) */
    float r = xc - n * 0.693359375f;                                    /* x - n ln2: n*C1 exact */
    r = r + n * 2.12194440e-4f;                                         /* ln2 = C1 - 2.12e-4 */
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * (r * r) + r + 1.0f;                                         /* exp(r) */
    float n1 = n > 127.0f ? 127.0f : n;                                 /* 2^128 is not a float */
    union { uint32_t u; float f; } two_n = { .u = (uint32_t)((int32_t)n1 + 127) << 23 };
    float y = p * two_n.f;
    y = n > 127.0f ? 2.0f * y : y;
    y = x < -87.33654f ? 0.0f : y;
    y = x > 88.72283f ? (float)INFINITY : y;
    return x == x ? y : x;                                              /* NaN in, NaN out */
}

#endif
