/* rmsnorm.cu — RMSNorm on the GPU (Zhang & Sennrich 2019, "Root Mean Square Layer
 * Normalization", eq. 4): out = x * rstd * w, rstd = 1/sqrt(mean(x^2) + eps), in fp32, and its
 * backward. out and dout are of the mode's dtype (fp32, bf16, fp16: out rounded to nearest even
 * from the fp32 product); x, w, rstd, dx, dw float32. One block per row, 16-byte accesses,
 * warp-shuffle reductions.
 *
 * Backward, with r = rstd[n], xhat = x r, g = dout w:  dx += r (g - xhat mean(g xhat)),
 * dw = sum_n dout xhat. Each block of the backward walks a few rows, adding its rows' dout xhat
 * into per-column sums in shared memory, and writes them as one row of partial sums (scratch);
 * a second kernel sums the partials of each column in a fixed order (in double), so dw is
 * deterministic and x, dout are read once. */
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

template <int VEC, typename T>
__global__ void rmsnorm_backward_kernel(float *dx, float *dw_partial, const T *dout, const float *x,
                                        const float *w, const float *rstd, int N, int C, int rows_per_block) {
    /* dx (N,C) +=; dw_partial (gridDim.x, C) =; dout (N,C) T; x (N,C); w (C); rstd (N) */
    extern __shared__ float dw_acc[]; /* (C): this block's sum over its rows of dout * xhat */
    /* each thread owns the columns c = threadIdx.x*VEC + j*blockDim.x*VEC: no sharing, no barriers */
    for (int c = threadIdx.x * VEC; c < C; c += blockDim.x * VEC)
#pragma unroll
        for (int i = 0; i < VEC; i++) dw_acc[c + i] = 0.0f;

    const int n0 = blockIdx.x * rows_per_block;
    const int n1 = min(N, n0 + rows_per_block);
    for (int n = n0; n < n1; n++) {
        const float *xn = x + (size_t)n * C;
        const T *dn = dout + (size_t)n * C;
        float *dxn = dx + (size_t)n * C;
        const float r = rstd[n];
        float sum_g_xhat = 0.0f;
        tlm_row_for_each<VEC>(xn, dn, w, C, [&](int c, const float *xv, const float *dv, const float *wv) {
#pragma unroll
            for (int i = 0; i < VEC; i++) sum_g_xhat += dv[i] * wv[i] * (xv[i] * r);
        });
        const float mean_g_xhat = tlm_block_sum(sum_g_xhat) / (float)C;
        tlm_row_for_each<VEC>(xn, dn, w, C, [&](int c, const float *xv, const float *dv, const float *wv) { /* L1 hits */
            float dxv[VEC];
            tlm_load<VEC>(dxv, dxn + c);
#pragma unroll
            for (int i = 0; i < VEC; i++) {
                const float g = dv[i] * wv[i], xhat = xv[i] * r;
                dxv[i] += r * (g - xhat * mean_g_xhat);
                dw_acc[c + i] += dv[i] * xhat;
            }
            tlm_store<VEC>(dxn + c, dxv);
        });
    }
    float *part = dw_partial + (size_t)blockIdx.x * C;
    for (int c = threadIdx.x * VEC; c < C; c += blockDim.x * VEC)
#pragma unroll
        for (int i = 0; i < VEC; i++) part[c + i] = dw_acc[c + i];
}

/* out[c] = sum over rows r < nrows of partial[r*C + c], in double; block (32, 32): 32 columns,
 * 32 row lanes, then a fixed-order sum of the lanes */
__global__ void column_sum_kernel(float *out, const float *partial, int nrows, int C) {
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
        out[c] = (float)total;
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
        rmsnorm_forward_kernel<V, T><<<N, tlm_cuda_row_threads(C / V, 1024), 0, st>>>(static_cast<T *>(out), rstd, x,
                                                                                     w, C, eps);
    }, out, x, w);
}

void tlm_cuda_rmsnorm_backward(tlm_backend *be, float *dx, float *dw, const void *dout, const float *x,
                               const float *w, const float *rstd, int N, int C, tlm_dtype dt) {
    tlm_cuda *cu = tlm_cuda_of(be);
    cudaStream_t st = cu->stream;
    if (N <= 0) {
        TLM_CUDA_CHECK(cudaMemsetAsync(dw, 0, (size_t)C * sizeof(float), st));
        return;
    }
    /* about 4 blocks per SM, each a few rows; partial sums (blocks, C) must fit the scratch */
    int blocks = 4 * cu->num_sms;
    if ((size_t)blocks * C > cu->scratch_floats) blocks = (int)(cu->scratch_floats / (size_t)C);
    if (blocks < 1) tlm_fatal("rmsnorm_backward: d_model %d exceeds the scratch buffer", C);
    if (blocks > N) blocks = N;
    const int rows_per_block = (N + blocks - 1) / blocks;
    blocks = (N + rows_per_block - 1) / rows_per_block;
    const size_t smem = (size_t)C * sizeof(float);
    tlm_cuda_launch_vec(dt, __func__, C, [&](auto tag, auto vec) {
        using T = typename decltype(tag)::type;
        constexpr int V = decltype(vec)::value;
        if (smem > 48 * 1024)
            TLM_CUDA_CHECK(cudaFuncSetAttribute(rmsnorm_backward_kernel<V, T>,
                                                cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
        rmsnorm_backward_kernel<V, T><<<blocks, tlm_cuda_row_threads(C / V, 512), smem, st>>>(
            dx, cu->scratch, static_cast<const T *>(dout), x, w, rstd, N, C, rows_per_block);
    }, dx, dout, x, w);
    column_sum_kernel<<<(C + 31) / 32, dim3(32, 32), 0, st>>>(dw, cu->scratch, blocks, C);
    TLM_CUDA_CHECK_LAUNCH();
}
