/* test_precision_lab.c — the mixed-precision experiments of `tlm precision` (precision_lab.h,
 * toymodel.h) on the CPU backend, against references computed here, independently of tlm's
 * conversions (core/convert.h) and of float32 hardware arithmetic:
 *
 * - round_fmt: round to nearest even of a double to a binary format given by its significant bits
 *   p and exponent range (fp32 24, fp16 11, bf16 8), by scaling to the spacing and nearbyint.
 *   A reference operation is the double operation, then round_fmt. That is the correctly rounded
 *   result: the double op is exact for the sums and products used where noted, and otherwise
 *   correctly rounded to 53 bits, and rounding twice to nearest is innocuous when 53 >= 2p + 2
 *   (Figueroa 1995; p <= 24 here).
 * - accumulate: each way's 1001 partial sums equal the reference trajectory bit for bit; the four
 *   sums of docs/experiments.md print as 10.0001, 9.9531, 10.0021, 10.0021 to 4 decimals; the software
 *   fp16/bf16 arithmetic of src/precision/lowp.h equals the reference on random operands
 *   (subnormals, wide exponent gaps: where one float32 rounding is not exact); the analysis and
 *   the exact decimals agree with what this file computes.
 * - autocast: the ToyModel's tensors have autocast's dtypes (parameters fp32, fc1 output fp16,
 *   LayerNorm output fp32, logits fp16, loss fp32, gradients fp32; bf16 likewise), and the
 *   buffers hold values of those dtypes (fc1's output is the fp16 rounding of x W^T); the fp32
 *   gradients match central finite differences of the loss, and the fp16/bf16 ones the fp32 ones.
 * - layernorm: every scheme's row (tlm_ln_lab_row) equals a reference LayerNorm that rounds at the
 *   same points, bit for bit; the grid's overflow and error pattern; the findings.
 * Prints one line per check and "N passed, M failed"; exits 1 on any failure. */
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "precision/lowp.h"
#include "tlm/util.h"
#include "tlm/backend.h"
#include "tlm/precision_lab.h"
#include "tlm/rng.h"
#include "tlm/toymodel.h"
#include "test_check.h"

static tlm_backend *be;
static uint64_t rng = 0x1AB5;

/* ---- the reference rounding ---------------------------------------------------------------- */

typedef struct {
    const char *name;
    int p;          /* significant bits, the leading one included */
    int emin, emax; /* exponents of the smallest and largest normal binades */
} format;

static const format FP32 = {"fp32", 24, -126, 127}, FP16 = {"fp16", 11, -14, 15}, BF16 = {"bf16", 8, -126, 127};

static double fmt_max(format f) { return ldexp(2.0 - ldexp(1.0, 1 - f.p), f.emax); }

/* v rounded to nearest even in f: v / spacing is exact (a power of two), nearbyint rounds it to
 * the nearest integer, ties to even (the default rounding mode); past the largest value: inf */
static double round_fmt(double v, format f) {
    if (v == 0.0 || !isfinite(v)) return v;
    int e;
    frexp(fabs(v), &e);                         /* |v| in [2^(e-1), 2^e) */
    const int lead = e - 1 < f.emin ? f.emin : e - 1; /* below the normal range: subnormal spacing */
    const double spacing = ldexp(1.0, lead - (f.p - 1));
    const double r = nearbyint(v / spacing) * spacing;
    return fabs(r) > fmt_max(f) ? copysign(INFINITY, v) : r;
}

static format fmt_of(tlm_dtype dt) { return dt == TLM_DTYPE_F16 ? FP16 : dt == TLM_DTYPE_BF16 ? BF16 : FP32; }

/* ---- the rounding itself against the format definitions --------------------------------------- */

static void test_round_fmt(void) {
    /* a few values whose rounding the formats' definitions fix */
    bool ok = round_fmt(65519.0, FP16) == fmt_max(FP16) && isinf(round_fmt(65520.0, FP16)) &&
              round_fmt(1.0 + ldexp(1.0, -11), FP16) == 1.0 &&                         /* tie to even */
              round_fmt(1.0 + 3 * ldexp(1.0, -11), FP16) == 1.0 + ldexp(1.0, -9) &&     /* tie up to even */
              round_fmt(ldexp(1.0, -25), FP16) == 0.0 && round_fmt(ldexp(1.5, -25), FP16) == ldexp(1.0, -24) &&
              round_fmt(1.0 + ldexp(1.0, -8), BF16) == 1.0 && round_fmt(1.0 / 3.0, FP32) == (double)(1.0f / 3.0f);
    check(ok, "reference rounding: fp16 max %.0f (65519 -> max, 65520 -> inf), ties to even, subnormals, bf16, fp32",
          fmt_max(FP16));
    /* and tlm's conversions agree with it on every fp16 and bf16 value's neighbourhood */
    long wrong = 0;
    for (uint32_t h = 0; h < 0x7c00; h++) {
        const double v = tlm_f16_to_f32((uint16_t)h), next = tlm_f16_to_f32((uint16_t)(h + 1));
        const double mid = (v + next) / 2; /* a tie: to the even one */
        wrong += round_fmt(v, FP16) != v || tlm_lowp_round((float)mid, TLM_DTYPE_F16) != round_fmt(mid, FP16);
    }
    check(wrong == 0, "tlm_lowp_round(fp16) = the reference on every finite fp16 value and every tie above it "
          "(%ld differ)", wrong);
}

/* ---- software fp16 / bf16 arithmetic (lowp.h) ----------------------------------------------- */

/* a random finite value of f: fp16 over every exponent (subnormals included), bf16 and fp32
 * with exponents in [-20, 20] (so that a double add of two of them is exact) */
static double random_value(format f) {
    const int lo = f.p == 11 ? f.emin - 10 : -20, hi = f.p == 11 ? f.emax : 20;
    const int e = lo + (int)tlm_rng_below(&rng, (uint64_t)(hi - lo + 1));
    const double m = 1.0 + tlm_rng_uniform(&rng);
    const double v = round_fmt(ldexp(m, e), f);
    return isinf(v) ? fmt_max(f) : tlm_rng_below(&rng, 2) ? v : -v;
}

static void test_lowp_arith(tlm_dtype dt) {
    const format f = fmt_of(dt);
    const int n = 400000;
    long wrong[5] = {0};
    for (int i = 0; i < n; i++) {
        const double a = random_value(f), b = random_value(f);
        /* double: a + b, a - b, a * b exact for fp16 and bf16 (at most 51 bits), else correctly
         * rounded to 53 bits, like a / b and sqrt: round_fmt of it is the correct result */
        wrong[0] += tlm_lowp_add((float)a, (float)b, dt) != round_fmt(a + b, f);
        wrong[1] += tlm_lowp_sub((float)a, (float)b, dt) != round_fmt(a - b, f);
        wrong[2] += tlm_lowp_mul((float)a, (float)b, dt) != round_fmt(a * b, f);
        wrong[3] += tlm_lowp_div((float)a, (float)b, dt) != round_fmt(a / b, f);
        wrong[4] += tlm_lowp_sqrt((float)fabs(a), dt) != round_fmt(sqrt(fabs(a)), f);
    }
    check(wrong[0] + wrong[1] + wrong[2] + wrong[3] + wrong[4] == 0,
          "%s arithmetic in software (fp32, then round): + - * / sqrt correctly rounded on %d random pairs "
          "(wrong: %ld %ld %ld %ld %ld)", f.name, n, wrong[0], wrong[1], wrong[2], wrong[3], wrong[4]);
}

/* ---- accumulate ---------------------------------------------------------------------------- */

static void test_accumulate(void) {
    static tlm_accumulation acc;
    check(tlm_accumulate_run(be, TLM_ACCUMULATE_VALUE, &acc) == TLM_OK, "accumulate runs on the cpu backend");
    /* the reference trajectories: s = round_S(s + x), the double add exact (both terms in [2^-30, 16)) */
    double ref_sum[TLM_ACC_NUM_WAYS];
    for (int w = 0; w < TLM_ACC_NUM_WAYS; w++) {
        const tlm_accumulate_way_info *info = tlm_accumulate_way_get((tlm_accumulate_way)w);
        const format S = fmt_of(info->sum_dtype), A = fmt_of(info->addend_dtype);
        const double x = round_fmt(round_fmt(TLM_ACCUMULATE_VALUE, FP32), A); /* through float32, as c10 */
        double s = 0.0;
        long wrong = acc.partial[w][0] != 0.0f;
        for (int i = 1; i <= TLM_ACCUMULATE_STEPS; i++) {
            s = round_fmt(s + x, S);
            wrong += (double)acc.partial[w][i] != s;
        }
        ref_sum[w] = s;
        check(wrong == 0 && (double)acc.addend[w] == x,
              "accumulate %-19s: addend %.10g and all %d partial sums equal the reference (%ld differ); sum %.7f",
              info->name, x, TLM_ACCUMULATE_STEPS, wrong, s);
        /* rounding 0.01 to fp16 straight from double gives the same addend: the route does not matter */
        check(round_fmt(TLM_ACCUMULATE_VALUE, A) == x, "accumulate %-19s: 0.01 -> %s directly = through fp32",
              info->name, A.name);
    }
    /* the accumulation figures, to 4 decimals, from the reference sums */
    const char *spec[4] = {"10.0001", "9.9531", "10.0021", "10.0021"};
    for (int w = 0; w < 4; w++) {
        char got[32];
        snprintf(got, sizeof got, "%.4f", ref_sum[w]);
        check(strcmp(got, spec[w]) == 0 && ref_sum[w] == acc.partial[w][TLM_ACCUMULATE_STEPS],
              "accumulate %-19s = %s to 4 decimals (expected %s)",
              tlm_accumulate_way_get((tlm_accumulate_way)w)->name, got, spec[w]);
    }

    /* the analysis: error = representation + rounding; where bf16 += bf16 stops, and why */
    for (int w = 0; w < TLM_ACC_NUM_WAYS; w++) {
        tlm_accumulate_analysis a;
        tlm_accumulate_analyze(&acc, (tlm_accumulate_way)w, TLM_ACCUMULATE_VALUE, &a);
        const format S = fmt_of(tlm_accumulate_way_get((tlm_accumulate_way)w)->sum_dtype);
        int e;
        frexp(a.sum, &e);
        const double spacing = ldexp(1.0, (e - 1 < S.emin ? S.emin : e - 1) - (S.p - 1));
        check(fabs(a.error - (a.representation + a.rounding)) < 1e-15 && a.spacing == spacing,
              "accumulate %-19s analysis: error %+.4e = 0.01's rounding %+.4e + the adds' %+.4e; spacing at the "
              "sum %g", tlm_accumulate_way_get((tlm_accumulate_way)w)->name, a.error, a.representation, a.rounding,
              spacing);
        if (w == TLM_ACC_BF16_INTO_BF16) {
            /* the reference: the first add after which s + x rounds back to s */
            const double x = a.addend;
            double s = 0.0;
            int stop = 0;
            for (int i = 1; i <= TLM_ACCUMULATE_STEPS && !stop; i++) {
                const double next = round_fmt(s + x, BF16);
                if (next == s) stop = i - 1;
                s = next;
            }
            char why[640], want[64];
            tlm_accumulate_why((tlm_accumulate_way)w, &a, why, sizeof why);
            snprintf(want, sizeof want, "stops at %.9g after add %d", s, stop);
            check(a.last_change == stop && strstr(why, want) && x < spacing / 2,
                  "accumulate bf16 += bf16 stops at %g after add %d (addend %g < half the spacing %g); why: \"%s\"",
                  s, stop, x, spacing, why);
        }
        if (w == TLM_ACC_FP16_INTO_FP16) {
            char why[640], want[64];
            tlm_accumulate_why((tlm_accumulate_way)w, &a, why, sizeof why);
            snprintf(want, sizeof want, "2^%d = %g", e - 1 - (S.p - 1), spacing);
            check(strstr(why, want) != NULL, "accumulate fp16 += fp16 why names the spacing near 10, %s: \"%s\"", want,
                  why);
        }
    }
}

static void test_exact_decimal(void) {
    long wrong = 0;
    for (int i = 0; i < 20000; i++) {
        /* random doubles over a wide range; the expansion has exactly as many decimals as the value
         * has binary fraction digits, and reads back as the same double */
        const double v = ldexp(tlm_rng_uniform(&rng) - 0.5, (int)tlm_rng_below(&rng, 200) - 100);
        char buf[1300];
        tlm_exact_decimal(v, buf, sizeof buf);
        int k = 0; /* binary fraction digits: v 2^k is an integer */
        while (ldexp(v, k) != floor(ldexp(v, k))) k++;
        const char *dot = strchr(buf, '.');
        const int decimals = dot ? (int)strlen(dot + 1) : 0;
        wrong += strtod(buf, NULL) != v || decimals != k;
    }
    char a[64], b[64];
    tlm_exact_decimal(0.5, a, sizeof a);
    tlm_exact_decimal(-3.0, b, sizeof b);
    check(wrong == 0 && strcmp(a, "0.5") == 0 && strcmp(b, "-3") == 0,
          "exact decimal expansion: 20000 random doubles read back exactly, with one decimal per binary "
          "fraction digit (%ld wrong)", wrong);
}

/* ---- the ToyModel ---------------------------------------------------------------------------- */

static tlm_toymodel *toy(tlm_precision p, tlm_toy_loss loss) {
    tlm_toymodel_config cfg = tlm_toymodel_defaults();
    cfg.precision = p;
    cfg.loss = loss;
    tlm_toymodel *m = NULL;
    if (tlm_toymodel_create(&m, be, &cfg) != TLM_OK) {
        fprintf(stderr, "tlm_toymodel_create: %s\n", tlm_last_error());
        exit(1);
    }
    return m;
}

static size_t count(const tlm_toy_tensor *t) { return tlm_toy_numel(t); }

static float *read_t(const tlm_toymodel *m, const tlm_toy_tensor *t) {
    float *h = malloc(count(t) * sizeof(float));
    tlm_toymodel_read(m, t, h);
    return h;
}

/* y (rows, out) = x (rows, in) W^T (out, in), in double, rounded to f: a GEMM with one rounding */
static long gemm_ulps_off(const float *x, const float *w, const float *y, int rows, int in, int out, format f) {
    long worst = 0;
    for (int r = 0; r < rows; r++)
        for (int o = 0; o < out; o++) {
            double s = 0.0;
            for (int i = 0; i < in; i++) s += (double)x[r * in + i] * w[o * in + i];
            const double want = round_fmt(s, f), got = y[r * out + o];
            int e;
            frexp(fabs(want) > fabs(got) ? want : got, &e);
            const double spacing = ldexp(1.0, (e - 1 < f.emin ? f.emin : e - 1) - (f.p - 1));
            const long off = lround(fabs(got - want) / spacing);
            worst = off > worst ? off : worst;
        }
    return worst;
}

static void test_autocast_dtypes(tlm_precision p) {
    tlm_toymodel *m = toy(p, TLM_TOY_LOSS_MSE);
    const tlm_dtype dt = m->dt, F32 = TLM_DTYPE_F32;
    const char *name = tlm_act_dtype_name(dt);
    float loss;
    bool ran = tlm_toymodel_forward(m, &loss) == TLM_OK && tlm_toymodel_backward(m) == TLM_OK && isfinite(loss);
    check(ran, "%s ToyModel: forward and backward run, loss %.6f", name, (double)loss);
    check(m->fc1_weight.dtype == F32 && m->ln_weight.dtype == F32 && m->ln_bias.dtype == F32 &&
              m->fc2_weight.dtype == F32,
          "%s autocast: parameters fp32 (master weights, inside the autocast region)", name);
    check(m->fc1_out.dtype == dt && m->x_gemm.dtype == dt && m->fc1_weight_gemm.dtype == dt,
          "%s autocast: fc1 output %s, its operands cast to %s", name, tlm_act_dtype_name(m->fc1_out.dtype), name);
    check(m->relu_out.dtype == dt, "%s autocast: ReLU output %s (its input's dtype)", name,
          tlm_act_dtype_name(m->relu_out.dtype));
    check(m->ln_out.dtype == F32 && m->ln_mean.dtype == F32 && m->ln_rstd.dtype == F32,
          "%s autocast: LayerNorm output and statistics fp32", name);
    check(m->logits.dtype == dt && m->ln_out_gemm.dtype == dt, "%s autocast: logits %s", name,
          tlm_act_dtype_name(m->logits.dtype));
    check(m->loss.dtype == F32, "%s autocast: loss fp32", name);
    check(m->fc1_weight_grad.dtype == F32 && m->ln_weight_grad.dtype == F32 && m->ln_bias_grad.dtype == F32 &&
              m->fc2_weight_grad.dtype == F32,
          "%s autocast: gradients fp32", name);

    /* the buffers hold what their dtypes say: fc1's output is the rounding of x W^T (operands
     * rounded) to dt, the logits that of LayerNorm's output, rounded to dt, times fc2's weight */
    const format f = fmt_of(dt);
    const int B = m->cfg.batch_size, in = m->cfg.in_features, H = m->cfg.hidden, out = m->cfg.out_features;
    float *x = read_t(m, &m->x), *w1 = read_t(m, &m->fc1_weight), *h1 = read_t(m, &m->fc1_out);
    float *ln = read_t(m, &m->ln_out), *w2 = read_t(m, &m->fc2_weight), *logits = read_t(m, &m->logits);
    float *relu = read_t(m, &m->relu_out);
    for (size_t i = 0; i < count(&m->x); i++) x[i] = (float)round_fmt(x[i], f);
    for (size_t i = 0; i < count(&m->fc1_weight); i++) w1[i] = (float)round_fmt(w1[i], f);
    for (size_t i = 0; i < count(&m->ln_out); i++) ln[i] = (float)round_fmt(ln[i], f);
    for (size_t i = 0; i < count(&m->fc2_weight); i++) w2[i] = (float)round_fmt(w2[i], f);
    const long off1 = gemm_ulps_off(x, w1, h1, B, in, H, f), off2 = gemm_ulps_off(ln, w2, logits, B, H, out, f);
    check(off1 <= 1 && off2 <= 1, "%s ToyModel: fc1 output and logits are %s roundings of their GEMMs (within %ld "
          "and %ld spacings of %s)", name, name, off1, off2, name);
    /* LayerNorm's output: fp32, of the ReLU output's values (in dt), to float32 accuracy */
    long ln_bad = 0;
    float *lnf = read_t(m, &m->ln_out);
    for (int r = 0; r < B; r++) {
        double mean = 0.0, var = 0.0;
        for (int c = 0; c < H; c++) mean += relu[r * H + c] / (double)H;
        for (int c = 0; c < H; c++) var += (relu[r * H + c] - mean) * (relu[r * H + c] - mean) / H;
        for (int c = 0; c < H; c++) {
            const double want = (relu[r * H + c] - mean) / sqrt(var + m->cfg.ln_eps); /* weight 1, bias 0 */
            ln_bad += fabs(lnf[r * H + c] - want) > 1e-5 * (1.0 + fabs(want));
        }
    }
    check(ln_bad == 0, "%s ToyModel: LayerNorm output = LayerNorm of the %s ReLU output, in fp32 (%ld off)", name,
          name, ln_bad);
    free(x), free(w1), free(h1), free(ln), free(w2), free(logits), free(relu), free(lnf);
    tlm_toymodel_free(m);
}

/* L(params) on the host for the finite differences */
static double toy_loss_at(tlm_toymodel *m, const float *params) {
    tlm_toymodel_set_params(m, params);
    float loss;
    TLM_ASSERT(tlm_toymodel_forward(m, &loss) == TLM_OK);
    return loss;
}

static void test_toymodel_gradients(tlm_toy_loss kind) {
    tlm_toymodel *m = toy(TLM_PRECISION_FP32, kind);
    const size_t n = m->num_params;
    float *p = malloc(n * sizeof(float)), *grad = malloc(n * sizeof(float));
    tlm_copy_to_host(m->be, p, m->params, n * sizeof(float));
    /* LayerNorm's weight and bias away from 1 and 0, so that their gradients are general */
    const size_t ln0 = count(&m->fc1_weight);
    for (int c = 0; c < m->cfg.hidden; c++) {
        p[ln0 + c] = (float)(1.0 + 0.3 * tlm_rng_normal(&rng));
        p[ln0 + m->cfg.hidden + c] = (float)(0.3 * tlm_rng_normal(&rng));
    }
    toy_loss_at(m, p);
    TLM_ASSERT(tlm_toymodel_backward(m) == TLM_OK);
    tlm_copy_to_host(m->be, grad, m->grads, n * sizeof(float));
    /* central differences over every parameter, eps 1e-3, the loss summed in double */
    double err2 = 0.0, wrong2 = 0.0, norm2 = 0.0;
    for (size_t i = 0; i < n; i++) {
        const float p0 = p[i], pp = p0 + 1e-3f, pm = p0 - 1e-3f;
        p[i] = pp;
        const double lp = toy_loss_at(m, p);
        p[i] = pm;
        const double lm = toy_loss_at(m, p);
        p[i] = p0;
        const double fd = (lp - lm) / ((double)pp - pm);
        err2 += (grad[i] - fd) * (grad[i] - fd);
        wrong2 += (1.1 * grad[i] - fd) * (1.1 * grad[i] - fd);
        norm2 += fd * fd;
    }
    const double err = sqrt(err2 / norm2), wrong = sqrt(wrong2 / norm2);
    check(err < 1e-2 && wrong > 1e-2, "fp32 ToyModel (loss %s) gradients vs central differences over all %zu "
          "parameters: error %.2e (x1.1 gives %.2e)", tlm_toy_loss_name(kind), n, err, wrong);
    free(p), free(grad);
    tlm_toymodel_free(m);
}

/* the autocast gradients track the fp32 ones: every GEMM operand rounded to 2^-p relative, a few
 * roundings chained (measured: fp16 1.3 u, bf16 1.2 u; u = 2^-11, 2^-8); 8 u each */
static void test_toymodel_lowp_gradients(tlm_precision p) {
    tlm_toymodel *m = toy(p, TLM_TOY_LOSS_MSE), *ref = toy(TLM_PRECISION_FP32, TLM_TOY_LOSS_MSE);
    float l, l32;
    TLM_ASSERT(tlm_toymodel_forward(m, &l) == TLM_OK && tlm_toymodel_backward(m) == TLM_OK);
    TLM_ASSERT(tlm_toymodel_forward(ref, &l32) == TLM_OK && tlm_toymodel_backward(ref) == TLM_OK);
    const size_t n = m->num_params;
    float *g = malloc(n * sizeof(float)), *g32 = malloc(n * sizeof(float));
    tlm_copy_to_host(m->be, g, m->grads, n * sizeof(float));
    tlm_copy_to_host(m->be, g32, ref->grads, n * sizeof(float));
    const double u = ldexp(1.0, -fmt_of(m->dt).p), err = tlm_rel_error_f32(g, g32, n), lerr = fabs((double)l - l32) / l32;
    check(err < 8 * u && lerr < 8 * u && err > 0.0,
          "%s ToyModel: gradients vs the fp32 model's: error %.2e (%.2f u), loss %.2e (%.2f u), u = %.2e",
          tlm_act_dtype_name(m->dt), err, err / u, lerr, lerr / u, u);
    free(g), free(g32);
    tlm_toymodel_free(m);
    tlm_toymodel_free(ref);
}

/* ---- LayerNorm in low precision --------------------------------------------------------------- */

/* The lab's operations, as precision_lab.h defines them: computed in fp32, rounded to the target.
 * Here: the double operation (exact, or correctly rounded to 53 bits), rounded to fp32, then to
 * the target. Where both operands are values of the target the fp32 step changes nothing
 * (test_lowp_arith); where one is not (x - mean with an fp32 mean, the product with an fp32 rstd,
 * var + eps) it is the rounding a kernel computing in fp32 and storing the format also does. */
static double op_to(double v, format f) { return round_fmt(round_fmt(v, FP32), f); }

/* sums in f, left to right or as the same balanced tree as the lab (n/2 | n - n/2) */
static double ref_sum(const double *t, int n, format f, bool pairwise) {
    if (!pairwise) {
        double s = 0.0;
        for (int i = 0; i < n; i++) s = op_to(s + t[i], f);
        return s;
    }
    if (n == 0) return 0.0;
    if (n == 1) return t[0];
    return op_to(ref_sum(t, n / 2, f, true) + ref_sum(t + n / 2, n - n / 2, f, true), f);
}

static bool same_value(double a, double b) { return a == b || (isnan(a) && isnan(b)); }

static void test_ln_row(tlm_ln_scheme s, int C, double M, bool pairwise) {
    const tlm_ln_scheme_info *sc = tlm_ln_scheme_get(s);
    const format in = fmt_of(sc->input), S = fmt_of(sc->stats), E = fmt_of(sc->elementwise);
    float *x = malloc(C * sizeof(float)), *y = malloc(C * sizeof(float)), *work = malloc(C * sizeof(float));
    double *xd = malloc(C * sizeof(double)), *t = malloc(C * sizeof(double));
    for (int c = 0; c < C; c++) xd[c] = x[c] = (float)round_fmt(M * (1.0 + tlm_rng_normal(&rng)), in);
    const tlm_ln_row_stats r = tlm_ln_lab_row(s, x, y, work, C, pairwise);
    /* the reference, rounding at the same points */
    const double sum = ref_sum(xd, C, S, pairwise), mean = op_to(sum / C, S);
    for (int c = 0; c < C; c++) {
        const double d = op_to(xd[c] - mean, S);
        t[c] = op_to(d * d, S);
    }
    const double sumsq = ref_sum(t, C, S, pairwise), var = op_to(sumsq / C, S);
    const double rstd = op_to(1.0 / op_to(sqrt(op_to(var + (double)TLM_LN_LAB_EPS, S)), S), S);
    long wrong = !same_value(r.sum, sum) + !same_value(r.mean, mean) + !same_value(r.sumsq, sumsq) +
                 !same_value(r.var, var) + !same_value(r.rstd, rstd);
    for (int c = 0; c < C; c++) wrong += !same_value(y[c], op_to(op_to(xd[c] - mean, E) * rstd, E));
    check(wrong == 0, "layernorm lab row %-17s C=%-5d M=%-6g %s: sum %g, variance %g, y: equal to the reference "
          "bit for bit (%ld differ)", sc->name, C, M, pairwise ? "pairwise" : "in order", sum, var, wrong);
    free(x), free(y), free(work), free(xd), free(t);
}

static void test_ln_lab(bool pairwise) {
    for (int s = 0; s < TLM_LN_NUM_SCHEMES; s++)
        for (int C = 10; C <= 1000; C *= 100)
            for (double M = 1.0; M <= 1e4; M *= 100) test_ln_row((tlm_ln_scheme)s, C, M, pairwise);

    tlm_ln_lab_config cfg = tlm_ln_lab_defaults();
    cfg.pairwise = pairwise;
    tlm_ln_lab *lab = malloc(sizeof *lab);
    check(tlm_ln_lab_run(&cfg, lab) == TLM_OK, "layernorm lab grid runs (%s sums)", pairwise ? "pairwise" : "in order");
    const int nw = TLM_LN_LAB_WIDTHS, nm = TLM_LN_LAB_MAGNITUDES;
    /* fp32 statistics: no overflow, the output within a few roundings of the format */
    const tlm_ln_scheme stats32[2] = {TLM_LN_FP16_F32_STATS, TLM_LN_BF16_F32_STATS};
    for (int k = 0; k < 2; k++) {
        const format f = fmt_of(tlm_ln_scheme_get(stats32[k])->input);
        const double half = ldexp(1.0, -f.p); /* half the spacing near 1, relative */
        double worst = 0.0;
        bool overflow = false;
        for (int wi = 0; wi < nw; wi++)
            for (int mi = 0; mi < nm; mi++) {
                const tlm_ln_lab_cell *c = &lab->cell[stats32[k]][wi][mi];
                overflow |= c->sum_overflow || c->sumsq_overflow || c->out_nonfinite || c->input_overflow;
                worst = fmax(worst, isnan(c->out_err) ? INFINITY : c->out_err);
            }
        check(!overflow && worst < 2 * half, "layernorm lab %s: no overflow, worst output error %.2e < 2 x %.2e "
              "(half of %s's spacing near 1)", tlm_ln_scheme_get(stats32[k])->name, worst, half, f.name);
    }
    /* fp16: the largest magnitude overflows at every width, and an overflow shows in the output */
    bool all = true, shown = true;
    for (int wi = 0; wi < nw; wi++) {
        const tlm_ln_lab_cell *c = &lab->cell[TLM_LN_FP16][wi][nm - 1];
        all &= c->sum_overflow || c->sumsq_overflow;
        for (int mi = 0; mi < nm; mi++) {
            const tlm_ln_lab_cell *d = &lab->cell[TLM_LN_FP16][wi][mi];
            if (d->sum_overflow) shown &= isnan(d->out_err);
            if (d->sumsq_overflow) shown &= !(d->out_err < 0.5); /* y = 0: error 1 */
        }
    }
    check(all && shown, "layernorm lab fp16: M = 1e4 overflows at every width; an overflowed sum gives NaN, an "
          "overflowed sum of squares y = 0");
    /* no spurious overflow: where the fp32 scheme's sums (within 1e-5 of float64's) stay under half
     * of fp16's largest value in every row, the fp16 ones must not overflow */
    long spurious = 0;
    for (int wi = 0; wi < nw; wi++)
        for (int mi = 0; mi < nm; mi++) {
            const tlm_ln_lab_cell *c16 = &lab->cell[TLM_LN_FP16][wi][mi], *c32 = &lab->cell[TLM_LN_FP32][wi][mi];
            if (c32->max_sum < fmt_max(FP16) / 2 && c32->max_sumsq < fmt_max(FP16) / 2)
                spurious += c16->sum_overflow || c16->sumsq_overflow;
        }
    check(spurious == 0, "layernorm lab fp16: no overflow where every row's sums stay under half of %.0f (%ld)",
          fmt_max(FP16), spurious);
    /* bf16: never overflows */
    bool bf_overflow = false;
    for (int wi = 0; wi < nw; wi++)
        for (int mi = 0; mi < nm; mi++) {
            const tlm_ln_lab_cell *c = &lab->cell[TLM_LN_BF16][wi][mi];
            bf_overflow |= c->sum_overflow || c->sumsq_overflow || c->out_nonfinite;
        }
    check(!bf_overflow, "layernorm lab bf16: no overflow anywhere");
    if (!pairwise) {
        const double b = lab->cell[TLM_LN_BF16][nw - 1][0].out_err;
        const double s32 = lab->cell[TLM_LN_BF16_F32_STATS][nw - 1][0].out_err;
        check(b > 10 * s32, "layernorm lab bf16, sums in order, width %d: output error %.2e, over 10x fp32 "
              "statistics' %.2e", lab->width[nw - 1], b, s32);
    }
    char lines[4][TLM_LN_LAB_LINE], max16[32];
    const int n = tlm_ln_lab_findings(lab, lines, 4);
    snprintf(max16, sizeof max16, "%.0f", fmt_max(FP16));
    check(n == 3 && strstr(lines[0], max16) && strstr(lines[2], "never overflows"),
          "layernorm lab findings: 3 lines; the first names fp16's largest value %s, the last that bf16 never "
          "overflows", max16);
    free(lab);
}

int main(void) {
    if (tlm_backend_cpu_create(&be, 0) != TLM_OK) {
        fprintf(stderr, "tlm_backend_cpu_create: %s\n", tlm_last_error());
        return 1;
    }
    test_round_fmt();
    test_lowp_arith(TLM_DTYPE_F16);
    test_lowp_arith(TLM_DTYPE_BF16);
    test_lowp_arith(TLM_DTYPE_F32);
    test_accumulate();
    test_exact_decimal();
    test_autocast_dtypes(TLM_PRECISION_FP16);
    test_autocast_dtypes(TLM_PRECISION_BF16);
    test_toymodel_gradients(TLM_TOY_LOSS_MSE);
    test_toymodel_gradients(TLM_TOY_LOSS_SUM);
    test_toymodel_lowp_gradients(TLM_PRECISION_FP16);
    test_toymodel_lowp_gradients(TLM_PRECISION_BF16);
    test_ln_lab(false);
    test_ln_lab(true);
    return test_finish_backend(be);
}
