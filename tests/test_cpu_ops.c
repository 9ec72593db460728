/* test_cpu_ops.c — the CPU backend's ops: every forward against a direct double-precision
 * computation, every backward against central finite differences of its forward.
 *
 * A gradient check takes a scalar objective L = sum(out * R) (R random, fixed; summed in
 * double), perturbs input elements by +-eps (all of them, or a random sample of 50), and
 * compares the analytic gradient (the backward run with dout = R) by normalized error
 * ||analytic - fd|| / ||fd||. Each check also reports the error of the analytic gradient scaled
 * by 1.1 and requires it to FAIL the tolerance, so a check that cannot fail is caught.
 * Outputs that an op overwrites are poisoned with NaN first and must come back all finite.
 * Every op taking a dtype runs in fp32 for the checks above, and in bf16 and fp16 against
 * the fp32 op on the same (rounded) inputs ("bf16 / fp16" below says how close and why);
 * cast, grad_unscale, sum_squares and the residual folded into matmul have checks of their own.
 * Prints one line per check and a final "N passed, M failed"; exits 1 on any failure. */
#include "tlm/util.h"
#include "tlm/backend.h"
#include "tlm/rng.h"
#include "cpu/cpu_ops.h"
#include "core/convert.h"
#include "test_check.h"

#include <float.h>
#include <math.h>
#include <omp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GRAD_TOL 1e-2    /* normalized error of a gradient against finite differences */
#define FWD_TOL 1e-5     /* normalized error of a forward against double precision */
#define FD_SAMPLES 50    /* elements perturbed per input when it has more than FD_ALL */
#define FD_ALL 128

static tlm_backend *be;
static uint64_t rng = 0x5EED;

/* ---- buffers ----------------------------------------------------------------------------- */

static float *alloc_floats(size_t n) {
    float *p = tlm_alloc(be, n * sizeof(float), TLM_MEM_ACTIVATIONS, "test");
    TLM_ASSERT(p && (uintptr_t)p % 64 == 0);
    return p;
}

static int32_t *alloc_ints(size_t n) {
    int32_t *p = tlm_alloc(be, n * sizeof(int32_t), TLM_MEM_WORKSPACE, "test");
    TLM_ASSERT(p);
    return p;
}

/* n ids drawn uniformly from [0, bound) */
static int32_t *random_ids(size_t n, uint64_t bound) {
    int32_t *p = alloc_ints(n);
    for (size_t i = 0; i < n; i++) p[i] = (int32_t)tlm_rng_below(&rng, bound);
    return p;
}

/* normal(0, scale) values; never exactly zero in practice */
static float *randn(size_t n, float scale) {
    float *p = alloc_floats(n);
    for (size_t i = 0; i < n; i++) p[i] = (float)(scale * tlm_rng_normal(&rng));
    return p;
}

static float *copy_of(const float *x, size_t n) {
    float *p = alloc_floats(n);
    memcpy(p, x, n * sizeof(float));
    return p;
}

static void poison(float *x, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] = NAN;
}

static bool all_finite(const float *x, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i])) return false;
    return true;
}

static double dot(const float *a, const float *b, size_t n) {
    double s = 0.0;
    for (size_t i = 0; i < n; i++) s += (double)a[i] * b[i];
    return s;
}

/* ||got - want|| / ||want|| */
static double rel_error(const float *got, const double *want, size_t n) {
    double num = 0.0, den = 0.0;
    for (size_t i = 0; i < n; i++) {
        num += (got[i] - want[i]) * (got[i] - want[i]);
        den += want[i] * want[i];
    }
    return sqrt(num / (den > 0.0 ? den : 1.0));
}

static double max_abs_diff(const float *a, const float *b, size_t n) {
    double m = 0.0;
    for (size_t i = 0; i < n; i++) m = fmax(m, fabs((double)a[i] - b[i]));
    return m;
}

static void check_forward(const char *what, const float *got, const double *want, size_t n) {
    double err = rel_error(got, want, n);
    bool written = all_finite(got, n);
    check(written && err < FWD_TOL, "%s: vs double precision: error %.2e%s", what, err,
          written ? "" : " (NaN left: not every element written)");
}

/* ---- bf16 / fp16 tensors ----------------------------------------------------------------- */

#define F32 TLM_DTYPE_F32
static const tlm_dtype LOWP[2] = {TLM_DTYPE_BF16, TLM_DTYPE_F16};

static const char *dt_name(tlm_dtype dt) {
    return dt == TLM_DTYPE_BF16 ? "bf16" : dt == TLM_DTYPE_F16 ? "fp16" : "fp32";
}

/* The reference rounding, one element at a time through core/convert.h (not through an op). */
static uint16_t narrow16(float x, tlm_dtype dt) {
    return dt == TLM_DTYPE_BF16 ? tlm_f32_to_bf16(x) : tlm_f32_to_f16(x);
}

static float widen16(uint16_t h, tlm_dtype dt) {
    return dt == TLM_DTYPE_BF16 ? tlm_bf16_to_f32(h) : tlm_f16_to_f32(h);
}

static float round_to(float x, tlm_dtype dt) {
    return dt == F32 ? x : widen16(narrow16(x, dt), dt);
}

static float get_dt(const void *p, size_t i, tlm_dtype dt) {
    return dt == F32 ? ((const float *)p)[i] : widen16(((const uint16_t *)p)[i], dt);
}

static void poison_dt(void *p, size_t n, tlm_dtype dt) {
    if (dt == F32) poison(p, n);
    else
        for (size_t i = 0; i < n; i++) ((uint16_t *)p)[i] = narrow16(NAN, dt);
}

static bool all_finite_dt(const void *p, size_t n, tlm_dtype dt) {
    for (size_t i = 0; i < n; i++)
        if (!isfinite(get_dt(p, i, dt))) return false;
    return true;
}

/* n elements of dt, poisoned with NaN */
static void *alloc_dt(size_t n, tlm_dtype dt) {
    void *p = tlm_alloc(be, n * tlm_dtype_size(dt), TLM_MEM_ACTIVATIONS, "test");
    TLM_ASSERT(p && (uintptr_t)p % 64 == 0);
    poison_dt(p, n, dt);
    return p;
}

/* x (n) rounded to dt, as a dt tensor (rounded() gives the same values as float32) */
static void *to_dt(const float *x, size_t n, tlm_dtype dt) {
    void *p = alloc_dt(n, dt);
    for (size_t i = 0; i < n; i++) {
        if (dt == F32) ((float *)p)[i] = x[i];
        else ((uint16_t *)p)[i] = narrow16(x[i], dt);
    }
    return p;
}

static float *rounded(const float *x, size_t n, tlm_dtype dt) {
    float *r = alloc_floats(n);
    for (size_t i = 0; i < n; i++) r[i] = round_to(x[i], dt);
    return r;
}

static void *randn_dt(size_t n, float scale, tlm_dtype dt) { return to_dt(randn(n, scale), n, dt); }

/* columns c0..c1-1 of rows (row stride ld) of a dt tensor, as contiguous float32 */
static float *gather(const void *p, int rows, int ld, int c0, int c1, tlm_dtype dt) {
    float *g = alloc_floats((size_t)rows * (c1 - c0));
    for (int r = 0; r < rows; r++)
        for (int c = c0; c < c1; c++)
            g[(size_t)r * (c1 - c0) + c - c0] = get_dt(p, (size_t)r * ld + c, dt);
    return g;
}

/* Largest distance in units in the last place of dt between got (dt) and want rounded to dt
 * (the 16-bit patterns as sign-magnitude integers: adjacent values differ by 1). */
static long max_ulps(const void *got, const float *want, size_t n, tlm_dtype dt) {
    long worst = 0;
    for (size_t i = 0; i < n; i++) {
        uint16_t g = ((const uint16_t *)got)[i], w = narrow16(want[i], dt);
        long gi = g & 0x8000 ? -(long)(g & 0x7fff) : (long)g;
        long wi = w & 0x8000 ? -(long)(w & 0x7fff) : (long)w;
        worst = labs(gi - wi) > worst ? labs(gi - wi) : worst;
    }
    return worst;
}

/* ---- gradient check ---------------------------------------------------------------------- */

/* L(ctx): runs the forward on the current inputs and returns sum(out * R) */
typedef double (*objective_fn)(void *ctx);

/* Checks grad (the analytic dL/dx) against central differences of L over the elements of x
 * in rows 0..rows-1, columns c0..c1-1 of row stride ld (a plain tensor: rows 1, ld = c1 = n). */
static void check_grad(const char *what, objective_fn L, void *ctx, float *x, const float *grad,
                       int rows, int ld, int c0, int c1, float eps) {
    size_t count = (size_t)rows * (c1 - c0);
    size_t samples = count <= FD_ALL ? count : FD_SAMPLES;
    double err2 = 0.0, wrong2 = 0.0, norm2 = 0.0;
    for (size_t s = 0; s < samples; s++) {
        size_t e = samples == count ? s : tlm_rng_below(&rng, count);
        size_t i = (e / (c1 - c0)) * ld + c0 + e % (c1 - c0);
        float x0 = x[i], xp = x0 + eps, xm = x0 - eps;
        x[i] = xp;
        double Lp = L(ctx);
        x[i] = xm;
        double Lm = L(ctx);
        x[i] = x0;
        double fd = (Lp - Lm) / ((double)xp - (double)xm);
        err2 += (grad[i] - fd) * (grad[i] - fd);
        wrong2 += (1.1 * grad[i] - fd) * (1.1 * grad[i] - fd);
        norm2 += fd * fd;
    }
    double err = sqrt(err2 / norm2), wrong = sqrt(wrong2 / norm2);
    check(err < GRAD_TOL && wrong > GRAD_TOL && norm2 > 0.0,
          "%s: vs central differences (%zu of %zu elements): error %.2e (x1.1 gives %.2e)", what,
          samples, count, err, wrong);
}

/* ---- embedding --------------------------------------------------------------------------- */

typedef struct {
    float *out, *wte, *R;
    int32_t *tokens;
    int N, C;
} embedding_ctx;

static double embedding_objective(void *p) {
    embedding_ctx *c = p;
    tlm_embedding_forward(be, c->out, c->tokens, c->wte, c->N, c->C);
    return dot(c->out, c->R, (size_t)c->N * c->C);
}

static void test_embedding(int N, int V, int C) {
    char name[64];
    snprintf(name, sizeof name, "embedding N=%d V=%d C=%d", N, V, C);
    embedding_ctx c = {.N = N, .C = C};
    c.tokens = random_ids(N, V / 2 + 1); /* repeats */
    c.tokens[N - 1] = V - 1;
    c.wte = randn((size_t)V * C, 1.0f);
    c.R = randn((size_t)N * C, 1.0f);
    c.out = alloc_floats((size_t)N * C);

    poison(c.out, (size_t)N * C);
    tlm_embedding_forward(be, c.out, c.tokens, c.wte, N, C);
    bool exact = true;
    for (int n = 0; n < N; n++)
        exact &= memcmp(c.out + (size_t)n * C, c.wte + (size_t)c.tokens[n] * C, C * sizeof(float)) == 0;
    check(exact, "%s forward: out rows are exact copies of wte rows", name);

    float *dwte = alloc_floats((size_t)V * C);
    poison(dwte, (size_t)V * C);
    tlm_embedding_backward(be, dwte, c.R, c.tokens, N, V, C);
    double *want = calloc((size_t)V * C, sizeof(double));
    for (int n = 0; n < N; n++)
        for (int j = 0; j < C; j++) want[(size_t)c.tokens[n] * C + j] += c.R[(size_t)n * C + j];
    check_forward("embedding backward dwte (zeroed, scatter-added)", dwte, want, (size_t)V * C);
    check_grad(name, embedding_objective, &c, c.wte, dwte, 1, V * C, 0, V * C, 1e-2f);
    free(want);
}

/* ---- RMSNorm ----------------------------------------------------------------------------- */

typedef struct {
    float *out, *rstd, *x, *w, *R;
    int N, C;
    float eps;
} rmsnorm_ctx;

static double rmsnorm_objective(void *p) {
    rmsnorm_ctx *c = p;
    tlm_rmsnorm_forward(be, c->out, c->rstd, c->x, c->w, c->N, c->C, c->eps, F32);
    return dot(c->out, c->R, (size_t)c->N * c->C);
}

static void test_rmsnorm(int N, int C) {
    char name[64];
    size_t NC = (size_t)N * C;
    rmsnorm_ctx c = {.N = N, .C = C, .eps = 1e-5f};
    c.x = randn(NC, 1.0f);
    c.w = randn(C, 0.3f);
    for (int j = 0; j < C; j++) c.w[j] += 1.0f;
    c.R = randn(NC, 1.0f);
    c.out = alloc_floats(NC);
    c.rstd = alloc_floats(N);

    poison(c.out, NC);
    poison(c.rstd, N);
    tlm_rmsnorm_forward(be, c.out, c.rstd, c.x, c.w, N, C, c.eps, F32);
    double *want = malloc(NC * sizeof(double)), *want_rstd = malloc(N * sizeof(double));
    for (int n = 0; n < N; n++) {
        double ss = 0.0;
        for (int j = 0; j < C; j++) ss += (double)c.x[n * C + j] * c.x[n * C + j];
        want_rstd[n] = 1.0 / sqrt(ss / C + c.eps);
        for (int j = 0; j < C; j++) want[n * C + j] = c.x[n * C + j] * want_rstd[n] * c.w[j];
    }
    snprintf(name, sizeof name, "rmsnorm N=%d C=%d forward out", N, C);
    check_forward(name, c.out, want, NC);
    snprintf(name, sizeof name, "rmsnorm N=%d C=%d forward rstd", N, C);
    check_forward(name, c.rstd, want_rstd, N);

    /* backward: dx accumulates onto its previous (random) contents, dw is overwritten */
    float *dx0 = randn(NC, 1.0f), *dx = copy_of(dx0, NC), *dw = alloc_floats(C);
    poison(dw, C);
    tlm_rmsnorm_backward(be, dx, dw, c.R, c.x, c.w, c.rstd, N, C, NULL, F32);
    float *dx_added = alloc_floats(NC);
    for (size_t i = 0; i < NC; i++) dx_added[i] = dx[i] - dx0[i];
    check(all_finite(dw, C), "rmsnorm N=%d C=%d backward writes every dw", N, C);
    snprintf(name, sizeof name, "rmsnorm N=%d C=%d dx (added to dx)", N, C);
    check_grad(name, rmsnorm_objective, &c, c.x, dx_added, 1, (int)NC, 0, (int)NC, 1e-3f);
    snprintf(name, sizeof name, "rmsnorm N=%d C=%d dw", N, C);
    check_grad(name, rmsnorm_objective, &c, c.w, dw, 1, C, 0, C, 1e-3f);
    free(want);
    free(want_rstd);
}

/* ---- matmul ------------------------------------------------------------------------------ */

typedef struct {
    float *y, *x, *w, *R;
    int N, in, out;
} matmul_ctx;

static double matmul_objective(void *p) {
    matmul_ctx *c = p;
    tlm_matmul_forward(be, c->y, NULL, c->x, c->w, c->N, c->in, c->out, tlm_precision_of_dtype(F32));
    return dot(c->y, c->R, (size_t)c->N * c->out);
}

static void test_matmul(int N, int in, int out) {
    char name[64];
    matmul_ctx c = {.N = N, .in = in, .out = out};
    c.x = randn((size_t)N * in, 1.0f);
    c.w = randn((size_t)out * in, 0.5f);
    c.R = randn((size_t)N * out, 1.0f);
    c.y = alloc_floats((size_t)N * out);

    poison(c.y, (size_t)N * out);
    tlm_matmul_forward(be, c.y, NULL, c.x, c.w, N, in, out, tlm_precision_of_dtype(F32));
    double *want = malloc((size_t)N * out * sizeof(double));
    for (int n = 0; n < N; n++)
        for (int o = 0; o < out; o++) {
            double s = 0.0;
            for (int i = 0; i < in; i++) s += (double)c.x[n * in + i] * c.w[o * in + i];
            want[n * out + o] = s;
        }
    snprintf(name, sizeof name, "matmul N=%d in=%d out=%d forward y = x W^T", N, in, out);
    check_forward(name, c.y, want, (size_t)N * out);

    float *dx = alloc_floats((size_t)N * in), *dw = alloc_floats((size_t)out * in);
    poison(dx, (size_t)N * in);
    poison(dw, (size_t)out * in);
    tlm_matmul_backward(be, dx, dw, TLM_DTYPE_F32, c.R, c.x, c.w, N, in, out, tlm_precision_of_dtype(F32));
    check(all_finite(dx, (size_t)N * in) && all_finite(dw, (size_t)out * in),
          "matmul N=%d in=%d out=%d backward writes every dx and dw", N, in, out);
    snprintf(name, sizeof name, "matmul N=%d in=%d out=%d dx", N, in, out);
    check_grad(name, matmul_objective, &c, c.x, dx, 1, N * in, 0, N * in, 1e-2f);
    snprintf(name, sizeof name, "matmul N=%d in=%d out=%d dW", N, in, out);
    check_grad(name, matmul_objective, &c, c.w, dw, 1, out * in, 0, out * in, 1e-2f);

    float *dw2 = alloc_floats((size_t)out * in);
    poison(dw2, (size_t)out * in);
    tlm_matmul_backward(be, NULL, dw2, TLM_DTYPE_F32, c.R, c.x, c.w, N, in, out, tlm_precision_of_dtype(F32));
    check(max_abs_diff(dw, dw2, (size_t)out * in) == 0.0,
          "matmul N=%d in=%d out=%d backward with dx == NULL: same dW", N, in, out);
    float *dx2 = alloc_floats((size_t)N * in);
    poison(dx2, (size_t)N * in);
    tlm_matmul_backward(be, dx2, NULL, TLM_DTYPE_F32, c.R, c.x, c.w, N, in, out, tlm_precision_of_dtype(F32));
    check(max_abs_diff(dx, dx2, (size_t)N * in) == 0.0,
          "matmul N=%d in=%d out=%d backward with dw == NULL: same dx", N, in, out);
    free(want);
}

/* ---- RoPE -------------------------------------------------------------------------------- */

typedef struct {
    float *x, *work, *cos, *sin, *R;
    int B, T, nheads, D, ld;
} rope_ctx;

static double rope_objective(void *p) {
    rope_ctx *c = p;
    size_t n = (size_t)c->B * c->T * c->ld;
    memcpy(c->work, c->x, n * sizeof(float));
    tlm_rope_forward(be, c->work, c->cos, c->sin, c->B, c->T, c->nheads, c->D, c->ld, F32);
    return dot(c->work, c->R, n);
}

static void test_rope(int B, int T, int nheads, int D, int extra_columns) {
    char name[80];
    const int T_max = T + 2, half = D / 2;
    const double theta = 10000.0;
    rope_ctx c = {.B = B, .T = T, .nheads = nheads, .D = D, .ld = nheads * D + extra_columns};
    size_t n = (size_t)B * T * c.ld;
    c.cos = alloc_floats((size_t)T_max * half);
    c.sin = alloc_floats((size_t)T_max * half);
    for (int t = 0; t < T_max; t++)
        for (int k = 0; k < half; k++) {
            double angle = t * pow(theta, -2.0 * k / D);
            c.cos[t * half + k] = (float)cos(angle);
            c.sin[t * half + k] = (float)sin(angle);
        }
    c.x = randn(n, 1.0f);
    c.R = randn(n, 1.0f);
    c.work = alloc_floats(n);

    /* forward against the formula, angles in double; columns past the heads untouched */
    float *y = copy_of(c.x, n);
    tlm_rope_forward(be, y, c.cos, c.sin, B, T, nheads, D, c.ld, F32);
    double *want = malloc(n * sizeof(double));
    for (size_t i = 0; i < n; i++) want[i] = c.x[i];
    for (int row = 0; row < B * T; row++)
        for (int h = 0; h < nheads; h++)
            for (int k = 0; k < half; k++) {
                double angle = (row % T) * pow(theta, -2.0 * k / D);
                size_t i = (size_t)row * c.ld + h * D + 2 * k;
                want[i] = cos(angle) * c.x[i] - sin(angle) * c.x[i + 1];
                want[i + 1] = sin(angle) * c.x[i] + cos(angle) * c.x[i + 1];
            }
    snprintf(name, sizeof name, "rope B=%d T=%d heads=%d D=%d ld=%d forward", B, T, nheads, D, c.ld);
    check_forward(name, y, want, n);
    bool untouched = true;
    for (int row = 0; row < B * T; row++)
        for (int j = nheads * D; j < c.ld; j++)
            untouched &= y[(size_t)row * c.ld + j] == c.x[(size_t)row * c.ld + j];
    check(untouched, "rope forward leaves the columns past the heads untouched");

    /* backward(forward(x)) = x: the rotation is orthogonal */
    tlm_rope_backward(be, y, c.cos, c.sin, B, T, nheads, D, c.ld, F32);
    double diff = max_abs_diff(y, c.x, n);
    check(diff < 1e-5, "rope backward(forward(x)) = x: max abs diff %.2e", diff);

    float *grad = copy_of(c.R, n);
    tlm_rope_backward(be, grad, c.cos, c.sin, B, T, nheads, D, c.ld, F32);
    snprintf(name, sizeof name, "rope B=%d T=%d heads=%d D=%d ld=%d dx", B, T, nheads, D, c.ld);
    check_grad(name, rope_objective, &c, c.x, grad, B * T, c.ld, 0, c.ld, 1e-2f);
    free(want);
}

/* ---- attention --------------------------------------------------------------------------- */

typedef struct {
    float *out, *probs, *qkv, *R; /* qkv (N, 3C): q | k | v, row stride ld = 3C */
    int B, T, H, D;
} attention_ctx;

static double attention_objective(void *p) {
    attention_ctx *c = p;
    int C = c->H * c->D;
    tlm_attention_forward(be, c->out, c->probs, c->qkv, c->qkv + C, c->qkv + 2 * C, 3 * C,
                               c->B, c->T, c->H, c->D, tlm_precision_of_dtype(F32));
    return dot(c->out, c->R, (size_t)c->B * c->T * C);
}

static void test_attention(int B, int T, int H, int D) {
    char name[80];
    int C = H * D, ld = 3 * C, N = B * T;
    attention_ctx c = {.B = B, .T = T, .H = H, .D = D};
    c.qkv = randn((size_t)N * ld, 1.0f);
    c.R = randn((size_t)N * C, 1.0f);
    c.out = alloc_floats((size_t)N * C);
    size_t nprobs = (size_t)B * H * T * T;
    c.probs = alloc_floats(nprobs);
    const float *q = c.qkv, *k = c.qkv + C, *v = c.qkv + 2 * C;

    poison(c.out, (size_t)N * C);
    poison(c.probs, nprobs);
    attention_objective(&c);

    /* reference: softmax over j <= i of q.k / sqrt(D), then P v; in double */
    double *want_out = calloc((size_t)N * C, sizeof(double));
    double *want_p = calloc(nprobs, sizeof(double));
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int i = 0; i < T; i++) {
                double *P = want_p + (((size_t)b * H + h) * T + i) * T;
                double max = -INFINITY, sum = 0.0;
                for (int j = 0; j <= i; j++) {
                    double s = 0.0;
                    for (int d = 0; d < D; d++)
                        s += (double)q[(size_t)(b * T + i) * ld + h * D + d] *
                             k[(size_t)(b * T + j) * ld + h * D + d];
                    P[j] = s / sqrt((double)D);
                    max = fmax(max, P[j]);
                }
                for (int j = 0; j <= i; j++) sum += (P[j] = exp(P[j] - max));
                for (int j = 0; j <= i; j++) P[j] /= sum;
                for (int d = 0; d < D; d++) {
                    double o = 0.0;
                    for (int j = 0; j <= i; j++) o += P[j] * v[(size_t)(b * T + j) * ld + h * D + d];
                    want_out[(size_t)(b * T + i) * C + h * D + d] = o;
                }
            }
    snprintf(name, sizeof name, "attention B=%d T=%d H=%d D=%d ld=%d forward out", B, T, H, D, ld);
    check_forward(name, c.out, want_out, (size_t)N * C);
    snprintf(name, sizeof name, "attention B=%d T=%d H=%d D=%d forward probs", B, T, H, D);
    check_forward(name, c.probs, want_p, nprobs);
    bool masked = true;
    for (size_t bh = 0; bh < (size_t)B * H; bh++)
        for (int i = 0; i < T; i++)
            for (int j = i + 1; j < T; j++) masked &= c.probs[(bh * T + i) * T + j] == 0.0f;
    check(masked, "attention T=%d probs are exactly 0 above the diagonal (causal mask)", T);

    float *dqkv = alloc_floats((size_t)N * ld), *dprobs = alloc_floats(nprobs);
    poison(dqkv, (size_t)N * ld);
    poison(dprobs, nprobs);
    tlm_attention_backward(be, dqkv, dqkv + C, dqkv + 2 * C, dprobs, c.R, q, k, v, c.probs,
                                ld, B, T, H, D, tlm_precision_of_dtype(F32));
    check(all_finite(dqkv, (size_t)N * ld), "attention T=%d backward writes every dq, dk, dv", T);
    const char *part[3] = {"dq", "dk", "dv"};
    for (int s = 0; s < 3; s++) {
        snprintf(name, sizeof name, "attention B=%d T=%d H=%d D=%d %s", B, T, H, D, part[s]);
        check_grad(name, attention_objective, &c, c.qkv, dqkv, N, ld, s * C, (s + 1) * C, 1e-3f);
    }
    free(want_out);
    free(want_p);
}

/* ---- SwiGLU ------------------------------------------------------------------------------ */

typedef struct {
    float *out, *ab, *R;
    int N, F;
} swiglu_ctx;

static double swiglu_objective(void *p) {
    swiglu_ctx *c = p;
    tlm_swiglu_forward(be, c->out, c->ab, c->N, c->F, F32);
    return dot(c->out, c->R, (size_t)c->N * c->F);
}

static void test_swiglu(int N, int F) {
    char name[64];
    swiglu_ctx c = {.N = N, .F = F};
    c.ab = randn((size_t)N * 2 * F, 2.0f);
    c.R = randn((size_t)N * F, 1.0f);
    c.out = alloc_floats((size_t)N * F);
    poison(c.out, (size_t)N * F);
    swiglu_objective(&c);
    double *want = malloc((size_t)N * F * sizeof(double));
    for (int n = 0; n < N; n++)
        for (int j = 0; j < F; j++) {
            double a = c.ab[(size_t)n * 2 * F + j], b = c.ab[(size_t)n * 2 * F + F + j];
            want[(size_t)n * F + j] = a / (1.0 + exp(-a)) * b;
        }
    snprintf(name, sizeof name, "swiglu N=%d F=%d forward", N, F);
    check_forward(name, c.out, want, (size_t)N * F);

    float *dab = alloc_floats((size_t)N * 2 * F);
    poison(dab, (size_t)N * 2 * F);
    tlm_swiglu_backward(be, dab, c.R, c.ab, N, F, F32);
    check(all_finite(dab, (size_t)N * 2 * F), "swiglu N=%d F=%d backward writes every dab", N, F);
    snprintf(name, sizeof name, "swiglu N=%d F=%d da", N, F);
    check_grad(name, swiglu_objective, &c, c.ab, dab, N, 2 * F, 0, F, 1e-3f);
    snprintf(name, sizeof name, "swiglu N=%d F=%d db", N, F);
    check_grad(name, swiglu_objective, &c, c.ab, dab, N, 2 * F, F, 2 * F, 1e-3f);
    free(want);
}

/* ---- ReLU (the ToyModel's) --------------------------------------------------------------- */

typedef struct {
    float *out, *x, *R;
    size_t n;
} relu_ctx;

static double relu_objective(void *p) {
    relu_ctx *c = p;
    tlm_relu_forward(be, c->out, c->x, c->n, F32);
    return dot(c->out, c->R, c->n);
}

static void test_relu(size_t n) {
    char name[64];
    relu_ctx c = {.n = n};
    c.x = randn(n, 1.0f);
    for (size_t i = 0; i < n; i++) /* away from the kink, so that x +- eps keeps its sign */
        if (fabsf(c.x[i]) < 0.05f) c.x[i] = c.x[i] < 0 ? -0.05f - c.x[i] : 0.05f + c.x[i];
    c.R = randn(n, 1.0f);
    c.out = alloc_floats(n);
    poison(c.out, n);
    relu_objective(&c);
    size_t wrong = 0;
    for (size_t i = 0; i < n; i++) wrong += c.out[i] != (c.x[i] > 0.0f ? c.x[i] : 0.0f);
    check(wrong == 0, "relu n=%zu forward: out = max(x, 0) exactly (%zu wrong)", n, wrong);

    float *dx = alloc_floats(n);
    poison(dx, n);
    tlm_relu_backward(be, dx, c.R, c.x, n, F32);
    wrong = 0;
    for (size_t i = 0; i < n; i++) wrong += dx[i] != (c.x[i] > 0.0f ? c.R[i] : 0.0f);
    check(wrong == 0, "relu n=%zu backward: dx = dout where x > 0, else 0, exactly (%zu wrong)", n, wrong);
    snprintf(name, sizeof name, "relu n=%zu dx", n);
    check_grad(name, relu_objective, &c, c.x, dx, 1, (int)n, 0, (int)n, 1e-3f);

    /* in place, and NaN: relu(NaN) = NaN, relu(-0) keeps x; backward at x = 0 gives 0 */
    float *y = copy_of(c.x, n);
    y[0] = NAN, y[n - 1] = 0.0f;
    float *y0 = copy_of(y, n);
    tlm_relu_forward(be, y, y, n, F32);
    bool same = isnan(y[0]) && y[n - 1] == 0.0f;
    for (size_t i = 1; i + 1 < n; i++) same &= y[i] == (y0[i] > 0.0f ? y0[i] : 0.0f);
    float *g = copy_of(c.R, n);
    tlm_relu_backward(be, g, g, y0, n, F32);
    same &= g[n - 1] == 0.0f && g[0] == c.R[0]; /* NaN x passes dout (PyTorch's threshold_backward) */
    check(same, "relu n=%zu in place (out == x, dx == dout); relu(NaN) = NaN; gradient 0 at x = 0", n);
}

/* ---- LayerNorm (the ToyModel's) ---------------------------------------------------------- */

typedef struct {
    float *out, *mean, *rstd, *x, *w, *b, *R;
    int N, C;
    float eps;
} layernorm_ctx;

static double layernorm_objective(void *p) {
    layernorm_ctx *c = p;
    tlm_layernorm_forward(be, c->out, c->mean, c->rstd, c->x, c->w, c->b, c->N, c->C, c->eps, F32);
    return dot(c->out, c->R, (size_t)c->N * c->C);
}

static void test_layernorm(int N, int C) {
    char name[80];
    size_t NC = (size_t)N * C;
    layernorm_ctx c = {.N = N, .C = C, .eps = 1e-5f};
    c.x = randn(NC, 1.0f);
    for (size_t i = 0; i < NC; i++) c.x[i] += 0.5f; /* a nonzero mean */
    c.w = randn(C, 0.3f);
    for (int j = 0; j < C; j++) c.w[j] += 1.0f;
    c.b = randn(C, 0.3f);
    c.R = randn(NC, 1.0f);
    c.out = alloc_floats(NC);
    c.mean = alloc_floats(N);
    c.rstd = alloc_floats(N);
    poison(c.out, NC);
    poison(c.mean, N);
    poison(c.rstd, N);
    layernorm_objective(&c);
    double *want = malloc(NC * sizeof(double)), *want_mean = malloc(N * sizeof(double)),
           *want_rstd = malloc(N * sizeof(double));
    for (int n = 0; n < N; n++) {
        double s = 0.0, ss = 0.0;
        for (int j = 0; j < C; j++) s += c.x[n * C + j];
        want_mean[n] = s / C;
        for (int j = 0; j < C; j++) ss += (c.x[n * C + j] - want_mean[n]) * (c.x[n * C + j] - want_mean[n]);
        want_rstd[n] = 1.0 / sqrt(ss / C + c.eps);
        for (int j = 0; j < C; j++)
            want[n * C + j] = (c.x[n * C + j] - want_mean[n]) * want_rstd[n] * c.w[j] + c.b[j];
    }
    snprintf(name, sizeof name, "layernorm N=%d C=%d forward out", N, C);
    check_forward(name, c.out, want, NC);
    snprintf(name, sizeof name, "layernorm N=%d C=%d forward mean", N, C);
    check_forward(name, c.mean, want_mean, N);
    snprintf(name, sizeof name, "layernorm N=%d C=%d forward rstd", N, C);
    check_forward(name, c.rstd, want_rstd, N);

    float *dx = alloc_floats(NC), *dw = alloc_floats(C), *db = alloc_floats(C);
    poison(dx, NC);
    poison(dw, C);
    poison(db, C);
    tlm_layernorm_backward(be, dx, dw, db, c.R, c.x, c.w, c.mean, c.rstd, N, C, F32);
    check(all_finite(dx, NC) && all_finite(dw, C) && all_finite(db, C),
          "layernorm N=%d C=%d backward writes every dx, dw, db", N, C);
    snprintf(name, sizeof name, "layernorm N=%d C=%d dx", N, C);
    check_grad(name, layernorm_objective, &c, c.x, dx, 1, (int)NC, 0, (int)NC, 1e-3f);
    snprintf(name, sizeof name, "layernorm N=%d C=%d dw", N, C);
    check_grad(name, layernorm_objective, &c, c.w, dw, 1, C, 0, C, 1e-3f);
    snprintf(name, sizeof name, "layernorm N=%d C=%d db", N, C);
    check_grad(name, layernorm_objective, &c, c.b, db, 1, C, 0, C, 1e-3f);
    free(want);
    free(want_mean);
    free(want_rstd);
}

/* ---- matmul with the residual folded in -------------------------------------------------- */

/* y = residual + x W^T (float32): the residual connection of the old residual_forward, now
 * inside the GEMM; y may be the residual (the residual stream updated in place). */
static void test_matmul_residual(int N, int in, int out) {
    size_t ny = (size_t)N * out;
    float *x = randn((size_t)N * in, 1.0f), *w = randn((size_t)out * in, 0.5f);
    float *res = randn(ny, 1.0f), *res0 = copy_of(res, ny);
    float *y = alloc_floats(ny), *plain = alloc_floats(ny);
    poison(y, ny);
    tlm_matmul_forward(be, y, res, x, w, N, in, out, tlm_precision_of_dtype(F32));
    double *want = malloc(ny * sizeof(double));
    for (int n = 0; n < N; n++)
        for (int o = 0; o < out; o++) {
            double s = res[(size_t)n * out + o];
            for (int i = 0; i < in; i++) s += (double)x[(size_t)n * in + i] * w[(size_t)o * in + i];
            want[(size_t)n * out + o] = s;
        }
    char name[96];
    snprintf(name, sizeof name, "matmul N=%d in=%d out=%d forward y = residual + x W^T", N, in,
             out);
    check_forward(name, y, want, ny);
    check(max_abs_diff(res, res0, ny) == 0.0, "matmul N=%d in=%d out=%d: residual unchanged", N,
          in, out);

    /* the same as the plain GEMM's output added to the residual, to fp32 rounding */
    tlm_matmul_forward(be, plain, NULL, x, w, N, in, out, tlm_precision_of_dtype(F32));
    for (size_t i = 0; i < ny; i++) want[i] = (double)res[i] + plain[i];
    double err = rel_error(y, want, ny);
    check(err < 1e-6, "matmul N=%d in=%d out=%d: residual + x W^T vs residual + (x W^T, no "
          "residual): error %.2e", N, in, out, err);

    float *acc = copy_of(res, ny);
    tlm_matmul_forward(be, acc, acc, x, w, N, in, out, tlm_precision_of_dtype(F32));
    check(max_abs_diff(acc, y, ny) == 0.0,
          "matmul N=%d in=%d out=%d with residual in place (y == residual): same bits", N, in, out);
    free(want);
}

/* ---- cross-entropy ----------------------------------------------------------------------- */

typedef struct {
    float *losses, *lse, *logits;
    int32_t *targets;
    int N, V;
} cross_entropy_ctx;

static double cross_entropy_mean_loss(void *p) {
    cross_entropy_ctx *c = p;
    tlm_cross_entropy_forward(be, c->losses, c->lse, c->logits, c->targets, c->N, c->V, F32);
    double sum = 0.0;
    for (int n = 0; n < c->N; n++) sum += c->losses[n];
    return sum / c->N;
}

static void test_cross_entropy(int N, int V) {
    char name[64];
    size_t NV = (size_t)N * V;
    cross_entropy_ctx c = {.N = N, .V = V};
    c.logits = randn(NV, 3.0f);
    c.targets = random_ids(N, V);
    c.targets[0] = V - 1;
    c.losses = alloc_floats(N);
    c.lse = alloc_floats(N);

    poison(c.losses, N);
    poison(c.lse, N);
    cross_entropy_mean_loss(&c);
    double *want_loss = malloc(N * sizeof(double)), *want_lse = malloc(N * sizeof(double));
    for (int n = 0; n < N; n++) {
        const float *l = c.logits + (size_t)n * V;
        double max = l[0], sum = 0.0;
        for (int j = 1; j < V; j++) max = fmax(max, l[j]);
        for (int j = 0; j < V; j++) sum += exp(l[j] - max);
        want_lse[n] = max + log(sum);
        want_loss[n] = want_lse[n] - l[c.targets[n]];
    }
    snprintf(name, sizeof name, "cross_entropy N=%d V=%d forward losses", N, V);
    check_forward(name, c.losses, want_loss, N);
    snprintf(name, sizeof name, "cross_entropy N=%d V=%d forward logsumexp", N, V);
    check_forward(name, c.lse, want_lse, N);

    float *dlogits = alloc_floats(NV);
    poison(dlogits, NV);
    tlm_cross_entropy_backward(be, dlogits, c.logits, c.lse, c.targets, N, V, 1.0f / N, F32);
    check(all_finite(dlogits, NV), "cross_entropy N=%d V=%d backward writes every dlogits", N, V);
    snprintf(name, sizeof name, "cross_entropy N=%d V=%d dlogits of the mean loss", N, V);
    check_grad(name, cross_entropy_mean_loss, &c, c.logits, dlogits, 1, (int)NV, 0, (int)NV, 1e-2f);
    cross_entropy_mean_loss(&c); /* losses and lse of the unperturbed logits again */

    /* in place: dlogits == logits gives the same result */
    float *inplace = copy_of(c.logits, NV);
    tlm_cross_entropy_backward(be, inplace, inplace, c.lse, c.targets, N, V, 1.0f / N, F32);
    check(max_abs_diff(inplace, dlogits, NV) == 0.0,
          "cross_entropy N=%d V=%d backward in place (dlogits == logits): same result", N, V);

    /* stability: logits shifted by +-100 (exp overflows/underflows unless max-subtracted) give
     * the same loss and gradient */
    float *shifted = copy_of(c.logits, NV), *ls = alloc_floats(N), *lses = alloc_floats(N);
    for (int n = 0; n < N; n++)
        for (int j = 0; j < V; j++) shifted[(size_t)n * V + j] += n % 2 ? 100.0f : -100.0f;
    tlm_cross_entropy_forward(be, ls, lses, shifted, c.targets, N, V, F32);
    tlm_cross_entropy_backward(be, shifted, shifted, lses, c.targets, N, V, 1.0f / N, F32);
    double dl = max_abs_diff(ls, c.losses, N), dg = max_abs_diff(shifted, dlogits, NV);
    check(all_finite(ls, N) && dl < 1e-4 && all_finite(shifted, NV) && dg < 1e-5,
          "cross_entropy logits shifted by +-100: loss diff %.2e, gradient diff %.2e", dl, dg);
    free(want_loss);
    free(want_lse);
}

/* ---- AdamW ------------------------------------------------------------------------------- */

/* One CS336 AdamW step in double; decay_first = true is a deliberately wrong variant (decay
 * applied to the parameters before the update) that the check must tell apart. */
static void adamw_reference(double *p, double *m, double *v, const float *g, size_t n, double lr,
                            double b1, double b2, double eps, double wd, int t, bool decay_first) {
    double a_t = lr * sqrt(1.0 - pow(b2, t)) / (1.0 - pow(b1, t));
    for (size_t i = 0; i < n; i++) {
        m[i] = b1 * m[i] + (1.0 - b1) * g[i];
        v[i] = b2 * v[i] + (1.0 - b2) * g[i] * g[i];
        if (decay_first) p[i] -= lr * wd * p[i];
        p[i] -= a_t * m[i] / (sqrt(v[i]) + eps);
        if (!decay_first) p[i] -= lr * wd * p[i];
    }
}

static void test_adamw(size_t n) {
    const float lr = 0.05f, b1 = 0.9f, b2 = 0.999f, eps = 1e-8f, wd = 0.5f;
    float *p = randn(n, 1.0f), *m = alloc_floats(n), *v = alloc_floats(n);
    memset(m, 0, n * sizeof(float));
    memset(v, 0, n * sizeof(float));
    double *rp = malloc(n * sizeof(double)), *rm = calloc(n, sizeof(double)),
           *rv = calloc(n, sizeof(double));
    double *wp = malloc(n * sizeof(double)), *wm = calloc(n, sizeof(double)),
           *wv = calloc(n, sizeof(double));
    for (size_t i = 0; i < n; i++) rp[i] = wp[i] = p[i];
    for (int t = 1; t <= 3; t++) {
        float *g = randn(n, 1.0f);
        tlm_adamw_step(be, p, g, 1.0f, m, v, n, lr, b1, b2, eps, wd, t, NULL, F32);
        adamw_reference(rp, rm, rv, g, n, lr, b1, b2, eps, wd, t, false);
        adamw_reference(wp, wm, wv, g, n, lr, b1, b2, eps, wd, t, true);
        double ep = rel_error(p, rp, n), em = rel_error(m, rm, n), ev = rel_error(v, rv, n);
        double wrong = rel_error(p, wp, n);
        check(ep < FWD_TOL && em < FWD_TOL && ev < FWD_TOL && wrong > FWD_TOL,
              "adamw n=%zu step %d vs double: params %.2e, m %.2e, v %.2e "
              "(decay before the update gives %.2e)", n, t, ep, em, ev, wrong);
    }
    free(rp), free(rm), free(rv), free(wp), free(wm), free(wv);

    /* grad_scale (gradient clipping's factor) = the step on gradients multiplied beforehand, bit for bit */
    const float s = 0.3f;
    float *g = randn(n, 1.0f), *gs = alloc_floats(n), *p2 = alloc_floats(n), *m2 = alloc_floats(n),
          *v2 = alloc_floats(n);
    for (size_t i = 0; i < n; i++) gs[i] = g[i] * s;
    memcpy(p2, p, n * sizeof(float));
    memcpy(m2, m, n * sizeof(float));
    memcpy(v2, v, n * sizeof(float));
    tlm_adamw_step(be, p, g, s, m, v, n, lr, b1, b2, eps, wd, 4, NULL, F32);
    tlm_adamw_step(be, p2, gs, 1.0f, m2, v2, n, lr, b1, b2, eps, wd, 4, NULL, F32);
    check(memcmp(p, p2, n * sizeof(float)) == 0 && memcmp(m, m2, n * sizeof(float)) == 0 &&
              memcmp(v, v2, n * sizeof(float)) == 0,
          "adamw n=%zu grad_scale %.1f: the same bits as the step on gradients multiplied first", n, (double)s);
}

/* ---- bf16 / fp16 --------------------------------------------------------------------------
 * Each op taking dt runs in bf16 and fp16 on dt inputs, and in fp32 on the same values (the
 * inputs rounded to dt, widened exactly): the fp32 op is the reference.
 *
 * Tolerance (normalized error ||got - want|| / ||want|| against that fp32 op): an op that
 * computes in fp32 and rounds its output once to dt is off by at most the unit roundoff
 * u = 2^-8 = 3.9e-3 (bf16, 8 significant bits) or 2^-11 = 4.9e-4 (fp16, 11 bits) per element,
 * under u/2 in the norm (measured 0.35-0.5 u). Attention also rounds its intermediates (S
 * and P; dP and dS in the backward), each adding about that much, and the softmax turns an
 * absolute error u|S| of a score into a relative error of its probability: measured up to
 * 1.15 u (bf16 4.4e-3, fp16 5.0e-4). BF16_TOL = 1e-2 (2.6 u) and FP16_TOL = 2e-3 (4 u) bound
 * all of them with room; an op that rounded to the other 16-bit format, read a dt input as
 * the wrong format or left an output unwritten misses them by orders of magnitude.
 * Where the rounds are, is checked exactly instead: an op that is "fp32 arithmetic, then one
 * rounding" has every dt output element within 1 ulp of dt of the fp32 op's output rounded
 * to dt (1 ulp, not 0: the two runs may sum in a different order, and a sum near a rounding
 * tie can round either way; measured: 0), and its float32 outputs equal the fp32 op's to
 * 1e-6 (measured: equal); attention is checked against a double-precision reference that
 * rounds at the same points. */
#define BF16_TOL 1e-2
#define FP16_TOL 2e-3
#define SAME_F32_TOL 1e-6

static double lowp_tol(tlm_dtype dt) { return dt == TLM_DTYPE_BF16 ? BF16_TOL : FP16_TOL; }

/* A dt output of an op against the fp32 op's output on the same inputs; with `exact`, also
 * within 1 ulp of dt of its rounding. */
static void check_lowp(const char *what, const void *got, const float *want, size_t n,
                       tlm_dtype dt, bool exact) {
    float *g = alloc_floats(n);
    for (size_t i = 0; i < n; i++) g[i] = get_dt(got, i, dt);
    double err = tlm_rel_error_f32(g, want, n);
    long ulps = max_ulps(got, want, n, dt);
    bool finite = all_finite(g, n);
    char exactness[64] = "";
    if (exact) snprintf(exactness, sizeof exactness, "; <= %ld ulp from round(fp32 op)", ulps);
    check(finite && err < lowp_tol(dt) && (!exact || ulps <= 1),
          "%s %s: vs the fp32 op on the same inputs: error %.2e (tol %.0e)%s%s", dt_name(dt),
          what, err, lowp_tol(dt), exactness,
          finite ? "" : " (NaN left: not every element written)");
    tlm_free(be, g);
}

/* A float32 output of a dt op: the same fp32 arithmetic as the fp32 op on the same inputs */
static void check_lowp_f32(const char *what, const float *got, const float *want, size_t n,
                           tlm_dtype dt) {
    double err = tlm_rel_error_f32(got, want, n);
    check(all_finite(got, n) && err < SAME_F32_TOL,
          "%s %s (float32): vs the fp32 op on the same inputs: error %.2e", dt_name(dt), what, err);
}

static void test_cast(size_t n, tlm_dtype dt) {
    /* normal values spread over 2^-30 .. 2^20 (fp16 subnormals, underflow and overflow), and
     * the special cases first */
    static const float special[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, -NAN, 65504.0f,
                                    65519.0f, 65520.0f, -1e5f, 0x1p-24f, 0x1p-25f, 0x1.8p-24f,
                                    0x1p-14f, 0x1.ffcp-15f, FLT_MAX, 0x1.01p0f, 0x1.03p0f,
                                    0x1.002p0f, 0x1.006p0f, 0x1p-149f, 0x1p-133f, 1.0f / 3.0f};
    const size_t ns = sizeof special / sizeof special[0];
    TLM_ASSERT(n >= ns);
    float *src = randn(n, 1.0f);
    for (size_t i = 0; i < n; i++) src[i] = ldexpf(src[i], (int)tlm_rng_below(&rng, 51) - 30);
    memcpy(src, special, sizeof special);
    float *src0 = copy_of(src, n);
    void *dst = alloc_dt(n, dt);
    tlm_cast(be, dst, src, n, dt);
    bool unchanged = memcmp(src, src0, n * sizeof(float)) == 0;
    if (dt == F32) {
        check(unchanged && memcmp(dst, src, n * sizeof(float)) == 0,
              "cast n=%zu fp32: a bitwise copy (inf, NaN, subnormals included)", n);
        tlm_cast(be, src, src, n, F32);
        check(memcmp(src, src0, n * sizeof(float)) == 0, "cast n=%zu fp32 onto itself: unchanged",
              n);
        return;
    }
    size_t wrong = 0, nan_kept = 0, nans = 0;
    for (size_t i = 0; i < n; i++) {
        uint16_t got = ((const uint16_t *)dst)[i];
        float back = widen16(got, dt), want = round_to(src[i], dt);
        if (isnan(src[i])) {
            nans++;
            nan_kept += isnan(back) && !signbit(back) == !signbit(src[i]);
        } else if (got != narrow16(src[i], dt) || tlm_f32_bits(back) != tlm_f32_bits(want)) {
            wrong++;
        }
    }
    check(unchanged && wrong == 0 && nan_kept == nans,
          "cast n=%zu %s: widen(cast(x)) = the rounding of x, bit for bit (%zu wrong; NaN kept "
          "%zu of %zu; +-0, +-inf, ties, subnormals, overflow included)", n, dt_name(dt), wrong,
          nan_kept, nans);
}

/* grad_unscale's count of non-finite elements (found_inf is host memory on the CPU backend) */
static size_t unscale(float *g, size_t n, float inv_scale) {
    float found_inf = 0;
    tlm_grad_unscale(be, g, n, inv_scale, &found_inf);
    return (size_t)found_inf;
}

static void test_grad_unscale(size_t n) {
    /* gradients of a loss scaled by 2^16: unscaling by 2^-16 is exact */
    float *g = randn(n, 1.0f);
    for (size_t i = 0; i < n; i++) g[i] = ldexpf(g[i], 16);
    float *g0 = copy_of(g, n);
    size_t bad = unscale(g, n, 0x1p-16f);
    bool exact = true;
    for (size_t i = 0; i < n; i++) exact &= g[i] == ldexpf(g0[i], -16);
    check(bad == 0 && exact, "grad_unscale n=%zu by 2^-16: exact, 0 non-finite (got %zu)", n, bad);

    /* inf, -inf and NaN injected: counted; the other elements still scaled exactly */
    memcpy(g, g0, n * sizeof(float));
    size_t at[4] = {0, n / 3, n / 2, n - 1};
    g[at[0]] = INFINITY, g[at[1]] = NAN, g[at[2]] = -INFINITY, g[at[3]] = -NAN;
    bad = unscale(g, n, 0x1p-16f);
    exact = isinf(g[at[0]]) && isnan(g[at[1]]) && isinf(g[at[2]]) && isnan(g[at[3]]);
    for (size_t i = 1; i + 1 < n; i++)
        if (i != at[1] && i != at[2]) exact &= g[i] == ldexpf(g0[i], -16);
    check(bad == 4 && exact, "grad_unscale n=%zu: 2 inf and 2 NaN injected: %zu counted, the rest "
          "scaled exactly", n, bad);

    /* finite values that overflow in the multiply count too */
    memcpy(g, g0, n * sizeof(float));
    g[n / 2] = FLT_MAX / 2;
    bad = unscale(g, n, 4.0f);
    check(bad == 1 && isinf(g[n / 2]) && g[0] == 4.0f * g0[0],
          "grad_unscale n=%zu by 4: FLT_MAX/2 overflows to inf and is counted (%zu)", n, bad);
}

/* sum_squares (the gradient norm of clipping): against the float64 sum in index order (the
 * orders differ, so within 1e-12 relative); the same bits with 1 and 4 threads; n = 0 gives 0; a
 * NaN or an inf anywhere (here in the last, scalar-tail element) gives a non-finite sum; FLT_MAX
 * squared stays finite in float64. */
static double sum_squares(const float *x, size_t n) {
    double out = -1.0; /* host memory on the CPU backend */
    tlm_sum_squares(be, &out, x, n);
    return out;
}

static void test_sum_squares(size_t n) {
    float *x = randn(n, 3.0f);
    double want = 0.0;
    for (size_t i = 0; i < n; i++) want += (double)x[i] * x[i];
    const int max_threads = omp_get_max_threads();
    omp_set_num_threads(1);
    const double one = sum_squares(x, n);
    omp_set_num_threads(4);
    const double four = sum_squares(x, n);
    omp_set_num_threads(max_threads);
    check(fabs(one - want) <= 1e-12 * want && memcmp(&one, &four, sizeof one) == 0,
          "sum_squares n=%zu: %.17g, float64 in index order %.17g (rel err %.1e); 4 threads give the same bits",
          n, one, want, fabs(one - want) / want);
    const float keep = x[n - 1];
    x[n - 1] = NAN;
    const double with_nan = sum_squares(x, n);
    x[n - 1] = -INFINITY;
    const double with_inf = sum_squares(x, n);
    x[n - 1] = keep;
    x[n / 2] = FLT_MAX;
    const double with_max = sum_squares(x, n);
    check(isnan(with_nan) && isinf(with_inf) && isfinite(with_max) && with_max >= (double)FLT_MAX * FLT_MAX &&
              sum_squares(x, 0) == 0.0,
          "sum_squares n=%zu: NaN -> %g, -inf -> %g, FLT_MAX -> %g (finite), n = 0 -> 0", n, with_nan, with_inf,
          with_max);
    tlm_free(be, x);
}

/* AdamW with the GEMM copy refreshed in the same pass: params, m, v as without it, and
 * params_lp = round(params) bit for bit */
static void test_adamw_lowp(size_t n, tlm_dtype dt) {
    float *p = randn(n, 1.0f), *m = randn(n, 0.1f), *v = randn(n, 0.1f), *g = randn(n, 1.0f);
    for (size_t i = 0; i < n; i++) v[i] *= v[i];
    float *p2 = copy_of(p, n), *m2 = copy_of(m, n), *v2 = copy_of(v, n);
    void *lp = alloc_dt(n, dt);
    tlm_adamw_step(be, p, g, 1.0f, m, v, n, 0.05f, 0.9f, 0.999f, 1e-8f, 0.5f, 3, lp, dt);
    tlm_adamw_step(be, p2, g, 1.0f, m2, v2, n, 0.05f, 0.9f, 0.999f, 1e-8f, 0.5f, 3, NULL, F32);
    size_t wrong = 0;
    for (size_t i = 0; i < n; i++) wrong += ((uint16_t *)lp)[i] != narrow16(p[i], dt);
    check(memcmp(p, p2, n * sizeof(float)) == 0 && memcmp(m, m2, n * sizeof(float)) == 0 &&
              memcmp(v, v2, n * sizeof(float)) == 0 && wrong == 0,
          "%s adamw n=%zu with params_lp: params, m, v the same bits as without; params_lp = "
          "round(params) bit for bit (%zu wrong)", dt_name(dt), n, wrong);
}

static void test_rmsnorm_lowp(int N, int C, tlm_dtype dt) {
    char name[96];
    size_t NC = (size_t)N * C;
    const float eps = 1e-5f;
    float *x = randn(NC, 1.0f), *w = randn(C, 0.3f);
    for (int j = 0; j < C; j++) w[j] += 1.0f;
    void *out = alloc_dt(NC, dt);
    float *rstd = alloc_floats(N), *out32 = alloc_floats(NC), *rstd32 = alloc_floats(N);
    poison(rstd, N);
    tlm_rmsnorm_forward(be, out, rstd, x, w, N, C, eps, dt);
    tlm_rmsnorm_forward(be, out32, rstd32, x, w, N, C, eps, F32);
    snprintf(name, sizeof name, "rmsnorm N=%d C=%d forward out", N, C);
    check_lowp(name, out, out32, NC, dt, true);
    snprintf(name, sizeof name, "rmsnorm N=%d C=%d forward rstd", N, C);
    check_lowp_f32(name, rstd, rstd32, N, dt);

    float *R = randn(NC, 1.0f), *dx0 = randn(NC, 1.0f);
    void *dout = to_dt(R, NC, dt);
    float *dout32 = rounded(R, NC, dt);
    float *dx = copy_of(dx0, NC), *dx32 = copy_of(dx0, NC), *dw = alloc_floats(C),
          *dw32 = alloc_floats(C);
    poison(dw, C);
    tlm_rmsnorm_backward(be, dx, dw, dout, x, w, rstd32, N, C, NULL, dt);
    tlm_rmsnorm_backward(be, dx32, dw32, dout32, x, w, rstd32, N, C, NULL, F32);
    snprintf(name, sizeof name, "rmsnorm N=%d C=%d backward dx (+=, dout in dt)", N, C);
    check_lowp_f32(name, dx, dx32, NC, dt);
    snprintf(name, sizeof name, "rmsnorm N=%d C=%d backward dw", N, C);
    check_lowp_f32(name, dw, dw32, C, dt);

    /* with dx_lp: dx and dw the same bits as without, dx_lp = round(dx) bit for bit */
    float *dx2 = copy_of(dx0, NC), *dw2 = alloc_floats(C);
    void *dx_lp = alloc_dt(NC, dt);
    tlm_rmsnorm_backward(be, dx2, dw2, dout, x, w, rstd32, N, C, dx_lp, dt);
    size_t wrong = 0;
    for (size_t i = 0; i < NC; i++) wrong += ((uint16_t *)dx_lp)[i] != narrow16(dx2[i], dt);
    check(memcmp(dx2, dx, NC * sizeof(float)) == 0 && memcmp(dw2, dw, C * sizeof(float)) == 0 && wrong == 0,
          "%s rmsnorm N=%d C=%d backward with dx_lp: dx, dw the same bits as without; dx_lp = round(dx) bit "
          "for bit (%zu wrong)", dt_name(dt), N, C, wrong);
}

static void test_matmul_lowp(int N, int in, int out, tlm_dtype dt) {
    char name[96];
    size_t nx = (size_t)N * in, nw = (size_t)out * in, ny = (size_t)N * out;
    float *x0 = randn(nx, 1.0f), *w0 = randn(nw, 0.5f);
    void *x = to_dt(x0, nx, dt), *w = to_dt(w0, nw, dt);
    float *x32 = rounded(x0, nx, dt), *w32 = rounded(w0, nw, dt);

    void *y = alloc_dt(ny, dt);
    float *y32 = alloc_floats(ny);
    tlm_matmul_forward(be, y, NULL, x, w, N, in, out, tlm_precision_of_dtype(dt));
    tlm_matmul_forward(be, y32, NULL, x32, w32, N, in, out, tlm_precision_of_dtype(F32));
    snprintf(name, sizeof name, "matmul N=%d in=%d out=%d forward y = x W^T", N, in, out);
    check_lowp(name, y, y32, ny, dt, true);

    /* with the residual: y float32 = residual + x W^T, the GEMM's fp32 result not rounded */
    float *res = randn(ny, 1.0f), *yr = alloc_floats(ny), *yr32 = alloc_floats(ny);
    poison(yr, ny);
    tlm_matmul_forward(be, yr, res, x, w, N, in, out, tlm_precision_of_dtype(dt));
    tlm_matmul_forward(be, yr32, res, x32, w32, N, in, out, tlm_precision_of_dtype(F32));
    snprintf(name, sizeof name, "matmul N=%d in=%d out=%d forward y = residual + x W^T", N, in,
             out);
    check_lowp_f32(name, yr, yr32, ny, dt);
    float *acc = copy_of(res, ny);
    tlm_matmul_forward(be, acc, acc, x, w, N, in, out, tlm_precision_of_dtype(dt));
    check(max_abs_diff(acc, yr, ny) == 0.0,
          "%s matmul N=%d in=%d out=%d with residual in place (y == residual): same bits",
          dt_name(dt), N, in, out);

    float *dy0 = randn(ny, 1.0f);
    void *dy = to_dt(dy0, ny, dt), *dx = alloc_dt(nx, dt);
    float *dy32 = rounded(dy0, ny, dt), *dx32 = alloc_floats(nx), *dw = alloc_floats(nw),
          *dw32 = alloc_floats(nw), *dw2 = alloc_floats(nw);
    poison(dw, nw);
    poison(dw2, nw);
    tlm_matmul_backward(be, dx, dw, TLM_DTYPE_F32, dy, x, w, N, in, out, tlm_precision_of_dtype(dt));
    tlm_matmul_backward(be, dx32, dw32, TLM_DTYPE_F32, dy32, x32, w32, N, in, out, tlm_precision_of_dtype(F32));
    snprintf(name, sizeof name, "matmul N=%d in=%d out=%d backward dx", N, in, out);
    check_lowp(name, dx, dx32, nx, dt, true);
    snprintf(name, sizeof name, "matmul N=%d in=%d out=%d backward dW", N, in, out);
    check_lowp_f32(name, dw, dw32, nw, dt);
    tlm_matmul_backward(be, NULL, dw2, TLM_DTYPE_F32, dy, x, w, N, in, out, tlm_precision_of_dtype(dt));
    check(max_abs_diff(dw, dw2, nw) == 0.0,
          "%s matmul N=%d in=%d out=%d backward with dx == NULL: same dW", dt_name(dt), N, in, out);
    void *dx2 = alloc_dt(nx, dt);
    tlm_matmul_backward(be, dx2, NULL, TLM_DTYPE_F32, dy, x, w, N, in, out, tlm_precision_of_dtype(dt));
    check(memcmp(dx, dx2, nx * tlm_dtype_size(dt)) == 0,
          "%s matmul N=%d in=%d out=%d backward with dw == NULL: same dx", dt_name(dt), N, in, out);
    if (dt == TLM_DTYPE_BF16) { /* a bf16 dW (ops.def's dw_dt): the fp32 dW rounded once, bit for bit */
        uint16_t *dwb = alloc_dt(nw, dt), *dwb2 = alloc_dt(nw, dt);
        void *dx3 = alloc_dt(nx, dt);
        poison_dt(dwb, nw, dt);
        poison_dt(dwb2, nw, dt);
        tlm_matmul_backward(be, dx3, dwb, TLM_DTYPE_BF16, dy, x, w, N, in, out, tlm_precision_of_dtype(dt));
        tlm_matmul_backward(be, NULL, dwb2, TLM_DTYPE_BF16, dy, x, w, N, in, out, tlm_precision_of_dtype(dt));
        size_t differ = 0;
        for (size_t i = 0; i < nw; i++) differ += dwb[i] != tlm_f32_to_bf16(dw[i]) || dwb2[i] != dwb[i];
        check(differ == 0, "bf16 matmul N=%d in=%d out=%d backward bf16 dW == bf16(fp32 dW) bit for bit (%zu of %zu "
              "differ)", N, in, out, differ, nw);
        check(memcmp(dx, dx3, nx * tlm_dtype_size(dt)) == 0,
              "bf16 matmul N=%d in=%d out=%d backward with a bf16 dW: same dx", N, in, out);
    }
}

static void test_rope_lowp(int B, int T, int nheads, int D, int extra_columns, tlm_dtype dt) {
    char name[96];
    const int half = D / 2, ld = nheads * D + extra_columns;
    size_t n = (size_t)B * T * ld;
    float *ct = alloc_floats((size_t)T * half), *st = alloc_floats((size_t)T * half);
    for (int t = 0; t < T; t++)
        for (int k = 0; k < half; k++) {
            double angle = t * pow(10000.0, -2.0 * k / D);
            ct[t * half + k] = (float)cos(angle);
            st[t * half + k] = (float)sin(angle);
        }
    float *x0 = randn(n, 1.0f);
    void *x = to_dt(x0, n, dt), *xin = to_dt(x0, n, dt);
    float *x32 = rounded(x0, n, dt);
    tlm_rope_forward(be, x, ct, st, B, T, nheads, D, ld, dt);
    tlm_rope_forward(be, x32, ct, st, B, T, nheads, D, ld, F32);
    snprintf(name, sizeof name, "rope B=%d T=%d heads=%d D=%d ld=%d forward (in place)", B, T,
             nheads, D, ld);
    check_lowp(name, x, x32, n, dt, true);
    bool untouched = true;
    for (int row = 0; row < B * T; row++)
        for (int j = nheads * D; j < ld; j++)
            untouched &= ((uint16_t *)x)[(size_t)row * ld + j] ==
                         ((uint16_t *)xin)[(size_t)row * ld + j];
    check(untouched, "%s rope forward leaves the columns past the heads untouched", dt_name(dt));

    float *g0 = randn(n, 1.0f);
    void *g = to_dt(g0, n, dt);
    float *g32 = rounded(g0, n, dt);
    tlm_rope_backward(be, g, ct, st, B, T, nheads, D, ld, dt);
    tlm_rope_backward(be, g32, ct, st, B, T, nheads, D, ld, F32);
    snprintf(name, sizeof name, "rope B=%d T=%d heads=%d D=%d ld=%d backward", B, T, nheads, D, ld);
    check_lowp(name, g, g32, n, dt, true);
}

/* Attention in double with the dt rounding points of backend.h (S, P, out; dv, dP, dS, dq,
 * dk each rounded to dt), on dt inputs given as float32: the op must match it far more
 * closely than it matches the fp32 op, which shows it rounds where the interface says (and
 * so where the CUDA backend must). qkv, dqkv (N, 3C); out, dout (N,C). */
static void attention_rounded_reference(const float *qkv, const float *dout, float *out,
                                        float *dqkv, int B, int T, int H, int D, tlm_dtype dt) {
    const int C = H * D, ld = 3 * C;
    const double scale = 1.0 / sqrt((double)D);
    double *P = malloc((size_t)T * T * sizeof(double));
    double *dS = malloc((size_t)T * T * sizeof(double));
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++) {
#define Q(t, d) qkv[(size_t)(b * T + (t)) * ld + h * D + (d)]
#define K(t, d) qkv[(size_t)(b * T + (t)) * ld + C + h * D + (d)]
#define V(t, d) qkv[(size_t)(b * T + (t)) * ld + 2 * C + h * D + (d)]
#define DO(t, d) dout[(size_t)(b * T + (t)) * C + h * D + (d)]
            for (int i = 0; i < T; i++) {
                double *p = P + (size_t)i * T, max = -INFINITY, sum = 0.0;
                for (int j = 0; j <= i; j++) {
                    double s = 0.0;
                    for (int d = 0; d < D; d++) s += (double)Q(i, d) * K(j, d);
                    p[j] = round_to((float)(s * scale), dt); /* S */
                    max = fmax(max, p[j]);
                }
                for (int j = 0; j <= i; j++) sum += (p[j] = exp(p[j] - max));
                for (int j = 0; j <= i; j++) p[j] = round_to((float)(p[j] / sum), dt); /* P */
                for (int d = 0; d < D; d++) {
                    double o = 0.0;
                    for (int j = 0; j <= i; j++) o += p[j] * V(j, d);
                    out[(size_t)(b * T + i) * C + h * D + d] = round_to((float)o, dt);
                }
                double dot = 0.0; /* dS = P (dP - rowsum(P dP)), dP = dout v^T rounded */
                for (int j = 0; j <= i; j++) {
                    double dp = 0.0;
                    for (int d = 0; d < D; d++) dp += (double)DO(i, d) * V(j, d);
                    dS[(size_t)i * T + j] = round_to((float)dp, dt);
                    dot += p[j] * dS[(size_t)i * T + j];
                }
                for (int j = 0; j <= i; j++) {
                    double *ds = dS + (size_t)i * T + j;
                    *ds = round_to((float)(p[j] * (*ds - (float)dot)), dt);
                }
            }
            for (int t = 0; t < T; t++)
                for (int d = 0; d < D; d++) {
                    double dq = 0.0, dk = 0.0, dv = 0.0;
                    for (int j = 0; j <= t; j++) dq += dS[(size_t)t * T + j] * K(j, d);
                    for (int i = t; i < T; i++) {
                        dk += dS[(size_t)i * T + t] * Q(i, d);
                        dv += P[(size_t)i * T + t] * DO(i, d);
                    }
                    size_t row = (size_t)(b * T + t) * ld + h * D + d;
                    dqkv[row] = round_to((float)(dq * scale), dt);
                    dqkv[row + C] = round_to((float)(dk * scale), dt);
                    dqkv[row + 2 * C] = round_to((float)dv, dt);
                }
#undef Q
#undef K
#undef V
#undef DO
        }
    free(P);
    free(dS);
}

static void test_attention_lowp(int B, int T, int H, int D, tlm_dtype dt) {
    char name[96];
    const int C = H * D, ld = 3 * C, N = B * T;
    const size_t e = tlm_dtype_size(dt), nqkv = (size_t)N * ld, nprobs = (size_t)B * H * T * T;
    float *qkv0 = randn(nqkv, 1.0f);
    char *qkv = to_dt(qkv0, nqkv, dt);
    float *qkv32 = rounded(qkv0, nqkv, dt);
    void *out = alloc_dt((size_t)N * C, dt), *probs = alloc_dt(nprobs, dt);
    float *out32 = alloc_floats((size_t)N * C), *probs32 = alloc_floats(nprobs);
    tlm_attention_forward(be, out, probs, qkv, qkv + C * e, qkv + 2 * C * e, ld, B, T, H, D, tlm_precision_of_dtype(dt));
    tlm_attention_forward(be, out32, probs32, qkv32, qkv32 + C, qkv32 + 2 * C, ld, B, T, H, D, tlm_precision_of_dtype(F32));
    snprintf(name, sizeof name, "attention B=%d T=%d H=%d D=%d forward out", B, T, H, D);
    check_lowp(name, out, out32, (size_t)N * C, dt, false);
    snprintf(name, sizeof name, "attention B=%d T=%d H=%d D=%d forward probs", B, T, H, D);
    check_lowp(name, probs, probs32, nprobs, dt, false);
    bool masked = true;
    double worst_sum = 0.0;
    for (size_t bh = 0; bh < (size_t)B * H; bh++)
        for (int i = 0; i < T; i++) {
            double sum = 0.0;
            for (int j = 0; j < T; j++) {
                size_t idx = (bh * T + i) * T + j;
                if (j > i) masked &= ((uint16_t *)probs)[idx] == 0;
                else sum += get_dt(probs, idx, dt);
            }
            worst_sum = fmax(worst_sum, fabs(sum - 1.0));
        }
    check(masked && worst_sum < 8 * lowp_tol(dt),
          "%s attention T=%d probs: exactly +0 above the diagonal; rows sum to 1 within %.1e",
          dt_name(dt), T, worst_sum);

    float *R = randn((size_t)N * C, 1.0f);
    void *dout = to_dt(R, (size_t)N * C, dt);
    float *dout32 = rounded(R, (size_t)N * C, dt);
    char *dqkv = alloc_dt(nqkv, dt);
    void *dprobs = alloc_dt(nprobs, dt);
    float *dqkv32 = alloc_floats(nqkv), *dprobs32 = alloc_floats(nprobs);
    tlm_attention_backward(be, dqkv, dqkv + C * e, dqkv + 2 * C * e, dprobs, dout, qkv,
                                qkv + C * e, qkv + 2 * C * e, probs, ld, B, T, H, D, tlm_precision_of_dtype(dt));
    tlm_attention_backward(be, dqkv32, dqkv32 + C, dqkv32 + 2 * C, dprobs32, dout32, qkv32,
                                qkv32 + C, qkv32 + 2 * C, probs32, ld, B, T, H, D, tlm_precision_of_dtype(F32));
    const char *part[3] = {"dq", "dk", "dv"};
    for (int s = 0; s < 3; s++) {
        float *got = gather(dqkv, N, ld, s * C, (s + 1) * C, dt);
        float *want = gather(dqkv32, N, ld, s * C, (s + 1) * C, F32);
        void *got_dt = to_dt(got, (size_t)N * C, dt); /* exact: got holds dt values */
        snprintf(name, sizeof name, "attention B=%d T=%d H=%d D=%d backward %s", B, T, H, D,
                 part[s]);
        check_lowp(name, got_dt, want, (size_t)N * C, dt, false);
    }
    snprintf(name, sizeof name, "attention B=%d T=%d H=%d D=%d backward dS (left in dprobs)", B, T,
             H, D);
    check_lowp(name, dprobs, dprobs32, nprobs, dt, false);

    /* against the double-precision reference with the same rounding points */
    float *out_ref = alloc_floats((size_t)N * C), *dqkv_ref = alloc_floats(nqkv);
    attention_rounded_reference(qkv32, dout32, out_ref, dqkv_ref, B, T, H, D, dt);
    float *out_got = gather(out, N, C, 0, C, dt), *dqkv_got = gather(dqkv, N, ld, 0, ld, dt);
    double e_out = tlm_rel_error_f32(out_got, out_ref, (size_t)N * C);
    double e_d = tlm_rel_error_f32(dqkv_got, dqkv_ref, nqkv);
    double f_out = tlm_rel_error_f32(out32, out_ref, (size_t)N * C);
    double f_d = tlm_rel_error_f32(dqkv32, dqkv_ref, nqkv);
    check(e_out < 0.1 * f_out && e_d < 0.1 * f_d,
          "%s attention B=%d T=%d H=%d D=%d vs double with dt rounding of S, P, out, dP, dS, "
          "dq, dk, dv: out error %.2e, dq|dk|dv %.2e (the fp32 op: %.2e, %.2e)", dt_name(dt), B,
          T, H, D, e_out, e_d, f_out, f_d);
}

static void test_swiglu_lowp(int N, int F, tlm_dtype dt) {
    char name[96];
    size_t n2 = (size_t)N * 2 * F, n1 = (size_t)N * F;
    float *ab0 = randn(n2, 2.0f), *R = randn(n1, 1.0f);
    void *ab = to_dt(ab0, n2, dt), *dout = to_dt(R, n1, dt);
    float *ab32 = rounded(ab0, n2, dt), *dout32 = rounded(R, n1, dt);
    void *out = alloc_dt(n1, dt), *dab = alloc_dt(n2, dt);
    float *out32 = alloc_floats(n1), *dab32 = alloc_floats(n2);
    tlm_swiglu_forward(be, out, ab, N, F, dt);
    tlm_swiglu_forward(be, out32, ab32, N, F, F32);
    snprintf(name, sizeof name, "swiglu N=%d F=%d forward", N, F);
    check_lowp(name, out, out32, n1, dt, true);
    tlm_swiglu_backward(be, dab, dout, ab, N, F, dt);
    tlm_swiglu_backward(be, dab32, dout32, ab32, N, F, F32);
    snprintf(name, sizeof name, "swiglu N=%d F=%d backward dab", N, F);
    check_lowp(name, dab, dab32, n2, dt, true);
}

/* matmul_swiglu_backward (d_g's GEMM with SwiGLU's backward, fused on CUDA) against the ops it
 * composes: the same bits on the CPU, in every dtype (N=C=F=0 would be no work; these shapes are
 * small and ragged); ab from the forward's two ops */
static void test_matmul_swiglu(int N, int C, int F, tlm_dtype dt) {
    const tlm_precision pm = dt == F32 ? TLM_PRECISION_FP32 : dt == TLM_DTYPE_BF16 ? TLM_PRECISION_BF16
                                                                                     : TLM_PRECISION_FP16;
    const size_t es = tlm_dtype_size(dt), nab = (size_t)N * 2 * F, ng = (size_t)N * F;
    void *x = randn_dt((size_t)N * C, 1.0f, dt), *w13 = randn_dt((size_t)2 * F * C, 0.2f, dt);
    void *ab = alloc_dt(nab, dt);
    tlm_matmul_forward(be, ab, NULL, x, w13, N, C, 2 * F, pm);
    void *dy = randn_dt((size_t)N * C, 1.0f, dt), *w2 = randn_dt((size_t)C * F, 0.2f, dt);
    void *dab = alloc_dt(nab, dt), *dg = alloc_dt(ng, dt), *dab_ref = alloc_dt(nab, dt), *dg_ref = alloc_dt(ng, dt);
    tlm_matmul_swiglu_backward(be, dab, dg, dy, w2, ab, N, C, F, pm);
    tlm_matmul_backward(be, dg_ref, NULL, TLM_DTYPE_F32, dy, NULL, w2, N, F, C, pm);
    tlm_swiglu_backward(be, dab_ref, dg_ref, ab, N, F, dt);
    check(memcmp(dab, dab_ref, nab * es) == 0 && all_finite_dt(dab, nab, dt),
          "%s matmul_swiglu_backward N=%d C=%d F=%d: dab bit-identical to matmul_backward (dx) + swiglu_backward",
          dt_name(dt), N, C, F);
}

static void test_cross_entropy_lowp(int N, int V, tlm_dtype dt) {
    char name[96];
    size_t NV = (size_t)N * V;
    float *l0 = randn(NV, 3.0f);
    void *logits = to_dt(l0, NV, dt);
    float *logits32 = rounded(l0, NV, dt);
    int32_t *targets = random_ids(N, V);
    float *losses = alloc_floats(N), *lse = alloc_floats(N), *losses32 = alloc_floats(N),
          *lse32 = alloc_floats(N);
    poison(losses, N);
    poison(lse, N);
    tlm_cross_entropy_forward(be, losses, lse, logits, targets, N, V, dt);
    tlm_cross_entropy_forward(be, losses32, lse32, logits32, targets, N, V, F32);
    snprintf(name, sizeof name, "cross_entropy N=%d V=%d forward losses", N, V);
    check_lowp_f32(name, losses, losses32, N, dt);
    snprintf(name, sizeof name, "cross_entropy N=%d V=%d forward logsumexp", N, V);
    check_lowp_f32(name, lse, lse32, N, dt);

    /* the gradient of the mean loss, times a loss scale of 1024 in fp16 (as GradScaler would:
     * without it the small probabilities / N fall below fp16's normal range) */
    float dloss = (dt == TLM_DTYPE_F16 ? 1024.0f : 1.0f) / N;
    void *dlogits = alloc_dt(NV, dt);
    float *dlogits32 = alloc_floats(NV);
    tlm_cross_entropy_backward(be, dlogits, logits, lse32, targets, N, V, dloss, dt);
    tlm_cross_entropy_backward(be, dlogits32, logits32, lse32, targets, N, V, dloss, F32);
    snprintf(name, sizeof name, "cross_entropy N=%d V=%d backward dlogits (dloss %g)", N, V,
             (double)dloss);
    check_lowp(name, dlogits, dlogits32, NV, dt, true);
    tlm_cross_entropy_backward(be, logits, logits, lse32, targets, N, V, dloss, dt);
    check(memcmp(logits, dlogits, NV * tlm_dtype_size(dt)) == 0,
          "%s cross_entropy N=%d V=%d backward in place (dlogits == logits): same bits",
          dt_name(dt), N, V);
}

/* ReLU keeps its dtype and is exact: the dt op's output is the fp32 op's, bit for bit */
static void test_relu_lowp(size_t n, tlm_dtype dt) {
    char name[64];
    float *x0 = randn(n, 1.0f), *R = randn(n, 1.0f);
    void *x = to_dt(x0, n, dt), *dout = to_dt(R, n, dt), *out = alloc_dt(n, dt), *dx = alloc_dt(n, dt);
    float *x32 = rounded(x0, n, dt), *dout32 = rounded(R, n, dt), *out32 = alloc_floats(n), *dx32 = alloc_floats(n);
    tlm_relu_forward(be, out, x, n, dt);
    tlm_relu_forward(be, out32, x32, n, F32);
    snprintf(name, sizeof name, "relu n=%zu forward", n);
    check_lowp(name, out, out32, n, dt, true);
    tlm_relu_backward(be, dx, dout, x, n, dt);
    tlm_relu_backward(be, dx32, dout32, x32, n, F32);
    snprintf(name, sizeof name, "relu n=%zu backward", n);
    check_lowp(name, dx, dx32, n, dt, true);
    void *ref = to_dt(out32, n, dt), *dref = to_dt(dx32, n, dt);
    check(memcmp(out, ref, n * 2) == 0 && memcmp(dx, dref, n * 2) == 0,
          "%s relu n=%zu forward and backward: the fp32 op's results, bit for bit (exact in any dtype)", dt_name(dt),
          n);
}

/* LayerNorm reads x (and dout) in dt, computes in fp32: out, mean, rstd, dw, db (float32) equal the
 * fp32 op's on the same inputs; dx (dt) is its rounding */
static void test_layernorm_lowp(int N, int C, tlm_dtype dt) {
    char name[96];
    size_t NC = (size_t)N * C;
    const float eps = 1e-5f;
    float *x0 = randn(NC, 1.0f), *w = randn(C, 0.3f), *b = randn(C, 0.3f);
    for (int j = 0; j < C; j++) w[j] += 1.0f;
    void *x = to_dt(x0, NC, dt);
    float *x32 = rounded(x0, NC, dt);
    float *out = alloc_floats(NC), *mean = alloc_floats(N), *rstd = alloc_floats(N);
    float *out32 = alloc_floats(NC), *mean32 = alloc_floats(N), *rstd32 = alloc_floats(N);
    poison(out, NC);
    tlm_layernorm_forward(be, out, mean, rstd, x, w, b, N, C, eps, dt);
    tlm_layernorm_forward(be, out32, mean32, rstd32, x32, w, b, N, C, eps, F32);
    snprintf(name, sizeof name, "layernorm N=%d C=%d forward out", N, C);
    check_lowp_f32(name, out, out32, NC, dt);
    snprintf(name, sizeof name, "layernorm N=%d C=%d forward mean, rstd", N, C);
    float *stats = alloc_floats(2 * (size_t)N), *stats32 = alloc_floats(2 * (size_t)N);
    memcpy(stats, mean, N * sizeof(float)), memcpy(stats + N, rstd, N * sizeof(float));
    memcpy(stats32, mean32, N * sizeof(float)), memcpy(stats32 + N, rstd32, N * sizeof(float));
    check_lowp_f32(name, stats, stats32, 2 * (size_t)N, dt);

    float *R = randn(NC, 1.0f);
    void *dout = to_dt(R, NC, dt), *dx = alloc_dt(NC, dt);
    float *dout32 = rounded(R, NC, dt), *dx32 = alloc_floats(NC);
    float *dw = alloc_floats(C), *db = alloc_floats(C), *dw32 = alloc_floats(C), *db32 = alloc_floats(C);
    poison(dw, C);
    poison(db, C);
    tlm_layernorm_backward(be, dx, dw, db, dout, x, w, mean32, rstd32, N, C, dt);
    tlm_layernorm_backward(be, dx32, dw32, db32, dout32, x32, w, mean32, rstd32, N, C, F32);
    snprintf(name, sizeof name, "layernorm N=%d C=%d backward dx", N, C);
    check_lowp(name, dx, dx32, NC, dt, true);
    snprintf(name, sizeof name, "layernorm N=%d C=%d backward dw", N, C);
    check_lowp_f32(name, dw, dw32, C, dt);
    snprintf(name, sizeof name, "layernorm N=%d C=%d backward db", N, C);
    check_lowp_f32(name, db, db32, C, dt);
}

/* core/convert.h's fp16 conversions (the compiler's _Float16 on F16C, else the portable bit
 * manipulation) against the portable ones: the same bits for every fp16 value and a sweep of
 * floats (NaN: both NaN, sign kept). */
static void test_convert_paths(void) {
    long wrong = 0, n = 0;
    for (uint32_t i = 0; i < 65536; i++) {
        uint16_t h = (uint16_t)i;
        float a = tlm_f16_to_f32(h), b = tlm_f16_to_f32_portable(h);
        wrong += isnan(b) ? !isnan(a) || !signbit(a) != !signbit(b)
                          : tlm_f32_bits(a) != tlm_f32_bits(b);
    }
    for (uint64_t k = 0; k < (1ull << 32) / 4099; k++) {
        float x = tlm_f32_from_bits((uint32_t)(k * 4099));
        uint16_t a = tlm_f32_to_f16(x), b = tlm_f32_to_f16_portable(x);
        bool a_nan = (a & 0x7c00) == 0x7c00 && (a & 0x3ff);
        wrong += isnan(x) ? !a_nan || (a & 0x8000) != (b & 0x8000) : a != b;
        n++;
    }
    check(wrong == 0, "fp16 conversions (%s) = the portable ones: all 65536 widenings, %ld "
          "narrowings (%ld differ)", TLM_F16_HARDWARE ? "_Float16 on F16C" : "portable", n, wrong);
}

static void test_lowp(tlm_dtype dt) {
    test_cast(37, dt);
    test_cast(100003, dt);
    test_adamw_lowp(37, dt);
    test_adamw_lowp(100003, dt);
    test_rmsnorm_lowp(7, 13, dt);
    test_rmsnorm_lowp(64, 600, dt);
    test_matmul_lowp(13, 67, 35, dt);
    test_matmul_lowp(64, 300, 200, dt);
    test_rope_lowp(2, 7, 3, 6, 5, dt);
    test_rope_lowp(2, 64, 8, 16, 128, dt);
    test_attention_lowp(2, 7, 2, 4, dt);
    test_attention_lowp(2, 64, 3, 16, dt);
    test_swiglu_lowp(7, 5, dt);
    test_swiglu_lowp(64, 600, dt);
    test_matmul_swiglu(13, 67, 35, dt);
    test_cross_entropy_lowp(7, 11, dt);
    test_cross_entropy_lowp(40, 1001, dt);
    test_relu_lowp(37, dt);
    test_relu_lowp(100003, dt);
    test_layernorm_lowp(8, 10, dt);
    test_layernorm_lowp(64, 600, dt);
}

/* ---- thread count ------------------------------------------------------------------------ */

/* Every op but the GEMMs on inputs large enough to run in parallel (above TLM_CPU_GRAIN), so
 * that the parallel paths are the ones compared: their results must not depend on the number
 * of threads (rows are independent; column sums and scatter-adds are owned by one thread).
 * In fp32, bf16 and fp16 (per-thread scratch slices). */
typedef struct {
    const char *name;
    void *out;
    size_t n;
    tlm_dtype dt;
} op_output;

static int run_parallel_ops(op_output *o, tlm_dtype dt) {
    enum { N = 256, C = 200, V = 300, F = 200, B = 2, T = 64, H = 4, D = 16, VCE = 1001 };
    const size_t e = tlm_dtype_size(dt); /* bytes per dt element: q, k, v are thirds of qkv */
    uint64_t saved = rng;
    rng = 0xB16; /* the same inputs on every call */
    int k = 0;
    int32_t *tokens = random_ids(N, 50); /* repeats */
    float *wte = randn((size_t)V * C, 1.0f), *dout = randn((size_t)N * C, 1.0f);

    if (dt == F32) {
        o[k] = (op_output){"embedding forward", alloc_dt((size_t)N * C, F32), (size_t)N * C, F32};
        tlm_embedding_forward(be, o[k++].out, tokens, wte, N, C);
        o[k] = (op_output){"embedding backward", alloc_dt((size_t)V * C, F32), (size_t)V * C, F32};
        tlm_embedding_backward(be, o[k++].out, dout, tokens, N, V, C);
    }

    float *x = randn((size_t)N * C, 1.0f), *w = randn(C, 1.0f);
    float *rstd = alloc_floats(N);
    o[k] = (op_output){"rmsnorm forward", alloc_dt((size_t)N * C, dt), (size_t)N * C, dt};
    tlm_rmsnorm_forward(be, o[k++].out, rstd, x, w, N, C, 1e-5f, dt);
    o[k] = (op_output){"rmsnorm backward dx", randn((size_t)N * C, 1.0f), (size_t)N * C, F32};
    o[k + 1] = (op_output){"rmsnorm backward dw", alloc_dt(C, F32), C, F32};
    void *dout_dt = randn_dt((size_t)N * C, 1.0f, dt);
    void *dx_lp = dt == F32 ? NULL : alloc_dt((size_t)N * C, dt);
    tlm_rmsnorm_backward(be, o[k].out, o[k + 1].out, dout_dt, x, w, rstd, N, C, dx_lp, dt);
    k += 2;
    if (dx_lp) o[k++] = (op_output){"rmsnorm backward dx_lp", dx_lp, (size_t)N * C, dt};

    float *cos = randn((size_t)T * D / 2, 1.0f), *sin = randn((size_t)T * D / 2, 1.0f);
    size_t nrope = (size_t)B * T * H * D * 2;
    o[k] = (op_output){"rope forward", randn_dt(nrope, 1.0f, dt), nrope, dt};
    tlm_rope_forward(be, o[k++].out, cos, sin, B, T, 2 * H, D, 2 * H * D, dt);

    int ld = 3 * H * D;
    size_t nqkv = (size_t)B * T * ld, natt = (size_t)B * T * H * D, np = (size_t)B * H * T * T;
    char *qkv = randn_dt(nqkv, 1.0f, dt), *datt = randn_dt(natt, 1.0f, dt);
    void *probs = randn_dt(np, 1.0f, dt), *dprobs = randn_dt(np, 1.0f, dt);
    o[k] = (op_output){"attention forward", alloc_dt(natt, dt), natt, dt};
    tlm_attention_forward(be, o[k++].out, probs, qkv, qkv + H * D * e, qkv + 2 * H * D * e,
                               ld, B, T, H, D, tlm_precision_of_dtype(dt));
    char *dqkv = alloc_dt(nqkv, dt);
    o[k] = (op_output){"attention backward", dqkv, nqkv, dt};
    tlm_attention_backward(be, dqkv, dqkv + H * D * e, dqkv + 2 * H * D * e, dprobs, datt,
                                qkv, qkv + H * D * e, qkv + 2 * H * D * e, probs, ld, B, T, H, D, tlm_precision_of_dtype(dt));
    k++;

    float *lb = randn(C, 1.0f), *lmean = alloc_floats(N), *lrstd = alloc_floats(N);
    void *lx = randn_dt((size_t)N * C, 1.0f, dt);
    o[k] = (op_output){"layernorm forward", alloc_dt((size_t)N * C, F32), (size_t)N * C, F32};
    tlm_layernorm_forward(be, o[k++].out, lmean, lrstd, lx, w, lb, N, C, 1e-5f, dt);
    o[k] = (op_output){"layernorm backward dx", alloc_dt((size_t)N * C, dt), (size_t)N * C, dt};
    o[k + 1] = (op_output){"layernorm backward dw", alloc_dt(C, F32), C, F32};
    o[k + 2] = (op_output){"layernorm backward db", alloc_dt(C, F32), C, F32};
    tlm_layernorm_backward(be, o[k].out, o[k + 1].out, o[k + 2].out, dout_dt, lx, w, lmean, lrstd, N, C, dt);
    k += 3;
    o[k] = (op_output){"relu forward", alloc_dt((size_t)N * C, dt), (size_t)N * C, dt};
    tlm_relu_forward(be, o[k++].out, lx, (size_t)N * C, dt);
    o[k] = (op_output){"relu backward", alloc_dt((size_t)N * C, dt), (size_t)N * C, dt};
    tlm_relu_backward(be, o[k++].out, dout_dt, lx, (size_t)N * C, dt);

    void *ab = randn_dt((size_t)N * 2 * F, 2.0f, dt), *dsw = randn_dt((size_t)N * F, 1.0f, dt);
    o[k] = (op_output){"swiglu forward", alloc_dt((size_t)N * F, dt), (size_t)N * F, dt};
    tlm_swiglu_forward(be, o[k++].out, ab, N, F, dt);
    o[k] = (op_output){"swiglu backward", alloc_dt((size_t)N * 2 * F, dt), (size_t)N * 2 * F, dt};
    tlm_swiglu_backward(be, o[k++].out, dsw, ab, N, F, dt);

    void *logits = randn_dt((size_t)64 * VCE, 3.0f, dt);
    float *losses = alloc_floats(64);
    int32_t *targets = random_ids(64, VCE);
    o[k] = (op_output){"cross_entropy forward", alloc_dt(64, F32), 64, F32};
    tlm_cross_entropy_forward(be, losses, o[k++].out, logits, targets, 64, VCE, dt);
    o[k] = (op_output){"cross_entropy backward", alloc_dt((size_t)64 * VCE, dt),
                       (size_t)64 * VCE, dt};
    tlm_cross_entropy_backward(be, o[k].out, logits, o[k - 1].out, targets, 64, VCE, 0.5f,
                                    dt);
    k++;

    size_t n = 100003;
    float *src = randn(n, 1.0f);
    o[k] = (op_output){"cast", alloc_dt(n, dt), n, dt};
    tlm_cast(be, o[k++].out, src, n, dt);
    o[k] = (op_output){"adamw", randn(n, 1.0f), n, F32};
    float *g = randn(n, 1.0f), *m = randn(n, 0.1f), *v = randn(n, 0.1f);
    for (size_t i = 0; i < n; i++) v[i] *= v[i];
    void *params_lp = dt == F32 ? NULL : alloc_dt(n, dt);
    tlm_adamw_step(be, o[k++].out, g, 1.0f, m, v, n, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, 7,
                        params_lp, dt);
    if (params_lp) o[k++] = (op_output){"adamw params_lp", params_lp, n, dt};
    if (dt == F32) {
        o[k] = (op_output){"grad_unscale", randn(n, 1.0f), n, F32};
        unscale(o[k++].out, n, 0.25f);
    }
    rng = saved;
    return k;
}

static void test_thread_count(tlm_dtype dt) {
    op_output one[32], many[32];
    int max_threads = omp_get_max_threads();
    omp_set_num_threads(1);
    int k = run_parallel_ops(one, dt);
    omp_set_num_threads(4);
    run_parallel_ops(many, dt);
    omp_set_num_threads(max_threads);
    for (int i = 0; i < k; i++)
        check(all_finite_dt(many[i].out, many[i].n, many[i].dt) &&
                  memcmp(one[i].out, many[i].out, one[i].n * tlm_dtype_size(one[i].dt)) == 0,
              "%s %s (%zu elements): 4 threads give the same bits as 1", dt_name(dt),
              one[i].name, one[i].n);
}

/* ---- the shared exp, and the backend itself ---------------------------------------------- */

static void test_expf(void) {
    double max_rel = 0.0;
    for (int i = 0; i <= 2000000; i++) {
        float x = -87.3f + (float)i * (176.0f / 2000000);
        double e = exp((double)x);
        max_rel = fmax(max_rel, fabs(tlm_cpu_expf(x) - e) / e);
    }
    check(max_rel < 2e-7 && tlm_cpu_expf(0.0f) == 1.0f && tlm_cpu_expf(-100.0f) == 0.0f &&
              isinf(tlm_cpu_expf(100.0f)) && isnan(tlm_cpu_expf(NAN)),
          "tlm_cpu_expf on [-87.3, 88.7]: max relative error %.2e; exp(0) = 1, "
          "exp(-100) = 0, exp(100) = inf, exp(NaN) = NaN", max_rel);
}

static void test_backend_basics(void) {
    check(strcmp(be->name, "cpu") == 0 && be->kind == TLM_DEVICE_CPU && be->ops,
          "backend: name \"cpu\", device CPU, ops present");
    const tlm_ops *o = be->ops;
    int unset = 0;
#define TLM_OP(ID, name, cls, params, args, flops, bytes) unset += o->name == NULL;
#include "tlm/ops.def"
#undef TLM_OP
    check(unset == 0, "backend: every op of the list (%d) is set (%d unset)", (int)TLM_OP_COUNT, unset);
    float host[37], back[37];
    for (int i = 0; i < 37; i++) host[i] = (float)i;
    float *dev = alloc_floats(37);
    tlm_copy_to_backend(be, dev, host, sizeof host);
    tlm_copy_to_host(be, back, dev, sizeof back);
    bool same = memcmp(host, back, sizeof host) == 0;
    tlm_memset_zero(be, dev, sizeof host);
    tlm_synchronize(be);
    bool zero = true;
    for (int i = 0; i < 37; i++) zero &= dev[i] == 0.0f;
    check(same && zero, "backend: copy to backend and back, memset_zero");
    tlm_free(be, dev);
    void *empty = tlm_alloc(be, 0, TLM_MEM_WORKSPACE, "empty");
    check(empty != NULL, "backend: a 0-byte allocation is non-NULL");
    tlm_free(be, empty);
}

int main(void) {
    be = test_backend();
    test_backend_basics();
    test_expf();
    test_embedding(9, 11, 5);
    test_embedding(13, 7, 70);
    test_rmsnorm(7, 13);
    test_rmsnorm(5, 133);
    test_matmul(7, 5, 9);
    test_matmul(13, 67, 35);
    test_rope(2, 7, 3, 6, 5);
    test_rope(1, 5, 2, 16, 0);
    for (int T = 5; T <= 7; T++) test_attention(2, T, 2, 4);
    test_attention(1, 37, 3, 16);
    test_swiglu(7, 5);
    test_swiglu(3, 67);
    test_matmul_swiglu(13, 67, 35, F32);
    test_matmul_swiglu(64, 96, 256, F32);
    test_relu(37);
    test_relu(1001);
    test_layernorm(8, 10);
    test_layernorm(5, 133);
    test_matmul_residual(7, 5, 9);
    test_matmul_residual(64, 300, 200);
    test_cross_entropy(7, 11);
    test_cross_entropy(3, 1001);
    test_adamw(37);
    test_adamw(1001);
    test_cast(37, F32);
    test_cast(100003, F32);
    test_grad_unscale(37);
    test_grad_unscale(100003);
    test_sum_squares(37);
    test_sum_squares(100003);
    test_convert_paths();
    for (int i = 0; i < 2; i++) test_lowp(LOWP[i]);
    test_thread_count(F32);
    for (int i = 0; i < 2; i++) test_thread_count(LOWP[i]);
    tlm_backend_destroy(be);

    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
