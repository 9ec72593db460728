/* layernorm.c — LayerNorm on the CPU (Ba, Kiros & Hinton 2016, "Layer Normalization", eq. 4):
 * out = (x - mean) * rstd * w + b, rstd = 1/sqrt(var + eps), var = mean((x - mean)^2) (biased,
 * two passes, as torch.nn.LayerNorm), and its backward. Not part of the CS336 model (RMSNorm):
 * the ToyModel of `tlm precision autocast` uses it under autocast's policy for layer_norm, an
 * fp32-list op: x (and dout, dx) are of the mode's dtype, widened exactly; the statistics, out,
 * w, b, dw, db are float32. Sums over a row are accumulated in double, as rmsnorm.c. */
#include "cpu/cpu_ops.h"

#include <math.h>

/* Columns per work item of the weight and bias gradient reductions (sums over rows). */
#define LAYERNORM_COLUMN_BLOCK 64

void tlm_cpu_layernorm_forward(tlm_backend *be, float *out, float *mean, float *rstd, const void *x,
                               const float *w, const float *b, int N, int C, float eps, tlm_dtype dt) {
    /* out (N,C); mean, rstd (N); x (N,C) dt; w, b (C) */
    tlm_cpu_thread_scratch rows =
        tlm_cpu_scratch_per_thread(be, dt == TLM_DTYPE_F32 ? 0 : (size_t)C, "layernorm_forward");
#pragma omp parallel for schedule(static) if ((size_t)N * C >= TLM_CPU_GRAIN)
    for (int n = 0; n < N; n++) {
        const float *restrict xn = tlm_cpu_row_in(x, (size_t)n * C, C, dt, tlm_cpu_thread_buf(rows, 0));
        float *restrict on = out + (size_t)n * C;

        double sum = 0.0;
#pragma omp simd reduction(+ : sum)
        for (int c = 0; c < C; c++) sum += (double)xn[c];
        const double mu = sum / C;
        double sum_sq = 0.0;
#pragma omp simd reduction(+ : sum_sq)
        for (int c = 0; c < C; c++) sum_sq += ((double)xn[c] - mu) * ((double)xn[c] - mu);
        const float m = (float)mu;
        const float r = (float)(1.0 / sqrt(sum_sq / C + (double)eps));

        for (int c = 0; c < C; c++) on[c] = (xn[c] - m) * r * w[c] + b[c];
        mean[n] = m;
        rstd[n] = r;
    }
}

/* With m = mean[n], r = rstd[n], xhat = (x - m) r and g = dout w (per element of row n):
 *   dx = r (g - mean(g) - xhat mean(g xhat)),   dw = sum_n dout xhat,   db = sum_n dout. */
void tlm_cpu_layernorm_backward(tlm_backend *be, void *dx, float *dw, float *db, const void *dout,
                                const void *x, const float *w, const float *mean, const float *rstd,
                                int N, int C, tlm_dtype dt) {
    /* dx (N,C) dt =; dw, db (C) =; dout, x (N,C) dt; w (C); mean, rstd (N) */
    const size_t per_thread = dt == TLM_DTYPE_F32 ? 0 : 3 * (size_t)C;
    tlm_cpu_thread_scratch rows = tlm_cpu_scratch_per_thread(be, per_thread, "layernorm_backward");
#pragma omp parallel for schedule(static) if ((size_t)N * C >= TLM_CPU_GRAIN)
    for (int n = 0; n < N; n++) {
        const size_t at = (size_t)n * C;
        const float *restrict xn = tlm_cpu_row_in(x, at, C, dt, tlm_cpu_thread_buf(rows, 0));
        const float *restrict dn = tlm_cpu_row_in(dout, at, C, dt, tlm_cpu_thread_buf(rows, C));
        float *restrict dxn = tlm_cpu_row_out(dx, at, dt, tlm_cpu_thread_buf(rows, 2 * (size_t)C));
        const float m = mean[n], r = rstd[n];

        double sum_g = 0.0, sum_g_xhat = 0.0;
#pragma omp simd reduction(+ : sum_g, sum_g_xhat)
        for (int c = 0; c < C; c++) {
            const float g = dn[c] * w[c];
            sum_g += (double)g;
            sum_g_xhat += (double)(g * ((xn[c] - m) * r));
        }
        const float mean_g = (float)(sum_g / C), mean_g_xhat = (float)(sum_g_xhat / C);

        for (int c = 0; c < C; c++) {
            const float g = dn[c] * w[c];
            const float xhat = (xn[c] - m) * r;
            dxn[c] = r * (g - mean_g - xhat * mean_g_xhat);
        }
        tlm_cpu_row_done(dx, at, dxn, C, dt);
    }

    /* dw[c] = sum_n dout[n,c] xhat[n,c], db[c] = sum_n dout[n,c]: each work item sums whole
     * columns, in row order */
    const int nblocks = (C + LAYERNORM_COLUMN_BLOCK - 1) / LAYERNORM_COLUMN_BLOCK;
#pragma omp parallel for schedule(static) if ((size_t)N * C >= TLM_CPU_GRAIN)
    for (int blk = 0; blk < nblocks; blk++) {
        const int c0 = blk * LAYERNORM_COLUMN_BLOCK;
        const int width = C - c0 < LAYERNORM_COLUMN_BLOCK ? C - c0 : LAYERNORM_COLUMN_BLOCK;
        double acc_w[LAYERNORM_COLUMN_BLOCK] = {0}, acc_b[LAYERNORM_COLUMN_BLOCK] = {0};
        float x_block[LAYERNORM_COLUMN_BLOCK], dout_block[LAYERNORM_COLUMN_BLOCK]; /* as float32 */
        for (int n = 0; n < N; n++) {
            const size_t at = (size_t)n * C + c0;
            const float *restrict xn = tlm_cpu_row_in(x, at, width, dt, x_block);
            const float *restrict dn = tlm_cpu_row_in(dout, at, width, dt, dout_block);
            const float m = mean[n], r = rstd[n];
            for (int c = 0; c < width; c++) {
                acc_w[c] += (double)(dn[c] * ((xn[c] - m) * r));
                acc_b[c] += (double)dn[c];
            }
        }
        for (int c = 0; c < width; c++) {
            dw[c0 + c] = (float)acc_w[c];
            db[c0 + c] = (float)acc_b[c];
        }
    }
}
