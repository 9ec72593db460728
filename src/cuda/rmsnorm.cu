/* rmsnorm.cu — RMSNorm on the GPU (Zhang & Sennrich 2019, "Root Mean Square Layer
 * Normalization", eq. 4): out = x * rstd * w, rstd = 1/sqrt(mean(x^2) + eps), in fp32, and its
 * backward. out, dout and dx_lp are of the mode's dtype (fp32, bf16, fp16: rounded to nearest even
 * from fp32); x, w, rstd, dx, dresid, dw float32. Forward: one block per row, 16-byte accesses,
 * warp-shuffle reductions.
 *
 * Backward, one kernel, with r = rstd[n], xhat = x r, g = dout w:  dx = dresid + r (g - xhat
 * mean(g xhat)), dx_lp = round(dx) (the residual add and the cast to the next GEMM's operand, which
 * were an op each, fused in), dw = sum_n dout xhat. A block of G rows of threads walks a span of
 * rows, G at once, each row of threads adding its rows' dout xhat into per-column sums in shared
 * memory; the block writes their sum (over the G, in order) as one row of partial sums (scratch).
 * The last blocks to finish (their arrival counted in the backend's `sync`) then sum the partials
 * of each column in a fixed order, in double, a slab of columns each: dw is deterministic, with no
 * second kernel, and x, dout are read once. */
#include "cuda/cuda_common.cuh"

template <int VEC, typename T>
__global__ void rmsnorm_forward_kernel(T *out, float *rstd, const float *x, const float *w, int C, float eps) {
    /* out (N,C) T; rstd (N); x (N,C); w (C); block n does row n */
    const size_t n = blockIdx.x;
    const float *xn = x + n * C;
    T *on = out + n * C;
    const float sum_sq = tlm_row_sum<VEC>(xn, C, [](float v) { return v * v; });
    const float r = (float)(1.0 / sqrt((double)sum_sq / C + (double)eps)); /* IEEE, as the CPU */
    for (int c = threadIdx.x * VEC; c < C; c += blockDim.x * VEC) {
        float xv[VEC], wv[VEC], o[VEC];
        tlm_load<VEC>(xv, xn + c); /* the block read it just now: an L1 hit */
        tlm_load<VEC>(wv, w + c);
#pragma unroll
        for (int i = 0; i < VEC; i++) o[i] = xv[i] * r * wv[i];
        tlm_store<VEC>(on + c, o);
    }
    if (threadIdx.x == 0) rstd[n] = r;
}

/* dw (C) from the partial sums (nparts = gridDim.x, C) that every block of the grid writes, in the
 * grid's last `slabs` blocks to arrive: each sums the partials of a slab of columns, 32 columns at a
 * time, its warps as row lanes (lane k sums partial rows k, k + lanes, ... in double), then lane 0
 * adds the lanes in order. The order is fixed by the grid and the block's size, not by which blocks
 * arrive last: dw has the same bits on every run. sync (2): arrivals, departures; 0 on entry, and
 * the last block to depart sets them to 0 again. A slab's block waits for every block to arrive: the
 * blocks it waits for run or will, as fewer than half the SMs' worth of blocks ever wait (slabs <=
 * num_sms / 2, set by the launcher). The barrier is cooperative groups' grid sync, for the last
 * blocks only: each block's writes, __syncthreads, a fence and the count by one thread; the waiting
 * thread's fence after it sees all arrivals, then __syncthreads. */
__device__ void rmsnorm_dw_tail(float *dw, const float *partial, int C, unsigned *sync, int slabs) {
    __shared__ int ticket;
    __shared__ double lane_sum[32][33];
    const int tid = threadIdx.y * blockDim.x + threadIdx.x, nthreads = blockDim.x * blockDim.y;
    volatile unsigned *arrived = sync;
    __syncthreads(); /* the block's partial sums are written */
    if (tid == 0) {
        __threadfence();
        ticket = (int)atomicAdd(&sync[0], 1u);
    }
    __syncthreads();
    const int slab = ticket - ((int)gridDim.x - slabs);
    if (slab < 0) return;
    if (tid == 0) {
        while (*arrived < gridDim.x) __nanosleep(32);
        __threadfence();
    }
    __syncthreads();
    const int pieces = (C + 31) / 32, p0 = slab * pieces / slabs, p1 = (slab + 1) * pieces / slabs;
    const int lane = tid >> 5, lanes = nthreads >> 5, col = tid & 31;
    for (int p = p0; p < p1; p++) {
        const int c = p * 32 + col;
        double acc = 0.0;
        if (c < C)
            for (int b = lane; b < (int)gridDim.x; b += lanes) acc += (double)__ldcg(partial + (size_t)b * C + c);
        lane_sum[lane][col] = acc;
        __syncthreads();
        if (lane == 0 && c < C) {
            double total = 0.0;
            for (int k = 0; k < lanes; k++) total += lane_sum[k][col];
            dw[c] = (float)total;
        }
        __syncthreads();
    }
    if (tid == 0 && atomicAdd(&sync[1], 1u) == (unsigned)slabs - 1) { /* every slab's block is past its wait */
        atomicExch(&sync[0], 0u);
        atomicExch(&sync[1], 0u);
    }
}

template <int VEC, typename T>
__global__ void __launch_bounds__(512)
    rmsnorm_backward_kernel(float *dx, T *dx_lp, float *dw, const float *dresid, const T *dout, const float *x,
                            const float *w, const float *rstd, int N, int C, int rows_per_block, float *partial,
                            unsigned *sync, int slabs) {
    /* dx (N,C) =; dx_lp (N,C) = or NULL; dw (C) =; dresid (N,C) or NULL (zeros); dout (N,C) T; x (N,C);
     * w (C); rstd (N); partial (gridDim.x, C) scratch; block (threads per row, G rows) */
    extern __shared__ float dw_acc[]; /* (G, C): row group y's sum of dout * xhat; column c = v VEC + i
                                         at [y C + i C/VEC + v], so a warp's threads hit distinct banks */
    const int CV = C / VEC;
    float *acc = dw_acc + (size_t)threadIdx.y * C;
    /* each thread owns the columns c = threadIdx.x*VEC + j*blockDim.x*VEC of its group's sums */
    for (int c = threadIdx.x * VEC; c < C; c += blockDim.x * VEC)
#pragma unroll
        for (int i = 0; i < VEC; i++) acc[i * CV + c / VEC] = 0.0f;

    const int n0 = blockIdx.x * rows_per_block;
    const int n1 = min(N, n0 + rows_per_block);
    for (int first = n0; first < n1; first += blockDim.y) { /* every group the same trips (barriers) */
        const int n = first + threadIdx.y;
        const bool active = n < n1;
        const float *xn = x + (size_t)n * C;
        const T *dn = dout + (size_t)n * C;
        const float r = active ? rstd[n] : 0.0f;
        float sum_g_xhat = 0.0f;
        if (active)
            tlm_row_for_each<VEC>(xn, dn, w, C, [&](int c, const float *xv, const float *dv, const float *wv) {
#pragma unroll
                for (int i = 0; i < VEC; i++) sum_g_xhat += dv[i] * wv[i] * (xv[i] * r);
            });
        const float mean_g_xhat = tlm_block_sum(sum_g_xhat) / (float)C; /* over the group */
        if (!active) continue;
        tlm_row_for_each<VEC>(xn, dn, w, C, [&](int c, const float *xv, const float *dv, const float *wv) { /* L1 hits */
            float dxv[VEC];
            if (dresid) {
                tlm_load<VEC>(dxv, dresid + (size_t)n * C + c);
            } else {
#pragma unroll
                for (int i = 0; i < VEC; i++) dxv[i] = 0.0f;
            }
#pragma unroll
            for (int i = 0; i < VEC; i++) {
                const float g = dv[i] * wv[i], xhat = xv[i] * r;
                dxv[i] += r * (g - xhat * mean_g_xhat);
                acc[i * CV + c / VEC] += dv[i] * xhat;
            }
            tlm_store<VEC>(dx + (size_t)n * C + c, dxv);
            if (dx_lp) tlm_store<VEC>(dx_lp + (size_t)n * C + c, dxv);
        });
    }
    __syncthreads();
    const int tid = threadIdx.y * blockDim.x + threadIdx.x, nthreads = blockDim.x * blockDim.y;
    float *part = partial + (size_t)blockIdx.x * C;
    for (int c = tid; c < C; c += nthreads) {
        const int at = (c % VEC) * CV + c / VEC;
        float sum = 0.0f;
        for (int y = 0; y < (int)blockDim.y; y++) sum += dw_acc[(size_t)y * C + at];
        part[c] = sum;
    }
    rmsnorm_dw_tail(dw, partial, C, sync, slabs);
}

void tlm_cuda_rmsnorm_forward(tlm_backend *be, void *out, float *rstd, const float *x, const float *w, int N,
                              int C, float eps, tlm_dtype dt) {
    if (N <= 0) return;
    cudaStream_t st = tlm_cuda_stream(be);
    /* 16-byte accesses of out; x, w read 16 or 32 bytes */
    tlm_cuda_launch_vec(dt, __func__, C, [&](auto tag, auto vec) {
        using T = typename decltype(tag)::type;
        constexpr int V = decltype(vec)::value;
        rmsnorm_forward_kernel<V, T><<<N, tlm_cuda_row_threads(C / V, 1024), 0, st>>>(static_cast<T *>(out), rstd, x,
                                                                                     w, C, eps);
    }, out, x, w);
}

void tlm_cuda_rmsnorm_backward(tlm_backend *be, float *dx, void *dx_lp, float *dw, const float *dresid,
                               const void *dout, const float *x, const float *w, const float *rstd, int N, int C,
                               tlm_dtype dt) {
    tlm_cuda *cu = tlm_cuda_of(be);
    cudaStream_t st = cu->stream;
    if (C <= 0) return;
    if (N <= 0) {
        TLM_CUDA_CHECK(cudaMemsetAsync(dw, 0, (size_t)C * sizeof(float), st));
        return;
    }
    tlm_cuda_launch_vec(dt, __func__, C, [&](auto tag, auto vec) {
        using T = typename decltype(tag)::type;
        constexpr int V = decltype(vec)::value;
        /* a row of threads per row as the forward; G rows of them per block, up to 512 threads, about
         * 1024 threads per SM; partial sums (blocks, C) must fit the scratch */
        const int row_threads = tlm_cuda_row_threads(C / V, 512);
        int groups = 512 / row_threads > 1 ? 512 / row_threads : 1;
        const int per_sm = 1024 / (groups * row_threads);
        int blocks = cu->num_sms * (per_sm > 1 ? per_sm : 1);
        if ((size_t)blocks * C > cu->scratch_floats) blocks = (int)(cu->scratch_floats / (size_t)C);
        if (blocks < 1) tlm_fatal("rmsnorm_backward: d_model %d exceeds the scratch buffer", C);
        if (blocks > N) blocks = N;
        const int rows_per_block = (N + blocks - 1) / blocks;
        if (groups > rows_per_block) groups = rows_per_block;
        blocks = (N + rows_per_block - 1) / rows_per_block;
        /* blocks summing dw at the end: a slab of 32-column pieces each; fewer than half the SMs */
        int slabs = (C + 31) / 32;
        if (slabs > blocks) slabs = blocks;
        if (slabs > cu->num_sms / 2) slabs = cu->num_sms / 2 > 1 ? cu->num_sms / 2 : 1;
        const size_t smem = (size_t)groups * C * sizeof(float);
        if (smem > 32 * 1024) /* with the kernel's static 8.6 KB, past the default 48 KB */
            TLM_CUDA_CHECK(cudaFuncSetAttribute(rmsnorm_backward_kernel<V, T>,
                                                cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
        rmsnorm_backward_kernel<V, T><<<blocks, dim3(row_threads, groups), smem, st>>>(
            dx, static_cast<T *>(dx_lp), dw, dresid, static_cast<const T *>(dout), x, w, rstd, N, C, rows_per_block,
            cu->scratch, cu->sync, slabs);
    }, dx, dx_lp, dresid, dout, x, w);
}
