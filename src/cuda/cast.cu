/* cast.cu — float32 to the mode's dtype on the GPU: dst (n) = round(src (n)), round to nearest
 * even (bf16: the top 16 bits of the rounded float32; fp16: IEEE binary16, subnormals kept,
 * overflow to inf; NaN stays NaN). The weights' low-precision copy is made with it once per
 * step, and gradients of the float32 residual stream become GEMM operands. Grid-stride, 8
 * elements per thread (two 16-byte loads, one 16-byte store) when both pointers are 16-byte
 * aligned, a scalar tail for n % 8. fp32 to fp32 is a copy. */
#include "cuda/cuda_common.cuh"

template <typename T, bool VEC8>
__global__ void cast_kernel(T *dst, const float *src, size_t n) {
    tlm_pdl_wait(); /* tlm_cuda_launch: the previous kernel has completed */
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    const size_t first = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    size_t done = 0;
    if constexpr (VEC8) {
        const size_t n8 = n / 8;
        for (size_t i = first; i < n8; i += stride) {
            float v[8];
            tlm_load<8>(v, src + i * 8); /* two 16-byte loads */
            tlm_store<8>(dst + i * 8, v);  /* one 16-byte store */
        }
        done = n8 * 8;
    }
    for (size_t i = done + first; i < n; i += stride) dst[i] = tlm_round<T>(src[i]);
}

void tlm_cuda_cast(tlm_backend *be, void *dst, const float *src, size_t n, tlm_dtype dt) {
    if (n == 0) return;
    cudaStream_t st = tlm_cuda_stream(be);
    if (dt == TLM_DTYPE_F32) {
        if (dst != (const void *)src)
            TLM_CUDA_CHECK(cudaMemcpyAsync(dst, src, n * sizeof(float), cudaMemcpyDeviceToDevice, st));
        return;
    }
    tlm_cuda_dispatch(dt, __func__, [&](auto tag) {
        using T = typename decltype(tag)::type;
        const int threads = 256;
        T *d = static_cast<T *>(dst);
        if (tlm_aligned16(dst) && tlm_aligned16(src)) {
            tlm_cuda_launch("cast", be, cast_kernel<T, true>, dim3(tlm_cuda_grid(be, (n + 7) / 8, threads)),
                            dim3(threads), 0, st, d, src, n);
        } else {
            tlm_cuda_launch("cast", be, cast_kernel<T, false>, dim3(tlm_cuda_grid(be, n, threads)), dim3(threads), 0,
                            st, d, src, n);
        }
    });
    TLM_CUDA_CHECK_LAUNCH();
}
