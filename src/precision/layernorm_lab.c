/* layernorm_lab.c — docs/experiments.md: what goes wrong computing LayerNorm in fp16 or bf16, and what
 * fp32 statistics leave. Over input magnitudes x row widths, each scheme of precision_lab.h
 * computes mean, variance and the normalized row with every operation rounded to its dtypes
 * (lowp.h: exact software rounding), against float64 two-pass LayerNorm of the same inputs; then
 * the findings are read off the grid. CPU only: it is arithmetic on a few hundred thousand
 * numbers. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "precision/lowp.h"
#include "tlm/precision_lab.h"
#include "tlm/rng.h"

static const tlm_ln_scheme_info schemes[TLM_LN_NUM_SCHEMES] = {
    [TLM_LN_FP32] = {"fp32", TLM_DTYPE_F32, TLM_DTYPE_F32, TLM_DTYPE_F32},
    [TLM_LN_FP16] = {"fp16", TLM_DTYPE_F16, TLM_DTYPE_F16, TLM_DTYPE_F16},
    [TLM_LN_FP16_F32_STATS] = {"fp16 + fp32 stats", TLM_DTYPE_F16, TLM_DTYPE_F32, TLM_DTYPE_F16},
    [TLM_LN_BF16] = {"bf16", TLM_DTYPE_BF16, TLM_DTYPE_BF16, TLM_DTYPE_BF16},
    [TLM_LN_BF16_F32_STATS] = {"bf16 + fp32 stats", TLM_DTYPE_BF16, TLM_DTYPE_F32, TLM_DTYPE_BF16},
};

static const double magnitudes[TLM_LN_LAB_MAGNITUDES] = {1.0, 10.0, 100.0, 1000.0, 10000.0};
static const int widths[TLM_LN_LAB_WIDTHS] = {10, 100, 1000, 10240};

const tlm_ln_scheme_info *tlm_ln_scheme_get(tlm_ln_scheme s) {
    TLM_ASSERT(s >= 0 && s < TLM_LN_NUM_SCHEMES);
    return &schemes[s];
}

tlm_ln_lab_config tlm_ln_lab_defaults(void) {
    tlm_ln_lab_config c = {.rows = 8, .seed = 0, .pairwise = false};
    return c;
}

/* sum of t[0..n) in dt: left to right, or as a balanced tree (each add rounded to dt) */
static float sum_dt(const float *t, int n, tlm_dtype dt, bool pairwise) {
    if (!pairwise) {
        float s = 0.0f;
        for (int i = 0; i < n; i++) s = tlm_lowp_add(s, t[i], dt);
        return s;
    }
    if (n == 0) return 0.0f;
    if (n == 1) return t[0];
    return tlm_lowp_add(sum_dt(t, n / 2, dt, true), sum_dt(t + n / 2, n - n / 2, dt, true), dt);
}

tlm_ln_row_stats tlm_ln_lab_row(tlm_ln_scheme s, const float *x, float *y, float *work, int C, bool pairwise) {
    const tlm_ln_scheme_info *sc = tlm_ln_scheme_get(s);
    const tlm_dtype S = sc->stats, E = sc->elementwise;
    tlm_ln_row_stats r;
    const float width = tlm_lowp_round((float)C, S);
    TLM_ASSERT(width == (float)C); /* C is a value of the stats dtype */
    r.sum = sum_dt(x, C, S, pairwise);
    r.mean = tlm_lowp_div(r.sum, width, S);
    for (int c = 0; c < C; c++) {
        const float d = tlm_lowp_sub(x[c], r.mean, S);
        work[c] = tlm_lowp_mul(d, d, S);
    }
    r.sumsq = sum_dt(work, C, S, pairwise);
    r.var = tlm_lowp_div(r.sumsq, width, S);
    r.rstd = tlm_lowp_div(1.0f, tlm_lowp_sqrt(tlm_lowp_add(r.var, TLM_LN_LAB_EPS, S), S), S);
    for (int c = 0; c < C; c++) y[c] = tlm_lowp_mul(tlm_lowp_sub(x[c], r.mean, E), r.rstd, E);
    return r;
}

tlm_status tlm_ln_lab_run(const tlm_ln_lab_config *cfg, tlm_ln_lab *out) {
    if (cfg->rows < 1)
        return tlm_fail(TLM_ERR_INVALID_ARGUMENT, "layernorm lab: rows must be at least 1 (got %d)", cfg->rows);
    memset(out, 0, sizeof *out);
    out->cfg = *cfg;
    memcpy(out->magnitude, magnitudes, sizeof magnitudes);
    memcpy(out->width, widths, sizeof widths);
    const int Cmax = widths[TLM_LN_LAB_WIDTHS - 1];
    float *z = malloc((size_t)Cmax * sizeof(float)), *x = malloc((size_t)Cmax * sizeof(float));
    float *y = malloc((size_t)Cmax * sizeof(float)), *work = malloc((size_t)Cmax * sizeof(float));
    double *y64 = malloc((size_t)Cmax * sizeof(double));
    if (!z || !x || !y || !work || !y64) {
        free(z), free(x), free(y), free(work), free(y64);
        return tlm_fail(TLM_ERR_OUT_OF_MEMORY, "layernorm lab: out of host memory");
    }
    double num[TLM_LN_NUM_SCHEMES][TLM_LN_LAB_WIDTHS][TLM_LN_LAB_MAGNITUDES] = {{{0}}};
    double den[TLM_LN_NUM_SCHEMES][TLM_LN_LAB_WIDTHS][TLM_LN_LAB_MAGNITUDES] = {{{0}}};

    for (int wi = 0; wi < TLM_LN_LAB_WIDTHS; wi++) {
        const int C = widths[wi];
        for (int row = 0; row < cfg->rows; row++) {
            uint64_t rng = tlm_rng_stream(cfg->seed, (uint64_t)wi * 1000003u + (uint64_t)row);
            for (int c = 0; c < C; c++) z[c] = (float)tlm_rng_normal(&rng);
            for (int mi = 0; mi < TLM_LN_LAB_MAGNITUDES; mi++)
                for (int s = 0; s < TLM_LN_NUM_SCHEMES; s++) {
                    const tlm_ln_scheme_info *sc = &schemes[s];
                    tlm_ln_lab_cell *cell = &out->cell[s][wi][mi];
                    for (int c = 0; c < C; c++) {
                        x[c] = tlm_lowp_round((float)(magnitudes[mi] * (1.0 + z[c])), sc->input);
                        cell->input_overflow += !isfinite(x[c]);
                    }
                    /* the reference: float64 two-pass LayerNorm of the same inputs */
                    double sum64 = 0.0, sq64 = 0.0;
                    for (int c = 0; c < C; c++) sum64 += x[c];
                    const double mean64 = sum64 / C;
                    for (int c = 0; c < C; c++) sq64 += (x[c] - mean64) * (x[c] - mean64);
                    const double var64 = sq64 / C, rstd64 = 1.0 / sqrt(var64 + (double)TLM_LN_LAB_EPS);
                    for (int c = 0; c < C; c++) y64[c] = (x[c] - mean64) * rstd64;

                    const tlm_ln_row_stats r = tlm_ln_lab_row((tlm_ln_scheme)s, x, y, work, C, cfg->pairwise);
                    const bool sum_inf = !isfinite(r.sum), sumsq_inf = !isfinite(r.sumsq);
                    cell->sum_overflow |= sum_inf;
                    cell->sumsq_overflow |= sumsq_inf && !sum_inf;
                    cell->max_sum = fmax(cell->max_sum, isnan(r.sum) ? INFINITY : fabs(r.sum));
                    cell->max_sumsq = fmax(cell->max_sumsq, isnan(r.sumsq) ? INFINITY : r.sumsq);
                    const double mean_err = fabs(r.mean - mean64) / sqrt(var64);
                    const double var_err = fabs(r.var - var64) / var64;
                    cell->mean_err = fmax(cell->mean_err, isnan(mean_err) ? INFINITY : mean_err);
                    cell->var_err = fmax(cell->var_err, isnan(var_err) ? INFINITY : var_err);
                    for (int c = 0; c < C; c++) {
                        if (!isfinite(y[c])) cell->out_nonfinite++;
                        num[s][wi][mi] += (y[c] - y64[c]) * (y[c] - y64[c]);
                        den[s][wi][mi] += y64[c] * y64[c];
                    }
                }
        }
    }
    for (int s = 0; s < TLM_LN_NUM_SCHEMES; s++)
        for (int wi = 0; wi < TLM_LN_LAB_WIDTHS; wi++)
            for (int mi = 0; mi < TLM_LN_LAB_MAGNITUDES; mi++) {
                tlm_ln_lab_cell *cell = &out->cell[s][wi][mi];
                cell->out_err = cell->out_nonfinite ? NAN : sqrt(num[s][wi][mi] / den[s][wi][mi]);
            }
    free(z), free(x), free(y), free(work), free(y64);
    return TLM_OK;
}

/* ---- findings --------------------------------------------------------------------------- */

/* "1e2" for the grid's magnitudes */
static void magnitude_text(double m, char *buf, size_t n) { snprintf(buf, n, "1e%d", (int)lround(log10(m))); }

/* the largest of a metric over a scheme's cells, optionally one width only (wi < 0: all) */
static double worst(const tlm_ln_lab *lab, tlm_ln_scheme s, int wi, int metric) {
    double w = 0.0;
    for (int i = 0; i < TLM_LN_LAB_WIDTHS; i++) {
        if (wi >= 0 && i != wi) continue;
        for (int mi = 0; mi < TLM_LN_LAB_MAGNITUDES; mi++) {
            const tlm_ln_lab_cell *c = &lab->cell[s][i][mi];
            const double v = metric == 0 ? c->out_err : metric == 1 ? c->mean_err : c->var_err;
            w = isnan(v) || v > w ? (isnan(v) ? INFINITY : v) : w;
        }
    }
    return w;
}

static bool any_overflow(const tlm_ln_lab *lab, tlm_ln_scheme s) {
    for (int wi = 0; wi < TLM_LN_LAB_WIDTHS; wi++)
        for (int mi = 0; mi < TLM_LN_LAB_MAGNITUDES; mi++) {
            const tlm_ln_lab_cell *c = &lab->cell[s][wi][mi];
            if (c->sum_overflow || c->sumsq_overflow || c->out_nonfinite) return true;
        }
    return false;
}

/* "from M = 1e2 at width 10, 1e1 at width 10240" (the first magnitude where `which` overflowed,
 * per width; "never" when it did not) */
static void first_overflow(const tlm_ln_lab *lab, tlm_ln_scheme s, bool sumsq, char *buf, size_t n) {
    size_t at = 0;
    buf[0] = '\0';
    for (int wi = 0; wi < TLM_LN_LAB_WIDTHS; wi++)
        for (int mi = 0; mi < TLM_LN_LAB_MAGNITUDES; mi++) {
            const tlm_ln_lab_cell *c = &lab->cell[s][wi][mi];
            if (sumsq ? c->sumsq_overflow : c->sum_overflow) {
                char m[16];
                magnitude_text(lab->magnitude[mi], m, sizeof m);
                at += (size_t)snprintf(buf + at, at < n ? n - at : 0, "%sM >= %s at width %d", at ? ", " : "", m,
                                       lab->width[wi]);
                break;
            }
        }
    if (at == 0) snprintf(buf, n, "never");
}

int tlm_ln_lab_findings(const tlm_ln_lab *lab, char (*lines)[TLM_LN_LAB_LINE], int max_lines) {
    int k = 0;
    const int last = TLM_LN_LAB_WIDTHS - 1;
    const double half16 = tlm_lowp_spacing(1.0f, TLM_DTYPE_F16) / 2;
    const double halfb16 = tlm_lowp_spacing(1.0f, TLM_DTYPE_BF16) / 2;
    char sums[128], squares[128];
    if (k < max_lines) {
        first_overflow(lab, TLM_LN_FP16, false, sums, sizeof sums);
        first_overflow(lab, TLM_LN_FP16, true, squares, sizeof squares);
        /* the worst fp16 cell that did not overflow: what 11 significant bits alone cost */
        double w = -1.0;
        int ww = 0, wm = 0;
        for (int wi = 0; wi < TLM_LN_LAB_WIDTHS; wi++)
            for (int mi = 0; mi < TLM_LN_LAB_MAGNITUDES; mi++) {
                const tlm_ln_lab_cell *c = &lab->cell[TLM_LN_FP16][wi][mi];
                if (!c->sum_overflow && !c->sumsq_overflow && !c->out_nonfinite && c->out_err > w)
                    w = c->out_err, ww = wi, wm = mi;
            }
        char m[16];
        magnitude_text(lab->magnitude[wm], m, sizeof m);
        snprintf(lines[k++], TLM_LN_LAB_LINE,
                 "fp16: the reductions pass fp16's largest value %.0f and overflow to inf: sum(x) %s; "
                 "sum((x - mean)^2) %s; the output is then NaN (inf mean) or 0 (inf variance). Where nothing "
                 "overflows, the worst fp16 output error is %.2g (M = %s, width %d).",
                 tlm_lowp_max(TLM_DTYPE_F16), sums, squares, w, m, lab->width[ww]);
    }
    if (k < max_lines) {
        const double f16 = worst(lab, TLM_LN_FP16_F32_STATS, -1, 0), b16 = worst(lab, TLM_LN_BF16_F32_STATS, -1, 0);
        const bool overflow = any_overflow(lab, TLM_LN_FP16_F32_STATS) || any_overflow(lab, TLM_LN_BF16_F32_STATS);
        const bool small = f16 < 4 * half16 && b16 < 4 * halfb16;
        snprintf(lines[k++], TLM_LN_LAB_LINE,
                 "With fp32 statistics (mean and variance in fp32, only x - mean and the scaling rounded to "
                 "the format) %s, and the worst output error over the grid is %.2g in fp16 (%.2g of fp16's "
                 "half-spacing near 1, %.3g) and %.2g in bf16 (%.2g of %.3g): %s.",
                 overflow ? "some cell still overflows (see the grids)" : "nothing overflows", f16, f16 / half16,
                 half16, b16, b16 / halfb16, halfb16,
                 small ? "a rounding or two of the output, so the sensitive parts are the two reductions, not the "
                         "elementwise ones"
                       : "more than a rounding or two of the output, so the elementwise part matters too");
    }
    if (k < max_lines) {
        const double bv = worst(lab, TLM_LN_BF16, last, 2), bm = worst(lab, TLM_LN_BF16, last, 1);
        const double bo = worst(lab, TLM_LN_BF16, last, 0), so = worst(lab, TLM_LN_BF16_F32_STATS, last, 0);
        const double bo0 = worst(lab, TLM_LN_BF16, 0, 0), so0 = worst(lab, TLM_LN_BF16_F32_STATS, 0, 0);
        const bool overflow = any_overflow(lab, TLM_LN_BF16);
        const char *order = lab->cfg.pairwise ? "pairwise sums" : "sums left to right";
        char verdict[200];
        if (bo > 4 * so)
            snprintf(verdict, sizeof verdict, "So, with %s, bf16 removes the overflow, not the need for fp32 "
                     "statistics%s.", order,
                     lab->cfg.pairwise ? "" : " (a tree-shaped sum loses less: --sum pairwise)");
        else
            snprintf(verdict, sizeof verdict, "With %s, bf16 statistics cost a factor of %.2g over fp32 "
                     "statistics at width %d.", order, bo / so, lab->width[last]);
        snprintf(lines[k++], TLM_LN_LAB_LINE,
                 "bf16 %s (its largest value is %.3g), but it has 8 significant bits: at width %d the bf16 mean "
                 "is off by up to %.2g standard deviations and the variance by %.2g (relative), the output by "
                 "%.2g against %.2g with fp32 statistics (width %d: %.2g against %.2g). %s",
                 overflow ? "overflows somewhere (see the grids)" : "never overflows", tlm_lowp_max(TLM_DTYPE_BF16),
                 lab->width[last], bm, bv, bo, so, lab->width[0], bo0, so0, verdict);
    }
    return k;
}

size_t tlm_ln_lab_inputs_overflowed(const tlm_ln_lab *lab) {
    size_t bad = 0;
    for (int s = 0; s < TLM_LN_NUM_SCHEMES; s++)
        for (int wi = 0; wi < TLM_LN_LAB_WIDTHS; wi++)
            for (int mi = 0; mi < TLM_LN_LAB_MAGNITUDES; mi++) bad += lab->cell[s][wi][mi].input_overflow;
    return bad;
}
