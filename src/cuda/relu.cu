/* relu.cu — ReLU on the GPU, out = max(x, 0), and its backward, dx = 0 where x <= 0, else dout
 * (PyTorch's threshold_backward: a NaN x passes dout). Not part of the CS336 model: the ToyModel
 * of `tlm precision autocast` uses it. Tensors of the mode's dtype (fp32, bf16, fp16), kept in it
 * (autocast leaves ReLU alone); the result is exact in every dtype. NaN stays NaN. Grid-stride,
 * 16-byte accesses (4 fp32, 8 bf16/fp16) when the pointers allow, a scalar tail for the rest. */
#include "cuda/cuda_common.cuh"

template <int VEC, typename T>
__global__ void relu_forward_kernel(T *out, const T *x, size_t n) {
    /* out (n) = max(x (n), 0); VEC elements per work item, then the tail n % VEC one by one */
    const size_t stride = (size_t)gridDim.x * blockDim.x, first = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    const size_t nv = n / VEC;
    for (size_t i = first; i < nv; i += stride) {
        float v[VEC];
        tlm_load<VEC>(v, x + i * VEC);
#pragma unroll
        for (int k = 0; k < VEC; k++) v[k] = v[k] < 0.0f ? 0.0f : v[k];
        tlm_store<VEC>(out + i * VEC, v);
    }
    for (size_t i = nv * VEC + first; i < n; i += stride) {
        const float v = tlm_f32(x[i]);
        out[i] = tlm_round<T>(v < 0.0f ? 0.0f : v);
    }
}

template <int VEC, typename T>
__global__ void relu_backward_kernel(T *dx, const T *dout, const T *x, size_t n) {
    /* dx (n) = x <= 0 ? 0 : dout */
    const size_t stride = (size_t)gridDim.x * blockDim.x, first = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    const size_t nv = n / VEC;
    for (size_t i = first; i < nv; i += stride) {
        float xv[VEC], d[VEC];
        tlm_load<VEC>(xv, x + i * VEC);
        tlm_load<VEC>(d, dout + i * VEC);
#pragma unroll
        for (int k = 0; k < VEC; k++) d[k] = xv[k] <= 0.0f ? 0.0f : d[k];
        tlm_store<VEC>(dx + i * VEC, d);
    }
    for (size_t i = nv * VEC + first; i < n; i += stride)
        dx[i] = tlm_f32(x[i]) <= 0.0f ? tlm_round<T>(0.0f) : dout[i];
}

void tlm_cuda_relu_forward(tlm_backend *be, void *out, const void *x, size_t n, tlm_dtype dt) {
    if (n == 0) return;
    cudaStream_t st = tlm_cuda_stream(be);
    const int threads = 256;
    tlm_cuda_dispatch(dt, __func__, [&](auto tag) {
        using T = typename decltype(tag)::type;
        constexpr int VEC = tlm_vec16<T>();
        T *o = static_cast<T *>(out);
        const T *xi = static_cast<const T *>(x);
        if (tlm_aligned16(out) && tlm_aligned16(x)) {
            relu_forward_kernel<VEC, T><<<tlm_cuda_grid(be, (n + VEC - 1) / VEC, threads), threads, 0, st>>>(o, xi, n);
        } else {
            relu_forward_kernel<1, T><<<tlm_cuda_grid(be, n, threads), threads, 0, st>>>(o, xi, n);
        }
    });
    TLM_CUDA_CHECK_LAUNCH();
}

void tlm_cuda_relu_backward(tlm_backend *be, void *dx, const void *dout, const void *x, size_t n, tlm_dtype dt) {
    if (n == 0) return;
    cudaStream_t st = tlm_cuda_stream(be);
    const int threads = 256;
    tlm_cuda_dispatch(dt, __func__, [&](auto tag) {
        using T = typename decltype(tag)::type;
        constexpr int VEC = tlm_vec16<T>();
        T *g = static_cast<T *>(dx);
        const T *d = static_cast<const T *>(dout), *xi = static_cast<const T *>(x);
        if (tlm_aligned16(dx) && tlm_aligned16(dout) && tlm_aligned16(x)) {
            relu_backward_kernel<VEC, T><<<tlm_cuda_grid(be, (n + VEC - 1) / VEC, threads), threads, 0, st>>>(g, d, xi,
                                                                                                           n);
        } else {
            relu_backward_kernel<1, T><<<tlm_cuda_grid(be, n, threads), threads, 0, st>>>(g, d, xi, n);
        }
    });
    TLM_CUDA_CHECK_LAUNCH();
}
