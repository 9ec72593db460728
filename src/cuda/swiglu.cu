/* swiglu.cu — the elementwise part of the SwiGLU feed-forward on the GPU (Shazeer 2020, "GLU
 * Variants Improve Transformer", eq. 6): out = silu(a) * b with a = w1 x, b = w3 x side by side in
 * one (N, 2F) buffer, silu(a) = a sigmoid(a); and its backward,
 * [da | db] = [dout * b * silu'(a), dout * silu(a)], silu'(a) = s (1 + a (1 - s)), s = sigmoid(a).
 * Tensors of the mode's dtype (fp32, bf16, fp16), computed in fp32 from the widened inputs and
 * rounded back to nearest even. Grid-stride over the N*F outputs, 16-byte accesses where F is a
 * multiple of the vector (4 fp32, 8 bf16/fp16). */
#include "cuda/cuda_common.cuh"

__device__ __forceinline__ float sigmoid(float a) { return 1.0f / (1.0f + __expf(-a)); }

/* forward (dout == NULL): y (N,F) = silu(a) * b; backward: y (N,2F) = [da | db] from dout (N,F).
 * ab (N,2F) = [a | b]; total = N*F/VEC work items */
template <int VEC, typename T, bool BACKWARD>
__global__ void swiglu_kernel(T *y, const T *dout, const T *ab, int F, size_t total) {
    tlm_pdl_wait(); /* tlm_cuda_launch: the previous kernel has completed */
    const int fv = F / VEC;
    for (size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x; idx < total;
         idx += (size_t)gridDim.x * blockDim.x) {
        const size_t n = idx / fv;
        const int j = (int)(idx % fv) * VEC;
        const T *an = ab + n * 2 * F + j;
        float a[VEC], b[VEC];
        tlm_load<VEC>(a, an);
        tlm_load<VEC>(b, an + F);
        if constexpr (!BACKWARD) {
            float o[VEC];
#pragma unroll
            for (int i = 0; i < VEC; i++) o[i] = a[i] * sigmoid(a[i]) * b[i];
            tlm_store<VEC>(y + n * F + j, o);
        } else {
            float d[VEC], da[VEC], db[VEC];
            tlm_load<VEC>(d, dout + n * F + j);
#pragma unroll
            for (int i = 0; i < VEC; i++) {
                const float s = sigmoid(a[i]);
                const float silu = a[i] * s;
                da[i] = d[i] * b[i] * s * (1.0f + a[i] * (1.0f - s));
                db[i] = d[i] * silu;
            }
            T *dan = y + n * 2 * F + j;
            tlm_store<VEC>(dan, da);
            tlm_store<VEC>(dan + F, db);
        }
    }
}

template <bool BACKWARD>
static void swiglu_launch(tlm_backend *be, const char *op, void *y, const void *dout, const void *ab, int N, int F,
                          tlm_dtype dt) {
    if (N <= 0 || F <= 0) return;
    cudaStream_t st = tlm_cuda_stream(be);
    const int threads = 256;
    tlm_cuda_launch_vec(dt, op, F, [&](auto tag, auto vec) {
        using T = typename decltype(tag)::type;
        constexpr int V = decltype(vec)::value;
        const size_t total = (size_t)N * F / V;
        tlm_cuda_launch("swiglu", be, swiglu_kernel<V, T, BACKWARD>, dim3(tlm_cuda_grid(be, total, threads)),
                        dim3(threads), 0, st, static_cast<T *>(y), static_cast<const T *>(dout),
                        static_cast<const T *>(ab), F, total);
    }, y, BACKWARD ? dout : ab, ab);
}

void tlm_cuda_swiglu_forward(tlm_backend *be, void *out, const void *ab, int N, int F, tlm_dtype dt) {
    swiglu_launch<false>(be, __func__, out, NULL, ab, N, F, dt);
}

void tlm_cuda_swiglu_backward(tlm_backend *be, void *dab, const void *dout, const void *ab, int N, int F,
                              tlm_dtype dt) {
    swiglu_launch<true>(be, __func__, dab, dout, ab, N, F, dt);
}
