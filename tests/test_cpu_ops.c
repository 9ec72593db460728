/* test_cpu_ops.c — the CPU backend's ops: every forward against a direct double-precision
 * computation, every backward against central finite differences of its forward.
 *
 * A gradient check takes a scalar objective L = sum(out * R) (R random, fixed; summed in
 * double), perturbs input elements by +-eps (all of them, or a random sample of 50), and
 * compares the analytic gradient (the backward run with dout = R) by normalized error
 * ||analytic - fd|| / ||fd||. Each check also reports the error of the analytic gradient scaled
 * by 1.1 and requires it to FAIL the tolerance, so a check that cannot fail is caught.
 * Outputs that an op overwrites are poisoned with NaN first and must come back all finite.
 * Prints one line per check and a final "N passed, M failed"; exits 1 on any failure. */
#include "tlm/backend.h"
#include "tlm/rng.h"
#include "cpu/cpu_ops.h"

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

static int passed, failed;
static tlm_backend *be;
static uint64_t rng = 0x5EED;

static void check(bool ok, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void check(bool ok, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    printf("%s ", ok ? "ok  " : "FAIL");
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
    if (ok) passed++;
    else failed++;
}

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
    be->ops->embedding_forward(be, c->out, c->tokens, c->wte, c->N, c->C);
    return dot(c->out, c->R, (size_t)c->N * c->C);
}

static void test_embedding(int N, int V, int C) {
    char name[64];
    snprintf(name, sizeof name, "embedding N=%d V=%d C=%d", N, V, C);
    embedding_ctx c = {.N = N, .C = C};
    c.tokens = alloc_ints(N);
    for (int n = 0; n < N; n++) c.tokens[n] = (int32_t)tlm_rng_below(&rng, V / 2 + 1); /* repeats */
    c.tokens[N - 1] = V - 1;
    c.wte = randn((size_t)V * C, 1.0f);
    c.R = randn((size_t)N * C, 1.0f);
    c.out = alloc_floats((size_t)N * C);

    poison(c.out, (size_t)N * C);
    be->ops->embedding_forward(be, c.out, c.tokens, c.wte, N, C);
    bool exact = true;
    for (int n = 0; n < N; n++)
        exact &= memcmp(c.out + (size_t)n * C, c.wte + (size_t)c.tokens[n] * C, C * sizeof(float)) == 0;
    check(exact, "%s forward: out rows are exact copies of wte rows", name);

    float *dwte = alloc_floats((size_t)V * C);
    poison(dwte, (size_t)V * C);
    be->ops->embedding_backward(be, dwte, c.R, c.tokens, N, V, C);
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
    be->ops->rmsnorm_forward(be, c->out, c->rstd, c->x, c->w, c->N, c->C, c->eps);
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
    be->ops->rmsnorm_forward(be, c.out, c.rstd, c.x, c.w, N, C, c.eps);
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
    be->ops->rmsnorm_backward(be, dx, dw, c.R, c.x, c.w, c.rstd, N, C);
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
    be->ops->matmul_forward(be, c->y, c->x, c->w, c->N, c->in, c->out);
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
    be->ops->matmul_forward(be, c.y, c.x, c.w, N, in, out);
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
    be->ops->matmul_backward(be, dx, dw, c.R, c.x, c.w, N, in, out);
    check(all_finite(dx, (size_t)N * in) && all_finite(dw, (size_t)out * in),
          "matmul N=%d in=%d out=%d backward writes every dx and dw", N, in, out);
    snprintf(name, sizeof name, "matmul N=%d in=%d out=%d dx", N, in, out);
    check_grad(name, matmul_objective, &c, c.x, dx, 1, N * in, 0, N * in, 1e-2f);
    snprintf(name, sizeof name, "matmul N=%d in=%d out=%d dW", N, in, out);
    check_grad(name, matmul_objective, &c, c.w, dw, 1, out * in, 0, out * in, 1e-2f);

    float *dw2 = alloc_floats((size_t)out * in);
    poison(dw2, (size_t)out * in);
    be->ops->matmul_backward(be, NULL, dw2, c.R, c.x, c.w, N, in, out);
    check(max_abs_diff(dw, dw2, (size_t)out * in) == 0.0,
          "matmul N=%d in=%d out=%d backward with dx == NULL: same dW", N, in, out);
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
    be->ops->rope_forward(be, c->work, c->cos, c->sin, c->B, c->T, c->nheads, c->D, c->ld);
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
    be->ops->rope_forward(be, y, c.cos, c.sin, B, T, nheads, D, c.ld);
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
    be->ops->rope_backward(be, y, c.cos, c.sin, B, T, nheads, D, c.ld);
    double diff = max_abs_diff(y, c.x, n);
    check(diff < 1e-5, "rope backward(forward(x)) = x: max abs diff %.2e", diff);

    float *grad = copy_of(c.R, n);
    be->ops->rope_backward(be, grad, c.cos, c.sin, B, T, nheads, D, c.ld);
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
    be->ops->attention_forward(be, c->out, c->probs, c->qkv, c->qkv + C, c->qkv + 2 * C, 3 * C,
                               c->B, c->T, c->H, c->D);
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
    be->ops->attention_backward(be, dqkv, dqkv + C, dqkv + 2 * C, dprobs, c.R, q, k, v, c.probs,
                                ld, B, T, H, D);
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
    be->ops->swiglu_forward(be, c->out, c->ab, c->N, c->F);
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
    be->ops->swiglu_backward(be, dab, c.R, c.ab, N, F);
    check(all_finite(dab, (size_t)N * 2 * F), "swiglu N=%d F=%d backward writes every dab", N, F);
    snprintf(name, sizeof name, "swiglu N=%d F=%d da", N, F);
    check_grad(name, swiglu_objective, &c, c.ab, dab, N, 2 * F, 0, F, 1e-3f);
    snprintf(name, sizeof name, "swiglu N=%d F=%d db", N, F);
    check_grad(name, swiglu_objective, &c, c.ab, dab, N, 2 * F, F, 2 * F, 1e-3f);
    free(want);
}

/* ---- residual ---------------------------------------------------------------------------- */

static void test_residual(size_t n) {
    float *x = randn(n, 1.0f), *y = randn(n, 1.0f), *out = alloc_floats(n);
    poison(out, n);
    be->ops->residual_forward(be, out, x, y, n);
    bool exact = true;
    for (size_t i = 0; i < n; i++) exact &= out[i] == x[i] + y[i];
    check(exact, "residual n=%zu forward: out = x + y exactly", n);

    float *dst = copy_of(x, n);
    be->ops->add_inplace(be, dst, y, n);
    exact = true;
    for (size_t i = 0; i < n; i++) exact &= dst[i] == x[i] + y[i];
    check(exact, "add_inplace n=%zu: dst += src exactly", n);

    float *acc = copy_of(x, n); /* out may be x: the residual stream updated in place */
    be->ops->residual_forward(be, acc, acc, y, n);
    check(max_abs_diff(acc, out, n) == 0.0, "residual n=%zu forward in place (out == x)", n);
}

/* ---- cross-entropy ----------------------------------------------------------------------- */

typedef struct {
    float *losses, *lse, *logits;
    int32_t *targets;
    int N, V;
} cross_entropy_ctx;

static double cross_entropy_mean_loss(void *p) {
    cross_entropy_ctx *c = p;
    be->ops->cross_entropy_forward(be, c->losses, c->lse, c->logits, c->targets, c->N, c->V);
    double sum = 0.0;
    for (int n = 0; n < c->N; n++) sum += c->losses[n];
    return sum / c->N;
}

static void test_cross_entropy(int N, int V) {
    char name[64];
    size_t NV = (size_t)N * V;
    cross_entropy_ctx c = {.N = N, .V = V};
    c.logits = randn(NV, 3.0f);
    c.targets = alloc_ints(N);
    for (int n = 0; n < N; n++) c.targets[n] = (int32_t)tlm_rng_below(&rng, V);
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
    be->ops->cross_entropy_backward(be, dlogits, c.logits, c.lse, c.targets, N, V, 1.0f / N);
    check(all_finite(dlogits, NV), "cross_entropy N=%d V=%d backward writes every dlogits", N, V);
    snprintf(name, sizeof name, "cross_entropy N=%d V=%d dlogits of the mean loss", N, V);
    check_grad(name, cross_entropy_mean_loss, &c, c.logits, dlogits, 1, (int)NV, 0, (int)NV, 1e-2f);
    cross_entropy_mean_loss(&c); /* losses and lse of the unperturbed logits again */

    /* in place: dlogits == logits gives the same result */
    float *inplace = copy_of(c.logits, NV);
    be->ops->cross_entropy_backward(be, inplace, inplace, c.lse, c.targets, N, V, 1.0f / N);
    check(max_abs_diff(inplace, dlogits, NV) == 0.0,
          "cross_entropy N=%d V=%d backward in place (dlogits == logits): same result", N, V);

    /* stability: logits shifted by +-100 (exp overflows/underflows unless max-subtracted) give
     * the same loss and gradient */
    float *shifted = copy_of(c.logits, NV), *ls = alloc_floats(N), *lses = alloc_floats(N);
    for (int n = 0; n < N; n++)
        for (int j = 0; j < V; j++) shifted[(size_t)n * V + j] += n % 2 ? 100.0f : -100.0f;
    be->ops->cross_entropy_forward(be, ls, lses, shifted, c.targets, N, V);
    be->ops->cross_entropy_backward(be, shifted, shifted, lses, c.targets, N, V, 1.0f / N);
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
        be->ops->adamw_step(be, p, g, m, v, n, lr, b1, b2, eps, wd, t);
        adamw_reference(rp, rm, rv, g, n, lr, b1, b2, eps, wd, t, false);
        adamw_reference(wp, wm, wv, g, n, lr, b1, b2, eps, wd, t, true);
        double ep = rel_error(p, rp, n), em = rel_error(m, rm, n), ev = rel_error(v, rv, n);
        double wrong = rel_error(p, wp, n);
        check(ep < FWD_TOL && em < FWD_TOL && ev < FWD_TOL && wrong > FWD_TOL,
              "adamw n=%zu step %d vs double: params %.2e, m %.2e, v %.2e "
              "(decay before the update gives %.2e)", n, t, ep, em, ev, wrong);
    }
    free(rp), free(rm), free(rv), free(wp), free(wm), free(wv);
}

/* ---- thread count ------------------------------------------------------------------------ */

/* Every op but the GEMMs on inputs large enough to run in parallel (above TLM_CPU_GRAIN), so
 * that the parallel paths are the ones compared: their results must not depend on the number
 * of threads (rows are independent; column sums and scatter-adds are owned by one thread). */
typedef struct {
    const char *name;
    float *out;
    size_t n;
} op_output;

static int run_parallel_ops(op_output *o) {
    enum { N = 256, C = 200, V = 300, F = 200, B = 2, T = 64, H = 4, D = 16, VCE = 1001 };
    uint64_t saved = rng;
    rng = 0xB16; /* the same inputs on every call */
    int k = 0;
    int32_t *tokens = alloc_ints(N);
    for (int n = 0; n < N; n++) tokens[n] = (int32_t)tlm_rng_below(&rng, 50); /* repeats */
    float *wte = randn((size_t)V * C, 1.0f), *dout = randn((size_t)N * C, 1.0f);

    o[k] = (op_output){"embedding forward", alloc_floats((size_t)N * C), (size_t)N * C};
    be->ops->embedding_forward(be, o[k++].out, tokens, wte, N, C);
    o[k] = (op_output){"embedding backward", alloc_floats((size_t)V * C), (size_t)V * C};
    be->ops->embedding_backward(be, o[k++].out, dout, tokens, N, V, C);

    float *x = randn((size_t)N * C, 1.0f), *w = randn(C, 1.0f);
    float *rstd = alloc_floats(N);
    o[k] = (op_output){"rmsnorm forward", alloc_floats((size_t)N * C), (size_t)N * C};
    be->ops->rmsnorm_forward(be, o[k++].out, rstd, x, w, N, C, 1e-5f);
    o[k] = (op_output){"rmsnorm backward dx", randn((size_t)N * C, 1.0f), (size_t)N * C};
    o[k + 1] = (op_output){"rmsnorm backward dw", alloc_floats(C), C};
    be->ops->rmsnorm_backward(be, o[k].out, o[k + 1].out, dout, x, w, rstd, N, C);
    k += 2;

    float *cos = randn((size_t)T * D / 2, 1.0f), *sin = randn((size_t)T * D / 2, 1.0f);
    o[k] = (op_output){"rope forward", randn((size_t)B * T * H * D * 2, 1.0f), (size_t)B * T * H * D * 2};
    be->ops->rope_forward(be, o[k++].out, cos, sin, B, T, 2 * H, D, 2 * H * D);

    int ld = 3 * H * D;
    float *qkv = randn((size_t)B * T * ld, 1.0f), *datt = randn((size_t)B * T * H * D, 1.0f);
    float *probs = alloc_floats((size_t)B * H * T * T), *dprobs = alloc_floats((size_t)B * H * T * T);
    o[k] = (op_output){"attention forward", alloc_floats((size_t)B * T * H * D), (size_t)B * T * H * D};
    be->ops->attention_forward(be, o[k++].out, probs, qkv, qkv + H * D, qkv + 2 * H * D, ld, B, T, H, D);
    float *dqkv = alloc_floats((size_t)B * T * ld);
    o[k] = (op_output){"attention backward", dqkv, (size_t)B * T * ld};
    be->ops->attention_backward(be, dqkv, dqkv + H * D, dqkv + 2 * H * D, dprobs, datt, qkv,
                                qkv + H * D, qkv + 2 * H * D, probs, ld, B, T, H, D);
    k++;

    float *ab = randn((size_t)N * 2 * F, 2.0f), *dsw = randn((size_t)N * F, 1.0f);
    o[k] = (op_output){"swiglu forward", alloc_floats((size_t)N * F), (size_t)N * F};
    be->ops->swiglu_forward(be, o[k++].out, ab, N, F);
    o[k] = (op_output){"swiglu backward", alloc_floats((size_t)N * 2 * F), (size_t)N * 2 * F};
    be->ops->swiglu_backward(be, o[k++].out, dsw, ab, N, F);

    float *logits = randn((size_t)64 * VCE, 3.0f), *losses = alloc_floats(64);
    int32_t *targets = alloc_ints(64);
    for (int n = 0; n < 64; n++) targets[n] = (int32_t)tlm_rng_below(&rng, VCE);
    o[k] = (op_output){"cross_entropy forward", alloc_floats(64), 64};
    be->ops->cross_entropy_forward(be, losses, o[k++].out, logits, targets, 64, VCE);
    o[k] = (op_output){"cross_entropy backward", alloc_floats((size_t)64 * VCE), (size_t)64 * VCE};
    be->ops->cross_entropy_backward(be, o[k].out, logits, o[k - 1].out, targets, 64, VCE, 0.5f);
    k++;

    size_t np = 100003;
    o[k] = (op_output){"adamw", randn(np, 1.0f), np};
    float *g = randn(np, 1.0f), *m = randn(np, 0.1f), *v = randn(np, 0.1f);
    for (size_t i = 0; i < np; i++) v[i] *= v[i];
    be->ops->adamw_step(be, o[k++].out, g, m, v, np, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, 7);
    rng = saved;
    return k;
}

static void test_thread_count(void) {
    op_output one[16], many[16];
    int max_threads = omp_get_max_threads();
    omp_set_num_threads(1);
    int k = run_parallel_ops(one);
    omp_set_num_threads(4);
    run_parallel_ops(many);
    omp_set_num_threads(max_threads);
    for (int i = 0; i < k; i++)
        check(all_finite(many[i].out, many[i].n) &&
                  memcmp(one[i].out, many[i].out, one[i].n * sizeof(float)) == 0,
              "%s (%zu elements): 4 threads give the same bits as 1", one[i].name, one[i].n);
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

static void test_backend(void) {
    check(strcmp(be->name, "cpu") == 0 && be->device == TLM_DEVICE_CPU && be->ops,
          "backend: name \"cpu\", device CPU, ops present");
    const tlm_ops *o = be->ops;
    check(o->embedding_forward && o->embedding_backward && o->rmsnorm_forward &&
              o->rmsnorm_backward && o->matmul_forward && o->matmul_backward && o->rope_forward &&
              o->rope_backward && o->attention_forward && o->attention_backward &&
              o->swiglu_forward && o->swiglu_backward && o->residual_forward && o->add_inplace &&
              o->cross_entropy_forward && o->cross_entropy_backward && o->adamw_step,
          "backend: every op is set");
    float host[37], back[37];
    for (int i = 0; i < 37; i++) host[i] = (float)i;
    float *dev = alloc_floats(37);
    be->copy_to_backend(be, dev, host, sizeof host);
    be->copy_to_host(be, back, dev, sizeof back);
    bool same = memcmp(host, back, sizeof host) == 0;
    be->memset_zero(be, dev, sizeof host);
    be->synchronize(be);
    bool zero = true;
    for (int i = 0; i < 37; i++) zero &= dev[i] == 0.0f;
    check(same && zero, "backend: copy to backend and back, memset_zero");
    tlm_free(be, dev);
    void *empty = tlm_alloc(be, 0, TLM_MEM_WORKSPACE, "empty");
    check(empty != NULL, "backend: a 0-byte allocation is non-NULL");
    tlm_free(be, empty);
}

int main(void) {
    if (tlm_backend_cpu_create(&be, 0) != TLM_OK) {
        fprintf(stderr, "tlm_backend_cpu_create: %s\n", tlm_last_error());
        return 1;
    }
    test_backend();
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
    test_residual(37);
    test_residual(100003);
    test_cross_entropy(7, 11);
    test_cross_entropy(3, 1001);
    test_adamw(37);
    test_adamw(1001);
    test_thread_count();
    tlm_backend_destroy(be);

    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
