/* reduce.cu — the mean of a float32 vector on the GPU (the mean loss, reduced on the device):
 * out[0] = (sum in float64) / n. One block of 1024 threads: each thread sums a fixed strided
 * subset in double, then a fixed tree over the threads, so the result is the same on every run
 * (the vector is small: one loss per token of the batch). */
#include "cuda/cuda_common.cuh"

#define REDUCE_THREADS 1024

__global__ void reduce_mean_kernel(float *out, const float *x, size_t n) {
    tlm_pdl_wait(); /* tlm_cuda_launch: the previous kernel has completed */
    /* out (1); x (n) */
    __shared__ double part[REDUCE_THREADS];
    double s = 0.0;
    for (size_t i = threadIdx.x; i < n; i += REDUCE_THREADS) s += (double)x[i];
    part[threadIdx.x] = s;
    __syncthreads();
    for (int half = REDUCE_THREADS / 2; half > 0; half >>= 1) {
        if ((int)threadIdx.x < half) part[threadIdx.x] += part[threadIdx.x + half];
        __syncthreads();
    }
    if (threadIdx.x == 0) out[0] = (float)(part[0] / (double)n);
}

void tlm_cuda_reduce_mean(tlm_backend *be, float *out, const float *x, size_t n) {
    tlm_cuda_launch("reduce_mean", be, reduce_mean_kernel, dim3(1), dim3(REDUCE_THREADS), 0, tlm_cuda_stream(be), out,
                    x, n);
    TLM_CUDA_CHECK_LAUNCH();
}
