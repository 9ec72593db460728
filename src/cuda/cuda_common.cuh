/* cuda_common.cuh — what the CUDA backend's files share: the check macros (a failed CUDA or
 * cuBLASLt call is fatal, naming the op, file:line and the error string), the backend-private
 * state (stream, cuBLASLt handle and workspace, scratch for column reductions), the element
 * types (float, __nv_bfloat16, __half for TLM_DTYPE_F32, BF16, F16) and the switch on dt that
 * launchers use, the ops' declarations (one tlm_cuda_<op> per op of tlm/ops.def, semantics as
 * documented there), the GEMM helper of matmul.cu, launch helpers, vector loads and stores that
 * widen to fp32 and round back, and warp/block reductions.
 * Internal to src/cuda: everyone else reaches the ops through the dispatch (tlm/ops.h). */
#ifndef TLM_CUDA_COMMON_CUH
#define TLM_CUDA_COMMON_CUH

#include <cuda_runtime.h>
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <float.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <type_traits>

#include "tlm/backend.h"
#include "tlm/dtype.h"
#include "tlm/ops.h"
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
#define TLM_CUDA_SIDE_MARKS 16 /* side-stream marks in flight (not yet joined) */
#define TLM_CUDA_SCRATCH_BYTES ((size_t)8 << 20)    /* partial sums of column reductions: 8 MiB */

struct tlm_cuda_matmul_cache; /* matmul.cu: descriptors, layouts and algorithms per GEMM shape */

typedef struct tlm_cuda {
    int device;
    int num_sms;
    char device_name[192];           /* "NVIDIA H100 80GB HBM3 (sm_90, 132 SMs)" */
    cudaStream_t stream;             /* where ops run now: the compute stream, or inside a side
                                        section (backend.h) the side stream */
    cudaStream_t compute_stream;     /* every op and copy runs on it, in order */
    cublasLtHandle_t lt;
    void *workspace;                 /* (TLM_CUDA_WORKSPACE_BYTES) cuBLASLt's, of the stream ops run on */
    size_t workspace_bytes;
    void *compute_workspace;         /* the compute stream's; tlm_alloc'd at creation */
    /* the side stream (backend.h, backend_cuda.cu): set up at its first use */
    int side_state;                  /* 0 not yet set up, 1 ready, -1 off (TLM_SIDE_STREAM=0 or setup failed) */
    cudaStream_t side_stream;
    void *side_workspace;            /* (TLM_CUDA_WORKSPACE_BYTES) tlm_alloc'd; NULL after
                                        tlm_backend_release_workspaces, until the next side section */
    cudaEvent_t side_fork;           /* the compute stream's point a side section starts after */
    cudaEvent_t side_marks[TLM_CUDA_SIDE_MARKS]; /* mark m is side_marks[m % TLM_CUDA_SIDE_MARKS] */
    int side_last, side_joined;      /* the last mark made, the last the compute stream waits for */
    int priority_high, priority_low; /* the compute stream's and the background streams' (0, 0 without a
                                        side stream; a lower number is a higher priority) */
    int priority_side;               /* the side stream's: between them where the range has room */
    float *scratch;                  /* (TLM_CUDA_SCRATCH_BYTES / 4) per-block partial sums */
    size_t scratch_floats;
    float *flash_split;              /* (flash_split_floats) FlashAttention's split-KV partials, made by
                                        the first launch that splits (attention/split.cu) */
    size_t flash_split_floats;
    bool flash_split_failed;         /* it could not be allocated: the kernels run unsplit */
    struct tlm_cuda_matmul_cache *matmul_cache;
    bool pdl; /* tlm_cuda_launch's kernels launch early (TLM_PDL, below) */
} tlm_cuda;

static inline tlm_cuda *tlm_cuda_of(tlm_backend *be) { return (tlm_cuda *)be->impl; }
static inline cudaStream_t tlm_cuda_stream(tlm_backend *be) { return tlm_cuda_of(be)->stream; }

/* ---- element types -------------------------------------------------------------------------- */

/* The element type of a dt tensor: float (TLM_DTYPE_F32), __nv_bfloat16 (BF16), __half (F16).
 * Launchers switch once on dt and instantiate their kernels for T:
 *   tlm_cuda_dispatch(dt, __func__, [&](auto tag) { using T = typename decltype(tag)::type; ... }); */
template <typename T> struct tlm_type { using type = T; };

template <typename F> static inline void tlm_cuda_dispatch(tlm_dtype dt, const char *op, F &&f) {
    switch (dt) {
    case TLM_DTYPE_F32: f(tlm_type<float>{}); return;
    case TLM_DTYPE_BF16: f(tlm_type<__nv_bfloat16>{}); return;
    case TLM_DTYPE_F16: f(tlm_type<__half>{}); return;
    default: tlm_fatal("%s: dtype %s is not an activation dtype (F32, BF16 or F16)", op, tlm_dtype_name(dt));
    }
}

/* cuBLASLt's name for a dt */
static inline cudaDataType_t tlm_cuda_data_type(tlm_dtype dt, const char *op) {
    switch (dt) {
    case TLM_DTYPE_F32: return CUDA_R_32F;
    case TLM_DTYPE_BF16: return CUDA_R_16BF;
    case TLM_DTYPE_F16: return CUDA_R_16F;
    default: tlm_fatal("%s: dtype %s is not an activation dtype (F32, BF16 or F16)", op, tlm_dtype_name(dt));
    }
}

/* elements of T in one 16-byte access: 4 floats, 8 bf16/fp16 */
template <typename T> constexpr int tlm_vec16() { return 16 / (int)sizeof(T); }

/* widen to fp32 (exact), and round fp32 to T (round to nearest even; NaN stays NaN, overflow to inf) */
__device__ __forceinline__ float tlm_f32(float v) { return v; }
__device__ __forceinline__ float tlm_f32(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float tlm_f32(__half v) { return __half2float(v); }
template <typename T> __device__ __forceinline__ T tlm_round(float v);
template <> __device__ __forceinline__ float tlm_round<float>(float v) { return v; }
template <> __device__ __forceinline__ __nv_bfloat16 tlm_round<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }
template <> __device__ __forceinline__ __half tlm_round<__half>(float v) { return __float2half_rn(v); }

/* ---- GEMM (matmul.cu) ---------------------------------------------------------------------- */

/* Row-major, strided-batched: for i < batch,
 *   D_i (M,N) = alpha op(A_i) op(B_i) + beta C_i,  X_i = X + i*strideX (in elements),
 * op(A) (M,K), op(B) (K,N); A stored (M,K) or, when trans_a, (K,M), with row stride lda; likewise
 * B; C and D share the row stride ldc and batch stride. A and B hold ab_dt elements, C and D
 * cd_dt elements (F32, or ab_dt). C may be NULL when beta == 0, and may equal D (in place).
 * Accumulates in fp32 through cuBLASLt: CUBLAS_COMPUTE_32F (strict IEEE for fp32 operands),
 * or TF32 tensor cores when the operands are fp32 and `tf32` is set (the TF32 precision mode).
 * Descriptors and the heuristic's choice are cached per shape, types and beta. `op` names the
 * calling op in error messages. */
void tlm_cuda_gemm(tlm_backend *be, const char *op, bool trans_a, bool trans_b, int M, int N, int K,
                   float alpha, const void *A, int64_t lda, int64_t stride_a, const void *B, int64_t ldb,
                   int64_t stride_b, tlm_dtype ab_dt, float beta, const void *C, void *D, int64_t ldc,
                   int64_t stride_c, tlm_dtype cd_dt, int batch, bool tf32);
void tlm_cuda_matmul_cache_destroy(tlm_cuda *cu);

/* nvtx.cu: adds the hook that turns steps, phases, layers, ops and stages into NVTX ranges */
tlm_status tlm_cuda_nvtx_hook_install(tlm_backend *be);

/* ---- the ops --------------------------------------------------------------------------------- */

/* tlm_cuda_<op> for every op of the list (tlm/ops.def), with its parameters after `tlm_backend *be`;
 * one file per op family (embedding.cu, rmsnorm.cu, layernorm.cu, relu.cu, matmul.cu, cast.cu,
 * rope.cu, attention/naive.cu, attention/ops.cu (the FlashAttention ops; their internal interface:
 * attention/attention.cuh), swiglu.cu, cross_entropy.cu, reduce.cu, adamw.cu, grad_unscale.cu) */
#define TLM_OP(ID, name, cls, params, args, flops, bytes) void tlm_cuda_##name(tlm_backend *be, TLM_UNPAREN params);
#include "tlm/ops.def"
#undef TLM_OP

/* ---- launch helpers ---------------------------------------------------------------------------- */

static inline bool tlm_aligned16(const void *p) { return ((uintptr_t)p & 15) == 0; }

/* raises kernel's dynamic shared-memory limit to bytes, once per kernel (the template argument; the
 * size is fixed per instantiation): before any graph capture reaches the launch, harmless in one */
template <auto kernel> static inline void tlm_cuda_set_smem(const char *op, size_t bytes) {
    static bool done = false;
    if (done) return;
    TLM_CUDA_CHECK_OP(op, cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
    done = true;
}

/* resident blocks per SM of a kernel at (threads, smem), asked once per kernel (after tlm_cuda_set_smem) */
template <auto kernel> static inline int tlm_cuda_occupancy(const char *op, int threads, size_t smem) {
    static int occ = 0;
    if (occ == 0) {
        TLM_CUDA_CHECK_OP(op, cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, kernel, threads, smem));
        if (occ < 1) occ = 1;
    }
    return occ;
}

/* acc_dst[row0 + r][col0 + c] += scale * acc for a warp's 16 x 8N block of accumulators in the
 * m16n8 C-fragment layout (acc[n]: columns 8n.., lane g = lane/4, t4 = lane%4 holding row g,
 * columns 2 t4 + {0, 1} in [0], [1] and row g + 8 in [2], [3]; the layout of mma.sync m16n8 and of
 * each warp's rows of a wgmma m64nN accumulator), acc_dst rows of ld floats, rows >= nrows
 * skipped: float4 atomics, lane pairs (t4, t4 ^ 1) swapping halves so the even lane holds 4
 * columns of row g and the odd lane 4 columns of row g + 8 (16-byte aligned: col0 and ld
 * multiples of 4). */
template <int N>
__device__ __forceinline__ void tlm_cuda_atomic_add_c_block(float *acc_dst, int ld, int row0, int col0, int nrows,
                                                            const float (&acc)[N][4], float scale) {
    const int lane = threadIdx.x & 31, g = lane >> 2, t4 = lane & 3;
    const bool even = (t4 & 1) == 0;
    const int row = row0 + g + (even ? 0 : 8);
    float *p = acc_dst + (int64_t)row * ld + col0 + 2 * (t4 & ~1);
#pragma unroll
    for (int n = 0; n < N; n++) {
        const float send0 = even ? acc[n][2] : acc[n][0], send1 = even ? acc[n][3] : acc[n][1];
        const float got0 = __shfl_xor_sync(0xffffffffu, send0, 1), got1 = __shfl_xor_sync(0xffffffffu, send1, 1);
        const float4 val =
            even ? make_float4(acc[n][0], acc[n][1], got0, got1) : make_float4(got0, got1, acc[n][2], acc[n][3]);
        if (row < nrows)
            atomicAdd(reinterpret_cast<float4 *>(p + n * 8),
                      make_float4(val.x * scale, val.y * scale, val.z * scale, val.w * scale));
    }
}

/* One block per `threads` items, no cap but CUDA's (2^31 - 1 blocks; a grid-stride loop covers the
 * rest): short blocks, for kernels that run beside others and must give the SMs back often. */
static inline unsigned tlm_cuda_grid_all(size_t items, int threads) {
    size_t g = (items + (size_t)threads - 1) / (size_t)threads;
    if (g > 2147483647u) g = 2147483647u;
    return (unsigned)(g > 0 ? g : 1);
}

/* blocks for a grid-stride loop over `items` with `threads` per block: enough to fill every SM
 * (8 blocks of 256 threads = 2048 resident threads per SM), no more than the items need */
static inline unsigned tlm_cuda_grid(tlm_backend *be, size_t items, int threads) {
    size_t need = (items + (size_t)threads - 1) / (size_t)threads;
    size_t cap = (size_t)tlm_cuda_of(be)->num_sms * (2048 / (size_t)threads);
    size_t g = need < cap ? need : cap;
    return (unsigned)(g > 0 ? g : 1);
}

/* The launch pattern of the elementwise and row kernels: switches once on dt (T = float,
 * __nv_bfloat16 or __half, as tlm_cuda_dispatch) and calls launch(tag, vec), vec a
 * std::integral_constant<int, V>: V = tlm_vec16<T>() (16-byte accesses) when n_inner (the length
 * the vectors tile: a row, or the whole tensor) is a multiple of it and every pointer in ptrs is
 * 16-byte aligned, else V = 1 (the scalar path); then checks the launch, naming op.
 *   tlm_cuda_launch_vec(dt, __func__, C, [&](auto tag, auto vec) {
 *       using T = typename decltype(tag)::type; constexpr int V = decltype(vec)::value;
 *       kernel<V, T><<<grid, threads, 0, st>>>(...); }, out, x); */
template <typename L, typename... P>
static inline void tlm_cuda_launch_vec(tlm_dtype dt, const char *op, long long n_inner, L &&launch, const P *...ptrs) {
    tlm_cuda_dispatch(dt, op, [&](auto tag) {
        using T = typename decltype(tag)::type;
        constexpr int VEC = tlm_vec16<T>();
        if (n_inner % VEC == 0 && (tlm_aligned16(ptrs) && ...)) launch(tag, std::integral_constant<int, VEC>{});
        else launch(tag, std::integral_constant<int, 1>{});
    });
    TLM_CUDA_CHECK_OP(op, cudaGetLastError());
}

/* ---- programmatic dependent launch (Hopper; CUDA programming guide, "Programmatic Dependent
 * Launch and Synchronization") ----------------------------------------------------------------
 * tlm_cuda_launch(op, be, kernel, grid, block, smem, stream, args...) launches with
 * cudaLaunchAttributeProgrammaticStreamSerialization (when the backend's `pdl`, TLM_PDL=1, the
 * default): the kernel's blocks may be scheduled while the previous kernel on the stream drains,
 * instead of after it completes and the launch is processed, which hides the launch latency between
 * the short kernels of a small model's step (in a CUDA graph as well: capture keeps the
 * programmatic edge). Every kernel launched this way calls tlm_pdl_wait() before its first global
 * memory access, read or write: it returns once the previous grid has completed and its writes are
 * visible, so the kernel sees exactly what a plain launch would. Without the attribute (or before
 * sm_90) tlm_pdl_wait() is a no-op. A launch failure is fatal, naming the calling op. */
__device__ __forceinline__ void tlm_pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

template <typename... KP, typename... A>
static inline void tlm_cuda_launch(const char *op, tlm_backend *be, void (*kernel)(KP...), dim3 grid, dim3 block,
                                   size_t smem, cudaStream_t st, A &&...args) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = st;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = attr;
    cfg.numAttrs = tlm_cuda_of(be)->pdl ? 1 : 0;
    TLM_CUDA_CHECK_OP(op, cudaLaunchKernelEx(&cfg, kernel, static_cast<KP>(args)...));
}

/* A grid-stride pass over n floats: each thread calls vec4(i) for its float4 indices i < n/4 when
 * VEC4 (16-byte accesses: the caller's pointers 16-byte aligned), then one(i) for its elements i of
 * the rest, [4 (n/4), n) (VEC4) or [0, n) (!VEC4); each in ascending order, so a thread's
 * arithmetic order is fixed by the grid. Any grid covers all n (tlm_cuda_grid sizes one). */
template <bool VEC4, typename V, typename S>
__device__ __forceinline__ void tlm_grid_stride_f32(size_t n, V &&vec4, S &&one) {
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    const size_t first = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    size_t done = 0;
    if constexpr (VEC4) {
        const size_t n4 = n / 4;
        for (size_t i = first; i < n4; i += stride) vec4(i);
        done = n4 * 4;
    }
    for (size_t i = done + first; i < n; i += stride) one(i);
}

/* threads for a block that walks a row of `items` vectors: a multiple of 32 in [32, max] */
static inline int tlm_cuda_row_threads(int items, int max) {
    int t = (items + 31) / 32 * 32;
    if (t < 32) t = 32;
    return t < max ? t : max;
}

/* ---- vector loads and stores ----------------------------------------------------------------------
 * VEC elements of T to or from fp32 registers. VEC * sizeof(T) a multiple of 16: 16-byte accesses
 * (the pointer 16-byte aligned); 8 or 4 bytes: one access of that size (aligned to it); otherwise
 * element by element. Stores round to T (nearest even). */
template <int BYTES> struct tlm_raw_t;
template <> struct tlm_raw_t<16> { using type = uint4; };
template <> struct tlm_raw_t<8> { using type = uint2; };
template <> struct tlm_raw_t<4> { using type = unsigned int; };

template <int VEC, typename T>
__device__ __forceinline__ void tlm_load(float (&r)[VEC], const T *p) {
    constexpr int BYTES = VEC * (int)sizeof(T);
    if constexpr (BYTES % 16 == 0) {
        constexpr int PER = 16 / (int)sizeof(T);
#pragma unroll
        for (int c = 0; c < VEC / PER; c++) {
            uint4 raw = reinterpret_cast<const uint4 *>(p)[c];
            T e[PER];
            memcpy(e, &raw, 16);
#pragma unroll
            for (int i = 0; i < PER; i++) r[c * PER + i] = tlm_f32(e[i]);
        }
    } else if constexpr (BYTES == 8 || BYTES == 4) {
        using R = typename tlm_raw_t<BYTES>::type;
        R raw = *reinterpret_cast<const R *>(p);
        T e[VEC];
        memcpy(e, &raw, BYTES);
#pragma unroll
        for (int i = 0; i < VEC; i++) r[i] = tlm_f32(e[i]);
    } else {
#pragma unroll
        for (int i = 0; i < VEC; i++) r[i] = tlm_f32(p[i]);
    }
}

template <int VEC, typename T>
__device__ __forceinline__ void tlm_store(T *p, const float (&r)[VEC]) {
    constexpr int BYTES = VEC * (int)sizeof(T);
    if constexpr (BYTES % 16 == 0) {
        constexpr int PER = 16 / (int)sizeof(T);
#pragma unroll
        for (int c = 0; c < VEC / PER; c++) {
            T e[PER];
#pragma unroll
            for (int i = 0; i < PER; i++) e[i] = tlm_round<T>(r[c * PER + i]);
            uint4 raw;
            memcpy(&raw, e, 16);
            reinterpret_cast<uint4 *>(p)[c] = raw;
        }
    } else if constexpr (BYTES == 8 || BYTES == 4) {
        using R = typename tlm_raw_t<BYTES>::type;
        T e[VEC];
#pragma unroll
        for (int i = 0; i < VEC; i++) e[i] = tlm_round<T>(r[i]);
        R raw;
        memcpy(&raw, e, BYTES);
        *reinterpret_cast<R *>(p) = raw;
    } else {
#pragma unroll
        for (int i = 0; i < VEC; i++) p[i] = tlm_round<T>(r[i]);
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

/* The sum over the block of f(x) for the C elements of one row (each thread its strided share, VEC
 * at a time, in order; then tlm_block_sum); every thread gets it. */
template <int VEC, typename T, typename F>
__device__ __forceinline__ float tlm_row_sum(const T *row, int C, F f) {
    float s = 0.0f;
    for (int c = threadIdx.x * VEC; c < C; c += blockDim.x * VEC) {
        float v[VEC];
        tlm_load<VEC>(v, row + c);
#pragma unroll
        for (int i = 0; i < VEC; i++) s += f(v[i]);
    }
    return tlm_block_sum(s);
}

/* For each of this thread's VEC-wide pieces of one row, in order: loads x, d (a gradient) and w
 * (a per-column weight) widened to fp32 and calls f(c, xv, dv, wv), c the piece's first column:
 * the loop of the normalizations' backward passes. */
template <int VEC, typename TX, typename TD, typename F>
__device__ __forceinline__ void tlm_row_for_each(const TX *x, const TD *d, const float *w, int C, F f) {
    for (int c = threadIdx.x * VEC; c < C; c += blockDim.x * VEC) {
        float xv[VEC], dv[VEC], wv[VEC];
        tlm_load<VEC>(xv, x + c);
        tlm_load<VEC>(dv, d + c);
        tlm_load<VEC>(wv, w + c);
        f(c, xv, dv, wv);
    }
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
