/* model_flash_checks.h — the whole model with FlashAttention-2 against the same model with the
 * naive attention, shared by the CPU test (test_model_flash.c, in CI) and the GPU test
 * (test_gpu_model_flash.c). Both attentions compute the same function, so on the same weights
 * (seeded CS336 init) and batch (seeded tokens) one forward and backward must agree:
 *
 * - fp32: loss, logits and every gradient within MF_F32_TOL. The two differ only in the order of
 *   fp32 sums (the online softmax rescales, the backward recomputes P from the logsumexp): ~1e-7
 *   per op, a few 1e-7 after two layers and the lm_head; 1e-5 is the fixture tests' bound and
 *   far below a wrong mask, scale or layout (O(1)).
 * - tf32, bf16, fp16: each attention rounds at different points (naive: S, P, dP, dS to the mode's
 *   dtype, as autocast, or its GEMM operands to TF32; CUDA flash: P and dS before its
 *   tensor-core products, and in tf32 every operand; CPU flash: only its outputs, and nothing in
 *   tf32, which the CPU computes as fp32), so they differ by the mode's rounding, not by fp32
 *   round-off. The criterion is accuracy, measured against the fp32 naive run: flash in a mode
 *   must be no further from fp32 than MF_LOWP_FACTOR x the naive attention's distance in the
 *   same mode (what PyTorch autocast computes), plus a floor of u/8, u the mode's unit roundoff
 *   (bf16 2^-8, fp16 and tf32 2^-11), for quantities where naive's errors happen to cancel (the
 *   loss, a mean over all positions: seen at 7e-8 in fp16), or vanish (tf32 on the CPU: naive
 *   is fp32 exactly, flash 1e-7 from it). Measured on the CPU (tiny, context 32 and 100): naive bf16 is 2e-5..3e-5
 *   from fp32 in the loss, 4.5e-3 in the logits, 1.1e-2 in the worst gradient, flash 0.9x..1.3x
 *   that; fp16 8x smaller. The flash-naive distance itself is printed (by the triangle inequality
 *   it is at most 3x naive's distance + the floor).
 * - CUDA graphs (backends that have them): the flash passes captured and replayed give the eager
 *   run's loss, logits and gradients (within 1e-6 / 1e-5: the dQ accumulation's atomics, and
 *   split-KV's dK, dV atomics, may differ in the last bits from run to run; in tf32, bf16 and
 *   fp16 the gradients within u/2 instead, u the mode's unit roundoff: the GEMMs after those
 *   sums round their operands to the mode, which turns a last-bit difference into up to u in an
 *   element; tf32 on the H100, d_head 64 at context 256 with split pieces of 64 queries: 8.4e-5).
 *   A capture that replays the wrong thing is O(1) off.
 * - memory (the step's buffers, src/model/activations.h): flash saves (B,H,T) float32 per layer
 *   instead of (B,H,T,T) dt and needs tlm_flash_workspace_floats(B,T,H,D) float32 instead of a
 *   (B,H,T,T) dt dP scratch: the activation buffers' bytes differ by exactly that. */
#ifndef TLM_TESTS_MODEL_FLASH_CHECKS_H
#define TLM_TESTS_MODEL_FLASH_CHECKS_H

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fixture_checks.h"
#include "model/activations.h"
#include "tlm/rng.h"

#define MF_F32_TOL 1e-5    /* fp32: flash vs naive, loss, logits and each gradient */
#define MF_LOWP_FACTOR 2.0 /* bf16/fp16: flash's distance to fp32 <= 2 x naive's + floor */
#define MF_GRAPH_TOL 1e-5  /* graphs on vs off, fp32 (gradients; loss and logits 1e-6) */

/* a model shape and a batch shape */
typedef struct {
    const char *name;
    tlm_config cfg;
    int B, T;
} mf_shape;

/* the tiny preset at batch 2 and context T, with d_model, num_heads and d_ff as given (0: the
 * preset's) */
static inline mf_shape mf_tiny(const char *name, int T, int d_model, int num_heads, int d_ff) {
    mf_shape s = {.name = name, .B = 2, .T = T};
    die_on(tlm_config_preset("tiny", &s.cfg), "tiny");
    s.cfg.context_length = T;
    if (d_model) s.cfg.d_model = d_model;
    if (num_heads) s.cfg.num_heads = num_heads;
    if (d_ff) s.cfg.d_ff = d_ff;
    return s;
}

/* what one run leaves, on the host */
typedef struct {
    float loss;
    float *logits;            /* (B*T*V) float32 (widened from bf16/fp16) */
    float *grads;             /* (flat_numel), divided by the loss scale they carry (fp16) */
    size_t n_logits;
    size_t act_bytes;         /* bytes of the step's activation buffers, each counted once */
    int num_tensors;
    tlm_tensor_info *tensors; /* the model's table: per-tensor gradient errors */
} mf_out;

static inline void mf_free(mf_out *o) {
    free(o->logits);
    free(o->grads);
    free(o->tensors);
    memset(o, 0, sizeof *o);
}


/* `passes` forward+backward passes of a fresh model (init seed 1234, tokens seed 99) run as `run`
 * says; the last pass's loss, logits and gradients. Without AdamW every pass computes the same;
 * with run->optimizer_in_backward or _overlap each pass updates the weights, and `grads` holds the
 * fp32 weights after the last (optimizer_in_backward has no gradient buffer; the overlapped updates
 * are waited for by tlm_model_adamw_step, called after each backward). With graphs, pass 1 is eager, pass 2
 * captured, pass 3 on replays (model.h). */
static inline mf_out mf_run_with(tlm_backend *be, const mf_shape *s, const tlm_run_config *run, int passes) {
    mf_out o;
    memset(&o, 0, sizeof o);
    tlm_model *m;
    die_on(tlm_model_create(&m, &s->cfg, run, be), s->name);
    die_on(tlm_model_init_random(m, 1234), "init");
    const size_t N = (size_t)s->B * s->T, V = (size_t)s->cfg.vocab_size;
    int32_t *x = malloc(N * sizeof(int32_t)), *y = malloc(N * sizeof(int32_t));
    uint64_t st = tlm_rng_stream(99, 7);
    for (size_t i = 0; i < N; i++) {
        x[i] = (int32_t)tlm_rng_below(&st, V);
        y[i] = (int32_t)tlm_rng_below(&st, V);
    }
    o.n_logits = N * V;
    o.logits = malloc(o.n_logits * sizeof(float));
    o.grads = malloc(m->layout.flat_numel * sizeof(float));
    for (int i = 0; i < passes; i++) {
        die_on(tlm_model_forward(m, x, y, s->B, s->T, &o.loss), "forward");
        if (i == passes - 1) die_on(tlm_model_copy_logits(m, o.logits), "logits");
        die_on(tlm_model_backward(m), "backward");
        if (run->optimizer_overlap) {
            const tlm_adamw_config opt = tlm_adamw_defaults();
            die_on(tlm_model_adamw_step(m, &opt), "the overlapped updates");
        }
    }
    const bool updates = run->optimizer_in_backward || run->optimizer_overlap;
    tlm_copy_to_host(be, o.grads, updates ? m->params : m->grads, m->layout.flat_numel * sizeof(float));
    tlm_synchronize(be);
    if (!updates) {
        float grads_scale;
        tlm_model_grad_factors(m, &grads_scale, NULL);
        for (size_t i = 0; i < m->layout.flat_numel; i++) o.grads[i] /= grads_scale;
    }
    o.act_bytes = tlm_activations_bytes(m->acts, TLM_MEM_ACTIVATIONS);
    o.num_tensors = m->layout.num_tensors;
    o.tensors = malloc((size_t)m->layout.num_tensors * sizeof *o.tensors);
    memcpy(o.tensors, m->layout.tensors, (size_t)m->layout.num_tensors * sizeof *o.tensors);
    tlm_model_free(m);
    free(x);
    free(y);
    return o;
}

/* mf_run_with in mode p with attention a, graphs on or off, no recompute, no AdamW */
static inline mf_out mf_run(tlm_backend *be, const mf_shape *s, tlm_precision p, tlm_attention a, bool graphs,
                            int passes) {
    const tlm_run_config run = {.precision = p, .attention = a, .cuda_graphs = graphs};
    return mf_run_with(be, s, &run, passes);
}

/* a's distance to the reference b: loss (relative), logits (normalized), gradients (normalized,
 * the worst tensor) */
typedef struct {
    double loss, logits, grads;
    char worst[64];
} mf_err;

static inline mf_err mf_error(const mf_out *a, const mf_out *b) {
    mf_err e;
    memset(&e, 0, sizeof e);
    e.loss = fabs((double)a->loss - b->loss) / fabs((double)b->loss);
    if (!isfinite(a->loss)) e.loss = INFINITY;
    e.logits = tlm_rel_error_f32(a->logits, b->logits, a->n_logits);
    for (int i = 0; i < b->num_tensors; i++) {
        const tlm_tensor_info *t = &b->tensors[i];
        double g = tlm_rel_error_f32(a->grads + t->offset, b->grads + t->offset, t->numel);
        if (!(g <= e.grads)) { /* NaN propagates as the worst */
            e.grads = g;
            snprintf(e.worst, sizeof e.worst, "%s", t->name);
        }
    }
    return e;
}

/* activation bytes flash saves relative to naive (see the header comment) */
static inline double mf_expected_saving(const mf_shape *s, tlm_precision p) {
    const double B = s->B, T = s->T, H = s->cfg.num_heads, L = s->cfg.num_layers;
    const int D = tlm_config_d_head(&s->cfg);
    const double e = (double)tlm_dtype_size(tlm_precision_act_dtype(p));
    return (L + 1) * B * H * T * T * e - L * B * H * T * 4.0 -
           (double)tlm_flash_workspace_floats(s->B, s->T, s->cfg.num_heads, D) * 4.0;
}

/* Every check of the header comment for one shape on `be`. */
static inline void mf_run_shape(tlm_backend *be, const mf_shape *s) {
    char what[192];
    printf("-- %s (batch %d, context %d, d_head %d, %d heads) on %s\n", s->name, s->B, s->T,
           tlm_config_d_head(&s->cfg), s->cfg.num_heads, be->name);
    mf_out n32 = mf_run(be, s, TLM_PRECISION_FP32, TLM_ATTENTION_NAIVE, false, 1);
    mf_out f32 = mf_run(be, s, TLM_PRECISION_FP32, TLM_ATTENTION_FLASH, false, 1);
    mf_err e = mf_error(&f32, &n32);
    snprintf(what, sizeof what, "%s fp32: loss flash %.7f = naive %.7f", s->name, f32.loss, n32.loss);
    check_limit(e.loss <= MF_F32_TOL, what, e.loss, MF_F32_TOL);
    snprintf(what, sizeof what, "%s fp32: logits flash = naive", s->name);
    check_limit(e.logits <= MF_F32_TOL, what, e.logits, MF_F32_TOL);
    snprintf(what, sizeof what, "%s fp32: every gradient flash = naive (worst %s)", s->name, e.worst);
    check_limit(e.grads <= MF_F32_TOL, what, e.grads, MF_F32_TOL);
    const double saving = (double)n32.act_bytes - (double)f32.act_bytes;
    const double want = mf_expected_saving(s, TLM_PRECISION_FP32);
    snprintf(what, sizeof what, "%s fp32: activations %.3f MiB flash vs %.3f MiB naive (saves %.0f B, expect %.0f)",
             s->name, f32.act_bytes / 1048576.0, n32.act_bytes / 1048576.0, saving, want);
    check_limit(saving == want, what, fabs(saving - want), 0);

    const tlm_precision lowp[3] = {TLM_PRECISION_TF32, TLM_PRECISION_BF16, TLM_PRECISION_FP16};
    for (int i = 0; i < 3; i++) {
        const char *mode = tlm_precision_name(lowp[i]);
        const double u = lowp[i] == TLM_PRECISION_BF16 ? 0x1p-8 : 0x1p-11, floor = u / 8;
        mf_out n = mf_run(be, s, lowp[i], TLM_ATTENTION_NAIVE, false, 1);
        mf_out f = mf_run(be, s, lowp[i], TLM_ATTENTION_FLASH, false, 1);
        mf_err en = mf_error(&n, &n32), ef = mf_error(&f, &n32), ex = mf_error(&f, &n);
        printf("       %s %s vs fp32 naive: naive loss %.2e logits %.2e grads %.2e | flash loss %.2e logits %.2e "
               "grads %.2e | flash vs naive loss %.2e logits %.2e grads %.2e\n",
               s->name, mode, en.loss, en.logits, en.grads, ef.loss, ef.logits, ef.grads, ex.loss, ex.logits,
               ex.grads);
        double lim = MF_LOWP_FACTOR * en.loss + floor;
        snprintf(what, sizeof what, "%s %s: loss flash %.5f, naive %.5f, fp32 %.5f: flash as close to fp32", s->name,
                 mode, f.loss, n.loss, n32.loss);
        check_limit(ef.loss <= lim, what, ef.loss, lim);
        lim = MF_LOWP_FACTOR * en.logits + floor;
        snprintf(what, sizeof what, "%s %s: logits, flash as close to fp32 as naive (naive %.2e)", s->name, mode,
                 en.logits);
        check_limit(ef.logits <= lim, what, ef.logits, lim);
        lim = MF_LOWP_FACTOR * en.grads + floor;
        snprintf(what, sizeof what, "%s %s: worst gradient, flash as close to fp32 as naive (naive %.2e; %s)",
                 s->name, mode, en.grads, ef.worst);
        check_limit(ef.grads <= lim, what, ef.grads, lim);
        const double sv = (double)n.act_bytes - (double)f.act_bytes, sw = mf_expected_saving(s, lowp[i]);
        snprintf(what, sizeof what, "%s %s: flash saves %.0f activation bytes (expect %.0f)", s->name, mode, sv, sw);
        check_limit(sv == sw, what, fabs(sv - sw), 0);
        mf_free(&n);
        mf_free(&f);
    }

    if (tlm_backend_has_graphs(be)) {
        const tlm_precision modes[4] = {TLM_PRECISION_FP32, TLM_PRECISION_TF32, TLM_PRECISION_BF16,
                                        TLM_PRECISION_FP16};
        for (int i = 0; i < 4; i++) {
            mf_out eager = mf_run(be, s, modes[i], TLM_ATTENTION_FLASH, false, 3);
            mf_out graph = mf_run(be, s, modes[i], TLM_ATTENTION_FLASH, true, 3);
            mf_err g = mf_error(&graph, &eager);
            snprintf(what, sizeof what, "%s %s flash: CUDA graphs on = off (loss, logits, worst gradient %s)",
                     s->name, tlm_precision_name(modes[i]), g.worst);
            const double u = modes[i] == TLM_PRECISION_BF16 ? 0x1p-8 : 0x1p-11;
            const double grad_tol = modes[i] == TLM_PRECISION_FP32 ? MF_GRAPH_TOL : u / 2;
            check_limit(g.loss <= 1e-6 && g.logits <= 1e-6 && g.grads <= grad_tol, what,
                        fmax(fmax(g.loss, g.logits), g.grads), grad_tol);
            mf_free(&eager);
            mf_free(&graph);
        }
    }
    mf_free(&n32);
    mf_free(&f32);
}

#endif
