/* embedding.c — token embedding on the CPU: a row lookup, out[n,:] = wte[tokens[n],:], and its
 * backward, a scatter-add of the output gradient into the rows of the looked-up tokens. */
#include "cpu/cpu_ops.h"

#include <string.h>

/* Columns per work item of the backward's scatter-add: each thread owns whole column blocks of
 * every vocabulary row, so rows repeated in `tokens` never race and the sum order is fixed. */
#define EMBEDDING_COLUMN_BLOCK 64

void tlm_cpu_embedding_forward(tlm_backend *be, float *out, const int32_t *tokens,
                               const float *wte, int N, int C) {
    /* out (N,C); tokens (N); wte (V,C) */
#pragma omp parallel for schedule(static) if ((size_t)N * C >= TLM_CPU_GRAIN)
    for (int n = 0; n < N; n++)
        memcpy(out + (size_t)n * C, wte + (size_t)tokens[n] * C, (size_t)C * sizeof(float));
}

void tlm_cpu_embedding_backward(tlm_backend *be, float *dwte, const float *dout,
                                const int32_t *tokens, int N, int V, int C) {
    /* dwte (V,C) = 0, unless accumulating over micro-batches (backend.h) */
    if (!be->accumulate_grads) {
#pragma omp parallel for schedule(static) if ((size_t)V * C >= TLM_CPU_GRAIN)
        for (int v = 0; v < V; v++) memset(dwte + (size_t)v * C, 0, (size_t)C * sizeof(float));
    }

    /* dwte[tokens[n],:] += dout[n,:], n in order, one column block per work item */
    int nblocks = (C + EMBEDDING_COLUMN_BLOCK - 1) / EMBEDDING_COLUMN_BLOCK;
#pragma omp parallel for schedule(static) if ((size_t)N * C >= TLM_CPU_GRAIN)
    for (int blk = 0; blk < nblocks; blk++) {
        int c0 = blk * EMBEDDING_COLUMN_BLOCK;
        int c1 = c0 + EMBEDDING_COLUMN_BLOCK < C ? c0 + EMBEDDING_COLUMN_BLOCK : C;
        for (int n = 0; n < N; n++) {
            float *restrict dst = dwte + (size_t)tokens[n] * C;  /* (C) */
            const float *restrict src = dout + (size_t)n * C;    /* (C) */
            for (int c = c0; c < c1; c++) dst[c] += src[c];
        }
    }
}
