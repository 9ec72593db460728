/* cuda_common.cuh — what the CUDA backend's files share: the check macros (a failed CUDA or
 * cuBLASLt call is fatal, naming the op, file:line and the error string), the backend-private
 * state (stream, cuBLASLt handle and workspace, scratch for column reductions), the ops'
 * declarations (one tlm_cuda_<op> per member of tlm_ops, semantics as in tlm/backend.h), the
 * GEMM helper of matmul.cu, launch helpers, vector loads and warp/block reductions.
 * Internal to src/cuda: the model reaches the ops only through tlm_backend.ops. */
#ifndef TLM_CUDA_COMMON_CUH
#define TLM_CUDA_COMMON_CUH

#include <cuda_runtime.h>
#include <cublasLt.h>
#include <float.h>
#include <stddef.h>
#include <stdint.h>

#include "tlm/backend.h"
#include "tlm/status.h"

/* ---- checks ----------------------------------------------------------------------------- */

static inline void tlm_cuda_check_(cudaError_t e, const char *what, const char *op, const char *file,
                                   int line) {
    if (e != cudaSuccess)
        tlm_fatal("CUDA error in %s at %s:%d: %s: %s (%s)", op, file, line, what, cudaGetErrorString(e),
                  cudaGetErrorName(e));
}

static inline void tlm_cublas_check_(cublasStatus_t s, const char *what, const char *op, const char *file,
                                     int line) {
    if (s != CUBLAS_STATUS_SUCCESS)
        tlm_fatal("cuBLASLt error in %s at %s:%d: %s: %s", op, file, line, what, cublasLtGetStatusString(s));
}

/* TLM_CUDA_CHECK(cudaMemsetAsync(...)): fatal on failure, naming the enclosing function (the op). */
#define TLM_CUDA_CHECK(call) tlm_cuda_check_((call), #call, __func__, __FILE__, __LINE__)
#define TLM_CUBLAS_CHECK(call) tlm_cublas_check_((call), #call, __func__, __FILE__, __LINE__)
/* the same, naming an op given by the caller (helpers shared by several ops) */
#define TLM_CUDA_CHECK_OP(op, call) tlm_cuda_check_((call), #call, (op), __FILE__, __LINE__)
#define TLM_CUBLAS_CHECK_OP(op, call) tlm_cublas_check_((call), #call, (op), __FILE__, __LINE__)
/* after every kernel launch */
#define TLM_CUDA_CHECK_LAUNCH() tlm_cuda_check_(cudaGetLastError(), "kernel launch", __func__, __FILE__, __LINE__)

/* ---- backend-private state ---------------------------------------------------------------- */

#define TLM_CUDA_WORKSPACE_BYTES ((size_t)32 << 20) /* cuBLASLt workspace: 32 MiB */
#define TLM_CUDA_SCRATCH_BYTES ((size_t)8 << 20)    /* partial sums of column reductions: 8 MiB */

struct tlm_cuda_matmul_cache; /* matmul.cu: descriptors, layouts and algorithms per GEMM shape */

typedef struct tlm_cuda {
    int device;
    int num_sms;
    char device_name[192];           /* "NVIDIA H100 80GB HBM3 (sm_90, 132 SMs)" */
    cudaStream_t stream;             /* every op and copy runs on it, in order */
    cublasLtHandle_t lt;
    void *workspace;                 /* (TLM_CUDA_WORKSPACE_BYTES) cuBLASLt's; tlm_alloc'd */
    size_t workspace_bytes;
    float *scratch;                  /* (TLM_CUDA_SCRATCH_BYTES / 4) per-block partial sums */
    size_t scratch_floats;
    struct tlm_cuda_matmul_cache *matmul_cache;
} tlm_cuda;

static inline tlm_cuda *tlm_cuda_of(tlm_backend *be) { return (tlm_cuda *)be->impl; }
static inline cudaStream_t tlm_cuda_stream(tlm_backend *be) { return tlm_cuda_of(be)->stream; }

/* ---- GEMM (matmul.cu) ---------------------------------------------------------------------- */

/* Row-major, strided-batched: for i < batch,
 *   C_i (M,N) = alpha op(A_i) op(B_i) + beta C_i,  X_i = X + i*strideX,
 * op(A) (M,K), op(B) (K,N); A stored (M,K) or, when trans_a, (K,M), with row stride lda; likewise
 * B; C with row stride ldc. Computes in fp32 (be->precision FP32) or TF32 (TLM_PRECISION_TF32)
 * through cuBLASLt; descriptors and the heuristic's choice are cached per shape. `op` names the
 * calling op in error messages. */
void tlm_cuda_gemm(tlm_backend *be, const char *op, bool trans_a, bool trans_b, int M, int N, int K,
                   float alpha, const float *A, int64_t lda, int64_t stride_a, const float *B, int64_t ldb,
                   int64_t stride_b, float beta, float *C, int64_t ldc, int64_t stride_c, int batch);
void tlm_cuda_matmul_cache_destroy(tlm_cuda *cu);

/* ---- the ops --------------------------------------------------------------------------------- */

void tlm_cuda_embedding_forward(tlm_backend *be, float *out, const int32_t *tokens, const float *wte, int N,
                                int C);
void tlm_cuda_embedding_backward(tlm_backend *be, float *dwte, const float *dout, const int32_t *tokens, int N,
                                 int V, int C);
void tlm_cuda_rmsnorm_forward(tlm_backend *be, float *out, float *rstd, const float *x, const float *w, int N,
                              int C, float eps);
void tlm_cuda_rmsnorm_backward(tlm_backend *be, float *dx, float *dw, const float *dout, const float *x,
                               const float *w, const float *rstd, int N, int C);
void tlm_cuda_matmul_forward(tlm_backend *be, float *y, const float *x, const float *w, int N, int in, int out);
void tlm_cuda_matmul_backward(tlm_backend *be, float *dx, float *dw, const float *dy, const float *x,
                              const float *w, int N, int in, int out);
void tlm_cuda_rope_forward(tlm_backend *be, float *x, const float *cos, const float *sin, int B, int T,
                           int nheads, int D, int ld);
void tlm_cuda_rope_backward(tlm_backend *be, float *dx, const float *cos, const float *sin, int B, int T,
                            int nheads, int D, int ld);
void tlm_cuda_attention_forward(tlm_backend *be, float *out, float *probs, const float *q, const float *k,
                                const float *v, int ld, int B, int T, int H, int D);
void tlm_cuda_attention_backward(tlm_backend *be, float *dq, float *dk, float *dv, float *dprobs,
                                 const float *dout, const float *q, const float *k, const float *v,
                                 const float *probs, int ld, int B, int T, int H, int D);
void tlm_cuda_swiglu_forward(tlm_backend *be, float *out, const float *ab, int N, int F);
void tlm_cuda_swiglu_backward(tlm_backend *be, float *dab, const float *dout, const float *ab, int N, int F);
void tlm_cuda_residual_forward(tlm_backend *be, float *out, const float *x, const float *y, size_t n);
void tlm_cuda_add_inplace(tlm_backend *be, float *dst, const float *src, size_t n);
void tlm_cuda_cross_entropy_forward(tlm_backend *be, float *losses, float *lse, const float *logits,
                                    const int32_t *targets, int N, int V);
void tlm_cuda_cross_entropy_backward(tlm_backend *be, float *dlogits, const float *logits, const float *lse,
                                     const int32_t *targets, int N, int V, float dloss);
void tlm_cuda_adamw_step(tlm_backend *be, float *params, const float *grads, float *m, float *v, size_t n,
                         float lr, float beta1, float beta2, float eps, float weight_decay, int t);

/* ---- launch helpers ---------------------------------------------------------------------------- */

static inline bool tlm_aligned16(const void *p) { return ((uintptr_t)p & 15) == 0; }

/* blocks for a grid-stride loop over `items` with `threads` per block: enough to fill every SM
 * (8 blocks of 256 threads = 2048 resident threads per SM), no more than the items need */
static inline unsigned tlm_cuda_grid(tlm_backend *be, size_t items, int threads) {
    size_t need = (items + (size_t)threads - 1) / (size_t)threads;
    size_t cap = (size_t)tlm_cuda_of(be)->num_sms * (2048 / (size_t)threads);
    size_t g = need < cap ? need : cap;
    return (unsigned)(g > 0 ? g : 1);
}

/* threads for a block that walks a row of `items` vectors: a multiple of 32 in [32, max] */
static inline int tlm_cuda_row_threads(int items, int max) {
    int t = (items + 31) / 32 * 32;
    if (t < 32) t = 32;
    return t < max ? t : max;
}

/* ---- vector loads and stores: VEC = 4 (16 bytes, pointer 16-byte aligned), 2, or 1 ------------ */

template <int VEC>
__device__ __forceinline__ void tlm_load(float (&r)[VEC], const float *p) {
    if constexpr (VEC == 4) {
        float4 v = *reinterpret_cast<const float4 *>(p);
        r[0] = v.x; r[1] = v.y; r[2] = v.z; r[3] = v.w;
    } else if constexpr (VEC == 2) {
        float2 v = *reinterpret_cast<const float2 *>(p);
        r[0] = v.x; r[1] = v.y;
    } else {
#pragma unroll
        for (int i = 0; i < VEC; i++) r[i] = p[i];
    }
}

template <int VEC>
__device__ __forceinline__ void tlm_store(float *p, const float (&r)[VEC]) {
    if constexpr (VEC == 4) {
        *reinterpret_cast<float4 *>(p) = make_float4(r[0], r[1], r[2], r[3]);
    } else if constexpr (VEC == 2) {
        *reinterpret_cast<float2 *>(p) = make_float2(r[0], r[1]);
    } else {
#pragma unroll
        for (int i = 0; i < VEC; i++) p[i] = r[i];
    }
}

/* ---- reductions (blockDim.x a multiple of 32, at most 1024) ------------------------------------- */

__device__ __forceinline__ float tlm_warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float tlm_warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* Sum over the block; every thread gets it. Safe to call repeatedly in one kernel. */
__device__ __forceinline__ float tlm_block_sum(float v) {
    __shared__ float partial[32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    v = tlm_warp_sum(v);
    __syncthreads(); /* a previous call's readers are done with partial */
    if (lane == 0) partial[warp] = v;
    __syncthreads();
    v = lane < nwarps ? partial[lane] : 0.0f;
    return tlm_warp_sum(v);
}

/* Online (max, sum of exp(x - max)) pairs (Milakov & Gimelshein 2018, "Online normalizer
 * calculation for softmax", Algorithm 3): merge (m2, s2) into (m, s). m starts at -FLT_MAX, s at 0. */
__device__ __forceinline__ void tlm_softmax_merge(float &m, float &s, float m2, float s2) {
    float mx = fmaxf(m, m2);
    s = s * __expf(m - mx) + s2 * __expf(m2 - mx);
    m = mx;
}

/* Block-wide merge of the threads' (m, s); every thread gets the result. */
__device__ __forceinline__ void tlm_block_softmax_merge(float &m, float &s) {
    __shared__ float pm[32], ps[32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        float m2 = __shfl_xor_sync(0xffffffffu, m, o), s2 = __shfl_xor_sync(0xffffffffu, s, o);
        tlm_softmax_merge(m, s, m2, s2);
    }
    __syncthreads();
    if (lane == 0) { pm[warp] = m; ps[warp] = s; }
    __syncthreads();
    m = lane < nwarps ? pm[lane] : -FLT_MAX;
    s = lane < nwarps ? ps[lane] : 0.0f;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        float m2 = __shfl_xor_sync(0xffffffffu, m, o), s2 = __shfl_xor_sync(0xffffffffu, s, o);
        tlm_softmax_merge(m, s, m2, s2);
    }
}

#endif
