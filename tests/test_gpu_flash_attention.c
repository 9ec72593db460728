/* test_gpu_flash_attention.c — the CUDA FlashAttention-2 ops (ops.def: flash_attention_forward,
 * flash_attention_backward; the device's `supports` says which (d_head, dtype) they take;
 * src/cuda/attention/: select.cu's rule picks among mma_forward.cu / mma_backward.cu and the Hopper
 * sm90_forward.cu / sm90_backward.cu for bf16/fp16, tf32.cu for tf32, f32.cu for fp32), called through the dispatch on the CUDA backend in each precision mode, against a float64
 * naive attention computed here on the host, and at a large size against the CUDA naive attention
 * op. The semantics are those of include/tlm/flash_attention.h (the CPU reference is the spec):
 * layout (B,T,H,D) with row strides, bottom-right causal mask, a fully masked row gives out = 0 and
 * lse = -inf, never NaN.
 *
 * 1. supports (both ops, TLM_SUPPORT_FAST) for d_head 16, 32, 64, 80, 128 in fp32, bf16, fp16;
 *    TLM_SUPPORT_NONE with a message (naming the d_head) for d_head 8, 48, 256 and for the
 *    dtypes I32 and F64.
 * 2. The CS336 reference case (A2 §2.8): q, k, v, dO ~ normal (4,128,64) (B = 4, T = 128, one
 *    head, D = 64), seed 0 of tlm's generator (the numbers of test_flash_attention_cpu.c, not
 *    PyTorch's), fp32, causal and not: O, L, dQ, dK, dV elementwise within rtol = atol = 1e-2
 *    (torch.allclose: |a - b| <= atol + rtol |b|) of the float64 naive reference; the same in tf32.
 * 3. Random cases in fp32, bf16, fp16 and tf32 (tf32 draws from a stream of its own, so the other
 *    modes' inputs are what they were before it existed): every d_head {16, 32, 64, 80, 128} x T in {1, 17, 129}
 *    x causal or not; T = 64, 128, 256 with B = 2, H = 4; T = 1000 (every d_head in bf16, two in
 *    fp32, tf32 and fp16; B = 1, H = 2: the float64 reference is the slow part); Tq != Tk: Tk > Tq and
 *    Tk < Tq, not causal and causal (Tk < Tq causal: the first Tq - Tk rows are fully masked, up
 *    to whole query tiles of them). The reference is float64 naive attention on the SAME inputs:
 *    drawn in float32 and, for bf16/fp16, rounded to the dtype (round to nearest even, with
 *    src/core/convert.h) before both the upload and the reference, so the reference is exact for
 *    what the kernel was given (in tf32 the inputs are fp32: the kernels round them to TF32, and
 *    that rounding is part of the error). Normalized error ||got - want|| / ||want|| per tensor (a tensor
 *    that is exactly 0 in the reference, dQ and dK when every row sees one key, is measured by the
 *    RMS of the result instead: the inputs are O(1)).
 *    Layouts: q, k, v as the thirds of one buffer (ld_qkv = 3*H*D [+ 8 padding columns]) with
 *    dq, dk, dv the thirds of one gradient buffer, as the model calls it; or three separate
 *    buffers (ld_qkv = H*D + 8); ld_out = H*D or H*D + 8. Every byte the kernels must not touch
 *    is poisoned: outputs, lse and the workspace start as all-0xFF bytes (NaN in fp32, bf16 and
 *    fp16); the padding columns and the unused rows of the input buffers (a fused buffer has
 *    B*max(Tq,Tk) rows) are NaN too, so reading them shows up as NaN. Checked: every element of
 *    out, dq, dk, dv written and finite; lse finite except exactly -inf on the fully masked rows,
 *    whose out and dq are exactly 0; the padding and unused rows of out, dq, dk, dv still the
 *    poison bytes; the inputs (q, k, v, dout, padding included) bitwise unchanged by both passes
 *    and out, lse unchanged by the backward.
 * 3b. d_head 80 in bf16 and fp16 at the shapes that reach every path of the Hopper kernels'
 *    d_head-80 layout (sm90_forward.cu: tiles of two 64-column blocks, the second 16 wide;
 *    the backward's dQ split 64 + 16 between its warpgroups): Tq a multiple of 64 (the tiled dQ
 *    accumulator and its bulk adds) with several key and query tiles, heads and batch, causal and
 *    not, Tk > Tq and Tk < Tq (whole query tiles fully masked), the LM's fused layout (B = 2,
 *    T = 256, H = 8), and Tq odd (the float4-atomic dQ); inputs from a stream of their own (the
 *    other cases' inputs are what they were before it existed); against float64 as in 3. The
 *    sm90 twin runs them on the wgmma kernels, the others on whatever their rules pick.
 * 3c. d_head 32 in bf16 and fp16 likewise (sm90_forward.cu: tiles of one 64-column block
 *    of which only the first 32 columns are used; the backward's dQ all by warpgroup 0): Tq a
 *    multiple of 64 (tiled dQ, bulk adds by one warpgroup) and not (97, 1500: float4 atomics),
 *    several key and query tiles, causal and not, Tk > Tq and Tk < Tq, Tq >= 1024 (the forward's
 *    three consumer warpgroups, 1500 causal and 1024 not); inputs from a stream of their own.
 * 4. A large case exercising many tiles: B = 1, H = 16, T = 4096, D = 64, bf16, causal, fused
 *    ld = 3*C, against the CUDA naive attention op on the same inputs (normalized error of out,
 *    dq, dk, dv), and a sample of rows (out, lse, dq) against float64.
 * 4b. Split-KV (split.cu: a grid of too few (batch x heads x tiles) blocks for the GPU
 *    splits each query tile's key range in the forward, merged by a log-sum-exp combine, and each
 *    key tile's query range in the backward, dK and dV added in fp32): batch 1, 1 head, bf16 (one
 *    case fp16), seq 1999..4096, every d_head, causal and not, Tq != Tk both ways (Tk < Tq causal:
 *    whole query tiles fully masked, so whole splits see no key), against float64 as in 3; the
 *    same in fp32 (the exact kernels of f32.cu) and tf32 (tf32.cu),
 *    seq 1000..4096, every d_head, on 16-byte rows (what their split needs); then
 *    that the backend holds its split buffer ("cuda.flash_split"): the split path ran (unless
 *    TLM_FLASH_SPLIT=0, which turns it off: then that it does not).
 * 4c. Every tile configuration of the bf16/fp16 kernels: each line of src/cuda/attention/tiles.def
 *    (included here, so a line added there is tested), forced through TLM_FLASH_TILES=<name>@<d_head>
 *    (tlm_knob_set before each case: the selector reads it at every launch; a named line also
 *    bypasses the Hopper kernels), on its d_head: B = 2, H = 3, T = 257 causal (odd, several tiles
 *    of every size, batch and heads), T = 100 not causal in fp16 (separate, padded buffers),
 *    Tq = 200 > Tk = 64 causal (136 fully masked rows a head: whole query tiles of them), Tq = 33 <
 *    Tk = 300 causal, T = 1; against float64 as in 3. Runs in the plain run only (the sm90 / sm80
 *    twins change only what a named line bypasses), not when TLM_FLASH_TILES is set for the whole
 *    test; with TLM_FA_DTYPES (racecheck) only B = H = 1, T = 129 causal a line.
 * 5. Last, fp32 rows that are not 16-byte aligned (ld_qkv = 3*H*D + 1 or H*D + 1, ld_out =
 *    H*D + 3): backend.h allows any ld >= H*D, and the fp32 kernels fall back to 4-byte copies
 *    (a misaligned-address error would be fatal and end the test, after everything else has been
 *    reported). The same rows in tf32 go to the exact kernels (the TF32 kernels need 16-byte rows),
 *    so they are held to fp32's tolerances; that every aligned tf32 case ran the TF32 kernels shows
 *    in its O error, above fp32's tolerance (checked on the smallest one). The bf16/fp16 kernels require ld_qkv, ld_out multiples of 8 and 16-byte aligned
 *    tensors (ops.cu refuses anything else, fatally), so their cases keep rows 16-byte
 *    aligned: padding of 8 columns.
 * Skipped causal tiles are a performance property (test_flash_attention_cpu counts them on the
 * CPU); determinism is not required (the backward may add dQ with atomics).
 *
 * Tolerances (normalized error against float64; METHOD.md: fp32 far under 1e-3, bf16 operands
 * between 1e-3 and 1e-2, NaN never passes):
 *   fp32 1e-5: the products are exact fp32 (no TF32). A length-n fp32 sum has a relative error
 *     ~u sqrt(n), u = 2^-24 = 6e-8: ~2e-6 for the 1000-key rows, ~7e-7 for D = 128; exp in
 *     fast-math is within 2 ulp. 1e-5 keeps a margin and still fails TF32 (~3e-4) by far.
 *   bf16 2e-2, fp16 5e-3: the inputs are exact (the reference reads the rounded values), the
 *     scores and softmax are fp32, but FlashAttention-2 rounds P to the dtype before P V, dS before
 *     dS K and dS^T Q, and the outputs O, dQ, dK, dV to the dtype: each rounding is a relative
 *     error up to the unit roundoff u (bf16 2^-8 = 3.9e-3, fp16 2^-11 = 4.9e-4; about u/3 on
 *     average) per element, with random signs, so the normalized error is about u: a float64
 *     emulation of exactly those roundings (T = 17..2048, D = 16..128) gives 1.7e-3..3.1e-3 in
 *     bf16 and 2.1e-4..3.1e-4 in fp16. 2e-2 and 5e-3 hold that with margins of 6x and 16x and are
 *     far below the O(1) error of a wrong index, mask, scale or layout.
 *   tf32 3e-3: every operand of every product is rounded to TF32 (10 mantissa bits, relative
 *     error up to u = 2^-11 = 4.9e-4, about u/sqrt(3) on average: q, k, v, dO as read, P and dS
 *     from the fp32 accumulators), the accumulation, softmax, delta and outputs are fp32. A
 *     float64 emulation of exactly those roundings (T = 1..2048, Tk != Tq, D = 16..128, causal or
 *     not) gives normalized errors of 2.3e-4..4.3e-4 (O, dV) and up to 6.8e-4 (dQ, dK, where the
 *     exact fp32 delta meets TF32 products); 3e-3 holds them with a margin of 4x and is still
 *     far below the O(1) error of a wrong fragment, permutation, mask or layout (and far above
 *     the exact kernels' ~1e-7). L in tf32 is checked by its RMS error, absolute: an error in a
 *     logarithm is a relative error of the softmax sum, and a row that sees one key has
 *     L = its score, whose relative error is unbounded near 0 (a cancellation in q.k); the
 *     emulation gives at most 8e-4 over the shapes here (300 draws each): 3e-3.
 *   lse: fp32 from exact products (bf16 x bf16 and fp16 x fp16 are exact in fp32) in every
 *     dtype, ~1e-6: 1e-5 in fp32, 1e-4 in bf16/fp16 (a margin for tensor-core accumulation).
 *   Flash against the CUDA naive op (bf16, T = 4096): the naive op also rounds S and dP to bf16,
 *     so the two differ by about twice the above (emulated: 4.2e-3..5.1e-3): within the bf16 2e-2.
 * Prints one line per check and a final "N passed, M failed"; exits 1 on any failure, and 77
 * (ctest: skipped) with "no GPU: skipped" when no CUDA GPU is usable. */
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/convert.h"
#include "tlm/backend.h"
#include "tlm/rng.h"
#include "tlm/tuning.h"
#include "test_check.h"
#include "attention_reference.h"

#define F32_TOL 1e-5
#define TF32_TOL 3e-3
#define BF16_TOL 2e-2
#define F16_TOL 5e-3
#define F32_LSE_TOL 1e-5
#define TF32_LSE_TOL 3e-3 /* absolute RMS */
#define LOWP_LSE_TOL 1e-4
#define CS336_TOL 1e-2 /* rtol = atol of the CS336 reference test */

static tlm_backend *gpu;
static uint64_t rng = 0xF1A54A77u;
static uint64_t rng_tf32 = 0x7F3254A7u; /* the tf32 cases' inputs */
static uint64_t rng_d80 = 0xD80D80D8u;  /* 3b's inputs */
static uint64_t rng_d32 = 0xD32D32D3u;  /* 3c's inputs */

static const char *dt_name(tlm_dtype dt) {
    if (dt == TLM_DTYPE_BF16) return "bf16";
    if (dt == TLM_DTYPE_F16) return "fp16";
    return dt == TLM_DTYPE_F32 ? "fp32" : tlm_dtype_name(dt);
}

static double tol_of(tlm_precision p) {
    return p == TLM_PRECISION_BF16 ? BF16_TOL : p == TLM_PRECISION_FP16 ? F16_TOL : p == TLM_PRECISION_TF32 ? TF32_TOL
                                                                                                            : F32_TOL;
}
static double lse_tol_of(tlm_precision p) {
    return p == TLM_PRECISION_FP32 ? F32_LSE_TOL : p == TLM_PRECISION_TF32 ? TF32_LSE_TOL : LOWP_LSE_TOL;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* appends printf output to the string buf (capacity cap), truncating */
static void append(char *buf, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void append(char *buf, size_t cap, const char *fmt, ...) {
    const size_t len = strlen(buf);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf + len, cap - len, fmt, ap);
    va_end(ap);
}

static void *xmalloc(size_t bytes) {
    void *p = malloc(bytes ? bytes : 1);
    if (!p) die_on(TLM_ERR_OUT_OF_MEMORY, "host buffer");
    return p;
}

static float *floats(size_t n) { return xmalloc(n * sizeof(float)); }

static double *doubles(size_t n) {
    double *p = calloc(n ? n : 1, sizeof(double));
    if (!p) die_on(TLM_ERR_OUT_OF_MEMORY, "host buffer");
    return p;
}

/* ---- dtype elements on the host (convert.h: round to nearest even, exact widening) ----------- */

static float elem_get(tlm_dtype dt, const void *raw, size_t i) {
    if (dt == TLM_DTYPE_BF16) return tlm_bf16_to_f32(((const uint16_t *)raw)[i]);
    if (dt == TLM_DTYPE_F16) return tlm_f16_to_f32(((const uint16_t *)raw)[i]);
    return ((const float *)raw)[i];
}

/* raw[i] = x rounded to dt; returns the rounded value, widened */
static float elem_set(tlm_dtype dt, void *raw, size_t i, float x) {
    if (dt == TLM_DTYPE_BF16) ((uint16_t *)raw)[i] = tlm_f32_to_bf16(x);
    else if (dt == TLM_DTYPE_F16) ((uint16_t *)raw)[i] = tlm_f32_to_f16(x);
    else ((float *)raw)[i] = x;
    return elem_get(dt, raw, i);
}

/* the poison: every byte 0xFF, a NaN in fp32, bf16 and fp16 */
static bool elem_poisoned(const void *raw, size_t i, size_t es) {
    const unsigned char *p = (const unsigned char *)raw + i * es;
    for (size_t b = 0; b < es; b++)
        if (p[b] != 0xFF) return false;
    return true;
}

/* ---- device buffers with a host image --------------------------------------------------------- */

typedef struct {
    size_t rows;
    int ld;              /* elements per row */
    tlm_dtype dt;
    size_t es, n;        /* bytes per element, rows * ld */
    unsigned char *host; /* the image: what was uploaded, then what came back */
    void *dev;
} dbuf;

/* rows x ld elements of dt, poisoned on the host (not uploaded yet) */
static dbuf db_new(const char *name, size_t rows, int ld, tlm_dtype dt) {
    dbuf b = {rows, ld, dt, tlm_dtype_size(dt), rows * (size_t)ld, NULL, NULL};
    b.host = xmalloc(b.n * b.es);
    memset(b.host, 0xFF, b.n * b.es);
    b.dev = tlm_alloc(gpu, b.n * b.es, TLM_MEM_ACTIVATIONS, name);
    if (!b.dev) die_on(TLM_ERR_OUT_OF_MEMORY, name);
    return b;
}

static void db_upload(dbuf *b) { tlm_copy_to_backend(gpu, b->dev, b->host, b->n * b->es); }
static void db_download(dbuf *b) { tlm_copy_to_host(gpu, b->host, b->dev, b->n * b->es); }

/* a copy of the host image (to compare with later) */
static unsigned char *db_snapshot(const dbuf *b) {
    unsigned char *s = xmalloc(b->n * b->es);
    memcpy(s, b->host, b->n * b->es);
    return s;
}

/* true when the device contents equal `image` bitwise (downloads into the host image) */
static bool db_equals(dbuf *b, const unsigned char *image) {
    db_download(b);
    return memcmp(b->host, image, b->n * b->es) == 0;
}

static void db_free(dbuf *b) {
    free(b->host);
    tlm_free(gpu, b->dev);
    memset(b, 0, sizeof *b);
}

/* A (rows, C) tensor inside a buffer: element (r, c) at r*ld + col + c. */
typedef struct {
    dbuf *b;
    int col;
    size_t rows;
} view;

static void *view_dev(view v) { return (char *)v.b->dev + (size_t)v.col * v.b->es; }
static size_t view_index(view v, size_t r, int c) { return r * v.b->ld + v.col + c; }

/* (rows, C) compact float32 copy of a view, from the host image */
static float *view_gather(view v, int C) {
    float *x = floats(v.rows * C);
    for (size_t r = 0; r < v.rows; r++)
        for (int c = 0; c < C; c++) x[r * C + c] = elem_get(v.b->dt, v.b->host, view_index(v, r, c));
    return x;
}

/* random normals (never 0) rounded to the buffer's dtype into row r of the view; the rounded
 * values into host[r*C ..] */
static void view_fill_row(view v, size_t r, int C, float *host, uint64_t *state) {
    for (int c = 0; c < C; c++) {
        float x;
        do x = elem_set(v.b->dt, v.b->host, view_index(v, r, c), (float)tlm_rng_normal(state));
        while (x == 0.0f);
        host[r * C + c] = x;
    }
}

/* For a buffer holding `nv` views of C columns each: counts elements inside a view that are not
 * finite (unwritten or NaN) and elements outside every view that are not the poison (touched). */
static void scan_buffer(const dbuf *b, const view *views, int nv, int C, size_t *not_finite, size_t *touched) {
    for (size_t r = 0; r < b->rows; r++)
        for (int c = 0; c < b->ld; c++) {
            const size_t i = r * b->ld + c;
            bool inside = false;
            for (int k = 0; k < nv; k++) inside |= r < views[k].rows && c >= views[k].col && c < views[k].col + C;
            if (inside) *not_finite += !isfinite(elem_get(b->dt, b->host, i));
            else *touched += !elem_poisoned(b->host, i, b->es);
        }
}

/* ---- comparisons: attention_reference.h; L in tf32 by its absolute RMS error; and between two float
 * arrays (flash against the naive op) */

/* sqrt(mean((got - want)^2)) over the finite entries of want; an infinite want must be matched
 * exactly and NaN never passes (+inf) */
static double rms_error(const float *got, const double *want, size_t n) {
    attn_error_sums s;
    if (!attn_sum_errors(got, want, n, &s)) return INFINITY;
    return s.finite ? sqrt(s.diff2 / (double)s.finite) : 0.0;
}
static double norm_error_f(const float *got, const float *want, size_t n) {
    double num = 0.0, den = 0.0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(got[i]) || !isfinite(want[i])) return INFINITY;
        num += ((double)got[i] - want[i]) * ((double)got[i] - want[i]);
        den += (double)want[i] * want[i];
    }
    return sqrt(num / (den > 0.0 ? den : 1.0));
}


/* ---- 1. what the device supports -------------------------------------------------------------------- */

/* the device's verdict on FlashAttention-2 for (D, dt) as a status: TLM_OK when both ops are FAST,
 * else TLM_ERR_UNSUPPORTED (the message is the device's) */
static tlm_status flash_supported(int D, tlm_dtype dt) {
    if (tlm_backend_supports(gpu, TLM_OP_FLASH_ATTENTION_FORWARD, dt, D) != TLM_SUPPORT_FAST ||
        tlm_backend_supports(gpu, TLM_OP_FLASH_ATTENTION_BACKWARD, dt, D) != TLM_SUPPORT_FAST)
        return TLM_ERR_UNSUPPORTED;
    return TLM_OK;
}

static const int supported_d[5] = {16, 32, 64, 80, 128};
static const tlm_dtype act_dtypes[3] = {TLM_DTYPE_F32, TLM_DTYPE_BF16, TLM_DTYPE_F16};

static void test_check_op(void) {
    for (int t = 0; t < 3; t++)
        for (int i = 0; i < 5; i++) {
            tlm_status s = flash_supported(supported_d[i], act_dtypes[t]);
            check(s == TLM_OK, "supports(flash, D=%d, %s) = TLM_OK%s%s", supported_d[i], dt_name(act_dtypes[t]),
                  s == TLM_OK ? "" : ": ", s == TLM_OK ? "" : tlm_last_error());
        }
    static const char sentinel[] = "(no message set)";
    const int bad_d[3] = {8, 48, 256};
    for (int t = 0; t < 3; t++)
        for (int i = 0; i < 3; i++) {
            tlm_fail(TLM_ERR_INVALID_ARGUMENT, "%s", sentinel);
            tlm_status s = flash_supported(bad_d[i], act_dtypes[t]);
            const char *msg = tlm_last_error();
            char dstr[16];
            snprintf(dstr, sizeof dstr, "%d", bad_d[i]);
            check(s == TLM_ERR_UNSUPPORTED && strcmp(msg, sentinel) != 0 && strstr(msg, dstr),
                  "supports(flash, D=%d, %s) = TLM_ERR_UNSUPPORTED, message naming %d: \"%s\"", bad_d[i],
                  dt_name(act_dtypes[t]), bad_d[i], msg);
        }
    const tlm_dtype bad_dt[2] = {TLM_DTYPE_I32, TLM_DTYPE_F64};
    for (int t = 0; t < 2; t++) {
        tlm_fail(TLM_ERR_INVALID_ARGUMENT, "%s", sentinel);
        tlm_status s = flash_supported(64, bad_dt[t]);
        const char *msg = tlm_last_error();
        check(s == TLM_ERR_UNSUPPORTED && strcmp(msg, sentinel) != 0 && msg[0],
              "supports(flash, D=64, %s) = TLM_ERR_UNSUPPORTED with a message: \"%s\"",
              tlm_dtype_name(bad_dt[t]), msg);
    }
}

/* ---- 2, 3, 5. one case against float64 --------------------------------------------------------- */

typedef struct {
    int B, Tq, Tk, H, D;
    bool causal;
    tlm_precision p; /* the mode: its dtype holds every tensor but lse and the workspace */
    bool fused;  /* q, k, v (and dq, dk, dv) the thirds of one buffer, ld_qkv = 3C + pad_qkv;
                    else three buffers, ld_qkv = C + pad_qkv */
    int pad_qkv; /* padding columns of the q/k/v and dq/dk/dv rows */
    int pad_out; /* ld_out = C + pad_out (out and dout) */
    bool cs336;  /* also the CS336 allclose checks */
} fa_case;

static const char *tensor_name[5] = {"O", "L", "dQ", "dK", "dV"};
/* the modes in the order their random cases run */
static const tlm_precision modes[4] = {TLM_PRECISION_FP32, TLM_PRECISION_BF16, TLM_PRECISION_FP16, TLM_PRECISION_TF32};
static double worst[4][5]; /* per mode (as modes[]), per tensor */
static char worst_case[4][5][256];
static double tf32_least_o = INFINITY; /* the smallest O error of a case on the TF32 kernels */

static int mode_index(tlm_precision p) {
    return p == TLM_PRECISION_BF16 ? 1 : p == TLM_PRECISION_FP16 ? 2 : p == TLM_PRECISION_TF32 ? 3 : 0;
}

static char case_note[80]; /* appended to the case names: the forced tile configuration (4c) */

/* Runs forward and backward of c on the GPU with inputs drawn from *state; checks as above. */
static void run_case(const fa_case *c, uint64_t *state) {
    const int B = c->B, Tq = c->Tq, Tk = c->Tk, H = c->H, D = c->D, C = H * D;
    const tlm_precision p = c->p;
    const tlm_dtype dt = tlm_precision_act_dtype(p);
    const size_t nq = (size_t)B * Tq, nk = (size_t)B * Tk, nlse = (size_t)B * H * Tq;
    const int ld = (c->fused ? 3 * C : C) + c->pad_qkv, ld_out = C + c->pad_out;
    /* tf32 runs the TF32 kernels on 16-byte rows (the buffers are aligned; the rows are when ld and
     * ld_out are multiples of 4), the exact ones elsewhere: held to fp32's tolerances there */
    const bool tc32 = p == TLM_PRECISION_TF32 && ld % 4 == 0 && ld_out % 4 == 0;
    const tlm_precision tolp = p == TLM_PRECISION_TF32 && !tc32 ? TLM_PRECISION_FP32 : p;
    char name[256];
    snprintf(name, sizeof name, "%s B=%d H=%d D=%d Tq=%d Tk=%d %s, qkv %s ld=%s%s+%d, ld_out=C+%d%s", tlm_precision_name(p), B,
             H, D, Tq, Tk, c->causal ? "causal" : "full", c->fused ? "fused" : "separate", c->fused ? "3" : "",
             "C", c->pad_qkv, c->pad_out, case_note);

    /* buffers: inputs and gradients (fused: one of B*max(Tq,Tk) rows each; else three) */
    dbuf in[3] = {{0}}, gr[3] = {{0}};
    view q, k, v, dq, dk, dv;
    int nbuf;
    if (c->fused) {
        const size_t rows = nq > nk ? nq : nk;
        in[0] = db_new("test.qkv", rows, ld, dt);
        gr[0] = db_new("test.dqkv", rows, ld, dt);
        q = (view){&in[0], 0, nq}, k = (view){&in[0], C, nk}, v = (view){&in[0], 2 * C, nk};
        dq = (view){&gr[0], 0, nq}, dk = (view){&gr[0], C, nk}, dv = (view){&gr[0], 2 * C, nk};
        nbuf = 1;
    } else {
        const char *in_names[3] = {"test.q", "test.k", "test.v"}, *gr_names[3] = {"test.dq", "test.dk", "test.dv"};
        for (int s = 0; s < 3; s++) {
            in[s] = db_new(in_names[s], s ? nk : nq, ld, dt);
            gr[s] = db_new(gr_names[s], s ? nk : nq, ld, dt);
        }
        q = (view){&in[0], 0, nq}, k = (view){&in[1], 0, nk}, v = (view){&in[2], 0, nk};
        dq = (view){&gr[0], 0, nq}, dk = (view){&gr[1], 0, nk}, dv = (view){&gr[2], 0, nk};
        nbuf = 3;
    }
    dbuf dob = db_new("test.dout", nq, ld_out, dt), outb = db_new("test.out", nq, ld_out, dt);
    dbuf lseb = db_new("test.lse", nlse, 1, TLM_DTYPE_F32);
    dbuf ws = db_new("test.workspace", tlm_flash_workspace_floats(B, Tq, H, D), 1, TLM_DTYPE_F32);
    view dov = {&dob, 0, nq}, outv = {&outb, 0, nq};

    /* inputs: fused row by row (q, k, v of a row in turn: the CS336 test's order), else q, k, v
     * each whole; then dout. Everything else stays the poison. */
    float *qh = floats(nq * C), *kh = floats(nk * C), *vh = floats(nk * C), *doh = floats(nq * C);
    if (c->fused) {
        const size_t rows = in[0].rows;
        for (size_t r = 0; r < rows; r++) {
            if (r < nq) view_fill_row(q, r, C, qh, state);
            if (r < nk) view_fill_row(k, r, C, kh, state);
            if (r < nk) view_fill_row(v, r, C, vh, state);
        }
    } else {
        for (size_t r = 0; r < nq; r++) view_fill_row(q, r, C, qh, state);
        for (size_t r = 0; r < nk; r++) view_fill_row(k, r, C, kh, state);
        for (size_t r = 0; r < nk; r++) view_fill_row(v, r, C, vh, state);
    }
    for (size_t r = 0; r < nq; r++) view_fill_row(dov, r, C, doh, state);
    unsigned char *in_image[3] = {NULL, NULL, NULL}, *do_image = db_snapshot(&dob);
    for (int s = 0; s < nbuf; s++) {
        in_image[s] = db_snapshot(&in[s]);
        db_upload(&in[s]);
        db_upload(&gr[s]);
    }
    db_upload(&dob);
    db_upload(&outb);
    db_upload(&lseb);
    db_upload(&ws);

    /* forward, then backward */
    tlm_flash_attention_forward(gpu, view_dev(outv), lseb.dev, view_dev(q), view_dev(k), view_dev(v), ld, ld_out,
                                 B, Tq, Tk, H, D, c->causal, p);
    tlm_synchronize(gpu);
    db_download(&outb);
    db_download(&lseb);
    unsigned char *out_image = db_snapshot(&outb), *lse_image = db_snapshot(&lseb);
    tlm_flash_attention_backward(gpu, view_dev(dq), view_dev(dk), view_dev(dv), ws.dev, view_dev(dov), view_dev(q),
                                  view_dev(k), view_dev(v), view_dev(outv), lseb.dev, ld, ld_out, B, Tq, Tk, H, D,
                                  c->causal, p);
    tlm_synchronize(gpu);
    for (int s = 0; s < nbuf; s++) db_download(&gr[s]);

    /* the float64 reference on the same (rounded) inputs */
    double *want[5] = {doubles(nq * C), doubles(nlse), doubles(nq * C), doubles(nk * C), doubles(nk * C)};
    attn_reference(B, Tq, Tk, H, D, c->causal, H * D, qh, kh, vh, doh, want[0], want[1], want[2], want[3], want[4]);
    float *got[5] = {view_gather(outv, C), floats(nlse), view_gather(dq, C), view_gather(dk, C), view_gather(dv, C)};
    memcpy(got[1], lse_image, nlse * sizeof(float));
    const size_t n[5] = {nq * C, nlse, nq * C, nk * C, nk * C};
    double err[5];
    bool ok = true;
    const int ti = mode_index(p);
    for (int t = 0; t < 5; t++) {
        err[t] = t == 1 && tolp == TLM_PRECISION_TF32 ? rms_error(got[t], want[t], n[t])
                                                      : attn_norm_error(got[t], want[t], n[t]);
        ok &= err[t] <= (t == 1 ? lse_tol_of(tolp) : tol_of(tolp));
        if (err[t] > worst[ti][t]) {
            worst[ti][t] = err[t];
            snprintf(worst_case[ti][t], sizeof worst_case[ti][t], "%s", name);
        }
    }
    if (tc32) tf32_least_o = fmin(tf32_least_o, err[0]);
    check(ok, "%s: vs float64: O %.1e, L %.1e, dQ %.1e, dK %.1e, dV %.1e (tolerance %.0e, L %.0e%s)%s", name, err[0],
          err[1], err[2], err[3], err[4], tol_of(tolp), lse_tol_of(tolp), tc32 ? " RMS" : "",
          p == TLM_PRECISION_TF32 && !tc32 ? " [rows not 16-byte: the exact kernels]" : "");

    /* written, untouched, unchanged, fully masked rows */
    size_t not_finite = 0, touched = 0;
    scan_buffer(&outb, &outv, 1, C, &not_finite, &touched);
    if (c->fused) {
        const view g3[3] = {dq, dk, dv};
        scan_buffer(&gr[0], g3, 3, C, &not_finite, &touched);
    } else {
        scan_buffer(&gr[0], &dq, 1, C, &not_finite, &touched);
        scan_buffer(&gr[1], &dk, 1, C, &not_finite, &touched);
        scan_buffer(&gr[2], &dv, 1, C, &not_finite, &touched);
    }
    int masked_rows = 0;
    size_t masked_bad = 0, lse_bad = 0;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int i = 0; i < Tq; i++) {
                const float L = got[1][((size_t)b * H + h) * Tq + i];
                const bool empty = c->causal && i + (Tk - Tq) < 0;
                masked_rows += empty;
                lse_bad += empty ? L != -INFINITY : !isfinite(L);
                for (int d = 0; d < D && empty; d++) {
                    const size_t e = ((size_t)b * Tq + i) * C + (size_t)h * D + d;
                    masked_bad += got[0][e] != 0.0f || got[2][e] != 0.0f;
                }
            }
    bool inputs_same = db_equals(&dob, do_image);
    for (int s = 0; s < nbuf; s++) inputs_same &= db_equals(&in[s], in_image[s]);
    const bool fwd_same = db_equals(&outb, out_image) && db_equals(&lseb, lse_image);
    char problems[256] = "";
    if (not_finite) append(problems, sizeof problems, "; %zu outputs not written or not finite", not_finite);
    if (touched) append(problems, sizeof problems, "; %zu padding or unused elements written", touched);
    if (lse_bad) append(problems, sizeof problems, "; %zu lse wrong", lse_bad);
    if (masked_bad) append(problems, sizeof problems, "; %zu out or dq of fully masked rows not 0", masked_bad);
    if (!inputs_same) append(problems, sizeof problems, "; inputs CHANGED");
    if (!fwd_same) append(problems, sizeof problems, "; out or lse CHANGED by the backward");
    check(!problems[0],
          "%s: outputs written and finite, padding and unused rows untouched, lse -inf exactly on the %d fully "
          "masked rows (out = dq = 0 there), inputs unchanged, out and lse unchanged by the backward%s",
          name, masked_rows, problems);

    if (c->cs336)
        for (int t = 0; t < 5; t++)
            check(attn_allclose(got[t], want[t], n[t], CS336_TOL, CS336_TOL),
                  "CS336 (4,128,64) %s %s %s: allclose(rtol=atol=1e-2) vs float64 naive; max |error| %.1e",
                  tlm_precision_name(p), c->causal ? "causal" : "non-causal", tensor_name[t],
                  attn_max_error(got[t], want[t], n[t]));

    for (int t = 0; t < 5; t++) {
        free(want[t]);
        free(got[t]);
    }
    for (int s = 0; s < nbuf; s++) {
        free(in_image[s]);
        db_free(&in[s]);
        db_free(&gr[s]);
    }
    free(do_image), free(out_image), free(lse_image);
    free(qh), free(kh), free(vh), free(doh);
    db_free(&dob), db_free(&outb), db_free(&lseb), db_free(&ws);
}

/* ---- 4. a large case against the CUDA naive op, and sampled rows against float64 -------------- */

static void test_large(void) {
    const int B = 1, H = 16, T = 4096, D = 64, C = H * D, ld = 3 * C;
    const tlm_dtype dt = TLM_DTYPE_BF16;
    const size_t N = (size_t)B * T, P = (size_t)B * H * T * T;
    const char *name = "bf16 B=1 H=16 D=64 T=4096 causal, qkv fused ld=3C";

    dbuf qkv = db_new("test.qkv", N, ld, dt), dob = db_new("test.dout", N, C, dt);
    view q = {&qkv, 0, N}, k = {&qkv, C, N}, v = {&qkv, 2 * C, N}, dov = {&dob, 0, N};
    float *qh = floats(N * C), *kh = floats(N * C), *vh = floats(N * C), *doh = floats(N * C);
    for (size_t r = 0; r < N; r++) {
        view_fill_row(q, r, C, qh, &rng);
        view_fill_row(k, r, C, kh, &rng);
        view_fill_row(v, r, C, vh, &rng);
    }
    for (size_t r = 0; r < N; r++) view_fill_row(dov, r, C, doh, &rng);
    db_upload(&qkv);
    db_upload(&dob);

    /* flash */
    dbuf fout = db_new("test.flash.out", N, C, dt);
    dbuf lseb = db_new("test.flash.lse", (size_t)B * H * T, 1, TLM_DTYPE_F32);
    dbuf fgrad = db_new("test.flash.dqkv", N, ld, dt);
    dbuf ws = db_new("test.flash.workspace", tlm_flash_workspace_floats(B, T, H, D), 1, TLM_DTYPE_F32);
    db_upload(&fout), db_upload(&lseb), db_upload(&fgrad), db_upload(&ws);
    const double t0 = now_s();
    tlm_flash_attention_forward(gpu, fout.dev, lseb.dev, view_dev(q), view_dev(k), view_dev(v), ld, C, B, T, T, H,
                                 D, true, TLM_PRECISION_BF16);
    tlm_flash_attention_backward(gpu, fgrad.dev, (char *)fgrad.dev + (size_t)C * fgrad.es,
                                  (char *)fgrad.dev + (size_t)2 * C * fgrad.es, ws.dev, dob.dev, view_dev(q),
                                  view_dev(k), view_dev(v), fout.dev, lseb.dev, ld, C, B, T, T, H, D, true,
                                  TLM_PRECISION_BF16);
    tlm_synchronize(gpu);
    const double flash_s = now_s() - t0;

    /* naive (the backend's op: P (B,H,T,T) saved) */
    dbuf nout = db_new("test.naive.out", N, C, dt), ngrad = db_new("test.naive.dqkv", N, ld, dt);
    dbuf probs = db_new("test.naive.probs", P, 1, dt), dprobs = db_new("test.naive.dprobs", P, 1, dt);
    db_upload(&nout), db_upload(&ngrad);
    tlm_attention_forward(gpu, nout.dev, probs.dev, view_dev(q), view_dev(k), view_dev(v), ld, B, T, H, D, tlm_precision_of_dtype(dt));
    tlm_attention_backward(gpu, ngrad.dev, (char *)ngrad.dev + (size_t)C * ngrad.es,
                            (char *)ngrad.dev + (size_t)2 * C * ngrad.es, dprobs.dev, dob.dev, view_dev(q),
                            view_dev(k), view_dev(v), probs.dev, ld, B, T, H, D, tlm_precision_of_dtype(dt));
    tlm_synchronize(gpu);
    db_free(&probs), db_free(&dprobs);
    db_download(&fout), db_download(&lseb), db_download(&fgrad), db_download(&nout), db_download(&ngrad);

    const view fo = {&fout, 0, N}, no = {&nout, 0, N};
    const view fg[3] = {{&fgrad, 0, N}, {&fgrad, C, N}, {&fgrad, 2 * C, N}};
    const view ng[3] = {{&ngrad, 0, N}, {&ngrad, C, N}, {&ngrad, 2 * C, N}};
    float *f[4] = {view_gather(fo, C), view_gather(fg[0], C), view_gather(fg[1], C), view_gather(fg[2], C)};
    float *g[4] = {view_gather(no, C), view_gather(ng[0], C), view_gather(ng[1], C), view_gather(ng[2], C)};
    double err[4];
    bool ok = true;
    for (int t = 0; t < 4; t++) {
        err[t] = norm_error_f(f[t], g[t], N * C);
        ok &= err[t] <= BF16_TOL;
    }
    check(ok, "%s: flash vs the CUDA naive op: O %.1e, dQ %.1e, dK %.1e, dV %.1e (tolerance %.0e; flash "
              "fwd+bwd %.1f ms, first call)", name, err[0], err[1], err[2], err[3], BF16_TOL, flash_s * 1e3);
    size_t lse_bad = 0;
    for (size_t i = 0; i < (size_t)B * H * T; i++) lse_bad += !isfinite(((const float *)lseb.host)[i]);
    check(lse_bad == 0, "%s: lse finite everywhere (%zu not)", name, lse_bad);

    /* sampled rows (query tile edges, the first and last rows) x heads against float64:
     * out, lse and dq of row i need only keys 0..i */
    static const int rows[] = {0, 1, 63, 64, 127, 128, 1000, 2047, 2048, 4095};
    static const int heads[] = {0, 7, 15};
    const int nr = sizeof rows / sizeof rows[0], nh = sizeof heads / sizeof heads[0];
    const size_t ns = (size_t)nr * nh;
    double *wo = doubles(ns * D), *wl = doubles(ns), *wdq = doubles(ns * D);
    float *go = floats(ns * D), *gl = floats(ns), *gdq = floats(ns * D);
    const double scale = 1.0 / sqrt((double)D);
#pragma omp parallel for schedule(dynamic)
    for (int s = 0; s < (int)ns; s++) {
        const int i = rows[s / nh], h = heads[s % nh];
        const float *qrow = qh + (size_t)i * C + h * D, *dorow = doh + (size_t)i * C + h * D;
        double *p = doubles(i + 1), *dp = doubles(i + 1), max = -INFINITY, sum = 0.0, rowsum = 0.0;
        for (int j = 0; j <= i; j++) {
            double acc = 0.0;
            for (int d = 0; d < D; d++) acc += (double)qrow[d] * kh[(size_t)j * C + h * D + d];
            p[j] = acc * scale;
            max = fmax(max, p[j]);
        }
        for (int j = 0; j <= i; j++) sum += exp(p[j] - max);
        const double L = max + log(sum);
        for (int j = 0; j <= i; j++) {
            p[j] = exp(p[j] - L);
            double acc = 0.0;
            for (int d = 0; d < D; d++) {
                wo[(size_t)s * D + d] += p[j] * vh[(size_t)j * C + h * D + d];
                acc += (double)dorow[d] * vh[(size_t)j * C + h * D + d];
            }
            dp[j] = acc;
            rowsum += p[j] * acc;
        }
        for (int j = 0; j <= i; j++)
            for (int d = 0; d < D; d++)
                wdq[(size_t)s * D + d] += p[j] * (dp[j] - rowsum) * scale * kh[(size_t)j * C + h * D + d];
        wl[s] = L;
        gl[s] = ((const float *)lseb.host)[(size_t)h * T + i];
        for (int d = 0; d < D; d++) {
            go[(size_t)s * D + d] = f[0][(size_t)i * C + h * D + d];
            gdq[(size_t)s * D + d] = f[1][(size_t)i * C + h * D + d];
        }
        free(p);
        free(dp);
    }
    const double eo = attn_norm_error(go, wo, ns * D), el = attn_norm_error(gl, wl, ns), edq = attn_norm_error(gdq, wdq, ns * D);
    check(eo <= BF16_TOL && el <= LOWP_LSE_TOL && edq <= BF16_TOL,
          "%s: %d sampled rows x %d heads vs float64: O %.1e, L %.1e, dQ %.1e (tolerance %.0e, L %.0e)", name, nr, nh,
          eo, el, edq, BF16_TOL, LOWP_LSE_TOL);

    for (int t = 0; t < 4; t++) free(f[t]), free(g[t]);
    free(wo), free(wl), free(wdq), free(go), free(gl), free(gdq);
    free(qh), free(kh), free(vh), free(doh);
    db_free(&qkv), db_free(&dob), db_free(&fout), db_free(&lseb), db_free(&fgrad), db_free(&ws);
    db_free(&nout), db_free(&ngrad);
}

/* ---- 3b, 3c. d_head 80 and 32 (the Hopper kernels' two-block and half-used-block layouts) --------- */

/* B, Tq, Tk, H, D, causal, mode, fused, pad_qkv, pad_out, cs336; each d_head's cases draw their
 * inputs from their own stream (rng_d80, rng_d32), in this order */
#define BF TLM_PRECISION_BF16
#define F16 TLM_PRECISION_FP16
static const fa_case layout_cases[] = {
    {2, 256, 256, 8, 80, true, BF, true, 0, 0, false},    /* the LM's layout */
    {2, 384, 384, 3, 80, false, BF, true, 0, 8, false},   /* 3 key, 6 query tiles */
    {1, 192, 320, 2, 80, true, BF, false, 8, 8, false},   /* Tk > Tq */
    {2, 320, 192, 2, 80, true, BF, true, 8, 0, false},    /* 128 rows see no key */
    {2, 256, 256, 2, 80, true, F16, false, 0, 8, false},
    {1, 448, 200, 2, 80, false, F16, true, 8, 8, false},  /* a partial key tile */
    {2, 97, 300, 3, 80, true, F16, false, 8, 0, false},   /* dQ by atomics */
    {2, 256, 256, 4, 32, true, BF, true, 0, 0, false},    /* tiled dQ */
    {2, 384, 384, 3, 32, false, BF, true, 0, 8, false},   /* 3 key, 6 query tiles */
    {2, 320, 192, 2, 32, true, BF, true, 8, 0, false},    /* 128 rows see no key */
    {1, 1500, 1500, 2, 32, true, BF, false, 8, 8, false}, /* 3 consumers, atomic dQ */
    {1, 192, 320, 2, 32, true, F16, false, 8, 8, false},  /* Tk > Tq */
    {2, 97, 300, 3, 32, false, F16, false, 8, 0, false},  /* dQ by atomics */
    {1, 1024, 1024, 2, 32, false, F16, true, 0, 8, false}, /* 3 consumers, tiled dQ */
};
#undef BF
#undef F16

static void test_layouts(const char *only, int D) {
    const double t0 = now_s();
    for (size_t i = 0; i < sizeof layout_cases / sizeof layout_cases[0]; i++) {
        const fa_case *c = &layout_cases[i];
        if (c->D != D || (only && !strstr(only, tlm_precision_name(c->p)))) continue;
        run_case(c, D == 80 ? &rng_d80 : &rng_d32);
    }
    printf("# d_head %d cases: %.1f s\n", D, now_s() - t0);
}

/* ---- 4b. shapes that take the split-KV path --------------------------------------------------------- */

static void add_split_held_(void *user, const void *ptr, size_t bytes, tlm_mem_tag tag, const char *name) {
    if (strcmp(name, "cuda.flash_split") == 0) *(size_t *)user += bytes;
}

static void test_split(void) {
    const double t0 = now_s();
    const tlm_precision bf = TLM_PRECISION_BF16;
    /* B, Tq, Tk, H, D, causal, mode, fused, pad_qkv, pad_out, cs336; the float64 reference (one thread
     * for one head) takes about 5 s for these */
    run_case(&(fa_case){1, 2048, 2048, 1, 32, true, bf, true, 0, 0, false}, &rng);
    run_case(&(fa_case){1, 4096, 4096, 1, 32, true, bf, false, 8, 0, false}, &rng);
    run_case(&(fa_case){1, 1999, 1999, 1, 32, false, bf, false, 8, 8, false}, &rng);
    run_case(&(fa_case){1, 512, 2048, 1, 128, false, bf, true, 8, 0, false}, &rng);
    run_case(&(fa_case){1, 2048, 1999, 1, 64, true, bf, true, 0, 8, false}, &rng);   /* 49 rows see no key */
    run_case(&(fa_case){1, 3001, 1200, 1, 128, true, bf, false, 0, 0, false}, &rng); /* 1801 rows: 14 tiles */
    run_case(&(fa_case){1, 1999, 4096, 1, 16, true, bf, true, 8, 8, false}, &rng);   /* Tk > Tq */
    run_case(&(fa_case){1, 1500, 1500, 1, 80, true, bf, false, 8, 0, false}, &rng);
    run_case(&(fa_case){1, 1536, 1536, 1, 64, true, TLM_PRECISION_FP16, true, 0, 0, false}, &rng);
    /* the exact fp32 kernels (rows 16-byte aligned: ld_out and ld_qkv multiples of 4) and the TF32
     * ones split too: the CS336 flash-benchmarking shapes (batch 1, 1 head) and odd lengths */
    const tlm_precision f32 = TLM_PRECISION_FP32, tf = TLM_PRECISION_TF32;
    run_case(&(fa_case){1, 1000, 1000, 1, 64, true, f32, true, 0, 0, false}, &rng);
    run_case(&(fa_case){1, 2047, 2047, 1, 32, false, f32, false, 8, 8, false}, &rng);
    run_case(&(fa_case){1, 2048, 1999, 1, 128, true, f32, true, 0, 8, false}, &rng); /* 49 rows see no key */
    run_case(&(fa_case){1, 1500, 1500, 1, 80, true, f32, false, 8, 0, false}, &rng);
    run_case(&(fa_case){1, 1999, 4096, 1, 16, true, f32, true, 8, 8, false}, &rng);   /* Tk > Tq */
    run_case(&(fa_case){1, 1000, 1000, 1, 64, true, tf, true, 0, 0, false}, &rng_tf32);
    run_case(&(fa_case){1, 2047, 2047, 1, 128, false, tf, false, 8, 8, false}, &rng_tf32);
    run_case(&(fa_case){1, 3001, 1200, 1, 32, true, tf, true, 0, 8, false}, &rng_tf32); /* 1801 rows see no key */
    run_case(&(fa_case){1, 1500, 1500, 1, 80, true, tf, false, 8, 0, false}, &rng_tf32);
    run_case(&(fa_case){1, 1999, 4096, 1, 16, true, tf, true, 8, 8, false}, &rng_tf32); /* Tk > Tq */
    size_t held = 0;
    tlm_mem_for_each(gpu, add_split_held_, &held);
    const bool off = tlm_knob_int(TLM_KNOB_FLASH_SPLIT) == 0;
    check(off ? held == 0 : held > 0, "split-KV %s: the backend's split buffer holds %zu bytes (TLM_FLASH_SPLIT=%d)",
          off ? "off" : "taken", held, tlm_knob_int(TLM_KNOB_FLASH_SPLIT));
    printf("# split-KV cases: %.1f s\n", now_s() - t0);
}

/* ---- 4c. every tile configuration ------------------------------------------------------------------ */

typedef struct {
    int pass, d, outer, inner, warps; /* pass 0: forward (outer BR, inner BC), 1: backward (outer BC, inner BR) */
    const char *role;
} tile_line;
static const tile_line tile_lines[] = {
#define TLM_FLASH_FWD(D, BR, BC, W, MINB, ROLE) {0, D, BR, BC, W, #ROLE},
#define TLM_FLASH_BWD(D, BC, BR, W, MINB, ROLE) {1, D, BC, BR, W, #ROLE},
#include "cuda/attention/tiles.def"
#undef TLM_FLASH_FWD
#undef TLM_FLASH_BWD
};

static void test_tiles(bool sanitizer) {
    const double t0 = now_s();
    const tlm_precision bf = TLM_PRECISION_BF16, f16 = TLM_PRECISION_FP16;
    const int n = (int)(sizeof tile_lines / sizeof tile_lines[0]);
    for (int i = 0; i < n; i++) {
        const tile_line *t = &tile_lines[i];
        char tiles[32];
        snprintf(tiles, sizeof tiles, t->pass == 0 ? "q%dk%dw%d@%d" : "k%dq%dw%d@%d", t->outer, t->inner, t->warps,
                 t->d);
        check(tlm_knob_set(TLM_KNOB_FLASH_TILES, tiles) == TLM_OK, "TLM_FLASH_TILES=%s is accepted", tiles);
        snprintf(case_note, sizeof case_note, ", TLM_FLASH_TILES=%s (%s)", tiles, t->role);
        const int D = t->d;
        /* B, Tq, Tk, H, D, causal, p, fused, pad_qkv, pad_out, cs336 */
        if (sanitizer) { /* racecheck: a few tiles of each size, both buffers of every double-buffered tile */
            run_case(&(fa_case){1, 129, 129, 1, D, true, bf, true, 0, 0, false}, &rng);
            continue;
        }
        run_case(&(fa_case){2, 257, 257, 3, D, true, bf, true, 0, 0, false}, &rng);
        run_case(&(fa_case){1, 100, 100, 2, D, false, f16, false, 8, 8, false}, &rng);
        run_case(&(fa_case){2, 200, 64, 2, D, true, bf, true, 8, 0, false}, &rng); /* 136 rows see no key */
        run_case(&(fa_case){1, 33, 300, 2, D, true, bf, false, 0, 8, false}, &rng);
        run_case(&(fa_case){3, 1, 1, 1, D, true, f16, true, 0, 0, false}, &rng);
    }
    tlm_knob_set(TLM_KNOB_FLASH_TILES, NULL);
    case_note[0] = 0;
    printf("# tile configurations (%d lines of tiles.def): %.1f s\n", n, now_s() - t0);
}

int main(void) {
    if (!tlm_cuda_available() || tlm_backend_cuda_create(&gpu, 0) != TLM_OK) {
        printf("no GPU: skipped (%s)\n", tlm_cuda_available() ? tlm_last_error() : "no CUDA device");
        return 77;
    }
    const double t_start = now_s();
    printf("# %s\n", gpu->description);

    /* 1 */
    test_check_op();

    /* 2. CS336: the same numbers as test_flash_attention_cpu.c (seed 0, q | k | v row by row), in fp32
     * and tf32 */
    for (int tf = 0; tf < 2; tf++)
        for (int causal = 1; causal >= 0; causal--) {
            uint64_t seed0 = 0;
            run_case(&(fa_case){4, 128, 128, 1, 64, causal, tf ? TLM_PRECISION_TF32 : TLM_PRECISION_FP32, true, 0, 0,
                                true},
                     &seed0);
        }

    /* 3. random cases, per mode (TLM_FA_DTYPES=bf16,fp16 runs only those modes, and skips the large
     * case: for compute-sanitizer's racecheck, which runs the kernels hundreds of times slower) */
    const char *only = getenv("TLM_FA_DTYPES");
    bool tf32_ran = false;
    for (int t = 0; t < 4; t++) {
        const tlm_precision mode = modes[t];
        if (only && !strstr(only, tlm_precision_name(mode))) continue;
        tf32_ran |= mode == TLM_PRECISION_TF32;
        uint64_t *st = mode == TLM_PRECISION_TF32 ? &rng_tf32 : &rng;
        const double t0 = now_s();
        int nth = 0;
        /* every d_head x T in {1, 17, 129} x causal or not; the three layouts in turn */
        for (int di = 0; di < 5; di++)
            for (int causal = 0; causal < 2; causal++) {
                const int D = supported_d[di];
                run_case(&(fa_case){2, 1, 1, 3, D, causal, mode, true, 0, 0, false}, st);
                run_case(&(fa_case){2, 17, 17, 3, D, causal, mode, nth % 2 == 0, 8, 8, false}, st);
                run_case(&(fa_case){2, 129, 129, 2, D, causal, mode, nth % 2 == 1, 8 * (nth % 2), 8, false}, st);
                nth++;
            }
        /* several heads and batch > 1 at tile-sized lengths */
        run_case(&(fa_case){2, 64, 64, 4, supported_d[(t + 0) % 5], true, mode, true, 0, 0, false}, st);
        run_case(&(fa_case){2, 128, 128, 4, supported_d[(t + 1) % 5], false, mode, true, 8, 8, false}, st);
        run_case(&(fa_case){2, 256, 256, 4, supported_d[(t + 2) % 5], true, mode, false, 8, 0, false}, st);
        run_case(&(fa_case){3, 256, 256, 2, supported_d[(t + 3) % 5], false, mode, true, 0, 8, false}, st);
        /* T = 1000: every d_head in bf16 (the kernels' main dtype), two in fp32, fp16 and tf32 */
        if (mode == TLM_PRECISION_BF16)
            for (int di = 0; di < 5; di++)
                run_case(&(fa_case){1, 1000, 1000, 2, supported_d[di], di % 2 == 0, mode, di % 2 == 0, 8, 8, false},
                         st);
        else {
            const bool f32 = tlm_precision_act_dtype(mode) == TLM_DTYPE_F32;
            run_case(&(fa_case){1, 1000, 1000, 2, f32 ? 64 : 80, true, mode, true, 0, 8, false}, st);
            run_case(&(fa_case){1, 1000, 1000, 2, f32 ? 128 : 64, false, mode, false, 8, 0, false}, st);
        }
        /* Tq != Tk, not causal */
        run_case(&(fa_case){2, 17, 100, 2, supported_d[(t + 0) % 5], false, mode, true, 8, 8, false}, st);
        run_case(&(fa_case){2, 100, 17, 2, supported_d[(t + 1) % 5], false, mode, false, 8, 0, false}, st);
        run_case(&(fa_case){3, 1, 100, 2, supported_d[(t + 2) % 5], false, mode, true, 0, 0, false}, st);
        /* causal, Tk > Tq (bottom-right: query 0 sees keys 0..Tk-Tq) */
        run_case(&(fa_case){3, 1, 100, 2, supported_d[(t + 3) % 5], true, mode, false, 0, 8, false}, st);
        run_case(&(fa_case){2, 17, 100, 2, supported_d[(t + 4) % 5], true, mode, true, 8, 0, false}, st);
        run_case(&(fa_case){1, 64, 256, 2, supported_d[(t + 0) % 5], true, mode, true, 0, 8, false}, st);
        run_case(&(fa_case){1, 129, 1000, 1, supported_d[(t + 1) % 5], true, mode, false, 8, 8, false}, st);
        /* causal, Tk < Tq: the first Tq - Tk rows see no key (136 of 200: whole query tiles) */
        run_case(&(fa_case){2, 100, 37, 2, supported_d[(t + 2) % 5], true, mode, true, 8, 8, false}, st);
        run_case(&(fa_case){2, 64, 1, 1, supported_d[(t + 3) % 5], true, mode, false, 0, 0, false}, st);
        run_case(&(fa_case){2, 200, 64, 2, supported_d[(t + 4) % 5], true, mode, true, 0, 8, false}, st);
        run_case(&(fa_case){1, 300, 129, 2, supported_d[(t + 0) % 5], true, mode, false, 8, 8, false}, st);
        printf("# %s cases: %.1f s\n", tlm_precision_name(mode), now_s() - t0);
    }

    /* 3b, 3c */
    test_layouts(only, 80);
    test_layouts(only, 32);

    /* 4 */
    const double t_large = now_s();
    if (!only) test_large();
    printf("# large case: %.1f s\n", now_s() - t_large);
    /* 4b */
    if (!only) test_split();
    /* 4c: the plain run only, and not when TLM_FLASH_TILES is set for the whole test (4c would override it) */
    if (!tlm_knob_changed(TLM_KNOB_FLASH_SM90) && !tlm_knob_changed(TLM_KNOB_FLASH_TILES)) test_tiles(only != NULL);

    printf("worst errors against float64, normalized (L in tf32: RMS) (tolerances fp32 %.0e, bf16 %.0e, fp16 %.0e, "
           "tf32 %.0e; L fp32 %.0e, bf16/fp16 %.0e, tf32 %.0e):\n",
           F32_TOL, BF16_TOL, F16_TOL, TF32_TOL, F32_LSE_TOL, LOWP_LSE_TOL, TF32_LSE_TOL);
    for (int t = 0; t < 4; t++)
        for (int e = 0; e < 5; e++)
            printf("  %s %-2s %.2e  (%s)\n", tlm_precision_name(modes[t]), tensor_name[e], worst[t][e],
                   worst_case[t][e]);
    if (tf32_ran)
        check(tf32_least_o > F32_TOL,
              "tf32 cases on 16-byte rows ran the TF32 kernels: the least O error, %.1e, is above fp32's %.0e",
              tf32_least_o, F32_TOL);

    /* 5. last: fp32 rows that are not 16-byte aligned (a kernel that needs them aligned dies here) */
    printf("# next: fp32 rows not 16-byte aligned (ld_qkv = 3C+1 and C+1, ld_out = C+3)\n");
    fflush(stdout);
    run_case(&(fa_case){2, 33, 33, 2, 64, true, TLM_PRECISION_FP32, true, 1, 3, false}, &rng);
    run_case(&(fa_case){2, 40, 70, 2, 80, true, TLM_PRECISION_FP32, false, 1, 3, false}, &rng);
    run_case(&(fa_case){1, 100, 100, 3, 16, false, TLM_PRECISION_FP32, true, 3, 1, false}, &rng);
    /* tf32 on the same rows: the exact kernels (fp32's tolerances) */
    run_case(&(fa_case){2, 33, 33, 2, 64, true, TLM_PRECISION_TF32, true, 1, 3, false}, &rng_tf32);
    run_case(&(fa_case){1, 100, 100, 3, 128, false, TLM_PRECISION_TF32, false, 2, 2, false}, &rng_tf32);

    check(test_bytes_held(gpu) == 0, "every test buffer freed (%zu bytes still allocated)", test_bytes_held(gpu));
    tlm_backend_destroy(gpu);
    printf("time %.1f s\n", now_s() - t_start);
    return test_finish();
}
