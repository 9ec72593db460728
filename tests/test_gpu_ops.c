/* test_gpu_ops.c — the CUDA backend against the CPU backend, which is the spec: every op runs on
 * both backends (created through the public interface) on the same random inputs, drawn afresh
 * for each check and never zero; outputs that an op overwrites are poisoned with NaN (all bytes
 * 0xFF) first and every element must come back finite (written). Agreement is the normalized
 * error ||cuda - cpu|| / ||cpu|| over each output. Then the whole tiny model runs on CUDA
 * against the PyTorch fixtures (tests/fixtures/tiny, as test_model_fixture.c reads them): loss,
 * logits, every gradient, and the weights after 3 AdamW steps.
 *
 * Shapes: the tiny model's (N = 3*17, C 64, H 4, D 16, F 172, V 512), one whose sizes are not
 * multiples of 4 (the kernels' scalar paths, 8-byte-aligned GEMM operands), and one of the small
 * model's (B 2, T 256, C 768, H 12, F 3072, V 10000). The GEMM ops also run in TF32.
 * Prints one line per check and a final "N passed, M failed"; exits 1 on any failure, and 77
 * (ctest: skipped) with "no GPU: skipped" when no CUDA GPU is usable. */
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tlm/backend.h"
#include "tlm/model.h"
#include "tlm/npy.h"
#include "tlm/rng.h"
#include "tlm/safetensors.h"

/* Tolerances (normalized error against the CPU backend).
 * TOL: fp32 kernels (elementwise, row reductions); both sides round in fp32, only the order of
 *   the sums and the exp/log implementations differ: errors are ~1e-7.
 * GEMM_TOL: fp32 GEMMs. A length-K fp32 sum accumulated in order has a relative error of about
 *   u sqrt(K/6) (u = 2^-24): 2.4e-6 for K = 10000 (the lm_head's dx), on each side, summed in a
 *   different order (measured on an H100: at most 6e-7); 2e-5 keeps a margin yet fails TF32
 *   (~3e-4) by far, so strict fp32 is checked.
 * TF32_TOL: TF32 keeps 10 mantissa bits: each operand is rounded with a relative error up to
 *   2^-11, so a product's normwise error is ~3e-4 on random data (measured on an H100,
 *   2026-11-21: 2.7e-4 to 3.0e-4 for every GEMM shape here, 3.7e-4 for attention, whose three
 *   chained TF32 GEMMs pass through the softmax; 3e-4 itself would fail). 1e-3 holds those with
 *   a margin and still fails any indexing or layout bug (O(1) errors). Small or misaligned
 *   attention GEMMs may run strict fp32 kernels (FAST_TF32 allows, not forces, TF32). */
#define TOL 1e-5
#define GEMM_TOL 2e-5
#define TF32_TOL 1e-3
#define FIXTURE_TOL 1e-5

static int passed, failed;
static tlm_backend *cpu, *gpu;
static uint64_t rng = 0x6B0A7;

static void check(bool ok, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void check(bool ok, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    printf("%s ", ok ? "ok  " : "FAIL");
    vprintf(fmt, ap);
    printf("\n");
    fflush(stdout);
    va_end(ap);
    if (ok) passed++;
    else failed++;
}

static void die_on(tlm_status s, const char *what) {
    if (s != TLM_OK) {
        fprintf(stderr, "%s: %s\n", what, tlm_last_error());
        exit(1);
    }
}

/* ---- buffers on both backends --------------------------------------------------------------- */

typedef struct {
    size_t n;
    float *host; /* staging, and the CUDA result after fetch() */
    float *c;    /* CPU backend memory (host) */
    float *g;    /* CUDA backend memory (device) */
} tbuf;

static tbuf tb_alloc(size_t n) {
    tbuf b = {n, malloc(n * sizeof(float) + 1), tlm_alloc(cpu, n * sizeof(float), TLM_MEM_ACTIVATIONS, "test"),
              tlm_alloc(gpu, n * sizeof(float), TLM_MEM_ACTIVATIONS, "test")};
    if (!b.host || !b.c || !b.g) die_on(TLM_ERR_OUT_OF_MEMORY, "test buffer");
    return b;
}

static void tb_upload(tbuf *b) {
    memcpy(b->c, b->host, b->n * sizeof(float));
    gpu->copy_to_backend(gpu, b->g, b->host, b->n * sizeof(float));
}

/* normal(0, scale) + shift, the same values on both backends; an exact 0 is redrawn */
static tbuf tb_rand(size_t n, double scale, double shift) {
    tbuf b = tb_alloc(n);
    for (size_t i = 0; i < n; i++) {
        float v;
        do v = (float)(shift + scale * tlm_rng_normal(&rng));
        while (v == 0.0f);
        b.host[i] = v;
    }
    tb_upload(&b);
    return b;
}

/* an output: every byte 0xFF (a NaN) on both backends */
static tbuf tb_poison(size_t n) {
    tbuf b = tb_alloc(n);
    memset(b.host, 0xFF, n * sizeof(float));
    tb_upload(&b);
    return b;
}

/* a copy of the CPU side's current contents on both backends (inputs made by a CPU op) */
static tbuf tb_from_cpu(const tbuf *src) {
    tbuf b = tb_alloc(src->n);
    memcpy(b.host, src->c, src->n * sizeof(float));
    tb_upload(&b);
    return b;
}

static void tb_free(tbuf *b) {
    free(b->host);
    tlm_free(cpu, b->c);
    tlm_free(gpu, b->g);
    memset(b, 0, sizeof *b);
}

typedef struct {
    int32_t *c, *g;
} ibuf;

static ibuf ib_rand(size_t n, int below) {
    int32_t *h = malloc(n * sizeof(int32_t) + 1);
    ibuf b = {tlm_alloc(cpu, n * sizeof(int32_t), TLM_MEM_WORKSPACE, "test"),
              tlm_alloc(gpu, n * sizeof(int32_t), TLM_MEM_WORKSPACE, "test")};
    if (!h || !b.c || !b.g) die_on(TLM_ERR_OUT_OF_MEMORY, "test tokens");
    for (size_t i = 0; i < n; i++) h[i] = (int32_t)tlm_rng_below(&rng, (uint64_t)below);
    memcpy(b.c, h, n * sizeof(int32_t));
    gpu->copy_to_backend(gpu, b.g, h, n * sizeof(int32_t));
    free(h);
    return b;
}

static void ib_free(ibuf *b) {
    tlm_free(cpu, b->c);
    tlm_free(gpu, b->g);
}

/* Fetches the CUDA result and compares it with the CPU's: one check line. */
static void compare(const char *what, const char *tag, tbuf *b, double limit) {
    gpu->copy_to_host(gpu, b->host, b->g, b->n * sizeof(float));
    gpu->synchronize(gpu);
    size_t unwritten = 0, cpu_bad = 0;
    double num = 0, den = 0;
    for (size_t i = 0; i < b->n; i++) {
        if (!isfinite(b->host[i])) unwritten++;
        if (!isfinite(b->c[i])) cpu_bad++;
        double d = (double)b->host[i] - b->c[i];
        num += d * d;
        den += (double)b->c[i] * b->c[i];
    }
    double err = sqrt(num / (den > 0 ? den : 1));
    bool ok = unwritten == 0 && cpu_bad == 0 && err <= limit;
    if (unwritten || cpu_bad)
        check(ok, "%-36s %-28s %zu of %zu not finite on cuda, %zu on cpu", what, tag, unwritten, b->n, cpu_bad);
    else
        check(ok, "%-36s %-28s rel err %.3e (limit %.0e)", what, tag, err, limit);
}

/* ---- the ops ----------------------------------------------------------------------------------- */

typedef struct {
    const char *name;
    int B, T, C, H, F, V;
} shape;

static void test_embedding(const shape *s, const char *tag) {
    const int N = s->B * s->T, C = s->C, V = s->V;
    ibuf tok = ib_rand((size_t)N, V);
    tbuf wte = tb_rand((size_t)V * C, 1.0, 0.0), out = tb_poison((size_t)N * C);
    cpu->ops->embedding_forward(cpu, out.c, tok.c, wte.c, N, C);
    gpu->ops->embedding_forward(gpu, out.g, tok.g, wte.g, N, C);
    compare("embedding_forward", tag, &out, TOL);
    tb_free(&wte);
    tb_free(&out);
    ib_free(&tok);

    /* few distinct tokens, so rows repeat and the scatter-add really accumulates */
    tok = ib_rand((size_t)N, V < 7 ? V : 7);
    tbuf dout = tb_rand((size_t)N * C, 1.0, 0.0), dwte = tb_poison((size_t)V * C);
    cpu->ops->embedding_backward(cpu, dwte.c, dout.c, tok.c, N, V, C);
    gpu->ops->embedding_backward(gpu, dwte.g, dout.g, tok.g, N, V, C);
    compare("embedding_backward (dwte)", tag, &dwte, TOL);
    tb_free(&dout);
    tb_free(&dwte);
    ib_free(&tok);
}

static void test_rmsnorm(const shape *s, const char *tag) {
    const int N = s->B * s->T, C = s->C;
    const float eps = 1e-5f;
    tbuf x = tb_rand((size_t)N * C, 1.5, 0.2), w = tb_rand((size_t)C, 0.1, 1.0);
    tbuf out = tb_poison((size_t)N * C), rstd = tb_poison((size_t)N);
    cpu->ops->rmsnorm_forward(cpu, out.c, rstd.c, x.c, w.c, N, C, eps);
    gpu->ops->rmsnorm_forward(gpu, out.g, rstd.g, x.g, w.g, N, C, eps);
    compare("rmsnorm_forward (out)", tag, &out, TOL);
    compare("rmsnorm_forward (rstd)", tag, &rstd, TOL);
    tb_free(&x);
    tb_free(&w);
    tb_free(&out);
    tb_free(&rstd);

    /* backward: fresh x, w; rstd from the CPU forward on both; dx accumulates onto random values */
    x = tb_rand((size_t)N * C, 1.0, -0.1);
    w = tb_rand((size_t)C, 0.1, 1.0);
    out = tb_poison((size_t)N * C);
    tbuf r0 = tb_poison((size_t)N);
    cpu->ops->rmsnorm_forward(cpu, out.c, r0.c, x.c, w.c, N, C, eps);
    rstd = tb_from_cpu(&r0);
    tbuf dout = tb_rand((size_t)N * C, 1.0, 0.0), dx = tb_rand((size_t)N * C, 1.0, 0.0);
    tbuf dw = tb_poison((size_t)C);
    cpu->ops->rmsnorm_backward(cpu, dx.c, dw.c, dout.c, x.c, w.c, rstd.c, N, C);
    gpu->ops->rmsnorm_backward(gpu, dx.g, dw.g, dout.g, x.g, w.g, rstd.g, N, C);
    compare("rmsnorm_backward (dx +=)", tag, &dx, TOL);
    compare("rmsnorm_backward (dw)", tag, &dw, TOL);
    tb_free(&x);
    tb_free(&w);
    tb_free(&out);
    tb_free(&r0);
    tb_free(&rstd);
    tb_free(&dout);
    tb_free(&dx);
    tb_free(&dw);
}

static void test_matmul(const shape *s, const char *tag, double limit) {
    const int N = s->B * s->T, C = s->C, F = s->F, V = s->V;
    const int dims[][2] = {{C, 3 * C}, {C, C}, {C, 2 * F}, {F, C}, {C, V}}; /* (in, out) of the model's GEMMs */
    for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++) {
        const int in = dims[i][0], out = dims[i][1];
        char what[64];
        tbuf x = tb_rand((size_t)N * in, 1.0, 0.0), w = tb_rand((size_t)out * in, 0.05, 0.0);
        tbuf y = tb_poison((size_t)N * out);
        cpu->ops->matmul_forward(cpu, y.c, x.c, w.c, N, in, out);
        gpu->ops->matmul_forward(gpu, y.g, x.g, w.g, N, in, out);
        snprintf(what, sizeof what, "matmul_forward %dx%d", in, out);
        compare(what, tag, &y, limit);

        tbuf dy = tb_rand((size_t)N * out, 1.0, 0.0), dx = tb_poison((size_t)N * in);
        tbuf dw = tb_poison((size_t)out * in);
        cpu->ops->matmul_backward(cpu, dx.c, dw.c, dy.c, x.c, w.c, N, in, out);
        gpu->ops->matmul_backward(gpu, dx.g, dw.g, dy.g, x.g, w.g, N, in, out);
        snprintf(what, sizeof what, "matmul_backward %dx%d (dx)", in, out);
        compare(what, tag, &dx, limit);
        snprintf(what, sizeof what, "matmul_backward %dx%d (dw)", in, out);
        compare(what, tag, &dw, limit);
        if (i == 0) { /* dx == NULL: only dw */
            tbuf dw2 = tb_poison((size_t)out * in);
            cpu->ops->matmul_backward(cpu, NULL, dw2.c, dy.c, x.c, w.c, N, in, out);
            gpu->ops->matmul_backward(gpu, NULL, dw2.g, dy.g, x.g, w.g, N, in, out);
            snprintf(what, sizeof what, "matmul_backward %dx%d (dx NULL)", in, out);
            compare(what, tag, &dw2, limit);
            tb_free(&dw2);
        }
        tb_free(&x);
        tb_free(&w);
        tb_free(&y);
        tb_free(&dy);
        tb_free(&dx);
        tb_free(&dw);
    }
}

static void test_rope(const shape *s, const char *tag) {
    const int B = s->B, T = s->T, C = s->C, H = s->H, D = C / H, half = D / 2, N = B * T;
    const int T_max = T + 3; /* the table is longer than the sequence, as the model's */
    tbuf cs = tb_alloc((size_t)T_max * half), sn = tb_alloc((size_t)T_max * half);
    for (int t = 0; t < T_max; t++)
        for (int k = 0; k < half; k++) {
            double angle = t * pow(10000.0, -2.0 * k / D);
            cs.host[(size_t)t * half + k] = (float)cos(angle);
            sn.host[(size_t)t * half + k] = (float)sin(angle);
        }
    tb_upload(&cs);
    tb_upload(&sn);
    /* on the fused (N, 3C) rows, q and k = 2H heads, as the model calls it; v must stay as it is */
    tbuf qkv = tb_rand((size_t)N * 3 * C, 1.0, 0.0);
    cpu->ops->rope_forward(cpu, qkv.c, cs.c, sn.c, B, T, 2 * H, D, 3 * C);
    gpu->ops->rope_forward(gpu, qkv.g, cs.g, sn.g, B, T, 2 * H, D, 3 * C);
    compare("rope_forward (in place, ld 3C)", tag, &qkv, TOL);
    tb_free(&qkv);
    tbuf dqkv = tb_rand((size_t)N * 3 * C, 1.0, 0.0);
    cpu->ops->rope_backward(cpu, dqkv.c, cs.c, sn.c, B, T, 2 * H, D, 3 * C);
    gpu->ops->rope_backward(gpu, dqkv.g, cs.g, sn.g, B, T, 2 * H, D, 3 * C);
    compare("rope_backward (in place, ld 3C)", tag, &dqkv, TOL);
    tb_free(&dqkv);
    tb_free(&cs);
    tb_free(&sn);
}

static void test_attention(const shape *s, const char *tag, double limit) {
    const int B = s->B, T = s->T, C = s->C, H = s->H, D = C / H, N = B * T, ld = 3 * C;
    const size_t P = (size_t)B * H * T * T;
    tbuf qkv = tb_rand((size_t)N * ld, 1.0, 0.0), out = tb_poison((size_t)N * C), probs = tb_poison(P);
    cpu->ops->attention_forward(cpu, out.c, probs.c, qkv.c, qkv.c + C, qkv.c + 2 * C, ld, B, T, H, D);
    gpu->ops->attention_forward(gpu, out.g, probs.g, qkv.g, qkv.g + C, qkv.g + 2 * C, ld, B, T, H, D);
    compare("attention_forward (out)", tag, &out, limit);
    compare("attention_forward (probs)", tag, &probs, limit);
    tb_free(&out);

    /* backward from the CPU's probabilities on both sides */
    tbuf p = tb_from_cpu(&probs);
    tbuf dout = tb_rand((size_t)N * C, 1.0, 0.0), dqkv = tb_poison((size_t)N * ld), dprobs = tb_poison(P);
    cpu->ops->attention_backward(cpu, dqkv.c, dqkv.c + C, dqkv.c + 2 * C, dprobs.c, dout.c, qkv.c, qkv.c + C,
                                 qkv.c + 2 * C, p.c, ld, B, T, H, D);
    gpu->ops->attention_backward(gpu, dqkv.g, dqkv.g + C, dqkv.g + 2 * C, dprobs.g, dout.g, qkv.g, qkv.g + C,
                                 qkv.g + 2 * C, p.g, ld, B, T, H, D);
    compare("attention_backward (dq|dk|dv)", tag, &dqkv, limit);
    tb_free(&qkv);
    tb_free(&probs);
    tb_free(&p);
    tb_free(&dout);
    tb_free(&dqkv);
    tb_free(&dprobs);
}

static void test_swiglu(const shape *s, const char *tag) {
    const int N = s->B * s->T, F = s->F;
    tbuf ab = tb_rand((size_t)N * 2 * F, 2.0, 0.0), out = tb_poison((size_t)N * F);
    cpu->ops->swiglu_forward(cpu, out.c, ab.c, N, F);
    gpu->ops->swiglu_forward(gpu, out.g, ab.g, N, F);
    compare("swiglu_forward", tag, &out, TOL);
    tb_free(&ab);
    tb_free(&out);
    ab = tb_rand((size_t)N * 2 * F, 2.0, 0.0);
    tbuf dout = tb_rand((size_t)N * F, 1.0, 0.0), dab = tb_poison((size_t)N * 2 * F);
    cpu->ops->swiglu_backward(cpu, dab.c, dout.c, ab.c, N, F);
    gpu->ops->swiglu_backward(gpu, dab.g, dout.g, ab.g, N, F);
    compare("swiglu_backward", tag, &dab, TOL);
    tb_free(&ab);
    tb_free(&dout);
    tb_free(&dab);
}

static void test_residual(const shape *s, const char *tag) {
    const size_t n = (size_t)s->B * s->T * s->C + 3; /* not a multiple of 4: the tail */
    tbuf x = tb_rand(n, 1.0, 0.0), y = tb_rand(n, 1.0, 0.0), out = tb_poison(n);
    cpu->ops->residual_forward(cpu, out.c, x.c, y.c, n);
    gpu->ops->residual_forward(gpu, out.g, x.g, y.g, n);
    compare("residual_forward", tag, &out, TOL);
    cpu->ops->residual_forward(cpu, x.c, x.c, y.c, n); /* out == x */
    gpu->ops->residual_forward(gpu, x.g, x.g, y.g, n);
    compare("residual_forward (out == x)", tag, &x, TOL);
    tb_free(&x);
    tb_free(&y);
    tb_free(&out);
    tbuf dst = tb_rand(n, 1.0, 0.0), src = tb_rand(n, 1.0, 0.0);
    cpu->ops->add_inplace(cpu, dst.c, src.c, n);
    gpu->ops->add_inplace(gpu, dst.g, src.g, n);
    compare("add_inplace", tag, &dst, TOL);
    /* 4-byte-aligned, not 16: the scalar path */
    cpu->ops->add_inplace(cpu, dst.c + 1, src.c + 2, n - 2);
    gpu->ops->add_inplace(gpu, dst.g + 1, src.g + 2, n - 2);
    compare("add_inplace (unaligned)", tag, &dst, TOL);
    tb_free(&dst);
    tb_free(&src);
}

static void test_cross_entropy(const shape *s, const char *tag) {
    const int N = s->B * s->T, V = s->V;
    ibuf tgt = ib_rand((size_t)N, V);
    tbuf logits = tb_rand((size_t)N * V, 2.0, 0.5), losses = tb_poison((size_t)N), lse = tb_poison((size_t)N);
    cpu->ops->cross_entropy_forward(cpu, losses.c, lse.c, logits.c, tgt.c, N, V);
    gpu->ops->cross_entropy_forward(gpu, losses.g, lse.g, logits.g, tgt.g, N, V);
    compare("cross_entropy_forward (losses)", tag, &losses, TOL);
    compare("cross_entropy_forward (lse)", tag, &lse, TOL);
    tb_free(&logits);
    tb_free(&losses);
    tb_free(&lse);

    /* backward from the CPU's logsumexp on both sides; out of place, then in place */
    logits = tb_rand((size_t)N * V, 2.0, -0.5);
    losses = tb_poison((size_t)N);
    tbuf l0 = tb_poison((size_t)N);
    cpu->ops->cross_entropy_forward(cpu, losses.c, l0.c, logits.c, tgt.c, N, V);
    lse = tb_from_cpu(&l0);
    const float dloss = 1.0f / (float)N;
    tbuf dlogits = tb_poison((size_t)N * V);
    cpu->ops->cross_entropy_backward(cpu, dlogits.c, logits.c, lse.c, tgt.c, N, V, dloss);
    gpu->ops->cross_entropy_backward(gpu, dlogits.g, logits.g, lse.g, tgt.g, N, V, dloss);
    compare("cross_entropy_backward", tag, &dlogits, TOL);
    cpu->ops->cross_entropy_backward(cpu, logits.c, logits.c, lse.c, tgt.c, N, V, dloss);
    gpu->ops->cross_entropy_backward(gpu, logits.g, logits.g, lse.g, tgt.g, N, V, dloss);
    compare("cross_entropy_backward (in place)", tag, &logits, TOL);
    tb_free(&logits);
    tb_free(&losses);
    tb_free(&l0);
    tb_free(&lse);
    tb_free(&dlogits);
    ib_free(&tgt);
}

/* AdamW: the parameter change (not the parameters, whose size would hide a wrong update) and
 * both moments, after one step at t; `offset` floats into the buffers (1: not 16-byte aligned) */
static void test_adamw(size_t n, int t, size_t offset, const char *tag) {
    tbuf p = tb_rand(n, 1.0, 0.0), g = tb_rand(n, 1.0, 0.0), m = tb_rand(n, 0.1, 0.0), v = tb_rand(n, 1.0, 0.0);
    for (size_t i = 0; i < n; i++) v.host[i] = 0.01f * v.host[i] * v.host[i] + 1e-6f; /* second moment >= 0 */
    tb_upload(&v);
    tbuf p0 = tb_from_cpu(&p);
    const float lr = 1e-2f, b1 = 0.9f, b2 = 0.999f, eps = 1e-8f, wd = 0.1f;
    cpu->ops->adamw_step(cpu, p.c + offset, g.c + offset, m.c + offset, v.c + offset, n - offset, lr, b1, b2, eps,
                         wd, t);
    gpu->ops->adamw_step(gpu, p.g + offset, g.g + offset, m.g + offset, v.g + offset, n - offset, lr, b1, b2, eps,
                         wd, t);
    gpu->copy_to_host(gpu, p.host, p.g, n * sizeof(float));
    gpu->synchronize(gpu);
    /* the update: cuda's p - p0 against cpu's p - p0, in a buffer of its own */
    tbuf dp = tb_alloc(n);
    for (size_t i = 0; i < n; i++) {
        dp.c[i] = p.c[i] - p0.c[i];
        dp.host[i] = p.host[i] - p0.c[i];
    }
    gpu->copy_to_backend(gpu, dp.g, dp.host, n * sizeof(float));
    char what[64];
    snprintf(what, sizeof what, "adamw_step t=%d (update)", t);
    compare(what, tag, &dp, TOL);
    snprintf(what, sizeof what, "adamw_step t=%d (m)", t);
    compare(what, tag, &m, TOL);
    snprintf(what, sizeof what, "adamw_step t=%d (v)", t);
    compare(what, tag, &v, TOL);
    tb_free(&p);
    tb_free(&g);
    tb_free(&m);
    tb_free(&v);
    tb_free(&p0);
    tb_free(&dp);
}

static void test_shape(const shape *s) {
    char tag[96];
    snprintf(tag, sizeof tag, "[%s N=%dx%d C=%d H=%d F=%d V=%d]", s->name, s->B, s->T, s->C, s->H, s->F, s->V);
    gpu->precision = TLM_PRECISION_FP32;
    test_embedding(s, tag);
    test_rmsnorm(s, tag);
    test_matmul(s, tag, GEMM_TOL);
    test_rope(s, tag);
    test_attention(s, tag, GEMM_TOL);
    test_swiglu(s, tag);
    test_residual(s, tag);
    test_cross_entropy(s, tag);
    test_adamw((size_t)s->B * s->T * s->C + 5, 1, 0, tag);
    test_adamw((size_t)s->B * s->T * s->C + 5, 7, 1, tag);

    char tf32_tag[112];
    snprintf(tf32_tag, sizeof tf32_tag, "%s tf32", tag);
    gpu->precision = TLM_PRECISION_TF32;
    test_matmul(s, tf32_tag, TF32_TOL);
    test_attention(s, tf32_tag, TF32_TOL);
    gpu->precision = TLM_PRECISION_FP32;
}

/* ---- the tiny model against PyTorch ------------------------------------------------------------ */

static char fixtures[512], refs[600];

static const char *path(const char *dir, const char *name) {
    static char buf[1024];
    snprintf(buf, sizeof buf, "%s/%s", dir, name);
    return buf;
}

static double rel_err_f32(const float *a, const float *b, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        num += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        den += (double)b[i] * b[i];
    }
    return sqrt(num / (den > 0 ? den : 1));
}

static float *npy_as_f32(const char *file, int64_t *numel) {
    tlm_array a;
    die_on(tlm_npy_read(path(refs, file), &a), file);
    float *out = malloc((size_t)a.numel * sizeof(float));
    for (int64_t i = 0; i < a.numel; i++)
        out[i] = a.dtype == TLM_DTYPE_F64 ? (float)((double *)a.data)[i] : ((float *)a.data)[i];
    *numel = a.numel;
    tlm_array_free(&a);
    return out;
}

static int32_t *read_tokens(const char *file, int vocab, int *B, int *T) {
    tlm_array a;
    die_on(tlm_npy_read(path(fixtures, file), &a), file);
    int32_t *ids = malloc((size_t)a.numel * sizeof(int32_t));
    die_on(tlm_array_to_tokens(&a, ids, vocab, file), file);
    *B = (int)a.shape[0];
    *T = (int)a.shape[1];
    tlm_array_free(&a);
    return ids;
}

/* every tensor of a flat backend buffer against a safetensors reference; the worst one reported */
static void compare_flat(const tlm_model *m, const float *flat, const char *file, const char *label) {
    tlm_safetensors st;
    die_on(tlm_safetensors_read(path(refs, file), &st), file);
    float *host = malloc(m->flat_numel * sizeof(float));
    m->backend->copy_to_host(m->backend, host, flat, m->flat_numel * sizeof(float));
    m->backend->synchronize(m->backend);
    double worst = 0;
    const char *worst_name = "";
    int missing = 0;
    size_t not_finite = 0;
    for (int i = 0; i < m->num_tensors; i++) {
        const tlm_tensor_info *t = &m->tensors[i];
        const tlm_st_tensor *ref = tlm_safetensors_find(&st, t->name);
        if (!ref || (size_t)ref->numel != t->numel) {
            missing++;
            continue;
        }
        for (size_t j = 0; j < t->numel; j++) not_finite += !isfinite(host[t->offset + j]);
        float *r = malloc(t->numel * sizeof(float));
        die_on(tlm_st_tensor_to_f32(ref, r), t->name);
        double e = rel_err_f32(host + t->offset, r, t->numel);
        if (!(e <= worst)) { /* NaN propagates as the worst */
            worst = e;
            worst_name = t->name;
        }
        free(r);
    }
    check(missing == 0 && not_finite == 0 && worst <= FIXTURE_TOL,
          "%-36s %-28s all %d tensors, worst %s: rel err %.3e (limit %.0e)%s", label, "[tiny model, cuda]",
          m->num_tensors, worst_name, worst, FIXTURE_TOL, missing || not_finite ? " MISSING/NOT FINITE" : "");
    free(host);
    tlm_safetensors_free(&st);
}

static void test_fixture(const char *sub) {
    snprintf(refs, sizeof refs, "%s%s%s", fixtures, sub[0] ? "/" : "", sub);
    const char *vs = sub[0] ? "vs f64 PyTorch" : "vs f32 PyTorch";
    gpu->precision = TLM_PRECISION_FP32;
    tlm_config cfg;
    die_on(tlm_config_preset("tiny", &cfg), "tiny");
    tlm_model *m;
    die_on(tlm_model_create(&m, &cfg, gpu), "model on cuda");
    die_on(tlm_model_load(m, path(fixtures, "weights.safetensors")), "weights");
    int B, T, Bt, Tt;
    int32_t *inputs = read_tokens("inputs.npy", cfg.vocab_size, &B, &T);
    int32_t *targets = read_tokens("targets.npy", cfg.vocab_size, &Bt, &Tt);
    TLM_ASSERT(B == Bt && T == Tt);
    char what[96];

    float loss;
    die_on(tlm_model_forward(m, inputs, targets, B, T, &loss), "forward");
    int64_t n;
    float *ref_loss = npy_as_f32("loss.npy", &n);
    double e = fabs((double)loss - ref_loss[0]) / fabs((double)ref_loss[0]);
    snprintf(what, sizeof what, "model loss %s", vs);
    check(e <= FIXTURE_TOL, "%-36s %-28s %.7f vs %.7f: rel err %.3e (limit %.0e)", what, "[tiny model, cuda]", loss,
          ref_loss[0], e, FIXTURE_TOL);

    float *ref_logits = npy_as_f32("logits.npy", &n);
    TLM_ASSERT(n == (int64_t)B * T * cfg.vocab_size);
    float *logits = malloc((size_t)n * sizeof(float));
    die_on(tlm_model_copy_logits(m, logits), "logits");
    e = rel_err_f32(logits, ref_logits, (size_t)n);
    snprintf(what, sizeof what, "model logits %s", vs);
    check(e <= FIXTURE_TOL, "%-36s %-28s rel err %.3e (limit %.0e)", what, "[tiny model, cuda]", e, FIXTURE_TOL);

    die_on(tlm_model_backward(m), "backward");
    snprintf(what, sizeof what, "model gradients %s", vs);
    compare_flat(m, m->grads, "grads.safetensors", what);

    tlm_adamw_config opt = tlm_adamw_defaults();
    for (int i = 0; i < 3; i++) {
        if (i > 0) {
            die_on(tlm_model_forward(m, inputs, targets, B, T, NULL), "forward");
            die_on(tlm_model_backward(m), "backward");
        }
        die_on(tlm_model_adamw_step(m, &opt), "adamw");
    }
    snprintf(what, sizeof what, "model 3-step weights %s", vs);
    compare_flat(m, m->params, "weights_after_3_steps.safetensors", what);

    free(ref_loss);
    free(ref_logits);
    free(logits);
    free(inputs);
    free(targets);
    tlm_model_free(m);
}

int main(void) {
    if (!tlm_cuda_available() || tlm_backend_cuda_create(&gpu, 0) != TLM_OK) {
        printf("no GPU: skipped (%s)\n", tlm_cuda_available() ? tlm_last_error() : "no CUDA device");
        return 77;
    }
    die_on(tlm_backend_cpu_create(&cpu, 0), "cpu backend");
#ifdef TLM_HAVE_CUDA
    printf("# cuda: %s; cpu: OpenBLAS\n", tlm_cuda_device_name(gpu));
#endif
    check(gpu->range_push && gpu->range_pop, "%-36s %-28s", "NVTX range_push/range_pop present", "");
    gpu->range_push(gpu, "test_gpu_ops");
    gpu->range_pop(gpu);

    const shape shapes[] = {
        {"tiny", 3, 17, 64, 4, 172, 512},
        {"odd", 2, 13, 66, 3, 171, 509},   /* D 22: nothing a multiple of 4 */
        {"small", 2, 256, 768, 12, 3072, 10000},
    };
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) test_shape(&shapes[i]);

    const char *env = getenv("TLM_FIXTURES");
    snprintf(fixtures, sizeof fixtures, "%s/tiny", env ? env : "tests/fixtures");
    test_fixture("");
    test_fixture("f64");

    check(gpu->mem_current_total == gpu->mem_current[TLM_MEM_WORKSPACE], "%-36s %-28s %zu bytes still allocated",
          "every test buffer freed", "", gpu->mem_current_total - gpu->mem_current[TLM_MEM_WORKSPACE]);
    tlm_backend_destroy(gpu);
    tlm_backend_destroy(cpu);
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
