/* cpu_ops.h — the CPU backend's ops (one tlm_cpu_<op> per op of tlm/ops.def, same signatures
 * and semantics as documented there), and what they share: TLM_CPU_GRAIN, the size
 * below which a loop stays on one thread; the dtype helpers (the ops compute in float32 and
 * read/write bf16/fp16 tensors through them); the scratch arena; tlm_cpu_expf, an exp that
 * vectorises.
 * Internal to src/cpu: everyone else reaches the ops through the dispatch (tlm/ops.h). */
#ifndef TLM_CPU_OPS_H
#define TLM_CPU_OPS_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <math.h>
#include <omp.h>
#include "tlm/backend.h"
#include "tlm/ops.h"
#include "core/convert.h"

/* Loops over fewer elements than this run on one thread (OpenMP `if` clause): starting a
 * parallel region costs microseconds. PyTorch uses the same grain (at::internal::GRAIN_SIZE). */
#define TLM_CPU_GRAIN 32768

/* The ops: tlm_cpu_<op> for every op of the list (tlm/ops.def), with its parameters after
 * `tlm_backend *be`; one file per op family (embedding.c, rmsnorm.c, layernorm.c, relu.c,
 * matmul.c, cast.c, rope.c, attention.c, attention_kv_cache.c, flash_attention.c, swiglu.c,
 * cross_entropy.c, reduce.c, adamw.c). */
#define TLM_OP(ID, name, cls, params, args, flops, bytes) void tlm_cpu_##name(tlm_backend *be, TLM_UNPAREN params);
#include "tlm/ops.def"
#undef TLM_OP

/* cast.c: whole-tensor conversions (parallel) for the GEMMs' operands */
void tlm_cpu_to_f32(float *dst, const void *src, size_t n, tlm_dtype dt);   /* widen */
void tlm_cpu_from_f32(void *dst, const float *src, size_t n, tlm_dtype dt); /* round */

/* flash_attention.c: the (d_head, dtype) the CPU's FlashAttention-2 takes: any d_head >= 1 in F32,
 * BF16, F16 (TLM_OK), else TLM_ERR_UNSUPPORTED with a message */
tlm_status tlm_cpu_flash_attention_check(int D, tlm_dtype dt);

/* ---- scratch (backend_cpu.c) -------------------------------------------------------------
 * One grow-only arena per backend (be->impl), 64-byte aligned, for the float32 copies that
 * the bf16/fp16 paths compute in; allocated through the tracked allocator (tag workspace, name
 * "cpu.scratch"), so it counts in the peaks and the memory events. tlm_cpu_scratch returns at
 * least `bytes`; the memory is the
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
    if (dt != TLM_DTYPE_F32) tlm_16_to_f32_n((const uint16_t *)src + offset, dst, n, dt == TLM_DTYPE_BF16);
    else memcpy(dst, (const float *)src + offset, n * sizeof(float));
}

/* dst[offset..offset+n) = src[0..n) rounded to dt */
static inline void tlm_cpu_narrow(void *dst, size_t offset, const float *src, size_t n,
                                  tlm_dtype dt) {
    if (dt != TLM_DTYPE_F32) tlm_f32_to_16_n(src, (uint16_t *)dst + offset, n, dt == TLM_DTYPE_BF16);
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
