/* embedding.cu — token embedding on the GPU: a row lookup, out[n,:] = wte[tokens[n],:], one block
 * per row with 16-byte copies; and its backward, dwte = 0 then a scatter-add of the output
 * gradient into the rows of the looked-up tokens (float atomics: rows repeated in `tokens` add
 * in no fixed order, so dwte may differ from the CPU's in the last bits). */
#include "cuda/cuda_common.cuh"

template <int VEC>
__global__ void embedding_forward_kernel(float *out, const int32_t *tokens, const float *wte, int C) {
    tlm_pdl_wait(); /* tlm_cuda_launch: the previous kernel has completed */
    /* out (N,C); tokens (N); wte (V,C); block n copies row tokens[n] */
    const size_t n = blockIdx.x;
    const float *src = wte + (size_t)tokens[n] * C;
    float *dst = out + n * C;
    for (int c = threadIdx.x * VEC; c < C; c += blockDim.x * VEC) {
        float r[VEC];
        tlm_load<VEC>(r, src + c);
        tlm_store<VEC>(dst + c, r);
    }
}

template <int VEC>
__global__ void embedding_backward_kernel(float *dwte, const float *dout, const int32_t *tokens, int C) {
    tlm_pdl_wait(); /* tlm_cuda_launch: the previous kernel has completed */
    /* dwte (V,C) += per row n: dwte[tokens[n],:] += dout[n,:] */
    const size_t n = blockIdx.x;
    float *dst = dwte + (size_t)tokens[n] * C;
    const float *src = dout + n * C;
    for (int c = threadIdx.x * VEC; c < C; c += blockDim.x * VEC) {
        float r[VEC];
        tlm_load<VEC>(r, src + c);
#pragma unroll
        for (int i = 0; i < VEC; i++) atomicAdd(dst + c + i, r[i]);
    }
}

void tlm_cuda_embedding_forward(tlm_backend *be, float *out, const int32_t *tokens, const float *wte, int N,
                                int C) {
    if (N <= 0) return;
    cudaStream_t st = tlm_cuda_stream(be);
    const bool vec = C % 4 == 0 && tlm_aligned16(out) && tlm_aligned16(wte); /* 16-byte rows */
    tlm_cuda_launch("embedding_forward", be, vec ? embedding_forward_kernel<4> : embedding_forward_kernel<1>, dim3(N),
                    dim3(tlm_cuda_row_threads(vec ? C / 4 : C, 256)), 0, st, out, tokens, wte, C);
}

void tlm_cuda_embedding_backward(tlm_backend *be, float *dwte, const float *dout, const int32_t *tokens, int N,
                                 int V, int C) {
    cudaStream_t st = tlm_cuda_stream(be);
    /* dwte = 0 first, unless accumulating over micro-batches (backend.h) */
    if (!be->accumulate_grads) TLM_CUDA_CHECK(cudaMemsetAsync(dwte, 0, (size_t)V * C * sizeof(float), st));
    if (N <= 0) return;
    const bool vec = C % 4 == 0 && tlm_aligned16(dout);
    tlm_cuda_launch("embedding_backward", be, vec ? embedding_backward_kernel<4> : embedding_backward_kernel<1>,
                    dim3(N), dim3(tlm_cuda_row_threads(vec ? C / 4 : C, 256)), 0, st, dwte, dout, tokens, C);
}
