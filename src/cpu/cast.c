/* cast.c — float32 to the activation dtype on the CPU: the cast op (the weights' GEMM copy,
 * the residual stream's gradient as a GEMM operand), and the whole-tensor conversions that the
 * bf16/fp16 GEMMs use to compute in float32 (matmul.c). Rounding is to nearest even
 * (core/convert.h); widening is exact. Elementwise, in parallel over blocks of the tensor. */
#include "cpu/cpu_ops.h"

/* Elements per work item: whole blocks, so each thread converts contiguous memory. */
#define CAST_BLOCK 8192

void tlm_cpu_from_f32(void *dst, const float *src, size_t n, tlm_dtype dt) {
    /* dst (n) dt = round(src (n) float32) */
    if (dt == TLM_DTYPE_F32 && dst == (const void *)src) return;
    size_t nblocks = (n + CAST_BLOCK - 1) / CAST_BLOCK;
#pragma omp parallel for schedule(static) if (n >= TLM_CPU_GRAIN)
    for (size_t blk = 0; blk < nblocks; blk++) {
        size_t i0 = blk * CAST_BLOCK, count = n - i0 < CAST_BLOCK ? n - i0 : CAST_BLOCK;
        tlm_cpu_narrow(dst, i0, src + i0, count, dt);
    }
}

void tlm_cpu_to_f32(float *dst, const void *src, size_t n, tlm_dtype dt) {
    /* dst (n) float32 = src (n) dt, exactly */
    if (dt == TLM_DTYPE_F32 && (const void *)dst == src) return;
    size_t nblocks = (n + CAST_BLOCK - 1) / CAST_BLOCK;
#pragma omp parallel for schedule(static) if (n >= TLM_CPU_GRAIN)
    for (size_t blk = 0; blk < nblocks; blk++) {
        size_t i0 = blk * CAST_BLOCK, count = n - i0 < CAST_BLOCK ? n - i0 : CAST_BLOCK;
        tlm_cpu_widen(dst + i0, src, i0, count, dt);
    }
}

void tlm_cpu_cast(tlm_backend *be, void *dst, const float *src, size_t n, tlm_dtype dt) {
    tlm_cpu_from_f32(dst, src, n, dt); /* with dt == F32 a copy */
}
