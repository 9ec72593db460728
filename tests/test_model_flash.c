/* test_model_flash.c — FlashAttention-2 in the model, on the CPU backend:
 * 1. the CPU backend's flash ops (ops.def: flash_attention_*) are the fp32 reference with its
 *    default tiles: in fp32 and tf32 (fp32 on the CPU) bit for bit the reference on the same
 *    tensors; in bf16/fp16 bit for
 *    bit the reference on the widened inputs with its outputs rounded to nearest even; on the
 *    fused q|k|v layout with padded rows (ld_qkv = 3C + 5, ld_out = C + 3), whose padding and
 *    other thirds stay untouched; a NULL workspace accepted. The device supports them as the
 *    REFERENCE (correct, not what auto picks): any d_head >= 1 in F32, BF16, F16; d_head 0 and
 *    F64 unsupported, with a message.
 * 2. choosing the attention: names, parsing, auto = naive on the CPU, a device without flash
 *    kernels (its supports says none) refused with a message and the model left as it was, a
 *    switch between naive and flash on a model that holds activations.
 * 3. the whole model, flash against naive (model_flash_checks.h says what and why): the tiny
 *    preset (context 32, d_head 16), context 100 (not a multiple of the 64-row tiles) with
 *    d_head 16 and with d_head 32, in fp32, tf32, bf16 and fp16.
 * The PyTorch fixture test with flash is in test_model_fixture.c. */
#include "model_flash_checks.h"
#include "test_check.h"

#include "cpu/cpu_ops.h"
#include "model/activations.h"
#include "tlm/flash_attention.h"

/* ---- 1. the ops ---------------------------------------------------------------------------- */

/* a (rows, ld) tensor of dt elements: the first `cols` of each row normal random numbers,
 * rounded to dt; the rest of each row a sentinel (NaN) */
static void *rand_rows(uint64_t *st, size_t rows, int ld, int cols, tlm_dtype dt) {
    const size_t es = tlm_dtype_size(dt);
    void *p = malloc(rows * ld * es);
    float *row = malloc((size_t)ld * sizeof(float));
    for (size_t r = 0; r < rows; r++) {
        for (int c = 0; c < ld; c++) row[c] = c < cols ? (float)tlm_rng_normal(st) : NAN;
        tlm_cpu_narrow(p, r * ld, row, (size_t)ld, dt);
    }
    free(row);
    return p;
}

static void *copy_of(const void *p, size_t bytes) {
    void *q = malloc(bytes);
    memcpy(q, p, bytes);
    return q;
}

/* The op in mode p on (q|k|v fused, padded) against the reference on the widened tensors, rounded. */
static void test_ops_mode(tlm_backend *be, tlm_precision p) {
    const int B = 2, T = 37, H = 3, D = 16, C = H * D, ldq = 3 * C + 5, ldo = C + 3;
    const tlm_dtype dt = tlm_precision_act_dtype(p);
    const size_t rows = (size_t)B * T, es = tlm_dtype_size(dt);
    const tlm_flash_tiles tiles = tlm_flash_cpu_default_tiles();
    const char *dn = tlm_precision_name(p);
    uint64_t st = tlm_rng_stream(5, (uint64_t)dt);
    void *qkv = rand_rows(&st, rows, ldq, 3 * C, dt), *dout = rand_rows(&st, rows, ldo, C, dt);
    void *out = rand_rows(&st, rows, ldo, 0, dt);      /* all NaN: the op writes the C columns */
    void *dqkv = rand_rows(&st, rows, ldq, 0, dt);
    const void *q = (const char *)qkv, *k = (const char *)qkv + C * es, *v = (const char *)qkv + 2 * C * es;
    float *lse = malloc((size_t)B * H * T * sizeof(float));

    /* the reference on float32 copies (NaN padding included: it must not read it) */
    float *q32 = malloc(rows * ldq * sizeof(float)), *do32 = malloc(rows * ldo * sizeof(float));
    float *o32 = malloc(rows * ldo * sizeof(float)), *dqkv32 = malloc(rows * ldq * sizeof(float));
    float *lse32 = malloc((size_t)B * H * T * sizeof(float));
    for (size_t i = 0; i < rows * ldo; i++) o32[i] = NAN;
    tlm_cpu_widen(q32, qkv, 0, rows * ldq, dt);
    tlm_cpu_widen(do32, dout, 0, rows * ldo, dt);
    tlm_flash_attention_forward_cpu(o32, lse32, q32, q32 + C, q32 + 2 * C, ldq, ldo, B, T, T, H, D, true, tiles.Br,
                                    tiles.Bc);
    tlm_cpu_round(o32, rows * ldo, dt); /* what the op's rounding to dt gives */
    tlm_flash_attention_forward(be, out, lse, q, k, v, ldq, ldo, B, T, T, H, D, true, p);
    float *got = malloc(rows * ldq * sizeof(float));
    tlm_cpu_widen(got, out, 0, rows * ldo, dt);
    size_t diff = 0, pad_bad = 0;
    for (size_t r = 0; r < rows; r++)
        for (int c = 0; c < ldo; c++) {
            const float g = got[r * ldo + c], w = o32[r * ldo + c];
            if (c < C) diff += memcmp(&g, &w, sizeof g) != 0;
            else pad_bad += !isnan(g);
        }
    diff += memcmp(lse, lse32, (size_t)B * H * T * sizeof(float)) != 0;
    check(diff == 0 && pad_bad == 0, "flash_attention_forward %s (fused ld 3C+5, ld_out C+3, T 37): bit for bit "
          "the reference%s (%zu differ, %zu padding written)", dn, dt == TLM_DTYPE_F32 ? "" : " on widened inputs, rounded",
          diff, pad_bad);

    /* backward: out is the op's (rounded) output, as the model passes it */
    tlm_cpu_widen(o32, out, 0, rows * ldo, dt);
    for (size_t i = 0; i < rows * ldq; i++) dqkv32[i] = NAN;
    tlm_flash_attention_backward_cpu(dqkv32, dqkv32 + C, dqkv32 + 2 * C, do32, q32, q32 + C, q32 + 2 * C, o32, lse,
                                     ldq, ldo, B, T, T, H, D, true, tiles.Br, tiles.Bc);
    tlm_cpu_round(dqkv32, rows * ldq, dt);
    void *qkv_before = copy_of(qkv, rows * ldq * es);
    tlm_flash_attention_backward(be, dqkv, (char *)dqkv + C * es, (char *)dqkv + 2 * C * es, NULL, dout, q, k,
                                      v, out, lse, ldq, ldo, B, T, T, H, D, true, p);
    tlm_cpu_widen(got, dqkv, 0, rows * ldq, dt);
    diff = pad_bad = 0;
    for (size_t r = 0; r < rows; r++)
        for (int c = 0; c < ldq; c++) {
            const float g = got[r * ldq + c], w = dqkv32[r * ldq + c];
            if (c < 3 * C) diff += memcmp(&g, &w, sizeof g) != 0 || !isfinite(g);
            else pad_bad += !isnan(g);
        }
    const bool inputs_kept = memcmp(qkv, qkv_before, rows * ldq * es) == 0;
    check(diff == 0 && pad_bad == 0 && inputs_kept,
          "flash_attention_backward %s (dq|dk|dv fused, workspace NULL): bit for bit the reference (%zu differ, "
          "%zu padding written, inputs %s)", dn, diff, pad_bad, inputs_kept ? "kept" : "CHANGED");
    free(qkv);
    free(qkv_before);
    free(dout);
    free(out);
    free(dqkv);
    free(lse);
    free(q32);
    free(do32);
    free(o32);
    free(dqkv32);
    free(lse32);
    free(got);
}

static void test_ops(tlm_backend *be) {
    test_ops_mode(be, TLM_PRECISION_FP32);
    test_ops_mode(be, TLM_PRECISION_TF32);
    test_ops_mode(be, TLM_PRECISION_BF16);
    test_ops_mode(be, TLM_PRECISION_FP16);
    const tlm_op_id fwd = TLM_OP_FLASH_ATTENTION_FORWARD, bwd = TLM_OP_FLASH_ATTENTION_BACKWARD;
    check(tlm_backend_supports(be, fwd, TLM_DTYPE_F32, 16) == TLM_SUPPORT_REFERENCE &&
              tlm_backend_supports(be, fwd, TLM_DTYPE_BF16, 7) == TLM_SUPPORT_REFERENCE &&
              tlm_backend_supports(be, bwd, TLM_DTYPE_F16, 1) == TLM_SUPPORT_REFERENCE &&
              tlm_backend_supports(be, bwd, TLM_DTYPE_F32, 256) == TLM_SUPPORT_REFERENCE,
          "supports (cpu): flash with d_head 16, 7, 1, 256 in F32, BF16, F16, as the reference");
    tlm_support s = tlm_backend_supports(be, fwd, TLM_DTYPE_F32, 0);
    check(s == TLM_SUPPORT_NONE && strstr(tlm_last_error(), "d_head 0"), "d_head 0 unsupported: %s",
          tlm_last_error());
    s = tlm_backend_supports(be, bwd, TLM_DTYPE_F64, 64);
    check(s == TLM_SUPPORT_NONE && strstr(tlm_last_error(), "F64"), "F64 unsupported: %s", tlm_last_error());
}

/* ---- 2. choosing the attention --------------------------------------------------------------- */

static tlm_support no_flash_supports(tlm_backend *be, tlm_op_id op, tlm_dtype dt, int d_head) {
    if (op != TLM_OP_FLASH_ATTENTION_FORWARD && op != TLM_OP_FLASH_ATTENTION_BACKWARD) return TLM_SUPPORT_FAST;
    tlm_fail(TLM_ERR_UNSUPPORTED, "test device: no FlashAttention-2 kernels");
    return TLM_SUPPORT_NONE;
}

static void test_choice(tlm_backend *be) {
    tlm_attention a = TLM_ATTENTION_AUTO;
    check(tlm_attention_parse("flash", &a) && a == TLM_ATTENTION_FLASH && tlm_attention_parse("naive", &a) &&
              a == TLM_ATTENTION_NAIVE && tlm_attention_parse("auto", &a) && a == TLM_ATTENTION_AUTO &&
              !tlm_attention_parse("Flash", &a) && !tlm_attention_parse("", &a),
          "attention names parse: flash, naive, auto (and nothing else)");
    tlm_config cfg;
    die_on(tlm_config_preset("tiny", &cfg), "tiny");
    check(tlm_attention_resolve(be, &cfg, TLM_PRECISION_BF16, TLM_ATTENTION_AUTO) == TLM_ATTENTION_NAIVE,
          "auto on the CPU is naive (its flash is the fp32 reference)");
    tlm_model *m;
    die_on(tlm_model_create(&m, &cfg, NULL, be), "model");
    die_on(tlm_model_init_random(m, 3), "init");
    check(m->run.attention == TLM_ATTENTION_NAIVE, "a new model on the CPU has the naive attention (auto)");

    /* switching with activations live: the layout follows, the loss does not change */
    int32_t x[2 * 16], y[2 * 16];
    for (int i = 0; i < 32; i++) x[i] = i * 37 % cfg.vocab_size, y[i] = i * 11 % cfg.vocab_size;
    float l_naive, l_flash, l_back;
    die_on(tlm_model_forward(m, x, y, 2, 16, &l_naive), "forward");
    const tlm_activations *acts = m->acts;
    const bool had_probs = acts->layers[0].probs && !acts->layers[0].lse && acts->d_probs && !acts->flash_workspace;
    die_on(tlm_model_set_attention(m, TLM_ATTENTION_FLASH), "flash");
    die_on(tlm_model_forward(m, x, y, 2, 16, &l_flash), "forward");
    acts = m->acts;
    const bool has_lse = !acts->layers[1].probs && acts->layers[1].lse && !acts->d_probs && acts->flash_workspace;
    die_on(tlm_model_backward(m), "backward");
    die_on(tlm_model_set_attention(m, TLM_ATTENTION_AUTO), "auto");
    die_on(tlm_model_forward(m, x, y, 2, 16, &l_back), "forward");
    check(had_probs && has_lse && m->run.attention == TLM_ATTENTION_NAIVE && m->acts->layers[0].probs,
          "switching naive -> flash -> auto (naive) reallocates: probs and d_probs, or lse and the workspace");
    check(fabsf(l_flash - l_naive) <= 1e-5f * fabsf(l_naive) && l_back == l_naive,
          "loss naive %.7f, flash %.7f, naive again %.7f", l_naive, l_flash, l_back);

    /* a device without flash kernels (a CPU backend whose supports says none) */
    tlm_backend_iface no_flash = *be->iface;
    no_flash.supports = no_flash_supports;
    const tlm_backend_iface *saved = be->iface;
    be->iface = &no_flash;
    tlm_status s = tlm_model_set_attention(m, TLM_ATTENTION_FLASH);
    check(s == TLM_ERR_UNSUPPORTED && strstr(tlm_last_error(), "no FlashAttention-2") &&
              m->run.attention == TLM_ATTENTION_NAIVE,
          "flash on a device without the kernels refused, model unchanged: %s", tlm_last_error());
    s = tlm_attention_check(be, &cfg, TLM_PRECISION_FP32, TLM_ATTENTION_NAIVE);
    check(s == TLM_OK, "naive needs nothing of the backend beyond its attention op");
    be->iface = saved;
    s = tlm_model_set_attention(m, (tlm_attention)7);
    check(s == TLM_ERR_INVALID_ARGUMENT, "an attention outside the enum is refused: %s", tlm_last_error());
    tlm_model_free(m);
}

/* ---- 3. the model -------------------------------------------------------------------------- */

int main(void) {
    tlm_backend *be = test_backend();
    test_ops(be);
    test_choice(be);
    const mf_shape shapes[3] = {mf_tiny("tiny", 32, 0, 0, 0), mf_tiny("tiny ctx100", 100, 0, 0, 0),
                                mf_tiny("tiny ctx100 d32", 100, 0, 2, 0)};
    for (int i = 0; i < 3; i++) mf_run_shape(be, &shapes[i]);
    tlm_backend_destroy(be);
    return test_finish();
}
