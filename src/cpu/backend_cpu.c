/* backend_cpu.c — the CPU backend: host memory (64-byte aligned), memcpy copies, and the ops
 * of src/cpu (OpenMP loops, OpenBLAS SGEMMs). Always present; the reference the CUDA backend
 * must match. */
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
    .matmul_forward = tlm_cpu_matmul_forward,
    .matmul_backward = tlm_cpu_matmul_backward,
    .rope_forward = tlm_cpu_rope_forward,
    .rope_backward = tlm_cpu_rope_backward,
    .attention_forward = tlm_cpu_attention_forward,
    .attention_backward = tlm_cpu_attention_backward,
    .swiglu_forward = tlm_cpu_swiglu_forward,
    .swiglu_backward = tlm_cpu_swiglu_backward,
    .residual_forward = tlm_cpu_residual_forward,
    .add_inplace = tlm_cpu_add_inplace,
    .cross_entropy_forward = tlm_cpu_cross_entropy_forward,
    .cross_entropy_backward = tlm_cpu_cross_entropy_backward,
    .adamw_step = tlm_cpu_adamw_step,
};

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
    free(be->impl);
    be->impl = NULL;
}

tlm_status tlm_backend_cpu_create(tlm_backend **out, int threads) {
    *out = NULL;
    tlm_backend *be = calloc(1, sizeof *be);
    if (!be) return tlm_fail(TLM_ERR_OUT_OF_MEMORY, "out of host memory creating the CPU backend");
    be->name = "cpu";
    be->device = TLM_DEVICE_CPU;
    be->ops = &cpu_ops;
    be->impl = NULL;
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
