/* grad_unscale.cu — the unscaling half of dynamic loss scaling (fp16; PyTorch's GradScaler,
 * after Micikevicius et al. 2018, "Mixed Precision Training", sec. 3.2): grads (n) *= inv_scale
 * in place, and found_inf += the count of the elements that are inf or NaN after the multiply, so
 * the caller can skip the step and lower the scale. One grid-stride pass, 16-byte accesses when
 * the buffer is 16-byte aligned (a scalar tail); each warp that saw any adds its count to the
 * device scalar found_inf (one atomic). Nothing is copied back here: the caller reads found_inf
 * once the stream has drained (after combining it across ranks). The test for non-finite is on
 * the exponent bits, so it holds under --use_fast_math too. */
#include "cuda/cuda_common.cuh"

__device__ __forceinline__ unsigned not_finite(float v) {
    return (__float_as_uint(v) & 0x7f800000u) == 0x7f800000u;
}

template <bool VEC4>
__global__ void grad_unscale_kernel(float *g, size_t n, float inv_scale, float *found_inf) {
    unsigned bad = 0;
    float4 *g4 = reinterpret_cast<float4 *>(g);
    tlm_grid_stride_f32<VEC4>(
        n,
        [&](size_t i) {
            float4 v = g4[i];
            v.x *= inv_scale;
            v.y *= inv_scale;
            v.z *= inv_scale;
            v.w *= inv_scale;
            bad += not_finite(v.x) + not_finite(v.y) + not_finite(v.z) + not_finite(v.w);
            g4[i] = v;
        },
        [&](size_t i) {
            const float v = g[i] * inv_scale;
            bad += not_finite(v);
            g[i] = v;
        });
    /* block total: a warp sum, then one atomic per warp that saw any */
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) bad += __shfl_xor_sync(0xffffffffu, bad, o);
    if ((threadIdx.x & 31) == 0 && bad) atomicAdd(found_inf, (float)bad);
}

void tlm_cuda_grad_unscale(tlm_backend *be, float *grads, size_t n, float inv_scale, float *found_inf) {
    if (n == 0) return;
    cudaStream_t st = tlm_cuda_stream(be);
    const int threads = 256;
    if (tlm_aligned16(grads)) {
        grad_unscale_kernel<true><<<tlm_cuda_grid(be, (n + 3) / 4, threads), threads, 0, st>>>(grads, n, inv_scale,
                                                                                             found_inf);
    } else {
        grad_unscale_kernel<false><<<tlm_cuda_grid(be, n, threads), threads, 0, st>>>(grads, n, inv_scale, found_inf);
    }
    TLM_CUDA_CHECK_LAUNCH();
}
