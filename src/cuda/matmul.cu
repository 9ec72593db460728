/* matmul.cu — GEMMs through cuBLASLt: the linear layer without bias, y = x W^T with W (out,in)
 * as nn.Linear stores it (optionally y = residual + x W^T, the residual connection folded into
 * the GEMM's epilogue as C with beta = 1), its backward dx = dy W, dW = dy^T x, and the
 * strided-batched row-major GEMM helper that attention.cu uses too. Accumulation is always fp32
 * (CUBLAS_COMPUTE_32F, scale type fp32). Operands of dtype dt: fp32 (be->precision FP32: strict
 * IEEE, no TF32; TF32: CUBLAS_COMPUTE_32F_FAST_TF32), or bf16/fp16 on the tensor cores. Outputs
 * in dt, except the two that land in float32 tensors (PyTorch autocast): the residual stream
 * (C and D CUDA_R_32F with bf16/fp16 A and B, which cuBLASLt supports) and the weight gradient
 * (float32, or bf16 where a bf16 data-parallel reduction reads it: ops.def's dw_dt).
 *
 * Row-major to cuBLAS's column-major: a row-major (r,c) matrix with row stride ld is, read
 * column-major, its transpose (c,r) with leading dimension ld. So C = op(A) op(B) (row-major)
 * is C^T = op(B)^T op(A)^T (column-major): cuBLAS is called with the operands swapped, m = N,
 * n = M, and each operand's own transpose flag.
 *
 * Each distinct GEMM (shape, strides, types, compute type, beta, pointer alignment) gets a cached plan: its
 * matmul descriptor, three layouts and its algorithm, so repeated calls skip descriptor creation,
 * the heuristic query and the timing below. The plan's algorithm never changes after its creation.
 *
 * Algorithm selection (TLM_GEMM_TUNE, read once per backend, when its first GEMM runs):
 *   0    (default) cuBLASLt's heuristic's first pick (cublasLtMatmulAlgoGetHeuristic's result 0).
 *   1    when a plan is created, the heuristic's first GEMM_TUNE_CANDIDATES (8) results
 *        are timed once on the device and the plan keeps the fastest; the heuristic's pick stays
 *        unless another is more than 1% faster (GEMM_TUNE_MARGIN).
 *        What is timed: each candidate runs once untimed (one that cuBLASLt refuses to launch,
 *        NOT_SUPPORTED or INVALID_VALUE: workspace, alignment, is dropped); then, behind a
 *        one-thread kernel that holds the stream (1 ms + 8 us per launch) while the host queues the
 *        rest, so that the launches run back to back without the host's launch overhead, 5 to 50
 *        launches of each (about 200 us of work: tune_reps) between two CUDA events on the compute
 *        stream; the mean time decides. One host synchronization per new plan.
 *        On what: the call's real A and B (real data, not zeros), alpha and beta as the call's.
 *        Memory: the candidates write the call's real D, which the real call right after
 *        overwrites (with beta != 0 they read the real C, which is not D, so C stays intact): no
 *        memory is added. Only an in-place call with beta != 0 (C == D: the residual added in
 *        place) writes a scratch D of the output's size, tlm_alloc'd (TLM_MEM_WORKSPACE,
 *        "matmul.tune_d") and freed at once, so it counts in the reported peaks if it lands on one
 *        (the model's GEMMs are never in place; the op tests' are); if it cannot be allocated, that
 *        plan keeps the heuristic's pick. Loading the candidates' kernels takes a little device
 *        memory outside tlm's allocator (in device_peak_bytes, not in peak_bytes).
 *        When: never during CUDA graph capture (cudaStreamIsCapturing on the compute stream): a
 *        plan created while capturing keeps the heuristic's pick for good. tlm_graph_run runs each
 *        pass eagerly once before capturing it, so every plan of a captured pass is timed first.
 *        The timing adds a few ms per new plan to the first (warm-up) step.
 *        With a bf16/fp16 output, 1 and 2 ask cuBLASLt only for algorithms that add split-K partial
 *        sums in fp32 (reduction schemes NONE and COMPUTE_TYPE, not INPLACE or OUTPUT_TYPE, which add
 *        them in the 16-bit output type), so the heuristic's first pick may differ from 0's.
 *   2    as 1, and each timed plan is printed to stderr (shape, the heuristic's ms, the kept one's, their
 *        split-K counts and reduction schemes).
 * The choice may differ between processes (timing noise), never between calls of one plan. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/cuda_common.cuh"
#include "tlm/memory.h"
#include "tlm/tuning.h"

#define MATMUL_CACHE_SIZE 128
#define GEMM_TUNE_CANDIDATES 8      /* heuristic results timed per plan */
#define GEMM_TUNE_WORK_US 200.0     /* timed launches per candidate: about this much work, 5 to 50 launches */
#define GEMM_TUNE_HOLD_US 1000      /* the stream is held 1 ms + 8 us per timed launch while they are queued */
#define GEMM_TUNE_MARGIN 0.99f      /* another candidate replaces the heuristic's pick below 0.99x its time */

typedef struct {
    int32_t trans_a, trans_b;   /* column-major operation flags */
    int32_t m, n, k, batch;
    int64_t lda, ldb, ldc, stride_a, stride_b, stride_c;
    int32_t ab_type, cd_type;   /* cudaDataType_t of A and B, of C and D */
    int32_t compute;            /* cublasComputeType_t */
    int32_t has_beta;           /* beta != 0: C is read */
    uint32_t align_a, align_b, align_c, align_d; /* bytes, power of two <= 256 */
} plan_key;

typedef struct {
    plan_key key;
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t a, b, c;
    cublasLtMatmulAlgo_t algo;
    bool fallback; /* cuBLASLt has no algorithm for it (odd alignments): gemm_fallback_kernel */
    bool used;
} plan;

struct tlm_cuda_matmul_cache {
    plan plans[MATMUL_CACHE_SIZE];
    int last;       /* index of the last plan used: repeated calls hit it first */
    int next_evict; /* round robin once the table is full */
    int tune;       /* TLM_GEMM_TUNE: 0 heuristic, 1 timed, 2 timed and printed */
};

/* One call's operands in cuBLAS's column-major order (a = the caller's B, b = the caller's A):
 * what a new plan's candidates are timed on. */
typedef struct {
    const void *a, *b, *c;
    void *d;
    float alpha, beta;
} gemm_call;

static void plan_release(plan *p) {
    if (!p->used) return;
    TLM_CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(p->a));
    TLM_CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(p->b));
    TLM_CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(p->c));
    TLM_CUBLAS_CHECK(cublasLtMatmulDescDestroy(p->desc));
    p->used = false;
}

void tlm_cuda_matmul_cache_destroy(tlm_cuda *cu) {
    if (!cu->matmul_cache) return;
    for (int i = 0; i < MATMUL_CACHE_SIZE; i++) plan_release(&cu->matmul_cache->plans[i]);
    free(cu->matmul_cache);
    cu->matmul_cache = NULL;
}

/* largest power of two <= 256 that divides the address and every byte stride of the operand */
static uint32_t alignment(const void *p, int64_t ld, int64_t stride, int batch, size_t elem) {
    uint64_t bits = (uint64_t)(uintptr_t)p | (uint64_t)ld * elem | 256u;
    if (batch > 1) bits |= (uint64_t)stride * elem;
    return (uint32_t)(bits & (~bits + 1)); /* lowest set bit */
}

static cublasLtMatrixLayout_t make_layout(const char *op, cudaDataType_t type, int rows, int cols, int64_t ld,
                                          int batch, int64_t stride) {
    cublasLtMatrixLayout_t l;
    TLM_CUBLAS_CHECK_OP(op, cublasLtMatrixLayoutCreate(&l, type, (uint64_t)rows, (uint64_t)cols, ld));
    if (batch > 1) {
        int32_t count = batch;
        TLM_CUBLAS_CHECK_OP(op, cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count,
                                                                 sizeof count));
        TLM_CUBLAS_CHECK_OP(op, cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                                                 &stride, sizeof stride));
    }
    return l;
}

/* Holds the stream for `ns` nanoseconds (one thread, %globaltimer) so that the launches queued
 * behind it run back to back: their timing then excludes the host's launch overhead. */
__global__ void gemm_tune_hold_kernel(uint64_t ns) {
    uint64_t t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    } while (t - t0 < ns);
}

/* the plan's matmul descriptor: compute type, fp32 scale, the transposes */
static cublasLtMatmulDesc_t desc_create(const char *op, int32_t compute, cublasOperation_t ta, cublasOperation_t tb) {
    cublasLtMatmulDesc_t d;
    TLM_CUBLAS_CHECK_OP(op, cublasLtMatmulDescCreate(&d, (cublasComputeType_t)compute, CUDA_R_32F));
    TLM_CUBLAS_CHECK_OP(op, cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    TLM_CUBLAS_CHECK_OP(op, cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    return d;
}

/* timed launches per candidate: GEMM_TUNE_WORK_US of work at a nominal H100 rate (bf16/fp16 400
 * TFLOP/s, TF32 200, strict fp32 50), so that a small GEMM's time is well above the events'
 * resolution (about 0.5 us), within 5 to 50 */
static int tune_reps(const plan_key *k) {
    const double flop = 2.0 * k->m * k->n * k->k * k->batch;
    const double flop_per_us = k->ab_type != CUDA_R_32F                    ? 4e8
                               : k->compute == CUBLAS_COMPUTE_32F_FAST_TF32 ? 2e8
                                                                            : 5e7;
    const double reps = GEMM_TUNE_WORK_US / (flop / flop_per_us + 1e-3);
    return reps < 5 ? 5 : reps > 50 ? 50 : (int)reps;
}

/* bytes from D's first element to past its last: (batch-1) strides + (n-1) columns of ldc + m */
static size_t output_bytes(const plan_key *k) {
    const size_t e = k->cd_type == CUDA_R_32F ? 4 : 2;
    const int64_t last = (int64_t)(k->batch - 1) * k->stride_c + (int64_t)(k->n - 1) * k->ldc + k->m;
    return (size_t)last * e;
}

/* Times the n candidates of plan p on the call's operands as the header says, and returns the index
 * of the one the plan keeps (0, the heuristic's pick, unless another is faster by the margin, or
 * when none of them ran). */
static int plan_tune(tlm_backend *be, const char *op, const plan *p, const cublasLtMatmulHeuristicResult_t *cand,
                     int n, const gemm_call *g, int verbose) {
    tlm_cuda *cu = tlm_cuda_of(be);
    const plan_key *k = &p->key;
    void *d = g->d, *scratch = NULL;
    if (g->beta != 0.0f && g->c == g->d) { /* in place: the candidates must not add C twice */
        scratch = tlm_alloc(be, output_bytes(k), TLM_MEM_WORKSPACE, "matmul.tune_d");
        if (!scratch) return 0; /* out of memory: the heuristic's pick */
        d = scratch;
    }
    const void *c = g->beta != 0.0f ? g->c : d;
    bool ran[GEMM_TUNE_CANDIDATES];
    int n_ran = 0;
    for (int i = 0; i < n; i++) { /* the untimed launch; cuBLASLt refuses some (workspace, alignment) */
        const cublasStatus_t st = cublasLtMatmul(cu->lt, p->desc, &g->alpha, g->a, p->a, g->b, p->b, &g->beta, c, p->c,
                                                 d, p->c, &cand[i].algo, cu->workspace, cu->workspace_bytes, cu->stream);
        ran[i] = st == CUBLAS_STATUS_SUCCESS;
        if (!ran[i] && st != CUBLAS_STATUS_NOT_SUPPORTED && st != CUBLAS_STATUS_INVALID_VALUE)
            TLM_CUBLAS_CHECK_OP(op, st);
        n_ran += ran[i];
    }
    int best = 0;
    float ms[GEMM_TUNE_CANDIDATES] = {0};
    if (n_ran > 1) {
        cudaEvent_t ev[2 * GEMM_TUNE_CANDIDATES];
        for (int i = 0; i < 2 * n; i++) TLM_CUDA_CHECK_OP(op, cudaEventCreate(&ev[i]));
        const int reps = tune_reps(k);
        gemm_tune_hold_kernel<<<1, 1, 0, cu->stream>>>((uint64_t)(GEMM_TUNE_HOLD_US + 8 * n_ran * reps) * 1000);
        TLM_CUDA_CHECK_OP(op, cudaGetLastError());
        for (int i = 0; i < n; i++) {
            if (!ran[i]) continue;
            TLM_CUDA_CHECK_OP(op, cudaEventRecord(ev[2 * i], cu->stream));
            for (int r = 0; r < reps; r++)
                TLM_CUBLAS_CHECK_OP(op, cublasLtMatmul(cu->lt, p->desc, &g->alpha, g->a, p->a, g->b, p->b, &g->beta, c,
                                                       p->c, d, p->c, &cand[i].algo, cu->workspace,
                                                       cu->workspace_bytes, cu->stream));
            TLM_CUDA_CHECK_OP(op, cudaEventRecord(ev[2 * i + 1], cu->stream));
        }
        TLM_CUDA_CHECK_OP(op, cudaStreamSynchronize(cu->stream));
        int fastest = -1;
        for (int i = 0; i < n; i++) {
            if (!ran[i]) continue;
            TLM_CUDA_CHECK_OP(op, cudaEventElapsedTime(&ms[i], ev[2 * i], ev[2 * i + 1]));
            ms[i] /= reps;
            if (fastest < 0 || ms[i] < ms[fastest]) fastest = i;
        }
        for (int i = 0; i < 2 * n; i++) TLM_CUDA_CHECK_OP(op, cudaEventDestroy(ev[i]));
        best = !ran[0] || ms[fastest] < GEMM_TUNE_MARGIN * ms[0] ? fastest : 0;
    } else {
        for (int i = 0; i < n; i++)
            if (ran[i]) best = i;
    }
    if (scratch) tlm_free(be, scratch); /* stream-ordered: after the launches above */
    if (verbose && n_ran > 1) {
        int32_t splitk[2] = {0, 0};
        uint32_t scheme[2] = {0, 0}; /* cublasLtReductionScheme_t of the pick and the kept one */
        for (int j = 0; j < 2; j++) {
            const cublasLtMatmulAlgo_t *a = &cand[j ? best : 0].algo;
            cublasLtMatmulAlgoConfigGetAttribute(a, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splitk[j], sizeof splitk[j], NULL);
            cublasLtMatmulAlgoConfigGetAttribute(a, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &scheme[j], sizeof scheme[j],
                                                 NULL);
        }
        fprintf(stderr,
                "tlm: gemm tune: %s m=%d n=%d k=%d batch=%d trans %d%d types %d %d compute %d beta %s: %d of %d "
                "candidates ran; heuristic's pick %.4f ms (split-k %d, reduction %u), kept #%d %.4f ms (%.3fx; "
                "split-k %d, reduction %u)\n",
                op, k->m, k->n, k->k, k->batch, k->trans_a, k->trans_b, k->ab_type, k->cd_type, k->compute,
                k->has_beta ? "!= 0" : "0", n_ran, n, (double)ms[0], splitk[0], scheme[0], best, (double)ms[best],
                ms[0] > 0 && ms[best] > 0 ? (double)(ms[best] / ms[0]) : 1.0, splitk[1], scheme[1]);
    }
    return best;
}

static void plan_create(tlm_backend *be, const char *op, plan *p, const plan_key *k, const gemm_call *g) {
    tlm_cuda *cu = tlm_cuda_of(be);
    p->key = *k;
    const cublasOperation_t ta = k->trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t tb = k->trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    p->desc = desc_create(op, k->compute, ta, tb);
    /* stored shapes (column-major): A is (m,k), or (k,m) when transposed; B (k,n) or (n,k); C (m,n) */
    const cudaDataType_t ab = (cudaDataType_t)k->ab_type, cd = (cudaDataType_t)k->cd_type;
    p->a = make_layout(op, ab, ta == CUBLAS_OP_N ? k->m : k->k, ta == CUBLAS_OP_N ? k->k : k->m, k->lda, k->batch,
                       k->stride_a);
    p->b = make_layout(op, ab, tb == CUBLAS_OP_N ? k->k : k->n, tb == CUBLAS_OP_N ? k->n : k->k, k->ldb, k->batch,
                       k->stride_b);
    p->c = make_layout(op, cd, k->m, k->n, k->ldc, k->batch, k->stride_c); /* C and D alike */

    cublasLtMatmulPreference_t pref;
    TLM_CUBLAS_CHECK_OP(op, cublasLtMatmulPreferenceCreate(&pref));
    uint64_t ws = cu->workspace_bytes;
    TLM_CUBLAS_CHECK_OP(op, cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                                 &ws, sizeof ws));
    const cublasLtMatmulPreferenceAttributes_t align_attr[4] = {
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
    const uint32_t align_val[4] = {k->align_a, k->align_b, k->align_c, k->align_d};
    for (int i = 0; i < 4; i++)
        TLM_CUBLAS_CHECK_OP(op, cublasLtMatmulPreferenceSetAttribute(pref, align_attr[i], &align_val[i],
                                                                     sizeof align_val[i]));
    /* timing needs a mode that asks for it, and no graph capture on the stream */
    const int tune = cu->matmul_cache->tune;
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    if (tune) TLM_CUDA_CHECK_OP(op, cudaStreamIsCapturing(cu->stream, &capture));
    const int wanted = tune && capture == cudaStreamCaptureStatusNone ? GEMM_TUNE_CANDIDATES : 1;
    if (tune && (k->cd_type == CUDA_R_16BF || k->cd_type == CUDA_R_16F)) {
        /* the candidates keep fp32 accumulation to the end: no split-K whose partial sums are added in
         * the 16-bit output (reduction schemes INPLACE and OUTPUT_TYPE) */
        const uint32_t schemes = CUBLASLT_REDUCTION_SCHEME_NONE | CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
        TLM_CUBLAS_CHECK_OP(op, cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK,
                                                                     &schemes, sizeof schemes));
    }
    cublasLtMatmulHeuristicResult_t result[GEMM_TUNE_CANDIDATES];
    int returned = 0;
    cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(cu->lt, p->desc, p->a, p->b, p->c, p->c, pref, wanted, result,
                                                       &returned);
    if ((st != CUBLAS_STATUS_SUCCESS || returned == 0) && k->compute == CUBLAS_COMPUTE_32F_FAST_TF32) {
        /* no TF32 kernel for this shape or alignment: strict fp32 is a valid TF32 result */
        TLM_CUBLAS_CHECK_OP(op, cublasLtMatmulDescDestroy(p->desc));
        p->desc = desc_create(op, CUBLAS_COMPUTE_32F, ta, tb);
        returned = 0;
        st = cublasLtMatmulAlgoGetHeuristic(cu->lt, p->desc, p->a, p->b, p->c, p->c, pref, wanted, result,
                                            &returned);
    }
    TLM_CUBLAS_CHECK_OP(op, cublasLtMatmulPreferenceDestroy(pref));
    p->fallback = st != CUBLAS_STATUS_SUCCESS || returned == 0;
    if (p->fallback) {
        static bool told;
        if (!told)
            fprintf(stderr,
                    "tlm: cuda: %s: cuBLASLt has no algorithm for the GEMM m=%d n=%d k=%d batch=%d "
                    "(column-major, trans %d%d, ld %lld %lld %lld, types %d %d, beta %s, alignment %u %u %u %u): "
                    "%s; using the fallback kernel (said once)\n",
                    op, k->m, k->n, k->k, k->batch, k->trans_a, k->trans_b, (long long)k->lda, (long long)k->ldb,
                    (long long)k->ldc, k->ab_type, k->cd_type, k->has_beta ? "!= 0" : "0", k->align_a, k->align_b,
                    k->align_c, k->align_d, st != CUBLAS_STATUS_SUCCESS ? cublasLtGetStatusString(st) : "0 results");
        told = true;
        p->used = true;
        return;
    }
    int n = 0; /* the results cuBLASLt says it can run, in the heuristic's order */
    for (int i = 0; i < returned; i++)
        if (result[i].state == CUBLAS_STATUS_SUCCESS) result[n++] = result[i];
    if (n == 0) n = 1; /* none says so: the first, as before; a refusal at the call falls back */
    p->used = true;
    const int pick = n > 1 ? plan_tune(be, op, p, result, n, g, tune == 2) : 0;
    p->algo = result[pick].algo;
}

static plan *plan_get(tlm_backend *be, const char *op, const plan_key *k, const gemm_call *g) {
    tlm_cuda *cu = tlm_cuda_of(be);
    if (!cu->matmul_cache) {
        cu->matmul_cache = (struct tlm_cuda_matmul_cache *)calloc(1, sizeof *cu->matmul_cache);
        if (!cu->matmul_cache) tlm_fatal("%s: out of host memory for the GEMM plan cache", op);
        cu->matmul_cache->tune = tlm_knob_int(TLM_KNOB_GEMM_TUNE);
    }
    struct tlm_cuda_matmul_cache *mc = cu->matmul_cache;
    if (mc->plans[mc->last].used && memcmp(&mc->plans[mc->last].key, k, sizeof *k) == 0) return &mc->plans[mc->last];
    int free_slot = -1;
    for (int i = 0; i < MATMUL_CACHE_SIZE; i++) {
        if (!mc->plans[i].used) {
            if (free_slot < 0) free_slot = i;
        } else if (memcmp(&mc->plans[i].key, k, sizeof *k) == 0) {
            mc->last = i;
            return &mc->plans[i];
        }
    }
    int slot = free_slot;
    if (slot < 0) {
        slot = mc->next_evict;
        mc->next_evict = (mc->next_evict + 1) % MATMUL_CACHE_SIZE;
        plan_release(&mc->plans[slot]);
    }
    plan_create(be, op, &mc->plans[slot], k, g);
    mc->last = slot;
    return &mc->plans[slot];
}

/* The GEMM where cuBLASLt offers no algorithm (16-bit operands at 2- or 4-byte alignment, say):
 * row-major as tlm_cuda_gemm's arguments, one thread per element of D, 16x16 tiles of A and B
 * staged in shared memory, fp32 accumulation. Slow, but only odd shapes reach it. */
#define FB_TILE 16
template <typename TA, typename TC>
__global__ void gemm_fallback_kernel(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const TA *A,
                                     int64_t lda, int64_t stride_a, const TA *B, int64_t ldb, int64_t stride_b,
                                     float beta, const TC *C, TC *D, int64_t ldc, int64_t stride_c) {
    __shared__ float as[FB_TILE][FB_TILE + 1], bs[FB_TILE][FB_TILE + 1];
    const int z = blockIdx.z;
    A += z * stride_a;
    B += z * stride_b;
    D += z * stride_c;
    if (C) C += z * stride_c;
    const int i = blockIdx.y * FB_TILE + threadIdx.y, j = blockIdx.x * FB_TILE + threadIdx.x;
    float acc = 0.0f;
    for (int k0 = 0; k0 < K; k0 += FB_TILE) {
        /* as[y][x] = op(A)[block row + y, k0 + x]; bs[y][x] = op(B)[k0 + y, block col + x] */
        const int ai = blockIdx.y * FB_TILE + threadIdx.y, ak = k0 + threadIdx.x;
        as[threadIdx.y][threadIdx.x] =
            ai < M && ak < K ? tlm_f32(trans_a ? A[(int64_t)ak * lda + ai] : A[(int64_t)ai * lda + ak]) : 0.0f;
        const int bk = k0 + threadIdx.y, bj = blockIdx.x * FB_TILE + threadIdx.x;
        bs[threadIdx.y][threadIdx.x] =
            bk < K && bj < N ? tlm_f32(trans_b ? B[(int64_t)bj * ldb + bk] : B[(int64_t)bk * ldb + bj]) : 0.0f;
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < FB_TILE; kk++) acc = fmaf(as[threadIdx.y][kk], bs[kk][threadIdx.x], acc);
        __syncthreads();
    }
    if (i < M && j < N) {
        float d = alpha * acc;
        if (beta != 0.0f) d += beta * tlm_f32(C[(int64_t)i * ldc + j]);
        D[(int64_t)i * ldc + j] = tlm_round<TC>(d);
    }
}

template <typename TA, typename TC>
static void gemm_fallback_launch(tlm_backend *be, bool trans_a, bool trans_b, int M, int N, int K, float alpha,
                                 const void *A, int64_t lda, int64_t stride_a, const void *B, int64_t ldb,
                                 int64_t stride_b, float beta, const void *C, void *D, int64_t ldc, int64_t stride_c,
                                 int batch) {
    const dim3 grid((unsigned)((N + FB_TILE - 1) / FB_TILE), (unsigned)((M + FB_TILE - 1) / FB_TILE), (unsigned)batch);
    gemm_fallback_kernel<TA, TC><<<grid, dim3(FB_TILE, FB_TILE), 0, tlm_cuda_stream(be)>>>(
        trans_a, trans_b, M, N, K, alpha, (const TA *)A, lda, stride_a, (const TA *)B, ldb, stride_b, beta,
        beta != 0.0f ? (const TC *)C : NULL, (TC *)D, ldc, stride_c);
}

static void gemm_fallback(tlm_backend *be, const char *op, bool trans_a, bool trans_b, int M, int N, int K,
                          float alpha, const void *A, int64_t lda, int64_t stride_a, const void *B, int64_t ldb,
                          int64_t stride_b, tlm_dtype ab_dt, float beta, const void *C, void *D, int64_t ldc,
                          int64_t stride_c, tlm_dtype cd_dt, int batch) {
    tlm_cuda_dispatch(ab_dt, op, [&](auto tag) {
        using TA = typename decltype(tag)::type;
        if (cd_dt == TLM_DTYPE_F32)
            gemm_fallback_launch<TA, float>(be, trans_a, trans_b, M, N, K, alpha, A, lda, stride_a, B, ldb, stride_b,
                                            beta, C, D, ldc, stride_c, batch);
        else
            gemm_fallback_launch<TA, TA>(be, trans_a, trans_b, M, N, K, alpha, A, lda, stride_a, B, ldb, stride_b,
                                         beta, C, D, ldc, stride_c, batch);
    });
    TLM_CUDA_CHECK_OP(op, cudaGetLastError());
}

void tlm_cuda_gemm(tlm_backend *be, const char *op, bool trans_a, bool trans_b, int M, int N, int K, float alpha,
                   const void *A, int64_t lda, int64_t stride_a, const void *B, int64_t ldb, int64_t stride_b,
                   tlm_dtype ab_dt, float beta, const void *C, void *D, int64_t ldc, int64_t stride_c,
                   tlm_dtype cd_dt, int batch, bool tf32) {
    if (M <= 0 || N <= 0 || batch <= 0) return;
    tlm_cuda *cu = tlm_cuda_of(be);
    if (beta == 0.0f || !C) {
        beta = 0.0f;
        C = D; /* not read */
    }
    const size_t eab = tlm_dtype_size(ab_dt), ecd = tlm_dtype_size(cd_dt);
    plan_key k;
    memset(&k, 0, sizeof k); /* padding too: keys are compared with memcmp */
    /* column-major: C^T (N,M) = op(B)^T (N,K) . op(A)^T (K,M) */
    k.trans_a = trans_b;
    k.trans_b = trans_a;
    k.m = N;
    k.n = M;
    k.k = K;
    k.batch = batch;
    k.lda = ldb;
    k.stride_a = batch > 1 ? stride_b : 0;
    k.ldb = lda;
    k.stride_b = batch > 1 ? stride_a : 0;
    k.ldc = ldc;
    k.stride_c = batch > 1 ? stride_c : 0;
    k.ab_type = tlm_cuda_data_type(ab_dt, op);
    k.cd_type = tlm_cuda_data_type(cd_dt, op);
    if (cd_dt != TLM_DTYPE_F32 && cd_dt != ab_dt)
        tlm_fatal("%s: GEMM output dtype %s with %s operands", op, tlm_dtype_name(cd_dt), tlm_dtype_name(ab_dt));
    /* fp32 operands: strict fp32 or TF32 as the mode says; bf16/fp16: fp32 accumulation */
    k.compute = ab_dt == TLM_DTYPE_F32 && tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32
                                                                              : CUBLAS_COMPUTE_32F;
    k.has_beta = beta != 0.0f;
    k.align_a = alignment(B, ldb, stride_b, batch, eab);
    k.align_b = alignment(A, lda, stride_a, batch, eab);
    k.align_c = alignment(C, ldc, stride_c, batch, ecd);
    k.align_d = alignment(D, ldc, stride_c, batch, ecd);
    const gemm_call g = {B, A, C, D, alpha, beta};
    plan *p = plan_get(be, op, &k, &g);
    if (!p->fallback) {
        const cublasStatus_t st = cublasLtMatmul(cu->lt, p->desc, &alpha, B, p->a, A, p->b, &beta, C, p->c, D, p->c,
                                                 &p->algo, cu->workspace, cu->workspace_bytes, cu->stream);
        if (st != CUBLAS_STATUS_NOT_SUPPORTED) {
            TLM_CUBLAS_CHECK_OP(op, st);
            return;
        }
        p->fallback = true; /* the heuristic's choice refused to run: from now on the fallback */
    }
    gemm_fallback(be, op, trans_a, trans_b, M, N, K, alpha, A, lda, stride_a, B, ldb, stride_b, ab_dt, beta, C, D, ldc,
                  stride_c, cd_dt, batch);
}

/* residual == NULL: y (N,out) dt = x (N,in) . W^T, W (out,in);
 * else y (N,out) float32 = residual + x . W^T (beta = 1; y may be residual); dt and TF32 from p */
void tlm_cuda_matmul_forward(tlm_backend *be, void *y, const float *residual, const void *x, const void *w, int N,
                             int in, int out, tlm_precision p) {
    const tlm_dtype dt = tlm_precision_act_dtype(p);
    const bool tf32 = p == TLM_PRECISION_TF32;
    tlm_cuda_gemm(be, "matmul_forward", false, true, N, out, in, 1.0f, x, in, 0, w, in, 0, dt, residual ? 1.0f : 0.0f,
                  residual, y, out, 0, residual ? TLM_DTYPE_F32 : dt, 1, tf32);
}

void tlm_cuda_matmul_backward(tlm_backend *be, void *dx, void *dw, tlm_dtype dw_dt, const void *dy, const void *x,
                              const void *w, int N, int in, int out, tlm_precision p) {
    const tlm_dtype dt = tlm_precision_act_dtype(p);
    const bool tf32 = p == TLM_PRECISION_TF32;
    /* dx (N,in) dt = dy (N,out) . W (out,in) */
    if (dx)
        tlm_cuda_gemm(be, "matmul_backward", false, false, N, in, out, 1.0f, dy, out, 0, w, in, 0, dt, 0.0f, NULL, dx,
                      in, 0, dt, 1, tf32);
    /* dW (out,in) dw_dt = dy^T (out,N) . x (N,in): float32, or bf16 from bf16 operands (D CUDA_R_16BF,
     * fp32 accumulation rounded once as D is written; ops.def) */
    if (dw)
        tlm_cuda_gemm(be, "matmul_backward", true, false, out, in, N, 1.0f, dy, out, 0, x, in, 0, dt,
                      be->accumulate_grads ? 1.0f : 0.0f, be->accumulate_grads ? dw : NULL, dw, in, 0, dw_dt,
                      1, tf32); /* += with be->accumulate_grads (beta 1: micro-batches, backend.h) */
}
