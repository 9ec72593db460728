/* attention.cu — naive causal scaled dot-product attention on the GPU (Vaswani et al. 2017,
 * "Attention Is All You Need", eq. 1): S = Q K^T / sqrt(D) by strided-batched cuBLASLt GEMMs
 * (one call per batch element b, batched over its H heads: head h of q, k, v starts h*D floats
 * after head 0, rows ld floats apart, so q, k, v are read in place from the fused projection),
 * then a causal softmax kernel over each row (j > i masked to exactly 0, max-subtracted, fp32),
 * then out = P V by a batched GEMM writing head h into columns h*D.. of out (N,C).
 * Backward (the softmax Jacobian-vector product of the same paper's eq. 1):
 * dV = P^T dO, dP = dO V^T, dS = P*(dP - rowsum(P*dP)) (kernel), dQ = dS K/sqrt(D),
 * dK = dS^T Q/sqrt(D). The masked half of each T x T product is computed and discarded, as
 * PyTorch's naive attention does. */
#include <math.h>

#include "cuda/cuda_common.cuh"

template <int VEC>
__global__ void causal_softmax_kernel(float *P, int T) {
    /* P (rows, T), in place: row r holds the scaled scores of query i = r % T; keys j <= i count */
    const size_t r = blockIdx.x;
    const int valid = (int)(r % T) + 1;
    float *row = P + r * T;
    float m = -FLT_MAX, s = 0.0f;
    for (int j = threadIdx.x * VEC; j < valid; j += blockDim.x * VEC) {
        float v[VEC];
        tlm_load<VEC>(v, row + j);
        float mx = m;
#pragma unroll
        for (int e = 0; e < VEC; e++)
            if (j + e < valid) mx = fmaxf(mx, v[e]);
        s *= __expf(m - mx);
#pragma unroll
        for (int e = 0; e < VEC; e++)
            if (j + e < valid) s += __expf(v[e] - mx);
        m = mx;
    }
    tlm_block_softmax_merge(m, s);
    const float inv = __fdiv_rn(1.0f, s);
    for (int j = threadIdx.x * VEC; j < T; j += blockDim.x * VEC) {
        float v[VEC] = {};
        if (j < valid) tlm_load<VEC>(v, row + j); /* an L1 hit: read just now */
#pragma unroll
        for (int e = 0; e < VEC; e++) v[e] = j + e < valid ? __expf(v[e] - m) * inv : 0.0f;
        tlm_store<VEC>(row + j, v);
    }
}

template <int VEC>
__global__ void causal_softmax_backward_kernel(float *dP, const float *P, int T) {
    /* dP (rows, T), in place to dS = P * (dP - rowsum(P * dP)), 0 where j > i; P (rows, T) */
    const size_t r = blockIdx.x;
    const int valid = (int)(r % T) + 1;
    float *drow = dP + r * T;
    const float *prow = P + r * T;
    float dot = 0.0f;
    for (int j = threadIdx.x * VEC; j < valid; j += blockDim.x * VEC) {
        float p[VEC], d[VEC];
        tlm_load<VEC>(p, prow + j);
        tlm_load<VEC>(d, drow + j);
#pragma unroll
        for (int e = 0; e < VEC; e++)
            if (j + e < valid) dot += p[e] * d[e];
    }
    dot = tlm_block_sum(dot);
    for (int j = threadIdx.x * VEC; j < T; j += blockDim.x * VEC) {
        float p[VEC] = {}, d[VEC] = {};
        if (j < valid) {
            tlm_load<VEC>(p, prow + j);
            tlm_load<VEC>(d, drow + j);
        }
#pragma unroll
        for (int e = 0; e < VEC; e++) d[e] = j + e < valid ? p[e] * (d[e] - dot) : 0.0f;
        tlm_store<VEC>(drow + j, d);
    }
}

static void range_push(tlm_backend *be, const char *name) {
    if (be->range_push) be->range_push(be, name);
}
static void range_pop(tlm_backend *be) {
    if (be->range_pop) be->range_pop(be);
}

void tlm_cuda_attention_forward(tlm_backend *be, float *out, float *probs, const float *q, const float *k,
                                const float *v, int ld, int B, int T, int H, int D) {
    /* out (N,C); probs (B,H,T,T); q, k, v (N rows, row stride ld), head h at columns h*D.. */
    if (B <= 0 || T <= 0 || H <= 0) return;
    const char *op = "attention_forward";
    const int C = H * D;
    const float scale = 1.0f / sqrtf((float)D);
    const int64_t TT = (int64_t)T * T;
    const size_t head0 = (size_t)T * ld; /* floats between batch elements in q, k, v */

    range_push(be, "computing attention scores");
    for (int b = 0; b < B; b++) /* S_h (T,T) = scale Q_h K_h^T for the H heads of batch b */
        tlm_cuda_gemm(be, op, false, true, T, T, D, scale, q + b * head0, ld, D, k + b * head0, ld, D, 0.0f,
                      probs + b * H * TT, T, TT, H);
    range_pop(be);

    range_push(be, "computing softmax");
    const unsigned rows = (unsigned)((size_t)B * H * T);
    cudaStream_t st = tlm_cuda_stream(be);
    if (T % 4 == 0 && tlm_aligned16(probs)) {
        causal_softmax_kernel<4><<<rows, tlm_cuda_row_threads(T / 4, 256), 0, st>>>(probs, T);
    } else {
        causal_softmax_kernel<1><<<rows, tlm_cuda_row_threads(T, 256), 0, st>>>(probs, T);
    }
    TLM_CUDA_CHECK_LAUNCH();
    range_pop(be);

    range_push(be, "final matmul");
    for (int b = 0; b < B; b++) /* out_h (T,D) = P_h V_h, into columns h*D.. of out */
        tlm_cuda_gemm(be, op, false, false, T, D, T, 1.0f, probs + b * H * TT, T, TT, v + b * head0, ld, D, 0.0f,
                      out + (size_t)b * T * C, C, D, H);
    range_pop(be);
}

void tlm_cuda_attention_backward(tlm_backend *be, float *dq, float *dk, float *dv, float *dprobs,
                                 const float *dout, const float *q, const float *k, const float *v,
                                 const float *probs, int ld, int B, int T, int H, int D) {
    /* dq, dk, dv, q, k, v (N rows, row stride ld); dprobs, probs (B,H,T,T); dout (N,C) */
    if (B <= 0 || T <= 0 || H <= 0) return;
    const char *op = "attention_backward";
    const int C = H * D;
    const float scale = 1.0f / sqrtf((float)D);
    const int64_t TT = (int64_t)T * T;
    const size_t head0 = (size_t)T * ld;
    const size_t out0 = (size_t)T * C;

    for (int b = 0; b < B; b++) {
        const float *P = probs + b * H * TT, *dO = dout + b * out0;
        /* dV_h (T,D) = P_h^T dO_h */
        tlm_cuda_gemm(be, op, true, false, T, D, T, 1.0f, P, T, TT, dO, C, D, 0.0f, dv + b * head0, ld, D, H);
        /* dP_h (T,T) = dO_h V_h^T */
        tlm_cuda_gemm(be, op, false, true, T, T, D, 1.0f, dO, C, D, v + b * head0, ld, D, 0.0f, dprobs + b * H * TT,
                      T, TT, H);
    }

    const unsigned rows = (unsigned)((size_t)B * H * T);
    cudaStream_t st = tlm_cuda_stream(be);
    if (T % 4 == 0 && tlm_aligned16(probs) && tlm_aligned16(dprobs)) {
        causal_softmax_backward_kernel<4><<<rows, tlm_cuda_row_threads(T / 4, 256), 0, st>>>(dprobs, probs, T);
    } else {
        causal_softmax_backward_kernel<1><<<rows, tlm_cuda_row_threads(T, 256), 0, st>>>(dprobs, probs, T);
    }
    TLM_CUDA_CHECK_LAUNCH();

    for (int b = 0; b < B; b++) {
        const float *dS = dprobs + b * H * TT;
        /* dQ_h (T,D) = scale dS_h K_h;  dK_h (T,D) = scale dS_h^T Q_h */
        tlm_cuda_gemm(be, op, false, false, T, D, T, scale, dS, T, TT, k + b * head0, ld, D, 0.0f, dq + b * head0,
                      ld, D, H);
        tlm_cuda_gemm(be, op, true, false, T, D, T, scale, dS, T, TT, q + b * head0, ld, D, 0.0f, dk + b * head0,
                      ld, D, H);
    }
}
