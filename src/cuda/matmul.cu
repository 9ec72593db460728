/* matmul.cu — GEMMs through cuBLASLt: the linear layer without bias, y = x W^T with W (out,in)
 * as nn.Linear stores it, its backward dx = dy W, dW = dy^T x, and the strided-batched row-major
 * GEMM helper that attention.cu uses too. fp32 (be->precision FP32: CUBLAS_COMPUTE_32F, strict
 * IEEE, no TF32) or TF32 tensor cores with fp32 accumulation (CUBLAS_COMPUTE_32F_FAST_TF32).
 *
 * Row-major to cuBLAS's column-major: a row-major (r,c) matrix with row stride ld is, read
 * column-major, its transpose (c,r) with leading dimension ld. So C = op(A) op(B) (row-major)
 * is C^T = op(B)^T op(A)^T (column-major): cuBLAS is called with the operands swapped, m = N,
 * n = M, and each operand's own transpose flag.
 *
 * Each distinct GEMM (shape, strides, compute type, pointer alignment) gets a cached plan: its
 * matmul descriptor, three layouts and the algorithm cuBLASLt's heuristic picked, so repeated
 * calls skip descriptor creation and the heuristic query. */
#include <string.h>

#include "cuda/cuda_common.cuh"

#define MATMUL_CACHE_SIZE 128

typedef struct {
    int32_t trans_a, trans_b;   /* column-major operation flags */
    int32_t m, n, k, batch;
    int64_t lda, ldb, ldc, stride_a, stride_b, stride_c;
    int32_t compute;            /* cublasComputeType_t */
    uint32_t align_a, align_b, align_c; /* bytes, power of two <= 256 */
} plan_key;

typedef struct {
    plan_key key;
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t a, b, c;
    cublasLtMatmulAlgo_t algo;
    bool used;
} plan;

struct tlm_cuda_matmul_cache {
    plan plans[MATMUL_CACHE_SIZE];
    int last;       /* index of the last plan used: repeated calls hit it first */
    int next_evict; /* round robin once the table is full */
};

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
static uint32_t alignment(const void *p, int64_t ld, int64_t stride, int batch) {
    uint64_t bits = (uint64_t)(uintptr_t)p | (uint64_t)ld * sizeof(float) | 256u;
    if (batch > 1) bits |= (uint64_t)stride * sizeof(float);
    return (uint32_t)(bits & (~bits + 1)); /* lowest set bit */
}

static cublasLtMatrixLayout_t make_layout(const char *op, int rows, int cols, int64_t ld, int batch,
                                          int64_t stride) {
    cublasLtMatrixLayout_t l;
    TLM_CUBLAS_CHECK_OP(op, cublasLtMatrixLayoutCreate(&l, CUDA_R_32F, (uint64_t)rows, (uint64_t)cols, ld));
    if (batch > 1) {
        int32_t count = batch;
        TLM_CUBLAS_CHECK_OP(op, cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count,
                                                                 sizeof count));
        TLM_CUBLAS_CHECK_OP(op, cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                                                 &stride, sizeof stride));
    }
    return l;
}

static void plan_create(tlm_cuda *cu, const char *op, plan *p, const plan_key *k) {
    p->key = *k;
    const cublasOperation_t ta = k->trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t tb = k->trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    TLM_CUBLAS_CHECK_OP(op, cublasLtMatmulDescCreate(&p->desc, (cublasComputeType_t)k->compute, CUDA_R_32F));
    TLM_CUBLAS_CHECK_OP(op, cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    TLM_CUBLAS_CHECK_OP(op, cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    /* stored shapes (column-major): A is (m,k), or (k,m) when transposed; B (k,n) or (n,k); C (m,n) */
    p->a = make_layout(op, ta == CUBLAS_OP_N ? k->m : k->k, ta == CUBLAS_OP_N ? k->k : k->m, k->lda, k->batch,
                       k->stride_a);
    p->b = make_layout(op, tb == CUBLAS_OP_N ? k->k : k->n, tb == CUBLAS_OP_N ? k->n : k->k, k->ldb, k->batch,
                       k->stride_b);
    p->c = make_layout(op, k->m, k->n, k->ldc, k->batch, k->stride_c);

    cublasLtMatmulPreference_t pref;
    TLM_CUBLAS_CHECK_OP(op, cublasLtMatmulPreferenceCreate(&pref));
    uint64_t ws = cu->workspace_bytes;
    TLM_CUBLAS_CHECK_OP(op, cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                                 &ws, sizeof ws));
    const cublasLtMatmulPreferenceAttributes_t align_attr[4] = {
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
    const uint32_t align_val[4] = {k->align_a, k->align_b, k->align_c, k->align_c};
    for (int i = 0; i < 4; i++)
        TLM_CUBLAS_CHECK_OP(op, cublasLtMatmulPreferenceSetAttribute(pref, align_attr[i], &align_val[i],
                                                                     sizeof align_val[i]));
    cublasLtMatmulHeuristicResult_t result;
    int returned = 0;
    cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(cu->lt, p->desc, p->a, p->b, p->c, p->c, pref, 1, &result,
                                                       &returned);
    if ((st != CUBLAS_STATUS_SUCCESS || returned == 0) && k->compute == CUBLAS_COMPUTE_32F_FAST_TF32) {
        /* no TF32 kernel for this shape or alignment: strict fp32 is a valid TF32 result */
        TLM_CUBLAS_CHECK_OP(op, cublasLtMatmulDescDestroy(p->desc));
        TLM_CUBLAS_CHECK_OP(op, cublasLtMatmulDescCreate(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
        TLM_CUBLAS_CHECK_OP(op, cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
        TLM_CUBLAS_CHECK_OP(op, cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
        returned = 0;
        st = cublasLtMatmulAlgoGetHeuristic(cu->lt, p->desc, p->a, p->b, p->c, p->c, pref, 1, &result, &returned);
    }
    TLM_CUBLAS_CHECK_OP(op, cublasLtMatmulPreferenceDestroy(pref));
    if (st != CUBLAS_STATUS_SUCCESS || returned == 0)
        tlm_fatal("cuBLASLt error in %s at %s:%d: no algorithm for the GEMM m=%d n=%d k=%d batch=%d "
                  "(column-major, trans %d%d, ld %lld %lld %lld, alignment %u %u %u): %s",
                  op, __FILE__, __LINE__, k->m, k->n, k->k, k->batch, k->trans_a, k->trans_b, (long long)k->lda,
                  (long long)k->ldb, (long long)k->ldc, k->align_a, k->align_b, k->align_c,
                  st != CUBLAS_STATUS_SUCCESS ? cublasLtGetStatusString(st) : "0 results");
    p->algo = result.algo;
    p->used = true;
}

static const plan *plan_get(tlm_cuda *cu, const char *op, const plan_key *k) {
    if (!cu->matmul_cache) {
        cu->matmul_cache = (struct tlm_cuda_matmul_cache *)calloc(1, sizeof *cu->matmul_cache);
        if (!cu->matmul_cache) tlm_fatal("%s: out of host memory for the GEMM plan cache", op);
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
    plan_create(cu, op, &mc->plans[slot], k);
    mc->last = slot;
    return &mc->plans[slot];
}

void tlm_cuda_gemm(tlm_backend *be, const char *op, bool trans_a, bool trans_b, int M, int N, int K, float alpha,
                   const float *A, int64_t lda, int64_t stride_a, const float *B, int64_t ldb, int64_t stride_b,
                   float beta, float *C, int64_t ldc, int64_t stride_c, int batch) {
    if (M <= 0 || N <= 0 || batch <= 0) return;
    tlm_cuda *cu = tlm_cuda_of(be);
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
    k.compute = be->precision == TLM_PRECISION_TF32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    k.align_a = alignment(B, ldb, stride_b, batch);
    k.align_b = alignment(A, lda, stride_a, batch);
    k.align_c = alignment(C, ldc, stride_c, batch);
    const plan *p = plan_get(cu, op, &k);
    TLM_CUBLAS_CHECK_OP(op, cublasLtMatmul(cu->lt, p->desc, &alpha, B, p->a, A, p->b, &beta, C, p->c, C, p->c,
                                           &p->algo, cu->workspace, cu->workspace_bytes, cu->stream));
}

/* y (N,out) = x (N,in) . W^T, W (out,in) */
void tlm_cuda_matmul_forward(tlm_backend *be, float *y, const float *x, const float *w, int N, int in, int out) {
    tlm_cuda_gemm(be, "matmul_forward", false, true, N, out, in, 1.0f, x, in, 0, w, in, 0, 0.0f, y, out, 0, 1);
}

void tlm_cuda_matmul_backward(tlm_backend *be, float *dx, float *dw, const float *dy, const float *x,
                              const float *w, int N, int in, int out) {
    /* dx (N,in) = dy (N,out) . W (out,in) */
    if (dx) tlm_cuda_gemm(be, "matmul_backward", false, false, N, in, out, 1.0f, dy, out, 0, w, in, 0, 0.0f, dx, in,
                          0, 1);
    /* dW (out,in) = dy^T (out,N) . x (N,in) */
    tlm_cuda_gemm(be, "matmul_backward", true, false, out, in, N, 1.0f, dy, out, 0, x, in, 0, 0.0f, dw, in, 0, 1);
}
