/* precision_checks.h — the precision-mode checks of the whole model, shared by the CPU test
 * (test_model_precision.c, in CI) and the GPU test (test_gpu_model_precision.c): on the tiny
 * preset with the PyTorch fixture weights and batch,
 * - tf32/bf16/fp16: 3 AdamW steps track the fp32 run (losses and final weights close);
 * - fp16: an injected overflow (a huge loss scale) skips the step, leaves the weights and the
 *   step count alone and halves the scale; 2000 clean steps double it. */
#ifndef TLM_TESTS_PRECISION_CHECKS_H
#define TLM_TESTS_PRECISION_CHECKS_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fixture_checks.h"

/* the tiny model in mode p (naive attention; CUDA graphs or not) with the fixture weights */
static inline tlm_model *pc_model(tlm_backend *be, const char *dir, tlm_precision p, bool graphs) {
    tlm_config cfg;
    die_on(tlm_config_preset("tiny", &cfg), "tiny");
    const tlm_run_config run = {.precision = p, .attention = TLM_ATTENTION_NAIVE, .cuda_graphs = graphs};
    tlm_model *m;
    die_on(tlm_model_create(&m, &cfg, &run, be), "model");
    char path[1024];
    snprintf(path, sizeof path, "%s/weights.safetensors", dir);
    die_on(tlm_model_load(m, path), path);
    return m;
}

/* 3 steps in `p` from the fixture weights: losses[3] and the final params (host copy) */
static inline float *pc_train(tlm_backend *be, const char *dir, tlm_precision p, bool graphs, float losses[3]) {
    tlm_model *m = pc_model(be, dir, p, graphs);
    int B, T;
    int32_t *x = fx_tokens(dir, "inputs.npy", 512, &B, &T), *y = fx_tokens(dir, "targets.npy", 512, &B, &T);
    tlm_adamw_config opt = tlm_adamw_defaults();
    for (int i = 0; i < 3; i++) {
        die_on(tlm_model_forward(m, x, y, B, T, &losses[i]), "forward");
        die_on(tlm_model_backward(m), "backward");
        die_on(tlm_model_adamw_step(m, &opt), "adamw");
    }
    float *host = malloc(m->layout.flat_numel * sizeof(float));
    tlm_copy_to_host(be, host, m->params, m->layout.flat_numel * sizeof(float));
    free(x);
    free(y);
    tlm_model_free(m);
    return host;
}

/* ||w - w0 - (r - w0)|| / ||r - w0||: the error of the 3-step UPDATE, far more sensitive than
 * comparing the weights themselves */
static inline double pc_update_error(const float *w, const float *r, const float *w0, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double du = (double)w[i] - r[i], dr = (double)r[i] - w0[i];
        num += du * du;
        den += dr * dr;
    }
    return sqrt(num / den);
}

static inline void pc_run_all(tlm_backend *be, const char *dir) {
    float l32[3], l[3];
    float *w32 = pc_train(be, dir, TLM_PRECISION_FP32, false, l32);
    /* the untouched weights, to measure updates; the model for the fp16 checks below */
    tlm_model *m = pc_model(be, dir, TLM_PRECISION_FP16, false);
    const size_t n = m->layout.flat_numel;
    float *w0 = malloc(n * sizeof(float));
    tlm_copy_to_host(be, w0, m->params, n * sizeof(float));
    tlm_synchronize(be);

    const struct { tlm_precision p; const char *name; double loss_tol, update_tol; } modes[] = {
        /* tf32 rounds GEMM operands to 10 mantissa bits: ~1e-3 relative */
        {TLM_PRECISION_TF32, "tf32", 2e-3, 5e-2},
        /* bf16 keeps 8 bits: each rounding ~4e-3; the loss is an average, the update of a
         * near-sign Adam step flips where a gradient is tiny */
        {TLM_PRECISION_BF16, "bf16", 2e-2, 3e-1},
        {TLM_PRECISION_FP16, "fp16", 5e-3, 1.5e-1},
    };
    for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++) {
        float *w = pc_train(be, dir, modes[i].p, false, l);
        double worst = 0;
        for (int s = 0; s < 3; s++) worst = fmax(worst, fabs((double)l[s] - l32[s]) / fabs(l32[s]));
        char what[128];
        snprintf(what, sizeof what, "%s: 3 training losses within %.0e of fp32 (%.4f %.4f %.4f)", modes[i].name,
                 modes[i].loss_tol, l[0], l[1], l[2]);
        check_limit(worst <= modes[i].loss_tol, what, worst, modes[i].loss_tol);
        double e = pc_update_error(w, w32, w0, n);
        snprintf(what, sizeof what, "%s: weight update of 3 AdamW steps close to fp32's", modes[i].name);
        check_limit(e <= modes[i].update_tol, what, e, modes[i].update_tol);
        /* the losses must also decrease, as fp32's do */
        snprintf(what, sizeof what, "%s: loss decreases over the 3 steps", modes[i].name);
        check_limit(l[2] < l[0], what, (double)l[2] - l[0], 0);
        free(w);
    }

    /* CUDA graphs (a no-op on backends without them): 3 steps captured and replayed give the
     * eager run's losses and weights (the embedding gradient's atomics may differ in the last
     * bits on a GPU) */
    for (int bf = 0; bf < 2; bf++) {
        const tlm_precision p = bf ? TLM_PRECISION_BF16 : TLM_PRECISION_FP32;
        float eager_l[3], graph_l[3];
        float *we = pc_train(be, dir, p, false, eager_l);
        float *wg = pc_train(be, dir, p, true, graph_l);
        double worst = 0;
        for (int s = 0; s < 3; s++) worst = fmax(worst, fabs((double)graph_l[s] - eager_l[s]) / fabs(eager_l[s]));
        double e = pc_update_error(wg, we, w0, n);
        char what[128];
        snprintf(what, sizeof what, "%s: CUDA graphs on = off (losses, 3-step update)", bf ? "bf16" : "fp32");
        check_limit(worst <= 1e-6 && e <= 1e-4, what, fmax(worst, e), 1e-4);
        free(we);
        free(wg);
    }

    /* fp16 loss scaling: an injected overflow skips the step */
    int B, T;
    int32_t *x = fx_tokens(dir, "inputs.npy", 512, &B, &T), *y = fx_tokens(dir, "targets.npy", 512, &B, &T);
    tlm_adamw_config opt = tlm_adamw_defaults();
    check_limit(m->scaler.scale == 65536.0f, "fp16: initial loss scale 2^16", m->scaler.scale, 65536.0);
    m->scaler.scale = 1e30f; /* 1e30 / N overflows fp16 (max 65504) in dlogits */
    float loss;
    die_on(tlm_model_forward(m, x, y, B, T, &loss), "forward");
    die_on(tlm_model_backward(m), "backward");
    die_on(tlm_model_adamw_step(m, &opt), "adamw");
    float *w = malloc(n * sizeof(float));
    tlm_copy_to_host(be, w, m->params, n * sizeof(float));
    tlm_synchronize(be);
    check_limit(m->scaler.last_step_skipped && m->scaler.skipped_steps == 1, "fp16: overflow -> step skipped",
             (double)m->scaler.skipped_steps, 1);
    check_limit(m->scaler.scale == 5e29f, "fp16: overflow -> scale halved", m->scaler.scale, 5e29);
    check_limit(memcmp(w, w0, n * sizeof(float)) == 0 && m->optimizer.t == 0, "fp16: skipped step leaves weights and t",
             (double)m->optimizer.t, 0);
    m->scaler.scale = 65536.0f;
    m->scaler.growth_tracker = 1999;
    die_on(tlm_model_forward(m, x, y, B, T, &loss), "forward");
    die_on(tlm_model_backward(m), "backward");
    die_on(tlm_model_adamw_step(m, &opt), "adamw");
    check_limit(!m->scaler.last_step_skipped && m->optimizer.t == 1, "fp16: clean step taken", (double)m->optimizer.t, 1);
    check_limit(m->scaler.scale == 131072.0f && m->scaler.growth_tracker == 0, "fp16: 2000th clean step doubles the scale",
             m->scaler.scale, 131072.0);
    free(w);
    free(x);
    free(y);
    free(w0);
    free(w32);
    tlm_model_free(m);
}

#endif
