/* rmsnorm.cu — RMSNorm on the GPU (Zhang & Sennrich 2019, "Root Mean Square Layer
 * Normalization", eq. 4): out = x * rstd * w, rstd = 1/sqrt(mean(x^2) + eps), in fp32, and its
 * backward. out and dout are of the mode's dtype (fp32, bf16, fp16: out rounded to nearest even
 * from the fp32 product); x, w, rstd, dx, dw float32. One block per row, 16-byte accesses,
 * warp-shuffle reductions.
 *
 * Backward, with r = rstd[n], xhat = x r, g = dout w:  dx += r (g - xhat mean(g xhat)),
 * dw = sum_n dout xhat, and dx_lp = round(dx) when asked (the GEMM copy, in the same pass). A
 * group of one or a few warps walks a row: it loads the row's x, dout and dx into registers at
 * once, sums g xhat (warp shuffles, then the group's warps through shared memory), and writes dx
 * from the registers: each of x, dout, dx read once, no block-wide barrier per row. A block holds
 * several groups (several rows in flight per SM), one wave of blocks covers the rows, and each
 * group adds its rows' dout xhat into per-column sums in shared memory; the block writes its
 * groups' sums as one row of partial sums (scratch), and a second kernel sums the partials of each
 * column in a fixed order (in double): dw is deterministic. */
#include "cuda/cuda_common.cuh"

template <int VEC, typename T>
__global__ void rmsnorm_forward_kernel(T *out, float *rstd, const float *x, const float *w, int C, float eps) {
    tlm_pdl_wait(); /* tlm_cuda_launch: the previous kernel has completed */
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

/* The backward's row groups: tg threads (a multiple of 32) walk a row together, each holding
 * RMSNORM_BWD_ELEMS columns of x, dout and dx in registers per pass over the row (one pass for
 * C <= RMSNORM_BWD_THREADS * RMSNORM_BWD_ELEMS); a block holds up to RMSNORM_BWD_GROUPS groups
 * (named barriers 1..15), RMSNORM_BWD_THREADS threads in all. 8 columns a thread and blocks of
 * 1024 threads: bf16 fwd+bwd on the H100, backward ms, small 1.84-1.85 and 2.7B 28.36-28.37,
 * against 1.88-1.89 and 28.43-28.46 with 16 columns and 512 threads (alternating processes). */
#define RMSNORM_BWD_ELEMS 8
#define RMSNORM_BWD_THREADS 1024
#define RMSNORM_BWD_GROUPS 15

/* The sum of v over the tg threads of row group g (named barrier g + 1); every thread of the
 * group gets it. Warp sums, then (tg > 32) the warps' sums in warp order through buf (tg / 32
 * floats, the group's; callers alternate two, so one barrier a call suffices). */
__device__ __forceinline__ float rmsnorm_group_sum(float v, float *buf, int g, int tg, int t) {
    v = tlm_warp_sum(v);
    if (tg == 32) return v;
    if ((t & 31) == 0) buf[t >> 5] = v;
    asm volatile("bar.sync %0, %1;" ::"r"(g + 1), "r"(tg) : "memory");
    float s = 0.0f;
    for (int k = 0; k < tg >> 5; k++) s += buf[k];
    return s;
}

template <int VEC, typename T>
__global__ void __launch_bounds__(RMSNORM_BWD_THREADS)
    rmsnorm_backward_kernel(float *dx, T *dx_lp, float *dw_partial, const T *dout, const float *x, const float *w,
                            const float *rstd, int N, int C, int groups) {
    tlm_pdl_wait(); /* tlm_cuda_launch: the previous kernel has completed */
    /* dx (N,C) +=; dx_lp (N,C) = round(dx), or NULL; dw_partial (gridDim.x, C) =; dout (N,C) T;
     * x (N,C); w (C); rstd (N). Group g of block b does rows n = b groups + g + k gridDim.x groups. */
    constexpr int ITEMS = RMSNORM_BWD_ELEMS / VEC; /* VEC-wide pieces a thread holds per pass */
    extern __shared__ float dw_acc[]; /* (groups, C): each group's sum over its rows of dout * xhat */
    __shared__ float warp_sums[2][RMSNORM_BWD_GROUPS][RMSNORM_BWD_THREADS / 32];
    const int tg = blockDim.x / groups, g = threadIdx.x / tg, t = threadIdx.x - g * tg;
    const int span = tg * ITEMS * VEC;        /* columns per pass */
    const int last = (C - 1) / span * span; /* the last pass's first column */
    float *acc = dw_acc + (size_t)g * C;
    /* thread t's columns: c0 + (j tg + t) VEC + i for the passes c0 and j < ITEMS, i < VEC, in
     * every row: its accumulators are its own, no barriers */
    for (int c0 = 0; c0 < C; c0 += span)
#pragma unroll
        for (int j = 0; j < ITEMS; j++) {
            const int c = c0 + (j * tg + t) * VEC;
            if (c < C)
#pragma unroll
                for (int i = 0; i < VEC; i++) acc[c + i] = 0.0f;
        }

    int parity = 0;
    for (int n = blockIdx.x * groups + g; n < N; n += gridDim.x * groups, parity ^= 1) {
        const float *xn = x + (size_t)n * C;
        const T *dn = dout + (size_t)n * C;
        float *dxn = dx + (size_t)n * C;
        const float r = rstd[n];
        float xv[ITEMS][VEC], dv[ITEMS][VEC], dxv[ITEMS][VEC];
        /* pass c0's x, dout and dx into registers: every load of the pass in flight at once */
        auto load = [&](int c0) {
#pragma unroll
            for (int j = 0; j < ITEMS; j++) {
                const int c = c0 + (j * tg + t) * VEC;
                if (c < C) {
                    tlm_load<VEC>(xv[j], xn + c);
                    tlm_load<VEC>(dv[j], dn + c);
                    tlm_load<VEC>(dxv[j], dxn + c);
                }
            }
        };
        float sum_g_xhat = 0.0f;
        for (int c0 = 0; c0 < C; c0 += span) {
            load(c0);
#pragma unroll
            for (int j = 0; j < ITEMS; j++) {
                const int c = c0 + (j * tg + t) * VEC;
                if (c < C) {
                    float wv[VEC];
                    tlm_load<VEC>(wv, w + c);
#pragma unroll
                    for (int i = 0; i < VEC; i++) sum_g_xhat += dv[j][i] * wv[i] * (xv[j][i] * r);
                }
            }
        }
        const float mean_g_xhat = rmsnorm_group_sum(sum_g_xhat, warp_sums[parity][g], g, tg, t) / (float)C;
        /* the last pass is still in registers; a row of several passes loads the others again */
        for (int c0 = last; c0 >= 0; c0 -= span) {
            if (c0 != last) load(c0);
#pragma unroll
            for (int j = 0; j < ITEMS; j++) {
                const int c = c0 + (j * tg + t) * VEC;
                if (c < C) {
                    float wv[VEC], av[VEC];
                    tlm_load<VEC>(wv, w + c);
                    tlm_load<VEC>(av, acc + c);
#pragma unroll
                    for (int i = 0; i < VEC; i++) {
                        const float gi = dv[j][i] * wv[i], xhat = xv[j][i] * r;
                        dxv[j][i] += r * (gi - xhat * mean_g_xhat);
                        av[i] += dv[j][i] * xhat;
                    }
                    tlm_store<VEC>(acc + c, av);
                    tlm_store<VEC>(dxn + c, dxv[j]);
                    if (dx_lp) tlm_store<VEC>(dx_lp + (size_t)n * C + c, dxv[j]);
                }
            }
        }
    }
    __syncthreads();
    /* the block's row of partial sums: its groups' sums, in group order */
    float *part = dw_partial + (size_t)blockIdx.x * C;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        float s = 0.0f;
        for (int k = 0; k < groups; k++) s += dw_acc[(size_t)k * C + c];
        part[c] = s;
    }
}

/* out[c] = sum over rows r < nrows of partial[r*C + c], in double; block (32, 32): 32 columns,
 * 32 row lanes, then a fixed-order sum of the lanes */
__global__ void column_sum_kernel(float *out, const float *partial, int nrows, int C, bool accumulate) {
    tlm_pdl_wait(); /* tlm_cuda_launch: the previous kernel has completed */
    __shared__ double lane_sum[32][33];
    const int c = blockIdx.x * 32 + threadIdx.x;
    double acc = 0.0;
    if (c < C)
        for (int r = threadIdx.y; r < nrows; r += 32) acc += (double)partial[(size_t)r * C + c];
    lane_sum[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && c < C) {
        double total = 0.0;
        for (int y = 0; y < 32; y++) total += lane_sum[y][threadIdx.x];
        out[c] = accumulate ? out[c] + (float)total : (float)total; /* += over micro-batches (backend.h) */
    }
}

void tlm_cuda_rmsnorm_forward(tlm_backend *be, void *out, float *rstd, const float *x, const float *w, int N,
                              int C, float eps, tlm_dtype dt) {
    if (N <= 0) return;
    cudaStream_t st = tlm_cuda_stream(be);
    /* 16-byte accesses of out; x, w read 16 or 32 bytes */
    tlm_cuda_launch_vec(dt, __func__, C, [&](auto tag, auto vec) {
        using T = typename decltype(tag)::type;
        constexpr int V = decltype(vec)::value;
        tlm_cuda_launch("rmsnorm_forward", be, rmsnorm_forward_kernel<V, T>, dim3(N),
                        dim3(tlm_cuda_row_threads(C / V, 1024)), 0, st, static_cast<T *>(out), rstd, x, w, C, eps);
    }, out, x, w);
}

/* resident blocks per SM of rmsnorm_backward_kernel<V, T> at (threads, smem) bytes of dynamic
 * shared memory (after its limit is raised), asked again only when they change */
template <int V, typename T> static int backward_occupancy(int threads, size_t smem) {
    static int last_threads = 0, occ = 1;
    static size_t last_smem = 0;
    if (threads != last_threads || smem != last_smem) {
        TLM_CUDA_CHECK_OP("rmsnorm_backward", cudaOccupancyMaxActiveBlocksPerMultiprocessor(
                                                  &occ, rmsnorm_backward_kernel<V, T>, threads, smem));
        if (occ < 1) occ = 1;
        last_threads = threads;
        last_smem = smem;
    }
    return occ;
}

void tlm_cuda_rmsnorm_backward(tlm_backend *be, float *dx, float *dw, const void *dout, const float *x,
                               const float *w, const float *rstd, int N, int C, void *dx_lp, tlm_dtype dt) {
    /* C up to the shared memory one block may have, in floats (one group's accumulators: 58K on an H100) */
    tlm_cuda *cu = tlm_cuda_of(be);
    cudaStream_t st = cu->stream;
    if (C <= 0) return;
    if (N <= 0) {
        if (!be->accumulate_grads) TLM_CUDA_CHECK(cudaMemsetAsync(dw, 0, (size_t)C * sizeof(float), st));
        return;
    }
    int blocks = 0;
    tlm_cuda_launch_vec(dt, __func__, C, [&](auto tag, auto vec) {
        using T = typename decltype(tag)::type;
        constexpr int V = decltype(vec)::value;
        constexpr int ITEMS = RMSNORM_BWD_ELEMS / V;
        /* a row group: the fewest warps that hold a row in one pass, at most a block */
        int warps = (C / V + 32 * ITEMS - 1) / (32 * ITEMS);
        if (warps > RMSNORM_BWD_THREADS / 32) warps = RMSNORM_BWD_THREADS / 32;
        const int tg = 32 * warps;
        /* groups per block: as many as fit, with 48 KiB of accumulators, but no more than the rows
         * of one block per SM need (small N: more blocks, fewer groups each) */
        int groups = RMSNORM_BWD_THREADS / tg;
        if (groups > RMSNORM_BWD_GROUPS) groups = RMSNORM_BWD_GROUPS;
        if (groups > (N + cu->num_sms - 1) / cu->num_sms) groups = (N + cu->num_sms - 1) / cu->num_sms;
        if ((size_t)groups * C * sizeof(float) > 48 * 1024) groups = (int)(48 * 1024 / ((size_t)C * sizeof(float)));
        if (groups < 1) groups = 1;
        const size_t smem = (size_t)groups * C * sizeof(float);
        if (smem > 48 * 1024)
            TLM_CUDA_CHECK(cudaFuncSetAttribute(rmsnorm_backward_kernel<V, T>,
                                                cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
        /* one wave of resident blocks, each writing a row of partial sums, which must fit the scratch */
        const int threads = groups * tg;
        const int resident = cu->num_sms * backward_occupancy<V, T>(threads, smem);
        blocks = (N + groups - 1) / groups;
        if (blocks > resident) blocks = resident;
        if ((size_t)blocks * C > cu->scratch_floats) blocks = (int)(cu->scratch_floats / (size_t)C);
        if (blocks < 1) tlm_fatal("rmsnorm_backward: d_model %d exceeds the scratch buffer", C);
        tlm_cuda_launch("rmsnorm_backward", be, rmsnorm_backward_kernel<V, T>, dim3(blocks), dim3(threads), smem, st,
                        dx, static_cast<T *>(dx_lp), cu->scratch, static_cast<const T *>(dout), x, w, rstd, N, C,
                        groups);
    }, dx, dout, x, w, dx_lp);
    tlm_cuda_launch("rmsnorm_backward", be, column_sum_kernel, dim3((C + 31) / 32), dim3(32, 32), 0, st, dw,
                    cu->scratch, blocks, C, be->accumulate_grads);
    TLM_CUDA_CHECK_LAUNCH();
}
