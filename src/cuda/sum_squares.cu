/* sum_squares.cu — the sum of squares of a float32 vector on the GPU, in float64 (the global
 * gradient norm for clipping, ops.def). Two kernels, no atomics, so the result is the same bits on
 * every run: each block of SUMSQ_THREADS threads sums a grid-stride share of the vector (16-byte
 * loads when x is 16-byte aligned), each thread in float64, then a fixed tree over the block's
 * threads, into the backend's scratch (one partial per block; the grid depends on n only, at most
 * SUMSQ_MAX_BLOCKS); then one block adds the partials with the same fixed tree. */
#include "cuda/cuda_common.cuh"

#define SUMSQ_THREADS 256
#define SUMSQ_MAX_BLOCKS 1024

/* the fixed tree over a block's threads: part (blockDim.x, a power of two) -> part[0] */
__device__ __forceinline__ void block_tree_sum(double *part) {
    for (int half = (int)blockDim.x / 2; half > 0; half >>= 1) {
        if ((int)threadIdx.x < half) part[threadIdx.x] += part[threadIdx.x + half];
        __syncthreads();
    }
}

template <bool VEC4>
__global__ void sum_squares_partial_kernel(double *partial, const float *x, size_t n) {
    /* partial (gridDim.x) float64; x (n) float32 */
    __shared__ double part[SUMSQ_THREADS];
    double s = 0.0;
    const float4 *x4 = reinterpret_cast<const float4 *>(x);
    tlm_grid_stride_f32<VEC4>(
        n,
        [&](size_t i) {
            const float4 v = x4[i];
            s += (double)v.x * v.x + (double)v.y * v.y + (double)v.z * v.z + (double)v.w * v.w;
        },
        [&](size_t i) { s += (double)x[i] * x[i]; });
    part[threadIdx.x] = s;
    __syncthreads();
    block_tree_sum(part);
    if (threadIdx.x == 0) partial[blockIdx.x] = part[0];
}

__global__ void sum_squares_final_kernel(double *out, const double *partial, int nparts) {
    /* out (1) float64; partial (nparts <= SUMSQ_MAX_BLOCKS) */
    __shared__ double part[SUMSQ_MAX_BLOCKS];
    part[threadIdx.x] = (int)threadIdx.x < nparts ? partial[threadIdx.x] : 0.0;
    __syncthreads();
    block_tree_sum(part);
    if (threadIdx.x == 0) out[0] = part[0];
}

void tlm_cuda_sum_squares(tlm_backend *be, double *out, const float *x, size_t n) {
    cudaStream_t st = tlm_cuda_stream(be);
    tlm_cuda *cu = tlm_cuda_of(be);
    static_assert(SUMSQ_MAX_BLOCKS * sizeof(double) <= TLM_CUDA_SCRATCH_BYTES, "partials fit the scratch");
    double *partial = reinterpret_cast<double *>(cu->scratch);
    const bool vec4 = tlm_aligned16(x);
    const size_t items = vec4 ? (n + 3) / 4 : n; /* by n alone (and the alignment): not the device's SMs */
    size_t blocks = (items + SUMSQ_THREADS - 1) / SUMSQ_THREADS;
    blocks = blocks < 1 ? 1 : blocks > SUMSQ_MAX_BLOCKS ? SUMSQ_MAX_BLOCKS : blocks;
    if (vec4) sum_squares_partial_kernel<true><<<(unsigned)blocks, SUMSQ_THREADS, 0, st>>>(partial, x, n);
    else sum_squares_partial_kernel<false><<<(unsigned)blocks, SUMSQ_THREADS, 0, st>>>(partial, x, n);
    TLM_CUDA_CHECK_LAUNCH();
    sum_squares_final_kernel<<<1, SUMSQ_MAX_BLOCKS, 0, st>>>(out, partial, (int)blocks);
    TLM_CUDA_CHECK_LAUNCH();
}
