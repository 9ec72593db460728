/* swiglu.cuh — SwiGLU's elementwise arithmetic on the GPU, once, for every kernel that computes it:
 * the elementwise ops (swiglu.cu) and the GEMM epilogues that fuse it (gemm_swiglu.cu, CUTLASS).
 * One definition so that the fused and the unfused paths round alike: compiled with the same
 * flags, the same expression gives the same bits (the GPU test, test_gpu_ops.c, checks that).
 * silu(a) = a sigmoid(a) (Shazeer 2020, "GLU Variants Improve Transformer", eq. 6);
 * silu'(a) = s (1 + a (1 - s)), s = sigmoid(a). fp32 in, fp32 out. */
#ifndef TLM_CUDA_SWIGLU_CUH
#define TLM_CUDA_SWIGLU_CUH

__device__ __forceinline__ float tlm_swiglu_sigmoid(float a) { return 1.0f / (1.0f + __expf(-a)); }

/* out = silu(a) * b */
__device__ __forceinline__ float tlm_swiglu_forward_elem(float a, float b) { return a * tlm_swiglu_sigmoid(a) * b; }

/* da = d * b * silu'(a) */
__device__ __forceinline__ float tlm_swiglu_da(float d, float a, float b) {
    const float s = tlm_swiglu_sigmoid(a);
    return d * b * s * (1.0f + a * (1.0f - s));
}

/* db = d * silu(a) */
__device__ __forceinline__ float tlm_swiglu_db(float d, float a) {
    const float s = tlm_swiglu_sigmoid(a);
    const float silu = a * s;
    return d * silu;
}

#endif
