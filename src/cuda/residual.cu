/* residual.cu — the residual connection on the GPU (He et al. 2016, "Deep Residual Learning",
 * eq. 1): out = x + y; and dst += src, which the backward uses to sum gradients. Grid-stride,
 * 16-byte accesses when every pointer is 16-byte aligned (a scalar tail for n % 4). Elementwise,
 * each element read before it is written by the same thread: out may be x or y. */
#include "cuda/cuda_common.cuh"

/* out[i] = x[i] + y[i] for i < n; float4 over the first n/4*4 elements when vec */
template <bool VEC4>
__global__ void add_kernel(float *out, const float *x, const float *y, size_t n) {
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    const size_t first = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    size_t done = 0;
    if constexpr (VEC4) {
        const size_t n4 = n / 4;
        for (size_t i = first; i < n4; i += stride) {
            float4 a = reinterpret_cast<const float4 *>(x)[i];
            float4 b = reinterpret_cast<const float4 *>(y)[i];
            reinterpret_cast<float4 *>(out)[i] = make_float4(a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w);
        }
        done = n4 * 4;
    }
    for (size_t i = done + first; i < n; i += stride) out[i] = x[i] + y[i];
}

static void add(tlm_backend *be, float *out, const float *x, const float *y, size_t n) {
    if (n == 0) return;
    cudaStream_t st = tlm_cuda_stream(be);
    const int threads = 256;
    if (tlm_aligned16(out) && tlm_aligned16(x) && tlm_aligned16(y)) {
        add_kernel<true><<<tlm_cuda_grid(be, (n + 3) / 4, threads), threads, 0, st>>>(out, x, y, n);
    } else {
        add_kernel<false><<<tlm_cuda_grid(be, n, threads), threads, 0, st>>>(out, x, y, n);
    }
}

void tlm_cuda_residual_forward(tlm_backend *be, float *out, const float *x, const float *y, size_t n) {
    add(be, out, x, y, n);
    TLM_CUDA_CHECK_LAUNCH();
}

void tlm_cuda_add_inplace(tlm_backend *be, float *dst, const float *src, size_t n) {
    add(be, dst, dst, src, n);
    TLM_CUDA_CHECK_LAUNCH();
}
