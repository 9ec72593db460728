/* cpu_ops.h — the CPU backend's ops (one tlm_cpu_<op> per member of tlm_ops, same signatures
 * and semantics as documented in tlm/backend.h), and what they share: TLM_CPU_GRAIN, the size
 * below which a loop stays on one thread; the dtype helpers (the ops compute in float32 and
 * read/write bf16/fp16 tensors through them); the scratch arena; tlm_cpu_expf, an exp that
 * vectorises.
 * Internal to src/cpu: the model reaches the ops only through tlm_backend.ops. */
#ifndef TLM_CPU_OPS_H
#define TLM_CPU_OPS_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <math.h>
#include <omp.h>
#include "tlm/backend.h"
#include "core/convert.h"

/* Loops over fewer elements than this run on one thread (OpenMP `if` clause): starting a
 * parallel region costs microseconds. PyTorch uses the same grain (at::internal::GRAIN_SIZE). */
#define TLM_CPU_GRAIN 32768

/* embedding.c */
void tlm_cpu_embedding_forward(tlm_backend *be, float *out, const int32_t *tokens,
                               const float *wte, int N, int C);
void tlm_cpu_embedding_backward(tlm_backend *be, float *dwte, const float *dout,
                                const int32_t *tokens, int N, int V, int C);

/* rmsnorm.c */
void tlm_cpu_rmsnorm_forward(tlm_backend *be, void *out, float *rstd, const float *x,
                             const float *w, int N, int C, float eps, tlm_dtype dt);
void tlm_cpu_rmsnorm_backward(tlm_backend *be, float *dx, float *dw, const void *dout,
                              const float *x, const float *w, const float *rstd, int N, int C,
                              tlm_dtype dt);

/* layernorm.c (the ToyModel's LayerNorm, fp32 statistics and output) */
void tlm_cpu_layernorm_forward(tlm_backend *be, float *out, float *mean, float *rstd, const void *x,
                               const float *w, const float *b, int N, int C, float eps, tlm_dtype dt);
void tlm_cpu_layernorm_backward(tlm_backend *be, void *dx, float *dw, float *db, const void *dout,
                                const void *x, const float *w, const float *mean, const float *rstd,
                                int N, int C, tlm_dtype dt);

/* relu.c (the ToyModel's ReLU) */
void tlm_cpu_relu_forward(tlm_backend *be, void *out, const void *x, size_t n, tlm_dtype dt);
void tlm_cpu_relu_backward(tlm_backend *be, void *dx, const void *dout, const void *x, size_t n,
                           tlm_dtype dt);

/* matmul.c */
void tlm_cpu_matmul_forward(tlm_backend *be, void *y, const float *residual, const void *x,
                            const void *w, int N, int in, int out, tlm_dtype dt);
void tlm_cpu_matmul_backward(tlm_backend *be, void *dx, float *dw, const void *dy,
                             const void *x, const void *w, int N, int in, int out, tlm_dtype dt);

/* cast.c: the cast op, and whole-tensor conversions (parallel) for the GEMMs' operands */
void tlm_cpu_cast(tlm_backend *be, void *dst, const float *src, size_t n, tlm_dtype dt);
void tlm_cpu_to_f32(float *dst, const void *src, size_t n, tlm_dtype dt);   /* widen */
void tlm_cpu_from_f32(void *dst, const float *src, size_t n, tlm_dtype dt); /* round */

/* rope.c */
void tlm_cpu_rope_forward(tlm_backend *be, void *x, const float *cos, const float *sin,
                          int B, int T, int nheads, int D, int ld, tlm_dtype dt);
void tlm_cpu_rope_backward(tlm_backend *be, void *dx, const float *cos, const float *sin,
                           int B, int T, int nheads, int D, int ld, tlm_dtype dt);

/* attention.c */
void tlm_cpu_attention_forward(tlm_backend *be, void *out, void *probs, const void *q,
                               const void *k, const void *v, int ld, int B, int T, int H, int D,
                               tlm_dtype dt);
void tlm_cpu_attention_backward(tlm_backend *be, void *dq, void *dk, void *dv, void *dprobs,
                                const void *dout, const void *q, const void *k, const void *v,
                                const void *probs, int ld, int B, int T, int H, int D,
                                tlm_dtype dt);

/* flash_attention.c: FlashAttention-2, the fp32 reference (tlm/flash_attention.h) with its
 * default tiles; bf16/fp16 tensors widened to float32 in the scratch arena, outputs rounded to dt.
 * Any d_head >= 1; the workspace is unused (may be NULL). */
void tlm_cpu_flash_attention_forward(tlm_backend *be, void *out, float *lse, const void *q,
                                     const void *k, const void *v, int ld_qkv, int ld_out, int B,
                                     int Tq, int Tk, int H, int D, bool causal, tlm_dtype dt);
void tlm_cpu_flash_attention_backward(tlm_backend *be, void *dq, void *dk, void *dv,
                                      float *workspace, const void *dout, const void *q,
                                      const void *k, const void *v, const void *out,
                                      const float *lse, int ld_qkv, int ld_out, int B, int Tq,
                                      int Tk, int H, int D, bool causal, tlm_dtype dt);
tlm_status tlm_cpu_flash_attention_check(tlm_backend *be, int D, tlm_dtype dt);

/* swiglu.c */
void tlm_cpu_swiglu_forward(tlm_backend *be, void *out, const void *ab, int N, int F, tlm_dtype dt);
void tlm_cpu_swiglu_backward(tlm_backend *be, void *dab, const void *dout, const void *ab,
                             int N, int F, tlm_dtype dt);

/* cross_entropy.c */
void tlm_cpu_cross_entropy_forward(tlm_backend *be, float *losses, float *lse, const void *logits,
                                   const int32_t *targets, int N, int V, tlm_dtype dt);
void tlm_cpu_cross_entropy_backward(tlm_backend *be, void *dlogits, const void *logits,
                                    const float *lse, const int32_t *targets, int N, int V,
                                    float dloss, tlm_dtype dt);

/* adamw.c: the optimizer step, and the fp16 loss scaling's unscale */
void tlm_cpu_adamw_step(tlm_backend *be, float *params, const float *grads, float *m, float *v,
                        size_t n, float lr, float beta1, float beta2, float eps,
                        float weight_decay, int t, void *params_lp, tlm_dtype dt);
size_t tlm_cpu_grad_unscale(tlm_backend *be, float *grads, size_t n, float inv_scale);

/* ---- scratch (backend_cpu.c) -------------------------------------------------------------
 * One grow-only arena per backend (be->impl), 64-byte aligned, for the float32 copies that
 * the bf16/fp16 paths compute in. tlm_cpu_scratch returns at least `bytes`; the memory is the
 * caller's until the next call (ops run one at a time; the arena is not for nesting).
 * Out of memory is fatal. The fp32 path never touches it. */
void *tlm_cpu_scratch(tlm_backend *be, size_t bytes, const char *op);

/* Per-thread slices of the arena for a parallel loop: `floats` each for omp_get_max_threads()
 * threads (64-byte aligned, no false sharing); inside the loop tlm_cpu_thread_buf(s, offset) is
 * the calling thread's slice from float `offset` on. With floats == 0 (the fp32 path) nothing
 * is allocated and the buffers are NULL. */
typedef struct {
    float *base;
    size_t stride;  /* floats from one thread's slice to the next */
    int threads;
} tlm_cpu_thread_scratch;

tlm_cpu_thread_scratch tlm_cpu_scratch_per_thread(tlm_backend *be, size_t floats, const char *op);

static inline float *tlm_cpu_thread_buf(tlm_cpu_thread_scratch s, size_t offset) {
    if (!s.base) return NULL;
    int t = omp_get_thread_num();
    if (t >= s.threads) tlm_fatal("cpu: thread %d has no scratch slice (%d)", t, s.threads);
    return s.base + (size_t)t * s.stride + offset;
}

/* ---- dtype at the edges ------------------------------------------------------------------
 * A `void *` tensor holds dt elements: float32 (TLM_DTYPE_F32), or the 16-bit patterns of bf16
 * (TLM_DTYPE_BF16) or fp16 (TLM_DTYPE_F16). Every op computes in float32: it reads a dt tensor
 * as float32 (exact) and rounds what it writes to dt (round to nearest even, core/convert.h).
 * With dt == F32 the row helpers hand out the tensor's own memory, so the fp32 path runs the
 * same loops on the tensors directly, with no copy. Offsets and counts are in elements. */

/* dst[0..n) = src[offset..offset+n) as float32 */
static inline void tlm_cpu_widen(float *dst, const void *src, size_t offset, size_t n,
                                 tlm_dtype dt) {
    if (dt == TLM_DTYPE_BF16) tlm_bf16_to_f32_n((const uint16_t *)src + offset, dst, n);
    else if (dt == TLM_DTYPE_F16) tlm_f16_to_f32_n((const uint16_t *)src + offset, dst, n);
    else memcpy(dst, (const float *)src + offset, n * sizeof(float));
}

/* dst[offset..offset+n) = src[0..n) rounded to dt */
static inline void tlm_cpu_narrow(void *dst, size_t offset, const float *src, size_t n,
                                  tlm_dtype dt) {
    if (dt == TLM_DTYPE_BF16) tlm_f32_to_bf16_n(src, (uint16_t *)dst + offset, n);
    else if (dt == TLM_DTYPE_F16) tlm_f32_to_f16_n(src, (uint16_t *)dst + offset, n);
    else memmove((float *)dst + offset, src, n * sizeof(float));
}

/* x[0..n) = x rounded to dt, kept in float32 (what storing to dt and reading back gives) */
static inline void tlm_cpu_round(float *x, size_t n, tlm_dtype dt) {
    if (dt == TLM_DTYPE_BF16)
        for (size_t i = 0; i < n; i++) x[i] = tlm_bf16_to_f32(tlm_f32_to_bf16(x[i]));
    else if (dt == TLM_DTYPE_F16)
        for (size_t i = 0; i < n; i++) x[i] = tlm_f16_to_f32(tlm_f32_to_f16(x[i]));
}

/* A row of a dt tensor for the float32 loops of an op, n elements from `offset`:
 *   tlm_cpu_row_in:    to read: the tensor's own floats (F32), or widened into buf;
 *   tlm_cpu_row_inout: the same, to be changed in place and then given to tlm_cpu_row_done;
 *   tlm_cpu_row_out:   to write: the tensor's own floats (F32), or buf (not initialised);
 *   tlm_cpu_row_done:  rounds a row_inout/row_out row back into the tensor (F32: nothing). */
static inline const float *tlm_cpu_row_in(const void *src, size_t offset, size_t n, tlm_dtype dt,
                                          float *buf) {
    if (dt == TLM_DTYPE_F32) return (const float *)src + offset;
    tlm_cpu_widen(buf, src, offset, n, dt);
    return buf;
}

static inline float *tlm_cpu_row_inout(void *p, size_t offset, size_t n, tlm_dtype dt, float *buf) {
    if (dt == TLM_DTYPE_F32) return (float *)p + offset;
    tlm_cpu_widen(buf, p, offset, n, dt);
    return buf;
}

static inline float *tlm_cpu_row_out(void *dst, size_t offset, tlm_dtype dt, float *buf) {
    return dt == TLM_DTYPE_F32 ? (float *)dst + offset : buf;
}

static inline void tlm_cpu_row_done(void *dst, size_t offset, const float *row, size_t n,
                                    tlm_dtype dt) {
    if (dt != TLM_DTYPE_F32 || row != (const float *)dst + offset)
        tlm_cpu_narrow(dst, offset, row, n, dt);
}

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
