/* test_gpu_swiglu_gemm.c — d_g's GEMM with SwiGLU's backward fused into its epilogue (the op
 * matmul_swiglu_backward; CUTLASS, src/cuda/gemm_swiglu.cu, bf16 on sm_90) against the unfused
 * sequence on the same GPU: cuBLASLt's GEMM (matmul_forward with W2^T) then the elementwise kernel
 * (swiglu_backward). The forward's ab comes from the forward's own ops (matmul_forward,
 * swiglu_forward).
 *
 * What is compared, and why exactly or not:
 * - "exact" inputs (every operand k/16 with k in -2..2): every product is a multiple of 2^-8 and every
 *   partial sum is exact in fp32, whatever the order of the sums, so cuBLASLt and CUTLASS produce the
 *   same fp32 accumulators; then dab must be BIT-IDENTICAL to the unfused path's: this checks the
 *   epilogue's rounding of d_g to bf16 and its SwiGLU formulas against swiglu.cu's, and the layout
 *   (a, b, da, db at row stride 2F).
 * - "random" inputs (normal, the GEMM outputs O(1)): different kernels sum K in different orders, so
 *   the fp32 accumulators differ in their last bits and a bf16 output can differ by one unit in the
 *   last place. Within rounding: dab against the unfused path (normwise error <= 1e-2, and every
 *   element within 4 bf16 ulps (computed from a d_g an ulp apart, which silu's slope can amplify) plus
 *   1e-3 of the output's rms).
 * - every output written (poisoned with NaN before) and nothing past it (a guard of NaN after each
 *   output stays untouched: TMA's clipping of ragged tiles); two runs give the same bits.
 * - shapes: the 2.7B model's feed-forward (N 1024 tokens, C 2560, F 10240), the small model's, one
 *   ragged against the 128 x 128 x 64 tiles, one with K < 64, and one with F not a multiple of 8 (the
 *   fused kernel refuses it: the op must take the unfused path, bit-identical to it).
 * The path each shape takes is printed (tlm_cuda_matmul_swiglu_refusal: NULL = fused), and checked: the
 * fused kernel must run every call they are chosen for (CUTLASS's can_implement may not decline one:
 * tlm_cuda_matmul_swiglu_fused_calls counts them), none for the others. With CUDA but
 * no fused path (built without CUTLASS, or a GPU other than sm_90) the checks still run (the fallback)
 * and the test exits 77 (skipped) unless one failed, saying why. Also prints the fused and unfused
 * times of each shape (no assertion: bench/device's before/after stage measures the model).
 * Usage: test_gpu_swiglu_gemm (no arguments). */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_check.h"
#include "tlm/backend.h"
#include "tlm/ops.h"
#include "tlm/rng.h"
#ifdef TLM_HAVE_CUDA
#include "cuda/gemm_swiglu.h"
#endif

#define GUARD 4096 /* elements of NaN after each output, checked untouched */
#define BF16_NAN 0xFFFFu

static tlm_backend *gpu;

/* matmul_swiglu calls the fused kernels ran so far (0 without CUDA) */
static unsigned long long fused_calls(void) {
#ifdef TLM_HAVE_CUDA
    return tlm_cuda_matmul_swiglu_fused_calls();
#else
    return 0;
#endif
}
static uint64_t rng = 0x5A1u;

static float from_bf16(uint16_t h) {
    const uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}
static uint16_t to_bf16(float f) { /* nearest even; the inputs are finite */
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

/* a bf16 tensor of n elements (+ GUARD) on the GPU and its host copy */
typedef struct {
    size_t n;
    uint16_t *h;
    void *d;
} buf;

static buf b_new(size_t n) {
    buf b = {n, malloc((n + GUARD) * sizeof(uint16_t)), tlm_alloc(gpu, (n + GUARD) * 2, TLM_MEM_ACTIVATIONS, "test")};
    if (!b.h || !b.d) die_on(TLM_ERR_OUT_OF_MEMORY, "test buffer");
    for (size_t i = 0; i < n + GUARD; i++) b.h[i] = BF16_NAN;
    return b;
}
static void b_up(buf *b) { tlm_copy_to_backend(gpu, b->d, b->h, (b->n + GUARD) * 2); }
static void b_down(buf *b) {
    tlm_copy_to_host(gpu, b->h, b->d, (b->n + GUARD) * 2);
    tlm_synchronize(gpu);
}
static void b_free(buf *b) {
    free(b->h);
    tlm_free(gpu, b->d);
}
static buf b_poisoned(size_t n) {
    buf b = b_new(n);
    b_up(&b);
    return b;
}
/* inputs: exact (k/16, k in -2..2) or normal(0, scale) */
static buf b_input(size_t n, bool exact, double scale) {
    buf b = b_new(n);
    for (size_t i = 0; i < n; i++)
        b.h[i] = to_bf16(exact ? (float)((int)(tlm_rng_next(&rng) % 5) - 2) / 16.0f
                               : (float)(scale * tlm_rng_normal(&rng)));
    b_up(&b);
    return b;
}

/* every element written (finite) and the guard after it untouched */
static void check_written(const char *what, const char *tag, buf *b) {
    size_t bad = 0, guard = 0;
    for (size_t i = 0; i < b->n; i++) bad += !isfinite(from_bf16(b->h[i]));
    for (size_t i = b->n; i < b->n + GUARD; i++) guard += b->h[i] != BF16_NAN;
    check(bad == 0 && guard == 0, "%-34s %-22s every element written (%zu not finite), nothing past it (%zu of %d "
          "guard elements changed)", what, tag, bad, guard, GUARD);
}

static void check_identical(const char *what, const char *tag, const buf *got, const buf *want, const char *why) {
    size_t diff = 0, first = 0;
    for (size_t i = 0; i < got->n; i++)
        if (got->h[i] != want->h[i] && !diff++) first = i;
    if (diff)
        check(false, "%-34s %-22s bit-identical %s: %zu of %zu differ, the first at %zu: %a vs %a", what, tag, why,
              diff, got->n, first, (double)from_bf16(got->h[first]), (double)from_bf16(want->h[first]));
    else
        check(true, "%-34s %-22s bit-identical %s (%zu elements)", what, tag, why, got->n);
}

/* within bf16 rounding of the unfused path (the GEMMs sum in different orders): see the header */
static void check_close(const char *what, const char *tag, const buf *got, const buf *want, int ulps) {
    const double rel = ldexp(1.0, -7) * ulps; /* a bf16 ulp is at most 2^-7 of the value */
    double num = 0, den = 0;
    for (size_t i = 0; i < got->n; i++) {
        const double w = from_bf16(want->h[i]), d = (double)from_bf16(got->h[i]) - w;
        num += d * d;
        den += w * w;
    }
    const double rms = sqrt(den / (double)got->n), err = sqrt(num / (den > 0 ? den : 1));
    size_t far = 0, first = 0, same = 0;
    for (size_t i = 0; i < got->n; i++) {
        const double g = from_bf16(got->h[i]), w = from_bf16(want->h[i]);
        same += got->h[i] == want->h[i];
        if (fabs(g - w) > rel * fmax(fabs(g), fabs(w)) + 1e-3 * rms && !far++) first = i;
    }
    check(err <= 1e-2 && far == 0,
          "%-34s %-22s within bf16 rounding of the unfused path: normwise %.2e (<= 1e-2), %zu elements beyond %d ulps "
          "+ 1e-3 rms%s%.4g vs %.4g); %.1f%% bit-identical", what, tag, err, far, ulps, far ? " (the first: " : " (",
          far ? (double)from_bf16(got->h[first]) : 0.0, far ? (double)from_bf16(want->h[first]) : 0.0,
          100.0 * (double)same / (double)got->n);
}

/* ms per call of `call`, 10 timed after 3 warm-up runs */
#define TIME_MS(out, call)                                                                                            \
    do {                                                                                                              \
        for (int r_ = 0; r_ < 3; r_++) call;                                                                          \
        tlm_event_record(gpu, e0, NULL);                                                                              \
        for (int r_ = 0; r_ < 10; r_++) call;                                                                         \
        tlm_event_record(gpu, e1, NULL);                                                                              \
        tlm_synchronize(gpu);                                                                                         \
        out = tlm_event_elapsed_ms(gpu, e0, e1) / 10;                                                                 \
    } while (0)

typedef struct {
    const char *name;
    int N, C, F;
} shape;

static tlm_event *e0, *e1;
static int fused_shapes, fusable_shapes;

static void run_shape(const shape *s, bool exact) {
    const int N = s->N, C = s->C, F = s->F;
    const tlm_precision pm = TLM_PRECISION_BF16;
    const tlm_dtype dt = TLM_DTYPE_BF16;
    char tag[64];
    snprintf(tag, sizeof tag, "[%s %s]", s->name, exact ? "exact" : "random");
    const char *refusal = NULL;
#ifdef TLM_HAVE_CUDA
    refusal = tlm_cuda_matmul_swiglu_refusal(C, F, dt);
#endif
    printf("# %s N=%d C=%d F=%d: %s%s\n", tag, N, C, F, refusal ? "unfused: " : "fused (CUTLASS)",
           refusal ? refusal : "");
    if (exact) {
        fused_shapes += refusal == NULL;
        fusable_shapes += C % 8 == 0 && F % 8 == 0;
    }
    const double ws = 1.0 / sqrt((double)C); /* random: the GEMM outputs ~ normal(0, 1) */
    const size_t nab = (size_t)N * 2 * F, ng = (size_t)N * F;
    buf x = b_input((size_t)N * C, exact, 1.0), w13 = b_input((size_t)2 * F * C, exact, ws);
    buf ab = b_poisoned(nab);

    /* the forward's ab, as the model makes it */
    tlm_matmul_forward(gpu, ab.d, NULL, x.d, w13.d, N, C, 2 * F, pm);

    /* backward: d_g = dy W2, the reference through matmul_forward with W2^T (cuBLASLt) */
    buf dy = b_input((size_t)N * C, exact, 1.0), w2 = b_input((size_t)C * F, exact, ws), w2t = b_new((size_t)F * C);
    for (int c = 0; c < C; c++)
        for (int f = 0; f < F; f++) w2t.h[(size_t)f * C + c] = w2.h[(size_t)c * F + f];
    b_up(&w2t);
    buf dab = b_poisoned(nab), dg = b_poisoned(ng), dab_ref = b_poisoned(nab), dg_ref = b_poisoned(ng);
    buf dab2 = b_poisoned(nab);
    tlm_matmul_forward(gpu, dg_ref.d, NULL, dy.d, w2t.d, N, C, F, pm);
    tlm_swiglu_backward(gpu, dab_ref.d, dg_ref.d, ab.d, N, F, dt);
    const unsigned long long calls1 = fused_calls();
    tlm_matmul_swiglu_backward(gpu, dab.d, dg.d, dy.d, w2.d, ab.d, N, C, F, pm);
    tlm_matmul_swiglu_backward(gpu, dab2.d, dg.d, dy.d, w2.d, ab.d, N, C, F, pm);
    check(fused_calls() - calls1 == (refusal ? 0u : 2u), "%-34s %-22s the fused kernel ran %llu of 2 calls (want %d)",
          "matmul_swiglu_backward path", tag, fused_calls() - calls1, refusal ? 0 : 2);
    b_down(&dab), b_down(&dab_ref), b_down(&dab2);
    check_written("matmul_swiglu_backward dab", tag, &dab);
    check_identical("matmul_swiglu_backward (2nd run)", tag, &dab2, &dab, "to the 1st run's dab");
    if (exact)
        check_identical("matmul_swiglu_backward dab", tag, &dab, &dab_ref,
                        "to cuBLASLt + swiglu_backward (exact sums)");
    else
        check_close("matmul_swiglu_backward dab", tag, &dab, &dab_ref, 4);

    if (!exact) { /* times (information only) */
        double fb_ms, ub_ms;
        TIME_MS(fb_ms, tlm_matmul_swiglu_backward(gpu, dab.d, dg.d, dy.d, w2.d, ab.d, N, C, F, pm));
        TIME_MS(ub_ms, (tlm_matmul_forward(gpu, dg_ref.d, NULL, dy.d, w2t.d, N, C, F, pm),
                        tlm_swiglu_backward(gpu, dab_ref.d, dg_ref.d, ab.d, N, F, dt)));
        printf("# %s time: backward %.4f ms (unfused %.4f: cuBLASLt d_g GEMM + swiglu_backward)\n", tag, fb_ms,
               ub_ms);
    }
    buf *all[] = {&x, &w13, &ab, &dy, &w2, &w2t, &dab, &dg, &dab_ref, &dg_ref, &dab2};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) b_free(all[i]);
}

int main(void) {
    if (!tlm_cuda_available() || tlm_backend_cuda_create(&gpu, 0) != TLM_OK) {
        printf("no GPU: skipped (%s)\n", tlm_cuda_available() ? tlm_last_error() : "no CUDA device");
        return 77;
    }
    printf("# %s\n", gpu->description);
    die_on(tlm_event_create(gpu, &e0), "event");
    die_on(tlm_event_create(gpu, &e1), "event");
    static const shape shapes[] = {
        {"2.7B", 1024, 2560, 10240}, /* the 2.7B model's feed-forward at batch 4 x context 256 */
        {"small", 512, 768, 3072},   /* the small model's */
        {"ragged", 300, 264, 200},   /* N, F, C all ragged against the 128 x 128 x 64 tiles */
        {"K<64", 77, 40, 72},        /* a K shorter than one tile's */
        {"F%8", 50, 64, 172},        /* F not a multiple of 8: the unfused path */
    };
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        run_shape(&shapes[i], true);
        run_shape(&shapes[i], false);
    }
    check(test_bytes_held(gpu) == 0, "%-34s %-22s %zu bytes still allocated", "every test buffer freed", "",
          test_bytes_held(gpu));
    tlm_event_destroy(gpu, e0);
    tlm_event_destroy(gpu, e1);
    tlm_backend_destroy(gpu);
    const int rc = test_finish();
    if (rc == 0 && fused_shapes < fusable_shapes) {
        printf("skipped: the fused path ran for %d of the %d shapes it is built for (the reason is printed above, "
               "'unfused: ...'); only the fallback was checked\n", fused_shapes, fusable_shapes);
        return 77;
    }
    return rc;
}
