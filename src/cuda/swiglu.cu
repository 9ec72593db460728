/* swiglu.cu — the elementwise part of the SwiGLU feed-forward on the GPU (Shazeer 2020, "GLU
 * Variants Improve Transformer", eq. 6): out = silu(a) * b with a = w1 x, b = w3 x side by side in
 * one (N, 2F) buffer, silu(a) = a sigmoid(a); and its backward,
 * [da | db] = [dout * b * silu'(a), dout * silu(a)], silu'(a) = s (1 + a (1 - s)), s = sigmoid(a).
 * Tensors of the mode's dtype (fp32, bf16, fp16), computed in fp32 from the widened inputs and
 * rounded back to nearest even. Grid-stride over the N*F outputs, 16-byte accesses where F is a
 * multiple of the vector (4 fp32, 8 bf16/fp16). */
#include "cuda/cuda_common.cuh"

__device__ __forceinline__ float sigmoid(float a) { return 1.0f / (1.0f + __expf(-a)); }

template <int VEC, typename T>
__global__ void swiglu_forward_kernel(T *out, const T *ab, int F, size_t total) {
    /* out (N,F); ab (N,2F) = [a | b]; total = N*F/VEC work items */
    const int fv = F / VEC;
    for (size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x; idx < total;
         idx += (size_t)gridDim.x * blockDim.x) {
        const size_t n = idx / fv;
        const int j = (int)(idx % fv) * VEC;
        const T *an = ab + n * 2 * F + j;
        float a[VEC], b[VEC], o[VEC];
        tlm_load<VEC>(a, an);
        tlm_load<VEC>(b, an + F);
#pragma unroll
        for (int i = 0; i < VEC; i++) o[i] = a[i] * sigmoid(a[i]) * b[i];
        tlm_store<VEC>(out + n * F + j, o);
    }
}

template <int VEC, typename T>
__global__ void swiglu_backward_kernel(T *dab, const T *dout, const T *ab, int F, size_t total) {
    /* dab (N,2F) = [da | db]; dout (N,F); ab (N,2F) = [a | b] */
    const int fv = F / VEC;
    for (size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x; idx < total;
         idx += (size_t)gridDim.x * blockDim.x) {
        const size_t n = idx / fv;
        const int j = (int)(idx % fv) * VEC;
        const T *an = ab + n * 2 * F + j;
        T *dan = dab + n * 2 * F + j;
        float a[VEC], b[VEC], d[VEC], da[VEC], db[VEC];
        tlm_load<VEC>(a, an);
        tlm_load<VEC>(b, an + F);
        tlm_load<VEC>(d, dout + n * F + j);
#pragma unroll
        for (int i = 0; i < VEC; i++) {
            const float s = sigmoid(a[i]);
            const float silu = a[i] * s;
            da[i] = d[i] * b[i] * s * (1.0f + a[i] * (1.0f - s));
            db[i] = d[i] * silu;
        }
        tlm_store<VEC>(dan, da);
        tlm_store<VEC>(dan + F, db);
    }
}

void tlm_cuda_swiglu_forward(tlm_backend *be, void *out, const void *ab, int N, int F, tlm_dtype dt) {
    if (N <= 0 || F <= 0) return;
    cudaStream_t st = tlm_cuda_stream(be);
    const int threads = 256;
    tlm_cuda_dispatch(dt, __func__, [&](auto tag) {
        using T = typename decltype(tag)::type;
        constexpr int VEC = tlm_vec16<T>();
        T *o = static_cast<T *>(out);
        const T *x = static_cast<const T *>(ab);
        if (F % VEC == 0 && tlm_aligned16(out) && tlm_aligned16(ab)) {
            const size_t total = (size_t)N * F / VEC;
            swiglu_forward_kernel<VEC, T><<<tlm_cuda_grid(be, total, threads), threads, 0, st>>>(o, x, F, total);
        } else {
            const size_t total = (size_t)N * F;
            swiglu_forward_kernel<1, T><<<tlm_cuda_grid(be, total, threads), threads, 0, st>>>(o, x, F, total);
        }
    });
    TLM_CUDA_CHECK_LAUNCH();
}

void tlm_cuda_swiglu_backward(tlm_backend *be, void *dab, const void *dout, const void *ab, int N, int F,
                              tlm_dtype dt) {
    if (N <= 0 || F <= 0) return;
    cudaStream_t st = tlm_cuda_stream(be);
    const int threads = 256;
    tlm_cuda_dispatch(dt, __func__, [&](auto tag) {
        using T = typename decltype(tag)::type;
        constexpr int VEC = tlm_vec16<T>();
        T *d = static_cast<T *>(dab);
        const T *g = static_cast<const T *>(dout), *x = static_cast<const T *>(ab);
        if (F % VEC == 0 && tlm_aligned16(dab) && tlm_aligned16(dout) && tlm_aligned16(ab)) {
            const size_t total = (size_t)N * F / VEC;
            swiglu_backward_kernel<VEC, T><<<tlm_cuda_grid(be, total, threads), threads, 0, st>>>(d, g, x, F, total);
        } else {
            const size_t total = (size_t)N * F;
            swiglu_backward_kernel<1, T><<<tlm_cuda_grid(be, total, threads), threads, 0, st>>>(d, g, x, F, total);
        }
    });
    TLM_CUDA_CHECK_LAUNCH();
}
