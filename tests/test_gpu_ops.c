/* test_gpu_ops.c — the CUDA backend against the CPU backend, which is the spec, op by op, in the
 * manner of ggml's test-backend-ops: a table of cases (an op, the precision modes it runs in, the
 * tolerance) run over a list of shapes. Each case draws its inputs (the same random values on both
 * backends, drawn afresh for each check and never zero), poisons the outputs the op overwrites
 * with NaN (all bytes 0xFF, a NaN in float32, bf16 and fp16 alike), runs the op through the
 * dispatch (tlm_<op>) once on each backend, and requires every output element to come back finite
 * (written) and the normalized error ||cuda - cpu|| / ||cpu|| of each output, both widened to
 * float32, within the tolerance. Adding an op to the engine means adding its case to the table.
 *
 * Precision modes (precision.h): every op runs in fp32; the GEMM ops (matmul, naive attention)
 * also in TF32; every op that takes a dtype also with bf16 and fp16 tensors (relu and layernorm,
 * the ToyModel's ops, included; relu is exact, so it must match bit for bit). Inputs are drawn in
 * float32 and rounded to the dtype here (round to nearest even), so both backends see the same
 * bits. cast is checked bit for bit (against the CPU and against this file's own rounding),
 * grad_unscale by its count of injected inf/NaN, reduce_mean and sum_squares against float64 too.
 *
 * Shapes: the tiny model's (N = 3*17, C 64, H 4, D 16, F 172, V 512), one whose sizes are not
 * multiples of 4 (the kernels' scalar paths, 8-byte-aligned fp32 GEMM operands, 4-byte-aligned
 * 16-bit ones), and one of the small model's (B 2, T 256, C 768, H 12, F 3072, V 10000).
 * (The whole model against the PyTorch fixtures on CUDA: test_gpu_model_fixture.)
 * The GEMMs run with TLM_GEMM_TUNE=1 unless the environment sets it (matmul.cu: each new plan's
 * candidates timed on the call's operands): the results are checked as any other, a second call of
 * a plan must give the same bits, and an in-place residual GEMM makes a plan of its own.
 *
 * Usage: test_gpu_ops [test|perf] [-o OP] [-s SHAPE]
 *   test (default)  every check; prints one line per check and "N passed, M failed"; exit 1 on any
 *                   failure, 77 (ctest: skipped) with "no GPU: skipped" when no CUDA GPU is usable
 *   perf            times every case on the GPU: PERF_WARMUP runs, then PERF_ITERS runs between two
 *                   CUDA events; ms per run, and TFLOP/s and GB/s from the FLOPs and bytes the
 *                   dispatch reports for the op (ops.def)
 *   -o OP, -s SHAPE only the cases whose name starts with OP, the shapes named SHAPE */
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_check.h"
#include "tlm/backend.h"
#include "tlm/rng.h"
#include "tlm/tuning.h"

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

static tlm_backend *cpu, *gpu;
static uint64_t rng = 0x6B0A7;
static bool perf_mode;


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

/* tb_free of each buffer given: TB_FREE(&a, &b, ...) */
#define TB_FREE(...) tb_free_each((tbuf *[]){__VA_ARGS__}, sizeof((tbuf *[]){__VA_ARGS__}) / sizeof(tbuf *))
static void tb_free_each(tbuf *const *b, size_t n) {
    for (size_t i = 0; i < n; i++) tb_free(b[i]);
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
    if (perf_mode) return;
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


static const tlm_dtype F32 = TLM_DTYPE_F32;

/* ---- running an op on both backends (or timing it on the GPU) ---------------------------------------
 * ON_BOTH(call) runs `call` once on the CPU backend and once on the CUDA backend; inside it be_ is
 * the backend, P(b) the buffer b's memory on that backend and AT(b, i) its element i. In perf mode
 * it runs `call` on the GPU only: PERF_WARMUP times, then PERF_ITERS times between two events, and
 * prints the mean ms with the FLOPs and bytes the dispatch counted for the timed runs. */

#define PERF_WARMUP 3
#define PERF_ITERS 20

static double perf_flops, perf_bytes;
static void perf_count(void *user, const tlm_op_event *e) {
    perf_flops += e->flops;
    perf_bytes += e->bytes;
}
static const tlm_hook perf_hook = {NULL, perf_count, NULL, NULL, NULL};
static tlm_event *perf_e0, *perf_e1;

static void perf_start(void) {
    perf_flops = perf_bytes = 0;
    die_on(tlm_hook_add(gpu, &perf_hook), "perf hook");
    tlm_event_record(gpu, perf_e0, NULL);
}

static void perf_stop(const char *what, const char *tag) {
    tlm_event_record(gpu, perf_e1, NULL);
    tlm_hook_remove(gpu, &perf_hook);
    const double ms = tlm_event_elapsed_ms(gpu, perf_e0, perf_e1) / PERF_ITERS;
    printf("perf %-36s %-33s %9.4f ms %9.3f TFLOP/s %8.1f GB/s\n", what, tag, ms,
           perf_flops / PERF_ITERS / (ms * 1e9), perf_bytes / PERF_ITERS / (ms * 1e6));
    fflush(stdout);
}

#define P(b) (g_ ? (b).g : (b).c)
#define AT(b, i) ((void *)((char *)P(b) + (size_t)(i) * (b).es))
#define FP(b) ((float *)P(b))
#define ON_BOTH(what, tag, ...)                                                                   \
    do {                                                                                          \
        for (int g_ = perf_mode ? 1 : 0; g_ < 2; g_++) {                                          \
            tlm_backend *be_ = g_ ? gpu : cpu;                                                    \
            (void)be_;                                                                            \
            if (!perf_mode) {                                                                     \
                __VA_ARGS__;                                                                      \
                continue;                                                                         \
            }                                                                                     \
            for (int r_ = 0; r_ < PERF_WARMUP + PERF_ITERS; r_++) {                               \
                if (r_ == PERF_WARMUP) perf_start();                                              \
                __VA_ARGS__;                                                                      \
            }                                                                                     \
            perf_stop(what, tag);                                                                 \
        }                                                                                         \
    } while (0)

/* ---- the cases ----------------------------------------------------------------------------------- */

typedef struct {
    const char *name;
    int B, T, C, H, F, V;
} shape;

/* one case at one shape in one mode */
typedef struct {
    const shape *s;
    tlm_precision pm; /* the mode: GEMM-bearing ops take it */
    tlm_dtype dt;     /* its activation dtype: the other ops take it */
    double tol;       /* the bound of each output's normalized error */
    char tag[112];    /* "[tiny N=3x17 C=64 ...] bf16" */
} tcase;

static void case_embedding(const tcase *t) {
    const shape *s = t->s;
    const int N = s->B * s->T, C = s->C, V = s->V;
    ibuf tok = ib_rand((size_t)N, V);
    tbuf wte = tb_rand((size_t)V * C, 1.0, 0.0, F32), out = tb_poison((size_t)N * C, F32);
    ON_BOTH("embedding_forward", t->tag, tlm_embedding_forward(be_, FP(out), P(tok), FP(wte), N, C));
    compare("embedding_forward", t->tag, &out, t->tol);
    TB_FREE(&wte, &out);
    ib_free(&tok);

    /* few distinct tokens, so rows repeat and the scatter-add really accumulates */
    tok = ib_rand((size_t)N, V < 7 ? V : 7);
    tbuf dout = tb_rand((size_t)N * C, 1.0, 0.0, F32), dwte = tb_poison((size_t)V * C, F32);
    ON_BOTH("embedding_backward", t->tag, tlm_embedding_backward(be_, FP(dwte), FP(dout), P(tok), N, V, C));
    compare("embedding_backward (dwte)", t->tag, &dwte, t->tol);
    TB_FREE(&dout, &dwte);
    ib_free(&tok);
}

/* rmsnorm_backward at (N, C) (the case's shape, or a row longer than one pass of the CUDA kernel's
 * row group): fresh x, w; rstd from the CPU forward on both; dx accumulates onto random values.
 * Then again with dx_lp: dx and dw the same bits as without it on each backend, dx_lp against
 * the CPU's and, on the GPU, = round(dx) bit for bit. */
static void rmsnorm_backward_one(const tcase *t, int N, int C) {
    const tlm_dtype dt = t->dt;
    char base[48], what[96], size[24] = "";
    if (N != t->s->B * t->s->T || C != t->s->C) snprintf(size, sizeof size, " N=%d C=%d", N, C);
    snprintf(base, sizeof base, "rmsnorm_backward%s", size);
    tbuf x = tb_rand((size_t)N * C, 1.0, -0.1, F32), w = tb_rand((size_t)C, 0.1, 1.0, F32);
    tbuf out = tb_poison((size_t)N * C, dt), r0 = tb_poison((size_t)N, F32);
    tlm_rmsnorm_forward(cpu, out.c, r0.c, x.c, w.c, N, C, 1e-5f, dt);
    tbuf rstd = tb_from_cpu(&r0);
    tbuf dout = tb_rand((size_t)N * C, 1.0, 0.0, dt), dx = tb_rand((size_t)N * C, 1.0, 0.0, F32);
    tbuf dx2 = tb_from_cpu(&dx), dw = tb_poison((size_t)C, F32), dw2 = tb_poison((size_t)C, F32);
    tbuf dx_lp = tb_poison((size_t)N * C, dt);
    ON_BOTH(base, t->tag, tlm_rmsnorm_backward(be_, FP(dx), FP(dw), P(dout), FP(x), FP(w), FP(rstd), N, C, NULL, dt));
    snprintf(what, sizeof what, "%s (dx +=)", base);
    compare(what, t->tag, &dx, t->tol);
    snprintf(what, sizeof what, "%s (dw)", base);
    compare(what, t->tag, &dw, t->tol);
    snprintf(base, sizeof base, "rmsnorm_backward%s +dx_lp", size);
    ON_BOTH(base, t->tag,
            tlm_rmsnorm_backward(be_, FP(dx2), FP(dw2), P(dout), FP(x), FP(w), FP(rstd), N, C, P(dx_lp), dt));
    snprintf(what, sizeof what, "%s (dx_lp)", base);
    compare(what, t->tag, &dx_lp, t->tol);
    if (!perf_mode) {
        tb_fetch(&dx2);
        tb_fetch(&dw2);
        size_t wrong = 0;
        for (size_t i = 0; i < dx_lp.n; i++) {
            const float want = dt == F32 ? dx2.host[i]
                               : dt == TLM_DTYPE_BF16 ? from_bf16(to_bf16(dx2.host[i]))
                                                      : from_f16(to_f16(dx2.host[i]));
            wrong += f32_bits(dx_lp.host[i]) != f32_bits(want);
        }
        const bool same = memcmp(dx2.host, dx.host, dx.n * sizeof(float)) == 0 &&
                          memcmp(dw2.host, dw.host, dw.n * sizeof(float)) == 0 &&
                          memcmp(FC(dx2), FC(dx), dx.n * sizeof(float)) == 0 &&
                          memcmp(FC(dw2), FC(dw), dw.n * sizeof(float)) == 0;
        snprintf(what, sizeof what, "%s (dx, dw; cuda dx_lp)", base);
        check(same && wrong == 0, "%-36s %-33s dx, dw the same bits as without dx_lp; cuda dx_lp = round(dx): %zu wrong",
              what, t->tag, wrong);
    }
    TB_FREE(&x, &w, &out, &r0, &rstd, &dout, &dx, &dx2, &dw, &dw2, &dx_lp);
}

/* out and dout of dtype dt; x, w, rstd, dx, dw float32; dx_lp of dtype dt */
static void case_rmsnorm(const tcase *t) {
    const int N = t->s->B * t->s->T, C = t->s->C;
    const tlm_dtype dt = t->dt;
    const float eps = 1e-5f;
    tbuf x = tb_rand((size_t)N * C, 1.5, 0.2, F32), w = tb_rand((size_t)C, 0.1, 1.0, F32);
    tbuf out = tb_poison((size_t)N * C, dt), rstd = tb_poison((size_t)N, F32);
    ON_BOTH("rmsnorm_forward", t->tag, tlm_rmsnorm_forward(be_, P(out), FP(rstd), FP(x), FP(w), N, C, eps, dt));
    compare("rmsnorm_forward (out)", t->tag, &out, t->tol);
    compare("rmsnorm_forward (rstd)", t->tag, &rstd, t->tol);
    TB_FREE(&x, &w, &out, &rstd);

    rmsnorm_backward_one(t, N, C);
    if (strcmp(t->s->name, "small") == 0) {
        rmsnorm_backward_one(t, 1024, 2560); /* the 2.7B model's rows at batch 4 x context 256 */
        rmsnorm_backward_one(t, 40, 8200);   /* rows of two passes of a row group, fewer rows than SMs */
        rmsnorm_backward_one(t, 40, 8195);   /* the same on the scalar path */
    }
}

static void case_matmul(const tcase *t) {
    const shape *s = t->s;
    const int N = s->B * s->T, C = s->C, F = s->F, V = s->V;
    const tlm_precision pm = t->pm;
    const tlm_dtype dt = t->dt;
    const int dims[][2] = {{C, 3 * C}, {C, C}, {C, 2 * F}, {F, C}, {C, V}}; /* (in, out) of the model's GEMMs */
    for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++) {
        const int in = dims[i][0], out = dims[i][1];
        char what[64];
        tbuf x = tb_rand((size_t)N * in, 1.0, 0.0, dt), w = tb_rand((size_t)out * in, 0.05, 0.0, dt);
        tbuf y = tb_poison((size_t)N * out, dt);
        snprintf(what, sizeof what, "matmul_forward %dx%d", in, out);
        ON_BOTH(what, t->tag, tlm_matmul_forward(be_, P(y), NULL, P(x), P(w), N, in, out, pm));
        compare(what, t->tag, &y, t->tol);

        if (out == C) { /* the residual connections (output_proj, w2): y float32 = residual + x W^T */
            tbuf res = tb_rand((size_t)N * out, 1.0, 0.0, F32), yr = tb_poison((size_t)N * out, F32);
            snprintf(what, sizeof what, "matmul_forward %dx%d +res", in, out);
            ON_BOTH(what, t->tag, tlm_matmul_forward(be_, P(yr), FP(res), P(x), P(w), N, in, out, pm));
            compare(what, t->tag, &yr, t->tol);
            if (!perf_mode) { /* the plan keeps one algorithm (TLM_GEMM_TUNE times them only once) */
                tbuf yr2 = tb_poison((size_t)N * out, F32);
                tlm_matmul_forward(gpu, yr2.g, res.g, x.g, w.g, N, in, out, pm);
                tb_fetch(&yr2);
                check(memcmp(yr.host, yr2.host, yr.n * sizeof(float)) == 0, "%-36s %-33s a second cuda call the same bits",
                      "matmul_forward +res again", t->tag);
                tb_free(&yr2);
            }
            snprintf(what, sizeof what, "matmul_forward %dx%d res kept", in, out);
            compare(what, t->tag, &res, 0.0); /* the input unchanged: equal to the CPU's, exactly */
            snprintf(what, sizeof what, "matmul_forward %dx%d +res in place", in, out);
            ON_BOTH(what, t->tag, tlm_matmul_forward(be_, P(res), FP(res), P(x), P(w), N, in, out, pm)); /* y == residual */
            compare(what, t->tag, &res, t->tol);
            /* a plan made by an in-place call (N - 1 rows: another shape): TLM_GEMM_TUNE times its
             * candidates into a scratch D, not into the residual that they read */
            tbuf r1 = tb_rand((size_t)(N - 1) * out, 1.0, 0.0, F32);
            snprintf(what, sizeof what, "matmul_forward %dx%d +res in place new", in, out);
            ON_BOTH(what, t->tag, tlm_matmul_forward(be_, P(r1), FP(r1), P(x), P(w), N - 1, in, out, pm));
            compare(what, t->tag, &r1, t->tol);
            TB_FREE(&r1, &res, &yr);
        }

        tbuf dy = tb_rand((size_t)N * out, 1.0, 0.0, dt), dx = tb_poison((size_t)N * in, dt);
        tbuf dw = tb_poison((size_t)out * in, F32);
        snprintf(what, sizeof what, "matmul_backward %dx%d", in, out);
        ON_BOTH(what, t->tag, tlm_matmul_backward(be_, P(dx), FP(dw), TLM_DTYPE_F32, P(dy), P(x), P(w), N, in, out, pm));
        snprintf(what, sizeof what, "matmul_backward %dx%d (dx)", in, out);
        compare(what, t->tag, &dx, t->tol);
        snprintf(what, sizeof what, "matmul_backward %dx%d (dw)", in, out);
        compare(what, t->tag, &dw, t->tol);
        if (dt == TLM_DTYPE_BF16) { /* a bf16 dW (ops.def's dw_dt, the data-parallel bf16 reduction's) */
            tbuf dwb = tb_poison((size_t)out * in, TLM_DTYPE_BF16);
            snprintf(what, sizeof what, "matmul_backward %dx%d (bf16 dw)", in, out);
            ON_BOTH(what, t->tag,
                    tlm_matmul_backward(be_, NULL, P(dwb), TLM_DTYPE_BF16, P(dy), P(x), P(w), N, in, out, pm));
            compare(what, t->tag, &dwb, t->tol);
            if (!perf_mode) { /* cuBLASLt's bf16 D against its fp32 D (dw.host, fetched by compare) rounded: equal
                               * where both plans sum in the same order; a plan of another algorithm (the heuristic
                               * picks per output type) may flip a rounding tie-break: one ulp, rarely */
                size_t differ = 0, far = 0;
                for (size_t e = 0; e < dwb.n; e++) {
                    const int got = ((const uint16_t *)dwb.raw)[e], want = to_bf16(dw.host[e]);
                    differ += got != want;
                    far += abs(got - want) > 1;
                }
                check(far == 0, "%-36s %-33s bf16 dW vs bf16(fp32 dW): %zu of %zu differ, none by more than one ulp",
                      what, t->tag, differ, dwb.n);
            }
            tb_free(&dwb);
        }
        if (i == 0) { /* dx == NULL: only dw */
            tbuf dw2 = tb_poison((size_t)out * in, F32);
            snprintf(what, sizeof what, "matmul_backward %dx%d (dx NULL)", in, out);
            ON_BOTH(what, t->tag, tlm_matmul_backward(be_, NULL, FP(dw2), TLM_DTYPE_F32, P(dy), P(x), P(w), N, in, out, pm));
            compare(what, t->tag, &dw2, t->tol);
            tb_free(&dw2);
            tbuf dx2 = tb_poison((size_t)N * in, dt); /* dw == NULL: only dx (the side stream's split) */
            snprintf(what, sizeof what, "matmul_backward %dx%d (dw NULL)", in, out);
            ON_BOTH(what, t->tag, tlm_matmul_backward(be_, P(dx2), NULL, TLM_DTYPE_F32, P(dy), P(x), P(w), N, in, out, pm));
            compare(what, t->tag, &dx2, t->tol);
            tb_free(&dx2);
        }
        TB_FREE(&x, &w, &y, &dy, &dx, &dw);
    }
}

/* dst dt = round(src float32): bit for bit against the CPU and against to_bf16/to_f16 above, on
 * random values of several magnitudes and on the edges (ties, fp16 overflow and subnormals, inf);
 * n not a multiple of 8 (the tail), then from an unaligned offset */
static void case_cast(const tcase *t) {
    const tlm_dtype dt = t->dt;
    const size_t n = (size_t)t->s->B * t->s->T * t->s->C + 5;
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
        snprintf(what, sizeof what, "cast%s (bitwise)", pass ? " (unaligned)" : "");
        ON_BOTH(what, t->tag, tlm_cast(be_, AT(dst, off), FP(src) + off, n - off, dt));
        if (perf_mode) continue;
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
        if (diff_cpu || diff_ref)
            check(false, "%-36s %-33s %zu of %zu differ from cpu, %zu from RNE; first at %zu: %.9g", what, t->tag,
                  diff_cpu, n - off, diff_ref, first, (double)src.host[first]);
        else
            check(true, "%-36s %-33s all %zu equal to cpu and to RNE", what, t->tag, n - off);
    }
    TB_FREE(&src, &dst);
}

static void case_rope(const tcase *t) {
    const shape *s = t->s;
    const tlm_dtype dt = t->dt;
    const int B = s->B, T = s->T, C = s->C, H = s->H, D = C / H, half = D / 2, N = B * T;
    const int T_max = T + 3; /* the table is longer than the sequence, as the model's */
    tbuf cs = tb_alloc((size_t)T_max * half, F32), sn = tb_alloc((size_t)T_max * half, F32);
    for (int p = 0; p < T_max; p++)
        for (int k = 0; k < half; k++) {
            double angle = p * pow(10000.0, -2.0 * k / D);
            tb_set(&cs, (size_t)p * half + k, (float)cos(angle));
            tb_set(&sn, (size_t)p * half + k, (float)sin(angle));
        }
    tb_upload(&cs);
    tb_upload(&sn);
    /* on the fused (N, 3C) rows, q and k = 2H heads, as the model calls it; v must stay as it is */
    tbuf qkv = tb_rand((size_t)N * 3 * C, 1.0, 0.0, dt);
    ON_BOTH("rope_forward", t->tag, tlm_rope_forward(be_, P(qkv), FP(cs), FP(sn), B, T, 2 * H, D, 3 * C, dt));
    compare("rope_forward (in place, ld 3C)", t->tag, &qkv, t->tol);
    tb_free(&qkv);
    tbuf dqkv = tb_rand((size_t)N * 3 * C, 1.0, 0.0, dt);
    ON_BOTH("rope_backward", t->tag, tlm_rope_backward(be_, P(dqkv), FP(cs), FP(sn), B, T, 2 * H, D, 3 * C, dt));
    compare("rope_backward (in place, ld 3C)", t->tag, &dqkv, t->tol);
    TB_FREE(&dqkv, &cs, &sn);
}

static void case_attention(const tcase *t) {
    const shape *s = t->s;
    const tlm_precision pm = t->pm;
    const tlm_dtype dt = t->dt;
    const int B = s->B, T = s->T, C = s->C, H = s->H, D = C / H, N = B * T, ld = 3 * C;
    const size_t PP = (size_t)B * H * T * T;
    tbuf qkv = tb_rand((size_t)N * ld, 1.0, 0.0, dt), out = tb_poison((size_t)N * C, dt), probs = tb_poison(PP, dt);
    ON_BOTH("attention_forward", t->tag,
            tlm_attention_forward(be_, P(out), P(probs), P(qkv), AT(qkv, C), AT(qkv, 2 * C), ld, B, T, H, D, pm));
    compare("attention_forward (out)", t->tag, &out, t->tol);
    compare("attention_forward (probs)", t->tag, &probs, t->tol);
    if (!perf_mode) { /* the causal mask: exact zeros above the diagonal (compare fetched the CUDA probs) */
        size_t nonzero = 0;
        for (size_t r = 0; r < (size_t)B * H * T; r++)
            for (int j = (int)(r % T) + 1; j < T; j++) nonzero += probs.host[r * T + j] != 0.0f;
        check(nonzero == 0, "%-36s %-33s %zu nonzero", "attention_forward (probs causal 0s)", t->tag, nonzero);
    }
    tb_free(&out);

    /* backward from the CPU's probabilities on both sides */
    tbuf p = tb_from_cpu(&probs);
    tbuf dout = tb_rand((size_t)N * C, 1.0, 0.0, dt), dqkv = tb_poison((size_t)N * ld, dt), dprobs = tb_poison(PP, dt);
    ON_BOTH("attention_backward", t->tag,
            tlm_attention_backward(be_, P(dqkv), AT(dqkv, C), AT(dqkv, 2 * C), P(dprobs), P(dout), P(qkv), AT(qkv, C),
                                   AT(qkv, 2 * C), P(p), ld, B, T, H, D, pm));
    compare("attention_backward (dq|dk|dv)", t->tag, &dqkv, t->tol);
    TB_FREE(&qkv, &probs, &p, &dout, &dqkv, &dprobs);
}

static void case_swiglu(const tcase *t) {
    const int N = t->s->B * t->s->T, F = t->s->F;
    const tlm_dtype dt = t->dt;
    tbuf ab = tb_rand((size_t)N * 2 * F, 2.0, 0.0, dt), out = tb_poison((size_t)N * F, dt);
    ON_BOTH("swiglu_forward", t->tag, tlm_swiglu_forward(be_, P(out), P(ab), N, F, dt));
    compare("swiglu_forward", t->tag, &out, t->tol);
    TB_FREE(&ab, &out);
    ab = tb_rand((size_t)N * 2 * F, 2.0, 0.0, dt);
    tbuf dout = tb_rand((size_t)N * F, 1.0, 0.0, dt), dab = tb_poison((size_t)N * 2 * F, dt);
    ON_BOTH("swiglu_backward", t->tag, tlm_swiglu_backward(be_, P(dab), P(dout), P(ab), N, F, dt));
    compare("swiglu_backward", t->tag, &dab, t->tol);
    TB_FREE(&ab, &dout, &dab);
}

static void case_cross_entropy(const tcase *t) {
    const int N = t->s->B * t->s->T, V = t->s->V;
    const tlm_dtype dt = t->dt;
    ibuf tgt = ib_rand((size_t)N, V);
    tbuf logits = tb_rand((size_t)N * V, 2.0, 0.5, dt), losses = tb_poison((size_t)N, F32);
    tbuf lse = tb_poison((size_t)N, F32);
    ON_BOTH("cross_entropy_forward", t->tag,
            tlm_cross_entropy_forward(be_, FP(losses), FP(lse), P(logits), P(tgt), N, V, dt));
    compare("cross_entropy_forward (losses)", t->tag, &losses, t->tol);
    compare("cross_entropy_forward (lse)", t->tag, &lse, t->tol);
    TB_FREE(&logits, &losses, &lse);

    /* backward from the CPU's logsumexp on both sides; out of place, then in place */
    logits = tb_rand((size_t)N * V, 2.0, -0.5, dt);
    losses = tb_poison((size_t)N, F32);
    tbuf l0 = tb_poison((size_t)N, F32);
    tlm_cross_entropy_forward(cpu, losses.c, l0.c, logits.c, tgt.c, N, V, dt);
    lse = tb_from_cpu(&l0);
    const float dloss = 1.0f / (float)N;
    tbuf dlogits = tb_poison((size_t)N * V, dt);
    ON_BOTH("cross_entropy_backward", t->tag,
            tlm_cross_entropy_backward(be_, P(dlogits), P(logits), FP(lse), P(tgt), N, V, dloss, dt));
    compare("cross_entropy_backward", t->tag, &dlogits, t->tol);
    ON_BOTH("cross_entropy_backward (in place)", t->tag,
            tlm_cross_entropy_backward(be_, P(logits), P(logits), FP(lse), P(tgt), N, V, dloss, dt));
    compare("cross_entropy_backward (in place)", t->tag, &logits, t->tol);
    TB_FREE(&logits, &losses, &l0, &lse, &dlogits);
    ib_free(&tgt);
}

/* the mean loss: both backends' float64 sums, in their orders, round to the same float (or one
 * ulp apart), and agree with the mean computed here; n = 1 and a length not a multiple of 4 */
static void case_reduce_mean(const tcase *t) {
    const size_t lens[3] = {(size_t)t->s->B * t->s->T, 1, (size_t)t->s->B * t->s->T * 7 + 3};
    for (int k = 0; k < 3; k++) {
        const size_t n = lens[k];
        tbuf x = tb_rand(n, 2.0, 6.0, F32), out = tb_poison(1, F32);
        char what[64];
        snprintf(what, sizeof what, "reduce_mean n=%zu", n);
        ON_BOTH(what, t->tag, tlm_reduce_mean(be_, FP(out), FP(x), n));
        compare(what, t->tag, &out, t->tol);
        if (!perf_mode) {
            double sum = 0;
            for (size_t i = 0; i < n; i++) sum += x.host[i];
            const double want = sum / (double)n, got = out.host[0];
            snprintf(what, sizeof what, "reduce_mean n=%zu vs float64", n);
            check(fabs(got - want) <= 1e-6 * fabs(want), "%-36s %-33s %.9g, float64 %.9g", what, t->tag, got, want);
        }
        TB_FREE(&x, &out);
    }
}

/* ReLU (the ToyModel's): exact in every dtype, so CUDA must give the CPU's bits (limit 0); n with a
 * tail past the 16-byte vectors, then from an unaligned offset, then in place */
static void case_relu(const tcase *t) {
    const tlm_dtype dt = t->dt;
    const size_t n = (size_t)t->s->B * t->s->T * t->s->C + 3;
    tbuf x = tb_rand(n, 1.0, 0.0, dt), out = tb_poison(n, dt);
    ON_BOTH("relu_forward", t->tag, tlm_relu_forward(be_, P(out), P(x), n, dt));
    compare("relu_forward", t->tag, &out, 0.0);
    tbuf dout = tb_rand(n, 1.0, 0.0, dt), dx = tb_poison(n, dt);
    ON_BOTH("relu_backward", t->tag, tlm_relu_backward(be_, P(dx), P(dout), P(x), n, dt));
    compare("relu_backward", t->tag, &dx, 0.0);
    tbuf out1 = tb_poison(n, dt);
    ON_BOTH("relu_forward (unaligned)", t->tag, tlm_relu_forward(be_, AT(out1, 1), AT(x, 1), n - 1, dt);
            tlm_relu_forward(be_, P(out1), P(x), 1, dt)); /* element 0, so that every element is written */
    compare("relu_forward (unaligned)", t->tag, &out1, 0.0);
    ON_BOTH("relu_forward (in place)", t->tag, tlm_relu_forward(be_, P(x), P(x), n, dt));
    compare("relu_forward (in place)", t->tag, &x, 0.0);
    TB_FREE(&x, &out, &dout, &dx, &out1);
}

/* LayerNorm (the ToyModel's): x, dout, dx of dtype dt; out, mean, rstd, w, b, dw, db float32 */
static void case_layernorm(const tcase *t) {
    const int N = t->s->B * t->s->T, C = t->s->C;
    const tlm_dtype dt = t->dt;
    const float eps = 1e-5f;
    tbuf x = tb_rand((size_t)N * C, 1.5, 0.3, dt), w = tb_rand((size_t)C, 0.1, 1.0, F32);
    tbuf b = tb_rand((size_t)C, 0.1, 0.0, F32), out = tb_poison((size_t)N * C, F32);
    tbuf mean = tb_poison((size_t)N, F32), rstd = tb_poison((size_t)N, F32);
    ON_BOTH("layernorm_forward", t->tag,
            tlm_layernorm_forward(be_, FP(out), FP(mean), FP(rstd), P(x), FP(w), FP(b), N, C, eps, dt));
    compare("layernorm_forward (out)", t->tag, &out, t->tol);
    compare("layernorm_forward (mean)", t->tag, &mean, t->tol);
    compare("layernorm_forward (rstd)", t->tag, &rstd, t->tol);

    /* backward from the CPU's statistics on both sides */
    tbuf m0 = tb_from_cpu(&mean), r0 = tb_from_cpu(&rstd);
    tbuf dout = tb_rand((size_t)N * C, 1.0, 0.0, dt), dx = tb_poison((size_t)N * C, dt);
    tbuf dw = tb_poison((size_t)C, F32), db = tb_poison((size_t)C, F32);
    ON_BOTH("layernorm_backward", t->tag,
            tlm_layernorm_backward(be_, P(dx), FP(dw), FP(db), P(dout), P(x), FP(w), FP(m0), FP(r0), N, C, dt));
    compare("layernorm_backward (dx)", t->tag, &dx, t->tol);
    compare("layernorm_backward (dw)", t->tag, &dw, t->tol);
    compare("layernorm_backward (db)", t->tag, &db, t->tol);
    tbuf *all[] = {&x, &w, &b, &out, &mean, &rstd, &m0, &r0, &dout, &dx, &dw, &db};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) tb_free(all[i]);
}

/* AdamW: the parameter change (not the parameters, whose size would hide a wrong update) and both
 * moments, after one step at t; `offset` floats into the buffers (1: not 16-byte aligned);
 * lp_dt bf16/fp16: also the low-precision copy written in the same pass */
static void adamw_one(const char *tag, size_t n, int step, size_t offset, tlm_dtype lp_dt) {
    tbuf p = tb_rand(n, 1.0, 0.0, F32), g = tb_rand(n, 1.0, 0.0, F32), m = tb_rand(n, 0.1, 0.0, F32);
    tbuf v = tb_rand(n, 1.0, 0.0, F32);
    for (size_t i = 0; i < n; i++) tb_set(&v, i, 0.01f * v.host[i] * v.host[i] + 1e-6f); /* second moment >= 0 */
    tb_upload(&v);
    tbuf p0 = tb_from_cpu(&p);
    const float lr = 1e-2f, b1 = 0.9f, b2 = 0.999f, eps = 1e-8f, wd = 0.1f;
    const int with_lp = lp_dt != F32;
    tbuf lp = tb_poison(n, with_lp ? lp_dt : F32);
    char what[64];
    snprintf(what, sizeof what, "adamw_step t=%d%s", step, offset ? " unaligned" : "");
    ON_BOTH(what, tag,
            tlm_adamw_step(be_, FP(p) + offset, FP(g) + offset, step == 2 ? 0.37f : 1.0f, FP(m) + offset,
                           FP(v) + offset, n - offset, lr, b1, b2, eps, wd, step, with_lp ? AT(lp, offset) : NULL,
                           lp_dt));
    if (with_lp && !perf_mode) {
        /* the first `offset` elements were not part of the step: give both sides the same bits */
        for (size_t i = 0; i < offset; i++) {
            memset((char *)lp.c + i * lp.es, 0, lp.es);
            tlm_copy_to_backend(gpu, (char *)lp.g + i * lp.es, (char *)lp.c + i * lp.es, lp.es);
        }
        snprintf(what, sizeof what, "adamw_step t=%d (%s copy of the weights)", step, tlm_act_dtype_name(lp_dt));
        compare(what, tag, &lp, 1e-2);
    }
    if (!perf_mode) {
        tb_fetch(&p);
        /* the update: cuda's p - p0 against cpu's p - p0, in a buffer of its own */
        tbuf dp = tb_alloc(n, F32);
        for (size_t i = 0; i < n; i++) {
            ((float *)dp.c)[i] = ((float *)p.c)[i] - ((float *)p0.c)[i];
            ((float *)dp.raw)[i] = p.host[i] - ((float *)p0.c)[i];
        }
        tlm_copy_to_backend(gpu, dp.g, dp.raw, n * sizeof(float));
        snprintf(what, sizeof what, "adamw_step t=%d (update)", step);
        compare(what, tag, &dp, TOL);
        snprintf(what, sizeof what, "adamw_step t=%d (m)", step);
        compare(what, tag, &m, TOL);
        snprintf(what, sizeof what, "adamw_step t=%d (v)", step);
        compare(what, tag, &v, TOL);
        tb_free(&dp);
    }
    tbuf *all[] = {&lp, &p, &g, &m, &v, &p0};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) tb_free(all[i]);
}

static void case_adamw(const tcase *t) {
    const size_t n = (size_t)t->s->B * t->s->T * t->s->C + 5;
    adamw_one(t->tag, n, 1, 0, F32);
    adamw_one(t->tag, n, 7, 1, F32);
    adamw_one(t->tag, n, 2, 0, TLM_DTYPE_BF16);
    adamw_one(t->tag, n, 3, 1, TLM_DTYPE_F16);
}

/* grad_unscale: grads *= inv_scale and found_inf += the count of inf/NaN after it. Injected: inf,
 * -inf, NaN (one in the scalar tail), and with inv_scale > 1 a finite value that overflows. Both
 * backends' counts must equal the injected number; the unscaled values must agree (non-finite
 * where injected). `offset` floats into the buffer (1: not 16-byte aligned). */
static void unscale_one(const char *tag, size_t n, size_t offset, float inv_scale) {
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
    char what[64];
    snprintf(what, sizeof what, "grad_unscale x%g%s (count)", (double)inv_scale, offset ? " unaligned" : "");
    ON_BOTH(what, tag, tlm_grad_unscale(be_, FP(g) + offset, n - offset, inv_scale, FP(found)));
    if (!perf_mode) {
        tb_fetch(&found);
        const size_t nc = (size_t)((float *)found.c)[0], ng = (size_t)found.host[0];
        check(nc == expect && ng == expect, "%-36s %-33s cuda %zu, cpu %zu, injected %zu", what, tag, ng, nc, expect);
        /* values: the non-finite ones must sit at the same places; the others compared normwise */
        tb_fetch(&g);
        size_t mismatch = 0;
        double num = 0, den = 0;
        for (size_t i = 0; i < n; i++) {
            const float a = g.host[i], b = ((float *)g.c)[i];
            if (!isfinite(a) != !isfinite(b) || !isnan(a) != !isnan(b)) mismatch++;
            else if (isfinite(b)) {
                num += ((double)a - b) * ((double)a - b);
                den += (double)b * b;
            }
        }
        const double err = sqrt(num / (den > 0 ? den : 1));
        snprintf(what, sizeof what, "grad_unscale x%g%s (values)", (double)inv_scale, offset ? " unaligned" : "");
        check(mismatch == 0 && err <= TOL, "%-36s %-33s rel err %.3e (limit %.0e), %zu inf/NaN misplaced", what, tag,
              err, TOL, mismatch);
    }
    TB_FREE(&found, &g);
}

static void case_grad_unscale(const tcase *t) {
    const size_t n = (size_t)t->s->B * t->s->T * t->s->C + 7;
    unscale_one(t->tag, n, 0, 1.0f / 65536.0f);
    unscale_one(t->tag, n, 1, 4.0f);
}

/* sum_squares (the gradient norm of clipping), out (1) float64: CUDA against the CPU and against
 * the float64 sum in index order computed here (within 1e-12 relative: only the order differs), and
 * the same bits on a second CUDA run (no atomics); a length with a scalar tail, an unaligned start,
 * and one long enough for the most blocks; then a NaN in the tail and an inf up front: non-finite. */
static void sumsq_one(const char *tag, size_t n, size_t offset, int inject) {
    tbuf x = tb_rand(n, 2.0, 0.0, F32);
    if (inject) {
        tb_set(&x, n - 1, NAN);
        tb_set(&x, offset, INFINITY);
        tb_upload(&x);
    }
    double *oc = tlm_alloc(cpu, sizeof(double), TLM_MEM_WORKSPACE, "test");
    double *og = tlm_alloc(gpu, sizeof(double), TLM_MEM_WORKSPACE, "test");
    if (!oc || !og) die_on(TLM_ERR_OUT_OF_MEMORY, "sum_squares out");
    char what[64];
    snprintf(what, sizeof what, "sum_squares n=%zu%s%s", n - offset, offset ? " unaligned" : "",
             inject ? " NaN+inf" : "");
    ON_BOTH(what, tag, tlm_sum_squares(be_, g_ ? og : oc, FP(x) + offset, n - offset));
    if (!perf_mode) {
        double g1 = 0, g2 = 0, want = 0;
        tlm_copy_to_host(gpu, &g1, og, sizeof g1);
        tlm_sum_squares(gpu, og, (float *)x.g + offset, n - offset);
        tlm_copy_to_host(gpu, &g2, og, sizeof g2);
        tlm_synchronize(gpu);
        for (size_t i = offset; i < n; i++) want += (double)x.host[i] * x.host[i];
        if (inject)
            check(!isfinite(g1) && !isfinite(*oc), "%-36s %-33s cuda %g, cpu %g: not finite", what, tag, g1, *oc);
        else
            check(fabs(g1 - *oc) <= 1e-12 * want && fabs(g1 - want) <= 1e-12 * want && memcmp(&g1, &g2, sizeof g1) == 0,
                  "%-36s %-33s cuda %.17g, cpu %.17g, float64 %.17g; a second cuda run the same bits", what, tag, g1,
                  *oc, want);
    }
    tlm_free(cpu, oc);
    tlm_free(gpu, og);
    tb_free(&x);
}

static void case_sum_squares(const tcase *t) {
    const size_t n = (size_t)t->s->B * t->s->T * t->s->C + 7;
    sumsq_one(t->tag, n, 0, 0);
    sumsq_one(t->tag, n, 1, 0);
    sumsq_one(t->tag, (size_t)t->s->B * t->s->T * t->s->F * 3 + 1, 0, 0);
    sumsq_one(t->tag, n, 0, 1);
}
/* the SwiGLU feed-forward's backward GEMM with SwiGLU's backward (matmul_swiglu_backward): on CUDA the
 * CUTLASS kernel with it in its epilogue where it runs (bf16 on sm_90, C and F multiples of 8: the
 * small shape), else cuBLASLt and the elementwise kernel; both against the CPU's composed ops.
 * (Fused against unfused on the GPU, bit for bit where that holds: test_gpu_swiglu_gemm.) */
static void case_matmul_swiglu(const tcase *t) {
    const int N = t->s->B * t->s->T, C = t->s->C, F = t->s->F;
    const tlm_precision pm = t->pm;
    const tlm_dtype dt = t->dt;
    tbuf ab = tb_rand((size_t)N * 2 * F, 1.0, 0.0, dt);
    tbuf dy = tb_rand((size_t)N * C, 1.0, 0.0, dt), w2 = tb_rand((size_t)C * F, 0.05, 0.0, dt);
    tbuf dab = tb_poison((size_t)N * 2 * F, dt), dg = tb_poison((size_t)N * F, dt);
    ON_BOTH("matmul_swiglu_backward", t->tag,
            tlm_matmul_swiglu_backward(be_, P(dab), P(dg), P(dy), P(w2), P(ab), N, C, F, pm));
    compare("matmul_swiglu_backward (dab)", t->tag, &dab, t->tol);
    TB_FREE(&ab, &dy, &w2, &dab, &dg);
}


/* ---- the table ------------------------------------------------------------------------------------ */

enum { M_FP32 = 1, M_TF32 = 2, M_BF16 = 4, M_FP16 = 8, M_DT = M_FP32 | M_BF16 | M_FP16, M_ALL = M_DT | M_TF32 };

typedef struct {
    const char *name;   /* -o filters by its prefix */
    tlm_op_id op;       /* the op (the first, for a case that runs a forward and a backward) */
    unsigned modes;     /* the precision modes it runs in */
    double fp32_tol;    /* the tolerance in fp32; TF32_TOL in tf32, LOWP_TOL in bf16 and fp16 */
    void (*run)(const tcase *t);
} op_case;

static const op_case cases[] = {
    {"embedding", TLM_OP_EMBEDDING_FORWARD, M_FP32, TOL, case_embedding},
    {"rmsnorm", TLM_OP_RMSNORM_FORWARD, M_DT, TOL, case_rmsnorm},
    {"matmul", TLM_OP_MATMUL_FORWARD, M_ALL, GEMM_TOL, case_matmul},
    {"cast", TLM_OP_CAST, M_DT, 0.0, case_cast},
    {"rope", TLM_OP_ROPE_FORWARD, M_DT, TOL, case_rope},
    {"attention", TLM_OP_ATTENTION_FORWARD, M_ALL, GEMM_TOL, case_attention},
    {"swiglu", TLM_OP_SWIGLU_FORWARD, M_DT, TOL, case_swiglu},
    {"matmul_swiglu", TLM_OP_MATMUL_SWIGLU_BACKWARD, M_ALL, GEMM_TOL, case_matmul_swiglu},
    {"cross_entropy", TLM_OP_CROSS_ENTROPY_FORWARD, M_DT, TOL, case_cross_entropy},
    {"reduce_mean", TLM_OP_REDUCE_MEAN, M_FP32, TOL, case_reduce_mean},
    {"relu", TLM_OP_RELU_FORWARD, M_DT, 0.0, case_relu},
    {"layernorm", TLM_OP_LAYERNORM_FORWARD, M_DT, TOL, case_layernorm},
    {"adamw", TLM_OP_ADAMW_STEP, M_FP32, TOL, case_adamw},
    {"grad_unscale", TLM_OP_GRAD_UNSCALE, M_FP32, TOL, case_grad_unscale},
    {"sum_squares", TLM_OP_SUM_SQUARES, M_FP32, TOL, case_sum_squares},
    /* FlashAttention-2 has its own test against float64: test_gpu_flash_attention */
};

static const shape shapes[] = {
    {"tiny", 3, 17, 64, 4, 172, 512},
    {"odd", 2, 13, 66, 3, 171, 509}, /* D 22: nothing a multiple of 4 */
    {"small", 2, 256, 768, 12, 3072, 10000},
};

static void usage(void) {
    fprintf(stderr, "usage: test_gpu_ops [test|perf] [-o OP] [-s SHAPE]   (OP: a case name's prefix)\n");
    exit(2);
}

int main(int argc, char **argv) {
    const char *only_op = NULL, *only_shape = NULL;
    if (!tlm_knob_changed(TLM_KNOB_GEMM_TUNE)) /* the GEMMs' algorithm timing (matmul.cu) checked too, unless set */
        die_on(tlm_knob_set(TLM_KNOB_GEMM_TUNE, "1"), "TLM_GEMM_TUNE");
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "perf") == 0) perf_mode = true;
        else if (strcmp(argv[i], "test") == 0) perf_mode = false;
        else if (strcmp(argv[i], "-o") == 0 && i + 1 < argc) only_op = argv[++i];
        else if (strcmp(argv[i], "-s") == 0 && i + 1 < argc) only_shape = argv[++i];
        else usage();
    }
    if (!tlm_cuda_available() || tlm_backend_cuda_create(&gpu, 0) != TLM_OK) {
        printf("no GPU: skipped (%s)\n", tlm_cuda_available() ? tlm_last_error() : "no CUDA device");
        return 77;
    }
    die_on(tlm_backend_cpu_create(&cpu, 0), "cpu backend");
    printf("# %s; cpu: OpenBLAS; mode %s\n", gpu->description, perf_mode ? "perf" : "test");
    die_on(tlm_event_create(gpu, &perf_e0), "event");
    die_on(tlm_event_create(gpu, &perf_e1), "event");
    /* the NVTX ranges are a hook of the CUDA backend (src/cuda/nvtx.cu): a range through it */
    tlm_step_begin(gpu, 0, false);
    tlm_step_end(gpu);

    static const tlm_precision modes[] = {TLM_PRECISION_FP32, TLM_PRECISION_TF32, TLM_PRECISION_BF16,
                                          TLM_PRECISION_FP16};
    int ran = 0;
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        const shape *s = &shapes[si];
        if (only_shape && strcmp(only_shape, s->name) != 0) continue;
        for (int mi = 0; mi < 4; mi++)
            for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
                const op_case *c = &cases[ci];
                if (!(c->modes & (1u << mi)) || (only_op && strncmp(c->name, only_op, strlen(only_op)) != 0))
                    continue;
                tcase t = {.s = s, .pm = modes[mi], .dt = tlm_precision_act_dtype(modes[mi])};
                t.tol = mi == 0 ? c->fp32_tol : mi == 1 ? TF32_TOL : LOWP_TOL;
                snprintf(t.tag, sizeof t.tag, "[%s N=%dx%d C=%d H=%d F=%d V=%d]%s%s", s->name, s->B, s->T, s->C, s->H,
                         s->F, s->V, mi ? " " : "", mi ? tlm_precision_name(modes[mi]) : "");
                c->run(&t);
                ran++;
            }
    }
    check(ran > 0, "%-36s %-33s %d case runs", "the filters select some case", "", ran);
    check(test_bytes_held(gpu) == 0 && test_bytes_held(cpu) == 0, "%-36s %-33s %zu bytes still allocated",
          "every test buffer freed", "", test_bytes_held(gpu) + test_bytes_held(cpu));
    tlm_event_destroy(gpu, perf_e0);
    tlm_event_destroy(gpu, perf_e1);
    tlm_backend_destroy(gpu);
    tlm_backend_destroy(cpu);
    return test_finish();
}
