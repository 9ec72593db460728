/* sum_squares.cu — the sum of squares of a float32 vector on the GPU, in float64 (the global
 * gradient norm for clipping, ops.def). Two kernels, no atomics, so the result is the same bits on
 * every run: each block of SUMSQ_THREADS threads sums a grid-stride share of the vector (16-byte
 * loads when x is 16-byte aligned), each thread in float64, then a fixed tree over the block's
 * threads, into the backend's scratch (one partial per block; the grid depends on n only, at most
 * SUMSQ_MAX_BLOCKS); then one block adds the partials with the same fixed tree.
 *
 * Beside the compute stream (sum_squares.h: the gradient norm during the backward pass, on a
 * background stream whose blocks fill the SMs the compute stream's kernels leave idle) the partial
 * sums are of short blocks instead: each block one contiguous chunk of SUMSQ_CHUNK floats (32 KiB),
 * so a block the GPU started in a gap between two compute kernels holds its SM for microseconds,
 * not for a share of the whole vector; the final block adds the chunks' sums, thread t those of
 * chunks t, t + 1024, ... in order, then the tree. Also a function of n (and the alignment) only. */
#include "cuda/cuda_common.cuh"
#include "cuda/sum_squares.h"

#define SUMSQ_THREADS 256
#define SUMSQ_MAX_BLOCKS 1024
#define SUMSQ_FINAL_THREADS 1024
#define SUMSQ_CHUNK 8192 /* floats: 8 float4 per thread of a 256-thread block */

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

/* block b: the chunk [b * SUMSQ_CHUNK, +SUMSQ_CHUNK) of x (n), cut at n; partial (gridDim.x) */
template <bool VEC4>
__global__ void sum_squares_chunk_kernel(double *partial, const float *x, size_t n) {
    __shared__ double part[SUMSQ_THREADS];
    const size_t base = (size_t)blockIdx.x * SUMSQ_CHUNK;
    const size_t len = n - base < SUMSQ_CHUNK ? n - base : SUMSQ_CHUNK;
    double s = 0.0;
    size_t done = 0;
    if constexpr (VEC4) {
        const float4 *x4 = reinterpret_cast<const float4 *>(x + base);
        const size_t len4 = len / 4;
        for (size_t i = threadIdx.x; i < len4; i += SUMSQ_THREADS) {
            const float4 v = x4[i];
            s += (double)v.x * v.x + (double)v.y * v.y + (double)v.z * v.z + (double)v.w * v.w;
        }
        done = len4 * 4;
    }
    for (size_t i = done + threadIdx.x; i < len; i += SUMSQ_THREADS) s += (double)x[base + i] * x[base + i];
    part[threadIdx.x] = s;
    __syncthreads();
    block_tree_sum(part);
    if (threadIdx.x == 0) partial[blockIdx.x] = part[0];
}

__global__ void sum_squares_final_kernel(double *out, const double *partial, size_t nparts) {
    /* out (1) float64; partial (nparts): thread t adds parts t, t + blockDim.x, ... in order (one each
     * for nparts <= blockDim.x), then the tree */
    __shared__ double part[SUMSQ_FINAL_THREADS];
    double s = 0.0;
    for (size_t i = threadIdx.x; i < nparts; i += blockDim.x) s += partial[i];
    part[threadIdx.x] = s;
    __syncthreads();
    block_tree_sum(part);
    if (threadIdx.x == 0) out[0] = part[0];
}

void tlm_cuda_sum_squares(tlm_backend *be, double *out, const float *x, size_t n) {
    cudaStream_t st = tlm_cuda_stream(be);
    tlm_cuda *cu = tlm_cuda_of(be);
    static_assert(SUMSQ_MAX_BLOCKS * sizeof(double) <= TLM_CUDA_SCRATCH_BYTES, "partials fit the scratch");
    static_assert(SUMSQ_MAX_BLOCKS <= SUMSQ_FINAL_THREADS, "one partial per thread of the final block");
    double *partial = reinterpret_cast<double *>(cu->scratch);
    const bool vec4 = tlm_aligned16(x);
    const size_t items = vec4 ? (n + 3) / 4 : n; /* by n alone (and the alignment): not the device's SMs */
    size_t blocks = (items + SUMSQ_THREADS - 1) / SUMSQ_THREADS;
    blocks = blocks < 1 ? 1 : blocks > SUMSQ_MAX_BLOCKS ? SUMSQ_MAX_BLOCKS : blocks;
    if (vec4) sum_squares_partial_kernel<true><<<(unsigned)blocks, SUMSQ_THREADS, 0, st>>>(partial, x, n);
    else sum_squares_partial_kernel<false><<<(unsigned)blocks, SUMSQ_THREADS, 0, st>>>(partial, x, n);
    TLM_CUDA_CHECK_LAUNCH();
    sum_squares_final_kernel<<<1, SUMSQ_FINAL_THREADS, 0, st>>>(out, partial, blocks);
    TLM_CUDA_CHECK_LAUNCH();
}

extern "C" size_t tlm_cuda_sum_squares_partial_bytes(size_t n) {
    const size_t chunks = (n + SUMSQ_CHUNK - 1) / SUMSQ_CHUNK;
    return (chunks < 1 ? 1 : chunks) * sizeof(double);
}

extern "C" void tlm_cuda_sum_squares_on(tlm_backend *be, tlm_stream *s, double *out, const float *x, size_t n,
                                        double *partial) {
    const cudaStream_t st = s ? (cudaStream_t)s->handle : tlm_cuda_stream(be);
    const size_t chunks = tlm_cuda_sum_squares_partial_bytes(n) / sizeof(double);
    if (chunks > 0x7fffffff) tlm_fatal("sum_squares_on: %zu floats is more than the grid's %d chunks", n, 0x7fffffff);
    const unsigned grid = (unsigned)chunks;
    if (n > 0 && tlm_aligned16(x)) sum_squares_chunk_kernel<true><<<grid, SUMSQ_THREADS, 0, st>>>(partial, x, n);
    else sum_squares_chunk_kernel<false><<<grid, SUMSQ_THREADS, 0, st>>>(partial, x, n);
    TLM_CUDA_CHECK_LAUNCH();
    sum_squares_final_kernel<<<1, SUMSQ_FINAL_THREADS, 0, st>>>(out, partial, chunks);
    TLM_CUDA_CHECK_LAUNCH();
}
