/* cast.c — the bf16 gradient staging's casts (ddp_internal.h): on the CPU in place of the caller
 * (host memory, OpenMP), on CUDA by cast.cu's kernels on the given stream. */
#include <stdbool.h>

#include "core/convert.h"
#include "ddp/ddp_internal.h"

void tlm_ddp_cast(tlm_backend *be, tlm_stream *s, void *dst, const void *src, size_t n, bool to_bf16) {
#ifdef TLM_HAVE_CUDA
    if (be->kind == TLM_DEVICE_CUDA) {
        tlm_ddp_cuda_cast(be, s, dst, src, n, to_bf16);
        return;
    }
#endif
    (void)s;
    const size_t chunk = 1 << 16;
    const long nchunks = (long)((n + chunk - 1) / chunk);
#pragma omp parallel for schedule(static)
    for (long c = 0; c < nchunks; c++) {
        const size_t at = (size_t)c * chunk, len = n - at < chunk ? n - at : chunk;
        if (to_bf16) tlm_f32_to_16_n((const float *)src + at, (uint16_t *)dst + at, len, 1);
        else tlm_16_to_f32_n((const uint16_t *)src + at, (float *)dst + at, len, 1);
    }
}
