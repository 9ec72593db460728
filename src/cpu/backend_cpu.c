/* backend_cpu.c — the CPU backend: host memory (64-byte aligned), memcpy copies, the ops of
 * src/cpu (OpenMP loops, OpenBLAS SGEMMs) and their scratch arena. Always present; the reference
 * the CUDA backend must match, in every precision mode. Its ops run synchronously on the calling
 * thread: one queue, and events on the host clock (the generic ones of src/core/backend.c). */
#include "cpu/cpu_ops.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <omp.h>
#include <cblas.h>

#define CPU_ALIGNMENT 64 /* bytes: a cache line, one AVX-512 vector */

static const tlm_ops cpu_ops = {
#define TLM_OP(ID, name, cls, params, args, flops, bytes) .name = tlm_cpu_##name,
#include "tlm/ops.def"
#undef TLM_OP
};

/* be->impl: the scratch arena (cpu_ops.h), grown to the largest request through the tracked
 * allocator; the bf16/fp16 GEMMs keep float32 copies of their operands in it. */
typedef struct {
    void *scratch;
    size_t scratch_bytes;
} tlm_cpu;

void *tlm_cpu_scratch(tlm_backend *be, size_t bytes, const char *op) {
    tlm_cpu *cpu = be->impl;
    if (bytes <= cpu->scratch_bytes) return cpu->scratch;
    size_t rounded = (bytes + CPU_ALIGNMENT - 1) / CPU_ALIGNMENT * CPU_ALIGNMENT;
    if (rounded < bytes) tlm_fatal("cpu %s: scratch of %zu bytes overflows", op, bytes);
    tlm_free(be, cpu->scratch); /* grow-only: the old contents are not kept */
    cpu->scratch = tlm_alloc(be, rounded, TLM_MEM_WORKSPACE, "cpu.scratch");
    cpu->scratch_bytes = cpu->scratch ? rounded : 0;
    if (!cpu->scratch) tlm_fatal("cpu %s: %s", op, tlm_last_error());
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

/* every op in F32, BF16 and F16 (the generic check refuses other dtypes); FlashAttention-2 is the
 * fp32 reference, any d_head >= 1: REFERENCE */
static tlm_support cpu_supports(tlm_backend *be, tlm_op_id op, tlm_dtype dt, int d_head) {
    if (op != TLM_OP_FLASH_ATTENTION_FORWARD && op != TLM_OP_FLASH_ATTENTION_BACKWARD) return TLM_SUPPORT_FAST;
    return tlm_cpu_flash_attention_check(d_head, dt) == TLM_OK ? TLM_SUPPORT_REFERENCE : TLM_SUPPORT_NONE;
}

static void *cpu_raw_alloc(tlm_backend *be, size_t bytes) {
    size_t rounded = (bytes + CPU_ALIGNMENT - 1) / CPU_ALIGNMENT * CPU_ALIGNMENT;
    if (rounded < bytes) return NULL; /* overflow */
    return aligned_alloc(CPU_ALIGNMENT, rounded ? rounded : CPU_ALIGNMENT);
}

static void cpu_raw_free(tlm_backend *be, void *ptr) { free(ptr); }

static void cpu_copy(tlm_backend *be, void *dst, const void *src, size_t bytes) { memcpy(dst, src, bytes); }

static void cpu_memset_zero(tlm_backend *be, void *dst, size_t bytes) { memset(dst, 0, bytes); }

/* the scratch arena goes; the next op that needs one grows it again from nothing */
static void cpu_release_workspaces(tlm_backend *be) {
    tlm_cpu *cpu = be->impl;
    tlm_free(be, cpu->scratch);
    cpu->scratch = NULL;
    cpu->scratch_bytes = 0;
}

static void cpu_destroy(tlm_backend *be) {
    free(be->impl); /* the scratch itself was a tracked allocation, already freed */
    be->impl = NULL;
}

static const tlm_backend_iface cpu_iface = {
    .supports = cpu_supports,
    .raw_alloc = cpu_raw_alloc,
    .raw_free = cpu_raw_free,
    .copy_to_backend = cpu_copy,
    .copy_to_host = cpu_copy,
    .memset_zero = cpu_memset_zero,
    .destroy = cpu_destroy,
    .release_workspaces = cpu_release_workspaces,
    /* no .peak_tflops: the CPU's peak is not known (tlm_backend_peak_tflops gives 0: MFU n/a) */
};

tlm_status tlm_backend_cpu_create(tlm_backend **out, int threads) {
    *out = NULL;
    tlm_backend *be;
    TLM_TRY(tlm_backend_new(&be, "cpu", TLM_DEVICE_CPU, &cpu_iface, &cpu_ops));
    if (!(be->impl = calloc(1, sizeof(tlm_cpu)))) {
        tlm_backend_destroy(be);
        return tlm_fail(TLM_ERR_OUT_OF_MEMORY, "out of host memory creating the CPU backend");
    }
    if (threads > 0) {
        omp_set_num_threads(threads);
        openblas_set_num_threads(threads);
    }
    snprintf(be->description, sizeof be->description, "cpu (%d OpenMP threads, OpenBLAS)",
             threads > 0 ? threads : omp_get_max_threads());
    *out = be;
    return TLM_OK;
}

/* the entry tlm_backend_create finds by name (backend.h): one device, always present */
static tlm_status cpu_create(tlm_backend **out, int gpu, int cpu_threads) { return tlm_backend_cpu_create(out, cpu_threads); }
static int cpu_device_count(void) { return 1; }
const tlm_backend_entry tlm_backend_cpu_entry = {"cpu", cpu_create, cpu_device_count};
