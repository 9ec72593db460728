/* test_gpu_ops.c — the CUDA backend against the CPU backend, which is the spec: every op runs on
 * both backends (created through the public interface) on the same random inputs, drawn afresh
 * for each check and never zero; outputs that an op overwrites are poisoned with NaN (all bytes
 * 0xFF, a NaN in float32, bf16 and fp16 alike) first and every element must come back finite
 * (written). Agreement is the normalized error ||cuda - cpu|| / ||cpu|| over each output, both
 * widened to float32. Then the whole tiny model runs on CUDA (fp32) against the PyTorch fixtures
 * (tests/fixtures/tiny, as test_model_fixture.c reads them): loss, logits, every gradient, and the
 * weights after 3 AdamW steps.
 *
 * Precision modes (backend.h, tlm_precision): every op runs in fp32; the GEMM ops also in TF32;
 * every op that takes a dtype also with bf16 and fp16 tensors (relu and layernorm, the ToyModel's
 * ops, included; relu is exact, so it must match bit for bit). Inputs are drawn in float32 and
 * rounded to the dtype here (round to nearest even), so both backends see the same bits. cast is
 * checked bit for bit (against the CPU and against this file's own rounding), grad_unscale by
 * its count of injected inf/NaN.
 *
 * Shapes: the tiny model's (N = 3*17, C 64, H 4, D 16, F 172, V 512), one whose sizes are not
 * multiples of 4 (the kernels' scalar paths, 8-byte-aligned fp32 GEMM operands, 4-byte-aligned
 * 16-bit ones), and one of the small model's (B 2, T 256, C 768, H 12, F 3072, V 10000).
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
#include "fixture_checks.h"
#include "tlm/rng.h"
#include "tlm/safetensors.h"
#include "test_check.h"

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
 *   attention GEMMs may run strict fp32 kernels (FAST_TF32 allows, not forces, TF32).
 * LOWP_TOL: bf16 and fp16. Both backends read the same low-precision inputs and compute in fp32
 *   (products of two bf16/fp16 values are exact in fp32), so they differ only by fp32 rounding
 *   (order of sums, exp); an output rounded to bf16 (fp16) then differs, where it does, by one
 *   ulp, 2^-8 (2^-11) relative, in a few elements. Attention chains three rounded GEMMs through
 *   the softmax. 1e-2 is far above those and far below a wrong index, layout or dtype (O(1)). */
#define TOL 1e-5
#define GEMM_TOL 2e-5
#define TF32_TOL 1e-3
#define LOWP_TOL 1e-2
#define FIXTURE_TOL 1e-5

static tlm_backend *cpu, *gpu;
static uint64_t rng = 0x6B0A7;

/* ---- bf16 and fp16 on the host: round to nearest even, and widen ------------------------------ */

static uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static float f32_from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static uint16_t to_bf16(float f) {
    uint32_t u = f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* NaN stays NaN */
    u += 0x7fffu + ((u >> 16) & 1u); /* ties to even; overflow carries into inf */
    return (uint16_t)(u >> 16);
}

static float from_bf16(uint16_t h) { return f32_from_bits((uint32_t)h << 16); }

static uint16_t to_f16(float f) {
    const uint32_t u = f32_bits(f), sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);  /* NaN */
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* >= 65520: inf (and inf itself) */
    if (a < 0x38800000u) {                                    /* below 2^-14: subnormal or 0 */
        const int e = (int)(a >> 23);
        if (e < 102) return (uint16_t)sign; /* below 2^-25: 0 */
        const uint32_t m = (a & 0x7fffffu) | 0x800000u;
        const int shift = 126 - e; /* value / 2^-24 = m / 2^shift */
        uint32_t r = m >> shift;
        const uint32_t rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (r & 1u))) r++;
        return (uint16_t)(sign | r);
    }
    uint32_t r = ((((a >> 23) - 112u) << 10) | ((a & 0x7fffffu) >> 13));
    const uint32_t rem = a & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (r & 1u))) r++;
    return (uint16_t)(sign | r);
}

static float from_f16(uint16_t h) {
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0x1f) return f32_from_bits(sign | 0x7f800000u | (m << 13));
    if (e == 0) return (sign ? -1.0f : 1.0f) * (float)m * 0x1p-24f;
    return f32_from_bits(sign | ((e + 112u) << 23) | (m << 13));
}

static const char *dt_name(tlm_dtype dt) {
    return dt == TLM_DTYPE_BF16 ? "bf16" : dt == TLM_DTYPE_F16 ? "fp16" : "fp32";
}

/* element i of a raw dt array, widened */
static float get_f32(tlm_dtype dt, const void *raw, size_t i) {
    if (dt == TLM_DTYPE_BF16) return from_bf16(((const uint16_t *)raw)[i]);
    if (dt == TLM_DTYPE_F16) return from_f16(((const uint16_t *)raw)[i]);
    return ((const float *)raw)[i];
}

/* ---- buffers on both backends --------------------------------------------------------------- */

typedef struct {
    size_t n;
    tlm_dtype dt;
    size_t es;   /* bytes per element */
    float *host; /* the values as float32: what was uploaded (rounded to dt), then the CUDA result */
    void *raw;   /* host staging of the dt elements */
    void *c;     /* CPU backend memory (host) */
    void *g;     /* CUDA backend memory (device) */
} tbuf;

/* element i of a buffer on each side, as a pointer (views into fused tensors, offsets) */
#define AT_C(b, i) ((void *)((char *)(b).c + (size_t)(i) * (b).es))
#define AT_G(b, i) ((void *)((char *)(b).g + (size_t)(i) * (b).es))
/* the CPU side of a float32 buffer */
#define FC(b) ((float *)(b).c)

static tbuf tb_alloc(size_t n, tlm_dtype dt) {
    const size_t es = tlm_dtype_size(dt);
    tbuf b = {n, dt, es, malloc(n * sizeof(float) + 1), malloc(n * es + 1),
              tlm_alloc(cpu, n * es, TLM_MEM_ACTIVATIONS, "test"), tlm_alloc(gpu, n * es, TLM_MEM_ACTIVATIONS, "test")};
    if (!b.host || !b.raw || !b.c || !b.g) die_on(TLM_ERR_OUT_OF_MEMORY, "test buffer");
    return b;
}

/* element i = v rounded to the buffer's dtype; host[i] = the rounded value */
static void tb_set(tbuf *b, size_t i, float v) {
    if (b->dt == TLM_DTYPE_BF16) ((uint16_t *)b->raw)[i] = to_bf16(v);
    else if (b->dt == TLM_DTYPE_F16) ((uint16_t *)b->raw)[i] = to_f16(v);
    else ((float *)b->raw)[i] = v;
    b->host[i] = get_f32(b->dt, b->raw, i);
}

/* the staged elements to both backends */
static void tb_upload(tbuf *b) {
    memcpy(b->c, b->raw, b->n * b->es);
    tlm_copy_to_backend(gpu, b->g, b->raw, b->n * b->es);
}

/* normal(0, scale) + shift rounded to dt, the same bits on both backends; a 0 is redrawn */
static tbuf tb_rand(size_t n, double scale, double shift, tlm_dtype dt) {
    tbuf b = tb_alloc(n, dt);
    for (size_t i = 0; i < n; i++) {
        do tb_set(&b, i, (float)(shift + scale * tlm_rng_normal(&rng)));
        while (b.host[i] == 0.0f);
    }
    tb_upload(&b);
    return b;
}

/* an output: every byte 0xFF (a NaN) on both backends */
static tbuf tb_poison(size_t n, tlm_dtype dt) {
    tbuf b = tb_alloc(n, dt);
    memset(b.raw, 0xFF, n * b.es);
    for (size_t i = 0; i < n; i++) b.host[i] = NAN;
    tb_upload(&b);
    return b;
}

/* a copy of the CPU side's current contents on both backends (inputs made by a CPU op) */
static tbuf tb_from_cpu(const tbuf *src) {
    tbuf b = tb_alloc(src->n, src->dt);
    memcpy(b.raw, src->c, src->n * src->es);
    for (size_t i = 0; i < b.n; i++) b.host[i] = get_f32(b.dt, b.raw, i);
    tb_upload(&b);
    return b;
}

static void tb_free(tbuf *b) {
    free(b->host);
    free(b->raw);
    tlm_free(cpu, b->c);
    tlm_free(gpu, b->g);
    memset(b, 0, sizeof *b);
}

/* the CUDA side into raw, widened into host */
static void tb_fetch(tbuf *b) {
    tlm_copy_to_host(gpu, b->raw, b->g, b->n * b->es);
    tlm_synchronize(gpu);
    for (size_t i = 0; i < b->n; i++) b->host[i] = get_f32(b->dt, b->raw, i);
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
    tlm_copy_to_backend(gpu, b.g, h, n * sizeof(int32_t));
    free(h);
    return b;
}

static void ib_free(ibuf *b) {
    tlm_free(cpu, b->c);
    tlm_free(gpu, b->g);
}

/* Fetches the CUDA result and compares it with the CPU's, both widened to float32: one check line. */
static void compare(const char *what, const char *tag, tbuf *b, double limit) {
    tb_fetch(b);
    size_t unwritten = 0, cpu_bad = 0;
    double num = 0, den = 0;
    for (size_t i = 0; i < b->n; i++) {
        const float cv = get_f32(b->dt, b->c, i);
        if (!isfinite(b->host[i])) unwritten++;
        if (!isfinite(cv)) cpu_bad++;
        double d = (double)b->host[i] - cv;
        num += d * d;
        den += (double)cv * cv;
    }
    double err = sqrt(num / (den > 0 ? den : 1));
    bool ok = unwritten == 0 && cpu_bad == 0 && err <= limit;
    if (unwritten || cpu_bad)
        check(ok, "%-36s %-33s %zu of %zu not finite on cuda, %zu on cpu", what, tag, unwritten, b->n, cpu_bad);
    else
        check(ok, "%-36s %-33s rel err %.3e (limit %.0e)", what, tag, err, limit);
}

/* ---- the ops ----------------------------------------------------------------------------------- */

typedef struct {
    const char *name;
    int B, T, C, H, F, V;
} shape;

static const tlm_dtype F32 = TLM_DTYPE_F32;

static void test_embedding(const shape *s, const char *tag) {
    const int N = s->B * s->T, C = s->C, V = s->V;
    ibuf tok = ib_rand((size_t)N, V);
    tbuf wte = tb_rand((size_t)V * C, 1.0, 0.0, F32), out = tb_poison((size_t)N * C, F32);
    tlm_embedding_forward(cpu, out.c, tok.c, wte.c, N, C);
    tlm_embedding_forward(gpu, out.g, tok.g, wte.g, N, C);
    compare("embedding_forward", tag, &out, TOL);
    tb_free(&wte);
    tb_free(&out);
    ib_free(&tok);

    /* few distinct tokens, so rows repeat and the scatter-add really accumulates */
    tok = ib_rand((size_t)N, V < 7 ? V : 7);
    tbuf dout = tb_rand((size_t)N * C, 1.0, 0.0, F32), dwte = tb_poison((size_t)V * C, F32);
    tlm_embedding_backward(cpu, dwte.c, dout.c, tok.c, N, V, C);
    tlm_embedding_backward(gpu, dwte.g, dout.g, tok.g, N, V, C);
    compare("embedding_backward (dwte)", tag, &dwte, TOL);
    tb_free(&dout);
    tb_free(&dwte);
    ib_free(&tok);
}

/* out and dout of dtype dt; x, w, rstd, dx, dw float32 */
static void test_rmsnorm(const shape *s, const char *tag, tlm_dtype dt, double limit) {
    const int N = s->B * s->T, C = s->C;
    const float eps = 1e-5f;
    tbuf x = tb_rand((size_t)N * C, 1.5, 0.2, F32), w = tb_rand((size_t)C, 0.1, 1.0, F32);
    tbuf out = tb_poison((size_t)N * C, dt), rstd = tb_poison((size_t)N, F32);
    tlm_rmsnorm_forward(cpu, out.c, rstd.c, x.c, w.c, N, C, eps, dt);
    tlm_rmsnorm_forward(gpu, out.g, rstd.g, x.g, w.g, N, C, eps, dt);
    compare("rmsnorm_forward (out)", tag, &out, limit);
    compare("rmsnorm_forward (rstd)", tag, &rstd, limit);
    tb_free(&x);
    tb_free(&w);
    tb_free(&out);
    tb_free(&rstd);

    /* backward: fresh x, w; rstd from the CPU forward on both; dx accumulates onto random values */
    x = tb_rand((size_t)N * C, 1.0, -0.1, F32);
    w = tb_rand((size_t)C, 0.1, 1.0, F32);
    out = tb_poison((size_t)N * C, dt);
    tbuf r0 = tb_poison((size_t)N, F32);
    tlm_rmsnorm_forward(cpu, out.c, r0.c, x.c, w.c, N, C, eps, dt);
    rstd = tb_from_cpu(&r0);
    tbuf dout = tb_rand((size_t)N * C, 1.0, 0.0, dt), dx = tb_rand((size_t)N * C, 1.0, 0.0, F32);
    tbuf dw = tb_poison((size_t)C, F32);
    tlm_rmsnorm_backward(cpu, dx.c, dw.c, dout.c, x.c, w.c, rstd.c, N, C, dt);
    tlm_rmsnorm_backward(gpu, dx.g, dw.g, dout.g, x.g, w.g, rstd.g, N, C, dt);
    compare("rmsnorm_backward (dx +=)", tag, &dx, limit);
    compare("rmsnorm_backward (dw)", tag, &dw, limit);
    tb_free(&x);
    tb_free(&w);
    tb_free(&out);
    tb_free(&r0);
    tb_free(&rstd);
    tb_free(&dout);
    tb_free(&dx);
    tb_free(&dw);
}

static void test_matmul(const shape *s, const char *tag, tlm_precision pm, double limit) {
    const tlm_dtype dt = tlm_precision_act_dtype(pm);
    const int N = s->B * s->T, C = s->C, F = s->F, V = s->V;
    const int dims[][2] = {{C, 3 * C}, {C, C}, {C, 2 * F}, {F, C}, {C, V}}; /* (in, out) of the model's GEMMs */
    for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++) {
        const int in = dims[i][0], out = dims[i][1];
        char what[64];
        tbuf x = tb_rand((size_t)N * in, 1.0, 0.0, dt), w = tb_rand((size_t)out * in, 0.05, 0.0, dt);
        tbuf y = tb_poison((size_t)N * out, dt);
        tlm_matmul_forward(cpu, y.c, NULL, x.c, w.c, N, in, out, pm);
        tlm_matmul_forward(gpu, y.g, NULL, x.g, w.g, N, in, out, pm);
        snprintf(what, sizeof what, "matmul_forward %dx%d", in, out);
        compare(what, tag, &y, limit);

        if (out == C) { /* the residual connections (output_proj, w2): y float32 = residual + x W^T */
            tbuf res = tb_rand((size_t)N * out, 1.0, 0.0, F32), yr = tb_poison((size_t)N * out, F32);
            tlm_matmul_forward(cpu, yr.c, res.c, x.c, w.c, N, in, out, pm);
            tlm_matmul_forward(gpu, yr.g, res.g, x.g, w.g, N, in, out, pm);
            snprintf(what, sizeof what, "matmul_forward %dx%d +res", in, out);
            compare(what, tag, &yr, limit);
            snprintf(what, sizeof what, "matmul_forward %dx%d res kept", in, out);
            compare(what, tag, &res, 0.0); /* the input unchanged: equal to the CPU's, exactly */
            tlm_matmul_forward(cpu, res.c, res.c, x.c, w.c, N, in, out, pm); /* y == residual */
            tlm_matmul_forward(gpu, res.g, res.g, x.g, w.g, N, in, out, pm);
            snprintf(what, sizeof what, "matmul_forward %dx%d +res in place", in, out);
            compare(what, tag, &res, limit);
            tb_free(&res);
            tb_free(&yr);
        }

        tbuf dy = tb_rand((size_t)N * out, 1.0, 0.0, dt), dx = tb_poison((size_t)N * in, dt);
        tbuf dw = tb_poison((size_t)out * in, F32);
        tlm_matmul_backward(cpu, dx.c, dw.c, dy.c, x.c, w.c, N, in, out, pm);
        tlm_matmul_backward(gpu, dx.g, dw.g, dy.g, x.g, w.g, N, in, out, pm);
        snprintf(what, sizeof what, "matmul_backward %dx%d (dx)", in, out);
        compare(what, tag, &dx, limit);
        snprintf(what, sizeof what, "matmul_backward %dx%d (dw)", in, out);
        compare(what, tag, &dw, limit);
        if (i == 0) { /* dx == NULL: only dw */
            tbuf dw2 = tb_poison((size_t)out * in, F32);
            tlm_matmul_backward(cpu, NULL, dw2.c, dy.c, x.c, w.c, N, in, out, pm);
            tlm_matmul_backward(gpu, NULL, dw2.g, dy.g, x.g, w.g, N, in, out, pm);
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

/* dst dt = round(src float32): bit for bit against the CPU and against to_bf16/to_f16 above, on
 * random values of several magnitudes and on the edges (ties, fp16 overflow and subnormals, inf);
 * n not a multiple of 8 (the tail), then from an unaligned offset */
static void test_cast(const shape *s, const char *tag, tlm_dtype dt) {
    const size_t n = (size_t)s->B * s->T * s->C + 5;
    tbuf src = tb_alloc(n, F32), dst = tb_poison(n, dt);
    const float edges[] = {1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f, 1.0f + 0x1p-11f, 1.0f + 3 * 0x1p-11f, -1.0f - 0x1p-9f,
                           65504.0f, 65519.0f, 65520.0f, 65536.0f, -1e5f, 3e38f, 0x1p-24f, 0x1p-25f, 3 * 0x1p-26f,
                           5.9e-8f, 1e-6f, 2e-38f, -0.0f, 0.0f, INFINITY, -INFINITY, 0x1.fffffep127f};
    const size_t ne = sizeof edges / sizeof edges[0];
    for (size_t i = 0; i < n; i++) {
        const double scale = i % 3 == 0 ? 1.0 : i % 3 == 1 ? 1e-3 : 3e4;
        ((float *)src.raw)[i] = i < ne ? edges[i] : (float)(scale * tlm_rng_normal(&rng));
        src.host[i] = ((float *)src.raw)[i];
    }
    tb_upload(&src);
    char what[64];
    for (int pass = 0; pass < 2; pass++) {
        const size_t off = pass ? 3 : 0; /* 3: 12 bytes into src, 6 (or 12) into dst */
        tlm_cast(cpu, AT_C(dst, off), (const float *)src.c + off, n - off, dt);
        tlm_cast(gpu, AT_G(dst, off), (const float *)src.g + off, n - off, dt);
        tb_fetch(&dst);
        size_t diff_cpu = 0, diff_ref = 0, first = n;
        for (size_t i = off; i < n; i++) {
            const float v = src.host[i];
            uint32_t ref, got, c;
            if (dt == TLM_DTYPE_F32) {
                ref = f32_bits(v);
                got = ((uint32_t *)dst.raw)[i];
                c = ((uint32_t *)dst.c)[i];
            } else {
                ref = dt == TLM_DTYPE_BF16 ? to_bf16(v) : to_f16(v);
                got = ((uint16_t *)dst.raw)[i];
                c = ((uint16_t *)dst.c)[i];
            }
            if (got != c) diff_cpu++;
            if (got != ref) diff_ref++;
            if ((got != c || got != ref) && first == n) first = i;
        }
        snprintf(what, sizeof what, "cast%s (bitwise)", pass ? " (unaligned)" : "");
        if (diff_cpu || diff_ref)
            check(false, "%-36s %-33s %zu of %zu differ from cpu, %zu from RNE; first at %zu: %.9g", what, tag,
                  diff_cpu, n - off, diff_ref, first, (double)src.host[first]);
        else
            check(true, "%-36s %-33s all %zu equal to cpu and to RNE", what, tag, n - off);
    }
    tb_free(&src);
    tb_free(&dst);
}

static void test_rope(const shape *s, const char *tag, tlm_dtype dt, double limit) {
    const int B = s->B, T = s->T, C = s->C, H = s->H, D = C / H, half = D / 2, N = B * T;
    const int T_max = T + 3; /* the table is longer than the sequence, as the model's */
    tbuf cs = tb_alloc((size_t)T_max * half, F32), sn = tb_alloc((size_t)T_max * half, F32);
    for (int t = 0; t < T_max; t++)
        for (int k = 0; k < half; k++) {
            double angle = t * pow(10000.0, -2.0 * k / D);
            tb_set(&cs, (size_t)t * half + k, (float)cos(angle));
            tb_set(&sn, (size_t)t * half + k, (float)sin(angle));
        }
    tb_upload(&cs);
    tb_upload(&sn);
    /* on the fused (N, 3C) rows, q and k = 2H heads, as the model calls it; v must stay as it is */
    tbuf qkv = tb_rand((size_t)N * 3 * C, 1.0, 0.0, dt);
    tlm_rope_forward(cpu, qkv.c, cs.c, sn.c, B, T, 2 * H, D, 3 * C, dt);
    tlm_rope_forward(gpu, qkv.g, cs.g, sn.g, B, T, 2 * H, D, 3 * C, dt);
    compare("rope_forward (in place, ld 3C)", tag, &qkv, limit);
    tb_free(&qkv);
    tbuf dqkv = tb_rand((size_t)N * 3 * C, 1.0, 0.0, dt);
    tlm_rope_backward(cpu, dqkv.c, cs.c, sn.c, B, T, 2 * H, D, 3 * C, dt);
    tlm_rope_backward(gpu, dqkv.g, cs.g, sn.g, B, T, 2 * H, D, 3 * C, dt);
    compare("rope_backward (in place, ld 3C)", tag, &dqkv, limit);
    tb_free(&dqkv);
    tb_free(&cs);
    tb_free(&sn);
}

static void test_attention(const shape *s, const char *tag, tlm_precision pm, double limit) {
    const tlm_dtype dt = tlm_precision_act_dtype(pm);
    const int B = s->B, T = s->T, C = s->C, H = s->H, D = C / H, N = B * T, ld = 3 * C;
    const size_t P = (size_t)B * H * T * T;
    tbuf qkv = tb_rand((size_t)N * ld, 1.0, 0.0, dt), out = tb_poison((size_t)N * C, dt), probs = tb_poison(P, dt);
    tlm_attention_forward(cpu, out.c, probs.c, qkv.c, AT_C(qkv, C), AT_C(qkv, 2 * C), ld, B, T, H, D, pm);
    tlm_attention_forward(gpu, out.g, probs.g, qkv.g, AT_G(qkv, C), AT_G(qkv, 2 * C), ld, B, T, H, D, pm);
    compare("attention_forward (out)", tag, &out, limit);
    compare("attention_forward (probs)", tag, &probs, limit);
    /* the causal mask: exact zeros above the diagonal (compare fetched the CUDA probs) */
    size_t nonzero = 0;
    for (size_t r = 0; r < (size_t)B * H * T; r++)
        for (int j = (int)(r % T) + 1; j < T; j++) nonzero += probs.host[r * T + j] != 0.0f;
    check(nonzero == 0, "%-36s %-33s %zu nonzero", "attention_forward (probs causal 0s)", tag, nonzero);
    tb_free(&out);

    /* backward from the CPU's probabilities on both sides */
    tbuf p = tb_from_cpu(&probs);
    tbuf dout = tb_rand((size_t)N * C, 1.0, 0.0, dt), dqkv = tb_poison((size_t)N * ld, dt), dprobs = tb_poison(P, dt);
    tlm_attention_backward(cpu, dqkv.c, AT_C(dqkv, C), AT_C(dqkv, 2 * C), dprobs.c, dout.c, qkv.c,
                                 AT_C(qkv, C), AT_C(qkv, 2 * C), p.c, ld, B, T, H, D, pm);
    tlm_attention_backward(gpu, dqkv.g, AT_G(dqkv, C), AT_G(dqkv, 2 * C), dprobs.g, dout.g, qkv.g,
                                 AT_G(qkv, C), AT_G(qkv, 2 * C), p.g, ld, B, T, H, D, pm);
    compare("attention_backward (dq|dk|dv)", tag, &dqkv, limit);
    tb_free(&qkv);
    tb_free(&probs);
    tb_free(&p);
    tb_free(&dout);
    tb_free(&dqkv);
    tb_free(&dprobs);
}

static void test_swiglu(const shape *s, const char *tag, tlm_dtype dt, double limit) {
    const int N = s->B * s->T, F = s->F;
    tbuf ab = tb_rand((size_t)N * 2 * F, 2.0, 0.0, dt), out = tb_poison((size_t)N * F, dt);
    tlm_swiglu_forward(cpu, out.c, ab.c, N, F, dt);
    tlm_swiglu_forward(gpu, out.g, ab.g, N, F, dt);
    compare("swiglu_forward", tag, &out, limit);
    tb_free(&ab);
    tb_free(&out);
    ab = tb_rand((size_t)N * 2 * F, 2.0, 0.0, dt);
    tbuf dout = tb_rand((size_t)N * F, 1.0, 0.0, dt), dab = tb_poison((size_t)N * 2 * F, dt);
    tlm_swiglu_backward(cpu, dab.c, dout.c, ab.c, N, F, dt);
    tlm_swiglu_backward(gpu, dab.g, dout.g, ab.g, N, F, dt);
    compare("swiglu_backward", tag, &dab, limit);
    tb_free(&ab);
    tb_free(&dout);
    tb_free(&dab);
}

static void test_cross_entropy(const shape *s, const char *tag, tlm_dtype dt, double limit) {
    const int N = s->B * s->T, V = s->V;
    ibuf tgt = ib_rand((size_t)N, V);
    tbuf logits = tb_rand((size_t)N * V, 2.0, 0.5, dt), losses = tb_poison((size_t)N, F32);
    tbuf lse = tb_poison((size_t)N, F32);
    tlm_cross_entropy_forward(cpu, losses.c, lse.c, logits.c, tgt.c, N, V, dt);
    tlm_cross_entropy_forward(gpu, losses.g, lse.g, logits.g, tgt.g, N, V, dt);
    compare("cross_entropy_forward (losses)", tag, &losses, limit);
    compare("cross_entropy_forward (lse)", tag, &lse, limit);
    tb_free(&logits);
    tb_free(&losses);
    tb_free(&lse);

    /* backward from the CPU's logsumexp on both sides; out of place, then in place */
    logits = tb_rand((size_t)N * V, 2.0, -0.5, dt);
    losses = tb_poison((size_t)N, F32);
    tbuf l0 = tb_poison((size_t)N, F32);
    tlm_cross_entropy_forward(cpu, losses.c, l0.c, logits.c, tgt.c, N, V, dt);
    lse = tb_from_cpu(&l0);
    const float dloss = 1.0f / (float)N;
    tbuf dlogits = tb_poison((size_t)N * V, dt);
    tlm_cross_entropy_backward(cpu, dlogits.c, logits.c, lse.c, tgt.c, N, V, dloss, dt);
    tlm_cross_entropy_backward(gpu, dlogits.g, logits.g, lse.g, tgt.g, N, V, dloss, dt);
    compare("cross_entropy_backward", tag, &dlogits, limit);
    tlm_cross_entropy_backward(cpu, logits.c, logits.c, lse.c, tgt.c, N, V, dloss, dt);
    tlm_cross_entropy_backward(gpu, logits.g, logits.g, lse.g, tgt.g, N, V, dloss, dt);
    compare("cross_entropy_backward (in place)", tag, &logits, limit);
    tb_free(&logits);
    tb_free(&losses);
    tb_free(&l0);
    tb_free(&lse);
    tb_free(&dlogits);
    ib_free(&tgt);
}

/* ReLU (the ToyModel's): exact in every dtype, so CUDA must give the CPU's bits (limit 0); n with a
 * tail past the 16-byte vectors, then from an unaligned offset, then in place */
static void test_relu(const shape *s, const char *tag, tlm_dtype dt) {
    const size_t n = (size_t)s->B * s->T * s->C + 3;
    tbuf x = tb_rand(n, 1.0, 0.0, dt), out = tb_poison(n, dt);
    tlm_relu_forward(cpu, out.c, x.c, n, dt);
    tlm_relu_forward(gpu, out.g, x.g, n, dt);
    compare("relu_forward", tag, &out, 0.0);
    tbuf dout = tb_rand(n, 1.0, 0.0, dt), dx = tb_poison(n, dt);
    tlm_relu_backward(cpu, dx.c, dout.c, x.c, n, dt);
    tlm_relu_backward(gpu, dx.g, dout.g, x.g, n, dt);
    compare("relu_backward", tag, &dx, 0.0);
    tbuf out1 = tb_poison(n, dt);
    tlm_relu_forward(cpu, AT_C(out1, 1), AT_C(x, 1), n - 1, dt);
    tlm_relu_forward(gpu, AT_G(out1, 1), AT_G(x, 1), n - 1, dt);
    tlm_relu_forward(cpu, out1.c, x.c, 1, dt); /* element 0, so that every element is written */
    tlm_relu_forward(gpu, out1.g, x.g, 1, dt);
    compare("relu_forward (unaligned)", tag, &out1, 0.0);
    tlm_relu_forward(cpu, x.c, x.c, n, dt);
    tlm_relu_forward(gpu, x.g, x.g, n, dt);
    compare("relu_forward (in place)", tag, &x, 0.0);
    tb_free(&x);
    tb_free(&out);
    tb_free(&dout);
    tb_free(&dx);
    tb_free(&out1);
}

/* LayerNorm (the ToyModel's): x, dout, dx of dtype dt; out, mean, rstd, w, b, dw, db float32 */
static void test_layernorm(const shape *s, const char *tag, tlm_dtype dt, double limit) {
    const int N = s->B * s->T, C = s->C;
    const float eps = 1e-5f;
    tbuf x = tb_rand((size_t)N * C, 1.5, 0.3, dt), w = tb_rand((size_t)C, 0.1, 1.0, F32);
    tbuf b = tb_rand((size_t)C, 0.1, 0.0, F32), out = tb_poison((size_t)N * C, F32);
    tbuf mean = tb_poison((size_t)N, F32), rstd = tb_poison((size_t)N, F32);
    tlm_layernorm_forward(cpu, out.c, mean.c, rstd.c, x.c, w.c, b.c, N, C, eps, dt);
    tlm_layernorm_forward(gpu, out.g, mean.g, rstd.g, x.g, w.g, b.g, N, C, eps, dt);
    compare("layernorm_forward (out)", tag, &out, limit);
    compare("layernorm_forward (mean)", tag, &mean, limit);
    compare("layernorm_forward (rstd)", tag, &rstd, limit);

    /* backward from the CPU's statistics on both sides */
    tbuf m0 = tb_from_cpu(&mean), r0 = tb_from_cpu(&rstd);
    tbuf dout = tb_rand((size_t)N * C, 1.0, 0.0, dt), dx = tb_poison((size_t)N * C, dt);
    tbuf dw = tb_poison((size_t)C, F32), db = tb_poison((size_t)C, F32);
    tlm_layernorm_backward(cpu, dx.c, dw.c, db.c, dout.c, x.c, w.c, m0.c, r0.c, N, C, dt);
    tlm_layernorm_backward(gpu, dx.g, dw.g, db.g, dout.g, x.g, w.g, m0.g, r0.g, N, C, dt);
    compare("layernorm_backward (dx)", tag, &dx, limit);
    compare("layernorm_backward (dw)", tag, &dw, limit);
    compare("layernorm_backward (db)", tag, &db, limit);
    tb_free(&x);
    tb_free(&w);
    tb_free(&b);
    tb_free(&out);
    tb_free(&mean);
    tb_free(&rstd);
    tb_free(&m0);
    tb_free(&r0);
    tb_free(&dout);
    tb_free(&dx);
    tb_free(&dw);
    tb_free(&db);
}

/* AdamW: the parameter change (not the parameters, whose size would hide a wrong update) and
 * both moments, after one step at t; `offset` floats into the buffers (1: not 16-byte aligned);
 * lp_dt bf16/fp16: also the low-precision copy written in the same pass */
static void test_adamw(size_t n, int t, size_t offset, tlm_dtype lp_dt, const char *tag) {
    tbuf p = tb_rand(n, 1.0, 0.0, F32), g = tb_rand(n, 1.0, 0.0, F32), m = tb_rand(n, 0.1, 0.0, F32);
    tbuf v = tb_rand(n, 1.0, 0.0, F32);
    for (size_t i = 0; i < n; i++) tb_set(&v, i, 0.01f * v.host[i] * v.host[i] + 1e-6f); /* second moment >= 0 */
    tb_upload(&v);
    tbuf p0 = tb_from_cpu(&p);
    const float lr = 1e-2f, b1 = 0.9f, b2 = 0.999f, eps = 1e-8f, wd = 0.1f;
    const int with_lp = lp_dt != F32;
    tbuf lp = tb_poison(n, with_lp ? lp_dt : F32);
    tlm_adamw_step(cpu, FC(p) + offset, FC(g) + offset, FC(m) + offset, FC(v) + offset, n - offset, lr, b1,
                         b2, eps, wd, t, with_lp ? AT_C(lp, offset) : NULL, lp_dt);
    tlm_adamw_step(gpu, (float *)p.g + offset, (float *)g.g + offset, (float *)m.g + offset,
                         (float *)v.g + offset, n - offset, lr, b1, b2, eps, wd, t, with_lp ? AT_G(lp, offset) : NULL,
                         lp_dt);
    if (with_lp) {
        /* the first `offset` elements were not part of the step: give both sides the same bits */
        for (size_t i = 0; i < offset; i++) {
            memset((char *)lp.c + i * lp.es, 0, lp.es);
            tlm_copy_to_backend(gpu, AT_G(lp, i), AT_C(lp, i), lp.es);
        }
        char what[64];
        snprintf(what, sizeof what, "adamw_step t=%d (%s copy of the weights)", t, lp_dt == TLM_DTYPE_BF16 ? "bf16" : "fp16");
        compare(what, tag, &lp, 1e-2);
    }
    tb_free(&lp);
    tb_fetch(&p);
    /* the update: cuda's p - p0 against cpu's p - p0, in a buffer of its own */
    tbuf dp = tb_alloc(n, F32);
    for (size_t i = 0; i < n; i++) {
        FC(dp)[i] = FC(p)[i] - FC(p0)[i];
        ((float *)dp.raw)[i] = p.host[i] - FC(p0)[i];
    }
    tlm_copy_to_backend(gpu, dp.g, dp.raw, n * sizeof(float));
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

/* grad_unscale: grads *= inv_scale and the count of inf/NaN after it. Injected: inf, -inf, NaN
 * (one in the scalar tail), and with inv_scale > 1 a finite value that overflows. Both backends'
 * counts must equal the injected number; the unscaled values must agree (non-finite where
 * injected). `offset` floats into the buffer (1: not 16-byte aligned). */
static void test_grad_unscale(size_t n, size_t offset, float inv_scale, const char *tag) {
    tbuf g = tb_rand(n, 1.0, 0.0, F32);
    size_t expect = 0;
    const size_t at[] = {offset + 5, offset + 17, offset + 1000, n - 1, offset + 40};
    const float val[] = {INFINITY, -INFINITY, NAN, NAN, 3e38f};
    for (size_t i = 0; i < 5; i++) {
        if (i == 4 && !(inv_scale > 1.0f)) break; /* overflows only when scaled up */
        tb_set(&g, at[i], val[i]);
        expect++;
    }
    tb_upload(&g);
    tbuf found = tb_alloc(1, F32); /* found_inf on each backend, zeroed */
    memset(found.raw, 0, sizeof(float));
    tb_upload(&found);
    tlm_grad_unscale(cpu, FC(g) + offset, n - offset, inv_scale, FC(found));
    tlm_grad_unscale(gpu, (float *)g.g + offset, n - offset, inv_scale, (float *)found.g);
    tb_fetch(&found);
    const size_t nc = (size_t)FC(found)[0], ng = (size_t)found.host[0];
    tb_free(&found);
    char what[64];
    snprintf(what, sizeof what, "grad_unscale x%g%s (count)", (double)inv_scale, offset ? " unaligned" : "");
    check(nc == expect && ng == expect, "%-36s %-33s cuda %zu, cpu %zu, injected %zu", what, tag, ng, nc, expect);
    /* values: the non-finite ones must sit at the same places; the others compared normwise */
    tb_fetch(&g);
    size_t mismatch = 0;
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        const float a = g.host[i], b = FC(g)[i];
        if (!isfinite(a) != !isfinite(b) || !isnan(a) != !isnan(b)) mismatch++;
        else if (isfinite(b)) {
            num += ((double)a - b) * ((double)a - b);
            den += (double)b * b;
        }
    }
    const double err = sqrt(num / (den > 0 ? den : 1));
    snprintf(what, sizeof what, "grad_unscale x%g%s (values)", (double)inv_scale, offset ? " unaligned" : "");
    check(mismatch == 0 && err <= TOL, "%-36s %-33s rel err %.3e (limit %.0e), %zu inf/NaN misplaced", what, tag, err,
          TOL, mismatch);
    tb_free(&g);
}

/* the ops that take a dtype, in the mode's dt; `limit` for every output */
static void test_dtype_ops(const shape *s, const char *tag, tlm_precision pm, double limit) {
    const tlm_dtype dt = tlm_precision_act_dtype(pm);
    test_rmsnorm(s, tag, dt, limit);
    test_matmul(s, tag, pm, limit);
    test_cast(s, tag, dt);
    test_rope(s, tag, dt, limit);
    test_attention(s, tag, pm, limit);
    test_swiglu(s, tag, dt, limit);
    test_cross_entropy(s, tag, dt, limit);
    test_relu(s, tag, dt);
    test_layernorm(s, tag, dt, limit);
}

static void test_shape(const shape *s) {
    char tag[96];
    snprintf(tag, sizeof tag, "[%s N=%dx%d C=%d H=%d F=%d V=%d]", s->name, s->B, s->T, s->C, s->H, s->F, s->V);
    test_embedding(s, tag);
    /* fp32: the elementwise ops at TOL, the GEMMs at GEMM_TOL */
    test_rmsnorm(s, tag, F32, TOL);
    test_matmul(s, tag, TLM_PRECISION_FP32, GEMM_TOL);
    test_cast(s, tag, F32);
    test_rope(s, tag, F32, TOL);
    test_attention(s, tag, TLM_PRECISION_FP32, GEMM_TOL);
    test_swiglu(s, tag, F32, TOL);
    test_cross_entropy(s, tag, F32, TOL);
    test_relu(s, tag, F32);
    test_layernorm(s, tag, F32, TOL);
    test_adamw((size_t)s->B * s->T * s->C + 5, 1, 0, F32, tag);
    test_adamw((size_t)s->B * s->T * s->C + 5, 7, 1, F32, tag);
    test_adamw((size_t)s->B * s->T * s->C + 5, 2, 0, TLM_DTYPE_BF16, tag);
    test_adamw((size_t)s->B * s->T * s->C + 5, 3, 1, TLM_DTYPE_F16, tag);
    test_grad_unscale((size_t)s->B * s->T * s->C + 7, 0, 1.0f / 65536.0f, tag);
    test_grad_unscale((size_t)s->B * s->T * s->C + 7, 1, 4.0f, tag);

    char ptag[112];
    snprintf(ptag, sizeof ptag, "%s tf32", tag);
    test_matmul(s, ptag, TLM_PRECISION_TF32, TF32_TOL);
    test_attention(s, ptag, TLM_PRECISION_TF32, TF32_TOL);

    const tlm_precision modes[] = {TLM_PRECISION_BF16, TLM_PRECISION_FP16};
    for (int i = 0; i < 2; i++) {
        const tlm_dtype dt = tlm_precision_act_dtype(modes[i]);
        snprintf(ptag, sizeof ptag, "%s %s", tag, dt_name(dt));
        test_dtype_ops(s, ptag, modes[i], LOWP_TOL);
    }
}

/* ---- the tiny model against PyTorch: fixture_checks.h, shared with the CPU test ---------------- */

int main(void) {
    if (!tlm_cuda_available() || tlm_backend_cuda_create(&gpu, 0) != TLM_OK) {
        printf("no GPU: skipped (%s)\n", tlm_cuda_available() ? tlm_last_error() : "no CUDA device");
        return 77;
    }
    die_on(tlm_backend_cpu_create(&cpu, 0), "cpu backend");
#ifdef TLM_HAVE_CUDA
    printf("# cuda: %s; cpu: OpenBLAS\n", gpu->description);
#endif
    /* the NVTX ranges are a hook of the CUDA backend (src/cuda/nvtx.cu): a range through it */
    tlm_step_begin(gpu, 0, false);
    tlm_step_end(gpu);

    const shape shapes[] = {
        {"tiny", 3, 17, 64, 4, 172, 512},
        {"odd", 2, 13, 66, 3, 171, 509},   /* D 22: nothing a multiple of 4 */
        {"small", 2, 256, 768, 12, 3072, 10000},
    };
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) test_shape(&shapes[i]);

    check(test_bytes_held(gpu) == 0 && test_bytes_held(cpu) == 0, "%-36s %-33s %zu bytes still allocated",
          "every test buffer freed", "", test_bytes_held(gpu) + test_bytes_held(cpu));
    tlm_backend_destroy(gpu);
    tlm_backend_destroy(cpu);
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
