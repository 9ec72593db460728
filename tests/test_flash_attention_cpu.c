/* test_flash_attention_cpu.c — the CPU FlashAttention-2 reference (src/cpu/flash_attention.c)
 * against naive attention.
 *
 * 1. The CS336 reference case (A2 §2.8): q, k, v, dO ~ normal, shape (4,128,64) (B = 4, T = 128,
 *    one head, D = 64), seed 0 of tlm's generator (not PyTorch's numbers), causal and not.
 *    O, L, dQ, dK, dV elementwise within rtol = atol = 1e-2 (torch.allclose's rule
 *    |a - b| <= atol + rtol |b|) of the naive result: the CPU backend's naive attention op
 *    (causal, fp32) where it applies, else the float64 reference below; the max |error| against
 *    both is printed (fp32 gives ~1e-6).
 * 2. Random cases against a float64 naive attention written here (any Tq, Tk, causal or not,
 *    bottom-right causal mask, lse, and the backward with delta = rowsum(P * dP), not the
 *    rowsum(dO * O) that the flash backward uses): d_head 16, 32, 64, 80, 128 (and a few odd
 *    ones), sequence lengths 1, 17, 100 (1000 for D = 64), tiles that do not divide them,
 *    Tq != Tk, causal with Tk < Tq (fully masked rows) and Tk > Tq. Normalized error
 *    ||got - want|| / ||want|| <= 1e-5 per tensor (fp32 round-off is ~1e-7 here).
 *    Every output is poisoned with NaN first and must come back finite in its H*D columns;
 *    the padding columns of a row (ld > H*D) are NaN in the inputs (so reading them would show)
 *    and must stay NaN in the outputs; fully masked rows give out = 0 and lse = -inf.
 * 3. Causal tiles above the diagonal are skipped: tlm_flash_cpu_tiles_visited equals the number
 *    of tiles holding at least one visible (query, key) pair, counted element by element here,
 *    in the forward and the backward; 10 of 16 for causal T = 256, Br = Bc = 64.
 * 4. The results are bitwise the same on 1 and 2 threads.
 * Prints one line per check and a final "N passed, M failed"; exits 1 on any failure. */
#include "tlm/flash_attention.h"
#include "tlm/backend.h"
#include "tlm/rng.h"
#include "cpu/cpu_ops.h"
#include "test_check.h"
#include "attention_reference.h"

#include <math.h>
#include <omp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NORM_TOL 1e-5  /* normalized error against float64 */
#define CS336_TOL 1e-2 /* rtol = atol of the CS336 reference test */

static uint64_t rng = 0x5EED;

/* ---- buffers ------------------------------------------------------------------------------- */

static float *floats(size_t n) {
    float *p = malloc((n ? n : 1) * sizeof(float));
    TLM_ASSERT(p);
    return p;
}

static double *doubles(size_t n) {
    double *p = calloc(n ? n : 1, sizeof(double));
    TLM_ASSERT(p);
    return p;
}

static void poison(float *x, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] = NAN;
}

/* rows x ld, columns [0, C) normal(0, 1) (never exactly 0 in practice), the rest NaN */
static float *randn_rows(uint64_t *state, size_t rows, int ld, int C) {
    float *p = floats(rows * ld);
    for (size_t r = 0; r < rows; r++)
        for (int c = 0; c < ld; c++) p[r * ld + c] = c < C ? (float)tlm_rng_normal(state) : NAN;
    return p;
}

/* dst (rows, C) contiguous = columns [col, col+C) of src (row stride ld) */
static float *gather(const float *src, size_t rows, int ld, int col, int C) {
    float *dst = floats(rows * C);
    for (size_t r = 0; r < rows; r++) memcpy(dst + r * C, src + r * ld + col, C * sizeof(float));
    return dst;
}

static double *widen(const float *x, size_t n) {
    double *d = doubles(n);
    for (size_t i = 0; i < n; i++) d[i] = x[i];
    return d;
}

/* ---- the float64 naive reference ----------------------------------------------------------- */

typedef struct {
    int B, Tq, Tk, H, D;
    bool causal;
    int Br, Bc;
    int pad; /* ld_qkv = ld_out = H*D + pad */
} fa_case;

/* the float64 naive reference (attention_reference.h) on a case: inputs with row stride ld */
static void reference(const fa_case *c, int ld, const float *q, const float *k, const float *v,
                      const float *dout, double *out, double *lse, double *dq, double *dk,
                      double *dv) {
    attn_reference(c->B, c->Tq, c->Tk, c->H, c->D, c->causal, ld, q, k, v, dout, out, lse, dq, dk, dv);
}

/* (query tile, key tile) pairs holding at least one visible pair, element by element */
static int64_t expected_tiles(const fa_case *c) {
    int64_t n = 0;
    for (int i0 = 0; i0 < c->Tq; i0 += c->Br)
        for (int j0 = 0; j0 < c->Tk; j0 += c->Bc) {
            bool any = !c->causal;
            for (int i = i0; i < i0 + c->Br && i < c->Tq && !any; i++)
                for (int j = j0; j < j0 + c->Bc && j < c->Tk && !any; j++)
                    any = j <= i + (c->Tk - c->Tq);
            n += any;
        }
    return n * c->B * c->H;
}

/* ---- one random case ----------------------------------------------------------------------- */

static double worst[5];                 /* O, L, dQ, dK, dV: largest normalized error */
static char worst_case[5][96];
static const char *tensor_name[5] = {"O", "L", "dQ", "dK", "dV"};

static void note_worst(int t, double err, const char *name) {
    if (err > worst[t]) {
        worst[t] = err;
        snprintf(worst_case[t], sizeof worst_case[t], "%s", name);
    }
}

/* true if rows x ld columns [C, ld) of x are all NaN (the padding was not written) */
static bool padding_untouched(const float *x, size_t rows, int ld, int C) {
    for (size_t r = 0; r < rows; r++)
        for (int c = C; c < ld; c++)
            if (!isnan(x[r * ld + c])) return false;
    return true;
}

static bool finite_columns(const float *x, size_t rows, int ld, int C) {
    for (size_t r = 0; r < rows; r++)
        for (int c = 0; c < C; c++)
            if (!isfinite(x[r * ld + c])) return false;
    return true;
}

/* Runs forward and backward of case c; returns the tiles the forward visited. */
static int64_t run_case(const fa_case *c) {
    const int B = c->B, Tq = c->Tq, Tk = c->Tk, H = c->H, D = c->D, C = H * D, ld = C + c->pad;
    const size_t nq = (size_t)B * Tq, nk = (size_t)B * Tk, nlse = (size_t)B * H * Tq;
    char name[96];
    snprintf(name, sizeof name, "B=%d H=%d D=%d Tq=%d Tk=%d %s Br=%d Bc=%d ld=%d", B, H, D, Tq,
             Tk, c->causal ? "causal" : "full", c->Br, c->Bc, ld);

    float *q = randn_rows(&rng, nq, ld, C), *k = randn_rows(&rng, nk, ld, C);
    float *v = randn_rows(&rng, nk, ld, C), *dout = randn_rows(&rng, nq, ld, C);
    float *out = floats(nq * ld), *lse = floats(nlse);
    float *dq = floats(nq * ld), *dk = floats(nk * ld), *dv = floats(nk * ld);
    poison(out, nq * ld);
    poison(lse, nlse);
    poison(dq, nq * ld);
    poison(dk, nk * ld);
    poison(dv, nk * ld);

    tlm_flash_cpu_tiles_visited = 0;
    tlm_flash_attention_forward_cpu(out, lse, q, k, v, ld, ld, B, Tq, Tk, H, D, c->causal, c->Br,
                                    c->Bc);
    const int64_t fwd_tiles = tlm_flash_cpu_tiles_visited;
    tlm_flash_cpu_tiles_visited = 0;
    tlm_flash_attention_backward_cpu(dq, dk, dv, dout, q, k, v, out, lse, ld, ld, B, Tq, Tk, H, D,
                                     c->causal, c->Br, c->Bc);
    const int64_t bwd_tiles = tlm_flash_cpu_tiles_visited;

    double *want_out = doubles(nq * C), *want_lse = doubles(nlse), *want_dq = doubles(nq * C);
    double *want_dk = doubles(nk * C), *want_dv = doubles(nk * C);
    reference(c, ld, q, k, v, dout, want_out, want_lse, want_dq, want_dk, want_dv);

    float *got[5] = {gather(out, nq, ld, 0, C), lse, gather(dq, nq, ld, 0, C),
                     gather(dk, nk, ld, 0, C), gather(dv, nk, ld, 0, C)};
    const double *want[5] = {want_out, want_lse, want_dq, want_dk, want_dv};
    const size_t n[5] = {nq * C, nlse, nq * C, nk * C, nk * C};
    double err[5];
    for (int t = 0; t < 5; t++) {
        err[t] = attn_norm_error(got[t], want[t], n[t]);
        note_worst(t, err[t], name);
    }
    check(err[0] <= NORM_TOL && err[1] <= NORM_TOL, "%s: forward vs float64: O %.1e, L %.1e",
          name, err[0], err[1]);
    check(err[2] <= NORM_TOL && err[3] <= NORM_TOL && err[4] <= NORM_TOL,
          "%s: backward vs float64: dQ %.1e, dK %.1e, dV %.1e", name, err[2], err[3], err[4]);

    /* every element of the H*D columns written and finite, the padding untouched, lse never
     * NaN and -inf exactly on the fully masked rows (whose out is exactly 0) */
    bool written = finite_columns(out, nq, ld, C) && finite_columns(dq, nq, ld, C) &&
                   finite_columns(dk, nk, ld, C) && finite_columns(dv, nk, ld, C);
    bool padding = padding_untouched(out, nq, ld, C) && padding_untouched(dq, nq, ld, C) &&
                   padding_untouched(dk, nk, ld, C) && padding_untouched(dv, nk, ld, C);
    int masked_rows = 0;
    bool masked_ok = true;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int i = 0; i < Tq; i++) {
                float L = lse[((size_t)b * H + h) * Tq + i];
                bool empty = c->causal && i + (Tk - Tq) < 0;
                masked_rows += empty;
                masked_ok &= empty ? L == -INFINITY : isfinite(L);
                for (int d = 0; d < D && empty; d++)
                    masked_ok &= out[(size_t)(b * Tq + i) * ld + h * D + d] == 0.0f &&
                                 dq[(size_t)(b * Tq + i) * ld + h * D + d] == 0.0f;
            }
    check(written && padding && masked_ok,
          "%s: every output written, no NaN, padding untouched; %d fully masked rows give "
          "out = dq = 0, lse = -inf%s%s%s", name, masked_rows, written ? "" : " (NOT WRITTEN)",
          padding ? "" : " (PADDING WRITTEN)", masked_ok ? "" : " (WRONG)");

    const int64_t want_tiles = expected_tiles(c);
    check(fwd_tiles == want_tiles && bwd_tiles == want_tiles,
          "%s: tiles visited forward %lld, backward %lld (expected %lld)", name,
          (long long)fwd_tiles, (long long)bwd_tiles, (long long)want_tiles);

    for (int t = 0; t < 5; t++)
        if (t != 1) free(got[t]);
    free(q), free(k), free(v), free(dout), free(out), free(lse), free(dq), free(dk), free(dv);
    free(want_out), free(want_lse), free(want_dq), free(want_dk), free(want_dv);
    return fwd_tiles;
}

/* ---- the CS336 reference case -------------------------------------------------------------- */

static void test_cs336(tlm_backend *be, bool causal) {
    const int B = 4, T = 128, H = 1, D = 64, C = H * D, ld = 3 * C;
    const size_t N = (size_t)B * T;
    const tlm_flash_tiles tiles = tlm_flash_cpu_default_tiles();
    const char *mode = causal ? "causal" : "non-causal";
    uint64_t seed0 = 0;
    /* q | k | v in one (N, 3C) buffer: the naive op's layout */
    float *qkv = floats(N * ld), *dout = floats(N * C);
    for (size_t n = 0; n < N; n++)
        for (int s = 0; s < 3; s++)
            for (int d = 0; d < C; d++) qkv[n * ld + s * C + d] = (float)tlm_rng_normal(&seed0);
    for (size_t i = 0; i < N * C; i++) dout[i] = (float)tlm_rng_normal(&seed0);
    const float *q = qkv, *k = qkv + C, *v = qkv + 2 * C;

    float *out = floats(N * C), *lse = floats((size_t)B * H * T), *dqkv = floats(N * ld);
    poison(out, N * C);
    poison(lse, (size_t)B * H * T);
    poison(dqkv, N * ld);
    tlm_flash_attention_forward_cpu(out, lse, q, k, v, ld, C, B, T, T, H, D, causal, tiles.Br,
                                    tiles.Bc);
    tlm_flash_attention_backward_cpu(dqkv, dqkv + C, dqkv + 2 * C, dout, q, k, v, out, lse, ld, C,
                                     B, T, T, H, D, causal, tiles.Br, tiles.Bc);

    /* float64 reference; it reads dout with q's row stride: a strided copy */
    fa_case c = {B, T, T, H, D, causal, tiles.Br, tiles.Bc, 0};
    float *dout_ld = floats(N * ld);
    for (size_t n = 0; n < N; n++) memcpy(dout_ld + n * ld, dout + n * C, C * sizeof(float));
    double *want[5] = {doubles(N * C), doubles((size_t)B * H * T), doubles(N * C), doubles(N * C),
                       doubles(N * C)};
    reference(&c, ld, q, k, v, dout_ld, want[0], want[1], want[2], want[3], want[4]);

    /* the naive op (causal only): out, dq, dk, dv in fp32 */
    double *naive[5] = {NULL, NULL, NULL, NULL, NULL};
    if (causal) {
        float *nout = floats(N * C), *probs = floats((size_t)B * H * T * T);
        float *ndqkv = floats(N * ld), *dprobs = floats((size_t)B * H * T * T);
        tlm_cpu_attention_forward(be, nout, probs, q, k, v, ld, B, T, H, D, TLM_PRECISION_FP32);
        tlm_cpu_attention_backward(be, ndqkv, ndqkv + C, ndqkv + 2 * C, dprobs, dout, q, k, v,
                                   probs, ld, B, T, H, D, TLM_PRECISION_FP32);
        naive[0] = widen(nout, N * C);
        for (int s = 0; s < 3; s++) {
            float *g = gather(ndqkv, N, ld, s * C, C);
            naive[2 + s] = widen(g, N * C);
            free(g);
        }
        free(nout), free(probs), free(ndqkv), free(dprobs);
    }

    float *got[5] = {out, lse, gather(dqkv, N, ld, 0, C), gather(dqkv, N, ld, C, C),
                     gather(dqkv, N, ld, 2 * C, C)};
    for (int t = 0; t < 5; t++) {
        const size_t n = t == 1 ? (size_t)B * H * T : N * C;
        const double *ref = naive[t] ? naive[t] : want[t];
        bool ok = attn_allclose(got[t], ref, n, CS336_TOL, CS336_TOL);
        double e64 = attn_max_error(got[t], want[t], n);
        if (naive[t])
            check(ok, "CS336 (4,128,64) %s %s: allclose(rtol=atol=1e-2) vs the naive op; "
                  "max |error| %.1e vs naive fp32, %.1e vs float64", mode, tensor_name[t],
                  attn_max_error(got[t], naive[t], n), e64);
        else
            check(ok, "CS336 (4,128,64) %s %s: allclose(rtol=atol=1e-2) vs float64 naive; "
                  "max |error| %.1e", mode, tensor_name[t], e64);
    }
    for (int t = 0; t < 5; t++) {
        free(want[t]);
        free(naive[t]);
        if (t >= 2) free(got[t]);
    }
    free(qkv), free(dout), free(dout_ld), free(out), free(lse), free(dqkv);
}

/* ---- determinism across thread counts ------------------------------------------------------ */

static void test_threads(void) {
    const int B = 2, T = 100, H = 2, D = 32, C = H * D;
    const size_t N = (size_t)B * T, nl = (size_t)B * H * T;
    float *q = randn_rows(&rng, N, C, C), *k = randn_rows(&rng, N, C, C);
    float *v = randn_rows(&rng, N, C, C), *dout = randn_rows(&rng, N, C, C);
    float *res[2][5];
    const int threads[2] = {1, 2};
    const int saved = omp_get_max_threads();
    for (int r = 0; r < 2; r++) {
        omp_set_num_threads(threads[r]);
        float **o = res[r];
        o[0] = floats(N * C), o[1] = floats(nl), o[2] = floats(N * C), o[3] = floats(N * C);
        o[4] = floats(N * C);
        tlm_flash_attention_forward_cpu(o[0], o[1], q, k, v, C, C, B, T, T, H, D, true, 16, 32);
        tlm_flash_attention_backward_cpu(o[2], o[3], o[4], dout, q, k, v, o[0], o[1], C, C, B, T,
                                         T, H, D, true, 16, 32);
    }
    omp_set_num_threads(saved);
    bool same = true;
    for (int t = 0; t < 5; t++)
        same &= memcmp(res[0][t], res[1][t], (t == 1 ? nl : N * C) * sizeof(float)) == 0;
    check(same, "B=%d H=%d D=%d T=%d causal: out, lse, dq, dk, dv bitwise equal on 1 and 2 threads",
          B, H, D, T);
    for (int r = 0; r < 2; r++)
        for (int t = 0; t < 5; t++) free(res[r][t]);
    free(q), free(k), free(v), free(dout);
}

int main(void) {
    double t0 = omp_get_wtime();
    tlm_backend *be;
    if (tlm_backend_cpu_create(&be, 0) != TLM_OK) {
        fprintf(stderr, "tlm_backend_cpu_create: %s\n", tlm_last_error());
        return 1;
    }

    /* 1. CS336 */
    test_cs336(be, true);
    test_cs336(be, false);

    /* 2. random cases: every d_head x T in {1, 17, 100} x causal or not, tiles 16 x 32 (do not
     * divide 17 or 100) and the default 64 x 64; padded rows on every other case */
    const int dheads[5] = {16, 32, 64, 80, 128}, seqs[3] = {1, 17, 100};
    int nth = 0;
    for (int di = 0; di < 5; di++)
        for (int si = 0; si < 3; si++)
            for (int causal = 0; causal < 2; causal++)
                for (int tile = 0; tile < 2; tile++) {
                    fa_case c = {2, seqs[si], seqs[si], 3, dheads[di], causal, tile ? 64 : 16,
                                 tile ? 64 : 32, nth++ % 2 ? 5 : 0};
                    run_case(&c);
                }
    static const fa_case more[] = {
        /* T = 1000 (one d_head), both tile shapes, full and causal */
        {1, 1000, 1000, 2, 64, false, 16, 32, 3},
        {1, 1000, 1000, 2, 64, false, 64, 64, 0},
        {1, 1000, 1000, 2, 64, true, 16, 32, 3},
        {1, 1000, 1000, 2, 64, true, 64, 64, 0},
        /* Tq != Tk, not causal */
        {2, 17, 100, 2, 64, false, 16, 32, 1},
        {2, 100, 17, 2, 80, false, 16, 32, 0},
        {3, 1, 100, 2, 32, false, 64, 64, 0},
        /* causal, Tk < Tq: the first Tq - Tk rows see no key */
        {2, 100, 37, 2, 64, true, 16, 32, 2},
        {2, 17, 5, 3, 16, true, 4, 3, 0},
        {1, 64, 1, 1, 128, true, 64, 64, 0},
        /* causal, Tk > Tq (bottom-right: query 0 sees keys 0..Tk-Tq) */
        {2, 17, 100, 2, 64, true, 16, 32, 0},
        /* other d_head (the CPU takes any), degenerate tiles */
        {2, 33, 33, 2, 96, true, 8, 8, 0},
        {2, 33, 33, 2, 2, true, 5, 7, 1},
        {1, 23, 23, 2, 7, true, 1, 1, 0},
    };
    for (size_t i = 0; i < sizeof more / sizeof more[0]; i++) run_case(&more[i]);

    /* 3. causal T = 256, Br = Bc = 64: 10 of 16 tiles; not causal: 16 */
    int64_t causal_tiles = run_case(&(fa_case){1, 256, 256, 1, 16, true, 64, 64, 0});
    check(causal_tiles == 10, "causal T=256 Br=Bc=64: the forward visits %lld of 16 tiles "
          "(expected 10: the 6 above the diagonal are skipped)", (long long)causal_tiles);
    int64_t full_tiles = run_case(&(fa_case){1, 256, 256, 1, 16, false, 64, 64, 0});
    check(full_tiles == 16, "non-causal T=256 Br=Bc=64: the forward visits %lld of 16 tiles",
          (long long)full_tiles);

    /* 4. */
    test_threads();

    printf("worst normalized errors against float64 (tolerance %.0e):\n", NORM_TOL);
    for (int t = 0; t < 5; t++)
        printf("  %-2s %.2e  (%s)\n", tensor_name[t], worst[t], worst_case[t]);
    tlm_backend_destroy(be);
    printf("time %.2f s on %d threads\n", omp_get_wtime() - t0, omp_get_max_threads());
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
