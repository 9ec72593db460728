/* attention.cu — naive causal scaled dot-product attention on the GPU (Vaswani et al. 2017,
 * "Attention Is All You Need", eq. 1): S = Q K^T / sqrt(D) by strided-batched cuBLASLt GEMMs
 * (one call per batch element b, batched over its H heads: head h of q, k, v starts h*D elements
 * after head 0, rows ld elements apart, so q, k, v are read in place from the fused projection;
 * the 1/sqrt(D) is the GEMM's alpha), then a causal softmax kernel over each row (j > i masked to
 * exactly 0, max-subtracted, fp32), then out = P V by a batched GEMM writing head h into columns
 * h*D.. of out (N,C).
 * Backward (the softmax Jacobian-vector product of the same paper's eq. 1):
 * dV = P^T dO, dP = dO V^T, dS = P*(dP - rowsum(P*dP)) (kernel), dQ = dS K/sqrt(D),
 * dK = dS^T Q/sqrt(D). The masked half of each T x T product is computed and discarded, as
 * PyTorch's naive attention does.
 * Every tensor is of the mode's dtype (fp32, bf16, fp16): the GEMMs accumulate in fp32 and round
 * S, P V, dP and the gradients to it; the softmax and its backward widen to fp32, compute there,
 * and round P and dS back to nearest even (PyTorch autocast). The softmax kernels give each row
 * one warp (8 rows a block), with 16-byte accesses where T is a multiple of the vector. */
#include <math.h>

#include "cuda/cuda_common.cuh"

#define SOFTMAX_WARPS 8 /* rows per block */

template <int VEC, typename E>
__global__ void causal_softmax_kernel(E *P, int T, size_t rows) {
    /* P (rows, T), in place: row r holds the scaled scores of query i = r % T; keys j <= i count */
    const size_t r = (size_t)blockIdx.x * SOFTMAX_WARPS + threadIdx.x / 32;
    if (r >= rows) return; /* the whole warp */
    const int lane = threadIdx.x & 31;
    const int valid = (int)(r % T) + 1;
    E *row = P + r * T;
    float m = -FLT_MAX, s = 0.0f;
    for (int j = lane * VEC; j < valid; j += 32 * VEC) {
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
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float m2 = __shfl_xor_sync(0xffffffffu, m, o), s2 = __shfl_xor_sync(0xffffffffu, s, o);
        tlm_softmax_merge(m, s, m2, s2);
    }
    const float inv = __fdiv_rn(1.0f, s);
    for (int j = lane * VEC; j < T; j += 32 * VEC) {
        float v[VEC] = {};
        if (j < valid) tlm_load<VEC>(v, row + j); /* an L1 hit: read just now */
#pragma unroll
        for (int e = 0; e < VEC; e++) v[e] = j + e < valid ? __expf(v[e] - m) * inv : 0.0f;
        tlm_store<VEC>(row + j, v);
    }
}

template <int VEC, typename E>
__global__ void causal_softmax_backward_kernel(E *dP, const E *P, int T, size_t rows) {
    /* dP (rows, T), in place to dS = P * (dP - rowsum(P * dP)), 0 where j > i; P (rows, T) */
    const size_t r = (size_t)blockIdx.x * SOFTMAX_WARPS + threadIdx.x / 32;
    if (r >= rows) return;
    const int lane = threadIdx.x & 31;
    const int valid = (int)(r % T) + 1;
    E *drow = dP + r * T;
    const E *prow = P + r * T;
    float dot = 0.0f;
    for (int j = lane * VEC; j < valid; j += 32 * VEC) {
        float p[VEC], d[VEC];
        tlm_load<VEC>(p, prow + j);
        tlm_load<VEC>(d, drow + j);
#pragma unroll
        for (int e = 0; e < VEC; e++)
            if (j + e < valid) dot += p[e] * d[e];
    }
    dot = tlm_warp_sum(dot);
    for (int j = lane * VEC; j < T; j += 32 * VEC) {
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

/* The row kernels over (rows, T), 8 rows a block: the causal softmax of P in place (probs == NULL),
 * or its backward dS = P*(dP - rowsum(P*dP)) in place on d = dP (probs = P). */
static void softmax_launch(tlm_backend *be, const char *op, void *d, const void *probs, size_t rows, int T,
                           tlm_dtype dt) {
    const unsigned blocks = (unsigned)((rows + SOFTMAX_WARPS - 1) / SOFTMAX_WARPS);
    cudaStream_t st = tlm_cuda_stream(be);
    tlm_cuda_launch_vec(dt, op, T, [&](auto tag, auto vec) {
        using E = typename decltype(tag)::type;
        constexpr int V = decltype(vec)::value;
        if (!probs)
            causal_softmax_kernel<V, E><<<blocks, 32 * SOFTMAX_WARPS, 0, st>>>(static_cast<E *>(d), T, rows);
        else
            causal_softmax_backward_kernel<V, E><<<blocks, 32 * SOFTMAX_WARPS, 0, st>>>(
                static_cast<E *>(d), static_cast<const E *>(probs), T, rows);
    }, d, probs ? probs : d);
}

/* what both passes derive from their arguments */
typedef struct {
    tlm_dtype dt;   /* the mode's activation dtype */
    bool tf32;      /* TF32 GEMMs (the tf32 mode) */
    int C;          /* H*D */
    float scale;    /* 1/sqrt(D) */
    int64_t TT;     /* T*T: one head's scores */
    size_t head0;   /* elements between batch elements in q, k, v */
    size_t es;      /* bytes per element */
} attn_setup;

static attn_setup setup(int ld, int T, int H, int D, tlm_precision pm) {
    const tlm_dtype dt = tlm_precision_act_dtype(pm);
    return (attn_setup){dt, pm == TLM_PRECISION_TF32, H * D, 1.0f / sqrtf((float)D), (int64_t)T * T,
                        (size_t)T * ld, tlm_dtype_size(dt)};
}

/* element i of a dt tensor */
static inline void *at(void *p, size_t i, size_t es) { return (char *)p + i * es; }
static inline const void *at(const void *p, size_t i, size_t es) { return (const char *)p + i * es; }

void tlm_cuda_attention_forward(tlm_backend *be, void *out, void *probs, const void *q, const void *k, const void *v,
                                int ld, int B, int T, int H, int D, tlm_precision pm) {
    /* out (N,C); probs (B,H,T,T); q, k, v (N rows, row stride ld), head h at columns h*D.. */
    if (B <= 0 || T <= 0 || H <= 0) return;
    const char *op = "attention_forward";
    const attn_setup a = setup(ld, T, H, D, pm);

    tlm_stage_begin(be, "computing attention scores");
    for (int b = 0; b < B; b++) /* S_h (T,T) = scale Q_h K_h^T for the H heads of batch b */
        tlm_cuda_gemm(be, op, false, true, T, T, D, a.scale, at(q, b * a.head0, a.es), ld, D, at(k, b * a.head0, a.es),
                      ld, D, a.dt, 0.0f, NULL, at(probs, (size_t)b * H * a.TT, a.es), T, a.TT, a.dt, H, a.tf32);
    tlm_stage_end(be, "computing attention scores");

    tlm_stage_begin(be, "computing softmax");
    softmax_launch(be, op, probs, NULL, (size_t)B * H * T, T, a.dt);
    tlm_stage_end(be, "computing softmax");

    tlm_stage_begin(be, "final matmul");
    for (int b = 0; b < B; b++) /* out_h (T,D) = P_h V_h, into columns h*D.. of out */
        tlm_cuda_gemm(be, op, false, false, T, D, T, 1.0f, at(probs, (size_t)b * H * a.TT, a.es), T, a.TT,
                      at(v, b * a.head0, a.es), ld, D, a.dt, 0.0f, NULL, at(out, (size_t)b * T * a.C, a.es), a.C, D,
                      a.dt, H, a.tf32);
    tlm_stage_end(be, "final matmul");
}

void tlm_cuda_attention_backward(tlm_backend *be, void *dq, void *dk, void *dv, void *dprobs, const void *dout,
                                 const void *q, const void *k, const void *v, const void *probs, int ld, int B, int T,
                                 int H, int D, tlm_precision pm) {
    /* dq, dk, dv, q, k, v (N rows, row stride ld); dprobs, probs (B,H,T,T); dout (N,C) */
    if (B <= 0 || T <= 0 || H <= 0) return;
    const char *op = "attention_backward";
    const attn_setup a = setup(ld, T, H, D, pm);
    const size_t out0 = (size_t)T * a.C;

    for (int b = 0; b < B; b++) {
        const void *P = at(probs, (size_t)b * H * a.TT, a.es), *dO = at(dout, b * out0, a.es);
        /* dV_h (T,D) = P_h^T dO_h */
        tlm_cuda_gemm(be, op, true, false, T, D, T, 1.0f, P, T, a.TT, dO, a.C, D, a.dt, 0.0f, NULL,
                      at(dv, b * a.head0, a.es), ld, D, a.dt, H, a.tf32);
        /* dP_h (T,T) = dO_h V_h^T */
        tlm_cuda_gemm(be, op, false, true, T, T, D, 1.0f, dO, a.C, D, at(v, b * a.head0, a.es), ld, D, a.dt, 0.0f, NULL,
                      at(dprobs, (size_t)b * H * a.TT, a.es), T, a.TT, a.dt, H, a.tf32);
    }

    softmax_launch(be, op, dprobs, probs, (size_t)B * H * T, T, a.dt);

    for (int b = 0; b < B; b++) {
        const void *dS = at(dprobs, (size_t)b * H * a.TT, a.es);
        /* dQ_h (T,D) = scale dS_h K_h;  dK_h (T,D) = scale dS_h^T Q_h */
        tlm_cuda_gemm(be, op, false, false, T, D, T, a.scale, dS, T, a.TT, at(k, b * a.head0, a.es), ld, D, a.dt, 0.0f,
                      NULL, at(dq, b * a.head0, a.es), ld, D, a.dt, H, a.tf32);
        tlm_cuda_gemm(be, op, true, false, T, D, T, a.scale, dS, T, a.TT, at(q, b * a.head0, a.es), ld, D, a.dt, 0.0f,
                      NULL, at(dk, b * a.head0, a.es), ld, D, a.dt, H, a.tf32);
    }
}
