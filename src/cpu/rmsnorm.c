/* rmsnorm.c — RMSNorm on the CPU (Zhang & Sennrich 2019, "Root Mean Square Layer
 * Normalization", eq. 4): out = x * rstd * w, rstd = 1/sqrt(mean(x^2) + eps), in fp32,
 * and its backward. Sums over d_model are accumulated in double. x, w, rstd, dx, dw are
 * float32; out and dout are dt (a GEMM operand and its gradient), and so is dx_lp (dx's GEMM
 * copy): out and dx_lp are computed in fp32 and rounded to dt, dout is read as fp32. */
#include "cpu/cpu_ops.h"

#include <math.h>

/* Columns per work item of the weight-gradient reduction (a sum over rows). */
#define RMSNORM_COLUMN_BLOCK 64

void tlm_cpu_rmsnorm_forward(tlm_backend *be, void *out, float *rstd, const float *x,
                             const float *w, int N, int C, float eps, tlm_dtype dt) {
    /* out (N,C) dt; rstd (N); x (N,C); w (C) */
    tlm_cpu_thread_scratch rows =
        tlm_cpu_scratch_per_thread(be, dt == TLM_DTYPE_F32 ? 0 : (size_t)C, "rmsnorm_forward");
#pragma omp parallel for schedule(static) if ((size_t)N * C >= TLM_CPU_GRAIN)
    for (int n = 0; n < N; n++) {
        const float *restrict xn = x + (size_t)n * C;
        float *restrict on = tlm_cpu_row_out(out, (size_t)n * C, dt, tlm_cpu_thread_buf(rows, 0));

        double sum_sq = 0.0;
#pragma omp simd reduction(+ : sum_sq)
        for (int c = 0; c < C; c++) sum_sq += (double)(xn[c] * xn[c]);
        float r = (float)(1.0 / sqrt(sum_sq / C + (double)eps));

        for (int c = 0; c < C; c++) on[c] = xn[c] * r * w[c];
        rstd[n] = r;
        tlm_cpu_row_done(out, (size_t)n * C, on, C, dt);
    }
}

/* With r = rstd[n], xhat = x r and g = dout w (per element of row n):
 *   dx += r (g - xhat mean(g xhat)),    dw = sum_n dout xhat,
 * and dx_lp = round(dx) to dt when given. */
void tlm_cpu_rmsnorm_backward(tlm_backend *be, float *dx, float *dw, const void *dout,
                              const float *x, const float *w, const float *rstd, int N, int C,
                              void *dx_lp, tlm_dtype dt) {
    /* dx (N,C) +=; dw (C) =; dout (N,C) dt; x (N,C); w (C); rstd (N); dx_lp (N,C) dt = or NULL */
    tlm_cpu_thread_scratch rows =
        tlm_cpu_scratch_per_thread(be, dt == TLM_DTYPE_F32 ? 0 : (size_t)C, "rmsnorm_backward");
#pragma omp parallel for schedule(static) if ((size_t)N * C >= TLM_CPU_GRAIN)
    for (int n = 0; n < N; n++) {
        const float *restrict xn = x + (size_t)n * C;
        const float *restrict dn =
            tlm_cpu_row_in(dout, (size_t)n * C, C, dt, tlm_cpu_thread_buf(rows, 0));
        float *restrict dxn = dx + (size_t)n * C;
        float r = rstd[n];

        double sum_g_xhat = 0.0;
#pragma omp simd reduction(+ : sum_g_xhat)
        for (int c = 0; c < C; c++) sum_g_xhat += (double)(dn[c] * w[c] * (xn[c] * r));
        float mean_g_xhat = (float)(sum_g_xhat / C);

        for (int c = 0; c < C; c++) {
            float g = dn[c] * w[c];
            float xhat = xn[c] * r;
            dxn[c] += r * (g - xhat * mean_g_xhat);
        }
        if (dx_lp) tlm_cpu_narrow(dx_lp, (size_t)n * C, dxn, C, dt);
    }

    /* dw[c] = sum_n dout[n,c] x[n,c] rstd[n]: each work item sums whole columns, in row order */
    int nblocks = (C + RMSNORM_COLUMN_BLOCK - 1) / RMSNORM_COLUMN_BLOCK;
    const bool accumulate = be->accumulate_grads;
#pragma omp parallel for schedule(static) if ((size_t)N * C >= TLM_CPU_GRAIN)
    for (int blk = 0; blk < nblocks; blk++) {
        int c0 = blk * RMSNORM_COLUMN_BLOCK;
        int width = C - c0 < RMSNORM_COLUMN_BLOCK ? C - c0 : RMSNORM_COLUMN_BLOCK;
        double acc[RMSNORM_COLUMN_BLOCK] = {0};
        float dout_block[RMSNORM_COLUMN_BLOCK]; /* this block of a dout row, as float32 */
        for (int n = 0; n < N; n++) {
            const float *restrict xn = x + (size_t)n * C + c0;
            const float *restrict dn =
                tlm_cpu_row_in(dout, (size_t)n * C + c0, width, dt, dout_block);
            float r = rstd[n];
            for (int c = 0; c < width; c++) acc[c] += (double)(dn[c] * (xn[c] * r));
        }
        if (accumulate) /* over micro-batches (backend.h): dw += this batch's sum */
            for (int c = 0; c < width; c++) dw[c0 + c] += (float)acc[c];
        else
            for (int c = 0; c < width; c++) dw[c0 + c] = (float)acc[c];
    }
}
