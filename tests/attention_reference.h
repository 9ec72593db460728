/* attention_reference.h — what the FlashAttention tests share (test_flash_attention_cpu.c for the
 * CPU reference, test_gpu_flash_attention.c for the CUDA kernels): the comparisons (an infinite
 * `want`, the lse of a fully masked row, must be matched exactly) and the float64 naive
 * attention they are checked against. Header-only: each test includes it once. */
#ifndef TLM_TEST_ATTENTION_REFERENCE_H
#define TLM_TEST_ATTENTION_REFERENCE_H

#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>

#include "tlm/status.h"

/* What the error measures sum over the entries where `want` is finite: (got - want)^2, want^2, got^2,
 * and how many such entries. */
typedef struct {
    double diff2, want2, got2;
    size_t finite;
} attn_error_sums;

/* The sums of got against want; false when an infinite `want` is not matched exactly or `got` is not
 * finite where `want` is (NaN): the measures then give +inf. */
static inline bool attn_sum_errors(const float *got, const double *want, size_t n, attn_error_sums *s) {
    *s = (attn_error_sums){0};
    for (size_t i = 0; i < n; i++) {
        if (isinf(want[i])) {
            if (got[i] != want[i]) return false;
            continue;
        }
        if (!isfinite(got[i])) return false;
        s->diff2 += (got[i] - want[i]) * (got[i] - want[i]);
        s->want2 += want[i] * want[i];
        s->got2 += (double)got[i] * got[i];
        s->finite++;
    }
    return true;
}

/* ||got - want|| / ||want||; NaN or a missed infinity gives +inf. A `want` that is exactly 0
 * everywhere (dQ, dK when each row sees one key) gives the RMS of got (inputs are O(1)). */
static inline double attn_norm_error(const float *got, const double *want, size_t n) {
    attn_error_sums s;
    if (!attn_sum_errors(got, want, n, &s)) return INFINITY;
    if (s.want2 == 0.0) return sqrt(s.got2 / (double)(n ? n : 1));
    return sqrt(s.diff2 / s.want2);
}

/* max |got - want|; NaN gives +inf */
static inline double attn_max_error(const float *got, const double *want, size_t n) {
    double m = 0.0;
    for (size_t i = 0; i < n; i++) {
        if (isinf(want[i]) && got[i] == want[i]) continue;
        const double e = fabs(got[i] - want[i]);
        if (!(e == e)) return INFINITY;
        if (e > m) m = e;
    }
    return m;
}

/* torch.allclose: |got - want| <= atol + rtol |want| everywhere */
static inline bool attn_allclose(const float *got, const double *want, size_t n, double rtol, double atol) {
    for (size_t i = 0; i < n; i++) {
        if (isinf(want[i]) && got[i] == want[i]) continue;
        if (!(fabs(got[i] - want[i]) <= atol + rtol * fabs(want[i]))) return false;
    }
    return true;
}

/* The float64 naive attention (Vaswani et al. 2017, eq. 1) with FlashAttention's bottom-right
 * causal mask. q, dout (B*Tq rows), k, v (B*Tk rows), head h of a row at column h*D, row stride
 * ld (>= C = H*D); out, dq (B*Tq, C), dk, dv (B*Tk, C) compact, lse (B,H,Tq), all written (=).
 * Causal: query i sees key j iff j <= i + Tk - Tq; a row that sees no key: out = dq = 0,
 * lse = -inf. Backward: dP = dO v^T, dS = P (dP - rowsum(P dP)), dq = dS k/sqrt(D),
 * dk = dS^T q/sqrt(D), dv = P^T dO (the naive formulas, not the rowsum(dO * O) of the flash
 * backward). OpenMP over (batch, head). */
static inline void attn_reference(int B, int Tq, int Tk, int H, int D, bool causal, int ld, const float *q,
                                  const float *k, const float *v, const float *dout, double *out, double *lse,
                                  double *dq, double *dk, double *dv) {
    const int C = H * D;
    const double scale = 1.0 / sqrt((double)D);
    for (size_t i = 0; i < (size_t)B * Tk * C; i++) dk[i] = dv[i] = 0.0;
#pragma omp parallel for schedule(dynamic)
    for (int bh = 0; bh < B * H; bh++) {
        const int b = bh / H, h = bh % H;
        double *p = calloc((size_t)Tk + 1, sizeof(double)), *dp = calloc((size_t)Tk + 1, sizeof(double));
        TLM_ASSERT(p && dp);
        for (int i = 0; i < Tq; i++) {
            const size_t qi = (size_t)b * Tq + i;
            const float *qrow = q + qi * ld + h * D, *dorow = dout + qi * ld + h * D;
            double *orow = out + qi * C + h * D, *dqrow = dq + qi * C + h * D;
            int seen = causal ? i + (Tk - Tq) + 1 : Tk;
            seen = seen < 0 ? 0 : seen > Tk ? Tk : seen;
            for (int d = 0; d < D; d++) orow[d] = dqrow[d] = 0.0;
            if (seen == 0) {
                lse[(size_t)bh * Tq + i] = -INFINITY;
                continue;
            }
            double max = -INFINITY, sum = 0.0;
            for (int j = 0; j < seen; j++) {
                const float *krow = k + ((size_t)b * Tk + j) * ld + h * D;
                double s = 0.0;
                for (int d = 0; d < D; d++) s += (double)qrow[d] * krow[d];
                p[j] = s * scale;
                max = fmax(max, p[j]);
            }
            for (int j = 0; j < seen; j++) sum += exp(p[j] - max);
            const double L = max + log(sum);
            lse[(size_t)bh * Tq + i] = L;
            double rowsum = 0.0; /* rowsum(P * dP) */
            for (int j = 0; j < seen; j++) {
                const float *vrow = v + ((size_t)b * Tk + j) * ld + h * D;
                p[j] = exp(p[j] - L);
                dp[j] = 0.0;
                for (int d = 0; d < D; d++) {
                    orow[d] += p[j] * vrow[d];
                    dp[j] += (double)dorow[d] * vrow[d];
                }
                rowsum += p[j] * dp[j];
            }
            for (int j = 0; j < seen; j++) {
                const size_t kj = (size_t)b * Tk + j;
                const float *krow = k + kj * ld + h * D;
                const double ds = p[j] * (dp[j] - rowsum) * scale;
                double *dkrow = dk + kj * C + h * D, *dvrow = dv + kj * C + h * D;
                for (int d = 0; d < D; d++) {
                    dqrow[d] += ds * krow[d];
                    dkrow[d] += ds * qrow[d];
                    dvrow[d] += p[j] * dorow[d];
                }
            }
        }
        free(p);
        free(dp);
    }
}

#endif
