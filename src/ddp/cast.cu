/* cast.cu — the bf16 gradient staging's casts on a CUDA stream (ddp_internal.h): float32 to bf16
 * rounded to nearest even (__float2bfloat16_rn, the bits of core/convert.h's), bf16 to float32
 * exactly; grid-stride, one element per thread and step. On the communication stream, they keep the
 * compute stream free while a bucket is compressed and decompressed. */
#include <cuda_bf16.h>

#include "cuda/cuda_common.cuh"

extern "C" {
#include "ddp/ddp_internal.h"
}

__global__ void ddp_to_bf16(__nv_bfloat16 *dst, const float *src, size_t n) {
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) dst[i] = __float2bfloat16_rn(src[i]);
}

__global__ void ddp_from_bf16(float *dst, const __nv_bfloat16 *src, size_t n) {
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) dst[i] = __bfloat162float(src[i]);
}

extern "C" void tlm_ddp_cuda_cast(tlm_backend *be, tlm_stream *s, void *dst, const void *src, size_t n, bool to_bf16) {
    if (n == 0) return;
    const cudaStream_t st = s ? (cudaStream_t)s->handle : tlm_cuda_stream(be);
    const int threads = 256;
    const unsigned blocks = tlm_cuda_grid(be, n, threads);
    if (to_bf16) ddp_to_bf16<<<blocks, threads, 0, st>>>((__nv_bfloat16 *)dst, (const float *)src, n);
    else ddp_from_bf16<<<blocks, threads, 0, st>>>((float *)dst, (const __nv_bfloat16 *)src, n);
    TLM_CUDA_CHECK_LAUNCH();
}
