/* relu.cu — ReLU on the GPU, out = max(x, 0), and its backward, dx = 0 where x <= 0, else dout
 * (PyTorch's threshold_backward: a NaN x passes dout). Not part of the CS336 model: the ToyModel
 * of `tlm precision autocast` uses it. Tensors of the mode's dtype (fp32, bf16, fp16), kept in it
 * (autocast leaves ReLU alone); the result is exact in every dtype. NaN stays NaN. One grid-stride
 * kernel for both directions, 16-byte accesses (4 fp32, 8 bf16/fp16) when the pointers allow, a
 * scalar tail for the rest. */
#include "cuda/cuda_common.cuh"

/* forward (dout == NULL): y = max(x, 0) (x < 0 ? 0 : x keeps a NaN); backward: y = x <= 0 ? 0 : dout */
__device__ __forceinline__ float relu_at(float x, float d, bool backward) {
    return backward ? (x <= 0.0f ? 0.0f : d) : (x < 0.0f ? 0.0f : x);
}

template <int VEC, typename T, bool BACKWARD>
__global__ void relu_kernel(T *y, const T *dout, const T *x, size_t n) {
    /* y (n); dout (n) (backward only); x (n); VEC elements per work item, then the tail n % VEC */
    const size_t stride = (size_t)gridDim.x * blockDim.x, first = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    const size_t nv = n / VEC;
    for (size_t i = first; i < nv; i += stride) {
        float xv[VEC], d[VEC];
        tlm_load<VEC>(xv, x + i * VEC);
        if constexpr (BACKWARD) tlm_load<VEC>(d, dout + i * VEC);
#pragma unroll
        for (int k = 0; k < VEC; k++) d[k] = relu_at(xv[k], BACKWARD ? d[k] : 0.0f, BACKWARD);
        tlm_store<VEC>(y + i * VEC, d);
    }
    for (size_t i = nv * VEC + first; i < n; i += stride) {
        if constexpr (BACKWARD) y[i] = tlm_f32(x[i]) <= 0.0f ? tlm_round<T>(0.0f) : dout[i];
        else y[i] = tlm_round<T>(relu_at(tlm_f32(x[i]), 0.0f, false));
    }
}

template <bool BACKWARD>
static void relu_launch(tlm_backend *be, const char *op, void *y, const void *dout, const void *x, size_t n,
                        tlm_dtype dt) {
    if (n == 0) return;
    cudaStream_t st = tlm_cuda_stream(be);
    const int threads = 256;
    /* the kernel takes a scalar tail, so n need not be a multiple of the vector */
    tlm_cuda_launch_vec(dt, op, 0, [&](auto tag, auto vec) {
        using T = typename decltype(tag)::type;
        constexpr int V = decltype(vec)::value;
        relu_kernel<V, T, BACKWARD><<<tlm_cuda_grid(be, (n + V - 1) / V, threads), threads, 0, st>>>(
            static_cast<T *>(y), static_cast<const T *>(dout), static_cast<const T *>(x), n);
    }, y, BACKWARD ? dout : x, x);
}

void tlm_cuda_relu_forward(tlm_backend *be, void *out, const void *x, size_t n, tlm_dtype dt) {
    relu_launch<false>(be, __func__, out, NULL, x, n, dt);
}

void tlm_cuda_relu_backward(tlm_backend *be, void *dx, const void *dout, const void *x, size_t n, tlm_dtype dt) {
    relu_launch<true>(be, __func__, dx, dout, x, n, dt);
}
