/* cross_entropy.cu — softmax cross-entropy over V classes on the GPU, via the max-subtracted
 * log-sum-exp (the log-softmax of Goodfellow, Bengio & Courville 2016, "Deep Learning",
 * eq. 6.33): loss = logsumexp(logits) - logits[target], the max and the sum of exponentials found
 * in one pass (online normalizer, Milakov & Gimelshein 2018, Algorithm 3); its gradient
 * dloss * (softmax - onehot). Logits and their gradient are of the mode's dtype (fp32, bf16,
 * fp16), widened to fp32 for every step of the computation; the gradient is rounded back to
 * nearest even; losses and lse are float32. One block per row, 16-byte accesses where V is a
 * multiple of the vector (4 fp32, 8 bf16/fp16). */
#include <math.h>

#include "cuda/cuda_common.cuh"

template <int VEC, typename T>
__global__ void cross_entropy_forward_kernel(float *losses, float *lse, const T *logits,
                                             const int32_t *targets, int V) {
    tlm_pdl_wait(); /* tlm_cuda_launch: the previous kernel has completed */
    /* losses (N); lse (N); logits (N,V) T; targets (N); block n does row n */
    const size_t n = blockIdx.x;
    const T *l = logits + n * V;
    float m = -FLT_MAX, s = 0.0f;
    for (int j = threadIdx.x * VEC; j < V; j += blockDim.x * VEC) {
        float v[VEC];
        tlm_load<VEC>(v, l + j);
        float mx = m;
#pragma unroll
        for (int e = 0; e < VEC; e++) mx = fmaxf(mx, v[e]);
        s *= __expf(m - mx);
#pragma unroll
        for (int e = 0; e < VEC; e++) s += __expf(v[e] - mx);
        m = mx;
    }
    tlm_block_softmax_merge(m, s);
    if (threadIdx.x == 0) {
        const float logsumexp = m + (float)log((double)s);
        lse[n] = logsumexp;
        losses[n] = logsumexp - tlm_f32(l[targets[n]]);
    }
}

/* dlogits may be logits (in place): every element, the target's too, is read and then written by
 * the same thread. */
template <int VEC, typename T>
__global__ void cross_entropy_backward_kernel(T *dlogits, const T *logits, const float *lse,
                                              const int32_t *targets, int V, float dloss) {
    tlm_pdl_wait(); /* tlm_cuda_launch: the previous kernel has completed */
    /* dlogits (N,V) T; logits (N,V) T; lse (N); targets (N) */
    const size_t n = blockIdx.x;
    const T *l = logits + n * V;
    T *dl = dlogits + n * V;
    const float logsumexp = lse[n];
    const int target = targets[n];
    for (int j = threadIdx.x * VEC; j < V; j += blockDim.x * VEC) {
        float v[VEC];
        tlm_load<VEC>(v, l + j);
#pragma unroll
        for (int e = 0; e < VEC; e++) {
            const float p = __expf(v[e] - logsumexp);
            v[e] = dloss * (j + e == target ? p - 1.0f : p);
        }
        tlm_store<VEC>(dl + j, v);
    }
}

/* forward: losses, lse from logits; backward: dlogits from logits and lse (dloss per row) */
template <bool BACKWARD>
static void cross_entropy_launch(tlm_backend *be, const char *op, float *losses, float *lse_out, void *dlogits,
                                 const void *logits, const float *lse, const int32_t *targets, int N, int V, float dloss,
                                 tlm_dtype dt) {
    if (N <= 0) return;
    cudaStream_t st = tlm_cuda_stream(be);
    tlm_cuda_launch_vec(dt, op, V, [&](auto tag, auto vec) {
        using T = typename decltype(tag)::type;
        constexpr int W = decltype(vec)::value;
        const T *l = static_cast<const T *>(logits);
        if constexpr (BACKWARD)
            tlm_cuda_launch("cross_entropy_backward", be, cross_entropy_backward_kernel<W, T>, dim3(N),
                            dim3(tlm_cuda_row_threads(V / W, 512)), 0, st, static_cast<T *>(dlogits), l, lse, targets,
                            V, dloss);
        else
            tlm_cuda_launch("cross_entropy_forward", be, cross_entropy_forward_kernel<W, T>, dim3(N),
                            dim3(tlm_cuda_row_threads(V / W, 512)), 0, st, losses, lse_out, l, targets, V);
    }, logits, BACKWARD ? dlogits : logits);
}

void tlm_cuda_cross_entropy_forward(tlm_backend *be, float *losses, float *lse, const void *logits,
                                    const int32_t *targets, int N, int V, tlm_dtype dt) {
    cross_entropy_launch<false>(be, __func__, losses, lse, NULL, logits, NULL, targets, N, V, 0.0f, dt);
}

void tlm_cuda_cross_entropy_backward(tlm_backend *be, void *dlogits, const void *logits, const float *lse,
                                     const int32_t *targets, int N, int V, float dloss, tlm_dtype dt) {
    cross_entropy_launch<true>(be, __func__, NULL, NULL, dlogits, logits, lse, targets, N, V, dloss, dt);
}
