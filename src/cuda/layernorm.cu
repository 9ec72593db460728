/* layernorm.cu — LayerNorm on the GPU (Ba, Kiros & Hinton 2016, "Layer Normalization", eq. 4):
 * out = (x - mean) * rstd * w + b, rstd = 1/sqrt(var + eps), var = mean((x - mean)^2) (biased, two
 * passes, as torch.nn.LayerNorm), and its backward. Not part of the CS336 model (RMSNorm): the
 * ToyModel of `tlm precision autocast` uses it under autocast's policy for layer_norm, an fp32-list
 * op: x, dout and dx are of the mode's dtype (fp32, bf16, fp16; dx rounded to nearest even), the
 * statistics, out, w, b, dw, db float32.
 *
 * Forward and dx: one block per row, 16-byte accesses of x where the row allows, block reductions
 * in fp32. dw, db: one kernel over columns, 32 columns x 32 row lanes per block, each lane walking
 * every 32nd row, then a fixed-order sum of the lanes in double: deterministic, x and dout read
 * once more (LayerNorm is small next to the GEMMs around it). */
#include "cuda/cuda_common.cuh"

template <int VEC, typename T>
__global__ void layernorm_forward_kernel(float *out, float *mean, float *rstd, const T *x, const float *w,
                                         const float *b, int C, float eps) {
    /* out (N,C); mean, rstd (N); x (N,C) T; w, b (C); block n does row n */
    const size_t n = blockIdx.x;
    const T *xn = x + n * C;
    float *on = out + n * C;
    const float m = tlm_row_sum<VEC>(xn, C, [](float v) { return v; }) / (float)C;
    const float sum_sq = tlm_row_sum<VEC>(xn, C, [m](float v) { return (v - m) * (v - m); }); /* L1 hits */
    const float r = (float)(1.0 / sqrt((double)sum_sq / C + (double)eps)); /* IEEE, as the CPU */
    for (int c = threadIdx.x * VEC; c < C; c += blockDim.x * VEC) {
        float xv[VEC], wv[VEC], bv[VEC], o[VEC];
        tlm_load<VEC>(xv, xn + c);
        tlm_load<VEC>(wv, w + c);
        tlm_load<VEC>(bv, b + c);
#pragma unroll
        for (int i = 0; i < VEC; i++) o[i] = (xv[i] - m) * r * wv[i] + bv[i];
        tlm_store<VEC>(on + c, o);
    }
    if (threadIdx.x == 0) {
        mean[n] = m;
        rstd[n] = r;
    }
}

template <int VEC, typename T>
__global__ void layernorm_backward_dx_kernel(T *dx, const T *dout, const T *x, const float *w, const float *mean,
                                             const float *rstd, int C) {
    /* dx (N,C) T = r (g - mean(g) - xhat mean(g xhat)), g = dout w, xhat = (x - m) r; block n: row n */
    const size_t n = blockIdx.x;
    const T *xn = x + n * C, *dn = dout + n * C;
    T *dxn = dx + n * C;
    const float m = mean[n], r = rstd[n];
    float sum_g = 0.0f, sum_g_xhat = 0.0f;
    tlm_row_for_each<VEC>(xn, dn, w, C, [&](int c, const float *xv, const float *dv, const float *wv) {
#pragma unroll
        for (int i = 0; i < VEC; i++) {
            const float g = dv[i] * wv[i];
            sum_g += g;
            sum_g_xhat += g * ((xv[i] - m) * r);
        }
    });
    const float mean_g = tlm_block_sum(sum_g) / (float)C;
    const float mean_g_xhat = tlm_block_sum(sum_g_xhat) / (float)C;
    tlm_row_for_each<VEC>(xn, dn, w, C, [&](int c, const float *xv, const float *dv, const float *wv) { /* L1 hits */
        float o[VEC];
#pragma unroll
        for (int i = 0; i < VEC; i++) {
            const float g = dv[i] * wv[i], xhat = (xv[i] - m) * r;
            o[i] = r * (g - mean_g - xhat * mean_g_xhat);
        }
        tlm_store<VEC>(dxn + c, o);
    });
}

template <typename T>
__global__ void layernorm_backward_dwdb_kernel(float *dw, float *db, const T *dout, const T *x, const float *mean,
                                               const float *rstd, int N, int C) {
    /* dw (C) = sum_n dout xhat, db (C) = sum_n dout; block (32, 32): columns blockIdx.x*32 + x, lane y
     * sums rows y, y+32, ..., then lane 0 adds the 32 lane sums in order */
    __shared__ double lane_w[32][33], lane_b[32][33];
    const int c = blockIdx.x * 32 + threadIdx.x;
    double acc_w = 0.0, acc_b = 0.0;
    if (c < C)
        for (int r = threadIdx.y; r < N; r += 32) {
            const float d = tlm_f32(dout[(size_t)r * C + c]);
            const float xhat = (tlm_f32(x[(size_t)r * C + c]) - mean[r]) * rstd[r];
            acc_w += (double)(d * xhat);
            acc_b += (double)d;
        }
    lane_w[threadIdx.y][threadIdx.x] = acc_w;
    lane_b[threadIdx.y][threadIdx.x] = acc_b;
    __syncthreads();
    if (threadIdx.y == 0 && c < C) {
        double tw = 0.0, tb = 0.0;
        for (int y = 0; y < 32; y++) {
            tw += lane_w[y][threadIdx.x];
            tb += lane_b[y][threadIdx.x];
        }
        dw[c] = (float)tw;
        db[c] = (float)tb;
    }
}

void tlm_cuda_layernorm_forward(tlm_backend *be, float *out, float *mean, float *rstd, const void *x,
                                const float *w, const float *b, int N, int C, float eps, tlm_dtype dt) {
    if (N <= 0 || C <= 0) return;
    cudaStream_t st = tlm_cuda_stream(be);
    /* 16-byte accesses of x; out, w, b 16 or 32 bytes */
    tlm_cuda_launch_vec(dt, __func__, C, [&](auto tag, auto vec) {
        using T = typename decltype(tag)::type;
        constexpr int V = decltype(vec)::value;
        layernorm_forward_kernel<V, T><<<N, tlm_cuda_row_threads(C / V, 1024), 0, st>>>(
            out, mean, rstd, static_cast<const T *>(x), w, b, C, eps);
    }, out, x, w, b);
}

void tlm_cuda_layernorm_backward(tlm_backend *be, void *dx, float *dw, float *db, const void *dout, const void *x,
                                 const float *w, const float *mean, const float *rstd, int N, int C, tlm_dtype dt) {
    if (C <= 0) return;
    cudaStream_t st = tlm_cuda_stream(be);
    if (N > 0)
        tlm_cuda_launch_vec(dt, __func__, C, [&](auto tag, auto vec) {
            using T = typename decltype(tag)::type;
            constexpr int V = decltype(vec)::value;
            layernorm_backward_dx_kernel<V, T><<<N, tlm_cuda_row_threads(C / V, 512), 0, st>>>(
                static_cast<T *>(dx), static_cast<const T *>(dout), static_cast<const T *>(x), w, mean, rstd, C);
        }, dx, dout, x, w);
    tlm_cuda_dispatch(dt, __func__, [&](auto tag) {
        using T = typename decltype(tag)::type;
        layernorm_backward_dwdb_kernel<T><<<(C + 31) / 32, dim3(32, 32), 0, st>>>(
            dw, db, static_cast<const T *>(dout), static_cast<const T *>(x), mean, rstd, N, C);
    });
    TLM_CUDA_CHECK_LAUNCH();
}
