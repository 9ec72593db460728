/* backend_cpu.c — the CPU backend: host memory (64-byte aligned), memcpy copies, the ops of
 * src/cpu (OpenMP loops, OpenBLAS SGEMMs) and their scratch arena. Always present; the
 * reference the CUDA backend must match, in every precision mode. */
#include "cpu/cpu_ops.h"

#include <stdlib.h>
#include <string.h>
#include <omp.h>
#include <cblas.h>

#define CPU_ALIGNMENT 64 /* bytes: a cache line, one AVX-512 vector */

static const tlm_ops cpu_ops = {
    .embedding_forward = tlm_cpu_embedding_forward,
    .embedding_backward = tlm_cpu_embedding_backward,
    .rmsnorm_forward = tlm_cpu_rmsnorm_forward,
    .rmsnorm_backward = tlm_cpu_rmsnorm_backward,
    .layernorm_forward = tlm_cpu_layernorm_forward,
    .layernorm_backward = tlm_cpu_layernorm_backward,
    .relu_forward = tlm_cpu_relu_forward,
    .relu_backward = tlm_cpu_relu_backward,
    .matmul_forward = tlm_cpu_matmul_forward,
    .matmul_backward = tlm_cpu_matmul_backward,
    .cast = tlm_cpu_cast,
    .rope_forward = tlm_cpu_rope_forward,
    .rope_backward = tlm_cpu_rope_backward,
    .attention_forward = tlm_cpu_attention_forward,
    .attention_backward = tlm_cpu_attention_backward,
    .flash_attention_forward = tlm_cpu_flash_attention_forward,
    .flash_attention_backward = tlm_cpu_flash_attention_backward,
    .flash_attention_check = tlm_cpu_flash_attention_check,
    .swiglu_forward = tlm_cpu_swiglu_forward,
    .swiglu_backward = tlm_cpu_swiglu_backward,
    .cross_entropy_forward = tlm_cpu_cross_entropy_forward,
    .cross_entropy_backward = tlm_cpu_cross_entropy_backward,
    .adamw_step = tlm_cpu_adamw_step,
    .grad_unscale = tlm_cpu_grad_unscale,
};

/* be->impl: the scratch arena (cpu_ops.h), grown to the largest request, freed by destroy.
 * Host memory private to the backend, outside the tracked allocator, like a BLAS library's
 * own buffers: the bf16/fp16 GEMMs keep float32 copies of their operands in it. */
typedef struct {
    void *scratch;
    size_t scratch_bytes;
} tlm_cpu;

void *tlm_cpu_scratch(tlm_backend *be, size_t bytes, const char *op) {
    tlm_cpu *cpu = be->impl;
    if (bytes <= cpu->scratch_bytes) return cpu->scratch;
    size_t rounded = (bytes + CPU_ALIGNMENT - 1) / CPU_ALIGNMENT * CPU_ALIGNMENT;
    if (rounded < bytes) tlm_fatal("cpu %s: scratch of %zu bytes overflows", op, bytes);
    free(cpu->scratch); /* grow-only: the old contents are not kept */
    cpu->scratch = aligned_alloc(CPU_ALIGNMENT, rounded);
    cpu->scratch_bytes = cpu->scratch ? rounded : 0;
    if (!cpu->scratch) tlm_fatal("cpu %s: out of host memory for %zu bytes of scratch", op, bytes);
    return cpu->scratch;
}

tlm_cpu_thread_scratch tlm_cpu_scratch_per_thread(tlm_backend *be, size_t floats, const char *op) {
    tlm_cpu_thread_scratch s = {NULL, 0, 0};
    if (floats == 0) return s;
    const size_t per_line = CPU_ALIGNMENT / sizeof(float);
    s.stride = (floats + per_line - 1) / per_line * per_line;
    s.threads = omp_get_max_threads(); /* a parallel region has at most this many */
    s.base = tlm_cpu_scratch(be, s.stride * (size_t)s.threads * sizeof(float), op);
    return s;
}

static void *cpu_raw_alloc(tlm_backend *be, size_t bytes) {
    size_t rounded = (bytes + CPU_ALIGNMENT - 1) / CPU_ALIGNMENT * CPU_ALIGNMENT;
    if (rounded < bytes) return NULL; /* overflow */
    return aligned_alloc(CPU_ALIGNMENT, rounded ? rounded : CPU_ALIGNMENT);
}

static void cpu_raw_free(tlm_backend *be, void *ptr) { free(ptr); }

static void cpu_copy(tlm_backend *be, void *dst, const void *src, size_t bytes) {
    memcpy(dst, src, bytes);
}

static void cpu_memset_zero(tlm_backend *be, void *dst, size_t bytes) { memset(dst, 0, bytes); }

static void cpu_synchronize(tlm_backend *be) {} /* the CPU ops are synchronous */

static void cpu_destroy(tlm_backend *be) {
    tlm_cpu *cpu = be->impl;
    if (cpu) free(cpu->scratch);
    free(cpu);
    be->impl = NULL;
}

tlm_status tlm_backend_cpu_create(tlm_backend **out, int threads) {
    *out = NULL;
    tlm_backend *be = calloc(1, sizeof *be);
    tlm_cpu *cpu = calloc(1, sizeof *cpu);
    if (!be || !cpu) {
        free(be);
        free(cpu);
        return tlm_fail(TLM_ERR_OUT_OF_MEMORY, "out of host memory creating the CPU backend");
    }
    be->name = "cpu";
    be->device = TLM_DEVICE_CPU;
    be->ops = &cpu_ops;
    be->impl = cpu;
    be->precision = TLM_PRECISION_FP32;
    be->raw_alloc = cpu_raw_alloc;
    be->raw_free = cpu_raw_free;
    be->destroy = cpu_destroy;
    be->copy_to_backend = cpu_copy;
    be->copy_to_host = cpu_copy;
    be->memset_zero = cpu_memset_zero;
    be->synchronize = cpu_synchronize;
    if (threads > 0) {
        omp_set_num_threads(threads);
        openblas_set_num_threads(threads);
    }
    *out = be;
    return TLM_OK;
}
